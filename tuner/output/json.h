/*
** json.h
** The little JSON the commands print.
*/
#ifndef JSON_H
#define JSON_H

#include <stdio.h>

#include "gen.h"

/* s as a JSON string, quotes included; NULL prints "". */
void json_string(FILE *f, const char *s);

/* A config's members as gen_config_json writes them, after ", ", to go
** inside the caller's object. */
void json_config(FILE *f, const gen_config *c);

/* json_config as fa_sink members (fa_sink.h): config is a gen_config. */
void json_config_members(FILE *f, const void *config);

/* A double, or null when it is not finite (JSON has no NaN or Inf). */
void json_number(FILE *f, double x);

#endif
