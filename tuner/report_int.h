/*
** report_int.h
** What report.c (trials, groups, the page) and report_plot.c (gnuplot)
** share. Private to those files. report.c calls report_plot.c, never the
** other way: what both need of a trial is in report_plot.c.
*/
#ifndef REPORT_INT_H
#define REPORT_INT_H

#include <stddef.h>
#include <stdio.h>

#include "report.h"

/* One trial, as the page and the plots need it. */
typedef struct rp_trial {
  char variant[160], device[160], backend[8], dtype[8], status[16];
  char design[48];       /* the FlashAttention axes: norm/par/split */
  char norm[16], par[16], tile[24];
  char rest[128];        /* every axis but the design's: tile, warps, layout, q, ... */
  int dim, seq_q, seq_k, causal, esize;
  double tflops;         /* NAN when not timed */
  double gbps;           /* Q, K, V, O and LSE's bytes over the time; NAN when not timed */
  double gbytes;         /* global bytes per (batch x head); NAN without counters */
  double rescale;        /* rescale multiplies per (batch x head); NAN without */
  double rel_err;
} rp_trial;

/* Trials that share a device, dtype, dim, causal and seq_k - seq_q: one
** set of line plots (seq_q on the x axis). heat: the same without dim and
** with seq_q == seq_k, for the heat map over (dim, seq). */
typedef struct rp_group {
  size_t *idx, n;
  const rp_trial *key;   /* its first trial */
  int heat;
} rp_group;

#define RP_MAX_SEQ 64
#define RP_MAX_SERIES 12

/* A plot's numbers: one row per x value (seq, or dim for a heat map), one
** column per series; NAN where nothing was measured. */
typedef struct rp_matrix {
  int nx, ny;
  int x[RP_MAX_SEQ], y[RP_MAX_SEQ];              /* heat maps: seq (x) by dim (y) */
  int nser;
  char ser[RP_MAX_SERIES][48];
  double v[RP_MAX_SERIES][RP_MAX_SEQ];
  const rp_trial *cell[RP_MAX_SEQ][RP_MAX_SEQ];  /* heat maps: the best trial */
  int dropped;                                   /* points past the limits */
  char matched[128];     /* by design: the other axes every series shares, "" when none */
} rp_matrix;

/* A GPU trial beside its variant's SASS figures for the device's GPU. */
typedef struct rp_est {
  char device[128], dtype[8];
  int seq_q, registers, ctas_per_sm;   /* -1: unknown */
  double est, measured;  /* TFLOP/s: the static estimate, the trial's */
} rp_est;

/* PyTorch's attention timed on a GPU (the database's baselines). */
typedef struct rp_base {
  char gpu[128], backend[32], dtype[8], torch[64];
  int dim, seq_q, seq_k, batch, heads, causal;
  double median_us, tflops;
} rp_base;

/* One figure: its PNG (under the output directory) and caption. */
typedef struct rp_figure {
  char png[64], title[240];
  int group;             /* index into rp_ctx.g, or RP_EST_GROUP, or RP_GPU_GROUP(k) */
} rp_figure;

typedef struct rp_ctx {
  const cli_opts *o;
  const char *dir;
  char db_path[1024];
  rp_trial *t;
  size_t n;
  rp_group *g;
  size_t ng;
  FILE *gp;              /* the gnuplot script being written */
  rp_figure *fig;
  size_t nfig, capfig;
  int cur_group;         /* the group whose figures are being added */
  rp_est *est;
  size_t nest, capest;
  /* One timed trial of each (device, dtype) the GPU trials hold: the key
  ** of a roofline and of a registers plot. */
  const rp_trial **gpu;
  size_t ngpu;
  rp_base *base;
  size_t nbase, capbase;
  /* One baseline of each (GPU, dtype, dim, causal, seq_k - seq_q): the key
  ** of a plot of fatune's TFLOP/s against PyTorch's. */
  const rp_base **bkey;
  size_t nbkey;
} rp_ctx;

/* The group of the figure of estimate against measurement, and those of
** the figures of c->gpu[k]. */
#define RP_EST_GROUP (-1)
#define RP_GPU_GROUP(k) (-2 - (int)(k))
#define RP_BASE_GROUP(k) (-1000000 - (int)(k))

/* Which value of a trial a line plot shows, and which of two is better. */
typedef enum rp_metric { RP_TFLOPS, RP_GBYTES, RP_RESCALE } rp_metric;
double rp_value(const rp_trial *t, rp_metric m);
int rp_better(rp_metric m, double a, double b);   /* a beats b */
int rp_gpu(const rp_trial *t);   /* timed on a GPU: ranked by TFLOP/s, not bytes */

/* The best value per (seq, series) of group g; series by design (0), loop
** order (1) or normalization (2). By design, only matched variants: those
** whose other axes (tile, warps, layout, ...) are the set most designs
** share, named in out->matched, as explore compares them. */
void rp_lines(const rp_ctx *c, const rp_group *g, rp_metric m, int by, rp_matrix *out);
/* The best tile per (dim, seq) of heat group g. */
void rp_heat(const rp_ctx *c, const rp_group *g, rp_matrix *out);

/* Whether b shares key's GPU, dtype, dim, causal mask and seq_k - seq_q;
** whether trial t is a timed GPU trial of that problem. */
int rp_base_of(const rp_base *b, const rp_base *key);
int rp_base_trial(const rp_trial *t, const rp_base *key);
/* c->bkey[k]'s plot: per seq_q, fatune's best TFLOP/s (series 0) and each
** baseline backend's. */
void rp_base_lines(const rp_ctx *c, size_t k, rp_matrix *out);

/* Writes the data file and the script's commands for a figure, and adds
** it to c->fig. -1 when a file cannot be written. */
int rp_plot_lines(rp_ctx *c, const char *png, const char *title, const char *ylabel,
                  const rp_matrix *m, int logy);
int rp_plot_heat(rp_ctx *c, const char *png, const char *title, const rp_matrix *m);
/* The measured TFLOP/s of c->est against the estimate, with the line
** measured = estimated. */
int rp_plot_estimate(rp_ctx *c, const char *png, const char *title);

/* Whether t is c->gpu[k]'s timed trial with a bandwidth: a roofline point. */
int rp_roof_point(const rp_trial *t, const rp_trial *key);
/* Whether e belongs to c->gpu[k]'s (device, dtype). */
int rp_est_of(const rp_est *e, const rp_trial *key);
/* c->gpu[k]'s trials: attained TFLOP/s against arithmetic intensity (FLOPs
** over the bytes of Q, K, V, O and LSE), one series per seq_len, under
** the GPU's compute and bandwidth roofs when estimate.c knows it. */
int rp_plot_roofline(rp_ctx *c, size_t k, const char *png, const char *title);
/* c->gpu[k]'s trials with SASS figures: TFLOP/s against registers per
** thread, coloured by CTAs per SM. */
int rp_plot_registers(rp_ctx *c, size_t k, const char *png, const char *title);

/* Runs gnuplot on plots.gp in the report's folder. 1 when it is not
** installed, 0 when every figure was drawn, -1 (err says why) when it
** failed. */
int rp_gnuplot(rp_ctx *c, char *err, size_t errlen);

#endif
