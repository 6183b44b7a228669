/*
** emu.h
** The CPU emulator: generated kernel bodies compiled by the host C compiler
** against prelude_emu.h into shared objects, and launched CTA by CTA, each
** CTA's threads running as fibers on one OS thread. Every function returns
** 0, or -1 with a one-line message in err.
*/
#ifndef EMU_H
#define EMU_H

#include <stddef.h>
#include <sys/types.h>

#include "backend.h"
#include "emu_abi.h"
#include "fa_params.h"
#include "gen.h"

typedef struct emu_module emu_module;   /* one loaded shared object */
typedef void (*emu_kernel_fn)(fa_params p);

/* One kernel to compile: its entry point and its body (no prelude). */
typedef struct emu_source {
  const char *entry;
  const char *body;
  const gen_preludes *preludes;   /* embedded files pasted before it, in order; NULL: none */
} emu_source;

/* What became of one kernel. fn is NULL when it did not compile; then log
** holds the compiler's complaint about it. */
typedef struct emu_build {
  emu_kernel_fn fn;
  emu_module *module;  /* holds fn; released by emu_build_free */
  char *log;           /* malloc'd, or NULL */
  double ms;           /* this kernel's share of its batch's compile time */
  unsigned char *object;  /* keep_objects: the shared object's bytes, malloc'd */
  size_t object_size;
} emu_build;

typedef struct emu_compile_opts {
  int jobs;               /* compiler processes at once; <= 0: all cores */
  int batch;              /* kernels per compiler invocation; <= 0: as few as jobs allow */
  const char *extra_flags; /* appended to the compiler's flags (tests: -Werror), or NULL */
  int keep_objects;       /* copy each kernel's object into its build (a compile cache) */
} emu_compile_opts;

/* Compile n kernels. A kernel that fails leaves fn NULL with its log and
** never stops the others; -1 means nothing could be tried at all. */
int emu_compile(const emu_source *src, size_t n, const emu_compile_opts *opts,
                emu_build *out, char *err, size_t errlen);
void emu_build_free(emu_build *b);

/* Another entry point of the module that holds b's kernel (an op's other
** launches), or NULL when it has none of that name. */
emu_kernel_fn emu_build_entry(const emu_build *b, const char *entry);

/* Load kernel src from object bytes kept by an earlier compile (and
** checked by the caller): they are loaded from memory (a memfd), never
** from a file someone else could rename over. When src's kernel is
** loaded already, its module is shared instead. */
int emu_load(const void *object, size_t size, const emu_source *src, emu_build *out,
             char *err, size_t errlen);

/* ---- Temporary folders (emu_tmp.c) ----
** The host compiler works in a folder $TMPDIR/fatune-emu-XXXXXX, mode 0700,
** used through the descriptor opened right after mkdtemp; it holds an flock
** on its file `lock` while alive. Making one first sweeps this user's stale
** folders (older than an hour, lock free). A registry of the live ones lets
** a signal handler remove them. */
typedef struct emu_tmp_dir {
  char path[512];
  int fd;        /* the folder */
  int lock;      /* holds the flock on its file `lock` */
} emu_tmp_dir;

const char *emu_tmp_root(void);                               /* $TMPDIR, else /tmp */
/* -1 when $TMPDIR is writable by others and not sticky (they could rename
** what is in it), or cannot be seen. */
int emu_tmp_root_check(char *err, size_t errlen);
int emu_tmp_dir_make(emu_tmp_dir *d, char *err, size_t errlen);  /* 0 or -1 */
/* 0 when d->path is still the folder made: same device and inode, this
** user's, mode 0700; else -1 with a message that says it was replaced. */
int emu_tmp_dir_check(const emu_tmp_dir *d, char *err, size_t errlen);
void emu_tmp_dir_remove(emu_tmp_dir *d);
void emu_tmp_dir_files(const char *dir, int id);  /* k<id>.{c,so,log} may exist */
int emu_tmp_child_add(const char *dir, pid_t pid);  /* a compiler (its own process group) */
void emu_tmp_child_done(const char *dir, int token);
int emu_tmp_dying(void);                          /* emu_tmp_cleanup has begun */
void emu_tmp_sweep(void);
/* Async-signal-safe: stops this process's compilers (SIGTERM to their
** process groups, SIGKILL after 2 s) and removes its live folders and
** files. For a SIGINT or SIGTERM handler, or at exit. */
void emu_tmp_cleanup(void);

/* The host compiler's identity ("cc (Debian 12.2.0-14) 12.2.0"), for cache
** keys; "unknown" when it cannot be asked. */
const char *emu_compiler_version(void);

/* The flags the emulator compiles with, for cache keys. */
const char *emu_compile_flags(void);

/* The compiler command used: $FATUNE_CC, else $CC, else cc. */
const char *emu_compiler(void);

/* The order fibers run in between barriers (emu_launch.c tells each): the
** backend interface's schedules (backend.h). Under EMU_SKEW a CTA's
** dynamic shared memory also starts 16 bytes into its 1024-aligned window
** (the alignment CUDA promises), so that a kernel which aligns its tiles
** further must fit the padding in the size it declares. */
typedef fa_schedule emu_schedule;
#define EMU_FORWARD FA_SCHED_FORWARD
#define EMU_REVERSE FA_SCHED_REVERSE
#define EMU_RANDOM FA_SCHED_RANDOM
#define EMU_SKEW FA_SCHED_SKEW
const char *emu_schedule_name(emu_schedule s);
int emu_schedule_parse(const char *s, emu_schedule *out);

typedef struct emu_launch_opts {
  emu_schedule schedule;   /* order fibers run in between barriers */
  unsigned long long seed; /* for EMU_RANDOM and EMU_SKEW */
  int threads;             /* OS threads sharing the CTAs; <= 0: 1 */
  unsigned char smem_fill; /* every byte of shared memory at the start of a CTA */
} emu_launch_opts;

typedef struct emu_launch_args {
  emu_kernel_fn fn;
  const char *entry;        /* named in messages */
  unsigned grid[3];
  unsigned threads;         /* per CTA, 1-D */
  size_t smem_bytes;
  const fa_params *params;
  const fa_emu_range *ranges; /* the global buffers the kernel may touch */
  int nranges;
} emu_launch_args;

/* Run one launch to completion. Counters are added into *ctr. A fault, a
** divergent barrier or a deadlock fails the launch with a message that
** names the kernel, the block, the threads and the line. */
int emu_launch(const emu_launch_args *a, const emu_launch_opts *o,
               fa_emu_counters *ctr, char *err, size_t errlen);

#endif
