/*
** backend.c
** Choosing a backend, and the calls every backend answers.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "cuda_driver.h"
#include "emu.h"
#include "nvrtc_compile.h"

int backend_open(const char *name, fa_backend **out, char *note, size_t notelen,
                 char *err, size_t errlen) {
  return backend_open_device(name, 0, 0, out, note, notelen, err, errlen);
}

int backend_open_device(const char *name, int ordinal, int probe_here, fa_backend **out,
                        char *note, size_t notelen, char *err, size_t errlen) {
  *out = NULL;
  if (note && notelen) note[0] = '\0';
  if (!strcmp(name, "emu")) return backend_emu_open(out, err, errlen);
  if (strcmp(name, "cuda") && strcmp(name, "auto")) {
    snprintf(err, errlen, "unknown backend '%s' (emu, cuda or auto)", name);
    return FA_EINVAL;
  }
  char why[256];
  cudrv_device_info info;
  const int found = probe_here ? cudrv_device_query(ordinal, &info, why, sizeof why) == 0
                               : cudrv_probe_isolated_at(ordinal, &info, why, sizeof why);
  if (found)
    return backend_cuda_open(&info, out, err, errlen);
  if (!strcmp(name, "cuda")) {
    snprintf(err, errlen, "--backend cuda: %s", why);
    return FA_ENODEV;
  }
  if (note) snprintf(note, notelen, "%s", why);
  return backend_emu_open(out, err, errlen);
}

void backend_close(fa_backend *b) {
  if (b) b->ops->close(b);
}

const char *backend_name(const fa_backend *b) { return b->ops->name; }
int backend_has_counters(const fa_backend *b) { return b->ops->has_counters; }

int backend_compile(fa_backend *b, const gen_kernel *const *kernels, size_t n, int jobs,
                    fa_build *out, char *err, size_t errlen) {
  return b->ops->compile(b, kernels, n, jobs, out, err, errlen);
}

void backend_build_free(fa_backend *b, fa_build *build) {
  if (build->prog) b->ops->program_free(b, build->prog);
  free(build->log);
  memset(build, 0, sizeof *build);
}

int backend_alloc(fa_backend *b, size_t bytes, void **ptr, char *err, size_t errlen) {
  return b->ops->alloc(b, bytes, ptr, err, errlen);
}

void backend_free(fa_backend *b, void *ptr) {
  if (ptr) b->ops->free(b, ptr);
}

int backend_memory(fa_backend *b, int reset, size_t *live, size_t *peak) {
  return b->ops->memory ? b->ops->memory(b, reset, live, peak) : FA_EINVAL;
}

int backend_upload(fa_backend *b, void *dst, const void *src, size_t bytes, char *err,
                   size_t errlen) {
  return b->ops->copy(b, dst, src, bytes, 1, err, errlen);
}

int backend_download(fa_backend *b, void *dst, const void *src, size_t bytes, char *err,
                     size_t errlen) {
  return b->ops->copy(b, dst, src, bytes, 0, err, errlen);
}

int backend_fill(fa_backend *b, void *dst, unsigned char byte, size_t bytes, char *err,
                 size_t errlen) {
  return b->ops->fill(b, dst, byte, bytes, err, errlen);
}

int backend_launch(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                   const fa_params *params, const fa_run_opts *opts, fa_counters *ctr,
                   char *err, size_t errlen) {
  fa_counters scratch = {0};
  return b->ops->launch(b, prog, shape, params, opts, ctr ? ctr : &scratch, err, errlen);
}

int backend_time(fa_backend *b, const fa_program *prog, const gen_launch *shapes,
                 int nshapes, const fa_params *params, int budget_ms, fa_timing *t,
                 char *err, size_t errlen) {
  if (!b->ops->time) {
    snprintf(err, errlen, "the %s backend does not time kernels", b->ops->name);
    return FA_ENODEV;
  }
  return b->ops->time(b, prog, shapes, nshapes, params, budget_ms, t, err, errlen);
}

int backend_occupancy(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                      int *ctas_per_sm, char *err, size_t errlen) {
  if (!b->ops->occupancy) {
    snprintf(err, errlen, "the %s backend has no occupancy", b->ops->name);
    return FA_ENODEV;
  }
  return b->ops->occupancy(b, prog, shape, ctas_per_sm, err, errlen);
}

/* What cuTensorMapEncodeTiled requires of a tiled map without interleave
** (CUDA Driver API, "Tensor Map Object Management"), checked once for
** every backend, so that the emulator refuses what a GPU would and the
** message names the argument: NULL, or why d is refused. */
static const char *tmap_refused(const fa_tmap_desc *d, char *why, size_t n) {
  static const unsigned long long dim_max = 1ull << 32, stride_max = 1ull << 40;
  if (!d->base) return "the base address is null";
  if ((uintptr_t)d->base % 16)
    return snprintf(why, n, "base address %p is not 16-byte aligned", d->base), why;
  if (d->elem_bytes != 1 && d->elem_bytes != 2 && d->elem_bytes != 4)
    return snprintf(why, n, "elements of %d bytes (1, 2 or 4)", d->elem_bytes), why;
  if (d->rank < 2 || d->rank > 4) return snprintf(why, n, "rank %d (2 to 4)", d->rank), why;
  if (d->swizzle != 0 && d->swizzle != 32 && d->swizzle != 64 && d->swizzle != 128)
    return snprintf(why, n, "swizzle %d (0, 32, 64 or 128 bytes)", d->swizzle), why;
  for (int i = 0; i < d->rank; i++) {
    if (d->dims[i] < 1 || d->dims[i] > dim_max)
      return snprintf(why, n, "dimension %d has %llu elements (1 to 2^32)", i, d->dims[i]), why;
    if (d->box[i] < 1 || d->box[i] > 256)
      return snprintf(why, n, "box dimension %d is %u (1 to 256)", i, d->box[i]), why;
  }
  /* The strides need not grow with the dimension: CUTLASS maps (seq,
  ** heads) tensors whose head stride is the smaller (FlashAttention-3's
  ** packed and BSHD layouts), and so do fatune's variable-length batches. */
  for (int i = 0; i + 1 < d->rank; i++) {
    const unsigned long long st = d->strides[i];
    if (st == 0 || st % 16 || st >= stride_max)
      return snprintf(why, n, "the stride of dimension %d is %llu bytes (a multiple of 16, 16 "
                      "to 2^40 - 16)", i + 1, st), why;
  }
  const unsigned inner = d->box[0] * (unsigned)d->elem_bytes;
  if (inner % 16)
    return snprintf(why, n, "the box's inner dimension spans %u bytes, not a multiple of 16",
                    inner), why;
  if (d->swizzle && inner > (unsigned)d->swizzle)
    return snprintf(why, n, "the box's inner dimension spans %u bytes, more than the %d-byte "
                    "swizzle span", inner, d->swizzle), why;
  return NULL;
}

int backend_tmap(fa_backend *b, const fa_tmap_desc *d, fa_tmap *map, char *err,
                 size_t errlen) {
  if (!b->ops->tmap) {
    snprintf(err, errlen, "the %s backend cannot encode TMA tensor maps", b->ops->name);
    return FA_ENODEV;
  }
  char why[160];
  const char *refused = tmap_refused(d, why, sizeof why);
  if (refused) {
    snprintf(err, errlen, "tensor map refused: %s", refused);
    return FA_EINVAL;
  }
  return b->ops->tmap(b, d, map, err, errlen);
}

int backend_program_blob(fa_backend *b, const fa_program *prog, const void **data,
                         size_t *size) {
  return b->ops->blob(b, prog, data, size);
}

void backend_keep_objects(fa_backend *b, int on) { b->keep_objects = on; }

int backend_load(fa_backend *b, const gen_kernel *k, const void *data, size_t size,
                 fa_program **prog, char *err, size_t errlen) {
  return b->ops->load(b, k, data, size, prog, err, errlen);
}

void backend_cache_key(fa_backend *b, const char **target, const char **compiler,
                       const char **options) {
  b->ops->cache_key(b, target, compiler, options);
}

int backend_poisoned(fa_backend *b) { return b->ops->poisoned ? b->ops->poisoned(b) : 0; }

int backend_enter(fa_backend *b, char *err, size_t errlen) {
  return b->ops->enter ? b->ops->enter(b, err, errlen) : 0;
}

void backend_leave(fa_backend *b) {
  if (b->ops->leave) b->ops->leave(b);
}

int backend_sync(fa_backend *b, char *err, size_t errlen) {
  return b->ops->sync ? b->ops->sync(b, err, errlen) : 0;
}

/* ---- What the layers above reach of the backends without opening one ---- */

const char *backend_schedule_name(fa_schedule s) { return emu_schedule_name(s); }

int backend_schedule_parse(const char *s, fa_schedule *out) { return emu_schedule_parse(s, out); }

int backend_probe_gpu(fa_device *info, char *msg, size_t msglen) {
  return cudrv_probe_isolated(info, msg, msglen);
}

int backend_current_gpu(int *ordinal, char *msg, size_t msglen) {
  return cudrv_current_device(ordinal, msg, msglen);
}

const char *backend_device_arch(const fa_device *d, char *buf, size_t n) {
  return cudrv_target_arch(d, buf, n);
}

int backend_compile_gpu(const char *source, const char *entry, const char *arch,
                        fa_compiled *out) {
  return nvrtc_compile(source, entry, arch, out);
}

void backend_compiled_free(fa_compiled *r) { nvrtc_result_free(r); }

int backend_gpu_arch_supported(const char *arch) { return nvrtc_arch_supported(arch); }

const char *backend_gpu_compiler_version(void) { return nvrtc_version_string(); }

const char *backend_gpu_compile_options(void) { return NVRTC_OPTIONS; }

int backend_gpu_newest_arch(void) { return nvrtc_newest_arch(); }

void backend_cleanup(void) { emu_tmp_cleanup(); }

int backend_stopping(void) { return emu_tmp_dying(); }
