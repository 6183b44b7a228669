/*
** fa_util.h
** The few helpers every layer uses: a monotonic clock, FNV-1a 64, and
** whole reads and writes of a descriptor.
*/
#ifndef FA_UTIL_H
#define FA_UTIL_H

#include <stddef.h>

#define FA_FNV64_OFFSET 0xcbf29ce484222325ull

/* Seconds on a monotonic clock, for intervals. */
double fa_now_s(void);

/* FNV-1a 64 of n bytes, continuing from h (FA_FNV64_OFFSET to start). */
unsigned long long fa_fnv1a64(unsigned long long h, const void *data, size_t n);

/* All of n bytes to or from fd, retrying short transfers and interrupts:
** 0, or -1 on an error or an early end of file. */
int fa_write_all(int fd, const void *p, size_t n);
int fa_read_all(int fd, void *p, size_t n);

#endif
