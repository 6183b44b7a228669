/*
** fa_fp8.h
** Preparing inputs for fp8 (e4m3) attention on the host: a scale per
** (batch, head), as FlashAttention-3's descales, and its incoherent
** processing, a random Hadamard rotation of Q and K that leaves Q K^T as
** it is and spreads an outlier over a row's every element.
*/
#ifndef FA_FP8_H
#define FA_FP8_H

#include <stddef.h>
#include <stdint.h>

/* x, `heads` contiguous blocks of `per_head` float64 values (a (batch,
** head)'s rows of a (B, H, N, D) tensor: per_head = N * D), rounded to
** e4m3 in out with a scale per block: descale[h] = amax / 448 (1 for a
** block of zeros), out = e4m3(x / descale[h]), to nearest even. A NaN or
** infinite value gives its block descale NaN. */
void fa_fp8_quantize(const double *x, size_t heads, size_t per_head, uint8_t *out, float *descale);

/* Each of `rows` rows of `dim` values of x (in place) times R = S H / sqrt(dim):
** S a diagonal of random signs from seed, H the Sylvester-Hadamard matrix;
** R is orthogonal, so Q R (K R)^T = Q K^T. 0, or -1 when dim is no power of 2
** from 1 to 1024. */
int fa_fp8_rotate(double *x, size_t rows, int dim, unsigned long long seed);

#endif
