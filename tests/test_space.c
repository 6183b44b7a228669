/*
** test_space.c
** Every variant of every family's default space (tests/families.h: its
** dims and dtypes, causal and not, target sm_90), run on the CPU emulator
** and validated against the float64 reference of the same rounded inputs
** within val_tolerance of the dtype, each at the family's two shapes under
** two schedules that must give identical bits (shared memory starting as
** NaN then zeros); a sample of them also at a shape of its own whose last
** Q and K/V blocks are partial (tails of 1, half a block and block - 1).
** Every variant listed must be of the family swept.
**
** usage: test_space [FAMILY...]     (all families by default)
** The input seed is printed; FATUNE_TEST_SEED replays a run.
** FATUNE_TEST_FILTER=TEXT keeps only the variants whose name holds TEXT
** (for debugging one variant; CI runs them all).
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

/* One (dim, dtype, causal) of a family, with its inputs at every shape. */
typedef struct space_problem {
  fa_problem p;
  size_t di, ti;
  size_t nvariants;
  val_case cases[FAM_NSHAPES];
  attn_inputs inputs[FAM_NSHAPES];
} space_problem;

typedef struct item {
  gen_kernel k;
  fa_build b;
  const space_problem *sp;
  int tail;              /* its pair of tails, 0..8, or -1: none */
  val_case tail_case;    /* made when tail >= 0 */
  attn_inputs tail_in;
} item;

/* Validation jobs per item: the family's shapes, then its tail shape. */
#define SLOTS (FAM_NSHAPES + 1)

typedef struct sweep {
  const family *f;
  fa_backend *be;
  gen_state *g;
  const gen_target *t;
  const char *filter;
  unsigned long long seed;
  space_problem problems[FAM_MAX_SPACE * FAM_MAX_SPACE * 2];
  size_t nproblems;
  item *items;
  size_t n, cap;
  val_result *results; /* items x shapes */
} sweep;

static int add_item(sweep *s, const space_problem *sp, const gen_variant *v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    item *items = realloc(s->items, cap * sizeof *items);
    if (!items) return -1;
    s->items = items, s->cap = cap;
  }
  item *it = &s->items[s->n];
  memset(it, 0, sizeof *it);
  it->sp = sp;
  it->tail = -1;
  if (gen_render_config(s->g, v->config, NULL, s->t, &it->k) != 0) {
    CHECK(0, "rendering %s: %s", v->name, gen_errmsg(s->g));
    return 0;
  }
  s->n++;
  return 1;
}

/* Whether a family of that name has an entry. */
static int fam_known(const char *name) {
  for (size_t f = 0; f < NFAMILIES; f++)
    if (!strcmp(families[f].name, name)) return 1;
  return 0;
}

/* The default space of one problem, rendered into items. */
static int list_space(sweep *s, space_problem *sp) {
  const size_t plen = strlen(s->f->name);
  gen_variant *v;
  size_t nv;
  const int listed = gen_list(s->g, &sp->p, s->t, "default", &v, &nv) == 0;
  CHECK(listed, "%s", gen_errmsg(s->g));
  if (!listed) return 0;
  CHECK(nv > 0, "empty default space for dim %d %s", sp->p.dim, fa_dtype_name(sp->p.dtype));
  int rc = 0;
  for (size_t i = 0; i < nv && rc == 0; i++) {
    const int ours = strncmp(v[i].name, s->f->name, plen) == 0 && v[i].name[plen] == '-';
    /* On its arch a family's space may list another family's variants
    ** beside its own (sm_90a: tc and wg), those swept by their own entry. */
    if (!ours && s->f->arch && strcmp(v[i].cfg.family, s->f->name) != 0 &&
        fam_known(v[i].cfg.family))
      continue;
    CHECK(ours, "%s is not of the %s family", v[i].name, s->f->name);
    if (s->filter && !strstr(v[i].name, s->filter)) continue;
    const size_t every = s->f->tail_every > 0 ? (size_t)s->f->tail_every : 0;
    int added = add_item(s, sp, &v[i]);
    if (added > 0 && every && sp->nvariants % every == 0)
      s->items[s->n - 1].tail = (int)(sp->nvariants / every % 9);
    if (added < 0) rc = -1;
    else sp->nvariants += (size_t)added;
  }
  gen_variants_free(v, nv);
  return rc;
}

/* Inputs and reference of one problem at every shape. */
static void make_cases(sweep *s, space_problem *sp) {
  char err[512];
  for (size_t h = 0; h < FAM_NSHAPES; h++) {
    const fam_shape *sh = &s->f->shapes[h];
    fa_problem q = sp->p;
    q.batch = sh->batch, q.heads = sh->heads, q.seq_q = sh->seq_q, q.seq_k = sh->seq_k;
    val_case *vc = &sp->cases[h];
    const unsigned long long seed = s->seed + 1000 * h + 100 * sp->di + 10 * sp->ti + (size_t)sp->p.causal;
    CHECK(val_case_make(vc, &q, seed, err, sizeof err) == 0, "%s", err);
    CHECK(val_inputs_upload(s->be, vc, &sp->inputs[h], err, sizeof err) == 0, "%s", err);
  }
}

/* 1, half a block and block - 1: tail i of a tile of b rows. */
static int tail_rows(int b, int i) {
  return i == 0 ? 1 : i == 1 ? b / 2 : b - 1;
}

/* The tail shape of an item (one block and a tail in each of Q and K/V),
** its inputs and reference. */
static void make_tail_case(sweep *s, item *it, size_t i) {
  const int bm = (int)fam_config_int(it->k.config, "block_m");
  const int bn = (int)fam_config_int(it->k.config, "block_n");
  fa_problem q = it->sp->p;
  q.batch = 1, q.heads = 1;
  q.seq_q = bm + tail_rows(bm, it->tail % 3);
  q.seq_k = bn + tail_rows(bn, it->tail / 3);
  char err[512];
  CHECK(bm > 0 && bn > 0, "%s: no block_m or block_n in its config", it->k.name);
  if (bm <= 0 || bn <= 0 || val_case_make(&it->tail_case, &q, s->seed + 7919 * i, err, sizeof err) != 0) {
    CHECK(bm <= 0 || bn <= 0, "%s", err);
    it->tail = -1;
    return;
  }
  if (val_inputs_upload(s->be, &it->tail_case, &it->tail_in, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    val_case_free(&it->tail_case);
    it->tail = -1;
  }
}

/* Every problem of the family: its variants and its cases. */
static int list_family(sweep *s) {
  const family *f = s->f;
  for (size_t di = 0; di < f->ndims; di++)
    for (size_t ti = 0; ti < f->ndtypes; ti++)
      for (int c = 0; c < 2; c++) {
        space_problem *sp = &s->problems[s->nproblems++];
        sp->p = (fa_problem){.batch = 1, .heads = 1, .seq_q = f->list_seq, .seq_k = f->list_seq,
                             .dim = f->dims[di], .dtype = f->dtypes[ti], .causal = c,
                             .op = f->op};
        sp->di = di, sp->ti = ti;
        if (list_space(s, sp) != 0) return -1;
        make_cases(s, sp);
      }
  for (size_t i = 0; i < s->n; i++)
    if (s->items[i].tail >= 0) make_tail_case(s, &s->items[i], i);
  return 0;
}

static void print_counts(const sweep *s) {
  for (size_t di = 0; di < s->f->ndims; di++) {
    printf("d%d:", s->f->dims[di]);
    for (int c = 0; c < 2; c++) {
      for (size_t ti = 0; ti < s->f->ndtypes; ti++) {
        const space_problem *sp = &s->problems[(di * s->f->ndtypes + ti) * 2 + (size_t)c];
        printf("%s %zu %s", ti ? " +" : "", sp->nvariants, fa_dtype_name(sp->p.dtype));
      }
      printf(" variants (%s)%s", c ? "causal" : "not causal", c ? "\n" : ",");
    }
  }
}

/* The case a job validates on, or NULL when the job has none. */
static const val_case *job_case(const sweep *s, size_t job, const attn_inputs **in,
                                fa_schedule sched[2]) {
  const item *it = &s->items[job / SLOTS];
  const size_t h = job % SLOTS;
  if (!it->b.prog) return NULL;
  if (h == FAM_NSHAPES) {
    if (it->tail < 0) return NULL;
    sched[0] = s->f->tail_s0, sched[1] = s->f->tail_s1;
    *in = &it->tail_in;
    return &it->tail_case;
  }
  sched[0] = s->f->shapes[h].s0, sched[1] = s->f->shapes[h].s1;
  *in = &it->sp->inputs[h];
  return &it->sp->cases[h];
}

static void check_one(size_t job, void *ud) {
  sweep *s = ud;
  const item *it = &s->items[job / SLOTS];
  val_result *r = &s->results[job];
  const attn_inputs *in;
  fa_schedule sched[2];
  const val_case *vc = job_case(s, job, &in, sched);
  if (!vc) return;
  val_opts o = {.nschedules = 2, .schedule = {sched[0], sched[1]}, .seed = s->seed + job,
                .threads = 1};
  char err[256];
  if (val_check(s->be, vc, in, it->b.prog, &it->k, &o, r, err, sizeof err) != 0) {
    r->status = VAL_CRASHED;
    snprintf(r->msg, sizeof r->msg, "cannot validate: %s", err);
  }
}

/* One compile for all of them (the emulator batches), then every run. */
static int compile_and_run(sweep *s, double *compile_s, double *run_s) {
  const size_t n = s->n;
  const gen_kernel **ks = malloc((n ? n : 1) * sizeof *ks);
  fa_build *builds = calloc(n ? n : 1, sizeof *builds);
  s->results = calloc((n ? n : 1) * SLOTS, sizeof *s->results);
  if (!ks || !builds || !s->results) {
    free(ks), free(builds);
    return -1;
  }
  for (size_t i = 0; i < n; i++) ks[i] = &s->items[i].k;
  char err[512];
  const double t0 = fa_now_s();
  CHECK(backend_compile(s->be, ks, n, 0, builds, err, sizeof err) == 0, "%s", err);
  const double t1 = fa_now_s();
  for (size_t i = 0; i < n; i++) {
    s->items[i].b = builds[i];
    CHECK(builds[i].prog, "%s does not compile: %s", s->items[i].k.name,
          builds[i].log ? builds[i].log : "?");
  }
  CHECK(par_for(n * SLOTS, 0, check_one, s, NULL, NULL) == 0, "par_for");
  *compile_s = t1 - t0;
  *run_s = fa_now_s() - t1;
  free(ks), free(builds);
  return 0;
}

/* Every result must be ok; prints the count and the worst error per dtype. */
static void report(const sweep *s, double compile_s, double run_s) {
  size_t ok = 0, tails = 0, runs = 0;
  int seen[3][3] = {{0}};
  double worst[FAM_MAX_SPACE] = {0};
  for (size_t j = 0; j < s->n * SLOTS; j++) {
    const item *it = &s->items[j / SLOTS];
    const val_result *r = &s->results[j];
    const attn_inputs *in;
    fa_schedule sched[2];
    const val_case *vc = job_case(s, j, &in, sched);
    if (!vc) continue;
    runs++;
    if (j % SLOTS == FAM_NSHAPES) tails++, seen[it->tail % 3][it->tail / 3] = 1;
    ok += r->status == VAL_OK;
    if (r->status == VAL_OK && r->rel_err > worst[it->sp->ti]) worst[it->sp->ti] = r->rel_err;
    CHECK(r->status == VAL_OK, "%s at seq %d/%d: %s (rel %.3g, max abs %.3g)", it->k.name,
          vc->p.seq_q, vc->p.seq_k, r->msg, r->rel_err, r->max_abs_err);
  }
  int pairs = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) pairs += seen[a][b];
  CHECK(s->f->tail_every <= 0 || s->filter || pairs == 9,
        "%s: only %d of the 9 pairs of tails run", s->f->name, pairs);
  printf("%zu variants x %d shapes + %zu at a tail shape (%d pairs of tails), x 2 schedules: "
         "%zu of %zu ok; compile %.1f s, runs %.1f s\n", s->n, FAM_NSHAPES, tails, pairs, ok,
         runs, compile_s, run_s);
  printf("worst norm-relative error");
  for (size_t ti = 0; ti < s->f->ndtypes; ti++)
    printf("%s %.3g (%s, tolerance %.3g)", ti ? "," : "", worst[ti],
           fa_dtype_name(s->f->dtypes[ti]), val_tolerance(s->f->dtypes[ti]));
  printf("\n");
}

static void sweep_free(sweep *s) {
  for (size_t i = 0; i < s->n; i++) {
    item *it = &s->items[i];
    backend_build_free(s->be, &it->b);
    gen_kernel_free(&it->k);
    if (it->tail >= 0) attn_inputs_free(s->be, &it->tail_in), val_case_free(&it->tail_case);
  }
  for (size_t p = 0; p < s->nproblems; p++)
    for (size_t h = 0; h < FAM_NSHAPES; h++) {
      attn_inputs_free(s->be, &s->problems[p].inputs[h]);
      val_case_free(&s->problems[p].cases[h]);
    }
  free(s->results), free(s->items);
}

static int sweep_family(sweep *s) {
  const family *f = s->f;
  printf("== %s: dims", f->name);
  for (size_t di = 0; di < f->ndims; di++) printf(" %d", f->dims[di]);
  for (size_t ti = 0; ti < f->ndtypes; ti++) printf("%s%s", ti ? " " : "; ", fa_dtype_name(f->dtypes[ti]));
  printf("; causal and not; seq %d/%d and %d/%d\n", f->shapes[0].seq_q, f->shapes[0].seq_k,
         f->shapes[1].seq_q, f->shapes[1].seq_k);
  double compile_s = 0, run_s = 0;
  int rc = list_family(s);
  if (rc == 0) {
    CHECK(s->n > 0, "no %s variant to run%s%s", f->name, s->filter ? " whose name holds " : "",
          s->filter ? s->filter : "");
    print_counts(s);
    rc = compile_and_run(s, &compile_s, &run_s);
  }
  if (rc == 0) report(s, compile_s, run_s);
  else CHECK(0, "%s: out of memory", f->name);
  sweep_free(s);
  return rc;
}

int main(int argc, char **argv) {
  int selected[NFAMILIES];
  if (fam_select(argc, argv, selected) != 0) return 2;
  const char *env = getenv("FATUNE_TEST_SEED");
  const unsigned long long seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  char err[512];
  gen_state *g;
  gen_target t;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "generator: %s\n", err);
    return 1;
  }
  fa_backend *be = NULL;
  CHECK(backend_open("emu", &be, NULL, 0, err, sizeof err) == 0, "%s", err);
  for (size_t f = 0; be && f < NFAMILIES; f++) {
    if (!selected[f]) continue;
    if (gen_target_for_arch(g, families[f].arch ? families[f].arch : "sm_90", 0, 0, &t) != 0) {
      CHECK(0, "target: %s", gen_errmsg(g));
      break;
    }
    sweep s = {.f = &families[f], .be = be, .g = g, .t = &t, .seed = seed,
               .filter = getenv("FATUNE_TEST_FILTER")};
    if (sweep_family(&s) != 0) break;
  }
  if (be) backend_close(be);
  gen_close(g);
  return check_done("test_space");
}
