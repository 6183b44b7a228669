/*
** compile_cache.c
** The tuner's compile cache, over the database's binaries.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile_cache.h"
#include "model_sass.h"

/* The figures a cached cubin comes with. */
typedef struct cached_figures {
  int registers, smem_static, spill_bytes;
  double compile_ms;
} cached_figures;

/* The registers from the cubin, the row's static shared memory, spills and
** compile time: 1 when all are sane, 0 when the cubin does not hold k's
** entry or a figure of the row is out of range. */
static int figures_of(const gen_kernel *k, const db_binary *bin, cached_figures *f) {
  f->registers = model_cubin_registers(bin->data, bin->size, k->entry);
  f->smem_static = bin->smem_bytes;
  f->spill_bytes = bin->spill_bytes;
  f->compile_ms = bin->compile_ms;
  return f->registers > 0 && f->smem_static >= 0 && f->smem_static <= 256 * 1024 &&
         f->spill_bytes >= 0 && f->spill_bytes < (1 << 30) && isfinite(f->compile_ms) &&
         f->compile_ms >= 0;
}

/* The entry under key, with its figures: 1, or 0 (nothing usable). */
static int lookup(db *d, const gen_kernel *k, const db_binary_key *key, db_binary *bin,
                  cached_figures *f) {
  int found = 0;
  char err[256];
  memset(bin, 0, sizeof *bin);
  if (!d || db_binary_get(d, key, bin, &found, err, sizeof err) != 0 || !found) return 0;
  if (figures_of(k, bin, f)) return 1;
  db_binary_free(bin);
  return 0;
}

static void store(db *d, const db_binary_key *key, const void *data, size_t size, int registers,
                  int spill_bytes, int smem_bytes, double compile_ms) {
  db_binary bin = {.data = (unsigned char *)data, .size = size, .registers = registers,
                   .spill_bytes = spill_bytes, .smem_bytes = smem_bytes,
                   .compile_ms = compile_ms};
  char err[256];
  if (d) db_binary_put(d, key, &bin, err, sizeof err);  /* a cache: failing is no error */
}

int ccache_cubin_get(db *d, const gen_kernel *k, const char *arch, fa_compiled *out) {
  const db_binary_key key = {k->source_hash, arch, backend_gpu_compiler_version(),
                             backend_gpu_compile_options()};
  db_binary bin;
  cached_figures f;
  if (!lookup(d, k, &key, &bin, &f)) return 0;
  char *log = malloc(1);
  if (!log) {
    db_binary_free(&bin);
    return 0;
  }
  log[0] = '\0';
  memset(out, 0, sizeof *out);
  out->ok = 1, out->cubin = (char *)bin.data, out->cubin_size = bin.size, out->log = log;
  out->registers = f.registers, out->smem_static_bytes = f.smem_static;
  /* The row keeps the spills' sum: all of it reads as stores. */
  out->spill_store_bytes = f.spill_bytes;
  out->compile_ms = f.compile_ms;
  return 1;
}

void ccache_cubin_put(db *d, const gen_kernel *k, const char *arch, const fa_compiled *r) {
  if (!r->ok || !r->cubin) return;
  const db_binary_key key = {k->source_hash, arch, backend_gpu_compiler_version(),
                             backend_gpu_compile_options()};
  store(d, &key, r->cubin, r->cubin_size, r->registers,
        r->spill_store_bytes + r->spill_load_bytes, r->smem_static_bytes, r->compile_ms);
}

int ccache_build_get(db *d, fa_backend *be, const gen_kernel *k, fa_build *out) {
  db_binary_key key = {.source_hash = k->source_hash};
  backend_cache_key(be, &key.target, &key.compiler_version, &key.options);
  db_binary bin;
  cached_figures f;
  if (!lookup(d, k, &key, &bin, &f)) return 0;
  char err[256];
  memset(out, 0, sizeof *out);
  const int rc = backend_load(be, k, bin.data, bin.size, &out->prog, err, sizeof err);
  db_binary_free(&bin);
  if (rc != 0 || !out->prog) return 0;
  out->registers = f.registers, out->smem_static_bytes = f.smem_static;
  out->spill_bytes = f.spill_bytes, out->stack_bytes = -1;   /* not kept */
  out->compile_ms = f.compile_ms;
  return 1;
}

void ccache_build_put(db *d, fa_backend *be, const gen_kernel *k, const fa_build *b) {
  const void *data;
  size_t size;
  if (!b->prog || backend_program_blob(be, b->prog, &data, &size) != 0) return;
  db_binary_key key = {.source_hash = k->source_hash};
  backend_cache_key(be, &key.target, &key.compiler_version, &key.options);
  store(d, &key, data, size, b->registers, b->spill_bytes, b->smem_static_bytes, b->compile_ms);
}
