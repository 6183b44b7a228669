/*
** space_build.h
** A default space rendered and compiled once for a test to run every
** variant of (test_bwd, test_decode): the variants, their kernels and
** their builds, under the generator's current modification.
*/
#ifndef SPACE_BUILD_H
#define SPACE_BUILD_H

#include <stdlib.h>

#include "backend.h"
#include "check.h"
#include "gen.h"

typedef struct space { gen_variant *v; gen_kernel *k; fa_build *b; size_t n; } space;

/* p's default space for target t on backend be; n 0 when nothing could be
** listed or allocated (and said so). */
static space space_build(gen_state *g, const gen_target *t, fa_backend *be, const fa_problem *p) {
  space s = {0};
  char err[512];
  CHECK(gen_list(g, p, t, "default", &s.v, &s.n) == 0, "%s", gen_errmsg(g));
  s.k = calloc(s.n ? s.n : 1, sizeof *s.k);
  s.b = calloc(s.n ? s.n : 1, sizeof *s.b);
  const gen_kernel **kp = calloc(s.n ? s.n : 1, sizeof *kp);
  if (!s.k || !s.b || !kp) {
    CHECK(0, "out of memory");
    free(s.k), free(s.b), free(kp);
    gen_variants_free(s.v, s.n);
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
  gen_variants_free(s->v, s->n);
  free(s->k), free(s->b);
}

#endif
