/*
** nvrtc_compile.h
** Compile CUDA source to CUBIN with NVRTC, and read the ptxas resource report.
** No GPU is needed. Safe to call from several threads at once.
*/
#ifndef NVRTC_COMPILE_H
#define NVRTC_COMPILE_H

#include <stddef.h>

typedef struct nvrtc_result {
  int ok;                  /* 1 when a CUBIN was produced */
  char *cubin;             /* malloc'ed, cubin_size bytes, or NULL */
  size_t cubin_size;
  char *log;               /* full NVRTC log, malloc'ed, never NULL after a call */
  char error[256];         /* first error line, "" when ok */
  int registers;           /* from the ptxas report; -1 when unknown */
  int spill_store_bytes, spill_load_bytes;
  int smem_static_bytes;
  int stack_bytes;         /* stack frame */
  double compile_ms;       /* wall time of nvrtcCompileProgram + CUBIN fetch */
} nvrtc_result;

/* Compile `source` (kernel entry `entry`, extern "C") for `arch` ("sm_90").
** Returns 0 when NVRTC ran (see out->ok for the result), -1 when NVRTC could
** not even start (message in out->error). out is always safe to free. */
int nvrtc_compile(const char *source, const char *entry, const char *arch,
                  nvrtc_result *out);
void nvrtc_result_free(nvrtc_result *r);

/* 1 when NVRTC accepts the architecture name, else 0. */
int nvrtc_arch_supported(const char *arch);
/* "13.0", for the compile cache key. */
const char *nvrtc_version_string(void);

#endif
