/*
** test_gpu.c
** The cuda backend on a real GPU (ctest label "gpu"; SKIPPED without one):
**  - a kernel that writes far out of bounds, run in a worker process, is
**    recorded as crashed and poisons only that process: the next job, in a
**    fresh worker, runs a good kernel correctly (first, while this process
**    has not touched CUDA: a context does not survive fork);
**  - a sample of the default space validates against the float64 CPU
**    reference, and times with sane statistics and occupancy: the SIMT
**    family in fp32, and in bf16 the tensor-core family and, on an sm_90
**    device (target sm_90a), the Hopper family wg, every 7th variant of
**    each family;
**  - the naive-attention oracle matches the CPU reference on a problem and
**    judges a kernel, with the sampled rows in float64.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "template_files.h"
#include "validate.h"
#include "worker.h"

static gen_state *gen;
static gen_target target;
static fa_device dev;

/* ---- In workers: a faulting kernel, then a good one ---- */

static const char wild_body[] =
  "FA_KERNEL(g_wild, 32)\n{\n"
  "  float *o = (float *)p.o;\n"
  "  fa_st_f32(o + 0x40000000ll * (fa_tid() + 1), 1.0f);  /* gigabytes past the end */\n"
  "}\n";

/* The preludes and the wild kernel's body, as one source. */
static char *wild_source(void) {
  static const char *const parts[] = {"fa_params.h", "prelude_cuda.cuh", "prelude_cuda_tc.cuh",
                                      "prelude_cuda_sm90.cuh"};
  size_t n = sizeof wild_body;
  for (const template_file *f = template_files; f->name; f++)
    for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++)
      if (!strcmp(f->name, parts[j])) n += strlen(f->text);
  char *src = malloc(n), *p = src;
  if (!src) return NULL;
  for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++)
    for (const template_file *f = template_files; f->name; f++)
      if (!strcmp(f->name, parts[j])) p += sprintf(p, "%s", f->text);
  sprintf(p, "%s", wild_body);
  return src;
}

typedef struct fault_answer { int rc; int poisoned; int right; char err[400]; } fault_answer;

static int fault_job(size_t i, void *ud, void *out) {
  (void)ud;
  fault_answer *a = out;
  char err[256];
  fa_backend *be;
  if (backend_open("cuda", &be, NULL, 0, err, sizeof err) != 0) {
    snprintf(a->err, sizeof a->err, "%s", err);
    a->rc = -2;
    return 1;
  }
  gen_kernel k;
  memset(&k, 0, sizeof k);
  fa_problem p = {.batch = 1, .heads = 1, .seq_q = 64, .seq_k = 64, .dim = 32, .dtype = FA_FP32};
  if (i == 0) {
    k.entry = "g_wild", k.threads = 32, k.nlaunch = 1;
    k.launch[0] = (gen_launch_spec){.entry = "g_wild", .threads = 32,
                                    .grid = {{GEN_GRID_SEQ_Q, 64}, {GEN_GRID_HEADS, 0},
                                             {GEN_GRID_BATCH, 0}}};
    if (!(k.source = wild_source())) {
      snprintf(a->err, sizeof a->err, "out of memory");
      return 1;
    }
    /* The fake driver cannot run this kernel's code, only fatune's
    ** attention kernels: it faults its launch the way the GPU would. */
    char state[] = "/tmp/fatune-test-gpu-XXXXXX";
    int fd = strstr(dev.name, "(fakecuda)") ? mkstemp(state) : -1;
    if (fd >= 0) {
      close(fd);
      setenv("FAKECUDA_STATE", state, 1);
      setenv("FAKECUDA_FAULT", "launch:1:illegal_address", 1);
    }
  } else if (gen_render_config(gen, "block_m=32,block_n=32,warps=2", &p, &target, &k) != 0) {
    snprintf(a->err, sizeof a->err, "%s", gen_errmsg(gen));
    return 1;
  }
  const gen_kernel *kp = &k;
  fa_build b;
  val_case c;
  attn_inputs in;
  val_result r;
  a->rc = backend_compile(be, &kp, 1, 1, &b, err, sizeof err);
  if (a->rc == 0 && b.prog && val_case_make(&c, &p, 7, err, sizeof err) == 0) {
    if (attn_inputs_upload(be, &p, c.q, c.k, c.v, &in, err, sizeof err) == 0) {
      val_opts o = {.nschedules = 1};
      a->rc = val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err);
      a->right = r.status == VAL_OK;
      snprintf(a->err, sizeof a->err, "%s", r.msg);
    }
    val_case_free(&c);
  } else if (!b.prog) {
    snprintf(a->err, sizeof a->err, "does not compile: %.150s", b.log ? b.log : err);
  }
  a->poisoned = backend_poisoned(be);
  return a->poisoned;  /* the dead context leaves with this process */
}

static void test_fault_isolation(void) {
  wk_worker *w;
  char err[256];
  CHECK(wk_open(&w, fault_job, NULL, sizeof(fault_answer), err, sizeof err) == 0, "%s", err);
  fault_answer a;
  char why[256];
  wk_outcome o = wk_run(w, 0, 60, &a, why, sizeof why);
  CHECK(o == WK_DONE || o == WK_CRASHED, "faulting kernel: outcome %d (%s)", (int)o, why);
  if (o == WK_DONE) {
    CHECK(!a.right && a.poisoned, "faulting kernel: right %d, poisoned %d (%s)", a.right,
          a.poisoned, a.err);
    printf("faulting kernel: %s\n", a.err);
  }
  o = wk_run(w, 1, 60, &a, why, sizeof why);
  CHECK(o == WK_DONE && a.rc == 0 && a.right && !a.poisoned,
        "good kernel after the fault: outcome %d, rc %d, right %d (%s%s)", (int)o, a.rc, a.right,
        why, a.err);
  wk_close(w);
}

/* ---- In this process ---- */

/* Every 7th variant of each family in v (families by name prefix): every
** axis shows up, and a family listed after another is not skipped. */
static int sampled(const gen_variant *v, size_t i) {
  size_t len = strcspn(v[i].name, "-"), before = 0;
  for (size_t j = 0; j < i; j++)
    before += strlen(v[j].name) > len && !strncmp(v[j].name, v[i].name, len + 1);
  return before % 7 == 0;
}

static void test_sample_and_timing(fa_backend *be, fa_dtype dtype, const gen_target *t) {
  fa_problem p = {.batch = 2, .heads = 3, .seq_q = 300, .seq_k = 257, .dim = 64,
                  .dtype = dtype, .causal = 1};
  gen_variant *v;
  size_t nv;
  char err[512];
  printf("%s on %s:\n", fa_dtype_name(dtype), t->arch);
  CHECK(gen_list(gen, &p, t, "default", &v, &nv) == 0, "%s", gen_errmsg(gen));
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, &p, 11, err, sizeof err) != 0 ||
      attn_inputs_upload(be, &p, c.q, c.k, c.v, &in, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return;
  }
  for (size_t i = 0; i < nv; i++) {
    gen_kernel k;
    fa_build b;
    if (!sampled(v, i)) continue;
    if (gen_render_config(gen, v[i].config, NULL, t, &k) != 0) {
      CHECK(0, "%s: %s", v[i].name, gen_errmsg(gen));
      continue;
    }
    const gen_kernel *kp = &k;
    CHECK(backend_compile(be, &kp, 1, 0, &b, err, sizeof err) == 0 && b.prog, "%s: %s", k.name,
          b.log ? b.log : err);
    if (b.prog) {
      val_result r;
      val_opts o = {.nschedules = 1};
      CHECK(val_check(be, &c, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
      CHECK(r.status == VAL_OK, "%s: %s", k.name, r.msg);
      fa_timing t;
      int ctas = 0;
      CHECK(attn_time(be, b.prog, &k, &p, &in, 50, NULL, &t, &ctas, err, sizeof err) == 0, "%s: %s",
            k.name, err);
      CHECK(t.reps >= 5 && t.min_us > 0 && t.min_us <= t.p20_us && t.p20_us <= t.median_us &&
            t.median_us <= t.p80_us && ctas >= 1,
            "%s: timing %d reps, min %.1f p20 %.1f median %.1f p80 %.1f, %d CTAs/SM", k.name,
            t.reps, t.min_us, t.p20_us, t.median_us, t.p80_us, ctas);
      printf("%-60s rel %.2e median %8.1f us (%d reps), %d CTAs/SM\n", k.name, r.rel_err,
             t.median_us, t.reps, ctas);
    }
    backend_build_free(be, &b);
    gen_kernel_free(&k);
  }
  gen_variants_free(v, nv);
  attn_inputs_free(be, &in);
  val_case_free(&c);
}

static void test_oracle(fa_backend *be) {
  fa_problem p = {.batch = 2, .heads = 4, .seq_q = 512, .seq_k = 512, .dim = 64,
                  .dtype = FA_FP32, .causal = 1};
  char err[512];
  gen_kernel ok, k;
  fa_build ob, b;
  CHECK(gen_render_oracle(gen, &p, &ok) == 0, "%s", gen_errmsg(gen));
  CHECK(gen_render_config(gen, "block_m=64,block_n=64,warps=4", &p, &target, &k) == 0, "%s",
        gen_errmsg(gen));
  const gen_kernel *ks[2] = {&ok, &k};
  fa_build builds[2];
  CHECK(backend_compile(be, ks, 2, 0, builds, err, sizeof err) == 0, "%s", err);
  ob = builds[0], b = builds[1];
  val_case cpu, gpu;
  if (!ob.prog || !b.prog || val_case_make(&cpu, &p, 5, err, sizeof err) != 0) return;
  CHECK(val_case_make_oracle(&gpu, &p, 5, be, ob.prog, &ok, 64, err, sizeof err) == 0, "%s", err);
  double e2 = 0, r2 = 0;
  const size_t n = 2 * 4 * 512 * 64;
  for (size_t i = 0; i < n; i++)
    e2 += (gpu.o_ref[i] - cpu.o_ref[i]) * (gpu.o_ref[i] - cpu.o_ref[i]),
    r2 += cpu.o_ref[i] * cpu.o_ref[i];
  CHECK(sqrt(e2 / r2) < 1e-6 && gpu.oracle_err < 1e-6, "oracle: rel %.3g, sampled %.3g",
        sqrt(e2 / r2), gpu.oracle_err);
  attn_inputs in;
  if (attn_inputs_upload(be, &p, gpu.q, gpu.k, gpu.v, &in, err, sizeof err) == 0) {
    val_result r;
    val_opts o = {.nschedules = 1};
    CHECK(val_check(be, &gpu, &in, b.prog, &k, &o, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.status == VAL_OK && r.sample_err < 1e-5, "judged by the oracle: %s", r.msg);
    attn_inputs_free(be, &in);
  }
  printf("oracle on the GPU: rel %.2e against the CPU, sampled rows %.2e\n", sqrt(e2 / r2),
         gpu.oracle_err);
  val_case_free(&cpu), val_case_free(&gpu);
  backend_build_free(be, &ob), backend_build_free(be, &b);
  gen_kernel_free(&ok), gen_kernel_free(&k);
}

int main(void) {
  char msg[256];
  if (!backend_probe_gpu(&dev, msg, sizeof msg)) check_skip(msg);
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d%d", dev.cc_major, dev.cc_minor);
  printf("GPU: %s, %s, %d SMs\n", dev.name, arch, dev.sm_count);
  if (gen_open(&gen, msg, sizeof msg) != 0 ||
      gen_target_for_arch(gen, arch, dev.smem_per_block_optin, 0, &target) != 0) {
    fprintf(stderr, "generator: %s\n", msg);
    return 1;
  }
  test_fault_isolation();
  fa_backend *be;
  CHECK(backend_open("cuda", &be, NULL, 0, msg, sizeof msg) == 0, "%s", msg);
  if (be) {
    test_sample_and_timing(be, FA_FP32, &target);
    /* On an sm_90 device sm_90a lists tc and wg together. */
    gen_target bf16 = target;
    if (dev.cc_major == 9 && dev.cc_minor == 0)
      CHECK(gen_target_for_arch(gen, "sm_90a", dev.smem_per_block_optin, 0, &bf16) == 0, "%s",
            gen_errmsg(gen));
    if (dev.cc_major >= 8) test_sample_and_timing(be, FA_BF16, &bf16);
    test_oracle(be);
    backend_close(be);
  }
  gen_close(gen);
  return check_done("test_gpu");
}
