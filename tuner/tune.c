/*
** tune.c
** The main job: every variant of the space for the problem and the target,
** compiled, run in worker processes, validated, and (on a GPU) timed.
**
** On the GPU (cuda backend) the requested problem runs as asked. NVRTC
** compiles on every core while one worker process measures one kernel at
** a time: validation against the naive-attention oracle (itself checked in
** float64 on sampled rows), then the timing. The parent never touches the
** device, so a kernel that kills its context costs only its worker.
**
** On the emulator the problem is cut down to --emu-seq queries and keys,
** one batch and at most two heads; every variant is validated there under
** two schedules by a worker per core, and its counters are exact for that
** problem. NVRTC compiles every variant for the target as well, so the
** table carries ptxas's registers and spills. The banner says all this:
** emulator figures are never GPU performance.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "compile_cache.h"
#include "fa_escape.h"
#include "fa_util.h"
#include "par.h"
#include "progress.h"
#include "sweep.h"
#include "fa_mod.h"
#include "tune.h"
#include "tune_types.h"

/* Seconds per (query, key, head dim, head) of one emulated launch: a
** deliberately rough constant, measured on a loaded 2-core machine at
** seq 64, dim 64 (about 20 ms a launch), to warn before a long run. */
#define EMU_S_PER_ELEMENT 4e-8

/* The emulator's validation (two launches per variant) before it starts;
** a run that would take over ten minutes says so, and how to shorten it. */
static void warn_if_long(const tune *s) {
  const fa_problem *r = &s->run;
  const double launch = EMU_S_PER_ELEMENT * r->seq_q * r->seq_k * r->dim * r->batch * r->heads;
  size_t todo = 0;
  for (size_t i = 0; i < s->n; i++) todo += s->e[i].st != TRIAL_RECORDED;
  const double est = launch * 2 * (double)todo / s->threads;
  if (est < 600) return;
  const double at256 = est * (256.0 * 256.0) / ((double)r->seq_q * r->seq_k);
  fprintf(stderr, "fatune: %sthis will take long%s: %zu variants, two launches each at seq_q %d "
                  "seq_k %d on %d threads, roughly %.0f min on the emulator; --emu-seq 256 takes "
                  "roughly %.0f s, and --jobs N uses more cores\n",
          cli_colour(2) ? "\033[33m" : "", cli_colour(2) ? "\033[0m" : "", todo, r->seq_q,
          r->seq_k, s->threads, est / 60, at256 < 1 ? 1 : at256);
}

/* ---- Setting up ---- */

/* The one variant --variant or --config names, for the problem. */
static int render_one(gen_state *g, tune *s) {
  const cli_opts *o = s->o;
  char why[256];
  if (!(s->e = calloc(1, sizeof *s->e))) return -1;
  s->n = 1;
  trial *e = &s->e[0];
  int rc = o->variant ? gen_render_name(g, o->variant, s->t, &e->k)
                      : gen_render_config(g, o->config, &o->problem, s->t, &e->k);
  if (rc != 0) {
    s->n = 0;   /* nothing rendered to free */
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  if (!gen_kernel_fits(&e->k, &o->problem, why, sizeof why)) {
    fprintf(stderr, "fatune: %s\n", why);
    return -1;
  }
  e->nvrtc.source = e->k.source;
  e->nvrtc.entry = e->k.entry;
  return s->gpu ? trial_oracle_render(&s->env, g, &s->run) : 0;
}

static int render_all(gen_state *g, tune *s) {
  if (s->o->variant || s->o->config) return render_one(g, s);
  gen_variant *v;
  if (gen_list(g, &s->o->problem, s->t, s->o->space, &v, &s->n) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  if (s->n == 0) {
    cmd_no_variants(s->o, s->t);
    gen_variants_free(v, 0);
    return -1;
  }
  s->e = calloc(s->n, sizeof *s->e);
  int rc = s->e ? 0 : -1;
  for (size_t i = 0; rc == 0 && i < s->n; i++) {
    if (gen_render_config(g, v[i].config, NULL, s->t, &s->e[i].k) != 0) {
      fprintf(stderr, "fatune: rendering %s: %s\n", v[i].name, gen_errmsg(g));
      rc = -1;
    }
    s->e[i].nvrtc.source = s->e[i].k.source;
    s->e[i].nvrtc.entry = s->e[i].k.entry;
  }
  gen_variants_free(v, s->n);
  if (rc == 0 && s->gpu && trial_oracle_render(&s->env, g, &s->run) != 0) rc = -1;
  return rc;
}

/* ---- The database ---- */

/* The device row, every variant's row, and which are recorded already
** (with their figures, shown as recorded). */
static int db_prepare(tune *s) {
  char err[512];
  s->env.db = s->db, s->env.trials = s->e, s->env.n = s->n, s->env.stride = sizeof *s->e;
  if (trial_register(&s->env, err, sizeof err) != 0) goto fail;
  for (size_t i = 0; i < s->n && !s->o->retune; i++) {
    int done = 0;
    if (trial_load_recorded(&s->env, &s->e[i], &done, err, sizeof err) != 0) goto fail;
  }
  return 0;
fail:
  fprintf(stderr, "fatune: %s: %s\n", db_path(s->db), err);
  return -1;
}

/* The best the database holds for the problem run, this run's or earlier. */
static void say_best(tune *s) {
  const fa_device *d = backend_device(s->be);
  const db_problem key = trial_key(&s->env);
  db_best_row row;
  int found = 0, exact = 0;
  char err[512];
  FILE *f = s->o->json ? stderr : stdout;
  if (db_best(s->db, d ? d->uuid : "emu", &key, &row, &found, &exact, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return;
  }
  if (!found || !exact) return;
  char variant[sizeof row.variant];   /* the file's text, as a terminal may show it */
  fa_esc_term_buf(variant, sizeof variant, row.variant);
  if (isfinite(row.median_us))
    fprintf(f, "best recorded in %s: %s, median %.1f us, %.1f TFLOP/s\n", db_path(s->db),
            variant, row.median_us, row.tflops);
  else
    fprintf(f, "best recorded in %s: %s (%lld global-memory bytes at the emulator's size)\n",
            db_path(s->db), variant, row.global_bytes);
}

/* ---- SASS: the main loop of each cubin, and the estimate ---- */

/* With --sass: nvdisasm, or one line saying there is none; the estimate's
** GPU: --gpu, else the device's, else the target arch's. */
static int sass_setup(tune *s) {
  const fa_device *d = backend_device(s->be);
  s->est_gpu = s->o->gpu ? estimate_gpu_find(s->o->gpu)
               : d       ? estimate_gpu_for_device(d->name)
                         : estimate_gpu_for_arch(s->t->arch);
  if (!s->o->sass) return 0;   /* --sass: the SASS of each variant, and the estimate */
  s->sass = calloc(s->n ? s->n : 1, sizeof *s->sass);
  s->tma_tflops = malloc((s->n ? s->n : 1) * sizeof *s->tma_tflops);
  for (size_t i = 0; s->tma_tflops && i < s->n; i++) s->tma_tflops[i] = NAN;
  if (!s->tma_tflops) free(s->sass), s->sass = NULL;
  if (s->sass && sass_find_nvdisasm(s->nvdisasm, sizeof s->nvdisasm) != 0) {
    s->nvdisasm[0] = '\0';
    fprintf(stderr, "fatune: no nvdisasm (on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or "
                    "the PyPI package nvidia-cuda-nvdisasm): no SASS figures, no estimate\n");
  }
  if (!s->sass) fprintf(stderr, "fatune: out of memory\n");
  return s->sass ? 0 : -1;
}

/* Variant i's figures from its cubin r, recorded in the database. */
static void sass_one(tune *s, size_t i, const fa_compiled *r) {
  if (!s->sass || !s->nvdisasm[0] || !r->ok) return;
  sass_figures *f = &s->sass[i];
  sass_kernel_figures(s->nvdisasm, &s->e[i].k, r, s->est_gpu, &s->o->problem, f);
  if (!f->analysed || !f->c.found) return;
  if (s->tma_tflops) s->tma_tflops[i] = f->tma_tflops;
  const sass_counts *c = &f->c;
  const int est = f->estimated && f->e.ctas_per_sm > 0;
  db_sass row = {
    .variant_id = s->e[i].variant_id, .target = s->t->arch,
    .gpu = est ? s->est_gpu->name : "", .mma = c->mma, .registers = r->registers,
    .loop_instructions = c->loop_instructions, .loop_hmma = c->loop_hmma,
    .loop_mufu = c->loop_mufu, .loop_ldsm = c->loop_ldsm, .loop_lds = c->loop_lds,
    .loop_ldgsts = c->loop_ldgsts, .loop_bar = c->loop_bar, .loop_shfl = c->loop_shfl,
    .loop_local = c->loop_local, .loop_int = c->loop_int,
    .non_mma_per_mma = c->loop_hmma ? c->non_mma_per_mma : NAN,
    .ctas_per_sm = est ? f->e.ctas_per_sm : -1, .bound = est ? f->e.bound : NULL,
    .est_tflops = est ? f->e.tflops : NAN};
  char err[512];
  if (db_sass_put(s->db, &row, err, sizeof err) != 0)
    fprintf(stderr, "fatune: %s: %s\n", db_path(s->db), err);
}

/* The GPU's cubin of variant i, as an NVRTC result for sass_one. */
static void sass_gpu(tune *s, size_t i) {
  const trial *e = &s->e[i];
  const void *data;
  size_t size;
  if (!e->build.prog || backend_program_blob(s->be, e->build.prog, &data, &size) != 0) return;
  fa_compiled r = {.ok = 1, .cubin = (char *)data, .cubin_size = size,
                    .registers = e->build.registers,
                    .smem_static_bytes = e->build.smem_static_bytes};
  sass_one(s, i, &r);
}

/* ---- The emulator's flow: compile everything, then validate on all cores ---- */

/* NVRTC's cubins of jobs[0..m) (ks[i]'s) for the machine code: from the
** compile cache where it has them, else compiled and stored. */
static int nvrtc_cached(tune *s, const gen_kernel *const *ks, compile_job *jobs, size_t m) {
  size_t *todo = malloc((m ? m : 1) * sizeof *todo);
  compile_job *miss = malloc((m ? m : 1) * sizeof *miss);
  if (!todo || !miss) {
    free(todo), free(miss);
    fprintf(stderr, "fatune: out of memory\n");
    return -1;
  }
  size_t n = 0;
  for (size_t i = 0; i < m; i++)
    if (!ccache_cubin_get(s->db, ks[i], s->t->arch, &jobs[i].result))
      todo[n] = i, miss[n++] = jobs[i];
  s->nvrtc_cached = m - n;
  progress_phase nv;
  progress_start(&nv, "compiling with NVRTC", n);
  int rc = compile_pool_run(miss, n, s->t->arch, s->threads, progress_fn(), &nv);
  if (rc != 0) {
    fprintf(stderr, "fatune: cannot start the NVRTC compile threads\n");
    for (size_t i = 0; i < m; i++) backend_compiled_free(&jobs[i].result);
  }
  for (size_t j = 0; rc == 0 && j < n; j++) {
    jobs[todo[j]] = miss[j];
    ccache_cubin_put(s->db, ks[todo[j]], s->t->arch, &miss[j].result);
  }
  free(todo), free(miss);
  return rc;
}

static int emu_flow(tune *s) {
  char err[512];
  const gen_kernel **ks = malloc(s->n * sizeof *ks);
  fa_build *b = calloc(s->n, sizeof *b);
  compile_job *jobs = malloc(s->n * sizeof *jobs);
  int rc = -1;
  if (!ks || !b || !jobs) {
    fprintf(stderr, "fatune: out of memory\n");
    goto done;
  }
  warn_if_long(s);
  /* Only what the database does not hold yet. */
  size_t m = 0;
  for (size_t i = 0; i < s->n; i++)
    if (s->e[i].st != TRIAL_RECORDED) ks[m] = &s->e[i].k, jobs[m] = s->e[i].nvrtc, m++;
  double t0 = fa_now_s();
  if (nvrtc_cached(s, ks, jobs, m) != 0) goto done;
  double t1 = fa_now_s();
  /* The host compiler in parts of a few kernels per thread, so that its
  ** progress shows. */
  progress_phase host;
  progress_start(&host, "compiling with the host compiler", m);
  const size_t part = (size_t)s->threads * 4;
  for (size_t i = 0; i < m; i += part) {
    const size_t k = m - i < part ? m - i : part;
    if (backend_compile(s->be, ks + i, k, s->threads, b + i, err, sizeof err) != 0) {
      fprintf(stderr, "fatune: %s\n", err);
      goto done;
    }
    if (isatty(2)) host.base = i, progress_show(k, k, &host);
  }
  s->nvrtc_s = t1 - t0, s->compile_s = fa_now_s() - t1;
  for (size_t i = 0, j = 0; i < s->n; i++) {
    trial *e = &s->e[i];
    if (e->st == TRIAL_RECORDED) continue;
    e->nvrtc = jobs[j];
    trial_take_build(e, &b[j++], 1);
    sass_one(s, i, &e->nvrtc.result);
  }
  if (trial_pool_open(&s->env, s->threads) != 0) goto done;
  t0 = fa_now_s();
  progress_phase val;
  progress_start(&val, "validating", m);
  rc = trial_measure_all(&s->env, s->threads, 1, progress_fn(), &val);
  s->check_s = fa_now_s() - t0;
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
  else if (trial_stopped(&s->env)) rc = -1;   /* trial_record said why */
done:
  trial_pool_close(&s->env);
  free(ks), free(b), free(jobs);
  return rc;
}

/* ---- The GPU's flow: compile on the CPU while one worker measures ---- */

/* With NVRTC on every core, before the first measurement: its own phase.
** A compile that cannot be done at all is every variant's compile error. */
static int compile_all(tune *s) {
  const gen_kernel **ks = malloc((s->n ? s->n : 1) * sizeof *ks);
  fa_build *b = calloc(s->n ? s->n : 1, sizeof *b);
  if (!ks || !b) {
    free(ks), free(b);
    fprintf(stderr, "fatune: out of memory\n");
    return -1;
  }
  /* What the database neither holds as a trial nor has in its compile cache. */
  size_t m = 0;
  for (size_t i = 0; i < s->n; i++) {
    trial *e = &s->e[i];
    if (e->st == TRIAL_RECORDED) continue;
    fa_build hit;
    if (!ccache_build_get(s->db, s->be, &e->k, &hit)) ks[m++] = &e->k;
    else trial_take_build(e, &hit, 0), s->nvrtc_cached++;
  }
  progress_phase ph;
  progress_start(&ph, "compiling with NVRTC", m);
  char err[512];
  int rc = trial_compile(&s->env, ks, m, s->threads, b, progress_fn(), &ph, err, sizeof err);
  if (rc != 0) fprintf(stderr, "fatune: %s\n", err);
  for (size_t i = 0, j = 0; rc == 0 && i < s->n; i++) {
    trial *e = &s->e[i];
    if (j >= m || ks[j] != &e->k) continue;   /* recorded, or from the cache */
    ccache_build_put(s->db, s->be, &e->k, &b[j]);
    trial_take_build(e, &b[j++], 0);
  }
  free(ks), free(b);
  return rc;
}

static void gpu_progress(tune *s) {
  if (!isatty(2)) return;
  const double spent = fa_now_s() - s->t_measure;
  const double left = s->done ? spent / (double)s->done * (double)(s->n - s->done) : 0;
  fprintf(stderr, "\r\033[Kmeasuring %zu/%zu", s->done, s->n);
  if (s->best)
    fprintf(stderr, "  best %s %.1f us (%.1f TFLOP/s)", s->best->k.name,
            s->best->out.t.median_us, attn_flops(&s->run) / s->best->out.t.median_us / 1e6);
  fprintf(stderr, "  about %.0f s left", left);
  if (s->done == s->n) fputc('\n', stderr);
}

static int gpu_flow(tune *s) {
  if (trial_oracle_compile(&s->env) != 0) return -1;
  s->t_start = fa_now_s();
  /* Every compile ends before a worker is forked: a worker sees only the
  ** programs its parent had built when it was forked. They are compiled
  ** in a child process, which alone runs NVRTC (and so initialises CUDA). */
  if (compile_all(s) != 0) return -1;
  s->t_measure = fa_now_s();   /* the time left is the measuring's */
  if (trial_pool_open(&s->env, 1) != 0) return -1;
  for (size_t i = 0; i < s->n; i++) {
    trial_measure(&s->env, i);
    const trial *e = &s->e[i];
    if (trial_record(&s->env, e) != 0) break;   /* it said why; measure no more */
    sass_gpu(s, i);
    if (e->st == TRIAL_OK && e->out.timed &&
        (!s->best || e->out.t.median_us < s->best->out.t.median_us))
      s->best = e;
    s->done++;
    gpu_progress(s);
  }
  s->check_s = fa_now_s() - s->t_start;
  trial_pool_close(&s->env);
  return trial_stopped(&s->env) ? -1 : 0;
}

/* ---- The job ---- */

static void tune_free(tune *s) {
  for (size_t i = 0; s->e && i < s->n; i++) trial_free(&s->e[i], s->be);
  free(s->e);
  free(s->sass);
  free(s->tma_tflops);
  trial_env_free(&s->env);
  backend_close(s->be);
  if (s->db) db_close(s->db);
}

/* "dtype bf16, the a family (its title): why", or with more families (the
** space lists them all, the best wins) "the a and b families (x; y; the
** best of both wins)". */
static void banner_families(gen_state *g, const tune *s) {
  gen_family f[8];
  int n = 0;
  char names[160] = "", titles[320] = "";
  if (gen_families_for(g, &s->o->problem, s->t, f, 8, &n) != 0) n = 0;
  if (n == 0) return;  /* the listing says why next */
  for (int i = 0; i < n; i++) {
    const char *sep = i == 0 ? "" : i == n - 1 ? " and " : ", ";
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", sep, f[i].name);
    used = strlen(titles);
    snprintf(titles + used, sizeof titles - used, "%s%s", i ? "; " : "", f[i].title);
  }
  fprintf(stderr, "fatune: dtype %s, the %s famil%s (%s%s): %s\n",
          fa_dtype_name(s->o->problem.dtype), names, n > 1 ? "ies" : "y", titles,
          n == 2 ? "; the best of both wins" : n > 2 ? "; the best wins" : "",
          s->o->dtype_why ? s->o->dtype_why : "as --dtype asks");
  /* What padding costs: Q K^T's product grows with Q's and K's head dim,
  ** P V's with V's, and so do K's and V's tiles. */
  const int dim = s->o->problem.dim, dv = fa_problem_dim_v(&s->o->problem);
  char dims[24];
  fa_dims_text(dim, dv, dims, sizeof dims);
  for (int i = 0; i < n; i++)
    if (f[i].padded_dim > 0 && (f[i].padded_dim > dim || f[i].padded_dim > dv))
      fprintf(stderr, "fatune: the %s family computes head dim%s %s padded to %d: %.2f times the "
                      "work of Q K^T and P V, and of K and V in shared memory\n",
              f[i].name, dv != dim ? "s" : "", dims, f[i].padded_dim,
              2.0 * f[i].padded_dim / (dim + dv));
}

static void banner(gen_state *g, const tune *s, const char *note) {
  const fa_problem *p = &s->o->problem;
  const fa_device *d = backend_device(s->be);
  if (d)
    fprintf(stderr, "fatune: backend cuda: %s (sm_%d%d, %d SMs, %d MB L2); timing %d ms per "
                    "variant, L2 flushed between launches\n",
            d->name, d->cc_major, d->cc_minor, d->sm_count, d->l2_bytes >> 20, s->o->trial_ms);
  else
    fprintf(stderr, "fatune: backend emu, the CPU emulator%s%s: its figures are exact counts "
                    "and CPU times of a simulation, not GPU performance\n",
            note[0] ? ": " : "", note);
  banner_families(g, s);
  char dims[24];
  fa_dims_text(p->dim, p->dim_v, dims, sizeof dims);
  fprintf(stderr, "fatune: problem %s dim %s seq_q %d seq_k %d batch %d heads %d%s",
          fa_dtype_name(p->dtype), dims, p->seq_q, p->seq_k, p->batch, p->heads,
          p->causal ? " causal" : "");
  if (fa_problem_group(p) > 1)
    fprintf(stderr, " (%d K/V heads, %d query heads each)", fa_problem_kv_heads(p),
            fa_problem_group(p));
  if (p->mod) fprintf(stderr, " mod %s", p->mod->label);
  if (!s->gpu)
    fprintf(stderr, "; the emulator runs seq_q %d seq_k %d batch %d heads %d", s->run.seq_q,
            s->run.seq_k, s->run.batch, s->run.heads);
  fprintf(stderr, "; inputs seed %llu\n", s->seed);
}

/* One key: every variant (or the one named) for o->problem. */
static int tune_one(gen_state *g, const cli_opts *o, const gen_target *t) {
  tune s;
  memset(&s, 0, sizeof s);
  s.o = o, s.t = t;
  s.threads = o->jobs > 0 ? o->jobs : par_cores();
  s.seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  trial_env_init(&s.env);
  char note[256], err[512];
  if (backend_open(o->backend, &s.be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    tune_free(&s);
    return 1;
  }
  s.gpu = backend_device(s.be) != NULL;
  s.env.be = s.be, s.env.gpu = s.gpu, s.env.run = &s.run, s.env.seed = s.seed;
  s.env.asked = &o->problem, s.env.arch = t->arch;
  s.env.timeout_s = o->timeout_s, s.env.trial_ms = o->trial_ms;
  const fa_problem *p = &o->problem;
  s.run = *p;
  if (!s.gpu) {
    s.run.seq_q = p->seq_q < o->emu_seq ? p->seq_q : o->emu_seq;
    s.run.seq_k = p->seq_k < o->emu_seq ? p->seq_k : o->emu_seq;
    s.run.batch = 1;
    s.run.heads = p->heads < 2 ? p->heads : 2;
    if (p->op == FA_OP_DECODE) {  /* two K/V heads of the group, up to three sequences */
      s.run.batch = p->batch < 3 ? p->batch : 3;
      s.run.heads = fa_problem_kv_heads(p) < 2 ? p->heads : 2 * fa_problem_group(p);
    } else if (p->op == FA_OP_BWD && fa_problem_group(p) > 1) {  /* two K/V heads of the group */
      s.run.heads = fa_problem_kv_heads(p) < 2 ? p->heads : 2 * fa_problem_group(p);
    }
  }
  banner(g, &s, note);
  int rc = 1;
  if (db_open(o->db, DB_CREATE, &s.db, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
  } else if (render_all(g, &s) != 0) {
    rc = 2;
  } else if (sass_setup(&s) == 0 && db_prepare(&s) == 0 &&
             (s.gpu ? gpu_flow(&s) : emu_flow(&s)) == 0) {
    tune_report(&s);
    int any_ok = 0;
    for (size_t i = 0; i < s.n; i++)
      any_ok |= s.e[i].st == TRIAL_OK || (s.e[i].st == TRIAL_RECORDED && s.e[i].was == TRIAL_OK);
    rc = any_ok ? 0 : 1;
    say_best(&s);
  }
  tune_free(&s);
  return rc;
}

/* ---- A sweep: key after key ---- */

static int is_sweep(const cli_opts *o) {
  return o->ndims > 1 || o->nseqs > 1 || o->ndtypes > 1 || o->causal_both || o->shard_n ||
         o->nseqks > 1 || o->nbatches > 1 || o->ngqas > 1 || o->npages > 1 || o->workload;
}

/* Each key of the sweep (or of its shard) in turn, as if asked alone: each
** records its trials as they finish, so a rerun resumes, key by key. A key
** that fails does not stop the others; the status is the worst. */
int tune_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  if (!is_sweep(o)) return tune_one(g, o, t);
  fa_problem *keys;
  size_t n;
  if (sweep_keys(o, &keys, &n) != 0) {
    fprintf(stderr, "fatune: out of memory\n");
    return 1;
  }
  char shard[48] = "";
  if (o->shard_n) snprintf(shard, sizeof shard, " in shard %d/%d", o->shard_i, o->shard_n);
  fprintf(stderr, "fatune: sweep: %zu key%s%s\n", n, n == 1 ? "" : "s", shard);
  if (o->workload) {
    fprintf(stderr, "fatune: workload %s: %ld decode step%s in %d bucket%s:", o->workload,
            o->wl_steps, o->wl_steps == 1 ? "" : "s", o->nwl_keys, o->nwl_keys == 1 ? "" : "s");
    for (int i = 0; i < o->nwl_keys; i++)
      fprintf(stderr, "%s batch %d x %d keys (%ld)", i ? "," : "", o->wl_keys[i].batch,
              o->wl_keys[i].seq_k, o->wl_keys[i].steps);
    fputc('\n', stderr);
  }
  int rc = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    cli_opts one = *o;
    one.problem = keys[i];
    const fa_problem *p = &keys[i];
    char dims[24];
    fa_dims_text(p->dim, p->dim_v, dims, sizeof dims);
    char dec[64] = "";
    if (p->op == FA_OP_DECODE)
      snprintf(dec, sizeof dec, " batch %d gqa %d page %d", p->batch, fa_problem_group(p),
               p->page);
    fprintf(stderr, "fatune: key %zu/%zu%s: %s dim %s seq_q %d seq_k %d%s%s\n", i + 1, n, shard,
            fa_dtype_name(p->dtype), dims, p->seq_q, p->seq_k, dec, p->causal ? " causal" : "");
    const int one_rc = tune_one(g, &one, t);
    fflush(stdout);   /* its table before the next key's line, in one log */
    failed += one_rc != 0;
    rc = one_rc > rc ? one_rc : rc;
  }
  fprintf(stderr, "fatune: sweep%s: %zu key%s, %d failed\n", shard, n, n == 1 ? "" : "s", failed);
  free(keys);
  return rc;
}
