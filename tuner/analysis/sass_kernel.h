/*
** sass_kernel.h
** The SASS figures of one compiled variant: its cubin disassembled, the
** main loop counted with the tile's trip count (sass.h), and the
** throughput estimate for a GPU (estimate.h). Shared by fatune compile
** --sass and the main job.
*/
#ifndef SASS_KERNEL_H
#define SASS_KERNEL_H

#include <stdio.h>

#include "backend.h"
#include "estimate.h"
#include "gen.h"
#include "model_launch.h"
#include "sass.h"

typedef struct sass_figures {
  int analysed;        /* 1: the SASS was read (c holds its counts) */
  sass_counts c;
  int estimated;       /* 1: e holds an estimate */
  estimate e;
  double tma_tflops;   /* a warp-specialized variant's TMA ceiling (estimate_wg), NAN for others */
  int modelled;        /* 1: the timing model predicted it (model.h) */
  double model_tflops, model_us;
  char model_bound[24];
  char error[200];     /* why not analysed, "" otherwise */
} sass_figures;

/* The tile of a variant: warps, registers, shared memory, useful FLOPs
** per warp per step of its main loop (forward: 4 block_m block_n dim /
** warps a K/V block; backward: 10 ... a Q block of the dkdv kernel, 8
** with dq=separate). -1 when its config lacks one of those. */
int sass_kernel_tile(const gen_kernel *k, const fa_compiled *r, estimate_tile *t);

/* The figures of kernel k compiled into r; gpu may be NULL (no estimate),
** p NULL (no timing model; else the model's prediction for problem p).
** A warp-specialized kernel (one with consumer warpgroups) is estimated by estimate_wg, which counts
** only its consumer warps as running the loop. A backward variant with dQ
** in a kernel of its own (dq=separate) gets no static estimate, and the
** model's time of both kernels. Never fails: what went wrong is in out->error. */
void sass_kernel_figures(const char *nvdisasm, const gen_kernel *k, const fa_compiled *r,
                         const estimate_gpu *gpu, const fa_problem *p, sass_figures *out);

/* The dQ pass of a backward variant with dq=separate, for the timing
** model: built from the disassembly (text) of the variant's cubin r, then
** predicted at a problem. The backward pass's time is its main kernel's
** (dK, dV) plus this one's (dQ: S, dP and dS K again, a CTA per Q block). */
typedef struct sass_dq_pass {
  model_launch l;
  sass_trace trace;
  model_built b;
  int built;
} sass_dq_pass;

/* 0, or -1 with a message (no such launch, no main loop found). */
int sass_dq_pass_build(const model_gpu *m, const char *text, const gen_kernel *k,
                       const fa_compiled *r, const model_problem *p, sass_dq_pass *d, char *err,
                       size_t errlen);
/* Its predicted time on problem p (the backward pass's), in us. */
int sass_dq_pass_time(const model_gpu *m, const sass_dq_pass *d, const model_problem *p,
                      double *us, char *err, size_t errlen);
void sass_dq_pass_free(sass_dq_pass *d);

/* The figures as JSON members after ", " (nulls when not analysed):
** loop_instructions, ..., loop_utmaldg, loop_syncs, loop_warpgroup,
** producer_instructions, producer_utmaldg, non_mma_per_mma, ctas_per_sm,
** bound, est_tflops, model_tflops, model_bound. */
void sass_kernel_json(FILE *f, const sass_figures *s);
/* The same as fa_sink members (fa_sink.h): figures is a sass_figures. */
void sass_kernel_members(FILE *f, const void *figures);

#endif
