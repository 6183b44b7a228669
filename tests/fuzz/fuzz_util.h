/*
** fuzz_util.h
** What the libFuzzer harnesses share: a private temporary directory, made
** once per process and removed at exit, which every file a harness writes
** goes into (TMPDIR points there too, for the emulator's compiles); and the
** input as a NUL-terminated string.
*/
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir[400];

static inline void fz_remove_dir(void) {
  char cmd[480];
  if (!fz_dir[0]) return;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

/* The directory, made on the first call; exits when it cannot be made. */
static inline const char *fz_tmpdir(void) {
  if (fz_dir[0]) return fz_dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(fz_dir, sizeof fz_dir, "%.300s/fatune-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(fz_dir)) {
    perror("fuzz: mkdtemp");
    exit(1);
  }
  setenv("TMPDIR", fz_dir, 1);
  atexit(fz_remove_dir);
  return fz_dir;
}

/* name inside the directory. */
static inline void fz_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", fz_tmpdir(), name);
}

/* The input as a string (cut at its first NUL); free it. */
static inline char *fz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

#endif
