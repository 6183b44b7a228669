/*
** json.c
** JSON output helpers.
*/
#include <math.h>
#include <string.h>

#include "json.h"

void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '\n') fputs("\\n", f);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

void json_config(FILE *f, const char *config) {
  const char *p = config;
  while (*p) {
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!eq || eq > end) break;
    fprintf(f, ", \"%.*s\": ", (int)(eq - p), p);
    const char *v = eq + 1;
    int numeric = v < end;
    for (const char *q = v; q < end; q++) if (*q < '0' || *q > '9') numeric = 0;
    if (numeric) fprintf(f, "%.*s", (int)(end - v), v);
    else fprintf(f, "\"%.*s\"", (int)(end - v), v);
    p = *end ? end + 1 : end;
  }
}

void json_number(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs("null", f);
}
