/*
** db_int.h
** What the db_*.c files share and nothing else sees: the handle, checked
** statement helpers, transactions with retries, the migrations, the
** compile cache's key and MAC.
*/
#ifndef DB_INT_H
#define DB_INT_H

#include <sqlite3.h>

#include "db.h"
#include "fa_util.h"

#define DBI_KEY_BYTES 32   /* the compile cache's secret key (db_mac.c) */
#define DBI_MAC_BYTES 32   /* a stored binary's MAC */

struct db {
  sqlite3 *h;
  char path[4096];
  int key_state;     /* 0: not read yet; 1: key holds this user's key; -1: refused */
  unsigned char key[DBI_KEY_BYTES];
  char key_err[512]; /* why it was refused */
};

/* SQL for a config column back as "k=v,...", in the object's order: NULL
** unless it is an object of strings and integers. */
#define DBI_CONFIG_KV(c) \
  "CASE WHEN json_valid(" c ") AND json_type(" c ") = 'object' AND NOT EXISTS " \
  "(SELECT 1 FROM json_each(" c ") WHERE type NOT IN ('integer', 'text')) THEN " \
  "(SELECT group_concat(key || '=' || value, ',') FROM json_each(" c ")) END"

/* What merge takes from another file (db_check.c): fatune's own schema,
** rows a tune could have recorded. */

/* A check's verdict on a row: taken, or refused (and for which reason
** the merge counts apart). -1 is an error of the check itself. The first
** three are db_merge_accept's own verdicts. */
enum { DBI_ROW_OK = DB_MERGE_TAKE, DBI_ROW_REFUSED = DB_MERGE_REFUSE,
       DBI_ROW_MISMATCH = DB_MERGE_MISMATCH, DBI_ROW_BAD_CREATED };

/* 0 when the file on connection h (in a read transaction) holds exactly
** the tables, indexes and view this fatune makes, as it makes them: no
** other object (a view or trigger planted, a column more), none missing.
** -1 with err naming the first one that differs ("PATH: not fatune's
** schema ..."). */
int dbi_check_schema(sqlite3 *h, const char *path, char *err, size_t errlen);

/* What accept says of row (see db_merge), its config_kv being
** DBI_CONFIG_KV of the variant's config (NULL or "" when it is none,
** refused here); a verdict it does not define is an error. */
int dbi_check_variant(const db_merge_accept *accept, const db_merge_row *row, char *why,
                      size_t n, char *err, size_t errlen);

/* The longest counters merge takes, in bytes (a tune writes some 500). */
#define DBI_COUNTERS_MAX "1023"

/* The columns dbi_check_trial reads, in this order, from the trials
** table of the file merged; DBI_ROW_OK when the row is one a tune could
** record, else DBI_ROW_REFUSED, or DBI_ROW_BAD_CREATED when created is not
** fatune's timestamp, with why. created must be one as fatune writes it
** (ISO 8601 UTC with milliseconds, not later than tomorrow; through
** julianday and back it stays the same, so February 30 is no date): it is
** compared as text, and '9999' would sort after every real one. */
#define DBI_TRIAL_CHECK_COLUMNS \
  "dtype, dim, seq_q, seq_k, batch, heads, causal, req_batch, kv_group, page, status, " \
  "max_abs_err, rel_err, lse_err, " \
  "median_us, min_us, p20_us, p80_us, tflops, gbps, " \
  "CASE WHEN counters IS NULL THEN 1 " \
  "WHEN length(CAST(counters AS BLOB)) > " DBI_COUNTERS_MAX " THEN 0 " \
  "WHEN NOT json_valid(counters) THEN 0 " \
  "WHEN json_type(counters) <> 'object' THEN 0 WHEN EXISTS (SELECT 1 FROM " \
  "json_each(counters) WHERE type NOT IN ('integer', 'real') OR value < 0) THEN 0 ELSE 1 END, " \
  "CASE WHEN typeof(created) = 'text' AND created GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-" \
  "[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z' AND " \
  "strftime('%Y-%m-%dT%H:%M:%fZ', julianday(created)) = created AND " \
  "julianday(created) <= julianday('now') + 1 THEN 1 ELSE 0 END"
int dbi_check_trial(sqlite3_stmt *st, int first_col, char *why, size_t n);

/* What one merge takes at most: rows of each table (the rest are refused
** and counted), and seconds it holds the destination's write lock (then
** it stops and nothing is merged). db_merge's own are in db_merge.c. */
typedef struct dbi_merge_limits {
  size_t devices, variants, trials;
  double lock_s;
} dbi_merge_limits;
int dbi_merge(db *d, const char *other_path, const db_merge_accept *accept,
              const dbi_merge_limits *lim, db_merge_counts *c, char *err, size_t errlen);

/* Seconds on the monotonic clock. */
double dbi_mono_s(void);

/* Writes the message into err and returns -1. */
int dbi_fail(char *err, size_t errlen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
/* "what: SQLite's message" into err; returns -1. */
int dbi_sqlfail(sqlite3 *h, char *err, size_t errlen, const char *what);

int dbi_prepare(sqlite3 *h, const char *sql, sqlite3_stmt **st, char *err, size_t errlen);
/* sqlite3_step, waiting out SQLITE_BUSY beyond the busy timeout with
** backoff; returns SQLite's code. */
int dbi_step(sqlite3_stmt *st);
void dbi_finalize(sqlite3_stmt *st);
/* Runs one statement that returns no rows. */
int dbi_exec(sqlite3 *h, const char *sql, char *err, size_t errlen);

/* BEGIN IMMEDIATE (retried while another process writes), COMMIT, ROLLBACK. */
int dbi_begin(sqlite3 *h, char *err, size_t errlen);
int dbi_commit(sqlite3 *h, char *err, size_t errlen);
void dbi_rollback(sqlite3 *h);

/* Binds parameters left to right; the first failure sticks in rc, so a run
** of binds is checked once. */
typedef struct dbi_binder {
  sqlite3_stmt *st;
  int i;    /* the next parameter */
  int rc;
} dbi_binder;

dbi_binder dbi_bind_start(sqlite3_stmt *st);
void dbi_bind_text(dbi_binder *b, const char *s);    /* NULL binds NULL */
void dbi_bind_int(dbi_binder *b, long long v);
void dbi_bind_real(dbi_binder *b, double v);         /* NAN binds NULL */
void dbi_bind_blob(dbi_binder *b, const void *p, size_t n);

/* Column helpers: NULL text reads as "", NULL real as NAN. */
const char *dbi_col_text(sqlite3_stmt *st, int i);
double dbi_col_real(sqlite3_stmt *st, int i);
/* Copies a text column into buf; -1 when it does not fit. */
int dbi_col_copy(sqlite3_stmt *st, int i, char *buf, size_t n);

/* mkdir -p of the directories above path, mode 0700 (db_sql.c); the key's too. */
int dbi_make_parents(const char *path, char *err, size_t errlen);
/* A per-user file of fatune's: $override, else $xdg/fatune/leaf (an
** absolute $xdg only), else $HOME/home_dir/fatune/leaf; hint ends the
** message when there is nowhere. */
int dbi_user_path(char *buf, size_t n, const char *override, const char *xdg,
                  const char *home_dir, const char *leaf, const char *hint, char *err,
                  size_t errlen);

/* The migrations (db_schema.c): brings a file at version from (0: empty)
** to DB_SCHEMA_VERSION, inside the caller's transaction. */
int dbi_migrate(sqlite3 *h, int from, char *err, size_t errlen);
/* The same, up to version to only: how the tests make a file of an older
** version with rows in it. */
int dbi_migrate_to(sqlite3 *h, int from, int to, char *err, size_t errlen);

/* The writers, inside the caller's transaction (db_write.c), for db_merge
** as well: an existing device is refreshed only when refresh is set; a
** NULL created stamps the row with the time now. */
int dbi_device_upsert(sqlite3 *h, const db_device *dev, int refresh, long long *id,
                      int *added, char *err, size_t errlen);
int dbi_variant_upsert(sqlite3 *h, const db_variant *v, const char *config_json,
                       long long *id, int *added, char *err, size_t errlen);
int dbi_trial_write(sqlite3 *h, const db_trial *t, const char *fatune_version,
                    const char *created, char *err, size_t errlen);

/* A trial's key, as the UNIQUE constraint of trials has it (version 11), and
** its binds in the same order: a NULL arch binds "", a requested seq of 0
** what ran, a kv_group of 0 one. */
#define DBI_TRIAL_KEY_MATCH \
  "variant_id = ? AND device_id = ? AND arch = ? AND dtype = ? AND dim = ? AND " \
  "req_seq_q = ? AND req_seq_k = ? AND seq_q = ? AND seq_k = ? AND batch = ? AND " \
  "heads = ? AND causal = ? AND req_batch = ? AND kv_group = ? AND page = ?"
void dbi_bind_trial_key(dbi_binder *b, long long variant_id, long long device_id,
                        const db_problem *p);

/* The compile cache's key and MAC (db_mac.c). dbi_key reads this user's
** key into d (creating it on first use) the first time it is asked for;
** -1 with the reason when it is refused, and on every call after. */
int dbi_key(db *d, char *err, size_t errlen);
void dbi_key_forget(db *d);    /* wipes the key from memory */
/* The MAC of a binary under d's key (dbi_key first): of the key's fields
** and the blob, each length-prefixed. */
int dbi_mac(const db *d, const db_binary_key *k, const void *blob, size_t n,
            unsigned char mac[DBI_MAC_BYTES]);
/* 1 when mac is the binary's MAC under d's key, else 0. */
int dbi_mac_verify(const db *d, const db_binary_key *k, const void *blob, size_t n,
                   const void *mac, size_t maclen);

#endif
