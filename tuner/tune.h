/*
** tune.h
** The main job: every variant of the space for a problem, compiled, run
** and validated on a backend; the results as a table or JSON.
*/
#ifndef TUNE_H
#define TUNE_H

#include "backend.h"
#include "cli.h"
#include "db.h"
#include "gen.h"

/* Returns the command's exit status. */
int tune_main(gen_state *g, const cli_opts *o, const gen_target *t);

/* The emulator's counters as the JSON object a trial records (n: 600
** bytes is plenty). */
void tune_counters_json(const fa_counters *c, char *buf, size_t n);

/* The database's row for the device behind be; name is storage the row's
** name may point into (the emulator's). */
db_device tune_device(const fa_backend *be, char *name, size_t n);

#endif
