-- paged.lua
-- The forward pass over a KV cache (tc): flash_attn_with_kvcache's
-- prefill, many new queries per sequence against K and V where the cache
-- keeps them (fa_params.h: block_table, cache_batch_idx, seqlens_k,
-- page_size, table_stride, num_pages). Q, O and the logsumexp are dense
-- (batch, heads, seq_q); sequence b's keys are its first seqlens_k[b]
-- cache positions, position c on page block_table[b * table_stride +
-- c / page_size] at row c % page_size (no table: page cache_batch_idx[b],
-- or b). Every key row's page is looked up on its own, so any page size
-- from 1 up works. Only what differs is emitted here; a config
-- without paged renders as before.

local paged = {}

-- What the paged form does not combine with.
function paged.fits(c)
  if c.varlen == 1 then return false, "a KV cache (paged) and a variable-length batch (varlen)" end
  if c.kv_addr == "carry" then
    return false, "K/V in a KV cache are addressed a row at a time: kv_addr=rebuild"
  end
  return true
end

-- The kernel's head for config c: macro (FA_TC_KERNEL) naming entry with
-- nt threads, p the argument block with seq_k the sequence's own length.
-- A length outside 0 and the capacity is cut to it and error[1] set, as
-- the decoding kernels do, so that no position past the table is looked up.
function paged.kernel(c, macro, entry, nt)
  if c.paged ~= 1 then return nil end
  return string.format([[
%s_OF(%s, %d, pv)
{
  /* K/V from a KV cache: sequence fa_bid_z()'s keys are its first
  ** seqlens_k cache positions, within the capacity. */
  fa_params p = pv;
  {
    const int len = fa_ldg_i32(pv.seqlens_k + fa_bid_z()), cap = pv.table_stride * pv.page_size;
    p.seq_k = len < 0 ? 0 : len > cap ? cap : len;
    if (p.seq_k != len && fa_tid() == 0) fa_st_i32(pv.error + 1, 1);
  }]], macro, entry, nt)
end

-- Declares pkey, cache position key (a C expression), in_seq, the C
-- condition in_seq (whether the position is read: within the tile and the
-- sequence's length), and pg and tok: the position's entry in the
-- sequence's row of the block table and its row on that page.
function paged.locate(key, in_seq)
  return string.format([[
const int pkey = %s, in_seq = %s;
const int pg = FA_PAGE_OF(p, pkey), tok = pkey - pg * p.page_size;]],
                       key, in_seq)
end

-- The page of locate's position (a C expression), -1 where it is not
-- read: the block table's entry, cache_batch_idx's, or the batch's own.
function paged.lookup()
  return [[!in_seq ? -1
    : p.block_table ? fa_ldg_i32(p.block_table + (long long)fa_bid_z() * p.table_stride + pg)
    : p.cache_batch_idx ? fa_ldg_i32(p.cache_batch_idx + fa_bid_z()) : fa_bid_z()]]
end

-- Declares ko and vo, where locate's position lies on page (a C
-- expression: lookup's, or one looked up earlier) in K and V, for K/V
-- head hk (an expression), es bytes an element: in 16-byte units from
-- the tensor's base (rows are 16-byte aligned; 32 bits cover 64 GiB, the
-- library's limit on a cache). Where it is not read (not in_seq, or on a
-- page outside the pool: error[0] set), ko is 0xffffffff, the mark the
-- copies test for both (one test, not two), and vo 0.
function paged.offsets(page, hk, es)
  local function off(t)
    return string.format("(unsigned)((((long long)(unsigned)page * p.%s_sb + (long long)(unsigned)tok * p.%s_sn + "
                         .. "(long long)%s * p.%s_sh) * %d) >> 4)", t, t, hk, t, es)
  end
  return string.format([[
const int page = %s, ok = (unsigned)page < (unsigned)p.num_pages;
if (in_seq && !ok) fa_st_i32(p.error, 1); /* a page outside the pool: its keys are not read */
const unsigned ko = ok ? %s : 0xffffffffu;
const unsigned vo = ok ? %s : 0u;]], page, off("k"), off("v"))
end

return paged
