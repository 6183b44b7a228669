/*
** estimate.c
** The throughput estimate of estimate.h, from one table of constants.
*/
#include <math.h>
#include <string.h>

#include "estimate.h"

/* The constants, and where they come from:
**  [A] NVIDIA A100 Tensor Core GPU Architecture (whitepaper, 2020): 108
**      SMs, boost 1410 MHz; dense FP16/BF16 tensor 312 TFLOP/s = 108 x
**      1.41 GHz x 2048 FLOP/clk/SM; 64 FP32 and 32 FP64 lanes per SM;
**      164 KB shared memory per SM, 64K 32-bit registers per SM, 2048
**      threads and 32 CTAs per SM.
**  [H] NVIDIA H100 Tensor Core GPU Architecture (whitepaper, 2022), SXM5:
**      132 SMs; dense FP16/BF16 tensor 989.4 TFLOP/s = 132 x 1.83 GHz x
**      4096 FLOP/clk/SM (wgmma); 128 FP32 and 64 FP64 lanes per SM; 228 KB
**      shared memory per SM, 64K registers, 2048 threads, 32 CTAs per SM.
**      H200 has H100's SM and clocks (H200 datasheet: the same 989 TFLOP/s).
**  [G] CUDA C++ Programming Guide, arithmetic instruction throughput table
**      (compute capability 8.0 and 9.0): 16 results per clock per SM for
**      the special functions (MUFU: exp2, rcp, rsqrt); one warp instruction
**      issued per clock per scheduler, four schedulers per SM; 1 KB of
**      shared memory reserved per CTA; 32 banks x 4 bytes = 128 bytes of
**      shared memory per clock per SM.
**  [M] mma.sync on Hopper: no vendor figure. Taken as 2/3 of the SM's wgmma
**      rate, as microbenchmarks of H100/H800 measure (Luo et al.,
**      "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture",
**      2024): the estimate for sm_90 kernels built on mma.sync is only as
**      good as that figure.
**  [B] Peak DRAM bandwidth: A100 whitepaper, 1555 GB/s (40 GB HBM2; the
**      80 GB part has 2039); H100 datasheet, SXM5 (HBM3), 3.35 TB/s;
**      H200 datasheet, 4.8 TB/s (HBM3e).
**  [F] Why a warp's tensor and other work do not overlap within the warp:
**      Dao, "FlashAttention-2" (2023), section 3.1: non-matmul FLOPs cost
**      16 times a matmul FLOP on A100 (19.5 against 312 TFLOP/s), so the
**      softmax's share of the time is large; Shah et al., "FlashAttention-3"
**      (2024), section 3.1: the softmax of a block depends on its S = Q K^T
**      and P V on its P, so within a warp they run one after the other, and
**      only other warps (ping-pong between warpgroups) fill the tensor
**      cores while one computes its softmax. */
static const estimate_gpu gpus[] = {
  {"a100", "sm_80", 108, 1.41, 2048, 0, 64, 32, 16, 4, 128, 65536, 167936, 1024, 2048, 32, 1555},
  {"h100", "sm_90", 132, 1.83, 4096.0 * 2 / 3, 4096, 128, 64, 16, 4, 128, 65536, 233472, 1024,
   2048, 32, 3352},
  {"h200", "sm_90", 132, 1.83, 4096.0 * 2 / 3, 4096, 128, 64, 16, 4, 128, 65536, 233472, 1024,
   2048, 32, 4800},
};

#define NGPUS (sizeof gpus / sizeof gpus[0])

const estimate_gpu *estimate_gpu_find(const char *name) {
  for (size_t i = 0; name && i < NGPUS; i++)
    if (!strcmp(gpus[i].name, name)) return &gpus[i];
  return NULL;
}

const char *estimate_gpu_names(void) { return "a100, h100 or h200"; }

const estimate_gpu *estimate_gpu_for_arch(const char *arch) {
  if (!arch) return NULL;
  if (!strcmp(arch, "sm_80")) return &gpus[0];
  if (!strcmp(arch, "sm_90") || !strcmp(arch, "sm_90a")) return &gpus[1];
  return NULL;
}

const estimate_gpu *estimate_gpu_for_device(const char *device_name) {
  static const char *const keys[] = {"A100", "H100", "H200"};
  for (size_t i = 0; device_name && i < NGPUS; i++)
    if (strstr(device_name, keys[i])) return &gpus[i];
  return NULL;
}

double estimate_peak_tflops(const estimate_gpu *g, const char *dtype) {
  double per_clk = 0;   /* FLOP per clock per SM */
  if (!strcmp(dtype, "bf16") || !strcmp(dtype, "fp16"))
    per_clk = g->hgmma_flop_clk > 0 ? g->hgmma_flop_clk : g->mma_flop_clk;
  else if (!strcmp(dtype, "fp32")) per_clk = 2 * g->ffma_clk;
  else if (!strcmp(dtype, "fp64")) per_clk = 2 * g->dfma_clk;
  return per_clk * g->sms * g->clock_ghz / 1e3;
}

/* Resident CTAs per SM: registers (allocated per warp in units of 256),
** shared memory (with the CTA's reserved KB), threads, the CTA limit. */
static int ctas_per_sm(const estimate_gpu *g, const estimate_tile *t, const char **limit) {
  int regs = t->registers < 1 ? 1 : t->registers;
  int per_warp = (regs * 32 + 255) / 256 * 256;
  int by_regs = g->regs_sm / per_warp / t->warps;
  int by_smem = g->smem_sm / (t->smem_bytes + g->smem_reserved_cta);
  int by_threads = g->threads_sm / (32 * t->warps);
  int n = g->ctas_sm;
  *limit = "ctas";
  if (by_threads < n) n = by_threads, *limit = "threads";
  if (by_smem < n) n = by_smem, *limit = "smem";
  if (by_regs < n) n = by_regs, *limit = "registers";
  return n;
}

/* The cycles of one warp's dependent chain per iteration on its
** scheduler [F]: its mma.sync on the scheduler's quarter of the tensor
** pipe, then the rest of its instructions, issued at one a clock or held
** by its MUFU on the scheduler's quarter of the MUFU pipe, whichever is
** longer. The SM's pipes (estimate_compute) bound many resident warps that
** overlap each other; this bounds few: with one warp per scheduler the
** iteration takes the chain, with enough warps the busiest pipe. A CTA's
** warps meet at a barrier every K/V block, so those of one CTA that share
** a scheduler (more than 4 warps) are taken in phase, their chains one
** after the other; only warps of other CTAs fill the gaps. */
static double chain_cycles(const estimate_gpu *g, const sass_counts *c, int warps) {
  if (strcmp(c->mma, "HMMA")) return 0;  /* FMA products issue with the rest; wgmma is asynchronous */
  double tensor = (double)c->loop_hmma * 4096 / (g->mma_flop_clk / 4);
  double other = (double)(c->loop_instructions - c->loop_hmma) / (g->issue_clk / 4);
  double mufu = (double)c->loop_mufu * 32 / (g->mufu_clk / 4);
  return (warps + 3) / 4 * (tensor + (mufu > other ? mufu : other));
}

int estimate_compute(const estimate_gpu *g, const sass_counts *c, const estimate_tile *t,
                     estimate *out) {
  memset(out, 0, sizeof *out);
  /* An inner loop of unknown trip count: the counts are not per iteration. */
  if (!c->found || (c->inner_loops && !c->inner_trips) || t->warps < 1 || t->smem_bytes < 0 || !(t->flops_per_warp > 0)) return -1;
  out->ctas_per_sm = ctas_per_sm(g, t, &out->limit);
  if (out->ctas_per_sm < 1) return 0;
  double warps = (double)out->ctas_per_sm * t->warps;
  double product = (double)c->loop_hmma;
  if (!strcmp(c->mma, "HMMA")) product *= 4096 / g->mma_flop_clk;  /* m16n8k16: 4096 FLOP */
  else if (!strcmp(c->mma, "HGMMA"))
    product *= g->hgmma_flop_clk > 0 ? t->flops_per_warp / (double)c->loop_hmma / g->hgmma_flop_clk : 0;
  else product *= 32 / (!strcmp(c->mma, "DFMA") ? g->dfma_clk : g->ffma_clk);
  out->cyc_product = warps * product;
  out->cyc_mufu = warps * (double)c->loop_mufu * 32 / g->mufu_clk;
  out->cyc_issue = warps * (double)c->loop_instructions / g->issue_clk;
  /* An LDSM is taken as .x4 (512 bytes a warp), an LDS as one 128-byte wavefront. */
  out->cyc_smem = warps * ((double)c->loop_ldsm * 512 + (double)c->loop_lds * 128) / g->smem_bytes_clk;
  double worst = out->cyc_product;
  out->bound = strcmp(c->mma, "HMMA") && strcmp(c->mma, "HGMMA") ? "fma" : "tensor";
  if (out->cyc_mufu > worst) worst = out->cyc_mufu, out->bound = "mufu";
  if (out->cyc_issue > worst) worst = out->cyc_issue, out->bound = "issue";
  if (out->cyc_smem > worst) worst = out->cyc_smem, out->bound = "smem";
  out->cyc_chain = chain_cycles(g, c, t->warps);
  if (out->cyc_chain > worst) worst = out->cyc_chain, out->bound = "chain";
  if (!(worst > 0)) return -1;
  out->issue_share = out->cyc_issue / worst;
  out->tflops = warps * t->flops_per_warp / worst * g->clock_ghz * 1e9 * g->sms / 1e12;
  return isfinite(out->tflops) ? 0 : -1;
}
