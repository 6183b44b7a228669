/*
** fa_problem.c
** Small helpers on problems and dtypes.
*/
#include <math.h>
#include <string.h>

#include "fa_problem.h"

const char *fa_dtype_name(fa_dtype t) {
  return t == FA_FP64 ? "fp64" : "fp32";
}

int fa_dtype_parse(const char *s, fa_dtype *t) {
  if (strcmp(s, "fp32") == 0 || strcmp(s, "f32") == 0) *t = FA_FP32;
  else if (strcmp(s, "fp64") == 0 || strcmp(s, "f64") == 0) *t = FA_FP64;
  else return -1;
  return 0;
}

int fa_dtype_size(fa_dtype t) {
  return t == FA_FP64 ? 8 : 4;
}

double fa_problem_scale(const fa_problem *p) {
  return p->scale != 0.0 ? p->scale : 1.0 / sqrt((double)p->dim);
}

fa_layout fa_layout_contiguous(const fa_problem *p, int seq) {
  fa_layout l;
  l.sn = p->dim;
  l.sh = (long long)seq * p->dim;
  l.sb = l.sh * p->heads;
  return l;
}
