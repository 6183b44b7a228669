/*
** test_gemm.c
** The Hopper GEMM of templates/gemm.lua (wgmma fed by TMA through a
** 3-stage mbarrier pipeline):
**   --nvrtc  a set of configs covering every value of every key (bf16 and
**            fp16; A by descriptor and from registers; B K-major and
**            MN-major; N of 64, 128 and 256; 1 and 2 consumer
**            warpgroups) compiled for sm_90a by NVRTC with zero errors and
**            no wgmma serialized for want of registers; the config's own
**            refusals are errors that name the key;
**   --sass   the same kernels' SASS (nvdisasm; SKIPPED without one) holds
**            HGMMA and UTMALDG (and UTMASTG for C);
** usage: test_gemm [--nvrtc | --sass]     (--nvrtc by default)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gen.h"
#include "nvrtc_compile.h"
#include "sass.h"

/* Every value of every key at least once, and each B layout with each A
** source and both dtypes. */
static const char *const configs[] = {
  "dtype=bf16,n=128,a=smem,b=k,wg=1",
  "dtype=fp16,n=64,a=regs,b=mn,wg=1",
  "dtype=bf16,n=256,a=smem,b=mn,wg=1",
  "dtype=fp16,n=128,a=smem,b=k,wg=2",
  "dtype=bf16,n=64,a=regs,b=k,wg=2",
  "dtype=fp16,n=256,a=regs,b=k,wg=1",
};
#define NCONFIGS (sizeof configs / sizeof configs[0])

static void test_refusals(gen_state *g) {
  static const struct { const char *config, *want; } bad[] = {
    {"dtype=fp32", "dtype=fp32"},
    {"n=96", "n=96"},
    {"tile=64", "unknown key 'tile'"},
    {"a=regs,plant=early_read", "needs a=smem"},
    {"n", "not key=value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gen_kernel k;
    int rc = gen_render_gemm(g, bad[i].config, &k);
    CHECK(rc == FA_EINVAL && strstr(gen_errmsg(g), bad[i].want), "gemm config '%s': rc %d, '%s'",
          bad[i].config, rc, rc ? gen_errmsg(g) : "rendered");
    if (rc == 0) gen_kernel_free(&k);
  }
}

/* Lines of text holding insn. */
static int count(const char *text, const char *insn) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, insn)) != NULL; p += strlen(insn)) n++;
  return n;
}

int main(int argc, char **argv) {
  const int sass = argc > 1 && !strcmp(argv[1], "--sass");
  if (argc > 2 || (argc == 2 && !sass && strcmp(argv[1], "--nvrtc"))) {
    fprintf(stderr, "usage: test_gemm [--nvrtc | --sass]\n");
    return 2;
  }
  char nvdisasm[4096], err[256];
  if (sass && sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0)
    check_skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)");
  if (!nvrtc_arch_supported("sm_90a"))
    check_skip("this NVRTC does not compile for sm_90a");
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    return 1;
  }
  if (!sass) test_refusals(g);
  for (size_t i = 0; i < NCONFIGS; i++) {
    gen_kernel k;
    if (gen_render_gemm(g, configs[i], &k) != 0) {
      CHECK(0, "render %s: %s", configs[i], gen_errmsg(g));
      continue;
    }
    nvrtc_result r;
    nvrtc_compile(k.source, k.entry, "sm_90a", &r);
    CHECK(r.ok, "%s for sm_90a: %s\n%s", k.name, r.error, r.log);
    if (r.ok && !sass) {
      CHECK(!strstr(r.log, "serialized"), "%s: ptxas serializes wgmma:\n%s", k.name, r.log);
      CHECK(r.spill_store_bytes == 0, "%s: %d bytes spilled", k.name, r.spill_store_bytes);
      printf("  %s: %d registers, %d bytes smem, %.0f ms\n", k.name, r.registers, k.smem_bytes,
             r.compile_ms);
    }
    if (r.ok && sass) {
      char *text = NULL;
      if (sass_disassemble(nvdisasm, r.cubin, r.cubin_size, &text, err, sizeof err) != 0) {
        CHECK(0, "%s: %s", k.name, err);
      } else {
        const int hgmma = count(text, "HGMMA."), ldg = count(text, "UTMALDG."),
                  stg = count(text, "UTMASTG.");
        CHECK(hgmma > 0 && ldg > 0 && stg > 0, "%s: %d HGMMA, %d UTMALDG, %d UTMASTG", k.name,
              hgmma, ldg, stg);
        printf("  %s: %d HGMMA, %d UTMALDG, %d UTMASTG\n", k.name, hgmma, ldg, stg);
      }
      free(text);
    }
    nvrtc_result_free(&r);
    gen_kernel_free(&k);
  }
  gen_close(g);
  return check_done(sass ? "test_gemm --sass" : "test_gemm --nvrtc");
}
