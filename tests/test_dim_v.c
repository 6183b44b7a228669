/*
** test_dim_v.c
** V's head dim apart from Q's and K's (dim_v: 192/128 as DeepSeek's, or V
** wider than Q): for every family of tests/families.h with dims_v pairs,
** each pair in each of the family's dtypes, causal and not, the default
** space listed for the family's arch (sm_90 when it has none) must hold
** variants of the family; a sample of them (the first and others spread
** over the list, FAM_DV_SAMPLE at most) runs on the CPU emulator at two
** shapes (seq_q != seq_k, neither a multiple of a tile) under two
** schedules that must give identical bits, validated against the float64
** reference within val_tolerance. A family without pairs must not list a
** variant of its own for any pair of the others: it refuses dim_v in its
** contract. Their names must say both dims ("-d192v128-").
**
** usage: test_dim_v [FAMILY...]     (all families by default)
** The input seed is printed; FATUNE_TEST_SEED replays a run.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "families.h"
#include "par.h"
#include "validate.h"

#define FAM_DV_SAMPLE 4
#define MAX_ITEMS 256

typedef struct item {
  gen_kernel k;
  fa_build b;
  fa_problem p;
  val_result r[2];
} item;

typedef struct run {
  fa_backend *be;
  unsigned long long seed;
  item *items;
  size_t n;
  val_case cases[MAX_ITEMS][2];
  attn_inputs in[MAX_ITEMS][2];
} run;

/* The two shapes every sampled variant runs at. */
static const fam_shape dv_shapes[2] = {{1, 2, 70, 90, EMU_FORWARD, EMU_SKEW},
                                       {2, 1, 45, 33, EMU_REVERSE, EMU_RANDOM}};

/* Whether variant name `name` is of family f and names both dims. */
static int names_dims(const char *name, const fa_problem *p) {
  char want[32];
  snprintf(want, sizeof want, "-d%dv%d", p->dim, p->dim_v);
  const char *at = strstr(name, want);
  return at && (at[strlen(want)] == '-' || at[strlen(want)] == '\0');
}

/* The sampled variants of family f for problem p, rendered into r. */
static void sample(run *r, gen_state *g, const gen_target *t, const family *f,
                   const fa_problem *p) {
  gen_variant *v;
  size_t nv, own = 0;
  if (gen_list(g, p, t, "default", &v, &nv) != 0) {
    CHECK(0, "%s: d%d/%d %s: %s", f->name, p->dim, p->dim_v, fa_dtype_name(p->dtype),
          gen_errmsg(g));
    return;
  }
  const size_t plen = strlen(f->name);
  for (size_t i = 0; i < nv; i++)
    own += strncmp(v[i].name, f->name, plen) == 0 && v[i].name[plen] == '-';
  CHECK(own > 0, "%s lists no variant of its own for d%d/%d %s%s", f->name, p->dim, p->dim_v,
        fa_dtype_name(p->dtype), p->causal ? " causal" : "");
  const size_t step = own > FAM_DV_SAMPLE ? (own + FAM_DV_SAMPLE - 1) / FAM_DV_SAMPLE : 1;
  for (size_t i = 0, j = 0; i < nv; i++) {
    if (strncmp(v[i].name, f->name, plen) != 0 || v[i].name[plen] != '-') continue;
    CHECK(names_dims(v[i].name, p), "%s does not name dims %d and %d", v[i].name, p->dim,
          p->dim_v);
    if (j++ % step != 0 || r->n == MAX_ITEMS) continue;
    item *it = &r->items[r->n];
    memset(it, 0, sizeof *it);
    it->p = *p;
    if (gen_render_config(g, v[i].config, p, t, &it->k) != 0) {
      CHECK(0, "rendering %s: %s", v[i].name, gen_errmsg(g));
      continue;
    }
    r->n++;
  }
  gen_variants_free(v, nv);
}

/* A family that lists no pairs refuses dim_v: none of its own for p. */
static void refuses(gen_state *g, const gen_target *t, const family *f, const fa_problem *p) {
  gen_variant *v;
  size_t nv;
  if (gen_list(g, p, t, "default", &v, &nv) != 0) return;   /* nothing listed at all */
  const size_t plen = strlen(f->name);
  for (size_t i = 0; i < nv; i++)
    CHECK(strncmp(v[i].name, f->name, plen) != 0 || v[i].name[plen] != '-',
          "%s lists %s for d%d/%d, but its families.h entry has no dims_v", f->name,
          v[i].name, p->dim, p->dim_v);
  gen_variants_free(v, nv);
}

static void check_one(size_t job, void *ud) {
  run *r = ud;
  item *it = &r->items[job / 2];
  const size_t h = job % 2;
  val_result *res = &it->r[h];
  if (!it->b.prog) return;
  val_opts o = {.nschedules = 2, .schedule = {dv_shapes[h].s0, dv_shapes[h].s1},
                .seed = r->seed + job, .threads = 1};
  char err[256];
  if (val_check(r->be, &r->cases[job / 2][h], &r->in[job / 2][h], it->b.prog, &it->k, &o, res,
                err, sizeof err) != 0) {
    res->status = VAL_CRASHED;
    snprintf(res->msg, sizeof res->msg, "cannot validate: %s", err);
  }
}

/* Inputs, compile and validation of every sampled variant. */
static void run_all(run *r) {
  char err[512];
  for (size_t i = 0; i < r->n; i++)
    for (size_t h = 0; h < 2; h++) {
      fa_problem q = r->items[i].p;
      q.batch = dv_shapes[h].batch, q.heads = dv_shapes[h].heads;
      q.seq_q = dv_shapes[h].seq_q, q.seq_k = dv_shapes[h].seq_k;
      CHECK(val_case_make(&r->cases[i][h], &q, r->seed + 31 * i + h, err, sizeof err) == 0,
            "%s", err);
      CHECK(val_inputs_upload(r->be, &r->cases[i][h], &r->in[i][h], err, sizeof err) == 0,
            "%s", err);
    }
  const gen_kernel **ks = malloc((r->n ? r->n : 1) * sizeof *ks);
  fa_build *builds = calloc(r->n ? r->n : 1, sizeof *builds);
  CHECK(ks && builds, "out of memory");
  if (!ks || !builds) {
    free(ks), free(builds);
    return;
  }
  for (size_t i = 0; i < r->n; i++) ks[i] = &r->items[i].k;
  CHECK(backend_compile(r->be, ks, r->n, 0, builds, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < r->n; i++) {
    r->items[i].b = builds[i];
    CHECK(builds[i].prog, "%s does not compile: %s", r->items[i].k.name,
          builds[i].log ? builds[i].log : "?");
  }
  free(ks), free(builds);
  CHECK(par_for(r->n * 2, 0, check_one, r, NULL, NULL) == 0, "par_for");
}

static void report(run *r, const family *f) {
  size_t ok = 0;
  double worst = 0;
  for (size_t i = 0; i < r->n; i++)
    for (size_t h = 0; h < 2; h++) {
      const val_result *res = &r->items[i].r[h];
      ok += res->status == VAL_OK;
      if (res->status == VAL_OK && res->rel_err > worst) worst = res->rel_err;
      CHECK(res->status == VAL_OK, "%s at seq %d/%d: %s (rel %.3g)", r->items[i].k.name,
            dv_shapes[h].seq_q, dv_shapes[h].seq_k, res->msg, res->rel_err);
    }
  printf("%s: %zu variants x 2 shapes x 2 schedules: %zu of %zu ok, worst norm-relative "
         "error %.3g\n", f->name, r->n, ok, 2 * r->n, worst);
}

static void run_free(run *r) {
  for (size_t i = 0; i < r->n; i++) {
    backend_build_free(r->be, &r->items[i].b);
    gen_kernel_free(&r->items[i].k);
    for (size_t h = 0; h < 2; h++) {
      attn_inputs_free(r->be, &r->in[i][h]);
      val_case_free(&r->cases[i][h]);
    }
  }
  r->n = 0;
}

/* Every pair of every family, for family f's op. */
static void check_refusal(gen_state *g, const gen_target *t, const family *f) {
  for (size_t o = 0; o < NFAMILIES; o++)
    for (size_t i = 0; i < families[o].ndims_v; i++)
      for (size_t ti = 0; ti < f->ndtypes; ti++) {
        const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 128, .seq_k = 128,
                              .dim = families[o].dims_v[i][0], .dim_v = families[o].dims_v[i][1],
                              .dtype = f->dtypes[ti], .op = f->op};
        refuses(g, t, f, &p);
      }
}

int main(int argc, char **argv) {
  int selected[NFAMILIES];
  if (fam_select(argc, argv, selected) != 0) return 2;
  const char *env = getenv("FATUNE_TEST_SEED");
  const unsigned long long seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  char err[512];
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "generator: %s\n", err);
    return 1;
  }
  run *r = calloc(1, sizeof *r);
  item *items = calloc(MAX_ITEMS, sizeof *items);
  CHECK(r && items, "out of memory");
  if (r && items) {
    r->items = items, r->seed = seed;
    CHECK(backend_open("emu", &r->be, NULL, 0, err, sizeof err) == 0, "%s", err);
  }
  for (size_t fi = 0; r && r->be && items && fi < NFAMILIES; fi++) {
    const family *f = &families[fi];
    gen_target t;
    if (!selected[fi]) continue;
    if (gen_target_for_arch(g, f->arch ? f->arch : "sm_90", 0, 0, &t) != 0) {
      CHECK(0, "target: %s", gen_errmsg(g));
      break;
    }
    if (f->ndims_v == 0) {
      check_refusal(g, &t, f);
      printf("%s: refuses dim_v, as its entry says\n", f->name);
      continue;
    }
    for (size_t i = 0; i < f->ndims_v; i++)
      for (size_t ti = 0; ti < f->ndtypes; ti++)
        for (int c = 0; c < 2; c++) {
          const fa_problem p = {.batch = 1, .heads = 1, .seq_q = 128, .seq_k = 128,
                                .dim = f->dims_v[i][0], .dim_v = f->dims_v[i][1],
                                .dtype = f->dtypes[ti], .causal = c, .op = f->op};
          sample(r, g, &t, f, &p);
        }
    run_all(r);
    report(r, f);
    run_free(r);
  }
  if (r && r->be) backend_close(r->be);
  free(items), free(r);
  gen_close(g);
  return check_done("test_dim_v");
}
