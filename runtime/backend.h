/*
** backend.h
** What the tuner drives, whatever runs the kernels: compile, allocate, copy,
** launch, counters. Two backends sit behind it: cuda (NVRTC and the Driver
** API) and emu (the CPU emulator). Device pointers are void *; on emu they
** are host memory. Every call returns 0, or an fa_status (fa_status.h)
** with a one-line message in err; a backend may be used from several
** threads at once.
**
** It is the runtime's one interface: the layers above it (db, lib, tuner)
** see no backend's header or type (runtime/emu and runtime/cuda are
** private to the runtime), only the neutral descriptions here: the device,
** the counters, a compile for a GPU target without a device.
*/
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>

#include "fa_counters.h"
#include "fa_params.h"
#include "fa_status.h"
#include "gen.h"

typedef struct fa_backend fa_backend;
typedef struct fa_program fa_program;   /* one compiled kernel */

/* A GPU as the driver describes it (the cuda backend's). */
typedef struct fa_device {
  char name[256];
  char uuid[48];              /* GPU-xxxxxxxx-xxxx-..., as nvidia-smi prints it */
  int cc_major, cc_minor;     /* compute capability */
  int sm_count;
  int smem_per_block_optin;   /* bytes */
  int max_threads_per_block;
  int l2_bytes;
  int clock_khz;
  size_t total_mem;           /* bytes */
  int ordinal;                /* the device's index */
} fa_device;

/* Exact counts of one launch (fa_counters.h), on a backend that counts
** (the emulator); a backend without counters leaves them 0 and says so with
** backend_has_counters. */

/* Host memory [lo, hi) a kernel may touch besides its own buffers. */
typedef struct fa_range {
  unsigned long long lo, hi;
} fa_range;

/* The order a backend that runs the threads itself (emu) runs them
** between barriers. */
typedef enum fa_schedule {
  FA_SCHED_FORWARD, FA_SCHED_REVERSE, FA_SCHED_RANDOM, FA_SCHED_SKEW
} fa_schedule;
/* "forward", "reverse", "random", "skew"; parse: 0, or -1 for another name. */
const char *backend_schedule_name(fa_schedule s);
int backend_schedule_parse(const char *s, fa_schedule *out);

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
  fa_schedule schedule;     /* emu: the order threads run between barriers */
  unsigned long long seed;  /* emu: for the random and skew schedules */
  int threads;              /* emu: OS threads sharing the CTAs */
  unsigned char smem_fill;  /* emu: shared memory's bytes when a CTA starts */
  const fa_range *extra;    /* emu: caller's buffers the kernel may touch too */
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
/* The bytes of the buffers backend_alloc gave that are not freed yet
** (live), and the most of them at once since the last call with reset,
** which then starts the count over from live (peak). FA_EINVAL where the
** backend keeps no such count (emu keeps one). */
int backend_memory(fa_backend *b, int reset, size_t *live, size_t *peak);

/* A tiled TMA tensor map over a device buffer, as cuTensorMapEncodeTiled
** takes it (CUDA Driver API, "Tensor Map Object Management"): dims and box
** innermost first, strides in bytes of dims 1..rank-1, element strides 1,
** no interleave, out-of-bounds elements read as zeros. */
typedef struct fa_tmap_desc {
  const void *base;              /* device pointer, 16-byte aligned */
  int elem_bytes;                /* 1 (fp8), 2 (f16, bf16) or 4 (f32) */
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

/* The GPU of a backend that runs on one (cuda), or NULL (emu). */
const fa_device *backend_device(const fa_backend *b);

/* ---- The GPU without a backend ---- */

/* Probe the driver and describe GPU 0 in a short-lived child process, so
** that this process never initialises CUDA (a context does not survive
** fork, and the tuner forks its workers). 1 with info filled, or 0 with
** the reason in msg (no driver, no GPU, the probe itself crashed). */
int backend_probe_gpu(fa_device *info, char *msg, size_t msglen);
/* The GPU whose context is current on the calling thread (the driver
** probed in this process): 0, or -1 with the reason in msg. */
int backend_current_gpu(int *ordinal, char *msg, size_t msglen);
/* d's own arch, "sm_XY" from its compute capability; returns buf. The
** target fatune compiles for is the space's to choose from it
** (gen_device_arch: an arch-specific one where a family runs only there). */
const char *backend_device_arch(const fa_device *d, char *buf, size_t n);

/* One kernel compiled for a GPU target, no device needed (fatune compile,
** the tuner's compile processes). */
typedef struct fa_compiled {
  int ok;                  /* 1 when a binary (CUBIN) was produced */
  char *cubin;             /* malloc'ed, cubin_size bytes, or NULL */
  size_t cubin_size;
  char *log;               /* the compiler's full log, malloc'ed, never NULL after a call */
  char error[256];         /* first error line, "" when ok */
  int registers;           /* from the assembler's report; -1 when unknown */
  int spill_store_bytes, spill_load_bytes;
  int smem_static_bytes;
  int stack_bytes;         /* stack frame */
  double compile_ms;       /* wall time of the compile and the binary's fetch */
} fa_compiled;
/* Compile source (kernel entry, extern "C") for arch ("sm_90"). 0 when the
** compiler ran (see out->ok), -1 when it could not start (out->error).
** out is always safe to free. Safe from several threads at once. */
int backend_compile_gpu(const char *source, const char *entry, const char *arch,
                        fa_compiled *out);
void backend_compiled_free(fa_compiled *r);
/* 1 when the GPU compiler takes the arch name, else 0. */
int backend_gpu_arch_supported(const char *arch);

/* The newest sm_ number the GPU compiler takes (90 for sm_90), 0 if unknown. */
int backend_gpu_newest_arch(void);
/* The GPU compiler's version ("13.0"), and the options that shape its
** output besides the arch: with the target, a compile cache's key. */
const char *backend_gpu_compiler_version(void);
const char *backend_gpu_compile_options(void);

/* Removes the runtime's temporary files (the emulator's objects); safe to
** call at exit and from a thread that took a stop signal. */
void backend_cleanup(void);
/* 1 once backend_cleanup has begun: the process is ending, and a compile
** may have failed because the cleanup stopped its compiler. */
int backend_stopping(void);

#endif
