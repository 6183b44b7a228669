/*
** run.c
** fatune run: one variant on tensors from .npy files, the output back to a
** .npy file. Shapes (N, D) or (B, H, N, D); K and V may have another N
** than Q. Any file or shape that does not fit is one line and exit 2.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "npy.h"
#include "run.h"

/* --op bwd: the kernel's problem is the backward pass's; fwd and its
** build run the forward pass first when O and lse are not given. */
typedef struct run_state {
  npy_array q, k, v, dout, o_in, lse_in;
  fa_problem p;
  gen_kernel kern, fwd;
  fa_backend *be;
  fa_build build, fwd_build;
  attn_inputs in;
  void *qt, *kt, *vt, *o, *lse;
  void *dot, *grad[3];   /* bwd: dO in the kernel's dtype; dq, dk, dv */
} run_state;

static void shape_text(const npy_array *a, char *buf, size_t n) {
  size_t used = 0;
  for (int i = 0; i < a->ndim && used < n; i++) {
    int k = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "(", a->shape[i]);
    if (k < 0) break;
    used += (size_t)k;
  }
  if (used < n) snprintf(buf + used, n - used, "%s)", a->ndim == 1 ? "," : "");
}

/* (N, D) is (1, 1, N, D). Fills batch, heads, seq, dim of one tensor. */
static int dims4(const npy_array *a, const char *path, long long d[4], char *err, size_t n) {
  char s[96];
  shape_text(a, s, sizeof s);
  if (a->ndim != 2 && a->ndim != 4) {
    snprintf(err, n, "%s: shape %s: want (N, D) or (B, H, N, D)", path, s);
    return -1;
  }
  d[0] = a->ndim == 4 ? a->shape[0] : 1;
  d[1] = a->ndim == 4 ? a->shape[1] : 1;
  d[2] = a->shape[a->ndim - 2];
  d[3] = a->shape[a->ndim - 1];
  if (d[0] > 65535 || d[1] > 65535 || d[2] > (1 << 24) || d[3] > FA_DIM_MAX) {
    snprintf(err, n, "%s: shape %s is too large (batch and heads up to 65535, N up to 2^24, "
             "D up to %d)", path, s, FA_DIM_MAX);
    return -1;
  }
  return 0;
}

static int read_inputs(run_state *r, const cli_opts *o, char *err, size_t n) {
  if (npy_read(o->q, &r->q, err, n) || npy_read(o->k, &r->k, err, n) ||
      npy_read(o->v, &r->v, err, n))
    return -1;
  long long q[4], k[4], v[4];
  if (dims4(&r->q, o->q, q, err, n) || dims4(&r->k, o->k, k, err, n) ||
      dims4(&r->v, o->v, v, err, n))
    return -1;
  char a[96], b[96], c[96];
  shape_text(&r->q, a, sizeof a), shape_text(&r->k, b, sizeof b), shape_text(&r->v, c, sizeof c);
  if (r->q.ndim != r->k.ndim || r->k.ndim != r->v.ndim || memcmp(k, v, 3 * sizeof k[0]) ||
      q[0] != k[0] || q[1] != k[1] || q[3] != k[3]) {
    snprintf(err, n, "shapes do not match: q %s, k %s, v %s (k and v alike but for V's head "
             "dim D, which may differ; q as k but for N)", a, b, c);
    return -1;
  }
  r->p.batch = (int)q[0], r->p.heads = (int)q[1];
  r->p.seq_q = (int)q[2], r->p.seq_k = (int)k[2], r->p.dim = (int)q[3];
  r->p.dim_v = v[3] == q[3] ? 0 : (int)v[3];
  return 0;
}

/* O's shape: Q's, with V's head dim. */
static void o_shape(const run_state *r, long long shape[4]) {
  memcpy(shape, r->q.shape, sizeof r->q.shape);
  shape[r->q.ndim - 1] = r->v.shape[r->v.ndim - 1];
}

/* Whether array a is shaped as O. */
static int shaped_as_o(const run_state *r, const npy_array *a) {
  long long want[4];
  o_shape(r, want);
  return a->ndim == r->q.ndim && !memcmp(a->shape, want, (size_t)a->ndim * sizeof want[0]);
}

/* --op bwd's further inputs: dO (and O) shaped as O (Q's shape, with V's
** head dim); lse (N,) or (B, H, N) as run writes it. */
static int read_bwd_inputs(run_state *r, const cli_opts *o, char *err, size_t n) {
  char a[96], b[96];
  shape_text(&r->q, a, sizeof a);
  if (npy_read(o->dout, &r->dout, err, n) != 0) return -1;
  shape_text(&r->dout, b, sizeof b);
  if (!shaped_as_o(r, &r->dout)) {
    snprintf(err, n, "%s: shape %s, and q's is %s: dO is shaped as Q, with V's head dim",
             o->dout, b, a);
    return -1;
  }
  if (!o->o_in) return 0;
  if (npy_read(o->o_in, &r->o_in, err, n) != 0 || npy_read(o->lse, &r->lse_in, err, n) != 0)
    return -1;
  shape_text(&r->o_in, b, sizeof b);
  if (!shaped_as_o(r, &r->o_in)) {
    snprintf(err, n, "%s: shape %s, and q's is %s: O is shaped as Q, with V's head dim",
             o->o_in, b, a);
    return -1;
  }
  const long long rows[3] = {r->p.batch, r->p.heads, r->p.seq_q};
  const int lnd = r->q.ndim == 4 ? 3 : 1;
  shape_text(&r->lse_in, b, sizeof b);
  if (r->lse_in.ndim != lnd || memcmp(r->lse_in.shape, lnd == 3 ? rows : &rows[2],
                                       (size_t)lnd * sizeof rows[0])) {
    snprintf(err, n, "%s: shape %s: the logsumexp of q %s is (%s%lld%s)", o->lse, b, a,
             lnd == 3 ? "B, H, " : "", (long long)r->p.seq_q, lnd == 3 ? "" : ",");
    return -1;
  }
  return 0;
}

static fa_dtype dtype_of(npy_dtype t) {
  return t == NPY_F16 ? FA_FP16 : t == NPY_BF16 ? FA_BF16 : t == NPY_E4M3 ? FA_E4M3
         : t == NPY_F32 ? FA_FP32 : FA_FP64;
}

/* The kernel's dtype is the inputs': a --dtype that differs from the one
** they share is refused; inputs of several dtypes need --dtype, which says
** what they are converted to. A --variant's name spells its dtype. */
static int pick_dtype(run_state *r, const cli_opts *o, char *err, size_t n) {
  const npy_dtype t = r->q.dtype;
  const int same = r->k.dtype == t && r->v.dtype == t;
  const int given = cli_given(o, "--dtype");
  if (!same && !given && !o->variant) {
    snprintf(err, n, "the inputs differ in dtype (q %s, k %s, v %s): give --dtype to say which "
             "to run", npy_dtype_name(t), npy_dtype_name(r->k.dtype), npy_dtype_name(r->v.dtype));
    return -1;
  }
  if (same && given && dtype_of(t) != o->problem.dtype) {
    snprintf(err, n, "--dtype %s, but the inputs are %s (%s): drop --dtype or convert them",
             fa_dtype_name(o->problem.dtype), npy_dtype_name(t), fa_dtype_name(dtype_of(t)));
    return -1;
  }
  r->p.dtype = given || !same ? o->problem.dtype : dtype_of(t);
  /* fp8 is FlashAttention-3's forward pass alone. */
  if (r->p.dtype == FA_E4M3 && r->p.op != FA_OP_FWD) {
    snprintf(err, n, "e4m3 (fp8) has no %s: fatune computes fp8's forward pass alone (give "
             "fp16, bf16, fp32 or fp64 inputs, or --dtype)", r->p.op == FA_OP_BWD
             ? "backward pass" : "decoding");
    return -1;
  }
  return 0;
}

static void *convert(const npy_array *a, fa_dtype t) {
  void *out = malloc(a->count * (size_t)fa_dtype_size(t));
  if (!out) return NULL;
  for (size_t i = 0; i < a->count; i++) fa_elem_put(out, t, i, a->data[i]);
  return out;
}

static int write_outputs(run_state *r, const cli_opts *o, char *err, size_t n) {
  const fa_problem *p = &r->p;
  long long oshape[4], lshape[3];
  o_shape(r, oshape);
  const size_t rows = (size_t)p->batch * p->heads * p->seq_q;
  /* O in the dtype the kernel wrote it in, bits as they are: bf16 as bf16
  ** .npy ('<V2'), e4m3's O too. */
  const fa_dtype od = fa_out_dtype(p->dtype);
  int rc = od == FA_FP64   ? npy_write_f64(o->out, r->o, r->q.ndim, oshape, err, n)
           : od == FA_FP32 ? npy_write_f32(o->out, r->o, r->q.ndim, oshape, err, n)
           : npy_write_16(o->out, od == FA_FP16 ? NPY_F16 : NPY_BF16, r->o, r->q.ndim,
                          oshape, err, n);
  if (rc != 0 || !o->lse) return rc;
  float *l = malloc(rows * sizeof *l);
  if (!l) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < rows; i++)
    l[i] = p->dtype == FA_FP64 ? (float)((double *)r->lse)[i] : ((float *)r->lse)[i];
  lshape[0] = p->batch, lshape[1] = p->heads, lshape[2] = p->seq_q;
  rc = r->q.ndim == 4 ? npy_write_f32(o->lse, l, 3, lshape, err, n)
                      : npy_write_f32(o->lse, l, 1, &lshape[2], err, n);
  free(l);
  return rc;
}

/* One tensor in the kernel's dtype to path, shaped as `like`. */
static int write_tensor(const char *path, const void *x, fa_dtype t, const npy_array *like,
                        char *err, size_t n) {
  long long shape[4];
  memcpy(shape, like->shape, sizeof shape);
  return t == FA_FP64   ? npy_write_f64(path, x, like->ndim, shape, err, n)
         : t == FA_FP32 ? npy_write_f32(path, x, like->ndim, shape, err, n)
         : npy_write_16(path, t == FA_FP16 ? NPY_F16 : NPY_BF16, x, like->ndim, shape, err, n);
}

/* dq shaped as q, dk as k, dv as v. */
static int write_grads(run_state *r, const cli_opts *o, char *err, size_t n) {
  const char *const path[3] = {o->dq, o->dk, o->dv};
  const npy_array *const like[3] = {&r->q, &r->k, &r->v};
  for (int i = 0; i < 3; i++)
    if (write_tensor(path[i], r->grad[i], r->p.dtype, like[i], err, n) != 0) return -1;
  return 0;
}

static void run_free(run_state *r) {
  npy_free(&r->q), npy_free(&r->k), npy_free(&r->v);
  npy_free(&r->dout), npy_free(&r->o_in), npy_free(&r->lse_in);
  if (r->be) {
    attn_inputs_free(r->be, &r->in);
    backend_build_free(r->be, &r->build);
    backend_build_free(r->be, &r->fwd_build);
    backend_close(r->be);
  }
  gen_kernel_free(&r->kern);
  gen_kernel_free(&r->fwd);
  free(r->qt), free(r->kt), free(r->vt), free(r->o), free(r->lse);
  free(r->dot), free(r->grad[0]), free(r->grad[1]), free(r->grad[2]);
}

/* What a run did, on stderr: the kernel, the backend, its counts. */
static void say_ran(const run_state *r, const cli_opts *o, const fa_counters *c, double ms) {
  fprintf(stderr, "fatune: ran %s on %s (%s schedule) in %.1f ms: global %llu bytes read, "
                  "%llu written; %llu exponentials, %llu barriers\n",
          r->kern.name, backend_name(r->be), backend_schedule_name(o->schedule), ms,
          c->gmem_read, c->gmem_written, c->exp2, c->barriers);
}

/* The backward pass, after the forward pass when O and lse are not given
** (r->o, r->lse then the forward kernel's): dq, dk, dv into r->grad. */
static int execute_bwd(run_state *r, const cli_opts *o, const fa_run_opts *ro, char *err,
                       size_t n) {
  const fa_problem *p = &r->p;
  const fa_dtype lt = p->dtype == FA_FP64 ? FA_FP64 : FA_FP32;
  const size_t rows = (size_t)p->batch * p->heads * p->seq_q;
  r->dot = convert(&r->dout, p->dtype);
  size_t bytes[ATTN_MAX_OUTPUTS];
  attn_outputs(p, bytes);
  for (int i = 0; i < 3; i++) r->grad[i] = malloc(bytes[i]);
  if (!r->dot || !r->grad[0] || !r->grad[1] || !r->grad[2]) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  if (o->o_in) {
    for (size_t i = 0; i < r->o_in.count; i++) fa_elem_put(r->o, p->dtype, i, r->o_in.data[i]);
    for (size_t i = 0; i < rows; i++) fa_elem_put(r->lse, lt, i, r->lse_in.data[i]);
  } else {
    fa_problem fp = *p;
    fp.op = FA_OP_FWD;
    if (attn_run(r->be, r->fwd_build.prog, &r->fwd, &fp, &r->in, ro, r->o, r->lse, NULL, NULL,
                 err, n))
      return -1;
    fprintf(stderr, "fatune: ran the forward pass with %s\n", r->fwd.name);
  }
  fa_counters c = {0};
  double ms = 0;
  if (attn_bwd_inputs_upload(r->be, p, r->o, r->lse, r->dot, &r->in, err, n) != 0 ||
      attn_run_op(r->be, r->build.prog, &r->kern, p, &r->in, ro, r->grad, &c, &ms, err, n) != 0)
    return -1;
  say_ran(r, o, &c, ms);
  return 0;
}

/* "<name> does not compile: <the log's first line>" unless b compiled. */
static int compiled(const gen_kernel *k, const fa_build *b, char *err, size_t n) {
  if (b->prog) return 0;
  const char *log = b->log ? b->log : "?";
  const char *nl = strchr(log, '\n');
  snprintf(err, n, "%s does not compile: %.*s", k->name, nl ? (int)(nl - log) : (int)strlen(log),
           log);
  return -1;
}

/* Compile, upload, launch, download: failures here are the work's, exit 1. */
static int execute(run_state *r, const cli_opts *o, char *err, size_t n) {
  char note[256];
  const int fwd_first = r->p.op == FA_OP_BWD && !o->o_in;
  const gen_kernel *kp[2] = {&r->kern, &r->fwd};
  fa_build builds[2];
  if (backend_open(o->backend, &r->be, note, sizeof note, err, n) != 0) return -1;
  if (note[0]) fprintf(stderr, "fatune: %s; running on the CPU emulator\n", note);
  if (backend_compile(r->be, kp, fwd_first ? 2 : 1, o->jobs, builds, err, n) != 0) return -1;
  r->build = builds[0];
  if (fwd_first) r->fwd_build = builds[1];
  if (compiled(&r->kern, &r->build, err, n) != 0 ||
      (fwd_first && compiled(&r->fwd, &r->fwd_build, err, n) != 0))
    return -1;
  const fa_problem *p = &r->p;
  /* O's elements are its own dtype's: bf16 beside e4m3 inputs. */
  const size_t oes = (size_t)fa_dtype_size(fa_out_dtype(p->dtype));
  const size_t rows = (size_t)p->batch * p->heads * p->seq_q;
  r->qt = convert(&r->q, p->dtype), r->kt = convert(&r->k, p->dtype);
  r->vt = convert(&r->v, p->dtype);
  r->o = malloc(rows * (size_t)fa_problem_dim_v(p) * oes), r->lse = malloc(rows * (size_t)fa_lse_size(p->dtype));
  if (!r->qt || !r->kt || !r->vt || !r->o || !r->lse) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  if (attn_inputs_upload(r->be, p, r->qt, r->kt, r->vt, &r->in, err, n) != 0) return -1;
  fa_run_opts ro = {.schedule = o->schedule, .seed = o->seed, .threads = o->jobs > 0 ? o->jobs : 1,
                    .smem_fill = 0xFF};
  fa_counters c = {0};
  double ms = 0;
  if (p->op == FA_OP_BWD) return execute_bwd(r, o, &ro, err, n);
  if (attn_run(r->be, r->build.prog, &r->kern, p, &r->in, &ro, r->o, r->lse, &c, &ms, err, n))
    return -1;
  say_ran(r, o, &c, ms);
  return 0;
}

/* Outputs go only to new or regular files, said before any work. */
static int check_destinations(const cli_opts *o, char *err, size_t n) {
  if (o->problem.op == FA_OP_BWD)
    return npy_check_destination(o->dq, err, n) || npy_check_destination(o->dk, err, n) ||
           npy_check_destination(o->dv, err, n) ? -1 : 0;
  return npy_check_destination(o->out, err, n) != 0 ||
         (o->lse && npy_check_destination(o->lse, err, n) != 0) ? -1 : 0;
}

int run_main(gen_state *g, const cli_opts *o, const gen_target *t) {
  run_state r;
  memset(&r, 0, sizeof r);
  char err[600];
  int rc = 0;
  r.p.op = o->problem.op;
  if (read_inputs(&r, o, err, sizeof err) != 0 ||
      (r.p.op == FA_OP_BWD && read_bwd_inputs(&r, o, err, sizeof err) != 0) ||
      check_destinations(o, err, sizeof err) != 0) {
    rc = cli_say(EXIT_BAD_INPUT, err);
    goto done;
  }
  if (pick_dtype(&r, o, err, sizeof err) != 0) {
    rc = cli_say(EXIT_BAD_INPUT, err);
    goto done;
  }
  r.p.causal = o->problem.causal, r.p.scale = o->problem.scale, r.p.mod = o->problem.mod;
  if (o->variant ? gen_render_name(g, o->variant, t, &r.kern)
                 : gen_render_config(g, o->config, &r.p, t, &r.kern)) {
    /* fp8 needs the Hopper family: say the flag that gives it. */
    if (r.p.dtype == FA_E4M3 && strcmp(t->arch, "sm_90a")) {
      snprintf(err, sizeof err, "e4m3 (fp8) runs on sm_90a alone (the wg family), not %s: give "
               "--arch sm_90a (%s)", t->arch, gen_errmsg(g));
      rc = cli_say(EXIT_BAD_INPUT, err);
    } else {
      rc = cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
    }
    goto done;
  }
  if (r.kern.note[0]) cli_say(0, r.kern.note);
  if (r.p.op == FA_OP_BWD && !o->o_in) {
    fa_problem fp = r.p;
    fp.op = FA_OP_FWD;
    if (gen_render_config(g, "", &fp, t, &r.fwd)) {
      rc = cli_say(EXIT_BAD_INPUT, gen_errmsg(g));
      goto done;
    }
  }
  /* A variant named on the command line must be one for these inputs. */
  if (!gen_kernel_fits(&r.kern, &r.p, err, sizeof err)) {
    rc = cli_say(EXIT_BAD_INPUT, err);
    goto done;
  }
  if (execute(&r, o, err, sizeof err) != 0 ||
      (r.p.op == FA_OP_BWD ? write_grads(&r, o, err, sizeof err)
                           : write_outputs(&r, o, err, sizeof err)) != 0) {
    rc = cli_say(1, err);
    goto done;
  }
  if (r.p.op == FA_OP_BWD) fprintf(stderr, "fatune: wrote %s, %s and %s\n", o->dq, o->dk, o->dv);
  else fprintf(stderr, "fatune: wrote %s%s%s\n", o->out, o->lse ? " and " : "", o->lse ? o->lse : "");
done:
  run_free(&r);
  return rc;
}
