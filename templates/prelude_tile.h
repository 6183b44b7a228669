/*
** prelude_tile.h
** Tile addressing for the tensor-core kernels, one text for both backends:
** it follows prelude_cuda_tc.cuh in a kernel's CUDA source and
** prelude_emu_tc.h in the emulator's, each of which defines FA_INLINE.
**
** A tile in shared memory is rows of 16-byte chunks (8 elements of 16
** bits), row_bytes apart. With an XOR swizzle, chunk c of row r sits at
** chunk c ^ fa_swizzle(r, mode), so that the 8 rows an ldmatrix reads fall
** on distinct banks; mode is a constant of the kernel:
**   8: rows of a multiple of 8 chunks, the term r & 7;
**   4: rows of 4 chunks mod 8 (head dims 32, 96, 160), (r >> 1) & 3: rows
**      r and r + 1 then start half a bank line apart;
**   0: no swizzle.
** The XOR stays inside the row either way. */

FA_INLINE int fa_swizzle(int row, int mode) {
  return mode == 8 ? row & 7 : mode == 4 ? (row >> 1) & 3 : 0;
}

/* Byte offset, within its row, of chunk `chunk` of a row whose swizzle
** term is `term`. */
FA_INLINE int fa_swizzled_chunk(int chunk, int term) { return (chunk ^ term) << 4; }

/* Byte offset of chunk `chunk` of row `row` in the tile. */
FA_INLINE int fa_tile_offset(int row, int chunk, int row_bytes, int mode) {
  return row * row_bytes + fa_swizzled_chunk(chunk, fa_swizzle(row, mode));
}

/* Byte offset, in a 16-row slab, of a lane's ldmatrix row `row` at k step
** `step` of the first swizzle period, when the lane's chunk of the step is
** `half` (0 or 1) and its row's swizzle term is `term`: the value of
** fa_tile_offset(row, 2 step + half, row_bytes, mode), written so that only
** the step varies from one step to the next. */
FA_INLINE int fa_lane_offset(int row, int half, int term, int step, int row_bytes) {
  return row * row_bytes + ((step * 32) ^ fa_swizzled_chunk(half, term));
}

/* Byte offset, in a 16-row slab, of a lane's ldmatrix row at k step `step`
** (a step spans two chunks), from lane[], its offsets at the steps of one
** swizzle period (mode / 2 steps; one without swizzle). The XOR stays
** inside a period, so each period repeats the first, 32 bytes a step on. */
FA_INLINE int fa_slab_offset(const int *lane, int step, int mode) {
  const int period = mode ? mode / 2 : 1;
  return lane[step & (period - 1)] + (step & ~(period - 1)) * 32;
}

/* m16n8k16 in fp16 as two m16n8k8, Turing's widest fp16 shape: k 0-7 take
** a[0], a[1] and b[0] of m16n8k16's fragments, k 8-15 a[2], a[3] and b[1]
** (the PTX ISA's m16n8k8 fragments are those halves). One text for both
** backends, so the emulator's m16n8k8, which lays its fragments out as the
** ISA does, checks the split (test_emu_tc). d may be c. */
FA_INLINE void fa_mma_m16n8k16_f16_by_k8(float d[4], const unsigned a[4], const unsigned b[2],
                                         const float c[4]) {
  const unsigned lo[2] = {a[0], a[1]}, hi[2] = {a[2], a[3]};
  float t[4];
  fa_mma_m16n8k8_f16(t, lo, b, c);
  fa_mma_m16n8k8_f16(d, hi, b + 1, t);
}
