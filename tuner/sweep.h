/*
** sweep.h
** The keys of a sweep (--dim, --seq and --dtype lists): their product in
** a fixed order, and the part of it one shard of N runs (--shard I/N).
*/
#ifndef SWEEP_H
#define SWEEP_H

#include <stddef.h>

#include "cli.h"

/* Every key of o's lists, dtype first, then dim, then causal (without,
** with: --causal=both), then seq, then op decode's group, page, batch and
** cache length: o->problem with those set (seq_k = seq_q unless --seq-k
** was given), in *keys (the caller frees it); then, with
** --shard, only the shard's keys, in the same order. 0, or -1 when out of
** memory. */
int sweep_keys(const cli_opts *o, fa_problem **keys, size_t *n);

/* The estimated cost of tuning key p, in the units sweep_keys balances:
** 1 for what every key pays, plus the attention's work (seq_q * seq_k *
** dim, halved when causal) in units of 2^30. */
double sweep_cost(const fa_problem *p);

#endif
