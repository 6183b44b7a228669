/*
** cmd_model.c
** fatune model: the timing model's prediction (model.h) for one kernel on
** one problem, or at each of a list of --seq: a fatune variant (--variant,
** --config), compiled here or read from the cubin `fatune compile
** --save-cubin` wrote (--cubin), or anyone's cubin with the launch that
** runs it (--cubin F --launch fa2|fa3).
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "compile_pool.h"
#include "fa_sink.h"
#include "json.h"
#include "model_launch.h"
#include "model_plot.h"
#include "fa_mod.h"
#include "sass.h"
#include "sass_kernel.h"

#define CUBIN_MAX (512L << 20)

typedef struct model_job {
  const estimate_gpu *gpu;
  model_gpu machine;
  const model_gpu *m;
  model_problem p;
  model_launch l;
  char kernel[512];        /* what was modelled: the variant's name or the function's */
  const char *dtype;       /* "bf16": the peak it is measured against */
  sass_counts counts;
  sass_trace trace;
  model_built b;
  model_result r;
  sass_dq_pass dq;         /* a backward variant's dQ kernel (dq=separate), when built */
  double dq_us;            /* its share of r.time_us */
  char config[512];        /* a variant's canonical config */
  fa_mod_data data;        /* random captured tensors of the problem's modification, as the
                           ** tuner validates on (mod_tensors) */
} model_job;

static void job_free(model_job *j) {
  fa_mod_data_free(&j->data);
  sass_dq_pass_free(&j->dq);
  sass_trace_free(&j->trace);
  model_built_free(&j->b);
  model_result_free(&j->r);
}

/* The problem: the paper's convention (16k tokens in all, 2048 channels)
** for batch and heads not given. */
/* The problem at query length seq_q and key length seq_k. */
static void problem_of(const cli_opts *o, int seq_q, int seq_k, model_problem *p) {
  p->dim = o->problem.dim;
  p->seq_q = seq_q;
  p->seq_k = seq_k;
  p->causal = o->problem.causal;
  p->batch = cli_given(o, "--batch") ? o->problem.batch
             : p->seq_q >= 16384 ? 1 : 16384 / p->seq_q;
  p->heads = cli_given(o, "--heads") ? o->problem.heads : p->dim >= 2048 ? 1 : 2048 / p->dim;
  p->elem_bytes = (int)fa_dtype_size(o->problem.dtype);
  p->backward = o->problem.op == FA_OP_BWD;
  p->mod = o->problem.mod;
  if (o->problem.q_lens) {  /* a variable-length batch: its sequences, as given */
    p->batch = o->problem.batch;
    p->q_lens = o->problem.q_lens, p->kv_lens = o->problem.kv_lens;
  }
  if (o->problem.op == FA_OP_DECODE) {  /* the serving problem as given, or the CLI's defaults */
    p->decode = 1;
    p->batch = o->problem.batch, p->heads = o->problem.heads;
    p->kv_lens = o->problem.kv_lens;
  }
  p->kv_group = o->problem.kv_group;
}

/* j's problem's captured tensors, when its modification has some: random
** (ids in a few runs, as the tuner validates on) from one seed, the same
** every run, sized to the problem, so that the model counts the blocks
** they leave. */
static int mod_tensors(model_job *j, char *err, size_t errlen) {
  const fa_mod *m = j->p.mod;
  fa_mod_data_free(&j->data);
  j->p.mod_data = NULL;
  if (!m || m->ntensors == 0) return 0;
  if (fa_mod_data_random(&j->data, m, j->p.batch, j->p.heads, j->p.seq_q, j->p.seq_k,
                         1, err, errlen) != 0)
    return -1;
  j->p.mod_data = &j->data;
  return 0;
}

static int read_file(const char *path, char **buf, size_t *n, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, errlen, "--cubin %s: %s", path, strerror(errno)), -1;
  char *b = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 20;
      char *nb = cap <= (size_t)CUBIN_MAX ? realloc(b, cap) : NULL;
      if (!nb) {
        free(b);
        fclose(f);
        return snprintf(err, errlen, "--cubin %s: larger than 512 MB or out of memory", path), -1;
      }
      b = nb;
    }
    size_t r = fread(b + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) return free(b), snprintf(err, errlen, "--cubin %s: read error", path), -1;
  *buf = b, *n = len;
  return 0;
}

/* The cubin at path (read_file), refused unless it starts as an ELF file. */
static int read_cubin(const char *path, char **buf, size_t *n, char *err, size_t errlen) {
  if (read_file(path, buf, n, err, errlen) != 0) return -1;
  if (*n >= 4 && !memcmp(*buf, "\177ELF", 4)) return 0;
  free(*buf);
  *buf = NULL;
  return snprintf(err, errlen, "--cubin %s: not a cubin (no ELF header)", path), -1;
}

/* The one function of text whose name matches (--kernel's part, else the launch's pattern). */
static int pick_function(const char *text, const char *part, const char *pattern, char *out,
                         size_t n, char *err, size_t errlen) {
  char **names;
  size_t count, hits = 0;
  if (sass_functions(text, &names, &count, err, errlen) != 0) return -1;
  for (size_t i = 0; i < count; i++)
    if (part ? strstr(names[i], part) != NULL : model_name_matches(names[i], pattern)) {
      if (!hits++) snprintf(out, n, "%s", names[i]);
    }
  free(names);
  if (hits == 1) return 0;
  snprintf(err, errlen, "%zu of the cubin's %zu functions match %s '%s'%s", hits, count,
           part ? "--kernel" : "the launch's kernel", part ? part : pattern,
           hits ? ": give more of the name with --kernel" : " (fatune sass lists them)");
  return -1;
}

static int trace_of(const char *text, const char *fn, const model_launch *l, const model_problem *p,
                    model_job *j, char *err, size_t errlen) {
  int warps = l->consumers ? 4 * l->consumers : l->threads / 32;
  const double per = !p->backward ? 4.0 : l->dq_accum ? 10.0 : 8.0;   /* dq=separate: no dQ here */
  double flops = per * l->block_m * l->block_n * p->dim / (warps ? warps : 1);
  if (sass_analyse_trace(text, fn, flops, &j->counts, &j->trace, err, errlen) != 0) return -1;
  if (!j->counts.found) return snprintf(err, errlen, "no main loop found in %s", fn), -1;
  return 0;
}

static int from_cubin(const cli_opts *o, const char *nvdisasm, model_job *j, char *err,
                      size_t errlen) {
  char pattern[256];
  const int none = model_launch_fa(o->launch, &j->p, j->gpu, &j->l, pattern, sizeof pattern) != 0;
  if (none && j->p.decode)
    return snprintf(err, errlen, "--launch %s --op decode: %s", o->launch,
                    strcmp(o->launch, "fa2") ? "FlashAttention-3's decoding is not modelled; "
                    "FlashAttention-2's is (--launch fa2)"
                    : "FlashAttention-2's decoding at head dim 64 or 128"), -1;
  if (none)
    return snprintf(err, errlen, "--launch %s has no %stile for head dim %d (%s)", o->launch,
                    j->p.backward ? "backward " : "", j->p.dim,
                    j->p.backward && !strcmp(o->launch, "fa3") ? "64 or 128" : "64, 128 or 256"), -1;
  char *cubin, *text;
  size_t size;
  if (read_cubin(o->cubin, &cubin, &size, err, errlen) != 0) return -1;
  if (sass_disassemble(nvdisasm, cubin, size, &text, err, errlen) != 0) return free(cubin), -1;
  int rc = pick_function(text, o->kernel, pattern, j->kernel, sizeof j->kernel, err, errlen);
  if (rc != 0 && j->p.decode)  /* one split's kernel is in another file */
    snprintf(err + strlen(err), errlen - strlen(err), "; at %d split%s FlashAttention-2 runs the "
             "kernel of flash_fwd_split%s_hdim%d_bf16_sm80.cu", j->l.splits,
             j->l.splits == 1 ? "" : "s", j->l.splits == 1 ? "_align" : "", j->p.dim);
  if (rc == 0) {
    j->l.registers = model_cubin_registers(cubin, size, j->kernel);
    if (j->l.registers < 0) {
      snprintf(err, errlen, "no register count for %.300s in the cubin", j->kernel);
      rc = -1;
    }
  }
  if (rc == 0) rc = trace_of(text, j->kernel, &j->l, &j->p, j, err, errlen);
  free(text);
  free(cubin);
  return rc;
}

/* A variant's cubin from a file, in place of compiling it: its entry must
** be there, with a register count. The templates take all their shared
** memory dynamically (prelude_cuda.cuh), so none is static. */
static int cubin_of_variant(const char *path, const char *entry, fa_compiled *r, char *err,
                            size_t errlen) {
  char *cubin;
  size_t size;
  memset(r, 0, sizeof *r);
  if (read_cubin(path, &cubin, &size, err, errlen) != 0) return -1;
  r->registers = model_cubin_registers(cubin, size, entry);
  if (r->registers < 0) {
    free(cubin);
    return snprintf(err, errlen, "--cubin %s: no kernel %.200s with a register count (is it "
                    "this variant's?)", path, entry), -1;
  }
  r->cubin = cubin, r->cubin_size = size, r->ok = 1;
  return 0;
}

/* The variant of --variant or --config, or with config (not NULL) that
** config's. */
static int from_variant(gen_state *g, const cli_opts *o, const gen_target *given,
                        const char *config, const char *nvdisasm, model_job *j, char *err,
                        size_t errlen) {
  gen_target t = *given;
  if (!o->arch) {  /* the GPU's arch, as the space targets it */
    char arch[16], why[256];
    if (gen_device_arch(g, j->gpu->arch, arch, sizeof arch, why, sizeof why) != 0 ||
        gen_target_for_arch(g, arch, 0, 0, &t) != 0)
      return snprintf(err, errlen, "no target for %s", j->gpu->arch), -1;
  }
  gen_kernel k;
  int rc = o->variant && !config ? gen_render_name_as(g, o->variant, &o->problem, &t, &k)
                                 : gen_render_config(g, config ? config : o->config, &o->problem,
                                                     &t, &k);
  if (rc != 0) return snprintf(err, errlen, "%s", gen_errmsg(g)), -1;
  snprintf(j->config, sizeof j->config, "%s", k.config);
  compile_job job = {.source = k.source, .entry = k.entry};
  if (o->cubin) {  /* the variant's cubin as `fatune compile --save-cubin` wrote it */
    rc = cubin_of_variant(o->cubin, k.entry, &job.result, err, errlen);
  } else {
    rc = compile_pool_run(&job, 1, t.arch, 1, NULL, NULL);
    if (rc != 0 || !job.result.ok) {
      snprintf(err, errlen, "compiling %s failed%s%s", k.name, job.result.log ? ": " : "",
               job.result.log ? job.result.log : "");
      rc = -1;
    }
  }
  char *text = NULL;
  if (rc == 0 && model_launch_of_variant(&k, &job.result, &j->l) != 0) {
    snprintf(err, errlen, "%s has no tile in its config", k.name);
    rc = -1;
  }
  if (rc == 0) {
    snprintf(j->kernel, sizeof j->kernel, "%s", k.name);
    rc = sass_disassemble(nvdisasm, job.result.cubin, job.result.cubin_size, &text, err, errlen);
  }
  if (rc == 0) rc = trace_of(text, k.entry, &j->l, &j->p, j, err, errlen);
  /* dq=separate: dQ's own kernel, simulated beside the main one */
  if (rc == 0 && k.op == FA_OP_BWD && !j->l.dq_accum)
    rc = sass_dq_pass_build(j->m, text, &k, &job.result, &j->p, &j->dq, err, errlen);
  free(text);
  backend_compiled_free(&job.result);
  gen_kernel_free(&k);
  return rc;
}

/* Whether the kernel's mma.sync run at two rates: some accumulate in f16
** (S, s_acc=f16) on a GPU that runs those faster (GeForce parts, twice). */
static int mixed_rates(const model_job *j) {
  return !strcmp(j->counts.mma, "HMMA") && j->counts.loop_hmma_f16acc > 0 &&
         j->gpu->mma16_flop_clk != j->gpu->mma_flop_clk;
}

/* The dtype's dense peak; with mixed_rates, the peak of the kernel's mix. */
static double kernel_peak(const model_job *j) {
  const double peak = estimate_peak_tflops(j->gpu, j->dtype);
  if (!mixed_rates(j)) return peak;
  return peak * (double)j->counts.loop_hmma * 4096 / j->gpu->mma_flop_clk /
         estimate_hmma_cycles(j->gpu, &j->counts);
}

static void print_text(const model_job *j) {
  const model_result *r = &j->r;
  const model_problem *p = &j->p;
  const double peak = kernel_peak(j);
  printf("model: %s\n", j->kernel);
  if (p->q_lens) {
    long total = 0;
    printf("  on %s: %d sequences of", j->gpu->name, p->batch);
    for (int b = 0; b < p->batch; b++) printf("%s%d", b ? "," : " ", p->q_lens[b]), total += p->q_lens[b];
    printf(" tokens (%ld in all, packed), heads %d, dim %d%s\n", total, p->heads, p->dim,
           p->causal ? ", causal" : "");
  } else {
    printf("  on %s: batch %d, heads %d, seq %d, seq_k %d, dim %d%s\n", j->gpu->name, p->batch,
           p->heads, p->seq_q, p->seq_k, p->dim, p->causal ? ", causal" : "");
  }
  if (p->kv_group > 1)
    printf("  GQA: %d query heads per K/V head%s\n", p->kv_group,
           j->l.kv_head_ctas ? ", a CTA per K/V head walking them in turn"
           : j->l.gqa_part_bytes && p->backward ? ", dK and dV per query head summed after" : "");
  /* The backward pass's main kernel: a CTA per block of keys, a step per Q block. */
  const char *step = p->backward ? "Q block" : "K/V block";
  if (p->backward)
    printf("  tile %d keys x %d query rows, %d threads, %d registers, %d B shared; %d CTA%s per "
           "SM (%s)\n", j->l.block_m, j->l.block_n, j->l.threads, j->l.registers, j->l.smem_bytes,
           r->ctas_per_sm, r->ctas_per_sm == 1 ? "" : "s", r->limit);
  else
    printf("  tile %dx%d, %d threads, %d registers, %d B shared; %d CTA%s per SM (%s)\n",
           j->l.block_m, j->l.block_n, j->l.threads, j->l.registers, j->l.smem_bytes,
           r->ctas_per_sm, r->ctas_per_sm == 1 ? "" : "s", r->limit);
  printf("  predicted %.1f us, %.0f TFLOP/s (%.0f%% of the %s peak%s, %.0f), bound: %s\n",
         r->time_us, r->tflops, 100 * r->tflops / peak, j->dtype,
         mixed_rates(j) ? " of its f16- and f32-accumulating mma" : "", peak, r->bound);
  if (j->dq.built)
    printf("  of which dQ's own kernel (a CTA per Q block): %.1f us\n", j->dq_us);
  printf("  per %s per SM: %.0f clocks; tiles: %.2f per slot, %.0f%% of the slots busy\n", step,
         r->cycles_per_block, r->waves, 100 * r->wave_efficiency);
  printf("  main loop per %s per warp: %ld instructions, %ld %s\n", step,
         j->counts.loop_instructions, j->counts.loop_hmma, j->counts.mma);
  printf("  busy:");
  for (int i = 0; i < 8; i++) printf(" %s %.0f%%%s", model_util_names[i], 100 * r->util[i], i < 7 ? "," : "");
  printf("\n  waiting (the main loop's first warp): %.0f%% of the time\n", 100 * r->wait_share);
  if (j->b.ex2_before_pv_wait >= 0)
    printf("  the wait for P V comes after %d MUFU.EX2 of the softmax%s\n", j->b.ex2_before_pv_wait,
           j->b.pv_before_exp ? ": before the exponentials, so P V does not overlap them" : "");
}

/* The busy share of each unit, as the members of "util". */
static void util_members(FILE *f, const void *arg) {
  const model_result *r = arg;
  fputs(", \"util\": {", f);
  for (int i = 0; i < 8; i++) {
    fputs(i ? ", " : "", f);
    json_string(f, model_util_names[i]);
    fputs(": ", f);
    json_number(f, r->util[i]);
  }
  fputs("}", f);
}

/* One prediction as a JSON object; `line`: ended by a newline (not an
** element of a list). */
static void print_json(const model_job *j, int line) {
  static const fa_column col[] = {
      {"kernel", 0, NULL}, {"gpu", 0, NULL}, {"time_us", 0, NULL}, {"tflops", 0, NULL},
      {"bound", 0, NULL}, {"cycles_per_block", 0, NULL}, {"ctas_per_sm", 0, NULL},
      {"waves", 0, NULL}, {"wave_efficiency", 0, NULL}, {"wait_share", 0, NULL},
      {"seq", 0, NULL}, {"seq_k", 0, NULL}, {"batch", 0, NULL}, {"heads", 0, NULL},
      {"registers", 0, NULL}, {"loop_instructions", 0, NULL}, {"loop_mma", 0, NULL},
      {"mma", 0, NULL}, {"ex2_before_pv_wait", 0, NULL}, {"dq_kernel_us", 0, NULL},
      {"kv_group", 0, NULL}, {NULL, 0, NULL}};
  const model_result *r = &j->r;
  const fa_cell cell[] = {
      fa_cell_text(j->kernel), fa_cell_text(j->gpu->name), fa_cell_real(r->time_us, "%.6g"),
      fa_cell_real(r->tflops, "%.6g"), fa_cell_text(r->bound),
      fa_cell_real(r->cycles_per_block, "%.6g"), fa_cell_int(r->ctas_per_sm),
      fa_cell_real(r->waves, "%.6g"), fa_cell_real(r->wave_efficiency, "%.6g"),
      fa_cell_real(r->wait_share, "%.6g"), fa_cell_int(j->p.seq_q), fa_cell_int(j->p.seq_k),
      fa_cell_int(j->p.batch), fa_cell_int(j->p.heads), fa_cell_int(j->l.registers),
      fa_cell_int(j->counts.loop_instructions), fa_cell_int(j->counts.loop_hmma),
      fa_cell_text(j->counts.mma), fa_cell_int(j->b.ex2_before_pv_wait),
      j->dq.built ? fa_cell_real(j->dq_us, "%.6g") : fa_cell_null(),
      fa_cell_int(j->p.kv_group > 1 ? j->p.kv_group : 1), fa_cell_members(util_members, r)};
  fa_sink_object(stdout, col, cell, (int)(sizeof cell / sizeof cell[0]));
  if (line) putchar('\n');
}

/* ---- Decoding: the splits side by side ---- */

#define SPLITS_MAX 128

/* One number of splits of a decoding variant, predicted. */
typedef struct split_point {
  int splits;
  double us, combine_us, kv_bytes, cycles_per_block;
  int fa2, given, ctas_per_sm;
  const char *bound;   /* a static string of model_kernel.c */
} split_point;

/* config with its splits set to s, into out. */
static int with_splits(const char *config, int s, char *out, size_t n) {
  const char *at = strstr(config, ",splits=");
  if (!at) return -1;
  const char *rest = strchr(at + 1, ',');
  return snprintf(out, n, "%.*s,splits=%d%s", (int)(at - config), config, s, rest ? rest : "") <
                 (int)n ? 0 : -1;
}

/* The rows the table shows: powers of two to 128 and the halfway points,
** 3 x 2^k; the best, FlashAttention-2's and the variant's besides. */
static int shown(int s) {
  while (s % 2 == 0) s /= 2;
  return s == 1 || s == 3;
}

/* The variant j was built from at s splits, compiled and built for the
** model into k. */
static int build_splits(gen_state *g, const cli_opts *o, const gen_target *t, const char *nvdisasm,
                        const model_job *j, int s, model_job *k, char *err, size_t errlen) {
  char config[600];
  memset(k, 0, sizeof *k);
  k->gpu = j->gpu, k->machine = j->machine, k->m = &k->machine, k->p = j->p, k->dtype = j->dtype;
  if (with_splits(j->config, s, config, sizeof config) != 0)
    return snprintf(err, errlen, "%.300s has no splits in its config", j->kernel), -1;
  int rc = from_variant(g, o, t, config, nvdisasm, k, err, errlen);
  if (rc == 0 && model_build(k->m, &k->trace, &k->l, &k->p, &k->b, err, errlen) != 0) rc = -1;
  return rc;
}

/* k's prediction at s splits: the main loop's code is the same at every
** number of splits past one (only the chunk's size and the partials'
** addresses, outside it, depend on it), so one build serves them all. */
static int predict_at(model_job *k, int s, split_point *pt, char *err, size_t errlen) {
  model_launch l = k->l;
  l.splits = s;
  model_result_free(&k->r);
  if (model_predict(k->m, &k->b, &l, &k->p, 0, &k->r, err, errlen) != 0) return -1;
  pt->splits = s, pt->us = k->r.time_us, pt->combine_us = k->r.combine_us;
  pt->kv_bytes = k->r.kv_bytes, pt->bound = k->r.bound, pt->ctas_per_sm = k->r.ctas_per_sm;
  pt->cycles_per_block = k->r.cycles_per_block;
  return 0;
}

/* tuned: the points are a sweep, best its best; else one kernel's own choice. */
static void print_splits(const model_job *j, const split_point *pt, int n, int best, int tuned) {
  const model_problem *p = &j->p;
  const double bw = j->gpu->dram_gbs * 1e9;
  printf("model: %s, decoding\n", j->kernel);
  printf("  on %s: batch %d, heads %d (%d per K/V head), %d new token%s, ", j->gpu->name, p->batch,
         p->heads, p->kv_group > 1 ? p->kv_group : 1, p->seq_q, p->seq_q == 1 ? "" : "s");
  if (p->kv_lens) {
    printf("keys");
    for (int b = 0; b < p->batch; b++) printf("%s%d", b ? "," : " ", p->kv_lens[b]);
  } else {
    printf("%d keys each", p->seq_k);
  }
  printf(", dim %d; HBM %.2f TB/s\n", p->dim, j->gpu->dram_gbs / 1e3);
  printf("  tile %d rows x %d keys, %d threads, %d registers, %d B shared; %d CTA%s per SM (%s); "
         "main loop per K/V block per warp: %ld instructions, %ld %s\n", j->l.block_m,
         j->l.block_n, j->l.threads, j->l.registers, j->l.smem_bytes, j->r.ctas_per_sm,
         j->r.ctas_per_sm == 1 ? "" : "s", j->r.limit ? j->r.limit : "?",
         j->counts.loop_instructions, j->counts.loop_hmma, j->counts.mma);
  printf("  busy at %d split%s:", j->l.splits, j->l.splits == 1 ? "" : "s");
  for (int i = 0; i < 8; i++)
    printf(" %s %.0f%%%s", model_util_names[i], 100 * j->r.util[i], i < 7 ? "," : "");
  printf("; waiting %.0f%%\n", 100 * j->r.wait_share);
  printf("  %6s %11s %11s %9s %11s %8s  %s\n", "splits", "time_us", "K/V_TB/s", "of_HBM",
         "combine_us", "clk/blk", "bound");
  for (int i = 0; i < n; i++) {
    const double tbs = pt[i].kv_bytes / (pt[i].us * 1e-6) / 1e12;
    printf("  %6d %11.2f %11.3f %8.1f%% %11.2f %8.0f  %s%s%s%s\n", pt[i].splits, pt[i].us, tbs,
           100 * tbs * 1e12 / bw, pt[i].combine_us, pt[i].cycles_per_block, pt[i].bound,
           i == best ? "  best" : "",
           pt[i].fa2 ? "  FlashAttention-2's heuristic" : "", pt[i].given ? "  (the variant's)" : "");
  }
  if (!tuned) return;
  int h = 0;
  for (int i = 0; i < n; i++) h = pt[i].fa2 ? i : h;
  printf("  tuned: %d splits, %.2f us; FlashAttention-2's heuristic: %d, %.2f us (%.2fx the tuned time)\n",
         pt[best].splits, pt[best].us, pt[h].splits, pt[h].us, pt[h].us / pt[best].us);
}

static void print_splits_json(const model_job *j, const split_point *pt, int n, int best) {
  static const fa_column col[] = {{"splits", 0, NULL}, {"time_us", 0, NULL},
                                  {"kv_bytes", 0, NULL}, {"hbm_share", 0, NULL},
                                  {"combine_us", 0, NULL}, {"bound", 0, NULL}, {"best", 0, NULL},
                                  {"fa2_heuristic", 0, NULL}, {"kernel", 0, NULL},
                                  {NULL, 0, NULL}};
  printf("[");
  for (int i = 0; i < n; i++) {
    const double share = pt[i].kv_bytes / (pt[i].us * 1e-6) / (j->gpu->dram_gbs * 1e9);
    const fa_cell cell[] = {fa_cell_int(pt[i].splits), fa_cell_real(pt[i].us, "%.6g"),
                            fa_cell_real(pt[i].kv_bytes, "%.6g"), fa_cell_real(share, "%.6g"),
                            fa_cell_real(pt[i].combine_us, "%.6g"), fa_cell_text(pt[i].bound),
                            fa_cell_int(i == best),
                            fa_cell_int(pt[i].fa2), fa_cell_text(j->kernel)};
    printf("%s", i ? ",\n " : "");
    fa_sink_object(stdout, col, cell, (int)(sizeof cell / sizeof cell[0]));
  }
  printf("]\n");
}

/* Decoding: the variant predicted at every number of splits from 1 to
** 128 (the model makes the whole sweep cheap: two builds), FlashAttention-
** 2's heuristic's among them: the tuned choice, the best, beside it. */
static int decode_main(gen_state *g, const cli_opts *o, const gen_target *t, const char *nvdisasm,
                       const model_job *j) {
  char err[512];
  const int fa2 = model_fa2_splits(&j->p, j->gpu);
  split_point all[SPLITS_MAX + 1], pt[24];
  model_job one, many;
  int rc = build_splits(g, o, t, nvdisasm, j, 1, &one, err, sizeof err);
  if (rc == 0) rc = build_splits(g, o, t, nvdisasm, j, 2, &many, err, sizeof err);
  int best = 1;
  for (int s = 1; rc == 0 && s <= SPLITS_MAX; s++) {
    rc = predict_at(s == 1 ? &one : &many, s, &all[s], err, sizeof err);
    if (rc == 0 && all[s].us < all[best].us) best = s;
  }
  job_free(&one), job_free(&many);
  if (rc != 0) return cli_say(EXIT_BAD_INPUT, err);
  int n = 0, at_best = 0;
  for (int s = 1; s <= SPLITS_MAX; s++) {
    if (!shown(s) && s != best && s != fa2 && s != j->l.splits) continue;
    pt[n] = all[s];
    pt[n].fa2 = s == fa2, pt[n].given = s == j->l.splits;
    if (s == best) at_best = n;
    n++;
  }
  if (o->json) print_splits_json(j, pt, n, at_best);
  else print_splits(j, pt, n, at_best, 1);
  return fflush(stdout) == 0 ? 0 : cli_say(1, "cannot write the prediction");
}

/* FlashAttention-2's decoding kernel at its heuristic's splits (fa2_decode),
** its prediction j->r: one row of decode_main's table. */
static int decode_fa2(const cli_opts *o, const model_job *j) {
  split_point pt = {.splits = j->l.splits, .us = j->r.time_us, .combine_us = j->r.combine_us,
                    .kv_bytes = j->r.kv_bytes, .cycles_per_block = j->r.cycles_per_block,
                    .fa2 = 1, .ctas_per_sm = j->r.ctas_per_sm, .bound = j->r.bound};
  if (o->json) print_splits_json(j, &pt, 1, -1);
  else print_splits(j, &pt, 1, -1, 0);
  return fflush(stdout) == 0 ? 0 : cli_say(1, "cannot write the prediction");
}

int cmd_model_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  char err[512], nvdisasm[4096];
  model_job j;
  memset(&j, 0, sizeof j);
  const int fatune_kernel = o->variant || o->config;
  if (!o->cubin && !fatune_kernel)
    return cli_say(EXIT_BAD_INPUT, "fatune model needs --variant NAME, --config TEXT or "
                   "--cubin FILE --launch fa2|fa3");
  if (o->variant && o->config)
    return cli_say(EXIT_BAD_INPUT, "fatune model takes --variant NAME or --config TEXT, not both");
  if (o->cubin && !o->launch && !fatune_kernel)
    return cli_say(EXIT_BAD_INPUT, "--cubin needs --launch fa2|fa3: how the kernel is launched");
  if (o->launch && fatune_kernel)
    return cli_say(EXIT_BAD_INPUT, "--launch is for FlashAttention's cubins; a fatune variant "
                   "launches as its config says");
  if (o->plot && o->nseqs > 1)
    return cli_say(EXIT_BAD_INPUT, "--plot draws one problem: give one --seq");
  if (o->problem.op == FA_OP_DECODE && (o->plot || o->nseqs > 1))
    return cli_say(EXIT_BAD_INPUT, "fatune model --op decode takes one problem: it compares a "
                   "variant's numbers of splits");
  if (o->problem.op == FA_OP_DECODE && o->launch && !strcmp(o->launch, "fa2") && o->problem.page > 0 &&
      o->problem.page % 256)
    return cli_say(EXIT_BAD_INPUT, "--launch fa2 --op decode --page: FlashAttention-2 takes pages "
                   "of a multiple of 256 tokens");
  if (fa_problem_dim_v(&o->problem) != o->problem.dim)
    return cli_say(EXIT_BAD_INPUT, "fatune model takes one head dim for Q, K and V yet: its "
                   "traffic and FLOPs have no --dim-v");
  j.gpu = o->gpu ? estimate_gpu_find(o->gpu) : estimate_gpu_for_arch(o->arch ? o->arch : t->arch);
  j.m = j.gpu && model_gpu_of(j.gpu, &j.machine) == 0 ? &j.machine : NULL;
  if (!j.m) {
    fprintf(stderr, "fatune: fatune model needs --gpu %s\n", estimate_gpu_names());
    return EXIT_BAD_INPUT;
  }
  problem_of(o, o->problem.seq_q, o->problem.seq_k, &j.p);
  if (j.p.kv_group > 1 && j.p.heads % j.p.kv_group) {
    snprintf(err, sizeof err, "--gqa %d does not divide the %d heads (--heads, or 2048 / dim "
             "when not given)", j.p.kv_group, j.p.heads);
    return cli_say(EXIT_BAD_INPUT, err);
  }
  if (j.p.kv_group > 1 && j.p.backward && o->launch && !strcmp(o->launch, "fa3"))
    return cli_say(EXIT_BAD_INPUT, "--launch fa3 --op bwd with --gqa: FlashAttention-3 adds dK "
                   "and dV across a group with atomics, which the model does not take");
  if (mod_tensors(&j, err, sizeof err) != 0) return cli_say(1, err);
  j.dtype = fa_dtype_name(o->problem.dtype);
  if (sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0)
    return cli_say(1, "fatune model needs nvdisasm (on PATH, in $CUDA_HOME/bin or the PyPI "
                   "package nvidia-cuda-nvdisasm)");
  int rc = !fatune_kernel ? from_cubin(o, nvdisasm, &j, err, sizeof err)
                    : from_variant(g, o, t, NULL, nvdisasm, &j, err, sizeof err);
  if (o->red_lines) j.l.red_lines = o->red_lines;
  if (rc == 0 && model_build(j.m, &j.trace, &j.l, &j.p, &j.b, err, sizeof err) != 0) rc = -1;
  if (rc != 0) {
    job_free(&j);
    return cli_say(EXIT_BAD_INPUT, err);
  }
  if (j.p.decode) {
    rc = model_predict(j.m, &j.b, &j.l, &j.p, 0, &j.r, err, sizeof err) != 0 ? cli_say(EXIT_BAD_INPUT, err)
         : !fatune_kernel ? decode_fa2(o, &j) : decode_main(g, o, t, nvdisasm, &j);
    job_free(&j);
    return rc;
  }
  /* One kernel (chosen for the first --seq), predicted at each length. */
  const int n = o->nseqs > 1 ? o->nseqs : 1;
  if (o->json && n > 1) printf("[");
  for (int i = 0; i < n && rc == 0; i++) {
    if (n > 1 && (problem_of(o, o->seqs[i], o->seqs[i], &j.p), mod_tensors(&j, err, sizeof err) != 0)) {
      rc = -1;
      break;
    }
    model_result_free(&j.r);
    if (model_predict(j.m, &j.b, &j.l, &j.p, o->plot != NULL, &j.r, err, sizeof err) != 0 ||
        (j.dq.built && sass_dq_pass_time(j.m, &j.dq, &j.p, &j.dq_us, err, sizeof err) != 0)) {
      rc = -1;
      break;
    }
    if (j.dq.built) {   /* the two kernels run one after the other */
      j.r.time_us += j.dq_us;
      j.r.tflops = j.r.flops / j.r.time_us / 1e6;
    }
    if (o->json) printf("%s", i ? ",\n " : ""), print_json(&j, n == 1);
    else print_text(&j);
  }
  if (o->json && n > 1 && rc == 0) printf("]\n");
  if (rc != 0) {
    job_free(&j);
    return cli_say(EXIT_BAD_INPUT, err);
  }
  if (o->plot && model_plot(o->plot, &j.b.k, &j.r, j.kernel, err, sizeof err) != 0) {
    job_free(&j);
    return cli_say(1, err);
  }
  job_free(&j);
  return fflush(stdout) == 0 ? 0 : cli_say(1, "cannot write the prediction");
}
