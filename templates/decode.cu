$ -- decode.cu: the parts decode.lua emits, args.part naming which.
$ local A = args
$ local each = require("decode").each
$ local BN, NT, st = A.BN, A.NT, A.st
$ if A.part == "offsets" then
    FA_UNROLL
    ${each("cc", "tid", BN, NT)} {
      const int key = ${A.k0} + cc;
      long long ko = -1, vo = -1;
      if (key < k_hi) {
        const int pg = FA_PAGE_OF(p, key), tok = key - pg * p.page_size;
        const int page = table ? fa_ldg_i32(table + pg) : row_b;
        if ((unsigned)page < (unsigned)p.num_pages) {
          ko = page * p.k_sb + tok * p.k_sn + hk * p.k_sh;
          vo = page * p.v_sb + tok * p.v_sn + hk * p.v_sh;
        } else {
          bad = 1;
        }
      }
      fa_sts_i64(ofs + ${st} * ${2 * BN} + cc, ko);
      fa_sts_i64(ofs + ${st} * ${2 * BN} + ${BN} + cc, vo);
    }
$ elseif A.part == "issue" then
$   local D, DV, IB, KRS, VRS = A.D, A.DV, A.IB, A.KRS, A.VRS
    {
      unsigned char *const kst = stage0 + ${st} * ${A.stage_bytes}, *const vst = kst + ${BN * KRS};
      FA_UNROLL
      ${each("e", "tid", BN * (D * IB // 16), NT)} {
        const int cc = e / ${D * IB // 16}, ch = e - cc * ${D * IB // 16};
        const long long ko = fa_lds_i64(ofs + ${st} * ${2 * BN} + cc);
        const unsigned char *const src = (const unsigned char *)p.k + (ko >= 0 ? ko * ${IB} + ch * 16 : 0);
        fa_cp_async_16(fa_saddr_of(kst + cc * ${KRS} + ch * 16), src, ko >= 0 ? 16 : 0);
      }
      FA_UNROLL
      ${each("e", "tid", BN * (DV * IB // 16), NT)} {
        const int cc = e / ${DV * IB // 16}, ch = e - cc * ${DV * IB // 16};
        const long long vo = fa_lds_i64(ofs + ${st} * ${2 * BN} + ${BN} + cc);
        const unsigned char *const src = (const unsigned char *)p.v + (vo >= 0 ? vo * ${IB} + ch * 16 : 0);
        fa_cp_async_16(fa_saddr_of(vst + cc * ${VRS} + ch * 16), src, vo >= 0 ? 16 : 0);
      }
      fa_cp_async_commit();
    }
$ elseif A.part == "mod_range" then
$   local R, W = A.R, A.W
  /* The keys the modification's mask leaves the CTA's rows: whole blocks,
  ** from the first to the last that fa_mod_block does not prove empty for
  ** them, [vis_lo, vis_hi); the threads take the blocks in turn. */
  int vis_lo = 0, vis_hi = 0;
  {
    const int g_hi = (row0 + ${R} < grows ? row0 + ${R} : grows) - 1;  /* the CTA's last row */
$   if not A.per_head then
    /* the rows' query indices, all of them where the rows span two heads */
    const int one = row0 / p.seq_q == g_hi / p.seq_q;
    const int q_a = one ? row0 - row0 / p.seq_q * p.seq_q : 0;
    const int q_b = one ? g_hi - g_hi / p.seq_q * p.seq_q : p.seq_q - 1;
$   end
    int first = 0x7fffffff, last = -1;
    for (int blk = tid; blk < (len + ${BN - 1}) / ${BN}; blk += ${NT}) {
      const int ka = blk * ${BN}, kb = (ka + ${BN} < len ? ka + ${BN} : len) - 1;
$   if A.per_head then
      /* the mask reads the head: the rows of each head apart */
      int seen = 0;
      for (int gi = row0; gi <= g_hi && !seen;) {
        const int hh = gi / p.seq_q, ge = (hh + 1) * p.seq_q - 1 < g_hi ? (hh + 1) * p.seq_q - 1 : g_hi;
        seen = fa_mod_block(b, hk * group + hh, gi - hh * p.seq_q, ge - hh * p.seq_q, ka, kb,
                            p.seq_q, len, p.heads) != 0;
        gi = ge + 1;
      }
$   else
      const int seen = fa_mod_block(b, hk * group + row0 / p.seq_q, q_a, q_b, ka, kb, p.seq_q, len,
                                    p.heads) != 0;
$   end
      if (seen) first = first < blk ? first : blk, last = blk;
    }
    FA_UNROLL
    for (int m = 16; m >= 1; m >>= 1) {
      const int f = fa_shfl_xor_i32(first, m), l = fa_shfl_xor_i32(last, m);
      first = f < first ? f : first, last = l > last ? l : last;
    }
$   if W > 1 then
    /* the warps' through shared memory, whose bytes the copies' offsets
    ** take over after the barrier that follows Q's load */
    int *const red = (int *)fa_smem_base();
    if ((tid & 31) == 0) fa_sts_i32(red + (tid >> 5), first), fa_sts_i32(red + ${W} + (tid >> 5), last);
    fa_syncthreads();
    FA_UNROLL
    for (int w = 0; w < ${W}; w++) {
      const int f = fa_lds_i32(red + w), l = fa_lds_i32(red + ${W} + w);
      first = f < first ? f : first, last = l > last ? l : last;
    }
$   end
    if (last >= 0) vis_lo = first * ${BN}, vis_hi = (last + 1) * ${BN} < len ? (last + 1) * ${BN} : len;
  }
$ end
