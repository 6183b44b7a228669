/*
** explore_peak.c
** Seed 003's optional step, measured: standard attention materializes the
** N x N score matrix, a tiled kernel holds tiles only. Naive attention runs
** here on the host, in fp32, with S allocated whole; how far the
** process's peak resident set (getrusage) rises while it runs is its
** measured peak. Called first thing, before anything else large is
** allocated, since the peak is a high-water mark. The tiled kernel's
** memory is what its launch allocates, from the launch shape the runs
** use: Q, K, V, O, the logsumexp and any workspace; its tiles live in
** shared memory, per CTA.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "explore_int.h"

static long peak_rss_kb(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : -1;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Uniform numbers in [-0.5, 0.5) from a 64-bit LCG: inputs, not statistics. */
static void fill(float *a, size_t n, unsigned long long *s) {
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = (float)((double)(*s >> 11) / 9007199254740992.0 - 0.5);
  }
}

/* Standard attention, as the FlashAttention paper's Algorithm 0 does it:
** S = Q K^T / sqrt(d) in full, P = softmax(S) in place, O = P V. K is held
** transposed so that the row loops run over contiguous memory. */
static void standard_attention(int n, int d, const float *q, const float *kt, const float *v,
                               float *s, float *o) {
  const float scale = 1.0f / sqrtf((float)d);
  for (int i = 0; i < n; i++) {
    float *si = s + (size_t)i * n;
    memset(si, 0, (size_t)n * sizeof *si);
    for (int c = 0; c < d; c++) {
      const float qc = q[(size_t)i * d + c] * scale, *kc = kt + (size_t)c * n;
      for (int j = 0; j < n; j++) si[j] += qc * kc[j];
    }
    float m = -INFINITY, l = 0;
    for (int j = 0; j < n; j++) m = si[j] > m ? si[j] : m;
    for (int j = 0; j < n; j++) l += si[j] = expf(si[j] - m);
    float *oi = o + (size_t)i * d;
    memset(oi, 0, (size_t)d * sizeof *oi);
    for (int j = 0; j < n; j++) {
      const float p = si[j] / l, *vj = v + (size_t)j * d;
      for (int c = 0; c < d; c++) oi[c] += p * vj[c];
    }
  }
}

static int naive_peak(ex_peak *pk, unsigned long long seed) {
  const int n = EX_PEAK_N, d = EX_PEAK_D;
  const size_t nd = (size_t)n * d, nn = (size_t)n * n;
  pk->naive_bytes = (double)(4 * nd + nn) * sizeof(float);
  const long before = peak_rss_kb();
  const double t0 = now_ms();
  float *q = malloc(nd * sizeof *q), *kt = malloc(nd * sizeof *kt), *v = malloc(nd * sizeof *v);
  float *o = malloc(nd * sizeof *o), *s = malloc(nn * sizeof *s);
  int rc = -1;
  if (q && kt && v && o && s) {
    fill(q, nd, &seed), fill(kt, nd, &seed), fill(v, nd, &seed);
    standard_attention(n, d, q, kt, v, s, o);
    /* A row of O is a convex combination of V's rows: it must be finite. */
    rc = isfinite(o[0]) && isfinite(o[nd - 1]) ? 0 : -1;
  }
  pk->naive_ms = now_ms() - t0;
  const long after = peak_rss_kb();
  pk->naive_rss = before >= 0 && after >= 0 ? (double)(after - before) * 1024 : -1;
  free(q), free(kt), free(v), free(o), free(s);
  if (rc != 0) fprintf(stderr, "fatune: naive attention at N = %d, d = %d: %s\n", n, d,
                       q && kt && v && o && s ? "a non-finite output" : "out of memory");
  return rc;
}

/* The family's default (FlashAttention-2) kernel for the same problem. */
static int tiled_peak(explore *x, ex_peak *pk) {
  const fa_problem p = {.batch = 1, .heads = 1, .seq_q = EX_PEAK_N, .seq_k = EX_PEAK_N,
                        .dim = EX_PEAK_D, .dtype = FA_FP32};
  gen_kernel k;
  if (gen_render_config(x->g, "", &p, x->t, &k) != 0) {
    fprintf(stderr, "fatune: the default kernel at d = %d: %s\n", EX_PEAK_D, gen_errmsg(x->g));
    return -1;
  }
  gen_launch shape;
  gen_launch_shape(&k, 0, &p, &shape);
  const double es = fa_dtype_size(p.dtype), ls = fa_lse_size(p.dtype);
  pk->tiled_ws = 0;
  for (int i = 0; i < k.nws; i++) pk->tiled_ws += (double)gen_workspace_bytes(&k, i, &p);
  pk->tiled_bytes = 4.0 * EX_PEAK_N * EX_PEAK_D * es + EX_PEAK_N * ls + pk->tiled_ws;
  pk->tiled_smem = (int)shape.smem_bytes;
  snprintf(pk->variant, sizeof pk->variant, "%s", k.name);
  gen_kernel_free(&k);
  return 0;
}

int ex_peak_measure(explore *x) {
  if (naive_peak(&x->peak, x->seed) != 0 || tiled_peak(x, &x->peak) != 0) return -1;
  x->peak.done = 1;
  return 0;
}
