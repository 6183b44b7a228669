/*
** halfprec.h
** 16-bit floating point on the host: IEEE binary16 (fp16) and bfloat16;
** 8-bit: the OCP formats E4M3 (no infinities, only S.1111.111 is NaN, max
** 448) and E5M2 (IEEE-like, max 57344).
*/
#ifndef HALFPREC_H
#define HALFPREC_H

#include <stdint.h>

double hp_f16_to_double(uint16_t h);     /* exact; NaN keeps its payload */
double hp_bf16_to_double(uint16_t h);    /* exact */
uint16_t hp_f16_from_double(double x);   /* nearest, ties to even; overflow to inf */
uint16_t hp_bf16_from_double(double x);  /* nearest, ties to even; overflow to inf */
double hp_e4m3_to_double(uint8_t b);     /* exact; 0x7f and 0xff are NaN */
double hp_e5m2_to_double(uint8_t b);     /* exact; inf and NaN as IEEE, NaN keeps its sign */
/* From double, one rounding to nearest, ties to even, the exponent unbounded;
** a result beyond the largest finite (448, 57344) or an infinity gives, with
** x's sign, the largest finite when satfinite (as PTX's cvt.rn.satfinite),
** otherwise NaN 0x7f for e4m3 (it has no inf) and inf for e5m2. NaN gives
** the positive canonical NaN, 0x7f for e4m3, 0x7e for e5m2; -0 stays -0. */
uint8_t hp_e4m3_from_double(double x, int satfinite);
uint8_t hp_e5m2_from_double(double x, int satfinite);

#endif
