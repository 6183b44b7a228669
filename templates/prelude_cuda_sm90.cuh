/*
** prelude_cuda_sm90.cuh
** The Hopper primitives of the cuda backend as inline PTX: warpgroup MMA
** (wgmma), TMA (cp.async.bulk.tensor), mbarriers, elect.sync, setmaxnreg
** and named barriers. Pasted after prelude_cuda.cuh and prelude_cuda_tc.cuh;
** prelude_emu_sm90.h implements the same names on the CPU. Section names
** are those of the PTX ISA (8.0 and later).
**
** Everything here needs the arch-specific target sm_90a (wgmma and
** setmaxnreg exist on no other), so the whole file compiles to nothing
** elsewhere: kernels for sm_80 or sm_90 never see these names, and a
** kernel that uses them, compiled for another target, fails on the first
** undefined name.
*/
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* A kernel that loads by TMA: its parameters are __grid_constant__, so that
** &p.tmap[i] is an address in parameter space that cp.async.bulk.tensor
** reads (CUDA C++ Programming Guide, "__grid_constant__"). One CTA per SM
** at most: the kernels that use this hold most of shared memory. */
#define FA_SM90_KERNEL_OF(name, nthreads, param) \
  extern "C" __global__ void __launch_bounds__(nthreads, 1) name(const __grid_constant__ fa_params param)
#define FA_SM90_KERNEL(name, nthreads) FA_SM90_KERNEL_OF(name, nthreads, p)

/* Broadcast from lane 0, so that ptxas knows the value warp-uniform: a
** branch on it then splits the warpgroups' code, and each side is
** allocated the registers its setmaxnreg gives (not the launch bound's
** share: 128 for 512 threads), as CUTLASS's canonical_warp_group_idx. */
FA_INLINE int fa_warpgroup(void) { return __shfl_sync(0xffffffffu, fa_tid() / 128, 0); }

/* A shared-memory pointer as the instructions here take it: its 32-bit
** offset in the shared window. */
FA_INLINE unsigned fa_sm90_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* ---- Warpgroup MMA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" ---- */

/* "Matrix Descriptor Format" (wgmma): start address >> 4 in bits 0-13,
** leading byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45,
** base offset in 49-51 (0: the buffers are aligned to their swizzle's
** repeat), swizzle mode in 62-63 (1: 128B, 2: 64B, 3: 32B, 0: none). */
typedef unsigned long long fa_wgmma_desc;
FA_INLINE fa_wgmma_desc fa_wgmma_desc_make(const void *smem, unsigned lbo_bytes, unsigned sbo_bytes,
                                           int swizzle) {
  const unsigned long long mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  return (unsigned long long)((fa_sm90_saddr(smem) >> 4) & 0x3fff) |
         (unsigned long long)((lbo_bytes >> 4) & 0x3fff) << 16 |
         (unsigned long long)((sbo_bytes >> 4) & 0x3fff) << 32 | mode << 62;
}
/* The start address moved by `bytes` (a multiple of 16): the next k16 slice. */
FA_INLINE fa_wgmma_desc fa_wgmma_desc_advance(fa_wgmma_desc d, unsigned bytes) {
  return d + ((bytes >> 4) & 0x3fff);
}

/* "wgmma.fence": orders the warpgroup's register and shared-memory accesses
** before the wgmma.mma_async that follows. */
FA_INLINE void fa_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
/* "wgmma.commit_group": the wgmma.mma_async issued since the last commit become a group. */
FA_INLINE void fa_wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
/* "wgmma.wait_group": until at most n groups are pending; n a constant 0..7. */
#define fa_wgmma_wait(n) asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory")
/* The same wait, after a and b are computed. ptxas hoists a wait above
** arithmetic it does not depend on (the softmax's exponentials, which are
** to run under the P V in flight), operands or not; a warp-uniform branch
** on a and b (never taken: they are row sums, not negative) ends a basic
** block that it does not hoist the wait out of. */
#define fa_wgmma_wait_after(n, a, b)                                       \
  do {                                                                     \
    if (__any_sync(0xffffffffu, (a) < 0.f || (b) < 0.f))                   \
      asm volatile("nanosleep.u32 0;" ::: "memory");                       \
    fa_wgmma_wait(n);                                                      \
  } while (0)

/* The accumulator operands of one m64nNk16: N/2 floats, "+f" each. */
#define FA_WGD_8(d) "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])
#define FA_WGD_16(d) FA_WGD_8(d), "+f"((d)[4]), "+f"((d)[5]), "+f"((d)[6]), "+f"((d)[7])
#define FA_WGD_24(d) FA_WGD_16(d), "+f"((d)[8]), "+f"((d)[9]), "+f"((d)[10]), "+f"((d)[11])
#define FA_WGD_32(d) FA_WGD_24(d), "+f"((d)[12]), "+f"((d)[13]), "+f"((d)[14]), "+f"((d)[15])
#define FA_WGD_40(d) FA_WGD_32(d), "+f"((d)[16]), "+f"((d)[17]), "+f"((d)[18]), "+f"((d)[19])
#define FA_WGD_48(d) FA_WGD_40(d), "+f"((d)[20]), "+f"((d)[21]), "+f"((d)[22]), "+f"((d)[23])
#define FA_WGD_56(d) FA_WGD_48(d), "+f"((d)[24]), "+f"((d)[25]), "+f"((d)[26]), "+f"((d)[27])
#define FA_WGD_64(d) FA_WGD_56(d), "+f"((d)[28]), "+f"((d)[29]), "+f"((d)[30]), "+f"((d)[31])
#define FA_WGD_72(d) FA_WGD_64(d), "+f"((d)[32]), "+f"((d)[33]), "+f"((d)[34]), "+f"((d)[35])
#define FA_WGD_80(d) FA_WGD_72(d), "+f"((d)[36]), "+f"((d)[37]), "+f"((d)[38]), "+f"((d)[39])
#define FA_WGD_88(d) FA_WGD_80(d), "+f"((d)[40]), "+f"((d)[41]), "+f"((d)[42]), "+f"((d)[43])
#define FA_WGD_96(d) FA_WGD_88(d), "+f"((d)[44]), "+f"((d)[45]), "+f"((d)[46]), "+f"((d)[47])
#define FA_WGD_104(d) FA_WGD_96(d), "+f"((d)[48]), "+f"((d)[49]), "+f"((d)[50]), "+f"((d)[51])
#define FA_WGD_112(d) FA_WGD_104(d), "+f"((d)[52]), "+f"((d)[53]), "+f"((d)[54]), "+f"((d)[55])
#define FA_WGD_120(d) FA_WGD_112(d), "+f"((d)[56]), "+f"((d)[57]), "+f"((d)[58]), "+f"((d)[59])
#define FA_WGD_128(d) FA_WGD_120(d), "+f"((d)[60]), "+f"((d)[61]), "+f"((d)[62]), "+f"((d)[63])
#define FA_WGD_136(d) FA_WGD_128(d), "+f"((d)[64]), "+f"((d)[65]), "+f"((d)[66]), "+f"((d)[67])
#define FA_WGD_144(d) FA_WGD_136(d), "+f"((d)[68]), "+f"((d)[69]), "+f"((d)[70]), "+f"((d)[71])
#define FA_WGD_152(d) FA_WGD_144(d), "+f"((d)[72]), "+f"((d)[73]), "+f"((d)[74]), "+f"((d)[75])
#define FA_WGD_160(d) FA_WGD_152(d), "+f"((d)[76]), "+f"((d)[77]), "+f"((d)[78]), "+f"((d)[79])
#define FA_WGD_168(d) FA_WGD_160(d), "+f"((d)[80]), "+f"((d)[81]), "+f"((d)[82]), "+f"((d)[83])
#define FA_WGD_176(d) FA_WGD_168(d), "+f"((d)[84]), "+f"((d)[85]), "+f"((d)[86]), "+f"((d)[87])
#define FA_WGD_184(d) FA_WGD_176(d), "+f"((d)[88]), "+f"((d)[89]), "+f"((d)[90]), "+f"((d)[91])
#define FA_WGD_192(d) FA_WGD_184(d), "+f"((d)[92]), "+f"((d)[93]), "+f"((d)[94]), "+f"((d)[95])
#define FA_WGD_200(d) FA_WGD_192(d), "+f"((d)[96]), "+f"((d)[97]), "+f"((d)[98]), "+f"((d)[99])
#define FA_WGD_208(d) FA_WGD_200(d), "+f"((d)[100]), "+f"((d)[101]), "+f"((d)[102]), "+f"((d)[103])
#define FA_WGD_216(d) FA_WGD_208(d), "+f"((d)[104]), "+f"((d)[105]), "+f"((d)[106]), "+f"((d)[107])
#define FA_WGD_224(d) FA_WGD_216(d), "+f"((d)[108]), "+f"((d)[109]), "+f"((d)[110]), "+f"((d)[111])
#define FA_WGD_232(d) FA_WGD_224(d), "+f"((d)[112]), "+f"((d)[113]), "+f"((d)[114]), "+f"((d)[115])
#define FA_WGD_240(d) FA_WGD_232(d), "+f"((d)[116]), "+f"((d)[117]), "+f"((d)[118]), "+f"((d)[119])
#define FA_WGD_248(d) FA_WGD_240(d), "+f"((d)[120]), "+f"((d)[121]), "+f"((d)[122]), "+f"((d)[123])
#define FA_WGD_256(d) FA_WGD_248(d), "+f"((d)[124]), "+f"((d)[125]), "+f"((d)[126]), "+f"((d)[127])
/* Their names in the asm text of the SS form, from %3 on. */
#define FA_WGR_SS_8 "%3, %4, %5, %6"
#define FA_WGR_SS_16 FA_WGR_SS_8 ", %7, %8, %9, %10"
#define FA_WGR_SS_24 FA_WGR_SS_16 ", %11, %12, %13, %14"
#define FA_WGR_SS_32 FA_WGR_SS_24 ", %15, %16, %17, %18"
#define FA_WGR_SS_40 FA_WGR_SS_32 ", %19, %20, %21, %22"
#define FA_WGR_SS_48 FA_WGR_SS_40 ", %23, %24, %25, %26"
#define FA_WGR_SS_56 FA_WGR_SS_48 ", %27, %28, %29, %30"
#define FA_WGR_SS_64 FA_WGR_SS_56 ", %31, %32, %33, %34"
#define FA_WGR_SS_72 FA_WGR_SS_64 ", %35, %36, %37, %38"
#define FA_WGR_SS_80 FA_WGR_SS_72 ", %39, %40, %41, %42"
#define FA_WGR_SS_88 FA_WGR_SS_80 ", %43, %44, %45, %46"
#define FA_WGR_SS_96 FA_WGR_SS_88 ", %47, %48, %49, %50"
#define FA_WGR_SS_104 FA_WGR_SS_96 ", %51, %52, %53, %54"
#define FA_WGR_SS_112 FA_WGR_SS_104 ", %55, %56, %57, %58"
#define FA_WGR_SS_120 FA_WGR_SS_112 ", %59, %60, %61, %62"
#define FA_WGR_SS_128 FA_WGR_SS_120 ", %63, %64, %65, %66"
#define FA_WGR_SS_136 FA_WGR_SS_128 ", %67, %68, %69, %70"
#define FA_WGR_SS_144 FA_WGR_SS_136 ", %71, %72, %73, %74"
#define FA_WGR_SS_152 FA_WGR_SS_144 ", %75, %76, %77, %78"
#define FA_WGR_SS_160 FA_WGR_SS_152 ", %79, %80, %81, %82"
#define FA_WGR_SS_168 FA_WGR_SS_160 ", %83, %84, %85, %86"
#define FA_WGR_SS_176 FA_WGR_SS_168 ", %87, %88, %89, %90"
#define FA_WGR_SS_184 FA_WGR_SS_176 ", %91, %92, %93, %94"
#define FA_WGR_SS_192 FA_WGR_SS_184 ", %95, %96, %97, %98"
#define FA_WGR_SS_200 FA_WGR_SS_192 ", %99, %100, %101, %102"
#define FA_WGR_SS_208 FA_WGR_SS_200 ", %103, %104, %105, %106"
#define FA_WGR_SS_216 FA_WGR_SS_208 ", %107, %108, %109, %110"
#define FA_WGR_SS_224 FA_WGR_SS_216 ", %111, %112, %113, %114"
#define FA_WGR_SS_232 FA_WGR_SS_224 ", %115, %116, %117, %118"
#define FA_WGR_SS_240 FA_WGR_SS_232 ", %119, %120, %121, %122"
#define FA_WGR_SS_248 FA_WGR_SS_240 ", %123, %124, %125, %126"
#define FA_WGR_SS_256 FA_WGR_SS_248 ", %127, %128, %129, %130"
/* Their names in the asm text of the RS form, from %6 on. */
#define FA_WGR_RS_8 "%6, %7, %8, %9"
#define FA_WGR_RS_16 FA_WGR_RS_8 ", %10, %11, %12, %13"
#define FA_WGR_RS_24 FA_WGR_RS_16 ", %14, %15, %16, %17"
#define FA_WGR_RS_32 FA_WGR_RS_24 ", %18, %19, %20, %21"
#define FA_WGR_RS_40 FA_WGR_RS_32 ", %22, %23, %24, %25"
#define FA_WGR_RS_48 FA_WGR_RS_40 ", %26, %27, %28, %29"
#define FA_WGR_RS_56 FA_WGR_RS_48 ", %30, %31, %32, %33"
#define FA_WGR_RS_64 FA_WGR_RS_56 ", %34, %35, %36, %37"
#define FA_WGR_RS_72 FA_WGR_RS_64 ", %38, %39, %40, %41"
#define FA_WGR_RS_80 FA_WGR_RS_72 ", %42, %43, %44, %45"
#define FA_WGR_RS_88 FA_WGR_RS_80 ", %46, %47, %48, %49"
#define FA_WGR_RS_96 FA_WGR_RS_88 ", %50, %51, %52, %53"
#define FA_WGR_RS_104 FA_WGR_RS_96 ", %54, %55, %56, %57"
#define FA_WGR_RS_112 FA_WGR_RS_104 ", %58, %59, %60, %61"
#define FA_WGR_RS_120 FA_WGR_RS_112 ", %62, %63, %64, %65"
#define FA_WGR_RS_128 FA_WGR_RS_120 ", %66, %67, %68, %69"
#define FA_WGR_RS_136 FA_WGR_RS_128 ", %70, %71, %72, %73"
#define FA_WGR_RS_144 FA_WGR_RS_136 ", %74, %75, %76, %77"
#define FA_WGR_RS_152 FA_WGR_RS_144 ", %78, %79, %80, %81"
#define FA_WGR_RS_160 FA_WGR_RS_152 ", %82, %83, %84, %85"
#define FA_WGR_RS_168 FA_WGR_RS_160 ", %86, %87, %88, %89"
#define FA_WGR_RS_176 FA_WGR_RS_168 ", %90, %91, %92, %93"
#define FA_WGR_RS_184 FA_WGR_RS_176 ", %94, %95, %96, %97"
#define FA_WGR_RS_192 FA_WGR_RS_184 ", %98, %99, %100, %101"
#define FA_WGR_RS_200 FA_WGR_RS_192 ", %102, %103, %104, %105"
#define FA_WGR_RS_208 FA_WGR_RS_200 ", %106, %107, %108, %109"
#define FA_WGR_RS_216 FA_WGR_RS_208 ", %110, %111, %112, %113"
#define FA_WGR_RS_224 FA_WGR_RS_216 ", %114, %115, %116, %117"
#define FA_WGR_RS_232 FA_WGR_RS_224 ", %118, %119, %120, %121"
#define FA_WGR_RS_240 FA_WGR_RS_232 ", %122, %123, %124, %125"
#define FA_WGR_RS_248 FA_WGR_RS_240 ", %126, %127, %128, %129"
#define FA_WGR_RS_256 FA_WGR_RS_248 ", %130, %131, %132, %133"

#define FA_WG_STR_(x) #x
#define FA_WG_STR(x) FA_WG_STR_(x)

/* "wgmma.mma_async", A and B from descriptors: D (float d[N/2]) = A B, plus
** D when scale_d != 0. m64nNk16, f32 accumulate; N a constant 8..256 in steps
** of 8; trans_a, trans_b the imm-trans-a/b constants (0: K-major). The
** descriptors and scale-d are in-out copies so that they take the operand
** numbers %0-%2 whatever N is; D follows. */
#define FA_WGMMA_SS(N, d, desc_a, desc_b, scale_d, trans_a, trans_b, T)                      \
  do {                                                                                      \
    fa_wgmma_desc fa_wg_a_ = (desc_a), fa_wg_b_ = (desc_b);                                 \
    int fa_wg_s_ = (scale_d);                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #T "." #T " {"           \
                 FA_WGR_SS_##N "}, %0, %1, p, 1, 1, " FA_WG_STR(trans_a) ", "                \
                 FA_WG_STR(trans_b) ";\n}\n"                                                 \
                 : "+l"(fa_wg_a_), "+l"(fa_wg_b_), "+r"(fa_wg_s_), FA_WGD_##N(d)             \
                 :                                                                          \
                 : "memory");                                                               \
  } while (0)
/* The same with A from registers: unsigned a[4], the m64k16 A fragment
** (warp w holds rows 16w..16w+15 as mma.m16n8k16 holds its A), at %0-%3. */
#define FA_WGMMA_RS(N, d, a, desc_b, scale_d, trans_b, T)                                   \
  do {                                                                                      \
    unsigned fa_wg_a0_ = (a)[0], fa_wg_a1_ = (a)[1], fa_wg_a2_ = (a)[2], fa_wg_a3_ = (a)[3];  \
    fa_wgmma_desc fa_wg_b_ = (desc_b);                                                      \
    int fa_wg_s_ = (scale_d);                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #T "." #T " {"           \
                 FA_WGR_RS_##N "}, {%0, %1, %2, %3}, %4, p, 1, 1, " FA_WG_STR(trans_b)       \
                 ";\n}\n"                                                                   \
                 : "+r"(fa_wg_a0_), "+r"(fa_wg_a1_), "+r"(fa_wg_a2_), "+r"(fa_wg_a3_),        \
                   "+l"(fa_wg_b_), "+r"(fa_wg_s_), FA_WGD_##N(d)                             \
                 :                                                                          \
                 : "memory");                                                               \
  } while (0)
/* One more level, so that arguments that are macros expand before # and ##. */
#define FA_WGMMA_SS_(N, d, da, db, s, ta, tb, T) FA_WGMMA_SS(N, d, da, db, s, ta, tb, T)
#define FA_WGMMA_RS_(N, d, a, db, s, tb, T) FA_WGMMA_RS(N, d, a, db, s, tb, T)
#define fa_wgmma_ss_f16(N, d, da, db, s, ta, tb) FA_WGMMA_SS_(N, d, da, db, s, ta, tb, f16)
#define fa_wgmma_ss_bf16(N, d, da, db, s, ta, tb) FA_WGMMA_SS_(N, d, da, db, s, ta, tb, bf16)
#define fa_wgmma_rs_f16(N, d, a, db, s, tb) FA_WGMMA_RS_(N, d, a, db, s, tb, f16)
#define fa_wgmma_rs_bf16(N, d, a, db, s, tb) FA_WGMMA_RS_(N, d, a, db, s, tb, bf16)

/* The same for fp8 (OCP e4m3): m64nNk32, both operands K-major (fp8 wgmma
** takes no transpose operands), a k32 step 32 bytes of a row as a k16 step
** of 16 bits is; the RS form's A fragment is per warp mma.m16n8k32's:
** register r holds row 16 w + l/4 + 8 (r % 2), columns 4 (l % 4) + 16 (r / 2)
** and the three after, the lowest in the lowest byte. */
#define FA_WGMMA_SS8(N, d, desc_a, desc_b, scale_d, T)                                        \
  do {                                                                                      \
    fa_wgmma_desc fa_wg_a_ = (desc_a), fa_wg_b_ = (desc_b);                                 \
    int fa_wg_s_ = (scale_d);                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." #T "." #T " {"           \
                 FA_WGR_SS_##N "}, %0, %1, p, 1, 1;\n}\n"                                    \
                 : "+l"(fa_wg_a_), "+l"(fa_wg_b_), "+r"(fa_wg_s_), FA_WGD_##N(d)             \
                 :                                                                          \
                 : "memory");                                                               \
  } while (0)
#define FA_WGMMA_RS8(N, d, a, desc_b, scale_d, T)                                             \
  do {                                                                                      \
    unsigned fa_wg_a0_ = (a)[0], fa_wg_a1_ = (a)[1], fa_wg_a2_ = (a)[2], fa_wg_a3_ = (a)[3];  \
    fa_wgmma_desc fa_wg_b_ = (desc_b);                                                      \
    int fa_wg_s_ = (scale_d);                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." #T "." #T " {"           \
                 FA_WGR_RS_##N "}, {%0, %1, %2, %3}, %4, p, 1, 1;\n}\n"                      \
                 : "+r"(fa_wg_a0_), "+r"(fa_wg_a1_), "+r"(fa_wg_a2_), "+r"(fa_wg_a3_),        \
                   "+l"(fa_wg_b_), "+r"(fa_wg_s_), FA_WGD_##N(d)                             \
                 :                                                                          \
                 : "memory");                                                               \
  } while (0)
#define FA_WGMMA_SS8_(N, d, da, db, s, T) FA_WGMMA_SS8(N, d, da, db, s, T)
#define FA_WGMMA_RS8_(N, d, a, db, s, T) FA_WGMMA_RS8(N, d, a, db, s, T)
#define fa_wgmma_ss_e4m3(N, d, da, db, s) FA_WGMMA_SS8_(N, d, da, db, s, e4m3)
#define fa_wgmma_rs_e4m3(N, d, a, db, s) FA_WGMMA_RS8_(N, d, a, db, s, e4m3)

/* Four floats as e4m3 bytes, e0 in the lowest: cvt.rn.satfinite.e4m3x2.f32
** d, a, b puts a in the upper byte, b in the lower. */
FA_INLINE unsigned fa_pack_e4m3x4(float e0, float e1, float e2, float e3) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(e1), "f"(e0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(e3), "f"(e2));
  return (unsigned)lo | (unsigned)hi << 16;
}

/* A compiler fence on the N/2 accumulators (as CUTLASS's
** warpgroup_fence_operand): their reads and writes stay on their side of the
** wgmma fence, issue and wait around it, which the asm statements alone do
** not order for registers. No instruction; on the emulator nothing. */
#define FA_WGMMA_FENCE_ACC(N, d) asm volatile("" : FA_WGD_##N(d)::"memory")
#define fa_wgmma_fence_acc(N, d) FA_WGMMA_FENCE_ACC(N, d)

/* ---- mbarrier: "Parallel Synchronization and Communication Instructions: mbarrier" ---- */

/* "mbarrier.init": count arrivals complete a phase. */
FA_INLINE void fa_mbar_init(unsigned long long *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(fa_sm90_saddr(bar)), "r"(count)
               : "memory");
}
/* "mbarrier.arrive" */
FA_INLINE void fa_mbar_arrive(unsigned long long *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(fa_sm90_saddr(bar)) : "memory");
}
/* "mbarrier.arrive" with .expect_tx: arrive, and expect `bytes` more of
** transactions (complete_tx) in the current phase. */
FA_INLINE void fa_mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fa_sm90_saddr(bar)),
               "r"(bytes)
               : "memory");
}
/* "mbarrier.test_wait/mbarrier.try_wait" with .parity: until the phase of
** parity `parity` has completed. */
FA_INLINE void fa_mbar_wait(unsigned long long *bar, unsigned parity) {
  const unsigned a = fa_sm90_saddr(bar);
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(a), "r"(parity)
                 : "memory");
  } while (!done);
}
/* "Parallel Synchronization and Communication Instructions: membar/fence":
** the mbarriers' init visible to the async proxy (then fa_syncthreads). */
FA_INLINE void fa_fence_mbar_init(void) {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* The same section, fence.proxy.async: this thread's generic-proxy writes
** to shared memory visible to the async proxy (a TMA store, a wgmma). */
FA_INLINE void fa_fence_proxy_async(void) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* ---- TMA: "Data Movement and Conversion Instructions: cp.async.bulk.tensor" ---- */

/* Loads, global -> shared, tile mode; coordinates innermost first, in
** elements; completes on bar with complete_tx of the box's bytes. */
FA_INLINE void fa_tma_load_2d(void *smem, const fa_tmap *map, int c0, int c1,
                              unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               ::"r"(fa_sm90_saddr(smem)), "l"(map), "r"(c0), "r"(c1), "r"(fa_sm90_saddr(bar))
               : "memory");
}
FA_INLINE void fa_tma_load_3d(void *smem, const fa_tmap *map, int c0, int c1, int c2,
                              unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(fa_sm90_saddr(smem)), "l"(map), "r"(c0), "r"(c1), "r"(c2),
               "r"(fa_sm90_saddr(bar))
               : "memory");
}
FA_INLINE void fa_tma_load_4d(void *smem, const fa_tmap *map, int c0, int c1, int c2, int c3,
                              unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];"
               ::"r"(fa_sm90_saddr(smem)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
               "r"(fa_sm90_saddr(bar))
               : "memory");
}
/* Stores, shared -> global, into the current bulk group; elements outside
** the tensor are not written. */
FA_INLINE void fa_tma_store_2d(const fa_tmap *map, const void *smem, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(map), "r"(fa_sm90_saddr(smem)), "r"(c0), "r"(c1)
               : "memory");
}
FA_INLINE void fa_tma_store_3d(const fa_tmap *map, const void *smem, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
               " [%0, {%2, %3, %4}], [%1];"
               ::"l"(map), "r"(fa_sm90_saddr(smem)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
FA_INLINE void fa_tma_store_4d(const fa_tmap *map, const void *smem, int c0, int c1, int c2,
                               int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
               " [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(map), "r"(fa_sm90_saddr(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
/* "cp.async.bulk.commit_group" */
FA_INLINE void fa_tma_store_commit(void) { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/* "cp.async.bulk.wait_group" with .read: until at most n bulk groups still
** read their shared source; n a constant. */
#define fa_tma_store_wait(n) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(n) : "memory")

/* The swizzled byte offset of byte_offset in a box of the 32B, 64B or 128B
** mode of cuTensorMapEncodeTiled (CuTe's Swizzle<1,4,3>, <2,4,3>, <3,4,3>):
** the 16-byte chunk index (bits 4..) is xor'ed with the 128-byte row index
** (bits 7..), over 1, 2 or 3 bits. The buffer is aligned to the mode's
** repeat (1024 bytes for 128B). 0: no swizzle. */
FA_INLINE unsigned fa_swizzle_offset(unsigned byte_offset, int swizzle) {
  const unsigned bits = swizzle == 128 ? 3 : swizzle == 64 ? 2 : swizzle == 32 ? 1 : 0;
  return byte_offset ^ ((byte_offset >> 3) & (((1u << bits) - 1) << 4));
}

/* ---- stmatrix: "Warp-level matrix store instruction: stmatrix" ----
** ldmatrix's inverse (m8n8, .b16): lane 8j + r gives the address of row r
** of matrix j, and register j of lane 4r + c holds that row's columns 2c
** and 2c + 1: an mma or wgmma accumulator's layout, packed to 16 bits. */
FA_INLINE void fa_stmatrix_x4(fa_saddr row, const unsigned r[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               :: "r"(row), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

/* ---- Warp specialization ---- */

/* "elect.sync": 1 in exactly one lane of the (full) warp. */
FA_INLINE int fa_elect_one(void) {
  unsigned is;
  asm volatile("{\n.reg .b32 r;\n.reg .pred p;\nelect.sync r|p, %1;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(is)
               : "r"(0xffffffffu));
  return (int)is;
}
/* "setmaxnreg": the warpgroup's registers per thread raised or lowered to n,
** a constant 24..256, multiple of 8, the same in all the warpgroup's warps. */
#define fa_setmaxnreg_inc(n) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(n))
#define fa_setmaxnreg_dec(n) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(n))

/* "bar, barrier": named barrier `id` (1..15; 0 is fa_syncthreads') of
** nthreads, a multiple of 32. */
FA_INLINE void fa_named_bar_sync(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
FA_INLINE void fa_named_bar_arrive(int id, int nthreads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
