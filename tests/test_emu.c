/*
** test_emu.c
** The CPU emulator on its own terms:
**  - the seeds' cases through generated kernels (eager and deferred, q_outer
**    and kv_outer, split_q and split_k): seed 000's in fp32 with max error
**    < 1e-5, seed 003's in fp64 with max error < 1e-8;
**  - a generated kernel with one barrier removed is caught by the schedule
**    check, and the message names the kernel; so is the barrier before a
**    shared-memory K/V stage is reused, in either family (tc with one stage
**    and with two), causal or not, under the forward and skew schedules;
**  - divergent barriers and warps are reported, not hung;
**  - out-of-bounds and misaligned accesses fault with the line;
**  - the counters are exact on a hand-written kernel and on a generated one
**    whose traffic has a closed form;
**  - the naive-attention oracle (the GPU's reference for big problems)
**    matches the CPU reference in every dtype, and judges a kernel; one
**    off by more than its accumulation's tolerance (1e-4 in fp16, 1e-9 in
**    fp64) is refused, one off by less passes.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_preludes.h"
#include "check.h"
#include "emu.h"
#include "validate.h"

static fa_backend *be;
static gen_state *gen;
static gen_target target;
static unsigned long long seed;

/* ---- Generated kernels ---- */

typedef struct seed_case {
  int seq, dim, block;
  fa_dtype dtype;
  double max_err;
} seed_case;

static const seed_case seed_cases[] = {
  {8, 4, 2, FA_FP32, 1e-5},   /* seed 000 */
  {5, 3, 3, FA_FP32, 1e-5},
  {3, 2, 1, FA_FP32, 1e-5},
  {128, 16, 32, FA_FP64, 1e-8},  /* seed 003 */
  {256, 16, 16, FA_FP64, 1e-8},
};

static const char *const algos[] = {
  "norm=eager,par=q_outer,split=split_q", "norm=deferred,par=q_outer,split=split_q",
  "norm=eager,par=kv_outer,split=split_q", "norm=deferred,par=kv_outer,split=split_q",
  "norm=eager,par=q_outer,split=split_k", "norm=deferred,par=q_outer,split=split_k",
  "norm=eager,par=kv_outer,split=split_k", "norm=deferred,par=kv_outer,split=split_k",
};
#define NALGOS (sizeof algos / sizeof algos[0])
#define NSEEDS (sizeof seed_cases / sizeof seed_cases[0])

/* Compile kernels[0..n) in one go; programs land in builds. */
static void compile_all(const gen_kernel *const *ks, size_t n, fa_build *builds) {
  char err[512];
  CHECK(backend_compile(be, ks, n, 0, builds, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < n; i++)
    CHECK(builds[i].prog, "%s: %s", ks[i]->name, builds[i].log ? builds[i].log : "?");
}

static int validate(const gen_kernel *k, const fa_program *prog, const fa_problem *p,
                    emu_schedule s0, emu_schedule s1, val_result *r) {
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, seed++, err, sizeof err) != 0 ||
      attn_inputs_upload(be, p, c.q, c.k, c.v, &in, err, sizeof err) != 0) {
    CHECK(0, "setting up %s: %s", k->name, err);
    return -1;
  }
  val_opts o = {.nschedules = 2, .schedule = {s0, s1}, .seed = seed, .threads = 2};
  int rc = val_check(be, &c, &in, prog, k, &o, r, err, sizeof err);
  CHECK(rc == 0, "%s: %s", k->name, err);
  attn_inputs_free(be, &in);
  val_case_free(&c);
  return rc;
}

static void test_seed_cases(void) {
  gen_kernel ks[NSEEDS * NALGOS];
  const gen_kernel *kp[NSEEDS * NALGOS];
  fa_build builds[NSEEDS * NALGOS];
  const seed_case *cs[NSEEDS * NALGOS];
  const char *as[NSEEDS * NALGOS];
  size_t n = 0;
  for (size_t s = 0; s < NSEEDS; s++)
    for (size_t a = 0; a < NALGOS; a++) {
      const seed_case *c = &seed_cases[s];
      /* split_k gives each of two warps or more a column: no block of 1. */
      if (c->block < 2 && strstr(algos[a], "split_k")) continue;
      char cfg[200];
      snprintf(cfg, sizeof cfg, "block_m=%d,block_n=%d,warps=%d,%s", c->block, c->block,
               c->block < 2 ? 1 : c->block < 4 ? 2 : 4, algos[a]);
      fa_problem p = {.batch = 1, .heads = 1, .seq_q = c->seq, .seq_k = c->seq, .dim = c->dim,
                      .dtype = c->dtype};
      if (gen_render_config(gen, cfg, &p, &target, &ks[n]) != 0) {
        CHECK(0, "%s: %s", cfg, gen_errmsg(gen));
        continue;
      }
      cs[n] = c, as[n] = algos[a], kp[n] = &ks[n];
      n++;
    }
  compile_all(kp, n, builds);
  for (size_t i = 0; i < n; i++) {
    const seed_case *c = cs[i];
    fa_problem p = {.batch = 1, .heads = 1, .seq_q = c->seq, .seq_k = c->seq, .dim = c->dim,
                    .dtype = c->dtype};
    val_result r;
    if (builds[i].prog && validate(&ks[i], builds[i].prog, &p, EMU_FORWARD, EMU_REVERSE, &r) == 0) {
      CHECK(r.status == VAL_OK && r.max_abs_err < c->max_err,
            "seq %d dim %d block %d %s (%s): %s, max error %.3g", c->seq, c->dim, c->block,
            fa_dtype_name(c->dtype), as[i], r.msg, r.max_abs_err);
      printf("seed case seq %3d dim %2d block %2d %s %-40s max error %.2e\n", c->seq, c->dim,
             c->block, fa_dtype_name(c->dtype), as[i], r.max_abs_err);
    }
    backend_build_free(be, &builds[i]);
    gen_kernel_free(&ks[i]);
  }
}

/* Remove the first barrier at or after the text `anchor` from k's body,
** and rename the kernel so the copy cannot be mistaken for the original. */
static int cut_barrier(gen_kernel *k, const char *anchor) {
  char *at = strstr(k->body, anchor);
  char *bar = at ? strstr(at, "fa_syncthreads();") : NULL;
  if (!bar) return -1;
  memcpy(bar, "/*  removed  */;", 16);  /* same length as the call: lines stay */
  char *name = strstr(k->body, k->entry);
  while (name) {
    name[strlen(k->entry) - 1] = 'X';
    name = strstr(name + 1, k->entry);
  }
  k->entry[strlen(k->entry) - 1] = 'X';
  snprintf(k->launch[0].entry, sizeof k->launch[0].entry, "%s", k->entry);
  return 0;
}

/* Remove the barrier between loading a K/V tile and reading it. */
static int remove_barrier(gen_kernel *k) {
  const char *loop = strstr(k->body, "if (k0 > 0) fa_syncthreads();");
  return loop ? cut_barrier(k, loop + 30) : -1;
}

static void test_missing_barrier(void) {
  fa_problem p = {.batch = 1, .heads = 2, .seq_q = 64, .seq_k = 64, .dim = 16, .dtype = FA_FP32};
  gen_kernel k[2];
  const gen_kernel *kp[2] = {&k[0], &k[1]};
  fa_build b[2];
  const char *cfg = "block_m=32,block_n=16,warps=2,norm=deferred,par=q_outer,split=split_q";
  CHECK(gen_render_config(gen, cfg, &p, &target, &k[0]) == 0, "%s", gen_errmsg(gen));
  CHECK(gen_render_config(gen, cfg, &p, &target, &k[1]) == 0, "%s", gen_errmsg(gen));
  CHECK(remove_barrier(&k[1]) == 0, "no barrier to remove in %s", k[1].name);
  compile_all(kp, 2, b);
  val_result r;
  if (b[0].prog && validate(&k[0], b[0].prog, &p, EMU_FORWARD, EMU_REVERSE, &r) == 0)
    CHECK(r.status == VAL_OK, "the intact kernel fails: %s", r.msg);
  if (b[1].prog && validate(&k[1], b[1].prog, &p, EMU_FORWARD, EMU_REVERSE, &r) == 0) {
    CHECK(r.status == VAL_INVALID, "a kernel without its barrier passes");
    CHECK(strstr(r.msg, "schedules") && strstr(r.msg, k[1].entry),
          "the race is not reported as one, naming the kernel: %s", r.msg);
    printf("missing barrier: %s\n", r.msg);
  }
  for (int i = 0; i < 2; i++) backend_build_free(be, &b[i]), gen_kernel_free(&k[i]);
}

/* The barrier before a K/V stage is overwritten, cut: a warp that runs
** ahead overwrites (or, with cp.async, lands its copy into) the stage others
** still read. Forward and reverse keep warps within a collective of each
** other, so where every warp reads every block (not causal) only the skew
** schedule pulls one far enough ahead. Each case: the intact kernel passes,
** the cut one is invalid, named as a race. */
typedef struct stage_case {
  const char *config, *anchor;
  int dim;
  fa_dtype dtype;
} stage_case;

static void test_stage_barrier(void) {
  static const stage_case cases[] = {
    {"family=simt,block_m=32,block_n=16,warps=2,norm=deferred,par=q_outer,split=split_q",
     "if (k0 > 0) fa_syncthreads(); /* everyone is done with the previous K/V tile */", 16,
     FA_FP32},
    {"family=tc,block_m=64,block_n=32,warps=4,norm=deferred,layout=swizzle,q=smem,stages=1,"
     "q_share=0", "fa_syncthreads(); /* every warp is done with the stage */", 32, FA_FP16},
    {"family=tc,block_m=64,block_n=32,warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,"
     "q_share=0", "fa_syncthreads();           /* for every thread; and the previous iteration's "
     "stage is free */", 32, FA_FP16},
  };
  enum { NC = sizeof cases / sizeof cases[0] };
  gen_kernel k[NC * 2 * 2];
  const gen_kernel *kp[NC * 2 * 2];
  fa_build b[NC * 2 * 2];
  fa_problem ps[NC * 2];
  size_t n = 0;
  for (size_t c = 0; c < NC; c++)
    for (int causal = 0; causal < 2; causal++) {
      /* Four K/V blocks or more; Q rows for two CTAs. */
      fa_problem p = {.batch = 1, .heads = 2, .seq_q = 128, .seq_k = 128, .dim = cases[c].dim,
                      .dtype = cases[c].dtype, .causal = causal};
      ps[c * 2 + (size_t)causal] = p;
      for (int cut = 0; cut < 2; cut++) {
        gen_kernel *kk = &k[n];
        if (gen_render_config(gen, cases[c].config, &p, &target, kk) != 0) {
          CHECK(0, "%s: %s", cases[c].config, gen_errmsg(gen));
          return;
        }
        kp[n++] = kk;
        if (cut) CHECK(cut_barrier(kk, cases[c].anchor) == 0, "no '%s' in %s", cases[c].anchor,
                       kk->name);
      }
    }
  compile_all(kp, n, b);
  for (size_t i = 0; i < n; i++) {
    const fa_problem *p = &ps[i / 2];
    val_result r;
    if (!b[i].prog || validate(&k[i], b[i].prog, p, EMU_FORWARD, EMU_SKEW, &r) != 0) continue;
    if (i % 2 == 0) {
      CHECK(r.status == VAL_OK, "the intact %s fails: %s", k[i].name, r.msg);
    } else {
      CHECK(r.status == VAL_INVALID && strstr(r.msg, "schedules"),
            "%s%s without the barrier before its stage is reused: %s", k[i].name,
            p->causal ? " (causal)" : "", r.status == VAL_OK ? "passes" : r.msg);
      printf("stage barrier cut, %s: %s\n", k[i].name, r.msg);
    }
  }
  for (size_t i = 0; i < n; i++) backend_build_free(be, &b[i]), gen_kernel_free(&k[i]);
}

/* Q's traffic once, K and V once per Q tile; O and lse written once. */
static void test_generated_counters(void) {
  fa_problem p = {.batch = 2, .heads = 3, .seq_q = 100, .seq_k = 70, .dim = 16, .dtype = FA_FP64};
  gen_kernel k;
  fa_build b;
  const char *cfg = "block_m=32,block_n=16,warps=2,norm=deferred,par=q_outer,split=split_q";
  CHECK(gen_render_config(gen, cfg, &p, &target, &k) == 0, "%s", gen_errmsg(gen));
  const gen_kernel *kp = &k;
  compile_all(&kp, 1, &b);
  val_result r;
  if (!b.prog || validate(&k, b.prog, &p, EMU_RANDOM, EMU_FORWARD, &r) != 0) return;
  CHECK(r.status == VAL_OK, "%s", r.msg);
  const unsigned long long bh = 6, es = 8, qtiles = 4, ktiles = 5;  /* 100/32, 70/16 up */
  CHECK(r.counters.gmem_read == es * bh * (100 * 16 + qtiles * 2 * 70 * 16),
        "global bytes read %llu", r.counters.gmem_read);
  CHECK(r.counters.gmem_written == es * bh * (100 * 16 + 100), "global bytes written %llu",
        r.counters.gmem_written);
  /* One barrier after Q, then two per K/V tile but the first. */
  CHECK(r.counters.barriers == bh * qtiles * 2 * ktiles, "barriers %llu", r.counters.barriers);
  CHECK(r.counters.log2 == bh * 100, "logarithms %llu", r.counters.log2);
  CHECK(r.counters.mma == 0 && r.counters.ldmatrix == 0 && r.counters.cp_async == 0,
        "tensor-core counts on a SIMT kernel");
  backend_build_free(be, &b);
  gen_kernel_free(&k);
}

/* The naive-attention oracle, run on the emulator, against the CPU
** reference on the same inputs; then a kernel judged by it. */
static void test_oracle(void) {
  static const fa_dtype dts[] = {FA_FP32, FA_FP64, FA_FP16, FA_BF16};
  static const double tol[] = {1e-6, 1e-13, 1e-6, 1e-6};
  for (int i = 0; i < 4; i++) {
    fa_problem p = {.batch = 2, .heads = 2, .seq_q = 37, .seq_k = 53, .dim = 24, .dtype = dts[i],
                    .causal = i & 1};
    gen_kernel ok;
    fa_build ob;
    char err[512];
    CHECK(gen_render_oracle(gen, &p, &ok) == 0, "%s", gen_errmsg(gen));
    const gen_kernel *kp = &ok;
    compile_all(&kp, 1, &ob);
    val_case cpu, gpu;
    const unsigned long long s = seed++;
    if (!ob.prog || val_case_make(&cpu, &p, s, err, sizeof err) != 0) continue;
    int rc = val_case_make_oracle(&gpu, &p, s, be, ob.prog, &ok, 16, err, sizeof err);
    CHECK(rc == 0, "oracle %s: %s", fa_dtype_name(p.dtype), err);
    if (rc == 0) {
      const size_t rows = 2 * 2 * 37, n = rows * 24;
      double e2 = 0, r2 = 0, le = 0;
      for (size_t j = 0; j < n; j++)
        e2 += (gpu.o_ref[j] - cpu.o_ref[j]) * (gpu.o_ref[j] - cpu.o_ref[j]),
        r2 += cpu.o_ref[j] * cpu.o_ref[j];
      for (size_t j = 0; j < rows; j++) le = fmax(le, fabs(gpu.lse_ref[j] - cpu.lse_ref[j]));
      CHECK(sqrt(e2 / r2) < tol[i] && le < 10 * tol[i], "oracle %s: rel %.3g, lse %.3g",
            fa_dtype_name(p.dtype), sqrt(e2 / r2), le);
      CHECK(gpu.nsample == 16 && gpu.oracle_err < tol[i], "oracle %s: sampled rows %zu, err %.3g",
            fa_dtype_name(p.dtype), gpu.nsample, gpu.oracle_err);
      printf("oracle %s: rel %.2e against the CPU reference, %zu sampled rows %.2e\n",
             fa_dtype_name(p.dtype), sqrt(e2 / r2), gpu.nsample, gpu.oracle_err);
      if (p.dtype == FA_FP32) {  /* a kernel judged by the oracle */
        gen_kernel k;
        fa_build b;
        CHECK(gen_render_config(gen, "block_m=16,block_n=16,warps=2", &p, &target, &k) == 0, "%s",
              gen_errmsg(gen));
        kp = &k;
        compile_all(&kp, 1, &b);
        attn_inputs in;
        val_result r;
        val_opts o = {.nschedules = 1, .schedule = {EMU_RANDOM}, .seed = s, .threads = 1};
        if (b.prog && attn_inputs_upload(be, &p, gpu.q, gpu.k, gpu.v, &in, err, sizeof err) == 0) {
          CHECK(val_check(be, &gpu, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
          CHECK(r.status == VAL_OK && r.sample_err > 0 && r.sample_err < 1e-5,
                "judged by the oracle: %s (sampled rows %.3g)", r.msg, r.sample_err);
          attn_inputs_free(be, &in);
        }
        backend_build_free(be, &b);
        gen_kernel_free(&k);
      }
      val_case_free(&gpu);
    }
    val_case_free(&cpu);
    backend_build_free(be, &ob);
    gen_kernel_free(&ok);
  }
}

/* The oracle's own check applies the tolerance of its accumulation
** (val_tolerance: fp64's for fp64, fp32's for the others): an oracle whose
** output is off by a relative amount over it is refused, one under it
** passes. The perturbation is planted in the rendered body. */
static void test_oracle_tolerance(void) {
  static const struct { fa_dtype dt; const char *factor; int ok; } cases[] = {
    {FA_FP16, "1.0001", 0}, {FA_BF16, "1.0001", 0}, {FA_FP32, "1.0001", 0},
    {FA_FP16, "1.0000001", 1}, {FA_FP64, "1.000000001", 0}, {FA_FP64, "1.000000000001", 1},
  };
  static const char from[] = "nvis > 0 ? acc / l : (acc_t)0";
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fa_problem p = {.batch = 1, .heads = 2, .seq_q = 29, .seq_k = 41, .dim = 16,
                    .dtype = cases[i].dt};
    gen_kernel ok;
    fa_build ob;
    char err[512], *at;
    CHECK(gen_render_oracle(gen, &p, &ok) == 0, "%s", gen_errmsg(gen));
    if (!(at = strstr(ok.body, from))) {
      CHECK(0, "the oracle's output line moved: '%s' not in its body", from);
      gen_kernel_free(&ok);
      return;
    }
    char *body = malloc(strlen(ok.body) + 64);
    CHECK(body != NULL, "out of memory");
    if (!body) return;
    sprintf(body, "%.*snvis > 0 ? acc / l * (acc_t)%s : (acc_t)0%s", (int)(at - ok.body),
            ok.body, cases[i].factor, at + strlen(from));
    free(ok.body);
    ok.body = body;
    const gen_kernel *kp = &ok;
    compile_all(&kp, 1, &ob);
    val_case gpu;
    int rc = ob.prog ? val_case_make_oracle(&gpu, &p, seed++, be, ob.prog, &ok, 16, err,
                                            sizeof err)
                     : -1;
    CHECK(cases[i].ok ? rc == 0 : rc != 0 && strstr(err, "oracle disagrees"),
          "an oracle off by a factor %s in %s: rc %d (%s)", cases[i].factor,
          fa_dtype_name(p.dtype), rc, rc ? err : "accepted");
    if (rc == 0) val_case_free(&gpu);
    backend_build_free(be, &ob);
    gen_kernel_free(&ok);
  }
}

/* ---- Hand-written kernels ---- */

static const char counting_body[] =
  "FA_KERNEL(t_count, 64)\n"
  "{\n"
  "  const float *q = (const float *)p.q;\n"
  "  float *o = (float *)p.o, *sm = (float *)fa_smem_base();\n"
  "  const int t = fa_tid(), b = fa_bid_x();\n"
  "  fa_sts_f32(sm + t, fa_ldg_f32(q + b * 64 + t));\n"
  "  fa_syncthreads();\n"
  "  float y = fa_lds_f32(sm + (t ^ 1));\n"
  "  y += fa_shfl_xor_f32(y, 1);\n"
  "  fa_syncwarp();\n"
  "  fa_st_f32(o + b * 64 + t, fa_exp2_f32(y));\n"
  "}\n";

static const char diverge_exit_body[] =
  "FA_KERNEL(t_exit, 64)\n"
  "{ (void)p;\n"
  "  if (fa_tid() < 32) fa_syncthreads();\n"
  "}\n";

static const char diverge_line_body[] =
  "FA_KERNEL(t_lines, 64)\n"
  "{ (void)p;\n"
  "  if (fa_tid() < 32) fa_syncthreads();\n"
  "  else fa_syncthreads();\n"
  "}\n";

static const char diverge_warp_body[] =
  "FA_KERNEL(t_warp, 64)\n"
  "{\n"
  "  float x = (float)fa_tid();\n"
  "  if (fa_tid() == 3) x = fa_shfl_xor_f32(x, 1);\n"
  "  fa_syncthreads();\n"
  "  fa_st_f32((float *)p.o + fa_tid(), x);\n"
  "}\n";

static const char oob_global_body[] =
  "FA_KERNEL(t_oob, 32)\n"
  "{\n"
  "  const float *q = (const float *)p.q;\n"
  "  fa_st_f32((float *)p.o + fa_tid(), fa_ldg_f32(q + 120 + fa_tid()));\n"
  "}\n";

static const char oob_shared_body[] =
  "FA_KERNEL(t_oob_smem, 32)\n"
  "{ (void)p;\n"
  "  double *sm = (double *)fa_smem_base();\n"
  "  fa_sts_f64(sm + fa_tid() + 1, 1.0);\n"
  "}\n";

static const char misaligned_body[] =
  "FA_KERNEL(t_align, 32)\n"
  "{\n"
  "  const char *q = (const char *)p.q;\n"
  "  fa_st_f32((float *)p.o, fa_ldg_f32((const float *)(q + 2)));\n"
  "}\n";

typedef struct hand {
  const char *entry, *body;
  unsigned grid, threads, smem;
} hand;

static const hand hands[] = {
  {"t_count", counting_body, 2, 64, 256},
  {"t_exit", diverge_exit_body, 1, 64, 0},
  {"t_lines", diverge_line_body, 1, 64, 0},
  {"t_warp", diverge_warp_body, 1, 64, 0},
  {"t_oob", oob_global_body, 1, 32, 0},
  {"t_oob_smem", oob_shared_body, 1, 32, 256},
  {"t_align", misaligned_body, 1, 32, 0},
};
#define NHANDS (sizeof hands / sizeof hands[0])

/* Launch hand kernel i with q = 128 floats (q[j] = j / 64), o = 128 floats. */
static int launch_hand(const emu_build *b, size_t i, emu_schedule s, float *q, float *o,
                       fa_emu_counters *ctr, char *err, size_t errlen) {
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  prm.q = q, prm.o = o;
  fa_emu_range ranges[2] = {{(unsigned long long)(size_t)q, (unsigned long long)(size_t)(q + 128)},
                            {(unsigned long long)(size_t)o, (unsigned long long)(size_t)(o + 128)}};
  emu_launch_args a = {.fn = b->fn, .entry = hands[i].entry,
                       .grid = {hands[i].grid, 1, 1}, .threads = hands[i].threads,
                       .smem_bytes = hands[i].smem, .params = &prm, .ranges = ranges,
                       .nranges = 2};
  emu_launch_opts lo = {s, 7, 2, 0xFF};
  memset(ctr, 0, sizeof *ctr);
  return emu_launch(&a, &lo, ctr, err, errlen);
}

static void expect_failure(const emu_build *b, size_t i, float *q, float *o,
                           const char *want1, const char *want2) {
  static const emu_schedule all[] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM, EMU_SKEW};
  for (size_t s = 0; s < sizeof all / sizeof all[0]; s++) {
    char err[512] = "";
    fa_emu_counters c;
    int rc = launch_hand(b, i, all[s], q, o, &c, err, sizeof err);
    CHECK(rc == -1, "%s under %s: the launch succeeds", hands[i].entry,
          emu_schedule_name(all[s]));
    CHECK(strstr(err, hands[i].entry) && strstr(err, want1) && strstr(err, want2),
          "%s under %s: message '%s' lacks '%s' or '%s'", hands[i].entry,
          emu_schedule_name(all[s]), err, want1, want2);
    if (s == 0) printf("%s: %s\n", hands[i].entry, err);
  }
}

static void test_hand_kernels(void) {
  emu_source src[NHANDS];
  emu_build b[NHANDS];
  for (size_t i = 0; i < NHANDS; i++) src[i] = (emu_source){hands[i].entry, hands[i].body, &emu_preludes};
  char err[512];
  emu_compile_opts co = {.extra_flags = "-Wall -Wextra -Werror"};
  CHECK(emu_compile(src, NHANDS, &co, b, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < NHANDS; i++) CHECK(b[i].fn, "%s: %s", hands[i].entry, b[i].log);
  float *q = aligned_alloc(64, 128 * sizeof(float)), *o = aligned_alloc(64, 128 * sizeof(float));
  if (!q || !o) return;
  for (int j = 0; j < 128; j++) q[j] = (float)j / 64.0f;

  if (b[0].fn) {
    fa_emu_counters c;
    memset(o, 0xFF, 128 * sizeof(float));
    CHECK(launch_hand(&b[0], 0, EMU_RANDOM, q, o, &c, err, sizeof err) == 0, "%s", err);
    int right = 1;
    for (int j = 0; j < 128; j++) right &= o[j] == exp2f(q[j] + q[j ^ 1]);
    CHECK(right, "t_count computes the wrong values");
    CHECK(c.gmem_read == 512 && c.gmem_written == 512, "global %llu/%llu", c.gmem_read,
          c.gmem_written);
    CHECK(c.smem_read == 512 && c.smem_written == 512, "shared %llu/%llu", c.smem_read,
          c.smem_written);
    CHECK(c.shuffles == 4 && c.warp_syncs == 4 && c.barriers == 2 && c.exp2 == 128,
          "shuffles %llu, warp syncs %llu, barriers %llu, exp2 %llu", c.shuffles, c.warp_syncs,
          c.barriers, c.exp2);
  }
  if (b[1].fn) expect_failure(&b[1], 1, q, o, "divergent barrier", "line 3");
  if (b[2].fn) expect_failure(&b[2], 2, q, o, "divergent barrier", "line 4");
  if (b[3].fn) expect_failure(&b[3], 3, q, o, "divergent", "line 4");
  if (b[4].fn) expect_failure(&b[4], 4, q, o, "outside every buffer", "line 4");
  if (b[5].fn) expect_failure(&b[5], 5, q, o, "shared access outside", "line 4");
  if (b[6].fn) expect_failure(&b[6], 6, q, o, "misaligned", "line 4");
  for (size_t i = 0; i < NHANDS; i++) emu_build_free(&b[i]);
  free(q), free(o);
}

/* A compile error costs only its kernel, and its log names its line. */
static void test_compile_error(void) {
  emu_source src[3] = {
    {"t_good1", "FA_KERNEL(t_good1, 32)\n{\n  (void)p;\n}\n", &emu_preludes},
    {"t_bad", "FA_KERNEL(t_bad, 32)\n{\n  this is not C;\n}\n", &emu_preludes},
    {"t_good2", "FA_KERNEL(t_good2, 32)\n{\n  (void)p;\n}\n", &emu_preludes},
  };
  emu_build b[3];
  char err[512];
  emu_compile_opts co = {.jobs = 1};
  CHECK(emu_compile(src, 3, &co, b, err, sizeof err) == 0, "%s", err);
  CHECK(b[0].fn && b[2].fn, "a bad kernel takes good ones down with it");
  CHECK(!b[1].fn && b[1].log && strstr(b[1].log, "t_bad:3"), "the log does not point at "
        "t_bad:3: %s", b[1].log ? b[1].log : "(none)");
  for (int i = 0; i < 3; i++) emu_build_free(&b[i]);
}

int main(void) {
  const char *env = getenv("FATUNE_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  char err[512];
  if (gen_open(&gen, err, sizeof err) != 0 ||
      gen_target_for_arch(gen, "sm_90", 0, 0, &target) != 0 ||
      backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  test_seed_cases();
  test_missing_barrier();
  test_stage_barrier();
  test_generated_counters();
  test_oracle();
  test_oracle_tolerance();
  test_hand_kernels();
  test_compile_error();
  backend_close(be);
  gen_close(gen);
  return check_done("test_emu");
}
