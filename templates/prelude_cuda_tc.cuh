/*
** prelude_cuda_tc.cuh
** Tensor-core primitives of the cuda backend (sm_75 and later): half-precision
** conversions, 16-bit, 32-bit and 16-byte accesses, mma.sync m16n8k16,
** ldmatrix and cp.async, as inline PTX. Turing (sm_75) has neither
** m16n8k16 nor cp.async nor the packing cvt: there the same names do two
** m16n8k8, a copy through registers and two conversions (below); bf16 is
** sm_80's, and the families do not offer it under sm_80. Pasted after prelude_cuda.cuh; no
** header is included. prelude_emu_tc.h implements the same names on the
** CPU. Fragments are those of the PTX ISA, "Matrix Fragments for
** mma.m16n8k16 with floating point type" and "Warp-level matrix load
** instruction: ldmatrix"; the emulator's prelude spells them out.
*/

/* A tensor-core kernel: at least one CTA of nthreads per SM, and no other
** register target. With the first bound alone ptxas aims some tiles at
** 128 or 168 registers, for more CTAs per SM, and spills inside the main
** loop to get there; the tiles this family offers are sized for the
** registers they hold, and the tuner measures occupancy. */
#define FA_TC_KERNEL_OF(name, nthreads, param) \
  extern "C" __global__ void __launch_bounds__(nthreads, 1) name(const fa_params param)
#define FA_TC_KERNEL(name, nthreads) FA_TC_KERNEL_OF(name, nthreads, p)

typedef unsigned short fa_f16;   /* IEEE binary16 bits */
typedef unsigned short fa_bf16;  /* bfloat16 bits */
typedef struct __align__(16) fa_u32x4 { unsigned x, y, z, w; } fa_u32x4;

/* ---- Values read again, which the compiler cannot hoist ---- */

/* threadIdx.x, read again where called: volatile, so that the compiler
** neither hoists the read out of the main loop nor keeps what is derived
** from it live through the loop. The main loop's K/V copy takes its
** thread's lanes from it: an S2R and a few LOP3 per block, where the
** hoisted lanes (64-bit offsets among them) were live through the loop
** and spilled at 255 registers. */
FA_INLINE int fa_tid_again(void) {
  unsigned v;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
  return (int)v;
}
/* v, as a value the compiler cannot see through: what is computed from it
** after the call stays after the call. The main loop derives the K/V
** heads' addresses from fa_again_i32 of the K/V head, so that they are
** rebuilt where a copy needs them (a few IMADs per block) instead of
** hoisted out of the loop, where their four registers were live through
** it. */
FA_INLINE int fa_again_i32(int v) {
  int r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

/* v with the sign bit of `nonneg`, a float that is +0 or more (a row sum
** of P), XORed into its top bit: v itself, but an instruction (one LOP3)
** that must wait for `nonneg`. P V by k16 steps ties each step's A
** fragment to the rows' sums so that ptxas adds them before the product. */
FA_INLINE unsigned fa_tie_u32(unsigned v, float nonneg) {
  unsigned r;
  asm("lop3.b32 %0, %1, %2, 0x80000000, 0x78;" : "=r"(r) : "r"(v), "r"(__float_as_uint(nonneg)));
  return r;
}

/* ---- Conversions, round to nearest even (cvt.rn) ---- */

FA_INLINE float fa_f16_to_f32(fa_f16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
FA_INLINE fa_f16 fa_f32_to_f16(float x) {
  fa_f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
FA_INLINE float fa_bf16_to_f32(fa_bf16 h) { return __uint_as_float((unsigned)h << 16); }
/* An OCP e4m3 byte, exactly: its exponent and mantissa bits where fp32's
** are, scaled by 2^(127 - 7) (exact for subnormals too: no flush to zero);
** 0x7f and 0xff are NaN. */
FA_INLINE float fa_e4m3_to_f32(unsigned char b) {
  const float mag = (b & 0x7fu) == 0x7fu ? __uint_as_float(0x7fffffffu)
                                         : __uint_as_float((b & 0x7fu) << 20) * 0x1p120f;
  return b & 0x80u ? -mag : mag;
}
FA_INLINE fa_bf16 fa_f32_to_bf16(float x) {
#if __CUDA_ARCH__ >= 800
  fa_bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  /* Turing has no bf16 cvt: round to nearest even by hand, NaN to the
  ** canonical 0x7fff that cvt.rn.bf16.f32 gives (as the emulator does). */
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (fa_bf16)0x7fffu;
  return (fa_bf16)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
#endif
}
/* cvt.rn.{f16x2,bf16x2}.f32 d, a, b puts a in the upper half, b in the lower. */
FA_INLINE unsigned fa_pack_f16x2(float lo, float hi) {
  unsigned r;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  r = (unsigned)fa_f32_to_f16(lo) | (unsigned)fa_f32_to_f16(hi) << 16;
#endif
  return r;
}
FA_INLINE unsigned fa_pack_bf16x2(float lo, float hi) {
  unsigned r;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  r = (unsigned)fa_f32_to_bf16(lo) | (unsigned)fa_f32_to_bf16(hi) << 16;
#endif
  return r;
}

/* ---- 16-bit, 32-bit and 16-byte accesses ---- */

FA_INLINE unsigned short fa_ldg_u16(const unsigned short *a) { return __ldg(a); }
FA_INLINE unsigned fa_ldg_u32(const unsigned *a) { return __ldg(a); }
FA_INLINE fa_u32x4 fa_ldg_u32x4(const fa_u32x4 *a) {
  const uint4 v = __ldg((const uint4 *)a);
  fa_u32x4 r;
  r.x = v.x, r.y = v.y, r.z = v.z, r.w = v.w;
  return r;
}
FA_INLINE void fa_st_u16(unsigned short *a, unsigned short v) { *a = v; }
FA_INLINE void fa_st_u32(unsigned *a, unsigned v) { *a = v; }
FA_INLINE void fa_st_u32x4(fa_u32x4 *a, fa_u32x4 v) { *a = v; }
FA_INLINE unsigned short fa_lds_u16(const unsigned short *a) { return *a; }
FA_INLINE unsigned fa_lds_u32(const unsigned *a) { return *a; }
FA_INLINE fa_u32x4 fa_lds_u32x4(const fa_u32x4 *a) { return *a; }
FA_INLINE void fa_sts_u16(unsigned short *a, unsigned short v) { *a = v; }
FA_INLINE void fa_sts_u32(unsigned *a, unsigned v) { *a = v; }
FA_INLINE void fa_sts_u32x4(fa_u32x4 *a, fa_u32x4 v) { *a = v; }

/* ---- mma.sync m16n8k8 (sm_75) and m16n8k16, f32 accumulate; d may be c ---- */

FA_INLINE void fa_mma_m16n8k8_f16(float d[4], const unsigned a[2], const unsigned b[1],
                                  const float c[4]) {
  asm volatile(
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
    "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};"
    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
    : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
/* In prelude_tile.h, shared with the emulator, which checks it. */
FA_INLINE void fa_mma_m16n8k16_f16_by_k8(float d[4], const unsigned a[4], const unsigned b[2],
                                         const float c[4]);

FA_INLINE void fa_mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2],
                                   const float c[4]) {
#if __CUDA_ARCH__ < 800
  fa_mma_m16n8k16_f16_by_k8(d, a, b, c);  /* Turing has no m16n8k16 */
#else
  asm volatile(
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
      "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}
FA_INLINE void fa_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                    const float c[4]) {
  asm volatile(
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
      "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

/* ---- mma.sync m16n8k16 with f16 accumulation (sm_80 and newer) ---- */

/* D = A B + C in f16, d and c two f16x2 registers: row g's two columns
** (d[0]) and row g + 8's (d[1]), the f32 form's d[0..1] and d[2..3]
** packed, low half first. GeForce parts (sm_86, sm_89, sm_120) run it at
** twice the rate of the f32-accumulating form. d may be c. */
FA_INLINE void fa_mma_m16n8k16_f16acc(unsigned d[2], const unsigned a[4], const unsigned b[2],
                                      const unsigned c[2]) {
  asm volatile(
    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
    "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
    : "=r"(d[0]), "=r"(d[1])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}

/* ---- Shared-memory addresses of ldmatrix and cp.async ---- */

/* A shared-memory address as these instructions take it: its 32-bit
** offset in the shared window. A kernel converts its base once
** (fa_saddr_of) and adds byte offsets to it in 32 bits; converting each
** generic pointer instead, NVRTC computes every address in 64 bits and
** truncates it, some 80 more instructions per K/V block on sm_90. */
typedef unsigned fa_saddr;
FA_INLINE fa_saddr fa_saddr_of(void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* ---- ldmatrix: lane 8j + r gives row r of matrix j ---- */

FA_INLINE void fa_ldmatrix_x1(unsigned r[1], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(r[0]) : "r"(row) : "memory");
}
FA_INLINE void fa_ldmatrix_x2(unsigned r[2], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(row) : "memory");
}
FA_INLINE void fa_ldmatrix_x4(unsigned r[4], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row) : "memory");
}
FA_INLINE void fa_ldmatrix_x1_trans(unsigned r[1], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
               : "=r"(r[0]) : "r"(row) : "memory");
}
FA_INLINE void fa_ldmatrix_x2_trans(unsigned r[2], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(row) : "memory");
}
FA_INLINE void fa_ldmatrix_x4_trans(unsigned r[4], fa_saddr row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row) : "memory");
}

/* ---- cp.async: 16 bytes, src_bytes (0..16) of them read, the rest zeros ---- */

#if __CUDA_ARCH__ >= 800
FA_INLINE void fa_cp_async_16(fa_saddr smem_dst, const void *gmem_src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_dst), "l"(gmem_src), "r"(src_bytes) : "memory");
}
FA_INLINE void fa_cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* n is an immediate in PTX: with a constant n the switch folds away. A
** larger n than 7 waits as for 7, which is stricter, so still correct. */
FA_INLINE void fa_cp_async_wait(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default:
      if (n < 0) asm volatile("cp.async.wait_group 0;" ::: "memory");
      else asm volatile("cp.async.wait_group 7;" ::: "memory");
      break;
  }
}
#else
/* Turing: a load into registers and a shared-memory store, landed when it
** returns, which is one of the orders cp.async allows (the emulator's
** early-landing schedule), so the groups have nothing left to wait for.
** Short sources are read byte by byte and zero-filled, as cp.async does. */
FA_INLINE void fa_cp_async_16(fa_saddr smem_dst, const void *gmem_src, int src_bytes) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (src_bytes >= 16) {
    v = __ldg((const uint4 *)gmem_src);
  } else {
    unsigned w[4] = {0, 0, 0, 0};
    const unsigned char *b = (const unsigned char *)gmem_src;
    for (int i = 0; i < src_bytes; i++) w[i >> 2] |= (unsigned)__ldg(b + i) << 8 * (i & 3);
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "r"(smem_dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
FA_INLINE void fa_cp_async_commit(void) { asm volatile("" ::: "memory"); }
FA_INLINE void fa_cp_async_wait(int n) { (void)n; asm volatile("" ::: "memory"); }
#endif
