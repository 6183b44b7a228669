/*
** prelude_emu.h
** The device primitives of the CPU emulator: the same names as
** prelude_cuda.cuh, implemented in C11 for a kernel body compiled by the
** host compiler. Each CUDA thread is a fiber; the running one is
** fa_emu_self. Every global and shared access is bounds-checked and
** counted; barriers and warp collectives call back into the host scheduler.
** Macros pass the body's line to the checks, so a fault names its line.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FA_INLINE static inline __attribute__((unused))  /* clang warns on unused helpers */
#define FA_KERNEL_OF(name, nthreads, param) \
  __attribute__((visibility("default"))) void name(const fa_params param)
#define FA_KERNEL(name, nthreads) FA_KERNEL_OF(name, nthreads, p)
#define FA_UNROLL
#define FA_UNROLL_BY(n)

/* The running thread, from the top of the stack span it runs on
** (emu_abi.h, FA_EMU_STACK_SPAN): an and and a load, and no thread-local
** storage. The stack pointer read may be shared by the whole function:
** anywhere in it, it lies in the same span. */
FA_INLINE fa_emu_thread *fa_emu_me(void) {
  uintptr_t sp;
#if defined(__x86_64__)
  __asm__("movq %%rsp, %0" : "=r"(sp));
#else
  sp = (uintptr_t)__builtin_frame_address(0);
#endif
  return ((fa_emu_thread *const *)((sp | (FA_EMU_STACK_SPAN - 1)) + 1))[-1];
}
#define fa_emu_self (fa_emu_me())

__attribute__((visibility("default"))) int fa_emu_abi(void);
int fa_emu_abi(void) { return FA_EMU_ABI_VERSION; }

FA_INLINE void *fa_smem_base(void) { return fa_emu_self->smem; }
FA_INLINE int fa_tid(void) { return fa_emu_self->tid; }
FA_INLINE int fa_bid_x(void) { return fa_emu_self->bx; }
FA_INLINE int fa_bid_y(void) { return fa_emu_self->by; }
FA_INLINE int fa_bid_z(void) { return fa_emu_self->bz; }
FA_INLINE int fa_grid_x(void) { return fa_emu_self->gx; }

#define fa_syncthreads() fa_emu_wait(FA_EMU_WAIT_CTA, __LINE__)
#define fa_syncwarp() fa_emu_wait(FA_EMU_WAIT_WARP, __LINE__)
FA_INLINE void fa_emu_wait(int kind, int line) {
  fa_emu_thread *t = fa_emu_self;
  t->wait(t, kind, line);
}

/* ---- Checked, counted memory access ---- */

FA_INLINE void fa_emu_check_global(fa_emu_thread *t, const void *a, int n, int line) {
  const uintptr_t x = (uintptr_t)a;
  if (x & (uintptr_t)(n - 1)) t->fault(t, FA_EMU_FAULT_ALIGN, a, n, line);
  for (int i = 0; i < t->nranges; ++i)
    if (x >= t->ranges[i].lo && x + (uintptr_t)n <= t->ranges[i].hi) return;
  t->fault(t, FA_EMU_FAULT_GLOBAL, a, n, line);
}

FA_INLINE void fa_emu_check_shared(fa_emu_thread *t, const void *a, int n, int line) {
  const uintptr_t x = (uintptr_t)a;
  if (x & (uintptr_t)(n - 1)) t->fault(t, FA_EMU_FAULT_ALIGN, a, n, line);
  if (x < (uintptr_t)t->smem || x + (uintptr_t)n > (uintptr_t)t->smem_end)
    t->fault(t, FA_EMU_FAULT_SHARED, a, n, line);
}

#define FA_EMU_MEMORY(T, S) \
  FA_INLINE T fa_emu_ldg_##S(const T *a, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    fa_emu_check_global(t, a, (int)sizeof(T), line); \
    t->ctr->gmem_read += sizeof(T); \
    return *a; \
  } \
  FA_INLINE void fa_emu_st_##S(T *a, T v, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    fa_emu_check_global(t, a, (int)sizeof(T), line); \
    t->ctr->gmem_written += sizeof(T); \
    *a = v; \
  } \
  FA_INLINE T fa_emu_lds_##S(const T *a, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    fa_emu_check_shared(t, a, (int)sizeof(T), line); \
    t->ctr->smem_read += sizeof(T); \
    return *a; \
  } \
  FA_INLINE void fa_emu_sts_##S(T *a, T v, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    fa_emu_check_shared(t, a, (int)sizeof(T), line); \
    t->ctr->smem_written += sizeof(T); \
    *a = v; \
  }
FA_EMU_MEMORY(float, f32)
FA_EMU_MEMORY(double, f64)
typedef struct fa_f32x4 { _Alignas(16) float x; float y, z, w; } fa_f32x4;
typedef struct fa_f64x2 { _Alignas(16) double x; double y; } fa_f64x2;
FA_EMU_MEMORY(fa_f32x4, f32x4)
FA_EMU_MEMORY(fa_f64x2, f64x2)
#define fa_lds_f32x4(a) fa_emu_lds_f32x4((a), __LINE__)
#define fa_lds_f64x2(a) fa_emu_lds_f64x2((a), __LINE__)
typedef struct fa_f32x2 { _Alignas(8) float x; float y; } fa_f32x2;
FA_EMU_MEMORY(fa_f32x2, f32x2)
#define fa_ldg_f32x2(a) fa_emu_ldg_f32x2((a), __LINE__)
#define fa_st_f32x2(a, v) fa_emu_st_f32x2((a), (v), __LINE__)
FA_EMU_MEMORY(unsigned char, u8)
#define fa_ldg_u8(a) fa_emu_ldg_u8((a), __LINE__)
#define fa_st_u8(a, v) fa_emu_st_u8((a), (v), __LINE__)
FA_EMU_MEMORY(int, i32)
FA_EMU_MEMORY(long long, i64)
#define fa_ldg_i32(a) fa_emu_ldg_i32((a), __LINE__)
#define fa_st_i32(a, v) fa_emu_st_i32((a), (v), __LINE__)
#define fa_lds_i32(a) fa_emu_lds_i32((a), __LINE__)
#define fa_sts_i32(a, v) fa_emu_sts_i32((a), (v), __LINE__)
#define fa_lds_i64(a) fa_emu_lds_i64((a), __LINE__)
#define fa_sts_i64(a, v) fa_emu_sts_i64((a), (v), __LINE__)

/* A global atomic add: a compare-and-swap loop on the value's bits, since
** CTAs of one launch run on several OS threads at once; counted as the
** read and the write it is. */
#define FA_EMU_ATOMIC(T, U, S) \
  FA_INLINE void fa_emu_atomic_add_##S(T *a, T v, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    fa_emu_check_global(t, a, (int)sizeof(T), line); \
    t->ctr->gmem_read += sizeof(T); \
    t->ctr->gmem_written += sizeof(T); \
    t->ctr->atomics++; \
    U *bits = (U *)(void *)a, old = __atomic_load_n(bits, __ATOMIC_RELAXED), sum; \
    do { \
      T x; \
      memcpy(&x, &old, sizeof x); \
      x += v; \
      memcpy(&sum, &x, sizeof sum); \
    } while (!__atomic_compare_exchange_n(bits, &old, sum, 0, __ATOMIC_RELAXED, \
                                          __ATOMIC_RELAXED)); \
  }
FA_EMU_ATOMIC(float, uint32_t, f32)
FA_EMU_ATOMIC(double, uint64_t, f64)
#define fa_atomic_add_f32(a, v) fa_emu_atomic_add_f32((a), (v), __LINE__)
#define fa_atomic_add_f64(a, v) fa_emu_atomic_add_f64((a), (v), __LINE__)

/* ldg (read-only path) and ld are both global loads here. */
#define fa_ldg_f32(a) fa_emu_ldg_f32((a), __LINE__)
#define fa_ldg_f64(a) fa_emu_ldg_f64((a), __LINE__)
#define fa_ld_f32(a) fa_emu_ldg_f32((a), __LINE__)
#define fa_ld_f64(a) fa_emu_ldg_f64((a), __LINE__)
#define fa_st_f32(a, v) fa_emu_st_f32((a), (v), __LINE__)
#define fa_st_f64(a, v) fa_emu_st_f64((a), (v), __LINE__)
#define fa_lds_f32(a) fa_emu_lds_f32((a), __LINE__)
#define fa_lds_f64(a) fa_emu_lds_f64((a), __LINE__)
#define fa_sts_f32(a, v) fa_emu_sts_f32((a), (v), __LINE__)
#define fa_sts_f64(a, v) fa_emu_sts_f64((a), (v), __LINE__)

/* ---- Warp collectives ---- */

/* Every lane of the warp brings n bytes; returns the 32 slots, valid until
** this lane's next collective. */
FA_INLINE unsigned char (*fa_emu_exchange(fa_emu_thread *t, const void *mine, size_t n,
                                          int line))[FA_EMU_XCHG_BYTES] {
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = t->w->xchg[t->xgen & 1u];
  memcpy(slots[t->lane], mine, n);
  t->wait(t, FA_EMU_WAIT_XCHG, line);
  t->xgen++;
  return slots;
}

/* A source lane outside a partial warp reads the caller's own value. */
#define FA_EMU_SHUFFLE(T, S) \
  FA_INLINE T fa_emu_shfl_xor_##S(T v, int mask, int line) { \
    fa_emu_thread *t = fa_emu_self; \
    unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &v, sizeof v, line); \
    const int src = t->lane ^ (mask & 31); \
    T r; \
    memcpy(&r, slots[src < t->warp_size ? src : t->lane], sizeof r); \
    if (t->lane == 0) t->ctr->shuffles++; \
    return r; \
  }
FA_EMU_SHUFFLE(float, f32)
FA_EMU_SHUFFLE(double, f64)
FA_EMU_SHUFFLE(int, i32)
#define fa_shfl_xor_f32(v, m) fa_emu_shfl_xor_f32((v), (m), __LINE__)
#define fa_shfl_xor_f64(v, m) fa_emu_shfl_xor_f64((v), (m), __LINE__)
#define fa_shfl_xor_i32(v, m) fa_emu_shfl_xor_i32((v), (m), __LINE__)

/* __any_sync over the whole warp: whether any lane's p is nonzero. */
FA_INLINE int fa_emu_any_sync(int p, int line) {
  fa_emu_thread *t = fa_emu_self;
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &p, sizeof p, line);
  for (int i = 0; i < t->warp_size; i++) {
    int v;
    memcpy(&v, slots[i], sizeof v);
    if (v) return 1;
  }
  return 0;
}
#define fa_any_sync(p) fa_emu_any_sync((p), __LINE__)

/* __shfl_sync: lane src's v (the caller's own where src is outside the warp). */
FA_INLINE int fa_emu_shfl_idx_i32(int v, int src, int line) {
  fa_emu_thread *t = fa_emu_self;
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &v, sizeof v, line);
  int r;
  memcpy(&r, slots[src >= 0 && src < t->warp_size ? src : t->lane], sizeof r);
  if (t->lane == 0) t->ctr->shuffles++;
  return r;
}
#define fa_shfl_idx_i32(v, src) fa_emu_shfl_idx_i32((v), (src), __LINE__)


/* ---- Transcendentals ---- */

/* As ex2.approx.ftz.f32 on the GPU: subnormal results flush to zero. */
FA_INLINE float fa_exp2_f32(float x) {
  fa_emu_self->ctr->exp2++;
  const float y = exp2f(x);
  return y < 0x1p-126f ? 0.f : y;
}
FA_INLINE double fa_exp2_f64(double x) { fa_emu_self->ctr->exp2++; return exp2(x); }
/* As the CUDA prelude's (the exponential flushed as ex2.approx.ftz's is);
** not counted among the softmax's exponentials. */
FA_INLINE float fa_tanh_f32(float x) {
  const float e = exp2f(2.8853900817779268f * x);
  return 1.f - 2.f / (1.f + (e < 0x1p-126f ? 0.f : e));
}
FA_INLINE float fa_log2_f32(float x) { fa_emu_self->ctr->log2++; return log2f(x); }
/* The CUDA prelude's MUFU.LG2, exact here (within its few ulp); not the
** softmax's, so not counted. */
FA_INLINE float fa_log2_fast_f32(float x) { return log2f(x); }
FA_INLINE double fa_log2_f64(double x) { fa_emu_self->ctr->log2++; return log2(x); }
/* The non-matmul work normalization costs: O or P times a softmax factor. */
FA_INLINE float fa_rescale_f32(float x, float s) { fa_emu_self->ctr->rescale++; return x * s; }
FA_INLINE double fa_rescale_f64(double x, double s) { fa_emu_self->ctr->rescale++; return x * s; }
FA_INLINE float fa_neg_inf_f32(void) { return -INFINITY; }
FA_INLINE double fa_neg_inf_f64(void) { return -(double)INFINITY; }
