/*
** trial.c
** One variant measured and recorded: the database rows, the worker pool,
** and the job a worker process runs (see trial.h).
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile_child.h"
#include "suite.h"
#include "fa_mod.h"
#include "trial.h"

#define ORACLE_SAMPLE_ROWS 64

const char *const trial_status_names[TRIAL_NSTATUS] = {
  "ok", "invalid", "compile_error", "crashed", "timeout", "recorded", "env_error"};

/* What a job in a worker is doing (wk_phase), for one that dies or hangs:
** in the setting up of validation it is the environment's failure. */
enum { PHASE_KERNEL, PHASE_SETUP };

int trial_ran(trial_status st) { return st == TRIAL_OK || st == TRIAL_INVALID; }

#define TMP_PROBE_BYTES (1 << 20)

/* Whether the temporary folder the compilers write in ($TMPDIR, else /tmp)
** takes a file of TMP_PROBE_BYTES now; why says what refused it. */
static int tmp_takes_files(char *why, size_t whylen) {
  const char *dir = getenv("TMPDIR");
  char path[512];
  if (!dir || !*dir) dir = "/tmp";
  if (snprintf(path, sizeof path, "%s/fatune-probe-XXXXXX", dir) >= (int)sizeof path) {
    snprintf(why, whylen, "$TMPDIR is too long");
    return 0;
  }
  static const char zeros[65536];
  const int fd = mkstemp(path);
  /* Unlinked at once: the open file still takes the writes, and a signal
  ** that ends fatune in the middle of the probe leaves nothing behind. */
  if (fd >= 0 && unlink(path) != 0) {
    snprintf(why, whylen, "%.200s: cannot remove its probe file: %s", dir, strerror(errno));
    close(fd);
    return 0;
  }
  int ok = fd >= 0;
  size_t left = TMP_PROBE_BYTES;
  while (ok && left) {   /* a short write is followed by the one that says why */
    const ssize_t k = write(fd, zeros, left < sizeof zeros ? left : sizeof zeros);
    if (k < 0 && errno == EINTR) continue;
    ok = k > 0, left -= k > 0 ? (size_t)k : 0;
  }
  ok = ok && fsync(fd) == 0;
  if (!ok) snprintf(why, whylen, "%s cannot take the compiler's files: %s", dir, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && ok) {
    snprintf(why, whylen, "%s cannot take the compiler's files: %s", dir, strerror(errno));
    ok = 0;
  }
  return ok;
}

/* A compile that failed for want of room (a full $TMPDIR or quota) is the
** environment's: the compiler's log says so, or the folder refuses a file. */
static int compile_env_failed(const char *log, char *why, size_t whylen) {
  const char *full[] = {strerror(ENOSPC), strerror(EDQUOT)};
  for (size_t i = 0; log && i < sizeof full / sizeof full[0]; i++)
    if (strstr(log, full[i])) {
      snprintf(why, whylen, "%s", log);
      return 1;
    }
  return !tmp_takes_files(why, whylen);
}

void trial_take_build(trial *t, fa_build *b, int nvrtc) {
  t->build = *b;
  char env[256];
  if (!t->build.prog && compile_env_failed(t->build.log, env, sizeof env)) {
    snprintf(t->out.r.msg, sizeof t->out.r.msg, "compiling: %s", env);
    t->st = TRIAL_ENV_ERROR, t->why = t->out.r.msg;
  } else if (!t->build.prog)
    t->st = TRIAL_COMPILE_ERROR, t->why = t->build.log ? t->build.log : "?";
  else if (nvrtc && !t->nvrtc.result.ok)
    t->st = TRIAL_COMPILE_ERROR, t->why = t->nvrtc.result.error;
}

void trial_free(trial *t, fa_backend *be) {
  if (be) backend_build_free(be, &t->build);
  backend_compiled_free(&t->nvrtc.result);
  gen_kernel_free(&t->k);
}

void trial_env_init(trial_env *e) {
  pthread_mutex_init(&e->mu, NULL);
}

void trial_env_free(trial_env *e) {
  trial_pool_close(e);
  if (e->be) backend_build_free(e->be, &e->oracle_b);
  gen_kernel_free(&e->oracle_k);
  pthread_mutex_destroy(&e->mu);
}

trial *trial_at(const trial_env *e, size_t i) {
  return (trial *)((char *)e->trials + i * e->stride);
}

int trial_compile(trial_env *e, const gen_kernel *const *ks, size_t n, int threads,
                  fa_build *out, par_progress_fn progress, void *ud, char *err, size_t errlen) {
  if (e->gpu) return cc_compile(e->be, ks, n, threads, out, progress, ud, err, errlen);
  int rc = backend_compile(e->be, ks, n, threads, out, err, errlen);
  if (rc == 0 && progress) progress(n, n, ud);
  return rc;
}

int trial_oracle_render(trial_env *e, gen_state *g, const fa_problem *p) {
  if (gen_render_oracle(g, p, &e->oracle_k) == 0) return 0;
  fprintf(stderr, "fatune: rendering the oracle: %s\n", gen_errmsg(g));
  return -1;
}

int trial_oracle_compile(trial_env *e) {
  char err[512];
  const gen_kernel *ok = &e->oracle_k;
  if (trial_compile(e, &ok, 1, 1, &e->oracle_b, NULL, NULL, err, sizeof err) == 0 &&
      e->oracle_b.prog)
    return 0;
  fprintf(stderr, "fatune: the oracle does not compile: %s\n",
          e->oracle_b.log ? e->oracle_b.log : err);
  return -1;
}

/* ---- The database ---- */

#define TRIAL_CTR_ROW(f, json, label) {#f, json, label, offsetof(fa_counters, f)},
const trial_counter trial_counters[TRIAL_NCOUNTERS] = {FA_COUNTERS(TRIAL_CTR_ROW)};
#undef TRIAL_CTR_ROW

unsigned long long trial_counter_of(const fa_counters *c, int i) {
  return *(const unsigned long long *)((const char *)c + trial_counters[i].off);
}

void trial_counters_json(const fa_counters *c, char *buf, size_t n) {
  size_t at = 0;
  for (int i = 0; i < TRIAL_NCOUNTERS && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s\"%s\": %llu", i ? ", " : "{",
                           trial_counters[i].json, trial_counter_of(c, i));
  if (at < n) snprintf(buf + at, n - at, "}");
}

/* The inverse of trial_counters_json, on text from the database: a counter
** missing or malformed reads 0. */
static void counters_parse(const char *json, fa_counters *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; json && i < TRIAL_NCOUNTERS; i++) {
    char key[40];
    snprintf(key, sizeof key, "\"%s\":", trial_counters[i].json);
    const char *at = strstr(json, key);
    if (!at) continue;
    at += strlen(key);
    while (*at == ' ') at++;
    if (*at >= '0' && *at <= '9')
      *(unsigned long long *)((char *)c + trial_counters[i].off) = strtoull(at, NULL, 10);
  }
}

int trial_load_recorded(trial_env *e, trial *t, int *found, char *err, size_t errlen) {
  const db_problem key = trial_key(e);
  db_recorded rec;
  if (db_trial_get(e->db, t->variant_id, e->device_id, &key, &rec, found, err, errlen) != 0)
    return -1;
  if (!*found) return 0;
  const db_trial *r = &rec.t;
  t->st = TRIAL_RECORDED, t->was = TRIAL_CRASHED;
  for (int i = 0; i < TRIAL_RECORDED; i++)
    if (!strcmp(rec.status, trial_status_names[i])) t->was = (trial_status)i;
  trial_outcome *o = &t->out;
  o->r.max_abs_err = r->max_abs_err, o->r.rel_err = r->rel_err, o->r.lse_err = r->lse_err;
  counters_parse(r->counters, &o->r.counters);
  o->timed = !isnan(r->median_us);
  o->t.median_us = r->median_us, o->t.min_us = r->min_us;
  o->t.p20_us = r->p20_us, o->t.p80_us = r->p80_us;
  o->ctas_per_sm = -1;
  o->suite_cases = r->suite_cases, o->suite_err = r->suite_err;
  snprintf(o->suite_failed, sizeof o->suite_failed, "%s", rec.suite_failed);
  snprintf(o->r.msg, sizeof o->r.msg, "%s", rec.message);
  t->why = o->r.msg[0] ? o->r.msg : NULL;
  t->seeded = r->seeded, t->seed = r->seed;
  return 0;
}

int trial_register(trial_env *e, char *err, size_t errlen) {
  const fa_device *d = backend_device(e->be);
  db_device dev = {.name = d ? d->name : "CPU emulator", .uuid = d ? d->uuid : "emu",
                   .backend = backend_name(e->be), .cc_major = d ? d->cc_major : 0,
                   .cc_minor = d ? d->cc_minor : 0, .sm_count = d ? d->sm_count : 0,
                   .smem_per_block_optin = d ? d->smem_per_block_optin : 0,
                   .l2_bytes = d ? d->l2_bytes : 0};
  if (db_device_id(e->db, &dev, &e->device_id, err, errlen) != 0) return -1;
  for (size_t i = 0; i < e->n; i++) {
    trial *t = trial_at(e, i);
    char config[4096];
    if (gen_config_json(&t->k.cfg, config, sizeof config) != 0) {
      snprintf(err, errlen, "the config of %s is too long", t->k.name);
      return -1;
    }
    db_variant v = {.family = t->k.cfg.family, .template_version = t->k.template_version,
                    .name = t->k.name, .hash = t->k.hash, .config = config,
                    .source_hash = t->k.source_hash, .op = fa_op_name(t->k.op),
                    .mod = t->k.mod_hash, .mod_label = t->k.mod_label};
    if (db_variant_id(e->db, &v, &t->variant_id, err, errlen) != 0) return -1;
  }
  return 0;
}

int trial_stopped(trial_env *e) {
  pthread_mutex_lock(&e->mu);
  int stopped = e->stopped;
  pthread_mutex_unlock(&e->mu);
  return stopped;
}

/* The first failure says it all; later ones (the same full disk) say nothing. */
static void record_failed(trial_env *e, const trial *t, const char *err) {
  const char *what = strncmp(err, "database: ", 10) ? err : err + 10;
  if (!e->stopped)
    fprintf(stderr, "fatune: recording %s in %s: %s; stopping: the trials before it are "
                    "recorded, and a rerun resumes from there\n", t->k.name, db_path(e->db), what);
  e->stopped = 1;
}

db_problem trial_key(const trial_env *e) {
  const fa_problem *p = e->run, *a = e->asked ? e->asked : e->run;
  /* The key's op-specific fields are the problem asked for's: the emulator
  ** runs fewer batches. */
  const fa_key_extra ek = fa_problem_key_extra(a);
  return (db_problem){.dtype = fa_dtype_name(p->dtype), .dim = p->dim, .seq_q = p->seq_q,
                      .seq_k = p->seq_k, .batch = p->batch, .heads = p->heads,
                      .causal = p->causal, .arch = e->arch, .req_seq_q = a->seq_q,
                      .req_seq_k = a->seq_k, .dim_v = fa_problem_dim_v(p),
                      .mod = p->mod ? p->mod->hash : NULL,
                      .req_batch = ek.batch, .kv_group = ek.kv_group, .page = ek.page};
}

/* What compiled the code a trial ran, for its record: "NVRTC 13.0" on a
** GPU, the host compiler's version line on the emulator ("" unknown). */
static void trial_compiler(const trial_env *e, char *out, size_t n) {
  const char *target, *compiler, *options;
  backend_cache_key(e->be, &target, &compiler, &options);
  if (!compiler[0]) out[0] = '\0';
  else if (strcmp(target, "host")) snprintf(out, n, "NVRTC %s", compiler);
  else snprintf(out, n, "%s", compiler);
}

int trial_record(trial_env *e, const trial *t) {
  if (t->st == TRIAL_RECORDED || t->st == TRIAL_ENV_ERROR) return 0;
  /* A stop signal is ending the process: its cleanup stopped the compilers,
  ** so a failure now may be its doing, not the variant's. Nothing more is
  ** recorded; a rerun measures what is missing. */
  if (backend_stopping()) return 0;
  const trial_outcome *o = &t->out;
  const fa_problem *p = e->run;
  const int ran = trial_ran(t->st), timed = o->timed;
  char counters[600], err[512] = "", compiler[160];
  trial_counters_json(&o->r.counters, counters, sizeof counters);
  trial_compiler(e, compiler, sizeof compiler);
  const double flops = attn_flops(p), bytes = attn_bytes(p);
  db_trial tr = {
    .variant_id = t->variant_id, .device_id = e->device_id,
    .problem = trial_key(e), .seeded = 1, .seed = e->seed,
    .status = trial_status_names[t->st], .message = t->st == TRIAL_OK ? NULL : t->why,
    .max_abs_err = ran ? o->r.max_abs_err : NAN, .rel_err = ran ? o->r.rel_err : NAN,
    .lse_err = ran ? o->r.lse_err : NAN, .median_us = timed ? o->t.median_us : NAN,
    .min_us = timed ? o->t.min_us : NAN, .p20_us = timed ? o->t.p20_us : NAN,
    .p80_us = timed ? o->t.p80_us : NAN, .tflops = timed ? flops / o->t.median_us / 1e6 : NAN,
    .gbps = timed ? bytes / o->t.median_us / 1e3 : NAN,
    .counters = ran && !e->gpu ? counters : NULL, .compiler = compiler[0] ? compiler : NULL,
    .suite_cases = o->suite_cases, .suite_err = o->suite_cases ? o->suite_err : NAN,
    .suite_failed = o->suite_failed,
    /* An ok trial of a kernel that does not declare otherwise gave the same
    ** bits on both schedules (emulator) or every launch (GPU, timed). */
    .deterministic = !t->k.deterministic         ? DB_DET_NO
                     : t->st == TRIAL_OK && (!e->gpu || timed) ? DB_DET_YES
                                                  : DB_DET_UNKNOWN};
  pthread_mutex_lock(&e->mu);
  wk_quiet_begin();   /* a worker restarted meanwhile waits (worker.h) */
  int rc = e->stopped ? -1 : db_trial_put(e->db, &tr, err, sizeof err);
  wk_quiet_end();
  if (rc != 0) record_failed(e, t, err);
  pthread_mutex_unlock(&e->mu);
  return rc;
}

/* ---- In a worker process ---- */

/* The inputs and their reference, once per worker process. */
static int ensure_case(trial_env *e) {
  if (e->have_case) return 0;
  char err[256];
  /* Decoding's few query rows keep the float64 reference on the CPU. */
  const int oracle = e->gpu && e->run->op != FA_OP_DECODE;
  int rc = oracle ? val_case_make_oracle(&e->vc, e->run, e->seed, e->be, e->oracle_b.prog,
                                         &e->oracle_k, ORACLE_SAMPLE_ROWS, err, sizeof err)
                  : val_case_make(&e->vc, e->run, e->seed, err, sizeof err);
  if (rc == 0)
    rc = val_inputs_upload(e->be, &e->vc, &e->in, err, sizeof err);
  if (rc != 0) {
    if (e->vc.q) val_case_free(&e->vc);
    snprintf(e->case_err, sizeof e->case_err, "cannot set up validation: %s", err);
  }
  e->have_case = rc == 0;
  return rc;
}

/* The environment failed, not the variant: the outcome says so. */
static int env_failed(trial_outcome *oc, const char *why) {
  oc->env = 1;
  snprintf(oc->r.msg, sizeof oc->r.msg, "%s", why);
  return 1;   /* a fresh process tries again for the next variant */
}

/* On a GPU, after validation: time the kernel and, when it is
** deterministic, check that its warm-up runs and its last timed run give
** the validated outputs again, bit for bit (a difference is a race, or a
** read of memory before it is written, that the first run escaped). A
** kernel that declares itself non-deterministic (atomic adds in an order
** the GPU picks) is timed without that check. */
static void time_checked(trial_env *e, const trial *t, const void *first, trial_outcome *oc) {
  attn_expect want = {.out = first};
  attn_expect *w = t->k.deterministic ? &want : NULL;
  if (attn_time(e->be, t->build.prog, &t->k, e->run, &e->in, e->trial_ms, w, &oc->t,
                &oc->ctas_per_sm, oc->note, sizeof oc->note) != 0) {
    if (backend_poisoned(e->be))
      oc->r.status = VAL_CRASHED, snprintf(oc->r.msg, sizeof oc->r.msg, "%s", oc->note);
    return;
  }
  if (!want.differs) {
    oc->timed = 1;
    return;
  }
  char at[64];
  val_output_where(e->run, want.output, want.at, at, sizeof at);
  oc->r.status = VAL_INVALID;
  snprintf(oc->r.msg, sizeof oc->r.msg, "the output of %s differs from the first launch's "
           "at %s%s, bit for bit (a race?)", want.launch, attn_output_name(e->run, want.output),
           at);
}

/* Case i of the suite on this worker: built once; 1 when it is there. */
static int ensure_suite_case(trial_env *e, int i) {
  if (e->suite_state[i] == 0) {
    char err[256];
    int rc = val_suite_make(&e->suite_vc[i], i, e->run, e->seed, err, sizeof err);
    if (rc == 0 && val_inputs_upload(e->be, &e->suite_vc[i], &e->suite_in[i], err, sizeof err) != 0)
      rc = -1, val_case_free(&e->suite_vc[i]);
    e->suite_state[i] = rc == 0 ? 1 : rc == 1 ? 2 : -1;
  }
  return e->suite_state[i] == 1;
}

/* The adversarial suite on trial t, whose main case passed (the emulator,
** under one schedule: the main case's two looked for races; these look at
** the numbers). A case it cannot meet is named
** in the outcome; the trial's status stays the main case's, so that the
** tuner can still rank it and a user with no such inputs can still use it
** (fatune best --suite asks for variants that meet every case). */
static void run_suite(trial_env *e, const trial *t, trial_outcome *oc) {
  const int n = val_suite_size() < TRIAL_SUITE_MAX ? val_suite_size() : TRIAL_SUITE_MAX;
  for (int i = 0; i < n; i++) {
    if (!ensure_suite_case(e, i)) continue;
    val_opts vo = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .seed = e->seed, .threads = 1};
    val_result r;
    char err[256];
    oc->suite_cases++;
    if (val_check(e->be, &e->suite_vc[i], &e->suite_in[i], t->build.prog, &t->k, &vo, &r, err,
                  sizeof err) == 0 && r.status == VAL_OK) {
      if (r.rel_err > oc->suite_err) oc->suite_err = r.rel_err;
      continue;
    }
    const size_t used = strlen(oc->suite_failed);
    snprintf(oc->suite_failed + used, sizeof oc->suite_failed - used, "%s%s", used ? "," : "",
             val_suite_name(i));
  }
}

/* Validate trial i, and time it on a GPU; the outcome travels back whole.
** A device left unusable retires this process. */
static int job(size_t i, void *ud, void *out) {
  trial_env *e = ud;
  const trial *t = trial_at(e, i);
  trial_outcome *oc = out;
  oc->ctas_per_sm = -1;
  wk_phase(PHASE_SETUP);
  if (ensure_case(e) != 0) return env_failed(oc, e->case_err);
  size_t bytes[ATTN_MAX_OUTPUTS], total = 0;
  const int nout = attn_outputs(e->run, bytes);
  for (int o = 0; o < nout; o++) total += bytes[o];
  unsigned char *first = e->gpu ? malloc(total) : NULL;
  if (e->gpu && !first) return env_failed(oc, "out of memory for a copy of the output");
  wk_phase(PHASE_KERNEL);
  val_opts vo = {.nschedules = e->gpu ? 1 : 2, .schedule = {FA_SCHED_FORWARD, FA_SCHED_SKEW},
                 .seed = e->seed, .threads = 1, .keep = first};
  char err[256];
  if (val_check(e->be, &e->vc, &e->in, t->build.prog, &t->k, &vo, &oc->r, err, sizeof err)) {
    snprintf(oc->r.msg, sizeof oc->r.msg, "cannot validate: %s", err);
    oc->r.status = VAL_CRASHED;
  }
  if (e->gpu && oc->r.status == VAL_OK) time_checked(e, t, first, oc);
  if (!e->gpu && oc->r.status == VAL_OK) run_suite(e, t, oc);
  free(first);
  return backend_poisoned(e->be);
}

/* ---- Workers, from the parent ---- */

int trial_pool_open(trial_env *e, int n) {
  char err[256];
  e->workers = calloc((size_t)n, sizeof *e->workers);
  if (!e->workers) return -1;
  for (int i = 0; i < n; i++) {
    int rc = wk_open(&e->workers[i], job, e, sizeof(trial_outcome), err, sizeof err);
    if (rc == 0) e->nfree++;
    /* Forked here, before the measuring threads start (worker.h). */
    if (rc != 0 || wk_start(e->workers[i], err, sizeof err) != 0) {
      fprintf(stderr, "fatune: %s\n", err);
      trial_pool_close(e);
      return -1;
    }
  }
  return 0;
}

void trial_pool_close(trial_env *e) {
  for (int i = 0; i < e->nfree; i++) wk_close(e->workers[i]);
  free(e->workers);
  e->workers = NULL, e->nfree = 0;
}

void trial_measure(trial_env *e, size_t i) {
  trial *t = trial_at(e, i);
  if (t->st == TRIAL_COMPILE_ERROR || t->st == TRIAL_RECORDED || t->st == TRIAL_ENV_ERROR)
    return;
  t->st = TRIAL_OK, t->why = NULL;
  memset(&t->out, 0, sizeof t->out);
  pthread_mutex_lock(&e->mu);
  wk_worker *w = e->workers[--e->nfree];
  pthread_mutex_unlock(&e->mu);
  char why[256];
  wk_outcome got = wk_run(w, i, e->timeout_s, &t->out, why, sizeof why);
  /* A worker that could not start, or that died setting up validation. */
  const int env = got == WK_ERROR || (got != WK_DONE && wk_last_phase(w) == PHASE_SETUP);
  pthread_mutex_lock(&e->mu);
  e->workers[e->nfree++] = w;
  pthread_mutex_unlock(&e->mu);
  val_result *r = &t->out.r;
  if (got != WK_DONE) {
    t->st = env ? TRIAL_ENV_ERROR : got == WK_TIMEOUT ? TRIAL_TIMEOUT : TRIAL_CRASHED;
    snprintf(r->msg, sizeof r->msg, "%s%s", env && got != WK_ERROR ? "setting up validation: " : "",
             why);
    r->rel_err = r->max_abs_err = r->lse_err = NAN;
  } else if (t->out.env) {
    t->st = TRIAL_ENV_ERROR;
  } else if (r->status != VAL_OK) {
    t->st = r->status == VAL_INVALID ? TRIAL_INVALID : TRIAL_CRASHED;
  }
  if (t->st != TRIAL_OK) t->why = r->msg;
}

typedef struct each_ctx { trial_env *e; int record; } each_ctx;

static void measure_each(size_t i, void *ud) {
  const each_ctx *c = ud;
  if (c->record && trial_stopped(c->e)) return;
  trial_measure(c->e, i);
  if (c->record) (void)trial_record(c->e, trial_at(c->e, i));
}

int trial_measure_all(trial_env *e, int threads, int record, par_progress_fn progress,
                      void *progress_ud) {
  each_ctx c = {e, record};
  return par_for(e->n, threads, measure_each, &c, progress, progress_ud);
}
