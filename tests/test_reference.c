/*
** test_reference.c
** Checks the float64 CPU reference against an independent computation: a
** blocked, streaming (online-softmax, FlashAttention-style) pass written
** here with long double accumulation. It never materializes a score row,
** rescales its running sums as the maximum grows, and masks per element,
** so it shares no loop with the reference. On top of that: rows with no
** visible key, strided layouts, custom scales, huge scores, exact special
** cases (V all ones, Q zero, a single visible key) and invalid problems.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reference.h"

#define TOL 1e-12      /* max abs and norm-relative error against the oracle */
#define ORACLE_BK 16   /* keys per block in the streaming oracle */

/* ---- Deterministic normal numbers: splitmix64 and Box-Muller. ---- */

static uint64_t rng_state;

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, offset by half a step so never 0. */
static double rng_uniform(void) {
  return ((double)(rng_next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rng_normal(void) {
  double u1 = rng_uniform(), u2 = rng_uniform();
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- Tensors in two layouts. ---- */

enum { BHSD = 0, BSHD = 1 };   /* (batch, heads, seq, dim) or (batch, seq, heads, dim) */

static fa_layout make_layout(const fa_problem *p, int seq, int kind) {
  fa_layout l;
  if (kind == BHSD) return fa_layout_contiguous(p, seq);
  l.sh = p->dim;
  l.sn = (long long)p->heads * p->dim;
  l.sb = (long long)seq * l.sn;
  return l;
}

/* Both layouts are dense, so either holds exactly this many elements. */
static size_t tensor_elems(const fa_problem *p, int seq) {
  return (size_t)p->batch * p->heads * seq * p->dim;
}

static double *at(double *t, fa_layout l, int b, int h, int n) {
  return t + b * l.sb + h * l.sh + n * l.sn;
}

static const double *cat(const double *t, fa_layout l, int b, int h, int n) {
  return t + b * l.sb + h * l.sh + n * l.sn;
}

static double *alloc_doubles(size_t n) {
  double *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return x;
}

static void fill_normal(double *x, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) x[i] = rng_normal();
}

/* ---- The independent oracle: blocked online softmax in long double. ---- */

static void oracle_attention(const fa_problem *p,
                             const double *q, fa_layout ql,
                             const double *k, fa_layout kl,
                             const double *v, fa_layout vl,
                             double *o, fa_layout ol, double *lse) {
  long double scale = p->scale != 0.0 ? (long double)p->scale
                                      : 1.0L / sqrtl((long double)p->dim);
  long double acc[FA_DIM_MAX], sc[ORACLE_BK];
  long long shift = (long long)p->seq_k - p->seq_q;
  int b, h, r, c0, j, d;

  for (b = 0; b < p->batch; b++)
  for (h = 0; h < p->heads; h++)
  for (r = 0; r < p->seq_q; r++) {
    const double *qr = cat(q, ql, b, h, r);
    long double m = -INFINITY, l = 0.0L;
    double *orow = at(o, ol, b, h, r);

    for (d = 0; d < p->dim; d++) acc[d] = 0.0L;
    for (c0 = 0; c0 < p->seq_k; c0 += ORACLE_BK) {
      int nb = p->seq_k - c0 < ORACLE_BK ? p->seq_k - c0 : ORACLE_BK;
      long double mb = -INFINITY, alpha;
      for (j = 0; j < nb; j++) {
        const double *kr = cat(k, kl, b, h, c0 + j);
        long double s = 0.0L;
        if (p->causal && c0 + j > r + shift) { sc[j] = -INFINITY; continue; }
        /* Sum the dot product back to front: a different order again. */
        for (d = p->dim - 1; d >= 0; d--) s += (long double)qr[d] * kr[d];
        sc[j] = s * scale;
        if (sc[j] > mb) mb = sc[j];
      }
      if (mb == -INFINITY) continue;           /* fully masked block */
      if (mb > m) {
        alpha = expl(m - mb);                  /* 0 on the first block */
        l *= alpha;
        for (d = 0; d < p->dim; d++) acc[d] *= alpha;
        m = mb;
      }
      for (j = 0; j < nb; j++) {
        const double *vr;
        long double e;
        if (sc[j] == -INFINITY) continue;
        e = expl(sc[j] - m);
        vr = cat(v, vl, b, h, c0 + j);
        l += e;
        for (d = 0; d < p->dim; d++) acc[d] += e * vr[d];
      }
    }
    for (d = 0; d < p->dim; d++) orow[d] = l > 0 ? (double)(acc[d] / l) : 0.0;
    lse[((long long)b * p->heads + h) * p->seq_q + r] =
        l > 0 ? (double)(m + logl(l)) : -INFINITY;
  }
}

/* ---- Comparison. ---- */

/* lse_abs is |difference| / max(1, |lse|). */
typedef struct errs { double max_abs, rel, lse_abs; int bad_inf, nan; } errs;

/* Compares outputs a, b (layouts la, lb) and their lse rows. */
static errs compare(const fa_problem *p, const double *a, fa_layout la,
                    const double *b, fa_layout lb,
                    const double *lsea, const double *lseb) {
  errs e = {0, 0, 0, 0, 0};
  long double num = 0, den = 0;
  double err;
  int bi, h, r, d;
  size_t i, nl = (size_t)p->batch * p->heads * p->seq_q;

  for (bi = 0; bi < p->batch; bi++)
  for (h = 0; h < p->heads; h++)
  for (r = 0; r < p->seq_q; r++) {
    const double *x = cat(a, la, bi, h, r), *y = cat(b, lb, bi, h, r);
    for (d = 0; d < p->dim; d++) {
      double diff = fabs(x[d] - y[d]);
      if (isnan(x[d]) || isnan(y[d])) e.nan++;
      if (diff > e.max_abs) e.max_abs = diff;
      num += (long double)diff * diff;
      den += (long double)y[d] * y[d];
    }
  }
  e.rel = den > 0 ? (double)sqrtl(num / den) : (double)sqrtl(num);
  for (i = 0; i < nl; i++) {
    if (isnan(lsea[i]) || isnan(lseb[i])) { e.nan++; continue; }
    if (isinf(lsea[i]) || isinf(lseb[i])) {
      if (lsea[i] != lseb[i]) e.bad_inf++;
      continue;
    }
    /* Relative once |lse| > 1: with large scales lse is in the thousands
    ** and one ulp there already exceeds 1e-12. */
    err = fabs(lsea[i] - lseb[i]) / fmax(1.0, fabs(lseb[i]));
    if (err > e.lse_abs) e.lse_abs = err;
  }
  return e;
}

/* ---- One problem: random inputs, reference vs oracle. ---- */

typedef struct run {
  fa_problem p;
  fa_layout ql, kl, vl, ol;
  double *q, *k, *v, *o, *lse;
} run;

static void run_init(run *x, fa_problem p, int kind, uint64_t seed) {
  memset(x, 0, sizeof *x);
  x->p = p;
  x->ql = make_layout(&p, p.seq_q, kind);
  x->kl = make_layout(&p, p.seq_k, kind);
  x->vl = make_layout(&p, p.seq_k, kind);
  x->ol = make_layout(&p, p.seq_q, kind);
  x->q = alloc_doubles(tensor_elems(&p, p.seq_q));
  x->k = alloc_doubles(tensor_elems(&p, p.seq_k));
  x->v = alloc_doubles(tensor_elems(&p, p.seq_k));
  x->o = alloc_doubles(tensor_elems(&p, p.seq_q));
  x->lse = alloc_doubles((size_t)p.batch * p.heads * p.seq_q);
  rng_state = seed;
  fill_normal(x->q, tensor_elems(&p, p.seq_q));
  fill_normal(x->k, tensor_elems(&p, p.seq_k));
  fill_normal(x->v, tensor_elems(&p, p.seq_k));
}

static int run_ref(run *x) {
  return ref_attention(&x->p, x->q, x->ql, x->k, x->kl, x->v, x->vl,
                       x->o, x->ol, x->lse);
}

static void run_free(run *x) {
  free(x->q); free(x->k); free(x->v); free(x->o); free(x->lse);
}

static double worst_err;   /* the largest error seen, for the summary */
static int ncases;

static void note(errs e) {
  if (e.max_abs > worst_err) worst_err = e.max_abs;
  if (e.rel > worst_err) worst_err = e.rel;
  if (e.lse_abs > worst_err) worst_err = e.lse_abs;
}

/* Reference against the oracle on random inputs. */
static void check_against_oracle(fa_problem p, int kind, uint64_t seed) {
  run x;
  double *oo, *ol;
  errs e;
  int rc;

  run_init(&x, p, kind, seed);
  oo = alloc_doubles(tensor_elems(&p, p.seq_q));
  ol = alloc_doubles((size_t)p.batch * p.heads * p.seq_q);
  rc = run_ref(&x);
  CHECK(rc == 0, "b%d h%d sq%d sk%d d%d causal%d: rc %d",
        p.batch, p.heads, p.seq_q, p.seq_k, p.dim, p.causal, rc);
  oracle_attention(&p, x.q, x.ql, x.k, x.kl, x.v, x.vl, oo, x.ol, ol);
  e = compare(&p, x.o, x.ol, oo, x.ol, x.lse, ol);
  note(e);
  ncases++;
  CHECK(e.nan == 0 && e.bad_inf == 0,
        "b%d h%d sq%d sk%d d%d causal%d: %d NaN, %d inf mismatches",
        p.batch, p.heads, p.seq_q, p.seq_k, p.dim, p.causal, e.nan, e.bad_inf);
  CHECK(e.max_abs <= TOL && e.rel <= TOL && e.lse_abs <= TOL,
        "b%d h%d sq%d sk%d d%d causal%d scale %g: max abs %.3g rel %.3g lse %.3g",
        p.batch, p.heads, p.seq_q, p.seq_k, p.dim, p.causal, p.scale,
        e.max_abs, e.rel, e.lse_abs);
  free(oo); free(ol);
  run_free(&x);
}

static fa_problem problem(int batch, int heads, int sq, int sk, int dim,
                          int causal, double scale) {
  fa_problem p;
  memset(&p, 0, sizeof p);
  p.batch = batch; p.heads = heads;
  p.seq_q = sq; p.seq_k = sk; p.dim = dim;
  p.dtype = FA_FP64; p.causal = causal; p.scale = scale;
  return p;
}

/* ---- The cases. ---- */

/* The seeds' shapes, causal and not, plus a few odd ones. */
static void test_shapes(void) {
  static const int shapes[][2] = {
    {8, 4}, {5, 3}, {3, 2}, {128, 16}, {256, 16},
    {1, 1}, {17, 7}, {33, 64}, {40, FA_DIM_MAX},
  };
  int i, causal;
  for (i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++)
    for (causal = 0; causal <= 1; causal++)
      check_against_oracle(problem(1, 1, shapes[i][0], shapes[i][0],
                                   shapes[i][1], causal, 0.0),
                           BHSD, 1000 + 2 * i + causal);
}

/* seq_q != seq_k both ways; with seq_q > seq_k and a causal mask the first
** seq_q - seq_k rows see nothing and must be zeros with lse -inf. */
static void test_rectangular(void) {
  fa_problem p;
  run x;
  int causal, r, d, bad;

  for (causal = 0; causal <= 1; causal++) {
    check_against_oracle(problem(1, 2, 70, 130, 16, causal, 0.0), BHSD, 20 + causal);
    check_against_oracle(problem(1, 2, 130, 70, 16, causal, 0.0), BHSD, 30 + causal);
    check_against_oracle(problem(2, 1, 1, 50, 8, causal, 0.0), BHSD, 40 + causal);
    check_against_oracle(problem(2, 1, 50, 1, 8, causal, 0.0), BHSD, 50 + causal);
  }

  p = problem(1, 1, 130, 70, 16, 1, 0.0);
  run_init(&x, p, BHSD, 60);
  /* Poison the output so rows left unwritten would show. */
  for (r = 0; r < p.seq_q * p.dim; r++) x.o[r] = NAN;
  CHECK(run_ref(&x) == 0, "130x70 causal failed");
  bad = 0;
  for (r = 0; r < 60; r++) {
    for (d = 0; d < p.dim; d++) if (x.o[r * p.dim + d] != 0.0) bad++;
    if (!(isinf(x.lse[r]) && x.lse[r] < 0)) bad++;
  }
  CHECK(bad == 0, "%d bad values in the 60 rows without a visible key", bad);
  bad = 0;
  for (r = 60; r < p.seq_q; r++) {
    for (d = 0; d < p.dim; d++) if (!isfinite(x.o[r * p.dim + d])) bad++;
    if (!isfinite(x.lse[r])) bad++;
  }
  CHECK(bad == 0, "%d non-finite values in rows with a visible key", bad);
  /* Row 60 sees key 0 alone: the output is v row 0, exactly. */
  bad = memcmp(x.o + 60 * p.dim, x.v, p.dim * sizeof(double)) != 0;
  CHECK(!bad, "row 60 with one visible key is not v[0]");
  run_free(&x);
}

/* batch 2, heads 3 stored (batch, seq, heads, dim) gives the same answer as
** the same data stored contiguous, and both match the oracle. */
static void test_strides(void) {
  int causal, sq, b, h, n, d, diff;
  for (causal = 0; causal <= 1; causal++)
  for (sq = 0; sq < 3; sq++) {
    static const int sqs[] = {24, 40, 56};
    fa_problem p = problem(2, 3, sqs[sq], 40, 12, causal, 0.0);
    run s, c;
    run_init(&s, p, BSHD, 70 + 3 * causal + sq);
    run_init(&c, p, BHSD, 70 + 3 * causal + sq);
    /* Same logical data in the contiguous copy. */
    for (b = 0; b < p.batch; b++)
    for (h = 0; h < p.heads; h++) {
      for (n = 0; n < p.seq_q; n++)
        memcpy(at(c.q, c.ql, b, h, n), at(s.q, s.ql, b, h, n), p.dim * sizeof(double));
      for (n = 0; n < p.seq_k; n++) {
        memcpy(at(c.k, c.kl, b, h, n), at(s.k, s.kl, b, h, n), p.dim * sizeof(double));
        memcpy(at(c.v, c.vl, b, h, n), at(s.v, s.vl, b, h, n), p.dim * sizeof(double));
      }
    }
    CHECK(run_ref(&s) == 0 && run_ref(&c) == 0, "strided run failed");
    diff = 0;
    for (b = 0; b < p.batch; b++)
    for (h = 0; h < p.heads; h++)
    for (n = 0; n < p.seq_q; n++)
      for (d = 0; d < p.dim; d++)
        if (at(s.o, s.ol, b, h, n)[d] != at(c.o, c.ol, b, h, n)[d]) diff++;
    diff += memcmp(s.lse, c.lse, (size_t)p.batch * p.heads * p.seq_q * sizeof(double)) != 0;
    CHECK(diff == 0, "strided and contiguous differ in %d places (causal %d sq %d)",
          diff, causal, p.seq_q);
    run_free(&s); run_free(&c);
    check_against_oracle(p, BSHD, 80 + 3 * causal + sq);
  }
}

/* Custom scales, including one large enough that exp without the max
** subtracted would overflow. */
static void test_scales(void) {
  static const double scales[] = {0.37, 1.0, -0.5, 3.0, 200.0};
  int i, causal;
  for (i = 0; i < (int)(sizeof scales / sizeof scales[0]); i++)
    for (causal = 0; causal <= 1; causal++)
      check_against_oracle(problem(2, 2, 48, 64, 16, causal, scales[i]),
                           BHSD, 90 + 2 * i + causal);
}

/* Exact properties that need no oracle: V all ones gives ones (the
** softmax weights sum to one); Q zero gives the mean of the visible V rows
** and lse = log(visible count). */
static void test_properties(void) {
  fa_problem p = problem(1, 2, 130, 70, 8, 1, 0.0);
  long long shift = (long long)p.seq_k - p.seq_q;
  double worst = 0, worst_lse = 0;
  size_t i, nq = tensor_elems(&p, p.seq_q), nk = tensor_elems(&p, p.seq_k);
  int h, r, d, c, nvis, bad = 0;
  run x;

  run_init(&x, p, BHSD, 120);
  for (i = 0; i < nk; i++) x.v[i] = 1.0;
  CHECK(run_ref(&x) == 0, "V ones run failed");
  for (h = 0; h < p.heads; h++)
  for (r = 0; r < p.seq_q; r++) {
    const double *orow = at(x.o, x.ol, 0, h, r);
    nvis = r + shift + 1 < 0 ? 0 : (int)(r + shift + 1);
    for (d = 0; d < p.dim; d++) {
      double want = nvis > 0 ? 1.0 : 0.0;
      if (isnan(orow[d])) bad++;
      else if (fabs(orow[d] - want) > worst) worst = fabs(orow[d] - want);
    }
  }
  CHECK(bad == 0 && worst <= 1e-14, "V ones: %d NaN, worst |o - 1| %.3g", bad, worst);

  /* Q zero: all scores 0, uniform weights. Non-causal too. */
  for (p.causal = 0; p.causal <= 1; p.causal++) {
    x.p = p;
    for (i = 0; i < nq; i++) x.q[i] = 0.0;
    fill_normal(x.v, nk);
    CHECK(run_ref(&x) == 0, "Q zero run failed");
    worst = worst_lse = 0;
    bad = 0;
    for (h = 0; h < p.heads; h++)
    for (r = 0; r < p.seq_q; r++) {
      const double *orow = at(x.o, x.ol, 0, h, r);
      double l = x.lse[h * p.seq_q + r];
      nvis = !p.causal ? p.seq_k : r + shift + 1 < 0 ? 0 : (int)(r + shift + 1);
      if (nvis == 0) {
        if (!(isinf(l) && l < 0)) bad++;
      } else if (fabs(l - log((double)nvis)) > worst_lse) {
        worst_lse = fabs(l - log((double)nvis));
      }
      for (d = 0; d < p.dim; d++) {
        long double mean = 0;
        for (c = 0; c < nvis; c++) mean += at(x.v, x.vl, 0, h, c)[d];
        if (nvis) mean /= nvis;
        if (fabs(orow[d] - (double)mean) > worst) worst = fabs(orow[d] - (double)mean);
      }
    }
    CHECK(bad == 0 && worst <= TOL && worst_lse <= TOL,
          "Q zero causal %d: %d bad lse, worst o %.3g, worst lse %.3g",
          p.causal, bad, worst, worst_lse);
  }

  /* lse may be NULL. */
  CHECK(ref_attention(&p, x.q, x.ql, x.k, x.kl, x.v, x.vl, x.o, x.ol, NULL) == 0,
        "NULL lse refused");
  run_free(&x);
}

static void test_invalid(void) {
  fa_problem good = problem(1, 1, 4, 4, 4, 0, 0.0), p;
  fa_layout l = fa_layout_contiguous(&good, 4);
  double buf[64] = {0}, out[64], lse[16];

  CHECK(ref_attention(&good, buf, l, buf, l, buf, l, out, l, lse) == 0,
        "good problem refused");
#define BAD(field, val) do { \
    p = good; p.field = (val); \
    CHECK(ref_attention(&p, buf, l, buf, l, buf, l, out, l, lse) == -1, \
          "%s = %d accepted", #field, (int)(val)); \
  } while (0)
  BAD(dim, 0);
  BAD(dim, FA_DIM_MAX + 1);
  BAD(dim, -3);
  BAD(seq_q, 0);
  BAD(seq_k, 0);
  BAD(batch, 0);
  BAD(heads, 0);
  BAD(seq_k, -1);
#undef BAD
  CHECK(ref_attention(NULL, buf, l, buf, l, buf, l, out, l, lse) == -1, "NULL p");
  CHECK(ref_attention(&good, NULL, l, buf, l, buf, l, out, l, lse) == -1, "NULL q");
  CHECK(ref_attention(&good, buf, l, NULL, l, buf, l, out, l, lse) == -1, "NULL k");
  CHECK(ref_attention(&good, buf, l, buf, l, NULL, l, out, l, lse) == -1, "NULL v");
  CHECK(ref_attention(&good, buf, l, buf, l, buf, l, NULL, l, lse) == -1, "NULL o");
}

int main(void) {
  test_shapes();
  test_rectangular();
  test_strides();
  test_scales();
  test_properties();
  test_invalid();
  printf("reference: %d oracle comparisons, worst error %.3g (tolerance %g)\n",
         ncases, worst_err, TOL);
  return check_done("reference");
}
