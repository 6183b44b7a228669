/*
** cmd_compile.c
** fatune compile: every variant of the space compiled with NVRTC for the
** target on all cores; ptxas's registers, spills, shared memory and stack
** per variant (a table or JSON), and a summary of the compile times.
** With --sass, the main loop of each cubin's SASS counted and the
** throughput estimate (sass_kernel.h); with --save-cubin DIR, each cubin
** written to DIR/<variant name>.cubin.
*/
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "compile_pool.h"
#include "fa_sink.h"
#include "fa_util.h"
#include "json.h"
#include "progress.h"
#include "sass_kernel.h"

typedef struct compile_set {
  gen_variant *variants;   /* NULL for one variant given by --variant or --config */
  size_t nvariants;
  gen_kernel *kernels;
  compile_job *jobs;
  sass_figures *sass;      /* NULL without --sass */
  size_t n;
} compile_set;

static void compile_set_free(compile_set *s) {
  for (size_t i = 0; i < s->n; i++) {
    gen_kernel_free(&s->kernels[i]);
    backend_compiled_free(&s->jobs[i].result);
  }
  free(s->kernels);
  free(s->jobs);
  free(s->sass);
  gen_variants_free(s->variants, s->nvariants);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double q) {
  if (!n) return 0;
  size_t i = (size_t)floor(q * (double)(n - 1) + 0.5);
  return sorted[i];
}

/* The SASS columns: instructions, product, non-product per product,
** MUFU, local memory per K/V block; CTAs per SM, bound and TFLOP/s. */
#define SASS_NCOLS 9
static const fa_column sass_cols[SASS_NCOLS] = {
  {"insns", 6, NULL}, {"mma", 5, NULL}, {"other", 6, NULL}, {"mufu", 5, NULL},
  {"local", 5, NULL}, {"ctas", 4, NULL}, {"bound", -6, NULL}, {"est_tf", 6, NULL},
  {"model_tf", 8, NULL}};

static void sass_cells(const sass_figures *f, fa_cell *cell) {
  const sass_counts *c = &f->c;
  const int found = f->analysed && c->found, est = f->estimated && f->e.ctas_per_sm;
  const fa_cell none = fa_cell_null();
  cell[0] = found ? fa_cell_int(c->loop_instructions) : none;
  cell[1] = found ? fa_cell_int(c->loop_hmma) : none;
  cell[2] = found && c->loop_hmma ? fa_cell_real(c->non_mma_per_mma, "%.2f") : none;
  cell[3] = found ? fa_cell_int(c->loop_mufu) : none;
  cell[4] = found ? fa_cell_int(c->loop_local) : none;
  cell[5] = est ? fa_cell_int(f->e.ctas_per_sm) : f->estimated ? fa_cell_int(0) : none;
  cell[6] = est ? fa_cell_text(f->e.bound) : none;
  cell[7] = est ? fa_cell_real(f->e.tflops, "%.0f") : none;
  cell[8] = f->modelled ? fa_cell_real(f->model_tflops, "%.0f") : none;
}

#define COMPILE_NCOLS 6
static const fa_column compile_cols[COMPILE_NCOLS] = {
  {"variant", -58, NULL}, {"regs", 5, NULL}, {"spill st/ld", 11, NULL}, {"smem", 7, NULL},
  {"stack", 6, NULL}, {"compile", 9, NULL}};
static const fa_column status_col = {"status", 0, "  "};

static void table_row(fa_sink *k, const compile_set *s, size_t i) {
  const fa_compiled *r = &s->jobs[i].result;
  fa_cell c[COMPILE_NCOLS + SASS_NCOLS + 1];
  char spill[32];
  int n = 0;
  snprintf(spill, sizeof spill, "%5d/%-5d", r->spill_store_bytes, r->spill_load_bytes);
  c[n++] = fa_cell_text(s->kernels[i].name);
  c[n++] = r->ok ? fa_cell_int(r->registers) : fa_cell_null();
  c[n++] = r->ok ? fa_cell_text(spill) : fa_cell_null();
  c[n++] = r->ok ? fa_cell_int(s->kernels[i].smem_bytes + r->smem_static_bytes) : fa_cell_null();
  c[n++] = r->ok ? fa_cell_int(r->stack_bytes) : fa_cell_null();
  c[n++] = fa_cell_real(r->compile_ms, "%.0fms");
  if (s->sass) sass_cells(&s->sass[i], c + n), n += SASS_NCOLS;
  c[n++] = fa_cell_text(r->ok ? "ok" : r->error);
  fa_sink_row(k, c, n);
}

static int print_table(const compile_set *s) {
  fa_column col[COMPILE_NCOLS + SASS_NCOLS + 1];
  int n = COMPILE_NCOLS;
  memcpy(col, compile_cols, sizeof compile_cols);
  if (s->sass) memcpy(col + n, sass_cols, sizeof sass_cols), n += SASS_NCOLS;
  col[n++] = status_col;
  fa_sink k;
  fa_sink_begin(&k, stdout, FA_SINK_TABLE, col, n);
  for (size_t i = 0; i < s->n; i++) table_row(&k, s, i);
  return fa_sink_end(&k);
}

static const fa_column json_cols[] = {
  {"name", 0, NULL}, {"hash", 0, NULL}, {NULL, 0, NULL}, {"ok", 0, NULL},
  {"registers", 0, NULL}, {"spill_bytes", 0, NULL}, {"spill_store_bytes", 0, NULL},
  {"spill_load_bytes", 0, NULL}, {"smem_bytes", 0, NULL}, {"stack_bytes", 0, NULL},
  {"compile_ms", 0, NULL}, {"source_hash", 0, NULL}, {"error", 0, NULL}, {"log", 0, NULL},
  {NULL, 0, NULL}};

static int print_json(const compile_set *s) {
  fa_sink k;
  fa_sink_begin(&k, stdout, FA_SINK_JSON, json_cols, sizeof json_cols / sizeof json_cols[0]);
  for (size_t i = 0; i < s->n; i++) {
    const fa_compiled *r = &s->jobs[i].result;
    const fa_cell c[] = {
      fa_cell_text(s->kernels[i].name), fa_cell_text(s->kernels[i].hash),
      fa_cell_members(json_config_members, &s->kernels[i].cfg), fa_cell_bool(r->ok),
      fa_cell_int(r->registers), fa_cell_int(r->spill_store_bytes + r->spill_load_bytes),
      fa_cell_int(r->spill_store_bytes), fa_cell_int(r->spill_load_bytes),
      fa_cell_int(s->kernels[i].smem_bytes + r->smem_static_bytes), fa_cell_int(r->stack_bytes),
      fa_cell_real(r->compile_ms, "%.1f"), fa_cell_text(s->kernels[i].source_hash),
      fa_cell_text(r->ok ? NULL : r->error), fa_cell_text(r->ok ? NULL : r->log ? r->log : ""),
      s->sass ? fa_cell_members(sass_kernel_members, &s->sass[i]) : fa_cell_null()};
    fa_sink_row(&k, c, s->sass ? 15 : 14);
  }
  return fa_sink_end(&k);
}

/* One summary line: counts, spills, registers, compile-time distribution. */
static void print_summary(FILE *f, const compile_set *s, const gen_target *t, int threads,
                          double wall) {
  size_t ok = 0, spilling = 0, stack = 0;
  int max_spill = 0, rmin = 1 << 30, rmax = 0, max_stack = 0;
  double *ms = malloc((s->n ? s->n : 1) * sizeof *ms);
  for (size_t i = 0; i < s->n; i++) {
    const fa_compiled *r = &s->jobs[i].result;
    if (ms) ms[i] = r->compile_ms;
    if (!r->ok) continue;
    ok++;
    int sp = r->spill_store_bytes + r->spill_load_bytes;
    if (sp) spilling++;
    if (r->stack_bytes) stack++;
    if (sp > max_spill) max_spill = sp;
    if (r->stack_bytes > max_stack) max_stack = r->stack_bytes;
    if (r->registers < rmin) rmin = r->registers;
    if (r->registers > rmax) rmax = r->registers;
  }
  if (!ok) rmin = 0;
  fprintf(f, "%s: %zu variants, %zu ok, %zu failed; %zu spill (max %d bytes), %zu use a stack "
             "(max %d bytes); registers %d-%d\n",
          t->arch, s->n, ok, s->n - ok, spilling, max_spill, stack, max_stack, rmin, rmax);
  if (ms) {
    qsort(ms, s->n, sizeof *ms, cmp_double);
    fprintf(f, "compile ms: median %.0f, p90 %.0f, max %.0f; %.1f s wall on %d threads, "
               "%.2f variants/s\n",
            percentile(ms, s->n, 0.5), percentile(ms, s->n, 0.9), s->n ? ms[s->n - 1] : 0.0,
            wall, threads, wall > 0 ? (double)s->n / wall : 0.0);
    free(ms);
  }
}

static int alloc_set(compile_set *s) {
  s->kernels = calloc(s->n ? s->n : 1, sizeof *s->kernels);
  s->jobs = calloc(s->n ? s->n : 1, sizeof *s->jobs);
  if (!s->kernels || !s->jobs) {
    fprintf(stderr, "fatune: out of memory\n");
    return -1;
  }
  return 0;
}

/* The kernels: one by --variant or --config, else the space's. 0, or the
** exit status. */
static int render_set(gen_state *g, const cli_opts *o, const gen_target *t, compile_set *s) {
  if (!o->variant && !o->config) {
    if (gen_list(g, &o->problem, t, o->space, &s->variants, &s->nvariants) != 0)
      return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
    if (s->nvariants == 0) return cmd_no_variants(o, t);
  }
  s->n = s->variants ? s->nvariants : 1;
  if (alloc_set(s) != 0) return 1;
  for (size_t i = 0; i < s->n; i++) {
    int rc = o->variant  ? gen_render_name_as(g, o->variant, &o->problem, t, &s->kernels[i])
             : o->config ? gen_render_config(g, o->config, &o->problem, t, &s->kernels[i])
                         : gen_render_config(g, s->variants[i].config, NULL, t, &s->kernels[i]);
    if (rc != 0) {
      if (!s->variants) return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
      fprintf(stderr, "fatune: rendering %s: %s\n", s->variants[i].name, gen_errmsg(g));
      return 1;
    }
    /* A variant's name gives its op: it must be the one asked for. */
    if (s->kernels[i].op != o->problem.op) {
      char msg[256];
      snprintf(msg, sizeof msg, "variant %s computes op %s, not %s", s->kernels[i].name,
               fa_op_name(s->kernels[i].op), fa_op_name(o->problem.op));
      return cli_say(EXIT_BAD_INPUT, msg);
    }
    s->jobs[i].source = s->kernels[i].source;
    s->jobs[i].entry = s->kernels[i].entry;
  }
  return 0;
}

/* --save-cubin DIR must name a directory. */
static int check_dir(const char *dir) {
  struct stat st;
  char msg[300];
  if (stat(dir, &st) != 0) {
    snprintf(msg, sizeof msg, "--save-cubin %s: %s", dir, strerror(errno));
    return cli_say(EXIT_BAD_INPUT, msg);
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(msg, sizeof msg, "--save-cubin %s: not a directory", dir);
    return cli_say(EXIT_BAD_INPUT, msg);
  }
  return 0;
}

/* Variant names are [a-z0-9-] (gen's canonical names), safe as file names. */
static int save_cubins(const compile_set *s, const char *dir) {
  for (size_t i = 0; i < s->n; i++) {
    const fa_compiled *r = &s->jobs[i].result;
    if (!r->ok || !r->cubin) continue;
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/%s.cubin", dir, s->kernels[i].name);
    FILE *f = w > 0 && (size_t)w < sizeof path ? fopen(path, "wb") : NULL;
    int ok = f && fwrite(r->cubin, 1, r->cubin_size, f) == r->cubin_size;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
      fprintf(stderr, "fatune: writing %s: %s\n", path, f ? strerror(errno) : "cannot open");
      return 1;
    }
  }
  return 0;
}

/* --sass: every cubin's figures; without nvdisasm, one line and none. */
static int analyse_set(compile_set *s, const cli_opts *o, const gen_target *t) {
  char nvdisasm[4096];
  /* Without nvdisasm the figures stay empty: "-" in the table, null in JSON. */
  s->sass = calloc(s->n ? s->n : 1, sizeof *s->sass);
  if (!s->sass) return fprintf(stderr, "fatune: out of memory\n"), 1;
  if (sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0) {
    fprintf(stderr, "fatune: --sass: no nvdisasm (on PATH, in $CUDA_HOME/bin, "
                    "/usr/local/cuda/bin or the PyPI package nvidia-cuda-nvdisasm); "
                    "SASS figures left out\n");
    return 0;
  }
  const estimate_gpu *gpu = o->gpu ? estimate_gpu_find(o->gpu) : estimate_gpu_for_arch(t->arch);
  for (size_t i = 0; i < s->n; i++) {
    sass_kernel_figures(nvdisasm, &s->kernels[i], &s->jobs[i].result, gpu, &o->problem,
                        &s->sass[i]);
    if (s->jobs[i].result.ok && s->sass[i].error[0])
      fprintf(stderr, "fatune: SASS of %s: %s\n", s->kernels[i].name, s->sass[i].error);
  }
  if (!o->json)
    printf("SASS: the main loop per %s per warp (insns, mma: %s, other per mma, mufu, "
           "local); estimate for %s: CTAs per SM, bound, TFLOP/s (static, not measured)\n",
           o->problem.op == FA_OP_BWD ? "Q block (dkdv)" : "K/V block",
           s->n && s->sass[0].analysed && s->sass[0].c.found ? s->sass[0].c.mma : "HMMA or FFMA",
           gpu ? gpu->name : "no known GPU (--gpu)");
  return 0;
}

int cmd_compile_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  compile_set s = {0};
  if (o->save_cubin && check_dir(o->save_cubin) != 0) return EXIT_BAD_INPUT;
  int rc = render_set(g, o, t, &s);
  if (rc != 0) {
    compile_set_free(&s);
    return rc;
  }
  int threads = o->jobs > 0 ? o->jobs : compile_pool_default_threads();
  double t0 = fa_now_s();
  progress_phase ph;
  progress_start(&ph, "compiling with NVRTC", s.n);
  if (compile_pool_run(s.jobs, s.n, t->arch, threads, progress_fn(), &ph) != 0) {
    perror("fatune: compile pool");
    compile_set_free(&s);
    return 1;
  }
  double wall = fa_now_s() - t0;
  if ((o->save_cubin && save_cubins(&s, o->save_cubin) != 0) ||
      (o->sass && analyse_set(&s, o, t) != 0)) {
    compile_set_free(&s);
    return 1;
  }
  if ((o->json ? print_json(&s) : print_table(&s)) != 0) {
    compile_set_free(&s);
    return cli_say(1, "cannot write the results");
  }
  print_summary(o->json ? stderr : stdout, &s, t, threads, wall);
  size_t failed = 0;
  for (size_t i = 0; i < s.n; i++) failed += !s.jobs[i].result.ok;
  compile_set_free(&s);
  return failed ? 1 : 0;
}

/* fatune sass FILE.cubin: the SASS figures of every function of a cubin
** from anywhere (FlashAttention-2's, say); with --config
** 'block_m=M,block_n=N,dim=D,warps=W' and --smem BYTES, the tile its main
** kernel runs, for the inner-loop trip count and the estimate. */
static int tile_from_config(const char *text, long v[4]) {
  static const char *const keys[] = {"block_m", "block_n", "dim", "warps"};
  for (int k = 0; k < 4; k++) {
    const char *p = strstr(text, keys[k]);
    size_t len = strlen(keys[k]);
    char *end;
    while (p && ((p != text && p[-1] != ',') || p[len] != '=')) p = strstr(p + 1, keys[k]);
    v[k] = p ? strtol(p + len + 1, &end, 10) : 0;
    if (!p || (*end && *end != ',') || v[k] < 1 || v[k] > 4096) return -1;
  }
  return 0;
}

int cmd_sass_main(const cli_opts *o) {
  char nvdisasm[4096], err[300], **names;
  size_t n;
  long tile[4] = {0};
  if (o->config && tile_from_config(o->config, tile) != 0)
    return cli_say(EXIT_BAD_INPUT, "--config for fatune sass is "
                                   "'block_m=M,block_n=N,dim=D,warps=W', each 1 to 4096");
  if (sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0)
    return cli_say(1, "no nvdisasm (on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or the "
                      "PyPI package nvidia-cuda-nvdisasm)");
  char *text;
  if (sass_disassemble_file(nvdisasm, o->merge_path, &text, err, sizeof err) != 0)
    return cli_say(1, err);
  if (sass_functions(text, &names, &n, err, sizeof err) != 0) {
    free(text);
    return cli_say(1, err);
  }
  double flops = tile[3] ? 4.0 * tile[0] * tile[1] * tile[2] / tile[3] : 0;
  const estimate_gpu *gpu = o->gpu ? estimate_gpu_find(o->gpu) : NULL;
  /* A table of regs, the SASS columns and the function, headed when it has
  ** a row; or a JSON object per function. */
  static const fa_column json_cols[] = {{"function", 0, NULL}, {"registers", 0, NULL},
                                        {NULL, 0, NULL}};
  fa_column col[SASS_NCOLS + 2] = {{"regs", 5, NULL}};
  memcpy(col + 1, sass_cols, sizeof sass_cols);
  col[SASS_NCOLS + 1] = (fa_column){"function", 0, "  "};
  fa_sink k;
  if (o->json) fa_sink_begin(&k, stdout, FA_SINK_JSON, json_cols, 3);
  else if (n) fa_sink_begin(&k, stdout, FA_SINK_TABLE, col, SASS_NCOLS + 2);
  else fa_sink_begin_headless(&k, stdout, FA_SINK_TABLE, col, SASS_NCOLS + 2);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    sass_figures f = {0};
    if (sass_analyse(text, names[i], flops, &f.c, err, sizeof err) != 0) {
      rc = cli_say(1, err);
      break;
    }
    f.analysed = 1;
    estimate_tile t = {(int)tile[3], f.c.registers, o->smem, flops};
    /* sm_90's SASS does not say its registers: no estimate without them. */
    f.estimated = gpu && flops > 0 && f.c.registers > 0 && estimate_compute(gpu, &f.c, &t, &f.e) == 0;
    fa_cell c[SASS_NCOLS + 2] = {fa_cell_int(f.c.registers)};
    if (o->json) {
      c[0] = fa_cell_text(names[i]), c[1] = fa_cell_int(f.c.registers);
      c[2] = fa_cell_members(sass_kernel_members, &f);
      fa_sink_row(&k, c, 3);
    } else {
      sass_cells(&f, c + 1);
      c[SASS_NCOLS + 1] = fa_cell_text(names[i]);
      fa_sink_row(&k, c, SASS_NCOLS + 2);
    }
  }
  /* An error leaves the JSON array open, as it always did: the exit status says. */
  if (rc == 0 && fa_sink_end(&k) != 0) rc = cli_say(1, "cannot write the figures");
  free(names);
  free(text);
  return rc;
}
