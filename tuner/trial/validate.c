/*
** validate.c
** Kernel output against the float64 reference.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "validate.h"

double val_tolerance(fa_dtype t) {
  static const double tol[] = {[FA_FP32] = 1e-5, [FA_FP64] = 1e-10, [FA_FP16] = 5e-3,
                               [FA_BF16] = 1e-2, [FA_E4M3] = 0x1p-4};
  return tol[t];
}

/* The logsumexp's: fp8's is computed in fp32 from exact inputs, as the
** 16-bit types' is, so bf16's bound holds it. */
static double lse_tolerance(fa_dtype t) { return val_tolerance(t == FA_E4M3 ? FA_BF16 : t); }

/* splitmix64 and Box-Muller: normal numbers, the same for a seed everywhere. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rng_normal(uint64_t *s) {
  double u1 = ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void val_case_free(val_case *c) {
  free(c->q), free(c->k), free(c->v), free(c->o_ref), free(c->lse_ref), free(c->lse_mag), free(c->o_sens);
  free(c->o), free(c->lse), free(c->dout), free(c->dq_ref), free(c->dk_ref), free(c->dv_ref);
  free(c->dq_mag), free(c->dk_mag), free(c->dv_sens);
  free(c->sample_rows), free(c->sample_o);
  free(c->sample_krows), free(c->sample_dq), free(c->sample_dq_mag), free(c->sample_dk);
  free(c->sample_dv), free(c->table), free(c->lens), free(c->descale);
  if (c->mod_data) fa_mod_data_free(c->mod_data);
  free(c->mod_data);
  memset(c, 0, sizeof *c);
}

/* Q, K, V in the dtype from the seed (their exact values in qd, kd, vd when
** those are not NULL); shape, when given (with qd, kd and vd), changes the
** normal values before they are rounded. */
static int make_inputs(val_case *c, const fa_problem *p, unsigned long long seed,
                       val_shape_fn shape, double *qd, double *kd, double *vd) {
  const size_t es = (size_t)fa_dtype_size(p->dtype);
  const size_t bh = (size_t)p->batch * (size_t)p->heads;
  const size_t nq = bh * (size_t)p->seq_q * (size_t)p->dim, nk = bh * (size_t)p->seq_k * (size_t)p->dim;
  const size_t nv = bh * (size_t)p->seq_k * (size_t)fa_problem_dim_v(p);
  c->p = *p, c->seed = seed;
  c->q = malloc(nq * es), c->k = malloc(nk * es), c->v = malloc(nv * es);
  if (!c->q || !c->k || !c->v) return -1;
  if (p->mod && p->mod->ntensors && !p->mod_data) {  /* the tuner's: random, from the seed */
    char why[160];
    if (!(c->mod_data = calloc(1, sizeof *c->mod_data)) ||
        fa_mod_data_random(c->mod_data, p->mod, p->batch, p->heads, p->seq_q, p->seq_k, seed, why,
                           sizeof why) != 0)
      return -1;
    c->p.mod_data = c->mod_data;
  }
  uint64_t s = seed;
  void *const out[3] = {c->q, c->k, c->v};
  double *const exact[3] = {qd, kd, vd};
  const size_t n[3] = {nq, nk, nv};
  if (shape) {
    for (int t = 0; t < 3; t++)
      for (size_t i = 0; i < n[t]; i++) exact[t][i] = rng_normal(&s);
    shape(p, qd, kd, vd, &s);
  }
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < n[t]; i++) {
      double x = fa_elem_put(out[t], p->dtype, i, shape ? exact[t][i] : rng_normal(&s));
      if (exact[t]) exact[t][i] = x;
    }
  return 0;
}

uint64_t val_rng_next(uint64_t *s) { return rng_next(s); }

/* The keys query row r sees: all, or under the (bottom-right) causal mask
** the first r + seq_k - seq_q + 1. */
static long long visible(const fa_problem *p, long long r) {
  if (!p->causal) return p->seq_k;
  const long long n = r + (p->seq_k - p->seq_q) + 1;
  return n < 0 ? 0 : n > p->seq_k ? p->seq_k : n;
}

/* x . y over n elements of two dtype arrays. */
static double dot_elems(const void *x, size_t xo, const void *y, size_t yo, fa_dtype t, size_t n) {
  double acc = 0;
  for (size_t d = 0; d < n; d++) acc += fa_elem_get(x, t, xo + d) * fa_elem_get(y, t, yo + d);
  return acc;
}

/* Query row `row`'s scores in float64, less their maximum, exponentiated
** into s (seq_k doubles), and their sum into *l; returns how many keys it
** sees. */
/* The (batch, head) slot of the K/V rows query row `row` reads: under GQA
** its group's K/V head. */
static size_t kv_slot(const fa_problem *p, size_t row) {
  const size_t bh = row / (size_t)p->seq_q, heads = (size_t)p->heads;
  return bh / heads * heads + bh % heads / (size_t)fa_problem_group(p);
}

static long long exp_row(const val_case *c, size_t row, double *s, double *l) {
  const fa_problem *p = &c->p;
  const size_t D = (size_t)p->dim, ko = kv_slot(p, row) * (size_t)p->seq_k * D;
  const long long nvis = visible(p, (long long)(row % (size_t)p->seq_q));
  const double scale = fa_problem_scale(p);
  double m = -INFINITY;
  for (long long j = 0; j < nvis; j++) {
    s[j] = scale * dot_elems(c->q, row * D, c->k, ko + (size_t)j * D, p->dtype, D);
    if (s[j] > m) m = s[j];
  }
  *l = 0;
  for (long long j = 0; j < nvis; j++) *l += s[j] = exp(s[j] - m);
  return nvis;
}

/* The first element of the V rows (dim_v each) the query row `row` reads. */
static size_t v_head(const fa_problem *p, size_t row) {
  return kv_slot(p, row) * (size_t)p->seq_k * (size_t)fa_problem_dim_v(p);
}

/* One row of attention in float64, from the dtype arrays: o gets dim_v values. */
static void cpu_row(const val_case *c, size_t row, double *o, double *s) {
  const fa_problem *p = &c->p;
  const size_t DV = (size_t)fa_problem_dim_v(p), vo = v_head(p, row);
  double l;
  const long long nvis = exp_row(c, row, s, &l);
  for (size_t d = 0; d < DV; d++) {
    double acc = 0;
    for (long long j = 0; j < nvis; j++)
      acc += s[j] * fa_elem_get(c->v, p->dtype, vo + (size_t)j * DV + d);
    o[d] = nvis ? acc / l : 0;
  }
}

/* nsample rows of `rows` to check on the CPU, into *at: the first and
** last of the whole problem, then rows spread by the seed. */
static int pick(size_t rows, size_t nsample, uint64_t seed, size_t **at) {
  *at = malloc((nsample ? nsample : 1) * sizeof **at);
  if (!*at) return -1;
  for (size_t i = 0; i < nsample; i++)
    (*at)[i] = i == 0 ? 0 : i == 1 ? rows - 1 : (size_t)(rng_next(&seed) % rows);
  return 0;
}

static int pick_rows(val_case *c, size_t nsample) {
  const size_t rows = (size_t)c->p.batch * (size_t)c->p.heads * (size_t)c->p.seq_q;
  if (nsample > rows) nsample = rows;
  c->sample_o = malloc(nsample * (size_t)fa_problem_dim_v(&c->p) * sizeof *c->sample_o);
  if (!c->sample_o || pick(rows, nsample, c->seed ^ 0x5eedULL, &c->sample_rows) != 0) return -1;
  c->nsample = nsample;
  return 0;
}

static int run_oracle(val_case *c, fa_backend *be, const fa_program *oracle,
                      const gen_kernel *ok, char *err, size_t errlen) {
  const fa_problem *p = &c->p;
  const size_t acc = p->dtype == FA_FP64 ? 8 : 4;
  const size_t rows = (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q;
  const size_t n = rows * (size_t)fa_problem_dim_v(p);
  attn_inputs in = {0};
  void *o = NULL, *lse = NULL, *ho = malloc(n * acc), *hl = malloc(rows * acc);
  gen_launch shape;
  gen_launch_shape(ok, 0, p, &shape);
  shape.smem_bytes = (unsigned)(((size_t)p->seq_k + (size_t)ok->threads) * acc);
  int rc = -1;
  if (!ho || !hl) {
    snprintf(err, errlen, "out of memory for the oracle's output");
    goto done;
  }
  if (attn_inputs_upload(be, p, c->q, c->k, c->v, &in, err, errlen) ||
      backend_alloc(be, n * acc, &o, err, errlen) || backend_alloc(be, rows * acc, &lse, err, errlen) ||
      backend_fill(be, o, 0xFF, n * acc, err, errlen) ||
      backend_fill(be, lse, 0xFF, rows * acc, err, errlen))
    goto done;
  fa_params a = attn_params(p, in.q, in.k, in.v, o, lse, NULL);
  a.kv_group = fa_problem_group(p);
  fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .seed = c->seed, .threads = 1, .smem_fill = 0xFF};
  if (backend_launch(be, oracle, &shape, &a, &ro, NULL, err, errlen) ||
      backend_download(be, ho, o, n * acc, err, errlen) ||
      backend_download(be, hl, lse, rows * acc, err, errlen))
    goto done;
  const fa_dtype at = p->dtype == FA_FP64 ? FA_FP64 : FA_FP32;
  for (size_t i = 0; i < n; i++) c->o_ref[i] = fa_elem_get(ho, at, i);
  for (size_t i = 0; i < rows; i++) c->lse_ref[i] = fa_elem_get(hl, at, i);
  rc = 0;
done:
  attn_inputs_free(be, &in);
  backend_free(be, o), backend_free(be, lse);
  free(ho), free(hl);
  return rc;
}

/* Sampled dq row `row` in float64 (ref_attention_backward's formulas):
** its softmax row exactly, from its own scores; dq and the magnitudes of
** its terms, dim values each. s, dp and da hold seq_k doubles. */
static void cpu_dq_row(const val_case *c, size_t row, double *dq, double *mag, double *s,
                       double *dp, double *da) {
  const fa_problem *p = &c->p;
  const fa_dtype t = p->dtype;
  const size_t D = (size_t)p->dim, ko = kv_slot(p, row) * (size_t)p->seq_k * D;
  const size_t DV = (size_t)fa_problem_dim_v(p), vo = v_head(p, row);
  const double scale = fa_problem_scale(p);
  double l, sum = 0, sum_abs = 0;
  const long long nvis = exp_row(c, row, s, &l);
  for (long long j = 0; j < nvis; j++) {
    s[j] /= l, dp[j] = da[j] = 0;
    for (size_t d = 0; d < DV; d++) {
      const double x = fa_elem_get(c->dout, t, row * DV + d) *
                       fa_elem_get(c->v, t, vo + (size_t)j * DV + d);
      dp[j] += x, da[j] += fabs(x);
    }
    sum += s[j] * dp[j], sum_abs += s[j] * da[j];
  }
  for (size_t d = 0; d < D; d++) dq[d] = mag[d] = 0;
  for (long long j = 0; j < nvis; j++) {
    const double ds = s[j] * (dp[j] - sum), mg = s[j] * (da[j] + sum_abs);
    for (size_t d = 0; d < D; d++) {
      const double kd = fa_elem_get(c->k, t, ko + (size_t)j * D + d);
      dq[d] += scale * ds * kd, mag[d] += scale * mg * fabs(kd);
    }
  }
}

/* Sampled key row `krow`'s dk and dv in float64, over every query that sees
** it (under GQA, of every query head of its group), with each query's P
** from the oracle's lse and D = rowsum(dO * O) from the oracle's O (delta:
** one per query row): computing those exactly would take the whole forward
** pass on the CPU. */
static void cpu_dkdv_row(const val_case *c, size_t krow, const double *delta, double *dk,
                         double *dv) {
  const fa_problem *p = &c->p;
  const fa_dtype t = p->dtype;
  const size_t D = (size_t)p->dim, DV = (size_t)fa_problem_dim_v(p), bhk = krow / (size_t)p->seq_k;
  const size_t group = (size_t)fa_problem_group(p);
  const long long col = (long long)(krow % (size_t)p->seq_k);
  const double scale = fa_problem_scale(p);
  for (size_t d = 0; d < D; d++) dk[d] = 0;
  for (size_t d = 0; d < DV; d++) dv[d] = 0;
  /* K/V head hk = bhk % heads of batch b serves query heads hk * group + j */
  const size_t bh0 = bhk + bhk % (size_t)p->heads * (group - 1);
  for (size_t j = 0; j < group; j++) {
    for (long long r = 0; r < p->seq_q; r++) {
      if (col >= visible(p, r)) continue;
      const size_t row = (bh0 + j) * (size_t)p->seq_q + (size_t)r;
      const double pr = exp(scale * dot_elems(c->q, row * D, c->k, krow * D, t, D) - c->lse_ref[row]);
      const double ds = pr * (dot_elems(c->dout, row * DV, c->v, krow * DV, t, DV) - delta[row]);
      for (size_t d = 0; d < DV; d++) dv[d] += pr * fa_elem_get(c->dout, t, row * DV + d);
      for (size_t d = 0; d < D; d++) dk[d] += scale * ds * fa_elem_get(c->q, t, row * D + d);
    }
  }
}

/* The backward pass's oracle case on top of the forward pass's: O and lse
** the oracle's, rounded as a kernel stores them; a random dO; the sampled
** rows of dq, dk and dv in float64. */
static int make_bwd_sampled(val_case *c, size_t nsample) {
  const fa_problem *p = &c->p;
  const size_t D = (size_t)p->dim, rows = (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q;
  const size_t DV = (size_t)fa_problem_dim_v(p);
  /* key rows of the K/V heads (under GQA, the heads below heads / kv_group) */
  const size_t krows = (size_t)p->batch * (size_t)fa_problem_kv_heads(p) * (size_t)p->seq_k;
  const size_t es = (size_t)fa_dtype_size(p->dtype), ls = (size_t)fa_lse_size(p->dtype);
  const fa_dtype lt = p->dtype == FA_FP64 ? FA_FP64 : FA_FP32;
  const size_t nk = nsample < krows ? nsample : krows, nq = c->nsample;
  double *delta = malloc(rows * sizeof *delta), *s = malloc((size_t)p->seq_k * 3 * sizeof *s);
  c->o = malloc(rows * DV * es), c->lse = malloc(rows * ls), c->dout = malloc(rows * DV * es);
  c->sample_dq = malloc(nq * D * sizeof(double)), c->sample_dq_mag = malloc(nq * D * sizeof(double));
  c->sample_dk = malloc(nk * D * sizeof(double)), c->sample_dv = malloc(nk * DV * sizeof(double));
  int rc = -1;
  if (delta && s && c->o && c->lse && c->dout && c->sample_dq && c->sample_dq_mag &&
      c->sample_dk && c->sample_dv && pick(krows, nk, c->seed ^ 0x6b6579ULL, &c->sample_krows) == 0) {
    c->nksample = nk;
    const size_t kvh = (size_t)fa_problem_kv_heads(p), nkey = (size_t)p->seq_k;
    for (size_t i = 0; i < nk; i++) {   /* (batch, K/V head, key) to the gradient's row */
      const size_t at = c->sample_krows[i], bh = at / nkey;
      c->sample_krows[i] = (bh / kvh * (size_t)p->heads + bh % kvh) * nkey + at % nkey;
    }
    uint64_t r = c->seed ^ 0xd0d0d0d0ULL;   /* make_bwd's dO */
    for (size_t i = 0; i < rows * DV; i++) {
      fa_elem_put(c->dout, p->dtype, i, rng_normal(&r));
      fa_elem_put(c->o, p->dtype, i, c->o_ref[i]);
    }
    for (size_t i = 0; i < rows; i++) {
      fa_elem_put(c->lse, lt, i, c->lse_ref[i]);
      delta[i] = 0;
      for (size_t d = 0; d < DV; d++)
        delta[i] += fa_elem_get(c->dout, p->dtype, i * DV + d) * c->o_ref[i * DV + d];
    }
    for (size_t i = 0; i < nq; i++)
      cpu_dq_row(c, c->sample_rows[i], c->sample_dq + i * D, c->sample_dq_mag + i * D, s,
                 s + p->seq_k, s + 2 * (size_t)p->seq_k);
    for (size_t i = 0; i < nk; i++)
      cpu_dkdv_row(c, c->sample_krows[i], delta, c->sample_dk + i * D, c->sample_dv + i * DV);
    rc = 0;
  }
  free(delta), free(s);
  return rc;
}

int val_case_make_oracle(val_case *c, const fa_problem *p, unsigned long long seed,
                         fa_backend *be, const fa_program *oracle, const gen_kernel *ok,
                         size_t nsample, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (p->op != FA_OP_FWD && p->op != FA_OP_BWD) {
    snprintf(err, errlen, "no validation case for op %s: not implemented yet", fa_op_name(p->op));
    return -1;
  }
  const size_t rows = (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q;
  double *s = malloc(((size_t)p->seq_k + 1) * sizeof *s);
  c->o_ref = malloc(rows * (size_t)fa_problem_dim_v(p) * sizeof *c->o_ref);
  c->lse_ref = malloc(rows * sizeof *c->lse_ref);
  int rc = -1;
  if (!s || !c->o_ref || !c->lse_ref || make_inputs(c, p, seed, NULL, NULL, NULL, NULL) != 0 ||
      pick_rows(c, nsample) != 0) {
    snprintf(err, errlen, "out of memory for the validation inputs");
    goto done;
  }
  if (run_oracle(c, be, oracle, ok, err, errlen) != 0) goto done;
  const size_t D = (size_t)fa_problem_dim_v(p);
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < c->nsample; i++) {
    double *ref = c->sample_o + i * D;
    cpu_row(c, c->sample_rows[i], ref, s);
    for (size_t d = 0; d < D; d++) {
      const double x = c->o_ref[c->sample_rows[i] * D + d] - ref[d];
      e2 += x * x, r2 += ref[d] * ref[d];
    }
  }
  c->oracle_err = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
  if (!(c->oracle_err <= val_tolerance(p->dtype == FA_FP64 ? FA_FP64 : FA_FP32))) {
    snprintf(err, errlen, "the GPU oracle disagrees with the float64 CPU reference on %zu "
             "sampled rows: norm-relative error %.3g", c->nsample, c->oracle_err);
    goto done;
  }
  if (p->op == FA_OP_BWD && make_bwd_sampled(c, nsample) != 0) {
    snprintf(err, errlen, "out of memory for the backward pass's validation inputs");
    goto done;
  }
  rc = 0;
done:
  free(s);
  if (rc != 0) val_case_free(c);
  return rc;
}

/* The backward pass's case on top of the forward pass's (o_ref, lse_ref
** made from qd, kd, vd): O and lse rounded as a forward kernel stores them,
** a random dO, and the reference gradients. */
static int make_bwd(val_case *c, const double *qd, const double *kd, const double *vd,
                    char *err, size_t errlen) {
  const fa_problem *p = &c->p;
  const size_t bh = (size_t)p->batch * (size_t)p->heads, rows = bh * (size_t)p->seq_q;
  const size_t nq = rows * (size_t)p->dim, nk = bh * (size_t)p->seq_k * (size_t)p->dim;
  const size_t no = rows * (size_t)fa_problem_dim_v(p);
  const size_t nv = bh * (size_t)p->seq_k * (size_t)fa_problem_dim_v(p);
  const size_t es = (size_t)fa_dtype_size(p->dtype), ls = (size_t)fa_lse_size(p->dtype);
  const fa_dtype lt = p->dtype == FA_FP64 ? FA_FP64 : FA_FP32;
  double *dod = malloc(no * sizeof *dod);
  c->o = malloc(no * es), c->lse = malloc(rows * ls), c->dout = malloc(no * es);
  c->dq_ref = malloc(nq * sizeof(double));
  /* zeros where GQA leaves heads without K/V (the reference writes the rest) */
  c->dk_ref = calloc(nk, sizeof(double)), c->dv_ref = calloc(nv, sizeof(double));
  c->dq_mag = malloc(nq * sizeof(double)), c->dk_mag = calloc(nk, sizeof(double));
  c->dv_sens = calloc(bh * (size_t)p->seq_k, sizeof(double));
  int rc = -1;
  if (!dod || !c->o || !c->lse || !c->dout || !c->dq_ref || !c->dk_ref || !c->dv_ref ||
      !c->dq_mag || !c->dk_mag || !c->dv_sens) {
    snprintf(err, errlen, "out of memory for the validation inputs");
  } else {
    uint64_t s = c->seed ^ 0xd0d0d0d0ULL;
    for (size_t i = 0; i < no; i++) {
      dod[i] = fa_elem_put(c->dout, p->dtype, i, rng_normal(&s));
      fa_elem_put(c->o, p->dtype, i, c->o_ref[i]);
    }
    for (size_t i = 0; i < rows; i++) fa_elem_put(c->lse, lt, i, c->lse_ref[i]);
    const fa_layout lq = fa_layout_contiguous(p, p->seq_q), lk = fa_layout_contiguous(p, p->seq_k);
    const fa_layout lo = fa_layout_contiguous_v(p, p->seq_q), lv = fa_layout_contiguous_v(p, p->seq_k);
    const ref_bwd_io io = {qd, kd, vd, dod, lq, lk, lv, lo, c->dq_ref, c->dk_ref, c->dv_ref,
                           lq, lk, lv, c->dq_mag, c->dk_mag, c->dv_sens};
    rc = ref_op(p, &io, err, errlen);
  }
  free(dod);
  return rc;
}

/* Op decode: the pages of sequence b, and the page of the K/V cache its
** j-th table entry holds. */
typedef struct pool_plan {
  int page, pps, kvh, num_pages, nan_page;
  int *table;          /* batch x pps */
  int *shared;         /* per sequence: its first page is the one before's */
} pool_plan;

/* Sequence b's pages that hold keys. */
static int used_pages(const fa_problem *p, int b, int page) {
  return (fa_problem_kv_len(p, b) + page - 1) / page;
}

/* Which sequences share their first page, the pool's size and its
** shuffled order into pl; the shared rows copied into the dense inputs
** (kernel dtype and exact values) so that the pool holds one copy. */
static int plan_pool(val_case *c, double *kd, double *vd, uint64_t *rng, pool_plan *pl) {
  const fa_problem *p = &c->p;
  const int DV = fa_problem_dim_v(p);
  pl->page = fa_problem_page(p), pl->pps = fa_problem_pages_per_seq(p);
  pl->kvh = fa_problem_kv_heads(p);
  pl->table = malloc((size_t)p->batch * (size_t)pl->pps * sizeof *pl->table);
  pl->shared = calloc((size_t)p->batch, sizeof *pl->shared);
  int *order = NULL;
  if (!pl->table || !pl->shared) return -1;
  int n = 0;
  for (int b = 0; b < p->batch; b++) {
    pl->shared[b] = b % 2 == 1 && fa_problem_kv_len(p, b) >= pl->page &&
                    fa_problem_kv_len(p, b - 1) >= pl->page;
    n += used_pages(p, b, pl->page) - pl->shared[b];
  }
  pl->num_pages = n + 1, pl->nan_page = n;
  if (!(order = malloc((size_t)pl->num_pages * sizeof *order))) return -1;
  for (int i = 0; i < pl->num_pages; i++) order[i] = i;
  for (int i = pl->num_pages - 1; i > 0; i--) {  /* Fisher-Yates */
    const int j = (int)(rng_next(rng) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  int next = 0;
  for (int b = 0; b < p->batch; b++)
    for (int j = 0; j < pl->pps; j++) {
      int *e = &pl->table[(size_t)b * pl->pps + j];
      if (j >= used_pages(p, b, pl->page)) *e = order[pl->nan_page];
      else if (j == 0 && pl->shared[b]) *e = pl->table[(size_t)(b - 1) * pl->pps];
      else *e = order[next++];
    }
  pl->nan_page = order[pl->nan_page];
  free(order);
  /* The shared page's rows: sequence b's first page is b - 1's. */
  for (int b = 1; b < p->batch; b++)
    for (int hk = 0; pl->shared[b] && hk < pl->kvh; hk++)
      for (int t = 0; t < pl->page; t++) {
        const size_t from = (((size_t)(b - 1) * p->heads + hk) * p->seq_k + t);
        const size_t to = (((size_t)b * p->heads + hk) * p->seq_k + t);
        for (int d = 0; d < p->dim; d++)
          kd[to * p->dim + d] = fa_elem_put(c->k, p->dtype, to * p->dim + d, kd[from * p->dim + d]);
        for (int d = 0; d < DV; d++)
          vd[to * DV + d] = fa_elem_put(c->v, p->dtype, to * DV + d, vd[from * DV + d]);
      }
  return 0;
}

/* The dense (batch, heads, seq_k, dim) rows of x (kernel dtype) and xd
** (exact) scattered into pools by the plan, every other element NaN. */
static int scatter(const fa_problem *p, const pool_plan *pl, int dim, const void *x,
                   const double *xd, void **pool, double **poold) {
  const size_t es = (size_t)fa_dtype_size(p->dtype);
  const size_t n = (size_t)pl->num_pages * pl->page * pl->kvh * dim;
  *pool = malloc(n * es), *poold = malloc(n * sizeof **poold);
  if (!*pool || !*poold) return -1;
  for (size_t i = 0; i < n; i++) (*poold)[i] = fa_elem_put(*pool, p->dtype, i, NAN);
  for (int b = 0; b < p->batch; b++)
    for (int c = 0; c < fa_problem_kv_len(p, b); c++) {
      const size_t pg = (size_t)pl->table[(size_t)b * pl->pps + c / pl->page];
      for (int hk = 0; hk < pl->kvh; hk++) {
        const size_t to = ((pg * pl->page + c % pl->page) * pl->kvh + hk) * dim;
        const size_t from = (((size_t)b * p->heads + hk) * p->seq_k + c) * dim;
        for (int d = 0; d < dim; d++) {
          memcpy((char *)*pool + (to + d) * es, (const char *)x + (from + d) * es, es);
          (*poold)[to + d] = xd[from + d];
        }
      }
    }
  return 0;
}

/* Op decode's case from the dense inputs make_inputs drew: the pools, the
** table and the reference. */
static int make_decode(val_case *c, const double *qd, const double *kd, const double *vd,
                       char *err, size_t errlen) {
  const fa_problem *p = &c->p;
  pool_plan pl = {0};
  void *kp = NULL, *vp = NULL;
  double *kpd = NULL, *vpd = NULL;
  uint64_t rng = c->seed ^ 0xdecdec0deULL;
  int rc = -1;
  if (p->heads % fa_problem_group(p)) {
    snprintf(err, errlen, "%d heads do not divide into groups of %d", p->heads,
             fa_problem_group(p));
    return -1;
  }
  for (int b = 0; b < p->batch; b++)
    if (fa_problem_kv_len(p, b) < 0 || fa_problem_kv_len(p, b) > p->seq_k) {
      snprintf(err, errlen, "sequence %d has %d keys, outside 0..%d", b, fa_problem_kv_len(p, b),
               p->seq_k);
      return -1;
    }
  if (plan_pool(c, (double *)kd, (double *)vd, &rng, &pl) != 0 ||
      scatter(p, &pl, p->dim, c->k, kd, &kp, &kpd) != 0 ||
      scatter(p, &pl, fa_problem_dim_v(p), c->v, vd, &vp, &vpd) != 0) {
    snprintf(err, errlen, "out of memory for the validation inputs");
  } else {
    const ref_decode_io io = {.q = qd, .ql = fa_layout_contiguous(p, p->seq_q), .k = kpd,
                              .v = vpd, .kl = attn_pool_layout(p), .vl = attn_pool_layout_v(p),
                              .table = pl.table, .num_pages = pl.num_pages, .o = c->o_ref,
                              .ol = fa_layout_contiguous_v(p, p->seq_q), .lse = c->lse_ref,
                              .lse_mag = c->lse_mag, .o_sens = c->o_sens};
    rc = ref_op(p, &io, err, errlen);
  }
  if (rc == 0) {
    free(c->k), free(c->v);
    c->k = kp, c->v = vp, kp = vp = NULL;
    c->table = pl.table, pl.table = NULL, c->num_pages = pl.num_pages;
  }
  free(kp), free(vp), free(kpd), free(vpd), free(pl.table), free(pl.shared);
  return rc;
}

/* The case's own copy of its problem's lengths. */
static int own_lens(val_case *c, char *err, size_t errlen) {
  c->lens = malloc((size_t)c->p.batch * sizeof *c->lens);
  if (!c->lens) {
    snprintf(err, errlen, "out of memory for the validation inputs");
    return -1;
  }
  memcpy(c->lens, c->p.kv_lens, (size_t)c->p.batch * sizeof *c->lens);
  c->p.kv_lens = c->lens;
  return 0;
}

/* fp8's descales (fa_problem.descale), random from the seed in [1/2, 2):
** the kernel folds Q's and K's into its scale and V's into O's factor, and
** the reference takes the exact values scaled (an e4m3 value times a float
** is exact in double). Per block of rows (descale_rows), each row takes
** its block's: a query head's own, a key's its K/V head's. */
static int make_descales(val_case *c, double *qd, double *kd, double *vd) {
  const fa_problem *p = &c->p;
  size_t cnt[3];
  fa_problem_descales(p, cnt);
  const size_t all = cnt[0] + cnt[1] + cnt[2];
  if (!(c->descale = malloc(all * sizeof *c->descale))) return -1;
  uint64_t s = c->seed ^ 0xde5ca1eULL;
  for (size_t i = 0; i < all; i++)
    c->descale[i] = (float)ldexp(1.0 + (double)(rng_next(&s) >> 11) * 0x1p-53, (int)(rng_next(&s) % 2) - 1);
  c->p.descale = c->descale;
  const float *dq = c->descale, *dk = dq + cnt[0], *dv = dk + cnt[1];
  const size_t kvh = (size_t)fa_problem_kv_heads(p), grp = (size_t)p->heads / kvh;
  const size_t dim = (size_t)p->dim, dimv = (size_t)fa_problem_dim_v(p);
  const size_t r = p->descale_rows > 0 ? (size_t)p->descale_rows : 0;
  const size_t nqb = r ? cnt[0] / ((size_t)p->batch * (size_t)p->heads) : 1;
  const size_t nkb = r ? cnt[1] / ((size_t)p->batch * kvh) : 1;
  /* Query head h takes its K/V head's (or its own blocks); K's and V's
  ** heads below kvh are read. */
  for (size_t b = 0; b < (size_t)p->batch; b++)
    for (size_t h = 0; h < (size_t)p->heads; h++) {
      const size_t bh = b * (size_t)p->heads + h, kv = b * kvh + h;
      const size_t qbase = r ? bh * nqb : b * kvh + h / grp;
      for (size_t i = 0; i < (size_t)p->seq_q; i++)
        for (size_t e = 0; e < dim; e++) qd[(bh * (size_t)p->seq_q + i) * dim + e] *= dq[qbase + (r ? i / r : 0)];
      for (size_t j = 0; h < kvh && j < (size_t)p->seq_k; j++) {
        const size_t at = kv * nkb + (r ? j / r : 0);
        for (size_t e = 0; e < dim; e++) kd[(bh * (size_t)p->seq_k + j) * dim + e] *= dk[at];
        for (size_t e = 0; e < dimv; e++) vd[(bh * (size_t)p->seq_k + j) * dimv + e] *= dv[at];
      }
    }
  return 0;
}

int val_case_make(val_case *c, const fa_problem *p, unsigned long long seed, char *err,
                  size_t errlen) {
  return val_case_make_shaped(c, p, seed, NULL, err, errlen);
}

int val_case_make_shaped(val_case *c, const fa_problem *p, unsigned long long seed,
                         val_shape_fn shape, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  const size_t bh = (size_t)p->batch * (size_t)p->heads;
  const size_t nq = bh * (size_t)p->seq_q * (size_t)p->dim, nk = bh * (size_t)p->seq_k * (size_t)p->dim;
  const size_t DV = (size_t)fa_problem_dim_v(p);
  double *qd = malloc(nq * sizeof *qd), *kd = malloc(nk * sizeof *kd);
  double *vd = malloc(bh * (size_t)p->seq_k * DV * sizeof *vd);
  c->o_ref = malloc(bh * (size_t)p->seq_q * DV * sizeof *c->o_ref);
  c->lse_ref = malloc(bh * (size_t)p->seq_q * sizeof *c->lse_ref);
  c->lse_mag = malloc(bh * (size_t)p->seq_q * sizeof *c->lse_mag);
  c->o_sens = malloc(bh * (size_t)p->seq_q * sizeof *c->o_sens);
  int rc = -1;
  if (!qd || !kd || !vd || !c->o_ref || !c->lse_ref || !c->lse_mag || !c->o_sens ||
      make_inputs(c, p, seed, shape, qd, kd, vd) ||
      (p->dtype == FA_E4M3 && p->op == FA_OP_FWD && !p->descale && make_descales(c, qd, kd, vd))) {
    snprintf(err, errlen, "out of memory for the validation inputs");
  } else if (p->op == FA_OP_DECODE) {
    rc = make_decode(c, qd, kd, vd, err, errlen);
    if (rc == 0 && p->kv_lens) rc = own_lens(c, err, errlen);
  } else {
    const fa_layout lq = fa_layout_contiguous(p, p->seq_q), lk = fa_layout_contiguous(p, p->seq_k);
    const fa_layout lv = fa_layout_contiguous_v(p, p->seq_k), lo = fa_layout_contiguous_v(p, p->seq_q);
    const ref_fwd_io io = {.q = qd, .k = kd, .v = vd, .ql = lq, .kl = lk, .vl = lv,
                           .o = c->o_ref, .ol = lo, .lse = c->lse_ref, .lse_mag = c->lse_mag,
                           .o_sens = c->o_sens};
    fa_problem fwd = c->p;    /* with its captured tensors */
    fwd.op = FA_OP_FWD;
    rc = ref_op(&fwd, &io, err, errlen);
    if (rc == 0 && p->op == FA_OP_BWD) rc = make_bwd(c, qd, kd, vd, err, errlen);
  }
  free(qd), free(kd), free(vd);
  if (rc != 0) val_case_free(c);
  return rc;
}

/* The logsumexp is fp32 for the 16-bit types. */
static double get_lse(const void *a, fa_dtype t, size_t i) {
  return fa_elem_get(a, t == FA_FP64 ? FA_FP64 : FA_FP32, i);
}

void val_output_where(const fa_problem *p, int o, size_t i, char *buf, size_t n) {
  fa_problem shape = *p;
  shape.seq_q = attn_output_seq(p, o);
  val_where(&shape, i, attn_output_dim(p, o), buf, n);
}

void val_where(const fa_problem *p, size_t i, int dim, char *buf, size_t n) {
  const size_t d = i % (size_t)dim, r = i / (size_t)dim % (size_t)p->seq_q;
  const size_t h = i / (size_t)dim / (size_t)p->seq_q % (size_t)p->heads;
  const size_t b = i / (size_t)dim / (size_t)p->seq_q / (size_t)p->heads;
  /* Each index fits an unsigned: batch and heads < 2^16, seq < 2^25. */
  if (dim > 1) snprintf(buf, n, "[%u,%u,%u,%u]", (unsigned)b, (unsigned)h, (unsigned)r, (unsigned)d);
  else snprintf(buf, n, "[%u,%u,%u]", (unsigned)b, (unsigned)h, (unsigned)r);
}

/* Whether element i of a buffer still holds the poison the outputs are
** filled with before each run (every byte 0xFF: a NaN no arithmetic
** gives), so never written. */
static int poisoned(const void *a, fa_dtype t, size_t i) {
  const size_t n = (size_t)fa_dtype_size(t);
  const unsigned char *b = (const unsigned char *)a + i * n;
  for (size_t j = 0; j < n; j++)
    if (b[j] != 0xFF) return 0;
  return 1;
}

/* An output's tolerance: the dtype's, or, where larger, what rounding the
** logits costs: twice the unit roundoff u of the kernel's arithmetic
** (fp32's for the 16-bit types; a logit is rounded at least twice, in its
** dot product's sum and scaled into log2 units, each by about u times the
** size of its terms) times the norm of the rows' sensitivities (o_sens for
** O, dv_sens for dv) relative to the output's. Logits of about -100 (the
** suite's lse-underflow) give fp32 1.4e-5 to 7e-5 at dims 16 to 128, where kernels' errors are a
** sixth to a third of it, past fp32's 1e-5 on some inputs; ordinary
** logits give 2e-6 to 6.5e-6, and fp32's tolerance stands for them. */
static double rounding_tolerance(const val_case *c, const double *sens, size_t rows, double tol,
                                 double ref_norm2) {
  if (!sens || !(ref_norm2 > 0)) return tol;
  double s2 = 0;
  for (size_t i = 0; i < rows; i++)
    if (isfinite(sens[i])) s2 += sens[i] * sens[i];
  const double u = c->p.dtype == FA_FP64 ? 0x1p-53 : 0x1p-24;
  return fmax(tol, 2 * u * sqrt(s2 / ref_norm2));
}

/* O's, by its rows' o_sens. */
static double o_tolerance(const val_case *c, double tol, double ref_norm2) {
  const size_t rows = (size_t)c->p.batch * (size_t)c->p.heads * (size_t)c->p.seq_q;
  return rounding_tolerance(c, c->o_sens, rows, tol, ref_norm2);
}

/* O against its reference: every element finite, or NaN or Inf exactly
** where the reference is (inputs with NaN or Inf, from the suite), and
** written (else the judgment ends here); the norm-relative error over the
** reference's finite elements, within o_tolerance, and, for oracle cases,
** over the rows computed on the CPU. */
static int judge_o(const val_case *c, const void *o, double tol, val_result *r) {
  const fa_problem *p = &c->p;
  const fa_dtype t = fa_out_dtype(p->dtype);
  const size_t DV = (size_t)fa_problem_dim_v(p);
  const size_t n = (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q * DV;
  char at[64];
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = fa_elem_get(o, t, i), ref = c->o_ref[i], d = x - ref;
    if (!isfinite(x) || !isfinite(ref)) {
      const int same = isnan(ref) ? isnan(x) : x == ref;
      if (same && !poisoned(o, t, i)) continue;  /* the reference's NaN or Inf, propagated */
      val_where(p, i, (int)DV, at, sizeof at);
      if (isfinite(ref) || poisoned(o, t, i))
        snprintf(r->msg, sizeof r->msg, "o%s is %s (never written, or overflow)", at,
                 isnan(x) ? "NaN" : "Inf");
      else
        snprintf(r->msg, sizeof r->msg, "o%s is %g where the reference is %g", at, x, ref);
      r->rel_err = r->max_abs_err = INFINITY;
      return 1;
    }
    e2 += d * d, r2 += ref * ref;
    if (fabs(d) > r->max_abs_err) r->max_abs_err = fabs(d);
  }
  r->rel_err = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
  const double tol_o = o_tolerance(c, tol, r2);
  if (c->nsample) {
    const size_t D = DV;
    double s2 = 0, q2 = 0;
    for (size_t i = 0; i < c->nsample; i++)
      for (size_t d = 0; d < D; d++) {
        const double ref = c->sample_o[i * D + d];
        const double x = fa_elem_get(o, t, c->sample_rows[i] * D + d) - ref;
        s2 += x * x, q2 += ref * ref;
      }
    r->sample_err = q2 > 0 ? sqrt(s2 / q2) : sqrt(s2);
  }
  if (r->rel_err > tol_o) {
    snprintf(r->msg, sizeof r->msg, "norm-relative error %.3g exceeds %.2g (max abs %.3g)",
             r->rel_err, tol_o, r->max_abs_err);
  } else if (r->sample_err > tol) {
    snprintf(r->msg, sizeof r->msg, "norm-relative error %.3g on the rows computed in float64 "
             "on the CPU exceeds %.0e", r->sample_err, tol);
  }
  return 0;
}

/* The logsumexp against its reference, each row relative to max(1, |ref|)
** or, larger, the size of the terms of its largest logit (which float32
** rounds to about eps times that: a key 1000 times the others, say); a
** row with no visible key must be -inf exactly, and a row whose reference
** is NaN must be NaN. */
static int judge_lse(const val_case *c, const void *lse, double tol, val_result *r) {
  const fa_problem *p = &c->p;
  const double *mag = c->lse_mag;
  const size_t rows = (size_t)p->batch * (size_t)p->heads * (size_t)p->seq_q;
  char at[64];
  for (size_t i = 0; i < rows; i++) {
    const double x = get_lse(lse, p->dtype, i), ref = c->lse_ref[i];
    double e;
    if (isinf(ref) && ref < 0) e = x == ref ? 0 : INFINITY;
    else if (isnan(ref))
      e = isnan(x) && !poisoned(lse, p->dtype == FA_FP64 ? FA_FP64 : FA_FP32, i) ? 0 : INFINITY;
    else e = isfinite(x) ? fabs(x - ref) / fmax(fmax(1.0, fabs(ref)), mag ? mag[i] : 0) : INFINITY;
    if (!(e <= r->lse_err)) r->lse_err = e;  /* NaN sticks */
    if (!(e <= tol) && !r->msg[0]) {
      val_where(p, i, 1, at, sizeof at);
      snprintf(r->msg, sizeof r->msg, "lse%s is %.17g, the reference %.17g", at, x, ref);
    }
  }
  return 0;
}

/* A gradient against its reference (seq rows of dim values per (batch,
** head): the problem's dim for dq and dk, its dim_v for dv): every element finite, the norm-relative error into
** grad_err[g] and, the worst so far, rel_err. ref and mag (the magnitudes
** of the terms, which the norm takes where given, else ref's) hold every
** row, or with rows the nrows sampled ones (oracle cases), row i of them
** at rows[i] of the gradient. */
typedef struct grad_ref {
  const double *ref, *mag;
  const size_t *rows;
  size_t nrows;
  const double *sens;  /* per row, its sensitivity to the logits' rounding (dv_sens), or NULL */
} grad_ref;

/* Whether row `row` of gradient g (0 dq, 1 dk, 2 dv; seq rows per (batch,
** head)) is an output: under GQA dk and dv are the K/V heads', below
** heads / kv_group, and the rows of the heads above are left alone. */
static int holds_grad(const fa_problem *p, int g, int seq, size_t row) {
  return g == 0 || (int)(row / (size_t)seq % (size_t)p->heads) < fa_problem_kv_heads(p);
}

static int judge_grad(const val_case *c, const void *got, grad_ref g_ref, int seq, int dim,
                      int g, const char *name, double tol, val_result *r) {
  const fa_problem *p = &c->p;
  fa_problem shape = *p;
  shape.seq_q = seq;   /* val_where's rows */
  const size_t D = (size_t)dim, n = (size_t)p->batch * (size_t)p->heads * (size_t)seq * D;
  char at[64];
  for (size_t i = 0; i < n; i++) {
    if (!holds_grad(p, g, seq, i / D)) continue;
    const double x = fa_elem_get(got, p->dtype, i);
    /* the reference's value there where it holds every row; else none may be NaN */
    const double ref = g_ref.rows ? 0.0 : g_ref.ref[i];
    if (isfinite(x) && isfinite(ref)) continue;
    const int same = isnan(ref) ? isnan(x) : x == ref;
    if (same && !poisoned(got, p->dtype, i)) continue;  /* the reference's NaN or Inf, propagated */
    val_where(&shape, i, dim, at, sizeof at);
    if (isfinite(ref) || poisoned(got, p->dtype, i))
      snprintf(r->msg, sizeof r->msg, "%s%s is %s (never written, or overflow)", name, at,
               isnan(x) ? "NaN" : "Inf");
    else
      snprintf(r->msg, sizeof r->msg, "%s%s is %g where the reference is %g", name, at, x, ref);
    r->grad_err[g] = r->rel_err = r->max_abs_err = INFINITY;
    return 1;
  }
  const size_t nrows = g_ref.rows ? g_ref.nrows : n / D;
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < nrows; i++) {
    const size_t row = g_ref.rows ? g_ref.rows[i] : i;
    if (!holds_grad(p, g, seq, row)) continue;
    for (size_t d = 0; d < D; d++) {
      const double ref = g_ref.ref[i * D + d], dx = fa_elem_get(got, p->dtype, row * D + d) - ref;
      const double m = g_ref.mag ? g_ref.mag[i * D + d] : ref;
      if (!isfinite(ref)) continue;   /* propagated exactly, above */
      if (!isfinite(m)) {   /* a finite gradient whose terms' size is not: no measure of it */
        val_where(&shape, row * D + d, dim, at, sizeof at);
        snprintf(r->msg, sizeof r->msg, "%s%s: the reference's terms are not finite", name, at);
        r->grad_err[g] = r->rel_err = r->max_abs_err = INFINITY;
        return 1;
      }
      e2 += dx * dx, r2 += m * m;
      if (fabs(dx) > r->max_abs_err) r->max_abs_err = fabs(dx);
    }
  }
  const double e = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
  r->grad_err[g] = e;
  if (e > r->rel_err) r->rel_err = e;
  if (g_ref.rows && e > r->sample_err) r->sample_err = e;
  tol = rounding_tolerance(c, g_ref.sens, n / D, tol, r2);
  if (e > tol && !r->msg[0])
    snprintf(r->msg, sizeof r->msg, "%s: norm-relative error %.3g%s exceeds %.0e", name, e,
             g_ref.rows ? " on the rows computed in float64 on the CPU" : "", tol);
  return 0;
}

/* Every row's reference, or the oracle case's sampled rows. */
static int judge_dq(const val_case *c, const void *got, double tol, val_result *r) {
  const grad_ref g = c->dq_ref ? (grad_ref){c->dq_ref, c->dq_mag, NULL, 0, NULL}
                               : (grad_ref){c->sample_dq, c->sample_dq_mag, c->sample_rows,
                                            c->nsample, NULL};
  return judge_grad(c, got, g, c->p.seq_q, c->p.dim, 0, "dq", tol, r);
}
static int judge_dk(const val_case *c, const void *got, double tol, val_result *r) {
  const grad_ref g = c->dk_ref ? (grad_ref){c->dk_ref, c->dk_mag, NULL, 0, NULL}
                               : (grad_ref){c->sample_dk, NULL, c->sample_krows, c->nksample, NULL};
  return judge_grad(c, got, g, c->p.seq_k, c->p.dim, 1, "dk", tol, r);
}
static int judge_dv(const val_case *c, const void *got, double tol, val_result *r) {
  const grad_ref g = c->dv_ref ? (grad_ref){c->dv_ref, NULL, NULL, 0, c->dv_sens}
                               : (grad_ref){c->sample_dv, NULL, c->sample_krows, c->nksample, NULL};
  return judge_grad(c, got, g, c->p.seq_k, fa_problem_dim_v(&c->p), 2, "dv", tol, r);
}

/* An output an op declares: its name, its tolerance for a dtype, and its
** judge, which sets its errors in r and, when the output fails, r->msg
** unless an earlier output's message is there; 1 when the output is not
** finite, which ends the judgment. */
typedef struct val_output {
  const char *name;
  double (*tolerance)(fa_dtype t);
  int (*judge)(const val_case *c, const void *out, double tol, val_result *r);
} val_output;

/* The outputs of each op, in the order val_judge takes them. */
static const val_output fwd_outputs[] = {
  {"o", val_tolerance, judge_o},
  {"lse", lse_tolerance, judge_lse},
};
/* The backward pass's gradients take the forward pass's tolerances: FA2
** and FA3 test theirs against the same bounds as their outputs. */
static const val_output bwd_outputs[] = {
  {"dq", val_tolerance, judge_dq},
  {"dk", val_tolerance, judge_dk},
  {"dv", val_tolerance, judge_dv},
};
static const struct { const val_output *out; int n; } op_outputs[FA_NOPS] = {
  [FA_OP_FWD] = {fwd_outputs, sizeof fwd_outputs / sizeof fwd_outputs[0]},
  [FA_OP_BWD] = {bwd_outputs, sizeof bwd_outputs / sizeof bwd_outputs[0]},
  [FA_OP_DECODE] = {fwd_outputs, sizeof fwd_outputs / sizeof fwd_outputs[0]},
};

static int val_noutputs(fa_op op) {
  return (unsigned)op < FA_NOPS ? op_outputs[op].n : 0;
}

void val_judge(const val_case *c, const void *const *outputs, val_result *r) {
  r->status = VAL_OK;
  r->rel_err = r->max_abs_err = r->lse_err = r->sample_err = 0;
  r->grad_err[0] = r->grad_err[1] = r->grad_err[2] = 0;
  r->msg[0] = 0;
  const int n = val_noutputs(c->p.op);
  if (n == 0) {
    snprintf(r->msg, sizeof r->msg, "op %s declares no outputs to check", fa_op_name(c->p.op));
    r->status = VAL_INVALID;
    return;
  }
  for (int i = 0; i < n; i++) {
    const val_output *d = &op_outputs[c->p.op].out[i];
    if (d->judge(c, outputs[i], d->tolerance(c->p.dtype), r)) break;
  }
  if (r->msg[0]) r->status = VAL_INVALID;
}

/* The first differing element of two runs, for the race report. */
static size_t first_diff(const void *a, const void *b, size_t n, size_t es) {
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return i;
  return n;
}

int val_inputs_upload(fa_backend *be, const val_case *c, attn_inputs *in, char *err,
                      size_t errlen) {
  memset(in, 0, sizeof *in);
  if (c->p.op == FA_OP_DECODE)
    return attn_decode_inputs_upload(be, &c->p, c->q, c->k, c->v, c->num_pages, c->table, in,
                                     err, errlen) ? -1 : 0;
  if (attn_inputs_upload(be, &c->p, c->q, c->k, c->v, in, err, errlen) != 0) return -1;
  if (c->p.op == FA_OP_BWD &&
      attn_bwd_inputs_upload(be, &c->p, c->o, c->lse, c->dout, in, err, errlen) != 0) {
    attn_inputs_free(be, in);
    return -1;
  }
  return 0;
}

/* The output and element of the first difference between two runs'
** outputs, for the race report; 0 when they agree. */
static int runs_differ(const val_case *c, unsigned char *const *a, unsigned char *const *b,
                       char *what, size_t n) {
  const fa_problem *p = &c->p;
  size_t bytes[ATTN_MAX_OUTPUTS];
  const int nout = attn_outputs(p, bytes);
  for (int o = 0; o < nout; o++) {
    const size_t es = attn_output_elem_bytes(p, o), i = first_diff(a[o], b[o], bytes[o] / es, es);
    if (i == bytes[o] / es) continue;
    char at[64];
    val_output_where(p, o, i, at, sizeof at);
    snprintf(what, n, "%s%s", attn_output_name(p, o), at);
    return 1;
  }
  return 0;
}

int val_check(fa_backend *be, const val_case *c, const attn_inputs *in,
              const fa_program *prog, const gen_kernel *k, const val_opts *o,
              val_result *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  const fa_problem *p = &c->p;
  size_t bytes[ATTN_MAX_OUTPUTS];
  const int nout = attn_outputs(p, bytes);
  const int runs = o->nschedules == 2 ? 2 : 1;
  unsigned char *out[2][ATTN_MAX_OUTPUTS] = {{NULL}};
  int rc = 0;
  for (int s = 0; s < runs; s++)
    for (int i = 0; i < nout; i++)
      if (!(out[s][i] = malloc(bytes[i]))) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
        goto done;
      }
  for (int s = 0; s < runs; s++) {
    /* Shared memory starts as NaN (all ones) in the first run and as zeros
    ** in the second: a read before the write then changes the bits too. */
    /* Atomics across CTAs add in the order the CTAs run: one OS thread
    ** keeps that order, so the schedules still expose a race inside a CTA. */
    fa_run_opts ro = {.schedule = o->schedule[s], .seed = o->seed,
                      .threads = k->deterministic ? o->threads : 1,
                      .smem_fill = s ? 0x00 : 0xFF};
    char why[400];
    void *host[ATTN_MAX_OUTPUTS];
    for (int i = 0; i < nout; i++) host[i] = out[s][i];
    if (attn_run_op(be, prog, k, p, in, &ro, host, s ? NULL : &r->counters,
                    s ? NULL : &r->run_ms, why, sizeof why) != 0) {
      snprintf(r->msg, sizeof r->msg, "%s", why);
      r->status = VAL_CRASHED;
      r->rel_err = r->max_abs_err = r->lse_err = INFINITY;
      goto done;
    }
  }
  const void *got[ATTN_MAX_OUTPUTS] = {NULL};
  for (int i = 0; i < nout; i++) got[i] = out[0][i];
  val_judge(c, got, r);
  size_t at = 0;
  for (int i = 0; o->keep && i < nout; at += bytes[i], i++)
    memcpy((char *)o->keep + at, out[0][i], bytes[i]);
  char what[96];
  /* A race outranks an error figure: it says what to fix. */
  if (runs == 2 && runs_differ(c, out[0], out[1], what, sizeof what)) {
    snprintf(r->msg, sizeof r->msg, "%s: %s differs between the %s and %s schedules "
             "(shared memory starting as NaN, then zeros): a race, or a read of shared "
             "memory before it is written (a barrier missing?)", k->entry, what,
             backend_schedule_name(o->schedule[0]), backend_schedule_name(o->schedule[1]));
    r->status = VAL_INVALID;
  }
done:
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < ATTN_MAX_OUTPUTS; i++) free(out[s][i]);
  return rc;
}
