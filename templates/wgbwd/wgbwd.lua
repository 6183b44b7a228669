-- wgbwd.lua
-- The Hopper backward family (sm_90a): FlashAttention-2's backward
-- algorithm in FlashAttention-3's structure, on warpgroup MMA, TMA and
-- mbarriers, for fp16 and bf16 (fp32 accumulation). Three launches, as
-- tcbwd's:
--   pre        D = rowsum(dO * O) - dlse per query row into the workspace
--              "delta", and dQ's float accumulator zeroed;
--   dkdv       a CTA per K/V block of block_n keys (64 per consumer
--              warpgroup) and K/V head: K and V loaded once by TMA, then
--              the Q blocks of the K/V head's query heads go by, Q and dO
--              by TMA into a ring of `stages` stages, each row's lse and D
--              beside them, Q's and dO's on full/empty mbarriers of their
--              own, as FA3's two pipelines (a producer warpgroup,
--              its registers given to the consumers by setmaxnreg, as
--              FA3's mainloop_bwd_sm90_tma_gmma_ws.hpp). A consumer owns 64
--              keys: S^T = K Q^T and dP^T = V dO^T by wgmma from shared
--              memory, P^T = exp2(S^T log2e - lse) and dS^T = P^T (dP^T -
--              D) on the accumulator fragments, then dV += P^T dO and dK
--              += dS^T Q by wgmma with P^T and dS^T from registers (the D
--              fragment, packed, is the A fragment, as the forward pass's
--              P) and dO, Q MN-major; dS^T also goes to shared memory
--              (two buffers), from which the consumers compute dQ's share
--              dS K (A MN-major): over the block's keys in 64 x 64 tiles
--              dealt among them once every consumer's dS^T is there
--              (dq_split = block), or each over its own keys (own, the
--              consumers adding in turn), added to the accumulator by
--              atomics in the order of the fragment (one 128-byte line a
--              warp's add). With ping-pong (FA3's
--              forward warp scheduler barrier, here in the backward pass)
--              the two consumers take turns issuing S^T and dP^T (and,
--              block, then dQ's products), so that one's softmax runs
--              under the other's products instead of both at once;
--   dqconvert  dQ = scale * the accumulator, in the tensor's layout.
-- Under GQA a CTA per K/V head walks every query head of its group, so
-- dK and dV are written once, summed in one order.
-- Shared memory holds tiles as TMA writes them under the 128-byte
-- swizzle: a tile of R rows is padded_dim / 64 column blocks of R rows of
-- 128 bytes; the head dim pads up to a whole column block (zeros, never
-- stored), and must be a multiple of 8 (TMA's rows are multiples of 16
-- bytes).

local wgbwd = { name = "wgbwd", version = 2 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

wgbwd.title = "wgmma with TMA, backward"
wgbwd.targets = { "sm_90a" }
-- After tcbwd, whose kernels an H200 has run: the library takes tcbwd's
-- defaults until a tuning run records a wgbwd variant.
wgbwd.rank = 2
wgbwd.preludes = enum.preludes
wgbwd.op = "bwd"

function wgbwd.default_dtype() return "bf16", "sm_90a has wgmma in bf16" end

wgbwd.axes = {
  enum_axis("dtype", { "fp16", "bf16" }, { fp16 = "f16" }),
  int_axis("dim", 1, 256, { prefix = "d" }),
  enum.dim_v_axis(256),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 64, 192, { prefix = "m" }),
  int_axis("block_n", 64, 128, { prefix = "n" }),
  -- One or two consumer warpgroups: three would get 128 registers a
  -- thread under the launch bound of 512 threads, where S^T, dP^T, dK and
  -- dV spill (ptxas, CUDA 13: 272 bytes at d64).
  int_axis("consumers", 1, 2, { prefix = "c" }),
  int_axis("stages", 2, 3, { prefix = "s" }),
  -- The consumers take turns issuing S^T and dP^T (pp), so that one's
  -- softmax runs under the others' products; or issue them as their
  -- stage lands (np), together, as they wait on one barrier.
  int_axis("pingpong", 0, 1, { [0] = "np", [1] = "pp" }),
  -- dQ's share of a Q block: over the block's keys, its 64 x 64 tiles
  -- dealt among the consumers once every consumer's dS^T is in shared
  -- memory (block: a barrier among them a block); or each consumer over
  -- its own keys (own: twice the atomic adds, and dQ's accumulators of the
  -- whole block in registers, but no consumer waits for the other's dS^T;
  -- they only add in turn, a block's adds of consumer 0 before consumer
  -- 1's, so that the order of the adds to an element is the CTA's).
  enum_axis("dq_split", { "block", "own" }, { block = "dqblock", own = "dqown" }),
}
wgbwd.axis = enum.index(wgbwd.axes)

-- wgbwd-bf16-d128-m64n128c2-pp-dqblock-s2[-causal]
wgbwd.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "consumers" }, { "pingpong" },
                 { "dq_split" }, { "stages" }, { "causal" } }

local SW = 128         -- bytes of a swizzled row
local CB = SW // 2     -- 16-bit elements of a column block

local function padded(dim) return (dim + CB - 1) // CB * CB end

-- FlashAttention-3's backward tiles (hopper/flash_bwd_launch_template.h,
-- sm90, 16-bit): d64 128 x 128 and d128 64 x 128, two MMA warpgroups
-- over the keys, two stages of Q and dO.
function wgbwd.defaults(problem)
  local d = problem.dim or 64
  local bm = padded(d) <= 64 and 128 or 64
  return { dtype = problem.dtype or "bf16", dim = d, dim_v = enum.dim_v(problem),
           causal = problem.causal or 0, block_m = bm, block_n = 128, consumers = 2, stages = 2,
           pingpong = 1, dq_split = "own" }
end

function wgbwd.supports(problem)
  return problem.dtype == "fp16" or problem.dtype == "bf16"
end

-- setmaxnreg per warpgroup: producer, consumer (wg.lua's split).
local nreg = { { 56, 240 }, { 24, 240 } }

function wgbwd.plan(c)
  local P = { DP = padded(c.dim), BM = c.block_m, BN = c.block_n, C = c.consumers, S = c.stages }
  P.NCB = P.DP // CB
  P.threads = 128 * (c.consumers + 1)
  P.kv_bytes = c.block_n * P.DP * 2          -- K's tile, and V's
  P.q_bytes = c.block_m * P.DP * 2           -- a stage's Q, and its dO
  P.ds_bytes = c.block_m * c.block_n * 2     -- one of dS^T's two buffers
  local off = 0
  local function take(n) local at = off; off = off + n; return at end
  P.off_k, P.off_v = take(P.kv_bytes), take(P.kv_bytes)
  P.off_q, P.off_do = take(c.stages * P.q_bytes), take(c.stages * P.q_bytes)
  P.off_ds = take(2 * P.ds_bytes)
  -- Each stage's lse (log2 units) and D, block_m floats each.
  P.off_lse, P.off_d = take(4 * c.stages * c.block_m), take(4 * c.stages * c.block_m)
  -- K/V's barrier, then the stages' fullq[], fulldo[], emptyq[] and emptydo[].
  P.off_bar = take(8 * (1 + 4 * c.stages))
  P.smem_bytes = 1024 + off   -- 1024: the tiles aligned to the swizzle's repeat
  P.producer_regs, P.consumer_regs = nreg[c.consumers][1], nreg[c.consumers][2]
  -- dQ's 64 x 64 tiles of a Q block, dealt among the consumers.
  P.dq_tiles = (c.block_m // 64) * (P.DP // 64)
  P.dq_rounds = (P.dq_tiles + c.consumers - 1) // c.consumers
  -- Registers per consumer thread, at the larger of two peaks: S^T and
  -- dP^T (block_m / 2 each) beside dK and dV (DP / 2 each); then P^T and
  -- dS^T packed (block_m / 4 each), which dV's and dK's products read until
  -- they are done, beside dK, dV and dQ's accumulators (a 64 x 64 tile, 32;
  -- own: block_m x DP / 128); and 16 for addresses and the loop (ptxas
  -- keeps d128 64 x 128 with dq_split = own, 240 words, from spilling).
  -- dq_split = own: the tiles of dQ's share in flight at once: one. Beside
  -- d128's dK and dV (128 words) a second tile's 32 make the dkdv kernel
  -- lose a fifth by the timing model (562 against 724 TFLOP/s, H100, 16k);
  -- at d64 both tiles at once make ptxas spill in the loop without the
  -- mask (dkdv's loop over the Q blocks in two, wgbwd.cu), 8 to 32 bytes.
  P.own_window = 1
  -- The Q blocks the mask (or the keys' tail) reaches into in a loop of
  -- their own, so that the loop over the others has no mask's code (as
  -- FA3's mainloop); not with one consumer of 128-row Q blocks, whose
  -- S^T and dP^T (128 words) the two loops make ptxas spill, 8 to 16 bytes.
  P.mask_apart = c.consumers > 1 or c.block_m <= 64
  P.dq_words = 32 * P.own_window
  P.register_words = math.max(c.block_m + P.DP, P.DP + c.block_m // 2 + P.dq_words) + 16
  return P
end

function wgbwd.fits(c, _, target)
  if c.dim_v ~= 0 then return false, "wgbwd computes V's head dim equal to Q's and K's" end
  if c.dim % 8 ~= 0 then
    return false, "head dim " .. c.dim .. " is no multiple of 8: TMA needs rows of a multiple of 16 bytes"
  end
  if padded(c.dim) > 128 then
    return false, "head dim over 128: dK's and dV's accumulators leave a consumer no room (tcbwd takes it)"
  end
  if c.block_n ~= 64 * c.consumers then
    return false, "block_n must be 64 keys per consumer warpgroup (64 * consumers)"
  end
  if c.block_m % 64 ~= 0 or c.block_m > 128 then
    return false, "block_m must be 64 or 128 (dQ's tiles are 64 rows)"
  end
  local P = wgbwd.plan(c)
  if c.pingpong == 1 and c.consumers < 2 then
    return false, "ping-pong takes turns between two consumer warpgroups"
  end
  if P.threads > target.max_threads then return false, "too many threads" end
  if P.smem_bytes > target.smem then return false, "shared memory over the limit" end
  if P.register_words > P.consumer_regs then
    return false, string.format("register estimate %d over the consumers' %d (setmaxnreg)",
                                P.register_words, P.consumer_regs)
  end
  return true
end

-- The default space: FlashAttention-3's tile, then one axis at a time
-- around it (the other block_m, one consumer, three stages).
function wgbwd.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0 }
  local out = {}
  if which == "full" then
    for cons = 1, 2 do
      enum.cross(wgbwd.axes, enum.with(base, { block_n = 64 * cons, consumers = cons }),
                 { block_m = { 64, 128 }, stages = { 2, 3 }, pingpong = { 0, 1 },
                   dq_split = { "block", "own" } }, out)
    end
    return out
  end
  local d = wgbwd.defaults(problem)
  if which == "small" then
    out[1] = enum.with(d, { block_m = 64, block_n = 64, consumers = 1, pingpong = 0 })
    return out
  end
  out[1] = d
  out[2] = enum.with(d, { block_m = d.block_m == 128 and 64 or 128 })
  out[3] = enum.with(d, { block_n = 64, consumers = 1, pingpong = 0 })
  out[4] = enum.with(d, { stages = 3 })
  out[5] = enum.with(d, { pingpong = 0 })
  out[6] = enum.with(d, { dq_split = d.dq_split == "own" and "block" or "own" })
  return out
end

function wgbwd.render(c)
  local P = wgbwd.plan(c)
  local entry = wgbwd.name_of(c):gsub("-", "_")
  local ws = { { name = "delta", bytes_per_row = 4 },
               -- dQ's accumulator: rooms of block_m x the padded head dim
               { name = "dq_acc", bytes_per_row = 4 * P.DP,
                 row_align = c.block_m } }
  local q_grid = { { "seq_q", c.block_m }, "heads", "batch" }
  return {
    source = render("wgbwd.cu", { cfg = c, P = P, entry = entry, T = c.dtype == "bf16" and "bf16" or "f16" }),
    launches = {
      -- every launch with the dkdv kernel's threads, as tcbwd's (one
      -- count a variant: what its name says)
      { entry = entry .. "_pre", threads = P.threads, smem_bytes = 0, grid = q_grid, workspaces = ws },
      { entry = entry .. "_dkdv", threads = P.threads, smem_bytes = P.smem_bytes, main = true,
        grid = { { "seq_k", c.block_n }, "kv_heads", "batch" }, workspaces = ws },
      { entry = entry .. "_dqconvert", threads = P.threads, smem_bytes = 0, grid = q_grid, workspaces = ws },
    },
    registers_estimate = P.register_words,
    io_align = 16,
    arch = "sm_90a",
    -- fa_params.tmap[0..3]: Q and dO (block_m rows), K and V (block_n rows),
    -- a column block wide.
    tma = {
      { tensor = "q", box = { CB, c.block_m }, swizzle = SW },
      { tensor = "k", box = { CB, c.block_n }, swizzle = SW },
      { tensor = "v", box = { CB, c.block_n }, swizzle = SW },
      { tensor = "d", box = { CB, c.block_m }, swizzle = SW },
    },
    deterministic = false,
    red_lines = 1,
  }
end

return wgbwd
