-- wg_model.lua
-- The analytic cost model of the wg family (Hopper, sm_90a): for a config
-- and a problem, the exact counts the CPU emulator measures when it runs
-- the kernel wg.cu renders. Nothing is run: every figure follows from the
-- tile, the number of K/V blocks each CTA takes and the steps of wg.cu. A
-- change to wg.cu that moves a TMA copy, a wgmma, a wait, an exponential
-- or a rescale must change this file too; test_explore --wg compares the
-- two.
--
-- The kernel, as the model counts it: a CTA per block_m query rows of a
-- (batch, head), `consumers` warpgroups of 64 rows each and a producer.
-- The producer's elected thread loads Q once by TMA and K and V for each
-- K/V block the CTA needs (with a causal mask, bottom-right, the blocks
-- past its last row's diagonal are skipped; a CTA with none loads
-- nothing), waiting for a stage of K's ring and one of V's to be empty
-- from the (stages + 1)-th block on. Each box is swizzle / 2 elements of
-- head dim wide, so box bytes count the head dim padded to a whole box;
-- global bytes count only what lies inside the tensors. Per K/V block a
-- consumer thread waits for the full barriers of K's and of V's stage,
-- its warpgroup issues padded dim / 16 wgmma of
-- S = Q K^T (n = block_n, both operands read from shared memory) and
-- block_n / 16 of O += P V (n = padded dim, P from registers); the online
-- softmax takes an exponential per score and one per row (alpha), a row
-- max over the row's 4 lanes (2 shuffles a row), eager also its sum (2
-- more) and P scaled by 1 / l; O is rescaled at every block but the
-- first when the S of the next block overlaps. With ping-pong a consumer
-- waits for its turn (bar.sync) before each S. The epilogue: O scaled
-- and written to shared memory (4 bytes per thread and pair), two named
-- barriers, deferred's row sums over the quad (2 shuffles a row), the
-- logsumexp (a logarithm and a float per row that saw a key; rows past
-- seq_q none), and O stored by TMA, 64 rows per consumer with rows.
--
-- With P in shared memory (pv = "ss") a consumer thread writes its half
-- of P's pairs (4 bytes each) per block and waits twice at its
-- warpgroup's named barrier (before and after), and P V's wgmma read P (64 x 16 per k16 step) there.
--
-- A persistent kernel (persistent = 1) runs the same tiles on at most
-- three CTAs on the emulator (EMU_PERSISTENT_CTAS, runtime/emu/
-- backend_emu.c), each taking its tiles in rounds, every other round in
-- reverse: one __syncthreads per CTA; every tile's consumers wait for Q
-- (a tile without K/V blocks too); the producer waits for Q's buffer
-- (the release of the K of its tile before that had blocks), for the
-- stores of O of the tile before (from its second tile on), and for
-- empty stages from the (stages + 1)-th block of the CTA on, its tiles
-- one ring.
--
-- Units are the emulator's: bytes per access for memory (a TMA copy once,
-- by its thread; a wgmma once per warpgroup), exponentials, logarithms,
-- rescales and waits per thread, shuffles per warp, wgmma per warpgroup,
-- __syncthreads per CTA.

local model = {}

local function cdiv(a, b) return (a + b - 1) // b end
local function clamp(x, lo, hi) return x < lo and lo or (x > hi and hi or x) end

local esize = { fp16 = 2, bf16 = 2 }

local counters = require("counters")

-- The counters this model predicts (the others are mma.sync's, cp.async's
-- and __syncwarp's, which the family does not use).
local predicted = { gmem_read = true, gmem_written = true, tma_bytes = true, smem_read = true,
                    smem_written = true, exp2 = true, log2 = true, rescale = true, wgmma = true,
                    wgmma_flops = true, mbar_waits = true, named_waits = true, shuffles = true,
                    barriers = true }

-- The K/V blocks the CTA at q0 runs: all of them, or with the causal mask
-- those up to its last row's diagonal (row r sees keys c <= r + sk - sq).
local function kv_blocks(c, q0, sq, sk)
  local last = sk
  if c.causal == 1 then last = clamp(math.min(q0 + c.block_m, sq) + sk - sq, 0, sk) end
  return cdiv(last, c.block_n)
end

-- Rows of [q0, q0 + rows) that see at least one key.
local function keyed(c, q0, rows, sq, sk)
  if sk == 0 then return 0 end
  if c.causal ~= 1 then return rows end
  return clamp(q0 + rows - math.max(q0, sq - sk), 0, rows)
end

local EMU_PERSISTENT_CTAS = 3

local function per_head(c, sq, sk)
  local es, dim, bm, bn, cons = esize[c.dtype], c.dim, c.block_m, c.block_n, c.consumers
  local col = tonumber(c.swizzle) // 2
  local dp = cdiv(dim, col) * col                  -- the padded head dim
  local eager, overlap, persistent = c.norm == "eager", c.overlap == 1, c.persistent == 1
  local pss = c.pv == "ss"
  local threads, warps = 128 * cons, 4 * cons      -- the consumers'
  local n = counters.tally(predicted)
  local add = n.add
  -- Per K/V block and consumer warpgroup: its wgmma and what they read.
  local s_mma, pv_mma = dp // 16, bn // 16
  for q0 = 0, sq - 1, bm do
    local rows = clamp(sq - q0, 0, bm)
    local nb = kv_blocks(c, q0, sq, sk)
    if not persistent then add("barriers", 1) end
    if nb > 0 then                                                 -- Q
      add("tma_bytes", bm * dp * es)
      add("smem_written", bm * dp * es)
      add("gmem_read", rows * dim * es)
      if not persistent then add("mbar_waits", threads) end
    end
    for j = 0, nb - 1 do                                           -- K and V
      local keys = clamp(sk - j * bn, 0, bn)
      add("tma_bytes", 2 * bn * dp * es)
      add("smem_written", 2 * bn * dp * es)
      add("gmem_read", 2 * keys * dim * es)
    end
    if not persistent then add("mbar_waits", 2 * math.max(nb - c.stages, 0)) end  -- K's, V's empty
    add("mbar_waits", 2 * threads * nb)                            -- K's, V's full
    add("wgmma", nb * cons * (s_mma + pv_mma))
    add("wgmma_flops", nb * cons * (s_mma * 2 * 64 * bn * 16 + pv_mma * 2 * 64 * dp * 16))
    add("smem_read", nb * cons * (s_mma * (64 * 16 * es + 16 * bn * es)
                                  + pv_mma * ((pss and 64 * 16 * es or 0) + 16 * dp * es)))
    if pss then                                                    -- P through shared memory
      add("smem_written", nb * threads * bn * es // 2)
      add("named_waits", 2 * nb * threads)
    end
    add("exp2", nb * threads * (2 + bn // 2))
    add("shuffles", nb * warps * (eager and 8 or 4))
    local rescaled = overlap and math.max(nb - 1, 0) or nb         -- O by alpha
    add("rescale", threads * (rescaled * dp // 2 + (eager and nb * bn // 2 or 0)))
    if c.pingpong == 1 then add("named_waits", threads * nb) end
    -- The epilogue.
    add("rescale", threads * dp // 2)
    add("smem_written", threads * dp)
    add("named_waits", 2 * threads)
    if not eager then add("shuffles", 4 * warps) end
    local k = keyed(c, q0, rows, sq, sk)
    if nb == 0 then k = 0 end
    add("log2", k)
    add("gmem_written", rows * (dim * es + 4))                     -- O, the logsumexp
    local stores = cdiv(rows, 64)
    add("tma_bytes", stores * 64 * dp * es)
    add("smem_read", stores * 64 * dp * es)
  end
  return n
end

-- A persistent kernel's waits and barriers, which follow its CTAs' tiles
-- rather than each tile.
local function persistent_counts(c, problem)
  local n = counters.tally(predicted)
  local sq, sk, threads = problem.seq_q, problem.seq_k, 128 * c.consumers
  local n_mb, n_bh = cdiv(sq, c.block_m), problem.batch * problem.heads
  local tiles = n_mb * n_bh
  local g = math.min(tiles, EMU_PERSISTENT_CTAS)
  for cta = 0, g - 1 do
    n.add("barriers", 1)
    local kv, nt, round = 0, 0, 0
    while round * g < tiles do
      local tile = round * g + (round % 2 == 1 and g - 1 - cta or cta)
      if tile < tiles then
        local mb = c.causal == 1 and n_mb - 1 - tile // n_bh or tile % n_mb
        local nb = kv_blocks(c, mb * c.block_m, sq, sk)
        n.add("mbar_waits", threads)                                -- Q
        if nb > 0 and kv > 0 then n.add("mbar_waits", 1) end        -- Q's buffer
        if nt > 0 then n.add("mbar_waits", 1) end                   -- O's stores
        kv, nt = kv + nb, nt + 1
      end
      round = round + 1
    end
    n.add("mbar_waits", 2 * math.max(kv - c.stages, 0))            -- K's, V's empty
  end
  return n
end

-- The counters for `problem` (seq_q, seq_k, batch, heads), by the names
-- of the emulator's counters.
function model.predict(c, problem)
  local h = per_head(c, problem.seq_q, problem.seq_k)
  local bh = problem.batch * problem.heads
  local out = h.report(function() return bh end)
  if c.persistent == 1 then
    local x = persistent_counts(c, problem)
    for _, e in ipairs(out) do e[2] = e[2] + x.n[e[1]] end
  end
  return out
end

return model
