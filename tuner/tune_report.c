/*
** tune_report.c
** The main job's results: a table sorted best first (by GPU time; on the
** emulator, by the timing model's predicted TFLOP/s where nvdisasm gave
** the SASS (else the static SASS estimate), a prediction and said to be
** one, then by global-memory traffic, the one cost
** the emulator measures exactly),
** the reasons for every variant that is not ok, and a summary. --json
** prints one object per variant instead, the summary on stderr.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_sink.h"
#include "json.h"
#include "tune_types.h"

/* For the comparator: the backend, and the SASS figures of the trials. */
static int gpu_mode;
static const tune *rank_tune;

/* The predicted TFLOP/s of e: the timing model's, else the static
** estimate's; 0 where there is none. */
static double estimated_in(const tune *s, const trial *e) {
  if (!s || !s->sass) return 0;
  const sass_figures *f = &s->sass[e - s->e];
  if (f->modelled) return f->model_tflops;
  return f->estimated && f->e.ctas_per_sm > 0 ? f->e.tflops : 0;
}

static double estimated(const trial *e) { return estimated_in(rank_tune, e); }

/* Of an estimated trial, how near issue is to binding it (estimate.h). */
static double issue_share(const trial *e) { return rank_tune->sass[e - rank_tune->e].e.issue_share; }

/* Of an estimated trial, its main loop's local-memory instructions (spills). */
static long loop_local(const trial *e) { return rank_tune->sass[e - rank_tune->e].c.loop_local; }

static double cost(const trial *e) {
  if (gpu_mode) return e->out.timed ? e->out.t.median_us : INFINITY;
  return (double)(e->out.r.counters.gmem_read + e->out.r.counters.gmem_written);
}

/* The status measured, now or by the run that recorded it. */
static trial_status status(const trial *e) { return e->st == TRIAL_RECORDED ? e->was : e->st; }

/* ok first (recorded or not), cheapest first; then the rest in listing order. */
static int by_rank(const void *a, const void *b) {
  const trial *x = *(const trial *const *)a, *y = *(const trial *const *)b;
  const int xok = status(x) == TRIAL_OK, yok = status(y) == TRIAL_OK;
  if (xok != yok) return yok - xok;
  const double ex = gpu_mode ? 0 : estimated(x), ey = gpu_mode ? 0 : estimated(y);
  if (xok && ex != ey) return ex > ey ? -1 : 1;   /* estimated first, highest first */
  /* the same estimate: the one without spills in its loop (their latency is not in the
  ** estimate), then the one with more issue to spare, fewer instructions for its FLOPs */
  if (xok && ex > 0 && (loop_local(x) > 0) != (loop_local(y) > 0)) return loop_local(x) > 0 ? 1 : -1;
  if (xok && ex > 0 && issue_share(x) != issue_share(y)) return issue_share(x) < issue_share(y) ? -1 : 1;
  if (!xok || cost(x) == cost(y)) return (x > y) - (x < y);
  return cost(x) < cost(y) ? -1 : 1;
}

/* ptxas's report: the backend's own (cuda) or the extra NVRTC compile (emu). */
static int registers(const trial *e) {
  if (e->nvrtc.result.ok) return e->nvrtc.result.registers;
  return e->build.prog && e->build.registers >= 0 ? e->build.registers : -1;
}

static int spills(const trial *e) {
  if (e->nvrtc.result.ok) return e->nvrtc.result.spill_store_bytes + e->nvrtc.result.spill_load_bytes;
  return e->build.prog && e->build.registers >= 0 ? e->build.spill_bytes : -1;
}

static int ran(const trial *e) { return trial_ran(status(e)); }

static const sass_figures *figures(const tune *s, const trial *e) {
  static const sass_figures none;
  return s->sass ? &s->sass[e - s->e] : &none;
}

/* The table's columns: the variant and its status, then the emulator's
** counters or the GPU's times, then with --sass the SASS figures. */
static const fa_column emu_cols[] = {
  {"variant", -58, NULL}, {"status", -13, NULL}, {"rel_err", 9, NULL}, {"max_err", 9, NULL},
  {"suite", -13, NULL}, {"gmem_rd_KB", 10, NULL}, {"gmem_wr_KB", 10, NULL}, {"smem_KB", 10, NULL}, {"exp", 8, NULL},
  {"bars", 6, NULL}, {"regs", 5, NULL}, {"spill", 6, NULL}, {"emu_ms", 8, NULL},
  {"insns", 6, NULL}, {"est_TF", 6, NULL}, {"model_TF", 8, NULL}};
static const fa_column gpu_cols[] = {
  {"variant", -58, NULL}, {"status", -13, NULL}, {"max_err", 9, NULL}, {"median_us", 10, NULL},
  {"min_us", 10, NULL}, {"TFLOP/s", 8, NULL}, {"GB/s", 8, NULL}, {"regs", 5, NULL},
  {"spill", 6, NULL}, {"smem", 7, NULL}, {"CTA/SM", 5, NULL}, {"insns", 6, NULL},
  {"est_TF", 6, NULL}, {"model_TF", 8, NULL}};
#define ROW_MAX 16

/* The SASS cells: the main loop's instructions per K/V block per warp,
** the estimate's TFLOP/s and the timing model's. */
static int sass_cells(const tune *s, const trial *e, fa_cell *c) {
  const sass_figures *f = figures(s, e);
  c[0] = f->analysed && f->c.found ? fa_cell_int(f->c.loop_instructions) : fa_cell_null();
  c[1] = f->estimated && f->e.ctas_per_sm > 0 ? fa_cell_real(f->e.tflops, "%.0f") : fa_cell_null();
  c[2] = f->modelled ? fa_cell_real(f->model_tflops, "%.0f") : fa_cell_null();
  return 3;
}

static int ptxas_cells(const trial *e, fa_cell *c) {
  const int known = registers(e) >= 0;
  c[0] = known ? fa_cell_int(registers(e)) : fa_cell_null();
  c[1] = known ? fa_cell_int(spills(e)) : fa_cell_null();
  return 2;
}

static int emu_cells(const trial *e, fa_cell *c) {
  const fa_counters *k = &e->out.r.counters;
  const fa_cell none = fa_cell_null();
  int n = 0;
  const int r = ran(e);
  c[n++] = r ? fa_cell_real(e->out.r.rel_err, "%.2e") : none;
  c[n++] = r ? fa_cell_real(e->out.r.max_abs_err, "%.2e") : none;
  /* The adversarial suite: ok, or the cases failed. */
  c[n++] = e->out.suite_cases == 0 ? none
           : fa_cell_text(e->out.suite_failed[0] ? e->out.suite_failed : "ok");
  c[n++] = r ? fa_cell_real((double)k->gmem_read / 1024, "%.1f") : none;
  c[n++] = r ? fa_cell_real((double)k->gmem_written / 1024, "%.1f") : none;
  c[n++] = r ? fa_cell_real((double)(k->smem_read + k->smem_written) / 1024, "%.1f") : none;
  c[n++] = r ? fa_cell_uint(k->exp2) : none;
  c[n++] = r ? fa_cell_uint(k->barriers) : none;
  n += ptxas_cells(e, c + n);
  c[n++] = r && e->st != TRIAL_RECORDED ? fa_cell_real(e->out.r.run_ms, "%.1f") : none;
  return n;
}

static int gpu_cells(const tune *s, const trial *e, fa_cell *c) {
  const fa_cell none = fa_cell_null();
  const int t = e->out.timed;
  const double us = e->out.t.median_us;
  int n = 0;
  c[n++] = ran(e) ? fa_cell_real(e->out.r.max_abs_err, "%.2e") : none;
  c[n++] = t ? fa_cell_real(us, "%.1f") : none;
  c[n++] = t ? fa_cell_real(e->out.t.min_us, "%.1f") : none;
  c[n++] = t ? fa_cell_real(attn_flops(&s->run) / us / 1e6, "%.1f") : none;
  c[n++] = t ? fa_cell_real(attn_bytes(&s->run) / us / 1e3, "%.0f") : none;
  n += ptxas_cells(e, c + n);
  c[n++] = fa_cell_int(e->k.smem_bytes + (e->build.prog ? e->build.smem_static_bytes : 0));
  c[n++] = e->out.ctas_per_sm > 0 ? fa_cell_int(e->out.ctas_per_sm) : none;
  return n;
}

/* One row; the status coloured around its padded text, so the columns
** stay aligned. */
static void table_row(fa_sink *k, const tune *s, const trial *e, int colour) {
  fa_cell c[ROW_MAX];
  char st[24];
  int n = 0;
  snprintf(st, sizeof st, "%s%s", trial_status_names[status(e)],
           e->st == TRIAL_RECORDED ? "*" : "");
  c[n++] = fa_cell_text(e->k.name);
  c[n] = fa_cell_text(st);
  if (colour) c[n].style = status(e) == TRIAL_OK ? "\033[32m" : "\033[31m";
  n++;
  n += s->gpu ? gpu_cells(s, e, c + n) : emu_cells(e, c + n);
  if (s->sass) n += sass_cells(s, e, c + n);
  fa_sink_row(k, c, n);
}

/* The note under the rows when some were recorded by an earlier run, and
** the reasons of every variant not ok. */
static void table_notes(const tune *s, trial **rank) {
  size_t recorded = 0, same_seed = 0;
  const trial *first = NULL;   /* the first recorded, whose seed the note names */
  for (size_t i = 0; i < s->n; i++) {
    const trial *e = rank[i];
    if (e->st == TRIAL_RECORDED) {
      if (!first) first = e;
      recorded++;
      same_seed += e->seeded && first->seeded && e->seed == first->seed;
    }
  }
  if (recorded) {
    printf("* recorded by an earlier run and not measured again (--retune measures again): "
           "its figures, ");
    if (same_seed == recorded) printf("inputs seed %llu", first->seed);
    else printf("each with the seed of its own inputs (--json gives it)");
    printf("; registers and spills come with a compile\n");
  }
  for (size_t i = 0; i < s->n; i++)
    if (status(rank[i]) != TRIAL_OK) {
      const char *why = rank[i]->why ? rank[i]->why : "?";
      const char *nl = strchr(why, '\n');
      printf("%s%s: %s: %.*s\n", trial_status_names[status(rank[i])],
             rank[i]->st == TRIAL_RECORDED ? "*" : "", rank[i]->k.name,
             nl ? (int)(nl - why) : (int)strlen(why), why);
    }
}

static int print_table(const tune *s, trial **rank) {
  const fa_column *col = s->gpu ? gpu_cols : emu_cols;
  const int ncol = (s->gpu ? (int)(sizeof gpu_cols / sizeof gpu_cols[0])
                           : (int)(sizeof emu_cols / sizeof emu_cols[0])) - (s->sass ? 0 : 3);
  const int colour = cli_colour(1);
  fa_sink k;
  fa_sink_begin(&k, stdout, FA_SINK_TABLE, col, ncol);
  for (size_t i = 0; i < s->n; i++) table_row(&k, s, rank[i], colour);
  table_notes(s, rank);
  return fa_sink_end(&k);
}

/* The emulator's counters of e (a trial), as JSON members. */
static void json_counters(FILE *f, const void *arg) {
  const fa_counters *c = &((const trial *)arg)->out.r.counters;
  for (int k = 0; k < TRIAL_NCOUNTERS; k++) {
    if (k == TRIAL_CTR_smem_read)  /* the total comes first, as it always has */
      fprintf(f, ", \"smem_bytes\": %llu", c->smem_read + c->smem_written);
    fprintf(f, ", \"%s\": %llu", trial_counters[k].json, trial_counter_of(c, k));
  }
}

static const fa_column json_cols[] = {
  {"name", 0, NULL}, {"hash", 0, NULL}, {NULL, 0, NULL}, {"status", 0, NULL},
  {"recorded", 0, NULL}, {"backend", 0, NULL}, {"seed", 0, NULL}, {"max_abs_err", 0, NULL},
  {"rel_err", 0, NULL}, {"lse_err", 0, NULL}, {"suite_cases", 0, NULL}, {"suite_err", 0, NULL},
  {"suite_failed", 0, NULL}, {NULL, 0, NULL}, {"emu_ms", 0, NULL},
  {"median_us", 0, NULL}, {"min_us", 0, NULL}, {"p20_us", 0, NULL}, {"p80_us", 0, NULL},
  {"reps", 0, NULL}, {"tflops", 0, NULL}, {"gbps", 0, NULL}, {"ctas_per_sm", 0, NULL},
  {"compile_ms", 0, NULL}, {"registers", 0, NULL}, {"spill_bytes", 0, NULL},
  {"smem_per_cta", 0, NULL}, {"threads", 0, NULL}, {"message", 0, NULL}, {NULL, 0, NULL},
  {"est_gpu", 0, NULL}, {"tma_tflops", 0, NULL}};
#define JSON_NCOLS ((int)(sizeof json_cols / sizeof json_cols[0]))

static void json_row(fa_sink *k, const tune *s, const trial *e) {
  const int t = e->out.timed, r = ran(e);
  const double us = e->out.t.median_us;
  const char *g = "%.6g";   /* json_number's */
  const fa_cell seed = e->st != TRIAL_RECORDED ? fa_cell_uint(s->seed)
                       : e->seeded             ? fa_cell_uint(e->seed)
                                               : fa_cell_null();
  const fa_cell c[JSON_NCOLS] = {
    fa_cell_text(e->k.name), fa_cell_text(e->k.hash),
    fa_cell_members(json_config_members, &e->k.cfg),
    fa_cell_text(trial_status_names[status(e)]), fa_cell_bool(e->st == TRIAL_RECORDED),
    fa_cell_text(backend_name(s->be)), seed,
    fa_cell_real(r ? e->out.r.max_abs_err : NAN, g), fa_cell_real(r ? e->out.r.rel_err : NAN, g),
    fa_cell_real(r ? e->out.r.lse_err : NAN, g), fa_cell_int(e->out.suite_cases),
    fa_cell_real(e->out.suite_cases ? e->out.suite_err : NAN, g),
    e->out.suite_cases ? fa_cell_text(e->out.suite_failed) : fa_cell_null(),
    fa_cell_members(json_counters, e),
    fa_cell_real(r && !s->gpu && e->st != TRIAL_RECORDED ? e->out.r.run_ms : NAN, g),
    fa_cell_real(t ? us : NAN, g), fa_cell_real(t ? e->out.t.min_us : NAN, g),
    fa_cell_real(t ? e->out.t.p20_us : NAN, g), fa_cell_real(t ? e->out.t.p80_us : NAN, g),
    fa_cell_int(t ? e->out.t.reps : 0), fa_cell_real(t ? attn_flops(&s->run) / us / 1e6 : NAN, g),
    fa_cell_real(t ? attn_bytes(&s->run) / us / 1e3 : NAN, g), fa_cell_int(e->out.ctas_per_sm),
    fa_cell_real(e->build.compile_ms, "%.1f"), fa_cell_int(registers(e)), fa_cell_int(spills(e)),
    fa_cell_int(e->k.smem_bytes), fa_cell_int(e->k.threads), fa_cell_text(e->why),
    fa_cell_members(sass_kernel_members, figures(s, e)),
    fa_cell_text(figures(s, e)->estimated && s->est_gpu ? s->est_gpu->name : NULL),
    /* a warp-specialized variant's DRAM ceiling, outside the bound */
    fa_cell_real(s->tma_tflops ? s->tma_tflops[e - s->e] : NAN, g)};
  fa_sink_row(k, c, JSON_NCOLS);
}

static int print_json(const tune *s, trial **rank) {
  fa_sink k;
  fa_sink_begin(&k, stdout, FA_SINK_JSON, json_cols, JSON_NCOLS);
  for (size_t i = 0; i < s->n; i++) json_row(&k, s, rank[i]);
  return fa_sink_end(&k);
}

static void print_summary(FILE *f, const tune *s, trial **rank) {
  size_t count[TRIAL_NSTATUS] = {0};
  double run_ms = 0;
  for (size_t i = 0; i < s->n; i++) {
    count[s->e[i].st]++;
    run_ms += s->e[i].out.r.run_ms;
  }
  fprintf(f, "%zu variants: %zu ok, %zu invalid, %zu compile_error, %zu crashed, %zu timeout, "
             "%zu recorded before (not measured again; --retune does); ",
          s->n, count[TRIAL_OK], count[TRIAL_INVALID], count[TRIAL_COMPILE_ERROR],
          count[TRIAL_CRASHED], count[TRIAL_TIMEOUT], count[TRIAL_RECORDED]);
  if (count[TRIAL_ENV_ERROR])
    fprintf(f, "%zu env_error (the environment failed, not the variant: not recorded, the next "
               "run measures them); ", count[TRIAL_ENV_ERROR]);
  char cached[64] = "";
  if (s->nvrtc_cached)
    snprintf(cached, sizeof cached, ", %zu from the compile cache", s->nvrtc_cached);
  if (s->gpu)
    fprintf(f, "compiled (NVRTC %s%s), then measured, %.1f s in all\n", s->t->arch, cached,
            s->check_s);
  else
    fprintf(f, "compile %.1f s (host compiler) + %.1f s (NVRTC %s%s), validation %.1f s "
               "(2 schedules each) on %d threads\n",
            s->compile_s, s->nvrtc_s, s->t->arch, cached, s->check_s, s->threads);
  const trial *b = rank[0];
  /* The main loop's step: the backward pass's dkdv walks Q blocks. */
  const char *step = s->run.op == FA_OP_BWD ? "Q block" : "K/V block";
  if (status(b) == TRIAL_OK && s->gpu && b->out.timed)
    fprintf(f, "best: %s, median %.1f us, %.1f TFLOP/s: %s\n", b->k.name, b->out.t.median_us,
            attn_flops(&s->run) / b->out.t.median_us / 1e6, b->k.config);
  else if (status(b) == TRIAL_OK && !s->gpu && figures(s, b)->modelled)
    fprintf(f, "best by the timing model for %s (predicted from the machine code, not measured): "
               "%s, %.0f TFLOP/s, bound by %s, %ld instructions per %s: %s\n",
            s->est_gpu->name, b->k.name, figures(s, b)->model_tflops, figures(s, b)->model_bound,
            figures(s, b)->c.loop_instructions, step, b->k.config);
  else if (status(b) == TRIAL_OK && !s->gpu && estimated_in(s, b) > 0)
    fprintf(f, "best by the static SASS estimate for %s (from the machine code, an estimate, not a "
               "measurement): %s, %.0f TFLOP/s, %s-bound, %ld instructions per %s: %s\n",
            s->est_gpu->name, b->k.name, figures(s, b)->e.tflops, figures(s, b)->e.bound,
            figures(s, b)->c.loop_instructions, step, b->k.config);
  else if (status(b) == TRIAL_OK && !s->gpu)
    fprintf(f, "least global-memory traffic: %s (%.1f KB read, %.1f KB written): %s\n",
            b->k.name, (double)b->out.r.counters.gmem_read / 1024,
            (double)b->out.r.counters.gmem_written / 1024, b->k.config);
  if (s->gpu) return;
  const fa_problem *p = &s->o->problem, *r = &s->run;
  const double scale = (double)p->batch * p->heads * p->seq_q * p->seq_k /
                       ((double)r->batch * r->heads * r->seq_q * r->seq_k);
  const double est_s = run_ms * scale / 1e3 / s->threads;
  if (scale > 1.0 && run_ms > 0)
    fprintf(f, "the requested problem (seq_q %d, seq_k %d, batch %d, heads %d) was not run: "
               "one launch of every variant would take about %.0f %s on the emulator here\n",
            p->seq_q, p->seq_k, p->batch, p->heads, est_s >= 120 ? est_s / 60 : est_s,
            est_s >= 120 ? "min" : "s");
}

void tune_report(tune *s) {
  trial **rank = malloc(s->n * sizeof *rank);
  if (!rank) {
    fprintf(stderr, "fatune: out of memory\n");
    return;
  }
  for (size_t i = 0; i < s->n; i++) rank[i] = &s->e[i];
  gpu_mode = s->gpu;
  rank_tune = s;
  qsort(rank, s->n, sizeof *rank, by_rank);
  rank_tune = NULL;
  if ((s->o->json ? print_json(s, rank) : print_table(s, rank)) != 0)
    fprintf(stderr, "fatune: cannot write the results\n");
  print_summary(s->o->json ? stderr : stdout, s, rank);
  free(rank);
}
