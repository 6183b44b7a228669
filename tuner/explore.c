/*
** explore.c
** fatune explore: matched variants around the default of the family
** that explores the problem on the target (its `explore` plan in the
** templates: gen_explore_plan), each axis's values differing in that axis
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
#include "explore_quant.h"
#include "sass_kernel.h"
#include "par.h"

#define EX_EMU_SEQ 2048

/* ---- The family's plan, from the space ---- */

/* The plan of the family that explores the problem (gen_explore_plan) and
** the views of it that explore_int.h's ex_family gives the printing. */
struct ex_plan {
  gen_explore g;
  ex_family fam;
  ex_axis axes[EX_NAXES];
  const ex_counter *counters[EX_NCOUNTERS];
  char model[96];
};
_Static_assert(GEN_EXPLORE_AXES <= EX_NAXES && GEN_EXPLORE_COUNTERS <= EX_NCOUNTERS &&
                   GEN_EXPLORE_POINTS <= sizeof ((ex_axis *)0)->label / sizeof(char *),
               "explore_int.h's limits hold the space's plans");

/* The counter of FA_EMU_COUNTERS field `name`; NULL when none. */
static const ex_counter *counter_named(const char *name) {
  for (int i = 0; i < TRIAL_NCOUNTERS; i++)
    if (!strcmp(trial_counters[i].name, name)) return &trial_counters[i];
  return NULL;
}

static void view_axis(const gen_explore_axis *g, ex_axis *d) {
  *d = (ex_axis){.name = g->name, .title = g->title, .n = g->n, .why = g->why,
                 .key = {g->key[0], g->key[1]}, .key_label = g->key_label[0] ? g->key_label : NULL};
  for (int i = 0; i < g->n; i++) d->label[i] = g->label[i], d->config[i] = g->config[i];
}

/* x->fam: the plan of the family that explores x's problem on its target;
** an exit status when there is none, having said why. */
static int plan_family(explore *x) {
  struct ex_plan *p = x->plan = calloc(1, sizeof *x->plan);
  if (!p) return cli_say(1, "out of memory");
  const int rc = gen_explore_plan(x->g, &x->o->problem, x->t, &p->g);
  if (rc != 0) return cli_say(rc == FA_EINVAL ? EXIT_BAD_INPUT : 1, gen_errmsg(x->g));
  const gen_explore *e = &p->g;
  for (int c = 0; c < e->ncounters; c++)
    if (!(p->counters[c] = counter_named(e->counter[c]))) {
      fprintf(stderr, "fatune: the %s family explores counter '%s', which the emulator lacks\n",
              e->family, e->counter[c]);
      return 1;
    }
  for (int a = 0; a < e->naxes; a++) view_axis(&e->axis[a], &p->axes[a]);
  /* The model's path in the source tree, for a mismatch's flag (a family
  ** without a model has no mismatch). */
  if (e->model[0])
    snprintf(p->model, sizeof p->model, "templates/%s", e->model);
  else
    snprintf(p->model, sizeof p->model, "no cost model");
  p->fam = (ex_family){e->family, e->config, p->model, e->kernel, e->naxes, p->axes,
                       e->ncounters, p->counters, e->paper};
  x->fam = &p->fam;
  return 0;
}

/* ---- The variants ---- */

/* Render `config` around the defaults; the index of its variant (an equal
** one rendered before is shared), -1 when it does not fit the target (why
** says so), -2 on any other error. */
static int add_variant(explore *x, const char *axis_config, char *why, size_t n) {
  gen_kernel k;
  char config[256];
  snprintf(config, sizeof config, "%s,%s", x->fam->config, axis_config);
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

/* The timing model's TFLOP/s of every variant NVRTC compiled (the
** emulator's run; on a GPU the GPU measures), for the problem asked on
** --gpu's GPU or the arch's; without nvdisasm none, said once. */
static void model_all(explore *x) {
  char nvdisasm[4096];
  const estimate_gpu *gpu = x->o->gpu ? estimate_gpu_find(x->o->gpu) : estimate_gpu_for_arch(x->t->arch);
  for (size_t i = 0; i < x->n; i++) x->v[i].model_tflops = NAN;
  if (x->gpu || !gpu) return;
  if (sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0) {
    fprintf(stderr, "fatune: explore: no nvdisasm: no timing model's TFLOP/s\n");
    return;
  }
  x->model_gpu = gpu->name;
  for (size_t i = 0; i < x->n; i++) {
    sass_figures f;
    if (!x->v[i].t.nvrtc.result.ok) continue;
    sass_kernel_figures(nvdisasm, &x->v[i].t.k, &x->v[i].t.nvrtc.result, gpu, &x->o->problem, &f);
    if (f.modelled) x->v[i].model_tflops = f.model_tflops;
  }
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
  free(x->plan);
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
  char dims[24];
  fa_dims_text(p->dim, p->dim_v, dims, sizeof dims);
  fprintf(stderr, "fatune: %s dim %s%s%s, the %s family, axis %s, target %s; inputs seed %llu\n",
          fa_dtype_name(p->dtype), dims, p->causal ? " causal" : "",
          p->op == FA_OP_BWD ? ", the backward pass" : "", x->fam->name, x->o->axis, x->t->arch,
          x->seed);
}

int explore_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  if (!strcmp(o->axis, "quant")) return explore_quant(g, o, t);
  explore *x = calloc(1, sizeof *x);
  if (!x) return cli_say(1, "out of memory");
  x->o = o, x->t = t, x->g = g;
  x->threads = o->jobs > 0 ? o->jobs : par_cores();
  x->seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  x->emu_seq = cli_given(o, "--emu-seq") ? o->emu_seq : EX_EMU_SEQ;
  const double t0 = fa_now_s();
  trial_env_init(&x->env);
  char note[256], err[512];
  int rc = plan_family(x), any = 0;
  if (rc != 0) goto done;
  rc = 1;   /* a failure, until the run ends */
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
  model_all(x);
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
