/*
** test_compile.c
** Every family of tests/families.h through NVRTC, no GPU needed:
**   1. a sample of the family's FULL space, chosen so that every value of
**      every axis appears at least once (and, where the family asks, a
**      variant whose tiles divide neither the sequence length nor each
**      other), compiled for sm_80 and sm_90 (a family written for one arch,
**      wg: for that one) with zero errors and a sane
**      ptxas report (registers in 1..255, a CUBIN);
**   2. the family's reference configs (tc: FlashAttention-2's own choices),
**      compiled for both archs alike: zero spill bytes (but for a gap a
**      reference lists with its size);
**   3. where a disassembler is at hand (cuobjdump, with the nvdisasm it
**      calls, on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin, or named
**      by $FATUNE_CUOBJDUMP), the SASS of the references marked for it
**      holds the family's instruction (tc: HMMA; wg: HGMMA, and UTMALDG
**      too). That check is its own run, `test_compile --sass-only`, which
**      compiles only the references and exits 77 (SKIPPED) without a
**      disassembler that works.
**
** The sample is greedy: over the family's problems, in as many rounds as it
** asks, take the variant covering the most (axis, value) pairs not yet
** covered; ties go (where the family asks) to pairs not yet shown for the
** pick's head dim, then to pairs covered only once, then twice, then to the
** variant cheaper to compile. Picks past a family's required number per
** problem are taken only when they add a pair never covered.
**
** usage: test_compile [--sass-only] [FAMILY...]     (all families by default)
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp, strtok_r */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compile_pool.h"
#include "fa_util.h"
#include "families.h"
#include "gen.h"

#define NITEMS (FAM_MAX_AXES * FAM_NVALS + 1)
#define MAX_PICKS 64
#define MAX_REFS 16
#define MAX_DIMS 16

static const char *archs[] = {"sm_80", "sm_90"};
#define NARCHS (sizeof archs / sizeof archs[0])

/* One parsed variant: the value index per axis (-1: not a listed value). */
typedef struct parsed {
  int val[FAM_MAX_AXES];
  int odd;      /* tiles divide neither FAM_SEQ nor each other */
  long cost;
  int complete; /* every axis was found in the config text */
} parsed;

/* The sample of one family, as it grows. */
typedef struct sample {
  const family *f;
  gen_state *g;
  const gen_target *t;
  unsigned char covered[NITEMS];
  int dims[MAX_DIMS];
  unsigned char dim_covered[MAX_DIMS][NITEMS];
  size_t ndims;
  gen_kernel picks[MAX_PICKS];
  size_t npicks;
} sample;

static int nvalues(const fam_axis *a) {
  int n = 0;
  while (n < FAM_NVALS && a->values[n]) n++;
  return n;
}

static size_t odd_item(const family *f) {
  return f->naxes * FAM_NVALS;
}

static void parse_config(const family *f, const char *config, parsed *p) {
  memset(p, 0, sizeof *p);
  int found = 0;
  for (size_t a = 0; a < f->naxes; a++) {
    p->val[a] = -1;
    size_t len;
    const char *s = fam_config_value(config, f->axes[a].key, &len);
    if (!s) continue;
    found++;
    for (int v = 0; v < nvalues(&f->axes[a]); v++)
      if (strlen(f->axes[a].values[v]) == len && memcmp(f->axes[a].values[v], s, len) == 0)
        p->val[a] = v;
  }
  p->complete = found == (int)f->naxes;
  const long bm = fam_config_int(config, "block_m"), bn = fam_config_int(config, "block_n");
  if (f->odd_tiles && bm > 0 && bn > 0)
    p->odd = (FAM_SEQ % bm != 0 || FAM_SEQ % bn != 0) && bm % bn != 0 && bn % bm != 0;
  p->cost = f->cost(config);
}

/* How many of p's pairs have been covered exactly `times` times so far. */
static int gain(const family *f, const parsed *p, const unsigned char *covered, int times) {
  int g = 0;
  for (size_t a = 0; a < f->naxes; a++)
    if (p->val[a] >= 0 && covered[a * FAM_NVALS + (size_t)p->val[a]] == times) g++;
  if (p->odd && covered[odd_item(f)] == times) g++;
  return g;
}

/* Pairs never covered count first; ties go to pairs not yet shown for this
** head dim (where the family asks), then to pairs covered only once, then
** twice. Each level counts < 16 pairs; the first is score >> 12. */
static long score(const family *f, const parsed *p, const unsigned char *covered,
                  const unsigned char *dim_covered) {
  long s = gain(f, p, covered, 0);
  s = s * 16 + (f->per_dim ? gain(f, p, dim_covered, 0) : 0);
  for (int times = 1; times < 3; times++) s = s * 16 + gain(f, p, covered, times);
  return s;
}

static void cover(const family *f, const parsed *p, unsigned char *covered) {
  for (size_t a = 0; a < f->naxes; a++)
    if (p->val[a] >= 0 && covered[a * FAM_NVALS + (size_t)p->val[a]] < 255)
      covered[a * FAM_NVALS + (size_t)p->val[a]]++;
  if (p->odd && covered[odd_item(f)] < 255) covered[odd_item(f)]++;
}

/* The coverage kept for one head dim. */
static unsigned char *dim_slot(sample *s, int dim) {
  size_t i = 0;
  while (i < s->ndims && s->dims[i] != dim) i++;
  if (i == s->ndims && s->ndims < MAX_DIMS) s->dims[s->ndims++] = dim;
  return s->dim_covered[i < MAX_DIMS ? i : MAX_DIMS - 1];
}

/* The best variant not taken, or -1. */
static long best_variant(const sample *s, const parsed *ps, const unsigned char *taken, size_t n,
                         const unsigned char *dim_covered, long *best_score) {
  long best = -1;
  *best_score = -1;
  for (size_t i = 0; i < n; i++) {
    if (taken[i]) continue;
    long si = score(s->f, &ps[i], s->covered, dim_covered);
    if (si > *best_score || (si == *best_score && ps[i].cost < ps[best].cost)) {
      best = (long)i;
      *best_score = si;
    }
  }
  return best;
}

static void take(sample *s, const gen_variant *v, const parsed *p, unsigned char *dim_covered,
                 long best_score) {
  cover(s->f, p, s->covered);
  cover(s->f, p, dim_covered);
  gen_kernel *k = &s->picks[s->npicks];
  if (gen_render_config(s->g, v->config, NULL, s->t, k) != 0) {
    CHECK(0, "render %s: %s", v->name, gen_errmsg(s->g));
    return;
  }
  CHECK(strcmp(k->config, v->config) == 0, "%s renders as %s", v->config, k->config);
  printf("pick %-60s +%ld new pairs (score %04lx)\n", k->name, best_score >> 12, best_score);
  s->npicks++;
}

/* Parses every listed variant; checks each shows every axis and is of the family. */
static void parse_all(const family *f, const gen_variant *v, size_t n, parsed *ps) {
  const size_t plen = strlen(f->name);
  int bad = 0, foreign = 0;
  for (size_t i = 0; i < n; i++) {
    parse_config(f, v[i].config, &ps[i]);
    if (!ps[i].complete && bad++ < 3) CHECK(0, "config '%s' lacks an axis", v[i].config);
    if ((strncmp(v[i].name, f->name, plen) != 0 || v[i].name[plen] != '-') && foreign++ < 3)
      CHECK(0, "%s is not of the %s family", v[i].name, f->name);
  }
}

/* On its own arch a family's space lists other families beside it (sm_90a:
** tc and wg): its own variants moved first, in order; their count (0 when
** memory runs out). */
static size_t own_first(const family *f, gen_variant *v, size_t n) {
  gen_variant *tmp = malloc((n ? n : 1) * sizeof *tmp);
  if (!tmp) return 0;
  size_t k = 0, j = n;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(v[i].cfg.family, f->name)) tmp[k++] = v[i];
    else tmp[--j] = v[i];
  }
  memcpy(v, tmp, n * sizeof *v);
  free(tmp);
  return k;
}

/* One problem's full space, listed and parsed once for every round. */
typedef struct listing {
  gen_variant *v;
  size_t n, listed;   /* n: those the sample draws from (own_first), of listed */
  parsed *ps;
  unsigned char *taken;
} listing;

static void listing_free(listing *l) {
  if (l->v) gen_variants_free(l->v, l->listed);
  free(l->ps), free(l->taken);
  memset(l, 0, sizeof *l);
}

static int list_problem(sample *s, const fam_problem *pr, listing *l) {
  const family *f = s->f;
  fa_problem p = {.batch = 2, .heads = 2, .seq_q = FAM_SEQ, .seq_k = FAM_SEQ, .dim = pr->dim,
                  .dtype = pr->dtype, .causal = pr->causal, .op = f->op};
  if (gen_list(s->g, &p, s->t, "full", &l->v, &l->listed) != 0) {
    CHECK(0, "gen_list d%d %s causal=%d: %s", p.dim, fa_dtype_name(p.dtype), p.causal,
          gen_errmsg(s->g));
    l->v = NULL;
    return 0;
  }
  l->n = f->arch ? own_first(f, l->v, l->listed) : l->listed;
  CHECK(l->n > 0, "full space for d%d %s causal=%d is empty", p.dim, fa_dtype_name(p.dtype),
        p.causal);
  l->ps = malloc((l->n ? l->n : 1) * sizeof *l->ps);
  l->taken = calloc(l->n ? l->n : 1, 1);
  if (!l->ps || !l->taken) return -1;
  parse_all(f, l->v, l->n, l->ps);
  return 0;
}

/* This round's picks from one problem's full space. */
static void pick_from(sample *s, const fam_problem *pr, listing *l, int round) {
  const family *f = s->f;
  unsigned char *dim_covered = dim_slot(s, pr->dim);
  for (int k = 0; l->v && k < f->picks_per_round && s->npicks < MAX_PICKS; k++) {
    long best_score;
    const long best = best_variant(s, l->ps, l->taken, l->n, dim_covered, &best_score);
    const int optional = round * f->picks_per_round + k >= f->required_picks;
    if (best < 0 || (optional && (best_score >> 12) == 0)) break;
    l->taken[best] = 1;
    take(s, &l->v[best], &l->ps[best], dim_covered, best_score);
  }
}

/* Every pair, and the odd tiles where asked, is covered. */
static void check_coverage(const sample *s, double ms) {
  const family *f = s->f;
  int missing = 0;
  for (size_t a = 0; a < f->naxes; a++)
    for (int vi = 0; vi < nvalues(&f->axes[a]); vi++)
      if (!s->covered[a * FAM_NVALS + (size_t)vi]) {
        missing++;
        CHECK(0, "no picked %s variant has %s=%s", f->name, f->axes[a].key, f->axes[a].values[vi]);
      }
  if (f->odd_tiles)
    CHECK(s->covered[odd_item(f)], "no picked %s variant has tiles dividing neither seq %d nor "
          "each other", f->name, FAM_SEQ);
  printf("picked %zu variants in %.0f ms; %d (axis, value) pairs missing\n", s->npicks, ms,
         missing);
}

static int pick_sample(sample *s) {
  const double t0 = fa_now_s();
  const size_t np = s->f->nproblems;
  listing *ls = calloc(np ? np : 1, sizeof *ls);
  int rc = ls ? 0 : -1;
  for (size_t pi = 0; rc == 0 && pi < np; pi++) rc = list_problem(s, &s->f->problems[pi], &ls[pi]);
  for (int round = 0; rc == 0 && round < s->f->rounds; round++)
    for (size_t pi = 0; pi < np; pi++) pick_from(s, &s->f->problems[pi], &ls[pi], round);
  for (size_t pi = 0; ls && pi < np; pi++) listing_free(&ls[pi]);
  free(ls);
  if (rc == 0) check_coverage(s, (fa_now_s() - t0) * 1e3);
  return rc;
}

static size_t render_refs(const sample *s, gen_kernel *refs) {
  size_t n = 0;
  for (size_t i = 0; i < s->f->nrefs && n < MAX_REFS; i++) {
    if (gen_render_config(s->g, s->f->refs[i].config, NULL, s->t, &refs[n]) == 0) n++;
    else CHECK(0, "render %s: %s", s->f->refs[i].config, gen_errmsg(s->g));
  }
  return n;
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

/* Lines of `cmd`'s output holding insn: >= 0, or -1 with why. */
static int count_in_output(const char *cmd, const char *insn, char *why, size_t n) {
  FILE *p = popen(cmd, "r");
  if (!p) {
    snprintf(why, n, "cannot run %.200s", cmd);
    return -1;
  }
  char line[1024];
  int hits = 0, lines = 0;
  why[0] = '\0';
  while (fgets(line, sizeof line, p)) {
    lines++;
    if (strstr(line, insn)) hits++;
    if (strstr(line, "fatal") && !why[0]) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(why, n, "%.200s", line);
    }
  }
  const int rc = pclose(p);
  if (rc == 0 && lines > 0) return hits;
  if (!why[0]) snprintf(why, n, "%.200s failed (status %d)", cmd, rc);
  return -1;
}

/* insn instructions in the SASS of a CUBIN: >= 0, or -1 with why. */
static int count_insn(const char *cuobjdump, const fa_compiled *r, const char *insn, char *why,
                      size_t n) {
  char path[] = "/tmp/fatune-sass-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(why, n, "cannot make a temporary file");
    return -1;
  }
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(r->cubin, 1, r->cubin_size, f) == r->cubin_size;
  if (f) ok = fclose(f) == 0 && ok;
  else close(fd);
  int count = -1;
  if (!ok) {
    snprintf(why, n, "cannot write the CUBIN");
  } else {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", cuobjdump, path);
    count = count_in_output(cmd, insn, why, n);
  }
  unlink(path);
  return count;
}

/* What the compiles of one family add up to. */
typedef struct tally {
  size_t total, ok;
  int regs_lo, regs_hi, max_spill, max_stack;
  double max_ms, wall_s;
  const char *cuobjdump;  /* NULL but in the --sass-only run */
  int sass_checked, sass_skipped;
  char skip_why[300];
} tally;

static void check_sass(const family *f, const gen_kernel *k, const char *arch,
                       const fa_compiled *r, tally *t) {
  char why[300];
  const int h = count_insn(t->cuobjdump, r, f->sass_insn, why, sizeof why);
  if (h < 0) {
    t->sass_skipped++;
    snprintf(t->skip_why, sizeof t->skip_why, "%.250s", why);
    return;
  }
  t->sass_checked++;
  printf("  SASS of %s for %s: %d %s instructions\n", k->name, arch, h, f->sass_insn);
  CHECK(h > 0, "%s on %s: no %s in the SASS", k->name, arch, f->sass_insn);
  if (f->sass_also) {
    const int a = count_insn(t->cuobjdump, r, f->sass_also, why, sizeof why);
    printf("  SASS of %s for %s: %d %s instructions\n", k->name, arch, a, f->sass_also);
    CHECK(a > 0, "%s on %s: no %s in the SASS (%s)", k->name, arch, f->sass_also,
          a < 0 ? why : "none");
  }
}

/* One compile's report, checks and share of the tally; ref: its reference
** entry, or NULL for a sampled variant. */
static void judge(const family *f, const gen_kernel *k, const fam_ref *ref, const char *arch,
                  fa_compiled *r, tally *t) {
  const int spill = r->spill_store_bytes + r->spill_load_bytes;
  t->total++;
  printf("%-60s %-5s %s regs %3d  spill %4d/%-4d  stack %4d  smem %6d  %6.0f ms  %s\n", k->name,
         arch, ref ? "ref" : "   ", r->registers, r->spill_store_bytes, r->spill_load_bytes,
         r->stack_bytes, k->smem_bytes, r->compile_ms, r->ok ? "ok" : "FAILED");
  CHECK(r->ok, "%s on %s: %s", k->name, arch, r->error);
  if (!r->ok) return;
  t->ok++;
  CHECK(r->registers > 0 && r->registers <= 255, "%s on %s: %d registers", k->name, arch,
        r->registers);
  CHECK(r->cubin && r->cubin_size > 0, "%s on %s: no CUBIN", k->name, arch);
  if (r->registers < t->regs_lo) t->regs_lo = r->registers;
  if (r->registers > t->regs_hi) t->regs_hi = r->registers;
  if (spill > t->max_spill) t->max_spill = spill;
  if (r->stack_bytes > t->max_stack) t->max_stack = r->stack_bytes;
  if (r->compile_ms > t->max_ms) t->max_ms = r->compile_ms;
  if (!ref) return;
  const int bound = !strcmp(arch, "sm_80") ? ref->spill_sm80 : ref->spill_sm90;
  CHECK(spill <= bound, "%s on %s (%s's choice) spills %d/%d bytes (at most %d)", k->name, arch,
        f->ref_label, r->spill_store_bytes, r->spill_load_bytes, bound);
  if (t->cuobjdump && ref->sass && f->sass_insn) check_sass(f, k, arch, r, t);
}

/* The sample and the references, compiled for one arch on all cores. */
static int compile_arch(const sample *s, const gen_kernel *refs, size_t nrefs, const char *arch,
                        tally *t) {
  const size_t n = s->npicks + nrefs;
  compile_job *jobs = calloc(n ? n : 1, sizeof *jobs);
  if (!jobs) return -1;
  for (size_t i = 0; i < n; i++) {
    const gen_kernel *k = i < s->npicks ? &s->picks[i] : &refs[i - s->npicks];
    jobs[i].source = k->source;
    jobs[i].entry = k->entry;
  }
  const double t0 = fa_now_s();
  CHECK(compile_pool_run(jobs, n, arch, 0, NULL, NULL) == 0, "compile_pool_run for %s failed",
        arch);
  const double wall = fa_now_s() - t0;
  t->wall_s += wall;
  for (size_t i = 0; i < n; i++) {
    const int is_ref = i >= s->npicks;
    const gen_kernel *k = is_ref ? &refs[i - s->npicks] : &s->picks[i];
    judge(s->f, k, is_ref ? &s->f->refs[i - s->npicks] : NULL, arch, &jobs[i].result, t);
    backend_compiled_free(&jobs[i].result);
  }
  printf("%s: %zu compiles in %.1f s wall on %d threads\n", arch, n, wall,
         compile_pool_default_threads());
  free(jobs);
  return 0;
}

static void print_summary(const sample *s, size_t nrefs, size_t narchs, const tally *t) {
  printf("summary: %zu sampled + %zu reference variants x %zu archs = %zu compiles, %zu ok, "
         "%zu failed; registers %d-%d, max spill %d bytes, max stack %d bytes, slowest %.0f ms; "
         "%.1f s compiling\n",
         s->npicks, nrefs, narchs, t->total, t->ok, t->total - t->ok, t->ok ? t->regs_lo : 0,
         t->regs_hi, t->max_spill, t->max_stack, t->max_ms, t->wall_s);
  if (t->sass_checked)
    printf("SASS check: %d kernels hold %s\n", t->sass_checked, s->f->sass_insn);
}

/* cuobjdump: not NULL for the --sass-only run, which compiles only the
** references. */
static int compile_family(const family *f, gen_state *g, const gen_target *t80,
                          const char *cuobjdump, int *sass_checked, char *skip_why, size_t n) {
  static sample s; /* 64 kernels: off the stack */
  memset(&s, 0, sizeof s);
  s.f = f, s.g = g, s.t = t80;
  printf("== %s\n", f->name);
  gen_kernel refs[MAX_REFS];
  size_t nrefs = 0;
  tally t = {.regs_lo = 999, .cuobjdump = cuobjdump};
  /* A family written for one arch is listed and compiled for it alone. */
  gen_target own;
  if (f->arch && gen_target_for_arch(g, f->arch, 0, 0, &own) != 0) {
    CHECK(0, "target %s: %s", f->arch, gen_errmsg(g));
    return -1;
  }
  if (f->arch) s.t = &own;
  const char *const *const on = f->arch ? &f->arch : archs;
  const size_t narchs = f->arch ? 1 : NARCHS;
  int rc = cuobjdump ? 0 : pick_sample(&s);
  if (rc == 0) nrefs = render_refs(&s, refs);
  for (size_t ai = 0; rc == 0 && ai < narchs; ai++) rc = compile_arch(&s, refs, nrefs, on[ai], &t);
  if (rc == 0) print_summary(&s, nrefs, narchs, &t);
  else CHECK(0, "%s: out of memory", f->name);
  *sass_checked += t.sass_checked;
  if (t.sass_skipped) snprintf(skip_why, n, "%s", t.skip_why);
  for (size_t i = 0; i < s.npicks; i++) gen_kernel_free(&s.picks[i]);
  for (size_t i = 0; i < nrefs; i++) gen_kernel_free(&refs[i]);
  return rc;
}

/* The --sass-only run's disassembler; exits 77 (SKIPPED) without one. */
static const char *need_cuobjdump(char *buf, size_t n) {
  const char *c = find_cuobjdump(buf, n);
  if (!c)
    check_skip("SASS check: no cuobjdump on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin "
               "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)");
  return c;
}

int main(int argc, char **argv) {
  int selected[NFAMILIES];
  const int sass_only = argc > 1 && strcmp(argv[1], "--sass-only") == 0;
  if (sass_only) argv[1] = argv[0], argc--, argv++;
  if (fam_select(argc, argv, selected) != 0) return 2;
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
  char cobuf[4200], skip_why[300] = "";
  const char *cuobjdump = sass_only ? need_cuobjdump(cobuf, sizeof cobuf) : NULL;
  int checked = 0;
  for (size_t f = 0; f < NFAMILIES; f++)
    if (selected[f] && (!sass_only || families[f].sass_insn) &&
        compile_family(&families[f], g, &t80, cuobjdump, &checked, skip_why, sizeof skip_why))
      break;
  gen_close(g);
  /* A disassembler that cannot run (no nvdisasm) skips; one that ran for
  ** some kernels and not for others fails. */
  if (sass_only && skip_why[0] && !checked && !check_failures) check_skip(skip_why);
  CHECK(!skip_why[0], "SASS check: %s", skip_why);
  return check_done(sass_only ? "test_compile --sass-only" : "test_compile");
}
