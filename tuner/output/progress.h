/*
** progress.h
** A phase's progress line on a terminal: "label done/total, about N s left",
** the time left at the pace so far, redrawn in place; a new line once the
** phase is done. Off a terminal, nothing.
*/
#ifndef PROGRESS_H
#define PROGRESS_H

#include <stddef.h>

#include "par.h"

typedef struct progress_phase {
  const char *label;
  double t0;
  size_t base, all;   /* a phase run in parts: done before this part, and in all */
} progress_phase;

/* Starts the clock of a phase of all items (0: each call's total) and,
** on a terminal, shows it at 0 at once, so no phase is silent while its
** first item runs. */
void progress_start(progress_phase *ph, const char *label, size_t all);
/* A par_progress_fn: ud is the phase; done counts from ph->base. */
void progress_show(size_t done, size_t total, void *ud);
/* progress_show on a terminal (stderr), else NULL. */
par_progress_fn progress_fn(void);

#endif
