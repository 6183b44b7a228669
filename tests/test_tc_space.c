/*
** test_tc_space.c
** Every variant of the default tensor-core space for dims 64 and 128, fp16
** and bf16, causal and not (target sm_90), run on the CPU emulator and
** validated against the float64 reference of the same rounded inputs
** (5e-3 for fp16, 1e-2 for bf16, norm-relative), each under two schedules
** that must give identical bits, shared memory starting as NaN then zeros:
**   seq 128, batch 1, heads 2: forward vs reverse;
**   seq_q 100, seq_k 200, batch 1, heads 1: reverse vs forward.
** The input seed is printed; FATUNE_TEST_SEED replays a run.
** FATUNE_TC_FILTER=TEXT keeps only the variants whose name holds TEXT
** (for debugging one variant; CI runs them all).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "par.h"
#include "validate.h"

typedef struct item {
  gen_kernel k;
  fa_build b;
  int causal, di, ti;
} item;

typedef struct shape {
  int batch, heads, seq_q, seq_k;
  emu_schedule s0, s1;
} shape;

static const shape shapes[] = {
  {1, 2, 128, 128, EMU_FORWARD, EMU_REVERSE},
  {1, 1, 100, 200, EMU_REVERSE, EMU_FORWARD},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const int dims[2] = {64, 128};
static const fa_dtype dtypes[2] = {FA_FP16, FA_BF16};

typedef struct sweep {
  fa_backend *be;
  item *items;
  val_case cases[NSHAPES][2][2][2];   /* shape, dim, dtype, causal */
  attn_inputs inputs[NSHAPES][2][2][2];
  val_result *results;                /* items x shapes */
  unsigned long long seed;
} sweep;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check_one(size_t job, void *ud) {
  sweep *s = ud;
  const size_t i = job / NSHAPES, h = job % NSHAPES;
  item *it = &s->items[i];
  val_result *r = &s->results[job];
  if (!it->b.prog) return;
  val_opts o = {.nschedules = 2, .schedule = {shapes[h].s0, shapes[h].s1}, .seed = s->seed + job,
                .threads = 1};
  char err[256];
  if (val_check(s->be, &s->cases[h][it->di][it->ti][it->causal],
                &s->inputs[h][it->di][it->ti][it->causal], it->b.prog, &it->k, &o, r, err,
                sizeof err) != 0) {
    r->status = VAL_CRASHED;
    snprintf(r->msg, sizeof r->msg, "cannot validate: %s", err);
  }
}

int main(void) {
  const char *env = getenv("FATUNE_TEST_SEED");
  const char *filter = getenv("FATUNE_TC_FILTER");
  sweep s = {.seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL)};
  printf("seed %llu\n", s.seed);
  char err[512];
  gen_state *g;
  gen_target t;
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0) {
    fprintf(stderr, "generator: %s\n", err);
    return 1;
  }
  CHECK(backend_open("emu", &s.be, NULL, 0, err, sizeof err) == 0, "%s", err);
  if (!s.be) return check_done("test_tc_space");

  /* Render the eight default spaces. */
  size_t n = 0, cap = 0;
  size_t per[2][2][2] = {{{0}}};
  for (int di = 0; di < 2; di++)
    for (int ti = 0; ti < 2; ti++)
      for (int c = 0; c < 2; c++) {
        fa_problem p = {.batch = 1, .heads = 1, .seq_q = 128, .seq_k = 128, .dim = dims[di],
                        .dtype = dtypes[ti], .causal = c};
        gen_variant *v;
        size_t nv;
        CHECK(gen_list(g, &p, &t, "default", &v, &nv) == 0, "%s", gen_errmsg(g));
        CHECK(nv > 0, "empty default space for dim %d %s", p.dim, fa_dtype_name(p.dtype));
        if (n + nv > cap) {
          cap = (n + nv) * 2;
          s.items = realloc(s.items, cap * sizeof *s.items);
          if (!s.items) return 1;
        }
        for (size_t i = 0; i < nv; i++) {
          CHECK(strncmp(v[i].name, "tc-", 3) == 0, "%s is not of the tc family", v[i].name);
          if (filter && !strstr(v[i].name, filter)) continue;
          item *it = &s.items[n];
          memset(it, 0, sizeof *it);
          it->di = di, it->ti = ti, it->causal = c;
          if (gen_render_config(g, v[i].config, NULL, &t, &it->k) == 0) n++, per[di][ti][c]++;
          else CHECK(0, "rendering %s: %s", v[i].name, gen_errmsg(g));
        }
        gen_variants_free(v, nv);
        for (size_t h = 0; h < NSHAPES; h++) {
          fa_problem q = p;
          q.batch = shapes[h].batch, q.heads = shapes[h].heads;
          q.seq_q = shapes[h].seq_q, q.seq_k = shapes[h].seq_k;
          val_case *vc = &s.cases[h][di][ti][c];
          CHECK(val_case_make(vc, &q, s.seed + 1000 * h + 100 * (size_t)di + 10 * (size_t)ti + (size_t)c,
                              err, sizeof err) == 0, "%s", err);
          CHECK(attn_inputs_upload(s.be, &q, vc->q, vc->k, vc->v, &s.inputs[h][di][ti][c], err,
                                   sizeof err) == 0, "%s", err);
        }
      }
  for (int di = 0; di < 2; di++)
    printf("d%d: %zu fp16 + %zu bf16 variants (not causal), %zu + %zu (causal)\n", dims[di],
           per[di][0][0], per[di][1][0], per[di][0][1], per[di][1][1]);

  /* One compile for all of them: the emulator batches. */
  const gen_kernel **ks = malloc((n ? n : 1) * sizeof *ks);
  fa_build *builds = calloc(n ? n : 1, sizeof *builds);
  s.results = calloc((n ? n : 1) * NSHAPES, sizeof *s.results);
  if (!ks || !builds || !s.results) return 1;
  for (size_t i = 0; i < n; i++) ks[i] = &s.items[i].k;
  double t0 = now_s();
  CHECK(backend_compile(s.be, ks, n, 0, builds, err, sizeof err) == 0, "%s", err);
  double t1 = now_s();
  for (size_t i = 0; i < n; i++) {
    s.items[i].b = builds[i];
    CHECK(builds[i].prog, "%s does not compile: %s", s.items[i].k.name,
          builds[i].log ? builds[i].log : "?");
  }
  CHECK(par_for(n * NSHAPES, 0, check_one, &s, NULL, NULL) == 0, "par_for");
  double t2 = now_s();

  size_t ok = 0;
  double worst[2] = {0, 0};
  for (size_t j = 0; j < n * NSHAPES; j++) {
    const item *it = &s.items[j / NSHAPES];
    const val_result *r = &s.results[j];
    const shape *sh = &shapes[j % NSHAPES];
    if (!it->b.prog) continue;
    ok += r->status == VAL_OK;
    if (r->status == VAL_OK && r->rel_err > worst[it->ti]) worst[it->ti] = r->rel_err;
    CHECK(r->status == VAL_OK, "%s at seq %d/%d: %s (rel %.3g, max abs %.3g)", it->k.name,
          sh->seq_q, sh->seq_k, r->msg, r->rel_err, r->max_abs_err);
  }
  printf("%zu variants x %zu shapes x 2 schedules: %zu ok; worst norm-relative error "
         "%.3g (fp16), %.3g (bf16)\n", n, (size_t)NSHAPES, ok, worst[0], worst[1]);
  printf("emulator: compile %.1f s, runs %.1f s\n", t1 - t0, t2 - t1);

  for (size_t i = 0; i < n; i++) {
    backend_build_free(s.be, &s.items[i].b);
    gen_kernel_free(&s.items[i].k);
  }
  for (size_t h = 0; h < NSHAPES; h++)
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 2; b++)
        for (int c = 0; c < 2; c++) {
          attn_inputs_free(s.be, &s.inputs[h][a][b][c]);
          val_case_free(&s.cases[h][a][b][c]);
        }
  free(ks), free(builds), free(s.results), free(s.items);
  backend_close(s.be);
  gen_close(g);
  return check_done("test_tc_space");
}
