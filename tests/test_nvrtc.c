/*
** test_nvrtc.c
** NVRTC compile and ptxas report, architecture names, the compile pool run
** on several threads, and the driver probe. Needs the CUDA toolkit, no GPU.
*/
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "compile_pool.h"
#include "cuda_driver.h"
#include "model_sass.h"
#include "nvrtc_compile.h"

/* A local array indexed at run time cannot live in registers: a stack frame. */
static const char *src_stack =
  "extern \"C\" __global__ void stk(float *o, int n) {\n"
  "  float a[64];\n"
  "  for (int i = 0; i < n; i++) a[(i * 7) & 63] = o[i];\n"
  "  o[threadIdx.x] = a[n & 63];\n"
  "}\n";

/* 256 floats of static shared memory: 1024 bytes. */
static const char *src_smem =
  "extern \"C\" __global__ void tile(float *o) {\n"
  "  __shared__ float s[256];\n"
  "  s[threadIdx.x] = o[threadIdx.x];\n"
  "  __syncthreads();\n"
  "  o[threadIdx.x] = s[(threadIdx.x + 1) & 255];\n"
  "}\n";

static const char *src_bad =
  "extern \"C\" __global__ void bad(float *o) {\n"
  "  o[0] = 1.0f\n"
  "}\n";

static int is_elf(const nvrtc_result *r) {
  return r->cubin && r->cubin_size >= 4 && memcmp(r->cubin, "\x7f" "ELF", 4) == 0;
}

static void check_good(const nvrtc_result *r, const char *what) {
  CHECK(r->ok == 1, "%s: ok=%d error=%s log=%s", what, r->ok, r->error, r->log);
  CHECK(is_elf(r), "%s: CUBIN is not ELF (%zu bytes)", what, r->cubin_size);
  CHECK(r->error[0] == '\0', "%s: error set on success: %s", what, r->error);
  CHECK(r->log != NULL, "%s: NULL log", what);
  CHECK(r->registers > 0, "%s: registers=%d\nlog:\n%s", what, r->registers, r->log);
  CHECK(r->spill_store_bytes == 0 && r->spill_load_bytes == 0, "%s: spills %d/%d",
        what, r->spill_store_bytes, r->spill_load_bytes);
  CHECK(r->compile_ms > 0.0, "%s: compile_ms=%g", what, r->compile_ms);
}

/* What the tuner's compile cache reads from a cubin (its ELF) must be what
** ptxas reported for the entry. */
static void check_elf(const nvrtc_result *r, const char *entry, const char *what) {
  const int regs = model_cubin_registers(r->cubin, r->cubin_size, entry);
  CHECK(regs == r->registers, "%s: the cubin says %d registers, ptxas %d", what, regs,
        r->registers);
}

static void test_compile(const char *arch) {
  nvrtc_result r;
  char what[64];
  int rc;

  snprintf(what, sizeof what, "stk %s", arch);
  rc = nvrtc_compile(src_stack, "stk", arch, &r);
  CHECK(rc == 0, "%s: rc=%d error=%s", what, rc, r.error);
  check_good(&r, what);
  CHECK(r.stack_bytes > 0, "%s: stack_bytes=%d\nlog:\n%s", what, r.stack_bytes, r.log);
  CHECK(r.smem_static_bytes == 0, "%s: smem=%d", what, r.smem_static_bytes);
  check_elf(&r, "stk", what);
  printf("  %-12s %6.1f ms  %3d regs  %4d B stack  %4d B smem  %5zu B cubin\n", what,
         r.compile_ms, r.registers, r.stack_bytes, r.smem_static_bytes, r.cubin_size);
  nvrtc_result_free(&r);
  CHECK(r.cubin == NULL && r.log == NULL && r.ok == 0, "free must zero the result");
  nvrtc_result_free(&r);   /* twice is harmless */

  snprintf(what, sizeof what, "tile %s", arch);
  rc = nvrtc_compile(src_smem, "tile", arch, &r);
  CHECK(rc == 0, "%s: rc=%d error=%s", what, rc, r.error);
  check_good(&r, what);
  CHECK(r.smem_static_bytes == 1024, "%s: smem=%d\nlog:\n%s", what, r.smem_static_bytes, r.log);
  CHECK(r.stack_bytes == 0, "%s: stack=%d", what, r.stack_bytes);
  check_elf(&r, "tile", what);
  printf("  %-12s %6.1f ms  %3d regs  %4d B stack  %4d B smem  %5zu B cubin\n", what,
         r.compile_ms, r.registers, r.stack_bytes, r.smem_static_bytes, r.cubin_size);
  nvrtc_result_free(&r);
}

/* Two kernels in one program: the report must be read for the entry only. */
static void test_two_kernels(void) {
  char src[2048];
  nvrtc_result r;
  snprintf(src, sizeof src, "%s%s", src_smem, src_stack);
  CHECK(nvrtc_compile(src, "stk", "sm_80", &r) == 0, "two/stk: %s", r.error);
  CHECK(r.ok && r.stack_bytes > 0 && r.smem_static_bytes == 0,
        "two/stk: ok=%d stack=%d smem=%d", r.ok, r.stack_bytes, r.smem_static_bytes);
  check_elf(&r, "stk", "two/stk");
  nvrtc_result_free(&r);
  CHECK(nvrtc_compile(src, "tile", "sm_80", &r) == 0, "two/tile: %s", r.error);
  CHECK(r.ok && r.stack_bytes == 0 && r.smem_static_bytes == 1024,
        "two/tile: ok=%d stack=%d smem=%d", r.ok, r.stack_bytes, r.smem_static_bytes);
  check_elf(&r, "tile", "two/tile");
  nvrtc_result_free(&r);
  /* An entry that is not in the program: compiled, but nothing known. */
  CHECK(nvrtc_compile(src, "nosuch", "sm_80", &r) == 0, "two/nosuch: %s", r.error);
  CHECK(r.registers == -1, "two/nosuch: registers=%d", r.registers);
  nvrtc_result_free(&r);
}

static void test_bad(void) {
  nvrtc_result r;
  int rc = nvrtc_compile(src_bad, "bad", "sm_80", &r);
  CHECK(rc == 0, "bad: rc=%d (NVRTC ran, the source is wrong)", rc);
  CHECK(r.ok == 0, "bad: ok=%d", r.ok);
  CHECK(r.cubin == NULL && r.cubin_size == 0, "bad: a CUBIN from a bad source");
  CHECK(r.error[0] && strstr(r.error, "error"), "bad: error line '%s'", r.error);
  CHECK(r.log && strstr(r.log, "error"), "bad: log '%s'", r.log ? r.log : "(null)");
  CHECK(r.registers == -1, "bad: registers=%d", r.registers);
  printf("  bad source:  %s\n", r.error);
  nvrtc_result_free(&r);

  /* A warning that mentions "error" comes first; the error line is the error. */
  rc = nvrtc_compile("__device__ void f() { int error_count = 0; }\n"
                     "extern \"C\" __global__ void w(float *o) {\n"
                     "  o[0] = undeclared;\n"
                     "}\n", "w", "sm_80", &r);
  CHECK(rc == 0 && r.ok == 0 && strstr(r.error, "error:") && strstr(r.error, "undeclared"),
        "warning then error: error line '%s'\nlog:\n%s", r.error, r.log);
  nvrtc_result_free(&r);

  /* Bad arch: refused up front, with a message that names it. */
  rc = nvrtc_compile(src_smem, "tile", "sm_12", &r);
  CHECK(rc == 0 && r.ok == 0 && strstr(r.error, "sm_12"), "sm_12: rc=%d ok=%d error=%s",
        rc, r.ok, r.error);
  CHECK(r.log != NULL, "sm_12: NULL log");
  nvrtc_result_free(&r);

  /* NULL arguments: -1, a message, and a result still safe to free. */
  rc = nvrtc_compile(NULL, "x", "sm_80", &r);
  CHECK(rc == -1 && r.ok == 0 && r.error[0] && r.log, "NULL source: rc=%d", rc);
  nvrtc_result_free(&r);
}

static void test_archs(void) {
  const char *good[] = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};
  const char *bad[] = {"sm_12", "bogus", "", "sm_", "sm_80a", "sm_90f", "sm_90ab",
                       "compute_90", "sm_90 ", "sm_-90", "sm_090", "sm_9",
                       "sm_999999999999"};
  size_t i;
  for (i = 0; i < sizeof good / sizeof good[0]; i++)
    CHECK(nvrtc_arch_supported(good[i]) == 1, "%s should be supported", good[i]);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(nvrtc_arch_supported(bad[i]) == 0, "'%s' should be rejected", bad[i]);
  CHECK(nvrtc_arch_supported(NULL) == 0, "NULL should be rejected");
}

static void test_version(void) {
  const char *v = nvrtc_version_string();
  int major = 0, minor = -1;
  char tail = 0;
  CHECK(v != NULL && sscanf(v, "%d.%d%c", &major, &minor, &tail) == 2,
        "version '%s' is not MAJOR.MINOR", v ? v : "(null)");
  CHECK(major >= 12 && minor >= 0, "version '%s'", v);
  CHECK(nvrtc_version_string() == v, "version string must be computed once");
  printf("  NVRTC %s\n", v);
}

/*
** The pool: each job's own result, progress once per job, in order.
*/
#define NJOBS 6

typedef struct progress_log {
  size_t calls, last_done, total;
  int out_of_order;
} progress_log;

static void on_progress(size_t done, size_t total, void *ud) {
  progress_log *pl = ud;
  if (done != pl->last_done + 1) pl->out_of_order = 1;
  pl->calls++;
  pl->last_done = done;
  pl->total = total;
}

static void run_pool(int threads, size_t njobs) {
  static char srcs[NJOBS * 2][512];
  static char names[NJOBS * 2][32];
  compile_job jobs[NJOBS * 2];
  progress_log pl = {0, 0, 0, 0};
  size_t i;
  int rc;

  for (i = 0; i < njobs; i++) {
    /* Job i: a kernel k<i> with 64*(i+1) floats of shared memory, so each
    ** result says which source it came from; every third one is broken. */
    snprintf(names[i], sizeof names[i], "k%zu", i);
    snprintf(srcs[i], sizeof srcs[i],
             "extern \"C\" __global__ void k%zu(float *o) {\n"
             "  __shared__ float s[%zu];\n"
             "  s[threadIdx.x] = o[threadIdx.x]%s\n"
             "  __syncthreads();\n"
             "  o[threadIdx.x] = s[threadIdx.x ^ 1];\n"
             "}\n", i, 64 * (i + 1), i % 3 == 2 ? "" : ";");
    jobs[i].source = srcs[i];
    jobs[i].entry = names[i];
  }
  rc = compile_pool_run(jobs, njobs, "sm_80", threads, on_progress, &pl);
  CHECK(rc == 0, "pool(%d threads): rc=%d", threads, rc);
  CHECK(pl.calls == njobs && pl.last_done == njobs && pl.total == njobs && !pl.out_of_order,
        "pool(%d threads): %zu progress calls, last %zu/%zu, out of order %d", threads,
        pl.calls, pl.last_done, pl.total, pl.out_of_order);
  for (i = 0; i < njobs; i++) {
    nvrtc_result *r = &jobs[i].result;
    if (i % 3 == 2) {
      char where[32];
      snprintf(where, sizeof where, "k%zu.cu(", i);   /* the program is named after the entry */
      CHECK(r->ok == 0 && strstr(r->error, "error") && strstr(r->error, where),
            "pool job %zu should fail with its own error: ok=%d error=%s", i, r->ok, r->error);
    } else {
      CHECK(r->ok == 1 && is_elf(r), "pool job %zu: ok=%d error=%s", i, r->ok, r->error);
      CHECK(r->smem_static_bytes == (int)(256 * (i + 1)), "pool job %zu: smem=%d want %zu",
            i, r->smem_static_bytes, 256 * (i + 1));
    }
    nvrtc_result_free(r);
  }
}

static void test_pool(void) {
  int n = compile_pool_default_threads();
  CHECK(n >= 1, "default threads %d", n);
  run_pool(2, NJOBS);
  run_pool(0, NJOBS);             /* all cores */
  run_pool(64, 2);                /* more threads than jobs */
  run_pool(4, NJOBS * 2);         /* more jobs than threads, 4 at once */
  run_pool(1, 1);
  CHECK(compile_pool_run(NULL, 0, "sm_80", 2, NULL, NULL) == 0, "no jobs is no work");
}

static void test_driver(void) {
  char msg[256];
  cudrv_device_info info;
  int n = cudrv_probe(msg, sizeof msg);
  if (n == 0) {
    CHECK(strstr(msg, "driver") != NULL, "probe message '%s'", msg);
    CHECK(cudrv_device_query(0, &info, msg, sizeof msg) == -1 && msg[0],
          "query without a driver must fail with a message");
    printf("  driver: %s\n", msg);
    return;
  }
  CHECK(n >= 1, "probe returned %d", n);
  CHECK(cudrv_device_query(0, &info, msg, sizeof msg) == 0, "query: %s", msg);
  CHECK(info.name[0] != '\0', "empty device name");
  CHECK(info.cc_major >= 5, "cc %d.%d", info.cc_major, info.cc_minor);
  CHECK(info.sm_count > 0, "sm_count %d", info.sm_count);
  CHECK(info.smem_per_block_optin >= 48 * 1024, "smem optin %d", info.smem_per_block_optin);
  CHECK(info.max_threads_per_block >= 512, "max threads %d", info.max_threads_per_block);
  CHECK(cudrv_device_query(n, &info, msg, sizeof msg) == -1 && msg[0],
        "query past the last device must fail");
  printf("  driver: %d device(s); 0: %s, sm_%d%d, %d SMs, %d B smem opt-in, %d threads\n",
         n, info.name, info.cc_major, info.cc_minor, info.sm_count,
         info.smem_per_block_optin, info.max_threads_per_block);
}

int main(void) {
  test_version();
  test_archs();
  test_compile("sm_80");
  test_compile("sm_90");
  test_compile("sm_90a");
  test_two_kernels();
  test_bad();
  test_pool();
  test_driver();
  return check_done("test_nvrtc");
}
