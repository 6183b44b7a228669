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
  "\n"
  "The main job (no command) generates every variant of the default space for the\n"
  "problem and the target, compiles it, runs it and validates it against naive\n"
  "attention. With no GPU it runs on the CPU emulator, which validates at a small\n"
  "sequence length (--emu-seq) and counts memory traffic: emulator figures, not\n"
  "GPU performance.\n"
  "\n"
  "explore runs matched variants that differ in one design axis (FlashAttention-1\n"
  "against -2) and shows what each costs, measured and predicted by the model;\n"
  "report renders the database into HTML or Markdown with gnuplot plots.\n"
  "\n"
  "problem flags:\n"
  "  --dim D          head dimension, 1 to 256 (default 64)\n"
  "  --dtype T        fp32, fp64, fp16 or bf16 (default fp32)\n"
  "  --causal         causal mask, aligned to the bottom-right corner\n"
  "  --seq N          query sequence length (default 4096)\n"
  "  --seq-k M        key/value sequence length (default: --seq)\n"
  "  --batch B        batch size (default 4)\n"
  "  --heads H        heads (default 16)\n"
  "  --scale S        softmax scale (default 1/sqrt(dim))\n"
  "target and backend flags:\n"
  "  --backend B      auto (the GPU if there is one, else the emulator), cuda or emu\n"
  "  --arch A         sm_80, sm_86, sm_89, sm_90, sm_90a, ... (default: the GPU's, else sm_90)\n"
  "  --smem BYTES     shared memory per block (default: the arch's opt-in maximum)\n"
  "  --emu-seq N      on the emulator, run at most N queries and keys (default 256)\n"
  "  --seed S         seed of the random inputs (default: from the clock; always printed)\n"
  "  --schedule S     emulator thread order: forward, reverse, random or skew (run; default forward)\n"
  "  --timeout S      a variant that runs longer is stopped and recorded as timeout (default 60)\n"
  "  --trial-ms N     GPU timing budget per variant, in milliseconds (default 300)\n"
  "  --db PATH        results database (default: $FATUNE_DB, else ~/.cache/fatune/fatune.db)\n"
  "  --device NAME    best, show: a device's name, UUID or part of its name\n"
  "  --format F       export: csv or json; report: html (default) or md\n"
  "  --axis A         explore: norm, parallel, warp_split, layout, tiles or all (default)\n"
  "  --sweep seq=A:B  explore: seq A, 2A, 4A, ... up to B instead of --seq\n"
  "  --out DIR        report: the directory to write (default fatune-report)\n"
  "  --retune         measure again what the database already holds\n"
  "run flags:\n"
  "  --q --k --v F    inputs, .npy float16/32/64 of shape (N, D) or (B, H, N, D)\n"
  "  --out F          output .npy: float64 for fp64 variants, else float32\n"
  "  --lse F          also write the logsumexp, float32 of shape (N,) or (B, H, N)\n"
  "other flags:\n"
  "  --space S        default (worth timing) or full (whole cross product)\n"
  "  --jobs N         work on N threads (default: all cores)\n"
  "  --json           print JSON instead of a table\n"
  "  --variant NAME   a variant by its name (fatune list prints them)\n"
  "  --config TEXT    a variant by its config, e.g. 'block_m=64,block_n=32,norm=eager'\n"
  "  --help, --version\n";

enum {
  F_DIM = 1, F_SEQ = 2, F_ARCH = 4, F_JOBS = 8, F_JSON = 16, F_SPACE = 32, F_PICK = 64,
  F_TYPE = 128, F_BACKEND = 256, F_EMU = 512, F_SEED = 1024, F_IO = 2048, F_SCALE = 4096,
  F_SCHED = 8192, F_WORK = 16384, F_DB = 32768, F_DEV = 65536, F_FMT = 131072,
  F_AXIS = 1 << 18, F_OUT = 1 << 19, F_RETUNE = 1 << 20
};

typedef struct cmd_info {
  const char *name;
  cli_cmd cmd;
  int flags;
} cmd_info;

static const cmd_info commands[] = {
  {"list", CMD_LIST, F_DIM | F_TYPE | F_SEQ | F_ARCH | F_JSON | F_SPACE},
  {"gen", CMD_GEN, F_DIM | F_TYPE | F_ARCH | F_PICK},
  {"compile", CMD_COMPILE, F_DIM | F_TYPE | F_SEQ | F_ARCH | F_JOBS | F_JSON | F_SPACE},
  {"best", CMD_BEST, F_DIM | F_TYPE | F_SEQ | F_DEV | F_DB | F_JSON},
  {"show", CMD_SHOW, F_DIM | F_TYPE | F_SEQ | F_DEV | F_DB | F_JSON},
  {"export", CMD_EXPORT, F_FMT | F_DB},
  {"merge", CMD_MERGE, F_DB},
  {"run", CMD_RUN, F_TYPE | F_SCALE | F_ARCH | F_PICK | F_BACKEND | F_IO | F_OUT | F_SCHED |
                  F_JOBS},
  {"explore", CMD_EXPLORE, F_DIM | F_TYPE | F_SEQ | F_SCALE | F_ARCH | F_JOBS | F_JSON |
                           F_BACKEND | F_EMU | F_SEED | F_WORK | F_DB | F_AXIS},
  {"report", CMD_REPORT, F_OUT | F_FMT | F_DB},
  {NULL, CMD_TUNE, F_DIM | F_TYPE | F_SEQ | F_SCALE | F_ARCH | F_JOBS | F_JSON | F_SPACE |
                   F_BACKEND | F_EMU | F_SEED | F_WORK | F_RETUNE | F_DB},
};

typedef struct flag_info {
  const char *name;
  int group;
  int takes_value;
} flag_info;

static const flag_info flags[] = {
  {"--dim", F_DIM, 1}, {"--dtype", F_TYPE, 1}, {"--causal", F_TYPE, 0},
  {"--seq", F_SEQ, 1}, {"--seq-k", F_SEQ, 1}, {"--batch", F_SEQ, 1}, {"--heads", F_SEQ, 1},
  {"--scale", F_SCALE, 1}, {"--arch", F_ARCH, 1}, {"--smem", F_ARCH, 1},
  {"--jobs", F_JOBS, 1}, {"--json", F_JSON, 0}, {"--space", F_SPACE, 1},
  {"--variant", F_PICK, 1}, {"--config", F_PICK, 1}, {"--backend", F_BACKEND, 1},
  {"--emu-seq", F_EMU, 1}, {"--seed", F_SEED, 1}, {"--schedule", F_SCHED, 1},
  {"--timeout", F_WORK, 1}, {"--trial-ms", F_WORK, 1}, {"--retune", F_RETUNE, 0},
  {"--device", F_DEV, 1}, {"--format", F_FMT, 1}, {"--axis", F_AXIS, 1}, {"--sweep", F_AXIS, 1},
  {"--db", F_DB, 1}, {"--q", F_IO, 1}, {"--k", F_IO, 1}, {"--v", F_IO, 1}, {"--out", F_OUT, 1},
  {"--lse", F_IO, 1},
  {NULL, 0, 0},
};

int cli_say(int rc, const char *msg) {
  char line[320];
  size_t n = 0;
  for (; msg[n] && n < sizeof line - 4; n++)
    line[n] = (unsigned char)msg[n] < 0x20 || msg[n] == 0x7f ? '?' : msg[n];
  if (msg[n]) memcpy(line + n, "...", 3), n += 3;
  line[n] = '\0';
  fprintf(stderr, "fatune: %s\n", line);
  return rc;
}

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

static int parse_seed(const char *s, cli_opts *o, char *err, size_t n) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end != '\0' || !isdigit((unsigned char)*s))
    return fail(err, n, "--seed must be a non-negative integer, not '%s'", s);
  o->seed = v, o->seed_given = 1;
  return 0;
}

static int parse_scale(const char *s, double *out, char *err, size_t n) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !(v > 0) || v > 1e6)
    return fail(err, n, "--scale must be a positive number up to 1e6, not '%s'", s);
  *out = v;
  return 0;
}

/* export writes csv or json; report html or md. */
static int parse_format(cli_opts *o, const char *s, char *err, size_t n) {
  const int report = o->cmd == CMD_REPORT;
  const char *a = report ? "html" : "csv", *b = report ? "md" : "json";
  if (strcmp(s, a) && strcmp(s, b)) return fail(err, n, "unknown format '%s' (%s or %s)", s, a, b);
  o->format = s;
  return 0;
}

static int parse_axis(cli_opts *o, const char *s, char *err, size_t n) {
  static const char *const axes[] = {"norm", "parallel", "warp_split", "layout", "tiles", "all"};
  for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++)
    if (!strcmp(s, axes[i])) {
      o->axis = axes[i];
      return 0;
    }
  return fail(err, n, "unknown axis '%s' (norm, parallel, warp_split, layout, tiles or all)", s);
}

/* seq=A:B, 1 <= A <= B. */
static int parse_sweep(cli_opts *o, const char *s, char *err, size_t n) {
  char *end = (char *)s;
  errno = 0;
  long a = strncmp(s, "seq=", 4) || !isdigit((unsigned char)s[4]) ? -1 : strtol(s + 4, &end, 10);
  long b = a >= 1 && *end == ':' && isdigit((unsigned char)end[1]) ? strtol(end + 1, &end, 10) : -1;
  if (errno || b < a || a < 1 || b > 1 << 24 || *end != '\0')
    return fail(err, n, "--sweep must be seq=A:B with 1 <= A <= B <= %d, not '%s'", 1 << 24, s);
  o->sweep_lo = (int)a, o->sweep_hi = (int)b;
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
  if (!strcmp(flag, "--timeout")) return parse_int(flag, val, 1, 86400, &o->timeout_s, err, n);
  if (!strcmp(flag, "--trial-ms")) return parse_int(flag, val, 1, 600000, &o->trial_ms, err, n);
  if (!strcmp(flag, "--emu-seq")) return parse_int(flag, val, 1, 1 << 24, &o->emu_seq, err, n);
  if (!strcmp(flag, "--seed")) return parse_seed(val, o, err, n);
  if (!strcmp(flag, "--scale")) return parse_scale(val, &p->scale, err, n);
  if (!strcmp(flag, "--causal")) p->causal = 1;
  else if (!strcmp(flag, "--json")) o->json = 1;
  else if (!strcmp(flag, "--arch")) o->arch = val;
  else if (!strcmp(flag, "--variant")) o->variant = val;
  else if (!strcmp(flag, "--config")) o->config = val;
  else if (!strcmp(flag, "--retune")) o->retune = 1;
  else if (!strcmp(flag, "--db")) o->db = val;
  else if (!strcmp(flag, "--device")) o->device = val;
  else if (!strcmp(flag, "--format")) return parse_format(o, val, err, n);
  else if (!strcmp(flag, "--axis")) return parse_axis(o, val, err, n);
  else if (!strcmp(flag, "--sweep")) return parse_sweep(o, val, err, n);
  else if (!strcmp(flag, "--q")) o->q = val;
  else if (!strcmp(flag, "--k")) o->k = val;
  else if (!strcmp(flag, "--v")) o->v = val;
  else if (!strcmp(flag, "--out")) o->out = val;
  else if (!strcmp(flag, "--lse")) o->lse = val;
  else if (!strcmp(flag, "--backend")) {
    if (strcmp(val, "auto") && strcmp(val, "emu") && strcmp(val, "cuda"))
      return fail(err, n, "unknown backend '%s' (auto, emu or cuda)", val);
    o->backend = val;
  } else if (!strcmp(flag, "--schedule")) {
    if (emu_schedule_parse(val, &o->schedule) != 0)
      return fail(err, n, "unknown schedule '%s' (forward, reverse, random or skew)", val);
  }
  else if (!strcmp(flag, "--dtype")) {
    if (fa_dtype_parse(val, &p->dtype) != 0)
      return fail(err, n, "unknown dtype '%s' (fp32, fp64, fp16 or bf16)", val);
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
  o->backend = "auto";
  o->emu_seq = 256;
  o->timeout_s = 60;
  o->trial_ms = 300;
  o->schedule = EMU_FORWARD;
  o->axis = "all";
}

_Static_assert(sizeof flags / sizeof flags[0] <= 65, "cli_opts.given has a bit per flag");

int cli_given(const cli_opts *o, const char *flag) {
  for (const flag_info *f = flags; f->name; f++)
    if (!strcmp(f->name, flag)) return (o->given >> (f - flags)) & 1;
  return 0;
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
    if (o->cmd == CMD_MERGE && a[0] != '-' && !o->merge_path) { o->merge_path = a; continue; }
    const flag_info *f = flags;
    while (f->name && strcmp(f->name, a)) f++;
    if (!f->name) return fail(err, errlen, "unknown option '%s' (see fatune --help)", a);
    o->given |= 1ull << (f - flags);
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
  if ((o->cmd == CMD_GEN || o->cmd == CMD_RUN) && !!o->variant == !!o->config)
    return fail(err, errlen, "fatune %s needs exactly one of --variant NAME or --config TEXT",
                o->cmd == CMD_GEN ? "gen" : "run");
  if (o->cmd == CMD_RUN && (!o->q || !o->k || !o->v || !o->out))
    return fail(err, errlen, "fatune run needs --q, --k, --v and --out");
  if (o->cmd == CMD_EXPLORE && o->sweep_lo && (cli_given(o, "--seq") || cli_given(o, "--seq-k")))
    return fail(err, errlen, "fatune explore takes --seq or --sweep, not both");
  if (o->cmd == CMD_EXPLORE && o->problem.dtype != FA_FP32 && o->problem.dtype != FA_FP64)
    return fail(err, errlen, "fatune explore covers the SIMT family: --dtype fp32 or fp64, not %s",
                fa_dtype_name(o->problem.dtype));
  return 0;
}
