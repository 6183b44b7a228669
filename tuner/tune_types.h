/*
** tune_types.h
** What the main job's flow (tune.c) and its report (tune_report.c) share.
** Private to those two files.
*/
#ifndef TUNE_TYPES_H
#define TUNE_TYPES_H

#include <pthread.h>

#include "cli.h"
#include "compile_pool.h"
#include "db.h"
#include "validate.h"
#include "worker.h"

/* ST_RECORDED: the database holds a trial for it already; not measured again
** (--retune measures it). */
typedef enum status {
  ST_OK, ST_INVALID, ST_COMPILE_ERROR, ST_CRASHED, ST_TIMEOUT, ST_RECORDED
} status;
#define NSTATUS 6
extern const char *const tune_status_names[NSTATUS];

/* What a worker sends back for one variant: plain data, no pointers. */
typedef struct outcome {
  val_result r;
  fa_timing t;
  int timed;             /* t holds a measurement */
  int ctas_per_sm;       /* occupancy; -1 unknown */
  char note[200];        /* why it was not timed, when it was not */
} outcome;

typedef struct entry {
  gen_kernel k;
  fa_build build;        /* the backend's compile (cuda: with ptxas's report) */
  compile_job nvrtc;     /* emu: the target's NVRTC compile, for ptxas's report */
  outcome out;
  status st;
  const char *why;       /* the status's detail, inside out, build or nvrtc */
  int compiled;          /* the backend compile has finished (the GPU pipeline) */
  long long variant_id;  /* in the database */
} entry;

typedef struct tune {
  const cli_opts *o;
  const gen_target *t;
  fa_backend *be;
  int gpu;               /* the cuda backend: time on the GPU */
  fa_problem run;        /* the problem actually run */
  db *db;                /* the results; one thread at a time, under mu */
  long long device_id;
  unsigned long long seed;
  entry *e;
  size_t n;
  int threads;
  /* The GPU's reference: the naive-attention oracle. */
  gen_kernel oracle_k;
  fa_build oracle_b;
  /* Built lazily in each worker process, never in the parent. */
  val_case vc;
  attn_inputs in;
  int have_case;
  char case_err[300];
  /* Worker processes; free ones on a stack. */
  wk_worker **workers;
  int nfree;
  pthread_mutex_t mu;
  /* Compiles finishing while the GPU measures (cuda). */
  pthread_mutex_t pmu;
  pthread_cond_t pcv;
  /* Figures for the summary and the progress line. */
  double compile_s, nvrtc_s, check_s, t_start;
  size_t done;
  const entry *best;
} tune;

/* Rank, print the table (or JSON) and the summary. */
void tune_report(tune *s);

#endif
