/*
** test_api.c
** fatune_attention, the call that takes tensors, on the emulator:
**  - (batch, seq, heads, dim) tensors and padded strides, grouped-query
**    and multi-query attention, causal with seq_q != seq_k, fp32 and fp16:
**    O matches the float64 reference, the logsumexp too;
**  - lse NULL, then the same problem again (the scratch buffer reused),
**    then a larger one (grown): all right;
**  - each bad argument is FATUNE_EINVAL with a message naming the tensor
**    and the stride, and nothing is written: among them O over Q, K or V,
**    O's rows over each other, lse over a tensor, a scale of 1e308;
**    inputs that share memory are accepted;
**  - fatune_attention_backward on (batch, seq, heads, dim) tensors with
**    padded rows, fp32 and fp64, causal with seq_q != seq_k: dQ, dK, dV
**    match the float64 reference backward, with and without a gradient
**    of the logsumexp; its bad arguments (lse NULL, dK over K, dQ over
**    dV, a shape off, GQA) are FATUNE_EINVAL naming them, nothing written;
**    the Hopper family's (wgbwd, on the emulator at sm_90a) where recorded;
**  - the host cost of a call with the kernel in memory, measured by
**    fatune_attention_plan (all but the launch), is under 5 us (in an
**    optimised build).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fa_mod.h"
#include "fatune.h"
#include "gen.h"
#include "record.h"
#include "reference.h"

static char dir[] = "/tmp/fatune-test-api-XXXXXX";
static fatune_ctx *ctx;
/* A modification run_shape's calls pass, and the same one for the reference. */
static const fatune_mod *call_mod;
static const fa_mod *ref_mod;
static const fa_mod_data *ref_data;   /* ref_mod's captured tensors, or NULL */

static unsigned long long rng = 7;
static double uniform(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 - 0.5;
}

/* A tensor of shape (b, h, n, d) laid out as (b, n, h, d) when bnhd, with
** pad extra elements after each row of d; its values also kept as doubles,
** contiguous (b, h, n, d). */
typedef struct tensor {
  fatune_tensor t;
  double *ref;
} tensor;

static int tensor_make(tensor *x, fatune_dtype dt, int b, int h, int n, int d, int bnhd,
                       int pad, int fill) {
  const long long row = d + pad;
  memset(x, 0, sizeof *x);
  x->t.dtype = dt;
  x->t.shape[0] = b, x->t.shape[1] = h, x->t.shape[2] = n, x->t.shape[3] = d;
  x->t.stride[3] = 1;
  x->t.stride[bnhd ? 1 : 2] = row;
  x->t.stride[bnhd ? 2 : 1] = row * (bnhd ? h : n);
  x->t.stride[0] = row * h * n;
  const size_t total = (size_t)b * h * n * row;
  x->t.data = malloc(total * (size_t)fa_dtype_size((fa_dtype)dt));
  x->ref = malloc((size_t)b * h * n * d * sizeof *x->ref);
  if (!x->t.data || !x->ref) return -1;
  memset(x->t.data, 0xFF, total * (size_t)fa_dtype_size((fa_dtype)dt));
  size_t i = 0;
  for (int ib = 0; ib < b; ib++)
    for (int ih = 0; ih < h; ih++)
      for (int in = 0; in < n; in++)
        for (int id = 0; id < d; id++, i++) {
          const size_t at = (size_t)(ib * x->t.stride[0] + ih * x->t.stride[1] +
                                     in * x->t.stride[2] + id);
          x->ref[i] = fill ? fa_elem_put(x->t.data, (fa_dtype)dt, at, uniform()) : 0;
        }
  return 0;
}

static void tensor_free(tensor *x) {
  free(x->t.data), free(x->ref);
}

/* The largest error of O and the logsumexp against the float64 reference,
** K/V head h / group for Q head h. */
static double error_of(const tensor *q, const tensor *k, const tensor *v, const tensor *o,
                       const double *lse, fatune_dtype dt, int causal, double *lse_err) {
  const int B = (int)q->t.shape[0], H = (int)q->t.shape[1], NQ = (int)q->t.shape[2];
  const int NK = (int)k->t.shape[2], D = (int)q->t.shape[3], G = H / (int)k->t.shape[1];
  fa_problem one = {.batch = 1, .heads = 1, .seq_q = NQ, .seq_k = NK, .dim = D,
                    .dtype = (fa_dtype)dt, .causal = causal, .mod = ref_mod,
                    .mod_data = ref_data};
  const fa_layout lq = fa_layout_contiguous(&one, NQ), lk = fa_layout_contiguous(&one, NK);
  double *ro = malloc((size_t)NQ * D * sizeof *ro), *rl = malloc((size_t)NQ * sizeof *rl);
  double worst = INFINITY;
  *lse_err = INFINITY;
  if (!ro || !rl) goto done;
  worst = 0, *lse_err = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const size_t qo = ((size_t)b * H + h) * NQ * D;
      const size_t ko = ((size_t)b * (H / G) + h / G) * NK * D;
      if (ref_attention(&one, q->ref + qo, lq, k->ref + ko, lk, v->ref + ko, lk, ro, lq, rl)) {
        worst = INFINITY;
        goto done;
      }
      for (int r = 0; r < NQ; r++) {
        for (int d = 0; d < D; d++) {
          const size_t at = (size_t)(b * o->t.stride[0] + h * o->t.stride[1] +
                                     r * o->t.stride[2] + d);
          const double e = fabs(fa_elem_get(o->t.data, (fa_dtype)dt, at) - ro[(size_t)r * D + d]);
          if (!(e <= worst)) worst = e;
        }
        if (lse) {
          const double e = fabs(lse[((size_t)b * H + h) * NQ + r] - rl[r]);
          if (!(e <= *lse_err)) *lse_err = e;
        }
      }
    }
done:
  free(ro), free(rl);
  return worst;
}

typedef struct shape {
  const char *what;
  fatune_dtype dt;
  int b, hq, hk, nq, nk, d, bnhd, pad, causal;
  double tol;
} shape;

static void run_shape(const shape *s) {
  tensor q, k, v, o;
  rng = 7;
  if (tensor_make(&q, s->dt, s->b, s->hq, s->nq, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&k, s->dt, s->b, s->hk, s->nk, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&v, s->dt, s->b, s->hk, s->nk, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&o, s->dt, s->b, s->hq, s->nq, s->d, !s->bnhd, s->pad, 0)) {
    CHECK(0, "%s: out of memory", s->what);
    return;
  }
  const size_t rows = (size_t)s->b * s->hq * s->nq;
  float *lse32 = malloc(rows * sizeof *lse32);
  double *lse = malloc(rows * sizeof *lse);
  fatune_attention_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .causal = s->causal,
                             .mod = call_mod};
  if (s->dt == FATUNE_FP64) a.lse = lse;
  else a.lse = lse32;
  fatune_status st = lse && lse32 ? fatune_attention(ctx, &a) : FATUNE_ENOMEM;
  CHECK(st == FATUNE_OK, "%s: status %d: %s", s->what, (int)st, fatune_errmsg());
  if (st == FATUNE_OK) {
    if (s->dt != FATUNE_FP64)
      for (size_t i = 0; i < rows; i++) lse[i] = lse32[i];
    double le, e = error_of(&q, &k, &v, &o, lse, s->dt, s->causal, &le);
    CHECK(e < s->tol && le < s->tol, "%s: O error %.3g, lse error %.3g (tolerance %g)",
          s->what, e, le, s->tol);
    /* Without a logsumexp: the scratch one, twice. */
    a.lse = NULL;
    for (int i = 0; i < 2; i++) {
      memset(o.t.data, 0xFF, (size_t)2 * sizeof(double));
      st = fatune_attention(ctx, &a);
      e = error_of(&q, &k, &v, &o, NULL, s->dt, s->causal, &le);
      CHECK(st == FATUNE_OK && e < s->tol, "%s, lse NULL (%d): status %d (%s), error %.3g",
            s->what, i, (int)st, fatune_errmsg(), e);
    }
  }
  free(lse), free(lse32);
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

static void test_shapes(void) {
  static const shape shapes[] = {
    {"fp32 bhnd", FATUNE_FP32, 2, 2, 2, 24, 40, 16, 0, 0, 1, 1e-5},
    {"fp32 bnhd GQA 4/2, padded rows", FATUNE_FP32, 1, 4, 2, 24, 40, 16, 1, 3, 1, 1e-5},
    {"fp64 bnhd MQA 3/1", FATUNE_FP64, 2, 3, 1, 33, 17, 8, 1, 0, 0, 1e-12},
    {"fp16 bnhd GQA 4/2, causal 40 of 24", FATUNE_FP16, 1, 4, 2, 40, 24, 16, 1, 8, 1, 2e-3},
    {"bf16 bhnd MQA 2/1", FATUNE_BF16, 1, 2, 1, 16, 48, 16, 0, 0, 0, 1.6e-2},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
}

/* Bad arguments: FATUNE_EINVAL, the message naming what is wrong, O (all
** ones, as tensor_make leaves it) untouched. */
static void test_bad(void) {
  tensor q, k, v, o;
  if (tensor_make(&q, FATUNE_FP16, 1, 4, 16, 16, 1, 0, 1) ||
      tensor_make(&k, FATUNE_FP16, 1, 2, 16, 16, 1, 0, 1) ||
      tensor_make(&v, FATUNE_FP16, 1, 2, 16, 16, 1, 0, 1) ||
      tensor_make(&o, FATUNE_FP16, 1, 4, 16, 16, 1, 0, 0)) {
    CHECK(0, "out of memory");
    return;
  }
  const fatune_attention_args good = {.q = q.t, .k = k.t, .v = v.t, .o = o.t};
  float lse[64];
  enum { NBAD = 17 };
  struct { const char *what, *needle; fatune_attention_args a; } bad[NBAD];
  for (int i = 0; i < NBAD; i++) bad[i].a = good;
  bad[0].what = "k's seq stride of 20 fp16", bad[0].needle = "k's stride 2 (seq)";
  bad[0].a.k.stride[2] = 20;
  bad[1].what = "3 K/V heads for 4", bad[1].needle = "do not divide";
  bad[1].a.k.shape[1] = 3, bad[1].a.v.shape[1] = 3;
  bad[2].what = "dim not contiguous", bad[2].needle = "v's stride 3 (dim)";
  bad[2].a.v.stride[3] = 2;
  bad[3].what = "o's seq stride 0", bad[3].needle = "o's stride 2 (seq) is 0";
  bad[3].a.o.stride[2] = 0;
  bad[4].what = "v fp32", bad[4].needle = "v's dtype";
  bad[4].a.v.dtype = FATUNE_FP32;
  bad[5].what = "q misaligned", bad[5].needle = "q is not 16-byte aligned";
  bad[5].a.q.data = (char *)q.t.data + 2;
  bad[6].what = "negative stride", bad[6].needle = "q's stride 1 (heads) is -16";
  bad[6].a.q.stride[1] = -16;
  bad[7].what = "o's seq 15", bad[7].needle = "o's seq is 15";
  bad[7].a.o.shape[2] = 15;
  bad[8].what = "q's seq stride 2^48", bad[8].needle = "q spans more than 2^48 elements";
  bad[8].a.q.stride[2] = 1LL << 48;
  /* O written over an input, or over itself; lse over any tensor. K and V
  ** (half O's size) are moved into O, not O onto them. */
  bad[9].what = "o is k", bad[9].needle = "o overlaps k";
  bad[9].a.k.data = o.t.data;
  bad[10].what = "o is v", bad[10].needle = "o overlaps v";
  bad[10].a.v.data = o.t.data;
  bad[11].what = "o is q", bad[11].needle = "o overlaps q";
  bad[11].a.o.data = q.t.data;
  bad[12].what = "o's rows overlap", bad[12].needle = "o's stride 2 (seq) is 1";
  bad[12].a.o.stride[2] = 1;
  bad[13].what = "o's heads overlap its rows", bad[13].needle = "o's stride 1 (heads) is 8";
  bad[13].a.o.stride[1] = 8;
  bad[14].what = "lse inside o", bad[14].needle = "lse overlaps o";
  bad[14].a.lse = (char *)o.t.data + 64;
  bad[15].what = "lse inside q", bad[15].needle = "lse overlaps q";
  bad[15].a.lse = q.t.data;
  bad[16].what = "scale 1e308", bad[16].needle = "scale 1e+308";
  bad[16].a.scale = 1e308;
  for (int i = 0; i < NBAD; i++) {
    fatune_status st = fatune_attention(ctx, &bad[i].a);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), bad[i].needle),
          "%s: status %d, '%s'", bad[i].what, (int)st, fatune_errmsg());
    CHECK(((unsigned char *)o.t.data)[0] == 0xFF, "%s: O written", bad[i].what);
  }
  CHECK(fatune_attention(ctx, NULL) == FATUNE_EINVAL, "NULL arguments");
  /* Inputs may share memory (K and V one tensor, Q and K too): they are only read. */
  fatune_attention_args shared = good;
  shared.lse = lse;
  shared.v.data = k.t.data;
  CHECK(fatune_attention(ctx, &shared) == FATUNE_OK, "v is k: %s", fatune_errmsg());
  shared.k.data = shared.v.data = q.t.data;
  CHECK(fatune_attention(ctx, &shared) == FATUNE_OK, "k and v are q: %s", fatune_errmsg());
  shared.scale = 1e30;
  CHECK(fatune_attention(ctx, &shared) == FATUNE_OK, "scale 1e30: %s", fatune_errmsg());
  CHECK(fatune_attention(ctx, &good) == FATUNE_OK, "the good call: %s", fatune_errmsg());
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

/* What a call costs on the host once its kernel is in memory: the best of
** five rounds, against a machine's other load. The bound is the product's
** in an optimised build; a sanitized or unoptimised one is only checked
** for a gross regression. */
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define OVERHEAD_BOUND_US 50.0
#else
#define OVERHEAD_BOUND_US 5.0
#endif

/* Norm-relative error of a strided gradient tensor against a contiguous
** float64 one. */
static double grad_err(const tensor *x, const double *ref) {
  const fatune_tensor *t = &x->t;
  double e2 = 0, r2 = 0;
  size_t i = 0;
  for (long long b = 0; b < t->shape[0]; b++)
    for (long long h = 0; h < t->shape[1]; h++)
      for (long long n = 0; n < t->shape[2]; n++)
        for (long long d = 0; d < t->shape[3]; d++, i++) {
          const size_t at = (size_t)(b * t->stride[0] + h * t->stride[1] + n * t->stride[2] + d);
          const double g = fa_elem_get(t->data, (fa_dtype)t->dtype, at), e = g - ref[i];
          if (!isfinite(g)) return INFINITY;
          e2 += e * e, r2 += ref[i] * ref[i];
        }
  return sqrt(e2 / (r2 > 0 ? r2 : 1));
}

/* Each K/V head's rows of x (B, H, N, D) summed over the G query heads
** that share it, into (B, H / G, N, D); with G 1 a copy. */
static double *group_sum(const double *x, int B, int H, int G, int N, int D) {
  const size_t head = (size_t)N * D;
  double *s = calloc((size_t)B * (H / G) * head, sizeof *s);
  for (int b = 0; s && b < B; b++)
    for (int h = 0; h < H; h++)
      for (size_t i = 0; i < head; i++)
        s[((size_t)b * (H / G) + h / G) * head + i] += x[((size_t)b * H + h) * head + i];
  return s;
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

/* The forward pass through fatune_attention, then the backward pass, H
** query heads over HK K/V heads; the reference from the float64 copies, K
** and V repeated over each group and dK, dV summed over it (a gradient of
** lse: by the identity dS = P (dP - D + dlse), taken as dO's part of D,
** checked apart below). */
static void run_backward_on(fatune_ctx *ctx, fatune_dtype dt, int H, int HK, int bnhd, int pad,
                            int causal, double max_rel_err, double tol) {
  const int B = 2, NQ = 37, NK = 29, D = 16, G = H / HK;
  tensor q, k, v, o, dout, dq, dk, dv;
  rng = 11;
  if (tensor_make(&q, dt, B, H, NQ, D, bnhd, pad, 1) || tensor_make(&k, dt, B, HK, NK, D, bnhd, pad, 1) ||
      tensor_make(&v, dt, B, HK, NK, D, bnhd, pad, 1) || tensor_make(&o, dt, B, H, NQ, D, bnhd, 0, 0) ||
      tensor_make(&dout, dt, B, H, NQ, D, !bnhd, pad, 1) ||
      tensor_make(&dq, dt, B, H, NQ, D, bnhd, pad, 0) || tensor_make(&dk, dt, B, HK, NK, D, !bnhd, 0, 0) ||
      tensor_make(&dv, dt, B, HK, NK, D, bnhd, pad, 0)) {
    CHECK(0, "out of memory");
    return;
  }
  const size_t rows = (size_t)B * H * NQ, ls = dt == FATUNE_FP64 ? 8 : 4;
  void *lse = malloc(rows * ls);
  fatune_attention_args fa = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .lse = lse, .causal = causal,
                              .mod = call_mod};
  fatune_status st = fatune_attention(ctx, &fa);
  CHECK(st == FATUNE_OK, "forward: %s", fatune_errmsg());
  fatune_backward_args ba = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .dout = dout.t, .dq = dq.t,
                             .dk = dk.t, .dv = dv.t, .lse = lse, .causal = causal,
                             .mod = call_mod, .max_rel_err = max_rel_err};
  st = fatune_attention_backward(ctx, &ba);
  CHECK(st == FATUNE_OK, "backward: %s", fatune_errmsg());
  fa_problem p = {.batch = B, .heads = H, .seq_q = NQ, .seq_k = NK, .dim = D,
                  .dtype = (fa_dtype)dt, .causal = causal, .op = FA_OP_BWD, .mod = ref_mod,
                  .mod_data = ref_data};
  const fa_layout lq = fa_layout_contiguous(&p, NQ), lk = fa_layout_contiguous(&p, NK);
  double *rq = malloc(rows * D * sizeof *rq), *rk = malloc((size_t)B * H * NK * D * sizeof *rk);
  double *rv = malloc((size_t)B * H * NK * D * sizeof *rv);
  double *kx = group_repeat(k.ref, B, H, G, NK, D), *vx = group_repeat(v.ref, B, H, G, NK, D);
  const ref_bwd_io io = {q.ref, kx, vx, dout.ref, lq, lk, lk, lq, rq, rk, rv, lq, lk, lk,
                         NULL, NULL, NULL};
  double *sk = NULL, *sv = NULL;
  if (rq && rk && rv && kx && vx && ref_attention_backward(&p, &io) == 0 &&
      (sk = group_sum(rk, B, H, G, NK, D)) && (sv = group_sum(rv, B, H, G, NK, D))) {
    const double e[3] = {grad_err(&dq, rq), grad_err(&dk, sk), grad_err(&dv, sv)};
    const char *mod = call_mod ? fatune_mod_label(call_mod) : "";
    CHECK(e[0] < tol && e[1] < tol && e[2] < tol, "%s%s %s, %d/%d heads: dq %.3g dk %.3g dv %.3g",
          fa_dtype_name((fa_dtype)dt), causal ? " causal" : "", mod, H, HK, e[0], e[1], e[2]);
    printf("fatune_attention_backward %s %s%s%s%s%s, %d query heads over %d K/V heads: "
           "dq %.2e dk %.2e dv %.2e\n", fa_dtype_name((fa_dtype)dt), bnhd ? "bnhd" : "bhnd",
           causal ? " causal" : "", pad ? ", padded rows" : "", *mod ? " under " : "", mod, H,
           HK, e[0], e[1], e[2]);
    /* A gradient of lse that is the same for every row of a (batch, head)
    ** changes nothing: the rows of P sum to one, so dS's rows lose it. */
    void *dlse = malloc(rows * ls);
    for (size_t i = 0; dlse && i < rows; i++)
      fa_elem_put(dlse, dt == FATUNE_FP64 ? FA_FP64 : FA_FP32, i, 0.0);
    ba.dlse = dlse;
    st = dlse ? fatune_attention_backward(ctx, &ba) : FATUNE_ENOMEM;
    CHECK(st == FATUNE_OK && grad_err(&dq, rq) == e[0] && grad_err(&dk, sk) == e[1],
          "a zero dlse changes the gradients: %s", fatune_errmsg());
    free(dlse);
  } else {
    CHECK(0, "the reference backward failed");
  }
  free(rq), free(rk), free(rv), free(lse), free(kx), free(vx), free(sk), free(sv);
  tensor *all[] = {&q, &k, &v, &o, &dout, &dq, &dk, &dv};
  for (size_t i = 0; i < 8; i++) tensor_free(all[i]);
}

static void run_backward(fatune_dtype dt, int H, int HK, int bnhd, int pad, int causal,
                         double tol) {
  run_backward_on(ctx, dt, H, HK, bnhd, pad, causal, 0, tol);
}

/* The Hopper family's backward pass (wgbwd: wgmma, TMA) through the
** library, on the emulator at sm_90a: its default recorded as the best
** for the problem run_backward_on's calls make, then asked for under an
** error budget, which nothing else recorded meets (the call would be
** FATUNE_ENOTUNED, never the default): GQA and causal, padded rows. */
static void test_backward_hopper(void) {
  char path[160], name[256], err[256];
  snprintf(path, sizeof path, "%s/hopper.db", dir);
  gen_state *g = NULL;
  gen_target t;
  int det;
  const fa_problem p = {.batch = 2, .heads = 4, .seq_q = 37, .seq_k = 29, .dim = 16,
                        .dtype = FA_BF16, .causal = 1, .op = FA_OP_BWD};
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90a", 0, 0, &t) != 0 ||
      record(g, &t, "family=wgbwd", &p, path, 1e-3, name, sizeof name, &det) != 0) {
    CHECK(0, "recording wgbwd's default: %s", g ? gen_errmsg(g) : err);
    if (g) gen_close(g);
    return;
  }
  gen_close(g);
  CHECK(!strncmp(name, "wgbwd-bf16-d16-", 15) && !det, "recorded %s", name);
  fatune_ctx *hopper = NULL;
  const fatune_options opts = {.db_path = path, .backend = "emu", .emu_arch = "sm_90a"};
  if (fatune_open(&opts, &hopper) != FATUNE_OK) {
    CHECK(0, "fatune_open at sm_90a: %s", fatune_errmsg());
    return;
  }
  printf("%s: ", name);
  run_backward_on(hopper, FATUNE_BF16, 4, 2, 1, 8, 1, 1e-2, 1e-2);
  fatune_close(hopper);
}

/* Bad backward arguments: FATUNE_EINVAL naming them, dq untouched. */
static void test_backward_bad(void) {
  tensor q, k, v, o, dout, dq, dk, dv;
  rng = 5;
  if (tensor_make(&q, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 1) || tensor_make(&k, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 1) ||
      tensor_make(&v, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 1) || tensor_make(&o, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 1) ||
      tensor_make(&dout, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 1) || tensor_make(&dq, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 0) ||
      tensor_make(&dk, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 0) || tensor_make(&dv, FATUNE_FP32, 1, 2, 8, 8, 0, 0, 0)) {
    CHECK(0, "out of memory");
    return;
  }
  memset(dq.t.data, 0xFF, 8 * 8 * 2 * sizeof(float));
  float lse[16] = {0};
  const fatune_backward_args good = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .dout = dout.t,
                                     .dq = dq.t, .dk = dk.t, .dv = dv.t, .lse = lse};
  typedef struct bad_case { const char *what, *want; fatune_backward_args a; } bad_case;
  bad_case cases[8];
  int n = 0;
  cases[n] = (bad_case){"lse NULL", "lse is NULL", good}, cases[n++].a.lse = NULL;
  cases[n] = (bad_case){"dk over k", "dk overlaps k", good}, cases[n++].a.dk = k.t;
  cases[n] = (bad_case){"dq over dv", "dq overlaps dv", good}, cases[n++].a.dq = dv.t;
  cases[n] = (bad_case){"dout short", "dout's seq is 7", good};
  cases[n++].a.dout.shape[2] = 7;
  cases[n] = (bad_case){"K/V heads not dividing Q's", "k and v have 3 heads, which do not "
                       "divide q's 2", good};
  cases[n].a.k.shape[1] = cases[n].a.v.shape[1] = 3;
  cases[n].a.dk.shape[1] = cases[n].a.dv.shape[1] = 3, n++;
  cases[n] = (bad_case){"dv's dtype", "dv's dtype 1", good};
  cases[n++].a.dv.dtype = FATUNE_FP64;
  for (int i = 0; i < n; i++) {
    const fatune_status st = fatune_attention_backward(ctx, &cases[i].a);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), cases[i].want), "%s: status %d, '%s'",
          cases[i].what, (int)st, fatune_errmsg());
  }
  unsigned char ones[8 * 8 * 2 * sizeof(float)];
  memset(ones, 0xFF, sizeof ones);
  CHECK(!memcmp(dq.t.data, ones, sizeof ones), "dq written by a refused call");
  CHECK(fatune_attention_backward(ctx, &good) == FATUNE_OK, "%s", fatune_errmsg());
  tensor *all[] = {&q, &k, &v, &o, &dout, &dq, &dk, &dv};
  for (size_t i = 0; i < 8; i++) tensor_free(all[i]);
}

static void test_overhead(void) {
  tensor q, k, v, o;
  if (tensor_make(&q, FATUNE_FP32, 1, 8, 128, 64, 1, 0, 0) ||
      tensor_make(&k, FATUNE_FP32, 1, 2, 128, 64, 1, 0, 0) ||
      tensor_make(&v, FATUNE_FP32, 1, 2, 128, 64, 1, 0, 0) ||
      tensor_make(&o, FATUNE_FP32, 1, 8, 128, 64, 1, 0, 0)) {
    CHECK(0, "out of memory");
    return;
  }
  const fatune_attention_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .causal = 1};
  char name[160];
  CHECK(fatune_attention_plan(ctx, &a, name, sizeof name) == FATUNE_OK, "%s", fatune_errmsg());
  enum { N = 100000 };
  double best = INFINITY;
  for (int round = 0; round < 5; round++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) fatune_attention_plan(ctx, &a, NULL, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 +
                       (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / N;
    if (us < best) best = us;
  }
  printf("fatune_attention_plan, kernel in memory: %.3f us per call (%s)\n", best, name);
  CHECK(best < OVERHEAD_BOUND_US, "%.3f us per call (bound %g)", best, OVERHEAD_BOUND_US);
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

/* Document ids in runs of len keys, into ids[n]. */
static void doc_runs(int *ids, int n, int len) {
  for (int i = 0; i < n; i++) ids[i] = i / len;
}

/* A modification over a captured tensor (the document mask): refused
** until its tensor is set; the forward and backward passes against the
** reference over the same ids; new ids change the result and make no
** kernel; an index outside the tensor fails the call; names and sizes
** that are not the tensor's refused. fm is scratch for the reference's. */
static void test_captured(gen_state *g, fa_mod *fm) {
  fatune_mod *dm = NULL;
  CHECK(fatune_mod_create(ctx, "document", NULL, &dm) == FATUNE_OK && dm, "document: %s", fatune_errmsg());
  if (!dm || gen_mod_load(g, "document", NULL, fm) != 0) {
    CHECK(0, "document: %s", gen_errmsg(g));
    fatune_mod_free(dm);
    return;
  }
  enum { NK = 50 };
  static float q[2 * 40 * 16], k[2 * NK * 16], v[2 * NK * 16], o[2 * 40 * 16];
  const fatune_tensor tq = {q, FATUNE_FP32, {1, 2, 40, 16}, {2 * 40 * 16, 40 * 16, 16, 1}};
  const fatune_tensor tk = {k, FATUNE_FP32, {1, 2, NK, 16}, {2 * NK * 16, NK * 16, 16, 1}};
  const fatune_tensor tv = {v, FATUNE_FP32, {1, 2, NK, 16}, {2 * NK * 16, NK * 16, 16, 1}};
  const fatune_tensor to = {o, FATUNE_FP32, {1, 2, 40, 16}, {2 * 40 * 16, 40 * 16, 16, 1}};
  fatune_attention_args a = {.q = tq, .k = tk, .v = tv, .o = to, .mod = dm};
  CHECK(fatune_attention(ctx, &a) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "captured tensor doc is not set"), "unset: %s", fatune_errmsg());
  int ids[NK];
  fa_mod_data data;
  char why[160];
  call_mod = dm, ref_mod = fm, ref_data = &data;
  long long made = 0;
  for (int run = 0; run < 2; run++) {
    doc_runs(ids, NK, run == 0 ? 7 : 3);
    const void *ptr[FA_MOD_MAX_TENSORS] = {ids};
    const long long len[FA_MOD_MAX_TENSORS] = {NK};
    CHECK(fatune_mod_set_tensor(dm, "doc", ids, NK) == FATUNE_OK, "set: %s", fatune_errmsg());
    CHECK(fa_mod_data_init(&data, fm, ptr, len, why, sizeof why) == 0, "%s", why);
    if (run == 1) made = fatune_programs(ctx);
    const shape s = {run ? "document, runs of 3 fp32" : "document, runs of 7 fp32", FATUNE_FP32, 1, 2, 2,
                     40, NK, 16, 0, 0, 0, 1e-5};
    run_shape(&s);
    if (run == 1)
      CHECK(fatune_programs(ctx) == made, "new ids made %lld kernels (none: the same program)",
            fatune_programs(ctx) - made);
    run_backward(FATUNE_FP32, 4, 2, 1, 3, run, 1e-5);
    run_backward(FATUNE_BF16, 4, 2, 0, 0, 0, 1e-2);
    fa_mod_data_free(&data);
  }
  ref_data = NULL;
  /* ten ids for 50 keys: the kernels read outside them and the call says so */
  CHECK(fatune_mod_set_tensor(dm, "doc", ids, 10) == FATUNE_OK, "ten ids: %s", fatune_errmsg());
  CHECK(fatune_attention(ctx, &a) == FATUNE_EINVAL && strstr(fatune_errmsg(), "outside"),
        "ten ids over 50 keys: %s", fatune_errmsg());
  CHECK(fatune_mod_set_tensor(dm, "ids", ids, 10) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "captures no tensor 'ids'"), "a wrong name: %s", fatune_errmsg());
  CHECK(fatune_mod_set_tensor(dm, "doc", ids, -1) == FATUNE_EINVAL, "a negative size");
  CHECK(fatune_mod_set_tensor(dm, "doc", NULL, 5) == FATUNE_EINVAL, "no data");
  fatune_mod_free(dm);
}

/* fatune_mod: made from a built-in and from a file's text, refused with
** the line of a mistake; a call under it against the reference under the
** same modification (whose rows are per head: head-independent ones here),
** and the plain problem's kernel kept apart from it. */
static void test_mods(void) {
  fatune_mod *m = NULL, *bad = NULL;
  CHECK(fatune_mod_create(ctx, "window=5:1", NULL, &m) == FATUNE_OK && m,
        "window=5:1: %s", fatune_errmsg());
  CHECK(m && !strcmp(fatune_mod_label(m), "window=5:1"), "its label");
  CHECK(fatune_mod_create(ctx, "window=x", NULL, &bad) == FATUNE_EINVAL && !bad &&
        strstr(fatune_errmsg(), "parameter 'x' is no number"), "a bad parameter: %s", fatune_errmsg());
  CHECK(fatune_mod_create(ctx, "mine.lua", "return {\n score = 'score +'\n}", &bad) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "mine.lua:2: score: unexpected"), "a file's mistake: %s", fatune_errmsg());
  CHECK(fatune_mod_create(NULL, "alibi", NULL, &bad) == FATUNE_EINVAL, "no context");
  gen_state *g;
  char err[256];
  fa_mod *fm = malloc(sizeof *fm);
  if (!m || !fm || gen_open(&g, err, sizeof err) != 0) {
    CHECK(0, "setting up: %s", err);
    free(fm);
    fatune_mod_free(m);
    return;
  }
  const char *text = "return { params = { { 'cap', 3.0 } }, score = 'cap * tanh(score / cap)',\n"
                     "  mask = 'kv_idx <= q_idx + (seq_k - seq_q + 1) && kv_idx >= q_idx + (seq_k - seq_q - 5)' }";
  fatune_mod *f = NULL;
  CHECK(fatune_mod_create(ctx, "capped.lua", text, &f) == FATUNE_OK && f, "a file: %s", fatune_errmsg());
  const struct { const fatune_mod *call; const char *spec, *text; const char *what; } cases[] = {
    {m, "window=5:1", NULL, "window=5:1 fp32"}, {f, "capped.lua", text, "capped.lua fp32"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] && f; i++) {
    CHECK(gen_mod_load(g, cases[i].spec, cases[i].text, fm) == 0, "%s", gen_errmsg(g));
    call_mod = cases[i].call, ref_mod = fm;
    const shape s = {cases[i].what, FATUNE_FP32, 1, 2, 2, 40, 50, 16, 0, 0, 0, 1e-5};
    run_shape(&s);
    /* the backward pass under it: the gradients of the modified attention */
    run_backward(FATUNE_FP32, 4, 2, 1, 3, 1, 1e-5);
    run_backward(FATUNE_BF16, 4, 2, 0, 0, 0, 1e-2);
  }
  test_captured(g, fm);
  /* The plain problem after the windowed one: its own kernel, unmasked. */
  call_mod = NULL, ref_mod = NULL;
  const shape plain = {"plain after window fp32", FATUNE_FP32, 1, 2, 2, 40, 50, 16, 0, 0, 0, 1e-5};
  run_shape(&plain);
  gen_close(g);
  free(fm);
  fatune_mod_free(m);
  fatune_mod_free(f);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  char db[128];
  snprintf(db, sizeof db, "%s/api.db", dir);
  fatune_options opts = {.db_path = db, .backend = "emu"};
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    fprintf(stderr, "fatune_open: %s\n", fatune_errmsg());
    return 1;
  }
  test_shapes();
  test_bad();
  test_mods();
  run_backward(FATUNE_FP32, 2, 2, 1, 3, 1, 1e-5);
  run_backward(FATUNE_FP64, 2, 2, 0, 0, 0, 1e-10);
  run_backward(FATUNE_FP64, 2, 2, 1, 2, 1, 1e-10);
  run_backward(FATUNE_FP32, 4, 2, 1, 3, 1, 1e-5);    /* GQA */
  run_backward(FATUNE_FP64, 3, 1, 0, 0, 0, 1e-10);   /* MQA */
  run_backward(FATUNE_BF16, 4, 2, 0, 0, 1, 1e-2);    /* GQA on tensor cores */
  test_backward_hopper();
  test_backward_bad();
  test_overhead();
  fatune_close(ctx);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_api");
}
