/*
** estimate.c
** The throughput estimate of estimate.h, from one table of constants.
*/
#include <math.h>
#include <stdlib.h>
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
**  [L] L1 and shared memory are one data array per SM with one data path
**      (A100 whitepaper: "combined L1 data cache and shared memory", 192
**      KB; H100 whitepaper: 256 KB): the 128 bytes a clock of [G] carry
**      ldmatrix and LDS, the shared-memory writes of cp.async (LDGSTS, 16
**      bytes a thread), and local memory (LDL/STL, register spills), which
**      lives in L1.
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
**      cores while one computes its softmax.
**  [T4] NVIDIA T4 datasheet and Turing architecture whitepaper (2018):
**      40 SMs (TU104), boost 1590 MHz; FP16 tensor (mixed precision) 65
**      TFLOP/s = 40 x 1.59 GHz x 1024 FLOP/clk/SM; 64 FP32 and 2 FP64
**      lanes per SM; 64 KB shared memory per SM, 1024 threads and 16 CTAs
**      per SM (compute capability 7.5, CUDA C++ Programming Guide, which
**      reserves no shared memory per CTA there); 320 GB/s GDDR6.
**  [GA] NVIDIA Ampere GA102 GPU Architecture (whitepaper, 2020) and the
**      A10 datasheet: 128 FP32 and 2 FP64 lanes per SM; 100 KB shared
**      memory per SM, 1536 threads and 16 CTAs per SM (compute capability
**      8.6). A10: 72 SMs, boost 1695 MHz, FP16/BF16 tensor 125 TFLOP/s
**      dense = 72 x 1.695 GHz x 1024 FLOP/clk/SM, 600 GB/s. RTX 3090: 82
**      SMs, boost 1695 MHz, FP16 tensor with FP32 accumulation 71 TFLOP/s
**      dense (half the 142 with FP16 accumulation: GeForce parts run the
**      FP32-accumulating mma at half rate) = 82 x 1.695 GHz x 512, 936 GB/s.
**  [AD] NVIDIA Ada GPU Architecture (whitepaper, 2022), and the L4 and L40S
**      datasheets: 128 FP32 and 2 FP64 lanes per SM; 100 KB shared memory
**      per SM, 1536 threads and 24 CTAs per SM (compute capability 8.9).
**      L4: 58 SMs, boost 2040 MHz, FP16/BF16 tensor 121 TFLOP/s dense =
**      58 x 2.04 GHz x 1024, 300 GB/s. L40S: 142 SMs, FP16/BF16 tensor
**      362 TFLOP/s dense = 142 x 2.49 GHz x 1024 (the clock that figure
**      implies; the datasheet's boost is 2520 MHz), 864 GB/s. RTX 4090: 128
**      SMs, boost 2520 MHz, FP16 tensor with FP32 accumulation 165.2
**      TFLOP/s dense = 128 x 2.52 GHz x 512 (half rate, as the 3090),
**      1008 GB/s.
**  [GB] NVIDIA RTX Blackwell GPU Architecture (whitepaper, 2025): RTX
**      5090, 170 SMs, boost 2407 MHz, FP16 tensor with FP32 accumulation
**      209.5 TFLOP/s dense = 170 x 2.407 GHz x 512 (half rate), 128 FP32
**      and 2 FP64 lanes per SM, 1792 GB/s; 100 KB shared memory per SM,
**      1536 threads and 32 CTAs per SM (compute capability 12.0).
**  The last column, mma.sync accumulating in FP16: twice the FP32 rate on
**  the GeForce parts (RTX 3090 142, RTX 4090 330.3 and RTX 5090 419
**  TFLOP/s dense with FP16 accumulation, [GA], [AD], [GB]), the same rate
**  on the others.
**  Every part above issues, reads shared memory and runs MUFU as [G]
**  says for its compute capability: 4 schedulers, 128 bytes and 16
**  results a clock per SM; 64K registers per SM.
**  [W] Warp-specialized kernels (estimate_wg_compute): HGMMA at the [H]
**      rate above (hgmma_flop_clk; 989 TFLOP/s dense FP16/BF16 on H100
**      SXM5 and H200, NVIDIA's data sheets), TMA loads (UTMALDG) at the [B]
**      bandwidth, and MUFU and issue at the [G] rates for the consumer
**      warps, which alone run the main loop. */
static const estimate_gpu gpus[] = {
  {"a100", "sm_80", 108, 1.41, 2048, 0, 64, 32, 16, 4, 128, 65536, 167936, 1024, 2048, 32, 1555,
    2048},
  {"h100", "sm_90", 132, 1.83, 4096.0 * 2 / 3, 4096, 128, 64, 16, 4, 128, 65536, 233472, 1024,
    2048, 32, 3352, 4096.0 * 2 / 3},
  {"h200", "sm_90", 132, 1.83, 4096.0 * 2 / 3, 4096, 128, 64, 16, 4, 128, 65536, 233472, 1024,
    2048, 32, 4800, 4096.0 * 2 / 3},
  {"a10", "sm_86", 72, 1.695, 1024, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 16, 600,
    1024},
  {"rtx3090", "sm_86", 82, 1.695, 512, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 16, 936,
    1024},
  {"l40s", "sm_89", 142, 2.49, 1024, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 24, 864,
    1024},
  {"l4", "sm_89", 58, 2.04, 1024, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 24, 300, 1024},
  {"rtx4090", "sm_89", 128, 2.52, 512, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 24, 1008,
    1024},
  {"rtx5090", "sm_120", 170, 2.407, 512, 0, 128, 2, 16, 4, 128, 65536, 102400, 1024, 1536, 32,
    1792, 1024},
  {"t4", "sm_75", 40, 1.59, 1024, 0, 64, 2, 16, 4, 128, 65536, 65536, 0, 1024, 16, 320, 1024},
};

/* How a device names each GPU above (cudaGetDeviceProperties' name holds
** it as a word: "NVIDIA A10", "NVIDIA GeForce RTX 4090", "Tesla T4"). */
static const char *const device_words[] = {"A100", "H100", "H200", "A10", "RTX 3090", "L40S", "L4",
                                           "RTX 4090", "RTX 5090", "T4"};

#define NGPUS (sizeof gpus / sizeof gpus[0])

const estimate_gpu *estimate_gpu_find(const char *name) {
  for (size_t i = 0; name && i < NGPUS; i++)
    if (!strcmp(gpus[i].name, name)) return &gpus[i];
  return NULL;
}

const char *estimate_gpu_names(void) {
  return "a100, h100, h200, a10, rtx3090, l40s, l4, rtx4090, rtx5090 or t4";
}

const estimate_gpu *estimate_gpu_for_arch(const char *arch) {
  if (!arch) return NULL;
  /* The first GPU of the arch, or of the plain arch of an arch-specific one
  ** (a letter after the number: the same GPU). */
  const size_t n = strlen(arch);
  const size_t plain = n > 0 && arch[n - 1] >= 'a' && arch[n - 1] <= 'z' ? n - 1 : n;
  for (size_t i = 0; i < NGPUS; i++)
    if (strlen(gpus[i].arch) == plain && !strncmp(gpus[i].arch, arch, plain)) return &gpus[i];
  return NULL;
}

/* Whether word stands in name as a word of its own: "A10" in "NVIDIA A10"
** and "NVIDIA A10-24GB", not in "NVIDIA A100" or "NVIDIA A10G". */
static int has_word(const char *name, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = strstr(name, word); p; p = strstr(p + 1, word)) {
    const char after = p[n];
    if ((p == name || p[-1] == ' ') && (after == '\0' || after == ' ' || after == '-')) return 1;
  }
  return 0;
}

const estimate_gpu *estimate_gpu_for_device(const char *device_name) {
  for (size_t i = 0; device_name && i < NGPUS; i++)
    if (has_word(device_name, device_words[i])) return &gpus[i];
  return NULL;
}

/* wgmma's FLOP per clock per SM for the product instruction mma: QGMMA
** (fp8) at twice HGMMA's rate (1979 against 989 dense TFLOP/s on the H100
** SXM5: NVIDIA H100 Tensor Core GPU Architecture, table 2). */
static double gmma_rate(const estimate_gpu *g, const char *mma) {
  return g->hgmma_flop_clk * (!strcmp(mma, "QGMMA") ? 2 : 1);
}

double estimate_peak_tflops(const estimate_gpu *g, const char *dtype) {
  double per_clk = 0;   /* FLOP per clock per SM */
  if (!strcmp(dtype, "bf16") || !strcmp(dtype, "fp16"))
    per_clk = g->hgmma_flop_clk > 0 ? g->hgmma_flop_clk : g->mma_flop_clk;
  else if (!strcmp(dtype, "e4m3")) per_clk = gmma_rate(g, "QGMMA");  /* wgmma's fp8 only */
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
double estimate_hmma_cycles(const estimate_gpu *g, const sass_counts *c) {
  const double f16acc = (double)c->loop_hmma_f16acc;  /* m16n8k16: 4096 FLOP each */
  return ((double)c->loop_hmma - f16acc) * 4096 / g->mma_flop_clk +
         f16acc * 4096 / g->mma16_flop_clk;
}

static double chain_cycles(const estimate_gpu *g, const sass_counts *c, int warps) {
  if (strcmp(c->mma, "HMMA")) return 0;  /* FMA products issue with the rest; wgmma is asynchronous */
  double tensor = estimate_hmma_cycles(g, c) * 4;  /* on a quarter of the tensor pipe */
  double other = (double)(c->loop_instructions - c->loop_hmma) / (g->issue_clk / 4);
  double mufu = (double)c->loop_mufu * 32 / (g->mufu_clk / 4);
  return (warps + 3) / 4 * (tensor + (mufu > other ? mufu : other));
}

/* Bytes through the L1/shared-memory data path [L] per iteration of one
** warp: an LDSM taken as .x4 (512 bytes a warp), an LDGSTS as 16 bytes a
** thread, an LDS and an LDL/STL as one 128-byte wavefront. */
static double l1_bytes(const sass_counts *c) {
  return (double)c->loop_ldsm * 512 + (double)c->loop_ldgsts * 512 + (double)c->loop_lds * 128 +
         (double)c->loop_local * 128;
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
  if (!strcmp(c->mma, "HMMA")) product = estimate_hmma_cycles(g, c);
  else if (sass_is_gmma(c->mma))
    product *= g->hgmma_flop_clk > 0 ? t->flops_per_warp / (double)c->loop_hmma / gmma_rate(g, c->mma) : 0;
  else product *= 32 / (!strcmp(c->mma, "DFMA") ? g->dfma_clk : g->ffma_clk);
  out->cyc_product = warps * product;
  out->cyc_mufu = warps * (double)c->loop_mufu * 32 / g->mufu_clk;
  out->cyc_issue = warps * (double)c->loop_instructions / g->issue_clk;
  out->cyc_smem = warps * l1_bytes(c) / g->smem_bytes_clk;
  double worst = out->cyc_product;
  out->bound = strcmp(c->mma, "HMMA") && !sass_is_gmma(c->mma) ? "fma" : "tensor";
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

/* ---- Warp-specialized kernels (estimate.h) ---- */

long estimate_wg_hgmma(const estimate_wg_tile *t) {
  if (t->consumers < 1 || t->block_m % (64 * t->consumers) || t->block_n < 16 || t->dim < 16)
    return 0;
  const long m64 = t->block_m / (64 * t->consumers);   /* m64 slabs per consumer */
  const int k = t->elem_bytes == 1 ? 32 : 16;          /* fp8's wgmma is k32 */
  return m64 * (t->dim / k + (t->dim + 255) / 256 * (t->block_n / k));
}

/* The chain of estimate.h per K/V block of one CTA. */
static double wg_chain(const estimate_gpu *g, const sass_counts *c, const estimate_wg_tile *t,
                       double blocks, double cyc_tensor_cta) {
  const double tt = cyc_tensor_cta / t->consumers;
  const double other = (double)(c->loop_instructions - c->loop_hmma) / blocks / (g->issue_clk / 4);
  const double mufu = (double)c->loop_mufu / blocks * 32 / (g->mufu_clk / 4);
  const double to = mufu > other ? mufu : other;
  if (t->overlap) return cyc_tensor_cta > to ? cyc_tensor_cta : to;
  if (t->pingpong && t->consumers > 1) return cyc_tensor_cta > tt + to ? cyc_tensor_cta : tt + to;
  return cyc_tensor_cta + to;
}

/* An on/off axis: 1 for "1", "on" or "pp", 0 otherwise. */
static int config_flag(const gen_config *cfg, const char *key) {
  const char *v = gen_config_get(cfg, key);
  return v && (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "pp") || !strcmp(v, "ov"));
}

static int config_int(const gen_config *cfg, const char *key) {
  const char *v = gen_config_get(cfg, key);
  char *end;
  const long x = v ? strtol(v, &end, 10) : 0;
  return v && *end == '\0' && x > 0 && x <= 4096 ? (int)x : -1;
}

int estimate_wg_tile_of(const gen_config *cfg, int threads, int registers, int smem_bytes,
                        estimate_wg_tile *t) {
  const char *dt = gen_config_get(cfg, "dtype");
  *t = (estimate_wg_tile){config_int(cfg, "consumers"), threads, registers, smem_bytes,
                          config_int(cfg, "block_m"), config_int(cfg, "block_n"),
                          config_int(cfg, "dim"),
                          dt && (!strcmp(dt, "fp16") || !strcmp(dt, "bf16")) ? 2
                          : dt && !strcmp(dt, "e4m3") ? 1 : -1,
                          config_flag(cfg, "pingpong"), config_flag(cfg, "overlap")};
  /* A config without consumer warpgroups is no warp-specialized kernel. */
  return t->consumers < 0 || t->block_m < 0 || t->block_n < 0 ||
                 t->dim < 0 || t->elem_bytes < 0 ? -1 : 0;
}

int estimate_wg_compute(const estimate_gpu *g, const sass_counts *c, const estimate_wg_tile *t,
                        estimate_wg *out) {
  memset(out, 0, sizeof *out);
  estimate *e = &out->e;
  const long per_block = estimate_wg_hgmma(t);
  if (!c->found || !sass_is_gmma(c->mma) || c->loop_hmma < 1 || per_block < 1 ||
      t->threads < 128 * (t->consumers + 1) || t->smem_bytes < 0 || t->elem_bytes < 1 ||
      !(g->hgmma_flop_clk > 0))
    return -1;
  const estimate_tile all = {t->threads / 32, t->registers, t->smem_bytes, 0};
  e->ctas_per_sm = ctas_per_sm(g, &all, &e->limit);
  if (e->ctas_per_sm < 1) return 0;
  /* K/V blocks per iteration of the loop found: 1 unless the compiler unrolled it. */
  const double blocks = (double)c->loop_hmma / (double)per_block;
  const double ctas = e->ctas_per_sm, warps = ctas * 4 * t->consumers;
  const double flops = ctas * blocks * 4.0 * t->block_m * t->block_n * t->dim;
  out->hgmma_per_block = (double)c->loop_hmma / blocks;
  out->tma_bytes = 2.0 * t->block_n * t->dim * t->elem_bytes;
  e->cyc_product = flops / gmma_rate(g, c->mma);
  e->cyc_mufu = warps * (double)c->loop_mufu * 32 / g->mufu_clk;
  e->cyc_issue = warps * (double)c->loop_instructions / g->issue_clk;
  e->cyc_smem = warps * l1_bytes(c) / g->smem_bytes_clk;
  /* DRAM bytes per clock per SM: the GPU's bandwidth shared by its SMs. */
  out->cyc_tma = ctas * blocks * out->tma_bytes / (g->dram_gbs / (g->sms * g->clock_ghz));
  double worst = e->cyc_product;
  e->bound = "tensor";
  if (e->cyc_mufu > worst) worst = e->cyc_mufu, e->bound = "mufu";
  if (e->cyc_issue > worst) worst = e->cyc_issue, e->bound = "issue";
  if (e->cyc_smem > worst) worst = e->cyc_smem, e->bound = "smem";
  /* Resident CTAs interleave: one CTA's chain against all of them on the pipes. */
  e->cyc_chain = wg_chain(g, c, t, blocks, e->cyc_product / ctas / blocks) * blocks;
  if (e->cyc_chain > worst) worst = e->cyc_chain, e->bound = "chain";
  const double per_s = g->clock_ghz * 1e9 * g->sms / 1e12;   /* cycles to TFLOP/s */
  e->tflops = flops / worst * per_s;
  out->tma_tflops = flops / out->cyc_tma * per_s;
  return isfinite(e->tflops) && isfinite(out->tma_tflops) ? 0 : -1;
}
