/*
** test_fp8.c
** Checks the OCP 8-bit formats of halfprec.h, E4M3 and E5M2: all 256
** patterns of each decoded against the spec's formula written here (and
** hand-picked values), every pattern through a round trip in both modes,
** the midpoint of each pair of neighbours (ties to even) and the doubles
** either side of it, overflow and saturation around the largest finite,
** infinities and NaN, underflow to a signed zero, and a sweep of doubles
** over which the result is monotone and the nearest finite value.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "fa_fp8.h"
#include "halfprec.h"

#define SWEEP 100000   /* doubles per sign in the sweep */

typedef struct {
  const char *name;
  int mbits, bias;
  int ieee;        /* exponent all ones is inf and NaN; else only S.1..1.1..1 is NaN */
  uint8_t max;     /* the largest finite's pattern */
  uint8_t over;    /* overflow without satfinite: NaN (e4m3) or inf (e5m2) */
  uint8_t qnan;    /* what a NaN converts to */
  double (*to)(uint8_t);
  uint8_t (*from)(double, int);
} fmt;

static const fmt e4m3 = {"e4m3", 3, 7, 0, 0x7e, 0x7f, 0x7f, hp_e4m3_to_double, hp_e4m3_from_double};
static const fmt e5m2 = {"e5m2", 2, 15, 1, 0x7b, 0x7c, 0x7e, hp_e5m2_to_double, hp_e5m2_from_double};

/* The value of pattern b by the spec's formula: (-1)^s * 2^(e - bias) *
** (1 + m / 2^M) for normals, (-1)^s * 2^(1 - bias) * (m / 2^M) for subnormals. */
static double spec_value(const fmt *f, unsigned b) {
  const unsigned emask = (1u << (7 - f->mbits)) - 1, mmask = (1u << f->mbits) - 1;
  const unsigned e = (b >> f->mbits) & emask, m = b & mmask;
  const double s = b & 0x80 ? -1.0 : 1.0, frac = m / pow(2.0, f->mbits);
  if (e == emask && (f->ieee ? m != 0 : m == mmask)) return NAN;
  if (e == emask && f->ieee) return s * INFINITY;
  if (e == 0) return s * pow(2.0, 1 - f->bias) * frac;
  return s * pow(2.0, (int)e - f->bias) * (1.0 + frac);
}

/* Equal as doubles and in sign (so 0 and -0 differ). */
static int same(double x, double y) {
  return x == y && signbit(x) == signbit(y);
}

/* ---- Decoding: every pattern, and known values. ---- */

static void test_decode(const fmt *f) {
  int nans = 0, infs = 0;
  for (unsigned b = 0; b < 256; b++) {
    double want = spec_value(f, b), got = f->to((uint8_t)b);
    if (isnan(want)) {
      nans++;
      CHECK(isnan(got), "%s 0x%02x: %a, want NaN", f->name, b, got);
    } else {
      infs += isinf(want) != 0;
      CHECK(same(got, want), "%s 0x%02x: %a, want %a", f->name, b, got, want);
    }
  }
  CHECK(nans == (f->ieee ? 6 : 2) && infs == (f->ieee ? 2 : 0), "%s: %d NaNs, %d infinities",
        f->name, nans, infs);
}

static void test_known(void) {
  static const struct { uint8_t b; double x; } k4[] = {
    {0x7e, 448}, {0xfe, -448}, {0x08, 0x1p-6}, {0x01, 0x1p-9}, {0x07, 0x7p-9}, {0x38, 1.0},
    {0xb8, -1.0}, {0x77, 240}, {0x00, 0.0}, {0x80, -0.0},
  }, k5[] = {
    {0x7b, 57344}, {0xfb, -57344}, {0x7c, INFINITY}, {0xfc, -INFINITY}, {0x01, 0x1p-16},
    {0x03, 0x3p-16}, {0x04, 0x1p-14}, {0x3c, 1.0}, {0xbc, -1.0}, {0x00, 0.0}, {0x80, -0.0},
  };
  static const uint8_t nan4[] = {0x7f, 0xff}, nan5[] = {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff};
  for (size_t i = 0; i < sizeof k4 / sizeof *k4; i++)
    CHECK(same(hp_e4m3_to_double(k4[i].b), k4[i].x), "e4m3 0x%02x: %a, want %a", k4[i].b,
          hp_e4m3_to_double(k4[i].b), k4[i].x);
  for (size_t i = 0; i < sizeof k5 / sizeof *k5; i++)
    CHECK(same(hp_e5m2_to_double(k5[i].b), k5[i].x), "e5m2 0x%02x: %a, want %a", k5[i].b,
          hp_e5m2_to_double(k5[i].b), k5[i].x);
  for (size_t i = 0; i < sizeof nan4; i++)
    CHECK(isnan(hp_e4m3_to_double(nan4[i])), "e4m3 0x%02x is NaN", nan4[i]);
  for (size_t i = 0; i < sizeof nan5; i++)
    CHECK(isnan(hp_e5m2_to_double(nan5[i])), "e5m2 0x%02x is NaN", nan5[i]);
}

/* ---- Round trips of every pattern. ---- */

static void test_round_trip(const fmt *f) {
  for (unsigned b = 0; b < 256; b++) {
    double x = f->to((uint8_t)b);
    for (int sat = 0; sat <= 1; sat++) {
      unsigned got = f->from(x, sat), want = b;
      if (isnan(x)) want = f->qnan;
      else if (isinf(x) && sat) want = (b & 0x80) | f->max;
      CHECK(got == want, "%s 0x%02x (%a) satfinite %d: 0x%02x, want 0x%02x", f->name, b, x, sat,
            got, want);
    }
  }
}

/* ---- Rounding between neighbours. ---- */

/* The midpoint of each pair of neighbouring finite values goes to the one
** of even pattern (so even mantissa), the doubles either side of it to the
** nearer one; for both signs, in both modes. */
static void test_midpoints(const fmt *f) {
  for (unsigned p = 0; p < f->max; p++) {
    double a = spec_value(f, p), b = spec_value(f, p + 1), mid = a + (b - a) / 2;
    unsigned even = p % 2 == 0 ? p : p + 1;
    CHECK(a < b && a < mid && mid < b, "%s 0x%02x: %a and 0x%02x: %a in order", f->name, p, a,
          p + 1, b);
    for (unsigned sign = 0; sign <= 0x80; sign += 0x80) {
      double m = sign ? -mid : mid, lo = sign ? -a : a, hi = sign ? -b : b;
      for (int sat = 0; sat <= 1; sat++) {
        unsigned at = f->from(m, sat), below = f->from(nextafter(m, lo), sat),
                 above = f->from(nextafter(m, hi), sat);
        CHECK(at == (sign | even), "%s %a satfinite %d: 0x%02x, want 0x%02x", f->name, m, sat,
              at, sign | even);
        CHECK(below == (sign | p) && above == (sign | (p + 1)),
              "%s either side of %a satfinite %d: 0x%02x 0x%02x, want 0x%02x 0x%02x", f->name, m,
              sat, below, above, sign | p, sign | (p + 1));
      }
    }
  }
}

/* Hand-worked cases around the subnormals and the top binade. */
static void test_hand_rounding(void) {
  static const struct { double x; uint8_t b4, b5; } c[] = {
    {0x1p-10, 0x00, 0x14},   /* e4m3: the tie between 0 and 2^-9 goes to 0 */
    {0x3p-11, 0x01, 0x16},   /* e4m3: 0.75 * 2^-9, nearer 2^-9 */
    {0x3p-10, 0x02, 0x1a},   /* e4m3: the tie between 2^-9 and 2^-8 goes to 2^-8 (0x02) */
    {0x5p-10, 0x02, 0x1d},   /* e4m3: the tie between 2 and 3 * 2^-9 goes to 2 */
    {0x1p-17, 0x00, 0x00},   /* e5m2: the tie between 0 and 2^-16 goes to 0 */
    {0x3p-17, 0x00, 0x02},   /* e5m2: the tie between 2^-16 and 2^-15 goes to 2^-15 */
    {0x1.fp-7, 0x08, 0x24},  /* both: up into 2^-6 (e4m3: from its subnormals) */
    {1.0625, 0x38, 0x3c},    /* e4m3: the tie between 1 and 1.125 goes to 1 */
    {1.1875, 0x3a, 0x3d},    /* e4m3: the tie between 1.125 and 1.25 goes to 1.25 */
    {1.375, 0x3b, 0x3e},     /* e5m2: the tie between 1.25 and 1.5 goes to 1.5 */
    {240, 0x77, 0x5c},       /* e5m2: the tie between 224 and 256 goes to 256 */
    {248, 0x78, 0x5c},       /* e4m3: the tie between 240 and 256 goes to 256 */
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++)
    for (int sat = 0; sat <= 1; sat++) {
      unsigned g4 = hp_e4m3_from_double(c[i].x, sat), g5 = hp_e5m2_from_double(c[i].x, sat);
      CHECK(g4 == c[i].b4 && g5 == c[i].b5,
            "%a satfinite %d: e4m3 0x%02x e5m2 0x%02x, want 0x%02x 0x%02x", c[i].x, sat, g4, g5,
            c[i].b4, c[i].b5);
    }
}

/* ---- Overflow, infinities, NaN, underflow. ---- */

/* x and -x, each to `sat` with satfinite and `nosat` without. */
static void check_both(const fmt *f, double x, unsigned sat, unsigned nosat) {
  for (unsigned sign = 0; sign <= 0x80; sign += 0x80) {
    double y = sign ? -x : x;
    unsigned gs = f->from(y, 1), gn = f->from(y, 0);
    CHECK(gs == (sign | sat) && gn == (sign | nosat),
          "%s %a: satfinite 0x%02x, not 0x%02x; want 0x%02x, 0x%02x", f->name, y, gs, gn,
          sign | sat, sign | nosat);
  }
}

static void test_overflow(void) {
  /* e4m3: 448 = 1.110b * 2^8; above it 480 = 1.111b * 2^8 is NaN's pattern. The
  ** midpoint 464 goes to 448, of even mantissa; anything above it overflows. */
  check_both(&e4m3, 448, 0x7e, 0x7e);
  check_both(&e4m3, nextafter(448, 0), 0x7e, 0x7e);
  check_both(&e4m3, nextafter(448, 464), 0x7e, 0x7e);
  check_both(&e4m3, nextafter(464, 0), 0x7e, 0x7e);
  check_both(&e4m3, 464, 0x7e, 0x7e);
  check_both(&e4m3, nextafter(464, 480), 0x7e, 0x7f);
  check_both(&e4m3, 464.0001, 0x7e, 0x7f);
  check_both(&e4m3, 480, 0x7e, 0x7f);
  check_both(&e4m3, 512, 0x7e, 0x7f);
  check_both(&e4m3, 1e30, 0x7e, 0x7f);
  check_both(&e4m3, 0x1.fffffffffffffp+1023, 0x7e, 0x7f);
  check_both(&e4m3, INFINITY, 0x7e, 0x7f);
  /* e5m2: 57344 = 1.11b * 2^15, the next step 65536 = 2^16. The midpoint
  ** 61440 goes to 2^16, of even mantissa, so overflows. */
  check_both(&e5m2, 57344, 0x7b, 0x7b);
  check_both(&e5m2, nextafter(57344, 61440), 0x7b, 0x7b);
  check_both(&e5m2, nextafter(61440, 0), 0x7b, 0x7b);
  check_both(&e5m2, 61440, 0x7b, 0x7c);
  check_both(&e5m2, nextafter(61440, 65536), 0x7b, 0x7c);
  check_both(&e5m2, 65536, 0x7b, 0x7c);
  check_both(&e5m2, 1e30, 0x7b, 0x7c);
  check_both(&e5m2, 0x1.fffffffffffffp+1023, 0x7b, 0x7c);
  check_both(&e5m2, INFINITY, 0x7b, 0x7c);
}

static void test_nan(const fmt *f) {
  uint64_t bits[] = {0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull,
                     0xfff4000000000000ull, 0x7fffffffffffffffull};
  for (size_t i = 0; i < sizeof bits / sizeof *bits; i++) {
    double x;
    memcpy(&x, &bits[i], sizeof x);
    for (int sat = 0; sat <= 1; sat++) {
      unsigned got = f->from(x, sat);
      CHECK(got == f->qnan && isnan(f->to((uint8_t)got)),
            "%s NaN 0x%016llx satfinite %d: 0x%02x, want 0x%02x", f->name,
            (unsigned long long)bits[i], sat, got, f->qnan);
    }
  }
}

/* At or below half the smallest subnormal: zero of x's sign; just above: the smallest. */
static void test_underflow(const fmt *f) {
  double half = spec_value(f, 1) / 2;
  double zeros[] = {0.0, 0x1p-1074, 1e-30, nextafter(half, 0), half};
  for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++) check_both(f, zeros[i], 0x00, 0x00);
  check_both(f, nextafter(half, 1), 0x01, 0x01);
}

/* ---- A sweep of doubles. ---- */

/* Positive doubles from 2^-30 to 2^30 in even steps of their bits, then
** each with either sign: with satfinite the result is the nearest finite
** value, never less than the previous one's; without, the same unless
** the magnitude is beyond the largest finite and the result is `over`. */
static void test_sweep(const fmt *f) {
  static double xs[2 * SWEEP];
  const double from = 0x1p-30, to = 0x1p30, max = spec_value(f, f->max);
  double finite[256], prev = -INFINITY;
  int nfinite = 0, order = 1, nearest = 1, nosat = 1;
  uint64_t lo, hi;

  for (unsigned b = 0; b < 256; b++) {
    double v = spec_value(f, b);
    if (isfinite(v)) finite[nfinite++] = v;
  }
  memcpy(&lo, &from, sizeof lo);
  memcpy(&hi, &to, sizeof hi);
  for (int i = 0; i < SWEEP; i++) {
    uint64_t bits = lo + (hi - lo) / (SWEEP - 1) * (uint64_t)i;
    double x;
    memcpy(&x, &bits, sizeof x);
    xs[SWEEP - 1 - i] = -x;   /* ascending: the negatives first */
    xs[SWEEP + i] = x;
  }

  /* Each property is checked until its first failure. */
  for (int i = 0; i < 2 * SWEEP; i++) {
    double x = xs[i];
    unsigned s = f->from(x, 1), n = f->from(x, 0), sign = signbit(x) ? 0x80 : 0;
    double r = f->to((uint8_t)s);
    if (order) {
      order = r >= prev;
      CHECK(order, "%s: %a goes to %a, below %a before it", f->name, x, r, prev);
    }
    if (nearest) {
      int k = 0;
      while (k < nfinite && fabs(finite[k] - x) >= fabs(r - x)) k++;
      nearest = k == nfinite;
      CHECK(nearest, "%s: %a goes to %a, but %a is nearer", f->name, x, r, finite[k]);
    }
    if (nosat) {
      nosat = n == s || (n == (sign | f->over) && s == (sign | f->max) && fabs(x) > max);
      CHECK(nosat, "%s: %a goes to 0x%02x without satfinite, 0x%02x with", f->name, x, n, s);
    }
    prev = r;
  }
}

/* fa_fp8.h: the rotation is orthogonal (a row's norm and the dot product
** of two rows rotated alike are kept, to rounding), spreads a spike over
** every element, differs by seed and refuses dims that are no power of 2;
** quantization scales each block by its amax / 448, so its largest
** element lands on 448, every element within e4m3's half ulp of x /
** descale, a zero block gets descale 1, a NaN the block's NaN. */
static void test_prepare(void) {
  enum { D = 128 };
  double a[2][D], b[2][D];
  uint64_t s = 99;
  for (int i = 0; i < D; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[0][i] = b[0][i] = (double)(s >> 11) * 0x1p-53 - 0.5;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[1][i] = b[1][i] = (double)(s >> 11) * 0x1p-53 - 0.5;
  }
  CHECK(fa_fp8_rotate(&a[0][0], 2, D, 7) == 0, "rotate d128");
  double n0 = 0, n1 = 0, dot0 = 0, dot1 = 0;
  for (int i = 0; i < D; i++)
    n0 += b[0][i] * b[0][i], n1 += a[0][i] * a[0][i], dot0 += b[0][i] * b[1][i],
        dot1 += a[0][i] * a[1][i];
  CHECK(fabs(n1 / n0 - 1) < 1e-13 && fabs(dot1 - dot0) < 1e-13 * n0, "rotation: norm %.17g -> "
        "%.17g, dot %.17g -> %.17g", n0, n1, dot0, dot1);
  double spike[D] = {0}, other[D], again[D];
  spike[5] = 1;
  memcpy(other, b[1], sizeof other), memcpy(again, b[1], sizeof again);
  fa_fp8_rotate(spike, 1, D, 7), fa_fp8_rotate(other, 1, D, 8), fa_fp8_rotate(again, 1, D, 7);
  int flat = 1, differ = 0;
  for (int i = 0; i < D; i++)
    flat &= fabs(fabs(spike[i]) - 1 / sqrt(D)) < 1e-15, differ |= other[i] != again[i];
  CHECK(flat && differ, "a spike rotated: every element +-1/sqrt(d) (%d), signs by seed (%d)", flat,
        differ);
  CHECK(fa_fp8_rotate(spike, 1, 96, 7) == -1 && fa_fp8_rotate(spike, 1, 2048, 7) == -1,
        "rotation of d96 or d2048 refused");

  double x[3][64];
  for (int i = 0; i < 64; i++) x[0][i] = (i - 20) * 0.37, x[1][i] = 0, x[2][i] = i;
  x[2][9] = NAN;
  uint8_t q[3][64];
  float ds[3];
  fa_fp8_quantize(&x[0][0], 3, 64, &q[0][0], ds);
  double amax = 43 * 0.37, worst = 0;
  for (int i = 0; i < 64; i++) {
    const double want = x[0][i] / (double)ds[0], got = hp_e4m3_to_double(q[0][i]);
    worst = fmax(worst, fabs(got - want) / fmax(fabs(want), 0x1p-6));
  }
  CHECK(ds[0] == (float)(amax / 448) && hp_e4m3_to_double(q[0][63]) == 448 && worst <= 0x1p-4,
        "quantize: descale %.9g (want %.9g), largest %g, worst relative %g", ds[0], amax / 448,
        hp_e4m3_to_double(q[0][63]), worst);
  CHECK(ds[1] == 1 && q[1][0] == 0 && isnan(ds[2]), "a zero block: descale %g; NaN: %g", ds[1], ds[2]);
}

int main(void) {
  const fmt *fmts[] = {&e4m3, &e5m2};
  test_prepare();
  test_known();
  test_hand_rounding();
  test_overflow();
  for (int i = 0; i < 2; i++) {
    test_decode(fmts[i]);
    test_round_trip(fmts[i]);
    test_midpoints(fmts[i]);
    test_nan(fmts[i]);
    test_underflow(fmts[i]);
    test_sweep(fmts[i]);
  }
  return check_done("test_fp8");
}
