/*
** explore.c
** fatune explore: matched variants around the SIMT family's
** FlashAttention-2 default, each axis's values differing in that axis
** only; compiled once, then for each sequence length run in worker
** processes and validated like the main job (two schedules on the
** emulator; the oracle and timing on a GPU), recorded in the database,
** and compared with the analytic model counter by counter
** (explore_print.c prints the tables).
**
** On the emulator the problem is one batch and one head at the requested
** seq, capped at --emu-seq (default 2048): the counters scale exactly with
** batch and heads, so one head shows every difference; a sweep drops the
** lengths past the cap. On a GPU the problem runs as asked.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa_util.h"
#include "explore_int.h"
#include "par.h"

#define EX_EMU_SEQ 2048

/* ---- The SIMT family: FlashAttention-1 against -2 ---- */

#define C(f) &trial_counters[TRIAL_CTR_##f]
static const ex_counter *const simt_counters[] = {
  C(gmem_read),
  C(gmem_written),
  C(smem_read),
  C(smem_written),
  C(exp2),
  C(log2),
  C(rescale),
  C(mma),
  C(shuffles),
  C(barriers),
  C(warp_syncs),
};

static const ex_axis simt_axes[] = {
  {"norm", "normalization: eager (FlashAttention-1) against deferred (FlashAttention-2)", 2,
   {"eager", "deferred"}, {"norm=eager", "norm=deferred"},
   "eager scales O and P by l_old*alpha/l_new and 1/l_new at every K/V tile; deferred scales "
   "only O, by alpha, and divides it by l once at the end", {6, 6}, "rescale multiplies"},
  {"parallel", "loop order: kv_outer (FlashAttention-1) against q_outer (FlashAttention-2)", 2,
   {"kv_outer", "q_outer"}, {"par=kv_outer", "par=q_outer"},
   "kv_outer reads Q and reads and writes O, m and l once per (K/V tile, Q tile) pair; q_outer "
   "reads K and V once per Q tile and writes O once", {0, 1}, "global-memory bytes"},
  {"warp_split", "work split among warps: split_k (FlashAttention-1) against split_q "
   "(FlashAttention-2)", 2, {"split_k", "split_q"}, {"split=split_k", "split=split_q"},
   "split_k's warps exchange row maxima, row sums and partial O through shared memory at every "
   "K/V tile, behind three more barriers; split_q's warps own whole rows", {2, 3},
   "shared-memory bytes"},
  {"layout", "shared-memory layout: row-major, padded rows, K transposed", 3,
   {"row", "pad", "kt"}, {"layout=row", "layout=pad", "layout=kt"},
   "the layouts move the same bytes: they differ in bank conflicts, which the emulator does not "
   "model (a GPU times them), and in shared memory per CTA", {-1, -1}, NULL},
  {"tiles", "tile: block_m x block_n", 4, {"32x32", "64x32", "64x64", "128x64"},
   {"block_m=32,block_n=32", "block_m=64,block_n=32", "block_m=64,block_n=64",
    "block_m=128,block_n=64"},
   "K and V are read once per Q tile: taller tiles read them fewer times, for more shared "
   "memory per CTA", {-1, -1}, NULL},
};

/* ---- The wg family (sm_90a): FlashAttention-3's choices ---- */

static const ex_counter *const wg_counters[] = {
  C(gmem_read),
  C(gmem_written),
  C(tma_bytes),
  C(smem_read),
  C(smem_written),
  C(exp2),
  C(log2),
  C(rescale),
  C(wgmma),
  C(wgmma_flops),
  C(mbar_waits),
  C(named_waits),
  C(shuffles),
  C(barriers),
};
#undef C

static const ex_axis wg_axes[] = {
  {"norm", "normalization: eager (FlashAttention-1) against deferred (FlashAttention-2, -3)", 2,
   {"eager", "deferred"}, {"norm=eager", "norm=deferred"},
   "eager scales O by l_old*alpha/l_new and P by 1/l_new at every K/V block; deferred scales "
   "only O, by alpha, and divides it by l once at the end", {7, 7}, "rescale multiplies"},
  {"pingpong", "ping-pong: two consumer warpgroups take turns, one's softmax under the other's "
   "GEMMs (FlashAttention-3), against none", 2, {"none", "pp"},
   {"consumers=2,block_m=128,pingpong=0", "consumers=2,block_m=128,pingpong=1"},
   "ping-pong orders the consumers' GEMMs with named barriers: each thread waits for its turn "
   "before it issues S = Q K^T, once per K/V block, and hands the turn over once its GEMMs are "
   "issued; the work itself is the same", {11, 11},
   "named-barrier waits"},
  {"overlap", "intra-warpgroup overlap: S of the next K/V block issued before this block's "
   "softmax (FlashAttention-3), against none", 2, {"none", "ov"}, {"overlap=0", "overlap=1"},
   "overlap reorders the same wgmma and exponentials: a GPU times the difference, the counts "
   "stay", {8, 8}, "wgmma"},
  {"consumers", "consumer warpgroups: one against two (each owns 64 rows of the Q block)", 2,
   {"1", "2"}, {"consumers=1,pingpong=0,block_m=64", "consumers=2,pingpong=0,block_m=128"},
   "two consumers share each K/V block the producer loads: half the TMA bytes of K and V per "
   "query row", {2, 2}, "TMA box bytes"},
  {"stages", "K/V pipeline stages: 2 against 3", 2, {"2", "3"}, {"stages=2", "stages=3"},
   "stages hold more K/V blocks in flight, for more shared memory per CTA; the same bytes move",
   {10, 10}, "mbarrier waits"},
};

#define N(a) (int)(sizeof a / sizeof a[0])
static const ex_family families[] = {
  {"simt", "", "templates/simt/simt_model.lua", "simt/simt.cu", N(simt_axes), simt_axes,
   N(simt_counters), simt_counters, 1},
  {"wg", "family=wg", "templates/wg/wg_model.lua", "wg/wg.cu", N(wg_axes), wg_axes, N(wg_counters),
   wg_counters, 0},
};
_Static_assert(N(simt_axes) <= EX_NAXES && N(wg_axes) <= EX_NAXES, "EX_NAXES");
_Static_assert(N(simt_counters) <= EX_NCOUNTERS && N(wg_counters) <= EX_NCOUNTERS,
               "EX_NCOUNTERS");
#undef N

const ex_family *ex_family_for(fa_dtype dtype, const char *arch, char *why, size_t n) {
  if (dtype == FA_FP32 || dtype == FA_FP64) return &families[0];
  if (!strcmp(arch, "sm_90a")) return &families[1];
  snprintf(why, n, "explore covers the SIMT family (--dtype fp32 or fp64) and, on "
                   "--arch sm_90a, the wg family (fp16, bf16); not %s on %s",
           fa_dtype_name(dtype), arch);
  return NULL;
}

/* ---- The variants ---- */

/* Render `config` around the defaults; the index of its variant (an equal
** one rendered before is shared), -1 when it does not fit the target (why
** says so), -2 on any other error. */
static int add_variant(explore *x, const char *axis_config, char *why, size_t n) {
  gen_kernel k;
  char config[256];
  snprintf(config, sizeof config, "%s%s%s", x->fam->config, x->fam->config[0] ? "," : "",
           axis_config);
  if (gen_render_config(x->g, config, &x->o->problem, x->t, &k) != 0) {
    snprintf(why, n, "%s", gen_errmsg(x->g));
    return strstr(why, "does not fit") ? -1 : -2;
  }
  for (size_t i = 0; i < x->n; i++)
    if (!strcmp(x->v[i].t.k.hash, k.hash)) {
      gen_kernel_free(&k);
      return (int)i;
    }
  trial *v = &x->v[x->n].t;
  v->k = k;
  v->nvrtc.source = k.source, v->nvrtc.entry = k.entry;
  return (int)x->n++;
}

static int setup_variants(explore *x) {
  for (int a = 0; a < x->fam->naxes; a++) {
    if (!x->on[a]) continue;
    const ex_axis *d = &x->fam->axes[a];
    for (int i = 0; i < d->n; i++) {
      int at = add_variant(x, d->config[i], x->unfit[a][i], sizeof x->unfit[a][i]);
      if (at == -2) {
        fprintf(stderr, "fatune: explore: %s: %s\n", d->config[i], x->unfit[a][i]);
        return -1;
      }
      x->slot[a][i] = at;
    }
  }
  return 0;
}

/* The backend's compile of every variant; on the emulator NVRTC's too, for
** ptxas's registers and spills; on a GPU the oracle. */
static int compile_all(explore *x) {
  const gen_kernel *ks[EX_MAX];
  fa_build b[EX_MAX];
  compile_job jobs[EX_MAX];
  char err[512];
  for (size_t i = 0; i < x->n; i++) ks[i] = &x->v[i].t.k, jobs[i] = x->v[i].t.nvrtc;
  if (!x->gpu && compile_pool_run(jobs, x->n, x->t->arch, x->threads, NULL, NULL) != 0) {
    fprintf(stderr, "fatune: cannot start the NVRTC compile threads\n");
    return -1;
  }
  for (size_t i = 0; !x->gpu && i < x->n; i++) x->v[i].t.nvrtc = jobs[i];
  if (trial_compile(&x->env, ks, x->n, x->threads, b, NULL, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return -1;
  }
  for (size_t i = 0; i < x->n; i++) trial_take_build(&x->v[i].t, &b[i], !x->gpu);
  if (!x->gpu) return 0;
  if (trial_oracle_render(&x->env, x->g, &x->o->problem) != 0) return -1;
  return trial_oracle_compile(&x->env);
}

/* The model's figures for the problem run; none (every one -1) from a
** family that has no model yet, said once. */
static int predict(explore *x, ex_variant *v) {
  gen_prediction pr;
  for (int c = 0; c < EX_NCOUNTERS; c++) v->pred[c] = -1;
  v->paper_standard = v->paper_tiled = -1;
  if (gen_predict(x->g, v->t.k.config, &x->run, &pr) != 0) {
    const int none = strstr(gen_errmsg(x->g), "has no cost model") != NULL;
    if (!none || !x->no_model_said)
      fprintf(stderr, "fatune: the cost model of %s: %s%s\n", v->t.k.name, gen_errmsg(x->g),
              none ? ": the counters are shown measured only" : "");
    x->no_model_said |= none;
    return none ? 0 : -1;
  }
  for (int i = 0; i < pr.n; i++) {
    for (int c = 0; c < x->fam->ncounters; c++)
      if (!strcmp(pr.f[i].name, x->fam->counters[c]->name)) v->pred[c] = pr.f[i].value;
    if (!strcmp(pr.f[i].name, "paper_standard_bytes")) v->paper_standard = pr.f[i].value;
    if (!strcmp(pr.f[i].name, "paper_tiled_bytes")) v->paper_tiled = pr.f[i].value;
  }
  return 0;
}

/* ---- The database ---- */

static int db_setup(explore *x) {
  char err[512];
  x->env.n = x->n;
  if (db_open(x->o->db, DB_CREATE, &x->db, err, sizeof err) != 0 ||
      (x->env.db = x->db, trial_register(&x->env, err, sizeof err)) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return -1;
  }
  return 0;
}

/* Every variant for the problem in x->run, in worker processes: fresh ones
** for each problem, since a child builds its inputs once. */
static int run_problem(explore *x) {
  const int n = x->gpu ? 1 : x->threads < EX_MAX ? x->threads : EX_MAX;
  if (trial_pool_open(&x->env, n) != 0) return -1;
  int rc = trial_measure_all(&x->env, n, 0, NULL, NULL);
  trial_pool_close(&x->env);
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
  return rc;
}

/* ---- The flow ---- */

/* The problem that runs for seq (the emulator's: one batch, one head, seq
** capped); 0 when the emulator skips it in a sweep. */
static int problem_for(const explore *x, int seq_q, int seq_k, fa_problem *p) {
  *p = x->o->problem;
  p->seq_q = seq_q, p->seq_k = seq_k;
  if (x->gpu) return 1;
  p->batch = p->heads = 1;
  if (x->o->sweep_lo && (seq_q > x->emu_seq || seq_k > x->emu_seq)) return 0;
  p->seq_q = seq_q < x->emu_seq ? seq_q : x->emu_seq;
  p->seq_k = seq_k < x->emu_seq ? seq_k : x->emu_seq;
  return 1;
}

static int explore_one(explore *x, int first) {
  for (size_t i = 0; i < x->n; i++)
    if (predict(x, &x->v[i]) != 0) return -1;
  const double t0 = fa_now_s();
  if (isatty(2))
    fprintf(stderr, "explore: seq_q %d seq_k %d: running %zu variants...\n", x->run.seq_q,
            x->run.seq_k, x->n);
  if (run_problem(x) != 0) return -1;
  x->run_s += fa_now_s() - t0;
  for (size_t i = 0; i < x->n; i++) {
    if (trial_record(&x->env, &x->v[i].t) != 0) return -1;   /* it said why */
    if (x->v[i].t.st != TRIAL_OK) x->failures++;
  }
  ex_print_problem(x, first);
  return 0;
}

static int explore_all(explore *x) {
  const fa_problem *p = &x->o->problem;
  if (!x->o->sweep_lo) {
    problem_for(x, p->seq_q, p->seq_k, &x->run);
    return explore_one(x, 1);
  }
  int runs = 0;
  for (long long s = x->o->sweep_lo; s <= x->o->sweep_hi; s *= 2) {
    if (!problem_for(x, (int)s, (int)s, &x->run)) {
      fprintf(stderr, "fatune: seq %lld skipped: past the emulator's --emu-seq %d\n", s,
              x->emu_seq);
      continue;
    }
    if (explore_one(x, runs == 0) != 0) return -1;
    runs++;
  }
  if (!runs) {
    fprintf(stderr, "fatune: no sequence length of the sweep is within --emu-seq %d\n",
            x->emu_seq);
    return -1;
  }
  return 0;
}

static void explore_free(explore *x) {
  for (size_t i = 0; i < x->n; i++) trial_free(&x->v[i].t, x->be);
  trial_env_free(&x->env);
  backend_close(x->be);
  if (x->db) db_close(x->db);
}

static void banner(const explore *x, const char *note) {
  const fa_problem *p = &x->o->problem;
  const fa_device *d = backend_device(x->be);
  if (d)
    fprintf(stderr, "fatune: explore on %s (sm_%d%d), timing %d ms per variant\n", d->name,
            d->cc_major, d->cc_minor, x->o->trial_ms);
  else
    fprintf(stderr, "fatune: explore on the CPU emulator%s%s: exact counts, one batch and one "
                    "head, seq at most %d; not GPU performance\n",
            note[0] ? ": " : "", note, x->emu_seq);
  fprintf(stderr, "fatune: %s dim %d%s, the %s family, axis %s, target %s; inputs seed %llu\n",
          fa_dtype_name(p->dtype), p->dim, p->causal ? " causal" : "", x->fam->name, x->o->axis,
          x->t->arch, x->seed);
}

int explore_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  explore *x = calloc(1, sizeof *x);
  if (!x) return cli_say(1, "out of memory");
  x->o = o, x->t = t, x->g = g;
  x->threads = o->jobs > 0 ? o->jobs : par_cores();
  x->seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  x->emu_seq = cli_given(o, "--emu-seq") ? o->emu_seq : EX_EMU_SEQ;
  const double t0 = fa_now_s();
  trial_env_init(&x->env);
  char note[256], err[512];
  int rc = 1, any = 0;
  if (!(x->fam = ex_family_for(o->problem.dtype, t->arch, err, sizeof err))) {
    rc = cli_say(EXIT_BAD_INPUT, err);
    goto done;
  }
  for (int a = 0; a < x->fam->naxes; a++)
    any |= x->on[a] = !strcmp(o->axis, "all") || !strcmp(o->axis, x->fam->axes[a].name);
  if (!any) {
    fprintf(stderr, "fatune: the %s family has no axis '%s' (", x->fam->name, o->axis);
    for (int a = 0; a < x->fam->naxes; a++) fprintf(stderr, "%s, ", x->fam->axes[a].name);
    fprintf(stderr, "or all)\n");
    rc = EXIT_BAD_INPUT;
    goto done;
  }
  /* Before anything large is allocated: the peak is a high-water mark. */
  if (!strcmp(o->axis, "all") && x->fam->paper && ex_peak_measure(x) != 0) goto done;
  if (backend_open(o->backend, &x->be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    goto done;
  }
  x->gpu = backend_device(x->be) != NULL;
  x->env.be = x->be, x->env.gpu = x->gpu, x->env.run = &x->run, x->env.seed = x->seed;
  x->env.arch = x->t->arch;
  x->env.timeout_s = o->timeout_s, x->env.trial_ms = o->trial_ms;
  x->env.trials = x->v, x->env.stride = sizeof x->v[0];
  banner(x, note);
  if (setup_variants(x) != 0 || x->n == 0) {
    if (x->n == 0) fprintf(stderr, "fatune: no explored variant fits %s\n", t->arch);
    goto done;
  }
  if (compile_all(x) != 0 || db_setup(x) != 0) goto done;
  ex_print_start(x);
  if (explore_all(x) != 0) goto done;
  ex_print_end(x);
  rc = x->failures || x->mismatches ? 1 : 0;
  fprintf(stderr, "fatune: %zu variants, %d trials not ok, %d counters off the model; %.1f s "
                  "in all, %.1f s of it running them; results in %s\n",
          x->n, x->failures, x->mismatches, fa_now_s() - t0, x->run_s, db_path(x->db));
done:
  explore_free(x);
  free(x);
  return rc;
}
