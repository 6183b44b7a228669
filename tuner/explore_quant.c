/*
** explore_quant.c
** fatune explore --axis quant: what fp8 costs in accuracy, and what
** FlashAttention-3's incoherent processing buys back. Q, K and V drawn in
** float64, normal, with outliers (0.1% of the elements 10 times the
** others' size, as the FlashAttention-3 paper's experiment) and ranged
** (the first 64 queries of each head 10^5 times the rest, which one scale
** per head leaves among e4m3's subnormals; O's error over the rest), rounded
** four ways: to bf16; to e4m3 with a scale per (batch, head); to e4m3 with
** a scale per block of 64 rows of each head (FlashAttention-3's block
** quantization); and to e4m3 after Q and K are rotated by one random
** Hadamard matrix (Q R (K R)^T = Q K^T, and an outlier spreads over its
** row, so the scale fits the rest better).
** Each runs through the target's default kernel for its dtype on the
** emulator (fp8's with its descales); O is judged against the float64
** attention of the inputs before any rounding: the error a user sees.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "backend.h"
#include "explore_quant.h"
#include "fa_fp8.h"
#include "reference.h"
#include "validate.h"

#define QUANT_SEQ 256   /* the emulator's largest; one batch of two heads */

typedef struct quant_row {
  const char *inputs, *scheme;
  double rel_err, rmse, max_abs;
} quant_row;

/* Box-Muller on the validator's generator (val_rng_next). */
static double normal(uint64_t *s) {
  const double u1 = ((double)(val_rng_next(s) >> 11) + 0.5) * 0x1p-53;
  const double u2 = ((double)(val_rng_next(s) >> 11) + 0.5) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define QUANT_BLOCK 64  /* rows per scale of the block scheme */

enum { DRAW_NORMAL, DRAW_OUTLIERS, DRAW_RANGED };

/* n normal values of heads of seq rows of dim: with outliers, one in a
** thousand of them times 10; ranged (Q's alone), the first QUANT_BLOCK rows
** of each head times 10^5 (a constructed case, past the 10^4 of LLMs'
** massive activations): one scale per head (amax / 448) then puts the
** others' values near 10^-3, where e4m3 rounds to 0 or its smallest
** subnormal, 2^-9. */
static void draw(double *x, size_t n, int kind, int seq, int dim, int is_q, uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    x[i] = normal(s);
    if (kind == DRAW_OUTLIERS && val_rng_next(s) % 1000 == 0) x[i] *= 10;
    if (kind == DRAW_RANGED && is_q && i / (size_t)dim % (size_t)seq < QUANT_BLOCK) x[i] *= 1e5;
  }
}

/* x's bh heads of `rows` rows of dim in e4m3 (out), a scale per block of
** QUANT_BLOCK rows of each head into descale (bh * ceil(rows / QUANT_BLOCK)). */
static void quantize_blocks(const double *x, size_t bh, int rows, int dim, uint8_t *out,
                            float *descale) {
  const size_t full = (size_t)rows / QUANT_BLOCK, tail = (size_t)rows % QUANT_BLOCK;
  const size_t nb = full + (tail != 0), per = (size_t)rows * dim, blk = (size_t)QUANT_BLOCK * dim;
  for (size_t h = 0; h < bh; h++) {
    fa_fp8_quantize(x + h * per, full, blk, out + h * per, descale + h * nb);
    if (tail) fa_fp8_quantize(x + h * per + full * blk, 1, tail * dim, out + h * per + full * blk,
                              descale + h * nb + full);
  }
}

/* O of kernel k on p's inputs (dtype arrays q, k, v; p->descale where fp8)
** into o (fa_out_dtype's elements): 0, or -1 with why in err. */
static int run_kernel(fa_backend *be, const gen_kernel *k, const fa_problem *p, const void *q,
                      const void *kk, const void *v, void *o, char *err, size_t errlen) {
  fa_build b = {0};
  attn_inputs in;
  float *lse = malloc((size_t)p->batch * p->heads * p->seq_q * sizeof *lse);
  if (!lse) return snprintf(err, errlen, "out of memory"), -1;
  int rc = backend_compile(be, &k, 1, 1, &b, err, errlen) != 0 || !b.prog ? -1 : 0;
  if (rc == 0) rc = attn_inputs_upload(be, p, q, kk, v, &in, err, errlen);
  if (rc == 0) {
    void *const host[2] = {o, lse};
    const fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 2, .smem_fill = 0xFF};
    rc = attn_run_op(be, b.prog, k, p, &in, &ro, host, NULL, NULL, err, errlen);
    attn_inputs_free(be, &in);
  }
  backend_build_free(be, &b);
  free(lse);
  return rc;
}

/* O's errors against the float64 reference ref, n elements of dtype t in
** heads of seq rows of dim; from row `from` of each head on. */
static void errors(const void *o, fa_dtype t, const double *ref, size_t n, int seq, int dim,
                   int from, quant_row *r) {
  double e2 = 0, r2 = 0;
  size_t m = 0;
  r->max_abs = 0;
  for (size_t i = 0; i < n; i++) {
    if ((int)(i / (size_t)dim % (size_t)seq) < from) continue;
    m++;
    const double d = fa_elem_get(o, t, i) - ref[i];
    e2 += d * d, r2 += ref[i] * ref[i];
    r->max_abs = fmax(r->max_abs, fabs(d));
  }
  r->rel_err = sqrt(e2 / r2), r->rmse = sqrt(e2 / (double)m);
}

/* One scheme on one draw: the kernel of dtype t (rotated Q and K when
** rotate; fp8's scales per block of QUANT_BLOCK rows when blocks), O's
** errors into r. */
static int scheme(gen_state *g, const gen_target *t, fa_backend *be, fa_problem p, fa_dtype dt,
                  int rotate, int blocks, int from, const double *const in[3], const double *ref,
                  unsigned long long seed, quant_row *r, char *err, size_t errlen) {
  const size_t bh = (size_t)p.batch * p.heads, per = (size_t)p.seq_q * p.dim;
  const size_t n = bh * per, es = (size_t)fa_dtype_size(dt);
  p.dtype = dt, p.descale_rows = blocks ? QUANT_BLOCK : 0;
  size_t nd[3];
  fa_problem_descales(&p, nd);
  double *x[3] = {malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double))};
  void *q8[3] = {malloc(n * es), malloc(n * es), malloc(n * es)};
  void *o = malloc(n * (size_t)fa_dtype_size(fa_out_dtype(dt)));
  float *descale = malloc((nd[0] + nd[1] + nd[2]) * sizeof *descale);
  gen_kernel k;
  int rc = -1, rendered = 0;
  if (!x[0] || !x[1] || !x[2] || !q8[0] || !q8[1] || !q8[2] || !o || !descale) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  for (int i = 0; i < 3; i++) memcpy(x[i], in[i], n * sizeof(double));
  if (rotate) {  /* the head dim is a power of 2, checked before */
    fa_fp8_rotate(x[0], bh * p.seq_q, p.dim, seed);
    fa_fp8_rotate(x[1], bh * p.seq_k, p.dim, seed);
  }
  for (int i = 0; i < 3; i++) {
    float *const di = descale + (i > 0 ? nd[0] : 0) + (i > 1 ? nd[1] : 0);
    if (dt == FA_E4M3 && blocks) quantize_blocks(x[i], bh, p.seq_q, p.dim, q8[i], di);
    else if (dt == FA_E4M3) fa_fp8_quantize(x[i], bh, per, q8[i], di);
    else
      for (size_t j = 0; j < n; j++) fa_elem_put(q8[i], dt, j, x[i][j]);
  }
  if (dt == FA_E4M3) p.descale = descale;
  if (gen_render_config(g, "", &p, t, &k) != 0) {
    snprintf(err, errlen, "%s", gen_errmsg(g));
    goto done;
  }
  rendered = 1;
  if (run_kernel(be, &k, &p, q8[0], q8[1], q8[2], o, err, errlen) != 0) goto done;
  errors(o, fa_out_dtype(dt), ref, n, p.seq_q, p.dim, from, r);
  rc = 0;
done:
  if (rendered) gen_kernel_free(&k);
  for (int i = 0; i < 3; i++) free(x[i]), free(q8[i]);
  free(o), free(descale);
  return rc;
}

static void print_rows(const quant_row *r, int n, const fa_problem *p, const char *arch,
                       unsigned long long seed, int json) {
  if (json) {
    printf("[");
    for (int i = 0; i < n; i++)
      printf("%s\n  {\"inputs\": \"%s\", \"scheme\": \"%s\", \"rel_err\": %.6g, \"rmse\": %.6g, "
             "\"max_abs_err\": %.6g}", i ? "," : "", r[i].inputs, r[i].scheme, r[i].rel_err,
             r[i].rmse, r[i].max_abs);
    printf("\n]\n");
    return;
  }
  printf("fp8 quantization against float64: dim %d, seq %d, batch %d, heads %d%s; the default "
         "kernels of %s on the emulator; inputs seed %llu\n",
         p->dim, p->seq_q, p->batch, p->heads, p->causal ? ", causal" : "", arch, seed);
  printf("%-9s %-36s %10s %10s %10s\n", "inputs", "rounding", "O rel_err", "O rmse", "max_abs");
  for (int i = 0; i < n; i++)
    printf("%-9s %-36s %10.3e %10.3e %10.3e\n", r[i].inputs, r[i].scheme, r[i].rel_err, r[i].rmse,
           r[i].max_abs);
}

int explore_quant(gen_state *g, const cli_opts *o, const gen_target *t) {
  /* fp8's kernels are sm_90a's: the target unless --arch names another. */
  gen_target own;
  if (!cli_given(o, "--arch") && strcmp(t->arch, "sm_90a")) {
    if (gen_target_for_arch(g, "sm_90a", 0, 0, &own) != 0) {
      fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
      return 1;
    }
    t = &own;
  }
  fa_problem p = o->problem;
  if (p.dim & (p.dim - 1) || (p.dim_v && p.dim_v != p.dim)) {
    fprintf(stderr, "fatune: explore --axis quant takes a head dim that is a power of 2 (the "
                    "Hadamard rotation's), V's the same, not %d\n", p.dim);
    return 2;
  }
  p.batch = 1, p.heads = 2, p.op = FA_OP_FWD, p.dim_v = 0, p.mod = NULL, p.kv_group = 0;
  p.seq_q = p.seq_q < QUANT_SEQ ? p.seq_q : QUANT_SEQ, p.seq_k = p.seq_q;
  const unsigned long long seed = o->seed_given ? o->seed : 1;
  const size_t n = (size_t)p.batch * p.heads * p.seq_q * p.dim;
  double *in[3] = {malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double))};
  double *ref = malloc(n * sizeof *ref), *lse = malloc((size_t)p.heads * p.seq_q * sizeof *lse);
  fa_backend *be = NULL;
  char err[512], note[256];
  quant_row rows[12];
  int nrows = 0, rc = 1;
  if (!in[0] || !in[1] || !in[2] || !ref || !lse) {
    fprintf(stderr, "fatune: out of memory\n");
    goto done;
  }
  if (backend_open("emu", &be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    goto done;
  }
  static const char *const inputs[3] = {"normal", "outliers", "ranged"};
  static const struct { fa_dtype t; int rotate, blocks; const char *name; } schemes[4] = {
    {FA_BF16, 0, 0, "bf16"}, {FA_E4M3, 0, 0, "e4m3, a scale per (batch, head)"},
    {FA_E4M3, 0, 1, "e4m3, a scale per block of 64 rows"},
    {FA_E4M3, 1, 0, "e4m3, Q and K Hadamard-rotated first"}};
  for (int d = DRAW_NORMAL; d <= DRAW_RANGED; d++) {
    uint64_t s = seed + (uint64_t)d;
    for (int i = 0; i < 3; i++) draw(in[i], n, d, p.seq_q, p.dim, i == 0, &s);
    fa_problem f = p;
    f.dtype = FA_FP64;
    const fa_layout l = fa_layout_contiguous(&f, p.seq_q);
    if (ref_attention(&f, in[0], l, in[1], l, in[2], l, ref, l, lse) != 0) {
      fprintf(stderr, "fatune: the float64 reference failed\n");
      goto done;
    }
    for (int m = 0; m < 4; m++) {
      fprintf(stderr, "fatune: %s inputs, %s\n", inputs[d], schemes[m].name);
      quant_row *r = &rows[nrows];
      r->inputs = inputs[d], r->scheme = schemes[m].name;
      /* ranged: O's error over the ordinary rows (the large ones' logits
      ** are ill-conditioned in any dtype) */
      if (scheme(g, t, be, p, schemes[m].t, schemes[m].rotate, schemes[m].blocks,
                 d == DRAW_RANGED ? QUANT_BLOCK : 0, (const double *const *)in, ref, seed, r, err,
                 sizeof err) != 0) {
        fprintf(stderr, "fatune: %s, %s: %s\n", inputs[d], schemes[m].name, err);
        rc = 2;
        goto done;
      }
      nrows++;
    }
  }
  print_rows(rows, nrows, &p, t->arch, seed, o->json);
  rc = 0;
done:
  if (be) backend_close(be);
  for (int i = 0; i < 3; i++) free(in[i]);
  free(ref), free(lse);
  return rc;
}
