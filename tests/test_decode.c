/*
** test_decode.c
** Decoding over a KV cache (op decode). The float64 reference against the
** forward pass's, run on each sequence's keys gathered here by hand: pages
** of 1, 3 and more tokens out of order, a page shared by two sequences,
** lengths 0, 1 and not a multiple of anything, GQA, the causal mask of the
** new tokens. Then every variant of the simtdec family's default space on
** the emulator, under two schedules, on such caches; the host's checks of
** a bad table or length before any launch; the kernel's own check of a
** page outside the pool, which it never reads and reports; every variant
** under a window, ALiBi and a softcap, and under the window with the pages
** it hides out of the pool; and FlashAttention-2's split heuristic on the
** cases its code comments give.
** The input seed is printed; FATUNE_TEST_SEED replays a run.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "space_build.h"
#include "fa_mod.h"
#include "fatune.h"
#include "estimate.h"
#include "model_sass.h"
#include "reference.h"
#include "validate.h"

static fa_backend *be;
static gen_state *gen;
static gen_target target;
static unsigned long long seed;

static double normal(uint64_t *s) {
  const double u = ((double)(val_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
  const double v = ((double)(val_rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* ref_decode on a hand-built cache against ref_attention per sequence and
** query head over keys gathered here: the same numbers to rounding. */
static void test_reference(int page, int group, int causal) {
  enum { B = 4, KVH = 2, SQ = 3, CAP = 11, D = 5 };
  static const int lens[B] = {11, 0, 1, 7};
  const int heads = KVH * group;
  fa_problem p = {.batch = B, .heads = heads, .seq_q = SQ, .seq_k = CAP, .dim = D,
                  .dtype = FA_FP64, .causal = causal, .op = FA_OP_DECODE, .kv_group = group,
                  .page = page, .kv_lens = lens};
  const int pps = fa_problem_pages_per_seq(&p), pg = fa_problem_page(&p);
  const int pages = B * pps + 1;
  uint64_t rng = seed;
  double *q = malloc((size_t)B * heads * SQ * D * sizeof *q);
  double *kp = malloc((size_t)pages * pg * KVH * D * sizeof *kp);
  double *vp = malloc((size_t)pages * pg * KVH * D * sizeof *vp);
  double *o = malloc((size_t)B * heads * SQ * D * sizeof *o), lse[B * 8 * SQ];
  int *table = malloc((size_t)B * pps * sizeof *table);
  if (!q || !kp || !vp || !o || !table) {
    CHECK(0, "out of memory");
    return;
  }
  for (size_t i = 0; i < (size_t)B * heads * SQ * D; i++) q[i] = normal(&rng);
  for (size_t i = 0; i < (size_t)pages * pg * KVH * D; i++) kp[i] = normal(&rng), vp[i] = normal(&rng);
  /* Pages in reverse order; sequence 3 starts on sequence 0's first page. */
  for (int b = 0; b < B; b++)
    for (int j = 0; j < pps; j++) table[b * pps + j] = pages - 1 - (b * pps + j);
  if (lens[3] >= pg) table[3 * pps] = table[0];
  const fa_layout kl = {(long long)pg * KVH * D, D, KVH * D};
  const ref_decode_io io = {.q = q, .ql = fa_layout_contiguous(&p, SQ), .k = kp, .v = vp,
                            .kl = kl, .vl = kl, .table = table, .num_pages = pages, .o = o,
                            .ol = fa_layout_contiguous(&p, SQ), .lse = lse};
  char err[256];
  CHECK(ref_op(&p, &io, err, sizeof err) == 0, "ref decode: %s", err);
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++) {
      const int len = lens[b], hk = h / group;
      if (len == 0) {  /* no key: zeros and -inf */
        for (int r = 0; r < SQ; r++) {
          const size_t at = ((size_t)b * heads + h) * SQ + r;
          CHECK(lse[at] == -INFINITY && o[at * D] == 0, "b%d h%d r%d: lse %g o %g", b, h, r,
                lse[at], o[at * D]);
        }
        continue;
      }
      double kd[CAP * D], vd[CAP * D], od[SQ * D], ld[SQ];
      for (int c = 0; c < len; c++)
        for (int d = 0; d < D; d++) {
          const long long row = (long long)table[b * pps + c / pg] * kl.sb + (c % pg) * kl.sn + hk * kl.sh;
          kd[c * D + d] = kp[row + d], vd[c * D + d] = vp[row + d];
        }
      fa_problem one = {.batch = 1, .heads = 1, .seq_q = SQ, .seq_k = len, .dim = D,
                        .dtype = FA_FP64, .causal = causal};
      const fa_layout lq = fa_layout_contiguous(&one, SQ), lk = fa_layout_contiguous(&one, len);
      CHECK(ref_attention(&one, q + ((size_t)b * heads + h) * SQ * D, lq, kd, lk, vd, lk, od, lq,
                          ld) == 0, "ref_attention b%d", b);
      for (int r = 0; r < SQ; r++) {
        const size_t at = ((size_t)b * heads + h) * SQ + r;
        if (ld[r] == -INFINITY) {
          CHECK(lse[at] == -INFINITY, "b%d h%d r%d: lse %g, no key", b, h, r, lse[at]);
          continue;
        }
        worst = fmax(worst, fabs(lse[at] - ld[r]));
        for (int d = 0; d < D; d++) worst = fmax(worst, fabs(o[at * D + d] - od[r * D + d]));
      }
    }
  CHECK(worst < 1e-12, "page %d group %d causal %d: differs by %g", page, group, causal, worst);
  /* A page outside the pool is the reference's error, never a read. */
  table[2 * pps] = pages;
  CHECK(ref_op(&p, &io, err, sizeof err) != 0, "a page outside the pool accepted");
  free(q), free(kp), free(vp), free(o), free(table);
}

/* Kernel k on problem p: its validation case (pages shuffled and shared,
** NaN past each length) under two schedules; the verdict. */
static int validate(const gen_kernel *k, const fa_program *prog, const fa_problem *p, double *worst) {
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case for %s: %s", k->name, err);
    return -1;
  }
  int rc = -1;
  if (val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "inputs for %s: %s", k->name, err);
  } else {
    val_opts o = {.nschedules = 2, .schedule = {FA_SCHED_FORWARD, FA_SCHED_SKEW}, .threads = 2};
    val_result r;
    CHECK(val_check(be, &c, &in, prog, k, &o, &r, err, sizeof err) == 0, "%s: %s", k->name, err);
    CHECK(r.status == VAL_OK, "%s on batch %d heads %d/%d seq_q %d seq_k %d page %d: %s", k->name,
          p->batch, p->heads, fa_problem_group(p), p->seq_q, p->seq_k, p->page, r.msg);
    if (r.rel_err > *worst) *worst = r.rel_err;
    rc = r.status == VAL_OK ? 0 : -1;
    attn_inputs_free(be, &in);
  }
  val_case_free(&c);
  return rc;
}

/* A default space rendered for a problem and compiled: its variants,
** their kernels and builds (a build without a program is a failure the
** caller reports). */
/* Every variant of the default space on caches of several page sizes. */
static void test_space(fa_dtype t, int dim, int group, int seq_q, int causal) {
  static const int lens[] = {45, 0, 1, 29, 45};
  static const int page_sizes[] = {0, 1, 7, 16};
  fa_problem p = {.batch = 5, .heads = 2 * group, .seq_q = seq_q, .seq_k = 45, .dim = dim,
                  .dtype = t, .causal = causal, .op = FA_OP_DECODE, .kv_group = group,
                  .kv_lens = lens};
  space sp = space_build(gen, &target, be, &p);
  const size_t n = sp.n;
  gen_kernel *ks = sp.k;
  fa_build *bs = sp.b;
  CHECK(n >= 6, "%s d%d: %zu decode variants", fa_dtype_name(t), dim, n);
  /* a group of more than 16 rows: tcdec's two-tile CTAs are in the space */
  int two_tiles = 0;
  for (size_t i = 0; i < n; i++) two_tiles += strstr(ks[i].name, "tcdec") && strstr(ks[i].name, "-m32");
  if (t != FA_FP32 && t != FA_FP64)
    CHECK((group * seq_q > 16) == (two_tiles > 0), "%s d%d, %d rows a group: %d tcdec variants "
          "of 32 rows", fa_dtype_name(t), dim, group * seq_q, two_tiles);
  for (size_t i = 0; i < n; i++) {
    const int split = strcmp(gen_config_get(&ks[i].cfg, "splits"), "1") != 0;
    CHECK(ks[i].op == FA_OP_DECODE && ks[i].nlaunch == 1 + split && ks[i].main == 0,
          "%s: op %s, %d launches", ks[i].name, fa_op_name(ks[i].op), ks[i].nlaunch);
  }
  double worst = 0;
  int ok = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (!bs[i].prog) continue;
    /* two page sizes a variant, every one of them over the space */
    fa_problem q = p, r = p;
    q.page = page_sizes[i % 4], r.page = page_sizes[(i + 2) % 4];
    ok += validate(&ks[i], bs[i].prog, &q, &worst) == 0 &&
          validate(&ks[i], bs[i].prog, &r, &worst) == 0;
  }
  printf("%s d%-3d gqa %d seq_q %d %-6s %zu variants x 2 page sizes, two schedules each: %d "
         "ok, worst error %.2e (tolerance %.0e)\n", fa_dtype_name(t), dim, group, seq_q,
         causal ? "causal" : "", n, ok, worst, val_tolerance(t));
  space_free(be, &sp);
}

/* One variant for p, compiled; 0 when it is. */
static int compile_one(const fa_problem *p, const char *config, gen_kernel *k, fa_build *b) {
  char err[512];
  memset(b, 0, sizeof *b);
  if (gen_render_config(gen, config, p, &target, k) != 0) {
    CHECK(0, "%s: %s", config, gen_errmsg(gen));
    return -1;
  }
  const gen_kernel *kp = k;
  CHECK(backend_compile(be, &kp, 1, 0, b, err, sizeof err) == 0 && b->prog, "%s: %s", k->name,
        b->log ? b->log : err);
  return b->prog ? 0 : -1;
}

/* Under a sliding window of `left` keys the decoding kernels read only the
** blocks the window reaches: kernel k (compiled for p's kind) over 700,
** 333, 0 and 129 keys with the table's entries for the pages wholly
** before the 128-key block of a sequence's first visible key naming no
** page of the pool. It must give the reference's O without raising the
** flag of a page outside the pool, which it would on reading one. The
** hidden pages' count into *hidden; 0 when it does. */
static int skips_hidden(const gen_kernel *k, const fa_program *prog, const fa_problem *p, int left,
                        int *hidden) {
  static const int lens[] = {700, 333, 0, 129};
  enum { PAGE = 16 };
  fa_problem q = *p;
  q.batch = 4, q.seq_k = 704, q.page = PAGE, q.kv_lens = lens;
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, &q, seed++, err, sizeof err) != 0) {
    CHECK(0, "case: %s", err);
    return -1;
  }
  int rc = -1;
  /* the table the host checks, then the kernel's with the hidden pages out */
  if (val_inputs_upload(be, &c, &in, err, sizeof err) != 0) {
    CHECK(0, "inputs: %s", err);
    val_case_free(&c);
    return -1;
  }
  const int pps = fa_problem_pages_per_seq(&q);
  *hidden = 0;
  for (int s = 0; s < q.batch; s++) {
    const int first = lens[s] - q.seq_q - left;  /* the first new token's first visible key */
    for (int pg = 0; first > 0 && (pg + 1) * PAGE <= first / 128 * 128; pg++, (*hidden)++)
      c.table[s * pps + pg] = c.num_pages;
  }
  CHECK(backend_upload(be, in.table, c.table, (size_t)q.batch * pps * sizeof(int), err,
                       sizeof err) == 0, "table: %s", err);
  val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_SKEW}, .threads = 2};
  val_result r;
  CHECK(val_check(be, &c, &in, prog, k, &o, &r, err, sizeof err) == 0, "%s: %s", k->name, err);
  CHECK(r.status == VAL_OK, "%s with %d pages the window hides out of the pool: %s", k->name,
        *hidden, r.msg);
  rc = r.status == VAL_OK ? 0 : -1;
  attn_inputs_free(be, &in);
  val_case_free(&c);
  return rc;
}

/* Every variant of the default decoding space under modification spec,
** on sequences long enough for a window to leave whole blocks out, one
** page size a variant (1, 7, 16 and none in turn); for a window of
** `left` keys (-1: none), skips_hidden too. */
static void test_space_mod(const char *spec, int left, fa_dtype t, int dim, int group,
                           int seq_q, int causal) {
  static const int lens[] = {200, 0, 1, 97, 160};
  static const int page_sizes[] = {1, 7, 16, 0};
  fa_mod mod;
  if (gen_mod_load(gen, spec, NULL, &mod) != 0 || gen_set_mod(gen, &mod) != 0) {
    CHECK(0, "%s: %s", spec, gen_errmsg(gen));
    return;
  }
  fa_problem p = {.batch = 5, .heads = 2 * group, .seq_q = seq_q, .seq_k = 200, .dim = dim,
                  .dtype = t, .causal = causal, .op = FA_OP_DECODE, .kv_group = group,
                  .kv_lens = lens, .mod = &mod};
  space sp = space_build(gen, &target, be, &p);
  const size_t n = sp.n;
  gen_kernel *ks = sp.k;
  fa_build *bs = sp.b;
  for (size_t i = 0; i < n; i++)
    CHECK(strstr(ks[i].source, "fa_mod_setup") != NULL, "%s: no modification in its source",
          ks[i].name);
  double worst = 0;
  int ok = 0, skipped = 0, hidden = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (!bs[i].prog) continue;
    fa_problem q = p;
    q.page = page_sizes[i % 4];
    ok += validate(&ks[i], bs[i].prog, &q, &worst) == 0;
    if (left >= 0) skipped += skips_hidden(&ks[i], bs[i].prog, &p, left, &hidden) == 0;
  }
  printf("%s %s d%-3d gqa %d seq_q %d %-6s %zu variants, two schedules each: %d ok, worst error "
         "%.2e (tolerance %.0e)\n", spec, fa_dtype_name(t), dim, group, seq_q,
         causal ? "causal" : "", n, ok, worst, val_tolerance(t));
  if (left >= 0) {
    CHECK(hidden >= 30, "only %d pages hidden", hidden);
    printf("  over 700, 333, 0, 129 keys with the %d pages the window hides out of the pool: %d "
           "variants read none of them\n", hidden, skipped);
  }
  space_free(be, &sp);
  gen_set_mod(gen, NULL);
}

/* Kernel k (wg's paged form) on pages of `page` rows, no multiple of its
** boxes' 16: refused before launch, with the reason. */
static void refuse_pages(const gen_kernel *k, const fa_program *prog, const fa_problem *p,
                         int page) {
  fa_problem q = *p;
  q.page = page;
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, &q, seed++, err, sizeof err) != 0) {
    CHECK(0, "case for %s: %s", k->name, err);
    return;
  }
  if (val_inputs_upload(be, &c, &in, err, sizeof err) == 0) {
    val_opts o = {.nschedules = 1, .schedule = {FA_SCHED_FORWARD}, .threads = 1};
    val_result r;
    const int rc = val_check(be, &c, &in, prog, k, &o, &r, err, sizeof err);
    const char *why = rc ? err : r.msg;
    CHECK((rc != 0 || r.status != VAL_OK) && strstr(why, "boxes of 16 rows") &&
          strstr(why, "pages of 24 rows"), "%s on pages of %d: %s", k->name, page, why);
    attn_inputs_free(be, &in);
  } else {
    CHECK(0, "inputs for %s: %s", k->name, err);
  }
  val_case_free(&c);
}

/* Every variant of a family's default forward space in its paged form
** (prefill over a KV cache) on the decoding validation cases: pages
** shuffled and shared, NaN past each length, pages of 1 to 80 tokens
** (FATUNE_TEST_SAMPLE: every Nth, as space_build). tc on sm_80; wg on
** sm_90a, whose boxes of 16 rows take pages of a multiple of 16 (a
** sequence's end among 16 rows loaded a row at a time), and refuse others
** with the reason. */
static void test_paged_space(const char *family, fa_dtype t, int dim, int group, int seq_q,
                             int causal, const int lens[5], int seq_k) {
  static const int tc_pages[] = {1, 16, 48, 80}, wg_pages[] = {16, 48, 32, 80, 64};
  const int hopper = !strcmp(family, "wg");
  const int *page_sizes = hopper ? wg_pages : tc_pages, npages = hopper ? 5 : 4;
  gen_target tg = target;
  if (hopper && gen_target_for_arch(gen, "sm_90a", 0, 0, &tg) != 0) {
    CHECK(0, "no target sm_90a: %s", gen_errmsg(gen));
    return;
  }
  char prefix[16];
  snprintf(prefix, sizeof prefix, "%s-", family);
  const fa_problem fwd = {.batch = 5, .heads = 2 * group, .seq_q = seq_q, .seq_k = seq_k,
                          .dim = dim, .dtype = t, .causal = causal, .kv_group = group, .paged = 1};
  fa_problem p = fwd;
  p.op = FA_OP_DECODE, p.paged = 0, p.kv_lens = lens;
  gen_variant *v;
  size_t n;
  char err[512];
  CHECK(gen_list(gen, &fwd, &tg, "default", &v, &n) == 0, "%s", gen_errmsg(gen));
  gen_kernel *ks = calloc(n, sizeof *ks);
  fa_build *bs = calloc(n, sizeof *bs);
  const gen_kernel **kp = calloc(n, sizeof *kp);
  if (!ks || !bs || !kp) {
    CHECK(0, "out of memory");
    return;
  }
  size_t m = 0, listed = 0;
  const size_t every = space_sample();
  for (size_t i = 0; i < n; i++) {
    if (strncmp(v[i].name, prefix, strlen(prefix)) || listed++ % every) continue;
    CHECK(gen_render_config(gen, v[i].config, &fwd, &tg, &ks[m]) == 0, "%s: %s", v[i].name,
          gen_errmsg(gen));
    CHECK(strstr(ks[m].name, "-paged") != NULL, "%s: not the paged form", ks[m].name);
    kp[m] = &ks[m];
    m++;
  }
  CHECK(listed >= (hopper ? 6u : 20u), "%s %s d%d: %zu paged variants", family,
        fa_dtype_name(t), dim, listed);
  CHECK(backend_compile(be, kp, m, 0, bs, err, sizeof err) == 0, "%s", err);
  double worst = 0;
  int ok = 0;
  for (size_t i = 0; i < m; i++) {
    CHECK(bs[i].prog, "%s: %s", ks[i].name, bs[i].log ? bs[i].log : "?");
    if (!bs[i].prog) continue;
    fa_problem q = p;
    q.page = page_sizes[i % (size_t)npages];
    /* wg's boxes of more rows (page_rows): pages of one or two boxes */
    const char *rows = gen_config_get(&ks[i].cfg, "page_rows");
    if (rows) q.page = atoi(rows) * (int)(1 + i % 2);
    ok += validate(&ks[i], bs[i].prog, &q, &worst) == 0;
  }
  if (hopper && m && bs[0].prog) refuse_pages(&ks[0], bs[0].prog, &p, 24);
  printf("%s %s d%-3d gqa %d seq_q %d %-6s %zu paged forward variants, two schedules each: %d "
         "ok, worst error %.2e (tolerance %.0e)\n", family, fa_dtype_name(t), dim, group, seq_q,
         causal ? "causal" : "", m, ok, worst, val_tolerance(t));
  for (size_t i = 0; i < m; i++) {
    backend_build_free(be, &bs[i]);
    gen_kernel_free(&ks[i]);
  }
  gen_variants_free(v, n);
  free(ks), free(bs), free(kp);
}

/* Bad metadata: a length over the capacity, a negative one, a table entry
** outside the pool, checked on the host before any launch; an entry the
** host did not check (the pool said larger than it is) met by the kernel,
** which skips that page's keys and raises its error flag. */
static void test_bad_input(void) {
  static const int lens[2] = {20, 9}, over[2] = {20, 21}, negative[2] = {-1, 9};
  fa_problem p = {.batch = 2, .heads = 2, .seq_q = 1, .seq_k = 20, .dim = 8, .dtype = FA_FP32,
                  .op = FA_OP_DECODE, .page = 4, .kv_lens = lens};
  char err[512];
  val_case c;
  attn_inputs in;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case: %s", err);
    return;
  }
  fa_problem bad = c.p;
  bad.kv_lens = over;
  CHECK(attn_decode_inputs_upload(be, &bad, c.q, c.k, c.v, c.num_pages, c.table, &in, err,
                                  sizeof err) == FA_EINVAL && strstr(err, "outside 0..20"),
        "a length over the capacity: %s", err);
  bad.kv_lens = negative;
  CHECK(attn_decode_inputs_upload(be, &bad, c.q, c.k, c.v, c.num_pages, c.table, &in, err,
                                  sizeof err) == FA_EINVAL, "a negative length accepted");
  const int keep = c.table[1];
  c.table[1] = c.num_pages;
  CHECK(attn_decode_inputs_upload(be, &c.p, c.q, c.k, c.v, c.num_pages, c.table, &in, err,
                                  sizeof err) == FA_EINVAL && strstr(err, "outside the pool"),
        "a page outside the pool: %s", err);
  c.table[1] = keep;
  /* The kernel's own check: the pool claimed one page short, so that the
  ** last real page's index is out of range on the device. */
  int last = 0;   /* the highest page a key is read from (not the NaN page past the ends) */
  const int pps = fa_problem_pages_per_seq(&p);
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < (lens[b] + 3) / 4; j++)
      last = c.table[b * pps + j] > last ? c.table[b * pps + j] : last;
  gen_kernel k;
  fa_build b;
  if (compile_one(&p, "family=simtdec,rows=1,block_n=8,warps=1,splits=2", &k, &b) == 0 &&
      attn_decode_inputs_upload(be, &c.p, c.q, c.k, c.v, c.num_pages, c.table, &in, err,
                                sizeof err) == 0) {
    in.num_pages = last;   /* page `last` now lies outside */
    size_t bytes[ATTN_MAX_OUTPUTS];
    const int nout = attn_outputs(&p, bytes);
    void *host[ATTN_MAX_OUTPUTS] = {NULL};
    for (int i = 0; i < nout; i++) host[i] = malloc(bytes[i]);
    const fa_run_opts ro = {.smem_fill = 0xFF};
    err[0] = 0;
    const int rc = attn_run_op(be, b.prog, &k, &p, &in, &ro, host, NULL, NULL, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "outside the pool"), "the kernel's flag: rc %d, %s", rc, err);
    for (int i = 0; i < nout; i++) free(host[i]);
    attn_inputs_free(be, &in);
  }
  backend_build_free(be, &b);
  gen_kernel_free(&k);
  val_case_free(&c);
}

/* A tensor of the library's over a contiguous or strided host buffer. */
static fatune_tensor host_tensor(void *data, fa_dtype t, long long a, long long b, long long c,
                                 long long d, const long long stride[4]) {
  fatune_tensor x = {.data = data, .dtype = (fatune_dtype)t, .shape = {a, b, c, d}};
  for (int i = 0; i < 4; i++) x.stride[i] = stride[i];
  return x;
}

/* A library context on the emulator over a new database at dbpath (a
** mkstemp template, filled in); NULL, said, when it cannot open. */
static fatune_ctx *emu_context_for(char *dbpath, const char *arch) {
  const int fd = mkstemp(dbpath);
  CHECK(fd >= 0, "mkstemp");
  if (fd >= 0) close(fd);
  const fatune_options opts = {.db_path = dbpath, .backend = "emu", .emu_arch = arch};
  fatune_ctx *ctx = NULL;
  CHECK(fatune_open(&opts, &ctx) == FATUNE_OK, "fatune_open: %s", fatune_errmsg());
  return ctx;
}

static fatune_ctx *emu_context(char *dbpath) { return emu_context_for(dbpath, NULL); }

/* libfatune's fatune_attention_kvcache on the emulator against the float64
** reference: a paged cache (the validation case's pool and table), the
** same cache laid out contiguously (no block table), and bad arguments
** refused before any launch or reported after it. */
static void test_library(void) {
  static const int lens[3] = {37, 0, 20};
  fa_problem p = {.batch = 3, .heads = 4, .seq_q = 2, .seq_k = 40, .dim = 16, .dtype = FA_BF16,
                  .causal = 1, .op = FA_OP_DECODE, .kv_group = 2, .page = 8, .kv_lens = lens};
  char err[512], dbpath[] = "/tmp/fatune-test-decode-XXXXXX";
  val_case c;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case: %s", err);
    return;
  }
  fatune_ctx *ctx = emu_context(dbpath);
  const int kvh = 2, pps = fa_problem_pages_per_seq(&p);
  const size_t es = 2, rows = 3 * 4 * 2;
  unsigned short *o = malloc(rows * 16 * es);
  float *lse = malloc(rows * sizeof *lse);
  int *seqlens = malloc(3 * sizeof *seqlens);
  if (!ctx || !o || !lse || !seqlens) {
    CHECK(0, "setup");
    goto done;
  }
  memcpy(seqlens, lens, sizeof lens);
  const long long qs[4] = {4 * 2 * 16, 2 * 16, 16, 1};
  const long long ks[4] = {8 * kvh * 16, kvh * 16, 16, 1};
  fatune_kvcache_args x = {
    .q = host_tensor(c.q, FA_BF16, 3, 4, 2, 16, qs),
    .k_cache = host_tensor(c.k, FA_BF16, c.num_pages, 8, kvh, 16, ks),
    .v_cache = host_tensor(c.v, FA_BF16, c.num_pages, 8, kvh, 16, ks),
    .o = host_tensor(o, FA_BF16, 3, 4, 2, 16, qs), .lse = lse,
    .block_table = c.table, .pages_per_seq = pps, .cache_seqlens = seqlens, .causal = 1};
  memset(o, 0xFF, rows * 16 * es);
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_OK, "paged: %s", fatune_errmsg());
  const void *got[2] = {o, lse};
  val_result r;
  val_judge(&c, got, &r);
  CHECK(r.status == VAL_OK, "paged through libfatune: %s", r.msg);
  /* Planned once, run twice (the table emptied between: the plan keeps its
  ** own kernel), a bad page met by a run and said by the check, once. */
  fatune_decode_plan *plan = NULL;
  CHECK(fatune_decode_plan_create(ctx, &x, &plan) == FATUNE_OK, "plan: %s", fatune_errmsg());
  for (int run = 0; plan && run < 2; run++) {
    memset(o, 0xFF, rows * 16 * es);
    CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK, "plan run %d: %s", run, fatune_errmsg());
    CHECK(fatune_decode_plan_check(plan) == FATUNE_OK, "plan check %d: %s", run, fatune_errmsg());
    val_judge(&c, got, &r);
    CHECK(r.status == VAL_OK, "planned run %d: %s", run, r.msg);
    CHECK(fatune_forget(ctx) == FATUNE_OK, "forget: %s", fatune_errmsg());
  }
  if (plan) {
    const int kept = c.table[1];
    c.table[1] = c.num_pages + 5;
    CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK, "a run queues: %s", fatune_errmsg());
    c.table[1] = kept;
    CHECK(fatune_decode_plan_check(plan) == FATUNE_EINVAL &&
          strstr(fatune_errmsg(), "outside the pool"), "the check says: %s", fatune_errmsg());
    CHECK(fatune_decode_plan_check(plan) == FATUNE_OK, "then clears: %s", fatune_errmsg());
    fatune_kvcache_args other = x;
    other.causal = 0;
    CHECK(fatune_decode_plan_run(plan, &other) == FATUNE_EINVAL &&
          strstr(fatune_errmsg(), "plan"), "another problem refused: %s", fatune_errmsg());
    CHECK(strncmp(fatune_decode_plan_variant(plan), "simtdec-bf16-d16", 16) == 0 ||
          strncmp(fatune_decode_plan_variant(plan), "tcdec-bf16-d16", 14) == 0,
          "the plan's variant: %s", fatune_decode_plan_variant(plan));
  }
  fatune_decode_plan_free(plan);
  /* The same cache contiguous: sequence b's pages one after the other. */
  unsigned short *kc = malloc((size_t)3 * 40 * kvh * 16 * es), *vc = malloc((size_t)3 * 40 * kvh * 16 * es);
  if (kc && vc) {
    for (int b = 0; b < 3; b++)
      for (int j = 0; j < pps; j++) {
        const size_t page_bytes = (size_t)8 * kvh * 16 * es;
        memcpy((char *)kc + ((size_t)b * 40 + j * 8) * kvh * 16 * es,
               (char *)c.k + (size_t)c.table[b * pps + j] * page_bytes, page_bytes);
        memcpy((char *)vc + ((size_t)b * 40 + j * 8) * kvh * 16 * es,
               (char *)c.v + (size_t)c.table[b * pps + j] * page_bytes, page_bytes);
      }
    const long long cs[4] = {40 * kvh * 16, kvh * 16, 16, 1};
    fatune_kvcache_args y = x;
    y.k_cache = host_tensor(kc, FA_BF16, 3, 40, kvh, 16, cs);
    y.v_cache = host_tensor(vc, FA_BF16, 3, 40, kvh, 16, cs);
    y.block_table = NULL, y.pages_per_seq = 0;
    memset(o, 0xFF, rows * 16 * es);
    CHECK(fatune_attention_kvcache(ctx, &y) == FATUNE_OK, "contiguous: %s", fatune_errmsg());
    val_judge(&c, got, &r);
    CHECK(r.status == VAL_OK, "contiguous through libfatune: %s", r.msg);
    /* A length past the capacity: cut, run, and said. */
    seqlens[2] = 41;
    CHECK(fatune_attention_kvcache(ctx, &y) == FATUNE_EINVAL &&
          strstr(fatune_errmsg(), "capacity"), "a length of 41 in 40: %s", fatune_errmsg());
    seqlens[2] = 20;
  }
  /* The same rows permuted in a cache of four, one of them poison, picked
  ** by cache_batch_idx; an index past the cache met by the kernel; and
  ** with a block table refused. */
  const size_t row = (size_t)40 * kvh * 16 * es;
  unsigned short *kp = malloc(4 * row), *vp = malloc(4 * row);
  int *idx = malloc(3 * sizeof *idx);
  if (kc && vc && kp && vp && idx) {
    static const int where[3] = {2, 0, 3};
    memset(kp, 0xFF, 4 * row), memset(vp, 0xFF, 4 * row);   /* NaN in bf16 */
    for (int b = 0; b < 3; b++) {
      memcpy((char *)kp + where[b] * row, (char *)kc + b * row, row);
      memcpy((char *)vp + where[b] * row, (char *)vc + b * row, row);
    }
    memcpy(idx, where, sizeof where);
    const long long cs[4] = {40 * kvh * 16, kvh * 16, 16, 1};
    fatune_kvcache_args y = x;
    y.k_cache = host_tensor(kp, FA_BF16, 4, 40, kvh, 16, cs);
    y.v_cache = host_tensor(vp, FA_BF16, 4, 40, kvh, 16, cs);
    y.block_table = NULL, y.pages_per_seq = 0, y.cache_batch_idx = idx;
    memset(o, 0xFF, rows * 16 * es);
    CHECK(fatune_attention_kvcache(ctx, &y) == FATUNE_OK, "cache_batch_idx: %s", fatune_errmsg());
    val_judge(&c, got, &r);
    CHECK(r.status == VAL_OK, "cache_batch_idx through libfatune: %s", r.msg);
    idx[0] = 4;
    CHECK(fatune_attention_kvcache(ctx, &y) == FATUNE_EINVAL &&
          strstr(fatune_errmsg(), "cache_batch_idx"), "a row past the cache: %s",
          fatune_errmsg());
    idx[0] = 2;
    fatune_kvcache_args both = x;
    both.cache_batch_idx = idx;
    CHECK(fatune_attention_kvcache(ctx, &both) == FATUNE_EINVAL &&
          strstr(fatune_errmsg(), "not both"), "a table and cache_batch_idx: %s",
          fatune_errmsg());
  }
  free(kc), free(vc), free(kp), free(vp), free(idx);
  /* A page outside the pool, met by the kernel. */
  const int keep = c.table[1];
  c.table[1] = c.num_pages + 5;
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "outside the pool"), "a page outside the pool: %s",
        fatune_errmsg());
  c.table[1] = keep;
  /* Refused before any launch. */
  fatune_kvcache_args bad = x;
  bad.cache_seqlens = NULL;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "cache_seqlens"), "no lengths: %s", fatune_errmsg());
  bad = x, bad.k_cache.shape[2] = 3, bad.v_cache.shape[2] = 3;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "no multiple"), "3 K/V heads for 4: %s", fatune_errmsg());
  bad = x, bad.pages_per_seq = 0;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "pages_per_seq"), "no pages per sequence: %s", fatune_errmsg());
  bad = x, bad.max_seqlen_k = 1000;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "max_seqlen_k"), "max_seqlen_k past the capacity: %s",
        fatune_errmsg());
done:
  fatune_close(ctx);
  unlink(dbpath);
  free(o), free(lse), free(seqlens);
  val_case_free(&c);
}

/* Untuned, a group of more query rows than tcdec's 16-row tile (3 new
** tokens under GQA 8: 24) runs the rows=32 form, one CTA a group (past
** head dim 128 with 8 warps), judged against the float64 reference; a
** group of 16 rows keeps the default. */
static void test_wide_default(int seq_q, int dim) {
  static const int lens[2] = {37, 20};
  fa_problem p = {.batch = 2, .heads = 16, .seq_q = seq_q, .seq_k = 40, .dim = dim,
                  .dtype = FA_BF16, .causal = 1, .op = FA_OP_DECODE, .kv_group = 8, .page = 8,
                  .kv_lens = lens};
  char err[512], dbpath[] = "/tmp/fatune-test-decode-XXXXXX";
  val_case c;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case: %s", err);
    return;
  }
  fatune_ctx *ctx = emu_context(dbpath);
  const size_t rows = (size_t)2 * 16 * seq_q;
  unsigned short *o = malloc(rows * dim * 2);
  float *lse = malloc(rows * sizeof *lse);
  int *seqlens = malloc(sizeof lens);
  fatune_decode_plan *plan = NULL;
  if (!ctx || !o || !lse || !seqlens) {
    CHECK(0, "setup");
    goto done;
  }
  memcpy(seqlens, lens, sizeof lens);
  const long long qs[4] = {16LL * seq_q * dim, (long long)seq_q * dim, dim, 1};
  const long long ks[4] = {8LL * 2 * dim, 2LL * dim, dim, 1};
  fatune_kvcache_args x = {
    .q = host_tensor(c.q, FA_BF16, 2, 16, seq_q, dim, qs),
    .k_cache = host_tensor(c.k, FA_BF16, c.num_pages, 8, 2, dim, ks),
    .v_cache = host_tensor(c.v, FA_BF16, c.num_pages, 8, 2, dim, ks),
    .o = host_tensor(o, FA_BF16, 2, 16, seq_q, dim, qs), .lse = lse,
    .block_table = c.table, .pages_per_seq = fa_problem_pages_per_seq(&p),
    .cache_seqlens = seqlens, .causal = 1};
  CHECK(fatune_decode_plan_create(ctx, &x, &plan) == FATUNE_OK, "plan: %s", fatune_errmsg());
  if (!plan) goto done;
  const char *v = fatune_decode_plan_variant(plan);
  const int wide = strstr(v, "tcdec") && strstr(v, dim > 128 ? "-m32n64w8" : "-m32n64w4");
  CHECK(wide == (8 * seq_q > 16), "%d rows a group, d%d: the default %s", 8 * seq_q, dim, v);
  memset(o, 0xFF, rows * dim * 2);
  CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK, "run: %s", fatune_errmsg());
  CHECK(fatune_decode_plan_check(plan) == FATUNE_OK, "check: %s", fatune_errmsg());
  const void *got[2] = {o, lse};
  val_result r;
  val_judge(&c, got, &r);
  CHECK(r.status == VAL_OK, "%s through libfatune: %s", v, r.msg);
  printf("gqa 8, %d new tokens, d%d, untuned: %s, error %.3e\n", seq_q, dim, v, r.rel_err);
done:
  fatune_decode_plan_free(plan);
  fatune_close(ctx);
  unlink(dbpath);
  free(o), free(lse), free(seqlens);
  val_case_free(&c);
}

/* The prefill of x again over the same cache laid out contiguously (no
** block table: each sequence's pages one after the other, NaN past its
** length as in the pool), the batch rows in reverse, picked by
** cache_batch_idx; its variant route's (the capacity a multiple of 16). */
static void prefill_contiguous(fatune_ctx *ctx, const val_case *c, const fatune_kvcache_args *x,
                               const char *route, int pps, int P, int kvh, const void *const got[2]) {
  const int B = (int)x->q.shape[0], dim = (int)x->q.shape[3], cap = pps * P;
  const fa_dtype t = (fa_dtype)x->q.dtype;
  const size_t row = (size_t)kvh * dim * (size_t)fa_dtype_size(t), pb = (size_t)P * row;
  unsigned char *kc = malloc((size_t)B * cap * row), *vc = malloc((size_t)B * cap * row);
  int *idx = malloc((size_t)B * sizeof *idx);
  fatune_decode_plan *plan = NULL;
  if (!kc || !vc || !idx) {
    CHECK(0, "out of memory");
    goto done;
  }
  for (int b = 0; b < B; b++) {
    idx[b] = B - 1 - b;
    for (int j = 0; j < pps; j++) {
      const size_t to = ((size_t)(B - 1 - b) * cap + (size_t)j * P) * row;
      memcpy(kc + to, (const char *)c->k + (size_t)c->table[b * pps + j] * pb, pb);
      memcpy(vc + to, (const char *)c->v + (size_t)c->table[b * pps + j] * pb, pb);
    }
  }
  const long long cs[4] = {(long long)cap * kvh * dim, (long long)kvh * dim, dim, 1};
  fatune_kvcache_args y = *x;
  y.k_cache = host_tensor(kc, t, B, cap, kvh, dim, cs);
  y.v_cache = host_tensor(vc, t, B, cap, kvh, dim, cs);
  y.block_table = NULL, y.pages_per_seq = 0, y.cache_batch_idx = idx;
  const size_t out = (size_t)x->o.shape[0] * x->o.shape[1] * x->o.shape[2] * x->o.shape[3];
  memset(x->o.data, 0xFF, out * (size_t)fa_dtype_size(t));
  CHECK(fatune_attention_kvcache(ctx, &y) == FATUNE_OK, "contiguous: %s", fatune_errmsg());
  val_result r;
  val_judge(c, got, &r);
  CHECK(r.status == VAL_OK, "contiguous prefill (cache_batch_idx): %s", r.msg);
  CHECK(fatune_decode_plan_create(ctx, &y, &plan) == FATUNE_OK, "plan: %s", fatune_errmsg());
  if (plan)
    CHECK(!strncmp(fatune_decode_plan_variant(plan), route, strlen(route)),
          "a contiguous cache of %d rows runs %s's paged form, not %s", cap, route,
          fatune_decode_plan_variant(plan));
done:
  fatune_decode_plan_free(plan);
  free(kc), free(vc), free(idx);
}

/* Many new tokens (prefill): libfatune runs the forward pass's form over
** the KV cache on the emulator, judged against the float64 reference:
** pages of `page` tokens, shuffled, the first page of every other
** sequence shared with the one before, the table's unused entries on a
** page of NaN; then planned, a page outside the pool, and a length past
** the capacity. On arch (NULL: the emulator's default) the variant is
** route's paged form: "tc-", or "wg-" (sm_90a; and its boxes of
** box_rows rows, page_rows). */
static void test_prefill_on(const char *arch, const char *route, int box_rows, fa_dtype t, int dim,
                            int group, int page, int causal, int seq_q, const int lens[3]) {
  enum { B = 3, H = 4 };
  const int cap = 200, kvh = H / group;
  int kv_lens[B];
  memcpy(kv_lens, lens, sizeof kv_lens);
  fa_problem p = {.batch = B, .heads = H, .seq_q = seq_q, .seq_k = cap, .dim = dim, .dtype = t,
                  .causal = causal, .op = FA_OP_DECODE, .kv_group = group, .page = page,
                  .kv_lens = kv_lens};
  char err[512], dbpath[] = "/tmp/fatune-test-prefill-XXXXXX";
  val_case c;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "prefill case: %s", err);
    return;
  }
  fatune_ctx *ctx = emu_context_for(dbpath, arch);
  const int pps = fa_problem_pages_per_seq(&p), P = fa_problem_page(&p);
  const size_t es = 2, rows = (size_t)B * H * seq_q;
  unsigned short *o = malloc(rows * dim * es);
  float *lse = malloc(rows * sizeof *lse);
  int *seqlens = malloc(B * sizeof *seqlens);
  fatune_decode_plan *plan = NULL;
  if (!ctx || !o || !lse || !seqlens) {
    CHECK(0, "setup");
    goto done;
  }
  memcpy(seqlens, lens, sizeof kv_lens);
  const long long qs[4] = {(long long)H * seq_q * dim, (long long)seq_q * dim, dim, 1};
  const long long ks[4] = {(long long)P * kvh * dim, (long long)kvh * dim, dim, 1};
  fatune_kvcache_args x = {
    .q = host_tensor(c.q, t, B, H, seq_q, dim, qs),
    .k_cache = host_tensor(c.k, t, c.num_pages, P, kvh, dim, ks),
    .v_cache = host_tensor(c.v, t, c.num_pages, P, kvh, dim, ks),
    .o = host_tensor(o, t, B, H, seq_q, dim, qs), .lse = lse,
    .block_table = c.table, .pages_per_seq = pps, .cache_seqlens = seqlens, .causal = causal};
  const void *got[2] = {o, lse};
  val_result r;
  memset(o, 0xFF, rows * dim * es);
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_OK, "prefill: %s", fatune_errmsg());
  val_judge(&c, got, &r);
  CHECK(r.status == VAL_OK, "prefill %s d%d group %d page %d%s, %d new tokens: %s",
        fa_dtype_name(t), dim, group, page, causal ? " causal" : "", seq_q, r.msg);
  CHECK(fatune_decode_plan_create(ctx, &x, &plan) == FATUNE_OK, "plan: %s", fatune_errmsg());
  if (plan) {
    const char *v = fatune_decode_plan_variant(plan);
    char want[16] = "";
    if (box_rows > 16) snprintf(want, sizeof want, "-pr%d", box_rows);
    CHECK(!strncmp(v, route, strlen(route)) && strstr(v, "-paged") && strstr(v, want) &&
          (box_rows > 16 || !strstr(v, "-pr")), "%d new tokens on pages of %d run %s's paged form%s%s, "
          "not %s", seq_q, page, route, box_rows > 16 ? " in boxes of " : "", want, v);
    printf("prefill %s d%d gqa %d page %d%s, %d new tokens over %d, %d, %d keys (%s): O error "
           "%.2e, lse error %.2e\n", fa_dtype_name(t), dim, group, page, causal ? " causal" : "",
           seq_q, lens[0], lens[1], lens[2], v, r.rel_err, r.lse_err);
    memset(o, 0xFF, rows * dim * es);
    CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK, "plan run: %s", fatune_errmsg());
    CHECK(fatune_decode_plan_check(plan) == FATUNE_OK, "plan check: %s", fatune_errmsg());
    val_judge(&c, got, &r);
    CHECK(r.status == VAL_OK, "planned prefill: %s", r.msg);
  }
  prefill_contiguous(ctx, &c, &x, route, pps, P, kvh, got);
  /* A page outside the pool, met by the kernel; a length past the capacity. */
  const int keep = c.table[0];
  c.table[0] = -3;
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "outside the pool"), "a page of -3: %s", fatune_errmsg());
  c.table[0] = keep;
  seqlens[1] = pps * P + 1;
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_EINVAL &&
        strstr(fatune_errmsg(), "capacity"), "a length past the capacity: %s", fatune_errmsg());
done:
  fatune_decode_plan_free(plan);
  fatune_close(ctx);
  unlink(dbpath);
  free(o), free(lse), free(seqlens);
  val_case_free(&c);
}

static void test_prefill(fa_dtype t, int dim, int group, int page, int causal, int seq_q,
                         const int lens[3]) {
  test_prefill_on(NULL, "tc-", 0, t, dim, group, page, causal, seq_q, lens);
}

/* A modification over a KV cache, by a call and a plan, against the
** reference under the same modification over each sequence's own keys:
** nq new tokens in dtype t, which route to the decoding kernels (tcdec,
** or simtdec for fp32) or, 64 and more, to the forward pass's paged form
** (tc's; wg's where arch is sm_90a). */
static void test_kvcache_mod_on(const char *arch, const char *spec, int causal, fa_dtype t,
                                int nq) {
  static const int lens[3] = {150, 0, 31};
  fa_mod mod;
  if (gen_mod_load(gen, spec, NULL, &mod) != 0) {
    CHECK(0, "%s: %s", spec, gen_errmsg(gen));
    return;
  }
  enum { B = 3, H = 4, D = 64 };
  int kv_lens[B];
  memcpy(kv_lens, lens, sizeof kv_lens);
  fa_problem p = {.batch = B, .heads = H, .seq_q = nq, .seq_k = 160, .dim = D, .dtype = t,
                  .causal = causal, .op = FA_OP_DECODE, .kv_group = 2, .page = 16,
                  .kv_lens = kv_lens, .mod = &mod};
  const char *route = nq >= 64 ? (arch ? "wg-" : "-paged") : t == FA_FP32 ? "simtdec-" : "tcdec-";
  char err[512], dbpath[] = "/tmp/fatune-test-kvmod-XXXXXX";
  val_case c;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "%s case: %s", spec, err);
    return;
  }
  fatune_ctx *ctx = emu_context_for(dbpath, arch);
  fatune_mod *m = NULL;
  const size_t rows = (size_t)B * H * nq, es = (size_t)fa_dtype_size(t);
  void *o = malloc(rows * D * es);
  float *lse = malloc(rows * sizeof *lse);
  int *seqlens = malloc(sizeof lens);
  if (!ctx || fatune_mod_create(ctx, spec, NULL, &m) != FATUNE_OK ||
      !o || !lse || !seqlens) {
    CHECK(0, "%s: setup: %s", spec, fatune_errmsg());
    goto done;
  }
  memcpy(seqlens, lens, sizeof lens);
  const int pps = fa_problem_pages_per_seq(&p);
  const long long qs[4] = {(long long)H * nq * D, (long long)nq * D, D, 1};
  const long long ks[4] = {16 * 2 * D, 2 * D, D, 1};
  fatune_kvcache_args x = {
    .q = host_tensor(c.q, t, B, H, nq, D, qs),
    .k_cache = host_tensor(c.k, t, c.num_pages, 16, 2, D, ks),
    .v_cache = host_tensor(c.v, t, c.num_pages, 16, 2, D, ks),
    .o = host_tensor(o, t, B, H, nq, D, qs), .lse = lse, .block_table = c.table,
    .pages_per_seq = pps, .cache_seqlens = seqlens, .causal = causal, .mod = m};
  const void *got[2] = {o, lse};
  val_result r;
  for (int planned = 0; planned < 2; planned++) {
    fatune_decode_plan *plan = NULL;
    memset(o, 0xFF, rows * D * es);
    if (planned) {
      CHECK(fatune_decode_plan_create(ctx, &x, &plan) == FATUNE_OK, "%s plan: %s", spec,
            fatune_errmsg());
      if (!plan) break;
      CHECK(strstr(fatune_decode_plan_variant(plan), route) != NULL, "%s, %d new tokens: %s runs, "
            "not %s", spec, nq, fatune_decode_plan_variant(plan), route);
      /* the plan outlives the handle it was made with: runs give an equal one */
      fatune_mod *again = NULL;
      CHECK(fatune_mod_create(ctx, spec, NULL, &again) == FATUNE_OK, "%s: %s", spec, fatune_errmsg());
      fatune_mod_free(m);
      m = again, x.mod = again;
      CHECK(fatune_decode_plan_run(plan, &x) == FATUNE_OK && fatune_decode_plan_check(plan) == FATUNE_OK,
            "%s plan run: %s", spec, fatune_errmsg());
      fatune_kvcache_args plain = x;
      plain.mod = NULL;
      CHECK(fatune_decode_plan_run(plan, &plain) == FATUNE_EINVAL && strstr(fatune_errmsg(), "plan"),
            "%s: a run without the planned modification refused: %s", spec, fatune_errmsg());
    } else {
      CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_OK, "%s: %s", spec, fatune_errmsg());
    }
    fatune_decode_plan_free(plan);
    val_judge(&c, got, &r);
    CHECK(r.status == VAL_OK, "%s%s over a cache (%s): %s", spec, causal ? " causal" : "",
          planned ? "a plan" : "a call", r.msg);
  }
  printf("kvcache under %s%s, %s: %d new tokens over 150, 0, 31 keys (%s): O error %.2e\n", spec,
         causal ? " causal" : "", fa_dtype_name(t), nq, route, r.rel_err);
done:
  fatune_mod_free(m);
  fatune_close(ctx);
  unlink(dbpath);
  free(o), free(lse), free(seqlens);
  val_case_free(&c);
}

static void test_kvcache_mod(const char *spec, int causal, fa_dtype t, int nq) {
  test_kvcache_mod_on(NULL, spec, causal, t, nq);
}

/* New keys and values appended into a paged cache by the library (k_new,
** v_new), then attended over: the pools must hold them exactly where the
** table says, the caller's lengths unchanged, O must match the float64
** reference over the longer sequences; the same through a plan; and a
** sequence without room gets nothing written, said after the call. */
static void test_append(void) {
  enum { B = 3, H = 4, KVH = 2, NQ = 2, D = 16, PAGE = 8, CAP = 40 };
  int lens[B] = {37, 0, 20};
  const int after[B] = {39, 2, 22};
  fa_problem p = {.batch = B, .heads = H, .seq_q = NQ, .seq_k = CAP, .dim = D, .dtype = FA_BF16,
                  .causal = 1, .op = FA_OP_DECODE, .kv_group = H / KVH, .page = PAGE,
                  .kv_lens = lens};
  char err[512], dbpath[] = "/tmp/fatune-test-append-XXXXXX";
  val_case c;
  if (val_case_make(&c, &p, seed++, err, sizeof err) != 0) {
    CHECK(0, "case: %s", err);
    return;
  }
  fatune_ctx *ctx = emu_context(dbpath);
  const int pps = CAP / PAGE, np = c.num_pages;
  const size_t pool = (size_t)np * PAGE * KVH * D, nnew = (size_t)B * KVH * NQ * D;
  const size_t rows = (size_t)B * H * NQ;
  unsigned short *kn = malloc(nnew * 2), *vn = malloc(nnew * 2), *o = malloc(rows * D * 2);
  unsigned short *kx = malloc(pool * 2), *vx = malloc(pool * 2), *k0 = malloc(pool * 2);
  unsigned short *v0 = malloc(pool * 2);
  double *qd = malloc(rows * D * sizeof *qd), *kd = malloc(pool * sizeof *kd);
  double *vd = malloc(pool * sizeof *vd), *od = malloc(rows * D * sizeof *od);
  int *seqlens = malloc(B * sizeof *seqlens);
  if (!ctx || !kn || !vn || !o || !kx || !vx || !k0 || !v0 ||
      !qd || !kd || !vd || !od || !seqlens) {
    CHECK(0, "setup: %s", fatune_errmsg());
    goto done;
  }
  uint64_t rs = seed++;
  for (size_t i = 0; i < nnew; i++)
    fa_elem_put(kn, FA_BF16, i, normal(&rs)), fa_elem_put(vn, FA_BF16, i, normal(&rs));
  memcpy(k0, c.k, pool * 2), memcpy(v0, c.v, pool * 2);
  /* What the pools must hold: token j of sequence b at position lens[b] + j. */
  memcpy(kx, c.k, pool * 2), memcpy(vx, c.v, pool * 2);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < NQ; j++) {
      const int pos = lens[b] + j, page = c.table[b * pps + pos / PAGE];
      for (int h = 0; h < KVH; h++) {
        const size_t dst = (((size_t)page * PAGE + pos % PAGE) * KVH + h) * D;
        const size_t src = (((size_t)b * KVH + h) * NQ + j) * D;
        memcpy(kx + dst, kn + src, D * 2), memcpy(vx + dst, vn + src, D * 2);
      }
    }
  /* The reference over them, each sequence NQ keys longer. */
  for (size_t i = 0; i < rows * D; i++) qd[i] = fa_elem_get(c.q, FA_BF16, i);
  for (size_t i = 0; i < pool; i++) kd[i] = fa_elem_get(kx, FA_BF16, i), vd[i] = fa_elem_get(vx, FA_BF16, i);
  fa_problem pr = p;
  pr.kv_lens = after;
  const fa_layout ql = {(long long)H * NQ * D, (long long)NQ * D, D};
  const fa_layout kl = {(long long)PAGE * KVH * D, D, (long long)KVH * D};
  const ref_decode_io io = {.q = qd, .ql = ql, .k = kd, .v = vd, .kl = kl, .vl = kl,
                            .table = c.table, .num_pages = np, .o = od, .ol = ql};
  if (ref_op(&pr, &io, err, sizeof err) != 0) {
    CHECK(0, "reference: %s", err);
    goto done;
  }
  memcpy(seqlens, lens, sizeof lens);
  const long long qs[4] = {H * NQ * D, NQ * D, D, 1}, ks[4] = {PAGE * KVH * D, KVH * D, D, 1};
  const long long ns[4] = {KVH * NQ * D, NQ * D, D, 1};
  fatune_kvcache_args x = {
    .q = host_tensor(c.q, FA_BF16, B, H, NQ, D, qs),
    .k_cache = host_tensor(c.k, FA_BF16, np, PAGE, KVH, D, ks),
    .v_cache = host_tensor(c.v, FA_BF16, np, PAGE, KVH, D, ks),
    .o = host_tensor(o, FA_BF16, B, H, NQ, D, qs), .block_table = c.table, .pages_per_seq = pps,
    .cache_seqlens = seqlens, .causal = 1,
    .k_new = host_tensor(kn, FA_BF16, B, KVH, NQ, D, ns),
    .v_new = host_tensor(vn, FA_BF16, B, KVH, NQ, D, ns)};
  for (int planned = 0; planned < 2; planned++) {
    memcpy(c.k, k0, pool * 2), memcpy(c.v, v0, pool * 2);
    memset(o, 0xFF, rows * D * 2);
    fatune_decode_plan *pl = NULL;
    fatune_status st = planned ? fatune_decode_plan_create(ctx, &x, &pl) : FATUNE_OK;
    if (st == FATUNE_OK) st = planned ? fatune_decode_plan_run(pl, &x) : fatune_attention_kvcache(ctx, &x);
    if (st == FATUNE_OK && planned) st = fatune_decode_plan_check(pl);
    fatune_decode_plan_free(pl);
    CHECK(st == FATUNE_OK, "%s: %s", planned ? "planned" : "a call", fatune_errmsg());
    CHECK(!memcmp(c.k, kx, pool * 2) && !memcmp(c.v, vx, pool * 2),
          "%s: the new keys and values where the table says, nothing else written",
          planned ? "planned" : "a call");
    CHECK(!memcmp(seqlens, lens, sizeof lens), "the caller's lengths unchanged");
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < rows * D; i++) {
      const double g = fa_elem_get(o, FA_BF16, i);
      e2 += (g - od[i]) * (g - od[i]), r2 += od[i] * od[i];
    }
    const double e = sqrt(e2 / r2);
    CHECK(e <= val_tolerance(FA_BF16), "%s: O over the appended cache, error %.3g",
          planned ? "planned" : "a call", e);
    printf("append (%s): 2 new tokens into lengths 37, 0, 20 of 40: O error %.2e\n",
           planned ? "planned" : "a call", e);
  }
  /* No room for 2 more in 39 of 40: that sequence's pages untouched. */
  memcpy(c.k, k0, pool * 2), memcpy(c.v, v0, pool * 2);
  seqlens[0] = 39;
  CHECK(fatune_attention_kvcache(ctx, &x) == FATUNE_EINVAL && strstr(fatune_errmsg(), "capacity"),
        "no room: %s", fatune_errmsg());
  CHECK(!memcmp((char *)c.k + (size_t)c.table[4] * PAGE * KVH * D * 2,
                (char *)k0 + (size_t)c.table[4] * PAGE * KVH * D * 2, (size_t)PAGE * KVH * D * 2),
        "no room: sequence 0's last page untouched");
  seqlens[0] = 37;
  fatune_kvcache_args bad = x;
  bad.v_new.data = NULL;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "together"),
        "k_new without v_new: %s", fatune_errmsg());
  bad = x, bad.k_new.shape[2] = 1;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "k_new is"),
        "k_new of 1 token for 2: %s", fatune_errmsg());
  bad = x, bad.k_new.data = c.k;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "overlaps"),
        "k_new inside the cache: %s", fatune_errmsg());
  /* Rotary tables refused before any launch (their effect is checked by
  ** python/tests/test_kvcache.py against rotations written there). */
  static const unsigned short table16[64 * 4];
  bad = x, bad.rotary_cos = table16, bad.rotary_len = 64, bad.rotary_dim = 8;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "together"),
        "rotary_cos without rotary_sin: %s", fatune_errmsg());
  bad.rotary_sin = table16, bad.rotary_dim = 7;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "rotary_dim"),
        "rotary_dim 7: %s", fatune_errmsg());
  bad.rotary_dim = 8, bad.rotary_len = 0;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "rotary_len"),
        "rotary_len 0: %s", fatune_errmsg());
  bad.rotary_len = 64, bad.k_new.data = bad.v_new.data = NULL;
  CHECK(fatune_attention_kvcache(ctx, &bad) == FATUNE_EINVAL && strstr(fatune_errmsg(), "new keys"),
        "rotary without new keys: %s", fatune_errmsg());
done:
  fatune_close(ctx);
  unlink(dbpath);
  free(kn), free(vn), free(o), free(kx), free(vx), free(k0), free(v0);
  free(qd), free(kd), free(vd), free(od), free(seqlens);
  val_case_free(&c);
}

/* FlashAttention-2's split heuristic: its own comment's example (48
** rows of work on 108 SMs: 2 splits, efficiency 0.89, not 3 at 0.67) and
** the cases it leaves to one split. */
static void test_fa2_heuristic(void) {
  const estimate_gpu *a100 = estimate_gpu_find("a100"), *h100 = estimate_gpu_find("h100");
  CHECK(a100 && h100, "no a100 or h100 in the table");
  if (!a100 || !h100) return;
  /* batch 1, 48 heads, d128 (128-key blocks), 4096 keys: 48 units on 2 x 108 slots */
  model_problem p = {.batch = 1, .heads = 48, .seq_q = 1, .seq_k = 4096, .dim = 128,
                     .elem_bytes = 2, .decode = 1};
  int s = model_fa2_splits(&p, a100);
  /* 48 x s over 216 slots: 4 splits fill 0.89 of a wave, within 85% of the best */
  CHECK(s == 4, "a100 48 heads: %d splits", s);
  p.batch = 8, p.heads = 32;   /* 256 units >= 0.8 x 264 slots of the H100: no split */
  CHECK(model_fa2_splits(&p, h100) == 1, "h100 batch 8 x 32 heads: %d splits",
        model_fa2_splits(&p, h100));
  p.batch = 1, p.heads = 32, p.kv_group = 8;   /* GQA swapped: 4 K/V heads of work */
  s = model_fa2_splits(&p, h100);
  CHECK(s > 1 && s <= 32, "h100 gqa 8: %d splits", s);
  p.seq_k = 100;   /* one block of keys: nothing to split */
  CHECK(model_fa2_splits(&p, h100) == 1, "one block: %d splits", model_fa2_splits(&p, h100));
}

/* FA_PAGE_OF, the kernels' c / page_size by a multiply, against the
** division: every page size to 300 and some far above, cache positions
** from 0 up, around multiples of the size and next to 2^31. */
static void test_page_divisor(void) {
  static const int big[] = {1000, 4096, 65535, 65537, 1 << 20, (1 << 20) + 1, 123456789,
                            (1 << 30) + 3, 0x7fffffff};
  int bad = 0;
  for (int i = 0; i < 300 + (int)(sizeof big / sizeof big[0]) && bad < 5; i++) {
    fa_params a = {.page_size = i < 300 ? i + 1 : big[i - 300]};
    fa_page_divisor(a.page_size, &a.page_magic, &a.page_shift);
    const long long d = a.page_size;
    const long long cs[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 7 * d + 3, 1000003,
                            0x7fffffffLL - d, 0x7fffffffLL - 1, 0x7fffffffLL};
    for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++) {
      const long long c = cs[j];
      if (c < 0 || c > 0x7fffffffLL) continue;
      const int got = FA_PAGE_OF(a, c), want = (int)(c / d);
      if (got != want && bad++ < 5) CHECK(0, "page %lld, position %lld: %d, not %d", d, c, got, want);
    }
    for (int c = 0; c < 2000; c++)
      if (FA_PAGE_OF(a, c) != (int)(c / d) && bad++ < 5)
        CHECK(0, "page %lld, position %d: %d", d, c, FA_PAGE_OF(a, c));
  }
}

int main(void) {
  char err[512];
  const char *env = getenv("FATUNE_TEST_SEED");
  seed = env ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  printf("seed %llu\n", seed);
  if (gen_open(&gen, err, sizeof err) != 0 ||
      gen_target_for_arch(gen, "sm_80", 0, 0, &target) != 0 ||
      backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 1;
  }
  /* pages of 1, 3 and 4 tokens, and none (one per sequence) */
  static const struct { int page, group, causal; } refs[] = {{1, 1, 0}, {3, 2, 1}, {4, 1, 1},
                                                              {0, 2, 0}, {0, 1, 1}};
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
    test_reference(refs[i].page, refs[i].group, refs[i].causal);
  test_fa2_heuristic();
  test_page_divisor();
  test_bad_input();
  test_library();
  test_wide_default(2, 16);
  test_wide_default(3, 16);
  test_wide_default(3, 256);
  test_append();
  /* prefill: pages of 1, 16 and 48 tokens (none a multiple of a K/V block
  ** but 1's), a sequence without keys, one shorter than its new tokens */
  static const int lens_a[3] = {150, 0, 77}, lens_b[3] = {64, 199, 30};
  test_prefill(FA_BF16, 64, 2, 16, 1, 70, lens_a);
  test_prefill(FA_FP16, 32, 1, 1, 0, 64, lens_b);
  test_prefill(FA_BF16, 128, 4, 48, 1, 65, lens_b);
  /* sm_90a: wg's form in boxes of 16 rows (pages of 16 and 48), of 64
  ** (pages of 64 at d64, 192-key blocks; 128 at d128 causal, 128-key
  ** blocks), and tc's for pages of no multiple of 16 */
  test_prefill_on("sm_90a", "wg-", 16, FA_BF16, 64, 2, 16, 1, 70, lens_a);
  test_prefill_on("sm_90a", "wg-", 16, FA_FP16, 128, 1, 48, 0, 64, lens_b);
  test_prefill_on("sm_90a", "wg-", 64, FA_BF16, 64, 2, 64, 0, 70, lens_b);
  test_prefill_on("sm_90a", "wg-", 128, FA_BF16, 128, 4, 128, 1, 65, lens_a);
  test_prefill_on("sm_90a", "tc-", 0, FA_BF16, 64, 1, 24, 1, 64, lens_b);
  test_kvcache_mod("window=24", 1, FA_FP16, 2);
  test_kvcache_mod("softcap=20", 0, FA_FP32, 2);
  test_kvcache_mod("alibi", 1, FA_BF16, 64);
  test_kvcache_mod_on("sm_90a", "window=24", 1, FA_BF16, 64);
  test_space_mod("window=40", 40, FA_BF16, 64, 4, 1, 1);
  test_space_mod("alibi", -1, FA_FP16, 32, 8, 2, 1);
  test_space_mod("softcap=8", -1, FA_FP32, 24, 2, 3, 0);
  test_space(FA_FP32, 24, 1, 1, 0);
  test_space(FA_BF16, 40, 4, 1, 0);
  test_space(FA_FP16, 32, 2, 3, 1);
  test_space(FA_FP64, 16, 2, 2, 1);
  test_space(FA_BF16, 64, 8, 2, 1);   /* 16 rows: tcdec's whole m16 tile */
  test_space(FA_BF16, 64, 8, 3, 1);   /* 24 rows: tcdec's rows=32, its second tile half empty */
  static const int long_lens[5] = {150, 0, 1, 97, 200}, short_lens[5] = {70, 0, 1, 33, 90};
  test_paged_space("tc", FA_BF16, 64, 2, 70, 1, long_lens, 200);
  test_paged_space("tc", FA_FP16, 128, 1, 33, 0, short_lens, 90);
  test_paged_space("wg", FA_BF16, 64, 2, 70, 1, long_lens, 200);
  test_paged_space("wg", FA_FP16, 128, 1, 33, 0, short_lens, 90);
  backend_close(be);
  gen_close(gen);
  return check_done("test_decode");
}
