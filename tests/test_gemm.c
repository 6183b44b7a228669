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
**   --emu    the same kernels on the emulator, under the forward, reverse
**            and random schedules, against a float64 product of the very
**            inputs, with tails in M, N and K and two batches; the three
**            schedules agree to the bit;
**   --plant  the four planted mistakes (gemm.lua's plant key), each caught
**            on the emulator: an accumulator read before wgmma.wait_group
**            leaves NaN in C; a stage released before its wgmma is waited
**            for gives C that is wrong or differs between schedules; a
**            wait on the wrong phase, and an arrival without expect_tx,
**            are stopped by the emulator with a report that names the
**            mbarrier (too many arrivals, or more bytes than expected);
**   --gpu    the --emu runs on an sm_90 GPU through the cuda backend
**            (SKIPPED without one; the fake driver runs no GEMM).
** usage: test_gemm [--nvrtc | --sass | --emu | --plant | --gpu]   (--nvrtc by default)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "gen.h"
#include "halfprec.h"
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

/* ---- On the emulator ---- */

typedef struct problem {
  int m, n, k, batch;
} problem;

/* A problem with a tail in every dimension: two tiles and a bit of M and N,
** more k-tiles than stages, and K not a multiple of the k-tile. */
static problem problem_for(const gen_kernel *k) {
  const int bn = atoi(gen_config_get(&k->cfg, "n")), bm = k->launch[0].grid[1].n;  /* grid y: {"seq_q", rows per CTA} */
  problem p = {.m = bm + 24, .n = bn + 8, .k = 4 * 64 + 40, .batch = 2};
  return p;
}

static unsigned long long rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {   /* [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* The GEMM's buffers on one backend, and the inputs as the kernel reads them. */
typedef struct gemm_run {
  problem pr;
  int b_mn, fp16;
  unsigned short *a, *b;   /* host: A (batch, M, K); B (batch, N, K) or (batch, K, N) */
  double *ref;             /* (batch, M, N) */
  void *da, *db, *dc;
  fa_params params;
  gen_launch shape;
} gemm_run;

static double to_double(const gemm_run *r, unsigned short h) {
  return r->fp16 ? hp_f16_to_double(h) : hp_bf16_to_double(h);
}

static void fill(gemm_run *r, unsigned short *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = r->fp16 ? hp_f16_from_double(uniform()) : hp_bf16_from_double(uniform());
}

static double b_at(const gemm_run *r, int z, int kk, int j) {
  const problem *p = &r->pr;
  const size_t i = r->b_mn ? ((size_t)z * p->k + kk) * p->n + j
                            : ((size_t)z * p->n + j) * p->k + kk;
  return to_double(r, r->b[i]);
}

static int tmap(fa_backend *be, fa_tmap *map, const void *base, int elem, unsigned long long d0,
                unsigned long long d1, unsigned long long d2, unsigned b0, unsigned b1, int swz) {
  fa_tmap_desc d = {.base = base, .elem_bytes = elem, .rank = 3, .dims = {d0, d1, d2},
                    .strides = {d0 * (unsigned)elem, d0 * d1 * (unsigned)elem},
                    .box = {b0, b1, 1}, .swizzle = swz};
  char err[256];
  int rc = backend_tmap(be, &d, map, err, sizeof err);
  CHECK(rc == 0, "backend_tmap: %s", err);
  return rc;
}

/* Inputs, the float64 product, device buffers and tensor maps for kernel k. */
static int run_setup(fa_backend *be, const gen_kernel *k, gemm_run *r) {
  memset(r, 0, sizeof *r);
  r->pr = problem_for(k);
  r->b_mn = !strcmp(gen_config_get(&k->cfg, "b"), "mn");
  r->fp16 = !strcmp(gen_config_get(&k->cfg, "dtype"), "fp16");
  const problem *p = &r->pr;
  const int bn = atoi(gen_config_get(&k->cfg, "n")), bm = k->launch[0].grid[1].n;  /* grid y: {"seq_q", rows per CTA} */
  const size_t na = (size_t)p->batch * p->m * p->k, nb = (size_t)p->batch * p->n * p->k,
               nc = (size_t)p->batch * p->m * p->n;
  r->a = malloc(na * 2), r->b = malloc(nb * 2), r->ref = malloc(nc * sizeof *r->ref);
  if (!r->a || !r->b || !r->ref) return -1;
  fill(r, r->a, na);
  fill(r, r->b, nb);
  for (int z = 0; z < p->batch; z++)
    for (int i = 0; i < p->m; i++)
      for (int j = 0; j < p->n; j++) {
        double acc = 0;
        for (int kk = 0; kk < p->k; kk++)
          acc += to_double(r, r->a[((size_t)z * p->m + i) * p->k + kk]) * b_at(r, z, kk, j);
        r->ref[((size_t)z * p->m + i) * p->n + j] = acc;
      }
  char err[256];
  if (backend_alloc(be, na * 2, &r->da, err, sizeof err) ||
      backend_alloc(be, nb * 2, &r->db, err, sizeof err) ||
      backend_alloc(be, nc * 4, &r->dc, err, sizeof err) ||
      backend_upload(be, r->da, r->a, na * 2, err, sizeof err) ||
      backend_upload(be, r->db, r->b, nb * 2, err, sizeof err)) {
    CHECK(0, "buffers: %s", err);
    return -1;
  }
  fa_params *q = &r->params;
  q->seq_q = p->m, q->seq_k = p->n, q->heads = p->k, q->batch = p->batch;
  if (tmap(be, &q->tmap[0], r->da, 2, (unsigned)p->k, (unsigned)p->m, (unsigned)p->batch, 64,
           (unsigned)bm, 128) ||
      (r->b_mn ? tmap(be, &q->tmap[1], r->db, 2, (unsigned)p->n, (unsigned)p->k,
                      (unsigned)p->batch, 64, 64, 128)
               : tmap(be, &q->tmap[1], r->db, 2, (unsigned)p->k, (unsigned)p->n,
                      (unsigned)p->batch, 64, (unsigned)bn, 128)) ||
      tmap(be, &q->tmap[2], r->dc, 4, (unsigned)p->n, (unsigned)p->m, (unsigned)p->batch,
           (unsigned)bn, 64, 0))
    return -1;
  gen_launch *sh = &r->shape;
  sh->grid[0] = (unsigned)((p->n + bn - 1) / bn);
  sh->grid[1] = (unsigned)((p->m + bm - 1) / bm);
  sh->grid[2] = (unsigned)p->batch;
  sh->block[0] = (unsigned)k->threads, sh->block[1] = sh->block[2] = 1;
  sh->smem_bytes = (unsigned)k->smem_bytes;
  return 0;
}

static void run_free(fa_backend *be, gemm_run *r) {
  if (r->da) backend_free(be, r->da);
  if (r->db) backend_free(be, r->db);
  if (r->dc) backend_free(be, r->dc);
  free(r->a), free(r->b), free(r->ref);
}

/* One launch under `sched`, C (poisoned with NaN first) into c. 0, or the
** launch's status with its message in err. */
static int launch(fa_backend *be, const fa_program *prog, gemm_run *r, fa_schedule sched,
                  float *c, char *err, size_t errlen) {
  const size_t nc = (size_t)r->pr.batch * r->pr.m * r->pr.n;
  int rc = backend_fill(be, r->dc, 0xff, nc * 4, err, errlen);
  fa_run_opts o = {.schedule = sched, .seed = 7, .threads = 2};
  if (!rc) rc = backend_launch(be, prog, &r->shape, &r->params, &o, NULL, err, errlen);
  if (!rc) rc = backend_download(be, c, r->dc, nc * 4, err, errlen);
  return rc;
}

/* How C compares with the float64 product: the worst error over the
** bound (<= 1 passes), NaN when C holds one. */
static double judge(const gemm_run *r, const float *c, int *nans) {
  const problem *p = &r->pr;
  double worst = 0;
  *nans = 0;
  for (int z = 0; z < p->batch; z++)
    for (int i = 0; i < p->m; i++)
      for (int j = 0; j < p->n; j++) {
        const size_t at = ((size_t)z * p->m + i) * p->n + j;
        if (c[at] != c[at]) {
          (*nans)++;
          continue;
        }
        /* f32 accumulation of K exact products of numbers under 1. */
        const double bound = 1e-6 * p->k + 1e-6, e = fabs(c[at] - r->ref[at]) / bound;
        if (e > worst) worst = e;
      }
  return worst;
}

static const fa_schedule scheds[] = {FA_SCHED_FORWARD, FA_SCHED_REVERSE, FA_SCHED_RANDOM};
static const char *const sched_names[] = {"forward", "reverse", "random"};
#define NSCHED 3

static fa_program *build(fa_backend *be, const gen_kernel *k, fa_build *bd) {
  char err[256];
  const gen_kernel *kp = k;
  if (backend_compile(be, &kp, 1, 1, bd, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", k->name, err);
    return NULL;
  }
  CHECK(bd->prog != NULL, "%s does not compile on %s:\n%s", k->name, backend_name(be),
        bd->log ? bd->log : "");
  return bd->prog;
}

/* Kernel k on backend be under nsched schedules (the emulator's; 1 on a
** GPU), each against the float64 product, all bit-identical. */
static void test_run(fa_backend *be, const gen_kernel *k, int nsched) {
  fa_build bd;
  gemm_run r;
  fa_program *prog = build(be, k, &bd);
  if (prog && run_setup(be, k, &r) == 0) {
    const size_t nc = (size_t)r.pr.batch * r.pr.m * r.pr.n;
    float *c[NSCHED] = {0};
    char err[512];
    for (int s = 0; s < nsched; s++) {
      c[s] = calloc(nc, sizeof(float));
      if (!c[s] || launch(be, prog, &r, scheds[s], c[s], err, sizeof err) != 0) {
        CHECK(0, "%s under %s: %s", k->name, sched_names[s], c[s] ? err : "out of memory");
        continue;
      }
      int nans;
      const double worst = judge(&r, c[s], &nans);
      CHECK(nans == 0 && worst <= 1, "%s under %s: %d NaN, error %.3g of the bound", k->name,
            sched_names[s], nans, worst);
      if (s) CHECK(!memcmp(c[0], c[s], nc * 4), "%s: %s and forward differ", k->name,
                   sched_names[s]);
      if (s == 0)
        printf("  %s on %s: M %d N %d K %d batch %d, error %.3g of the bound\n", k->name,
               backend_name(be), r.pr.m, r.pr.n, r.pr.k, r.pr.batch, worst);
    }
    for (int s = 0; s < NSCHED; s++) free(c[s]);
  }
  if (prog) run_free(be, &r);
  backend_build_free(be, &bd);
}

/* A planted mistake, caught: `how` says what the test must see. */
enum { SEE_NAN, SEE_WRONG, SEE_REPORT };
static void test_plant(fa_backend *be, gen_state *g, const char *plant, int see,
                       const char *report) {
  char config[128];
  snprintf(config, sizeof config, "dtype=bf16,n=64,a=smem,b=k,wg=1,plant=%s", plant);
  gen_kernel k;
  if (gen_render_gemm(g, config, &k) != 0) {
    CHECK(0, "render %s: %s", config, gen_errmsg(g));
    return;
  }
  fa_build bd;
  gemm_run r;
  fa_program *prog = build(be, &k, &bd);
  if (prog && run_setup(be, &k, &r) == 0) {
    const size_t nc = (size_t)r.pr.batch * r.pr.m * r.pr.n;
    float *c[NSCHED] = {0};
    char err[NSCHED][512];
    int rc[NSCHED], caught = 0;
    char what[1024] = "";
    for (int s = 0; s < NSCHED; s++) {
      c[s] = calloc(nc, sizeof(float));
      err[s][0] = '\0';
      rc[s] = c[s] ? launch(be, prog, &r, scheds[s], c[s], err[s], sizeof err[s]) : -1;
      int nans = 0;
      const double worst = rc[s] ? 0 : judge(&r, c[s], &nans);
      if (see == SEE_REPORT && rc[s] && strstr(err[s], report)) {
        if (caught++) continue;
        snprintf(what, sizeof what, "%s: %.900s", sched_names[s], err[s]);
      } else if (see == SEE_NAN && !rc[s] && nans) {
        if (caught++) continue;
        snprintf(what, sizeof what, "%s: %d NaN in C: accumulators read before "
                 "wgmma.wait_group", sched_names[s], nans);
      } else if (see == SEE_WRONG && !rc[s] && (nans || worst > 1 ||
                                                (s && c[0] && memcmp(c[0], c[s], nc * 4)))) {
        if (caught++) continue;
        snprintf(what, sizeof what, "%s: %d NaN, error %.3g of the bound%s", sched_names[s],
                 nans, worst, s && memcmp(c[0], c[s], nc * 4) ? ", differs from forward" : "");
      }
    }
    CHECK(caught, "plant=%s went unnoticed (statuses %d %d %d: %s | %s | %s)", plant, rc[0],
          rc[1], rc[2], err[0], err[1], err[2]);
    if (caught) printf("  plant=%s caught: %s\n", plant, what);
    for (int s = 0; s < NSCHED; s++) free(c[s]);
  }
  if (prog) run_free(be, &r);
  backend_build_free(be, &bd);
  gen_kernel_free(&k);
}

/* Lines of text holding insn. */
static int count(const char *text, const char *insn) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, insn)) != NULL; p += strlen(insn)) n++;
  return n;
}

/* --emu, --plant, or --gpu: the same runs on an H100 or H200. */
static int run_main(const char *mode) {
  char err[256], note[256];
  gen_state *g;
  fa_backend *be;
  const int gpu = !strcmp(mode, "--gpu"), plants = !strcmp(mode, "--plant");
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  if (backend_open(gpu ? "cuda" : "emu", &be, note, sizeof note, err, sizeof err) != 0) {
    if (gpu) check_skip(err);
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  const fa_device *dev = backend_device(be);
  if (gpu && (dev->cc_major != 9 || dev->cc_minor != 0 || strstr(dev->name, "(fakecuda)"))) {
    snprintf(note, sizeof note, "%.200s %s", dev->name,
             strstr(dev->name, "(fakecuda)") ? "runs no GEMM" : "is no sm_90 GPU");
    backend_close(be);
    gen_close(g);
    check_skip(note);
  }
  if (plants) {
    test_plant(be, g, "early_read", SEE_NAN, "");
    test_plant(be, g, "reuse", SEE_WRONG, "");
    test_plant(be, g, "phase", SEE_REPORT, "mbarrier");
    test_plant(be, g, "expect_tx", SEE_REPORT, "expect_tx");
  } else {
    for (size_t i = 0; i < NCONFIGS; i++) {
      gen_kernel k;
      if (gen_render_gemm(g, configs[i], &k) != 0) {
        CHECK(0, "render %s: %s", configs[i], gen_errmsg(g));
        continue;
      }
      test_run(be, &k, gpu ? 1 : NSCHED);
      gen_kernel_free(&k);
    }
  }
  backend_close(be);
  gen_close(g);
  char suite[32];
  snprintf(suite, sizeof suite, "test_gemm %s", mode);
  return check_done(suite);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "--nvrtc";
  const int sass = !strcmp(mode, "--sass");
  if (argc > 2 || (!sass && strcmp(mode, "--nvrtc") && strcmp(mode, "--emu") &&
                   strcmp(mode, "--plant") && strcmp(mode, "--gpu"))) {
    fprintf(stderr, "usage: test_gemm [--nvrtc | --sass | --emu | --plant | --gpu]\n");
    return 2;
  }
  if (!strcmp(mode, "--emu") || !strcmp(mode, "--plant") || !strcmp(mode, "--gpu"))
    return run_main(mode);
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
