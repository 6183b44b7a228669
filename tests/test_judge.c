/*
** test_judge.c
** The validation verdict (val_judge) on outputs made by hand, no kernel:
** for each dtype's tolerance,
**  - a NaN or an Inf anywhere in O or in the logsumexp is invalid, and so is
**    an element left as the NaN poison (never written); where the reference
**    is NaN (inputs with NaN or Inf), only a NaN passes, never the poison;
**  - the reference perturbed to 2x the tolerance (norm-relative) is invalid,
**    to 0.5x valid; a logsumexp off by 2x its tolerance invalid, 0.5x valid;
**  - the same for the rows an oracle case checks in float64 on the CPU;
**  - the backward pass's gradients: NaN only where the reference's is;
**  - O's tolerance widened by what rounding the logits costs, where the
**    logits are large (the suite's lse-underflow), and only there; dv's
**    the same way (the outlier case).
** Each perturbation is measured here too, so a verdict is only asked of an
** output whose error is known to be on the intended side of the bound.
*/
#include <math.h>
#include <string.h>

#include "check.h"
#include "suite.h"
#include "validate.h"

static const fa_dtype dtypes[] = {FA_FP32, FA_FP64, FA_FP16, FA_BF16};

static size_t nrows(const val_case *c) {
  return (size_t)c->p.batch * (size_t)c->p.heads * (size_t)c->p.seq_q;
}

static size_t nelems(const val_case *c) { return nrows(c) * (size_t)c->p.dim; }

static fa_dtype lse_type(fa_dtype t) { return t == FA_FP64 ? FA_FP64 : FA_FP32; }

/* +1, -1, +1, ...: an error of both signs, not a mere scale. */
static double sign(size_t i) { return i % 2 ? -1.0 : 1.0; }

/* The case's output in its dtype, each element off by e relatively. */
static void *make_o_rel(const val_case *c, double e) {
  const fa_dtype t = c->p.dtype;
  void *o = malloc(nelems(c) * (size_t)fa_dtype_size(t));
  if (!o) return NULL;
  for (size_t i = 0; i < nelems(c); i++) fa_elem_put(o, t, i, c->o_ref[i] * (1 + sign(i) * e));
  return o;
}

/* The same, off by f * tol. */
static void *make_o(const val_case *c, double f) {
  return make_o_rel(c, f * val_tolerance(c->p.dtype));
}

/* The case's logsumexp, row `row` off by f * tol * max(1, |ref|). */
static void *make_lse(const val_case *c, size_t row, double f) {
  const fa_dtype lt = lse_type(c->p.dtype);
  const double tol = val_tolerance(c->p.dtype);
  void *lse = malloc(nrows(c) * (size_t)fa_lse_size(c->p.dtype));
  if (!lse) return NULL;
  for (size_t i = 0; i < nrows(c); i++) {
    const double ref = c->lse_ref[i];
    fa_elem_put(lse, lt, i, i == row ? ref + f * tol * fmax(1.0, fabs(ref)) : ref);
  }
  return lse;
}

/* ||o - ref||_2 / ||ref||_2 over the n elements at o[at[k] * dim ...], or
** over all of o when at is NULL. */
static double norm_rel(const void *o, fa_dtype t, const double *ref, size_t dim,
                       const size_t *at, size_t nrow) {
  double e2 = 0, r2 = 0;
  for (size_t k = 0; k < nrow; k++)
    for (size_t d = 0; d < dim; d++) {
      const size_t i = (at ? at[k] : k) * dim + d;
      const double x = fa_elem_get(o, t, i) - ref[k * dim + d];
      e2 += x * x, r2 += ref[k * dim + d] * ref[k * dim + d];
    }
  return sqrt(e2 / r2);
}

static val_status judge(const val_case *c, const void *o, const void *lse, val_result *r) {
  memset(r, 0, sizeof *r);
  const void *const outputs[2] = {o, lse};
  val_judge(c, outputs, r);
  return r->status;
}

static int make_case(val_case *c, fa_dtype t) {
  const fa_problem p = {.batch = 2, .heads = 2, .seq_q = 24, .seq_k = 40, .dim = 16,
                        .dtype = t, .causal = 1};
  char err[200] = "";
  const int rc = val_case_make(c, &p, 42, err, sizeof err);
  CHECK(rc == 0, "%s: %s", fa_dtype_name(t), err);
  return rc;
}

/* The reference itself, rounded to the dtype, passes: the bar the other
** verdicts are read against. */
static void test_exact(const val_case *c, const void *o, const void *lse) {
  val_result r;
  CHECK(judge(c, o, lse, &r) == VAL_OK, "%s: the reference is judged invalid: %s",
        fa_dtype_name(c->p.dtype), r.msg);
}

/* Element i of a (dtype t) array set to x, or to the poison when poison. */
static void put(void *a, fa_dtype t, size_t es, size_t i, double x, int poison) {
  if (poison) memset((char *)a + i * es, 0xFF, es);
  else fa_elem_put(a, t, i, x);
}

/* A NaN, an Inf, a -Inf or the poison at the first, a middle or the last
** element of O, then of the logsumexp: invalid every time. */
static void test_nonfinite(const val_case *c) {
  const fa_dtype t = c->p.dtype, lt = lse_type(t);
  const size_t n[2] = {nelems(c), nrows(c)};
  const size_t es[2] = {(size_t)fa_dtype_size(t), (size_t)fa_lse_size(t)};
  const double bad[4] = {NAN, INFINITY, -INFINITY, 0};
  const char *name[4] = {"NaN", "Inf", "-Inf", "the poison"};
  for (int which = 0; which < 2; which++)
    for (int v = 0; v < 4; v++)
      for (int at = 0; at < 3; at++) {
        const size_t i = at == 0 ? 0 : at == 1 ? n[which] / 2 : n[which] - 1;
        void *oo = make_o(c, 0), *ll = make_lse(c, 0, 0);
        if (!oo || !ll) {
          CHECK(0, "out of memory");
          free(oo), free(ll);
          return;
        }
        void *a = which ? ll : oo;
        put(a, which ? lt : t, es[which], i, bad[v], v == 3);
        CHECK(!isfinite(fa_elem_get(a, which ? lt : t, i)), "%s: %s did not stay non-finite",
              fa_dtype_name(t), name[v]);
        val_result r;
        CHECK(judge(c, oo, ll, &r) == VAL_INVALID, "%s: %s at %s element %zu passes",
              fa_dtype_name(t), name[v], which ? "lse" : "o", i);
        CHECK(r.msg[0], "%s: an invalid verdict with no message", fa_dtype_name(t));
        free(oo), free(ll);
      }
}

/* A reference with NaN (inputs with NaN or Inf, the suite's nan-inf):
** O and the logsumexp NaN there pass; finite or the poison there does not. */
static void test_reference_nan(val_case *c) {
  const fa_dtype t = c->p.dtype, lt = lse_type(t);
  const size_t i = nelems(c) / 3, row = i / (size_t)c->p.dim;
  const double keep_o = c->o_ref[i], keep_l = c->lse_ref[row];
  c->o_ref[i] = NAN, c->lse_ref[row] = NAN;
  for (int v = 0; v < 3; v++)       /* NaN, a finite value, the poison */
    for (int which = 0; which < 2; which++) {
      void *oo = make_o(c, 0), *ll = make_lse(c, 0, 0);
      if (!oo || !ll) {
        CHECK(0, "out of memory");
        free(oo), free(ll);
        break;
      }
      fa_elem_put(oo, t, i, NAN), fa_elem_put(ll, lt, row, NAN);
      void *a = which ? ll : oo;
      put(a, which ? lt : t, which ? (size_t)fa_lse_size(t) : (size_t)fa_dtype_size(t),
          which ? row : i, 1.0, v == 2);
      if (v == 0) fa_elem_put(a, which ? lt : t, which ? row : i, NAN);
      val_result r;
      const val_status st = judge(c, oo, ll, &r);
      CHECK(st == (v == 0 ? VAL_OK : VAL_INVALID), "%s: %s in %s where the reference is NaN: %s",
            fa_dtype_name(t), v == 0 ? "NaN" : v == 1 ? "1.0" : "the poison",
            which ? "lse" : "o", r.msg[0] ? r.msg : "passes");
      free(oo), free(ll);
    }
  c->o_ref[i] = keep_o, c->lse_ref[row] = keep_l;
}

/* O off by f * tol: the measured error near f * tol, and the verdict. */
static void o_off(const val_case *c, const void *lse, double f, val_status want) {
  const fa_dtype t = c->p.dtype;
  const double tol = val_tolerance(t);
  void *o = make_o(c, f);
  if (!o) {
    CHECK(0, "out of memory");
    return;
  }
  const double e = norm_rel(o, t, c->o_ref, (size_t)c->p.dim, NULL, nrows(c)) / tol;
  CHECK(fabs(e - f) < 0.3 * f, "%s: O meant %gx the tolerance off is %.3gx", fa_dtype_name(t), f, e);
  val_result r;
  CHECK(judge(c, o, lse, &r) == want, "%s: O %.3gx the tolerance off is %s (%s)",
        fa_dtype_name(t), e, r.status == VAL_OK ? "valid" : "invalid", r.msg);
  free(o);
}

/* One row's logsumexp off by f * tol, in O's place otherwise. */
static void lse_off(const val_case *c, const void *o, double f, val_status want) {
  const fa_dtype t = c->p.dtype;
  const size_t row = nrows(c) / 2 + 1;
  void *lse = make_lse(c, row, f);
  if (!lse) {
    CHECK(0, "out of memory");
    return;
  }
  const double ref = c->lse_ref[row];
  const double e = fabs(fa_elem_get(lse, lse_type(t), row) - ref) / fmax(1.0, fabs(ref)) /
                   val_tolerance(t);
  CHECK(fabs(e - f) < 0.1 * f, "%s: lse meant %gx the tolerance off is %.3gx", fa_dtype_name(t), f, e);
  val_result r;
  CHECK(judge(c, o, lse, &r) == want, "%s: lse %.3gx the tolerance off is %s (%s)",
        fa_dtype_name(t), e, r.status == VAL_OK ? "valid" : "invalid", r.msg);
  free(lse);
}

static void test_tolerance(const val_case *c, const void *o, const void *lse) {
  o_off(c, lse, 2.0, VAL_INVALID);
  o_off(c, lse, 0.5, VAL_OK);
  lse_off(c, o, 2.0, VAL_INVALID);
  lse_off(c, o, 0.5, VAL_OK);
}

/* An oracle case: O equals the oracle's reference, but the rows computed in
** float64 on the CPU are f * tol away from it. */
static void sample_off(val_case *c, const void *o, const void *lse, double f, val_status want) {
  const fa_dtype t = c->p.dtype;
  const size_t D = (size_t)c->p.dim, rows[3] = {0, nrows(c) - 1, nrows(c) / 3};
  const double tol = val_tolerance(t);
  c->nsample = 3;
  c->sample_rows = malloc(sizeof rows), c->sample_o = malloc(3 * D * sizeof *c->sample_o);
  if (!c->sample_rows || !c->sample_o) {
    CHECK(0, "out of memory");
    return;
  }
  memcpy(c->sample_rows, rows, sizeof rows);
  for (size_t k = 0; k < 3; k++)
    for (size_t d = 0; d < D; d++)
      c->sample_o[k * D + d] = c->o_ref[rows[k] * D + d] * (1 + sign(d) * f * tol);
  const double e = norm_rel(o, t, c->sample_o, D, c->sample_rows, 3) / tol;
  CHECK(fabs(e - f) < 0.3 * f, "%s: sampled rows meant %gx the tolerance off are %.3gx",
        fa_dtype_name(t), f, e);
  val_result r;
  CHECK(judge(c, o, lse, &r) == want, "%s: sampled rows %.3gx the tolerance off: %s (%s)",
        fa_dtype_name(t), e, r.status == VAL_OK ? "valid" : "invalid", r.msg);
  CHECK(fabs(r.sample_err / tol - e) < 1e-6 * e, "%s: sample_err %.6g, measured %.6g",
        fa_dtype_name(t), r.sample_err / tol, e);
  free(c->sample_rows), free(c->sample_o);
  c->sample_rows = NULL, c->sample_o = NULL, c->nsample = 0;
}

static void test_sample(val_case *c, const void *o, const void *lse) {
  sample_off(c, o, lse, 2.0, VAL_INVALID);
  sample_off(c, o, lse, 0.5, VAL_OK);
}

/* What rounding the logits costs O, 2 u ||o_sens|| / ||O|| (validate.c's
** o_tolerance), u the unit roundoff of the kernel's arithmetic. */
static double logit_bound(const val_case *c) {
  double s2 = 0, r2 = 0;
  for (size_t i = 0; i < nrows(c); i++) s2 += c->o_sens[i] * c->o_sens[i];
  for (size_t i = 0; i < nelems(c); i++) r2 += c->o_ref[i] * c->o_ref[i];
  return 2 * (c->p.dtype == FA_FP64 ? 0x1p-53 : 0x1p-24) * sqrt(s2 / r2);
}

/* O's tolerance widens with the size of the logits' terms, and only
** there: the suite's lse-underflow logits (about -100) cost fp32's O more
** than fp32's tolerance, however a kernel computes it, so O is judged
** against that cost (0.5x it valid, 2x invalid); ordinary logits (the
** random case) stay well under the tolerance, as do fp64's and the 16-bit
** types' (whose tolerances are larger). */
static void test_logit_size(fa_dtype t) {
  int under = -1;
  for (int i = 0; i < val_suite_size(); i++)
    if (!strcmp(val_suite_name(i), "lse-underflow")) under = i;
  CHECK(under >= 0, "the suite has no lse-underflow case");
  const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 130, .seq_k = 130, .dim = 64,
                        .dtype = t};
  val_case c, plain;
  char err[200] = "";
  if (under < 0 || val_suite_make(&c, under, &p, 5, err, sizeof err) != 0) {
    CHECK(0, "%s: lse-underflow: %s", fa_dtype_name(t), err);
    return;
  }
  if (make_case(&plain, t) != 0) {
    val_case_free(&c);
    return;
  }
  const double tol = val_tolerance(t), w = logit_bound(&c), w_plain = logit_bound(&plain);
  CHECK(w_plain < 0.5 * tol, "%s: ordinary logits cost O %.3g, near the tolerance %g",
        fa_dtype_name(t), w_plain, tol);
  CHECK(c.lse_ref[0] < -88.7, "%s: lse-underflow's lse %g", fa_dtype_name(t), c.lse_ref[0]);
  void *lse = malloc(nrows(&c) * (size_t)fa_lse_size(t));
  CHECK(lse != NULL, "out of memory");
  for (size_t i = 0; lse && i < nrows(&c); i++) fa_elem_put(lse, lse_type(t), i, c.lse_ref[i]);
  if (t == FA_FP32) {
    CHECK(w > tol && w < 1e-3, "fp32: logits near -100 cost O %.3g (tolerance %g)", w, tol);
    for (int k = 0; lse && k < 2; k++) {
      const double f = k ? 2.0 : 0.5;
      void *o = make_o_rel(&c, f * w);
      val_result r;
      CHECK(o && judge(&c, o, lse, &r) == (k ? VAL_INVALID : VAL_OK),
            "fp32 lse-underflow: O %gx the logits' cost off is %s (%s)", f,
            k ? "valid" : "invalid", o ? r.msg : "out of memory");
      free(o);
    }
  } else {
    CHECK(w < 0.2 * tol, "%s: logits near -100 cost O %.3g, near the tolerance %g",
          fa_dtype_name(t), w, tol);
  }
  free(lse);
  val_case_free(&c), val_case_free(&plain);
}

/* Gradients (op bwd) the same way: the reference's own, rounded, pass; a
** NaN where the reference is finite, or the poison anywhere, does not; a
** NaN where the reference's gradient is NaN (a NaN input's row) passes,
** and a finite value there does not. */
static void test_grad_nan(fa_dtype t) {
  const fa_problem p = {.batch = 1, .heads = 2, .seq_q = 20, .seq_k = 28, .dim = 16,
                        .dtype = t, .op = FA_OP_BWD};
  val_case c;
  char err[200] = "";
  if (val_case_make(&c, &p, 7, err, sizeof err) != 0) {
    CHECK(0, "%s bwd: %s", fa_dtype_name(t), err);
    return;
  }
  const size_t nq = (size_t)2 * 20 * 16, nk = (size_t)2 * 28 * 16, es = (size_t)fa_dtype_size(t);
  double *const refs[3] = {c.dq_ref, c.dk_ref, c.dv_ref};
  const size_t n[3] = {nq, nk, nk};
  void *g[3];
  for (int i = 0; i < 3; i++) {
    g[i] = malloc(n[i] * es);
    if (!g[i]) {
      CHECK(0, "out of memory");
      return;
    }
  }
  const size_t at = nq / 3;
  const double keep = c.dq_ref[at];
  for (int v = 0; v < 5; v++) {   /* as is; NaN; the poison; ref NaN: NaN; ref NaN: 1.0 */
    c.dq_ref[at] = v >= 3 ? NAN : keep;
    for (int i = 0; i < 3; i++)
      for (size_t j = 0; j < n[i]; j++) fa_elem_put(g[i], t, j, isnan(refs[i][j]) ? 0 : refs[i][j]);
    if (v == 1 || v == 3) fa_elem_put(g[0], t, at, NAN);
    if (v == 2) memset((char *)g[0] + at * es, 0xFF, es);
    if (v == 4) fa_elem_put(g[0], t, at, 1.0);
    val_result r;
    memset(&r, 0, sizeof r);
    const void *const outputs[3] = {g[0], g[1], g[2]};
    val_judge(&c, outputs, &r);
    const int want = v == 0 || v == 3 ? VAL_OK : VAL_INVALID;
    CHECK((int)r.status == want, "%s bwd, case %d: %s", fa_dtype_name(t), v,
          r.msg[0] ? r.msg : "passes");
  }
  c.dq_ref[at] = keep;
  for (int i = 0; i < 3; i++) free(g[i]);
  val_case_free(&c);
}

/* dv's tolerance widens the same way (dv_sens): on the suite's outlier case
** (a key 1000 times the others; fp32 bwd, seq 130, d64), which the
** rounding of its logits and of lse costs dv past fp32's tolerance, dq and
** dk as the reference and dv off by 0.5x the cost are valid, 2x invalid;
** on ordinary logits the cost stays under half the tolerance. */
static double dv_bound(const val_case *c) {
  const size_t rows = (size_t)c->p.batch * (size_t)c->p.heads * (size_t)c->p.seq_k;
  double s2 = 0, r2 = 0;
  for (size_t i = 0; i < rows; i++) s2 += c->dv_sens[i] * c->dv_sens[i];
  for (size_t i = 0; i < rows * (size_t)c->p.dim; i++) r2 += c->dv_ref[i] * c->dv_ref[i];
  return 2 * 0x1p-24 * sqrt(s2 / r2);
}

static void test_dv_logit_size(void) {
  int outlier = -1;
  for (int i = 0; i < val_suite_size(); i++)
    if (!strcmp(val_suite_name(i), "outlier")) outlier = i;
  CHECK(outlier >= 0, "the suite has no outlier case");
  const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 130, .seq_k = 130, .dim = 64,
                        .dtype = FA_FP32, .op = FA_OP_BWD};
  val_case c, plain;
  char err[200] = "";
  if (outlier < 0 || val_suite_make(&c, outlier, &p, 5, err, sizeof err) != 0) {
    CHECK(0, "fp32 bwd: outlier: %s", err);
    return;
  }
  if (val_case_make(&plain, &p, 5, err, sizeof err) != 0) {
    CHECK(0, "fp32 bwd: %s", err);
    val_case_free(&c);
    return;
  }
  const double tol = val_tolerance(FA_FP32), w = dv_bound(&c), w_plain = dv_bound(&plain);
  CHECK(w_plain < 0.5 * tol, "fp32: ordinary logits cost dv %.3g, near the tolerance %g",
        w_plain, tol);
  CHECK(w > 10 * tol && w < 1e-2, "fp32: the outlier's logits cost dv %.3g (tolerance %g)",
        w, tol);
  const size_t nq = (size_t)c.p.heads * 130 * 64, nk = nq;  /* batch 1, heads as the case's */
  float *g[3] = {malloc(nq * 4), malloc(nk * 4), malloc(nk * 4)};
  CHECK(g[0] && g[1] && g[2], "out of memory");
  for (int k = 0; g[0] && g[1] && g[2] && k < 2; k++) {
    const double f = k ? 2.0 : 0.5;
    double e2 = 0, r2 = 0;
    for (size_t j = 0; j < nq; j++) g[0][j] = (float)c.dq_ref[j];
    for (size_t j = 0; j < nk; j++) {
      g[1][j] = (float)c.dk_ref[j];
      g[2][j] = (float)(c.dv_ref[j] * (1 + sign(j) * f * w));
      const double d = (double)g[2][j] - c.dv_ref[j];
      e2 += d * d, r2 += c.dv_ref[j] * c.dv_ref[j];
    }
    const double e = sqrt(e2 / r2);   /* measured: the float rounding moves it a little */
    CHECK(k ? e > 1.5 * w : e < 0.6 * w, "dv off by %.3g, meant %gx %.3g", e, f, w);
    val_result r;
    memset(&r, 0, sizeof r);
    const void *const outputs[3] = {g[0], g[1], g[2]};
    val_judge(&c, outputs, &r);
    CHECK((int)r.status == (k ? VAL_INVALID : VAL_OK),
          "fp32 bwd outlier: dv %gx the logits' cost off is %s (%s)", f, k ? "valid" : "invalid",
          r.msg[0] ? r.msg : "passes");
  }
  for (int i = 0; i < 3; i++) free(g[i]);
  val_case_free(&c), val_case_free(&plain);
}

int main(void) {
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    val_case c;
    if (make_case(&c, dtypes[k]) != 0) continue;
    void *o = make_o(&c, 0), *lse = make_lse(&c, 0, 0);
    CHECK(o && lse, "out of memory");
    if (o && lse) {
      test_exact(&c, o, lse);
      test_nonfinite(&c);
      test_reference_nan(&c);
      test_tolerance(&c, o, lse);
      test_sample(&c, o, lse);
    }
    free(o), free(lse);
    val_case_free(&c);
  }
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) test_grad_nan(dtypes[k]);
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) test_logit_size(dtypes[k]);
  test_dv_logit_size();
  return check_done("test_judge");
}
