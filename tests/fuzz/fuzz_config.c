/*
** fuzz_config.c
** The generator's two ways of naming a variant on arbitrary text: a config
** ("k=v,...", as --config takes it) through gen_render_config, with and
** without a problem to complete it, and a name (as --variant takes it)
** through gen_render_name. One generator state serves every input, as it
** serves every variant of a run. A rendered kernel must have a name, a
** hash of 12 hex digits and a source; its name must render the same kernel.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gen.h"

static gen_state *g;
static gen_target target;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  char err[512];
  fz_tmpdir();
  if (gen_open(&g, err, sizeof err) != 0 || gen_target_for_arch(g, "sm_90", 0, 0, &target) != 0) {
    fprintf(stderr, "fuzz_config: %s\n", g ? gen_errmsg(g) : err);
    abort();
  }
  return 0;
}

static void check_kernel(const gen_kernel *k) {
  if (!k->name[0] || strlen(k->hash) != 12 || strspn(k->hash, "0123456789abcdef") != 12 ||
      !k->source || !k->source[0]) {
    fprintf(stderr, "fuzz_config: a rendered kernel without a name, hash or source\n");
    abort();
  }
}

/* A kernel's own name renders the same kernel. */
static void check_name_round_trip(const gen_kernel *k) {
  gen_kernel again;
  if (gen_render_name(g, k->name, &target, &again) != 0) {
    fprintf(stderr, "fuzz_config: %s does not render by name: %s\n", k->name, gen_errmsg(g));
    abort();
  }
  int same = !strcmp(again.hash, k->hash) && !strcmp(again.source_hash, k->source_hash);
  gen_kernel_free(&again);
  if (!same) {
    fprintf(stderr, "fuzz_config: %s renders another kernel by name\n", k->name);
    abort();
  }
}

static void render_config(const char *text, const fa_problem *p) {
  gen_kernel k;
  if (gen_render_config(g, text, p, &target, &k) != 0) return;
  check_kernel(&k);
  check_name_round_trip(&k);
  gen_kernel_free(&k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fz_cstr(data, size);
  const fa_problem p = {.dtype = FA_FP32, .dim = 64, .seq_q = 128, .seq_k = 128, .batch = 1,
                        .heads = 1};
  render_config(text, NULL);
  render_config(text, &p);
  gen_kernel k;
  if (gen_render_name(g, text, &target, &k) == 0) {
    check_kernel(&k);
    gen_kernel_free(&k);
  }
  free(text);
  return 0;
}
