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
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#include "cuda_driver.h"

/* Our own pointer types, from the types in <cuda.h>. */
typedef CUresult (*cuInit_fn)(unsigned int);
typedef CUresult (*cuDeviceGetCount_fn)(int *);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *, int);
typedef CUresult (*cuDeviceGetName_fn)(char *, int, CUdevice);
typedef CUresult (*cuDeviceGetAttribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*cuGetErrorString_fn)(CUresult, const char **);

static struct {
  void *lib;
  cuInit_fn init;
  cuDeviceGetCount_fn get_count;
  cuDeviceGet_fn get;
  cuDeviceGetName_fn get_name;
  cuDeviceGetAttribute_fn get_attr;
  cuGetErrorString_fn err_str;
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
  return 0;
}
