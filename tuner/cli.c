/*
** cli.c
** Command-line parsing: strict numbers, known flags only, and flags that
** belong to the command they are given to.
*/
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cli_usage[] =
  "usage: fatune [--dim D] [--seq N] [problem flags] [--arch A] [--jobs N] [--json]\n"
  "       fatune list --dim D [--dtype T] [--causal] [--arch A] [--space default|full] [--json]\n"
  "       fatune gen (--variant NAME | --config 'k=v,...') [--dim D] [--dtype T] [--causal] [--arch A]\n"
  "       fatune compile --dim D [--dtype T] [--causal] [--arch A] [--space S] [--jobs N] [--json]\n"
  "\n"
  "The main job (no command) generates and compiles every variant of the default\n"
  "space for the problem and the target GPU, and prints the compile table.\n"
  "\n"
  "problem flags:\n"
  "  --dim D          head dimension, 1 to 256 (default 64)\n"
  "  --dtype T        fp32 or fp64 (default fp32)\n"
  "  --causal         causal mask, aligned to the bottom-right corner\n"
  "  --seq N          query sequence length (default 4096)\n"
  "  --seq-k M        key/value sequence length (default: --seq)\n"
  "  --batch B        batch size (default 4)\n"
  "  --heads H        heads (default 16)\n"
  "target flags:\n"
  "  --arch A         sm_80, sm_86, sm_89, sm_90, sm_90a, ... (default: the GPU's, else sm_90)\n"
  "  --smem BYTES     shared memory per block (default: the arch's opt-in maximum)\n"
  "other flags:\n"
  "  --space S        default (worth timing) or full (whole cross product)\n"
  "  --jobs N         compile on N threads (default: all cores)\n"
  "  --json           print JSON instead of a table\n"
  "  --variant NAME   a variant by its name (fatune list prints them)\n"
  "  --config TEXT    a variant by its config, e.g. 'block_m=64,block_n=32,norm=eager'\n"
  "  --help, --version\n";

enum {
  F_PROBLEM = 1, F_SEQ = 2, F_ARCH = 4, F_JOBS = 8, F_JSON = 16, F_SPACE = 32, F_PICK = 64
};

typedef struct cmd_info {
  const char *name;
  cli_cmd cmd;
  int flags;
} cmd_info;

static const cmd_info commands[] = {
  {"list", CMD_LIST, F_PROBLEM | F_SEQ | F_ARCH | F_JSON | F_SPACE},
  {"gen", CMD_GEN, F_PROBLEM | F_ARCH | F_PICK},
  {"compile", CMD_COMPILE, F_PROBLEM | F_SEQ | F_ARCH | F_JOBS | F_JSON | F_SPACE},
  {NULL, CMD_TUNE, F_PROBLEM | F_SEQ | F_ARCH | F_JOBS | F_JSON | F_SPACE},
};

typedef struct flag_info {
  const char *name;
  int group;
  int takes_value;
} flag_info;

static const flag_info flags[] = {
  {"--dim", F_PROBLEM, 1}, {"--dtype", F_PROBLEM, 1}, {"--causal", F_PROBLEM, 0},
  {"--seq", F_SEQ, 1}, {"--seq-k", F_SEQ, 1}, {"--batch", F_SEQ, 1}, {"--heads", F_SEQ, 1},
  {"--arch", F_ARCH, 1}, {"--smem", F_ARCH, 1}, {"--jobs", F_JOBS, 1}, {"--json", F_JSON, 0},
  {"--space", F_SPACE, 1}, {"--variant", F_PICK, 1}, {"--config", F_PICK, 1},
  {NULL, 0, 0},
};

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* A whole decimal integer in [lo, hi]. */
static int parse_int(const char *flag, const char *s, long lo, long hi, int *out,
                     char *err, size_t n) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  int sign_or_digit = *s == '-' || isdigit((unsigned char)*s);
  if (errno || end == s || *end != '\0' || !sign_or_digit || v < lo || v > hi) {
    snprintf(err, n, "%s must be an integer from %ld to %ld, not '%s'", flag, lo, hi, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int apply(cli_opts *o, const char *flag, const char *val, char *err, size_t n) {
  fa_problem *p = &o->problem;
  if (!strcmp(flag, "--dim")) return parse_int(flag, val, 1, FA_DIM_MAX, &p->dim, err, n);
  if (!strcmp(flag, "--seq")) return parse_int(flag, val, 1, 1 << 24, &p->seq_q, err, n);
  if (!strcmp(flag, "--seq-k")) return parse_int(flag, val, 1, 1 << 24, &p->seq_k, err, n);
  if (!strcmp(flag, "--batch")) return parse_int(flag, val, 1, 65535, &p->batch, err, n);
  if (!strcmp(flag, "--heads")) return parse_int(flag, val, 1, 65535, &p->heads, err, n);
  if (!strcmp(flag, "--smem")) return parse_int(flag, val, 1024, 1 << 20, &o->smem, err, n);
  if (!strcmp(flag, "--jobs")) return parse_int(flag, val, 1, 1024, &o->jobs, err, n);
  if (!strcmp(flag, "--causal")) p->causal = 1;
  else if (!strcmp(flag, "--json")) o->json = 1;
  else if (!strcmp(flag, "--arch")) o->arch = val;
  else if (!strcmp(flag, "--variant")) o->variant = val;
  else if (!strcmp(flag, "--config")) o->config = val;
  else if (!strcmp(flag, "--dtype")) {
    if (fa_dtype_parse(val, &p->dtype) != 0)
      return fail(err, n, "unknown dtype '%s' (fp32 or fp64)", val);
  } else if (!strcmp(flag, "--space")) {
    if (strcmp(val, "default") && strcmp(val, "full"))
      return fail(err, n, "unknown space '%s' (default or full)", val);
    o->space = val;
  }
  return 0;
}

static void defaults(cli_opts *o) {
  memset(o, 0, sizeof *o);
  o->cmd = CMD_TUNE;
  o->problem.dim = 64;
  o->problem.dtype = FA_FP32;
  o->problem.seq_q = 4096;
  o->problem.batch = 4;
  o->problem.heads = 16;
  o->space = "default";
}

int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen) {
  defaults(o);
  int i = 1;
  const cmd_info *cmd = &commands[sizeof commands / sizeof commands[0] - 1];
  if (i < argc && argv[i][0] != '-') {
    const cmd_info *c = commands;
    while (c->name && strcmp(c->name, argv[i])) c++;
    if (!c->name) return fail(err, errlen, "unknown command '%s' (see fatune --help)", argv[i]);
    cmd = c;
    i++;
  }
  o->cmd = cmd->cmd;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { o->cmd = CMD_HELP; return 0; }
    if (!strcmp(a, "--version")) { o->cmd = CMD_VERSION; return 0; }
    const flag_info *f = flags;
    while (f->name && strcmp(f->name, a)) f++;
    if (!f->name) return fail(err, errlen, "unknown option '%s' (see fatune --help)", a);
    if (!(cmd->flags & f->group))
      return fail(err, errlen, "option %s does not apply to 'fatune %s'", a,
                  cmd->name ? cmd->name : "(main job)");
    const char *val = NULL;
    if (f->takes_value) {
      if (i + 1 >= argc) return fail(err, errlen, "option %s needs a value", a);
      val = argv[++i];
    }
    if (apply(o, a, val, err, errlen) != 0) return -1;
  }
  if (o->problem.seq_k == 0) o->problem.seq_k = o->problem.seq_q;
  if (o->cmd == CMD_GEN && !!o->variant == !!o->config)
    return fail(err, errlen, "fatune gen needs exactly one of --variant NAME or --config TEXT");
  return 0;
}
