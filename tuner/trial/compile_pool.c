/*
** compile_pool.c
** Compile many kernels with NVRTC on all cores.
*/
#include <errno.h>

#include "compile_pool.h"
#include "par.h"

typedef struct pool {
  compile_job *jobs;
  const char *arch;
} pool;

static void compile_one(size_t i, void *ud) {
  pool *p = ud;
  /* A failure (even -1) is recorded in the job's own result. */
  backend_compile_gpu(p->jobs[i].source, p->jobs[i].entry, p->arch, &p->jobs[i].result);
}

int compile_pool_default_threads(void) { return par_cores(); }

int compile_pool_run(compile_job *jobs, size_t n, const char *arch, int threads,
                     compile_progress_fn progress, void *ud) {
  if (n == 0) return 0;
  if (jobs == NULL) { errno = EINVAL; return -1; }
  pool p = {jobs, arch};
  return par_for(n, threads, compile_one, &p, progress, ud);
}
