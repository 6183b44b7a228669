/*
** test_emu_tc.c
** The tensor-core primitives of the emulator (templates/prelude_emu_tc.h)
** against scalar computations on the host, through small kernel bodies
** compiled and launched like generated ones: f16 and bf16 conversions
** against a nearest-value search, mma m16n8k16 against a double matrix
** product with fragments built from the PTX formulas, ldmatrix against the
** element-to-lane map read the other way, cp.async queueing, zero fill,
** groups and faults, an end-to-end cp.async + ldmatrix + mma product, and
** exact counters. Then every body, and one that uses every primitive, is
** compiled by NVRTC against prelude_cuda_tc.cuh for sm_80, sm_90 and sm_90a.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_preludes.h"
#include "check.h"
#include "emu.h"
#include "nvrtc_compile.h"
#include "template_files.h"

#define SEED 0x7C0FFEE5EEDull

/* ---- Deterministic random numbers: splitmix64. ---- */

static uint64_t rng_state;

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rng_uniform(void) {  /* [0, 1) */
  return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static unsigned rng_below(unsigned n) { return (unsigned)(rng_next() % n); }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* ---- Independent half-precision references. ---- */

/* The value of non-negative f16 bits, 0x7c00 read as the next binade (2^16). */
static double f16_value(unsigned h) {
  unsigned e = h >> 10, m = h & 1023u;
  return e ? ldexp(1024.0 + m, (int)e - 25) : ldexp((double)m, -24);
}

static int f16_is_nan(unsigned h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu); }
static int bf16_is_nan(unsigned h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu); }

/* f16 decode by the textbook formula. */
static double ref_f16_to_double(unsigned h) {
  double v;
  unsigned e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 31) v = m ? NAN : INFINITY;
  else v = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
  return (h & 0x8000u) ? -v : v;
}

/* Nearest f16 by binary search over the ordered positive values, ties to
** the even bit pattern; 65520 and above overflow (the tie with 2^16 goes
** to the even side, infinity). NaN gives 0x7e00, compared as "a NaN". */
static unsigned ref_f32_to_f16(float x) {
  if (isnan(x)) return 0x7E00;
  unsigned sign = signbit(x) ? 0x8000u : 0;
  double a = fabs((double)x);
  if (a >= 65520.0) return sign | 0x7C00u;
  unsigned lo = 0, hi = 0x7C00;  /* f16_value(lo) <= a < f16_value(hi) */
  while (hi - lo > 1) {
    unsigned mid = (lo + hi) / 2;
    if (f16_value(mid) <= a) lo = mid;
    else hi = mid;
  }
  double dl = a - f16_value(lo), dh = f16_value(hi) - a;
  unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1u) ? hi : lo;
  return sign | r;
}

/* The value of non-negative bf16 bits, exponent 255 read as finite (2^128). */
static double bf16_value(unsigned h) {
  unsigned e = h >> 7, m = h & 127u;
  return e ? ldexp(128.0 + m, (int)e - 134) : ldexp((double)m, -133);
}

/* Nearest bf16: the truncation or the next value away from zero. */
static unsigned ref_f32_to_bf16(float x) {
  if (isnan(x)) return 0x7FC0;
  unsigned sign = signbit(x) ? 0x8000u : 0;
  if (isinf(x)) return sign | 0x7F80u;
  double a = fabs((double)x);
  unsigned lo = (f32_bits(x) >> 16) & 0x7FFFu, hi = lo + 1;
  double dl = a - bf16_value(lo), dh = bf16_value(hi) - a;
  unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1u) ? hi : lo;
  return sign | r;
}

/* ---- The kernel bodies: each is C11 for the emulator and CUDA C++ for
** NVRTC, so casts are explicit. ---- */

/* All 65536 bit patterns, f16 and bf16, to f32 and back. */
static const char body_conv_all[] =
  "FA_KERNEL(conv_all, 32) {\n"
  "  const unsigned short *in = (const unsigned short *)p.q;\n"
  "  float *hf = (float *)p.o;\n"
  "  float *bf = (float *)p.ws;\n"
  "  unsigned short *back = (unsigned short *)p.lse;\n"
  "  for (int i = fa_tid(); i < p.seq_q; i += 32) {\n"
  "    const unsigned short h = fa_ldg_u16(in + i);\n"
  "    const float f = fa_f16_to_f32(h), g = fa_bf16_to_f32(h);\n"
  "    fa_st_f32(hf + i, f);\n"
  "    fa_st_f32(bf + i, g);\n"
  "    fa_st_u16(back + i, fa_f32_to_f16(f));\n"
  "    fa_st_u16(back + p.seq_q + i, fa_f32_to_bf16(g));\n"
  "  }\n"
  "}\n";

/* seq_q floats to f16 and bf16, and pairs of them packed. */
static const char body_conv_f32[] =
  "FA_KERNEL(conv_f32, 32) {\n"
  "  const float *x = (const float *)p.q;\n"
  "  unsigned short *h = (unsigned short *)p.o;\n"
  "  unsigned short *b = h + p.seq_q;\n"
  "  unsigned *pk = (unsigned *)p.ws;\n"
  "  const int half = p.seq_q / 2;\n"
  "  for (int i = fa_tid(); i < p.seq_q; i += 32) {\n"
  "    const float v = fa_ldg_f32(x + i);\n"
  "    fa_st_u16(h + i, fa_f32_to_f16(v));\n"
  "    fa_st_u16(b + i, fa_f32_to_bf16(v));\n"
  "  }\n"
  "  for (int i = fa_tid(); i < half; i += 32) {\n"
  "    const float lo = fa_ldg_f32(x + 2 * i), hi = fa_ldg_f32(x + 2 * i + 1);\n"
  "    fa_st_u32(pk + i, fa_pack_f16x2(lo, hi));\n"
  "    fa_st_u32(pk + half + i, fa_pack_bf16x2(lo, hi));\n"
  "  }\n"
  "}\n";

/* One mma per warp from fragments in q (a[4], b[2] per lane) and c in k,
** then the same in place (d = c); p.batch warps per CTA, p.seq_k: 1 bf16,
** 2 fp16 as Turing does it (fa_mma_m16n8k16_f16_by_k8: two m16n8k8). */
static const char body_mma[] =
  "FA_KERNEL(mma, 32) {\n"
  "  const int w = fa_bid_x() * p.batch + fa_tid() / 32, lane = fa_tid() % 32;\n"
  "  const unsigned *frag = (const unsigned *)p.q + (w * 32 + lane) * 6;\n"
  "  const float *cin = (const float *)p.k + (w * 32 + lane) * 4;\n"
  "  float *out = (float *)p.o + (w * 32 + lane) * 8;\n"
  "  unsigned a[4], b[2];\n"
  "  float c[4], d[4];\n"
  "  for (int i = 0; i < 4; i++) a[i] = fa_ldg_u32(frag + i);\n"
  "  for (int i = 0; i < 2; i++) b[i] = fa_ldg_u32(frag + 4 + i);\n"
  "  for (int i = 0; i < 4; i++) c[i] = fa_ldg_f32(cin + i);\n"
  "  if (p.seq_k == 1) fa_mma_m16n8k16_bf16(d, a, b, c);\n"
  "  else if (p.seq_k == 2) fa_mma_m16n8k16_f16_by_k8(d, a, b, c);\n"
  "  else fa_mma_m16n8k16_f16(d, a, b, c);\n"
  "  if (p.seq_k == 1) fa_mma_m16n8k16_bf16(c, a, b, c);\n"
  "  else if (p.seq_k == 2) fa_mma_m16n8k16_f16_by_k8(c, a, b, c);\n"
  "  else fa_mma_m16n8k16_f16(c, a, b, c);\n"
  "  for (int i = 0; i < 4; i++) {\n"
  "    fa_st_f32(out + i, d[i]);\n"
  "    fa_st_f32(out + 4 + i, c[i]);\n"
  "  }\n"
  "}\n";

/* Shared memory filled from q (p.seq_k words); each lane's row offset in
** bytes from k; p.seq_q picks the form: 1, 2, 4, or 11, 12, 14 for .trans.
** With p.heads, each lane zeroes the row it gave right after the load, no
** barrier between: the load must still have seen the data. */
static const char body_ldm[] =
  "FA_KERNEL(ldm, 32) {\n"
  "  const unsigned *img = (const unsigned *)p.q;\n"
  "  const unsigned *offs = (const unsigned *)p.k;\n"
  "  unsigned *out = (unsigned *)p.o;\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  for (int i = fa_tid(); i < p.seq_k; i += p.batch * 32)\n"
  "    fa_sts_u32((unsigned *)s + i, fa_ldg_u32(img + i));\n"
  "  fa_syncthreads();\n"
  "  const int t = fa_tid();\n"
  "  const unsigned off = fa_ldg_u32(offs + t);\n"
  "  const fa_saddr row = fa_saddr_of(s) + off;\n"
  "  unsigned r[4] = {0, 0, 0, 0};\n"
  "  switch (p.seq_q) {\n"
  "    case 1: fa_ldmatrix_x1(r, row); break;\n"
  "    case 2: fa_ldmatrix_x2(r, row); break;\n"
  "    case 4: fa_ldmatrix_x4(r, row); break;\n"
  "    case 11: fa_ldmatrix_x1_trans(r, row); break;\n"
  "    case 12: fa_ldmatrix_x2_trans(r, row); break;\n"
  "    default: fa_ldmatrix_x4_trans(r, row); break;\n"
  "  }\n"
  "  if (p.heads && t % 32 < 8 * (p.seq_q % 10)) {\n"
  "    fa_u32x4 zero = {0, 0, 0, 0};\n"
  "    fa_sts_u32x4((fa_u32x4 *)(s + off), zero);\n"
  "  }\n"
  "  for (int j = 0; j < 4; j++) fa_st_u32(out + t * 4 + j, r[j]);\n"
  "}\n";

/* A (16x16, q), B (16x8, k) and B^T (8x16, v), row-major halves, through
** cp.async into padded shared tiles, ldmatrix and mma: o gets A B twice,
** by B with x2.trans and by B^T with x2. p.seq_k: bf16. */
static const char body_e2e[] =
  "FA_KERNEL(e2e, 32) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const fa_saddr sa = fa_saddr_of(s), sb = sa + 768, st = sa + 1280;\n"
  "  const unsigned char *ga = (const unsigned char *)p.q;\n"
  "  const unsigned char *gb = (const unsigned char *)p.k;\n"
  "  const unsigned char *gt = (const unsigned char *)p.v;\n"
  "  const int lane = fa_tid();\n"
  "  fa_cp_async_16(sa + (lane / 2) * 48 + (lane % 2) * 16, ga + lane * 16, 16);\n"
  "  fa_cp_async_commit();\n"
  "  if (lane < 16) {\n"
  "    fa_cp_async_16(sb + lane * 32, gb + lane * 16, 16);\n"
  "    fa_cp_async_16(st + (lane / 2) * 48 + (lane % 2) * 16, gt + lane * 16, 16);\n"
  "  }\n"
  "  fa_cp_async_commit();\n"
  "  fa_cp_async_wait(0);\n"
  "  fa_syncthreads();\n"
  "  unsigned a[4], b[2], bt[2];\n"
  "  fa_ldmatrix_x4(a, sa + (lane % 16) * 48 + (lane / 16) * 16);\n"
  "  fa_ldmatrix_x2_trans(b, sb + (lane % 16) * 32);\n"
  "  fa_ldmatrix_x2(bt, st + (lane % 8) * 48 + ((lane / 8) % 2) * 16);\n"
  "  float z[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4], d2[4];\n"
  "  if (p.seq_k) {\n"
  "    fa_mma_m16n8k16_bf16(d1, a, b, z);\n"
  "    fa_mma_m16n8k16_bf16(d2, a, bt, z);\n"
  "  } else {\n"
  "    fa_mma_m16n8k16_f16(d1, a, b, z);\n"
  "    fa_mma_m16n8k16_f16(d2, a, bt, z);\n"
  "  }\n"
  "  float *o = (float *)p.o + lane * 8;\n"
  "  for (int i = 0; i < 4; i++) {\n"
  "    fa_st_f32(o + i, d1[i]);\n"
  "    fa_st_f32(o + 4 + i, d2[i]);\n"
  "  }\n"
  "}\n";

/* Per lane: three 16-byte chunks of q go to shared chunks 0-2 of the
** lane's 64 bytes (chunk 3 is never written) with src_bytes 0, 5 or 16 for
** chunk 0 (by lane % 3), as groups 0, 1 and an uncommitted one; the four
** chunks are read back (16 words into o) before any wait, after wait(1),
** after wait(0), and after a commit and wait(0). */
static const char body_cpa[] =
  "FA_KERNEL(cpa, 32) {\n"
  "  const unsigned char *g = (const unsigned char *)p.q;\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const int lane = fa_tid();\n"
  "  unsigned char *mine = s + lane * 64;\n"
  "  unsigned *o = (unsigned *)p.o + lane * 64;\n"
  "  const int nb = lane % 3 == 0 ? 0 : lane % 3 == 1 ? 5 : 16;\n"
  "  const fa_saddr smine = fa_saddr_of(mine);\n"
  "  fa_cp_async_16(smine, g + lane * 48, nb);\n"
  "  fa_cp_async_commit();\n"
  "  fa_cp_async_16(smine + 16, g + lane * 48 + 16, 16);\n"
  "  fa_cp_async_commit();\n"
  "  fa_cp_async_16(smine + 32, g + lane * 48 + 32, 16);\n"
  "  for (int i = 0; i < 16; i++) fa_st_u32(o + i, fa_lds_u32((const unsigned *)mine + i));\n"
  "  fa_cp_async_wait(1);\n"
  "  for (int i = 0; i < 16; i++) fa_st_u32(o + 16 + i, fa_lds_u32((const unsigned *)mine + i));\n"
  "  fa_cp_async_wait(0);\n"
  "  for (int i = 0; i < 16; i++) fa_st_u32(o + 32 + i, fa_lds_u32((const unsigned *)mine + i));\n"
  "  fa_cp_async_commit();\n"
  "  fa_cp_async_wait(0);\n"
  "  for (int i = 0; i < 16; i++) fa_st_u32(o + 48 + i, fa_lds_u32((const unsigned *)mine + i));\n"
  "}\n";

/* 16-, 32-bit and 16-byte accesses: q (p.seq_q chunks of 16 bytes) to
** shared by u32x4, back to o by u16, to lse by u32, to ws by u32x4. */
static const char body_acc[] =
  "FA_KERNEL(acc, 32) {\n"
  "  const fa_u32x4 *g = (const fa_u32x4 *)p.q;\n"
  "  fa_u32x4 *s = (fa_u32x4 *)fa_smem_base();\n"
  "  const int t = fa_tid();\n"
  "  for (int i = t; i < p.seq_q; i += 32) fa_sts_u32x4(s + i, fa_ldg_u32x4(g + i));\n"
  "  fa_syncthreads();\n"
  "  const unsigned short *s16 = (const unsigned short *)s;\n"
  "  const unsigned *s32 = (const unsigned *)s;\n"
  "  unsigned short *o16 = (unsigned short *)p.o;\n"
  "  unsigned *o32 = (unsigned *)p.lse;\n"
  "  fa_u32x4 *o128 = (fa_u32x4 *)p.ws;\n"
  "  for (int i = t; i < p.seq_q * 8; i += 32) fa_st_u16(o16 + i, fa_lds_u16(s16 + i));\n"
  "  for (int i = t; i < p.seq_q * 4; i += 32) fa_st_u32(o32 + i, fa_lds_u32(s32 + i));\n"
  "  for (int i = t; i < p.seq_q; i += 32) fa_st_u32x4(o128 + i, fa_lds_u32x4(s + i));\n"
  "  unsigned short *s16w = (unsigned short *)s;\n"
  "  fa_syncthreads();\n"
  "  if (t == 0) fa_sts_u16(s16w + 1, (unsigned short)0xBEEF);\n"
  "  if (t == 0) fa_sts_u32((unsigned *)s + 1, fa_ldg_u32((const unsigned *)p.q) ^ 1u);\n"
  "  fa_syncthreads();\n"
  "  if (t == 0) fa_st_u32x4(o128, fa_lds_u32x4(s));\n"
  "}\n";

/* Faults, each on the line marked @: p.seq_q picks which. The source
** pointer of 0..3 is q + p.seq_k (bytes). */
static const char body_bad[] =
  "FA_KERNEL(bad, 32) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const unsigned char *g = (const unsigned char *)p.q + p.seq_k;\n"
  "  const fa_saddr ss = fa_saddr_of(s);\n"
  "  const int t = fa_tid();\n"
  "  unsigned r[4] = {0, 0, 0, 0};\n"
  "  if (p.seq_q == 0) fa_cp_async_16(ss + 16 * t, g, 16); /* @0 */\n"
  "  if (p.seq_q == 1) fa_cp_async_16(ss + 16 * t, g, 8); /* @1 */\n"
  "  if (p.seq_q == 2) fa_cp_async_16(ss + 16 * t + (t == 7 ? 8 : 0), g, 16); /* @2 */\n"
  "  if (p.seq_q == 3) fa_cp_async_16(ss, g + (t == 9 ? 4 : 0), 16); /* @3 */\n"
  "  if (p.seq_q == 4)\n"
  "    for (int i = 0; i < 600; i++) fa_cp_async_16(ss, g, 16); /* @4 */\n"
  "  if (p.seq_q == 5) {\n"
  "    fa_ldmatrix_x4(r, ss + 16 * t + (t == 5 ? 4 : 0)); /* @5 */\n"
  "    fa_st_u32((unsigned *)p.o + t, r[0]);\n"
  "  }\n"
  "  if (p.seq_q == 6) {\n"
  "    fa_ldmatrix_x1(r, ss + 16 * t + (t >= 8 ? 4 : 0)); /* @6 */\n"
  "    fa_st_u32((unsigned *)p.o + t, r[0]);\n"
  "  }\n"
  "  const fa_u32x4 *q4 = (const fa_u32x4 *)p.q;\n"
  "  if (p.seq_q == 7) fa_sts_u32x4((fa_u32x4 *)(s + 8), fa_ldg_u32x4(q4)); /* @7 */\n"
  "  if (p.seq_q == 8) fa_cp_async_16(ss + 4096, (const unsigned char *)p.q, 16); /* @8 */\n"
  "  fa_cp_async_wait(0);\n"
  "}\n";

/* For NVRTC only: every primitive at least once, wait_group 0..7. */
static const char body_all[] =
  "FA_KERNEL(all_tc, 128) {\n"
  "  unsigned char *s = (unsigned char *)fa_smem_base();\n"
  "  const int t = fa_tid(), lane = t % 32;\n"
  "  fa_cp_async_16(fa_saddr_of(s) + 16 * t, (const unsigned char *)p.q + 16 * t, p.seq_q & 15);\n"
  "  fa_cp_async_commit();\n"
  "  fa_cp_async_wait(7); fa_cp_async_wait(6); fa_cp_async_wait(5); fa_cp_async_wait(4);\n"
  "  fa_cp_async_wait(3); fa_cp_async_wait(2); fa_cp_async_wait(1); fa_cp_async_wait(0);\n"
  "  fa_syncthreads();\n"
  "  unsigned a[4], b[2], x1[1], x2[2], x4[4];\n"
  "  const fa_saddr row = fa_saddr_of(s) + 16 * lane;\n"
  "  fa_ldmatrix_x4(a, row);\n"
  "  fa_ldmatrix_x2_trans(b, row);\n"
  "  fa_ldmatrix_x1(x1, row);\n"
  "  fa_ldmatrix_x2(x2, row);\n"
  "  fa_ldmatrix_x1_trans(x1, row);\n"
  "  fa_ldmatrix_x4_trans(x4, row);\n"
  "  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};\n"
  "  fa_mma_m16n8k16_f16(c, a, b, c);\n"
  "  fa_mma_m16n8k16_bf16(c, x4, x2, c);\n"
  "  const unsigned h = fa_pack_f16x2(c[0], c[1]) ^ fa_pack_bf16x2(c[2], c[3]) ^ x1[0];\n"
  "  const float f = fa_f16_to_f32(fa_f32_to_f16(c[0])) + fa_bf16_to_f32(fa_f32_to_bf16(c[1]));\n"
  "  fa_u32x4 v = fa_ldg_u32x4((const fa_u32x4 *)p.k + t);\n"
  "  v.x ^= h;\n"
  "  fa_sts_u32x4((fa_u32x4 *)s + t, v);\n"
  "  fa_sts_u32((unsigned *)s + 4 * t + 1, fa_ldg_u32((const unsigned *)p.v + t));\n"
  "  fa_sts_u16((unsigned short *)s + 8 * t + 5, fa_ldg_u16((const unsigned short *)p.v + t));\n"
  "  fa_syncthreads();\n"
  "  fa_st_u32x4((fa_u32x4 *)p.o + t, fa_lds_u32x4((const fa_u32x4 *)s + t));\n"
  "  fa_st_u32((unsigned *)p.ws + t, fa_lds_u32((const unsigned *)s + t));\n"
  "  fa_st_u16((unsigned short *)p.lse + t, fa_lds_u16((const unsigned short *)s + t));\n"
  "  fa_st_f32((float *)p.ws + 128 + t, f);\n"
  "}\n";

enum { K_CONV_ALL, K_CONV_F32, K_MMA, K_LDM, K_E2E, K_CPA, K_ACC, K_BAD, NK };

static const emu_source sources[NK] = {
  {"conv_all", body_conv_all, &emu_preludes}, {"conv_f32", body_conv_f32, &emu_preludes}, {"mma", body_mma, &emu_preludes},
  {"ldm", body_ldm, &emu_preludes}, {"e2e", body_e2e, &emu_preludes}, {"cpa", body_cpa, &emu_preludes}, {"acc", body_acc, &emu_preludes},
  {"bad", body_bad, &emu_preludes},
};

static emu_build builds[NK];

/* ---- Launching. ---- */

typedef struct bufs {
  void *p[6];    /* q, k, v, o, lse, ws */
  size_t n[6];   /* bytes */
} bufs;

static int launch(int k, unsigned grid, unsigned threads, size_t smem, fa_params prm,
                  const bufs *b, emu_schedule sched, fa_emu_counters *ctr, char *err,
                  size_t errlen) {
  fa_emu_range r[6];
  int nr = 0;
  prm.q = b->p[0], prm.k = b->p[1], prm.v = b->p[2];
  prm.o = b->p[3], prm.lse = b->p[4], prm.ws = b->p[5];
  for (int i = 0; i < 6; i++)
    if (b->p[i]) {
      r[nr].lo = (unsigned long long)(uintptr_t)b->p[i];
      r[nr].hi = r[nr].lo + b->n[i];
      nr++;
    }
  emu_launch_args a = {.fn = builds[k].fn, .entry = sources[k].entry,
                       .grid = {grid, 1, 1}, .threads = threads, .smem_bytes = smem,
                       .params = &prm, .ranges = r, .nranges = nr};
  /* All ones, NaN in f32: what a read before the data lands sees. */
  emu_launch_opts o = {.schedule = sched, .seed = 12345, .threads = 1, .smem_fill = 0xFF};
  memset(ctr, 0, sizeof *ctr);
  err[0] = '\0';
  return emu_launch(&a, &o, ctr, err, errlen);
}

/* ---- 1. Conversions. ---- */

static void test_conv_all(void) {
  const int n = 65536;
  unsigned short *in = xmalloc((size_t)n * 2), *back = xmalloc((size_t)n * 4);
  float *hf = xmalloc((size_t)n * 4), *bf = xmalloc((size_t)n * 4);
  for (int i = 0; i < n; i++) in[i] = (unsigned short)i;
  bufs b = {{in, NULL, NULL, hf, back, bf}, {(size_t)n * 2, 0, 0, (size_t)n * 4, (size_t)n * 4,
                                              (size_t)n * 4}};
  fa_params prm = {0};
  prm.seq_q = n;
  fa_emu_counters c;
  char err[512];
  int rc = launch(K_CONV_ALL, 1, 32, 0, prm, &b, EMU_FORWARD, &c, err, sizeof err);
  CHECK(rc == 0, "conv_all: %s", err);
  if (rc) goto out;
  int bad_f = 0, bad_back = 0, bad_bf = 0, bad_bback = 0;
  for (int i = 0; i < n; i++) {
    double want = ref_f16_to_double((unsigned)i);
    if (isnan(want) ? !isnan(hf[i]) : (double)hf[i] != want || !signbit(hf[i]) != !signbit(want)) {
      if (bad_f++ < 5) fprintf(stderr, "f16 %04x -> %a, want %a\n", i, hf[i], want);
    }
    if (f16_is_nan((unsigned)i) ? !f16_is_nan(back[i]) : back[i] != i) {
      if (bad_back++ < 5) fprintf(stderr, "f16 %04x round trip -> %04x\n", i, back[i]);
    }
    /* bf16: the top half of a float. */
    uint32_t u = f32_bits(bf[i]);
    if (bf16_is_nan((unsigned)i) ? !isnan(bf[i]) : u != (uint32_t)i << 16) {
      if (bad_bf++ < 5) fprintf(stderr, "bf16 %04x -> %08x\n", i, (unsigned)u);
    }
    if (bf16_is_nan((unsigned)i) ? !bf16_is_nan(back[n + i]) : back[n + i] != i) {
      if (bad_bback++ < 5) fprintf(stderr, "bf16 %04x round trip -> %04x\n", i, back[n + i]);
    }
  }
  CHECK(bad_f == 0, "%d f16 patterns decoded wrong", bad_f);
  CHECK(bad_back == 0, "%d f16 patterns did not survive f16 -> f32 -> f16", bad_back);
  CHECK(bad_bf == 0, "%d bf16 patterns decoded wrong", bad_bf);
  CHECK(bad_bback == 0, "%d bf16 patterns did not survive bf16 -> f32 -> bf16", bad_bback);
  CHECK(c.gmem_read == (unsigned long long)n * 2 && c.gmem_written == (unsigned long long)n * 12,
        "conv_all counters: read %llu written %llu", c.gmem_read, c.gmem_written);
out:
  free(in), free(back), free(hf), free(bf);
}

/* A float near the f16 or bf16 grid: a midpoint between neighbours, or
** one float step either side of it. */
static float near_tie(int bf16) {
  double lo, hi;
  if (bf16) {
    unsigned h = rng_below(0x7F7F);
    lo = bf16_value(h), hi = bf16_value(h + 1);
  } else {
    unsigned h = rng_below(0x7BFF);
    lo = f16_value(h), hi = f16_value(h + 1);
  }
  float m = (float)((lo + hi) / 2);  /* exact: one bit more than the grid */
  int step = (int)rng_below(3) - 1;
  if (step) m = nextafterf(m, step > 0 ? INFINITY : 0.0f);
  return rng_next() & 1 ? -m : m;
}

static void test_conv_f32(void) {
  static const float edge[] = {
    0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, -65504.0f, 65519.996f, 65520.0f,
    -65520.0f, 65536.0f, 1e10f, 3.4028235e38f, -3.4028235e38f, 0x1p-24f, 0x1p-25f,
    0x1.000002p-25f, 0x1.fffffep-26f, 0x1p-26f, 0x1.8p-24f, 0x1.4p-23f, 0x1.8p-23f, 0x1p-14f,
    0x1.ff8p-15f, 0x1.ffcp-15f, 0x1.ff7ffep-15f, 0x1p-126f, 0x1p-149f, 0x1.fffffcp-127f,
    1.0f, 1.00048828125f, 1.00146484375f, 1.001953125f, 0x1.01p0f, 0x1.03p0f,
    0x1.fep127f, 0x1.ffp127f, 0x1.fefffep127f, 0x1.fffffep127f, 3.0f, -2.5f,
  };
  const int nedge = (int)(sizeof edge / sizeof edge[0]);
  const int n = 3 * 1000 * 1000;  /* even */
  float *x = xmalloc((size_t)n * 4);
  for (int i = 0; i < nedge; i++) x[i] = edge[i];
  for (int i = nedge; i < n; i++) {
    unsigned kind = rng_below(8);
    if (kind < 2) {
      x[i] = bits_f32((uint32_t)rng_next());  /* anything, NaNs included */
    } else if (kind < 5) {  /* around the f16 range, subnormals to overflow */
      uint32_t e = 100 + rng_below(46), m = (uint32_t)rng_next() & 0x7FFFFFu;
      x[i] = bits_f32((uint32_t)(rng_next() & 1) << 31 | e << 23 | m);
    } else {
      x[i] = near_tie(kind == 7);
    }
  }
  unsigned short *h = xmalloc((size_t)n * 4);
  unsigned *pk = xmalloc((size_t)n * 4);
  bufs b = {{x, NULL, NULL, h, NULL, pk}, {(size_t)n * 4, 0, 0, (size_t)n * 4, 0, (size_t)n * 4}};
  fa_params prm = {0};
  prm.seq_q = n;
  fa_emu_counters c;
  char err[512];
  int rc = launch(K_CONV_F32, 1, 32, 0, prm, &b, EMU_FORWARD, &c, err, sizeof err);
  CHECK(rc == 0, "conv_f32: %s", err);
  if (rc) goto out;
  int bad16 = 0, badb = 0, badp = 0;
  for (int i = 0; i < n; i++) {
    unsigned w16 = ref_f32_to_f16(x[i]), wb = ref_f32_to_bf16(x[i]);
    unsigned g16 = h[i], gb = h[n + i];
    if (f16_is_nan(w16) ? !f16_is_nan(g16) : g16 != w16)
      if (bad16++ < 5) fprintf(stderr, "f16(%a = %08x) = %04x, want %04x\n", x[i],
                               (unsigned)f32_bits(x[i]), g16, w16);
    if (bf16_is_nan(wb) ? !bf16_is_nan(gb) : gb != wb)
      if (badb++ < 5) fprintf(stderr, "bf16(%a = %08x) = %04x, want %04x\n", x[i],
                              (unsigned)f32_bits(x[i]), gb, wb);
  }
  for (int i = 0; i < n / 2; i++) {
    unsigned f = pk[i], g = pk[n / 2 + i];
    /* Low half from the first float, high from the second: compared to the
    ** single conversions already checked. */
    if (f != ((unsigned)h[2 * i] | (unsigned)h[2 * i + 1] << 16) ||
        g != ((unsigned)h[n + 2 * i] | (unsigned)h[n + 2 * i + 1] << 16))
      if (badp++ < 5) fprintf(stderr, "pack(%a, %a) = %08x %08x\n", x[2 * i], x[2 * i + 1], f, g);
  }
  CHECK(bad16 == 0, "%d of %d floats rounded to f16 wrong", bad16, n);
  CHECK(badb == 0, "%d of %d floats rounded to bf16 wrong", badb, n);
  CHECK(badp == 0, "%d of %d pairs packed wrong", badp, n / 2);
  /* Spot checks the reference itself must agree with. */
  CHECK(ref_f32_to_f16(65520.0f) == 0x7C00 && ref_f32_to_f16(65519.996f) == 0x7BFF &&
        ref_f32_to_f16(0x1p-25f) == 0 && ref_f32_to_f16(0x1.000002p-25f) == 1 &&
        ref_f32_to_f16(0x1.8p-24f) == 2 && ref_f32_to_f16(0x1.ffcp-15f) == 0x0400 &&
        ref_f32_to_f16(1.00146484375f) == 0x3C02 && ref_f32_to_bf16(0x1.03p0f) == 0x3F82 &&
        ref_f32_to_bf16(0x1.ffp127f) == 0x7F80 && ref_f32_to_bf16(0x1.01p0f) == 0x3F80,
        "the host reference itself is off");
  CHECK(h[0] == 0 && h[1] == 0x8000 && h[2] == 0x7C00 && h[3] == 0xFC00 && f16_is_nan(h[4]) &&
        h[6] == 0x7BFF && h[9] == 0x7C00 && h[n + 2] == 0x7F80 && bf16_is_nan(h[n + 4]) &&
        bf16_is_nan(h[n + 5]) && h[n + 13] == 0x7F80,
        "edge cases: %04x %04x %04x %04x %04x %04x %04x / %04x %04x %04x", h[0], h[1], h[2], h[3],
        h[4], h[6], h[9], h[n + 2], h[n + 4], h[n + 13]);
out:
  free(x), free(h), free(pk);
}

/* ---- 2. mma. ---- */

/* A random value of the input type, as bits; f16 within +-8, bf16 over a
** wide range of magnitudes (beyond f16's). */
static unsigned short rand_half(int bf16) {
  double v = (rng_uniform() * 2 - 1) * 8;
  if (bf16) v = ldexp(rng_uniform() + 0.5, (int)rng_below(61) - 30) * (rng_next() & 1 ? -1 : 1);
  return (unsigned short)(bf16 ? ref_f32_to_bf16((float)v) : ref_f32_to_f16((float)v));
}

static double half_value(unsigned short h, int bf16) {
  return bf16 ? (double)bits_f32((uint32_t)h << 16) : ref_f16_to_double(h);
}

/* Fragments per the PTX ISA, "Matrix Fragments for mma.m16n8k16 with
** floating point type": element i of a lane, register i / 2, half i % 2. */
static void build_frags(const unsigned short A[16][16], const unsigned short B[16][8],
                        const float C[16][8], unsigned *frag, float *cf) {
  for (int lane = 0; lane < 32; lane++) {
    int gid = lane >> 2, tig = lane % 4;
    unsigned *f = frag + lane * 6;
    memset(f, 0, 6 * sizeof *f);
    for (int i = 0; i < 8; i++) {
      int row = (i < 2 || (i >= 4 && i < 6)) ? gid : gid + 8;
      int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      f[i / 2] |= (unsigned)A[row][col] << (16 * (i % 2));
    }
    for (int i = 0; i < 4; i++) {
      int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = gid;
      f[4 + i / 2] |= (unsigned)B[row][col] << (16 * (i % 2));
    }
    for (int i = 0; i < 4; i++) cf[lane * 4 + i] = C[i < 2 ? gid : gid + 8][tig * 2 + (i & 1)];
  }
}

/* Element (row, col) of the 16x8 C/D that lane's element i is. */
static void d_pos(int lane, int i, int *row, int *col) {
  *row = i < 2 ? lane / 4 : lane / 4 + 8;
  *col = (lane % 4) * 2 + (i & 1);
}

/* mode 0: fp16, 1: bf16, 2: fp16 as two m16n8k8 (Turing), which rounds
** once more, after k 0-7. */
static void test_mma(int mode, emu_schedule sched) {
  enum { CTAS = 2, WARPS = 2, NW = CTAS * WARPS };
  const int bf16 = mode == 1, per_call = mode == 2 ? 2 : 1;
  static unsigned short A[NW][16][16], B[NW][16][8];
  static float C[NW][16][8];
  unsigned *frag = xmalloc(NW * 32 * 6 * sizeof *frag);
  float *cf = xmalloc(NW * 32 * 4 * sizeof *cf), *out = xmalloc(NW * 32 * 8 * sizeof *out);
  for (int w = 0; w < NW; w++) {
    for (int r = 0; r < 16; r++)
      for (int k = 0; k < 16; k++) A[w][r][k] = rand_half(bf16);
    for (int k = 0; k < 16; k++)
      for (int n = 0; n < 8; n++) B[w][k][n] = rand_half(bf16);
    for (int r = 0; r < 16; r++)
      for (int n = 0; n < 8; n++) {  /* 0.1 to 4 times the products' size, either sign */
        double mag = 0;
        for (int k = 0; k < 16; k++)
          mag += fabs(half_value(A[w][r][k], bf16) * half_value(B[w][k][n], bf16));
        double v = (0.1 + 3.9 * rng_uniform()) * (mag > 0 ? mag : 1);
        C[w][r][n] = (float)(rng_next() & 1 ? -v : v);
      }
    build_frags((const unsigned short(*)[16])A[w], (const unsigned short(*)[8])B[w],
                (const float(*)[8])C[w], frag + w * 32 * 6, cf + w * 32 * 4);
  }
  bufs b = {{frag, cf, NULL, out, NULL, NULL},
            {NW * 32 * 6 * sizeof *frag, NW * 32 * 4 * sizeof *cf, 0, NW * 32 * 8 * sizeof *out,
             0, 0}};
  fa_params prm = {0};
  prm.batch = WARPS;
  prm.seq_k = mode;
  fa_emu_counters c;
  char err[512];
  const char *what = mode == 1 ? "mma bf16" : mode == 2 ? "mma f16 by two m16n8k8" : "mma f16";
  int rc = launch(K_MMA, CTAS, WARPS * 32, 0, prm, &b, sched, &c, err, sizeof err);
  CHECK(rc == 0, "%s (%s): %s", what, emu_schedule_name(sched), err);
  if (rc) goto out;
  int bad = 0, noc = 0, withc = 0, inplace = 0;
  double worst = 0;
  for (int w = 0; w < NW; w++)
    for (int lane = 0; lane < 32; lane++)
      for (int i = 0; i < 4; i++) {
        int r, n;
        d_pos(lane, i, &r, &n);
        double s = 0, mag = 0;
        for (int k = 0; k < 16; k++) {
          double pr = half_value(A[w][r][k], bf16) * half_value(B[w][k][n], bf16);
          s += pr, mag += fabs(pr);
        }
        double want = s + C[w][r][n];
        float got = out[(w * 32 + lane) * 8 + i], again = out[(w * 32 + lane) * 8 + 4 + i];
        double e = fabs((double)got - want) / (mag + fabs(C[w][r][n]));
        if (e > worst) worst = e;
        if (!(e <= (mode == 2 ? 2e-6 : 1e-6)) && bad++ < 5)
          fprintf(stderr, "%s warp %d D[%d][%d] = %.9g, want %.9g\n", what, w, r, n, got, want);
        /* C must have been added: where it is not lost in rounding, d is
        ** far from the bare product. */
        if (fabs(C[w][r][n]) > 1e-3 * mag) {
          withc++;
          if (!(fabs((double)got - s) > 0.5 * fabs(C[w][r][n]))) noc++;
        }
        if (f32_bits(again) != f32_bits(got)) inplace++;
      }
  CHECK(bad == 0, "%s (%s): %d elements off, worst relative error %.3g", what,
        emu_schedule_name(sched), bad, worst);
  CHECK(noc == 0 && withc == NW * 32 * 4, "%s: %d of %d elements look like A B without C", what,
        noc, withc);
  CHECK(inplace == 0, "%s: %d elements differ between d = A B + c and c = A B + c", what, inplace);
  CHECK(c.mma == (unsigned long long)(2 * per_call * NW), "%s: mma counter %llu, want %d (%d per warp and call)",
        what, c.mma, 2 * per_call * NW, per_call);
  CHECK(c.ldmatrix == 0 && c.shuffles == 0 && c.smem_read == 0, "%s: stray counts", what);
out:
  free(frag), free(cf), free(out);
}

/* ---- 3. ldmatrix. ---- */

static unsigned short smem_value(int i) { return (unsigned short)(i * 40503 + 12345); }

static void test_ldmatrix(int num, int trans, int overwrite) {
  enum { WARPS = 2, SMEM = 4096, ROWS = SMEM / 16 };
  unsigned short *img = xmalloc(SMEM);
  unsigned *offs = xmalloc(WARPS * 32 * sizeof *offs), *out = xmalloc(WARPS * 32 * 4 * 4);
  for (int i = 0; i < SMEM / 2; i++) img[i] = smem_value(i);
  /* Each providing lane a distinct random row; the others garbage that
  ** must be ignored (misaligned, out of shared memory). */
  int perm[ROWS];
  for (int i = 0; i < ROWS; i++) perm[i] = i;
  for (int i = ROWS - 1; i > 0; i--) {
    int j = (int)rng_below((unsigned)i + 1), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  for (int t = 0; t < WARPS * 32; t++)
    offs[t] = t % 32 < 8 * num ? (unsigned)perm[t] * 16 : SMEM * 2 + 3 + (unsigned)t;
  bufs b = {{img, offs, NULL, out, NULL, NULL},
            {SMEM, WARPS * 32 * sizeof *offs, 0, WARPS * 32 * 4 * 4, 0, 0}};
  fa_params prm = {0};
  prm.batch = WARPS;
  prm.seq_k = SMEM / 4;
  prm.seq_q = num + (trans ? 10 : 0);
  prm.heads = overwrite;
  fa_emu_counters c;
  char err[512], what[48];
  snprintf(what, sizeof what, "ldmatrix x%d%s%s", num, trans ? ".trans" : "",
           overwrite ? " (rows then zeroed)" : "");
  int rc = launch(K_LDM, 1, WARPS * 32, SMEM, prm, &b, EMU_RANDOM, &c, err, sizeof err);
  CHECK(rc == 0, "%s: %s", what, err);
  if (rc) goto out;
  /* Expected registers, the map read from the elements' side: element
  ** (r, col) of matrix j belongs to lane 4 r + col / 2 (.trans: 4 col + r / 2),
  ** register j, half col % 2 (.trans: r % 2). */
  static unsigned want[WARPS * 32][4];
  memset(want, 0, sizeof want);
  for (int w = 0; w < WARPS; w++)
    for (int j = 0; j < num; j++)
      for (int r = 0; r < 8; r++)
        for (int col = 0; col < 8; col++) {
          unsigned v = img[offs[w * 32 + 8 * j + r] / 2 + (unsigned)col];
          int lane = trans ? 4 * col + r / 2 : 4 * r + col / 2;
          int half = trans ? r % 2 : col % 2;
          want[w * 32 + lane][j] |= v << (16 * half);
        }
  int bad = 0;
  for (int t = 0; t < WARPS * 32; t++)
    for (int j = 0; j < 4; j++)
      if (out[t * 4 + j] != want[t][j] && bad++ < 5)
        fprintf(stderr, "%s: thread %d r[%d] = %08x, want %08x\n", what, t, j, out[t * 4 + j],
                want[t][j]);
  CHECK(bad == 0, "%s: %d registers wrong", what, bad);
  CHECK(c.smem_read == (unsigned long long)WARPS * 128 * num,
        "%s: smem_read %llu, want %d (128 per matrix and warp)", what, c.smem_read,
        WARPS * 128 * num);
  CHECK(c.ldmatrix == WARPS, "%s: ldmatrix counter %llu, want %d", what, c.ldmatrix, WARPS);
  CHECK(c.smem_written == SMEM + (overwrite ? WARPS * 128ull * num : 0),
        "%s: smem_written %llu", what, c.smem_written);
out:
  free(img), free(offs), free(out);
}

/* ---- 4. cp.async + ldmatrix + mma. ---- */

static void test_e2e(int bf16) {
  static _Alignas(16) unsigned short A[16][16], B[16][8], Bt[8][16];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) A[r][k] = rand_half(bf16);
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 8; n++) Bt[n][k] = B[k][n] = rand_half(bf16);
  float out[32 * 8];
  bufs b = {{A, B, Bt, out, NULL, NULL}, {sizeof A, sizeof B, sizeof Bt, sizeof out, 0, 0}};
  fa_params prm = {0};
  prm.seq_k = bf16;
  fa_emu_counters c;
  char err[512];
  const char *what = bf16 ? "e2e bf16" : "e2e f16";
  int rc = launch(K_E2E, 1, 32, 1664, prm, &b, EMU_REVERSE, &c, err, sizeof err);
  CHECK(rc == 0, "%s: %s", what, err);
  if (rc) return;
  int bad = 0;
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      int r, n;
      d_pos(lane, i, &r, &n);
      double s = 0, mag = 0;
      for (int k = 0; k < 16; k++) {
        double pr = half_value(A[r][k], bf16) * half_value(B[k][n], bf16);
        s += pr, mag += fabs(pr);
      }
      for (int v = 0; v < 2; v++) {
        double got = out[lane * 8 + 4 * v + i];
        if (!(fabs(got - s) <= 1e-6 * mag) && bad++ < 5)
          fprintf(stderr, "%s (%s): D[%d][%d] = %.9g, want %.9g\n", what,
                  v ? "B^T x2" : "B x2.trans", r, n, got, s);
      }
    }
  CHECK(bad == 0, "%s: %d elements off", what, bad);
  CHECK(c.cp_async == 64 && c.gmem_read == 1024 && c.ldmatrix == 3 && c.mma == 2 &&
        c.smem_read == 1024 && c.smem_written == 1024 && c.gmem_written == 32 * 8 * 4,
        "%s counters: cp_async %llu gmem_read %llu ldmatrix %llu mma %llu smem_read %llu "
        "smem_written %llu gmem_written %llu", what, c.cp_async, c.gmem_read, c.ldmatrix, c.mma,
        c.smem_read, c.smem_written, c.gmem_written);
}

/* ---- 5. cp.async semantics and faults. ---- */

static void test_cp_async(void) {
  _Alignas(16) unsigned char g[32 * 48];
  unsigned o[32 * 64];
  for (size_t i = 0; i < sizeof g; i++) g[i] = (unsigned char)(rng_next() | 1);  /* never 0 */
  bufs b = {{g, NULL, NULL, o, NULL, NULL}, {sizeof g, 0, 0, sizeof o, 0, 0}};
  fa_params prm = {0};
  fa_emu_counters c;
  char err[512];
  /* Forward lands each copy as late as allowed, at its wait (the other
  ** schedules land earlier: test_emu_sm90). */
  int rc = launch(K_CPA, 1, 32, 32 * 64, prm, &b, EMU_FORWARD, &c, err, sizeof err);
  CHECK(rc == 0, "cpa: %s", err);
  if (rc) return;
  /* Snapshot k: which of chunks 0-2 have landed. */
  static const int landed[4][3] = {{0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {1, 1, 1}};
  int bad = 0;
  unsigned long long src = 0;
  for (int lane = 0; lane < 32; lane++) {
    int nb = lane % 3 == 0 ? 0 : lane % 3 == 1 ? 5 : 16;
    src += (unsigned long long)nb + 32;
    for (int k = 0; k < 4; k++) {
      unsigned char want[64], got[64];
      memset(want, 0xFF, sizeof want);
      for (int j = 0; j < 3; j++) {
        if (!landed[k][j]) continue;
        int n = j == 0 ? nb : 16;
        memset(want + 16 * j, 0, 16);
        memcpy(want + 16 * j, g + lane * 48 + 16 * j, (size_t)n);
      }
      memcpy(got, o + lane * 64 + 16 * k, sizeof got);
      if (memcmp(got, want, sizeof want) && bad++ < 5) {
        fprintf(stderr, "cpa lane %d snapshot %d:", lane, k);
        for (int i = 0; i < 64; i++) fprintf(stderr, " %02x/%02x", got[i], want[i]);
        fputc('\n', stderr);
      }
    }
  }
  CHECK(bad == 0, "cp.async: %d lane snapshots wrong (stale before wait, landed after, "
        "zero fill, groups)", bad);
  CHECK(c.cp_async == 96 && c.gmem_read == src && c.smem_written == 96 * 16 &&
        c.smem_read == 32 * 4 * 64, "cpa counters: cp_async %llu gmem_read %llu (want %llu) "
        "smem_written %llu smem_read %llu", c.cp_async, c.gmem_read, src, c.smem_written,
        c.smem_read);
}

/* The line of marker "@k" in body_bad. */
static int marker_line(int k) {
  char m[8];
  snprintf(m, sizeof m, "@%d ", k);
  const char *at = strstr(body_bad, m);
  int line = 1;
  for (const char *s = body_bad; at && s < at; s++) line += *s == '\n';
  return at ? line : -1;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && !strcmp(s + n - m, tail);
}

static void test_faults(void) {
  static const struct {
    int seq_k;   /* source offset in bytes into q */
    const char *what;  /* NULL: must succeed */
  } cases[] = {
    {256, "global access outside every buffer"},       /* 0: 16 bytes, 8 past the end */
    {256, NULL},                                       /* 1: the 8 bytes left, src_bytes 8 */
    {0, "misaligned access"},                          /* 2: destination 8 off */
    {0, "misaligned access"},                          /* 3: source 4 off */
    {0, "too many cp.async copies in flight"},         /* 4 */
    {0, "misaligned access"},                          /* 5: ldmatrix row */
    {0, NULL},                                         /* 6: x1, lanes 8-31 ignored */
    {0, "misaligned access"},                          /* 7: u32x4 */
    {0, "shared access outside the CTA's shared memory"}, /* 8 */
  };
  _Alignas(16) unsigned char q[264];
  unsigned o[32];
  memset(q, 1, sizeof q);
  bufs b = {{q, NULL, NULL, o, NULL, NULL}, {sizeof q, 0, 0, sizeof o, 0, 0}};
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    fa_params prm = {0};
    prm.seq_q = i;
    prm.seq_k = cases[i].seq_k;
    fa_emu_counters c;
    char err[512], tail[32];
    int rc = launch(K_BAD, 1, 32, 4096, prm, &b, EMU_FORWARD, &c, err, sizeof err);
    if (!cases[i].what) {
      CHECK(rc == 0, "bad case %d must run: %s", i, err);
      continue;
    }
    snprintf(tail, sizeof tail, "line %d", marker_line(i));
    CHECK(rc == -1 && strstr(err, cases[i].what) && ends_with(err, tail),
          "bad case %d: rc %d, message \"%s\", want \"%s\" at %s", i, rc, err, cases[i].what, tail);
  }
}

typedef struct u32x4 { _Alignas(16) unsigned x; unsigned y, z, w; } u32x4;  /* fa_u32x4 */

static void test_access(void) {
  enum { CHUNKS = 40 };
  static u32x4 q[CHUNKS], w[CHUNKS];
  static unsigned short o16[CHUNKS * 8];
  static unsigned o32[CHUNKS * 4];
  for (int i = 0; i < CHUNKS; i++)
    q[i].x = (unsigned)rng_next(), q[i].y = (unsigned)rng_next(), q[i].z = (unsigned)rng_next(),
    q[i].w = (unsigned)rng_next();
  bufs b = {{q, NULL, NULL, o16, o32, w}, {sizeof q, 0, 0, sizeof o16, sizeof o32, sizeof w}};
  fa_params prm = {0};
  prm.seq_q = CHUNKS;
  fa_emu_counters c;
  char err[512];
  int rc = launch(K_ACC, 1, 32, CHUNKS * 16, prm, &b, EMU_FORWARD, &c, err, sizeof err);
  CHECK(rc == 0, "acc: %s", err);
  if (rc) return;
  u32x4 first = q[0];
  unsigned short *f16 = (unsigned short *)&first;
  f16[1] = 0xBEEF;
  first.y = q[0].x ^ 1u;
  CHECK(!memcmp(o16, q, sizeof q) && !memcmp(o32, q, sizeof q) &&
        !memcmp(&w[1], &q[1], sizeof q - sizeof q[0]) && !memcmp(&w[0], &first, sizeof first),
        "u16/u32/u32x4 copies differ");
  const unsigned long long n = sizeof q;
  CHECK(c.gmem_read == n + 4 && c.gmem_written == 3 * n + 16 && c.smem_written == n + 6 &&
        c.smem_read == 3 * n + 16, "acc counters: gmem_read %llu gmem_written %llu "
        "smem_written %llu smem_read %llu", c.gmem_read, c.gmem_written, c.smem_written,
        c.smem_read);
}

/* ---- 6. The CUDA prelude through NVRTC. ---- */

static const template_file *embedded(const char *name) {
  for (const template_file *f = template_files; f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

static void test_nvrtc(void) {
  static const char *const parts[] = {"fa_params.h", "prelude_cuda.cuh", "prelude_cuda_tc.cuh",
                                      "prelude_tile.h", "prelude_cuda_sm90.cuh"};
  enum { NPARTS = sizeof parts / sizeof parts[0] };
  size_t total = strlen(body_all) + 1;
  const template_file *f[NPARTS];
  for (int i = 0; i < NPARTS; i++) {
    f[i] = embedded(parts[i]);
    CHECK(f[i] != NULL, "%s is not embedded", parts[i]);
    if (!f[i]) return;
    total += f[i]->size + 1;
  }
  for (int k = 0; k < NK; k++) total += strlen(sources[k].body);
  char *src = xmalloc(total), *w = src;
  for (int i = 0; i < NPARTS; i++) memcpy(w, f[i]->text, f[i]->size), w += f[i]->size, *w++ = '\n';
  for (int k = 0; k < NK; k++) {
    size_t n = strlen(sources[k].body);
    memcpy(w, sources[k].body, n), w += n;
  }
  memcpy(w, body_all, strlen(body_all) + 1);
  /* sm_90a: the Hopper prelude compiles in, and changes nothing for these. */
  static const char *const archs[] = {"sm_80", "sm_90", "sm_90a"};
  for (int a = 0; a < 3; a++) {
    if (!nvrtc_arch_supported(archs[a])) {
      printf("  NVRTC %s does not know %s: not compiled\n", nvrtc_version_string(), archs[a]);
      continue;
    }
    nvrtc_result r;
    int rc = nvrtc_compile(src, "all_tc", archs[a], &r);
    CHECK(rc == 0 && r.ok, "NVRTC %s: %s\n%s", archs[a], r.error, r.log);
    if (rc == 0 && r.ok) {
      CHECK(r.spill_store_bytes == 0 && r.stack_bytes == 0, "all_tc %s: %d spill, %d stack",
            archs[a], r.spill_store_bytes, r.stack_bytes);
      printf("  NVRTC %s: %d kernels, all_tc %d registers, %.0f ms\n", archs[a], NK + 1,
             r.registers, r.compile_ms);
    }
    nvrtc_result_free(&r);
  }
  free(src);
}

int main(void) {
  rng_state = SEED;
  printf("seed 0x%llx\n", (unsigned long long)SEED);
  /* Warnings are errors; clang also flags the preludes' unused static inline
  ** helpers, which are no fault of a kernel. */
  emu_compile_opts co = {.jobs = 0, .batch = 0,
                         .extra_flags = "-Wall -Wextra -Werror"};
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
  if (ok) {
    test_conv_all();
    test_conv_f32();
    for (int mode = 0; mode < 3; mode++) {
      test_mma(mode, EMU_FORWARD);
      test_mma(mode, EMU_REVERSE);
      test_mma(mode, EMU_RANDOM);
    }
    for (int tr = 0; tr < 2; tr++)
      for (int num = 1; num <= 4; num *= 2) test_ldmatrix(num, tr, 0);
    test_ldmatrix(4, 0, 1);
    test_ldmatrix(2, 1, 1);
    test_e2e(0);
    test_e2e(1);
    test_cp_async();
    test_faults();
    test_access();
  }
  test_nvrtc();
  for (int k = 0; k < NK; k++) emu_build_free(&builds[k]);
  return check_done("test_emu_tc");
}
