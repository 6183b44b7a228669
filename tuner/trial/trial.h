/*
** trial.h
** One variant measured and recorded, for the main job (tune.c) and explore
** (explore.c) alike: its status as the database spells it, what a worker
** process sends back, the variant's and the trial's rows in the database,
** and a pool of worker processes that validate a variant (two schedules on
** the emulator; the naive-attention oracle, then the timing, on a GPU).
** Each worker process builds the validation case (inputs and reference)
** once, on its first job; the parent never touches the device.
**
** The commands keep their own flows: what to run, in which order, the
** progress and the printing.
*/
#ifndef TRIAL_H
#define TRIAL_H

#include <pthread.h>
#include <stddef.h>

#include "backend.h"
#include "compile_pool.h"
#include "db.h"
#include "gen.h"
#include "par.h"
#include "validate.h"
#include "worker.h"

/* TRIAL_RECORDED: the database holds a trial for it already; not measured
** again (the main job's --retune measures it). TRIAL_ENV_ERROR: the
** environment failed, not the variant (validation could not be set up, no
** worker could start, no room for the compiler's files): never recorded,
** so the next run measures it. */
typedef enum trial_status {
  TRIAL_OK, TRIAL_INVALID, TRIAL_COMPILE_ERROR, TRIAL_CRASHED, TRIAL_TIMEOUT, TRIAL_RECORDED,
  TRIAL_ENV_ERROR
} trial_status;
#define TRIAL_NSTATUS 7
extern const char *const trial_status_names[TRIAL_NSTATUS];   /* "ok", ... */

/* ok or invalid: it ran, so it has errors and counters. */
int trial_ran(trial_status st);

/* What a worker sends back for one variant: plain data, no pointers. */
/* At most this many cases in the adversarial suite (suite.h). */
#define TRIAL_SUITE_MAX 12

typedef struct trial_outcome {
  val_result r;
  /* The adversarial suite, on the emulator, after the main case passed:
  ** how many of its cases applied, the worst norm-relative error of those
  ** passed, and the names of those failed, comma-separated ("" none). */
  int suite_cases;
  double suite_err;
  char suite_failed[160];
  fa_timing t;
  int timed;             /* t holds a measurement */
  int ctas_per_sm;       /* occupancy; -1 unknown */
  int env;               /* validation could not be set up: r.msg says why */
  char note[200];        /* why it was not timed, when it was not */
} trial_outcome;

/* One variant and its trial on the problem being run. A zeroed trial is
** ok until something says otherwise. */
typedef struct trial {
  gen_kernel k;
  fa_build build;        /* the backend's compile (cuda: with ptxas's report) */
  compile_job nvrtc;     /* emu: the target's NVRTC compile, for ptxas's report */
  trial_outcome out;
  trial_status st;
  trial_status was;      /* TRIAL_RECORDED: the status recorded, whose figures out holds */
  int seeded;            /* TRIAL_RECORDED: seed is the recorded trial's */
  unsigned long long seed;
  const char *why;       /* the status's detail, inside out, build or nvrtc */
  long long variant_id;  /* in the database */
} trial;

/* Takes the backend's compile b into t: no program is a compile error (an
** env_error when it failed for want of room in $TMPDIR: the log says so, or
** the folder refuses a 1 MB file now), and so is a failed NVRTC compile
** when nvrtc is set. */
void trial_take_build(trial *t, fa_build *b, int nvrtc);
void trial_free(trial *t, fa_backend *be);

/* What every trial of one problem shares. The caller fills the first
** fields (be and db stay the caller's), then trial_env_init. */
typedef struct trial_env {
  fa_backend *be;
  int gpu;                     /* the cuda backend: the oracle and timing */
  const fa_problem *run;       /* the problem actually run */
  const fa_problem *asked;     /* the problem asked for (longer sequences than run
                                  on the emulator); NULL: run */
  const char *arch;            /* the target the kernels were compiled for */
  unsigned long long seed;
  int timeout_s, trial_ms;
  db *db;
  void *trials;                /* n trials, each at the start of stride bytes */
  size_t n, stride;
  /* Filled here. */
  long long device_id;
  gen_kernel oracle_k;         /* the GPU's reference */
  fa_build oracle_b;
  wk_worker **workers;         /* free ones on a stack, under mu */
  int nfree;
  pthread_mutex_t mu;          /* the workers, the database and stopped */
  int stopped;                 /* a trial failed to record: measure no more */
  /* Built lazily in each worker process, never in the parent; a process
  ** that fails to build them retires, and the next one tries again. */
  val_case vc;
  attn_inputs in;
  int have_case;
  char case_err[300];
  /* The adversarial suite's cases, likewise: 0 not built, 1 built, 2 not
  ** for this problem, -1 could not be built. */
  val_case suite_vc[TRIAL_SUITE_MAX];
  attn_inputs suite_in[TRIAL_SUITE_MAX];
  int suite_state[TRIAL_SUITE_MAX];
} trial_env;

void trial_env_init(trial_env *e);
void trial_env_free(trial_env *e);
trial *trial_at(const trial_env *e, size_t i);

/* backend_compile for e's trials: on a GPU in a child process
** (compile_child.h), so that this one never initialises CUDA before it
** forks the workers; progress (may be NULL) as kernels end. */
int trial_compile(trial_env *e, const gen_kernel *const *ks, size_t n, int threads,
                  fa_build *out, par_progress_fn progress, void *ud, char *err, size_t errlen);

/* The oracle for p's dtype, dim and causal: rendered, then compiled. Each
** prints what failed; -1. */
int trial_oracle_render(trial_env *e, gen_state *g, const fa_problem *p);
int trial_oracle_compile(trial_env *e);

/* ---- The database ---- */

/* The device's row and every trial's variant row; -1 with a message. */
int trial_register(trial_env *e, char *err, size_t errlen);

/* The trial of t (not one already recorded, nor an environment's failure),
** in its own transaction: a run
** killed later loses nothing of it. A failed write (a full disk, an I/O
** error) stops the run: the first one says on stderr which variant and why,
** marks e stopped, and every call then returns -1 without writing. 0 or -1. */
int trial_record(trial_env *e, const trial *t);

/* The trial the database holds for t under e's key, when there is one:
** found = 1, t's status TRIAL_RECORDED, its recorded status in was, and
** its figures, message and seed as recorded. 0, or -1 with a message. */
int trial_load_recorded(trial_env *e, trial *t, int *found, char *err, size_t errlen);

/* The key a trial of e is recorded under. */
db_problem trial_key(const trial_env *e);

/* Whether a failed record has stopped the run. Thread-safe. */
int trial_stopped(trial_env *e);

/* The emulator's counters (fa_counters.h's FA_COUNTERS), in its order: the
** field's name, its JSON key, a table label and where fa_counters keeps it;
** TRIAL_CTR_<field> indexes the table. */
typedef struct trial_counter {
  const char *name, *json, *label;
  size_t off;
} trial_counter;
#define TRIAL_CTR_INDEX(f, json, label) TRIAL_CTR_##f,
enum { FA_COUNTERS(TRIAL_CTR_INDEX) TRIAL_NCOUNTERS };
#undef TRIAL_CTR_INDEX
extern const trial_counter trial_counters[TRIAL_NCOUNTERS];

/* Counter i of c. */
unsigned long long trial_counter_of(const fa_counters *c, int i);

/* The emulator's counters as the JSON object a trial records. */
void trial_counters_json(const fa_counters *c, char *buf, size_t n);

/* ---- Worker processes ---- */

/* n workers; their processes start on their first job. Says what failed. */
int trial_pool_open(trial_env *e, int n);
void trial_pool_close(trial_env *e);

/* Trial i (not a compile error, an env_error or one recorded) through a free worker,
** within the timeout: its status, detail and outcome. Thread-safe. */
void trial_measure(trial_env *e, size_t i);

/* Every trial measured on `threads` threads, and recorded as it ends when
** record is set; once a record fails (trial_stopped), the trials not yet
** started are left unmeasured. -1 when the threads cannot start. */
int trial_measure_all(trial_env *e, int threads, int record, par_progress_fn progress,
                      void *progress_ud);

#endif
