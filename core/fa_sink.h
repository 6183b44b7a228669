/*
** fa_sink.h
** One writer of rows for every command that prints them: an aligned
** table, CSV or a JSON array of objects. A row is a sequence of typed
** cells under the columns given at the start; text goes through the one
** escaping function of its medium (fa_escape.h).
*/
#ifndef FA_SINK_H
#define FA_SINK_H

#include <stddef.h>
#include <stdio.h>

typedef enum fa_sink_format { FA_SINK_TABLE, FA_SINK_CSV, FA_SINK_JSON } fa_sink_format;

typedef enum fa_cell_kind {
  FA_CELL_NULL,     /* JSON null, "-" in a table, nothing in CSV */
  FA_CELL_TEXT,     /* text, escaped for the medium; NULL text is a null */
  FA_CELL_INT,      /* i, through fmt when given ("%+lld"), else "%lld" */
  FA_CELL_UINT,     /* u, "%llu" */
  FA_CELL_REAL,     /* r through fmt ("%.2e"); not finite: null in JSON and CSV, and
                    ** in a table what fmt makes of it (nan, inf) */
  FA_CELL_RAW,      /* text that is JSON already, written as it is; in a table or CSV, text */
  FA_CELL_MEMBERS   /* JSON only: members spliced into the row's object by members() */
} fa_cell_kind;

/* Writes members of a JSON object to f, each after ", " (json_config's
** and sass_kernel_json's way). */
typedef void (*fa_sink_members_fn)(FILE *f, const void *arg);

typedef struct fa_cell {
  fa_cell_kind kind;
  const char *text;
  long long i;
  unsigned long long u;
  double r;
  const char *fmt;
  fa_sink_members_fn members;
  const void *arg;
  const char *style;   /* a table's SGR colour around the padded cell; NULL for none */
} fa_cell;

/* A column: its name (the JSON key, the CSV and table heading); in a table
** its width as printf's (negative: left-aligned) and the text before it
** (NULL: one space, nothing before the first). A JSON row of one cell
** under a column with no name is that cell's value, not an object. */
typedef struct fa_column {
  const char *name;
  int width;
  const char *sep;
} fa_column;

typedef struct fa_sink {
  FILE *f;
  fa_sink_format format;
  const fa_column *col;
  int ncol;
  size_t rows;
} fa_sink;

/* Starts the output: a table's or CSV's heading, JSON's "[". The columns
** must outlive the sink. */
void fa_sink_begin(fa_sink *s, FILE *f, fa_sink_format format, const fa_column *col, int ncol);
/* A table without its heading line. */
void fa_sink_begin_headless(fa_sink *s, FILE *f, fa_sink_format format, const fa_column *col,
                            int ncol);
/* One row of n cells (n <= ncol), under the first n columns: a table's
** row ends at its last cell, so a short row has no trailing blanks. */
void fa_sink_row(fa_sink *s, const fa_cell *cell, int n);
/* Ends the output (JSON's "]") and flushes; -1 when anything written to
** the stream failed (its error is sticky), else 0. */
int fa_sink_end(fa_sink *s);

/* One JSON object of n cells under col, with no framing around it. */
void fa_sink_object(FILE *f, const fa_column *col, const fa_cell *cell, int n);

static inline fa_cell fa_cell_null(void) { return (fa_cell){.kind = FA_CELL_NULL}; }
static inline fa_cell fa_cell_text(const char *s) {
  return (fa_cell){.kind = FA_CELL_TEXT, .text = s};
}
static inline fa_cell fa_cell_int(long long i) { return (fa_cell){.kind = FA_CELL_INT, .i = i}; }
static inline fa_cell fa_cell_uint(unsigned long long u) {
  return (fa_cell){.kind = FA_CELL_UINT, .u = u};
}
static inline fa_cell fa_cell_real(double r, const char *fmt) {
  return (fa_cell){.kind = FA_CELL_REAL, .r = r, .fmt = fmt};
}
static inline fa_cell fa_cell_raw(const char *json) {
  return (fa_cell){.kind = FA_CELL_RAW, .text = json};
}
static inline fa_cell fa_cell_bool(int b) { return fa_cell_raw(b ? "true" : "false"); }
static inline fa_cell fa_cell_members(fa_sink_members_fn fn, const void *arg) {
  return (fa_cell){.kind = FA_CELL_MEMBERS, .members = fn, .arg = arg};
}

#endif
