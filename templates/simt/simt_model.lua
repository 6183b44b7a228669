-- simt_model.lua
-- The analytic cost model of the SIMT family: for a config, its plan and a
-- problem, the exact counts the CPU emulator measures when it runs the
-- kernel simt.cu renders. Nothing is run: every figure follows from the
-- plan (threads, lanes per row, padded rows and columns of the tiles) and
-- the loop structure of simt.cu, tile by tile, with the tails of the last
-- tiles and the tiles a causal mask skips counted as the kernel counts
-- them. A change to simt.cu that moves a load, a store, a barrier, an
-- exponential or a rescale must change this file too; the explore tests
-- compare the two on every axis.
--
-- Units are the emulator's: bytes per thread and access for memory,
-- calls per thread for exp2, log2 and rescale, per warp for shuffles and
-- __syncwarp, per CTA for __syncthreads.

local model = {}
local counters = require("counters")

-- The counters this model predicts (the others are the tensor cores' and
-- Hopper's); mma stays 0: CUDA cores only.
local predicted = { gmem_read = true, gmem_written = true, smem_read = true, smem_written = true,
                    exp2 = true, log2 = true, rescale = true, mma = true, shuffles = true,
                    barriers = true, warp_syncs = true }

local function cdiv(a, b) return (a + b - 1) // b end
local function clamp(x, lo, hi) return x < lo and lo or (x > hi and hi or x) end
local function log2i(n) local k = 0; while n > 1 do n = n // 2; k = k + 1 end; return k end

-- The counters of one (batch, head): per-tile pieces, then the two loop
-- orders of simt.cu put together.
local function per_head(c, P, sq, sk)
  local D, DV, BM, BN, W, NT = P.D, P.DV, P.BM, P.BN, P.W, P.NT
  local RM, RN, RD, G = P.RM, P.RN, P.RD, P.G
  local BMp, BNp = P.BMp, P.BNp
  local splitq, eager, causal = c.split == "split_q", c.norm == "eager", c.causal == 1
  local qreg = c.q == "reg"
  local lg = log2i(G)
  local off = sk - sq
  local n = counters.tally(predicted)
  local add = n.add

  -- Rows of the tile at q0 inside the problem, and those of them that see
  -- at least one key (row r sees keys c <= r + off under the causal mask).
  local function valid(q0) return clamp(sq - q0, 0, BM) end
  local function keyed(q0)
    local v = valid(q0)
    if not causal then return v end
    return clamp(q0 + v - math.max(q0, -off), 0, v)
  end

  local function load_q(q0)
    add("gmem_read", valid(q0) * D)
    add("smem_written", BMp * D)
  end
  local function load_kv(k0)
    add("gmem_read", clamp(sk - k0, 0, BN) * (D + DV))
    add("smem_written", P.KVR * (D + DV))
  end
  local function q_to_registers() if qreg then add("smem_read", NT * RM * D) end end
  local function scores() add("smem_read", NT * D * (qreg and RN or RM + RN)) end

  -- One step of the online softmax over a (Q tile, K/V tile) pair.
  local function step_split_q()
    scores()
    add("exp2", NT * RM * (RN + 1))                 -- alpha and P
    add("shuffles", W * RM * 2 * lg)                -- row max and row sum
    add("rescale", NT * RM * (eager and RD + RN or RD))
    add("smem_written", NT * RM * RN)               -- P
    add("warp_syncs", W)
    add("smem_read", NT * BN * (RM + RD))           -- P V
  end
  local function step_split_k(q0, store_stats)
    scores()
    add("smem_written", W * BMp)                    -- each warp's row max
    add("barriers", 1)
    add("smem_read", NT * RM * (1 + W))             -- the row's max, every warp's
    add("exp2", NT * RM * RN)
    add("smem_written", NT * RM * RN + W * BMp)     -- P, each warp's row sum
    add("shuffles", W * RM * 2 * lg)
    add("warp_syncs", W)
    add("smem_read", NT * P.NWp * (RM + RD))        -- this warp's columns of P V
    add("smem_written", W * BMp * DV)               -- partial O of every warp
    add("barriers", 1)
    add("smem_read", BM * (2 + 2 * W))              -- row statistics, per row
    add("exp2", BM)
    add("smem_written", BM * (eager and 4 or 3))
    if store_stats then add("gmem_written", 2 * valid(q0)) end
    add("barriers", 1)
    add("smem_read", P.OC * BM * (eager and 2 or 1) + BM * DV * W)
    add("rescale", BM * DV * (eager and 2 or 1))    -- O, and eager's new P V
  end
  local function step(q0, store_stats)
    if splitq then step_split_q() else step_split_k(q0, store_stats) end
  end

  -- The finished rows: O (normalized here when deferred) and the lse.
  local function finish(q0, from_ws)
    local v, kd = valid(q0), keyed(q0)
    add("gmem_written", v * (DV + 1))
    add("log2", kd)
    if not eager then add("rescale", v * DV) end
    if not splitq then
      if from_ws then add("gmem_read", v * P.OC + kd * DV + 2 * v)
      else add("smem_read", (eager and 0 or P.OC * v) + 2 * v) end
    end
  end

  if c.par == "q_outer" then
    for q0 = 0, sq - 1, BM do
      local kv_end = sk
      if causal then kv_end = clamp(math.min(q0 + BM, sq) - 1 + off + 1, 0, sk) end
      local nt = cdiv(kv_end, BN)
      if not splitq then add("smem_written", 2 * BMp) end
      load_q(q0)
      add("barriers", 1)
      q_to_registers()
      for t = 0, nt - 1 do
        add("barriers", t > 0 and 2 or 1)
        load_kv(t * BN)
        step(q0, false)
      end
      finish(q0, false)
    end
  else
    for k0 = 0, sk - 1, BN do
      add("barriers", 1)
      load_kv(k0)
      local q_start = 0
      if causal then q_start = math.max(k0 - off, 0) // BM * BM end
      for q0 = q_start, sq - 1, BM do
        local live = k0 > 0 and valid(q0) or 0
        add("barriers", 2)
        load_q(q0)
        if splitq then
          add("gmem_read", live * (2 * G + DV))
        else
          add("smem_written", 2 * BMp)
          add("gmem_read", live * (2 + DV))
        end
        q_to_registers()
        step(q0, true)
        add("gmem_written", valid(q0) * (splitq and DV + 2 or DV))
      end
    end
    add("barriers", 1)
    for q0 = 0, sq - 1, BM do
      if splitq then
        add("gmem_read", keyed(q0) * (2 * G + DV))
      elseif causal then
        add("gmem_written", 2 * (valid(q0) - keyed(q0)))
        add("barriers", 1)
      end
      finish(q0, true)
    end
  end
  return n
end

-- Element counts become bytes for the memory counters.
local bytes = { gmem_read = true, gmem_written = true, smem_read = true, smem_written = true }

-- The counters for `problem` (seq_q, seq_k, batch, heads), in fa_counters.h's
-- order, plus the FlashAttention paper's figures for comparison:
-- standard attention's HBM traffic (its Algorithm 0: S and P written and
-- read back, Theta(N d + N^2)), and the tiled bound Theta(N^2 d^2 / M) with
-- M the variant's shared memory in elements (constant 1).
function model.predict(c, P, problem)
  local sq, sk = problem.seq_q, problem.seq_k
  local bh = problem.batch * problem.heads
  local h = per_head(c, P, sq, sk)
  local out = h.report(function(k) return bh * (bytes[k] and P.esize or 1) end)
  local d, es = P.D, P.esize
  out[#out + 1] = { "paper_standard_bytes", bh * es * ((sq + sk) * (d + P.DV) + 4 * sq * sk) }
  out[#out + 1] = { "paper_tiled_bytes", bh * es * (sq * sk * d * d // (P.smem_bytes // es)) }
  out[#out + 1] = { "naive_score_bytes", bh * es * sq * sk }
  return out
end

return model
