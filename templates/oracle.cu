$ -- oracle.cu: naive attention, one CTA per query row (see oracle.lua).
$ local D, NT = args.D, args.NT
/* ${args.entry}: naive attention, one CTA of ${NT} threads per query row. */
FA_KERNEL(${args.entry}, ${NT})
{
  typedef ${args.acc} acc_t;
  typedef ${args.elem} elem_t;
  const int tid = fa_tid(), r = fa_bid_x(), h = fa_bid_y(), b = fa_bid_z();
  const int hk = FA_KV_HEAD(p, h);      /* the K/V head (GQA, MQA) */
  acc_t *const s = (acc_t *)fa_smem_base();   /* the row's scores, seq_k of them */
  acc_t *const red = s + p.seq_k;             /* ${NT} partials for the reductions */
  const elem_t *const q = (const elem_t *)p.q + b * p.q_sb + h * p.q_sh + r * p.q_sn;
  const elem_t *const k = (const elem_t *)p.k + b * p.k_sb + hk * p.k_sh;
  const elem_t *const v = (const elem_t *)p.v + b * p.v_sb + hk * p.v_sh;
  acc_t *const o = (acc_t *)p.o + b * p.o_sb + h * p.o_sh + r * p.o_sn;  /* O unrounded */
  acc_t *const lse = (acc_t *)p.lse + ((long long)b * p.heads + h) * p.seq_q + r;
$ if args.causal == 1 then
  int nvis = r + (p.seq_k - p.seq_q) + 1;     /* bottom-right aligned */
  nvis = nvis < 0 ? 0 : (nvis > p.seq_k ? p.seq_k : nvis);
$ else
  const int nvis = p.seq_k;
$ end
  const acc_t sl2 = (acc_t)p.scale_log2;
  acc_t m = fa_neg_inf_${args.T}();
  for (int c = tid; c < nvis; c += ${NT}) {
    acc_t dot = 0;
    for (int d = 0; d < ${D}; ++d) dot += (acc_t)${args.ld("q + d")} * (acc_t)${args.ld("k + (long long)c * p.k_sn + d")};
    dot *= sl2;
    fa_sts_${args.T}(s + c, dot);
    m = dot > m ? dot : m;
  }
$ local function reduce(var, op)
  fa_sts_${args.T}(red + tid, ${var});
  fa_syncthreads();
  for (int w = ${NT // 2}; w > 0; w >>= 1) {
    if (tid < w) {
      const acc_t x = fa_lds_${args.T}(red + tid), y = fa_lds_${args.T}(red + tid + w);
$ if op == "max" then
      fa_sts_${args.T}(red + tid, x > y ? x : y);
$ else
      fa_sts_${args.T}(red + tid, x + y);
$ end
    }
    fa_syncthreads();
  }
  ${var} = fa_lds_${args.T}(red);
  fa_syncthreads();
$ end
  $ reduce("m", "max")
  acc_t l = 0;
  for (int c = tid; c < nvis; c += ${NT}) {
    const acc_t e = fa_exp2_${args.T}(fa_lds_${args.T}(s + c) - m);
    fa_sts_${args.T}(s + c, e);
    l += e;
  }
  $ reduce("l", "sum")
  for (int d = tid; d < ${args.DV}; d += ${NT}) {
    acc_t acc = 0;
    for (int c = 0; c < nvis; ++c) acc += fa_lds_${args.T}(s + c) * (acc_t)${args.ld("v + (long long)c * p.v_sn + d")};
    fa_st_${args.T}(o + d, nvis > 0 ? acc / l : (acc_t)0);
  }
  if (tid == 0)
    fa_st_${args.T}(lse, nvis > 0 ? (m + fa_log2_${args.T}(l)) * (acc_t)0.69314718055994530942 : fa_neg_inf_${args.T}());
}
