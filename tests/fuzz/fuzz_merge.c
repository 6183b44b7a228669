/*
** fuzz_merge.c
** A hostile database file for `fatune merge`: fatune's schema (db_open makes
** it), then the input run on the file as SQL, as anybody who hands a file
** over could have: views in place of tables, triggers, columns more, huge
** fields, rows no tune records, a schema rewritten through
** writable_schema. The file is merged into a fresh database the way the
** fatune binary does it. No crash, no sanitizer report, no hang, and the
** destination holds no more than the source: merge copies rows of tables,
** capped, so it never grows beyond what the file holds.
**
** The input's statements run one after another, a failed one skipped,
** within a budget of SQLite steps and with values of 1 MB at most. What
** would write outside the file (ATTACH, VACUUM INTO, the directory
** pragmas) is refused.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "cli.h"
#include "cmd_db.h"
#include "db.h"
#include "fuzz_util.h"

#define MAX_STATEMENTS 64
#define STEP_BUDGET 400      /* progress calls of 1000 steps each, for the whole input */
#define VALUE_MAX (1 << 20)

static char src_file[480], dst_file[480];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_path(src_file, sizeof src_file, "theirs.db");
  fz_path(dst_file, sizeof dst_file, "ours.db");
  /* merge prints what it took; only crashes and the invariant matter. */
  if (!freopen("/dev/null", "w", stdout)) abort();
  return 0;
}

static void remove_db(const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
  char p[520];
  for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
    unlink(p);
  }
}

/* The bytes of path and its WAL. */
static long long db_bytes(const char *path) {
  char wal[520];
  struct stat sb;
  long long n = 0;
  snprintf(wal, sizeof wal, "%s-wal", path);
  if (stat(path, &sb) == 0) n += sb.st_size;
  if (stat(wal, &sb) == 0) n += sb.st_size;
  return n;
}

/* ---- The hostile file ---- */

static int budget(void *ud) {
  int *left = ud;
  return --*left < 0;
}

static int deny_outside(void *ud, int action, const char *a, const char *b, const char *c,
                        const char *d) {
  (void)ud, (void)b, (void)c, (void)d;
  if (action == SQLITE_ATTACH || action == SQLITE_DETACH) return SQLITE_DENY;
  if (action == SQLITE_PRAGMA && a &&
      (!strcasecmp(a, "temp_store_directory") || !strcasecmp(a, "data_store_directory")))
    return SQLITE_DENY;
  return SQLITE_OK;
}

/* Runs each statement of sql on the file; one that fails is passed over. */
static void run_script(sqlite3 *h, const char *sql) {
  int left = STEP_BUDGET;
  sqlite3_progress_handler(h, 1000, budget, &left);
  for (int n = 0; *sql && n < MAX_STATEMENTS && left > 0; n++) {
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    if (sqlite3_prepare_v2(h, sql, -1, &st, &tail) != SQLITE_OK) {
      sqlite3_finalize(st);
      /* Past the broken statement: to its end, if there is one. */
      const char *semi = strchr(sql, ';');
      if (!semi) break;
      sql = semi + 1;
      continue;
    }
    while (st && sqlite3_step(st) == SQLITE_ROW) continue;
    sqlite3_finalize(st);
    if (!tail || tail == sql) break;
    sql = tail;
  }
  sqlite3_progress_handler(h, 0, NULL, NULL);
}

static void make_source(const char *sql) {
  char err[512];
  db *d;
  if (db_open(src_file, DB_CREATE, &d, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_merge: %s\n", err);
    abort();
  }
  db_close(d);
  sqlite3 *h;
  if (sqlite3_open(src_file, &h) != SQLITE_OK) abort();
  sqlite3_limit(h, SQLITE_LIMIT_LENGTH, VALUE_MAX);
  if (sqlite3_set_authorizer(h, deny_outside, NULL) != SQLITE_OK) abort();
  run_script(h, sql);
  sqlite3_close(h);
}

/* Whether s holds word, in any case. */
static int holds(const char *s, const char *word) {
  const size_t n = strlen(word);
  for (; *s; s++)
    if (!strncasecmp(s, word, n)) return 1;
  return 0;
}

/* ---- The merge ---- */

static void merge(void) {
  char *argv[] = {"fatune", "merge", src_file, "--db", dst_file, NULL};
  cli_opts o;
  char err[512];
  if (cli_parse(5, argv, &o, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_merge: %s\n", err);
    abort();
  }
  (void)cmd_db_main(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *sql = fz_cstr(data, size);
  /* VACUUM INTO writes a file anywhere; no flag turns it off. */
  if (holds(sql, "vacuum")) {
    free(sql);
    return 0;
  }
  remove_db(src_file);
  remove_db(dst_file);
  make_source(sql);
  const long long theirs = db_bytes(src_file);
  merge();
  /* Twice the file and a fresh schema's pages: no row of theirs is copied
  ** more than once, and our indexes are as theirs. */
  const long long ours = db_bytes(dst_file);
  if (ours > 2 * theirs + (1 << 20)) {
    fprintf(stderr, "fuzz_merge: a file of %lld bytes grew ours to %lld\n", theirs, ours);
    abort();
  }
  free(sql);
  return 0;
}
