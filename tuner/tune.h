/*
** tune.h
** The main job: every variant of the space for a problem, compiled, run
** and validated on a backend; the results as a table or JSON.
*/
#ifndef TUNE_H
#define TUNE_H

#include "cli.h"
#include "gen.h"

/* Returns the command's exit status. */
int tune_main(gen_state *g, const cli_opts *o, const gen_target *t);

#endif
