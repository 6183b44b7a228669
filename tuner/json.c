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

void json_config(FILE *f, const gen_config *c) {
  char json[4096];
  if (gen_config_json(c, json, sizeof json) == 0)
    fprintf(f, ", %.*s", (int)strlen(json) - 2, json + 1);   /* without the braces */
}

void json_number(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs("null", f);
}
