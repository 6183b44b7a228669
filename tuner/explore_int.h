/*
** explore_int.h
** What explore.c (the flow), explore_print.c (tables and JSON) and
** explore_peak.c (peak memory) share. Private to those files.
*/
#ifndef EXPLORE_INT_H
#define EXPLORE_INT_H

#include <stddef.h>

#include "explore.h"
#include "trial.h"

#define EX_NAXES 6        /* at most, in a family */
#define EX_NCOUNTERS 16   /* at most, in a family */
#define EX_MAX 16        /* variants: every axis around one default */

/* One design axis: configs around the family's default that differ in
** this axis only, the FlashAttention-1 side (or the simpler one) first;
** why it moves what it moves; the counter it is about, as the sum of two
** of the family's counters (key[0] == key[1]: one; -1: none). */
typedef struct ex_axis {
  const char *name, *title;
  int n;
  const char *label[4], *config[4];
  const char *why;
  int key[2];
  const char *key_label;
} ex_axis;

/* A counter as the cost model (gen_predict, by its field name), the JSON
** and the table name it, and where fa_counters keeps it. */
typedef trial_counter ex_counter;

/* A family explore covers, as its plan in the templates says: its axes
** around its default (config, the text every variant's config starts
** with), the counters its model predicts, the files the model and the
** kernel live in (for a mismatch's flag), and whether the FlashAttention
** paper's bounds and seed 003's peak memory come after (a walk from
** FlashAttention-1 to -2). */
typedef struct ex_family {
  const char *name, *config, *model, *kernel;
  int naxes;
  const ex_axis *axes;
  int ncounters;
  const ex_counter *const *counters;
  int paper;
} ex_family;

typedef struct ex_variant {
  trial t;                     /* first: the trials' stride is this struct's */
  /* For the problem being run: */
  long long pred[EX_NCOUNTERS];  /* the model's; -1 where it has none */
  long long paper_standard, paper_tiled;  /* the FlashAttention paper's figures, bytes */
  /* The timing model's TFLOP/s for the problem asked (its batch, heads and
  ** first seq) on model_gpu; NAN where there is no prediction. */
  double model_tflops;
} ex_variant;

/* Seed 003's optional step: naive attention's peak memory against a tiled
** kernel's, at N = EX_PEAK_N, d = EX_PEAK_D, fp32, one head. */
#define EX_PEAK_N 5000
#define EX_PEAK_D 64
typedef struct ex_peak {
  int done;
  double naive_bytes;    /* what naive attention allocates: Q, K, V, O and S */
  double naive_rss;      /* measured growth of the peak resident set, bytes; < 0 unknown */
  double naive_ms;
  char variant[160];     /* the tiled kernel */
  double tiled_bytes;    /* what it allocates: Q, K, V, O, logsumexp, workspace */
  double tiled_ws;       /* of which workspace */
  int tiled_smem;        /* shared memory per CTA */
} ex_peak;

typedef struct explore {
  const cli_opts *o;
  const ex_family *fam;
  struct ex_plan *plan;        /* what fam points into (explore.c) */
  const gen_target *t;
  gen_state *g;
  fa_backend *be;
  int gpu, threads, emu_seq;
  db *db;
  unsigned long long seed;
  fa_problem run;              /* the problem being run */
  ex_variant v[EX_MAX];
  size_t n;
  int on[EX_NAXES];            /* the axes asked for */
  int slot[EX_NAXES][4];       /* index into v; -1 where the config does not fit */
  char unfit[EX_NAXES][4][200];
  trial_env env;                /* the variants' workers and database rows */
  /* Findings. */
  int failures, mismatches;
  int no_model_said;           /* the family has no cost model, and explore said so */
  const char *model_gpu;       /* the timing model's GPU, NULL: no prediction */
  double run_s;
  ex_peak peak;
} explore;

/* The emulator's count of the family's counter c for v. Here, not in
** explore.c, so that explore_print.c depends on nothing of the flow that
** calls it. */
static inline long long ex_measured(const explore *x, const ex_variant *v, int c) {
  return (long long)*(const unsigned long long *)((const char *)&v->t.out.r.counters +
                                                  x->fam->counters[c]->off);
}

/* The tables (or JSON) of one problem, after it ran; first says whether it
** is the first. Counts the counters off the model in x->mismatches. */
void ex_print_start(explore *x);
void ex_print_problem(explore *x, int first);
void ex_print_end(explore *x);

/* Runs naive attention on the host and measures its peak; the tiled
** kernel's allocation from its launch shape. Fills x->peak. */
int ex_peak_measure(explore *x);

#endif
