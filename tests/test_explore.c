/*
** test_explore.c
** The SIMT family's analytic cost model (templates/simt/simt_model.lua, through
** gen_predict) against the CPU emulator's exact counters: every counter
** the model predicts must equal the measured one, for all eight
** combinations of normalization, loop order and warp split, over tiles
** that divide nothing, a tile of a single row, both layouts of K, Q in
** registers or shared memory, fp32 and fp64, causal masks with
** seq_q < seq_k and seq_q > seq_k (rows with no key), and several heads.
** Each kernel is validated too: a model of a wrong kernel proves nothing.
** Then the relations `fatune explore` reports, on the model alone:
** deferred rescales less than eager, kv_outer moves more global memory
** than q_outer, and split_k's reduction goes through shared memory.
** With --wg, the wg family's model (templates/wg/wg_model.lua) on sm_90a:
** TMA bytes, wgmma count and FLOPs and the global bytes equal the
** emulator's, and every other counter of the family's (exponentials,
** rescales, waits at mbarriers and named barriers, shared bytes, ...), for
** eager and deferred, ping-pong (two and three consumers) and overlap,
** one to three consumers, two and three stages, persistent or not, P V's
** P from registers or shared memory, both swizzles, dims 64, 96 (padded) and 128, fp16 and
** bf16, causal or not, tails (seq_q 100, seq_k 200), rows and CTAs with no
** key, several heads.
** Then the simtbwd family's model (templates/simtbwd/simtbwd_model.lua)
** on every launch of the backward pass: FlashAttention-2's order with dQ
** in a pass of its own or by atomics, FlashAttention-1's order; causal or
** not, tails, rows with no key, fp32 and fp64; and what explore --op bwd
** shows at its size: FA1's atomics, FA2's recomputation.
** The input seed is printed; FATUNE_TEST_SEED replays a run.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "validate.h"

typedef struct shape {
  const char *tile;   /* the config's tile, warps, layout and Q */
  int split_k;        /* the tile has a column for each of two warps or more */
  int dim;
  fa_dtype dtype;
  int causal, batch, heads, seq_q, seq_k;
  fa_op op;
} shape;

static const shape shapes[] = {
  {"block_m=16,block_n=16,warps=2,layout=pad,q=smem", 1, 16, FA_FP32, 0, 2, 1, 100, 100, FA_OP_FWD},
  {"block_m=16,block_n=16,warps=2,layout=pad,q=smem", 1, 16, FA_FP32, 1, 1, 2, 70, 130, FA_OP_FWD},
  {"block_m=32,block_n=8,warps=4,layout=kt,q=reg", 1, 24, FA_FP64, 1, 1, 1, 130, 70, FA_OP_FWD},
  {"block_m=3,block_n=5,warps=2,layout=row,q=smem", 1, 7, FA_FP32, 0, 1, 1, 37, 53, FA_OP_FWD},
  {"block_m=3,block_n=5,warps=2,layout=row,q=reg", 1, 7, FA_FP32, 1, 1, 1, 53, 37, FA_OP_FWD},
  {"block_m=1,block_n=4,warps=1,layout=pad,q=smem", 0, 5, FA_FP64, 1, 1, 1, 9, 11, FA_OP_FWD},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const char *const algos[] = {
  "norm=eager,par=q_outer,split=split_q", "norm=deferred,par=q_outer,split=split_q",
  "norm=eager,par=kv_outer,split=split_q", "norm=deferred,par=kv_outer,split=split_q",
  "norm=eager,par=q_outer,split=split_k", "norm=deferred,par=q_outer,split=split_k",
  "norm=eager,par=kv_outer,split=split_k", "norm=deferred,par=kv_outer,split=split_k",
};
#define NALGOS (sizeof algos / sizeof algos[0])
#define NMAX (NSHAPES * NALGOS)

static fa_backend *be;
static gen_state *gen;
static gen_target target;
static unsigned long long seed;

static fa_problem problem_of(const shape *s) {
  fa_problem p = {.batch = s->batch, .heads = s->heads, .seq_q = s->seq_q, .seq_k = s->seq_k,
                  .dim = s->dim, .dtype = s->dtype, .causal = s->causal, .op = s->op};
  return p;
}

/* The measured counter the model calls `name`; -1 for a reference figure. */
static long long measured(const fa_counters *c, const char *name) {
  static const struct { const char *name; size_t off; } map[] = {
#define M(f) {#f, offsetof(fa_counters, f)}
    M(gmem_read), M(gmem_written), M(atomics), M(smem_read), M(smem_written), M(exp2), M(log2),
    M(rescale), M(mma), M(shuffles), M(barriers), M(warp_syncs), M(wgmma), M(wgmma_flops),
    M(tma_bytes), M(mbar_waits), M(named_waits),
#undef M
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(map[i].name, name))
      return (long long)*(const unsigned long long *)((const char *)c + map[i].off);
  return -1;
}

/* One kernel on its problem: valid, and every modelled counter exact
** (want of them: the family's model predicts that many). */
static void check_kernel(const shape *s, const char *config, const gen_kernel *k,
                         const fa_program *prog, int want) {
  const fa_problem p = problem_of(s);
  char err[512];
  val_case vc;
  attn_inputs in;
  if (val_case_make(&vc, &p, seed, err, sizeof err) != 0 ||
      val_inputs_upload(be, &vc, &in, err, sizeof err) != 0) {
    CHECK(0, "setting up %s: %s", k->name, err);
    return;
  }
  val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 2};
  val_result r;
  CHECK(val_check(be, &vc, &in, prog, k, &o, &r, err, sizeof err) == 0, "%s: %s", k->name, err);
  CHECK(r.status == VAL_OK, "%s: %s", k->name, r.msg);
  gen_prediction pr;
  CHECK(gen_predict(gen, config, &p, &pr) == 0, "%s: %s", config, gen_errmsg(gen));
  int compared = 0, wrong = 0;
  for (int i = 0; i < pr.n; i++) {
    const long long m = measured(&r.counters, pr.f[i].name);
    if (m < 0) continue;
    compared++;
    if (m != pr.f[i].value) wrong++;
    CHECK(m == pr.f[i].value, "%s on %dx%d%s b%d h%d: %s measured %lld, predicted %lld",
          k->name, p.seq_q, p.seq_k, p.causal ? " causal" : "", p.batch, p.heads,
          pr.f[i].name, m, pr.f[i].value);
  }
  CHECK(compared == want, "%s: the model predicts %d counters, not %d", k->name, compared, want);
  printf("%-64s q%-3d k%-3d %s %d of %d counters as predicted\n", k->name, p.seq_q, p.seq_k,
         p.causal ? "causal" : "      ", compared - wrong, compared);
  attn_inputs_free(be, &in);
  val_case_free(&vc);
}

static void test_model_matches_emulator(void) {
  static gen_kernel ks[NMAX];
  static fa_build bs[NMAX];
  static char configs[NMAX][200];
  const gen_kernel *kp[NMAX];
  const shape *sh[NMAX];
  size_t n = 0;
  for (size_t s = 0; s < NSHAPES; s++)
    for (size_t a = 0; a < NALGOS; a++) {
      const shape *x = &shapes[s];
      if (!x->split_k && strstr(algos[a], "split_k")) continue;
      const fa_problem p = problem_of(x);
      snprintf(configs[n], sizeof configs[n], "%s,%s", x->tile, algos[a]);
      if (gen_render_config(gen, configs[n], &p, &target, &ks[n]) != 0) {
        CHECK(0, "%s: %s", configs[n], gen_errmsg(gen));
        continue;
      }
      kp[n] = &ks[n], sh[n] = x, n++;
    }
  char err[512];
  CHECK(backend_compile(be, kp, n, 0, bs, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < n; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (bs[i].prog) check_kernel(sh[i], configs[i], &ks[i], bs[i].prog, 11);
    backend_build_free(be, &bs[i]);
    gen_kernel_free(&ks[i]);
  }
}

static long long figure(const char *config, const fa_problem *p, const char *name) {
  gen_prediction pr;
  if (gen_predict(gen, config, p, &pr) != 0) {
    CHECK(0, "%s: %s", config, gen_errmsg(gen));
    return -1;
  }
  for (int i = 0; i < pr.n; i++)
    if (!strcmp(pr.f[i].name, name)) return pr.f[i].value;
  CHECK(0, "%s: no figure %s", config, name);
  return -1;
}

/* The FlashAttention-2 choices, each against its FlashAttention-1 side, at
** the size `fatune explore` runs by default on the emulator. */
static void test_model_relations(void) {
  const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 512, .seq_k = 512, .dim = 64,
                        .dtype = FA_FP32};
  const long long eager = figure("norm=eager", &p, "rescale");
  const long long deferred = figure("norm=deferred", &p, "rescale");
  /* Per K/V tile eager scales O (64 columns) and P (32 columns) of every
  ** row; deferred scales O, then divides it once at the end. */
  CHECK(eager == 512LL * 16 * (64 + 32) && deferred == 512LL * 16 * 64 + 512 * 64,
        "rescale: eager %lld, deferred %lld", eager, deferred);
  const long long kv = figure("par=kv_outer", &p, "gmem_read") +
                       figure("par=kv_outer", &p, "gmem_written");
  const long long q = figure("par=q_outer", &p, "gmem_read") +
                      figure("par=q_outer", &p, "gmem_written");
  CHECK(kv > q, "kv_outer %lld global bytes, q_outer %lld", kv, q);
  const long long sk = figure("split=split_k,warps=4", &p, "smem_written");
  const long long sq = figure("split=split_q,warps=4", &p, "smem_written");
  CHECK(sk > sq, "shared bytes written: split_k %lld, split_q %lld", sk, sq);
  gen_prediction pr;
  CHECK(gen_predict(gen, "family=simt,no_such_key=1", &p, &pr) != 0 &&
        strstr(gen_errmsg(gen), "no_such_key"), "a bad config is not refused: %s",
        gen_errmsg(gen));
  printf("model at d64 seq 512: rescale eager %lld deferred %lld; global bytes kv_outer %lld "
         "q_outer %lld; shared bytes written split_k %lld split_q %lld\n",
         eager, deferred, kv, q, sk, sq);
}

/* ---- The wg family (sm_90a) ---- */

static const shape wg_shapes[] = {
  {"", 0, 64, FA_BF16, 0, 1, 2, 128, 128, FA_OP_FWD},
  {"", 0, 64, FA_FP16, 1, 1, 1, 100, 200, FA_OP_FWD},
  {"", 0, 128, FA_BF16, 1, 2, 1, 128, 128, FA_OP_FWD},
  {"", 0, 128, FA_FP16, 0, 1, 1, 100, 200, FA_OP_FWD},
  {"", 0, 64, FA_BF16, 1, 1, 2, 200, 100, FA_OP_FWD},   /* rows and a CTA with no key */
  {"", 0, 96, FA_FP16, 0, 1, 1, 70, 130, FA_OP_FWD},    /* the head dim padded to 128 */
};
static const char *const wg_algos[] = {
  "norm=deferred", "norm=eager", "consumers=2,block_m=128,pingpong=1",
  "consumers=2,block_m=128,overlap=1,norm=eager", "consumers=1,block_m=64,stages=3",
  "swizzle=64,overlap=1", "persistent=1",
  "pingpong=1,overlap=1,persistent=1", "overlap=1,pv=ss",
  "consumers=1,block_m=64,stages=3,overlap=1,persistent=1",
};
#define WG_MAX (sizeof wg_shapes / sizeof wg_shapes[0] * sizeof wg_algos / sizeof wg_algos[0])

static int test_wg_model(void) {
  gen_target t90a;
  gen_kernel probe;
  const fa_problem p0 = problem_of(&wg_shapes[0]);
  if (gen_target_for_arch(gen, "sm_90a", 0, 0, &t90a) != 0) {
    CHECK(0, "no target sm_90a: %s", gen_errmsg(gen));
    return check_done("test_explore --wg");
  }
  if (gen_render_config(gen, "family=wg", &p0, &t90a, &probe) != 0) {
    CHECK(0, "no wg family to check the model against: %s", gen_errmsg(gen));
    return check_done("test_explore --wg");
  }
  gen_kernel_free(&probe);
  gen_prediction pr;
  if (gen_predict(gen, "family=wg", &p0, &pr) != 0) {
    CHECK(0, "the wg family's cost model (wg.predict, templates/wg/wg_model.lua): %s",
          gen_errmsg(gen));
    return check_done("test_explore --wg");
  }
  static gen_kernel ks[WG_MAX];
  static fa_build bs[WG_MAX];
  static char configs[WG_MAX][200];
  const gen_kernel *kp[WG_MAX];
  const shape *sh[WG_MAX];
  size_t n = 0;
  for (size_t s = 0; s < sizeof wg_shapes / sizeof wg_shapes[0]; s++)
    for (size_t a = 0; a < sizeof wg_algos / sizeof wg_algos[0]; a++) {
      const fa_problem p = problem_of(&wg_shapes[s]);
      snprintf(configs[n], sizeof configs[n], "family=wg,%s", wg_algos[a]);
      if (gen_render_config(gen, configs[n], &p, &t90a, &ks[n]) != 0) {
        /* A choice the default tile cannot take (ping-pong with one consumer). */
        CHECK(strstr(gen_errmsg(gen), "does not fit"), "%s: %s", configs[n], gen_errmsg(gen));
        printf("%s at d%d: %s\n", configs[n], p.dim, gen_errmsg(gen));
        continue;
      }
      kp[n] = &ks[n], sh[n] = &wg_shapes[s], n++;
    }
  CHECK(n >= 8, "only %zu wg variants render", n);
  char err[512];
  CHECK(backend_compile(be, kp, n, 0, bs, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < n; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (bs[i].prog) check_kernel(sh[i], configs[i], &ks[i], bs[i].prog, 14);
    backend_build_free(be, &bs[i]);
    gen_kernel_free(&ks[i]);
  }
  return check_done("test_explore --wg");
}

/* ---- The simtbwd family (the backward pass) ---- */

static const shape bwd_shapes[] = {
  {"block_m=32,block_n=32,warps=4", 0, 16, FA_FP32, 0, 2, 1, 100, 100, FA_OP_BWD},
  {"block_m=16,block_n=32,warps=2", 0, 24, FA_FP32, 1, 1, 2, 70, 130, FA_OP_BWD},
  {"block_m=32,block_n=16,warps=4", 0, 8, FA_FP64, 1, 1, 1, 130, 70, FA_OP_BWD},  /* rows with no key */
  {"block_m=3,block_n=5,warps=1", 0, 7, FA_FP32, 1, 1, 1, 37, 53, FA_OP_BWD},     /* tiles that divide nothing */
  {"block_m=1,block_n=4,warps=1", 0, 5, FA_FP64, 0, 1, 1, 9, 11, FA_OP_BWD},
};
static const char *const bwd_algos[] = {"order=kv,dq=separate", "order=kv,dq=atomic",
                                        "order=q,dq=separate"};
#define BWD_MAX (sizeof bwd_shapes / sizeof bwd_shapes[0] * sizeof bwd_algos / sizeof bwd_algos[0])

/* The simtbwd model (templates/simtbwd/simtbwd_model.lua) against the
** emulator on every launch of FlashAttention-2's order with both ways of
** accumulating dQ and of FlashAttention-1's; then what explore's axes
** show, on the model alone at its default size. */
static void test_bwd_model(void) {
  static gen_kernel ks[BWD_MAX];
  static fa_build bs[BWD_MAX];
  static char configs[BWD_MAX][200];
  const gen_kernel *kp[BWD_MAX];
  const shape *sh[BWD_MAX];
  size_t n = 0;
  for (size_t s = 0; s < sizeof bwd_shapes / sizeof bwd_shapes[0]; s++)
    for (size_t a = 0; a < sizeof bwd_algos / sizeof bwd_algos[0]; a++) {
      const fa_problem p = problem_of(&bwd_shapes[s]);
      snprintf(configs[n], sizeof configs[n], "family=simtbwd,%s,%s", bwd_shapes[s].tile,
               bwd_algos[a]);
      if (gen_render_config(gen, configs[n], &p, &target, &ks[n]) != 0) {
        CHECK(0, "%s: %s", configs[n], gen_errmsg(gen));
        continue;
      }
      kp[n] = &ks[n], sh[n] = &bwd_shapes[s], n++;
    }
  char err[512];
  CHECK(backend_compile(be, kp, n, 0, bs, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < n; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (bs[i].prog) check_kernel(sh[i], configs[i], &ks[i], bs[i].prog, 12);
    backend_build_free(be, &bs[i]);
    gen_kernel_free(&ks[i]);
  }
  /* At explore's size: FA1's order pays in atomics and global writes what
  ** FA2's pays in recomputation when dQ has a pass of its own. */
  const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 2048, .seq_k = 2048, .dim = 64,
                        .dtype = FA_FP32, .op = FA_OP_BWD};
  const char *fa1 = "family=simtbwd,order=q", *fa2 = "family=simtbwd,order=kv,dq=separate",
             *at = "family=simtbwd,order=kv,dq=atomic";
  const long long cells = 2048LL * 2048;
  CHECK(figure(fa1, &p, "atomics") == 2 * 2048LL * 64 * (2048 / 32) &&
        figure(fa2, &p, "atomics") == 0 && figure(at, &p, "atomics") == 2048LL * 64 * (2048 / 32),
        "atomics: FA1 %lld, FA2 %lld, FA2 with dq=atomic %lld", figure(fa1, &p, "atomics"),
        figure(fa2, &p, "atomics"), figure(at, &p, "atomics"));
  CHECK(figure(fa1, &p, "exp2") == cells && figure(fa2, &p, "exp2") == 2 * cells &&
        figure(at, &p, "exp2") == cells, "exponentials: FA1 %lld, FA2 %lld, dq=atomic %lld",
        figure(fa1, &p, "exp2"), figure(fa2, &p, "exp2"), figure(at, &p, "exp2"));
  CHECK(figure(fa1, &p, "gmem_written") > 4 * figure(fa2, &p, "gmem_written"),
        "global bytes written: FA1 %lld, FA2 %lld", figure(fa1, &p, "gmem_written"),
        figure(fa2, &p, "gmem_written"));
  printf("bwd model at d64 seq 2048: atomics FA1 %lld, dq=atomic %lld; exponentials FA1 %lld, "
         "FA2 %lld; global bytes written FA1 %lld, FA2 %lld\n", figure(fa1, &p, "atomics"),
         figure(at, &p, "atomics"), figure(fa1, &p, "exp2"), figure(fa2, &p, "exp2"),
         figure(fa1, &p, "gmem_written"), figure(fa2, &p, "gmem_written"));
}

int main(int argc, char **argv) {
  const char *env = getenv("FATUNE_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  char err[512];
  if (gen_open(&gen, err, sizeof err) != 0 ||
      gen_target_for_arch(gen, "sm_90", 0, 0, &target) != 0 ||
      backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  if (argc > 1 && !strcmp(argv[1], "--wg")) {
    const int rc = test_wg_model();
    backend_close(be);
    gen_close(gen);
    return rc;
  }
  test_model_matches_emulator();
  test_model_relations();
  test_bwd_model();
  backend_close(be);
  gen_close(gen);
  return check_done("test_explore");
}
