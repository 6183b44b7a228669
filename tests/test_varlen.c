/*
** test_varlen.c
** Variable-length batches through fatune_attention_varlen on the emulator:
** q, k, v and o packed as (total, heads, dim), sequences of their own
** lengths (0 and 1 among them, none a multiple of a tile), GQA, causal per
** sequence, against the float64 reference run on each sequence alone.
** Each case runs the family's default or a variant recorded as the best
** for the dense key of its longest sequences (simt's kv_outer, with its
** workspace; tc's query blocks from the last down under causal), which
** the dense key's choice must be. O and lse are poisoned with NaN
** before the call; the padding between packed rows must keep its poison.
** Then the bad metadata: offsets that decrease, run past the tokens
** packed, or are wider than the maxima; the kernels must not read out of
** bounds (the emulator checks every access) and the call says so.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db.h"
#include "fatune.h"
#include "gen.h"
#include "reference.h"
#include "validate.h"

static unsigned long long rng_state = 0x2545F4914F6CDD1Dull;

static double uniform(void) {
  unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 - 0.5;
}

#define MAXB 6

typedef struct vcase {
  const char *config;   /* the variant to record, or NULL: the default runs */
  const char *family;   /* the family that must run */
  fa_dtype dtype;
  int dim, dim_v, heads, kv_heads, causal, pad;  /* pad: elements past each packed row */
  int batch, q_lens[MAXB], k_lens[MAXB];
} vcase;

static const vcase cases[] = {
  {NULL, "simt", FA_FP32, 32, 0, 4, 2, 0, 0, 4, {5, 1, 0, 37}, {9, 1, 3, 40}},
  {NULL, "simt", FA_FP32, 24, 40, 2, 1, 1, 3, 5, {17, 3, 30, 1, 8}, {17, 9, 12, 1, 33}},
  {"family=simt,block_m=16,block_n=16,warps=2,par=kv_outer,split=split_q,layout=pad,q=smem",
   "simt", FA_FP32, 16, 0, 3, 3, 1, 0, 3, {20, 7, 33}, {20, 30, 2}},
  {NULL, "tc", FA_FP16, 64, 0, 4, 1, 1, 8, 3, {70, 1, 129}, {70, 200, 129}},
  {"family=tc,block_m=64,block_n=32,warps=4,q=reg", "tc", FA_BF16, 32, 0, 2, 2, 1, 0, 4,
   {65, 2, 0, 100}, {65, 40, 7, 90}},
  {NULL, "tc", FA_BF16, 128, 0, 2, 2, 0, 0, 2, {33, 64}, {0, 64}},
};

static char dir[] = "/tmp/fatune-test-varlen-XXXXXX";

/* A packed tensor (1, heads, total, dim), rows pad elements apart beyond
** dim, every element poison (NaN); data the bytes, ref a contiguous
** float64 copy (total, heads, dim) of what was stored. */
typedef struct packed {
  fatune_tensor t;
  void *data;
  double *ref;
  size_t n;   /* elements, padding included */
} packed;

static int packed_make(packed *x, fa_dtype dt, int heads, int total, int dim, int pad, int fill) {
  const long long row = (long long)heads * dim + pad;
  x->n = (size_t)(total > 0 ? total : 1) * (size_t)row;
  x->data = malloc(x->n * (size_t)fa_dtype_size(dt));
  x->ref = calloc((size_t)(total > 0 ? total : 1) * (size_t)heads * (size_t)dim, sizeof(double));
  if (!x->data || !x->ref) return -1;
  for (size_t i = 0; i < x->n; i++) fa_elem_put(x->data, dt, i, NAN);
  x->t = (fatune_tensor){.data = x->data, .dtype = (fatune_dtype)dt,
                         .shape = {1, heads, total > 0 ? total : 1, dim},
                         .stride = {0, dim, row, 1}};
  for (int n = 0; fill && n < total; n++)
    for (int h = 0; h < heads; h++)
      for (int d = 0; d < dim; d++)
        x->ref[((size_t)n * heads + h) * dim + d] =
            fa_elem_put(x->data, dt, (size_t)(n * row + h * dim + d), 2 * uniform());
  return 0;
}

static void packed_free(packed *x) { free(x->data), free(x->ref); }

static double got(const packed *x, fa_dtype dt, int n, int h, int d) {
  return fa_elem_get(x->data, dt, (size_t)(n * x->t.stride[2] + h * x->t.stride[1] + d));
}

/* Whether every padding element still holds poison. */
static int padding_kept(const packed *x, fa_dtype dt) {
  const long long row = x->t.stride[2], used = x->t.shape[1] * x->t.shape[3];
  for (size_t i = 0; i < x->n; i++)
    if ((long long)(i % (size_t)row) >= used && !isnan(fa_elem_get(x->data, dt, i))) return 0;
  return 1;
}

/* The variant of config recorded as the best for the dense key of p. */
static int record(gen_state *g, const gen_target *t, const char *config, const fa_problem *p,
                  const char *path, char *name, size_t nn) {
  gen_kernel k;
  char json[1024], err[512];
  if (gen_render_config(g, config, p, t, &k) != 0) {
    fprintf(stderr, "%s: %s\n", config, gen_errmsg(g));
    return -1;
  }
  snprintf(name, nn, "%s", k.name);
  db *d = NULL;
  long long dev, var;
  int rc = gen_config_json(&k.cfg, json, sizeof json) != 0 || db_open(path, DB_CREATE, &d, err, sizeof err);
  db_device dd = {.name = "CPU emulator", .uuid = "emu", .backend = "emu"};
  db_variant dv = {k.cfg.family, k.template_version, k.name, k.hash, json, k.source_hash, "fwd",
                   NULL, NULL};
  db_trial tr = {.status = "ok", .median_us = NAN, .min_us = NAN, .p20_us = NAN, .p80_us = NAN,
                 .tflops = NAN, .gbps = NAN,
                 .counters = "{\"global_bytes_read\": 1, \"global_bytes_written\": 1}",
                 .problem = {.dtype = fa_dtype_name(p->dtype), .dim = p->dim, .seq_q = p->seq_q,
                             .seq_k = p->seq_k, .batch = p->batch, .heads = p->heads,
                             .causal = p->causal, .op = "fwd", .dim_v = p->dim_v}};
  if (!rc) rc = db_device_id(d, &dd, &dev, err, sizeof err) || db_variant_id(d, &dv, &var, err, sizeof err);
  tr.variant_id = var, tr.device_id = dev;
  if (!rc) rc = db_trial_put(d, &tr, err, sizeof err);
  if (rc) fprintf(stderr, "recording %s: %s\n", k.name, err);
  if (d) db_close(d);
  gen_kernel_free(&k);
  return rc ? -1 : 0;
}

/* The reference of sequence b, its rows at q0 and keys at k0 of the packed
** float64 copies, into o and lse (contiguous (lq, heads, dim_v), [heads][total_q]). */
static int reference(const vcase *c, const packed *q, const double *kx, const double *vx, int q0,
                     int k0, int b, int total_q, double *o, double *lse) {
  const int H = c->heads, D = c->dim, DV = c->dim_v ? c->dim_v : c->dim;
  const int lq = c->q_lens[b], lk = c->k_lens[b];
  if (lq == 0) return 0;
  double *lse_b = malloc((size_t)H * lq * sizeof *lse_b);
  if (!lse_b) return -1;
  int rc = 0;
  if (lk == 0) {   /* no key: zeros and -inf, as a fully masked row */
    memset(o + (size_t)q0 * H * DV, 0, (size_t)lq * H * DV * sizeof *o);
    for (int i = 0; i < H * lq; i++) lse_b[i] = -INFINITY;
  } else {
    const fa_problem sp = {.batch = 1, .heads = H, .seq_q = lq, .seq_k = lk, .dim = D,
                           .dim_v = c->dim_v, .dtype = c->dtype, .causal = c->causal};
    const fa_layout lq_l = {0, D, (long long)H * D}, lv = {0, DV, (long long)H * DV};
    rc = ref_attention(&sp, q->ref + (size_t)q0 * H * D, lq_l, kx + (size_t)k0 * H * D, lq_l,
                       vx + (size_t)k0 * H * DV, lv, o + (size_t)q0 * H * DV, lv, lse_b);
  }
  for (int h = 0; h < H; h++)
    for (int r = 0; r < lq; r++) lse[(size_t)h * total_q + q0 + r] = lse_b[(size_t)h * lq + r];
  free(lse_b);
  return rc;
}

/* K or V repeated over each K/V head's group of query heads. */
static double *repeat_heads(const double *x, int total, int hk, int h, int dim) {
  double *r = malloc((size_t)(total > 0 ? total : 1) * h * dim * sizeof *r);
  for (int n = 0; r && n < total; n++)
    for (int i = 0; i < h; i++)
      memcpy(r + ((size_t)n * h + i) * dim, x + ((size_t)n * hk + i / (h / hk)) * dim,
             (size_t)dim * sizeof *r);
  return r;
}

static void run_case(int i, const vcase *c, gen_state *g, const gen_target *t) {
  const int H = c->heads, HK = c->kv_heads, D = c->dim, DV = c->dim_v ? c->dim_v : c->dim;
  int cu_q[MAXB + 1] = {0}, cu_k[MAXB + 1] = {0}, max_q = 1, max_k = 1;
  for (int b = 0; b < c->batch; b++) {
    cu_q[b + 1] = cu_q[b] + c->q_lens[b], cu_k[b + 1] = cu_k[b] + c->k_lens[b];
    if (c->q_lens[b] > max_q) max_q = c->q_lens[b];
    if (c->k_lens[b] > max_k) max_k = c->k_lens[b];
  }
  const int TQ = cu_q[c->batch], TK = cu_k[c->batch];
  char path[256], want[256] = "", name[256] = "", what[320];
  snprintf(path, sizeof path, "%s/case-%d.db", dir, i);
  snprintf(what, sizeof what, "case %d (%s %s d%d/%d h%d/%d%s, %d sequences)", i,
           c->config ? c->config : "the default", fa_dtype_name(c->dtype), D, DV, H, HK,
           c->causal ? " causal" : "", c->batch);
  const fa_problem dense = {.batch = c->batch, .heads = H, .seq_q = max_q, .seq_k = max_k,
                            .dim = D, .dim_v = c->dim_v, .dtype = c->dtype, .causal = c->causal};
  if (c->config && record(g, t, c->config, &dense, path, want, sizeof want) != 0) {
    CHECK(0, "%s: recording its variant", what);
    return;
  }
  packed q, k, v, o;
  memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v), memset(&o, 0, sizeof o);
  const int es = fa_lse_size(c->dtype);
  void *lse = malloc((size_t)H * TQ * (size_t)es);
  double *oref = calloc((size_t)TQ * H * DV + 1, sizeof *oref);
  double *lref = calloc((size_t)H * TQ + 1, sizeof *lref), *kx = NULL, *vx = NULL;
  fatune_ctx *ctx = NULL;
  const fatune_options opts = {.db_path = path, .backend = "emu"};
  if (!lse || !oref || !lref || packed_make(&q, c->dtype, H, TQ, D, c->pad, 1) ||
      packed_make(&k, c->dtype, HK, TK, D, c->pad, 1) ||
      packed_make(&v, c->dtype, HK, TK, DV, c->pad, 1) ||
      packed_make(&o, c->dtype, H, TQ, DV, c->pad, 0) ||
      !(kx = repeat_heads(k.ref, TK, HK, H, D)) || !(vx = repeat_heads(v.ref, TK, HK, H, DV))) {
    CHECK(0, "%s: out of memory", what);
    goto done;
  }
  for (size_t j = 0; j < (size_t)H * TQ; j++) fa_elem_put(lse, es == 8 ? FA_FP64 : FA_FP32, j, NAN);
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    CHECK(0, "%s: fatune_open: %s", what, fatune_errmsg());
    goto done;
  }
  fatune_varlen_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .lse = lse,
                          .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k, .batch = c->batch,
                          .max_seqlen_q = max_q, .max_seqlen_k = max_k, .causal = c->causal};
  if (fatune_attention_varlen(ctx, &a) != FATUNE_OK) {
    CHECK(0, "%s: %s", what, fatune_errmsg());
    goto done;
  }
  fatune_problem fp = {.batch = c->batch, .heads = H, .seq_q = max_q, .seq_k = max_k, .dim = D,
                       .dim_v = DV, .dtype = (fatune_dtype)c->dtype, .causal = c->causal};
  fatune_choice choice;
  /* The dense key's choice, which the varlen call runs in its varlen form. */
  if (fatune_choose(ctx, &fp, name, sizeof name, &choice) != FATUNE_OK)
    CHECK(0, "%s: fatune_choose: %s", what, fatune_errmsg());
  else if (c->config)
    CHECK(!strcmp(name, want) && choice == FATUNE_EXACT, "%s: the dense key's choice is %s, "
          "recorded %s", what, name, want);
  CHECK(!strncmp(name, c->family, strlen(c->family)) && name[strlen(c->family)] == '-',
        "%s: the %s family should run, not %s", what, c->family, name);
  for (int b = 0, rc = 0; b < c->batch && !rc; b++)
    if ((rc = reference(c, &q, kx, vx, cu_q[b], cu_k[b], b, TQ, oref, lref)) != 0)
      CHECK(0, "%s: the reference of sequence %d failed", what, b);
  double e2 = 0, r2 = 0, le = 0, l2 = 0, lr2 = 0;
  int bad = 0;
  for (int n = 0; n < TQ; n++)
    for (int h = 0; h < H; h++) {
      for (int d = 0; d < DV; d++) {
        const double x = got(&o, c->dtype, n, h, d), r = oref[((size_t)n * H + h) * DV + d];
        if (!isfinite(x)) bad++;
        e2 += (x - r) * (x - r), r2 += r * r;
      }
      const double l = fa_elem_get(lse, es == 8 ? FA_FP64 : FA_FP32, (size_t)h * TQ + n);
      const double lr = lref[(size_t)h * TQ + n];
      if (isinf(lr) ? l != lr : !isfinite(l)) {   /* no key: -inf exactly */
        if (le < 4) fprintf(stderr, "  lse h%d token %d: %.9g, the reference %.9g\n", h, n, l, lr);
        le++;
      } else if (!isinf(lr)) {
        l2 += (l - lr) * (l - lr), lr2 += lr * lr;
      }
    }
  /* The validator's tolerances (16-bit: P rounded before its row sum). */
  const double err = sqrt(e2 / (r2 > 0 ? r2 : 1)), lerr = sqrt(l2 / (lr2 > 0 ? lr2 : 1));
  const double tol = val_tolerance(c->dtype);
  CHECK(!bad && err <= tol, "%s: O has %d elements not finite, error %.3g (tolerance %.0e)", what,
        bad, err, tol);
  CHECK(le == 0 && lerr <= tol, "%s: %g logsumexps not finite or not -inf where no key is, "
        "error %.3g", what, le, lerr);
  CHECK(padding_kept(&o, c->dtype), "%s: a kernel wrote into O's padding", what);
  printf("%-60.60s %s: O %.2e lse %.2e\n", what, name, err, lerr);
done:
  if (ctx) fatune_close(ctx);
  packed_free(&q), packed_free(&k), packed_free(&v), packed_free(&o);
  free(lse), free(oref), free(lref), free(kx), free(vx);
}

/* Offsets no kernel may follow: the call fails, nothing is read out of
** bounds (the emulator stops any access outside the tensors). */
static void bad_metadata(void) {
  fatune_ctx *ctx = NULL;
  char path[256];
  snprintf(path, sizeof path, "%s/bad.db", dir);
  const fatune_options opts = {.db_path = path, .backend = "emu"};
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    CHECK(0, "fatune_open: %s", fatune_errmsg());
    return;
  }
  packed q, k, v, o;
  memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v), memset(&o, 0, sizeof o);
  if (packed_make(&q, FA_FP32, 2, 24, 16, 0, 1) || packed_make(&k, FA_FP32, 2, 24, 16, 0, 1) ||
      packed_make(&v, FA_FP32, 2, 24, 16, 0, 1) || packed_make(&o, FA_FP32, 2, 24, 16, 0, 0)) {
    CHECK(0, "out of memory");
    goto done;
  }
  static const struct { int q[4], k[4], max_q, max_k; const char *what; } bad[] = {
    {{0, 10, 5, 24}, {0, 8, 16, 24}, 19, 16, "cu_seqlens_q decreasing"},
    {{0, 8, 16, 24}, {0, 8, 16, 40}, 8, 24, "cu_seqlens_k past the keys packed"},
    {{-4, 8, 16, 24}, {0, 8, 16, 24}, 12, 8, "a negative offset"},
    {{0, 8, 20, 24}, {0, 8, 16, 24}, 8, 8, "a sequence longer than max_seqlen_q"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fatune_varlen_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .cu_seqlens_q = bad[i].q,
                            .cu_seqlens_k = bad[i].k, .batch = 3, .max_seqlen_q = bad[i].max_q,
                            .max_seqlen_k = bad[i].max_k};
    const fatune_status st = fatune_attention_varlen(ctx, &a);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "cu_seqlens"), "%s: status %d, '%s'",
          bad[i].what, (int)st, fatune_errmsg());
  }
  /* The host's checks: a batched first dim, no offsets, maxima past the tokens. */
  int cu[4] = {0, 8, 16, 24};
  fatune_varlen_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .cu_seqlens_q = cu,
                          .cu_seqlens_k = cu, .batch = 3, .max_seqlen_q = 8, .max_seqlen_k = 8};
  a.q.shape[0] = 2;
  CHECK(fatune_attention_varlen(ctx, &a) == FATUNE_EINVAL && strstr(fatune_errmsg(), "packs"),
        "a first dim of 2: '%s'", fatune_errmsg());
  a.q.shape[0] = 1, a.cu_seqlens_k = NULL;
  CHECK(fatune_attention_varlen(ctx, &a) == FATUNE_EINVAL && strstr(fatune_errmsg(), "NULL"),
        "no cu_seqlens_k: '%s'", fatune_errmsg());
  a.cu_seqlens_k = cu, a.max_seqlen_k = 25;
  CHECK(fatune_attention_varlen(ctx, &a) == FATUNE_EINVAL && strstr(fatune_errmsg(), "max_seqlen"),
        "max_seqlen_k past the keys: '%s'", fatune_errmsg());
  a.max_seqlen_k = 8;
  CHECK(fatune_attention_varlen(ctx, &a) == FATUNE_OK, "the good call after: '%s'",
        fatune_errmsg());
done:
  fatune_close(ctx);
  packed_free(&q), packed_free(&k), packed_free(&v), packed_free(&o);
}

int main(void) {
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
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case((int)i, &cases[i], g, &t);
  bad_metadata();
  gen_close(g);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_varlen");
}
