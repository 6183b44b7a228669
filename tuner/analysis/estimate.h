/*
** estimate.h
** A static throughput estimate from the SASS counts of a kernel's main
** loop (sass.h) for a named GPU: per iteration of every warp resident on
** an SM, the cycles each pipe needs (tensor or FMA pipe for the product,
** MUFU, instruction issue, shared-memory bandwidth), the bound one, and
** the TFLOP/s that bound allows. For mma.sync kernels, one more bound:
** a warp's chain, its tensor work then the softmax that depends on it, which
** only the other warps resident on its scheduler can overlap, so that a
** kernel with one warp per scheduler pays the sum. It knows nothing of
** other latency, of the memory system beyond shared memory, or of how
** well warps hide each other's stalls: an upper bound to rank variants by,
** not a prediction of a measurement.
*/
#ifndef ESTIMATE_H
#define ESTIMATE_H

#include "gen.h"
#include "sass.h"

typedef struct estimate_gpu {
  const char *name;       /* "a100" */
  const char *arch;       /* the arch it defaults for: "sm_80" */
  int sms;
  double clock_ghz;       /* the clock the vendor's peak figures use */
  double mma_flop_clk;    /* HMMA (mma.sync) 16-bit FLOP per clock per SM */
  double hgmma_flop_clk;  /* HGMMA (wgmma) FLOP per clock per SM; 0: none */
  double ffma_clk, dfma_clk;  /* FMA lanes per clock per SM */
  double mufu_clk;        /* MUFU results per clock per SM */
  double issue_clk;       /* warp instructions issued per clock per SM */
  double smem_bytes_clk;  /* shared-memory bandwidth per SM */
  int regs_sm, smem_sm, smem_reserved_cta, threads_sm, ctas_sm;
  double dram_gbs;        /* peak DRAM bandwidth, GB/s: the roofline's slope */
  double mma16_flop_clk;  /* HMMA accumulating in f16: FLOP per clock per SM */
} estimate_gpu;

/* The GPU of a name ("a100", "h100", "h200"), or NULL. */
const estimate_gpu *estimate_gpu_find(const char *name);
/* The names, "a100, h100, ... or t4". */
const char *estimate_gpu_names(void);
/* The GPU an arch defaults to (sm_80: a100; sm_90, sm_90a: h100), or NULL. */
const estimate_gpu *estimate_gpu_for_arch(const char *arch);
/* The GPU of a device's name ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"), or NULL. */
const estimate_gpu *estimate_gpu_for_device(const char *device_name);

/* The vendor's dense peak TFLOP/s for a dtype ("bf16", "fp16": the tensor
** cores, wgmma where there is one; "fp32", "fp64": FMA lanes), the
** roofline's ceiling; 0 for another dtype. */
double estimate_peak_tflops(const estimate_gpu *g, const char *dtype);

/* The clocks of the SM's whole tensor pipe that one warp's loop_hmma take,
** each HMMA (m16n8k16) at its rate: those accumulating in f16 at
** mma16_flop_clk, the rest at mma_flop_clk. */
double estimate_hmma_cycles(const estimate_gpu *g, const sass_counts *c);

/* What the estimate needs of the variant besides its SASS. */
typedef struct estimate_tile {
  int warps;              /* per CTA */
  int registers;          /* per thread, from ptxas */
  int smem_bytes;         /* per CTA */
  double flops_per_warp;  /* useful FLOPs per warp per iteration: 4 block_m block_n dim / warps */
} estimate_tile;

typedef struct estimate {
  int ctas_per_sm;        /* 0: the kernel does not fit an SM */
  const char *limit;      /* what bounds ctas_per_sm: "registers", "smem", "threads", "ctas" */
  double cyc_product, cyc_mufu, cyc_issue, cyc_smem;  /* per iteration of the SM's warps */
  double cyc_chain;       /* a warp's mma.sync, then its other work, on its scheduler, times
                          ** the warps of its CTA there (in phase); 0: no HMMA */
  const char *bound;      /* "tensor" (or "fma"), "mufu", "issue", "smem" or "chain" */
  double issue_share;     /* cyc_issue over the bound's cycles: how near issue is to binding,
                          ** which ranks variants of the same TFLOP/s (less first) */
  double tflops;          /* the bound's TFLOP/s over the whole GPU */
} estimate;

/* 0, or -1 when c has no main loop, an inner loop of unknown trip count,
** or t is not sensible. */
int estimate_compute(const estimate_gpu *g, const sass_counts *c, const estimate_tile *t,
                     estimate *out);

/* ---- Warp-specialized kernels (producer and consumer warpgroups, wgmma) ----
** A producer warpgroup issues TMA loads (UTMALDG) of each K/V block; the
** consumer warpgroups run the main loop (HGMMA, the softmax). Per K/V
** block of every CTA resident on an SM: the tensor pipe's cycles at the
** GPU's wgmma rate (the block's 4 block_m block_n dim FLOPs), MUFU and
** issue cycles of the consumer warps only, and the TMA's bytes against
** DRAM bandwidth. The last is a ceiling of its own (tma_tflops), not part
** of the bound: the CTAs of one head read the same K/V blocks, which L2
** serves again, so DRAM bounds a kernel only where nothing is reused.
**
** The chain [F]: a consumer's softmax waits for its S, its P V for its P.
** With Tt a warpgroup's HGMMA time (the SM's whole tensor pipe: its four
** warps sit on the four schedulers) and To its softmax (other instructions
** or MUFU on one scheduler), n consumers take per K/V block
**   n Tt + To            neither: they meet at the same K/V stage, GEMMs
**                        together, then softmax together;
**   max(n Tt, Tt + To)   ping-pong: one's softmax under the other's GEMMs;
**   max(n Tt, To)        intra-warpgroup overlap: S of the next block
**                        issued before this block's softmax. */
typedef struct estimate_wg_tile {
  int consumers;          /* consumer warpgroups per CTA (1-3) */
  int threads;            /* per CTA, producer included */
  int registers;          /* per thread, from ptxas (before setmaxnreg moves them) */
  int smem_bytes;         /* per CTA */
  int block_m, block_n, dim;
  int elem_bytes;         /* of Q, K, V: 2 for fp16 and bf16 */
  int pingpong, overlap;  /* 1: on */
} estimate_wg_tile;

typedef struct estimate_wg {
  estimate e;             /* ctas_per_sm, limit, the cycles, bound and tflops as above */
  double hgmma_per_block; /* HGMMA per consumer warp per K/V block, from the SASS */
  double tma_bytes;       /* UTMALDG bytes per K/V block per CTA: K and V, 2 block_n dim */
  double cyc_tma;         /* per K/V block of the SM's CTAs, at DRAM bandwidth */
  double tma_tflops;      /* the ceiling DRAM puts on the kernel when L2 reuses nothing */
} estimate_wg;

/* The HGMMA a consumer warpgroup issues per K/V block of a warp-specialized kernel:
** dim / 16 of S = Q K^T (m64 n=block_n k16) and block_n / 16 of O += P V
** (m64 n=dim k16, in n parts of at most 256), for each 64 rows it owns. */
long estimate_wg_hgmma(const estimate_wg_tile *t);

/* The tile of a warp-specialized variant's config (consumers, block_m,
** block_n, dim, dtype) with its launch's threads and ptxas's registers and
** shared memory; -1 for a config lacking a key (without consumers it is no
** warp-specialized kernel). */
int estimate_wg_tile_of(const gen_config *cfg, int threads, int registers, int smem_bytes,
                        estimate_wg_tile *t);

/* 0, or -1 when c has no HGMMA loop or t is not sensible. */
int estimate_wg_compute(const estimate_gpu *g, const sass_counts *c, const estimate_wg_tile *t,
                        estimate_wg *out);

#endif
