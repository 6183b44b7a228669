/*
** db_merge.c
** Bringing another fatune database into this one, in one transaction: its
** devices and variants are matched by their unique keys (and its ids
** mapped to ours), trials are added unless the key is taken; a trial
** recorded later there replaces ours. Its binaries are only counted: code
** is trusted only from this installation (db_mac.c), and another file's
** MACs were made under another key, if they were made by fatune at all.
**
** The other file is anybody's, so merge reads only data from it: its
** schema must be exactly fatune's (db_check.c), it is read with views,
** triggers and untrusted schema functions off, every field is capped at
** the length fatune writes and every table at a number of rows, and each
** row is checked before it is taken (the rest are refused and counted).
** It is read in one read transaction, so it may be in use meanwhile.
**
** The devices and variants are checked first (a variant's config by the
** caller's db_merge_accept, for no target in particular and then for each
** target its trials name), before the destination's write lock is taken;
** the lock is then held lim->lock_s at most, which a progress handler
** enforces.
** Other writers wait for the lock up to two minutes (db.c), so a merge
** never makes them fail.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"
#include "fa_problem.h"

#define PROGRESS_OPS 1000   /* VM steps between looks at the clock */

/* Their id to ours, and whether the row was refused; filled in ascending
** order of theirs (ORDER BY id) by the checks, ours set when the row is
** written, so a binary search finds an entry. */
typedef struct idmap_entry {
  long long from, to;
  int refused;
} idmap_entry;

typedef struct idmap {
  idmap_entry *e;
  size_t n, cap;
} idmap;

static int idmap_add(idmap *m, long long from, int refused) {
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    idmap_entry *e = realloc(m->e, cap * sizeof *e);
    if (!e) return -1;
    m->e = e, m->cap = cap;
  }
  m->e[m->n++] = (idmap_entry){from, 0, refused};
  return 0;
}

static idmap_entry *idmap_find(const idmap *m, long long from) {
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->e[mid].from < from) lo = mid + 1;
    else hi = mid;
  }
  return lo < m->n && m->e[lo].from == from ? &m->e[lo] : NULL;
}

/* The verdict on a variant for one target its trials name; sorted by
** (variant, arch) once all are in. */
typedef struct fit {
  long long variant;
  char arch[16];
  char *why;          /* NULL when it fits, else why not */
} fit;

typedef struct fits {
  fit *e;
  size_t n, cap;
} fits;

static int fit_cmp(const void *a, const void *b) {
  const fit *x = a, *y = b;
  if (x->variant != y->variant) return x->variant < y->variant ? -1 : 1;
  return strcmp(x->arch, y->arch);
}

static int fits_add(fits *f, long long variant, const char *arch, const char *why) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 64;
    fit *e = realloc(f->e, cap * sizeof *e);
    if (!e) return -1;
    f->e = e, f->cap = cap;
  }
  fit *e = &f->e[f->n];
  e->variant = variant;
  snprintf(e->arch, sizeof e->arch, "%s", arch);
  e->why = why ? strdup(why) : NULL;
  if (why && !e->why) return -1;
  f->n++;
  return 0;
}

static const fit *fits_find(const fits *f, long long variant, const char *arch) {
  fit key = {.variant = variant};
  snprintf(key.arch, sizeof key.arch, "%s", arch);
  return f->n ? bsearch(&key, f->e, f->n, sizeof *f->e, fit_cmp) : NULL;
}

static void fits_free(fits *f) {
  for (size_t i = 0; i < f->n; i++) free(f->e[i].why);
  free(f->e);
}

enum { T_DEVICES, T_VARIANTS, T_TRIALS };

typedef struct merge {
  db *d, *o;          /* ours (in a write transaction), theirs (in a read one) */
  const char *path;   /* theirs */
  const dbi_merge_limits *lim;
  idmap devices, variants;
  size_t over[3];     /* rows past the cap, per table (T_*) */
  const db_merge_accept *accept;
  fits fits;          /* each taken variant against each target its trials name */
  db_merge_counts *c;
  double deadline;    /* on dbi_mono_s's clock: the lock is let go by then */
  int late;           /* the progress handler stopped a statement */
  char *err;
  size_t errlen;
} merge;

/* Runs sql on the other file, its ?1 (if any) bound to limit, and calls
** row(m, st) for each row. */
static int each_row(merge *m, const char *sql, size_t limit,
                    int (*row)(merge *, sqlite3_stmt *)) {
  sqlite3_stmt *st;
  if (dbi_prepare(m->o->h, sql, &st, m->err, m->errlen) != 0) return -1;
  int rc = sqlite3_bind_parameter_count(st) ? sqlite3_bind_int64(st, 1, (long long)limit)
                                             : SQLITE_OK, status = 0;
  if (rc != SQLITE_OK) status = dbi_sqlfail(m->o->h, m->err, m->errlen, m->path);
  while (status == 0 && (rc = dbi_step(st)) == SQLITE_ROW) status = row(m, st);
  if (status == 0 && rc != SQLITE_DONE)
    status = dbi_sqlfail(m->o->h, m->err, m->errlen, m->path);
  dbi_finalize(st);
  return status;
}

static int oom(merge *m) { return dbi_fail(m->err, m->errlen, "out of memory"); }

/* Counts a refused row, keeping the first one's id and reason. */
static void refused(size_t *count, char *first, size_t n, const char *what, long long id,
                    const char *why) {
  if ((*count)++ == 0 && first) snprintf(first, n, "%s %lld: %s", what, id, why);
}

/* A CASE naming a row's first field longer than fatune writes it (the
** buffers its readers hold, or what a tune writes, in bytes), or NULL. */
#define LONGER(c, n) "WHEN length(CAST(" c " AS BLOB)) > " n " THEN '" c "' "
#define CONFIG_MAX "4095"   /* the tuner's buffer for one */
#define DEVICE_TOO_LONG \
  "CASE " LONGER("name", "255") LONGER("uuid", "127") LONGER("backend", "7") "END"
#define VARIANT_TOO_LONG \
  "CASE " LONGER("family", "15") LONGER("template_version", "47") LONGER("name", "159") \
  LONGER("hash", "31") LONGER("config", CONFIG_MAX) LONGER("source_hash", "31") "END"
#define TRIAL_TOO_LONG \
  "CASE " LONGER("dtype", "7") LONGER("arch", "15") LONGER("status", "15") \
  LONGER("message", "65535") LONGER("counters", DBI_COUNTERS_MAX) \
  LONGER("fatune_version", "31") LONGER("compiler", "159") LONGER("suite_failed", "159") \
  LONGER("created", "31") "END"

/* 1 with why when column col names a field too long (counted), else 0. */
static int too_long(merge *m, sqlite3_stmt *st, int col, char *why, size_t n) {
  if (sqlite3_column_type(st, col) == SQLITE_NULL) return 0;
  m->c->too_long++;
  snprintf(why, n, "its %s is longer than fatune writes", dbi_col_text(st, col));
  return 1;
}

static const char devices_sql[] =
  "SELECT id, name, uuid, backend, cc_major, cc_minor, sm_count, smem_per_block_optin, "
  "l2_bytes, " DEVICE_TOO_LONG " FROM devices ORDER BY id LIMIT ?1";

static int device_check(merge *m, sqlite3_stmt *st) {
  char why[200];
  const int bad = too_long(m, st, 9, why, sizeof why);
  if (bad) refused(&m->c->devices_refused, NULL, 0, "device", 0, why);
  return idmap_add(&m->devices, sqlite3_column_int64(st, 0), bad) != 0 ? oom(m) : 0;
}

static int device_write(merge *m, sqlite3_stmt *st) {
  idmap_entry *e = idmap_find(&m->devices, sqlite3_column_int64(st, 0));
  if (!e || e->refused) return 0;
  db_device dev = {
    .name = dbi_col_text(st, 1), .uuid = dbi_col_text(st, 2), .backend = dbi_col_text(st, 3),
    .cc_major = sqlite3_column_int(st, 4), .cc_minor = sqlite3_column_int(st, 5),
    .sm_count = sqlite3_column_int(st, 6), .smem_per_block_optin = sqlite3_column_int(st, 7),
    .l2_bytes = sqlite3_column_int64(st, 8)};
  int added;
  if (dbi_device_upsert(m->d->h, &dev, 0, &e->to, &added, m->err, m->errlen) != 0) return -1;
  if (added) m->c->devices_added++;
  else m->c->devices_skipped++;
  return 0;
}

/* The config is read as "k=v,..." only when it is not too long to take. */
static const char variants_sql[] =
  "SELECT id, family, template_version, name, hash, config, source_hash, "
  "CASE WHEN length(CAST(config AS BLOB)) <= " CONFIG_MAX " THEN " DBI_CONFIG_KV("config") " END, "
  VARIANT_TOO_LONG ", op FROM variants ORDER BY id LIMIT ?1";

static int variant_check(merge *m, sqlite3_stmt *st) {
  const long long theirs = sqlite3_column_int64(st, 0);
  char why[200];
  int verdict = too_long(m, st, 8, why, sizeof why) ? DBI_ROW_REFUSED : DBI_ROW_OK;
  if (verdict == DBI_ROW_OK) {
    const db_merge_row row = {
      .family = dbi_col_text(st, 1), .name = dbi_col_text(st, 3), .hash = dbi_col_text(st, 4),
      .op = dbi_col_text(st, 9),
      .config_kv = sqlite3_column_type(st, 7) == SQLITE_NULL ? NULL : dbi_col_text(st, 7),
      .arch = ""};
    verdict = dbi_check_variant(m->accept, &row, why, sizeof why, m->err, m->errlen);
    if (verdict < 0) return -1;
    if (verdict == DBI_ROW_MISMATCH) m->c->name_mismatch++;
  }
  if (verdict != DBI_ROW_OK)
    refused(&m->c->variants_refused, m->c->variant_refused, sizeof m->c->variant_refused,
            "variant", theirs, why);
  return idmap_add(&m->variants, theirs, verdict != DBI_ROW_OK) != 0 ? oom(m) : 0;
}

static int variant_write(merge *m, sqlite3_stmt *st) {
  idmap_entry *e = idmap_find(&m->variants, sqlite3_column_int64(st, 0));
  if (!e || e->refused) return 0;
  db_variant v = {
    .family = dbi_col_text(st, 1), .template_version = dbi_col_text(st, 2),
    .name = dbi_col_text(st, 3), .hash = dbi_col_text(st, 4), .config = NULL,
    .source_hash = dbi_col_text(st, 6), .op = dbi_col_text(st, 9)};
  int added;
  if (dbi_variant_upsert(m->d->h, &v, dbi_col_text(st, 5), &e->to, &added, m->err,
                         m->errlen) != 0)
    return -1;
  if (added) m->c->variants_added++;
  else m->c->variants_skipped++;
  return 0;
}

/* Whether ours has a row for the key that bind(b, ctx) binds; a trial's
** recording time is copied to created. */
static int exists(merge *m, const char *sql, void (*bind)(dbi_binder *, const void *),
                  const void *ctx, int *found, char *created, size_t n) {
  sqlite3_stmt *st;
  if (dbi_prepare(m->d->h, sql, &st, m->err, m->errlen) != 0) return -1;
  dbi_binder b = dbi_bind_start(st);
  bind(&b, ctx);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  *found = rc == SQLITE_ROW;
  if (*found && created) snprintf(created, n, "%s", dbi_col_text(st, 0));
  dbi_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return dbi_sqlfail(m->d->h, m->err, m->errlen, "merging");
  return 0;
}

static int binary_count(merge *m, sqlite3_stmt *st) {
  m->c->binaries_not_imported = (size_t)sqlite3_column_int64(st, 0);
  return 0;
}

static void bind_trial_key(dbi_binder *b, const void *ctx) {
  const db_trial *t = ctx;
  dbi_bind_trial_key(b, t->variant_id, t->device_id, &t->problem);
}

/* Whether arch is one as fatune names them ("sm_90a"), or "". */
static int arch_named(const char *arch) {
  size_t len = strlen(arch), i = 3;
  int ok = len == 0 || (len <= 15 && !strncmp(arch, "sm_", 3));
  while (ok && len && i < len && arch[i] >= '0' && arch[i] <= '9') i++;
  return ok && (len == 0 || (i > 3 && (i == len || (i + 1 == len && arch[i] >= 'a' && arch[i] <= 'z'))));
}

/* The key's fields version 3 added: an arch as fatune names one ("" for a
** row recorded before it kept them), and requested lengths no shorter than
** those run. 0, or 1 with why. */
static int check_request(sqlite3_stmt *st, char *why, size_t n) {
  if (!arch_named(dbi_col_text(st, 24))) {
    snprintf(why, n, "arch is not a target fatune names");
    return 1;
  }
  const long long rq = sqlite3_column_int64(st, 25), rk = sqlite3_column_int64(st, 26);
  if (rq < sqlite3_column_int64(st, 4) || rk < sqlite3_column_int64(st, 5) || rq > 1 << 24 ||
      rk > 1 << 24) {
    snprintf(why, n, "a requested seq of %lld/%lld against %lld/%lld run", rq, rk,
             (long long)sqlite3_column_int64(st, 4), (long long)sqlite3_column_int64(st, 5));
    return 1;
  }
  return 0;
}

/* Our id for a trial's variant or device (1 with why when it was refused
** or lies past the cap, -1 when the file has no such row). */
static int parent(merge *m, int table, long long theirs, long long *ours, char *why, size_t n) {
  const char *what = table == T_DEVICES ? "device" : "variant";
  const idmap_entry *e = idmap_find(table == T_DEVICES ? &m->devices : &m->variants, theirs);
  if (!e && m->over[table]) {
    snprintf(why, n, "its %s %lld is past the rows one merge takes", what, theirs);
    return 1;
  }
  if (!e)
    return dbi_fail(m->err, m->errlen, "%s: a trial names a %s it does not have", m->path, what);
  if (e->refused) snprintf(why, n, "its %s %lld was refused", what, theirs);
  *ours = e->to;
  return e->refused;
}

/* 0 when the trial's variant (ours: taken) fits its arch, checked before
** the lock; 1 with why when not. "" goes with the variant's own verdict. */
static int trial_fits(merge *m, sqlite3_stmt *st, char *why, size_t n) {
  const char *arch = dbi_col_text(st, 24);
  if (!arch[0]) return 0;
  const long long theirs = sqlite3_column_int64(st, 0);
  const fit *f = fits_find(&m->fits, theirs, arch);
  if (f && !f->why) return 0;
  snprintf(why, n, "its variant %lld is not one for %s (%s)", theirs, arch,
           f ? f->why : "not checked for it");
  return 1;
}

/* 1 with why when the suite's columns (29-32) are not what fatune writes:
** all NULL, or a count of 1 to 64 cases, an error of 0 or more (NULL when
** none passed), names as text; determinism NULL, 0 or 1. */
static int suite_verdict(sqlite3_stmt *st, char *why, size_t n) {
  const int tc = sqlite3_column_type(st, 29), te = sqlite3_column_type(st, 30),
            tf = sqlite3_column_type(st, 31), td = sqlite3_column_type(st, 32);
  const long long cases = sqlite3_column_int64(st, 29), det = sqlite3_column_int64(st, 32);
  const double e = sqlite3_column_double(st, 30);
  int bad = 0;
  if (tc == SQLITE_NULL) bad = te != SQLITE_NULL || tf != SQLITE_NULL;
  else
    bad = tc != SQLITE_INTEGER || cases < 1 || cases > 64 || tf != SQLITE_TEXT ||
          (te != SQLITE_NULL && (te != SQLITE_FLOAT && te != SQLITE_INTEGER)) ||
          (te != SQLITE_NULL && !(e >= 0 && e < 1e300));
  if (bad) {
    snprintf(why, n, "its adversarial suite's columns are not what fatune writes");
    return 1;
  }
  if (td != SQLITE_NULL && (td != SQLITE_INTEGER || (det != 0 && det != 1))) {
    snprintf(why, n, "its deterministic is neither 0 nor 1");
    return 1;
  }
  return 0;
}

/* 1 with why, counted by kind, when the trial is not taken. */
static int trial_verdict(merge *m, sqlite3_stmt *st, db_trial *t, char *why, size_t n) {
  int rc = parent(m, T_VARIANTS, sqlite3_column_int64(st, 0), &t->variant_id, why, n);
  if (rc == 0) rc = parent(m, T_DEVICES, sqlite3_column_int64(st, 1), &t->device_id, why, n);
  if (rc != 0) return rc;
  const long long dim_v = sqlite3_column_int64(st, 33);
  if (sqlite3_column_type(st, 33) != SQLITE_INTEGER || dim_v < 0 || dim_v > FA_DIM_MAX ||
      dim_v == sqlite3_column_int64(st, 3)) {
    snprintf(why, n, "its dim_v is neither 0 nor a head dim from 1 to %d other than its dim",
             FA_DIM_MAX);
    return 1;
  }
  if (too_long(m, st, 37, why, n)) return 1;
  const int ct = sqlite3_column_type(st, 28);
  if (ct != SQLITE_NULL && ct != SQLITE_TEXT) {
    snprintf(why, n, "its compiler is not text");
    return 1;
  }
  if (suite_verdict(st, why, n)) return 1;
  const int verdict = dbi_check_trial(st, 38, why, n);
  if (verdict == DBI_ROW_BAD_CREATED) m->c->bad_created++;
  return verdict != DBI_ROW_OK || check_request(st, why, n) || trial_fits(m, st, why, n);
}

static int trial_row(merge *m, sqlite3_stmt *st) {
  db_trial trial = {0}, *t = &trial;   /* with our ids */
  char why[200];
  const int no = trial_verdict(m, st, t, why, sizeof why);
  if (no < 0) return -1;
  if (no) {
    refused(&m->c->trials_refused, m->c->trial_refused, sizeof m->c->trial_refused, "trial",
            sqlite3_column_int64(st, 23), why);
    return 0;
  }
  t->problem = (db_problem){dbi_col_text(st, 2), sqlite3_column_int(st, 3),
                            sqlite3_column_int(st, 4), sqlite3_column_int(st, 5),
                            sqlite3_column_int(st, 6), sqlite3_column_int(st, 7),
                            sqlite3_column_int(st, 8), dbi_col_text(st, 24),
                            sqlite3_column_int(st, 25), sqlite3_column_int(st, 26), NULL, 0, 0,
                            sqlite3_column_int(st, 33), NULL, sqlite3_column_int(st, 34),
                            sqlite3_column_int(st, 35), sqlite3_column_int(st, 36)};
  t->seeded = sqlite3_column_type(st, 27) == SQLITE_INTEGER;
  t->seed = (unsigned long long)sqlite3_column_int64(st, 27);
  t->status = dbi_col_text(st, 9);
  t->message = sqlite3_column_type(st, 10) == SQLITE_NULL ? NULL : dbi_col_text(st, 10);
  double *r[] = {&t->max_abs_err, &t->rel_err, &t->lse_err, &t->median_us, &t->min_us,
                 &t->p20_us, &t->p80_us, &t->tflops, &t->gbps};
  for (int i = 0; i < 9; i++) *r[i] = dbi_col_real(st, 11 + i);
  t->counters = sqlite3_column_type(st, 20) == SQLITE_NULL ? NULL : dbi_col_text(st, 20);
  t->compiler = sqlite3_column_type(st, 28) == SQLITE_NULL ? NULL : dbi_col_text(st, 28);
  t->suite_cases = sqlite3_column_type(st, 29) == SQLITE_NULL ? 0 : sqlite3_column_int(st, 29);
  t->suite_err = dbi_col_real(st, 30);
  t->suite_failed = sqlite3_column_type(st, 31) == SQLITE_NULL ? NULL : dbi_col_text(st, 31);
  t->deterministic = sqlite3_column_type(st, 32) == SQLITE_NULL ? DB_DET_UNKNOWN
                     : sqlite3_column_int(st, 32)                ? DB_DET_YES
                                                                 : DB_DET_NO;
  const char *created = dbi_col_text(st, 22);
  char ours[40];
  int found;
  if (exists(m, "SELECT created FROM trials WHERE " DBI_TRIAL_KEY_MATCH, bind_trial_key, t,
             &found, ours, sizeof ours) != 0)
    return -1;
  if (found && strcmp(created, ours) <= 0) {
    m->c->trials_skipped++;
    return 0;
  }
  if (dbi_trial_write(m->d->h, t, dbi_col_text(st, 21), created, m->err, m->errlen) != 0)
    return -1;
  if (found) m->c->trials_replaced++;
  else m->c->trials_added++;
  return 0;
}

/* Rows of each table past the caps: refused, counted, never read. */
static int count_over(merge *m) {
  static const char *const sql[] = {
    "SELECT max(count(*) - ?1, 0) FROM devices", "SELECT max(count(*) - ?1, 0) FROM variants",
    "SELECT max(count(*) - ?1, 0) FROM trials"};
  const size_t cap[] = {m->lim->devices, m->lim->variants, m->lim->trials};
  size_t *refused_rows[] = {&m->c->devices_refused, &m->c->variants_refused,
                            &m->c->trials_refused};
  for (int i = 0; i < 3; i++) {
    sqlite3_stmt *st;
    if (dbi_prepare(m->o->h, sql[i], &st, m->err, m->errlen) != 0) return -1;
    int rc = sqlite3_bind_int64(st, 1, (long long)cap[i]);
    if (rc == SQLITE_OK) rc = dbi_step(st);
    if (rc == SQLITE_ROW) m->over[i] = (size_t)sqlite3_column_int64(st, 0);
    dbi_finalize(st);
    if (rc != SQLITE_ROW) return dbi_sqlfail(m->o->h, m->err, m->errlen, m->path);
    m->c->over_cap += m->over[i];
    *refused_rows[i] += m->over[i];
  }
  return 0;
}

/* Each target the trials within the cap name, with their variant, once per
** pair. */
static const char fits_sql[] =
  "SELECT DISTINCT t.variant_id, v.family, v.name, v.hash, "
  "CASE WHEN length(CAST(v.config AS BLOB)) <= " CONFIG_MAX " THEN "
  DBI_CONFIG_KV("v.config") " END, t.arch, v.op "
  "FROM (SELECT variant_id, arch FROM trials ORDER BY id LIMIT ?1) AS t "
  "JOIN variants AS v ON v.id = t.variant_id WHERE typeof(t.arch) = 'text' AND t.arch <> ''";

/* The verdict on a taken variant for one target; a variant refused, or an
** arch fatune does not name, is left to the trial's own checks. */
static int fit_check(merge *m, sqlite3_stmt *st) {
  const long long theirs = sqlite3_column_int64(st, 0);
  const idmap_entry *e = idmap_find(&m->variants, theirs);
  const char *arch = dbi_col_text(st, 5);
  if (!e || e->refused || !arch_named(arch)) return 0;
  const db_merge_row row = {
    .family = dbi_col_text(st, 1), .name = dbi_col_text(st, 2), .hash = dbi_col_text(st, 3),
    .op = dbi_col_text(st, 6),
    .config_kv = sqlite3_column_type(st, 4) == SQLITE_NULL ? NULL : dbi_col_text(st, 4),
    .arch = arch};
  char why[160];
  const int verdict = dbi_check_variant(m->accept, &row, why, sizeof why, m->err, m->errlen);
  if (verdict < 0) return -1;
  return fits_add(&m->fits, theirs, arch, verdict == DBI_ROW_OK ? NULL : why) != 0 ? oom(m) : 0;
}

/* Before the lock: what to take of the devices and variants, and for
** which targets. */
static int check_all(merge *m) {
  if (count_over(m) != 0 || each_row(m, devices_sql, m->lim->devices, device_check) != 0 ||
      each_row(m, variants_sql, m->lim->variants, variant_check) != 0 ||
      each_row(m, fits_sql, m->lim->trials, fit_check) != 0)
    return -1;
  if (m->fits.n) qsort(m->fits.e, m->fits.n, sizeof *m->fits.e, fit_cmp);
  return 0;
}

/* Under the lock. */
static int merge_all(merge *m) {
  if (each_row(m, devices_sql, m->lim->devices, device_write) != 0 ||
      each_row(m, variants_sql, m->lim->variants, variant_write) != 0 ||
      each_row(m, "SELECT count(*) FROM binaries", 0, binary_count) != 0)
    return -1;
  return each_row(m, "SELECT variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, "
                     "causal, status, message, max_abs_err, rel_err, lse_err, median_us, "
                     "min_us, p20_us, p80_us, tflops, gbps, counters, fatune_version, created, "
                     "id, arch, req_seq_q, req_seq_k, seed, compiler, suite_cases, suite_err, "
                     "suite_failed, deterministic, dim_v, req_batch, kv_group, page, "
                     TRIAL_TOO_LONG ", "
                     DBI_TRIAL_CHECK_COLUMNS " FROM trials ORDER BY id LIMIT ?1", m->lim->trials,
                  trial_row);
}

static int past_deadline(void *ud) {
  merge *m = ud;
  if (dbi_mono_s() <= m->deadline) return 0;
  m->late = 1;
  return 1;   /* the statement stops with SQLITE_INTERRUPT */
}

static void watch_clock(merge *m, int on) {
  sqlite3_progress_handler(m->d->h, on ? PROGRESS_OPS : 0, on ? past_deadline : NULL, m);
  sqlite3_progress_handler(m->o->h, on ? PROGRESS_OPS : 0, on ? past_deadline : NULL, m);
}

/* The write transaction, within the deadline; the clock is let go before
** COMMIT or ROLLBACK, which must not be stopped halfway. */
static int merge_locked(merge *m) {
  if (dbi_begin(m->d->h, m->err, m->errlen) != 0) return -1;
  m->deadline = dbi_mono_s() + m->lim->lock_s;
  watch_clock(m, 1);
  int ok = merge_all(m) == 0;
  watch_clock(m, 0);
  if (ok && dbi_mono_s() > m->deadline) m->late = 1, ok = 0;
  if (ok) return dbi_commit(m->d->h, m->err, m->errlen);
  dbi_rollback(m->d->h);
  if (m->late)
    dbi_fail(m->err, m->errlen, "%s: merging it would hold the database's write lock over %g s; "
             "stopped, nothing of it merged", m->path, m->lim->lock_s);
  return -1;
}

/* What a file planted cannot make run: views and triggers are off, and
** functions that are not innocuous cannot run from its schema. */
static int harden(merge *m) {
  sqlite3 *h = m->o->h;
  if (sqlite3_db_config(h, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL) != SQLITE_OK ||
      sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_VIEW, 0, (int *)NULL) != SQLITE_OK ||
      sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)NULL) != SQLITE_OK)
    return dbi_sqlfail(h, m->err, m->errlen, m->path);
  return 0;
}

/* The first reason, when every refusal was of rows past the caps. */
static void over_reason(merge *m) {
  db_merge_counts *c = m->c;
  if (c->variants_refused && !c->variant_refused[0])
    snprintf(c->variant_refused, sizeof c->variant_refused, "past the %zu variants one merge "
             "takes", m->lim->variants);
  if (c->trials_refused && !c->trial_refused[0])
    snprintf(c->trial_refused, sizeof c->trial_refused, "past the %zu trials one merge takes",
             m->lim->trials);
}

int dbi_merge(db *d, const char *other_path, const db_merge_accept *accept,
              const dbi_merge_limits *lim, db_merge_counts *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  merge m = {.d = d, .path = other_path, .lim = lim, .accept = accept, .c = c, .err = err,
             .errlen = errlen};
  if (db_open(other_path, DB_READONLY, &m.o, err, errlen) != 0) return -1;
  int rc = -1;
  if (harden(&m) == 0 && dbi_exec(m.o->h, "BEGIN", err, errlen) == 0) {
    if (dbi_check_schema(m.o->h, other_path, err, errlen) == 0 && check_all(&m) == 0)
      rc = merge_locked(&m);
    dbi_rollback(m.o->h);   /* ends the read transaction; nothing was written */
  }
  over_reason(&m);
  free(m.devices.e);
  free(m.variants.e);
  fits_free(&m.fits);
  if (db_close(m.o) != 0 && rc == 0) rc = dbi_fail(err, errlen, "cannot close %s", other_path);
  return rc;
}

/* A merge holds the lock a minute at most: other writers wait two. The
** caps are far above what a sweep records. */
int db_merge(db *d, const char *other_path, const db_merge_accept *accept,
             db_merge_counts *c, char *err, size_t errlen) {
  static const dbi_merge_limits lim = {1000, 100000, 1000000, 60};
  return dbi_merge(d, other_path, accept, &lim, c, err, errlen);
}
