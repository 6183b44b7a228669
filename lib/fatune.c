/*
** fatune.c
** libfatune (fatune.h). The hot path is a lookup in an in-process table
** under a read lock, the launch shape, and the launch; everything else
** (choosing the variant, rendering it, the compile cache) happens once per
** problem key, under the context's lock.
*/
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "db.h"
#include "fa_mod.h"
#include "fa_util.h"
#include "fatune.h"

#define TABLE_SIZE 256   /* problem keys kept in memory; a full table starts over */
#define LOG2E 1.4426950408889634074

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

/* What a call asks of the variant besides its problem: an error budget
** (0: none) and determinism (fatune_attention_args). */
typedef struct budget {
  double max_rel_err;
  int deterministic;
} budget;

struct fatune_mod {
  fa_mod m;
  fatune_ctx *c;               /* its creator, whose device holds the tensors */
  pthread_mutex_t lock;        /* the tensors and the block mask, which calls may share */
  void *host[FA_MOD_MAX_TENSORS], *dev[FA_MOD_MAX_TENSORS];
  int set[FA_MOD_MAX_TENSORS]; /* fatune_mod_set_tensor gave it */
  fa_mod_data data;            /* over host: what block masks are built from */
  long long version;           /* of the tensors' contents: one more at each set */
  long long bm_key[5];         /* batch, heads, seq_q, seq_k, version of bm_dev's */
  void *bm_dev;                /* the block mask of the last dense shape, or NULL */
  fa_mod_mask_dims bm;
};

/* The hash of p's modification, "" for none. */
static const char *mod_hash(const fa_problem *p) { return p->mod ? p->mod->hash : ""; }

/* One problem key (op and modification included, and the budget) and the
** kernel chosen for it. */
typedef struct slot {
  int used;
  fa_op op;
  fa_dtype dtype;
  int dim, dim_v, seq_q, seq_k, causal;
  int batch, kv_group, page;   /* op decode's key (bwd: kv_group); 0 for the other ops */
  int varlen;                  /* a variable-length batch's kernel (op fwd) */
  int paged;                   /* a KV cache's forward kernel (op fwd) */
  int blockscale;              /* fp8's descales per block of rows (wg's blockscale form) */
  int append;                  /* op decode with new keys: ak and aprog append them */
  char mod[17];
  budget b;
  gen_kernel k, ak;
  fa_program *prog, *aprog;
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
  int read_only;              /* the database is read-only: no compile cache */
  int cache_unusable_said;    /* the compile cache's refusal went to stderr */
  pthread_rwlock_t scratch_lock; /* the scratch logsumexp: read-held by each call that
                                    uses it until its launch is queued */
  void *scratch;
  size_t scratch_bytes;
  atomic_int used;            /* a call entered the device: close must too */
  atomic_llong programs;      /* made ready: compiled, or loaded from the compile cache */
  slot table[TABLE_SIZE];
};

/* ---- Opening ---- */

/* A database the user may not write (see db_read_only) is opened read-only
** and run without the compile cache: kernels are compiled in memory by each
** process, and nothing is written, not even a switch to WAL. */
static int open_db(fatune_ctx *c, const char *path, char *err, size_t n) {
  char def[4096];
  if (!path) {
    if (db_default_path(def, sizeof def, err, n) != 0) return -1;
    path = def;
  }
  c->read_only = db_read_only(path);
  return db_open(path, c->read_only ? DB_READONLY : DB_CREATE, &c->db, err, n);
}

fatune_status fatune_open(const fatune_options *opts, fatune_ctx **out) {
  *out = NULL;
  errbuf[0] = '\0';
  fatune_ctx *c = calloc(1, sizeof *c);
  if (!c) return fail(FATUNE_ENOMEM, "out of memory");
  pthread_rwlock_init(&c->lock, NULL);
  pthread_mutex_init(&c->slow, NULL);
  pthread_rwlock_init(&c->scratch_lock, NULL);
  char err[512], note[256];
  const char *bk = opts && opts->backend ? opts->backend : "auto";
  int device = opts && strcmp(bk, "emu") ? opts->device : 0;
  fatune_status st = FATUNE_OK;
  int rc;
  /* "auto" without a current context takes GPU 0, or the emulator. */
  if (device == FATUNE_DEVICE_CURRENT && backend_current_gpu(&device, err, sizeof err) != 0) {
    if (!strcmp(bk, "cuda")) st = fail(FATUNE_ENODEV, "%s", err);
    device = 0;
  }
  if (st == FATUNE_OK && device < 0)
    st = fail(FATUNE_EINVAL, "bad device %d (an index from 0, or FATUNE_DEVICE_CURRENT)",
              device);
  if (st != FATUNE_OK) {
    fatune_close(c);
    return st;
  }
  /* Probed here: a framework's process may have initialised CUDA already. */
  if ((rc = backend_open_device(bk, device, 1, &c->be, note, sizeof note, err, sizeof err)) ||
      (rc = gen_open(&c->gen, err, sizeof err)) != 0) {
    st = fail((fatune_status)rc, "%s", err);
  } else if (open_db(c, opts ? opts->db_path : NULL, err, sizeof err) != 0) {
    st = fail(FATUNE_EDB, "%s", err);
  } else {
    const fa_device *d = backend_device(c->be);
    char arch[16], base[16], why[256];
    /* The emulator emulates the tuner's default target, or the one
    ** options' emu_arch, else FATUNE_EMU_ARCH, names (sm_90a: the Hopper
    ** family's kernels, fp8's among them). */
    const int given = opts && opts->emu_arch;
    const char *emu_arch = d ? NULL : given ? opts->emu_arch : getenv("FATUNE_EMU_ARCH");
    const char *whence = given ? "emu_arch" : "FATUNE_EMU_ARCH";
    if (!emu_arch || !*emu_arch) emu_arch = NULL;
    snprintf(arch, sizeof arch, "%s", emu_arch ? emu_arch : gen_default_arch(c->gen));
    snprintf(c->device, sizeof c->device, "%s", d ? d->uuid : "emu");
    /* What the tuner targets. */
    if (emu_arch && strlen(emu_arch) >= sizeof arch)
      st = fail(FATUNE_EINVAL, "%s is %zu characters: an arch as sm_90a", whence,
                strlen(emu_arch));
    else if ((d && gen_device_arch(c->gen, backend_device_arch(d, base, sizeof base), arch,
                                   sizeof arch, why, sizeof why) != 0) ||
             gen_target_for_arch(c->gen, arch, d ? d->smem_per_block_optin : 0, 0, &c->target) != 0)
      st = emu_arch ? fail(FATUNE_EINVAL, "%s: %s", whence, gen_errmsg(c->gen))
                    : fail(FATUNE_ENODEV, "this GPU is not one fatune knows: %s", gen_errmsg(c->gen));
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
  char err[512];
  /* The device's context for freeing what is on it; the caller's kept. */
  const int entered = atomic_load(&c->used) && backend_enter(c->be, err, sizeof err) == 0;
  if (c->be) backend_free(c->be, c->scratch);
  for (int i = 0; i < TABLE_SIZE; i++)
    if (c->table[i].used) {
      if (c->table[i].prog) {
        fa_build b = {.prog = c->table[i].prog}, ab = {.prog = c->table[i].aprog};
        backend_build_free(c->be, &b);
        backend_build_free(c->be, &ab);
      }
      gen_kernel_free(&c->table[i].k);
      gen_kernel_free(&c->table[i].ak);
    }
  if (entered) backend_leave(c->be);
  if (c->db) db_close(c->db);
  gen_close(c->gen);
  backend_close(c->be);
  pthread_rwlock_destroy(&c->lock);
  pthread_mutex_destroy(&c->slow);
  pthread_rwlock_destroy(&c->scratch_lock);
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
  if (p->dim_v < 0 || p->dim_v > FA_DIM_MAX)
    return fail(FATUNE_EINVAL, "bad V head dim %d (1 to %d, or 0: dim)", p->dim_v, FA_DIM_MAX);
  if ((unsigned)p->dtype > FATUNE_E4M3) return fail(FATUNE_EINVAL, "bad dtype %d", (int)p->dtype);
  /* The kernels of every dtype but fp64 carry scale * log2(e) as a float. */
  if (!(p->scale >= 0 && p->scale * LOG2E <= FLT_MAX))
    return fail(FATUNE_EINVAL, "scale %g is out of range: 0 (1/sqrt(dim)) or a positive "
                "number at most %.3g (FLT_MAX / log2(e))", p->scale, FLT_MAX / LOG2E);
  return FATUNE_OK;
}

static fa_problem to_problem(const fatune_problem *p) {
  fa_problem q = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                  .dim = p->dim, .dtype = (fa_dtype)p->dtype, .causal = p->causal ? 1 : 0,
                  .scale = p->scale, .dim_v = p->dim_v == p->dim ? 0 : p->dim_v,
                  .mod = p->mod ? &p->mod->m : NULL};
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
  if (gen_set_mod(c->gen, fp->mod) != 0 ||
      gen_render_config(c->gen, row->config_kv, fp, &c->target, k) != 0) {
    snprintf(why, n, "%s", gen_errmsg(c->gen));
    gen_set_mod(c->gen, NULL);
    return 0;
  }
  gen_set_mod(c->gen, NULL);
  if (gen_kernel_fits(k, fp, why, n)) return 1;
  gen_kernel_free(k);
  return 0;
}

/* A library says nothing unless asked: FATUNE_VERBOSE set and not empty. */
static int verbose(void) {
  const char *v = getenv("FATUNE_VERBOSE");
  return v && *v;
}

static void warn_ignored(const db_best_row *row, const char *why) {
  if (verbose())
    fprintf(stderr, "fatune: ignoring the stored variant %.160s: %s; running the default\n",
            row->variant, why);
}

/* Once per key, as its kernel is kept: which default runs, untuned. */
static void say_default(const db_problem *dp, int grouped, const gen_kernel *k) {
  if (!verbose()) return;
  char dims[24];
  fa_dims_text(dp->dim, dp->dim_v, dims, sizeof dims);
  fprintf(stderr, "fatune: nothing recorded for op %s %s dim %s seq %d/%d%s%s; running the "
          "default %s\n", dp->op, dp->dtype, dims, dp->seq_q, dp->seq_k, dp->causal ? " causal" : "",
          grouped ? " under GQA" : "", k->name);
}

/* Under GQA, a backward default that runs a CTA per K/V head, with fewer
** of them than the GPU has SMs, leaves SMs idle: at 2k tokens, 32 heads in
** groups of 8, d128 on an H100, tcbwd's default makes 64 CTAs and 113
** TFLOP/s by the timing model, its qhead=1 form (a CTA per query head,
** dK and dV summed after) 215; from a full wave on the two are even, and
** qhead=1 costs a float workspace per query head (README). The family's
** defaults cannot choose by the GPU: a key left out of canonical text
** means its absent value. A family without the axis keeps its default. */
static void spread_query_heads(fatune_ctx *c, const fa_problem *fp, gen_kernel *k) {
  const fa_device *d = backend_device(c->be);
  if (fp->op != FA_OP_BWD || fa_problem_group(fp) < 2 || !d) return;
  int per_kv = 0;
  for (int i = 0; i < 3; i++) per_kv |= k->launch[k->main].grid[i].by == GEN_GRID_KV_HEADS;
  gen_launch l;
  gen_launch_shape(k, k->main, fp, &l);
  if (!per_kv || (long long)l.grid[0] * l.grid[1] * l.grid[2] >= d->sm_count) return;
  char text[1024];
  if (snprintf(text, sizeof text, "%s,qhead=1", k->config) >= (int)sizeof text) return;
  gen_kernel spread;
  memset(&spread, 0, sizeof spread);
  if (gen_render_config(c->gen, text, fp, &c->target, &spread) != 0) return;
  gen_kernel_free(k);
  *k = spread;
}

/* Decoding whose group has more query rows than tcdec's 16-row tile (GQA
** with several new tokens): the default runs two CTAs or more a group,
** each copying the K/V head's blocks; its rows=32 form runs one of two
** tiles a 32 rows. Past head dim 128 with 8 warps, 4 a tile: O holds 128
** registers a thread there, and a warp's 32 keys of a 64-key block take
** it to 255. By the timing model, 4 new tokens under GQA 8 on an H100: d128
** 26.0 us, 22.0 as rows=32; d256 78.8, 69.8 with 4 warps, 42.2 with 8
** (README). As for spread_query_heads, the family's defaults cannot say
** it. */
static void widen_decode_rows(fatune_ctx *c, const fa_problem *fp, gen_kernel *k) {
  if (fp->op != FA_OP_DECODE || strcmp(k->cfg.family, "tcdec") ||
      (long long)fa_problem_group(fp) * fp->seq_q <= 16)
    return;
  /* the family's defaults but for these (the default rendered them) */
  const char *text = fa_problem_dim_v(fp) > 128 ? "family=tcdec,rows=32,warps=8"
                                                 : "family=tcdec,rows=32";
  gen_kernel wide;
  memset(&wide, 0, sizeof wide);
  if (gen_render_config(c->gen, text, fp, &c->target, &wide) != 0) return;
  gen_kernel_free(k);
  *k = wide;
}

/* The rows of the largest box of wg's KV cache form (16, 32, 64 or 128
** rows, each within a page) that p's page size takes; 0: none. */
static int page_box(const fa_problem *p) {
  const int page = fa_problem_page(p);
  int rows = 0;
  for (int r = 16; r <= 128; r *= 2)
    if (page % r == 0) rows = r;
  return rows;
}

/* A KV cache's forward form as the slots key it (the choice depends on the
** page size through page_box alone): 0 none, else 1 + page_box. */
static int paged_key(const fa_problem *p) { return !p->paged ? 0 : 1 + page_box(p); }

/* cfg as config text with key set to value (NULL: left out) into out. */
static int config_with(const gen_config *cfg, const char *key, const char *value, char *out,
                       size_t n) {
  size_t used = (size_t)snprintf(out, n, "family=%s", cfg->family);
  for (int i = 0; i < cfg->n && used < n; i++)
    if (strcmp(cfg->pair[i].key, key))
      used += (size_t)snprintf(out + used, n - used, ",%s=%s", cfg->pair[i].key,
                               cfg->pair[i].value);
  if (value && used < n) used += (size_t)snprintf(out + used, n - used, ",%s=%s", key, value);
  return used < n ? 0 : -1;
}

/* wg's KV cache form for p's page size: its boxes of page_rows rows, each
** within a page (attn_tmaps refuses a page size of no multiple), the most
** that the page size and the tile's block_n allow: at d64 192x192 on an
** H100, boxes of 64 rows ran 1.3x those of 16 by the timing model (fewer
** boxes for the producer to issue, README). Pages of no multiple of 16
** rows run tc's form, which copies any page size. */
static void fit_page_boxes(fatune_ctx *c, const fa_problem *fp, gen_kernel *k) {
  if (!fp->paged || strcmp(k->cfg.family, "wg")) return;
  const int box = page_box(fp);
  char text[1024] = "family=tc";
  if (box) {
    const char *bn = gen_config_get(&k->cfg, "block_n"), *pr = gen_config_get(&k->cfg, "page_rows");
    const int n = bn ? atoi(bn) : 0, now = pr ? atoi(pr) : 16;
    int rows = 16;
    for (int r = 32; r <= box; r *= 2)
      if (n % r == 0) rows = r;
    char v[16];
    snprintf(v, sizeof v, "%d", rows);
    if (rows == now || config_with(&k->cfg, "page_rows", rows == 16 ? NULL : v, text,
                                   sizeof text))
      return;
  }
  gen_kernel fit;
  memset(&fit, 0, sizeof fit);
  if (gen_render_config(c->gen, text, fp, &c->target, &fit) != 0) return;
  gen_kernel_free(k);
  *k = fit;
}

/* Render the variant for p: the database's choice when it fits p, else the
** default. The templates and the problem, not the database, decide what
** runs: a stored config for another dim, dtype, mask or family would read
** and write out of bounds or compute another problem. */
static fatune_status choose(fatune_ctx *c, const fa_problem *fp, const budget *bud, gen_kernel *k,
                            fatune_choice *choice) {
  db_problem dp = {.dtype = fa_dtype_name(fp->dtype), .dim = fp->dim, .seq_q = fp->seq_q,
                   .seq_k = fp->seq_k, .batch = fp->batch, .heads = fp->heads,
                   .causal = fp->causal, .op = fa_op_name(fp->op),
                   .max_rel_err = bud->max_rel_err, .deterministic = bud->deterministic,
                   .dim_v = fa_problem_dim_v(fp), .mod = fp->mod ? fp->mod->hash : NULL};
  const fa_key_extra ek = fa_problem_key_extra(fp);
  dp.req_batch = ek.batch, dp.kv_group = ek.kv_group, dp.page = ek.page;
  db_best_row row;
  int found = 0, exact = 0;
  char err[512];
  if (db_best(c->db, c->device, &dp, &row, &found, &exact, err, sizeof err) != 0)
    return fail(FATUNE_EDB, "%s", err);
  /* The backward pass under GQA with nothing tuned for its ratio: what was
  ** tuned without GQA (every variant computes both), as the nearest. */
  if (!found && fp->op == FA_OP_BWD && dp.kv_group > 1) {
    dp.kv_group = 1;
    if (db_best(c->db, c->device, &dp, &row, &found, &exact, err, sizeof err) != 0)
      return fail(FATUNE_EDB, "%s", err);
    exact = 0;
  }
  if (found) {
    if (stored_kernel(c, &row, fp, k, err, sizeof err)) {
      fit_page_boxes(c, fp, k);
      *choice = exact ? FATUNE_EXACT : FATUNE_NEAREST;
      return FATUNE_OK;
    }
    if (bud->max_rel_err > 0 || bud->deterministic)
      return fail(FATUNE_ENOTUNED, "the variant recorded within the budget, %s, cannot run "
                  "here: %s", row.variant, err);
    warn_ignored(&row, err);
  }
  /* The default's errors on the suite are not known: a budget is not met. */
  if (bud->max_rel_err > 0 || bud->deterministic) {
    char words[80];
    db_budget_text(&dp, words, sizeof words);
    char dims[24];
    fa_dims_text(dp.dim, dp.dim_v, dims, sizeof dims);
    const int bwd = fp->op == FA_OP_BWD;
    return fail(FATUNE_ENOTUNED, "nothing recorded for %s dim %s%s%s meets %s: tune it (the main "
                "job%s records each variant's errors on the adversarial suite)", dp.dtype, dims,
                dp.causal ? " causal" : "", bwd ? ", the backward pass," : "", words,
                bwd ? " with --op bwd" : "");
  }
  int rc = gen_set_mod(c->gen, fp->mod);
  if (rc == 0) rc = gen_render_config(c->gen, "", fp, &c->target, k);
  if (rc == 0) spread_query_heads(c, fp, k);
  if (rc == 0) widen_decode_rows(c, fp, k);
  if (rc == 0) fit_page_boxes(c, fp, k);
  if (rc != 0) {
    /* fp8 needs Hopper's wgmma: said in words a user acts on. */
    fatune_status st =
      fp->dtype == FA_E4M3 && strcmp(c->target.arch, "sm_90a")
        ? fail((fatune_status)rc, "no kernel for e4m3 (fp8) on %s: only the Hopper family (wg) "
               "computes fp8, on sm_90a (an H100 or H200; the emulator opened with emu_arch "
               "\"sm_90a\" or FATUNE_EMU_ARCH=sm_90a) (%s)", c->target.arch, gen_errmsg(c->gen))
        : fail((fatune_status)rc, "no kernel for this problem: %s", gen_errmsg(c->gen));
    gen_set_mod(c->gen, NULL);
    return st;
  }
  gen_set_mod(c->gen, NULL);
  say_default(&dp, fa_problem_group(fp) > 1, k);
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
** verifies under this user's key), else compiled and stored; with a
** read-only database, compiled and nothing more. */
static fatune_status program_for(fatune_ctx *c, const gen_kernel *k, fa_program **prog) {
  atomic_fetch_add(&c->programs, 1);
  const char *target, *compiler, *options;
  backend_cache_key(c->be, &target, &compiler, &options);
  db_binary_key key = {k->source_hash, target, compiler, options};
  db_binary bin;
  int found = 0;
  char err[512];
  memset(&bin, 0, sizeof bin);
  int got = -1;
  if (c->read_only) snprintf(err, sizeof err, "%s is read-only", db_path(c->db));
  else got = db_binary_get(c->db, &key, &bin, &found, err, sizeof err);
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
  if (!c->read_only && backend_program_blob(c->be, b.prog, &data, &size) == 0) {
    db_binary put = {.data = (unsigned char *)data, .size = size, .registers = b.registers,
                     .spill_bytes = b.spill_bytes, .smem_bytes = b.smem_static_bytes,
                     .compile_ms = b.compile_ms};
    db_binary_put(c->db, &key, &put, err, sizeof err);  /* a cache: failing to fill it is no error */
  }
  *prog = b.prog;
  b.prog = NULL;
  backend_build_free(c->be, &b);
  return FATUNE_OK;
}

static unsigned hash_key(const fa_problem *p, const budget *b) {
  const fa_key_extra ek = fa_problem_key_extra(p);
  const int v[15] = {(int)p->op, (int)p->dtype, p->dim, p->seq_q, p->seq_k, p->causal,
                     b->deterministic, fa_problem_dim_v(p), ek.batch, ek.kv_group, ek.page, p->varlen,
                     p->append, paged_key(p), p->descale_rows > 0};
  uint64_t h = fa_fnv1a64(FA_FNV64_OFFSET, v, sizeof v);
  h = fa_fnv1a64(h, mod_hash(p), strlen(mod_hash(p)));
  return (unsigned)fa_fnv1a64(h, &b->max_rel_err, sizeof b->max_rel_err);
}

static int same_key(const slot *s, const fa_problem *p, const budget *b) {
  const fa_key_extra ek = fa_problem_key_extra(p);
  return s->used && s->op == p->op && s->dtype == p->dtype && s->dim == p->dim &&
         s->batch == ek.batch && s->kv_group == ek.kv_group && s->page == ek.page &&
         s->varlen == p->varlen &&
         s->paged == paged_key(p) && s->blockscale == (p->descale_rows > 0) &&
         s->append == p->append &&
         s->dim_v == fa_problem_dim_v(p) && s->seq_q == p->seq_q &&
         s->seq_k == p->seq_k && s->causal == p->causal && !strcmp(s->mod, mod_hash(p)) &&
         s->b.max_rel_err == b->max_rel_err && s->b.deterministic == b->deterministic;
}

/* Linear probing from the key's hash; NULL when absent. */
static slot *lookup(fatune_ctx *c, const fa_problem *p, const budget *b) {
  unsigned h = hash_key(p, b);
  for (unsigned i = 0; i < TABLE_SIZE; i++) {
    slot *s = &c->table[(h + i) % TABLE_SIZE];
    if (!s->used) return NULL;
    if (same_key(s, p, b)) return s;
  }
  return NULL;
}

/* Every slot emptied, its kernel freed. Under both locks. */
static void table_clear(fatune_ctx *c) {
  for (int i = 0; i < TABLE_SIZE; i++) {
    fa_build b = {.prog = c->table[i].prog}, ab = {.prog = c->table[i].aprog};
    backend_build_free(c->be, &b);
    backend_build_free(c->be, &ab);
    gen_kernel_free(&c->table[i].k);
    gen_kernel_free(&c->table[i].ak);
    memset(&c->table[i], 0, sizeof c->table[i]);
  }
}

/* A free slot for p, evicting one when the table is full. Under both locks. */
static slot *insert_slot(fatune_ctx *c, const fa_problem *p, const budget *b) {
  unsigned h = hash_key(p, b);
  for (unsigned i = 0; i < TABLE_SIZE; i++) {
    slot *s = &c->table[(h + i) % TABLE_SIZE];
    if (!s->used) return s;
  }
  /* Full: empty the whole table rather than break the probe chains. */
  table_clear(c);
  return &c->table[h % TABLE_SIZE];
}

/* Op decode's kernel that appends new keys and values (templates/append.lua)
** for p, and its program. Under the slow lock. */
static fatune_status append_kernel(fatune_ctx *c, const fa_problem *p, gen_kernel *ak,
                                   fa_program **aprog) {
  if (gen_render_append(c->gen, p, ak) != 0)
    return fail(FATUNE_EINTERNAL, "the append kernel: %s", gen_errmsg(c->gen));
  fatune_status st = program_for(c, ak, aprog);
  if (st != FATUNE_OK) gen_kernel_free(ak);
  return st;
}

/* The slot for p, built and put in the table when it is not there yet. On
** success the table's read lock is held and the slot stays as it is until
** the caller releases it: only a holder of the slow lock empties the
** table, and the read lock is taken before the slow lock is let go. */
static fatune_status prepare(fatune_ctx *c, const fa_problem *p, const budget *b, slot **out) {
  pthread_mutex_lock(&c->slow);
  pthread_rwlock_rdlock(&c->lock);
  slot *s = lookup(c, p, b);
  fatune_status st = FATUNE_OK;
  if (!s) {
    pthread_rwlock_unlock(&c->lock);
    gen_kernel k;
    fa_program *prog = NULL;
    fatune_choice choice = FATUNE_DEFAULT;
    gen_kernel ak;
    fa_program *aprog = NULL;
    memset(&ak, 0, sizeof ak);
    st = choose(c, p, b, &k, &choice);
    if (st == FATUNE_OK && (st = program_for(c, &k, &prog)) != FATUNE_OK) gen_kernel_free(&k);
    if (st == FATUNE_OK && p->append && (st = append_kernel(c, p, &ak, &aprog)) != FATUNE_OK) {
      fa_build bd = {.prog = prog};
      backend_build_free(c->be, &bd);
      gen_kernel_free(&k);
    }
    if (st == FATUNE_OK) {
      pthread_rwlock_wrlock(&c->lock);
      s = insert_slot(c, p, b);
      s->b = *b;
      s->op = p->op, s->dtype = p->dtype, s->dim = p->dim, s->seq_q = p->seq_q, s->seq_k = p->seq_k;
      s->dim_v = fa_problem_dim_v(p);
      const fa_key_extra ek = fa_problem_key_extra(p);
      s->batch = ek.batch, s->kv_group = ek.kv_group, s->page = ek.page;
      s->varlen = p->varlen, s->paged = paged_key(p), s->blockscale = p->descale_rows > 0;
      s->causal = p->causal, s->k = k, s->prog = prog, s->choice = choice;
      s->append = p->append, s->ak = ak, s->aprog = aprog;
      snprintf(s->mod, sizeof s->mod, "%s", mod_hash(p));
      s->used = 1;
      pthread_rwlock_unlock(&c->lock);
      pthread_rwlock_rdlock(&c->lock);
    }
  }
  pthread_mutex_unlock(&c->slow);
  *out = s;
  return st;
}

/* The slot for p: found under the table's read lock without the slow one
** (every call after the first), else built by prepare. On success the
** read lock is held. */
static fatune_status slot_for(fatune_ctx *c, const fa_problem *p, const budget *b, slot **out) {
  pthread_rwlock_rdlock(&c->lock);
  if ((*out = lookup(c, p, b)) != NULL) return FATUNE_OK;
  pthread_rwlock_unlock(&c->lock);
  return prepare(c, p, b, out);
}

fatune_status fatune_choose(fatune_ctx *c, const fatune_problem *p, char *name, size_t n,
                            fatune_choice *choice) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fatune_status st = check_problem(p);
  if (st != FATUNE_OK) return st;
  fa_problem fp = to_problem(p);
  slot *s;
  const budget none = {0, 0};
  if ((st = prepare(c, &fp, &none, &s)) != FATUNE_OK) return st;
  if (name && n) snprintf(name, n, "%s", s->k.name);
  if (choice) *choice = s->choice;
  pthread_rwlock_unlock(&c->lock);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

fatune_status fatune_forget(fatune_ctx *c) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  /* The write lock waits for the calls in flight, which hold the read lock. */
  pthread_mutex_lock(&c->slow);
  pthread_rwlock_wrlock(&c->lock);
  table_clear(c);
  pthread_rwlock_unlock(&c->lock);
  pthread_mutex_unlock(&c->slow);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

/* ---- The hot path ---- */

static const char *const tensor_name[4] = {"q", "k", "v", "o"};
static const char *const dim_name[4] = {"batch", "heads", "seq", "dim"};

/* Bytes per element of a tensor of the call: its own dtype's (O's is bf16
** beside e4m3 inputs). Only for dtypes check_tensor took. */
static size_t tensor_elem(const fatune_tensor *t) {
  return (size_t)fa_dtype_size((fa_dtype)t->dtype);
}

/* The bytes from a tensor's first element to the end of its last. */
static size_t extent(const fatune_tensor *t, size_t es) {
  size_t last = 0;
  for (int d = 0; d < 4; d++) last += (size_t)(t->shape[d] - 1) * (size_t)t->stride[d];
  return (last + 1) * es;
}

/* Two elements of O in one place would be written by two threads: with
** its dims taken from the smallest stride up, each stride must step over
** all the elements the dims before it span. Every usual layout passes; a
** few exotic interleavings of distinct elements are refused too. */
static fatune_status check_distinct(const char *name, const fatune_tensor *o) {
  int order[4] = {3, 2, 1, 0};   /* equal strides: dim inside seq inside heads inside batch */
  for (int i = 1; i < 4; i++)
    for (int j = i; j > 0 && o->stride[order[j]] < o->stride[order[j - 1]]; j--) {
      const int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  long long span = 1;   /* elements from the first to past the last, over the dims so far */
  for (int i = 0; i < 4; i++) {
    const int d = order[i];
    if (o->shape[d] == 1) continue;
    if (o->stride[d] < span)
      return fail(FATUNE_EINVAL, "%s's stride %d (%s) is %lld, inside the %lld elements "
                  "spanned by the dims of smaller stride: %s's elements overlap (two threads "
                  "would write one)", name, d, dim_name[d], o->stride[d], span, name);
    span += (o->shape[d] - 1) * o->stride[d];
  }
  return FATUNE_OK;
}

/* The floats each of q's, k's and v's descales holds (fatune_attention_args). */
static void descale_counts(const fatune_attention_args *x, const fatune_problem *p, size_t n[3]) {
  const fa_problem fp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q,
                         .seq_k = p->seq_k, .kv_group = (int)(x->q.shape[1] / x->k.shape[1]),
                         .descale_rows = x->descale_rows};
  fa_problem_descales(&fp, n);
}

/* What the kernel writes (O and lse) shares no byte with anything else it
** reads or writes: another CTA could read an input after it was
** overwritten. By the spans from first to last byte, which refuses a few
** interleaved layouts that would be safe, as no exact test is cheap. */
static fatune_status check_overlaps(const fatune_attention_args *x, const fatune_problem *p) {
  static const char *const name[8] = {"q", "k", "v", "o", "lse", "q_descale", "k_descale",
                                      "v_descale"};
  const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
  uintptr_t lo[8], hi[8];
  for (int i = 0; i < 4; i++)
    lo[i] = (uintptr_t)t[i]->data, hi[i] = lo[i] + extent(t[i], tensor_elem(t[i]));
  lo[4] = (uintptr_t)x->lse;
  hi[4] = lo[4] + (size_t)p->batch * p->heads * p->seq_q * fa_lse_size((fa_dtype)p->dtype);
  /* The descales are read too (none: an empty span). */
  const float *const ds[3] = {x->q_descale, x->k_descale, x->v_descale};
  size_t n[3];
  descale_counts(x, p, n);
  for (int i = 0; i < 3; i++)
    lo[5 + i] = (uintptr_t)ds[i], hi[5 + i] = ds[i] ? lo[5 + i] + n[i] * sizeof(float) : lo[5 + i];
  for (int w = 3; w < (x->lse ? 5 : 4); w++)   /* o, then lse */
    for (int i = 0; i < 8; i++)
      if (i != w && (i < w || i >= 5) && lo[w] < hi[i] && lo[i] < hi[w])
        return fail(FATUNE_EINVAL, "%s overlaps %s (%p to %p, and %p to %p): the kernel "
                    "writes %s", name[w], name[i], (void *)lo[w], (void *)hi[w],
                    (void *)lo[i], (void *)hi[i], name[w]);
  return FATUNE_OK;
}

/* One tensor of a call: there, of the call's dtype, its shape and strides
** in range, the head dim contiguous. */
static fatune_status check_tensor(const char *name, const fatune_tensor *t, fatune_dtype dtype) {
  if (!t->data) return fail(FATUNE_EINVAL, "%s is NULL", name);
  if (t->dtype != dtype)
    return fail(FATUNE_EINVAL, "%s's dtype %d is not q's %d", name, (int)t->dtype, (int)dtype);
  for (int d = 0; d < 4; d++) {
    if (t->shape[d] < 1 || t->shape[d] > (1 << 24))
      return fail(FATUNE_EINVAL, "%s's %s is %lld (1 to 2^24)", name, dim_name[d], t->shape[d]);
    if (t->stride[d] < 0 || t->stride[d] > (1LL << 48))
      return fail(FATUNE_EINVAL, "%s's stride %d (%s) is %lld: strides are 0 to 2^48", name, d,
                  dim_name[d], t->stride[d]);
  }
  if (t->stride[3] != 1 && t->shape[3] > 1)
    return fail(FATUNE_EINVAL, "%s's stride 3 (dim) is %lld: the head dim must be contiguous",
                name, t->stride[3]);
  /* Its last element's offset, which the emulator's bounds need, fits. */
  long long last = 0;
  for (int d = 0; d < 4; d++) {
    if (t->stride[d] && t->shape[d] - 1 > ((1LL << 48) - last) / t->stride[d])
      return fail(FATUNE_EINVAL, "%s spans more than 2^48 elements", name);
    last += (t->shape[d] - 1) * t->stride[d];
  }
  return FATUNE_OK;
}

/* fp8 (e4m3) runs through fatune_attention (and _forward) alone: the
** forward pass over dense batches, as FlashAttention-3's fp8. Every other
** call refuses it, saying so, before anything else is read. */
static fatune_status no_fp8(const fatune_tensor *q, const char *call) {
  if (q->dtype != FATUNE_E4M3) return FATUNE_OK;
  return fail(FATUNE_EINVAL, "%s takes no e4m3 (fp8): fp8 runs the forward pass over dense "
              "batches alone (fatune_attention); give fp16, bf16, fp32 or fp64 tensors", call);
}

/* An error budget of 0 (none) or from 1e-16 to 1. */
static fatune_status check_budget(double max_rel_err) {
  if (max_rel_err == 0 || (max_rel_err >= 1e-16 && max_rel_err <= 1)) return FATUNE_OK;
  return fail(FATUNE_EINVAL, "max_rel_err %g: 0 (no budget) or a norm-relative error from 1e-16 "
              "to 1", max_rel_err);
}

/* The problem args describes, every tensor's shape and strides checked
** against it; the kernel's alignment is checked later, once it is known.
** V's head dim (O's) may differ from Q's and K's. */
static fatune_status check_args(const fatune_attention_args *x, fatune_problem *p) {
  if (!x) return fail(FATUNE_EINVAL, "no arguments");
  if (check_budget(x->max_rel_err) != FATUNE_OK) return FATUNE_EINVAL;
  const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
  fatune_status st;
  if ((unsigned)x->q.dtype > FATUNE_E4M3)
    return fail(FATUNE_EINVAL, "q's dtype %d is none of fatune_dtype's", (int)x->q.dtype);
  const int fp8 = x->q.dtype == FATUNE_E4M3;
  /* e4m3's O is bf16, as FlashAttention-3's; every other dtype's O its own. */
  if (fp8 && x->o.dtype != FATUNE_BF16)
    return fail(FATUNE_EINVAL, "o's dtype is %s (%d): attention on e4m3 (fp8) inputs writes O "
                "in bf16 (FATUNE_BF16)", fa_dtype_name((fa_dtype)x->o.dtype), (int)x->o.dtype);
  for (int i = 0; i < 4; i++)
    if ((st = check_tensor(tensor_name[i], t[i], i == 3 && fp8 ? FATUNE_BF16 : x->q.dtype)) !=
        FATUNE_OK)
      return st;
  const float *const ds[3] = {x->q_descale, x->k_descale, x->v_descale};
  static const char *const ds_name[3] = {"q_descale", "k_descale", "v_descale"};
  for (int i = 0; i < 3; i++) {
    if (ds[i] && !fp8)
      return fail(FATUNE_EINVAL, "%s is given, but q is %s: descales scale e4m3 (fp8) inputs "
                  "only", ds_name[i], fa_dtype_name((fa_dtype)x->q.dtype));
    if ((uintptr_t)ds[i] % sizeof(float))
      return fail(FATUNE_EINVAL, "%s is not 4-byte aligned (%p): float32", ds_name[i],
                  (const void *)ds[i]);
  }
  const int r = x->descale_rows;
  if (r && !fp8)
    return fail(FATUNE_EINVAL, "descale_rows is %d, but q is %s: descales scale e4m3 (fp8) "
                "inputs only", r, fa_dtype_name((fa_dtype)x->q.dtype));
  if (r && (r < 64 || r > (1 << 24) || (r & (r - 1))))
    return fail(FATUNE_EINVAL, "descale_rows is %d: 0 (a descale per (batch, K/V head)) or a "
                "power of two from 64 to 2^24 (per block of that many rows)", r);
  const long long *q = x->q.shape, *k = x->k.shape;
  for (int d = 0; d < 3; d++) {
    if (x->o.shape[d] != q[d])
      return fail(FATUNE_EINVAL, "o's %s is %lld, q's %lld", dim_name[d], x->o.shape[d], q[d]);
    if (x->v.shape[d] != k[d])
      return fail(FATUNE_EINVAL, "v's %s is %lld, k's %lld", dim_name[d], x->v.shape[d], k[d]);
  }
  if (x->o.shape[3] != x->v.shape[3])
    return fail(FATUNE_EINVAL, "o's dim is %lld, v's %lld: O takes V's head dim",
                x->o.shape[3], x->v.shape[3]);
  if (k[0] != q[0] || k[3] != q[3])
    return fail(FATUNE_EINVAL, "k's %s is %lld, q's %lld", k[0] != q[0] ? "batch" : "dim",
                k[0] != q[0] ? k[0] : k[3], k[0] != q[0] ? q[0] : q[3]);
  if (q[1] % k[1])
    return fail(FATUNE_EINVAL, "k and v have %lld heads, which do not divide q's %lld", k[1],
                q[1]);
  *p = (fatune_problem){.batch = (int)q[0], .heads = (int)q[1], .seq_q = (int)q[2],
                        .seq_k = (int)k[2], .dim = (int)q[3], .dtype = x->q.dtype,
                        .causal = x->causal, .scale = x->scale,
                        .dim_v = (int)x->v.shape[3]};   /* at most 2^24: check_tensor */
  st = check_problem(p);
  if (st == FATUNE_OK) st = check_distinct("o", &x->o);
  if (st == FATUNE_OK) st = check_overlaps(x, p);
  return st;
}

/* Pointers and strides aligned as the kernel's widest access to them needs
** (16 bytes for the tensor-core kernels' cp.async and 16-byte stores), the
** logsumexp to its element: a misaligned tensor is the caller's error,
** not a launch fault. */
static fatune_status check_alignment(const gen_kernel *k, const fatune_attention_args *x) {
  const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
  const fa_dtype dt = (fa_dtype)x->q.dtype;
  for (int i = 0; i < 4; i++) {
    const long long es = (long long)tensor_elem(t[i]), align = k->io_align > es ? k->io_align : es;
    const char *how = i < 3 ? "loads" : "stores";
    if ((uintptr_t)t[i]->data % (uintptr_t)align)
      return fail(FATUNE_EINVAL, "%s is not %lld-byte aligned (%p): the kernel for dim %lld %s "
                  "%s %lld bytes at a time", tensor_name[i], align, t[i]->data, x->q.shape[3],
                  fa_dtype_name(dt), how, align);
    for (int d = 0; d < 3; d++)
      if (t[i]->shape[d] > 1 && t[i]->stride[d] * es % align)
        return fail(FATUNE_EINVAL, "%s's stride %d (%s) of %lld elements is not a multiple of "
                    "%lld bytes: the kernel for dim %lld %s %s %lld bytes at a time",
                    tensor_name[i], d, dim_name[d], t[i]->stride[d], align, x->q.shape[3],
                    fa_dtype_name(dt), how, align);
  }
  if ((uintptr_t)x->lse % (uintptr_t)fa_lse_size(dt))
    return fail(FATUNE_EINVAL, "lse is not %d-byte aligned (%p)", fa_lse_size(dt), x->lse);
  return FATUNE_OK;
}

/* The logsumexp's scratch buffer, at least bytes long, with the scratch
** lock read-held (the caller releases it once its launch is queued).
** Growing it takes the lock for writing, so no call is between taking the
** old buffer and queuing its kernel, and waits for the device: kernels
** already queued may still write the old one. */
static fatune_status scratch_lse(fatune_ctx *c, size_t bytes, void **out) {
  for (;;) {
    pthread_rwlock_rdlock(&c->scratch_lock);
    if (c->scratch_bytes >= bytes) {
      *out = c->scratch;
      return FATUNE_OK;
    }
    pthread_rwlock_unlock(&c->scratch_lock);
    pthread_rwlock_wrlock(&c->scratch_lock);
    char err[512];
    int rc = 0;
    if (c->scratch_bytes < bytes) {
      rc = c->scratch ? backend_sync(c->be, err, sizeof err) : 0;
      if (rc == 0) {
        backend_free(c->be, c->scratch);
        c->scratch = NULL, c->scratch_bytes = 0;
        rc = backend_alloc(c->be, bytes, &c->scratch, err, sizeof err);
        if (rc == 0) c->scratch_bytes = bytes;
      }
    }
    pthread_rwlock_unlock(&c->scratch_lock);
    if (rc != 0) return fail((fatune_status)rc, "the logsumexp's scratch buffer: %s", err);
  }
}

/* ---- Modifications ---- */

fatune_status fatune_mod_create(fatune_ctx *c, const char *spec, const char *text,
                                fatune_mod **out) {
  if (out) *out = NULL;
  if (!c || !spec || !out) return fail(FATUNE_EINVAL, "fatune_mod_create: no context, spec or out");
  fatune_mod *m = calloc(1, sizeof *m);
  if (!m) return fail(FATUNE_ENOMEM, "out of memory");
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    free(m);
    return fail(FATUNE_ENOMEM, "fatune_mod_create: no mutex");
  }
  m->c = c;
  pthread_mutex_lock(&c->slow);
  const int rc = gen_mod_load(c->gen, spec, text, &m->m);
  fatune_status st = rc ? fail((fatune_status)rc, "%s", gen_errmsg(c->gen)) : FATUNE_OK;
  pthread_mutex_unlock(&c->slow);
  if (st != FATUNE_OK) {
    pthread_mutex_destroy(&m->lock);
    free(m);
    return st;
  }
  *out = m;
  errbuf[0] = '\0';
  return FATUNE_OK;
}

/* Device buffer *d of m's context freed once no launch in flight reads it. */
static void mod_drop(fatune_mod *m, void **d) {
  char err[512];
  if (!*d || backend_enter(m->c->be, err, sizeof err) != 0) return;
  backend_sync(m->c->be, err, sizeof err);
  backend_free(m->c->be, *d);
  backend_leave(m->c->be);
  *d = NULL;
}

void fatune_mod_free(fatune_mod *m) {
  if (!m) return;
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) mod_drop(m, &m->dev[i]), free(m->host[i]);
  mod_drop(m, &m->bm_dev);
  fa_mod_data_free(&m->data);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

fatune_status fatune_mod_set_tensor(fatune_mod *m, const char *name, const void *data,
                                    long long n) {
  if (!m || !name) return fail(FATUNE_EINVAL, "fatune_mod_set_tensor: no modification or name");
  int t = 0;
  while (t < m->m.ntensors && strcmp(m->m.tensor_name[t], name)) t++;
  if (t == m->m.ntensors)
    return fail(FATUNE_EINVAL, "modification %s captures no tensor '%.40s'%s%s", m->m.label, name,
                m->m.ntensors ? " (the first it captures: " : "",
                m->m.ntensors ? m->m.tensor_name[0] : "");
  if (n < 0 || n > INT_MAX || (n > 0 && !data))
    return fail(FATUNE_EINVAL, "captured tensor %s: %lld elements%s (0 to 2^31 - 1, with data)",
                name, n, n > 0 && !data ? " and no data" : "");
  const size_t bytes = (size_t)n * 4;   /* int32 or float32 */
  void *host = malloc(bytes ? bytes : 1), *dev = NULL;
  if (!host) return fail(FATUNE_ENOMEM, "out of memory for captured tensor %s", name);
  if (bytes) memcpy(host, data, bytes);
  char err[512];
  int rc = bytes ? backend_enter(m->c->be, err, sizeof err) : 0;
  if (rc == 0 && bytes) {
    rc = backend_alloc(m->c->be, bytes, &dev, err, sizeof err);
    if (rc == 0) rc = backend_upload(m->c->be, dev, host, bytes, err, sizeof err);
    if (rc != 0) backend_free(m->c->be, dev), dev = NULL;
    backend_leave(m->c->be);
  }
  if (rc != 0) {
    free(host);
    return fail((fatune_status)rc, "captured tensor %s: %s", name, err);
  }
  pthread_mutex_lock(&m->lock);
  mod_drop(m, &m->dev[t]);
  free(m->host[t]);
  m->host[t] = host, m->dev[t] = dev, m->set[t] = 1, m->version++;
  const void *ptr[FA_MOD_MAX_TENSORS];
  long long len[FA_MOD_MAX_TENSORS];
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) ptr[i] = m->host[i], len[i] = m->data.len[i];
  len[t] = n;
  fa_mod_data_free(&m->data);
  rc = fa_mod_data_init(&m->data, &m->m, ptr, len, err, sizeof err);
  pthread_mutex_unlock(&m->lock);
  if (rc != 0) return fail(FATUNE_ENOMEM, "%s", err);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

/* m's block mask for the dense problem fp, built and uploaded unless the
** last one was for the same shape and contents; under m's lock. */
static int mod_block_mask(fatune_mod *m, const fa_problem *fp, char *err, size_t errlen) {
  const long long key[5] = {fp->batch, fp->heads, fp->seq_q, fp->seq_k, m->version};
  if (m->bm_dev && !memcmp(key, m->bm_key, sizeof key)) return 0;
  mod_drop(m, &m->bm_dev);
  fa_problem q = *fp;
  q.mod_data = &m->data;
  const int rc = attn_block_mask_upload(m->c->be, &q, &m->bm_dev, &m->bm, err, errlen);
  if (rc == 0) memcpy(m->bm_key, key, sizeof key);
  return rc;
}

/* The captured tensors of the call's modification into a, with its block
** mask where the problem is dense (one sequence of queries and keys per
** batch row) and its mask reads them. *check: an index may fall outside a
** tensor (fa_mod_extent), so the call reads the kernels' flags back. Runs
** inside the backend (backend_enter). */
static fatune_status mod_args(fatune_ctx *c, const fa_problem *fp, int dense, fa_params *a,
                              int *check) {
  *check = 0;
  if (!fp->mod || fp->mod->ntensors == 0) return FATUNE_OK;
  /* Every fp->mod the library sets is a fatune_mod's first member; its
  ** block mask is a cache the call may fill. */
  fatune_mod *m = (fatune_mod *)fp->mod;
  if (m->c != c)
    return fail(FATUNE_EINVAL, "modification %s was made by another context: its tensors are "
                "on that one's device", m->m.label);
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->m.ntensors; i++)
    if (!m->set[i]) {
      pthread_mutex_unlock(&m->lock);
      return fail(FATUNE_EINVAL, "modification %s: captured tensor %s is not set "
                  "(fatune_mod_set_tensor)", m->m.label, m->m.tensor_name[i]);
    }
  long long need[FA_MOD_MAX_TENSORS];
  fa_mod_extent(&m->m, fp->batch, fp->heads, fp->seq_q, fp->seq_k, need);
  for (int i = 0; i < m->m.ntensors; i++) {
    a->mod_tensor[i] = m->dev[i], a->mod_len[i] = (int)m->data.len[i];
    if (need[i] < 0 || need[i] > m->data.len[i]) *check = 1;
  }
  char err[512];
  int rc = 0;
  if (dense && fa_mod_mask_loads(&m->m) && (rc = mod_block_mask(m, fp, err, sizeof err)) == 0)
    attn_block_mask_params(m->bm_dev, m->bm, a);
  pthread_mutex_unlock(&m->lock);
  return rc ? fail((fatune_status)rc, "the block mask of %s: %s", m->m.label, err) : FATUNE_OK;
}

fatune_status fatune_mod_tensor(const fatune_mod *m, int i, const char **name, int *is_int) {
  if (!m || i < 0 || i >= m->m.ntensors)
    return fail(FATUNE_EINVAL, "modification %s has %d captured tensor(s); no tensor %d",
                m ? m->m.label : "(none)", m ? m->m.ntensors : 0, i);
  if (name) *name = m->m.tensor_name[i];
  if (is_int) *is_int = m->m.tensor_type[i] == FA_MT_INT;
  return FATUNE_OK;
}

long long fatune_programs(const fatune_ctx *c) {
  return c ? atomic_load(&((fatune_ctx *)c)->programs) : 0;
}

const char *fatune_mod_label(const fatune_mod *m) { return m ? m->m.label : ""; }

/* One call, ready to launch: under the table's read lock when it is, and
** the scratch lock's when it writes the scratch logsumexp. */
typedef struct call {
  slot *s;
  int scratch_held;
  int check;           /* the kernels' flags are read back (mod_args) */
  fa_problem fp;
  gen_launch shapes[GEN_MAX_LAUNCHES];
  fa_params a;
  fa_range extra[8];   /* q, k, v, o, lse and the three descales */
} call;

/* The locks a prepared call holds, released. */
static void call_done(fatune_ctx *c, const call *cl) {
  if (cl->scratch_held) pthread_rwlock_unlock(&c->scratch_lock);
  pthread_rwlock_unlock(&c->lock);
}

static fatune_status call_prepare(fatune_ctx *c, const fatune_attention_args *x, call *cl) {
  fatune_problem p;
  fatune_status st = check_args(x, &p);
  if (st != FATUNE_OK) return st;
  cl->fp = to_problem(&p);
  cl->fp.kv_group = (int)(x->q.shape[1] / x->k.shape[1]);
  cl->fp.mod = x->mod ? &x->mod->m : NULL;
  cl->fp.descale_rows = x->descale_rows;
  const fa_problem *fp = &cl->fp;
  const budget bud = {x->max_rel_err, x->deterministic != 0};
  if ((st = slot_for(c, fp, &bud, &cl->s)) != FATUNE_OK) return st;
  void *lse = x->lse;
  const size_t ls = (size_t)fa_lse_size(fp->dtype);
  const size_t rows = (size_t)fp->batch * fp->heads * fp->seq_q;
  /* Kernels always write the logsumexp: a scratch one when the caller has none. */
  if ((st = check_alignment(&cl->s->k, x)) != FATUNE_OK ||
      (!lse && (st = scratch_lse(c, rows * ls, &lse)) != FATUNE_OK)) {
    pthread_rwlock_unlock(&c->lock);
    return st;
  }
  cl->scratch_held = !x->lse;
  char err[512];
  const gen_kernel *k = &cl->s->k;
  if (attn_launch_shapes(k, fp, cl->shapes, err, sizeof err) != 0 || k->nws > 1) {
    call_done(c, cl);
    return k->nws > 1 ? fail(FATUNE_EINTERNAL, "%s declares %d workspaces; the forward pass "
                             "takes one", k->name, k->nws)
                      : fail(FATUNE_EINTERNAL, "%s", err);
  }
  const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
  cl->a = (fa_params){.q = x->q.data, .k = x->k.data, .v = x->v.data, .o = x->o.data,
                      .lse = lse, .q_sb = x->q.stride[0], .q_sh = x->q.stride[1],
                      .q_sn = x->q.stride[2], .k_sb = x->k.stride[0], .k_sh = x->k.stride[1],
                      .k_sn = x->k.stride[2], .v_sb = x->v.stride[0], .v_sh = x->v.stride[1],
                      .v_sn = x->v.stride[2], .o_sb = x->o.stride[0], .o_sh = x->o.stride[1],
                      .o_sn = x->o.stride[2], .batch = fp->batch, .heads = fp->heads,
                      .seq_q = fp->seq_q, .seq_k = fp->seq_k,
                      .kv_group = fp->kv_group, .scale_log2 = fa_problem_scale(fp) * LOG2E,
                      .q_descale = x->q_descale, .k_descale = x->k_descale,
                      .v_descale = x->v_descale};
  cl->a.scale_log2_f32 = (float)cl->a.scale_log2;
  cl->a.descale_shift = fa_descale_shift(x->descale_rows);
  if ((st = mod_args(c, fp, 1, &cl->a, &cl->check)) != FATUNE_OK) {
    call_done(c, cl);
    return st;
  }
  /* On the emulator the caller's buffers are host memory the kernel may touch. */
  for (int i = 0; i < 4; i++)
    cl->extra[i] = (fa_range){(uintptr_t)t[i]->data,
                                  (uintptr_t)t[i]->data + extent(t[i], tensor_elem(t[i]))};
  cl->extra[4] = (fa_range){(uintptr_t)lse, (uintptr_t)lse + rows * ls};
  const float *const ds[3] = {x->q_descale, x->k_descale, x->v_descale};
  size_t n[3];
  descale_counts(x, &p, n);
  for (int i = 0; i < 3; i++)
    cl->extra[5 + i] = ds[i] ? (fa_range){(uintptr_t)ds[i], (uintptr_t)ds[i] + n[i] * sizeof(float)}
                             : (fa_range){0, 0};
  return FATUNE_OK;
}

/* Launch a prepared call, every launch of its kernel in order; its locks
** are released. A kernel with a workspace (call_prepare allows one) runs
** synchronously, its workspace freed after the last launch. */
static fatune_status call_launch(fatune_ctx *c, call *cl, void *stream) {
  char err[512];
  const gen_kernel *k = &cl->s->k;
  void *ws = NULL, *flags = NULL;
  const size_t fb = ATTN_NFLAGS * sizeof(int);
  int rc = k->nws ? backend_alloc(c->be, gen_workspace_bytes(k, 0, &cl->fp), &ws, err,
                                  sizeof err)
                  : 0;
  if (rc == 0 && cl->check) rc = backend_alloc(c->be, fb, &flags, err, sizeof err);
  if (rc == 0 && flags) rc = backend_fill(c->be, flags, 0, fb, err, sizeof err);
  /* The workspace before the maps: e4m3's map of V transposed reads it. */
  cl->a.ws = ws, cl->a.error = flags;
  if (rc == 0) rc = attn_tmaps(c->be, k, &cl->fp, &cl->a, err, sizeof err);
  if (rc == 0) {
    fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1, .smem_fill = 0xFF,
                      .extra = cl->extra, .nextra = 8, .stream = stream, .async = 1};
    for (int i = 0; rc == 0 && i < k->nlaunch; i++) {
      ro.async = (ws == NULL && flags == NULL) || i + 1 < k->nlaunch;
      rc = backend_launch(c->be, cl->s->prog, &cl->shapes[i], &cl->a, &ro, NULL, err,
                          sizeof err);
    }
  }
  call_done(c, cl);
  int flag[ATTN_NFLAGS] = {0};
  if (rc == 0 && flags) rc = backend_download(c->be, flag, flags, sizeof flag, err, sizeof err);
  if (rc == 0) rc = attn_flags(flag, err, sizeof err);
  backend_free(c->be, ws);
  backend_free(c->be, flags);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  return FATUNE_OK;
}

/* What a call and a plan share: the device's context entered and the call
** prepared. On success the caller leaves the backend when done; on failure
** nothing is held. */
static fatune_status call_begin(fatune_ctx *c, const fatune_attention_args *x, call *cl) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  atomic_store(&c->used, 1);
  fatune_status st = call_prepare(c, x, cl);
  if (st != FATUNE_OK) backend_leave(c->be);
  return st;
}

fatune_status fatune_attention(fatune_ctx *c, const fatune_attention_args *x) {
  call cl;
  fatune_status st = call_begin(c, x, &cl);
  if (st != FATUNE_OK) return st;
  st = call_launch(c, &cl, x->stream);
  backend_leave(c->be);
  if (st == FATUNE_OK) errbuf[0] = '\0';
  return st;
}

fatune_status fatune_attention_plan(fatune_ctx *c, const fatune_attention_args *x, char *name,
                                    size_t n) {
  call cl;
  fatune_status st = call_begin(c, x, &cl);
  if (st != FATUNE_OK) return st;
  if (name && n) snprintf(name, n, "%s", cl.s->k.name);
  call_done(c, &cl);
  backend_leave(c->be);
  errbuf[0] = '\0';
  return st;
}

/* A contiguous (batch, heads, seq, dim) tensor. */
static fatune_tensor contiguous(const fatune_problem *p, const void *data, int seq, int dim) {
  fatune_tensor t = {.data = (void *)data, .dtype = p->dtype,
                     .shape = {p->batch, p->heads, seq, dim}};
  t.stride[3] = 1, t.stride[2] = dim, t.stride[1] = (long long)seq * dim;
  t.stride[0] = t.stride[1] * p->heads;
  return t;
}

fatune_status fatune_attention_forward(fatune_ctx *c, const fatune_problem *p, const void *q,
                                       const void *k, const void *v, void *o, void *lse,
                                       void *stream) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fatune_status st = check_problem(p);
  if (st != FATUNE_OK) return st;
  if (!q || !k || !v || !o) return fail(FATUNE_EINVAL, "q, k, v and o must not be NULL");
  const int dv = p->dim_v ? p->dim_v : p->dim;
  fatune_attention_args x = {.q = contiguous(p, q, p->seq_q, p->dim),
                             .k = contiguous(p, k, p->seq_k, p->dim),
                             .v = contiguous(p, v, p->seq_k, dv), .o = contiguous(p, o, p->seq_q, dv),
                             .lse = lse, .causal = p->causal, .scale = p->scale,
                             .stream = stream};
  x.o.dtype = (fatune_dtype)fa_out_dtype((fa_dtype)p->dtype);   /* bf16 beside e4m3 */
  return fatune_attention(c, &x);
}

/* ---- The backward pass ---- */

enum { BQ, BK, BV, BO, BDO, BDQ, BDK, BDV, BN_TENSORS };
static const char *const bwd_name[BN_TENSORS + 1] = {"q", "k", "v", "o", "dout", "dq", "dk",
                                                     "dv", "lse"};

static void bwd_tensors(const fatune_backward_args *x, const fatune_tensor *t[BN_TENSORS]) {
  t[BQ] = &x->q, t[BK] = &x->k, t[BV] = &x->v, t[BO] = &x->o, t[BDO] = &x->dout;
  t[BDQ] = &x->dq, t[BDK] = &x->dk, t[BDV] = &x->dv;
}

/* What the call writes (dq, dk, dv) shares no byte with anything else it
** reads or writes, by the spans from first to last byte (check_overlaps). */
static fatune_status check_bwd_overlaps(const fatune_backward_args *x, const fatune_problem *p) {
  const fatune_tensor *t[BN_TENSORS];
  bwd_tensors(x, t);
  const size_t es = (size_t)fa_dtype_size((fa_dtype)p->dtype);
  uintptr_t lo[BN_TENSORS + 1], hi[BN_TENSORS + 1];
  for (int i = 0; i < BN_TENSORS; i++)
    lo[i] = (uintptr_t)t[i]->data, hi[i] = lo[i] + extent(t[i], es);
  lo[BN_TENSORS] = (uintptr_t)x->lse;
  hi[BN_TENSORS] = lo[BN_TENSORS] +
                   (size_t)p->batch * p->heads * p->seq_q * fa_lse_size((fa_dtype)p->dtype);
  for (int w = BDQ; w <= BDV; w++)
    for (int i = 0; i <= BN_TENSORS; i++)
      if (i != w && lo[w] < hi[i] && lo[i] < hi[w])
        return fail(FATUNE_EINVAL, "%s overlaps %s (%p to %p, and %p to %p): the kernel "
                    "writes %s", bwd_name[w], bwd_name[i], (void *)lo[w], (void *)hi[w],
                    (void *)lo[i], (void *)hi[i], bwd_name[w]);
  return FATUNE_OK;
}

/* The problem a backward call describes, all eight tensors checked; V's
** head dim (O's, dO's and dV's) may differ from Q's and K's. */
static fatune_status check_bwd_args(const fatune_backward_args *x, fatune_problem *p) {
  if (!x) return fail(FATUNE_EINVAL, "no arguments");
  if (no_fp8(&x->q, "the backward pass") != FATUNE_OK) return FATUNE_EINVAL;
  if (check_budget(x->max_rel_err) != FATUNE_OK) return FATUNE_EINVAL;
  const fatune_tensor *t[BN_TENSORS];
  bwd_tensors(x, t);
  fatune_status st;
  for (int i = 0; i < BN_TENSORS; i++)
    if ((st = check_tensor(bwd_name[i], t[i], x->q.dtype)) != FATUNE_OK) return st;
  if (!x->lse) return fail(FATUNE_EINVAL, "lse is NULL: the backward pass reads the forward "
                           "pass's logsumexp");
  const long long *q = x->q.shape, *k = x->k.shape;
  /* dK is shaped as K, dQ as Q; O, dO and dV take V's head dim. */
  for (int i = BO; i < BN_TENSORS; i++) {
    const long long *want = i == BDK || i == BDV ? k : q;
    const char *as = i == BDK || i == BDV ? "k" : "q";
    const int of_v = i == BO || i == BDO || i == BDV;
    for (int d = 0; d < 4; d++) {
      const long long w = of_v && d == 3 ? x->v.shape[3] : want[d];
      if (t[i]->shape[d] != w)
        return fail(FATUNE_EINVAL, "%s's %s is %lld, %s's %lld", bwd_name[i], dim_name[d],
                    t[i]->shape[d], of_v && d == 3 ? "v" : as, w);
    }
  }
  for (int d = 0; d < 3; d++)
    if (x->v.shape[d] != k[d])
      return fail(FATUNE_EINVAL, "v's %s is %lld, k's %lld", dim_name[d], x->v.shape[d], k[d]);
  if (k[0] != q[0] || k[3] != q[3])
    return fail(FATUNE_EINVAL, "k's %s is %lld, q's %lld", k[0] != q[0] ? "batch" : "dim",
                k[0] != q[0] ? k[0] : k[3], k[0] != q[0] ? q[0] : q[3]);
  if (q[1] % k[1])
    return fail(FATUNE_EINVAL, "k and v have %lld heads, which do not divide q's %lld", k[1],
                q[1]);
  *p = (fatune_problem){.batch = (int)q[0], .heads = (int)q[1], .seq_q = (int)q[2],
                        .seq_k = (int)k[2], .dim = (int)q[3], .dtype = x->q.dtype,
                        .causal = x->causal, .scale = x->scale, .dim_v = (int)x->v.shape[3]};
  if ((st = check_problem(p)) != FATUNE_OK) return st;
  for (int i = BDQ; i <= BDV; i++)
    if ((st = check_distinct(bwd_name[i], t[i])) != FATUNE_OK) return st;
  return check_bwd_overlaps(x, p);
}

/* Every tensor aligned as kernel k's widest access needs, lse to its element. */
static fatune_status check_bwd_alignment(const gen_kernel *k, const fatune_backward_args *x) {
  const fatune_tensor *t[BN_TENSORS];
  bwd_tensors(x, t);
  const fa_dtype dt = (fa_dtype)x->q.dtype;
  const long long es = fa_dtype_size(dt), align = k->io_align > es ? k->io_align : es;
  for (int i = 0; i < BN_TENSORS; i++) {
    if ((uintptr_t)t[i]->data % (uintptr_t)align)
      return fail(FATUNE_EINVAL, "%s is not %lld-byte aligned (%p)", bwd_name[i], align,
                  t[i]->data);
    for (int d = 0; d < 3; d++)
      if (t[i]->shape[d] > 1 && t[i]->stride[d] * es % align)
        return fail(FATUNE_EINVAL, "%s's stride %d (%s) of %lld elements is not a multiple of "
                    "%lld bytes", bwd_name[i], d, dim_name[d], t[i]->stride[d], align);
  }
  if ((uintptr_t)x->lse % (uintptr_t)fa_lse_size(dt))
    return fail(FATUNE_EINVAL, "lse is not %d-byte aligned (%p)", fa_lse_size(dt), x->lse);
  if ((uintptr_t)x->dlse % (uintptr_t)fa_lse_size(dt))
    return fail(FATUNE_EINVAL, "dlse is not %d-byte aligned (%p)", fa_lse_size(dt), x->dlse);
  return FATUNE_OK;
}

/* The backward kernel's argument block over the caller's tensors. */
static fa_params bwd_params(const fatune_backward_args *x, const fa_problem *fp) {
  /* GQA: query head h reads K/V head h / kv_group, and dK, dV sum over them. */
  fa_params a = {
    .q = x->q.data, .k = x->k.data, .v = x->v.data, .o = x->o.data, .lse = (void *)x->lse,
    .q_sb = x->q.stride[0], .q_sh = x->q.stride[1], .q_sn = x->q.stride[2],
    .k_sb = x->k.stride[0], .k_sh = x->k.stride[1], .k_sn = x->k.stride[2],
    .v_sb = x->v.stride[0], .v_sh = x->v.stride[1], .v_sn = x->v.stride[2],
    .o_sb = x->o.stride[0], .o_sh = x->o.stride[1], .o_sn = x->o.stride[2],
    .batch = fp->batch, .heads = fp->heads, .seq_q = fp->seq_q, .seq_k = fp->seq_k,
    .kv_group = fp->kv_group, .scale_log2 = fa_problem_scale(fp) * LOG2E,
    .dout = x->dout.data, .dlse = x->dlse, .dq = x->dq.data, .dk = x->dk.data, .dv = x->dv.data,
    .do_sb = x->dout.stride[0], .do_sh = x->dout.stride[1], .do_sn = x->dout.stride[2],
    .dq_sb = x->dq.stride[0], .dq_sh = x->dq.stride[1], .dq_sn = x->dq.stride[2],
    .dk_sb = x->dk.stride[0], .dk_sh = x->dk.stride[1], .dk_sn = x->dk.stride[2],
    .dv_sb = x->dv.stride[0], .dv_sh = x->dv.stride[1], .dv_sn = x->dv.stride[2]};
  a.scale_log2_f32 = (float)a.scale_log2;
  return a;
}

/* A variable-length batch's kernels set error[1] for offsets they would not
** follow (templates/varlen.lua): the call's status. */
static int varlen_flag(const int flag[ATTN_NFLAGS], char *err, size_t errlen) {
  if (!flag[1]) return attn_flags(flag, err, errlen);
  snprintf(err, errlen, "cu_seqlens_q or cu_seqlens_k is negative, decreasing, past the tokens "
           "packed or wider than max_seqlen_q or max_seqlen_k: those sequences were skipped");
  return FA_EINVAL;
}

/* Every launch of the slot's kernel with its workspaces, allocated for the
** call and freed once the device is done with them; with varlen, the
** kernels' flags too, read back (the call waits). Holds the table's read
** lock, which it releases. */
static fatune_status bwd_launch(fatune_ctx *c, slot *s, const fa_problem *fp, fa_params *a,
                                const fa_range *extra, int nextra, int check, void *stream) {
  char err[512];
  const gen_kernel *k = &s->k;
  gen_launch shapes[GEN_MAX_LAUNCHES];
  void *ws[3] = {NULL, NULL, NULL}, *flags = NULL;
  int rc = k->nws > 3 ? FA_EINTERNAL : 0;
  if (rc) snprintf(err, sizeof err, "%s declares %d workspaces; at most three", k->name, k->nws);
  if (rc == 0) rc = attn_launch_shapes(k, fp, shapes, err, sizeof err);
  if (rc == 0 && k->ntma) rc = attn_tmaps(c->be, k, fp, a, err, sizeof err);
  for (int i = 0; rc == 0 && i < k->nws; i++)
    rc = backend_alloc(c->be, gen_workspace_bytes(k, i, fp), &ws[i], err, sizeof err);
  if (rc == 0 && (fp->varlen || check))
    rc = backend_alloc(c->be, ATTN_NFLAGS * sizeof(int), &flags, err, sizeof err);
  if (rc == 0 && flags) rc = backend_fill(c->be, flags, 0, ATTN_NFLAGS * sizeof(int), err, sizeof err);
  if (rc == 0) {
    a->ws = ws[0], a->ws2 = ws[1], a->ws3 = ws[2], a->error = flags;
    fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1, .smem_fill = 0xFF,
                      .extra = extra, .nextra = nextra, .stream = stream, .async = 1};
    for (int i = 0; rc == 0 && i < k->nlaunch; i++) {
      ro.async = (k->nws == 0 && !flags) || i + 1 < k->nlaunch;
      rc = backend_launch(c->be, s->prog, &shapes[i], a, &ro, NULL, err, sizeof err);
    }
  }
  pthread_rwlock_unlock(&c->lock);
  int flag[ATTN_NFLAGS] = {0};
  if (rc == 0 && flags) rc = backend_download(c->be, flag, flags, sizeof flag, err, sizeof err);
  if (rc == 0) rc = varlen_flag(flag, err, sizeof err);
  for (int i = 0; i < 3; i++) backend_free(c->be, ws[i]);
  backend_free(c->be, flags);
  return rc ? fail((fatune_status)rc, "%s", err) : FATUNE_OK;
}

/* A checked backward call of problem fp over x's tensors: the slot's kernel
** chosen and built, x aligned for it, and its launches; with fp->varlen the
** packed tensors of sequences at cu_q and cu_k (total_q and total_k their
** tokens), lse [heads][total_q]. */
static fatune_status bwd_run(fatune_ctx *c, fa_problem *fp, const budget *bud,
                             const fatune_backward_args *x, const int *cu_q, const int *cu_k) {
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  atomic_store(&c->used, 1);
  slot *s;
  fatune_status st = prepare(c, fp, bud, &s);
  if (st != FATUNE_OK) {
    backend_leave(c->be);
    return st;
  }
  if ((st = check_bwd_alignment(&s->k, x)) != FATUNE_OK) {
    pthread_rwlock_unlock(&c->lock);
    backend_leave(c->be);
    return st;
  }
  fa_params a = bwd_params(x, fp);
  int check;
  if ((st = mod_args(c, fp, !fp->varlen, &a, &check)) != FATUNE_OK) {
    pthread_rwlock_unlock(&c->lock);
    backend_leave(c->be);
    return st;
  }
  const size_t rows = fp->varlen ? (size_t)fp->heads * (size_t)x->q.shape[2]
                                 : (size_t)fp->batch * fp->heads * fp->seq_q;
  if (fp->varlen) {
    a.cu_seqlens_q = cu_q, a.cu_seqlens_k = cu_k;
    a.total_q = (int)x->q.shape[2], a.total_k = (int)x->k.shape[2];
  }
  /* On the emulator the caller's buffers are host memory the kernels may touch. */
  const fatune_tensor *t[BN_TENSORS];
  bwd_tensors(x, t);
  const size_t es = (size_t)fa_dtype_size(fp->dtype), lse_bytes = rows * fa_lse_size(fp->dtype);
  const size_t cu = ((size_t)fp->batch + 1) * sizeof(int);
  fa_range extra[BN_TENSORS + 4];
  for (int i = 0; i < BN_TENSORS; i++)
    extra[i] = (fa_range){(uintptr_t)t[i]->data, (uintptr_t)t[i]->data + extent(t[i], es)};
  extra[BN_TENSORS] = (fa_range){(uintptr_t)x->lse, (uintptr_t)x->lse + lse_bytes};
  extra[BN_TENSORS + 1] = x->dlse ? (fa_range){(uintptr_t)x->dlse, (uintptr_t)x->dlse + lse_bytes}
                                  : (fa_range){0, 0};
  extra[BN_TENSORS + 2] = (fa_range){(uintptr_t)cu_q, cu_q ? (uintptr_t)cu_q + cu : 0};
  extra[BN_TENSORS + 3] = (fa_range){(uintptr_t)cu_k, cu_k ? (uintptr_t)cu_k + cu : 0};
  st = bwd_launch(c, s, fp, &a, extra, fp->varlen ? BN_TENSORS + 4 : BN_TENSORS + 2, check,
                  x->stream);
  backend_leave(c->be);
  if (st == FATUNE_OK) errbuf[0] = '\0';
  return st;
}

fatune_status fatune_attention_backward(fatune_ctx *c, const fatune_backward_args *x) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fatune_problem p;
  fatune_status st = check_bwd_args(x, &p);
  if (st != FATUNE_OK) return st;
  fa_problem fp = to_problem(&p);
  fp.op = FA_OP_BWD;
  fp.kv_group = (int)(x->q.shape[1] / x->k.shape[1]);  /* the launch grids over K/V heads */
  fp.mod = x->mod ? &x->mod->m : NULL;
  const budget bud = {x->max_rel_err, x->deterministic != 0};
  return bwd_run(c, &fp, &bud, x, NULL, NULL);
}

/* ---- Decoding over a KV cache ---- */

static const char *const kv_name[4] = {"q", "k_cache", "v_cache", "o"};

/* New keys and values, when given: both, of q's dtype, shaped as q with
** the cache's K/V heads (and V's head dim), apart from the caches they are
** written into. */
static fatune_status check_new_keys(const fatune_kvcache_args *x) {
  if (!x->k_new.data && !x->v_new.data) return FATUNE_OK;
  if (!x->k_new.data || !x->v_new.data)
    return fail(FATUNE_EINVAL, "k_new and v_new come together (one is NULL)");
  const fatune_tensor *const t[2] = {&x->k_new, &x->v_new};
  static const char *const name[2] = {"k_new", "v_new"};
  fatune_status st;
  for (int i = 0; i < 2; i++) {
    if ((st = check_tensor(name[i], t[i], x->q.dtype)) != FATUNE_OK) return st;
    const long long want[4] = {x->q.shape[0], x->k_cache.shape[2], x->q.shape[2],
                               i ? x->v_cache.shape[3] : x->k_cache.shape[3]};
    for (int d = 0; d < 4; d++)
      if (t[i]->shape[d] != want[d])
        return fail(FATUNE_EINVAL, "%s is (%lld, %lld, %lld, %lld), not (batch, kv_heads, q's "
                    "new tokens, head dim) = (%lld, %lld, %lld, %lld)", name[i], t[i]->shape[0],
                    t[i]->shape[1], t[i]->shape[2], t[i]->shape[3], want[0], want[1], want[2],
                    want[3]);
  }
  const size_t es = (size_t)fa_dtype_size((fa_dtype)x->q.dtype);
  const fatune_tensor *const pool[2] = {&x->k_cache, &x->v_cache};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      const uintptr_t a = (uintptr_t)t[i]->data, b = (uintptr_t)pool[j]->data;
      if (a < b + extent(pool[j], es) && b < a + extent(t[i], es))
        return fail(FATUNE_EINVAL, "%s overlaps %s, which it is written into", name[i],
                    kv_name[j + 1]);
    }
  return FATUNE_OK;
}

/* Rotary tables: both or neither, with new keys, of a width the head dim
** holds, aligned to their element. */
static fatune_status check_rotary(const fatune_kvcache_args *x) {
  if (!x->rotary_cos && !x->rotary_sin) return FATUNE_OK;
  if (!x->rotary_cos || !x->rotary_sin)
    return fail(FATUNE_EINVAL, "rotary_cos and rotary_sin come together (one is NULL)");
  if (!x->k_new.data)
    return fail(FATUNE_EINVAL, "rotary embeddings apply with new keys and values (k_new, v_new)");
  if (x->rotary_dim < 2 || x->rotary_dim % 2 || x->rotary_dim > x->q.shape[3])
    return fail(FATUNE_EINVAL, "rotary_dim %d: even, 2 to the head dim %lld", x->rotary_dim,
                x->q.shape[3]);
  if (x->rotary_len < 1)
    return fail(FATUNE_EINVAL, "rotary_len %d: the tables' rows, 1 or more", x->rotary_len);
  const uintptr_t es = (uintptr_t)fa_dtype_size((fa_dtype)x->q.dtype);
  if ((uintptr_t)x->rotary_cos % es || (uintptr_t)x->rotary_sin % es)
    return fail(FATUNE_EINVAL, "rotary_cos or rotary_sin is not aligned to its %u-byte element",
                (unsigned)es);
  return FATUNE_OK;
}

/* The decoding problem args describes, each tensor checked against it; the
** pool's page size and the table's row length into *page and *pps. */
static fatune_status check_kvcache_args(const fatune_kvcache_args *x, fa_problem *fp, int *page,
                                        int *pps) {
  if (!x) return fail(FATUNE_EINVAL, "no arguments");
  if (no_fp8(&x->q, "decoding over a KV cache") != FATUNE_OK) return FATUNE_EINVAL;
  const fatune_tensor *const t[4] = {&x->q, &x->k_cache, &x->v_cache, &x->o};
  fatune_status st;
  for (int i = 0; i < 4; i++)
    if ((st = check_tensor(kv_name[i], t[i], x->q.dtype)) != FATUNE_OK) return st;
  const long long *q = x->q.shape, *k = x->k_cache.shape, *v = x->v_cache.shape, *o = x->o.shape;
  if (k[3] != q[3])
    return fail(FATUNE_EINVAL, "k_cache's head dim %lld is not q's %lld", k[3], q[3]);
  if (v[0] != k[0] || v[1] != k[1] || v[2] != k[2])
    return fail(FATUNE_EINVAL, "v_cache's pages, page size and heads (%lld, %lld, %lld) are not "
                "k_cache's (%lld, %lld, %lld)", v[0], v[1], v[2], k[0], k[1], k[2]);
  if (o[0] != q[0] || o[1] != q[1] || o[2] != q[2] || o[3] != v[3])
    return fail(FATUNE_EINVAL, "o is (%lld, %lld, %lld, %lld), not q's batch, heads and new "
                "tokens with v_cache's head dim", o[0], o[1], o[2], o[3]);
  if (q[1] % k[2])
    return fail(FATUNE_EINVAL, "q's %lld heads are no multiple of the cache's %lld", q[1], k[2]);
  if (!x->cache_seqlens) return fail(FATUNE_EINVAL, "cache_seqlens is NULL");
  if (x->block_table && x->pages_per_seq < 1)
    return fail(FATUNE_EINVAL, "pages_per_seq %d with a block table (1 or more)",
                x->pages_per_seq);
  if (x->block_table && x->cache_batch_idx)
    return fail(FATUNE_EINVAL, "cache_batch_idx picks rows of a contiguous cache: give it or a "
                "block table, not both");
  if (!x->block_table && !x->cache_batch_idx && k[0] < q[0])
    return fail(FATUNE_EINVAL, "a contiguous cache (no block table) of %lld sequences for a "
                "batch of %lld", k[0], q[0]);
  *page = (int)k[1], *pps = x->block_table ? x->pages_per_seq : 1;
  const long long cap = (long long)*page * *pps;
  if (cap > (1 << 24))
    return fail(FATUNE_EINVAL, "a capacity of %lld keys per sequence (pages_per_seq x page "
                "size; at most 2^24)", cap);
  if (x->max_seqlen_k < 0 || x->max_seqlen_k > cap)
    return fail(FATUNE_EINVAL, "max_seqlen_k %d is outside 0 (the capacity) to the capacity "
                "%lld", x->max_seqlen_k, cap);
  const fatune_problem p = {.batch = (int)q[0], .heads = (int)q[1], .seq_q = (int)q[2],
                            .seq_k = x->max_seqlen_k ? x->max_seqlen_k : (int)cap,
                            .dim = (int)q[3], .dtype = x->q.dtype, .causal = x->causal,
                            .scale = x->scale, .dim_v = (int)v[3]};
  if ((st = check_problem(&p)) != FATUNE_OK) return st;
  if ((st = check_distinct("o", &x->o)) != FATUNE_OK) return st;
  if ((st = check_new_keys(x)) != FATUNE_OK) return st;
  if ((st = check_rotary(x)) != FATUNE_OK) return st;
  *fp = to_problem(&p);
  fp->op = FA_OP_DECODE;
  fp->append = x->k_new.data != NULL;
  fp->kv_group = (int)(q[1] / k[2]);
  fp->page = x->block_table ? *page : 0;
  return FATUNE_OK;
}

/* Many new tokens per sequence (prefill, chunked prefill) run the forward
** pass's form over a KV cache (templates/paged.lua): its 128-row tiles of
** one head read K/V once per 128 queries, where the decoding kernels read
** it once per 16 rows of a head's group. Decoding stays under 64 new
** tokens, and where the forward grid would leave most of the GPU idle:
** both take time in proportion to the keys, the forward form per wave of
** 128-row tiles (one whether a tile holds 128 rows or 1), decoding per
** query row (batch x heads x new tokens), spread over every SM. So the
** forward form runs from a share of an SM's 128 rows per wave: by the
** timing model (d64 and d128, 8192 keys, README) a quarter for tc's form
** (decoding is the faster up to 0.28 at d128 on A100, 0.24 at d64), a
** sixth for wg's on sm_90a (0.13 and 0.19 on H100). The forward form takes
** 16-bit types, head dims that are multiples of 8 and caches under 64 GiB
** (tc's offsets are 32-bit counts of 16 bytes); on sm_90a wg's, by TMA
** boxes within a page, where the page size is a multiple of 16
** (fit_page_boxes). The emulator counts as one SM. Both apply x's
** modification. */
static void kvcache_route(const fatune_ctx *c, const fatune_kvcache_args *x, fa_problem *fp) {
  const fa_device *d = backend_device(c->be);
  const long long sms = d ? d->sm_count : 1;
  const long long rows = (long long)fp->batch * fp->heads * fp->seq_q;
  const long long ctas = (long long)fp->batch * fp->heads * ((fp->seq_q + 127) / 128);
  const long long waves = (ctas + sms - 1) / sms, share = 128 * sms * waves;
  const int wg = !strcmp(c->target.arch, "sm_90a") && page_box(fp) > 0;
  const size_t es = (size_t)fa_dtype_size(fp->dtype), most = (size_t)UINT32_MAX * 16;
  const int fits = (fp->dtype == FA_FP16 || fp->dtype == FA_BF16) && fp->dim % 8 == 0 &&
                   fa_problem_dim_v(fp) % 8 == 0 && extent(&x->k_cache, es) < most &&
                   extent(&x->v_cache, es) < most;
  fp->mod = x->mod ? &x->mod->m : NULL;
  if (fits && fp->seq_q >= 64 && (wg ? 6 : 4) * rows >= share) fp->op = FA_OP_FWD, fp->paged = 1;
}

/* Four tensors' addresses and strides for kernel k's widest access (its
** io_align), lse's for its element. */
static fatune_status check_aligned(const gen_kernel *k, const fatune_tensor *const t[4],
                                   const char *const name[4], const void *lse) {
  const fa_dtype dt = (fa_dtype)t[0]->dtype;
  const long long es = fa_dtype_size(dt), align = k->io_align > es ? k->io_align : es;
  for (int i = 0; i < 4; i++) {
    if ((uintptr_t)t[i]->data % (uintptr_t)align)
      return fail(FATUNE_EINVAL, "%s is not %lld-byte aligned (%p): %s moves %lld bytes at a "
                  "time", name[i], align, t[i]->data, k->name, align);
    for (int d = 0; d < 3; d++)
      if (t[i]->shape[d] > 1 && t[i]->stride[d] * es % align)
        return fail(FATUNE_EINVAL, "%s's stride %d of %lld elements is not a multiple of %lld "
                    "bytes: %s moves %lld bytes at a time", name[i], d, t[i]->stride[d],
                    align, k->name, align);
  }
  if ((uintptr_t)lse % (uintptr_t)fa_lse_size(dt))
    return fail(FATUNE_EINVAL, "lse is not %d-byte aligned (%p)", fa_lse_size(dt), lse);
  return FATUNE_OK;
}

/* The argument block of one decoding call. */
static fa_params kvcache_params(const fatune_kvcache_args *x, const fa_problem *fp, int page,
                                int pps, void *lse) {
  const fatune_tensor *q = &x->q, *k = &x->k_cache, *v = &x->v_cache, *o = &x->o;
  fa_params a = {.q = q->data, .k = k->data, .v = v->data, .o = o->data, .lse = lse,
                 .q_sb = q->stride[0], .q_sh = q->stride[1], .q_sn = q->stride[2],
                 .k_sb = k->stride[0], .k_sh = k->stride[2], .k_sn = k->stride[1],
                 .v_sb = v->stride[0], .v_sh = v->stride[2], .v_sn = v->stride[1],
                 .o_sb = o->stride[0], .o_sh = o->stride[1], .o_sn = o->stride[2],
                 .batch = fp->batch, .heads = fp->heads, .seq_q = fp->seq_q,
                 .seq_k = fp->seq_k, .kv_group = fp->kv_group,
                 .scale_log2 = fa_problem_scale(fp) * LOG2E,
                 .block_table = x->block_table, .cache_batch_idx = x->cache_batch_idx,
                 .seqlens_k = x->cache_seqlens,
                 .page_size = page, .table_stride = pps, .num_pages = (int)k->shape[0],
                 .k_new = x->k_new.data, .v_new = x->v_new.data,
                 .kn_sb = x->k_new.stride[0], .kn_sh = x->k_new.stride[1],
                 .kn_sn = x->k_new.stride[2], .vn_sb = x->v_new.stride[0],
                 .vn_sh = x->v_new.stride[1], .vn_sn = x->v_new.stride[2],
                 .rotary_cos = x->rotary_cos, .rotary_sin = x->rotary_sin,
                 .rotary_dim = x->rotary_dim, .rotary_len = x->rotary_len,
                 .rotary_interleaved = x->rotary_interleaved != 0, .rotary_q_step = x->causal != 0};
  a.scale_log2_f32 = (float)a.scale_log2;
  fa_page_divisor(page, &a.page_magic, &a.page_shift);
  return a;
}

/* The kernels of one decoding call: the append kernel (ak NULL: none),
** whose lengths the decoding launches then read, and the decoding one. */
typedef struct kv_kernels {
  const gen_kernel *k, *ak;
  const fa_program *prog, *aprog;
  const gen_launch *shapes;
  int *seqlens_out;            /* with ak: the lengths after the append (device memory) */
  void *q_rot;                 /* with rotary tables: the rotated queries (device memory) */
} kv_kernels;

/* Every launch of kk in order over a, whose ws, error and lse are set; the
** last one waits for the device unless async. */
static int kvcache_launches(fatune_ctx *c, const kv_kernels *kk, const fa_problem *fp,
                            fa_params *a, const fatune_kvcache_args *x, int pps, int async,
                            char *err, size_t errlen) {
  const size_t es = (size_t)fa_dtype_size(fp->dtype), ls = (size_t)fa_lse_size(fp->dtype);
  const size_t rows = (size_t)fp->batch * fp->heads * fp->seq_q;
  /* On the emulator the caller's buffers are host memory the kernel may touch. */
  const fatune_tensor *const t[4] = {&x->q, &x->k_cache, &x->v_cache, &x->o};
  fa_range extra[7];
  for (int i = 0; i < 4; i++)
    extra[i] = (fa_range){(uintptr_t)t[i]->data, (uintptr_t)t[i]->data + extent(t[i], es)};
  extra[4] = (fa_range){(uintptr_t)a->lse, (uintptr_t)a->lse + rows * ls};
  extra[5] = (fa_range){(uintptr_t)x->cache_seqlens,
                        (uintptr_t)x->cache_seqlens + (size_t)fp->batch * sizeof(int)};
  /* the page indices: the block table's, or cache_batch_idx's */
  const int *const pages = x->block_table ? x->block_table : x->cache_batch_idx;
  const size_t tb = (size_t)fp->batch * (x->block_table ? pps : 1) * sizeof(int);
  extra[6] = (fa_range){(uintptr_t)pages, pages ? (uintptr_t)pages + tb : 0};
  fa_range with_new[11];
  memcpy(with_new, extra, sizeof extra);
  with_new[7] = (fa_range){(uintptr_t)x->k_new.data, (uintptr_t)x->k_new.data + extent(&x->k_new, es)};
  with_new[8] = (fa_range){(uintptr_t)x->v_new.data, (uintptr_t)x->v_new.data + extent(&x->v_new, es)};
  const size_t rt = x->rotary_cos ? (size_t)x->rotary_len * (size_t)(x->rotary_dim / 2) * es : 0;
  with_new[9] = (fa_range){(uintptr_t)x->rotary_cos, (uintptr_t)x->rotary_cos + rt};
  with_new[10] = (fa_range){(uintptr_t)x->rotary_sin, (uintptr_t)x->rotary_sin + rt};
  fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1, .smem_fill = 0xFF,
                    .extra = with_new, .nextra = 11, .stream = x->stream, .async = 1};
  int rc = 0;
  if (kk->ak) {  /* the new keys in, then the attention over the new lengths */
    gen_launch ashape;
    a->seqlens_out = kk->seqlens_out, a->q_rot = kk->q_rot;
    rc = attn_launch_shapes(kk->ak, fp, &ashape, err, errlen);
    if (rc == 0) rc = backend_launch(c->be, kk->aprog, &ashape, a, &ro, NULL, err, errlen);
    a->seqlens_k = kk->seqlens_out;
    if (kk->q_rot) {  /* the decoding launches read the rotated queries, contiguous */
      a->q = kk->q_rot, a->q_sn = fp->dim, a->q_sh = (long long)fp->seq_q * fp->dim;
      a->q_sb = a->q_sh * fp->heads;
    }
  }
  /* wg's paged form loads by TMA: its maps over q (rotated or not), o and the pools */
  if (rc == 0 && kk->k->ntma) rc = attn_tmaps(c->be, kk->k, fp, a, err, errlen);
  ro.extra = extra, ro.nextra = pages ? 7 : 6;
  for (int i = 0; rc == 0 && i < kk->k->nlaunch; i++) {
    ro.async = async || i + 1 < kk->k->nlaunch;
    rc = backend_launch(c->be, kk->prog, &kk->shapes[i], a, &ro, NULL, err, errlen);
  }
  return rc;
}

/* Every launch of the prepared slot's kernel, then the kernels' flags read
** back (the call waits for them). ws, flags and lse are the call's. */
static fatune_status kvcache_launch(fatune_ctx *c, const slot *s, const fa_problem *fp,
                                    fa_params *a, const fatune_kvcache_args *x, int pps) {
  char err[512];
  gen_launch shapes[GEN_MAX_LAUNCHES];
  const gen_kernel *k = &s->k;
  const size_t ls = (size_t)fa_lse_size(fp->dtype);
  const size_t rows = (size_t)fp->batch * fp->heads * fp->seq_q;
  void *ws = NULL, *flags = NULL, *lse = x->lse, *lens = NULL, *q_rot = NULL;
  int rc = attn_launch_shapes(k, fp, shapes, err, sizeof err);
  if (rc == 0 && k->nws) rc = backend_alloc(c->be, gen_workspace_bytes(k, 0, fp), &ws, err, sizeof err);
  if (rc == 0) rc = backend_alloc(c->be, ATTN_NFLAGS * sizeof(int), &flags, err, sizeof err);
  if (rc == 0 && !lse) rc = backend_alloc(c->be, rows * ls, &lse, err, sizeof err);
  if (rc == 0 && s->append)
    rc = backend_alloc(c->be, (size_t)fp->batch * sizeof(int), &lens, err, sizeof err);
  if (rc == 0 && x->rotary_cos)
    rc = backend_alloc(c->be, rows * (size_t)fp->dim * (size_t)fa_dtype_size(fp->dtype), &q_rot,
                       err, sizeof err);
  if (rc == 0) rc = backend_fill(c->be, flags, 0, ATTN_NFLAGS * sizeof(int), err, sizeof err);
  if (rc == 0) {
    a->ws = ws, a->error = flags, a->lse = lse;
    const kv_kernels kk = {k, s->append ? &s->ak : NULL, s->prog, s->aprog, shapes, lens, q_rot};
    rc = kvcache_launches(c, &kk, fp, a, x, pps, 0, err, sizeof err);
  }
  int flag[ATTN_NFLAGS] = {0};
  if (rc == 0) rc = backend_download(c->be, flag, flags, sizeof flag, err, sizeof err);
  if (rc == 0) rc = attn_flags(flag, err, sizeof err);
  backend_free(c->be, ws), backend_free(c->be, flags), backend_free(c->be, lens);
  backend_free(c->be, q_rot);
  if (lse != x->lse) backend_free(c->be, lse);
  return rc ? fail((fatune_status)rc, "%s", err) : FATUNE_OK;
}

fatune_status fatune_attention_kvcache(fatune_ctx *c, const fatune_kvcache_args *x) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fa_problem fp;
  int page = 0, pps = 0;
  fatune_status st = check_kvcache_args(x, &fp, &page, &pps);
  if (st != FATUNE_OK) return st;
  kvcache_route(c, x, &fp);
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  atomic_store(&c->used, 1);
  const budget bud = {0, 0};
  slot *s;
  if ((st = slot_for(c, &fp, &bud, &s)) == FATUNE_OK) {
    const fatune_tensor *const t[4] = {&x->q, &x->k_cache, &x->v_cache, &x->o};
    st = check_aligned(&s->k, t, kv_name, x->lse);
    fa_params a = kvcache_params(x, &fp, page, pps, x->lse);
    int check;
    if (st == FATUNE_OK) st = mod_args(c, &fp, 0, &a, &check);
    if (st == FATUNE_OK) st = kvcache_launch(c, s, &fp, &a, x, pps);
    pthread_rwlock_unlock(&c->lock);
  }
  backend_leave(c->be);
  if (st == FATUNE_OK) errbuf[0] = '\0';
  return st;
}

/* ---- Decoding planned once, run many times (CUDA graphs) ---- */

struct fatune_decode_plan {
  fatune_ctx *c;
  fa_problem fp;
  int page, pps, has_table, has_lse, has_rotary;
  char mod[17];               /* the modification's hash ("": none); fp keeps no pointer to
                              ** it once the kernel is built, so the caller may free it */
  gen_kernel k, ak;           /* the plan's own kernels and programs (ak: the append's, with
                              ** new keys): the table may be emptied */
  fa_program *prog, *aprog;
  gen_launch shapes[GEN_MAX_LAUNCHES];
  void *ws, *flags, *lse;     /* the splits' workspace, the kernels' flags, a scratch lse */
  void *lens;                 /* with new keys: the lengths after the append */
  void *q_rot;                /* with rotary tables: the rotated queries */
};

void fatune_decode_plan_free(fatune_decode_plan *pl) {
  if (!pl) return;
  fatune_ctx *c = pl->c;
  char err[512];
  if (backend_enter(c->be, err, sizeof err) == 0) {
    backend_sync(c->be, err, sizeof err);  /* runs in flight may still use the buffers */
    backend_free(c->be, pl->ws), backend_free(c->be, pl->flags), backend_free(c->be, pl->lse);
    backend_free(c->be, pl->lens), backend_free(c->be, pl->q_rot);
    fa_build b = {.prog = pl->prog}, ab = {.prog = pl->aprog};
    backend_build_free(c->be, &b);
    backend_build_free(c->be, &ab);
    backend_leave(c->be);
  }
  gen_kernel_free(&pl->k);
  gen_kernel_free(&pl->ak);
  free(pl);
}

/* The plan's kernel and program, chosen and built as a call's would be,
** under the slow lock (the database, the generator and the compiler). */
static fatune_status plan_kernel(fatune_ctx *c, fatune_decode_plan *pl) {
  const budget bud = {0, 0};
  fatune_choice choice;
  pthread_mutex_lock(&c->slow);
  fatune_status st = choose(c, &pl->fp, &bud, &pl->k, &choice);
  if (st == FATUNE_OK && (st = program_for(c, &pl->k, &pl->prog)) != FATUNE_OK) {
    gen_kernel_free(&pl->k);
    memset(&pl->k, 0, sizeof pl->k);
  }
  if (st == FATUNE_OK && pl->fp.append) st = append_kernel(c, &pl->fp, &pl->ak, &pl->aprog);
  pthread_mutex_unlock(&c->slow);
  return st;
}

/* Its buffers, allocated once; the flags zeroed. */
static fatune_status plan_buffers(fatune_ctx *c, fatune_decode_plan *pl) {
  char err[512];
  const fa_problem *fp = &pl->fp;
  const size_t rows = (size_t)fp->batch * fp->heads * fp->seq_q;
  int rc = attn_launch_shapes(&pl->k, fp, pl->shapes, err, sizeof err);
  if (rc == 0 && pl->k.nws)
    rc = backend_alloc(c->be, gen_workspace_bytes(&pl->k, 0, fp), &pl->ws, err, sizeof err);
  if (rc == 0) rc = backend_alloc(c->be, ATTN_NFLAGS * sizeof(int), &pl->flags, err, sizeof err);
  if (rc == 0 && !pl->has_lse)
    rc = backend_alloc(c->be, rows * (size_t)fa_lse_size(fp->dtype), &pl->lse, err, sizeof err);
  if (rc == 0 && fp->append)
    rc = backend_alloc(c->be, (size_t)fp->batch * sizeof(int), &pl->lens, err, sizeof err);
  if (rc == 0 && pl->has_rotary)
    rc = backend_alloc(c->be, rows * (size_t)fp->dim * (size_t)fa_dtype_size(fp->dtype),
                       &pl->q_rot, err, sizeof err);
  if (rc == 0) rc = backend_fill(c->be, pl->flags, 0, ATTN_NFLAGS * sizeof(int), err, sizeof err);
  if (rc == 0) rc = backend_sync(c->be, err, sizeof err);
  return rc ? fail((fatune_status)rc, "%s", err) : FATUNE_OK;
}

fatune_status fatune_decode_plan_create(fatune_ctx *c, const fatune_kvcache_args *x,
                                        fatune_decode_plan **out) {
  if (out) *out = NULL;
  if (!c || !out) return fail(FATUNE_EINVAL, "no context or no place for the plan");
  fatune_decode_plan *pl = calloc(1, sizeof *pl);
  if (!pl) return fail(FATUNE_ENOMEM, "out of memory");
  pl->c = c;
  fatune_status st = check_kvcache_args(x, &pl->fp, &pl->page, &pl->pps);
  if (st != FATUNE_OK) return free(pl), st;
  kvcache_route(c, x, &pl->fp);
  pl->has_table = x->block_table != NULL, pl->has_lse = x->lse != NULL;
  pl->has_rotary = x->rotary_cos != NULL;
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return free(pl), fail((fatune_status)rc, "%s", err);
  atomic_store(&c->used, 1);
  st = plan_kernel(c, pl);
  snprintf(pl->mod, sizeof pl->mod, "%s", mod_hash(&pl->fp));
  pl->fp.mod = NULL;
  if (st == FATUNE_OK) {
    const fatune_tensor *const t[4] = {&x->q, &x->k_cache, &x->v_cache, &x->o};
    st = check_aligned(&pl->k, t, kv_name, x->lse);
  }
  if (st == FATUNE_OK) st = plan_buffers(c, pl);
  backend_leave(c->be);
  if (st != FATUNE_OK) {
    char keep[sizeof errbuf];
    snprintf(keep, sizeof keep, "%s", errbuf);
    fatune_decode_plan_free(pl);
    snprintf(errbuf, sizeof errbuf, "%s", keep);
    return st;
  }
  *out = pl;
  errbuf[0] = '\0';
  return FATUNE_OK;
}

const char *fatune_decode_plan_variant(const fatune_decode_plan *pl) {
  return pl && pl->k.name ? pl->k.name : "";
}

/* args describe the plan's problem: what the launch shapes, the workspace
** and the kernel were made for. */
static fatune_status plan_matches(const fatune_decode_plan *pl, const fatune_kvcache_args *x) {
  fa_problem fp;
  int page, pps;
  fatune_status st = check_kvcache_args(x, &fp, &page, &pps);
  if (st != FATUNE_OK) return st;
  const fa_problem *q = &pl->fp;
  if (fp.batch != q->batch || fp.heads != q->heads || fp.seq_q != q->seq_q ||
      fp.seq_k != q->seq_k || fp.dim != q->dim || fa_problem_dim_v(&fp) != fa_problem_dim_v(q) ||
      fp.dtype != q->dtype || fp.causal != q->causal || fp.kv_group != q->kv_group ||
      fp.scale != q->scale || page != pl->page || pps != pl->pps || fp.append != q->append ||
      (x->block_table != NULL) != pl->has_table || (x->lse != NULL) != pl->has_lse ||
      (x->rotary_cos != NULL) != pl->has_rotary ||
      strcmp(x->mod ? x->mod->m.hash : "", pl->mod))
    return fail(FATUNE_EINVAL, "the arguments are not the plan's problem (batch, heads, new "
                "tokens, capacity, head dims, dtype, causal, scale, GQA, page size, table, "
                "lse, new keys, rotary tables and modification as planned): make a plan for "
                "them");
  const fatune_tensor *const t[4] = {&x->q, &x->k_cache, &x->v_cache, &x->o};
  return check_aligned(&pl->k, t, kv_name, x->lse);
}

fatune_status fatune_decode_plan_run(fatune_decode_plan *pl, const fatune_kvcache_args *x) {
  if (!pl) return fail(FATUNE_EINVAL, "no plan");
  fatune_status st = plan_matches(pl, x);
  if (st != FATUNE_OK) return st;
  fatune_ctx *c = pl->c;
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  fa_params a = kvcache_params(x, &pl->fp, pl->page, pl->pps, x->lse ? x->lse : pl->lse);
  a.ws = pl->ws, a.error = pl->flags;
  fa_problem fp = pl->fp;     /* the call's modification: its tensors as they are now */
  fp.mod = x->mod ? &x->mod->m : NULL;
  int check;
  fatune_status st2 = mod_args(c, &fp, 0, &a, &check);
  if (st2 != FATUNE_OK) {
    backend_leave(c->be);
    return st2;
  }
  const kv_kernels kk = {&pl->k, pl->fp.append ? &pl->ak : NULL, pl->prog, pl->aprog,
                         pl->shapes, pl->lens, pl->q_rot};
  rc = kvcache_launches(c, &kk, &pl->fp, &a, x, pl->pps, 1, err, sizeof err);
  backend_leave(c->be);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

fatune_status fatune_decode_plan_check(fatune_decode_plan *pl) {
  if (!pl) return fail(FATUNE_EINVAL, "no plan");
  fatune_ctx *c = pl->c;
  char err[512];
  int flag[ATTN_NFLAGS] = {0};
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  rc = backend_sync(c->be, err, sizeof err);
  if (rc == 0) rc = backend_download(c->be, flag, pl->flags, sizeof flag, err, sizeof err);
  if (rc == 0 && (flag[0] || flag[1] || flag[2]))
    rc = backend_fill(c->be, pl->flags, 0, sizeof flag, err, sizeof err);
  if (rc == 0) rc = attn_flags(flag, err, sizeof err);
  backend_leave(c->be);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  errbuf[0] = '\0';
  return FATUNE_OK;
}

/* ---- Variable-length batches ---- */

static const char *const vl_name[4] = {"q", "k", "v", "o"};

/* The problem a variable-length call describes: the longest sequences' as
** seq_q and seq_k, each tensor checked against it. */
static fatune_status check_varlen_args(const fatune_varlen_args *x, fa_problem *fp) {
  if (!x) return fail(FATUNE_EINVAL, "no arguments");
  if (no_fp8(&x->q, "a variable-length batch") != FATUNE_OK) return FATUNE_EINVAL;
  const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
  fatune_status st;
  for (int i = 0; i < 4; i++) {
    if ((st = check_tensor(vl_name[i], t[i], x->q.dtype)) != FATUNE_OK) return st;
    if (t[i]->shape[0] != 1)
      return fail(FATUNE_EINVAL, "%s's first dim is %lld: a variable-length batch packs every "
                  "sequence's tokens as (1, heads, total, dim)", vl_name[i], t[i]->shape[0]);
  }
  const long long *q = x->q.shape, *k = x->k.shape, *v = x->v.shape, *o = x->o.shape;
  if (k[3] != q[3]) return fail(FATUNE_EINVAL, "k's head dim %lld is not q's %lld", k[3], q[3]);
  if (v[1] != k[1] || v[2] != k[2])
    return fail(FATUNE_EINVAL, "v's heads and tokens (%lld, %lld) are not k's (%lld, %lld)",
                v[1], v[2], k[1], k[2]);
  if (o[1] != q[1] || o[2] != q[2] || o[3] != v[3])
    return fail(FATUNE_EINVAL, "o is (1, %lld, %lld, %lld), not q's heads and tokens with v's "
                "head dim", o[1], o[2], o[3]);
  if (q[1] % k[1])
    return fail(FATUNE_EINVAL, "k and v have %lld heads, which do not divide q's %lld", k[1],
                q[1]);
  if (!x->cu_seqlens_q || !x->cu_seqlens_k)
    return fail(FATUNE_EINVAL, "cu_seqlens_q and cu_seqlens_k must not be NULL");
  if (x->max_seqlen_q < 1 || x->max_seqlen_q > q[2] || x->max_seqlen_k < 1 ||
      x->max_seqlen_k > k[2])
    return fail(FATUNE_EINVAL, "max_seqlen_q %d and max_seqlen_k %d: 1 to the tokens packed "
                "(%lld and %lld)", x->max_seqlen_q, x->max_seqlen_k, q[2], k[2]);
  const fatune_problem p = {.batch = x->batch, .heads = (int)q[1], .seq_q = x->max_seqlen_q,
                            .seq_k = x->max_seqlen_k, .dim = (int)q[3], .dtype = x->q.dtype,
                            .causal = x->causal, .scale = x->scale, .dim_v = (int)v[3]};
  if ((st = check_problem(&p)) != FATUNE_OK) return st;
  if ((st = check_distinct("o", &x->o)) != FATUNE_OK) return st;
  /* O and lse apart from what the kernel reads: lse is [heads][total_q]. */
  const fatune_attention_args view = {.q = x->q, .k = x->k, .v = x->v, .o = x->o, .lse = x->lse};
  const fatune_problem packed = {.batch = 1, .heads = (int)q[1], .seq_q = (int)q[2],
                                 .dtype = x->q.dtype};
  if ((st = check_overlaps(&view, &packed)) != FATUNE_OK) return st;
  *fp = to_problem(&p);
  fp->kv_group = (int)(q[1] / k[1]);
  fp->varlen = 1;
  return FATUNE_OK;
}

/* The argument block of one variable-length call: the packed tensors'
** token and head strides. */
static fa_params varlen_params(const fatune_varlen_args *x, const fa_problem *fp) {
  const fatune_tensor *q = &x->q, *k = &x->k, *v = &x->v, *o = &x->o;
  fa_params a = {.q = q->data, .k = k->data, .v = v->data, .o = o->data,
                 .q_sh = q->stride[1], .q_sn = q->stride[2], .k_sh = k->stride[1],
                 .k_sn = k->stride[2], .v_sh = v->stride[1], .v_sn = v->stride[2],
                 .o_sh = o->stride[1], .o_sn = o->stride[2], .batch = fp->batch,
                 .heads = fp->heads, .seq_q = fp->seq_q, .seq_k = fp->seq_k,
                 .kv_group = fp->kv_group, .scale_log2 = fa_problem_scale(fp) * LOG2E,
                 .cu_seqlens_q = x->cu_seqlens_q, .cu_seqlens_k = x->cu_seqlens_k,
                 .total_q = (int)q->shape[2], .total_k = (int)k->shape[2]};
  a.scale_log2_f32 = (float)a.scale_log2;
  return a;
}

/* Every launch of the prepared slot's kernel with its workspace, then the
** kernels' flag read back (the call waits for them). */
static fatune_status varlen_launch(fatune_ctx *c, const slot *s, const fa_problem *fp,
                                   fa_params *a, const fatune_varlen_args *x) {
  char err[512];
  gen_launch shapes[GEN_MAX_LAUNCHES];
  const gen_kernel *k = &s->k;
  const size_t es = (size_t)fa_dtype_size(fp->dtype), ls = (size_t)fa_lse_size(fp->dtype);
  const size_t rows = (size_t)fp->heads * (size_t)a->total_q;
  void *ws = NULL, *flags = NULL, *lse = x->lse;
  int rc = attn_launch_shapes(k, fp, shapes, err, sizeof err);
  if (rc == 0) rc = attn_tmaps(c->be, k, fp, a, err, sizeof err);
  if (rc == 0 && k->nws > 1) {
    rc = FA_EINTERNAL;
    snprintf(err, sizeof err, "%s declares %d workspaces; the forward pass takes one", k->name,
             k->nws);
  }
  if (rc == 0 && k->nws) rc = backend_alloc(c->be, gen_workspace_bytes(k, 0, fp), &ws, err, sizeof err);
  if (rc == 0) rc = backend_alloc(c->be, ATTN_NFLAGS * sizeof(int), &flags, err, sizeof err);
  if (rc == 0 && !lse) rc = backend_alloc(c->be, rows * ls, &lse, err, sizeof err);
  if (rc == 0) rc = backend_fill(c->be, flags, 0, ATTN_NFLAGS * sizeof(int), err, sizeof err);
  if (rc == 0) {
    a->ws = ws, a->error = flags, a->lse = lse;
    /* On the emulator the caller's buffers are host memory the kernel may touch. */
    const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
    fa_range extra[7];
    for (int i = 0; i < 4; i++)
      extra[i] = (fa_range){(uintptr_t)t[i]->data, (uintptr_t)t[i]->data + extent(t[i], es)};
    extra[4] = (fa_range){(uintptr_t)lse, (uintptr_t)lse + rows * ls};
    const size_t cu = ((size_t)fp->batch + 1) * sizeof(int);
    extra[5] = (fa_range){(uintptr_t)x->cu_seqlens_q, (uintptr_t)x->cu_seqlens_q + cu};
    extra[6] = (fa_range){(uintptr_t)x->cu_seqlens_k, (uintptr_t)x->cu_seqlens_k + cu};
    fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1, .smem_fill = 0xFF,
                      .extra = extra, .nextra = 7, .stream = x->stream};
    for (int i = 0; rc == 0 && i < k->nlaunch; i++) {
      ro.async = i + 1 < k->nlaunch;
      rc = backend_launch(c->be, s->prog, &shapes[i], a, &ro, NULL, err, sizeof err);
    }
  }
  int flag[ATTN_NFLAGS] = {0};
  if (rc == 0) rc = backend_download(c->be, flag, flags, sizeof flag, err, sizeof err);
  if (rc == 0) rc = varlen_flag(flag, err, sizeof err);
  backend_free(c->be, ws), backend_free(c->be, flags);
  if (lse != x->lse) backend_free(c->be, lse);
  return rc ? fail((fatune_status)rc, "%s", err) : FATUNE_OK;
}

fatune_status fatune_attention_varlen(fatune_ctx *c, const fatune_varlen_args *x) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  fa_problem fp;
  fatune_status st = check_varlen_args(x, &fp);
  if (st != FATUNE_OK) return st;
  fp.mod = x->mod ? &x->mod->m : NULL;
  char err[512];
  int rc = backend_enter(c->be, err, sizeof err);
  if (rc != 0) return fail((fatune_status)rc, "%s", err);
  atomic_store(&c->used, 1);
  const budget bud = {0, 0};
  slot *s;
  if ((st = slot_for(c, &fp, &bud, &s)) == FATUNE_OK) {
    const fatune_tensor *const t[4] = {&x->q, &x->k, &x->v, &x->o};
    st = check_aligned(&s->k, t, vl_name, x->lse);
    fa_params a = varlen_params(x, &fp);
    int check;
    if (st == FATUNE_OK) st = mod_args(c, &fp, 0, &a, &check);
    if (st == FATUNE_OK) st = varlen_launch(c, s, &fp, &a, x);
    pthread_rwlock_unlock(&c->lock);
  }
  backend_leave(c->be);
  if (st == FATUNE_OK) errbuf[0] = '\0';
  return st;
}

/* The gradients of a variable-length batch: the forward call's checks on
** q, k, v and o, the backward call's on all eight tensors, then op bwd's
** variant for the dense key of the longest sequences in its varlen form. */
fatune_status fatune_attention_varlen_backward(fatune_ctx *c,
                                               const fatune_varlen_backward_args *x) {
  if (!c) return fail(FATUNE_EINVAL, "no context");
  if (!x) return fail(FATUNE_EINVAL, "no arguments");
  if (no_fp8(&x->q, "the backward pass of a variable-length batch") != FATUNE_OK)
    return FATUNE_EINVAL;
  const fatune_varlen_args fwd = {.q = x->q, .k = x->k, .v = x->v, .o = x->o,
                                  .lse = (void *)x->lse, .cu_seqlens_q = x->cu_seqlens_q,
                                  .cu_seqlens_k = x->cu_seqlens_k, .batch = x->batch,
                                  .max_seqlen_q = x->max_seqlen_q,
                                  .max_seqlen_k = x->max_seqlen_k, .causal = x->causal,
                                  .scale = x->scale};
  fa_problem fp;
  fatune_status st = check_varlen_args(&fwd, &fp);
  if (st != FATUNE_OK) return st;
  /* The dense backward call over the packed tensors: one batch of total_q
  ** queries and total_k keys, for the shapes, overlaps and alignment. */
  const fatune_backward_args view = {.q = x->q, .k = x->k, .v = x->v, .o = x->o,
                                     .dout = x->dout, .dq = x->dq, .dk = x->dk, .dv = x->dv,
                                     .lse = x->lse, .dlse = x->dlse, .causal = x->causal,
                                     .scale = x->scale};
  fatune_problem packed;
  if ((st = check_bwd_args(&view, &packed)) != FATUNE_OK) return st;
  fp.op = FA_OP_BWD;
  fp.mod = x->mod ? &x->mod->m : NULL;
  const budget bud = {0, x->deterministic != 0};
  return bwd_run(c, &fp, &bud, &view, x->cu_seqlens_q, x->cu_seqlens_k);
}
