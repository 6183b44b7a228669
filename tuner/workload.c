/*
** workload.c
** Reading a recorded decoding workload into its keys (workload.h).
*/
#include "workload.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define WL_LINE_MAX (1 << 20)      /* bytes of one step's line */
#define WL_BATCH_MAX 65535         /* sequences of one step (a launch's grid.z) */
#define WL_LEN_MAX (1 << 24)       /* keys of one sequence */
#define WL_STEPS_MAX 10000000L

static int round_up_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

/* One step's line (NUL-terminated, no newline): its batch and longest
** length, or 0 for a blank or comment line, or -1 with the fault in err. */
static int parse_step(char *s, int *batch, int *longest, char *err, size_t errlen) {
  char *hash = strchr(s, '#');
  if (hash) *hash = '\0';
  while (isspace((unsigned char)*s)) s++;
  if (!*s) return 0;
  *batch = 0, *longest = 0;
  for (;;) {
    while (*s == ' ' || *s == '\t') s++;
    if (!isdigit((unsigned char)*s)) {
      snprintf(err, errlen, "want a length (digits), not '%.20s'", s);
      return -1;
    }
    long v = 0;
    while (isdigit((unsigned char)*s) && v <= WL_LEN_MAX) v = v * 10 + (*s++ - '0');
    if (v > WL_LEN_MAX) {
      snprintf(err, errlen, "a length over %d", WL_LEN_MAX);
      return -1;
    }
    if (++*batch > WL_BATCH_MAX) {
      snprintf(err, errlen, "more than %d sequences in one step", WL_BATCH_MAX);
      return -1;
    }
    if (v > *longest) *longest = (int)v;
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    if (!*s) return 1;
    if (*s++ != ',') {
      snprintf(err, errlen, "want ',' between lengths, not '%.20s'", s - 1);
      return -1;
    }
  }
}

/* The step's bucket among keys, added when new. */
static int add_step(wl_key *keys, int *nkeys, int batch, int longest, char *err, size_t errlen) {
  const wl_key k = {round_up_pow2(batch), round_up_pow2(longest > 0 ? longest : 1), 1};
  for (int i = 0; i < *nkeys; i++)
    if (keys[i].batch == k.batch && keys[i].seq_k == k.seq_k) return keys[i].steps++, 0;
  if (*nkeys == WL_KEYS_MAX) {
    snprintf(err, errlen, "more than %d keys (batch and length buckets)", WL_KEYS_MAX);
    return -1;
  }
  keys[(*nkeys)++] = k;
  return 0;
}

int wl_read(const char *path, wl_key *keys, int *nkeys, long *nsteps, char *err, size_t errlen) {
  *nkeys = 0, *nsteps = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "--workload %s: %s", path, strerror(errno));
    return -1;
  }
  char why[160] = "", *line = NULL;
  size_t cap = 0;
  long no = 0;
  int rc = 0;
  ssize_t n;
  while (rc == 0 && (errno = 0, n = getline(&line, &cap, f)) >= 0) {
    no++;
    if (n > WL_LINE_MAX) {
      snprintf(why, sizeof why, "a line longer than %d bytes", WL_LINE_MAX);
      rc = -1;
    } else if (memchr(line, '\0', (size_t)n)) {
      snprintf(why, sizeof why, "a NUL byte");
      rc = -1;
    } else {
      if (n && line[n - 1] == '\n') line[n - 1] = '\0';
      int batch, longest;
      const int got = parse_step(line, &batch, &longest, why, sizeof why);
      if (got < 0) rc = -1;
      else if (got > 0 && ++*nsteps > WL_STEPS_MAX) {
        snprintf(why, sizeof why, "more than %ld steps", WL_STEPS_MAX);
        rc = -1;
      } else if (got > 0) {
        rc = add_step(keys, nkeys, batch, longest, why, sizeof why);
      }
    }
  }
  const int bad_read = ferror(f);
  free(line);
  fclose(f);
  if (rc != 0) {
    snprintf(err, errlen, "--workload %s:%ld: %s", path, no, why);
    return -1;
  }
  if (bad_read || (n < 0 && errno != 0)) {
    snprintf(err, errlen, "--workload %s: read error", path);
    return -1;
  }
  if (*nsteps == 0) {
    snprintf(err, errlen, "--workload %s: no decode steps (a line of each sequence's cached "
             "keys, comma-separated)", path);
    return -1;
  }
  return 0;
}
