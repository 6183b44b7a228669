/*
** compile_cache.h
** The tuner's compile cache: the results database's binaries (db.h), keyed
** as libfatune keys them (the source's hash, the target, NVRTC's version,
** the options), so that a kernel compiled for a target is not compiled
** again when the same database tunes it at another sequence length, batch
** or head count, or once more. Only cubins are cached (NVRTC's work, most
** of a tune's compile time); the emulator's objects are not.
**
** An entry is used only when its MAC verifies (db_binary_get: this
** installation stored it) and its cubin holds the kernel (the registers
** are read from it); the rest of ptxas's report and the compile time come
** from the row. Failing to read or fill the cache is never an error: the
** kernel is compiled.
*/
#ifndef COMPILE_CACHE_H
#define COMPILE_CACHE_H

#include "backend.h"
#include "db.h"

/* NVRTC's cubin of k for arch (the emulator's flow, for the machine code):
** 1 and out filled (free with backend_compiled_free), or 0. */
int ccache_cubin_get(db *d, const gen_kernel *k, const char *arch, fa_compiled *out);
/* Stores r when it is a cubin. */
void ccache_cubin_put(db *d, const gen_kernel *k, const char *arch, const fa_compiled *r);

/* k's program on the cuda backend be from the cache: 1 and out filled
** (free with backend_build_free), or 0. */
int ccache_build_get(db *d, fa_backend *be, const gen_kernel *k, fa_build *out);
/* Stores b's cubin when b compiled. */
void ccache_build_put(db *d, fa_backend *be, const gen_kernel *k, const fa_build *b);

#endif
