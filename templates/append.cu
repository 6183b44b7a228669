$ -- append.cu: new keys and values into a KV cache (see append.lua).
$ local D, DV, NT = args.D, args.DV, args.NT
/* ${args.entry}: new token fa_bid_x() of K/V head fa_bid_y() of sequence
** fa_bid_z() into the cache, ${D} + ${DV} elements by ${NT} threads. */
FA_KERNEL(${args.entry}, ${NT})
{
  typedef ${args.elem} elem_t;
  const int tid = fa_tid(), j = fa_bid_x(), h = fa_bid_y(), b = fa_bid_z();
  const int cap = p.table_stride * p.page_size, len = fa_ldg_i32(p.seqlens_k + b);
  const int first = j == 0 && h == 0 && tid == 0;   /* the sequence's one writer of flags */
  if (len < 0 || len > cap - p.seq_q) {   /* no room for the new tokens: nothing written */
    if (first) {
      fa_st_i32(p.error + 1, 1);
      fa_st_i32(p.seqlens_out + b, len < 0 ? 0 : len > cap ? cap : len);
    }
    return;
  }
  if (first) fa_st_i32(p.seqlens_out + b, len + p.seq_q);
  const int pos = len + j, pg = pos / p.page_size, tok = pos - pg * p.page_size;
  const int page = p.block_table ? fa_ldg_i32(p.block_table + (long long)b * p.table_stride + pg)
                   : p.cache_batch_idx ? fa_ldg_i32(p.cache_batch_idx + b) : b;
  if ((unsigned)page >= (unsigned)p.num_pages) {   /* never written */
    if (tid == 0) fa_st_i32(p.error, 1);
    return;
  }
  elem_t *const kd = (elem_t *)p.k + page * p.k_sb + tok * p.k_sn + h * p.k_sh;
  elem_t *const vd = (elem_t *)p.v + page * p.v_sb + tok * p.v_sn + h * p.v_sh;
  const elem_t *const ks = (const elem_t *)p.k_new + b * p.kn_sb + h * p.kn_sh + j * p.kn_sn;
  const elem_t *const vs = (const elem_t *)p.v_new + b * p.vn_sb + h * p.vn_sh + j * p.vn_sn;
  for (int d = tid; d < ${D}; d += ${NT}) ${args.copy("kd + d", "ks + d")};
  for (int d = tid; d < ${DV}; d += ${NT}) ${args.copy("vd + d", "vs + d")};
}
