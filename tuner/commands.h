/*
** commands.h
** fatune list, gen and compile: the commands that only generate (and
** compile) variants, each in its own cmd_*.c file.
*/
#ifndef COMMANDS_H
#define COMMANDS_H

#include "cli.h"
#include "gen.h"

/* Each returns the command's exit status. */
int cmd_list_main(gen_state *g, const cli_opts *o, const gen_target *t);
int cmd_gen_main(gen_state *g, const cli_opts *o, const gen_target *t);
int cmd_compile_main(gen_state *g, const cli_opts *o, const gen_target *t);
/* fatune sass FILE.cubin: the SASS figures of each function of a cubin. */
int cmd_sass_main(const cli_opts *o);
/* fatune model: the timing model's prediction for one kernel (cmd_model.c). */
int cmd_model_main(gen_state *g, const cli_opts *o, const gen_target *t);

/* An empty space is an answer the user must see, not a silent success:
** says so and returns EXIT_BAD_INPUT. */
int cmd_no_variants(const cli_opts *o, const gen_target *t);

#endif
