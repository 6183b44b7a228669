/*
** test_sink.c
** fa_sink: rows of hostile text (quotes, newlines, control bytes, formula
** prefixes, bytes that are not UTF-8) as a table, CSV and JSON; reals
** that are not finite as null in JSON and CSV; the table's alignment; a stream's error.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fa_sink.h"

static const fa_column cols[] = {{"name", -6, NULL}, {"n", 4, NULL}, {"x", 8, "  "}};

/* The output of rows of (text, integer, real) in the format. */
static char *write_rows(fa_sink_format format, const fa_cell (*row)[3], int nrows) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  fa_sink s;
  fa_sink_begin(&s, f, format, cols, 3);
  for (int i = 0; i < nrows; i++) fa_sink_row(&s, row[i], 3);
  const int rc = fa_sink_end(&s);
  if (fclose(f) != 0 || rc != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void expect(fa_sink_format format, const fa_cell (*row)[3], int nrows, const char *want,
                   const char *what) {
  char *got = write_rows(format, row, nrows);
  CHECK(got && !strcmp(got, want), "%s: got\n%s\nwanted\n%s", what, got ? got : "(failed)", want);
  free(got);
}

static void test_hostile(void) {
  const fa_cell rows[][3] = {
    {fa_cell_text("a\"b,c"), fa_cell_int(-1), fa_cell_real(1.5, "%.2f")},
    {fa_cell_text("=cmd|x"), fa_cell_int(7), fa_cell_real(NAN, "%.2f")},
    {fa_cell_text("l1\nl2\x1b[31m\xff"), fa_cell_null(), fa_cell_real(INFINITY, "%.2f")},
  };
  expect(FA_SINK_TABLE, rows, 3,
         "name      n         x\n"
         "a\"b,c    -1      1.50\n"
         "=cmd|x    7       nan\n"
         "l1?l2?[31m?    -       inf\n",
         "table: controls and non-UTF-8 as '?', padded, a null as '-', NaN as printf has it");
  expect(FA_SINK_CSV, rows, 3,
         "name,n,x\n"
         "\"a\"\"b,c\",-1,1.50\n"
         "'=cmd|x,7,\n"
         "\"l1\nl2\x1b[31m\xff\",,\n",
         "CSV: quoted, quotes doubled, formula guarded, nulls empty");
  expect(FA_SINK_JSON, rows, 3,
         "[\n"
         "  {\"name\": \"a\\\"b,c\", \"n\": -1, \"x\": 1.50},\n"
         "  {\"name\": \"=cmd|x\", \"n\": 7, \"x\": null},\n"
         "  {\"name\": \"l1\\nl2\\u001b[31m\\ufffd\", \"n\": null, \"x\": null}\n"
         "]\n",
         "JSON: escaped, NaN and Inf as null");
  expect(FA_SINK_JSON, rows, 0, "[]\n", "JSON: no rows");
  expect(FA_SINK_CSV, rows, 0, "name,n,x\n", "CSV: no rows, the heading");
}

static void members(FILE *f, const void *arg) { fprintf(f, ", \"k\": %d", *(const int *)arg); }

/* A short row has no trailing blanks; members and raw JSON; a row of one
** unnamed cell is that value. */
static void test_shapes(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL, "open_memstream");
  if (!f) return;
  static const fa_column obj[] = {{"a", 3, NULL}, {NULL, 0, NULL}, {"r", 0, NULL}};
  static const fa_column bare = {NULL, 0, NULL};
  const int k = 5;
  fa_sink s;
  fa_sink_begin_headless(&s, f, FA_SINK_TABLE, obj, 3);
  fa_sink_row(&s, (fa_cell[]){fa_cell_int(1)}, 1);
  fa_sink_end(&s);
  fa_sink_object(f, obj, (fa_cell[]){fa_cell_uint(18446744073709551615ull),
                                     fa_cell_members(members, &k), fa_cell_raw("[1, 2]")}, 3);
  fa_sink_begin(&s, f, FA_SINK_JSON, &bare, 1);
  fa_sink_row(&s, (fa_cell[]){fa_cell_raw("{\"x\":1}")}, 1);
  fa_sink_row(&s, (fa_cell[]){fa_cell_bool(0)}, 1);
  CHECK(fa_sink_end(&s) == 0 && fclose(f) == 0, "writing");
  const char *want = "  1\n{\"a\": 18446744073709551615, \"k\": 5, \"r\": [1, 2]}"
                     "[\n  {\"x\":1},\n  false\n]\n";
  CHECK(buf && !strcmp(buf, want), "shapes: got\n%s\nwanted\n%s", buf ? buf : "", want);
  free(buf);
}

/* A write that fails is reported by the end, whichever row it was in. */
static void test_write_error(void) {
  FILE *f = fopen("/dev/full", "w");
  if (!f) return;
  fa_sink s;
  fa_sink_begin(&s, f, FA_SINK_CSV, cols, 3);
  fa_sink_row(&s, (fa_cell[]){fa_cell_text("x"), fa_cell_int(1), fa_cell_real(2, "%.1f")}, 3);
  CHECK(fa_sink_end(&s) == -1, "a full disk is an error");
  fclose(f);
}

int main(void) {
  test_hostile();
  test_shapes();
  test_write_error();
  return check_done("test_sink");
}
