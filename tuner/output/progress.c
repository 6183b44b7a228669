/*
** progress.c
** Progress lines for the phases of a run (progress.h).
*/
#include <stdio.h>
#include <unistd.h>

#include "fa_util.h"
#include "progress.h"

void progress_start(progress_phase *ph, const char *label, size_t all) {
  *ph = (progress_phase){label, fa_now_s(), 0, all};
  if (isatty(2) && all) progress_show(0, all, ph);
}

void progress_show(size_t done, size_t total, void *ud) {
  progress_phase *ph = ud;
  const size_t d = ph->base + done, n = ph->all ? ph->all : total;
  const double spent = fa_now_s() - ph->t0;
  fprintf(stderr, "\r\033[K%s %zu/%zu", ph->label, d, n);
  if (d > 0 && d < n) fprintf(stderr, ", about %.0f s left", spent / (double)d * (double)(n - d));
  else if (d < n) fputs(", time left once one is done", stderr);
  if (d == n) fputc('\n', stderr);
}

par_progress_fn progress_fn(void) { return isatty(2) ? progress_show : NULL; }
