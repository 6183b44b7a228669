/*
** cmd_baseline.c
** fatune baseline FILE.csv: records PyTorch's attention timed on a GPU (the
** rows scripts/gpu-check.sh writes) in the database, for the report to
** draw beside fatune's trials. The file is untrusted: its size, every
** field and the header are checked, and a bad row refuses the whole file
** with its line number, writing nothing. TFLOP/s are counted here, as
** fatune counts its own trials' (attn_flops), never taken from the file.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "cmd_db.h"
#include "db.h"

#define BL_MAX_BYTES (1 << 20)
#define BL_MAX_ROWS 4096

enum { C_GPU, C_BACKEND, C_DTYPE, C_BATCH, C_HEADS, C_SEQ_Q, C_SEQ_K, C_DIM, C_CAUSAL,
       C_MEDIAN, C_TORCH, NCOLS };
static const char *const columns[NCOLS] = {"gpu", "backend", "dtype", "batch", "heads", "seq_q",
                                           "seq_k", "dim", "causal", "median_us", "torch"};

/* The fields of one line, split in place at commas; -1 for a quoted field
** (no GPU's name nor version needs one) or too many fields. */
static int split(char *line, char **f, int max) {
  int n = 0;
  for (char *s = line;; s++) {
    if (n == max) return -1;
    f[n++] = s;
    s += strcspn(s, ",");
    if (!*s) break;
    *s = '\0';
  }
  for (int i = 0; i < n; i++)
    if (strchr(f[i], '"')) return -1;
  return n;
}

static int whole(const char *s, long long *v) {
  char *end;
  errno = 0;
  *v = strtoll(s, &end, 10);
  return *s && !errno && !*end ? 0 : -1;
}

/* fatune's names of a dtype, and PyTorch's ("bfloat16", "torch.bfloat16"). */
static int parse_dtype(const char *s, fa_dtype *t) {
  static const char *const torch[] = {"float32", "float64", "float16", "bfloat16"};
  if (!strncmp(s, "torch.", 6)) s += 6;
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, torch[i])) return fa_dtype_parse(fa_dtype_name((fa_dtype)i), t);
  return fa_dtype_parse(s, t);
}

/* One row into b (its text pointing into the line); why says what is wrong. */
static int parse_row(char **f, const int *col, db_baseline *b, const char **why) {
  long long v[NCOLS];
  for (int c = C_BATCH; c <= C_CAUSAL; c++)
    if (whole(f[col[c]], &v[c]) != 0 || v[c] < 0 || v[c] > 1 << 24)
      return *why = columns[c], -1;
  char *end;
  errno = 0;
  const double us = strtod(f[col[C_MEDIAN]], &end);
  if (errno || end == f[col[C_MEDIAN]] || *end) return *why = "median_us", -1;
  fa_dtype t;
  if (parse_dtype(f[col[C_DTYPE]], &t) != 0) return *why = "dtype", -1;
  *b = (db_baseline){.gpu = f[col[C_GPU]], .backend = f[col[C_BACKEND]],
                     .dtype = fa_dtype_name(t), .batch = (int)v[C_BATCH],
                     .heads = (int)v[C_HEADS], .seq_q = (int)v[C_SEQ_Q],
                     .seq_k = (int)v[C_SEQ_K], .dim = (int)v[C_DIM], .causal = (int)v[C_CAUSAL],
                     .median_us = us, .torch_version = f[col[C_TORCH]]};
  const fa_problem p = {.batch = b->batch, .heads = b->heads, .seq_q = b->seq_q,
                        .seq_k = b->seq_k, .dim = b->dim, .dtype = t, .causal = b->causal};
  b->tflops = us > 0 ? attn_flops(&p) / us / 1e6 : 0;
  return 0;
}

/* The header's columns: each known one exactly once, no other. */
static int parse_header(char *line, int *col, char *msg, size_t n) {
  char *f[NCOLS + 1];
  const int nf = split(line, f, NCOLS + 1);
  for (int c = 0; c < NCOLS; c++) col[c] = -1;
  for (int i = 0; i < nf; i++) {
    int c = 0;
    while (c < NCOLS && strcmp(f[i], columns[c])) c++;
    if (c == NCOLS || col[c] >= 0) break;
    col[c] = i;
  }
  for (int c = 0; c < NCOLS; c++)
    if (nf != NCOLS || col[c] < 0) {
      snprintf(msg, n, "line 1 must be the header gpu,backend,dtype,batch,heads,seq_q,seq_k,"
               "dim,causal,median_us,torch (in any order)");
      return -1;
    }
  return 0;
}

static char *read_all(const char *path, char *msg, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(msg, n, "cannot read %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(BL_MAX_BYTES + 1);
  size_t len = buf ? fread(buf, 1, BL_MAX_BYTES + 1, f) : 0;
  const int bad = ferror(f);
  fclose(f);
  if (!buf || bad || len > BL_MAX_BYTES || memchr(buf, '\0', len)) {
    snprintf(msg, n, "%s: %s", path, !buf ? "out of memory" : bad ? "read error"
             : len > BL_MAX_BYTES ? "larger than 1 MB: not a file of baselines"
             : "binary data: not a CSV file");
    free(buf);
    return NULL;
  }
  buf[len] = '\0';
  return buf;
}

/* The rows of text into b; the count, or -1 with msg. */
static int parse_file(char *text, db_baseline *b, char *msg, size_t n) {
  int col[NCOLS], rows = 0, line = 0;
  for (char *s = text, *next; *s; s = next) {
    next = s + strcspn(s, "\n");
    if (*next) *next++ = '\0';
    line++;
    if (s[0] && s[strlen(s) - 1] == '\r') s[strlen(s) - 1] = '\0';
    if (line == 1) {
      if (parse_header(s, col, msg, n) != 0) return -1;
      continue;
    }
    if (!*s) continue;
    char *f[NCOLS + 1];
    const char *why = NULL;
    if (split(s, f, NCOLS + 1) != NCOLS) why = "the number of fields (or a quoted one)";
    else if (rows == BL_MAX_ROWS) why = "the count of rows (4096 at most)";
    else parse_row(f, col, &b[rows], &why);
    if (why) {
      snprintf(msg, n, "line %d: bad %s", line, why);
      return -1;
    }
    rows++;
  }
  if (line == 0 || rows == 0) {
    snprintf(msg, n, "no baselines in the file (a header and one row per measurement)");
    return -1;
  }
  return rows;
}

int cmd_baseline_main(const cli_opts *o) {
  char msg[600], err[512];
  char *text = read_all(o->merge_path, msg, sizeof msg);
  if (!text) return cli_say(EXIT_BAD_INPUT, msg);
  db_baseline *b = malloc(BL_MAX_ROWS * sizeof *b);
  int rows = b ? parse_file(text, b, err, sizeof err) : -1;
  if (!b) snprintf(err, sizeof err, "out of memory");
  int rc = 0;
  db *d = NULL;
  size_t bad = 0;
  if (rows < 0) {
    snprintf(msg, sizeof msg, "%s: %s", o->merge_path, err);
    rc = cli_say(EXIT_BAD_INPUT, msg);
  } else if (db_open(o->db, DB_CREATE, &d, err, sizeof err) != 0) {
    rc = cli_say(1, err);
  } else if (db_baseline_put(d, b, (size_t)rows, &bad, err, sizeof err) != 0) {
    /* The header is line 1; blank lines aside, row i is line i + 2. */
    snprintf(msg, sizeof msg, "%s: row %zu: %s; nothing recorded", o->merge_path, bad + 1, err);
    rc = cli_say(strstr(err, "baseline:") ? EXIT_BAD_INPUT : 1, msg);
  } else {
    printf("recorded %d baseline%s from %s in %s\n", rows, rows == 1 ? "" : "s", o->merge_path,
           db_path(d));
  }
  if (d && db_close(d) != 0 && rc == 0) rc = cli_say(1, "the database did not close cleanly");
  free(b);
  free(text);
  return rc;
}
