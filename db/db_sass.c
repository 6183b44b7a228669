/*
** db_sass.c
** The sass table (schema version 3): a variant's SASS figures for a target
** and its throughput estimate, written by the main job, read by the report.
*/
#include <math.h>
#include <string.h>

#include "db_int.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

static int check_sass(const db_sass *s, char *err, size_t errlen) {
  const long long c[] = {s->loop_instructions, s->loop_hmma, s->loop_mufu, s->loop_ldsm,
                         s->loop_lds, s->loop_ldgsts, s->loop_bar, s->loop_shfl, s->loop_local,
                         s->loop_int};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    if (c[i] < 0) return dbi_fail(err, errlen, "SASS figures: a negative count");
  if (!s->target || !*s->target || !s->mma || !*s->mma)
    return dbi_fail(err, errlen, "SASS figures: no target or product instruction");
  return 0;
}

int db_sass_put(db *d, const db_sass *s, char *err, size_t errlen) {
  if (check_sass(s, err, errlen) != 0) return -1;
  sqlite3_stmt *st;
  if (dbi_prepare(d->h,
        "INSERT OR REPLACE INTO sass (variant_id, target, gpu, mma, registers, "
        "loop_instructions, loop_hmma, loop_mufu, loop_ldsm, loop_lds, loop_ldgsts, loop_bar, "
        "loop_shfl, loop_local, loop_int, non_mma_per_mma, ctas_per_sm, bound, est_tflops, "
        "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " NOW ")",
        &st, err, errlen) != 0)
    return -1;
  const int est = s->ctas_per_sm >= 0;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_int(&b, s->variant_id);
  dbi_bind_text(&b, s->target);
  dbi_bind_text(&b, s->gpu ? s->gpu : "");
  dbi_bind_text(&b, s->mma);
  if (s->registers >= 0) dbi_bind_int(&b, s->registers);
  else dbi_bind_text(&b, NULL);
  const long long c[] = {s->loop_instructions, s->loop_hmma, s->loop_mufu, s->loop_ldsm,
                         s->loop_lds, s->loop_ldgsts, s->loop_bar, s->loop_shfl, s->loop_local,
                         s->loop_int};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) dbi_bind_int(&b, c[i]);
  dbi_bind_real(&b, s->non_mma_per_mma);
  if (est) dbi_bind_int(&b, s->ctas_per_sm);
  else dbi_bind_text(&b, NULL);
  dbi_bind_text(&b, est ? s->bound : NULL);
  dbi_bind_real(&b, est ? s->est_tflops : NAN);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(d->h, err, errlen, "recording SASS figures");
}

int db_sass_points(db *d, db_sass_point_fn fn, void *ud, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(d->h,
        "SELECT dv.name, s.gpu, t.dtype, t.dim, t.causal, t.seq_q, t.tflops, s.est_tflops, "
        "s.registers, s.ctas_per_sm, t.dim_v "
        "FROM trials t JOIN devices dv ON dv.id = t.device_id "
        "JOIN sass s ON s.variant_id = t.variant_id "
        "WHERE dv.backend = 'cuda' AND t.status = 'ok' AND t.tflops > 0 "
        "AND s.est_tflops > 0 AND s.gpu != '' ORDER BY t.id",
        &st, err, errlen) != 0)
    return -1;
  int rc, stop = 0;
  while (!stop && (rc = dbi_step(st)) == SQLITE_ROW) {
    db_sass_point p = {0};
    /* A text too long for its field is no GPU's nor dtype's: skipped. */
    if (dbi_col_copy(st, 0, p.device, sizeof p.device) != 0 ||
        dbi_col_copy(st, 1, p.gpu, sizeof p.gpu) != 0 ||
        dbi_col_copy(st, 2, p.dtype, sizeof p.dtype) != 0)
      continue;
    p.dim = sqlite3_column_int(st, 3);
    p.causal = sqlite3_column_int(st, 4);
    p.seq_q = sqlite3_column_int(st, 5);
    p.measured_tflops = dbi_col_real(st, 6);
    p.est_tflops = dbi_col_real(st, 7);
    p.registers = sqlite3_column_type(st, 8) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 8);
    p.ctas_per_sm = sqlite3_column_int(st, 9);   /* not NULL where est_tflops is not */
    p.dim_v = sqlite3_column_int(st, 10);
    if (isfinite(p.measured_tflops) && isfinite(p.est_tflops)) stop = fn(&p, ud);
  }
  dbi_finalize(st);
  if (!stop && rc != SQLITE_DONE) return dbi_sqlfail(d->h, err, errlen, "reading SASS figures");
  return 0;
}
