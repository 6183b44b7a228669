/*
** halfprec.c
** IEEE binary16 and bfloat16 on the host, exactly: to double without loss,
** from double with one rounding to nearest, ties to even (no detour
** through float, whose own rounding could tip a tie the wrong way).
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "halfprec.h"

double hp_f16_to_double(uint16_t h) {
  uint64_t sign = (uint64_t)(h >> 15) << 63;
  int e = (h >> 10) & 0x1f;
  uint64_t m = h & 0x3ff, bits;
  double d;

  if (e == 0x1f) {
    bits = sign | 0x7ff0000000000000ull | m << 42;   /* inf, or NaN keeping its payload */
  } else if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else {
      /* Subnormal: normalize, since the double's range covers it. */
      e = -14;
      while (!(m & 0x400)) { m <<= 1; e--; }
      bits = sign | (uint64_t)(e + 1023) << 52 | (m & 0x3ff) << 42;
    }
  } else {
    bits = sign | (uint64_t)(e - 15 + 1023) << 52 | m << 42;
  }
  memcpy(&d, &bits, sizeof d);
  return d;
}

double hp_bf16_to_double(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* x rounded to a binary format with `mbits` fraction bits, exponent bias
** `bias` and largest exponent `emax`; NaN as the quiet NaN `qnan`. */
static uint16_t round_to(double x, int mbits, int bias, int emax, uint16_t qnan) {
  const uint16_t sign = signbit(x) ? (uint16_t)(1u << 15) : 0;
  const uint16_t inf = (uint16_t)(((1u << (15 - mbits)) - 1) << mbits);
  if (isnan(x)) return qnan;
  double a = fabs(x);
  if (isinf(a)) return sign | inf;
  int e;
  frexp(a, &e);           /* a = f * 2^e, f in [0.5, 1) */
  int E = e - 1;          /* a = 1.xxx * 2^E */
  if (E < 1 - bias) E = 1 - bias;  /* subnormal: the fixed smallest scale */
  /* nearbyint rounds to nearest even in the default rounding mode. */
  double q = nearbyint(ldexp(a, mbits - E));
  if (q >= ldexp(1.0, mbits + 1)) q /= 2, E++;  /* rounded up past the binade */
  if (E > emax) return sign | inf;
  uint32_t mant = (uint32_t)q;
  if (mant < (1u << mbits)) return sign | (uint16_t)mant;   /* subnormal (or zero) */
  return sign | (uint16_t)((uint32_t)(E + bias) << mbits | (mant & ((1u << mbits) - 1)));
}

uint16_t hp_f16_from_double(double x) { return round_to(x, 10, 15, 15, 0x7e00); }
uint16_t hp_bf16_from_double(double x) { return round_to(x, 7, 127, 127, 0x7fc0); }
