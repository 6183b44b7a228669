-- simtbwd_model.lua
-- The analytic cost model of the SIMT backward family: for a config, its
-- plan and a problem, the exact counts the CPU emulator measures when it
-- runs every launch simtbwd.cu renders (pre, then dkdv and dq or
-- dqconvert in FlashAttention-2's order; kvzero, fa1 and kvconvert in
-- FlashAttention-1's). Nothing is run: every figure follows from the
-- tiles and the loops of simtbwd.cu, block by block, with the tails of the
-- last blocks and the blocks a causal mask skips counted as the kernels
-- count them. A change to simtbwd.cu that moves a load, a store, a
-- barrier, an exponential or an atomic add must change this file too;
-- test_explore --bwd compares the two.
--
-- Units are the emulator's: bytes per thread and access for memory, calls
-- per thread for exp2 and atomic adds, per warp for shuffles, per CTA for
-- __syncthreads. The kernels read no logsumexp gradient (a trial passes
-- none) and the model counts none; K/V heads are the problem's heads.

local model = {}
local counters = require("counters")

local predicted = { gmem_read = true, gmem_written = true, atomics = true, smem_read = true,
                    smem_written = true, exp2 = true, log2 = true, rescale = true, mma = true,
                    shuffles = true, barriers = true, warp_syncs = true }

local function clamp(x, lo, hi) return x < lo and lo or (x > hi and hi or x) end

-- The counters of one (batch, head), in elements for the memory counters.
local function per_head(c, P, sq, sk)
  local D, DV, BM, BN = P.D, P.DV, P.BM, P.BN   -- Q's and K's head dim, V's
  local causal, atomic, fa1 = c.causal == 1, c.dq == "atomic", c.order == "q"
  local off = sk - sq
  local n = counters.tally(predicted)
  local add = n.add

  local function rows(q0) return clamp(sq - q0, 0, BM) end
  local function keys(k0) return clamp(sk - k0, 0, BN) end
  -- The cells of the (q0, k0) tile that are in the problem and the mask:
  -- those recompute() computes (the others it stores as zeros).
  local function live(q0, k0)
    local kn = keys(k0)
    if not causal then return rows(q0) * kn end
    local t = 0
    for gr = q0, q0 + rows(q0) - 1 do t = t + clamp(gr + off - k0 + 1, 0, kn) end
    return t
  end

  local function load_q(q0)
    add("gmem_read", rows(q0) * (D + DV) + 2 * rows(q0))   -- Q, dO; lse, D
    add("smem_written", BM * (D + DV) + 2 * BM)
  end
  local function load_kv(k0)
    add("gmem_read", keys(k0) * (D + DV))
    add("smem_written", BN * (D + DV))
  end
  local function recompute(q0, k0, keep_p)
    local l = live(q0, k0)
    add("smem_read", l * (2 * D + 2 * DV + 2))          -- S and dP's rows, lse and D
    add("exp2", l)
    add("smem_written", (keep_p and 2 or 1) * BM * BN)  -- dS (and P), every cell
  end
  -- dK and dV's share of a tile: every column, from every row of P and dS.
  local function dkdv_share(rowsum_cols) add("smem_read", 2 * rowsum_cols * (D + DV) * BM) end

  -- pre: D per query row (a warp per row, five shuffles), dQ's accumulator
  -- zeroed when atomic.
  add("gmem_read", 2 * sq * DV)
  add("gmem_written", sq)
  add("shuffles", 5 * sq)
  if atomic then add("gmem_written", sq * D) end

  if not fa1 then
    -- dkdv: a CTA per K/V block over the Q blocks that see it.
    local nq = (sq + BM - 1) // BM
    for k0 = 0, sk - 1, BN do
      load_kv(k0)
      local first = 0
      if causal and k0 - off > 0 then first = (k0 - off) // BM end
      for qb = first, nq - 1 do
        local q0 = qb * BM
        load_q(q0)
        add("barriers", 3)
        recompute(q0, k0, true)
        dkdv_share(BN)
        if atomic then
          local r = rows(q0)
          add("smem_read", 2 * r * D * BN)
          add("gmem_read", r * D)
          add("gmem_written", r * D)
          add("atomics", r * D)
        end
      end
      add("gmem_written", keys(k0) * (D + DV))
    end
  end

  if atomic then
    -- dqconvert: the accumulator, scaled, into dQ.
    add("gmem_read", sq * D)
    add("gmem_written", sq * D)
  else
    -- dq (or fa1): a CTA per Q block over the K/V blocks it sees.
    for q0 = 0, sq - 1, BM do
      load_q(q0)
      local kend = sk
      if causal then kend = clamp(q0 + BM + off, 0, sk) end
      for k0 = 0, kend - 1, BN do
        load_kv(k0)
        add("barriers", 3)
        recompute(q0, k0, fa1)
        add("smem_read", 2 * BM * D * BN)               -- dQ += dS K
        if fa1 then
          local kn = keys(k0)
          dkdv_share(kn)
          add("gmem_read", kn * (D + DV))
          add("gmem_written", kn * (D + DV))
          add("atomics", kn * (D + DV))
        end
      end
      add("gmem_written", rows(q0) * D)
    end
  end

  if fa1 then
    add("gmem_written", sk * (D + DV))                  -- kvzero
    add("gmem_read", sk * (D + DV))                     -- kvconvert
    add("gmem_written", sk * (D + DV))
  end
  return n
end

local bytes = { gmem_read = true, gmem_written = true, smem_read = true, smem_written = true }

-- The counters for `problem` (seq_q, seq_k, batch, heads), in fa_counters.h's
-- order.
function model.predict(c, P, problem)
  local bh = problem.batch * problem.heads
  local h = per_head(c, P, problem.seq_q, problem.seq_k)
  return h.report(function(k) return bh * (bytes[k] and P.esize or 1) end)
end

return model
