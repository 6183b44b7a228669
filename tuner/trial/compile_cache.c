/*
** compile_cache.c
** The tuner's compile cache, over the database's binaries.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compile_cache.h"
#include "model_sass.h"

/* The key of NVRTC's cubin for arch, as the cuda backend's (cuda_cache_key). */
static db_binary_key cubin_key(const gen_kernel *k, const char *arch) {
  return (db_binary_key){k->source_hash, arch, backend_gpu_compiler_version(),
                         backend_gpu_compile_options()};
}

static db_binary_key program_key(fa_backend *be, const gen_kernel *k) {
  db_binary_key key = {.source_hash = k->source_hash};
  backend_cache_key(be, &key.target, &key.compiler_version, &key.options);
  return key;
}

/* The entry under key when it is usable: its registers, read from the
** cubin (0 when the cubin does not hold k's entry, and then nothing is
** kept), with the row's figures sane; bin is the caller's to free. */
static int lookup(db *d, const gen_kernel *k, const db_binary_key *key, db_binary *bin) {
  int found = 0;
  char err[256];
  memset(bin, 0, sizeof *bin);
  if (!d || db_binary_get(d, key, bin, &found, err, sizeof err) != 0 || !found) return 0;
  const int registers = model_cubin_registers(bin->data, bin->size, k->entry);
  if (registers > 0 && bin->smem_bytes >= 0 && bin->smem_bytes <= 256 * 1024 &&
      bin->spill_bytes >= 0 && bin->spill_bytes < (1 << 30) && isfinite(bin->compile_ms) &&
      bin->compile_ms >= 0)
    return registers;
  db_binary_free(bin);
  return 0;
}

static void store(db *d, const db_binary_key *key, const db_binary *bin) {
  char err[256];
  if (d) db_binary_put(d, key, bin, err, sizeof err);  /* a cache: failing is no error */
}

int ccache_cubin_get(db *d, const gen_kernel *k, const char *arch, fa_compiled *out) {
  const db_binary_key key = cubin_key(k, arch);
  db_binary bin;
  const int registers = lookup(d, k, &key, &bin);
  if (!registers) return 0;
  char *log = malloc(1);
  if (!log) {
    db_binary_free(&bin);
    return 0;
  }
  log[0] = '\0';
  memset(out, 0, sizeof *out);
  out->ok = 1, out->cubin = (char *)bin.data, out->cubin_size = bin.size, out->log = log;
  out->registers = registers, out->smem_static_bytes = bin.smem_bytes;
  /* The row keeps the spills' sum: all of it reads as stores. */
  out->spill_store_bytes = bin.spill_bytes;
  out->compile_ms = bin.compile_ms;
  return 1;
}

void ccache_cubin_put(db *d, const gen_kernel *k, const char *arch, const fa_compiled *r) {
  if (!r->ok || !r->cubin) return;
  const db_binary_key key = cubin_key(k, arch);
  const db_binary bin = {.data = (unsigned char *)r->cubin, .size = r->cubin_size,
                         .registers = r->registers,
                         .spill_bytes = r->spill_store_bytes + r->spill_load_bytes,
                         .smem_bytes = r->smem_static_bytes, .compile_ms = r->compile_ms};
  store(d, &key, &bin);
}

int ccache_build_get(db *d, fa_backend *be, const gen_kernel *k, fa_build *out) {
  const db_binary_key key = program_key(be, k);
  db_binary bin;
  const int registers = lookup(d, k, &key, &bin);
  if (!registers) return 0;
  char err[256];
  memset(out, 0, sizeof *out);
  const int rc = backend_load(be, k, bin.data, bin.size, &out->prog, err, sizeof err);
  out->registers = registers, out->smem_static_bytes = bin.smem_bytes;
  out->spill_bytes = bin.spill_bytes, out->stack_bytes = -1;   /* not kept */
  out->compile_ms = bin.compile_ms;
  db_binary_free(&bin);
  return rc == 0 && out->prog;
}

void ccache_build_put(db *d, fa_backend *be, const gen_kernel *k, const fa_build *b) {
  const void *data;
  size_t size;
  if (!b->prog || backend_program_blob(be, b->prog, &data, &size) != 0) return;
  const db_binary_key key = program_key(be, k);
  const db_binary bin = {.data = (unsigned char *)data, .size = size, .registers = b->registers,
                         .spill_bytes = b->spill_bytes, .smem_bytes = b->smem_static_bytes,
                         .compile_ms = b->compile_ms};
  store(d, &key, &bin);
}
