/*
** nvrtc_compile.h
** Compile CUDA source to CUBIN with NVRTC, and read the ptxas resource report.
** No GPU is needed. Safe to call from several threads at once.
*/
#ifndef NVRTC_COMPILE_H
#define NVRTC_COMPILE_H

#include <stddef.h>

#include "backend.h"

/* A compile's result is the backend interface's own (backend.h). */
typedef fa_compiled nvrtc_result;

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
/* The options nvrtc_compile passes besides -arch, and all of them as one
** string: the compile cache's key (the report comes with each entry). */
#define NVRTC_OPT_STD "--std=c++17"
#define NVRTC_OPT_REPORT "--ptxas-options=-v"
#define NVRTC_OPTIONS NVRTC_OPT_STD " " NVRTC_OPT_REPORT

/* The newest sm_ number NVRTC compiles for (121 for sm_121), 0 if unknown. */
int nvrtc_newest_arch(void);

#endif
