/*
** explore.c
** fatune explore: matched variants around the SIMT family's
** FlashAttention-2 default, each axis's values differing in that axis
** only; compiled once, then for each sequence length run in worker
** processes and validated like the main job (two schedules on the
** emulator; the oracle and timing on a GPU), recorded in the database,
** and compared with the analytic model counter by counter
** (explore_print.c prints the tables).
**
** On the emulator the problem is one batch and one head at the requested
** seq, capped at --emu-seq (default 2048): the counters scale exactly with
** batch and heads, so one head shows every difference; a sweep drops the
** lengths past the cap. On a GPU the problem runs as asked.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa_util.h"
#include "explore_int.h"
#include "par.h"
#include "tune.h"

#define EX_EMU_SEQ 2048
#define ORACLE_SAMPLE_ROWS 64

const ex_axis ex_axes[EX_NAXES] = {
  {"norm", "normalization: eager (FlashAttention-1) against deferred (FlashAttention-2)", 2,
   {"eager", "deferred"}, {"norm=eager", "norm=deferred"}},
  {"parallel", "loop order: kv_outer (FlashAttention-1) against q_outer (FlashAttention-2)", 2,
   {"kv_outer", "q_outer"}, {"par=kv_outer", "par=q_outer"}},
  {"warp_split", "work split among warps: split_k (FlashAttention-1) against split_q "
   "(FlashAttention-2)", 2, {"split_k", "split_q"}, {"split=split_k", "split=split_q"}},
  {"layout", "shared-memory layout: row-major, padded rows, K transposed", 3,
   {"row", "pad", "kt"}, {"layout=row", "layout=pad", "layout=kt"}},
  {"tiles", "tile: block_m x block_n", 4, {"32x32", "64x32", "64x64", "128x64"},
   {"block_m=32,block_n=32", "block_m=64,block_n=32", "block_m=64,block_n=64",
    "block_m=128,block_n=64"}},
};

#define C(f, j, l) {#f, j, l, offsetof(fa_counters, f)}
const ex_counter ex_counters[EX_NCOUNTERS] = {
  C(gmem_read, "global_bytes_read", "global bytes read"),
  C(gmem_written, "global_bytes_written", "global bytes written"),
  C(smem_read, "smem_bytes_read", "shared bytes read"),
  C(smem_written, "smem_bytes_written", "shared bytes written"),
  C(exp2, "exp_count", "exponentials"),
  C(log2, "log_count", "logarithms"),
  C(rescale, "rescale_count", "rescale multiplies"),
  C(mma, "mma_count", "mma.sync"),
  C(shuffles, "shuffles", "warp shuffles"),
  C(barriers, "barriers", "__syncthreads"),
  C(warp_syncs, "warp_syncs", "__syncwarp"),
};
#undef C

long long ex_measured(const ex_variant *v, int c) {
  return (long long)*(const unsigned long long *)((const char *)&v->out.r.counters +
                                                  ex_counters[c].off);
}

int ex_ran(const ex_variant *v) {
  return !strcmp(v->status, "ok") || !strcmp(v->status, "invalid");
}

/* ---- The variants ---- */

/* Render `config` around the defaults; the index of its variant (an equal
** one rendered before is shared), -1 when it does not fit the target (why
** says so), -2 on any other error. */
static int add_variant(explore *x, const char *config, char *why, size_t n) {
  gen_kernel k;
  if (gen_render_config(x->g, config, &x->o->problem, x->t, &k) != 0) {
    snprintf(why, n, "%s", gen_errmsg(x->g));
    return strstr(why, "does not fit") ? -1 : -2;
  }
  for (size_t i = 0; i < x->n; i++)
    if (!strcmp(x->v[i].k.hash, k.hash)) {
      gen_kernel_free(&k);
      return (int)i;
    }
  ex_variant *v = &x->v[x->n];
  v->k = k;
  v->status = "ok";
  v->nvrtc.source = k.source, v->nvrtc.entry = k.entry;
  return (int)x->n++;
}

static int setup_variants(explore *x) {
  for (int a = 0; a < EX_NAXES; a++) {
    if (!x->on[a]) continue;
    for (int i = 0; i < ex_axes[a].n; i++) {
      int at = add_variant(x, ex_axes[a].config[i], x->unfit[a][i], sizeof x->unfit[a][i]);
      if (at == -2) {
        fprintf(stderr, "fatune: explore: %s: %s\n", ex_axes[a].config[i], x->unfit[a][i]);
        return -1;
      }
      x->slot[a][i] = at;
    }
  }
  return 0;
}

/* The backend's compile of every variant; on the emulator NVRTC's too, for
** ptxas's registers and spills; on a GPU the oracle. */
static int compile_all(explore *x) {
  const gen_kernel *ks[EX_MAX];
  fa_build b[EX_MAX];
  compile_job jobs[EX_MAX];
  char err[512];
  for (size_t i = 0; i < x->n; i++) ks[i] = &x->v[i].k, jobs[i] = x->v[i].nvrtc;
  if (!x->gpu && compile_pool_run(jobs, x->n, x->t->arch, x->threads, NULL, NULL) != 0) {
    fprintf(stderr, "fatune: cannot start the NVRTC compile threads\n");
    return -1;
  }
  for (size_t i = 0; !x->gpu && i < x->n; i++) x->v[i].nvrtc = jobs[i];
  if (backend_compile(x->be, ks, x->n, x->threads, b, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return -1;
  }
  for (size_t i = 0; i < x->n; i++) {
    ex_variant *v = &x->v[i];
    v->b = b[i];
    if (!v->b.prog) v->status = "compile_error", v->why = v->b.log ? v->b.log : "?";
    else if (!x->gpu && !v->nvrtc.result.ok)
      v->status = "compile_error", v->why = v->nvrtc.result.error;
  }
  if (!x->gpu) return 0;
  const gen_kernel *ok = &x->oracle_k;
  if (gen_render_oracle(x->g, &x->o->problem, &x->oracle_k) != 0) {
    fprintf(stderr, "fatune: rendering the oracle: %s\n", gen_errmsg(x->g));
    return -1;
  }
  if (backend_compile(x->be, &ok, 1, 1, &x->oracle_b, err, sizeof err) != 0 || !x->oracle_b.prog) {
    fprintf(stderr, "fatune: the oracle does not compile: %s\n",
            x->oracle_b.log ? x->oracle_b.log : err);
    return -1;
  }
  return 0;
}

/* The model's figures for the problem run. */
static int predict(explore *x, ex_variant *v) {
  gen_prediction pr;
  if (gen_predict(x->g, v->k.config, &x->run, &pr) != 0) {
    fprintf(stderr, "fatune: the cost model of %s: %s\n", v->k.name, gen_errmsg(x->g));
    return -1;
  }
  for (int c = 0; c < EX_NCOUNTERS; c++) v->pred[c] = -1;
  for (int i = 0; i < pr.n; i++) {
    for (int c = 0; c < EX_NCOUNTERS; c++)
      if (!strcmp(pr.f[i].name, ex_counters[c].model)) v->pred[c] = pr.f[i].value;
    if (!strcmp(pr.f[i].name, "paper_standard_bytes")) v->paper_standard = pr.f[i].value;
    if (!strcmp(pr.f[i].name, "paper_tiled_bytes")) v->paper_tiled = pr.f[i].value;
  }
  return 0;
}

/* ---- The database ---- */

static int db_setup(explore *x) {
  char err[512], name[300];
  db_device dev = tune_device(x->be, name, sizeof name);
  if (db_open(x->o->db, DB_CREATE, &x->db, err, sizeof err) != 0 ||
      db_device_id(x->db, &dev, &x->device_id, err, sizeof err) != 0)
    goto fail;
  for (size_t i = 0; i < x->n; i++) {
    const gen_kernel *k = &x->v[i].k;
    char config[4096];
    gen_config_json(&k->cfg, config, sizeof config);
    db_variant v = {.family = k->cfg.family, .template_version = k->template_version,
                    .name = k->name, .hash = k->hash, .config = config,
                    .source_hash = k->source_hash};
    if (db_variant_id(x->db, &v, &x->v[i].id, err, sizeof err) != 0) goto fail;
  }
  return 0;
fail:
  fprintf(stderr, "fatune: %s\n", err);
  return -1;
}

static void record(explore *x, const ex_variant *v) {
  const int ran = ex_ran(v), t = v->out.timed;
  const double flops = attn_flops(&x->run), bytes = attn_bytes(&x->run);
  char counters[600], err[512];
  tune_counters_json(&v->out.r.counters, counters, sizeof counters);
  db_trial tr = {
    .variant_id = v->id, .device_id = x->device_id,
    .problem = {.dtype = fa_dtype_name(x->run.dtype), .dim = x->run.dim, .seq_q = x->run.seq_q,
                .seq_k = x->run.seq_k, .batch = x->run.batch, .heads = x->run.heads,
                .causal = x->run.causal},
    .status = v->status, .message = strcmp(v->status, "ok") ? v->why : NULL,
    .max_abs_err = ran ? v->out.r.max_abs_err : NAN, .rel_err = ran ? v->out.r.rel_err : NAN,
    .lse_err = ran ? v->out.r.lse_err : NAN, .median_us = t ? v->out.t.median_us : NAN,
    .min_us = t ? v->out.t.min_us : NAN, .p20_us = t ? v->out.t.p20_us : NAN,
    .p80_us = t ? v->out.t.p80_us : NAN, .tflops = t ? flops / v->out.t.median_us / 1e6 : NAN,
    .gbps = t ? bytes / v->out.t.median_us / 1e3 : NAN,
    .counters = ran && !x->gpu ? counters : NULL};
  if (db_trial_put(x->db, &tr, err, sizeof err) != 0)
    fprintf(stderr, "fatune: recording %s: %s\n", v->k.name, err);
}

/* ---- Runs, in worker processes ---- */

/* The inputs and their reference, once per worker process. */
static int ensure_case(explore *x) {
  if (x->have_case) return x->case_err[0] ? -1 : 0;
  x->have_case = 1;
  char err[256];
  int rc = x->gpu ? val_case_make_oracle(&x->vc, &x->run, x->seed, x->be, x->oracle_b.prog,
                                         &x->oracle_k, ORACLE_SAMPLE_ROWS, err, sizeof err)
                  : val_case_make(&x->vc, &x->run, x->seed, err, sizeof err);
  if (rc == 0)
    rc = attn_inputs_upload(x->be, &x->run, x->vc.q, x->vc.k, x->vc.v, &x->in, err, sizeof err);
  if (rc != 0) snprintf(x->case_err, sizeof x->case_err, "cannot set up validation: %s", err);
  return rc;
}

/* In the child: validate variant i (two schedules on the emulator), and
** time it on a GPU. A device left unusable retires the process. */
static int job(size_t i, void *ud, void *out) {
  explore *x = ud;
  ex_variant *v = &x->v[i];
  ex_outcome *oc = out;
  oc->ctas_per_sm = -1;
  if (ensure_case(x) != 0) {
    oc->r.status = VAL_CRASHED;
    snprintf(oc->r.msg, sizeof oc->r.msg, "%s", x->case_err);
    return 1;
  }
  val_opts vo = {.nschedules = x->gpu ? 1 : 2, .schedule = {EMU_FORWARD, EMU_REVERSE},
                 .seed = x->seed, .threads = 1};
  char err[256];
  if (val_check(x->be, &x->vc, &x->in, v->b.prog, &v->k, &vo, &oc->r, err, sizeof err)) {
    snprintf(oc->r.msg, sizeof oc->r.msg, "cannot validate: %s", err);
    oc->r.status = VAL_CRASHED;
  }
  if (x->gpu && oc->r.status == VAL_OK) {
    if (attn_time(x->be, v->b.prog, &v->k, &x->run, &x->in, x->o->trial_ms, &oc->t,
                  &oc->ctas_per_sm, err, sizeof err) == 0)
      oc->timed = 1;
    else if (backend_poisoned(x->be))
      oc->r.status = VAL_CRASHED, snprintf(oc->r.msg, sizeof oc->r.msg, "%s", err);
  }
  return backend_poisoned(x->be);
}

static wk_worker *take_worker(explore *x) {
  pthread_mutex_lock(&x->mu);
  wk_worker *w = x->workers[--x->nfree];
  pthread_mutex_unlock(&x->mu);
  return w;
}

static void give_worker(explore *x, wk_worker *w) {
  pthread_mutex_lock(&x->mu);
  x->workers[x->nfree++] = w;
  pthread_mutex_unlock(&x->mu);
}

/* Variant i through a worker, from a thread of the parent. */
static void measure(size_t i, void *ud) {
  explore *x = ud;
  ex_variant *v = &x->v[i];
  if (!strcmp(v->status, "compile_error")) return;
  wk_worker *w = take_worker(x);
  char why[256];
  memset(&v->out, 0, sizeof v->out);
  wk_outcome got = wk_run(w, i, x->o->timeout_s, &v->out, why, sizeof why);
  give_worker(x, w);
  val_result *r = &v->out.r;
  v->status = "ok", v->why = NULL;
  if (got != WK_DONE) {
    v->status = got == WK_TIMEOUT ? "timeout" : "crashed";
    snprintf(r->msg, sizeof r->msg, "%s", why);
  } else if (r->status != VAL_OK) {
    v->status = r->status == VAL_INVALID ? "invalid" : "crashed";
  }
  if (strcmp(v->status, "ok")) v->why = r->msg;
}

static void workers_close(explore *x) {
  for (int i = 0; i < x->nfree; i++) wk_close(x->workers[i]);
  x->nfree = 0;
}

/* Fresh workers for each problem: a child builds its inputs once. */
static int run_problem(explore *x) {
  char err[256];
  const int n = x->gpu ? 1 : x->threads < EX_MAX ? x->threads : EX_MAX;
  for (int i = 0; i < n; i++) {
    if (wk_open(&x->workers[i], job, x, sizeof(ex_outcome), err, sizeof err) != 0) {
      fprintf(stderr, "fatune: %s\n", err);
      workers_close(x);
      return -1;
    }
    x->nfree++;
  }
  int rc = par_for(x->n, n, measure, x, NULL, NULL);
  workers_close(x);
  if (rc != 0) fprintf(stderr, "fatune: cannot start the validation threads\n");
  return rc;
}

/* ---- The flow ---- */

/* The problem that runs for seq (the emulator's: one batch, one head, seq
** capped); 0 when the emulator skips it in a sweep. */
static int problem_for(const explore *x, int seq_q, int seq_k, fa_problem *p) {
  *p = x->o->problem;
  p->seq_q = seq_q, p->seq_k = seq_k;
  if (x->gpu) return 1;
  p->batch = p->heads = 1;
  if (x->o->sweep_lo && (seq_q > x->emu_seq || seq_k > x->emu_seq)) return 0;
  p->seq_q = seq_q < x->emu_seq ? seq_q : x->emu_seq;
  p->seq_k = seq_k < x->emu_seq ? seq_k : x->emu_seq;
  return 1;
}

static int explore_one(explore *x, int first) {
  for (size_t i = 0; i < x->n; i++)
    if (predict(x, &x->v[i]) != 0) return -1;
  const double t0 = fa_now_s();
  if (isatty(2))
    fprintf(stderr, "explore: seq_q %d seq_k %d: running %zu variants...\n", x->run.seq_q,
            x->run.seq_k, x->n);
  if (run_problem(x) != 0) return -1;
  x->run_s += fa_now_s() - t0;
  for (size_t i = 0; i < x->n; i++) {
    record(x, &x->v[i]);
    if (strcmp(x->v[i].status, "ok")) x->failures++;
  }
  ex_print_problem(x, first);
  return 0;
}

static int explore_all(explore *x) {
  const fa_problem *p = &x->o->problem;
  if (!x->o->sweep_lo) {
    problem_for(x, p->seq_q, p->seq_k, &x->run);
    return explore_one(x, 1);
  }
  int runs = 0;
  for (long long s = x->o->sweep_lo; s <= x->o->sweep_hi; s *= 2) {
    if (!problem_for(x, (int)s, (int)s, &x->run)) {
      fprintf(stderr, "fatune: seq %lld skipped: past the emulator's --emu-seq %d\n", s,
              x->emu_seq);
      continue;
    }
    if (explore_one(x, runs == 0) != 0) return -1;
    runs++;
  }
  if (!runs) {
    fprintf(stderr, "fatune: no sequence length of the sweep is within --emu-seq %d\n",
            x->emu_seq);
    return -1;
  }
  return 0;
}

static void explore_free(explore *x) {
  for (size_t i = 0; i < x->n; i++) {
    if (x->be) backend_build_free(x->be, &x->v[i].b);
    nvrtc_result_free(&x->v[i].nvrtc.result);
    gen_kernel_free(&x->v[i].k);
  }
  if (x->be) backend_build_free(x->be, &x->oracle_b);
  gen_kernel_free(&x->oracle_k);
  backend_close(x->be);
  if (x->db) db_close(x->db);
  pthread_mutex_destroy(&x->mu);
}

static void banner(const explore *x, const char *note) {
  const fa_problem *p = &x->o->problem;
  const cudrv_device_info *d = backend_cuda_device(x->be);
  if (d)
    fprintf(stderr, "fatune: explore on %s (sm_%d%d), timing %d ms per variant\n", d->name,
            d->cc_major, d->cc_minor, x->o->trial_ms);
  else
    fprintf(stderr, "fatune: explore on the CPU emulator%s%s: exact counts, one batch and one "
                    "head, seq at most %d; not GPU performance\n",
            note[0] ? ": " : "", note, x->emu_seq);
  fprintf(stderr, "fatune: %s dim %d%s, axis %s, target %s; inputs seed %llu\n",
          fa_dtype_name(p->dtype), p->dim, p->causal ? " causal" : "", x->o->axis, x->t->arch,
          x->seed);
}

int explore_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  explore *x = calloc(1, sizeof *x);
  if (!x) return cli_say(1, "out of memory");
  x->o = o, x->t = t, x->g = g;
  x->threads = o->jobs > 0 ? o->jobs : par_cores();
  x->seed = o->seed_given ? o->seed : (unsigned long long)time(NULL);
  x->emu_seq = cli_given(o, "--emu-seq") ? o->emu_seq : EX_EMU_SEQ;
  const double t0 = fa_now_s();
  pthread_mutex_init(&x->mu, NULL);
  for (int a = 0; a < EX_NAXES; a++)
    x->on[a] = !strcmp(o->axis, "all") || !strcmp(o->axis, ex_axes[a].name);
  char note[256], err[512];
  int rc = 1;
  /* Before anything large is allocated: the peak is a high-water mark. */
  if (!strcmp(o->axis, "all") && ex_peak_measure(x) != 0) goto done;
  if (backend_open(o->backend, &x->be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    goto done;
  }
  x->gpu = backend_cuda_device(x->be) != NULL;
  banner(x, note);
  if (setup_variants(x) != 0 || x->n == 0) {
    if (x->n == 0) fprintf(stderr, "fatune: no explored variant fits %s\n", t->arch);
    goto done;
  }
  if (compile_all(x) != 0 || db_setup(x) != 0) goto done;
  ex_print_start(x);
  if (explore_all(x) != 0) goto done;
  ex_print_end(x);
  rc = x->failures || x->mismatches ? 1 : 0;
  fprintf(stderr, "fatune: %zu variants, %d trials not ok, %d counters off the model; %.1f s "
                  "in all, %.1f s of it running them; results in %s\n",
          x->n, x->failures, x->mismatches, fa_now_s() - t0, x->run_s, db_path(x->db));
done:
  explore_free(x);
  free(x);
  return rc;
}
