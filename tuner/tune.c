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

#include "fa_util.h"
#include "par.h"
#include "tune.h"
#include "tune_types.h"

#define ORACLE_SAMPLE_ROWS 64

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
    fprintf(stderr, "fatune: no variant of the %s space fits %s (%d bytes of shared memory) "
                    "for dim %d %s\n", s->o->space, s->t->arch, s->t->smem_bytes,
            s->o->problem.dim, fa_dtype_name(s->o->problem.dtype));
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
  if (rc == 0 && s->gpu && gen_render_oracle(g, &s->run, &s->oracle_k) != 0) {
    fprintf(stderr, "fatune: rendering the oracle: %s\n", gen_errmsg(g));
    rc = -1;
  }
  return rc;
}

/* ---- The database ---- */

void tune_counters_json(const fa_counters *c, char *buf, size_t n) {
  snprintf(buf, n, "{\"global_bytes_read\": %llu, \"global_bytes_written\": %llu, "
           "\"smem_bytes_read\": %llu, \"smem_bytes_written\": %llu, \"exp_count\": %llu, "
           "\"log_count\": %llu, \"mma_count\": %llu, \"ldmatrix_count\": %llu, "
           "\"cp_async_count\": %llu, \"shuffles\": %llu, \"barriers\": %llu, "
           "\"warp_syncs\": %llu, \"rescale_count\": %llu}",
           c->gmem_read, c->gmem_written, c->smem_read, c->smem_written, c->exp2, c->log2, c->mma,
           c->ldmatrix, c->cp_async, c->shuffles, c->barriers, c->warp_syncs, c->rescale);
}

db_device tune_device(const fa_backend *be, char *name, size_t n) {
  const cudrv_device_info *d = backend_cuda_device(be);
  if (!d) snprintf(name, n, "CPU emulator");
  db_device dev = {.name = d ? d->name : name, .uuid = d ? d->uuid : "emu",
                   .backend = backend_name(be), .cc_major = d ? d->cc_major : 0,
                   .cc_minor = d ? d->cc_minor : 0, .sm_count = d ? d->sm_count : 0,
                   .smem_per_block_optin = d ? d->smem_per_block_optin : 0,
                   .l2_bytes = d ? d->l2_bytes : 0};
  return dev;
}

static db_problem db_key(const tune *s) {
  db_problem p = {.dtype = fa_dtype_name(s->run.dtype), .dim = s->run.dim, .seq_q = s->run.seq_q,
                  .seq_k = s->run.seq_k, .batch = s->run.batch, .heads = s->run.heads,
                  .causal = s->run.causal};
  return p;
}

/* The device row, every variant's row, and which are recorded already. */
static int db_prepare(tune *s) {
  char err[512], name[300];
  db_device dev = tune_device(s->be, name, sizeof name);
  if (db_device_id(s->db, &dev, &s->device_id, err, sizeof err) != 0) goto fail;
  const db_problem key = db_key(s);
  for (size_t i = 0; i < s->n; i++) {
    entry *e = &s->e[i];
    char config[4096];
    gen_config_json(&e->k.cfg, config, sizeof config);
    db_variant v = {.family = e->k.cfg.family, .template_version = e->k.template_version,
                    .name = e->k.name, .hash = e->k.hash, .config = config,
                    .source_hash = e->k.source_hash};
    int done = 0;
    if (db_variant_id(s->db, &v, &e->variant_id, err, sizeof err) != 0 ||
        (!s->o->retune &&
         db_trial_done(s->db, e->variant_id, s->device_id, &key, &done, err, sizeof err) != 0))
      goto fail;
    if (done) e->st = ST_RECORDED, e->compiled = 1;
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
  if (db_best(s->db, d ? d->uuid : "emu", &key, &row, &found, &exact, err, sizeof err) != 0)
    fprintf(stderr, "fatune: %s\n", err);
  else if (found && exact && isfinite(row.median_us))
    fprintf(f, "best recorded in %s: %s, median %.1f us, %.1f TFLOP/s\n", db_path(s->db),
            row.variant, row.median_us, row.tflops);
  else if (found && exact)
    fprintf(f, "best recorded in %s: %s (%lld global-memory bytes at the emulator's size)\n",
            db_path(s->db), row.variant, row.global_bytes);
}

/* One trial, in its own transaction: a run killed later loses nothing of it. */
static void record(tune *s, const entry *e) {
  if (e->st == ST_RECORDED) return;
  const outcome *o = &e->out;
  const int ran = e->st == ST_OK || e->st == ST_INVALID, t = o->timed;
  char counters[600], err[512];
  tune_counters_json(&o->r.counters, counters, sizeof counters);
  const double flops = attn_flops(&s->run), bytes = attn_bytes(&s->run);
  db_trial tr = {
    .variant_id = e->variant_id, .device_id = s->device_id, .problem = db_key(s),
    .status = tune_status_names[e->st], .message = e->why,
    .max_abs_err = ran ? o->r.max_abs_err : NAN, .rel_err = ran ? o->r.rel_err : NAN,
    .lse_err = ran ? o->r.lse_err : NAN, .median_us = t ? o->t.median_us : NAN,
    .min_us = t ? o->t.min_us : NAN, .p20_us = t ? o->t.p20_us : NAN,
    .p80_us = t ? o->t.p80_us : NAN, .tflops = t ? flops / o->t.median_us / 1e6 : NAN,
    .gbps = t ? bytes / o->t.median_us / 1e3 : NAN, .counters = ran && !s->gpu ? counters : NULL};
  pthread_mutex_lock(&s->mu);
  int rc = db_trial_put(s->db, &tr, err, sizeof err);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) fprintf(stderr, "fatune: recording %s: %s\n", e->k.name, err);
}

static void take_build(entry *e, fa_build *b) {
  e->build = *b;
  if (!e->build.prog) e->st = ST_COMPILE_ERROR, e->why = e->build.log;
}

/* ---- In a worker process ---- */

/* The inputs and their reference, once per worker process. */
static int ensure_case(tune *s) {
  if (s->have_case) return s->case_err[0] ? -1 : 0;
  s->have_case = 1;
  char err[256];
  int rc = s->gpu ? val_case_make_oracle(&s->vc, &s->run, s->seed, s->be, s->oracle_b.prog,
                                         &s->oracle_k, ORACLE_SAMPLE_ROWS, err, sizeof err)
                  : val_case_make(&s->vc, &s->run, s->seed, err, sizeof err);
  if (rc == 0) rc = attn_inputs_upload(s->be, &s->run, s->vc.q, s->vc.k, s->vc.v, &s->in, err,
                                       sizeof err);
  if (rc != 0) snprintf(s->case_err, sizeof s->case_err, "cannot set up validation: %s", err);
  return rc;
}

/* Validate variant i, and time it on a GPU; the outcome travels back whole.
** A device left unusable retires this process. */
static int job(size_t i, void *ud, void *out) {
  tune *s = ud;
  entry *e = &s->e[i];
  outcome *oc = out;
  oc->ctas_per_sm = -1;
  if (ensure_case(s) != 0) {
    oc->r.status = VAL_CRASHED;
    snprintf(oc->r.msg, sizeof oc->r.msg, "%s", s->case_err);
    return 1;
  }
  val_opts vo = {.nschedules = s->gpu ? 1 : 2, .schedule = {EMU_FORWARD, EMU_REVERSE},
                 .seed = s->seed, .threads = 1};
  char err[256];
  if (val_check(s->be, &s->vc, &s->in, e->build.prog, &e->k, &vo, &oc->r, err, sizeof err)) {
    snprintf(oc->r.msg, sizeof oc->r.msg, "cannot validate: %s", err);
    oc->r.status = VAL_CRASHED;
  }
  if (s->gpu && oc->r.status == VAL_OK) {
    if (attn_time(s->be, e->build.prog, &e->k, &s->run, &s->in, s->o->trial_ms, &oc->t,
                  &oc->ctas_per_sm, oc->note, sizeof oc->note) == 0)
      oc->timed = 1;
    else if (backend_poisoned(s->be))
      oc->r.status = VAL_CRASHED, snprintf(oc->r.msg, sizeof oc->r.msg, "%s", oc->note);
  }
  return backend_poisoned(s->be);
}

/* ---- Workers, from the parent ---- */

static wk_worker *take_worker(tune *s) {
  pthread_mutex_lock(&s->mu);
  wk_worker *w = s->workers[--s->nfree];
  pthread_mutex_unlock(&s->mu);
  return w;
}

static void give_worker(tune *s, wk_worker *w) {
  pthread_mutex_lock(&s->mu);
  s->workers[s->nfree++] = w;
  pthread_mutex_unlock(&s->mu);
}

static void workers_close(tune *s) {
  for (int i = 0; i < s->nfree; i++) wk_close(s->workers[i]);
  free(s->workers);
  s->workers = NULL, s->nfree = 0;
}

static int workers_open(tune *s, int n) {
  char err[256];
  s->workers = calloc((size_t)n, sizeof *s->workers);
  if (!s->workers) return -1;
  for (int i = 0; i < n; i++) {
    if (wk_open(&s->workers[i], job, s, sizeof(outcome), err, sizeof err) != 0) {
      fprintf(stderr, "fatune: %s\n", err);
      return -1;
    }
    s->nfree++;
  }
  return 0;
}

/* Variant i through a worker; its status from what came back. */
static void measure(tune *s, size_t i) {
  entry *e = &s->e[i];
  if (e->st != ST_OK) {
    record(s, e);  /* a compile error is a result too */
    return;
  }
  wk_worker *w = take_worker(s);
  char why[256];
  wk_outcome got = wk_run(w, i, s->o->timeout_s, &e->out, why, sizeof why);
  give_worker(s, w);
  val_result *r = &e->out.r;
  if (got != WK_DONE) {
    e->st = got == WK_TIMEOUT ? ST_TIMEOUT : ST_CRASHED;
    snprintf(r->msg, sizeof r->msg, "%s", why);
    r->rel_err = r->max_abs_err = r->lse_err = NAN;
  } else if (r->status != VAL_OK) {
    e->st = r->status == VAL_INVALID ? ST_INVALID : ST_CRASHED;
  }
  if (e->st != ST_OK) e->why = r->msg;
  record(s, e);
}

static void measure_one(size_t i, void *ud) { measure(ud, i); }

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
    if (s->e[i].st != ST_RECORDED) ks[m] = &s->e[i].k, jobs[m] = s->e[i].nvrtc, m++;
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
    entry *e = &s->e[i];
    if (e->st == ST_RECORDED) continue;
    e->nvrtc = jobs[j];
    take_build(e, &b[j++]);
    if (e->st == ST_OK && !e->nvrtc.result.ok)
      e->st = ST_COMPILE_ERROR, e->why = e->nvrtc.result.error;
  }
  if (workers_open(s, s->threads) != 0) goto done;
  t0 = fa_now_s();
  rc = par_for(s->n, s->threads, measure_one, s, progress_if_tty(), (void *)"validating");
  s->check_s = fa_now_s() - t0;
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
done:
  workers_close(s);
  free(ks), free(b), free(jobs);
  return rc;
}

/* ---- The GPU's flow: compile on the CPU while one worker measures ---- */

static void compile_one(size_t i, void *ud) {
  tune *s = ud;
  if (s->e[i].st == ST_RECORDED) return;
  const gen_kernel *k = &s->e[i].k;
  fa_build b;
  char err[256];
  if (backend_compile(s->be, &k, 1, 1, &b, err, sizeof err) != 0) {
    memset(&b, 0, sizeof b);
    b.log = strdup(err);
  }
  pthread_mutex_lock(&s->pmu);
  take_build(&s->e[i], &b);
  s->e[i].compiled = 1;
  pthread_cond_broadcast(&s->pcv);
  pthread_mutex_unlock(&s->pmu);
}

static void *compile_thread(void *ud) {
  tune *s = ud;
  /* One core stays with the parent, which feeds the GPU. */
  if (par_for(s->n, s->threads > 1 ? s->threads - 1 : 1, compile_one, s, NULL, NULL) != 0)
    for (size_t i = 0; i < s->n; i++) compile_one(i, s);
  return NULL;
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
  char err[512];
  const gen_kernel *ok = &s->oracle_k;
  if (backend_compile(s->be, &ok, 1, 1, &s->oracle_b, err, sizeof err) != 0 || !s->oracle_b.prog) {
    fprintf(stderr, "fatune: the oracle does not compile: %s\n",
            s->oracle_b.log ? s->oracle_b.log : err);
    return -1;
  }
  if (workers_open(s, 1) != 0) return -1;
  pthread_t tid;
  s->t_start = fa_now_s();
  if (pthread_create(&tid, NULL, compile_thread, s) != 0) {
    fprintf(stderr, "fatune: cannot start the compile thread\n");
    workers_close(s);
    return -1;
  }
  for (size_t i = 0; i < s->n; i++) {
    pthread_mutex_lock(&s->pmu);
    while (!s->e[i].compiled) pthread_cond_wait(&s->pcv, &s->pmu);
    pthread_mutex_unlock(&s->pmu);
    measure(s, i);
    const entry *e = &s->e[i];
    if (e->st == ST_OK && e->out.timed &&
        (!s->best || e->out.t.median_us < s->best->out.t.median_us))
      s->best = e;
    s->done++;
    gpu_progress(s);
  }
  pthread_join(tid, NULL);
  s->check_s = fa_now_s() - s->t_start;
  workers_close(s);
  return 0;
}

/* ---- The job ---- */

static void tune_free(tune *s) {
  for (size_t i = 0; s->e && i < s->n; i++) {
    backend_build_free(s->be, &s->e[i].build);
    nvrtc_result_free(&s->e[i].nvrtc.result);
    gen_kernel_free(&s->e[i].k);
  }
  free(s->e);
  if (s->be) backend_build_free(s->be, &s->oracle_b);
  gen_kernel_free(&s->oracle_k);
  backend_close(s->be);
  if (s->db) db_close(s->db);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->pmu);
  pthread_cond_destroy(&s->pcv);
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
  pthread_mutex_init(&s.mu, NULL);
  pthread_mutex_init(&s.pmu, NULL);
  pthread_cond_init(&s.pcv, NULL);
  char note[256], err[512];
  if (backend_open(o->backend, &s.be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    tune_free(&s);
    return 1;
  }
  s.gpu = backend_cuda_device(s.be) != NULL;
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
    for (size_t i = 0; i < s.n; i++) any_ok |= s.e[i].st == ST_OK || s.e[i].st == ST_RECORDED;
    rc = any_ok ? 0 : 1;
    say_best(&s);
  }
  tune_free(&s);
  return rc;
}
