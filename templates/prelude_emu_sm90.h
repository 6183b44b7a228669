/*
** prelude_emu_sm90.h
** The Hopper primitives of the CPU emulator, with the names of
** prelude_cuda_sm90.cuh: wgmma, TMA, mbarriers, elect, setmaxnreg and named
** barriers. Pasted after prelude_emu_tc.h, whose conversions, coin and
** cp.async it uses. Each section names the PTX ISA section it implements.
**
** Asynchrony: a wgmma, a TMA load and a TMA store complete at a point the
** schedule picks between issue and the wait that retires them (emu_abi.h,
** FA_EMU_ASYNC_*): at the wait (forward), at issue (reverse), or at issue,
** at a yield of the issuing thread or at the wait, by coin (random, skew).
** A wgmma reads shared memory when it completes, and its accumulators read
** as NaN from issue until wgmma.wait_group retires it. A TMA load bound for
** an mbarrier lands, at the latest, when a thread waits on that barrier.
**
** Shared addresses (descriptors, swizzles) are byte offsets from the CTA's
** shared memory, which the emulator aligns to 1024 bytes.
*/

#include <stdarg.h>
#include <stdio.h>

#define FA_SM90_KERNEL_OF(name, nthreads, param) FA_KERNEL_OF(name, nthreads, param)
#define FA_SM90_KERNEL(name, nthreads) FA_KERNEL(name, nthreads)

typedef unsigned long long fa_wgmma_desc;

/* A compile-time constant in [lo, hi], as an immediate operand must be. */
#define FA_EMU_IMM(n, lo, hi, what) \
  ((int)sizeof(struct { _Static_assert((n) >= (lo) && (n) <= (hi), what); char c; }) * 0 + (n))

FA_INLINE int fa_warpgroup(void) { return fa_emu_self->tid / 128; }

/* Stop the launch with a formatted message naming the line. */
__attribute__((format(printf, 3, 4), unused))
static void fa_emu_failf(fa_emu_thread *t, int line, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  t->fail(t, msg, line);
}

FA_INLINE unsigned fa_emu_smem_offset(fa_emu_thread *t, const void *p) {
  return (unsigned)((const unsigned char *)p - t->smem_window);
}

/* Every thread of the warpgroup brings n <= 32 bytes; the 128 slots are
** valid until this thread's next warpgroup collective. */
FA_INLINE unsigned char (*fa_emu_group_exchange(fa_emu_thread *t, const void *mine, size_t n,
                                                int line))[32] {
  unsigned char (*slots)[32] = t->wgroup->xchg[t->wgen & 1u];
  memcpy(slots[t->tid & 127], mine, n);
  t->wait(t, FA_EMU_WAIT_GROUP, line);
  t->wgen++;
  return slots;
}

/* ---- Swizzles: CuTe Swizzle<1,4,3>, <2,4,3>, <3,4,3> on byte offsets:
** bits 7.. of the offset XORed into the 16-byte chunk index, bits 4.. (PTX
** ISA "Shared Memory Matrix Layout", "Tensor Map: swizzle modes"). ---- */

FA_INLINE unsigned fa_swizzle_offset(unsigned off, int swizzle) {
  const unsigned mask = swizzle == 128 ? 7u : swizzle == 64 ? 3u : swizzle == 32 ? 1u : 0u;
  return off ^ (((off >> 7) & mask) << 4);
}

/* ---- mbarrier (PTX ISA "Parallel Synchronization and Communication
** Instructions: mbarrier"): the encoding of emu_abi.h. ---- */

FA_INLINE unsigned long long *fa_emu_mbar_check(fa_emu_thread *t, unsigned long long *bar,
                                                 int line) {
  fa_emu_check_shared(t, bar, 8, line);
  if (!FA_EMU_MBAR_OK(*bar))
    fa_emu_failf(t, line, "mbarrier at shared offset %u used before mbarrier.init",
                 fa_emu_smem_offset(t, bar));
  return bar;
}

/* Take arrivals and transaction bytes off the current phase; complete it
** when nothing is pending. */
FA_INLINE void fa_emu_mbar_update(fa_emu_thread *t, unsigned long long *bar, unsigned arrivals,
                                  long long tx, int line) {
  const unsigned long long x = *fa_emu_mbar_check(t, bar, line);
  unsigned pending = (unsigned)(x & 0xFFFu), phase = FA_EMU_MBAR_PHASE(x);
  const unsigned expected = (unsigned)(x >> 12) & 0xFFFu;
  long long count = (long long)(int)(unsigned)(x >> 24) + tx;
  if (arrivals > pending)
    fa_emu_failf(t, line, "mbarrier at shared offset %u: more arrivals than its count %u in "
                 "one phase", fa_emu_smem_offset(t, bar), expected);
  if (count < -((1 << 20) - 1) || count > (1 << 20) - 1)
    fa_emu_failf(t, line, "mbarrier at shared offset %u: transaction count %lld out of range",
                 fa_emu_smem_offset(t, bar), count);
  pending -= arrivals;
  if (pending == 0 && count == 0) {
    /* A correct kernel expects the bytes of every load in flight to the
    ** barrier, so none can be in flight when its phase completes. */
    for (int i = 0; i < t->cta->nloads; i++)
      if (t->cta->loads[i].bar == bar)
        fa_emu_failf(t, line, "mbarrier at shared offset %u completed its phase of parity %u "
                     "while a TMA load to it (line %d) was in flight: its bytes were not "
                     "expected (a missing arrive.expect_tx?)", fa_emu_smem_offset(t, bar),
                     phase, t->cta->loads[i].line);
    pending = expected, phase ^= 1u;
  }
  *bar = (unsigned long long)phase << 63 | FA_EMU_MBAR_TAG << 56 |
         (unsigned long long)(unsigned)(int)count << 24 | (unsigned long long)expected << 12 |
         pending;
}

/* mbarrier.init.shared::cta.b64 */
FA_INLINE void fa_emu_mbar_init(unsigned long long *bar, unsigned count, int line) {
  fa_emu_thread *t = fa_emu_self;
  fa_emu_check_shared(t, bar, 8, line);
  if (count < 1 || count > 4095)
    fa_emu_failf(t, line, "mbarrier.init: count %u outside 1..4095", count);
  *bar = FA_EMU_MBAR_TAG << 56 | (unsigned long long)count << 12 | count;
}
#define fa_mbar_init(bar, count) fa_emu_mbar_init((bar), (count), __LINE__)

/* mbarrier.arrive.shared::cta.b64 */
#define fa_mbar_arrive(bar) fa_emu_mbar_update(fa_emu_self, (bar), 1, 0, __LINE__)
/* mbarrier.arrive.expect_tx.shared::cta.b64: expect, then arrive. */
#define fa_mbar_arrive_expect_tx(bar, bytes) \
  fa_emu_mbar_update(fa_emu_self, (bar), 1, (long long)(unsigned)(bytes), __LINE__)

/* fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta: the
** emulator has one proxy and one CTA per cluster, nothing to order. */
FA_INLINE void fa_fence_mbar_init(void) {}
FA_INLINE void fa_fence_proxy_async(void) {}

/* ---- TMA (PTX ISA "cp.async.bulk.tensor", "Tensor Map"; CUDA Driver API
** cuTensorMapEncodeTiled): boxes of the emulator's tensor map. ---- */

typedef struct fa_emu_tmap_view {
  const unsigned char *base;
  unsigned elem, rank, swizzle;
  unsigned long long dims[4], strides[4];  /* strides[0]: the element */
  unsigned box[4];
  unsigned box_bytes;
} fa_emu_tmap_view;

FA_INLINE fa_emu_tmap_view fa_emu_tmap_read(const unsigned long long *w) {
  fa_emu_tmap_view v;
  v.base = (const unsigned char *)(uintptr_t)w[1];
  v.elem = (unsigned)(w[2] & 0xFFu), v.rank = (unsigned)(w[2] >> 8) & 0xFFu;
  v.swizzle = (unsigned)(w[2] >> 16) & 0xFFFFu;
  v.box_bytes = v.elem;
  for (int i = 0; i < 4; i++) {
    v.dims[i] = w[3 + i];
    v.strides[i] = i ? w[6 + i] : v.elem;
    v.box[i] = (unsigned)(w[10] >> (16 * i)) & 0xFFFFu;
    v.box_bytes *= v.box[i];
  }
  return v;
}

/* Check a TMA operation at issue: the map, the shared box, the tensor in
** one global buffer. */
FA_INLINE fa_emu_tmap_view fa_emu_tma_check(fa_emu_thread *t, const fa_tmap *map,
                                            unsigned rank, const void *smem, const char *what,
                                            int line) {
  if (map->w[0] != FA_EMU_TMAP_TAG)
    fa_emu_failf(t, line, "%s: not a tensor map of the emu backend (backend_tmap)", what);
  const fa_emu_tmap_view v = fa_emu_tmap_read(map->w);
  if (v.rank != rank)
    fa_emu_failf(t, line, "%s: a %uD operation on a %uD tensor map", what, rank, v.rank);
  /* A swizzle moves 16-byte chunks within 128-byte lines: whole lines. */
  const uintptr_t s = (uintptr_t)smem, need = v.swizzle ? (v.box_bytes + 127u) / 128u * 128u
                                                        : v.box_bytes;
  if (s < (uintptr_t)t->smem || s + need > (uintptr_t)t->smem_end)
    t->fault(t, FA_EMU_FAULT_SHARED, smem, (int)need, line);
  if ((s - (uintptr_t)t->smem_window) % 128u)
    fa_emu_failf(t, line, "%s: shared box at offset %u not 128-byte aligned", what,
                 fa_emu_smem_offset(t, smem));
  unsigned long long end = v.elem;
  for (unsigned i = 0; i < v.rank; i++) end += (v.dims[i] - 1) * v.strides[i];
  fa_emu_check_global(t, v.base, 1, line);
  fa_emu_check_global(t, v.base + end - 1, 1, line);
  return v;
}

/* Copy one box between global and shared: load (zeros where out of
** bounds) or store (out-of-bounds elements not written). The box sits in
** shared memory densely, innermost first, under the map's swizzle.
** Returns the global bytes moved. */
FA_INLINE unsigned long long fa_emu_tma_copy(fa_emu_thread *t, const fa_emu_tma *op, int store) {
  const fa_emu_tmap_view v = fa_emu_tmap_read(op->map);
  const unsigned row = v.box[0] * v.elem, soff = fa_emu_smem_offset(t, op->smem);
  unsigned long long moved = 0;
  unsigned r = 0;
  for (unsigned b3 = 0; b3 < v.box[3]; b3++)
    for (unsigned b2 = 0; b2 < v.box[2]; b2++)
      for (unsigned b1 = 0; b1 < v.box[1]; b1++, r++) {
        const long long g1 = (long long)op->c[1] + b1, g2 = (long long)op->c[2] + b2,
                        g3 = (long long)op->c[3] + b3;
        const int rin = g1 >= 0 && g1 < (long long)v.dims[1] && g2 >= 0 &&
                        g2 < (long long)v.dims[2] && g3 >= 0 && g3 < (long long)v.dims[3];
        for (unsigned b0 = 0; b0 < v.box[0]; b0++) {
          const long long g0 = (long long)op->c[0] + b0;
          unsigned char *s = t->smem_window + fa_swizzle_offset(soff + r * row + b0 * v.elem,
                                                         (int)v.swizzle);
          if (!rin || g0 < 0 || g0 >= (long long)v.dims[0]) {
            if (!store) memset(s, 0, v.elem);
            continue;
          }
          unsigned char *g = (unsigned char *)(uintptr_t)(v.base + g0 * (long long)v.strides[0] +
                                                          g1 * (long long)v.strides[1] +
                                                          g2 * (long long)v.strides[2] +
                                                          g3 * (long long)v.strides[3]);
          if (store) memcpy(g, s, v.elem);
          else memcpy(s, g, v.elem);
          moved += v.elem;
        }
      }
  return moved;
}

/* Land TMA load i of the CTA: the box, then complete_tx of its bytes. */
FA_INLINE void fa_emu_tma_land(fa_emu_thread *t, int i) {
  fa_emu_cta *c = t->cta;
  const fa_emu_tma op = c->loads[i];
  memmove(&c->loads[i], &c->loads[i + 1], (size_t)(c->nloads - i - 1) * sizeof op);
  c->nloads--;
  t->ctr->gmem_read += fa_emu_tma_copy(t, &op, 0);
  fa_emu_mbar_update(t, op.bar, 0, -(long long)fa_emu_tmap_read(op.map).box_bytes, op.line);
}

FA_INLINE void fa_emu_tma_load(void *smem, const fa_tmap *map, unsigned rank, int c0, int c1,
                               int c2, int c3, unsigned long long *bar, int line) {
  fa_emu_thread *t = fa_emu_self;
  const fa_emu_tmap_view v = fa_emu_tma_check(t, map, rank, smem, "TMA load", line);
  fa_emu_mbar_check(t, bar, line);
  fa_emu_cta *c = t->cta;
  if (c->nloads >= FA_EMU_MAX_TMA)
    fa_emu_failf(t, line, "more than %d TMA loads in flight", FA_EMU_MAX_TMA);
  fa_emu_tma *op = &c->loads[c->nloads++];
  memcpy(op->map, map->w, sizeof op->map);
  op->smem = (unsigned char *)smem, op->bar = bar, op->line = line;
  op->c[0] = c0, op->c[1] = c1, op->c[2] = c2, op->c[3] = c3;
  t->ctr->tma_bytes += v.box_bytes;
  t->ctr->smem_written += v.box_bytes;
  if (t->async_mode == FA_EMU_ASYNC_RANDOM) t->progress = fa_emu_progress;
  if (t->async_mode == FA_EMU_ASYNC_EARLY ||
      (t->async_mode == FA_EMU_ASYNC_RANDOM && fa_emu_coin(t)))
    fa_emu_tma_land(t, c->nloads - 1);
}
#define fa_tma_load_2d(smem, map, c0, c1, bar) \
  fa_emu_tma_load((smem), (map), 2, (c0), (c1), 0, 0, (bar), __LINE__)
#define fa_tma_load_3d(smem, map, c0, c1, c2, bar) \
  fa_emu_tma_load((smem), (map), 3, (c0), (c1), (c2), 0, (bar), __LINE__)
#define fa_tma_load_4d(smem, map, c0, c1, c2, c3, bar) \
  fa_emu_tma_load((smem), (map), 4, (c0), (c1), (c2), (c3), (bar), __LINE__)

/* Land the oldest TMA store of this thread. */
FA_INLINE void fa_emu_bulk_land(fa_emu_thread *t, int i) {
  t->ctr->gmem_written += fa_emu_tma_copy(t, &t->bulk[i], 1);
  memmove(&t->bulk[i], &t->bulk[i + 1], (size_t)(t->nbulk - i - 1) * sizeof t->bulk[0]);
  t->nbulk--;
}

FA_INLINE void fa_emu_tma_store(const fa_tmap *map, const void *smem, unsigned rank, int c0,
                                int c1, int c2, int c3, int line) {
  fa_emu_thread *t = fa_emu_self;
  const fa_emu_tmap_view v = fa_emu_tma_check(t, map, rank, smem, "TMA store", line);
  if (t->nbulk >= FA_EMU_MAX_BULK)
    fa_emu_failf(t, line, "more than %d TMA stores in flight", FA_EMU_MAX_BULK);
  fa_emu_tma *op = &t->bulk[t->nbulk++];
  memcpy(op->map, map->w, sizeof op->map);
  op->smem = (unsigned char *)(uintptr_t)smem, op->bar = NULL, op->line = line;
  op->c[0] = c0, op->c[1] = c1, op->c[2] = c2, op->c[3] = c3;
  op->group = t->bulk_group;
  t->ctr->tma_bytes += v.box_bytes;
  t->ctr->smem_read += v.box_bytes;
  t->progress = fa_emu_progress;  /* the stores land at the latest when the thread exits */
  if (t->async_mode == FA_EMU_ASYNC_EARLY ||
      (t->async_mode == FA_EMU_ASYNC_RANDOM && fa_emu_coin(t)))
    fa_emu_bulk_land(t, t->nbulk - 1);
}
#define fa_tma_store_2d(map, smem, c0, c1) \
  fa_emu_tma_store((map), (smem), 2, (c0), (c1), 0, 0, __LINE__)
#define fa_tma_store_3d(map, smem, c0, c1, c2) \
  fa_emu_tma_store((map), (smem), 3, (c0), (c1), (c2), 0, __LINE__)
#define fa_tma_store_4d(map, smem, c0, c1, c2, c3) \
  fa_emu_tma_store((map), (smem), 4, (c0), (c1), (c2), (c3), __LINE__)

/* cp.async.bulk.commit_group */
FA_INLINE void fa_tma_store_commit(void) { fa_emu_self->bulk_group++; }

/* cp.async.bulk.wait_group.read n: the stores of every committed group but
** the n most recent have read shared memory (here: have landed). */
FA_INLINE void fa_emu_tma_store_wait(int n) {
  fa_emu_thread *t = fa_emu_self;
  while (t->nbulk && (unsigned long long)t->bulk[0].group + (unsigned)n <
                         (unsigned long long)t->bulk_group)
    fa_emu_bulk_land(t, 0);
}
#define fa_tma_store_wait(n) fa_emu_tma_store_wait(FA_EMU_IMM(n, 0, 7, \
  "fa_tma_store_wait: n must be a constant 0..7"))

/* mbarrier.try_wait.parity, looped: returns once the phase of this parity
** has completed. A TMA load bound for the barrier lands first. */
FA_INLINE void fa_emu_mbar_wait(unsigned long long *bar, unsigned parity, int line) {
  fa_emu_thread *t = fa_emu_self;
  fa_emu_mbar_check(t, bar, line);
  t->ctr->mbar_waits++;
  parity &= 1u;
  while (FA_EMU_MBAR_PHASE(*bar) == parity) {
    int i = 0;
    while (i < t->cta->nloads && t->cta->loads[i].bar != bar) i++;
    if (i < t->cta->nloads) {
      fa_emu_tma_land(t, i);
      continue;
    }
    t->wait_obj = bar, t->wait_arg = parity;
    t->wait(t, FA_EMU_WAIT_MBAR, line);
  }
}
#define fa_mbar_wait(bar, parity) fa_emu_mbar_wait((bar), (parity), __LINE__)

/* ---- Warpgroup MMA (PTX ISA "Asynchronous Warpgroup Level Matrix
** Multiply-Accumulate Instructions": "Matrix Descriptor Format", "Shared
** Memory Matrix Layout", "Register Fragments"). ---- */

/* Start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29,
** stride byte offset >> 4 in 32-45, base offset 0 in 49-51, swizzle mode
** in 62-63 (1: 128B, 2: 64B, 3: 32B). */
FA_INLINE fa_wgmma_desc fa_emu_desc_make(const void *smem, unsigned lbo, unsigned sbo,
                                         int swizzle, int line) {
  fa_emu_thread *t = fa_emu_self;
  fa_emu_check_shared(t, smem, 16, line);
  const unsigned long long mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  if (!mode && swizzle) fa_emu_failf(t, line, "matrix descriptor: swizzle %d", swizzle);
  return (unsigned long long)((fa_emu_smem_offset(t, smem) & 0x3FFFFu) >> 4) |
         (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16 |
         (unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32 | mode << 62;
}
#define fa_wgmma_desc_make(smem, lbo, sbo, swizzle) \
  fa_emu_desc_make((smem), (lbo), (sbo), (swizzle), __LINE__)

FA_INLINE fa_wgmma_desc fa_wgmma_desc_advance(fa_wgmma_desc d, unsigned bytes) {
  return (d & ~0x3FFFull) | (((d & 0x3FFFull) + (bytes >> 4)) & 0x3FFFull);
}

/* wgmma's input types: the k extent of one instruction is 32 bytes of A's
** row, 16 elements of 16 bits or 32 of fp8. */
enum { FA_EMU_F16 = 0, FA_EMU_BF16 = 1, FA_EMU_E4M3 = 2 };
#define FA_EMU_WGMMA_K(type) ((type) == FA_EMU_E4M3 ? 32 : 16)

/* x rounded to e4m3, to nearest even, saturating (cvt.rn.satfinite: past
** 448 and infinities to +-448, NaN to 0x7f). */
FA_INLINE unsigned char fa_f32_to_e4m3(float x) {
  const unsigned char sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return 0x7f;
  const float a = fabsf(x);
  if (a >= 448.f) return sign | 0x7e;  /* what rounds past 448 saturates to it */
  const int e = (int)(fa_emu_f32_bits(a) >> 23) - 127;  /* a = 1.m x 2^e; a float subnormal: -127 */
  const int E = e < -6 ? -6 : e;  /* a = 1.m x 2^E, or an e4m3 subnormal at 2^-6 */
  /* Times 2^(3-E), 2^-5 to 2^9: exact, to 0..16 (by bits: P passes here element by element). */
  const unsigned q = (unsigned)nearbyintf(a * fa_emu_bits_f32((unsigned)(130 - E) << 23));
  if (q < 8) return sign | (unsigned char)q;  /* subnormal or zero */
  if (q == 16) return sign | (unsigned char)((E + 8) << 3);  /* rounded up a binade */
  return sign | (unsigned char)((E + 7) << 3 | (q & 7));
}

/* Four floats as e4m3 bytes, e0 in the lowest (the A fragment's k order). */
FA_INLINE unsigned fa_pack_e4m3x4(float e0, float e1, float e2, float e3) {
  return (unsigned)fa_f32_to_e4m3(e0) | (unsigned)fa_f32_to_e4m3(e1) << 8 |
         (unsigned)fa_f32_to_e4m3(e2) << 16 | (unsigned)fa_f32_to_e4m3(e3) << 24;
}

/* The shared byte offset of element (mn, k) of a 64 x K (A) or K x N (B)
** operand, by the canonical layouts (T = 16 bytes: 8 elements of 16 bits,
** 16 of fp8; in units of T, strides in bytes below):
**   K-major, none:  ((8,m),(T,2k)):((1T,SBO),(1,LBO))
**   K-major, sw S:  ((8,m),(T,2k)):((S/16 T,SBO),(1,T))      S = 32, 64, 128
**   MN-major, none: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
**   MN-major, sw S: ((T,S/16,m),(8,k)):((1,T,LBO),(S/16 T,SBO))
** then the swizzle on the byte address (Swizzle<1|2|3,4,3>). es: bytes per
** element; MN-major operands are 16-bit (fp8 wgmma takes K-major only). */
FA_INLINE unsigned fa_emu_desc_offset(unsigned long long d, int mn_major, unsigned mn,
                                      unsigned k, unsigned es) {
  const unsigned start = (unsigned)(d & 0x3FFFu) << 4, lbo = (unsigned)(d >> 16 & 0x3FFFu) << 4;
  const unsigned sbo = (unsigned)(d >> 32 & 0x3FFFu) << 4, mode = (unsigned)(d >> 62);
  const int sw = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  const unsigned kb = k * es;  /* the byte of the element in A's (or B's) K-major row */
  unsigned off;
  if (!mn_major && !sw) off = (mn % 8) * 16 + (mn / 8) * sbo + kb % 16 + (kb / 16) * lbo;
  else if (!mn_major) off = (mn % 8) * (unsigned)sw + (mn / 8) * sbo + kb;
  else if (!sw) off = (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo;
  else off = (mn % ((unsigned)sw / 2)) * 2 + (mn / ((unsigned)sw / 2)) * lbo +
             (k % 8) * (unsigned)sw + (k / 8) * sbo;
  return fa_swizzle_offset(start + off, sw);
}

/* An element of wgmma's input type, from its bits, as a double. */
FA_INLINE double fa_emu_wgmma_elem(int type, unsigned short h) {
  return type == FA_EMU_E4M3 ? (double)fa_e4m3_to_f32((unsigned char)h)
         : type == FA_EMU_BF16 ? (double)fa_bf16_to_f32(h) : (double)fa_f16_to_f32(h);
}

/* A descriptor's base offset, which the emulator takes to be 0. */
FA_INLINE void fa_emu_desc_check_base(fa_emu_thread *t, unsigned long long d, int line) {
  if ((d >> 49) & 7u)
    fa_emu_failf(t, line, "wgmma: matrix descriptor base offset %u (the emulator takes 0)",
                 (unsigned)(d >> 49) & 7u);
}

/* Elements [k0, k0 + n) of row mn of an operand in shared memory, one at a
** time: each located, checked and converted on its own. */
FA_INLINE void fa_emu_desc_read_each(fa_emu_thread *t, unsigned long long d, int mn_major,
                                     unsigned mn, int type, unsigned k0, unsigned n,
                                     double *out, int line) {
  const unsigned es = type == FA_EMU_E4M3 ? 1 : 2;
  for (unsigned k = k0; k < k0 + n; k++) {
    const unsigned off = fa_emu_desc_offset(d, mn_major, mn, k, es);
    if (t->smem_window + off < t->smem || t->smem_window + off + es > t->smem_end)
      fa_emu_failf(t, line, "wgmma: operand element at shared offset %u, outside the CTA's shared memory", off);
    unsigned short h = 0;
    memcpy(&h, t->smem_window + off, es);  /* little-endian: a byte lands in h's low half */
    out[k] = fa_emu_wgmma_elem(type, h);
  }
}

/* The k columns of row mn of an operand in shared memory, as doubles. A
** K-major row is whole 16-byte chunks that no swizzle splits (it moves
** chunks, not the bytes in one), so each chunk is located and checked
** once; one that is not wholly inside the CTA's shared memory is read
** element by element, to name the first element outside. */
FA_INLINE void fa_emu_desc_read(fa_emu_thread *t, unsigned long long d, int mn_major,
                                unsigned mn, int type, double *out, int line) {
  const unsigned es = type == FA_EMU_E4M3 ? 1 : 2, per = 16 / es;
  fa_emu_desc_check_base(t, d, line);
  if (mn_major) {
    fa_emu_desc_read_each(t, d, mn_major, mn, type, 0, 16, out, line);
    return;
  }
  for (unsigned k0 = 0; k0 < (unsigned)FA_EMU_WGMMA_K(type); k0 += per) {
    const unsigned off = fa_emu_desc_offset(d, 0, mn, k0, es);
    const unsigned char *p = t->smem_window + off;
    if (p < t->smem || p + 16 > t->smem_end) {
      fa_emu_desc_read_each(t, d, 0, mn, type, k0, per, out, line);
      continue;
    }
    for (unsigned i = 0; i < per; i++)  /* little-endian 16-bit elements */
      out[k0 + i] =
          fa_emu_wgmma_elem(type, es == 1 ? p[i] : (unsigned short)(p[2 * i] | p[2 * i + 1] << 8));
  }
}

/* Rows mn and mn + 1 (mn even) of an MN-major operand, whose elements of a
** k lie side by side in one 16-byte chunk under every swizzle: one read of
** both per k. */
FA_INLINE void fa_emu_desc_read_pair(fa_emu_thread *t, unsigned long long d, unsigned mn,
                                     int type, double *out0, double *out1, int line) {
  fa_emu_desc_check_base(t, d, line);
  for (unsigned k = 0; k < 16; k++) {
    const unsigned off = fa_emu_desc_offset(d, 1, mn, k, 2);
    const unsigned char *p = t->smem_window + off;
    if (p < t->smem || p + 4 > t->smem_end) {
      fa_emu_desc_read_each(t, d, 1, mn, type, k, 1, out0, line);
      fa_emu_desc_read_each(t, d, 1, mn + 1, type, k, 1, out1, line);
      continue;
    }
    unsigned short h[2];
    memcpy(h, p, 4);
    out0[k] = fa_emu_wgmma_elem(type, h[0]);
    out1[k] = fa_emu_wgmma_elem(type, h[1]);
  }
}

/* Compute wgmma i of this thread: its D fragment (thread t, warp w = t/32 of
** the warpgroup, lane l: d[j] is row 16w + l/4 + 8 ((j/2) % 2), column
** 8 (j/4) + 2 (l%4) + j%2), products exact in double, summed in k order, D
** added, rounded once to float. Then its result feeds the next wgmma on
** the same accumulators. */
FA_INLINE void fa_emu_wgmma_compute(fa_emu_thread *t, int i, int line) {
  fa_emu_wgmma *op = &t->wgmma[i];
  const unsigned l = (unsigned)t->tid & 31u, w = ((unsigned)t->tid >> 5) & 3u;
  const int K = FA_EMU_WGMMA_K(op->type);
  double a[2][32], b[2][32];
  for (unsigned r = 0; r < 2; r++) {
    if (op->rs)
      for (int k = 0; k < K; k++) a[r][k] = fa_emu_wgmma_elem(op->type, op->a[r][k]);
    else
      fa_emu_desc_read(t, op->da, op->trans_a, 16 * w + l / 4 + 8 * r, op->type, a[r], line);
  }
  for (int j = 0; j < op->n / 2; j += 4) {
    const unsigned col = 8 * ((unsigned)j / 4) + 2 * (l % 4);
    if (op->trans_b)
      fa_emu_desc_read_pair(t, op->db, col, op->type, b[0], b[1], line);
    else
      for (unsigned c = 0; c < 2; c++) fa_emu_desc_read(t, op->db, 0, col + c, op->type, b[c], line);
    for (int e = 0; e < 4; e++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) s += a[e >> 1][k] * b[e & 1][k];
      op->acc[j + e] = (float)(s + (op->scale_d ? (double)op->acc[j + e] : 0.0));
    }
  }
  op->done = 1;
  for (int j = i + 1; j < t->nwgmma; j++)
    if (t->wgmma[j].d == op->d) {
      memcpy(t->wgmma[j].acc, op->acc, sizeof op->acc);
      break;
    }
}

/* Complete this thread's wgmma up to i, in issue order. */
FA_INLINE void fa_emu_wgmma_complete(fa_emu_thread *t, int i, int line) {
  for (int j = 0; j <= i; j++)
    if (!t->wgmma[j].done) fa_emu_wgmma_compute(t, j, line);
}

/* wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16} and m64nNk32.f32.e4m3.e4m3:
** a warpgroup collective at issue (the descriptors must agree, an RS A
** fragment is gathered: per warp the layout of mma.m16n8k16's A, or for
** fp8 mma.m16n8k32's: row 16 w + l/4 + 8 (r % 2), column 4 (l % 4) + byte
** + 16 (r / 2) of register r, as CUTLASS's GMMA ALayout_64x32), then queued. */
FA_INLINE void fa_emu_wgmma_issue(int n, float *d, const unsigned *a, fa_wgmma_desc da,
                            fa_wgmma_desc db, int scale_d, int trans_a, int trans_b, int type,
                            int line) {
  fa_emu_thread *t = fa_emu_self;
  struct { unsigned long long da, db; unsigned a[4]; } mine = {a ? 0 : da, db, {0, 0, 0, 0}};
  if (a) memcpy(mine.a, a, sizeof mine.a);
  unsigned char (*slots)[32] = fa_emu_group_exchange(t, &mine, sizeof mine, line);
  if (t->wg_size != 128)
    fa_emu_failf(t, line, "wgmma: a warpgroup of %d threads, not 128", t->wg_size);
  if (memcmp(slots[0], &mine, 16) != 0)
    fa_emu_failf(t, line, "wgmma: thread %d's matrix descriptors differ from its warpgroup's",
                 t->tid);
  if (t->nwgmma >= FA_EMU_MAX_WGMMA)
    fa_emu_failf(t, line, "more than %d wgmma in flight", FA_EMU_MAX_WGMMA);
  fa_emu_wgmma *op = &t->wgmma[t->nwgmma++];
  op->d = d, op->da = da, op->db = db, op->n = n, op->scale_d = scale_d != 0;
  op->trans_a = trans_a, op->trans_b = trans_b, op->type = type, op->rs = a != NULL;
  op->done = 0, op->group = t->wgmma_group;
  if (type == FA_EMU_E4M3 && (trans_a || trans_b))
    fa_emu_failf(t, line, "wgmma: fp8 operands are K-major (no transpose)");
  const unsigned l = (unsigned)t->tid & 31u, w0 = (unsigned)t->tid & ~31u & 127u;
  const unsigned K = (unsigned)FA_EMU_WGMMA_K(type);
  for (unsigned r = 0; op->rs && r < 2; r++)
    for (unsigned k = 0; k < K; k++) {
      unsigned word;
      if (type == FA_EMU_E4M3) {
        memcpy(&word, slots[w0 + 4 * (l / 4) + (k % 16) / 4] + 16 + 4 * (r + 2 * (k / 16)), 4);
        op->a[r][k] = (unsigned short)(word >> 8 * (k % 4) & 0xFFu);
      } else {
        memcpy(&word, slots[w0 + 4 * (l / 4) + (k % 8) / 2] + 16 + 4 * (r + 2 * (k / 8)), 4);
        op->a[r][k] = (unsigned short)(k % 2 ? word >> 16 : word & 0xFFFFu);
      }
    }
  int chained = 0;
  for (int j = t->nwgmma - 2; j >= 0 && !chained; j--)
    if (t->wgmma[j].d == d) {
      chained = 1;
      if (t->wgmma[j].done) memcpy(op->acc, t->wgmma[j].acc, sizeof op->acc);
    }
  if (!chained) memcpy(op->acc, d, (size_t)n / 2 * sizeof *d);
  for (int j = 0; j < n / 2; j++) d[j] = NAN;
  if ((t->tid & 127) == 0) {
    t->ctr->wgmma++;
    t->ctr->wgmma_flops += 2ull * 64u * (unsigned)n * K;
    t->ctr->smem_read += (op->rs ? 0u : 64u * 32u) + 32u * (unsigned)n;  /* 32 bytes a row */
  }
  if (t->async_mode == FA_EMU_ASYNC_RANDOM) t->progress = fa_emu_progress;
  if (t->async_mode == FA_EMU_ASYNC_EARLY ||
      (t->async_mode == FA_EMU_ASYNC_RANDOM && fa_emu_coin(t)))
    fa_emu_wgmma_complete(t, t->nwgmma - 1, line);
}

#define FA_EMU_WGMMA_N(n) FA_EMU_IMM(n, 8, 256, "wgmma: N must be a constant 8..256") + \
  FA_EMU_IMM((n) % 8, 0, 0, "wgmma: N must be a multiple of 8")
#define fa_wgmma_ss_f16(N, d, da, db, scale_d, ta, tb) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), NULL, (da), (db), (scale_d), \
               FA_EMU_IMM(ta, 0, 1, "trans_a: 0 or 1"), FA_EMU_IMM(tb, 0, 1, "trans_b: 0 or 1"), \
               FA_EMU_F16, __LINE__)
#define fa_wgmma_ss_bf16(N, d, da, db, scale_d, ta, tb) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), NULL, (da), (db), (scale_d), \
               FA_EMU_IMM(ta, 0, 1, "trans_a: 0 or 1"), FA_EMU_IMM(tb, 0, 1, "trans_b: 0 or 1"), \
               FA_EMU_BF16, __LINE__)
#define fa_wgmma_rs_f16(N, d, a, db, scale_d, tb) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), (a), 0, (db), (scale_d), 0, \
               FA_EMU_IMM(tb, 0, 1, "trans_b: 0 or 1"), FA_EMU_F16, __LINE__)
#define fa_wgmma_rs_bf16(N, d, a, db, scale_d, tb) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), (a), 0, (db), (scale_d), 0, \
               FA_EMU_IMM(tb, 0, 1, "trans_b: 0 or 1"), FA_EMU_BF16, __LINE__)
/* m64nNk32.f32.e4m3.e4m3: both operands K-major, so no transpose operands. */
#define fa_wgmma_ss_e4m3(N, d, da, db, scale_d) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), NULL, (da), (db), (scale_d), 0, 0, FA_EMU_E4M3, __LINE__)
#define fa_wgmma_rs_e4m3(N, d, a, db, scale_d) \
  fa_emu_wgmma_issue(FA_EMU_WGMMA_N(N), (d), (a), 0, (db), (scale_d), 0, 0, FA_EMU_E4M3, __LINE__)

/* wgmma.fence.sync.aligned: orders register accesses before a wgmma; the
** emulator takes RS fragments and accumulators at issue. */
FA_INLINE void fa_wgmma_fence(void) {}

/* wgmma.commit_group.sync.aligned */
FA_INLINE void fa_wgmma_commit(void) { fa_emu_self->wgmma_group++; }

/* wgmma.wait_group.sync.aligned n: retire, oldest first, the wgmma of every
** committed group but the n most recent: complete each, and write its
** result unless a later wgmma in flight owns the same accumulators. */
FA_INLINE void fa_emu_wgmma_wait(int n, int line) {
  fa_emu_thread *t = fa_emu_self;
  int r = 0;
  while (r < t->nwgmma &&
         (unsigned long long)t->wgmma[r].group + (unsigned)n < (unsigned long long)t->wgmma_group)
    r++;
  if (!r) return;
  fa_emu_wgmma_complete(t, r - 1, line);
  for (int i = 0; i < r; i++) {
    const fa_emu_wgmma *op = &t->wgmma[i];
    int later = 0;
    for (int j = i + 1; j < t->nwgmma && !later; j++) later = t->wgmma[j].d == op->d;
    if (!later) memcpy(op->d, op->acc, (size_t)op->n / 2 * sizeof *op->d);
  }
  memmove(t->wgmma, t->wgmma + r, (size_t)(t->nwgmma - r) * sizeof *t->wgmma);
  t->nwgmma -= r;
}
/* The accumulators' compiler fence of the CUDA prelude (CUTLASS's
** warpgroup_fence_operand): nothing to order on the CPU, where the
** accumulators read as NaN until the wait retires the wgmma. */
#define fa_wgmma_fence_acc(n, d) ((void)(d))
#define fa_wgmma_wait(n) \
  fa_emu_wgmma_wait(FA_EMU_IMM(n, 0, 7, "fa_wgmma_wait: n must be a constant 0..7"), __LINE__)
/* The CUDA prelude's wait after a and b (there a branch keeps ptxas from
** hoisting it): program order here. */
#define fa_wgmma_wait_after(n, a, b) ((void)(a), (void)(b), fa_wgmma_wait(n))

/* ---- stmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA "Warp-level
** matrix store instruction: stmatrix") ----
** ldmatrix's inverse: lane 8j + r brings the address of row r of matrix
** j, lane 4r + c columns 2c and 2c + 1 of row r of every matrix (register
** j). The addresses and values travel through the exchange; every lane
** then writes its row, and nobody goes on before all have (a second
** wait). Counted as the 16-byte shared stores they are. */
FA_INLINE void fa_emu_stmatrix_x4(unsigned char *row, const unsigned r[4], int line) {
  fa_emu_thread *t = fa_emu_self;
  struct { unsigned char *row; unsigned r[4]; } mine = {row, {r[0], r[1], r[2], r[3]}};
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &mine, sizeof mine, line);
  const int l = t->lane, j = l >> 3, rr = l & 7;
  unsigned v[4];
  for (int c = 0; c < 4; c++) {
    const int src = 4 * rr + c;
    if (src >= t->warp_size) t->fault(t, FA_EMU_FAULT_SHARED, row, 16, line);
    memcpy(&mine, slots[src], sizeof mine);
    v[c] = mine.r[j];
  }
  fa_emu_check_shared(t, row, 16, line);
  memcpy(row, v, sizeof v);
  t->ctr->smem_written += 16;
  t->wait(t, FA_EMU_WAIT_XCHG, line);
}
#define fa_stmatrix_x4(row, r) fa_emu_stmatrix_x4((row), (r), __LINE__)

/* ---- Warp specialization ---- */

/* elect.sync (PTX ISA "elect.sync"): one lane of the warp, the same for
** all; which one the schedule picks (lane 0, the last, or a random one), so
** a kernel must not count on lane 0. */
FA_INLINE int fa_emu_elect_one(int line) {
  fa_emu_thread *t = fa_emu_self;
  int pick = t->async_mode == FA_EMU_ASYNC_LATE ? 0
           : t->async_mode == FA_EMU_ASYNC_EARLY ? t->warp_size - 1
           : (int)((t->rng += 0x9E3779B97F4A7C15ull) >> 40) % t->warp_size;
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &pick, sizeof pick, line);
  memcpy(&pick, slots[0], sizeof pick);
  return t->lane == pick;
}
#define fa_elect_one() fa_emu_elect_one(__LINE__)

/* The registers per thread a CTA of n threads holds when its kernel uses
** setmaxnreg: the launch bound's share of the 64K-register file, a
** multiple of 8, at most 256 (ptxas allocates them all at launch). */
FA_INLINE int fa_emu_cta_regs(int n) {
  const int share = 65536 / n / 8 * 8;
  return share < 256 ? share : 256;
}

/* Once every warpgroup has asked, what they ask must fit what the CTA
** holds: an inc beyond it waits for registers no one will release, and a
** GPU hangs there. */
FA_INLINE void fa_emu_maxnreg_check(fa_emu_thread *t, int line) {
  const fa_emu_cta *c = t->cta;
  const int groups = (c->threads + 127) / 128, per = fa_emu_cta_regs(c->threads);
  long asked = 0;
  for (int g = 0; g < groups; g++) {
    if (!c->maxnreg[g]) return;
    asked += (long)c->maxnreg[g] * (g < groups - 1 ? 128 : c->threads - 128 * g);
  }
  if (asked > (long)per * c->threads)
    fa_emu_failf(t, line, "setmaxnreg: the warpgroups ask %ld registers, over the %ld the CTA "
                 "holds (%d threads x %d): a GPU would wait forever", asked,
                 (long)per * c->threads, c->threads, per);
}

/* setmaxnreg.{inc,dec}.sync.aligned.u32 (PTX ISA "setmaxnreg"): the count
** must be 24..256, a multiple of 8, the same across the warpgroup, and,
** with every warpgroup's, within the CTA's registers. */
FA_INLINE void fa_emu_setmaxnreg(int n, int inc, int line) {
  fa_emu_thread *t = fa_emu_self;
  if (n < 24 || n > 256 || n % 8)
    fa_emu_failf(t, line, "setmaxnreg.%s %d: the count must be 24..256, a multiple of 8",
                 inc ? "inc" : "dec", n);
  const int mine[2] = {n, inc};
  unsigned char (*slots)[32] = fa_emu_group_exchange(t, mine, sizeof mine, line);
  for (int i = 0; i < t->wg_size; i++)
    if (memcmp(slots[i], mine, sizeof mine) != 0) {
      int other[2];
      memcpy(other, slots[i], sizeof other);
      fa_emu_failf(t, line, "setmaxnreg not warpgroup-uniform: thread %d asks %s %d, thread %d "
                   "%s %d", t->tid, inc ? "inc" : "dec", n, (t->tid & ~127) + i,
                   other[1] ? "inc" : "dec", other[0]);
    }
  if ((t->tid & 127) == 0) t->cta->maxnreg[t->tid >> 7] = n;
  fa_emu_maxnreg_check(t, line);
}
#define fa_setmaxnreg_inc(n) fa_emu_setmaxnreg((n), 1, __LINE__)
#define fa_setmaxnreg_dec(n) fa_emu_setmaxnreg((n), 0, __LINE__)

/* bar.sync / bar.arrive id, nthreads (PTX ISA "bar, barrier"): id 0..15,
** nthreads a positive multiple of 32. */
FA_INLINE void fa_emu_named_bar(int id, int nthreads, int kind, int line) {
  fa_emu_thread *t = fa_emu_self;
  if (id < 0 || id > 15 || nthreads <= 0 || nthreads % 32)
    fa_emu_failf(t, line, "bar %d, %d: the id must be 0..15 and the count a multiple of 32",
                 id, nthreads);
  t->wait_arg = (unsigned)id, t->wait_count = (unsigned)nthreads;
  if (kind == FA_EMU_WAIT_NAMED) t->ctr->named_waits++;   /* bar.arrive goes on: no wait */
  t->wait(t, kind, line);
}
#define fa_named_bar_sync(id, n) fa_emu_named_bar((id), (n), FA_EMU_WAIT_NAMED, __LINE__)
#define fa_named_bar_arrive(id, n) fa_emu_named_bar((id), (n), FA_EMU_WAIT_ARRIVE, __LINE__)

/* ---- Asynchronous progress ---- */

/* At a yield (random schedules): each cp.async, the next wgmma, each TMA
** store and each TMA load of the CTA may complete now. At exit (drain):
** the stores land, as the hardware still writes them. */
__attribute__((unused)) static void fa_emu_progress(fa_emu_thread *t, int drain) {
  if (drain) {
    while (t->nbulk) fa_emu_bulk_land(t, 0);
    return;
  }
  if (t->async_mode != FA_EMU_ASYNC_RANDOM) return;
  fa_emu_copies_progress(t);
  int next = 0;
  while (next < t->nwgmma && t->wgmma[next].done) next++;
  if (next < t->nwgmma && fa_emu_coin(t)) fa_emu_wgmma_complete(t, next, 0);
  for (int i = t->nbulk - 1; i >= 0; i--)
    if (fa_emu_coin(t)) fa_emu_bulk_land(t, i);
  for (int i = t->cta->nloads - 1; i >= 0; i--)
    if (fa_emu_coin(t) && fa_emu_coin(t)) fa_emu_tma_land(t, i);
}
