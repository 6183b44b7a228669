/*
** fuzz_npy.c
** The .npy reader on arbitrary bytes: no crash, no sanitizer report, and
** an array it accepts survives a round trip through the writer (float64)
** with the same shape and bit-identical values.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "npy.h"

static char in_path[480], out_path[480];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_path(in_path, sizeof in_path, "in.npy");
  fz_path(out_path, sizeof out_path, "out.npy");
  return 0;
}

static void write_input(const uint8_t *data, size_t size) {
  FILE *f = fopen(in_path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
}

/* Written as float64 and read again: the same array, or abort. */
static void round_trip(const npy_array *a) {
  char err[600];
  npy_array b;
  if (npy_write_f64(out_path, a->data, a->ndim, a->shape, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_npy: writing back failed: %s\n", err);
    abort();
  }
  if (npy_read(out_path, &b, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_npy: reading back failed: %s\n", err);
    abort();
  }
  int same = b.dtype == NPY_F64 && b.ndim == a->ndim && b.count == a->count &&
             !memcmp(b.shape, a->shape, sizeof a->shape) &&
             (a->count == 0 || !memcmp(b.data, a->data, a->count * sizeof *a->data));
  npy_free(&b);
  if (!same) {
    fprintf(stderr, "fuzz_npy: the array read back differs\n");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[600];
  npy_array a;
  write_input(data, size);
  if (npy_read(in_path, &a, err, sizeof err) == 0) {
    /* Accepted: a sane array that survives the writer. */
    if (a.ndim < 1 || a.ndim > 4 || (a.count && !a.data)) abort();
    round_trip(&a);
  } else if (a.data   /* refused: no data, one line starting with the path (npy.h) */ || strncmp(err, in_path, strlen(in_path)) || strchr(err, '\n')) {
    fprintf(stderr, "fuzz_npy: a failure must leave no data and say one line with the path\n");
    abort();
  }
  npy_free(&a);
  return 0;
}
