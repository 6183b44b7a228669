-- tcbwd.lua
-- The tensor-core backward family: FlashAttention-2's backward pass for
-- fp16 and bf16 with mma.sync m16n8k16 (fp32 accumulation), ldmatrix and
-- cp.async. The launches are simtbwd's:
--   pre   D = rowsum(dO * O) - dlse per query row, in fp32, into the
--         workspace "delta" (and, dq = atomic, dQ's accumulator zeroed);
--   dkdv  parallel over K/V blocks (the main kernel): K_j and V_j in shared
--         memory, dK_j and dV_j in registers, while the Q blocks go by.
--         Per Q block: S = Q K^T and dP = dO V^T on the tensor cores, the
--         warps splitting its rows (and, split_n, its keys); P = exp2(S
--         log2e - lse) and dS = P (dP - D) in registers, stored to shared
--         memory in 16 bits; then dV += P^T dO and dK += dS^T Q, the warps
--         splitting the keys (and, split_d, the head dim), P^T and dS^T
--         read back by ldmatrix .trans (FlashAttention-2's way: the
--         transpose costs no instruction of its own); dS K for dQ, dS from
--         the registers where a warp holds whole rows of it, else from
--         shared memory;
--   dq    (dq = separate) parallel over Q blocks: S and dP once more, then
--         dQ += dS K, dQ written once, so that every run gives the same
--         bits;
--   dqconvert (dq = atomic, FlashAttention-2's) dkdv adds each Q block's
--         dS K into a float accumulator with atomics, this launch scales
--         it into dQ: no recomputation, but run-to-run bits vary;
--   dkvsum (qhead) under GQA, dkdv runs a CTA per query head and writes
--         its share of dK and dV in float into the workspace "kv_part";
--         this launch sums each K/V head's shares in the order of its
--         query heads and rounds them once.
--
-- Shared memory is padded a 16-byte chunk a row (the 8 rows an ldmatrix
-- reads fall on distinct banks); tiles are copied with cp.async when the
-- head dim is a multiple of 8, element by element otherwise; the head dim
-- pads up to tc's native dims. V's head dim may differ from Q's and K's
-- (dim_v, as DeepSeek's 192/128): V, dO and dV pad it up on their own, and
-- dP = dO V^T and D = rowsum(dO * O) sum over it; S, dK and dQ keep Q's.
-- A variable-length batch (varlen, varlen.lua): every launch runs over
-- its sequence's own lengths, its tensors from the sequence's first token;
-- the workspaces keep the longest sequence's rows per sequence.

local tcbwd = { name = "tcbwd", version = 6 }
local enum = require("enum")
local tc = require("tc/tc")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis
local qhead_axis = int_axis("qhead", 0, 1, enum.flag("qhead"))
qhead_axis.absent = 0

tcbwd.title = "tensor cores, backward"
tcbwd.targets = "any"
tcbwd.rank = 1
tcbwd.preludes = enum.preludes
tcbwd.op = "bwd"

function tcbwd.default_dtype(target)
  return tc.default_dtype(target)
end

-- Names: tcbwd-f16-d64-m64n64w4-dqpass[-causal][-varlen]; S split across its keys
-- by 4 warps and dK, dV across the head dim by 2: ...-m64n128w8wn4wd2-dqpass.
tcbwd.axes = {
  enum_axis("dtype", { "fp16", "bf16" }, { fp16 = "f16" }),
  int_axis("dim", 1, 256, { prefix = "d" }),
  enum.dim_v_axis(256),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 16, 256, { prefix = "m" }),
  int_axis("block_n", 16, 256, { prefix = "n" }),
  int_axis("warps", 1, 8, { prefix = "w" }),
  -- Warps across the keys of S and dP (1: a warp owns whole rows of them,
  -- and dQ's product takes dS from its registers; more: dQ's product reads
  -- dS back from shared memory, the warps splitting dQ's head dim as many
  -- ways). FlashAttention-2 splits S so (AtomLayoutMSdP), which is what
  -- lets it take 128-key blocks at d128.
  int_axis("split_n", 1, 8, { prefix = "wn", [1] = "" }),
  -- Warps across the head dim for dK and dV (1: a warp owns whole rows of
  -- them): FlashAttention-2 splits them so, so that large head dims keep
  -- their accumulators in registers.
  int_axis("split_d", 1, 8, { prefix = "wd", [1] = "" }),
  enum_axis("dq", { "separate", "atomic" }, { separate = "dqpass", atomic = "dqatomic" }),
  -- Under GQA, a CTA per query head (1), its shares of dK and dV summed
  -- over the group by a launch of its own, as FlashAttention-2 sums its
  -- dk_expanded; or a CTA per K/V head (0) that walks every query head of
  -- its group: no partial sums to write and read, but a group's times
  -- fewer CTAs, which leaves SMs idle where K/V blocks are few. Without
  -- GQA the two run the same work. Left out of names and canonical text
  -- at 0, so the configs before the axis keep their hash.
  qhead_axis,
  enum.varlen_axis(),
}
tcbwd.axis = enum.index(tcbwd.axes)
tcbwd.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "warps", "split_n", "split_d" }, { "dq" },
                 { "qhead" }, { "causal" }, { "varlen" } }

-- FlashAttention-2's backward tiles (flash_bwd_launch_template.h, sm80,
-- without dropout): d64 128x128 with 8 warps, S and dK, dV each split
-- 4 x 2 (AtomLayoutMSdP 4, AtomLayoutNdKV 4); d128 64x128, S split 2 x 4
-- and dK, dV 4 x 2; larger 64x64, S split 4 x 2 and dK, dV 2 x 4. The
-- defaults take those tiles and splits, but at d64 S split 2 x 4: with
-- FA2's 4 x 2 ptxas (CUDA 13) spills 196 bytes and issues 1990
-- instructions per Q block per warp, with 2 x 4 about 100 and 1799.
-- V's head dim, when larger, picks the tiles (dV's accumulators are as
-- wide as it).
local function tile_dim(dim, dim_v)
  return math.max(tc.padded_dim(dim) or 256, tc.padded_dim(dim_v or dim) or 256)
end

-- Whether the problem's query heads share K/V heads.
local function gqa(problem) return (problem.kv_group or 1) > 1 end

function tcbwd.defaults(problem)
  local D = tile_dim(problem.dim or 64, problem.dim_v)
  local bm, bn, sn, sd = 128, 128, 4, 2
  if D > 128 then bm, bn, sn, sd = 64, 64, 2, 4 elseif D > 64 then bm, sn = 64, 4 end
  return { dtype = problem.dtype or "fp16", dim = problem.dim or 64, dim_v = enum.dim_v(problem),
           causal = problem.causal or 0, varlen = problem.varlen or 0, block_m = bm, block_n = bn,
           warps = 8, split_n = sn, split_d = sd, dq = "atomic", qhead = 0 }
end

tcbwd.fallbacks = { warps = { 4, 8, 2 }, split_n = { 1, 2, 4 }, split_d = { 1, 2, 4 },
                    dq = { "atomic", "separate" } }

tcbwd.mods = true    -- applies score and mask modifications (mod.lua), and their gradients

function tcbwd.supports(problem)
  return problem.dtype == "fp16" or problem.dtype == "bf16"
end

-- The plan: fragments per warp, the shared-memory layout (bytes), the
-- register estimate (32-bit words per thread).
function tcbwd.plan(c)
  local D, dim_v = tc.padded_dim(c.dim), enum.vdim(c)
  local DV = tc.padded_dim(dim_v)
  -- Q, K, dQ and dK take the head dim (dim, padded to D); V, dO and dV
  -- V's (dim_v, padded to DV).
  local P = { dim = c.dim, D = D, dim_v = dim_v, DV = DV, BM = c.block_m, BN = c.block_n,
              W = c.warps, NT = 32 * c.warps }
  P.split_n = c.split_n
  P.row_warps = c.warps // c.split_n        -- warps across the rows of S, dP
  P.warp_rows = c.block_m // P.row_warps    -- a warp's rows of S, dP and dQ
  P.m_tiles = P.warp_rows // 16             -- m16 tiles of S per warp (query rows)
  P.key_warps = c.warps // c.split_d        -- warps across the keys of dK, dV
  P.k_tiles = c.block_n // (16 * P.key_warps)  -- m16 tiles of dK, dV per warp (keys)
  P.n_tiles = c.block_n // c.split_n // 8  -- n8 tiles of S per m-tile
  P.d_tiles = D // 8                        -- n8 tiles of a gradient per m-tile
  P.dw_tiles = P.d_tiles // c.split_d       -- of dK per warp
  P.dv_tiles = DV // 8 // c.split_d         -- of dV per warp
  P.q_tiles = P.d_tiles // c.split_n        -- of dQ per warp
  P.async_copy = c.dim % 8 == 0 and dim_v % 8 == 0
  P.row_bytes = 2 * D + 16                  -- Q, K rows
  P.v_row_bytes = 2 * DV + 16               -- dO, V rows
  P.s_row_bytes = 2 * c.block_n + 16        -- P, dS rows
  local off = 0
  local function take(n) local at = off; off = off + n; return at end
  P.off_k, P.off_v = take(c.block_n * P.row_bytes), take(c.block_n * P.v_row_bytes)
  P.off_q, P.off_do = take(c.block_m * P.row_bytes), take(c.block_m * P.v_row_bytes)
  P.off_lse, P.off_d = take(4 * c.block_m), take(4 * c.block_m)
  P.off_ds = take(c.block_m * P.s_row_bytes)
  -- The dq kernel reads dS back only when the warps split S's keys.
  P.smem_dq = c.split_n > 1 and off or P.off_ds
  P.off_p = take(c.block_m * P.s_row_bytes)
  P.smem_dkdv = off
  -- S and dP of the warp's rows (dkdv and dq), dK and dV (dkdv) or dQ (dq)
  -- accumulators, and 40 for addresses, indices and the loop.
  local sdp = 2 * P.m_tiles * P.n_tiles * 4
  P.reg_words = sdp + P.k_tiles * (P.dw_tiles + P.dv_tiles) * 4 + 40
  P.reg_words_dq = sdp + P.m_tiles * P.q_tiles * 4 + 40
  return P
end

local register_budget = 255

function tcbwd.fits(c, _, target)
  if not tc.padded_dim(c.dim) then return false, "head dim over 256" end
  if not tc.padded_dim(enum.vdim(c)) then return false, "V's head dim over 256" end
  if c.dtype == "bf16" and not tc.has_bf16(target) then
    return false, target.arch .. " has no bf16 tensor cores (sm_80 and newer do)"
  end
  if c.warps ~= 1 and c.warps ~= 2 and c.warps ~= 4 and c.warps ~= 8 then
    return false, "warps must be 1, 2, 4 or 8"
  end
  if c.warps % c.split_n ~= 0 or (tc.padded_dim(c.dim) // 8) % (2 * c.split_n) ~= 0 then
    return false, "split_n must divide the warps, and leave each warp pairs of n8 tiles of dQ's head dim"
  end
  if c.block_m % (16 * (c.warps // c.split_n)) ~= 0 then
    return false, "each warp needs whole 16-row slabs of S (block_m a multiple of 16 * warps / split_n)"
  end
  if c.block_n % (16 * c.split_n) ~= 0 then
    return false, "each warp needs whole 16-key slabs of S (block_n a multiple of 16 * split_n)"
  end
  if c.warps % c.split_d ~= 0 or (tc.padded_dim(c.dim) // 8) % (2 * c.split_d) ~= 0 then
    return false, "split_d must divide the warps, and leave each warp pairs of n8 tiles of the head dim"
  end
  if (tc.padded_dim(enum.vdim(c)) // 8) % (2 * c.split_d) ~= 0 then
    return false, "split_d must leave each warp pairs of n8 tiles of V's head dim"
  end
  if c.block_n % (16 * (c.warps // c.split_d)) ~= 0 then
    return false, "each warp needs whole 16-key slabs of dK and dV (block_n a multiple of 16 * warps / split_d)"
  end
  local P = tcbwd.plan(c)
  if P.NT > target.max_threads then return false, "too many threads" end
  if P.smem_dkdv > target.smem then return false, "shared memory over the limit" end
  if math.max(P.reg_words, P.reg_words_dq) > register_budget then
    return false, "register estimate over " .. register_budget .. " words per thread"
  end
  return true
end

local function cross(base, axes, out) enum.cross(tcbwd.axes, base, axes, out) end

-- The default space: tiles around FlashAttention-2's, each with dQ by
-- atomics (FlashAttention-2's) and by a pass of its own (deterministic);
-- "full" the whole product; "small" when nothing of the default fits.
function tcbwd.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0, varlen = problem.varlen or 0, qhead = 0 }
  local out = {}
  if which == "full" then
    cross(base, { block_m = { 16, 32, 64, 128 }, block_n = { 16, 32, 64, 128 },
                  warps = { 1, 2, 4, 8 }, split_n = { 1, 2, 4 }, split_d = { 1, 2, 4 },
                  dq = { "separate", "atomic" } }, out)
  elseif which == "small" then
    cross(base, { block_m = { 32 }, block_n = { 32 }, warps = { 2 }, split_n = { 1 }, split_d = { 2 },
                  dq = { "separate", "atomic" } }, out)
  else
    -- (block_m, block_n, warps, split_n, split_d) per head-dim class, the
    -- first FlashAttention-2's own (the defaults').
    local D = tile_dim(problem.dim, problem.dim_v)
    local tiles
    if D <= 64 then
      tiles = { { 128, 128, 8, 4, 2 }, { 128, 128, 8, 2, 2 }, { 128, 128, 8, 1, 1 },
                { 64, 128, 8, 4, 2 }, { 64, 64, 4, 1, 1 } }
    elseif D <= 128 then
      tiles = { { 64, 128, 8, 4, 2 }, { 64, 64, 4, 1, 2 }, { 64, 64, 4, 2, 2 },
                { 64, 64, 4, 1, 1 }, { 64, 32, 2, 1, 1 } }
    else
      tiles = { { 64, 64, 8, 2, 4 }, { 64, 32, 4, 1, 2 }, { 64, 32, 4, 1, 4 } }
    end
    for _, t in ipairs(tiles) do
      cross(base, { block_m = { t[1] }, block_n = { t[2] }, warps = { t[3] }, split_n = { t[4] },
                    split_d = { t[5] }, dq = { "atomic", "separate" } }, out)
    end
  end
  -- Under GQA each point also with a CTA per query head.
  if gqa(problem) then
    for i = 1, #out do out[#out + 1] = enum.with(out[i], { qhead = 1 }) end
  end
  return out
end

function tcbwd.render(c)
  local P = tcbwd.plan(c)
  local entry = tcbwd.name_of(c):gsub("-", "_")
  local args = { cfg = c, P = P, entry = entry, T = c.dtype == "bf16" and "bf16" or "f16" }
  local ws = { { name = "delta", bytes_per_row = 4 } }
  -- dQ's accumulator: rooms of block_m x the padded head dim (tcbwd.cu's qacc)
  if c.dq == "atomic" then
    ws[2] = { name = "dq_acc", bytes_per_row = 4 * P.D, row_align = c.block_m }
  end
  -- dK's and dV's shares per query head, in float, under GQA (qhead)
  if c.qhead == 1 then
    ws[#ws + 1] = { name = "kv_part", bytes_per_row = 4 * (P.D + P.DV), rows = "seq_k", grouped = true }
    args.kv_part = #ws == 3 and "p.ws3" or "p.ws2"
  end
  local q_grid = { { "seq_q", c.block_m }, "heads", "batch" }
  local kv_grid = { { "seq_k", c.block_n }, "kv_heads", "batch" }
  local last = c.dq == "atomic"
      and { entry = entry .. "_dqconvert", threads = P.NT, smem_bytes = 0,
            grid = q_grid, workspaces = ws }
      or { entry = entry .. "_dq", threads = P.NT, smem_bytes = P.smem_dq,
           grid = q_grid, workspaces = ws, role = "dq" }
  return {
    source = render("tcbwd.cu", args),
    launches = {
      { entry = entry .. "_pre", threads = P.NT, smem_bytes = 0, grid = q_grid, workspaces = ws },
      { entry = entry .. "_dkdv", threads = P.NT, smem_bytes = P.smem_dkdv, main = true,
        grid = c.qhead == 1 and { { "seq_k", c.block_n }, "heads", "batch" } or kv_grid, workspaces = ws },
      last,
      c.qhead == 1 and { entry = entry .. "_dkvsum", threads = P.NT, smem_bytes = 0, grid = kv_grid,
                         workspaces = ws, role = "kv_sum" } or nil,
    },
    registers_estimate = math.max(P.reg_words, P.reg_words_dq),
    io_align = P.async_copy and 16 or 2,
    deterministic = c.dq ~= "atomic",
    -- dQ's adds: a warp's 32 consecutive floats, one 128-byte line
    red_lines = c.dq == "atomic" and 1 or nil,
  }
end

return tcbwd
