/*
** json.c
** JSON output helpers.
*/
#include <math.h>
#include <string.h>

#include "fa_escape.h"
#include "json.h"

void json_string(FILE *f, const char *s) { fa_esc_json(f, s); }

void json_config(FILE *f, const gen_config *c) {
  char json[4096];
  if (gen_config_json(c, json, sizeof json) == 0)
    fprintf(f, ", %.*s", (int)strlen(json) - 2, json + 1);   /* without the braces */
}

void json_config_members(FILE *f, const void *config) { json_config(f, config); }

void json_number(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs("null", f);
}
