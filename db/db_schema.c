/*
** db_schema.c
** The schema, as forward migrations: steps[v] takes a file from schema
** version v to v + 1 (version 0 is an empty file). To change the schema,
** append a step and raise DB_SCHEMA_VERSION in db.h; never edit a step a
** released fatune has run, since files out there already went through it.
*/
#include <stdio.h>

#include "db_int.h"

/* Version 1. Timestamps are ISO 8601 UTC text with milliseconds, so they
** sort as they compare. A device is unique on (uuid, backend), the name
** standing in for a GPU without a UUID; the emulator's uuid is "emu". */
static const char schema_v1[] =
  "CREATE TABLE devices (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  name TEXT NOT NULL,\n"
  "  uuid TEXT NOT NULL,\n"
  "  backend TEXT NOT NULL CHECK (backend IN ('cuda', 'emu')),\n"
  "  cc_major INTEGER NOT NULL,\n"
  "  cc_minor INTEGER NOT NULL,\n"
  "  sm_count INTEGER NOT NULL,\n"
  "  smem_per_block_optin INTEGER NOT NULL,\n"
  "  l2_bytes INTEGER NOT NULL,\n"
  "  UNIQUE (uuid, backend));\n"
  "CREATE TABLE variants (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  family TEXT NOT NULL,\n"
  "  template_version TEXT NOT NULL,\n"
  "  name TEXT NOT NULL,\n"
  "  hash TEXT NOT NULL,\n"
  "  config TEXT NOT NULL CHECK (json_valid(config)),\n"
  "  source_hash TEXT NOT NULL,\n"
  "  UNIQUE (template_version, hash));\n"
  /* The compile cache; checksum is FNV-1a 64 of blob in 16 hex digits. */
  "CREATE TABLE binaries (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  source_hash TEXT NOT NULL,\n"
  "  target TEXT NOT NULL,\n"
  "  compiler_version TEXT NOT NULL,\n"
  "  options TEXT NOT NULL,\n"
  "  blob BLOB NOT NULL,\n"
  "  checksum TEXT NOT NULL,\n"
  "  registers INTEGER,\n"
  "  spill_bytes INTEGER,\n"
  "  smem_bytes INTEGER,\n"
  "  compile_ms REAL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (source_hash, target, compiler_version, options));\n"
  "CREATE TABLE trials (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  variant_id INTEGER NOT NULL REFERENCES variants(id),\n"
  "  device_id INTEGER NOT NULL REFERENCES devices(id),\n"
  "  dtype TEXT NOT NULL,\n"
  "  dim INTEGER NOT NULL,\n"
  "  seq_q INTEGER NOT NULL,\n"
  "  seq_k INTEGER NOT NULL,\n"
  "  batch INTEGER NOT NULL,\n"
  "  heads INTEGER NOT NULL,\n"
  "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
  "  status TEXT NOT NULL\n"
  "    CHECK (status IN ('ok', 'invalid', 'compile_error', 'crashed', 'timeout')),\n"
  "  message TEXT,\n"
  "  max_abs_err REAL,\n"
  "  rel_err REAL,\n"
  "  lse_err REAL,\n"
  "  median_us REAL,\n"
  "  min_us REAL,\n"
  "  p20_us REAL,\n"
  "  p80_us REAL,\n"
  "  tflops REAL,\n"
  "  gbps REAL,\n"
  "  counters TEXT CHECK (counters IS NULL OR json_valid(counters)),\n"
  "  fatune_version TEXT NOT NULL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, causal));\n"
  "CREATE INDEX trials_by_key ON trials (dtype, dim, causal, seq_q, seq_k);\n"
  /* The best ok trial per key: the smallest median time where the trial
  ** was timed (a GPU); an emulator trial has no time, and its exact count
  ** of global-memory bytes read and written ranks it instead (fewer is
  ** better), a fair proxy for a memory-bound kernel. Timed trials come
  ** first; ties go to the variant recorded first (the tuner records
  ** variants in the order it lists them), then to the earlier trial. */
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, dtype, dim, seq_q, seq_k, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT *, json_extract(counters, '$.global_bytes_read')\n"
  "                  + json_extract(counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials WHERE status = 'ok'))\n"
  "WHERE rank = 1;\n";

/* Version 2. A cached binary carries a keyed MAC (db_mac.c) instead of the
** FNV-1a checksum, which anyone could recompute for a forged blob. An
** entry without a MAC cannot be trusted, so the cache starts empty: its
** kernels are compiled again when next needed. */
static const char schema_v2[] =
  "DROP TABLE binaries;\n"
  "CREATE TABLE binaries (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  source_hash TEXT NOT NULL,\n"
  "  target TEXT NOT NULL,\n"
  "  compiler_version TEXT NOT NULL,\n"
  "  options TEXT NOT NULL,\n"
  "  blob BLOB NOT NULL,\n"
  "  mac BLOB NOT NULL,\n"
  "  registers INTEGER,\n"
  "  spill_bytes INTEGER,\n"
  "  smem_bytes INTEGER,\n"
  "  compile_ms REAL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (source_hash, target, compiler_version, options));\n";

/* Version 3. The key of a trial holds what was asked as well as what ran:
** the target architecture (the code NVRTC compiled: registers and spills
** differ between sm_80 and sm_90) and the sequence lengths requested (the
** emulator runs a shorter one, and `show --seq 4096` must find it), and
** the trial keeps the seed of its inputs. Rows of version 2 keep their
** figures: their arch is '' (not recorded), their request what ran, their
** seed NULL. SQLite cannot change a UNIQUE constraint in place: the table
** is rebuilt, the view and index with it. */
static const char schema_v3[] =
  "DROP VIEW best;\n"
  "DROP INDEX trials_by_key;\n"
  "ALTER TABLE trials RENAME TO trials_v2;\n"
  "CREATE TABLE trials (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  variant_id INTEGER NOT NULL REFERENCES variants(id),\n"
  "  device_id INTEGER NOT NULL REFERENCES devices(id),\n"
  "  arch TEXT NOT NULL,\n"
  "  dtype TEXT NOT NULL,\n"
  "  dim INTEGER NOT NULL,\n"
  "  req_seq_q INTEGER NOT NULL,\n"
  "  req_seq_k INTEGER NOT NULL,\n"
  "  seq_q INTEGER NOT NULL,\n"
  "  seq_k INTEGER NOT NULL,\n"
  "  batch INTEGER NOT NULL,\n"
  "  heads INTEGER NOT NULL,\n"
  "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
  "  status TEXT NOT NULL\n"
  "    CHECK (status IN ('ok', 'invalid', 'compile_error', 'crashed', 'timeout')),\n"
  "  message TEXT,\n"
  "  max_abs_err REAL,\n"
  "  rel_err REAL,\n"
  "  lse_err REAL,\n"
  "  median_us REAL,\n"
  "  min_us REAL,\n"
  "  p20_us REAL,\n"
  "  p80_us REAL,\n"
  "  tflops REAL,\n"
  "  gbps REAL,\n"
  "  counters TEXT CHECK (counters IS NULL OR json_valid(counters)),\n"
  "  seed INTEGER,\n"
  "  fatune_version TEXT NOT NULL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q, seq_k,\n"
  "          batch, heads, causal));\n"
  "INSERT INTO trials (id, variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k,\n"
  "    seq_q, seq_k, batch, heads, causal, status, message, max_abs_err, rel_err, lse_err,\n"
  "    median_us, min_us, p20_us, p80_us, tflops, gbps, counters, seed, fatune_version,\n"
  "    created)\n"
  "  SELECT id, variant_id, device_id, '', dtype, dim, seq_q, seq_k, seq_q, seq_k, batch,\n"
  "    heads, causal, status, message, max_abs_err, rel_err, lse_err, median_us, min_us,\n"
  "    p20_us, p80_us, tflops, gbps, counters, NULL, fatune_version, created FROM trials_v2;\n"
  "DROP TABLE trials_v2;\n"
  "CREATE INDEX trials_by_key ON trials (dtype, dim, causal, req_seq_q, req_seq_k);\n"
  /* As version 1's, per target and per sequence length asked. */
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, arch, dtype, dim, req_seq_q, req_seq_k, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT *, json_extract(counters, '$.global_bytes_read')\n"
  "                  + json_extract(counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials WHERE status = 'ok'))\n"
  "WHERE rank = 1;\n";

/* Version 4. The SASS figures of a variant's main loop for a target
** (tuner/analysis/sass.h), and the throughput estimate for a GPU (tuner/analysis/estimate.h;
** gpu '' when there is none), in a table of their own. */
static const char schema_v4[] =
  "CREATE TABLE sass (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  variant_id INTEGER NOT NULL REFERENCES variants(id),\n"
  "  target TEXT NOT NULL,\n"
  "  gpu TEXT NOT NULL,\n"
  "  mma TEXT NOT NULL,\n"
  "  registers INTEGER,\n"
  "  loop_instructions INTEGER NOT NULL CHECK (loop_instructions >= 0),\n"
  "  loop_hmma INTEGER NOT NULL CHECK (loop_hmma >= 0),\n"
  "  loop_mufu INTEGER NOT NULL CHECK (loop_mufu >= 0),\n"
  "  loop_ldsm INTEGER NOT NULL CHECK (loop_ldsm >= 0),\n"
  "  loop_lds INTEGER NOT NULL CHECK (loop_lds >= 0),\n"
  "  loop_ldgsts INTEGER NOT NULL CHECK (loop_ldgsts >= 0),\n"
  "  loop_bar INTEGER NOT NULL CHECK (loop_bar >= 0),\n"
  "  loop_shfl INTEGER NOT NULL CHECK (loop_shfl >= 0),\n"
  "  loop_local INTEGER NOT NULL CHECK (loop_local >= 0),\n"
  "  loop_int INTEGER NOT NULL CHECK (loop_int >= 0),\n"
  "  non_mma_per_mma REAL,\n"
  "  ctas_per_sm INTEGER,\n"
  "  bound TEXT,\n"
  "  est_tflops REAL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (variant_id, target, gpu));\n";

/* Version 5. PyTorch's attention timed on a GPU (scripts/gpu-check.sh runs
** it beside fatune, `fatune baseline` records it), so the report can draw
** fatune's TFLOP/s beside it. gpu is the device's name as the driver gives
** it, the same text as devices.name; backend is PyTorch's SDPA backend
** ("sdpa-flash", "sdpa-cudnn"); tflops is counted as fatune counts its
** trials' (attn_flops). A new measurement of the same key replaces the old. */
static const char schema_v5[] =
  "CREATE TABLE baselines (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  gpu TEXT NOT NULL CHECK (length(gpu) BETWEEN 1 AND 127),\n"
  "  backend TEXT NOT NULL CHECK (length(backend) BETWEEN 1 AND 31),\n"
  "  dtype TEXT NOT NULL CHECK (dtype IN ('fp32', 'fp64', 'fp16', 'bf16')),\n"
  "  dim INTEGER NOT NULL CHECK (dim BETWEEN 1 AND 256),\n"
  "  seq_q INTEGER NOT NULL CHECK (seq_q >= 1),\n"
  "  seq_k INTEGER NOT NULL CHECK (seq_k >= 1),\n"
  "  batch INTEGER NOT NULL CHECK (batch >= 1),\n"
  "  heads INTEGER NOT NULL CHECK (heads >= 1),\n"
  "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
  "  median_us REAL NOT NULL CHECK (median_us > 0),\n"
  "  tflops REAL NOT NULL CHECK (tflops > 0),\n"
  "  torch_version TEXT NOT NULL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (gpu, backend, dtype, dim, seq_q, seq_k, batch, heads, causal));\n";

/* Version 6. The operation a variant computes (fwd, bwd, decode): a
** variant's config names its family and the family its op, so the op is a
** column of the variant and the unique keys of variants and trials, which
** hold the config's hash and the variant, already tell ops apart. Every
** row of version 5 is a forward pass. The best variant is chosen per op. */
static const char schema_v6[] =
  "ALTER TABLE variants ADD COLUMN op TEXT NOT NULL DEFAULT 'fwd'\n"
  "  CHECK (op IN ('fwd', 'bwd', 'decode'));\n"
  "DROP VIEW best;\n"
  /* As version 3's, per op. */
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, op, arch, dtype, dim, req_seq_q, req_seq_k, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT t.*, v.op AS op, json_extract(t.counters, '$.global_bytes_read')\n"
  "                  + json_extract(t.counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials t JOIN variants v ON v.id = t.variant_id WHERE t.status = 'ok'))\n"
  "WHERE rank = 1;\n";

/* Version 7. What compiled a trial's code (NVRTC's version, or the host
** compiler's on the emulator): a figure depends on it. NULL in rows before. */
static const char schema_v7[] = "ALTER TABLE trials ADD COLUMN compiler TEXT;\n";

/* Version 8. The adversarial suite each trial met (how many cases, the
** worst error of those passed, the names of those failed) and whether its
** runs gave the same bits: what an error budget and a demand for
** determinism choose by. NULL in rows before. */
static const char schema_v8[] =
  "ALTER TABLE trials ADD COLUMN suite_cases INTEGER;\n"
  "ALTER TABLE trials ADD COLUMN suite_err REAL;\n"
  "ALTER TABLE trials ADD COLUMN suite_failed TEXT;\n"
  "ALTER TABLE trials ADD COLUMN deterministic INTEGER\n"
  "  CHECK (deterministic IS NULL OR deterministic IN (0, 1));\n";

/* Version 9. V's head dim where it differs from Q's and K's (192/128), 0
** where it does not, as configs and fa_problem hold it: a trial's variant
** names it (its config's dim_v), so the unique key already tells them
** apart; the best variant is chosen per (dim, dim_v). Every row before is
** 0, as is one another program writes without it. The baselines' dims
** reach FA_DIM_MAX (576), as fatune's own do since head dims past 256 came
** (rebuilt: SQLite cannot change a CHECK in place). */
static const char schema_v9[] =
  "ALTER TABLE trials ADD COLUMN dim_v INTEGER NOT NULL DEFAULT 0;\n"
  "DROP VIEW best;\n"
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, op, arch, dtype, dim, dim_v, req_seq_q, req_seq_k, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT t.*, v.op AS op, json_extract(t.counters, '$.global_bytes_read')\n"
  "                  + json_extract(t.counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials t JOIN variants v ON v.id = t.variant_id WHERE t.status = 'ok'))\n"
  "WHERE rank = 1;\n"
  "ALTER TABLE baselines RENAME TO baselines_v8;\n"
  "CREATE TABLE baselines (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  gpu TEXT NOT NULL CHECK (length(gpu) BETWEEN 1 AND 127),\n"
  "  backend TEXT NOT NULL CHECK (length(backend) BETWEEN 1 AND 31),\n"
  "  dtype TEXT NOT NULL CHECK (dtype IN ('fp32', 'fp64', 'fp16', 'bf16')),\n"
  "  dim INTEGER NOT NULL CHECK (dim BETWEEN 1 AND 576),\n"
  "  seq_q INTEGER NOT NULL CHECK (seq_q >= 1),\n"
  "  seq_k INTEGER NOT NULL CHECK (seq_k >= 1),\n"
  "  batch INTEGER NOT NULL CHECK (batch >= 1),\n"
  "  heads INTEGER NOT NULL CHECK (heads >= 1),\n"
  "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
  "  median_us REAL NOT NULL CHECK (median_us > 0),\n"
  "  tflops REAL NOT NULL CHECK (tflops > 0),\n"
  "  torch_version TEXT NOT NULL,\n"
  "  created TEXT NOT NULL,\n"
  "  UNIQUE (gpu, backend, dtype, dim, seq_q, seq_k, batch, heads, causal));\n"
  "INSERT INTO baselines SELECT * FROM baselines_v8;\n"
  "DROP TABLE baselines_v8;\n";

/* Version 10. The score or mask modification a variant applies
** (templates/mod.lua): its hash ('' for none), which the variant's hash
** already ends in, so that the unique keys of variants and trials tell
** them apart, and its label for people ("window=256:0"). The best variant
** is chosen per modification. Every row before applies none. */
static const char schema_v10[] =
  "ALTER TABLE variants ADD COLUMN mod TEXT NOT NULL DEFAULT '';\n"
  "ALTER TABLE variants ADD COLUMN mod_label TEXT NOT NULL DEFAULT '';\n"
  "DROP VIEW best;\n"
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, op, mod, arch, dtype, dim, dim_v, req_seq_q, req_seq_k, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT t.*, v.op AS op, v.mod AS mod, json_extract(t.counters, '$.global_bytes_read')\n"
  "                  + json_extract(t.counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials t JOIN variants v ON v.id = t.variant_id WHERE t.status = 'ok'))\n"
  "WHERE rank = 1;\n";

/* Version 11. Decoding's tuned choice depends on the batch asked for (the
** emulator runs a smaller one), the GQA ratio and the page size of the KV
** cache, so they join the key of a trial and the best view's partition:
** req_batch (0 where the key ignores the batch, as for fwd and bwd),
** kv_group (query heads per K/V head, 1 for none; bwd keys by it too,
** fwd keeps 1) and page (tokens per
** page, 0 for a contiguous cache). Every row before keeps its id and its
** figures with 0, 1 and 0. SQLite cannot change a UNIQUE constraint in
** place: the table is rebuilt as version 3 did, with every column version
** 10 has, the index and the view with it. */
static const char schema_v11[] =
  "DROP VIEW best;\n"
  "DROP INDEX trials_by_key;\n"
  "ALTER TABLE trials RENAME TO trials_v10;\n"
  "CREATE TABLE trials (\n"
  "  id INTEGER PRIMARY KEY,\n"
  "  variant_id INTEGER NOT NULL REFERENCES variants(id),\n"
  "  device_id INTEGER NOT NULL REFERENCES devices(id),\n"
  "  arch TEXT NOT NULL,\n"
  "  dtype TEXT NOT NULL,\n"
  "  dim INTEGER NOT NULL,\n"
  "  req_seq_q INTEGER NOT NULL,\n"
  "  req_seq_k INTEGER NOT NULL,\n"
  "  seq_q INTEGER NOT NULL,\n"
  "  seq_k INTEGER NOT NULL,\n"
  "  batch INTEGER NOT NULL,\n"
  "  heads INTEGER NOT NULL,\n"
  "  causal INTEGER NOT NULL CHECK (causal IN (0, 1)),\n"
  "  status TEXT NOT NULL\n"
  "    CHECK (status IN ('ok', 'invalid', 'compile_error', 'crashed', 'timeout')),\n"
  "  message TEXT,\n"
  "  max_abs_err REAL,\n"
  "  rel_err REAL,\n"
  "  lse_err REAL,\n"
  "  median_us REAL,\n"
  "  min_us REAL,\n"
  "  p20_us REAL,\n"
  "  p80_us REAL,\n"
  "  tflops REAL,\n"
  "  gbps REAL,\n"
  "  counters TEXT CHECK (counters IS NULL OR json_valid(counters)),\n"
  "  seed INTEGER,\n"
  "  fatune_version TEXT NOT NULL,\n"
  "  created TEXT NOT NULL,\n"
  "  compiler TEXT,\n"
  "  suite_cases INTEGER,\n"
  "  suite_err REAL,\n"
  "  suite_failed TEXT,\n"
  "  deterministic INTEGER\n"
  "    CHECK (deterministic IS NULL OR deterministic IN (0, 1)),\n"
  "  dim_v INTEGER NOT NULL DEFAULT 0,\n"
  "  req_batch INTEGER NOT NULL DEFAULT 0 CHECK (req_batch >= 0),\n"
  "  kv_group INTEGER NOT NULL DEFAULT 1 CHECK (kv_group >= 1),\n"
  "  page INTEGER NOT NULL DEFAULT 0 CHECK (page >= 0),\n"
  "  UNIQUE (variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q, seq_k,\n"
  "          req_batch, batch, heads, kv_group, page, causal));\n"
  "INSERT INTO trials (id, variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k,\n"
  "    seq_q, seq_k, batch, heads, causal, status, message, max_abs_err, rel_err, lse_err,\n"
  "    median_us, min_us, p20_us, p80_us, tflops, gbps, counters, seed, fatune_version,\n"
  "    created, compiler, suite_cases, suite_err, suite_failed, deterministic, dim_v,\n"
  "    req_batch, kv_group, page)\n"
  "  SELECT id, variant_id, device_id, arch, dtype, dim, req_seq_q, req_seq_k, seq_q, seq_k,\n"
  "    batch, heads, causal, status, message, max_abs_err, rel_err, lse_err, median_us,\n"
  "    min_us, p20_us, p80_us, tflops, gbps, counters, seed, fatune_version, created,\n"
  "    compiler, suite_cases, suite_err, suite_failed, deterministic, dim_v, 0, 1, 0\n"
  "  FROM trials_v10;\n"
  "DROP TABLE trials_v10;\n"
  "CREATE INDEX trials_by_key ON trials (dtype, dim, causal, req_seq_q, req_seq_k);\n"
  /* As version 10's, per batch asked, GQA ratio and page size. */
  "CREATE VIEW best AS\n"
  "SELECT * FROM (\n"
  "  SELECT *, row_number() OVER (\n"
  "      PARTITION BY device_id, op, mod, arch, dtype, dim, dim_v, req_seq_q, req_seq_k,\n"
  "                   req_batch, kv_group, page, causal\n"
  "      ORDER BY median_us IS NULL, median_us, global_bytes IS NULL, global_bytes,\n"
  "               variant_id, id)\n"
  "    AS rank\n"
  "  FROM (SELECT t.*, v.op AS op, v.mod AS mod, json_extract(t.counters, '$.global_bytes_read')\n"
  "                  + json_extract(t.counters, '$.global_bytes_written') AS global_bytes\n"
  "        FROM trials t JOIN variants v ON v.id = t.variant_id WHERE t.status = 'ok'))\n"
  "WHERE rank = 1;\n";

static const char *const steps[] = {schema_v1, schema_v2, schema_v3, schema_v4, schema_v5,
                                    schema_v6, schema_v7, schema_v8, schema_v9, schema_v10,
                                    schema_v11};

_Static_assert(sizeof steps / sizeof steps[0] == DB_SCHEMA_VERSION,
               "one migration step per schema version");

int dbi_migrate(sqlite3 *h, int from, char *err, size_t errlen) {
  return dbi_migrate_to(h, from, DB_SCHEMA_VERSION, err, errlen);
}

int dbi_migrate_to(sqlite3 *h, int from, int to, char *err, size_t errlen) {
  if (from >= to || to > DB_SCHEMA_VERSION) return 0;
  for (int v = from; v < to; v++) {
    char *msg = NULL;
    if (sqlite3_exec(h, steps[v], NULL, NULL, &msg) != SQLITE_OK) {
      dbi_fail(err, errlen, "migrating the database to schema %d: %s", v + 1,
               msg ? msg : sqlite3_errmsg(h));
      sqlite3_free(msg);
      return -1;
    }
  }
  char sql[48];
  snprintf(sql, sizeof sql, "PRAGMA user_version = %d", to);
  return dbi_exec(h, sql, err, errlen);
}
