/*
** db_check.c
** What merge takes from another file, which anybody may have written: only
** the schema this fatune makes, compared object by object with one made in
** memory (a view or trigger planted there never runs, and no table differs
** from ours); a trial only when each field holds what a tune could have
** recorded (a timing of -1 us would rank first everywhere), a variant only
** when the caller's check says its config is a point of the space the
** templates know and its name and hash are those of its config (else a
** tune of the named variant would be recorded on another's row). Why a row
** is refused names the field; text from the file in it is made fit for a
** terminal.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"
#include "fa_escape.h"
#include "fa_problem.h"

#define SEQ_MAX (1 << 24)     /* the command's own limits */
#define BATCH_MAX 65535

/* ---- The schema ---- */

#define SCHEMA_SQL "SELECT type, name, tbl_name, sql FROM sqlite_schema"
#define SCHEMA_MAX 32   /* objects of fatune's schema; it has 14 */

typedef struct schema_obj {
  char *type, *name, *tbl, *sql;   /* sql NULL for an index a constraint made */
  int seen;
} schema_obj;

typedef struct schema {
  schema_obj o[SCHEMA_MAX];
  size_t n;
} schema;

static void schema_free(schema *s) {
  for (size_t i = 0; i < s->n; i++) {
    sqlite3_free(s->o[i].type);
    sqlite3_free(s->o[i].name);
    sqlite3_free(s->o[i].tbl);
    sqlite3_free(s->o[i].sql);
  }
  s->n = 0;
}

static char *col_dup(sqlite3_stmt *st, int i) {
  const unsigned char *t = sqlite3_column_text(st, i);
  return t ? sqlite3_mprintf("%s", (const char *)t) : NULL;
}

/* The schema this fatune makes, as a new file gets it. */
static int schema_ours(schema *s, char *err, size_t errlen) {
  sqlite3 *h = NULL;
  sqlite3_stmt *st = NULL;
  int rc = -1;
  s->n = 0;
  if (sqlite3_open_v2(":memory:", &h, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
    dbi_sqlfail(h, err, errlen, "fatune's schema");
  else if (dbi_migrate(h, 0, err, errlen) == 0 && dbi_prepare(h, SCHEMA_SQL, &st, err, errlen) == 0) {
    int step;
    rc = 0;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
      if (s->n == SCHEMA_MAX) {
        rc = dbi_fail(err, errlen, "fatune's schema has over %d objects", SCHEMA_MAX);
        break;
      }
      schema_obj *o = &s->o[s->n];
      *o = (schema_obj){col_dup(st, 0), col_dup(st, 1), col_dup(st, 2), col_dup(st, 3), 0};
      s->n++;
      if (!o->type || !o->name || !o->tbl || (!o->sql && sqlite3_column_type(st, 3) != SQLITE_NULL))
        rc = dbi_fail(err, errlen, "out of memory");
    }
    if (rc == 0 && step != SQLITE_DONE) rc = dbi_sqlfail(h, err, errlen, "fatune's schema");
  }
  dbi_finalize(st);
  (void)sqlite3_close(h);   /* in memory: nothing to lose */
  if (rc != 0) schema_free(s);
  return rc;
}

static int same(const char *a, const unsigned char *b) {
  return a && b ? !strcmp(a, (const char *)b) : !a && !b;
}

/* The object of s that row st describes exactly, not seen before. */
static schema_obj *schema_match(schema *s, sqlite3_stmt *st) {
  for (size_t i = 0; i < s->n; i++) {
    schema_obj *o = &s->o[i];
    if (!o->seen && same(o->type, sqlite3_column_text(st, 0)) &&
        same(o->name, sqlite3_column_text(st, 1)) && same(o->tbl, sqlite3_column_text(st, 2)) &&
        same(o->sql, sqlite3_column_text(st, 3)))
      return o;
  }
  return NULL;
}

static int not_ours(const char *path, const char *type, const char *name, const char *how,
                    char *err, size_t errlen) {
  char t[16], nm[64];
  fa_esc_term_buf(t, sizeof t, type);
  fa_esc_term_buf(nm, sizeof nm, name);
  return dbi_fail(err, errlen, "%s: not fatune's schema (its %s %s %s); nothing merged", path,
                  t, nm, how);
}

int dbi_check_schema(sqlite3 *h, const char *path, char *err, size_t errlen) {
  schema ours;
  sqlite3_stmt *st;
  if (schema_ours(&ours, err, errlen) != 0) return -1;
  if (dbi_prepare(h, SCHEMA_SQL, &st, err, errlen) != 0) {
    schema_free(&ours);
    return -1;
  }
  int rc = 0, step;
  while (rc == 0 && (step = dbi_step(st)) == SQLITE_ROW) {
    schema_obj *o = schema_match(&ours, st);
    if (o) o->seen = 1;
    else rc = not_ours(path, dbi_col_text(st, 0), dbi_col_text(st, 1), "is not as fatune makes it",
                       err, errlen);
  }
  if (rc == 0 && step != SQLITE_DONE) rc = dbi_sqlfail(h, err, errlen, path);
  for (size_t i = 0; rc == 0 && i < ours.n; i++)
    if (!ours.o[i].seen)
      rc = not_ours(path, ours.o[i].type, ours.o[i].name, "is missing", err, errlen);
  dbi_finalize(st);
  schema_free(&ours);
  return rc;
}

/* ---- Variants ---- */

int dbi_check_variant(const db_merge_accept *accept, const db_merge_row *row, char *why,
                      size_t n, char *err, size_t errlen) {
  if (!row->config_kv || !row->config_kv[0]) {
    snprintf(why, n, "its config is not an object of strings and integers");
    return DBI_ROW_REFUSED;
  }
  why[0] = 0;
  const int verdict = accept->fn(accept->ud, row, why, n, err, errlen);
  if (verdict < 0) return -1;
  if (verdict > DBI_ROW_MISMATCH)
    return dbi_fail(err, errlen, "merge: the check of a variant said %d", verdict);
  return verdict;
}

/* ---- Trials ---- */

enum { K_DTYPE, K_DIM, K_SEQ_Q, K_SEQ_K, K_BATCH, K_HEADS, K_CAUSAL, K_REQ_BATCH, K_KV_GROUP,
       K_PAGE, K_STATUS, K_ERRORS,
       K_TIMINGS = K_ERRORS + 3, K_COUNTERS = K_TIMINGS + 6, K_CREATED };

static const char *const error_names[] = {"max_abs_err", "rel_err", "lse_err"};
static const char *const timing_names[] = {"median_us", "min_us", "p20_us", "p80_us", "tflops",
                                           "gbps"};

/* A column's value as the reason shows it. */
static void show_value(sqlite3_stmt *st, int col, char *buf, size_t n) {
  char text[40];
  switch (sqlite3_column_type(st, col)) {
  case SQLITE_INTEGER: snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, col)); break;
  case SQLITE_FLOAT: snprintf(buf, n, "%g", sqlite3_column_double(st, col)); break;
  case SQLITE_NULL: snprintf(buf, n, "NULL"); break;
  default:
    fa_esc_term_buf(text, sizeof text, dbi_col_text(st, col));
    snprintf(buf, n, "'%s'", text);
  }
}

static int refuse(sqlite3_stmt *st, int col, const char *name, char *why, size_t n) {
  char v[64];
  show_value(st, col, v, sizeof v);
  snprintf(why, n, "%s %s", name, v);
  return DBI_ROW_REFUSED;
}

static int int_in(sqlite3_stmt *st, int col, long long lo, long long hi) {
  const long long v = sqlite3_column_int64(st, col);
  return sqlite3_column_type(st, col) == SQLITE_INTEGER && v >= lo && v <= hi;
}

/* NULL (not measured), or a number: positive and finite for a timing,
** not negative (infinite allowed: a result gone wrong) for an error. */
static int real_ok(sqlite3_stmt *st, int col, int timing) {
  const int type = sqlite3_column_type(st, col);
  if (type == SQLITE_NULL) return 1;
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) return 0;
  const double v = sqlite3_column_double(st, col);
  return timing ? v > 0 && isfinite(v) : v >= 0;
}

static int text_in(sqlite3_stmt *st, int col, const char *const *set, size_t n) {
  if (sqlite3_column_type(st, col) != SQLITE_TEXT) return 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(dbi_col_text(st, col), set[i])) return 1;
  return 0;
}

/* The key's integers, from dim on: what ran, then decoding's (version 11):
** the batch asked for (0 where the key ignores it), query heads per K/V
** head (1: none) and tokens per page (0: contiguous). */
static int check_problem(sqlite3_stmt *st, int c, char *why, size_t n) {
  static const char *const dtypes[] = {"fp32", "fp64", "fp16", "bf16", "e4m3"};
  static const char *const names[] = {"dim", "seq_q", "seq_k", "batch", "heads", "causal",
                                      "req_batch", "kv_group", "page"};
  const long long lo[] = {1, 1, 1, 1, 1, 0, 0, 1, 0};
  const long long hi[] = {FA_DIM_MAX, SEQ_MAX, SEQ_MAX, BATCH_MAX, BATCH_MAX, 1, BATCH_MAX,
                          BATCH_MAX, SEQ_MAX};
  if (!text_in(st, c + K_DTYPE, dtypes, 5)) return refuse(st, c + K_DTYPE, "dtype", why, n);
  for (int i = 0; i < 9; i++)
    if (!int_in(st, c + K_DIM + i, lo[i], hi[i]))
      return refuse(st, c + K_DIM + i, names[i], why, n);
  return 0;
}

int dbi_check_trial(sqlite3_stmt *st, int c, char *why, size_t n) {
  static const char *const statuses[] = {"ok", "invalid", "compile_error", "crashed", "timeout"};
  if (check_problem(st, c, why, n)) return DBI_ROW_REFUSED;
  if (!text_in(st, c + K_STATUS, statuses, 5)) return refuse(st, c + K_STATUS, "status", why, n);
  for (int i = 0; i < 3; i++)
    if (!real_ok(st, c + K_ERRORS + i, 0))
      return refuse(st, c + K_ERRORS + i, error_names[i], why, n);
  for (int i = 0; i < 6; i++)
    if (!real_ok(st, c + K_TIMINGS + i, 1))
      return refuse(st, c + K_TIMINGS + i, timing_names[i], why, n);
  if (!sqlite3_column_int(st, c + K_COUNTERS)) {
    snprintf(why, n, "counters not an object of non-negative numbers");
    return DBI_ROW_REFUSED;
  }
  if (!sqlite3_column_int(st, c + K_CREATED)) {
    snprintf(why, n, "created not a timestamp as fatune writes it, or later than tomorrow");
    return DBI_ROW_BAD_CREATED;
  }
  return DBI_ROW_OK;
}
