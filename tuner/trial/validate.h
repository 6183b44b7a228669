/*
** validate.h
** Does a kernel compute attention? Fresh seeded random inputs, rounded to
** the kernel's dtype; the float64 reference on those very values; the
** output poisoned before every launch; every element checked. NaN or Inf
** never passes. On the emulator a kernel can be run under two schedules
** and must give the same bits under both, or it has a race.
*/
#ifndef VALIDATE_H
#define VALIDATE_H

#include <stdint.h>

#include "fa_mod.h"
#include "attn_run.h"

/* The norm-relative error a dtype must meet: ||o - ref||_2 / ||ref||_2,
** and the same bound on each logsumexp relative to max(1, |ref|): the
** tolerance of both outputs of the forward pass. The one place tolerances
** are written (README: Validation). */
double val_tolerance(fa_dtype t);

/* Inputs and their reference output for one problem. */
typedef struct val_case {
  fa_problem p;
  unsigned long long seed;
  void *q, *k, *v;        /* kernel dtype, contiguous; op decode: k and v are the KV
                          ** cache's pools of num_pages pages (attn_pool_layout) */
  int *table;             /* op decode: the block table (attn_decode_inputs_upload's) */
  int num_pages;
  int *lens;              /* op decode: p.kv_lens's copy, which p points to; NULL: none */
  fa_mod_data *mod_data;  /* random captured tensors of p.mod's (fa_mod_data_random), which
                          ** p points to, where the problem brought none; NULL: none */
  float *descale;         /* e4m3: random descales of Q, K and V (fa_problem.descale),
                          ** which p points to; NULL: none */
  double *o_ref, *lse_ref;
  double *lse_mag;        /* per row, the size of its largest logit's terms (ref_fwd_io's),
                          ** which the logsumexp's error is judged against; NULL on a GPU's
                          ** oracle case */
  double *o_sens;         /* per row, how far its O moves per relative error of its logits
                          ** (ref_fwd_io's), which O's tolerance widens with; NULL on a
                          ** GPU's oracle case */
  /* The backward pass (op bwd): its further inputs, the forward pass's o
  ** and lse (the float64 reference's, rounded as a kernel stores them) and
  ** a random dout; the reference gradients. */
  void *o, *lse, *dout;
  double *dq_ref, *dk_ref, *dv_ref;
  double *dq_mag, *dk_mag; /* the magnitudes of their terms (ref_bwd_io), which dq's and dk's
                              errors are taken relative to */
  double *dv_sens;         /* per row of dv, how far it moves per relative error of the
                              logits (ref_bwd_io's), which dv's tolerance widens with */
  /* Oracle cases: rows also computed in float64 on the CPU, to check the
  ** oracle and every kernel against a reference independent of the GPU. */
  size_t nsample;
  size_t *sample_rows;    /* (b * heads + h) * seq_q + r */
  double *sample_o;       /* nsample x dim */
  double oracle_err;      /* the oracle's own norm-relative error there */
  /* Oracle cases of op bwd, whose gradients are judged on sampled rows
  ** alone (dq_ref, dk_ref, dv_ref NULL): dq's at sample_rows, with the
  ** magnitudes of their terms; dk's and dv's at the key rows sample_krows
  ** ((b * heads + h) * seq_k + r), nsample and nksample x dim. */
  size_t nksample, *sample_krows;
  double *sample_dq, *sample_dq_mag, *sample_dk, *sample_dv;
} val_case;

/* Normal random Q, K, V (and for op bwd dO) from seed; the reference from
** the rounded values. Op decode: K and V scattered into a pool of pages
** in a random order, a sequence's first page shared with the one before
** where both fill it (a common prefix), the table's entries past a
** sequence's length and the tokens of its last page past it pointing at
** NaN, which no kernel may read; the lengths are p's (fa_problem_kv_len). */
int val_case_make(val_case *c, const fa_problem *p, unsigned long long seed, char *err,
                  size_t errlen);

/* What a case does to its normal inputs before they are rounded to the
** dtype: the exact values of Q, K and V ((batch, heads, seq, dim),
** contiguous), changed in place; rng for more random numbers (suite.h). */
typedef void (*val_shape_fn)(const fa_problem *p, double *q, double *k, double *v, uint64_t *rng);

/* val_case_make with the inputs shaped before they are rounded. */
int val_case_make_shaped(val_case *c, const fa_problem *p, unsigned long long seed,
                         val_shape_fn shape, char *err, size_t errlen);

/* splitmix64: the generator the cases draw from. */
uint64_t val_rng_next(uint64_t *s);
void val_case_free(val_case *c);

/* For problems too big for the CPU reference: inputs from seed as above,
** the reference from the naive-attention oracle kernel (gen_render_oracle,
** compiled as oracle) on the backend, and nsample rows in float64 on the
** CPU, which the oracle must match within the dtype's tolerance. For op
** bwd, O and lse are the oracle's (rounded as a kernel stores them), dO
** random, and the reference gradients nsample rows of dq, dk and dv in
** float64 on the CPU, from the oracle's lse and O (for D) where a row
** needs every query's. */
int val_case_make_oracle(val_case *c, const fa_problem *p, unsigned long long seed,
                         fa_backend *be, const fa_program *oracle, const gen_kernel *ok,
                         size_t nsample, char *err, size_t errlen);

/* The case's inputs on the backend: Q, K, V, and for op bwd O, lse and dO. */
int val_inputs_upload(fa_backend *be, const val_case *c, attn_inputs *in, char *err,
                      size_t errlen);

typedef enum val_status { VAL_OK, VAL_INVALID, VAL_CRASHED } val_status;

typedef struct val_opts {
  int nschedules;           /* 1, or 2 to compare the bits of two schedules */
  fa_schedule schedule[2];
  unsigned long long seed;  /* for a random schedule */
  int threads;              /* emulator OS threads per launch */
  void *keep;               /* when set, the first run's outputs are copied there, one
                               after the other (attn_outputs' order and bytes) */
} val_opts;

typedef struct val_result {
  val_status status;
  double rel_err, max_abs_err, lse_err;  /* bwd: rel_err the worst of grad_err */
  double grad_err[3];       /* bwd: norm-relative errors of dq, dk, dv */
  double sample_err;        /* oracle cases: norm-relative error on the CPU rows */
  fa_counters counters;     /* of the first run */
  double run_ms;            /* its launch time */
  char msg[400];            /* why it is not ok */
} val_result;

/* The verdict on one run: each output the case's op declares (validate.c;
** fwd: o in the kernel's dtype, then lse of fa_lse_size bytes each; bwd:
** dq, dk, dv, each to the dtype's tolerance; attn_outputs), in
** outputs[] in that order, laid out as the case's problem, against its
** reference with its own tolerance and, for oracle cases, o's rows in
** float64 (bwd: the gradients on the sampled rows alone, every element
** still finite). Sets r's status, errors and msg (the first failing output's);
** leaves counters and run_ms alone. */
void val_judge(const val_case *c, const void *const *outputs, val_result *r);

/* Element i of a (batch, heads, seq_q, dim) tensor of p as "[b,h,r,d]", or of
** the logsumexp's (batch, heads, seq_q) when dim is 1. */
void val_where(const fa_problem *p, size_t i, int dim, char *buf, size_t n);

/* Element i of output o of p's op (attn_outputs' order) as val_where writes it. */
void val_output_where(const fa_problem *p, int o, size_t i, char *buf, size_t n);

/* Run kernel k on the case and judge it with val_judge; the verdict is in r. -1 only when
** the check itself could not be done (no memory on the backend...). */
int val_check(fa_backend *be, const val_case *c, const attn_inputs *in,
              const fa_program *prog, const gen_kernel *k, const val_opts *o,
              val_result *r, char *err, size_t errlen);

#endif
