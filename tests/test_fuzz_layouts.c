/*
** test_fuzz_layouts.c
** A differential fuzz of what the kernels read and write through their
** strides, by the library: random variants of every family the library
** runs on the emulator's target (tests/families.h, those written for any
** arch; wg's sm_90a is not the library's target there), each recorded as
** the best for its problem's key in a database of its own, so that
** fatune_attention (op fwd) or fatune_attention_backward (op bwd) runs
** it, on tensors laid out each its own way: (batch, heads, seq, dim) or
** (batch, seq, heads, dim), rows padded or not, by amounts of their own
** (a multiple of the variant's alignment); K and V with fewer heads than
** Q (grouped-query and multi-query attention) in most cases; lengths
** around the tile and the causal diagonal anywhere, as test_fuzz_kernels
** draws them; V's head dim apart from Q's (a pair of the family's
** dims_v) in a third of the cases of a family that has them. Every
** output element must be written over NaN poison and
** match the float64 reference (norm-relative, within val_tolerance); the
** padding between rows must keep its poison. The forward variant run is
** the one recorded (fatune_choose says so).
**
** usage: test_fuzz_layouts [CASES [FAMILY...]]   (6 cases, every family)
** The seed is printed; FATUNE_TEST_SEED replays a run.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "db.h"
#include "families.h"
#include "fatune.h"
#include "reference.h"
#include "validate.h"

#define MAX_CASES 400

static unsigned long long rng_state;

static unsigned long long rng_next(void) {
  unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int pick(int lo, int hi) { return lo + (int)(rng_next() % (unsigned)(hi - lo + 1)); }
static double uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0 - 0.5; }

/* A length around a multiple of block, at least 1. */
static int around(int block, int nmin, int nmax) {
  const int n = pick(nmin, nmax), tail = pick(0, 3);
  const int any = block > 1 ? pick(1, block - 1) : 0;
  const int len = n * block + (tail == 0 ? -1 : tail == 1 ? 0 : tail == 2 ? 1 : any);
  return len < 1 ? 1 : len;
}

/* ---- Tensors, each laid out its own way ---- */

/* A tensor of shape (b, h, n, d), (b, n, h, d) in memory when bnhd, its
** rows pad elements apart more than d; poison (all ones: NaN) between and
** in them until filled; its values also kept as doubles, contiguous. */
typedef struct tensor {
  fatune_tensor t;
  double *ref;
  size_t total;   /* elements allocated */
  int bnhd, pad;
} tensor;

static int tensor_make(tensor *x, fa_dtype dt, int b, int h, int n, int d, int bnhd, int pad,
                       int fill) {
  const long long row = d + pad;
  memset(x, 0, sizeof *x);
  x->bnhd = bnhd, x->pad = pad;
  x->t.dtype = (fatune_dtype)dt;
  x->t.shape[0] = b, x->t.shape[1] = h, x->t.shape[2] = n, x->t.shape[3] = d;
  x->t.stride[3] = 1;
  x->t.stride[bnhd ? 1 : 2] = row;
  x->t.stride[bnhd ? 2 : 1] = row * (bnhd ? h : n);
  x->t.stride[0] = row * h * n;
  x->total = (size_t)b * h * n * (size_t)row;
  x->t.data = malloc(x->total * (size_t)fa_dtype_size(dt));
  x->ref = calloc((size_t)b * h * n * d, sizeof *x->ref);
  if (!x->t.data || !x->ref) return -1;
  memset(x->t.data, 0xFF, x->total * (size_t)fa_dtype_size(dt));
  if (!fill) return 0;
  size_t i = 0;
  for (int ib = 0; ib < b; ib++)
    for (int ih = 0; ih < h; ih++)
      for (int in = 0; in < n; in++)
        for (int id = 0; id < d; id++, i++) {
          const size_t at = (size_t)(ib * x->t.stride[0] + ih * x->t.stride[1] +
                                     in * x->t.stride[2] + id);
          x->ref[i] = fa_elem_put(x->t.data, dt, at, uniform());
        }
  return 0;
}

static void tensor_free(tensor *x) {
  free(x->t.data), free(x->ref);
  memset(x, 0, sizeof *x);
}

/* Writes contiguous float64 values into x's layout, rounded to its dtype. */
static void tensor_put(tensor *x, const double *v) {
  const fatune_tensor *t = &x->t;
  size_t i = 0;
  for (long long b = 0; b < t->shape[0]; b++)
    for (long long h = 0; h < t->shape[1]; h++)
      for (long long n = 0; n < t->shape[2]; n++)
        for (long long d = 0; d < t->shape[3]; d++, i++)
          x->ref[i] = fa_elem_put(t->data, (fa_dtype)t->dtype,
                                  (size_t)(b * t->stride[0] + h * t->stride[1] +
                                           n * t->stride[2] + d), v[i]);
}

/* Norm-relative error of x's elements against contiguous ref, the norm
** taken of mag where given (the magnitudes of a gradient's terms: where
** the softmax's gradient cancels, rounding is relative to those, as the
** validator judges it), else of ref; INFINITY when one is not finite
** (unwritten poison included). */
static double tensor_err_mag(const tensor *x, const double *ref, const double *mag) {
  const fatune_tensor *t = &x->t;
  double e2 = 0, r2 = 0;
  size_t i = 0;
  for (long long b = 0; b < t->shape[0]; b++)
    for (long long h = 0; h < t->shape[1]; h++)
      for (long long n = 0; n < t->shape[2]; n++)
        for (long long d = 0; d < t->shape[3]; d++, i++) {
          const double g = fa_elem_get(t->data, (fa_dtype)t->dtype,
                                       (size_t)(b * t->stride[0] + h * t->stride[1] +
                                                n * t->stride[2] + d));
          if (!isfinite(g)) return INFINITY;
          const double m = mag ? mag[i] : ref[i];
          e2 += (g - ref[i]) * (g - ref[i]), r2 += m * m;
        }
  return sqrt(e2 / (r2 > 0 ? r2 : 1));
}
static double tensor_err(const tensor *x, const double *ref) {
  return tensor_err_mag(x, ref, NULL);
}

/* Whether every padding element (past d in a row) still holds poison. */
static int padding_kept(const tensor *x) {
  const size_t es = (size_t)fa_dtype_size((fa_dtype)x->t.dtype);
  const size_t row = (size_t)(x->t.shape[3] + x->pad), rows = x->total / row;
  const unsigned char *p = x->t.data;
  for (size_t r = 0; r < rows; r++)
    for (size_t i = (size_t)x->t.shape[3] * es; i < row * es; i++)
      if (p[r * row * es + i] != 0xFF) return 0;
  return 1;
}

/* x (B, H / G, N, D) with each head repeated for the G query heads that share it. */
static double *group_repeat(const double *x, int B, int H, int G, int N, int D) {
  const size_t head = (size_t)N * D;
  double *r = malloc((size_t)B * H * head * sizeof *r);
  for (int b = 0; r && b < B; b++)
    for (int h = 0; h < H; h++)
      memcpy(r + ((size_t)b * H + h) * head, x + ((size_t)b * (H / G) + h / G) * head,
             head * sizeof *r);
  return r;
}

/* Each K/V head's rows of x (B, H, N, D) summed over the G query heads
** that share it, into (B, H / G, N, D). */
static double *group_sum(const double *x, int B, int H, int G, int N, int D) {
  const size_t head = (size_t)N * D;
  double *s = calloc((size_t)B * (H / G) * head, sizeof *s);
  for (int b = 0; s && b < B; b++)
    for (int h = 0; h < H; h++)
      for (size_t i = 0; i < head; i++)
        s[((size_t)b * (H / G) + h / G) * head + i] += x[((size_t)b * H + h) * head + i];
  return s;
}

/* ---- A case ---- */

typedef struct fuzz_case {
  const family *f;
  gen_kernel k;
  fa_problem p;   /* p.heads: Q's */
  int heads_kv;
  char what[200];
} fuzz_case;

static char dir[] = "/tmp/fatune-test-fuzz-layouts-XXXXXX";

/* A random config of f for lp, every axis of its table at a random value,
** drawn again until one fits; 0, or -1. */
static int draw_config(const family *f, const fa_problem *lp, gen_state *g, const gen_target *t,
                       gen_kernel *k) {
  for (int tries = 0; tries < 1000; tries++) {
    char config[512];
    int n = snprintf(config, sizeof config, "family=%s", f->name);
    for (size_t a = 0; a < f->naxes; a++) {
      const fam_axis *ax = &f->axes[a];
      if (!strcmp(ax->key, "dtype") || !strcmp(ax->key, "dim") || !strcmp(ax->key, "causal"))
        continue;
      int nv = 0;
      while (nv < FAM_NVALS && ax->values[nv]) nv++;
      n += snprintf(config + n, sizeof config - (size_t)n, ",%s=%s", ax->key,
                    ax->values[pick(0, nv - 1)]);
    }
    if (gen_render_config(g, config, lp, t, k) == 0) return 0;
  }
  return -1;
}

/* The variant recorded as the best for c's key in database path, as an ok
** emulator trial. */
static int record(const fuzz_case *c, const char *path, char *err, size_t n) {
  char config[1024];
  db *d;
  long long dev, var;
  if (gen_config_json(&c->k.cfg, config, sizeof config) != 0)
    return snprintf(err, n, "config too long"), -1;
  if (db_open(path, DB_CREATE, &d, err, n) != 0) return -1;
  db_device dd = {.name = "CPU emulator", .uuid = "emu", .backend = "emu"};
  db_variant dv = {c->k.cfg.family, c->k.template_version, c->k.name, c->k.hash, config,
                   c->k.source_hash, fa_op_name(c->p.op), NULL, NULL};
  db_trial tr = {.status = "ok", .max_abs_err = 0, .rel_err = 0, .lse_err = 0,
                 .median_us = NAN, .min_us = NAN, .p20_us = NAN, .p80_us = NAN, .tflops = NAN,
                 .gbps = NAN, .counters = "{\"global_bytes_read\": 1, \"global_bytes_written\": 1}",
                 .problem = {.dtype = fa_dtype_name(c->p.dtype), .dim = c->p.dim,
                             .seq_q = c->p.seq_q, .seq_k = c->p.seq_k, .batch = c->p.batch,
                             .heads = c->p.heads, .causal = c->p.causal,
                             .op = fa_op_name(c->p.op), .dim_v = c->p.dim_v}};
  int rc = db_device_id(d, &dd, &dev, err, n) || db_variant_id(d, &dv, &var, err, n);
  tr.variant_id = var, tr.device_id = dev;
  if (!rc) rc = db_trial_put(d, &tr, err, n);
  db_close(d);
  return rc ? -1 : 0;
}

/* A layout and a row padding for a tensor of c's variant: padded rows a
** multiple of the alignment its loads and stores need. */
static void layout(const fuzz_case *c, int *bnhd, int *pad) {
  const int es = fa_dtype_size(c->p.dtype);
  const int unit = c->k.io_align > es ? c->k.io_align / es : 1;
  static const int pads[] = {0, 1, 3, 5};
  *bnhd = pick(0, 1);
  *pad = pads[pick(0, 3)] * unit;
}

/* The forward pass: O and lse against the reference, per (batch, head)
** with the K/V head of its group. */
static void check_fwd(fatune_ctx *ctx, fuzz_case *c) {
  const fa_problem *p = &c->p;
  const int B = p->batch, H = p->heads, HK = c->heads_kv, G = H / HK;
  const int NQ = p->seq_q, NK = p->seq_k, D = p->dim, DV = fa_problem_dim_v(p);
  tensor q, k, v, o;
  int lb[4], lp[4];
  for (int i = 0; i < 4; i++) layout(c, &lb[i], &lp[i]);
  const size_t rows = (size_t)B * H * NQ, ls = (size_t)fa_lse_size(p->dtype);
  double *lse_ref = malloc(rows * sizeof *lse_ref), *oref = NULL, *kx = NULL, *vx = NULL;
  void *lse = malloc(rows * ls);
  if (tensor_make(&q, p->dtype, B, H, NQ, D, lb[0], lp[0], 1) ||
      tensor_make(&k, p->dtype, B, HK, NK, D, lb[1], lp[1], 1) ||
      tensor_make(&v, p->dtype, B, HK, NK, DV, lb[2], lp[2], 1) ||
      tensor_make(&o, p->dtype, B, H, NQ, DV, lb[3], lp[3], 0) || !lse || !lse_ref) {
    CHECK(0, "out of memory");
    goto done;
  }
  char name[128];
  fatune_choice how;
  const fatune_problem fp = {.batch = B, .heads = H, .seq_q = NQ, .seq_k = NK, .dim = D,
                             .dtype = (fatune_dtype)p->dtype, .causal = p->causal,
                             .scale = p->scale, .dim_v = p->dim_v};
  CHECK(fatune_choose(ctx, &fp, name, sizeof name, &how) == FATUNE_OK && how == FATUNE_EXACT &&
        !strcmp(name, c->k.name), "%s: the library chose %s (%d), not the recorded variant: %s",
        c->what, name, (int)how, fatune_errmsg());
  fatune_attention_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .lse = lse,
                             .causal = p->causal, .scale = p->scale};
  if (fatune_attention(ctx, &a) != FATUNE_OK) {
    CHECK(0, "%s: %s", c->what, fatune_errmsg());
    goto done;
  }
  fa_problem all = *p;
  all.op = FA_OP_FWD;
  const fa_layout lq = fa_layout_contiguous(&all, NQ), lk = fa_layout_contiguous(&all, NK);
  const fa_layout lv = fa_layout_contiguous_v(&all, NK), lo = fa_layout_contiguous_v(&all, NQ);
  oref = malloc(rows * DV * sizeof *oref);
  kx = group_repeat(k.ref, B, H, G, NK, D), vx = group_repeat(v.ref, B, H, G, NK, DV);
  if (!oref || !kx || !vx || ref_attention(&all, q.ref, lq, kx, lk, vx, lv, oref, lo, lse_ref)) {
    CHECK(0, "%s: the reference failed", c->what);
    goto done;
  }
  double le2 = 0, lr2 = 0;
  int lse_ok = 1;
  for (size_t i = 0; i < rows; i++) {
    const double got = fa_elem_get(lse, p->dtype == FA_FP64 ? FA_FP64 : FA_FP32, i);
    if (isinf(lse_ref[i])) {   /* a row with no key */
      lse_ok &= isinf(got) && got < 0;
      continue;
    }
    lse_ok &= isfinite(got);
    le2 += (got - lse_ref[i]) * (got - lse_ref[i]), lr2 += lse_ref[i] * lse_ref[i];
  }
  const double tol = val_tolerance(p->dtype), eo = tensor_err(&o, oref);
  const double el = lse_ok ? sqrt(le2 / (lr2 > 0 ? lr2 : 1)) : INFINITY;
  CHECK(eo <= tol && el <= tol, "%s: o %.3g, lse %.3g (tolerance %.3g)", c->what, eo, el, tol);
  CHECK(padding_kept(&o), "%s: a kernel wrote into O's padding", c->what);
  printf("%-58s o %.2e lse %.2e\n", c->what, eo, el);
done:
  free(lse), free(lse_ref), free(oref), free(kx), free(vx);
  tensor *ts[] = {&q, &k, &v, &o};
  for (int i = 0; i < 4; i++) tensor_free(ts[i]);
}

/* The backward pass, from the reference's O and logsumexp: dQ, dK, dV
** against the reference backward, K and V repeated over each group and
** dK, dV summed over it. */
static void check_bwd(fatune_ctx *ctx, fuzz_case *c) {
  const fa_problem *p = &c->p;
  const int B = p->batch, H = p->heads, HK = c->heads_kv, G = H / HK;
  const int NQ = p->seq_q, NK = p->seq_k, D = p->dim, DV = fa_problem_dim_v(p);
  tensor t[8];   /* q k v o dout dq dk dv */
  memset(t, 0, sizeof t);
  const int heads[8] = {H, HK, HK, H, H, H, HK, HK}, seqs[8] = {NQ, NK, NK, NQ, NQ, NQ, NK, NK};
  const int dims[8] = {D, D, DV, DV, DV, D, D, DV};
  const size_t rows = (size_t)B * H * NQ, ls = (size_t)fa_lse_size(p->dtype);
  double *lse_ref = malloc(rows * sizeof *lse_ref), *oref = malloc(rows * DV * sizeof *oref);
  double *gq = malloc(rows * D * sizeof *gq), *gk = malloc((size_t)B * H * NK * D * sizeof *gk);
  double *gv = malloc((size_t)B * H * NK * DV * sizeof *gv), *kx = NULL, *vx = NULL;
  double *sk = NULL, *sv = NULL, *sk_mag = NULL;
  double *gq_mag = malloc(rows * D * sizeof *gq_mag);
  double *gk_mag = malloc((size_t)B * H * NK * D * sizeof *gk_mag);
  void *lse = malloc(rows * ls);
  int ok = lse_ref && oref && gq && gk && gv && lse && gq_mag && gk_mag;
  for (int i = 0; ok && i < 8; i++) {
    int bnhd, pad;
    layout(c, &bnhd, &pad);
    ok = tensor_make(&t[i], p->dtype, B, heads[i], seqs[i], dims[i], bnhd, pad, i < 3 || i == 4) == 0;
  }
  if (!ok || !(kx = group_repeat(t[1].ref, B, H, G, NK, D)) ||
      !(vx = group_repeat(t[2].ref, B, H, G, NK, DV))) {
    CHECK(0, "out of memory");
    goto done;
  }
  fa_problem fwd = *p;
  fwd.op = FA_OP_FWD;
  const fa_layout lq = fa_layout_contiguous(&fwd, NQ), lk = fa_layout_contiguous(&fwd, NK);
  const fa_layout lv = fa_layout_contiguous_v(&fwd, NK), lo = fa_layout_contiguous_v(&fwd, NQ);
  if (ref_attention(&fwd, t[0].ref, lq, kx, lk, vx, lv, oref, lo, lse_ref) != 0) {
    CHECK(0, "%s: the reference failed", c->what);
    goto done;
  }
  tensor_put(&t[3], oref);
  for (size_t i = 0; i < rows; i++)
    fa_elem_put(lse, p->dtype == FA_FP64 ? FA_FP64 : FA_FP32, i, lse_ref[i]);
  fatune_backward_args a = {.q = t[0].t, .k = t[1].t, .v = t[2].t, .o = t[3].t, .dout = t[4].t,
                            .dq = t[5].t, .dk = t[6].t, .dv = t[7].t, .lse = lse,
                            .causal = p->causal, .scale = p->scale};
  if (fatune_attention_backward(ctx, &a) != FATUNE_OK) {
    CHECK(0, "%s: %s", c->what, fatune_errmsg());
    goto done;
  }
  /* From the rounded inputs and O as the kernel read them. */
  const ref_bwd_io io = {t[0].ref, kx, vx, t[4].ref, lq, lk, lv, lo, gq, gk, gv, lq, lk, lv,
                         gq_mag, gk_mag, NULL};
  if (ref_attention_backward(p, &io) != 0 || !(sk = group_sum(gk, B, H, G, NK, D)) ||
      !(sv = group_sum(gv, B, H, G, NK, DV)) || !(sk_mag = group_sum(gk_mag, B, H, G, NK, D))) {
    CHECK(0, "%s: the reference backward failed", c->what);
    goto done;
  }
  const double tol = val_tolerance(p->dtype);
  const double e[3] = {tensor_err_mag(&t[5], gq, gq_mag), tensor_err_mag(&t[6], sk, sk_mag),
                       tensor_err(&t[7], sv)};
  CHECK(e[0] <= tol && e[1] <= tol && e[2] <= tol, "%s: dq %.3g, dk %.3g, dv %.3g (tolerance %.3g)",
        c->what, e[0], e[1], e[2], tol);
  for (int i = 5; i < 8; i++)
    CHECK(padding_kept(&t[i]), "%s: a kernel wrote into %s's padding", c->what,
          i == 5 ? "dQ" : i == 6 ? "dK" : "dV");
  printf("%-58s dq %.2e dk %.2e dv %.2e\n", c->what, e[0], e[1], e[2]);
done:
  free(lse), free(lse_ref), free(oref), free(gq), free(gk), free(gv), free(kx), free(vx);
  free(sk), free(sv), free(sk_mag), free(gq_mag), free(gk_mag);
  for (int i = 0; i < 8; i++) tensor_free(&t[i]);
}

/* A random variant of f on a random problem of its own, recorded, run. */
static void run_case(int i, const family *f, gen_state *g, const gen_target *t) {
  fuzz_case c = {.f = f};
  const fam_problem *fp = &f->problems[pick(0, (int)f->nproblems - 1)];
  fa_problem lp = {.batch = 1, .heads = 1, .seq_q = f->list_seq, .seq_k = f->list_seq,
                   .dim = fp->dim, .dtype = fp->dtype, .causal = pick(0, 1), .op = f->op};
  if (f->ndims_v && pick(0, 2) == 0) {   /* V's head dim apart from Q's */
    const int *dv = f->dims_v[pick(0, (int)f->ndims_v - 1)];
    lp.dim = dv[0], lp.dim_v = dv[1];
  }
  if (draw_config(f, &lp, g, t, &c.k) != 0) {
    CHECK(0, "%s d%d/%d: no config of 1000 drawn fits: %s", f->name, lp.dim, lp.dim_v,
          gen_errmsg(g));
    return;
  }
  static const int groups[] = {1, 1, 2, 3, 4};
  const int bm = (int)fam_config_int(c.k.config, "block_m");
  const int bn = (int)fam_config_int(c.k.config, "block_n");
  c.heads_kv = pick(1, 2);
  c.p = (fa_problem){.batch = pick(1, 2), .heads = c.heads_kv * groups[pick(0, 4)],
                     .dim = lp.dim, .dim_v = lp.dim_v, .dtype = fp->dtype, .causal = lp.causal,
                     .op = f->op};
  c.p.seq_q = around(bm, 0, 2);
  c.p.seq_k = pick(0, 1) ? around(bn, 0, 3) : c.p.seq_q + pick(-bn, 2 * bn);
  if (c.p.seq_k < 1) c.p.seq_k = 1;
  if (pick(0, 3) == 0) c.p.scale = 0.05 + 0.45 * (double)pick(0, 1000) / 1000.0;
  snprintf(c.what, sizeof c.what, "%s b%d h%d/%d %dx%d", c.k.name, c.p.batch, c.p.heads,
           c.heads_kv, c.p.seq_q, c.p.seq_k);
  char path[256], err[512];
  snprintf(path, sizeof path, "%s/case-%d.db", dir, i);
  fatune_ctx *ctx = NULL;
  const fatune_options opts = {.db_path = path, .backend = "emu"};
  if (record(&c, path, err, sizeof err) != 0) CHECK(0, "%s: recording it: %s", c.what, err);
  else if (fatune_open(&opts, &ctx) != FATUNE_OK) CHECK(0, "fatune_open: %s", fatune_errmsg());
  else if (c.p.op == FA_OP_BWD) check_bwd(ctx, &c);
  else check_fwd(ctx, &c);
  if (ctx) fatune_close(ctx);
  gen_kernel_free(&c.k);
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 6;
  if (n < 1 || n > MAX_CASES) {
    fprintf(stderr, "usage: test_fuzz_layouts [CASES (1..%d) [FAMILY...]]\n", MAX_CASES);
    return 2;
  }
  int selected[NFAMILIES];
  if (fam_select(argc > 1 ? argc - 1 : argc, argc > 1 ? argv + 1 : argv, selected) != 0) return 2;
  const char *env = getenv("FATUNE_TEST_SEED");
  const unsigned long long seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu (FATUNE_TEST_SEED=%llu replays it)\n", seed, seed);
  rng_state = seed;
  const family *fams[NFAMILIES];
  size_t nf = 0;
  for (size_t f = 0; f < NFAMILIES; f++)
    if (selected[f] && !families[f].arch) fams[nf++] = &families[f];
    else if (selected[f]) printf("%s: written for %s, not the library's target on the emulator\n",
                                 families[f].name, families[f].arch);
  if (!nf) {
    printf("SKIPPED: no family the library runs on the emulator was selected\n");
    return 77;
  }
  char err[512];
  gen_state *g;
  gen_target t;
  if (!mkdtemp(dir) || gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  if (gen_target_for_arch(g, gen_default_arch(g), 0, 0, &t) != 0) {
    fprintf(stderr, "target: %s\n", gen_errmsg(g));
    return 1;
  }
  for (int i = 0; i < n; i++) run_case(i, fams[(size_t)i % nf], g, &t);
  gen_close(g);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_fuzz_layouts");
}
