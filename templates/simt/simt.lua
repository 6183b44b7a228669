-- simt.lua
-- The SIMT family: FlashAttention forward on CUDA cores, fp32 and fp64,
-- and fp16 and bf16 (computed in fp32) where no tensor-core kernel is:
-- head dims over 256, and bf16 on GPUs without bf16 tensor cores.
-- Declares the axes, the defaults, the enumeration and pruning rules, the
-- derived thread mapping and shared-memory plan, and renders simt.cu.

local simt = { name = "simt", version = 3 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

simt.title = "CUDA cores"
simt.targets = "any"
simt.rank = 3        -- after the tensor-core families: the space's last resort
simt.preludes = enum.preludes

-- fp32 runs on every GPU.
function simt.default_dtype() return "fp32", "fp32 on CUDA cores" end

-- Names: simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem[-causal][-varlen].
simt.axes = {
  enum_axis("dtype", { "fp32", "fp64", "fp16", "bf16" }, { fp32 = "f32", fp64 = "f64", fp16 = "f16" }),
  int_axis("dim", 1, 576, { prefix = "d" }),
  enum.dim_v_axis(576),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 1, 256, { prefix = "m" }),
  int_axis("block_n", 1, 256, { prefix = "n" }),
  int_axis("warps", 1, 32, { prefix = "w" }),
  enum_axis("norm", { "eager", "deferred" }),
  enum_axis("par", { "q_outer", "kv_outer" }, { q_outer = "qouter", kv_outer = "kvouter" }),
  enum_axis("split", { "split_q", "split_k" }, { split_q = "splitq", split_k = "splitk" }),
  enum_axis("layout", { "row", "pad", "kt" }),
  enum_axis("q", { "smem", "reg" }, { prefix = "q" }),
  enum.varlen_axis(),
}
simt.axis = enum.index(simt.axes)
simt.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "warps" }, { "norm" }, { "par" },
                { "split" }, { "layout" }, { "q" }, { "causal" }, { "varlen" } }

-- Head dims over 256 take 8 x 8 tiles, which fit 64 KB of shared memory
-- (sm_75) up to head dim 512 in fp32.
function simt.defaults(problem)
  local big = math.max(problem.dim or 64, problem.dim_v or 0) > 256
  return {
    dtype = problem.dtype or "fp32", dim = problem.dim or 64, dim_v = enum.dim_v(problem),
    causal = problem.causal or 0, varlen = problem.varlen or 0,
    block_m = big and 8 or 64, block_n = big and 8 or 32, warps = big and 2 or 4, norm = "deferred",
    par = "q_outer", split = "split_q", layout = "pad", q = "smem",
  }
end

-- What warps and Q's place may take when the defaults do not fit the keys
-- given (a tile of two rows needs fewer warps).
simt.fallbacks = { warps = { 4, 2, 1, 8, 16, 32 }, q = { "smem", "reg" } }

function simt.supports(problem)
  return problem.dtype ~= nil
end

-- The dtypes this family lists only where no family before it lists a
-- variant: 16-bit inputs belong on the tensor cores wherever they run.
simt.last_resort = { fp16 = true, bf16 = true }

-- How the kernel reads Q, K, V and writes O per dtype: the element type and
-- the load and store, as formats of an address (and a value). 16-bit
-- values are converted to fp32 on load and rounded to nearest even on
-- store; everything else (shared memory, the softmax, O's accumulator,
-- lse) is fp32.
local io_of = {
  fp32 = { elem = "float", ldg = "fa_ldg_f32(%s)", ld = "fa_ld_f32(%s)", st = "fa_st_f32(%s, %s)" },
  fp64 = { elem = "double", ldg = "fa_ldg_f64(%s)", ld = "fa_ld_f64(%s)", st = "fa_st_f64(%s, %s)" },
  fp16 = { elem = "unsigned short", ldg = "fa_f16_to_f32(fa_ldg_u16(%s))",
           ld = "fa_f16_to_f32(fa_ldg_u16(%s))", st = "fa_st_u16(%s, fa_f32_to_f16(%s))" },
  bf16 = { elem = "unsigned short", ldg = "fa_bf16_to_f32(fa_ldg_u16(%s))",
           ld = "fa_bf16_to_f32(fa_ldg_u16(%s))", st = "fa_st_u16(%s, fa_f32_to_bf16(%s))" },
}
local function io_bytes(c) return (c.dtype == "fp16" or c.dtype == "bf16") and 2 or nil end

-- Derived plan ------------------------------------------------------------

local function cdiv(a, b) return (a + b - 1) // b end

-- Per-thread work of a (rows x cols) micro-tile layout with `gc` lanes per
-- row, head dims d (Q K^T) and dv (P V): FMAs plus shared-memory loads per
-- K/V block. Lower is better.
local function tile_cost(bm_rows, ncols, d, dv, gc, rows_per_pass)
  local rm, rn, rd = cdiv(bm_rows, rows_per_pass), cdiv(ncols, gc), cdiv(dv, gc)
  local work = d * rm * rn + ncols * rm * rd + d * (rm + rn) + ncols * (rm + rd)
  -- Rows past the tile are computed and thrown away: charge for them.
  return work * (rm * rows_per_pass) / bm_rows, rm, rn, rd
end

-- Lanes per row within a warp: the power of two from 1 to 32 with the least
-- per-thread cost; `groups` row groups of 32/gc rows run side by side.
local function choose_lanes(rows, ncols, d, dv, groups)
  local best
  for _, gc in ipairs({ 32, 16, 8, 4, 2, 1 }) do
    local cost, rm, rn, rd = tile_cost(rows, ncols, d, dv, gc, groups * (32 // gc))
    if not best or cost < best.cost then best = { cost = cost, gc = gc, rm = rm, rn = rn, rd = rd } end
  end
  return best
end

local function words(c) return c.dtype == "fp64" and 2 or 1 end

-- Everything the template needs beyond the config itself.
function simt.plan(c)
  local P = { D = c.dim, DV = enum.vdim(c), BM = c.block_m, BN = c.block_n, W = c.warps, NT = 32 * c.warps }
  P.esize = c.dtype == "fp64" and 8 or 4
  local pad = (c.layout == "pad") and 1 or 0
  if c.split == "split_q" then
    local t = choose_lanes(c.block_m, c.block_n, c.dim, P.DV, c.warps)
    P.G, P.RM, P.RN, P.RD = t.gc, t.rm, t.rn, t.rd
    P.RSTEP = c.warps * (32 // t.gc)       -- rows between a thread's rows
    P.BMp = P.RM * P.RSTEP
    P.NWp = P.RN * t.gc                     -- columns one thread group spans
    P.BNp = P.NWp
  else
    local nw = cdiv(c.block_n, c.warps)
    local t = choose_lanes(c.block_m, nw, c.dim, P.DV, 1)
    P.G, P.RM, P.RN, P.RD = t.gc, t.rm, t.rn, t.rd
    P.RSTEP = 32 // t.gc
    P.BMp = P.RM * P.RSTEP
    P.NWp = P.RN * t.gc
    P.BNp = P.NWp * c.warps
    -- Owners of the O tile after the cross-warp reduction.
    local best
    for _, oc in ipairs({ 32, 16, 8, 4, 2, 1 }) do
      local otr = P.NT // oc
      local orm, ord = cdiv(c.block_m, otr), cdiv(P.DV, oc)
      local cost = orm * ord
      if not best or cost < best.cost then best = { cost = cost, oc = oc, otr = otr, orm = orm, ord = ord } end
    end
    P.OC, P.OTR, P.ORM, P.ORD = best.oc, best.otr, best.orm, best.ord
  end
  -- Shared memory plan, in elements. K and V keep block_n rows: a thread
  -- group's score columns past them (BNp > block_n, when the lanes of a
  -- row outnumber the block's keys) read the last row, and are masked.
  P.KVR = math.min(P.BNp, c.block_n)
  P.QS = c.dim + pad
  if c.layout == "kt" then P.KSN, P.KSD = 1, P.KVR else P.KSN, P.KSD = c.dim + pad, 1 end
  P.VS = P.DV + pad
  P.PS = P.BNp + pad
  local off = 0
  local function take(n) local at = off; off = off + n; return at end
  P.off_q = take(P.BMp * P.QS)
  P.off_k = take(P.KVR * c.dim + (c.layout == "kt" and 0 or P.KVR * pad))
  P.off_v = take(P.KVR * P.VS)
  P.off_p = take(P.BMp * P.PS)
  if c.split == "split_k" then
    P.off_redm = take(c.warps * P.BMp)
    P.off_redl = take(c.warps * P.BMp)
    P.off_redo = take(c.warps * P.BMp * P.DV)
    P.off_rowm = take(P.BMp)
    P.off_rowl = take(P.BMp)
    P.off_sco = take(P.BMp)
    -- Only eager scales the new P (by 1/l_new); deferred leaves it as it is.
    if c.norm == "eager" then P.off_scp = take(P.BMp) end
  end
  P.smem_bytes = off * P.esize
  -- Registers, in 32-bit words, as the template holds them.
  local acc = P.RM * P.RN + P.RM * P.RD + 4 * P.RM + P.RM + math.max(P.RN, P.RD)
  if c.split == "split_k" then acc = acc + P.ORM * P.ORD end
  if c.q == "reg" then acc = acc + P.RM * c.dim end
  P.reg_words = acc * words(c) + 24
  -- Partial unrolling of the run-time loops keeps NVRTC fast (see README).
  local function unroll(per_iter) return math.max(1, math.min(8, 64 // math.max(1, per_iter))) end
  P.UD = unroll(P.RM * P.RN)
  P.UN = unroll(P.RM * P.RD)
  return P
end

-- Constraints ---------------------------------------------------------------

-- Whether config `c` can run on `target`; false and the reason otherwise.
function simt.fits(c, _, target)
  local P = simt.plan(c)
  if P.NT > target.max_threads then return false, "too many threads" end
  if c.split == "split_q" and c.warps > c.block_m then
    return false, "split_q needs a row per warp (warps <= block_m)"
  end
  if c.split == "split_k" and c.warps > c.block_n then
    return false, "split_k needs a column per warp (warps <= block_n)"
  end
  if c.split == "split_k" and c.warps == 1 then return false, "split_k needs two warps or more" end
  if io_bytes(c) and c.par ~= "q_outer" then
    return false, "16-bit O is written once (q_outer): kv_outer would round it at every K/V block"
  end
  if P.smem_bytes > target.smem then return false, "shared memory over the limit" end
  if P.reg_words > 255 then return false, "registers over 255 per thread" end
  if c.q == "reg" and P.RM * c.dim * words(c) > 128 then
    return false, "Q rows too large to hold in registers"
  end
  return true
end

-- Enumeration ---------------------------------------------------------------

local function next_pow2(n) local p = 1; while p < n do p = p * 2 end; return p end

local function cross(base, axes, out) enum.cross(simt.axes, base, axes, out) end

-- The default space is what is worth timing on a GPU: FlashAttention-2's
-- structure over a range of tiles, both normalizations and layouts, Q in
-- registers or shared memory; and FlashAttention-1's structure (kv_outer,
-- split_k) at a few tiles, for comparison. "full" is the whole product;
-- "small" is the fallback when no default tile fits the target.
function simt.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0, varlen = problem.varlen or 0 }
  local out = {}
  if which == "full" then
    local tiles = { 1, 2, 3, 4, 8, 16, 32, 64, 128 }
    cross(base, { block_m = tiles, block_n = tiles, warps = { 1, 2, 4, 8 },
                  norm = { "eager", "deferred" }, par = { "q_outer", "kv_outer" },
                  split = { "split_q", "split_k" }, layout = { "row", "pad", "kt" },
                  q = { "smem", "reg" } }, out)
    return out
  end
  if which == "small" then
    -- Rows over 2 KB (fp64 past head dim 256) take tiles of 4 rows and one
    -- warp too (a warp spans fewer padding rows), so that Q, K and V fit
    -- 100 KB up to head dim 512.
    local big = math.max(problem.dim, problem.dim_v or 0) * (problem.dtype == "fp64" and 8 or 4) > 2048
    cross(base, { block_m = big and { 4, 8, 16 } or { 8, 16, 32 },
                  block_n = big and { 4, 8, 16 } or { 8, 16, 32 }, warps = big and { 1, 2, 4 } or { 2, 4 },
                  norm = { "deferred", "eager" }, par = { "q_outer" }, split = { "split_q" },
                  layout = { "pad", "kt" }, q = { "smem" } }, out)
    return out
  end
  local cap = math.max(16, next_pow2(math.max(problem.seq_q or 4096, 1)))
  local function tiles(list)
    local t = {}
    for _, v in ipairs(list) do if v <= cap then t[#t + 1] = v end end
    if #t == 0 then t[1] = list[1] end
    return t
  end
  cross(base, { block_m = tiles({ 32, 64, 128 }), block_n = { 32, 64 }, warps = { 4, 8 },
                norm = { "deferred", "eager" }, par = { "q_outer" }, split = { "split_q" },
                layout = { "pad", "kt" }, q = { "smem", "reg" } }, out)
  cross(base, { block_m = tiles({ 32, 64 }), block_n = { 32, 64 }, warps = { 4 },
                norm = { "deferred", "eager" }, par = { "kv_outer" }, split = { "split_q", "split_k" },
                layout = { "pad" }, q = { "smem" } }, out)
  cross(base, { block_m = tiles({ 32, 64 }), block_n = { 32, 64 }, warps = { 4 },
                norm = { "deferred", "eager" }, par = { "q_outer" }, split = { "split_k" },
                layout = { "pad" }, q = { "smem" } }, out)
  return out
end

-- The analytic model ------------------------------------------------------

-- What the kernel of config c costs on problem {seq_q, seq_k, batch, heads}:
-- a list of {name, count} pairs, exact for the emulator (simt_model.lua).
function simt.predict(c, problem)
  return require("simt_model").predict(c, simt.plan(c), problem)
end

-- What `fatune explore` sweeps (simt_explore.lua).
simt.explore = require("simt_explore")

-- Rendering -----------------------------------------------------------------

simt.op = "fwd"
simt.mods = true     -- applies score and mask modifications (mod.lua)

function simt.render(c)
  local P = simt.plan(c)
  local args = { cfg = c, P = P, entry = simt.name_of(c):gsub("-", "_"),
                 T = c.dtype == "fp64" and "f64" or "f32",
                 acc = c.dtype == "fp64" and "double" or "float", io = io_of[c.dtype] }
  return {
    source = render("simt.cu", args),
    launches = {
      -- q_outer: one CTA per block_m rows; kv_outer: one CTA per (batch, head),
      -- its running m and l in a workspace.
      { entry = args.entry, threads = P.NT, smem_bytes = P.smem_bytes,
        grid = { c.par == "q_outer" and { "seq_q", c.block_m } or 1, "heads", "batch" },
        workspaces = c.par == "kv_outer" and { { name = "m_l", bytes_per_row = 2 * P.esize } } or {} },
    },
    registers_estimate = P.reg_words,
    io_align = io_bytes(c) or P.esize,  -- one element at a time
  }
end

return simt
