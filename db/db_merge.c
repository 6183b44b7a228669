/*
** db_merge.c
** Bringing another fatune database into this one, in one transaction: its
** devices and variants are matched by their unique keys (and its ids
** mapped to ours), trials are added unless the key is taken; a trial
** recorded later there replaces ours. Its binaries are only counted: code
** is trusted only from this installation (db_mac.c), and another file's
** MACs were made under another key, if they were made by fatune at all.
** The other file is read in one read transaction, so it may be in use
** meanwhile.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"

/* Their id to ours; filled in ascending order of theirs (ORDER BY id), so
** a binary search finds an entry. */
typedef struct idmap {
  long long *from, *to;
  size_t n, cap;
} idmap;

static int idmap_add(idmap *m, long long from, long long to) {
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    long long *f = realloc(m->from, cap * sizeof *f);
    if (!f) return -1;
    m->from = f;
    long long *t = realloc(m->to, cap * sizeof *t);
    if (!t) return -1;
    m->to = t;
    m->cap = cap;
  }
  m->from[m->n] = from, m->to[m->n] = to, m->n++;
  return 0;
}

static int idmap_get(const idmap *m, long long from, long long *to) {
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->from[mid] < from) lo = mid + 1;
    else hi = mid;
  }
  if (lo == m->n || m->from[lo] != from) return -1;
  *to = m->to[lo];
  return 0;
}

static void idmap_free(idmap *m) {
  free(m->from);
  free(m->to);
}

typedef struct merge {
  db *d, *o;          /* ours (in a write transaction), theirs (in a read one) */
  idmap devices, variants;   /* a variant refused maps to REFUSED */
  dbi_checker check;
  db_merge_counts *c;
  char *err;
  size_t errlen;
} merge;

/* Runs sql on the other file and calls row(m, st) for each row. */
static int each_row(merge *m, const char *sql, int (*row)(merge *, sqlite3_stmt *)) {
  sqlite3_stmt *st;
  if (dbi_prepare(m->o->h, sql, &st, m->err, m->errlen) != 0) return -1;
  int rc, status = 0;
  while (status == 0 && (rc = dbi_step(st)) == SQLITE_ROW) status = row(m, st);
  if (status == 0 && rc != SQLITE_DONE)
    status = dbi_sqlfail(m->o->h, m->err, m->errlen, m->o->path);
  dbi_finalize(st);
  return status;
}

static int oom(merge *m) { return dbi_fail(m->err, m->errlen, "out of memory"); }

#define REFUSED (-1LL)

/* Counts a refused row, keeping the first one's id and reason. */
static void refused(size_t *count, char *first, size_t n, const char *what, long long id,
                    const char *why) {
  if ((*count)++ == 0) snprintf(first, n, "%s %lld: %s", what, id, why);
}

static int device_row(merge *m, sqlite3_stmt *st) {
  db_device dev = {
    .name = dbi_col_text(st, 1), .uuid = dbi_col_text(st, 2), .backend = dbi_col_text(st, 3),
    .cc_major = sqlite3_column_int(st, 4), .cc_minor = sqlite3_column_int(st, 5),
    .sm_count = sqlite3_column_int(st, 6), .smem_per_block_optin = sqlite3_column_int(st, 7),
    .l2_bytes = sqlite3_column_int64(st, 8)};
  long long id;
  int added;
  if (dbi_device_upsert(m->d->h, &dev, 0, &id, &added, m->err, m->errlen) != 0) return -1;
  if (added) m->c->devices_added++;
  else m->c->devices_skipped++;
  return idmap_add(&m->devices, sqlite3_column_int64(st, 0), id) != 0 ? oom(m) : 0;
}

static int variant_row(merge *m, sqlite3_stmt *st) {
  const long long theirs = sqlite3_column_int64(st, 0);
  char why[200];
  const char *kv = sqlite3_column_type(st, 7) == SQLITE_NULL ? NULL : dbi_col_text(st, 7);
  const int bad = dbi_check_variant(&m->check, kv, why, sizeof why, m->err, m->errlen);
  if (bad < 0) return -1;
  if (bad) {
    refused(&m->c->variants_refused, m->c->variant_refused, sizeof m->c->variant_refused,
            "variant", theirs, why);
    return idmap_add(&m->variants, theirs, REFUSED) != 0 ? oom(m) : 0;
  }
  db_variant v = {
    .family = dbi_col_text(st, 1), .template_version = dbi_col_text(st, 2),
    .name = dbi_col_text(st, 3), .hash = dbi_col_text(st, 4), .config = NULL,
    .source_hash = dbi_col_text(st, 6)};
  long long id;
  int added;
  if (dbi_variant_upsert(m->d->h, &v, dbi_col_text(st, 5), &id, &added, m->err, m->errlen) != 0)
    return -1;
  if (added) m->c->variants_added++;
  else m->c->variants_skipped++;
  return idmap_add(&m->variants, theirs, id) != 0 ? oom(m) : 0;
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
  const db_problem *p = &t->problem;
  dbi_bind_int(b, t->variant_id);
  dbi_bind_int(b, t->device_id);
  dbi_bind_text(b, p->arch);
  dbi_bind_text(b, p->dtype);
  const int v[] = {p->dim, p->req_seq_q, p->req_seq_k, p->seq_q, p->seq_k, p->batch, p->heads,
                   p->causal};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) dbi_bind_int(b, v[i]);
}

/* The key's fields version 3 added: an arch as fatune names one ("" for a
** row recorded before it kept them), and requested lengths no shorter than
** those run. 0, or 1 with why. */
static int check_request(sqlite3_stmt *st, char *why, size_t n) {
  const char *arch = dbi_col_text(st, 24);
  size_t len = strlen(arch), i = 3;
  int ok = len == 0 || (len <= 15 && !strncmp(arch, "sm_", 3));
  while (ok && len && i < len && arch[i] >= '0' && arch[i] <= '9') i++;
  ok = ok && (len == 0 || (i > 3 && (i == len || (i + 1 == len && arch[i] >= 'a' && arch[i] <= 'z'))));
  if (!ok) {
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

static int trial_row(merge *m, sqlite3_stmt *st) {
  db_trial trial = {0}, *t = &trial;   /* with our ids */
  if (idmap_get(&m->variants, sqlite3_column_int64(st, 0), &t->variant_id) != 0 ||
      idmap_get(&m->devices, sqlite3_column_int64(st, 1), &t->device_id) != 0)
    return dbi_fail(m->err, m->errlen, "%s: a trial names a variant or device it does not "
                    "have", m->o->path);
  char why[200];
  if (t->variant_id == REFUSED) snprintf(why, sizeof why, "its variant %lld was refused",
                                         (long long)sqlite3_column_int64(st, 0));
  if (t->variant_id == REFUSED || dbi_check_trial(st, 28, why, sizeof why) ||
      check_request(st, why, sizeof why)) {
    refused(&m->c->trials_refused, m->c->trial_refused, sizeof m->c->trial_refused, "trial",
            sqlite3_column_int64(st, 23), why);
    return 0;
  }
  t->problem = (db_problem){dbi_col_text(st, 2), sqlite3_column_int(st, 3),
                            sqlite3_column_int(st, 4), sqlite3_column_int(st, 5),
                            sqlite3_column_int(st, 6), sqlite3_column_int(st, 7),
                            sqlite3_column_int(st, 8), dbi_col_text(st, 24),
                            sqlite3_column_int(st, 25), sqlite3_column_int(st, 26)};
  t->seeded = sqlite3_column_type(st, 27) == SQLITE_INTEGER;
  t->seed = (unsigned long long)sqlite3_column_int64(st, 27);
  t->status = dbi_col_text(st, 9);
  t->message = sqlite3_column_type(st, 10) == SQLITE_NULL ? NULL : dbi_col_text(st, 10);
  double *r[] = {&t->max_abs_err, &t->rel_err, &t->lse_err, &t->median_us, &t->min_us,
                 &t->p20_us, &t->p80_us, &t->tflops, &t->gbps};
  for (int i = 0; i < 9; i++) *r[i] = dbi_col_real(st, 11 + i);
  t->counters = sqlite3_column_type(st, 20) == SQLITE_NULL ? NULL : dbi_col_text(st, 20);
  const char *created = dbi_col_text(st, 22);
  char ours[40];
  int found;
  if (exists(m, "SELECT created FROM trials WHERE variant_id = ? AND device_id = ? AND "
                "arch = ? AND dtype = ? AND dim = ? AND req_seq_q = ? AND req_seq_k = ? AND "
                "seq_q = ? AND seq_k = ? AND batch = ? AND heads = ? AND causal = ?",
             bind_trial_key, t, &found, ours, sizeof ours) != 0)
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

static int merge_all(merge *m) {
  if (each_row(m, "SELECT id, name, uuid, backend, cc_major, cc_minor, sm_count, "
                  "smem_per_block_optin, l2_bytes FROM devices ORDER BY id", device_row) != 0 ||
      each_row(m, "SELECT id, family, template_version, name, hash, config, source_hash, "
                  DBI_CONFIG_KV("config") " FROM variants ORDER BY id", variant_row) != 0 ||
      each_row(m, "SELECT count(*) FROM binaries", binary_count) != 0)
    return -1;
  return each_row(m, "SELECT variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, "
                     "causal, status, message, max_abs_err, rel_err, lse_err, median_us, "
                     "min_us, p20_us, p80_us, tflops, gbps, counters, fatune_version, created, "
                     "id, arch, req_seq_q, req_seq_k, seed, " DBI_TRIAL_CHECK_COLUMNS
                     " FROM trials ORDER BY id", trial_row);
}

int dbi_merge(db *d, const char *other_path, const dbi_merge_limits *lim, db_merge_counts *c,
              char *err, size_t errlen) {
  (void)lim;
  memset(c, 0, sizeof *c);
  merge m = {.d = d, .c = c, .err = err, .errlen = errlen};
  if (db_open(other_path, DB_READONLY, &m.o, err, errlen) != 0) return -1;
  int rc = -1;
  if (dbi_exec(m.o->h, "BEGIN", err, errlen) == 0) {
    if (dbi_begin(d->h, err, errlen) == 0) {
      if (merge_all(&m) == 0) rc = dbi_commit(d->h, err, errlen);
      else dbi_rollback(d->h);
    }
    dbi_rollback(m.o->h);   /* ends the read transaction; nothing was written */
  }
  idmap_free(&m.devices);
  idmap_free(&m.variants);
  dbi_check_free(&m.check);
  if (db_close(m.o) != 0 && rc == 0) rc = dbi_fail(err, errlen, "cannot close %s", other_path);
  return rc;
}

int db_merge(db *d, const char *other_path, db_merge_counts *c, char *err, size_t errlen) {
  static const dbi_merge_limits lim = {1000, 100000, 1000000, 60};
  return dbi_merge(d, other_path, &lim, c, err, errlen);
}
