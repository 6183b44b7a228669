/*
** test_counters.c
** The work every kind of kernel does, pinned: a sample of variants that
** covers every value of every enumerated axis of both families (simt and
** tc; tiles, warps, head dims native, padded and no multiple of 8), each
** run once on the CPU emulator at seq_q 70, seq_k 130 (a multiple of no
** tile, so edges are exercised), batch 1, heads 2, validated against the
** float64 reference (and for identical bits under a second schedule), and
** every emulator counter compared with the golden file
** tests/data/counters.golden: one line per variant, its name and its
** counters as key=value. A refactoring of the templates that keeps the
** kernels' arithmetic, memory traffic, barriers and instruction mix keeps
** this test passing.
**
** The test fails, naming the variant and the counter, on any difference,
** on a variant missing from the golden file or only in it, and on a
** variant that does not validate.
**
** FATUNE_COUNTERS_WRITE=PATH writes the counters of the current templates
** to PATH instead of comparing (to regenerate the golden file, when a
** change of the kernels' work is intended):
**   FATUNE_COUNTERS_WRITE=tests/data/counters.golden build/tests/test_counters
*/
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "par.h"
#include "validate.h"

#ifndef FATUNE_COUNTERS_GOLDEN
#error "FATUNE_COUNTERS_GOLDEN: the golden file's path, defined by the build"
#endif

#define SEED 20240611ull

/* The sample, written out: each line varies several axes at once. */
static const char *const sample[] = {
  "family=simt,dtype=fp32,dim=16,causal=0,block_m=32,block_n=16,warps=2,norm=deferred,"
  "par=q_outer,split=split_q,layout=pad,q=smem",
  "family=simt,dtype=fp32,dim=16,causal=1,block_m=32,block_n=16,warps=2,norm=eager,"
  "par=q_outer,split=split_q,layout=row,q=reg",
  "family=simt,dtype=fp64,dim=24,causal=1,block_m=16,block_n=32,warps=4,norm=deferred,"
  "par=kv_outer,split=split_q,layout=kt,q=smem",
  "family=simt,dtype=fp64,dim=24,causal=0,block_m=16,block_n=32,warps=4,norm=eager,"
  "par=kv_outer,split=split_k,layout=pad,q=smem",
  "family=simt,dtype=fp32,dim=24,causal=1,block_m=64,block_n=32,warps=4,norm=deferred,"
  "par=q_outer,split=split_k,layout=kt,q=smem",
  "family=simt,dtype=fp32,dim=16,causal=0,block_m=8,block_n=8,warps=1,norm=eager,"
  "par=q_outer,split=split_q,layout=kt,q=reg",
  "family=simt,dtype=fp64,dim=16,causal=1,block_m=64,block_n=64,warps=8,norm=deferred,"
  "par=q_outer,split=split_q,layout=row,q=reg",
  "family=simt,dtype=fp32,dim=24,causal=1,block_m=32,block_n=32,warps=4,norm=eager,"
  "par=kv_outer,split=split_k,layout=row,q=smem",
  "family=simt,dtype=fp64,dim=16,causal=0,block_m=32,block_n=16,warps=2,norm=eager,"
  "par=q_outer,split=split_k,layout=pad,q=smem",
  "family=simt,dtype=fp32,dim=16,causal=0,block_m=3,block_n=5,warps=1,norm=deferred,"
  "par=q_outer,split=split_q,layout=pad,q=smem",
  /* FlashAttention-2's own choices (d64: keys in 2 parts) */
  "family=tc,dtype=fp16,dim=64,causal=0,block_m=128,block_n=128,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0",
  "family=tc,dtype=bf16,dim=64,causal=1,block_m=128,block_n=128,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0",
  "family=tc,dtype=fp16,dim=128,causal=1,block_m=64,block_n=64,warps=4,norm=deferred,"
  "layout=swizzle,q=reg,stages=2,q_share=0",
  "family=tc,dtype=bf16,dim=128,causal=0,block_m=128,block_n=64,warps=4,norm=eager,"
  "layout=swizzle,q=smem,stages=3,q_share=0",
  /* narrow swizzle (4 chunks mod 8); a copy pass that does not divide the rows */
  "family=tc,dtype=fp16,dim=32,causal=1,block_m=64,block_n=48,warps=4,norm=eager,"
  "layout=swizzle,q=smem,stages=1,q_share=0",
  /* chunk-by-chunk copies (threads no multiple of the chunks per row) */
  "family=tc,dtype=bf16,dim=96,causal=0,block_m=64,block_n=48,warps=4,norm=deferred,"
  "layout=swizzle,q=reg,stages=3,q_share=1",
  /* a dim no multiple of 8: 2-byte copies, padded to 64 */
  "family=tc,dtype=fp16,dim=36,causal=1,block_m=32,block_n=32,warps=2,norm=deferred,"
  "layout=pad,q=smem,stages=2,q_share=0",
  /* padded dim with 16-byte copies; one warp */
  "family=tc,dtype=bf16,dim=40,causal=0,block_m=16,block_n=16,warps=1,norm=eager,"
  "layout=row,q=reg,stages=1,q_share=0",
  /* swizzled copies of fewer than 8 rows a pass */
  "family=tc,dtype=fp16,dim=64,causal=0,block_m=16,block_n=32,warps=1,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0",
  "family=tc,dtype=bf16,dim=256,causal=1,block_m=64,block_n=64,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0",
  "family=tc,dtype=fp16,dim=160,causal=0,block_m=128,block_n=32,warps=8,norm=eager,"
  "layout=pad,q=reg,stages=2,q_share=0",
  "family=tc,dtype=bf16,dim=192,causal=1,block_m=64,block_n=32,warps=4,norm=deferred,"
  "layout=row,q=smem,stages=1,q_share=0",
  /* block_m 192, keys in 5 parts */
  "family=tc,dtype=fp16,dim=80,causal=0,block_m=192,block_n=80,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0",
  "family=tc,dtype=bf16,dim=128,causal=1,block_m=128,block_n=128,warps=8,norm=eager,"
  "layout=swizzle,q=reg,stages=1,q_share=1",
  "family=tc,dtype=fp16,dim=64,causal=0,block_m=128,block_n=176,warps=8,norm=deferred,"
  "layout=swizzle,q=reg,stages=3,q_share=0",
  "family=tc,dtype=fp16,dim=64,causal=1,block_m=32,block_n=64,warps=2,norm=eager,"
  "layout=row,q=smem,stages=3,q_share=0",
  /* FADD row sums, P V by k16 steps, carried K/V addresses; 128-byte copy spans */
  "family=tc,dtype=bf16,dim=128,causal=0,block_m=128,block_n=64,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=2,q_share=0,rowsum=fadd,pv=step,kv_addr=carry",
  "family=tc,dtype=fp16,dim=64,causal=1,block_m=64,block_n=64,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=1,q_share=0,rowsum=fadd,pv=block,kv_addr=carry",
  "family=tc,dtype=bf16,dim=256,causal=1,block_m=64,block_n=32,warps=4,norm=deferred,"
  "layout=swizzle,q=smem,stages=3,q_share=0,rowsum=mma,pv=step,kv_addr=rebuild",
};
#define NSAMPLE (sizeof sample / sizeof sample[0])

/* Every value the sample must cover, per family; "*" is any family. */
static const struct coverage {
  const char *family, *key;
  const char *values[8];
} coverage[] = {
  {"simt", "dtype", {"fp32", "fp64"}},
  {"simt", "warps", {"1", "2", "4", "8"}},
  {"simt", "norm", {"eager", "deferred"}},
  {"simt", "par", {"q_outer", "kv_outer"}},
  {"simt", "split", {"split_q", "split_k"}},
  {"simt", "layout", {"row", "pad", "kt"}},
  {"simt", "q", {"smem", "reg"}},
  {"simt", "causal", {"0", "1"}},
  {"tc", "dtype", {"fp16", "bf16"}},
  {"tc", "dim", {"32", "64", "96", "128", "160", "192", "256"}},
  {"tc", "block_m", {"16", "32", "64", "128", "192"}},
  {"tc", "warps", {"1", "2", "4", "8"}},
  {"tc", "norm", {"eager", "deferred"}},
  {"tc", "layout", {"row", "pad", "swizzle"}},
  {"tc", "q", {"smem", "reg"}},
  {"tc", "stages", {"1", "2", "3"}},
  {"tc", "q_share", {"0", "1"}},
  {"tc", "causal", {"0", "1"}},
  {"tc", "rowsum", {"mma", "fadd"}},
  {"tc", "pv", {"block", "step"}},
  {"tc", "kv_addr", {"rebuild", "carry"}},
};
#define NCOVERAGE (sizeof coverage / sizeof coverage[0])

static const struct counter {
  const char *name;
  size_t offset;
} counters[] = {
#define COUNTER(f) {#f, offsetof(fa_counters, f)}
  COUNTER(gmem_read), COUNTER(gmem_written), COUNTER(smem_read), COUNTER(smem_written),
  COUNTER(exp2),      COUNTER(log2),         COUNTER(shuffles), COUNTER(mma),
  COUNTER(ldmatrix),  COUNTER(cp_async),     COUNTER(barriers), COUNTER(warp_syncs),
  COUNTER(rescale),
#undef COUNTER
};
#define NCOUNTERS (sizeof counters / sizeof counters[0])

static unsigned long long counter_of(const fa_counters *c, size_t i) {
  return *(const unsigned long long *)((const char *)c + counters[i].offset);
}

typedef struct item {
  gen_kernel k;
  fa_build b;
  fa_problem p;
  val_case vc;
  attn_inputs in;
  val_result r;
  int ready;  /* inputs made and uploaded */
} item;

typedef struct run {
  fa_backend *be;
  item *items;
} run;

/* The value of `key` in canonical config text, into buf; NULL if absent. */
static const char *config_value(const char *cfg, const char *key, char *buf, size_t n) {
  const size_t kl = strlen(key);
  for (const char *s = cfg; s; s = strchr(s, ',')) {
    if (*s == ',') s++;
    if (strncmp(s, key, kl) == 0 && s[kl] == '=') {
      const size_t vl = strcspn(s + kl + 1, ",");
      if (vl >= n) return NULL;
      memcpy(buf, s + kl + 1, vl);
      buf[vl] = '\0';
      return buf;
    }
  }
  return NULL;
}

/* Every value of the coverage table in some rendered variant. */
static void check_coverage(const item *items, size_t n) {
  char fam[16], val[32];
  for (size_t c = 0; c < NCOVERAGE; c++)
    for (size_t v = 0; coverage[c].values[v]; v++) {
      int seen = 0;
      for (size_t i = 0; i < n && !seen; i++)
        seen = config_value(items[i].k.config, "family", fam, sizeof fam) &&
               strcmp(fam, coverage[c].family) == 0 &&
               config_value(items[i].k.config, coverage[c].key, val, sizeof val) &&
               strcmp(val, coverage[c].values[v]) == 0;
      CHECK(seen, "the sample has no %s variant with %s=%s", coverage[c].family,
            coverage[c].key, coverage[c].values[v]);
    }
}

/* The problem of a rendered variant: its dim, dtype and causal. */
static int problem_of(const gen_kernel *k, fa_problem *p) {
  char dtype[16], dim[16], causal[8];
  if (!config_value(k->config, "dtype", dtype, sizeof dtype) ||
      !config_value(k->config, "dim", dim, sizeof dim) ||
      !config_value(k->config, "causal", causal, sizeof causal))
    return -1;
  *p = (fa_problem){.batch = 1, .heads = 2, .seq_q = 70, .seq_k = 130, .dim = atoi(dim),
                    .causal = atoi(causal)};
  return fa_dtype_parse(dtype, &p->dtype);
}

static void run_one(size_t i, void *ud) {
  run *s = ud;
  item *it = &s->items[i];
  if (!it->b.prog || !it->ready) return;
  val_opts o = {.nschedules = 2, .schedule = {FA_SCHED_FORWARD, FA_SCHED_REVERSE}, .seed = SEED + i,
                .threads = 1};
  char err[256];
  if (val_check(s->be, &it->vc, &it->in, it->b.prog, &it->k, &o, &it->r, err, sizeof err) != 0) {
    it->r.status = VAL_CRASHED;
    snprintf(it->r.msg, sizeof it->r.msg, "cannot validate: %s", err);
  }
}

/* ---- The golden file ---- */

typedef struct golden {
  char name[160];
  unsigned long long v[NCOUNTERS];
  int used;
} golden;

/* One "name key=value ..." line; -1 when malformed. */
static int parse_line(char *line, golden *g) {
  char *tok = strtok(line, " \t\n");
  if (!tok || strlen(tok) >= sizeof g->name) return -1;
  strcpy(g->name, tok);
  int seen[NCOUNTERS] = {0};
  while ((tok = strtok(NULL, " \t\n"))) {
    char *eq = strchr(tok, '=');
    if (!eq) return -1;
    *eq = '\0';
    size_t c = 0;
    while (c < NCOUNTERS && strcmp(counters[c].name, tok) != 0) c++;
    if (c == NCOUNTERS || seen[c]) return -1;
    char *end;
    g->v[c] = strtoull(eq + 1, &end, 10);
    if (*end) return -1;
    seen[c] = 1;
  }
  for (size_t c = 0; c < NCOUNTERS; c++)
    if (!seen[c]) return -1;
  return 0;
}

/* The golden entries; NULL (and a failed check) when the file is unreadable. */
static golden *read_golden(const char *path, size_t *n) {
  FILE *f = fopen(path, "r");
  CHECK(f, "cannot open the golden file %s (FATUNE_COUNTERS_WRITE makes one)", path);
  if (!f) return NULL;
  golden *g = NULL;
  size_t cap = 0, lineno = 0;
  char line[1024];
  *n = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (line[0] == '#' || line[strspn(line, " \t\n")] == '\0') continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      golden *t = realloc(g, cap * sizeof *g);
      if (!t) break;
      g = t;
    }
    memset(&g[*n], 0, sizeof *g);
    if (parse_line(line, &g[*n]) == 0) (*n)++;
    else CHECK(0, "%s:%zu: malformed line", path, lineno);
  }
  fclose(f);
  return g;
}

static void write_golden(const char *path, const item *items, size_t n) {
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  if (!f) return;
  fprintf(f, "# Emulator counters of test_counters' sample: seq_q 70, seq_k 130, batch 1,\n"
             "# heads 2. Written by FATUNE_COUNTERS_WRITE=PATH test_counters.\n");
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "%s", items[i].k.name);
    for (size_t c = 0; c < NCOUNTERS; c++)
      fprintf(f, " %s=%llu", counters[c].name, counter_of(&items[i].r.counters, c));
    fputc('\n', f);
  }
  CHECK(fclose(f) == 0, "writing %s", path);
  printf("wrote the counters of %zu variants to %s\n", n, path);
}

static void compare_golden(const char *path, const item *items, size_t n) {
  size_t ng = 0;
  golden *g = read_golden(path, &ng);
  if (!g) return;
  for (size_t i = 0; i < n; i++) {
    const item *it = &items[i];
    size_t j = 0;
    while (j < ng && strcmp(g[j].name, it->k.name) != 0) j++;
    CHECK(j < ng, "%s: not in the golden file", it->k.name);
    if (j == ng) continue;
    g[j].used = 1;
    for (size_t c = 0; c < NCOUNTERS; c++) {
      const unsigned long long got = counter_of(&it->r.counters, c);
      CHECK(got == g[j].v[c], "%s: %s is %llu, golden %llu", it->k.name, counters[c].name, got,
            g[j].v[c]);
    }
  }
  for (size_t j = 0; j < ng; j++)
    CHECK(g[j].used, "%s: in the golden file, not rendered by the sample", g[j].name);
  printf("%zu variants compared with %zu golden lines, %zu counters each\n", n, ng,
         (size_t)NCOUNTERS);
  free(g);
}

/* ---- Setup ---- */

static size_t render_sample(gen_state *g, const gen_target *t, item *items) {
  size_t n = 0;
  for (size_t i = 0; i < NSAMPLE; i++) {
    item *it = &items[n];
    memset(it, 0, sizeof *it);
    if (gen_render_config(g, sample[i], NULL, t, &it->k) != 0) {
      CHECK(0, "rendering %s: %s", sample[i], gen_errmsg(g));
      continue;
    }
    n++;
  }
  return n;
}

static void make_inputs(fa_backend *be, item *it, unsigned long long seed) {
  char err[256];
  if (problem_of(&it->k, &it->p) != 0) {
    CHECK(0, "%s: no dim, dtype or causal in %s", it->k.name, it->k.config);
    return;
  }
  if (val_case_make(&it->vc, &it->p, seed, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", it->k.name, err);
    return;
  }
  if (attn_inputs_upload(be, &it->p, it->vc.q, it->vc.k, it->vc.v, &it->in, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", it->k.name, err);
    val_case_free(&it->vc);
    return;
  }
  it->ready = 1;
}

int main(void) {
  const char *write_path = getenv("FATUNE_COUNTERS_WRITE");
  char err[512];
  gen_state *g;
  gen_target t;
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0) {
    fprintf(stderr, "generator: %s\n", err);
    return 1;
  }
  run s = {0};
  CHECK(backend_open("emu", &s.be, NULL, 0, err, sizeof err) == 0, "%s", err);
  s.items = calloc(NSAMPLE, sizeof *s.items);
  const gen_kernel **ks = calloc(NSAMPLE, sizeof *ks);
  fa_build *builds = calloc(NSAMPLE, sizeof *builds);
  if (!s.be || !s.items || !ks || !builds) return check_done("test_counters");

  const size_t n = render_sample(g, &t, s.items);
  check_coverage(s.items, n);
  for (size_t i = 0; i < n; i++) make_inputs(s.be, &s.items[i], SEED + 100 * i), ks[i] = &s.items[i].k;
  CHECK(backend_compile(s.be, ks, n, 0, builds, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < n; i++) {
    s.items[i].b = builds[i];
    CHECK(builds[i].prog, "%s does not compile: %s", s.items[i].k.name,
          builds[i].log ? builds[i].log : "?");
  }
  CHECK(par_for(n, 0, run_one, &s, NULL, NULL) == 0, "par_for");
  int all_ok = 1;
  for (size_t i = 0; i < n; i++) {
    const item *it = &s.items[i];
    const int ok = it->b.prog && it->ready && it->r.status == VAL_OK;
    all_ok &= ok;
    CHECK(ok, "%s does not validate: %s (rel %.3g, max abs %.3g)", it->k.name,
          it->ready ? it->r.msg : "no inputs", it->r.rel_err, it->r.max_abs_err);
  }

  if (write_path && all_ok && n == NSAMPLE) write_golden(write_path, s.items, n);
  else if (write_path) CHECK(0, "not writing %s: the sample does not all run and validate", write_path);
  else compare_golden(FATUNE_COUNTERS_GOLDEN, s.items, n);

  for (size_t i = 0; i < n; i++) {
    item *it = &s.items[i];
    backend_build_free(s.be, &it->b);
    if (it->ready) attn_inputs_free(s.be, &it->in), val_case_free(&it->vc);
    gen_kernel_free(&it->k);
  }
  free(ks), free(builds), free(s.items);
  backend_close(s.be);
  gen_close(g);
  return check_done("test_counters");
}
