/*
** compile_child.h
** The backend's compile in a child process, for a parent that forks CUDA
** workers afterwards: NVRTC 13 initialises the driver (cuInit) while it
** compiles, and a child forked from a process that did must not use CUDA
** (NVIDIA's CUDA C++ guide: CUDA's state does not survive fork). The
** programs come back through a pipe and are loaded in the parent with
** backend_load, which does not touch the device.
*/
#ifndef COMPILE_CHILD_H
#define COMPILE_CHILD_H

#include "backend.h"
#include "par.h"

/* backend_compile of kernels[0..n) on `threads` threads, in a child
** process; progress (may be NULL) after each kernel, from the child. A
** kernel that fails keeps its log; a status means the child could not
** start or died (err says how), and out then holds nothing. */
int cc_compile(fa_backend *be, const gen_kernel *const *kernels, size_t n, int threads,
               fa_build *out, par_progress_fn progress, void *ud, char *err, size_t errlen);

#endif
