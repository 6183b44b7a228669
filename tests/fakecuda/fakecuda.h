/*
** fakecuda.h
** The fake CUDA driver's modules: the cubin reader (fc_cubin.c), the
** attention kernels run on the CPU (fc_exec.c; the serving ones,
** fc_serve.c), and what they share with the entry points (fc_api.c):
** device memory, contract violations.
*/
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>

#include <cuda.h>

#include "fa_params.h"

#define FC_MAX_PARAMS 64
#define FC_NAME_MAX 256

/* One kernel of a cubin, as the driver would read it. */
typedef struct fc_kernel {
  char name[FC_NAME_MAX];
  int nparams;
  int param_offset[FC_MAX_PARAMS];  /* by ordinal */
  int param_size[FC_MAX_PARAMS];
  int param_bytes;                  /* EIATTR_CBANK_PARAM_SIZE */
  int registers;
  int static_smem;                  /* .nv.shared.<name> */
  int max_threads;                  /* __launch_bounds__ (EIATTR_MAX_THREADS), else 1024 */
} fc_kernel;

typedef struct fc_cubin {
  int sm;                           /* 80 for sm_80 */
  int nkernels;
  fc_kernel *kernels;
} fc_cubin;

/* Read a cubin image: 0, or a CUresult (CUDA_ERROR_INVALID_IMAGE) with the
** reason in why. The image's size is not given to cuModuleLoadData: the ELF
** header says where its section table ends. */
CUresult fc_cubin_read(const void *image, fc_cubin *out, char *why, size_t whylen);
void fc_cubin_free(fc_cubin *c);

/* A violation of the driver's contract that the real driver would not
** report (a leak, a double free): on stderr, and counted, so that a test
** run against the fake fails. */
void fc_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The host bytes behind device range [p, p + n) of a live allocation of the
** current context, for writing when `write` (the allocation's contents then
** change); NULL when the range is not inside one. */
void *fc_mem_map(CUdeviceptr p, size_t n, int write);

/* The write generation of the allocation holding p: the contents changed
** when it did. */
unsigned long long fc_mem_gen(CUdeviceptr p);

/* Run kernel k (its name says which attention kernel) with its parameter
** block. CUDA_SUCCESS, CUDA_ERROR_ILLEGAL_ADDRESS when it would touch memory
** outside every allocation, or CUDA_ERROR_NOT_SUPPORTED for a kernel the
** fake cannot run (why says so). `garbage` writes wrong numbers instead. */
CUresult fc_exec(const fc_kernel *k, const void *params, const unsigned grid[3],
                 const unsigned block[3], unsigned smem, int garbage, char *why, size_t whylen);

/* A wrong number that validation must reject, deterministic: what a
** launch with `garbage` writes in place of element i. */
double fc_junk(size_t i);

/* The serving kernels (fc_serve.c): 1 when k is one (a variable-length
** batch's forward kernel, the forward pass over a KV cache, a decoding
** launch), run with parameter block p, its outcome in *rc; 0 when not. */
int fc_serve_exec(const fc_kernel *k, const fa_params *p, int garbage, CUresult *rc, char *why,
                  size_t whylen);

/* The time such a launch takes, in ms: a deterministic function of the
** kernel and the problem, never a measurement. */
double fc_exec_ms(const fc_kernel *k, const void *params, int sm_count, int clock_khz);

#endif
