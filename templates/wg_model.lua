-- wg_model.lua
-- The analytic cost model of the wg family (Hopper, sm_90a): for a config
-- and a problem, the counts the CPU emulator measures that follow from the
-- algorithm itself, whatever the kernel's order of instructions: the TMA
-- traffic, the wgmma instructions and their FLOPs, and the global bytes the
-- TMA moves. Counts that depend on how wg.cu writes its softmax and its
-- pipeline (exponentials, mbarrier and named-barrier waits) are left out:
-- explore shows them measured, with no model beside them.
--
-- The kernel's work, as the family defines it: a CTA per block_m query rows
-- of a (batch, head); Q loaded once by TMA, K and V by TMA for each K/V
-- block the CTA needs (with a causal mask, bottom-right, the blocks past
-- its last row's diagonal are skipped; a CTA with none loads nothing);
-- O stored by TMA, 64 rows per consumer that has a row inside seq_q, and
-- the logsumexp, a float per row. Each box is
-- swizzle / 2 elements of head dim wide, so the box bytes count the head
-- dim padded to a whole box (the padding loads as zeros); the global
-- bytes count only what lies inside the tensors. Each consumer warpgroup
-- owns block_m / consumers rows, in m64 slabs; per slab and K/V block it
-- issues padded dim / 16 wgmma of S = Q K^T (n = block_n) and block_n / 16
-- of O += P V (n = the padded dim).
--
-- Units are the emulator's: TMA bytes per operation (one thread issues
-- it), wgmma per warpgroup, global bytes per access.

local model = {}

local function cdiv(a, b) return (a + b - 1) // b end
local function clamp(x, lo, hi) return x < lo and lo or (x > hi and hi or x) end

local esize = { fp16 = 2, bf16 = 2 }

-- The K/V blocks the CTA at q0 runs: all of them, or with the causal mask
-- those up to its last row's diagonal (row r sees keys c <= r + sk - sq).
local function kv_blocks(c, q0, sq, sk)
  local last = sk
  if c.causal == 1 then last = clamp(math.min(q0 + c.block_m, sq) + sk - sq, 0, sk) end
  return cdiv(last, c.block_n)
end

local function per_head(c, sq, sk)
  local es, dim, bm, bn = esize[c.dtype], c.dim, c.block_m, c.block_n
  local col = tonumber(c.swizzle) // 2
  local box_dim = cdiv(dim, col) * col
  local slabs = bm // (64 * c.consumers)
  local n = { tma_bytes = 0, gmem_read = 0, gmem_written = 0, wgmma = 0, wgmma_flops = 0 }
  for q0 = 0, sq - 1, bm do
    local rows = clamp(sq - q0, 0, bm)
    local blocks = kv_blocks(c, q0, sq, sk)
    if blocks > 0 then                                          -- Q
      n.tma_bytes = n.tma_bytes + bm * box_dim * es
      n.gmem_read = n.gmem_read + rows * dim * es
    end
    n.tma_bytes = n.tma_bytes + cdiv(rows, 64) * 64 * box_dim * es   -- O
    n.gmem_written = n.gmem_written + rows * (dim * es + 4)    -- O, and the lse as float
    for j = 0, blocks - 1 do
      local keys = clamp(sk - j * bn, 0, bn)
      n.tma_bytes = n.tma_bytes + 2 * bn * box_dim * es          -- K and V
      n.gmem_read = n.gmem_read + 2 * keys * dim * es
    end
    local per_block = c.consumers * slabs * (box_dim // 16 + cdiv(box_dim, 256) * (bn // 16))
    n.wgmma = n.wgmma + blocks * per_block
    n.wgmma_flops = n.wgmma_flops + blocks * c.consumers * slabs * 4 * 64 * bn * box_dim
  end
  return n
end

-- The counters for `problem` (seq_q, seq_k, batch, heads), by the names
-- the host gives the emulator's counters.
function model.predict(c, problem)
  local h = per_head(c, problem.seq_q, problem.seq_k)
  local bh = problem.batch * problem.heads
  local out = {}
  for _, k in ipairs({ "gmem_read", "gmem_written", "tma_bytes", "wgmma", "wgmma_flops" }) do
    out[#out + 1] = { k, h[k] * bh }
  end
  return out
end

return model
