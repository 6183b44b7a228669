/*
** fuzz_db.c
** A fatune database with arbitrary row contents, read the ways fatune reads
** one: `fatune best` (table and JSON), `show` (table and JSON), `export`
** (CSV and JSON), `merge` into a fresh database, and the library's choice
** (fatune_choose on the emulator). No crash, no sanitizer report, no hang.
**
** The schema is fatune's own (db_open makes it); the rows come from the
** input, one a line, fields separated by '|':
**
**   q|dtype|dim|seq_q|seq_k|causal|device   the problem asked about
**   d|id|name|uuid|backend|cc_major|cc_minor|sm_count|smem_per_block_optin|l2_bytes
**   v|id|family|template_version|name|hash|config|source_hash
**   b|id|source_hash|target|compiler_version|options|blob|checksum|registers|
**     spill_bytes|smem_bytes|compile_ms|created
**   t|id|variant_id|device_id|dtype|dim|seq_q|seq_k|batch|heads|causal|status|message|
**     max_abs_err|rel_err|lse_err|median_us|min_us|p20_us|p80_us|tflops|gbps|counters|
**     fatune_version|created
**
** A field that is a whole integer is stored as one, a number as a real,
** "\N" as NULL, anything else as text (SQLite keeps what it is given), so
** every column sees every type; a missing field is NULL. A row the
** schema's constraints refuse is left out. Foreign keys are not enforced
** while filling, so trials may name devices and variants that do not exist.
**
** The emulator's compiler is `false`: a kernel the library would compile
** fails at once (the choice itself is what is fuzzed), and nothing runs a
** stored binary unless it matches the chosen kernel's source hash and its
** checksum, which arbitrary rows do not.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "cli.h"
#include "cmd_db.h"
#include "db.h"
#include "fatune.h"
#include "fuzz_util.h"

#define MAX_FIELDS 32

static char db_file[480], merged_file[480];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_path(db_file, sizeof db_file, "fuzz.db");
  fz_path(merged_file, sizeof merged_file, "merged.db");
  setenv("FATUNE_CC", "false", 1);
  /* The commands print their answers; only crashes matter here. */
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

/* ---- The rows ---- */

typedef struct table_info {
  char tag;
  const char *insert;
} table_info;

static const table_info tables[] = {
  {'d', "INSERT INTO devices VALUES (?,?,?,?,?,?,?,?,?)"},
  /* Version 1's 7 columns; the op (version 6) takes its default, fwd. */
  {'v', "INSERT INTO variants (id, family, template_version, name, hash, config, source_hash) "
        "VALUES (?,?,?,?,?,?,?)"},
  {'b', "INSERT INTO binaries VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"},
  /* Version 2's 24 columns in their order (the corpus's lines), then
  ** version 3's key and seed, defaulting to an unknown arch and the
  ** sequence lengths that ran. */
  {'t', "INSERT INTO trials (id, variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, "
        "causal, status, message, max_abs_err, rel_err, lse_err, median_us, min_us, p20_us, "
        "p80_us, tflops, gbps, counters, fatune_version, created, arch, req_seq_q, req_seq_k, "
        "seed) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,"
        "?21,?22,?23,?24,coalesce(?25,''),coalesce(?26,?6),coalesce(?27,?7),?28)"},
};

/* One field, typed by what it looks like. */
static void bind_field(sqlite3_stmt *st, int i, const char *f) {
  char *end;
  long long v = strtoll(f, &end, 10);
  if (!strcmp(f, "\\N")) {
    sqlite3_bind_null(st, i);
  } else if (*f && !*end) {
    sqlite3_bind_int64(st, i, v);
  } else {
    double d = strtod(f, &end);
    if (*f && !*end) sqlite3_bind_double(st, i, d);
    else sqlite3_bind_text(st, i, f, -1, SQLITE_TRANSIENT);
  }
}

/* The fields of one line (cut in place at each '|'). */
static int split(char *line, char **fields) {
  int n = 0;
  fields[n++] = line;
  for (char *p = line; *p && n < MAX_FIELDS; p++)
    if (*p == '|') *p = '\0', fields[n++] = p + 1;
  return n;
}

static void insert_row(sqlite3 *h, char **fields, int n) {
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
    if (fields[0][0] != tables[t].tag || fields[0][1]) continue;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(h, tables[t].insert, -1, &st, NULL) != SQLITE_OK) abort();
    const int cols = sqlite3_bind_parameter_count(st);
    for (int i = 1; i < n && i <= cols; i++) bind_field(st, i, fields[i]);
    (void)sqlite3_step(st);   /* a row the constraints refuse is left out */
    sqlite3_finalize(st);
  }
}

/* The problem asked about, from a q line; clamped to what the commands and
** the library accept. */
typedef struct question {
  char dtype[8], device[64];
  int dim, seq_q, seq_k, causal, has_device;
} question;

static int clamp(const char *s, int lo, int hi) {
  long v = strtol(s, NULL, 10);
  return v < lo ? lo : v > hi ? hi : (int)v;
}

static void ask(question *q, char **fields, int n) {
  static const char *const dtypes[] = {"fp32", "fp64", "fp16", "bf16"};
  if (n > 1) snprintf(q->dtype, sizeof q->dtype, "%s", dtypes[clamp(fields[1], 0, 3)]);
  if (n > 2) q->dim = clamp(fields[2], 1, 256);
  if (n > 3) q->seq_q = clamp(fields[3], 1, 1 << 16);
  if (n > 4) q->seq_k = clamp(fields[4], 1, 1 << 16);
  if (n > 5) q->causal = clamp(fields[5], 0, 1);
  /* A device name the command line could carry: no newline, no NUL. */
  if (n > 6) q->has_device = 1, snprintf(q->device, sizeof q->device, "%s", fields[6]);
}

/* The schema by db_open, then the input's rows. */
static void fill(char *text, question *q) {
  char err[512];
  db *d;
  if (db_open(db_file, DB_CREATE, &d, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_db: %s\n", err);
    abort();
  }
  db_close(d);
  sqlite3 *h;
  if (sqlite3_open(db_file, &h) != SQLITE_OK) abort();
  sqlite3_exec(h, "BEGIN", NULL, NULL, NULL);
  char *fields[MAX_FIELDS], *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    int n = split(line, fields);
    if (!strcmp(fields[0], "q")) ask(q, fields, n);
    else insert_row(h, fields, n);
  }
  sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(h);
}

/* ---- Reading it back ---- */

/* A command as the fatune binary would run it. */
static void command(const question *q, const char *cmd, const char *extra, const char *value) {
  char dim[16], seq_q[16], seq_k[16];
  snprintf(dim, sizeof dim, "%d", q->dim);
  snprintf(seq_q, sizeof seq_q, "%d", q->seq_q);
  snprintf(seq_k, sizeof seq_k, "%d", q->seq_k);
  char *argv[24];
  int argc = 0;
  argv[argc++] = "fatune", argv[argc++] = (char *)cmd;
  if (!strcmp(cmd, "merge")) argv[argc++] = db_file;
  /* best with the question; show filtered by it as a table, whole as JSON. */
  if (!strcmp(cmd, "best") || (!strcmp(cmd, "show") && !extra)) {
    argv[argc++] = "--dim", argv[argc++] = dim, argv[argc++] = "--seq", argv[argc++] = seq_q;
    argv[argc++] = "--seq-k", argv[argc++] = seq_k;
    argv[argc++] = "--dtype", argv[argc++] = (char *)q->dtype;
    if (q->causal) argv[argc++] = "--causal";
    if (q->has_device) argv[argc++] = "--device", argv[argc++] = (char *)q->device;
  }
  if (extra) argv[argc++] = (char *)extra;
  if (value) argv[argc++] = (char *)value;
  argv[argc++] = "--db", argv[argc++] = !strcmp(cmd, "merge") ? merged_file : db_file;
  argv[argc] = NULL;
  cli_opts o;
  char err[512];
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_db: %s\n", err);
    abort();
  }
  (void)cmd_db_main(&o);
}

static void library_choice(const question *q) {
  static const fatune_dtype dtypes[] = {FATUNE_FP32, FATUNE_FP64, FATUNE_FP16, FATUNE_BF16};
  static const char *const names[] = {"fp32", "fp64", "fp16", "bf16"};
  fatune_options opts = {.db_path = db_file, .backend = "emu"};
  fatune_ctx *ctx;
  if (fatune_open(&opts, &ctx) != FATUNE_OK) return;
  fatune_problem p = {.batch = 1, .heads = 1, .seq_q = q->seq_q, .seq_k = q->seq_k,
                      .dim = q->dim, .causal = q->causal};
  for (int i = 0; i < 4; i++)
    if (!strcmp(q->dtype, names[i])) p.dtype = dtypes[i];
  char name[200];
  fatune_choice choice;
  (void)fatune_choose(ctx, &p, name, sizeof name, &choice);
  fatune_close(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fz_cstr(data, size);
  question q = {.dtype = "fp32", .dim = 16, .seq_q = 64, .seq_k = 64};
  remove_db(db_file);
  remove_db(merged_file);
  fill(text, &q);
  command(&q, "best", NULL, NULL);
  command(&q, "best", "--json", NULL);
  command(&q, "show", NULL, NULL);
  command(&q, "show", "--json", NULL);
  command(&q, "export", "--format", "csv");
  command(&q, "export", "--format", "json");
  command(&q, "merge", NULL, NULL);
  library_choice(&q);
  free(text);
  return 0;
}
