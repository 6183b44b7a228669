-- simtbwd.lua
-- The SIMT backward family: FlashAttention-2's backward pass on CUDA cores,
-- fp32 and fp64. Three launches over one argument block:
--   pre   D = rowsum(dO * O) per query row, into the workspace "delta";
--   dkdv  parallel over K/V blocks (the main kernel): K_j and V_j stay in
--         shared memory, dK_j and dV_j in registers, while the Q blocks go
--         by, each recomputing P = exp(S - lse) from the forward pass's
--         logsumexp: dV += P^T dO, dS = P * (dO V^T - D), dK += dS^T Q;
--   dq    (dq = separate) parallel over Q blocks: dQ += dS K over the K/V
--         blocks, written once, so that dQ needs no atomics and every run
--         gives the same bits (FlashAttention-3's deterministic mode orders
--         its atomics instead; this one recomputes S and dP once more);
--   dqconvert (dq = atomic, FlashAttention-2's way) dkdv adds each Q
--         block's dS K to a float accumulator with atomics as it goes,
--         and this launch scales it into dQ: no recomputation, but the
--         order of the adds, and so dQ's last bits, vary from run to run.
-- With order = q, FlashAttention-1's order instead: parallel over Q blocks
-- (the main kernel, fa1), each walking the K/V blocks it sees with dQ in
-- registers, written once, and adding its shares of dK and dV to float
-- accumulators with atomics (kvzero zeroes them first, kvconvert scales
-- them into dK and dV): what FlashAttention-2's order saves is those
-- atomics and their accumulators' traffic. (FA1 kept the forward pass's
-- row max and sum apart; this one reads the logsumexp, as FA2.)
-- V's head dim may differ from Q's and K's (dim_v, as DeepSeek's 192/128):
-- V, dO and dV rows take it, and dP = dO V^T and D = rowsum(dO * O) sum
-- over it; S, dK and dQ keep Q's.
-- A variable-length batch (varlen, varlen.lua): every launch runs over
-- its sequence's own lengths, its tensors from the sequence's first token;
-- the workspaces keep the longest sequence's rows per sequence.

local simtbwd = { name = "simtbwd", version = 3 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

simtbwd.title = "CUDA cores, backward"
simtbwd.targets = "any"
simtbwd.rank = 3
simtbwd.preludes = enum.preludes
simtbwd.op = "bwd"

function simtbwd.default_dtype() return "fp32", "fp32 on CUDA cores" end

-- Names: simtbwd-f32-d64-m32n32w4-dqpass[-causal][-varlen]; fp16 and bf16 are
-- read in 16 bits and computed in fp32 (the last resort: head dims over
-- 256, bf16 on Turing).
simtbwd.axes = {
  enum_axis("dtype", { "fp32", "fp64", "fp16", "bf16" }, { fp32 = "f32", fp64 = "f64", fp16 = "f16" }),
  int_axis("dim", 1, 576, { prefix = "d" }),
  enum.dim_v_axis(576),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 1, 256, { prefix = "m" }),
  int_axis("block_n", 1, 256, { prefix = "n" }),
  int_axis("warps", 1, 32, { prefix = "w" }),
  enum_axis("dq", { "separate", "atomic" }, { separate = "dqpass", atomic = "dqatomic" }),
  enum_axis("order", { "kv", "q" }, { kv = "", q = "fa1" }),
  enum.varlen_axis(),
}
simtbwd.axis = enum.index(simtbwd.axes)
simtbwd.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "warps" }, { "dq" },
                   { "order" }, { "causal" }, { "varlen" } }

function simtbwd.defaults(problem)
  return { dtype = problem.dtype or "fp32", dim = problem.dim or 64, dim_v = enum.dim_v(problem),
           causal = problem.causal or 0, varlen = problem.varlen or 0, block_m = 32, block_n = 32,
           warps = 4, dq = "separate", order = "kv" }
end

-- fp64 at head dims over 128 holds its 32x32 tiles in no sm_80 shared
-- memory: smaller ones then.
simtbwd.fallbacks = { block_m = { 32, 16, 8 }, block_n = { 32, 16, 8 }, warps = { 4, 2, 1, 8 } }

simtbwd.mods = true  -- applies score and mask modifications (mod.lua), and their gradients

function simtbwd.supports(problem)
  return problem.dtype ~= nil
end

-- fp16 and bf16 (read in 16 bits, computed in fp32) only where no family
-- before it lists a variant: head dims over 256, bf16 on Turing.
simtbwd.last_resort = { fp16 = true, bf16 = true }

-- How the kernels read Q, K, V, O, dO and write dQ, dK, dV per dtype: the
-- element type and the load and store, as formats of an address (and a
-- value). acc_t for fp32 and fp64, so that their source is as it was;
-- 16-bit values converted to fp32 on load and rounded to nearest even on
-- store (each gradient is stored once: from registers, or from its fp32
-- accumulator).
local io_of = {
  fp32 = { elem = "acc_t", ldg = "fa_ldg_f32(%s)", ld = "fa_ld_f32(%s)", st = "fa_st_f32(%s, %s)" },
  fp64 = { elem = "acc_t", ldg = "fa_ldg_f64(%s)", ld = "fa_ld_f64(%s)", st = "fa_st_f64(%s, %s)" },
  fp16 = { elem = "unsigned short", ldg = "fa_f16_to_f32(fa_ldg_u16(%s))",
           ld = "fa_f16_to_f32(fa_ldg_u16(%s))", st = "fa_st_u16(%s, fa_f32_to_f16(%s))" },
  bf16 = { elem = "unsigned short", ldg = "fa_bf16_to_f32(fa_ldg_u16(%s))",
           ld = "fa_bf16_to_f32(fa_ldg_u16(%s))", st = "fa_st_u16(%s, fa_f32_to_bf16(%s))" },
}

local function cdiv(a, b) return (a + b - 1) // b end

-- The shared-memory plan (in elements, rows padded by one against bank
-- conflicts) and the register arrays of each kernel.
function simtbwd.plan(c)
  local D, DV, BM, BN = c.dim, enum.vdim(c), c.block_m, c.block_n
  -- Q and K rows take the head dim D, V and dO rows (and dV's) V's, DV.
  local P = { D = D, DV = DV, BM = BM, BN = BN, NT = 32 * c.warps, DS = D + 1, DVS = DV + 1,
              NS = BN + 1 }
  P.esize = c.dtype == "fp64" and 8 or 4
  P.RK = cdiv(BN * D, P.NT)      -- dK elements per thread (dkdv)
  P.RV = cdiv(BN * DV, P.NT)     -- dV elements per thread (dkdv)
  P.RQ = cdiv(BM * D, P.NT)      -- dQ elements per thread (dq)
  local off = 0
  local function take(n) local at = off; off = off + n; return at end
  -- Both kernels hold Q, dO, K and V tiles, dS and the rows' lse and D;
  -- dkdv also P.
  P.off_q, P.off_do = take(BM * P.DS), take(BM * P.DVS)
  P.off_k, P.off_v = take(BN * P.DS), take(BN * P.DVS)
  P.off_ds = take(BM * P.NS)
  P.off_lse, P.off_d = take(BM), take(BM)
  P.smem_dq = off * P.esize
  P.off_p = take(BM * P.NS)
  P.smem_dkdv = off * P.esize
  local words = c.dtype == "fp64" and 2 or 1
  P.reg_words = (P.RK + P.RV) * words + 32
  P.reg_words_dq = P.RQ * words + 32
  return P
end

function simtbwd.fits(c, _, target)
  if c.order == "q" and c.dq == "atomic" then
    return false, "FlashAttention-1's order writes dQ from its own CTA (dq=separate); dK and dV take the atomics"
  end
  local P = simtbwd.plan(c)
  if P.NT > target.max_threads then return false, "too many threads" end
  if P.smem_dkdv > target.smem then return false, "shared memory over the limit" end
  if math.max(P.reg_words, P.reg_words_dq) > 255 then
    return false, "registers over 255 per thread"
  end
  return true
end

local function cross(base, axes, out) enum.cross(simtbwd.axes, base, axes, out) end

-- The default space: FlashAttention-2's square-ish tiles; "small" when
-- none of them fits (fp64 at large head dims); "full" the whole product.
function simtbwd.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0, varlen = problem.varlen or 0, order = "kv" }
  local out = {}
  if which == "full" then
    local tiles = { 1, 2, 4, 8, 16, 32, 64, 128 }
    cross(base, { block_m = tiles, block_n = tiles, warps = { 1, 2, 4, 8 },
                  dq = { "separate", "atomic" }, order = { "kv", "q" } }, out)
  elseif which == "small" then
    cross(base, { block_m = { 8, 16 }, block_n = { 8, 16 }, warps = { 2, 4 },
                  dq = { "separate", "atomic" } }, out)
    -- Rows over 1 KB (fp32 past head dim 256, fp64 past 128) take tiles of
    -- 2 and 4 rows and one warp too, so that Q, dO, K and V fit Turing's
    -- 64 KB up to head dim 576 in fp64.
    local esize = problem.dtype == "fp64" and 8 or 4
    if math.max(problem.dim, problem.dim_v or 0) * esize > 1024 then
      cross(base, { block_m = { 2, 4 }, block_n = { 2, 4 }, warps = { 1 },
                    dq = { "separate", "atomic" } }, out)
    end
  else
    cross(base, { block_m = { 16, 32, 64 }, block_n = { 32, 64 }, warps = { 4, 8 },
                  dq = { "separate" } }, out)
    cross(base, { block_m = { 16, 32, 64 }, block_n = { 64 }, warps = { 4, 8 },
                  dq = { "atomic" } }, out)
    -- FlashAttention-1's order, beside FA2's at the same tiles.
    cross(base, { block_m = { 32, 64 }, block_n = { 32 }, warps = { 4 }, dq = { "separate" },
                  order = { "q" } }, out)
  end
  return out
end

function simtbwd.render(c)
  local P = simtbwd.plan(c)
  local entry = simtbwd.name_of(c):gsub("-", "_")
  local args = { cfg = c, P = P, entry = entry, T = c.dtype == "fp64" and "f64" or "f32",
                 acc = c.dtype == "fp64" and "double" or "float", io = io_of[c.dtype] }
  -- One element at a time: 2 bytes for the 16-bit dtypes.
  local io_align = (c.dtype == "fp16" or c.dtype == "bf16") and 2 or P.esize
  local ws = { { name = "delta", bytes_per_row = P.esize } }
  if c.dq == "atomic" then ws[2] = { name = "dq_acc", bytes_per_row = c.dim * P.esize } end
  -- The kernels over K/V blocks run a CTA per K/V head: under GQA each
  -- sums over its group's query heads.
  local q_grid, k_grid = { { "seq_q", c.block_m }, "heads", "batch" },
                         { { "seq_k", c.block_n }, "kv_heads", "batch" }
  if c.order == "q" then
    ws[2] = { name = "kv_acc", bytes_per_row = (P.D + P.DV) * P.esize, rows = "seq_k" }
    return {
      source = render("simtbwd.cu", args),
      launches = {
        { entry = entry .. "_pre", threads = P.NT, smem_bytes = 0, grid = q_grid, workspaces = ws },
        { entry = entry .. "_kvzero", threads = P.NT, smem_bytes = 0, grid = k_grid, workspaces = ws },
        { entry = entry .. "_fa1", threads = P.NT, smem_bytes = P.smem_dkdv, main = true,
          grid = q_grid, workspaces = ws },
        { entry = entry .. "_kvconvert", threads = P.NT, smem_bytes = 0, grid = k_grid,
          workspaces = ws },
      },
      registers_estimate = P.reg_words_dq,
      io_align = io_align,
      deterministic = false,
    }
  end
  local last = c.dq == "atomic"
      and { entry = entry .. "_dqconvert", threads = P.NT, smem_bytes = 0,
            grid = { { "seq_q", c.block_m }, "heads", "batch" }, workspaces = ws }
      or { entry = entry .. "_dq", threads = P.NT, smem_bytes = P.smem_dq,
           grid = { { "seq_q", c.block_m }, "heads", "batch" }, workspaces = ws, role = "dq" }
  return {
    source = render("simtbwd.cu", args),
    launches = {
      { entry = entry .. "_pre", threads = P.NT, smem_bytes = 0,
        grid = { { "seq_q", c.block_m }, "heads", "batch" }, workspaces = ws },
      { entry = entry .. "_dkdv", threads = P.NT, smem_bytes = P.smem_dkdv, main = true,
        grid = k_grid, workspaces = ws },
      last,
    },
    registers_estimate = P.reg_words,
    io_align = io_align,
    deterministic = c.dq ~= "atomic",
  }
end

-- The analytic model ----------------------------------------------------

-- The emulator's counters on a problem, exactly (simtbwd_model.lua).
function simtbwd.predict(c, problem)
  return require("simtbwd_model").predict(c, simtbwd.plan(c), problem)
end

-- What `fatune explore --op bwd` sweeps (simtbwd_explore.lua).
simtbwd.explore = require("simtbwd_explore")

return simtbwd
