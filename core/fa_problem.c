/*
** fa_problem.c
** Small helpers on problems and dtypes.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fa_problem.h"
#include "halfprec.h"

static const char *const dtype_names[FA_NDTYPES] = {"fp32", "fp64", "fp16", "bf16", "e4m3"};

const char *fa_dtype_name(fa_dtype t) {
  return (unsigned)t < FA_NDTYPES ? dtype_names[t] : "?";
}

int fa_dtype_parse(const char *s, fa_dtype *t) {
  static const char *const short_names[FA_NDTYPES] = {"f32", "f64", "f16", "bf16", "fp8"};
  for (int i = 0; i < FA_NDTYPES; i++)
    if (!strcmp(s, dtype_names[i]) || !strcmp(s, short_names[i])) return *t = (fa_dtype)i, 0;
  return -1;
}

static const char *const op_names[FA_NOPS] = {"fwd", "bwd", "decode"};

const char *fa_op_name(fa_op op) {
  return (unsigned)op < FA_NOPS ? op_names[op] : "?";
}

int fa_op_parse(const char *s, fa_op *op) {
  for (int i = 0; i < FA_NOPS; i++)
    if (!strcmp(s, op_names[i])) return *op = (fa_op)i, 0;
  return -1;
}

int fa_dtype_size(fa_dtype t) {
  return t == FA_FP64 ? 8 : t == FA_FP32 ? 4 : t == FA_E4M3 ? 1 : 2;
}

fa_dtype fa_out_dtype(fa_dtype t) { return t == FA_E4M3 ? FA_BF16 : t; }

int fa_lse_size(fa_dtype t) { return t == FA_FP64 ? 8 : 4; }

double fa_problem_scale(const fa_problem *p) {
  return p->scale != 0.0 ? p->scale : 1.0 / sqrt((double)p->dim);
}

int fa_problem_dim_v(const fa_problem *p) { return p->dim_v ? p->dim_v : p->dim; }

int fa_problem_group(const fa_problem *p) { return p->kv_group > 1 ? p->kv_group : 1; }

int fa_problem_kv_heads(const fa_problem *p) { return p->heads / fa_problem_group(p); }

void fa_problem_descales(const fa_problem *p, size_t count[3]) {
  const size_t b = (size_t)p->batch, kvh = (size_t)fa_problem_kv_heads(p);
  const int r = p->descale_rows;
  if (r <= 0) {
    count[0] = count[1] = count[2] = b * kvh;
    return;
  }
  count[0] = b * (size_t)p->heads * (size_t)((p->seq_q + r - 1) / r);
  count[1] = count[2] = b * kvh * (size_t)((p->seq_k + r - 1) / r);
}

int fa_descale_shift(int descale_rows) {
  int shift = 0;
  for (int r = descale_rows; r > 1; r >>= 1) shift++;
  return shift;
}

/* Decoding's choice depends on the batch (the split count fills the SMs),
** the GQA ratio and the page size; the backward pass's on the GQA ratio
** (how many CTAs a K/V head's work makes). */
fa_key_extra fa_problem_key_extra(const fa_problem *p) {
  const int decode = p->op == FA_OP_DECODE, grouped = decode || p->op == FA_OP_BWD;
  return (fa_key_extra){.batch = decode ? p->batch : 0,
                        .kv_group = grouped ? fa_problem_group(p) : 1,
                        .page = decode ? p->page : 0};
}

int fa_problem_page(const fa_problem *p) {
  const int page = p->page > 0 ? p->page : p->seq_k;
  return page > 0 ? page : 1;
}

int fa_problem_pages_per_seq(const fa_problem *p) {
  const int page = fa_problem_page(p);
  return (int)(((long long)p->seq_k + page - 1) / page);
}

int fa_problem_kv_len(const fa_problem *p, int b) { return p->kv_lens ? p->kv_lens[b] : p->seq_k; }

void fa_page_divisor(int d, unsigned *magic, int *shift) {
  int l = 0;
  if (d < 1) d = 1;
  while (l < 31 && (1u << l) < (unsigned)d) ++l;
  *shift = l;
  *magic = (unsigned)((((1ull << l) - (unsigned long long)d) << 32) / (unsigned long long)d + 1);
}

void fa_dims_text(int dim, int dim_v, char *buf, size_t n) {
  if (dim_v == 0 || dim_v == dim) snprintf(buf, n, "%d", dim);
  else snprintf(buf, n, "%d/%d", dim, dim_v);
}

static fa_layout contiguous(const fa_problem *p, int seq, int dim) {
  fa_layout l;
  l.sn = dim;
  l.sh = (long long)seq * dim;
  l.sb = l.sh * p->heads;
  return l;
}

fa_layout fa_layout_contiguous(const fa_problem *p, int seq) {
  return contiguous(p, seq, p->dim);
}

fa_layout fa_layout_contiguous_v(const fa_problem *p, int seq) {
  return contiguous(p, seq, fa_problem_dim_v(p));
}

double fa_elem_get(const void *a, fa_dtype t, size_t i) {
  switch (t) {
  case FA_FP32: return ((const float *)a)[i];
  case FA_FP64: return ((const double *)a)[i];
  case FA_FP16: return hp_f16_to_double(((const uint16_t *)a)[i]);
  case FA_E4M3: return hp_e4m3_to_double(((const uint8_t *)a)[i]);
  default: return hp_bf16_to_double(((const uint16_t *)a)[i]);
  }
}

double fa_elem_put(void *a, fa_dtype t, size_t i, double x) {
  switch (t) {
  case FA_FP32: return ((float *)a)[i] = (float)x;
  case FA_FP64: return ((double *)a)[i] = x;
  case FA_FP16: return hp_f16_to_double(((uint16_t *)a)[i] = hp_f16_from_double(x));
  /* Saturating, as cvt.rn.satfinite: fp8 has no room above 448 to spare. */
  case FA_E4M3: return hp_e4m3_to_double(((uint8_t *)a)[i] = hp_e4m3_from_double(x, 1));
  default: return hp_bf16_to_double(((uint16_t *)a)[i] = hp_bf16_from_double(x));
  }
}
