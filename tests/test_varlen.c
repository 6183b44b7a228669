/*
** test_varlen.c
** Variable-length batches through fatune_attention_varlen on the emulator:
** q, k, v and o packed as (total, heads, dim), sequences of their own
** lengths (0 and 1 among them, none a multiple of a tile), GQA, causal per
** sequence, against the float64 reference run on each sequence alone.
** Each case runs the family's default or a variant recorded as the best
** for the dense key of its longest sequences (simt's kv_outer, with its
** workspace; tc's query blocks from the last down under causal; wg's on
** an emulated sm_90a, a CTA per tile and persistent, ping-pong and the
** overlap among them), which the dense key's choice must be. O and lse are poisoned with NaN
** before the call; the padding between packed rows must keep its poison.
** Then each forward family under a modification over each sequence (a
** window, a softcap, document ids captured at run time), the reference
** under the same one per sequence; the recorded variant is keyed by it.
** The backward pass through fatune_attention_varlen_backward the same
** way: O and lse the reference's, dQ, dK and dV (poisoned, padded)
** against the float64 reference's gradients of each sequence alone,
** summed over each K/V head's group, judged as the validator judges them
** (dQ and dK against the magnitudes of their terms); simtbwd's orders and
** tcbwd's dQ by atomics and by a pass of its own, a sequence of no keys
** (dQ 0) and of no queries (dK, dV 0).
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
#include "fa_mod.h"
#include "fatune.h"
#include "gen.h"
#include "record.h"
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
  const char *mod;      /* a built-in modification over each sequence, or NULL; one that
                        ** captures doc gets ids in runs of 11 positions (doc_ids) */
} vcase;

static const vcase cases[] = {
  {NULL, "simt", FA_FP32, 32, 0, 4, 2, 0, 0, 4, {5, 1, 0, 37}, {9, 1, 3, 40}, NULL},
  {NULL, "simt", FA_FP32, 24, 40, 2, 1, 1, 3, 5, {17, 3, 30, 1, 8}, {17, 9, 12, 1, 33}, NULL},
  {"family=simt,block_m=16,block_n=16,warps=2,par=kv_outer,split=split_q,layout=pad,q=smem",
   "simt", FA_FP32, 16, 0, 3, 3, 1, 0, 3, {20, 7, 33}, {20, 30, 2}, NULL},
  {NULL, "tc", FA_FP16, 64, 0, 4, 1, 1, 8, 3, {70, 1, 129}, {70, 200, 129}, NULL},
  {"family=tc,block_m=64,block_n=32,warps=4,q=reg", "tc", FA_BF16, 32, 0, 2, 2, 1, 0, 4,
   {65, 2, 0, 100}, {65, 40, 7, 90}, NULL},
  {NULL, "tc", FA_BF16, 128, 0, 2, 2, 0, 0, 2, {33, 64}, {0, 64}, NULL},
  /* The Hopper family (on an emulated sm_90a): TMA boxes at each sequence's
  ** first token; a CTA per tile, and persistent tiles reading offsets. */
  {NULL, "wg", FA_BF16, 64, 0, 2, 1, 1, 8, 4, {70, 1, 0, 200}, {70, 9, 3, 150}, NULL},
  {"family=wg,block_m=128,block_n=128,consumers=2,pingpong=1,overlap=1,persistent=1", "wg",
   FA_FP16, 128, 0, 2, 2, 0, 0, 3, {33, 130, 64}, {0, 129, 300}, NULL},
  {"family=wg,block_m=128,block_n=64,consumers=2,persistent=1", "wg", FA_BF16, 64, 0, 4, 2, 1,
   0, 5, {17, 3, 130, 1, 64}, {17, 90, 129, 1, 200}, NULL},
  /* Modifications over each sequence: its own lengths, its own diagonal. */
  {NULL, "simt", FA_FP32, 32, 0, 4, 2, 1, 0, 4, {5, 1, 0, 37}, {9, 1, 3, 40}, "window=7:2"},
  {NULL, "tc", FA_FP16, 64, 0, 4, 1, 0, 8, 3, {70, 1, 129}, {70, 200, 129}, "document"},
  {NULL, "wg", FA_BF16, 64, 0, 2, 1, 1, 8, 4, {70, 1, 0, 200}, {70, 9, 3, 150}, "window=40"},
  {"family=wg,block_m=128,block_n=128,consumers=2,pingpong=1,overlap=1,persistent=1", "wg",
   FA_FP16, 128, 0, 2, 2, 0, 0, 3, {33, 130, 64}, {0, 129, 300}, "softcap=5"},
  {"family=wg,block_m=128,block_n=64,consumers=2,persistent=1", "wg", FA_BF16, 64, 0, 4, 2, 1,
   0, 5, {17, 3, 130, 1, 64}, {17, 90, 129, 1, 200}, "document"},
};

/* Document ids for a modification that captures them: runs of 11. */
static int doc_ids[512];

/* The backward pass's cases: config recorded with op bwd. */
static const vcase bwd_cases[] = {
  {NULL, "simtbwd", FA_FP32, 32, 0, 4, 2, 0, 0, 4, {5, 1, 0, 37}, {9, 1, 3, 40}, NULL},
  {"family=simtbwd,block_m=16,block_n=16,warps=2,order=q,dq=separate", "simtbwd", FA_FP64, 16,
   24, 2, 1, 1, 3, 3, {20, 7, 33}, {20, 30, 2}, NULL},
  {"family=simtbwd,block_m=16,block_n=32,warps=4,dq=atomic", "simtbwd", FA_FP32, 24, 0, 3, 3, 1,
   0, 5, {17, 3, 30, 1, 8}, {17, 9, 12, 1, 33}, NULL},
  {NULL, "tcbwd", FA_FP16, 64, 0, 4, 1, 1, 8, 3, {70, 1, 129}, {70, 200, 129}, NULL},
  {"family=tcbwd,block_m=64,block_n=32,warps=2,split_n=1,split_d=1,dq=separate", "tcbwd",
   FA_BF16, 32, 0, 2, 2, 1, 0, 4, {65, 2, 0, 100}, {65, 40, 7, 90}, NULL},
  {NULL, "tcbwd", FA_BF16, 128, 0, 2, 2, 0, 0, 2, {33, 64}, {0, 64}, NULL},
  /* a CTA per query head, its shares of dK and dV summed over each group */
  {"family=tcbwd,block_m=64,block_n=64,warps=4,split_n=1,split_d=1,dq=separate,qhead=1", "tcbwd",
   FA_BF16, 64, 0, 4, 2, 1, 0, 4, {65, 2, 0, 100}, {65, 40, 7, 90}, NULL},
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

/* The reference of sequence b, its rows at q0 and keys at k0 of the packed
** float64 copies, into o and lse (contiguous (lq, heads, dim_v), [heads][total_q]). */
static int reference(const vcase *c, const fa_mod *m, const fa_mod_data *md, const packed *q,
                     const double *kx, const double *vx, int q0, int k0, int b, int total_q,
                     double *o, double *lse) {
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
                           .dim_v = c->dim_v, .dtype = c->dtype, .causal = c->causal,
                           .mod = m, .mod_data = md};
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

/* Case c's offsets (cu_seqlens) and longest lengths (at least 1). */
static void offsets(const vcase *c, int cu_q[MAXB + 1], int cu_k[MAXB + 1], int *max_q,
                    int *max_k) {
  cu_q[0] = cu_k[0] = 0, *max_q = *max_k = 1;
  for (int b = 0; b < c->batch; b++) {
    cu_q[b + 1] = cu_q[b] + c->q_lens[b], cu_k[b + 1] = cu_k[b] + c->k_lens[b];
    if (c->q_lens[b] > *max_q) *max_q = c->q_lens[b];
    if (c->k_lens[b] > *max_k) *max_k = c->k_lens[b];
  }
}

/* What case c runs on: the Hopper family on an emulated sm_90a (the
** library's FATUNE_EMU_ARCH), the others on the default target. */
static int case_target(gen_state *g, const vcase *c, gen_target *t) {
  const int hopper = !strcmp(c->family, "wg");
  if (hopper ? setenv("FATUNE_EMU_ARCH", "sm_90a", 1) : unsetenv("FATUNE_EMU_ARCH")) return -1;
  return gen_target_for_arch(g, hopper ? "sm_90a" : gen_default_arch(g), 0, 0, t);
}

/* What a case of op `op` starts from: its offsets, its database (the
** case's variant recorded there for the dense key of its longest lengths,
** when it names one) and its description. */
typedef struct vstart {
  int cu_q[MAXB + 1], cu_k[MAXB + 1], max_q, max_k;
  char path[256], want[256], what[1024];
  int det;   /* the recorded variant gives the same bits every run */
} vstart;

static int case_start(int i, const vcase *c, gen_state *g, fa_op op, const fa_mod *m,
                      vstart *st) {
  memset(st, 0, sizeof *st);
  offsets(c, st->cu_q, st->cu_k, &st->max_q, &st->max_k);
  const char *kind = op == FA_OP_BWD ? "bwd case" : "case";
  snprintf(st->path, sizeof st->path, "%s/%s-%d.db", dir, op == FA_OP_BWD ? "bwd" : "case", i);
  snprintf(st->what, sizeof st->what, "%s %d (%s %s d%d/%d h%d/%d%s%s%s, %d sequences)", kind, i,
           c->config ? c->config : "the default", fa_dtype_name(c->dtype), c->dim,
           c->dim_v ? c->dim_v : c->dim, c->heads, c->kv_heads, c->causal ? " causal" : "",
           m ? " under " : "", m ? m->label : "", c->batch);
  gen_target t;
  if (case_target(g, c, &t) != 0) {
    CHECK(0, "%s: its target: %s", st->what, gen_errmsg(g));
    return -1;
  }
  const fa_problem dense = {.batch = c->batch, .heads = c->heads, .seq_q = st->max_q,
                            .seq_k = st->max_k, .dim = c->dim, .dim_v = c->dim_v,
                            .dtype = c->dtype, .causal = c->causal, .op = op, .mod = m};
  if (c->config &&
      record(g, &t, c->config, &dense, st->path, 1e-3, st->want, sizeof st->want, &st->det) != 0) {
    CHECK(0, "%s: recording its variant", st->what);
    return -1;
  }
  return 0;
}

static void run_case(int i, const vcase *c, gen_state *g) {
  const int H = c->heads, HK = c->kv_heads, D = c->dim, DV = c->dim_v ? c->dim_v : c->dim;
  vstart st;
  static fa_mod fm;
  fa_mod_data md;
  memset(&md, 0, sizeof md);
  if (c->mod && gen_mod_load(g, c->mod, NULL, &fm) != 0) {
    CHECK(0, "case %d: %s: %s", i, c->mod, gen_errmsg(g));
    return;
  }
  const fa_mod *const m = c->mod ? &fm : NULL;
  if (case_start(i, c, g, FA_OP_FWD, m, &st) != 0) return;
  fatune_mod *cm = NULL;
  const int *const cu_q = st.cu_q, *const cu_k = st.cu_k, max_q = st.max_q, max_k = st.max_k;
  const int TQ = cu_q[c->batch], TK = cu_k[c->batch];
  const char *const path = st.path, *const want = st.want, *const what = st.what;
  char name[256] = "";
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
  if (m) {
    const void *ptr[FA_MOD_MAX_TENSORS] = {doc_ids};
    const long long n[FA_MOD_MAX_TENSORS] = {512};
    char why[160];
    if (fatune_mod_create(ctx, c->mod, NULL, &cm) != FATUNE_OK ||
        (m->ntensors && fatune_mod_set_tensor(cm, "doc", doc_ids, 512) != FATUNE_OK) ||
        (m->ntensors && fa_mod_data_init(&md, m, ptr, n, why, sizeof why) != 0)) {
      CHECK(0, "%s: its modification: %s", what, fatune_errmsg());
      goto done;
    }
  }
  fatune_varlen_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .lse = lse,
                          .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k, .batch = c->batch,
                          .max_seqlen_q = max_q, .max_seqlen_k = max_k, .causal = c->causal,
                          .mod = cm};
  if (fatune_attention_varlen(ctx, &a) != FATUNE_OK) {
    CHECK(0, "%s: %s", what, fatune_errmsg());
    goto done;
  }
  fatune_problem fp = {.batch = c->batch, .heads = H, .seq_q = max_q, .seq_k = max_k, .dim = D,
                       .dim_v = DV, .dtype = (fatune_dtype)c->dtype, .causal = c->causal,
                       .mod = cm};
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
    if ((rc = reference(c, m, m && m->ntensors ? &md : NULL, &q, kx, vx, cu_q[b], cu_k[b], b, TQ,
                        oref, lref)) != 0)
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
  fatune_mod_free(cm);
  fa_mod_data_free(&md);
  if (ctx) fatune_close(ctx);
  packed_free(&q), packed_free(&k), packed_free(&v), packed_free(&o);
  free(lse), free(oref), free(lref), free(kx), free(vx);
}

/* A per-query-head gradient of K or V summed over each K/V head's group. */
static double *group_heads(const double *x, int total, int hk, int h, int dim) {
  double *r = calloc((size_t)(total > 0 ? total : 1) * hk * dim, sizeof *r);
  for (int n = 0; r && n < total; n++)
    for (int i = 0; i < h; i++)
      for (int d = 0; d < dim; d++)
        r[((size_t)n * hk + i / (h / hk)) * dim + d] += x[((size_t)n * h + i) * dim + d];
  return r;
}

/* The float64 gradients of sequence b alone (its queries at q0 of the
** packed copies, its keys at k0), per query head, into the packed gq, gk
** and gv, and dQ's and dK's magnitudes of terms; a sequence without
** queries or keys leaves its zeros. */
static int reference_bwd(const vcase *c, const double *qx, const double *kx, const double *vx,
                         const double *dox, int q0, int k0, int b, double *const g[5]) {
  const int H = c->heads, D = c->dim, DV = c->dim_v ? c->dim_v : c->dim;
  const int lq = c->q_lens[b], lk = c->k_lens[b];
  if (lq == 0 || lk == 0) return 0;
  const fa_problem sp = {.batch = 1, .heads = H, .seq_q = lq, .seq_k = lk, .dim = D,
                         .dim_v = c->dim_v, .dtype = c->dtype, .causal = c->causal,
                         .op = FA_OP_BWD};
  const fa_layout l = {0, D, (long long)H * D}, lv = {0, DV, (long long)H * DV};
  const size_t q = (size_t)q0 * H, k = (size_t)k0 * H;
  const ref_bwd_io io = {qx + q * D, kx + k * D, vx + k * DV, dox + q * DV, l, l, lv, lv,
                         g[0] + q * D, g[1] + k * D, g[2] + k * DV, l, l, lv,
                         g[3] + q * D, g[4] + k * D, NULL};
  return ref_attention_backward(&sp, &io);
}

/* The norm-relative error of the first total rows of packed x against ref
** (contiguous (total, heads, dim)), measured by the magnitudes mag where
** given; INFINITY where an element is not finite. */
static double packed_err(const packed *x, fa_dtype dt, int total, const double *ref,
                         const double *mag) {
  const int H = (int)x->t.shape[1], D = (int)x->t.shape[3];
  double e2 = 0, r2 = 0;
  for (int n = 0; n < total; n++)
    for (int h = 0; h < H; h++)
      for (int d = 0; d < D; d++) {
        const size_t i = ((size_t)n * H + h) * D + d;
        const double v = got(x, dt, n, h, d), m = mag ? mag[i] : ref[i];
        if (!isfinite(v)) return INFINITY;
        e2 += (v - ref[i]) * (v - ref[i]), r2 += m * m;
      }
  return sqrt(e2 / (r2 > 0 ? r2 : 1));
}

/* The backward pass of case c: O and lse the float64 reference's, rounded
** as a forward call would have stored them; the gradients' rows 8 elements
** wider apart than the inputs', so that a stride taken for another's shows. */
static void run_bwd_case(int i, const vcase *c, gen_state *g) {
  const int H = c->heads, HK = c->kv_heads, D = c->dim, DV = c->dim_v ? c->dim_v : c->dim;
  vstart st;
  if (case_start(i, c, g, FA_OP_BWD, NULL, &st) != 0) return;
  const int *const cu_q = st.cu_q, *const cu_k = st.cu_k, max_q = st.max_q, max_k = st.max_k;
  const int TQ = cu_q[c->batch], TK = cu_k[c->batch];
  const char *const path = st.path, *const want = st.want, *const what = st.what;
  const int det = st.det;
  enum { Q, K, V, O, DO, DQ, DK, DV_, NT };
  packed x[NT];
  memset(x, 0, sizeof x);
  const int heads[NT] = {H, HK, HK, H, H, H, HK, HK}, dims[NT] = {D, D, DV, DV, DV, D, D, DV};
  const int totals[NT] = {TQ, TK, TK, TQ, TQ, TQ, TK, TK};
  const fa_dtype lt = fa_lse_size(c->dtype) == 8 ? FA_FP64 : FA_FP32;
  void *lse = malloc((size_t)H * TQ * (size_t)fa_lse_size(c->dtype));
  double *oref = calloc((size_t)TQ * H * DV + 1, sizeof *oref);
  double *lref = calloc((size_t)H * TQ + 1, sizeof *lref), *kx = NULL, *vx = NULL;
  double *gr[5] = {calloc((size_t)TQ * H * D + 1, sizeof(double)),
                   calloc((size_t)TK * H * D + 1, sizeof(double)),
                   calloc((size_t)TK * H * DV + 1, sizeof(double)),
                   calloc((size_t)TQ * H * D + 1, sizeof(double)),
                   calloc((size_t)TK * H * D + 1, sizeof(double))};
  double *sk = NULL, *sv = NULL, *sk_mag = NULL;
  fatune_ctx *ctx = NULL;
  int ok = lse && oref && lref && gr[0] && gr[1] && gr[2] && gr[3] && gr[4];
  for (int j = 0; ok && j < NT; j++)
    ok = packed_make(&x[j], c->dtype, heads[j], totals[j], dims[j], c->pad + (j >= DQ ? 8 : 0),
                     j == Q || j == K || j == V || j == DO) == 0;
  if (!ok || !(kx = repeat_heads(x[K].ref, TK, HK, H, D)) ||
      !(vx = repeat_heads(x[V].ref, TK, HK, H, DV))) {
    CHECK(0, "%s: out of memory", what);
    goto done;
  }
  for (int b = 0; b < c->batch; b++)
    if (reference(c, NULL, NULL, &x[Q], kx, vx, cu_q[b], cu_k[b], b, TQ, oref, lref) != 0 ||
        reference_bwd(c, x[Q].ref, kx, vx, x[DO].ref, cu_q[b], cu_k[b], b, gr) != 0) {
      CHECK(0, "%s: the reference of sequence %d failed", what, b);
      goto done;
    }
  for (int n = 0; n < TQ; n++)
    for (int h = 0; h < H; h++) {
      for (int d = 0; d < DV; d++)
        fa_elem_put(x[O].data, c->dtype, (size_t)(n * x[O].t.stride[2] + h * DV + d),
                    oref[((size_t)n * H + h) * DV + d]);
      fa_elem_put(lse, lt, (size_t)h * TQ + n, lref[(size_t)h * TQ + n]);
    }
  const fatune_options opts = {.db_path = path, .backend = "emu"};
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    CHECK(0, "%s: fatune_open: %s", what, fatune_errmsg());
    goto done;
  }
  /* A recorded variant that gives the same bits every run is asked for as
  ** such: the call fails unless the dense key's record is what runs. */
  fatune_varlen_backward_args a = {.q = x[Q].t, .k = x[K].t, .v = x[V].t, .o = x[O].t,
                                   .dout = x[DO].t, .dq = x[DQ].t, .dk = x[DK].t, .dv = x[DV_].t,
                                   .lse = lse, .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k,
                                   .batch = c->batch, .max_seqlen_q = max_q,
                                   .max_seqlen_k = max_k, .causal = c->causal,
                                   .deterministic = det};
  if (fatune_attention_varlen_backward(ctx, &a) != FATUNE_OK) {
    CHECK(0, "%s: %s", what, fatune_errmsg());
    goto done;
  }
  if (!(sk = group_heads(gr[1], TK, HK, H, D)) || !(sv = group_heads(gr[2], TK, HK, H, DV)) ||
      !(sk_mag = group_heads(gr[4], TK, HK, H, D))) {
    CHECK(0, "%s: out of memory", what);
    goto done;
  }
  const double tol = val_tolerance(c->dtype);
  const double e[3] = {packed_err(&x[DQ], c->dtype, TQ, gr[0], gr[3]),
                       packed_err(&x[DK], c->dtype, TK, sk, sk_mag),
                       packed_err(&x[DV_], c->dtype, TK, sv, NULL)};
  CHECK(e[0] <= tol && e[1] <= tol && e[2] <= tol, "%s: dq %.3g, dk %.3g, dv %.3g (tolerance "
        "%.0e)", what, e[0], e[1], e[2], tol);
  for (int j = DQ; j <= DV_; j++)
    CHECK(padding_kept(&x[j], c->dtype), "%s: a kernel wrote into %s's padding", what,
          j == DQ ? "dQ" : j == DK ? "dK" : "dV");
  printf("%-60.60s %s: dq %.2e dk %.2e dv %.2e\n", what, det ? want : c->family, e[0], e[1],
         e[2]);
done:
  if (ctx) fatune_close(ctx);
  for (int j = 0; j < NT; j++) packed_free(&x[j]);
  free(lse), free(oref), free(lref), free(kx), free(vx), free(sk), free(sv), free(sk_mag);
  for (int j = 0; j < 5; j++) free(gr[j]);
}

/* The backward pass over bad offsets (each launch's kernels stop before
** reading), without lse, and with a gradient over an input. */
static void bad_backward(fatune_ctx *ctx, const packed *q, const packed *k, const packed *v,
                         const packed *o) {
  packed dq, dk, dv, dout;
  memset(&dq, 0, sizeof dq), memset(&dk, 0, sizeof dk), memset(&dv, 0, sizeof dv);
  memset(&dout, 0, sizeof dout);
  float *lse = calloc(2 * 24, sizeof *lse);
  if (!lse || packed_make(&dq, FA_FP32, 2, 24, 16, 0, 0) ||
      packed_make(&dk, FA_FP32, 2, 24, 16, 0, 0) || packed_make(&dv, FA_FP32, 2, 24, 16, 0, 0) ||
      packed_make(&dout, FA_FP32, 2, 24, 16, 0, 1)) {
    CHECK(0, "out of memory");
    goto done;
  }
  int down[4] = {0, 10, 5, 24}, cu[4] = {0, 8, 16, 24};
  fatune_varlen_backward_args a = {.q = q->t, .k = k->t, .v = v->t, .o = o->t, .dout = dout.t,
                                   .dq = dq.t, .dk = dk.t, .dv = dv.t, .lse = lse,
                                   .cu_seqlens_q = down, .cu_seqlens_k = cu, .batch = 3,
                                   .max_seqlen_q = 19, .max_seqlen_k = 8};
  fatune_status st = fatune_attention_varlen_backward(ctx, &a);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "cu_seqlens"),
        "backward, cu_seqlens_q decreasing: status %d, '%s'", (int)st, fatune_errmsg());
  a.cu_seqlens_q = cu, a.max_seqlen_q = 8, a.lse = NULL;
  st = fatune_attention_varlen_backward(ctx, &a);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "lse"), "backward without lse: '%s'",
        fatune_errmsg());
  a.lse = lse, a.dk = q->t;
  st = fatune_attention_varlen_backward(ctx, &a);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "overlaps"), "dk over q: '%s'",
        fatune_errmsg());
  a.dk = dk.t;
  CHECK(fatune_attention_varlen_backward(ctx, &a) == FATUNE_OK,
        "the good backward call after: '%s'", fatune_errmsg());
done:
  packed_free(&dq), packed_free(&dk), packed_free(&dv), packed_free(&dout);
  free(lse);
}

/* The Hopper family over decreasing offsets: its CTA per tile (the
** default) and its persistent tiles, each reading a sequence's offsets;
** and an emulated arch that is none. */
static void bad_hopper(gen_state *g) {
  gen_target t;
  packed q, k, v, o;
  memset(&q, 0, sizeof q), memset(&k, 0, sizeof k), memset(&v, 0, sizeof v), memset(&o, 0, sizeof o);
  if (setenv("FATUNE_EMU_ARCH", "sm_90a", 1) || gen_target_for_arch(g, "sm_90a", 0, 0, &t) ||
      packed_make(&q, FA_BF16, 2, 24, 64, 0, 1) || packed_make(&k, FA_BF16, 2, 24, 64, 0, 1) ||
      packed_make(&v, FA_BF16, 2, 24, 64, 0, 1) || packed_make(&o, FA_BF16, 2, 24, 64, 0, 0)) {
    CHECK(0, "the Hopper target, or memory");
    goto done;
  }
  int down[4] = {0, 10, 5, 24}, cu[4] = {0, 8, 16, 24};
  const fa_problem dense = {.batch = 3, .heads = 2, .seq_q = 19, .seq_k = 8, .dim = 64,
                            .dtype = FA_BF16};
  static const char *const configs[2] = {
      NULL, "family=wg,block_m=128,block_n=64,consumers=2,persistent=1"};
  for (int i = 0; i < 2; i++) {
    char path[256], name[256];
    int det;
    snprintf(path, sizeof path, "%s/bad-hopper-%d.db", dir, i);
    if (configs[i] && record(g, &t, configs[i], &dense, path, 1e-3, name, sizeof name, &det) != 0) {
      CHECK(0, "recording %s", configs[i]);
      continue;
    }
    fatune_ctx *ctx = NULL;
    const fatune_options opts = {.db_path = path, .backend = "emu"};
    if (fatune_open(&opts, &ctx) != FATUNE_OK) {
      CHECK(0, "fatune_open: %s", fatune_errmsg());
      continue;
    }
    fatune_varlen_args a = {.q = q.t, .k = k.t, .v = v.t, .o = o.t, .cu_seqlens_q = down,
                            .cu_seqlens_k = cu, .batch = 3, .max_seqlen_q = 19,
                            .max_seqlen_k = 8};
    const fatune_status st = fatune_attention_varlen(ctx, &a);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "cu_seqlens"),
          "wg (%s), cu_seqlens_q decreasing: status %d, '%s'", configs[i] ? configs[i] : "default",
          (int)st, fatune_errmsg());
    fatune_close(ctx);
  }
  /* An arch the emulator cannot emulate: the context says so. */
  fatune_ctx *ctx = NULL;
  char path[256];
  snprintf(path, sizeof path, "%s/bad-arch.db", dir);
  const fatune_options opts = {.db_path = path, .backend = "emu"};
  if (setenv("FATUNE_EMU_ARCH", "sm_12x", 1) == 0) {
    const fatune_status st = fatune_open(&opts, &ctx);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "FATUNE_EMU_ARCH"),
          "FATUNE_EMU_ARCH=sm_12x: status %d, '%s'", (int)st, fatune_errmsg());
    if (st == FATUNE_OK) fatune_close(ctx);
  }
done:
  unsetenv("FATUNE_EMU_ARCH");
  packed_free(&q), packed_free(&k), packed_free(&v), packed_free(&o);
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
  bad_backward(ctx, &q, &k, &v, &o);
done:
  fatune_close(ctx);
  packed_free(&q), packed_free(&k), packed_free(&v), packed_free(&o);
}

int main(void) {
  char err[512];
  gen_state *g;
  if (!mkdtemp(dir) || gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  for (int i = 0; i < 512; i++) doc_ids[i] = i / 11;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case((int)i, &cases[i], g);
  for (size_t i = 0; i < sizeof bwd_cases / sizeof bwd_cases[0]; i++)
    run_bwd_case((int)i, &bwd_cases[i], g);
  unsetenv("FATUNE_EMU_ARCH");
  bad_metadata();
  bad_hopper(g);
  gen_close(g);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_varlen");
}
