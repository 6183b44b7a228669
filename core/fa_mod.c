/*
** fa_mod.c
** The float64 interpreter of a modification's programs (fa_mod.h).
*/
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_mod.h"

static const char *const names[FA_MC_COUNT] = {
  "const", "var", "add", "sub", "mul", "div", "idiv", "imod", "neg", "lt", "le", "gt", "ge",
  "eq", "ne", "and", "or", "not", "select", "abs", "min", "max", "exp", "exp2", "log", "log2",
  "tanh", "sqrt", "float", "load",
};

int fa_mod_code_of(const char *name) {
  for (int i = 0; i < FA_MC_COUNT; i++)
    if (!strcmp(names[i], name)) return i;
  return -1;
}

/* Values an op takes from the stack. */
static int arity(fa_mod_code c) {
  switch (c) {
  case FA_MC_CONST: case FA_MC_VAR: return 0;
  case FA_MC_NEG: case FA_MC_NOT: case FA_MC_ABS: case FA_MC_EXP: case FA_MC_EXP2:
  case FA_MC_LOG: case FA_MC_LOG2: case FA_MC_TANH: case FA_MC_SQRT: case FA_MC_FLOAT:
  case FA_MC_LOAD: return 1;
  case FA_MC_SELECT: return 3;
  default: return 2;
  }
}

int fa_mod_check(const fa_mod_op *prog, int n, char *why, size_t whylen) {
  if (n < 1 || n > FA_MOD_MAX_OPS) {
    snprintf(why, whylen, "a program of %d ops (1 to %d)", n, FA_MOD_MAX_OPS);
    return -1;
  }
  int depth = 0;
  for (int i = 0; i < n; i++) {
    const fa_mod_code c = prog[i].code;
    if ((int)c < 0 || c >= FA_MC_COUNT) {
      snprintf(why, whylen, "op %d has no code", i);
      return -1;
    }
    if (c == FA_MC_VAR && !(prog[i].value >= 0 && prog[i].value < FA_MV_COUNT &&
                            prog[i].value == floor(prog[i].value))) {
      snprintf(why, whylen, "op %d reads no variable", i);
      return -1;
    }
    if (c == FA_MC_LOAD && !(prog[i].value >= 0 && prog[i].value < FA_MOD_MAX_TENSORS &&
                             prog[i].value == floor(prog[i].value))) {
      snprintf(why, whylen, "op %d reads no captured tensor", i);
      return -1;
    }
    if ((int)prog[i].type < 0 || prog[i].type > FA_MT_BOOL) {
      snprintf(why, whylen, "op %d has no type", i);
      return -1;
    }
    if ((c == FA_MC_IDIV || c == FA_MC_IMOD) && !(i > 0 && prog[i - 1].code == FA_MC_CONST &&
                                                 prog[i - 1].value >= 1)) {
      snprintf(why, whylen, "op %d divides by no positive constant", i);
      return -1;
    }
    depth -= arity(c);
    if (depth < 0) {
      snprintf(why, whylen, "op %d (%s) takes more values than there are", i, names[c]);
      return -1;
    }
    depth++;
    if (depth > FA_MOD_MAX_OPS) {
      snprintf(why, whylen, "a stack deeper than %d", FA_MOD_MAX_OPS);
      return -1;
    }
  }
  if (depth != 1) {
    snprintf(why, whylen, "the program leaves %d values, not 1", depth);
    return -1;
  }
  return 0;
}

/* Element i of captured tensor t of d as a double: 0 outside it. */
static double load(const fa_mod_data *d, int t, double i) {
  if (!d || !d->ptr[t] || !(i >= 0 && i < (double)d->len[t])) return 0.0;
  return d->is_int[t] ? ((const int *)d->ptr[t])[(long long)i] : ((const float *)d->ptr[t])[(long long)i];
}

double fa_mod_eval(const fa_mod_op *prog, int n, const double vars[FA_MV_COUNT],
                   const fa_mod_data *d) {
  double st[FA_MOD_MAX_OPS];
  int sp = 0;
  for (int i = 0; i < n; i++) {
    const fa_mod_op *o = &prog[i];
    const int k = arity(o->code);
    const double a = k >= 1 ? st[sp - k] : 0, b = k >= 2 ? st[sp - k + 1] : 0,
                 c = k >= 3 ? st[sp - k + 2] : 0;
    double r = 0;
    switch (o->code) {
    case FA_MC_CONST: r = o->value; break;
    case FA_MC_VAR: r = vars[(int)o->value]; break;
    case FA_MC_ADD: r = a + b; break;
    case FA_MC_SUB: r = a - b; break;
    case FA_MC_MUL: r = a * b; break;
    case FA_MC_DIV: r = a / b; break;
    case FA_MC_IDIV: r = trunc(a / b); break;
    case FA_MC_IMOD: r = fmod(a, b); break;
    case FA_MC_NEG: r = -a; break;
    case FA_MC_LT: r = a < b; break;
    case FA_MC_LE: r = a <= b; break;
    case FA_MC_GT: r = a > b; break;
    case FA_MC_GE: r = a >= b; break;
    case FA_MC_EQ: r = a == b; break;
    case FA_MC_NE: r = a != b; break;
    case FA_MC_AND: r = a != 0 && b != 0; break;
    case FA_MC_OR: r = a != 0 || b != 0; break;
    case FA_MC_NOT: r = a == 0; break;
    case FA_MC_SELECT: r = a != 0 ? b : c; break;
    case FA_MC_ABS: r = fabs(a); break;
    case FA_MC_MIN: r = a < b ? a : b; break;
    case FA_MC_MAX: r = a > b ? a : b; break;
    case FA_MC_EXP: r = exp(a); break;
    case FA_MC_EXP2: r = exp2(a); break;
    case FA_MC_LOG: r = log(a); break;
    case FA_MC_LOG2: r = log2(a); break;
    case FA_MC_TANH: r = tanh(a); break;
    case FA_MC_SQRT: r = sqrt(a); break;
    case FA_MC_FLOAT: r = a; break;
    case FA_MC_LOAD: r = load(d, (int)o->value, a); break;
    default: r = NAN; break;
    }
    sp -= k;
    st[sp++] = r;
  }
  return st[0];
}

/* ---- Captured tensors on the host ---- */

int fa_mod_data_init(fa_mod_data *d, const fa_mod *m, const void *const ptr[], const long long len[],
                     char *why, size_t whylen) {
  memset(d, 0, sizeof *d);
  for (int i = 0; i < m->ntensors; i++) {
    if (len[i] < 0 || len[i] > INT_MAX || (len[i] > 0 && !ptr[i])) {
      snprintf(why, whylen, "captured tensor %s: %lld elements%s", m->tensor_name[i], len[i],
               len[i] > 0 ? " and no data" : "");
      fa_mod_data_free(d);
      return -1;
    }
    d->ptr[i] = ptr[i], d->len[i] = len[i], d->is_int[i] = m->tensor_type[i] == FA_MT_INT;
    if (!d->is_int[i]) continue;
    const long long ng = (len[i] + FA_MOD_GRANULE - 1) / FA_MOD_GRANULE;
    d->lo[i] = malloc((size_t)(ng ? ng : 1) * sizeof(int));
    d->hi[i] = malloc((size_t)(ng ? ng : 1) * sizeof(int));
    if (!d->lo[i] || !d->hi[i]) {
      snprintf(why, whylen, "out of memory for captured tensor %s's bounds", m->tensor_name[i]);
      fa_mod_data_free(d);
      return -1;
    }
    const int *t = ptr[i];
    for (long long g = 0; g < ng; g++) {
      int lo = INT_MAX, hi = INT_MIN;
      for (long long j = g * FA_MOD_GRANULE; j < len[i] && j < (g + 1) * FA_MOD_GRANULE; j++)
        lo = t[j] < lo ? t[j] : lo, hi = t[j] > hi ? t[j] : hi;
      d->lo[i][g] = lo, d->hi[i][g] = hi;
    }
  }
  return 0;
}

void fa_mod_data_free(fa_mod_data *d) {
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) free(d->lo[i]), free(d->hi[i]), free(d->owned[i]);
  memset(d, 0, sizeof *d);
}

/* splitmix64 */
static unsigned long long next_random(unsigned long long *s) {
  unsigned long long z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int fa_mod_data_random(fa_mod_data *d, const fa_mod *m, int batch, int heads, int seq_q,
                       int seq_k, unsigned long long seed, char *why, size_t whylen) {
  long long len[FA_MOD_MAX_TENSORS];
  void *buf[FA_MOD_MAX_TENSORS] = {0};
  fa_mod_extent(m, batch, heads, seq_q, seq_k, len);
  unsigned long long s = seed ^ 0x7e45045ULL;
  for (int i = 0; i < m->ntensors; i++) {
    if (len[i] < 0) len[i] = seq_q > seq_k ? seq_q : seq_k;
    if (len[i] > INT_MAX) len[i] = INT_MAX;
    buf[i] = malloc((size_t)(len[i] ? len[i] : 1) * 4);
    if (!buf[i]) {
      for (int j = 0; j < i; j++) free(buf[j]);
      snprintf(why, whylen, "out of memory for captured tensor %s", m->tensor_name[i]);
      return -1;
    }
    const long long run = len[i] / 4 > 0 ? len[i] / 4 : 1;   /* about 4 documents */
    int id = 0;
    for (long long j = 0; j < len[i]; j++) {
      const unsigned long long r = next_random(&s);
      if (m->tensor_type[i] == FA_MT_INT) {
        if (j > 0 && r % (unsigned long long)run == 0) id++;
        ((int *)buf[i])[j] = id;
      } else {
        ((float *)buf[i])[j] = (float)((double)(r >> 11) / 4503599627370496.0 - 1.0);
      }
    }
  }
  const void *ptr[FA_MOD_MAX_TENSORS] = {buf[0], buf[1], buf[2], buf[3]};
  if (fa_mod_data_init(d, m, ptr, len, why, whylen) != 0) {
    for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) free(buf[i]);
    return -1;
  }
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) d->owned[i] = buf[i];
  return 0;
}

/* ---- The block classifier: interval arithmetic over the mask's program ---- */

/* What is known of a value over a block pair: an integer's range, a truth
** value's two possibilities (either may hold), or a float's (nothing). */
typedef struct interval {
  fa_mod_type type;
  long long lo, hi;   /* FA_MT_INT, unless unk: any int (a value read from a tensor
                      ** whose contents are not at hand) */
  int t, f;           /* FA_MT_BOOL: may be true, may be false */
  int unk;
} interval;

static long long min2(long long a, long long b) { return a < b ? a : b; }
static long long max2(long long a, long long b) { return a > b ? a : b; }

static interval range(long long lo, long long hi) { return (interval){FA_MT_INT, lo, hi, 0, 0, 0}; }
static interval truth(int t, int f) { return (interval){FA_MT_BOOL, 0, 0, t, f, 0}; }
static const interval unknown_float = {FA_MT_FLOAT, 0, 0, 0, 0, 0};
static const interval unknown_int = {FA_MT_INT, 0, 0, 0, 0, 1};

/* A comparison of two ranges, as mod.lua's emit_block writes it. */
static interval compare(fa_mod_code c, interval a, interval b) {
  if (a.type != FA_MT_INT || b.type != FA_MT_INT || a.unk || b.unk) return truth(1, 1);
  const int overlap = a.lo <= b.hi && b.lo <= a.hi;
  const int single = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
  switch (c) {
  case FA_MC_LT: return truth(a.lo < b.hi, a.hi >= b.lo);
  case FA_MC_LE: return truth(a.lo <= b.hi, a.hi > b.lo);
  case FA_MC_GT: return truth(a.hi > b.lo, a.lo <= b.hi);
  case FA_MC_GE: return truth(a.hi >= b.lo, a.lo < b.hi);
  case FA_MC_EQ: return truth(overlap, !single);
  default: return truth(!single, overlap);
  }
}

/* An op on integer ranges (the op's value an int). */
static interval int_op(const fa_mod_op *o, const interval *x) {
  const interval a = x[0], b = x[1];
  if (o->code == FA_MC_SELECT) {   /* x[0] the condition */
    const interval c = x[0], p = x[1], q = x[2];
    if (c.t && c.f) return p.unk || q.unk ? unknown_int : range(min2(p.lo, q.lo), max2(p.hi, q.hi));
    return c.t ? p : q;
  }
  if (a.unk || (arity(o->code) == 2 && b.unk)) return unknown_int;
  long long p1, p2, p3, p4;
  switch (o->code) {
  /* past long long's range (products of products): nothing known */
  case FA_MC_ADD:
    if (__builtin_add_overflow(a.lo, b.lo, &p1) || __builtin_add_overflow(a.hi, b.hi, &p2))
      return unknown_int;
    return range(p1, p2);
  case FA_MC_SUB:
    if (__builtin_sub_overflow(a.lo, b.hi, &p1) || __builtin_sub_overflow(a.hi, b.lo, &p2))
      return unknown_int;
    return range(p1, p2);
  case FA_MC_NEG:
    if (__builtin_sub_overflow(0LL, a.hi, &p1) || __builtin_sub_overflow(0LL, a.lo, &p2))
      return unknown_int;
    return range(p1, p2);
  case FA_MC_MUL:
    if (__builtin_mul_overflow(a.lo, b.lo, &p1) || __builtin_mul_overflow(a.lo, b.hi, &p2) ||
        __builtin_mul_overflow(a.hi, b.lo, &p3) || __builtin_mul_overflow(a.hi, b.hi, &p4))
      return unknown_int;
    return range(min2(min2(p1, p2), min2(p3, p4)), max2(max2(p1, p2), max2(p3, p4)));
  case FA_MC_IDIV: return range(a.lo / b.lo, a.hi / b.lo);   /* by a positive constant */
  case FA_MC_IMOD: {
    const long long c = b.lo;
    const int same = a.lo >= 0 && a.lo / c == a.hi / c;
    return range(same ? a.lo % c : a.lo >= 0 ? 0 : -(c - 1), same ? a.hi % c : a.hi <= 0 ? 0 : c - 1);
  }
  case FA_MC_ABS:
    if (a.lo == LLONG_MIN) return unknown_int;
    return range(a.lo >= 0 ? a.lo : a.hi <= 0 ? -a.hi : 0, max2(-a.lo, a.hi));
  case FA_MC_MIN: return range(min2(a.lo, b.lo), min2(a.hi, b.hi));
  case FA_MC_MAX: return range(max2(a.lo, b.lo), max2(a.hi, b.hi));
  default: return range(0, 0);   /* no other op leaves an int (mod.lua's types) */
  }
}

/* An op whose value is a truth value. */
static interval bool_op(const fa_mod_op *o, const interval *x) {
  const interval a = x[0], b = x[1];
  switch (o->code) {
  case FA_MC_NOT: return truth(a.f, a.t);
  case FA_MC_AND: return truth(a.t && b.t, a.f || b.f);
  case FA_MC_OR: return truth(a.t || b.t, a.f && b.f);
  case FA_MC_SELECT: {
    const interval c = x[0], p = x[1], q = x[2];
    return truth((c.t && p.t) || (c.f && q.t), (c.t && p.f) || (c.f && q.f));
  }
  default: return compare(o->code, a, b);
  }
}

/* The values tensor t of d may hold at indices [x.lo, x.hi] (0 for those
** outside it), from the granules' bounds and the partial granules' elements. */
static interval tensor_range(const fa_mod_data *d, int t, interval x) {
  if (!d || !d->ptr[t] || x.unk) return unknown_int;
  const long long lo = max2(x.lo, 0), hi = min2(x.hi, d->len[t] - 1);
  long long mn = LLONG_MAX, mx = LLONG_MIN;
  if (x.lo < 0 || x.hi >= d->len[t]) mn = 0, mx = 0;
  const int *v = d->ptr[t];
  for (long long j = lo; j <= hi;) {
    if (j % FA_MOD_GRANULE == 0 && j + FA_MOD_GRANULE - 1 <= hi) {
      mn = min2(mn, d->lo[t][j / FA_MOD_GRANULE]), mx = max2(mx, d->hi[t][j / FA_MOD_GRANULE]);
      j += FA_MOD_GRANULE;
    } else {
      mn = min2(mn, v[j]), mx = max2(mx, v[j]);
      j++;
    }
  }
  return range(mn, mx);
}

/* Program prog over the variables' ranges vars: what is known of its value.
** With need, each load's highest index + 1 is kept in need[t] (-1: not
** bounded). */
static interval run_intervals(const fa_mod_op *prog, int n, const interval vars[FA_MV_COUNT],
                              const fa_mod_data *d, long long *need) {
  interval st[FA_MOD_MAX_OPS];
  int sp = 0;
  for (int i = 0; i < n; i++) {
    const fa_mod_op *o = &prog[i];
    const int k = arity(o->code);
    interval r;
    if (o->code == FA_MC_CONST) {
      r = o->type == FA_MT_INT ? range((long long)o->value, (long long)o->value) : unknown_float;
    } else if (o->code == FA_MC_VAR) {
      r = vars[(int)o->value];
    } else if (o->code == FA_MC_LOAD) {
      const int t = (int)o->value;
      const interval x = st[sp - 1];
      if (need && need[t] >= 0) need[t] = x.unk ? -1 : max2(need[t], x.hi + 1);
      r = o->type == FA_MT_INT ? tensor_range(d, t, x) : unknown_float;
    } else if (o->type == FA_MT_INT) {
      r = int_op(o, &st[sp - k]);
    } else if (o->type == FA_MT_BOOL) {
      r = bool_op(o, &st[sp - k]);
    } else {
      r = unknown_float;
    }
    sp -= k;
    st[sp++] = r;
  }
  return st[0];
}

/* The variables' ranges over a block pair. */
static void block_vars(interval v[FA_MV_COUNT], int b_lo, int b_hi, int h_lo, int h_hi, int q_lo,
                       int q_hi, int k_lo, int k_hi, int seq_q, int seq_k, int heads) {
  v[FA_MV_SCORE] = unknown_float;
  v[FA_MV_B] = range(b_lo, b_hi), v[FA_MV_H] = range(h_lo, h_hi);
  v[FA_MV_Q] = range(q_lo, q_hi), v[FA_MV_K] = range(k_lo, k_hi);
  v[FA_MV_SEQ_Q] = range(seq_q, seq_q), v[FA_MV_SEQ_K] = range(seq_k, seq_k);
  v[FA_MV_HEADS] = range(heads, heads);
}

int fa_mod_block(const fa_mod *m, const fa_mod_data *d, int b, int h, int q_lo, int q_hi,
                 int k_lo, int k_hi, int seq_q, int seq_k, int heads) {
  if (!m || m->nmask == 0) return 2;
  interval v[FA_MV_COUNT];
  block_vars(v, b, b, h, h, q_lo, q_hi, k_lo, k_hi, seq_q, seq_k, heads);
  const interval top = run_intervals(m->mask, m->nmask, v, d, NULL);
  if (top.type != FA_MT_BOOL) return 1;
  return !top.t ? 0 : !top.f ? 2 : 1;
}

void fa_mod_extent(const fa_mod *m, int batch, int heads, int seq_q, int seq_k,
                   long long len[FA_MOD_MAX_TENSORS]) {
  interval v[FA_MV_COUNT];
  block_vars(v, 0, batch - 1, 0, heads - 1, 0, seq_q - 1, 0, seq_k - 1, seq_q, seq_k, heads);
  for (int i = 0; i < FA_MOD_MAX_TENSORS; i++) len[i] = 0;
  if (m->nscore) run_intervals(m->score, m->nscore, v, NULL, len);
  if (m->nmask) run_intervals(m->mask, m->nmask, v, NULL, len);
  if (m->ndscore) run_intervals(m->dscore, m->ndscore, v, NULL, len);
}

/* Whether prog reads variable var. */
static int reads(const fa_mod_op *prog, int n, int var) {
  for (int i = 0; i < n; i++)
    if (prog[i].code == FA_MC_VAR && (int)prog[i].value == var) return 1;
  return 0;
}

int fa_mod_mask_loads(const fa_mod *m) {
  for (int i = 0; i < m->nmask; i++)
    if (m->mask[i].code == FA_MC_LOAD) return 1;
  return 0;
}

fa_mod_mask_dims fa_mod_mask_shape(const fa_mod *m, int batch, int heads, int seq_q, int seq_k) {
  const fa_mod_mask_dims dims = {
    reads(m->mask, m->nmask, FA_MV_B) ? batch : 1, reads(m->mask, m->nmask, FA_MV_H) ? heads : 1,
    (seq_q + FA_MOD_GRANULE - 1) / FA_MOD_GRANULE, (seq_k + FA_MOD_GRANULE - 1) / FA_MOD_GRANULE};
  return dims;
}

void fa_mod_block_mask(const fa_mod *m, const fa_mod_data *d, int seq_q, int seq_k, int heads,
                       fa_mod_mask_dims dims, int *out) {
  const int g = FA_MOD_GRANULE;
  for (int b = 0; b < dims.bm_b; b++)
    for (int h = 0; h < dims.bm_h; h++)
      for (int r = 0; r < dims.rows; r++)
        for (int c = 0; c < dims.cols; c++) {
          const int q_hi = (r + 1) * g < seq_q ? (r + 1) * g - 1 : seq_q - 1;
          const int k_hi = (c + 1) * g < seq_k ? (c + 1) * g - 1 : seq_k - 1;
          *out++ = fa_mod_block(m, d, b, h, r * g, q_hi, c * g, k_hi, seq_q, seq_k, heads);
        }
}
