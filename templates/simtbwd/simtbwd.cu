$ -- simtbwd.cu: FlashAttention-2's backward pass on CUDA cores (see simtbwd.lua).
$ local c, P, T = args.cfg, args.P, args.T
$ local vl = require("varlen")
$ -- Q, K, V, O, dO and the gradients in global memory: elements of args.io
$ -- (acc_t, or 16-bit values converted on load and rounded on store); lse,
$ -- D and the accumulators stay acc_t.
$ local io = args.io
$ local function ldg(a) return string.format(io.ldg, a) end
$ local function ldo(a) return string.format(io.ld, a) end
$ local function sto(a, v) return string.format(io.st, a, v) end
$ local causal, atomic = c.causal == 1, c.dq == "atomic"
$ local fa1 = c.order == "q"   -- FlashAttention-1's order: parallel over Q, dK and dV by atomics
$ local D, BM, BN, NT, DS, NS = P.D, P.BM, P.BN, P.NT, P.DS, P.NS
$ -- V's head dim (V, O, dO, dV) and its rows' stride; DV == D renders the
$ -- kernels of one head dim, K and V (Q and dO) in the same loops.
$ local DV, DVS = P.DV, P.DVS
$ local W = NT // 32
$ -- A score or mask modification (mod.lua): its functions, its derivative's
$ -- too, precede the kernels.
$ local mod = c.mod
/* ${args.entry}: the backward pass, tile ${BM}x${BN}, ${NT} threads.
$ if DV == D then
** dK, dV: ${P.RK} element(s) per thread; dQ: ${P.RQ}. */
$ else
** Head dims ${D} (Q, K) and ${DV} (V, O). dK: ${P.RK} element(s) per thread, dV: ${P.RV}; dQ: ${P.RQ}. */
$ end

$ -- The tensors of query head hv of this batch: Q, O, dO, lse, D (and
$ -- dQ's accumulator).
$ local function qhead(hv)
  const ${io.elem} *const qg = (const ${io.elem} *)p.q + b * p.q_sb + ${hv} * p.q_sh${vl.bwd_row(c, "q")};
  const ${io.elem} *const og = (const ${io.elem} *)p.o + b * p.o_sb + ${hv} * p.o_sh${vl.bwd_row(c, "o")};
  const ${io.elem} *const dog = (const ${io.elem} *)p.dout + b * p.do_sb + ${hv} * p.do_sh${vl.bwd_row(c, "do")};
  const acc_t *const lg = (const acc_t *)p.lse + ${vl.lse_row(c, "b", hv)};
  acc_t *const dg = (acc_t *)p.ws + ((long long)b * p.heads + ${hv}) * ${vl.rows(c)};
$ if atomic then
  /* dQ's float accumulator, (seq_q, dim) per (batch, head). */
  acc_t *const qacc = (acc_t *)p.ws2 + ((long long)b * p.heads + ${hv}) * ${vl.rows(c)} * ${D};
  (void)qacc;
$ end
  (void)qg; (void)og; (void)dog; (void)lg; (void)dg;
$ if mod then
  /* the modification's head and what no row or key of it changes */
  const int mh = ${hv};
  const fa_mod_u mod_u = fa_mod_setup(b, mh, p.seq_q, p.seq_k, p.heads);
  (void)mh; (void)mod_u;
$ end
$ end

$ -- What every kernel of the op computes from the argument block: the
$ -- tensors of this (batch, head) (with per_head; the dkdv kernel takes
$ -- its query heads' in its loop over them), the causal offset and the
$ -- scales. per_head == false: a kernel over K/V heads ("kv_heads" in its
$ -- grid), h the first query head of its group.
$ local function setup(per_head)
  typedef ${args.acc} acc_t;
  const int tid = fa_tid();
  const int group = p.kv_group > 1 ? p.kv_group : 1;
$ if per_head == false then
  const int hk = fa_bid_y(), b = fa_bid_z(), h = hk * group;
$ else
  const int h = fa_bid_y(), b = fa_bid_z();
  const int hk = FA_KV_HEAD(p, h);
$ end
  const ${io.elem} *const kg = (const ${io.elem} *)p.k + b * p.k_sb + hk * p.k_sh${vl.bwd_row(c, "k")};
  const ${io.elem} *const vg = (const ${io.elem} *)p.v + b * p.v_sb + hk * p.v_sh${vl.bwd_row(c, "v")};
$ if per_head ~= false then
  $ qhead("h")
$ end
  const int off = p.seq_k - p.seq_q; /* key c is visible to row r when c <= r + off */
  const acc_t sl2 = (acc_t)p.scale_log2;
  /* The softmax scale itself: dQ and dK carry it once. */
  const acc_t scale = (acc_t)(p.scale_log2 * 0.69314718055994530942);
  (void)kg; (void)vg; (void)off; (void)group;
  (void)sl2; (void)scale;
$ end

$ -- dK's and dV's float accumulators, (seq_k, D + DV) per (batch, K/V
$ -- head): dK's row, then dV's.
$ local function kv_acc()
  acc_t *const kvacc = (acc_t *)p.ws2 + ((long long)b * p.heads + hk) * ${vl.key_rows(c)} * ${D + DV};
$ end
$ -- Shared-memory tiles of the dkdv and dq kernels.
$ local function tiles()
  acc_t *const sm = (acc_t *)fa_smem_base();
  acc_t *const Qs = sm + ${P.off_q};
  acc_t *const dOs = sm + ${P.off_do};
  acc_t *const Ks = sm + ${P.off_k};
  acc_t *const Vs = sm + ${P.off_v};
  acc_t *const dSs = sm + ${P.off_ds};
  acc_t *const lse_s = sm + ${P.off_lse};
  acc_t *const d_s = sm + ${P.off_d};
$ end

$ -- Q and dO rows q0.. into shared memory with each row's logsumexp (in
$ -- log2 units) and D; rows past the problem are zeros.
$ local function load_q(q0)
$ if DV == D then
  for (int e = tid; e < ${BM * D}; e += ${NT}) {
    const int r = e / ${D}, d = e - r * ${D};
    const int gr = ${q0} + r;
    acc_t qx = 0, dx = 0;
    if (gr < p.seq_q) {
      qx = ${ldg("qg + gr * p.q_sn + d")};
      dx = ${ldg("dog + gr * p.do_sn + d")};
    }
    fa_sts_${T}(Qs + r * ${DS} + d, qx);
    fa_sts_${T}(dOs + r * ${DS} + d, dx);
  }
$ else
  for (int e = tid; e < ${BM * D}; e += ${NT}) {
    const int r = e / ${D}, d = e - r * ${D};
    const int gr = ${q0} + r;
    acc_t qx = 0;
    if (gr < p.seq_q) qx = ${ldg("qg + gr * p.q_sn + d")};
    fa_sts_${T}(Qs + r * ${DS} + d, qx);
  }
  for (int e = tid; e < ${BM * DV}; e += ${NT}) {
    const int r = e / ${DV}, d = e - r * ${DV};
    const int gr = ${q0} + r;
    acc_t dx = 0;
    if (gr < p.seq_q) dx = ${ldg("dog + gr * p.do_sn + d")};
    fa_sts_${T}(dOs + r * ${DVS} + d, dx);
  }
$ end
  for (int r = tid; r < ${BM}; r += ${NT}) {
    const int gr = ${q0} + r;
    acc_t lx = 0, dx = 0;
    if (gr < p.seq_q) {
      lx = fa_ldg_${T}(lg + gr) * (acc_t)1.44269504088896340736;
      dx = fa_ld_${T}(dg + gr);
    }
    fa_sts_${T}(lse_s + r, lx);
    fa_sts_${T}(d_s + r, dx);
  }
$ end

$ -- K and V rows k0.. into shared memory; rows past the problem are zeros.
$ local function load_kv(k0)
$ if DV == D then
  for (int e = tid; e < ${BN * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    const int gn = ${k0} + n;
    acc_t kx = 0, vx = 0;
    if (gn < p.seq_k) {
      kx = ${ldg("kg + gn * p.k_sn + d")};
      vx = ${ldg("vg + gn * p.v_sn + d")};
    }
    fa_sts_${T}(Ks + n * ${DS} + d, kx);
    fa_sts_${T}(Vs + n * ${DS} + d, vx);
  }
$ else
  for (int e = tid; e < ${BN * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    const int gn = ${k0} + n;
    acc_t kx = 0;
    if (gn < p.seq_k) kx = ${ldg("kg + gn * p.k_sn + d")};
    fa_sts_${T}(Ks + n * ${DS} + d, kx);
  }
  for (int e = tid; e < ${BN * DV}; e += ${NT}) {
    const int n = e / ${DV}, d = e - n * ${DV};
    const int gn = ${k0} + n;
    acc_t vx = 0;
    if (gn < p.seq_k) vx = ${ldg("vg + gn * p.v_sn + d")};
    fa_sts_${T}(Vs + n * ${DVS} + d, vx);
  }
$ end
$ end

$ -- The one recomputation both kernels share, cell by cell of the BM x BN
$ -- tile: P = exp2(S log2e - lse), dP = dO V^T, dS = P (dP - D); a cell
$ -- outside the problem or the mask is 0. With p_out, P is kept too. Under
$ -- a modification P is of the modified score, and dS goes through the
$ -- score's derivative.
$ local function recompute(q0, k0, p_out)
$ local at = "b, mh, gr, gn, p.seq_q, p.seq_k, p.heads"
  for (int e = tid; e < ${BM * BN}; e += ${NT}) {
    const int r = e / ${BN}, n = e - r * ${BN};
    const int gr = ${q0} + r, gn = ${k0} + n;
    acc_t pv = 0, ds = 0;
$ if mod and mod.mask then
    if (gr < p.seq_q && gn < p.seq_k${causal and " && gn <= gr + off" or ""} && fa_mod_mask(mod_u, ${at})) {
$ elseif causal then
    if (gr < p.seq_q && gn < p.seq_k && gn <= gr + off) {
$ else
    if (gr < p.seq_q && gn < p.seq_k) {
$ end
      acc_t s = 0, dp = 0;
$ if DV == D then
      FA_UNROLL_BY(4)
      for (int d = 0; d < ${D}; ++d) {
        s += fa_lds_${T}(Qs + r * ${DS} + d) * fa_lds_${T}(Ks + n * ${DS} + d);
        dp += fa_lds_${T}(dOs + r * ${DS} + d) * fa_lds_${T}(Vs + n * ${DS} + d);
      }
$ else
      FA_UNROLL_BY(4)
      for (int d = 0; d < ${D}; ++d)
        s += fa_lds_${T}(Qs + r * ${DS} + d) * fa_lds_${T}(Ks + n * ${DS} + d);
      FA_UNROLL_BY(4)
      for (int d = 0; d < ${DV}; ++d)
        dp += fa_lds_${T}(dOs + r * ${DVS} + d) * fa_lds_${T}(Vs + n * ${DVS} + d);
$ end
$ if mod and mod.score then
      const acc_t nat = s * scale;  /* natural units */
      pv = fa_exp2_${T}(fa_mod_score(mod_u, nat, ${at}) * (acc_t)1.4426950408889634 - fa_lds_${T}(lse_s + r));
      /* a key that weighs nothing passes nothing back */
      ds = pv == 0 ? (acc_t)0 : pv * (dp - fa_lds_${T}(d_s + r)) * fa_mod_dscore(mod_u, nat, ${at});
$ else
      pv = fa_exp2_${T}(s * sl2 - fa_lds_${T}(lse_s + r));
      ds = pv * (dp - fa_lds_${T}(d_s + r));
$ end
    }
$ if p_out then
    fa_sts_${T}(Ps + r * ${NS} + n, pv);
$ end
    fa_sts_${T}(dSs + r * ${NS} + n, ds);
  }
$ end

$ if mod then
${require("mod").c_functions(mod, args.acc, true)}

$ end
/* D = rowsum(dO * O) - dlse: a warp per row, its lanes across the head dim. */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_pre", NT)}
  $ setup()
  const int lane = tid & 31, warp = tid >> 5;
  const int q0 = fa_bid_x() * ${BM};
  for (int r = warp; r < ${BM}; r += ${W}) {
    const int gr = q0 + r;
    if (gr >= p.seq_q) break;
    acc_t sum = 0;
    for (int d = lane; d < ${DV}; d += 32)
      sum += ${ldg("dog + gr * p.do_sn + d")} * ${ldo("og + gr * p.o_sn + d")};
    FA_UNROLL
    for (int m = 16; m >= 1; m >>= 1) sum += fa_shfl_xor_${T}(sum, m);
    /* A gradient through the logsumexp adds P dlse to dS: D takes it off. */
    if (p.dlse) sum -= fa_ldg_${T}((const acc_t *)p.dlse + ${vl.lse_row(c, "b", "h")} + gr);
    if (lane == 0) fa_st_${T}(dg + gr, sum);
  }
$ if atomic then
  /* dkdv's launch adds to dQ's accumulator: zeros first. */
  for (int e = tid; e < ${BM * D}; e += ${NT})
    if (q0 + e / ${D} < p.seq_q) fa_st_${T}(qacc + (long long)q0 * ${D} + e, (acc_t)0);
$ end
}

$ if not fa1 then
/* dK and dV of K/V block fa_bid_x(), over the Q blocks that see it. */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_dkdv", NT)}
  /* Under GQA a CTA per K/V head computes dK and dV over every query head
  ** of its group (no two CTAs write a row, and the sum has one order). */
  $ setup(false)
  $ tiles()
  acc_t *const Ps = sm + ${P.off_p};
  ${io.elem} *const dkg = (${io.elem} *)p.dk + b * p.dk_sb + hk * p.dk_sh${vl.bwd_row(c, "dk")};
  ${io.elem} *const dvg = (${io.elem} *)p.dv + b * p.dv_sb + hk * p.dv_sh${vl.bwd_row(c, "dv")};
  const int k0 = fa_bid_x() * ${BN};
$ if c.varlen == 1 then
  ${vl.past("k0", "p.seq_k")}
$ end
  acc_t dk[${P.RK}], dv[${P.RV}];
$ if DV == D then
  FA_UNROLL
  for (int t = 0; t < ${P.RK}; ++t) dk[t] = dv[t] = 0;
$ else
  FA_UNROLL
  for (int t = 0; t < ${P.RK}; ++t) dk[t] = 0;
  FA_UNROLL
  for (int t = 0; t < ${P.RV}; ++t) dv[t] = 0;
$ end
  $ load_kv("k0")
$ if causal then
  /* The first row that sees key k0 is k0 - off. */
  const int first = k0 - off > 0 ? (k0 - off) / ${BM} : 0;
$ else
  const int first = 0;
$ end
  const int nq = (p.seq_q + ${BM - 1}) / ${BM};
  for (int hq = h; hq < h + group; ++hq) {
    $ qhead("hq")
    for (int qb = first; qb < nq; ++qb) {
      const int q0 = qb * ${BM};
$ if mod and mod.mask then
      ${require("softmax").mod_skip(BM, BN, "Q")}
$ end
      $ load_q("q0")
      fa_syncthreads();
      $ recompute("q0", "k0", true)
      fa_syncthreads();
$ if DV == D then
      /* dV += P^T dO, dK += dS^T Q over the block's rows. */
      FA_UNROLL
      for (int t = 0; t < ${P.RK}; ++t) {
        const int e = tid + t * ${NT};
        if (e < ${BN * D}) {
          const int n = e / ${D}, d = e - n * ${D};
          acc_t av = 0, ak = 0;
          FA_UNROLL_BY(4)
          for (int r = 0; r < ${BM}; ++r) {
            av += fa_lds_${T}(Ps + r * ${NS} + n) * fa_lds_${T}(dOs + r * ${DS} + d);
            ak += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Qs + r * ${DS} + d);
          }
          dv[t] += av, dk[t] += ak;
        }
      }
$ else
      /* dV += P^T dO over the block's rows. */
      FA_UNROLL
      for (int t = 0; t < ${P.RV}; ++t) {
        const int e = tid + t * ${NT};
        if (e < ${BN * DV}) {
          const int n = e / ${DV}, d = e - n * ${DV};
          acc_t av = 0;
          FA_UNROLL_BY(4)
          for (int r = 0; r < ${BM}; ++r)
            av += fa_lds_${T}(Ps + r * ${NS} + n) * fa_lds_${T}(dOs + r * ${DVS} + d);
          dv[t] += av;
        }
      }
      /* dK += dS^T Q over the block's rows. */
      FA_UNROLL
      for (int t = 0; t < ${P.RK}; ++t) {
        const int e = tid + t * ${NT};
        if (e < ${BN * D}) {
          const int n = e / ${D}, d = e - n * ${D};
          acc_t ak = 0;
          FA_UNROLL_BY(4)
          for (int r = 0; r < ${BM}; ++r)
            ak += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Qs + r * ${DS} + d);
          dk[t] += ak;
        }
      }
$ end
$ if atomic then
      /* dQ += dS K for this block's rows, added across the K/V blocks' CTAs. */
      for (int e = tid; e < ${BM * D}; e += ${NT}) {
        const int r = e / ${D}, d = e - r * ${D};
        if (q0 + r < p.seq_q) {
          acc_t a = 0;
          FA_UNROLL_BY(4)
          for (int n = 0; n < ${BN}; ++n)
            a += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Ks + n * ${DS} + d);
          fa_atomic_add_${T}(qacc + (long long)(q0 + r) * ${D} + d, a);
        }
      }
$ end
      fa_syncthreads(); /* Q, dO, P and dS are read: the next Q block may load */
    }
  }
$ if DV == D then
  FA_UNROLL
  for (int t = 0; t < ${P.RK}; ++t) {
    const int e = tid + t * ${NT};
    const int n = e / ${D}, d = e - n * ${D};
    if (e < ${BN * D} && k0 + n < p.seq_k) {
      ${sto("dkg + (k0 + n) * p.dk_sn + d", "dk[t] * scale")};
      ${sto("dvg + (k0 + n) * p.dv_sn + d", "dv[t]")};
    }
  }
$ else
  FA_UNROLL
  for (int t = 0; t < ${P.RK}; ++t) {
    const int e = tid + t * ${NT};
    const int n = e / ${D}, d = e - n * ${D};
    if (e < ${BN * D} && k0 + n < p.seq_k) ${sto("dkg + (k0 + n) * p.dk_sn + d", "dk[t] * scale")};
  }
  FA_UNROLL
  for (int t = 0; t < ${P.RV}; ++t) {
    const int e = tid + t * ${NT};
    const int n = e / ${DV}, d = e - n * ${DV};
    if (e < ${BN * DV} && k0 + n < p.seq_k) ${sto("dvg + (k0 + n) * p.dv_sn + d", "dv[t]")};
  }
$ end
}

$ end

$ if atomic then
/* dQ = scale * the accumulator dkdv added to. */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_dqconvert", NT)}
  $ setup()
  ${io.elem} *const dqg = (${io.elem} *)p.dq + b * p.dq_sb + h * p.dq_sh${vl.bwd_row(c, "dq")};
  const int q0 = fa_bid_x() * ${BM};
$ if c.varlen == 1 then
  ${vl.past("q0")}
$ end
  for (int e = tid; e < ${BM * D}; e += ${NT}) {
    const int r = e / ${D}, d = e - r * ${D};
    if (q0 + r < p.seq_q)
      ${sto("dqg + (q0 + r) * p.dq_sn + d", "fa_ld_" .. T .. "(qacc + (long long)(q0 + r) * " .. D .. " + d) * scale")};
  }
}
$ else
$ if fa1 then
/* FlashAttention-1's order: Q block fa_bid_x() walks the K/V blocks it
** sees, P and dS recomputed as in dkdv; dQ in registers, written once;
** each K/V block's shares of dV (P^T dO) and dK (dS^T Q) added to float
** accumulators with atomics, across every Q block's CTA. */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_fa1", NT)}
$ else
/* dQ of Q block fa_bid_x(), over the K/V blocks it sees. */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_dq", NT)}
$ end
  $ setup()
  $ tiles()
$ if fa1 then
  acc_t *const Ps = sm + ${P.off_p};
  $ kv_acc()
$ end
  ${io.elem} *const dqg = (${io.elem} *)p.dq + b * p.dq_sb + h * p.dq_sh${vl.bwd_row(c, "dq")};
  const int q0 = fa_bid_x() * ${BM};
$ if c.varlen == 1 then
  ${vl.past("q0")}
$ end
  acc_t dq[${P.RQ}];
  FA_UNROLL
  for (int t = 0; t < ${P.RQ}; ++t) dq[t] = 0;
  $ load_q("q0")
$ if causal then
  /* The block's last row sees keys up to q0 + ${BM - 1} + off. */
  int kend = q0 + ${BM} + off;
  kend = kend < 0 ? 0 : kend > p.seq_k ? p.seq_k : kend;
$ else
  const int kend = p.seq_k;
$ end
  for (int k0 = 0; k0 < kend; k0 += ${BN}) {
$ if mod and mod.mask then
    ${require("softmax").mod_skip(BM, BN, "K/V")}
$ end
    $ load_kv("k0")
    fa_syncthreads();
    $ recompute("q0", "k0", fa1)
    fa_syncthreads();
    FA_UNROLL
    for (int t = 0; t < ${P.RQ}; ++t) {
      const int e = tid + t * ${NT};
      if (e < ${BM * D}) {
        const int r = e / ${D}, d = e - r * ${D};
        acc_t a = 0;
        FA_UNROLL_BY(4)
        for (int n = 0; n < ${BN}; ++n)
          a += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Ks + n * ${DS} + d);
        dq[t] += a;
      }
    }
$ if fa1 and DV == D then
    for (int e = tid; e < ${BN * D}; e += ${NT}) {
      const int n = e / ${D}, d = e - n * ${D};
      if (k0 + n < p.seq_k) {
        acc_t av = 0, ak = 0;
        FA_UNROLL_BY(4)
        for (int r = 0; r < ${BM}; ++r) {
          av += fa_lds_${T}(Ps + r * ${NS} + n) * fa_lds_${T}(dOs + r * ${DS} + d);
          ak += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Qs + r * ${DS} + d);
        }
        fa_atomic_add_${T}(kvacc + (long long)(k0 + n) * ${2 * D} + d, ak);
        fa_atomic_add_${T}(kvacc + (long long)(k0 + n) * ${2 * D} + ${D} + d, av);
      }
    }
$ end
$ if fa1 and DV ~= D then
    for (int e = tid; e < ${BN * D}; e += ${NT}) {
      const int n = e / ${D}, d = e - n * ${D};
      if (k0 + n < p.seq_k) {
        acc_t ak = 0;
        FA_UNROLL_BY(4)
        for (int r = 0; r < ${BM}; ++r)
          ak += fa_lds_${T}(dSs + r * ${NS} + n) * fa_lds_${T}(Qs + r * ${DS} + d);
        fa_atomic_add_${T}(kvacc + (long long)(k0 + n) * ${D + DV} + d, ak);
      }
    }
    for (int e = tid; e < ${BN * DV}; e += ${NT}) {
      const int n = e / ${DV}, d = e - n * ${DV};
      if (k0 + n < p.seq_k) {
        acc_t av = 0;
        FA_UNROLL_BY(4)
        for (int r = 0; r < ${BM}; ++r)
          av += fa_lds_${T}(Ps + r * ${NS} + n) * fa_lds_${T}(dOs + r * ${DVS} + d);
        fa_atomic_add_${T}(kvacc + (long long)(k0 + n) * ${D + DV} + ${D} + d, av);
      }
    }
$ end
$ if fa1 then
    fa_syncthreads(); /* K, V, P and dS are read: the next K/V block may load */
$ else
    fa_syncthreads(); /* dS and K are read: the next K/V block may load */
$ end
  }
  FA_UNROLL
  for (int t = 0; t < ${P.RQ}; ++t) {
    const int e = tid + t * ${NT};
    const int r = e / ${D}, d = e - r * ${D};
    if (e < ${BM * D} && q0 + r < p.seq_q) ${sto("dqg + (q0 + r) * p.dq_sn + d", "dq[t] * scale")};
  }
}
$ end

$ if fa1 then
/* Zeros into the accumulators of K/V block fa_bid_x() of K/V head
** fa_bid_y(). */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_kvzero", NT)}
  $ setup(false)
  $ kv_acc()
  const int k0 = fa_bid_x() * ${BN};
  for (int e = tid; e < ${BN * (D + DV)}; e += ${NT})
    if (k0 + e / ${D + DV} < p.seq_k) fa_st_${T}(kvacc + (long long)k0 * ${D + DV} + e, (acc_t)0);
}

/* dK = scale * its accumulator, dV = its own, for K/V block fa_bid_x(). */
${vl.bwd_kernel(c, "FA_KERNEL", args.entry .. "_kvconvert", NT)}
  $ setup(false)
  $ kv_acc()
  ${io.elem} *const dkg = (${io.elem} *)p.dk + b * p.dk_sb + hk * p.dk_sh${vl.bwd_row(c, "dk")};
  ${io.elem} *const dvg = (${io.elem} *)p.dv + b * p.dv_sb + hk * p.dv_sh${vl.bwd_row(c, "dv")};
  const int k0 = fa_bid_x() * ${BN};
$ if c.varlen == 1 then
  ${vl.past("k0", "p.seq_k")}
$ end
$ if DV == D then
  for (int e = tid; e < ${BN * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    if (k0 + n < p.seq_k) {
      const acc_t *const row = kvacc + (long long)(k0 + n) * ${2 * D};
      ${sto("dkg + (k0 + n) * p.dk_sn + d", "fa_ld_" .. T .. "(row + d) * scale")};
      ${sto("dvg + (k0 + n) * p.dv_sn + d", "fa_ld_" .. T .. "(row + " .. D .. " + d)")};
    }
  }
$ else
  for (int e = tid; e < ${BN * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    if (k0 + n < p.seq_k)
      ${sto("dkg + (k0 + n) * p.dk_sn + d", "fa_ld_" .. T .. "(kvacc + (long long)(k0 + n) * " .. (D + DV) .. " + d) * scale")};
  }
  for (int e = tid; e < ${BN * DV}; e += ${NT}) {
    const int n = e / ${DV}, d = e - n * ${DV};
    if (k0 + n < p.seq_k)
      ${sto("dvg + (k0 + n) * p.dv_sn + d", "fa_ld_" .. T .. "(kvacc + (long long)(k0 + n) * " .. (D + DV) .. " + " .. D .. " + d)")};
  }
$ end
}
$ end
