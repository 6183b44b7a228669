/*
** test_merge.c
** Merge of files someone else made. Only fatune's own schema is read: a
** `trials` that is an endless view, a trigger, an extra column or table is
** refused at once, and another writer can write the destination meanwhile.
** The time merge holds the destination's lock is bounded. Fields longer
** than fatune writes and rows past the cap are refused and counted. A
** variant's name and hash must be those of its config. A trial's created
** must be fatune's own timestamp ('9999' would replace the user's trial
** for good). Decoding's key columns (req_batch, kv_group, page) must be
** integers a tune records. Every refusal leaves the destination as it was.
** Everything happens in a fresh directory under /tmp.
*/
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "check.h"
#include "db.h"
#include "db_int.h"
#include "gen.h"
#include "merge_check.h"

#define PATH_LEN 512

static char dir[] = "/tmp/test_merge.XXXXXX";
static gen_variant *vars;   /* points of the space, for fp32 dim 16 */
static size_t nvars;

static void at(char *path, const char *name) { snprintf(path, PATH_LEN, "%s/%s", dir, name); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Raw SQLite, behind the library's back ---- */

static int raw_exec(const char *path, const char *sql) {
  sqlite3 *h;
  char *msg = NULL;
  int rc = sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(h, 10000);
  if (rc == SQLITE_OK) rc = sqlite3_exec(h, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) fprintf(stderr, "raw_exec %s: %s\n", sql, msg ? msg : sqlite3_errmsg(h));
  sqlite3_free(msg);
  sqlite3_close(h);
  return rc == SQLITE_OK ? 0 : -1;
}

static long long raw_int(const char *path, const char *sql) {
  sqlite3 *h;
  sqlite3_stmt *st = NULL;
  long long v = -999;
  if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(h, 10000) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  else
    fprintf(stderr, "raw_int %s: %s\n", sql, sqlite3_errmsg(h));
  sqlite3_finalize(st);
  sqlite3_close(h);
  return v;
}

/* ---- Fixtures ---- */

static db *open_ok(const char *path) {
  db *d = NULL;
  char err[512];
  int rc = db_open(path, DB_CREATE, &d, err, sizeof err);
  CHECK(rc == 0 && d, "db_open %s: %s", path, err);
  return rc == 0 ? d : NULL;
}

/* vars[i] recorded as the tuner records it, but under the name and hash
** given (NULL: its own). */
static long long add_variant(db *d, size_t i, const char *name, const char *hash) {
  char config[4096], err[256];
  long long id = -1;
  CHECK(gen_config_json(&vars[i].cfg, config, sizeof config) == 0, "config json");
  db_variant v = {vars[i].cfg.family, "simt-test", name ? name : vars[i].name,
                  hash ? hash : vars[i].hash, config, "0123456789abcdef", "fwd", NULL, NULL};
  CHECK(db_variant_id(d, &v, &id, err, sizeof err) == 0, "db_variant_id: %s", err);
  return id;
}

static long long add_emu(db *d, const char *name) {
  db_device dev = {name, "emu", "emu", 0, 0, 0, 0, 0};
  long long id = -1;
  char err[256];
  CHECK(db_device_id(d, &dev, &id, err, sizeof err) == 0, "db_device_id: %s", err);
  return id;
}

static void add_trial(db *d, long long var, long long dev, int seq, long long bytes) {
  char counters[96], err[256];
  snprintf(counters, sizeof counters, "{\"global_bytes_read\": %lld, \"global_bytes_written\": 1}",
           bytes);
  db_trial t = {.variant_id = var, .device_id = dev,
                .problem = {.dtype = "fp32", .dim = 16, .seq_q = seq, .seq_k = seq, .batch = 1,
                            .heads = 1, .arch = "sm_90"},
                .status = "ok", .max_abs_err = 1e-6, .rel_err = 1e-7, .lse_err = 1e-7,
                .median_us = NAN, .min_us = NAN, .p20_us = NAN, .p80_us = NAN, .tflops = NAN,
                .gbps = NAN, .counters = counters, .seeded = 1, .seed = 7};
  CHECK(db_trial_put(d, &t, err, sizeof err) == 0, "db_trial_put: %s", err);
}

/* A file as a tune writes it: the emulator, vars[0] and vars[1], trials of
** vars[0] at seq 16, 32, ... (n of them), then one of vars[1] at seq 16. */
static void make_source(const char *path, int n) {
  unlink(path);
  db *d = open_ok(path);
  if (!d) return;
  long long dev = add_emu(d, "CPU emulator");
  long long v0 = add_variant(d, 0, NULL, NULL), v1 = add_variant(d, 1, NULL, NULL);
  for (int i = 0; i < n; i++) add_trial(d, v0, dev, 16 * (i + 1), 1000);
  add_trial(d, v1, dev, 16, 1000);
  db_close(d);
}

static int merge_with(const char *into, const char *from, const dbi_merge_limits *lim,
                      db_merge_counts *c, char *err, size_t errlen) {
  db *d = open_ok(into);
  if (!d) return -1;
  merge_check check = {0};
  const db_merge_accept accept = merge_check_accept(&check);
  int rc = lim ? dbi_merge(d, from, &accept, lim, c, err, errlen)
               : db_merge(d, from, &accept, c, err, errlen);
  merge_check_close(&check);
  db_close(d);
  return rc;
}

/* ---- Only fatune's schema is read ---- */

/* A `trials` that never ends: merge read it for ever while it held the
** destination's write lock. Run in a child with a deadline; meanwhile
** another writer must get the lock. */
static void test_endless_view(void) {
  char src[PATH_LEN], into[PATH_LEN], errfile[PATH_LEN];
  at(src, "view.db");
  at(into, "view-into.db");
  at(errfile, "view.err");
  make_source(src, 1);
  CHECK(raw_exec(src, "DROP VIEW best; DROP INDEX trials_by_key; DROP TABLE trials; "
                      "CREATE VIEW trials AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL "
                      "SELECT i + 1 FROM r) SELECT 1 AS variant_id, 1 AS device_id, "
                      "'fp32' AS dtype, 16 AS dim, 16 AS seq_q, 16 AS seq_k, "
                      "1 + i % 65535 AS batch, 1 + i / 65535 AS heads, 0 AS causal, "
                      "'ok' AS status, NULL AS message, 0.0 AS max_abs_err, 0.0 AS rel_err, "
                      "0.0 AS lse_err, NULL AS median_us, NULL AS min_us, NULL AS p20_us, "
                      "NULL AS p80_us, NULL AS tflops, NULL AS gbps, NULL AS counters, "
                      "'0.1.0' AS fatune_version, '2024-01-01T00:00:00.000Z' AS created, "
                      "i AS id, 'sm_90' AS arch, 16 AS req_seq_q, 16 AS req_seq_k, "
                      "NULL AS seed, NULL AS compiler FROM r") == 0,
        "planting the view");
  db *d = open_ok(into);
  if (!d) return;
  db_close(d);
  const double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    char err[512] = "";
    db_merge_counts c;
    int rc = merge_with(into, src, NULL, &c, err, sizeof err);
    FILE *f = fopen(errfile, "w");
    if (f) fprintf(f, "%s", err), fclose(f);
    _exit(rc == 0 ? 0 : 2);
  }
  /* Another writer, while the merge runs. */
  struct timespec half = {0, 500000000L};
  nanosleep(&half, NULL);
  sqlite3 *h;
  int wrote = sqlite3_open(into, &h) == SQLITE_OK && sqlite3_busy_timeout(h, 3000) == SQLITE_OK &&
              sqlite3_exec(h, "BEGIN IMMEDIATE; COMMIT", NULL, NULL, NULL) == SQLITE_OK;
  CHECK(wrote, "another writer during the merge: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now_s() - t0 < 10) {
    struct timespec ms = {0, 20000000L};
    nanosleep(&ms, NULL);
  }
  CHECK(done == pid, "a merge of a file whose trials is an endless view did not end within 10 s");
  if (done != pid) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  char err[512] = "";
  FILE *f = fopen(errfile, "r");
  if (f) {
    if (!fgets(err, sizeof err, f)) err[0] = '\0';
    fclose(f);
  }
  CHECK(done == pid && WIFEXITED(status) && WEXITSTATUS(status) == 2 &&
        strstr(err, "not fatune's schema") && strstr(err, "trials"),
        "refused, naming the view: exit %d '%s'", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
        err);
  CHECK(raw_int(into, "SELECT count(*) FROM trials") == 0, "no trial got in");
  printf("endless view: %s (%.2f s)\n", err, now_s() - t0);
}

/* Objects no fatune makes, planted in a file that is otherwise sound. */
static void test_planted(void) {
  static const struct { const char *what, *sql, *names; } cases[] = {
    {"a trigger", "CREATE TRIGGER t AFTER INSERT ON devices BEGIN DELETE FROM trials; END",
     "trigger t"},
    {"an extra table", "CREATE TABLE notes (x)", "table notes"},
    {"a column more in trials",
     "ALTER TABLE trials ADD COLUMN x TEXT GENERATED ALWAYS AS (upper(message)) VIRTUAL",
     "table trials"},
    {"another best view", "DROP VIEW best; CREATE VIEW best AS SELECT * FROM trials",
     "view best"},
    {"an index more", "CREATE INDEX by_created ON trials (created)", "index by_created"},
  };
  char src[PATH_LEN], into[PATH_LEN], err[512];
  at(src, "planted.db");
  at(into, "planted-into.db");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_source(src, 2);
    CHECK(raw_exec(src, cases[i].sql) == 0, "planting %s", cases[i].what);
    unlink(into);
    db_merge_counts c;
    err[0] = '\0';
    int rc = merge_with(into, src, NULL, &c, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "not fatune's schema") && strstr(err, cases[i].names) &&
          !strchr(err, '\n'), "%s: merge took the file (rc %d: %s)", cases[i].what, rc, err);
    CHECK(raw_int(into, "SELECT count(*) FROM trials") == 0, "%s: nothing got in", cases[i].what);
    printf("planted %-26s %s\n", cases[i].what, err);
  }
  /* The file untouched merges, each trial's compiler with it. */
  make_source(src, 2);
  CHECK(raw_exec(src, "UPDATE trials SET compiler = 'NVRTC 13.0' WHERE seq_q = 32") == 0,
        "a compiler");
  unlink(into);
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0 && c.trials_added == 3,
        "a sound file merges: %s", err);
  CHECK(raw_int(into, "SELECT count(*) FROM trials WHERE compiler = 'NVRTC 13.0' AND "
                      "seq_q = 32") == 1 &&
        raw_int(into, "SELECT count(*) FROM trials WHERE compiler IS NULL") == 2,
        "the trials' compilers merged as they were");
}

/* The destination's lock is held for lock_s at most: then the merge stops
** and nothing of it stays. */
static void test_lock_time(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "slow.db");
  at(into, "slow-into.db");
  make_source(src, 200);
  dbi_merge_limits lim = {1000, 1000, 1000000, 0};
  db_merge_counts c;
  int rc = merge_with(into, src, &lim, &c, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "lock") && !strchr(err, '\n'),
        "a merge allowed no time at all holding the lock succeeded (rc %d: %s)", rc, err);
  CHECK(raw_int(into, "SELECT count(*) FROM trials") == 0 &&
        raw_int(into, "SELECT count(*) FROM variants") == 0, "nothing of it stayed");
  printf("lock time: %s\n", err);
  lim.lock_s = 60;
  CHECK(merge_with(into, src, &lim, &c, err, sizeof err) == 0 && c.trials_added == 201,
        "with time enough it merges: %s", err);
}

/* ---- Caps on fields and rows ---- */

static void test_long_fields(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "long.db");
  at(into, "long-into.db");
  make_source(src, 6);
  /* Each a row a tune could record but for one field's length; a second
  ** device with a name of 100 KB, which one trial names; a compiler that
  ** is a blob, not text. */
  CHECK(raw_exec(src,
          "UPDATE trials SET status = 'crashed', message = printf('%.*c', 100000, 'x') "
          "WHERE seq_q = 16 AND variant_id = 1;"
          "UPDATE trials SET fatune_version = printf('%.*c', 5000, 'v') WHERE seq_q = 32;"
          "UPDATE trials SET counters = json_object('global_bytes_read', 1, 'pad' || "
          "printf('%.*c', 5000, 'p'), 1) WHERE seq_q = 48;"
          "INSERT INTO devices (name, uuid, backend, cc_major, cc_minor, sm_count, "
          "smem_per_block_optin, l2_bytes) VALUES (printf('%.*c', 100000, 'd'), 'GPU-x', "
          "'cuda', 9, 0, 132, 1, 1);"
          "UPDATE trials SET device_id = 2 WHERE seq_q = 64;"
          "UPDATE trials SET compiler = printf('%.*c', 5000, 'c') WHERE seq_q = 80;"
          "UPDATE trials SET compiler = x'00ff' WHERE seq_q = 96;"
          /* A config padded with 5000 spaces: the same object to json_each. */
          "UPDATE variants SET config = config || printf('%.*c', 5000, ' ') WHERE id = 2") == 0,
        "making the long fields");
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0, "merge: %s", err);
  printf("long fields: %zu too long; devices %zu refused; variants %zu refused (%s); trials "
         "+%zu, %zu refused (%s)\n", c.too_long, c.devices_refused, c.variants_refused,
         c.variant_refused, c.trials_added, c.trials_refused, c.trial_refused);
  /* Too long: 4 trials, the device, the variant; refused besides: the
  ** trial on the device, the one of the variant, the blob compiler's. */
  CHECK(c.too_long == 6 && c.devices_refused == 1 && c.variants_refused == 1 &&
        c.trials_refused == 7 && c.trials_added == 0,
        "too long %zu, devices refused %zu, variants refused %zu, trials refused %zu added %zu",
        c.too_long, c.devices_refused, c.variants_refused, c.trials_refused, c.trials_added);
  CHECK(raw_int(into, "SELECT coalesce(max(length(CAST(message AS BLOB))), 0) + "
                      "coalesce(max(length(fatune_version)), 0) + "
                      "coalesce(max(length(compiler)), 0) FROM trials") < 100 &&
        raw_int(into, "SELECT max(length(name)) FROM devices") < 100 &&
        raw_int(into, "SELECT count(*) FROM variants WHERE length(config) > 4096") == 0,
        "no long field got in");
}

static void test_row_cap(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "rows.db");
  at(into, "rows-into.db");
  make_source(src, 5);   /* trials 1-5 of vars[0], 6 of vars[1] */
  dbi_merge_limits lim = {1000, 1, 3, 60};
  db_merge_counts c;
  CHECK(merge_with(into, src, &lim, &c, err, sizeof err) == 0, "merge: %s", err);
  printf("row cap: variants +%zu, trials +%zu, %zu over the cap, %zu refused\n",
         c.variants_added, c.trials_added, c.over_cap, c.trials_refused);
  CHECK(c.variants_added == 1 && c.trials_added == 3 && c.over_cap == 4 &&
        c.variants_refused == 1 && c.trials_refused == 3,
        "variants +%zu refused %zu, trials +%zu refused %zu, over the cap %zu", c.variants_added,
        c.variants_refused, c.trials_added, c.trials_refused, c.over_cap);
  CHECK(raw_int(into, "SELECT count(*) FROM trials") == 3 &&
        raw_int(into, "SELECT max(seq_q) FROM trials") == 48, "the first 3 trials, and no more");
}

/* ---- A variant is its config ---- */

static void test_name_hash(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "forged.db");
  at(into, "forged-into.db");
  unlink(src);
  db *d = open_ok(src);
  if (!d) return;
  long long dev = add_emu(d, "CPU emulator");
  /* vars[0]'s config under vars[1]'s name and hash; vars[2]'s config under
  ** its own hash and another name. */
  long long forged = add_variant(d, 0, vars[1].name, vars[1].hash);
  long long renamed = add_variant(d, 2, "simt-fastest", NULL);
  add_trial(d, forged, dev, 16, 1);
  add_trial(d, renamed, dev, 16, 1);
  db_close(d);
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0, "merge: %s", err);
  printf("name and hash: %zu variants refused, %zu not their config's (first: %s)\n",
         c.variants_refused, c.name_mismatch, c.variant_refused);
  CHECK(c.variants_refused == 2 && c.name_mismatch == 2 && c.trials_refused == 2 &&
        strstr(c.variant_refused, "hash"),
        "variants refused %zu, mismatched %zu, trials refused %zu: %s", c.variants_refused,
        c.name_mismatch, c.trials_refused, c.variant_refused);
  CHECK(raw_int(into, "SELECT count(*) FROM variants") == 0 &&
        raw_int(into, "SELECT count(*) FROM trials") == 0, "no forged variant got in");
  /* The user's own tune of vars[1] then records it with its config. */
  if (!(d = open_ok(into))) return;
  long long mine = add_variant(d, 1, NULL, NULL);
  db_close(d);
  char config[4096], sql[4400];
  CHECK(gen_config_json(&vars[1].cfg, config, sizeof config) == 0, "config json");
  snprintf(sql, sizeof sql, "SELECT count(*) FROM variants WHERE id = %lld AND config = '%s'",
           mine, config);
  CHECK(raw_int(into, sql) == 1, "vars[1]'s row holds vars[1]'s config");
}

/* ---- created is fatune's timestamp ---- */

static void test_created(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "created.db");
  at(into, "created-into.db");
  unlink(into);
  /* Ours: vars[0] at seq 16 .. 96, recorded in 2020. Theirs: the same keys,
  ** each with a created of another form, better (fewer bytes). */
  db *d = open_ok(into);
  if (!d) return;
  long long dev = add_emu(d, "CPU emulator"), v = add_variant(d, 0, NULL, NULL);
  static const char *const when[] = {"9999", "2024-02-30T00:00:00.000Z", "2024-01-01 00:00:00",
                                     "2024-01-01T00:00:00.000Z ", "2024-01-01T00:00:00Z",
                                     "2024-01-01T00:00:00.000Z"};
  const int n = (int)(sizeof when / sizeof when[0]);
  for (int i = 0; i < n; i++) add_trial(d, v, dev, 16 * (i + 1), 1000);
  db_close(d);
  CHECK(raw_exec(into, "UPDATE trials SET created = '2020-01-01T00:00:00.000Z'") == 0, "ours");
  make_source(src, n);
  char sql[256];
  for (int i = 0; i < n; i++) {
    snprintf(sql, sizeof sql, "UPDATE trials SET created = '%s', counters = "
             "'{\"global_bytes_read\": 1}' WHERE variant_id = 1 AND seq_q = %d", when[i],
             16 * (i + 1));
    CHECK(raw_exec(src, sql) == 0, "theirs");
  }
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0, "merge: %s", err);
  printf("created: %zu replaced, %zu refused, %zu bad timestamps (first: %s)\n",
         c.trials_replaced, c.trials_refused, c.bad_created, c.trial_refused);
  CHECK(c.trials_replaced == 1 && c.bad_created == (size_t)n - 1 &&
        c.trials_refused == (size_t)n - 1 && strstr(c.trial_refused, "created"),
        "replaced %zu, bad timestamps %zu, refused %zu: %s", c.trials_replaced, c.bad_created,
        c.trials_refused, c.trial_refused);
  CHECK(raw_int(into, "SELECT count(*) FROM trials WHERE created = '2020-01-01T00:00:00.000Z'") ==
        n - 1, "ours stay but the one recorded later in fatune's own format");
  /* And a later merge of a proper timestamp still replaces ours. */
  snprintf(sql, sizeof sql, "UPDATE trials SET created = '2021-06-01T00:00:00.000Z' WHERE "
           "variant_id = 1 AND seq_q = 16");
  CHECK(raw_exec(src, sql) == 0, "theirs, fixed");
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0 && c.trials_replaced == 1,
        "then replaced: %zu (%s)", c.trials_replaced, err);
}

/* ---- The caller's check ---- */

/* Takes every row but those for sm_80, and fails the merge when fail is set. */
typedef struct recorder {
  int calls, fail;
  char seen[256];   /* "name@arch " per call */
} recorder;

static int record_row(void *ud, const db_merge_row *row, char *why, size_t n, char *err,
                      size_t errlen) {
  recorder *r = ud;
  r->calls++;
  size_t used = strlen(r->seen);
  snprintf(r->seen + used, sizeof r->seen - used, "%s@%s ",
           !strcmp(row->name, vars[0].name) ? "v0" : "v1", row->arch);
  if (r->fail) return snprintf(err, errlen, "planted failure"), -1;
  if (strcmp(row->arch, "sm_80")) return DB_MERGE_TAKE;
  snprintf(why, n, "not for sm_80 here");
  return DB_MERGE_REFUSE;
}

/* The check is asked once per variant (arch "") and once per variant and
** target its trials name; a trial goes with its own target's verdict, and
** an error of the check stops the merge with nothing merged. */
static void test_accept(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "accept.db");
  at(into, "accept-into.db");
  make_source(src, 3);
  CHECK(raw_exec(src, "UPDATE trials SET arch = 'sm_80' WHERE seq_q = 32") == 0, "sm_80 planted");
  recorder r = {0};
  const db_merge_accept accept = {record_row, &r};
  db_merge_counts c;
  unlink(into);
  db *d = open_ok(into);
  if (!d) return;
  CHECK(db_merge(d, src, &accept, &c, err, sizeof err) == 0, "merge: %s", err);
  printf("accept: %d calls: %s; trial refused: %s\n", r.calls, r.seen, c.trial_refused);
  CHECK(r.calls == 5 && strstr(r.seen, "v0@ ") && strstr(r.seen, "v1@ ") &&
        strstr(r.seen, "v0@sm_80 ") && strstr(r.seen, "v0@sm_90 ") && strstr(r.seen, "v1@sm_90 "),
        "asked %d times: %s", r.calls, r.seen);
  CHECK(c.trials_added == 3 && c.trials_refused == 1 && strstr(c.trial_refused, "sm_80") &&
        strstr(c.trial_refused, "not for sm_80 here"), "added %zu, refused %zu: %s",
        c.trials_added, c.trials_refused, c.trial_refused);
  db_close(d);
  recorder failing = {.fail = 1};
  const db_merge_accept stop = {record_row, &failing};
  unlink(into);
  if (!(d = open_ok(into))) return;
  CHECK(db_merge(d, src, &stop, &c, err, sizeof err) != 0 && strstr(err, "planted failure"),
        "a failing check stops the merge: %s", err);
  db_close(d);
  CHECK(raw_int(into, "SELECT count(*) FROM variants") == 0 &&
        raw_int(into, "SELECT count(*) FROM trials") == 0, "nothing merged after the failure");
}

/* ---- the op travels with its variant ---- */

/* A source's variants arrive with their op; one whose op is not its
** family's (vars[1]'s set to bwd by hand) is refused as not its config's. */
static void test_op(void) {
  char src[PATH_LEN], into[PATH_LEN], err[512] = "";
  at(src, "op.db");
  at(into, "op-into.db");
  make_source(src, 1);
  CHECK(raw_exec(src, "UPDATE variants SET op = 'bwd' WHERE id = 2") == 0, "set an op by hand");
  unlink(into);
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0, "merge: %s", err);
  CHECK(c.variants_added == 1 && c.variants_refused == 1 && c.name_mismatch == 1 &&
          strstr(c.variant_refused, "op"),
        "added %zu, refused %zu, mismatched %zu: %s", c.variants_added, c.variants_refused,
        c.name_mismatch, c.variant_refused);
  CHECK(raw_int(into, "SELECT count(*) FROM variants WHERE op = 'fwd'") == 1 &&
          raw_int(into, "SELECT count(*) FROM variants WHERE op <> 'fwd'") == 0,
        "the forward variant arrives as fwd, the other not at all");
}


/* ---- decoding's key ---- */

/* The key's columns of version 11 hold what a tune records: a row with a
** kv_group of 0, a page of -1 or a req_batch that is not an integer
** (written past the schema's checks) is refused with the field named; a
** sound decode key merges, and a row that differs from one merged before
** only in kv_group is another trial, not one recorded before. */
static void test_decode_key(void) {
  static const struct { const char *set, *why; } bad[] = {
    {"kv_group = 0", "kv_group 0"},
    {"page = -1", "page -1"},
    {"req_batch = 2.5", "req_batch 2.5"},
    {"req_batch = -3", "req_batch -3"},
    {"kv_group = 'x'", "kv_group 'x'"},
  };
  char src[PATH_LEN], into[PATH_LEN], err[512] = "", sql[256];
  at(src, "decode.db");
  at(into, "decode-into.db");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    make_source(src, 2);   /* trials 1, 2 of vars[0], 3 of vars[1] */
    snprintf(sql, sizeof sql, "PRAGMA ignore_check_constraints = 1; "
             "UPDATE trials SET %s WHERE id = 1", bad[i].set);
    CHECK(raw_exec(src, sql) == 0, "planting %s", bad[i].set);
    unlink(into);
    db_merge_counts c;
    CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0, "merge: %s", err);
    printf("decode key: %-16s refused %zu (%s)\n", bad[i].set, c.trials_refused, c.trial_refused);
    CHECK(c.trials_added == 2 && c.trials_refused == 1 && strstr(c.trial_refused, "trial 1:") &&
            strstr(c.trial_refused, bad[i].why),
          "%s: added %zu, refused %zu: %s", bad[i].set, c.trials_added, c.trials_refused,
          c.trial_refused);
    CHECK(raw_int(into, "SELECT count(*) FROM trials WHERE kv_group < 1 OR page < 0 OR "
                        "req_batch < 0 OR typeof(req_batch) <> 'integer' OR "
                        "typeof(kv_group) <> 'integer'") == 0, "%s: nothing of it got in",
          bad[i].set);
  }
  /* Sound: trial 1 as a decode key; then a copy of it with another kv_group. */
  make_source(src, 2);
  CHECK(raw_exec(src, "UPDATE trials SET req_batch = 8, kv_group = 4, page = 16 WHERE id = 1") == 0,
        "a decode key");
  unlink(into);
  db_merge_counts c;
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0 && c.trials_added == 3 &&
          c.trials_refused == 0, "a sound decode key merges: +%zu, refused %zu (%s) %s",
        c.trials_added, c.trials_refused, c.trial_refused, err);
  CHECK(raw_int(into, "SELECT count(*) FROM trials WHERE req_batch = 8 AND kv_group = 4 AND "
                      "page = 16") == 1, "its key arrives as it was");
  CHECK(raw_exec(src, "INSERT INTO trials (variant_id, device_id, arch, dtype, dim, req_seq_q, "
                      "req_seq_k, seq_q, seq_k, batch, heads, causal, status, max_abs_err, "
                      "rel_err, lse_err, counters, seed, fatune_version, created, req_batch, "
                      "kv_group, page) SELECT variant_id, device_id, arch, dtype, dim, "
                      "req_seq_q, req_seq_k, seq_q, seq_k, batch, heads, causal, status, "
                      "max_abs_err, rel_err, lse_err, counters, seed, fatune_version, created, "
                      "req_batch, 2, page FROM trials WHERE id = 1") == 0,
        "the same key but kv_group 2");
  CHECK(merge_with(into, src, NULL, &c, err, sizeof err) == 0 && c.trials_added == 1 &&
          c.trials_skipped == 3, "another kv_group is another trial: +%zu, skipped %zu (%s)",
        c.trials_added, c.trials_skipped, err);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char key[PATH_LEN], err[512];
  at(key, "key");
  setenv("FATUNE_KEY", key, 1);
  gen_state *g;
  gen_target t;
  fa_problem p = {.batch = 1, .heads = 1, .seq_q = 64, .seq_k = 64, .dim = 16, .dtype = FA_FP32};
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0 ||
      gen_list(g, &p, &t, "default", &vars, &nvars) != 0 || nvars < 3) {
    CHECK(0, "the space: %s", err);
    return check_done("test_merge");
  }
  test_endless_view();
  test_planted();
  test_lock_time();
  test_long_fields();
  test_row_cap();
  test_name_hash();
  test_created();
  test_accept();
  test_op();
  test_decode_key();
  gen_variants_free(vars, nvars);
  gen_close(g);
  char cmd[PATH_LEN + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_merge");
}
