/*
** fc_exec.c
** fatune's attention kernels, run by the fake driver: not their code, which
** the fake cannot execute, but their result. The kernel's name says what it
** computes (simt_f32_d64_m64n64w4_..., tc_bf16_..., wg_bf16_d128_m128n176c2_...
** with its consumer warpgroups, oracle_fp32_d64_causal, and the backward
** pass's launches tcbwd_bf16_d64_m128n128w8wn4wd2_dqatomic_dkdv... (and
** wgbwd_..._m128n128c2_..._dkdv, its consumer warpgroups), and
** fp8's V transposing launch wg_e4m3_..._vt before its attention: the
** dtype, the head dimension, the causal mask, the rows per CTA and the
** warps, and for the backward pass the launch's part); its
** parameter block (core/fa_params.h) says where the
** tensors lie and how big the problem is. The float64 reference computes
** the answer, which lands in the fake device memory where the strides say,
** in the output's dtype: a launch with a wrong pointer, stride, scale,
** shape or grid gives output that validation rejects, as on a GPU.
**
** The reference is costly (4 * B * H * Nq * Nk * D flops), and a timing
** loop launches the same kernel on the same inputs hundreds of times, so
** the last results are kept, keyed by everything they depend on: the
** parameter block's inputs, the problem, and the inputs' contents (each
** allocation's write generation).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_params.h"
#include "fa_problem.h"
#include "fakecuda.h"
#include "reference.h"

#define CACHE_SLOTS 4

/* What a kernel's name says. */
typedef struct kspec {
  fa_dtype in;          /* Q, K, V */
  fa_dtype out;         /* O: the input dtype's (fa_out_dtype); the oracle's: its accumulator */
  fa_dtype lse;         /* FA_FP64 or FA_FP32 */
  int dim, causal, oracle;
  int rows_per_cta;     /* 0: every row in one CTA (kv_outer) */
  int threads;
  int persistent;       /* ..._pers: the CTAs loop over the tiles, the grid one-dimensional */
  int bwd;              /* a launch of the backward pass: */
  int role;             /* its part (ROLE_...) */
  int vt;               /* fp8's first launch: V transposed into the workspace */
} kspec;

/* The backward pass's launches (templates/simtbwd, tcbwd, wgbwd): D into
** a workspace, dK and dV over K/V blocks, and dQ over Q blocks (its own
** pass, or the conversion of an accumulator the dK/dV launch added to);
** tcbwd's -qhead variants sum dK and dV over a GQA group after. */
enum { ROLE_PRE = 1, ROLE_DKDV, ROLE_DQ, ROLE_SUM };

/* The part of a backward launch that its name's last token says, and the
** length of the name without it; 0 when it names none. */
static int bwd_role(const char *name, size_t *base) {
  static const struct { const char *tail; int role; } m[] = {
    {"_pre", ROLE_PRE}, {"_dkdv", ROLE_DKDV}, {"_dq", ROLE_DQ}, {"_dqconvert", ROLE_DQ},
    {"_dkvsum", ROLE_SUM}};
  const size_t len = strlen(name);
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    const size_t t = strlen(m[i].tail);
    if (len > t && !strcmp(name + len - t, m[i].tail)) {
      *base = len - t;
      return m[i].role;
    }
  }
  return 0;
}

static int parse_dtype(const char *s, fa_dtype *t) {
  static const struct { const char *tok; fa_dtype t; } m[] = {
    {"f32_", FA_FP32}, {"f64_", FA_FP64}, {"f16_", FA_FP16}, {"bf16_", FA_BF16},
    {"fp32_", FA_FP32}, {"fp64_", FA_FP64}, {"fp16_", FA_FP16}, {"e4m3_", FA_E4M3}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (!strncmp(s, m[i].tok, strlen(m[i].tok))) {
      *t = m[i].t;
      return (int)strlen(m[i].tok);
    }
  return 0;
}

/* 0 when `name` is one of fatune's attention kernels or its oracle. */
static int parse_name(const char *name, kspec *s) {
  memset(s, 0, sizeof *s);
  const char *p;
  int hopper = 0;
  if (!strncmp(name, "oracle_", 7)) s->oracle = 1, p = name + 7;
  else if (!strncmp(name, "simt_", 5)) p = name + 5;
  else if (!strncmp(name, "tc_", 3)) p = name + 3;
  else if (!strncmp(name, "wg_", 3)) hopper = 1, p = name + 3;
  else if (!strncmp(name, "simtbwd_", 8)) s->bwd = 1, p = name + 8;
  else if (!strncmp(name, "tcbwd_", 6)) s->bwd = 1, p = name + 6;
  else if (!strncmp(name, "wgbwd_", 6)) s->bwd = 1, hopper = 1, p = name + 6;
  else return -1;
  int n = parse_dtype(p, &s->in);
  if (!n || sscanf(p + n, "d%d", &s->dim) != 1 || s->dim < 1 || s->dim > FA_DIM_MAX) return -1;
  size_t len = strlen(name);
  if (s->bwd && !(s->role = bwd_role(name, &len))) return -1;
  if (hopper && len > 3 && !strcmp(name + len - 3, "_vt")) s->vt = 1, len -= 3;
  s->causal = len > 7 && !strncmp(name + len - 7, "_causal", 7);
  s->lse = s->in == FA_FP64 ? FA_FP64 : FA_FP32;
  s->out = s->oracle ? s->lse : fa_out_dtype(s->in);
  if (s->oracle) {
    s->rows_per_cta = 1, s->threads = 128;   /* templates/oracle.lua */
    return 0;
  }
  const char *m = strstr(p, "_m");
  int bm, bn, w;
  /* wg_..._m128n176c2_...: consumer warpgroups and a producer's */
  if (!m || sscanf(m, hopper ? "_m%dn%dc%d" : "_m%dn%dw%d", &bm, &bn, &w) != 3 || bm < 1 || w < 1)
    return -1;
  s->rows_per_cta = strstr(p, "_kvouter_") ? 0 : s->role == ROLE_DKDV ? bn : bm;
  s->persistent = hopper && strstr(p, "_pers") != NULL && !s->vt;
  s->threads = s->vt ? 128 : hopper ? 128 * (w + 1) : 32 * w;
  s->rows_per_cta = s->vt ? 32 : s->rows_per_cta;   /* keys per CTA of the transpose */
  return 0;
}

/* The host bytes of a (B, H, N, D) tensor of dtype t at device address a
** with the given strides; NULL when any element lies outside the
** allocations (on a GPU: an illegal address). */
static void *tensor(const void *a, long long sb, long long sh, long long sn, int b, int h, int n,
                    int d, fa_dtype t, int write) {
  if (sb < 0 || sh < 0 || sn < 0) return NULL;
  long long last = (b - 1) * sb + (h - 1) * sh + (n - 1) * sn + d;
  return fc_mem_map((CUdeviceptr)(size_t)a, (size_t)last * (size_t)fa_dtype_size(t), write);
}

/* Gather a strided tensor into a contiguous float64 one. */
static double *gather(const void *src, fa_dtype t, long long sb, long long sh, long long sn,
                      int B, int H, int N, int D) {
  double *x = malloc((size_t)B * H * N * D * sizeof *x);
  if (!x) return NULL;
  size_t i = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++)
          x[i++] = fa_elem_get(src, t, (size_t)(b * sb + h * sh + n * sn + d));
  return x;
}

typedef struct slot {
  fa_params key;            /* with o, lse and ws zeroed */
  kspec spec;
  unsigned long long gen[3];
  double *o, *lse;          /* contiguous (B, H, Nq, D) and (B, H, Nq) */
  unsigned long long used;
  /* The last launch's writes: when O and the logsumexp have not changed
  ** since, writing the same bytes again would change nothing. */
  fa_params last;
  unsigned grid[3];
  int garbage;
  unsigned long long o_gen, lse_gen;
} slot;

static slot cache[CACHE_SLOTS];
static unsigned long long tick;

static slot *lookup(const fa_params *key, const kspec *s, const unsigned long long gen[3]) {
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].o && !memcmp(&cache[i].key, key, sizeof *key) &&
        !memcmp(&cache[i].spec, s, sizeof *s) && !memcmp(cache[i].gen, gen, sizeof cache[i].gen))
      return &cache[i];
  return NULL;
}

/* K/V heads: heads / kv_group under GQA and MQA. */
static int kv_heads(const fa_params *p) { return p->kv_group > 1 ? p->heads / p->kv_group : p->heads; }

/* fp8's descales (fa_params.h: per (batch, K/V head), each NULL or in an
** allocation; one outside them is taken as 1, which validation then
** rejects) applied to the gathered inputs (q per query head, k and v per
** K/V head), as the kernels apply them. */
static void descale(const fa_params *p, double *q, double *k, double *v, int Nq, int Nk, int D) {
  const int H = p->heads, kvh = kv_heads(p);
  const size_t n = (size_t)p->batch * (size_t)kvh, nq = (size_t)Nq * D, nk = (size_t)Nk * D;
  const float *ds[3];
  const float *const at[3] = {p->q_descale, p->k_descale, p->v_descale};
  for (int i = 0; i < 3; i++)
    ds[i] = at[i] ? fc_mem_map((CUdeviceptr)(size_t)at[i], n * sizeof(float), 0) : NULL;
  for (int b = 0; b < p->batch; b++)
    for (int h = 0; h < H; h++) {
      const size_t j = (size_t)b * kvh + (size_t)(h / (H / kvh)), bh = (size_t)b * H + h;
      for (size_t i = 0; ds[0] && i < nq; i++) q[bh * nq + i] *= ds[0][j];
      if (h % (H / kvh)) continue;   /* K/V head j once */
      for (size_t i = 0; ds[1] && i < nk; i++) k[j * nk + i] *= ds[1][j];
      for (size_t i = 0; ds[2] && i < nk; i++) v[j * nk + i] *= ds[2][j];
    }
}

/* The reference's answer for these inputs, computed or from the cache. */
static slot *answer(const fa_params *p, const kspec *s, const void *q, const void *k,
                    const void *v) {
  fa_params key = *p;
  key.o = key.lse = key.ws = NULL;
  unsigned long long gen[3] = {fc_mem_gen((CUdeviceptr)(size_t)p->q),
                               fc_mem_gen((CUdeviceptr)(size_t)p->k),
                               fc_mem_gen((CUdeviceptr)(size_t)p->v)};
  slot *c = lookup(&key, s, gen);
  if (c) return c->used = ++tick, c;
  c = &cache[0];
  for (int i = 1; i < CACHE_SLOTS; i++)
    if (cache[i].used < c->used) c = &cache[i];
  free(c->o), free(c->lse);
  memset(c, 0, sizeof *c);
  const int B = p->batch, H = p->heads, HK = kv_heads(p), Nq = p->seq_q, Nk = p->seq_k, D = s->dim;
  fa_problem pr = {.batch = B, .heads = H, .seq_q = Nq, .seq_k = Nk, .dim = D, .dtype = s->in,
                   .causal = s->causal, .scale = p->scale_log2 / 1.4426950408889634074,
                   .kv_group = H / HK};
  /* K and V: (B, HK, Nk, D), contiguous here */
  const fa_layout lk = {.sn = D, .sh = (long long)Nk * D, .sb = (long long)HK * Nk * D};
  double *dq = gather(q, s->in, p->q_sb, p->q_sh, p->q_sn, B, H, Nq, D);
  double *dk = gather(k, s->in, p->k_sb, p->k_sh, p->k_sn, B, HK, Nk, D);
  double *dv = gather(v, s->in, p->v_sb, p->v_sh, p->v_sn, B, HK, Nk, D);
  if (dq && dk && dv) descale(p, dq, dk, dv, Nq, Nk, D);
  c->o = malloc((size_t)B * H * Nq * D * sizeof *c->o);
  c->lse = malloc((size_t)B * H * Nq * sizeof *c->lse);
  int ok = dq && dk && dv && c->o && c->lse && pr.scale > 0 &&
           ref_attention(&pr, dq, fa_layout_contiguous(&pr, Nq), dk, lk, dv, lk, c->o,
                         fa_layout_contiguous(&pr, Nq), c->lse) == 0;
  free(dq), free(dk), free(dv);
  if (!ok) {
    free(c->o), free(c->lse);
    memset(c, 0, sizeof *c);
    return NULL;
  }
  c->key = key, c->spec = *s, c->used = ++tick;
  memcpy(c->gen, gen, sizeof gen);
  return c;
}

double fc_junk(size_t i) { return sin((double)i * 12.9898) * 3.0; }

/* Write the rows the grid covers, where the strides say. */
static void scatter(const fa_params *p, const kspec *s, const slot *c, void *o, void *lse,
                    const unsigned grid[3], int garbage) {
  const int D = s->dim;
  long long rows = s->rows_per_cta ? (long long)grid[0] * s->rows_per_cta : p->seq_q;
  if (rows > p->seq_q) rows = p->seq_q;
  for (int b = 0; b < p->batch && b < (int)grid[2]; b++)
    for (int h = 0; h < p->heads && h < (int)grid[1]; h++)
      for (int r = 0; r < rows; r++) {
        size_t row = ((size_t)b * p->heads + h) * p->seq_q + r;
        long long base = b * p->o_sb + h * p->o_sh + r * p->o_sn;
        for (int d = 0; d < D; d++)
          fa_elem_put(o, s->out, (size_t)(base + d),
                      garbage ? fc_junk(row * D + d) : c->o[row * D + d]);
        fa_elem_put(lse, s->lse, row, garbage ? fc_junk(row) : c->lse[row]);
      }
}

/* ---- The backward pass ---- */

/* The last backward answer: dq, dk and dv of the inputs it was computed
** for (the parameter block with its outputs and workspaces zeroed, and the
** inputs' write generations); the launches of one run share it. */
static struct {
  fa_params key;
  kspec spec;               /* what the answer depends on: dtype, dim, causal */
  unsigned long long gen[4];
  double *dq, *dk, *dv;     /* contiguous (B, H, N, D) */
} bwd_cache;

static const double *const *bwd_answer(const fa_params *p, const kspec *s, const void *q,
                                       const void *k, const void *v, const void *dout) {
  static const double *out[3];
  fa_params key = *p;
  key.dq = key.dk = key.dv = key.ws = key.ws2 = NULL;
  kspec spec;
  memset(&spec, 0, sizeof spec);
  spec.in = s->in, spec.dim = s->dim, spec.causal = s->causal;
  const void *in[4] = {p->q, p->k, p->v, p->dout};
  unsigned long long gen[4];
  for (int i = 0; i < 4; i++) gen[i] = fc_mem_gen((CUdeviceptr)(size_t)in[i]);
  if (!bwd_cache.dq || memcmp(&bwd_cache.key, &key, sizeof key) ||
      memcmp(&bwd_cache.spec, &spec, sizeof spec) || memcmp(bwd_cache.gen, gen, sizeof gen)) {
    free(bwd_cache.dq), free(bwd_cache.dk), free(bwd_cache.dv);
    memset(&bwd_cache, 0, sizeof bwd_cache);
    const int B = p->batch, H = p->heads, Nq = p->seq_q, Nk = p->seq_k, D = s->dim;
    const int HK = kv_heads(p);   /* K, V, dK and dV: (B, HK, Nk, D), contiguous here */
    fa_problem pr = {.batch = B, .heads = H, .seq_q = Nq, .seq_k = Nk, .dim = D, .dtype = s->in,
                     .causal = s->causal, .scale = p->scale_log2 / 1.4426950408889634074,
                     .op = FA_OP_BWD, .kv_group = H / HK};
    const fa_layout lq = fa_layout_contiguous(&pr, Nq);
    const fa_layout lk = {.sn = D, .sh = (long long)Nk * D, .sb = (long long)HK * Nk * D};
    double *xq = gather(q, s->in, p->q_sb, p->q_sh, p->q_sn, B, H, Nq, D);
    double *xk = gather(k, s->in, p->k_sb, p->k_sh, p->k_sn, B, HK, Nk, D);
    double *xv = gather(v, s->in, p->v_sb, p->v_sh, p->v_sn, B, HK, Nk, D);
    double *xd = gather(dout, s->in, p->do_sb, p->do_sh, p->do_sn, B, H, Nq, D);
    double *dq = malloc((size_t)B * H * Nq * D * sizeof *dq);
    double *dk = malloc((size_t)B * HK * Nk * D * sizeof *dk);
    double *dv = malloc((size_t)B * HK * Nk * D * sizeof *dv);
    const ref_bwd_io io = {xq, xk, xv, xd, lq, lk, lk, lq, dq, dk, dv, lq, lk, lk, NULL, NULL, NULL};
    const int ok = xq && xk && xv && xd && dq && dk && dv && pr.scale > 0 &&
                   ref_attention_backward(&pr, &io) == 0;
    free(xq), free(xk), free(xv), free(xd);
    if (!ok) {
      free(dq), free(dk), free(dv);
      return NULL;
    }
    bwd_cache.key = key, bwd_cache.spec = spec, bwd_cache.dq = dq, bwd_cache.dk = dk;
    bwd_cache.dv = dv;
    memcpy(bwd_cache.gen, gen, sizeof gen);
  }
  out[0] = bwd_cache.dq, out[1] = bwd_cache.dk, out[2] = bwd_cache.dv;
  return out;
}

/* Rows [0, rows) of every (batch, head) the grid covers of a (B, H, N, D)
** gradient from its contiguous answer x, where the strides say. */
static void scatter_grad(void *dst, fa_dtype t, long long sb, long long sh, long long sn,
                         const fa_params *p, int heads, int n, int rows, int D,
                         const unsigned grid[3], const double *x, int garbage) {
  for (int b = 0; b < p->batch && b < (int)grid[2]; b++)
    for (int h = 0; h < heads && h < (int)grid[1]; h++)
      for (int r = 0; r < rows; r++) {
        const size_t row = ((size_t)b * heads + h) * n + r;
        for (int d = 0; d < D; d++)
          fa_elem_put(dst, t, (size_t)(b * sb + h * sh + r * sn + d),
                      garbage ? fc_junk(row * D + d) : x[row * D + d]);
      }
}

/* A launch of the backward pass: the D launch writes nothing the fake reads;
** the dK/dV launch writes the rows of dk and dv its grid covers, the dQ
** launch those of dq, from the float64 reference on Q, K, V and dO (it
** recomputes O and lse, which must still lie in allocations). */
static CUresult exec_bwd(const fc_kernel *fk, const fa_params *p, const kspec *s,
                         const unsigned grid[3], int garbage, char *why, size_t whylen) {
  /* D, and the sums under GQA, which the dK/dV launch's answer holds */
  if (s->role == ROLE_PRE || s->role == ROLE_SUM) return CUDA_SUCCESS;
  if (p->dlse) {
    snprintf(why, whylen, "kernel %s: a gradient of the logsumexp, which the fake does not "
             "compute", fk->name);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const int B = p->batch, H = p->heads, HK = kv_heads(p), Nq = p->seq_q, Nk = p->seq_k, D = s->dim;
  const void *q = tensor(p->q, p->q_sb, p->q_sh, p->q_sn, B, H, Nq, D, s->in, 0);
  const void *k = tensor(p->k, p->k_sb, p->k_sh, p->k_sn, B, HK, Nk, D, s->in, 0);
  const void *v = tensor(p->v, p->v_sb, p->v_sh, p->v_sn, B, HK, Nk, D, s->in, 0);
  const void *dout = tensor(p->dout, p->do_sb, p->do_sh, p->do_sn, B, H, Nq, D, s->in, 0);
  const void *o = tensor(p->o, p->o_sb, p->o_sh, p->o_sn, B, H, Nq, D, s->in, 0);
  const void *lse = fc_mem_map((CUdeviceptr)(size_t)p->lse,
                               (size_t)B * H * Nq * fa_dtype_size(s->lse), 0);
  const int dkdv = s->role == ROLE_DKDV;
  void *g1 = dkdv ? tensor(p->dk, p->dk_sb, p->dk_sh, p->dk_sn, B, HK, Nk, D, s->in, 1)
                  : tensor(p->dq, p->dq_sb, p->dq_sh, p->dq_sn, B, H, Nq, D, s->in, 1);
  void *g2 = dkdv ? tensor(p->dv, p->dv_sb, p->dv_sh, p->dv_sn, B, HK, Nk, D, s->in, 1) : g1;
  if (!q || !k || !v || !dout || !o || !lse || !g1 || !g2) {
    snprintf(why, whylen, "kernel %s: %s outside every allocation", fk->name,
             !q ? "Q" : !k ? "K" : !v ? "V" : !dout ? "dO" : !o ? "O" : !lse ? "the logsumexp"
             : dkdv ? (!g1 ? "dK" : "dV") : "dQ");
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  const double *const *x = bwd_answer(p, s, q, k, v, dout);
  if (!x) {
    snprintf(why, whylen, "kernel %s: the reference failed (scale %g, out of memory?)",
             fk->name, p->scale_log2);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const int n = dkdv ? Nk : Nq;
  long long rows = (long long)grid[0] * s->rows_per_cta;
  if (rows > n) rows = n;
  if (dkdv) {
    scatter_grad(g1, s->in, p->dk_sb, p->dk_sh, p->dk_sn, p, HK, Nk, (int)rows, D, grid, x[1],
                 garbage);
    scatter_grad(g2, s->in, p->dv_sb, p->dv_sh, p->dv_sn, p, HK, Nk, (int)rows, D, grid, x[2],
                 garbage);
  } else {
    scatter_grad(g1, s->in, p->dq_sb, p->dq_sh, p->dq_sn, p, H, Nq, (int)rows, D, grid, x[0],
                 garbage);
  }
  return CUDA_SUCCESS;
}

CUresult fc_exec(const fc_kernel *k, const void *params, const unsigned grid[3],
                 const unsigned block[3], unsigned smem, int garbage, char *why, size_t whylen) {
  kspec s;
  fa_params p;
  /* The serving kernels (fc_serve.c): a variable-length batch's, over a
  ** KV cache, decoding. */
  CUresult served;
  if (k->nparams == 1 && k->param_size[0] == (int)sizeof p) {
    memcpy(&p, (const unsigned char *)params + k->param_offset[0], sizeof p);
    if (fc_serve_exec(k, &p, garbage, &served, why, whylen)) return served;
  }
  if (parse_name(k->name, &s) != 0 || strstr(k->name, "_varlen") || strstr(k->name, "_paged")) {
    snprintf(why, whylen, "kernel %s: not one of fatune's attention kernels the fake runs",
             k->name);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (k->nparams != 1 || k->param_size[0] != (int)sizeof p) {
    fc_violation("kernel %s takes %d parameter(s), the first of %d bytes; fa_params is %zu",
                 k->name, k->nparams, k->param_size[0], sizeof p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* The block sits at its offset in the parameter space (0x20 for an
  ** fa_params aligned to 64 for its tensor maps). */
  memcpy(&p, (const unsigned char *)params + k->param_offset[0], sizeof p);
  if (block[0] != (unsigned)s.threads || block[1] != 1 || block[2] != 1)
    fc_violation("kernel %s is written for %d threads, launched with %ux%ux%u", k->name,
                 s.threads, block[0], block[1], block[2]);
  /* A persistent kernel's CTAs, at most one per tile, cover every tile. */
  const int rpc = s.rows_per_cta > 0 ? s.rows_per_cta : 1;
  const unsigned all[3] = {p.seq_q > 0 ? (unsigned)((p.seq_q + rpc - 1) / rpc) : 0,
                           p.heads > 0 ? (unsigned)p.heads : 0, p.batch > 0 ? (unsigned)p.batch : 0};
  const unsigned long long tiles = (unsigned long long)all[0] * all[1] * all[2];
  if (s.persistent && (grid[1] != 1 || grid[2] != 1 || grid[0] < 1 || grid[0] > tiles))
    fc_violation("persistent kernel %s: grid %ux%ux%u for %llu tiles", k->name, grid[0], grid[1],
                 grid[2], tiles);
  if (s.persistent) grid = all;
  /* a CTA per query head; per K/V head for fp8's transpose and, under GQA,
  ** for the backward pass's launches over K/V blocks */
  else if ((grid[1] != (unsigned)(s.vt ? kv_heads(&p) : p.heads) &&
            !(s.bwd && grid[1] == (unsigned)kv_heads(&p))) ||
           grid[2] != (unsigned)p.batch)
    fc_violation("kernel %s: grid %ux%ux%u for %d heads (%d a K/V head) and batch %d", k->name,
                 grid[0], grid[1], grid[2], p.heads, p.kv_group > 1 ? p.kv_group : 1, p.batch);
  /* The oracle keeps a score row and one partial per thread in shared memory. */
  if (s.oracle &&
      smem < (unsigned)((p.seq_k + s.threads) * fa_dtype_size(s.lse))) {
    snprintf(why, whylen, "oracle %s: %u bytes of dynamic shared memory for seq_k %d", k->name,
             smem, p.seq_k);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (p.batch < 1 || p.heads < 1 || p.seq_q < 1 || p.seq_k < 1) return CUDA_SUCCESS;
  if (s.bwd) return exec_bwd(k, &p, &s, grid, garbage, why, whylen);
  if (s.vt) {  /* what it writes only the GPU's attention launch reads: V must lie in memory */
    if (!tensor(p.v, p.v_sb, p.v_sh, p.v_sn, p.batch, p.heads, p.seq_k, s.dim, s.in, 0) || !p.ws) {
      snprintf(why, whylen, "kernel %s: %s outside every allocation", k->name, p.ws ? "V" : "its workspace");
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return CUDA_SUCCESS;
  }
  const void *q = tensor(p.q, p.q_sb, p.q_sh, p.q_sn, p.batch, p.heads, p.seq_q, s.dim, s.in, 0);
  const void *kk = tensor(p.k, p.k_sb, p.k_sh, p.k_sn, p.batch, kv_heads(&p), p.seq_k, s.dim, s.in, 0);
  const void *v = tensor(p.v, p.v_sb, p.v_sh, p.v_sn, p.batch, kv_heads(&p), p.seq_k, s.dim, s.in, 0);
  void *o = tensor(p.o, p.o_sb, p.o_sh, p.o_sn, p.batch, p.heads, p.seq_q, s.dim, s.out, 0);
  void *lse = fc_mem_map((CUdeviceptr)(size_t)p.lse,
                         (size_t)p.batch * p.heads * p.seq_q * fa_dtype_size(s.lse), 0);
  if (!q || !kk || !v || !o || !lse) {
    snprintf(why, whylen, "kernel %s: %s outside every allocation", k->name,
             !q ? "Q" : !kk ? "K" : !v ? "V" : !o ? "O" : "the logsumexp");
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  slot *c = answer(&p, &s, q, kk, v);
  if (!c) {
    snprintf(why, whylen, "kernel %s: the reference failed (scale %g, out of memory?)",
             k->name, p.scale_log2);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUdeviceptr od = (CUdeviceptr)(size_t)p.o, ld = (CUdeviceptr)(size_t)p.lse;
  if (!memcmp(&c->last, &p, sizeof p) && !memcmp(c->grid, grid, sizeof c->grid) &&
      c->garbage == garbage && fc_mem_gen(od) == c->o_gen && fc_mem_gen(ld) == c->lse_gen)
    return CUDA_SUCCESS;
  scatter(&p, &s, c, o, lse, grid, garbage);
  fc_mem_map(od, 1, 1), fc_mem_map(ld, 1, 1);   /* their contents changed */
  c->last = p, c->garbage = garbage, c->o_gen = fc_mem_gen(od), c->lse_gen = fc_mem_gen(ld);
  memcpy(c->grid, grid, sizeof c->grid);
  return CUDA_SUCCESS;
}

static unsigned long long fnv1a(const char *s) {
  unsigned long long h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

double fc_exec_ms(const fc_kernel *k, const void *params, int sm_count, int clock_khz) {
  kspec s;
  fa_params p;
  if (parse_name(k->name, &s) != 0) return 0.005;
  /* The block sits at its offset in the parameter space (0x20 for an
  ** fa_params aligned to 64 for its tensor maps). */
  memcpy(&p, (const unsigned char *)params + k->param_offset[0], sizeof p);
  double pairs = (double)p.seq_q * p.seq_k * (s.causal ? 0.5 : 1.0);
  /* The backward pass's products: four in the dK/dV launch, none in D's. */
  const double products = !s.bwd ? 2 : s.role == ROLE_DKDV ? 4 : s.role == ROLE_DQ ? 1 : 0;
  double flops = 2.0 * products * p.batch * p.heads * s.dim * pairs;
  double bytes = 2.0 * p.batch * p.heads * (p.seq_q + p.seq_k) * s.dim * fa_dtype_size(s.in);
  /* Peak flops per SM per clock: tensor cores for 16-bit, else FMA units. */
  double per_clk = s.in == FA_E4M3 ? 4096 : s.in == FA_FP16 || s.in == FA_BF16 ? 2048
                 : s.in == FA_FP32 ? 128 : 64;
  double peak = per_clk * sm_count * clock_khz * 1e3;
  /* The efficiency a variant reaches: a fixed function of its name. */
  double eff = s.oracle ? 0.02 : 0.15 + 0.7 * (double)(fnv1a(k->name) % 1000) / 1000.0;
  double t = fmax(flops / (peak * eff), bytes / 2.0e12);
  return (t + 4e-6) * 1e3;
}
