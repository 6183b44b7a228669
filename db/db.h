/*
** db.h
** The results database: one SQLite file holding the devices, the variants,
** the compile cache (binaries), every trial, and a view of the best variant
** per (device, op, dtype, dim, seq_q, seq_k, causal), and for op decode per
** batch, GQA ratio and page size too.
**
** The file is WAL-mode SQLite with foreign keys on; its schema version is
** PRAGMA user_version, moved forward by migrations when an older file is
** opened, and PRAGMA application_id marks it as fatune's. A file that is
** not a fatune database (not SQLite, or SQLite of another application),
** that is corrupt, or that a newer fatune wrote is refused and left
** untouched: it is examined through a read-only connection before anything
** may write to it.
**
** Every write is one transaction (BEGIN IMMEDIATE), so a process killed at
** any moment loses at most the write in flight. Several processes may write
** the same file at once: a busy timeout and retries with backoff wait for
** the lock instead of failing with "database is locked".
**
** Every function returns 0, or -1 with a one-line message in err. A db
** handle belongs to one thread at a time; a forked child opens its own.
*/
#ifndef DB_H
#define DB_H

#include <stddef.h>
#include <stdio.h>

#define DB_SCHEMA_VERSION 11         /* what this fatune writes; see db_schema.c */
#define DB_APPLICATION_ID 0x46415455 /* "FATU" in PRAGMA application_id */
#define DB_FATUNE_VERSION "0.1.0"    /* stored with every trial */

typedef struct db db;

enum {
  DB_CREATE = 1,  /* create the file, and its missing directories (mode 0700) */
  DB_READONLY = 2 /* read only, never write: no WAL switch, no migration, so a file
                     of an older schema is refused (a writing open updates it); for
                     the readers and merge's source */
};

/* Opens path (NULL: db_default_path) and brings its schema up to date.
** Without DB_CREATE a missing file is an error; an empty (0-byte) file is
** a new database (with DB_READONLY, an empty one in memory). A DB_READONLY
** handle may only be read from. */
int db_open(const char *path, int flags, db **out, char *err, size_t errlen);
/* Whether path is a file that only a DB_READONLY open may touch: one with
** no write permission bit at all, or in a folder with none (chmod a-w), or
** one this user cannot write, or in a folder it cannot write (SQLite makes
** its journals there). The bits count for root too, who could write
** anyway: a file or folder made read-only is to be left as it is. 0 when
** path does not exist. */
int db_read_only(const char *path);
/* -1 only when SQLite could not close cleanly (a statement left open). */
int db_close(db *d);
const char *db_path(const db *d);

/* $FATUNE_DB, else $XDG_CACHE_HOME/fatune/fatune.db, else
** $HOME/.cache/fatune/fatune.db. */
int db_default_path(char *buf, size_t n, char *err, size_t errlen);

/* ---- Devices and variants: upserts returning the row's id ---- */

typedef struct db_device {
  const char *name;        /* "NVIDIA H200", or the emulator's description */
  const char *uuid;        /* the GPU's UUID, "emu" for the emulator; NULL or
                              "": the name identifies the device */
  const char *backend;     /* "cuda" or "emu" */
  int cc_major, cc_minor;  /* compute capability; 0 on the emulator */
  int sm_count;
  int smem_per_block_optin;  /* bytes */
  long long l2_bytes;
} db_device;

/* Unique on (uuid, backend); the other fields are refreshed when they
** changed (a new driver may report another name). */
int db_device_id(db *d, const db_device *dev, long long *id, char *err, size_t errlen);

typedef struct db_variant {
  const char *family;            /* gen_config.family: a template family's name */
  const char *template_version;  /* gen_kernel.template_version */
  const char *name;
  const char *hash;              /* 12 hex digits */
  const char *config;            /* one JSON object, as gen_config_json writes it */
  const char *source_hash;       /* gen_kernel.source_hash */
  const char *op;                /* "fwd", "bwd", "decode" (fa_op_name); NULL: "fwd" */
  const char *mod, *mod_label;   /* its modification's hash and label; NULL: none */
} db_variant;

/* Unique on (template_version, hash): a kernel is a pure function of them,
** so an existing row is returned as it is. */
int db_variant_id(db *d, const db_variant *v, long long *id, char *err, size_t errlen);

/* ---- The compile cache ---- */

typedef struct db_binary_key {
  const char *source_hash;
  const char *target;            /* "sm_90", or "host" for emulator objects */
  const char *compiler_version;  /* NVRTC's, or the host compiler's */
  const char *options;           /* the compile options, as one string */
} db_binary_key;

typedef struct db_binary {
  unsigned char *data;   /* CUBIN or emulator object; db_binary_get mallocs it */
  size_t size;
  /* The compiler's report: registers, bytes spilled (stores and loads),
  ** static shared memory; 0 where it gives none (the emulator's). */
  int registers, spill_bytes, smem_bytes;
  double compile_ms;
  int untrusted;         /* db_binary_get: an entry is there, but not one this
                            installation stored (its MAC does not verify) */
} db_binary;

/* The compile cache runs only what this installation stored: every blob is
** stored with a keyed MAC of its key and bytes, under this user's secret
** key ($FATUNE_KEY, an absolute path, else $XDG_CONFIG_HOME/fatune/key,
** else ~/.config/fatune/key; made on first use, mode 0600), and is returned
** only when that MAC verifies. Without a usable key (one open to others, a
** symbolic link, one in a folder others may write, ...) both calls fail
** with the reason, and the caller compiles every time. */

/* Stores the blob with its MAC, replacing an entry with the same key (a
** recompile after an untrusted entry, say). */
int db_binary_put(db *d, const db_binary_key *key, const db_binary *bin, char *err,
                  size_t errlen);

/* found = 1 and out filled (free with db_binary_free), or found = 0. An
** entry whose MAC does not verify (edited by hand, stored under another
** key, a bad disk) is not returned: found = 0, out->untrusted = 1, and err
** says "binary cache entry not trusted"; the caller recompiles and puts it
** again. Checking that a blob belongs to its source hash is the caller's
** affair. */
int db_binary_get(db *d, const db_binary_key *key, db_binary *out, int *found, char *err,
                  size_t errlen);
void db_binary_free(db_binary *b);

/* ---- Trials ---- */

typedef struct db_problem {
  const char *dtype;       /* "fp32", "fp64", "fp16", "bf16" */
  int dim, seq_q, seq_k;   /* seq_q, seq_k: what ran */
  int batch, heads;        /* part of a trial's key; db_best ignores them */
  int causal;              /* 0 or 1 */
  const char *arch;        /* the target ("sm_90"); NULL: "" for a trial (not
                              known), any for db_best */
  int req_seq_q, req_seq_k;  /* the sequence lengths asked for (the emulator
                              runs shorter ones); 0: seq_q, seq_k */
  const char *op;          /* db_best: the variant's op ("fwd"); NULL: "fwd". A
                              trial's op is its variant's. */
  /* db_best only: an error budget, the largest norm-relative error on the
  ** main case and the adversarial suite, every case of which must have
  ** passed (0: no budget); and bitwise determinism asked for. */
  double max_rel_err;
  int deterministic;
  int dim_v;               /* V's and O's head dim; 0 (or dim): dim */
  const char *mod;         /* db_best: the modification's hash (fa_mod.hash); NULL: none */
  /* Part of the key of a trial and of db_best's, matched exactly: where the
  ** tuned choice depends on them (op decode), the batch asked for (the
  ** emulator runs a smaller one: batch above is what ran), the query heads
  ** per K/V head and the tokens per page of the KV cache (0: contiguous).
  ** For fwd and bwd leave them 0: req_batch 0, kv_group 0 (taken as 1),
  ** page 0. */
  int req_batch, kv_group, page;
} db_problem;

typedef struct db_trial {
  long long variant_id, device_id;
  db_problem problem;      /* the problem actually run */
  const char *status;      /* "ok", "invalid", "compile_error", "crashed", "timeout" */
  const char *message;     /* why it is not ok; NULL when ok */
  /* NAN for what was not measured; stored as NULL. The emulator does not
  ** time, so its trials have NAN timings. */
  double max_abs_err, rel_err, lse_err;
  double median_us, min_us, p20_us, p80_us, tflops, gbps;
  /* A JSON object, or NULL. Emulator trials are ranked on its
  ** "global_bytes_read" + "global_bytes_written" (see the best view). */
  const char *counters;
  int seeded;              /* seed holds the seed of the inputs */
  unsigned long long seed;
  /* What compiled the code it ran: "NVRTC 13.0" on a GPU, the host
  ** compiler's version line on the emulator; NULL when not said. */
  const char *compiler;
  /* The adversarial suite (tuner/trial/suite.h): how many of its cases
  ** ran (0: none; stored as NULL), the worst norm-relative error of those
  ** passed, the names of those failed, comma-separated ("" none). */
  int suite_cases;
  double suite_err;
  const char *suite_failed;
  /* DB_DET_YES: the same bits on every run checked (two schedules on the
  ** emulator, repeated launches on a GPU; stored as 1), DB_DET_NO: declared
  ** or found otherwise (0), DB_DET_UNKNOWN (the zero value; NULL). */
  int deterministic;
} db_trial;
enum { DB_DET_UNKNOWN = 0, DB_DET_YES = 1, DB_DET_NO = 2 };

/* done = 1 when a trial with this key (any status) is recorded: a resumed
** run skips it, unless it was asked to measure again. */
int db_trial_done(db *d, long long variant_id, long long device_id, const db_problem *p,
                  int *done, char *err, size_t errlen);

/* Inserts the trial, or replaces the one with the same key, stamped with
** DB_FATUNE_VERSION and the time. */
int db_trial_put(db *d, const db_trial *t, char *err, size_t errlen);

/* The trial recorded for a key, as db_trial_done finds it: found = 0 when
** there is none. Its text fields point into buffers of out. */
typedef struct db_recorded {
  db_trial t;
  char status[16], message[256], counters[1024], created[32], suite_failed[160];
} db_recorded;
int db_trial_get(db *d, long long variant_id, long long device_id, const db_problem *p,
                 db_recorded *out, int *found, char *err, size_t errlen);

/* ---- SASS figures (db_sass.c) ---- */

/* A variant's main-loop counts for a target, per K/V block per warp, and
** the throughput estimate for a GPU (tuner/analysis/sass.h, tuner/analysis/estimate.h). */
typedef struct db_sass {
  long long variant_id;
  const char *target;      /* "sm_80" */
  const char *gpu;         /* the estimate's GPU ("a100"), "" or NULL for none */
  const char *mma;         /* "HMMA", "FFMA", ... */
  int registers;           /* < 0: unknown, stored as NULL */
  long long loop_instructions, loop_hmma, loop_mufu, loop_ldsm, loop_lds, loop_ldgsts,
      loop_bar, loop_shfl, loop_local, loop_int;
  double non_mma_per_mma;  /* NAN: NULL */
  int ctas_per_sm;         /* < 0: no estimate, stored as NULL (and bound, est_tflops) */
  const char *bound;
  double est_tflops;
} db_sass;

/* Inserts the figures, or replaces those of the same variant, target and GPU. */
int db_sass_put(db *d, const db_sass *s, char *err, size_t errlen);

/* A GPU trial beside the estimate for its variant: the device's name (the
** file's text: the caller escapes it), the estimate's GPU, both TFLOP/s. */
typedef struct db_sass_point {
  char device[128], gpu[16];
  char dtype[8];
  int dim, dim_v, causal, seq_q;
  double measured_tflops, est_tflops;
  int registers, ctas_per_sm;   /* the variant's, for the estimate's GPU; -1: unknown */
} db_sass_point;
typedef int (*db_sass_point_fn)(const db_sass_point *p, void *ud);   /* non-zero stops */

/* Every ok GPU trial with a finite TFLOP/s whose variant has an estimate,
** for each of the variant's estimates (the caller keeps the one for the
** device's GPU). */
int db_sass_points(db *d, db_sass_point_fn fn, void *ud, char *err, size_t errlen);

/* ---- Baselines (db_baseline.c) ---- */

/* PyTorch's attention timed on a GPU, for the report to draw beside
** fatune's trials. */
typedef struct db_baseline {
  const char *gpu;         /* the device's name, as devices.name has it */
  const char *backend;     /* "sdpa-flash", "sdpa-cudnn": letters, digits, '-', '_', '.' */
  const char *dtype;       /* "fp32", "fp64", "fp16", "bf16" */
  int dim, seq_q, seq_k, batch, heads, causal;
  double median_us, tflops;
  const char *torch_version;
} db_baseline;

/* Checks every field of the n rows (a sane range, printable text), then, in
** one transaction, inserts each or replaces the one with the same key (gpu,
** backend, problem). A row refused: nothing is written, *bad is its index
** and err says why. */
int db_baseline_put(db *d, const db_baseline *b, size_t n, size_t *bad, char *err,
                    size_t errlen);

/* A recorded baseline, its text in the struct's buffers. */
typedef struct db_baseline_row {
  char gpu[128], backend[32], dtype[8], torch_version[64], created[32];
  int dim, seq_q, seq_k, batch, heads, causal;
  double median_us, tflops;
} db_baseline_row;
typedef int (*db_baseline_fn)(const db_baseline_row *b, void *ud);   /* non-zero stops */

/* Every baseline that passes the checks of db_baseline_put (a file edited
** by hand may hold others: they are passed over), by gpu, backend, dtype,
** dim, causal, seq_q. */
int db_baselines(db *d, db_baseline_fn fn, void *ud, char *err, size_t errlen);

/* ---- Queries ---- */

typedef struct db_best_row {
  char variant[160], hash[32], template_version[64], source_hash[32];
  char config[1024];        /* JSON object */
  char config_kv[1024];     /* the same as "k=v,..." text, in the object's order; "" when
                               it is not an object of strings and integers, or is empty */
  char device[256], uuid[128], backend[8];
  char dtype[8], arch[16];   /* arch "": recorded before fatune kept it */
  int dim, seq_q, seq_k, batch, heads, causal;   /* what ran */
  int dim_v;                 /* V's head dim where it is not dim, else 0 */
  int req_seq_q, req_seq_k;  /* what was asked */
  int req_batch, kv_group, page;   /* the key's (db_problem's); 0, 1, 0 but for decode */
  double max_abs_err, rel_err, median_us, tflops, gbps;   /* NAN when not measured */
  long long global_bytes;   /* read + written from the counters, -1 when unknown */
  char created[32];         /* ISO 8601, UTC */
} db_best_row;

/* The best ok trial for the key in p (batch and heads ignored; req_batch,
** kv_group and page matched exactly; the target p->arch, or any when NULL)
** on the devices that device names (its name, its uuid, or part of its
** name, case-insensitive; NULL: any). Sequence lengths are those asked for
** (p->req_seq_q, else p->seq_q): without one for p's very seq_q and seq_k,
** the one for the nearest tuned seq_q, then seq_k: exact = 0 and out says
** which seq it is. found = 0 when the device, dtype, dim and causal have
** none at all. A candidate with a field longer than db_best_row holds is
** passed over, never an error: the next one is taken, or none. */
int db_best(db *d, const char *device, const db_problem *p, db_best_row *out, int *found,
            int *exact, char *err, size_t errlen);

/* What p's budget asks, as words for a message ("an error budget of 1e-05
** with determinism", "determinism"); "" without one. */
void db_budget_text(const db_problem *p, char *buf, size_t n);

typedef struct db_filter {
  const char *device;      /* as for db_best; NULL: any */
  const char *dtype;       /* NULL: any */
  int dim, seq_q, seq_k, batch, heads;   /* 0: any; seq_q and seq_k as asked */
  int causal;              /* -1: any */
  const char *op;          /* the variants' op ("fwd"); NULL: any */
  int dim_v;               /* 0: any; dim's own: those whose V head dim is dim */
  /* batch above is matched as asked where the key holds it (req_batch, op
  ** decode), else as run. 0: any. */
  int kv_group, page;
} db_filter;

/* The trials that pass f, as a table or a JSON array, to out; rows says how
** many. */
int db_show(db *d, const db_filter *f, int json, FILE *out, size_t *rows, char *err,
            size_t errlen);

/* Every trial, format "csv" (a header line, then one line per trial) or
** "json" (an array of objects). */
int db_export(db *d, const char *format, FILE *out, size_t *rows, char *err, size_t errlen);

typedef struct db_merge_counts {
  size_t devices_added, devices_skipped;
  size_t variants_added, variants_skipped;
  size_t binaries_not_imported;   /* all of the other file's */
  size_t trials_added, trials_replaced, trials_skipped;
  /* Rows no tune could have recorded (a dim of -1, a timing of -1 us, a
  ** config outside the space), left out; the trials of a refused variant
  ** too. The first of each, "trial 12: dim -1", fit for a terminal. */
  size_t variants_refused, trials_refused;
  char variant_refused[256], trial_refused[256];
  /* Of the rows refused (devices too), those with a field longer than
  ** fatune writes, variants whose name or hash is not their config's,
  ** trials whose created is not fatune's timestamp, and rows past the
  ** most one merge takes. */
  size_t too_long, name_mismatch, bad_created, over_cap;
  size_t devices_refused;
} db_merge_counts;

/* Whether a variant of the other file is one of the space, asked of the
** caller, which knows the space (the database does not render kernels). */
typedef struct db_merge_row {
  const char *family, *name, *hash;
  const char *op;          /* the op it says it computes ("fwd") */
  const char *config_kv;   /* its config as "k=v,...", never "" */
  const char *arch;        /* the target to check it for: a trial's ("sm_90a"), or "" for
                              the variant itself and for trials recorded without one */
} db_merge_row;

/* DB_MERGE_TAKE when row's config renders for its arch (for arch "": for
** a target of the caller's choice) and its family, name, hash and op are
** those of the config; DB_MERGE_REFUSE (not in the space for that arch) or
** DB_MERGE_MISMATCH, with a line fit for a terminal in why (n bytes); -1
** with err when the check itself cannot run. */
enum { DB_MERGE_TAKE, DB_MERGE_REFUSE, DB_MERGE_MISMATCH };
typedef int (*db_merge_accept_fn)(void *ud, const db_merge_row *row, char *why, size_t n,
                                  char *err, size_t errlen);
typedef struct db_merge_accept {
  db_merge_accept_fn fn;
  void *ud;
} db_merge_accept;

/* Brings the devices, variants and trials of the fatune database at
** other_path into d, in one transaction, mapping ids through the unique
** keys: an entry already present is skipped, except a trial, which the
** other file's replaces when it was recorded later. Its binaries are
** counted, never imported: a binary is trusted only from this
** installation. other_path is opened with DB_READONLY and never written:
** refused when it is not fatune's, or is newer or older than this fatune.
**
** accept is asked once for each variant (arch "": a variant refused takes
** its trials with it) and once for each other arch its trials name: a
** trial is taken only when its variant is accepted for the trial's own
** target. A trial with an empty arch (recorded before fatune kept them)
** goes with its variant's verdict. All asking is done before the write
** lock is taken. */
int db_merge(db *d, const char *other_path, const db_merge_accept *accept,
             db_merge_counts *c, char *err, size_t errlen);

#endif
