/*
** cmd_list.c
** fatune list: the variants of the space for a problem and a target, a
** line each (name, the config's pairs, the hash) or a JSON array.
*/
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "json.h"

int cmd_no_variants(const cli_opts *o, const gen_target *t) {
  fprintf(stderr, "fatune: no variant of the %s space fits %s (%d bytes of shared memory) "
                  "for dim %d %s\n", o->space, t->arch, t->smem_bytes, o->problem.dim,
          fa_dtype_name(o->problem.dtype));
  return EXIT_BAD_INPUT;
}

static void print_pairs(const gen_config *c) {
  printf("family=%s", c->family);
  for (int i = 0; i < c->n; i++) printf(" %s=%s", c->pair[i].key, c->pair[i].value);
}

int cmd_list_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  gen_variant *v;
  size_t n;
  if (gen_list(g, &o->problem, t, o->space, &v, &n) != 0)
    return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
  if (n == 0) return cmd_no_variants(o, t);
  if (o->json) printf("[");
  for (size_t i = 0; i < n; i++) {
    if (o->json) {
      printf("%s\n  {\"name\": ", i ? "," : "");
      json_string(stdout, v[i].name);
      printf(", \"hash\": \"%s\"", v[i].hash);
      json_config(stdout, &v[i].cfg);
      printf("}");
    } else {
      printf("%s ", v[i].name);
      print_pairs(&v[i].cfg);
      printf(" hash=%s\n", v[i].hash);
    }
  }
  if (o->json) printf("%s]\n", n ? "\n" : "");
  gen_variants_free(v, n);
  return 0;
}
