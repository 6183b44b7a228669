$ -- tcdec.cu: split-KV decoding over a paged KV cache on tensor cores (see tcdec.lua).
$ local c, P = args.cfg, args.P
$ local causal = c.causal == 1
$ local D, DV, BN, W, NT, NW = P.D, P.DV, P.BN, P.W, P.NT, P.NW
$ local R, MT, WK = P.R, P.MT, P.WK
$ local QRS, KRS, VRS = P.QRS, P.KRS, P.VRS
$ local S = c.splits
$ local bf = c.dtype == "bf16"
$ local mma = bf and "fa_mma_m16n8k16_bf16" or "fa_mma_m16n8k16_f16"
$ local pack = bf and "fa_pack_bf16x2" or "fa_pack_f16x2"
$ local to16 = bf and "fa_f32_to_bf16" or "fa_f32_to_f16"
$ local KT, NT8, VT = D // 16, NW // 8, DV // 8
$ local each = require("decode").each
$ -- A score or mask modification (mod.lua): its functions precede the kernels.
$ local mod = c.mod
/* ${args.entry}: decoding on tensor cores, ${R} query rows of one K/V head's group per
** CTA (${MT} m16 tile(s) of ${WK} warp(s) each), ${BN} keys a block, ${NW} a warp, ${NT}
** threads, ${S} split(s) of each sequence's keys. */

$ -- The partials of query row (b, h, r): S rows of DV, then S logsumexps
$ -- in log2 units.
$ local function partial(b, h, r)
  float *const part = (float *)p.ws + (((long long)${b} * p.heads + ${h}) * p.seq_q + ${r}) * ${S * (DV + 1)};
$ end

$ if mod then
${require("mod").c_functions(mod, "float")}

$ end
/* The split's keys for its CTA's ${R} query rows: gathered page by page by
** cp.async, S = Q K^T and O += P V on tensor cores, each warp over its
** share of every block with a softmax of its own, merged at the end. */
FA_KERNEL(${args.entry}_split, ${NT})
{
  const int tid = fa_tid(), lane = tid & 31, warp = tid >> 5;
$ if MT > 1 then
  const int mt = warp / ${WK}, kwarp = warp - mt * ${WK};  /* the warp's m16 tile, its place there */
$ else
  const int mt = 0, kwarp = warp;
$ end
  const int group = p.kv_group > 1 ? p.kv_group : 1;
  /* CTA y: rows row0.. of K/V head hk's group, whose row gi is query row
  ** gi % seq_q of head hk * group + gi / seq_q. */
  const int grows = group * p.seq_q, per = (grows + ${R - 1}) / ${R};
  const int hk = fa_bid_y() / per, row0 = (fa_bid_y() - hk * per) * ${R};
  const int b = fa_bid_z(), split = fa_bid_x();
  (void)split;
  /* The sequence's keys, within the cache's capacity: a length outside it
  ** is cut to it and flagged, never followed out of the pool. */
  const int cap = p.table_stride * p.page_size, len_in = fa_ldg_i32(p.seqlens_k + b);
  const int len = len_in < 0 ? 0 : len_in > cap ? cap : len_in;
$ if mod and mod.mask then
  ${require("decode").mod_range({ BN = BN, NT = NT, R = R, m = mod })}
  /* The split's share of those keys [k_lo, k_hi): whole blocks but the last. */
  const int chunk = ((vis_hi - vis_lo + ${S - 1}) / ${S} + ${BN - 1}) / ${BN} * ${BN};
  const int k_lo = vis_lo + split * chunk, k_hi = vis_hi < k_lo + chunk ? vis_hi : k_lo + chunk;
$ else
  /* The split's keys [k_lo, k_hi): whole blocks but the last. */
  const int chunk = ((len + ${S - 1}) / ${S} + ${BN - 1}) / ${BN} * ${BN};
  const int k_lo = split * chunk, k_hi = len < k_lo + chunk ? len : k_lo + chunk;
$ end
  /* No block table: a contiguous cache, sequence b on page b, or on page
  ** cache_batch_idx[b] (flash_attn's cache_batch_idx). */
  const int *const table = p.block_table ? p.block_table + (long long)b * p.table_stride : 0;
  const int row_b = p.cache_batch_idx ? fa_ldg_i32(p.cache_batch_idx + b) : b;
  const float sl2 = p.scale_log2_f32;

  unsigned char *const raw = (unsigned char *)fa_smem_base();
  long long *const ofs = (long long *)raw;         /* per stage: keys' K rows, then V rows */
  int *const last_s = (int *)(raw + ${32 * BN});   /* each row's last visible key */
  const fa_saddr sbase = fa_saddr_of(raw);
  unsigned char *const stage0 = raw + ${P.off_stage};
  int bad = 0;  /* a block-table entry outside the pool */

  /* Q's ${R} rows as they are (zeros past the group), 16 bytes a copy. */
  ${each("e", "tid", R * (D // 8), NT)} {
    const int i = e / ${D // 8}, ch = e - i * ${D // 8}, gi = row0 + i;
    fa_u32x4 x = {0, 0, 0, 0};
    if (gi < grows) {
      const int h = hk * group + gi / p.seq_q, r = gi - gi / p.seq_q * p.seq_q;
      x = fa_ldg_u32x4((const fa_u32x4 *)((const unsigned short *)p.q + b * p.q_sb + h * p.q_sh +
                                          r * p.q_sn) + ch);
    }
    fa_sts_u32x4((fa_u32x4 *)(raw + ${P.off_q} + i * ${QRS}) + ch, x);
  }
  for (int i = tid; i < ${R}; i += ${NT}) {
    const int gi = row0 + i, r = gi - gi / p.seq_q * p.seq_q;
$ if causal then
    fa_sts_i32(last_s + i, gi < grows ? r + len - p.seq_q : -1);
$ else
    (void)r;
    fa_sts_i32(last_s + i, gi < grows ? len - 1 : -1);
$ end
  }
  fa_syncthreads();
  /* Q's A fragments, held through the split */
  unsigned qa[${KT}][4];
  FA_UNROLL
  for (int kk = 0; kk < ${KT}; kk++)
    fa_ldmatrix_x4(qa[kk], sbase + ${P.off_q} + (mt * 16 + (lane & 15)) * ${QRS} + (kk * 16 + 8 * (lane >> 4)) * 2);
  /* this thread's rows of its tile: lane / 4 and lane / 4 + 8 */
  const int ra = lane >> 2, rb = ra + 8;
  const int last_a = fa_lds_i32(last_s + mt * 16 + ra), last_b = fa_lds_i32(last_s + mt * 16 + rb);
$ if mod then
  /* the modification's view of the two rows: head, query index, what the
  ** row does not change */
  const int ga = row0 + mt * 16 + ra, gb = row0 + mt * 16 + rb;
  const int hm_a = hk * group + ga / p.seq_q, qm_a = ga - ga / p.seq_q * p.seq_q;
  const int hm_b = hk * group + gb / p.seq_q, qm_b = gb - gb / p.seq_q * p.seq_q;
  const fa_mod_u um_a = fa_mod_setup(b, hm_a, p.seq_q, len, p.heads);
  const fa_mod_u um_b = fa_mod_setup(b, hm_b, p.seq_q, len, p.heads);
  (void)um_a, (void)um_b;
$   if mod.score then
  const float to_nat = sl2 * 0.69314718055994531f;  /* S's units to natural ones */
$   end
$ end
  float o[${VT}][4];
  FA_UNROLL
  for (int n = 0; n < ${VT}; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
  float m_a = fa_neg_inf_f32(), m_b = fa_neg_inf_f32(), l_a = 0, l_b = 0;

$ -- copy: the pages of keys k0.. into stage st's offsets, and the stage's rows
$ -- by cp.async (decode.lua)
$ local dec, copy = require("decode"), { BN = BN, NT = NT, D = D, DV = DV, IB = 2, KRS = KRS, VRS = VRS, stage_bytes = P.stage_bytes }
$ local function offsets(k0, st)
${dec.offsets(copy, k0, st)}
$ end
$ local function issue(st)
${dec.issue(copy, st)}
$ end
  if (k_lo < k_hi) {
    $ offsets("k_lo", "0")
    fa_syncthreads();
    $ issue("0")
  }
  int st = 0;
  for (int k0 = k_lo; k0 < k_hi; k0 += ${BN}, st ^= 1) {
    /* copy: the next block's rows into the other stage, then wait for this one's */
    if (k0 + ${BN} < k_hi) {
      $ offsets("k0 + " .. BN, "(st ^ 1)")
      fa_syncthreads();
      $ issue("(st ^ 1)")
    } else {
      fa_cp_async_commit();  /* an empty group: one wait for every block */
    }
    fa_cp_async_wait(1);
    fa_syncthreads();
    const long long *const kofs = ofs + st * ${2 * BN};
    const fa_saddr kst = sbase + ${P.off_stage} + st * ${P.stage_bytes}, vst = kst + ${BN * KRS};
    const int kw = kwarp * ${NW};   /* this warp's keys of the block */
    /* gemm: S = Q K^T over the warp's keys */
    float s[${NT8}][4];
    FA_UNROLL
    for (int j = 0; j < ${NT8}; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
    FA_UNROLL
    for (int kk = 0; kk < ${KT}; kk++)
      FA_UNROLL
      for (int j = 0; j < ${NT8}; j++) {
        unsigned kb[2];
        fa_ldmatrix_x2(kb, kst + (kw + 8 * j + (lane & 7)) * ${KRS} + (kk * 16 + 8 * ((lane >> 3) & 1)) * 2);
        ${mma}(s[j], qa[kk], kb, s[j]);
      }
$ if mod then
    /* mask: scaled into log2 units${mod.score and " through the modification's score" or ""}; -inf past a row's last key, for a key not
    ** read${mod.mask and " or one the modification's mask hides" or ""} */
$ else
    /* mask: scaled into log2 units; -inf past a row's last key or for a key not read */
$ end
    float mx_a = fa_neg_inf_f32(), mx_b = fa_neg_inf_f32();
    FA_UNROLL
    for (int j = 0; j < ${NT8}; j++)
      FA_UNROLL
      for (int e = 0; e < 2; e++) {
        const int cc = kw + 8 * j + 2 * (lane & 3) + e, key = k0 + cc;
        const int read = fa_lds_i64(kofs + cc) >= 0;
$ if mod then
$   for _, x in ipairs({ { "s[j][e]", "a" }, { "s[j][2 + e]", "b" } }) do
$     local v, ab = x[1], x[2]
$     local at = "b, hm_" .. ab .. ", qm_" .. ab .. ", key, p.seq_q, len, p.heads"
$     local keep = "read && key <= last_" .. ab .. (mod.mask and " && fa_mod_mask(um_" .. ab .. ", " .. at .. ")" or "")
$     local val = mod.score and "fa_mod_score(um_" .. ab .. ", " .. v .. " * to_nat, " .. at .. ") * 1.4426950408889634f" or v .. " * sl2"
        ${v} = ${keep} ? ${val} : fa_neg_inf_f32();
$   end
$ else
        s[j][e] = read && key <= last_a ? s[j][e] * sl2 : fa_neg_inf_f32();
        s[j][2 + e] = read && key <= last_b ? s[j][2 + e] * sl2 : fa_neg_inf_f32();
$ end
        mx_a = s[j][e] > mx_a ? s[j][e] : mx_a;
        mx_b = s[j][2 + e] > mx_b ? s[j][2 + e] : mx_b;
      }
    /* softmax-rescale: each row's maximum over its quad, P, l (this thread's part) */
    FA_UNROLL
    for (int m = 1; m <= 2; m <<= 1) {
      const float ya = fa_shfl_xor_f32(mx_a, m), yb = fa_shfl_xor_f32(mx_b, m);
      mx_a = ya > mx_a ? ya : mx_a;
      mx_b = yb > mx_b ? yb : mx_b;
    }
    const float mn_a = m_a > mx_a ? m_a : mx_a, mn_b = m_b > mx_b ? m_b : mx_b;
    /* a row that has seen no key yet keeps -inf: exponents from 0 */
    const float base_a = mn_a == fa_neg_inf_f32() ? 0.f : mn_a;
    const float base_b = mn_b == fa_neg_inf_f32() ? 0.f : mn_b;
    const float al_a = fa_exp2_f32(m_a - base_a), al_b = fa_exp2_f32(m_b - base_b);
    m_a = mn_a, m_b = mn_b;
    l_a *= al_a, l_b *= al_b;
    FA_UNROLL
    for (int j = 0; j < ${NT8}; j++) {
      s[j][0] = fa_exp2_f32(s[j][0] - base_a), s[j][1] = fa_exp2_f32(s[j][1] - base_a);
      s[j][2] = fa_exp2_f32(s[j][2] - base_b), s[j][3] = fa_exp2_f32(s[j][3] - base_b);
      l_a += s[j][0] + s[j][1], l_b += s[j][2] + s[j][3];
    }
    FA_UNROLL
    for (int n = 0; n < ${VT}; n++) o[n][0] *= al_a, o[n][1] *= al_a, o[n][2] *= al_b, o[n][3] *= al_b;
    /* gemm: O += P V, P's A fragments from S's accumulators */
    FA_UNROLL
    for (int t = 0; t < ${NW // 16}; t++) {
      const unsigned pa[4] = {${pack}(s[2 * t][0], s[2 * t][1]), ${pack}(s[2 * t][2], s[2 * t][3]),
                              ${pack}(s[2 * t + 1][0], s[2 * t + 1][1]),
                              ${pack}(s[2 * t + 1][2], s[2 * t + 1][3])};
      FA_UNROLL
      for (int n = 0; n < ${VT}; n++) {
        unsigned vb[2];
        fa_ldmatrix_x2_trans(vb, vst + (kw + 16 * t + (lane & 15)) * ${VRS} + n * 16);
        ${mma}(o[n], pa, vb, o[n]);
      }
    }
    fa_syncthreads();
  }
  fa_cp_async_wait(0);
  if (bad) fa_st_i32(p.error, 1);
  if (len != len_in && tid == 0) fa_st_i32(p.error + 1, 1);
  FA_UNROLL
  for (int m = 1; m <= 2; m <<= 1) l_a += fa_shfl_xor_f32(l_a, m), l_b += fa_shfl_xor_f32(l_b, m);

  /* merge: each warp's m, l and O through shared memory (the stages' bytes) */
  float *const mw = (float *)stage0;               /* [W][16] */
  float *const lw = mw + ${16 * W};                /* [W][16] */
  float *const ow = lw + ${16 * W};                /* [W][16][DV] */
  if ((lane & 3) == 0) {
    fa_sts_f32(mw + warp * 16 + ra, m_a), fa_sts_f32(mw + warp * 16 + rb, m_b);
    fa_sts_f32(lw + warp * 16 + ra, l_a), fa_sts_f32(lw + warp * 16 + rb, l_b);
  }
  FA_UNROLL
  for (int n = 0; n < ${VT}; n++)
    FA_UNROLL
    for (int e = 0; e < 4; e++)
      fa_sts_f32(ow + (warp * 16 + (e < 2 ? ra : rb)) * ${DV} + 8 * n + 2 * (lane & 3) + (e & 1), o[n][e]);
  fa_syncthreads();
  /* epilogue: ${S == 1 and "O normalized and the logsumexp" or "the split's partial O and logsumexp (log2 units)"} */
  ${each("e", "tid", R * DV, NT)} {
    const int i = e / ${DV}, d = e - i * ${DV}, gi = row0 + i;
    if (gi >= grows) continue;
    /* the row's tile's warps, w0..: their row li */
    const int w0 = i / 16 * ${WK}, li = i % 16;
    float mx = fa_neg_inf_f32();
    FA_UNROLL
    for (int w = w0; w < w0 + ${WK}; w++) {
      const float x = fa_lds_f32(mw + w * 16 + li);
      mx = x > mx || x != x ? x : mx;
    }
    float l = 0, acc = 0;
    FA_UNROLL
    for (int w = w0; w < w0 + ${WK}; w++) {
      const float x = fa_lds_f32(mw + w * 16 + li);
      const float f = x == fa_neg_inf_f32() ? 0.f : fa_exp2_f32(x - mx);
      l += f * fa_lds_f32(lw + w * 16 + li);
      acc += f * fa_lds_f32(ow + (w * 16 + li) * ${DV} + d);
    }
    /* l == 0: the row saw no key (zeros, -inf); NaN stays NaN */
    const float lse2 = l != 0 ? mx + fa_log2_f32(l) : fa_neg_inf_f32();
    const int h = hk * group + gi / p.seq_q, r = gi - gi / p.seq_q * p.seq_q;
$ if S == 1 then
    unsigned short *const og = (unsigned short *)p.o + b * p.o_sb + h * p.o_sh + r * p.o_sn;
    fa_st_u16(og + d, ${to16}(l != 0 ? acc / l : 0.f));
    if (d == 0)
      fa_st_f32((float *)p.lse + ((long long)b * p.heads + h) * p.seq_q + r,
                lse2 * 0.69314718055994530942f);
$ else
    $ partial("b", "h", "r")
    fa_st_f32(part + split * ${DV} + d, l != 0 ? acc / l : 0.f);
    if (d == 0) fa_st_f32(part + ${S * DV} + split, lse2);
$ end
  }
}
$ if S > 1 then

/* Query row (fa_bid_z(), fa_bid_y(), fa_bid_x()): O and the logsumexp from
** the splits' partials, each weighted by 2^(its lse - the largest); a NaN
** partial makes the row NaN, as the float64 reference's is. */
FA_KERNEL(${args.entry}_combine, ${NT})
{
  const int tid = fa_tid();
  const int r = fa_bid_x(), h = fa_bid_y(), b = fa_bid_z();
  $ partial("b", "h", "r")
  float mx = fa_neg_inf_f32();
  for (int s = 0; s < ${S}; s++) {
    const float x = fa_ld_f32(part + ${S * DV} + s);
    mx = x > mx || x != x ? x : mx;
  }
  float wsum = 0;
  for (int s = 0; s < ${S}; s++)
    wsum += mx == fa_neg_inf_f32() ? 0.f : fa_exp2_f32(fa_ld_f32(part + ${S * DV} + s) - mx);
  unsigned short *const og = (unsigned short *)p.o + b * p.o_sb + h * p.o_sh + r * p.o_sn;
  for (int d = tid; d < ${DV}; d += ${NT}) {
    float acc = 0;
    for (int s = 0; s < ${S}; s++) {
      const float x = fa_ld_f32(part + ${S * DV} + s);
      if (x != fa_neg_inf_f32()) acc += fa_exp2_f32(x - mx) * fa_ld_f32(part + s * ${DV} + d);
    }
    fa_st_u16(og + d, ${to16}(wsum != 0 ? acc / wsum : 0.f));
  }
  if (tid == 0)
    fa_st_f32((float *)p.lse + ((long long)b * p.heads + h) * p.seq_q + r,
              wsum != 0 ? (mx + fa_log2_f32(wsum)) * 0.69314718055994530942f : fa_neg_inf_f32());
}
$ end
