/*
** prelude_emu_tc.h
** Tensor-core primitives of the CPU emulator: half-precision conversions,
** 16-bit, 32-bit and 16-byte accesses, mma.sync m16n8k16, ldmatrix and
** cp.async, with the names and fragments of prelude_cuda_tc.cuh. Pasted
** right after prelude_emu.h, whose checks, counters and warp exchange it
** uses. Layouts follow the PTX ISA, "Warp Level Matrix Multiply-Accumulate
** Instructions":
**   "Matrix Fragments for mma.m16n8k16 with floating point type" (f16/bf16 A,
**     B, and f32 C/D), with groupID = laneid >> 2, threadID_in_group =
**     laneid % 4:
**     A (16x16, four .f16x2 registers, elements a0..a7, low half first):
**       row = groupID for ai, i in {0,1,4,5}, else groupID + 8;
**       col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4.
**     B (16x8, two registers, b0..b3):
**       row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID.
**     C, D (16x8 f32, c0..c3):
**       row = groupID for i < 2, else groupID + 8;
**       col = threadID_in_group * 2 + (i & 1).
**   "Warp-level matrix load instruction: ldmatrix" (m8n8, .b16): lanes
**     0-7 (.x1), 0-15 (.x2) or 0-31 (.x4) each give the address of one 16-byte
**     row, lane 8j + r row r of matrix j; register j of lane l holds, of
**     matrix j, row l >> 2, columns 2 (l % 4) and 2 (l % 4) + 1 (low half
**     first); with .trans, column l >> 2 of rows 2 (l % 4) and 2 (l % 4) + 1.
**   "Data Movement and Conversion Instructions: cp.async", "cp.async.
**     commit_group", "cp.async.wait_group": wait_group N waits until at most
**     the N most recent committed groups are pending; copies not yet
**     committed are not waited for. A copy lands anywhere between its issue
**     and that wait: the emulator picks by the schedule (emu_abi.h,
**     FA_EMU_ASYNC_*), so a buffer read or overwritten while a copy into it
**     is in flight gives different bits under different schedules.
*/

/* Launch bounds mean nothing on the CPU. */
#define FA_TC_KERNEL_OF(name, nthreads, param) FA_KERNEL_OF(name, nthreads, param)
#define FA_TC_KERNEL(name, nthreads) FA_KERNEL(name, nthreads)

typedef unsigned short fa_f16;   /* IEEE binary16 bits */
typedef unsigned short fa_bf16;  /* bfloat16 bits */
typedef struct fa_u32x4 { _Alignas(16) unsigned x; unsigned y, z, w; } fa_u32x4;

/* ---- Values read again, as the CUDA prelude's: there they keep the
** compiler from hoisting what is derived from them; here they are the
** values themselves. ---- */

FA_INLINE int fa_tid_again(void) { return fa_tid(); }
FA_INLINE int fa_again_i32(int v) { return v; }
/* The CUDA prelude's fa_tie_u32, bit for bit: v XOR the sign bit of nonneg
** (0 for a row sum, so v; a negative one would show in the results). */
FA_INLINE unsigned fa_tie_u32(unsigned v, float nonneg) {
  unsigned b;
  memcpy(&b, &nonneg, sizeof b);
  return v ^ (b & 0x80000000u);
}

/* ---- Conversions: round to nearest even; a NaN becomes the canonical
** NaN 0x7fff, as cvt.rn.f16.f32 and cvt.rn.bf16.f32 give. ---- */

FA_INLINE unsigned fa_emu_f32_bits(float x) {
  unsigned u;
  memcpy(&u, &x, sizeof u);
  return u;
}

FA_INLINE float fa_emu_bits_f32(unsigned u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

FA_INLINE float fa_f16_to_f32(fa_f16 h) {
  const unsigned sign = (unsigned)(h & 0x8000u) << 16;
  const unsigned e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return fa_emu_bits_f32(sign | 0x7F800000u | m << 13); /* inf, NaN */
  if (e) return fa_emu_bits_f32(sign | (e + 112u) << 23 | m << 13);
  /* Zero or subnormal: m * 2^-24, exact in float. */
  const float f = (float)m * 0x1p-24f;
  return sign ? -f : f;
}

FA_INLINE fa_f16 fa_f32_to_f16(float x) {
  const unsigned u = fa_emu_f32_bits(x);
  const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  /* 65520, halfway between 65504 (odd) and 2^16, rounds to inf. */
  if (a >= 0x477FF000u) return (fa_f16)(sign | 0x7C00u);
  if (a >= 0x38800000u) {  /* normal: at least 2^-14 */
    const unsigned r = a - 0x38000000u;  /* rebias 127 -> 15 */
    return (fa_f16)(sign | (r + 0xFFFu + ((r >> 13) & 1u)) >> 13);
  }
  /* Subnormal: round a / 2^-24 to an integer; 2^-25 itself ties to 0. */
  if (a <= 0x33000000u) return (fa_f16)sign;
  const unsigned shift = 126u - (a >> 23);  /* 14..24 */
  const unsigned mant = (a & 0x7FFFFFu) | 0x800000u;
  unsigned q = mant >> shift;
  const unsigned rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (fa_f16)(sign | q);
}

FA_INLINE float fa_bf16_to_f32(fa_bf16 h) { return fa_emu_bits_f32((unsigned)h << 16); }

/* An OCP e4m3 byte as a float, exactly (0x7f and 0xff are NaN). By its
** bits, not ldexpf: every fp8 operand of a wgmma passes here. */
FA_INLINE float fa_e4m3_to_f32(unsigned char b) {
  const unsigned sign = (unsigned)(b & 0x80) << 24, e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15 && m == 7) return NAN;
  if (e) return fa_emu_bits_f32(sign | (e + 120u) << 23 | m << 20); /* 2^(e-7) x 1.m */
  return fa_emu_bits_f32(sign | fa_emu_f32_bits((float)m * 0x1p-9f)); /* m x 2^-9 */
}

FA_INLINE fa_bf16 fa_f32_to_bf16(float x) {
  const unsigned u = fa_emu_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return (fa_bf16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* lo in bits 0-15, hi in bits 16-31. */
FA_INLINE unsigned fa_pack_f16x2(float lo, float hi) {
  return (unsigned)fa_f32_to_f16(lo) | (unsigned)fa_f32_to_f16(hi) << 16;
}

FA_INLINE unsigned fa_pack_bf16x2(float lo, float hi) {
  return (unsigned)fa_f32_to_bf16(lo) | (unsigned)fa_f32_to_bf16(hi) << 16;
}

/* ---- 16-bit, 32-bit and 16-byte accesses, checked and counted ---- */

FA_EMU_MEMORY(unsigned short, u16)
FA_EMU_MEMORY(unsigned, u32)
FA_EMU_MEMORY(fa_u32x4, u32x4)
#define fa_ldg_u16(a) fa_emu_ldg_u16((a), __LINE__)
#define fa_ldg_u32(a) fa_emu_ldg_u32((a), __LINE__)
#define fa_ldg_u32x4(a) fa_emu_ldg_u32x4((a), __LINE__)
#define fa_st_u16(a, v) fa_emu_st_u16((a), (v), __LINE__)
#define fa_st_u32(a, v) fa_emu_st_u32((a), (v), __LINE__)
#define fa_st_u32x4(a, v) fa_emu_st_u32x4((a), (v), __LINE__)
#define fa_lds_u16(a) fa_emu_lds_u16((a), __LINE__)
#define fa_lds_u32(a) fa_emu_lds_u32((a), __LINE__)
#define fa_lds_u32x4(a) fa_emu_lds_u32x4((a), __LINE__)
#define fa_sts_u16(a, v) fa_emu_sts_u16((a), (v), __LINE__)
#define fa_sts_u32(a, v) fa_emu_sts_u32((a), (v), __LINE__)
#define fa_sts_u32x4(a, v) fa_emu_sts_u32x4((a), (v), __LINE__)

/* ---- mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 ---- */

/* Element i (0 or 1: low or high half) of register reg of lane src's
** fragment, as deposited in the exchange: a[0..3], then b[0..1]. A lane
** missing from a partial warp gives zeros. */
FA_INLINE double fa_emu_mma_elem(fa_emu_thread *t, unsigned char (*slots)[FA_EMU_XCHG_BYTES],
                                 int src, int reg, int i, int bf16) {
  if (src >= t->warp_size) return 0.0;
  unsigned w;
  memcpy(&w, slots[src] + 4 * reg, sizeof w);
  const unsigned short h = (unsigned short)(i ? w >> 16 : w & 0xFFFFu);
  return bf16 ? (double)fa_bf16_to_f32(h) : (double)fa_f16_to_f32(h);
}

/* The four dot products of this lane's elements of D = A B (rows g and
** g + 8, columns 2 tig and 2 tig + 1: s[2 r + n]). Each lane gathers its
** rows of A and columns of B from the fragments of the whole warp (the
** inverse of the layouts above: A(r, k) lives in lane 4 (r % 8) + (k % 8)
** / 2, register r / 8 + 2 (k / 8), half k % 2; B(k, n) in lane 4 n + (k %
** 8) / 2, register k / 8, half k % 2). Products of f16 or bf16 values are
** exact in double; the 16 of a dot product are summed in double in k
** order. */
FA_INLINE void fa_emu_mma_dots(const unsigned *a, const unsigned *b, int bf16, int line,
                               double s[4]) {
  fa_emu_thread *t = fa_emu_self;
  const unsigned mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, mine, sizeof mine, line);
  if (t->lane == 0) t->ctr->mma++;
  const int g = t->lane >> 2, tig = t->lane & 3;
  double arow[2][16], bcol[2][16];
  for (int k = 0; k < 16; k++) {
    const int q = (k & 7) >> 1, hi = k >> 3, half = k & 1;
    for (int r = 0; r < 2; r++)  /* rows g and g + 8 */
      arow[r][k] = fa_emu_mma_elem(t, slots, 4 * g + q, r + 2 * hi, half, bf16);
    for (int n = 0; n < 2; n++)  /* columns 2 tig and 2 tig + 1 */
      bcol[n][k] = fa_emu_mma_elem(t, slots, 4 * (2 * tig + n) + q, 4 + hi, half, bf16);
  }
  for (int i = 0; i < 4; i++) {
    s[i] = 0.0;
    for (int k = 0; k < 16; k++) s[i] += arow[i >> 1][k] * bcol[i & 1][k];
  }
}

/* D = A B + C: each dot product, C added, rounded once to float. d may be c. */
FA_INLINE void fa_emu_mma_m16n8k16(float *d, const unsigned *a, const unsigned *b,
                                   const float *c, int bf16, int line) {
  double s[4];
  fa_emu_mma_dots(a, b, bf16, line, s);
  for (int i = 0; i < 4; i++) d[i] = (float)(s[i] + (double)c[i]);
}
#define fa_mma_m16n8k16_f16(d, a, b, c) fa_emu_mma_m16n8k16((d), (a), (b), (c), 0, __LINE__)

/* The same with f16 accumulation (mma...f16.f16.f16.f16): c and d two
** f16x2 registers, rows g and g + 8, low half first. Each dot product,
** C added, is rounded to float and then to f16, round to nearest even,
** as once per mma; how the hardware rounds inside an f16-accumulating mma
** is not documented, so this is a model of its error, not its bits. */
FA_INLINE void fa_emu_mma_m16n8k16_h(unsigned *d, const unsigned *a, const unsigned *b,
                                     const unsigned *c, int line) {
  double s[4];
  fa_emu_mma_dots(a, b, 0, line, s);
  unsigned short h[4];
  for (int i = 0; i < 4; i++) {
    const unsigned short ci = (unsigned short)(i & 1 ? c[i >> 1] >> 16 : c[i >> 1] & 0xFFFFu);
    h[i] = fa_f32_to_f16((float)(s[i] + (double)fa_f16_to_f32(ci)));
  }
  d[0] = (unsigned)h[0] | (unsigned)h[1] << 16;
  d[1] = (unsigned)h[2] | (unsigned)h[3] << 16;
}
#define fa_mma_m16n8k16_f16acc(d, a, b, c) fa_emu_mma_m16n8k16_h((d), (a), (b), (c), __LINE__)

/* mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 (sm_75): A(r, k) in lane
** 4 (r % 8) + k / 2, register r / 8, half k % 2; B(k, n) in lane 4 n + k /
** 2, half k % 2 ("Matrix Fragments for mma.m16n8k8"); the 8 products
** summed in double in k order, C added, rounded once. d may be c. */
FA_INLINE void fa_emu_mma_m16n8k8(float *d, const unsigned *a, const unsigned *b,
                                  const float *c, int line) {
  fa_emu_thread *t = fa_emu_self;
  const unsigned mine[3] = {a[0], a[1], b[0]};
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, mine, sizeof mine, line);
  if (t->lane == 0) t->ctr->mma++;
  const int g = t->lane >> 2, tig = t->lane & 3;
  float out[4];
  for (int i = 0; i < 4; i++) {
    const int r = i >> 1, n = 2 * tig + (i & 1);
    double s = 0.0;
    for (int k = 0; k < 8; k++)
      s += fa_emu_mma_elem(t, slots, 4 * g + k / 2, r, k & 1, 0) *
           fa_emu_mma_elem(t, slots, 4 * n + k / 2, 2, k & 1, 0);
    out[i] = (float)(s + (double)c[i]);
  }
  for (int i = 0; i < 4; i++) d[i] = out[i];
}
#define fa_mma_m16n8k8_f16(d, a, b, c) fa_emu_mma_m16n8k8((d), (a), (b), (c), __LINE__)
#define fa_mma_m16n8k16_bf16(d, a, b, c) fa_emu_mma_m16n8k16((d), (a), (b), (c), 1, __LINE__)

/* ---- Shared-memory addresses of ldmatrix and cp.async ---- */

/* The CUDA prelude's 32-bit shared-window offset; here the pointer itself,
** to which kernels add byte offsets the same way. */
typedef unsigned char *fa_saddr;
FA_INLINE fa_saddr fa_saddr_of(void *p) { return (unsigned char *)p; }

/* ---- ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16 ---- */

/* The addresses travel through the exchange. The rows are read only once
** every lane has arrived, and nobody goes on before every lane has read
** (a second wait), so the load sees shared memory as it is at the
** instruction, whatever order the lanes run in. Addresses of lanes past
** 8 num are ignored, as on sm_80 and later. */
FA_INLINE void fa_emu_ldmatrix(unsigned *r, const void *row, int num, int trans, int line) {
  fa_emu_thread *t = fa_emu_self;
  if (t->lane < 8 * num) {
    fa_emu_check_shared(t, row, 16, line);
    t->ctr->smem_read += 16;
  }
  unsigned char (*slots)[FA_EMU_XCHG_BYTES] = fa_emu_exchange(t, &row, sizeof row, line);
  if (t->lane == 0) t->ctr->ldmatrix++;
  const int l = t->lane;
  unsigned out[4] = {0, 0, 0, 0};
  for (int j = 0; j < num; j++) {
    for (int h = 0; h < 2; h++) {
      const int mr = trans ? 2 * (l & 3) + h : l >> 2;  /* row of matrix j */
      const int mc = trans ? l >> 2 : 2 * (l & 3) + h;  /* column */
      const int src = 8 * j + mr;
      if (src >= t->warp_size) t->fault(t, FA_EMU_FAULT_SHARED, NULL, 16, line);
      const unsigned char *p;
      memcpy(&p, slots[src], sizeof p);
      unsigned short v;
      memcpy(&v, p + 2 * mc, sizeof v);
      out[j] |= (unsigned)v << (16 * h);
    }
  }
  t->wait(t, FA_EMU_WAIT_XCHG, line);
  for (int j = 0; j < num; j++) r[j] = out[j];
}
#define fa_ldmatrix_x1(r, row) fa_emu_ldmatrix((r), (row), 1, 0, __LINE__)
#define fa_ldmatrix_x2(r, row) fa_emu_ldmatrix((r), (row), 2, 0, __LINE__)
#define fa_ldmatrix_x4(r, row) fa_emu_ldmatrix((r), (row), 4, 0, __LINE__)
#define fa_ldmatrix_x1_trans(r, row) fa_emu_ldmatrix((r), (row), 1, 1, __LINE__)
#define fa_ldmatrix_x2_trans(r, row) fa_emu_ldmatrix((r), (row), 2, 1, __LINE__)
#define fa_ldmatrix_x4_trans(r, row) fa_emu_ldmatrix((r), (row), 4, 1, __LINE__)

/* ---- cp.async.cg.shared.global, 16 bytes, src-size form ---- */

/* A fair coin for FA_EMU_ASYNC_RANDOM: splitmix64 on the thread's seed. */
FA_INLINE int fa_emu_coin(fa_emu_thread *t) {
  unsigned long long z = (t->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (int)((z ^ (z >> 31)) >> 63);
}

/* src_bytes copied, the rest of the 16 zeroed. */
FA_INLINE void fa_emu_copy_land(const fa_emu_copy *c) {
  if (c->src_bytes > 0) memcpy(c->dst, c->src, (size_t)c->src_bytes);
  memset(c->dst + c->src_bytes, 0, (size_t)(16 - c->src_bytes));
}

/* FA_EMU_ASYNC_RANDOM: each copy in flight lands now or stays, by a coin. */
FA_INLINE void fa_emu_copies_progress(fa_emu_thread *t) {
  int kept = 0;
  for (int i = 0; i < t->ncopies; i++) {
    if (fa_emu_coin(t)) fa_emu_copy_land(&t->copies[i]);
    else t->copies[kept++] = t->copies[i];
  }
  t->ncopies = kept;
}

/* The host's hook at every yield of a thread with work in flight
** (prelude_emu_sm90.h). */
__attribute__((unused)) static void fa_emu_progress(fa_emu_thread *t, int drain);

/* Checked and counted at issue; queued, and landed (src_bytes copied, the
** rest zeroed) when the schedule says, at the latest when a wait_group
** retires its group. A src_bytes outside 0..16 faults as a global access
** of that many bytes. */
FA_INLINE void fa_emu_cp_async_16(void *dst, const void *src, int src_bytes, int line) {
  fa_emu_thread *t = fa_emu_self;
  fa_emu_check_shared(t, dst, 16, line);
  if (src_bytes < 0 || src_bytes > 16) t->fault(t, FA_EMU_FAULT_GLOBAL, src, src_bytes, line);
  if (src_bytes > 0) {
    const uintptr_t x = (uintptr_t)src;
    if (x & 15u) t->fault(t, FA_EMU_FAULT_ALIGN, src, src_bytes, line);
    int inside = 0;
    for (int i = 0; i < t->nranges && !inside; ++i)
      inside = x >= t->ranges[i].lo && x + (uintptr_t)src_bytes <= t->ranges[i].hi;
    if (!inside) t->fault(t, FA_EMU_FAULT_GLOBAL, src, src_bytes, line);
  }
  if (t->ncopies >= FA_EMU_MAX_COPIES) t->fault(t, FA_EMU_FAULT_ASYNC, dst, 16, line);
  t->ctr->gmem_read += (unsigned long long)src_bytes;
  t->ctr->smem_written += 16;
  t->ctr->cp_async++;
  fa_emu_copy *c = &t->copies[t->ncopies++];
  c->dst = (unsigned char *)dst;
  c->src = (const unsigned char *)src;
  c->src_bytes = src_bytes;
  c->group = t->group;
  if (t->async_mode == FA_EMU_ASYNC_LATE) return;
  if (t->async_mode == FA_EMU_ASYNC_EARLY || fa_emu_coin(t))
    fa_emu_copy_land(&t->copies[--t->ncopies]);
  if (t->async_mode == FA_EMU_ASYNC_RANDOM) t->progress = fa_emu_progress;
}
#define fa_cp_async_16(dst, src, n) fa_emu_cp_async_16((dst), (src), (n), __LINE__)

/* cp.async.commit_group: close the open group (even an empty one). */
FA_INLINE void fa_cp_async_commit(void) { fa_emu_self->group++; }

/* cp.async.wait_group n: land, oldest first, the copies of every committed
** group but the n most recent; the copies after the last commit stay. */
FA_INLINE void fa_emu_cp_async_wait(int n) {
  fa_emu_thread *t = fa_emu_self;
  int kept = 0;
  for (int i = 0; i < t->ncopies; i++) {
    const fa_emu_copy c = t->copies[i];
    if ((unsigned long long)c.group + (unsigned)n < (unsigned long long)t->group) {
      fa_emu_copy_land(&c);
    } else {
      t->copies[kept++] = c;
    }
  }
  t->ncopies = kept;
}
/* n must be a constant 0..7, as the immediate of the CUDA instruction. */
#define fa_cp_async_wait(n) \
  fa_emu_cp_async_wait((int)sizeof(struct { \
    _Static_assert((n) >= 0 && (n) <= 7, "fa_cp_async_wait: n must be a constant 0..7"); \
    char c; }) * 0 + (n))
