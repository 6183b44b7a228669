/*
** fc_serve.c
** The serving kernels, run by the fake driver as fc_exec.c runs the dense
** ones: their result from the float64 reference, never their code.
**   - a variable-length batch's forward kernels (simt_, tc_, wg_..._varlen):
**     each sequence of cu_seqlens_q and cu_seqlens_k on its own, the
**     logsumexp [heads][total_q];
**   - the forward pass over a KV cache (tc_..._paged, wg_..._paged[_prN]),
**     and the decoding
**     kernels (simtdec_, tcdec_..._split, ..._combine): each sequence's
**     keys gathered through the block table (or cache_batch_idx, or the
**     batch), seqlens_k of them; a split launch with more than one split
**     leaves its partials to the combine launch, which writes O.
** Each checks what its kernel checks (offsets, lengths, pages) and sets the
** same error flags; every byte it reads or writes must lie in an
** allocation, as on a GPU.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_params.h"
#include "fa_problem.h"
#include "fakecuda.h"

enum { SERVE_VARLEN = 1, SERVE_PAGED, SERVE_SPLIT, SERVE_COMBINE };

typedef struct serve_spec {
  int kind;
  fa_dtype t;
  int dim, dim_v, causal, splits;
} serve_spec;

static int ends_with(const char *s, size_t len, const char *tail, size_t *rest) {
  const size_t n = strlen(tail);
  if (len < n || strncmp(s + len - n, tail, n)) return 0;
  *rest = len - n;
  return 1;
}

/* wg's form over a KV cache: "_paged", then "_pr<rows>" where its boxes
** are not of 16 rows; *len cut before them. */
static int paged_wg(const char *name, size_t *len) {
  size_t n = *len;
  while (n > 0 && name[n - 1] >= '0' && name[n - 1] <= '9') n--;
  if (n < *len && ends_with(name, n, "_pr", &n)) *len = n;
  return ends_with(name, *len, "_paged", len);
}

/* 1 when name is a serving kernel, with what it says. */
static int parse(const char *name, serve_spec *s) {
  memset(s, 0, sizeof *s);
  size_t len = strlen(name);
  const char *p;
  int dec = 0;
  if (!strncmp(name, "simtdec_", 8)) dec = 1, p = name + 8;
  else if (!strncmp(name, "tcdec_", 6)) dec = 1, p = name + 6;
  else if (!strncmp(name, "simt_", 5)) p = name + 5;
  else if (!strncmp(name, "tc_", 3)) p = name + 3;
  else if (!strncmp(name, "wg_", 3)) p = name + 3;
  else return 0;
  if (dec && ends_with(name, len, "_split", &len)) s->kind = SERVE_SPLIT;
  else if (dec && ends_with(name, len, "_combine", &len)) s->kind = SERVE_COMBINE;
  else if (!dec && ends_with(name, len, "_varlen", &len)) s->kind = SERVE_VARLEN;
  else if (!dec && !strncmp(name, "tc_", 3) && ends_with(name, len, "_paged", &len))
    s->kind = SERVE_PAGED;
  else if (!dec && !strncmp(name, "wg_", 3) && paged_wg(name, &len))
    s->kind = SERVE_PAGED;
  else return 0;
  s->causal = ends_with(name, len, "_causal", &len);
  static const struct { const char *tok; fa_dtype t; } m[] = {
    {"f32_", FA_FP32}, {"f64_", FA_FP64}, {"f16_", FA_FP16}, {"bf16_", FA_BF16}};
  size_t n = 0;
  for (size_t i = 0; i < sizeof m / sizeof m[0] && !n; i++)
    if (!strncmp(p, m[i].tok, strlen(m[i].tok))) s->t = m[i].t, n = strlen(m[i].tok);
  if (!n || sscanf(p + n, "d%d", &s->dim) != 1 || s->dim < 1 || s->dim > FA_DIM_MAX) return 0;
  const char *v = p + n + 1;
  while (*v >= '0' && *v <= '9') v++;
  s->dim_v = *v == 'v' && sscanf(v, "v%d", &s->dim_v) == 1 ? s->dim_v : s->dim;
  /* the splits: the last "_s<digits>" token before the suffixes */
  s->splits = 1;
  for (const char *q = name; dec && (q = strstr(q, "_s")) && q < name + len; q++) {
    int k, used = 0;
    if (sscanf(q, "_s%d%n", &k, &used) == 1 && (q[used] == '_' || q + used == name + len))
      s->splits = k;
  }
  return 1;
}

/* Element i of the allocation at device address a, n elements of dtype t
** in all; NULL when they are not all inside one. */
static void *map(const void *a, size_t n, fa_dtype t, int write) {
  return n ? fc_mem_map((CUdeviceptr)(size_t)a, n * (size_t)fa_dtype_size(t), write) : (void *)1;
}

static const int *map_i32(const int *a, size_t n) {
  return (const int *)fc_mem_map((CUdeviceptr)(size_t)a, n * sizeof(int), 0);
}

/* The rows of one (sequence, head): nq queries (q, o, and their lse at
** stride ls apart), nk keys at kp[c] and vp[c], causal from the bottom
** right. */
typedef struct rows {
  const void *q;
  long long q_sn;
  void *o;
  long long o_sn;
  void *lse;
  size_t lse_at, lse_step;
  const void *const *k, *const *v;   /* each key's row, in its tensor's memory */
  int nq, nk;
} rows;

/* Attention of r's queries over its keys in float64, stored in s's dtypes
** (the logsumexp in fp32, fp64 for fp64); garbage: wrong numbers. */
static int attend(const serve_spec *s, const fa_params *p, const rows *r, int garbage) {
  const fa_dtype t = s->t, lt = t == FA_FP64 ? FA_FP64 : FA_FP32;
  double *sc = malloc(((size_t)r->nk + 1) * sizeof *sc), *acc = malloc((size_t)s->dim_v * sizeof *acc);
  if (!sc || !acc) return free(sc), free(acc), -1;
  const double scale = p->scale_log2 / 1.4426950408889634074;
  for (int i = 0; i < r->nq; i++) {
    const int last = s->causal ? i + r->nk - r->nq : r->nk - 1;
    double m = -INFINITY;
    for (int c = 0; c <= last && c < r->nk; c++) {
      double d = 0;
      for (int e = 0; e < s->dim; e++)
        d += fa_elem_get(r->q, t, (size_t)(i * r->q_sn + e)) * fa_elem_get(r->k[c], t, (size_t)e);
      sc[c] = d * scale;
      if (sc[c] > m) m = sc[c];
    }
    double l = 0;
    for (int e = 0; e < s->dim_v; e++) acc[e] = 0;
    for (int c = 0; c <= last && c < r->nk; c++) {
      const double w = exp(sc[c] - m);
      l += w;
      for (int e = 0; e < s->dim_v; e++) acc[e] += w * fa_elem_get(r->v[c], t, (size_t)e);
    }
    for (int e = 0; e < s->dim_v; e++)
      fa_elem_put(r->o, t, (size_t)(i * r->o_sn + e),
                  garbage ? fc_junk((size_t)i * s->dim_v + e) : l > 0 ? acc[e] / l : 0);
    fa_elem_put(r->lse, lt, r->lse_at + (size_t)i * r->lse_step,
                garbage ? fc_junk((size_t)i) : l > 0 ? m + log(l) : -INFINITY);
  }
  free(sc), free(acc);
  return 0;
}

static CUresult fail(CUresult rc, char *why, size_t n, const char *name, const char *what) {
  snprintf(why, n, "kernel %s: %s", name, what);
  return rc;
}

static void flag(const fa_params *p, int i) {
  int *e = (int *)fc_mem_map((CUdeviceptr)(size_t)(p->error + i), sizeof(int), 1);
  if (e) *e = 1;
}

/* A variable-length batch: sequence b's queries and keys from the offsets. */
static CUresult run_varlen(const fc_kernel *k, const serve_spec *s, const fa_params *p,
                           int garbage, char *why, size_t n) {
  const int B = p->batch, H = p->heads, G = p->kv_group > 1 ? p->kv_group : 1;
  const int *cq = map_i32(p->cu_seqlens_q, (size_t)B + 1), *ck = map_i32(p->cu_seqlens_k, (size_t)B + 1);
  const fa_dtype lt = s->t == FA_FP64 ? FA_FP64 : FA_FP32;
  const void *qa = map(p->q, (size_t)(p->total_q - 1) * p->q_sn + (H - 1) * p->q_sh + s->dim, s->t, 0);
  const void *ka = map(p->k, (size_t)(p->total_k - 1) * p->k_sn + (H / G - 1) * p->k_sh + s->dim, s->t, 0);
  const void *va = map(p->v, (size_t)(p->total_k - 1) * p->v_sn + (H / G - 1) * p->v_sh + s->dim_v, s->t, 0);
  void *oa = map(p->o, (size_t)(p->total_q - 1) * p->o_sn + (H - 1) * p->o_sh + s->dim_v, s->t, 1);
  void *la = map(p->lse, (size_t)H * p->total_q, lt, 1);
  if (!cq || !ck || !qa || !ka || !va || !oa || !la)
    return fail(CUDA_ERROR_ILLEGAL_ADDRESS, why, n, k->name, "a tensor or the offsets outside "
                "every allocation");
  const void **kr = malloc(((size_t)p->seq_k + 1) * sizeof *kr), **vr = malloc(((size_t)p->seq_k + 1) * sizeof *vr);
  CUresult rc = kr && vr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  const size_t es = (size_t)fa_dtype_size(s->t);
  for (int b = 0; rc == CUDA_SUCCESS && b < B; b++) {
    const int q0 = cq[b], q1 = cq[b + 1], k0 = ck[b], k1 = ck[b + 1];
    if (q0 < 0 || q1 < q0 || q1 > p->total_q || q1 - q0 > p->seq_q || k0 < 0 || k1 < k0 ||
        k1 > p->total_k || k1 - k0 > p->seq_k) {
      flag(p, 1);
      continue;
    }
    for (int h = 0; h < H; h++) {
      for (int c = 0; c < k1 - k0; c++) {
        kr[c] = (const char *)ka + ((size_t)(k0 + c) * p->k_sn + (size_t)(h / G) * p->k_sh) * es;
        vr[c] = (const char *)va + ((size_t)(k0 + c) * p->v_sn + (size_t)(h / G) * p->v_sh) * es;
      }
      const rows r = {(const char *)qa + ((size_t)q0 * p->q_sn + (size_t)h * p->q_sh) * es, p->q_sn,
                      (char *)oa + ((size_t)q0 * p->o_sn + (size_t)h * p->o_sh) * es, p->o_sn,
                      la, (size_t)h * p->total_q + q0, 1, kr, vr, q1 - q0, k1 - k0};
      if (attend(s, p, &r, garbage) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  free(kr), free(vr);
  return rc == CUDA_ERROR_OUT_OF_MEMORY ? fail(rc, why, n, k->name, "out of memory") : rc;
}

/* Over a KV cache: sequence b's seqlens_k[b] keys (cut to the capacity,
** error[1] then set), each from its page (one outside the pool skipped,
** error[0] set); O and the logsumexp [batch][heads][seq_q] of seq_q new
** tokens. */
static CUresult run_cache(const fc_kernel *k, const serve_spec *s, const fa_params *p,
                          int garbage, char *why, size_t n) {
  const int B = p->batch, H = p->heads, G = p->kv_group > 1 ? p->kv_group : 1, NQ = p->seq_q;
  const long long cap = (long long)p->table_stride * p->page_size;
  const fa_dtype lt = s->t == FA_FP64 ? FA_FP64 : FA_FP32;
  const int *lens = map_i32(p->seqlens_k, (size_t)B);
  const int *table = p->block_table ? map_i32(p->block_table, (size_t)B * p->table_stride) : NULL;
  const int *idx = p->cache_batch_idx ? map_i32(p->cache_batch_idx, (size_t)B) : NULL;
  const size_t pool_k = (size_t)(p->num_pages - 1) * p->k_sb + (size_t)(p->page_size - 1) * p->k_sn +
                        (size_t)(H / G - 1) * p->k_sh + s->dim;
  const size_t pool_v = (size_t)(p->num_pages - 1) * p->v_sb + (size_t)(p->page_size - 1) * p->v_sn +
                        (size_t)(H / G - 1) * p->v_sh + s->dim_v;
  const void *qa = map(p->q, (size_t)(B - 1) * p->q_sb + (size_t)(H - 1) * p->q_sh + (size_t)(NQ - 1) * p->q_sn + s->dim, s->t, 0);
  const void *ka = map(p->k, pool_k, s->t, 0), *va = map(p->v, pool_v, s->t, 0);
  void *oa = map(p->o, (size_t)(B - 1) * p->o_sb + (size_t)(H - 1) * p->o_sh + (size_t)(NQ - 1) * p->o_sn + s->dim_v, s->t, 1);
  void *la = map(p->lse, (size_t)B * H * NQ, lt, 1);
  if (!lens || (p->block_table && !table) || (p->cache_batch_idx && !idx) || !qa || !ka || !va ||
      !oa || !la || p->page_size < 1 || p->num_pages < 1)
    return fail(CUDA_ERROR_ILLEGAL_ADDRESS, why, n, k->name, "a tensor, the lengths or the "
                "table outside every allocation");
  const void **kr = malloc(((size_t)cap + 1) * sizeof *kr), **vr = malloc(((size_t)cap + 1) * sizeof *vr);
  CUresult rc = kr && vr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  const size_t es = (size_t)fa_dtype_size(s->t);
  for (int b = 0; rc == CUDA_SUCCESS && b < B; b++) {
    const int len = lens[b] < 0 ? 0 : lens[b] > cap ? (int)cap : lens[b];
    if (len != lens[b]) flag(p, 1);
    for (int h = 0; h < H; h++) {
      int nk = 0;
      for (int c = 0; c < len; c++) {
        const int pg = table ? table[(size_t)b * p->table_stride + c / p->page_size] : idx ? idx[b] : b;
        const int tok = table ? c % p->page_size : c;
        if (pg < 0 || pg >= p->num_pages) {
          flag(p, 0);
          continue;
        }
        kr[nk] = (const char *)ka + ((size_t)pg * p->k_sb + (size_t)tok * p->k_sn + (size_t)(h / G) * p->k_sh) * es;
        vr[nk++] = (const char *)va + ((size_t)pg * p->v_sb + (size_t)tok * p->v_sn + (size_t)(h / G) * p->v_sh) * es;
      }
      const rows r = {(const char *)qa + ((size_t)b * p->q_sb + (size_t)h * p->q_sh) * es, p->q_sn,
                      (char *)oa + ((size_t)b * p->o_sb + (size_t)h * p->o_sh) * es, p->o_sn,
                      la, ((size_t)b * H + h) * NQ, 1, kr, vr, NQ, nk};
      if (attend(s, p, &r, garbage) != 0) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  free(kr), free(vr);
  return rc == CUDA_ERROR_OUT_OF_MEMORY ? fail(rc, why, n, k->name, "out of memory") : rc;
}

int fc_serve_exec(const fc_kernel *k, const fa_params *p, int garbage, CUresult *rc, char *why,
                  size_t whylen) {
  serve_spec s;
  if (!parse(k->name, &s)) return 0;
  *rc = CUDA_SUCCESS;
  if (p->batch < 1 || p->heads < 1 || p->seq_q < 1) return 1;
  if (s.kind == SERVE_VARLEN) {
    *rc = run_varlen(k, &s, p, garbage, why, whylen);
    return 1;
  }
  /* The partials of more than one split are the combine launch's to merge:
  ** the split launch's workspace must be there, and O is the combine's. */
  if (s.kind == SERVE_SPLIT && s.splits > 1) {
    const size_t ws = (size_t)p->batch * p->heads * p->seq_q * s.splits * (s.dim_v + 1);
    if (!map(p->ws, ws, s.t == FA_FP64 ? FA_FP64 : FA_FP32, 1))
      *rc = fail(CUDA_ERROR_ILLEGAL_ADDRESS, why, whylen, k->name, "the splits' workspace "
                 "outside every allocation");
    return 1;
  }
  *rc = run_cache(k, &s, p, garbage, why, whylen);
  return 1;
}
