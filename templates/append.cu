$ -- append.cu: new keys and values into a KV cache (see append.lua).
$ local D, DV, NT = args.D, args.DV, args.NT
$ local acc = args.acc
/* The rotary tables' row of a position (fa_params.h): cos and sin, each
** half = rotary_dim / 2 wide; inter, rotary_interleaved. */
typedef struct fa_rotary {
  const ${args.elem} *cos, *sin;
  int half, inter;
} fa_rotary;

/* Element d of the row at src rotated by table row t: its pair's two
** values, in ${acc}. */
FA_INLINE ${acc} fa_rotated(fa_rotary t, const ${args.elem} *src, int d) {
  int i, mate, lead;   /* the pair's index in the tables, d's partner, whether d leads */
  if (t.inter) i = d / 2, mate = d ^ 1, lead = !(d & 1);
  else i = d < t.half ? d : d - t.half, mate = d < t.half ? d + t.half : d - t.half, lead = d < t.half;
  const ${acc} x = ${args.get("src + d")}, y = ${args.get("src + mate")};
  const ${acc} c = ${args.get("t.cos + i")}, s = ${args.get("t.sin + i")};
  return lead ? x * c - y * s : y * s + x * c;
}

/* Row src (${D} elements) into dst, its first 2 t.half rotated by table
** row t when rot (the tables hold the position), else copied. */
FA_INLINE void fa_rotate_row(fa_rotary t, int rot, ${args.elem} *dst, const ${args.elem} *src,
                             int tid) {
  for (int d = tid; d < ${D}; d += ${NT}) {
    if (rot && d < 2 * t.half) ${args.put("dst + d", "fa_rotated(t, src, d)")};
    else ${args.copy("dst + d", "src + d")};
  }
}

/* The rotary tables' row of position pos, when rot. */
FA_INLINE fa_rotary fa_rotary_at(const void *cos_t, const void *sin_t, int dim, int inter,
                                 int pos, int rot) {
  fa_rotary t;
  const long long at = rot ? (long long)pos * (dim / 2) : 0;
  t.cos = (const ${args.elem} *)cos_t + at, t.sin = (const ${args.elem} *)sin_t + at;
  t.half = dim / 2, t.inter = inter;
  return t;
}

/* ${args.entry}: new token fa_bid_x() of K/V head fa_bid_y() of sequence
** fa_bid_z() into the cache, ${D} + ${DV} elements by ${NT} threads; with
** rotary tables, the key rotated and the group's query rows j into q_rot. */
FA_KERNEL(${args.entry}, ${NT})
{
  typedef ${args.elem} elem_t;
  const int tid = fa_tid(), j = fa_bid_x(), h = fa_bid_y(), b = fa_bid_z();
  const int cap = p.table_stride * p.page_size, len = fa_ldg_i32(p.seqlens_k + b);
  const int first = j == 0 && h == 0 && tid == 0;   /* the sequence's one writer of flags */
  if (p.rotary_cos) {   /* the group's queries, whatever room the cache has */
    const int group = p.kv_group > 1 ? p.kv_group : 1, qpos = len + p.rotary_q_step * j;
    const int rot = qpos >= 0 && qpos < p.rotary_len;
    if (!rot && tid == 0) fa_st_i32(p.error + 1, 2);
    const fa_rotary t = fa_rotary_at(p.rotary_cos, p.rotary_sin, p.rotary_dim, p.rotary_interleaved,
                                     qpos, rot);
    for (int hq = h * group; hq < (h + 1) * group; ++hq)
      fa_rotate_row(t, rot, (elem_t *)p.q_rot + (((long long)b * p.heads + hq) * p.seq_q + j) * ${D},
                    (const elem_t *)p.q + b * p.q_sb + hq * p.q_sh + j * p.q_sn, tid);
  }
  if (len < 0 || len > cap - p.seq_q) {   /* no room for the new tokens: nothing written */
    if (first) {
      fa_st_i32(p.error + 1, 1);
      fa_st_i32(p.seqlens_out + b, len < 0 ? 0 : len > cap ? cap : len);
    }
    return;
  }
  if (first) fa_st_i32(p.seqlens_out + b, len + p.seq_q);
  const int pos = len + j, pg = FA_PAGE_OF(p, pos), tok = pos - pg * p.page_size;
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
  if (p.rotary_cos) {
    const int rot = pos < p.rotary_len;
    if (!rot && tid == 0) fa_st_i32(p.error + 1, 2);
    fa_rotate_row(fa_rotary_at(p.rotary_cos, p.rotary_sin, p.rotary_dim, p.rotary_interleaved, pos, rot),
                  rot, kd, ks, tid);
  } else {
    for (int d = tid; d < ${D}; d += ${NT}) ${args.copy("kd + d", "ks + d")};
  }
  for (int d = tid; d < ${DV}; d += ${NT}) ${args.copy("vd + d", "vs + d")};
}
