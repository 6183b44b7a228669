/*
** test_generator.c
** The template engine, its sandbox, the search space, names and hashes,
** determinism of rendering, and launch shapes; the wg family's tensor maps,
** from render to their encoding at launch.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_run.h"
#include "check.h"
#include "fa_util.h"
#include "gen.h"

static gen_state *open_gen(void) {
  gen_state *g;
  char err[512];
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "gen_open: %s\n", err);
    exit(1);
  }
  return g;
}

static fa_problem problem(int dim, fa_dtype t, int causal) {
  fa_problem p = {.batch = 2, .heads = 3, .seq_q = 4096, .seq_k = 4096, .dim = dim,
                  .dtype = t, .causal = causal};
  return p;
}

static void test_engine(gen_state *g) {
  char *out;
  int rc = gen_render_text(g, "ok.cu", "a ${1 + 2} b\n$ for i = 1, 2 do\nx${i}y${({'z'})[1]}\n$ end\n", &out);
  CHECK(rc == 0, "render_text: %s", gen_errmsg(g));
  if (rc == 0) {
    CHECK(strcmp(out, "a 3 b\nx1yz\nx2yz\n") == 0, "got '%s'", out);
    free(out);
  }
  rc = gen_render_text(g, "float.cu", "${0.5} ${2.0} ${7}\n", &out);
  CHECK(rc == 0 && strcmp(out, "0.5 2.0 7\n") == 0, "number formatting: '%s'", rc ? "" : out);
  if (rc == 0) free(out);
  /* A step's lines take the indentation of the line that calls it. */
  rc = gen_render_text(g, "indent.cu",
                       "$ local function step()\nx;\nif (a) {\n  y;\n}\n$ end\n{\n  $ step()\n}\n",
                       &out);
  CHECK(rc == 0 && strcmp(out, "{\n  x;\n  if (a) {\n    y;\n  }\n}\n") == 0, "re-indent: '%s'",
        rc ? gen_errmsg(g) : out);
  if (rc == 0) free(out);
}

/* Each of these must fail, with the template's file and line named. */
static void test_sandbox(gen_state *g) {
  static const struct { const char *text, *where, *what; } bad[] = {
    {"line one\n$ os.execute('touch /tmp/fatune-sandbox')\n", "bad.cu:2", "'os' is not available"},
    {"$ local f = io.open('/etc/passwd')\n", "bad.cu:1", "'io' is not available"},
    {"x\ny\n$ local m = require('os')\n", "bad.cu:3", "no module 'os'"},
    {"$ require('../CMakeLists')\n", "bad.cu:1", "refused"},
    {"$ require('nosuchmodule')\n", "bad.cu:1", "no module"},
    {"$ load('return 1')\n", "bad.cu:1", "'load' is not available"},
    {"$ dofile('/etc/passwd')\n", "bad.cu:1", "'dofile' is not available"},
    {"x\n$ local dump = string.dump\n$ dump(function() end)\n", "bad.cu:3", "nil value"},
    {"$ getmetatable('').__index.upper = nil\n", "bad.cu:1", "'getmetatable' is not available"},
    {"$ string.format = nil\n$ math.pi = 3\n$ error('stop')\n", "bad.cu:3", "stop"},
    {"$ debug.traceback()\n", "bad.cu:1", "'debug' is not available"},
    {"a\nb\nc\n$ if then\n", "bad.cu:4", ""},
    {"ok\n${undefined_name.field}\n", "bad.cu:2", "not available"},
    {"ok\n${1 +\n", "bad.cu:2", ""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out = NULL;
    int rc = gen_render_text(g, "bad.cu", bad[i].text, &out);
    CHECK(rc != 0, "template %zu should fail", i);
    if (rc == 0) {
      free(out);
      continue;
    }
    CHECK(strstr(gen_errmsg(g), bad[i].where) != NULL, "template %zu: '%s' lacks '%s'", i,
          gen_errmsg(g), bad[i].where);
    CHECK(strstr(gen_errmsg(g), bad[i].what) != NULL, "template %zu: '%s' lacks '%s'", i,
          gen_errmsg(g), bad[i].what);
  }
  /* what the last template changed in its copies is not seen by the next */
  char *out = NULL;
  int rc = gen_render_text(g, "next.cu", "${string.format('%d', 7)} ${math.pi > 3.14}\n", &out);
  CHECK(rc == 0 && strcmp(out, "7 true\n") == 0, "libraries leaked between templates: %s",
        rc ? gen_errmsg(g) : out);
  free(out);
  FILE *f = fopen("/tmp/fatune-sandbox", "r");
  CHECK(f == NULL, "the sandboxed template created a file");
  if (f) fclose(f);
}

static void test_space(gen_state *g, const gen_target *t) {
  const int dims[] = {4, 16, 64, 128};
  for (size_t di = 0; di < 4; di++)
    for (int dt = 0; dt < 2; dt++)
      for (int causal = 0; causal < 2; causal++) {
        fa_problem p = problem(dims[di], (fa_dtype)dt, causal);
        gen_variant *def, *full;
        size_t nd, nf;
        CHECK(gen_list(g, &p, t, "default", &def, &nd) == 0, "list: %s", gen_errmsg(g));
        CHECK(gen_list(g, &p, t, "full", &full, &nf) == 0, "list: %s", gen_errmsg(g));
        CHECK(nd >= 10 && nd <= 300, "default space for d%d has %zu variants", dims[di], nd);
        CHECK(nf > nd, "full space (%zu) not larger than default (%zu)", nf, nd);
        /* names and hashes are unique; every name parses back to its config */
        for (size_t i = 0; i < nd; i++) {
          int dup = 0;
          for (size_t j = i + 1; j < nd; j++)
            dup += !strcmp(def[i].name, def[j].name) || !strcmp(def[i].hash, def[j].hash);
          CHECK(!dup, "%s shares its name or hash", def[i].name);
          CHECK(strlen(def[i].hash) == 12, "hash %s", def[i].hash);
          CHECK(strstr(def[i].config, causal ? "causal=1" : "causal=0") != NULL, "%s", def[i].config);
        }
        gen_kernel k;
        if (gen_render_name(g, def[nd / 2].name, t, &k) == 0) {
          CHECK(strcmp(k.config, def[nd / 2].config) == 0, "name %s parses to %s", def[nd / 2].name,
                k.config);
          gen_kernel_free(&k);
        } else {
          CHECK(0, "render_name: %s", gen_errmsg(g));
        }
        gen_variants_free(def, nd);
        gen_variants_free(full, nf);
      }
  /* a smaller target prunes what does not fit */
  gen_target small;
  CHECK(gen_target_for_arch(g, "sm_90", 16384, 256, &small) == 0, "%s", gen_errmsg(g));
  fa_problem p = problem(128, FA_FP64, 0);
  gen_variant *v;
  size_t n;
  CHECK(gen_list(g, &p, &small, "full", &v, &n) == 0, "%s", gen_errmsg(g));
  for (size_t i = 0; i < n; i++) {
    gen_kernel k;
    CHECK(gen_render_config(g, v[i].config, NULL, &small, &k) == 0, "%s", gen_errmsg(g));
    CHECK(k.smem_bytes <= 16384 && k.threads <= 256, "%s: %d bytes, %d threads", v[i].name,
          k.smem_bytes, k.threads);
    gen_kernel_free(&k);
    if (i > 40) break;
  }
  gen_variants_free(v, n);
  CHECK(gen_target_for_arch(g, "sm_12", 0, 0, &small) != 0, "sm_12 accepted");
  /* The space's targets, sorted, each one it makes a target of. */
  gen_archs a;
  CHECK(gen_list_archs(g, &a) == 0 && a.n > 2, "%s", gen_errmsg(g));
  int has90a = 0;
  for (int i = 0; i < a.n; i++) {
    CHECK(gen_target_for_arch(g, a.arch[i], 0, 0, &small) == 0, "%s: %s", a.arch[i], gen_errmsg(g));
    CHECK(i == 0 || strcmp(a.arch[i - 1], a.arch[i]) < 0, "%s after %s", a.arch[i], a.arch[i - 1]);
    has90a |= !strcmp(a.arch[i], "sm_90a");
  }
  CHECK(has90a, "sm_90a is not among the space's %d targets", a.n);
}

/* Same config, same bytes: in one state, and in a fresh one. */
static void test_determinism(gen_state *g, const gen_target *t) {
  static const char *configs[] = {
    "dim=64,block_m=64,block_n=32,warps=4,norm=deferred,par=q_outer,split=split_q,layout=pad,q=smem",
    "dim=4,block_m=3,block_n=3,warps=1,norm=eager,par=kv_outer,split=split_q,layout=row,q=reg",
    "dim=64,dtype=fp64,causal=1,block_m=16,block_n=32,warps=4,par=kv_outer,split=split_k,layout=kt",
  };
  gen_state *g2 = open_gen();
  for (size_t i = 0; i < 3; i++) {
    gen_kernel a, b, c;
    CHECK(gen_render_config(g, configs[i], NULL, t, &a) == 0, "%s", gen_errmsg(g));
    CHECK(gen_render_config(g, configs[i], NULL, t, &b) == 0, "%s", gen_errmsg(g));
    CHECK(gen_render_config(g2, configs[i], NULL, t, &c) == 0, "%s", gen_errmsg(g2));
    if (a.source && b.source && c.source) {
      CHECK(strcmp(a.source, b.source) == 0 && strcmp(a.source, c.source) == 0,
            "config %zu renders differently", i);
      CHECK(strcmp(a.entry, c.entry) == 0 && strcmp(a.hash, c.hash) == 0 &&
                strcmp(a.source_hash, c.source_hash) == 0, "names or hashes differ");
      CHECK(strstr(a.source, a.entry) != NULL, "entry %s not in the source", a.entry);
      CHECK(strchr(a.entry, '-') == NULL, "entry %s is not an identifier", a.entry);
    }
    gen_kernel_free(&a);
    gen_kernel_free(&b);
    gen_kernel_free(&c);
  }
  gen_close(g2);
}

static void test_configs(gen_state *g, const gen_target *t) {
  fa_problem p = problem(4, FA_FP32, 0);
  gen_kernel k;
  int rc = gen_render_config(g, "block_m=3,block_n=3,norm=eager,warps=1", &p, t, &k);
  CHECK(rc == 0, "%s", gen_errmsg(g));
  if (rc == 0) {
    CHECK(strcmp(k.name, "simt-f32-d4-m3n3w1-eager-qouter-splitq-pad-qsmem") == 0, "%s", k.name);
    gen_launch l;
    p.seq_q = 10;
    CHECK(k.op == FA_OP_FWD && k.nlaunch == 1 && k.nws == 0 && !strcmp(k.launch[0].entry, k.entry),
          "op %d, %d launches, %d workspaces", (int)k.op, k.nlaunch, k.nws);
    gen_launch_shape(&k, 0, &p, &l);
    CHECK(l.grid[0] == 4 && l.grid[1] == 3 && l.grid[2] == 2, "grid %u %u %u", l.grid[0],
          l.grid[1], l.grid[2]);
    CHECK(l.block[0] == 32 && l.smem_bytes == (unsigned)k.smem_bytes, "block %u smem %u",
          l.block[0], l.smem_bytes);
    gen_kernel_free(&k);
  }
  rc = gen_render_config(g, "par=kv_outer,dtype=fp64", &p, t, &k);
  CHECK(rc == 0, "%s", gen_errmsg(g));
  if (rc == 0) {
    gen_launch l;
    gen_launch_shape(&k, 0, &p, &l);
    const size_t ws = k.nws == 1 ? gen_workspace_bytes(&k, 0, &p) : 0;
    CHECK(l.grid[0] == 1 && k.nws == 1 && ws == (size_t)2 * 3 * 10 * 2 * 8,
          "kv_outer grid %u, %d workspaces, %zu bytes", l.grid[0], k.nws, ws);
    gen_kernel_free(&k);
  }
  static const struct { const char *config, *what; } bad[] = {
    {"block_m", "malformed"}, {"block_m=0", "block_m must be an integer from 1"},
    {"block_m=2x", "block_m must be"}, {"norm=lazy", "norm must be one of eager|deferred"},
    {"colour=blue", "unknown config key 'colour'"}, {"block_m=4,block_m=8", "given twice"},
    {"family=wmma", "unknown family"}, {"dim=600", "dim must be"},
    {"split=split_k,warps=1", "does not fit"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rc = gen_render_config(g, bad[i].config, &p, t, &k);
    CHECK(rc != 0, "config '%s' accepted", bad[i].config);
    if (rc == 0) gen_kernel_free(&k);
    else CHECK(strstr(gen_errmsg(g), bad[i].what) != NULL, "'%s': %s", bad[i].config, gen_errmsg(g));
  }
  static const char *bad_names[] = {"nope", "simt-f32-d64", "simt-f8-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem",
                                    "simt-f32-d64-m64n32w4-deferred-qouter-splitq-pad-qsmem-extra"};
  for (size_t i = 0; i < 4; i++) {
    rc = gen_render_name(g, bad_names[i], t, &k);
    CHECK(rc != 0, "name '%s' accepted", bad_names[i]);
    if (rc == 0) gen_kernel_free(&k);
  }
}

/* Under GQA the backward kernels over K/V blocks launch a CTA per K/V head
** (grid "kv_heads"), those over Q blocks one per query head: before, the
** dkdv grid ran every query head and all but the first of each group
** returned at once. tcbwd's -qhead runs dkdv per query head, and its sums
** per K/V head. */
static void test_bwd_grids(gen_state *g, const gen_target *t) {
  static const struct { const char *config, *per_kv; fa_dtype dt; } cases[] = {
    {"family=tcbwd,dq=atomic", "dkdv", FA_BF16},
    {"family=tcbwd,dq=separate", "dkdv", FA_FP16},
    {"family=tcbwd,dq=atomic,qhead=1", "dkvsum", FA_BF16},
    {"family=simtbwd,dq=separate", "dkdv", FA_FP32},
    {"family=simtbwd,order=q", "kvzero kvconvert", FA_FP64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fa_problem p = problem(64, cases[i].dt, 1);
    p.op = FA_OP_BWD, p.heads = 12, p.seq_q = 200, p.seq_k = 300;
    gen_kernel k;
    const int rc = gen_render_config(g, cases[i].config, &p, t, &k);
    CHECK(rc == 0, "%s: %s", cases[i].config, gen_errmsg(g));
    if (rc != 0) continue;
    int per_kv = 0;
    for (int group = 0; group <= 4; group++) {
      if (group == 2) continue;
      p.kv_group = group;
      for (int j = 0; j < k.nlaunch; j++) {
        gen_launch l;
        gen_launch_shape(&k, j, &p, &l);
        const char *entry = strrchr(k.launch[j].entry, '_') + 1;
        const int kv = strstr(cases[i].per_kv, entry) != NULL;
        const unsigned want = kv && group > 1 ? (unsigned)(12 / group) : 12u;
        per_kv += kv && group == 4;
        CHECK(l.grid[1] == want && l.grid[2] == 2, "%s, kv_group %d: %s's grid %u %u %u, not "
              "%u heads", k.name, group, entry, l.grid[0], l.grid[1], l.grid[2], want);
      }
    }
    CHECK(per_kv == (strchr(cases[i].per_kv, ' ') ? 2 : 1), "%s: %d launches over K/V heads",
          k.name, per_kv);
    gen_kernel_free(&k);
  }
}

/* Long configs: one clear refusal past the limit, at once (30 KB of spaces
** once took seconds to parse), and spaces within it trimmed. */
static void test_long_config(gen_state *g, const gen_target *t) {
  fa_problem p = problem(64, FA_FP32, 0);
  gen_kernel k;
  static char text[40000];
  int n = snprintf(text, sizeof text, "block_m=64,norm=");
  memset(text + n, ' ', 30000);
  snprintf(text + n + 30000, sizeof text - (size_t)n - 30000, "eager");
  double t0 = fa_now_s();
  int rc = gen_render_config(g, text, &p, t, &k);
  double spent = fa_now_s() - t0;
  CHECK(rc == FA_EINVAL && strstr(gen_errmsg(g), "too long"), "30 KB config: %d %s", rc,
        rc ? gen_errmsg(g) : k.name);
  if (rc == 0) gen_kernel_free(&k);
  CHECK(spent < 1.0, "30 KB config refused in %.2f s", spent);
  /* Within the limit: a run of 4000 spaces inside a value, then around an item. */
  n = snprintf(text, sizeof text, "block_m=64,norm=eager x");
  memset(text + n - 1, ' ', 4000);
  snprintf(text + n + 3999, sizeof text - (size_t)n - 3999, "y");
  rc = gen_render_config(g, text, &p, t, &k);
  CHECK(rc == FA_EINVAL && strstr(gen_errmsg(g), "norm must be"), "spaces inside: %d %s", rc,
        rc ? gen_errmsg(g) : k.name);
  if (rc == 0) gen_kernel_free(&k);
  n = snprintf(text, sizeof text, "block_m=64,");
  memset(text + n, ' ', 4000);
  snprintf(text + n + 4000, sizeof text - (size_t)n - 4000, "norm=eager");
  rc = gen_render_config(g, text, &p, t, &k);
  CHECK(rc == 0, "spaces around an item: %s", gen_errmsg(g));
  if (rc == 0) gen_kernel_free(&k);
}

/* wg on sm_90a: listed beside tc, its four tensor maps (Q, K, V, O) in the
** kernel and encoded for a launch, or refused with the reason; its fits
** rules each say why. */
static void test_wg(gen_state *g) {
  gen_target t90a, t90;
  CHECK(gen_target_for_arch(g, "sm_90a", 0, 0, &t90a) == 0 &&
        gen_target_for_arch(g, "sm_90", 0, 0, &t90) == 0, "%s", gen_errmsg(g));
  fa_problem p = problem(128, FA_BF16, 0);
  gen_variant *v;
  size_t n, wg = 0, tc = 0;
  CHECK(gen_list(g, &p, &t90a, "default", &v, &n) == 0, "%s", gen_errmsg(g));
  for (size_t i = 0; i < n; i++)
    wg += !strcmp(v[i].cfg.family, "wg"), tc += !strcmp(v[i].cfg.family, "tc");
  CHECK(wg > 0 && tc > 0 && wg + tc == n, "sm_90a lists %zu wg and %zu tc of %zu", wg, tc, n);
  gen_variants_free(v, n);
  CHECK(gen_list(g, &p, &t90, "default", &v, &n) == 0, "%s", gen_errmsg(g));
  for (size_t i = 0; i < n; i++) CHECK(strcmp(v[i].cfg.family, "wg"), "sm_90 lists %s", v[i].name);
  gen_variants_free(v, n);

  gen_kernel k;
  if (gen_render_config(g, "family=wg", &p, &t90a, &k) != 0) {
    CHECK(0, "family=wg: %s", gen_errmsg(g));
    return;
  }
  char why[256];
  CHECK(!strcmp(k.name, "wg-bf16-d128-m128n176c2-deferred-np-sq-s2-sw128"), "%s", k.name);
  CHECK(!strcmp(k.arch, "sm_90a") && k.threads == 384 && gen_kernel_fits(&k, &p, why, sizeof why),
        "%s: arch %s, %d threads, fits: %s", k.name, k.arch, k.threads, why);
  static const char tensors[] = "qkvo";
  static const unsigned rows[] = {128, 176, 176, 64};
  CHECK(k.ntma == 4, "%d tensor maps", k.ntma);
  for (int i = 0; i < k.ntma && i < 4; i++)
    CHECK(k.tma[i].tensor == tensors[i] && k.tma[i].box[0] == 64 && k.tma[i].box[1] == rows[i] &&
          k.tma[i].swizzle == 128, "tma[%d]: %c {%u, %u} swizzle %d", i, k.tma[i].tensor,
          k.tma[i].box[0], k.tma[i].box[1], k.tma[i].swizzle);

  /* Encoded over the problem's tensors; a row stride of 136 bytes refused. */
  fa_backend *be;
  char err[512];
  if (backend_open("emu", &be, NULL, 0, err, sizeof err) == 0) {
    void *base = NULL;
    p.seq_q = p.seq_k = 200;
    CHECK(backend_alloc(be, (size_t)2 * 3 * 200 * 128 * 2, &base, err, sizeof err) == 0, "%s", err);
    fa_params a = attn_params(&p, base, base, base, base, NULL, NULL);
    int rc = base ? attn_tmaps(be, &k, &p, &a, err, sizeof err) : -1;
    CHECK(rc == 0, "attn_tmaps: %s", err);
    a.k_sn = 68;
    rc = base ? attn_tmaps(be, &k, &p, &a, err, sizeof err) : -1;
    CHECK(rc == FA_EINVAL && strstr(err, "tensor map 1 over k") && strstr(err, "136 bytes"),
          "stride 136 bytes: %d %s", rc, err);
    backend_free(be, base);
    backend_close(be);
  } else {
    CHECK(0, "%s", err);
  }
  gen_kernel_free(&k);

  /* A persistent launch: the tiles in x, for the backend to cap. */
  p.seq_q = p.seq_k = 300;
  if (gen_render_config(g, "family=wg,persistent=1", &p, &t90a, &k) == 0) {
    gen_launch l;
    gen_launch_shape(&k, 0, &p, &l);
    CHECK(k.launch[0].persistent && !k.launch[0].heavy_first && l.persistent &&
          l.grid[0] == 3u * p.heads * p.batch && l.grid[1] == 1 && l.grid[2] == 1,
          "%s: persistent %d, grid %u %u %u", k.name, l.persistent, l.grid[0], l.grid[1], l.grid[2]);
    gen_kernel_free(&k);
  } else {
    CHECK(0, "family=wg,persistent=1: %s", gen_errmsg(g));
  }

  const struct { const char *config; int dim; const gen_target *t; const char *what; } bad[] = {
    {"family=wg", 128, &t90, "only on sm_90a"},
    {"family=wg", 100, &t90a, "no multiple of 8"},
    {"family=wg,consumers=1", 128, &t90a, "64 rows per consumer"},
    {"family=wg,pingpong=1,block_m=64,consumers=1,block_n=128", 128, &t90a, "two or three"},
    {"family=wg,persistent=1,block_m=192,consumers=3,block_n=64,stages=2", 64, &t90a, "V's ring"},
    {"family=wg,block_m=192,consumers=3,block_n=208", 64, &t90a, "ptxas"},
    {"family=wg,block_n=200", 128, &t90a, "multiple of 16"},
    {"family=wg,stages=4", 128, &t90a, "shared memory"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fa_problem q = problem(bad[i].dim, FA_BF16, 0);
    const int rc = gen_render_config(g, bad[i].config, &q, bad[i].t, &k);
    CHECK(rc == FA_EINVAL && strstr(gen_errmsg(g), bad[i].what), "'%s' at d%d: %s", bad[i].config,
          bad[i].dim, rc ? gen_errmsg(g) : k.name);
    if (rc == 0) gen_kernel_free(&k);
  }
}

/* Grouped-query attention on wg: two Q heads reading one K/V head
** (kv_group 2, K and V's tensor maps over one head) give the same bits as
** the K/V head given twice. Runs the kernel on the emulator. */
static void test_wg_gqa(gen_state *g) {
  gen_target t;
  gen_kernel k;
  fa_problem p = problem(64, FA_BF16, 0);
  p.batch = 1, p.heads = 2, p.seq_q = 70, p.seq_k = 150;
  if (gen_target_for_arch(g, "sm_90a", 0, 0, &t) != 0 ||
      gen_render_config(g, "family=wg,block_m=128,consumers=2,block_n=64", &p, &t, &k) != 0) {
    CHECK(0, "wg for GQA: %s", gen_errmsg(g));
    return;
  }
  fa_backend *be;
  char err[512];
  if (backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    gen_kernel_free(&k);
    return;
  }
  const size_t nq = (size_t)2 * 70 * 64, nk = (size_t)150 * 64;
  void *q = NULL, *kv2 = NULL, *kv1 = NULL, *o[2] = {NULL, NULL}, *lse[2] = {NULL, NULL};
  fa_build b = {0};
  const gen_kernel *ks = &k;
  int ok = backend_alloc(be, nq * 2, &q, err, sizeof err) == 0 &&
           backend_alloc(be, 4 * nk * 2, &kv2, err, sizeof err) == 0 &&
           backend_alloc(be, 2 * nk * 2, &kv1, err, sizeof err) == 0;
  for (int r = 0; ok && r < 2; r++)  /* NaN (all ones) where the kernel writes nothing */
    ok = backend_alloc(be, nq * 2, &o[r], err, sizeof err) == 0 &&
         backend_alloc(be, 2 * 70 * 4, &lse[r], err, sizeof err) == 0 &&
         backend_fill(be, o[r], 0xFF, nq * 2, err, sizeof err) == 0;
  ok = ok && backend_compile(be, &ks, 1, 1, &b, err, sizeof err) == 0 && b.prog;
  CHECK(ok, "GQA setup: %s %s", err, b.log ? b.log : "");
  if (ok) {
    /* kv2: K head 0, K head 1 (the same), V head 0, V head 1; kv1: K, V. */
    unsigned x = 12345;
    for (size_t i = 0; i < nq; i++)
      x = x * 1103515245u + 12345u, fa_elem_put(q, FA_BF16, i, (double)(x >> 16 & 0xFF) / 128 - 1);
    for (size_t i = 0; i < 2 * nk; i++) {
      x = x * 1103515245u + 12345u;
      const double e = (double)(x >> 16 & 0xFF) / 128 - 1;
      fa_elem_put(kv1, FA_BF16, i, e);
      fa_elem_put(kv2, FA_BF16, i < nk ? i : 2 * nk + i - nk, e);
      fa_elem_put(kv2, FA_BF16, i < nk ? nk + i : 3 * nk + i - nk, e);
    }
    gen_launch shape;
    gen_launch_shape(&k, 0, &p, &shape);
    const fa_run_opts ro = {.schedule = FA_SCHED_FORWARD, .threads = 1, .smem_fill = 0xFF};
    unsigned char *const kv2b = kv2, *const kv1b = kv1;
    fa_params a[2] = {attn_params(&p, q, kv2b, kv2b + 4 * nk, o[0], lse[0], NULL),
                      attn_params(&p, q, kv1b, kv1b + 2 * nk, o[1], lse[1], NULL)};
    a[1].kv_group = 2;
    for (int r = 0; r < 2; r++)
      CHECK(attn_tmaps(be, &k, &p, &a[r], err, sizeof err) == 0 &&
            backend_launch(be, b.prog, &shape, &a[r], &ro, NULL, err, sizeof err) == 0,
            "GQA run %d: %s", r, err);
    CHECK(memcmp(o[0], o[1], nq * 2) == 0 && memcmp(lse[0], lse[1], 2 * 70 * 4) == 0,
          "kv_group 2 differs from the K/V head given twice");
    size_t bad = 0;
    for (size_t i = 0; i < nq; i++) {
      const double e = fa_elem_get(o[1], FA_BF16, i);
      bad += !(e > -1 && e < 1);  /* a convex combination of V's values in [-1, 1) */
    }
    CHECK(bad == 0, "GQA: %zu outputs not written or out of range", bad);
  }
  backend_build_free(be, &b);
  for (int r = 0; r < 2; r++) backend_free(be, o[r]), backend_free(be, lse[r]);
  backend_free(be, q), backend_free(be, kv2), backend_free(be, kv1);
  backend_close(be);
  gen_kernel_free(&k);
}

/* Runs k once on p with host inputs q, kv (K then V, p's heads each) and
** descales dsc into o and lse: 0, or -1 with the error in err. */
static int run_once(fa_backend *be, const gen_kernel *k, const fa_problem *p, const void *q,
                    const unsigned char *kv, void *o, void *lse, char *err, size_t errlen) {
  fa_build b = {0};
  attn_inputs in;
  const size_t nk = (size_t)p->heads * (size_t)p->seq_k * (size_t)p->dim;
  int rc = backend_compile(be, &k, 1, 1, &b, err, errlen) != 0 || !b.prog ? -1 : 0;
  if (rc == 0) rc = attn_inputs_upload(be, p, q, kv, kv + nk, &in, err, errlen);
  if (rc == 0) {
    void *const host[2] = {o, lse};
    const fa_run_opts ro = {.schedule = FA_SCHED_REVERSE, .threads = 1, .smem_fill = 0xFF};
    rc = attn_run_op(be, b.prog, k, p, &in, &ro, host, NULL, NULL, err, errlen);
    attn_inputs_free(be, &in);
  }
  backend_build_free(be, &b);
  return rc;
}

/* fp8 on wg: V transposed by a first launch into a workspace of whole
** 32-key chunks that V's tensor map reads ('t'); the attention the main
** launch; what fp8 refuses, each with its reason; and grouped-query
** attention (the K/V head and its descales read once per group) giving the
** bits of the K/V head given twice, with every K/V byte of the unread head
** NaN. */
static void test_wg_fp8(gen_state *g) {
  gen_target t;
  gen_kernel k;
  fa_problem p = problem(64, FA_E4M3, 0);
  p.batch = 1, p.heads = 2, p.seq_q = 70, p.seq_k = 150;
  if (gen_target_for_arch(g, "sm_90a", 0, 0, &t) != 0 ||
      gen_render_config(g, "family=wg,block_m=128,consumers=2,block_n=96,swizzle=64", &p, &t, &k) != 0) {
    CHECK(0, "wg fp8: %s", gen_errmsg(g));
    return;
  }
  const size_t ne = strlen(k.launch[0].entry);
  CHECK(k.nlaunch == 2 && k.main == 1 && ne > 3 && !strcmp(k.launch[0].entry + ne - 3, "_vt") &&
        k.launch[0].role == GEN_ROLE_V_TRANSPOSE && k.launch[1].role == GEN_ROLE_NONE &&
        k.nws == 1 && k.ws[0].key_rows && k.ws[0].row_align == 32 &&
        gen_workspace_rows(&k, 0, &p) == 160 &&
        gen_workspace_bytes(&k, 0, &p) == (size_t)64 * 2 * 160,
        "%s: %d launches (main %d, first %s), %d workspaces", k.name, k.nlaunch, k.main,
        k.launch[0].entry, k.nws);
  CHECK(k.ntma == 4 && k.tma[2].tensor == GEN_TMA_VT && k.tma[2].box[0] == 32 &&
        k.tma[2].box[1] == 64 && k.tma[2].swizzle == 32 && k.tma[3].box[0] == 32,
        "V's map: %c {%u, %u} swizzle %d; O's box %u", k.tma[2].tensor, k.tma[2].box[0],
        k.tma[2].box[1], k.tma[2].swizzle, k.tma[3].box[0]);
  static const struct { const char *config, *what; } bad[] = {
    {"family=wg,norm=eager", "deferred"}, {"family=wg,block_n=176", "multiple of 32"},
    {"family=wg,pv=ss,overlap=1", "from registers"}, {"family=wg,varlen=1", "variable-length"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gen_kernel x;
    const int rc = gen_render_config(g, bad[i].config, &p, &t, &x);
    CHECK(rc == FA_EINVAL && strstr(gen_errmsg(g), bad[i].what), "fp8 '%s': %s", bad[i].config,
          rc ? gen_errmsg(g) : x.name);
    if (rc == 0) gen_kernel_free(&x);
  }

  fa_backend *be;
  char err[512];
  if (backend_open("emu", &be, NULL, 0, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    gen_kernel_free(&k);
    return;
  }
  const size_t nq = (size_t)2 * 70 * 64, nk = (size_t)2 * 150 * 64, rows = 2 * 70;
  unsigned char *q = malloc(nq), *kv2 = malloc(2 * nk), *kv1 = malloc(2 * nk);
  uint16_t *o[2] = {malloc(nq * 2), malloc(nq * 2)};
  float *lse[2] = {malloc(rows * 4), malloc(rows * 4)};
  if (q && kv2 && kv1 && o[0] && o[1] && lse[0] && lse[1]) {
    /* kv2: K head 0 = K head 1, V head 0 = V head 1; kv1: head 0 the same, head 1 NaN. */
    unsigned x = 4321;
    for (size_t i = 0; i < nq; i++)
      x = x * 1103515245u + 12345u, fa_elem_put(q, FA_E4M3, i, (double)(x >> 16 & 0xFF) / 64 - 2);
    for (size_t t2 = 0; t2 < 2; t2++)
      for (size_t i = 0; i < nk / 2; i++) {
        x = x * 1103515245u + 12345u;
        const size_t at = t2 * nk + i;
        fa_elem_put(kv2, FA_E4M3, at, (double)(x >> 16 & 0xFF) / 64 - 2);
        kv2[at + nk / 2] = kv1[at] = kv2[at], kv1[at + nk / 2] = 0x7f;
      }
    const float dsc2[6] = {0.75f, 0.75f, 1.5f, 1.5f, 0.625f, 0.625f}, dsc1[3] = {0.75f, 1.5f, 0.625f};
    fa_problem p1 = p;
    p.descale = dsc2, p1.descale = dsc1, p1.kv_group = 2;
    const int rc = run_once(be, &k, &p, q, kv2, o[0], lse[0], err, sizeof err);
    CHECK(rc == 0, "fp8 run, K/V head twice: %s", err);
    CHECK(rc == 0 && run_once(be, &k, &p1, q, kv1, o[1], lse[1], err, sizeof err) == 0,
          "fp8 run, kv_group 2: %s", err);
    CHECK(memcmp(o[0], o[1], nq * 2) == 0 && memcmp(lse[0], lse[1], rows * 4) == 0,
          "fp8: kv_group 2 differs from the K/V head given twice");
    size_t bad_o = 0;
    for (size_t i = 0; i < nq; i++) {
      const double e = fa_elem_get(o[1], FA_BF16, i);
      bad_o += !(e >= -2 * 0.625 && e <= 2 * 0.625);  /* a convex combination of V v_descale */
    }
    CHECK(bad_o == 0, "fp8 GQA: %zu outputs not written or out of range", bad_o);
  } else {
    CHECK(0, "out of memory");
  }
  free(q), free(kv2), free(kv1), free(o[0]), free(o[1]), free(lse[0]), free(lse[1]);
  backend_close(be);
  gen_kernel_free(&k);
}

/* The family contract's new fields, checked when a family registers: a copy
** of tc with one field broken is refused with a message naming it. */
static void test_contract(gen_state *g) {
  static const struct { const char *change, *what; } bad[] = {
    {"", NULL},
    {"f.targets = nil", "family 'tc': 'targets' is neither \"any\" nor a list of archs"},
    {"f.targets = {'sm_99'}", "family 'tc': target 'sm_99' is no arch the space knows"},
    {"f.rank = nil", "family 'tc': no field 'rank'"},
    {"f.title = nil", "family 'tc': no field 'title'"},
    {"f.preludes = {cuda = {'prelude_cuda.cuh'}}", "no preludes for the emu backend"},
    {"f.preludes = {cuda = {'nope.cuh'}, emu = {}}", "cuda prelude 'nope.cuh' is no template file"},
    {"f.preludes = {cuda = {}, emu = {}, metal = {}}", "preludes for 'metal', no backend"},
    {"f.default_dtype = function() return 'fp32', 'why' end", "default_dtype on sm_"},
    {"f.default_dtype = nil", "family 'tc': no field 'default_dtype'"},
    {"f.naming = {{'dtype'}, {'dim', 'dim_v'}}", "axis 'causal' is in no name part"},
    {"f.naming = {{'dtype'}, {'dtype'}}", "axis 'dtype' is named twice"},
    {"f.naming = {{'nokey'}}", "name part 1 names no axis 'nokey'"},
    /* The optional explore plan: E(fn) is a valid one that fn changes. */
    {"f.explore = E(function() end)", NULL},
    {"f.explore = 1", "family 'tc': 'explore' is no table"},
    {"f.explore = E(function(e) e.axes, e.counters = s.families.wg.explore.axes, "
     "s.families.wg.explore.counters end)",
     "explore axis 'pingpong': config 'consumers=2,block_m=128,pingpong=0' names no axis"},
    {"f.explore = E(function(e) e.kernel = 'nope.cu' end)",
     "explore: kernel 'nope.cu' is no file of the family's folder"},
    {"f.explore = E(function(e) e.model = 'tc.lua' end)",
     "explore: 'model' names a cost model the family has no predict for"},
    {"f.explore = E(function(e) e.counters = {'nope'} end)", "explore: no counter 'nope'"},
    {"f.explore = E(function(e) e.paper = 1 end)", "explore: 'paper' is no boolean"},
    {"f.explore = E(function(e, a) a.points = {a.points[1]} end)",
     "explore axis 'tiles': two to four points"},
    {"f.explore = E(function(e, a) a.points[2][2] = 'block_m' end)",
     "config 'block_m' names no axis"},
    {"f.explore = E(function(e, a) a.key = {'exp2'} end)",
     "explore axis 'tiles': key counter 'exp2' is not in 'counters'"},
    {"f.explore = E(function(e, a) a.key_label = nil end)", "key and key_label go together"},
    {"f.explore = E(function(e, a) e.axes[2] = a end)", "explore axis 'tiles': no fresh word"},
    {"f.explore = E(function(e, a) a.name = 'all' end)", "explore axis 'all': no fresh word"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024], *out = NULL;
    snprintf(text, sizeof text,
             "$ local s = require('space')\n$ local f = {}\n"
             "$ for k, v in pairs(s.families.tc) do f[k] = v end\n"
             "$ local function E(fn)\n"
             "$   local a = {name = 'tiles', title = 't', why = 'w', key = {'mma'},\n"
             "$              key_label = 'mma.sync', points = {{'32', 'block_m=32,block_n=32'},\n"
             "$                                             {'64', 'block_m=64,block_n=32'}}}\n"
             "$   local e = {kernel = 'tc.cu', counters = {'mma'}, axes = {a}}\n"
             "$   fn(e, a)\n"
             "$   return e\n"
             "$ end\n"
             "$ %s\n"
             "$ s.check_family('tc', f)\nok\n", bad[i].change);
    const int rc = gen_render_text(g, "contract.cu", text, &out);
    free(out);
    if (!bad[i].what) {
      CHECK(rc == 0, "'%s' is refused: %s", bad[i].change, gen_errmsg(g));
      continue;
    }
    CHECK(rc != 0, "'%s' should be refused", bad[i].change);
    CHECK(rc == 0 || strstr(gen_errmsg(g), bad[i].what), "'%s': '%s' lacks '%s'", bad[i].change,
          gen_errmsg(g), bad[i].what);
  }
}

/* The family contract (space.lua): a family without a known op, and a
** render whose launches are malformed, are refused naming the family, the
** launch and the field; a problem's op picks the families. */
static void test_contract_ops(gen_state *g, const gen_target *t) {
  static const char prelude[] =
    "$ local space = require('space')\n"
    "$ local simt = space.families.simt\n"
    "$ local function with(over) local f = {} for k, v in pairs(simt) do f[k] = v end "
    "for k, v in pairs(over) do f[k] = v end return f end\n"
    "$ local function launch(grid, ws) return { entry = 'k', threads = 32, smem_bytes = 0, "
    "grid = grid, workspaces = ws or {} } end\n"
    "$ local function check(...) return space.check_launches('family \\'x\\': render', ...) end\n"
    "$ local function verdict(ok, msg) return ok and 'ok' or msg end\n";
  static const struct { const char *lua, *want; } cases[] = {
    {"$ local r = verdict(pcall(space.check_family, 'simt', with({op = 'sideways'})))\n",
     "family 'simt': op 'sideways' is none of fwd, bwd, decode"},
    {"$ local f = with({}) f.op = nil\n$ local r = verdict(pcall(space.check_family, 'simt', f))\n",
     "family 'simt': no field 'op'"},
    {"$ local r = verdict(pcall(space.check_family, 'simt', with({op = 3})))\n",
     "family 'simt': 'op' is no string"},
    {"$ local bad = with({render = function(c) local x = simt.render(c) "
     "x.launches[1].grid[1] = 'rows' return x end})\n"
     "$ local cfg = simt.defaults({dtype = 'fp32', dim = 64, causal = 0})\n"
     "$ local r = verdict(pcall(space.render, bad, cfg, space.target('sm_90')))\n",
     "family 'simt': render: launch 1: grid[1] is 'rows', not a positive integer, \"heads\", "
     "\"kv_heads\", \"batch\", {\"seq_q\", n}, {\"seq_k\", n} or {\"kv_rows\", n}"},
    {"$ local r = verdict(pcall(check, { launch({ { 'seq_q', 0 }, 'heads', 'batch' }) }))\n",
     "family 'x': render: launch 1: grid[1] is a table, not a positive integer"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 'heads', 'batch' }), "
     "launch({ 1, 'heads', 0 }) }))\n",
     "family 'x': render: launch 2: grid[3] is '0', not a positive integer"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 'heads' }) }))\n",
     "family 'x': render: launch 1: grid is no {x, y, z}"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 1, 1 }, { { name = 'm_l', bytes_per_row = 16 } }), "
     "launch({ 1, 1, 1 }, { { name = 'm_l', bytes_per_row = 8 } }) }))\n",
     "family 'x': render: launch 2: workspace 1: workspace 'm_l' has 8 bytes per row here, 16 "
     "in an earlier launch"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 1, 1 }, { { name = 'm_l' } }) }))\n",
     "family 'x': render: launch 1: workspace 1 is no {name = \"identifier\", bytes_per_row = "
     "positive integer[, rows = \"seq_q\" or \"seq_k\"][, row_align = 1 to 256][, grouped = boolean]}"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 1, 1 }, { { name = 'm_l', bytes_per_row = 8, "
     "rows = 'seq' } }) }))\n",
     "family 'x': render: launch 1: workspace 1 is no {name = \"identifier\", bytes_per_row = "
     "positive integer[, rows = \"seq_q\" or \"seq_k\"][, row_align = 1 to 256][, grouped = boolean]}"},
    {"$ local r = verdict(pcall(check, { launch({ 1, 1, 1 }, { { name = 'vt', bytes_per_row = 8, "
     "rows = 'seq_k', row_align = 0 } }) }))\n",
     "family 'x': render: launch 1: workspace 1 is no {name = \"identifier\", bytes_per_row = "
     "positive integer[, rows = \"seq_q\" or \"seq_k\"][, row_align = 1 to 256][, grouped = boolean]}"},
    {"$ local r = verdict(pcall(check, {}))\n",
     "family 'x': render gives no launches: a list of 1 to 4"},
    {"$ local l = launch({ 1, 1, 1 }) l.threads = 2048\n$ local r = verdict(pcall(check, { l }))\n",
     "family 'x': render: launch 1: threads is no integer from 1 to 1024"},
    {"$ local l = launch({ 1, 1, 1 }) l.role = 'dkv'\n$ local r = verdict(pcall(check, { l }))\n",
     "family 'x': render: launch 1: role is none of dq, kv_sum, v_transpose"},
    {"$ local l = launch({ 1, 1, 1 }) l.role, l.main = 'dq', true\n"
     "$ local r = verdict(pcall(check, { l }))\n",
     "family 'x': render: launch 1: the main launch has a role"},
    {"$ local ws = { { name = 'dq_accum', bytes_per_row = 256 } }\n"
     "$ local r = verdict(pcall(check, { launch({ { 'seq_q', 128 }, 'heads', 'batch' }, ws), "
     "launch({ { 'seq_k', 64 }, 'heads', 'batch' }, ws), launch({ 1, 1, 1 }, ws) }))\n",
     "ok"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[2048], *out = NULL;
    snprintf(text, sizeof text, "%s%s${r}\n", prelude, cases[i].lua);
    const int rc = gen_render_text(g, "contract.cu", text, &out);
    CHECK(rc == 0 && out && !strncmp(out, cases[i].want, strlen(cases[i].want)),
          "contract case %zu: '%s', want '%s'", i, rc ? gen_errmsg(g) : out, cases[i].want);
    free(out);
  }
  /* A problem's op: only its families list and render. */
  fa_problem p = problem(64, FA_FP32, 0);
  p.op = FA_OP_BWD;
  gen_variant *v = NULL;
  size_t n = 0;
  int only_bwd = gen_list(g, &p, t, "default", &v, &n) == 0 && n > 0;
  for (size_t i = 0; only_bwd && i < n; i++) only_bwd = !strncmp(v[i].name, "simtbwd-", 8);
  CHECK(only_bwd, "list for op bwd: %zu variants, not all simtbwd's: %s", n, gen_errmsg(g));
  gen_variants_free(v, n);
  p.op = FA_OP_DECODE;
  int only_dec = gen_list(g, &p, t, "default", &v, &n) == 0 && n > 0;
  for (size_t i = 0; only_dec && i < n; i++) only_dec = !strncmp(v[i].name, "simtdec-", 8);
  CHECK(only_dec, "list for op decode: %zu variants, not all simtdec's: %s", n, gen_errmsg(g));
  gen_variants_free(v, n);
  p.op = FA_OP_BWD;
  p.dtype = FA_FP16;
  only_bwd = gen_list(g, &p, t, "default", &v, &n) == 0 && n > 0;
  for (size_t i = 0; only_bwd && i < n; i++) only_bwd = !strncmp(v[i].name, "tcbwd-", 6);
  CHECK(only_bwd, "list for op bwd in fp16: %zu variants, not all tcbwd's: %s", n, gen_errmsg(g));
  gen_variants_free(v, n);
  p.dtype = FA_FP32;
  gen_kernel k;
  CHECK(gen_render_config(g, "family=simt,block_m=32", &p, t, &k) == FA_EINVAL &&
          strstr(gen_errmsg(g), "family simt computes op fwd, not bwd"),
        "render simt for op bwd: %s", gen_errmsg(g));
  /* A config naming no family takes one of the problem's op. */
  if (gen_render_config(g, "block_m=32", &p, t, &k) == 0) {
    CHECK(k.op == FA_OP_BWD && !strncmp(k.name, "simtbwd-", 8), "render for op bwd: %s", k.name);
    gen_kernel_free(&k);
  } else {
    CHECK(0, "render for op bwd: %s", gen_errmsg(g));
  }
  p.op = FA_OP_FWD;
  if (gen_render_config(g, "block_m=32", &p, t, &k) == 0) {
    char why[256] = "";
    p.op = FA_OP_DECODE;
    CHECK(k.op == FA_OP_FWD && !gen_kernel_fits(&k, &p, why, sizeof why) &&
            strstr(why, "computes op fwd, but the problem is op decode"),
          "a fwd kernel for a decode problem: %s", why);
    gen_kernel_free(&k);
  } else {
    CHECK(0, "render block_m=32: %s", gen_errmsg(g));
  }
}

int main(void) {
  gen_state *g = open_gen();
  gen_target t;
  if (gen_target_for_arch(g, "sm_90", 0, 0, &t) != 0) {
    fprintf(stderr, "target: %s\n", gen_errmsg(g));
    return 1;
  }
  test_engine(g);
  test_sandbox(g);
  test_contract(g);
  test_space(g, &t);
  test_determinism(g, &t);
  test_configs(g, &t);
  test_bwd_grids(g, &t);
  test_contract_ops(g, &t);
  test_long_config(g, &t);
  test_wg(g);
  test_wg_gqa(g);
  test_wg_fp8(g);
  gen_close(g);
  return check_done("generator");
}
