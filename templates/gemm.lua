-- gemm.lua
-- A Hopper GEMM (sm_90a) on the warpgroup primitives: C = A B per batch,
-- bf16 or fp16 in, f32 out, wgmma m64nNk16 with N the whole tile width,
-- fed by TMA through a 3-stage mbarrier pipeline: one producer warpgroup
-- (one elected thread of its first warp issues the loads) and 1 or 2
-- consumer warpgroups of 64 rows each. No point of the attention space:
-- rendered by gen_render_gemm from a "k=v,..." config of its own, and the
-- model the attention family on wgmma will follow.
--
-- Config keys (defaults first):
--   dtype  bf16 | fp16
--   n      128 | 64 | 256    the tile's columns, wgmma's N
--   a      smem | regs       A by descriptor, or as registers loaded from
--                            the swizzled tile (the m64k16 fragment)
--   b      k | mn            B K-major (stored N x K, K contiguous) or
--                            MN-major (stored K x N, N contiguous)
--   wg     1 | 2             consumer warpgroups: 64 or 128 rows per CTA
--   plant  none | early_read | reuse | phase | expect_tx
--                            a deliberate mistake, for the tests that the
--                            emulator catches each: the accumulators read
--                            before wgmma.wait_group; a stage released to
--                            the producer before the wgmma reading it is
--                            waited for; the consumers waiting on the
--                            wrong parity of the full barrier; the
--                            producer arriving without expect_tx.
--
-- The problem, in fa_params (the template's own use of the fields):
--   seq_q = M, seq_k = N, heads = K, batch = batch;
--   tmap[0]: A, rank 3 {K, M, batch}, box {64, 64 * wg}, 128B swizzle;
--   tmap[1]: B, K-major rank 3 {K, N, batch}, box {64, n}; MN-major
--            {N, K, batch}, box {64, 64}; 128B swizzle;
--   tmap[2]: C (f32), rank 3 {N, M, batch}, box {n, 64}, no swizzle.
-- Launch: grid {ceil(N / n), ceil(M / (64 * wg)), batch}, block
-- 128 * (wg + 1) threads, smem_bytes of dynamic shared memory.

local gemm = { name = "gemm", version = 1 }

local axes = {
  { "dtype", { "bf16", "fp16" } },
  { "n", { "128", "64", "256" } },
  { "a", { "smem", "regs" } },
  { "b", { "k", "mn" } },
  { "wg", { "1", "2" } },
  { "plant", { "none", "early_read", "reuse", "phase", "expect_tx" } },
}
gemm.axes = axes

local BK, STAGES = 64, 3

-- The config table for text "k=v,...": every key known, every value
-- listed; unset keys take the first value.
local function parse(text)
  local cfg = {}
  for item in tostring(text):gmatch("[^,]+") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*([%w_]+)%s*$")
    if not k then error("gemm config: '" .. item .. "' is not key=value", 0) end
    if k ~= "family" or v ~= "gemm" then
      local known
      for _, ax in ipairs(axes) do
        if ax[1] == k then
          known = true
          local ok
          for _, allowed in ipairs(ax[2]) do ok = ok or allowed == v end
          if not ok then
            error("gemm config: " .. k .. "=" .. v .. " (one of " .. table.concat(ax[2], ", ") .. ")", 0)
          end
        end
      end
      if not known then error("gemm config: unknown key '" .. k .. "'", 0) end
      cfg[k] = v
    end
  end
  for _, ax in ipairs(axes) do cfg[ax[1]] = cfg[ax[1]] or ax[2][1] end
  return cfg
end

function gemm.render(text)
  local cfg = parse(text)
  if cfg.plant == "early_read" and cfg.a == "regs" then
    -- With A in registers every k-tile waits for its wgmma: nothing is early.
    error("gemm config: plant=early_read needs a=smem", 0)
  end
  local N, WG = tonumber(cfg.n), tonumber(cfg.wg)
  local BM = 64 * WG
  local a_bytes, b_bytes = BM * BK * 2, N * BK * 2
  local stage_bytes = a_bytes + b_bytes
  -- C's staging tile (f32) reuses the stages once the main loop is over.
  local pipe_bytes = math.max(STAGES * stage_bytes, BM * N * 4)
  local pairs_, parts = {}, {}
  for _, ax in ipairs(axes) do
    pairs_[#pairs_ + 1] = { ax[1], cfg[ax[1]] }
    parts[#parts + 1] = ax[1] .. "=" .. cfg[ax[1]]
  end
  local name = string.format("gemm-%s-n%d-a%s-b%s-wg%d%s", cfg.dtype, N, cfg.a, cfg.b, WG,
                             cfg.plant == "none" and "" or "-plant_" .. cfg.plant)
  local args = {
    entry = name:gsub("-", "_"), T = cfg.dtype == "fp16" and "f16" or "bf16", N = N, BM = BM, BK = BK, WG = WG,
    STAGES = STAGES, a_regs = cfg.a == "regs", b_mn = cfg.b == "mn", plant = cfg.plant,
    a_bytes = a_bytes, b_bytes = b_bytes, stage_bytes = stage_bytes, pipe_bytes = pipe_bytes,
    threads = 128 * (WG + 1),
    -- wgmma groups left in flight when a k-tile's stage is released: one
    -- with A in shared memory; none with A in registers, whose next
    -- fragment overwrites what the last wgmma may still read.
    inflight = cfg.a == "regs" and 0 or 1,
  }
  return {
    -- Launched with fa_params, the forward pass's parameter block.
    source = render("gemm.cu", args), op = "fwd",
    launches = {
      -- 1024 bytes to align the stages to the 128B swizzle's repeat, then
      -- the pipeline, then full[] and empty[] barriers. The grid as above,
      -- in fa_params' names: seq_k = N, seq_q = M.
      { entry = args.entry, threads = args.threads, smem_bytes = 1024 + pipe_bytes + 2 * STAGES * 8,
        grid = { { "seq_k", N }, { "seq_q", BM }, "batch" }, workspaces = {} },
    },
    registers_estimate = N // 2 + 40, io_align = 16,
    name = name, hash = name, config = "family=gemm," .. table.concat(parts, ","),
    family = "gemm", pairs = pairs_, template_version = gemm.version, arch = "sm_90a",
    preludes = require("enum").preludes,
  }
end

return gemm
