/*
** families.h
** The kernel families the tests sweep, one entry each, in the manner of a
** backend table: test_space runs every variant of each family's default
** space on the emulator, test_compile compiles a sample of each family's
** full space with NVRTC, and both run the same checks for every entry. A
** new family is covered by adding its entry to `families` below; nothing
** in the tests branches on a family's name.
**
** What differs between families is data here: the dims and dtypes swept,
** the shapes and schedules run, the axes the compiled sample must cover
** and how it is picked, and what a family promises beyond "it compiles"
** (reference configs that must not spill, an instruction their SASS must
** hold). Tolerances are not here: validation reads them from
** val_tolerance, the one place they are written.
*/
#ifndef FAMILIES_H
#define FAMILIES_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "gen.h"

#define FAM_MAX_SPACE 4   /* dims, dtypes per space sweep */
#define FAM_NSHAPES 2
#define FAM_NVALS 12      /* values per axis */
#define FAM_MAX_AXES 16
#define FAM_SEQ 256       /* the sequence length test_compile lists for */

/* A shape test_space runs, under two schedules that must give equal bits. */
typedef struct fam_shape {
  int batch, heads, seq_q, seq_k;
  emu_schedule s0, s1;
} fam_shape;

/* An axis and every value a family's full space must show. */
typedef struct fam_axis {
  const char *key;
  const char *values[FAM_NVALS];
} fam_axis;

typedef struct fam_problem {
  int dim;
  fa_dtype dtype;
  int causal;
} fam_problem;

/* A config compiled next to the sample: it must not spill on any arch,
** and with sass set its SASS must hold the family's sass_insn. */
typedef struct fam_ref {
  const char *config;
  int sass;
  /* Spill bytes (stores + loads) tolerated on sm_80 and sm_90: 0 but for
  ** a known gap, listed with its size so that it can only shrink. */
  int spill_sm80, spill_sm90;
} fam_ref;

typedef struct family {
  const char *name; /* as its variants' names begin: "<name>-..." */
  fa_op op;         /* the op its kernels compute: the problems listed are of it */
  /* The one arch the family is written for ("sm_90a"), which test_space
  ** lists for and test_compile compiles for; NULL: any, test_space lists
  ** for sm_90 and test_compile compiles for sm_80 and sm_90. */
  const char *arch;

  /* test_space: dims x dtypes x {causal, not}, each default space listed
  ** for batch 1, heads 1, seq list_seq, then run at every shape. */
  size_t ndims, ndtypes;
  int dims[FAM_MAX_SPACE];
  fa_dtype dtypes[FAM_MAX_SPACE];
  int list_seq;
  fam_shape shapes[FAM_NSHAPES];
  /* Partial last blocks: every tail_every-th variant of each problem also
  ** runs at seq_q = block_m + a tail, seq_k = block_n + a tail (batch and
  ** heads 1), the tails 1, half a block and block - 1 for each taken in
  ** turn, so each problem with 9 such variants sees the 9 pairs; under
  ** tail_s0 and tail_s1. */
  int tail_every;
  emu_schedule tail_s0, tail_s1;

  /* test_dim_v: (dim, dim_v) pairs, V's head dim apart from Q's and K's,
  ** each in every dtype, causal and not; none when the family refuses
  ** dim_v (then it must list no variant of its own for any pair). */
  int dims_v[FAM_MAX_SPACE][2];
  size_t ndims_v;

  /* test_compile: the full space of each problem, listed for sm_80 at
  ** batch 2, heads 2, seq FAM_SEQ; picks are greedy, each covering the
  ** most (axis, value) pairs not yet covered. */
  const fam_axis *axes;
  size_t naxes;
  const fam_problem *problems;
  size_t nproblems;
  int rounds;          /* passes over the problems */
  int picks_per_round; /* picks per problem and pass */
  int required_picks;  /* per problem; later ones only when they add a pair */
  int per_dim;         /* ties go to pairs not yet shown for the pick's dim */
  int odd_tiles;       /* one pick's tiles must divide neither FAM_SEQ nor each other */
  long (*cost)(const char *config); /* a rough guess of compile time, for ties */
  const fam_ref *refs;
  size_t nrefs;
  const char *ref_label;
  const char *sass_insn;
  const char *sass_also;  /* a second instruction they must hold, or NULL */
} family;

/* The value of key in a "k=v,k=v" config: its start and length, or NULL. */
static const char *fam_config_value(const char *config, const char *key, size_t *len) {
  const size_t klen = strlen(key);
  for (const char *s = config; *s;) {
    const size_t n = strcspn(s, ",");
    if (n > klen && s[klen] == '=' && memcmp(s, key, klen) == 0) {
      *len = n - klen - 1;
      return s + klen + 1;
    }
    s += n;
    if (*s == ',') s++;
  }
  return NULL;
}

static long fam_config_int(const char *config, const char *key) {
  size_t len;
  const char *v = fam_config_value(config, key, &len);
  return v ? atol(v) : 0;
}

static int fam_config_is(const char *config, const char *key, const char *value) {
  size_t len;
  const char *v = fam_config_value(config, key, &len);
  return v && len == strlen(value) && memcmp(v, value, len) == 0;
}

/* SIMT: unrolled loops grow with the tile and with Q held in registers. */
static long simt_cost(const char *config) {
  const long bm = fam_config_int(config, "block_m"), bn = fam_config_int(config, "block_n");
  const long d = fam_config_int(config, "dim");
  long cost = bm * bn + d * (bm + bn) + (fam_config_is(config, "q", "reg") ? 4 * bm * d : 0);
  return fam_config_is(config, "dtype", "fp64") ? 2 * cost : cost;
}

/* Tensor cores: the unrolled mma count. */
static long tc_cost(const char *config) {
  const long bm = fam_config_int(config, "block_m"), bn = fam_config_int(config, "block_n");
  const long d = fam_config_int(config, "dim"), w = fam_config_int(config, "warps");
  return bm * bn * d / (w > 0 ? w : 1);
}

static const fam_axis simt_axes[] = {
  {"dtype", {"fp32", "fp64"}},
  {"causal", {"0", "1"}},
  {"dim", {"4", "16", "64", "128"}},
  {"block_m", {"1", "2", "3", "4", "8", "16", "32", "64", "128"}},
  {"block_n", {"1", "2", "3", "4", "8", "16", "32", "64", "128"}},
  {"warps", {"1", "2", "4", "8"}},
  {"norm", {"eager", "deferred"}},
  {"par", {"q_outer", "kv_outer"}},
  {"split", {"split_q", "split_k"}},
  {"layout", {"row", "pad", "kt"}},
  {"q", {"smem", "reg"}},
};

/* Every dim, dtype and causal value. */
static const fam_problem simt_problems[] = {
  {4, FA_FP32, 0},   {4, FA_FP32, 1},   {4, FA_FP64, 0},   {4, FA_FP64, 1},
  {16, FA_FP32, 0},  {16, FA_FP32, 1},  {16, FA_FP64, 0},  {16, FA_FP64, 1},
  {64, FA_FP32, 0},  {64, FA_FP32, 1},  {64, FA_FP64, 0},  {64, FA_FP64, 1},
  {128, FA_FP32, 0}, {128, FA_FP32, 1}, {128, FA_FP64, 0}, {128, FA_FP64, 1},
};

/* Head dims native and padded, 16-byte copies and the 2-byte path of dims
** that are no multiple of 8. */
static const fam_axis tc_axes[] = {
  {"dtype", {"fp16", "bf16"}},
  {"causal", {"0", "1"}},
  {"dim", {"32", "36", "64", "80", "96", "120", "128", "160", "192", "256"}},
  {"block_m", {"64", "128", "192"}},
  {"block_n", {"32", "48", "64", "80", "96", "112", "128", "144", "160", "176"}},
  {"warps", {"4", "8"}},
  {"norm", {"eager", "deferred"}},
  {"layout", {"row", "pad", "swizzle"}},
  {"q", {"smem", "reg"}},
  {"stages", {"1", "2", "3"}},
  {"q_share", {"0", "1"}},
  {"parts", {"0", "2"}},
  {"rowsum", {"mma", "fadd"}},
  {"pv", {"block", "step"}},
  {"kv_addr", {"rebuild", "carry"}},
  {"s_acc", {"f32", "f16"}},
  {"rescale", {"always", "lazy"}},
};

/* Each dim once or twice, dtypes and causal alternating. */
static const fam_problem tc_problems[] = {
  {32, FA_FP16, 0},  {36, FA_BF16, 1},  {64, FA_FP16, 1},  {64, FA_BF16, 0},
  {80, FA_BF16, 0},  {96, FA_FP16, 1},  {128, FA_BF16, 1}, {128, FA_FP16, 0},
  {160, FA_FP16, 0}, {192, FA_BF16, 1}, {256, FA_FP16, 1}, {256, FA_BF16, 0},
  {120, FA_BF16, 1},  /* padded to 128: a row spans two 128-byte copy spans, the second part-used */
};

/* FlashAttention-2's own choices (d64: 128x128, 4 warps; d128: 128x64,
** 4 warps; deferred, swizzled, Q in shared memory, two stages, one key
** part); the SASS of the non-causal fp16 pair is disassembled. None may
** spill on either arch: every bound (stores + loads, bytes) is 0. */
#define TC_FA2(dtype, dim, causal, bn, sass, spill_sm80, spill_sm90) \
  {"family=tc,dtype=" dtype ",dim=" dim ",causal=" causal ",block_m=128,block_n=" bn \
   ",warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0,parts=0", sass, \
   spill_sm80, spill_sm90}
static const fam_ref tc_refs[] = {
  TC_FA2("fp16", "64", "0", "128", 1, 0, 0),   TC_FA2("fp16", "64", "1", "128", 0, 0, 0),
  TC_FA2("bf16", "64", "0", "128", 0, 0, 0),   TC_FA2("bf16", "64", "1", "128", 0, 0, 0),
  TC_FA2("fp16", "128", "0", "64", 1, 0, 0),  TC_FA2("fp16", "128", "1", "64", 0, 0, 0),
  TC_FA2("bf16", "128", "0", "64", 0, 0, 0),  TC_FA2("bf16", "128", "1", "64", 0, 0, 0),
};
#undef TC_FA2

/* Hopper: head dims native and padded, every structural axis. */
static const fam_axis wg_axes[] = {
  {"dtype", {"fp16", "bf16", "e4m3"}},
  {"causal", {"0", "1"}},
  {"dim", {"64", "96", "120", "128", "192", "256"}},
  {"block_m", {"64", "128", "192"}},
  {"block_n", {"64", "80", "128", "176", "192"}},
  {"stages", {"2", "3"}},
  {"pingpong", {"0", "1"}},
  {"overlap", {"0", "1"}},
  {"norm", {"eager", "deferred"}},
  {"swizzle", {"128", "64"}},
  {"persistent", {"0", "1"}},
  {"pv", {"rs", "ss"}},
};

static const fam_problem wg_problems[] = {
  {64, FA_BF16, 0},  {64, FA_FP16, 1},  {96, FA_BF16, 0},  {128, FA_BF16, 0},
  {128, FA_FP16, 1}, {192, FA_BF16, 1}, {256, FA_BF16, 0}, {256, FA_FP16, 1},
  {120, FA_FP16, 1},  /* padded to 128 */
  {64, FA_E4M3, 1},  {128, FA_E4M3, 0},  {256, FA_E4M3, 0},
};

/* Warpgroup MMA: the unrolled wgmma count per consumer. */
static long wg_cost(const char *config) {
  const long bn = fam_config_int(config, "block_n"), d = fam_config_int(config, "dim");
  return bn * d * (1 + fam_config_int(config, "overlap"));
}

/* FlashAttention-3's own tiles (hopper/tile_size.h): d64 192x192 (causal
** 192x128), d128 128x176 (causal 128x128), d256 128x80, in the simplest
** structure; their SASS must hold HGMMA and UTMALDG. None may spill. */
#define WG_FA3(dtype, dim, causal, bm, bn, cons, sass, spill) \
  {"family=wg,dtype=" dtype ",dim=" dim ",causal=" causal ",block_m=" bm ",block_n=" bn \
   ",stages=2,consumers=" cons ",pingpong=0,overlap=0,norm=deferred,swizzle=128", sass, 0, spill}
static const fam_ref wg_refs[] = {
  WG_FA3("bf16", "64", "0", "192", "192", "3", 1, 0),
  WG_FA3("bf16", "64", "1", "192", "128", "3", 0, 0),
  WG_FA3("bf16", "128", "0", "128", "176", "2", 1, 0),
  WG_FA3("bf16", "128", "1", "128", "128", "2", 0, 0),
  WG_FA3("bf16", "256", "0", "128", "80", "2", 1, 0),
  WG_FA3("bf16", "256", "1", "128", "80", "2", 0, 0),
  /* fp8 (element size 1): d128 128x224, d256 128x128; their SASS holds QGMMA */
  WG_FA3("e4m3", "128", "0", "128", "224", "2", 0, 0),
  WG_FA3("e4m3", "256", "0", "128", "128", "2", 0, 0),
};
#undef WG_FA3

#define FAM_COUNT(a) (sizeof (a) / sizeof (a)[0])

/* The backward pass on CUDA cores: the tile's axes, dQ's, and FA1's order
** against FA2's. */
static const fam_axis simtbwd_axes[] = {
  {"dtype", {"fp32", "fp64", "fp16", "bf16"}},
  {"causal", {"0", "1"}},
  {"dim", {"4", "16", "64", "128"}},
  {"block_m", {"1", "2", "4", "8", "16", "32", "64", "128"}},
  {"block_n", {"1", "2", "4", "8", "16", "32", "64", "128"}},
  {"warps", {"1", "2", "4", "8"}},
  {"dq", {"separate", "atomic"}},
  {"order", {"kv", "q"}},
};

static const fam_problem simtbwd_problems[] = {
  {4, FA_FP32, 1}, {16, FA_FP64, 0}, {64, FA_FP32, 0}, {128, FA_FP32, 1}, {128, FA_FP64, 0},
  {300, FA_FP16, 1}, {264, FA_BF16, 0},   /* the last resort's 16-bit dtypes: past tcbwd's 256 */
};

/* Unrolled: the three kernels' tile loops. */
static long simtbwd_cost(const char *config) {
  const long bm = fam_config_int(config, "block_m"), bn = fam_config_int(config, "block_n");
  const long d = fam_config_int(config, "dim");
  const long cost = bm * bn + d * (bm + bn);
  return fam_config_is(config, "dtype", "fp64") ? 2 * cost : cost;
}

/* The backward pass on tensor cores: head dims native, padded and of the
** 2-byte path, every tile axis. */
static const fam_axis tcbwd_axes[] = {
  {"dtype", {"fp16", "bf16"}},
  {"causal", {"0", "1"}},
  {"dim", {"32", "36", "64", "96", "120", "128", "256"}},
  {"block_m", {"16", "32", "64", "128"}},
  {"block_n", {"16", "32", "64", "128"}},
  {"warps", {"1", "2", "4", "8"}},
  {"split_n", {"1", "2", "4"}},
  {"split_d", {"1", "2", "4"}},
  {"dq", {"separate", "atomic"}},
};

static const fam_problem tcbwd_problems[] = {
  {32, FA_FP16, 0}, {36, FA_BF16, 1}, {64, FA_FP16, 1}, {96, FA_BF16, 0}, {128, FA_FP16, 0},
  {256, FA_BF16, 1}, {120, FA_BF16, 1},
};

/* The backward pass on Hopper: head dims native and padded, every axis. */
static const fam_axis wgbwd_axes[] = {
  {"dtype", {"fp16", "bf16"}},
  {"causal", {"0", "1"}},
  {"dim", {"40", "64", "96", "128"}},
  {"block_m", {"64", "128"}},
  {"block_n", {"64", "128"}},
  {"consumers", {"1", "2"}},
  {"stages", {"2", "3"}},
  {"pingpong", {"0", "1"}},
  {"dq_split", {"block", "own"}},
};

static const fam_problem wgbwd_problems[] = {
  {64, FA_BF16, 1}, {64, FA_FP16, 0}, {96, FA_BF16, 0}, {128, FA_FP16, 1}, {128, FA_BF16, 0},
  {40, FA_BF16, 1},  /* padded to 64 */
};

/* Warpgroup MMA, backward: the five products' unrolled wgmma per consumer. */
static long wgbwd_cost(const char *config) {
  const long bm = fam_config_int(config, "block_m"), d = fam_config_int(config, "dim");
  return 5 * bm * d;
}

static const family families[] = {
  {
    .name = "simt",
    .ndims = 2, .dims = {16, 64},
    .ndtypes = 2, .dtypes = {FA_FP32, FA_FP64},
    .list_seq = 100,
    .shapes = {{2, 1, 100, 100, EMU_FORWARD, EMU_SKEW},  /* seq a multiple of no tile */
               {1, 2, 70, 130, EMU_REVERSE, EMU_RANDOM}},
    .tail_every = 1, .tail_s0 = EMU_SKEW, .tail_s1 = EMU_FORWARD,
    .dims_v = {{48, 24}, {24, 40}, {300, 128}}, .ndims_v = 3,
    .axes = simt_axes, .naxes = FAM_COUNT(simt_axes),
    .problems = simt_problems, .nproblems = FAM_COUNT(simt_problems),
    .rounds = 1, .picks_per_round = 3, .required_picks = 2,
    .per_dim = 1, .odd_tiles = 1,
    .cost = simt_cost,
  },
  {
    .name = "simtbwd", .op = FA_OP_BWD,
    .ndims = 2, .dims = {40, 128},
    .ndtypes = 2, .dtypes = {FA_FP32, FA_FP64},
    .list_seq = 100,
    .shapes = {{2, 1, 100, 100, EMU_FORWARD, EMU_SKEW},
               {1, 2, 70, 130, EMU_REVERSE, EMU_RANDOM}},
    .tail_every = 1, .tail_s0 = EMU_SKEW, .tail_s1 = EMU_FORWARD,
    .dims_v = {{48, 24}, {24, 40}, {300, 128}}, .ndims_v = 3,
    .axes = simtbwd_axes, .naxes = FAM_COUNT(simtbwd_axes),
    .problems = simtbwd_problems, .nproblems = FAM_COUNT(simtbwd_problems),
    .rounds = 2, .picks_per_round = 2, .required_picks = 1,
    .per_dim = 1, .odd_tiles = 0,
    .cost = simtbwd_cost,
  },
  {
    .name = "tc",
    .ndims = 2, .dims = {64, 128},
    .ndtypes = 2, .dtypes = {FA_FP16, FA_BF16},
    .list_seq = 128,
    .shapes = {{1, 2, 128, 128, EMU_FORWARD, EMU_SKEW},
               {1, 1, 100, 200, EMU_REVERSE, EMU_FORWARD}},
    .tail_every = 1, .tail_s0 = EMU_FORWARD, .tail_s1 = EMU_SKEW,
    .dims_v = {{192, 128}, {36, 72}}, .ndims_v = 2,
    .axes = tc_axes, .naxes = FAM_COUNT(tc_axes),
    .problems = tc_problems, .nproblems = FAM_COUNT(tc_problems),
    .rounds = 2, .picks_per_round = 1, .required_picks = 1,
    .per_dim = 0, .odd_tiles = 0,
    .cost = tc_cost,
    .refs = tc_refs, .nrefs = FAM_COUNT(tc_refs), .ref_label = "FlashAttention-2",
    .sass_insn = "HMMA",
  },
  {
    .name = "tcbwd", .op = FA_OP_BWD,
    .ndims = 1, .dims = {40},
    .ndtypes = 2, .dtypes = {FA_FP16, FA_BF16},
    .list_seq = 128,
    .shapes = {{1, 2, 128, 128, EMU_FORWARD, EMU_SKEW},
               {1, 1, 100, 200, EMU_REVERSE, EMU_RANDOM}},
    .tail_every = 1, .tail_s0 = EMU_SKEW, .tail_s1 = EMU_FORWARD,
    .dims_v = {{192, 128}, {40, 72}}, .ndims_v = 2,
    .axes = tcbwd_axes, .naxes = FAM_COUNT(tcbwd_axes),
    .problems = tcbwd_problems, .nproblems = FAM_COUNT(tcbwd_problems),
    .rounds = 1, .picks_per_round = 2, .required_picks = 1,
    .per_dim = 0, .odd_tiles = 0,
    .cost = tc_cost,
  },
  {
    .name = "wg",
    .arch = "sm_90a",
    .ndims = 3, .dims = {64, 128, 256},
    .ndtypes = 3, .dtypes = {FA_FP16, FA_BF16, FA_E4M3},
    .list_seq = 128,
    .shapes = {{2, 2, 128, 128, EMU_FORWARD, EMU_REVERSE},
               {2, 2, 100, 200, EMU_SKEW, EMU_RANDOM}},
    .tail_every = 1, .tail_s0 = EMU_REVERSE, .tail_s1 = EMU_SKEW,
    .axes = wg_axes, .naxes = FAM_COUNT(wg_axes),
    .problems = wg_problems, .nproblems = FAM_COUNT(wg_problems),
    .rounds = 1, .picks_per_round = 2, .required_picks = 1,
    .per_dim = 0, .odd_tiles = 0,
    .cost = wg_cost,
    .refs = wg_refs, .nrefs = FAM_COUNT(wg_refs), .ref_label = "FlashAttention-3",
    .sass_insn = "HGMMA", .sass_also = "UTMALDG",
  },
  {
    .name = "wgbwd", .op = FA_OP_BWD,
    .arch = "sm_90a",
    .ndims = 2, .dims = {64, 128},
    .ndtypes = 2, .dtypes = {FA_FP16, FA_BF16},
    .list_seq = 128,
    .shapes = {{2, 2, 128, 128, EMU_FORWARD, EMU_REVERSE},
               {1, 2, 100, 200, EMU_SKEW, EMU_RANDOM}},
    /* no tail shapes here: its spaces hold 5 or 6 variants a problem, not
    ** the 9 pairs of tails; test_bwd runs five odd shapes on every one */
    .tail_every = 0,
    .axes = wgbwd_axes, .naxes = FAM_COUNT(wgbwd_axes),
    .problems = wgbwd_problems, .nproblems = FAM_COUNT(wgbwd_problems),
    .rounds = 1, .picks_per_round = 2, .required_picks = 1,
    .per_dim = 0, .odd_tiles = 0,
    .cost = wgbwd_cost,
    .sass_insn = "HGMMA", .sass_also = "UTMALDG",
  },
};
#define NFAMILIES FAM_COUNT(families)

/* The families named on the command line (all when none): 0, or -1 with
** the unknown name printed. */
static int fam_select(int argc, char **argv, int *selected) {
  for (size_t f = 0; f < NFAMILIES; f++) selected[f] = argc < 2;
  for (int a = 1; a < argc; a++) {
    size_t f = 0;
    while (f < NFAMILIES && strcmp(argv[a], families[f].name) != 0) f++;
    if (f == NFAMILIES) {
      fprintf(stderr, "unknown family '%s'; known:", argv[a]);
      for (f = 0; f < NFAMILIES; f++) fprintf(stderr, " %s", families[f].name);
      fputc('\n', stderr);
      return -1;
    }
    selected[f] = 1;
  }
  return 0;
}

#endif
