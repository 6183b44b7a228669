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
**    judges a kernel, with the sampled rows in float64;
**  - serving: a sample of the decoding families and of tc's paged form
**    (prefill over a KV cache) validated on the decoding cases (pages
**    shuffled and shared, NaN past every length); libfatune's
**    fatune_attention_kvcache (a call and a plan, decoding and prefill)
**    and fatune_attention_varlen on device memory, against the reference;
**  - training under GQA: fatune_attention_backward with nothing tuned runs
**    a CTA per query head (tcbwd's qhead=1) where a CTA per K/V head would
**    leave SMs idle, and keeps the per-K/V-head default where those fill
**    the GPU (FATUNE_VERBOSE names the default); dQ, dK, dV against the
**    float64 reference.
*/
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fatune.h"
#include "reference.h"
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
  char state[] = "/tmp/fatune-test-gpu-XXXXXX";
  int fd = -1;
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
    fd = strstr(dev.name, "(fakecuda)") ? mkstemp(state) : -1;
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
  if (fd >= 0) unlink(state);  /* the fake driver's state, read at the launch */
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

/* ---- Serving ---- */

/* A sample of p's default space (for_list, when given, lists another form
** of it: the paged forward kernels of family `fam`), each validated on p's
** case. */
static void serve_sample(fa_backend *be, const gen_target *t, const fa_problem *p,
                         const fa_problem *for_list, const char *fam, const char *what) {
  gen_variant *v;
  size_t nv;
  char err[512];
  CHECK(gen_list(gen, for_list ? for_list : p, t, "default", &v, &nv) == 0, "%s", gen_errmsg(gen));
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, 13, err, sizeof err) != 0 || val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "%s: %s", what, err);
    return;
  }
  int ok = 0, n = 0;
  for (size_t i = 0; i < nv; i++) {
    gen_kernel k;
    fa_build b;
    if (!sampled(v, i) || (for_list && strncmp(v[i].name, fam, strlen(fam)))) continue;
    if (gen_render_config(gen, v[i].config, for_list ? for_list : p, t, &k) != 0) {
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
      ok += r.status == VAL_OK, n++;
    }
    backend_build_free(be, &b);
    gen_kernel_free(&k);
  }
  printf("%s: %d of %d sampled variants ok\n", what, ok, n);
  CHECK(n >= 2, "%s: %d variants sampled", what, n);
  gen_variants_free(v, nv);
  attn_inputs_free(be, &in);
  val_case_free(&c);
}

/* fatune_attention_kvcache on device memory: the validation case's pool,
** table and lengths as the library takes them, a call and a plan, whose
** variant's name holds `family`. */
static void serve_kvcache(fa_backend *be, const fa_problem *p, const char *family) {
  char err[512], dbpath[] = "/tmp/fatune-test-gpu-XXXXXX";
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, 17, err, sizeof err) != 0 || val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "kvcache case: %s", err);
    return;
  }
  const int fd = mkstemp(dbpath);
  if (fd >= 0) close(fd);
  const fatune_options opts = {.db_path = dbpath, .backend = "cuda"};
  fatune_ctx *ctx = NULL;
  CHECK(fatune_open(&opts, &ctx) == FATUNE_OK, "fatune_open: %s", fatune_errmsg());
  const int B = p->batch, H = p->heads, NQ = p->seq_q, D = p->dim, KVH = fa_problem_kv_heads(p);
  const int P = fa_problem_page(p), es = fa_dtype_size(p->dtype);
  const size_t rows = (size_t)B * H * NQ;
  void *o = NULL, *lse = NULL, *ho = malloc(rows * D * es), *hl = malloc(rows * 4);
  if (ctx && ho && hl && backend_alloc(be, rows * D * es, &o, err, sizeof err) == 0 &&
      backend_alloc(be, rows * 4, &lse, err, sizeof err) == 0) {
    const fatune_dtype dt = (fatune_dtype)p->dtype;
    const fatune_kvcache_args x = {
      .q = {in.q, dt, {B, H, NQ, D}, {(long long)H * NQ * D, (long long)NQ * D, D, 1}},
      .k_cache = {in.k, dt, {in.num_pages, P, KVH, D}, {(long long)P * KVH * D, (long long)KVH * D, D, 1}},
      .v_cache = {in.v, dt, {in.num_pages, P, KVH, D}, {(long long)P * KVH * D, (long long)KVH * D, D, 1}},
      .o = {o, dt, {B, H, NQ, D}, {(long long)H * NQ * D, (long long)NQ * D, D, 1}},
      .lse = lse, .block_table = in.table, .pages_per_seq = fa_problem_pages_per_seq(p),
      .cache_seqlens = in.lens, .causal = p->causal};
    for (int planned = 0; planned < 2; planned++) {
      fatune_decode_plan *plan = NULL;
      CHECK(backend_fill(be, o, 0xFF, rows * D * es, err, sizeof err) == 0, "%s", err);
      if (planned) {
        CHECK(fatune_decode_plan_create(ctx, &x, &plan) == FATUNE_OK, "plan: %s", fatune_errmsg());
        if (!plan) break;
        CHECK(strstr(fatune_decode_plan_variant(plan), family) != NULL, "%d new tokens: %s runs, "
              "not a variant with %s", NQ, fatune_decode_plan_variant(plan), family);
        CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK, "plan run: %s", fatune_errmsg());
        CHECK(fatune_decode_plan_check(plan) == FATUNE_OK, "plan check: %s", fatune_errmsg());
      } else {
        CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_OK, "kvcache: %s", fatune_errmsg());
      }
      fatune_decode_plan_free(plan);
      CHECK(backend_download(be, ho, o, rows * D * es, err, sizeof err) == 0 &&
            backend_download(be, hl, lse, rows * 4, err, sizeof err) == 0, "%s", err);
      const void *got[2] = {ho, hl};
      val_result r;
      val_judge(&c, got, &r);
      CHECK(r.status == VAL_OK, "kvcache through libfatune, %d new tokens (%s): %s", NQ,
            planned ? "a plan" : "a call", r.msg);
      printf("fatune_attention_kvcache, %d new tokens (%s): O error %.2e\n", NQ,
             planned ? "a plan" : "a call", r.rel_err);
    }
  }
  backend_free(be, o), backend_free(be, lse);
  free(ho), free(hl);
  fatune_close(ctx);
  unlink(dbpath);
  attn_inputs_free(be, &in);
  val_case_free(&c);
}

/* fatune_attention_varlen on device memory: two sequences of their own
** lengths, packed (total, heads, dim), against the reference of each. */
static void serve_varlen(fa_backend *be) {
  enum { H = 2, D = 64, NS = 2 };
  static const int cu_q[NS + 1] = {0, 37, 137}, cu_k[NS + 1] = {0, 90, 190};
  const int TQ = cu_q[NS], TK = cu_k[NS];
  const fa_dtype t = FA_BF16;
  char err[512], dbpath[] = "/tmp/fatune-test-gpu-XXXXXX";
  const size_t nq = (size_t)TQ * H * D, nk = (size_t)TK * H * D;
  unsigned short *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *ho = malloc(nq * 2);
  double *xq = malloc(nq * sizeof *xq), *xk = malloc(nk * sizeof *xk), *xv = malloc(nk * sizeof *xv);
  double *ref = malloc(nq * sizeof *ref);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dcq = NULL, *dck = NULL;
  fatune_ctx *ctx = NULL;
  if (!hq || !hk || !hv || !ho || !xq || !xk || !xv || !ref) goto done;
  uint64_t s = 7;
  for (size_t i = 0; i < nq; i++) xq[i] = fa_elem_put(hq, t, i, (double)(int)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1);
  for (size_t i = 0; i < nk; i++) xk[i] = fa_elem_put(hk, t, i, (double)(int)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1);
  for (size_t i = 0; i < nk; i++) xv[i] = fa_elem_put(hv, t, i, (double)(int)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1);
  /* each sequence alone, causal, in (1, heads, seq, dim) over the packed rows */
  for (int b = 0; b < NS; b++) {
    const int nq_b = cu_q[b + 1] - cu_q[b], nk_b = cu_k[b + 1] - cu_k[b];
    const fa_problem sp = {.batch = 1, .heads = H, .seq_q = nq_b, .seq_k = nk_b, .dim = D,
                           .dtype = t, .causal = 1};
    const fa_layout lq = {0, D, (long long)H * D}, lk = lq;
    CHECK(ref_attention(&sp, xq + (size_t)cu_q[b] * H * D, lq, xk + (size_t)cu_k[b] * H * D, lk,
                        xv + (size_t)cu_k[b] * H * D, lk, ref + (size_t)cu_q[b] * H * D, lq, NULL) == 0,
          "reference");
  }
  const int fd = mkstemp(dbpath);
  if (fd >= 0) close(fd);
  const fatune_options opts = {.db_path = dbpath, .backend = "cuda"};
  if (fatune_open(&opts, &ctx) != FATUNE_OK ||
      backend_alloc(be, nq * 2, &dq, err, sizeof err) || backend_alloc(be, nk * 2, &dk, err, sizeof err) ||
      backend_alloc(be, nk * 2, &dv, err, sizeof err) || backend_alloc(be, nq * 2, &dout, err, sizeof err) ||
      backend_alloc(be, sizeof cu_q, &dcq, err, sizeof err) || backend_alloc(be, sizeof cu_k, &dck, err, sizeof err) ||
      backend_upload(be, dq, hq, nq * 2, err, sizeof err) || backend_upload(be, dk, hk, nk * 2, err, sizeof err) ||
      backend_upload(be, dv, hv, nk * 2, err, sizeof err) || backend_upload(be, dcq, cu_q, sizeof cu_q, err, sizeof err) ||
      backend_upload(be, dck, cu_k, sizeof cu_k, err, sizeof err) ||
      backend_fill(be, dout, 0xFF, nq * 2, err, sizeof err)) {
    CHECK(0, "varlen setup: %s %s", err, fatune_errmsg());
    goto done;
  }
  const fatune_varlen_args a = {
    .q = {dq, FATUNE_BF16, {1, H, TQ, D}, {0, D, (long long)H * D, 1}},
    .k = {dk, FATUNE_BF16, {1, H, TK, D}, {0, D, (long long)H * D, 1}},
    .v = {dv, FATUNE_BF16, {1, H, TK, D}, {0, D, (long long)H * D, 1}},
    .o = {dout, FATUNE_BF16, {1, H, TQ, D}, {0, D, (long long)H * D, 1}},
    .cu_seqlens_q = dcq, .cu_seqlens_k = dck, .batch = NS, .max_seqlen_q = 100,
    .max_seqlen_k = 100, .causal = 1};
  CHECK(fatune_attention_varlen(ctx, &a) == FATUNE_OK, "varlen: %s", fatune_errmsg());
  CHECK(backend_download(be, ho, dout, nq * 2, err, sizeof err) == 0, "%s", err);
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < nq; i++) {
    const double d = fa_elem_get(ho, t, i) - ref[i];
    e2 += d * d, r2 += ref[i] * ref[i];
  }
  CHECK(r2 > 0 && sqrt(e2 / r2) <= val_tolerance(t), "varlen through libfatune: error %.3g",
        r2 > 0 ? sqrt(e2 / r2) : NAN);
  printf("fatune_attention_varlen, sequences of 37/90 and 100/100: O error %.2e\n",
         r2 > 0 ? sqrt(e2 / r2) : NAN);
done:
  backend_free(be, dq), backend_free(be, dk), backend_free(be, dv), backend_free(be, dout);
  backend_free(be, dcq), backend_free(be, dck);
  fatune_close(ctx);
  unlink(dbpath);
  free(hq), free(hk), free(hv), free(ho), free(xq), free(xk), free(xv), free(ref);
}

/* stderr into a file while fn(arg) runs: what the library said, in out. */
static void stderr_of(void (*fn)(void *), void *arg, char *out, size_t n) {
  char path[] = "/tmp/fatune-test-gpu-err-XXXXXX";
  out[0] = '\0';
  const int fd = mkstemp(path), saved = dup(2);
  if (fd < 0 || saved < 0) {
    CHECK(0, "capturing stderr: mkstemp or dup failed");
    if (fd >= 0) close(fd), unlink(path);
    if (saved >= 0) close(saved);
    fn(arg);
    return;
  }
  fflush(stderr);
  dup2(fd, 2);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const ssize_t got = pread(fd, out, n - 1, 0);
  out[got > 0 ? got : 0] = '\0';
  close(fd);
  unlink(path);
}

typedef struct bwd_call {
  fatune_ctx *ctx;
  const fatune_backward_args *a;
  fatune_status st;
} bwd_call;

static void run_backward(void *arg) {
  bwd_call *b = arg;
  b->st = fatune_attention_backward(b->ctx, b->a);
}

/* The backward pass under GQA (groups of G) of B x H heads of N tokens,
** d64 bf16, through libfatune on device memory with nothing tuned: the
** default it names holds "-qhead" when `spread`; dQ, dK, dV against the
** float64 reference. */
static void train_gqa(fa_backend *be, int B, int H, int G, int N, int spread) {
  enum { D = 64 };
  const fa_dtype t = FA_BF16;
  const int KVH = H / G;
  const size_t nq = (size_t)B * H * N * D, nk = (size_t)B * KVH * N * D, nl = (size_t)B * H * N;
  char err[512], said[4096], dbpath[] = "/tmp/fatune-test-gpu-XXXXXX";
  unsigned short *h[4] = {malloc(nq * 2), malloc(nk * 2), malloc(nk * 2), malloc(nq * 2)};
  unsigned short *hg = malloc(nq * 2);
  double *x[4] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)),
                  malloc(nk * sizeof(double)), malloc(nq * sizeof(double))};
  double *r[3] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)), malloc(nk * sizeof(double))};
  void *d[4] = {NULL}, *o = NULL, *lse = NULL, *g[3] = {NULL};
  fatune_ctx *ctx = NULL;
  const size_t n[4] = {nq, nk, nk, nq};
  int ok = hg != NULL;
  for (int i = 0; i < 4; i++) ok = ok && h[i] && x[i];
  for (int i = 0; i < 3; i++) ok = ok && r[i];
  if (!ok) {
    CHECK(0, "GQA backward: out of memory");
    goto done;
  }
  uint64_t s = 11;
  for (int i = 0; i < 4; i++)
    for (size_t j = 0; j < n[i]; j++)
      x[i][j] = fa_elem_put(h[i], t, j, (double)(int)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1);
  const fa_problem p = {.batch = B, .heads = H, .seq_q = N, .seq_k = N, .dim = D, .dtype = t,
                        .kv_group = G};
  const fa_layout lq = {(long long)H * N * D, (long long)N * D, D}, lk = {(long long)KVH * N * D, (long long)N * D, D};
  const ref_bwd_io io = {.q = x[0], .k = x[1], .v = x[2], .dout = x[3], .ql = lq, .kl = lk, .vl = lk,
                         .dol = lq, .dq = r[0], .dk = r[1], .dv = r[2], .dql = lq, .dkl = lk, .dvl = lk};
  CHECK(ref_attention_backward(&p, &io) == 0, "GQA backward: the reference");
  const int fd = mkstemp(dbpath);
  if (fd >= 0) close(fd);
  const fatune_options opts = {.db_path = dbpath, .backend = "cuda"};
  ok = fatune_open(&opts, &ctx) == FATUNE_OK && backend_alloc(be, nq * 2, &o, err, sizeof err) == 0 &&
       backend_alloc(be, nl * 4, &lse, err, sizeof err) == 0;
  for (int i = 0; ok && i < 4; i++)
    ok = backend_alloc(be, n[i] * 2, &d[i], err, sizeof err) == 0 &&
         backend_upload(be, d[i], h[i], n[i] * 2, err, sizeof err) == 0;
  for (int i = 0; ok && i < 3; i++)
    ok = backend_alloc(be, n[i] * 2, &g[i], err, sizeof err) == 0 &&
         backend_fill(be, g[i], 0xFF, n[i] * 2, err, sizeof err) == 0;
  if (!ok) {
    CHECK(0, "GQA backward setup: %s %s", err, fatune_errmsg());
    goto done;
  }
#define T4(ptr, heads) {ptr, FATUNE_BF16, {B, heads, N, D}, {(long long)(heads) * N * D, (long long)N * D, D, 1}}
  const fatune_attention_args fa = {.q = T4(d[0], H), .k = T4(d[1], KVH), .v = T4(d[2], KVH),
                                    .o = T4(o, H), .lse = lse};
  const fatune_backward_args ba = {.q = T4(d[0], H), .k = T4(d[1], KVH), .v = T4(d[2], KVH),
                                   .o = T4(o, H), .dout = T4(d[3], H), .dq = T4(g[0], H),
                                   .dk = T4(g[1], KVH), .dv = T4(g[2], KVH), .lse = lse};
#undef T4
  CHECK(fatune_attention(ctx, &fa) == FATUNE_OK, "GQA forward: %s", fatune_errmsg());
  bwd_call call = {ctx, &ba, FATUNE_OK};
  setenv("FATUNE_VERBOSE", "1", 1);
  stderr_of(run_backward, &call, said, sizeof said);
  unsetenv("FATUNE_VERBOSE");
  CHECK(call.st == FATUNE_OK, "GQA backward: %s", fatune_errmsg());
  const char *name = strstr(said, "running the default ");
  CHECK(name && (strstr(name, "-qhead") != NULL) == spread,
        "%d x %d heads in groups of %d, %d tokens: %s, not %s", B, H, G, N, said,
        spread ? "a CTA per query head" : "the default's CTA per K/V head");
  static const char *const what[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3 && call.st == FATUNE_OK; i++) {
    CHECK(backend_download(be, hg, g[i], n[i] * 2, err, sizeof err) == 0, "%s", err);
    double e2 = 0, r2 = 0;
    for (size_t j = 0; j < n[i]; j++) {
      const double dd = fa_elem_get(hg, t, j) - r[i][j];
      e2 += dd * dd, r2 += r[i][j] * r[i][j];
    }
    const double e = r2 > 0 ? sqrt(e2 / r2) : NAN;
    CHECK(e <= val_tolerance(t), "GQA backward (%d x %d heads, groups of %d): %s error %.3g", B, H,
          G, what[i], e);
    printf("fatune_attention_backward, %d x %d heads in groups of %d, %d tokens (%s): %s error "
           "%.2e\n", B, H, G, N, spread ? "qhead" : "a CTA per K/V head", what[i], e);
  }
done:
  for (int i = 0; i < 4; i++) backend_free(be, d[i]), free(h[i]), free(x[i]);
  for (int i = 0; i < 3; i++) backend_free(be, g[i]), free(r[i]);
  backend_free(be, o), backend_free(be, lse);
  free(hg);
  fatune_close(ctx);
  unlink(dbpath);
}

static void test_serving(fa_backend *be, const gen_target *t) {
  static const int lens[5] = {150, 0, 1, 97, 200};
  fa_problem dec = {.batch = 5, .heads = 4, .seq_q = 2, .seq_k = 200, .dim = 64,
                    .dtype = FA_BF16, .causal = 1, .op = FA_OP_DECODE, .kv_group = 2, .page = 16,
                    .kv_lens = lens};
  serve_sample(be, t, &dec, NULL, NULL, "decoding, bf16 d64, GQA 2, pages of 16");
  fa_problem pre = dec;
  pre.seq_q = 70, pre.page = 7;
  fa_problem fwd = pre;
  fwd.op = FA_OP_FWD, fwd.paged = 1, fwd.kv_lens = NULL, fwd.page = 0;
  serve_sample(be, t, &pre, &fwd, "tc-", "prefill over a cache (tc's paged form), 70 new tokens, "
               "pages of 7");
  /* wg's (sm_90a, on an sm_90 device): TMA boxes of 16 rows, pages of 16 */
  gen_target t90a;
  if (dev.cc_major == 9 && dev.cc_minor == 0 &&
      gen_target_for_arch(gen, "sm_90a", dev.smem_per_block_optin, 0, &t90a) == 0) {
    pre.page = 16;
    serve_sample(be, &t90a, &pre, &fwd, "wg-", "prefill over a cache (wg's paged form), 70 new "
                 "tokens, pages of 16");
  }
  serve_kvcache(be, &dec, "dec-");
  /* enough CTAs for the forward form: batch x heads x 1 query block, twice, past the SMs */
  static const int many[4] = {190, 0, 50, 150};
  fa_problem big = {.batch = 4, .heads = 2 * ((dev.sm_count + 7) / 8), .seq_q = 64,
                    .seq_k = 192, .dim = 64, .dtype = FA_BF16, .causal = 1, .op = FA_OP_DECODE,
                    .kv_group = 2, .page = 16, .kv_lens = many};
  serve_kvcache(be, &big, "-paged");
  /* one sequence of 192 new tokens: the forward form from a quarter of
  ** 128 rows an SM in one wave of tiles (tc's, pages of 8), from a sixth
  ** (wg's on sm_90a, pages of 16), where a grid under half the SMs once
  ** decoded */
  static const int one[1] = {190};
  fa_problem wave = {.batch = 1, .heads = 2 * ((dev.sm_count + 11) / 12), .seq_q = 192,
                     .seq_k = 192, .dim = 64, .dtype = FA_BF16, .causal = 1, .op = FA_OP_DECODE,
                     .kv_group = 2, .page = 8, .kv_lens = one};
  serve_kvcache(be, &wave, "tc-");
  if (dev.cc_major == 9 && dev.cc_minor == 0) {
    wave.heads = 2 * ((dev.sm_count + 17) / 18), wave.page = 16;
    serve_kvcache(be, &wave, "wg-");
  }
  serve_varlen(be);
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
    if (dev.cc_major >= 8) test_serving(be, &target);
    if (dev.cc_major >= 8) {
      /* one K/V head's 128 keys: a CTA; then a K/V head a batch, a CTA each, as many as the SMs */
      train_gqa(be, 1, 4, 4, 128, 1);
      train_gqa(be, dev.sm_count, 2, 2, 128, 0);
    }
    backend_close(be);
  }
  gen_close(gen);
  return check_done("test_gpu");
}
