/*
** backend_emu.c
** The emu backend: the CPU emulator behind backend.h. Device memory is
** host memory; the backend keeps a list of what it allocated, and a launch
** lets the kernel touch those buffers and nothing else.
*/
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "emu.h"

typedef struct emu_backend {
  fa_backend base;
  pthread_mutex_t mu;     /* guards the buffer list and the counts */
  fa_emu_range *bufs;
  int nbufs, cap;
  size_t live, peak;      /* bytes of bufs; the most at once (backend_memory) */
} emu_backend;

/* A kernel's launches may run several entries (an op's kernels), all in
** the build's module: fn[i] is entry[i] of gen_entries. */
struct fa_program {
  emu_build build;
  int nfn;
  emu_kernel_fn fn[GEN_MAX_LAUNCHES];
  char *entry[GEN_MAX_LAUNCHES];
};

static void program_free(fa_program *p) {
  emu_build_free(&p->build);
  for (int i = 0; i < p->nfn; i++) free(p->entry[i]);
  free(p);
}

/* A program over build b for kernel k: every entry of k's launches bound;
** NULL with the reason in why (b taken either way). */
static fa_program *program_new(const gen_kernel *k, emu_build *b, char *why, size_t n) {
  fa_program *p = calloc(1, sizeof *p);
  if (!p) {
    emu_build_free(b);
    snprintf(why, n, "out of memory");
    return NULL;
  }
  p->build = *b;
  const char *names[GEN_MAX_LAUNCHES];
  const int ne = gen_entries(k, names);
  for (int i = 0; i < ne; i++) {
    p->fn[i] = emu_build_entry(b, names[i]);
    p->entry[i] = strdup(names[i]);
    p->nfn = i + 1;
    if (!p->entry[i] || !p->fn[i]) {
      snprintf(why, n, !p->entry[i] ? "out of memory" : "entry point %s missing from the "
               "compiled object", names[i]);
      program_free(p);
      return NULL;
    }
  }
  return p;
}

static emu_backend *self(fa_backend *b) { return (emu_backend *)b; }

static void emu_close(fa_backend *b) {
  emu_backend *e = self(b);
  for (int i = 0; i < e->nbufs; i++) free((void *)(uintptr_t)e->bufs[i].lo);
  free(e->bufs);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

static int emu_compile_kernels(fa_backend *b, const gen_kernel *const *kernels, size_t n,
                               int jobs, fa_build *out, char *err, size_t errlen) {
  memset(out, 0, n * sizeof *out);
  emu_source *src = calloc(n ? n : 1, sizeof *src);
  emu_build *built = calloc(n ? n : 1, sizeof *built);
  int rc = FA_ENOMEM;
  if (!src || !built) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++)
    src[i] = (emu_source){kernels[i]->entry, kernels[i]->body, &kernels[i]->prelude_emu};
  emu_compile_opts opts = {.jobs = jobs, .keep_objects = b->keep_objects};
  if (emu_compile(src, n, &opts, built, err, errlen) != 0) {
    rc = FA_EINTERNAL;  /* no compiler, no temporary folder, no thread */
    goto done;
  }
  rc = FA_OK;
  for (size_t i = 0; i < n; i++) {
    out[i].compile_ms = built[i].ms;
    out[i].registers = -1;
    if (!built[i].fn) {
      out[i].log = built[i].log;
      built[i].log = NULL;
      emu_build_free(&built[i]);
      continue;
    }
    char why[256];
    fa_program *p = program_new(kernels[i], &built[i], why, sizeof why);
    if (!p) out[i].log = strdup(why);
    out[i].prog = p;
  }
done:
  free(src);
  free(built);
  return rc;
}

static void emu_program_free(fa_backend *b, fa_program *p) {
  (void)b;
  program_free(p);
}

static int emu_alloc(fa_backend *b, size_t bytes, void **ptr, char *err, size_t errlen) {
  emu_backend *e = self(b);
  /* 256-byte aligned like cudaMalloc, so alignment faults mean the same. */
  size_t rounded = (bytes + 255) / 256 * 256;
  void *p = rounded >= bytes ? aligned_alloc(256, rounded ? rounded : 256) : NULL;
  if (!p) {
    snprintf(err, errlen, "out of memory allocating %zu bytes", bytes);
    return FA_ENOMEM;
  }
  pthread_mutex_lock(&e->mu);
  if (e->nbufs == e->cap) {
    int cap = e->cap ? e->cap * 2 : 16;
    fa_emu_range *r = realloc(e->bufs, (size_t)cap * sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&e->mu);
      free(p);
      snprintf(err, errlen, "out of memory");
      return FA_ENOMEM;
    }
    e->bufs = r, e->cap = cap;
  }
  e->bufs[e->nbufs++] = (fa_emu_range){(uintptr_t)p, (uintptr_t)p + bytes};
  e->live += bytes;
  if (e->live > e->peak) e->peak = e->live;
  pthread_mutex_unlock(&e->mu);
  *ptr = p;
  return 0;
}

static void emu_free(fa_backend *b, void *ptr) {
  emu_backend *e = self(b);
  pthread_mutex_lock(&e->mu);
  for (int i = 0; i < e->nbufs; i++)
    if (e->bufs[i].lo == (uintptr_t)ptr) {
      e->live -= e->bufs[i].hi - e->bufs[i].lo;
      e->bufs[i] = e->bufs[--e->nbufs];
      free(ptr);
      break;
    }
  pthread_mutex_unlock(&e->mu);
}

static int emu_memory(fa_backend *b, int reset, size_t *live, size_t *peak) {
  emu_backend *e = self(b);
  pthread_mutex_lock(&e->mu);
  *live = e->live, *peak = e->peak;
  if (reset) e->peak = e->live;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

/* Is [p, p + n) inside one allocation? Copies are checked like kernels. */
static int owned(emu_backend *e, const void *p, size_t n) {
  int ok = 0;
  pthread_mutex_lock(&e->mu);
  for (int i = 0; i < e->nbufs && !ok; i++)
    ok = (uintptr_t)p >= e->bufs[i].lo && (uintptr_t)p + n <= e->bufs[i].hi;
  pthread_mutex_unlock(&e->mu);
  return ok;
}

static int emu_copy(fa_backend *b, void *dst, const void *src, size_t bytes, int to_device,
                    char *err, size_t errlen) {
  if (!owned(self(b), to_device ? dst : src, bytes)) {
    snprintf(err, errlen, "copy of %zu bytes outside every emulator buffer", bytes);
    return FA_EINVAL;
  }
  memcpy(dst, src, bytes);
  return 0;
}

static int emu_fill(fa_backend *b, void *dst, unsigned char byte, size_t bytes, char *err,
                    size_t errlen) {
  if (!owned(self(b), dst, bytes)) {
    snprintf(err, errlen, "fill of %zu bytes outside every emulator buffer", bytes);
    return FA_EINVAL;
  }
  memset(dst, byte, bytes);
  return 0;
}

static void counters_add(fa_counters *to, const fa_emu_counters *from) {
#define ADD_FIELD(f, json, label) to->f += from->f;
  FA_COUNTERS(ADD_FIELD)
#undef ADD_FIELD
}

/* The CTAs of a persistent launch on the emulator: fewer than the tiles
** of any problem but the smallest, an odd number so that a scheduler's
** rounds end part-way; templates/wg/wg_model.lua counts with it. */
#define EMU_PERSISTENT_CTAS 3u

static int emu_launch_program(fa_backend *b, const fa_program *prog, const gen_launch *shape,
                              const fa_params *params, const fa_run_opts *opts,
                              fa_counters *ctr, char *err, size_t errlen) {
  emu_backend *e = self(b);
  if (shape->fn < 0 || shape->fn >= prog->nfn) {
    snprintf(err, errlen, "%s: launch of entry %d, of %d", prog->entry[0], shape->fn, prog->nfn);
    return FA_EINVAL;
  }
  if (shape->block[1] != 1 || shape->block[2] != 1) {
    snprintf(err, errlen, "%s: the emulator runs 1-D thread blocks only", prog->entry[shape->fn]);
    return FA_EINVAL;
  }
  /* A snapshot: buffers allocated by other threads later are not ours. */
  pthread_mutex_lock(&e->mu);
  int n = e->nbufs;
  fa_emu_range *ranges = malloc((size_t)(n + opts->nextra + 1) * sizeof *ranges);
  if (ranges && n) memcpy(ranges, e->bufs, (size_t)n * sizeof *ranges);
  pthread_mutex_unlock(&e->mu);
  for (int i = 0; ranges && i < opts->nextra; i++)
    ranges[n++] = (fa_emu_range){opts->extra[i].lo, opts->extra[i].hi};
  if (!ranges) {
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  emu_launch_args a = {
    .fn = prog->fn[shape->fn], .entry = prog->entry[shape->fn],
    .grid = {shape->persistent && shape->grid[0] > EMU_PERSISTENT_CTAS ? EMU_PERSISTENT_CTAS
                                                                      : shape->grid[0],
             shape->grid[1], shape->grid[2]},
    .threads = shape->block[0],
    .smem_bytes = shape->smem_bytes, .params = params, .ranges = ranges, .nranges = n};
  emu_launch_opts lo = {opts->schedule, opts->seed, opts->threads, opts->smem_fill};
  fa_emu_counters c = {0};
  int rc = emu_launch(&a, &lo, &c, err, errlen) == 0 ? FA_OK : FA_ELAUNCH;
  counters_add(ctr, &c);
  free(ranges);
  return rc;
}

static int emu_blob(fa_backend *b, const fa_program *prog, const void **data, size_t *size) {
  (void)b;
  *data = prog->build.object, *size = prog->build.object_size;
  return prog->build.object ? 0 : -1;
}

static int emu_load_program(fa_backend *b, const gen_kernel *k, const void *data, size_t size,
                            fa_program **prog, char *err, size_t errlen) {
  (void)b;
  emu_source src = {k->entry, k->body, &k->prelude_emu};
  emu_build built = {0};
  if (emu_load(data, size, &src, &built, err, errlen) != 0) return FA_ECOMPILE;
  char why[256];
  fa_program *p = program_new(k, &built, why, sizeof why);
  if (!p) {
    snprintf(err, errlen, "%s", why);
    return FA_ECOMPILE;
  }
  *prog = p;
  return 0;
}

static void emu_cache_key(fa_backend *b, const char **target, const char **compiler,
                          const char **options) {
  (void)b;
  *target = "host", *compiler = emu_compiler_version(), *options = emu_compile_flags();
}

/* The emulator's encoding of a tensor map (emu_abi.h, FA_EMU_TMAP_TAG) of
** arguments backend_tmap has checked. */
static int emu_tmap(fa_backend *b, const fa_tmap_desc *d, fa_tmap *map, char *err,
                    size_t errlen) {
  (void)b, (void)err, (void)errlen;
  memset(map, 0, sizeof *map);
  map->w[0] = FA_EMU_TMAP_TAG;
  map->w[1] = (uintptr_t)d->base;
  map->w[2] = (unsigned long long)d->elem_bytes | (unsigned long long)d->rank << 8 |
              (unsigned long long)d->swizzle << 16;
  for (int i = 0; i < 4; i++) {
    map->w[3 + i] = i < d->rank ? d->dims[i] : 1;
    map->w[10] |= (unsigned long long)(i < d->rank ? d->box[i] : 1) << (16 * i);
  }
  for (int i = 0; i < 3; i++) map->w[7 + i] = i + 1 < d->rank ? d->strides[i] : 0;
  return FA_OK;
}

static const backend_ops emu_ops = {
  .name = "emu", .has_counters = 1, .close = emu_close, .compile = emu_compile_kernels,
  .program_free = emu_program_free, .alloc = emu_alloc, .free = emu_free, .copy = emu_copy,
  .memory = emu_memory,
  .fill = emu_fill, .launch = emu_launch_program, .blob = emu_blob, .load = emu_load_program,
  .cache_key = emu_cache_key, .tmap = emu_tmap};

int backend_emu_open(fa_backend **out, char *err, size_t errlen) {
  emu_backend *e = calloc(1, sizeof *e);
  if (!e || pthread_mutex_init(&e->mu, NULL) != 0) {
    free(e);
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  e->base.ops = &emu_ops;
  *out = &e->base;
  return 0;
}
