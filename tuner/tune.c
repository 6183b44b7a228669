/*
** tune.c
** The main job. On the emulator the problem is cut down to --emu-seq
** queries and keys, one batch and at most two heads, and every variant is
** validated there under two schedules; its counters are exact for that
** problem. NVRTC compiles every variant for the target as well, so the
** table carries ptxas's registers and spills. The banner says all this:
** emulator figures are never GPU performance.
*/
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compile_pool.h"
#include "json.h"
#include "par.h"
#include "tune.h"
#include "validate.h"
#include "worker.h"

typedef enum status { ST_OK, ST_INVALID, ST_COMPILE_ERROR, ST_CRASHED, ST_TIMEOUT } status;
static const char *const status_names[] = {"ok", "invalid", "compile_error", "crashed", "timeout"};
#define NSTATUS 5

typedef struct entry {
  gen_kernel k;
  fa_build build;
  compile_job nvrtc;   /* the target's compile: registers, spills */
  val_result r;
  status st;
  const char *why;     /* status detail, points into r, build or nvrtc */
} entry;

typedef struct tune {
  const cli_opts *o;
  const gen_target *t;
  fa_backend *be;
  fa_problem run;      /* the problem actually run */
  entry *e;
  size_t n;
  val_case vc;
  attn_inputs in;
  int threads;
  double compile_s, nvrtc_s, check_s;
  /* Worker processes, one per validation thread; free ones on a stack. */
  wk_worker **workers;
  int nfree;
  pthread_mutex_t mu;
} tune;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress(size_t done, size_t total, void *ud) {
  fprintf(stderr, "\r%s %zu/%zu", (const char *)ud, done, total);
  if (done == total) fputc('\n', stderr);
}

static par_progress_fn progress_if_tty(void) { return isatty(2) ? progress : NULL; }

/* ---- Steps ---- */

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
  return rc;
}

static int compile_all(tune *s) {
  char err[512];
  const gen_kernel **ks = malloc(s->n * sizeof *ks);
  fa_build *b = calloc(s->n, sizeof *b);
  compile_job *jobs = malloc(s->n * sizeof *jobs);
  int rc = -1;
  if (!ks || !b || !jobs) {
    fprintf(stderr, "fatune: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < s->n; i++) ks[i] = &s->e[i].k, jobs[i] = s->e[i].nvrtc;
  double t0 = now_s();
  if (compile_pool_run(jobs, s->n, s->t->arch, s->threads, progress_if_tty(),
                       (void *)"compiling with NVRTC") != 0) {
    fprintf(stderr, "fatune: cannot start the NVRTC compile threads\n");
    goto done;
  }
  double t1 = now_s();
  if (isatty(2)) fprintf(stderr, "compiling for the %s backend...\n", backend_name(s->be));
  if (backend_compile(s->be, ks, s->n, s->threads, b, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    goto done;
  }
  s->nvrtc_s = t1 - t0, s->compile_s = now_s() - t1;
  for (size_t i = 0; i < s->n; i++) {
    entry *e = &s->e[i];
    e->build = b[i], e->nvrtc = jobs[i];
    if (!e->build.prog) e->st = ST_COMPILE_ERROR, e->why = e->build.log;
    else if (!e->nvrtc.result.ok) e->st = ST_COMPILE_ERROR, e->why = e->nvrtc.result.error;
  }
  rc = 0;
done:
  free(ks), free(b), free(jobs);
  return rc;
}

/* In a worker process: validate variant i; the verdict travels back whole. */
static void check_in_worker(size_t i, void *ud, void *out) {
  tune *s = ud;
  entry *e = &s->e[i];
  val_result *r = out;
  val_opts vo = {.nschedules = 2, .schedule = {EMU_FORWARD, EMU_REVERSE}, .seed = s->vc.seed,
                 .threads = 1};
  char err[256];
  if (val_check(s->be, &s->vc, &s->in, e->build.prog, &e->k, &vo, r, err, sizeof err) != 0) {
    snprintf(r->msg, sizeof r->msg, "cannot validate: %s", err);
    r->status = VAL_CRASHED;
  }
}

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

static void check_one(size_t i, void *ud) {
  tune *s = ud;
  entry *e = &s->e[i];
  if (e->st != ST_OK) return;
  wk_worker *w = take_worker(s);
  char why[256];
  wk_outcome out = wk_run(w, i, s->o->timeout_s, &e->r, why, sizeof why);
  give_worker(s, w);
  if (out != WK_DONE) {
    e->st = out == WK_TIMEOUT ? ST_TIMEOUT : ST_CRASHED;
    snprintf(e->r.msg, sizeof e->r.msg, "%s", why);
    e->r.rel_err = e->r.max_abs_err = e->r.lse_err = NAN;
  } else if (e->r.status != VAL_OK) {
    e->st = e->r.status == VAL_INVALID ? ST_INVALID : ST_CRASHED;
  }
  if (e->st != ST_OK) e->why = e->r.msg;
}

static void workers_close(tune *s) {
  for (int i = 0; i < s->nfree; i++) wk_close(s->workers[i]);
  free(s->workers);
  s->workers = NULL, s->nfree = 0;
}

static int workers_open(tune *s) {
  char err[256];
  s->workers = calloc((size_t)s->threads, sizeof *s->workers);
  if (!s->workers) return -1;
  for (int i = 0; i < s->threads; i++) {
    if (wk_open(&s->workers[i], check_in_worker, s, sizeof(val_result), err, sizeof err) != 0) {
      fprintf(stderr, "fatune: %s\n", err);
      return -1;
    }
    s->nfree++;
  }
  return 0;
}

static int check_all(tune *s) {
  char err[512];
  if (val_case_make(&s->vc, &s->run, s->vc.seed, err, sizeof err) != 0 ||
      attn_inputs_upload(s->be, &s->run, s->vc.q, s->vc.k, s->vc.v, &s->in, err, sizeof err)) {
    fprintf(stderr, "fatune: %s\n", err);
    return -1;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0 || workers_open(s) != 0) {
    fprintf(stderr, "fatune: cannot set up the worker processes\n");
    workers_close(s);
    return -1;
  }
  double t0 = now_s();
  int rc = par_for(s->n, s->threads, check_one, s, progress_if_tty(), (void *)"validating");
  s->check_s = now_s() - t0;
  workers_close(s);
  pthread_mutex_destroy(&s->mu);
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
  return rc;
}

/* ---- Output ---- */

static unsigned long long traffic(const entry *e) {
  return e->r.counters.gmem_read + e->r.counters.gmem_written;
}

/* ok first, by global-memory traffic; then the rest in listing order. */
static int by_rank(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  if (x->st != y->st) return (x->st != ST_OK) - (y->st != ST_OK);
  if (x->st != ST_OK) return (x > y) - (x < y);
  return (traffic(x) > traffic(y)) - (traffic(x) < traffic(y));
}

static void print_table(entry **rank, size_t n) {
  printf("%-58s %-13s %9s %9s %10s %10s %10s %8s %6s %5s %6s %8s\n", "variant", "status",
         "rel_err", "max_err", "gmem_rd_KB", "gmem_wr_KB", "smem_KB", "exp", "bars", "regs",
         "spill", "emu_ms");
  for (size_t i = 0; i < n; i++) {
    const entry *e = rank[i];
    const nvrtc_result *x = &e->nvrtc.result;
    const fa_counters *c = &e->r.counters;
    printf("%-58s %-13s ", e->k.name, status_names[e->st]);
    if (e->st == ST_OK || e->st == ST_INVALID)
      printf("%9.2e %9.2e %10.1f %10.1f %10.1f %8llu %6llu", e->r.rel_err, e->r.max_abs_err,
             (double)c->gmem_read / 1024, (double)c->gmem_written / 1024,
             (double)(c->smem_read + c->smem_written) / 1024, c->exp2, c->barriers);
    else
      printf("%9s %9s %10s %10s %10s %8s %6s", "-", "-", "-", "-", "-", "-", "-");
    if (x->ok) printf(" %5d %6d", x->registers, x->spill_store_bytes + x->spill_load_bytes);
    else printf(" %5s %6s", "-", "-");
    if (e->st == ST_OK || e->st == ST_INVALID) printf(" %8.1f\n", e->r.run_ms);
    else printf(" %8s\n", "-");
  }
  for (size_t i = 0; i < n; i++)
    if (rank[i]->st != ST_OK) {
      const char *why = rank[i]->why ? rank[i]->why : "?";
      const char *nl = strchr(why, '\n');
      printf("%s: %s: %.*s\n", status_names[rank[i]->st], rank[i]->k.name,
             nl ? (int)(nl - why) : (int)strlen(why), why);
    }
}

static void print_json(const tune *s, entry **rank) {
  printf("[");
  for (size_t i = 0; i < s->n; i++) {
    const entry *e = rank[i];
    const fa_counters *c = &e->r.counters;
    const nvrtc_result *x = &e->nvrtc.result;
    const int ran = e->st == ST_OK || e->st == ST_INVALID;
    printf("%s\n  {\"name\": ", i ? "," : "");
    json_string(stdout, e->k.name);
    printf(", \"hash\": \"%s\"", e->k.hash);
    json_config(stdout, e->k.config);
    printf(", \"status\": \"%s\", \"backend\": \"%s\", \"seed\": %llu, \"max_abs_err\": ",
           status_names[e->st], backend_name(s->be), s->vc.seed);
    json_number(stdout, ran ? e->r.max_abs_err : NAN);
    printf(", \"rel_err\": ");
    json_number(stdout, ran ? e->r.rel_err : NAN);
    printf(", \"lse_err\": ");
    json_number(stdout, ran ? e->r.lse_err : NAN);
    printf(", \"global_bytes_read\": %llu, \"global_bytes_written\": %llu, \"smem_bytes\": %llu, "
           "\"smem_bytes_read\": %llu, \"smem_bytes_written\": %llu, \"exp_count\": %llu, "
           "\"log_count\": %llu, \"mma_count\": %llu, \"ldmatrix_count\": %llu, "
           "\"cp_async_count\": %llu, \"shuffles\": %llu, \"barriers\": %llu, "
           "\"warp_syncs\": %llu, \"emu_ms\": ",
           c->gmem_read, c->gmem_written, c->smem_read + c->smem_written, c->smem_read,
           c->smem_written, c->exp2, c->log2, c->mma, c->ldmatrix, c->cp_async, c->shuffles,
           c->barriers, c->warp_syncs);
    json_number(stdout, ran ? e->r.run_ms : NAN);
    printf(", \"compile_ms\": %.1f, \"registers\": %d, \"spill_bytes\": %d, \"smem_per_cta\": %d, "
           "\"threads\": %d, \"message\": ", e->build.compile_ms, x->ok ? x->registers : -1,
           x->ok ? x->spill_store_bytes + x->spill_load_bytes : -1, e->k.smem_bytes,
           e->k.threads);
    if (e->why) json_string(stdout, e->why);
    else printf("null");
    printf("}");
  }
  printf("\n]\n");
}

/* The run's summary and what the emulator could not do in time. */
static void print_summary(FILE *f, const tune *s, entry **rank) {
  size_t count[NSTATUS] = {0};
  double run_ms = 0;
  for (size_t i = 0; i < s->n; i++) {
    count[s->e[i].st]++;
    run_ms += s->e[i].r.run_ms;
  }
  fprintf(f, "%zu variants: %zu ok, %zu invalid, %zu compile_error, %zu crashed, %zu timeout; "
             "compile %.1f s (host compiler) + %.1f s (NVRTC %s), validation %.1f s "
             "(2 schedules each) on %d threads\n",
          s->n, count[ST_OK], count[ST_INVALID], count[ST_COMPILE_ERROR], count[ST_CRASHED],
          count[ST_TIMEOUT],
          s->compile_s, s->nvrtc_s, s->t->arch, s->check_s, s->threads);
  if (count[ST_OK]) {
    const entry *b = rank[0];
    fprintf(f, "least global-memory traffic: %s (%.1f KB read, %.1f KB written): %s\n",
            b->k.name, (double)b->r.counters.gmem_read / 1024,
            (double)b->r.counters.gmem_written / 1024, b->k.config);
  }
  const fa_problem *p = &s->o->problem, *r = &s->run;
  const double scale = (double)p->batch * p->heads * p->seq_q * p->seq_k /
                       ((double)r->batch * r->heads * r->seq_q * r->seq_k);
  if (scale > 1.0)
    fprintf(f, "the requested problem (seq_q %d, seq_k %d, batch %d, heads %d) was not run: "
               "one launch of every variant would take about %.0f min on the emulator here\n",
            p->seq_q, p->seq_k, p->batch, p->heads, run_ms * scale / 60e3 / s->threads);
}

static void tune_free(tune *s) {
  for (size_t i = 0; s->e && i < s->n; i++) {
    backend_build_free(s->be, &s->e[i].build);
    nvrtc_result_free(&s->e[i].nvrtc.result);
    gen_kernel_free(&s->e[i].k);
  }
  free(s->e);
  attn_inputs_free(s->be, &s->in);
  val_case_free(&s->vc);
  backend_close(s->be);
}

int tune_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  tune s;
  memset(&s, 0, sizeof s);
  s.o = o, s.t = t;
  s.threads = o->jobs > 0 ? o->jobs : par_cores();
  char note[256], err[512];
  if (backend_open(o->backend, &s.be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return 1;
  }
  const fa_problem *p = &o->problem;
  s.run = *p;
  s.run.seq_q = p->seq_q < o->emu_seq ? p->seq_q : o->emu_seq;
  s.run.seq_k = p->seq_k < o->emu_seq ? p->seq_k : o->emu_seq;
  s.run.batch = 1;
  s.run.heads = p->heads < 2 ? p->heads : 2;
  s.vc.seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  fprintf(stderr, "fatune: backend emu, the CPU emulator%s%s: its figures are exact counts "
                  "and CPU times of a simulation, not GPU performance\n",
          note[0] ? ": " : "", note);
  fprintf(stderr, "fatune: problem %s dim %d seq_q %d seq_k %d batch %d heads %d%s; the "
                  "emulator runs seq_q %d seq_k %d batch %d heads %d, inputs seed %llu\n",
          fa_dtype_name(p->dtype), p->dim, p->seq_q, p->seq_k, p->batch, p->heads,
          p->causal ? " causal" : "", s.run.seq_q, s.run.seq_k, s.run.batch, s.run.heads,
          s.vc.seed);
  int rc = 1;
  entry **rank = NULL;
  if (render_all(g, &s) != 0) {
    rc = 2;
    goto done;
  }
  if (compile_all(&s) != 0 || check_all(&s) != 0) goto done;
  rank = malloc(s.n * sizeof *rank);
  if (!rank) goto done;
  for (size_t i = 0; i < s.n; i++) rank[i] = &s.e[i];
  qsort(rank, s.n, sizeof *rank, by_rank);
  if (o->json) print_json(&s, rank);
  else print_table(rank, s.n);
  print_summary(o->json ? stderr : stdout, &s, rank);
  rc = rank[0]->st == ST_OK ? 0 : 1;
done:
  free(rank);
  tune_free(&s);
  return rc;
}
