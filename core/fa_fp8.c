/*
** fa_fp8.c
** fp8 input preparation: scales per (batch, head) and the Hadamard rotation.
*/
#include <math.h>

#include "fa_fp8.h"
#include "halfprec.h"

void fa_fp8_quantize(const double *x, size_t heads, size_t per_head, uint8_t *out, float *descale) {
  for (size_t h = 0; h < heads; h++) {
    const double *xh = x + h * per_head;
    double amax = 0;
    for (size_t i = 0; i < per_head; i++) amax = isnan(xh[i]) || isnan(amax) ? NAN : fmax(amax, fabs(xh[i]));
    /* The descale as the kernel takes it, a float: the values divide by that one. */
    const float d = amax > 0 ? (float)(amax / 448) : !isnan(amax) ? 1.f : NAN;
    descale[h] = d;
    for (size_t i = 0; i < per_head; i++)
      out[h * per_head + i] = hp_e4m3_from_double(xh[i] / (double)d, 1);
  }
}

/* splitmix64: the signs, the same for a seed everywhere. */
static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int fa_fp8_rotate(double *x, size_t rows, int dim, unsigned long long seed) {
  if (dim < 1 || dim > 1024 || (dim & (dim - 1))) return -1;
  double sign[1024];
  uint64_t s = seed;
  for (int i = 0; i < dim; i++) sign[i] = next(&s) >> 63 ? -1.0 : 1.0;
  const double norm = 1 / sqrt((double)dim);
  for (size_t r = 0; r < rows; r++) {
    double *v = x + r * (size_t)dim;
    for (int i = 0; i < dim; i++) v[i] *= sign[i];
    /* The fast Walsh-Hadamard transform: log2(dim) butterfly passes. */
    for (int len = 1; len < dim; len <<= 1)
      for (int i = 0; i < dim; i += len << 1)
        for (int j = i; j < i + len; j++) {
          const double a = v[j], b = v[j + len];
          v[j] = a + b, v[j + len] = a - b;
        }
    for (int i = 0; i < dim; i++) v[i] *= norm;
  }
  return 0;
}
