/*
** fa_mod.c
** The float64 interpreter of a modification's programs (fa_mod.h).
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fa_mod.h"

static const char *const names[FA_MC_COUNT] = {
  "const", "var", "add", "sub", "mul", "div", "idiv", "imod", "neg", "lt", "le", "gt", "ge",
  "eq", "ne", "and", "or", "not", "select", "abs", "min", "max", "exp", "exp2", "log", "log2",
  "tanh", "sqrt", "float",
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
  case FA_MC_LOG: case FA_MC_LOG2: case FA_MC_TANH: case FA_MC_SQRT: case FA_MC_FLOAT: return 1;
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

double fa_mod_eval(const fa_mod_op *prog, int n, const double vars[FA_MV_COUNT]) {
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
    default: r = NAN; break;
    }
    sp -= k;
    st[sp++] = r;
  }
  return st[0];
}

/* ---- The block classifier: interval arithmetic over the mask's program ---- */

/* What is known of a value over a block pair: an integer's range, a truth
** value's two possibilities (either may hold), or a float's (nothing). */
typedef struct interval {
  fa_mod_type type;
  long long lo, hi;   /* FA_MT_INT */
  int t, f;           /* FA_MT_BOOL: may be true, may be false */
} interval;

static long long min2(long long a, long long b) { return a < b ? a : b; }
static long long max2(long long a, long long b) { return a > b ? a : b; }

static interval range(long long lo, long long hi) { return (interval){FA_MT_INT, lo, hi, 0, 0}; }
static interval truth(int t, int f) { return (interval){FA_MT_BOOL, 0, 0, t, f}; }
static const interval unknown_float = {FA_MT_FLOAT, 0, 0, 0, 0};

/* A comparison of two ranges, as mod.lua's emit_block writes it. */
static interval compare(fa_mod_code c, interval a, interval b) {
  if (a.type != FA_MT_INT || b.type != FA_MT_INT) return truth(1, 1);
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
  switch (o->code) {
  case FA_MC_ADD: return range(a.lo + b.lo, a.hi + b.hi);
  case FA_MC_SUB: return range(a.lo - b.hi, a.hi - b.lo);
  case FA_MC_NEG: return range(-a.hi, -a.lo);
  case FA_MC_MUL: {
    const long long p1 = a.lo * b.lo, p2 = a.lo * b.hi, p3 = a.hi * b.lo, p4 = a.hi * b.hi;
    return range(min2(min2(p1, p2), min2(p3, p4)), max2(max2(p1, p2), max2(p3, p4)));
  }
  case FA_MC_IDIV: return range(a.lo / b.lo, a.hi / b.lo);   /* by a positive constant */
  case FA_MC_IMOD: {
    const long long c = b.lo;
    const int same = a.lo >= 0 && a.lo / c == a.hi / c;
    return range(same ? a.lo % c : a.lo >= 0 ? 0 : -(c - 1), same ? a.hi % c : a.hi <= 0 ? 0 : c - 1);
  }
  case FA_MC_ABS: return range(a.lo >= 0 ? a.lo : a.hi <= 0 ? -a.hi : 0, max2(-a.lo, a.hi));
  case FA_MC_MIN: return range(min2(a.lo, b.lo), min2(a.hi, b.hi));
  case FA_MC_MAX: return range(max2(a.lo, b.lo), max2(a.hi, b.hi));
  case FA_MC_SELECT: {   /* x[0] the condition */
    const interval c = x[0], p = x[1], q = x[2];
    if (c.t && c.f) return range(min2(p.lo, q.lo), max2(p.hi, q.hi));
    return c.t ? p : q;
  }
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

int fa_mod_block(const fa_mod *m, int b, int h, int q_lo, int q_hi, int k_lo, int k_hi,
                 int seq_q, int seq_k, int heads) {
  if (!m || m->nmask == 0) return 2;
  interval st[FA_MOD_MAX_OPS];
  int sp = 0;
  for (int i = 0; i < m->nmask; i++) {
    const fa_mod_op *o = &m->mask[i];
    const int k = arity(o->code);
    interval r;
    if (o->code == FA_MC_CONST) {
      r = o->type == FA_MT_INT ? range((long long)o->value, (long long)o->value) : unknown_float;
    } else if (o->code == FA_MC_VAR) {
      const long long exact[FA_MV_COUNT] = {0, b, h, 0, 0, seq_q, seq_k, heads};
      const int v = (int)o->value;
      r = v == FA_MV_SCORE ? unknown_float
          : v == FA_MV_Q ? range(q_lo, q_hi)
          : v == FA_MV_K ? range(k_lo, k_hi) : range(exact[v], exact[v]);
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
  const interval top = st[0];
  if (top.type != FA_MT_BOOL) return 1;
  return !top.t ? 0 : !top.f ? 2 : 1;
}
