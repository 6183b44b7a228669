/*
** main.c
** The fatune command: list, gen, compile, run, explore, report, and the
** main job.
** Bad input prints one line on stderr and exits 2; a failure of the work
** itself (a variant that does not compile, say) exits 1.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa_util.h"
#include "cli.h"
#include "cmd_db.h"
#include "compile_pool.h"
#include "cuda_driver.h"
#include "explore.h"
#include "gen.h"
#include "json.h"
#include "nvrtc_compile.h"
#include "report.h"
#include "run.h"
#include "tune.h"

static int bad_input(const char *msg) { return cli_say(EXIT_BAD_INPUT, msg); }

/* An empty space is an answer the user must see, not a silent success. */
static int no_variants(const cli_opts *o, const gen_target *t) {
  fprintf(stderr, "fatune: no variant of the %s space fits %s (%d bytes of shared memory) "
                  "for dim %d %s\n", o->space, t->arch, t->smem_bytes, o->problem.dim,
          fa_dtype_name(o->problem.dtype));
  return EXIT_BAD_INPUT;
}

/* The target: --arch, else the first GPU's, else sm_90. */
static int resolve_target(gen_state *g, const cli_opts *o, gen_target *t, int quiet) {
  char arch[16] = "sm_90";
  int smem = o->smem;
  if (o->arch) {
    if (!nvrtc_arch_supported(o->arch) || gen_target_for_arch(g, o->arch, smem, 0, t) != 0) {
      fprintf(stderr, "fatune: unknown arch '%s' (for example sm_80, sm_86, sm_89, sm_90, sm_90a)\n",
              o->arch);
      return -1;
    }
    return 0;
  }
  char msg[256];
  cudrv_device_info dev;
  /* In a child process: this one must never initialise CUDA (workers fork). */
  if (cudrv_probe_isolated(&dev, msg, sizeof msg)) {
    snprintf(arch, sizeof arch, "sm_%d%d", dev.cc_major, dev.cc_minor);
    if (!smem) smem = dev.smem_per_block_optin;
    if (!quiet) fprintf(stderr, "fatune: target %s (%s)\n", arch, dev.name);
  } else if (!quiet) {
    fprintf(stderr, "fatune: %s; targeting %s (use --arch to choose)\n", msg, arch);
  }
  if (gen_target_for_arch(g, arch, smem, 0, t) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  return 0;
}

/* list ------------------------------------------------------------------ */

static void print_pairs(const gen_config *c) {
  printf("family=%s", c->family);
  for (int i = 0; i < c->n; i++) printf(" %s=%s", c->pair[i].key, c->pair[i].value);
}

static int cmd_list(gen_state *g, const cli_opts *o, const gen_target *t) {
  gen_variant *v;
  size_t n;
  if (gen_list(g, &o->problem, t, o->space, &v, &n) != 0) return bad_input(gen_errmsg(g));
  if (n == 0) return no_variants(o, t);
  if (o->json) printf("[");
  for (size_t i = 0; i < n; i++) {
    if (o->json) {
      printf("%s\n  {\"name\": ", i ? "," : "");
      json_string(stdout, v[i].name);
      printf(", \"hash\": \"%s\"", v[i].hash);
      json_config(stdout, &v[i].cfg);
      printf("}");
    } else {
      printf("%s ", v[i].name);
      print_pairs(&v[i].cfg);
      printf(" hash=%s\n", v[i].hash);
    }
  }
  if (o->json) printf("%s]\n", n ? "\n" : "");
  gen_variants_free(v, n);
  return 0;
}

/* gen ------------------------------------------------------------------- */

static int cmd_gen(gen_state *g, const cli_opts *o, const gen_target *t) {
  gen_kernel k;
  int rc = o->variant ? gen_render_name(g, o->variant, t, &k)
                      : gen_render_config(g, o->config, &o->problem, t, &k);
  if (rc != 0) return bad_input(gen_errmsg(g));
  fputs(k.source, stdout);
  gen_kernel_free(&k);
  return 0;
}

/* compile --------------------------------------------------------------- */

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

static int cmd_compile(gen_state *g, const cli_opts *o, const gen_target *t) {
  compile_set s = {0};
  if (gen_list(g, &o->problem, t, o->space, &s.variants, &s.n) != 0)
    return bad_input(gen_errmsg(g));
  if (s.n == 0) return no_variants(o, t);
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

int main(int argc, char **argv) {
  cli_opts o;
  char err[512];
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) return bad_input(err);
  if (o.cmd == CMD_HELP) {
    fputs(cli_usage, stdout);
    return 0;
  }
  if (o.cmd == CMD_VERSION) {
    printf("fatune 0.1.0 (NVRTC %s)\n", nvrtc_version_string());
    return 0;
  }
  if (cmd_db_handles(o.cmd)) return cmd_db_main(&o);
  if (o.cmd == CMD_REPORT) return report_main(&o);
  /* Asked for the GPU and there is none: that one line, nothing else. */
  const int runs = o.cmd == CMD_TUNE || o.cmd == CMD_RUN || o.cmd == CMD_EXPLORE;
  if (runs && !strcmp(o.backend, "cuda") &&
      !cudrv_probe_isolated(&(cudrv_device_info){0}, err, sizeof err)) {
    fprintf(stderr, "fatune: --backend cuda: %s\n", err);
    return 1;
  }
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return 1;
  }
  gen_target t;
  int rc;
  if (resolve_target(g, &o, &t, o.cmd == CMD_LIST || o.cmd == CMD_GEN || o.cmd == CMD_RUN) != 0) rc = EXIT_BAD_INPUT;
  else if (o.cmd == CMD_LIST) rc = cmd_list(g, &o, &t);
  else if (o.cmd == CMD_GEN) rc = cmd_gen(g, &o, &t);
  else if (o.cmd == CMD_COMPILE) rc = cmd_compile(g, &o, &t);
  else if (o.cmd == CMD_RUN) rc = run_main(g, &o, &t);
  else if (o.cmd == CMD_EXPLORE) rc = explore_main(g, &o, &t);
  else rc = tune_main(g, &o, &t);
  gen_close(g);
  return rc;
}
