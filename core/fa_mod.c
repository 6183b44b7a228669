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
