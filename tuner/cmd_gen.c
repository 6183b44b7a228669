/*
** cmd_gen.c
** fatune gen: one variant's CUDA source, by its name or its config.
*/
#include <stdio.h>

#include "commands.h"

int cmd_gen_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  gen_kernel k;
  int rc = o->variant ? gen_render_name_as(g, o->variant, &o->problem, t, &k)
                      : gen_render_config(g, o->config, &o->problem, t, &k);
  if (rc != 0 && o->dtype_why) {
    /* The dtype was the target's choice: say so, the user may have meant
    ** another family (a SIMT tile is smaller than any tensor-core one). */
    char msg[600];
    snprintf(msg, sizeof msg, "%s (for %s, the dtype chosen for %s; --dtype fp32 for the SIMT "
             "family)", gen_errmsg(g), fa_dtype_name(o->problem.dtype), t->arch);
    return cli_say(EXIT_BAD_INPUT, msg);
  }
  if (rc != 0) return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
  if (k.note[0]) cli_say(0, k.note);
  fputs(k.source, stdout);
  gen_kernel_free(&k);
  return 0;
}
