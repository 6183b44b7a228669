/*
** fuzz_mod.c
** A modification file is data from anyone: arbitrary text through the
** reader and the expression parser (gen_mod_load). What loads is then run
** both ways the host runs it: the float64 interpreter over variables and
** small captured tensors taken from the input, and the block classifier,
** which must be sound: a block it calls empty has no key seen, one it
** calls full no key hidden, by the interpreter at every pair. Built under
** the sanitizers, so an overflow in the interval arithmetic is a crash.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_mod.h"
#include "fuzz_util.h"
#include "gen.h"

static gen_state *g;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char err[512];
  fz_tmpdir();
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_mod: %s\n", err);
    abort();
  }
  return 0;
}

/* The input's last bytes pick the sizes, the ranges and the tensors'
** values; the rest is the file's text. */
static unsigned pick(const uint8_t *d, size_t n, size_t i) { return n ? d[i % n] : 0; }

static void check_blocks(const fa_mod *m, const fa_mod_data *dd, const uint8_t *d, size_t n) {
  const int seq_q = 1 + (int)pick(d, n, 1) % 24, seq_k = 1 + (int)pick(d, n, 2) % 24, heads = 2;
  const int q_lo = (int)pick(d, n, 3) % seq_q, k_lo = (int)pick(d, n, 4) % seq_k;
  const int q_hi = q_lo + (int)pick(d, n, 5) % (seq_q - q_lo), k_hi = k_lo + (int)pick(d, n, 6) % (seq_k - k_lo);
  const int h = (int)pick(d, n, 7) % heads;
  const int c = fa_mod_block(m, dd, 0, h, q_lo, q_hi, k_lo, k_hi, seq_q, seq_k, heads);
  if (c < 0 || c > 2) abort();
  for (int r = q_lo; r <= q_hi; r++)
    for (int k = k_lo; k <= k_hi; k++) {
      const double vars[FA_MV_COUNT] = {0.5, 0, h, r, k, seq_q, seq_k, heads};
      const int seen = m->nmask ? fa_mod_eval(m->mask, m->nmask, vars, dd) != 0 : 1;
      if ((c == 0 && seen) || (c == 2 && !seen)) {
        fprintf(stderr, "fuzz_mod: block rows %d..%d keys %d..%d classed %d, pair (%d, %d) %s\n",
                q_lo, q_hi, k_lo, k_hi, c, r, k, seen ? "seen" : "hidden");
        abort();
      }
      if (m->nscore) (void)fa_mod_eval(m->score, m->nscore, vars, dd);
      if (m->ndscore) (void)fa_mod_eval(m->dscore, m->ndscore, vars, dd);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FA_MOD_MAX_TEXT) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  static fa_mod m;
  if (gen_mod_load(g, "fuzz.lua", text, &m) == 0) {
    int ints[FA_MOD_MAX_TENSORS][32];
    float floats[FA_MOD_MAX_TENSORS][32];
    const void *ptr[FA_MOD_MAX_TENSORS];
    long long len[FA_MOD_MAX_TENSORS];
    for (int t = 0; t < FA_MOD_MAX_TENSORS; t++) {
      len[t] = pick(data, size, 8 + (size_t)t) % 33;
      for (int i = 0; i < 32; i++) {
        ints[t][i] = (int)(pick(data, size, (size_t)(t * 32 + i)) % 5) - 1;
        floats[t][i] = (float)ints[t][i] * 0.5f;
      }
      ptr[t] = m.tensor_type[t] == FA_MT_INT ? (const void *)ints[t] : (const void *)floats[t];
    }
    fa_mod_data dd;
    char why[160];
    if (fa_mod_data_init(&dd, &m, ptr, len, why, sizeof why) != 0) abort();
    check_blocks(&m, &dd, data, size);
    check_blocks(&m, NULL, data, size);
    long long need[FA_MOD_MAX_TENSORS];
    fa_mod_extent(&m, 2, 2, 30, 30, need);
    fa_mod_data_free(&dd);
  }
  free(text);
  return 0;
}
