/*
** halfprec.c
** IEEE binary16, bfloat16 and the OCP 8-bit formats E4M3 and E5M2 on the
** host, exactly: to double without loss, from double with one rounding to
** nearest, ties to even (no detour through float, whose own rounding could
** tip a tie the wrong way).
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

/* |x|, finite, rounded to nearest, ties to even, to a binary format with
** `mbits` fraction bits and exponent bias `bias`: its bits less the sign.
** The exponent field is unbounded above, and the bits grow with the
** magnitude, so an overflow shows as bits beyond the largest finite's. */
static uint32_t round_mag(double a, int mbits, int bias) {
  int e;
  frexp(a, &e);           /* a = f * 2^e, f in [0.5, 1) */
  int E = e - 1;          /* a = 1.xxx * 2^E */
  if (E < 1 - bias) E = 1 - bias;  /* subnormal: the fixed smallest scale */
  /* nearbyint rounds to nearest even in the default rounding mode. */
  double q = nearbyint(ldexp(a, mbits - E));
  if (q >= ldexp(1.0, mbits + 1)) q /= 2, E++;  /* rounded up past the binade */
  uint32_t mant = (uint32_t)q;
  if (mant < (1u << mbits)) return mant;   /* subnormal (or zero) */
  return (uint32_t)(E + bias) << mbits | (mant & ((1u << mbits) - 1));
}

/* x rounded to a 16-bit format as round_mag; NaN as the quiet NaN `qnan`. */
static uint16_t round_to(double x, int mbits, int bias, uint16_t qnan) {
  const uint16_t sign = signbit(x) ? (uint16_t)(1u << 15) : 0;
  const uint16_t inf = (uint16_t)(((1u << (15 - mbits)) - 1) << mbits);
  if (isnan(x)) return qnan;
  if (isinf(x)) return sign | inf;
  uint32_t m = round_mag(fabs(x), mbits, bias);
  return sign | (m >= inf ? inf : (uint16_t)m);
}

uint16_t hp_f16_from_double(double x) { return round_to(x, 10, 15, 0x7e00); }
uint16_t hp_bf16_from_double(double x) { return round_to(x, 7, 127, 0x7fc0); }

/* The magnitude of the finite 8-bit pattern b (its sign bit ignored). */
static double fp8_mag(uint8_t b, int mbits, int bias) {
  int e = (b & 0x7f) >> mbits, m = b & ((1 << mbits) - 1);
  if (e == 0) return ldexp(m, 1 - bias - mbits);   /* subnormal (or zero) */
  return ldexp((1 << mbits) + m, e - bias - mbits);
}

double hp_e4m3_to_double(uint8_t b) {
  double a = (b & 0x7f) == 0x7f ? NAN : fp8_mag(b, 3, 7);
  return b & 0x80 ? -a : a;
}

double hp_e5m2_to_double(uint8_t b) {
  double a = (b & 0x7f) < 0x7c ? fp8_mag(b, 2, 15) : (b & 0x7f) == 0x7c ? INFINITY : NAN;
  return b & 0x80 ? -a : a;
}

/* x rounded to an 8-bit format as round_mag, whose largest finite magnitude
** has the bits `max`. A magnitude beyond it, after the rounding, or an
** infinity gives `max` when satfinite, `over` otherwise, with x's sign. */
static uint8_t round_fp8(double x, int satfinite, int mbits, int bias, uint8_t max,
                         uint8_t over, uint8_t qnan) {
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return qnan;
  if (!isinf(x)) {
    uint32_t m = round_mag(fabs(x), mbits, bias);
    if (m <= max) return sign | (uint8_t)m;
  }
  return sign | (satfinite ? max : over);
}

uint8_t hp_e4m3_from_double(double x, int satfinite) {
  return round_fp8(x, satfinite, 3, 7, 0x7e, 0x7f, 0x7f);
}

uint8_t hp_e5m2_from_double(double x, int satfinite) {
  return round_fp8(x, satfinite, 2, 15, 0x7b, 0x7c, 0x7e);
}
