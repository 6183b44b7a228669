/*
** fa_mod.h
** A score or mask modification as the float64 reference reads it: the
** postfix programs the generator compiles from its expressions
** (templates/mod.lua), over the variables below. The kernels get the same
** expressions as C; one definition, two readers.
*/
#ifndef FA_MOD_H
#define FA_MOD_H

#include <stddef.h>

#define FA_MOD_MAX_OPS 256
#define FA_MOD_MAX_SPEC 512
#define FA_MOD_MAX_TEXT 16384
#define FA_MOD_MAX_TENSORS 4     /* captured tensors of one modification */
#define FA_MOD_MAX_NAME 32
#define FA_MOD_GRANULE 64        /* rows and keys per entry of a block mask (fa_params.h) */

/* The variables' indices, as mod.lua's mod.vars lists them. */
enum { FA_MV_SCORE, FA_MV_B, FA_MV_H, FA_MV_Q, FA_MV_K, FA_MV_SEQ_Q, FA_MV_SEQ_K,
       FA_MV_HEADS, FA_MV_COUNT };

typedef enum fa_mod_code {
  FA_MC_CONST, FA_MC_VAR, FA_MC_ADD, FA_MC_SUB, FA_MC_MUL, FA_MC_DIV, FA_MC_IDIV, FA_MC_IMOD,
  FA_MC_NEG, FA_MC_LT, FA_MC_LE, FA_MC_GT, FA_MC_GE, FA_MC_EQ, FA_MC_NE, FA_MC_AND, FA_MC_OR,
  FA_MC_NOT, FA_MC_SELECT, FA_MC_ABS, FA_MC_MIN, FA_MC_MAX, FA_MC_EXP, FA_MC_EXP2, FA_MC_LOG,
  FA_MC_LOG2, FA_MC_TANH, FA_MC_SQRT, FA_MC_FLOAT, FA_MC_LOAD, FA_MC_COUNT
} fa_mod_code;

/* The type of the value an op leaves. */
typedef enum fa_mod_type { FA_MT_INT, FA_MT_FLOAT, FA_MT_BOOL } fa_mod_type;

typedef struct fa_mod_op {
  fa_mod_code code;
  double value;      /* FA_MC_CONST: the constant; FA_MC_VAR: the variable's index;
                     ** FA_MC_LOAD: the captured tensor's, which it reads at the index
                     ** on top of the stack */
  fa_mod_type type;
} fa_mod_op;

typedef struct fa_mod {
  char spec[FA_MOD_MAX_SPEC];   /* as given: "softcap=30", or a file's name */
  char text[FA_MOD_MAX_TEXT + 1];  /* the file's text; "" for a built-in */
  char label[FA_MOD_MAX_SPEC];  /* with every parameter: "window=256:0" */
  char hash[17];                /* of its canonical expressions: the variant key's part */
  int nscore, nmask;            /* ops in score[] and mask[]; 0: no such part */
  fa_mod_op score[FA_MOD_MAX_OPS], mask[FA_MOD_MAX_OPS];
  int ndscore;                  /* with a score part: d score[] / d score, for the backward pass */
  fa_mod_op dscore[FA_MOD_MAX_OPS];
  int ntensors;                 /* captured tensors: run-time arguments, 1-D, read as
                                ** name[index]; int32 (FA_MT_INT) or float32 (FA_MT_FLOAT) */
  char tensor_name[FA_MOD_MAX_TENSORS][FA_MOD_MAX_NAME];
  fa_mod_type tensor_type[FA_MOD_MAX_TENSORS];
} fa_mod;

/* A modification's captured tensors on the host: what the reference reads
** and the block classifier bounds. An index outside 0..len-1 reads 0, as
** in the kernels (which also raise a flag). fa_mod_data_init adds, for
** each int tensor, the least and greatest value of every FA_MOD_GRANULE
** elements, so that a range of indices is bounded in time linear in the
** granules it spans. */
typedef struct fa_mod_data {
  const void *ptr[FA_MOD_MAX_TENSORS];
  long long len[FA_MOD_MAX_TENSORS];
  int is_int[FA_MOD_MAX_TENSORS];
  int *lo[FA_MOD_MAX_TENSORS], *hi[FA_MOD_MAX_TENSORS];  /* the granules' bounds */
  void *owned[FA_MOD_MAX_TENSORS];  /* fa_mod_data_random's buffers */
} fa_mod_data;

/* The op of a name mod.lua emits ("add"), or -1. */
int fa_mod_code_of(const char *name);

/* Check that prog (n ops) is a well-formed program leaving one value:
** 0, or -1 with why. */
int fa_mod_check(const fa_mod_op *prog, int n, char *why, size_t whylen);

/* Run a checked program over vars[FA_MV_COUNT] and the captured tensors
** of d (NULL when the modification has none), in float64 with the
** kernels' integer semantics (division and modulo truncate). */
double fa_mod_eval(const fa_mod_op *prog, int n, const double vars[FA_MV_COUNT],
                   const fa_mod_data *d);

/* d over m's tensors ptr[i] of len[i] elements (the caller keeps them alive;
** a length from 0 to 2^31 - 1): 0, or -1 with why (out of memory, a bad
** length). Free with fa_mod_data_free. */
int fa_mod_data_init(fa_mod_data *d, const fa_mod *m, const void *const ptr[], const long long len[],
                     char *why, size_t whylen);
void fa_mod_data_free(fa_mod_data *d);
/* d over random tensors for m that cover every index a problem of these
** sizes reads (fa_mod_extent; the larger of seq_q and seq_k elements where
** that is unbounded), from seed: int tensors nondecreasing ids of a few
** runs of random lengths (documents, the common use), float tensors
** uniform in [-1, 1). What the tuner validates and times a modification's
** variants on. 0, or -1 with why. */
int fa_mod_data_random(fa_mod_data *d, const fa_mod *m, int batch, int heads, int seq_q,
                       int seq_k, unsigned long long seed, char *why, size_t whylen);

/* The elements each of m's tensors needs so that no index read over the
** problem (b < batch, h < heads, q_idx < seq_q, kv_idx < seq_k) falls
** outside it, by interval arithmetic over every program: len[i], or -1
** where an index is not bounded without the tensors' contents (an index
** read from a tensor). What the tuner sizes its random tensors by. */
void fa_mod_extent(const fa_mod *m, int batch, int heads, int seq_q, int seq_k,
                   long long len[FA_MOD_MAX_TENSORS]);

/* The class of a block pair under m's mask, as the kernels' fa_mod_block
** (templates/mod.lua) computes it, by interval arithmetic on the same
** rules: 0 when no key of keys [k_lo, k_hi] is seen by rows [q_lo, q_hi]
** (of batch b, head h), 2 when all are, 1 when it cannot tell; 2 without a
** mask. What the timing model counts a CTA's K/V blocks by. */
int fa_mod_block(const fa_mod *m, const fa_mod_data *d, int b, int h, int q_lo, int q_hi,
                 int k_lo, int k_hi, int seq_q, int seq_k, int heads);

/* The block mask of m over d and a dense problem: its dimensions (bm_b,
** bm_h: 1 where the mask reads no b, h; rows and cols: the FA_MOD_GRANULE
** blocks of seq_q and seq_k), and with out (of bm_b * bm_h * rows * cols
** ints) the class of each (batch, head, Q block, K/V block), laid out in
** that order: what the kernels read through fa_params.block_mask. Time
** linear in the blocks and the tensors' granules. */
typedef struct fa_mod_mask_dims { int bm_b, bm_h, rows, cols; } fa_mod_mask_dims;
/* Whether m's mask reads a captured tensor: its blocks' classes then depend
** on the tensors' values, and the kernels read a block mask. */
int fa_mod_mask_loads(const fa_mod *m);
fa_mod_mask_dims fa_mod_mask_shape(const fa_mod *m, int batch, int heads, int seq_q, int seq_k);
void fa_mod_block_mask(const fa_mod *m, const fa_mod_data *d, int seq_q, int seq_k, int heads,
                       fa_mod_mask_dims dims, int *out);

#endif
