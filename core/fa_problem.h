/*
** fa_problem.h
** What an attention problem is, independent of any kernel or backend.
*/
#ifndef FA_PROBLEM_H
#define FA_PROBLEM_H

#include <stddef.h>

/* Head dims 1 to 576: DeepSeek's MLA attends over 576 (its 512-wide
** latent and 64 of rotary position), V's 512. */
#define FA_DIM_MAX 576
#define FA_DIM_MAX_TEXT "576"

/* fp16 and bf16 are the tensor-core family's: inputs and O in 16 bits,
** accumulation and the logsumexp in fp32. e4m3 (OCP FP8, as CUDA's
** __nv_fp8_e4m3) is Hopper's fp8: Q, K and V in 8 bits, O in bf16
** (fa_out_dtype), accumulation and the logsumexp in fp32. */
typedef enum fa_dtype { FA_FP32 = 0, FA_FP64 = 1, FA_FP16 = 2, FA_BF16 = 3, FA_E4M3 = 4 } fa_dtype;
#define FA_NDTYPES 5

/* The operation a kernel computes: the forward pass, the backward pass,
** split-KV decoding. A family declares one (templates/space.lua); the
** database keys its results by it. FA_OP_FWD is 0 so that a problem set
** up field by field is a forward one. */
typedef enum fa_op { FA_OP_FWD = 0, FA_OP_BWD = 1, FA_OP_DECODE = 2 } fa_op;
#define FA_NOPS 3

struct fa_mod;
struct fa_mod_data;

typedef struct fa_problem {
  int batch, heads;
  int seq_q, seq_k;
  int dim;       /* Q's and K's head dim */
  int dim_v;     /* V's and O's head dim: 0 means dim (192/128, 576/512 in DeepSeek's MLA) */
  fa_dtype dtype;
  int causal;     /* bottom-right aligned when seq_q != seq_k */
  double scale;   /* 0 means 1/sqrt(dim) */
  fa_op op;
  int kv_group;   /* Q heads per K/V head (GQA, MQA): 0 or 1 when each has its own.
                  ** Only launch grids over K/V heads read it; not part of a tuned key. */
  const struct fa_mod *mod;  /* a score or mask modification (fa_mod.h), or NULL; the
                             ** caller keeps it alive while the problem is in use */
  const struct fa_mod_data *mod_data;  /* its captured tensors on the host (fa_mod.h), or
                                       ** NULL: what the reference reads and block masks
                                       ** are built from; the caller keeps it alive */
  /* Decoding over a KV cache (op decode): seq_q is the new tokens of each
  ** sequence, seq_k the cache's capacity, kv_group part of the key. */
  int page;             /* tokens per page of a paged cache; 0: one page per sequence
                        ** (a contiguous cache) */
  const int *kv_lens;   /* each sequence's keys (batch of them, 0 to seq_k), or NULL: all
                        ** seq_k; the caller keeps it alive */
  int append;           /* op decode: seq_q new keys and values per sequence go into the
                        ** cache before attending (templates/append.lua); the library's,
                        ** not part of a tuned key */
  int varlen;           /* op fwd, bwd: a variable-length batch, packed (fa_params.h), seq_q
                        ** and seq_k the longest sequence's; the kernel's addressing,
                        ** not part of a tuned key */
  const int *q_lens;    /* varlen: each sequence's queries, with kv_lens its keys (the
                        ** timing model's), or NULL; the caller keeps it alive */
  const float *descale;  /* e4m3: NULL (1), or q's, k's and v's descales one after the
                         ** other, each (batch, kv heads) (fa_params.h's q_descale, ...),
                         ** or per block (descale_rows; fa_problem_descales gives the
                         ** counts); the caller keeps it alive */
  int descale_rows;     /* e4m3: 0, a descale per (batch, K/V head); R, a power of two
                        ** from 64, a descale per block of R rows of each head (fa_params.h);
                        ** the kernel's addressing (wg's blockscale), not part of a
                        ** tuned key */
  int paged;            /* op fwd: K and V read from a KV cache (fa_params.h's block
                        ** table, cache_batch_idx and seqlens_k; the library's
                        ** kvcache call with many new tokens), seq_k the capacity
                        ** or the longest; the kernel's addressing, not part of a
                        ** tuned key */
} fa_problem;

/* Strides, in elements, of a (batch, heads, seq, dim) tensor; dim stride 1. */
typedef struct fa_layout { long long sb, sh, sn; } fa_layout;

const char *fa_dtype_name(fa_dtype t);         /* "fp32", "fp64", "fp16", "bf16", "e4m3" */
int fa_dtype_parse(const char *s, fa_dtype *t); /* 0 on success, -1 unknown */
const char *fa_op_name(fa_op op);              /* "fwd", "bwd", "decode" */
int fa_op_parse(const char *s, fa_op *op);      /* 0 on success, -1 unknown */
int fa_dtype_size(fa_dtype t);                  /* bytes per element of Q, K, V (and O: its
                                                ** own, fa_out_dtype's, differs for e4m3) */
fa_dtype fa_out_dtype(fa_dtype t);              /* O's dtype for inputs of t: bf16 for e4m3 */
int fa_lse_size(fa_dtype t);                    /* bytes per logsumexp: 4 for 16-bit types */
double fa_problem_scale(const fa_problem *p);  /* scale, resolving 0 */
int fa_problem_dim_v(const fa_problem *p);     /* dim_v, resolving 0 */
int fa_problem_group(const fa_problem *p);     /* kv_group, resolving 0 to 1 */
int fa_problem_kv_heads(const fa_problem *p);  /* heads / the group */
/* The descales of an e4m3 problem, each of q's, k's and v's: (batch, kv
** heads) without descale_rows, else q's (batch, heads, ceil(seq_q / R)) and
** k's and v's (batch, kv heads, ceil(seq_k / R)). */
void fa_problem_descales(const fa_problem *p, size_t count[3]);
/* fa_params.h's descale_shift for descale_rows: log2 of it, 0 for 0. */
int fa_descale_shift(int descale_rows);
/* The fields of a tuning key that only some ops have: the batch asked for,
** the GQA ratio and the page size. Decoding keys by all three, the backward
** pass by the GQA ratio alone, the forward pass by none (0, 1, 0). */
typedef struct fa_key_extra {
  int batch, kv_group, page;
} fa_key_extra;
fa_key_extra fa_problem_key_extra(const fa_problem *p);
/* Op decode: tokens per page (page, resolving 0 to seq_k) and the block
** table's entries per sequence (ceil(seq_k / page)); sequence b's keys
** (kv_lens[b], or seq_k). */
int fa_problem_page(const fa_problem *p);
int fa_problem_pages_per_seq(const fa_problem *p);
int fa_problem_kv_len(const fa_problem *p, int b);
/* The multiplier and shift of FA_PAGE_OF (fa_params.h) for page size d
** (1 to 2^31 - 1): shift = ceil(log2 d), magic = 2^32 (2^shift - d) / d + 1. */
void fa_page_divisor(int d, unsigned *magic, int *shift);
/* The head dims as messages give them: "64", or "192/128" when V's (dim_v:
** 0 is dim) differs. */
void fa_dims_text(int dim, int dim_v, char *buf, size_t n);
/* A contiguous tensor of seq rows of Q's and K's head dim (Q, K, dQ, dK),
** and of V's (V, O, dO, dV). */
fa_layout fa_layout_contiguous(const fa_problem *p, int seq);
fa_layout fa_layout_contiguous_v(const fa_problem *p, int seq);

/* Element i of an array of dtype t, exactly as a double; and x stored
** there, rounded to nearest (even), returning the value stored. */
double fa_elem_get(const void *a, fa_dtype t, size_t i);
double fa_elem_put(void *a, fa_dtype t, size_t i, double x);

#endif
