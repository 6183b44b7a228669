/*
** cuda_api.h
** The CUDA driver entry points the cuda backend calls, typed by <cuda.h>,
** loaded from libcuda.so.1 by cuda_driver.c. Only the files that talk to
** the driver include this.
*/
#ifndef CUDA_API_H
#define CUDA_API_H

#include <cuda.h>

#include "cuda_driver.h"

struct cudrv_api {
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*ctx_retain)(CUcontext *, CUdevice);
  CUresult (*ctx_release)(CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*ctx_sync)(void);
  CUresult (*ctx_push)(CUcontext);
  CUresult (*ctx_pop)(CUcontext *);
  CUresult (*ctx_get_device)(CUdevice *);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*memset8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*module_load)(CUmodule *, const void *);
  CUresult (*module_unload)(CUmodule);
  CUresult (*module_fn)(CUfunction *, CUmodule, const char *);
  CUresult (*fn_set_attr)(CUfunction, CUfunction_attribute, int);
  CUresult (*fn_get_attr)(int *, CUfunction_attribute, CUfunction);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*event_create)(CUevent *, unsigned);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_sync)(CUevent);
  CUresult (*event_elapsed)(float *, CUevent, CUevent);
  CUresult (*event_destroy)(CUevent);
  CUresult (*occupancy)(int *, CUfunction, int, size_t);
  /* NULL on a driver without TMA (before CUDA 12): the only optional entry. */
  CUresult (*tmap_encode_tiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
};

#endif
