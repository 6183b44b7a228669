/*
** explore_quant.h
** fatune explore --axis quant: fp8's rounding of Q, K and V against
** float64, with and without FlashAttention-3's Hadamard rotation, beside
** bf16's, on inputs with and without outliers (explore_quant.c).
*/
#ifndef EXPLORE_QUANT_H
#define EXPLORE_QUANT_H

#include "cli.h"
#include "gen.h"

/* Prints the table (or JSON); the command's exit status: 0, 1 on a
** failure, 2 for a problem its kernels cannot run (the head dim). */
int explore_quant(gen_state *g, const cli_opts *o, const gen_target *t);

#endif
