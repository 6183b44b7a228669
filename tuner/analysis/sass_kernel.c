/*
** sass_kernel.c
** One variant's SASS figures (sass_kernel.h).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "model_launch.h"
#include "sass_kernel.h"

static int config_int(const gen_kernel *k, const char *key) {
  const char *v = gen_config_get(&k->cfg, key);
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  return v && *end == '\0' && x > 0 && x <= 1 << 20 ? (int)x : -1;
}

/* A backward variant whose dQ has a kernel of its own: its main kernel
** (dkdv) does not hold the op's whole work; the model adds the dQ pass's. */
static int dq_apart(const gen_kernel *k) { return model_launch_dq_apart(k); }

int sass_kernel_tile(const gen_kernel *k, const fa_compiled *r, estimate_tile *t) {
  int bm = config_int(k, "block_m"), bn = config_int(k, "block_n"), dim = config_int(k, "dim");
  /* V's head dim: the config's dim_v where it has one (absent: dim). */
  const int dv = gen_config_get(&k->cfg, "dim_v") ? config_int(k, "dim_v") : dim;
  t->warps = k->threads / 32;
  t->registers = r->registers;
  t->smem_bytes = k->smem_bytes + r->smem_static_bytes;
  if (bm < 0 || bn < 0 || dim < 0 || dv < 0 || t->warps < 1) return -1;
  /* The forward pass: S (dim) and P V (dim_v); the backward pass's dkdv: S
  ** and dK (dim), dP and dV (dim_v), and with dq=atomic dQ's share (dim;
  ** the op's 2.5 times the forward's FLOPs when the dims are one). */
  const double per_pair = k->op != FA_OP_BWD ? 2.0 * (dim + dv)
                          : 2.0 * (2.0 * dim + 2.0 * dv + (dq_apart(k) ? 0 : dim));
  t->flops_per_warp = per_pair * bm * bn / t->warps;
  return 0;
}

/* The dQ pass walks K/V blocks as the forward pass does: the model's
** forward problem, with the FLOPs of its three products per step. */
static model_problem dq_problem(const model_problem *p) {
  model_problem q = *p;
  q.backward = 0;
  return q;
}

int sass_dq_pass_build(const model_gpu *m, const char *text, const gen_kernel *k,
                       const fa_compiled *r, const model_problem *p, sass_dq_pass *d, char *err,
                       size_t errlen) {
  memset(d, 0, sizeof *d);
  const char *entry;
  if (model_launch_dq_pass(k, r, &d->l, &entry) != 0)
    return snprintf(err, errlen, "%s: no dQ launch with a tile and registers", k->name), -1;
  sass_counts c;
  const double flops = 6.0 * d->l.block_m * d->l.block_n * p->dim / (d->l.threads / 32);
  if (sass_analyse_trace(text, entry, flops, &c, &d->trace, err, errlen) != 0) return -1;
  if (!c.found) {
    sass_trace_free(&d->trace);
    return snprintf(err, errlen, "no main loop found in %s", entry), -1;
  }
  const model_problem q = dq_problem(p);
  if (model_build(m, &d->trace, &d->l, &q, &d->b, err, errlen) != 0) {
    sass_trace_free(&d->trace);
    return -1;
  }
  d->built = 1;
  return 0;
}

int sass_dq_pass_time(const model_gpu *m, const sass_dq_pass *d, const model_problem *p,
                      double *us, char *err, size_t errlen) {
  const model_problem q = dq_problem(p);
  model_result r;
  if (!d->built || model_predict(m, &d->b, &d->l, &q, 0, &r, err, errlen) != 0) return -1;
  *us = r.time_us;
  model_result_free(&r);
  return 0;
}

void sass_dq_pass_free(sass_dq_pass *d) {
  if (d->built) model_built_free(&d->b), sass_trace_free(&d->trace);
  d->built = 0;
}

/* The timing model's prediction for problem p, into out (modelled 0 when
** it cannot: no tile in the config, no machine for the GPU, a deadlock). */
static void model_figures(const gen_kernel *k, const fa_compiled *r, const estimate_gpu *gpu,
                          const fa_problem *p, const char *text, const sass_trace *t,
                          sass_figures *out) {
  model_gpu machine;
  const model_gpu *m = gpu && model_gpu_of(gpu, &machine) == 0 ? &machine : NULL;
  model_launch l;
  if (!m || !p || model_launch_of_variant(k, r, &l) != 0) return;
  model_problem mp = {.batch = p->batch, .heads = p->heads, .seq_q = p->seq_q,
                      .seq_k = p->seq_k > 0 ? p->seq_k : p->seq_q, .dim = p->dim,
                      .causal = p->causal, .elem_bytes = fa_dtype_size(p->dtype),
                      .backward = p->op == FA_OP_BWD, .mod = p->mod, .mod_data = p->mod_data,
                      .decode = p->op == FA_OP_DECODE, .kv_group = p->kv_group,
                      .kv_lens = p->kv_lens,
                      .q_lens = p->varlen && p->q_lens && p->kv_lens ? p->q_lens : NULL};
  model_built b;
  model_result res;
  char err[256];
  if (model_build(m, t, &l, &mp, &b, err, sizeof err) != 0) return;
  if (model_predict(m, &b, &l, &mp, 0, &res, err, sizeof err) == 0) {
    double dq_us = 0;
    sass_dq_pass d;
    const int ok = !dq_apart(k) || (sass_dq_pass_build(m, text, k, r, &mp, &d, err, sizeof err) == 0 &&
                                    sass_dq_pass_time(m, &d, &mp, &dq_us, err, sizeof err) == 0);
    if (dq_apart(k)) sass_dq_pass_free(&d);
    if (ok) {
      out->modelled = 1;
      out->model_us = res.time_us + dq_us;
      out->model_tflops = res.flops / out->model_us / 1e6;
      snprintf(out->model_bound, sizeof out->model_bound, "%s", res.bound);
    }
    model_result_free(&res);
  }
  model_built_free(&b);
}

void sass_kernel_figures(const char *nvdisasm, const gen_kernel *k, const fa_compiled *r,
                         const estimate_gpu *gpu, const fa_problem *p, sass_figures *out) {
  memset(out, 0, sizeof *out);
  out->tma_tflops = NAN;
  char *text;
  if (!r->ok || !r->cubin) {
    snprintf(out->error, sizeof out->error, "not compiled");
    return;
  }
  if (sass_disassemble(nvdisasm, r->cubin, r->cubin_size, &text, out->error,
                       sizeof out->error) != 0)
    return;
  estimate_tile t;
  const int apart = dq_apart(k);
  int tile = sass_kernel_tile(k, r, &t) == 0;
  sass_trace trace;
  if (sass_analyse_trace(text, k->entry, tile ? t.flops_per_warp : 0, &out->c, &trace, out->error,
                         sizeof out->error) == 0) {
    out->analysed = 1;
    if (!out->c.found) snprintf(out->error, sizeof out->error, "no main loop found");
    /* The static estimate sees one kernel: not dq=separate's two. */
    out->estimated = gpu && tile && !apart && estimate_compute(gpu, &out->c, &t, &out->e) == 0;
    estimate_wg_tile wt;
    estimate_wg w;
    if (gpu && out->c.found &&
        estimate_wg_tile_of(&k->cfg, k->threads, r->registers, t.smem_bytes, &wt) == 0) {
      out->estimated = estimate_wg_compute(gpu, &out->c, &wt, &w) == 0;
      out->e = w.e;
      if (out->estimated && w.e.ctas_per_sm > 0) out->tma_tflops = w.tma_tflops;
    }
    if (out->c.found) model_figures(k, r, gpu, p, text, &trace, out);
    sass_trace_free(&trace);
  }
  free(text);
}

static void member_long(FILE *f, const char *name, int have, long v) {
  if (have) fprintf(f, ", \"%s\": %ld", name, v);
  else fprintf(f, ", \"%s\": null", name);
}

void sass_kernel_json(FILE *f, const sass_figures *s) {
  const sass_counts *c = &s->c;
  int h = s->analysed && c->found;
  member_long(f, "loop_instructions", h, c->loop_instructions);
  member_long(f, "loop_hmma", h, c->loop_hmma);
  member_long(f, "loop_mufu", h, c->loop_mufu);
  member_long(f, "loop_ldsm", h, c->loop_ldsm);
  member_long(f, "loop_lds", h, c->loop_lds);
  member_long(f, "loop_ldgsts", h, c->loop_ldgsts);
  member_long(f, "loop_bar", h, c->loop_bar);
  member_long(f, "loop_shfl", h, c->loop_shfl);
  member_long(f, "loop_local", h, c->loop_local);
  member_long(f, "loop_int", h, c->loop_int);
  member_long(f, "loop_utmaldg", h, c->loop_utmaldg);
  member_long(f, "loop_syncs", h, c->loop_syncs);
  member_long(f, "loop_warpgroup", h, c->loop_warpgroup);
  member_long(f, "producer_instructions", h && c->producer_found, c->producer_instructions);
  member_long(f, "producer_utmaldg", h && c->producer_found, c->producer_utmaldg);
  fprintf(f, ", \"non_mma_per_mma\": ");
  if (h && c->loop_hmma) json_number(f, c->non_mma_per_mma);
  else fputs("null", f);
  member_long(f, "inner_loops", h, c->inner_loops);
  member_long(f, "inner_trips", h && c->inner_loops, c->inner_trips);
  member_long(f, "masked_left_out", h, c->masked_left_out);
  member_long(f, "ctas_per_sm", s->estimated, s->e.ctas_per_sm);
  fprintf(f, ", \"bound\": ");
  if (s->estimated && s->e.ctas_per_sm) json_string(f, s->e.bound);
  else fputs("null", f);
  fprintf(f, ", \"est_tflops\": ");
  if (s->estimated && s->e.ctas_per_sm) json_number(f, s->e.tflops);
  else fputs("null", f);
  fprintf(f, ", \"model_tflops\": ");
  if (s->modelled) json_number(f, s->model_tflops);
  else fputs("null", f);
  fprintf(f, ", \"model_bound\": ");
  if (s->modelled) json_string(f, s->model_bound);
  else fputs("null", f);
}

void sass_kernel_members(FILE *f, const void *figures) { sass_kernel_json(f, figures); }
