/*
** run.h
** fatune run: one variant on tensors from .npy files.
*/
#ifndef RUN_H
#define RUN_H

#include "cli.h"
#include "gen.h"

/* Returns the command's exit status. */
int run_main(gen_state *g, const cli_opts *o, const gen_target *t);

#endif
