/*
** db.c
** Opening the results database, safely: a file that exists and is not
** empty is first examined through a read-only connection (which never
** writes, not even a WAL checkpoint), and only a fatune file of this
** schema version or older is then opened for writing. The helpers every
** db_*.c file shares are in db_sql.c, below them all.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db_int.h"

#define BUSY_TIMEOUT_MS 10000   /* SQLite's own wait for a lock, per attempt */

/* ---- Paths ---- */

int db_default_path(char *buf, size_t n, char *err, size_t errlen) {
  return dbi_user_path(buf, n, "FATUNE_DB", "XDG_CACHE_HOME", ".cache", "fatune.db",
                       " or use --db PATH", err, errlen);
}

/* ---- The read-only examination ---- */

static int pragma_int(sqlite3 *h, const char *sql, long long *v) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  rc = dbi_step(st);
  if (rc == SQLITE_ROW) *v = sqlite3_column_int64(st, 0), rc = SQLITE_OK;
  else if (rc == SQLITE_DONE) rc = SQLITE_ERROR;
  dbi_finalize(st);
  return rc;
}

static int unreadable(sqlite3 *h, const char *path, int rc, char *err, size_t errlen) {
  if ((rc & 0xff) == SQLITE_NOTADB)
    return dbi_fail(err, errlen, "%s is not a fatune database (not an SQLite file)", path);
  if ((rc & 0xff) == SQLITE_CORRUPT)
    return dbi_fail(err, errlen, "%s is corrupt (%s); it was left as it is", path,
                    sqlite3_errmsg(h));
  return dbi_fail(err, errlen, "cannot read %s: %s", path, sqlite3_errmsg(h));
}

/* A file's verdict: whose it is and which schema it has. */
static int judge(const char *path, long long app_id, long long version, long long objects,
                 char *err, size_t errlen) {
  if (app_id != DB_APPLICATION_ID) {
    if (app_id == 0 && version == 0 && objects == 0)
      return dbi_fail(err, errlen, "%s is not a fatune database (an empty SQLite file of "
                      "another application)", path);
    return dbi_fail(err, errlen, "%s is not a fatune database (an SQLite file of another "
                    "application, id 0x%llx)", path, (unsigned long long)app_id);
  }
  if (version > DB_SCHEMA_VERSION)
    return dbi_fail(err, errlen, "%s was written by a newer fatune (schema %lld, this one "
                    "knows %d)", path, version, DB_SCHEMA_VERSION);
  if (version < 0) return dbi_fail(err, errlen, "%s has a bad schema version %lld", path, version);
  return 0;
}

/* The header fields, and whether the schema itself can be read (a damaged
** first page shows there). */
static int read_header(sqlite3 *h, long long *app_id, long long *version, long long *objects) {
  int rc = pragma_int(h, "PRAGMA application_id", app_id);
  if (rc == SQLITE_OK) rc = pragma_int(h, "PRAGMA user_version", version);
  if (rc == SQLITE_OK) rc = pragma_int(h, "SELECT count(*) FROM sqlite_schema", objects);
  return rc;
}

/* path as an SQLite URI ("file:" and the path, percent-encoded) asking
** for an immutable file: one that SQLite reads without any lock or -shm.
** -1 when it does not fit. */
static int immutable_uri(const char *path, char *uri, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t used = (size_t)snprintf(uri, n, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    const int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || strchr("/._-", *p);
    if (used + 4 >= n) return -1;
    if (plain) uri[used++] = (char)*p;
    else uri[used++] = '%', uri[used++] = hex[*p >> 4], uri[used++] = hex[*p & 15];
  }
  uri[used] = '\0';
  return snprintf(uri + used, n - used, "?immutable=1") < (int)(n - used) ? 0 : -1;
}

static int connect_ro(const char *name, int uri, sqlite3 **h) {
  int rc = sqlite3_open_v2(name, h, SQLITE_OPEN_READONLY | (uri ? SQLITE_OPEN_URI : 0), NULL);
  if (rc == SQLITE_OK) rc = sqlite3_extended_result_codes(*h, 1);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(*h, BUSY_TIMEOUT_MS);
  return rc;
}

static int unwritable(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && (!(sb.st_mode & 0222) || access(path, W_OK) != 0);
}

int db_read_only(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) slash[1] = '\0';
  else *slash = '\0';
  return access(path, F_OK) == 0 && (unwritable(path) || unwritable(dir));
}

/* Whether path has a -wal file beside it: a WAL-mode file in use, or one
** whose last writer did not close it. */
static int has_wal(const char *path) {
  char wal[4200];
  struct stat sb;
  snprintf(wal, sizeof wal, "%s-wal", path);
  return stat(wal, &sb) == 0 || errno != ENOENT;
}

/* A read-only connection to path, its header read. A WAL-mode file whose
** -shm cannot be made (its directory read-only to us) cannot be read that
** way; with no -wal file beside it no writer has it open and its whole
** content is in the file, so it is read as immutable. So is a file that
** db_read_only says no one is to write, without trying first: a reader of
** a WAL-mode file would leave a -wal and a -shm beside it. On failure *h is
** still open, for its message. */
static int open_ro(const char *path, sqlite3 **h, long long *app_id, long long *version,
                   long long *objects) {
  char uri[4096 * 3 + 32];
  const int whole = !has_wal(path) && immutable_uri(path, uri, sizeof uri) == 0;
  int rc = whole && db_read_only(path) ? SQLITE_READONLY : connect_ro(path, 0, h);
  if (rc == SQLITE_OK) rc = read_header(*h, app_id, version, objects);
  const int code = rc & 0xff;
  if ((code == SQLITE_READONLY || code == SQLITE_CANTOPEN) && whole) {
    (void)sqlite3_close(*h);
    *h = NULL;
    rc = connect_ro(uri, 1, h);
    if (rc == SQLITE_OK) rc = read_header(*h, app_id, version, objects);
  }
  return rc;
}

/* version: the file's schema version, or -1 for a new database (missing
** or empty file). Nothing here writes to path. With keep (a DB_READONLY
** open) the read-only connection is handed over in *keep instead of
** closed. */
static int examine(const char *path, int flags, int *version, sqlite3 **keep, char *err,
                   size_t errlen) {
  struct stat sb;
  *version = -1;
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT && (flags & DB_CREATE)) return 0;
    if (errno == ENOENT)
      return dbi_fail(err, errlen, "no database at %s (nothing has been tuned there yet)", path);
    return dbi_fail(err, errlen, "%s: %s", path, strerror(errno));
  }
  if (!S_ISREG(sb.st_mode)) return dbi_fail(err, errlen, "%s is not a regular file", path);
  if (sb.st_size == 0) return 0;

  sqlite3 *h = NULL;
  long long app_id = 0, v = 0, objects = 0;
  int rc = open_ro(path, &h, &app_id, &v, &objects);
  int status = rc != SQLITE_OK ? unreadable(h, path, rc, err, errlen)
                               : judge(path, app_id, v, objects, err, errlen);
  *version = (int)v;
  if (keep && status == 0) {
    *keep = h;
    return 0;
  }
  if (sqlite3_close(h) != SQLITE_OK && status == 0)
    status = dbi_fail(err, errlen, "cannot close %s after reading it", path);
  return status;
}

/* ---- Opening for writing ---- */

/* Inside one write transaction, so that two processes creating the same
** file do it once: look again (the file may have changed since examine),
** then mark a new file as fatune's and migrate. */
static int setup_schema(db *d, char *err, size_t errlen) {
  if (dbi_begin(d->h, err, errlen) != 0) return -1;
  long long app_id = 0, version = 0, objects = 0;
  int rc = read_header(d->h, &app_id, &version, &objects);
  if (rc != SQLITE_OK) {
    unreadable(d->h, d->path, rc, err, errlen);
    dbi_rollback(d->h);
    return -1;
  }
  int fresh = app_id == 0 && version == 0 && objects == 0;
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  if ((!fresh && judge(d->path, app_id, version, objects, err, errlen) != 0) ||
      (fresh && dbi_exec(d->h, sql, err, errlen) != 0) ||
      dbi_migrate(d->h, (int)version, err, errlen) != 0) {
    dbi_rollback(d->h);
    return -1;
  }
  return dbi_commit(d->h, err, errlen);
}

/* WAL lets readers run while a tuner writes; NORMAL sync in WAL mode never
** corrupts and loses nothing to a killed process (a power cut may lose
** the last commits). Set after the schema, so that an interrupted first
** open leaves an empty file rather than one that is not fatune's. */
static int use_wal(db *d, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(d->h, "PRAGMA journal_mode = WAL", &st, err, errlen) != 0) return -1;
  int rc = dbi_step(st), wal = rc == SQLITE_ROW && !strcmp(dbi_col_text(st, 0), "wal");
  dbi_finalize(st);
  if (rc != SQLITE_ROW) return dbi_sqlfail(d->h, err, errlen, "setting WAL mode");
  if (!wal) return dbi_fail(err, errlen, "%s cannot be put in WAL mode", d->path);
  return dbi_exec(d->h, "PRAGMA synchronous = NORMAL", err, errlen);
}

static int open_rw(db *d, int flags, int version, char *err, size_t errlen) {
  int oflags = SQLITE_OPEN_READWRITE | (flags & DB_CREATE ? SQLITE_OPEN_CREATE : 0);
  if (sqlite3_open_v2(d->path, &d->h, oflags, NULL) != SQLITE_OK)
    return dbi_fail(err, errlen, "cannot open %s: %s", d->path,
                    d->h ? sqlite3_errmsg(d->h) : "out of memory");
  if (sqlite3_extended_result_codes(d->h, 1) != SQLITE_OK ||
      sqlite3_busy_timeout(d->h, BUSY_TIMEOUT_MS) != SQLITE_OK)
    return dbi_sqlfail(d->h, err, errlen, d->path);
  if (dbi_exec(d->h, "PRAGMA foreign_keys = ON", err, errlen) != 0) return -1;
  /* A file already at this version needs no write lock to open. */
  if (version != DB_SCHEMA_VERSION && setup_schema(d, err, errlen) != 0) return -1;
  return use_wal(d, err, errlen);
}

/* An empty file read: an empty database in memory, the file untouched. */
static int open_empty(db *d, char *err, size_t errlen) {
  if (sqlite3_open_v2(":memory:", &d->h, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
    return dbi_sqlfail(d->h, err, errlen, "opening an empty database");
  return dbi_migrate(d->h, 0, err, errlen);
}

/* A read-only open keeps examine's connection: nothing is set, migrated
** or switched to WAL, so the file is not written. Only a file of this
** very schema can be read; an empty one reads as an empty database. */
static int open_readonly(db *d, char *err, size_t errlen) {
  int version;
  if (examine(d->path, 0, &version, &d->h, err, errlen) != 0) return -1;
  if (version < 0) return open_empty(d, err, errlen);
  if (version < DB_SCHEMA_VERSION)
    return dbi_fail(err, errlen, "%s has schema %d, older than this fatune's %d: run a command "
                    "that writes to it (fatune, or fatune merge into it) once to bring it up "
                    "to date", d->path, version, DB_SCHEMA_VERSION);
  return 0;
}

static int open_writable(db *d, int flags, char *err, size_t errlen) {
  int version;
  if (examine(d->path, flags, &version, NULL, err, errlen) != 0) return -1;
  if (version < 0 && (flags & DB_CREATE) && dbi_make_parents(d->path, err, errlen) != 0)
    return -1;
  return open_rw(d, flags, version, err, errlen);
}

int db_open(const char *path, int flags, db **out, char *err, size_t errlen) {
  char def[4096];
  *out = NULL;
  if (!path) {
    if (db_default_path(def, sizeof def, err, errlen) != 0) return -1;
    path = def;
  }
  db *d = calloc(1, sizeof *d);
  if (!d) return dbi_fail(err, errlen, "out of memory");
  int n = snprintf(d->path, sizeof d->path, "%s", path);
  if (n <= 0 || (size_t)n >= sizeof d->path) {
    free(d);
    return dbi_fail(err, errlen, "database path too long or empty");
  }
  if (flags & DB_CREATE && flags & DB_READONLY) {
    free(d);
    return dbi_fail(err, errlen, "db_open: DB_CREATE and DB_READONLY together");
  }
  if ((flags & DB_READONLY ? open_readonly(d, err, errlen)
                           : open_writable(d, flags, err, errlen)) != 0) {
    if (d->h) (void)sqlite3_close(d->h);   /* the first error is the one to report */
    free(d);
    return -1;
  }
  *out = d;
  return 0;
}

int db_close(db *d) {
  if (!d) return 0;
  int rc = sqlite3_close(d->h);
  dbi_key_forget(d);
  free(d);
  return rc == SQLITE_OK ? 0 : -1;
}

const char *db_path(const db *d) { return d->path; }
