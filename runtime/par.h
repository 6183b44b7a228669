/*
** par.h
** A parallel for loop over all cores: compiling, emulating, validating.
*/
#ifndef PAR_H
#define PAR_H

#include <stddef.h>

/* Number of online CPUs, at least 1. */
int par_cores(void);

typedef void (*par_body_fn)(size_t i, void *ud);
typedef void (*par_progress_fn)(size_t done, size_t total, void *ud);

/* Run body(i, ud) for every i in [0, n) on up to `threads` threads (<= 0:
** all cores). Workers take the next index from a shared counter, so a slow
** item never holds up the rest; the calling thread works too, so a thread
** that fails to start costs only parallelism. progress(done, n, pud) (may
** be NULL) is called, serialized, after each item. Returns 0, or -1 when
** not even a mutex could be had (nothing ran). */
int par_for(size_t n, int threads, par_body_fn body, void *ud, par_progress_fn progress,
            void *pud);

#endif
