/*
** tune_types.h
** What the main job's flow (tune.c) and its report (tune_report.c) share.
** Private to those two files.
*/
#ifndef TUNE_TYPES_H
#define TUNE_TYPES_H


#include "cli.h"
#include "sass_kernel.h"
#include "trial.h"

typedef struct tune {
  const cli_opts *o;
  const gen_target *t;
  fa_backend *be;
  int gpu;               /* the cuda backend: time on the GPU */
  fa_problem run;        /* the problem actually run */
  db *db;                /* the results */
  unsigned long long seed;
  trial *e;              /* the variants, in listing order */
  size_t n;
  int threads;
  trial_env env;         /* their workers and database rows */
  /* Figures for the summary and the progress line. */
  double compile_s, nvrtc_s, check_s, t_start, t_measure;
  size_t nvrtc_cached;   /* cubins from the compile cache */
  size_t done;
  const trial *best;
  /* The SASS figures of each variant's cubin (none without nvdisasm), and
  ** the GPU of the throughput estimate (NULL: none). */
  sass_figures *sass;
  double *tma_tflops;   /* a warp-specialized variant's TMA ceiling (estimate_wg), NAN for others */
  char nvdisasm[4096];
  const estimate_gpu *est_gpu;
} tune;

/* Rank, print the table (or JSON) and the summary. */
void tune_report(tune *s);

#endif
