/*
** fa_escape.c
** One escaping function per output medium (fa_escape.h).
*/
#include <string.h>

#include "fa_escape.h"

/* The UTF-8 character at s: its length (1 to 4) with its code point in
** *cp, or 0 when the bytes there are not one (a stray continuation byte,
** a truncated or overlong sequence, a surrogate, past U+10FFFF). */
static int utf8_char(const unsigned char *s, unsigned *cp) {
  const unsigned c = s[0];
  int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
          : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0) return 0;
  unsigned v = len == 1 ? c : c & (0x7fu >> len);
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;   /* a NUL ends the string here too */
    v = v << 6 | (s[i] & 0x3fu);
  }
  static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

static int is_control(unsigned cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

/* ---- Terminal ---- */

/* The next piece of s as the terminal gets it: the character's bytes, or
** "?" in their place; returns how far s moves. */
static size_t term_piece(const char *s, const char **out, size_t *outlen) {
  unsigned cp;
  int len = utf8_char((const unsigned char *)s, &cp);
  if (len == 0 || is_control(cp)) {
    *out = "?", *outlen = 1;
    return len ? (size_t)len : 1;
  }
  *out = s, *outlen = (size_t)len;
  return (size_t)len;
}

void fa_esc_term(FILE *f, const char *s) {
  const char *piece;
  size_t n;
  while (s && *s) {
    s += term_piece(s, &piece, &n);
    fwrite(piece, 1, n, f);
  }
}

size_t fa_esc_term_buf(char *buf, size_t n, const char *s) {
  size_t used = 0, len;
  const char *piece;
  if (n == 0) return 0;
  while (s && *s) {
    size_t step = term_piece(s, &piece, &len);
    if (used + len >= n) break;
    memcpy(buf + used, piece, len);
    used += len, s += step;
  }
  buf[used] = '\0';
  return used;
}

/* ---- JSON ---- */

void fa_esc_json(FILE *f, const char *s) {
  fputc('"', f);
  while (s && *s) {
    unsigned cp;
    const int len = utf8_char((const unsigned char *)s, &cp);
    if (len == 0) fputs("\\ufffd", f);
    else if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (char)cp);
    else if (cp == '\n') fputs("\\n", f);
    else if (cp < 0x20 || cp == 0x7f) fprintf(f, "\\u%04x", cp);
    else fwrite(s, 1, (size_t)len, f);
    s += len ? len : 1;
  }
  fputc('"', f);
}

/* ---- CSV ---- */

/* Text a spreadsheet would run as a formula (OWASP's CSV injection). */
static int formula_like(const char *s) { return s[0] && strchr("=+-@\t\r", s[0]); }

void fa_esc_csv(FILE *f, const char *s) {
  const size_t n = strlen(s);
  const char *lead = formula_like(s) ? "'" : "";
  if (!strpbrk(s, ",\"\r\n") && !(n && (s[0] == ' ' || s[n - 1] == ' '))) {
    fputs(lead, f);
    fputs(s, f);
    return;
  }
  fputc('"', f);
  fputs(lead, f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* ---- HTML and Markdown ---- */

static const char *html_entity(unsigned char c) {
  switch (c) {
  case '&': return "&amp;";
  case '<': return "&lt;";
  case '>': return "&gt;";
  case '"': return "&quot;";
  case '\'': return "&#39;";
  default: return NULL;
  }
}

void fa_esc_html(FILE *f, const char *s) {
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    const char *e = html_entity(c);
    if (e) fputs(e, f);
    else if (c < 0x20 || c == 0x7f) fputc(' ', f);
    else fputc(c, f);
  }
}

void fa_esc_md(FILE *f, const char *s) {
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '&' || c == '<' || c == '>') fputs(html_entity(c), f);
    else if (c < 0x20 || c == 0x7f) fputc(' ', f);
    else if (strchr("\\`*_[]#!|~", c)) fprintf(f, "\\%c", c);
    else fputc(c, f);
  }
}

/* ---- gnuplot ---- */

void fa_esc_gnuplot(FILE *f, const char *s) {
  fputc('\'', f);
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '\'') fputs("''", f);
    else if (c < 0x20 || c == 0x7f) fputc(' ', f);
    else fputc(c, f);
  }
  fputc('\'', f);
}

void fa_esc_gnuplot_data(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"') fputc('\'', f);
    else if (c < 0x20 || c == 0x7f) fputc(' ', f);
    else fputc(c, f);
  }
  fputc('"', f);
}
