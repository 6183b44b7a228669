/*
** db_query.c
** Reading the results back: the best variant for a key (or the nearest
** tuned sequence length), trials as a table or JSON, and the export of
** every trial as CSV or JSON. The JSON objects are built by SQLite's
** json_object, which escapes the text and writes NULL as null.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"
#include "fa_escape.h"
#include "fa_sink.h"

/* A device given by its name, its uuid, or part of its name. */
#define DEVICE_MATCH(p) \
  "(" p " IS NULL OR d.name = " p " OR d.uuid = " p \
  " OR instr(lower(d.name), lower(" p ")) > 0)"

/* A column of JSON text in SQLite's canonical form; SQL NULL (JSON null)
** when it is not JSON, which a file built outside fatune may hold. */
#define JSON_OR_NULL(c) "CASE WHEN json_valid(" c ") THEN json(" c ") END"

/* ---- best ---- */

static const char best_sql[] =
  "SELECT v.name, v.hash, v.template_version, v.source_hash, " JSON_OR_NULL("v.config") ", "
  "d.name, d.uuid, "
  "d.backend, b.dtype, b.dim, b.seq_q, b.seq_k, b.batch, b.heads, b.causal, b.max_abs_err, "
  "b.rel_err, b.median_us, b.tflops, b.gbps, b.global_bytes, b.created, "
  DBI_CONFIG_KV("v.config") ", b.arch, b.req_seq_q, b.req_seq_k, b.dim_v, b.req_batch, "
  "b.kv_group, b.page "
  /* The best view's own definition (db_schema.c), its candidates first
  ** cut to an error budget (?9, 0: none: the main case and the suite,
  ** every case of which passed) and to determinism (?10). */
  "FROM (SELECT * FROM (SELECT *, row_number() OVER ("
  "      PARTITION BY device_id, op, mod, arch, dtype, dim, dim_v, req_seq_q, req_seq_k, "
  "                   req_batch, kv_group, page, causal "
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes, "
  "               variant_id, id) AS rank "
  "  FROM (SELECT t.*, v.op AS op, v.mod AS mod, json_extract(t.counters, '$.global_bytes_read') "
  "                  + json_extract(t.counters, '$.global_bytes_written') AS global_bytes "
  "        FROM trials t JOIN variants v ON v.id = t.variant_id WHERE t.status = 'ok' "
  "        AND (?9 = 0 OR (t.rel_err <= ?9 AND t.suite_cases > 0 AND t.suite_failed = '' "
  "                        AND t.suite_err <= ?9)) "
  "        AND (?10 = 0 OR t.deterministic = 1))) WHERE rank = 1) b "
  "JOIN variants v ON v.id = b.variant_id JOIN devices d ON d.id = b.device_id "
  "WHERE " DEVICE_MATCH("?1") " AND b.dtype = ?2 AND b.dim = ?3 AND b.causal = ?4 "
  "AND b.dim_v = ?11 AND b.mod = ?12 "
  "AND b.kv_group = ?14 AND b.page = ?15 "
  "AND (?7 IS NULL OR b.arch = ?7) AND b.op = ?8 "
  /* The exact key has distance 0. Decoding's batch first, by ratio (the
  ** splits follow batch x heads over the SMs), between two equally near
  ** the smaller (its splits over-split, a cheap combine, where the
  ** larger's would leave SMs idle); the other ops' is 0. Then the
  ** lengths, between two equally near the longer sequence; then the
  ** view's own ranking, across devices and targets. */
  "ORDER BY max(b.req_batch, ?13) * 1.0 / max(min(b.req_batch, ?13), 1), b.req_batch, "
  "abs(b.req_seq_q - ?5), abs(b.req_seq_k - ?6), b.req_seq_q DESC, "
  "b.req_seq_k DESC, b.median_us IS NULL, b.median_us, b.global_bytes IS NULL, "
  "b.global_bytes, b.id";

static int best_row(sqlite3_stmt *st, db_best_row *o) {
  char *text[] = {o->variant, o->hash, o->template_version, o->source_hash, o->config,
                  o->device, o->uuid, o->backend, o->dtype};
  const size_t size[] = {sizeof o->variant, sizeof o->hash, sizeof o->template_version,
                         sizeof o->source_hash, sizeof o->config, sizeof o->device,
                         sizeof o->uuid, sizeof o->backend, sizeof o->dtype};
  for (int i = 0; i < 9; i++)
    if (dbi_col_copy(st, i, text[i], size[i]) != 0) return -1;
  int *ints[] = {&o->dim, &o->seq_q, &o->seq_k, &o->batch, &o->heads, &o->causal};
  for (int i = 0; i < 6; i++) *ints[i] = sqlite3_column_int(st, 9 + i);
  double *reals[] = {&o->max_abs_err, &o->rel_err, &o->median_us, &o->tflops, &o->gbps};
  for (int i = 0; i < 5; i++) *reals[i] = dbi_col_real(st, 15 + i);
  o->global_bytes = sqlite3_column_type(st, 20) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 20);
  if (dbi_col_copy(st, 21, o->created, sizeof o->created) != 0) return -1;
  if (dbi_col_copy(st, 22, o->config_kv, sizeof o->config_kv) != 0 ||
      dbi_col_copy(st, 23, o->arch, sizeof o->arch) != 0)
    return -1;
  o->req_seq_q = sqlite3_column_int(st, 24), o->req_seq_k = sqlite3_column_int(st, 25);
  o->dim_v = sqlite3_column_int(st, 26);
  o->req_batch = sqlite3_column_int(st, 27), o->kv_group = sqlite3_column_int(st, 28);
  o->page = sqlite3_column_int(st, 29);
  return 0;
}

int db_best(db *d, const char *device, const db_problem *p, db_best_row *out, int *found,
            int *exact, char *err, size_t errlen) {
  *found = *exact = 0;
  memset(out, 0, sizeof *out);
  if (!p->dtype) return dbi_fail(err, errlen, "db_best needs a dtype");
  if (p->req_batch < 0 || p->kv_group < 0 || p->page < 0)
    return dbi_fail(err, errlen, "db_best: a negative requested batch, kv_group or page");
  sqlite3_stmt *st;
  if (dbi_prepare(d->h, best_sql, &st, err, errlen) != 0) return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_text(&b, device);
  dbi_bind_text(&b, p->dtype);
  dbi_bind_int(&b, p->dim);
  dbi_bind_int(&b, p->causal);
  const int want_q = p->req_seq_q ? p->req_seq_q : p->seq_q;
  const int want_k = p->req_seq_k ? p->req_seq_k : p->seq_k;
  dbi_bind_int(&b, want_q);
  dbi_bind_int(&b, want_k);
  dbi_bind_text(&b, p->arch);
  dbi_bind_text(&b, p->op ? p->op : "fwd");
  dbi_bind_real(&b, p->max_rel_err > 0 ? p->max_rel_err : 0);
  dbi_bind_int(&b, p->deterministic ? 1 : 0);
  dbi_bind_int(&b, p->dim_v == p->dim ? 0 : p->dim_v);
  dbi_bind_text(&b, p->mod ? p->mod : "");
  dbi_bind_int(&b, p->req_batch);
  dbi_bind_int(&b, p->kv_group ? p->kv_group : 1);
  dbi_bind_int(&b, p->page);
  /* The first candidate whose fields fit: one too long for db_best_row
  ** (a file written elsewhere may hold anything) is passed over. */
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc, status = 0;
  while (rc == SQLITE_ROW && best_row(st, out) != 0) rc = dbi_step(st);
  if (rc == SQLITE_ROW) {
    *found = 1;
    *exact = out->req_seq_q == want_q && out->req_seq_k == want_k &&
             out->req_batch == p->req_batch;
  } else {
    memset(out, 0, sizeof *out);
    if (rc != SQLITE_DONE) status = dbi_sqlfail(d->h, err, errlen, "reading the best variants");
  }
  dbi_finalize(st);
  return status;
}

void db_budget_text(const db_problem *p, char *buf, size_t n) {
  if (p->max_rel_err > 0)
    snprintf(buf, n, "an error budget of %.3g%s", p->max_rel_err,
             p->deterministic ? " with determinism" : "");
  else
    snprintf(buf, n, "%s", p->deterministic ? "determinism" : "");
}

/* ---- Trials: show and export ---- */

#define TRIAL_COLUMNS \
  "v.name AS variant, v.hash, v.template_version, v.config, d.name AS device, d.uuid, " \
  "d.backend, t.dtype, t.dim, t.seq_q, t.seq_k, t.batch, t.heads, t.causal, t.status, " \
  "t.message, t.max_abs_err, t.rel_err, t.lse_err, t.median_us, t.min_us, t.p20_us, " \
  "t.p80_us, t.tflops, t.gbps, t.counters, t.fatune_version, t.created, t.arch, " \
  "t.req_seq_q, t.req_seq_k, t.seed, v.op, t.compiler, t.suite_cases, t.suite_err, " \
  "t.suite_failed, t.deterministic, t.req_batch, t.kv_group, t.page, t.dim_v"

#define TRIAL_JSON \
  "json_object('variant', v.name, 'hash', v.hash, 'template_version', v.template_version, " \
  "'config', " JSON_OR_NULL("v.config") ", 'device', d.name, 'uuid', d.uuid, " \
  "'backend', d.backend, 'dtype', t.dtype, 'dim', t.dim, 'dim_v', t.dim_v, 'seq_q', t.seq_q, " \
  "'seq_k', t.seq_k, 'batch', t.batch, " \
  "'heads', t.heads, 'causal', json(CASE t.causal WHEN 1 THEN 'true' ELSE 'false' END), " \
  "'status', t.status, 'message', t.message, 'max_abs_err', t.max_abs_err, " \
  "'rel_err', t.rel_err, 'lse_err', t.lse_err, 'median_us', t.median_us, " \
  "'min_us', t.min_us, 'p20_us', t.p20_us, 'p80_us', t.p80_us, 'tflops', t.tflops, " \
  "'gbps', t.gbps, 'counters', " JSON_OR_NULL("t.counters") ", " \
  "'fatune_version', t.fatune_version, 'created', t.created, 'arch', t.arch, " \
  "'req_seq_q', t.req_seq_q, 'req_seq_k', t.req_seq_k, 'seed', t.seed, 'op', v.op, " \
  "'compiler', t.compiler, 'suite_cases', t.suite_cases, 'suite_err', t.suite_err, " \
  "'suite_failed', t.suite_failed, " \
  "'deterministic', json(CASE t.deterministic WHEN 1 THEN 'true' WHEN 0 THEN 'false' END), " \
  "'req_batch', t.req_batch, 'kv_group', t.kv_group, 'page', t.page)"

#define TRIAL_FROM \
  " FROM trials t JOIN variants v ON v.id = t.variant_id JOIN devices d ON d.id = t.device_id " \
  "WHERE " DEVICE_MATCH("?1") " AND (?2 IS NULL OR t.dtype = ?2) AND (?3 = 0 OR t.dim = ?3) " \
  "AND (?4 = 0 OR t.req_seq_q = ?4) AND (?5 = 0 OR t.req_seq_k = ?5) " \
  "AND (?6 = 0 OR (CASE WHEN t.req_batch > 0 THEN t.req_batch ELSE t.batch END) = ?6) " \
  "AND (?7 = 0 OR t.heads = ?7) AND (?8 < 0 OR t.causal = ?8) AND (?9 IS NULL OR v.op = ?9) " \
  "AND (?10 = 0 OR t.dim_v = ?10 OR (t.dim_v = 0 AND t.dim = ?10)) " \
  "AND (?11 = 0 OR t.kv_group = ?11) AND (?12 = 0 OR t.page = ?12) "

/* show groups a key's trials, the ok ones first and best first. */
#define SHOW_ORDER \
  "ORDER BY t.dtype, t.dim, t.dim_v, t.causal, t.req_seq_q, t.req_seq_k, t.req_batch, " \
  "t.kv_group, t.page, t.arch, d.name, " \
  "t.status <> 'ok', " \
  "t.median_us IS NULL, t.median_us, json_extract(t.counters, '$.global_bytes_read') + " \
  "json_extract(t.counters, '$.global_bytes_written'), v.name"
#define EXPORT_ORDER "ORDER BY t.id"

static const char *const trial_sql[2][2] = {   /* [export][json] */
  {"SELECT " TRIAL_COLUMNS TRIAL_FROM SHOW_ORDER, "SELECT " TRIAL_JSON TRIAL_FROM SHOW_ORDER},
  {"SELECT " TRIAL_COLUMNS TRIAL_FROM EXPORT_ORDER, "SELECT " TRIAL_JSON TRIAL_FROM EXPORT_ORDER},
};

/* Column indexes in TRIAL_COLUMNS that the table prints. */
enum { C_VARIANT = 0, C_DEVICE = 4, C_DTYPE = 7, C_DIM, C_SEQ_Q, C_SEQ_K, C_BATCH, C_HEADS,
       C_CAUSAL, C_STATUS, C_MAX_ABS = 16, C_REL, C_MEDIAN = 19, C_TFLOPS = 23,
       C_CREATED = 27, C_ARCH, C_REQ_Q, C_REQ_K, C_REQ_BATCH = 38, C_KV_GROUP, C_PAGE,
       C_DIM_V };

static int prepare_trials(db *d, const db_filter *f, int export, int json, sqlite3_stmt **st,
                          char *err, size_t errlen) {
  static const db_filter all = {NULL, NULL, 0, 0, 0, 0, 0, -1, NULL, 0, 0, 0};
  if (!f) f = &all;
  if (dbi_prepare(d->h, trial_sql[export][json], st, err, errlen) != 0) return -1;
  dbi_binder b = dbi_bind_start(*st);
  dbi_bind_text(&b, f->device);
  dbi_bind_text(&b, f->dtype);
  const int v[] = {f->dim, f->seq_q, f->seq_k, f->batch, f->heads, f->causal};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) dbi_bind_int(&b, v[i]);
  dbi_bind_text(&b, f->op);
  dbi_bind_int(&b, f->dim_v);
  dbi_bind_int(&b, f->kv_group);
  dbi_bind_int(&b, f->page);
  if (b.rc != SQLITE_OK) {
    dbi_finalize(*st);
    return dbi_sqlfail(d->h, err, errlen, "reading trials");
  }
  return 0;
}

static const fa_column table_cols[] = {
  {"variant", -58, NULL}, {"device", -20, NULL}, {"arch", -7, NULL},
  {"problem (what ran, and for what when less)", -48, NULL}, {"status", -13, NULL},
  {"rel_err", 9, NULL}, {"max_abs", 9, NULL}, {"median_us", 10, NULL}, {"tflops", 7, NULL},
  {"created", 0, "  "}};

static fa_cell real_cell(sqlite3_stmt *st, int col, const char *fmt) {
  if (sqlite3_column_type(st, col) == SQLITE_NULL) return fa_cell_null();
  return fa_cell_real(sqlite3_column_double(st, col), fmt);
}

/* What ran, and for what when less: "fp32 d64 q64 k64 b3 h16 g8 p16 for
** q1 k4096 b32"; g (query heads per K/V head) and p (tokens per page) only
** where the key holds them (op decode). */
static void problem_text(sqlite3_stmt *st, char *buf, size_t n) {
  char dtype[16], asked[64] = "", dims[24], decode[32] = "";
  fa_esc_term_buf(dtype, sizeof dtype, dbi_col_text(st, C_DTYPE));
  const int dim = sqlite3_column_int(st, C_DIM), dim_v = sqlite3_column_int(st, C_DIM_V);
  if (dim_v == 0) snprintf(dims, sizeof dims, "d%d", dim);
  else snprintf(dims, sizeof dims, "d%dv%d", dim, dim_v);
  const int q = sqlite3_column_int(st, C_SEQ_Q), k = sqlite3_column_int(st, C_SEQ_K);
  const int rq = sqlite3_column_int(st, C_REQ_Q), rk = sqlite3_column_int(st, C_REQ_K);
  const int b = sqlite3_column_int(st, C_BATCH), rb = sqlite3_column_int(st, C_REQ_BATCH);
  const int g = sqlite3_column_int(st, C_KV_GROUP), pg = sqlite3_column_int(st, C_PAGE);
  if (g > 1 || pg > 0) snprintf(decode, sizeof decode, " g%d p%d", g, pg);
  char batch_asked[16] = "";
  if (rb > 0 && rb != b) snprintf(batch_asked, sizeof batch_asked, " b%d", rb);
  if (rq != q || rk != k || batch_asked[0])
    snprintf(asked, sizeof asked, " for q%d k%d%s", rq, rk, batch_asked);
  snprintf(buf, n, "%s %s q%d k%d b%d h%d%s%s%s", dtype, dims, q, k, b,
           sqlite3_column_int(st, C_HEADS), decode,
           sqlite3_column_int(st, C_CAUSAL) ? " causal" : "", asked);
}

static void table_row(fa_sink *s, sqlite3_stmt *st) {
  char problem[200];
  problem_text(st, problem, sizeof problem);
  const char *arch = dbi_col_text(st, C_ARCH);
  const fa_cell c[] = {
    fa_cell_text(dbi_col_text(st, C_VARIANT)), fa_cell_text(dbi_col_text(st, C_DEVICE)),
    fa_cell_text(arch && arch[0] ? arch : "-"), fa_cell_text(problem),
    fa_cell_text(dbi_col_text(st, C_STATUS)), real_cell(st, C_REL, "%.2e"),
    real_cell(st, C_MAX_ABS, "%.2e"), real_cell(st, C_MEDIAN, "%.2f"),
    real_cell(st, C_TFLOPS, "%.2f"), fa_cell_text(dbi_col_text(st, C_CREATED))};
  fa_sink_row(s, c, (int)(sizeof c / sizeof c[0]));
}

/* Every column as SQLite typed it: integers and reals as numbers (NULL
** is an empty field), the rest as text. */
static void csv_row(fa_sink *s, sqlite3_stmt *st, fa_cell *c) {
  for (int i = 0; i < s->ncol; i++) {
    const int type = sqlite3_column_type(st, i);
    c[i] = type == SQLITE_INTEGER ? fa_cell_int(sqlite3_column_int64(st, i))
         : type == SQLITE_FLOAT   ? fa_cell_real(sqlite3_column_double(st, i), "%.15g")
                                  : fa_cell_text(dbi_col_text(st, i));
  }
  fa_sink_row(s, c, s->ncol);
}

/* The export's columns by their SQL names, known before the first step. */
static fa_column *csv_columns(sqlite3_stmt *st, int *n) {
  *n = sqlite3_column_count(st);
  fa_column *col = calloc((size_t)*n, sizeof *col);
  for (int i = 0; col && i < *n; i++) col[i].name = sqlite3_column_name(st, i);
  return col;
}

typedef enum style { S_TABLE, S_CSV, S_JSON } style;

/* Steps through the rows, writing each in the style: the table's columns,
** every column as CSV, or the one column of JSON SQLite built. */
static int print_trials(db *d, sqlite3_stmt *st, style s, FILE *out, size_t *rows, char *err,
                        size_t errlen) {
  static const fa_column sql_json_col = {NULL, 0, NULL};
  int rc, ncol = 0;
  fa_column *col = s == S_CSV ? csv_columns(st, &ncol) : NULL;
  fa_cell *cells = col ? calloc((size_t)ncol, sizeof *cells) : NULL;
  *rows = 0;
  if (s == S_CSV && !cells) {
    free(col);
    return dbi_fail(err, errlen, "out of memory");
  }
  fa_sink k;
  if (s == S_TABLE)
    fa_sink_begin(&k, out, FA_SINK_TABLE, table_cols, sizeof table_cols / sizeof table_cols[0]);
  else if (s == S_CSV) fa_sink_begin(&k, out, FA_SINK_CSV, col, ncol);
  else fa_sink_begin(&k, out, FA_SINK_JSON, &sql_json_col, 1);
  while ((rc = dbi_step(st)) == SQLITE_ROW) {
    if (s == S_TABLE) table_row(&k, st);
    else if (s == S_CSV) csv_row(&k, st, cells);
    else fa_sink_row(&k, (fa_cell[]){fa_cell_raw(dbi_col_text(st, 0))}, 1);
  }
  *rows = k.rows;
  const int bad = fa_sink_end(&k);
  free(cells);
  free(col);
  if (rc != SQLITE_DONE) return dbi_sqlfail(d->h, err, errlen, "reading trials");
  if (bad) return dbi_fail(err, errlen, "cannot write the trials");
  return 0;
}

int db_show(db *d, const db_filter *f, int json, FILE *out, size_t *rows, char *err,
            size_t errlen) {
  sqlite3_stmt *st;
  *rows = 0;
  if (prepare_trials(d, f, 0, json, &st, err, errlen) != 0) return -1;
  int rc = print_trials(d, st, json ? S_JSON : S_TABLE, out, rows, err, errlen);
  dbi_finalize(st);
  return rc;
}

int db_export(db *d, const char *format, FILE *out, size_t *rows, char *err, size_t errlen) {
  *rows = 0;
  int json = format && !strcmp(format, "json");
  if (!json && !(format && !strcmp(format, "csv")))
    return dbi_fail(err, errlen, "unknown export format '%s' (csv or json)",
                    format ? format : "(none)");
  sqlite3_stmt *st;
  if (prepare_trials(d, NULL, 1, json, &st, err, errlen) != 0) return -1;
  int rc = print_trials(d, st, json ? S_JSON : S_CSV, out, rows, err, errlen);
  dbi_finalize(st);
  return rc;
}
