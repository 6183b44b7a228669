$ -- simtdec.cu: split-KV decoding over a paged KV cache on CUDA cores (see simtdec.lua).
$ local c, P, T, io = args.cfg, args.P, args.T, args.io
$ local function ldg(a) return string.format(io.ldg, a) end
$ local function sto(a, v) return string.format(io.st, a, v) end
$ local causal = c.causal == 1
$ local D, DV, R, BN, NT, NS = P.D, P.DV, P.R, P.BN, P.NT, P.NS
$ local DP, KS, VW, vec = P.DP, P.KS, P.VW, P.vec
$ local RG, RR, NTC, CG, DC, RC = P.RG, P.RR, P.NTC, P.CG, P.DC, P.RC
$ local S, W = c.splits, NT // 32
$ local lanes = VW == 4 and { "x", "y", "z", "w" } or { "x", "y" }
$ local async, KVW, KRS, VRS, IB = P.async, P.KVW, P.KRS, P.VRS, P.IB
$ local each = require("decode").each
$ -- A score or mask modification (mod.lua): its functions precede the kernels.
$ local mod = c.mod
$ local half = async and IB == 2   -- K and V in shared memory as 16-bit values
$ -- A 16-bit value of shared memory's K or V as the accumulator's type.
$ local function cvt(x)
$   return (c.dtype == "bf16" and "fa_bf16_to_f32" or "fa_f16_to_f32") .. "((unsigned short)(" .. x .. "))"
$ end
/* ${args.entry}: decoding, ${R} query row(s) of one K/V head's group per CTA,
** ${BN} keys an iteration, ${NT} threads, ${S} split(s) of each sequence's keys.
** S: a key and ${RR} row(s) a thread; P V: ${DC} column(s) of V and ${RC} row(s) a
** thread; ${VW}-element loads of shared memory, each reused over the thread's others. */

$ -- What both kernels take from the argument block.
$ local function setup()
  typedef ${args.acc} acc_t;
  const int tid = fa_tid();
  const int group = p.kv_group > 1 ? p.kv_group : 1;
  (void)group;
$ end

$ -- The partials of query row (b, h, r): S rows of DV, then S logsumexps
$ -- in log2 units.
$ local function partial(b, h, r)
  acc_t *const part = (acc_t *)p.ws + (((long long)${b} * p.heads + ${h}) * p.seq_q + ${r}) * ${S * (DV + 1)};
$ end

$ if mod then
${require("mod").c_functions(mod, args.acc)}

$ end
/* The split's keys for its CTA's query rows: gathered page by page into
** shared memory, S = Q K^T, the online softmax, O += P V. */
FA_KERNEL(${args.entry}_split, ${NT})
{
  $ setup()
  const int lane = tid & 31, warp = tid >> 5;
  (void)lane; (void)warp;
  /* CTA y: rows row0.. of K/V head hk's group, whose row gi is query
  ** row gi % seq_q of head hk * group + gi / seq_q. */
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

  unsigned char *const raw = (unsigned char *)fa_smem_base();
  /* per stage: each key's K row (-1: none), then its V row, in elements */
  long long *const ofs = (long long *)raw;
  int *const last_s = (int *)(ofs + ${2 * BN * P.stages});  /* each row's last visible key */
  acc_t *const sm = (acc_t *)(raw + ${P.raw_bytes});
  acc_t *const Qs = sm + ${P.off_q};
$ if async then
  /* K's and V's rows of stage st: raw + ${P.head_bytes} + st * ${P.stage_bytes}, V's ${BN * KRS} after */
  unsigned char *const stage0 = raw + ${P.head_bytes};
$ else
  acc_t *const Ks = sm + ${P.off_k};
  acc_t *const Vs = sm + ${P.off_v};
$ end
  acc_t *const Ss = sm + ${P.off_s};
  acc_t *const m_s = sm + ${P.off_m};
  acc_t *const l_s = sm + ${P.off_l};
  acc_t *const a_s = sm + ${P.off_a};

  /* Q's rows, scaled into log2 units; rows past the group are zeros and
  ** see no key. */
  const acc_t sl2 = (acc_t)p.scale_log2;
  for (int e = tid; e < ${R * DP}; e += ${NT}) {
    const int i = e / ${DP}, d = e - i * ${DP}, gi = row0 + i;
    acc_t x = 0;
    if (gi < grows && d < ${D}) {
      const int h = hk * group + gi / p.seq_q, r = gi - gi / p.seq_q * p.seq_q;
      const ${io.elem} *const qg = (const ${io.elem} *)p.q + b * p.q_sb + h * p.q_sh + r * p.q_sn;
      x = ${ldg("qg + d")} * sl2;
    }
    fa_sts_${T}(Qs + i * ${DP} + d, x);
  }
  for (int i = tid; i < ${R}; i += ${NT}) {
    const int gi = row0 + i, r = gi - gi / p.seq_q * p.seq_q;
$ if causal then
    /* the new tokens' mask: row r sees the keys up to r + len - seq_q */
    fa_sts_i32(last_s + i, gi < grows ? r + len - p.seq_q : -1);
$ else
    (void)r;
    fa_sts_i32(last_s + i, gi < grows ? len - 1 : -1);
$ end
    fa_sts_${T}(m_s + i, fa_neg_inf_${T}());
    fa_sts_${T}(l_s + i, (acc_t)0);
  }
  /* this thread's columns of O (d0 + ${NTC} dc) and rows (g0 + ${CG} rc) */
  const int d0 = tid % ${NTC}, g0 = tid / ${NTC};
  acc_t o[${DC}][${RC}];
  FA_UNROLL
  for (int dc = 0; dc < ${DC}; dc++)
    FA_UNROLL
    for (int rc = 0; rc < ${RC}; rc++) o[dc][rc] = 0;
  int bad = 0;  /* a block-table entry outside the pool */
$ if mod then
  /* The modification's view of the rows this thread scores, g + ${RG} rr with
  ** g the same every block: head, query index, what the row does not change. */
$   assert(BN * RG <= NT or RG == 1, "simtdec: a thread's score rows change between blocks")
  const int gm = ${BN * RG <= NT and "tid / " .. BN or "0"};
  int hm[${RR}], qm[${RR}];
  fa_mod_u um[${RR}];
  FA_UNROLL
  for (int rr = 0; rr < ${RR}; rr++) {
    const int gi = row0 + gm + rr * ${RG};
    hm[rr] = hk * group + gi / p.seq_q, qm[rr] = gi - gi / p.seq_q * p.seq_q;
    um[rr] = fa_mod_setup(b, hm[rr], p.seq_q, len, p.heads);
  }
$ end
  fa_syncthreads();  /* Q, m, l and the rows' last keys, for every thread: a split
                     ** without keys goes straight to the epilogue */

$ -- copy: the pages of keys k0.. into stage st's offsets, and the stage's rows
$ -- by cp.async (decode.lua)
$ local dec, copy = require("decode"), { BN = BN, NT = NT, D = D, DV = DV, IB = IB, KRS = KRS, VRS = VRS, stage_bytes = P.stage_bytes }
$ local function offsets(k0, st)
${dec.offsets(copy, k0, st)}
$ end
$ local function issue(st)
${dec.issue(copy, st)}
$ end
$ if async then
  /* the first block's rows on their way */
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
    const unsigned char *const Kst = stage0 + st * ${P.stage_bytes}, *const Vst = Kst + ${BN * KRS};
$ else
  for (int k0 = k_lo; k0 < k_hi; k0 += ${BN}) {
    /* copy: each key's page from the block table, then its K and V rows */
    $ offsets("k0", "0")
    const long long *const kofs = ofs, *const vofs = ofs + ${BN};
    fa_syncthreads();
    FA_UNROLL
    ${each("e", "tid", BN * DP, NT)} {
      const int cc = e / ${DP}, d = e - cc * ${DP};
      const long long ko = fa_lds_i64(kofs + cc);
      fa_sts_${T}(Ks + cc * ${KS} + d,
                  ko >= 0 && d < ${D} ? ${ldg("(const " .. io.elem .. " *)p.k + ko + d")} : (acc_t)0);
    }
    FA_UNROLL
    ${each("e", "tid", BN * DV, NT)} {
      const int cc = e / ${DV}, d = e - cc * ${DV};
      const long long vo = fa_lds_i64(vofs + cc);
      fa_sts_${T}(Vs + cc * ${DV} + d, vo >= 0 ? ${ldg("(const " .. io.elem .. " *)p.v + vo + d")} : (acc_t)0);
    }
    fa_syncthreads();
$ end
    /* gemm: S = Q K^T, -inf where a key is past the row's last or unread;
    ** a thread's key read once for its ${RR} row(s) */
    FA_UNROLL
    ${each("e", "tid", BN * RG, NT)} {
      const int cc = e % ${BN}, g = e / ${BN};
      acc_t s[${RR}];
      FA_UNROLL
      for (int rr = 0; rr < ${RR}; rr++) s[rr] = 0;
      FA_UNROLL
      for (int d = 0; d < ${DP}; d += ${KVW}) {
$ if half then
        const fa_u32x4 kw = fa_lds_u32x4((const fa_u32x4 *)(Kst + cc * ${KRS} + d * 2));
$   for i, l in ipairs({ "x", "y", "z", "w" }) do
        const acc_t k${2 * i - 2} = ${cvt("kw." .. l)}, k${2 * i - 1} = ${cvt("kw." .. l .. " >> 16")};
$   end
$ else
        const ${vec} kv = fa_lds_${T}x${VW}((const ${vec} *)(${async and "(const acc_t *)(Kst + cc * " .. KRS .. ")" or "Ks + cc * " .. KS} + d));
$   for i, l in ipairs(lanes) do
        const acc_t k${i - 1} = kv.${l};
$   end
$ end
        FA_UNROLL
        for (int rr = 0; rr < ${RR}; rr++) {
$ for j = 0, KVW // VW - 1 do
          const ${vec} q${j} = fa_lds_${T}x${VW}((const ${vec} *)(Qs + (g + rr * ${RG}) * ${DP} + d + ${j * VW}));
$   for i, l in ipairs(lanes) do
          s[rr] += q${j}.${l} * k${j * VW + i - 1};
$   end
$ end
        }
      }
      const int unread = fa_lds_i64(kofs + cc) < 0;
      FA_UNROLL
      for (int rr = 0; rr < ${RR}; rr++) {
        const int i = g + rr * ${RG};
$ if mod then
$   local at = "b, hm[rr], qm[rr], k0 + cc, p.seq_q, len, p.heads"
        const int seen = !unread && k0 + cc <= fa_lds_i32(last_s + i)${mod.mask and " && fa_mod_mask(um[rr], " .. at .. ")" or ""};
$   if mod.score then
        /* the score modification, in natural units (S is in log2 units) */
        const acc_t x = fa_mod_score(um[rr], s[rr] * (acc_t)0.69314718055994531, ${at}) * (acc_t)1.4426950408889634;
        fa_sts_${T}(Ss + i * ${NS} + cc, seen ? x : fa_neg_inf_${T}());
$   else
        fa_sts_${T}(Ss + i * ${NS} + cc, seen ? s[rr] : fa_neg_inf_${T}());
$   end
$ else
        const int seen = !unread && k0 + cc <= fa_lds_i32(last_s + i);
        fa_sts_${T}(Ss + i * ${NS} + cc, seen ? s[rr] : fa_neg_inf_${T}());
$ end
      }
    }
    fa_syncthreads();
    /* softmax-rescale: a warp per row; P over S, m, l and the factor.
$ if R % W ~= 0 then
    ** Every warp runs the shuffles (a warp past the rows on a copy of the
    ** last, storing nothing), so that they are never under a branch that
    ** ptxas cannot see to be uniform. */
$ else
    */
$ end
    FA_UNROLL
    for (int i_it = 0; i_it < ${(R + W - 1) // W}; i_it++) {
$ if R % W ~= 0 then
      const int own = warp + i_it * ${W} < ${R}, i = own ? warp + i_it * ${W} : ${R - 1};
$ else
      const int own = 1, i = warp + i_it * ${W};
$ end
      acc_t mx = fa_neg_inf_${T}();
      FA_UNROLL
      ${each("cc", "lane", BN, 32)} {
        const acc_t s = fa_lds_${T}(Ss + i * ${NS} + cc);
        mx = s > mx ? s : mx;
      }
      FA_UNROLL
      for (int m = 16; m >= 1; m >>= 1) {
        const acc_t y = fa_shfl_xor_${T}(mx, m);
        mx = y > mx ? y : mx;
      }
      const acc_t m_old = fa_lds_${T}(m_s + i), m_new = m_old > mx ? m_old : mx;
      /* a row that has seen no key yet keeps -inf: exponents from 0 */
      const acc_t base = m_new == fa_neg_inf_${T}() ? (acc_t)0 : m_new;
      acc_t sum = 0;
      FA_UNROLL
      ${each("cc", "lane", BN, 32)} {
        const acc_t pv = fa_exp2_${T}(fa_lds_${T}(Ss + i * ${NS} + cc) - base);
        if (own) fa_sts_${T}(Ss + i * ${NS} + cc, pv);
        sum += pv;
      }
      FA_UNROLL
      for (int m = 16; m >= 1; m >>= 1) sum += fa_shfl_xor_${T}(sum, m);
      if (lane == 0 && own) {
        const acc_t alpha = fa_exp2_${T}(m_old - base);
        fa_sts_${T}(m_s + i, m_new);
        fa_sts_${T}(l_s + i, fa_lds_${T}(l_s + i) * alpha + sum);
        fa_sts_${T}(a_s + i, alpha);
      }
    }
    fa_syncthreads();
    /* gemm: O = O * alpha + P V; a thread's V element read once for its
    ** ${RC} row(s), their P ${VW} keys a load */
    if (g0 < ${CG}) {
      FA_UNROLL
      for (int dc = 0; dc < ${DC}; dc++) {
        const int d = d0 + dc * ${NTC};
        if (${DC * NTC == DV and "1" or "d < " .. DV}) {
          FA_UNROLL
          for (int rc = 0; rc < ${RC}; rc++) o[dc][rc] *= fa_lds_${T}(a_s + g0 + rc * ${CG});
          FA_UNROLL
          for (int cc = 0; cc < ${BN}; cc += ${VW}) {
$ for li = 1, VW do
$   if half then
            const acc_t v${li} = ${cvt("fa_lds_u16((const unsigned short *)(Vst + (cc + " .. (li - 1) .. ") * " .. VRS .. ") + d)")};
$   elseif async then
            const acc_t v${li} = fa_lds_${T}((const acc_t *)(Vst + (cc + ${li - 1}) * ${VRS}) + d);
$   else
            const acc_t v${li} = fa_lds_${T}(Vs + (cc + ${li - 1}) * ${DV} + d);
$   end
$ end
            FA_UNROLL
            for (int rc = 0; rc < ${RC}; rc++) {
              const ${vec} pv = fa_lds_${T}x${VW}((const ${vec} *)(Ss + (g0 + rc * ${CG}) * ${NS} + cc));
$ for li, l in ipairs(lanes) do
              o[dc][rc] += pv.${l} * v${li};
$ end
            }
          }
        }
      }
    }
    fa_syncthreads();
  }
  if (bad) fa_st_i32(p.error, 1);
  if (len != len_in && tid == 0) fa_st_i32(p.error + 1, 1);

  /* epilogue: ${S == 1 and "O normalized and the logsumexp" or "the split's partial O and logsumexp (log2 units)"} */
  FA_UNROLL
  for (int dc = 0; dc < ${DC}; dc++)
    FA_UNROLL
    for (int rc = 0; rc < ${RC}; rc++) {
      const int d = d0 + dc * ${NTC}, i = g0 + rc * ${CG}, gi = row0 + i;
      if (g0 >= ${CG} || d >= ${DV} || gi >= grows) continue;
      const int h = hk * group + gi / p.seq_q, r = gi - gi / p.seq_q * p.seq_q;
      /* l == 0: the row saw no key (zeros, -inf); NaN stays NaN */
      const acc_t l = fa_lds_${T}(l_s + i);
      const acc_t lse2 = l != 0 ? fa_lds_${T}(m_s + i) + fa_log2_${T}(l) : fa_neg_inf_${T}();
$ if S == 1 then
      ${io.elem} *const og = (${io.elem} *)p.o + b * p.o_sb + h * p.o_sh + r * p.o_sn;
      ${sto("og + d", "l != 0 ? o[dc][rc] / l : (acc_t)0")};
      if (d == 0)
        fa_st_${T}((acc_t *)p.lse + ((long long)b * p.heads + h) * p.seq_q + r,
                   lse2 * (acc_t)0.69314718055994530942);
$ else
      $ partial("b", "h", "r")
      fa_st_${T}(part + split * ${DV} + d, l != 0 ? o[dc][rc] / l : (acc_t)0);
      if (d == 0) fa_st_${T}(part + ${S * DV} + split, lse2);
$ end
    }
}
$ if S > 1 then

/* Query row (fa_bid_z(), fa_bid_y(), fa_bid_x()): O and the logsumexp from
** the splits' partials, each weighted by 2^(its lse - the largest); a NaN
** partial makes the row NaN, as the float64 reference's is. */
FA_KERNEL(${args.entry}_combine, ${NT})
{
  $ setup()
  const int r = fa_bid_x(), h = fa_bid_y(), b = fa_bid_z();
  $ partial("b", "h", "r")
  acc_t mx = fa_neg_inf_${T}();
  for (int s = 0; s < ${S}; s++) {
    const acc_t x = fa_ld_${T}(part + ${S * DV} + s);
    mx = x > mx || x != x ? x : mx;
  }
  acc_t wsum = 0;
  for (int s = 0; s < ${S}; s++)
    wsum += mx == fa_neg_inf_${T}() ? (acc_t)0 : fa_exp2_${T}(fa_ld_${T}(part + ${S * DV} + s) - mx);
  ${io.elem} *const og = (${io.elem} *)p.o + b * p.o_sb + h * p.o_sh + r * p.o_sn;
  for (int d = tid; d < ${DV}; d += ${NT}) {
    acc_t acc = 0;
    for (int s = 0; s < ${S}; s++) {
      const acc_t x = fa_ld_${T}(part + ${S * DV} + s);
      if (x != fa_neg_inf_${T}()) acc += fa_exp2_${T}(x - mx) * fa_ld_${T}(part + s * ${DV} + d);
    }
    ${sto("og + d", "wsum != 0 ? acc / wsum : (acc_t)0")};
  }
  if (tid == 0)
    fa_st_${T}((acc_t *)p.lse + ((long long)b * p.heads + h) * p.seq_q + r,
               wsum != 0 ? (mx + fa_log2_${T}(wsum)) * (acc_t)0.69314718055994530942
                        : fa_neg_inf_${T}());
}
$ end
