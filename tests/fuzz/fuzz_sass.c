/*
** fuzz_sass.c
** The SASS analyser on arbitrary text: no crash, no sanitizer report, and
** what it counts adds up (no kind counts more than the loop's instructions,
** the kinds together no more than all of them, nothing negative; the
** producer's TMA loads no more than its instructions). The timing model
** on the trace it gives, as a plain or a warp-specialized kernel: a
** prediction is finite and positive, or an error (a deadlock). The cubin
** reader on the raw bytes.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <math.h>

#include "fuzz_util.h"
#include "model_sass.h"
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

/* Bytes 4 and 5 choose the launch: plain or 2 consumer warpgroups (then
** persistent, in static rounds or not), 1-3 stages, the launch order. */
static void model_check(const sass_trace *t, const uint8_t *data) {
  model_gpu machine;
  const model_gpu *m = model_gpu_of(estimate_gpu_find("h100"), &machine) == 0 ? &machine : NULL;
  int ws = data[4] & 1;
  /* designated, so that a field added to model_launch is zero here */
  model_launch l = {.block_m = 64, .block_n = 64, .threads = ws ? 384 : 128, .smem_bytes = 32768,
                    .registers = 128, .consumers = ws ? 2 : 0, .stages = 1 + data[5] % 3,
                    .persistent = ws, .snake = (data[5] >> 5) & 1,
                    .heavy_first = (data[5] >> 6) & 1};
  model_problem p = {.batch = 1, .heads = 2, .seq_q = 256, .seq_k = 256, .dim = 64,
                     .causal = data[5] >> 7, .elem_bytes = 2};
  model_built b;
  model_result r;
  char err[256];
  if (!m || model_build(m, t, &l, &p, &b, err, sizeof err) != 0) return;
  if (model_predict(m, &b, &l, &p, 0, &r, err, sizeof err) == 0) {
    if (!isfinite(r.time_us) || r.time_us <= 0 || !(r.tflops >= 0) || !(r.cycles_per_block >= 0))
      abort();
    model_result_free(&r);
  }
  model_built_free(&b);
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
  sass_trace tr;
  if (sass_analyse_trace(text, NULL, flops, &c, &tr, err, sizeof err) == 0) {
    check(&c);
    /* a trace of a real kernel's loop is at most a few thousand
    ** instructions; longer ones (huge trip counts) only slow the fuzzer */
    if (c.found && size >= 8 && tr.loop.n + tr.producer.n <= 4096) model_check(&tr, data);
    sass_trace_free(&tr);
  }
  if (model_cubin_registers(data, size, "f") > 255) abort();
  if (sass_functions(text, &names, &n, err, sizeof err) == 0) {
    for (size_t i = 0; i < n && i < 8; i++)
      if (sass_analyse(text, names[i], flops, &c, err, sizeof err) == 0) check(&c);
    free(names);
  }
  free(text);
  return 0;
}
