/*
** test_fuzz_kernels.c
** A differential fuzz of the generated kernels: random variants of every
** family (tests/families.h: each axis of its table at a random value,
** drawn again until the config fits), each on a random problem of its
** own, run on the CPU emulator under two random schedules that must give
** the same bits, and compared with the float64 reference within
** val_tolerance. The problems are drawn where kernels go wrong: lengths
** around the tile's boundaries, more K/V blocks than pipeline stages (the
** producer's ring wraps around), the causal diagonal at any offset within
** a block (seq_k - seq_q over a whole block_n period and beyond), several
** batches and heads, and a scale of the caller's.
**
** usage: test_fuzz_kernels [CASES [FAMILY...]]   (8 cases, every family)
** The seed is printed; FATUNE_TEST_SEED replays a run. Cases are shared out
** among the families in turn.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "families.h"
#include "fa_util.h"
#include "par.h"
#include "validate.h"

#define MAX_CASES 1000

typedef struct fuzz_case {
  const family *f;
  gen_kernel k;
  fa_build b;
  fa_problem p;
  fa_schedule sched[2];
  val_case vc;
  attn_inputs in;
  int ready;         /* rendered, with inputs */
  val_result r;
} fuzz_case;

static unsigned long long rng_state;

static unsigned long long rng_next(void) {
  unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int pick(int lo, int hi) { return lo + (int)(rng_next() % (unsigned)(hi - lo + 1)); }

/* A length around a multiple of a block: n blocks and a tail of -1, 0, 1
** or anything, at least 1. */
static int around(int block, int nmin, int nmax) {
  const int n = pick(nmin, nmax), tail = pick(0, 3);
  const int any = block > 1 ? pick(1, block - 1) : 0;
  const int len = n * block + (tail == 0 ? -1 : tail == 1 ? 0 : tail == 2 ? 1 : any);
  return len < 1 ? 1 : len;
}

/* The problem for a variant: its tile and stages decide the lengths. */
static fa_problem draw_problem(const fa_problem *fp, const char *config) {
  const int bm = (int)fam_config_int(config, "block_m"), bn = (int)fam_config_int(config, "block_n");
  const long st = fam_config_int(config, "stages");
  const int stages = st > 0 ? (int)st : 1;
  fa_problem p = {.batch = pick(1, 2), .heads = pick(1, 2), .dim = fp->dim, .dtype = fp->dtype,
                  .causal = fp->causal, .op = fp->op};
  p.seq_q = around(bm, 0, 2);
  switch (pick(0, 2)) {
  case 0:  /* the ring around more than once */
    p.seq_k = around(bn, stages + 1, stages + 2);
    break;
  case 1:  /* the diagonal anywhere in a block: seq_k - seq_q over a period and more */
    p.seq_k = p.seq_q + pick(-bn, 2 * bn);
    break;
  default:
    p.seq_k = around(bn, 0, 2);
  }
  if (p.seq_k < 1) p.seq_k = 1;
  if (pick(0, 3) == 0) p.scale = 0.05 + 0.45 * (double)pick(0, 1000) / 1000.0;
  return p;
}

/* A random config of f for lp: every axis of the family's table (those
** test_compile must cover) at a random value, rendered; drawn again until
** one fits the target. 0, or -1 when none did. */
static int draw_config(const family *f, const fa_problem *lp, gen_state *g, const gen_target *t,
                       gen_kernel *k) {
  for (int tries = 0; tries < 1000; tries++) {
    char config[512];
    int n = snprintf(config, sizeof config, "family=%s", f->name);
    for (size_t a = 0; a < f->naxes; a++) {
      const fam_axis *ax = &f->axes[a];
      if (!strcmp(ax->key, "dtype") || !strcmp(ax->key, "dim") || !strcmp(ax->key, "causal"))
        continue;
      int nv = 0;
      while (nv < FAM_NVALS && ax->values[nv]) nv++;
      n += snprintf(config + n, sizeof config - (size_t)n, ",%s=%s", ax->key,
                    ax->values[pick(0, nv - 1)]);
    }
    if (gen_render_config(g, config, lp, t, k) == 0) return 0;
  }
  return -1;
}

/* A random variant of one of f's problems, rendered, and a problem of its
** own with its inputs and reference. */
static void draw(fuzz_case *c, const family *f, gen_state *g, const gen_target *t,
                 unsigned long long seed) {
  const fam_problem *fp = &f->problems[pick(0, (int)f->nproblems - 1)];
  /* Causal or not at random: it is a key of the space, not the variant's. */
  fa_problem lp = {.batch = 1, .heads = 1, .seq_q = f->list_seq, .seq_k = f->list_seq,
                   .dim = fp->dim, .dtype = fp->dtype, .causal = pick(0, 1), .op = f->op};
  c->f = f;
  if (draw_config(f, &lp, g, t, &c->k) != 0) {
    CHECK(0, "%s d%d %s: no config of 1000 drawn fits: %s", f->name, fp->dim,
          fa_dtype_name(fp->dtype), gen_errmsg(g));
    return;
  }
  c->p = draw_problem(&lp, c->k.config);
  static const fa_schedule all[] = {FA_SCHED_FORWARD, FA_SCHED_REVERSE, FA_SCHED_RANDOM,
                                    FA_SCHED_SKEW};
  c->sched[0] = all[pick(0, 3)];
  do c->sched[1] = all[pick(0, 3)]; while (c->sched[1] == c->sched[0]);
  char err[512];
  if (val_case_make(&c->vc, &c->p, seed, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", c->k.name, err);
    gen_kernel_free(&c->k);
    return;
  }
  c->ready = 1;
}

typedef struct fuzz { fuzz_case *cases; fa_backend *be; unsigned long long seed; } fuzz;

static void check_one(size_t i, void *ud) {
  fuzz *z = ud;
  fuzz_case *c = &z->cases[i];
  if (!c->ready || !c->b.prog) return;
  val_opts o = {.nschedules = 2, .schedule = {c->sched[0], c->sched[1]}, .seed = z->seed + i,
                .threads = 1};
  char err[256];
  if (val_check(z->be, &c->vc, &c->in, c->b.prog, &c->k, &o, &c->r, err, sizeof err) != 0) {
    c->r.status = VAL_CRASHED;
    snprintf(c->r.msg, sizeof c->r.msg, "cannot validate: %s", err);
  }
}

static const char *sched_name(fa_schedule s) {
  return s == FA_SCHED_FORWARD ? "forward" : s == FA_SCHED_REVERSE ? "reverse"
       : s == FA_SCHED_RANDOM ? "random" : "skew";
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 8;
  if (n < 1 || n > MAX_CASES) {
    fprintf(stderr, "usage: test_fuzz_kernels [CASES (1..%d) [FAMILY...]]\n", MAX_CASES);
    return 2;
  }
  int selected[NFAMILIES];
  if (fam_select(argc > 1 ? argc - 1 : argc, argc > 1 ? argv + 1 : argv, selected) != 0) return 2;
  const char *env = getenv("FATUNE_TEST_SEED");
  const unsigned long long seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu (FATUNE_TEST_SEED=%llu replays it)\n", seed, seed);
  rng_state = seed;
  const family *fams[NFAMILIES];
  size_t nf = 0;
  for (size_t f = 0; f < NFAMILIES; f++)
    if (selected[f]) fams[nf++] = &families[f];

  char err[512];
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "generator: %s\n", err);
    return 1;
  }
  fa_backend *be = NULL;
  fuzz_case *cases = calloc((size_t)n, sizeof *cases);
  const gen_kernel **ks = calloc((size_t)n, sizeof *ks);
  fa_build *builds = calloc((size_t)n, sizeof *builds);
  CHECK(cases && ks && builds, "out of memory");
  CHECK(backend_open("emu", &be, NULL, 0, err, sizeof err) == 0, "%s", err);
  for (int i = 0; be && cases && ks && builds && i < n; i++) {
    const family *f = fams[(size_t)i % nf];
    gen_target t;
    if (gen_target_for_arch(g, f->arch ? f->arch : "sm_90", 0, 0, &t) != 0) {
      CHECK(0, "target: %s", gen_errmsg(g));
      break;
    }
    draw(&cases[i], f, g, &t, seed + 7919u * (unsigned)i);
  }
  /* One compile for all of them (the emulator batches), then every run. */
  size_t m = 0;
  for (int i = 0; be && cases && ks && builds && i < n; i++)
    if (cases[i].ready) ks[m++] = &cases[i].k;
  const double t0 = fa_now_s();
  if (m) CHECK(backend_compile(be, ks, m, 0, builds, err, sizeof err) == 0, "%s", err);
  const double t1 = fa_now_s();
  for (int i = 0, j = 0; m && i < n; i++) {
    fuzz_case *c = &cases[i];
    if (!c->ready) continue;
    c->b = builds[j++];
    CHECK(c->b.prog, "%s does not compile: %s", c->k.name, c->b.log ? c->b.log : "?");
    if (c->b.prog &&
        val_inputs_upload(be, &c->vc, &c->in, err, sizeof err) != 0) {
      CHECK(0, "%s: %s", c->k.name, err);
      backend_build_free(be, &c->b);
    }
  }
  fuzz z = {cases, be, seed};
  if (m) CHECK(par_for((size_t)n, 0, check_one, &z, NULL, NULL) == 0, "par_for");
  int ok = 0, ran = 0;
  for (int i = 0; cases && i < n; i++) {
    fuzz_case *c = &cases[i];
    if (!c->ready) continue;
    if (c->b.prog) {
      ran++;
      ok += c->r.status == VAL_OK;
      printf("%-3d %-66s b%d h%d %4dx%-4d %s scale %-5.3g %s/%s  %s rel %.3g\n", i, c->k.name,
             c->p.batch, c->p.heads, c->p.seq_q, c->p.seq_k, c->p.causal ? "causal" : "      ",
             c->p.scale, sched_name(c->sched[0]), sched_name(c->sched[1]),
             c->r.status == VAL_OK ? "ok " : "BAD", c->r.rel_err);
      CHECK(c->r.status == VAL_OK, "%s at b%d h%d seq %d/%d%s scale %g (%s/%s): %s (rel %.3g)",
            c->k.name, c->p.batch, c->p.heads, c->p.seq_q, c->p.seq_k,
            c->p.causal ? " causal" : "", c->p.scale, sched_name(c->sched[0]),
            sched_name(c->sched[1]), c->r.msg, c->r.rel_err);
      attn_inputs_free(be, &c->in);
      backend_build_free(be, &c->b);
    }
    val_case_free(&c->vc);
    gen_kernel_free(&c->k);
  }
  printf("%d of %d cases ok (%d drawn); compile %.1f s, runs %.1f s; seed %llu\n", ok, ran, n,
         t1 - t0, fa_now_s() - t1, seed);
  CHECK(ran == n, "only %d of %d cases ran", ran, n);
  free(cases), free(ks), free(builds);
  if (be) backend_close(be);
  gen_close(g);
  return check_done("test_fuzz_kernels");
}
