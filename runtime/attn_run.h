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
#include "fa_mod.h"

/* Q, K, V on the device, contiguous (batch, heads, seq, dim), kernel dtype;
** for the backward pass also the forward pass's O and lse and the
** gradient dO (NULL for the forward pass). */
typedef struct attn_inputs {
  void *q, *k, *v, *o, *lse, *dout;
  void *table, *lens;  /* op decode: the block table and the lengths (int32) */
  int num_pages;       /* op decode: pages in the pools k and v */
  /* The modification's captured tensors (p->mod_data's, uploaded), and
  ** for a dense problem whose mask reads them its block mask
  ** (fa_mod_block_mask) */
  void *mod_tensor[FA_MOD_MAX_TENSORS];
  int mod_len[FA_MOD_MAX_TENSORS];
  void *block_mask;
  fa_mod_mask_dims bm;
  void *descale;       /* p->descale's, uploaded (3 (batch, kv heads) float32), or NULL */
} attn_inputs;

/* The kernels' error flags (fa_params.error): a page outside the pool, a
** length or rotary position outside its table, a captured tensor read
** outside it. */
#define ATTN_NFLAGS 3

int attn_inputs_upload(fa_backend *be, const fa_problem *p, const void *q, const void *k,
                       const void *v, attn_inputs *in, char *err, size_t errlen);
/* The backward pass's further inputs into in: o and dout as q, contiguous
** in the kernel dtype; lse [batch][heads][seq_q] of fa_lse_size bytes. */
int attn_bwd_inputs_upload(fa_backend *be, const fa_problem *p, const void *o,
                           const void *lse, const void *dout, attn_inputs *in, char *err,
                           size_t errlen);
/* Op decode's inputs: q as the forward pass's; k_pool and v_pool the KV
** cache, num_pages pages of (fa_problem_page(p), kv_heads, dim) and of
** dim_v, contiguous; table batch rows of fa_problem_pages_per_seq(p)
** page indices; the lengths from p (fa_problem_kv_len). Every length and
** table entry is checked here, before any kernel reads them: a length
** outside 0..seq_k, or an entry a sequence's keys reach outside the pool,
** is FA_EINVAL with a message. */
int attn_decode_inputs_upload(fa_backend *be, const fa_problem *p, const void *q,
                              const void *k_pool, const void *v_pool, int num_pages,
                              const int *table, attn_inputs *in, char *err, size_t errlen);
/* The kernels' error flags (fa_params.error) as a status: 0, or FA_EINVAL
** with what they met in err. */
int attn_flags(const int flag[ATTN_NFLAGS], char *err, size_t errlen);
/* p's captured tensors into in (attn_inputs_upload and
** attn_decode_inputs_upload call it): FA_EINVAL when p's modification
** captures tensors and p->mod_data holds none. With dense (a problem of
** one query and one key sequence per batch row, no varlen or paged form),
** the block mask too where the mask reads a tensor. */
int attn_mod_upload(fa_backend *be, const fa_problem *p, int dense, attn_inputs *in, char *err,
                    size_t errlen);
/* The block mask of p's modification over p->mod_data (fa_mod_block_mask),
** uploaded into a new device buffer *mask_out of dimensions *dims. */
int attn_block_mask_upload(fa_backend *be, const fa_problem *p, void **mask_out,
                           fa_mod_mask_dims *dims, char *err, size_t errlen);
/* in's captured tensors and block mask into a. */
void attn_mod_params(const attn_inputs *in, fa_params *a);
/* A block mask of dimensions bm (fa_mod_mask_shape) at mask into a. */
void attn_block_mask_params(const void *mask, fa_mod_mask_dims bm, fa_params *a);
/* Op decode: the layouts of the pools (sb a page, sn a token, sh a head). */
fa_layout attn_pool_layout(const fa_problem *p);
fa_layout attn_pool_layout_v(const fa_problem *p);
void attn_inputs_free(fa_backend *be, attn_inputs *in);

/* The outputs of p's op, in order, and the bytes of each: fwd o (kernel
** dtype) and lse (fa_lse_size each); bwd dq, dk, dv (kernel dtype, as q,
** k, v). Returns their number. */
#define ATTN_MAX_OUTPUTS 3
int attn_outputs(const fa_problem *p, size_t bytes[ATTN_MAX_OUTPUTS]);
/* Output i's name ("o", "lse", "dq", ...), the bytes of one of its
** elements, the rows of the problem it has (seq_q or seq_k) and the
** values of a row (dim, dim_v, or 1 for lse). */
const char *attn_output_name(const fa_problem *p, int i);
size_t attn_output_elem_bytes(const fa_problem *p, int i);
int attn_output_seq(const fa_problem *p, int i);
int attn_output_dim(const fa_problem *p, int i);

/* The kernel's argument block for contiguous tensors at the given addresses. */
fa_params attn_params(const fa_problem *p, const void *q, const void *k, const void *v,
                      void *o, void *lse, void *ws);

/* Encode the tensor maps kernel k reads (k->tma) into a->tmap, over the
** tensors and strides a holds for problem p (varlen: over the packed
** tensors, total_q and total_k tokens as one batch); 0 when k has none. FA_EINVAL
** with a message when the backend refuses one (rows not a multiple of 16
** bytes, say), FA_ENODEV on a backend without TMA. */
int attn_tmaps(fa_backend *be, const gen_kernel *k, const fa_problem *p, fa_params *a,
               char *err, size_t errlen);

/* The shapes of kernel k's k->nlaunch launches on problem p, in order,
** each naming the entry of the compiled program it runs (gen_launch.fn). */
int attn_launch_shapes(const gen_kernel *k, const fa_problem *p, gen_launch *shapes,
                       char *err, size_t errlen);

/* Run kernel k (compiled as prog) once on p's op: every launch of it, in
** order, with its workspaces allocated for the run and its outputs
** poisoned; host[i] receives output i of attn_outputs. Counters are added
** to ctr (may be NULL); launch_ms (may be NULL) is the wall time of the
** launches alone. */
int attn_run_op(fa_backend *be, const fa_program *prog, const gen_kernel *k,
                const fa_problem *p, const attn_inputs *in, const fa_run_opts *opts,
                void *const *host, fa_counters *ctr, double *launch_ms, char *err,
                size_t errlen);

/* The forward pass's attn_run_op: o_host receives batch*heads*seq_q*dim
** elements in the kernel's dtype, lse_host batch*heads*seq_q logsumexps
** (fa_lse_size bytes each). */
int attn_run(fa_backend *be, const fa_program *prog, const gen_kernel *k,
             const fa_problem *p, const attn_inputs *in, const fa_run_opts *opts,
             void *o_host, void *lse_host, fa_counters *ctr, double *launch_ms,
             char *err, size_t errlen);

/* The outputs of a launch already judged (attn_outputs', one after the
** other), which every later launch of a deterministic kernel must repeat
** bit for bit. attn_time sets the rest when one does not: which launch,
** and the first element that differs (its output, and its index there). */
typedef struct attn_expect {
  const void *out;
  int differs;
  const char *launch;      /* "warm-up launch 2", "the last timed launch" */
  int output;              /* attn_outputs' index */
  size_t at;               /* the element's index in that output */
} attn_expect;

#define ATTN_WARMUPS 3

/* Time kernel k on the inputs, on fresh outputs: ATTN_WARMUPS runs of
** every launch of its op (the module's first, clocks, caches of code),
** then backend_time's for about budget_ms with the L2 flushed in between.
** With want, the outputs of each warm-up run (poisoned before it) and of
** the last timed run are compared with want's: a difference is no error
** (the timing stands), want says where. */
int attn_time(fa_backend *be, const fa_program *prog, const gen_kernel *k,
              const fa_problem *p, const attn_inputs *in, int budget_ms, attn_expect *want,
              fa_timing *t, int *ctas_per_sm, char *err, size_t errlen);

/* Floating-point operations of the problem: 4 * batch * heads * dim per
** visible (query, key) pair for the forward pass, 10 for the backward (2.5
** times, as the FlashAttention papers count it), the pairs counted exactly
** under a causal mask. */
double attn_flops(const fa_problem *p);

/* Bytes a kernel must move at least: Q, K, V read, O and lse written; for
** the backward pass Q, K, V, O, dO and lse read, dQ, dK and dV written. */
double attn_bytes(const fa_problem *p);

#endif
