/*
** test_trust.c
** The compile cache runs only binaries this installation stored under its
** own key ($FATUNE_KEY, here in a temporary directory):
**  - a forged emulator object (a real shared object whose constructor
**    leaves a marker file, with the kernel's entry point and the ABI
**    symbols the emulator checks, so that it would load) written into the
**    row the library looks up is never loaded: the result is right, no
**    marker, and the row then holds this installation's own binary;
**  - the same object brought in by db_merge (what `fatune merge` runs) is
**    not imported, and the library never loads it;
**  - the key: made on first use, mode 0600 in a directory of mode 0700
**    ($XDG_CONFIG_HOME, else $HOME/.config); a key file with mode 0644, a
**    symbolic link, one of the wrong size, a directory, one in a folder of
**    mode 0777, $FATUNE_KEY set to a relative path (hex key bytes, say:
**    no file of that name is made), or (as root) another user's key or one
**    in another user's folder is refused with its reason, and the library still
**    computes right, only without the cache; under another key every
**    stored binary fails verification and is compiled again;
**  - the MAC covers each field with its length: moving a byte from one
**    field of the key to the next does not keep an entry valid, nor does
**    changing any one field (source hash, target, compiler version,
**    options, blob) alone;
**  - a file of schema 1 (FNV-1a checksums) loses its cached binaries when
**    it is migrated: none could be verified.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "backend.h"
#include "check.h"
#include "db.h"
#include "emu.h"
#include "emu_abi.h"
#include "fatune.h"
#include "gen.h"
#include "merge_check.h"
#include "reference.h"

#define PATH_LEN 256

static char dir[] = "/tmp/fatune-test-trust-XXXXXX";
static char marker[PATH_LEN];

static void at(char *path, const char *name) { snprintf(path, PATH_LEN, "%s/%s", dir, name); }

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* ---- Running the library ---- */

static unsigned long long rng = 7;
static double uniform(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 - 0.5;
}

/* p (fp64) through the library on the database at path: its status, and
** the max error against the float64 reference in *worst. */
static fatune_status run(const char *path, const fatune_problem *p, double *worst) {
  const size_t nq = (size_t)p->batch * p->heads * p->seq_q * p->dim;
  const size_t nk = (size_t)p->batch * p->heads * p->seq_k * p->dim;
  double *q = malloc(nq * 8), *k = malloc(nk * 8), *v = malloc(nk * 8), *o = malloc(nq * 8),
         *ref = malloc(nq * 8);
  fatune_status st = FATUNE_ENOMEM;
  fatune_ctx *c = NULL;
  fatune_options opts = {.db_path = path, .backend = "emu"};
  *worst = INFINITY;
  if (!q || !k || !v || !o || !ref || (st = fatune_open(&opts, &c)) != FATUNE_OK) goto done;
  for (size_t i = 0; i < nq; i++) q[i] = uniform();
  for (size_t i = 0; i < nk; i++) k[i] = uniform(), v[i] = uniform();
  memset(o, 0xFF, nq * 8);   /* NaN: a kernel that writes nothing is seen */
  if ((st = fatune_attention_forward(c, p, q, k, v, o, NULL, NULL)) != FATUNE_OK) goto done;
  fa_problem fp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                   .dim = p->dim, .dtype = FA_FP64, .causal = p->causal};
  fa_layout lq = fa_layout_contiguous(&fp, p->seq_q), lk = fa_layout_contiguous(&fp, p->seq_k);
  if (ref_attention(&fp, q, lq, k, lk, v, lk, ref, lq, NULL) != 0) goto done;
  *worst = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = fabs(o[i] - ref[i]);
    if (!(e <= *worst)) *worst = e;   /* NaN sticks */
  }
done:
  fatune_close(c);
  free(q), free(k), free(v), free(o), free(ref);
  return st;
}

/* Runs p and checks the result against the reference. */
static void run_right(const char *path, const fatune_problem *p, const char *what) {
  double e;
  fatune_status st = run(path, p, &e);
  CHECK(st == FATUNE_OK && e < 1e-12, "%s: status %d, error %.3g (%s)", what, (int)st, e,
        fatune_errmsg());
}

/* ---- The cache key the library looks up, and a forged object for it ---- */

typedef struct cache_key {
  char source_hash[17], entry[160], target[32], compiler[160], options[160];
  db_binary_key key;   /* pointing into the arrays above */
} cache_key;

/* The default kernel for p, as the library renders it with nothing tuned,
** and the emulator backend's cache key for it. */
static int key_for(const fatune_problem *p, cache_key *ck) {
  gen_state *g;
  gen_target t;
  gen_kernel k;
  fa_backend *be;
  char err[256], note[256];
  fa_problem fp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                   .dim = p->dim, .dtype = FA_FP64, .causal = p->causal};
  if (gen_open(&g, err, sizeof err) != 0) return -1;
  int rc = gen_target_for_arch(g, "sm_90", 0, 0, &t) == 0 &&
           gen_render_config(g, "", &fp, &t, &k) == 0 ? 0 : -1;
  gen_close(g);
  if (rc != 0) return -1;
  snprintf(ck->source_hash, sizeof ck->source_hash, "%s", k.source_hash);
  snprintf(ck->entry, sizeof ck->entry, "%s", k.entry);
  gen_kernel_free(&k);
  if (backend_open("emu", &be, note, sizeof note, err, sizeof err) != 0) return -1;
  const char *target, *compiler, *options;
  backend_cache_key(be, &target, &compiler, &options);
  snprintf(ck->target, sizeof ck->target, "%s", target);
  snprintf(ck->compiler, sizeof ck->compiler, "%s", compiler);
  snprintf(ck->options, sizeof ck->options, "%s", options);
  backend_close(be);
  ck->key = (db_binary_key){ck->source_hash, ck->target, ck->compiler, ck->options};
  return 0;
}

/* A shared object the emulator would accept as the kernel entry: the ABI
** symbols it checks, the entry point (which writes nothing), and a
** constructor that creates the file $FATUNE_TEST_MARKER names. */
static unsigned char *forge(const char *entry, size_t *size) {
  char c[PATH_LEN], so[PATH_LEN], cmd[3 * PATH_LEN];
  at(c, "forged.c");
  at(so, "forged.so");
  FILE *f = fopen(c, "w");
  if (!f) return NULL;
  fprintf(f, "#include <fcntl.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
             "__attribute__((constructor)) static void planted(void) {\n"
             "  const char *p = getenv(\"FATUNE_TEST_MARKER\");\n"
             "  int fd = p ? open(p, O_WRONLY | O_CREAT, 0600) : -1;\n"
             "  if (fd >= 0) close(fd);\n}\n"
             "int fa_emu_abi(void) { return %d; }\n"
             "void %s(void) {}\n", FA_EMU_ABI_VERSION, entry);
  if (fclose(f) != 0) return NULL;
  snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o %s %s", emu_compiler(), so, c);
  if (system(cmd) != 0) return NULL;
  f = fopen(so, "rb");
  if (!f) return NULL;
  unsigned char *bytes = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (bytes = malloc((size_t)n)) && fread(bytes, 1, (size_t)n, f) != (size_t)n) {
    free(bytes);
    bytes = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return bytes;
}

/* Writes blob into the binaries row for ck of the database at path, as an
** edit by hand would: an existing row keeps its MAC (this installation's,
** for the bytes it stored), a new one gets 32 bytes made up. */
static int plant(const char *path, const cache_key *ck, const unsigned char *blob, size_t n) {
  sqlite3 *s;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_open(path, &s);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(s, "INSERT INTO binaries (source_hash, target, compiler_version, "
                               "options, blob, mac, created) VALUES (?, ?, ?, ?, ?, "
                               "randomblob(32), '2020-01-01T00:00:00.000Z') ON CONFLICT "
                               "(source_hash, target, compiler_version, options) DO UPDATE "
                               "SET blob = excluded.blob", -1, &st, NULL);
  const char *text[] = {ck->source_hash, ck->target, ck->compiler, ck->options};
  for (int i = 0; rc == SQLITE_OK && i < 4; i++)
    rc = sqlite3_bind_text(st, i + 1, text[i], -1, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(st, 5, blob, (int)n, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
  sqlite3_finalize(st);
  sqlite3_close(s);
  return rc == SQLITE_OK ? 0 : -1;
}

/* The row for ck verifies under this installation's key and is not the
** forged object. */
static int holds_own(const char *path, const cache_key *ck, const unsigned char *forged,
                     size_t n) {
  db *d;
  db_binary got;
  int found = 0;
  char err[256];
  if (db_open(path, 0, &d, err, sizeof err) != 0) return 0;
  int own = db_binary_get(d, &ck->key, &got, &found, err, sizeof err) == 0 && found &&
            (got.size != n || memcmp(got.data, forged, n) != 0);
  if (found) db_binary_free(&got);
  db_close(d);
  return own;
}

/* ---- Forged binaries ---- */

/* The forged object for p's kernel, and the key it is planted under. */
static unsigned char *forged_for(const fatune_problem *p, cache_key *ck, size_t *n) {
  if (key_for(p, ck) != 0) {
    CHECK(0, "the library's cache key");
    return NULL;
  }
  unsigned char *bytes = forge(ck->entry, n);
  CHECK(bytes, "building the forged object for %s", ck->entry);
  return bytes;
}

static void test_forged_in_place(void) {
  char path[PATH_LEN];
  at(path, "ours.db");
  fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 40, .seq_k = 56, .dim = 16,
                      .dtype = FATUNE_FP64, .causal = 1};
  cache_key ck;
  size_t n;
  unsigned char *forged = forged_for(&p, &ck, &n);
  if (!forged) return;
  run_right(path, &p, "before forging");   /* this installation's own binary first */
  CHECK(plant(path, &ck, forged, n) == 0, "planting the forged object");
  run_right(path, &p, "forged object in the cache");
  CHECK(!exists(marker), "the forged object's constructor ran (%s exists)", marker);
  CHECK(holds_own(path, &ck, forged, n), "the row holds no binary of this installation's");
  free(forged);
  printf("forged object in place: not loaded, compiled again and stored\n");
}

static void test_forged_by_merge(void) {
  char ours[PATH_LEN], theirs[PATH_LEN], err[512];
  at(ours, "ours.db");
  at(theirs, "theirs.db");
  fatune_problem p = {.batch = 2, .heads = 1, .seq_q = 24, .seq_k = 24, .dim = 8,
                      .dtype = FATUNE_FP64, .causal = 0};
  cache_key ck;
  size_t n;
  unsigned char *forged = forged_for(&p, &ck, &n);
  db *d = NULL;
  if (!forged || db_open(theirs, DB_CREATE, &d, err, sizeof err) != 0) {
    CHECK(0, "another database with a forged object: %s", forged ? err : "no object");
    free(forged);
    return;
  }
  db_close(d);
  CHECK(plant(theirs, &ck, forged, n) == 0, "planting the forged object");
  db_merge_counts c = {0};
  CHECK(db_open(ours, 0, &d, err, sizeof err) == 0, "%s", err);
  merge_check check = {0};
  const db_merge_accept accept = merge_check_accept(&check);
  CHECK(d && db_merge(d, theirs, &accept, &c, err, sizeof err) == 0, "db_merge: %s", err);
  merge_check_close(&check);
  db_close(d);
  printf("merge: %zu binaries not imported\n", c.binaries_not_imported);
  CHECK(c.binaries_not_imported == 1, "%zu binaries not imported", c.binaries_not_imported);
  run_right(ours, &p, "after merging a forged object");
  CHECK(!exists(marker), "the merged forged object's constructor ran (%s exists)", marker);
  CHECK(holds_own(ours, &ck, forged, n), "the row holds no binary of this installation's");
  free(forged);
}

/* ---- The key ---- */

static long long raw_int(const char *path, const char *sql) {
  sqlite3 *s;
  sqlite3_stmt *st = NULL;
  long long v = -1;
  if (sqlite3_open(path, &s) == SQLITE_OK && sqlite3_prepare_v2(s, sql, -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(s);
  return v;
}

static int raw_exec(const char *path, const char *sql) {
  sqlite3 *s;
  int rc = sqlite3_open(path, &s);
  if (rc == SQLITE_OK) rc = sqlite3_exec(s, sql, NULL, NULL, NULL);
  sqlite3_close(s);
  return rc == SQLITE_OK ? 0 : -1;
}

static int write_file(const char *path, size_t n, mode_t mode) {
  unsigned char bytes[64];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 37 + 11);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = n <= sizeof bytes && fwrite(bytes, 1, n, f) == n;
  if (fclose(f) != 0) ok = 0;
  return ok && chmod(path, mode) == 0 ? 0 : -1;
}

static const fatune_problem small = {.batch = 1, .heads = 1, .seq_q = 16, .seq_k = 20, .dim = 8,
                                     .dtype = FATUNE_FP64, .causal = 1};

static void test_key_made(void) {
  char xdg[PATH_LEN], key[PATH_LEN], path[PATH_LEN], home[PATH_LEN];
  at(xdg, "xdg");
  at(key, "xdg/fatune/key");
  at(path, "made.db");
  unsetenv("FATUNE_KEY");
  setenv("XDG_CONFIG_HOME", xdg, 1);
  run_right(path, &small, "with a key made on first use");
  struct stat sk, sd;
  CHECK(lstat(key, &sk) == 0 && S_ISREG(sk.st_mode) && (sk.st_mode & 07777) == 0600 &&
        sk.st_size == 32 && sk.st_uid == geteuid(), "%s: mode %o, %lld bytes", key,
        (unsigned)sk.st_mode, (long long)sk.st_size);
  at(xdg, "xdg/fatune");
  CHECK(stat(xdg, &sd) == 0 && (sd.st_mode & 07777) == 0700, "%s: mode %o", xdg,
        (unsigned)sd.st_mode);
  CHECK(raw_int(path, "SELECT count(*) FROM binaries") == 1, "the cache is used");
  printf("key made on first use: %s, mode %04o, %lld bytes\n", key,
         (unsigned)(sk.st_mode & 07777), (long long)sk.st_size);
  /* Without $XDG_CONFIG_HOME: $HOME/.config/fatune/key. */
  unsetenv("XDG_CONFIG_HOME");
  const char *saved = getenv("HOME");
  char *old = saved ? strdup(saved) : NULL;
  at(home, "home");
  setenv("HOME", home, 1);
  at(path, "home.db");
  run_right(path, &small, "with a key made in $HOME");
  at(key, "home/.config/fatune/key");
  CHECK(lstat(key, &sk) == 0 && (sk.st_mode & 07777) == 0600 && sk.st_size == 32,
        "%s made", key);
  if (old) setenv("HOME", old, 1);
  else unsetenv("HOME");
  free(old);
}

/* With $FATUNE_KEY at key, the library computes right without the cache,
** and the database layer says why, in words that contain want. */
static void refused(const char *key, const char *want, const char *what) {
  char path[PATH_LEN], err[512] = "";
  snprintf(path, sizeof path, "%s/refused-%s.db", dir, what);
  setenv("FATUNE_KEY", key, 1);
  run_right(path, &small, what);
  CHECK(raw_int(path, "SELECT count(*) FROM binaries") == 0, "%s: the cache was used", what);
  db *d;
  db_binary got;
  int found = 1;
  db_binary_key k = {"0123", "host", "cc", ""};
  if (db_open(path, 0, &d, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return;
  }
  CHECK(db_binary_get(d, &k, &got, &found, err, sizeof err) != 0 && !found &&
        strstr(err, key) && strstr(err, want), "%s: '%s'", what, err);
  printf("%s: %s\n", what, err);
  db_close(d);
}

static void test_key_refused(void) {
  char key[PATH_LEN], good[PATH_LEN];
  at(good, "good.key");
  CHECK(write_file(good, 32, 0600) == 0, "a good key");
  at(key, "open.key");
  CHECK(write_file(key, 32, 0644) == 0, "a key with mode 0644");
  refused(key, "mode 0644", "mode 0644");
  struct stat sb;
  CHECK(stat(key, &sb) == 0 && (sb.st_mode & 07777) == 0644 && sb.st_size == 32,
        "the refused key was changed");
  at(key, "link.key");
  CHECK(symlink(good, key) == 0, "symlink");
  refused(key, "symbolic link", "symlink");
  at(key, "short.key");
  CHECK(write_file(key, 16, 0600) == 0, "a short key");
  refused(key, "16 bytes", "16 bytes");
  at(key, "dir.key");
  CHECK(mkdir(key, 0700) == 0, "mkdir");
  refused(key, "not a regular file", "a directory");
  /* A good key in a folder others can write: they could delete or replace it. */
  char folder[PATH_LEN];
  at(folder, "open-folder");
  at(key, "open-folder/key");
  CHECK(mkdir(folder, 0700) == 0 && chmod(folder, 0777) == 0 && write_file(key, 32, 0600) == 0,
        "a key in a folder of mode 0777");
  refused(key, "folder", "a folder of mode 0777");
  /* $FATUNE_KEY is a path, never the key: hex digits name no file, and none is made. */
  char cwd[PATH_LEN];
  static const char hex[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
    refused(hex, "absolute path", "key bytes in $FATUNE_KEY");
    CHECK(!exists(hex), "a file named by $FATUNE_KEY's hex was made in the working directory");
    CHECK(chdir(cwd) == 0, "chdir back");
  } else {
    CHECK(0, "chdir %s", dir);
  }
  if (geteuid() == 0) {
    at(folder, "their-folder");
    at(key, "their-folder/key");
    CHECK(mkdir(folder, 0755) == 0 && write_file(key, 32, 0600) == 0 && chown(folder, 1, 1) == 0,
          "a key in another user's folder");
    refused(key, "uid 1", "another user's folder");
    at(key, "theirs.key");
    CHECK(write_file(key, 32, 0600) == 0 && chown(key, 1, 1) == 0, "another user's key");
    refused(key, "uid 1", "another user's");
  } else {
    printf("another user's key: not tried (needs root to give a file away)\n");
  }
}

/* How many rows of the binaries table verify under the current key. */
static int trusted(const char *path, int *rows) {
  sqlite3 *s;
  sqlite3_stmt *st = NULL;
  db *d;
  char err[256];
  int n = 0;
  *rows = 0;
  if (db_open(path, 0, &d, err, sizeof err) != 0) return -1;
  if (sqlite3_open(path, &s) == SQLITE_OK &&
      sqlite3_prepare_v2(s, "SELECT source_hash, target, compiler_version, options FROM binaries",
                         -1, &st, NULL) == SQLITE_OK)
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *f[4];
      for (int i = 0; i < 4; i++) f[i] = (const char *)sqlite3_column_text(st, i);
      db_binary_key k = {f[0], f[1], f[2], f[3]};
      db_binary got;
      int found = 0;
      if (db_binary_get(d, &k, &got, &found, err, sizeof err) == 0 && found) {
        n++;
        db_binary_free(&got);
      }
      ++*rows;
    }
  sqlite3_finalize(st);
  sqlite3_close(s);
  db_close(d);
  return n;
}

static void test_other_key(void) {
  char path[PATH_LEN], a[PATH_LEN], b[PATH_LEN];
  at(path, "two-keys.db");
  at(a, "a.key");
  at(b, "b.key");
  fatune_problem p2 = small;
  p2.causal = 0;
  int rows;
  setenv("FATUNE_KEY", a, 1);
  run_right(path, &small, "under key A");
  run_right(path, &p2, "under key A");
  CHECK(trusted(path, &rows) == 2 && rows == 2, "under A, its binaries verify (of %d)", rows);
  setenv("FATUNE_KEY", b, 1);
  CHECK(trusted(path, &rows) == 0 && rows == 2, "under B, A's binaries do not verify");
  run_right(path, &small, "under key B");
  run_right(path, &p2, "under key B");
  CHECK(trusted(path, &rows) == 2 && rows == 2, "under B, compiled again and stored");
  setenv("FATUNE_KEY", a, 1);
  CHECK(trusted(path, &rows) == 0 && rows == 2, "under A, B's binaries do not verify");
  printf("another key: every stored binary compiled again\n");
}

/* ---- The MAC's fields; the migration ---- */

static void test_fields_prefixed(void) {
  char path[PATH_LEN], key[PATH_LEN], err[512];
  at(path, "fields.db");
  at(key, "a.key");
  setenv("FATUNE_KEY", key, 1);
  db *d;
  if (db_open(path, DB_CREATE, &d, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return;
  }
  unsigned char blob[100];
  memset(blob, 0x5a, sizeof blob);
  db_binary_key k = {"ab", "c", "cc 1", "-O2"}, moved = {"a", "bc", "cc 1", "-O2"};
  db_binary bin = {blob, sizeof blob, 0, 0, 0, 1.0, 0}, got;
  int found = 1;
  CHECK(db_binary_put(d, &k, &bin, err, sizeof err) == 0, "put: %s", err);
  CHECK(raw_exec(path, "UPDATE binaries SET source_hash = 'a', target = 'bc'") == 0, "move");
  CHECK(db_binary_get(d, &moved, &got, &found, err, sizeof err) == 0 && !found && got.untrusted,
        "a byte moved between fields kept the entry valid");
  db_close(d);
}

/* Each field the MAC covers, changed alone in the row (as an edit by hand
** would), leaves the entry untrusted under the row's new key. */
static void test_each_field(void) {
  static const struct { const char *set; db_binary_key k; } edits[] = {
    {"source_hash = 'ab2'", {"ab2", "c", "cc 1", "-O2"}},
    {"target = 'sm_90'", {"ab", "sm_90", "cc 1", "-O2"}},
    {"compiler_version = 'cc 2'", {"ab", "c", "cc 2", "-O2"}},
    {"options = '-O3'", {"ab", "c", "cc 1", "-O3"}},
    {"blob = x'5a5a5b'", {"ab", "c", "cc 1", "-O2"}},
    {"blob = substr(blob, 1, 99)", {"ab", "c", "cc 1", "-O2"}},
  };
  char path[PATH_LEN], key[PATH_LEN], err[512], sql[128];
  at(key, "a.key");
  setenv("FATUNE_KEY", key, 1);
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "field%zu.db", i);
    at(path, name);
    db *d;
    if (db_open(path, DB_CREATE, &d, err, sizeof err) != 0) {
      CHECK(0, "%s", err);
      return;
    }
    unsigned char blob[100];
    memset(blob, 0x5a, sizeof blob);
    db_binary_key k = {"ab", "c", "cc 1", "-O2"};
    db_binary bin = {blob, sizeof blob, 0, 0, 0, 1.0, 0}, got;
    int found = 0;
    CHECK(db_binary_put(d, &k, &bin, err, sizeof err) == 0, "put: %s", err);
    CHECK(db_binary_get(d, &k, &got, &found, err, sizeof err) == 0 && found,
          "the entry as stored does not verify: %s", err);
    if (found) db_binary_free(&got);
    snprintf(sql, sizeof sql, "UPDATE binaries SET %s", edits[i].set);
    CHECK(raw_exec(path, sql) == 0, "%s", sql);
    found = 1;
    CHECK(db_binary_get(d, &edits[i].k, &got, &found, err, sizeof err) == 0 && !found &&
          got.untrusted, "SET %s kept the entry valid", edits[i].set);
    if (found) db_binary_free(&got);
    db_close(d);
  }
}

static void test_migrated(void) {
  char path[PATH_LEN], err[512];
  at(path, "v1.db");
  db *d;
  CHECK(db_open(path, DB_CREATE, &d, err, sizeof err) == 0, "%s", err);
  db_close(d);
  /* The compile cache as schema 1 had it, with an entry, none of the later
  ** tables (schema 4's sass, schema 5's baselines) and variants without
  ** schema 6's op (a best view stands in for schema 1's, which the
  ** migrations replace). */
  CHECK(raw_exec(path, "DROP VIEW best; ALTER TABLE variants DROP COLUMN op; "
                       "ALTER TABLE variants DROP COLUMN mod; ALTER TABLE variants DROP COLUMN mod_label; "
                       "CREATE VIEW best AS SELECT * FROM trials; "
                       "DROP TABLE baselines; DROP TABLE sass; DROP TABLE binaries; CREATE TABLE binaries (id INTEGER PRIMARY KEY, "
                       "source_hash TEXT NOT NULL, target TEXT NOT NULL, compiler_version TEXT "
                       "NOT NULL, options TEXT NOT NULL, blob BLOB NOT NULL, checksum TEXT NOT "
                       "NULL, registers INTEGER, spill_bytes INTEGER, smem_bytes INTEGER, "
                       "compile_ms REAL, created TEXT NOT NULL, UNIQUE (source_hash, target, "
                       "compiler_version, options)); INSERT INTO binaries VALUES (1, 's', "
                       "'host', 'cc', '', x'00', '0', 0, 0, 0, 0, 'then'); "
                       "PRAGMA user_version = 1") == 0, "making a schema 1 file");
  CHECK(db_open(path, 0, &d, err, sizeof err) == 0, "%s", err);
  db_close(d);
  CHECK(raw_int(path, "PRAGMA user_version") == DB_SCHEMA_VERSION &&
        raw_int(path, "SELECT count(*) FROM binaries") == 0 &&
        raw_int(path, "SELECT count(*) FROM pragma_table_info('binaries') WHERE name = 'mac'") == 1,
        "schema 1 migrated: version %lld, %lld binaries", raw_int(path, "PRAGMA user_version"),
        raw_int(path, "SELECT count(*) FROM binaries"));
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  char key[PATH_LEN];
  at(key, "a.key");
  setenv("FATUNE_KEY", key, 1);
  at(marker, "marker");
  setenv("FATUNE_TEST_MARKER", marker, 1);
  test_forged_in_place();
  test_forged_by_merge();
  test_key_made();
  test_key_refused();
  test_other_key();
  test_fields_prefixed();
  test_each_field();
  test_migrated();
  char cmd[PATH_LEN + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_trust");
}
