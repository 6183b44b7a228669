/*
** fatune.c
** libfatune (fatune.h). The hot path is a lookup in an in-process table
** under a read lock, the launch shape, and the launch; everything else
** (choosing the variant, rendering it, the compile cache) happens once per
** problem key, under the context's lock.
*/
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "db.h"
#include "fa_util.h"
#include "fatune.h"

#define TABLE_SIZE 256   /* problem keys kept in memory; a full table starts over */

/* The layers' statuses are the library's: passed through, never guessed. */
#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " is " #b)
SAME(FA_OK, FATUNE_OK); SAME(FA_EINVAL, FATUNE_EINVAL); SAME(FA_ENODEV, FATUNE_ENODEV);
SAME(FA_EDB, FATUNE_EDB); SAME(FA_ECOMPILE, FATUNE_ECOMPILE);
SAME(FA_ELAUNCH, FATUNE_ELAUNCH); SAME(FA_ENOMEM, FATUNE_ENOMEM);
SAME(FA_EINTERNAL, FATUNE_EINTERNAL);
#undef SAME

static _Thread_local char errbuf[512];

static fatune_status fail(fatune_status st, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));

static fatune_status fail(fatune_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return st;
}

const char *fatune_errmsg(void) { return errbuf; }

/* One problem key and the kernel chosen for it. */
typedef struct slot {
  int used;
  fa_dtype dtype;
  int dim, seq_q, seq_k, causal;
  gen_kernel k;
  fa_program *prog;
  fatune_choice choice;
} slot;

struct fatune_ctx {
  fa_backend *be;
  db *db;
  gen_state *gen;
  gen_target target;
  char device[128];           /* the key db_best matches: a GPU's uuid, or "emu" */
  pthread_rwlock_t lock;      /* the table */
  pthread_mutex_t slow;       /* the database, the generator, compiles */
  int cache_unusable_said;    /* the compile cache's refusal went to stderr */
  slot table[TABLE_SIZE];
};

/* ---- Opening ---- */

fatune_status fatune_open(const fatune_options *opts, fatune_ctx **out) {
  *out = NULL;
  errbuf[0] = '\0';
  fatune_ctx *c = calloc(1, sizeof *c);
  if (!c) return fail(FATUNE_ENOMEM, "out of memory");
  pthread_rwlock_init(&c->lock, NULL);
  pthread_mutex_init(&c->slow, NULL);
  char err[512], note[256];
  const char *bk = opts && opts->backend ? opts->backend : "auto";
  fatune_status st = FATUNE_OK;
  int rc;
  if ((rc = backend_open(bk, &c->be, note, sizeof note, err, sizeof err)) != 0 ||
      (rc = gen_open(&c->gen, err, sizeof err)) != 0) {
    st = fail((fatune_status)rc, "%s", err);
  } else if (db_open(opts ? opts->db_path : NULL, DB_CREATE, &c->db, err, sizeof err) != 0) {
    st = fail(FATUNE_EDB, "%s", err);
  } else {
    const cudrv_device_info *d = backend_cuda_device(c->be);
    char arch[16] = "sm_90";
    if (d) snprintf(arch, sizeof arch, "sm_%d%d", d->cc_major, d->cc_minor);
    snprintf(c->device, sizeof c->device, "%s", d ? d->uuid : "emu");
    if (gen_target_for_arch(c->gen, arch, d ? d->smem_per_block_optin : 0, 0, &c->target) != 0)
      st = fail(FATUNE_ENODEV, "this GPU is not one fatune knows: %s", gen_errmsg(c->gen));
    backend_keep_objects(c->be, 1);
  }
  if (st != FATUNE_OK) {
    fatune_close(c);
    return st;
  }
  *out = c;
  return FATUNE_OK;
}

void fatune_close(fatune_ctx *c) {
  if (!c) return;
  for (int i = 0; i < TABLE_SIZE; i++)
    if (c->table[i].used) {
      if (c->table[i].prog) {
        fa_build b = {.prog = c->table[i].prog};
        backend_build_free(c->be, &b);
      }
      gen_kernel_free(&c->table[i].k);
    }
  if (c->db) db_close(c->db);
  gen_close(c->gen);
  backend_close(c->be);
  pthread_rwlock_destroy(&c->lock);
  pthread_mutex_destroy(&c->slow);
  free(c);
}

const char *fatune_backend(const fatune_ctx *c) { return backend_name(c->be); }

/* ---- Choosing and building a kernel (slow path) ---- */

static fatune_status check_problem(const fatune_problem *p) {
  if (!p) return fail(FATUNE_EINVAL, "no problem");
  if (p->batch < 1 || p->heads < 1 || p->seq_q < 1 || p->seq_k < 1 || p->batch > 65535 ||
      p->heads > 65535 || p->seq_q > (1 << 24) || p->seq_k > (1 << 24))
    return fail(FATUNE_EINVAL, "bad problem size: batch %d heads %d seq_q %d seq_k %d "
                "(1 to 65535 batches and heads, 1 to 2^24 rows)", p->batch, p->heads, p->seq_q,
                p->seq_k);
  if (p->dim < 1 || p->dim > FA_DIM_MAX)
    return fail(FATUNE_EINVAL, "bad head dim %d (1 to %d)", p->dim, FA_DIM_MAX);
  if ((unsigned)p->dtype > FATUNE_BF16) return fail(FATUNE_EINVAL, "bad dtype %d", (int)p->dtype);
  if (!(p->scale >= 0) || !isfinite(p->scale)) return fail(FATUNE_EINVAL, "bad scale");
  return FATUNE_OK;
}

static fa_problem to_problem(const fatune_problem *p) {
  fa_problem q = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                  .dim = p->dim, .dtype = (fa_dtype)p->dtype, .causal = p->causal ? 1 : 0,
                  .scale = p->scale};
  return q;
}

/* The stored best row's kernel, when it is one for this very problem: its
** config a flat object the templates accept (parsed, validated against the
** space and the target) that fits fp exactly (dim, dtype, causal, family).
** 1 with k rendered; 0 with why said. */
static int stored_kernel(fatune_ctx *c, const db_best_row *row, const fa_problem *fp,
                         gen_kernel *k, char *why, size_t n) {
  if (!row->config_kv[0]) {
    snprintf(why, n, "its config '%.200s' is not an object of strings and integers", row->config);
    return 0;
  }
  if (gen_render_config(c->gen, row->config_kv, fp, &c->target, k) != 0) {
    snprintf(why, n, "%s", gen_errmsg(c->gen));
    return 0;
  }
  if (gen_kernel_fits(k, fp, why, n)) return 1;
  gen_kernel_free(k);
  return 0;
}

/* A library says nothing unless asked: FATUNE_VERBOSE set and not empty. */
static void warn_ignored(const db_best_row *row, const char *why) {
  const char *v = getenv("FATUNE_VERBOSE");
  if (v && *v)
    fprintf(stderr, "fatune: ignoring the stored variant %.160s: %s; running the default\n",
            row->variant, why);
}

/* Render the variant for p: the database's choice when it fits p, else the
** default. The templates and the problem, not the database, decide what
** runs: a stored config for another dim, dtype, mask or family would read
** and write out of bounds or compute another problem. */
static fatune_status choose(fatune_ctx *c, const fa_problem *fp, gen_kernel *k,
                            fatune_choice *choice) {
  db_problem dp = {.dtype = fa_dtype_name(fp->dtype), .dim = fp->dim, .seq_q = fp->seq_q,
                   .seq_k = fp->seq_k, .batch = fp->batch, .heads = fp->heads,
                   .causal = fp->causal};
  db_best_row row;
  int found = 0, exact = 0;
  char err[512];
  if (db_best(c->db, c->device, &dp, &row, &found, &exact, err, sizeof err) != 0)
    return fail(FATUNE_EDB, "%s", err);
  if (found) {
    if (stored_kernel(c, &row, fp, k, err, sizeof err)) {
      *choice = exact ? FATUNE_EXACT : FATUNE_NEAREST;
      return FATUNE_OK;
    }
    warn_ignored(&row, err);
  }
  int rc = gen_render_config(c->gen, "", fp, &c->target, k);
  if (rc != 0)
    return fail((fatune_status)rc, "no kernel for this problem: %s", gen_errmsg(c->gen));
  *choice = FATUNE_DEFAULT;
  return FATUNE_OK;
}

/* Once per context: why the compile cache cannot be used (its key is
** refused, say), since every kernel is then compiled at every start. */
static void cache_unusable(fatune_ctx *c, const char *why) {
  if (c->cache_unusable_said) return;
  c->cache_unusable_said = 1;
  fprintf(stderr, "fatune: compiling without the compile cache: %s\n", why);
}

/* The kernel's program: from the compile cache when an entry for this very
** source (hash) is there and this installation stored it (its MAC
** verifies under this user's key), else compiled and stored. */
static fatune_status program_for(fatune_ctx *c, const gen_kernel *k, fa_program **prog) {
  const char *target, *compiler, *options;
  backend_cache_key(c->be, &target, &compiler, &options);
  db_binary_key key = {k->source_hash, target, compiler, options};
  db_binary bin;
  int found = 0;
  char err[512];
  memset(&bin, 0, sizeof bin);
  int got = db_binary_get(c->db, &key, &bin, &found, err, sizeof err);
  if (got != 0) cache_unusable(c, err);
  if (got == 0 && found) {
    int rc = backend_load(c->be, k, bin.data, bin.size, prog, err, sizeof err);
    db_binary_free(&bin);
    if (rc == 0) return FATUNE_OK;
  }
  fa_build b;
  int rc = backend_compile(c->be, &k, 1, 1, &b, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "compiling %s: %s", k->name, err);
  if (!b.prog) {
    fatune_status st = fail(FATUNE_ECOMPILE, "%s does not compile: %.300s", k->name,
                            b.log ? b.log : "?");
    backend_build_free(c->be, &b);
    return st;
  }
  const void *data;
  size_t size;
  if (backend_program_blob(c->be, b.prog, &data, &size) == 0) {
    db_binary put = {.data = (unsigned char *)data, .size = size, .registers = b.registers,
                     .spill_bytes = b.spill_bytes, .smem_bytes = k->smem_bytes,
                     .compile_ms = b.compile_ms};
    db_binary_put(c->db, &key, &put, err, sizeof err);  /* a cache: failing to fill it is no error */
  }
  *prog = b.prog;
  b.prog = NULL;
  backend_build_free(c->be, &b);
  return FATUNE_OK;
}

static unsigned hash_key(const fa_problem *p) {
  const int v[5] = {(int)p->dtype, p->dim, p->seq_q, p->seq_k, p->causal};
  return (unsigned)fa_fnv1a64(FA_FNV64_OFFSET, v, sizeof v);
}

static int same_key(const slot *s, const fa_problem *p) {
  return s->used && s->dtype == p->dtype && s->dim == p->dim && s->seq_q == p->seq_q &&
         s->seq_k == p->seq_k && s->causal == p->causal;
}

/* Linear probing from the key's hash; NULL when absent. */
static slot *lookup(fatune_ctx *c, const fa_problem *p) {
  unsigned h = hash_key(p);
  for (unsigned i = 0; i < TABLE_SIZE; i++) {
    slot *s = &c->table[(h + i) % TABLE_SIZE];
    if (!s->used) return NULL;
    if (same_key(s, p)) return s;
  }
  return NULL;
}

/* A free slot for p, evicting one when the table is full. Under both locks. */
static slot *insert_slot(fatune_ctx *c, const fa_problem *p) {
  unsigned h = hash_key(p);
  for (unsigned i = 0; i < TABLE_SIZE; i++) {
    slot *s = &c->table[(h + i) % TABLE_SIZE];
    if (!s->used) return s;
  }
  /* Full: empty the whole table rather than break the probe chains. */
  for (int i = 0; i < TABLE_SIZE; i++) {
    fa_build b = {.prog = c->table[i].prog};
    backend_build_free(c->be, &b);
    gen_kernel_free(&c->table[i].k);
    memset(&c->table[i], 0, sizeof c->table[i]);
  }
  return &c->table[h % TABLE_SIZE];
}

static fatune_status prepare(fatune_ctx *c, const fa_problem *p, slot **out) {
  pthread_mutex_lock(&c->slow);
  pthread_rwlock_rdlock(&c->lock);
  slot *s = lookup(c, p);
  pthread_rwlock_unlock(&c->lock);
  fatune_status st = FATUNE_OK;
  if (!s) {
    gen_kernel k;
    fa_program *prog = NULL;
    fatune_choice choice = FATUNE_DEFAULT;
    st = choose(c, p, &k, &choice);
    if (st == FATUNE_OK && (st = program_for(c, &k, &prog)) != FATUNE_OK) gen_kernel_free(&k);
    if (st == FATUNE_OK) {
      pthread_rwlock_wrlock(&c->lock);
      s = insert_slot(c, p);
      s->dtype = p->dtype, s->dim = p->dim, s->seq_q = p->seq_q, s->seq_k = p->seq_k;
      s->causal = p->causal, s->k = k, s->prog = prog, s->choice = choice;
      s->used = 1;
      pthread_rwlock_unlock(&c->lock);
    }
  }
  pthread_mutex_unlock(&c->slow);
  *out = s;
  return st;
}

fatune_status fatune_choose(fatune_ctx *c, const fatune_problem *p, char *name, size_t n,
                            fatune_choice *choice) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fatune_status st = check_problem(p);
  if (st != FATUNE_OK) return st;
  fa_problem fp = to_problem(p);
  slot *s;
  if ((st = prepare(c, &fp, &s)) != FATUNE_OK) return st;
  pthread_rwlock_rdlock(&c->lock);
  if (name && n) snprintf(name, n, "%s", s->k.name);
  if (choice) *choice = s->choice;
  pthread_rwlock_unlock(&c->lock);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

/* ---- The hot path ---- */

/* Q, K, V and O aligned as the kernel's widest access to them needs (16
** bytes for the tensor-core kernels' cp.async and 16-byte stores), the
** logsumexp to its element: a misaligned pointer is the caller's error,
** not a launch fault. */
static fatune_status check_alignment(const gen_kernel *k, const fa_problem *p,
                                     const void *const ptr[5]) {
  static const char *const what[5] = {"q", "k", "v", "o", "lse"};
  for (int i = 0; i < 5; i++) {
    const uintptr_t align = (uintptr_t)(i < 4 ? k->io_align : fa_lse_size(p->dtype));
    if (ptr[i] && (uintptr_t)ptr[i] % align)
      return fail(FATUNE_EINVAL, "%s is not %d-byte aligned (%p): the kernel for dim %d %s "
                  "%s %d bytes at a time", what[i], (int)align, ptr[i], p->dim,
                  fa_dtype_name(p->dtype), i < 3 ? "loads" : "stores", (int)align);
  }
  return FATUNE_OK;
}

fatune_status fatune_attention_forward(fatune_ctx *c, const fatune_problem *p, const void *q,
                                       const void *k, const void *v, void *o, void *lse,
                                       void *stream) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fatune_status st = check_problem(p);
  if (st != FATUNE_OK) return st;
  if (!q || !k || !v || !o) return fail(FATUNE_EINVAL, "q, k, v and o must not be NULL");
  fa_problem fp = to_problem(p);
  pthread_rwlock_rdlock(&c->lock);
  slot *s = lookup(c, &fp);
  if (!s) {
    pthread_rwlock_unlock(&c->lock);
    if ((st = prepare(c, &fp, &s)) != FATUNE_OK) return st;
    pthread_rwlock_rdlock(&c->lock);
    s = lookup(c, &fp);  /* another thread may have emptied the table meanwhile */
    if (!s) {
      pthread_rwlock_unlock(&c->lock);
      return fail(FATUNE_ENOMEM, "the kernel table is being refilled; call again");
    }
  }
  const void *const ptrs[5] = {q, k, v, o, lse};
  if ((st = check_alignment(&s->k, &fp, ptrs)) != FATUNE_OK) {
    pthread_rwlock_unlock(&c->lock);
    return st;
  }
  gen_launch shape;
  gen_launch_shape(&s->k, &fp, &shape);
  char err[512];
  void *ws = NULL, *lse_buf = lse;
  const size_t es = (size_t)fa_dtype_size(fp.dtype), ls = (size_t)fa_lse_size(fp.dtype);
  const size_t rows = (size_t)fp.batch * fp.heads * fp.seq_q;
  /* Kernels always write the logsumexp: a scratch one when the caller has none. */
  int rc = 0;
  if ((shape.ws_bytes && (rc = backend_alloc(c->be, shape.ws_bytes, &ws, err, sizeof err))) ||
      (!lse && (rc = backend_alloc(c->be, rows * ls, &lse_buf, err, sizeof err)))) {
    pthread_rwlock_unlock(&c->lock);
    backend_free(c->be, ws);
    return fail((fatune_status)rc, "%s", err);
  }
  fa_params a = attn_params(&fp, q, k, v, o, lse_buf, ws);
  /* On the emulator the caller's buffers are host memory the kernel may touch. */
  const size_t kv = (size_t)fp.batch * fp.heads * fp.seq_k * fp.dim * es;
  const fa_emu_range extra[5] = {
    {(uintptr_t)q, (uintptr_t)q + rows * fp.dim * es}, {(uintptr_t)k, (uintptr_t)k + kv},
    {(uintptr_t)v, (uintptr_t)v + kv}, {(uintptr_t)o, (uintptr_t)o + rows * fp.dim * es},
    {(uintptr_t)lse_buf, (uintptr_t)lse_buf + rows * ls}};
  fa_run_opts ro = {.schedule = EMU_FORWARD, .threads = 1, .smem_fill = 0xFF, .extra = extra,
                    .nextra = 5, .stream = stream, .async = ws == NULL && lse_buf == lse};
  rc = backend_launch(c->be, s->prog, &shape, &a, &ro, NULL, err, sizeof err);
  pthread_rwlock_unlock(&c->lock);
  backend_free(c->be, ws);
  if (lse_buf != lse) backend_free(c->be, lse_buf);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  errbuf[0] = '\0';
  return FATUNE_OK;
}
