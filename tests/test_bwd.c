/*
** test_bwd.c
** The backward pass's kernels (op bwd) on the emulator against the
** float64 reference backward: every variant of the default space of the
** simtbwd family (fp32, fp64), of the tcbwd family (fp16, bf16) and of the
** wgbwd family (fp16, bf16 on sm_90a), causal or not, each on odd shapes
** (tails in seq_q and seq_k, a single query, a single key, causal with more
** queries than keys so that rows see no key, several heads and batches),
** under two schedules that must give the same bits. Then what the
** backward pass promises beyond its values: dQ, dK and dV bit for bit the
** same over repeated runs on any number of threads (dq=separate has no
** atomics); dq=atomic agreeing with it to rounding, and saying it is not
** deterministic;
** the default config of every dtype and head dim rendering; workspaces of
** O(seq) bytes, nothing of seq_q x seq_k; NaN-poisoned
** outputs caught when a kernel skips them; and forward kernels refused for
** a backward problem. The input seed is printed; FATUNE_TEST_SEED replays
** a run.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "space_build.h"
#include "fa_mod.h"
#include "validate.h"

static fa_backend *be;
static gen_state *gen;
static gen_target target;
static unsigned long long seed;

typedef struct shape { int batch, heads, seq_q, seq_k; } shape;

/* Tails of every kind at tiles of 16 to 64. */
static const shape shapes[] = {
  {1, 1, 37, 53},   /* tails in both; causal: the first rows see 17 keys */
  {1, 2, 53, 37},   /* causal: rows 0..15 see no key */
  {2, 1, 1, 40},    /* a single query */
  {1, 1, 40, 1},    /* a single key */
  {1, 1, 70, 70},   /* several blocks each way */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static fa_problem problem(fa_dtype t, int dim, int causal, const shape *s) {
  fa_problem p = {.batch = s->batch, .heads = s->heads, .seq_q = s->seq_q, .seq_k = s->seq_k,
                  .dim = dim, .dtype = t, .causal = causal, .op = FA_OP_BWD};
  return p;
}

/* Kernel k on problem p under two schedules (bits equal), against the
** reference; the worst gradient error into *worst. */
static void validate(const gen_kernel *k, const fa_program *prog, const fa_problem *p,
                     double *worst) {
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case for %s: %s", k->name, err);
    return;
  }
  if (val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "inputs for %s: %s", k->name, err);
    val_case_free(&c);
    return;
  }
  val_opts o = {.nschedules = 2, .schedule = {FA_SCHED_FORWARD, FA_SCHED_SKEW},
                .threads = 2};
  val_result r;
  CHECK(val_check(be, &c, &in, prog, k, &o, &r, err, sizeof err) == 0, "%s: %s", k->name, err);
  CHECK(r.status == VAL_OK, "%s on %dx%d b%d h%d: %s", k->name, p->seq_q, p->seq_k, p->batch,
        p->heads, r.msg);
  if (r.rel_err > *worst) *worst = r.rel_err;
  attn_inputs_free(be, &in);
  val_case_free(&c);
}

/* Under GQA (4 query heads over 2 K/V heads, and over 1) tcbwd's default
** space both ways: a CTA per K/V head, and a CTA per query head whose
** shares of dK and dV dkvsum adds up (-qhead, four launches); each on the
** shapes with tails, the single query and key, and several blocks. The
** shares' workspace takes no memory without GQA, and a float row of dK's
** and dV's padded dims per (batch, query head, key) with it. */
static void test_space_gqa(fa_dtype t, int dim, int causal) {
  fa_problem p = problem(t, dim, causal, &shapes[4]);
  p.heads = 4, p.kv_group = 2;
  space sp = space_build(gen, &target, be, &p);
  size_t tc = 0, qheads = 0;
  double worst = 0;
  for (size_t i = 0; i < sp.n; i++) {
    const gen_kernel *k = &sp.k[i];
    if (strncmp(k->name, "tcbwd-", 6)) continue;
    const int qh = strstr(k->name, "-qhead") != NULL;
    tc++, qheads += qh;
    CHECK(k->nlaunch == 3 + qh && k->main == 1, "%s: %d launches, main %d", k->name, k->nlaunch,
          k->main);
    CHECK(!qh || k->launch[3].role == GEN_ROLE_KV_SUM, "%s: the sums' launch has role %d", k->name,
          k->launch[3].role);
    CHECK(sp.b[i].prog, "%s: %s", k->name, sp.b[i].log ? sp.b[i].log : "?");
    if (!sp.b[i].prog) continue;
    if (qh) {
      const int w = k->nws - 1, D = dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
      fa_problem one = p;
      one.kv_group = 1;
      CHECK(!strcmp(k->ws[w].name, "kv_part") && gen_workspace_bytes(k, w, &one) == 0 &&
            gen_workspace_bytes(k, w, &p) == (size_t)4 * 2 * D * p.batch * p.heads * p.seq_k,
            "%s: workspace %s of %zu bytes without GQA, %zu with", k->name, k->ws[w].name,
            gen_workspace_bytes(k, w, &one), gen_workspace_bytes(k, w, &p));
    }
    for (size_t s = 0; s < NSHAPES; s++) {
      fa_problem q = problem(t, dim, causal, &shapes[s]);
      q.heads = 4, q.kv_group = s % 2 ? 4 : 2;
      validate(k, sp.b[i].prog, &q, &worst);
    }
  }
  /* every tile both ways; a sample (FATUNE_TEST_SAMPLE) holds some of each */
  CHECK(sp.n < sp.listed ? qheads > 0 && qheads < tc : tc > 0 && qheads * 2 == tc,
        "%s d%d: %zu tcbwd variants under GQA (%zu of %zu kept), %zu of them -qhead",
        fa_dtype_name(t), dim, tc, sp.n, sp.listed, qheads);
  printf("%s d%-3d %-6s GQA: %zu tcbwd variants (%zu a CTA per query head) x %zu shapes, "
         "4 query heads over 2 and 1 K/V heads: worst gradient error %.2e (tolerance %.0e)\n",
         fa_dtype_name(t), dim, causal ? "causal" : "", tc, qheads, NSHAPES, worst,
         val_tolerance(t));
  space_free(be, &sp);
}

/* A default space rendered for a problem and compiled: its variants,
** their kernels and builds (a build without a program is a failure the
** caller reports). */
/* The default space of (dtype, dim, causal), each variant on every shape. */
static void test_space(fa_dtype t, int dim, int causal) {
  fa_problem p = problem(t, dim, causal, &shapes[4]);
  space sp = space_build(gen, &target, be, &p);
  CHECK(sp.listed >= 4, "%s d%d: %zu bwd variants", fa_dtype_name(t), dim, sp.listed);
  double worst = 0;
  for (size_t i = 0; i < sp.n; i++) {
    const gen_kernel *k = &sp.k[i];
    /* pre, dkdv, dQ's; FA1's order pre, kvzero, fa1, kvconvert */
    const int fa1 = strstr(k->name, "-fa1") != NULL;
    CHECK(k->op == FA_OP_BWD && k->nlaunch == 3 + fa1 && k->main == 1 + fa1,
          "%s: op %s, %d launches, main %d", k->name, fa_op_name(k->op), k->nlaunch, k->main);
    CHECK(sp.b[i].prog, "%s: %s", k->name, sp.b[i].log ? sp.b[i].log : "?");
    if (!sp.b[i].prog) continue;
    for (size_t s = 0; s < NSHAPES; s++) {
      fa_problem q = problem(t, dim, causal, &shapes[s]);
      validate(k, sp.b[i].prog, &q, &worst);
    }
  }
  printf("%s d%-3d %-6s %zu variants x %zu shapes, two schedules each: worst gradient error "
         "%.2e (tolerance %.0e)\n", fa_dtype_name(t), dim, causal ? "causal" : "", sp.n, NSHAPES,
         worst, val_tolerance(t));
  space_free(be, &sp);
}

/* Two copies of a problem's outputs, for repeated runs that must give
** the first run's bits: run 0 writes `first`, every later run `again`. */
typedef struct output_pair {
  int n;
  size_t bytes[ATTN_MAX_OUTPUTS];
  unsigned char *first[ATTN_MAX_OUTPUTS], *again[ATTN_MAX_OUTPUTS];
} output_pair;

/* 1 when both copies are allocated (a failed check otherwise). */
static int pair_alloc(output_pair *o, const fa_problem *p) {
  memset(o, 0, sizeof *o);
  o->n = attn_outputs(p, o->bytes);
  int held = 1;
  for (int i = 0; i < o->n; i++)
    held &= (o->first[i] = malloc(o->bytes[i])) != NULL &&
            (o->again[i] = malloc(o->bytes[i])) != NULL;
  CHECK(held, "out of memory");
  return held;
}

static void pair_host(output_pair *o, int run, void **host) {
  for (int i = 0; i < o->n; i++) host[i] = run ? o->again[i] : o->first[i];
}

static int pair_same(const output_pair *o) {
  int eq = 1;
  for (int i = 0; i < o->n; i++) eq &= !memcmp(o->first[i], o->again[i], o->bytes[i]);
  return eq;
}

static void pair_free(output_pair *o) {
  for (int i = 0; i < o->n; i++) free(o->first[i]), free(o->again[i]);
}

/* wgbwd's consumers both add dQ's share of a block to one accumulator
** (dq_split=own): they take turns, so that within a CTA the order of the
** adds to an element is the kernel's. On one thread (the CTAs in order)
** every schedule must then give the same bits, with ping-pong and
** without, causal under GQA (rows past the keys, tails). The shape is
** the first here whose CTAs also walk Q blocks the mask leaves whole
** (wgbwd's loop without the mask's code): validated too. */
static void test_wg_add_order(int dim) {
  const shape s = {1, 4, 150, 260};
  fa_problem p = problem(FA_BF16, dim, 1, &s);
  p.kv_group = 2;
  gen_target hopper;
  if (gen_target_for_arch(gen, "sm_90a", 0, 0, &hopper) != 0) {
    CHECK(0, "no sm_90a target");
    return;
  }
  char err[512];
  val_case c;
  attn_inputs in;
  CHECK(val_case_make(&c, &p, seed, err, sizeof err) == 0, "%s", err);
  CHECK(val_inputs_upload(be, &c, &in, err, sizeof err) == 0, "%s", err);
  double worst = 0;
  for (int pp = dim == 128 ? 0 : 1; pp < 2; pp++) {
    gen_kernel k;
    fa_build b = {0};
    const char *config = pp ? "family=wgbwd,dq_split=own,pingpong=1"
                            : "family=wgbwd,dq_split=own,pingpong=0";
    if (gen_render_config(gen, config, &p, &hopper, &k) != 0) {
      CHECK(0, "%s: %s", config, gen_errmsg(gen));
      continue;
    }
    const gen_kernel *kp = &k;
    CHECK(backend_compile(be, &kp, 1, 0, &b, err, sizeof err) == 0 && b.prog, "%s: %s", k.name,
          b.log ? b.log : err);
    output_pair o;
    const int held = pair_alloc(&o, &p);
    const fa_schedule sched[] = {FA_SCHED_FORWARD, FA_SCHED_REVERSE, FA_SCHED_RANDOM,
                                 FA_SCHED_SKEW, FA_SCHED_RANDOM, FA_SCHED_RANDOM};
    int same = 0, runs = 0;
    for (int r = 0; held && b.prog && r < 6; r++) {
      fa_run_opts ro = {.schedule = sched[r], .seed = seed + 7u * (unsigned)r, .threads = 1};
      void *host[ATTN_MAX_OUTPUTS];
      pair_host(&o, r, host);
      CHECK(attn_run_op(be, b.prog, &k, &p, &in, &ro, host, NULL, NULL, err, sizeof err) == 0,
            "%s: %s", k.name, err);
      if (r == 0) continue;
      const int eq = pair_same(&o);
      runs++, same += eq;
      CHECK(eq, "%s: run %d (%s) differs from the first: the consumers' adds are unordered",
            k.name, r, backend_schedule_name(ro.schedule));
    }
    if (b.prog) validate(&k, b.prog, &p, &worst);
    printf("%s: %d of %d runs under other schedules give the first's bits; gradient error "
           "%.2e\n", k.name, same, runs, worst);
    pair_free(&o);
    if (b.prog) backend_build_free(be, &b);
    gen_kernel_free(&k);
  }
  attn_inputs_free(be, &in);
  val_case_free(&c);
}

/* The Hopper family (wgbwd, sm_90a: wgmma, TMA, mbarriers) in its default
** space on every shape, and under GQA (4 query heads over 2 K/V heads,
** and over 1: a CTA per K/V head walks its group's query heads). */
static void test_space_wg(fa_dtype t, int dim, int causal) {
  gen_target hopper;
  if (gen_target_for_arch(gen, "sm_90a", 0, 0, &hopper) != 0) {
    CHECK(0, "no sm_90a target");
    return;
  }
  fa_problem p = problem(t, dim, causal, &shapes[4]);
  space sp = space_build(gen, &hopper, be, &p);
  size_t wg = 0;
  double worst = 0;
  for (size_t i = 0; i < sp.n; i++) {
    const gen_kernel *k = &sp.k[i];
    if (strncmp(k->name, "wgbwd-", 6)) continue;
    wg++;
    CHECK(k->nlaunch == 3 && k->main == 1 && k->ntma == 4, "%s: %d launches, main %d, %d maps",
          k->name, k->nlaunch, k->main, k->ntma);
    /* O(seq x dim) workspaces, D and one float accumulator of dQ (the
    ** consumers of dq_split=own add to one copy in turn), nothing of
    ** seq_q x seq_k: at 16k, one head. */
    const shape big = {1, 1, 16384, 16384};
    const fa_problem pb = problem(t, dim, causal, &big);
    size_t ws = 0;
    for (int w = 0; w < k->nws; w++) ws += gen_workspace_bytes(k, w, &pb);
    const size_t padded = dim <= 64 ? 64 : 128;
    CHECK(ws <= (size_t)16384 * (4 + 4 * padded), "%s: %zu workspace bytes at 16k (the "
          "scores would take %.0f)", k->name, ws, 16384.0 * 16384 * 4);
    if (wg == 1) printf("%s at 16k tokens, one head: %zu workspace bytes\n", k->name, ws);
    CHECK(sp.b[i].prog, "%s: %s", k->name, sp.b[i].log ? sp.b[i].log : "?");
    if (!sp.b[i].prog) continue;
    for (size_t s = 0; s < NSHAPES; s++) {
      fa_problem q = problem(t, dim, causal, &shapes[s]);
      validate(k, sp.b[i].prog, &q, &worst);
      q.heads = 4, q.kv_group = s % 2 ? 4 : 2;
      validate(k, sp.b[i].prog, &q, &worst);
    }
  }
  CHECK(wg >= 3 || (sp.n < sp.listed && wg > 0), "%s d%d: %zu wgbwd variants (%zu of %zu kept)",
        fa_dtype_name(t), dim, wg, sp.n, sp.listed);
  printf("%s d%-3d %-6s sm_90a: %zu wgbwd variants x %zu shapes, alone and under GQA, two "
         "schedules each: worst gradient error %.2e (tolerance %.0e)\n", fa_dtype_name(t), dim,
         causal ? "causal" : "", wg, NSHAPES, worst, val_tolerance(t));
  space_free(be, &sp);
}

/* The default space of (dtype, dim, causal) under modification spec, each
** variant on the shapes above and on 200 x 200 (where a window leaves
** whole blocks out); the reference's gradients under the same. */
static void test_space_mod(const char *spec, fa_dtype t, int dim, int causal) {
  static const shape wide = {1, 2, 200, 200};
  fa_mod mod;
  if (gen_mod_load(gen, spec, NULL, &mod) != 0 || gen_set_mod(gen, &mod) != 0) {
    CHECK(0, "%s: %s", spec, gen_errmsg(gen));
    return;
  }
  fa_problem p = problem(t, dim, causal, &shapes[4]);
  p.mod = &mod;
  space sp = space_build(gen, &target, be, &p);
  double worst = 0;
  for (size_t i = 0; i < sp.n; i++) {
    const gen_kernel *k = &sp.k[i];
    CHECK(strstr(k->source, "fa_mod_setup") != NULL, "%s: no modification in its source",
          k->name);
    CHECK(sp.b[i].prog, "%s: %s", k->name, sp.b[i].log ? sp.b[i].log : "?");
    if (!sp.b[i].prog) continue;
    for (size_t s = 0; s <= NSHAPES; s++) {
      fa_problem q = problem(t, dim, causal, s < NSHAPES ? &shapes[s] : &wide);
      q.mod = &mod;
      validate(k, sp.b[i].prog, &q, &worst);
    }
  }
  printf("%s %s d%-3d %-6s %zu variants x %zu shapes, two schedules each: worst gradient error "
         "%.2e (tolerance %.0e)\n", spec, fa_dtype_name(t), dim, causal ? "causal" : "", sp.n,
         NSHAPES + 1, worst, val_tolerance(t));
  space_free(be, &sp);
  gen_set_mod(gen, NULL);
}

/* One kernel of the default config for p, compiled; 0 when it is. */
static int compile_one(const fa_problem *p, const char *config, gen_kernel *k, fa_build *b) {
  char err[512];
  memset(b, 0, sizeof *b);
  if (gen_render_config(gen, config, p, &target, k) != 0) {
    CHECK(0, "%s: %s", config, gen_errmsg(gen));
    return -1;
  }
  const gen_kernel *kp = k;
  CHECK(backend_compile(be, &kp, 1, 0, b, err, sizeof err) == 0 && b->prog, "%s: %s", k->name,
        b->log ? b->log : err);
  return b->prog ? 0 : -1;
}

/* A window skips the blocks it hides: a tcbwd kernel at 1024 x 1024 under
** window=16:0 reads at most 35% of the global bytes it reads without it,
** by the emulator's counts (each K/V block of 128 keys meets 3 of the 16 Q
** blocks of 64 rows, each Q block 1 or 2 of the 8 K/V blocks; O and dO are
** read whole by the pre kernel); both valid. */
static void test_window_traffic(void) {
  const shape s = {1, 1, 1024, 1024};
  fa_problem p = problem(FA_BF16, 64, 0, &s);
  fa_mod mod;
  unsigned long long bytes[2] = {0, 0};
  if (gen_mod_load(gen, "window=16:0", NULL, &mod) != 0) {
    CHECK(0, "%s", gen_errmsg(gen));
    return;
  }
  for (int windowed = 0; windowed < 2; windowed++) {
    gen_kernel k;
    fa_build b;
    CHECK(gen_set_mod(gen, windowed ? &mod : NULL) == 0, "%s", gen_errmsg(gen));
    p.mod = windowed ? &mod : NULL;
    if (compile_one(&p, "family=tcbwd,block_m=64,block_n=128,warps=8", &k, &b) != 0) continue;
    char err[512];
    val_case c;
    attn_inputs in;
    if (val_case_make(&c, &p, seed++, err, sizeof err) == 0 &&
        val_inputs_upload(be, &c, &in, err, sizeof err) == 0) {
      val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 2};
      val_result r;
      CHECK(val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
      CHECK(r.status == VAL_OK, "%s: %s", k.name, r.msg);
      bytes[windowed] = r.counters.gmem_read;
      attn_inputs_free(be, &in);
      val_case_free(&c);
    } else {
      CHECK(0, "case: %s", err);
    }
    backend_build_free(be, &b);
    gen_kernel_free(&k);
  }
  gen_set_mod(gen, NULL);
  CHECK(bytes[0] > 0 && bytes[1] <= 0.35 * bytes[0], "window=16 read %llu bytes, dense %llu",
        bytes[1], bytes[0]);
  printf("backward at 1024 x 1024 bf16 d64: window=16:0 reads %.1f%% of the dense pass's global "
         "bytes (%llu of %llu)\n", 100.0 * bytes[1] / (bytes[0] ? bytes[0] : 1), bytes[1],
         bytes[0]);
}


/* No atomics: the same bits from repeated runs on 1 and 3 threads and
** every schedule. */
static void test_deterministic(void) {
  const shape s = {2, 2, 70, 90};
  fa_problem p = problem(FA_FP32, 32, 1, &s);
  gen_kernel k;
  fa_build b;
  char err[512];
  if (compile_one(&p, "block_m=16,block_n=32", &k, &b) != 0) return;
  val_case c;
  attn_inputs in;
  CHECK(val_case_make(&c, &p, seed, err, sizeof err) == 0, "%s", err);
  CHECK(val_inputs_upload(be, &c, &in, err, sizeof err) == 0, "%s", err);
  output_pair o;
  const int held = pair_alloc(&o, &p);
  const fa_schedule sched[] = {FA_SCHED_FORWARD, FA_SCHED_REVERSE, FA_SCHED_RANDOM,
                               FA_SCHED_SKEW};
  int runs = 0, same = 0;
  for (int r = 0; held && r < 8; r++) {
    fa_run_opts ro = {.schedule = sched[r % 4], .seed = seed + (unsigned)r,
                      .threads = r % 2 ? 3 : 1, .smem_fill = (unsigned char)(r * 37)};
    void *host[ATTN_MAX_OUTPUTS];
    pair_host(&o, r, host);
    CHECK(attn_run_op(be, b.prog, &k, &p, &in, &ro, host, NULL, NULL, err, sizeof err) == 0,
          "%s", err);
    if (r == 0) continue;
    runs++;
    const int eq = pair_same(&o);
    same += eq;
    CHECK(eq, "run %d (%s, %d threads) differs from the first", r,
          backend_schedule_name(ro.schedule), ro.threads);
  }
  printf("deterministic: %d of %d repeated runs give dq, dk and dv bit for bit\n", same, runs);
  pair_free(&o);
  attn_inputs_free(be, &in);
  val_case_free(&c);
  backend_build_free(be, &b);
  gen_kernel_free(&k);
}

/* dq=atomic (FlashAttention-2's dQ, added across CTAs) against dq=separate
** on one problem: both valid, within the dtype's rounding of each other,
** and the atomic one says it is not deterministic. */
static void test_atomic_dq(void) {
  const shape s = {2, 2, 70, 90};
  fa_problem p = problem(FA_FP64, 24, 1, &s);
  gen_kernel ka, ks;
  fa_build ba, bs;
  if (compile_one(&p, "block_m=16,block_n=32,dq=atomic", &ka, &ba) != 0) return;
  if (compile_one(&p, "block_m=16,block_n=32,dq=separate", &ks, &bs) != 0) return;
  CHECK(!ka.deterministic && ks.deterministic && ka.nws == 2 && ks.nws == 1,
        "%s: deterministic %d, %d workspaces; %s: %d, %d", ka.name, ka.deterministic, ka.nws,
        ks.name, ks.deterministic, ks.nws);
  char err[512];
  val_case c;
  attn_inputs in;
  CHECK(val_case_make(&c, &p, seed, err, sizeof err) == 0, "%s", err);
  CHECK(val_inputs_upload(be, &c, &in, err, sizeof err) == 0, "%s", err);
  size_t bytes[ATTN_MAX_OUTPUTS];
  const int n = attn_outputs(&p, bytes);
  unsigned char *out[2][ATTN_MAX_OUTPUTS];
  const fa_build *b[2] = {&ba, &bs};
  const gen_kernel *k[2] = {&ka, &ks};
  for (int j = 0; j < 2; j++) {
    for (int i = 0; i < n; i++) out[j][i] = malloc(bytes[i]);
    fa_run_opts ro = {.schedule = FA_SCHED_RANDOM, .seed = seed, .threads = 3, .smem_fill = 0xFF};
    CHECK(attn_run_op(be, b[j]->prog, k[j], &p, &in, &ro, (void *const *)out[j], NULL, NULL, err,
                      sizeof err) == 0, "%s: %s", k[j]->name, err);
  }
  double worst = 0;
  for (int i = 0; i < n; i++)
    for (size_t e = 0; e < bytes[i] / 8; e++) {
      const double x = fa_elem_get(out[0][i], FA_FP64, e), y = fa_elem_get(out[1][i], FA_FP64, e);
      if (!(fabs(x - y) <= worst)) worst = fabs(x - y);
    }
  CHECK(worst < 1e-12, "atomic and separate dQ differ by %.3g", worst);
  printf("dq=atomic against dq=separate, fp64, 3 threads: largest difference %.2e\n", worst);
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < n; i++) free(out[j][i]);
  attn_inputs_free(be, &in);
  val_case_free(&c);
  backend_build_free(be, &ba), backend_build_free(be, &bs);
  gen_kernel_free(&ka), gen_kernel_free(&ks);
}

/* Workspaces: bytes per query row, none of them of seq_k's size; at 16k
** tokens and d128 the whole of it, printed. */
static void test_memory(void) {
  const shape s = {1, 1, 16384, 16384};
  fa_problem p = problem(FA_FP32, 128, 0, &s);
  gen_kernel k;
  if (gen_render_config(gen, "", &p, &target, &k) != 0) {
    CHECK(0, "%s", gen_errmsg(gen));
    return;
  }
  size_t ws = 0;
  for (int i = 0; i < k.nws; i++) {
    CHECK(k.ws[i].bytes_per_row <= 2 * 8 * p.dim, "%s: workspace %s of %d bytes per row",
          k.name, k.ws[i].name, k.ws[i].bytes_per_row);
    ws += gen_workspace_bytes(&k, i, &p);
  }
  size_t out[ATTN_MAX_OUTPUTS], io = 0;
  const int n = attn_outputs(&p, out);
  for (int i = 0; i < n; i++) io += out[i];
  const double scores = (double)p.seq_q * p.seq_k * 4;
  CHECK((double)ws < scores / 1024, "%zu workspace bytes against %.0f of scores", ws, scores);
  printf("memory at seq 16384, d128, fp32, one head: %zu workspace bytes (%s), %zu bytes of "
         "gradients; the scores would take %.0f\n", ws, k.nws ? k.ws[0].name : "none", io,
         scores);
  /* The figures a timed run reports: 2.5 times the forward pass's FLOPs
  ** (five products to two); eight tensors of q's size and the lse moved
  ** (Q, K, V, O, dO read, dQ, dK, dV written). */
  fa_problem fwd = p;
  fwd.op = FA_OP_FWD;
  fwd.causal = p.causal = 1;
  CHECK(attn_flops(&p) == 2.5 * attn_flops(&fwd), "bwd FLOPs %.0f, fwd %.0f", attn_flops(&p),
        attn_flops(&fwd));
  CHECK(attn_bytes(&p) == (double)io / 3 * 8 + 16384.0 * 4, "bwd bytes %.0f", attn_bytes(&p));
  gen_kernel_free(&k);
}

/* The config naming nothing renders, for every dtype and head dim: the
** defaults (or their fallbacks) fit each family. */
static void test_defaults(void) {
  static const fa_dtype dtypes[] = {FA_FP32, FA_FP64, FA_FP16, FA_BF16};
  static const int dims[] = {8, 36, 64, 96, 128, 200, 256};
  const shape s = {1, 1, 256, 256};
  int n = 0;
  for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++)
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
      for (int causal = 0; causal < 2; causal++) {
        fa_problem p = problem(dtypes[t], dims[d], causal, &s);
        gen_kernel k;
        if (gen_render_config(gen, "", &p, &target, &k) != 0) {
          CHECK(0, "%s d%d: %s", fa_dtype_name(dtypes[t]), dims[d], gen_errmsg(gen));
          continue;
        }
        CHECK(k.op == FA_OP_BWD, "%s: op %s", k.name, fa_op_name(k.op));
        n++;
        gen_kernel_free(&k);
      }
  printf("defaults: %d of %d (dtype, dim, causal) render a backward kernel\n", n,
         (int)(2 * sizeof dtypes / sizeof dtypes[0] * sizeof dims / sizeof dims[0]));
}

/* The bytes a backward run allocates beyond its inputs, by the emulator's
** own count (backend_memory): kernel k on p, into *extra; 0, or -1. */
static int run_extra_bytes(const gen_kernel *k, const fa_program *prog, const fa_problem *p,
                           size_t *extra) {
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, seed, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return -1;
  }
  int rc = -1;
  if (val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
  } else {
    size_t bytes[ATTN_MAX_OUTPUTS], live, peak, live_after, unused;
    const int n = attn_outputs(p, bytes);
    void *host[ATTN_MAX_OUTPUTS] = {0};
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= (host[i] = malloc(bytes[i])) != NULL;
    fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 2};
    if (ok && backend_memory(be, 1, &live, &unused) == 0 &&
        attn_run_op(be, prog, k, p, &in, &ro, host, NULL, NULL, err, sizeof err) == 0 &&
        backend_memory(be, 0, &live_after, &peak) == 0) {
      CHECK(live_after == live, "%zu bytes left allocated after the run", live_after - live);
      *extra = peak - live;
      rc = 0;
    } else {
      CHECK(0, "%s: %s", k->name, ok ? err : "out of memory");
    }
    for (int i = 0; i < n; i++) free(host[i]);
    attn_inputs_free(be, &in);
  }
  val_case_free(&c);
  return rc;
}

/* By the emulator's allocation count, a run of tcbwd's default (dQ by
** atomics: the largest workspace) allocates exactly its outputs and
** workspaces, and twice the tokens take twice the bytes: nothing grows as
** seq_q x seq_k. */
static void test_memory_counted(void) {
  const shape s = {1, 2, 256, 256};
  fa_problem p = problem(FA_FP16, 64, 0, &s);
  gen_kernel k;
  fa_build b;
  if (compile_one(&p, "dq=atomic", &k, &b) != 0) return;
  size_t extra[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    p.seq_q = p.seq_k = 256 << i;
    if (run_extra_bytes(&k, b.prog, &p, &extra[i]) != 0) break;
    size_t bytes[ATTN_MAX_OUTPUTS], want = 0;
    const int n = attn_outputs(&p, bytes);
    for (int j = 0; j < n; j++) want += bytes[j];
    for (int j = 0; j < k.nws; j++) want += gen_workspace_bytes(&k, j, &p);
    CHECK(extra[i] == want, "%s at seq %d: %zu bytes allocated, outputs and workspaces %zu",
          k.name, p.seq_q, extra[i], want);
  }
  CHECK(extra[1] == 2 * extra[0], "%zu bytes at seq 256, %zu at 512: not linear", extra[0],
        extra[1]);
  printf("memory by the emulator's count, %s, 2 heads: %zu bytes beyond the inputs at seq 256, "
         "%zu at 512 (outputs and workspaces, linear in seq)\n", k.name, extra[0], extra[1]);
  backend_build_free(be, &b);
  gen_kernel_free(&k);
}

/* A backward problem run through a forward kernel, and a forward problem
** through a backward kernel: refused with a message, nothing launched. */
static void test_op_mismatch(void) {
  const shape s = {1, 1, 16, 16};
  fa_problem bwd = problem(FA_FP32, 16, 0, &s), fwd = bwd;
  fwd.op = FA_OP_FWD;
  gen_kernel k;
  fa_build b;
  if (compile_one(&bwd, "", &k, &b) != 0) return;
  val_case c;
  attn_inputs in;
  char err[512];
  CHECK(val_case_make(&c, &fwd, seed, err, sizeof err) == 0, "%s", err);
  CHECK(val_inputs_upload(be, &c, &in, err, sizeof err) == 0, "%s", err);
  val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 1};
  val_result r;
  CHECK(val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
  CHECK(r.status == VAL_CRASHED && strstr(r.msg, "op bwd") && strstr(r.msg, "op fwd"),
        "a bwd kernel on a fwd problem: %s", r.msg);
  attn_inputs_free(be, &in);
  val_case_free(&c);
  backend_build_free(be, &b);
  gen_kernel_free(&k);
}

/* A dK that is never written stays NaN and fails, naming dk. */
static void test_poison(void) {
  const shape s = {1, 1, 24, 24};
  fa_problem p = problem(FA_FP64, 16, 0, &s);
  gen_kernel k;
  fa_build b;
  memset(&b, 0, sizeof b);
  if (gen_render_config(gen, "block_m=16,block_n=16", &p, &target, &k) != 0) {
    CHECK(0, "%s", gen_errmsg(gen));
    return;
  }
  const char *store = "fa_st_f64(dkg";
  char *at = strstr(k.body, store);
  CHECK(at != NULL, "%s: no store of dK", k.name);
  if (at) memcpy(at, "(void)    (", 11);   /* the store becomes an expression */
  const gen_kernel *kp = &k;
  char err[512];
  CHECK(backend_compile(be, &kp, 1, 0, &b, err, sizeof err) == 0 && b.prog, "%s",
        b.log ? b.log : err);
  if (b.prog) {
    val_case c;
    attn_inputs in;
    CHECK(val_case_make(&c, &p, seed, err, sizeof err) == 0, "%s", err);
    CHECK(val_inputs_upload(be, &c, &in, err, sizeof err) == 0, "%s", err);
    val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 1};
    val_result r;
    CHECK(val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.status == VAL_INVALID && strstr(r.msg, "dk[0,0,0,0] is NaN"),
          "dK never written: %s", r.msg);
    printf("dK never written: %s\n", r.msg);
    attn_inputs_free(be, &in);
    val_case_free(&c);
    backend_build_free(be, &b);
  }
  gen_kernel_free(&k);
}

/* FlashAttention-1's order (order=q: parallel over Q blocks, dK and dV by
** atomics) against FA2's (parallel over K/V blocks) at one tile, checked
** against the cost model of each: exponentials, one per cell of S per
** recomputation (FA1's one, dq=separate's two); global bytes written,
** FA1's beyond dq=separate's exactly its zeroed accumulators and the
** write of each atomic add (two per key row, head-dim column and Q
** block). Both valid. */
static void test_fa1_order(void) {
  const shape s = {1, 2, 96, 96};
  const fa_problem p = problem(FA_FP32, 16, 0, &s);
  static const char *const configs[3] = {"block_m=32,block_n=32,warps=4,order=q",
                                         "block_m=32,block_n=32,warps=4,dq=separate",
                                         "block_m=32,block_n=32,warps=4,dq=atomic"};
  fa_counters ctr[3];
  int ok = 1;
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0 ||
      val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return;
  }
  for (int i = 0; i < 3; i++) {
    gen_kernel k;
    fa_build b;
    ok &= compile_one(&p, configs[i], &k, &b) == 0;
    if (!b.prog) continue;
    val_opts o = {.nschedules = 2, .schedule = {FA_SCHED_FORWARD, FA_SCHED_SKEW}, .threads = 1};
    val_result r;
    CHECK(val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err) == 0 && r.status == VAL_OK,
          "%s: %s %s", k.name, err, r.msg);
    CHECK(i != 0 || (strstr(k.name, "-fa1") && !k.deterministic), "%s: FA1's order, atomics",
          k.name);
    ctr[i] = r.counters;
    backend_build_free(be, &b);
    gen_kernel_free(&k);
  }
  attn_inputs_free(be, &in);
  val_case_free(&c);
  if (!ok) return;
  const unsigned long long bh = 2, N = 96, D = 16, es = 4, blocks = N / 32;
  const unsigned long long cells = bh * N * N;
  const unsigned long long extra = bh * (2 * N * D + blocks * blocks * 2 * 32 * D) * es;
  CHECK(ctr[0].exp2 == cells && ctr[1].exp2 == 2 * cells && ctr[2].exp2 == cells,
        "exponentials: FA1 %llu, FA2 dq=separate %llu, dq=atomic %llu (cells %llu)", ctr[0].exp2,
        ctr[1].exp2, ctr[2].exp2, cells);
  CHECK(ctr[0].gmem_written == ctr[1].gmem_written + extra,
        "bytes written: FA1 %llu, FA2 dq=separate %llu, + the model's %llu", ctr[0].gmem_written,
        ctr[1].gmem_written, extra);
  printf("FA1's order against FA2's, m32n32w4, seq 96, d16, 2 heads: exponentials %llu "
         "(FA2: %llu with dq=separate, %llu with dq=atomic); global bytes written %llu "
         "(FA2: %llu and %llu), read %llu (FA2: %llu and %llu)\n",
         ctr[0].exp2, ctr[1].exp2, ctr[2].exp2, ctr[0].gmem_written, ctr[1].gmem_written,
         ctr[2].gmem_written, ctr[0].gmem_read, ctr[1].gmem_read, ctr[2].gmem_read);
}

/* Relative error of n sampled rows of D values against rows of a full
** array: row i of got against row rows[i] of full. */
static double rows_err(const double *got, const double *full, const size_t *rows, size_t n,
                       int D) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < n; i++)
    for (int d = 0; d < D; d++) {
      const double ref = full[rows[i] * (size_t)D + (size_t)d], x = got[i * (size_t)D + (size_t)d] - ref;
      e2 += x * x, r2 += ref * ref;
    }
  return r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
}

/* The backward pass's oracle case (a GPU's, whose problems are too big for
** the CPU reference), on the emulator: its sampled rows of dq, dk and dv
** against the whole float64 reference on the same inputs; a kernel judged
** by them ok; a wrong element in a sampled row caught, and in a row not
** sampled when it is not finite. */
static void test_oracle_case(void) {
  static const struct {
    fa_dtype t;
    int dim, causal;
    const char *config;
    double tol;   /* of the sampled rows against the whole reference */
    int group;    /* GQA: 2 K/V heads of this many query heads each */
  } cases[] = {
    {FA_FP32, 24, 1, "block_m=16,block_n=32", 1e-6, 1},
    {FA_FP64, 16, 0, "block_m=16,block_n=16", 1e-13, 1},
    {FA_BF16, 64, 1, "block_m=64,block_n=64,warps=4,split_n=1,split_d=1", 1e-6, 1},
    {FA_FP32, 24, 0, "block_m=16,block_n=32", 1e-6, 2},
    {FA_BF16, 64, 1, "block_m=64,block_n=64,warps=4,split_n=1,split_d=1,qhead=1", 1e-6, 3},
  };
  const shape s = {2, 2, 37, 53};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fa_problem p = problem(cases[i].t, cases[i].dim, cases[i].causal, &s);
    p.heads = 2 * cases[i].group, p.kv_group = cases[i].group;
    const int D = p.dim;
    gen_kernel ok, k;
    fa_build ob, b;
    char err[512];
    memset(&ob, 0, sizeof ob);
    CHECK(gen_render_oracle(gen, &p, &ok) == 0, "%s", gen_errmsg(gen));
    const gen_kernel *kp = &ok;
    CHECK(backend_compile(be, &kp, 1, 0, &ob, err, sizeof err) == 0 && ob.prog, "oracle: %s",
          ob.log ? ob.log : err);
    val_case cpu, gpu;
    const unsigned long long cs = seed++;
    if (!ob.prog || val_case_make(&cpu, &p, cs, err, sizeof err) != 0) {
      CHECK(0, "%s", err);
      continue;
    }
    if (val_case_make_oracle(&gpu, &p, cs, be, ob.prog, &ok, 16, err, sizeof err) != 0) {
      CHECK(0, "oracle case %s: %s", fa_dtype_name(p.dtype), err);
      val_case_free(&cpu);
      continue;
    }
    const double edq = rows_err(gpu.sample_dq, cpu.dq_ref, gpu.sample_rows, gpu.nsample, D);
    const double emag = rows_err(gpu.sample_dq_mag, cpu.dq_mag, gpu.sample_rows, gpu.nsample, D);
    const double edk = rows_err(gpu.sample_dk, cpu.dk_ref, gpu.sample_krows, gpu.nksample, D);
    const double edv = rows_err(gpu.sample_dv, cpu.dv_ref, gpu.sample_krows, gpu.nksample, D);
    CHECK(gpu.nsample == 16 && gpu.nksample == 16 && !gpu.dq_ref && !gpu.dk_ref,
          "%zu and %zu rows sampled", gpu.nsample, gpu.nksample);
    CHECK(edq < 1e-13 && emag < 1e-13 && edk < cases[i].tol && edv < cases[i].tol,
          "%s: sampled rows against the whole reference: dq %.3g (magnitudes %.3g), dk %.3g, "
          "dv %.3g", fa_dtype_name(p.dtype), edq, emag, edk, edv);
    printf("oracle case %s, %d query heads a K/V head: 16 sampled rows each against the whole "
           "reference: dq %.2e, dk %.2e, dv %.2e\n", fa_dtype_name(p.dtype), cases[i].group, edq,
           edk, edv);
    attn_inputs in;
    if (compile_one(&p, cases[i].config, &k, &b) == 0 &&
        val_inputs_upload(be, &gpu, &in, err, sizeof err) == 0) {
      val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 1};
      val_result r;
      CHECK(val_check(be, &gpu, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
      CHECK(r.status == VAL_OK && r.sample_err > 0 && r.sample_err < val_tolerance(p.dtype),
            "%s judged by the oracle case: %s (sampled rows %.3g)", k.name, r.msg, r.sample_err);
      printf("%s judged on the sampled rows: dq %.2e, dk %.2e, dv %.2e\n", k.name,
             r.grad_err[0], r.grad_err[1], r.grad_err[2]);
      /* Its outputs, then one element wrong in a sampled row of dk, or NaN
      ** in a row of dv that no sample holds. */
      size_t bytes[ATTN_MAX_OUTPUTS];
      const int n = attn_outputs(&p, bytes);
      void *host[ATTN_MAX_OUTPUTS];
      for (int j = 0; j < n; j++) host[j] = malloc(bytes[j]);
      const fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1};
      CHECK(attn_run_op(be, b.prog, &k, &p, &in, &ro, host, NULL, NULL, err, sizeof err) == 0,
            "%s", err);
      const size_t at = gpu.sample_krows[2] * (size_t)D + 1;
      const double was = fa_elem_get(host[1], p.dtype, at);
      fa_elem_put(host[1], p.dtype, at, was + 4.0);
      const void *got[ATTN_MAX_OUTPUTS] = {host[0], host[1], host[2]};
      val_judge(&gpu, got, &r);
      CHECK(r.status == VAL_INVALID &&
            strstr(r.msg, "dk: norm-relative error") && strstr(r.msg, "on the rows computed"),
            "%s: dk off by 4 in a sampled row: %s", k.name, r.msg);
      fa_elem_put(host[1], p.dtype, at, was);
      size_t free_row = 0;   /* a key row of a K/V head no sample holds */
      for (int hit = 1; hit && free_row < (size_t)(2 * p.heads * 53); free_row += hit) {
        hit = free_row / 53 % (size_t)p.heads >= 2;
        for (size_t j = 0; j < gpu.nksample; j++) hit |= gpu.sample_krows[j] == free_row;
      }
      fa_elem_put(host[2], p.dtype, free_row * (size_t)D, NAN);
      val_judge(&gpu, got, &r);
      CHECK(r.status == VAL_INVALID && strstr(r.msg, "is NaN"), "%s: NaN in dv: %s", k.name,
            r.msg);
      for (int j = 0; j < n; j++) free(host[j]);
      attn_inputs_free(be, &in);
    }
    if (b.prog) backend_build_free(be, &b), gen_kernel_free(&k);
    val_case_free(&gpu);
    val_case_free(&cpu);
    backend_build_free(be, &ob);
    gen_kernel_free(&ok);
  }
}

int main(void) {
  char err[512];
  const char *env = getenv("FATUNE_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  if (gen_open(&gen, err, sizeof err) != 0 ||
      gen_target_for_arch(gen, "sm_80", 0, 0, &target) != 0 ||
      backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  test_defaults();
  test_op_mismatch();
  test_poison();
  test_oracle_case();
  test_fa1_order();
  test_memory();
  test_memory_counted();
  test_deterministic();
  test_atomic_dq();
  test_space(FA_FP32, 16, 0);
  test_space(FA_FP32, 16, 1);
  test_space(FA_FP64, 24, 1);
  test_space(FA_FP16, 64, 1);
  test_space(FA_BF16, 36, 0);
  test_space(FA_BF16, 128, 1);
  test_space_gqa(FA_FP16, 64, 1);
  test_wg_add_order(128);
  test_wg_add_order(64);
  test_space_wg(FA_BF16, 64, 1);
  test_space_wg(FA_FP16, 128, 0);
  test_space_wg(FA_BF16, 40, 0);
  test_space_mod("window=24:8", FA_BF16, 64, 0);
  test_space_mod("softcap=2", FA_FP16, 32, 1);
  test_space_mod("alibi", FA_BF16, 48, 1);
  test_space_mod("window=16:4", FA_FP32, 16, 1);
  test_window_traffic();
  test_space_mod("softcap=1.5", FA_FP64, 24, 0);
  backend_close(be);
  gen_close(gen);
  return check_done("test_bwd");
}
