/*
** db_check.c
** What merge takes from another file, which anybody may have written: a
** trial only when each field holds what a tune could have recorded (a
** timing of -1 us would rank first everywhere), a variant only when its
** config is a point of the space the templates know. Why a row is refused
** names the field; text from the file in it is made fit for a terminal.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db_int.h"
#include "fa_escape.h"

#define SEQ_MAX (1 << 24)     /* the command's own limits */
#define BATCH_MAX 65535

/* ---- Variants ---- */

static int open_gen(dbi_checker *c, char *err, size_t errlen) {
  if (c->gen) return 0;
  if (gen_open(&c->gen, err, errlen) != 0) return -1;
  if (gen_target_for_arch(c->gen, "sm_90", 0, 0, &c->target) != 0) {
    dbi_fail(err, errlen, "the generator: %s", gen_errmsg(c->gen));
    dbi_check_free(c);
    return -1;
  }
  return 0;
}

int dbi_check_variant(dbi_checker *c, const char *config_kv, char *why, size_t n, char *err,
                      size_t errlen) {
  if (!config_kv || !config_kv[0]) {
    snprintf(why, n, "its config is not an object of strings and integers");
    return 1;
  }
  if (open_gen(c, err, errlen) != 0) return -1;
  gen_kernel k;
  memset(&k, 0, sizeof k);
  const int rc = gen_render_config(c->gen, config_kv, NULL, &c->target, &k);
  if (rc == 0) {
    gen_kernel_free(&k);
    return 0;
  }
  if (rc == FA_ENOMEM) return dbi_fail(err, errlen, "out of memory");
  char msg[120];
  fa_esc_term_buf(msg, sizeof msg, gen_errmsg(c->gen));
  snprintf(why, n, "its config is not in the space (%s)", msg);
  return 1;
}

void dbi_check_free(dbi_checker *c) {
  if (c->gen) gen_close(c->gen);
  c->gen = NULL;
}

/* ---- Trials ---- */

enum { K_DTYPE, K_DIM, K_SEQ_Q, K_SEQ_K, K_BATCH, K_HEADS, K_CAUSAL, K_STATUS, K_ERRORS,
       K_TIMINGS = K_ERRORS + 3, K_COUNTERS = K_TIMINGS + 6, K_CREATED };

static const char *const error_names[] = {"max_abs_err", "rel_err", "lse_err"};
static const char *const timing_names[] = {"median_us", "min_us", "p20_us", "p80_us", "tflops",
                                           "gbps"};

/* A column's value as the reason shows it. */
static void show_value(sqlite3_stmt *st, int col, char *buf, size_t n) {
  char text[40];
  switch (sqlite3_column_type(st, col)) {
  case SQLITE_INTEGER: snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, col)); break;
  case SQLITE_FLOAT: snprintf(buf, n, "%g", sqlite3_column_double(st, col)); break;
  case SQLITE_NULL: snprintf(buf, n, "NULL"); break;
  default:
    fa_esc_term_buf(text, sizeof text, dbi_col_text(st, col));
    snprintf(buf, n, "'%s'", text);
  }
}

static int refuse(sqlite3_stmt *st, int col, const char *name, char *why, size_t n) {
  char v[64];
  show_value(st, col, v, sizeof v);
  snprintf(why, n, "%s %s", name, v);
  return 1;
}

static int int_in(sqlite3_stmt *st, int col, long long lo, long long hi) {
  const long long v = sqlite3_column_int64(st, col);
  return sqlite3_column_type(st, col) == SQLITE_INTEGER && v >= lo && v <= hi;
}

/* NULL (not measured), or a number: positive and finite for a timing,
** not negative (infinite allowed: a result gone wrong) for an error. */
static int real_ok(sqlite3_stmt *st, int col, int timing) {
  const int type = sqlite3_column_type(st, col);
  if (type == SQLITE_NULL) return 1;
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) return 0;
  const double v = sqlite3_column_double(st, col);
  return timing ? v > 0 && isfinite(v) : v >= 0;
}

static int text_in(sqlite3_stmt *st, int col, const char *const *set, size_t n) {
  if (sqlite3_column_type(st, col) != SQLITE_TEXT) return 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(dbi_col_text(st, col), set[i])) return 1;
  return 0;
}

static int check_problem(sqlite3_stmt *st, int c, char *why, size_t n) {
  static const char *const dtypes[] = {"fp32", "fp64", "fp16", "bf16"};
  static const char *const names[] = {"dim", "seq_q", "seq_k", "batch", "heads", "causal"};
  const long long hi[] = {FA_DIM_MAX, SEQ_MAX, SEQ_MAX, BATCH_MAX, BATCH_MAX, 1};
  if (!text_in(st, c + K_DTYPE, dtypes, 4)) return refuse(st, c + K_DTYPE, "dtype", why, n);
  for (int i = 0; i < 6; i++)
    if (!int_in(st, c + K_DIM + i, i == 5 ? 0 : 1, hi[i]))
      return refuse(st, c + K_DIM + i, names[i], why, n);
  return 0;
}

int dbi_check_trial(sqlite3_stmt *st, int c, char *why, size_t n) {
  static const char *const statuses[] = {"ok", "invalid", "compile_error", "crashed", "timeout"};
  if (check_problem(st, c, why, n)) return 1;
  if (!text_in(st, c + K_STATUS, statuses, 5)) return refuse(st, c + K_STATUS, "status", why, n);
  for (int i = 0; i < 3; i++)
    if (!real_ok(st, c + K_ERRORS + i, 0))
      return refuse(st, c + K_ERRORS + i, error_names[i], why, n);
  for (int i = 0; i < 6; i++)
    if (!real_ok(st, c + K_TIMINGS + i, 1))
      return refuse(st, c + K_TIMINGS + i, timing_names[i], why, n);
  if (!sqlite3_column_int(st, c + K_COUNTERS)) {
    snprintf(why, n, "counters not an object of non-negative numbers");
    return 1;
  }
  if (!sqlite3_column_int(st, c + K_CREATED)) {
    snprintf(why, n, "created not a time, or later than tomorrow");
    return 1;
  }
  return 0;
}
