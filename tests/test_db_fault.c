/*
** test_db_fault.c
** Fault injection into the results database, in the manner of SQLite's own
** tests: a VFS wrapping the default one makes every write, sync and
** truncate from the Nth on fail with SQLITE_FULL (a full disk) or
** SQLITE_IOERR, and a small tune on the emulator runs with the fault at
** each N from the first write to past the last, or at a sample of them
** (every N near either end, every fifth between; a full disk at odd N,
** an I/O error at even N). Each run must exit non-zero
** with one line naming the failure, or succeed with every variant recorded;
** what it says it recorded must be there; the file must pass
** integrity_check; and a rerun without the fault must complete, recording
** every variant exactly once.
*/
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "gen.h"
#include "tune.h"

/* ---- The faulty VFS ---- */

static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;
static sqlite3_io_methods fault_methods;
static long fault_at;      /* 0: no fault; else the write that fails first */
static long fault_writes;  /* writes, syncs and truncates so far */
static int fault_code;     /* SQLITE_FULL or SQLITE_IOERR_* */

typedef struct fault_file {
  sqlite3_file base;
  sqlite3_file *real;      /* the default VFS's file, right after this struct */
} fault_file;

static sqlite3_file *real_of(sqlite3_file *f) { return ((fault_file *)f)->real; }

/* Whether this write-like call fails, and the code it fails with. */
static int faulted(int ioerr) {
  fault_writes++;
  if (fault_at <= 0 || fault_writes < fault_at) return SQLITE_OK;
  return fault_code == SQLITE_FULL ? SQLITE_FULL : ioerr;
}

static int f_close(sqlite3_file *f) { return real_of(f)->pMethods->xClose(real_of(f)); }
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 off) {
  return real_of(f)->pMethods->xRead(real_of(f), b, n, off);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 off) {
  int rc = faulted(SQLITE_IOERR_WRITE);
  return rc ? rc : real_of(f)->pMethods->xWrite(real_of(f), b, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size) {
  int rc = faulted(SQLITE_IOERR_TRUNCATE);
  return rc ? rc : real_of(f)->pMethods->xTruncate(real_of(f), size);
}
static int f_sync(sqlite3_file *f, int flags) {
  int rc = faulted(SQLITE_IOERR_FSYNC);
  return rc ? rc : real_of(f)->pMethods->xSync(real_of(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size) {
  return real_of(f)->pMethods->xFileSize(real_of(f), size);
}
static int f_lock(sqlite3_file *f, int l) { return real_of(f)->pMethods->xLock(real_of(f), l); }
static int f_unlock(sqlite3_file *f, int l) {
  return real_of(f)->pMethods->xUnlock(real_of(f), l);
}
static int f_reserved(sqlite3_file *f, int *out) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
static int f_control(sqlite3_file *f, int op, void *arg) {
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
static int f_sector(sqlite3_file *f) { return real_of(f)->pMethods->xSectorSize(real_of(f)); }
static int f_device(sqlite3_file *f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
static int f_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **p) {
  return real_of(f)->pMethods->xShmMap(real_of(f), pg, sz, extend, p);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags) {
  return real_of(f)->pMethods->xShmLock(real_of(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f) { real_of(f)->pMethods->xShmBarrier(real_of(f)); }
static int f_shm_unmap(sqlite3_file *f, int del) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), del);
}
/* No memory-mapped I/O: every write goes through f_write. */
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **p) {
  (void)f, (void)off, (void)n;
  *p = NULL;
  return SQLITE_OK;
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
  (void)f, (void)off, (void)p;
  return SQLITE_OK;
}

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)vfs;
  fault_file *ff = (fault_file *)f;
  ff->real = (sqlite3_file *)(ff + 1);
  int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out);
  f->pMethods = ff->real->pMethods ? &fault_methods : NULL;
  return rc;
}

static void fault_install(void) {
  real_vfs = sqlite3_vfs_find(NULL);
  fault_methods = (sqlite3_io_methods){
    3, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock, f_reserved,
    f_control, f_sector, f_device, f_shm_map, f_shm_lock, f_shm_barrier, f_shm_unmap,
    f_fetch, f_unfetch};
  fault_vfs = *real_vfs;
  fault_vfs.zName = "fault";
  fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
  fault_vfs.xOpen = f_open;
  sqlite3_vfs_register(&fault_vfs, 1);
}

static void fault_set(long at, int code) {
  fault_at = at, fault_code = code, fault_writes = 0;
}

/* ---- One tune ---- */

/* At dim 12 with 1.5 KB of shared memory: fatune list says which. A first
** trial, two in the middle and a last. */
#define NVARIANTS 4

static char db_path_[512], err_path[512], out_path[512];
static gen_state *gen;
static gen_target target;

static char *tune_argv[] = {
  "fatune", "--dim", "12", "--dtype", "fp32", "--seq", "64", "--smem", "1536",
  "--backend", "emu", "--jobs", "1", "--seed", "1", "--db", db_path_, NULL};

static void remove_db(void) {
  char p[600];
  unlink(db_path_);
  snprintf(p, sizeof p, "%s-wal", db_path_), unlink(p);
  snprintf(p, sizeof p, "%s-shm", db_path_), unlink(p);
  snprintf(p, sizeof p, "%s-journal", db_path_), unlink(p);
}

/* Runs the tune with stdout and stderr in files; its exit status. */
static int run_tune(void) {
  cli_opts o;
  char err[256];
  if (cli_parse((int)(sizeof tune_argv / sizeof *tune_argv) - 1, tune_argv, &o, err,
                sizeof err) != 0) {
    fprintf(stderr, "cli_parse: %s\n", err);
    return -1;
  }
  fflush(stdout), fflush(stderr);
  int save_out = dup(1), save_err = dup(2);
  int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fo, 1), dup2(fe, 2);
  close(fo), close(fe);
  int rc = tune_main(gen, &o, &target);
  fflush(stdout), fflush(stderr);
  dup2(save_out, 1), dup2(save_err, 2);
  close(save_out), close(save_err);
  return rc;
}

static void slurp(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(buf, 1, n - 1, f) : 0;
  buf[got] = '\0';
  if (f) fclose(f);
}

/* ---- Looking into the file ---- */

typedef struct db_state {
  int exists, integrity_ok;
  long trials, variants;    /* trial rows; distinct variants among them */
} db_state;

static long query_long(sqlite3 *h, const char *sql) {
  sqlite3_stmt *st;
  long v = -1;
  if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) != SQLITE_OK) return -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = (long)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static int integrity_ok(sqlite3 *h) {
  sqlite3_stmt *st;
  int ok = 0;
  if (sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) return 0;
  if (sqlite3_step(st) == SQLITE_ROW)
    ok = !strcmp((const char *)sqlite3_column_text(st, 0), "ok");
  sqlite3_finalize(st);
  return ok;
}

/* Whether a trial of the variant named `name` is in the file. */
static int has_trial(const char *name) {
  sqlite3 *h;
  sqlite3_stmt *st;
  int found = 0;
  if (sqlite3_open_v2(db_path_, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, "SELECT count(*) FROM trials JOIN variants v ON v.id = variant_id "
                            "WHERE v.name = ?", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    found = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return found;
}

static db_state look(void) {
  db_state s = {0};
  if (access(db_path_, F_OK) != 0) return s;
  s.exists = 1;
  sqlite3 *h;
  if (sqlite3_open_v2(db_path_, &h, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
    s.integrity_ok = integrity_ok(h);
    /* A file left empty by a failed first open has no tables: no trials. */
    int tables = query_long(h, "SELECT count(*) FROM sqlite_schema WHERE name = 'trials'") > 0;
    s.trials = tables ? query_long(h, "SELECT count(*) FROM trials") : 0;
    s.variants = tables ? query_long(h, "SELECT count(DISTINCT variant_id) FROM trials") : 0;
  }
  sqlite3_close(h);
  return s;
}

/* ---- The checks ---- */

/* Rows of the table whose status is ok: lines holding " ok " (the
** adversarial suite's column may say ok too, on the same line). */
static int ok_rows(const char *out) {
  int n = 0;
  for (const char *p = out; *p;) {
    const size_t len = strcspn(p, "\n");
    const char *hit = strstr(p, " ok ");
    n += hit && hit < p + len;
    p += len + (p[len] == '\n');
  }
  return n;
}

/* The variant a "recording X in DB: ...; stopping" line names, into name. */
static int stopped_at(const char *errtext, char *name, size_t n) {
  const char *p = strstr(errtext, "fatune: recording ");
  if (!p || !strstr(p, "; stopping: the trials before it are recorded")) return 0;
  p += strlen("fatune: recording ");
  size_t len = strcspn(p, " ");
  snprintf(name, n, "%.*s", len < n ? (int)len : (int)n - 1, p);
  return 1;
}

static const char *code_name(int code) { return code == SQLITE_FULL ? "FULL" : "IOERR"; }

/* The tune with the fault at write `at`; then the file, then the rerun. */
static void one_fault(long at, int code, int *failed_runs, int *stopped_runs) {
  static char out[1 << 16], errtext[1 << 14];
  remove_db();
  fault_set(at, code);
  int rc = run_tune();
  fault_set(0, 0);
  slurp(out_path, out, sizeof out);
  slurp(err_path, errtext, sizeof errtext);
  db_state s = look();
  char name[200];
  if (rc != 0) {
    (*failed_runs)++;
    CHECK(strstr(errtext, "database or disk is full") || strstr(errtext, "disk I/O error"),
          "%s at write %ld: exit %d without the database's error: %s", code_name(code), at, rc,
          errtext);
    if (stopped_at(errtext, name, sizeof name)) {
      const char *line = strstr(errtext, "fatune: recording");
      if (!(*stopped_runs)++)
        printf("%s at write %ld: %.*s\n", code_name(code), at, (int)strcspn(line, "\n"), line);
      CHECK(!has_trial(name), "%s at write %ld: %s said not recorded, yet it is",
            code_name(code), at, name);
      CHECK(s.trials < NVARIANTS, "%s at write %ld: stopped with every trial recorded",
            code_name(code), at);
    }
  } else {
    CHECK(ok_rows(out) == NVARIANTS && s.trials == NVARIANTS && s.variants == NVARIANTS,
          "%s at write %ld: exit 0 with %d ok rows and %ld trials", code_name(code), at,
          ok_rows(out), s.trials);
  }
  CHECK(!s.exists || s.integrity_ok, "%s at write %ld: integrity_check fails", code_name(code),
        at);
  rc = run_tune();
  s = look();
  slurp(err_path, errtext, sizeof errtext);
  CHECK(rc == 0 && s.integrity_ok && s.trials == NVARIANTS && s.variants == NVARIANTS,
        "%s at write %ld: the rerun exits %d with %ld trials of %ld variants: %s",
        code_name(code), at, rc, s.trials, s.variants, errtext);
}

static int setup(void) {
  const char *tmp = getenv("TMPDIR");
  char tmpl[400];
  snprintf(tmpl, sizeof tmpl, "%.300s/fatune-fault-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(tmpl)) return -1;
  snprintf(db_path_, sizeof db_path_, "%s/t.db", tmpl);
  snprintf(err_path, sizeof err_path, "%s/err.txt", tmpl);
  snprintf(out_path, sizeof out_path, "%s/out.txt", tmpl);
  char err[512];
  if (gen_open(&gen, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    return -1;
  }
  return gen_target_for_arch(gen, "sm_90", 1536, 0, &target);
}

static void cleanup(void) {
  char dir[512];
  remove_db();
  unlink(err_path), unlink(out_path);
  snprintf(dir, sizeof dir, "%s", db_path_);
  *strrchr(dir, '/') = '\0';
  rmdir(dir);
  gen_close(gen);
}

/* Whether the default run puts a fault at write `at` of `writes`: every
** write of the first and last EDGE (the schema, the first trial, the last
** trial and what follows it), and every fifth between, where each trial
** repeats the writes of the one before (5 is odd: both kinds still fall
** there). */
#define EDGE 24
static int sampled(long at, long writes) {
  return at <= EDGE || at > writes + 1 - EDGE || (at - EDGE) % 5 == 0;
}

/* test_db_fault [FROM [TO]]: the faults at every write from FROM to TO
** (default: those sampled() picks from the first write to one past the
** last). */
int main(int argc, char **argv) {
  if (setup() != 0) check_skip("cannot set up a temporary directory and the generator");
  fault_install();
  /* Without a fault: how many writes a whole tune makes. */
  remove_db();
  fault_set(0, 0);
  int rc = run_tune();
  long writes = fault_writes;
  CHECK(rc == 0 && look().trials == NVARIANTS, "the tune without a fault exits %d", rc);
  int failed = 0, stopped = 0, runs = 0;
  const long from = argc > 1 ? atol(argv[1]) : 1, to = argc > 2 ? atol(argv[2]) : writes + 1;
  /* One fault per write, the kinds in turn: each kind every other write (a
  ** tune per fault, and its rerun, take a second or more). */
  for (long at = from > 0 ? from : 1; at <= to; at++) {
    if (argc > 1 || sampled(at, writes)) {
      one_fault(at, at % 2 ? SQLITE_FULL : SQLITE_IOERR, &failed, &stopped);
      runs++;
    }
  }
  printf("test_db_fault: a tune makes %ld writes; %d runs with a fault at one of them (FULL at "
         "odd writes, IOERR at even): "
         "%d stopped with the database's error (%d of them while recording a trial), %d "
         "completed; every rerun recorded all %d variants once\n",
         writes, runs, failed, stopped, runs - failed, NVARIANTS);
  cleanup();
  return check_done("test_db_fault");
}
