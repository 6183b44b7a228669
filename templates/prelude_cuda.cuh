/*
** prelude_cuda.cuh
** The device primitives of the cuda backend. A generated kernel body touches
** memory, barriers, shuffles and transcendental functions only through
** these, so that another prelude (the CPU emulator's) can run the very same
** body and count what it does. Plain C arithmetic stays plain.
*/
#define FA_INLINE __device__ __forceinline__
/* The kernel's argument block is p; a variable-length kernel (varlen.lua)
** names it pv and makes its own p, one sequence's. */
#define FA_KERNEL_OF(name, nthreads, param) \
  extern "C" __global__ void __launch_bounds__(nthreads) name(const fa_params param)
#define FA_KERNEL(name, nthreads) FA_KERNEL_OF(name, nthreads, p)
#define FA_PRAGMA(x) _Pragma(#x)
#define FA_UNROLL FA_PRAGMA(unroll)
#define FA_UNROLL_BY(n) FA_PRAGMA(unroll n)

extern __shared__ __align__(16) unsigned char fa_smem_raw[];

FA_INLINE void *fa_smem_base(void) { return fa_smem_raw; }
FA_INLINE int fa_tid(void) { return (int)threadIdx.x; }
FA_INLINE int fa_bid_x(void) { return (int)blockIdx.x; }
FA_INLINE int fa_bid_y(void) { return (int)blockIdx.y; }
FA_INLINE int fa_bid_z(void) { return (int)blockIdx.z; }
FA_INLINE int fa_grid_x(void) { return (int)gridDim.x; }
FA_INLINE void fa_syncthreads(void) { __syncthreads(); }
FA_INLINE void fa_syncwarp(void) { __syncwarp(); }

/* Read-only inputs go through the non-coherent cache; O and the workspace,
** which kv_outer kernels read back, use plain loads. */
FA_INLINE float fa_ldg_f32(const float *a) { return __ldg(a); }
FA_INLINE double fa_ldg_f64(const double *a) { return __ldg(a); }
FA_INLINE float fa_ld_f32(const float *a) { return *a; }
FA_INLINE double fa_ld_f64(const double *a) { return *a; }
FA_INLINE void fa_st_f32(float *a, float v) { *a = v; }
FA_INLINE void fa_st_f64(double *a, double v) { *a = v; }
/* Global atomic adds (red.global.add): the backward pass's dQ across CTAs. */
FA_INLINE void fa_atomic_add_f32(float *a, float v) { atomicAdd(a, v); }
FA_INLINE void fa_atomic_add_f64(double *a, double v) { atomicAdd(a, v); }

FA_INLINE float fa_lds_f32(const float *a) { return *a; }
FA_INLINE double fa_lds_f64(const double *a) { return *a; }
FA_INLINE void fa_sts_f32(float *a, float v) { *a = v; }
FA_INLINE void fa_sts_f64(double *a, double v) { *a = v; }
/* Four floats (two doubles) in one 16-byte shared-memory access: a row
** of a tile read by a thread that reuses it over several others. */
typedef struct __align__(16) fa_f32x4 { float x, y, z, w; } fa_f32x4;
typedef struct __align__(16) fa_f64x2 { double x, y; } fa_f64x2;
FA_INLINE fa_f32x4 fa_lds_f32x4(const fa_f32x4 *a) { return *a; }
/* Two floats in one 8-byte global access (fp8's descales per block, wg.cu). */
typedef struct __align__(8) fa_f32x2 { float x, y; } fa_f32x2;
FA_INLINE fa_f32x2 fa_ldg_f32x2(const fa_f32x2 *a) {
  const float2 v = __ldg((const float2 *)a);
  fa_f32x2 r;
  r.x = v.x, r.y = v.y;
  return r;
}
FA_INLINE void fa_st_f32x2(fa_f32x2 *a, fa_f32x2 v) { *a = v; }
FA_INLINE fa_f64x2 fa_lds_f64x2(const fa_f64x2 *a) { return *a; }

/* Integers: a KV cache's block table and lengths, the addresses of its
** rows in shared memory, and an error flag. */
FA_INLINE int fa_ldg_i32(const int *a) { return __ldg(a); }
FA_INLINE unsigned char fa_ldg_u8(const unsigned char *a) { return __ldg(a); }
FA_INLINE void fa_st_u8(unsigned char *a, unsigned char v) { *a = v; }
FA_INLINE void fa_st_i32(int *a, int v) { *a = v; }
FA_INLINE int fa_lds_i32(const int *a) { return *a; }
FA_INLINE void fa_sts_i32(int *a, int v) { *a = v; }
FA_INLINE long long fa_lds_i64(const long long *a) { return *a; }
FA_INLINE void fa_sts_i64(long long *a, long long v) { *a = v; }

FA_INLINE float fa_shfl_xor_f32(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
FA_INLINE double fa_shfl_xor_f64(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
FA_INLINE int fa_shfl_xor_i32(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
/* Whether any lane of the warp has p: one VOTE.ANY, the same on every lane. */
FA_INLINE int fa_any_sync(int p) { return __any_sync(0xffffffffu, p); }
FA_INLINE int fa_shfl_idx_i32(int v, int src) { return __shfl_sync(0xffffffffu, v, src); }

/* 2^x as ex2.approx.ftz.f32: MUFU.EX2 alone. exp2f is the same MUFU.EX2
** (2 ulp) with a range check and two multiplies around it that keep
** subnormal results; here they flush to zero, as they do in FlashAttention.
** A softmax term under 2^-126 of the row's maximum changes nothing. */
FA_INLINE float fa_exp2_f32(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
FA_INLINE double fa_exp2_f64(double x) { return exp2(x); }
/* tanh for a score modification (softcap): 1 - 2 / (1 + 2^(2x log2 e)), a
** MUFU.EX2 and a fast divide, within about 2e-7 of tanh (absolute, which
** is what a logit's error is measured in), where tanhf is a routine of
** some twenty instructions that made softcap 3.7 times slower in the
** model. Saturates to +-1; NaN stays NaN. */
FA_INLINE float fa_tanh_f32(float x) {
  return 1.f - __fdividef(2.f, 1.f + fa_exp2_f32(2.8853900817779268f * x));
}
FA_INLINE float fa_log2_f32(float x) { return log2f(x); }
/* MUFU.LG2 alone, where a few ulp do not matter (fp8's descales per block,
** wg.cu) and log2f is a routine with a slow path. */
FA_INLINE float fa_log2_fast_f32(float x) { return __log2f(x); }
FA_INLINE double fa_log2_f64(double x) { return log2(x); }
/* O or P times a softmax factor: a plain multiply, named so that the
** emulator can count the rescaling work each normalization does. */
FA_INLINE float fa_rescale_f32(float x, float s) { return x * s; }
FA_INLINE double fa_rescale_f64(double x, double s) { return x * s; }
FA_INLINE float fa_neg_inf_f32(void) { return __int_as_float(0xff800000); }
FA_INLINE double fa_neg_inf_f64(void) { return __longlong_as_double((long long)0xfff0000000000000ull); }
