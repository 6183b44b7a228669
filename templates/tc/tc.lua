-- tc.lua
-- The tensor-core family: FlashAttention-2-class forward kernels for fp16
-- and bf16 (fp32 accumulation) with mma.sync m16n8k16, ldmatrix and cp.async
-- pipelines. Declares the axes, the defaults, the enumeration and pruning
-- rules, the derived plan (fragments, shared-memory layout, register
-- estimate), and renders tc.cu.
--
-- Structure, for every variant: q_outer order (one CTA per block_m query
-- rows and (batch, head)), split_q warps (each warp owns block_m / warps
-- rows, in 16-row m-tiles), S = Q K^T and O += P V on tensor cores, P kept
-- in registers between the two (the C fragment of two adjacent n8 tiles is
-- the A fragment of one k16 step), O in registers, online softmax in exp2.
--
-- Global memory: when the head dim is a multiple of 8, Q, K, V and O move
-- in 16-byte pieces (cp.async in, 16-byte stores out), so their base
-- addresses and row strides must keep rows 16-byte aligned, as contiguous
-- tensors from cudaMalloc (or the emulator's allocations) do; other dims
-- move element by element.

local tc = { name = "tc", version = 4 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

tc.title = "tensor cores"
tc.targets = "any"
tc.rank = 1
tc.preludes = enum.preludes

-- Whether the target has bf16 tensor cores (mma.sync in bf16: sm_80 and
-- newer; Turing's are fp16 only).
function tc.has_bf16(target)
  return tonumber(target.arch:match("^sm_(%d+)")) >= 80
end

-- bf16 where the target has bf16 tensor cores.
function tc.default_dtype(target)
  if tc.has_bf16(target) then return "bf16", target.arch .. " has bf16 tensor cores" end
  return nil, target.arch .. " has no bf16 tensor cores (sm_80 and newer do)"
end

tc.axes = {
  enum_axis("dtype", { "fp16", "bf16" }, { fp16 = "f16" }),
  int_axis("dim", 1, 256, { prefix = "d" }),
  enum.dim_v_axis(256),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 16, 256, { prefix = "m" }),
  int_axis("block_n", 16, 256, { prefix = "n" }),
  int_axis("warps", 1, 8, { prefix = "w" }),
  enum_axis("norm", { "eager", "deferred" }),
  enum_axis("layout", { "row", "pad", "swizzle" }),
  enum_axis("q", { "smem", "reg" }, { prefix = "q" }),
  int_axis("stages", 1, 3, { prefix = "s" }),
  int_axis("q_share", 0, 1, enum.flag("share")),
  -- Key parts per K/V block: 0 lets tc.plan choose (parts and m-tile
  -- groups), n > 0 asks for n parts with all m-tiles together.
  int_axis("parts", 0, 16, { prefix = "p", [0] = "" }),
  -- Deferred normalization's row sums of P: on the tensor cores (P times
  -- a block of ones into one more O tile: no FADD, one HMMA more per k16
  -- step of P V) or with FADD by each thread, as FlashAttention-2 does
  -- (one FADD per score, no HMMA more). Which issues less depends on the
  -- head dim; which runs faster, on what bounds the loop.
  enum_axis("rowsum", { "mma", "fadd" }, { mma = "" }),
  -- The order of softmax and P V within a block (deferred normalization):
  -- FlashAttention-2's, the whole block's P and then P V ("block"), or P
  -- built a k16 step at a time right before that step of P V ("step"),
  -- so that few unpacked exponentials are live at once. Which issues
  -- fewer instructions without spilling is ptxas's call; the tuner sees
  -- both.
  enum_axis("pv", { "block", "step" }, { block = "" }),
  -- The K/V copy's global addresses in the loop: rebuilt every block from
  -- the head's base and the thread index, with nothing of them live
  -- through the loop ("rebuild"), or carried by each thread in a pointer
  -- per tensor stepped down a block at a time, as FlashAttention-2 does
  -- ("carry": fewer instructions, four registers more through the loop).
  enum_axis("kv_addr", { "rebuild", "carry" }, { rebuild = "" }),
  -- A precision axis: S = Q K^T accumulated in f32 or, with fp16 inputs,
  -- in f16 (the mma's f16x2 accumulators, unpacked to f32 for the
  -- softmax). GeForce parts (sm_86, sm_89, sm_120) run the f16-accumulating
  -- mma at twice the f32 one's rate, so half the tensor work runs twice as
  -- fast there; elsewhere the rate is the same. The cost: each logit
  -- rounded to f16 (11 bits) before the scale, and a logit past 65504
  -- (q . k unscaled) is Inf.
  enum_axis("s_acc", { "f32", "f16" }, { f32 = "", f16 = "sacc16" }),
  -- A precision axis: deferred normalization's rescale of O at every new
  -- row max ("always", FlashAttention-2), or lazily ("lazy",
  -- FlashAttention-4): the max moves only when it grows by more than 8 in
  -- log2 units (P then at most 256), and a warp skips O's rescale while
  -- none of its rows moved it, which after the first blocks is nearly
  -- always. The same result up to rounding; P's terms up to 256. The
  -- timing model rates it level with "always" on A100, H100 and the RTX
  -- 4090 (the branch costs what the multiplies did): in the full space,
  -- not the default.
  enum_axis("rescale", { "always", "lazy" }, { always = "", lazy = "lazy" }),
  enum.varlen_axis(),
  enum.paged_axis(),
}
tc.axis = enum.index(tc.axes)

-- Head dims the kernel handles natively; any other pads up to the next.
-- With V's head dim apart from Q's (dim_v: 192/128), both pad to the
-- larger's: Q, K and V rows share one tile geometry, zeros past each
-- tensor's own dim, and O is written to dim_v (P V does the padded share
-- of the work: the banner says what it costs).
tc.native_dims = { 32, 64, 96, 128, 160, 192, 256 }

function tc.padded_dim(d, dv)
  d = math.max(d, dv or 0)
  for _, n in ipairs(tc.native_dims) do if d <= n then return n end end
  return nil
end

-- FlashAttention-2's own tile for a (padded) head dim: block_m, block_n.
function tc.fa2_tile(D)
  if D <= 64 then return 128, 128 elseif D <= 128 then return 128, 64 else return 64, 64 end
end

function tc.defaults(problem)
  local d = problem.dim or 64
  local bm, bn = tc.fa2_tile(tc.padded_dim(d, problem.dim_v) or 256)
  return {
    dtype = problem.dtype or "fp16", dim = d, dim_v = enum.dim_v(problem), causal = problem.causal or 0,
    varlen = problem.varlen or 0, paged = problem.paged or 0, block_m = bm, block_n = bn, warps = 4, norm = "deferred",
    layout = "swizzle", q = "smem", stages = 2, q_share = 0, parts = 0, rowsum = "mma",
    pv = "block", kv_addr = "rebuild", s_acc = "f32", rescale = "always",
  }
end

-- What stages and warps may take when the defaults do not fit the keys
-- given (a wide K/V block needs fewer stages in shared memory).
tc.fallbacks = { stages = { 2, 1, 3 }, warps = { 4, 8 }, layout = { "swizzle", "pad", "row" } }

function tc.supports(problem)
  return problem.dtype == "fp16" or problem.dtype == "bf16"
end

-- Names ---------------------------------------------------------------------
-- tc-f16-d64-m128n128w4-deferred-swizzle-qsmem-s2[-causal]; Q and K sharing
-- shared memory adds "share" after the Q token: ...-qreg-share-s2; key
-- parts asked for add "p<n>" after the stages: ...-s2-p2; row sums by
-- FADD add "fadd" after that: ...-s2-fadd; P V by k16 steps adds "step"
-- after that: ...-s2-fadd-step; carried K/V addresses add "carry" after
-- that: ...-s2-fadd-step-carry; S accumulated in f16 adds "sacc16"
-- after that; lazy rescaling "lazy" after that; a variable-length batch (varlen.lua)
-- ends in "varlen", K/V in a KV cache (paged.lua) in "paged".
tc.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "warps" }, { "norm" }, { "layout" },
              { "q" }, { "q_share" }, { "stages" }, { "parts" }, { "rowsum" }, { "pv" },
              { "kv_addr" }, { "s_acc" }, { "rescale" }, { "causal" }, { "varlen" }, { "paged" } }

-- Derived plan ----------------------------------------------------------------

-- The register estimate (words per thread, below) a variant may reach; see
-- the choice of parts and groups in tc.plan for its calibration.
local register_budget = 256

-- Everything the template needs beyond the config itself. Sizes in bytes
-- unless named otherwise.
function tc.plan(c)
  local padded = tc.padded_dim(c.dim, enum.vdim(c))
  local P = {
    dim = c.dim, dim_v = enum.vdim(c), padded_dim = padded,
    block_m = c.block_m, block_n = c.block_n, warps = c.warps, threads = 32 * c.warps,
    stages = c.stages,
    warp_rows = c.block_m // c.warps,  -- query rows per warp
    k_steps = padded // 16,            -- k16 steps of Q K^T over the head dim
    dim_tiles = padded // 8,           -- n8 tiles of O per m-tile
    row_chunks = padded // 8,          -- 16-byte chunks per tile row
  }
  P.m_tiles = P.warp_rows // 16        -- m16 tiles per warp
  -- Rows of 16-bit elements; pad adds one chunk, so that the 8 rows an
  -- ldmatrix reads fall on distinct banks.
  P.row_bytes = 2 * padded + (c.layout == "pad" and 16 or 0)
  -- The XOR swizzle of the chunks of a row (fa_swizzle in the preludes):
  -- 8 when a row holds a multiple of 8 chunks (chunk c of row r goes to
  -- c ^ (r & 7)), 4 when it holds 4 mod 8 (dims 32, 96, 160: c ^ ((r >> 1)
  -- & 3), rows r and r + 1 then start half a bank line apart), 0 without.
  -- The XOR stays inside the row either way.
  P.swizzle = c.layout ~= "swizzle" and 0 or P.row_chunks % 8 == 0 and 8 or 4
  -- The ldmatrix offsets a lane keeps: one per k step of a swizzle period.
  P.lane_offsets = math.max(1, P.swizzle // 2)
  -- cp.async needs 16-byte aligned global rows: dims that are multiples of 8.
  P.async_copy = c.dim % 8 == 0 and P.dim_v % 8 == 0
  -- Tiles are copied a chunk column per thread, pass_rows rows per pass,
  -- when the threads cover whole columns; else chunk by chunk. Rows of
  -- more than 8 chunks (head dims 128 and over) go in spans of 8 chunks
  -- (128 bytes, as FlashAttention-2 copies them): 8 threads a span, each
  -- thread its chunk column in every span of its rows, so that one global
  -- address per row serves copy_spans copies at immediate offsets (the
  -- swizzle XOR stays inside a span), and each warp-wide copy still reads
  -- whole 32-byte sectors.
  P.copy_chunks = P.row_chunks > 8 and P.row_chunks % 8 == 0 and 8 or P.row_chunks
  -- The paged form's copies pay per row (its slot's read, its mark, two
  -- addresses: tc.cu's copy_kv_paged), whatever its chunks: at head dim 64
  -- spans of 4 chunks halve its rows a thread (1139 instructions per K/V
  -- block and warp to 1112 on sm_80 at FlashAttention-2's tile). At 128
  -- the spans are 8 chunks already, and 4 left ptxas spilling more.
  -- Under the 8-chunk swizzle a span's chunks then sit at the first's
  -- offset XOR the span's bytes (chunk c + 4 at (c ^ t) ^ 4), not at an
  -- immediate past it: span_xor.
  if c.paged == 1 and P.row_chunks == 8 then P.copy_chunks = 4 end
  P.span_xor = P.swizzle == 8 and P.copy_chunks < 8
  P.copy_spans = P.row_chunks // P.copy_chunks
  P.column_copy = P.async_copy and P.threads % P.copy_chunks == 0
  P.pass_rows = P.threads // P.copy_chunks
  P.q_bytes = c.block_m * P.row_bytes
  P.stage_bytes = 2 * c.block_n * P.row_bytes  -- one K/V stage: K then V
  P.q_offset = 0
  if c.q_share == 1 then
    P.kv_offset = 0
    P.smem_bytes = math.max(P.q_bytes, c.stages * P.stage_bytes)
  else
    P.kv_offset = P.q_bytes
    P.smem_bytes = P.q_bytes + c.stages * P.stage_bytes
  end
  -- varlen: each thread's copy of its sequence's first key, which the main
  -- loop's K/V address rebuild reads back (varlen.lua): a register live
  -- through the loop would spill the tiles at 255.
  if c.varlen == 1 then
    P.varlen_offset = P.smem_bytes
    P.smem_bytes = P.smem_bytes + 4 * P.threads
  end
  -- paged: each warp's slots for the K and V offsets of its rows of a
  -- block (8 bytes a row), which one lane looks up for the copies of all
  -- (tc.cu's copy_kv_paged).
  if c.paged == 1 and P.column_copy then
    local rows = 32 // P.copy_chunks * ((c.block_n + P.pass_rows - 1) // P.pass_rows)
    P.paged_offset = P.smem_bytes
    P.smem_bytes = P.smem_bytes + c.warps * 8 * 32 * ((rows + 31) // 32)
  end
  -- Registers per thread, 32-bit words, as the template holds them: the O
  -- accumulator (m_tiles x o_tiles n8 tiles of 4 floats; deferred
  -- normalization adds a tile for the row sums), the S/P accumulator of
  -- the keys and m-tiles in flight (the tiles of one m-tile group x key n8
  -- tiles / parts x 4), the Q fragments when held (m_tiles x k_steps x 4),
  -- the fragments of one k step (Q of a group when re-read, a K or V
  -- fragment; 8 more when Q is held: ptxas keeps its fragments in flight
  -- earlier), the row statistics (m, and l when eager, of 2 rows per
  -- m-tile), and 40 for addresses, indices, loop state and the exp
  -- pipeline.
  local sum_mma = c.norm == "deferred" and c.rowsum ~= "fadd"
  P.o_tiles = P.dim_tiles + (sum_mma and 1 or 0)
  local o = P.m_tiles * P.o_tiles * 4
  local q = c.q == "reg" and P.m_tiles * P.k_steps * 4 or 0
  local stats = P.m_tiles * (sum_mma and 2 or 4)
  local key_tiles, key_steps = c.block_n // 8, c.block_n // 16
  local function words(parts, group)
    return o + group * (key_tiles // parts) * 4 + q + (c.q == "reg" and 8 or 4 * group) + 4
           + stats + 40
  end
  -- The instructions per block and warp that the choice below changes: the
  -- ldmatrix of K and V (once per m-tile group), of Q when re-read (once
  -- per part), the rescale of O and the row steps (max shuffles, alpha,
  -- loop and mask checks), once per part.
  local function cost(parts, group)
    local groups = P.m_tiles // group
    return groups * (P.k_steps * key_tiles // 2 + key_steps * P.dim_tiles // 2)
           + (c.q == "reg" and 0 or parts * P.m_tiles * P.k_steps)
           + parts * P.m_tiles * (P.o_tiles * 4 + 16)
  end
  -- The block's keys go through S, softmax and P V in parts, each its own
  -- online-softmax step, and a warp's m-tiles in groups, one after the
  -- other, when the whole block's S would crowd the registers: the
  -- cheapest (parts, group) whose estimate is 256 or below; else one k16
  -- step of keys and one m-tile at a time. Calibrated on ptxas (CUDA 13):
  -- FlashAttention-2's own tiles in one part and one group, estimated at
  -- 256, take 255 registers without spilling; in two key
  -- parts they need no spill either but issue about a quarter more instructions
  -- per block (two O rescales, two row steps): the parts axis offers both
  -- to the tuner. Parts asked for keep all m-tiles together.
  P.parts, P.group_tiles = key_steps, 1
  if (c.parts or 0) ~= 0 then
    P.parts, P.group_tiles = c.parts, P.m_tiles
  else
    local best
    for parts = 1, key_steps do
      for group = P.m_tiles, 1, -1 do
        if key_steps % parts == 0 and P.m_tiles % group == 0
           and words(parts, group) <= register_budget then
          local k = cost(parts, group)
          if not best or k < best then best, P.parts, P.group_tiles = k, parts, group end
        end
      end
    end
  end
  P.m_groups = P.m_tiles // P.group_tiles
  P.part_keys = c.block_n // P.parts
  P.n_tiles = P.part_keys // 8    -- n8 tiles of S per part
  P.pv_steps = P.part_keys // 16  -- k16 steps of P V per part
  P.register_words = words(P.parts, P.group_tiles)
  return P
end

-- Constraints -------------------------------------------------------------------

function tc.fits(c, _, target)
  if not tc.padded_dim(c.dim, enum.vdim(c)) then return false, "head dim over 256" end
  if c.dtype == "bf16" and not tc.has_bf16(target) then
    return false, target.arch .. " has no bf16 tensor cores (sm_80 and newer do)"
  end
  if c.warps ~= 4 and c.warps ~= 8 and c.warps ~= 1 and c.warps ~= 2 then
    return false, "warps must be 1, 2, 4 or 8"
  end
  if c.block_m % (16 * c.warps) ~= 0 then
    return false, "each warp needs whole 16-row slabs (block_m a multiple of 16 * warps)"
  end
  if c.block_n % 16 ~= 0 then return false, "block_n must be a multiple of 16" end
  if (c.parts or 0) ~= 0 and (c.block_n // 16) % c.parts ~= 0 then
    return false, "parts must divide block_n / 16"
  end
  if c.rowsum == "fadd" and c.norm ~= "deferred" then
    return false, "row sums by FADD are deferred normalization's (eager sums its rows anyway)"
  end
  if c.pv == "step" and c.norm ~= "deferred" then
    return false, "P V by k16 steps is deferred normalization's (eager rescales P by the block's sum)"
  end
  if c.paged == 1 then
    local ok, why = require("paged").fits(c)
    if not ok then return false, why end
    if not (c.dim % 8 == 0 and enum.vdim(c) % 8 == 0) then
      return false, "K/V in a KV cache are copied 16 bytes at a time: head dims multiples of 8"
    end
  end
  if c.rescale == "lazy" and c.norm ~= "deferred" then
    return false, "lazy rescaling is deferred normalization's (eager normalizes O at every block)"
  end
  if c.s_acc == "f16" and c.dtype ~= "fp16" then
    return false, "S accumulates in f16 only with fp16 inputs (bf16's mma accumulates in f32)"
  end
  if c.s_acc == "f16" and tonumber(target.arch:match("^sm_(%d+)")) < 80 then
    return false, "S accumulated in f16 takes mma m16n8k16 (sm_80 and newer)"
  end
  if c.q_share == 1 and c.q ~= "reg" then
    return false, "Q can share its shared memory with K only when Q is held in registers"
  end
  local P = tc.plan(c)
  if P.threads > target.max_threads then return false, "too many threads" end
  if P.smem_bytes > target.smem then return false, "shared memory over the limit" end
  if P.register_words > register_budget then
    return false, "register estimate over " .. register_budget .. " words per thread"
  end
  return true
end

-- Enumeration -------------------------------------------------------------------

local function cross(base, axes, out) enum.cross(tc.axes, base, axes, out) end

local with = enum.with

-- The default space, per (dim, dtype): tiles around FlashAttention-2's
-- own choice for the head dim (d <= 64: 128x128, 4 warps; d <= 128:
-- 128x64, 4 warps; larger: 64x64, 4 warps) in its structure (deferred
-- normalization, swizzled shared memory, two K/V stages), Q re-read from
-- shared memory or held in registers; then the other axes varied one at a
-- time around that choice. All of it pruned by the target. "full" is the
-- whole cross product; "small" the fallback when nothing of the default
-- fits the target.
function tc.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0, varlen = problem.varlen or 0,
                 paged = problem.paged or 0, s_acc = "f32", rescale = "always" }
  local out = {}
  if which == "full" then
    local bn = {}
    for n = 32, 176, 16 do bn[#bn + 1] = n end
    cross(base, { block_m = { 64, 128, 192 }, block_n = bn, warps = { 4, 8 },
                  norm = { "eager", "deferred" }, layout = { "row", "pad", "swizzle" },
                  q = { "smem", "reg" }, stages = { 1, 2, 3 }, q_share = { 0, 1 },
                  parts = { 0, 2 }, rowsum = { "mma", "fadd" }, pv = { "block", "step" },
                  kv_addr = { "rebuild", "carry" }, s_acc = { "f32", "f16" },
                  rescale = { "always", "lazy" } }, out)
    return out
  end
  if which == "small" then
    cross(base, { block_m = { 64 }, block_n = { 32, 16 }, warps = { 4 }, norm = { "deferred" },
                  layout = { "swizzle" }, q = { "smem" }, stages = { 1 }, q_share = { 0 },
                  parts = { 0 }, rowsum = { "mma" }, pv = { "block" }, kv_addr = { "rebuild" } }, out)
    return out
  end
  local D = tc.padded_dim(problem.dim, problem.dim_v) or 256
  -- Tiles (block_m, block_n, warps) per head-dim class; the first is
  -- FlashAttention-2's own choice for it.
  local tiles
  if D <= 64 then
    tiles = { { 128, 128, 4 }, { 64, 64, 4 }, { 64, 128, 4 }, { 128, 64, 4 }, { 128, 64, 8 },
              { 128, 96, 4 }, { 128, 128, 8 }, { 128, 176, 8 }, { 192, 64, 4 }, { 192, 128, 4 } }
  elseif D <= 128 then
    tiles = { { 128, 64, 4 }, { 64, 32, 4 }, { 64, 64, 4 }, { 64, 128, 4 }, { 128, 32, 4 },
              { 128, 64, 8 }, { 128, 96, 8 }, { 128, 128, 8 } }
  else
    tiles = { { 64, 64, 4 }, { 64, 32, 4 }, { 64, 128, 4 }, { 128, 32, 8 }, { 128, 64, 8 } }
  end
  local seen = {}
  local function add(c)
    local key = tc.name_of(c)
    if not seen[key] then seen[key] = true; out[#out + 1] = c end
  end
  local fa2
  for i, t in ipairs(tiles) do
    for _, q in ipairs({ "smem", "reg" }) do
      local c = with(base, { block_m = t[1], block_n = t[2], warps = t[3], norm = "deferred",
                             layout = "swizzle", q = q, stages = 2, q_share = 0, parts = 0,
                             rowsum = "mma", pv = "block", kv_addr = "rebuild" })
      if i == 1 and q == "smem" then fa2 = c end
      add(c)
    end
  end
  -- The other axes, one at a time, around FlashAttention-2's choice; and a
  -- block_n that is no power of two. S accumulated in f16 (fp16 alone: the
  -- target prunes it elsewhere) at FA2's tile and at its fewest
  -- instructions.
  for _, ch in ipairs({ { norm = "eager" }, { layout = "row" }, { layout = "pad" },
                        { stages = 1 }, { stages = 3 }, { q = "reg", q_share = 1 },
                        { q = "reg", q_share = 1, stages = 3 },
                        { block_n = fa2.block_n - 16 }, { block_n = fa2.block_n + 16 },
                        { parts = 2 }, { rowsum = "fadd" }, { pv = "step" },
                        { rowsum = "fadd", pv = "step" }, { kv_addr = "carry" },
                        { rowsum = "fadd", kv_addr = "carry" },
                        { rowsum = "fadd", pv = "step", kv_addr = "carry" },
                        { s_acc = "f16" }, { rowsum = "fadd", pv = "step", kv_addr = "carry", s_acc = "f16" } }) do
    add(with(fa2, ch))
  end
  -- At d128 the addresses carried, with one stage: 64 KB, two CTAs on an
  -- A100, where FA2's tile runs two as well; the model ranks them above it.
  if D > 64 and D <= 128 then
    add(with(fa2, { stages = 1, kv_addr = "carry" }))
    add(with(fa2, { stages = 1, rowsum = "fadd", pv = "step", kv_addr = "carry" }))
  end
  return out
end

-- Rendering -------------------------------------------------------------------------

tc.op = "fwd"
tc.mods = true       -- applies score and mask modifications (mod.lua)

-- How many times over an ldmatrix reads shared memory: the 8 rows of 16
-- bytes of each of its matrices, row_bytes apart, over the 8 16-byte
-- groups of a 128-byte bank line. Swizzled or padded rows fall on 8
-- distinct groups (1); plain rows of 128 or 256 bytes all on one (8: the
-- layout=row variants, 3.5-4 times slower on an H200).
function tc.ldsm_ways(P)
  if P.swizzle > 0 then return 1 end
  local seen, groups = {}, 0
  for r = 0, 7 do
    local g = (r * P.row_bytes // 16) % 8
    if not seen[g] then seen[g], groups = true, groups + 1 end
  end
  return 8 // groups
end

function tc.render(c)
  local P = tc.plan(c)
  local args = { cfg = c, P = P, entry = tc.name_of(c):gsub("-", "_") }
  return {
    source = render("tc.cu", args),
    launches = {
      { entry = args.entry, threads = P.threads, smem_bytes = P.smem_bytes,
        grid = { { "seq_q", c.block_m }, "heads", "batch" },
        workspaces = {}, heavy_first = c.causal == 1 },
    },
    registers_estimate = P.register_words,
    -- 16-byte pieces (cp.async, 16-byte stores) when dim (and dim_v) is a
    -- multiple of 8.
    io_align = P.async_copy and 16 or 2,
    ldsm_ways = tc.ldsm_ways(P),
  }
end

-- What `fatune explore` sweeps (tc_explore.lua): the precision axes.
tc.explore = require("tc_explore")

return tc
