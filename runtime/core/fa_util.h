/*
** fa_util.h
** The few helpers every layer uses: a monotonic clock and FNV-1a 64.
*/
#ifndef FA_UTIL_H
#define FA_UTIL_H

#include <stddef.h>

#define FA_FNV64_OFFSET 0xcbf29ce484222325ull

/* Seconds on a monotonic clock, for intervals. */
double fa_now_s(void);

/* FNV-1a 64 of n bytes, continuing from h (FA_FNV64_OFFSET to start). */
unsigned long long fa_fnv1a64(unsigned long long h, const void *data, size_t n);

#endif
