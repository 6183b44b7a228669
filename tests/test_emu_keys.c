/*
** test_emu_keys.c
** Many problem keys in one process on the emulator:
**  - a compiled kernel object has no thread-local storage (no PT_TLS
**    segment): every object loaded with some takes a slice of the
**    process's static TLS, which runs out after about 200 of them;
**  - the library runs 300 problem keys (seq 1 to 300, fp64, dim 8) in one
**    context, each right against the float64 reference.
*/
#include <elf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_preludes.h"
#include "check.h"
#include "emu.h"
#include "fatune.h"
#include "fa_problem.h"
#include "reference.h"

#define NKEYS 300

static char dir[] = "/tmp/fatune-test-keys-XXXXXX";

/* 1 when the ELF object has a PT_TLS segment, 0 when not, -1 when it is
** not a 64-bit ELF object this test can read. */
static int has_tls(const unsigned char *obj, size_t size) {
  Elf64_Ehdr eh;
  if (size < sizeof eh) return -1;
  memcpy(&eh, obj, sizeof eh);
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > size ||
      (size - eh.e_phoff) / sizeof(Elf64_Phdr) < eh.e_phnum)
    return -1;
  for (int i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, obj + eh.e_phoff + (size_t)i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_TLS) return 1;
  }
  return 0;
}

static void test_no_tls(void) {
  emu_source src = {"t_plain", "FA_KERNEL(t_plain, 32)\n{\n  if (fa_tid() > 64) (void)p;\n}\n",
                    &emu_preludes};
  emu_build b;
  emu_compile_opts co = {.keep_objects = 1};
  char err[512];
  CHECK(emu_compile(&src, 1, &co, &b, err, sizeof err) == 0, "%s", err);
  CHECK(b.fn && b.object, "t_plain: %s", b.log ? b.log : "no object kept");
  if (b.object) {
    int tls = has_tls(b.object, b.object_size);
    CHECK(tls == 0, "the kernel object %s", tls < 0 ? "is no ELF64 object" : "has a PT_TLS segment");
  }
  emu_build_free(&b);
}

static unsigned long long rng = 11;
static double uniform(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0 - 0.5;
}

/* Runs p on c and returns the max error against the reference, or
** INFINITY with the library's message said when it fails. */
static double run(fatune_ctx *c, const fatune_problem *p) {
  const size_t nq = (size_t)p->seq_q * p->dim, nk = (size_t)p->seq_k * p->dim;
  double *q = malloc(nq * 8), *k = malloc(nk * 8), *v = malloc(nk * 8), *o = malloc(nq * 8),
         *ref = malloc(nq * 8);
  double worst = INFINITY;
  if (!q || !k || !v || !o || !ref) goto done;
  for (size_t i = 0; i < nq; i++) q[i] = uniform();
  for (size_t i = 0; i < nk; i++) k[i] = uniform(), v[i] = uniform();
  memset(o, 0xFF, nq * 8);
  fatune_status st = fatune_attention_forward(c, p, q, k, v, o, NULL, NULL);
  if (st != FATUNE_OK) {
    fprintf(stderr, "seq %d: status %d: %s\n", p->seq_q, (int)st, fatune_errmsg());
    goto done;
  }
  fa_problem fp = {.batch = 1, .heads = 1, .seq_q = p->seq_q, .seq_k = p->seq_k,
                   .dim = p->dim, .dtype = FA_FP64, .causal = p->causal};
  fa_layout lq = fa_layout_contiguous(&fp, p->seq_q), lk = fa_layout_contiguous(&fp, p->seq_k);
  if (ref_attention(&fp, q, lq, k, lk, v, lk, ref, lq, NULL) != 0) goto done;
  worst = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = fabs(o[i] - ref[i]);
    if (!(e <= worst)) worst = e;
  }
done:
  free(q), free(k), free(v), free(o), free(ref);
  return worst;
}

static void test_many_keys(void) {
  char path[64];
  snprintf(path, sizeof path, "%s/keys.db", dir);
  fatune_options opts = {.db_path = path, .backend = "emu"};
  fatune_ctx *c = NULL;
  fatune_status st = fatune_open(&opts, &c);
  CHECK(st == FATUNE_OK, "fatune_open: %s", fatune_errmsg());
  if (st != FATUNE_OK) return;
  int right = 0, first_bad = 0;
  for (int seq = 1; seq <= NKEYS; seq++) {
    fatune_problem p = {.batch = 1, .heads = 1, .seq_q = seq, .seq_k = seq, .dim = 8,
                        .dtype = FATUNE_FP64};
    if (run(c, &p) < 1e-12) right++;
    else if (!first_bad) first_bad = seq;
  }
  CHECK(right == NKEYS, "%d of %d keys right, the first wrong at seq %d", right, NKEYS,
        first_bad);
  fatune_close(c);
  printf("%d problem keys in one process: %d right\n", NKEYS, right);
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  char key[64];
  snprintf(key, sizeof key, "%s/test.key", dir);
  setenv("FATUNE_KEY", key, 1);
  test_no_tls();
  test_many_keys();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_emu_keys");
}
