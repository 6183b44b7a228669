/*
** attn_run.c
** Buffers, poison, launch and read-back for one attention run.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_run.h"

static size_t elems(const fa_problem *p, int seq, int dim) {
  return (size_t)p->batch * (size_t)p->heads * (size_t)seq * (size_t)dim;
}

int attn_inputs_upload(fa_backend *be, const fa_problem *p, const void *q, const void *k,
                       const void *v, attn_inputs *in, char *err, size_t errlen) {
  const size_t es = (size_t)fa_dtype_size(p->dtype);
  const size_t qb = elems(p, p->seq_q, p->dim) * es, kb = elems(p, p->seq_k, p->dim) * es;
  const size_t vb = elems(p, p->seq_k, fa_problem_dim_v(p)) * es;
  memset(in, 0, sizeof *in);
  if (backend_alloc(be, qb, &in->q, err, errlen) || backend_alloc(be, kb, &in->k, err, errlen) ||
      backend_alloc(be, vb, &in->v, err, errlen) ||
      backend_upload(be, in->q, q, qb, err, errlen) ||
      backend_upload(be, in->k, k, kb, err, errlen) ||
      backend_upload(be, in->v, v, vb, err, errlen)) {
    attn_inputs_free(be, in);
    return -1;
  }
  int rc = attn_mod_upload(be, p, !p->varlen && !p->paged, in, err, errlen);
  if (rc == 0 && p->descale) {
    size_t cnt[3];
    fa_problem_descales(p, cnt);
    const size_t db = (cnt[0] + cnt[1] + cnt[2]) * sizeof(float);
    rc = backend_alloc(be, db, &in->descale, err, errlen) ||
         backend_upload(be, in->descale, p->descale, db, err, errlen) ? -1 : 0;
  }
  if (rc != 0) attn_inputs_free(be, in);
  return rc;
}

int attn_mod_upload(fa_backend *be, const fa_problem *p, int dense, attn_inputs *in, char *err,
                    size_t errlen) {
  const fa_mod *m = p->mod;
  if (!m || m->ntensors == 0) return 0;
  const fa_mod_data *d = p->mod_data;
  if (!d) {
    snprintf(err, errlen, "modification %s captures %d tensor(s) (%s%s) and none were given",
             m->label, m->ntensors, m->tensor_name[0], m->ntensors > 1 ? ", ..." : "");
    return FA_EINVAL;
  }
  for (int i = 0; i < m->ntensors; i++) {
    const size_t bytes = (size_t)d->len[i] * 4;   /* int32 or float32 */
    in->mod_len[i] = (int)d->len[i];
    if (bytes && (backend_alloc(be, bytes, &in->mod_tensor[i], err, errlen) ||
                  backend_upload(be, in->mod_tensor[i], d->ptr[i], bytes, err, errlen)))
      return -1;
  }
  if (!dense || !fa_mod_mask_loads(m)) return 0;
  return attn_block_mask_upload(be, p, &in->block_mask, &in->bm, err, errlen);
}

int attn_block_mask_upload(fa_backend *be, const fa_problem *p, void **mask_out,
                           fa_mod_mask_dims *dims, char *err, size_t errlen) {
  *mask_out = NULL;
  *dims = fa_mod_mask_shape(p->mod, p->batch, p->heads, p->seq_q, p->seq_k);
  const size_t n = (size_t)dims->bm_b * dims->bm_h * dims->rows * dims->cols;
  int *mask = malloc(n * sizeof *mask);
  if (!mask) {
    snprintf(err, errlen, "out of memory for a block mask of %zu blocks", n);
    return FA_ENOMEM;
  }
  fa_mod_block_mask(p->mod, p->mod_data, p->seq_q, p->seq_k, p->heads, *dims, mask);
  int rc = backend_alloc(be, n * sizeof *mask, mask_out, err, errlen);
  if (rc == 0) rc = backend_upload(be, *mask_out, mask, n * sizeof *mask, err, errlen);
  free(mask);
  if (rc != 0) {
    backend_free(be, *mask_out);
    *mask_out = NULL;
  }
  return rc;
}

void attn_block_mask_params(const void *mask, fa_mod_mask_dims bm, fa_params *a) {
  a->block_mask = mask;
  a->bm_rows = bm.rows, a->bm_cols = bm.cols;
  a->bm_sh = bm.bm_h > 1 ? (long long)bm.rows * bm.cols : 0;
  a->bm_sb = bm.bm_b > 1 ? (long long)bm.bm_h * bm.rows * bm.cols : 0;
}

void attn_mod_params(const attn_inputs *in, fa_params *a) {
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++)
    a->mod_tensor[i] = in->mod_tensor[i], a->mod_len[i] = in->mod_len[i];
  if (in->block_mask) attn_block_mask_params(in->block_mask, in->bm, a);
}

int attn_bwd_inputs_upload(fa_backend *be, const fa_problem *p, const void *o,
                           const void *lse, const void *dout, attn_inputs *in, char *err,
                           size_t errlen) {
  const size_t rows = elems(p, p->seq_q, 1);
  const size_t ob = rows * (size_t)fa_problem_dim_v(p) * (size_t)fa_dtype_size(p->dtype);
  const size_t lb = rows * (size_t)fa_lse_size(p->dtype);
  if (backend_alloc(be, ob, &in->o, err, errlen) || backend_alloc(be, lb, &in->lse, err, errlen) ||
      backend_alloc(be, ob, &in->dout, err, errlen) ||
      backend_upload(be, in->o, o, ob, err, errlen) ||
      backend_upload(be, in->lse, lse, lb, err, errlen) ||
      backend_upload(be, in->dout, dout, ob, err, errlen))
    return -1;
  return 0;
}

static fa_layout pool_layout(const fa_problem *p, int dim) {
  const long long sn = (long long)fa_problem_kv_heads(p) * dim;
  const fa_layout l = {sn * fa_problem_page(p), dim, sn};
  return l;
}

fa_layout attn_pool_layout(const fa_problem *p) { return pool_layout(p, p->dim); }
fa_layout attn_pool_layout_v(const fa_problem *p) { return pool_layout(p, fa_problem_dim_v(p)); }

/* The lengths and the table entries the sequences' keys reach, against
** the problem and the pool. */
static int decode_check(const fa_problem *p, int num_pages, const int *table, char *err,
                        size_t errlen) {
  const int page = fa_problem_page(p), pps = fa_problem_pages_per_seq(p);
  if (p->heads % fa_problem_group(p)) {
    snprintf(err, errlen, "%d heads do not divide into groups of %d", p->heads,
             fa_problem_group(p));
    return FA_EINVAL;
  }
  for (int b = 0; b < p->batch; b++) {
    const int len = fa_problem_kv_len(p, b);
    if (len < 0 || len > p->seq_k) {
      snprintf(err, errlen, "sequence %d has %d keys, outside 0..%d (the cache's capacity)", b,
               len, p->seq_k);
      return FA_EINVAL;
    }
    for (int j = 0; j < (len + page - 1) / page; j++) {
      const int pg = table[(long long)b * pps + j];
      if (pg < 0 || pg >= num_pages) {
        snprintf(err, errlen, "block table [%d, %d] is page %d, outside the pool's 0..%d", b, j,
                 pg, num_pages - 1);
        return FA_EINVAL;
      }
    }
  }
  return 0;
}

int attn_decode_inputs_upload(fa_backend *be, const fa_problem *p, const void *q,
                              const void *k_pool, const void *v_pool, int num_pages,
                              const int *table, attn_inputs *in, char *err, size_t errlen) {
  memset(in, 0, sizeof *in);
  if (num_pages < 1) {
    snprintf(err, errlen, "a pool of %d pages", num_pages);
    return FA_EINVAL;
  }
  int rc = decode_check(p, num_pages, table, err, errlen);
  if (rc != 0) return rc;
  const size_t es = (size_t)fa_dtype_size(p->dtype);
  const size_t qb = elems(p, p->seq_q, p->dim) * es;
  const size_t rows = (size_t)num_pages * (size_t)fa_problem_page(p) * (size_t)fa_problem_kv_heads(p);
  const size_t kb = rows * (size_t)p->dim * es, vb = rows * (size_t)fa_problem_dim_v(p) * es;
  const size_t tb = (size_t)p->batch * (size_t)fa_problem_pages_per_seq(p) * sizeof(int);
  const size_t lb = (size_t)p->batch * sizeof(int);
  int *lens = malloc(lb);
  if (!lens) {
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  for (int b = 0; b < p->batch; b++) lens[b] = fa_problem_kv_len(p, b);
  in->num_pages = num_pages;
  if (backend_alloc(be, qb, &in->q, err, errlen) || backend_alloc(be, kb, &in->k, err, errlen) ||
      backend_alloc(be, vb, &in->v, err, errlen) || backend_alloc(be, tb, &in->table, err, errlen) ||
      backend_alloc(be, lb, &in->lens, err, errlen) ||
      backend_upload(be, in->q, q, qb, err, errlen) ||
      backend_upload(be, in->k, k_pool, kb, err, errlen) ||
      backend_upload(be, in->v, v_pool, vb, err, errlen) ||
      backend_upload(be, in->table, table, tb, err, errlen) ||
      backend_upload(be, in->lens, lens, lb, err, errlen)) {
    attn_inputs_free(be, in);
    rc = -1;
  }
  free(lens);
  if (rc == 0 && (rc = attn_mod_upload(be, p, 0, in, err, errlen)) != 0) attn_inputs_free(be, in);
  return rc;
}

void attn_inputs_free(fa_backend *be, attn_inputs *in) {
  void **const bufs[] = {&in->q, &in->k, &in->v, &in->o, &in->lse, &in->dout, &in->table,
                         &in->lens, &in->mod_tensor[0], &in->mod_tensor[1], &in->mod_tensor[2],
                         &in->mod_tensor[3], &in->block_mask, &in->descale};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    if (*bufs[i]) backend_free(be, *bufs[i]);
    *bufs[i] = NULL;
  }
}

int attn_outputs(const fa_problem *p, size_t bytes[ATTN_MAX_OUTPUTS]) {
  const size_t es = (size_t)fa_dtype_size(p->dtype), D = (size_t)p->dim;
  const size_t DV = (size_t)fa_problem_dim_v(p);
  const size_t rq = elems(p, p->seq_q, 1), rk = elems(p, p->seq_k, 1);
  if (p->op == FA_OP_BWD) {
    bytes[0] = rq * D * es, bytes[1] = rk * D * es, bytes[2] = rk * DV * es;
    return 3;
  }
  bytes[0] = rq * DV * (size_t)fa_dtype_size(fa_out_dtype(p->dtype));
  bytes[1] = rq * (size_t)fa_lse_size(p->dtype);
  return 2;
}

const char *attn_output_name(const fa_problem *p, int i) {
  static const char *const fwd[] = {"o", "lse"}, *const bwd[] = {"dq", "dk", "dv"};
  if (p->op == FA_OP_BWD) return i >= 0 && i < 3 ? bwd[i] : "?";
  return i >= 0 && i < 2 ? fwd[i] : "?";
}

size_t attn_output_elem_bytes(const fa_problem *p, int i) {
  if (p->op != FA_OP_BWD) return (size_t)(i == 1 ? fa_lse_size(p->dtype) : fa_dtype_size(fa_out_dtype(p->dtype)));
  return (size_t)fa_dtype_size(p->dtype);
}

int attn_output_seq(const fa_problem *p, int i) {
  return p->op == FA_OP_BWD && i > 0 ? p->seq_k : p->seq_q;
}

int attn_output_dim(const fa_problem *p, int i) {
  if (p->op == FA_OP_BWD) return i == 2 ? fa_problem_dim_v(p) : p->dim;
  return i == 1 ? 1 : fa_problem_dim_v(p);
}

fa_params attn_params(const fa_problem *p, const void *q, const void *k, const void *v,
                      void *o, void *lse, void *ws) {
  const fa_layout lq = fa_layout_contiguous(p, p->seq_q), lk = fa_layout_contiguous(p, p->seq_k);
  const fa_layout lv = fa_layout_contiguous_v(p, p->seq_k), lo = fa_layout_contiguous_v(p, p->seq_q);
  fa_params a = {
    .q = q, .k = k, .v = v, .o = o, .lse = lse, .ws = ws,
    .q_sb = lq.sb, .q_sh = lq.sh, .q_sn = lq.sn,
    .k_sb = lk.sb, .k_sh = lk.sh, .k_sn = lk.sn,
    .v_sb = lv.sb, .v_sh = lv.sh, .v_sn = lv.sn,
    .o_sb = lo.sb, .o_sh = lo.sh, .o_sn = lo.sn,
    .batch = p->batch, .heads = p->heads, .seq_q = p->seq_q, .seq_k = p->seq_k,
    .scale_log2 = fa_problem_scale(p) * 1.4426950408889634074};
  a.scale_log2_f32 = (float)a.scale_log2;
  return a;
}

int attn_tmaps(fa_backend *be, const gen_kernel *k, const fa_problem *p, fa_params *a,
               char *err, size_t errlen) {
  const int kv_heads = a->kv_group > 1 ? a->heads / a->kv_group : a->heads;
  /* A variable-length batch: the maps span the packed tensors, one batch
  ** of all their tokens (the kernel places each box at its sequence's). */
  const int seq_q = p->varlen ? a->total_q : a->seq_q, seq_k = p->varlen ? a->total_k : a->seq_k;
  const int batch = p->varlen ? 1 : a->batch;
  /* A KV cache's form (templates/paged.lua): K's and V's maps span the
  ** pool, (dim, page_size, kv_heads, num_pages), the kernel placing each
  ** box on its page. */
  const char *paged = gen_config_get(&k->cfg, "paged");
  const int pool = paged && !strcmp(paged, "1");
  for (int i = 0; i < k->ntma; i++) {
    const gen_tma *t = &k->tma[i];
    const void *base;
    long long sn, sh, sb;
    int seq = seq_q, heads = a->heads, dim = p->dim, es = fa_dtype_size(p->dtype);
    switch (t->tensor) {
    case 'q': base = a->q, sn = a->q_sn, sh = a->q_sh, sb = a->q_sb; break;
    case 'k':
      base = a->k, sn = a->k_sn, sh = a->k_sh, sb = a->k_sb, seq = seq_k, heads = kv_heads;
      break;
    case 'v':
      base = a->v, sn = a->v_sn, sh = a->v_sh, sb = a->v_sb, seq = seq_k, heads = kv_heads;
      dim = fa_problem_dim_v(p);
      break;
    case 't':
      /* V transposed in the first workspace (gen.h's GEN_TMA_VT): per
      ** (batch, K/V head) dim_v rows of the keys, padded to the workspace's
      ** row_align; the map's rows are V's columns. */
      dim = gen_workspace_rows(k, 0, p), seq = fa_problem_dim_v(p), heads = kv_heads;
      base = a->ws, sn = dim, sh = sn * seq, sb = sh * heads;
      break;
    case 'd':  /* the backward pass's dO, as O */
      base = a->dout, sn = a->do_sn, sh = a->do_sh, sb = a->do_sb, dim = fa_problem_dim_v(p);
      break;
    default:
      base = a->o, sn = a->o_sn, sh = a->o_sh, sb = a->o_sb, dim = fa_problem_dim_v(p);
      es = fa_dtype_size(fa_out_dtype(p->dtype));
      break;
    }
    if (sn < 0 || sh < 0 || sb < 0) {
      snprintf(err, errlen, "kernel %s: tensor map %d over %c: negative strides", k->name, i,
               t->tensor);
      return FA_EINVAL;
    }
    if (p->varlen) sb = sn * seq;  /* one batch: any stride a map takes */
    const int in_pool = pool && (t->tensor == 'k' || t->tensor == 'v');
    if (in_pool && (a->page_size < 1 || a->num_pages < 1)) {
      snprintf(err, errlen, "kernel %s: a KV cache of %d pages of %d rows", k->name,
               a->num_pages, a->page_size);
      return FA_EINVAL;
    }
    if (in_pool && a->page_size % (int)t->box[1]) {
      snprintf(err, errlen, "kernel %s loads K and V in boxes of %u rows, each within a page: "
               "pages of %d rows are no multiple of it (tc's paged form takes any)", k->name,
               t->box[1], a->page_size);
      return FA_EINVAL;
    }
    const fa_tmap_desc d = {
      .base = base, .elem_bytes = es, .rank = 4,
      .dims = {(unsigned long long)dim, (unsigned long long)(in_pool ? a->page_size : seq),
               (unsigned long long)heads, (unsigned long long)(in_pool ? a->num_pages : batch)},
      .strides = {(unsigned long long)sn * (unsigned)es, (unsigned long long)sh * (unsigned)es,
                  (unsigned long long)sb * (unsigned)es},
      .box = {t->box[0], t->box[1], 1, 1}, .swizzle = t->swizzle};
    char why[256];
    const int rc = backend_tmap(be, &d, &a->tmap[i], why, sizeof why);
    if (rc != 0) {
      snprintf(err, errlen, "kernel %s: tensor map %d over %c: %s", k->name, i, t->tensor, why);
      return rc;
    }
  }
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Output buffers for one run of k (attn_outputs', poisoned), and its
** workspaces; NULL pointers when they fail. o and lse name the forward
** pass's. */
typedef struct outputs {
  int n;
  void *buf[ATTN_MAX_OUTPUTS];
  size_t bytes[ATTN_MAX_OUTPUTS];
  void *o, *lse;
  void *ws[GEN_MAX_WORKSPACES];
  void *error;             /* op decode, or a modification's tensors: the kernels' flags */
} outputs;

static int outputs_alloc(fa_backend *be, const gen_kernel *k, const fa_problem *p,
                         outputs *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->n = attn_outputs(p, out->bytes);
  for (int i = 0; i < out->n; i++)
    if (backend_alloc(be, out->bytes[i], &out->buf[i], err, errlen) ||
        backend_fill(be, out->buf[i], 0xFF, out->bytes[i], err, errlen))
      return -1;
  if (p->op != FA_OP_BWD) out->o = out->buf[0], out->lse = out->buf[1];
  const size_t fb = ATTN_NFLAGS * sizeof(int);
  if ((p->op == FA_OP_DECODE || (p->mod && p->mod->ntensors)) &&
      (backend_alloc(be, fb, &out->error, err, errlen) || backend_fill(be, out->error, 0, fb, err, errlen)))
    return -1;
  for (int i = 0; i < k->nws; i++) {
    const size_t wb = gen_workspace_bytes(k, i, p);
    if (backend_alloc(be, wb, &out->ws[i], err, errlen) ||
        backend_fill(be, out->ws[i], 0xFF, wb, err, errlen))
      return -1;
  }
  return 0;
}

static void outputs_free(fa_backend *be, outputs *out) {
  for (int i = 0; i < out->n; i++) backend_free(be, out->buf[i]);
  for (int i = 0; i < GEN_MAX_WORKSPACES; i++) backend_free(be, out->ws[i]);
  backend_free(be, out->error);
}

/* Op decode's parameter block: the forward pass's over the pools, and the
** cache's table and lengths. */
static int decode_params(const gen_kernel *k, const fa_problem *p, const attn_inputs *in,
                         const outputs *out, fa_params *a, char *err, size_t errlen) {
  if (k->nws > 1 || !in->table || !in->lens) {
    snprintf(err, errlen, "kernel %s: op decode takes at most one workspace, and a block "
             "table and lengths", k->name);
    return FA_EINVAL;
  }
  const fa_layout lk = attn_pool_layout(p), lv = attn_pool_layout_v(p);
  *a = attn_params(p, in->q, in->k, in->v, out->o, out->lse, out->ws[0]);
  a->k_sb = lk.sb, a->k_sh = lk.sh, a->k_sn = lk.sn;
  a->v_sb = lv.sb, a->v_sh = lv.sh, a->v_sn = lv.sn;
  a->kv_group = fa_problem_group(p);
  a->block_table = in->table, a->seqlens_k = in->lens, a->error = out->error;
  a->page_size = fa_problem_page(p), a->table_stride = fa_problem_pages_per_seq(p);
  a->num_pages = in->num_pages;
  fa_page_divisor(a->page_size, &a->page_magic, &a->page_shift);
  return 0;
}

/* The kernels' error flags after a run: FA_EINVAL when one met a page
** outside the pool, a length outside the capacity, or an index outside a
** captured tensor. */
static int flags_error(fa_backend *be, const outputs *out, char *err, size_t errlen) {
  int flag[ATTN_NFLAGS] = {0};
  if (!out->error) return 0;
  if (backend_download(be, flag, out->error, sizeof flag, err, errlen) != 0) return -1;
  return attn_flags(flag, err, errlen);
}

int attn_flags(const int flag[ATTN_NFLAGS], char *err, size_t errlen) {
  if (flag[2]) {
    snprintf(err, errlen, "the modification read a captured tensor at an index outside it "
             "(read as 0)");
    return FA_EINVAL;
  }
  if (flag[0]) {
    snprintf(err, errlen, "the block table (or cache_batch_idx) names a page outside the pool; "
             "its keys were skipped");
    return FA_EINVAL;
  }
  if (flag[1] == 2) {
    snprintf(err, errlen, "a new token's position is past rotary_cos and rotary_sin's rows; "
             "it was not rotated");
    return FA_EINVAL;
  }
  if (flag[1]) {
    snprintf(err, errlen, "a sequence's length is outside 0 and the cache's capacity (pages per "
             "sequence x page size); it was cut to it");
    return FA_EINVAL;
  }
  return 0;
}

/* The forward pass's parameter block for k over the outputs: fa_params
** carries one workspace. */
static int fwd_params(const gen_kernel *k, const fa_problem *p, const attn_inputs *in,
                      const outputs *out, fa_params *a, char *err, size_t errlen) {
  if (k->op != FA_OP_FWD || p->op != FA_OP_FWD || k->nws > 1) {
    snprintf(err, errlen, "kernel %s: op %s with %d workspaces: the forward pass takes at "
             "most one", k->name, fa_op_name(k->op), k->nws);
    return FA_EINVAL;
  }
  *a = attn_params(p, in->q, in->k, in->v, out->o, out->lse, out->ws[0]);
  a->kv_group = fa_problem_group(p);  /* as the launch grids over K/V heads take it */
  return 0;
}

/* Whether k computes problems of op: its own, and for a forward kernel's
** form over a KV cache (templates/paged.lua) decoding's, many new tokens. */
static int computes_op(const gen_kernel *k, fa_op op) {
  const char *paged = gen_config_get(&k->cfg, "paged");
  return k->op == op ||
         (op == FA_OP_DECODE && k->op == FA_OP_FWD && paged && !strcmp(paged, "1"));
}

/* The parameter block of k's op over the inputs and outputs: fa_params
** carries two workspaces. */
static int op_block(const gen_kernel *k, const fa_problem *p, const attn_inputs *in,
                     const outputs *out, fa_params *a, char *err, size_t errlen) {
  if (!computes_op(k, p->op)) {
    snprintf(err, errlen, "kernel %s computes op %s, the problem is op %s", k->name,
             fa_op_name(k->op), fa_op_name(p->op));
    return FA_EINVAL;
  }
  if (p->op == FA_OP_DECODE) return decode_params(k, p, in, out, a, err, errlen);
  if (k->op == FA_OP_FWD) return fwd_params(k, p, in, out, a, err, errlen);
  if (k->op != FA_OP_BWD || k->nws > 3 || !in->o || !in->lse || !in->dout) {
    snprintf(err, errlen, "kernel %s: op %s with %d workspaces%s: the runtime runs the forward "
             "and the backward pass, with at most three", k->name, fa_op_name(k->op), k->nws,
             k->op == FA_OP_BWD && !in->dout ? ", and no dO given" : "");
    return FA_EINVAL;
  }
  const fa_layout lq = fa_layout_contiguous(p, p->seq_q), lk = fa_layout_contiguous(p, p->seq_k);
  const fa_layout lo = fa_layout_contiguous_v(p, p->seq_q), lv = fa_layout_contiguous_v(p, p->seq_k);
  *a = attn_params(p, in->q, in->k, in->v, in->o, in->lse, out->ws[0]);
  a->ws2 = out->ws[1], a->ws3 = out->ws[2];
  a->kv_group = fa_problem_group(p);  /* dK and dV of K/V heads below heads / kv_group */
  a->dout = in->dout, a->dq = out->buf[0], a->dk = out->buf[1], a->dv = out->buf[2];
  a->do_sb = lo.sb, a->do_sh = lo.sh, a->do_sn = lo.sn;
  a->dq_sb = lq.sb, a->dq_sh = lq.sh, a->dq_sn = lq.sn;
  a->dk_sb = lk.sb, a->dk_sh = lk.sh, a->dk_sn = lk.sn;
  a->dv_sb = lv.sb, a->dv_sh = lv.sh, a->dv_sn = lv.sn;
  return 0;
}

/* op_block's, with the modification's tensors and the kernels' flags. */
static int op_params(const gen_kernel *k, const fa_problem *p, const attn_inputs *in,
                     const outputs *out, fa_params *a, char *err, size_t errlen) {
  const int rc = op_block(k, p, in, out, a, err, errlen);
  if (rc == 0) attn_mod_params(in, a), a->error = out->error;
  if (rc == 0 && in->descale) {
    const float *d = in->descale;
    size_t cnt[3];
    fa_problem_descales(p, cnt);
    a->q_descale = d, a->k_descale = d + cnt[0], a->v_descale = d + cnt[0] + cnt[1];
  }
  if (rc == 0) a->descale_shift = fa_descale_shift(p->descale_rows);
  return rc;
}

int attn_launch_shapes(const gen_kernel *k, const fa_problem *p, gen_launch *shapes,
                       char *err, size_t errlen) {
  if (k->nlaunch < 1 || k->nlaunch > GEN_MAX_LAUNCHES) {
    snprintf(err, errlen, "kernel %s: %d launches", k->name, k->nlaunch);
    return FA_EINVAL;
  }
  for (int i = 0; i < k->nlaunch; i++) gen_launch_shape(k, i, p, &shapes[i]);
  return 0;
}

/* Every launch of k, in order. */
static int launch_all(fa_backend *be, const fa_program *prog, const gen_kernel *k,
                      const gen_launch *shapes, const fa_params *a, const fa_run_opts *opts,
                      fa_counters *ctr, char *err, size_t errlen) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < k->nlaunch; i++)
    rc = backend_launch(be, prog, &shapes[i], a, opts, ctr, err, errlen);
  return rc;
}

/* The first byte-wise difference of n elements of es bytes, or n. */
static size_t first_diff(const void *a, const void *b, size_t n, size_t es) {
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return i;
  return n;
}

/* The outputs on the device against want's, for the run named `launch`;
** want records the first difference. host holds every output's bytes. */
static int compare_output(fa_backend *be, const fa_problem *p, const outputs *out,
                          unsigned char *host, attn_expect *want, const char *launch,
                          char *err, size_t errlen) {
  size_t at = 0;
  for (int i = 0; i < out->n; i++) {
    if (backend_download(be, host + at, out->buf[i], out->bytes[i], err, errlen) != 0) return -1;
    at += out->bytes[i];
  }
  if (want->differs) return 0;
  at = 0;
  for (int i = 0; i < out->n; i++) {
    const size_t es = attn_output_elem_bytes(p, i), n = out->bytes[i] / es;
    const size_t j = first_diff(host + at, (const unsigned char *)want->out + at, n, es);
    if (j < n) {
      want->differs = 1, want->launch = launch, want->output = i, want->at = j;
      return 0;
    }
    at += out->bytes[i];
  }
  return 0;
}

/* The warm-up runs, each on poisoned outputs and checked against want
** when there is one. */
static int warm_up(fa_backend *be, const fa_program *prog, const gen_kernel *k,
                   const fa_problem *p, const gen_launch *shapes, const fa_params *a,
                   const outputs *out, unsigned char *host, attn_expect *want, char *err,
                   size_t errlen) {
  static const char *const name[ATTN_WARMUPS] = {"warm-up launch 1", "warm-up launch 2",
                                                 "warm-up launch 3"};
  int rc = 0;
  for (int w = 0; rc == 0 && w < ATTN_WARMUPS; w++) {
    for (int i = 0; want && rc == 0 && i < out->n; i++)
      rc = backend_fill(be, out->buf[i], 0xFF, out->bytes[i], err, errlen);
    const fa_run_opts ro = {.smem_fill = 0xFF};
    if (rc == 0) rc = launch_all(be, prog, k, shapes, a, &ro, NULL, err, errlen);
    if (rc == 0 && want) rc = compare_output(be, p, out, host, want, name[w], err, errlen);
  }
  return rc;
}

int attn_time(fa_backend *be, const fa_program *prog, const gen_kernel *k,
              const fa_problem *p, const attn_inputs *in, int budget_ms, attn_expect *want,
              fa_timing *t, int *ctas_per_sm, char *err, size_t errlen) {
  gen_launch shapes[GEN_MAX_LAUNCHES];
  int rc = attn_launch_shapes(k, p, shapes, err, errlen);
  if (rc != 0) return rc;
  size_t bytes[ATTN_MAX_OUTPUTS], total = 0;
  const int nout = attn_outputs(p, bytes);
  for (int i = 0; i < nout; i++) total += bytes[i];
  outputs out;
  unsigned char *host = want ? malloc(total) : NULL;
  if (want && !host) {
    snprintf(err, errlen, "out of memory for the output's copy");
    return FA_ENOMEM;
  }
  if (want) want->differs = 0;
  rc = outputs_alloc(be, k, p, &out, err, errlen);
  fa_params a;
  if (rc == 0) rc = op_params(k, p, in, &out, &a, err, errlen);
  if (rc == 0) {
    rc = attn_tmaps(be, k, p, &a, err, errlen);
    if (rc == 0) rc = warm_up(be, prog, k, p, shapes, &a, &out, host, want, err, errlen);
    if (rc == 0) rc = backend_time(be, prog, shapes, k->nlaunch, &a, budget_ms, t, err, errlen);
    if (rc == 0 && want)
      rc = compare_output(be, p, &out, host, want, "the last timed launch", err, errlen);
    /* The occupancy of the op's main kernel. */
    if (rc == 0 && backend_occupancy(be, prog, &shapes[k->main], ctas_per_sm, err, errlen) != 0)
      *ctas_per_sm = -1;
  }
  outputs_free(be, &out);
  free(host);
  return rc;
}

/* The (query, key) pairs of one head of sequence b that the mask keeps:
** every key, or under the causal mask (aligned bottom right) those up to
** each row's diagonal. */
static double pairs_of(const fa_problem *p, int seq_k) {
  if (!p->causal) return (double)p->seq_q * seq_k;
  double pairs = 0;
  for (long long r = 0; r < p->seq_q; r++) {
    long long n = r + (seq_k - p->seq_q) + 1;
    pairs += (double)(n < 0 ? 0 : n > seq_k ? seq_k : n);
  }
  return pairs;
}

/* The keys of the problem's sequences together (op decode: their own
** lengths). */
static double keys_of(const fa_problem *p) {
  if (p->op != FA_OP_DECODE || !p->kv_lens) return (double)p->batch * p->seq_k;
  double n = 0;
  for (int b = 0; b < p->batch; b++) n += fa_problem_kv_len(p, b);
  return n;
}

double attn_flops(const fa_problem *p) {
  double pairs = 0;
  if (p->op == FA_OP_DECODE && p->kv_lens) {
    for (int b = 0; b < p->batch; b++) pairs += pairs_of(p, fa_problem_kv_len(p, b));
  } else {
    pairs = p->batch * pairs_of(p, p->seq_k);
  }
  /* Per pair, S's and O's products: 2 dim + 2 dim_v (4 dim when they are
  ** one); the backward pass's five: S, dP (dim_v), dV (dim_v), dK, dQ, as
  ** the FlashAttention papers count. */
  const double dv = fa_problem_dim_v(p);
  const double per_pair = p->op == FA_OP_BWD ? 2.0 * (3.0 * p->dim + 2.0 * dv) : 2.0 * (p->dim + dv);
  return per_pair * p->heads * pairs;
}

double attn_bytes(const fa_problem *p) {
  const double bh = (double)p->batch * p->heads, es = fa_dtype_size(p->dtype);
  const double lse = (double)p->seq_q * fa_lse_size(p->dtype);
  const double oes = fa_dtype_size(fa_out_dtype(p->dtype));
  /* bwd: Q, dO, O, lse, K and V read; dQ, dK and dV written. */
  const double d = p->dim, dv = fa_problem_dim_v(p);
  if (p->op == FA_OP_BWD)   /* Q, dQ, K, dK of dim; dO, O, V, dV of dim_v */
    return bh * ((2.0 * p->seq_q + 2.0 * p->seq_k) * (d + dv) * es + lse);
  if (p->op == FA_OP_DECODE)  /* each K/V head's keys once, whatever its query heads */
    return bh * (p->seq_q * (d + dv) * es + lse) + keys_of(p) * fa_problem_kv_heads(p) * (d + dv) * es;
  return bh * ((p->seq_q + p->seq_k) * d * es + p->seq_k * dv * es + p->seq_q * dv * oes + lse);
}

int attn_run_op(fa_backend *be, const fa_program *prog, const gen_kernel *k,
                const fa_problem *p, const attn_inputs *in, const fa_run_opts *opts,
                void *const *host, fa_counters *ctr, double *launch_ms, char *err,
                size_t errlen) {
  gen_launch shapes[GEN_MAX_LAUNCHES];
  if (attn_launch_shapes(k, p, shapes, err, errlen) != 0) return -1;
  outputs out;
  fa_params a;
  int rc = -1;
  if (outputs_alloc(be, k, p, &out, err, errlen) != 0 ||
      op_params(k, p, in, &out, &a, err, errlen) != 0 ||
      attn_tmaps(be, k, p, &a, err, errlen) != 0)
    goto done;
  double t0 = now_ms();
  if (launch_all(be, prog, k, shapes, &a, opts, ctr, err, errlen) != 0) goto done;
  if (launch_ms) *launch_ms = now_ms() - t0;
  rc = flags_error(be, &out, err, errlen) ? -1 : 0;
  for (int i = 0; rc == 0 && i < out.n; i++)
    rc = backend_download(be, host[i], out.buf[i], out.bytes[i], err, errlen) ? -1 : 0;
done:
  outputs_free(be, &out);
  return rc;
}

int attn_run(fa_backend *be, const fa_program *prog, const gen_kernel *k,
             const fa_problem *p, const attn_inputs *in, const fa_run_opts *opts,
             void *o_host, void *lse_host, fa_counters *ctr, double *launch_ms,
             char *err, size_t errlen) {
  if (p->op != FA_OP_FWD) {
    snprintf(err, errlen, "attn_run runs the forward pass, not op %s", fa_op_name(p->op));
    return FA_EINVAL;
  }
  void *const host[2] = {o_host, lse_host};
  return attn_run_op(be, prog, k, p, in, opts, host, ctr, launch_ms, err, errlen);
}
