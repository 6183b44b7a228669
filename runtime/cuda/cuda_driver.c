/*
** cuda_driver.c
** The CUDA driver, loaded with dlopen at run time. fatune never links
** libcuda, so the same binary starts on a machine with no driver and says so.
**
** The library is opened and cuInit run once per process (pthread_once); the
** outcome and its one-line reason are kept for every later probe. The
** library is never closed: CUBINs loaded later need it for the process's life.
*/
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "fa_proc.h"

/* Our own pointer types, from the types in <cuda.h>. */
typedef CUresult (*cuInit_fn)(unsigned int);
typedef CUresult (*cuDeviceGetCount_fn)(int *);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *, int);
typedef CUresult (*cuDeviceGetName_fn)(char *, int, CUdevice);
typedef CUresult (*cuDeviceGetAttribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuGetErrorString_fn)(CUresult, const char **);
typedef CUresult (*cuDeviceGetUuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*cuDeviceTotalMem_fn)(size_t *, CUdevice);

static struct {
  void *lib;
  cuInit_fn init;
  cuDeviceGetCount_fn get_count;
  cuDeviceGet_fn get;
  cuDeviceGetName_fn get_name;
  cuDeviceGetAttribute_fn get_attr;
  cuGetErrorString_fn err_str;
  cuGetErrorString_fn err_name;
  cuDeviceGetUuid_fn get_uuid;
  cuDeviceTotalMem_fn total_mem;
  cudrv_api api;
  int ready;            /* 1 when cuInit succeeded */
  char why[256];        /* the reason when it did not */
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void put_msg(char *msg, size_t msglen, const char *fmt, ...) {
  va_list ap;
  if (msg == NULL || msglen == 0) return;
  va_start(ap, fmt);
  vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
}

/* "invalid device ordinal", or the number when the driver has no name for it. */
static const char *cu_error(CUresult rc, char *buf, size_t len) {
  const char *s = NULL;
  if (drv.err_str && drv.err_str(rc, &s) == CUDA_SUCCESS && s) return s;
  snprintf(buf, len, "CUDA error %d", (int)rc);
  return buf;
}

/* dlsym `name` into the function pointer at `slot` (of `size` bytes); the
** reason in drv.why when the symbol is missing. ISO C has no conversion from
** void * to a function pointer, so the bits are copied; POSIX guarantees
** the two have the same representation. */
static int load_sym(void *slot, size_t size, const char *name) {
  const char *e;
  void *p;
  dlerror();
  p = dlsym(drv.lib, name);
  if (p != NULL && size == sizeof p) {
    memcpy(slot, &p, size);
    return 0;
  }
  e = dlerror();
  snprintf(drv.why, sizeof drv.why, "CUDA driver too old or broken: %s not found (%s)",
           name, e ? e : "NULL symbol");
  return -1;
}

#define LOAD(field, name) \
  if (load_sym(&drv.field, sizeof drv.field, name) != 0) return

/* The first of two names the driver has (a newer _v2 entry, else the old). */
static int load_either(void *slot, size_t size, const char *name, const char *old) {
  void *p;
  dlerror();
  p = dlsym(drv.lib, name);
  if (p == NULL) return load_sym(slot, size, old);
  memcpy(slot, &p, size);
  return 0;
}

/* An entry point only newer drivers have: NULL in the slot when absent. */
static void load_optional(void *slot, size_t size, const char *name) {
  void *p = dlsym(drv.lib, name);
  memset(slot, 0, size);
  if (p != NULL && size == sizeof p) memcpy(slot, &p, size);
}

static int load_api(void) {
  cudrv_api *a = &drv.api;
  load_optional(&a->tmap_encode_tiled, sizeof a->tmap_encode_tiled, "cuTensorMapEncodeTiled");
  return load_sym(&a->device_get, sizeof a->device_get, "cuDeviceGet") ||
         load_sym(&a->ctx_retain, sizeof a->ctx_retain, "cuDevicePrimaryCtxRetain") ||
         load_sym(&a->ctx_release, sizeof a->ctx_release, "cuDevicePrimaryCtxRelease_v2") ||
         load_sym(&a->ctx_set, sizeof a->ctx_set, "cuCtxSetCurrent") ||
         load_sym(&a->ctx_sync, sizeof a->ctx_sync, "cuCtxSynchronize") ||
         load_sym(&a->ctx_push, sizeof a->ctx_push, "cuCtxPushCurrent_v2") ||
         load_sym(&a->ctx_pop, sizeof a->ctx_pop, "cuCtxPopCurrent_v2") ||
         load_sym(&a->ctx_get_device, sizeof a->ctx_get_device, "cuCtxGetDevice") ||
         load_sym(&a->mem_alloc, sizeof a->mem_alloc, "cuMemAlloc_v2") ||
         load_sym(&a->mem_free, sizeof a->mem_free, "cuMemFree_v2") ||
         load_sym(&a->htod, sizeof a->htod, "cuMemcpyHtoD_v2") ||
         load_sym(&a->dtoh, sizeof a->dtoh, "cuMemcpyDtoH_v2") ||
         load_sym(&a->memset8, sizeof a->memset8, "cuMemsetD8_v2") ||
         load_sym(&a->memset8_async, sizeof a->memset8_async, "cuMemsetD8Async") ||
         load_sym(&a->module_load, sizeof a->module_load, "cuModuleLoadData") ||
         load_sym(&a->module_unload, sizeof a->module_unload, "cuModuleUnload") ||
         load_sym(&a->module_fn, sizeof a->module_fn, "cuModuleGetFunction") ||
         load_sym(&a->fn_set_attr, sizeof a->fn_set_attr, "cuFuncSetAttribute") ||
         load_sym(&a->fn_get_attr, sizeof a->fn_get_attr, "cuFuncGetAttribute") ||
         load_sym(&a->launch, sizeof a->launch, "cuLaunchKernel") ||
         load_sym(&a->event_create, sizeof a->event_create, "cuEventCreate") ||
         load_sym(&a->event_record, sizeof a->event_record, "cuEventRecord") ||
         load_sym(&a->event_sync, sizeof a->event_sync, "cuEventSynchronize") ||
         load_either(&a->event_elapsed, sizeof a->event_elapsed, "cuEventElapsedTime_v2",
                     "cuEventElapsedTime") ||
         load_sym(&a->event_destroy, sizeof a->event_destroy, "cuEventDestroy_v2") ||
         load_sym(&a->occupancy, sizeof a->occupancy,
                  "cuOccupancyMaxActiveBlocksPerMultiprocessor") ||
         load_either(&drv.get_uuid, sizeof drv.get_uuid, "cuDeviceGetUuid_v2",
                     "cuDeviceGetUuid") ||
         load_sym(&drv.total_mem, sizeof drv.total_mem, "cuDeviceTotalMem_v2") ||
         load_sym(&drv.err_name, sizeof drv.err_name, "cuGetErrorName")
           ? -1 : 0;
}

static void drv_init(void) {
  char buf[32];
  CUresult rc;
  drv.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (drv.lib == NULL) {
    /* Absent is the common case; anything else (a broken install) is shown. */
    const char *e = dlerror();
    if (e == NULL || strstr(e, "No such file") != NULL)
      snprintf(drv.why, sizeof drv.why, "no CUDA driver: libcuda.so.1 not found");
    else
      snprintf(drv.why, sizeof drv.why, "CUDA driver libcuda.so.1 could not be loaded: %s", e);
    return;
  }
  LOAD(err_str, "cuGetErrorString");
  LOAD(init, "cuInit");
  LOAD(get_count, "cuDeviceGetCount");
  LOAD(get, "cuDeviceGet");
  LOAD(get_name, "cuDeviceGetName");
  LOAD(get_attr, "cuDeviceGetAttribute");
  if (load_api() != 0) return;
  rc = drv.init(0);
  if (rc == CUDA_ERROR_NO_DEVICE) {
    snprintf(drv.why, sizeof drv.why, "CUDA driver found but no GPU: %s",
             cu_error(rc, buf, sizeof buf));
    return;
  }
  if (rc != CUDA_SUCCESS) {
    snprintf(drv.why, sizeof drv.why, "CUDA driver present but cuInit failed: %s",
             cu_error(rc, buf, sizeof buf));
    return;
  }
  drv.ready = 1;
}

int cudrv_probe(char *msg, size_t msglen) {
  char buf[32];
  CUresult rc;
  int count = 0;
  put_msg(msg, msglen, "%s", "");
  pthread_once(&drv_once, drv_init);
  if (!drv.ready) {
    put_msg(msg, msglen, "%s", drv.why);
    return 0;
  }
  rc = drv.get_count(&count);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "CUDA driver found but cuDeviceGetCount failed: %s",
            cu_error(rc, buf, sizeof buf));
    return 0;
  }
  if (count <= 0) {
    put_msg(msg, msglen, "CUDA driver found but no GPU: cuDeviceGetCount gave 0");
    return 0;
  }
  return count;
}

/* One attribute into *v; -1 with msg naming the attribute on failure. */
static int get_attr(int *v, CUdevice_attribute a, const char *aname, CUdevice dev,
                    char *msg, size_t msglen) {
  char buf[32];
  CUresult rc = drv.get_attr(v, a, dev);
  if (rc == CUDA_SUCCESS) return 0;
  put_msg(msg, msglen, "cuDeviceGetAttribute(%s): %s", aname, cu_error(rc, buf, sizeof buf));
  return -1;
}

#define GET_ATTR(field, attr) \
  if (get_attr(&info->field, attr, #attr, dev, msg, msglen) != 0) return -1

int cudrv_device_query(int ordinal, cudrv_device_info *info, char *msg, size_t msglen) {
  char buf[32];
  CUdevice dev;
  CUresult rc;
  int count;
  if (info == NULL) {
    put_msg(msg, msglen, "cudrv_device_query: NULL info");
    return -1;
  }
  memset(info, 0, sizeof *info);
  info->ordinal = ordinal;
  count = cudrv_probe(msg, msglen);
  if (count == 0) return -1;
  if (ordinal < 0 || ordinal >= count) {
    put_msg(msg, msglen, "no CUDA device %d (there are %d)", ordinal, count);
    return -1;
  }
  rc = drv.get(&dev, ordinal);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "cuDeviceGet(%d): %s", ordinal, cu_error(rc, buf, sizeof buf));
    return -1;
  }
  rc = drv.get_name(info->name, (int)sizeof info->name, dev);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "cuDeviceGetName(%d): %s", ordinal, cu_error(rc, buf, sizeof buf));
    return -1;
  }
  info->name[sizeof info->name - 1] = '\0';
  GET_ATTR(cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  GET_ATTR(cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  GET_ATTR(sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  GET_ATTR(smem_per_block_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  GET_ATTR(max_threads_per_block, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  GET_ATTR(l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  GET_ATTR(clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  rc = drv.total_mem(&info->total_mem, dev);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "cuDeviceTotalMem(%d): %s", ordinal, cu_error(rc, buf, sizeof buf));
    return -1;
  }
  CUuuid u;
  rc = drv.get_uuid(&u, dev);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "cuDeviceGetUuid(%d): %s", ordinal, cu_error(rc, buf, sizeof buf));
    return -1;
  }
  const unsigned char *b = (const unsigned char *)u.bytes;
  snprintf(info->uuid, sizeof info->uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return 0;
}

const cudrv_api *cudrv_api_get(void) {
  pthread_once(&drv_once, drv_init);
  return drv.ready ? &drv.api : NULL;
}

const char *cudrv_error(int rc, const char *call, char *buf, size_t len) {
  const char *name = NULL, *text = NULL;
  if (drv.err_name) drv.err_name((CUresult)rc, &name);
  if (drv.err_str) drv.err_str((CUresult)rc, &text);
  snprintf(buf, len, "%s: %s (%s)", call, name ? name : "CUDA error", text ? text : "?");
  return buf;
}

/* What the probing child sends back. */
typedef struct probe_answer {
  int ok;
  cudrv_device_info info;
  char msg[256];
} probe_answer;

int cudrv_current_device(int *ordinal, char *msg, size_t msglen) {
  char buf[32];
  CUdevice cur, dev;
  int count = cudrv_probe(msg, msglen);
  if (count == 0) return -1;
  CUresult rc = drv.api.ctx_get_device(&cur);
  if (rc != CUDA_SUCCESS) {
    put_msg(msg, msglen, "no current CUDA context on this thread: cuCtxGetDevice: %s",
            cu_error(rc, buf, sizeof buf));
    return -1;
  }
  for (int i = 0; i < count; i++)
    if (drv.get(&dev, i) == CUDA_SUCCESS && dev == cur) {
      *ordinal = i;
      return 0;
    }
  put_msg(msg, msglen, "the current CUDA context's device is none of the %d devices", count);
  return -1;
}

const char *cudrv_target_arch(const cudrv_device_info *d, char *buf, size_t n) {
  snprintf(buf, n, "sm_%d%d", d->cc_major, d->cc_minor);
  return buf;
}

int cudrv_probe_isolated(cudrv_device_info *info, char *msg, size_t msglen) {
  return cudrv_probe_isolated_at(0, info, msg, msglen);
}

int cudrv_probe_isolated_at(int ordinal, cudrv_device_info *info, char *msg, size_t msglen) {
  int fds[2];
  probe_answer a;
  memset(&a, 0, sizeof a);
  if (pipe(fds) != 0) {
    put_msg(msg, msglen, "cannot probe the CUDA driver: pipe: %s", strerror(errno));
    return 0;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    put_msg(msg, msglen, "cannot probe the CUDA driver: fork: %s", strerror(errno));
    close(fds[0]), close(fds[1]);
    return 0;
  }
  if (pid == 0) {
    fa_proc_child_signals();
    close(fds[0]);
    a.ok = cudrv_device_query(ordinal, &a.info, a.msg, sizeof a.msg) == 0;
    _exit(write(fds[1], &a, sizeof a) == (ssize_t)sizeof a ? 0 : 1);
  }
  close(fds[1]);
  size_t got = 0;
  while (got < sizeof a) {
    ssize_t k = read(fds[0], (char *)&a + got, sizeof a - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (got != sizeof a) {
    put_msg(msg, msglen, "the CUDA driver probe crashed (%s)",
            WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "no answer");
    return 0;
  }
  put_msg(msg, msglen, "%s", a.msg);
  if (a.ok) *info = a.info;
  return a.ok;
}
