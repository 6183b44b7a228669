/*
** fa_escape.h
** Text read from a results database (device and variant names, configs,
** messages) is anybody's: a file merged from elsewhere, or edited by hand.
** It reaches each output medium through the one function for that medium
** here, and nowhere else is text escaped.
*/
#ifndef FA_ESCAPE_H
#define FA_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* A terminal: control characters (C0, DEL, C1), newlines included, and
** bytes that are not UTF-8 become '?', so no escape sequence and no line
** break of the text's own reaches it. */
void fa_esc_term(FILE *f, const char *s);
/* The same into buf (always terminated, truncated at a character); the
** length written. */
size_t fa_esc_term_buf(char *buf, size_t n, const char *s);

/* A JSON string, quotes included: '"' and '\\' escaped, control
** characters as \uXXXX, bytes that are not UTF-8 as U+FFFD. NULL is "". */
void fa_esc_json(FILE *f, const char *s);

/* An RFC 4180 CSV field: quoted, quotes doubled, when it holds a comma, a
** quote, a line break or a leading or trailing space; text that starts
** with = + - @, a tab or a carriage return, which a spreadsheet would run
** as a formula, starts with a ' instead. Numbers are the caller's: written
** as they are, -1 stays a number. */
void fa_esc_csv(FILE *f, const char *s);

/* HTML text or a quoted attribute value: & < > " ' as entities, control
** characters as spaces. */
void fa_esc_html(FILE *f, const char *s);

/* Markdown inline text, on one line: ASCII punctuation Markdown gives a
** meaning backslashed, & < > as entities (no raw HTML), control
** characters (newlines too) as spaces. */
void fa_esc_md(FILE *f, const char *s);

/* A gnuplot single-quoted string, quotes included: quotes doubled and
** control characters as spaces, so that no newline ends the command and
** starts another (a line "!cmd" would run cmd in a shell). */
void fa_esc_gnuplot(FILE *f, const char *s);
/* A double-quoted string field of a gnuplot data file: '"' as '\'' and
** control characters as spaces, so that the field stays one field. */
void fa_esc_gnuplot_data(FILE *f, const char *s);

#endif
