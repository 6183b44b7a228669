/*
** test_reference_bwd.c
** Checks the float64 reference backward pass against central finite
** differences of the float64 forward (itself checked by test_reference):
** for the loss L = sum(dout * O), every element of dq, dk and dv against
** (L(x + h) - L(x - h)) / 2h, on small shapes, causal and not, with more
** queries than keys (rows that see nothing), strided and distinct layouts,
** and a custom scale; under score and mask modifications too (the built-ins
** and a file's score of abs, min, max, exp, log and a division through
** the score, whose derivatives the generator writes). Then exact properties (each row's dS sums to zero,
** so dk sums to zero over the keys; P's rows sum to one, so dv sums to
** dout over the keys), that every output element is written (NaN poison
** before each call), and that invalid problems are refused.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fa_mod.h"
#include "fa_status.h"
#include "gen.h"
#include "reference.h"

#define FD_STEP 1e-5   /* central differences: error about h^2 and eps / h */
#define FD_TOL 1e-7    /* norm-relative, per gradient */
#define EXACT_TOL 1e-12

static uint64_t rng_state;

static double rng_normal(void) {
  double u[2];
  for (int i = 0; i < 2; i++) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    u[i] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* (batch, heads, seq, dim) contiguous, or (batch, seq, heads, dim) with
** rows pad elements apart beyond dim (a strided view); of V's head dim
** (V, O, dO, dV) with of_v. */
static fa_layout layout(const fa_problem *p, int seq, int bshd, int pad, int of_v) {
  const int dim = of_v ? fa_problem_dim_v(p) : p->dim;
  if (!bshd) return of_v ? fa_layout_contiguous_v(p, seq) : fa_layout_contiguous(p, seq);
  fa_layout l;
  l.sh = dim + pad;
  l.sn = (long long)p->heads * l.sh;
  l.sb = (long long)seq * l.sn;
  return l;
}

static size_t span(const fa_problem *p, int seq, fa_layout l, int dim) {
  return (size_t)((p->batch - 1) * l.sb + (p->heads - 1) * l.sh + (seq - 1) * l.sn + dim);
}

static double *tensor(size_t n, double fill) {
  double *x = malloc(n * sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++) x[i] = isnan(fill) ? rng_normal() : fill;
  return x;
}

/* One problem's tensors: inputs random, gradients poisoned with NaN. */
typedef struct bwd_case {
  fa_problem p;
  ref_bwd_io io;
  double *q, *k, *v, *dout, *dq, *dk, *dv;
  size_t nq, nk, ndq, ndk;
} bwd_case;

static void case_make(bwd_case *c, fa_problem p, int bshd) {
  memset(c, 0, sizeof *c);
  c->p = p;
  ref_bwd_io *io = &c->io;
  const int dv = fa_problem_dim_v(&p);
  io->ql = layout(&p, p.seq_q, bshd, 3, 0), io->kl = layout(&p, p.seq_k, bshd, 1, 0);
  io->vl = layout(&p, p.seq_k, 0, 0, 1), io->dol = layout(&p, p.seq_q, bshd, 2, 1);
  /* The gradients in layouts of their own, not their inputs'. */
  io->dql = layout(&p, p.seq_q, !bshd, 5, 0), io->dkl = layout(&p, p.seq_k, !bshd, 0, 0);
  io->dvl = layout(&p, p.seq_k, bshd, 4, 1);
  c->nq = span(&p, p.seq_q, io->ql, p.dim), c->nk = span(&p, p.seq_k, io->kl, p.dim);
  c->ndq = span(&p, p.seq_q, io->dql, p.dim), c->ndk = span(&p, p.seq_k, io->dkl, p.dim);
  c->q = tensor(c->nq, NAN), c->k = tensor(c->nk, NAN);
  c->v = tensor(span(&p, p.seq_k, io->vl, dv), NAN);
  c->dout = tensor(span(&p, p.seq_q, io->dol, dv), NAN);
  c->dq = tensor(c->ndq, 0), c->dk = tensor(c->ndk, 0);
  c->dv = tensor(span(&p, p.seq_k, io->dvl, dv), 0);
  io->q = c->q, io->k = c->k, io->v = c->v, io->dout = c->dout;
  io->dq = c->dq, io->dk = c->dk, io->dv = c->dv;
}

static void case_free(bwd_case *c) {
  free(c->q), free(c->k), free(c->v), free(c->dout), free(c->dq), free(c->dk), free(c->dv);
}

static double *elem(double *t, fa_layout l, int b, int h, int n, int d) {
  return t + b * l.sb + h * l.sh + n * l.sn + d;
}

/* Poison every element of the gradients, padding included. */
static void poison(bwd_case *c) {
  const size_t ndv = span(&c->p, c->p.seq_k, c->io.dvl, fa_problem_dim_v(&c->p));
  for (size_t i = 0; i < c->ndq; i++) c->dq[i] = NAN;
  for (size_t i = 0; i < c->ndk; i++) c->dk[i] = NAN;
  for (size_t i = 0; i < ndv; i++) c->dv[i] = NAN;
}

/* L = sum(dout * O) by the reference forward. */
static double loss(const bwd_case *c) {
  const fa_problem *p = &c->p;
  const fa_layout ol = fa_layout_contiguous_v(p, p->seq_q);
  double *o = tensor((size_t)p->batch * p->heads * p->seq_q * fa_problem_dim_v(p), 0);
  CHECK(ref_attention(p, c->q, c->io.ql, c->k, c->io.kl, c->v, c->io.vl, o, ol, NULL) == 0,
        "the forward refused a valid problem");
  double sum = 0;
  for (int b = 0; b < p->batch; b++)
    for (int h = 0; h < p->heads; h++)
      for (int n = 0; n < p->seq_q; n++)
        for (int d = 0; d < fa_problem_dim_v(p); d++)
          sum += *elem((double *)c->dout, c->io.dol, b, h, n, d) * *elem(o, ol, b, h, n, d);
  free(o);
  return sum;
}

/* The norm-relative error of gradient g (layout gl) of input x (layout
** xl, seq rows of dim values) against central differences of the loss. */
static double fd_error(bwd_case *c, double *x, fa_layout xl, const double *g, fa_layout gl,
                       int seq, int dim) {
  const fa_problem *p = &c->p;
  double diff = 0, norm = 0;
  for (int b = 0; b < p->batch; b++)
    for (int h = 0; h < p->heads; h++)
      for (int n = 0; n < seq; n++)
        for (int d = 0; d < dim; d++) {
          double *e = elem(x, xl, b, h, n, d);
          const double keep = *e;
          *e = keep + FD_STEP;
          const double up = loss(c);
          *e = keep - FD_STEP;
          const double down = loss(c);
          *e = keep;
          const double fd = (up - down) / (2 * FD_STEP);
          const double got = *elem((double *)g, gl, b, h, n, d);
          diff += (got - fd) * (got - fd), norm += fd * fd;
          if (!isfinite(got)) diff = INFINITY;
        }
  return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

static double worst;
static int ncases;

static void check_fd(fa_problem p, int bshd, uint64_t seed) {
  bwd_case c;
  rng_state = seed;
  case_make(&c, p, bshd);
  poison(&c);
  CHECK(ref_attention_backward(&c.p, &c.io) == 0, "backward refused a valid problem");
  const double eq = fd_error(&c, c.q, c.io.ql, c.dq, c.io.dql, p.seq_q, p.dim);
  const double ek = fd_error(&c, c.k, c.io.kl, c.dk, c.io.dkl, p.seq_k, p.dim);
  const double ev = fd_error(&c, c.v, c.io.vl, c.dv, c.io.dvl, p.seq_k, fa_problem_dim_v(&p));
  const double e = fmax(eq, fmax(ek, ev));
  CHECK(e < FD_TOL, "b%d h%d %dx%d d%d/%d causal %d scale %g %s %s: finite differences off by "
        "%.3g (dq), %.3g (dk), %.3g (dv)", p.batch, p.heads, p.seq_q, p.seq_k, p.dim, p.dim_v,
        p.causal, p.scale, bshd ? "bshd" : "bhsd", p.mod ? p.mod->label : "", eq, ek, ev);
  if (!(e <= worst)) worst = e;
  ncases++;
  case_free(&c);
}

static fa_problem problem(int batch, int heads, int sq, int sk, int dim, int causal,
                          double scale) {
  fa_problem p = {0};
  p.batch = batch, p.heads = heads, p.seq_q = sq, p.seq_k = sk, p.dim = dim;
  p.dtype = FA_FP64, p.causal = causal, p.scale = scale, p.op = FA_OP_BWD;
  return p;
}

static void test_finite_differences(void) {
  static const int shapes[][5] = {
    {1, 1, 1, 1, 1}, {1, 1, 1, 7, 3}, {1, 1, 6, 1, 2}, {2, 2, 3, 5, 4},
    {1, 2, 5, 3, 4}, {1, 1, 9, 9, 8}, {2, 1, 4, 11, 5},
  };
  uint64_t seed = 11;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int causal = 0; causal <= 1; causal++)
      for (int bshd = 0; bshd <= 1; bshd++) {
        const int *s = shapes[i];
        check_fd(problem(s[0], s[1], s[2], s[3], s[4], causal, 0), bshd, seed++);
      }
  check_fd(problem(1, 2, 4, 6, 4, 1, 0.3), 1, seed++);
  check_fd(problem(1, 1, 5, 5, 3, 0, 2.5), 0, seed++);
  /* V's head dim apart from Q's and K's, narrower and wider. */
  static const int dims_v[][2] = {{6, 3}, {3, 7}, {1, 4}};
  for (size_t i = 0; i < sizeof dims_v / sizeof dims_v[0]; i++)
    for (int causal = 0; causal <= 1; causal++) {
      fa_problem p = problem(2, 2, 5, 4, dims_v[i][0], causal, 0);
      p.dim_v = dims_v[i][1];
      check_fd(p, (int)i & 1, seed++);
    }
}

/* The gradients under modifications: each built-in (a window that leaves
** some rows no key, ALiBi, a softcap, a prefix and chunks) and a file's
** score with every function the derivative has a rule for. */
static void test_modifications(void) {
  static const struct { const char *spec, *text; } mods[] = {
    {"window=2:1", NULL}, {"alibi", NULL}, {"softcap=1.5", NULL}, {"prefixlm=3", NULL},
    {"chunked=3", NULL},
    {"mine.lua", "return { score = \"0.5 * score - 0.25 * max(score, -0.5) + log(1.0 + exp(-abs(score)))"
                 " + min(score, 0.3) * 2.0 / (1.5 + tanh(score)) + exp2(score) * 0.1"
                 " - log2(2.0 + score * score) + sqrt(1.0 + score * score)"
                 " + (score > 0.1 ? score * score : -score) * float(h + 1)\" }"},
  };
  char err[256];
  gen_state *g = NULL;
  if (gen_open(&g, err, sizeof err) != 0) {
    CHECK(0, "generator: %s", err);
    return;
  }
  fa_mod *m = malloc(sizeof *m);
  uint64_t seed = 101;
  for (size_t i = 0; m && i < sizeof mods / sizeof mods[0]; i++) {
    if (gen_mod_load(g, mods[i].spec, mods[i].text, m) != 0) {
      CHECK(0, "%s: %s", mods[i].spec, gen_errmsg(g));
      continue;
    }
    CHECK(!m->nscore || m->ndscore > 0, "%s: a score part without its derivative", mods[i].spec);
    for (int causal = 0; causal <= 1; causal++) {
      fa_problem p = problem(2, 2, 5, 7, 4, causal, 0);
      p.mod = m;
      check_fd(p, causal, seed++);
    }
  }
  free(m);
  gen_close(g);
}

/* Exact properties, and the rows and keys no query sees. */
static void test_properties(void) {
  /* Causal with more queries than keys: rows 0 .. 3 see nothing. */
  fa_problem p = problem(2, 3, 7, 3, 5, 1, 0);
  bwd_case c;
  rng_state = 99;
  case_make(&c, p, 1);
  poison(&c);
  CHECK(ref_attention_backward(&c.p, &c.io) == 0, "backward refused a valid problem");
  const ref_bwd_io *io = &c.io;
  for (int b = 0; b < p.batch; b++)
    for (int h = 0; h < p.heads; h++) {
      for (int n = 0; n < p.seq_q; n++)
        for (int d = 0; d < p.dim; d++) {
          const double g = *elem(c.dq, io->dql, b, h, n, d);
          CHECK(isfinite(g), "dq[%d][%d][%d][%d] not written", b, h, n, d);
          if (n < p.seq_q - p.seq_k) CHECK(g == 0, "dq of a row that sees no key is %g", g);
        }
      for (int d = 0; d < p.dim; d++) {
        double sk = 0, sv = 0, so = 0;
        for (int n = 0; n < p.seq_k; n++) {
          sk += *elem(c.dk, io->dkl, b, h, n, d);
          sv += *elem(c.dv, io->dvl, b, h, n, d);
        }
        for (int n = p.seq_q - p.seq_k; n < p.seq_q; n++)
          so += *elem((double *)c.dout, io->dol, b, h, n, d);
        CHECK(fabs(sk) < EXACT_TOL, "dk sums to %g over the keys, not 0", sk);
        CHECK(fabs(sv - so) < EXACT_TOL, "dv sums to %g over the keys, not dout's %g", sv, so);
      }
    }
  /* Run twice: the same bits (dk and dv are zeroed, not accumulated into). */
  double *dk = malloc(c.ndk * sizeof *dk);
  CHECK(dk != NULL, "out of memory");
  if (dk) {
    memcpy(dk, c.dk, c.ndk * sizeof *dk);
    CHECK(ref_attention_backward(&c.p, &c.io) == 0, "second run refused");
    int same = 1;
    for (int b = 0; b < p.batch; b++)
      for (int h = 0; h < p.heads; h++)
        for (int n = 0; n < p.seq_k; n++)
          for (int d = 0; d < p.dim; d++)
            same &= *elem(dk, io->dkl, b, h, n, d) == *elem(c.dk, io->dkl, b, h, n, d);
    CHECK(same, "a second run gives other dk bits");
    free(dk);
  }
  /* The magnitudes: written everywhere (poisoned first), each at least its
  ** gradient's magnitude, and 0 exactly where the gradient is (a row that
  ** sees no key). */
  double *mq = malloc(c.ndq * sizeof *mq), *mk = malloc(c.ndk * sizeof *mk);
  CHECK(mq && mk, "out of memory");
  if (mq && mk) {
    for (size_t i = 0; i < c.ndq; i++) mq[i] = NAN;
    for (size_t i = 0; i < c.ndk; i++) mk[i] = NAN;
    ref_bwd_io with = c.io;
    with.dq_mag = mq, with.dk_mag = mk;
    CHECK(ref_attention_backward(&c.p, &with) == 0, "a run with magnitudes refused");
    int bounded = 1, zero = 1;
    for (int b = 0; b < p.batch; b++)
      for (int h = 0; h < p.heads; h++)
        for (int d = 0; d < p.dim; d++) {
          for (int n = 0; n < p.seq_q; n++) {
            const double m = *elem(mq, io->dql, b, h, n, d), g = *elem(c.dq, io->dql, b, h, n, d);
            bounded &= m >= fabs(g) * (1 - 1e-12);
            if (n < p.seq_q - p.seq_k) zero &= m == 0;
          }
          for (int n = 0; n < p.seq_k; n++)
            bounded &= *elem(mk, io->dkl, b, h, n, d) >= fabs(*elem(c.dk, io->dkl, b, h, n, d)) * (1 - 1e-12);
        }
    CHECK(bounded, "a magnitude below its gradient's, or NaN (not written)");
    CHECK(zero, "a row that sees no key has dq magnitudes other than 0");
  }
  free(mq), free(mk);
  case_free(&c);
}

/* dv_sens against what it measures: logits moved by e a_ij s_ij and each
** row's lse by e L_i t_i (s, t random signs; a_ij = scale sum |q k|, L_i =
** max_j a_ij + log(keys)), dv recomputed here from P_ij = exp(logit -
** lse) moves, on average over the draws, by at most e |dv_sens| and by
** more than a fourth of it (the square of a + L is at most twice a^2 +
** L^2). Causal with rows that see nothing, and GQA (dv_sens summed over
** the group). */
static void test_dv_sens(void) {
  fa_problem p = problem(1, 4, 9, 6, 5, 1, 0);
  p.kv_group = 2;
  bwd_case c;
  rng_state = 7;
  case_make(&c, p, 0);
  const int H = p.heads, G = 2, SQ = p.seq_q, SK = p.seq_k, D = p.dim;
  double *sens = tensor((size_t)H * SK, NAN);
  ref_bwd_io io = c.io;
  io.dv_sens = sens;
  CHECK(ref_attention_backward(&p, &io) == 0, "a run with dv_sens refused");
  const double scale = fa_problem_scale(&p), eps = 1e-7;
  double want2 = 0, moved2 = 0;
  for (int h = 0; h < H / G; h++)
    for (int j = 0; j < SK; j++) want2 += sens[h * SK + j] * sens[h * SK + j];
  const int draws = 64;
  for (int t = 0; t < draws; t++) {
    double dv0[6][5] = {{0}}, dv1[6][5] = {{0}};
    for (int h = 0; h < H; h++)
      for (int i = 0; i < SQ; i++) {
        const int nvis = i - (SQ - SK) + 1 < 0 ? 0 : i - (SQ - SK) + 1;
        double s[6], a[6], m = -INFINITY, amax = 0, l = 0;
        for (int j = 0; j < nvis; j++) {
          s[j] = a[j] = 0;
          for (int d = 0; d < D; d++) {
            const double x = *elem(c.q, io.ql, 0, h, i, d) * *elem(c.k, io.kl, 0, h / G, j, d);
            s[j] += scale * x, a[j] += scale * fabs(x);
          }
          m = fmax(m, s[j]), amax = fmax(amax, a[j]);
        }
        for (int j = 0; j < nvis; j++) l += exp(s[j] - m);
        const double lse = m + log(l), L = amax + log((double)nvis);
        const double dl = eps * L * (rng_normal() < 0 ? -1 : 1);
        for (int j = 0; j < nvis; j++) {
          const double ds = eps * a[j] * (rng_normal() < 0 ? -1 : 1);
          const double p0 = exp(s[j] - lse), p1 = exp(s[j] + ds - (lse + dl));
          for (int d = 0; d < D; d++) {
            const double g = *elem(c.dout, io.dol, 0, h, i, d);
            dv0[j][d] += p0 * g, dv1[j][d] += p1 * g;
          }
        }
      }
    for (int j = 0; j < SK; j++)
      for (int d = 0; d < D; d++) moved2 += (dv1[j][d] - dv0[j][d]) * (dv1[j][d] - dv0[j][d]);
  }
  const double ratio = sqrt(moved2 / draws) / (eps * sqrt(want2));
  CHECK(want2 > 0 && ratio <= 1 && ratio > 0.25,
        "dv moves by %.3g of eps |dv_sens| on average, not within (0.25, 1]", ratio);
  free(sens);
  case_free(&c);
}

static void test_invalid(void) {
  fa_problem good = problem(1, 1, 4, 4, 4, 0, 0), p;
  bwd_case c;
  rng_state = 5;
  case_make(&c, good, 0);
  ref_bwd_io io = c.io;
  CHECK(ref_attention_backward(&good, &io) == 0, "good problem refused");
#define BAD(field, val) do { \
    p = good; p.field = (val); \
    CHECK(ref_attention_backward(&p, &io) == -1, "%s = %d accepted", #field, (int)(val)); \
  } while (0)
  BAD(dim, 0);
  BAD(dim, FA_DIM_MAX + 1);
  BAD(seq_q, 0);
  BAD(seq_k, -1);
  BAD(batch, 0);
  BAD(heads, 0);
#undef BAD
  CHECK(ref_attention_backward(NULL, &io) == -1, "NULL problem");
  CHECK(ref_attention_backward(&good, NULL) == -1, "NULL io");
#define NUL(field) do { \
    ref_bwd_io x = c.io; x.field = NULL; \
    CHECK(ref_attention_backward(&good, &x) == -1, "NULL %s accepted", #field); \
  } while (0)
  NUL(q); NUL(k); NUL(v); NUL(dout); NUL(dq); NUL(dk); NUL(dv);
#undef NUL
  /* Through ref_op: bwd reaches it; an op out of range says it has no reference. */
  char err[128] = "";
  CHECK(ref_op(&good, &c.io, err, sizeof err) == 0, "ref_op bwd: %s", err);
  p = good, p.op = (fa_op)FA_NOPS;
  CHECK(ref_op(&p, &c.io, err, sizeof err) == FA_EINVAL && strstr(err, "no float64 reference"),
        "ref_op of no op: '%s'", err);
  case_free(&c);
}

/* A NaN query row makes its row of the softmax NaN, as the forward pass's
** output: its dq NaN, and dk and dv NaN at every key it reaches; the other
** rows' dq finite (no key holds a NaN or an Inf). */
static void test_nan_row(void) {
  const fa_problem p = problem(1, 1, 6, 9, 4, 0, 0);
  bwd_case c;
  rng_state = 5;
  case_make(&c, p, 0);
  for (int d = 0; d < p.dim; d++) *elem(c.q, c.io.ql, 0, 0, 2, d) = NAN;
  poison(&c);
  CHECK(ref_attention_backward(&c.p, &c.io) == 0, "backward refused a NaN input");
  int nan_dq = 0, finite_dq = 0, nan_kv = 0;
  for (int n = 0; n < p.seq_q; n++)
    for (int d = 0; d < p.dim; d++) {
      const double g = *elem(c.dq, c.io.dql, 0, 0, n, d);
      if (n == 2) nan_dq += isnan(g);
      else finite_dq += isfinite(g);
    }
  for (int n = 0; n < p.seq_k; n++)
    for (int d = 0; d < p.dim; d++)
      nan_kv += isnan(*elem(c.dk, c.io.dkl, 0, 0, n, d)) + isnan(*elem(c.dv, c.io.dvl, 0, 0, n, d));
  CHECK(nan_dq == p.dim && finite_dq == (p.seq_q - 1) * p.dim && nan_kv == 2 * p.seq_k * p.dim,
        "a NaN query row: %d of its %d dq NaN, %d of the others' %d finite, %d of dk and dv's %d NaN",
        nan_dq, p.dim, finite_dq, (p.seq_q - 1) * p.dim, nan_kv, 2 * p.seq_k * p.dim);
  case_free(&c);
}

int main(void) {
  test_finite_differences();
  test_nan_row();
  test_modifications();
  test_properties();
  test_dv_sens();
  test_invalid();
  printf("reference backward: %d finite-difference cases, worst norm-relative error %.3g "
         "(tolerance %g)\n", ncases, worst, FD_TOL);
  return check_done("reference_bwd");
}
