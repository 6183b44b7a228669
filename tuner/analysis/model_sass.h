/*
** model_sass.h
** The timing model's inputs from a kernel: its SASS loops translated into
** model_insn (model.h) for a GPU, the GPU's machine, the kernel's launch,
** and the whole kernel's time over the waves of CTAs across the SMs.
*/
#ifndef MODEL_SASS_H
#define MODEL_SASS_H

#include "estimate.h"
#include "model.h"
#include "sass.h"

/* The machine of a GPU, beyond estimate_gpu's throughputs (model_sass.c
** cites each figure). */
typedef struct model_gpu {
  const estimate_gpu *g;
  double alu_lanes;        /* integer and compare/select lanes per SM */
  double imad_lanes;       /* IMAD lanes per SM */
  double smem_latency;     /* clocks: LDS, LDSM, SHFL, L1-hit LDL */
  double mufu_latency;     /* clocks: MUFU and conversions */
  double l2_latency;       /* clocks: a copy from L2 */
  double l2_bytes_clk;     /* the whole L2's bandwidth, bytes per clock */
  double hgmma_latency;    /* clocks after a wgmma group's last tensor clock */
  double tensor_sustained; /* the share of wgmma's nominal rate sustained at full load [S] */
} model_gpu;

/* The machine of g into *out: 0, or -1 for a GPU without one. */
int model_gpu_of(const estimate_gpu *g, model_gpu *out);

/* The problem: batch, heads, seq_q, seq_k, dim, causal, element bytes;
** backward: the backward pass, whose main kernel (dK, dV) runs a CTA per
** K/V block and walks the query blocks. */
struct fa_mod;
struct fa_mod_data;

typedef struct model_problem {
  int batch, heads, seq_q, seq_k, dim, causal, elem_bytes;
  int backward;
  const struct fa_mod *mod;  /* a mask's K/V blocks a CTA skips (fa_mod_block); NULL none */
  const struct fa_mod_data *mod_data;  /* its captured tensors on the host, or NULL: a block
                                       ** whose class depends on them counts as seen */
  /* Decoding (op decode): seq_q new tokens of each sequence over its
  ** kv_lens[b] cached keys (NULL: seq_k each). Every op: heads query heads
  ** reading K/V head h / kv_group (GQA; 0 or 1: one each). */
  int decode;
  int kv_group;
  const int *kv_lens;
  /* A variable-length batch (op fwd): sequence b's q_lens[b] queries over
  ** its kv_lens[b] keys, causal on its own; seq_q and seq_k the longest,
  ** which the grid covers (its CTAs past a sequence stop at once). */
  const int *q_lens;
} model_problem;

/* How the kernel runs: its tile and launch. consumers 0: a plain kernel
** whose warps all run the main loop; else a warp-specialized one. */
typedef struct model_launch {
  /* A CTA's extent along the axis the CTAs split (the forward pass's
  ** query rows, the backward pass's keys) and an iteration's along the one
  ** its main loop walks (keys; query rows). */
  int block_m, block_n, threads, smem_bytes, registers;
  int consumers;           /* consumer warpgroups; 0 plain */
  int stages;              /* K/V stages */
  int persistent;          /* 1: one CTA per slot loops over tiles (FlashAttention-3) */
  int longest_first;       /* a persistent scheduler handing out the longest tiles first */
  int snake;               /* a static one: tile i to slot i mod slots, every other round
                              in reverse (fatune's wg); else the slot free first */
  int heavy_first;         /* query blocks launched from the last down in each (batch, head) */
  int dq_accum;            /* the backward pass adds dQ into a float accumulator (zeroed by
                              its first launch, converted by its last) */
  int dq_acc_row_bytes;    /* that accumulator's bytes per query row, its copies and
                              padding included (each written once and read once apart) */
  int ldsm_ways;           /* times over each ldmatrix reads shared memory (bank
                              conflicts); 0 or 1: none */
  int red_lines;           /* 128-byte lines each warp-wide RED (global atomic add)
                              touches; 0: as many as a coalesced warp's */
  int kv_head_ctas;        /* the main launch runs a CTA per K/V head, walking its group's
                              query heads in turn (fatune's backward kernels) */
  int gqa_part_bytes;      /* under GQA the backward pass writes dK and dV per query head,
                              this many bytes an element, and sums each group's after
                              (FlashAttention-2: 2, its dtype; tcbwd -qhead: 4); 0: not so */
  int splits;              /* decoding: CTAs sharing a sequence's keys, their partials
                              merged by a combine launch when more than 1 */
  int decode_per_head;     /* decoding: a CTA per query head's rows, each of a GQA group's
                              CTAs reading its K/V head (FlashAttention-2 with more than
                              one new token); 0: the group's rows packed into a CTA */
  int v_transposed;        /* fp8 (wg): a launch before the main one writes V transposed */
} model_launch;

/* A kernel ready to simulate: its roles' instructions (owned). */
typedef struct model_built {
  model_kernel k;
  model_insn *insn[MODEL_MAX_ROLES];
  int pv_before_exp;       /* the consumers' wait for P V is issued before their first MUFU.EX2 */
  int ex2_before_pv_wait;  /* how many MUFU.EX2 come first (-1: no such wait) */
} model_built;

/* Builds the kernel from its SASS trace. 0, or -1 with a message. */
int model_build(const model_gpu *m, const sass_trace *t, const model_launch *l,
                const model_problem *p, model_built *out, char *err, size_t errlen);
void model_built_free(model_built *b);

/* The prediction for the whole kernel. */
typedef struct model_result {
  int ctas_per_sm;
  const char *limit;       /* what bounds ctas_per_sm */
  double cycles_per_block; /* per K/V block per SM (every resident CTA's block) */
  double time_us, tflops;
  const char *bound;       /* "tensor pipe", "issue", "MUFU", "FMA pipe", "ALU pipe",
                           ** "shared memory", "L2", "DRAM", "pipeline wait" or "latency" */
  double util[8];          /* tensor, issue, MUFU, FMA, ALU, shared memory, L2, DRAM: busy share */
  double wait_share;       /* the consumers' share of time blocked on waits */
  double waves, wave_efficiency;  /* CTA waves (or tiles per slot), busy share of the SMs */
  double flops;
  double kv_bytes;         /* decoding: the K/V cache's bytes read (each K/V head once) */
  double combine_us;       /* decoding: the combine launch's share of time_us */
  model_run run;           /* the steady run (with its timeline when asked) */
} model_result;

extern const char *const model_util_names[8];

int model_predict(const model_gpu *m, const model_built *b, const model_launch *l,
                  const model_problem *p, int trace, model_result *out, char *err, size_t errlen);

/* FlashAttention-2's choice of splits for decoding problem p on g
** (flash_api.cpp: num_splits_heuristic over set_params_splitkv's blocks):
** the fewest splits whose wave efficiency is within 85% of the best. */
int model_fa2_splits(const model_problem *p, const estimate_gpu *g);
void model_result_free(model_result *r);

/* The register count of `function` in a cubin (its .nv.info
** EIATTR_REGCOUNT), or -1. */
int model_cubin_registers(const void *cubin, size_t size, const char *function);

#endif
