/*
** db_baseline.c
** The baselines table (schema version 5): PyTorch's attention timed on a
** GPU, recorded by `fatune baseline`, read by the report. Every field is
** checked on the way in and again on the way out, since the file may have
** been edited by anyone.
*/
#include <math.h>
#include <string.h>

#include "db_int.h"
#include "fa_problem.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* Printable ASCII text of 1 to max - 1 bytes; name: a backend's characters only. */
static int text_ok(const char *s, size_t max, int name) {
  if (!s || !*s || strlen(s) >= max) return 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p < 0x20 || *p > 0x7e) return 0;
    if (name && !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
      return 0;
  }
  return 1;
}

static int dtype_ok(const char *s) {
  return s && (!strcmp(s, "fp32") || !strcmp(s, "fp64") || !strcmp(s, "fp16") ||
               !strcmp(s, "bf16") || !strcmp(s, "e4m3"));
}

/* Why b is not a baseline a GPU could have measured, or NULL. */
static const char *baseline_why(const db_baseline *b) {
  if (!text_ok(b->gpu, 128, 0)) return "the GPU's name must be printable text of 1 to 127 bytes";
  if (!text_ok(b->backend, 32, 1))
    return "the backend must be 1 to 31 letters, digits, '-', '_' or '.'";
  if (!dtype_ok(b->dtype)) return "the dtype must be fp32, fp64, fp16, bf16 or e4m3";
  if (b->dim < 1 || b->dim > FA_DIM_MAX) return "dim must be from 1 to " FA_DIM_MAX_TEXT;
  if (b->seq_q < 1 || b->seq_k < 1 || b->seq_q > 1 << 24 || b->seq_k > 1 << 24)
    return "seq_q and seq_k must be from 1 to 16777216";
  if (b->batch < 1 || b->heads < 1 || b->batch > 65535 || b->heads > 65535)
    return "batch and heads must be from 1 to 65535";
  if (b->causal != 0 && b->causal != 1) return "causal must be 0 or 1";
  if (!(b->median_us > 0 && b->median_us < 1e12)) return "the median must be a positive time";
  /* No GPU sustains a petaFLOP/s per kernel yet: a larger figure is a unit error. */
  if (!(b->tflops > 0 && b->tflops < 1e4)) return "TFLOP/s must be above 0 and below 10000";
  if (!text_ok(b->torch_version, 64, 0))
    return "the torch version must be printable text of 1 to 63 bytes";
  return NULL;
}

static int put_one(db *d, const db_baseline *b, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(d->h,
        "INSERT OR REPLACE INTO baselines (gpu, backend, dtype, dim, seq_q, seq_k, batch, "
        "heads, causal, median_us, tflops, torch_version, created) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " NOW ")",
        &st, err, errlen) != 0)
    return -1;
  dbi_binder k = dbi_bind_start(st);
  dbi_bind_text(&k, b->gpu);
  dbi_bind_text(&k, b->backend);
  dbi_bind_text(&k, b->dtype);
  const int ints[] = {b->dim, b->seq_q, b->seq_k, b->batch, b->heads, b->causal};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) dbi_bind_int(&k, ints[i]);
  dbi_bind_real(&k, b->median_us);
  dbi_bind_real(&k, b->tflops);
  dbi_bind_text(&k, b->torch_version);
  int rc = k.rc == SQLITE_OK ? dbi_step(st) : k.rc;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(d->h, err, errlen, "recording a baseline");
}

int db_baseline_put(db *d, const db_baseline *b, size_t n, size_t *bad, char *err,
                    size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    const char *why = baseline_why(&b[i]);
    if (why) {
      if (bad) *bad = i;
      return dbi_fail(err, errlen, "baseline: %s", why);
    }
  }
  if (dbi_begin(d->h, err, errlen) != 0) return -1;
  for (size_t i = 0; i < n; i++)
    if (put_one(d, &b[i], err, errlen) != 0) {
      if (bad) *bad = i;
      dbi_rollback(d->h);
      return -1;
    }
  return dbi_commit(d->h, err, errlen);
}

int db_baselines(db *d, db_baseline_fn fn, void *ud, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(d->h,
        "SELECT gpu, backend, dtype, torch_version, created, dim, seq_q, seq_k, batch, heads, "
        "causal, median_us, tflops FROM baselines "
        "ORDER BY gpu, backend, dtype, dim, causal, seq_q, seq_k, id",
        &st, err, errlen) != 0)
    return -1;
  int rc, stop = 0;
  while (!stop && (rc = dbi_step(st)) == SQLITE_ROW) {
    db_baseline_row r = {0};
    if (dbi_col_copy(st, 0, r.gpu, sizeof r.gpu) != 0 ||
        dbi_col_copy(st, 1, r.backend, sizeof r.backend) != 0 ||
        dbi_col_copy(st, 2, r.dtype, sizeof r.dtype) != 0 ||
        dbi_col_copy(st, 3, r.torch_version, sizeof r.torch_version) != 0 ||
        dbi_col_copy(st, 4, r.created, sizeof r.created) != 0)
      continue;
    /* Integers out of int's range read as 0, which the checks refuse. */
    int *ints[] = {&r.dim, &r.seq_q, &r.seq_k, &r.batch, &r.heads, &r.causal};
    for (int i = 0; i < 6; i++) {
      const sqlite3_int64 v = sqlite3_column_int64(st, 5 + i);
      *ints[i] = sqlite3_column_type(st, 5 + i) == SQLITE_INTEGER && v >= 0 && v <= 1 << 24
                   ? (int)v : -1;
    }
    r.median_us = dbi_col_real(st, 11);
    r.tflops = dbi_col_real(st, 12);
    const db_baseline b = {r.gpu, r.backend, r.dtype, r.dim, r.seq_q, r.seq_k, r.batch,
                           r.heads, r.causal, r.median_us, r.tflops, r.torch_version};
    if (!baseline_why(&b)) stop = fn(&r, ud);
  }
  dbi_finalize(st);
  if (!stop && rc != SQLITE_DONE) return dbi_sqlfail(d->h, err, errlen, "reading the baselines");
  return 0;
}
