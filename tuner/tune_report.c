/*
** tune_report.c
** The main job's results: a table sorted best first (by GPU time; on the
** emulator, by the static SASS estimate where nvdisasm gave one, an
** estimate and said to be one, then by global-memory traffic, the one cost
** the emulator measures exactly),
** the reasons for every variant that is not ok, and a summary. --json
** prints one object per variant instead, the summary on stderr.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "tune_types.h"

/* For the comparator: the backend, and the SASS figures of the trials. */
static int gpu_mode;
static const tune *rank_tune;

/* The estimated TFLOP/s of e, or 0 where there is none. */
static double estimated_in(const tune *s, const trial *e) {
  if (!s || !s->sass) return 0;
  const sass_figures *f = &s->sass[e - s->e];
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

/* The SASS columns: the main loop's instructions per K/V block per warp,
** and the estimate's TFLOP/s. */
static void print_sass_cells(const tune *s, const trial *e) {
  const sass_figures *f = figures(s, e);
  if (f->analysed && f->c.found) printf(" %6ld", f->c.loop_instructions);
  else printf(" %6s", "-");
  if (f->estimated && f->e.ctas_per_sm > 0) printf(" %6.0f", f->e.tflops);
  else printf(" %6s", "-");
}

static void print_emu_row(const trial *e) {
  const fa_counters *c = &e->out.r.counters;
  if (ran(e))
    printf("%9.2e %9.2e %10.1f %10.1f %10.1f %8llu %6llu", e->out.r.rel_err,
           e->out.r.max_abs_err, (double)c->gmem_read / 1024, (double)c->gmem_written / 1024,
           (double)(c->smem_read + c->smem_written) / 1024, c->exp2, c->barriers);
  else
    printf("%9s %9s %10s %10s %10s %8s %6s", "-", "-", "-", "-", "-", "-", "-");
  if (registers(e) >= 0) printf(" %5d %6d", registers(e), spills(e));
  else printf(" %5s %6s", "-", "-");
  if (ran(e) && e->st != TRIAL_RECORDED) printf(" %8.1f", e->out.r.run_ms);
  else printf(" %8s", "-");
}

static void print_gpu_row(const tune *s, const trial *e) {
  if (ran(e)) printf("%9.2e", e->out.r.max_abs_err);
  else printf("%9s", "-");
  if (e->out.timed)
    printf(" %10.1f %10.1f %8.1f %8.0f", e->out.t.median_us, e->out.t.min_us,
           attn_flops(&s->run) / e->out.t.median_us / 1e6,
           attn_bytes(&s->run) / e->out.t.median_us / 1e3);
  else
    printf(" %10s %10s %8s %8s", "-", "-", "-", "-");
  if (registers(e) >= 0) printf(" %5d %6d", registers(e), spills(e));
  else printf(" %5s %6s", "-", "-");
  printf(" %7d", e->k.smem_bytes + (e->build.prog ? e->build.smem_static_bytes : 0));
  if (e->out.ctas_per_sm > 0) printf(" %5d", e->out.ctas_per_sm);
  else printf(" %5s", "-");
}

static void print_table(const tune *s, trial **rank) {
  if (s->gpu)
    printf("%-58s %-13s %9s %10s %10s %8s %8s %5s %6s %7s %5s", "variant", "status", "max_err",
           "median_us", "min_us", "TFLOP/s", "GB/s", "regs", "spill", "smem", "CTA/SM");
  else
    printf("%-58s %-13s %9s %9s %10s %10s %10s %8s %6s %5s %6s %8s", "variant", "status",
           "rel_err", "max_err", "gmem_rd_KB", "gmem_wr_KB", "smem_KB", "exp", "bars", "regs",
           "spill", "emu_ms");
  if (s->sass) printf(" %6s %6s", "insns", "est_TF");   /* --sass */
  putchar('\n');
  const int colour = cli_colour(1);
  size_t recorded = 0, same_seed = 0;
  const trial *first = NULL;   /* the first recorded, whose seed the note names */
  for (size_t i = 0; i < s->n; i++) {
    const trial *e = rank[i];
    char st[24];
    snprintf(st, sizeof st, "%s%s", trial_status_names[status(e)],
             e->st == TRIAL_RECORDED ? "*" : "");
    /* Colour around the padded text, so the columns stay aligned. */
    const char *on = !colour ? "" : status(e) == TRIAL_OK ? "\033[32m" : "\033[31m";
    printf("%-58s %s%-13s%s ", e->k.name, on, st, colour ? "\033[0m" : "");
    if (s->gpu) print_gpu_row(s, e);
    else print_emu_row(e);
    if (s->sass) print_sass_cells(s, e);
    putchar('\n');
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

static void json_timing(const tune *s, const trial *e) {
  const int t = e->out.timed;
  printf(", \"median_us\": ");
  json_number(stdout, t ? e->out.t.median_us : NAN);
  printf(", \"min_us\": ");
  json_number(stdout, t ? e->out.t.min_us : NAN);
  printf(", \"p20_us\": ");
  json_number(stdout, t ? e->out.t.p20_us : NAN);
  printf(", \"p80_us\": ");
  json_number(stdout, t ? e->out.t.p80_us : NAN);
  printf(", \"reps\": %d, \"tflops\": ", t ? e->out.t.reps : 0);
  json_number(stdout, t ? attn_flops(&s->run) / e->out.t.median_us / 1e6 : NAN);
  printf(", \"gbps\": ");
  json_number(stdout, t ? attn_bytes(&s->run) / e->out.t.median_us / 1e3 : NAN);
  printf(", \"ctas_per_sm\": %d", e->out.ctas_per_sm);
}

static void print_json(const tune *s, trial **rank) {
  printf("[");
  for (size_t i = 0; i < s->n; i++) {
    const trial *e = rank[i];
    const fa_counters *c = &e->out.r.counters;
    printf("%s\n  {\"name\": ", i ? "," : "");
    json_string(stdout, e->k.name);
    printf(", \"hash\": \"%s\"", e->k.hash);
    json_config(stdout, &e->k.cfg);
    printf(", \"status\": \"%s\", \"recorded\": %s, \"backend\": \"%s\", \"seed\": ",
           trial_status_names[status(e)], e->st == TRIAL_RECORDED ? "true" : "false",
           backend_name(s->be));
    if (e->st != TRIAL_RECORDED) printf("%llu", s->seed);
    else if (e->seeded) printf("%llu", e->seed);
    else printf("null");
    printf(", \"max_abs_err\": ");
    json_number(stdout, ran(e) ? e->out.r.max_abs_err : NAN);
    printf(", \"rel_err\": ");
    json_number(stdout, ran(e) ? e->out.r.rel_err : NAN);
    printf(", \"lse_err\": ");
    json_number(stdout, ran(e) ? e->out.r.lse_err : NAN);
    for (int k = 0; k < TRIAL_NCOUNTERS; k++) {
      if (k == TRIAL_CTR_smem_read)  /* the total comes first, as it always has */
        printf(", \"smem_bytes\": %llu", c->smem_read + c->smem_written);
      printf(", \"%s\": %llu", trial_counters[k].json, trial_counter_of(c, k));
    }
    printf(", \"emu_ms\": ");
    json_number(stdout, ran(e) && !s->gpu && e->st != TRIAL_RECORDED ? e->out.r.run_ms : NAN);
    json_timing(s, e);
    printf(", \"compile_ms\": %.1f, \"registers\": %d, \"spill_bytes\": %d, \"smem_per_cta\": %d, "
           "\"threads\": %d, \"message\": ", e->build.compile_ms, registers(e), spills(e),
           e->k.smem_bytes, e->k.threads);
    if (e->why) json_string(stdout, e->why);
    else printf("null");
    sass_kernel_json(stdout, figures(s, e));
    printf(", \"est_gpu\": ");
    if (figures(s, e)->estimated && s->est_gpu) json_string(stdout, s->est_gpu->name);
    else printf("null");
    printf(", \"tma_tflops\": ");   /* a warp-specialized variant's DRAM ceiling, outside the bound */
    json_number(stdout, s->tma_tflops ? s->tma_tflops[e - s->e] : NAN);
    printf("}");
  }
  printf("\n]\n");
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
  if (s->gpu)
    fprintf(f, "compiled (NVRTC %s), then measured, %.1f s in all\n", s->t->arch, s->check_s);
  else
    fprintf(f, "compile %.1f s (host compiler) + %.1f s (NVRTC %s), validation %.1f s "
               "(2 schedules each) on %d threads\n",
            s->compile_s, s->nvrtc_s, s->t->arch, s->check_s, s->threads);
  const trial *b = rank[0];
  if (status(b) == TRIAL_OK && s->gpu && b->out.timed)
    fprintf(f, "best: %s, median %.1f us, %.1f TFLOP/s: %s\n", b->k.name, b->out.t.median_us,
            attn_flops(&s->run) / b->out.t.median_us / 1e6, b->k.config);
  else if (status(b) == TRIAL_OK && !s->gpu && estimated_in(s, b) > 0)
    fprintf(f, "best by the static SASS estimate for %s (from the machine code, an estimate, not a "
               "measurement): %s, %.0f TFLOP/s, %s-bound, %ld instructions per K/V block: %s\n",
            s->est_gpu->name, b->k.name, figures(s, b)->e.tflops, figures(s, b)->e.bound,
            figures(s, b)->c.loop_instructions, b->k.config);
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
  if (s->o->json) print_json(s, rank);
  else print_table(s, rank);
  print_summary(s->o->json ? stderr : stdout, s, rank);
  free(rank);
}
