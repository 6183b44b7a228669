/*
** json.h
** The little JSON the commands print.
*/
#ifndef JSON_H
#define JSON_H

#include <stdio.h>

/* s as a JSON string, quotes included; NULL prints "". */
void json_string(FILE *f, const char *s);

/* A config's "k=v,..." pairs as JSON members, each preceded by ", ";
** numbers unquoted. */
void json_config(FILE *f, const char *config);

/* A double, or null when it is not finite (JSON has no NaN or Inf). */
void json_number(FILE *f, double x);

#endif
