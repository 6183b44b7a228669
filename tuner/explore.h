/*
** explore.h
** fatune explore: the FlashAttention-1 against FlashAttention-2 design
** choices, one axis at a time. Matched variants that differ in one axis
** only, around the family's FlashAttention-2 default, are compiled, run in
** worker processes and validated (timed on a GPU); every counter the
** emulator measures is shown next to the analytic model's prediction
** (templates/simt_model.lua) and the difference; the FlashAttention
** paper's traffic bounds and the peak memory of naive attention against a
** tiled kernel come after. Every run is recorded in the database.
*/
#ifndef EXPLORE_H
#define EXPLORE_H

#include "cli.h"
#include "gen.h"

/* Returns the command's exit status: 0 when every variant is valid and
** every modelled counter is as predicted, 1 otherwise, 2 for bad input. */
int explore_main(gen_state *g, const cli_opts *o, const gen_target *t);

#endif
