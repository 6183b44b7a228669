/*
** test_mod.c
** Score and mask modifications (templates/mod.lua, core/fa_mod.c). The
** float64 reference under each built-in against an independent attention
** written here from the built-in's formula (not its expression text); a
** user's file; the hash that keys them; and everything a modification may
** get wrong: the errors name the file's line, a file is read and never run,
** and the interpreter refuses a malformed program.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fa_mod.h"
#include "gen.h"
#include "reference.h"

#define TOL 1e-12

static uint64_t rng_state = 12345;

static double rng_normal(void) {
  /* splitmix64, then Box-Muller */
  double u[2];
  for (int i = 0; i < 2; i++) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    u[i] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* What each built-in means, written from its definition: whether key k is
** seen by row r, and the score it gets. */
typedef struct meaning {
  const char *spec;
  int (*sees)(const fa_problem *p, int h, int r, int k);
  double (*score)(const fa_problem *p, int h, int r, int k, double s);
  const void *tensor;   /* its one captured tensor's contents, of n elements, or NULL */
  long long n;
} meaning;

static int off(const fa_problem *p) { return p->seq_k - p->seq_q; }
static int all(const fa_problem *p, int h, int r, int k) { (void)p, (void)h, (void)r, (void)k; return 1; }
static double same(const fa_problem *p, int h, int r, int k, double s) {
  (void)p, (void)h, (void)r, (void)k;
  return s;
}
static int window_5_2(const fa_problem *p, int h, int r, int k) {
  (void)h;
  const int d = r + off(p);   /* the row's diagonal key */
  return k >= d - 5 && k <= d + 2;
}
static int window_7_0(const fa_problem *p, int h, int r, int k) {
  (void)h;
  const int d = r + off(p);
  return k >= d - 7 && k <= d;
}
static double softcap_3(const fa_problem *p, int h, int r, int k, double s) {
  (void)p, (void)h, (void)r, (void)k;
  return 3.0 * tanh(s / 3.0);
}
static double alibi(const fa_problem *p, int h, int r, int k, double s) {
  const double slope = pow(2.0, -8.0 * (h + 1) / p->heads);
  return s - slope * fabs((double)(r + off(p) - k));
}
static int prefix_4(const fa_problem *p, int h, int r, int k) {
  (void)h;
  return k < 4 || k <= r + off(p);
}
static int chunks_6(const fa_problem *p, int h, int r, int k) {
  (void)h;
  const int d = r + off(p);
  return d >= 0 && d / 6 == k / 6 && k <= d;
}

/* The captured tensors of the built-ins that read them: document ids in
** runs of 1 to 9 keys (doc_ids_make), a bias table of 4 heads x 7
** distances. An index outside a tensor reads 0. */
static int doc_ids[64];
static float bias_tab[4 * 7];
static int doc_of(int i) { return i >= 0 && i < 64 ? doc_ids[i] : 0; }
static void doc_ids_make(void) {
  int id = 0, left = 0;
  for (int i = 0; i < 64; i++) {
    if (left == 0) id++, left = 1 + (int)(fabs(rng_normal()) * 4) % 9;
    doc_ids[i] = id, left--;
  }
  for (int i = 0; i < 4 * 7; i++) bias_tab[i] = (float)rng_normal();
}
static int causal_br(const fa_problem *p, int h, int r, int k) {
  (void)h;
  return k <= r + off(p);
}
static int causal_tl(const fa_problem *p, int h, int r, int k) {
  (void)p, (void)h;
  return k <= r;
}
static int document(const fa_problem *p, int h, int r, int k) {
  (void)h;
  return r + off(p) >= 0 && doc_of(r + off(p)) == doc_of(k);
}
static double relbias_3(const fa_problem *p, int h, int r, int k, double s) {
  int d = k - r - off(p);
  d = d < -3 ? -3 : d > 3 ? 3 : d;
  return s + bias_tab[h * 7 + 3 + d];
}

/* Attention with the meaning m, the textbook way (scores, then a softmax
** over the keys seen), per row into o and lse. */
static void naive(const fa_problem *p, const meaning *m, const double *q, const double *k,
                  const double *v, double *o, double *lse) {
  const double scale = fa_problem_scale(p);
  double *s = malloc(sizeof *s * (size_t)p->seq_k);
  for (int b = 0; b < p->batch; b++)
    for (int h = 0; h < p->heads; h++)
      for (int r = 0; r < p->seq_q; r++) {
        const size_t row = ((size_t)(b * p->heads + h) * p->seq_q + r);
        const double *qr = q + row * p->dim;
        double mx = -INFINITY;
        for (int c = 0; c < p->seq_k; c++) {
          const double *kc = k + ((size_t)(b * p->heads + h) * p->seq_k + c) * p->dim;
          double dot = 0;
          for (int d = 0; d < p->dim; d++) dot += qr[d] * kc[d];
          const int seen = m->sees(p, h, r, c) && (!p->causal || c <= r + off(p));
          s[c] = seen ? m->score(p, h, r, c, scale * dot) : -INFINITY;
          if (s[c] > mx) mx = s[c];
        }
        double l = 0;
        for (int d = 0; d < p->dim; d++) o[row * p->dim + d] = 0;
        if (mx == -INFINITY) {
          lse[row] = -INFINITY;
          continue;
        }
        for (int c = 0; c < p->seq_k; c++) {
          const double w = exp(s[c] - mx);
          l += w;
          const double *vc = v + ((size_t)(b * p->heads + h) * p->seq_k + c) * p->dim;
          for (int d = 0; d < p->dim; d++) o[row * p->dim + d] += w * vc[d];
        }
        for (int d = 0; d < p->dim; d++) o[row * p->dim + d] /= l;
        lse[row] = mx + log(l);
      }
  free(s);
}

/* The reference under spec against the meaning, on a problem whose rows
** include some that see no key (seq_q > seq_k bottom-right aligned). */
static void check_builtin(gen_state *g, const meaning *m, int seq_q, int seq_k, int causal) {
  fa_mod mod;
  int rc = gen_mod_load(g, m->spec, NULL, &mod);
  CHECK(rc == 0, "%s: %s", m->spec, gen_errmsg(g));
  if (rc) return;
  fa_mod_data data;
  char why[160] = "";
  const void *ptr[FA_MOD_MAX_TENSORS] = {m->tensor};
  const long long len[FA_MOD_MAX_TENSORS] = {m->n};
  rc = fa_mod_data_init(&data, &mod, ptr, len, why, sizeof why);
  CHECK(rc == 0 && mod.ntensors == (m->tensor != NULL), "%s: its tensors: %s", m->spec, why);
  if (rc) return;
  fa_problem p = {.batch = 2, .heads = 4, .seq_q = seq_q, .seq_k = seq_k, .dim = 8,
                  .dtype = FA_FP64, .causal = causal, .mod = &mod, .mod_data = &data};
  const size_t nq = (size_t)p.batch * p.heads * seq_q * p.dim, nk = (size_t)p.batch * p.heads * seq_k * p.dim;
  double *q = malloc(sizeof *q * nq), *k = malloc(sizeof *k * nk), *v = malloc(sizeof *v * nk);
  double *o = malloc(sizeof *o * nq), *o2 = malloc(sizeof *o2 * nq);
  const size_t nl = (size_t)p.batch * p.heads * seq_q;
  double *lse = malloc(sizeof *lse * nl), *lse2 = malloc(sizeof *lse2 * nl);
  for (size_t i = 0; i < nq; i++) q[i] = 2 * rng_normal();
  for (size_t i = 0; i < nk; i++) k[i] = 2 * rng_normal(), v[i] = rng_normal();
  const fa_layout lq = fa_layout_contiguous(&p, seq_q), lk = fa_layout_contiguous(&p, seq_k);
  CHECK(ref_attention(&p, q, lq, k, lk, v, lk, o, lq, lse) == 0, "%s: the reference runs", m->spec);
  naive(&p, m, q, k, v, o2, lse2);
  double num = 0, den = 0, lerr = 0;
  int empty = 0, lse_mismatch = 0;
  for (size_t i = 0; i < nq; i++) num += (o[i] - o2[i]) * (o[i] - o2[i]), den += o2[i] * o2[i];
  for (size_t i = 0; i < nl; i++) {
    if (isinf(lse2[i])) {
      empty++;
      lse_mismatch += !(isinf(lse[i]) && lse[i] < 0);
    } else {
      lerr = fmax(lerr, fabs(lse[i] - lse2[i]));
    }
  }
  const double rel = sqrt(num / (den > 0 ? den : 1));
  CHECK(rel < TOL && lerr < TOL && !lse_mismatch, "%s seq %d/%d%s: O rel err %.3g, lse err %.3g, "
        "%d rows without a key disagree", m->spec, seq_q, seq_k, causal ? " causal" : "", rel, lerr,
        lse_mismatch);
  printf("%-14s seq %3d/%3d%s: O rel err %.2e, lse err %.2e, %d of %zu rows see no key\n",
         mod.label, seq_q, seq_k, causal ? " causal" : "       ", rel, lerr, empty, nl);
  free(q), free(k), free(v), free(o), free(o2), free(lse), free(lse2);
  fa_mod_data_free(&data);
}

/* Loading text must fail with a message holding want. */
static void check_refused(gen_state *g, const char *spec, const char *text, const char *want) {
  fa_mod mod;
  const int rc = gen_mod_load(g, spec, text, &mod);
  CHECK(rc != 0 && strstr(gen_errmsg(g), want), "%s: want an error with '%s', got rc %d: %s",
        spec, want, rc, rc ? gen_errmsg(g) : "");
}

static void test_errors(gen_state *g) {
  check_refused(g, "nope", NULL, "unknown modification 'nope' (built in: alibi, causal, chunked, "
                "document, prefixlm, relbias, softcap, window");
  check_refused(g, "window=1:2:3", NULL, "takes 2 parameter(s) (left:right), not 3");
  check_refused(g, "window=abc", NULL, "parameter 'abc' is no number");
  check_refused(g, "window=2.5", NULL, "left takes an integer, not 2.5");
  check_refused(g, "window=1e400", NULL, "is no number");
  check_refused(g, "bad.lua", "return {\n  doc = 'x',\n  score = \"score * (1 +\",\n}",
                "bad.lua:3: score: unexpected 'end of text'");
  check_refused(g, "bad.lua", "return {\n\n  mask = 'q_idx <= zz',\n}", "bad.lua:3: mask: unknown name 'zz'");
  check_refused(g, "bad.lua", "return { mask = 'kv_idx / q_idx == 0' }",
                "integer '/' needs a positive constant divisor");
  check_refused(g, "bad.lua", "return { mask = 'kv_idx % 0 == 0' }", "positive constant divisor");
  check_refused(g, "bad.lua", "return { mask = 'score > 0' }", "'score' is not known to a mask");
  check_refused(g, "bad.lua", "return { mask = 'q_idx + 1' }", "mask: gives a int, not a truth value");
  check_refused(g, "bad.lua", "return { score = 'q_idx < 1' }", "score: gives a truth value");
  check_refused(g, "bad.lua", "return { score = 'tanh(score, 2)' }", "tanh takes 1 argument(s), not 2");
  check_refused(g, "bad.lua", "return { doc = 'nothing' }", "neither score nor mask");
  check_refused(g, "bad.lua", "return { score = 'score', extra = 1 }", "unknown key 'extra'");
  check_refused(g, "bad.lua", "return { params = { { 'q_idx', 1 } }, score = 'score' }",
                "param 'q_idx' hides a variable");
  check_refused(g, "big.lua", "return { mask = 'q_idx < 5000000000' }",
                "integer 5000000000 is past a 32-bit int");
  check_refused(g, "big.lua", "return { params = { { 'n', 9999999999 } }, mask = 'q_idx < n' }",
                "parameter n = 9999999999 is past a 32-bit int");
  /* Captured tensors: declared, read as name[an int], never another way. */
  check_refused(g, "t.lua", "return { mask = 'doc[q_idx] == 0' }", "unknown name 'doc'");
  check_refused(g, "t.lua", "return { tensors = { { 'doc', 'int' } }, mask = 'doc == 0' }",
                "captured tensor 'doc' is read as doc[index]");
  check_refused(g, "t.lua", "return { tensors = { { 'doc', 'int' } }, mask = 'doc[0.5] == 0' }",
                "doc's index is a float, not an int");
  check_refused(g, "t.lua", "return { tensors = { { 'doc', 'int' } }, mask = 'doc[q_idx == 0' }",
                "expected ']' after doc's index");
  check_refused(g, "t.lua", "return { tensors = { { 'doc', 'double' } }, mask = 'q_idx > 0' }",
                "tensors[1] is no { \"name\", \"int\" or \"float\" }");
  check_refused(g, "t.lua", "return { tensors = { { 'h', 'int' } }, mask = 'q_idx > 0' }",
                "tensor 'h' hides a name already taken");
  check_refused(g, "t.lua", "return { tensors = { { 'a', 'int' }, { 'a', 'int' } }, mask = 'q_idx > 0' }",
                "tensor 'a' hides a name already taken");
  check_refused(g, "t.lua", "return { tensors = { {'t1','int'}, {'t2','int'}, {'t3','int'}, {'t4','int'}, "
                "{'t5','int'} }, mask = 'q_idx > 0' }", "more than 4 captured tensors");
  /* A file is data: code in it is refused by the reader, never run. */
  check_refused(g, "evil.lua", "os.execute('touch /tmp/fatune-mod-ran')\nreturn { score = 'score' }",
                "evil.lua:1: unexpected character '.'");
  check_refused(g, "evil.lua", "return { score = os }", "evil.lua:1: expected a number");
  check_refused(g, "evil.lua", "print('x') return { score = 'score' }", "evil.lua:1: expected '{'");
  check_refused(g, "evil.lua", "return { score = 'os(score)' }", "unknown function 'os'");
  /* Many terms: refused before the reference's program overflows. */
  char big[4096] = "return { score = '";
  for (int i = 0; i < 300; i++) strcat(big, "score + ");
  strcat(big, "score' }");
  check_refused(g, "big.lua", big, "more than 200 terms");
}

/* The interpreter refuses what it cannot run. */
static void test_programs(void) {
  char why[160];
  const fa_mod_op underflow[] = {{FA_MC_CONST, 1, FA_MT_INT}, {FA_MC_ADD, 0, FA_MT_INT}};
  CHECK(fa_mod_check(underflow, 2, why, sizeof why) != 0 && strstr(why, "takes more values"), "underflow: %s", why);
  const fa_mod_op two[] = {{FA_MC_CONST, 1, FA_MT_INT}, {FA_MC_CONST, 2, FA_MT_INT}};
  CHECK(fa_mod_check(two, 2, why, sizeof why) != 0 && strstr(why, "leaves 2 values"), "two: %s", why);
  const fa_mod_op var[] = {{FA_MC_VAR, 8, FA_MT_INT}};
  CHECK(fa_mod_check(var, 1, why, sizeof why) != 0 && strstr(why, "reads no variable"), "var: %s", why);
  const fa_mod_op idiv[] = {{FA_MC_VAR, FA_MV_Q, FA_MT_INT}, {FA_MC_VAR, FA_MV_K, FA_MT_INT}, {FA_MC_IDIV, 0, FA_MT_INT}};
  CHECK(fa_mod_check(idiv, 3, why, sizeof why) != 0 && strstr(why, "no positive constant"), "idiv: %s", why);
  const fa_mod_op code[] = {{(fa_mod_code)99, 0, FA_MT_INT}};
  CHECK(fa_mod_check(code, 1, why, sizeof why) != 0, "a code out of range");
  CHECK(fa_mod_check(code, 0, why, sizeof why) != 0, "an empty program");
  /* The kernels' integer semantics: division and modulo truncate. */
  const fa_mod_op trunc_div[] = {{FA_MC_VAR, FA_MV_Q, FA_MT_INT}, {FA_MC_CONST, 4, FA_MT_INT}, {FA_MC_IDIV, 0, FA_MT_INT}};
  const fa_mod_op trunc_mod[] = {{FA_MC_VAR, FA_MV_Q, FA_MT_INT}, {FA_MC_CONST, 4, FA_MT_INT}, {FA_MC_IMOD, 0, FA_MT_INT}};
  const double vars[FA_MV_COUNT] = {[FA_MV_Q] = -7};
  CHECK(fa_mod_eval(trunc_div, 3, vars, NULL) == -1 && fa_mod_eval(trunc_mod, 3, vars, NULL) == -3,
        "-7 / 4 and -7 %% 4 as C computes them: %g, %g", fa_mod_eval(trunc_div, 3, vars, NULL),
        fa_mod_eval(trunc_mod, 3, vars, NULL));
}

/* The key: the same expressions hash the same, however written; others not. */
static void test_hash(gen_state *g) {
  fa_mod a, b, c, d;
  CHECK(gen_mod_load(g, "window=8", NULL, &a) == 0 && gen_mod_load(g, "window=8:0", NULL, &b) == 0 &&
        gen_mod_load(g, "window=9", NULL, &c) == 0, "windows load");
  CHECK(!strcmp(a.hash, b.hash) && strcmp(a.hash, c.hash), "window=8 and 8:0 share a hash, 9 not");
  CHECK(!strcmp(a.label, "window=8:0"), "the label gives every parameter: %s", a.label);
  const char *text = "-- mine\nreturn {\n  params = { { 'w', 8 } },\n"
                     "  mask = [[kv_idx >= q_idx + (seq_k - seq_q - w) &&\n"
                     "           kv_idx <= q_idx + (seq_k - seq_q + 0)]],\n}\n";
  CHECK(gen_mod_load(g, "dir/mine.lua", text, &d) == 0, "a user's file: %s", gen_errmsg(g));
  CHECK(!strcmp(d.hash, a.hash), "a file with window=8's very expression has its hash");
  CHECK(!strcmp(d.label, "mine.lua"), "a file's label is its name: %s", d.label);
  CHECK(d.nmask > 0 && d.nscore == 0, "a mask, no score part");
}

/* The host's block classifier (the kernels' rules, fa_mod_block) is sound:
** over random block pairs of each mask, a pair it calls empty has no key
** seen and one it calls full has every key seen, by evaluating the mask at
** every pair of the block; and it is sharp where a window makes it easy:
** a block inside the window is full, one far from it empty. */
static void test_blocks(gen_state *g) {
  const char *specs[] = {"window=37:5", "prefixlm=20", "chunked=24", "window=0", NULL};
  const char *doc_text = "return { mask = '(q_idx / 16 == kv_idx / 16 || kv_idx % 7 == 3) && "
                         "!(q_idx < 5 && kv_idx > q_idx) && (q_idx > 40 ? kv_idx >= 8 : kv_idx >= 0)' }";
  int wrong = 0, pairs = 0, decided = 0;
  for (int i = 0; i < 5; i++) {
    fa_mod m;
    const int rc = specs[i] ? gen_mod_load(g, specs[i], NULL, &m) : gen_mod_load(g, "mix.lua", doc_text, &m);
    CHECK(rc == 0, "%s: %s", specs[i] ? specs[i] : "mix.lua", gen_errmsg(g));
    if (rc) continue;
    const int seq_q = 97, seq_k = 131;
    for (int t = 0; t < 400; t++) {
      const int bm = 1 + (int)(rng_normal() * rng_normal() * 8 + 16) % 40, bn = 1 + t % 33;
      const int q_lo = (int)(fabs(rng_normal()) * 30) % seq_q, k_lo = (int)(fabs(rng_normal()) * 40) % seq_k;
      const int q_hi = q_lo + (bm > 0 ? bm : 1) - 1 < seq_q ? q_lo + (bm > 0 ? bm : 1) - 1 : seq_q - 1;
      const int k_hi = k_lo + bn - 1 < seq_k ? k_lo + bn - 1 : seq_k - 1;
      const int c = fa_mod_block(&m, NULL, 0, 1, q_lo, q_hi, k_lo, k_hi, seq_q, seq_k, 4);
      int seen = 0, hidden = 0;
      for (int r = q_lo; r <= q_hi; r++)
        for (int k = k_lo; k <= k_hi; k++) {
          const double vars[FA_MV_COUNT] = {0, 0, 1, r, k, seq_q, seq_k, 4};
          if (fa_mod_eval(m.mask, m.nmask, vars, NULL) != 0) seen++;
          else hidden++;
        }
      pairs++;
      decided += c != 1;
      if ((c == 0 && seen) || (c == 2 && hidden)) wrong++;
    }
  }
  CHECK(wrong == 0, "%d of %d block pairs misclassified", wrong, pairs);
  printf("block classifier: %d pairs, %d decided (empty or full), %d wrong\n", pairs, decided, wrong);
  fa_mod w;
  CHECK(gen_mod_load(g, "window=256", NULL, &w) == 0, "window=256");
  CHECK(fa_mod_block(&w, NULL, 0, 0, 1000, 1063, 900, 963, 4096, 4096, 1) == 2, "a block inside the window: full");
  CHECK(fa_mod_block(&w, NULL, 0, 0, 1000, 1063, 0, 63, 4096, 4096, 1) == 0, "one far before it: empty");
  CHECK(fa_mod_block(&w, NULL, 0, 0, 1000, 1063, 2000, 2063, 4096, 4096, 1) == 0, "one after the diagonal: empty");
  CHECK(fa_mod_block(&w, NULL, 0, 0, 1000, 1063, 1000, 1063, 4096, 4096, 1) == 1, "the diagonal's: partial");
  fa_mod sc;
  CHECK(gen_mod_load(g, "softcap=30", NULL, &sc) == 0 && fa_mod_block(&sc, NULL, 0, 0, 0, 9, 0, 9, 10, 10, 1) == 2,
        "no mask: every block full");
}

/* A mask over captured tensors: classified from the tensors' contents
** (their granules' bounds), soundly over random block pairs and sharply
** on document ids; the tensor's extent over a problem; the block mask
** entry by entry; and an index outside the tensor reading 0. */
static void test_tensor_blocks(gen_state *g) {
  fa_mod m;
  CHECK(gen_mod_load(g, "document", NULL, &m) == 0, "document: %s", gen_errmsg(g));
  enum { N = 1000 };
  static int ids[N];
  for (int i = 0; i < N; i++) ids[i] = i / 150 + (i >= 700 ? (i - 700) / 7 : 0);  /* long, then short docs */
  const void *ptr[FA_MOD_MAX_TENSORS] = {ids};
  const long long len[FA_MOD_MAX_TENSORS] = {N};
  fa_mod_data d;
  char why[160];
  CHECK(fa_mod_data_init(&d, &m, ptr, len, why, sizeof why) == 0, "data: %s", why);
  int wrong = 0, decided = 0;
  for (int t = 0; t < 600; t++) {
    const int q_lo = (int)(fabs(rng_normal()) * 300) % N, k_lo = (int)(fabs(rng_normal()) * 300) % N;
    const int q_hi = q_lo + 1 + t % 90 < N ? q_lo + 1 + t % 90 : N - 1;
    const int k_hi = k_lo + 1 + t % 70 < N ? k_lo + 1 + t % 70 : N - 1;
    const int c = fa_mod_block(&m, &d, 0, 0, q_lo, q_hi, k_lo, k_hi, N, N, 1);
    int seen = 0, hidden = 0;
    for (int r = q_lo; r <= q_hi; r++)
      for (int k = k_lo; k <= k_hi; k++) {
        const double vars[FA_MV_COUNT] = {0, 0, 0, r, k, N, N, 1};
        if (fa_mod_eval(m.mask, m.nmask, vars, &d) != 0) seen++;
        else hidden++;
      }
    decided += c != 1;
    if ((c == 0 && seen) || (c == 2 && hidden)) wrong++;
  }
  CHECK(wrong == 0 && decided > 300, "document ids: %d of 600 pairs misclassified, %d decided", wrong,
        decided);
  CHECK(fa_mod_block(&m, &d, 0, 0, 0, 63, 64, 127, N, N, 1) == 2, "a block inside one document: full");
  CHECK(fa_mod_block(&m, &d, 0, 0, 0, 63, 320, 383, N, N, 1) == 0, "blocks of two documents: empty");
  CHECK(fa_mod_block(&m, &d, 0, 0, 0, 63, 128, 191, N, N, 1) == 1, "one across a boundary: partial");
  CHECK(fa_mod_block(&m, NULL, 0, 0, 0, 63, 320, 383, N, N, 1) == 1, "without the contents: partial");
  long long need[FA_MOD_MAX_TENSORS];
  fa_mod_extent(&m, 2, 8, 100, N, need);
  CHECK(need[0] == N, "document's extent over 1000 keys: %lld", need[0]);
  fa_mod rb;
  CHECK(gen_mod_load(g, "relbias=5", NULL, &rb) == 0, "relbias: %s", gen_errmsg(g));
  fa_mod_extent(&rb, 2, 8, 100, 300, need);
  CHECK(need[0] == 8 * 11, "relbias=5's extent over 8 heads: %lld (8 x 11)", need[0]);
  const fa_mod_mask_dims dims = fa_mod_mask_shape(&m, 3, 8, N, N);
  CHECK(dims.bm_b == 1 && dims.bm_h == 1 && dims.rows == 16 && dims.cols == 16,
        "document's block mask: %d x %d x %d x %d (1 x 1 x 16 x 16)", dims.bm_b, dims.bm_h, dims.rows,
        dims.cols);
  int *bm = malloc(16 * 16 * sizeof *bm), differ = 0, empty = 0;
  if (bm) {
    fa_mod_block_mask(&m, &d, N, N, 8, dims, bm);
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < 16; c++) {
        const int want = fa_mod_block(&m, &d, 0, 0, r * 64, r * 64 + 63 < N ? r * 64 + 63 : N - 1,
                                      c * 64, c * 64 + 63 < N ? c * 64 + 63 : N - 1, N, N, 8);
        differ += bm[r * 16 + c] != want, empty += bm[r * 16 + c] == 0;
      }
    printf("document over 1000 keys: %d of 256 blocks of 64 x 64 empty\n", empty);
  }
  CHECK(bm && differ == 0 && empty > 150, "the block mask: %d entries differ, %d empty", differ, empty);
  free(bm);
  const double far[FA_MV_COUNT] = {0, 0, 0, N + 5, 3, N, N + 9, 1};  /* doc[N + 14]: outside */
  CHECK(fa_mod_eval(m.mask, m.nmask, far, &d) == (ids[3] == 0), "an index outside reads 0");
  fa_mod_data_free(&d);
}

int main(void) {
  gen_state *g;
  char err[512];
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    return 1;
  }
  doc_ids_make();
  const meaning builtins[] = {
    {"window=5:2", window_5_2, same, NULL, 0}, {"window=7", window_7_0, same, NULL, 0},
    {"softcap=3", all, softcap_3, NULL, 0}, {"alibi", all, alibi, NULL, 0},
    {"prefixlm=4", prefix_4, same, NULL, 0}, {"chunked=6", chunks_6, same, NULL, 0},
    {"document", document, same, doc_ids, 64}, {"relbias=3", all, relbias_3, bias_tab, 4 * 7},
    {"causal", causal_br, same, NULL, 0}, {"causal=1", causal_tl, same, NULL, 0},
  };
  for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
    check_builtin(g, &builtins[i], 37, 29, 0);
    check_builtin(g, &builtins[i], 23, 41, 1);
  }
  test_errors(g);
  test_programs();
  test_hash(g);
  test_blocks(g);
  test_tensor_blocks(g);
  gen_close(g);
  return check_done("test_mod");
}
