/*
** suite.c
** The adversarial cases of suite.h. Lengths are chosen against the tiles
** kernels use (multiples of 16 to 192); values against the dtype's range
** and fp32's exponent.
*/
#include <math.h>
#include <stdio.h>

#include "suite.h"

/* The largest finite value of each dtype. */
static double dtype_max(fa_dtype t) {
  switch (t) {
    case FA_FP16: return 65504.0;
    case FA_BF16: return 3.3895313892515355e38;
    case FA_FP32: return 3.4028234663852886e38;
    default: return 1.7976931348623157e308;
  }
}

static size_t rows(const fa_problem *p, int seq) {
  return (size_t)p->batch * (size_t)p->heads * (size_t)seq;
}

/* One key per head (the middle one) 1000 times the others: its logit
** dwarfs every other, positive or negative, so the running maximum jumps
** or that key vanishes. */
static void outlier(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)q, (void)v, (void)rng;
  const size_t D = (size_t)p->dim;
  for (size_t bh = 0; bh < rows(p, 1); bh++)
    for (size_t d = 0; d < D; d++) k[(bh * (size_t)p->seq_k + (size_t)p->seq_k / 2) * D + d] *= 1e3;
}

/* Every logit near -100 (natural units), so that the logsumexp is below
** -88.7, where exp underflows in fp32: Q a constant c, K -c plus noise,
** with c^2 sqrt(dim) = 100 at the default scale. */
static void lse_underflow(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)v, (void)rng;
  const double c = sqrt(100.0 / sqrt((double)p->dim));
  const size_t nq = rows(p, p->seq_q) * (size_t)p->dim, nk = rows(p, p->seq_k) * (size_t)p->dim;
  for (size_t i = 0; i < nq; i++) q[i] = c;
  for (size_t i = 0; i < nk; i++) k[i] = -c + 0.5 * k[i];
}

/* V positive, up to an eighth of the dtype's largest value: O, a
** weighted mean of V, stays in range, but a sum of unnormalized terms
** (deferred normalization's accumulator, in fp32 for the 16-bit types)
** may not. */
static void huge_values(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)q, (void)k, (void)rng;
  const double top = dtype_max(p->dtype) / 8;
  const size_t nv = rows(p, p->seq_k) * (size_t)fa_problem_dim_v(p);
  for (size_t i = 0; i < nv; i++) v[i] = top * fmin(1.0, 0.5 + fabs(v[i]) / 8);
}

/* Every key of a head the same: every logit of a row equal, P uniform. */
static void same_keys(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)q, (void)v, (void)rng;
  const size_t D = (size_t)p->dim, N = (size_t)p->seq_k;
  for (size_t bh = 0; bh < rows(p, 1); bh++)
    for (size_t j = 1; j < N; j++)
      for (size_t d = 0; d < D; d++) k[(bh * N + j) * D + d] = k[bh * N * D + d];
}

/* Every third query row and every fifth key row all zeros: logits of 0. */
static void zero_rows(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)v, (void)rng;
  const size_t D = (size_t)p->dim;
  for (size_t r = 0; r < rows(p, p->seq_q); r += 3)
    for (size_t d = 0; d < D; d++) q[r * D + d] = 0;
  for (size_t r = 0; r < rows(p, p->seq_k); r += 5)
    for (size_t d = 0; d < D; d++) k[r * D + d] = 0;
}

/* NaN and Inf in the inputs: query row 7 of each head (decoding's
** few rows: the last) all NaN, and one
** component of key row seq_k / 3 +Inf, so its logit is +Inf (the row NaN,
** from Inf - Inf), -Inf (the key ignored) or NaN (a zero factor) by the
** sign of the query's component: O and lse NaN where the float64
** reference's are, whatever the tiles, and right elsewhere. */
static void nan_inf(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng) {
  (void)v, (void)rng;
  const size_t D = (size_t)p->dim;
  const size_t r = p->seq_q > 7 ? 7 : (size_t)p->seq_q - 1;  /* decoding's few: the last */
  for (size_t bh = 0; bh < rows(p, 1); bh++) {
    for (size_t d = 0; d < D; d++) q[(bh * (size_t)p->seq_q + r) * D + d] = NAN;
    k[(bh * (size_t)p->seq_k + (size_t)p->seq_k / 3) * D + D / 2] = INFINITY;
  }
}

typedef struct suite_case {
  const char *name, *what;
  int seq_q, seq_k;  /* 0: 130 */
  int causal_only;
  val_shape_fn shape;
  int ragged;        /* op decode alone: sequences of 130, 67, 0 and 1 keys */
} suite_case;

static const suite_case cases[] = {
  {"outlier", "one key per head 1000 times the others, its logit dwarfing every other", 0, 0, 0,
   outlier, 0},
  {"no-key", "the causal mask with more queries than keys (70 and 33): 37 rows see none, O = 0, "
   "lse = -inf", 70, 33, 1, NULL, 0},
  {"lse-underflow", "every logit near -100: lse below -88.7, where exp underflows in fp32", 0, 0,
   0, lse_underflow, 0},
  {"seq-192", "192 queries and keys, 64 past a multiple of 128 (PyTorch #196678's NaN)", 192, 192,
   0, NULL, 0},
  {"one-query", "a single query over 150 keys", 1, 150, 0, NULL, 0},
  {"huge-values", "V at an eighth of the dtype's largest value", 0, 0, 0, huge_values, 0},
  {"same-keys", "every key of a head the same: a uniform softmax", 0, 0, 0, same_keys, 0},
  {"zero-rows", "every third query and fifth key all zeros", 0, 0, 0, zero_rows, 0},
  {"nan-inf", "a query row of NaN and a key with one +Inf: O and lse NaN exactly where the "
   "float64 reference's are", 0, 0, 0, nan_inf, 0},
  {"ragged", "decoding: sequences of 130, 67, 0 and 1 keys in one batch, over pages out of "
   "order, the first two sharing their first page (of up to 67 tokens)", 1, 0, 0, NULL, 1},
};

/* The ragged case's lengths (of 130 keys at most). */
static const int ragged_lens[] = {130, 67, 0, 1};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

int val_suite_size(void) { return NCASES; }
const char *val_suite_name(int i) { return i >= 0 && i < NCASES ? cases[i].name : NULL; }
const char *val_suite_what(int i) { return i >= 0 && i < NCASES ? cases[i].what : NULL; }

int val_suite_problem(int i, const fa_problem *p, fa_problem *out) {
  if (i < 0 || i >= NCASES || (cases[i].causal_only && !p->causal) ||
      (cases[i].ragged && p->op != FA_OP_DECODE))
    return 0;
  *out = *p;
  out->batch = 1, out->heads = 2, out->kv_group = 0;
  out->seq_q = cases[i].seq_q ? cases[i].seq_q : 130;
  out->seq_k = cases[i].seq_k ? cases[i].seq_k : 130;
  if (p->op == FA_OP_DECODE) {  /* two K/V heads of the problem's group, three sequences */
    /* a few new tokens: the causal case's two more than its keys */
    out->seq_q = cases[i].seq_q && cases[i].seq_q < 4 ? cases[i].seq_q : 4;
    if (cases[i].causal_only) out->seq_k = 2;
    out->kv_group = fa_problem_group(p);
    out->heads = 2 * out->kv_group, out->batch = 3, out->kv_lens = NULL;
    if (cases[i].ragged) out->batch = 4, out->kv_lens = ragged_lens;
  } else if (p->op == FA_OP_BWD && fa_problem_group(p) > 1) {  /* two K/V heads of the group */
    out->kv_group = fa_problem_group(p), out->heads = 2 * out->kv_group;
  }
  return 1;
}

int val_suite_make(val_case *c, int i, const fa_problem *p, unsigned long long seed, char *err,
                   size_t errlen) {
  fa_problem sp;
  if (!val_suite_problem(i, p, &sp)) return 1;
  /* A case's inputs differ from the main case's, and from each other's. */
  return val_case_make_shaped(c, &sp, seed ^ (0x5DEECE66Dull * (unsigned long long)(i + 1)),
                              cases[i].shape, err, errlen);
}
