/*
** compile_pool.h
** Compile many kernels with NVRTC on all cores. A job that fails to compile
** keeps its log and never stops the others.
*/
#ifndef COMPILE_POOL_H
#define COMPILE_POOL_H

#include <stddef.h>

#include "backend.h"

typedef struct compile_job {
  const char *source;  /* full CUDA source */
  const char *entry;   /* extern "C" kernel name */
  fa_compiled result;  /* filled by compile_pool_run */
} compile_job;

typedef void (*compile_progress_fn)(size_t done, size_t total, void *ud);

/* Number of online CPUs, at least 1. */
int compile_pool_default_threads(void);

/* Compile jobs[0..n) for `arch` on `threads` threads (<= 0: all cores).
** `progress` (may be NULL) is called, serialized, after each job ends.
** The calling thread works too, so a thread that fails to start only costs
** parallelism. Returns 0, or -1 when no work could be done (errno kept). */
int compile_pool_run(compile_job *jobs, size_t n, const char *arch, int threads,
                     compile_progress_fn progress, void *ud);

#endif
