/*
** check.h
** The few assertions the C test programs share. A failed check prints its
** file, line and message and makes the program exit non-zero at the end.
** A test that cannot run here (no GPU) calls check_skip, which exits with
** 77, the code ctest's SKIP_RETURN_CODE maps to SKIPPED.
*/
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static int check_count;

#define CHECK(cond, ...) do { \
    check_count++; \
    if (!(cond)) { \
      check_failures++; \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fputc('\n', stderr); \
    } \
  } while (0)

static inline int check_done(const char *suite) {
  printf("%s: %d checks, %d failed\n", suite, check_count, check_failures);
  return check_failures ? 1 : 0;
}

static inline void check_skip(const char *why) {
  printf("SKIPPED: %s\n", why);
  exit(77);
}

#endif
