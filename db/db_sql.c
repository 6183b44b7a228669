/*
** db_sql.c
** The helpers every db_*.c file shares (db_int.h): messages, checked
** statements, binds and columns, transactions that wait for the write
** lock instead of failing, and the paths of the user's files. They call
** only SQLite and the C library, so the files above them form no circle.
*/
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db_int.h"

#define RETRY_LIMIT_S 120       /* our retries of a busy lock, with backoff, up to this long */

/* ---- Messages ---- */

int dbi_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || errlen == 0) return -1;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

int dbi_sqlfail(sqlite3 *h, char *err, size_t errlen, const char *what) {
  return dbi_fail(err, errlen, "%s: %s", what, h ? sqlite3_errmsg(h) : "out of memory");
}

/* ---- Statements ---- */

int dbi_prepare(sqlite3 *h, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
  if (sqlite3_prepare_v2(h, sql, -1, st, NULL) != SQLITE_OK) {
    *st = NULL;
    return dbi_sqlfail(h, err, errlen, "database");
  }
  return 0;
}

double dbi_mono_s(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps 2^attempt ms (capped at 256) plus up to as much again at random,
** so that two waiting writers do not wake in step. */
static void backoff(int attempt) {
  static _Thread_local unsigned seed;
  if (!seed) seed = (unsigned)getpid() * 2654435761u | 1u;
  seed = seed * 1103515245u + 12345u;
  long ms = 1L << (attempt < 8 ? attempt : 8);
  ms += (long)((seed >> 16) % (unsigned)ms);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) continue;
}

/* SQLite waits its busy timeout (db.c sets it) in its busy handler, but some conflicts
** (a WAL being recovered or reset, a journal-mode change) return BUSY
** without calling it; those are retried here. Retrying a statement that
** returned BUSY is allowed outside a transaction and for BEGIN and COMMIT,
** the only places a writer that began with BEGIN IMMEDIATE can see it. */
int dbi_step(sqlite3_stmt *st) {
  double t0 = 0;
  for (int attempt = 0;; attempt++) {
    int rc = sqlite3_step(st);
    if ((rc & 0xff) != SQLITE_BUSY) return rc;
    if (attempt == 0) t0 = dbi_mono_s();
    else if (dbi_mono_s() - t0 > RETRY_LIMIT_S) return rc;
    backoff(attempt);
  }
}

/* Its result repeats the last step's, which the caller has checked. */
void dbi_finalize(sqlite3_stmt *st) { (void)sqlite3_finalize(st); }

int dbi_exec(sqlite3 *h, const char *sql, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(h, sql, &st, err, errlen) != 0) return -1;
  int rc;
  while ((rc = dbi_step(st)) == SQLITE_ROW) continue;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(h, err, errlen, "database");
}

int dbi_begin(sqlite3 *h, char *err, size_t errlen) {
  return dbi_exec(h, "BEGIN IMMEDIATE", err, errlen);
}

int dbi_commit(sqlite3 *h, char *err, size_t errlen) {
  if (dbi_exec(h, "COMMIT", err, errlen) == 0) return 0;
  dbi_rollback(h);
  return -1;
}

/* After a failed statement SQLite may have rolled back already; then there
** is nothing to do, and no error worth reporting over the first one. */
void dbi_rollback(sqlite3 *h) {
  if (!sqlite3_get_autocommit(h)) {
    char ignored[8];
    (void)dbi_exec(h, "ROLLBACK", ignored, sizeof ignored);
  }
}

/* ---- Binds and columns ---- */

dbi_binder dbi_bind_start(sqlite3_stmt *st) {
  dbi_binder b = {st, 1, SQLITE_OK};
  return b;
}

void dbi_bind_text(dbi_binder *b, const char *s) {
  if (b->rc != SQLITE_OK) return;
  b->rc = s ? sqlite3_bind_text(b->st, b->i, s, -1, SQLITE_TRANSIENT)
            : sqlite3_bind_null(b->st, b->i);
  b->i++;
}

void dbi_bind_int(dbi_binder *b, long long v) {
  if (b->rc != SQLITE_OK) return;
  b->rc = sqlite3_bind_int64(b->st, b->i++, v);
}

void dbi_bind_real(dbi_binder *b, double v) {
  if (b->rc != SQLITE_OK) return;
  b->rc = isnan(v) ? sqlite3_bind_null(b->st, b->i) : sqlite3_bind_double(b->st, b->i, v);
  b->i++;
}

void dbi_bind_blob(dbi_binder *b, const void *p, size_t n) {
  if (b->rc != SQLITE_OK) return;
  b->rc = sqlite3_bind_blob64(b->st, b->i++, p, n, SQLITE_TRANSIENT);
}

const char *dbi_col_text(sqlite3_stmt *st, int i) {
  const unsigned char *s = sqlite3_column_text(st, i);
  return s ? (const char *)s : "";
}

double dbi_col_real(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

int dbi_col_copy(sqlite3_stmt *st, int i, char *buf, size_t n) {
  const char *s = dbi_col_text(st, i);
  size_t len = strlen(s);
  if (len >= n) return -1;
  memcpy(buf, s, len + 1);
  return 0;
}

/* ---- Paths ---- */

int dbi_user_path(char *buf, size_t n, const char *override, const char *xdg,
                  const char *home_dir, const char *leaf, const char *hint, char *err,
                  size_t errlen) {
  const char *env = getenv(override), *home;
  int w;
  if (env && *env) w = snprintf(buf, n, "%s", env);
  /* The XDG spec says a relative $XDG_..._HOME is to be ignored. */
  else if ((env = getenv(xdg)) && env[0] == '/')
    w = snprintf(buf, n, "%s/fatune/%s", env, leaf);
  else if ((home = getenv("HOME")) && *home)
    w = snprintf(buf, n, "%s/%s/fatune/%s", home, home_dir, leaf);
  else
    return dbi_fail(err, errlen, "no place for fatune's %s: set $%s%s", leaf, override, hint);
  if (w < 0 || (size_t)w >= n)
    return dbi_fail(err, errlen, "the path of fatune's %s is too long", leaf);
  return 0;
}

/* mkdir -p of the directories above path, mode 0700: a cache of kernels
** and timings is the user's own. */
int dbi_make_parents(const char *path, char *err, size_t errlen) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      return dbi_fail(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    *p = '/';
  }
  return 0;
}
