/*
** test_db.c
** The results database. A fresh file: schema, user_version, application_id,
** WAL; round trips and idempotent upserts of devices, variants, binaries
** and trials; best, exact and nearest-seq; show and export parsed back.
** Refusals that leave the file's bytes as they were: a newer schema,
** garbage, another application's SQLite file (even one with a live WAL), a
** damaged first page. A writer killed with SIGKILL mid-run: the file checks
** ok, holds what the writer confirmed, and a resumed run completes it with
** no trial twice. Two processes writing at once lose nothing. merge with
** overlapping and distinct trials, and no binary. A tampered binary is
** reported untrusted. Migrations from versions 2, 4, 5 and 10 keep every
** row; decode trials that differ only in the batch asked for, the GQA
** ratio or the page size are distinct keys, each with its own best.
** Everything happens in a fresh directory under /tmp.
*/
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "check.h"
#include "db.h"
#include "db_int.h"
#include "fa_util.h"
#include "gen.h"
#include "merge_check.h"

#define PATH_LEN 512
#define KILL_TRIALS 2000
#define WRITER_TRIALS 500

static char dir[] = "/tmp/test_db.XXXXXX";

static void at(char *path, const char *name) { snprintf(path, PATH_LEN, "%s/%s", dir, name); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) continue;
}

/* ---- Files ---- */

/* FNV-1a 64 of the whole file; 0 when it cannot be read. */
static unsigned long long file_sum(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char buf[8192];
  unsigned long long h = 0xcbf29ce484222325ull;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
  fclose(f);
  return h;
}

static int write_file(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(b, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static int copy_file(const char *from, const char *to) {
  static unsigned char buf[1 << 20];
  FILE *f = fopen(from, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  return n < sizeof buf ? write_file(to, buf, n) : -1;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[PATH_LEN];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      remove_tree(sub);
    }
    closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
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

/* The first column of the first row as text, into out; -1 on failure. */
static int raw_text(const char *path, const char *sql, char *out, size_t n) {
  sqlite3 *h;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), status = -1;
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(h, 10000);
  if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
  if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "NULL");
    status = 0;
  } else {
    fprintf(stderr, "raw_text %s: %s\n", sql, sqlite3_errmsg(h));
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return status;
}

static long long raw_int(const char *path, const char *sql) {
  char buf[64];
  return raw_text(path, sql, buf, sizeof buf) == 0 ? atoll(buf) : -999;
}

/* ---- Fixtures ---- */

static long long add_device(db *d, const char *name, const char *uuid, const char *backend) {
  db_device dev = {name, uuid, backend, 9, 0, 132, 232448, 50331648};
  if (!strcmp(backend, "emu")) dev.cc_major = dev.sm_count = 0;
  long long id = -1;
  char err[256];
  int rc = db_device_id(d, &dev, &id, err, sizeof err);
  CHECK(rc == 0, "db_device_id %s: %s", name, err);
  return id;
}

static long long add_variant(db *d, const char *name) {
  char hash[32], config[160], source[32];
  unsigned long long h = fa_fnv1a64(FA_FNV64_OFFSET, name, strlen(name));
  snprintf(hash, sizeof hash, "%012llx", h >> 16);
  snprintf(source, sizeof source, "%016llx", h ^ 1);
  /* A point of the space under a name of the test's own, which merge
  ** refuses (test_merge records points as a tune does: add_point). */
  snprintf(config, sizeof config, "{\"family\": \"simt\", \"dtype\": \"fp32\", \"dim\": 64, "
           "\"block_m\": 64, \"norm\": \"eager\"}");
  db_variant v = {"simt", "simt-1+abc", name, hash, config, source, "fwd", NULL, NULL};
  long long id = -1;
  char err[256];
  int rc = db_variant_id(d, &v, &id, err, sizeof err);
  CHECK(rc == 0, "db_variant_id %s: %s", name, err);
  return id;
}

/* The points of the space for fp32 dim 64, listed on first use. */
static gen_state *gen;
static gen_variant *points;
static size_t npoints;

static const char *point_name(size_t k) {
  if (!gen) {
    char err[256];
    gen_target t;
    fa_problem p = {.batch = 1, .heads = 1, .seq_q = 64, .seq_k = 64, .dim = 64, .dtype = FA_FP32};
    if (gen_open(&gen, err, sizeof err) != 0 || gen_target_for_arch(gen, "sm_90", 0, 0, &t) != 0 ||
        gen_list(gen, &p, &t, "default", &points, &npoints) != 0) {
      fprintf(stderr, "the space: %s\n", gen ? gen_errmsg(gen) : err);
      exit(1);
    }
  }
  if (k >= npoints) {
    fprintf(stderr, "the space has %zu points, not %zu\n", npoints, k + 1);
    exit(1);
  }
  return points[k].name;
}

/* Point k recorded as a tune records it: its own name, hash and config. */
static long long add_point(db *d, size_t k) {
  char config[4096], err[256];
  point_name(k);
  CHECK(gen_config_json(&points[k].cfg, config, sizeof config) == 0, "config json");
  db_variant v = {points[k].cfg.family, "simt-1+abc", points[k].name, points[k].hash, config,
                  "0123456789abcdef", "fwd", NULL, NULL};
  long long id = -1;
  CHECK(db_variant_id(d, &v, &id, err, sizeof err) == 0, "db_variant_id: %s", err);
  return id;
}

static db_trial make_trial(long long var, long long dev, int seq, double median_us,
                           const char *counters) {
  db_trial t = {.variant_id = var, .device_id = dev,
                .problem = {.dtype = "fp32", .dim = 64, .seq_q = seq, .seq_k = seq, .batch = 4,
                            .heads = 16, .arch = "sm_90"},
                .status = "ok", .max_abs_err = 1e-6, .rel_err = 1e-7, .lse_err = 1e-7,
                .median_us = median_us, .min_us = median_us * 0.9, .p20_us = median_us * 0.95,
                .p80_us = median_us * 1.1, .tflops = 100.0, .gbps = 1000.0,
                .counters = counters, .seeded = 1, .seed = 42, .compiler = "NVRTC 13.0"};
  return t;
}

static int put(db *d, const db_trial *t) {
  char err[256];
  int rc = db_trial_put(d, t, err, sizeof err);
  CHECK(rc == 0, "db_trial_put: %s", err);
  return rc;
}

static db *open_ok(const char *path) {
  db *d = NULL;
  char err[512];
  int rc = db_open(path, DB_CREATE, &d, err, sizeof err);
  CHECK(rc == 0 && d, "db_open %s: %s", path, err);
  return rc == 0 ? d : NULL;
}

/* ---- A fresh file and round trips ---- */

static void test_fresh(void) {
  char path[PATH_LEN], text[256], err[512];
  at(path, "new/sub/fresh.db");
  db *d = NULL;
  CHECK(db_open(path, 0, &d, err, sizeof err) != 0 && strstr(err, "no database at"),
        "a missing file without DB_CREATE: %s", err);
  CHECK(!exists(path), "nothing created without DB_CREATE");
  if (!(d = open_ok(path))) return;
  struct stat sb;
  char sub[PATH_LEN];
  at(sub, "new/sub");
  CHECK(stat(sub, &sb) == 0 && (sb.st_mode & 0777) == 0700, "directory mode %o",
        (unsigned)(sb.st_mode & 0777));
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "user_version");
  CHECK(raw_int(path, "PRAGMA application_id") == DB_APPLICATION_ID, "application_id");
  CHECK(raw_text(path, "PRAGMA journal_mode", text, sizeof text) == 0 && !strcmp(text, "wal"),
        "journal mode %s", text);
  CHECK(raw_text(path, "SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema "
                       "WHERE type IN ('table', 'view') ORDER BY name)", text, sizeof text) == 0 &&
        !strcmp(text, "baselines best binaries devices sass trials variants"), "schema objects: %s", text);
  printf("fresh: user_version %lld, application_id 0x%llx, journal %s, objects: %s\n",
         raw_int(path, "PRAGMA user_version"), raw_int(path, "PRAGMA application_id"), "wal", text);

  /* Devices: the same id again; a new name refreshes the row. */
  long long dev = add_device(d, "NVIDIA H200", "GPU-1234", "cuda");
  CHECK(add_device(d, "NVIDIA H200", "GPU-1234", "cuda") == dev, "device upsert idempotent");
  CHECK(add_device(d, "NVIDIA H200 NVL", "GPU-1234", "cuda") == dev, "renamed device, same id");
  CHECK(raw_text(path, "SELECT name FROM devices", text, sizeof text) == 0 &&
        !strcmp(text, "NVIDIA H200 NVL"), "device name refreshed: %s", text);
  long long emu = add_device(d, "CPU emulator", "emu", "emu");
  CHECK(emu != dev && raw_int(path, "SELECT count(*) FROM devices") == 2, "two devices");
  db_device bad = {"x", NULL, "opencl", 0, 0, 0, 0, 0};
  long long id;
  CHECK(db_device_id(d, &bad, &id, err, sizeof err) != 0 && strstr(err, "opencl"),
        "an unknown backend is refused: %s", err);

  /* Variants: idempotent, config stored as JSON. */
  long long var = add_variant(d, "simt-a");
  CHECK(add_variant(d, "simt-a") == var, "variant upsert idempotent");
  CHECK(raw_int(path, "SELECT json_extract(config, '$.block_m') FROM variants") == 64 &&
        raw_text(path, "SELECT json_extract(config, '$.norm') FROM variants", text,
                 sizeof text) == 0 && !strcmp(text, "eager"), "config as JSON");

  /* Binaries: round trip, replace, missing key. */
  unsigned char blob[3000];
  for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)(i * 7 + 3);
  db_binary_key key = {"0123456789abcdef", "sm_90", "NVRTC 12.4", "-arch=sm_90 -O3"};
  db_binary bin = {blob, sizeof blob, 96, 8, 49152, 250.5, 0}, got;
  int found = 0;
  CHECK(db_binary_put(d, &key, &bin, err, sizeof err) == 0, "db_binary_put: %s", err);
  CHECK(db_binary_get(d, &key, &got, &found, err, sizeof err) == 0 && found &&
        got.size == sizeof blob && !memcmp(got.data, blob, sizeof blob) && got.registers == 96 &&
        got.spill_bytes == 8 && got.smem_bytes == 49152 && got.compile_ms == 250.5,
        "binary round trip (found %d, %zu bytes)", found, got.size);
  db_binary_free(&got);
  blob[0] ^= 0xff;
  bin.registers = 80;
  CHECK(db_binary_put(d, &key, &bin, err, sizeof err) == 0, "db_binary_put again: %s", err);
  CHECK(db_binary_get(d, &key, &got, &found, err, sizeof err) == 0 && found &&
        got.data[0] == blob[0] && got.registers == 80 &&
        raw_int(path, "SELECT count(*) FROM binaries") == 1, "a second put replaces");
  db_binary_free(&got);
  db_binary_key other = key;
  other.target = "sm_80";
  CHECK(db_binary_get(d, &other, &got, &found, err, sizeof err) == 0 && !found && !got.untrusted,
        "another target is not found");

  /* Trials: done, replace, stamp, refusals. */
  db_trial t = make_trial(var, dev, 1024, 50.0, "{\"global_bytes_read\": 10}");
  int done = 1;
  CHECK(db_trial_done(d, var, dev, &t.problem, &done, err, sizeof err) == 0 && !done,
        "not done before");
  put(d, &t);
  CHECK(db_trial_done(d, var, dev, &t.problem, &done, err, sizeof err) == 0 && done,
        "done after");
  db_problem p2 = t.problem;
  p2.causal = 1;
  CHECK(db_trial_done(d, var, dev, &p2, &done, err, sizeof err) == 0 && !done,
        "the causal key is another trial");
  CHECK(raw_int(path, "SELECT count(*) FROM trials WHERE compiler = 'NVRTC 13.0'") == 1,
        "the trial's compiler recorded");
  t.median_us = 40.0;
  put(d, &t);
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == 1 &&
        raw_int(path, "SELECT median_us FROM trials") == 40, "a second put replaces the trial");
  CHECK(raw_text(path, "SELECT fatune_version FROM trials", text, sizeof text) == 0 &&
        !strcmp(text, DB_FATUNE_VERSION), "fatune version stored: %s", text);
  t.status = "great";
  CHECK(db_trial_put(d, &t, err, sizeof err) != 0 && strstr(err, "great"),
        "unknown status refused: %s", err);
  t.status = "ok";
  t.variant_id = 999;
  CHECK(db_trial_put(d, &t, err, sizeof err) != 0 && strstr(err, "FOREIGN KEY"),
        "an unknown variant refused: %s", err);
  t.variant_id = var;
  t.counters = "{not json";
  CHECK(db_trial_put(d, &t, err, sizeof err) != 0, "counters that are not JSON refused");
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == 1, "refused writes left nothing");
  CHECK(db_close(d) == 0, "db_close");

  /* Reopening a current file changes nothing and takes no write lock: it
  ** opens while another connection holds one. */
  sqlite3 *h;
  CHECK(sqlite3_open(path, &h) == SQLITE_OK &&
        sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK, "raw writer");
  double t0 = now_s();
  d = open_ok(path);
  double open_s = now_s() - t0;
  CHECK(open_s < 1.0, "open under another writer's lock took %.2f s", open_s);
  sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(h);
  if (d) db_close(d);
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "still current");
  printf("fresh: reopened in %.1f ms while another connection held the write lock\n",
         open_s * 1e3);
}

/* A file of schema 2 (no arch, no requested seq, no seed in a trial's key)
** with a trial in it: migrated, its trial keeps its figures, shows and is
** found by best, its arch empty and its request what ran. */
static void test_migrate_from_two(void) {
  char path[PATH_LEN], err[512] = "", sql[96];
  at(path, "two.db");
  sqlite3 *h;
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  CHECK(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == 0 &&
        dbi_migrate_to(h, 0, 2, err, sizeof err) == 0, "a schema-2 file: %s", err);
  CHECK(sqlite3_exec(h,
        "INSERT INTO devices VALUES (1, 'NVIDIA H100', 'GPU-1', 'cuda', 9, 0, 132, 232448, 52428800);"
        "INSERT INTO variants VALUES (1, 'simt', 'simt/1+x', 'v1', 'aaaaaaaaaaaa', '{}', 'h');"
        "INSERT INTO trials (variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, causal,"
        " status, median_us, tflops, fatune_version, created) VALUES (1, 1, 'fp32', 64, 1024, 1024,"
        " 4, 16, 0, 'ok', 80.0, 12.5, '0.1.0', '2026-01-01T00:00:00.000Z');",
        NULL, NULL, NULL) == SQLITE_OK, "rows of schema 2: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(path, "PRAGMA user_version") == 2, "at version 2");
  db *d = open_ok(path);
  if (!d) return;
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "migrated");
  CHECK(raw_int(path, "SELECT count(*) FROM trials WHERE arch = '' AND req_seq_q = 1024 AND "
                      "req_seq_k = 1024 AND seed IS NULL AND median_us = 80.0") == 1,
        "the old trial, as it was, with an empty arch and its request what ran");
  db_problem p = {.dtype = "fp32", .dim = 64, .seq_q = 1024, .seq_k = 1024};
  db_best_row r;
  int found = 0, exact = 0;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
        r.median_us == 80.0 && r.arch[0] == '\0' && r.req_seq_q == 1024,
        "best finds the old trial: found %d exact %d %s", found, exact, err);
  p.arch = "sm_90";
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && !found,
        "an old trial is not taken for a given arch");
  db_close(d);
}

/* A file of schema 4 with a trial and SASS figures: migrated to 5, its
** rows as they were and an empty baselines table; then baselines: one
** recorded, one of the same key replacing it, bad ones refused with why,
** and a row edited in by hand that no measurement could give passed over
** when read. */
static int count_baseline(const db_baseline_row *b, void *ud) {
  double *got = ud;
  got[0]++;
  got[1] = b->tflops;
  return 0;
}

static void test_migrate_from_four(void) {
  char path[PATH_LEN], err[512] = "", sql[96];
  at(path, "four.db");
  sqlite3 *h;
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  CHECK(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == 0 &&
        dbi_migrate_to(h, 0, 4, err, sizeof err) == 0, "a schema-4 file: %s", err);
  CHECK(sqlite3_exec(h,
        "INSERT INTO devices VALUES (1, 'NVIDIA H100', 'GPU-1', 'cuda', 9, 0, 132, 232448, 52428800);"
        "INSERT INTO variants VALUES (1, 'tc', 'tc/1+x', 'v1', 'aaaaaaaaaaaa', '{}', 'h');"
        "INSERT INTO trials (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q,"
        " seq_k, batch, heads, causal, status, median_us, tflops, fatune_version, created) VALUES"
        " (1, 1, 'sm_90', 'bf16', 64, 1024, 1024, 1024, 1024, 4, 16, 0, 'ok', 80.0, 12.5, '0.1.0',"
        " '2026-01-01T00:00:00.000Z');"
        "INSERT INTO sass (variant_id, target, gpu, mma, loop_instructions, loop_hmma, loop_mufu,"
        " loop_ldsm, loop_lds, loop_ldgsts, loop_bar, loop_shfl, loop_local, loop_int, created)"
        " VALUES (1, 'sm_90', 'h100', 'HMMA', 100, 16, 8, 4, 0, 2, 2, 4, 0, 20, 'x');",
        NULL, NULL, NULL) == SQLITE_OK, "rows of schema 4: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(path, "PRAGMA user_version") == 4, "at version 4");
  db *d = open_ok(path);
  if (!d) return;
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "migrated to %d",
        DB_SCHEMA_VERSION);
  CHECK(raw_int(path, "SELECT count(*) FROM trials WHERE arch = 'sm_90' AND median_us = 80.0") ==
          1 && raw_int(path, "SELECT count(*) FROM sass WHERE loop_hmma = 16") == 1 &&
          raw_int(path, "SELECT count(*) FROM baselines") == 0,
        "the trial and the SASS figures as they were, no baselines");
  db_baseline b = {"NVIDIA H100", "sdpa-flash", "bf16", 64, 1024, 1024, 4, 16, 0, 100.0, 10.7,
                   "2.5.1"};
  CHECK(db_baseline_put(d, &b, 1, NULL, err, sizeof err) == 0, "a baseline: %s", err);
  b.median_us = 90.0, b.tflops = 11.9;
  CHECK(db_baseline_put(d, &b, 1, NULL, err, sizeof err) == 0, "the same key again: %s", err);
  double got[2] = {0, 0};
  CHECK(db_baselines(d, count_baseline, got, err, sizeof err) == 0 && got[0] == 1 &&
          got[1] == 11.9, "one baseline, the later: %.0f rows, %.1f TFLOP/s", got[0], got[1]);
  const struct { db_baseline b; const char *why; } bad[] = {
    {{"NVIDIA H100", "sdpa flash", "bf16", 64, 1024, 1024, 4, 16, 0, 90, 11.9, "2.5"}, "backend"},
    {{"NVIDIA\nH100", "sdpa", "bf16", 64, 1024, 1024, 4, 16, 0, 90, 11.9, "2.5"}, "GPU's name"},
    {{"NVIDIA H100", "sdpa", "int8", 64, 1024, 1024, 4, 16, 0, 90, 11.9, "2.5"}, "dtype"},
    {{"NVIDIA H100", "sdpa", "bf16", 0, 1024, 1024, 4, 16, 0, 90, 11.9, "2.5"}, "dim"},
    {{"NVIDIA H100", "sdpa", "bf16", 64, 1024, 1024, 4, 16, 0, -1, 11.9, "2.5"}, "median"},
    {{"NVIDIA H100", "sdpa", "bf16", 64, 1024, 1024, 4, 16, 0, 90, NAN, "2.5"}, "TFLOP/s"},
    {{"NVIDIA H100", "sdpa", "bf16", 64, 1024, 1024, 4, 16, 2, 90, 11.9, "2.5"}, "causal"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    CHECK(db_baseline_put(d, &bad[i].b, 1, NULL, err, sizeof err) != 0 && strstr(err, bad[i].why),
          "a bad baseline refused for its %s: %s", bad[i].why, err);
  }
  db_close(d);
  CHECK(raw_exec(path, "INSERT INTO baselines (gpu, backend, dtype, dim, seq_q, seq_k, batch, "
                       "heads, causal, median_us, tflops, torch_version, created) VALUES "
                       "('NVIDIA H100', 'x''; DROP TABLE trials; --', 'bf16', 64, 4096, 4096, "
                       "4, 16, 0, 1.0, 5e9, '2.5', 'x')") == 0,
        "a row no measurement gives, by hand");
  if (!(d = open_ok(path))) return;
  got[0] = 0;
  CHECK(db_baselines(d, count_baseline, got, err, sizeof err) == 0 && got[0] == 1,
        "the hand-made row passed over: %.0f rows", got[0]);
  db_close(d);
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == 1, "the trials still there");
}

/* A file marked as fatune's at schema 0 (no tables) is migrated. */
static void test_migrate_from_zero(void) {
  char path[PATH_LEN], sql[96];
  at(path, "zero.db");
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  CHECK(raw_exec(path, sql) == 0, "make a schema-0 file");
  db *d = open_ok(path);
  if (d) db_close(d);
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION &&
        raw_int(path, "SELECT count(*) FROM sqlite_schema WHERE name = 'trials'") == 1,
        "schema 0 migrated to %d", DB_SCHEMA_VERSION);
}

/* ---- best ---- */

static void test_best(void) {
  char path[PATH_LEN], err[512];
  at(path, "best.db");
  db *d = open_ok(path);
  if (!d) return;
  long long gpu = add_device(d, "NVIDIA H200", "GPU-1", "cuda");
  long long emu = add_device(d, "CPU emulator", "emu", "emu");
  long long v1 = add_variant(d, "v1"), v2 = add_variant(d, "v2"), v3 = add_variant(d, "v3");
  db_trial t = make_trial(v1, gpu, 1024, 100.0, NULL);
  put(d, &t);
  t = make_trial(v2, gpu, 1024, 80.0, NULL);
  put(d, &t);
  t = make_trial(v3, gpu, 1024, 10.0, NULL);   /* fastest, but wrong */
  t.status = "invalid";
  put(d, &t);
  t = make_trial(v1, gpu, 4096, 500.0, NULL);
  put(d, &t);
  t = make_trial(v3, gpu, 4096, 450.0, NULL);
  put(d, &t);
  /* The emulator: no times, ranked by global bytes. */
  t = make_trial(v1, emu, 256, NAN, "{\"global_bytes_read\": 2000, \"global_bytes_written\": 500}");
  put(d, &t);
  t = make_trial(v2, emu, 256, NAN, "{\"global_bytes_read\": 1000, \"global_bytes_written\": 500}");
  put(d, &t);

  db_best_row r;
  int found, exact;
  db_problem p = {.dtype = "fp32", .dim = 64, .seq_q = 1024, .seq_k = 1024};
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
        !strcmp(r.variant, "v2") && r.median_us == 80.0 && !strcmp(r.device, "NVIDIA H200"),
        "exact best at 1024: %s %.1f us (found %d exact %d) %s", r.variant, r.median_us, found,
        exact, err);
  printf("best: seq 1024 -> %s (%.1f us on %s)\n", r.variant, r.median_us, r.device);
  p.seq_q = p.seq_k = 5000;
  CHECK(db_best(d, "h200", &p, &r, &found, &exact, err, sizeof err) == 0 && found && !exact &&
        r.seq_q == 4096 && !strcmp(r.variant, "v3"),
        "nearest to 5000 is 4096 with v3: seq %d %s exact %d", r.seq_q, r.variant, exact);
  printf("best: seq 5000 -> nearest tuned seq %d: %s (%.1f us)\n", r.seq_q, r.variant, r.median_us);
  p.seq_q = p.seq_k = 2000;   /* nearer 1024 than 4096 */
  CHECK(db_best(d, "GPU-1", &p, &r, &found, &exact, err, sizeof err) == 0 && found &&
        r.seq_q == 1024 && !strcmp(r.variant, "v2"), "nearest to 2000: seq %d", r.seq_q);
  p.seq_q = p.seq_k = 256;
  CHECK(db_best(d, "emu", &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
        !strcmp(r.variant, "v2") && isnan(r.median_us) && r.global_bytes == 1500,
        "emulator best by global bytes: %s %lld", r.variant, r.global_bytes);
  printf("best: emulator seq 256 -> %s (%lld global bytes)\n", r.variant, r.global_bytes);
  /* Any device: the timed GPU trial at 1024 is nearer than the emulator's 256. */
  p.seq_q = p.seq_k = 700;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found &&
        r.seq_q == 1024, "any device, nearest to 700: seq %d on %s", r.seq_q, r.device);
  CHECK(db_best(d, "A100", &p, &r, &found, &exact, err, sizeof err) == 0 && !found,
        "an unknown device finds nothing");
  p.causal = 1;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && !found,
        "causal was never tuned");
  p.causal = 0;
  p.dim = 128;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && !found,
        "dim 128 was never tuned");
  CHECK(raw_int(path, "SELECT count(*) FROM best") == 3, "the view has one row per key");
  db_close(d);
}

/* ---- show and export, parsed back ---- */

/* Runs fn into a temporary file and returns its text (malloc'd). */
static char *capture(db *d, int (*fn)(db *, FILE *, size_t *), size_t *rows) {
  FILE *f = tmpfile();
  if (!f) return NULL;
  char *text = NULL;
  if (fn(d, f, rows) == 0) {
    long n = ftell(f);
    text = malloc((size_t)n + 1);
    rewind(f);
    if (text && fread(text, 1, (size_t)n, f) == (size_t)n) {
      text[n] = '\0';
    } else {
      free(text);
      text = NULL;
    }
  }
  fclose(f);
  return text;
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static size_t count_str(const char *s, const char *needle) {
  size_t n = 0;
  for (; (s = strstr(s, needle)); s++) n++;
  return n;
}

static char err_io[512];
static int export_csv(db *d, FILE *f, size_t *rows) {
  return db_export(d, "csv", f, rows, err_io, sizeof err_io);
}
static int export_json(db *d, FILE *f, size_t *rows) {
  return db_export(d, "json", f, rows, err_io, sizeof err_io);
}
static int show_all(db *d, FILE *f, size_t *rows) {
  db_filter all = {NULL, NULL, 0, 0, 0, 0, 0, -1, NULL, 0, 0, 0};
  return db_show(d, &all, 0, f, rows, err_io, sizeof err_io);
}
static int show_emu_json(db *d, FILE *f, size_t *rows) {
  db_filter emu = {"emu", "fp32", 64, 0, 0, 0, 0, -1, "fwd", 0, 0, 0};
  return db_show(d, &emu, 1, f, rows, err_io, sizeof err_io);
}

static void test_show_export(void) {
  char path[PATH_LEN];
  at(path, "best.db");   /* test_best's 7 trials */
  db *d = open_ok(path);
  if (!d) return;
  size_t rows = 0;
  char *csv = capture(d, export_csv, &rows);
  CHECK(csv && rows == 7 && count_lines(csv) == 8 && !strncmp(csv, "variant,hash,", 13),
        "CSV: %zu rows, %zu lines: %s", rows, csv ? count_lines(csv) : 0, err_io);
  /* The config JSON has commas and quotes: quoted, quotes doubled. */
  CHECK(csv && strstr(csv, "\"{\"\"family\"\": \"\"simt\"\""), "CSV quotes the config");
  printf("export csv: %zu rows, %zu lines, header: %.60s...\n", rows, csv ? count_lines(csv) : 0,
         csv ? csv : "");
  free(csv);
  char *json = capture(d, export_json, &rows);
  CHECK(json && json[0] == '[' && rows == 7 && count_str(json, "{\"variant\":") == 7 &&
        strstr(json, "\"config\":{\"family\":\"simt\"") && strstr(json, "\"median_us\":null"),
        "JSON: %zu rows: %.200s", rows, json ? json : err_io);
  printf("export json: %zu objects, %zu bytes\n", json ? count_str(json, "{\"variant\":") : 0,
         json ? strlen(json) : 0);
  free(json);
  char *table = capture(d, show_all, &rows);
  CHECK(table && rows == 7 && count_lines(table) == 8 && !strncmp(table, "variant", 7) &&
        count_str(table, "invalid") == 1, "show: %zu rows", rows);
  free(table);
  char *emu = capture(d, show_emu_json, &rows);
  CHECK(emu && rows == 2 && count_str(emu, "\"backend\":\"emu\"") == 2, "show emu --json: %zu",
        rows);
  free(emu);
  CHECK(db_export(d, "xml", stdout, &rows, err_io, sizeof err_io) != 0 && strstr(err_io, "xml"),
        "unknown format refused");
  db_close(d);

  at(path, "empty.db");
  if (!(d = open_ok(path))) return;
  csv = capture(d, export_csv, &rows);
  json = capture(d, export_json, &rows);
  CHECK(csv && count_lines(csv) == 1 && json && !strcmp(json, "[]\n"),
        "an empty database exports a header and []");
  free(csv);
  free(json);
  db_close(d);
}

/* Text a spreadsheet would run as a formula (= + - @, a tab or CR first)
** is exported with a quote before it; numbers, negative ones too, as
** they are. */
static void test_export_formulas(void) {
  char path[PATH_LEN];
  at(path, "formulas.db");
  db *d = open_ok(path);
  if (!d) return;
  long long dev = add_device(d, "@SUM(1+1)*cmd|' /C calc'!A0", "GPU-f", "cuda");
  long long var = add_variant(d, "+simt");
  db_trial t = make_trial(var, dev, 64, 5.0, NULL);
  t.status = "invalid";
  t.message = "=HYPERLINK(\"http://x\",\"y\")";
  t.seed = ~0ULL;   /* stored as the integer -1 */
  put(d, &t);
  t = make_trial(var, dev, 128, 5.0, NULL);
  t.status = "crashed";
  t.message = "-2+3";
  put(d, &t);
  t = make_trial(var, dev, 256, 5.0, NULL);
  t.status = "crashed";
  t.message = "\tcmd";
  put(d, &t);
  size_t rows = 0;
  char *csv = capture(d, export_csv, &rows);
  CHECK(csv && rows == 3, "export: %s", err_io);
  if (csv) {
    CHECK(strstr(csv, ",'@SUM(1+1)*cmd|' /C calc'!A0,") && strstr(csv, "\n'+simt,") &&
          strstr(csv, ",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",") &&
          strstr(csv, ",'-2+3,") && strstr(csv, ",'\tcmd,"),
          "formulas exported as they are: %s", csv);
    /* ... deterministic, req_batch, kv_group, page, dim_v */
    CHECK(strstr(csv, ",-1,fwd,NVRTC 13.0,,,,,0,1,0,0\n") && !strstr(csv, "'-1") &&
            strstr(csv, ",5,"),
          "numbers as numbers: %s", csv);
    printf("export formulas: %s", strchr(csv, '\n') + 1);
  }
  free(csv);
  db_close(d);
}

/* ---- Refusals that leave the file alone ---- */

/* db_open of path must fail naming want, and leave the bytes as they were. */
static void refused(const char *path, const char *want, const char *what) {
  unsigned long long before = file_sum(path);
  db *d = NULL;
  char err[512] = "";
  int rc = db_open(path, DB_CREATE, &d, err, sizeof err);
  CHECK(rc != 0 && !d && strstr(err, want), "%s: want '%s', got rc %d '%s'", what, want, rc, err);
  CHECK(file_sum(path) == before && before != 0, "%s: the file changed", what);
  printf("refused %-28s %s\n", what, err);
  if (d) db_close(d);

  char into[PATH_LEN];
  at(into, "merge-target.db");
  if (!(d = open_ok(into))) return;
  db_merge_counts c;
  merge_check check = {0};
  const db_merge_accept accept = merge_check_accept(&check);
  CHECK(db_merge(d, path, &accept, &c, err, sizeof err) != 0 && strstr(err, want),
        "merge of %s: %s", what, err);
  merge_check_close(&check);
  CHECK(file_sum(path) == before, "%s: merge changed the file", what);
  db_close(d);
}

static void test_refusals(void) {
  char fresh[PATH_LEN], path[PATH_LEN];
  at(fresh, "refuse-fresh.db");
  db *d = open_ok(fresh);
  if (!d) return;
  add_device(d, "dev", "u", "cuda");
  db_close(d);

  at(path, "newer.db");
  CHECK(copy_file(fresh, path) == 0, "copy");
  char want[128];
  snprintf(want, sizeof want, "PRAGMA user_version = %d", DB_SCHEMA_VERSION + 1);
  CHECK(raw_exec(path, want) == 0, "set user_version %d", DB_SCHEMA_VERSION + 1);
  snprintf(want, sizeof want, "was written by a newer fatune (schema %d, this one knows %d)",
           DB_SCHEMA_VERSION + 1, DB_SCHEMA_VERSION);
  refused(path, want, "a newer schema");

  unsigned char junk[8192];
  unsigned long long s = 42;
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)((s = s * 6364136223846793005ull + 1) >> 56);
  at(path, "garbage.db");
  CHECK(write_file(path, junk, sizeof junk) == 0, "write garbage");
  refused(path, "not a fatune database", "random bytes");

  memcpy(junk, "SQLite format 3", 16);
  at(path, "garbage-magic.db");
  CHECK(write_file(path, junk, sizeof junk) == 0, "write garbage");
  refused(path, path, "SQLite magic, then garbage");

  at(path, "foreign.db");
  CHECK(raw_exec(path, "CREATE TABLE notes (x); INSERT INTO notes VALUES ('mine')") == 0, "foreign");
  refused(path, "not a fatune database", "another application's file");

  /* Another application's WAL file, in use: its WAL holds a commit not yet
  ** in the main file, and neither may change. */
  at(path, "foreign-wal.db");
  sqlite3 *h;
  CHECK(sqlite3_open(path, &h) == SQLITE_OK &&
        sqlite3_exec(h, "PRAGMA journal_mode = WAL; PRAGMA application_id = 42; "
                        "CREATE TABLE t (x); INSERT INTO t VALUES (1)", NULL, NULL, NULL) == SQLITE_OK,
        "foreign WAL file");
  char wal[PATH_LEN + 8];
  snprintf(wal, sizeof wal, "%s-wal", path);
  unsigned long long wal_sum = file_sum(wal);
  CHECK(exists(wal) && wal_sum != 0, "the foreign WAL exists");
  refused(path, "id 0x2a", "a live foreign WAL file");
  CHECK(file_sum(wal) == wal_sum, "the foreign WAL changed");
  sqlite3_close(h);

  /* A fatune file whose first page (the schema's b-tree) is damaged. */
  at(path, "damaged.db");
  CHECK(copy_file(fresh, path) == 0, "copy");
  FILE *f = fopen(path, "r+b");
  CHECK(f && fseek(f, 100, SEEK_SET) == 0 && fwrite(junk + 200, 1, 40, f) == 40, "damage");
  if (f) fclose(f);
  refused(path, "damaged.db", "a damaged first page");

  /* Not created over: a directory in the way, and an empty SQLite file. */
  at(path, "empty-foreign.db");
  CHECK(raw_exec(path, "PRAGMA user_version = 3") == 0, "empty foreign");
  refused(path, "not a fatune database", "an empty SQLite file, not ours");
  db *dd = NULL;
  char err[512];
  CHECK(db_open(dir, DB_CREATE, &dd, err, sizeof err) != 0 && strstr(err, "not a regular file"),
        "a directory is refused: %s", err);
}

/* ---- A writer killed mid-run, and resumed ---- */

static db_trial seq_trial(long long var, long long dev, int seq) {
  return make_trial(var, dev, seq, 10.0 + seq, "{\"global_bytes_read\": 1}");
}

/* A child process: opens path, then records trials first+1 .. first+count,
** one transaction each, writing a byte to fd after each commit. */
_Noreturn static void writer(const char *path, int fd, int first, int count, long pause_us) {
  db *d;
  char err[512];
  if (db_open(path, DB_CREATE, &d, err, sizeof err) != 0) {
    fprintf(stderr, "writer %d: %s\n", (int)getpid(), err);
    _exit(3);
  }
  db_device dev = {"NVIDIA H200", "GPU-1", "cuda", 9, 0, 132, 232448, 50331648};
  db_variant var = {"simt", "simt-1+abc", "simt-kill", "0123456789ab", "{\"block_m\": 64}", "feed",
                    "fwd", NULL, NULL};
  long long dev_id, var_id;
  if (db_device_id(d, &dev, &dev_id, err, sizeof err) != 0 ||
      db_variant_id(d, &var, &var_id, err, sizeof err) != 0) {
    fprintf(stderr, "writer %d: %s\n", (int)getpid(), err);
    _exit(4);
  }
  for (int i = 0; i < count; i++) {
    db_trial t = seq_trial(var_id, dev_id, first + i + 1);
    if (db_trial_put(d, &t, err, sizeof err) != 0) {
      fprintf(stderr, "writer %d: trial %d: %s\n", (int)getpid(), i, err);
      _exit(5);
    }
    if (fd >= 0 && write(fd, "x", 1) != 1) _exit(6);
    if (pause_us) sleep_us(pause_us);
  }
  _exit(db_close(d) == 0 ? 0 : 7);
}

static void test_sigkill(void) {
  char path[PATH_LEN], text[64], err[512];
  at(path, "killed.db");
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(p[0]);
    writer(path, p[1], 0, KILL_TRIALS, 200);
  }
  close(p[1]);
  /* Some commits first, so the kill lands mid-run, then ~100 ms more. */
  size_t confirmed = 0;
  char buf[256];
  ssize_t n;
  while (confirmed < 20 && (n = read(p[0], buf, 1)) > 0) confirmed += (size_t)n;
  sleep_us(100000);
  kill(pid, SIGKILL);
  int status;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer was killed mid-run "
        "(status 0x%x)", status);
  while ((n = read(p[0], buf, sizeof buf)) > 0) confirmed += (size_t)n;
  close(p[0]);

  CHECK(raw_text(path, "PRAGMA integrity_check", text, sizeof text) == 0 && !strcmp(text, "ok"),
        "integrity_check after SIGKILL: %s", text);
  long long have = raw_int(path, "SELECT count(*) FROM trials");
  CHECK(have == (long long)confirmed || have == (long long)confirmed + 1,
        "trials %lld, confirmed %zu", have, confirmed);
  printf("sigkill: writer killed after %zu confirmed commits; the file has %lld trials, "
         "integrity_check %s\n", confirmed, have, text);

  /* Resume: skip what is there, record the rest. */
  db *d = open_ok(path);
  if (!d) return;
  db_device dev = {"NVIDIA H200", "GPU-1", "cuda", 9, 0, 132, 232448, 50331648};
  db_variant var = {"simt", "simt-1+abc", "simt-kill", "0123456789ab", "{\"block_m\": 64}", "feed",
                    "fwd", NULL, NULL};
  long long dev_id, var_id;
  CHECK(db_device_id(d, &dev, &dev_id, err, sizeof err) == 0 &&
        db_variant_id(d, &var, &var_id, err, sizeof err) == 0, "resume ids: %s", err);
  long long inserted = 0, skipped = 0;
  for (int i = 0; i < KILL_TRIALS; i++) {
    db_trial t = seq_trial(var_id, dev_id, i + 1);
    int done = 0;
    CHECK(db_trial_done(d, var_id, dev_id, &t.problem, &done, err, sizeof err) == 0, "%s", err);
    if (done) skipped++;
    else if (put(d, &t) == 0) inserted++;
  }
  db_close(d);
  CHECK(skipped == have && inserted == KILL_TRIALS - have, "resume skipped %lld, inserted %lld",
        skipped, inserted);
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == KILL_TRIALS &&
        raw_int(path, "SELECT count(DISTINCT seq_q) FROM trials") == KILL_TRIALS &&
        raw_int(path, "SELECT min(seq_q) FROM trials") == 1 &&
        raw_int(path, "SELECT max(seq_q) FROM trials") == KILL_TRIALS,
        "after resume: exactly %d distinct trials", KILL_TRIALS);
  CHECK(raw_text(path, "PRAGMA integrity_check", text, sizeof text) == 0 && !strcmp(text, "ok"),
        "integrity_check after resume: %s", text);
  printf("sigkill: resume skipped %lld, inserted %lld, total %lld distinct\n", skipped, inserted,
         raw_int(path, "SELECT count(DISTINCT seq_q) FROM trials"));
}

/* ---- Two writers at once, on a file neither has created yet ---- */

static void test_concurrent(void) {
  char path[PATH_LEN];
  at(path, "concurrent.db");
  int go[2];
  CHECK(pipe(go) == 0, "pipe");
  pid_t pid[2];
  double t0 = now_s();
  for (int k = 0; k < 2; k++) {
    pid[k] = fork();
    CHECK(pid[k] >= 0, "fork");
    if (pid[k] == 0) {
      char c;
      close(go[1]);
      if (read(go[0], &c, 1) != 0) _exit(2);   /* wait for the start: EOF */
      writer(path, -1, k * 10000, WRITER_TRIALS, 0);
    }
  }
  close(go[0]);
  close(go[1]);   /* both start now */
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    int status;
    CHECK(waitpid(pid[k], &status, 0) == pid[k] && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0, "writer %d: status 0x%x", k, status);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  double wall = now_s() - t0;
  long long n = raw_int(path, "SELECT count(*) FROM trials");
  CHECK(n == 2 * WRITER_TRIALS, "trials %lld, want %d", n, 2 * WRITER_TRIALS);
  CHECK(raw_int(path, "SELECT count(*) FROM devices") == 1 &&
        raw_int(path, "SELECT count(*) FROM variants") == 1, "one device, one variant");
  printf("concurrent: 2 writers, %lld trials in %.2f s, both exited %s\n", n, wall,
         ok ? "0" : "non-zero");
}

/* ---- merge ---- */

static void set_created(const char *path, const char *variant, int seq, const char *when) {
  char sql[256];
  snprintf(sql, sizeof sql, "UPDATE trials SET created = '%s' WHERE seq_q = %d AND variant_id = "
           "(SELECT id FROM variants WHERE name = '%s')", when, seq, variant);
  CHECK(raw_exec(path, sql) == 0, "set created");
}

static void add_binary(db *d, const char *source, unsigned char fill) {
  unsigned char blob[64];
  memset(blob, fill, sizeof blob);
  db_binary_key key = {source, "sm_90", "NVRTC 12.4", ""};
  db_binary bin = {blob, sizeof blob, 32, 0, 0, 1.0, 0};
  char err[256];
  CHECK(db_binary_put(d, &key, &bin, err, sizeof err) == 0, "db_binary_put: %s", err);
}

static void test_merge(void) {
  char a[PATH_LEN], b[PATH_LEN], err[512];
  at(a, "merge-a.db");
  at(b, "merge-b.db");
  db *da = open_ok(a), *dbb = open_ok(b);
  if (!da || !dbb) return;
  /* A: gpu; v1, v2; trials (v1, 100), (v2, 100), (v1, 200); binary s1. */
  long long g = add_device(da, "NVIDIA H200", "GPU-1", "cuda");
  long long v1 = add_point(da, 1), v2 = add_point(da, 2);
  db_trial t = make_trial(v1, g, 100, 5.0, NULL);
  put(da, &t);
  t = make_trial(v2, g, 100, 6.0, NULL);
  put(da, &t);
  t = make_trial(v1, g, 200, 7.0, NULL);
  put(da, &t);
  add_binary(da, "s1", 1);
  /* B, its ids in another order: emu, gpu; v3, v2, v1; trials (v2, 100)
  ** newer, (v1, 200) older, (v3, 100) on emu and (v3, 300) on the gpu;
  ** binaries s1 (also in A), s2 and s3, none of which is imported. */
  long long be = add_device(dbb, "CPU emulator", "emu", "emu");
  long long bg = add_device(dbb, "NVIDIA H200", "GPU-1", "cuda");
  long long b3 = add_point(dbb, 3), b2 = add_point(dbb, 2), b1 = add_point(dbb, 1);
  t = make_trial(b2, bg, 100, 3.0, NULL);
  put(dbb, &t);
  t = make_trial(b1, bg, 200, 9.0, NULL);
  put(dbb, &t);
  t = make_trial(b3, be, 100, NAN, "{\"global_bytes_read\": 5}");
  put(dbb, &t);
  t = make_trial(b3, bg, 300, 8.0, NULL);
  put(dbb, &t);
  add_binary(dbb, "s1", 9);
  add_binary(dbb, "s2", 2);
  add_binary(dbb, "s3", 3);
  db_close(da);
  db_close(dbb);
  set_created(a, point_name(2), 100, "2020-01-01T00:00:00.000Z");
  set_created(b, point_name(2), 100, "2021-01-01T00:00:00.000Z");
  set_created(a, point_name(1), 200, "2021-01-01T00:00:00.000Z");
  set_created(b, point_name(1), 200, "2020-01-01T00:00:00.000Z");

  if (!(da = open_ok(a))) return;
  db_merge_counts c;
  merge_check check = {0};
  const db_merge_accept accept = merge_check_accept(&check);
  CHECK(db_merge(da, b, &accept, &c, err, sizeof err) == 0, "db_merge: %s", err);
  printf("merge: devices +%zu/=%zu, variants +%zu/=%zu, binaries not imported %zu, "
         "trials +%zu/replaced %zu/=%zu\n", c.devices_added, c.devices_skipped, c.variants_added,
         c.variants_skipped, c.binaries_not_imported, c.trials_added, c.trials_replaced,
         c.trials_skipped);
  CHECK(c.devices_added == 1 && c.devices_skipped == 1, "devices");
  CHECK(c.variants_added == 1 && c.variants_skipped == 2, "variants");
  CHECK(c.binaries_not_imported == 3, "binaries");
  CHECK(c.trials_added == 2 && c.trials_replaced == 1 && c.trials_skipped == 1, "trials");
  CHECK(raw_int(a, "SELECT count(*) FROM trials") == 5, "5 trials");
  /* Each trial's variant and device names survived the id mapping. */
  char text[256], sql[1024];
  snprintf(sql, sizeof sql, "SELECT group_concat(k, ' ') FROM (SELECT CASE v.name WHEN '%s' "
           "THEN 'v1' WHEN '%s' THEN 'v2' WHEN '%s' THEN 'v3' END || '/' || d.backend || '/' "
           "|| t.seq_q || '/' || coalesce(t.median_us, '-') AS k FROM trials t JOIN variants v "
           "ON v.id = t.variant_id JOIN devices d ON d.id = t.device_id ORDER BY k)",
           point_name(1), point_name(2), point_name(3));
  CHECK(raw_text(a, sql, text, sizeof text) == 0 &&
        !strcmp(text, "v1/cuda/100/5.0 v1/cuda/200/7.0 v2/cuda/100/3.0 v3/cuda/300/8.0 "
                      "v3/emu/100/-"), "merged trials: %s", text);
  CHECK(raw_text(a, "SELECT hex(substr(blob, 1, 2)) FROM binaries WHERE source_hash = 's1'",
                 text, sizeof text) == 0 && !strcmp(text, "0101") &&
        raw_int(a, "SELECT count(*) FROM binaries") == 1, "A's s1 kept, none of B's imported");
  /* Again: nothing new. */
  CHECK(db_merge(da, b, &accept, &c, err, sizeof err) == 0 && c.devices_added + c.variants_added +
        c.trials_added + c.trials_replaced == 0 && c.trials_skipped == 4,
        "a second merge adds nothing");
  merge_check_close(&check);
  db_close(da);
}

/* ---- A binary edited by hand ---- */

static void test_tampered_binary(void) {
  char path[PATH_LEN], err[512] = "";
  at(path, "tamper.db");
  db *d = open_ok(path);
  if (!d) return;
  unsigned char blob[512];
  for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)i;
  db_binary_key key = {"feedface", "host", "cc 12.2", "-O2"};
  db_binary bin = {blob, sizeof blob, 0, 0, 0, 5.0, 0}, got;
  int found;
  CHECK(db_binary_put(d, &key, &bin, err, sizeof err) == 0, "put: %s", err);
  CHECK(raw_exec(path, "UPDATE binaries SET blob = randomblob(512)") == 0, "tamper");
  err[0] = '\0';
  CHECK(db_binary_get(d, &key, &got, &found, err, sizeof err) == 0 && !found && got.untrusted &&
        !got.data && strstr(err, "binary cache entry not trusted"),
        "tampered: found %d untrusted %d '%s'", found, got.untrusted, err);
  printf("tampered binary: found %d, untrusted %d: %s\n", found, got.untrusted, err);
  CHECK(db_binary_put(d, &key, &bin, err, sizeof err) == 0 &&
        db_binary_get(d, &key, &got, &found, err, sizeof err) == 0 && found && !got.untrusted &&
        got.size == sizeof blob && !memcmp(got.data, blob, sizeof blob), "put again heals it");
  db_binary_free(&got);
  db_close(d);
}

/* ---- The default path ---- */

static void test_default_path(void) {
  char buf[PATH_LEN], err[256], *saved[3];
  const char *names[] = {"FATUNE_DB", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
  }
  setenv("FATUNE_DB", "/x/mine.db", 1);
  CHECK(db_default_path(buf, sizeof buf, err, sizeof err) == 0 && !strcmp(buf, "/x/mine.db"),
        "$FATUNE_DB: %s", buf);
  unsetenv("FATUNE_DB");
  setenv("XDG_CACHE_HOME", "/c", 1);
  CHECK(db_default_path(buf, sizeof buf, err, sizeof err) == 0 &&
        !strcmp(buf, "/c/fatune/fatune.db"), "$XDG_CACHE_HOME: %s", buf);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/h", 1);
  CHECK(db_default_path(buf, sizeof buf, err, sizeof err) == 0 &&
        !strcmp(buf, "/h/.cache/fatune/fatune.db"), "$HOME: %s", buf);
  unsetenv("HOME");
  CHECK(db_default_path(buf, sizeof buf, err, sizeof err) != 0 && strstr(err, "FATUNE_DB"),
        "no home: %s", err);
  for (int i = 0; i < 3; i++) {
    if (saved[i]) setenv(names[i], saved[i], 1);
    free(saved[i]);
  }
}

/* A file of schema 5, made by the steps up to 5, with variants and trials:
** migrated to 6, every row kept and every variant a forward one; the best
** variant is then chosen per op, and show filters by it. */
static size_t show_rows(db *d, const char *op) {
  db_filter f = {NULL, NULL, 0, 0, 0, 0, 0, -1, op, 0, 0, 0};
  FILE *out = fopen("/dev/null", "w");
  size_t rows = 0;
  char err[512] = "";
  CHECK(out && db_show(d, &f, 0, out, &rows, err, sizeof err) == 0, "show --op %s: %s",
        op ? op : "(any)", err);
  if (out) fclose(out);
  return rows;
}

static void test_migrate_from_five(void) {
  char path[PATH_LEN], err[512] = "", sql[96];
  at(path, "five.db");
  sqlite3 *h;
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  CHECK(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == 0 &&
        dbi_migrate_to(h, 0, 5, err, sizeof err) == 0, "a schema-5 file: %s", err);
  CHECK(sqlite3_exec(h,
        "INSERT INTO devices VALUES (1, 'NVIDIA H100', 'GPU-1', 'cuda', 9, 0, 132, 232448, 52428800);"
        "INSERT INTO variants VALUES (1, 'tc', 'tc/1+x', 'v1', 'aaaaaaaaaaaa', '{}', 'h');"
        "INSERT INTO variants VALUES (2, 'tc', 'tc/1+x', 'v2', 'bbbbbbbbbbbb', '{}', 'i');"
        "INSERT INTO trials (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q,"
        " seq_k, batch, heads, causal, status, median_us, tflops, fatune_version, created) VALUES"
        " (1, 1, 'sm_90', 'bf16', 64, 1024, 1024, 1024, 1024, 4, 16, 0, 'ok', 80.0, 12.5, '0.1.0',"
        " '2026-01-01T00:00:00.000Z'),"
        " (2, 1, 'sm_90', 'bf16', 64, 1024, 1024, 1024, 1024, 4, 16, 0, 'ok', 90.0, 11.0, '0.1.0',"
        " '2026-01-01T00:00:01.000Z'),"
        " (2, 1, 'sm_90', 'bf16', 64, 2048, 2048, 2048, 2048, 4, 16, 0, 'invalid', NULL, NULL,"
        " '0.1.0', '2026-01-01T00:00:02.000Z');",
        NULL, NULL, NULL) == SQLITE_OK, "rows of schema 5: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(path, "PRAGMA user_version") == 5, "at version 5");
  db *d = open_ok(path);
  if (!d) return;
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "migrated to %d",
        DB_SCHEMA_VERSION);
  /* Version 7: the trials' compiler, unknown (NULL) in the rows before. */
  CHECK(raw_int(path, "SELECT count(*) FROM trials WHERE compiler IS NULL") == 3,
        "the rows of schema 5 have no compiler");
  CHECK(raw_int(path, "SELECT count(*) FROM variants") == 2 &&
          raw_int(path, "SELECT count(*) FROM variants WHERE op = 'fwd'") == 2 &&
          raw_int(path, "SELECT count(*) FROM trials") == 3 &&
          raw_int(path, "SELECT count(*) FROM trials WHERE median_us = 80.0 AND variant_id = 1 "
                        "AND created = '2026-01-01T00:00:00.000Z'") == 1,
        "every variant and trial kept, each variant op fwd");
  db_problem p = {.dtype = "bf16", .dim = 64, .seq_q = 1024, .seq_k = 1024};
  db_best_row r;
  int found = 0, exact = 0;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
          !strcmp(r.variant, "v1"), "best of op fwd (the default): %s %s", r.variant, err);
  /* A faster variant of another op is not the forward pass's best. */
  db_variant bwd = {"tc", "tc/1+x", "v3", "cccccccccccc", "{}", "j", "bwd", NULL, NULL};
  long long v3 = -1;
  CHECK(db_variant_id(d, &bwd, &v3, err, sizeof err) == 0, "a bwd variant: %s", err);
  db_trial t = make_trial(v3, 1, 1024, 10.0, NULL);
  t.problem.dtype = "bf16", t.problem.heads = 16;
  CHECK(db_trial_put(d, &t, err, sizeof err) == 0, "a bwd trial: %s", err);
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found &&
          !strcmp(r.variant, "v1"), "fwd's best stays v1: %s %s", r.variant, err);
  p.op = "bwd";
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found &&
          !strcmp(r.variant, "v3"), "bwd's best is v3: %s %s", r.variant, err);
  p.op = "decode";
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && !found,
        "no decode variant: found %d", found);
  CHECK(show_rows(d, "fwd") == 3 && show_rows(d, "bwd") == 1 && show_rows(d, "decode") == 0 &&
          show_rows(d, NULL) == 4, "show filters by op");
  db_close(d);
}


/* A file of schema 10 with a trial carrying every column version 10 has:
** migrated to 11 (the trials table rebuilt), the trial keeps its id and
** every figure, with the defaults of the new key columns (req_batch 0,
** kv_group 1, page 0); the schema is the one a fresh file gets, and the
** next trial takes the next id. */
static void test_migrate_from_ten(void) {
  char path[PATH_LEN], fresh[PATH_LEN], err[512] = "", sql[96];
  at(path, "ten.db");
  at(fresh, "ten-fresh.db");
  sqlite3 *h;
  snprintf(sql, sizeof sql, "PRAGMA application_id = %d", DB_APPLICATION_ID);
  CHECK(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == 0 &&
        dbi_migrate_to(h, 0, 10, err, sizeof err) == 0, "a schema-10 file: %s", err);
  CHECK(sqlite3_exec(h,
        "INSERT INTO devices VALUES (1, 'NVIDIA H100', 'GPU-1', 'cuda', 9, 0, 132, 232448, 52428800);"
        "INSERT INTO variants VALUES (1, 'tc', 'tc/1+x', 'v1', 'aaaaaaaaaaaa', '{}', 'h', 'fwd',"
        " '', '');"
        "INSERT INTO trials (id, variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k,"
        " seq_q, seq_k, batch, heads, causal, status, message, max_abs_err, rel_err, lse_err,"
        " median_us, min_us, p20_us, p80_us, tflops, gbps, counters, seed, fatune_version,"
        " created, compiler, suite_cases, suite_err, suite_failed, deterministic, dim_v) VALUES"
        " (7, 1, 1, 'sm_90', 'bf16', 192, 4096, 4096, 1024, 1024, 4, 16, 1, 'ok', NULL, 1e-3,"
        " 2e-3, 3e-4, 80.0, 79.0, 79.5, 81.0, 12.5, 900.0, '{\"global_bytes_read\": 5}', 42,"
        " '0.1.0', '2026-01-01T00:00:00.000Z', 'NVRTC 13.0', 9, 1e-3, 'huge-values', 1, 128);",
        NULL, NULL, NULL) == SQLITE_OK, "rows of schema 10: %s", sqlite3_errmsg(h));
  sqlite3_close(h);
  CHECK(raw_int(path, "PRAGMA user_version") == 10, "at version 10");
  db *d = open_ok(path);
  if (!d) return;
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION, "migrated to %d",
        DB_SCHEMA_VERSION);
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == 1 &&
          raw_int(path, "SELECT count(*) FROM trials WHERE id = 7 AND variant_id = 1 AND "
                        "device_id = 1 AND arch = 'sm_90' AND dtype = 'bf16' AND dim = 192 AND "
                        "req_seq_q = 4096 AND req_seq_k = 4096 AND seq_q = 1024 AND "
                        "seq_k = 1024 AND batch = 4 AND heads = 16 AND causal = 1 AND "
                        "status = 'ok' AND message IS NULL AND max_abs_err = 1e-3 AND "
                        "rel_err = 2e-3 AND lse_err = 3e-4 AND median_us = 80.0 AND "
                        "min_us = 79.0 AND p20_us = 79.5 AND p80_us = 81.0 AND tflops = 12.5 "
                        "AND gbps = 900.0 AND counters = '{\"global_bytes_read\": 5}' AND "
                        "seed = 42 AND fatune_version = '0.1.0' AND "
                        "created = '2026-01-01T00:00:00.000Z' AND compiler = 'NVRTC 13.0' AND "
                        "suite_cases = 9 AND suite_err = 1e-3 AND "
                        "suite_failed = 'huge-values' AND deterministic = 1 AND dim_v = 128") == 1,
        "the trial of schema 10 kept its id and every field");
  CHECK(raw_int(path, "SELECT count(*) FROM trials WHERE id = 7 AND req_batch = 0 AND "
                      "kv_group = 1 AND page = 0") == 1,
        "the new key columns' defaults: req_batch 0, kv_group 1, page 0");
  CHECK(raw_int(path, "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'trials_v%'") == 0 &&
          raw_int(path, "SELECT count(*) FROM pragma_foreign_key_check") == 0,
        "no table of the rebuild left, no broken reference");
  char text[64];
  CHECK(raw_text(path, "PRAGMA integrity_check", text, sizeof text) == 0 && !strcmp(text, "ok"),
        "integrity_check: %s", text);
  /* Found by best, as before; then a new trial takes the next id. */
  db_problem p = {.dtype = "bf16", .dim = 192, .dim_v = 128, .seq_q = 4096, .seq_k = 4096,
                  .causal = 1, .arch = "sm_90"};
  db_best_row r;
  int found = 0, exact = 0;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
          r.median_us == 80.0 && r.req_batch == 0 && r.kv_group == 1 && r.page == 0,
        "best finds the migrated trial: found %d exact %d %s", found, exact, err);
  db_trial t = make_trial(1, 1, 512, 50.0, NULL);
  put(d, &t);
  CHECK(raw_int(path, "SELECT max(id) FROM trials") == 8, "the next trial is id 8");
  db_close(d);
  /* The schema, object by object, is a fresh file's. */
  d = open_ok(fresh);
  if (d) db_close(d);
  static const char schema_sql[] =
    "SELECT group_concat(type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '-'), "
    "'; ') FROM (SELECT * FROM sqlite_schema ORDER BY type, name)";
  char *a = malloc(65536), *b = malloc(65536);
  CHECK(a && b && raw_text(path, schema_sql, a, 65536) == 0 &&
          raw_text(fresh, schema_sql, b, 65536) == 0 && !strcmp(a, b),
        "the migrated schema is a fresh file's");
  free(a);
  free(b);
}

/* ---- Decoding's keys ---- */

static long long add_decode_variant(db *d, const char *name) {
  char hash[32], source[32];
  unsigned long long h = fa_fnv1a64(FA_FNV64_OFFSET, name, strlen(name));
  snprintf(hash, sizeof hash, "%012llx", h >> 16);
  snprintf(source, sizeof source, "%016llx", h ^ 1);
  db_variant v = {"simtdec", "simtdec-1+abc", name, hash, "{\"family\": \"simtdec\"}", source,
                  "decode", NULL, NULL};
  long long id = -1;
  char err[256];
  CHECK(db_variant_id(d, &v, &id, err, sizeof err) == 0, "db_variant_id %s: %s", name, err);
  return id;
}

/* A decode trial as the emulator records one: run at batch 3 and seq_k 64
** for the key asked (req_batch, kv_group, page; seq_k 4096). */
static db_trial decode_trial(long long var, long long dev, int req_batch, int kv_group, int page,
                             double median_us) {
  db_trial t = make_trial(var, dev, 64, median_us, NULL);
  t.problem = (db_problem){.dtype = "fp16", .dim = 128, .seq_q = 1, .seq_k = 64, .batch = 3,
                           .heads = 8, .arch = "sm_90", .req_seq_q = 1, .req_seq_k = 4096,
                           .req_batch = req_batch, .kv_group = kv_group, .page = page};
  return t;
}

static const char *best_of(db *d, int req_batch, int kv_group, int page, db_best_row *r) {
  db_problem p = {.dtype = "fp16", .dim = 128, .seq_q = 1, .seq_k = 4096, .op = "decode",
                  .req_batch = req_batch, .kv_group = kv_group, .page = page};
  int found = 0, exact = 0;
  char err[512] = "";
  CHECK(db_best(d, NULL, &p, r, &found, &exact, err, sizeof err) == 0, "db_best: %s", err);
  return found && exact ? r->variant : found ? "(inexact)" : "(none)";
}

static size_t show_decode(db *d, int batch, int kv_group, int page) {
  db_filter f = {NULL, NULL, 0, 0, 0, batch, 0, -1, "decode", 0, kv_group, page};
  FILE *out = fopen("/dev/null", "w");
  size_t rows = 0;
  char err[512] = "";
  CHECK(out && db_show(d, &f, 0, out, &rows, err, sizeof err) == 0, "show: %s", err);
  if (out) fclose(out);
  return rows;
}

/* Two decode trials of one variant that differ only in the batch asked
** for, the GQA ratio or the page size are two trials (before version 11
** the second was "recorded before" and never run), and db_best answers
** each key with its own best; a forward trial's key is as it was. */
static void test_decode_keys(void) {
  char path[PATH_LEN], err[512];
  at(path, "decode.db");
  db *d = open_ok(path);
  if (!d) return;
  long long dev = add_device(d, "NVIDIA H200", "GPU-1", "cuda");
  long long a = add_decode_variant(d, "dec-a"), b = add_decode_variant(d, "dec-b");
  /* The base key (batch 8, gqa 8, page 16), then one field changed each. */
  static const struct { int req_batch, kv_group, page; double us_a, us_b; const char *best; }
    keys[] = {{8, 8, 16, 10.0, 20.0, "dec-a"}, {32, 8, 16, 30.0, 25.0, "dec-b"},
              {8, 4, 16, 12.0, 11.0, "dec-b"}, {8, 8, 0, 9.0, 19.0, "dec-a"}};
  const size_t n = sizeof keys / sizeof keys[0];
  for (size_t i = 0; i < n; i++) {
    db_trial t = decode_trial(a, dev, keys[i].req_batch, keys[i].kv_group, keys[i].page,
                              keys[i].us_a);
    int done = 1;
    CHECK(db_trial_done(d, a, dev, &t.problem, &done, err, sizeof err) == 0 && !done,
          "key %zu (batch %d gqa %d page %d) is not recorded before", i, keys[i].req_batch,
          keys[i].kv_group, keys[i].page);
    put(d, &t);
    t = decode_trial(b, dev, keys[i].req_batch, keys[i].kv_group, keys[i].page, keys[i].us_b);
    put(d, &t);
  }
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == (long long)(2 * n),
        "every decode trial stored: %lld", raw_int(path, "SELECT count(*) FROM trials"));
  CHECK(raw_int(path, "SELECT count(*) FROM best") == (long long)n, "one best per key: %lld",
        raw_int(path, "SELECT count(*) FROM best"));
  db_best_row r;
  for (size_t i = 0; i < n; i++) {
    const char *got = best_of(d, keys[i].req_batch, keys[i].kv_group, keys[i].page, &r);
    CHECK(!strcmp(got, keys[i].best) && r.req_batch == keys[i].req_batch &&
            r.kv_group == keys[i].kv_group && r.page == keys[i].page && r.batch == 3,
          "best for batch %d gqa %d page %d: %s, not %s", keys[i].req_batch, keys[i].kv_group,
          keys[i].page, got, keys[i].best);
    printf("decode: batch %d gqa %d page %d -> %s (%.1f us)\n", keys[i].req_batch,
           keys[i].kv_group, keys[i].page, got, r.median_us);
  }
  CHECK(!strcmp(best_of(d, 8, 2, 16, &r), "(none)") && !strcmp(best_of(d, 8, 8, 32, &r), "(none)"),
        "a GQA ratio or page size never tuned finds nothing, not another's");
  /* A batch never tuned takes the nearest by ratio, the smaller of two as near. */
  CHECK(!strcmp(best_of(d, 16, 8, 16, &r), "(inexact)") && r.req_batch == 8,
        "batch 16 between 8 and 32: batch %d's", r.req_batch);
  CHECK(!strcmp(best_of(d, 24, 8, 16, &r), "(inexact)") && r.req_batch == 32,
        "batch 24: batch %d's, not 8's", r.req_batch);
  CHECK(!strcmp(best_of(d, 1, 8, 16, &r), "(inexact)") && r.req_batch == 8,
        "batch 1: batch %d's", r.req_batch);
  /* A second put of a key replaces its trial; kv_group 0 is 1. */
  db_trial t = decode_trial(a, dev, 8, 8, 16, 5.0);
  put(d, &t);
  t = decode_trial(b, dev, 8, 0, 16, 7.0);
  put(d, &t);
  CHECK(raw_int(path, "SELECT count(*) FROM trials") == (long long)(2 * n + 1) &&
          raw_int(path, "SELECT count(*) FROM trials WHERE kv_group = 1 AND page = 16") == 1,
        "the same key replaced; kv_group 0 stored as 1");
  t.problem.kv_group = -1;
  CHECK(db_trial_put(d, &t, err, sizeof err) != 0 && strstr(err, "kv_group -1"),
        "a negative kv_group refused: %s", err);
  t.problem.kv_group = 8, t.problem.page = -1;
  CHECK(db_trial_put(d, &t, err, sizeof err) != 0 && strstr(err, "page -1"),
        "a negative page refused: %s", err);
  /* show filters by the batch asked (not the 3 run), the GQA ratio and the page. */
  CHECK(show_decode(d, 0, 0, 0) == 2 * n + 1 && show_decode(d, 32, 0, 0) == 2 &&
          show_decode(d, 3, 0, 0) == 0 && show_decode(d, 0, 4, 0) == 2 &&
          show_decode(d, 8, 8, 16) == 2,
        "show filters decode trials by batch asked, gqa and page");
  /* A forward trial: no decode key (0, 0: taken as 1, 0), found as before. */
  long long fwd = add_variant(d, "fwd-a");
  t = make_trial(fwd, dev, 1024, 50.0, NULL);
  put(d, &t);
  CHECK(raw_int(path, "SELECT count(*) FROM trials t JOIN variants v ON v.id = t.variant_id "
                      "WHERE v.op = 'fwd' AND req_batch = 0 AND kv_group = 1 AND page = 0") == 1,
        "the forward trial's key: req_batch 0, kv_group 1, page 0");
  db_problem p = {.dtype = "fp32", .dim = 64, .seq_q = 1024, .seq_k = 1024};
  int found = 0, exact = 0;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found && exact &&
          !strcmp(r.variant, "fwd-a") && r.req_batch == 0 && r.kv_group == 1,
        "the forward best, as before: %s %s", r.variant, err);
  p.kv_group = 1;
  CHECK(db_best(d, NULL, &p, &r, &found, &exact, err, sizeof err) == 0 && found,
        "kv_group 1 is kv_group 0 for db_best");
  /* export carries the three fields. */
  size_t rows = 0;
  char *json = capture(d, export_json, &rows);
  CHECK(json && rows == 2 * n + 2 && strstr(json, "\"req_batch\":32,\"kv_group\":8,\"page\":16") &&
          strstr(json, "\"req_batch\":0,\"kv_group\":1,\"page\":0"),
        "export JSON has req_batch, kv_group, page: %.300s", json ? json : err_io);
  free(json);
  char *csv = capture(d, export_csv, &rows);
  CHECK(csv && strstr(csv, ",req_batch,kv_group,page,dim_v\n"),
        "export CSV's header has the key's columns");
  free(csv);
  db_close(d);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char key[PATH_LEN];
  at(key, "key");   /* the compile cache's, away from the user's */
  setenv("FATUNE_KEY", key, 1);
  test_default_path();
  test_fresh();
  test_migrate_from_zero();
  test_migrate_from_two();
  test_migrate_from_four();
  test_migrate_from_five();
  test_migrate_from_ten();
  test_best();
  test_decode_keys();
  test_show_export();
  test_export_formulas();
  test_refusals();
  test_tampered_binary();
  test_merge();
  test_sigkill();
  test_concurrent();
  if (gen) {
    gen_variants_free(points, npoints);
    gen_close(gen);
  }
  remove_tree(dir);
  return check_done("test_db");
}
