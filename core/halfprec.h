/*
** halfprec.h
** 16-bit floating point on the host: IEEE binary16 (fp16) and bfloat16.
*/
#ifndef HALFPREC_H
#define HALFPREC_H

#include <stdint.h>

double hp_f16_to_double(uint16_t h);     /* exact; NaN keeps its payload */
double hp_bf16_to_double(uint16_t h);    /* exact */
uint16_t hp_f16_from_double(double x);   /* nearest, ties to even; overflow to inf */
uint16_t hp_bf16_from_double(double x);  /* nearest, ties to even; overflow to inf */

#endif
