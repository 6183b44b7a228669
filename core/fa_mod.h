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

/* The variables' indices, as mod.lua's mod.vars lists them. */
enum { FA_MV_SCORE, FA_MV_B, FA_MV_H, FA_MV_Q, FA_MV_K, FA_MV_SEQ_Q, FA_MV_SEQ_K,
       FA_MV_HEADS, FA_MV_COUNT };

typedef enum fa_mod_code {
  FA_MC_CONST, FA_MC_VAR, FA_MC_ADD, FA_MC_SUB, FA_MC_MUL, FA_MC_DIV, FA_MC_IDIV, FA_MC_IMOD,
  FA_MC_NEG, FA_MC_LT, FA_MC_LE, FA_MC_GT, FA_MC_GE, FA_MC_EQ, FA_MC_NE, FA_MC_AND, FA_MC_OR,
  FA_MC_NOT, FA_MC_SELECT, FA_MC_ABS, FA_MC_MIN, FA_MC_MAX, FA_MC_EXP, FA_MC_EXP2, FA_MC_LOG,
  FA_MC_LOG2, FA_MC_TANH, FA_MC_SQRT, FA_MC_FLOAT, FA_MC_COUNT
} fa_mod_code;

/* The type of the value an op leaves. */
typedef enum fa_mod_type { FA_MT_INT, FA_MT_FLOAT, FA_MT_BOOL } fa_mod_type;

typedef struct fa_mod_op {
  fa_mod_code code;
  double value;      /* FA_MC_CONST: the constant; FA_MC_VAR: the variable's index */
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
} fa_mod;

/* The op of a name mod.lua emits ("add"), or -1. */
int fa_mod_code_of(const char *name);

/* Check that prog (n ops) is a well-formed program leaving one value:
** 0, or -1 with why. */
int fa_mod_check(const fa_mod_op *prog, int n, char *why, size_t whylen);

/* Run a checked program over vars[FA_MV_COUNT], in float64 with the
** kernels' integer semantics (division and modulo truncate). */
double fa_mod_eval(const fa_mod_op *prog, int n, const double vars[FA_MV_COUNT]);

/* The class of a block pair under m's mask, as the kernels' fa_mod_block
** (templates/mod.lua) computes it, by interval arithmetic on the same
** rules: 0 when no key of keys [k_lo, k_hi] is seen by rows [q_lo, q_hi]
** (of batch b, head h), 2 when all are, 1 when it cannot tell; 2 without a
** mask. What the timing model counts a CTA's K/V blocks by. */
int fa_mod_block(const fa_mod *m, int b, int h, int q_lo, int q_hi, int k_lo, int k_hi,
                 int seq_q, int seq_k, int heads);

#endif
