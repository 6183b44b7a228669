/*
** reference.c
** Naive attention on the CPU in float64, the oracle every kernel is checked
** against. It is deliberately the textbook computation: one score row is
** materialized per query, the softmax is taken with the row maximum
** subtracted, and the output is the probability-weighted sum of V rows.
** Speed does not matter here; being obviously right does.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fa_mod.h"
#include "fa_status.h"
#include "reference.h"

/* Nonzero when the problem can be computed. */
static int problem_valid(const fa_problem *p) {
  return p->batch >= 1 && p->heads >= 1 && p->seq_q >= 1 && p->seq_k >= 1 &&
         p->dim >= 1 && p->dim <= FA_DIM_MAX && p->dim_v >= 0 && p->dim_v <= FA_DIM_MAX &&
         p->heads % fa_problem_group(p) == 0;
}

/* How many keys query row r sees: all of them, or with a causal mask
** aligned bottom-right, keys 0 .. r + (seq_k - seq_q). May be zero when
** seq_q > seq_k. Computed in long long so large shapes cannot overflow. */
static int visible_keys(const fa_problem *p, int r) {
  long long n;
  if (!p->causal) return p->seq_k;
  n = (long long)r + p->seq_k - p->seq_q + 1;
  if (n < 0) n = 0;
  if (n > p->seq_k) n = p->seq_k;
  return (int)n;
}

static double dot(const double *a, const double *b, int n) {
  double s = 0.0;
  int i;
  for (i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* The sum of |a_i b_i|: the size of the terms of a dot product, which its
** rounding error scales with. */
static double dot_abs(const double *a, const double *b, int n) {
  double s = 0.0;
  int i;
  for (i = 0; i < n; i++) s += fabs(a[i] * b[i]);
  return s;
}

/* Where a row is: its batch, head and query index, for a modification. */
typedef struct row_at { int b, h, r; } row_at;

/* Score x of key c for the row at w, after p's modification: rewritten by
** its score part, -inf where its mask hides the key. */
static double modified(const fa_problem *p, row_at w, int c, double x) {
  const fa_mod *m = p->mod;
  const double vars[FA_MV_COUNT] = {
    [FA_MV_SCORE] = x, [FA_MV_B] = w.b, [FA_MV_H] = w.h, [FA_MV_Q] = w.r, [FA_MV_K] = c,
    [FA_MV_SEQ_Q] = p->seq_q, [FA_MV_SEQ_K] = p->seq_k, [FA_MV_HEADS] = p->heads};
  if (m->nmask && fa_mod_eval(m->mask, m->nmask, vars, p->mod_data) == 0) return -INFINITY;
  return m->nscore ? fa_mod_eval(m->score, m->nscore, vars, p->mod_data) : x;
}

/* Where a row's error sizes go (ref_fwd_io's lse_mag and o_sens), each
** NULL when not wanted. */
typedef struct row_sizes { double *mag, *sens; } row_sizes;

/* sum_c P_c a_c |v_c - o| over the row's visible keys: how far o moves
** when every logit moves by a relative error of 1 of the size a_c of its
** terms (to first order, o moves by sum_c P_c (e_c - sum_j P_j e_j) v_c
** for logit errors e_c, which is sum_c P_c (e_c - ...) (v_c - o)). s holds
** the row's unnormalized exponentials, l their sum. */
static double row_sensitivity(const fa_problem *p, double scale, int nvis, const double *q,
                              const double *k, long long ksn, const double *v, long long vsn,
                              const double *o, const double *s, double l) {
  const int dv = fa_problem_dim_v(p);
  double sens = 0.0;
  for (int c = 0; c < nvis; c++) {
    if (s[c] == 0.0) continue;  /* hidden, or no weight */
    const double *vr = v + c * vsn;
    double d2 = 0.0;
    for (int d = 0; d < dv; d++) d2 += (vr[d] - o[d]) * (vr[d] - o[d]);
    sens += s[c] / l * scale * dot_abs(q, k + c * ksn, p->dim) * sqrt(d2);
  }
  return sens;
}

/* One query row of one (batch, head): q points at the row, k and v at the
** head's first key / value row, o at the output row. s is scratch of at
** least seq_k doubles. Returns the row's logsumexp; with sz.mag, the
** largest size of a visible key's logit's terms into *sz.mag (ref_fwd_io's
** lse_mag), with sz.sens row_sensitivity into *sz.sens (its o_sens).
** A key that p's modification hides weighs nothing; a row it leaves no key
** gets zeros and -inf, as a row before its first causal key does. */
static double attend_row(const fa_problem *p, double scale, int nvis, row_at w,
                         const double *q, const double *k, long long ksn,
                         const double *v, long long vsn,
                         double *o, double *s, row_sizes sz) {
  const int dv = fa_problem_dim_v(p);
  double m, l;
  int c, d;

  double *mag = sz.mag;
  for (d = 0; d < dv; d++) o[d] = 0.0;
  if (mag) *mag = 0.0;
  if (sz.sens) *sz.sens = 0.0;
  /* Nothing visible: the softmax is empty. Zeros and -inf, not 0/0. */
  if (nvis == 0) return -INFINITY;

  m = -INFINITY;
  int seen = 0;     /* keys left visible by a modification's mask */
  for (c = 0; c < nvis; c++) {
    s[c] = scale * dot(q, k + c * ksn, p->dim);
    if (p->mod) s[c] = modified(p, w, c, s[c]);
    if (s[c] == -INFINITY && p->mod) continue;
    seen++;
    if (s[c] > m) m = s[c];
    if (mag) {
      const double a = scale * dot_abs(q, k + c * ksn, p->dim);
      if (a > *mag) *mag = a;
    }
  }
  if (seen == 0) return -INFINITY;
  l = 0.0;
  for (c = 0; c < nvis; c++) {
    s[c] = exp(s[c] - m);
    l += s[c];
  }
  for (c = 0; c < nvis; c++) {
    const double *vr = v + c * vsn;
    for (d = 0; d < dv; d++) o[d] += s[c] * vr[d];
  }
  for (d = 0; d < dv; d++) o[d] /= l;
  if (sz.sens) *sz.sens = row_sensitivity(p, scale, nvis, q, k, ksn, v, vsn, o, s, l);
  return m + log(l);
}

/* ref_attention, and with lse_mag and o_sens (NULL: none) ref_fwd_io's. */
static int attention(const fa_problem *p,
                     const double *q, fa_layout ql,
                     const double *k, fa_layout kl,
                     const double *v, fa_layout vl,
                     double *o, fa_layout ol, double *lse, double *lse_mag, double *o_sens) {
  double scale, *s;
  int b, h, r;

  if (!p || !q || !k || !v || !o || !problem_valid(p)) return -1;
  scale = fa_problem_scale(p);
  s = malloc((size_t)p->seq_k * sizeof *s);
  if (!s) return -1;

  for (b = 0; b < p->batch; b++) {
    for (h = 0; h < p->heads; h++) {
      /* under GQA query head h reads K/V head h / kv_group */
      const double *kh = k + b * kl.sb + h / fa_problem_group(p) * kl.sh;
      const double *vh = v + b * vl.sb + h / fa_problem_group(p) * vl.sh;
      for (r = 0; r < p->seq_q; r++) {
        const double *qr = q + b * ql.sb + h * ql.sh + r * ql.sn;
        double *orow = o + b * ol.sb + h * ol.sh + r * ol.sn;
        const long long at = ((long long)b * p->heads + h) * p->seq_q + r;
        const row_at w = {b, h, r};
        const row_sizes sz = {lse_mag ? lse_mag + at : NULL, o_sens ? o_sens + at : NULL};
        double x = attend_row(p, scale, visible_keys(p, r), w, qr, kh, kl.sn, vh, vl.sn, orow, s, sz);
        if (lse) lse[at] = x;
      }
    }
  }
  free(s);
  return 0;
}

int ref_attention(const fa_problem *p,
                  const double *q, fa_layout ql,
                  const double *k, fa_layout kl,
                  const double *v, fa_layout vl,
                  double *o, fa_layout ol, double *lse) {
  return attention(p, q, ql, k, kl, v, vl, o, ol, lse, NULL, NULL);
}

/* The softmax row of query r (at w) over its nvis visible keys, into pr:
** scores scale q.k after p's modification, their maximum subtracted,
** normalised; a key the modification hides weighs 0, and a row it leaves
** no key is all 0. */
static void softmax_row(const fa_problem *p, double scale, int nvis, row_at w, const double *q,
                        const double *k, long long ksn, double *pr) {
  double m = -INFINITY, l = 0.0;
  int c, seen = 0;   /* keys left visible by a modification's mask, as attend_row counts */
  for (c = 0; c < nvis; c++) {
    pr[c] = scale * dot(q, k + c * ksn, p->dim);
    if (p->mod) pr[c] = modified(p, w, c, pr[c]);
    if (pr[c] == -INFINITY && p->mod) continue;
    seen++;   /* a NaN logit too: it makes the row NaN */
    if (pr[c] > m) m = pr[c];
  }
  /* None: zeros. Else as attend_row, NaN logits (a NaN query) making the
  ** row NaN, as the forward pass's. */
  for (c = 0; c < nvis; c++) {
    pr[c] = seen ? exp(pr[c] - m) : 0.0;
    l += pr[c];
  }
  for (c = 0; c < nvis; c++) pr[c] = seen ? pr[c] / l : 0.0;
}

/* The derivative of p's score modification at key c of the row at w,
** whose score before it is x: 1 without one. */
static double dmodified(const fa_problem *p, row_at w, int c, double x) {
  const fa_mod *m = p->mod;
  if (!m || !m->ndscore) return 1.0;
  const double vars[FA_MV_COUNT] = {
    [FA_MV_SCORE] = x, [FA_MV_B] = w.b, [FA_MV_H] = w.h, [FA_MV_Q] = w.r, [FA_MV_K] = c,
    [FA_MV_SEQ_Q] = p->seq_q, [FA_MV_SEQ_K] = p->seq_k, [FA_MV_HEADS] = p->heads};
  return fa_mod_eval(m->dscore, m->ndscore, vars, p->mod_data);
}

/* Zero one (batch, head) of a gradient of seq rows. */
static void zero_rows(double *t, fa_layout l, int seq, int dim) {
  int n, d;
  for (n = 0; n < seq; n++)
    for (d = 0; d < dim; d++) t[n * l.sn + d] = 0.0;
}

/* Where a row's magnitudes go (ref_bwd_io's dq_mag and dk_mag, and dv_sens
** for the row's K/V head), each NULL when not wanted. */
typedef struct row_mag { double *dqr, *dkh, *dvs; } row_mag;

/* What query row i adds to dv_sens (ref_bwd_io's) at each visible key c,
** before the square root: (P_ic (a_ic + L_i) |dout_i|)^2, L_i = max_c a_ic
** + log(nvis) bounding |lse_i|. */
static void add_dv_sens(const fa_problem *p, double scale, int nvis, const ref_bwd_io *io,
                        const double *qr, const double *dor, const double *kh,
                        const double *pr, double *dvs) {
  const int dv = fa_problem_dim_v(p);
  double amax = 0.0, n2 = 0.0;
  for (int c = 0; c < nvis; c++)
    if (pr[c] != 0.0) amax = fmax(amax, scale * dot_abs(qr, kh + c * io->kl.sn, p->dim));
  for (int d = 0; d < dv; d++) n2 += dor[d] * dor[d];
  const double lse_size = amax + log((double)nvis);
  for (int c = 0; c < nvis; c++) {
    if (pr[c] == 0.0) continue;
    const double t = pr[c] * (scale * dot_abs(qr, kh + c * io->kl.sn, p->dim) + lse_size);
    dvs[c] += t * t * n2;
  }
}

/* One query row's share of the gradients of one (batch, head): its dq
** row, and what it adds to dk and dv (and, with mag, to the magnitudes).
** pr holds its softmax row; ds is scratch; both of at least nvis doubles.
** Under a score modification dS goes through its derivative at each key. */
static void backward_row(const fa_problem *p, double scale, int nvis, row_at w, const ref_bwd_io *io,
                         const double *qr, const double *dor, const double *kh,
                         const double *vh, double *dqr, double *dkh, double *dvh,
                         const double *pr, double *ds, const row_mag *mag) {
  const int dv = fa_problem_dim_v(p);
  double sum = 0.0;   /* sum_c P dP: dout . o of the row, without o */
  double sum_abs = 0.0; /* with dq's magnitudes: the size of its terms, and of dout . o's */
  const int with_mag = mag && mag->dqr;
  int c, d;
  for (c = 0; c < nvis; c++) {
    ds[c] = dot(dor, vh + c * io->vl.sn, dv);   /* dP */
    sum += pr[c] * ds[c];
    if (with_mag) sum_abs += pr[c] * dot_abs(dor, vh + c * io->vl.sn, dv);
  }
  for (d = 0; d < p->dim; d++) dqr[d] = 0.0;
  if (with_mag) for (d = 0; d < p->dim; d++) mag->dqr[d] = 0.0;
  if (mag && mag->dvs) add_dv_sens(p, scale, nvis, io, qr, dor, kh, pr, mag->dvs);
  for (c = 0; c < nvis; c++) {
    /* dS's size: P times those of dP's terms and of D's, which a kernel
    ** computes apart (D from O), so that where they cancel the rounding
    ** of each remains. */
    const double *kc = kh + c * io->kl.sn;
    /* a hidden key (P 0) passes nothing back, whatever the derivative there */
    const double f = pr[c] != 0.0 ? dmodified(p, w, c, scale * dot(qr, kc, p->dim)) : 0.0;
    const double m =
        with_mag ? pr[c] * fabs(f) * (dot_abs(dor, vh + c * io->vl.sn, dv) + sum_abs) : 0.0;
    ds[c] = pr[c] != 0.0 ? pr[c] * (ds[c] - sum) * f : 0.0;
    double *dkc = dkh + c * io->dkl.sn, *dvc = dvh + c * io->dvl.sn;
    for (d = 0; d < p->dim; d++) {
      dqr[d] += scale * ds[c] * kc[d];
      dkc[d] += scale * ds[c] * qr[d];
    }
    for (d = 0; d < dv; d++) dvc[d] += pr[c] * dor[d];
    if (with_mag) {
      double *mkc = mag->dkh + c * io->dkl.sn;
      for (d = 0; d < p->dim; d++) {
        mag->dqr[d] += scale * m * fabs(kc[d]);
        mkc[d] += scale * m * fabs(qr[d]);
      }
    }
  }
}

int ref_attention_backward(const fa_problem *p, const ref_bwd_io *io) {
  int b, h, r;

  if (!p || !io || !io->q || !io->k || !io->v || !io->dout || !io->dq || !io->dk || !io->dv ||
      !problem_valid(p))
    return -1;
  const double scale = fa_problem_scale(p);
  const int group = fa_problem_group(p);
  double *pr = malloc((size_t)p->seq_k * sizeof *pr);
  double *ds = malloc((size_t)p->seq_k * sizeof *ds);
  if (!pr || !ds) {
    free(pr), free(ds);
    return -1;
  }
  for (b = 0; b < p->batch; b++) {
    for (h = 0; h < p->heads; h++) {
      /* query head h reads K/V head hk; under GQA hk's gradients sum its group's */
      const int hk = h / group;
      const double *kh = io->k + b * io->kl.sb + hk * io->kl.sh;
      const double *vh = io->v + b * io->vl.sb + hk * io->vl.sh;
      double *dkh = io->dk + b * io->dkl.sb + hk * io->dkl.sh;
      double *dvh = io->dv + b * io->dvl.sb + hk * io->dvl.sh;
      const int with_mag = io->dq_mag && io->dk_mag;
      double *mkh = with_mag ? io->dk_mag + b * io->dkl.sb + hk * io->dkl.sh : NULL;
      double *dvs = io->dv_sens ? io->dv_sens + ((size_t)b * (size_t)p->heads + (size_t)hk) *
                                                    (size_t)p->seq_k : NULL;
      if (h % group == 0) {
        zero_rows(dkh, io->dkl, p->seq_k, p->dim);
        zero_rows(dvh, io->dvl, p->seq_k, fa_problem_dim_v(p));
        if (with_mag) zero_rows(mkh, io->dkl, p->seq_k, p->dim);
        if (dvs) for (int c = 0; c < p->seq_k; c++) dvs[c] = 0.0;
      }
      for (r = 0; r < p->seq_q; r++) {
        const int nvis = visible_keys(p, r);
        const double *qr = io->q + b * io->ql.sb + h * io->ql.sh + r * io->ql.sn;
        const double *dor = io->dout + b * io->dol.sb + h * io->dol.sh + r * io->dol.sn;
        double *dqr = io->dq + b * io->dql.sb + h * io->dql.sh + r * io->dql.sn;
        const row_at w = {b, h, r};
        softmax_row(p, scale, nvis, w, qr, kh, io->kl.sn, pr);
        const row_mag mag = {with_mag ? io->dq_mag + b * io->dql.sb + h * io->dql.sh +
                                            r * io->dql.sn : NULL, mkh, dvs};
        backward_row(p, scale, nvis, w, io, qr, dor, kh, vh, dqr, dkh, dvh, pr, ds,
                     with_mag || dvs ? &mag : NULL);
      }
    }
  }
  if (io->dv_sens)
    for (size_t i = 0; i < (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_k; i++)
      io->dv_sens[i] = sqrt(io->dv_sens[i]);
  free(pr), free(ds);
  return 0;
}

static int ref_fwd(const fa_problem *p, const void *io) {
  const ref_fwd_io *t = io;
  return attention(p, t->q, t->ql, t->k, t->kl, t->v, t->vl, t->o, t->ol, t->lse, t->lse_mag,
                   t->o_sens);
}

static int ref_bwd(const fa_problem *p, const void *io) {
  return ref_attention_backward(p, io);
}

/* Keys [0, len) of sequence b's K/V head hk gathered from the pools into
** kd (len x dim) and vd (len x dim_v). -1 on a page outside the pool. */
static int gather(const fa_problem *p, const ref_decode_io *t, int b, int hk, int len,
                  double *kd, double *vd) {
  const int page = fa_problem_page(p), dv = fa_problem_dim_v(p);
  const int *row = t->table + (long long)b * fa_problem_pages_per_seq(p);
  for (int c = 0; c < len; c++) {
    const int pg = row[c / page];
    if (pg < 0 || pg >= t->num_pages) return -1;
    const double *kr = t->k + pg * t->kl.sb + (c % page) * t->kl.sn + hk * t->kl.sh;
    const double *vr = t->v + pg * t->vl.sb + (c % page) * t->vl.sn + hk * t->vl.sh;
    for (int d = 0; d < p->dim; d++) kd[(long long)c * p->dim + d] = kr[d];
    for (int d = 0; d < dv; d++) vd[(long long)c * dv + d] = vr[d];
  }
  return 0;
}

/* Decoding: each sequence's keys gathered, then its query rows attend as
** the forward pass's would over a problem of that many keys. */
static int ref_decode(const fa_problem *p, const void *io) {
  const ref_decode_io *t = io;
  const int group = fa_problem_group(p), dv = fa_problem_dim_v(p);
  if (!t->q || !t->k || !t->v || !t->table || !t->o || !problem_valid(p) ||
      p->heads % group)
    return -1;
  const double sm_scale = fa_problem_scale(p);
  double *kd = malloc((size_t)p->seq_k * (size_t)p->dim * sizeof *kd);
  double *vd = malloc((size_t)p->seq_k * (size_t)dv * sizeof *vd);
  double *s = malloc((size_t)p->seq_k * sizeof *s);
  int rc = kd && vd && s ? 0 : -1;
  for (int b = 0; rc == 0 && b < p->batch; b++) {
    fa_problem seq = *p;
    seq.seq_k = fa_problem_kv_len(p, b);
    if (seq.seq_k < 0 || seq.seq_k > p->seq_k) rc = -1;
    for (int hk = 0; rc == 0 && hk < p->heads / group; hk++) {
      if (gather(p, t, b, hk, seq.seq_k, kd, vd) != 0) rc = -1;
      for (int h = hk * group; rc == 0 && h < (hk + 1) * group; h++)
        for (int r = 0; r < p->seq_q; r++) {
          const long long at = ((long long)b * p->heads + h) * p->seq_q + r;
          const row_at w = {b, h, r};
          const row_sizes sz = {t->lse_mag ? t->lse_mag + at : NULL,
                                t->o_sens ? t->o_sens + at : NULL};
          const double x = attend_row(&seq, sm_scale, visible_keys(&seq, r), w,
                                      t->q + b * t->ql.sb + h * t->ql.sh + r * t->ql.sn,
                                      kd, p->dim, vd, dv,
                                      t->o + b * t->ol.sb + h * t->ol.sh + r * t->ol.sn, s, sz);
          if (t->lse) t->lse[at] = x;
        }
    }
  }
  free(kd), free(vd), free(s);
  return rc;
}

/* One reference per op, indexed by fa_op. */
static int (*const references[FA_NOPS])(const fa_problem *p, const void *io) = {
  [FA_OP_FWD] = ref_fwd,
  [FA_OP_BWD] = ref_bwd,
  [FA_OP_DECODE] = ref_decode,
};

int ref_op(const fa_problem *p, const void *io, char *err, size_t errlen) {
  if ((unsigned)p->op >= FA_NOPS || !references[p->op]) {
    snprintf(err, errlen, "no float64 reference for op %s: not implemented yet",
             fa_op_name(p->op));
    return FA_EINVAL;
  }
  if (references[p->op](p, io) != 0) {
    snprintf(err, errlen, "the reference cannot compute this problem");
    return FA_EINVAL;
  }
  return 0;
}
