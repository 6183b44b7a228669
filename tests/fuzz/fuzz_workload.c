/*
** fuzz_workload.c
** A recorded decoding workload (fatune --workload) on arbitrary bytes:
** the input written as the file. wl_read must return, never crash; on
** success its keys are powers of two within the bounds and their steps
** sum to the steps it counted, and on failure the message is one line.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "workload.h"

static int pow2(int n) { return n >= 1 && (n & (n - 1)) == 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[512];
  fz_path(path, sizeof path, "steps.txt");
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  wl_key keys[WL_KEYS_MAX];
  int n = -1;
  long steps = -1, sum = 0;
  char err[512] = "";
  if (wl_read(path, keys, &n, &steps, err, sizeof err) == 0) {
    for (int i = 0; i < n; i++) {
      if (!pow2(keys[i].batch) || keys[i].batch > 65536 || !pow2(keys[i].seq_k) ||
          keys[i].seq_k > (1 << 24) || keys[i].steps < 1)
        abort();
      sum += keys[i].steps;
    }
    if (n < 1 || n > WL_KEYS_MAX || sum != steps) abort();
  } else if (!err[0] || strchr(err, '\n')) {
    abort();
  }
  return 0;
}
