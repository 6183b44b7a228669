/*
** test_lib_fp8.c
** fp8 (e4m3) through libfatune's fatune_attention, on the emulator with
** the sm_90a target (fatune_options.emu_arch over a FATUNE_EMU_ARCH of
** sm_80, then FATUNE_EMU_ARCH), where the wg family computes it:
**  - Q, K and V in e4m3, O in bf16, the logsumexp in fp32, against the
**    float64 reference on the inputs as stored times their descales
**    (random per (batch, K/V head) in [1/2, 2), some of them NULL), by
**    norm-relative error within fp8's 2^-4 (P is rounded to e4m3 once),
**    the logsumexp within bf16's 1e-2: contiguous and causal with
**    seq_q != seq_k; (batch, seq, heads, dim) tensors with padded rows
**    and GQA 4/2; MQA 2/1 with lse NULL (the scratch one), a scale;
**    fatune_attention_forward on contiguous tensors;
**  - what the kernel writes is only O (and lse): O's padding and a guard
**    past its end keep their bytes;
**  - the refusals, each FATUNE_EINVAL with a message naming the mistake
**    and O untouched: O not bf16, descales beside bf16 inputs, a
**    misaligned descale, O over a descale, a head dim wg does not take,
**    V's head dim not Q's, and e4m3 given to the backward pass, a
**    variable-length batch, its backward pass and decoding over a KV cache;
**  - on targets without fp8 (the emulator's default sm_90, and sm_80 by
**    FATUNE_EMU_ARCH or by emu_arch over FATUNE_EMU_ARCH=sm_90a) an e4m3
**    call is FATUNE_EINVAL saying fp8 needs sm_90a and how to ask for it,
**    never a crash; fatune_choose names wg's fp8 default on sm_90a; an
**    emu_arch fatune does not know is refused at the open;
**  - .npy files of e4m3 (fatune run's inputs), '<V1' as np.save writes an
**    ml_dtypes.float8_e4m3fn array and '|V1', NumPy's own 1-byte void: all
**    256 patterns read as the host conversion gives them; '>V1' refused.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fa_problem.h"
#include "fatune.h"
#include "halfprec.h"
#include "npy.h"
#include "reference.h"

static char dir[] = "/tmp/fatune-test-lib-fp8-XXXXXX";
static fatune_ctx *ctx;   /* the emulator at sm_90a */

static unsigned long long rng = 11;
static double uniform(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 - 0.5;
}

/* A tensor of shape (b, h, n, d) laid out as (b, n, h, d) when bnhd, with
** pad extra elements after each row; its values as stored also kept as
** doubles, contiguous (b, h, n, d). Filled with 4 times uniform values,
** rounded to the dtype (e4m3's steps near 2 are 1/4: an input that fp8
** really rounds), or with 0xFF bytes when !fill. */
typedef struct tensor {
  fatune_tensor t;
  double *ref;
  size_t bytes;
} tensor;

static size_t at(const fatune_tensor *t, int b, int h, int n, int d) {
  return (size_t)(b * t->stride[0] + h * t->stride[1] + n * t->stride[2] + d);
}

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
  x->bytes = (size_t)b * h * n * row * (size_t)fa_dtype_size((fa_dtype)dt);
  /* 64 guard bytes past the end: nothing may write them. */
  x->t.data = malloc(x->bytes + 64);
  x->ref = malloc((size_t)b * h * n * d * sizeof *x->ref);
  if (!x->t.data || !x->ref) return -1;
  memset(x->t.data, 0xFF, x->bytes + 64);
  size_t i = 0;
  for (int ib = 0; ib < b; ib++)
    for (int ih = 0; ih < h; ih++)
      for (int in = 0; in < n; in++)
        for (int id = 0; id < d; id++, i++)
          x->ref[i] = fill ? fa_elem_put(x->t.data, (fa_dtype)dt, at(&x->t, ib, ih, in, id),
                                         4 * uniform())
                           : 0;
  return 0;
}

static void tensor_free(tensor *x) { free(x->t.data), free(x->ref); }

/* The bytes of o outside its elements (row padding, the guard) still 0xFF. */
static int untouched_outside(const tensor *o) {
  const unsigned char *m = o->t.data;
  const size_t es = (size_t)fa_dtype_size((fa_dtype)o->t.dtype);
  unsigned char *mine = calloc(o->bytes + 64, 1);
  if (!mine) return 0;
  for (int b = 0; b < o->t.shape[0]; b++)
    for (int h = 0; h < o->t.shape[1]; h++)
      for (int n = 0; n < o->t.shape[2]; n++)
        memset(mine + at(&o->t, b, h, n, 0) * es, 1, (size_t)o->t.shape[3] * es);
  int ok = 1;
  for (size_t i = 0; i < o->bytes + 64; i++)
    if (!mine[i] && m[i] != 0xFF) ok = 0;
  free(mine);
  return ok;
}

/* Random descales in [1/2, 2), (batch, kv heads). */
static float *descales(int n) {
  float *d = malloc((size_t)n * sizeof *d);
  for (int i = 0; d && i < n; i++) d[i] = (float)ldexp(1.5 + uniform(), (int)(rng >> 62) % 2 - 1);
  return d;
}

/* The norm-relative errors of O and the logsumexp against the float64
** reference on the stored inputs times their descales (query head h taking
** K/V head h / group's; with rows, query row r of head h block r / rows of
** the head's own, key c block c / rows of its K/V head's), and the largest
** absolute error of lse. */
static int errors(const tensor *q, const tensor *k, const tensor *v, const tensor *o,
                  const float *lse, const float *dq, const float *dk, const float *dv,
                  int rows, int causal, double scale, double *o_err, double *lse_err) {
  const int B = (int)q->t.shape[0], H = (int)q->t.shape[1], NQ = (int)q->t.shape[2];
  const int HK = (int)k->t.shape[1], NK = (int)k->t.shape[2], D = (int)q->t.shape[3];
  const int G = H / HK;
  fa_problem one = {.batch = 1, .heads = 1, .seq_q = NQ, .seq_k = NK, .dim = D,
                    .dtype = FA_FP64, .causal = causal, .scale = scale};
  const fa_layout lq = fa_layout_contiguous(&one, NQ), lk = fa_layout_contiguous(&one, NK);
  double *qs = malloc((size_t)NQ * D * sizeof *qs), *ks = malloc((size_t)NK * D * sizeof *ks);
  double *vs = malloc((size_t)NK * D * sizeof *vs), *ro = malloc((size_t)NQ * D * sizeof *ro);
  double *rl = malloc((size_t)NQ * sizeof *rl);
  double e2 = 0, r2 = 0;
  int rc = -1;
  *lse_err = 0;
  if (!qs || !ks || !vs || !ro || !rl) goto done;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int kv = b * HK + h / G;
      const int nqb = rows ? (NQ + rows - 1) / rows : 1, nkb = rows ? (NK + rows - 1) / rows : 1;
      const size_t qa = rows ? ((size_t)b * H + h) * nqb : (size_t)kv, ka = (size_t)kv * nkb;
      const double *qr = q->ref + ((size_t)b * H + h) * NQ * D;
      const double *kr = k->ref + (size_t)kv * NK * D, *vr = v->ref + (size_t)kv * NK * D;
      for (size_t i = 0; i < (size_t)NQ * D; i++)
        qs[i] = qr[i] * (dq ? dq[qa + (rows ? i / D / rows : 0)] : 1);
      for (size_t i = 0; i < (size_t)NK * D; i++) {
        const size_t at = ka + (rows ? i / D / rows : 0);
        ks[i] = kr[i] * (dk ? dk[at] : 1), vs[i] = vr[i] * (dv ? dv[at] : 1);
      }
      if (ref_attention(&one, qs, lq, ks, lk, vs, lk, ro, lq, rl)) goto done;
      for (int r = 0; r < NQ; r++) {
        for (int d = 0; d < D; d++) {
          const double x = fa_elem_get(o->t.data, FA_BF16, at(&o->t, b, h, r, d));
          const double y = ro[(size_t)r * D + d];
          e2 += (x - y) * (x - y), r2 += y * y;
        }
        if (lse) {
          const double e = fabs(lse[((size_t)b * H + h) * NQ + r] - rl[r]);
          if (!(e <= *lse_err)) *lse_err = e;
        }
      }
    }
  rc = 0;
done:
  *o_err = rc == 0 && r2 > 0 ? sqrt(e2 / r2) : INFINITY;
  free(qs), free(ks), free(vs), free(ro), free(rl);
  return rc;
}

typedef struct shape {
  const char *what;
  int b, hq, hk, nq, nk, d, bnhd, pad, opad, causal;   /* pad, opad: elements per row */
  int descale;     /* bit 0: q's, 1: k's, 2: v's */
  int with_lse;
  double scale;
  int rows;        /* descale_rows: 0, a descale per (batch, K/V head) */
} shape;

static void run_shape(const shape *s) {
  tensor q, k, v, o;
  if (tensor_make(&q, FATUNE_E4M3, s->b, s->hq, s->nq, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&k, FATUNE_E4M3, s->b, s->hk, s->nk, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&v, FATUNE_E4M3, s->b, s->hk, s->nk, s->d, s->bnhd, s->pad, 1) ||
      tensor_make(&o, FATUNE_BF16, s->b, s->hq, s->nq, s->d, !s->bnhd, s->opad, 0)) {
    CHECK(0, "%s: out of memory", s->what);
    return;
  }
  const int r = s->rows, nk = s->b * s->hk * (r ? (s->nk + r - 1) / r : 1);
  const int nq = r ? s->b * s->hq * ((s->nq + r - 1) / r) : s->b * s->hk;
  float *dq = s->descale & 1 ? descales(nq) : NULL, *dk = s->descale & 2 ? descales(nk) : NULL;
  float *dv = s->descale & 4 ? descales(nk) : NULL;
  const size_t rows = (size_t)s->b * s->hq * s->nq;
  float *lse = malloc(rows * sizeof *lse);
  fatune_attention_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .causal = s->causal,
                             .scale = s->scale, .lse = s->with_lse ? lse : NULL,
                             .q_descale = dq, .k_descale = dk, .v_descale = dv,
                             .descale_rows = r};
  fatune_status st = lse ? fatune_attention(ctx, &a) : FATUNE_ENOMEM;
  CHECK(st == FATUNE_OK, "%s: status %d: %s", s->what, (int)st, fatune_errmsg());
  if (st == FATUNE_OK) {
    double oe, le;
    const int rc = errors(&q, &k, &v, &o, s->with_lse ? lse : NULL, dq, dk, dv, r, s->causal,
                          s->scale, &oe, &le);
    printf("%s: O norm-relative error %.4f, lse max error %.2e\n", s->what, oe, le);
    CHECK(rc == 0 && oe <= 0x1p-4 && le <= 1e-2, "%s: O error %.3g (2^-4), lse error %.3g (1e-2)",
          s->what, oe, le);
    /* Not fp8's rounding of O itself: O is bf16, so the error is P's, well
    ** above bf16's own and well within 2^-4. */
    CHECK(oe > 1e-3, "%s: O error %.3g: too small for P in e4m3", s->what, oe);
    CHECK(untouched_outside(&o), "%s: bytes outside O's elements were written", s->what);
  }
  free(lse), free(dq), free(dk), free(dv);
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

static void test_shapes(void) {
  static const shape shapes[] = {
    {"e4m3 bhnd, causal 96 of 150, descales", 1, 2, 2, 96, 150, 64, 0, 0, 0, 1, 7, 1, 0, 0},
    {"e4m3 bnhd GQA 4/2, padded rows, k and v descales", 2, 4, 2, 40, 72, 64, 1, 16, 8, 0, 6, 1,
     0, 0},
    {"e4m3 bhnd MQA 2/1, lse NULL, scale 0.2, q descale", 1, 2, 1, 33, 50, 64, 0, 0, 0, 0, 1, 0,
     0.2, 0},
    /* Rows of 48 bytes padded to 64, and O's to 128. */
    {"e4m3 dim 48 in rows padded to 64, causal, descales", 1, 2, 1, 50, 70, 48, 1, 16, 16, 1, 7, 1,
     0, 0},
    /* Descales per block: Q's 2 blocks of 64 rows per head, K's and V's 3
    ** of 64 keys per K/V head, the query heads of a K/V head with their own. */
    {"e4m3 bnhd GQA 4/2, causal 96 of 150, descales per 64 rows", 2, 4, 2, 96, 150, 64, 1, 0, 0, 1,
     7, 1, 0, 64},
    {"e4m3 bhnd, 200 of 300 keys, k and v descales per 128 rows", 1, 2, 2, 200, 300, 128, 0, 0, 0,
     0, 6, 0, 0, 128},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
}

/* fatune_attention_forward on contiguous tensors: O in bf16. */
static void test_forward(void) {
  tensor q, k, v, o;
  if (tensor_make(&q, FATUNE_E4M3, 1, 2, 24, 64, 0, 0, 1) ||
      tensor_make(&k, FATUNE_E4M3, 1, 2, 40, 64, 0, 0, 1) ||
      tensor_make(&v, FATUNE_E4M3, 1, 2, 40, 64, 0, 0, 1) ||
      tensor_make(&o, FATUNE_BF16, 1, 2, 24, 64, 0, 0, 0)) {
    CHECK(0, "forward: out of memory");
    return;
  }
  float lse[48];
  const fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 24, .seq_k = 40, .dim = 64,
                            .dtype = FATUNE_E4M3, .causal = 1};
  fatune_status st = fatune_attention_forward(ctx, &p, q.t.data, k.t.data, v.t.data, o.t.data,
                                              lse, NULL);
  CHECK(st == FATUNE_OK, "fatune_attention_forward e4m3: status %d: %s", (int)st,
        fatune_errmsg());
  if (st == FATUNE_OK) {
    double oe, le;
    const int rc = errors(&q, &k, &v, &o, lse, NULL, NULL, NULL, 0, 1, 0, &oe, &le);
    printf("fatune_attention_forward e4m3: O norm-relative error %.4f, lse max error %.2e\n",
           oe, le);
    CHECK(rc == 0 && oe <= 0x1p-4 && le <= 1e-2, "forward: O error %.3g, lse error %.3g", oe,
          le);
    CHECK(untouched_outside(&o), "forward: bytes past O written");
  }
  char name[128];
  fatune_choice choice;
  st = fatune_choose(ctx, &p, name, sizeof name, &choice);
  CHECK(st == FATUNE_OK && !strncmp(name, "wg-e4m3-d64-", 12) && choice == FATUNE_DEFAULT,
        "fatune_choose e4m3 on sm_90a: status %d, '%s' (%s)", (int)st, name, fatune_errmsg());
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

/* Each bad call: FATUNE_EINVAL, its message holding needle, O untouched. */
static void expect_refused(const char *what, fatune_status st, const char *needle,
                           const tensor *o) {
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), needle),
        "%s: status %d, '%s' (want EINVAL and '%s')", what, (int)st, fatune_errmsg(), needle);
  if (o) {
    const unsigned char *m = o->t.data;
    int same = 1;
    for (size_t i = 0; i < o->bytes + 64; i++) same &= m[i] == 0xFF;
    CHECK(same, "%s: O was written", what);
  }
}

static void test_bad(void) {
  tensor q, k, v, o, o8, o16, qb, kb, vb, q40, k40, v40, o40, v32, o32, q36, k36, v36, o36;
  if (tensor_make(&q, FATUNE_E4M3, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&k, FATUNE_E4M3, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&v, FATUNE_E4M3, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&o, FATUNE_BF16, 1, 2, 16, 64, 0, 0, 0) ||
      tensor_make(&o8, FATUNE_E4M3, 1, 2, 16, 64, 0, 0, 0) ||
      tensor_make(&o16, FATUNE_FP16, 1, 2, 16, 64, 0, 0, 0) ||
      tensor_make(&qb, FATUNE_BF16, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&kb, FATUNE_BF16, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&vb, FATUNE_BF16, 1, 2, 16, 64, 0, 0, 1) ||
      tensor_make(&q40, FATUNE_E4M3, 1, 2, 16, 40, 0, 0, 1) ||
      tensor_make(&k40, FATUNE_E4M3, 1, 2, 16, 40, 0, 0, 1) ||
      tensor_make(&v40, FATUNE_E4M3, 1, 2, 16, 40, 0, 0, 1) ||
      tensor_make(&o40, FATUNE_BF16, 1, 2, 16, 40, 0, 0, 0) ||
      tensor_make(&v32, FATUNE_E4M3, 1, 2, 16, 32, 0, 0, 1) ||
      tensor_make(&o32, FATUNE_BF16, 1, 2, 16, 32, 0, 0, 0) ||
      tensor_make(&q36, FATUNE_E4M3, 1, 2, 16, 36, 0, 0, 1) ||
      tensor_make(&k36, FATUNE_E4M3, 1, 2, 16, 36, 0, 0, 1) ||
      tensor_make(&v36, FATUNE_E4M3, 1, 2, 16, 36, 0, 0, 1) ||
      tensor_make(&o36, FATUNE_BF16, 1, 2, 16, 36, 0, 0, 0)) {
    CHECK(0, "bad: out of memory");
    return;
  }
  float d[4] = {1, 1, 1, 1};
  char raw[32];
  const fatune_attention_args good = {.q = q.t, .k = k.t, .v = v.t, .o = o.t};
  fatune_attention_args a = good;
  a.o = o8.t;
  expect_refused("o in e4m3", fatune_attention(ctx, &a), "writes O in bf16", &o8);
  a.o = o16.t;
  expect_refused("o in fp16", fatune_attention(ctx, &a), "o's dtype is fp16", &o16);
  a = (fatune_attention_args){.q = qb.t, .k = kb.t, .v = vb.t, .o = o.t, .k_descale = d};
  expect_refused("k_descale beside bf16", fatune_attention(ctx, &a),
                 "k_descale is given, but q is bf16", &o);
  a = good;
  a.v_descale = (const float *)(void *)(raw + 1);
  expect_refused("v_descale misaligned", fatune_attention(ctx, &a), "v_descale is not 4-byte",
                 &o);
  /* O over q_descale: the descale's 8 bytes inside O's. */
  a = good;
  a.q_descale = (const float *)((char *)o.t.data + 64);
  expect_refused("o over q_descale", fatune_attention(ctx, &a), "o overlaps q_descale", NULL);
  /* Per block of 64 rows, q's descales are (1, 2, 1): 8 bytes, the first
  ** of them 4 bytes before O's end. */
  a = good;
  a.descale_rows = 64;
  a.q_descale = (const float *)((char *)o.t.data + (2 * 16 * 64 - 2) * 2);
  expect_refused("o over q_descale per block", fatune_attention(ctx, &a), "o overlaps q_descale",
                 NULL);
  a = (fatune_attention_args){.q = qb.t, .k = kb.t, .v = vb.t, .o = o.t, .descale_rows = 64};
  expect_refused("descale_rows beside bf16", fatune_attention(ctx, &a),
                 "descale_rows is 64, but q is bf16", &o);
  a = good;
  a.descale_rows = 96;
  expect_refused("descale_rows 96", fatune_attention(ctx, &a), "a power of two from 64", &o);
  a = (fatune_attention_args){.q = q36.t, .k = k36.t, .v = v36.t, .o = o36.t};
  expect_refused("head dim 36", fatune_attention(ctx, &a), "head dim 36 is no multiple of 8",
                 &o36);
  a = (fatune_attention_args){.q = q40.t, .k = k40.t, .v = v40.t, .o = o40.t};
  expect_refused("head dim 40 (fp8 rows of 40 bytes)", fatune_attention(ctx, &a),
                 "head dim 40 is no multiple of 16", &o40);
  a = (fatune_attention_args){.q = q.t, .k = k.t, .v = v32.t, .o = o32.t};
  expect_refused("dim_v 32 beside dim 64", fatune_attention(ctx, &a), "no kernel for this problem",
                 &o32);

  /* The calls that take no fp8. */
  float lse[32];
  const fatune_backward_args bw = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .dout = o.t,
                                   .dq = q.t, .dk = k.t, .dv = v.t, .lse = lse};
  expect_refused("backward", fatune_attention_backward(ctx, &bw), "the backward pass takes no "
                 "e4m3", NULL);
  int cu[2] = {0, 16};
  fatune_varlen_args vl = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .cu_seqlens_q = cu,
                           .cu_seqlens_k = cu, .batch = 1, .max_seqlen_q = 16,
                           .max_seqlen_k = 16};
  vl.q.stride[0] = vl.k.stride[0] = vl.v.stride[0] = vl.o.stride[0] = 0;
  expect_refused("varlen", fatune_attention_varlen(ctx, &vl), "a variable-length batch takes "
                 "no e4m3", &o);
  const fatune_varlen_backward_args vb2 = {.q = vl.q, .k = vl.k, .v = vl.v, .o = vl.o,
                                           .dout = vl.o, .dq = vl.q, .dk = vl.k, .dv = vl.v,
                                           .lse = lse, .cu_seqlens_q = cu, .cu_seqlens_k = cu,
                                           .batch = 1, .max_seqlen_q = 16, .max_seqlen_k = 16};
  expect_refused("varlen backward", fatune_attention_varlen_backward(ctx, &vb2),
                 "variable-length batch takes no e4m3", NULL);
  int lens[1] = {16};
  fatune_kvcache_args kc = {.q = q.t, .k_cache = k.t, .v_cache = v.t, .o = o.t,
                            .cache_seqlens = lens};
  expect_refused("kvcache", fatune_attention_kvcache(ctx, &kc), "decoding over a KV cache takes "
                 "no e4m3", &o);
  fatune_decode_plan *plan = NULL;
  expect_refused("decode plan", fatune_decode_plan_create(ctx, &kc, &plan),
                 "decoding over a KV cache takes no e4m3", NULL);
  CHECK(plan == NULL, "decode plan: a plan was made");

  tensor *all[] = {&q, &k, &v, &o, &o8, &o16, &qb, &kb, &vb, &q40, &k40, &v40, &o40, &v32, &o32,
                   &q36, &k36, &v36, &o36};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tensor_free(all[i]);
}

/* A target without fp8: the call fails with a status and a message, O
** untouched. arch the target, set by FATUNE_EMU_ARCH, or by emu_arch over
** a FATUNE_EMU_ARCH of sm_90a when opt; NULL: the emulator's default. */
static void test_no_fp8_target(const char *arch, int opt) {
  if (opt ? setenv("FATUNE_EMU_ARCH", "sm_90a", 1)
          : arch ? setenv("FATUNE_EMU_ARCH", arch, 1) : unsetenv("FATUNE_EMU_ARCH")) {
    CHECK(0, "setenv");
    return;
  }
  char db[160];
  snprintf(db, sizeof db, "%s/other.db", dir);
  fatune_options opts = {.db_path = db, .backend = "emu", .emu_arch = opt ? arch : NULL};
  fatune_ctx *c = NULL;
  fatune_status st = fatune_open(&opts, &c);
  CHECK(st == FATUNE_OK, "open at %s: %s", arch ? arch : "the default", fatune_errmsg());
  if (st != FATUNE_OK) return;
  tensor q, k, v, o;
  if (tensor_make(&q, FATUNE_E4M3, 1, 1, 16, 64, 0, 0, 1) ||
      tensor_make(&k, FATUNE_E4M3, 1, 1, 16, 64, 0, 0, 1) ||
      tensor_make(&v, FATUNE_E4M3, 1, 1, 16, 64, 0, 0, 1) ||
      tensor_make(&o, FATUNE_BF16, 1, 1, 16, 64, 0, 0, 0)) {
    CHECK(0, "out of memory");
    fatune_close(c);
    return;
  }
  const fatune_attention_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t};
  st = fatune_attention(c, &a);
  printf("e4m3 at %s (%s): status %d: %s\n", arch ? arch : "the default target",
         opt ? "emu_arch" : "FATUNE_EMU_ARCH", (int)st, fatune_errmsg());
  char needle[64];
  snprintf(needle, sizeof needle, "no kernel for e4m3 (fp8) on %s", arch ? arch : "sm_90");
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), needle) &&
        strstr(fatune_errmsg(), "emu_arch \"sm_90a\""),
        "e4m3 at %s: status %d, '%s'", arch ? arch : "the default", (int)st, fatune_errmsg());
  const unsigned char *m = o.t.data;
  int same = 1;
  for (size_t i = 0; i < o.bytes + 64; i++) same &= m[i] == 0xFF;
  CHECK(same, "e4m3 at %s: O was written", arch ? arch : "the default");
  const fatune_problem p = {.batch = 1, .heads = 1, .seq_q = 16, .seq_k = 16, .dim = 64,
                            .dtype = FATUNE_E4M3};
  char name[128] = "";
  st = fatune_choose(c, &p, name, sizeof name, NULL);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), needle), "choose at %s: status %d, '%s'",
        arch ? arch : "the default", (int)st, fatune_errmsg());
  fatune_close(c);
  tensor_free(&q), tensor_free(&k), tensor_free(&v), tensor_free(&o);
}

/* A .npy file of the 256 e4m3 patterns, in order, under descr. */
static int write_patterns(const char *path, const char *descr) {
  char dict[128];
  const int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                         "'shape': (256,), }", descr);
  const int pad = 63 - (10 + n) % 64;   /* the data at 64 bytes, as NumPy aligns it */
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  const unsigned char len[2] = {(unsigned char)(n + pad + 1), 0};
  int ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(len, 1, 2, f) == 2 &&
           fwrite(dict, 1, (size_t)n, f) == (size_t)n;
  for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  for (int i = 0; ok && i < 256; i++) ok = fputc(i, f) != EOF;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static void test_npy(void) {
  static const char *const good[] = {"<V1", "|V1", "=V1"};
  char path[200], err[512];
  snprintf(path, sizeof path, "%s/e4m3.npy", dir);
  for (int g = 0; g < 3; g++) {
    npy_array a;
    const int rc = write_patterns(path, good[g]) ? -2 : npy_read(path, &a, err, sizeof err);
    CHECK(rc == 0 && a.dtype == NPY_E4M3 && a.ndim == 1 && a.count == 256 &&
          !strcmp(npy_dtype_name(a.dtype), "float8_e4m3fn"),
          "'%s': rc %d, %s", good[g], rc, rc == -1 ? err : "");
    int same = rc == 0;
    for (int i = 0; same && i < 256; i++) {
      const double want = hp_e4m3_to_double((uint8_t)i);
      same = isnan(want) ? isnan(a.data[i]) : a.data[i] == want && !signbit(a.data[i]) ==
             !signbit(want);
    }
    CHECK(same, "'%s': a pattern read as another value", good[g]);
    if (rc == 0) npy_free(&a);
  }
  npy_array a;
  const int rc = write_patterns(path, ">V1") ? -2 : npy_read(path, &a, err, sizeof err);
  CHECK(rc == -1 && strstr(err, "dtype '>V1' is not supported") &&
        strstr(err, "float8_e4m3fn as '<V1' or '|V1'"), "'>V1': rc %d, '%s'", rc, err);
}

/* --cuda: the cuda backend (the driver's first GPU, or tests/fakecuda's
** by FAKECUDA_DEVICE): on sm_90 fatune_choose names wg's fp8 default (its
** kernel compiled for sm_90a); on any other GPU it and fatune_attention are
** FATUNE_EINVAL saying fp8 needs sm_90a, nothing launched. SKIPPED without
** a driver. */
static int cuda_main(const char *db) {
  fatune_options opts = {.db_path = db, .backend = "cuda"};
  fatune_ctx *c = NULL;
  fatune_status st = fatune_open(&opts, &c);
  if (st == FATUNE_ENODEV) check_skip(fatune_errmsg());
  CHECK(st == FATUNE_OK, "open cuda: status %d: %s", (int)st, fatune_errmsg());
  if (st != FATUNE_OK) return check_done("test_lib_fp8 --cuda");
  const fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 128, .seq_k = 128, .dim = 64,
                            .dtype = FATUNE_E4M3, .causal = 1};
  char name[128] = "";
  st = fatune_choose(c, &p, name, sizeof name, NULL);
  printf("e4m3 on cuda: fatune_choose status %d: %s%s\n", (int)st, name, fatune_errmsg());
  if (st == FATUNE_OK) {
    CHECK(!strncmp(name, "wg-e4m3-d64-", 12), "e4m3 on cuda: chose %s", name);
  } else {
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "no kernel for e4m3 (fp8) on sm_"),
          "e4m3 on cuda: status %d, '%s'", (int)st, fatune_errmsg());
    /* The call is refused before anything is launched: host buffers stand
    ** in for device memory, never touched. */
    static unsigned char q[2 * 128 * 64], k[2 * 128 * 64], v[2 * 128 * 64];
    static unsigned short o[2 * 128 * 64];
    st = fatune_attention_forward(c, &p, q, k, v, o, NULL, NULL);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "no kernel for e4m3 (fp8) on sm_"),
          "e4m3 call on cuda: status %d, '%s'", (int)st, fatune_errmsg());
  }
  fatune_close(c);
  return check_done("test_lib_fp8 --cuda");
}

int main(int argc, char **argv) {
  if (!mkdtemp(dir)) return 1;
  char db[160];
  if (argc > 1 && !strcmp(argv[1], "--cuda")) {
    snprintf(db, sizeof db, "%s/cuda.db", dir);
    const int rc = cuda_main(db);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
  }
  snprintf(db, sizeof db, "%s/fp8.db", dir);
  /* The target by the options, whatever the environment says. */
  if (setenv("FATUNE_EMU_ARCH", "sm_80", 1) != 0) return 1;
  fatune_options opts = {.db_path = db, .backend = "emu", .emu_arch = "sm_90a"};
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    fprintf(stderr, "fatune_open: %s\n", fatune_errmsg());
    return 1;
  }
  test_shapes();
  test_forward();
  test_bad();
  test_npy();
  fatune_close(ctx);
  /* The same by FATUNE_EMU_ARCH. */
  if (setenv("FATUNE_EMU_ARCH", "sm_90a", 1) != 0) return 1;
  opts.emu_arch = NULL;
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    fprintf(stderr, "fatune_open: %s\n", fatune_errmsg());
    return 1;
  }
  test_forward();
  fatune_close(ctx);
  test_no_fp8_target(NULL, 0);
  test_no_fp8_target("sm_80", 0);
  test_no_fp8_target("sm_80", 1);
  /* An emu_arch fatune does not know: refused at the open, naming it. */
  fatune_options bad = {.db_path = db, .backend = "emu", .emu_arch = "sm_12x"};
  fatune_ctx *c = NULL;
  fatune_status st = fatune_open(&bad, &c);
  CHECK(st == FATUNE_EINVAL && !c && !strncmp(fatune_errmsg(), "emu_arch: ", 10),
        "emu_arch sm_12x: status %d, '%s'", (int)st, fatune_errmsg());
  unsetenv("FATUNE_EMU_ARCH");
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_lib_fp8");
}
