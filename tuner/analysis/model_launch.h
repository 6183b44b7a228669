/*
** model_launch.h
** How a kernel launches, for the timing model: a fatune variant's from
** its config and compile, FlashAttention-2's and -3's from their launch
** code (model_launch.c cites it).
*/
#ifndef MODEL_LAUNCH_H
#define MODEL_LAUNCH_H

#include <stddef.h>

#include "backend.h"
#include "gen.h"
#include "model_sass.h"

/* A variant's tile, threads, shared memory and registers; consumers and
** stages for a warp-specialized one. -1 when its config lacks the tile. */
int model_launch_of_variant(const gen_kernel *k, const fa_compiled *r, model_launch *l);

/* Whether backward variant k computes dQ apart from its dkdv kernel
** (dq=separate, or a launch of role dq) instead of adding it there by
** atomics. */
int model_launch_dq_apart(const gen_kernel *k);

/* The dQ pass of a backward variant with dq=separate: its launch (role
** "dq") as the model takes it, a CTA per block_m query rows
** walking blocks of block_n keys, registers from the variant's cubin;
** *entry its function. -1 when the variant has no such launch. */
int model_launch_dq_pass(const gen_kernel *k, const fa_compiled *r, model_launch *l,
                         const char **entry);

/* which: "fa2" or "fa3". The launch for problem p on GPU g (registers
** left 0: the cubin has them), and a pattern of the kernel's mangled name
** (parts separated by '*', in order) that picks the instantiation the
** launch runs. -1 for a head dim without a table entry here (64, 128 and
** 256 have one) or an unknown name. */
int model_launch_fa(const char *which, const model_problem *p, const estimate_gpu *g,
                    model_launch *l, char *pattern, size_t n);

/* 1 when name holds pattern's '*'-separated parts in order. */
int model_name_matches(const char *name, const char *pattern);

#endif
