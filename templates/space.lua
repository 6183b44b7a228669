-- space.lua
-- The search space: families, their axes, canonical names and hashes, and
-- the enumeration of configs for a problem and a target.
--
-- A config is a table of axis values. Its canonical text is `k=v,...` over
-- the family's keys in their declared order; its name is the family's
-- human-readable form (e.g. simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem);
-- its hash is FNV-1a 64 of the canonical text, 12 hex digits. All three are
-- pure functions of the config, so they are stable across runs and machines.
--
-- A family is a folder of the templates, <name>/ holding the module
-- <name>/<name>.lua and whatever else it needs (its kernel template, its
-- cost model); every such folder is a family, found when the space loads.
-- A problem's space holds every family that computes its dtype and runs on
-- its target, in the order of their rank (families_for); a config that
-- names no family takes the first of them (pick).
--
-- The family interface ------------------------------------------------------
-- A family is a module (a table) of these fields; check_family enforces the
-- required ones when the families are registered, below. A problem is a
-- table {dtype = "fp16", dim = 64, causal = 0|1, op = "fwd" (the default
-- when absent), dim_v (V's and O's head dim, only when it is not dim), and,
-- where known, seq_q, seq_k, batch, heads}; a target is
-- {arch = "sm_90", smem = bytes per block, max_threads = threads per block}
-- (space.target).
--
--   name       string: the family's name, the first token of its variant
--              names and the value of `family=` in canonical text.
--   op         string: the operation its kernels compute, one of space.ops:
--              "fwd" (the forward pass: O and the logsumexp), "bwd" (the
--              backward pass), "decode" (split-KV decoding). Listing and
--              rendering for a problem consider only the families of the
--              problem's op.
--   version    integer: the template version, bumped when the kernels a
--              config renders change (recorded with every result).
--   title      string: what it computes on, in a few words ("tensor
--              cores"), for messages.
--   targets    "any" (every arch the space knows) or the list of the archs
--              it runs on ({"sm_90a"}); a target outside them fits none of
--              its configs.
--   rank       integer: the order of the families of one problem (lowest
--              first): listings, and the family a config naming none takes
--              (the lowest rank that computes its dtype; with no dtype
--              known, the highest rank, the last resort).
--   default_dtype(target) -> dtype or nil, why: the dtype it would have
--              the target tuned when none is asked for, or nil; why is a
--              sentence either way. space.default_dtype asks the families
--              of the target in rank order and takes the first dtype.
--   preludes   table backend -> list of embedded file names, for "cuda"
--              and "emu": what the host pastes before the kernel body, in
--              order (after fa_params.h, and fa_counters.h and emu_abi.h on the
--              emulator).
--   axes       list of axes, in canonical order. An axis is {key = "name",
--              kind = "int", min = a, max = b} or {key = "name", kind =
--              "enum", values = {"a", "b", ...}} (enum.int_axis,
--              enum.enum_axis), with an optional token table: how a value
--              reads in names, token[value] where given, else
--              (token.prefix or "") .. value; "" leaves it out; and an
--              optional absent value, which canonical text leaves out (an
--              axis added later keeps the hashes of configs from before).
--              It must hold dtype, dim, dim_v (enum.dim_v_axis: 0 when V's
--              head dim is dim, which is how configs always hold that
--              case) and causal, the problem's own axes; the dtype axis's
--              values are the dtypes the family computes.
--   axis       table key -> axis, the lookup of `axes` (enum.index).
--   naming     list of name parts, each a list of axis keys: a variant's
--              name is the family's name and each part's tokens, joined
--              without separator, the parts by "-"; an empty part is left
--              out. Every axis is in exactly one part. space.name_of and
--              space.parse_name derive names from it, and give the family
--              name_of(config) when it registers.
--   defaults(problem) -> config: every axis set, dtype, dim, dim_v and
--              causal from the problem where it has them; what an unset key of a
--              `k=v,...` text takes.
--   supports(problem) -> boolean: whether the family handles the problem
--              (its dtype).
--   enumerate(problem, which) -> list of configs: "default" (worth
--              timing), "full" (the whole cross product) or "small" (the
--              fallback when nothing of "default" fits the target); pruned
--              afterwards by fits.
--   fits(config, problem, target) -> ok, why: whether the config can run
--              on the target (threads, shared memory, registers, its own
--              rules); problem may be nil; why is a sentence when not ok.
--   plan(config) -> table (optional): what the template needs beyond the
--              config (tile counts, shared-memory layout, register
--              estimate); the family's own, for its render and predict.
--   render(config) -> {source, launches, registers_estimate, io_align}:
--              source is the kernel body (the host adds the preludes)
--              defining every launch's extern "C" entry through FA_KERNEL;
--              registers_estimate the template's own count of 32-bit
--              registers per thread; io_align the bytes Q, K, V and O must
--              be aligned to (the widest global access the kernel makes to
--              them). launches are the kernels one run of the op launches,
--              in order (1 to space.MAX_LAUNCHES; the backward pass has
--              three, decoding two): a variant is all of them. A launch is
--                {entry = "name", threads = per CTA (1 to 1024),
--                 smem_bytes = dynamic shared memory per CTA,
--                 grid = {x, y, z}, workspaces = {...},
--                 heavy_first = true (optional: the kernel takes its
--                 query blocks from the last down, so that under a causal
--                 mask each (batch, head)'s CTAs with the most K/V blocks
--                 come first in launch order),
--                 main = true (optional, on one launch: the op's main
--                 kernel, whose compiler report and occupancy a result
--                 records; the first launch when none is marked),
--                 persistent = true (optional: the kernel loops over the
--                 grid's tiles, x fastest, by fa_grid_x(); the host
--                 flattens the grid into x and launches at most the CTAs
--                 the device holds at once),
--                 role = what a launch other than the main one does, where
--                 the timing model must know it (optional): "dq" (the
--                 backward pass's dQ = dS K, a CTA per query block),
--                 "kv_sum" (sums dK's and dV's float shares over each GQA
--                 group), "v_transpose" (writes V transposed)}
--              where each grid dimension is a function of the problem:
--                n (a positive integer)  n
--                "heads", "batch"        the problem's
--                "kv_heads"              its K/V heads (heads / kv_group under
--                                        GQA and MQA, else heads): fa_bid_y()
--                                        is then a K/V head
--                {"seq_q", n}            ceil(seq_q / n): n query rows per CTA
--                {"seq_k", n}            ceil(seq_k / n)
--                {"kv_rows", n}          kv_heads * ceil(kv_group * seq_q / n):
--                                        n query rows of one K/V head's
--                                        group per CTA (decoding)
--              and each workspace is {name = "m_l", bytes_per_row = n}:
--              n bytes of global memory per (batch, head, query row) (with
--              rows = "seq_k": per key row; with row_align = a, the rows
--              rounded up to a multiple of a; with grouped = true, none
--              unless query heads share K/V heads: GQA's alone), which
--              the host allocates before the first launch and frees after
--              the last; launches naming the same workspace share it (with
--              the same size). The forward pass's parameter block
--              (fa_params.ws) carries at most one.
--              The result may also say deterministic = false: its
--              kernels add across CTAs with atomics, so two runs may differ
--              in the last bits (validation then runs them on one OS
--              thread, where the CTAs keep one order); true when absent.
--              And ldsm_ways = n (optional, 1 to 32; 1 when absent): each
--              ldmatrix reads shared memory n times over, its rows on the
--              same banks (the timing model takes the reads one after
--              the other).
--              And red_lines = n (optional, 1 to 64; a coalesced warp's
--              count when absent): the 128-byte lines each warp-wide
--              global atomic add touches, by its addresses' pattern (the
--              timing model charges L2's atomic units per line).
--   fallbacks  table key -> list of values (optional): what a key left out
--              of `k=v,...` text may take, in order of preference, when the
--              defaults do not fit the keys given (space.render_config).
--   predict(config, problem) -> list of {name, count} (optional): the
--              analytic cost model on problem (seq_q, seq_k, batch, heads):
--              counts the emulator's counters should equal ("gmem_read",
--              ...), then the model's reference figures.
--   explore    table (optional): what `fatune explore` sweeps, one axis at a
--              time around the defaults (space.explore_plan). Its fields:
--                axes      list of {name = "norm", title = sentence, points =
--                          {{label, config}, ...} (two to four, the
--                          FlashAttention-1 or simpler side first; config
--                          is `k=v,...` text of the family's keys that
--                          differs between the points in this axis only),
--                          why = what the axis moves and why, and optional
--                          key = {counter} or {counter, counter}: the
--                          counter (the sum of two) the axis is about, with
--                          key_label, its name in the effect line};
--                counters  list of the counters (FA_EMU_COUNTERS fields,
--                          counters.lua) the tables compare with the model;
--                model, kernel  file names in the family's folder of its
--                          cost model and kernel template, for a flag's
--                          message (model: none where the family has no
--                          predict; its counters are then shown measured);
--                paper     boolean (optional): the FlashAttention paper's
--                          global-memory bounds and peak memory follow the
--                          tables (fp32 problems);
--                dtypes    list (optional): the dtypes its cost model
--                          counts; absent, every dtype of the family's.
--              The first family of a problem on a target (families_for)
--              that declares it is the one explore runs.
local space = {}

local required = {
  name = "string", op = "string", version = "number", title = "string", rank = "number",
  preludes = "table", default_dtype = "function", axes = "table", axis = "table",
  naming = "table", defaults = "function", supports = "function", enumerate = "function",
  fits = "function", render = "function",
}
local optional = {
  plan = "function", predict = "function", fallbacks = "table", explore = "table",
  last_resort = "table",
}

-- Shared memory per block (opt-in maximum, bytes) and threads, per arch.
local arch_limits = {
  sm_75 = 65536, sm_80 = 166912, sm_86 = 101376, sm_87 = 166912,
  sm_89 = 101376, sm_90 = 232448, sm_90a = 232448, sm_100 = 232448,
  sm_100a = 232448, sm_103 = 232448, sm_110 = 232448, sm_120 = 101376,
  sm_120a = 101376, sm_121 = 101376,
}

-- The arch the space targets when no GPU says otherwise.
space.default_arch = "sm_90"

-- Every embedded file, as a set.
local embedded = {}
for _, name in ipairs(template_names()) do embedded[name] = true end

-- Whether family fam runs on arch.
function space.runs_on(fam, arch)
  if fam.targets == "any" then return arch_limits[arch] ~= nil end
  for _, a in ipairs(fam.targets) do if a == arch then return true end end
  return false
end

-- Whether family fam computes dtype (its dtype axis holds it).
local function computes(fam, dtype)
  for _, v in ipairs(fam.axis.dtype.values or {}) do if v == dtype then return true end end
  return false
end

-- Raise through fail where fam's naming or tokens are malformed.
local function check_naming(fam, fail)
  local seen = {}
  for i, part in ipairs(fam.naming) do
    if type(part) ~= "table" or #part == 0 then fail("name part " .. i .. " is no list of axis keys") end
    for _, key in ipairs(part) do
      if not fam.axis[key] then fail("name part " .. i .. " names no axis '" .. tostring(key) .. "'") end
      if seen[key] then fail("axis '" .. key .. "' is named twice") end
      seen[key] = true
    end
  end
  for _, axis in ipairs(fam.axes) do
    if not seen[axis.key] then fail("axis '" .. axis.key .. "' is in no name part") end
    for k, v in pairs(axis.token or {}) do
      if type(v) ~= "string" or v:find("-", 1, true) then
        fail("axis '" .. axis.key .. "': the token of '" .. tostring(k) .. "' is no string without '-'")
      end
    end
  end
end

-- The operations a family may compute (the C side's fa_op, whose names
-- gen_open checks against these).
space.ops = { "fwd", "bwd", "decode" }
local known_op = {}
for _, op in ipairs(space.ops) do known_op[op] = true end

-- Raise unless the family's op is a known one.
local function check_op(id, fam)
  if not known_op[fam.op] then
    error(string.format("family '%s': op '%s' is none of %s", id, tostring(fam.op),
                        table.concat(space.ops, ", ")), 0)
  end
end

local counters = require("counters")

-- Raise through fail where the config text of an explore point names a key
-- fam lacks or is malformed.
local function check_point_config(fam, text, fail)
  for item in (text .. ","):gmatch("([^,]*),") do
    local k = item:match("^([%w_]+)=[^=]+$")
    if not k or not fam.axis[k] then fail("config '" .. text .. "' names no axis of the family") end
  end
end

-- Raise through fail where fam's explore plan is malformed.
local function check_explore(fam, e, fail)
  local function need(v, kind, what)
    if type(v) ~= kind then fail("explore: " .. what .. " is no " .. kind) end
  end
  for _, field in ipairs({ "model", "kernel" }) do
    if field == "model" and not fam.predict then
      if e.model ~= nil then fail("explore: 'model' names a cost model the family has no predict for") end
    else
      need(e[field], "string", "'" .. field .. "'")
      if not embedded[fam.name .. "/" .. e[field]] then
        fail("explore: " .. field .. " '" .. e[field] .. "' is no file of the family's folder")
      end
    end
  end
  if e.paper ~= nil then need(e.paper, "boolean", "'paper'") end
  need(e.counters, "table", "'counters'")
  if #e.counters == 0 then fail("explore: 'counters' lists none") end
  local listed = {}
  for _, name in ipairs(e.counters) do
    if not counters[name] then fail("explore: no counter '" .. tostring(name) .. "' in fa_counters.h") end
    listed[name] = true
  end
  need(e.axes, "table", "'axes'")
  if #e.axes == 0 then fail("explore: 'axes' lists none") end
  local names = { all = true }   -- `--axis all` asks for every axis
  for i, a in ipairs(e.axes) do
    need(a, "table", "axis " .. i)
    for _, field in ipairs({ "name", "title", "why" }) do need(a[field], "string", "axis " .. i .. "'s " .. field) end
    local what = "explore axis '" .. a.name .. "'"
    if not a.name:match("^[%w_]+$") or names[a.name] then fail(what .. ": no fresh word for a name") end
    names[a.name] = true
    need(a.points, "table", what .. "'s points")
    if #a.points < 2 or #a.points > 4 then fail(what .. ": two to four points") end
    for _, pt in ipairs(a.points) do
      if type(pt) ~= "table" or type(pt[1]) ~= "string" or type(pt[2]) ~= "string" then
        fail(what .. ": a point is no {label, config}")
      end
      check_point_config(fam, pt[2], function(m) fail(what .. ": " .. m) end)
    end
    if (a.key == nil) ~= (a.key_label == nil) then fail(what .. ": key and key_label go together") end
    if a.key ~= nil then
      if type(a.key) ~= "table" or #a.key < 1 or #a.key > 2 then fail(what .. ": key is no list of one or two counters") end
      for _, name in ipairs(a.key) do
        if not listed[name] then fail(what .. ": key counter '" .. tostring(name) .. "' is not in 'counters'") end
      end
      need(a.key_label, "string", what .. "'s key_label")
    end
  end
end

-- Raise, naming the family and the field, where `fam` breaks the interface.
local function check_family(id, fam)
  local function fail(what) error("family '" .. id .. "': " .. what, 0) end
  if type(fam) ~= "table" then fail("the module is no table") end
  for field, kind in pairs(required) do
    if fam[field] == nil then fail("no field '" .. field .. "'") end
    if type(fam[field]) ~= kind then fail("'" .. field .. "' is no " .. kind) end
  end
  for field, kind in pairs(optional) do
    if fam[field] ~= nil and type(fam[field]) ~= kind then fail("'" .. field .. "' is no " .. kind) end
  end
  if fam.name ~= id then fail("its name is '" .. tostring(fam.name) .. "'") end
  if math.type(fam.rank) ~= "integer" then fail("'rank' is no integer") end
  if fam.targets ~= "any" then
    if type(fam.targets) ~= "table" or #fam.targets == 0 then
      fail("'targets' is neither \"any\" nor a list of archs")
    end
    for _, arch in ipairs(fam.targets) do
      if not arch_limits[arch] then fail("target '" .. tostring(arch) .. "' is no arch the space knows") end
    end
  end
  for backend in pairs(fam.preludes) do
    if backend ~= "cuda" and backend ~= "emu" then
      fail("preludes for '" .. tostring(backend) .. "', no backend (cuda, emu)")
    end
  end
  for _, backend in ipairs({ "cuda", "emu" }) do
    local list = fam.preludes[backend]
    if type(list) ~= "table" then fail("no preludes for the " .. backend .. " backend") end
    for _, file in ipairs(list) do
      if not embedded[file] then fail(backend .. " prelude '" .. tostring(file) .. "' is no template file") end
    end
  end
  for i, axis in ipairs(fam.axes) do
    local key = type(axis) == "table" and axis.key
    if type(key) ~= "string" then fail("axis " .. i .. " has no key") end
    if axis.kind == "int" then
      if math.type(axis.min) ~= "integer" or math.type(axis.max) ~= "integer" or axis.min > axis.max then
        fail("int axis '" .. key .. "' needs integers min <= max")
      end
    elseif axis.kind == "enum" then
      if type(axis.values) ~= "table" or #axis.values == 0 then
        fail("enum axis '" .. key .. "' has no values")
      end
    else
      fail("axis '" .. key .. "' is of no kind (int or enum)")
    end
    if fam.axis[key] ~= axis then fail("axis['" .. key .. "'] is not axes[" .. i .. "]") end
  end
  for _, key in ipairs({ "dtype", "dim", "dim_v", "causal" }) do
    if not fam.axis[key] then fail("no axis '" .. key .. "'") end
  end
  check_naming(fam, fail)
  if fam.explore then check_explore(fam, fam.explore, fail) end
  for arch in pairs(arch_limits) do
    if space.runs_on(fam, arch) then
      local dtype, why = fam.default_dtype({ arch = arch })
      if type(why) ~= "string" or (dtype ~= nil and not computes(fam, dtype)) then
        fail("default_dtype on " .. arch .. " gives no dtype of its own and a sentence")
      end
    end
  end
  check_op(id, fam)
  return fam
end

space.check_family = check_family

-- The families: every folder <name>/ holding <name>/<name>.lua, by rank.
local families, order = {}, {}
for _, file in ipairs(template_names()) do
  local folder, base = file:match("^([%w_]+)/([%w_]+)%.lua$")
  if folder and folder == base then
    local fam = check_family(folder, require(folder .. "/" .. folder))
    fam.name_of = function(cfg) return space.name_of(fam, cfg) end
    families[folder], order[#order + 1] = fam, fam
  end
end
table.sort(order, function(a, b) return a.rank < b.rank or (a.rank == b.rank and a.name < b.name) end)
space.families, space.order = families, order

-- The target for an arch name; nil and a message when unknown.
function space.target(arch, smem, max_threads)
  local limit = arch_limits[arch]
  if not limit then return nil, "unknown arch '" .. tostring(arch) .. "'" end
  return { arch = arch, smem = smem and smem > 0 and smem or limit,
           max_threads = max_threads and max_threads > 0 and max_threads or 1024 }
end

-- Every arch the space has a target for, sorted by name.
function space.archs()
  local names = {}
  for arch in pairs(arch_limits) do names[#names + 1] = arch end
  table.sort(names)
  return names
end

function space.fnv1a(text)
  local h = -3750763034362895579  -- 0xcbf29ce484222325 as a signed integer
  for i = 1, #text do
    h = h ~ text:byte(i)
    h = h * 1099511628211
  end
  return h
end

function space.hash(fam, cfg)
  return string.format("%016x", space.fnv1a(space.canonical(fam, cfg))):sub(1, 12)
end

function space.family(name)
  local fam = families[name]
  if not fam then error("unknown family '" .. tostring(name) .. "'", 0) end
  return fam
end

function space.canonical(fam, cfg)
  local parts = { "family=" .. fam.name }
  for _, axis in ipairs(fam.axes) do
    if axis.absent == nil or cfg[axis.key] ~= axis.absent then
      parts[#parts + 1] = axis.key .. "=" .. tostring(cfg[axis.key])
    end
  end
  return table.concat(parts, ",")
end

-- cfg with V's head dim as configs hold it: 0 when it is dim (dim_v=128
-- with dim=128 is the same kernel as dim_v left out, and has one name).
local function normalize(cfg)
  if cfg.dim_v == cfg.dim then cfg.dim_v = 0 end
  return cfg
end

-- Check one value of an axis; returns the normalized value or raises.
local function axis_value(axis, v)
  if axis.kind == "int" then
    local n = math.tointeger(tonumber(v))
    if not n or n < axis.min or n > axis.max then
      error(string.format("%s must be an integer from %d to %d, not '%s'",
                          axis.key, axis.min, axis.max, tostring(v)), 0)
    end
    return n
  end
  for _, allowed in ipairs(axis.values) do
    if tostring(v) == allowed then return allowed end
  end
  error(string.format("%s must be one of %s, not '%s'", axis.key,
                      table.concat(axis.values, "|"), tostring(v)), 0)
end

-- The families of a problem on a target (either may be nil: any), in rank
-- order: those of the problem's op (fwd when it names none, or without a
-- problem) that compute its dtype and run on the target.
local function families_for(problem, target)
  local op = problem and problem.op or "fwd"
  local out = {}
  for _, fam in ipairs(order) do
    if fam.op == op and (not problem or computes(fam, problem.dtype))
       and (not target or space.runs_on(fam, target.arch))
       and (not problem or problem.varlen ~= 1 or fam.axis.varlen)
       and (not problem or problem.paged ~= 1 or fam.axis.paged)
       and (not problem or problem.blockscale ~= 1 or fam.axis.blockscale) then
      out[#out + 1] = fam
    end
  end
  return out
end
space.families_for = families_for

-- "no family computes op bwd in fp16 on sm_80 yet (simtbwd computes fp32,
-- fp64)": what does compute op (on target's arch, when given).
function space.none_computes(op, dtype, target)
  local offer = {}
  for _, fam in ipairs(order) do
    if fam.op == op and (not target or space.runs_on(fam, target.arch)) then
      offer[#offer + 1] = fam.name .. " computes " .. table.concat(fam.axis.dtype.values, ", ")
    end
  end
  return string.format("no family computes op %s in %s%s yet%s", op, tostring(dtype),
                       target and " on " .. target.arch or "",
                       #offer > 0 and " (" .. table.concat(offer, "; ") .. ")" or "")
end

-- The names of the families of op with the addressing axis key (varlen,
-- paged), in rank order.
function space.families_with(op, key)
  local out = {}
  for _, fam in ipairs(order) do
    if fam.op == (op or "fwd") and fam.axis[key] then out[#out + 1] = fam.name end
  end
  return out
end

-- The family a config that names none takes: the first of op's (fwd when
-- nil) that computes dtype (and runs on target, when given); with no
-- dtype, the op's last resort.
local function pick(dtype, target, op)
  op = op or "fwd"
  if dtype == nil then
    for i = #order, 1, -1 do if order[i].op == op then return order[i] end end
    error("no family computes op '" .. op .. "'", 0)
  end
  local fams = families_for({ dtype = dtype, op = op }, target)
  if #fams == 0 then fams = families_for({ dtype = dtype, op = op }) end
  if #fams == 0 then error(space.none_computes(op, dtype, target), 0) end
  return fams[1]
end
space.pick = pick

-- The dtype to tune on target when none is asked for, and a sentence why:
-- the first default of the target's families in rank order; the reasons
-- of those before it that have none.
function space.default_dtype(target)
  local whynot = {}
  for _, fam in ipairs(families_for(nil, target)) do
    local dtype, why = fam.default_dtype(target)
    if dtype then
      return dtype, #whynot > 0 and table.concat(whynot, "; ") or why
    end
    whynot[#whynot + 1] = why
  end
  error("no family runs on " .. target.arch, 0)
end

-- The arch a device of plain arch `base` ("sm_90") is targeted as: the
-- arch-specific one of the same GPU (base .. "a") where a family runs only
-- there, with a sentence why; else base and nil.
function space.device_arch(base)
  local special = base .. "a"
  for _, fam in ipairs(order) do
    if fam.targets ~= "any" and space.runs_on(fam, special) then
      local others = {}
      for _, f in ipairs(families_for(nil, { arch = base })) do others[#others + 1] = f.name end
      return special, string.format("an %s device runs %s code: the %s family (%s) besides %s",
                                    base, special, fam.name, fam.title, table.concat(others, " and "))
    end
  end
  return base, nil
end

-- Whether fam's explore plan covers dtype: its dtypes, or all of the family's.
local function explores(fam, dtype)
  if not fam.explore.dtypes then return true end
  for _, t in ipairs(fam.explore.dtypes) do
    if t == dtype then return true end
  end
  return false
end

-- The family `fatune explore` runs for a problem on a target: the first
-- of families_for that declares `explore`; raises, saying what explore
-- covers, when none does.
local function explorer(problem, target)
  for _, fam in ipairs(families_for(problem, target)) do
    if fam.explore and not (fam.last_resort and fam.last_resort[problem.dtype])
       and explores(fam, problem.dtype) then
      return fam
    end
  end
  local covers = {}
  for _, fam in ipairs(order) do
    if fam.explore then
      covers[#covers + 1] = string.format("the %s family (op %s, %s on %s)", fam.name, fam.op,
                                          table.concat(fam.explore.dtypes or fam.axis.dtype.values, ", "),
                                          fam.targets == "any" and "any arch" or table.concat(fam.targets, ", "))
    end
  end
  error(string.format("explore covers %s; not op %s in %s on %s", table.concat(covers, " and "),
                      problem.op or "fwd", tostring(problem.dtype), target.arch), 0)
end

-- The explore plan of a problem on a target, flat for the host: the
-- family's name, the config text every point follows ("family=<name>"),
-- the model and kernel as embedded file names, paper, the counters, and
-- per axis its name, title, labels, configs, why, and key as indexes into
-- counters (nil: none) with key_label.
function space.explore_plan(problem, target)
  local fam = explorer(problem, target)
  local e = fam.explore
  local at = {}
  for i, name in ipairs(e.counters) do at[name] = i end
  local axes = {}
  for _, a in ipairs(e.axes) do
    local labels, configs = {}, {}
    for i, pt in ipairs(a.points) do labels[i], configs[i] = pt[1], pt[2] end
    local key = a.key and { at[a.key[1]], at[a.key[#a.key]] }
    axes[#axes + 1] = { name = a.name, title = a.title, labels = labels, configs = configs,
                        why = a.why, key = key, key_label = a.key_label }
  end
  return { family = fam.name, config = "family=" .. fam.name,
           model = e.model and fam.name .. "/" .. e.model or "",
           kernel = fam.name .. "/" .. e.kernel, paper = e.paper == true, counters = e.counters,
           axes = axes }
end

-- Every family's explore axis names, once each, in rank order.
function space.explore_axes()
  local out, seen = {}, {}
  for _, fam in ipairs(order) do
    for _, a in ipairs(fam.explore and fam.explore.axes or {}) do
      if not seen[a.name] then out[#out + 1], seen[a.name] = a.name, true end
    end
  end
  return out
end

-- The modification every render and listing applies (mod.lua), or nil;
-- set by the host (gen_set_mod, space.set_mod) for the problems that follow.
local current_mod

-- Whether cfg of fam fits the target: its targets, then its own rules,
-- which see the current modification as cfg.mod (as render does).
local function fits(fam, cfg, problem, target)
  if not space.runs_on(fam, target.arch) then
    local archs = fam.targets == "any" and "known archs" or table.concat(fam.targets, ", ")
    return false, string.format("the %s family runs only on %s (%s), not %s", fam.name, archs,
                                fam.title, target.arch)
  end
  if current_mod and cfg.mod == nil then
    local c = {}
    for k, v in pairs(cfg) do c[k] = v end
    c.mod = current_mod
    cfg = c
  end
  return fam.fits(cfg, problem, target)
end

-- A full config from `k=v,...` text, unset keys taking the family defaults
-- (the problem's dim, dtype and causal when given). Raises on bad input.
-- Longer config text is refused: no config comes near it.
local MAX_CONFIG_TEXT = 4096

-- s without leading and trailing white space, in linear time (the pattern
-- "^%s*(.-)%s*$" is quadratic in a run of spaces).
local function trim(s)
  local first = s:find("%S")
  if not first then return "" end
  local last = #s
  while s:find("^%s", last) do last = last - 1 end
  return s:sub(first, last)
end

-- The family a config that names none takes for a problem: the first of
-- pick's candidates whose defaults, with their fallbacks, fit the problem
-- on target (fp16 at head dim 512, or bf16 on sm_75, is no tensor-core
-- family's); pick's choice when none fits, so that render says why.
local fit_defaults
local function pick_for(dtype, problem, target)
  local op = (problem or {}).op
  local first = pick(dtype, target, op)
  if not (problem and problem.dim and target and dtype) then return first end
  for _, fam in ipairs(families_for({ dtype = dtype, op = op, varlen = problem.varlen,
                                         paged = problem.paged, blockscale = problem.blockscale },
                                       target)) do
    if fam.axis.dim.max >= problem.dim then
      local cfg = fam.defaults(problem)
      cfg.dtype = dtype
      for _, axis in ipairs(fam.axes) do cfg[axis.key] = axis_value(axis, cfg[axis.key]) end
      fit_defaults(fam, cfg, {}, target)
      if fits(fam, cfg, problem, target) then return fam end
    end
  end
  return first
end

function space.parse_config(text, problem, target)
  if #text > MAX_CONFIG_TEXT then
    error(string.format("config text too long: %d bytes (at most %d)", #text, MAX_CONFIG_TEXT), 0)
  end
  local given = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    item = trim(item)
    if item ~= "" then
      local k, v = item:match("^([%w_]+)%s*=%s*(.-)$")
      if not k or v == "" then error("malformed config item '" .. item .. "' (want key=value)", 0) end
      if given[k] then error("config key '" .. k .. "' given twice", 0) end
      given[k] = v
    end
  end
  local fam = given.family and space.family(given.family)
               or pick_for(given.dtype or (problem or {}).dtype, problem, target)
  given.family = nil
  local cfg = fam.defaults(problem or {})
  for k, v in pairs(given) do
    local axis = fam.axis[k]
    if not axis then
      local hint = ""
      for _, other in ipairs(order) do
        local id = other.name
        if other ~= fam and other.axis[k] then
          hint = string.format(" (family %s has it: family=%s in the config, or a --dtype of %s)",
                               id, id, other.axis.dtype.values and table.concat(other.axis.dtype.values, " or ") or id)
          break
        end
      end
      error("unknown config key '" .. k .. "' for family " .. fam.name .. hint, 0)
    end
    cfg[k] = axis_value(axis, v)
  end
  -- A variable-length batch, or K/V in a KV cache, is the problem's
  -- addressing, whatever the config says (a config tuned on the dense
  -- problem runs it).
  for _, a in ipairs({ { "varlen", "variable-length batches" }, { "paged", "K/V in a KV cache" },
                       { "blockscale", "fp8 descales per block of rows" } }) do
    local key, what = a[1], a[2]
    if problem and problem[key] == 1 and fam.axis[key] then
      cfg[key] = 1
    elseif problem and problem[key] == 1 then
      error(string.format("family %s has no %s (%s); these have: %s", fam.name, what, key,
                          table.concat(space.families_with(problem.op, key), ", ")), 0)
    end
  end
  for _, axis in ipairs(fam.axes) do cfg[axis.key] = axis_value(axis, cfg[axis.key]) end
  return fam, normalize(cfg), given
end

-- Where the defaults do not fit the keys given (block_m=2 with the default
-- 4 warps and split_q), the keys left out take the first combination of
-- the family's fallbacks that fits: cfg changed in place, and a note that
-- says what was chosen and why ("" when the defaults fit).
function fit_defaults(fam, cfg, given, target)
  local ok, why = fits(fam, cfg, nil, target)
  if ok or not fam.fallbacks then return "" end
  local keys = {}
  for _, axis in ipairs(fam.axes) do
    if fam.fallbacks[axis.key] and given[axis.key] == nil then keys[#keys + 1] = axis.key end
  end
  local base = {}
  for _, k in ipairs(keys) do base[k] = cfg[k] end
  local function try(i)
    if i > #keys then return (fits(fam, cfg, nil, target)) end
    for _, v in ipairs(fam.fallbacks[keys[i]]) do
      cfg[keys[i]] = axis_value(fam.axis[keys[i]], v)
      if try(i + 1) then return true end
    end
    cfg[keys[i]] = base[keys[i]]
    return false
  end
  if not try(1) then return "" end   -- render says why the defaults do not fit
  local changed = {}
  for _, k in ipairs(keys) do
    if cfg[k] ~= base[k] then changed[#changed + 1] = k .. "=" .. tostring(cfg[k]) end
  end
  local took = {}
  for _, k in ipairs(keys) do
    if cfg[k] ~= base[k] then took[#took + 1] = k .. "=" .. tostring(base[k]) end
  end
  return string.format("keys left out of the config took %s, not the default %s (%s)",
                       table.concat(changed, ","), table.concat(took, ","), why)
end

-- The name token of value v of axis (integral floats read as integers).
local function token(axis, v)
  if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
  local t = axis.token
  if t and t[v] ~= nil then return t[v] end
  return (t and t.prefix or "") .. tostring(v)
end

-- The name of cfg: the family's name, then each non-empty name part.
function space.name_of(fam, cfg)
  local out = { fam.name }
  for _, part in ipairs(fam.naming) do
    local tokens = {}
    for i, key in ipairs(part) do tokens[i] = token(fam.axis[key], cfg[key]) end
    local text = table.concat(tokens)
    if text ~= "" then out[#out + 1] = text end
  end
  return table.concat(out, "-")
end

-- The values of axis whose token starts name at pos: a list of {value,
-- length}, explicit tokens before prefixed values.
local function token_matches(axis, name, pos)
  local out, t = {}, axis.token or {}
  local function try(v, tok)
    if name:sub(pos, pos + #tok - 1) == tok then out[#out + 1] = { v, #tok } end
  end
  local keys = {}
  for k in pairs(t) do if k ~= "prefix" then keys[#keys + 1] = k end end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do try(k, t[k]) end
  local prefix = t.prefix or ""
  if axis.kind == "enum" then
    for _, v in ipairs(axis.values) do if t[v] == nil then try(v, prefix .. v) end end
  elseif name:sub(pos, pos + #prefix - 1) == prefix then
    local digits = name:match("^%d+", pos + #prefix)
    if digits then out[#out + 1] = { tonumber(digits), #prefix + #digits } end
  end
  return out
end

-- The config fam's name `name` stands for, or nil: the name parts matched
-- in order, each after a "-" or, when all its tokens are empty, left out;
-- the first match whose config names itself back.
local function parse_family_name(fam, name)
  local cfg = {}
  local function part(pi, pos)
    if pi > #fam.naming then
      if pos ~= #name + 1 then return false end
      local copy = {}
      for k, v in pairs(cfg) do copy[k] = v end
      local ok, same = pcall(function()
        copy.dim_v = copy.dim_v or 0
        for _, axis in ipairs(fam.axes) do copy[axis.key] = axis_value(axis, copy[axis.key]) end
        return space.name_of(fam, normalize(copy)) == name
      end)
      if ok and same then cfg = copy end
      return ok and same
    end
    local keys = fam.naming[pi]
    local function key(ki, at, dashed)
      if ki > #keys then
        return (dashed and at > pos + 1 or not dashed and at == pos) and part(pi + 1, at)
      end
      local axis = fam.axis[keys[ki]]
      for _, m in ipairs(token_matches(axis, name, at)) do
        cfg[axis.key] = m[1]
        if key(ki + 1, at + m[2], dashed) then return true end
      end
      cfg[axis.key] = nil
      return false
    end
    if key(1, pos, false) then return true end               -- an empty part
    return name:sub(pos, pos) == "-" and key(1, pos + 1, true)
  end
  return part(1, #fam.name + 1) and cfg or nil
end

function space.parse_name(name)
  local famname = name:match("^(%w+)%-")
  local fam = famname and families[famname]
  if not fam then error("unknown variant '" .. name .. "'", 0) end
  local cfg = parse_family_name(fam, name)
  if not cfg then error("unknown variant '" .. name .. "'", 0) end
  return fam, cfg
end

-- Description of one config for the host: name, hash, canonical text, the
-- family's name and the {key, value} pairs in axis order (values as text),
-- as canonical text has them (an absent value left out).
function space.describe(fam, cfg)
  local pairs_ = {}
  for _, axis in ipairs(fam.axes) do
    if axis.absent == nil or cfg[axis.key] ~= axis.absent then
      pairs_[#pairs_ + 1] = { axis.key, tostring(cfg[axis.key]) }
    end
  end
  -- A variant under a modification is another kernel: its hash says which.
  local hash = space.hash(fam, cfg) .. (current_mod and "-" .. current_mod.hash:sub(1, 12) or "")
  return { name = fam.name_of(cfg), hash = hash, family = fam.name,
           config = space.canonical(fam, cfg), pairs = pairs_ }
end

local function family_offers(op)
  for _, fam in pairs(families) do
    if fam.op == op then return true end
  end
  return false
end

-- The ops some family computes, in space.ops order, as "fwd, decode".
local function ops_offered()
  local offered = {}
  for _, op in ipairs(space.ops) do
    if family_offers(op) then offered[#offered + 1] = op end
  end
  return table.concat(offered, ", ")
end

function space.set_mod(spec, text)
  current_mod = spec and require("mod").load(spec, text) or nil
end

-- Whether fam applies the current modification (none applies always).
local function applies_mod(fam) return current_mod == nil or fam.mods == true end

-- Every config of every family of the problem's op for a problem and a
-- target, pruned. which: "default" (worth timing) or "full" (the whole
-- cross product). Raises when no family computes the op.
function space.list(problem, target, which)
  local op = problem.op or "fwd"
  if not known_op[op] then
    error(string.format("unknown op '%s' (%s)", tostring(op), table.concat(space.ops, ", ")), 0)
  end
  if not family_offers(op) then
    error(string.format("no family offers op %s yet (families offer: %s)", op, ops_offered()), 0)
  end
  local out = {}
  local fams = families_for(problem, target)
  if #fams == 0 and problem.dtype then error(space.none_computes(op, problem.dtype, target), 0) end
  local mod_fams = 0
  for _, fam in ipairs(fams) do
    if applies_mod(fam) then mod_fams = mod_fams + 1 end
  end
  if mod_fams == 0 and #fams > 0 then
    error(string.format("no family of op %s applies modification %s in %s%s yet", op, current_mod.label,
                        tostring(problem.dtype), target and " on " .. target.arch or ""), 0)
  end
  for _, fam in ipairs(fams) do
    if fam.op == op and fam.supports(problem) and applies_mod(fam)
       and not (#out > 0 and fam.last_resort and fam.last_resort[problem.dtype]) then
      local n = #out
      for _, cfg in ipairs(fam.enumerate(problem, which)) do
        if fits(fam, cfg, problem, target) then out[#out + 1] = space.describe(fam, cfg) end
      end
      -- Big head dims in fp64 can overflow shared memory at every default
      -- tile: the default space then falls back to small tiles.
      if which == "default" and #out == n then
        for _, cfg in ipairs(fam.enumerate(problem, "small")) do
          if fits(fam, cfg, problem, target) then out[#out + 1] = space.describe(fam, cfg) end
        end
      end
    end
  end
  if #out == 0 and #fams > 0 and which == "default" then
    -- Say why, in the first family's words about its own defaults.
    local fam = fams[1]
    local _, why = fits(fam, fam.defaults(problem), problem, target)
    local dims = tostring(problem.dim)
    if (problem.dim_v or problem.dim) ~= problem.dim then dims = dims .. "/" .. problem.dim_v end
    error(string.format("no variant of the %s space fits %s for dim %s %s%s", which, target.arch,
                        dims, tostring(problem.dtype), why and ": " .. why or ""), 0)
  end
  return out
end

-- The families whose variants the default space of a problem on a target
-- holds, in rank order (none when it holds none).
function space.families_listed(problem, target)
  local ok, list = pcall(space.list, problem, target, "default")
  local out, seen = {}, {}
  for _, v in ipairs(ok and list or {}) do
    if not seen[v.family] then seen[v.family] = true; out[#out + 1] = families[v.family] end
  end
  return out
end

-- What a family's render returns besides its launches, and their types.
local render_fields = {
  source = "string", registers_estimate = "number", io_align = "number",
}

space.MAX_LAUNCHES = 4   -- the generator's GEN_MAX_LAUNCHES

local function is_count(v) return math.type(v) == "integer" and v >= 1 end

-- Raise unless g is a grid dimension: a positive integer, "heads",
-- "kv_heads", "batch", or {"seq_q", n} / {"seq_k", n} / {"kv_rows", n} with
-- a positive integer n.
local function check_grid_dim(where, g)
  if is_count(g) or g == "heads" or g == "kv_heads" or g == "batch" then return end
  if type(g) == "table" and (g[1] == "seq_q" or g[1] == "seq_k" or g[1] == "kv_rows")
     and is_count(g[2])
     and g[3] == nil then
    return
  end
  error(where .. " is " .. (type(g) == "table" and "a table" or "'" .. tostring(g) .. "'")
        .. ", not a positive integer, \"heads\", \"kv_heads\", \"batch\", {\"seq_q\", n}, "
        .. "{\"seq_k\", n} or {\"kv_rows\", n}", 0)
end

-- Raise unless w is a workspace {name = "...", bytes_per_row = n}, of the
-- same size as any workspace of its name seen before (sizes, by name).
local function check_workspace(where, w, sizes)
  if type(w) ~= "table" or type(w.name) ~= "string" or not w.name:match("^[%w_]+$")
     or not is_count(w.bytes_per_row) or not (w.rows == nil or w.rows == "seq_q" or w.rows == "seq_k")
     or not (w.row_align == nil or (is_count(w.row_align) and w.row_align <= 256))
     or not (w.grouped == nil or type(w.grouped) == "boolean") then
    error(where .. " is no {name = \"identifier\", bytes_per_row = positive integer"
          .. "[, rows = \"seq_q\" or \"seq_k\"][, row_align = 1 to 256][, grouped = boolean]}", 0)
  end
  if sizes[w.name] and sizes[w.name] ~= w.bytes_per_row then
    error(string.format("%s: workspace '%s' has %d bytes per row here, %d in an earlier launch",
                        where, w.name, w.bytes_per_row, sizes[w.name]), 0)
  end
  sizes[w.name] = w.bytes_per_row
end

local LAUNCH_ROLES = { dq = true, kv_sum = true, v_transpose = true }

-- Raise, naming who ("family 'simt': render") and the launch, unless
-- launches is a list of 1 to MAX_LAUNCHES launches as the interface above
-- describes them.
function space.check_launches(who, launches)
  if type(launches) ~= "table" or #launches < 1 or #launches > space.MAX_LAUNCHES then
    error(string.format("%s gives no launches: a list of 1 to %d", who, space.MAX_LAUNCHES), 0)
  end
  local sizes, mains = {}, false
  for i, l in ipairs(launches) do
    local at = string.format("%s: launch %d", who, i)
    if type(l) ~= "table" then error(at .. " is no table", 0) end
    if type(l.entry) ~= "string" or not l.entry:match("^[%a_][%w_]*$") then
      error(at .. ": entry is no identifier", 0)
    end
    if not is_count(l.threads) or l.threads > 1024 then
      error(at .. ": threads is no integer from 1 to 1024", 0)
    end
    if math.type(l.smem_bytes) ~= "integer" or l.smem_bytes < 0 then
      error(at .. ": smem_bytes is no integer >= 0", 0)
    end
    if type(l.grid) ~= "table" or #l.grid ~= 3 then error(at .. ": grid is no {x, y, z}", 0) end
    for d = 1, 3 do check_grid_dim(string.format("%s: grid[%d]", at, d), l.grid[d]) end
    if type(l.workspaces) ~= "table" then error(at .. ": workspaces is no list", 0) end
    if l.heavy_first ~= nil and type(l.heavy_first) ~= "boolean" then
      error(at .. ": heavy_first is no boolean", 0)
    end
    if l.persistent ~= nil and type(l.persistent) ~= "boolean" then
      error(at .. ": persistent is no boolean", 0)
    end
    if l.main ~= nil and l.main ~= true then error(at .. ": main is not true", 0) end
    if l.role ~= nil and not LAUNCH_ROLES[l.role] then
      error(at .. ": role is none of dq, kv_sum, v_transpose", 0)
    end
    if l.role and l.main then error(at .. ": the main launch has a role", 0) end
    if l.main then
      if mains then error(at .. ": a second launch marked main", 0) end
      mains = true
    end
    for j, w in ipairs(l.workspaces) do
      check_workspace(string.format("%s: workspace %d", at, j), w, sizes)
    end
  end
end

-- Render a config into source and launch description, with the config
-- described as space.describe describes it (the host takes the pairs as
-- they are instead of parsing the canonical text again).
function space.render(fam, cfg, target)
  local ok, why = fits(fam, cfg, nil, target)
  if not ok then error("config does not fit the target " .. target.arch .. ": " .. why, 0) end
  local r
  if current_mod then
    if not fam.mods then
      error("family " .. fam.name .. " applies no modification yet (" .. current_mod.label .. ")", 0)
    end
    local c = {}
    for k, v in pairs(cfg) do c[k] = v end
    c.mod = current_mod
    r = fam.render(c)
    r.mod_hash, r.mod_label = current_mod.hash, current_mod.label
  else
    r = fam.render(cfg)
  end
  for field, kind in pairs(render_fields) do
    if type(r[field]) ~= kind or (kind == "number" and math.type(r[field]) ~= "integer") then
      error("family '" .. fam.name .. "': render gives no " .. (kind == "number" and "integer" or kind)
            .. " '" .. field .. "'", 0)
    end
  end
  space.check_launches("family '" .. fam.name .. "': render", r.launches)
  if r.deterministic ~= nil and type(r.deterministic) ~= "boolean" then
    error("family '" .. fam.name .. "': render gives a 'deterministic' that is no boolean", 0)
  end
  if r.ldsm_ways ~= nil and not (math.type(r.ldsm_ways) == "integer" and r.ldsm_ways >= 1
                                 and r.ldsm_ways <= 32) then
    error("family '" .. fam.name .. "': render gives an 'ldsm_ways' that is no integer 1 to 32", 0)
  end
  if r.red_lines ~= nil and not (math.type(r.red_lines) == "integer" and r.red_lines >= 1
                                 and r.red_lines <= 64) then
    error("family '" .. fam.name .. "': render gives a 'red_lines' that is no integer 1 to 64", 0)
  end
  local d = space.describe(fam, cfg)
  r.name, r.hash, r.config, r.pairs = d.name, d.hash, d.config, d.pairs
  r.family, r.template_version, r.preludes = d.family, fam.version, fam.preludes
  r.op = fam.op
  return r
end

-- Raise unless family fam computes the problem's op (fwd when the problem
-- names none); without a problem, any op will do.
local function check_family_op(fam, problem)
  if not problem then return end
  local op = problem.op or "fwd"
  if fam.op ~= op then
    error(string.format("family %s computes op %s, not %s", fam.name, fam.op, op), 0)
  end
end

function space.render_config(text, problem, target)
  local fam, cfg, given = space.parse_config(text, problem, target)
  check_family_op(fam, problem)
  local note = fit_defaults(fam, cfg, given, target)
  local r = space.render(fam, cfg, target)
  r.note = note
  return r
end

function space.render_name(name, target)
  local fam, cfg = space.parse_name(name)
  return space.render(fam, cfg, target)
end

return space
