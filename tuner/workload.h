/*
** workload.h
** A recorded decoding workload (fatune --op decode --workload FILE): the
** decode steps a server ran, one per line, each sequence's cached keys
** comma-separated ("32768,512,512"); '#' starts a comment, blank lines
** are skipped. Its keys are the steps' batches and longest lengths, each
** rounded up to a power of two (the buckets the library's nearest choice
** serves), with how many steps fell in each. The file is untrusted:
** every number, line and count is checked, and a fault names its line.
*/
#ifndef WORKLOAD_H
#define WORKLOAD_H

#include <stddef.h>

#define WL_KEYS_MAX 64

typedef struct wl_key {
  int batch, seq_k;  /* the bucket: powers of two */
  long steps;        /* the steps that fell in it */
} wl_key;

/* The keys of the workload at path, in order of first appearance, into
** keys (at most WL_KEYS_MAX), their number into *nkeys and the steps into
** *nsteps. 0, or -1 with a message naming the file and line. */
int wl_read(const char *path, wl_key *keys, int *nkeys, long *nsteps, char *err, size_t errlen);

#endif
