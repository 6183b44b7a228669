/*
** fa_sink.c
** Rows as a table, CSV or JSON (fa_sink.h).
*/
#include <math.h>
#include <stdio.h>

#include "fa_escape.h"
#include "fa_sink.h"

/* Room for any cell as text: "%.1f" of the largest double takes 310 bytes. */
#define CELL_MAX 512

static int is_text(const fa_cell *c) { return c->kind == FA_CELL_TEXT || c->kind == FA_CELL_RAW; }

/* A null: nothing in CSV, "-" in a table, null in JSON. */
static int is_null(const fa_cell *c) { return c->kind == FA_CELL_NULL || (is_text(c) && !c->text); }

/* JSON has no NaN or Inf, and a spreadsheet takes "nan" for text. */
static int not_finite(const fa_cell *c) { return c->kind == FA_CELL_REAL && !isfinite(c->r); }

/* A number as text, through the cell's format. */
static void number_text(char *buf, size_t n, const fa_cell *c) {
  if (c->kind == FA_CELL_INT) snprintf(buf, n, c->fmt ? c->fmt : "%lld", c->i);
  else if (c->kind == FA_CELL_UINT) snprintf(buf, n, "%llu", c->u);
  else snprintf(buf, n, c->fmt, c->r);
}

/* ---- Table ---- */

static void table_cell(const fa_sink *s, int i, const fa_cell *c) {
  /* Escaped text is as long as a terminal line gets: the cell's first
  ** 511 bytes (fa_esc_term_buf keeps whole characters). */
  char buf[CELL_MAX];
  const fa_column *col = &s->col[i];
  if (is_null(c)) snprintf(buf, sizeof buf, "-");
  else if (is_text(c)) fa_esc_term_buf(buf, sizeof buf, c->text);
  else number_text(buf, sizeof buf, c);
  fputs(col->sep ? col->sep : i ? " " : "", s->f);
  if (c->style) fputs(c->style, s->f);
  fprintf(s->f, "%*s", col->width, buf);
  if (c->style) fputs("\033[0m", s->f);
}

static void table_row(const fa_sink *s, const fa_cell *cell, int n) {
  for (int i = 0; i < n; i++)
    if (cell[i].kind != FA_CELL_MEMBERS) table_cell(s, i, &cell[i]);
  fputc('\n', s->f);
}

/* ---- CSV ---- */

static void csv_row(const fa_sink *s, const fa_cell *cell, int n) {
  char buf[CELL_MAX];
  int first = 1;
  for (int i = 0; i < n; i++) {
    const fa_cell *c = &cell[i];
    if (c->kind == FA_CELL_MEMBERS) continue;
    if (!first) fputc(',', s->f);
    first = 0;
    if (is_null(c) || not_finite(c)) continue;
    if (is_text(c)) fa_esc_csv(s->f, c->text);
    else {
      number_text(buf, sizeof buf, c);
      fputs(buf, s->f);
    }
  }
  fputc('\n', s->f);
}

/* ---- JSON ---- */

static void value_json(FILE *f, const fa_cell *c) {
  char buf[CELL_MAX];
  if (is_null(c) || not_finite(c)) fputs("null", f);
  else if (c->kind == FA_CELL_TEXT) fa_esc_json(f, c->text);
  else if (c->kind == FA_CELL_RAW) fputs(c->text, f);
  else {
    number_text(buf, sizeof buf, c);
    fputs(buf, f);
  }
}

void fa_sink_object(FILE *f, const fa_column *col, const fa_cell *cell, int n) {
  if (n == 1 && !col[0].name && cell[0].kind != FA_CELL_MEMBERS) {
    value_json(f, &cell[0]);
    return;
  }
  fputc('{', f);
  for (int i = 0; i < n; i++) {
    if (cell[i].kind == FA_CELL_MEMBERS) {
      cell[i].members(f, cell[i].arg);
      continue;
    }
    if (i) fputs(", ", f);
    fa_esc_json(f, col[i].name);
    fputs(": ", f);
    value_json(f, &cell[i]);
  }
  fputc('}', f);
}

/* ---- The sequence ---- */

static void start(fa_sink *s, FILE *f, fa_sink_format format, const fa_column *col, int ncol) {
  *s = (fa_sink){.f = f, .format = format, .col = col, .ncol = ncol};
  if (format == FA_SINK_JSON) fputc('[', f);
}

void fa_sink_begin_headless(fa_sink *s, FILE *f, fa_sink_format format, const fa_column *col,
                            int ncol) {
  start(s, f, format, col, ncol);
}

void fa_sink_begin(fa_sink *s, FILE *f, fa_sink_format format, const fa_column *col, int ncol) {
  start(s, f, format, col, ncol);
  if (format == FA_SINK_JSON) return;
  /* The names as a row of text; a column without one (JSON members) has none. */
  for (int i = 0, first = 1; i < ncol; i++) {
    const fa_cell name = fa_cell_text(col[i].name);
    if (!col[i].name) continue;
    if (format == FA_SINK_TABLE) table_cell(s, i, &name);
    else {
      if (!first) fputc(',', f);
      fa_esc_csv(f, col[i].name);
    }
    first = 0;
  }
  fputc('\n', f);
}

void fa_sink_row(fa_sink *s, const fa_cell *cell, int n) {
  if (n > s->ncol) n = s->ncol;
  if (s->format == FA_SINK_TABLE) table_row(s, cell, n);
  else if (s->format == FA_SINK_CSV) csv_row(s, cell, n);
  else {
    fputs(s->rows ? ",\n  " : "\n  ", s->f);
    fa_sink_object(s->f, s->col, cell, n);
  }
  s->rows++;
}

int fa_sink_end(fa_sink *s) {
  if (s->format == FA_SINK_JSON) fputs(s->rows ? "\n]\n" : "]\n", s->f);
  return fflush(s->f) != 0 || ferror(s->f) ? -1 : 0;
}
