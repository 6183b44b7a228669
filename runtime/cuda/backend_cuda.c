/*
** backend_cuda.c
** The cuda backend: NVRTC to CUBIN on the CPU, the Driver API (loaded with
** dlopen by cuda_driver.c) for everything on the GPU. The device is touched
** lazily, by the first call that needs it, so a process that only compiles
** (the tuner's parent, which forks workers) never initialises CUDA. Every
** driver call is checked and its failure names the call. After a sticky
** error (an illegal address, say) the context is unusable: the backend
** says so (backend_poisoned) and its owner should end the process.
*/
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "cuda_api.h"
#include "nvrtc_compile.h"
#include "par.h"

#define TIMING_MAX_REPS 2000
#define TIMING_MIN_REPS 5

typedef struct cuda_backend {
  fa_backend base;
  cudrv_device_info info;
  char arch[16];
  pthread_mutex_t mu;       /* guards the lazy context */
  const cudrv_api *api;     /* NULL until the first device call */
  CUcontext ctx;
  CUdevice dev;             /* whose primary context ctx is, retained once */
  CUdeviceptr flush;        /* twice the L2: written between timed launches */
  size_t flush_bytes;
  int poisoned;
} cuda_backend;

/* One CUBIN with every entry its launches run (an op's kernels): fn[i] is
** entry[i] of gen_entries. */
struct fa_program {
  int nfn;
  char *entry[GEN_MAX_LAUNCHES];
  unsigned char *cubin;
  size_t cubin_size;
  CUmodule mod;             /* loaded lazily, per process */
  CUfunction fn[GEN_MAX_LAUNCHES];
  int smem_opt_in[GEN_MAX_LAUNCHES];  /* each function's dynamic shared memory limit now */
};

static void program_free(fa_program *p) {
  for (int i = 0; i < p->nfn; i++) free(p->entry[i]);
  free(p->cubin);
  free(p);
}

/* A program for kernel k, without its CUBIN yet; NULL when out of memory. */
static fa_program *program_new(const gen_kernel *k) {
  fa_program *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  const char *names[GEN_MAX_LAUNCHES];
  const int n = gen_entries(k, names);
  for (int i = 0; i < n; i++) {
    p->nfn = i + 1;
    if (!(p->entry[i] = strdup(names[i]))) {
      program_free(p);
      return NULL;
    }
  }
  return p;
}

static cuda_backend *self(fa_backend *b) { return (cuda_backend *)b; }

/* Sticky errors leave the context unusable for the life of the process. */
static int sticky(CUresult rc) {
  return rc == CUDA_ERROR_ILLEGAL_ADDRESS || rc == CUDA_ERROR_LAUNCH_FAILED ||
         rc == CUDA_ERROR_MISALIGNED_ADDRESS || rc == CUDA_ERROR_HARDWARE_STACK_ERROR ||
         rc == CUDA_ERROR_ILLEGAL_INSTRUCTION || rc == CUDA_ERROR_INVALID_ADDRESS_SPACE ||
         rc == CUDA_ERROR_INVALID_PC || rc == CUDA_ERROR_ASSERT ||
         rc == CUDA_ERROR_LAUNCH_TIMEOUT || rc == CUDA_ERROR_ECC_UNCORRECTABLE;
}

/* What a failed driver call means to the caller. */
static fa_status status_of(CUresult rc) {
  switch (rc) {
  case CUDA_ERROR_OUT_OF_MEMORY: return FA_ENOMEM;
  case CUDA_ERROR_NO_DEVICE: case CUDA_ERROR_INVALID_DEVICE: case CUDA_ERROR_NOT_INITIALIZED:
  case CUDA_ERROR_DEINITIALIZED: case CUDA_ERROR_STUB_LIBRARY:
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: case CUDA_ERROR_DEVICE_UNAVAILABLE:
    return FA_ENODEV;
  case CUDA_ERROR_INVALID_IMAGE: case CUDA_ERROR_NO_BINARY_FOR_GPU:
  case CUDA_ERROR_INVALID_PTX: case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    return FA_ECOMPILE;
  default: return FA_ELAUNCH;
  }
}

/* 0 on success; else the message, the poison flag, and the status. */
static int ck(cuda_backend *c, CUresult rc, const char *call, char *err, size_t errlen) {
  if (rc == CUDA_SUCCESS) return 0;
  if (sticky(rc)) c->poisoned = 1;
  cudrv_error((int)rc, call, err, errlen);
  return status_of(rc);
}

/* The primary context of the backend's device, retained on first use. */
static int ensure_context(cuda_backend *c, char *err, size_t errlen) {
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (!c->api) {
    char why[256];
    const cudrv_api *api = NULL;
    if (cudrv_probe(why, sizeof why) <= 0 || !(api = cudrv_api_get())) {
      snprintf(err, errlen, "%s", why);
      rc = FA_ENODEV;
    } else if (!(rc = ck(c, api->device_get(&c->dev, c->info.ordinal), "cuDeviceGet", err,
                         errlen)) &&
               !(rc = ck(c, api->ctx_retain(&c->ctx, c->dev), "cuDevicePrimaryCtxRetain", err,
                         errlen))) {
      c->api = api;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static int ensure_device(cuda_backend *c, char *err, size_t errlen) {
  int rc = ensure_context(c, err, errlen);
  /* The primary context is current per thread: make it ours too. */
  if (rc == 0) rc = ck(c, c->api->ctx_set(c->ctx), "cuCtxSetCurrent", err, errlen);
  return rc;
}

/* A library call's scope: the device's context pushed over the caller's,
** popped on leaving, so the caller's current context stays as it was. */
static int cuda_enter(fa_backend *b, char *err, size_t errlen) {
  cuda_backend *c = self(b);
  int rc = ensure_context(c, err, errlen);
  if (rc == 0) rc = ck(c, c->api->ctx_push(c->ctx), "cuCtxPushCurrent", err, errlen);
  return rc;
}

static void cuda_leave(fa_backend *b) {
  cuda_backend *c = self(b);
  CUcontext popped;
  c->api->ctx_pop(&popped);  /* cannot fail after a push on this thread */
}

static int cuda_sync(fa_backend *b, char *err, size_t errlen) {
  cuda_backend *c = self(b);
  int rc = ensure_device(c, err, errlen);
  return rc ? rc : ck(c, c->api->ctx_sync(), "cuCtxSynchronize", err, errlen);
}

/* The primary context is released as it was retained, once: the last
** release in the process destroys it, and whatever is still in it. */
static void cuda_close(fa_backend *b) {
  cuda_backend *c = self(b);
  if (c->api && c->flush) c->api->mem_free(c->flush);
  if (c->api) c->api->ctx_release(c->dev);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- Compile ---- */

typedef struct compile_job {
  const gen_kernel *const *kernels;
  nvrtc_result *res;
  const char *arch;
} compile_job;

/* The device's target, or the arch-specific one of the same GPU (sm_90a on
** sm_90) that a kernel written for it names; NULL when the kernel is
** written for another GPU. */
static const char *target_for(const gen_kernel *k, const char *device) {
  const size_t n = strlen(device);
  if (!k->arch[0]) return device;
  return !strncmp(k->arch, device, n) && (!k->arch[n] || !strcmp(k->arch + n, "a")) ? k->arch
                                                                                    : NULL;
}

static void compile_one(size_t i, void *ud) {
  compile_job *j = ud;
  const gen_kernel *k = j->kernels[i];
  const char *arch = target_for(k, j->arch);
  if (!arch) {
    nvrtc_result *r = &j->res[i];
    memset(r, 0, sizeof *r);
    snprintf(r->error, sizeof r->error, "%s is written for %s; this GPU is %s", k->name,
             k->arch, j->arch);
    return;
  }
  nvrtc_compile(k->source, k->entry, arch, &j->res[i]);
}

static int cuda_compile(fa_backend *b, const gen_kernel *const *kernels, size_t n, int jobs,
                        fa_build *out, char *err, size_t errlen) {
  cuda_backend *c = self(b);
  memset(out, 0, n * sizeof *out);
  nvrtc_result *res = calloc(n ? n : 1, sizeof *res);
  if (!res) {
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  compile_job j = {kernels, res, c->arch};
  if (par_for(n, jobs, compile_one, &j, NULL, NULL) != 0) {
    free(res);
    snprintf(err, errlen, "cannot start the compile threads");
    return FA_EINTERNAL;
  }
  for (size_t i = 0; i < n; i++) {
    nvrtc_result *r = &res[i];
    fa_build *o = &out[i];
    o->compile_ms = r->compile_ms;
    o->registers = r->registers;
    o->spill_bytes = r->spill_store_bytes + r->spill_load_bytes;
    o->stack_bytes = r->stack_bytes;
    o->smem_static_bytes = r->smem_static_bytes;
    fa_program *p = r->ok ? program_new(kernels[i]) : NULL;
    if (!r->ok || !p) {
      o->log = strdup(r->ok ? "out of memory" : r->log ? r->log : r->error);
    } else {
      p->cubin = (unsigned char *)r->cubin, p->cubin_size = r->cubin_size;
      r->cubin = NULL;
      o->prog = p;
    }
    nvrtc_result_free(r);
  }
  free(res);
  return 0;
}

static void cuda_program_free(fa_backend *b, fa_program *p) {
  cuda_backend *c = self(b);
  if (p->mod && c->api) c->api->module_unload(p->mod);
  program_free(p);
}

/* The module in this process with each of its functions, and function
** fn's shared memory opt-in for this size. */
static int load(cuda_backend *c, fa_program *p, int fn, unsigned smem, char *err,
                size_t errlen) {
  int rc = ensure_device(c, err, errlen);
  if (rc != 0) return rc;
  const cudrv_api *a = c->api;
  if (fn < 0 || fn >= p->nfn) {
    snprintf(err, errlen, "%s: launch of entry %d, of %d", p->entry[0], fn, p->nfn);
    return FA_EINVAL;
  }
  if (!p->mod) {
    if ((rc = ck(c, a->module_load(&p->mod, p->cubin), "cuModuleLoadData", err, errlen)))
      return rc;
    /* A function's dynamic shared memory limit starts at 48 KB less its
    ** static shared memory, not at 48 KB: read it rather than assume it. */
    for (int i = 0; i < p->nfn; i++)
      if ((rc = ck(c, a->module_fn(&p->fn[i], p->mod, p->entry[i]), "cuModuleGetFunction",
                   err, errlen)) ||
          (rc = ck(c, a->fn_get_attr(&p->smem_opt_in[i],
                                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, p->fn[i]),
                   "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", err, errlen))) {
        a->module_unload(p->mod);
        p->mod = NULL;
        return rc;
      }
  }
  if ((int)smem > p->smem_opt_in[fn]) {
    if ((rc = ck(c, a->fn_set_attr(p->fn[fn], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   (int)smem),
                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", err, errlen)))
      return rc;
    p->smem_opt_in[fn] = (int)smem;
  }
  return 0;
}

/* ---- Memory ---- */

static int cuda_alloc(fa_backend *b, size_t bytes, void **ptr, char *err, size_t errlen) {
  cuda_backend *c = self(b);
  CUdeviceptr d = 0;
  int rc = ensure_device(c, err, errlen);
  if (rc || (rc = ck(c, c->api->mem_alloc(&d, bytes ? bytes : 1), "cuMemAlloc", err, errlen)))
    return rc;
  *ptr = (void *)(uintptr_t)d;
  return 0;
}

static void cuda_free(fa_backend *b, void *ptr) {
  cuda_backend *c = self(b);
  if (c->api) c->api->mem_free((CUdeviceptr)(uintptr_t)ptr);
}

static int cuda_copy(fa_backend *b, void *dst, const void *src, size_t bytes, int to_device,
                     char *err, size_t errlen) {
  cuda_backend *c = self(b);
  int rc = ensure_device(c, err, errlen);
  if (rc != 0) return rc;
  if (to_device)
    return ck(c, c->api->htod((CUdeviceptr)(uintptr_t)dst, src, bytes), "cuMemcpyHtoD", err,
              errlen);
  return ck(c, c->api->dtoh(dst, (CUdeviceptr)(uintptr_t)src, bytes), "cuMemcpyDtoH", err,
            errlen);
}

static int cuda_fill(fa_backend *b, void *dst, unsigned char byte, size_t bytes, char *err,
                     size_t errlen) {
  cuda_backend *c = self(b);
  int rc = ensure_device(c, err, errlen);
  if (rc != 0) return rc;
  return ck(c, c->api->memset8((CUdeviceptr)(uintptr_t)dst, byte, bytes), "cuMemsetD8", err,
            errlen);
}

/* ---- Launch and time ---- */

/* The CTAs of a persistent launch: as many as the device holds at once,
** at most the tiles (grid[0]). */
static int persistent_ctas(cuda_backend *c, const fa_program *prog, const gen_launch *s,
                           unsigned *out, char *err, size_t errlen) {
  int per_sm = 0;
  int rc = ck(c, c->api->occupancy(&per_sm, prog->fn[s->fn], (int)s->block[0], s->smem_bytes),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor", err, errlen);
  if (rc != 0) return rc;
  unsigned long long slots = (unsigned long long)(per_sm > 0 ? per_sm : 1) *
                             (unsigned long long)(c->info.sm_count > 0 ? c->info.sm_count : 1);
  *out = slots < s->grid[0] ? (unsigned)slots : s->grid[0];
  return 0;
}

static int launch_on(cuda_backend *c, const fa_program *prog, const gen_launch *s,
                     const fa_params *params, void *stream, char *err, size_t errlen) {
  void *args[1] = {(void *)params};
  unsigned gx = s->grid[0];
  if (s->persistent) {
    int rc = persistent_ctas(c, prog, s, &gx, err, errlen);
    if (rc != 0) return rc;
  }
  return ck(c, c->api->launch(prog->fn[s->fn], gx, s->grid[1], s->grid[2], s->block[0],
                              s->block[1], s->block[2], s->smem_bytes, (CUstream)stream, args,
                              NULL),
            "cuLaunchKernel", err, errlen);
}

static int launch_async(cuda_backend *c, const fa_program *prog, const gen_launch *s,
                        const fa_params *params, char *err, size_t errlen) {
  return launch_on(c, prog, s, params, NULL, err, errlen);
}

static int cuda_launch(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                       const fa_params *params, const fa_run_opts *opts, fa_counters *ctr,
                       char *err, size_t errlen) {
  (void)ctr;  /* no counters on a GPU */
  cuda_backend *c = self(b);
  fa_program *p = (fa_program *)prog;  /* the lazy module is per process */
  int rc = load(c, p, shape->fn, shape->smem_bytes, err, errlen);
  if (rc || (rc = launch_on(c, p, shape, params, opts ? opts->stream : NULL, err, errlen)))
    return rc;
  if (opts && opts->async) return 0;
  return ck(c, c->api->ctx_sync(), "cuCtxSynchronize (after the kernel)", err, errlen);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double at(const float *sorted, int n, double q) {
  return sorted[(int)(q * (n - 1) + 0.5)];
}

/* Every function of the n launches loaded, each with the shared memory of
** its launches. */
static int load_all(cuda_backend *c, fa_program *p, const gen_launch *shapes, int n, char *err,
                    size_t errlen) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < n; i++)
    rc = load(c, p, shapes[i].fn, shapes[i].smem_bytes, err, errlen);
  return rc;
}

/* The n launches, in order, on the default stream. */
static int launch_all_async(cuda_backend *c, const fa_program *prog, const gen_launch *shapes,
                            int n, const fa_params *params, char *err, size_t errlen) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < n; i++) rc = launch_async(c, prog, &shapes[i], params, err, errlen);
  return rc;
}

/* Runs the launches until the budget is spent: each time after a write of
** twice the L2 so that no input is still cached, all of them timed together
** between two events. The caller warms up (attn_time, checking each warm-up
** run's output). */
static int cuda_time(fa_backend *b, const fa_program *prog, const gen_launch *shapes,
                     int nshapes, const fa_params *params, int budget_ms, fa_timing *t,
                     char *err, size_t errlen) {
  cuda_backend *c = self(b);
  fa_program *p = (fa_program *)prog;
  memset(t, 0, sizeof *t);
  int rc = load_all(c, p, shapes, nshapes, err, errlen);
  if (rc != 0) return rc;
  const cudrv_api *a = c->api;
  if (!c->flush) {
    size_t bytes = 2 * (size_t)(c->info.l2_bytes > 0 ? c->info.l2_bytes : 64 << 20);
    if ((rc = ck(c, a->mem_alloc(&c->flush, bytes), "cuMemAlloc (L2 flush buffer)", err,
                 errlen)))
      return rc;
    c->flush_bytes = bytes;
  }
  float *ms = malloc(TIMING_MAX_REPS * sizeof *ms);
  CUevent e0 = NULL, e1 = NULL;
  int n = 0;
  rc = FA_ENOMEM;
  if (!ms) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  if ((rc = ck(c, a->event_create(&e0, CU_EVENT_DEFAULT), "cuEventCreate", err, errlen)) ||
      (rc = ck(c, a->event_create(&e1, CU_EVENT_DEFAULT), "cuEventCreate", err, errlen)))
    goto done;
  float spent = 0;
  while (n < TIMING_MAX_REPS && (n < TIMING_MIN_REPS || spent < (float)budget_ms)) {
    if ((rc = ck(c, a->memset8_async(c->flush, (unsigned char)n, c->flush_bytes, NULL),
                 "cuMemsetD8Async (L2 flush)", err, errlen)) ||
        (rc = ck(c, a->event_record(e0, NULL), "cuEventRecord", err, errlen)) ||
        (rc = launch_all_async(c, p, shapes, nshapes, params, err, errlen)) ||
        (rc = ck(c, a->event_record(e1, NULL), "cuEventRecord", err, errlen)) ||
        (rc = ck(c, a->event_sync(e1), "cuEventSynchronize (after the kernel)", err,
                 errlen)) ||
        (rc = ck(c, a->event_elapsed(&ms[n], e0, e1), "cuEventElapsedTime", err, errlen)))
      goto done;
    spent += ms[n++];
  }
  qsort(ms, (size_t)n, sizeof *ms, cmp_float);
  t->reps = n;
  t->min_us = ms[0] * 1e3;
  t->p20_us = at(ms, n, 0.2) * 1e3;
  t->median_us = at(ms, n, 0.5) * 1e3;
  t->p80_us = at(ms, n, 0.8) * 1e3;
  rc = 0;
done:
  if (e0) a->event_destroy(e0);
  if (e1) a->event_destroy(e1);
  free(ms);
  return rc;
}

static int cuda_occupancy(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                          int *ctas_per_sm, char *err, size_t errlen) {
  cuda_backend *c = self(b);
  fa_program *p = (fa_program *)prog;
  int rc = load(c, p, shape->fn, shape->smem_bytes, err, errlen);
  if (rc != 0) return rc;
  return ck(c, c->api->occupancy(ctas_per_sm, p->fn[shape->fn], (int)shape->block[0], shape->smem_bytes),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor", err, errlen);
}

static int cuda_poisoned(fa_backend *b) { return self(b)->poisoned; }

static int cuda_blob(fa_backend *b, const fa_program *prog, const void **data, size_t *size) {
  (void)b;
  *data = prog->cubin, *size = prog->cubin_size;
  return 0;
}

static int cuda_load_program(fa_backend *b, const gen_kernel *k, const void *data, size_t size,
                             fa_program **prog, char *err, size_t errlen) {
  (void)b;
  fa_program *p = program_new(k);
  if (p) p->cubin = malloc(size ? size : 1);
  if (!p || !p->cubin) {
    if (p) program_free(p);
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  memcpy(p->cubin, data, size);
  p->cubin_size = size;
  *prog = p;
  return 0;
}

static void cuda_cache_key(fa_backend *b, const char **target, const char **compiler,
                           const char **options) {
  *target = self(b)->arch, *compiler = nvrtc_version_string();
  *options = NVRTC_OPTIONS;  /* with -arch=target */
}

static int cuda_tmap(fa_backend *b, const fa_tmap_desc *d, fa_tmap *map, char *err,
                     size_t errlen) {
  cuda_backend *c = self(b);
  _Static_assert(sizeof(CUtensorMap) == sizeof(fa_tmap), "fa_tmap holds a CUtensorMap");
  int rc;
  if (c->info.cc_major < 9) {
    snprintf(err, errlen, "tensor maps need compute capability 9.0 or later; %s is %d.%d",
             c->info.name, c->info.cc_major, c->info.cc_minor);
    return FA_ENODEV;
  }
  if ((rc = ensure_device(c, err, errlen)) != 0) return rc;
  if (!c->api->tmap_encode_tiled) {
    snprintf(err, errlen, "the CUDA driver has no cuTensorMapEncodeTiled (CUDA 12 or later)");
    return FA_ENODEV;
  }
  static const CUtensorMapSwizzle swz[] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                                           CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B};
  cuuint64_t dims[4], strides[3];
  cuuint32_t box[4], estr[4];
  for (int i = 0; i < d->rank; i++) {
    dims[i] = d->dims[i], box[i] = d->box[i], estr[i] = 1;
    if (i + 1 < d->rank) strides[i] = d->strides[i];
  }
  /* Zeros out of bounds (no NaN request); the bits copied do not depend on
  ** the type, so 16-bit elements of either kind are UINT16, fp8 UINT8. */
  CUresult cr = c->api->tmap_encode_tiled(
      (CUtensorMap *)map,
      d->elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
      : d->elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      (cuuint32_t)d->rank, (void *)d->base, dims, strides, box, estr,
      CU_TENSOR_MAP_INTERLEAVE_NONE,
      swz[d->swizzle == 0 ? 0 : d->swizzle == 32 ? 1 : d->swizzle == 64 ? 2 : 3],
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  /* What backend_tmap's checks let through and the driver refuses is the caller's too. */
  if (cr == CUDA_ERROR_INVALID_VALUE) {
    cudrv_error((int)cr, "cuTensorMapEncodeTiled", err, errlen);
    return FA_EINVAL;
  }
  return ck(c, cr, "cuTensorMapEncodeTiled", err, errlen);
}

static const backend_ops cuda_ops = {
  .name = "cuda", .has_counters = 0, .close = cuda_close, .compile = cuda_compile,
  .program_free = cuda_program_free, .alloc = cuda_alloc, .free = cuda_free, .copy = cuda_copy,
  .fill = cuda_fill, .launch = cuda_launch, .time = cuda_time, .occupancy = cuda_occupancy,
  .poisoned = cuda_poisoned, .blob = cuda_blob, .load = cuda_load_program,
  .cache_key = cuda_cache_key, .enter = cuda_enter, .leave = cuda_leave, .sync = cuda_sync,
  .tmap = cuda_tmap};

int backend_cuda_open(const cudrv_device_info *info, fa_backend **out, char *err,
                      size_t errlen) {
  cuda_backend *c = calloc(1, sizeof *c);
  if (!c || pthread_mutex_init(&c->mu, NULL) != 0) {
    free(c);
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  c->base.ops = &cuda_ops;
  c->info = *info;
  snprintf(c->arch, sizeof c->arch, "sm_%d%d", info->cc_major, info->cc_minor);
  *out = &c->base;
  return 0;
}

const fa_device *backend_device(const fa_backend *b) {
  return b->ops == &cuda_ops ? &((const cuda_backend *)b)->info : NULL;
}
