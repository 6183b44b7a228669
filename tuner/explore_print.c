/*
** explore_print.c
** What fatune explore prints: for each problem and each axis, a table of
** every counter measured, predicted by the cost model and the difference,
** side by side for the axis's variants (with the effect of the axis when
** it has two sides), the validation, ptxas's registers, spills and shared
** memory, and the time; then the FlashAttention paper's traffic figures;
** at the end the peak memory of naive against tiled attention. --json
** prints all of it as one object instead.
*/
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "explore_int.h"
#include "fa_sink.h"
#include "json.h"

/* ptxas's report: the backend's own (cuda) or the extra NVRTC compile (emu). */
static int ptxas(const explore *x, const ex_variant *v, int what) {
  if (!x->gpu) {
    const fa_compiled *r = &v->t.nvrtc.result;
    if (!r->ok) return -1;
    return what == 0 ? r->registers : what == 1 ? r->spill_store_bytes + r->spill_load_bytes
                                                : r->smem_static_bytes;
  }
  if (!v->t.build.prog || v->t.build.registers < 0) return -1;
  const fa_build *b = &v->t.build;
  return what == 0 ? b->registers : what == 1 ? b->spill_bytes : b->smem_static_bytes;
}

static long long measured_or_none(const explore *x, const ex_variant *v, int c) {
  return !x->gpu && trial_ran(v->t.st) ? ex_measured(x, v, c) : -1;
}

static void cell(long long v, int width) {
  if (v < 0) printf(" %*s", width, "-");
  else printf(" %*lld", width, v);
}

static void diff_cell(long long m, long long p, int flag) {
  char buf[32];
  if (m < 0 || p < 0) snprintf(buf, sizeof buf, "-");
  else if (m == p) snprintf(buf, sizeof buf, "0");
  else snprintf(buf, sizeof buf, "%+lld%s", m - p, flag ? "!" : "");
  printf(" %7s", buf);
}

/* b - a, signed when it is not 0. */
static void effect_cell(long long a, long long b, int width) {
  if (a < 0 || b < 0) printf(" %*s", width, "-");
  else if (a == b) printf(" %*s", width, "0");
  else printf(" %+*lld", width, b - a);
}

static const ex_variant *slot_variant(const explore *x, int a, int i) {
  return x->slot[a][i] >= 0 ? &x->v[x->slot[a][i]] : NULL;
}

/* One row: per variant measured, model, difference; the effect B - A. */
static void row(const explore *x, int a, const char *label, const long long *m,
                const long long *p, int flag) {
  const ex_axis *d = &x->fam->axes[a];
  printf("  %-22s", label);
  for (int i = 0; i < d->n; i++)   /* "-" where the variant does not fit */
    cell(m[i], 13), cell(p[i], 13), diff_cell(m[i], p[i], flag);
  if (d->n == 2 && slot_variant(x, a, 0) && slot_variant(x, a, 1))
    effect_cell(m[0], m[1], 15), effect_cell(p[0], p[1], 14);
  putchar('\n');
}

static void header(const explore *x, int a) {
  const ex_axis *d = &x->fam->axes[a];
  printf("  %-22s", "counter");
  for (int i = 0; i < d->n; i++) printf(" %13s %13s %7s", d->label[i], "model", "diff");
  if (d->n == 2 && slot_variant(x, a, 0) && slot_variant(x, a, 1)) {
    char eff[64];
    snprintf(eff, sizeof eff, "%s-%s", d->label[1], d->label[0]);
    printf(" %15s %14s", eff, "model");
  }
  putchar('\n');
}

static void counter_rows(const explore *x, int a) {
  long long m[4], p[4], tm[2][4], tp[2][4];
  memset(tm, 0, sizeof tm), memset(tp, 0, sizeof tp);
  for (int c = 0; c < x->fam->ncounters; c++) {
    const size_t off = x->fam->counters[c]->off;
    /* Totals: global read and written; shared read and written. */
    const int total = off == offsetof(fa_counters, gmem_read) ||
                      off == offsetof(fa_counters, gmem_written) ? 0
                      : off == offsetof(fa_counters, smem_read) ||
                      off == offsetof(fa_counters, smem_written) ? 1 : -1;
    for (int i = 0; i < x->fam->axes[a].n; i++) {
      const ex_variant *v = slot_variant(x, a, i);
      m[i] = v ? measured_or_none(x, v, c) : -1;
      p[i] = v ? v->pred[c] : -1;
      if (total >= 0) {
        tm[total][i] = m[i] < 0 || tm[total][i] < 0 ? -1 : tm[total][i] + m[i];
        tp[total][i] = p[i] < 0 || tp[total][i] < 0 ? -1 : tp[total][i] + p[i];
      }
    }
    row(x, a, x->fam->counters[c]->label, m, p, 1);
  }
  row(x, a, "global bytes, total", tm[0], tp[0], 1);
  row(x, a, "shared bytes, total", tm[1], tp[1], 1);
}

/* ptxas's figures against the template's plan and estimate. */
static void build_rows(const explore *x, int a) {
  long long m[3][4], p[3][4];
  for (int i = 0; i < x->fam->axes[a].n; i++) {
    const ex_variant *v = slot_variant(x, a, i);
    for (int r = 0; r < 3; r++) m[r][i] = p[r][i] = -1;
    if (!v) continue;
    m[0][i] = ptxas(x, v, 0), p[0][i] = v->t.k.registers_estimate;
    m[1][i] = ptxas(x, v, 1);
    const int st = ptxas(x, v, 2);
    m[2][i] = st < 0 ? -1 : v->t.k.smem_bytes + st, p[2][i] = v->t.k.smem_bytes;
  }
  row(x, a, "registers (ptxas)", m[0], p[0], 0);
  row(x, a, "spill bytes (ptxas)", m[1], p[1], 0);
  row(x, a, "shared bytes per CTA", m[2], p[2], 0);
}

/* Status, error, and the time: GPU microseconds and TFLOP/s, or the
** emulator's milliseconds (a simulation's, never GPU performance). */
static void result_rows(const explore *x, int a) {
  const ex_axis *d = &x->fam->axes[a];
  const char *labels[4] = {"status", "norm-relative error",
                           x->gpu ? "GPU median us" : "emulator ms", "TFLOP/s"};
  for (int r = 0; r < (x->gpu ? 4 : 3); r++) {
    printf("  %-22s", labels[r]);
    for (int i = 0; i < d->n; i++) {
      const ex_variant *v = slot_variant(x, a, i);
      char buf[40] = "";
      if (v && r == 0) snprintf(buf, sizeof buf, "%s", trial_status_names[v->t.st]);
      else if (v && r == 1 && trial_ran(v->t.st))
        snprintf(buf, sizeof buf, "%.2e", v->t.out.r.rel_err);
      else if (v && r == 2 && x->gpu && v->t.out.timed)
        snprintf(buf, sizeof buf, "%.1f", v->t.out.t.median_us);
      else if (v && r == 2 && !x->gpu && trial_ran(v->t.st))
        snprintf(buf, sizeof buf, "%.1f", v->t.out.r.run_ms);
      else if (v && r == 3 && v->t.out.timed)
        snprintf(buf, sizeof buf, "%.2f", attn_flops(&x->run) / v->t.out.t.median_us / 1e6);
      else snprintf(buf, sizeof buf, "-");
      printf(" %13s", buf);
      if (i + 1 < d->n) printf(" %13s %7s", "", "");   /* no trailing blanks */
    }
    putchar('\n');
  }
  if (!x->model_gpu) return;
  char label[40];
  snprintf(label, sizeof label, "model TFLOP/s (%s)", x->model_gpu);
  printf("  %-22s", label);
  for (int i = 0; i < d->n; i++) {
    const ex_variant *v = slot_variant(x, a, i);
    char buf[40] = "-";
    if (v && !isnan(v->model_tflops))   /* a small problem's own few: two digits */
      snprintf(buf, sizeof buf, v->model_tflops >= 10 ? "%.0f" : "%.2g", v->model_tflops);
    printf(" %13s", buf);
    if (i + 1 < d->n) printf(" %13s %7s", "", "");
  }
  putchar('\n');
}

/* The counter an axis is about, measured or predicted. */
static long long key_sum(const explore *x, const ex_variant *v, int a, int measured) {
  const int c0 = x->fam->axes[a].key[0], c1 = x->fam->axes[a].key[1];
  const long long m0 = measured ? measured_or_none(x, v, c0) : v->pred[c0];
  const long long m1 = measured ? measured_or_none(x, v, c1) : v->pred[c1];
  if (m0 < 0 || m1 < 0) return -1;
  return c0 == c1 ? m0 : m0 + m1;
}

/* One line: how much the second side saves (or costs), measured and
** predicted. */
static void effect_line(const explore *x, int a) {
  const ex_axis *d = &x->fam->axes[a];
  const ex_variant *v0 = slot_variant(x, a, 0), *v1 = slot_variant(x, a, 1);
  if (d->n != 2 || d->key[0] < 0 || !v0 || !v1) return;
  const long long m0 = key_sum(x, v0, a, 1), m1 = key_sum(x, v1, a, 1);
  const long long p0 = key_sum(x, v0, a, 0), p1 = key_sum(x, v1, a, 0);
  if ((p0 < 0 || p1 < 0) && (m0 < 0 || m1 < 0)) return;
  if (p0 < 0 || p1 < 0) {   /* measured, with no model of it */
    printf("  effect: %s: %lld %s against %s's %lld: %lld %s (%.1f%%); not modelled\n",
           d->label[1], m1, d->key_label, d->label[0], m0, llabs(m0 - m1),
           m0 >= m1 ? "fewer" : "more", m0 ? 100.0 * fabs((double)(m0 - m1)) / (double)m0 : 0.0);
    return;
  }
  if (m0 < 0 || m1 < 0) {
    printf("  effect: %s moves %lld %s %s than %s (the model; %.1f%% %s)\n", d->label[1],
           llabs(p0 - p1), p0 >= p1 ? "fewer" : "more", d->key_label, d->label[0],
           p0 ? 100.0 * fabs((double)(p0 - p1)) / (double)p0 : 0.0, p0 >= p1 ? "less" : "more");
    return;
  }
  const char *fm = m0 >= m1 ? "fewer" : "more", *fp = p0 >= p1 ? "fewer" : "more";
  printf("  effect: %s: %lld %s against %s's %lld: %lld %s (%.1f%%); the model says %lld "
         "%s%s\n", d->label[1], m1, d->key_label, d->label[0], m0, llabs(m0 - m1), fm,
         m0 ? 100.0 * fabs((double)(m0 - m1)) / (double)m0 : 0.0, llabs(p0 - p1), fp,
         m0 - m1 == p0 - p1 ? ", exactly" : " (!)");
}

/* Flags under the table: counters off the model, with what that means. */
static void notes(const explore *x, int a) {
  const ex_axis *d = &x->fam->axes[a];
  int regs_differ = 0;
  for (int i = 0; i < d->n; i++) {
    const ex_variant *v = slot_variant(x, a, i);
    if (!v) {
      printf("  %s: %s\n", d->label[i], x->unfit[a][i]);
      continue;
    }
    if (v->t.st != TRIAL_OK && v->t.why)
      printf("  ! %s is %s: %.*s\n", d->label[i], trial_status_names[v->t.st],
             (int)strcspn(v->t.why, "\n"), v->t.why);
    regs_differ |= ptxas(x, v, 0) >= 0 && ptxas(x, v, 0) != v->t.k.registers_estimate;
    for (int c = 0; c < x->fam->ncounters; c++) {
      const long long m = measured_or_none(x, v, c);
      if (m >= 0 && v->pred[c] >= 0 && m != v->pred[c])
        printf("  ! %s: %s measured %lld, the model says %lld: %s and %s disagree\n",
               d->label[i], x->fam->counters[c]->label, m, v->pred[c], x->fam->model,
               x->fam->kernel);
    }
  }
  effect_line(x, a);
  printf("  why: %s\n", d->why);
  if (regs_differ)
    printf("  registers: the model is the template's estimate (its per-thread arrays and a few "
           "words more), which prunes the space; ptxas also keeps addresses and indices, and "
           "caps for occupancy\n");
  if (x->gpu)
    printf("  counters: the model's for this problem; a GPU has no counters to compare\n");
}

static void print_axis(const explore *x, int a) {
  const ex_axis *d = &x->fam->axes[a];
  printf("\n%s: %s\n", d->name, d->title);
  for (int i = 0; i < d->n; i++)
    if (slot_variant(x, a, i)) printf("  %-9s %s\n", d->label[i], slot_variant(x, a, i)->t.k.name);
  header(x, a);
  counter_rows(x, a);
  build_rows(x, a);
  result_rows(x, a);
  notes(x, a);
}

/* Global memory against the FlashAttention paper's bounds. */
static void print_paper(const explore *x) {
  const fa_problem *p = &x->run;
  const ex_variant *v0 = &x->v[0];
  printf("\nglobal memory against the FlashAttention paper (N = seq, d = dim, M = shared memory "
         "in elements):\n");
  printf("  standard attention (the paper's Algorithm 0: S and P written and read back), "
         "Theta(N d + N^2):\n    2 (N_q + N_k) d + 4 N_q N_k elements = %lld bytes\n",
         v0->paper_standard);
  printf("  tiled, Theta(N^2 d^2 / M):\n");
  printf("  %-64s %14s %14s %8s %8s\n", "variant", "global bytes", "N^2 d^2 / M", "ratio", "M");
  for (size_t i = 0; i < x->n; i++) {
    const ex_variant *v = &x->v[i];
    const long long g = !x->gpu && trial_ran(v->t.st) ? ex_measured(x, v, 0) + ex_measured(x, v, 1)
                                             : v->pred[0] + v->pred[1];
    printf("  %-64s %14lld %14lld %8.2f %8d\n", v->t.k.name, g, v->paper_tiled,
           v->paper_tiled > 0 ? (double)g / (double)v->paper_tiled : NAN,
           v->t.k.smem_bytes / fa_dtype_size(p->dtype));
  }
  printf("  (%s; the ratio is the constant the Theta hides)\n",
         x->gpu ? "global bytes: the model's" : "global bytes: measured");
}

static void print_peak(const explore *x) {
  const ex_peak *k = &x->peak;
  const double mb = 1024.0 * 1024.0;   /* MiB */
  printf("\npeak memory at N = %d, d = %d, fp32, one head (seed 003's optional step):\n",
         EX_PEAK_N, EX_PEAK_D);
  printf("  naive attention, S = Q K^T materialized (%d x %d): allocates %.1f MiB (S alone "
         "%.1f MiB); measured: the peak resident set grew %.1f MiB (%.1f s on the host)\n",
         EX_PEAK_N, EX_PEAK_N, k->naive_bytes / mb, (double)EX_PEAK_N * EX_PEAK_N * 4 / mb,
         k->naive_rss >= 0 ? k->naive_rss / mb : NAN, k->naive_ms / 1e3);
  printf("  %s: allocates %.2f MiB (Q, K, V, O and the logsumexp; workspace %.0f bytes) + %.1f "
         "KB of shared memory per CTA: %.1fx less than naive\n",
         k->variant, k->tiled_bytes / mb, k->tiled_ws, k->tiled_smem / 1024.0,
         k->naive_bytes / k->tiled_bytes);
}

/* ---- JSON ---- */

static void json_counts(FILE *f, const explore *x, const ex_variant *v, int measured) {
  fputc('{', f);
  for (int c = 0; c < x->fam->ncounters; c++) {
    const long long n = measured ? ex_measured(x, v, c) : v->pred[c];
    fprintf(f, "%s\"%s\": ", c ? ", " : "", x->fam->counters[c]->json);
    if (n < 0) fputs("null", f);
    else fprintf(f, "%lld", n);
  }
  if (!measured && x->fam->paper)
    fprintf(f, ", \"paper_standard_bytes\": %lld, \"paper_tiled_bytes\": %lld", v->paper_standard,
            v->paper_tiled);
  fputc('}', f);
}

/* A variant's measured and predicted counters, as JSON members. */
typedef struct ex_counts_arg {
  const explore *x;
  const ex_variant *v;
} ex_counts_arg;

static void json_counts_members(FILE *f, const void *arg) {
  const ex_counts_arg *a = arg;
  fputs(", \"measured\": ", f);
  if (trial_ran(a->v->t.st) && !a->x->gpu) json_counts(f, a->x, a->v, 1);
  else fputs("null", f);
  fputs(", \"predicted\": ", f);
  json_counts(f, a->x, a->v, 0);
}

static const fa_column variant_cols[] = {
  {"name", 0, NULL}, {"hash", 0, NULL}, {NULL, 0, NULL}, {"status", 0, NULL},
  {"message", 0, NULL}, {"rel_err", 0, NULL}, {"max_abs_err", 0, NULL}, {NULL, 0, NULL},
  {"registers", 0, NULL}, {"registers_estimate", 0, NULL}, {"spill_bytes", 0, NULL},
  {"smem_per_cta", 0, NULL}, {"emu_ms", 0, NULL}, {"median_us", 0, NULL}, {"tflops", 0, NULL},
  {"model_tflops", 0, NULL}};

static void json_variant(const explore *x, const ex_variant *v) {
  const int ran = trial_ran(v->t.st), t = v->t.out.timed;
  const char *g = "%.6g";   /* json_number's */
  const ex_counts_arg counts = {x, v};
  const fa_cell c[] = {
    fa_cell_text(v->t.k.name), fa_cell_text(v->t.k.hash),
    fa_cell_members(json_config_members, &v->t.k.cfg),
    fa_cell_text(trial_status_names[v->t.st]), fa_cell_text(v->t.why),
    fa_cell_real(ran ? v->t.out.r.rel_err : NAN, g),
    fa_cell_real(ran ? v->t.out.r.max_abs_err : NAN, g),
    fa_cell_members(json_counts_members, &counts), fa_cell_int(ptxas(x, v, 0)),
    fa_cell_int(v->t.k.registers_estimate), fa_cell_int(ptxas(x, v, 1)),
    fa_cell_int(v->t.k.smem_bytes), fa_cell_real(ran && !x->gpu ? v->t.out.r.run_ms : NAN, g),
    fa_cell_real(t ? v->t.out.t.median_us : NAN, g),
    fa_cell_real(t ? attn_flops(&x->run) / v->t.out.t.median_us / 1e6 : NAN, g),
    fa_cell_real(v->model_tflops, g)};
  fa_sink_object(stdout, variant_cols, c, (int)(sizeof c / sizeof c[0]));
}

static void json_axes(const explore *x) {
  printf("\"axes\": [");
  int first = 1;
  for (int a = 0; a < x->fam->naxes; a++) {
    const ex_axis *d = &x->fam->axes[a];
    if (!x->on[a]) continue;
    printf("%s\n  {\"axis\": \"%s\", \"labels\": [", first ? "" : ",", d->name);
    for (int i = 0; i < d->n; i++) printf("%s\"%s\"", i ? ", " : "", d->label[i]);
    printf("], \"variants\": [");
    for (int i = 0; i < d->n; i++) {
      printf("%s", i ? ", " : "");
      if (slot_variant(x, a, i)) json_string(stdout, slot_variant(x, a, i)->t.k.name);
      else printf("null");
    }
    printf("]}");
    first = 0;
  }
  printf("]");
}

/* ---- Entry points ---- */

/* Counters off the model, once per variant (a variant may be on several
** axes). */
static void count_mismatches(explore *x) {
  for (size_t i = 0; i < x->n; i++)
    for (int c = 0; c < x->fam->ncounters; c++) {
      const long long m = measured_or_none(x, &x->v[i], c);
      if (m >= 0 && x->v[i].pred[c] >= 0 && m != x->v[i].pred[c]) x->mismatches++;
    }
}

void ex_print_start(explore *x) {
  if (!x->o->json) return;
  printf("{\"backend\": \"%s\", \"target\": \"%s\", \"family\": \"%s\", \"op\": \"%s\", "
         "\"dtype\": \"%s\", \"dim\": %d, \"causal\": %s, \"seed\": %llu, ", backend_name(x->be),
         x->t->arch, x->fam->name, fa_op_name(x->o->problem.op),
         fa_dtype_name(x->o->problem.dtype), x->o->problem.dim,
         x->o->problem.causal ? "true" : "false", x->seed);
  json_axes(x);
  printf(",\n\"runs\": [");
}

void ex_print_problem(explore *x, int first) {
  count_mismatches(x);
  const fa_problem *p = &x->run;
  if (x->o->json) {
    printf("%s\n {\"seq_q\": %d, \"seq_k\": %d, \"batch\": %d, \"heads\": %d, \"variants\": [",
           first ? "" : ",", p->seq_q, p->seq_k, p->batch, p->heads);
    for (size_t i = 0; i < x->n; i++) {
      printf("%s\n  ", i ? "," : "");
      json_variant(x, &x->v[i]);
    }
    printf("]}");
    return;
  }
  char dims[24];
  fa_dims_text(p->dim, p->dim_v, dims, sizeof dims);
  printf("%s== %s%s dim %s%s, seq_q %d, seq_k %d, batch %d, heads %d, on %s ==\n",
         first ? "" : "\n", p->op == FA_OP_BWD ? "backward, " : "", fa_dtype_name(p->dtype),
         dims, p->causal ? " causal" : "",
         p->seq_q, p->seq_k, p->batch, p->heads,
         x->gpu ? "the GPU" : "the CPU emulator (exact counts; not GPU time)");
  for (int a = 0; a < x->fam->naxes; a++)
    if (x->on[a]) print_axis(x, a);
  if (x->fam->paper) print_paper(x);
}

void ex_print_end(explore *x) {
  const ex_peak *k = &x->peak;
  if (!x->o->json) {
    if (k->done) print_peak(x);
    return;
  }
  printf("\n],\n\"peak_memory\": ");
  if (!k->done) {
    printf("null}\n");
    return;
  }
  printf("{\"n\": %d, \"d\": %d, \"naive_bytes\": %.0f, \"naive_rss_growth\": ", EX_PEAK_N,
         EX_PEAK_D, k->naive_bytes);
  json_number(stdout, k->naive_rss >= 0 ? k->naive_rss : NAN);
  printf(", \"naive_ms\": %.1f, \"tiled_variant\": ", k->naive_ms);
  json_string(stdout, k->variant);
  printf(", \"tiled_bytes\": %.0f, \"tiled_smem_per_cta\": %d}}\n", k->tiled_bytes,
         k->tiled_smem);
}
