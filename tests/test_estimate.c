/*
** test_estimate.c
** The static estimate of a warp-specialized (wg) kernel from hand-written
** SASS counts of its consumer loop: the HGMMA a K/V block takes at
** FlashAttention-3's tiles, the tensor pipe at the H100's wgmma rate
** (its dense peak when nothing else bounds), the consumer warps' MUFU
** taking over when they have more exponentials, an unrolled loop giving
** the same figures, and the TMA's bytes against each GPU's DRAM
** bandwidth as a ceiling of its own.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "estimate.h"

/* FlashAttention-3's d128 tile: 128 x 176, two consumer warpgroups and a
** producer (384 threads), 2 stages of K and V plus Q in 212 KB, ping-pong. */
static const estimate_wg_tile fa3_d128 = {2, 384, 168, 212 * 1024, 128, 176, 128, 2, 1, 0};

static sass_counts consumer_loop(long hgmma, long mufu, long instructions) {
  sass_counts c;
  memset(&c, 0, sizeof c);
  c.found = 1;
  strcpy(c.mma, "HGMMA");
  c.loop_hmma = hgmma, c.loop_mufu = mufu, c.loop_instructions = instructions;
  return c;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

static void test_hgmma_count(void) {
  /* Per warpgroup and block: dim/16 for S, block_n/16 for O, per 64 rows. */
  CHECK(estimate_wg_hgmma(&fa3_d128) == 128 / 16 + 176 / 16, "d128: %ld",
        estimate_wg_hgmma(&fa3_d128));
  estimate_wg_tile d64 = {3, 512, 128, 200 * 1024, 192, 192, 64, 2, 1, 1};
  CHECK(estimate_wg_hgmma(&d64) == 64 / 16 + 192 / 16, "d64: %ld", estimate_wg_hgmma(&d64));
  /* 128 rows on one consumer: two m64 slabs. */
  estimate_wg_tile two = {1, 256, 168, 100 * 1024, 128, 80, 256, 2, 0, 1};
  CHECK(estimate_wg_hgmma(&two) == 2 * (256 / 16 + 80 / 16), "two m64 slabs: %ld",
        estimate_wg_hgmma(&two));
  estimate_wg_tile odd = {2, 384, 168, 1024, 96, 64, 64, 2, 0, 0};   /* 96 rows on 2 consumers */
  CHECK(estimate_wg_hgmma(&odd) == 0, "96 rows on two consumers: %ld", estimate_wg_hgmma(&odd));
}

static void test_bounds(void) {
  const estimate_gpu *h100 = estimate_gpu_find("h100"), *h200 = estimate_gpu_find("h200");
  CHECK(h100 && h200, "the GPU table has h100 and h200");
  if (!h100 || !h200) return;
  const double peak = estimate_peak_tflops(h100, "bf16");
  estimate_wg w;
  /* 88 exponentials per thread a block (64 rows x 176 / 128 threads): 8
  ** warps x 88 x 32 / 16 = 1408 MUFU cycles against 4 x 128 x 176 x 128 /
  ** 4096 = 2816 tensor cycles; 600 instructions, 1200 issue cycles. */
  sass_counts c = consumer_loop(19, 88, 600);
  CHECK(estimate_wg_compute(h100, &c, &fa3_d128, &w) == 0, "estimate");
  CHECK(w.e.ctas_per_sm == 1 && !strcmp(w.e.bound, "tensor") && near(w.e.cyc_product, 2816) &&
          near(w.e.cyc_mufu, 1408) && near(w.e.cyc_issue, 1200) && w.hgmma_per_block == 19,
        "%d CTA, %s-bound, cycles %g %g %g", w.e.ctas_per_sm, w.e.bound, w.e.cyc_product,
        w.e.cyc_mufu, w.e.cyc_issue);
  CHECK(near(w.e.tflops, peak) && fabs(peak - 989.4) < 0.1, "%g TFLOP/s, peak %g", w.e.tflops,
        peak);
  /* The chain: a warpgroup's 1408 tensor cycles, its softmax 704 (88 MUFU x
  ** 32 / 4 a scheduler, more than its 581 other instructions). Ping-pong:
  ** max(2816, 1408 + 704); neither: 2816 + 704, chain-bound; overlap:
  ** max(2816, 704). */
  CHECK(near(w.e.cyc_chain, 2816), "ping-pong chain %g", w.e.cyc_chain);
  estimate_wg_tile none = fa3_d128;
  none.pingpong = 0;
  estimate_wg wn;
  CHECK(estimate_wg_compute(h100, &c, &none, &wn) == 0 && !strcmp(wn.e.bound, "chain") &&
          near(wn.e.cyc_chain, 3520) && near(wn.e.tflops, peak * 2816 / 3520),
        "no ping-pong: %s, chain %g, %g TFLOP/s", wn.e.bound, wn.e.cyc_chain, wn.e.tflops);
  none.overlap = 1;
  CHECK(estimate_wg_compute(h100, &c, &none, &wn) == 0 && !strcmp(wn.e.bound, "tensor") &&
          near(wn.e.cyc_chain, 2816), "overlap: %s, chain %g", wn.e.bound, wn.e.cyc_chain);
  /* K and V of a block by TMA, 2 x 176 x 128 x 2 bytes: at DRAM bandwidth
  ** 2 block_m / 2 bytes FLOP a byte, 128 x 3.352 TB/s. */
  CHECK(w.tma_bytes == 90112 && near(w.tma_tflops, 128 * h100->dram_gbs / 1e3),
        "TMA %g bytes, ceiling %g TFLOP/s", w.tma_bytes, w.tma_tflops);
  /* The ceiling is no bound: a kernel above it still is tensor-bound. */
  CHECK(w.tma_tflops < w.e.tflops, "ceiling %g, estimate %g", w.tma_tflops, w.e.tflops);
  estimate_wg w200;
  CHECK(estimate_wg_compute(h200, &c, &fa3_d128, &w200) == 0 && w200.tma_tflops > w.tma_tflops &&
          near(w200.e.tflops, w.e.tflops), "h200: ceiling %g, estimate %g", w200.tma_tflops,
        w200.e.tflops);
  /* More exponentials: MUFU-bound, at 2816 / 3200 of the peak. */
  c = consumer_loop(19, 200, 600);
  CHECK(estimate_wg_compute(h100, &c, &fa3_d128, &w) == 0 && !strcmp(w.e.bound, "mufu") &&
          near(w.e.tflops, peak * 2816 / 3200), "mufu: %s %g", w.e.bound, w.e.tflops);
  /* Two blocks per iteration (unrolled): the same figures. */
  estimate_wg w2;
  sass_counts c2 = consumer_loop(38, 400, 1200);
  CHECK(estimate_wg_compute(h100, &c2, &fa3_d128, &w2) == 0 && near(w2.e.tflops, w.e.tflops) &&
          w2.hgmma_per_block == 19 && near(w2.tma_tflops, w.tma_tflops),
        "unrolled: %g against %g", w2.e.tflops, w.e.tflops);
  /* Not a wg loop, or a tile that cannot be: no estimate. */
  strcpy(c.mma, "HMMA");
  CHECK(estimate_wg_compute(h100, &c, &fa3_d128, &w) == -1, "HMMA is no wg loop");
  c = consumer_loop(19, 88, 600);
  estimate_wg_tile few = fa3_d128;
  few.threads = 256;   /* no room for the producer */
  CHECK(estimate_wg_compute(h100, &c, &few, &w) == -1, "two consumers in 256 threads");
  CHECK(estimate_wg_compute(estimate_gpu_find("a100"), &c, &fa3_d128, &w) == -1,
        "the A100 has no wgmma");
  /* 240 KB of shared memory: no CTA fits an SM. */
  few = fa3_d128, few.smem_bytes = 240 * 1024;
  CHECK(estimate_wg_compute(h100, &c, &few, &w) == 0 && w.e.ctas_per_sm == 0 &&
          !strcmp(w.e.limit, "smem"), "240 KB: %d CTAs by %s", w.e.ctas_per_sm, w.e.limit);
}

/* A wg config's tile; another family's none. */
static void test_tile_of(void) {
  gen_config cfg = {"wg", 5, {{"dtype", "bf16"}, {"dim", "128"}, {"block_m", "128"},
                              {"block_n", "176"}, {"consumers", "2"}}};
  estimate_wg_tile t;
  CHECK(estimate_wg_tile_of(&cfg, 384, 168, 212 * 1024, &t) == 0 && !t.pingpong &&
          !t.overlap, "flags off when absent");
  cfg.pair[cfg.n++] = (gen_pair){"pingpong", "1"};
  cfg.pair[cfg.n++] = (gen_pair){"overlap", "0"};
  CHECK(estimate_wg_tile_of(&cfg, 384, 168, 212 * 1024, &t) == 0 &&
          !memcmp(&t, &fa3_d128, sizeof t), "the d128 tile: %d %d %d %d %d", t.consumers,
        t.block_m, t.block_n, t.dim, t.elem_bytes);
  cfg.pair[4] = (gen_pair){"block_k", "2"};   /* no consumers */
  CHECK(estimate_wg_tile_of(&cfg, 384, 168, 1024, &t) == -1, "no consumers");
}

/* A device's name to the GPU the model knows, word by word: A10 is not
** A100's prefix, nor L4 L40S's; a part the table lacks (A10G) is none. */
static void test_gpu_names(void) {
  static const struct { const char *device, *gpu; } cases[] = {
    {"NVIDIA A100-SXM4-80GB", "a100"}, {"NVIDIA A10", "a10"}, {"NVIDIA H100 80GB HBM3", "h100"},
    {"NVIDIA H200", "h200"}, {"NVIDIA L4", "l4"}, {"NVIDIA L40S", "l40s"},
    {"NVIDIA GeForce RTX 3090", "rtx3090"}, {"NVIDIA GeForce RTX 4090", "rtx4090"},
    {"NVIDIA GeForce RTX 5090", "rtx5090"}, {"Tesla T4", "t4"}, {"NVIDIA A10G", NULL},
    {"NVIDIA L40", NULL}, {"NVIDIA GeForce RTX 4090 D", "rtx4090"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const estimate_gpu *g = estimate_gpu_for_device(cases[i].device);
    const char *want = cases[i].gpu;
    CHECK(want ? g && !strcmp(g->name, want) : g == NULL, "'%s': %s, want %s", cases[i].device,
          g ? g->name : "none", want ? want : "none");
  }
  /* Each arch's default GPU, and the dense peaks the datasheets state
  ** (16-bit tensor with fp32 accumulation; fp32). */
  static const struct { const char *arch, *gpu; } archs[] = {
    {"sm_75", "t4"}, {"sm_80", "a100"}, {"sm_86", "a10"}, {"sm_89", "l40s"}, {"sm_90a", "h100"},
    {"sm_120", "rtx5090"},
  };
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
    const estimate_gpu *g = estimate_gpu_for_arch(archs[i].arch);
    CHECK(g && !strcmp(g->name, archs[i].gpu), "%s: %s", archs[i].arch, g ? g->name : "none");
  }
  static const struct { const char *gpu; double bf16, fp32; } peaks[] = {
    {"t4", 65.1, 8.1}, {"a10", 125.0, 31.2}, {"rtx3090", 71.2, 35.6}, {"l4", 121.0, 30.3},
    {"l40s", 362.0, 91.6}, {"rtx4090", 165.2, 82.6}, {"rtx5090", 209.5, 104.8},
  };
  for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++) {
    const estimate_gpu *g = estimate_gpu_find(peaks[i].gpu);
    const double b = g ? estimate_peak_tflops(g, "bf16") : 0, f = g ? estimate_peak_tflops(g, "fp32") : 0;
    CHECK(fabs(b / peaks[i].bf16 - 1) < 0.01 && fabs(f / peaks[i].fp32 - 1) < 0.02,
          "%s: %.1f and %.1f TFLOP/s, the datasheet's %.1f and %.1f", peaks[i].gpu, b, f,
          peaks[i].bf16, peaks[i].fp32);
  }
}

int main(void) {
  test_gpu_names();
  test_tile_of();
  test_hgmma_count();
  test_bounds();
  return check_done("test_estimate");
}
