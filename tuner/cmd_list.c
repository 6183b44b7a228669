/*
** cmd_list.c
** fatune list: the variants of the space for a problem and a target, a
** line each (name, the config's pairs, the hash) or a JSON array.
*/
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "fa_sink.h"
#include "json.h"

int cmd_no_variants(const cli_opts *o, const gen_target *t) {
  char dims[24];
  fa_dims_text(o->problem.dim, o->problem.dim_v, dims, sizeof dims);
  fprintf(stderr, "fatune: no variant of the %s space fits %s (%d bytes of shared memory) "
                  "for dim %s %s\n", o->space, t->arch, t->smem_bytes, dims,
          fa_dtype_name(o->problem.dtype));
  return EXIT_BAD_INPUT;
}

/* The config's pairs as one cell: family=F k=v ... */
static void pairs_text(const gen_config *c, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "family=%s", c->family);
  for (int i = 0; i < c->n && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, " %s=%s", c->pair[i].key, c->pair[i].value);
}

/* A line of unpadded cells per variant (no heading), or a JSON object. */
static const fa_column line_cols[] = {{"name", 0, ""}, {"config", 0, " "}, {"hash", 0, " "}};
static const fa_column json_cols[] = {{"name", 0, NULL}, {"hash", 0, NULL}, {NULL, 0, NULL}};

static void variant_row(fa_sink *s, const gen_variant *v) {
  char pairs[4096], hash[80];
  if (s->format == FA_SINK_JSON) {
    fa_sink_row(s, (fa_cell[]){fa_cell_text(v->name), fa_cell_text(v->hash),
                               fa_cell_members(json_config_members, &v->cfg)}, 3);
    return;
  }
  pairs_text(&v->cfg, pairs, sizeof pairs);
  snprintf(hash, sizeof hash, "hash=%s", v->hash);
  fa_sink_row(s, (fa_cell[]){fa_cell_text(v->name), fa_cell_text(pairs), fa_cell_text(hash)}, 3);
}

int cmd_list_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  gen_variant *v;
  size_t n;
  if (gen_list(g, &o->problem, t, o->space, &v, &n) != 0)
    return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
  if (n == 0) return cmd_no_variants(o, t);
  fa_sink s;
  fa_sink_begin_headless(&s, stdout, o->json ? FA_SINK_JSON : FA_SINK_TABLE,
                         o->json ? json_cols : line_cols, 3);
  for (size_t i = 0; i < n; i++) variant_row(&s, &v[i]);
  gen_variants_free(v, n);
  return fa_sink_end(&s) == 0 ? 0 : cli_say(1, "cannot write the variants");
}
