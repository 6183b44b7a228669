/*
** fuzz_sass.c
** The SASS analyser on arbitrary text: no crash, no sanitizer report, and
** what it counts adds up (no kind counts more than the loop's instructions,
** the kinds together no more than all of them, nothing negative; the
** producer's TMA loads no more than its instructions).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "sass.h"

static void check(const sass_counts *c) {
  const long k[] = {c->loop_hmma, c->loop_mufu, c->loop_ldsm, c->loop_lds, c->loop_ldgsts,
                    c->loop_bar, c->loop_shfl, c->loop_local, c->loop_int, c->loop_utmaldg,
                    c->loop_syncs, c->loop_warpgroup};
  long sum = 0;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (k[i] < 0) abort();
    sum += k[i];
  }
  if (sum > c->loop_instructions || (!c->found && c->loop_instructions) || c->masked_left_out < 0)
    abort();
  if (c->producer_utmaldg < 0 || c->producer_utmaldg > c->producer_instructions ||
      (!c->producer_found && c->producer_instructions))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), err[256], **names;
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  size_t n;
  sass_counts c;
  /* The first four bytes choose the FLOPs per warp for the trip count. */
  double flops = size >= 4 ? (double)(data[0] | data[1] << 8) * 4096 / (1 + data[2] % 4) : 0;
  if (sass_analyse(text, NULL, flops, &c, err, sizeof err) == 0) check(&c);
  if (sass_functions(text, &names, &n, err, sizeof err) == 0) {
    for (size_t i = 0; i < n && i < 8; i++)
      if (sass_analyse(text, names[i], flops, &c, err, sizeof err) == 0) check(&c);
    free(names);
  }
  free(text);
  return 0;
}
