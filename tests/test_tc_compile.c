/*
** test_tc_compile.c
** The tensor-core family through NVRTC, no GPU needed:
**   1. a sample of the FULL tc space, chosen so that every value of every
**      axis appears at least once (head dims native and padded, 16-byte
**      copies and the 2-byte path of dims that are no multiple of 8),
**      compiled for sm_80 and sm_90 with zero errors and a sane ptxas
**      report;
**   2. FlashAttention-2's own choices (d64: 128x128, 4 warps; d128: 128x64,
**      4 warps; deferred, swizzled, Q in shared memory, two stages), fp16
**      and bf16, causal and not: zero spill bytes on sm_80 and sm_90;
**   3. where a disassembler is at hand (cuobjdump, with the nvdisasm it
**      calls, on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin, or named
**      by $FATUNE_CUOBJDUMP), the SASS of those kernels holds HMMA
**      instructions. Without one that check prints SKIPPED and the rest
**      still counts.
** The sample is greedy, as in test_compile_sample: per problem, the variant
** covering the most (axis, value) pairs not yet covered, ties to the one
** cheaper to compile.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, popen, mkstemp */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "compile_pool.h"
#include "gen.h"

#define SEQ 256

static const struct axis {
  const char *key;
  const char *values[12];
} axes[] = {
  {"dtype", {"fp16", "bf16"}},
  {"causal", {"0", "1"}},
  {"dim", {"32", "36", "64", "80", "96", "128", "160", "192", "256"}},
  {"block_m", {"64", "128", "192"}},
  {"block_n", {"32", "48", "64", "80", "96", "112", "128", "144", "160", "176"}},
  {"warps", {"4", "8"}},
  {"norm", {"eager", "deferred"}},
  {"layout", {"row", "pad", "swizzle"}},
  {"q", {"smem", "reg"}},
  {"stages", {"1", "2", "3"}},
  {"q_share", {"0", "1"}},
};
#define NAXES (sizeof axes / sizeof axes[0])
#define NVALS 12
#define MAX_PICKS 64

/* The problems listed: each dim once or twice, dtypes and causal alternating. */
static const struct problem {
  int dim;
  fa_dtype dtype;
  int causal;
} problems[] = {
  {32, FA_FP16, 0},  {36, FA_BF16, 1},  {64, FA_FP16, 1},  {64, FA_BF16, 0},
  {80, FA_BF16, 0},  {96, FA_FP16, 1},  {128, FA_BF16, 1}, {128, FA_FP16, 0},
  {160, FA_FP16, 0}, {192, FA_BF16, 1}, {256, FA_FP16, 1}, {256, FA_BF16, 0},
};
#define NPROBLEMS (sizeof problems / sizeof problems[0])

static int nvalues(size_t a) {
  int n = 0;
  while (n < NVALS && axes[a].values[n]) n++;
  return n;
}

typedef struct parsed {
  int val[NAXES];
  long cost;     /* a rough guess of compile time: the unrolled mma count */
  int complete;
} parsed;

static int config_int(const char *config, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, ",%s=", key);
  const char *s = strstr(config, pat);
  return s ? atoi(s + strlen(pat)) : 0;
}

static void parse_config(const char *config, parsed *p) {
  memset(p, 0, sizeof *p);
  int found = 0;
  for (size_t a = 0; a < NAXES; a++) {
    p->val[a] = -1;
    char pat[32];
    snprintf(pat, sizeof pat, ",%s=", axes[a].key);
    const char *s = strstr(config, pat);
    if (!s) continue;
    found++;
    s += strlen(pat);
    size_t len = strcspn(s, ",");
    for (int v = 0; v < nvalues(a); v++)
      if (strlen(axes[a].values[v]) == len && memcmp(axes[a].values[v], s, len) == 0) p->val[a] = v;
  }
  p->complete = found == (int)NAXES;
  long bm = config_int(config, "block_m"), bn = config_int(config, "block_n");
  long d = config_int(config, "dim"), w = config_int(config, "warps");
  p->cost = bm * bn * d / (w > 0 ? w : 1);
}

static int gain(const parsed *p, const unsigned char *covered, int times) {
  int g = 0;
  for (size_t a = 0; a < NAXES; a++)
    if (p->val[a] >= 0 && covered[a * NVALS + (size_t)p->val[a]] == times) g++;
  return g;
}

static long score(const parsed *p, const unsigned char *covered) {
  long s = gain(p, covered, 0);
  for (int times = 1; times < 3; times++) s = s * 16 + gain(p, covered, times);
  return s;
}

static void cover(const parsed *p, unsigned char *covered) {
  for (size_t a = 0; a < NAXES; a++)
    if (p->val[a] >= 0 && covered[a * NVALS + (size_t)p->val[a]] < 255)
      covered[a * NVALS + (size_t)p->val[a]]++;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A cuobjdump that can disassemble (it runs nvdisasm), or NULL. */
static const char *find_cuobjdump(char *buf, size_t n) {
  const char *env = getenv("FATUNE_CUOBJDUMP");
  if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
  const char *path = getenv("PATH");
  const char *home = getenv("CUDA_HOME");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:%s%s/usr/local/cuda/bin", path ? path : "",
           home ? home : "", home ? "/bin:" : "");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (!*d) continue;
    snprintf(buf, n, "%s/cuobjdump", d);
    if (access(buf, X_OK) == 0) return buf;
  }
  return NULL;
}

/* HMMA instructions in the SASS of a CUBIN: >= 0, or -1 with why. */
static int count_hmma(const char *cuobjdump, const nvrtc_result *r, char *why, size_t n) {
  char path[] = "/tmp/fatune-tc-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(why, n, "cannot make a temporary file");
    return -1;
  }
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(r->cubin, 1, r->cubin_size, f) == r->cubin_size;
  if (f) ok = fclose(f) == 0 && ok;
  int count = -1;
  if (!ok) {
    snprintf(why, n, "cannot write the CUBIN");
  } else {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", cuobjdump, path);
    FILE *p = popen(cmd, "r");
    if (!p) {
      snprintf(why, n, "cannot run %.200s", cuobjdump);
    } else {
      char line[1024];
      int hmma = 0, lines = 0;
      why[0] = '\0';
      while (fgets(line, sizeof line, p)) {
        lines++;
        if (strstr(line, "HMMA")) hmma++;
        if (strstr(line, "fatal") && !why[0]) {
          line[strcspn(line, "\n")] = '\0';
          snprintf(why, n, "%.200s", line);
        }
      }
      int rc = pclose(p);
      if (rc == 0 && lines > 0) count = hmma;
      else if (!why[0]) snprintf(why, n, "%.200s -sass failed (status %d)", cuobjdump, rc);
    }
  }
  unlink(path);
  return count;
}

int main(void) {
  gen_state *g;
  char err[512];
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    return 1;
  }
  gen_target t80;
  if (gen_target_for_arch(g, "sm_80", 0, 0, &t80) != 0) {
    fprintf(stderr, "target: %s\n", gen_errmsg(g));
    return 1;
  }

  /* ---- 1. The sample. ---- */
  unsigned char covered[NAXES * NVALS] = {0};
  gen_kernel picks[MAX_PICKS];
  size_t npicks = 0;
  double t0 = now_ms();
  for (int round = 0; round < 2; round++)
    for (size_t pi = 0; pi < NPROBLEMS; pi++) {
      fa_problem p = {.batch = 2, .heads = 2, .seq_q = SEQ, .seq_k = SEQ,
                      .dim = problems[pi].dim, .dtype = problems[pi].dtype,
                      .causal = problems[pi].causal};
      gen_variant *v;
      size_t n;
      if (gen_list(g, &p, &t80, "full", &v, &n) != 0) {
        CHECK(0, "gen_list d%d %s: %s", p.dim, fa_dtype_name(p.dtype), gen_errmsg(g));
        continue;
      }
      CHECK(n > 0, "full space for d%d %s causal=%d is empty", p.dim, fa_dtype_name(p.dtype),
            p.causal);
      parsed *ps = malloc((n ? n : 1) * sizeof *ps);
      if (!ps) return 1;
      int bad = 0, foreign = 0;
      for (size_t i = 0; i < n; i++) {
        parse_config(v[i].config, &ps[i]);
        if (!ps[i].complete && bad++ < 3) CHECK(0, "config '%s' lacks an axis", v[i].config);
        if (strncmp(v[i].name, "tc-", 3) != 0 && foreign++ < 3)
          CHECK(0, "%s is not of the tc family", v[i].name);
      }
      long best = -1, best_score = -1;
      for (size_t i = 0; i < n; i++) {
        long si = score(&ps[i], covered);
        if (si > best_score || (si == best_score && ps[i].cost < ps[best].cost)) {
          best = (long)i;
          best_score = si;
        }
      }
      /* The second round only takes what still adds a pair. */
      if (best >= 0 && npicks < MAX_PICKS && (round == 0 || best_score >= 256)) {
        cover(&ps[best], covered);
        gen_kernel *kk = &picks[npicks];
        if (gen_render_config(g, v[best].config, NULL, &t80, kk) != 0) {
          CHECK(0, "render %s: %s", v[best].name, gen_errmsg(g));
        } else {
          CHECK(strcmp(kk->config, v[best].config) == 0, "%s renders as %s", v[best].config,
                kk->config);
          printf("pick %-58s +%ld new pairs\n", kk->name, best_score >> 8);
          npicks++;
        }
      }
      free(ps);
      gen_variants_free(v, n);
    }
  int missing = 0;
  for (size_t a = 0; a < NAXES; a++)
    for (int vi = 0; vi < nvalues(a); vi++)
      if (!covered[a * NVALS + (size_t)vi]) {
        missing++;
        CHECK(0, "no picked variant has %s=%s", axes[a].key, axes[a].values[vi]);
      }
  printf("picked %zu variants in %.0f ms; %d (axis, value) pairs missing\n", npicks,
         now_ms() - t0, missing);

  /* ---- 2. FlashAttention-2's own choices. ---- */
  enum { NFA2 = 8 };
  gen_kernel fa2[NFA2];
  size_t nfa2 = 0;
  for (int d = 0; d < 2; d++)
    for (int dt = 0; dt < 2; dt++)
      for (int c = 0; c < 2; c++) {
        char cfg[256];
        snprintf(cfg, sizeof cfg,
                 "family=tc,dtype=%s,dim=%d,causal=%d,block_m=128,block_n=%d,warps=4,"
                 "norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0",
                 dt ? "bf16" : "fp16", d ? 128 : 64, c, d ? 64 : 128);
        if (gen_render_config(g, cfg, NULL, &t80, &fa2[nfa2]) == 0) nfa2++;
        else CHECK(0, "render %s: %s", cfg, gen_errmsg(g));
      }

  /* ---- Compile everything for both archs. ---- */
  static const char *archs[] = {"sm_80", "sm_90"};
  const size_t njobs = npicks + nfa2;
  compile_job *jobs = calloc(njobs ? njobs : 1, sizeof *jobs);
  if (!jobs) return 1;
  char cobuf[4200];
  const char *cuobjdump = find_cuobjdump(cobuf, sizeof cobuf);
  int sass_checked = 0, sass_skipped = 0;
  char skip_why[300] = "";
  size_t total = 0, nok = 0;
  int regs_lo = 999, regs_hi = 0;
  double max_ms = 0, wall_all = 0;
  for (size_t ai = 0; ai < 2; ai++) {
    for (size_t i = 0; i < njobs; i++) {
      const gen_kernel *k = i < npicks ? &picks[i] : &fa2[i - npicks];
      memset(&jobs[i], 0, sizeof jobs[i]);
      jobs[i].source = k->source;
      jobs[i].entry = k->entry;
    }
    double w0 = now_ms();
    CHECK(compile_pool_run(jobs, njobs, archs[ai], 0, NULL, NULL) == 0,
          "compile_pool_run for %s failed", archs[ai]);
    wall_all += now_ms() - w0;
    for (size_t i = 0; i < njobs; i++) {
      const int is_fa2 = i >= npicks;
      const gen_kernel *k = is_fa2 ? &fa2[i - npicks] : &picks[i];
      nvrtc_result *r = &jobs[i].result;
      const int spill = r->spill_store_bytes + r->spill_load_bytes;
      total++;
      printf("%-58s %-5s %s regs %3d  spill %3d/%-3d  stack %3d  smem %6d  %6.0f ms  %s\n",
             k->name, archs[ai], is_fa2 ? "FA2" : "   ", r->registers, r->spill_store_bytes,
             r->spill_load_bytes, r->stack_bytes, k->smem_bytes, r->compile_ms,
             r->ok ? "ok" : "FAILED");
      CHECK(r->ok, "%s on %s: %s", k->name, archs[ai], r->error);
      if (!r->ok) {
        nvrtc_result_free(r);
        continue;
      }
      nok++;
      CHECK(r->registers > 0 && r->registers <= 255, "%s on %s: %d registers", k->name,
            archs[ai], r->registers);
      CHECK(r->cubin && r->cubin_size > 0, "%s on %s: no CUBIN", k->name, archs[ai]);
      if (r->registers < regs_lo) regs_lo = r->registers;
      if (r->registers > regs_hi) regs_hi = r->registers;
      if (r->compile_ms > max_ms) max_ms = r->compile_ms;
      if (is_fa2) {
        CHECK(spill == 0, "%s on %s (FlashAttention-2's choice) spills %d/%d bytes", k->name,
              archs[ai], r->spill_store_bytes, r->spill_load_bytes);
        /* ---- 3. HMMA in the SASS of the non-causal fp16 pair. ---- */
        if (strstr(k->name, "-f16-") && !strstr(k->name, "causal")) {
          if (!cuobjdump) {
            sass_skipped++;
            snprintf(skip_why, sizeof skip_why, "no cuobjdump on PATH, in $CUDA_HOME/bin or "
                     "/usr/local/cuda/bin (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)");
          } else {
            char why[300];
            int h = count_hmma(cuobjdump, r, why, sizeof why);
            if (h < 0) {
              sass_skipped++;
              snprintf(skip_why, sizeof skip_why, "%.250s", why);
            } else {
              sass_checked++;
              printf("  SASS of %s for %s: %d HMMA instructions\n", k->name, archs[ai], h);
              CHECK(h > 0, "%s on %s: no HMMA in the SASS", k->name, archs[ai]);
            }
          }
        }
      }
      nvrtc_result_free(r);
    }
  }
  printf("summary: %zu sampled + %zu FlashAttention-2 variants x 2 archs = %zu compiles, %zu ok, "
         "%zu failed; registers %d-%d, slowest %.0f ms; %.1f s compiling\n",
         npicks, nfa2, total, nok, total - nok, regs_lo, regs_hi, max_ms, wall_all / 1e3);
  if (sass_checked) printf("SASS check: %d kernels hold HMMA\n", sass_checked);
  if (sass_skipped) printf("SKIPPED: SASS check (%s)\n", skip_why);

  free(jobs);
  for (size_t i = 0; i < npicks; i++) gen_kernel_free(&picks[i]);
  for (size_t i = 0; i < nfa2; i++) gen_kernel_free(&fa2[i]);
  gen_close(g);
  return check_done("test_tc_compile");
}
