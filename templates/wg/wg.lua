-- wg.lua
-- The Hopper family (sm_90a): FlashAttention-3-class forward kernels for
-- fp16 and bf16 (fp32 accumulation) on warpgroup MMA, TMA and mbarriers.
-- Declares the axes, the defaults, the enumeration and pruning rules, the
-- plan (shared-memory layout, register estimate), and renders wg.cu.
--
-- Structure, for every variant: one CTA per block_m query rows and
-- (batch, head). A producer warpgroup, whose registers go to the others
-- (setmaxnreg.dec), loads Q once and the K/V blocks by TMA (one elected
-- thread) into two rings of `stages` stages, K's and V's, each on
-- full/empty mbarriers (FA3's mainloop_fwd_sm90_tma_gmma_ws.hpp): K's
-- stage is freed once S is computed, V's once P V is, and the K of block
-- j + 1 is asked for before the V of block j, so the next K loads under
-- the softmax and P V.
-- `consumers` warpgroups of 64 query rows each (setmaxnreg.inc): so
-- block_m = 64 * consumers, as FlashAttention-3 sizes its tiles
-- (hopper/tile_size.h: kBlockM / 64 MMA warpgroups; 192 rows are three).
-- Per K/V block a consumer computes S = Q K^T by wgmma with both operands
-- in shared memory (K-major), the online softmax on the accumulator
-- fragment, and O += P V by wgmma with P from registers (the D fragment
-- of S, packed, is the A fragment) and V MN-major. The output goes
-- through shared memory (where the consumer's Q rows were) and a TMA
-- store; rows past seq_q are not written.
--
-- Shared memory holds tiles as TMA writes them under the swizzle: a tile
-- of R rows is dim / (swizzle / 2) column blocks, each R rows of `swizzle`
-- bytes. The head dim is padded to a whole block (the padding loads as
-- zeros and is never stored), so it must be a multiple of 8: TMA moves
-- rows whose byte strides are multiples of 16.
--
-- Axes beyond tc's: pingpong (the consumers, two or three, take turns
-- issuing their GEMMs, round robin through named barriers as FA3's warp
-- scheduler barrier, so that one's softmax runs under the others'
-- GEMMs), overlap (within a warpgroup, the S of block j + 1 is
-- issued before the P V of block j, and the softmax of block j + 1 runs
-- under that P V: its wait for P V stays after the exponentials in the
-- SASS through fa_wgmma_wait_after), swizzle (64 or 128 bytes), and
-- persistent (FlashAttention-3's scheduler: as many CTAs as the GPU holds
-- at once, each looping over tiles in rounds, every other round in
-- reverse, the longest first under a causal mask; K's and V's rings and
-- Q's barrier run on from tile to tile, O leaves through V's ring (as
-- FA3's smem_o lines up with smem_v), so the next tile's Q and K load
-- under this one's last P V and epilogue, and only its V waits for O's
-- stores), and pv (P V's P from registers, "rs", or through shared
-- memory, "ss", as FlashAttention-3's d64 tile without a mask: the
-- registers of the overlap's P go to the next S; written with plain
-- stores at addresses built once, after a barrier that the warpgroup's
-- P V before is done in every warp).
-- A variable-length batch (varlen, varlen.lua): the tensor maps span the
-- packed tensors, each box placed at its sequence's first token (rows
-- past the sequence are masked as past seq_k, or not stored); O leaves by
-- plain stores of the sequence's rows instead of a TMA store; a
-- persistent kernel's tile reads its sequence's offsets, one past its
-- rows or with bad offsets has no block.
-- A KV cache (paged, paged.lua: flash_attn_with_kvcache's prefill): K's
-- and V's maps span the pool of pages (dim, page_size, kv_heads,
-- num_pages), and each box of page_rows rows (16 to 128) lands on its
-- page, so the page size must be a multiple of page_rows (the runtime
-- refuses others; the library runs tc's form there). The producer's
-- whole warp runs the loads: a lane reads each box's page from the block
-- table an iteration ahead, a shuffle brings it to the elected lane,
-- warp-uniform, which issues the boxes. Where the sequence ends among a
-- box's rows (the tile's first block, the last of the sequence) they load
-- a row at a time, zeros past the length, as a cache holds anything
-- there; boxes past it and on pages outside the pool load zeros (TMA's
-- out-of-bounds fill). A CTA per tile (no persistent form), 128-byte
-- swizzle, 16-bit types.

local wg = { name = "wg", version = 4 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

wg.title = "wgmma with TMA"
-- wgmma, TMA and setmaxnreg exist only in arch-specific sm_90a code.
wg.targets = { "sm_90a" }
wg.rank = 0          -- before tc where it runs (sm_90a): on an H200 its defaults ran
                     -- 1.5x (d128) and 1.4x (d64) faster than tc's (scripts/gpu-check.sh)
wg.preludes = enum.preludes

function wg.default_dtype() return "bf16", "sm_90a has wgmma in bf16" end

wg.axes = {
  enum_axis("dtype", { "fp16", "bf16", "e4m3" }, { fp16 = "f16" }),
  int_axis("dim", 1, 256, { prefix = "d" }),
  enum.dim_v_axis(256),
  int_axis("causal", 0, 1, enum.flag("causal")),
  int_axis("block_m", 64, 192, { prefix = "m" }),
  int_axis("block_n", 64, 256, { prefix = "n" }),
  int_axis("stages", 2, 4, { prefix = "s" }),
  int_axis("consumers", 1, 3, { prefix = "c" }),
  int_axis("pingpong", 0, 1, { [0] = "np", [1] = "pp" }),
  int_axis("overlap", 0, 1, { [0] = "sq", [1] = "ov" }),
  enum_axis("norm", { "eager", "deferred" }),
  enum_axis("swizzle", { "128", "64" }, { prefix = "sw" }),
  int_axis("persistent", 0, 1, { [0] = "", [1] = "pers" }),
  enum_axis("pv", { "rs", "ss" }, { rs = "", ss = "psmem" }),
  enum.varlen_axis(),
  enum.paged_axis(),
  -- fp8's descales per block of rows (wg.cu's block_scales), the
  -- problem's form as varlen and paged are.
  (function()
    local a = int_axis("blockscale", 0, 1, enum.flag("blockscale"))
    a.absent = 0
    return a
  end)(),
  -- A KV cache's boxes: rows of K and V per TMA box, each within a page, so
  -- the page size must be a multiple (wg.cu's paged_block); 16 is left out
  -- of names and canonical text.
  (function()
    local a = int_axis("page_rows", 16, 128, { prefix = "pr", [16] = "" })
    a.absent = 16
    return a
  end)(),
}
wg.axis = enum.index(wg.axes)

-- FlashAttention-3's tile for a head dim and mask (hopper/tile_size.h,
-- forward, 16-bit): block_m, block_n.
function wg.fa3_tile(d, causal)
  if d <= 64 then return 192, causal == 1 and 128 or 192
  elseif d <= 96 then return 192, 144
  elseif d <= 128 then return 128, causal == 1 and 128 or 176
  elseif d <= 192 then return 128, causal == 1 and 112 or 128
  else return 128, 80 end
end

-- FlashAttention-3's fp8 tile (the same table's element_size 1 branch).
function wg.fa3_tile_fp8(d)
  if d <= 64 then return 192, 160
  elseif d <= 96 then return 192, 128
  elseif d <= 128 then return 128, 224
  elseif d <= 192 then return 128, 160
  else return 128, 128 end
end

function wg.defaults(problem)
  local d = problem.dim or 64
  local f8 = problem.dtype == "e4m3"
  local bm, bn
  if f8 then bm, bn = wg.fa3_tile_fp8(d) else bm, bn = wg.fa3_tile(d, problem.causal or 0) end
  return {
    dtype = problem.dtype or "fp16", dim = d, dim_v = enum.dim_v(problem), causal = problem.causal or 0,
    block_m = bm, block_n = bn, stages = 2, consumers = bm // 64, pingpong = 0, overlap = 0,
    norm = "deferred", swizzle = f8 and d <= 64 and "64" or "128", persistent = 0, pv = "rs",
    varlen = problem.varlen or 0, paged = problem.paged or 0, page_rows = 16,
    blockscale = problem.blockscale or 0,
  }
end

function wg.supports(problem)
  return problem.dtype == "fp16" or problem.dtype == "bf16" or problem.dtype == "e4m3"
end

-- Names ---------------------------------------------------------------------
-- wg-bf16-d128-m128n176c2-deferred-pp-ov[psmem]-s2-sw128[-pers][-causal][-varlen][-paged[-prN]][-blockscale]:
-- pp or np (ping-pong or not), ov or sq (overlapped or sequential GEMMs),
-- psmem (P V's P from shared memory) or nothing (from registers), pers
-- (persistent) or nothing (a CTA per tile); varlen, a variable-length
-- batch's form (varlen.lua); paged, the form over a KV cache, prN its
-- boxes of N rows (16: left out); blockscale, fp8's descales per block
-- of rows.
wg.naming = { { "dtype" }, { "dim", "dim_v" }, { "block_m", "block_n", "consumers" }, { "norm" },
              { "pingpong" }, { "overlap" }, { "pv" }, { "stages" }, { "swizzle" },
              { "persistent" }, { "causal" }, { "varlen" }, { "paged" }, { "page_rows" },
              { "blockscale" } }

-- Derived plan ----------------------------------------------------------------

-- setmaxnreg per warpgroup, FlashAttention-3's split of the 64K registers:
-- producer, consumer. One consumer: 256 threads, room to spare.
local nreg = { { 56, 240 }, { 24, 240 }, { 32, 160 } }

function wg.plan(c)
  local sw = tonumber(c.swizzle)
  local f8 = c.dtype == "e4m3"
  local P = { swizzle = sw, fp8 = f8, esize = f8 and 1 or 2 }
  P.col_block = sw // P.esize                        -- elements of Q and K per column block
  P.padded_dim = (c.dim + P.col_block - 1) // P.col_block * P.col_block
  P.col_blocks = P.padded_dim // P.col_block
  P.o_col_block = sw // 2                            -- O's, 16 bits
  P.threads = 128 * (c.consumers + 1)
  P.q_bytes = c.block_m * P.padded_dim * P.esize
  -- Q's buffer, where O goes: fp8's Q takes half of it.
  P.q_region = c.block_m * P.padded_dim * 2
  P.kv_bytes = c.block_n * P.padded_dim * P.esize    -- one of K, V in a stage
  -- fp8: wgmma takes both operands of P V K-major, so V comes transposed
  -- (its first launch writes it so), the keys innermost in column blocks
  -- of vt_swizzle bytes, the widest swizzle block_n is a multiple of
  -- (FlashAttention-3's 224 keys: 32).
  if f8 then
    P.vt_swizzle = c.block_n % 128 == 0 and 128 or c.block_n % 64 == 0 and 64 or 32
  end
  P.v_offset = P.q_region + c.stages * P.kv_bytes    -- V's ring, after K's
  -- P in shared memory (pv = "ss"): per consumer, 64 rows of block_n keys
  -- in column blocks as Q's.
  P.p_offset = P.v_offset + c.stages * P.kv_bytes
  P.p_bytes = c.pv == "ss" and (c.block_n + P.col_block - 1) // P.col_block * 64 * sw or 0
  P.bar_offset = P.p_offset + c.consumers * P.p_bytes
  -- 1024 bytes to align the tiles to the swizzle's repeat, then Q, K's
  -- ring, V's ring (where a persistent kernel's O goes), and the barriers:
  -- Q's, K's and V's full[] and empty[], and a persistent kernel's O's.
  P.smem_bytes = 1024 + P.bar_offset + 8 * (1 + 4 * c.stages + c.persistent)
  P.producer_regs, P.consumer_regs = nreg[c.consumers][1], nreg[c.consumers][2]
  -- Registers per consumer thread, 32-bit words: O's accumulator
  -- (padded_dim / 2), S's (block_n / 2; P is packed into it as the softmax
  -- goes), with overlap P of the block before (block_n / 4) live beside the
  -- next S, and 24 for row statistics, addresses and loop state.
  -- ptxas allocates each side of the branch on the warpgroup index (made
  -- warp-uniform in the prelude) within its setmaxnreg.
  P.register_words = P.padded_dim // 2 + c.block_n // 2 + 24
                     + (c.overlap == 1 and c.pv == "rs" and c.block_n * P.esize // 8 or 0)
  -- Yet one wgmma's operands must fit the launch bound's share, 128 for
  -- 512 threads (three consumers): there O and S's accumulators at most
  -- 128 (d64 192x192 fits, without spills; 192x208 does not compile).
  P.accumulator_cap = c.consumers == 3 and 128 or nil
  -- The K/V loop in two (the masked blocks, then the steady ones without
  -- the mask's code), but where O and S fill that share: ptxas (CUDA 13)
  -- spills d64 192x192 with two copies of the body, so one loop keeps the
  -- mask under a branch.
  -- A KV cache's K and V load in boxes of page_rows rows, each within a
  -- page (wg.cu's paged_block).
  P.page_rows = c.paged == 1 and c.page_rows or nil
  P.split_loop = not (P.accumulator_cap and P.padded_dim // 2 + c.block_n // 2 >= P.accumulator_cap)
  return P
end

-- Constraints -------------------------------------------------------------------

function wg.fits(c, _, target)
  if c.dim > 256 then return false, "head dim over 256" end
  if c.dim_v ~= 0 then
    return false, "wg computes V's head dim equal to Q's and K's (its TMA boxes and GMMA tiles take one)"
  end
  if c.dim % 8 ~= 0 then
    return false, "head dim " .. c.dim
                  .. " is no multiple of 8: TMA needs rows of a multiple of 16 bytes"
  end
  if c.block_m ~= 64 * c.consumers then
    return false, "block_m must be 64 rows per consumer warpgroup (64 * consumers)"
  end
  if c.block_n % 16 ~= 0 then return false, "block_n must be a multiple of 16" end
  if c.pingpong == 1 and c.consumers < 2 then
    return false, "ping-pong takes turns between two or three consumer warpgroups"
  end
  if c.dtype == "e4m3" then
    if c.dim % 16 ~= 0 then
      return false, "head dim " .. c.dim .. " is no multiple of 16: TMA needs fp8 rows of a "
                    .. "multiple of 16 bytes"
    end
    if c.block_n % 32 ~= 0 then
      return false, "fp8's block_n must be a multiple of 32 (wgmma's k32 steps of P V)"
    end
    if c.pv == "ss" then return false, "fp8's P V takes P from registers (pv=rs)" end
    if c.norm == "eager" then
      return false, "fp8 normalizes O once, at the end (deferred): eager's P / l falls "
                    .. "among e4m3's subnormals and loses its precision"
    end
    if c.varlen == 1 then return false, "fp8 has no variable-length form yet" end
    if c.blockscale == 1 and c.mod and c.mod.score then
      return false, "descales per block of rows scale the scores after a score modification "
                    .. "would take them: not with one (masks only) yet"
    end
  elseif c.blockscale == 1 then
    return false, "descales per block of rows (blockscale) scale fp8 (e4m3) inputs only"
  end
  if c.page_rows ~= 16 and c.paged ~= 1 then
    return false, "page_rows is the KV cache form's (paged=1): its boxes' rows"
  end
  if c.page_rows % 16 ~= 0 or c.block_n % c.page_rows ~= 0 then
    return false, string.format("page_rows %d must be a multiple of 16 that divides block_n %d",
                                c.page_rows, c.block_n)
  end
  if c.paged == 1 then
    local ok, why = require("paged").fits(c)
    if not ok then return false, why end
    if c.dtype == "e4m3" then return false, "fp8 has no form over a KV cache (paged) yet" end
    if c.persistent == 1 then
      return false, "a KV cache's form runs a CTA per tile (each sequence's length from its own "
                    .. "CTA's batch): persistent=0"
    end
    if c.swizzle ~= "128" then
      return false, "a KV cache's rows load one at a time where a sequence ends: 128-byte "
                    .. "rows (swizzle=128), as TMA places boxes on 128-byte lines"
    end
  end
  if c.persistent == 1 and 2 * c.block_m > c.stages * c.block_n * (c.dtype == "e4m3" and 1 or 2) then
    return false, "a persistent kernel's O (block_m rows of 16 bits) goes through V's ring of "
                  .. "stages * block_n rows"
  end
  local P = wg.plan(c)
  if P.threads > target.max_threads then return false, "too many threads" end
  if P.smem_bytes > target.smem then return false, "shared memory over the limit" end
  if P.accumulator_cap and P.padded_dim // 2 + c.block_n // 2 > P.accumulator_cap then
    return false, string.format("O and S accumulators of %d words over the %d registers ptxas "
                                .. "gives a wgmma of %d threads",
                                P.padded_dim // 2 + c.block_n // 2, P.accumulator_cap, P.threads)
  end
  if P.register_words > P.consumer_regs then
    return false, string.format("register estimate %d over the consumers' %d (setmaxnreg)",
                                P.register_words, P.consumer_regs)
  end
  return true
end

-- Enumeration -------------------------------------------------------------------

local with = enum.with

-- The default space, per (dim, causal): FlashAttention-3's tile in the
-- simplest structure (deferred, no ping-pong, no overlap, two stages,
-- 128B swizzle), then one axis at a time around it, and neighbouring
-- block_n; where FA3 takes three consumers, two as well (with overlap and
-- ping-pong, which the timing model rates above three's) and three with
-- the overlap and P through shared memory (pv = "ss", FA3's d64
-- structure); the leading structures persistent as well.
-- "full" is the cross product; "small" the fallback when nothing of the
-- default fits.
function wg.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0, varlen = problem.varlen or 0,
                 paged = problem.paged or 0, page_rows = 16, blockscale = problem.blockscale or 0 }
  local out = {}
  if which == "full" then
    local bn = {}
    for n = 64, 256, 16 do bn[#bn + 1] = n end
    for cons = 1, 3 do
      enum.cross(wg.axes, with(base, { block_m = 64 * cons, consumers = cons }),
                 { block_n = bn, stages = { 2, 3, 4 }, pingpong = { 0, 1 }, overlap = { 0, 1 },
                   norm = { "eager", "deferred" }, swizzle = { "128", "64" },
                   persistent = { 0, 1 }, pv = { "rs", "ss" } }, out)
    end
    return out
  end
  local d = wg.defaults(problem)
  if which == "small" then
    out[1] = with(d, { block_m = 64, consumers = 1, block_n = 64 })
    return out
  end
  local seen = {}
  local function add(c)
    local key = wg.name_of(c)
    if not seen[key] then seen[key] = true; out[#out + 1] = c end
  end
  add(d)
  local bn, step = d.block_n, d.dtype == "e4m3" and 32 or 16  -- fp8: k32 steps of P V
  -- Eager normalization but where O and S fill the registers ptxas gives
  -- one wgmma (d64 192x192): there its factors spill, 6 local loads and
  -- stores per K/V block; `explore --axis norm` still compares it.
  local P = wg.plan(d)
  local full = P.accumulator_cap and P.padded_dim // 2 + d.block_n // 2 >= P.accumulator_cap
  for _, ch in ipairs({ { norm = "eager" }, { overlap = 1 }, { stages = 3 }, { swizzle = "64" },
                        { block_n = bn - step }, { block_n = bn + step } }) do
    if not (full and ch.norm == "eager") then add(with(d, ch)) end
  end
  -- fp8 halves a stage's bytes: deeper rings of smaller blocks, with the
  -- overlap; past d64, 4 stages of block_n - 32 too, and each persistent.
  -- The timing model ranks them first on H100 at seq 16k (d128 128x192
  -- in 4 stages: 1360 TFLOP/s against FA3's tile's 1239, whose loads are
  -- latency-bound; d256 128x96 in 3, persistent: 1563 against 1490); at
  -- d64 below FA3's tile (at most 612 against 747).
  if d.dtype == "e4m3" then
    local deep = { { overlap = 1, stages = 3 }, { overlap = 1, stages = 3, block_n = bn - 32 },
                   { overlap = 1, stages = 4, block_n = bn - 64 } }
    if d.dim > 64 then table.insert(deep, 3, { overlap = 1, stages = 4, block_n = bn - 32 }) end
    for _, ch in ipairs(deep) do
      add(with(d, ch))
      if d.dim > 64 then add(with(with(d, ch), { persistent = 1 })) end
    end
  end
  -- The structures that lead, persistent as well (FlashAttention-3's
  -- scheduler: it pays off where tiles are short or, causal, uneven).
  local lead
  if d.consumers == 2 then
    add(with(d, { pingpong = 1 }))
    add(with(d, { pingpong = 1, overlap = 1 }))
    lead = { d, with(d, { overlap = 1 }), with(d, { pingpong = 1, overlap = 1 }) }
  else
    -- FlashAttention-3's d64 structure: with the overlap, P through shared
    -- memory (by stmatrix), where three consumers' registers hold no P
    -- beside the next S. Two consumers as well, with overlap and ping-pong.
    local pss = with(d, { overlap = 1, pv = "ss" })
    add(pss)
    local two = with(d, { block_m = 128, consumers = 2 })
    add(two)
    add(with(two, { overlap = 1 }))
    add(with(two, { pingpong = 1 }))
    add(with(two, { pingpong = 1, overlap = 1 }))
    lead = { d, with(d, { overlap = 1 }), pss, with(two, { overlap = 1 }),
             with(two, { pingpong = 1, overlap = 1 }) }
  end
  for _, c in ipairs(lead) do add(with(c, { persistent = 1 })) end
  -- A KV cache's form (persistent kernels have none) in boxes of more
  -- rows as well, for pages of more: the most of 32, 64, 128 that divide
  -- the tile's block_n (the library takes it where the pages allow, as the
  -- timing model rates it: at d64 192x192 on H100, boxes of 64 rows ran
  -- 1.3x those of 16).
  if d.paged == 1 then
    local rows
    for _, r in ipairs({ 32, 64, 128 }) do if d.block_n % r == 0 then rows = r end end
    if rows then add(with(d, { page_rows = rows })) end
  end
  return out
end

-- Rendering -------------------------------------------------------------------------

wg.op = "fwd"
wg.mods = true       -- applies score and mask modifications (mod.lua)

function wg.render(c)
  local P = wg.plan(c)
  local args = { cfg = c, P = P, entry = wg.name_of(c):gsub("-", "_") }
  local cb, sw = P.col_block, P.swizzle
  local main = { entry = args.entry, threads = P.threads, smem_bytes = P.smem_bytes,
                 grid = { { "seq_q", c.block_m }, "heads", "batch" },
                 workspaces = {}, heavy_first = c.causal == 1 and c.persistent == 0,
                 persistent = c.persistent == 1 }
  -- fa_params.tmap[0..3]: Q (block_m rows), K and V (block_n rows), O (a
  -- consumer's 64 rows), one column block wide; fp8's V transposed: a
  -- column block of vt_swizzle keys by the padded dim.
  -- A KV cache's (paged): K's and V's maps span the pool of pages, boxes
  -- of 16 rows within a page, and of one row where the page size is no
  -- multiple of 16 or a sequence ends (tmap[4], tmap[5]).
  local kv_rows = c.paged == 1 and P.page_rows or c.block_n
  local tma = {
    { tensor = "q", box = { cb, c.block_m }, swizzle = sw },
    { tensor = "k", box = { cb, kv_rows }, swizzle = sw },
    { tensor = "v", box = { cb, kv_rows }, swizzle = sw },
    { tensor = "o", box = { P.o_col_block, 64 }, swizzle = sw },
  }
  if c.paged == 1 then
    tma[5] = { tensor = "k", box = { cb, 1 }, swizzle = sw }
    tma[6] = { tensor = "v", box = { cb, 1 }, swizzle = sw }
  end
  local launches = { main }
  if P.fp8 then
    -- V transposed first, 32 keys per CTA, into the workspace the map
    -- over it ('t') reads: per (batch, head) dim bytes per key, the keys
    -- padded to whole 32-key chunks.
    -- blockscale's factors follow (wg.cu's bs_factors): 8 bytes per 32
    -- keys up to the last block's end, which 4 bytes more per key (128
    -- per chunk) hold at every block size, a sequence of one chunk too.
    local vt = { name = "vt", bytes_per_row = c.dim + (c.blockscale == 1 and 4 or 0), rows = "seq_k",
                 row_align = 32 }
    main.workspaces, main.main = { vt }, true
    launches = { { entry = args.entry .. "_vt", threads = 128, smem_bytes = 0, role = "v_transpose",
                   grid = { { "seq_k", 32 }, "kv_heads", "batch" }, workspaces = { vt } }, main }
    tma[3] = { tensor = "t", box = { P.vt_swizzle, P.padded_dim }, swizzle = P.vt_swizzle }
  end
  return {
    source = render("wg.cu", args),
    launches = launches,
    registers_estimate = P.register_words,
    io_align = 16,
    arch = "sm_90a",
    tma = tma,
  }
end

-- The analytic cost model: the emulator's counters on a problem, exactly
-- (wg_model.lua).
function wg.predict(c, problem)
  return require("wg_model").predict(c, problem)
end

-- What `fatune explore` sweeps (wg_explore.lua).
wg.explore = require("wg_explore")

return wg
