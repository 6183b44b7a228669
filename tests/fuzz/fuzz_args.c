/*
** fuzz_args.c
** The command-line parser on arbitrary argument lists: the input split at
** newlines (or NULs) into argv after "fatune". cli_parse must return, never
** exit; on success the problem is within the flags' ranges, and on failure
** the message is one non-empty line.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_ARGS 64

static void check_parsed(const cli_opts *o) {
  const fa_problem *p = &o->problem;
  int sane = p->dim >= 1 && p->dim <= FA_DIM_MAX && p->seq_q >= 1 && p->seq_k >= 1 &&
             p->batch >= 1 && p->heads >= 1 && (p->causal == 0 || p->causal == 1) &&
             o->emu_seq >= 1 && o->timeout_s >= 1 && o->trial_ms >= 1 && o->backend &&
             o->space && o->axis;
  if (o->cmd == CMD_RUN) sane = sane && o->q && o->k && o->v && o->out;
  if (o->cmd == CMD_GEN || o->cmd == CMD_RUN) sane = sane && !o->variant != !o->config;
  if (!sane) {
    fprintf(stderr, "fuzz_args: cli_parse accepted out-of-range options\n");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), *argv[MAX_ARGS + 2];
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  int argc = 0;
  argv[argc++] = "fatune";
  /* Split at '\n' and '\0' alike; the last piece needs no separator. */
  for (size_t i = 0, start = 0; i <= size && argc <= MAX_ARGS; i++)
    if (i == size || text[i] == '\n' || text[i] == '\0') {
      text[i] = '\0';
      if (i > start || i < size) argv[argc++] = text + start;
      start = i + 1;
    }
  argv[argc] = NULL;
  cli_opts o;
  char err[512];
  err[0] = '\0';
  if (cli_parse(argc, argv, &o, err, sizeof err) == 0) {
    if (o.cmd != CMD_HELP && o.cmd != CMD_VERSION) check_parsed(&o);
  } else if (!err[0]) {
    fprintf(stderr, "fuzz_args: cli_parse failed without a message\n");
    abort();
  }
  free(text);
  return 0;
}
