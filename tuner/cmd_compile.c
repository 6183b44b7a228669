/*
** cmd_compile.c
** fatune compile: every variant of the space compiled with NVRTC for the
** target on all cores; ptxas's registers, spills, shared memory and stack
** per variant (a table or JSON), and a summary of the compile times.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "commands.h"
#include "compile_pool.h"
#include "fa_util.h"
#include "json.h"

typedef struct compile_set {
  gen_variant *variants;
  gen_kernel *kernels;
  compile_job *jobs;
  size_t n;
} compile_set;

static void compile_set_free(compile_set *s) {
  for (size_t i = 0; i < s->n; i++) {
    gen_kernel_free(&s->kernels[i]);
    nvrtc_result_free(&s->jobs[i].result);
  }
  free(s->kernels);
  free(s->jobs);
  gen_variants_free(s->variants, s->n);
}

static void progress(size_t done, size_t total, void *ud) {
  (void)ud;
  fprintf(stderr, "\rcompiling %zu/%zu", done, total);
  if (done == total) fputc('\n', stderr);
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

static void print_table(const compile_set *s) {
  printf("%-58s %5s %11s %7s %6s %9s  %s\n", "variant", "regs", "spill st/ld", "smem", "stack",
         "compile", "status");
  for (size_t i = 0; i < s->n; i++) {
    const nvrtc_result *r = &s->jobs[i].result;
    if (r->ok)
      printf("%-58s %5d %5d/%-5d %7d %6d %7.0fms  ok\n", s->variants[i].name, r->registers,
             r->spill_store_bytes, r->spill_load_bytes,
             s->kernels[i].smem_bytes + r->smem_static_bytes, r->stack_bytes, r->compile_ms);
    else
      printf("%-58s %5s %11s %7s %6s %7.0fms  %s\n", s->variants[i].name, "-", "-", "-", "-",
             r->compile_ms, r->error);
  }
}

static void print_json(const compile_set *s) {
  printf("[");
  for (size_t i = 0; i < s->n; i++) {
    const nvrtc_result *r = &s->jobs[i].result;
    printf("%s\n  {\"name\": ", i ? "," : "");
    json_string(stdout, s->variants[i].name);
    printf(", \"hash\": \"%s\"", s->variants[i].hash);
    json_config(stdout, &s->variants[i].cfg);
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
    const nvrtc_result *r = &s->jobs[i].result;
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

int cmd_compile_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  compile_set s = {0};
  if (gen_list(g, &o->problem, t, o->space, &s.variants, &s.n) != 0)
    return cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
  if (s.n == 0) return cmd_no_variants(o, t);
  if (alloc_set(&s) != 0) {
    compile_set_free(&s);
    return 1;
  }
  for (size_t i = 0; i < s.n; i++) {
    if (gen_render_config(g, s.variants[i].config, NULL, t, &s.kernels[i]) != 0) {
      fprintf(stderr, "fatune: rendering %s: %s\n", s.variants[i].name, gen_errmsg(g));
      compile_set_free(&s);
      return 1;
    }
    s.jobs[i].source = s.kernels[i].source;
    s.jobs[i].entry = s.kernels[i].entry;
  }
  int threads = o->jobs > 0 ? o->jobs : compile_pool_default_threads();
  double t0 = fa_now_s();
  if (compile_pool_run(s.jobs, s.n, t->arch, threads, isatty(2) ? progress : NULL, NULL) != 0) {
    perror("fatune: compile pool");
    compile_set_free(&s);
    return 1;
  }
  double wall = fa_now_s() - t0;
  if (o->json) print_json(&s);
  else print_table(&s);
  print_summary(o->json ? stderr : stdout, &s, t, threads, wall);
  size_t failed = 0;
  for (size_t i = 0; i < s.n; i++) failed += !s.jobs[i].result.ok;
  compile_set_free(&s);
  return failed ? 1 : 0;
}
