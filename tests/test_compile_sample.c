/*
** test_compile_sample.c
** A small sample of the FULL search space, chosen so that every value of
** every axis appears at least once, rendered and compiled with NVRTC for
** sm_80 and sm_90. Needs no GPU: it checks that every variant compiles, and
** that the ptxas report is sane (registers in 1..255).
**
** The sample is chosen greedily: per problem (dims 4 16 64 128 x fp32 fp64
** x causal 0 1), take 2 or 3 variants, each covering the most (axis, value)
** pairs not yet covered; ties go to the variant showing the most pairs seen
** only once (then twice, three times), then to the one cheaper to compile.
** One extra item asks for a variant whose tiles divide neither the sequence
** length nor each other (e.g. block_m 3, block_n 8).
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "compile_pool.h"
#include "gen.h"

#define SEQ 256

/* The axes and every value the full space must show. */
static const struct axis {
  const char *key;
  const char *values[10];
} axes[] = {
  {"dtype", {"fp32", "fp64"}},
  {"causal", {"0", "1"}},
  {"dim", {"4", "16", "64", "128"}},
  {"block_m", {"1", "2", "3", "4", "8", "16", "32", "64", "128"}},
  {"block_n", {"1", "2", "3", "4", "8", "16", "32", "64", "128"}},
  {"warps", {"1", "2", "4", "8"}},
  {"norm", {"eager", "deferred"}},
  {"par", {"q_outer", "kv_outer"}},
  {"split", {"split_q", "split_k"}},
  {"layout", {"row", "pad", "kt"}},
  {"q", {"smem", "reg"}},
};
#define NAXES (sizeof axes / sizeof axes[0])
#define NVALS 10
#define ODD_ITEM (NAXES * NVALS) /* the "odd tiles" item */
#define NITEMS (ODD_ITEM + 1)
#define MAX_PICKS 64

static int nvalues(size_t a) {
  int n = 0;
  while (n < NVALS && axes[a].values[n]) n++;
  return n;
}

/* One parsed variant: the value index per axis (-1: not a listed value). */
typedef struct parsed {
  int val[NAXES];
  int bm, bn, dim, qreg, fp64;
  int odd;       /* tiles divide neither SEQ nor each other */
  long cost;     /* a rough guess of compile time */
  int complete;  /* every axis was found in the config text */
} parsed;

static void parse_config(const char *config, parsed *p) {
  memset(p, 0, sizeof *p);
  for (size_t a = 0; a < NAXES; a++) p->val[a] = -1;
  int found = 0;
  const char *s = config;
  while (*s) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    if (eq) {
      size_t klen = (size_t)(eq - s), vlen = len - klen - 1;
      for (size_t a = 0; a < NAXES; a++) {
        if (strlen(axes[a].key) != klen || memcmp(axes[a].key, s, klen) != 0) continue;
        found++;
        for (int v = 0; v < nvalues(a); v++)
          if (strlen(axes[a].values[v]) == vlen && memcmp(axes[a].values[v], eq + 1, vlen) == 0)
            p->val[a] = v;
        if (!strcmp(axes[a].key, "block_m")) p->bm = atoi(eq + 1);
        if (!strcmp(axes[a].key, "block_n")) p->bn = atoi(eq + 1);
        if (!strcmp(axes[a].key, "dim")) p->dim = atoi(eq + 1);
        if (!strcmp(axes[a].key, "q")) p->qreg = vlen == 3 && !memcmp(eq + 1, "reg", 3);
        if (!strcmp(axes[a].key, "dtype")) p->fp64 = vlen == 4 && !memcmp(eq + 1, "fp64", 4);
      }
    }
    s += len;
    if (*s == ',') s++;
  }
  p->complete = found == (int)NAXES;
  if (p->bm > 0 && p->bn > 0)
    p->odd = (SEQ % p->bm != 0 || SEQ % p->bn != 0) && p->bm % p->bn != 0 && p->bn % p->bm != 0;
  /* Unrolled loops grow with the tile and with Q held in registers. */
  p->cost = (long)p->bm * p->bn + (long)p->dim * (p->bm + p->bn) +
            (p->qreg ? 4L * p->bm * p->dim : 0);
  if (p->fp64) p->cost *= 2;
}

/* How many of p's pairs have been covered exactly `times` times so far. */
static int gain(const parsed *p, const unsigned char *covered, int times) {
  int g = 0;
  for (size_t a = 0; a < NAXES; a++)
    if (p->val[a] >= 0 && covered[a * NVALS + (size_t)p->val[a]] == times) g++;
  if (p->odd && covered[ODD_ITEM] == times) g++;
  return g;
}

/* Pairs never covered count first; ties go to pairs not yet shown for this
** head dim (so each dim also sees kv_outer, split_k, q=reg, ...), then to
** pairs covered only once, then twice. Each level counts < 16 pairs. */
static long score(const parsed *p, const unsigned char *covered, const unsigned char *dim_covered) {
  long s = gain(p, covered, 0);
  s = s * 16 + gain(p, dim_covered, 0);
  for (int times = 1; times < 3; times++) s = s * 16 + gain(p, covered, times);
  return s;
}

static void cover(const parsed *p, unsigned char *covered) {
  for (size_t a = 0; a < NAXES; a++)
    if (p->val[a] >= 0 && covered[a * NVALS + (size_t)p->val[a]] < 255)
      covered[a * NVALS + (size_t)p->val[a]]++;
  if (p->odd && covered[ODD_ITEM] < 255) covered[ODD_ITEM]++;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(void) {
  gen_state *g;
  char err[512];
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    return 1;
  }
  /* List against sm_80, the smaller of the two targets, so that every pick
  ** fits both. */
  gen_target t80;
  if (gen_target_for_arch(g, "sm_80", 0, 0, &t80) != 0) {
    fprintf(stderr, "target: %s\n", gen_errmsg(g));
    return 1;
  }

  static const int dims[] = {4, 16, 64, 128};
  unsigned char covered[NITEMS] = {0};
  unsigned char dim_covered[4][NITEMS] = {{0}};
  gen_kernel picks[MAX_PICKS];
  size_t npicks = 0;
  double t0 = now_ms();

  for (size_t di = 0; di < 4; di++)
    for (int dt = 0; dt < 2; dt++)
      for (int causal = 0; causal < 2; causal++) {
        fa_problem p = {.batch = 2, .heads = 2, .seq_q = SEQ, .seq_k = SEQ, .dim = dims[di],
                        .dtype = (fa_dtype)dt, .causal = causal};
        gen_variant *v;
        size_t n;
        if (gen_list(g, &p, &t80, "full", &v, &n) != 0) {
          CHECK(0, "gen_list d%d %s causal=%d: %s", p.dim, fa_dtype_name(p.dtype), causal,
                gen_errmsg(g));
          continue;
        }
        CHECK(n > 0, "full space for d%d %s causal=%d is empty", p.dim, fa_dtype_name(p.dtype),
              causal);
        parsed *ps = malloc(n * sizeof *ps);
        unsigned char *taken = calloc(n ? n : 1, 1);
        if (!ps || !taken) {
          fprintf(stderr, "out of memory\n");
          return 1;
        }
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
          parse_config(v[i].config, &ps[i]);
          if (!ps[i].complete && bad++ < 3) CHECK(0, "config '%s' lacks an axis", v[i].config);
        }
        for (int k = 0; k < 3 && npicks < MAX_PICKS; k++) {
          long best = -1, best_score = -1;
          for (size_t i = 0; i < n; i++) {
            if (taken[i]) continue;
            long si = score(&ps[i], covered, dim_covered[di]);
            if (si > best_score || (si == best_score && ps[i].cost < ps[best].cost)) {
              best = (long)i;
              best_score = si;
            }
          }
          int best_gain = (int)(best_score >> 12);
          if (best < 0 || (k == 2 && best_gain == 0)) break; /* a third only when it adds */
          taken[best] = 1;
          cover(&ps[best], covered);
          cover(&ps[best], dim_covered[di]);
          gen_kernel *kk = &picks[npicks];
          if (gen_render_config(g, v[best].config, NULL, &t80, kk) != 0) {
            CHECK(0, "render %s: %s", v[best].name, gen_errmsg(g));
            continue;
          }
          CHECK(strcmp(kk->config, v[best].config) == 0, "%s renders as %s", v[best].config,
                kk->config);
          printf("pick %-60s +%d new pairs (score %04lx)\n", kk->name, best_gain, best_score);
          npicks++;
        }
        free(ps);
        free(taken);
        gen_variants_free(v, n);
      }

  /* Coverage is complete. */
  int missing = 0;
  for (size_t a = 0; a < NAXES; a++)
    for (int vi = 0; vi < nvalues(a); vi++)
      if (!covered[a * NVALS + (size_t)vi]) {
        missing++;
        CHECK(0, "no picked variant has %s=%s", axes[a].key, axes[a].values[vi]);
      }
  CHECK(covered[ODD_ITEM], "no picked variant has tiles dividing neither seq %d nor each other",
        SEQ);
  printf("picked %zu variants in %.0f ms; %d (axis, value) pairs missing\n", npicks,
         now_ms() - t0, missing);

  /* Compile every pick for both archs, on all cores. */
  static const char *archs[] = {"sm_80", "sm_90"};
  compile_job *jobs = calloc(npicks ? npicks : 1, sizeof *jobs);
  if (!jobs) return 1;
  size_t total = 0, nok = 0;
  int max_regs = 0, max_spill = 0, max_stack = 0;
  double max_ms = 0, wall_all = 0;
  for (size_t ai = 0; ai < 2; ai++) {
    for (size_t i = 0; i < npicks; i++) {
      memset(&jobs[i], 0, sizeof jobs[i]);
      jobs[i].source = picks[i].source;
      jobs[i].entry = picks[i].entry;
    }
    double w0 = now_ms();
    int rc = compile_pool_run(jobs, npicks, archs[ai], 0, NULL, NULL);
    double wall = now_ms() - w0;
    wall_all += wall;
    CHECK(rc == 0, "compile_pool_run for %s failed", archs[ai]);
    for (size_t i = 0; i < npicks; i++) {
      nvrtc_result *r = &jobs[i].result;
      int spill = r->spill_store_bytes + r->spill_load_bytes;
      total++;
      printf("%-60s %-6s regs %3d  spill %4d/%-4d  stack %4d  %6.0f ms  %s\n", picks[i].name,
             archs[ai], r->registers, r->spill_store_bytes, r->spill_load_bytes, r->stack_bytes,
             r->compile_ms, r->ok ? "ok" : "FAILED");
      CHECK(r->ok, "%s on %s: %s", picks[i].name, archs[ai], r->error);
      if (!r->ok) {
        nvrtc_result_free(r);
        continue;
      }
      nok++;
      CHECK(r->registers > 0 && r->registers <= 255, "%s on %s: %d registers", picks[i].name,
            archs[ai], r->registers);
      CHECK(r->cubin && r->cubin_size > 0, "%s on %s: no CUBIN", picks[i].name, archs[ai]);
      if (r->registers > max_regs) max_regs = r->registers;
      if (spill > max_spill) max_spill = spill;
      if (r->stack_bytes > max_stack) max_stack = r->stack_bytes;
      if (r->compile_ms > max_ms) max_ms = r->compile_ms;
      nvrtc_result_free(r);
    }
    printf("%s: %zu compiles in %.1f s wall on %d threads\n", archs[ai], npicks, wall / 1e3,
           compile_pool_default_threads());
  }
  printf("summary: %zu variants x 2 archs = %zu compiles, %zu ok, %zu failed; "
         "max registers %d, max spill %d bytes, max stack %d bytes, slowest %.0f ms; "
         "%.1f s compiling\n",
         npicks, total, nok, total - nok, max_regs, max_spill, max_stack, max_ms, wall_all / 1e3);

  free(jobs);
  for (size_t i = 0; i < npicks; i++) gen_kernel_free(&picks[i]);
  gen_close(g);
  return check_done("compile_sample");
}
