/*
** fc_api.c
** A fake libcuda.so.1 for the tests: every Driver API entry point fatune
** loads (runtime/cuda/cuda_driver.c), under the same versioned names
** (<cuda.h> maps cuMemAlloc to cuMemAlloc_v2 and so on, so defining them
** after including it exports the names the real driver does), for one
** device described by FAKECUDA_DEVICE (a100, h100 (the default), h200,
** sm_75, sm_150: a GPU newer than any NVRTC).
**
** It holds the caller to the driver's contract. Where the real driver
** returns an error, the fake returns the same one; where the real driver
** stays silent (a leak, a double free, a handle used after its context is
** gone) the fake prints "fakecuda: VIOLATION: ..." on stderr, which the
** tests treat as a failure. Device memory is host memory behind addresses
** that no host pointer has, so a device pointer dereferenced on the host
** faults, as it would next to a GPU. Kernels run on the CPU (fc_exec.c) and
** time is virtual: a launch advances the context's clock by a fixed
** function of the kernel and the problem.
**
** FAKECUDA_FAULT, a comma-separated list, injects faults:
**   alloc:N                  the Nth cuMemAlloc returns CUDA_ERROR_OUT_OF_MEMORY
**   launch:N:illegal_address the Nth launch faults: CUDA_ERROR_ILLEGAL_ADDRESS
**                            from the next call on, sticky, as on a GPU
**   launch:N:hang            the Nth launch never completes
**   launch:N:wrong           the Nth launch writes wrong numbers
**   launch:N-:MODE           the Nth launch and every later one (alloc:N- and
**                            load:N- likewise)
**   load:N                   the Nth cuModuleLoadData fails (CUDA_ERROR_INVALID_IMAGE)
**   init                     cuInit fails: CUDA_ERROR_NO_DEVICE
** The counts run over every process of a run, so that the tuner's workers,
** each a process of its own, share them: they live in the file named by
** FAKECUDA_STATE, else in one keyed by the parent process (the tuner) in
** $TMPDIR.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fakecuda.h"

#define API __attribute__((visibility("default")))
#define DEV_BASE 0x200000000000ull   /* no host mapping lives here */
#define DEV_GAP 65536                 /* unmapped bytes between allocations */
#define DEFAULT_DYN_SMEM 49152        /* above this a kernel must opt in */

/* ---- The device ---- */

typedef struct fc_device {
  const char *key, *name;
  int major, minor, sms, smem_optin, smem_per_sm, regs_per_sm, threads_per_sm, blocks_per_sm;
  int l2, clock_khz, mem_clock_khz, bus_bits;
  size_t mem;
} fc_device;

/* Figures from each GPU's data sheet and cudaGetDeviceProperties. The name
** says "fakecuda", so that nothing measured here passes for a real GPU. */
static const fc_device devices[] = {
  {"a100", "NVIDIA A100-SXM4-80GB (fakecuda)", 8, 0, 108, 166912, 167936, 65536, 2048, 32,
   41943040, 1410000, 1593000, 5120, 85097971712ull},
  {"h100", "NVIDIA H100 80GB HBM3 (fakecuda)", 9, 0, 132, 232448, 233472, 65536, 2048, 32,
   52428800, 1980000, 2619000, 5120, 84942979072ull},
  {"h200", "NVIDIA H200 (fakecuda)", 9, 0, 132, 232448, 233472, 65536, 2048, 32, 52428800,
   1980000, 3201000, 6144, 150754820096ull},
  {"sm_75", "Tesla T4 (fakecuda)", 7, 5, 40, 65536, 65536, 65536, 1024, 16, 4194304, 1590000,
   5001000, 256, 15655829504ull},
  /* A GPU newer than any NVRTC: fatune must refuse it in one line. */
  {"sm_150", "NVIDIA future GPU (fakecuda)", 15, 0, 160, 232448, 233472, 65536, 2048, 32,
   52428800, 2000000, 4000000, 8192, 150754820096ull},
};

/* ---- Objects ---- */

typedef struct fc_ctx {
  int alive, refs, id;
  CUresult sticky;          /* a fault: every later call returns it */
  int hung;                 /* a launch that never completes */
  double clock_ms;          /* virtual time of the work queued so far */
} fc_ctx;

typedef struct fc_alloc {
  CUdeviceptr base;
  size_t size;
  int ctx, live;
  unsigned char *host;      /* NULL until needed: until then every byte is `fill` */
  unsigned char fill;
  unsigned long long gen;   /* bumped by every write */
} fc_alloc;

typedef struct fc_module {
  int ctx, live;
  fc_cubin cubin;
  int *max_dyn_smem;        /* per kernel: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
} fc_module;

typedef struct fc_event {
  int ctx, live, flags, recorded;
  int rec_ctx;
  double t_ms;
} fc_event;

static struct {
  pthread_mutex_t mu;
  int inited;
  pid_t init_pid;
  const fc_device *dev;
  fc_ctx ctx;               /* the primary context; id 0 when never made */
  int next_ctx_id;
  fc_alloc *allocs;         /* the live ones */
  size_t nallocs, cap_allocs, in_use;
  fc_alloc *dead;           /* the freed ones, for the reports */
  size_t ndead, cap_dead;
  CUdeviceptr next_addr;
  fc_module **mods;
  size_t nmods;
  fc_event **events;
  size_t nevents;
  int violations;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_addr = DEV_BASE};

static __thread int cur_ctx;  /* the current context's id, 0 for none */

void fc_violation(const char *fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakecuda: VIOLATION: %s\n", buf);
  S.violations++;
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakecuda: %s\n", buf);
}

/* ---- Faults ---- */

enum { F_ALLOC, F_LAUNCH, F_LOAD, F_KINDS };
enum { M_NONE, M_ILLEGAL, M_HANG, M_WRONG };

/* The Nth event of `kind` over the run: counts kept in a file, under a lock. */
static long count_event(int kind) {
  char path[512];
  const char *st = getenv("FAKECUDA_STATE");
  if (st && *st) {
    snprintf(path, sizeof path, "%s", st);
  } else {
    /* The parent's start time tells one tuner run from a later one with
    ** the same process id. */
    char statp[64], buf[1024];
    unsigned long long start = 0;
    snprintf(statp, sizeof statp, "/proc/%d/stat", (int)getppid());
    FILE *f = fopen(statp, "r");
    if (f) {
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      buf[n] = '\0';
      fclose(f);
      const char *p = strrchr(buf, ')');
      for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
      if (p) start = strtoull(p + 1, NULL, 10);
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/fakecuda-%d-%d-%llu", tmp && *tmp ? tmp : "/tmp",
             (int)getuid(), (int)getppid(), start);
  }
  long counts[F_KINDS] = {0};
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) {
    note("cannot keep the fault counts in %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (pread(fd, counts, sizeof counts, 0) < 0) counts[kind] = 0;
  long n = ++counts[kind];
  if (pwrite(fd, counts, sizeof counts, 0) != (ssize_t)sizeof counts)
    note("cannot write the fault counts to %s", path);
  flock(fd, LOCK_UN);
  close(fd);
  return n;
}

/* The mode of the fault planned for this event of `kind`, or M_NONE. */
static int fault(int kind) {
  static const char *const names[F_KINDS] = {"alloc", "launch", "load"};
  const char *spec = getenv("FAKECUDA_FAULT");
  if (!spec || !*spec || !strstr(spec, names[kind])) return M_NONE;
  long n = count_event(kind);
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char what[16] = "", mode[32] = "";
    long at = 0;
    int used = 0;
    if (sscanf(t, "%15[a-z]:%ld%n", what, &at, &used) < 2 || strcmp(what, names[kind]))
      continue;
    const int onward = t[used] == '-';   /* N-: the Nth and every later one */
    if (t[used + onward] == ':') sscanf(t + used + onward + 1, "%31s", mode);
    if (onward ? n < at : n != at) continue;
    if (kind != F_LAUNCH) return M_ILLEGAL;
    if (!strcmp(mode, "illegal_address")) return M_ILLEGAL;
    if (!strcmp(mode, "hang")) return M_HANG;
    if (!strcmp(mode, "wrong")) return M_WRONG;
    note("FAKECUDA_FAULT: unknown launch fault '%s'", mode);
  }
  return M_NONE;
}

/* ---- Checks every call makes ---- */

#define LOCK() pthread_mutex_lock(&S.mu)
#define UNLOCK() pthread_mutex_unlock(&S.mu)
#define RET(x) do { CUresult r_ = (x); UNLOCK(); return r_; } while (0)

/* cuInit ran in this process. A child forked after its parent's cuInit
** shares none of CUDA's state: the real driver answers such a child's
** calls CUDA_ERROR_NOT_INITIALIZED (seen on an H200, driver 580:
** cuDeviceGetCount in a probe forked by a process that had used CUDA). */
static int inited_here(void) { return S.inited && S.init_pid == getpid(); }

/* The current context, alive, with no sticky error: CUDA_SUCCESS or why not. */
static CUresult ctx_ok(void) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (cur_ctx == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (cur_ctx != S.ctx.id || !S.ctx.alive) {
    fc_violation("a call on context %d, destroyed", cur_ctx);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  return S.ctx.sticky;
}

/* A call that waits for the queued work: a hung launch never lets it return. */
static CUresult wait_queue(void) {
  if (S.ctx.hung) {
    UNLOCK();
    for (;;) pause();
  }
  return S.ctx.sticky;
}

/* ---- Memory ---- */

static fc_alloc *find_in(fc_alloc *all, size_t n, CUdeviceptr p) {
  for (size_t i = n; i-- > 0;)
    if (p >= all[i].base && p < all[i].base + all[i].size) return &all[i];
  return NULL;
}

/* The live allocation holding p, else (unless live_only) a freed one. */
static fc_alloc *find_alloc(CUdeviceptr p, int live_only) {
  fc_alloc *a = find_in(S.allocs, S.nallocs, p);
  return a || live_only ? a : find_in(S.dead, S.ndead, p);
}

/* Room for one more in an array of allocations. */
static int grow(fc_alloc **all, size_t n, size_t *cap) {
  if (n < *cap) return 0;
  size_t c = *cap ? 2 * *cap : 256;
  fc_alloc *na = realloc(*all, c * sizeof *na);
  if (!na) return -1;
  *all = na, *cap = c;
  return 0;
}

/* The live allocation of the current context holding [p, p + n); when the
** range is in a freed one or another context's, a violation too. */
static fc_alloc *range(CUdeviceptr p, size_t n, const char *call) {
  fc_alloc *a = find_alloc(p, 1);
  if (a && a->ctx == cur_ctx && n <= a->size - (p - a->base)) return a;
  fc_alloc *dead = a ? NULL : find_alloc(p, 0);
  if (dead) fc_violation("%s: 0x%llx is in memory already freed", call, (unsigned long long)p);
  else if (a && a->ctx != cur_ctx) fc_violation("%s: 0x%llx is another context's", call,
                                                (unsigned long long)p);
  return NULL;
}

static unsigned char *host_of(fc_alloc *a) {
  if (!a->host) {
    a->host = malloc(a->size);
    if (a->host) memset(a->host, a->fill, a->size);
  }
  return a->host;
}

void *fc_mem_map(CUdeviceptr p, size_t n, int write) {
  fc_alloc *a = range(p, n, "a kernel");
  unsigned char *h = a ? host_of(a) : NULL;
  if (!h) return NULL;
  if (write) a->gen++;
  return h + (p - a->base);
}

unsigned long long fc_mem_gen(CUdeviceptr p) {
  fc_alloc *a = find_alloc(p, 1);
  return a ? a->gen : 0;
}

/* ---- Init and devices ---- */

API CUresult cuInit(unsigned flags) {
  LOCK();
  if (getenv("FAKECUDA_TRACE")) note("cuInit in process %d", (int)getpid());
  if (flags != 0) RET(CUDA_ERROR_INVALID_VALUE);
  const char *spec = getenv("FAKECUDA_FAULT");
  if (spec && strstr(spec, "init")) RET(CUDA_ERROR_NO_DEVICE);
  const char *want = getenv("FAKECUDA_DEVICE");
  if (!want || !*want) want = "h100";
  S.dev = NULL;
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
    if (!strcmp(want, devices[i].key)) S.dev = &devices[i];
  if (!S.dev) {
    note("FAKECUDA_DEVICE '%.32s' is none of a100, h100, h200, sm_75, sm_150", want);
    RET(CUDA_ERROR_NO_DEVICE);
  }
  /* NVIDIA's CUDA C++ guidelines: CUDA's state is not duplicated by fork,
  ** and any use of CUDA in a child after fork (before exec) is undefined
  ** behaviour. NVRTC 13 runs cuInit inside nvrtcCompileProgram, so a
  ** process that compiled and then forked hands its children exactly that.
  ** The real driver says nothing and may misbehave: a violation. */
  if (S.inited && S.init_pid != getpid())
    fc_violation("cuInit in process %d, a child forked after cuInit in process %d: the real "
                 "driver does not support CUDA in such a child", (int)getpid(), (int)S.init_pid);
  S.inited = 1, S.init_pid = getpid();
  RET(CUDA_SUCCESS);
}

/* An undocumented entry point NVRTC looks up when it finds libcuda.so.1
** (NVRTC 13 calls it during nvrtcCompileProgram, and crashes when the
** symbol is missing). The fake has no tables to export: an error, which
** NVRTC takes as "no driver features", as on a machine with no driver. */
API CUresult cuGetExportTable(const void **table, const CUuuid *id) {
  (void)id;
  if (table) *table = NULL;
  if (getenv("FAKECUDA_TRACE")) note("cuGetExportTable in process %d", (int)getpid());
  return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuDriverGetVersion(int *v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = 1;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", S.dev->name);
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  const fc_device *x = S.dev;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = x->major; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = x->minor; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = x->sms; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = x->smem_optin; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = DEFAULT_DYN_SMEM; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = x->smem_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = x->threads_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = x->blocks_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = x->regs_per_sm; break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = x->l2; break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = x->clock_khz; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = x->mem_clock_khz; break;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = x->bus_bits; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
  default:
    /* A real attribute the fake has no figure for: say so, never invent. */
    note("cuDeviceGetAttribute: attribute %d is not modelled", (int)a);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = S.dev->mem;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  if (!inited_here()) return CUDA_ERROR_NOT_INITIALIZED;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (!u) return CUDA_ERROR_INVALID_VALUE;
  /* fa4ecada: "fake cuda", then the device's key, so each fake has its own. */
  memset(u->bytes, 0, sizeof u->bytes);
  memcpy(u->bytes, "\xfa\x4e\xca\xda", 4);
  memcpy(u->bytes + 8, S.dev->key, strlen(S.dev->key));
  return CUDA_SUCCESS;
}

/* ---- Errors ---- */

static const struct { CUresult rc; const char *name, *text; } errors[] = {
  {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
  {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
  {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
  {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
  {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
   "no kernel image is available for execution on the device"},
  {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
  {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
  {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
  {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
   "an illegal memory access was encountered"},
  {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
   "too many resources requested for launch"},
  {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED",
   "context is destroyed"},
  {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static int error_index(CUresult rc) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].rc == rc) return (int)i;
  return -1;
}

/* As the real driver: an unknown code sets *s to NULL and fails. */
API CUresult cuGetErrorString(CUresult rc, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  int i = error_index(rc);
  *s = i < 0 ? NULL : errors[i].text;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult rc, const char **s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  int i = error_index(rc);
  *s = i < 0 ? NULL : errors[i].name;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- Contexts ---- */

/* What is still alive in the context when it goes: each one a violation. */
static void check_leaks(int id) {
  size_t bytes = 0, n = 0;
  for (size_t i = 0; i < S.nallocs; i++)
    if (S.allocs[i].live && S.allocs[i].ctx == id) bytes += S.allocs[i].size, n++;
  if (n) fc_violation("context %d destroyed with %zu allocation(s), %zu bytes, not freed", id,
                      n, bytes);
  n = 0;
  for (size_t i = 0; i < S.nmods; i++) n += S.mods[i]->live && S.mods[i]->ctx == id;
  if (n) fc_violation("context %d destroyed with %zu module(s) not unloaded", id, n);
  n = 0;
  for (size_t i = 0; i < S.nevents; i++) n += S.events[i]->live && S.events[i]->ctx == id;
  if (n) fc_violation("context %d destroyed with %zu event(s) not destroyed", id, n);
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  if (d != 0) RET(CUDA_ERROR_INVALID_DEVICE);
  if (!pctx) RET(CUDA_ERROR_INVALID_VALUE);
  if (!S.ctx.alive) {
    memset(&S.ctx, 0, sizeof S.ctx);
    S.ctx.alive = 1, S.ctx.id = ++S.next_ctx_id;
  }
  S.ctx.refs++;
  *pctx = (CUcontext)(intptr_t)S.ctx.id;
  RET(CUDA_SUCCESS);
}

API CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  if (d != 0) RET(CUDA_ERROR_INVALID_DEVICE);
  if (!S.ctx.alive || S.ctx.refs == 0) {
    fc_violation("cuDevicePrimaryCtxRelease: the primary context is not retained");
    RET(CUDA_ERROR_INVALID_CONTEXT);
  }
  if (--S.ctx.refs == 0) {
    check_leaks(S.ctx.id);
    S.ctx.alive = 0;
  }
  RET(CUDA_SUCCESS);
}

API CUresult cuCtxSetCurrent(CUcontext c) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  int id = (int)(intptr_t)c;
  if (id != 0 && (id != S.ctx.id || !S.ctx.alive)) {
    fc_violation("cuCtxSetCurrent: context %d is destroyed or was never made", id);
    RET(CUDA_ERROR_INVALID_CONTEXT);
  }
  cur_ctx = id;
  RET(CUDA_SUCCESS);
}

/* The thread's context stack, as the driver keeps it: cuCtxSetCurrent
** replaces its top (cur_ctx), push and pop move the rest. */
enum { CTX_STACK = 16 };
static __thread int ctx_stack[CTX_STACK], ctx_depth;

API CUresult cuCtxPushCurrent(CUcontext c) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  int id = (int)(intptr_t)c;
  if (id == 0 || id != S.ctx.id || !S.ctx.alive) {
    fc_violation("cuCtxPushCurrent: context %d is destroyed or was never made", id);
    RET(CUDA_ERROR_INVALID_CONTEXT);
  }
  if (ctx_depth == CTX_STACK) RET(CUDA_ERROR_OUT_OF_MEMORY);
  ctx_stack[ctx_depth++] = cur_ctx;
  cur_ctx = id;
  RET(CUDA_SUCCESS);
}

API CUresult cuCtxPopCurrent(CUcontext *out) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  if (cur_ctx == 0) RET(CUDA_ERROR_INVALID_CONTEXT);
  if (out) *out = (CUcontext)(intptr_t)cur_ctx;
  cur_ctx = ctx_depth ? ctx_stack[--ctx_depth] : 0;
  RET(CUDA_SUCCESS);
}

API CUresult cuCtxGetDevice(CUdevice *d) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc == CUDA_SUCCESS && !d) rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) *d = 0;
  RET(rc);
}

API CUresult cuCtxSynchronize(void) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc == CUDA_SUCCESS || rc == S.ctx.sticky) rc = wait_queue();
  RET(rc);
}

/* ---- Memory ---- */

API CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  if (!p || bytes == 0) RET(CUDA_ERROR_INVALID_VALUE);
  if (fault(F_ALLOC) || bytes > S.dev->mem - S.in_use) RET(CUDA_ERROR_OUT_OF_MEMORY);
  if (grow(&S.allocs, S.nallocs, &S.cap_allocs) != 0) RET(CUDA_ERROR_OUT_OF_MEMORY);
  fc_alloc *a = &S.allocs[S.nallocs++];
  memset(a, 0, sizeof *a);
  /* Addresses are never reused, so a stale pointer is always caught. */
  a->base = S.next_addr, a->size = bytes, a->ctx = cur_ctx, a->live = 1, a->fill = 0xA5;
  S.next_addr += (bytes + 511) / 512 * 512 + DEV_GAP;
  S.in_use += bytes;
  *p = a->base;
  RET(CUDA_SUCCESS);
}

API CUresult cuMemFree(CUdeviceptr p) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  fc_alloc *a = find_alloc(p, 0);
  if (!a || a->base != p) {
    fc_violation("cuMemFree(0x%llx): not an allocation's address", (unsigned long long)p);
    RET(CUDA_ERROR_INVALID_VALUE);
  }
  if (!a->live) {
    fc_violation("cuMemFree(0x%llx): freed twice", (unsigned long long)p);
    RET(CUDA_ERROR_INVALID_VALUE);
  }
  if (a->ctx != cur_ctx) fc_violation("cuMemFree(0x%llx): another context's memory",
                                      (unsigned long long)p);
  if (grow(&S.dead, S.ndead, &S.cap_dead) != 0) RET(CUDA_ERROR_OUT_OF_MEMORY);
  S.in_use -= a->size;
  free(a->host);
  a->host = NULL, a->live = 0;
  S.dead[S.ndead++] = *a;
  *a = S.allocs[--S.nallocs];   /* the live ones stay few: lookups stay short */
  RET(CUDA_SUCCESS);
}

API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  if (n == 0) RET(CUDA_SUCCESS);
  fc_alloc *a = range(dst, n, "cuMemcpyHtoD");
  if (!a || !src) RET(CUDA_ERROR_INVALID_VALUE);
  if ((rc = wait_queue()) != CUDA_SUCCESS) RET(rc);
  unsigned char *h = host_of(a);
  if (!h) RET(CUDA_ERROR_OUT_OF_MEMORY);
  memcpy(h + (dst - a->base), src, n);
  a->gen++;
  S.ctx.clock_ms += (double)n / 25e6;
  RET(CUDA_SUCCESS);
}

API CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  if (n == 0) RET(CUDA_SUCCESS);
  fc_alloc *a = range(src, n, "cuMemcpyDtoH");
  if (!a || !dst) RET(CUDA_ERROR_INVALID_VALUE);
  if ((rc = wait_queue()) != CUDA_SUCCESS) RET(rc);
  if (a->host) memcpy(dst, a->host + (src - a->base), n);
  else memset(dst, a->fill, n);
  S.ctx.clock_ms += (double)n / 25e6;
  RET(CUDA_SUCCESS);
}

static CUresult memset8(CUdeviceptr dst, unsigned char byte, size_t n, const char *call) {
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) return rc;
  if (n == 0) return CUDA_SUCCESS;
  fc_alloc *a = range(dst, n, call);
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  /* A fill of the whole buffer (the L2 flush, the poison) stays lazy. */
  if (dst == a->base && n == a->size) {
    free(a->host);
    a->host = NULL, a->fill = byte;
  } else {
    unsigned char *h = host_of(a);
    if (!h) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(h + (dst - a->base), byte, n);
  }
  a->gen++;
  S.ctx.clock_ms += (double)n / 2e9;
  return CUDA_SUCCESS;
}

API CUresult cuMemsetD8(CUdeviceptr dst, unsigned char byte, size_t n) {
  LOCK();
  RET(memset8(dst, byte, n, "cuMemsetD8"));
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char byte, size_t n, CUstream s) {
  (void)s;  /* one queue: the legacy stream */
  LOCK();
  RET(memset8(dst, byte, n, "cuMemsetD8Async"));
}

/* ---- Modules and functions ---- */

/* A CUfunction is (module index + 1) << 16 | kernel index: no allocation to
** leak, and a stale one is recognised. */
static fc_module *func_of(CUfunction f, int *kernel) {
  uintptr_t h = (uintptr_t)f;
  size_t m = (h >> 16);
  if (m == 0 || m > S.nmods) return NULL;
  fc_module *mod = S.mods[m - 1];
  *kernel = (int)(h & 0xffff);
  return *kernel < mod->cubin.nkernels ? mod : NULL;
}

static fc_module *module_of(CUmodule m) {
  uintptr_t i = (uintptr_t)m;
  return i >= 1 && i <= S.nmods ? S.mods[i - 1] : NULL;
}

API CUresult cuModuleLoadData(CUmodule *out, const void *image) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  if (!out || !image) RET(CUDA_ERROR_INVALID_VALUE);
  if (fault(F_LOAD)) RET(CUDA_ERROR_INVALID_IMAGE);
  fc_module *m = calloc(1, sizeof *m);
  fc_module **ms = realloc(S.mods, (S.nmods + 1) * sizeof *ms);
  if (!m || !ms) {
    free(m);
    if (ms) S.mods = ms;
    RET(CUDA_ERROR_OUT_OF_MEMORY);
  }
  S.mods = ms;
  char why[256];
  if ((rc = fc_cubin_read(image, &m->cubin, why, sizeof why)) != CUDA_SUCCESS) {
    note("cuModuleLoadData: %s", why);   /* the real driver would JIT PTX; fatune sends CUBINs */
    free(m);
    RET(rc);
  }
  /* A cubin runs on its own major version, from its minor up (sm_80 code on
  ** sm_86), never across majors. */
  int cm = m->cubin.sm / 10, cn = m->cubin.sm % 10;
  if (cm != S.dev->major || cn > S.dev->minor) {
    note("cuModuleLoadData: a cubin for sm_%d on an sm_%d%d device", m->cubin.sm,
         S.dev->major, S.dev->minor);
    fc_cubin_free(&m->cubin);
    free(m);
    RET(CUDA_ERROR_NO_BINARY_FOR_GPU);
  }
  m->max_dyn_smem = calloc((size_t)(m->cubin.nkernels ? m->cubin.nkernels : 1), sizeof(int));
  if (!m->max_dyn_smem) {
    fc_cubin_free(&m->cubin);
    free(m);
    RET(CUDA_ERROR_OUT_OF_MEMORY);
  }
  for (int i = 0; i < m->cubin.nkernels; i++) {
    int d = DEFAULT_DYN_SMEM - m->cubin.kernels[i].static_smem;
    m->max_dyn_smem[i] = d > 0 ? d : 0;
  }
  m->ctx = cur_ctx, m->live = 1;
  S.mods[S.nmods++] = m;
  *out = (CUmodule)(uintptr_t)S.nmods;
  RET(CUDA_SUCCESS);
}

API CUresult cuModuleUnload(CUmodule h) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  fc_module *m = module_of(h);
  if (!m || !m->live) {
    fc_violation("cuModuleUnload: module %p %s", (void *)h, m ? "unloaded twice" : "unknown");
    RET(CUDA_ERROR_INVALID_HANDLE);
  }
  m->live = 0;
  RET(CUDA_SUCCESS);
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule h, const char *name) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  fc_module *m = module_of(h);
  if (!m || !m->live) RET(CUDA_ERROR_INVALID_HANDLE);
  if (!f || !name) RET(CUDA_ERROR_INVALID_VALUE);
  for (int i = 0; i < m->cubin.nkernels; i++)
    if (!strcmp(m->cubin.kernels[i].name, name)) {
      *f = (CUfunction)(((uintptr_t)h << 16) | (uintptr_t)i);
      RET(CUDA_SUCCESS);
    }
  RET(CUDA_ERROR_NOT_FOUND);
}

/* The function's module, alive, in the current context: else why not. */
static CUresult live_func(CUfunction f, fc_module **m, fc_kernel **k, int *ki) {
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) return rc;
  *m = func_of(f, ki);
  if (!*m) return CUDA_ERROR_INVALID_HANDLE;
  if (!(*m)->live || (*m)->ctx != cur_ctx) {
    fc_violation("function %p used after its module was unloaded", (void *)f);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *k = &(*m)->cubin.kernels[*ki];
  return CUDA_SUCCESS;
}

API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  LOCK();
  fc_module *m;
  fc_kernel *k;
  int ki;
  CUresult rc = live_func(f, &m, &k, &ki);
  if (rc != CUDA_SUCCESS) RET(rc);
  switch (a) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    /* Documented: this plus the static shared memory may not pass the
    ** device's opt-in limit. */
    if (v < 0 || v + k->static_smem > S.dev->smem_optin) RET(CUDA_ERROR_INVALID_VALUE);
    m->max_dyn_smem[ki] = v;
    RET(CUDA_SUCCESS);
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    RET(v < -1 || v > 100 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
  default:
    note("cuFuncSetAttribute: attribute %d is not modelled", (int)a);
    RET(CUDA_ERROR_NOT_SUPPORTED);
  }
}

/* Registers are given out per warp in units of 256 (8 per thread). */
static int regs_per_block(const fc_kernel *k, int threads) {
  int per_warp = (k->registers * 32 + 255) / 256 * 256;
  return per_warp * ((threads + 31) / 32);
}

/* The most threads a block of this kernel can have. */
static int max_threads(const fc_kernel *k) {
  int t = k->max_threads < 1024 ? k->max_threads : 1024;
  while (t > 32 && regs_per_block(k, t) > S.dev->regs_per_sm) t -= 32;
  return t;
}

API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  LOCK();
  fc_module *m;
  fc_kernel *k;
  int ki;
  CUresult rc = live_func(f, &m, &k, &ki);
  if (rc != CUDA_SUCCESS) RET(rc);
  if (!v) RET(CUDA_ERROR_INVALID_VALUE);
  switch (a) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = max_threads(k); break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = k->static_smem; break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = k->registers; break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = m->max_dyn_smem[ki]; break;
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = m->cubin.sm; break;
  default:
    note("cuFuncGetAttribute: attribute %d is not modelled", (int)a);
    RET(CUDA_ERROR_NOT_SUPPORTED);
  }
  RET(CUDA_SUCCESS);
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int threads,
                                                         size_t dyn_smem) {
  LOCK();
  fc_module *m;
  fc_kernel *k;
  int ki;
  CUresult rc = live_func(f, &m, &k, &ki);
  if (rc != CUDA_SUCCESS) RET(rc);
  if (!n || threads <= 0) RET(CUDA_ERROR_INVALID_VALUE);
  const fc_device *d = S.dev;
  if (threads > max_threads(k)) {
    *n = 0;
    RET(CUDA_SUCCESS);
  }
  int by_threads = d->threads_per_sm / ((threads + 31) / 32 * 32);
  int by_regs = k->registers ? d->regs_per_sm / regs_per_block(k, threads) : d->blocks_per_sm;
  /* From sm_80 on the driver reserves 1 KB of shared memory per block. */
  size_t smem = dyn_smem + (size_t)k->static_smem + (d->major >= 8 ? 1024 : 0);
  int by_smem = smem ? (int)((size_t)d->smem_per_sm / smem) : d->blocks_per_sm;
  int b = d->blocks_per_sm;
  if (by_threads < b) b = by_threads;
  if (by_regs < b) b = by_regs;
  if (by_smem < b) b = by_smem;
  *n = b;
  RET(CUDA_SUCCESS);
}

/* The parameter bytes of a launch, given either way: kernelParams (one
** pointer per parameter, each read for the parameter's size) or extra (one
** buffer, CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE). fatune's kernels take one
** parameter, the fa_params block, so a copy of param_bytes is the block. */
static CUresult params_of(const fc_kernel *k, void **kp, void **extra, unsigned char *buf) {
  if (kp && extra) return CUDA_ERROR_INVALID_VALUE;   /* documented: one or the other */
  memset(buf, 0, 4096);
  if (k->param_bytes > 4096) return CUDA_ERROR_INVALID_VALUE;
  if (kp) {
    for (int i = 0; i < k->nparams; i++) {
      if (!kp[i]) return CUDA_ERROR_INVALID_VALUE;
      memcpy(buf + k->param_offset[i], kp[i], (size_t)k->param_size[i]);
    }
    return CUDA_SUCCESS;
  }
  if (!extra) return k->nparams ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  const void *ptr = NULL;
  size_t size = (size_t)-1;
  for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = extra[i + 1];
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(const size_t *)extra[i + 1];
    else return CUDA_ERROR_INVALID_VALUE;
  }
  /* The documentation does not say what a wrong size gets. The real
  ** driver takes a buffer too small for the kernel's parameters (seen on an
  ** H200, driver 580, by test_cuda_contract), and the kernel then reads
  ** what lies past it: taken here too, zeros past it, and a violation. */
  if (!ptr || size == (size_t)-1) return CUDA_ERROR_INVALID_VALUE;
  if (size < (size_t)k->param_bytes)
    fc_violation("a launch's parameter buffer of %zu bytes, the kernel's parameters %d", size,
                 k->param_bytes);
  memcpy(buf, ptr, size < (size_t)k->param_bytes ? size : (size_t)k->param_bytes);
  return CUDA_SUCCESS;
}

/* The launch configuration against the device and the kernel: the error
** the real driver returns, or CUDA_SUCCESS. */
static CUresult check_config(const fc_module *m, int ki, const unsigned g[3], const unsigned b[3],
                             unsigned smem) {
  const fc_kernel *k = &m->cubin.kernels[ki];
  if (!g[0] || !g[1] || !g[2] || g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
  if (!threads || b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (smem > (unsigned)m->max_dyn_smem[ki] || smem + (unsigned)k->static_smem >
      (unsigned)S.dev->smem_optin) {
    note("cuLaunchKernel %s: %u bytes of dynamic shared memory, %d static; the function's "
         "limit is %d (cuFuncSetAttribute), the device's %d", k->name, smem, k->static_smem,
         m->max_dyn_smem[ki], S.dev->smem_optin);
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* More threads than the registers allow: the driver refuses with "too
  ** many resources requested for launch". Beyond __launch_bounds__ (the
  ** function's MAX_THREADS_PER_BLOCK) the same code is assumed; the
  ** documentation names none. */
  if ((int)threads > max_threads(k)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem, CUstream s, void **kp,
                            void **extra) {
  (void)s;
  LOCK();
  fc_module *m;
  fc_kernel *k;
  int ki;
  CUresult rc = live_func(f, &m, &k, &ki);
  if (rc != CUDA_SUCCESS) RET(rc);
  const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  static unsigned char params[4096];
  if ((rc = check_config(m, ki, g, b, smem)) != CUDA_SUCCESS ||
      (rc = params_of(k, kp, extra, params)) != CUDA_SUCCESS)
    RET(rc);
  int mode = fault(F_LAUNCH);
  if (mode == M_HANG) {
    S.ctx.hung = 1;
    RET(CUDA_SUCCESS);
  }
  char why[300];
  rc = mode == M_ILLEGAL ? CUDA_ERROR_ILLEGAL_ADDRESS
                         : fc_exec(k, params, g, b, smem, mode == M_WRONG, why, sizeof why);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) {
    note("%s: its outputs are left as they were", why);
    rc = CUDA_SUCCESS;
  } else if (rc == CUDA_ERROR_ILLEGAL_ADDRESS) {
    if (mode != M_ILLEGAL) note("%s", why);
    S.ctx.sticky = rc;   /* reported by the next call, as from a kernel in flight */
    RET(CUDA_SUCCESS);
  } else if (rc != CUDA_SUCCESS) {
    note("%s", why);
    RET(rc);
  }
  S.ctx.clock_ms += fc_exec_ms(k, params, S.dev->sms, S.dev->clock_khz);
  RET(CUDA_SUCCESS);
}

/* ---- Events ---- */

static fc_event *event_of(CUevent e) {
  for (size_t i = 0; i < S.nevents; i++)
    if ((CUevent)S.events[i] == e) return S.events[i];
  return NULL;
}

API CUresult cuEventCreate(CUevent *out, unsigned flags) {
  LOCK();
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS) RET(rc);
  if (!out || flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                  CU_EVENT_INTERPROCESS))
    RET(CUDA_ERROR_INVALID_VALUE);
  fc_event *e = calloc(1, sizeof *e);
  fc_event **es = realloc(S.events, (S.nevents + 1) * sizeof *es);
  if (!e || !es) {
    free(e);
    if (es) S.events = es;
    RET(CUDA_ERROR_OUT_OF_MEMORY);
  }
  S.events = es;
  e->ctx = cur_ctx, e->live = 1, e->flags = (int)flags;
  S.events[S.nevents++] = e;
  *out = (CUevent)e;
  RET(CUDA_SUCCESS);
}

static CUresult live_event(CUevent h, fc_event **e, const char *call) {
  *e = event_of(h);
  if (!*e) return CUDA_ERROR_INVALID_HANDLE;
  if (!(*e)->live) {
    fc_violation("%s: event %p used after cuEventDestroy", call, (void *)h);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if ((*e)->ctx != S.ctx.id || !S.ctx.alive) {
    fc_violation("%s: event %p of context %d, destroyed", call, (void *)h, (*e)->ctx);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent h, CUstream s) {
  (void)s;
  LOCK();
  fc_event *e;
  CUresult rc = ctx_ok();
  if (rc != CUDA_SUCCESS || (rc = live_event(h, &e, "cuEventRecord")) != CUDA_SUCCESS) RET(rc);
  /* Documented: the event and the stream must share a context. */
  if (e->ctx != cur_ctx) {
    fc_violation("cuEventRecord: event of context %d recorded in context %d", e->ctx, cur_ctx);
    RET(CUDA_ERROR_INVALID_HANDLE);
  }
  e->recorded = 1, e->rec_ctx = cur_ctx, e->t_ms = S.ctx.clock_ms;
  RET(CUDA_SUCCESS);
}

API CUresult cuEventSynchronize(CUevent h) {
  LOCK();
  fc_event *e;
  CUresult rc = live_event(h, &e, "cuEventSynchronize");
  if (rc != CUDA_SUCCESS) RET(rc);
  RET(wait_queue());
}

static CUresult elapsed(float *ms, CUevent h0, CUevent h1) {
  LOCK();
  fc_event *a, *b;
  CUresult rc;
  if ((rc = live_event(h0, &a, "cuEventElapsedTime")) != CUDA_SUCCESS ||
      (rc = live_event(h1, &b, "cuEventElapsedTime")) != CUDA_SUCCESS)
    RET(rc);
  if (!ms) RET(CUDA_ERROR_INVALID_VALUE);
  /* Documented: unrecorded or DISABLE_TIMING events give INVALID_HANDLE,
  ** events not yet complete NOT_READY. */
  if (!a->recorded || !b->recorded || (a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
    RET(CUDA_ERROR_INVALID_HANDLE);
  if (a->rec_ctx != b->rec_ctx) {
    fc_violation("cuEventElapsedTime: events recorded on contexts %d and %d", a->rec_ctx,
                 b->rec_ctx);
    RET(CUDA_ERROR_INVALID_HANDLE);
  }
  if (S.ctx.hung) RET(CUDA_ERROR_NOT_READY);
  if (S.ctx.sticky) RET(S.ctx.sticky);
  *ms = (float)(b->t_ms - a->t_ms);
  RET(CUDA_SUCCESS);
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }

/* CUDA 13's cuda.h maps cuEventElapsedTime to the _v2 name; the driver has
** both (CUDA 12's has the plain one alone, defined above). */
#ifdef cuEventElapsedTime
#undef cuEventElapsedTime
API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b);
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
#endif

API CUresult cuEventDestroy(CUevent h) {
  LOCK();
  fc_event *e = event_of(h);
  if (!e) RET(CUDA_ERROR_INVALID_HANDLE);
  if (!e->live) {
    fc_violation("cuEventDestroy: event %p destroyed twice", (void *)h);
    RET(CUDA_ERROR_INVALID_HANDLE);
  }
  e->live = 0;
  RET(CUDA_SUCCESS);
}

/* ---- Tensor maps ---- */

/* The bytes per element of a tensor map's data type (the packed 4- and
** 6-bit types count as 1 here; only their own rules below differ); 0 when
** the type is unknown. */
static int tmap_elem_bytes(CUtensorMapDataType t) {
  switch (t) {
  case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
  case CU_TENSOR_MAP_DATA_TYPE_UINT16: case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
  case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
  case CU_TENSOR_MAP_DATA_TYPE_UINT32: case CU_TENSOR_MAP_DATA_TYPE_INT32:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
  case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32: case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
  case CU_TENSOR_MAP_DATA_TYPE_UINT64: case CU_TENSOR_MAP_DATA_TYPE_INT64:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
  default: return 0;
  }
}

/* Why a tiled tensor map is refused, or NULL: the requirements cuda.h lists
** for cuTensorMapEncodeTiled, for the non-packed data types (the fake
** refuses the packed ones). */
static const char *tmap_refusal(const CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                const void *addr, const cuuint64_t *dim, const cuuint64_t *stride,
                                const cuuint32_t *box, const cuuint32_t *estride,
                                CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  const int esize = tmap_elem_bytes(type);
  if (!map) return "no tensor map";
  if (!esize) return "unknown or packed data type";
  if (rank < 1 || rank > 5) return "rank not in 1..5";
  if (il != CU_TENSOR_MAP_INTERLEAVE_NONE && il != CU_TENSOR_MAP_INTERLEAVE_16B &&
      il != CU_TENSOR_MAP_INTERLEAVE_32B)
    return "unknown interleave";
  if (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) return "interleave with rank under 3";
  if ((uintptr_t)addr % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16))
    return il == CU_TENSOR_MAP_INTERLEAVE_32B ? "address not 32-byte aligned (interleave 32B)"
                                               : "address not 16-byte aligned";
  if (!dim || !box || !estride || (rank > 1 && !stride)) return "a NULL array";
  for (cuuint32_t i = 0; i < rank; i++) {
    if (dim[i] == 0 || dim[i] > (1ull << 32)) return "a dimension not in 1..2^32";
    if (box[i] == 0 || box[i] > 256) return "a box dimension not in 1..256";
    if (estride[i] == 0 || estride[i] > 8) return "an element stride not in 1..8";
  }
  for (cuuint32_t i = 0; i + 1 < rank; i++) {
    if (stride[i] % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16))
      return "a stride not a multiple of 16 (32 with interleave 32B)";
    if (stride[i] >= (1ull << 40)) return "a stride not under 2^40";
  }
  if (sw < CU_TENSOR_MAP_SWIZZLE_NONE || sw > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B)
    return "unknown swizzle";
  if (il == CU_TENSOR_MAP_INTERLEAVE_32B && sw != CU_TENSOR_MAP_SWIZZLE_32B)
    return "interleave 32B without swizzle 32B";
  if (il == CU_TENSOR_MAP_INTERLEAVE_NONE) {
    const unsigned long long inner = (unsigned long long)box[0] * (unsigned)esize;
    const unsigned span = sw == CU_TENSOR_MAP_SWIZZLE_NONE  ? 0
                          : sw == CU_TENSOR_MAP_SWIZZLE_32B ? 32
                          : sw == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : 128;
    if (inner % 16) return "the box's inner dimension not a multiple of 16 bytes";
    if (span && inner > span) return "the box's inner dimension wider than the swizzle span";
  }
  if (l2 < CU_TENSOR_MAP_L2_PROMOTION_NONE || l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    return "unknown L2 promotion";
  if (oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
      oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    return "unknown out-of-bounds fill";
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA &&
      (type <= CU_TENSOR_MAP_DATA_TYPE_INT64))
    return "NaN fill for an integer type";
  return NULL;
}

/* The fake's own encoding: a tag, the address, the type, rank and swizzle,
** then dims, box and strides, in the 128 bytes; nothing reads it back yet
** (the fake runs no TMA kernel). */
API CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                    void *addr, const cuuint64_t *dim, const cuuint64_t *stride,
                                    const cuuint32_t *box, const cuuint32_t *estride,
                                    CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  LOCK();
  if (!inited_here()) RET(CUDA_ERROR_NOT_INITIALIZED);
  if (S.dev->major < 9) RET(CUDA_ERROR_NOT_SUPPORTED);
  const char *why = tmap_refusal(map, type, rank, addr, dim, stride, box, estride, il, sw, l2, oob);
  /* cuda.h asks for a 64-byte aligned map; the real driver encodes one
  ** that is not (seen on an H200, driver 580), which a kernel that takes
  ** it by address then reads wrongly: encoded here too, and a violation. */
  if (!why && (uintptr_t)map % 64)
    fc_violation("a tensor map encoded at an address off 64-byte alignment");
  if (why) {
    note("cuTensorMapEncodeTiled: %s", why);
    RET(CUDA_ERROR_INVALID_VALUE);
  }
  cuuint64_t w[16] = {0x70616d54414d54ull /* "TMATmap" */, (cuuint64_t)(uintptr_t)addr,
                      (cuuint64_t)type | (cuuint64_t)rank << 8 | (cuuint64_t)sw << 16};
  for (cuuint32_t i = 0; i < rank; i++) {
    w[3 + i] = dim[i];
    w[8 + i] = box[i];
    if (i < 3 && i + 1 < rank) w[13 + i] = stride[i];   /* the first three */
  }
  memcpy(map, w, sizeof w);
  RET(CUDA_SUCCESS);
}
