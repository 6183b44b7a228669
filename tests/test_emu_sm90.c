/*
** test_emu_sm90.c
** The Hopper primitives of the emulator (templates/prelude_emu_sm90.h)
** against formulas written here from the PTX ISA, on random data:
**   wgmma m64nNk16, every N 8..256, f16 and bf16, A from shared memory (K- or
**     M-major) or registers, B K- or N-major, every swizzle mode, scale-d,
**     two wgmma chained on one accumulator, B running past the end of shared
**     memory (the error names an element outside); the canonical layouts of "Shared
**     Memory Matrix Layout" as CuTe writes them, the D and A fragments of
**     "Register Fragments";
**   wgmma m64nNk32 e4m3 the same way (K-major only, a transpose refused),
**     with subnormals and values up to 448; the e4m3 conversions and
**     packing against core/halfprec.c on every pattern, tie and edge;
**   TMA loads and stores, 2D to 4D, out-of-bounds boxes, every swizzle,
**     through the emu backend's tensor map (and its argument checks);
**   mbarrier phases, a wrong parity, a missing arrival (a deadlock naming
**     the barrier), a missing expect_tx; named barriers; elect.sync;
**     setmaxnreg's checks;
**   asynchrony: cp.async, wgmma and TMA complete late under forward, at
**     issue under reverse, in between under random; accumulators read NaN
**     until the wait; the counters.
** Each layout check is also run against a deliberately broken copy of its
** formula, which must fail: the checks can tell layouts apart.
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_preludes.h"
#include "backend.h"
#include "check.h"
#include "emu.h"
#include "halfprec.h"

#define SEED 0x5E90A11CEull

static uint64_t rng_state;

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static unsigned rng_below(unsigned n) { return (unsigned)(rng_next() % n); }

static void *xmalloc(size_t n) {
  void *p = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* ---- Kernel bodies ---- */

/* One wgmma (two, chained, with flag 64) from an image of shared memory
** (q); p.heads flags: 1 bf16, 128 e4m3, 2 A from registers (k: a[4] per
** thread), 4 trans_a, 8 trans_b, 16 scale_d, 32 the macro form (N 64; bf16:
** SS, B N-major, scale-d; e4m3: SS or RS by flag 2); lse: D before, o: D
** after the wait, ws: D right after issue. */
static const char body_wg[] =
  "FA_SM90_KERNEL(wg, 128) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const int t = fa_tid(), n = p.batch, f = p.heads;\n"
  "  for (int i = t; i < p.seq_k; i += 128)\n"
  "    fa_sts_u32x4((fa_u32x4 *)s + i, fa_ldg_u32x4((const fa_u32x4 *)p.q + i));\n"
  "  fa_syncthreads();\n"
  "  unsigned a[4];\n"
  "  for (int i = 0; i < 4; i++) a[i] = fa_ldg_u32((const unsigned *)p.k + 4 * t + i);\n"
  "  float d[128];\n"
  "  for (int i = 0; i < n / 2; i++) d[i] = fa_ldg_f32((const float *)p.lse + 128 * t + i);\n"
  "  fa_wgmma_desc da = fa_wgmma_desc_make(s + p.q_sb, (unsigned)p.q_sn, (unsigned)p.k_sb,\n"
  "                                        (int)p.v_sb);\n"
  "  fa_wgmma_desc db = fa_wgmma_desc_make(s + p.q_sh, (unsigned)p.k_sh, (unsigned)p.k_sn,\n"
  "                                        (int)p.v_sh);\n"
  "  da = fa_wgmma_desc_advance(da, (unsigned)p.v_sn);\n"
  "  db = fa_wgmma_desc_advance(db, (unsigned)p.o_sb);\n"
  "  fa_wgmma_fence();\n"
  "  const int type = (f & 128) ? FA_EMU_E4M3 : f & 1;\n"
  "  if ((f & 32) && type == FA_EMU_E4M3) {\n"
  "    if (f & 2) fa_wgmma_rs_e4m3(64, d, a, db, f & 16);\n"
  "    else fa_wgmma_ss_e4m3(64, d, da, db, f & 16);\n"
  "  } else if (f & 32) {\n"
  "    fa_wgmma_ss_bf16(64, d, da, db, 1, 0, 1);\n"
  "  } else {\n"
  "    fa_emu_wgmma_issue(n, d, (f & 2) ? a : NULL, da, db, f & 16, (f >> 2) & 1, (f >> 3) & 1,\n"
  "                       type, __LINE__);\n"
  "    if (f & 64)\n"
  "      fa_emu_wgmma_issue(n, d, (f & 2) ? a : NULL, da, db, 1, (f >> 2) & 1, (f >> 3) & 1,\n"
  "                         type, __LINE__);\n"
  "  }\n"
  "  fa_wgmma_commit();\n"
  "  for (int i = 0; i < n / 2; i++) fa_st_f32((float *)p.ws + 128 * t + i, d[i]);\n"
  "  fa_wgmma_wait(0);\n"
  "  for (int i = 0; i < n / 2; i++) fa_st_f32((float *)p.o + 128 * t + i, d[i]);\n"
  "}\n";

/* The macro forms of the other three, compiled only (every name of the API
** once). */
static const char body_names[] =
  "FA_SM90_KERNEL(names, 128) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  unsigned a[4] = {0, 0, 0, 0};\n"
  "  float d[128];\n"
  "  fa_wgmma_desc x = fa_wgmma_desc_make(s, 128, 256, 0);\n"
  "  fa_wgmma_ss_f16(256, d, x, x, 0, 1, 0);\n"
  "  fa_wgmma_rs_f16(8, d, a, x, 0, 1);\n"
  "  fa_wgmma_rs_bf16(128, d, a, x, 1, 0);\n"
  "  fa_wgmma_commit();\n"
  "  fa_wgmma_wait(7);\n"
  "  fa_tma_store_wait(3);\n"
  "  fa_setmaxnreg_inc(240);\n"
  "  fa_setmaxnreg_dec(24);\n"
  "  fa_st_f32((float *)p.o + fa_warpgroup(), d[0] + (float)fa_swizzle_offset(16, 128));\n"
  "}\n";

/* A box through TMA: load (tmap[0], coordinates q_sb, q_sh, q_sn, k_sb) into
** shared memory and out to o; then the image k, to shared memory and out by
** a TMA store (tmap[1]); p.batch the rank, p.seq_q the box bytes, p.seq_k
** those rounded up to the 128-byte lines a swizzle permutes within. With
** p.heads & 1, thread 0 copies the box's first 16 bytes to lse before
** waiting; with p.heads & 2 it forgets the expect_tx (2D). */
static const char body_tma[] =
  "FA_SM90_KERNEL(tma, 64) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  unsigned long long *bar = (unsigned long long *)(s + p.seq_k);\n"
  "  const int t = fa_tid(), rank = p.batch;\n"
  "  const int c0 = (int)p.q_sb, c1 = (int)p.q_sh, c2 = (int)p.q_sn, c3 = (int)p.k_sb;\n"
  "  if (t == 0) fa_mbar_init(bar, 1);\n"
  "  fa_fence_mbar_init();\n"
  "  fa_syncthreads();\n"
  "  if (t == 0) {\n"
  "    if (p.heads & 2) {\n"
  "      fa_tma_load_2d(s, &p.tmap[0], c0, c1, bar);\n"
  "      fa_mbar_arrive(bar);\n"
  "    } else {\n"
  "      fa_mbar_arrive_expect_tx(bar, (unsigned)p.seq_q);\n"
  "      if (rank == 2) fa_tma_load_2d(s, &p.tmap[0], c0, c1, bar);\n"
  "      else if (rank == 3) fa_tma_load_3d(s, &p.tmap[0], c0, c1, c2, bar);\n"
  "      else fa_tma_load_4d(s, &p.tmap[0], c0, c1, c2, c3, bar);\n"
  "    }\n"
  "    if (p.heads & 1) fa_st_u32x4((fa_u32x4 *)p.lse, fa_lds_u32x4((const fa_u32x4 *)s));\n"
  "  }\n"
  "  fa_mbar_wait(bar, 0);\n"
  "  for (int i = t; i < p.seq_k / 16; i += 64)\n"
  "    fa_st_u32x4((fa_u32x4 *)p.o + i, fa_lds_u32x4((const fa_u32x4 *)s + i));\n"
  "  fa_syncthreads();\n"
  "  for (int i = t; i < p.seq_k / 16; i += 64)\n"
  "    fa_sts_u32x4((fa_u32x4 *)s + i, fa_ldg_u32x4((const fa_u32x4 *)p.k + i));\n"
  "  fa_fence_proxy_async();\n"
  "  fa_syncthreads();\n"
  "  if (t == 0) {\n"
  "    if (rank == 2) fa_tma_store_2d(&p.tmap[1], s, c0, c1);\n"
  "    else if (rank == 3) fa_tma_store_3d(&p.tmap[1], s, c0, c1, c2);\n"
  "    else fa_tma_store_4d(&p.tmap[1], s, c0, c1, c2, c3);\n"
  "    fa_tma_store_commit();\n"
  "    fa_tma_store_wait(0);\n"
  "  }\n"
  "}\n";

/* A producer (thread 0) hands values 1..4 to 32 consumers (threads 32-63)
** through one slot, a full and an empty mbarrier. p.seq_q: 0 correct, 1
** consumers wait on the wrong parity, 2 the producer forgets an arrival in
** phase 2, 3 the consumers wait on a barrier never initialized. */
static const char body_mb[] =
  "FA_SM90_KERNEL(mb, 64) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  unsigned long long *full = (unsigned long long *)s, *empty = full + 1, *junk = full + 2;\n"
  "  unsigned *slot = (unsigned *)(s + 64);\n"
  "  const int t = fa_tid(), bug = p.seq_q;\n"
  "  if (t == 0) {\n"
  "    fa_mbar_init(full, 1);\n"
  "    fa_mbar_init(empty, 32);\n"
  "  }\n"
  "  fa_fence_mbar_init();\n"
  "  fa_syncthreads();\n"
  "  for (int i = 0; i < 4; i++) {\n"
  "    if (t == 0) {\n"
  "      if (i) fa_mbar_wait(empty, (unsigned)(i - 1) & 1u);\n"
  "      fa_sts_u32(slot, (unsigned)i + 1u);\n"
  "      if (!(bug == 2 && i == 2)) fa_mbar_arrive(full);\n"
  "    } else if (t >= 32) {\n"
  "      if (bug == 3) fa_mbar_wait(junk, 0);\n"
  "      fa_mbar_wait(full, (unsigned)(i + (bug == 1)) & 1u);\n"
  "      fa_st_u32((unsigned *)p.o + 32 * i + t - 32, fa_lds_u32(slot));\n"
  "      fa_mbar_arrive(empty);\n"
  "    }\n"
  "  }\n"
  "}\n";

/* Named barriers: warps 2-3 write, bar.arrive 1, 128; warps 0-1 bar.sync 1,
** 128 and read. p.seq_q 1: the readers give a count of 96. */
static const char body_nb[] =
  "FA_SM90_KERNEL(nb, 128) {\n"
  "  unsigned *s = (unsigned *)fa_smem_base();\n"
  "  const int t = fa_tid();\n"
  "  if (t >= 64) {\n"
  "    fa_sts_u32(s + t - 64, (unsigned)t * 7u);\n"
  "    fa_named_bar_arrive(1, 128);\n"
  "  } else {\n"
  "    fa_named_bar_sync(1, p.seq_q ? 96 : 128);\n"
  "    fa_st_u32((unsigned *)p.o + t, fa_lds_u32(s + t));\n"
  "  }\n"
  "}\n";

/* elect.sync into o; setmaxnreg by p.seq_q: 0 fine, 1 out of range, 2 not
** uniform. */
static const char body_ws[] =
  "FA_SM90_KERNEL(ws, 128) {\n"
  "  const int t = fa_tid();\n"
  "  fa_st_u32((unsigned *)p.o + t, (unsigned)fa_elect_one());\n"
  "  if (p.seq_q == 0) fa_setmaxnreg_dec(40);\n"
  "  if (p.seq_q == 1) fa_emu_setmaxnreg(20, 1, __LINE__);\n"
  "  if (p.seq_q == 2) fa_emu_setmaxnreg(t == 77 ? 232 : 240, 1, __LINE__);\n"
  "}\n";

/* FlashAttention-3's register split: the producer warpgroup down to
** p.seq_k, the consumers up to p.seq_q; a word to o after. */
static const char body_rf[] =
  "FA_SM90_KERNEL(rf, 512) {\n"
  "  if (fa_warpgroup() == 0) fa_emu_setmaxnreg(p.seq_k, 0, __LINE__);\n"
  "  else fa_emu_setmaxnreg(p.seq_q, 1, __LINE__);\n"
  "  fa_st_u32((unsigned *)p.o + fa_tid(), 1u);\n"
  "}\n";

/* cp.async of q into shared memory; o gets shared memory before the wait
** (words 0-3 per lane) and after (4-7). */
static const char body_ca[] =
  "FA_SM90_KERNEL(ca, 32) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const int t = fa_tid();\n"
  "  fa_cp_async_16(s + 16 * t, (const unsigned char *)p.q + 16 * t, 16);\n"
  "  fa_cp_async_commit();\n"
  "  fa_st_u32x4((fa_u32x4 *)p.o + 2 * t, fa_lds_u32x4((const fa_u32x4 *)s + t));\n"
  "  fa_cp_async_wait(0);\n"
  "  fa_st_u32x4((fa_u32x4 *)p.o + 2 * t + 1, fa_lds_u32x4((const fa_u32x4 *)s + t));\n"
  "}\n";

/* A wgmma whose B operand is zeroed right after issue, before the wait (a
** buffer reused too early): A, B K-major, no swizzle, N 8, from q. */
static const char body_wr[] =
  "FA_SM90_KERNEL(wr, 128) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const int t = fa_tid();\n"
  "  for (int i = t; i < 160; i += 128)\n"
  "    fa_sts_u32x4((fa_u32x4 *)s + i, fa_ldg_u32x4((const fa_u32x4 *)p.q + i));\n"
  "  fa_syncthreads();\n"
  "  float d[4] = {0, 0, 0, 0};\n"
  "  fa_wgmma_fence();\n"
  "  fa_wgmma_ss_f16(8, d, fa_wgmma_desc_make(s, 128, 256, 0),\n"
  "                  fa_wgmma_desc_make(s + 2048, 128, 256, 0), 0, 0, 0);\n"
  "  fa_wgmma_commit();\n"
  "  fa_syncthreads();\n"
  "  const fa_u32x4 zero = {0, 0, 0, 0};\n"
  "  if (t < 32) fa_sts_u32x4((fa_u32x4 *)(s + 2048) + t, zero);\n"
  "  fa_syncthreads();\n"
  "  fa_wgmma_wait(0);\n"
  "  for (int i = 0; i < 4; i++) fa_st_f32((float *)p.o + 4 * t + i, d[i]);\n"
  "}\n";

/* The e4m3 conversions: o[i] = the byte of float q[i] (p.seq_q of them),
** lse[b] = byte b as a float (all 256), ws[i] = k[4i..4i+3] packed (64). */
static const char body_cv[] =
  "FA_SM90_KERNEL(cv, 128) {\n"
  "  const int t = fa_tid();\n"
  "  const float *q = (const float *)p.q, *k = (const float *)p.k;\n"
  "  for (int i = t; i < p.seq_q; i += 128)\n"
  "    fa_st_u32((unsigned *)p.o + i, fa_f32_to_e4m3(fa_ldg_f32(q + i)));\n"
  "  for (int b = t; b < 256; b += 128)\n"
  "    fa_st_f32((float *)p.lse + b, fa_e4m3_to_f32((unsigned char)b));\n"
  "  if (t < 64)\n"
  "    fa_st_u32((unsigned *)p.ws + t,\n"
  "              fa_pack_e4m3x4(fa_ldg_f32(k + 4 * t), fa_ldg_f32(k + 4 * t + 1),\n"
  "                             fa_ldg_f32(k + 4 * t + 2), fa_ldg_f32(k + 4 * t + 3)));\n"
  "}\n";

enum { K_WG, K_NAMES, K_TMA, K_MB, K_NB, K_WS, K_CA, K_WR, K_RF, K_CV, NK };
static const emu_source sources[NK] = {
  {"wg", body_wg, &emu_preludes}, {"names", body_names, &emu_preludes}, {"tma", body_tma, &emu_preludes}, {"mb", body_mb, &emu_preludes},
  {"nb", body_nb, &emu_preludes}, {"ws", body_ws, &emu_preludes}, {"ca", body_ca, &emu_preludes}, {"wr", body_wr, &emu_preludes},
  {"rf", body_rf, &emu_preludes}, {"cv", body_cv, &emu_preludes}};
static emu_build builds[NK];

typedef struct bufs {
  void *p[6];    /* q, k, v, o, lse, ws */
  size_t n[6];
} bufs;

static unsigned long long g_seed = 1;

static int launch(int k, unsigned threads, size_t smem, fa_params *prm, const bufs *b,
                  emu_schedule sched, fa_emu_counters *ctr, char *err, size_t errlen) {
  fa_emu_range r[6];
  int nr = 0;
  prm->q = b->p[0], prm->k = b->p[1], prm->v = b->p[2];
  prm->o = b->p[3], prm->lse = b->p[4], prm->ws = b->p[5];
  for (int i = 0; i < 6; i++)
    if (b->p[i]) {
      r[nr].lo = (unsigned long long)(uintptr_t)b->p[i];
      r[nr].hi = r[nr].lo + b->n[i];
      nr++;
    }
  emu_launch_args a = {.fn = builds[k].fn, .entry = sources[k].entry,
                       .grid = {1, 1, 1}, .threads = threads, .smem_bytes = smem,
                       .params = prm, .ranges = r, .nranges = nr};
  emu_launch_opts o = {.schedule = sched, .seed = g_seed++, .threads = 1, .smem_fill = 0xFF};
  memset(ctr, 0, sizeof *ctr);
  err[0] = '\0';
  return emu_launch(&a, &o, ctr, err, errlen);
}

/* ---- Reference formulas (PTX ISA), each with a broken twin ---- */

enum { MUT_NONE, MUT_LBO_SBO, MUT_SWIZZLE, MUT_D_FRAG, MUT_A_FRAG, MUT_A_ORDER, MUT_CHAIN };
static int mutant;

/* CuTe Swizzle<B,4,3> on a byte offset: bits [7, 7+B) XORed into [4, 4+B). */
static unsigned cute_swizzle(unsigned off, int span) {
  const int b = span == 128 ? 3 : span == 64 ? 2 : span == 32 ? 1 : 0;
  const unsigned yyy = ((1u << b) - 1u) << 7;
  return off ^ ((off & yyy) >> (mutant == MUT_SWIZZLE ? 2 : 3));
}

typedef struct layout {
  int mn_major, sw;        /* sw: 0, 32, 64, 128 */
  unsigned lbo, sbo, base, adv;
  unsigned es;             /* bytes per element: 2, or 1 for e4m3 (K-major only) */
} layout;

/* The canonical layouts ("Shared Memory Matrix Layout", T = 16 bytes: 8
** 16-bit elements or 16 e4m3), in CuTe's notation, strides turned to bytes:
**   K-major  none ((8,m),(T,2k)):((1T,SBO),(1,LBO))
**   K-major  sw S ((8,m),(T,2k)):((S/16 T,SBO),(1,T))
**   MN-major none ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
**   MN-major sw S ((T,S/16,m),(8,k)):((1,T,LBO),(S/16 T,SBO)) */
static unsigned ref_offset(const layout *L, unsigned mn, unsigned k) {
  unsigned lbo = L->lbo, sbo = L->sbo;
  if (mutant == MUT_LBO_SBO) lbo = L->sbo, sbo = L->lbo;
  unsigned x;
  if (!L->mn_major) {  /* in bytes: kb the element's byte in its K row */
    const unsigned row = L->sw ? (unsigned)L->sw : 16, kb = L->es * k;
    x = (mn % 8) * row + kb % 16 + (mn / 8) * sbo + (kb / 16) * (L->sw ? 16 : lbo);
  } else {
    const unsigned s = L->sw ? (unsigned)L->sw / 16 : 1;
    x = 2 * (mn % 8) + 16 * ((mn / 8) % s) + (mn / (8 * s)) * (L->sw ? lbo : sbo) +
        (k % 8) * 16 * s + (k / 8) * (L->sw ? sbo : lbo);
  }
  return cute_swizzle(L->base + L->adv + x, L->sw);
}

/* A legal layout of an operand with `ext` rows (M or N) by 32 bytes of K
** (16 elements of es 2, 32 of es 1). */
static layout make_layout(int mn_major, int sw, unsigned ext, unsigned base, unsigned es) {
  layout L = {mn_major, sw, 0, 0, base, 0, es};
  const unsigned pad = 16 * rng_below(4), alt = rng_below(2);
  if (!sw) {  /* core matrices of 128 bytes; LBO along K, SBO along M/N in both */
    if (alt) L.lbo = 128, L.sbo = 256 + pad;
    else L.sbo = 128, L.lbo = 128 * ((ext + 7) / 8) + pad;
  } else if (!mn_major) {
    L.lbo = 16, L.sbo = 8 * (unsigned)sw;
    L.adv = 32 * rng_below((unsigned)sw / 32);  /* the k16 slice inside a swizzled row */
  } else {
    const unsigned atom = 8 * (unsigned)sw, per = (unsigned)sw / 2, nrep = (ext + per - 1) / per;
    if (alt) L.lbo = atom, L.sbo = atom * (nrep + 1);  /* a gap: LBO and SBO differ */
    else L.sbo = atom, L.lbo = 2 * atom;
  }
  return L;
}

/* D fragment: thread t (warp w, lane l), d[i] at row 16w + l/4 + 8((i/2)%2),
** column 8(i/4) + 2(l%4) + i%2. */
static void ref_d(int t, int i, int *row, int *col) {
  const int w = (t / 32) % 4, l = t % 32;
  int r8 = (i / 2) % 2, c1 = i % 2;
  if (mutant == MUT_D_FRAG) r8 = i % 2, c1 = (i / 2) % 2;
  *row = 16 * w + l / 4 + 8 * r8;
  *col = 8 * (i / 4) + 2 * (l % 4) + c1;
}

/* A fragment, per warp mma.m16n8k16's A (16-bit, per = 2 elements a
** register) or mma.m16n8k32's (e4m3, per = 4; CUTLASS's GMMA ALayout_64x32):
** register j, element h (from the low bits) of thread t at row 16w + l/4 +
** 8(j%2), column per(l%4) + h + 4per(j/2). */
static void ref_a(int t, int j, int h, int per, int *row, int *col) {
  const int w = (t / 32) % 4, l = t % 32;
  int jr = j % 2, jc = j / 2;
  if (mutant == MUT_A_FRAG) jr = j / 2, jc = j % 2;
  if (mutant == MUT_A_ORDER) h = per - 1 - h;
  *row = 16 * w + l / 4 + 8 * jr;
  *col = per * (l % 4) + h + 4 * per * jc;
}

/* A random value m/32, |m| < 128: exact in f16 and bf16. */
static unsigned short half_bits(double v, int bf16) {
  if (bf16) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (unsigned short)(u >> 16);
  }
  if (v == 0) return 0;
  unsigned sign = v < 0 ? 0x8000u : 0;
  int e;
  double m = frexp(fabs(v), &e);  /* m in [0.5, 1) */
  return (unsigned short)(sign | (unsigned)(e - 1 + 15) << 10 | (unsigned)((m * 2 - 1) * 1024));
}

static double rand_value(void) { return ((double)rng_below(255) - 127) / 32; }

/* A random e4m3 value: mostly |x| < 4 (exponent field 0-8, a ninth of them
** subnormal or zero), one in 16 any finite pattern (up to +-448). */
static double rand_e4m3(void) {
  unsigned b;
  do b = rng_below(16) ? rng_below(2) << 7 | rng_below(9) << 3 | rng_below(8) : rng_below(256);
  while ((b & 0x7f) == 0x7f);
  return hp_e4m3_to_double((uint8_t)b);
}

/* wgmma's input types: 0 f16, 1 bf16, 2 e4m3. */
enum { T_F16, T_BF16, T_E4M3 };
static const char *const type_names[3] = {"f16", "bf16", "e4m3"};

static double rand_elem(int type) { return type == T_E4M3 ? rand_e4m3() : rand_value(); }

static unsigned elem_bits(double v, int type) {
  return type == T_E4M3 ? hp_e4m3_from_double(v, 1) : half_bits(v, type == T_BF16);
}

/* v stored at byte `off` of shared memory, little-endian. */
static void put_elem(unsigned char *s, unsigned off, double v, int type) {
  const unsigned h = elem_bits(v, type);
  s[off] = (unsigned char)h;
  if (type != T_E4M3) s[off + 1] = (unsigned char)(h >> 8);
}

/* One wgmma case; the number of wrong elements (D, D before the wait not
** NaN, counters), or -1 when the launch failed (message in err). */
typedef struct wg_case {
  int n, type, rs, ta, tb, swa, swb, scale, chain, macro;
  emu_schedule sched;
  int cut;  /* > 0: shared memory ends this many bytes before B's last element does */
} wg_case;

static size_t wg_smem;   /* run_wg's last shared memory size */
static unsigned wg_bmax; /* and the offset of its B's last element */

static int run_wg(const wg_case *c, char *err, size_t errlen) {
  const int n = c->n, K = c->type == T_E4M3 ? 32 : 16;
  const unsigned es = c->type == T_E4M3 ? 1 : 2;
  double A[64][32], B[32][256];
  for (int i = 0; i < 64; i++)
    for (int k = 0; k < K; k++) A[i][k] = rand_elem(c->type);
  for (int k = 0; k < K; k++)
    for (int j = 0; j < n; j++) B[k][j] = rand_elem(c->type);
  layout la = make_layout(c->ta, c->swa, 64, 0, es);
  unsigned amax = 0;
  for (unsigned i = 0; i < 64; i++)
    for (unsigned k = 0; k < (unsigned)K; k++) {
      unsigned o = ref_offset(&la, i, k);
      if (o > amax) amax = o;
    }
  layout lb = make_layout(c->tb, c->swb, (unsigned)n, (amax / 1024 + 1 + rng_below(2)) * 1024, es);
  unsigned bmax = 0;
  for (unsigned j = 0; j < (unsigned)n; j++)
    for (unsigned k = 0; k < (unsigned)K; k++) {
      unsigned o = ref_offset(&lb, j, k);
      if (o > bmax) bmax = o;
    }
  const size_t img = (bmax + 2 + 1023) / 1024 * 1024;
  const size_t smem = c->cut ? bmax + es - (unsigned)c->cut : img;
  wg_smem = smem, wg_bmax = bmax;
  unsigned char *s = xmalloc(img);
  for (size_t i = 0; i < img; i += es) put_elem(s, (unsigned)i, rand_elem(c->type), c->type);
  for (unsigned i = 0; i < 64; i++)  /* over the garbage */
    for (unsigned k = 0; k < (unsigned)K; k++) put_elem(s, ref_offset(&la, i, k), A[i][k], c->type);
  for (unsigned j = 0; j < (unsigned)n; j++)
    for (unsigned k = 0; k < (unsigned)K; k++) put_elem(s, ref_offset(&lb, j, k), B[k][j], c->type);
  unsigned *afrag = xmalloc(128 * 16);
  const int per = 4 / (int)es;
  for (int t = 0; t < 128; t++)
    for (int j = 0; j < 4; j++) {
      unsigned w = 0;
      for (int h = 0; h < per; h++) {
        int r, col;
        ref_a(t, j, h, per, &r, &col);
        w |= elem_bits(A[r][col], c->type) << (8 * (int)es * h);
      }
      afrag[4 * t + j] = w;
    }
  float *cin = xmalloc(128 * 128 * 4), *out = xmalloc(128 * 128 * 4);
  float *early = xmalloc(128 * 128 * 4);
  for (int i = 0; i < 128 * 128; i++)
    cin[i] = (float)((double)(int64_t)(rng_next() >> 40) / (double)(1 << 23) - 1.0);
  bufs b = {{s, afrag, NULL, out, cin, early}, {img, 128 * 16, 0, 128 * 128 * 4, 128 * 128 * 4,
                                                128 * 128 * 4}};
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  prm.seq_k = (int)(smem / 16);
  prm.batch = n;
  prm.heads = (c->type == T_BF16) | c->rs << 1 | c->ta << 2 | c->tb << 3 | c->scale << 4 |
              c->macro << 5 | c->chain << 6 | (c->type == T_E4M3) << 7;
  prm.q_sb = la.base, prm.q_sn = la.lbo, prm.k_sb = la.sbo, prm.v_sb = la.sw, prm.v_sn = la.adv;
  prm.q_sh = lb.base, prm.k_sh = lb.lbo, prm.k_sn = lb.sbo, prm.v_sh = lb.sw, prm.o_sb = lb.adv;
  fa_emu_counters ctr;
  int bad = -1;
  if (launch(K_WG, 128, smem, &prm, &b, c->sched, &ctr, err, errlen) == 0) {
    bad = 0;
    for (int t = 0; t < 128; t++)
      for (int i = 0; i < n / 2; i++) {
        int r, col;
        ref_d(t, i, &r, &col);
        double sum = 0;  /* exact: e4m3 products are multiples of 2^-18 under 2^18 */
        for (int k = 0; k < K; k++) sum += A[r][k] * B[k][col];
        float want = (float)(sum + (c->scale ? (double)cin[128 * t + i] : 0.0));
        if (c->chain) want = (float)(sum + (double)(mutant == MUT_CHAIN ? 0.0f : want));
        const float got = out[128 * t + i];
        if (memcmp(&got, &want, 4) && bad++ < 3 && mutant == MUT_NONE)
          fprintf(stderr, "wgmma n%d %s %s ta%d tb%d sw%d/%d: thread %d d[%d] (%d,%d) = %.9g, "
                  "want %.9g\n", n, type_names[c->type], c->rs ? "RS" : "SS", c->ta, c->tb,
                  c->swa, c->swb, t, i, r, col, got, want);
        if (!isnan(early[128 * t + i])) bad++;
      }
    const unsigned long long nw = c->chain ? 2 : 1;
    if (ctr.wgmma != nw || ctr.wgmma_flops != nw * 2 * 64 * (unsigned long long)n * K) bad++;
  }
  free(s), free(afrag), free(cin), free(out), free(early);
  return bad;
}

static const int swizzles[4] = {0, 32, 64, 128};

static void test_wgmma_sweep(void) {
  static const emu_schedule sch[3] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM};
  int iter = 0, fails = 0, cases = 0;
  char err[512];
  for (int bf = 0; bf < 2; bf++)
    for (int n = 8; n <= 256; n += 8)
      for (int form = 0; form < 6; form++, iter++) {
        wg_case c = {n, bf, form >= 4, form < 4 ? form & 1 : 0, form < 4 ? form >> 1 : form & 1,
                     swizzles[(iter / 4) % 4], swizzles[iter % 4], (int)rng_below(2),
                     iter % 5 == 0, 0, sch[iter % 3], 0};
        const int bad = run_wg(&c, err, sizeof err);
        cases++;
        if (bad) {
          fails++;
          if (bad < 0 && fails < 4) fprintf(stderr, "wgmma launch: %s\n", err);
        }
      }
  CHECK(fails == 0, "wgmma: %d of %d cases wrong", fails, cases);
  /* e4m3, SS and RS, every N; over each 16 N in a row, every pair of A and
  ** B swizzles in each form. */
  fails = cases = 0;
  for (int n = 8; n <= 256; n += 8)
    for (int rs = 0; rs < 2; rs++, cases++) {
      const int i = n / 8 - 1;
      wg_case c = {n, T_E4M3, rs, 0, 0, swizzles[i % 4], swizzles[(i / 4 + rs) % 4],
                   (int)rng_below(2), i % 5 == 0, 0, sch[(i + rs) % 3], 0};
      const int bad = run_wg(&c, err, sizeof err);
      if (bad) {
        fails++;
        if (bad < 0 && fails < 4) fprintf(stderr, "wgmma e4m3 launch: %s\n", err);
      }
    }
  CHECK(fails == 0, "wgmma e4m3: %d of %d cases wrong", fails, cases);
  /* The macro forms (N 64, bf16, SS, B N-major, scale-d; e4m3 SS and RS). */
  wg_case m = {64, 1, 0, 0, 1, 128, 64, 1, 0, 1, EMU_FORWARD, 0};
  CHECK(run_wg(&m, err, sizeof err) == 0, "fa_wgmma_ss_bf16(64, ...): %s", err);
  for (int rs = 0; rs < 2; rs++)
    for (int scale = 0; scale < 2; scale++) {
      wg_case e = {64, T_E4M3, rs, 0, 0, swizzles[2 * scale + rs], 128, scale, 0, 1, EMU_RANDOM, 0};
      CHECK(run_wg(&e, err, sizeof err) == 0, "fa_wgmma_%s_e4m3(64, ..., scale-d %d): %s",
            rs ? "rs" : "ss", scale, err);
    }
  /* fp8 operands are K-major: a transposed one is refused. */
  for (int ta = 0; ta < 2; ta++) {
    wg_case e = {64, T_E4M3, 0, ta, !ta, 0, 0, 0, 0, 0, EMU_FORWARD, 0};
    CHECK(run_wg(&e, err, sizeof err) < 0 && strstr(err, "fp8 operands are K-major"),
          "e4m3 wgmma with trans_%c: %s", ta ? 'a' : 'b', err);
  }
}

/* Shared memory that ends 8 bytes into B's last 16-byte chunk: the launch
** fails naming an element of B that lies outside, not the chunk's first
** (f16 K-major and bf16 N-major, every swizzle; e4m3). */
static void test_wgmma_bounds(void) {
  char err[512];
  for (int type = 0; type < 3; type++)
    for (int sw = 0; sw < 4; sw++) {
      const int mn = type == T_BF16;
      const unsigned es = type == T_E4M3 ? 1 : 2;
      wg_case c = {64, type, 0, 0, mn, 128, swizzles[sw], 0, 0, 0, EMU_FORWARD, 8};
      const int bad = run_wg(&c, err, sizeof err);
      static const char what[] = "wgmma: operand element at shared offset ";
      const char *at = strstr(err, what);
      unsigned off = 0;
      const int named = bad < 0 && at && sscanf(at + strlen(what), "%u", &off) == 1 &&
                        strstr(err, "outside the CTA's shared memory");
      CHECK(named && off + es > wg_smem && off <= wg_bmax,
            "wgmma %s, B %s-major, swizzle %d, shared memory of %zu bytes, B to %u: %s",
            type_names[type], mn ? "N" : "K", swizzles[sw], wg_smem, wg_bmax,
            bad < 0 ? err : "launched");
    }
}

/* Every broken formula must make every case it touches fail: f16 K-major,
** bf16 MN-major, e4m3 (K-major). */
static void test_wgmma_mutants(void) {
  static const struct { int m; const char *what; } muts[] = {
    {MUT_LBO_SBO, "leading and stride byte offsets swapped"},
    {MUT_SWIZZLE, "swizzle shifted by 2, not 3"},
    {MUT_D_FRAG, "D fragment rows and columns mixed"},
    {MUT_A_FRAG, "A fragment registers mixed"},
    {MUT_A_ORDER, "the elements of an A register in reverse order"},
    {MUT_CHAIN, "the second of two chained wgmma not seeing the first"}};
  char err[512];
  for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
    mutant = muts[i].m;
    int caught = 0, tried = 0;
    const int rs = mutant == MUT_A_FRAG || mutant == MUT_A_ORDER;
    for (int type = 0; type < 3; type++)
      for (int sw = 0; sw < 4; sw++) {
        if (mutant == MUT_SWIZZLE && sw == 0) continue;  /* nothing to swizzle */
        const int mn = type == T_BF16;
        wg_case c = {64, type, rs, mn, mn, swizzles[sw], swizzles[sw], 0, mutant == MUT_CHAIN, 0,
                     EMU_FORWARD, 0};
        tried++;
        caught += run_wg(&c, err, sizeof err) != 0;  /* wrong, or read past the end */
      }
    mutant = MUT_NONE;
    CHECK(caught == tried, "broken formula (%s) caught in %d of %d cases", muts[i].what,
          caught, tried);
  }
}

/* ---- e4m3 conversions ---- */

/* fa_f32_to_e4m3 against hp_e4m3_from_double(x, 1) on every e4m3 value, each
** midpoint between neighbours (ties to even) and the floats either side,
** past 448, infinities, -0, NaN and random floats; fa_e4m3_to_f32 against
** hp_e4m3_to_double on all 256 bytes; fa_pack_e4m3x4's byte order. */
static void test_e4m3_conversions(void) {
  enum { NRAND = 1 << 15, NX = 254 + 6 * 127 + 16 + NRAND };
  float *x = xmalloc(NX * sizeof *x), *f = xmalloc(256 * sizeof *f), *k = xmalloc(256 * 4);
  unsigned *o = xmalloc(NX * sizeof *o), *packed = xmalloc(64 * 4);
  int nx = 0;
  for (int b = 0; b < 256; b++)
    if ((b & 0x7f) != 0x7f) x[nx++] = (float)hp_e4m3_to_double((uint8_t)b);
  for (int b = 0; b < 0x7f; b++) {  /* b 0x7e: 448 and the 480 past it, saturated */
    const double lo = hp_e4m3_to_double((uint8_t)b);
    const double hi = b < 0x7e ? hp_e4m3_to_double((uint8_t)(b + 1)) : 480.0;
    for (int sg = -1; sg <= 1; sg += 2) {
      const float mid = (float)(sg * (lo + hi) / 2);  /* exact: 5 significant bits */
      x[nx++] = mid, x[nx++] = nextafterf(mid, -INFINITY), x[nx++] = nextafterf(mid, INFINITY);
    }
  }
  static const float edge[] = {448.5f, 480.f, 1e4f, FLT_MAX, INFINITY, 1e-45f, 1e-30f, NAN};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
    x[nx++] = edge[i], x[nx++] = copysignf(edge[i], -1.f);
  for (int i = 0; i < NRAND; i++) {  /* half any bits, half around e4m3's range */
    const uint32_t r = (uint32_t)rng_next();
    uint32_t u = r;
    if (i % 2) u = (r & 0x807FFFFFu) | (uint32_t)(127 - 12 + (int)rng_below(23)) << 23;
    memcpy(&x[nx++], &u, 4);
  }
  CHECK(nx == NX, "conversion inputs: %d, want %d", nx, (int)NX);
  for (int i = 0; i < 256; i++) k[i] = (float)rand_e4m3();
  bufs b = {{x, k, NULL, o, f, packed}, {NX * 4, 256 * 4, 0, NX * 4, 256 * 4, 64 * 4}};
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  prm.seq_q = NX;
  fa_emu_counters ctr;
  char err[512];
  int rc = launch(K_CV, 128, 0, &prm, &b, EMU_RANDOM, &ctr, err, sizeof err);
  CHECK(rc == 0, "e4m3 conversion kernel: %s", err);
  int bad = 0;
  for (int i = 0; rc == 0 && i < NX; i++) {
    const unsigned want = hp_e4m3_from_double((double)x[i], 1);
    if (o[i] != want && bad++ < 3)
      fprintf(stderr, "fa_f32_to_e4m3(%a) = 0x%02x, want 0x%02x\n", (double)x[i], o[i], want);
  }
  CHECK(bad == 0, "fa_f32_to_e4m3: %d of %d wrong", bad, (int)NX);
  bad = 0;
  for (int i = 0; rc == 0 && i < 256; i++) {
    const double want = hp_e4m3_to_double((uint8_t)i);
    const int wrong = isnan(want) ? !isnan(f[i])
                                  : (double)f[i] != want || !signbit(f[i]) != !signbit(want);
    if (wrong && bad++ < 3)
      fprintf(stderr, "fa_e4m3_to_f32(0x%02x) = %a, want %a\n", i, (double)f[i], want);
  }
  CHECK(bad == 0, "fa_e4m3_to_f32: %d of 256 wrong", bad);
  bad = 0;
  for (int t = 0; rc == 0 && t < 64; t++) {
    unsigned want = 0;
    for (int e = 0; e < 4; e++) want |= (unsigned)hp_e4m3_from_double(k[4 * t + e], 1) << 8 * e;
    bad += packed[t] != want;
  }
  CHECK(bad == 0, "fa_pack_e4m3x4: %d of 64 words wrong (e0 in the lowest byte)", bad);
  free(x), free(f), free(k), free(o), free(packed);
}

/* ---- TMA ---- */

/* A tensor of random bytes, a random box and coordinates (some outside). */
typedef struct tma_case {
  fa_tmap_desc d;
  int c[4];
  size_t bytes;
} tma_case;

static tma_case make_tma(int rank, int elem, int sw) {
  tma_case t;
  memset(&t, 0, sizeof t);
  t.d.elem_bytes = elem, t.d.rank = rank, t.d.swizzle = sw;
  for (int i = 0; i < 4; i++) t.d.dims[i] = 1, t.d.box[i] = 1;
  const unsigned span = sw ? (unsigned)sw : 256;  /* bytes of the box's inner row */
  t.d.box[0] = (16 * (1 + rng_below(span / 16))) / (unsigned)elem;
  t.d.dims[0] = t.d.box[0] + rng_below(40);
  for (int i = 1; i < rank; i++) {
    t.d.box[i] = 1 + rng_below(i == 1 ? 20 : 3);
    t.d.dims[i] = 1 + rng_below(i == 1 ? 30 : 4);
  }
  unsigned long long st = (t.d.dims[0] * (unsigned long long)elem + 15) / 16 * 16;
  st += 16 * rng_below(3);
  for (int i = 1; i < rank; i++) {
    t.d.strides[i - 1] = st;
    st *= t.d.dims[i];
  }
  t.bytes = st;
  for (int i = 0; i < rank; i++)
    t.c[i] = (int)rng_below((unsigned)t.d.dims[i] + t.d.box[i]) - (int)t.d.box[i] / 2;
  return t;
}

static unsigned box_bytes(const fa_tmap_desc *d) {
  unsigned n = (unsigned)d->elem_bytes;
  for (int i = 0; i < 4; i++) n *= d->box[i];
  return n;
}

/* The global address of box element (b0..b3), or NULL out of bounds. */
static unsigned char *box_global(const tma_case *t, unsigned char *g, const unsigned *b) {
  long long off = 0;
  for (int i = 0; i < 4; i++) {
    long long x = (long long)t->c[i] + b[i];
    if (x < 0 || x >= (long long)t->d.dims[i]) return NULL;
    off += x * (i ? (long long)t->d.strides[i - 1] : t->d.elem_bytes);
  }
  return g + off;
}

static int tma_snapshot_landed;  /* run_tma with snap: the box had landed before the wait */

/* Run one load and one store; the number of wrong bytes, -1 on failure. */
static int run_tma(fa_backend *be, const tma_case *t, emu_schedule sched, int snap,
                   fa_emu_counters *ctr, char *err, size_t errlen) {
  const unsigned bb = box_bytes(&t->d), row = t->d.box[0] * (unsigned)t->d.elem_bytes;
  const unsigned region = (bb + 127) / 128 * 128;
  unsigned char *src = xmalloc(t->bytes), *dst = xmalloc(t->bytes);
  unsigned char *img = xmalloc(region), *out = xmalloc(region), *snapshot = xmalloc(16);
  for (size_t i = 0; i < t->bytes; i++) src[i] = (unsigned char)rng_next(), dst[i] = 0xA5;
  for (unsigned i = 0; i < region; i++) img[i] = (unsigned char)rng_next();
  memset(snapshot, 0xFF, 16);
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  fa_tmap_desc d = t->d;
  d.base = src;
  int bad = -1;
  if (backend_tmap(be, &d, &prm.tmap[0], err, errlen) != 0) goto out;
  d.base = dst;
  if (backend_tmap(be, &d, &prm.tmap[1], err, errlen) != 0) goto out;
  prm.batch = t->d.rank, prm.seq_q = (int)bb, prm.seq_k = (int)region, prm.heads = snap;
  prm.q_sb = t->c[0], prm.q_sh = t->c[1], prm.q_sn = t->c[2], prm.k_sb = t->c[3];
  bufs b = {{src, img, dst, out, snapshot, NULL}, {t->bytes, region, t->bytes, region, 16, 0}};
  if (launch(K_TMA, 64, region + 64, &prm, &b, sched, ctr, err, errlen) != 0) goto out;
  bad = 0;
  unsigned bx[4], r = 0;
  for (bx[3] = 0; bx[3] < t->d.box[3]; bx[3]++)
    for (bx[2] = 0; bx[2] < t->d.box[2]; bx[2]++)
      for (bx[1] = 0; bx[1] < t->d.box[1]; bx[1]++, r++)
        for (bx[0] = 0; bx[0] < t->d.box[0]; bx[0]++) {
          const unsigned pos = cute_swizzle(r * row + bx[0] * (unsigned)t->d.elem_bytes,
                                            t->d.swizzle);
          const unsigned char *gs = box_global(t, src, bx);
          unsigned char *gd = box_global(t, dst, bx);
          for (int e = 0; e < t->d.elem_bytes; e++) {
            bad += out[pos + e] != (gs ? gs[e] : 0);
            if (gd) bad += gd[e] != img[pos + e];
          }
        }
  /* Out-of-bounds elements of the store are not written: what the box
  ** covers inside the tensor is all that changed. */
  size_t untouched = 0;
  unsigned long long in_bytes = 0;
  for (size_t i = 0; i < t->bytes; i++) untouched += dst[i] == 0xA5;
  for (bx[3] = 0; bx[3] < t->d.box[3]; bx[3]++)
    for (bx[2] = 0; bx[2] < t->d.box[2]; bx[2]++)
      for (bx[1] = 0; bx[1] < t->d.box[1]; bx[1]++)
        for (bx[0] = 0; bx[0] < t->d.box[0]; bx[0]++)
          in_bytes += box_global(t, src, bx) ? (unsigned)t->d.elem_bytes : 0;
  if (untouched + in_bytes < t->bytes) bad++;
  if (ctr->tma_bytes != 2ull * bb || ctr->mbar_waits != 64) bad++;
  /* Before the wait, the fill (0xFF) when nothing had landed. */
  tma_snapshot_landed = 0;
  for (int i = 0; i < 16; i++) tma_snapshot_landed |= snapshot[i] != 0xFF;
out:
  free(src), free(dst), free(img), free(out);
  free(snapshot);
  return bad;
}

static void test_tma(fa_backend *be) {
  static const emu_schedule sch[3] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM};
  char err[512];
  fa_emu_counters ctr;
  int fails = 0, cases = 0;
  for (int rank = 2; rank <= 4; rank++)
    for (int sw = 0; sw < 4; sw++)
      for (int elem = 2; elem <= 4; elem += 2)
        for (int rep = 0; rep < 4; rep++, cases++) {
          tma_case t = make_tma(rank, elem, swizzles[sw]);
          int bad = run_tma(be, &t, sch[rep % 3], 0, &ctr, err, sizeof err);
          if (bad && fails++ < 3)
            fprintf(stderr, "TMA %dD elem %d swizzle %d: %d wrong%s%s\n", rank, elem,
                    swizzles[sw], bad, bad < 0 ? ": " : "", bad < 0 ? err : "");
        }
  CHECK(fails == 0, "TMA: %d of %d cases wrong", fails, cases);
  /* The broken swizzle must be caught in every swizzled mode. */
  for (int sw = 1; sw < 4; sw++) {
    tma_case t = make_tma(2, 2, swizzles[sw]);
    t.d.box[1] = 16, t.d.dims[1] = 40, t.c[1] = 0, t.c[0] = 0;
    t.d.strides[0] = (t.d.dims[0] * 2 + 15) / 16 * 16, t.bytes = t.d.strides[0] * 40;
    mutant = MUT_SWIZZLE;
    CHECK(run_tma(be, &t, EMU_FORWARD, 0, &ctr, err, sizeof err) > 0,
          "TMA: broken swizzle %d not caught", swizzles[sw]);
    mutant = MUT_NONE;
  }
  /* When the box lands: at the wait (forward), at issue (reverse). */
  tma_case t = make_tma(2, 4, 0);
  t.c[0] = t.c[1] = 0;
  CHECK(run_tma(be, &t, EMU_FORWARD, 1, &ctr, err, sizeof err) == 0 && !tma_snapshot_landed,
        "TMA forward: the box landed before the wait (%s)", err);
  CHECK(run_tma(be, &t, EMU_REVERSE, 1, &ctr, err, sizeof err) == 0 && tma_snapshot_landed,
        "TMA reverse: the box had not landed at issue (%s)", err);
  /* A missing expect_tx: the phase completes on the arrival alone, with the
  ** load in flight (forward); at issue (reverse) the bytes land first and
  ** the arrival never completes the phase. */
  CHECK(run_tma(be, &t, EMU_FORWARD, 2, &ctr, err, sizeof err) < 0 &&
        strstr(err, "missing arrive.expect_tx"), "TMA without expect_tx (forward): %s", err);
  CHECK(run_tma(be, &t, EMU_REVERSE, 2, &ctr, err, sizeof err) < 0 &&
        strstr(err, "more bytes landed than expected"), "TMA without expect_tx (reverse): %s",
        err);
}

/* cuTensorMapEncodeTiled's argument checks on the emu backend. */
static void test_tmap_checks(fa_backend *be) {
  static _Alignas(16) unsigned char buf[4096];
  const fa_tmap_desc good = {buf, 2, 2, {64, 16, 1, 1}, {128, 0, 0}, {64, 8, 1, 1}, 128};
  fa_tmap map;
  char err[256];
  CHECK(backend_tmap(be, &good, &map, err, sizeof err) == 0, "good tensor map refused: %s", err);
  CHECK(map.w[0] == FA_EMU_TMAP_TAG, "tensor map not tagged");
  struct { const char *what; fa_tmap_desc d; } bad[12];
  int n = 0;
  for (int i = 0; i < 12; i++) bad[i].d = good;
  bad[n].what = "null base", bad[n++].d.base = NULL;
  bad[n].what = "base not 16-aligned", bad[n++].d.base = buf + 8;
  bad[n].what = "element size 3", bad[n++].d.elem_bytes = 3;
  bad[n].what = "rank 5", bad[n++].d.rank = 5;
  bad[n].what = "swizzle 16", bad[n++].d.swizzle = 16;
  bad[n].what = "dimension 0", bad[n++].d.dims[1] = 0;
  bad[n].what = "box 257", bad[n++].d.box[1] = 257;
  bad[n].what = "stride not a multiple of 16", bad[n++].d.strides[0] = 136;
  bad[n].what = "stride 0", bad[n++].d.strides[0] = 0;
  bad[n].what = "inner box not 16 bytes", bad[n++].d.box[0] = 4;
  bad[n].what = "inner box past the swizzle span", bad[n].d.swizzle = 64, n++;
  bad[n].what = "box 0", bad[n++].d.box[0] = 0;
  for (int i = 0; i < n; i++) {
    err[0] = '\0';
    const int rc = backend_tmap(be, &bad[i].d, &map, err, sizeof err);
    CHECK(rc == FA_EINVAL && strstr(err, "tensor map refused"), "%s: accepted (%d, %s)",
          bad[i].what, rc, err);
  }
}

/* ---- mbarriers, named barriers, elect, setmaxnreg ---- */

static void test_mbarrier(void) {
  unsigned o[128];
  bufs b = {{NULL, NULL, NULL, o, NULL, NULL}, {0, 0, 0, sizeof o, 0, 0}};
  fa_params prm;
  fa_emu_counters ctr;
  char err[512];
  static const emu_schedule sch[4] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM, EMU_SKEW};
  for (int s = 0; s < 4; s++) {
    memset(&prm, 0, sizeof prm);
    memset(o, 0, sizeof o);
    int rc = launch(K_MB, 64, 128, &prm, &b, sch[s], &ctr, err, sizeof err);
    int bad = 0;
    for (int i = 0; i < 128; i++) bad += o[i] != (unsigned)(i / 32 + 1);
    CHECK(rc == 0 && bad == 0, "mbarrier pipeline (%s): %d wrong: %s", emu_schedule_name(sch[s]),
          bad, err);
    CHECK(ctr.mbar_waits == 3 + 4 * 32, "mbarrier waits counted %llu, want %d", ctr.mbar_waits,
          3 + 4 * 32);
  }
  /* The wrong parity: the consumers run ahead and read stale slots. */
  memset(&prm, 0, sizeof prm);
  prm.seq_q = 1;
  int rc = launch(K_MB, 64, 128, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  int bad = 0;
  for (int i = 0; i < 128; i++) bad += o[i] != (unsigned)(i / 32 + 1);
  CHECK(rc != 0 || bad > 0, "a wait on the wrong parity went unnoticed");
  /* A missing arrival: a deadlock naming the barrier, the phase, the threads. */
  memset(&prm, 0, sizeof prm);
  prm.seq_q = 2;
  rc = launch(K_MB, 64, 128, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "mbarrier at shared offset 0") && strstr(err, "parity 0") &&
        strstr(err, "threads 32-63"), "missing arrival: %s", err);
  memset(&prm, 0, sizeof prm);
  prm.seq_q = 3;
  rc = launch(K_MB, 64, 128, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "before mbarrier.init"), "uninitialized mbarrier: %s", err);
}

static void test_named_elect_regs(void) {
  unsigned o[512];
  bufs b = {{NULL, NULL, NULL, o, NULL, NULL}, {0, 0, 0, sizeof o, 0, 0}};
  fa_params prm;
  fa_emu_counters ctr;
  char err[512];
  static const emu_schedule sch[4] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM, EMU_SKEW};
  for (int s = 0; s < 4; s++) {
    memset(&prm, 0, sizeof prm);
    int rc = launch(K_NB, 128, 256, &prm, &b, sch[s], &ctr, err, sizeof err);
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += o[i] != (unsigned)(i + 64) * 7u;
    CHECK(rc == 0 && bad == 0, "named barrier (%s): %d wrong: %s", emu_schedule_name(sch[s]),
          bad, err);
    /* The 64 threads of bar.sync wait; the 64 of bar.arrive go on. */
    CHECK(ctr.named_waits == 64, "named-barrier waits (%s) counted %llu, want 64",
          emu_schedule_name(sch[s]), ctr.named_waits);
    rc = launch(K_WS, 128, 0, &prm, &b, sch[s], &ctr, err, sizeof err);
    int lanes[4] = {-1, -1, -1, -1}, many = 0;
    for (int i = 0; i < 128; i++)
      if (o[i]) many += lanes[i / 32] >= 0, lanes[i / 32] = i % 32;
    CHECK(rc == 0 && !many && lanes[0] >= 0 && lanes[1] >= 0 && lanes[2] >= 0 && lanes[3] >= 0,
          "elect.sync (%s): not one lane per warp: %s", emu_schedule_name(sch[s]), err);
    if (sch[s] == EMU_FORWARD) CHECK(lanes[0] == 0, "elect.sync forward: lane %d", lanes[0]);
    if (sch[s] == EMU_REVERSE) CHECK(lanes[0] == 31, "elect.sync reverse: lane %d", lanes[0]);
  }
  prm.seq_q = 1;
  int rc = launch(K_NB, 128, 256, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "bar.arrive 1, 128") && strstr(err, "wait there for 96"),
        "named barrier count mismatch: %s", err);
  rc = launch(K_WS, 128, 0, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "setmaxnreg.inc 20") && strstr(err, "24..256"),
        "setmaxnreg out of range: %s", err);
  prm.seq_q = 2;
  rc = launch(K_WS, 128, 0, &prm, &b, EMU_FORWARD, &ctr, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "not warpgroup-uniform") && strstr(err, "232"),
        "setmaxnreg not uniform: %s", err);
  /* The register file: FA3's splits fill it exactly (two consumers: 24 +
  ** 2 x 240 of 168 each; three: 32 + 3 x 160 of 128), 8 more do not fit. */
  static const struct { unsigned threads; int producer, consumer, fits; } rf[] = {
    {384, 24, 240, 1}, {384, 24, 248, 0}, {512, 32, 160, 1}, {512, 32, 168, 0}, {256, 56, 256, 1},
  };
  for (size_t i = 0; i < sizeof rf / sizeof rf[0]; i++)
    for (int s = 0; s < 4; s++) {
      prm.seq_q = rf[i].consumer, prm.seq_k = rf[i].producer;
      rc = launch(K_RF, rf[i].threads, 0, &prm, &b, sch[s], &ctr, err, sizeof err);
      CHECK(rf[i].fits ? rc == 0 : rc != 0 && strstr(err, "a GPU would wait forever"),
            "setmaxnreg %d + %d x %d on %u threads (%s): rc %d: %s", rf[i].producer,
            (int)rf[i].threads / 128 - 1, rf[i].consumer, rf[i].threads,
            emu_schedule_name(sch[s]), rc, err);
    }
}

/* ---- Asynchrony ---- */

static void test_async(void) {
  unsigned char g[512];
  unsigned o[256];
  for (size_t i = 0; i < sizeof g; i++) g[i] = (unsigned char)(rng_next() & 0x7F);
  bufs b = {{g, NULL, NULL, o, NULL, NULL}, {sizeof g, 0, 0, sizeof o, 0, 0}};
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  fa_emu_counters ctr;
  char err[512];
  /* cp.async: how many lanes saw their copy before the wait. */
  int early[3];
  static const emu_schedule sch[3] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM};
  for (int s = 0; s < 3; s++) {
    early[s] = 0;
    int rc = launch(K_CA, 32, 512, &prm, &b, sch[s], &ctr, err, sizeof err);
    int bad = 0;
    for (int l = 0; l < 32; l++) {
      early[s] += !memcmp((unsigned char *)o + 32 * l, g + 16 * l, 16);
      bad += memcmp((unsigned char *)o + 32 * l + 16, g + 16 * l, 16) != 0;
    }
    CHECK(rc == 0 && bad == 0, "cp.async (%s): %d lanes wrong after the wait: %s",
          emu_schedule_name(sch[s]), bad, err);
  }
  CHECK(early[0] == 0 && early[1] == 32 && early[2] > 0 && early[2] < 32,
        "cp.async landed before the wait in %d (forward), %d (reverse), %d (random) of 32 lanes",
        early[0], early[1], early[2]);
  /* wgmma reads shared memory when it completes: B zeroed after issue. */
  unsigned short img[1280];
  for (int i = 0; i < 1280; i++) img[i] = half_bits(rand_value(), 0);
  float d[512];
  bufs w = {{img, NULL, NULL, d, NULL, NULL}, {sizeof img, 0, 0, sizeof d, 0, 0}};
  int zeros[3] = {0, 0, 0}, nans = 0;
  for (int s = 0; s < 3; s++) {
    int rc = launch(K_WR, 128, 4096, &prm, &w, sch[s], &ctr, err, sizeof err);
    CHECK(rc == 0, "wgmma reuse (%s): %s", emu_schedule_name(sch[s]), err);
    for (int i = 0; i < 512; i++) zeros[s] += d[i] == 0.0f, nans += isnan(d[i]);
  }
  CHECK(nans == 0 && zeros[0] == 512 && zeros[1] < 64 && zeros[2] > zeros[1] && zeros[2] < 512,
        "wgmma reading B after its reuse: zeros %d (forward, all), %d (reverse, few), "
        "%d (random, some), NaN %d", zeros[0], zeros[1], zeros[2], nans);
}

int main(void) {
  rng_state = SEED;
  printf("seed 0x%llx\n", (unsigned long long)SEED);
  emu_compile_opts co = {.jobs = 0, .batch = 0, .extra_flags = "-Wall -Wextra -Werror"};
  char err[512];
  if (emu_compile(sources, NK, &co, builds, err, sizeof err) != 0) {
    fprintf(stderr, "emu_compile: %s\n", err);
    return 1;
  }
  int ok = 1;
  for (int k = 0; k < NK; k++) {
    CHECK(builds[k].fn != NULL, "%s does not compile:\n%s", sources[k].entry,
          builds[k].log ? builds[k].log : "");
    ok &= builds[k].fn != NULL;
  }
  fa_backend *be = NULL;
  char note[256];
  if (backend_open("emu", &be, note, sizeof note, err, sizeof err) != 0) {
    fprintf(stderr, "backend_open: %s\n", err);
    return 1;
  }
  if (ok) {
    test_wgmma_sweep();
    test_wgmma_bounds();
    test_wgmma_mutants();
    test_e4m3_conversions();
    test_tmap_checks(be);
    test_tma(be);
    test_mbarrier();
    test_named_elect_regs();
    test_async();
  }
  backend_close(be);
  for (int k = 0; k < NK; k++) emu_build_free(&builds[k]);
  return check_done("test_emu_sm90");
}
