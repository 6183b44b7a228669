/*
** compile_pool.c
** Compile many kernels with NVRTC on all cores.
**
** Workers take the next job index from a shared atomic counter, so a slow
** kernel never holds up the queue. The calling thread works too: if some
** (or all) of the extra threads fail to start, the jobs still get done, only
** on fewer cores. Progress calls are serialized under a mutex.
*/
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "compile_pool.h"

typedef struct pool {
  compile_job *jobs;
  size_t n;
  const char *arch;
  atomic_size_t next;          /* the next job index to hand out */
  pthread_mutex_t lock;        /* guards done and the progress calls */
  size_t done;
  compile_progress_fn progress;
  void *ud;
} pool;

int compile_pool_default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > 4096) return 4096;
  return (int)n;
}

static void job_done(pool *p) {
  /* The lock cannot fail on a valid, default mutex held by no one else in
  ** this thread; if it ever did, skipping one progress call is harmless. */
  if (pthread_mutex_lock(&p->lock) != 0) return;
  p->done++;
  if (p->progress) p->progress(p->done, p->n, p->ud);
  pthread_mutex_unlock(&p->lock);
}

static void *worker(void *arg) {
  pool *p = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&p->next, 1);
    if (i >= p->n) break;
    /* A failure (even -1) is recorded in the job's own result. */
    nvrtc_compile(p->jobs[i].source, p->jobs[i].entry, p->arch, &p->jobs[i].result);
    job_done(p);
  }
  return NULL;
}

int compile_pool_run(compile_job *jobs, size_t n, const char *arch, int threads,
                     compile_progress_fn progress, void *ud) {
  pool p;
  pthread_t *tids;
  int i, started = 0, rc;

  if (n == 0) return 0;
  if (jobs == NULL) { errno = EINVAL; return -1; }
  if (threads <= 0) threads = compile_pool_default_threads();
  if ((size_t)threads > n) threads = (int)n;

  p.jobs = jobs;
  p.n = n;
  p.arch = arch;
  atomic_init(&p.next, 0);
  p.done = 0;
  p.progress = progress;
  p.ud = ud;
  if ((rc = pthread_mutex_init(&p.lock, NULL)) != 0) { errno = rc; return -1; }

  /* threads - 1 helpers; the caller is the last worker. When the array
  ** cannot be had, the caller simply works alone. */
  tids = threads > 1 ? malloc(sizeof *tids * (size_t)(threads - 1)) : NULL;
  if (tids) {
    for (i = 0; i < threads - 1; i++) {
      if (pthread_create(&tids[started], NULL, worker, &p) != 0) break;
      started++;
    }
  }
  worker(&p);
  for (i = 0; i < started; i++) {
    /* Join fails only for a bad thread id, which ours never are. */
    rc = pthread_join(tids[i], NULL);
    (void)rc;
  }
  free(tids);
  pthread_mutex_destroy(&p.lock);
  return 0;
}
