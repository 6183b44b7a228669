/*
** cli.h
** Command-line parsing for the fatune command.
*/
#ifndef CLI_H
#define CLI_H

#include <stddef.h>
#include <stdio.h>

#include "backend.h"
#include "fa_problem.h"
#include "workload.h"

typedef enum cli_cmd {
  CMD_TUNE, CMD_LIST, CMD_GEN, CMD_COMPILE, CMD_RUN, CMD_HELP, CMD_VERSION,
  CMD_BEST, CMD_SHOW, CMD_EXPORT, CMD_MERGE, CMD_EXPLORE, CMD_REPORT, CMD_SASS,
  CMD_BASELINE, CMD_MODEL
} cli_cmd;

/* The most values of one list in a sweep (--dim 64,128 --seq 256:4096:x2). */
#define CLI_LIST_MAX 64

typedef struct cli_opts {
  cli_cmd cmd;
  fa_problem problem;     /* dim, dtype, causal, seq_q, seq_k, batch, heads */
  int dims[CLI_LIST_MAX], ndims;     /* --dim's values (the first is problem.dim) */
  int seqs[CLI_LIST_MAX], nseqs;     /* --seq's values (the first is problem.seq_q) */
  /* Op decode's sweeps: --seq-k (the first is problem.seq_k), --batch,
  ** --gqa (problem.kv_group) and --page (problem.page; none: 0). */
  int seqks[CLI_LIST_MAX], nseqks;
  int batches[CLI_LIST_MAX], nbatches;
  int gqas[CLI_LIST_MAX], ngqas;
  int pages[CLI_LIST_MAX], npages;
  int kv_lens[CLI_LIST_MAX], nkv_lens;  /* --kv-lens: each sequence's keys (problem.kv_lens) */
  int seq_lens[CLI_LIST_MAX], nseq_lens; /* --seq-lens: a variable-length batch's sequences
                                         ** (problem.q_lens and kv_lens) */
  const char *workload;              /* --workload: a recorded decoding workload's file */
  wl_key wl_keys[WL_KEYS_MAX];       /* its keys (batch, seq_k), each a key of the sweep */
  int nwl_keys;
  long wl_steps;
  fa_dtype dtypes[4];                /* --dtype's values (the first is problem.dtype) */
  int ndtypes;
  int causal_both;        /* main job: --causal=both, each key without and with the mask */
  int shard_i, shard_n;   /* main job: --shard I/N, 1 <= I <= N; 0: the whole sweep */
  const char *arch;       /* NULL: the device's, else sm_90 */
  const char *mod;        /* --mod: a built-in modification, or a NAME.lua file; NULL none */
  int smem;               /* override of the target's shared memory, 0: none */
  int jobs;               /* 0: all cores */
  int json;
  const char *space;      /* "default" or "full" */
  const char *variant;
  const char *config;
  const char *backend;    /* "auto", "emu" or "cuda" */
  int emu_seq;            /* the emulator's largest seq in the main job */
  unsigned long long seed;
  int seed_given;
  const char *q, *k, *v, *lse;  /* run: .npy paths */
  const char *out;        /* run: the output .npy; report: the directory */
  const char *dout, *o_in;       /* run --op bwd: dO, and the forward pass's O (with lse) */
  const char *dq, *dk, *dv;      /* run --op bwd: the gradients' .npy paths */
  fa_schedule schedule;  /* run: the emulator's thread order */
  int timeout_s;          /* main job: a variant's wall-time limit in its worker */
  int trial_ms;           /* main job: timing budget per variant (GPU) */
  const char *db;         /* results database path, or NULL for the default */
  int retune;             /* main job: measure again what the database has */
  const char *device;     /* best, show: a device's name, uuid or part of its name */
  double max_error;       /* best: the error budget (0: none) */
  int deterministic;      /* best: only bitwise-deterministic variants */
  const char *format;     /* export: "csv" or "json"; report: "html" or "md" */
  const char *axis;       /* explore: an axis of the families' explore plans, or all */
  int sweep_lo, sweep_hi; /* explore --sweep seq=LO:HI; 0: no sweep */
  const char *merge_path; /* merge: the first other database; sass: the cubin; baseline: the CSV */
  char **merge_paths;     /* merge: every other database, in order (in argv) */
  int nmerge;
  int help;               /* --help was given */
  const char *help_cmd;   /* help: the command to describe, NULL: fatune's own */
  const char *dtype_why;  /* the dtype was chosen for the target, not given: why */
  int sass;               /* compile, main job: analyse each cubin's SASS (sass.c) */
  const char *save_cubin; /* compile: the directory to write each cubin to */
  const char *gpu;        /* compile, sass, main job: the estimate's GPU (estimate.c) */
  const char *cubin;      /* model: a cubin's path */
  const char *launch;     /* model: how the cubin launches, fa2 or fa3 */
  const char *kernel;     /* model: a part of the cubin's function's name */
  const char *plot;       /* model: the timeline's PNG */
  int red_lines;          /* model: lines a warp's atomic add touches, 0: the kernel's own */
  unsigned long long given;  /* the flags given, one bit per entry of cli.c's table */
} cli_opts;

#define EXIT_BAD_INPUT 2

/* Print "fatune: msg" as one line on stderr (control characters become
** '?', a long message is cut) and return rc. */
int cli_say(int rc, const char *msg);

/* Parse argv. Returns 0, or -1 with a one-line message in err. */
int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen);

/* Whether output to fd may be coloured: a terminal, NO_COLOR unset or
** empty (no-color.org), and TERM not "dumb". */
int cli_colour(int fd);

/* Whether flag ("--dtype") was on the command line, not a default. */
int cli_given(const cli_opts *o, const char *flag);

/* The help of command name, or of fatune and its main job (NULL): its
** synopsis, what it does, its flags and an example. */
void cli_help(FILE *f, const char *name);

#endif
