/*
** backend_impl.h
** What a backend implements behind backend.h: the ops table every call
** dispatches through, and each backend's constructor. Private to runtime/:
** backend.c and the backends in runtime/emu and runtime/cuda.
*/
#ifndef BACKEND_IMPL_H
#define BACKEND_IMPL_H

#ifndef FA_RUNTIME_INTERNAL
#error "backend_impl.h is private to the runtime layer: include backend.h"
#endif

#include "backend.h"

typedef struct backend_ops backend_ops;
struct backend_ops {
  const char *name;
  int has_counters;
  void (*close)(fa_backend *b);
  int (*compile)(fa_backend *b, const gen_kernel *const *kernels, size_t n, int jobs,
                 fa_build *out, char *err, size_t errlen);
  void (*program_free)(fa_backend *b, fa_program *p);
  int (*alloc)(fa_backend *b, size_t bytes, void **ptr, char *err, size_t errlen);
  void (*free)(fa_backend *b, void *ptr);
  int (*copy)(fa_backend *b, void *dst, const void *src, size_t bytes, int to_device,
              char *err, size_t errlen);
  int (*fill)(fa_backend *b, void *dst, unsigned char byte, size_t bytes, char *err,
              size_t errlen);
  int (*launch)(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                const fa_params *params, const fa_run_opts *opts, fa_counters *ctr,
                char *err, size_t errlen);
  /* optional: NULL where the backend has no such thing */
  int (*time)(fa_backend *b, const fa_program *prog, const gen_launch *shapes, int nshapes,
              const fa_params *params, int budget_ms, fa_timing *t, char *err, size_t errlen);
  int (*occupancy)(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                   int *ctas_per_sm, char *err, size_t errlen);
  int (*poisoned)(fa_backend *b);
  int (*blob)(fa_backend *b, const fa_program *prog, const void **data, size_t *size);
  int (*load)(fa_backend *b, const gen_kernel *k, const void *data, size_t size,
              fa_program **prog, char *err, size_t errlen);
  void (*cache_key)(fa_backend *b, const char **target, const char **compiler,
                    const char **options);
  int (*enter)(fa_backend *b, char *err, size_t errlen);
  void (*leave)(fa_backend *b);
  int (*sync)(fa_backend *b, char *err, size_t errlen);
  int (*tmap)(fa_backend *b, const fa_tmap_desc *d, fa_tmap *map, char *err,
              size_t errlen);
  int (*memory)(fa_backend *b, int reset, size_t *live, size_t *peak);
};
struct fa_backend {
  const backend_ops *ops;
  int keep_objects;
};

int backend_emu_open(fa_backend **out, char *err, size_t errlen);
int backend_cuda_open(const fa_device *info, fa_backend **out, char *err,
                      size_t errlen);

#endif
