-- simtdec.lua
-- The SIMT decoding family (op decode): attention of a few new query
-- tokens per sequence over a KV cache, paged or contiguous, on CUDA cores.
-- FlashDecoding's split-KV scheme in two launches over one argument block:
--   split    a CTA per (split, query rows of one K/V head, sequence): the
--            split's share of the sequence's keys, gathered page by page
--            (each key's page from the block table, any page size), with
--            the online softmax over them; it writes its partial O and
--            logsumexp to the workspace, or with one split O itself;
--   combine  a CTA per query row: the splits' partials weighted by their
--            logsumexps, in the accumulator's precision (FlashAttention-2's
--            combine kernel, as flash_fwd_splitkv_combine).
-- Its axes:
--   splits   how many CTAs share one sequence's keys (the grid's x): more
--            splits fill the GPU when batch x K/V heads is small, at the
--            cost of the combine's traffic (FlashAttention-2 chooses them
--            at run time by a heuristic, num_splits_heuristic; here they
--            are tuned);
--   rows     query rows per CTA, taken from one K/V head's group (GQA
--            packing): with rows >= kv_group * seq_q every query head of a
--            K/V head is in one CTA, which reads that head's keys once;
--            rows = 1 reads them once per query row;
--   copy     sync: each thread loads its share of a block's K and V rows
--            into registers, converts them and stores them in shared
--            memory, and the block's math waits for them; async: cp.async
--            copies the next block's rows, 16 bytes each, into a second
--            stage as they are (16-bit), while this block's are computed
--            (rows of a multiple of 16 bytes);
--   block_n  keys per iteration, warps per CTA.
-- Computed in fp32 (fp64 for fp64); fp16 and bf16 read in 16 bits.

local simtdec = { name = "simtdec", version = 2 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

simtdec.title = "CUDA cores, split-KV decoding"
simtdec.targets = "any"
simtdec.rank = 3
simtdec.preludes = enum.preludes
simtdec.op = "decode"

function simtdec.default_dtype() return "fp32", "fp32 on CUDA cores" end

-- Names: simtdec-f32-d128-r8n64w4-s16[-causal].
simtdec.axes = {
  enum_axis("dtype", { "fp32", "fp64", "fp16", "bf16" }, { fp32 = "f32", fp64 = "f64", fp16 = "f16" }),
  int_axis("dim", 1, 576, { prefix = "d" }),
  enum.dim_v_axis(576),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("rows", 1, 64, { prefix = "r" }),
  int_axis("block_n", 1, 256, { prefix = "n" }),
  int_axis("warps", 1, 32, { prefix = "w" }),
  enum_axis("copy", { "sync", "async" }, { sync = "", async = "cpasync" }),
  int_axis("splits", 1, 256, { prefix = "s" }),
}
simtdec.axis = enum.index(simtdec.axes)
simtdec.naming = { { "dtype" }, { "dim", "dim_v" }, { "rows", "block_n", "warps" }, { "copy" },
                   { "splits" }, { "causal" } }

-- The rows a problem's group of query rows takes: kv_group * seq_q
-- rounded up to a power of two, at most 64.
local function group_rows(problem)
  local n = math.max(problem.kv_group or 1, 1) * math.max(problem.seq_q or 1, 1)
  local r = 1
  while r < n and r < 64 do r = r * 2 end
  return r
end

function simtdec.defaults(problem)
  return { dtype = problem.dtype or "fp32", dim = problem.dim or 128, dim_v = enum.dim_v(problem),
           causal = problem.causal or 0, rows = group_rows(problem), block_n = 64, warps = 4,
           copy = "sync", splits = 1 }
end

simtdec.fallbacks = { block_n = { 64, 32, 16, 8 }, warps = { 4, 2, 1 }, rows = { 8, 4, 2, 1 } }

simtdec.mods = true  -- applies score and mask modifications (mod.lua)

function simtdec.supports(problem)
  return problem.dtype ~= nil
end

-- How the kernels read Q, K, V and write O per dtype (simtbwd's).
local io_of = {
  fp32 = { elem = "acc_t", ldg = "fa_ldg_f32(%s)", st = "fa_st_f32(%s, %s)" },
  fp64 = { elem = "acc_t", ldg = "fa_ldg_f64(%s)", st = "fa_st_f64(%s, %s)" },
  fp16 = { elem = "unsigned short", ldg = "fa_f16_to_f32(fa_ldg_u16(%s))",
           st = "fa_st_u16(%s, fa_f32_to_f16(%s))" },
  bf16 = { elem = "unsigned short", ldg = "fa_bf16_to_f32(fa_ldg_u16(%s))",
           st = "fa_st_u16(%s, fa_f32_to_bf16(%s))" },
}

local function cdiv(a, b) return (a + b - 1) // b end

local function gcd(a, b) while b ~= 0 do a, b = b, a % b end return a end

-- Shared memory, in accumulator elements after the keys' row offsets (two
-- 8-byte words per key) and the rows' last visible keys (one int each,
-- padded to 8 bytes): Q (rows x DP, scaled, zeros past D), K (block_n x
-- KS), V (block_n x DV), S and then P (rows x NS), and per row m, l and
-- the rescale factor. DP rounds D up to the vector of VW elements a
-- 16-byte load takes; KS pads it so that the eight threads of a phase of
-- such loads, on eight keys, meet eight different groups of banks.
-- Work: S's thread a key and RR rows (of RG groups); P V's a column of
-- V (DC of them) and RC rows (of CG groups), each load reused over them.
function simtdec.plan(c)
  local D, DV, R, BN = c.dim, enum.vdim(c), c.rows, c.block_n
  local P = { D = D, DV = DV, R = R, BN = BN, NT = 32 * c.warps }
  P.esize = c.dtype == "fp64" and 8 or 4
  P.VW = 16 // P.esize
  P.vec = c.dtype == "fp64" and "fa_f64x2" or "fa_f32x4"
  P.DP = cdiv(D, P.VW) * P.VW
  P.KS = P.DP
  while (P.KS * P.esize // 16) % 2 == 0 do P.KS = P.KS + P.VW end
  P.NS = cdiv(BN, P.VW) * P.VW
  P.RG = gcd(R, math.max(1, P.NT // BN))
  P.RR = R // P.RG
  P.NTC = math.min(P.NT, DV)
  P.CG = gcd(R, math.max(1, P.NT // P.NTC))
  P.DC = cdiv(DV, P.NTC)
  P.RC = R // P.CG
  -- copy = async: K and V rows as they are in memory (IB bytes an element),
  -- two stages, K's rows padded as above; a K load of KVW elements.
  P.async = c.copy == "async"
  P.IB = (c.dtype == "fp16" or c.dtype == "bf16") and 2 or P.esize
  P.stages = P.async and 2 or 1
  P.KVW = P.async and 16 // P.IB or P.VW
  P.DP = cdiv(D, P.KVW) * P.KVW
  P.KRS = D * P.IB
  if (P.KRS // 16) % 2 == 0 then P.KRS = P.KRS + 16 end
  P.VRS = DV * P.IB
  P.stage_bytes = P.async and BN * (P.KRS + P.VRS) or 0
  -- the keys' offsets per stage, the rows' last keys; 16-byte aligned
  P.head_bytes = 16 * BN * P.stages + 16 * cdiv(R, 4)
  P.raw_bytes = P.head_bytes + P.stages * P.stage_bytes
  local off = 0
  local function take(n) local at = off; off = off + n; return at end
  P.off_q = take(R * P.DP)
  if not P.async then P.off_k, P.off_v = take(BN * P.KS), take(BN * DV) end
  P.off_s = take(R * P.NS)
  P.off_m, P.off_l, P.off_a = take(R), take(R), take(R)
  P.smem = P.raw_bytes + off * P.esize
  local words = c.dtype == "fp64" and 2 or 1
  P.reg_words = (P.DC * P.RC + P.RR + 2 * P.VW) * words + 32
  return P
end

function simtdec.fits(c, problem, target)
  if c.block_n % 4 ~= 0 then return false, "block_n not a multiple of 4 (a load of P's)" end
  local P = simtdec.plan(c)
  if P.async and (c.dim * P.IB % 16 ~= 0 or enum.vdim(c) * P.IB % 16 ~= 0) then
    return false, "copy=async copies rows of a multiple of 16 bytes"
  end
  if P.NT > target.max_threads then return false, "too many threads" end
  if c.warps > 2 * c.block_n * P.stages then
    -- a mask's range meets in the keys' offsets (decode.mod_range)
    return false, "more warps than keys in the stages"
  end
  if P.smem > target.smem then return false, "shared memory over the limit" end
  if P.reg_words > 255 then return false, "registers over 255 per thread" end
  if problem and c.rows > group_rows(problem) then
    return false, "more rows than the group's " .. group_rows(problem)
  end
  return true
end

local function cross(base, axes, out) enum.cross(simtdec.axes, base, axes, out) end

-- The default space: the group's rows and a few below them (GQA packing
-- against more CTAs), two key blocks, splits from 1 to 32.
function simtdec.enumerate(problem, which)
  local g = group_rows(problem)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0 }
  local out = {}
  if which == "full" then
    cross(base, { rows = { 1, 2, 4, 8, 16, 32, 64 }, block_n = { 16, 32, 64, 128 },
                  warps = { 1, 2, 4, 8 }, copy = { "sync", "async" },
                  splits = { 1, 2, 4, 8, 16, 32, 64, 128 } }, out)
  elseif which == "small" then
    cross(base, { rows = { 1, 2 }, block_n = { 8, 16 }, warps = { 1, 2 }, copy = { "sync" },
                  splits = { 1, 4 } }, out)
  else
    local rows = { g }
    if g >= 4 then rows[2] = g // 4 end
    cross(base, { rows = rows, block_n = { 32, 64 }, warps = { 4 }, copy = { "sync", "async" },
                  splits = { 1, 2, 4, 8, 16, 32 } }, out)
  end
  return out
end

function simtdec.render(c)
  local P = simtdec.plan(c)
  local entry = simtdec.name_of(c):gsub("-", "_")
  local args = { cfg = c, P = P, entry = entry, T = c.dtype == "fp64" and "f64" or "f32",
                 acc = c.dtype == "fp64" and "double" or "float", io = io_of[c.dtype] }
  -- cp.async copies 16 bytes from each row: the pools' rows 16-byte aligned
  local io_align = P.async and 16 or (c.dtype == "fp16" or c.dtype == "bf16") and 2 or P.esize
  local split = { entry = entry .. "_split", threads = P.NT, smem_bytes = P.smem, main = true,
                  grid = { c.splits, { "kv_rows", c.rows }, "batch" }, workspaces = {} }
  if c.splits == 1 then
    return { source = render("simtdec.cu", args), launches = { split },
             registers_estimate = P.reg_words, io_align = io_align }
  end
  -- Each query row's partials: splits O rows of DV, then splits logsumexps.
  local ws = { { name = "partial", bytes_per_row = c.splits * (P.DV + 1) * P.esize } }
  split.workspaces = ws
  return {
    source = render("simtdec.cu", args),
    launches = {
      split,
      { entry = entry .. "_combine", threads = P.NT, smem_bytes = 0,
        grid = { { "seq_q", 1 }, "heads", "batch" }, workspaces = ws },
    },
    registers_estimate = P.reg_words,
    io_align = io_align,
  }
end

return simtdec
