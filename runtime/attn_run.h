/*
** attn_run.h
** One attention problem through one compiled kernel on a backend: inputs
** uploaded once, then any number of runs, each with fresh output buffers
** poisoned with NaN (all ones) before the launch so that an element the
** kernel never writes cannot pass for a result.
*/
#ifndef ATTN_RUN_H
#define ATTN_RUN_H

#include "backend.h"

/* Q, K, V on the device, contiguous (batch, heads, seq, dim), kernel dtype. */
typedef struct attn_inputs { void *q, *k, *v; } attn_inputs;

int attn_inputs_upload(fa_backend *be, const fa_problem *p, const void *q, const void *k,
                       const void *v, attn_inputs *in, char *err, size_t errlen);
void attn_inputs_free(fa_backend *be, attn_inputs *in);

/* The kernel's argument block for contiguous tensors at the given addresses. */
fa_params attn_params(const fa_problem *p, const void *q, const void *k, const void *v,
                      void *o, void *lse, void *ws);

/* Encode the tensor maps kernel k reads (k->tma) into a->tmap, over the
** tensors and strides a holds for problem p; 0 when k has none. FA_EINVAL
** with a message when the backend refuses one (rows not a multiple of 16
** bytes, say), FA_ENODEV on a backend without TMA. */
int attn_tmaps(fa_backend *be, const gen_kernel *k, const fa_problem *p, fa_params *a,
               char *err, size_t errlen);

/* Run kernel k (compiled as prog) once. o_host receives batch*heads*seq_q*dim
** elements in the kernel's dtype, lse_host batch*heads*seq_q logsumexps
** (fa_lse_size bytes each).
** Counters are added to ctr (may be NULL); launch_ms (may be NULL) is the
** wall time of the launch alone. */
int attn_run(fa_backend *be, const fa_program *prog, const gen_kernel *k,
             const fa_problem *p, const attn_inputs *in, const fa_run_opts *opts,
             void *o_host, void *lse_host, fa_counters *ctr, double *launch_ms,
             char *err, size_t errlen);

/* Time kernel k on the inputs (backend_time: warm-up, then launches for
** about budget_ms with the L2 flushed in between), on fresh outputs. */
int attn_time(fa_backend *be, const fa_program *prog, const gen_kernel *k,
              const fa_problem *p, const attn_inputs *in, int budget_ms, fa_timing *t,
              int *ctas_per_sm, char *err, size_t errlen);

/* Floating-point operations of the problem: 4 * batch * heads * dim per
** visible (query, key) pair, the pairs counted exactly under a causal mask. */
double attn_flops(const fa_problem *p);

/* Bytes a kernel must move at least: Q, K, V read, O and lse written. */
double attn_bytes(const fa_problem *p);

#endif
