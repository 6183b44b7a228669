/*
** space_build.h
** A default space rendered and compiled once for a test to run every
** variant of (test_bwd, test_decode): the variants, their kernels and
** their builds, under the generator's current modification.
** FATUNE_TEST_SAMPLE=N keeps the first variant and every Nth after it: the
** sanitizer build runs these tests so, for their host code, where the
** plain build has already run every kernel.
*/
#ifndef SPACE_BUILD_H
#define SPACE_BUILD_H

#include <stdlib.h>

#include "backend.h"
#include "check.h"
#include "gen.h"

/* n: the variants kept; listed: the space's, before FATUNE_TEST_SAMPLE. */
typedef struct space { gen_variant *v; gen_kernel *k; fa_build *b; size_t n, listed; } space;

/* FATUNE_TEST_SAMPLE's N, 1 when unset; a value that is not a whole number
** from 1 to 100 fails the test. */
static size_t space_sample(void) {
  const char *e = getenv("FATUNE_TEST_SAMPLE");
  if (!e || !*e) return 1;
  char *end;
  const long n = strtol(e, &end, 10);
  CHECK(*end == '\0' && n >= 1 && n <= 100, "FATUNE_TEST_SAMPLE='%s': a whole number, 1 to 100", e);
  return *end == '\0' && n >= 1 && n <= 100 ? (size_t)n : 1;
}

/* Keeps variants 0, every, 2 every, ... of v[0..n) at the front; how many. */
static size_t space_keep_every(gen_variant *v, size_t n, size_t every) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % every == 0) {
      gen_variant t = v[m];
      v[m++] = v[i];
      v[i] = t;
    }
  }
  return m;
}

/* p's default space for target t on backend be; n 0 when nothing could be
** listed or allocated (and said so). */
static space space_build(gen_state *g, const gen_target *t, fa_backend *be, const fa_problem *p) {
  space s = {0};
  char err[512];
  CHECK(gen_list(g, p, t, "default", &s.v, &s.n) == 0, "%s", gen_errmsg(g));
  s.listed = s.n;
  const size_t every = space_sample();
  if (every > 1 && s.n > 0) {
    s.n = space_keep_every(s.v, s.n, every);
    printf("FATUNE_TEST_SAMPLE=%zu: %zu of the %zu variants\n", every, s.n, s.listed);
  }
  s.k = calloc(s.n ? s.n : 1, sizeof *s.k);
  s.b = calloc(s.n ? s.n : 1, sizeof *s.b);
  const gen_kernel **kp = calloc(s.n ? s.n : 1, sizeof *kp);
  if (!s.k || !s.b || !kp) {
    CHECK(0, "out of memory");
    free(s.k), free(s.b), free(kp);
    gen_variants_free(s.v, s.listed);
    return (space){0};
  }
  for (size_t i = 0; i < s.n; i++) {
    CHECK(gen_render_config(g, s.v[i].config, p, t, &s.k[i]) == 0, "%s: %s", s.v[i].name,
          gen_errmsg(g));
    kp[i] = &s.k[i];
  }
  CHECK(backend_compile(be, kp, s.n, 0, s.b, err, sizeof err) == 0, "%s", err);
  free(kp);
  return s;
}

static void space_free(fa_backend *be, space *s) {
  for (size_t i = 0; i < s->n; i++) {
    backend_build_free(be, &s->b[i]);
    gen_kernel_free(&s->k[i]);
  }
  gen_variants_free(s->v, s->listed);
  free(s->k), free(s->b);
}

#endif
