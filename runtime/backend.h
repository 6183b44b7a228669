/*
** backend.h
** What the tuner drives, whatever runs the kernels: compile, allocate, copy,
** launch, counters. Two backends sit behind it: cuda (NVRTC and the Driver
** API) and emu (the CPU emulator). Device pointers are void *; on emu they
** are host memory. Every call returns 0, or an fa_status (fa_status.h)
** with a one-line message in err; a backend may be used from several
** threads at once.
*/
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>

#include "cuda_driver.h"
#include "emu.h"
#include "fa_status.h"
#include "gen.h"

typedef struct fa_backend fa_backend;
typedef struct fa_program fa_program;   /* one compiled kernel */

/* The emulator's exact counts; a backend without counters leaves them 0
** and says so with backend_has_counters. */
typedef fa_emu_counters fa_counters;

/* What became of one kernel: prog is NULL when it did not compile, and
** log says why. */
typedef struct fa_build {
  fa_program *prog;
  char *log;
  double compile_ms;
  /* cuda: ptxas's report for the device; emu: -1 and zeros */
  int registers, spill_bytes, stack_bytes, smem_static_bytes;
} fa_build;

/* GPU time of one launch, over repeated launches with the L2 flushed. */
typedef struct fa_timing {
  double median_us, min_us, p20_us, p80_us;
  int reps;
} fa_timing;

typedef struct fa_run_opts {
  emu_schedule schedule;    /* emu: the order threads run between barriers */
  unsigned long long seed;  /* emu: for the random and skew schedules */
  int threads;              /* emu: OS threads sharing the CTAs */
  unsigned char smem_fill;  /* emu: shared memory's bytes when a CTA starts */
  const fa_emu_range *extra;  /* emu: caller's buffers the kernel may touch too */
  int nextra;
  void *stream;             /* cuda: the CUstream to launch on (NULL: the default) */
  int async;                /* cuda: return after the launch, without waiting */
} fa_run_opts;

/* name: "emu", "cuda" or "auto" (cuda when a GPU is usable, else emu; the
** reason for the fallback is left in note). */
int backend_open(const char *name, fa_backend **out, char *note, size_t notelen,
                 char *err, size_t errlen);
/* The same on GPU `ordinal` (backend_open takes GPU 0). backend_open probes
** the driver in a child process, so that a process that forks workers
** stays free of CUDA; with probe_here set the driver is probed in this
** process: a library's caller (a framework) may have CUDA initialised
** already, and a forked child of such a process cannot initialise it. */
int backend_open_device(const char *name, int ordinal, int probe_here, fa_backend **out,
                        char *note, size_t notelen, char *err, size_t errlen);
void backend_close(fa_backend *b);
const char *backend_name(const fa_backend *b);   /* "emu" or "cuda" */
int backend_has_counters(const fa_backend *b);

/* Compile n kernels on up to jobs threads; out[i] for kernels[i]. A kernel
** that fails never stops the others; a status means nothing could be tried. */
int backend_compile(fa_backend *b, const gen_kernel *const *kernels, size_t n, int jobs,
                    fa_build *out, char *err, size_t errlen);
void backend_build_free(fa_backend *b, fa_build *build);

/* The bytes a compiled program loads from (CUBIN; on emu, the shared object,
** kept only after backend_keep_objects): what a compile cache stores. */
int backend_program_blob(fa_backend *b, const fa_program *prog, const void **data,
                         size_t *size);
/* emu: keep each compiled object's bytes (cuda always has its CUBIN). */
void backend_keep_objects(fa_backend *b, int on);
/* A program for kernel k from bytes backend_program_blob gave. */
int backend_load(fa_backend *b, const gen_kernel *k, const void *data, size_t size,
                 fa_program **prog, char *err, size_t errlen);
/* What a cached program depends on besides its source: "sm_90" or "host";
** the compiler's version; its options. */
void backend_cache_key(fa_backend *b, const char **target, const char **compiler,
                       const char **options);

int backend_alloc(fa_backend *b, size_t bytes, void **ptr, char *err, size_t errlen);
void backend_free(fa_backend *b, void *ptr);
int backend_upload(fa_backend *b, void *dst, const void *src, size_t bytes, char *err,
                   size_t errlen);
int backend_download(fa_backend *b, void *dst, const void *src, size_t bytes, char *err,
                     size_t errlen);
int backend_fill(fa_backend *b, void *dst, unsigned char byte, size_t bytes, char *err,
                 size_t errlen);

/* A tiled TMA tensor map over a device buffer, as cuTensorMapEncodeTiled
** takes it (CUDA Driver API, "Tensor Map Object Management"): dims and box
** innermost first, strides in bytes of dims 1..rank-1, element strides 1,
** no interleave, out-of-bounds elements read as zeros. */
typedef struct fa_tmap_desc {
  const void *base;              /* device pointer, 16-byte aligned */
  int elem_bytes;                /* 2 (f16, bf16) or 4 (f32) */
  int rank;                      /* 2..4 */
  unsigned long long dims[4];    /* elements per dimension */
  unsigned long long strides[3]; /* bytes between consecutive indices of dims 1..rank-1 */
  unsigned box[4];               /* elements per dimension copied at once, 1..256 */
  int swizzle;                   /* 0 (none), 32, 64 or 128: bytes of the swizzle span */
} fa_tmap_desc;

/* Encode d into *map for the kernels' fa_params.tmap; FA_EINVAL with a
** message for arguments the hardware refuses, FA_ENODEV on a backend or
** driver without TMA. */
int backend_tmap(fa_backend *b, const fa_tmap_desc *d, fa_tmap *map, char *err,
                 size_t errlen);

/* Launch and wait. Counters, where the backend has them, are added to ctr
** (may be NULL). */
int backend_launch(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                   const fa_params *params, const fa_run_opts *opts, fa_counters *ctr,
                   char *err, size_t errlen);

/* Time a kernel: its nshapes launches (an op's, in order) run again and
** again for about budget_ms, after the caller's warm-up (attn_time), each
** repetition timed whole; FA_ENODEV on a backend that cannot (the
** emulator's times are no GPU's). */
int backend_time(fa_backend *b, const fa_program *prog, const gen_launch *shapes,
                 int nshapes, const fa_params *params, int budget_ms, fa_timing *t,
                 char *err, size_t errlen);

/* CTAs of this kernel that fit on one multiprocessor; -1 where unknown. */
int backend_occupancy(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                      int *ctas_per_sm, char *err, size_t errlen);

/* A caller's scope (the library's calls): cuda pushes its device's context
** on enter and pops it on leave, leaving the calling thread's context as
** it was; every other backend does nothing. leave only after an enter
** that succeeded, on the same thread. */
int backend_enter(fa_backend *b, char *err, size_t errlen);
void backend_leave(fa_backend *b);
/* Wait for everything launched on the device (all streams). */
int backend_sync(fa_backend *b, char *err, size_t errlen);

/* 1 after an error that leaves the device unusable in this process (a
** sticky CUDA error): the process should end, a fresh one carry on. */
int backend_poisoned(fa_backend *b);

/* The GPU of a cuda backend, or NULL for another backend. */
const cudrv_device_info *backend_cuda_device(const fa_backend *b);

#endif
