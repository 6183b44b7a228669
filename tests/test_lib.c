/*
** test_lib.c
** libfatune on the emulator:
**  - bad arguments and a database that is not fatune's give a status and
**    a message; the database file is left as it was;
**  - with nothing tuned, the default variant runs and its result matches
**    the float64 reference (fp32 and fp64, causal, seq_q != seq_k);
**  - a trial recorded for another seq makes it the nearest choice; one for
**    the very key makes it exact;
**  - a read-only database (a file of mode 0444, or in a folder of mode
**    0555) is read, and never written: the compile cache is not used;
**  - a binary edited by hand in the compile cache is never run: the kernel
**    is compiled again and the result is right;
**  - four threads at once, on different problems, all right;
**  - fatune_choose from eight threads while the table of kernels is
**    emptied again and again: every call names its own key's variant;
**  - the per-call overhead of choosing a kernel once it is in memory.
*/
#define _GNU_SOURCE   /* RTLD_NEXT */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "check.h"
#include "db.h"
#include "fatune.h"
#include "gen.h"
#include "reference.h"

static char dir[] = "/tmp/fatune-test-lib-XXXXXX";
static char dbpath[128];

static unsigned long long rng = 42;
static double uniform(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 - 0.5;
}

/* Run p through the library; the max error against the reference. */
static double run(fatune_ctx *c, const fatune_problem *p, fatune_status *st) {
  const int dv = p->dim_v ? p->dim_v : p->dim;
  const size_t nq = (size_t)p->batch * p->heads * p->seq_q * p->dim;
  const size_t nk = (size_t)p->batch * p->heads * p->seq_k * p->dim;
  const size_t nv = (size_t)p->batch * p->heads * p->seq_k * dv;
  const size_t no = (size_t)p->batch * p->heads * p->seq_q * dv;
  const size_t es = p->dtype == FATUNE_FP64 ? 8 : 4;
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nv * 8), *od = malloc(no * 8);
  unsigned char *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nv * es), *o = malloc(no * es);
  double worst = INFINITY;
  if (!qd || !kd || !vd || !od || !q || !k || !v || !o) goto done;
  double *const d[3] = {qd, kd, vd};
  unsigned char *const t[3] = {q, k, v};
  const size_t n[3] = {nq, nk, nv};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < n[a]; i++) {
      double x = uniform();
      if (es == 4) ((float *)t[a])[i] = (float)x, d[a][i] = (float)x;
      else ((double *)t[a])[i] = x, d[a][i] = x;
    }
  memset(o, 0xFF, no * es);
  *st = fatune_attention_forward(c, p, q, k, v, o, NULL, NULL);
  if (*st != FATUNE_OK) goto done;
  fa_problem fp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                   .dim = p->dim, .dtype = (fa_dtype)p->dtype, .causal = p->causal,
                   .dim_v = p->dim_v};
  fa_layout lq = fa_layout_contiguous(&fp, p->seq_q), lk = fa_layout_contiguous(&fp, p->seq_k);
  fa_layout lv = fa_layout_contiguous_v(&fp, p->seq_k), lo = fa_layout_contiguous_v(&fp, p->seq_q);
  if (ref_attention(&fp, qd, lq, kd, lk, vd, lv, od, lo, NULL) != 0) goto done;
  worst = 0;
  for (size_t i = 0; i < no; i++) {
    double x = es == 4 ? ((float *)o)[i] : ((double *)o)[i];
    double e = fabs(x - od[i]);
    if (!(e <= worst)) worst = e;  /* NaN sticks */
  }
done:
  free(qd), free(kd), free(vd), free(od), free(q), free(k), free(v), free(o);
  return worst;
}

static void test_errors(void) {
  fatune_ctx *c;
  fatune_options bad = {.db_path = dbpath, .backend = "gpu"};
  CHECK(fatune_open(&bad, &c) == FATUNE_EINVAL && strstr(fatune_errmsg(), "gpu"),
        "backend 'gpu': '%s'", fatune_errmsg());
  /* Each failure keeps its own status: no driver is not a bad argument. */
  fatune_options cuda = {.db_path = dbpath, .backend = "cuda"};
  fatune_status st = fatune_open(&cuda, &c);
  if (st == FATUNE_OK) fatune_close(c);
  else
    CHECK(st == FATUNE_ENODEV && strstr(fatune_errmsg(), "cuda"), "backend cuda: %d '%s'",
          (int)st, fatune_errmsg());
  char junk[160];
  snprintf(junk, sizeof junk, "%s/junk.db", dir);
  FILE *f = fopen(junk, "wb");
  if (f) fputs("this is not a database, and it must stay as it is\n", f), fclose(f);
  fatune_options j = {.db_path = junk, .backend = "emu"};
  CHECK(fatune_open(&j, &c) == FATUNE_EDB && fatune_errmsg()[0], "garbage db: '%s'",
        fatune_errmsg());
  char back[100] = "";
  f = fopen(junk, "rb");
  if (f) {
    if (!fgets(back, sizeof back, f)) back[0] = '\0';
    fclose(f);
  }
  CHECK(!strcmp(back, "this is not a database, and it must stay as it is\n"), "garbage db changed");
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  CHECK(fatune_open(&ok, &c) == FATUNE_OK, "%s", fatune_errmsg());
  if (!c) return;
  fatune_problem p = {.batch = 1, .heads = 1, .seq_q = 0, .seq_k = 8, .dim = 8};
  float x[64];
  CHECK(fatune_attention_forward(c, &p, x, x, x, x, NULL, NULL) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "seq_q 0"), "seq_q 0: '%s'", fatune_errmsg());
  p.seq_q = 8, p.dim = 600;
  CHECK(fatune_attention_forward(c, &p, x, x, x, x, NULL, NULL) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "600"), "dim 600: '%s'", fatune_errmsg());
  p.dim = 8;
  CHECK(fatune_attention_forward(c, &p, x, NULL, x, x, NULL, NULL) == FATUNE_EINVAL,
        "NULL k accepted");
  CHECK(fatune_attention_forward(NULL, &p, x, x, x, x, NULL, NULL) == FATUNE_EINVAL,
        "NULL context accepted");
  fatune_close(c);
}

/* A contiguous (batch, heads, seq, dim) fp32 tensor over data. */
static fatune_tensor tensor_of(float *data, int b, int h, int n, int d) {
  fatune_tensor t = {.data = data, .dtype = FATUNE_FP32, .shape = {b, h, n, d}};
  t.stride[3] = 1, t.stride[2] = d, t.stride[1] = (long long)n * d, t.stride[0] = t.stride[1] * h;
  return t;
}

/* The error budget of a call: the trial tr (the problem 1 x 2, 64 x 70,
** d16 causal, fp32, recorded without the suite) is passed over until it
** is recorded with it; then a budget it meets runs it, one it does not
** gives FATUNE_ENOTUNED (never the default), as does determinism when
** the trial is not deterministic; a budget out of range is refused. */
static void test_budget(const fatune_options *opts, const char *dbpath, db_trial *tr,
                        const char *tuned) {
  static float q[2 * 64 * 16], kv[2 * 70 * 16], o[2 * 64 * 16];
  fatune_attention_args x = {.q = tensor_of(q, 1, 2, 64, 16), .k = tensor_of(kv, 1, 2, 70, 16),
                             .v = tensor_of(kv, 1, 2, 70, 16), .o = tensor_of(o, 1, 2, 64, 16),
                             .causal = 1, .max_rel_err = 1e-5};
  fatune_ctx *c;
  char name[160], err[256];
  if (fatune_open(opts, &c) != FATUNE_OK) return;
  fatune_status st = fatune_attention_plan(c, &x, name, sizeof name);
  CHECK(st == FATUNE_ENOTUNED && strstr(fatune_errmsg(), "meets an error budget of 1e-05"),
        "a budget without the suite recorded: status %d, '%s'", (int)st, fatune_errmsg());
  fatune_close(c);
  db *d;
  if (db_open(dbpath, 0, &d, err, sizeof err) != 0) return;
  tr->suite_cases = 8, tr->suite_err = 3e-6, tr->suite_failed = "", tr->deterministic = DB_DET_NO;
  CHECK(db_trial_put(d, tr, err, sizeof err) == 0, "%s", err);
  db_close(d);
  if (fatune_open(opts, &c) != FATUNE_OK) return;
  st = fatune_attention_plan(c, &x, name, sizeof name);
  CHECK(st == FATUNE_OK && !strcmp(name, tuned), "budget 1e-5, suite 3e-6: status %d, %s",
        (int)st, name);
  x.max_rel_err = 1e-6;
  st = fatune_attention_plan(c, &x, name, sizeof name);
  CHECK(st == FATUNE_ENOTUNED, "budget 1e-6, suite 3e-6: status %d", (int)st);
  x.max_rel_err = 1e-5, x.deterministic = 1;
  st = fatune_attention_plan(c, &x, name, sizeof name);
  CHECK(st == FATUNE_ENOTUNED && strstr(fatune_errmsg(), "with determinism"),
        "determinism of a trial that has none: status %d, '%s'", (int)st, fatune_errmsg());
  x.max_rel_err = 2, x.deterministic = 0;
  st = fatune_attention_plan(c, &x, name, sizeof name);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "max_rel_err 2"), "budget 2: %d, '%s'",
        (int)st, fatune_errmsg());
  fatune_close(c);
}

static void test_default_and_tuned(void) {
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) {
    CHECK(0, "%s", fatune_errmsg());
    return;
  }
  fatune_problem p = {.batch = 2, .heads = 2, .seq_q = 50, .seq_k = 70, .dim = 16,
                      .dtype = FATUNE_FP32, .causal = 1};
  char name[160];
  fatune_choice ch;
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_DEFAULT,
        "nothing tuned: choice %d, %s", (int)ch, fatune_errmsg());
  fatune_status st;
  double e = run(c, &p, &st);
  CHECK(st == FATUNE_OK && e < 1e-5, "default fp32: status %d, error %.3g (%s)", (int)st, e,
        fatune_errmsg());
  p.dtype = FATUNE_FP64;
  e = run(c, &p, &st);
  CHECK(st == FATUNE_OK && e < 1e-12, "default fp64: status %d, error %.3g (%s)", (int)st, e,
        fatune_errmsg());
  /* Kept open across the tune below: its choice is cached until forgotten. */
  p.dtype = FATUNE_FP32, p.seq_q = 64;
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_DEFAULT,
        "seq 64 before the tune: choice %d, %s", (int)ch, fatune_errmsg());
  CHECK(fatune_forget(NULL) == FATUNE_EINVAL, "fatune_forget(NULL) accepted");

  /* Record a trial, as the tuner would, for seq 64 with an unusual config. */
  db *d;
  char err[256];
  long long dev, var;
  gen_state *g;
  gen_target t;
  gen_kernel k;
  fa_problem fp = {.batch = 1, .heads = 2, .seq_q = 64, .seq_k = 70, .dim = 16,
                   .dtype = FA_FP32, .causal = 1};
  if (db_open(dbpath, 0, &d, err, sizeof err) != 0 || gen_open(&g, err, sizeof err) != 0 ||
      gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0 ||
      gen_render_config(g, "block_m=16,block_n=8,warps=2,norm=eager", &fp, &t, &k) != 0) {
    CHECK(0, "setting up a trial: %s", err);
    return;
  }
  db_device dd = {.name = "CPU emulator", .uuid = "emu", .backend = "emu"};
  char config[1024];
  CHECK(gen_config_json(&k.cfg, config, sizeof config) == 0, "config as JSON");
  db_variant dv = {"simt", k.template_version, k.name, k.hash, config, k.source_hash, "fwd",
                   NULL, NULL};
  db_trial tr = {.status = "ok",
                 .problem = {.dtype = "fp32", .dim = 16, .seq_q = 64, .seq_k = 70, .batch = 1,
                             .heads = 2, .causal = 1},
                 .max_abs_err = 1e-7,
                 .rel_err = 1e-7, .lse_err = 1e-7, .median_us = NAN, .min_us = NAN,
                 .p20_us = NAN, .p80_us = NAN, .tflops = NAN, .gbps = NAN,
                 .counters = "{\"global_bytes_read\": 100, \"global_bytes_written\": 10}"};
  CHECK(db_device_id(d, &dd, &dev, err, sizeof err) == 0 &&
        db_variant_id(d, &dv, &var, err, sizeof err) == 0, "%s", err);
  tr.variant_id = var, tr.device_id = dev;
  CHECK(db_trial_put(d, &tr, err, sizeof err) == 0, "%s", err);
  db_close(d);
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_DEFAULT,
        "seq 64 cached: choice %d", (int)ch);
  CHECK(fatune_forget(c) == FATUNE_OK, "%s", fatune_errmsg());
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_EXACT &&
        !strcmp(name, k.name), "seq 64 after fatune_forget: choice %d, %s", (int)ch, name);
  fatune_close(c);
  if (fatune_open(&ok, &c) != FATUNE_OK) return;
  p.dtype = FATUNE_FP32, p.seq_q = 50;
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_NEAREST &&
        !strcmp(name, k.name), "seq 50 with seq 64 tuned: choice %d, %s", (int)ch, name);
  e = run(c, &p, &st);
  CHECK(st == FATUNE_OK && e < 1e-5, "nearest: error %.3g", e);
  p.seq_q = 64;
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_EXACT &&
        !strcmp(name, k.name), "seq 64 tuned: choice %d, %s", (int)ch, name);
  fatune_close(c);
  test_budget(&ok, dbpath, &tr, k.name);
  gen_kernel_free(&k);
  gen_close(g);
}

/* Overwrite every cached binary with zeros, as an edit by hand would. */
/* The whole of a file, malloc'd; NULL when it cannot be read. */
static unsigned char *slurp(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (b = malloc((size_t)*size + 1)) && fread(b, 1, (size_t)*size, f) != (size_t)*size) {
    free(b);
    b = NULL;
  }
  if (f) fclose(f);
  return b;
}

static int files_in(const char *folder) {
  DIR *d = opendir(folder);
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A copy of the test database made read-only, as a file of mode 0444 and
** as a file in a folder of mode 0555 (the modes themselves say so, which
** root, who ignores them, is held to as well): the library reads it (the
** tuned choice is exact), runs a kernel the compile cache does not hold,
** and writes nothing: the file's bytes are the same, nothing is beside it. */
static void read_only_case(const char *what, mode_t file_mode, mode_t folder_mode) {
  char folder[160], path[200];
  snprintf(folder, sizeof folder, "%s/%s", dir, what);
  snprintf(path, sizeof path, "%s/lib.db", folder);
  long n = 0, m = -1;
  unsigned char *orig = slurp(dbpath, &n), *after = NULL;
  FILE *f = mkdir(folder, 0700) == 0 ? fopen(path, "wb") : NULL;
  int ok = orig && f && fwrite(orig, 1, (size_t)n, f) == (size_t)n;
  if (f && fclose(f) != 0) ok = 0;
  ok = ok && chmod(path, file_mode) == 0 && chmod(folder, folder_mode) == 0;
  CHECK(ok, "%s: making the copy", what);
  fatune_options opts = {.db_path = path, .backend = "emu"};
  fatune_ctx *c = NULL;
  fatune_status st = ok ? fatune_open(&opts, &c) : FATUNE_EINTERNAL;
  CHECK(st == FATUNE_OK, "%s: fatune_open: status %d, '%s'", what, (int)st, fatune_errmsg());
  if (st == FATUNE_OK) {
    fatune_problem tuned = {.batch = 2, .heads = 2, .seq_q = 64, .seq_k = 70, .dim = 16,
                            .dtype = FATUNE_FP32, .causal = 1};
    fatune_problem fresh = {.batch = 1, .heads = 2, .seq_q = 30, .seq_k = 20, .dim = 40,
                            .dtype = FATUNE_FP32};
    fatune_choice ch = FATUNE_DEFAULT;
    char name[160];
    CHECK(fatune_choose(c, &tuned, name, sizeof name, &ch) == FATUNE_OK && ch == FATUNE_EXACT,
          "%s: the tuned key: choice %d, '%s'", what, (int)ch, fatune_errmsg());
    const double e = run(c, &fresh, &st);
    CHECK(st == FATUNE_OK && e < 1e-5, "%s: a kernel not cached: status %d, error %.3g (%s)",
          what, (int)st, e, fatune_errmsg());
    fatune_close(c);
  }
  after = slurp(path, &m);
  CHECK(after && m == n && !memcmp(orig, after, (size_t)n), "%s: the file was written (%ld "
        "bytes, %ld before)", what, m, n);
  CHECK(files_in(folder) == 1, "%s: %d files beside it", what, files_in(folder) - 1);
  CHECK(chmod(folder, 0700) == 0, "chmod %s", folder);
  free(orig), free(after);
}

static void test_read_only(void) {
  read_only_case("file-0444", 0444, 0700);
  read_only_case("folder-0555", 0644, 0555);
}

static int tamper(void) {
  sqlite3 *s;
  if (sqlite3_open(dbpath, &s) != SQLITE_OK) return -1;
  int rc = sqlite3_exec(s, "UPDATE binaries SET blob = zeroblob(length(blob))", NULL, NULL, NULL);
  int changed = sqlite3_changes(s);
  sqlite3_close(s);
  return rc == SQLITE_OK ? changed : -1;
}

static void test_tampered_binary(void) {
  int n = tamper();
  CHECK(n > 0, "no binary to tamper with (%d)", n);
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) return;
  fatune_problem p = {.batch = 2, .heads = 2, .seq_q = 50, .seq_k = 70, .dim = 16,
                      .dtype = FATUNE_FP64, .causal = 1};
  fatune_status st;
  double e = run(c, &p, &st);
  CHECK(st == FATUNE_OK && e < 1e-12, "after tampering: status %d, error %.3g (%s)", (int)st, e,
        fatune_errmsg());
  fatune_close(c);
}

/* Records config, JSON text stored as it is (even what db_variant_id would
** refuse), as an ok trial for key dp on the emulator, ranked before every
** row recorded earlier (fewer global bytes). */
static int put_best(const char *config, const db_problem *dp) {
  static int serial;
  char err[256], name[64], hash[32], counters[128];
  db *d;
  long long dev, var;
  serial++;
  snprintf(name, sizeof name, "stored-%d", serial);
  snprintf(hash, sizeof hash, "%012d", serial);
  snprintf(counters, sizeof counters,
           "{\"global_bytes_read\": %d, \"global_bytes_written\": 0}", 1000000 - serial);
  db_device dd = {.name = "CPU emulator", .uuid = "emu", .backend = "emu"};
  db_variant dv = {"simt", "simt/1+test", name, hash, "{}", "0123456789abcdef", "fwd", NULL, NULL};
  db_trial tr = {.status = "ok", .problem = *dp, .max_abs_err = 1e-7, .rel_err = 1e-7,
                 .lse_err = 1e-7, .median_us = NAN, .min_us = NAN, .p20_us = NAN,
                 .p80_us = NAN, .tflops = NAN, .gbps = NAN, .counters = counters};
  if (db_open(dbpath, 0, &d, err, sizeof err) != 0) return -1;
  int rc = db_device_id(d, &dd, &dev, err, sizeof err) || db_variant_id(d, &dv, &var, err, sizeof err);
  tr.variant_id = var, tr.device_id = dev;
  if (!rc) rc = db_trial_put(d, &tr, err, sizeof err);
  db_close(d);
  if (rc) return -1;
  sqlite3 *h;
  sqlite3_stmt *st = NULL;
  if (sqlite3_open(dbpath, &h) != SQLITE_OK) return -1;
  rc = sqlite3_exec(h, "PRAGMA ignore_check_constraints = ON", NULL, NULL, NULL) != SQLITE_OK ||
       sqlite3_prepare_v2(h, "UPDATE variants SET config = ?1 WHERE id = ?2", -1, &st, NULL) !=
           SQLITE_OK ||
       sqlite3_bind_text(st, 1, config, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
       sqlite3_bind_int64(st, 2, var) != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE ||
       sqlite3_changes(h) != 1;
  sqlite3_finalize(st);
  sqlite3_close(h);
  return rc ? -1 : 0;
}

/* A config for problem q (its dim, dtype, causal) as JSON. */
static int config_for(gen_state *g, const gen_target *t, const fa_problem *q, char *json, size_t n) {
  gen_kernel k;
  if (gen_render_config(g, "", q, t, &k) != 0) return -1;
  int rc = gen_config_json(&k.cfg, json, n);
  gen_kernel_free(&k);
  return rc;
}

/* What the library runs for a stored best row that does not fit, or is
** no config at all: the default, and the right result. */
static void expect_default(const char *what, const fatune_problem *p, const char *default_name) {
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) {
    CHECK(0, "%s: %s", what, fatune_errmsg());
    return;
  }
  char name[160] = "";
  fatune_choice ch = FATUNE_EXACT;
  fatune_status st = fatune_choose(c, p, name, sizeof name, &ch);
  CHECK(st == FATUNE_OK && ch == FATUNE_DEFAULT && !strcmp(name, default_name),
        "%s: status %d, choice %d, %s (%s)", what, (int)st, (int)ch, name, fatune_errmsg());
  double e = run(c, p, &st);
  CHECK(st == FATUNE_OK && e < 1e-5, "%s: status %d, error %.3g (%s)", what, (int)st, e,
        fatune_errmsg());
  fatune_close(c);
}

/* Stored best configs for another problem, and stored configs that are no
** flat object of strings and integers: never run, never read as garbage. */
static void test_stored_configs(void) {
  gen_state *g;
  gen_target t;
  char err[256];
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0) {
    CHECK(0, "generator: %s", err);
    return;
  }
  fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 40, .seq_k = 40, .dim = 32,
                      .dtype = FATUNE_FP32, .causal = 1};
  const fa_problem fp = {.batch = 1, .heads = 2, .seq_q = 40, .seq_k = 40, .dim = 32,
                         .dtype = FA_FP32, .causal = 1};
  const db_problem key = {.dtype = "fp32", .dim = 32, .seq_q = 40, .seq_k = 40, .batch = 1,
                          .heads = 2, .causal = 1};
  gen_kernel def;
  if (gen_render_config(g, "", &fp, &t, &def) != 0) {
    CHECK(0, "default: %s", gen_errmsg(g));
    gen_close(g);
    return;
  }
  /* Kernels for other problems: dim 16 and 256, no mask, fp64, the tc family. */
  struct { const char *what; fa_problem q; const char *needle; } other[] = {
    {"dim 16", {.dim = 16, .dtype = FA_FP32, .causal = 1}, "dim 16"},
    {"causal 0", {.dim = 32, .dtype = FA_FP32, .causal = 0}, "dim 32 fp32, but"},
    {"fp64", {.dim = 32, .dtype = FA_FP64, .causal = 1}, "fp64"},
    {"family tc (fp16)", {.dim = 32, .dtype = FA_FP16, .causal = 1}, "fp16"},
    {"dim 256", {.dim = 256, .dtype = FA_FP32, .causal = 1}, "dim 256"},
  };
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
    char json[1024];
    if (config_for(g, &t, &other[i].q, json, sizeof json) != 0 || put_best(json, &key) != 0) {
      CHECK(0, "%s: cannot record it", other[i].what);
      continue;
    }
    /* Asked to, the library says why it ignores the row: on stderr, once. */
    char log[200];
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0) CHECK(0, "redirecting stderr");
    setenv("FATUNE_VERBOSE", "1", 1);
    expect_default(other[i].what, &p, def.name);
    unsetenv("FATUNE_VERBOSE");
    fflush(stderr);
    if (saved >= 0) dup2(saved, 2), close(saved);
    if (fd >= 0) close(fd);
    char said[1024] = "";
    FILE *f = fopen(log, "r");
    if (f) {
      size_t got = fread(said, 1, sizeof said - 1, f);
      said[got] = '\0';
      fclose(f);
    }
    CHECK(strstr(said, "ignoring the stored variant") && strstr(said, other[i].needle),
          "%s: stderr says '%s'", other[i].what, said);
  }
  /* The tc family asked for by name only, for an fp32 problem. */
  static const char *const junk[] = {
    "{\"family\": \"tc\", \"dim\": 32, \"causal\": 1}", "{}", "5", "[]", "\"\"", "",
    "\"block_m=16\"", "{\"dim\": {\"x\": 1}}", "{\"dim\": 32.5}", "{\"norm\": \"eager,dim=16\"}",
    "{\"dim\": \"32\", \"dim\": \"16\"}", "{\"\": \"\"}", "{\"dim\": null}", "{\"dim\": true}",
  };
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "config '%s'", junk[i]);
    if (put_best(junk[i], &key) != 0) {
      CHECK(0, "%s: cannot record it", what);
      continue;
    }
    expect_default(what, &p, def.name);
  }
  /* A fitting row still runs. */
  char json[1024];
  fa_problem q = fp;
  if (config_for(g, &t, &q, json, sizeof json) == 0 && put_best(json, &key) == 0) {
    fatune_ctx *c;
    fatune_options ok = {.db_path = dbpath, .backend = "emu"};
    if (fatune_open(&ok, &c) == FATUNE_OK) {
      fatune_choice ch = FATUNE_DEFAULT;
      fatune_status st = fatune_choose(c, &p, NULL, 0, &ch);
      CHECK(st == FATUNE_OK && ch == FATUNE_EXACT, "a fitting row: status %d, choice %d", (int)st,
            (int)ch);
      fatune_close(c);
    }
  } else {
    CHECK(0, "a fitting row: cannot record it");
  }
  gen_kernel_free(&def);
  gen_close(g);
}

/* fp16 tensors at given byte offsets from 16-byte aligned buffers: the
** status, and the max error against the reference when it ran. */
static fatune_status run_fp16_at(fatune_ctx *c, const fatune_problem *p, const size_t off[5],
                                 double *worst) {
  const size_t nq = (size_t)p->batch * p->heads * p->seq_q * p->dim;
  const size_t nk = (size_t)p->batch * p->heads * p->seq_k * p->dim;
  const size_t rows = (size_t)p->batch * p->heads * p->seq_q;
  const size_t n[5] = {nq, nk, nk, nq, rows}, es[5] = {2, 2, 2, 2, 4};
  unsigned char *buf[5] = {NULL};
  double *d[4] = {NULL};
  fatune_status st = FATUNE_ENOMEM;
  *worst = INFINITY;
  for (int i = 0; i < 5; i++)
    if (!(buf[i] = aligned_alloc(16, (n[i] * es[i] + 31) / 16 * 16))) goto done;
  for (int i = 0; i < 4; i++)
    if (!(d[i] = malloc(n[i] * sizeof *d[i]))) goto done;
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < n[a]; i++) d[a][i] = fa_elem_put(buf[a] + off[a], FA_FP16, i, uniform());
  st = fatune_attention_forward(c, p, buf[0] + off[0], buf[1] + off[1], buf[2] + off[2],
                                buf[3] + off[3], buf[4] + off[4], NULL);
  if (st != FATUNE_OK) goto done;
  fa_problem fp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
                   .dim = p->dim, .dtype = FA_FP16, .causal = p->causal};
  fa_layout lq = fa_layout_contiguous(&fp, p->seq_q), lk = fa_layout_contiguous(&fp, p->seq_k);
  if (ref_attention(&fp, d[0], lq, d[1], lk, d[2], lk, d[3], lq, NULL) != 0) goto done;
  *worst = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = fabs(fa_elem_get(buf[3] + off[3], FA_FP16, i) - d[3][i]);
    if (!(e <= *worst)) *worst = e;
  }
done:
  for (int i = 0; i < 5; i++) free(buf[i]);
  for (int i = 0; i < 4; i++) free(d[i]);
  return st;
}

/* The tensor-core kernel for dim 64 fp16 moves 16 bytes at a time: a k two
** bytes off is refused by name, before any launch; aligned pointers run. */
static void test_alignment(void) {
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) {
    CHECK(0, "%s", fatune_errmsg());
    return;
  }
  fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 40, .seq_k = 24, .dim = 64,
                      .dtype = FATUNE_FP16, .causal = 1};
  const size_t aligned[5] = {0, 0, 0, 0, 0}, k2[5] = {0, 2, 0, 0, 0}, o8[5] = {0, 0, 0, 8, 0},
               lse2[5] = {0, 0, 0, 0, 2};
  double e;
  fatune_status st = run_fp16_at(c, &p, k2, &e);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "k is not 16-byte aligned (0x") &&
        strstr(fatune_errmsg(), "dim 64 fp16"), "k + 2 bytes: status %d, '%s'", (int)st,
        fatune_errmsg());
  st = run_fp16_at(c, &p, o8, &e);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "o is not 16-byte aligned"),
        "o + 8 bytes: status %d, '%s'", (int)st, fatune_errmsg());
  st = run_fp16_at(c, &p, lse2, &e);
  CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "lse is not 4-byte aligned"),
        "lse + 2 bytes: status %d, '%s'", (int)st, fatune_errmsg());
  st = run_fp16_at(c, &p, aligned, &e);
  CHECK(st == FATUNE_OK && e < 1e-2, "aligned: status %d, error %.3g (%s)", (int)st, e,
        fatune_errmsg());
  /* dim 12 is not a multiple of 8: element by element, 2-byte alignment is enough. */
  p.dim = 12;
  st = run_fp16_at(c, &p, k2, &e);
  CHECK(st == FATUNE_OK && e < 1e-2, "dim 12, k + 2 bytes: status %d, error %.3g (%s)", (int)st,
        e, fatune_errmsg());
  /* fp32 kernels load 4 bytes at a time. */
  fatune_problem f = {.batch = 1, .heads = 1, .seq_q = 8, .seq_k = 8, .dim = 8,
                      .dtype = FATUNE_FP32};
  float *x = aligned_alloc(16, 3 * 64 * sizeof *x);
  if (x) {   /* O past the end of the misplaced K: a K over O is refused for that */
    st = fatune_attention_forward(c, &f, x, (char *)x + 2, x, x + 128, NULL, NULL);
    CHECK(st == FATUNE_EINVAL && strstr(fatune_errmsg(), "k is not 4-byte aligned"),
          "fp32, k + 2 bytes: status %d, '%s'", (int)st, fatune_errmsg());
  }
  free(x);
  fatune_close(c);
}

typedef struct thread_arg { fatune_ctx *c; int i; double err; fatune_status st; } thread_arg;

static void *thread_main(void *a) {
  thread_arg *t = a;
  fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 20 + 10 * t->i, .seq_k = 33, .dim = 8,
                      .dtype = FATUNE_FP64, .causal = t->i & 1};
  t->err = 0;
  for (int r = 0; r < 3 && t->err < 1e-12; r++) t->err = run(t->c, &p, &t->st);
  return NULL;
}

static void test_threads(void) {
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) return;
  pthread_t tid[4];
  thread_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (thread_arg){c, i, 0, FATUNE_OK};
    CHECK(pthread_create(&tid[i], NULL, thread_main, &a[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(tid[i], NULL);
    CHECK(a[i].st == FATUNE_OK && a[i].err < 1e-12, "thread %d: status %d, error %.3g", i,
          (int)a[i].st, a[i].err);
  }
  fatune_close(c);
}

/* fatune_choose from eight threads on more keys than the context's table
** holds (256), so that it is emptied again and again while other threads
** are between building their slot and reading it: every call names the
** variant of its own key, never another's or none. To make that moment
** likely on any machine, the library's read locks taken in these threads
** wait first, one in four for 4 ms, as a preempted thread would (this
** program's pthread_rwlock_rdlock is the one the library calls). On the
** cuda backend (the fake driver in CI) only: the emulator loads each
** kernel as a shared object of its own, and a process holds fewer than
** 256 of them. */
enum { CHOOSE_THREADS = 8, CHOOSE_CALLS = 600, CHOOSE_KEYS = 300 };

static _Thread_local unsigned reader_delay;   /* a seed: these read locks wait */

int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
  static int (*real)(pthread_rwlock_t *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pthread_rwlock_rdlock");
  if (reader_delay) {
    reader_delay = reader_delay * 1103515245u + 12345u;
    struct timespec ts = {0, (reader_delay >> 16) % 4 ? 0 : 4000000L};
    while (ts.tv_nsec && nanosleep(&ts, &ts) != 0 && errno == EINTR) continue;
  }
  return real ? real(l) : EINVAL;
}

typedef struct choose_arg {
  fatune_ctx *c;
  int t, wrong, failed;
  const char (*want)[160];
} choose_arg;

static fatune_problem choose_problem(int key) {
  fatune_problem p = {.batch = 1, .heads = 1, .seq_q = 1 + key / 4, .seq_k = 8,
                      .dim = key & 1 ? 16 : 8, .dtype = FATUNE_FP32, .causal = key >> 1 & 1};
  return p;
}

static void *choose_main(void *a) {
  choose_arg *t = a;
  reader_delay = 2u * (unsigned)t->t + 1u;
  for (int i = 0; i < CHOOSE_CALLS; i++) {
    const int key = (i * 37 + t->t * 101) % CHOOSE_KEYS;
    const fatune_problem p = choose_problem(key);
    char name[160] = "";
    fatune_choice ch = FATUNE_EXACT;
    fatune_status st = fatune_choose(t->c, &p, name, sizeof name, &ch);
    if (st != FATUNE_OK) t->failed++;
    else if (strcmp(name, t->want[key & 3]) || ch != FATUNE_DEFAULT) t->wrong++;
  }
  return NULL;
}

static void test_choose_threads(void) {
  char path[160];
  snprintf(path, sizeof path, "%s/choose.db", dir);
  fatune_options cuda = {.db_path = path, .backend = "cuda"};
  fatune_ctx *c;
  fatune_status st = fatune_open(&cuda, &c);
  if (st == FATUNE_ENODEV) {
    printf("fatune_choose from threads: not tried (%s)\n", fatune_errmsg());
    return;
  }
  if (st != FATUNE_OK) {
    CHECK(0, "%s", fatune_errmsg());
    return;
  }
  /* The four variants (two dims, causal or not), named once, alone. */
  char want[4][160];
  fatune_choice ch;
  for (int k = 0; k < 4; k++) {
    const fatune_problem p = choose_problem(k);
    CHECK(fatune_choose(c, &p, want[k], sizeof want[k], &ch) == FATUNE_OK, "%s",
          fatune_errmsg());
  }
  pthread_t tid[CHOOSE_THREADS];
  choose_arg a[CHOOSE_THREADS];
  for (int i = 0; i < CHOOSE_THREADS; i++) {
    a[i] = (choose_arg){c, i, 0, 0, want};
    CHECK(pthread_create(&tid[i], NULL, choose_main, &a[i]) == 0, "pthread_create");
  }
  int wrong = 0, failed = 0;
  for (int i = 0; i < CHOOSE_THREADS; i++) {
    pthread_join(tid[i], NULL);
    wrong += a[i].wrong, failed += a[i].failed;
  }
  printf("fatune_choose, %d threads, %d calls on %d keys: %d wrong, %d failed\n",
         CHOOSE_THREADS, CHOOSE_THREADS * CHOOSE_CALLS, CHOOSE_KEYS, wrong, failed);
  CHECK(wrong == 0 && failed == 0, "%d of %d calls named another key's variant, %d failed",
        wrong, CHOOSE_THREADS * CHOOSE_CALLS, failed);
  fatune_close(c);
}

static void test_overhead(void) {
  fatune_ctx *c;
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&ok, &c) != FATUNE_OK) return;
  fatune_problem p = {.batch = 4, .heads = 16, .seq_q = 4096, .seq_k = 4096, .dim = 64,
                      .dtype = FATUNE_FP32};
  char name[160];
  fatune_choice ch;
  CHECK(fatune_choose(c, &p, name, sizeof name, &ch) == FATUNE_OK, "%s", fatune_errmsg());
  enum { N = 200000 };
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < N; i++) fatune_choose(c, &p, name, sizeof name, &ch);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / N;
  printf("choosing a kernel already in memory: %.3f us per call\n", us);
  CHECK(us < 50, "%.3f us per call", us);
  fatune_close(c);
}

/* Runs sql on the test database; -1 when it fails or changes no row. */
static int edit(const char *sql) {
  sqlite3 *s;
  if (sqlite3_open(dbpath, &s) != SQLITE_OK) return -1;
  int rc = sqlite3_exec(s, sql, NULL, NULL, NULL), changed = sqlite3_changes(s);
  sqlite3_close(s);
  return rc == SQLITE_OK && changed > 0 ? 0 : -1;
}

/* The only trial for seq 64 (test_default_and_tuned's) with a 2 KB name,
** then a 2 KB config: the library passes it over and runs the default. */
static void test_long_field(void) {
  static const char *const sql[] = {
    "UPDATE variants SET name = printf('%.2048c', 'n') WHERE id IN "
    "(SELECT variant_id FROM trials WHERE dim = 16 AND seq_q = 64 AND seq_k = 70)",
    "UPDATE variants SET name = 'short', config = json_set(config, '$.pad', "
    "printf('%.2048c', 'c')) WHERE id IN "
    "(SELECT variant_id FROM trials WHERE dim = 16 AND seq_q = 64 AND seq_k = 70)"};
  fatune_problem p = {.batch = 2, .heads = 2, .seq_q = 64, .seq_k = 70, .dim = 16,
                      .dtype = FATUNE_FP32, .causal = 1};
  fatune_options ok = {.db_path = dbpath, .backend = "emu"};
  for (int i = 0; i < 2; i++) {
    CHECK(edit(sql[i]) == 0, "editing the database (%d)", i);
    fatune_ctx *c;
    if (fatune_open(&ok, &c) != FATUNE_OK) {
      CHECK(0, "%s", fatune_errmsg());
      return;
    }
    char name[160];
    fatune_choice ch;
    fatune_status st = fatune_choose(c, &p, name, sizeof name, &ch);
    CHECK(st == FATUNE_OK && ch == FATUNE_DEFAULT, "a 2 KB %s: status %d (%s), choice %d",
          i ? "config" : "name", (int)st, fatune_errmsg(), (int)ch);
    double e = run(c, &p, &st);
    CHECK(st == FATUNE_OK && e < 1e-5, "a 2 KB %s: run status %d, error %.3g",
          i ? "config" : "name", (int)st, e);
    fatune_close(c);
  }
}

/* V's head dim apart from Q's and K's, through the contiguous call and
** fatune_choose (fatune_problem.dim_v) and the strided one (V's shape);
** shapes that disagree with it refused. */
static void test_dim_v(void) {
  fatune_ctx *c;
  fatune_options opts = {.db_path = dbpath, .backend = "emu"};
  if (fatune_open(&opts, &c) != FATUNE_OK) {
    CHECK(0, "%s", fatune_errmsg());
    return;
  }
  static const int dims[][2] = {{24, 40}, {40, 8}, {576, 512}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    fatune_problem p = {.batch = 1, .heads = 2, .seq_q = 9, .seq_k = 13, .dim = dims[i][0],
                        .dtype = i == 1 ? FATUNE_FP64 : FATUNE_FP32, .causal = (int)i & 1,
                        .dim_v = dims[i][1]};
    fatune_status st;
    const double e = run(c, &p, &st);
    CHECK(st == FATUNE_OK && e < (i == 1 ? 1e-12 : 1e-5), "d%d/%d: status %d, max err %.3g: %s",
          p.dim, p.dim_v, (int)st, e, fatune_errmsg());
    char name[160], want[32];
    fatune_choice how;
    snprintf(want, sizeof want, "-d%dv%d-", p.dim, p.dim_v);
    CHECK(fatune_choose(c, &p, name, sizeof name, &how) == FATUNE_OK && strstr(name, want),
          "fatune_choose d%d/%d: %s (%s)", p.dim, p.dim_v, name, fatune_errmsg());
  }
  float x[4096];
  fatune_problem bad = {.batch = 1, .heads = 1, .seq_q = 4, .seq_k = 4, .dim = 8, .dim_v = 600};
  CHECK(fatune_attention_forward(c, &bad, x, x, x, x, NULL, NULL) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "bad V head dim 600"), "dim_v 600: '%s'", fatune_errmsg());
  float q[128], k[128], v[64], o[128];
  const fatune_tensor tq = {q, FATUNE_FP32, {1, 1, 4, 8}, {32, 32, 8, 1}};
  const fatune_tensor tk = {k, FATUNE_FP32, {1, 1, 4, 8}, {32, 32, 8, 1}};
  const fatune_tensor tv = {v, FATUNE_FP32, {1, 1, 4, 4}, {16, 16, 4, 1}};
  const fatune_tensor to = {o, FATUNE_FP32, {1, 1, 4, 8}, {32, 32, 8, 1}};
  fatune_attention_args a = {.q = tq, .k = tk, .v = tv, .o = to};
  CHECK(fatune_attention(c, &a) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "o's dim is 8, v's 4: O takes V's head dim"),
        "o shaped as q with v of dim 4: '%s'", fatune_errmsg());
  a.o.shape[3] = 4, a.o.stride[2] = 4, a.o.stride[1] = a.o.stride[0] = 16;
  for (int i = 0; i < 128; i++) q[i] = k[i] = (float)(i % 7) / 7.0f;
  for (int i = 0; i < 64; i++) v[i] = (float)(i % 5);
  CHECK(fatune_attention(c, &a) == FATUNE_OK, "q, k of dim 8, v and o of 4: %s", fatune_errmsg());
  fatune_close(c);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  snprintf(dbpath, sizeof dbpath, "%s/lib.db", dir);
  test_errors();
  test_default_and_tuned();
  test_read_only();
  test_tampered_binary();
  test_stored_configs();
  test_alignment();
  test_threads();
  test_choose_threads();
  test_overhead();
  test_long_field();
  test_dim_v();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_lib");
}
