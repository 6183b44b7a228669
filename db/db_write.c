/*
** db_write.c
** Devices, variants, the compile cache and trials: each public write is
** one BEGIN IMMEDIATE transaction. The upserts look first without the
** write lock, since after the first run of a tuner the row is nearly
** always there.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db_int.h"
#include "fa_problem.h"

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* Evaluates call (0 or -1) between BEGIN IMMEDIATE and COMMIT, rolling
** back when it fails. */
#define IN_TX(h, err, errlen, call) \
  (dbi_begin((h), (err), (errlen)) != 0 ? -1 \
   : (call) != 0 ? (dbi_rollback(h), -1) \
   : dbi_commit((h), (err), (errlen)))

/* ---- Checks of what callers pass ---- */

static int nonempty(const char *s) { return s && *s; }

static int check_problem(const db_problem *p, char *err, size_t errlen) {
  if (!nonempty(p->dtype) || p->dim < 1 || p->seq_q < 1 || p->seq_k < 1 || p->batch < 1 ||
      p->heads < 1 || (p->causal != 0 && p->causal != 1) || p->req_seq_q < 0 ||
      p->dim_v < 0 || p->dim_v > FA_DIM_MAX ||
      p->req_seq_k < 0 || (p->arch && strlen(p->arch) > 15) || p->req_batch < 0 ||
      p->kv_group < 0 || p->page < 0)
    return dbi_fail(err, errlen, "bad problem for the database (dtype %s, dim %d, seq %d/%d, "
                    "batch %d, heads %d, causal %d, requested batch %d, kv_group %d, page %d)",
                    p->dtype ? p->dtype : "(none)", p->dim, p->seq_q, p->seq_k, p->batch,
                    p->heads, p->causal, p->req_batch, p->kv_group, p->page);
  return 0;
}

static int check_status(const char *s, char *err, size_t errlen) {
  static const char *const known[] = {"ok", "invalid", "compile_error", "crashed", "timeout"};
  for (size_t i = 0; s && i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(s, known[i])) return 0;
  return dbi_fail(err, errlen, "unknown trial status '%s'", s ? s : "(none)");
}

/* ---- Devices ---- */

static const char *device_uuid(const db_device *dev) {
  return nonempty(dev->uuid) ? dev->uuid : dev->name;
}

/* found: 0 no row, 1 the same row, 2 a row whose details differ. */
static int device_find(sqlite3 *h, const db_device *dev, long long *id, int *found, char *err,
                       size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(h, "SELECT id, name, cc_major, cc_minor, sm_count, smem_per_block_optin, "
                     "l2_bytes FROM devices WHERE uuid = ? AND backend = ?",
                  &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_text(&b, device_uuid(dev));
  dbi_bind_text(&b, dev->backend);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  *found = 0;
  if (rc == SQLITE_ROW) {
    *id = sqlite3_column_int64(st, 0);
    int same = !strcmp(dbi_col_text(st, 1), dev->name) &&
               sqlite3_column_int(st, 2) == dev->cc_major &&
               sqlite3_column_int(st, 3) == dev->cc_minor &&
               sqlite3_column_int(st, 4) == dev->sm_count &&
               sqlite3_column_int(st, 5) == dev->smem_per_block_optin &&
               sqlite3_column_int64(st, 6) == dev->l2_bytes;
    *found = same ? 1 : 2;
  }
  dbi_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbi_sqlfail(h, err, errlen, "reading devices");
  return 0;
}

static int device_write(sqlite3 *h, const db_device *dev, long long id, char *err,
                        size_t errlen) {
  static const char insert[] =
    "INSERT INTO devices (name, cc_major, cc_minor, sm_count, smem_per_block_optin, "
    "l2_bytes, uuid, backend) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
  static const char update[] =
    "UPDATE devices SET name = ?, cc_major = ?, cc_minor = ?, sm_count = ?, "
    "smem_per_block_optin = ?, l2_bytes = ? WHERE id = ?";
  sqlite3_stmt *st;
  if (dbi_prepare(h, id ? update : insert, &st, err, errlen) != 0) return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_text(&b, dev->name);
  dbi_bind_int(&b, dev->cc_major);
  dbi_bind_int(&b, dev->cc_minor);
  dbi_bind_int(&b, dev->sm_count);
  dbi_bind_int(&b, dev->smem_per_block_optin);
  dbi_bind_int(&b, dev->l2_bytes);
  if (id) {
    dbi_bind_int(&b, id);
  } else {
    dbi_bind_text(&b, device_uuid(dev));
    dbi_bind_text(&b, dev->backend);
  }
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(h, err, errlen, "recording a device");
}

int dbi_device_upsert(sqlite3 *h, const db_device *dev, int refresh, long long *id,
                      int *added, char *err, size_t errlen) {
  int found;
  *added = 0;
  if (device_find(h, dev, id, &found, err, errlen) != 0) return -1;
  if (found == 0) {
    if (device_write(h, dev, 0, err, errlen) != 0) return -1;
    *id = sqlite3_last_insert_rowid(h);
    *added = 1;
  } else if (found == 2 && refresh) {
    return device_write(h, dev, *id, err, errlen);
  }
  return 0;
}

static int check_device(const db_device *dev, char *err, size_t errlen) {
  if (!nonempty(dev->name)) return dbi_fail(err, errlen, "a device needs a name");
  if (!dev->backend || (strcmp(dev->backend, "cuda") && strcmp(dev->backend, "emu")))
    return dbi_fail(err, errlen, "unknown device backend '%s' (cuda or emu)",
                    dev->backend ? dev->backend : "(none)");
  return 0;
}

int db_device_id(db *d, const db_device *dev, long long *id, char *err, size_t errlen) {
  int found, added;
  if (check_device(dev, err, errlen) != 0 || device_find(d->h, dev, id, &found, err, errlen) != 0)
    return -1;
  if (found == 1) return 0;
  return IN_TX(d->h, err, errlen, dbi_device_upsert(d->h, dev, 1, id, &added, err, errlen));
}

/* ---- Variants ---- */

static int variant_find(sqlite3 *h, const db_variant *v, long long *id, int *found, char *err,
                        size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(h, "SELECT id FROM variants WHERE template_version = ? AND hash = ?", &st,
                  err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_text(&b, v->template_version);
  dbi_bind_text(&b, v->hash);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  *found = rc == SQLITE_ROW;
  if (*found) *id = sqlite3_column_int64(st, 0);
  dbi_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbi_sqlfail(h, err, errlen, "reading variants");
  return 0;
}

int dbi_variant_upsert(sqlite3 *h, const db_variant *v, const char *config_json, long long *id,
                       int *added, char *err, size_t errlen) {
  int found;
  *added = 0;
  if (variant_find(h, v, id, &found, err, errlen) != 0) return -1;
  if (found) return 0;
  sqlite3_stmt *st;
  if (dbi_prepare(h, "INSERT INTO variants (family, template_version, name, hash, config, "
                     "source_hash, op, mod, mod_label) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", &st,
                  err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_text(&b, v->family);
  dbi_bind_text(&b, v->template_version);
  dbi_bind_text(&b, v->name);
  dbi_bind_text(&b, v->hash);
  dbi_bind_text(&b, config_json);
  dbi_bind_text(&b, v->source_hash);
  dbi_bind_text(&b, v->op ? v->op : "fwd");
  dbi_bind_text(&b, v->mod ? v->mod : "");
  dbi_bind_text(&b, v->mod_label ? v->mod_label : "");
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  if (rc != SQLITE_DONE) return dbi_sqlfail(h, err, errlen, "recording a variant");
  *id = sqlite3_last_insert_rowid(h);
  *added = 1;
  return 0;
}

int db_variant_id(db *d, const db_variant *v, long long *id, char *err, size_t errlen) {
  int found, added;
  if (!nonempty(v->family) || !nonempty(v->template_version) || !nonempty(v->name) ||
      !nonempty(v->hash) || !v->config || v->config[0] != '{' || !nonempty(v->source_hash))
    return dbi_fail(err, errlen, "a variant needs a family, template version, name, hash, "
                    "config (a JSON object) and source hash");
  if (variant_find(d->h, v, id, &found, err, errlen) != 0) return -1;
  if (found) return 0;
  return IN_TX(d->h, err, errlen,
               dbi_variant_upsert(d->h, v, v->config, id, &added, err, errlen));
}

/* ---- The compile cache ---- */

static int check_key(const db_binary_key *k, char *err, size_t errlen) {
  if (!nonempty(k->source_hash) || !nonempty(k->target) || !k->compiler_version || !k->options)
    return dbi_fail(err, errlen, "a binary's key needs a source hash, target, compiler "
                    "version and options");
  return 0;
}

static void bind_key(dbi_binder *b, const db_binary_key *k) {
  dbi_bind_text(b, k->source_hash);
  dbi_bind_text(b, k->target);
  dbi_bind_text(b, k->compiler_version);
  dbi_bind_text(b, k->options);
}

static int binary_write(sqlite3 *h, const db_binary_key *k, const db_binary *bin,
                        const unsigned char *mac, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(h, "INSERT INTO binaries (source_hash, target, compiler_version, options, "
                     "blob, mac, registers, spill_bytes, smem_bytes, compile_ms, created) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " NOW ") "
                     "ON CONFLICT (source_hash, target, compiler_version, options) DO UPDATE "
                     "SET blob = excluded.blob, mac = excluded.mac, "
                     "registers = excluded.registers, spill_bytes = excluded.spill_bytes, "
                     "smem_bytes = excluded.smem_bytes, compile_ms = excluded.compile_ms, "
                     "created = excluded.created", &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  bind_key(&b, k);
  dbi_bind_blob(&b, bin->data, bin->size);
  dbi_bind_blob(&b, mac, DBI_MAC_BYTES);
  dbi_bind_int(&b, bin->registers);
  dbi_bind_int(&b, bin->spill_bytes);
  dbi_bind_int(&b, bin->smem_bytes);
  dbi_bind_real(&b, bin->compile_ms);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(h, err, errlen, "storing a binary");
}

int db_binary_put(db *d, const db_binary_key *k, const db_binary *bin, char *err,
                  size_t errlen) {
  unsigned char mac[DBI_MAC_BYTES];
  if (check_key(k, err, errlen) != 0) return -1;
  if (!bin->data || bin->size == 0) return dbi_fail(err, errlen, "an empty binary");
  if (dbi_key(d, err, errlen) != 0) return -1;
  if (dbi_mac(d, k, bin->data, bin->size, mac) != 0)
    return dbi_fail(err, errlen, "cannot compute a binary's MAC");
  return IN_TX(d->h, err, errlen, binary_write(d->h, k, bin, mac, err, errlen));
}

/* Copies the row's blob into out when its MAC verifies under d's key. */
static int read_binary(db *d, sqlite3_stmt *st, const db_binary_key *k, db_binary *out,
                       int *found, char *err, size_t errlen) {
  const void *blob = sqlite3_column_blob(st, 0), *mac = sqlite3_column_blob(st, 1);
  int n = sqlite3_column_bytes(st, 0), maclen = sqlite3_column_bytes(st, 1);
  if ((!blob && n > 0) || (!mac && maclen > 0))
    return dbi_sqlfail(d->h, err, errlen, "reading a binary");
  if (n == 0 || !dbi_mac_verify(d, k, blob, (size_t)n, mac, (size_t)maclen)) {
    out->untrusted = 1;
    dbi_fail(err, errlen, "binary cache entry not trusted (source %s, %s): this installation "
             "did not store it (its MAC does not verify), so it is not loaded",
             k->source_hash, k->target);
    return 0;
  }
  out->data = malloc((size_t)n);
  if (!out->data) return dbi_fail(err, errlen, "out of memory");
  memcpy(out->data, blob, (size_t)n);
  out->size = (size_t)n;
  out->registers = sqlite3_column_int(st, 2);
  out->spill_bytes = sqlite3_column_int(st, 3);
  out->smem_bytes = sqlite3_column_int(st, 4);
  out->compile_ms = dbi_col_real(st, 5);
  *found = 1;
  return 0;
}

int db_binary_get(db *d, const db_binary_key *k, db_binary *out, int *found, char *err,
                  size_t errlen) {
  memset(out, 0, sizeof *out);
  *found = 0;
  if (check_key(k, err, errlen) != 0 || dbi_key(d, err, errlen) != 0) return -1;
  sqlite3_stmt *st;
  if (dbi_prepare(d->h, "SELECT blob, mac, registers, spill_bytes, smem_bytes, compile_ms "
                        "FROM binaries WHERE source_hash = ? AND target = ? AND "
                        "compiler_version = ? AND options = ?", &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  bind_key(&b, k);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc, status = 0;
  if (rc == SQLITE_ROW) status = read_binary(d, st, k, out, found, err, errlen);
  else if (rc != SQLITE_DONE) status = dbi_sqlfail(d->h, err, errlen, "reading a binary");
  dbi_finalize(st);
  return status;
}

void db_binary_free(db_binary *b) {
  free(b->data);
  b->data = NULL;
  b->size = 0;
}

/* ---- Trials ---- */

/* The key's columns, in DBI_TRIAL_KEY_MATCH's order: variant_id,
** device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q, seq_k, batch,
** heads, causal, req_batch, kv_group, page. */
void dbi_bind_trial_key(dbi_binder *b, long long variant_id, long long device_id,
                        const db_problem *p) {
  dbi_bind_int(b, variant_id);
  dbi_bind_int(b, device_id);
  dbi_bind_text(b, p->arch ? p->arch : "");
  dbi_bind_text(b, p->dtype);
  dbi_bind_int(b, p->dim);
  dbi_bind_int(b, p->req_seq_q ? p->req_seq_q : p->seq_q);
  dbi_bind_int(b, p->req_seq_k ? p->req_seq_k : p->seq_k);
  dbi_bind_int(b, p->seq_q);
  dbi_bind_int(b, p->seq_k);
  dbi_bind_int(b, p->batch);
  dbi_bind_int(b, p->heads);
  dbi_bind_int(b, p->causal);
  dbi_bind_int(b, p->req_batch);
  dbi_bind_int(b, p->kv_group ? p->kv_group : 1);
  dbi_bind_int(b, p->page);
}

int db_trial_done(db *d, long long variant_id, long long device_id, const db_problem *p,
                  int *done, char *err, size_t errlen) {
  *done = 0;
  if (check_problem(p, err, errlen) != 0) return -1;
  sqlite3_stmt *st;
  if (dbi_prepare(d->h, "SELECT 1 FROM trials WHERE " DBI_TRIAL_KEY_MATCH, &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_trial_key(&b, variant_id, device_id, p);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbi_sqlfail(d->h, err, errlen, "reading trials");
  *done = rc == SQLITE_ROW;
  return 0;
}

int dbi_trial_write(sqlite3 *h, const db_trial *t, const char *fatune_version,
                    const char *created, char *err, size_t errlen) {
  sqlite3_stmt *st;
  if (dbi_prepare(h,
        "INSERT INTO trials (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, "
        "seq_q, seq_k, batch, heads, causal, req_batch, kv_group, page, status, message, "
        "max_abs_err, rel_err, lse_err, median_us, min_us, p20_us, p80_us, tflops, gbps, "
        "counters, seed, fatune_version, compiler, suite_cases, suite_err, suite_failed, deterministic, created, dim_v) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?, ?, coalesce(?, " NOW "), ?) "
        "ON CONFLICT (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q, "
        "seq_k, req_batch, batch, heads, kv_group, page, causal) "
        "DO UPDATE SET status = excluded.status, message = excluded.message, "
        "max_abs_err = excluded.max_abs_err, rel_err = excluded.rel_err, "
        "lse_err = excluded.lse_err, median_us = excluded.median_us, "
        "min_us = excluded.min_us, p20_us = excluded.p20_us, p80_us = excluded.p80_us, "
        "tflops = excluded.tflops, gbps = excluded.gbps, counters = excluded.counters, "
        "seed = excluded.seed, fatune_version = excluded.fatune_version, "
        "compiler = excluded.compiler, suite_cases = excluded.suite_cases, "
        "suite_err = excluded.suite_err, suite_failed = excluded.suite_failed, "
        "deterministic = excluded.deterministic, created = excluded.created, "
        "dim_v = excluded.dim_v",
        &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_trial_key(&b, t->variant_id, t->device_id, &t->problem);
  dbi_bind_text(&b, t->status);
  dbi_bind_text(&b, t->message);
  const double m[] = {t->max_abs_err, t->rel_err, t->lse_err, t->median_us, t->min_us,
                      t->p20_us, t->p80_us, t->tflops, t->gbps};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) dbi_bind_real(&b, m[i]);
  dbi_bind_text(&b, t->counters);
  if (t->seeded) dbi_bind_int(&b, (long long)t->seed);   /* the bits, as SQLite's int64 */
  else dbi_bind_text(&b, NULL);
  dbi_bind_text(&b, fatune_version);
  dbi_bind_text(&b, t->compiler);
  if (t->suite_cases > 0) {
    dbi_bind_int(&b, t->suite_cases);
    dbi_bind_real(&b, t->suite_err);
    dbi_bind_text(&b, t->suite_failed ? t->suite_failed : "");
  } else {
    for (int i = 0; i < 3; i++) dbi_bind_text(&b, NULL);
  }
  if (t->deterministic == DB_DET_YES || t->deterministic == DB_DET_NO)
    dbi_bind_int(&b, t->deterministic == DB_DET_YES);
  else
    dbi_bind_text(&b, NULL);
  dbi_bind_text(&b, created);
  dbi_bind_int(&b, t->problem.dim_v == t->problem.dim ? 0 : t->problem.dim_v);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  dbi_finalize(st);
  return rc == SQLITE_DONE ? 0 : dbi_sqlfail(h, err, errlen, "recording a trial");
}

int db_trial_put(db *d, const db_trial *t, char *err, size_t errlen) {
  if (check_problem(&t->problem, err, errlen) != 0 || check_status(t->status, err, errlen) != 0)
    return -1;
  return IN_TX(d->h, err, errlen,
               dbi_trial_write(d->h, t, DB_FATUNE_VERSION, NULL, err, errlen));
}

int db_trial_get(db *d, long long variant_id, long long device_id, const db_problem *p,
                 db_recorded *out, int *found, char *err, size_t errlen) {
  *found = 0;
  memset(out, 0, sizeof *out);
  if (check_problem(p, err, errlen) != 0) return -1;
  sqlite3_stmt *st;
  if (dbi_prepare(d->h, "SELECT status, message, max_abs_err, rel_err, lse_err, median_us, "
                        "min_us, p20_us, p80_us, tflops, gbps, counters, seed, created, "
                        "suite_cases, suite_err, suite_failed, deterministic "
                        "FROM trials WHERE " DBI_TRIAL_KEY_MATCH, &st, err, errlen) != 0)
    return -1;
  dbi_binder b = dbi_bind_start(st);
  dbi_bind_trial_key(&b, variant_id, device_id, p);
  int rc = b.rc == SQLITE_OK ? dbi_step(st) : b.rc;
  if (rc == SQLITE_ROW) {
    db_trial *t = &out->t;
    t->variant_id = variant_id, t->device_id = device_id, t->problem = *p;
    /* Text too long for the buffers is cut: this is for display. */
    snprintf(out->status, sizeof out->status, "%s", dbi_col_text(st, 0) ? dbi_col_text(st, 0) : "");
    snprintf(out->message, sizeof out->message, "%s",
             dbi_col_text(st, 1) ? dbi_col_text(st, 1) : "");
    double *m[] = {&t->max_abs_err, &t->rel_err, &t->lse_err, &t->median_us, &t->min_us,
                   &t->p20_us, &t->p80_us, &t->tflops, &t->gbps};
    for (int i = 0; i < 9; i++) *m[i] = dbi_col_real(st, 2 + i);
    snprintf(out->counters, sizeof out->counters, "%s",
             dbi_col_text(st, 11) ? dbi_col_text(st, 11) : "");
    t->seeded = sqlite3_column_type(st, 12) == SQLITE_INTEGER;
    t->seed = (unsigned long long)sqlite3_column_int64(st, 12);
    snprintf(out->created, sizeof out->created, "%s",
             dbi_col_text(st, 13) ? dbi_col_text(st, 13) : "");
    t->status = out->status, t->message = out->message[0] ? out->message : NULL;
    t->counters = out->counters[0] ? out->counters : NULL;
    t->suite_cases = sqlite3_column_int(st, 14);
    t->suite_err = dbi_col_real(st, 15);
    snprintf(out->suite_failed, sizeof out->suite_failed, "%s",
             dbi_col_text(st, 16) ? dbi_col_text(st, 16) : "");
    t->suite_failed = out->suite_failed;
    t->deterministic = sqlite3_column_type(st, 17) != SQLITE_INTEGER ? DB_DET_UNKNOWN
                       : sqlite3_column_int(st, 17)                ? DB_DET_YES
                                                                   : DB_DET_NO;
    *found = 1;
  }
  dbi_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return dbi_sqlfail(d->h, err, errlen, "reading trials");
  return 0;
}
