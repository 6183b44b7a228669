/*
** tune.c
** The main job: every variant of the space for the problem and the target,
** compiled, run in worker processes, validated, and (on a GPU) timed.
**
** On the GPU (cuda backend) the requested problem runs as asked. NVRTC
** compiles on every core while one worker process measures one kernel at
** a time: validation against the naive-attention oracle (itself checked in
** float64 on sampled rows), then the timing. The parent never touches the
** device, so a kernel that kills its context costs only its worker.
**
** On the emulator the problem is cut down to --emu-seq queries and keys,
** one batch and at most two heads; every variant is validated there under
** two schedules by a worker per core, and its counters are exact for that
** problem. NVRTC compiles every variant for the target as well, so the
** table carries ptxas's registers and spills. The banner says all this:
** emulator figures are never GPU performance.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "fa_escape.h"
#include "fa_util.h"
#include "par.h"
#include "tune.h"
#include "tune_types.h"

static void progress(size_t done, size_t total, void *ud) {
  fprintf(stderr, "\r%s %zu/%zu", (const char *)ud, done, total);
  if (done == total) fputc('\n', stderr);
}

static par_progress_fn progress_if_tty(void) { return isatty(2) ? progress : NULL; }

/* ---- Setting up ---- */

static int render_all(gen_state *g, tune *s) {
  gen_variant *v;
  if (gen_list(g, &s->o->problem, s->t, s->o->space, &v, &s->n) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  if (s->n == 0) {
    cmd_no_variants(s->o, s->t);
    gen_variants_free(v, 0);
    return -1;
  }
  s->e = calloc(s->n, sizeof *s->e);
  int rc = s->e ? 0 : -1;
  for (size_t i = 0; rc == 0 && i < s->n; i++) {
    if (gen_render_config(g, v[i].config, NULL, s->t, &s->e[i].k) != 0) {
      fprintf(stderr, "fatune: rendering %s: %s\n", v[i].name, gen_errmsg(g));
      rc = -1;
    }
    s->e[i].nvrtc.source = s->e[i].k.source;
    s->e[i].nvrtc.entry = s->e[i].k.entry;
  }
  gen_variants_free(v, s->n);
  if (rc == 0 && s->gpu && trial_oracle_render(&s->env, g, &s->run) != 0) rc = -1;
  return rc;
}

/* ---- The database ---- */

static db_problem db_key(const tune *s) {
  db_problem p = {.dtype = fa_dtype_name(s->run.dtype), .dim = s->run.dim, .seq_q = s->run.seq_q,
                  .seq_k = s->run.seq_k, .batch = s->run.batch, .heads = s->run.heads,
                  .causal = s->run.causal};
  return p;
}

/* The device row, every variant's row, and which are recorded already. */
static int db_prepare(tune *s) {
  char err[512];
  s->env.db = s->db, s->env.trials = s->e, s->env.n = s->n, s->env.stride = sizeof *s->e;
  if (trial_register(&s->env, err, sizeof err) != 0) goto fail;
  const db_problem key = db_key(s);
  for (size_t i = 0; i < s->n && !s->o->retune; i++) {
    int done = 0;
    if (db_trial_done(s->db, s->e[i].variant_id, s->env.device_id, &key, &done, err,
                      sizeof err) != 0)
      goto fail;
    if (done) s->e[i].st = TRIAL_RECORDED;
  }
  return 0;
fail:
  fprintf(stderr, "fatune: %s: %s\n", db_path(s->db), err);
  return -1;
}

/* The best the database holds for the problem run, this run's or earlier. */
static void say_best(tune *s) {
  const cudrv_device_info *d = backend_cuda_device(s->be);
  const db_problem key = db_key(s);
  db_best_row row;
  int found = 0, exact = 0;
  char err[512];
  FILE *f = s->o->json ? stderr : stdout;
  if (db_best(s->db, d ? d->uuid : "emu", &key, &row, &found, &exact, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return;
  }
  if (!found || !exact) return;
  char variant[sizeof row.variant];   /* the file's text, as a terminal may show it */
  fa_esc_term_buf(variant, sizeof variant, row.variant);
  if (isfinite(row.median_us))
    fprintf(f, "best recorded in %s: %s, median %.1f us, %.1f TFLOP/s\n", db_path(s->db),
            variant, row.median_us, row.tflops);
  else
    fprintf(f, "best recorded in %s: %s (%lld global-memory bytes at the emulator's size)\n",
            db_path(s->db), variant, row.global_bytes);
}

/* ---- The emulator's flow: compile everything, then validate on all cores ---- */

static int emu_flow(tune *s) {
  char err[512];
  const gen_kernel **ks = malloc(s->n * sizeof *ks);
  fa_build *b = calloc(s->n, sizeof *b);
  compile_job *jobs = malloc(s->n * sizeof *jobs);
  int rc = -1;
  if (!ks || !b || !jobs) {
    fprintf(stderr, "fatune: out of memory\n");
    goto done;
  }
  /* Only what the database does not hold yet. */
  size_t m = 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->e[i].st != TRIAL_RECORDED) ks[m] = &s->e[i].k, jobs[m] = s->e[i].nvrtc, m++;
  double t0 = fa_now_s();
  if (compile_pool_run(jobs, m, s->t->arch, s->threads, progress_if_tty(),
                       (void *)"compiling with NVRTC") != 0) {
    fprintf(stderr, "fatune: cannot start the NVRTC compile threads\n");
    goto done;
  }
  double t1 = fa_now_s();
  if (m && isatty(2)) fprintf(stderr, "compiling with the host compiler...\n");
  if (backend_compile(s->be, ks, m, s->threads, b, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    goto done;
  }
  s->nvrtc_s = t1 - t0, s->compile_s = fa_now_s() - t1;
  for (size_t i = 0, j = 0; i < s->n; i++) {
    trial *e = &s->e[i];
    if (e->st == TRIAL_RECORDED) continue;
    e->nvrtc = jobs[j];
    trial_take_build(e, &b[j++], 1);
  }
  if (trial_pool_open(&s->env, s->threads) != 0) goto done;
  t0 = fa_now_s();
  rc = trial_measure_all(&s->env, s->threads, 1, progress_if_tty(), (void *)"validating");
  s->check_s = fa_now_s() - t0;
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
  else if (trial_stopped(&s->env)) rc = -1;   /* trial_record said why */
done:
  trial_pool_close(&s->env);
  free(ks), free(b), free(jobs);
  return rc;
}

/* ---- The GPU's flow: compile on the CPU while one worker measures ---- */

static void compile_one(size_t i, void *ud) {
  tune *s = ud;
  /* Stopped: the parent waits for no compile any more. */
  if (s->e[i].st == TRIAL_RECORDED || trial_stopped(&s->env)) return;
  const gen_kernel *k = &s->e[i].k;
  fa_build b;
  char err[256];
  if (backend_compile(s->be, &k, 1, 1, &b, err, sizeof err) != 0) {
    memset(&b, 0, sizeof b);
    b.log = strdup(err);
  }
  pthread_mutex_lock(&s->pmu);
  trial_take_build(&s->e[i], &b, 0);
  pthread_mutex_unlock(&s->pmu);
}

static void compile_all(tune *s) {
  if (par_for(s->n, s->threads, compile_one, s, NULL, NULL) != 0)
    for (size_t i = 0; i < s->n; i++) compile_one(i, s);
}

static void gpu_progress(tune *s) {
  if (!isatty(2)) return;
  const double spent = fa_now_s() - s->t_start;
  const double left = s->done ? spent / (double)s->done * (double)(s->n - s->done) : 0;
  fprintf(stderr, "\r\033[K%zu/%zu", s->done, s->n);
  if (s->best)
    fprintf(stderr, "  best %s %.1f us (%.1f TFLOP/s)", s->best->k.name,
            s->best->out.t.median_us, attn_flops(&s->run) / s->best->out.t.median_us / 1e6);
  fprintf(stderr, "  about %.0f s left", left);
  if (s->done == s->n) fputc('\n', stderr);
}

static int gpu_flow(tune *s) {
  if (trial_oracle_compile(&s->env) != 0) return -1;
  s->t_start = fa_now_s();
  /* Every compile ends before a worker is forked: a worker sees only the
  ** programs its parent had built when it was forked, and a fork while
  ** NVRTC runs on another thread could leave NVRTC's locks held in it. */
  compile_all(s);
  if (trial_pool_open(&s->env, 1) != 0) return -1;
  for (size_t i = 0; i < s->n; i++) {
    trial_measure(&s->env, i);
    const trial *e = &s->e[i];
    if (trial_record(&s->env, e) != 0) break;   /* it said why; measure no more */
    if (e->st == TRIAL_OK && e->out.timed &&
        (!s->best || e->out.t.median_us < s->best->out.t.median_us))
      s->best = e;
    s->done++;
    gpu_progress(s);
  }
  s->check_s = fa_now_s() - s->t_start;
  trial_pool_close(&s->env);
  return trial_stopped(&s->env) ? -1 : 0;
}

/* ---- The job ---- */

static void tune_free(tune *s) {
  for (size_t i = 0; s->e && i < s->n; i++) trial_free(&s->e[i], s->be);
  free(s->e);
  trial_env_free(&s->env);
  backend_close(s->be);
  if (s->db) db_close(s->db);
  pthread_mutex_destroy(&s->pmu);
}

static void banner(const tune *s, const char *note) {
  const fa_problem *p = &s->o->problem;
  const cudrv_device_info *d = backend_cuda_device(s->be);
  if (d)
    fprintf(stderr, "fatune: backend cuda: %s (sm_%d%d, %d SMs, %d MB L2); timing %d ms per "
                    "variant, L2 flushed between launches\n",
            d->name, d->cc_major, d->cc_minor, d->sm_count, d->l2_bytes >> 20, s->o->trial_ms);
  else
    fprintf(stderr, "fatune: backend emu, the CPU emulator%s%s: its figures are exact counts "
                    "and CPU times of a simulation, not GPU performance\n",
            note[0] ? ": " : "", note);
  fprintf(stderr, "fatune: problem %s dim %d seq_q %d seq_k %d batch %d heads %d%s",
          fa_dtype_name(p->dtype), p->dim, p->seq_q, p->seq_k, p->batch, p->heads,
          p->causal ? " causal" : "");
  if (!s->gpu)
    fprintf(stderr, "; the emulator runs seq_q %d seq_k %d batch %d heads %d", s->run.seq_q,
            s->run.seq_k, s->run.batch, s->run.heads);
  fprintf(stderr, "; inputs seed %llu\n", s->seed);
}

int tune_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  tune s;
  memset(&s, 0, sizeof s);
  s.o = o, s.t = t;
  s.threads = o->jobs > 0 ? o->jobs : par_cores();
  s.seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  trial_env_init(&s.env);
  pthread_mutex_init(&s.pmu, NULL);
  char note[256], err[512];
  if (backend_open(o->backend, &s.be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    tune_free(&s);
    return 1;
  }
  s.gpu = backend_cuda_device(s.be) != NULL;
  s.env.be = s.be, s.env.gpu = s.gpu, s.env.run = &s.run, s.env.seed = s.seed;
  s.env.timeout_s = o->timeout_s, s.env.trial_ms = o->trial_ms;
  const fa_problem *p = &o->problem;
  s.run = *p;
  if (!s.gpu) {
    s.run.seq_q = p->seq_q < o->emu_seq ? p->seq_q : o->emu_seq;
    s.run.seq_k = p->seq_k < o->emu_seq ? p->seq_k : o->emu_seq;
    s.run.batch = 1;
    s.run.heads = p->heads < 2 ? p->heads : 2;
  }
  banner(&s, note);
  int rc = 1;
  if (db_open(o->db, DB_CREATE, &s.db, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
  } else if (render_all(g, &s) != 0) {
    rc = 2;
  } else if (db_prepare(&s) == 0 && (s.gpu ? gpu_flow(&s) : emu_flow(&s)) == 0) {
    tune_report(&s);
    int any_ok = 0;
    for (size_t i = 0; i < s.n; i++) any_ok |= s.e[i].st == TRIAL_OK || s.e[i].st == TRIAL_RECORDED;
    rc = any_ok ? 0 : 1;
    say_best(&s);
  }
  tune_free(&s);
  return rc;
}
