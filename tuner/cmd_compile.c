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
static void print_sass_cells(const sass_figures *f) {
  const sass_counts *c = &f->c;
  if (!f->analysed || !c->found) printf(" %6s %5s %6s %5s %5s", "-", "-", "-", "-", "-");
  else if (c->loop_hmma)
    printf(" %6ld %5ld %6.2f %5ld %5ld", c->loop_instructions, c->loop_hmma, c->non_mma_per_mma,
           c->loop_mufu, c->loop_local);
  else printf(" %6ld %5ld %6s %5ld %5ld", c->loop_instructions, 0L, "-", c->loop_mufu, c->loop_local);
  if (f->estimated && f->e.ctas_per_sm)
    printf(" %4d %-6s %6.0f", f->e.ctas_per_sm, f->e.bound, f->e.tflops);
  else printf(" %4s %-6s %6s", f->estimated ? "0" : "-", "-", "-");
}

static void print_table(const compile_set *s) {
  printf("%-58s %5s %11s %7s %6s %9s", "variant", "regs", "spill st/ld", "smem", "stack",
         "compile");
  if (s->sass)
    printf(" %6s %5s %6s %5s %5s %4s %-6s %6s", "insns", "mma", "other", "mufu", "local", "ctas",
           "bound", "est_tf");
  printf("  status\n");
  for (size_t i = 0; i < s->n; i++) {
    const fa_compiled *r = &s->jobs[i].result;
    if (r->ok)
      printf("%-58s %5d %5d/%-5d %7d %6d %7.0fms", s->kernels[i].name, r->registers,
             r->spill_store_bytes, r->spill_load_bytes,
             s->kernels[i].smem_bytes + r->smem_static_bytes, r->stack_bytes, r->compile_ms);
    else
      printf("%-58s %5s %11s %7s %6s %7.0fms", s->kernels[i].name, "-", "-", "-", "-",
             r->compile_ms);
    if (s->sass) print_sass_cells(&s->sass[i]);
    printf("  %s\n", r->ok ? "ok" : r->error);
  }
}

static void print_json(const compile_set *s) {
  printf("[");
  for (size_t i = 0; i < s->n; i++) {
    const fa_compiled *r = &s->jobs[i].result;
    printf("%s\n  {\"name\": ", i ? "," : "");
    json_string(stdout, s->kernels[i].name);
    printf(", \"hash\": \"%s\"", s->kernels[i].hash);
    json_config(stdout, &s->kernels[i].cfg);
    printf(", \"ok\": %s, \"registers\": %d, \"spill_bytes\": %d, \"spill_store_bytes\": %d, "
           "\"spill_load_bytes\": %d, \"smem_bytes\": %d, \"stack_bytes\": %d, "
           "\"compile_ms\": %.1f, \"source_hash\": \"%s\", \"error\": ",
           r->ok ? "true" : "false", r->registers, r->spill_store_bytes + r->spill_load_bytes,
           r->spill_store_bytes, r->spill_load_bytes,
           s->kernels[i].smem_bytes + r->smem_static_bytes, r->stack_bytes, r->compile_ms,
           s->kernels[i].source_hash);
    if (r->ok) printf("null, \"log\": null");
    else {
      json_string(stdout, r->error);
      printf(", \"log\": ");
      json_string(stdout, r->log);
    }
    if (s->sass) sass_kernel_json(stdout, &s->sass[i]);
    printf("}");
  }
  printf("%s]\n", s->n ? "\n" : "");
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
    int rc = o->variant  ? gen_render_name(g, o->variant, t, &s->kernels[i])
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
    sass_kernel_figures(nvdisasm, &s->kernels[i], &s->jobs[i].result, gpu, &s->sass[i]);
    if (s->jobs[i].result.ok && s->sass[i].error[0])
      fprintf(stderr, "fatune: SASS of %s: %s\n", s->kernels[i].name, s->sass[i].error);
  }
  if (!o->json)
    printf("SASS: the main loop per K/V block per warp (insns, mma: %s, other per mma, mufu, "
           "local); estimate for %s: CTAs per SM, bound, TFLOP/s (static, not measured)\n",
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
  if (o->json) print_json(&s);
  else print_table(&s);
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
  if (o->json) printf("[");
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
    if (o->json) {
      printf("%s\n  {\"function\": ", i ? "," : "");
      json_string(stdout, names[i]);
      printf(", \"registers\": %d", f.c.registers);
      sass_kernel_json(stdout, &f);
      printf("}");
    } else {
      if (i == 0)
        printf("%5s %6s %5s %6s %5s %5s %4s %-6s %6s  function\n", "regs", "insns", "mma",
               "other", "mufu", "local", "ctas", "bound", "est_tf");
      printf("%5d", f.c.registers);
      print_sass_cells(&f);
      printf("  %s\n", names[i]);
    }
  }
  if (o->json && rc == 0) printf("%s]\n", n ? "\n" : "");
  free(names);
  free(text);
  return rc;
}
