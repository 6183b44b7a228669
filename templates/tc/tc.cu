$ -- tc.cu: FlashAttention-2 forward on tensor cores (see tc.lua for the plan).
$ -- The kernel is its main loop, FlashAttention-2's: per K/V block, copy the
$ -- next block (load_kv), S = Q K^T (gemm_qk), mask (apply_mask), online
$ -- softmax and rescale of O (softmax_rescale_o), O += P V (gemm_pv); then
$ -- the epilogue. Each step is a Lua function below that emits its code;
$ -- tile addresses come from the preludes' fa_swizzle, fa_tile_offset and
$ -- fa_slab_offset.
$ local c, P = args.cfg, args.P
$ local vl, pg = require("varlen"), require("paged")
$ local causal, eager, q_in_registers = c.causal == 1, c.norm == "eager", c.q == "reg"
$ -- A score or mask modification (mod.lua): its functions precede the kernel.
$ local mod = c.mod
$ -- The first K/V block the loop visits: 0, or under a mask the first it leaves.
$ local kv_lo = (mod and mod.mask) and "kv_first" or "0"
$ -- Deferred normalization's row sums of P: on the tensor cores (sum_mma)
$ -- or, as FlashAttention-2 does, added up by each thread over its own
$ -- columns (FADD) and across the quad once, in the epilogue.
$ local sum_mma = not eager and c.rowsum ~= "fadd"
$ -- P V by k16 steps (pv = "step"): P is built a k16 step at a time, right
$ -- before its step of P V, so that few unpacked exponentials are live at
$ -- once; see gemm_pv_steps.
$ local pv_steps_order = c.pv == "step"
$ -- The K/V copy's global addresses in the loop (kv_addr): rebuilt each
$ -- block from the head's base, or carried in two pointers per thread
$ -- from block to block, as FlashAttention-2 does (a copy of the column
$ -- path only; see load_kv_in_loop).
$ local carry = c.kv_addr == "carry" and P.column_copy
$ local T = c.dtype == "bf16" and "bf16" or "f16"
$ -- S accumulated in f16 (s_acc = "f16", fp16 inputs): the mma's f16x2
$ -- accumulators, unpacked to f32 for the softmax once S is whole.
$ local s16 = c.s_acc == "f16"
$ -- Lazy rescaling (rescale = "lazy", deferred): the running max moves only
$ -- by more than 8 in log2 units, and O's rescale is skipped while no row
$ -- of the warp moved it (one vote a part, lazy_rescale_o).
$ local lazy = c.rescale == "lazy"
$ local block_m, block_n, threads, stages = P.block_m, P.block_n, P.threads, P.stages
$ local warp_rows, m_tiles, k_steps, dim_tiles = P.warp_rows, P.m_tiles, P.k_steps, P.dim_tiles
$ local dim, padded_dim, row_bytes, swizzle = P.dim, P.padded_dim, P.row_bytes, P.swizzle
$ local parts, part_keys, n_tiles, pv_steps = P.parts, P.part_keys, P.n_tiles, P.pv_steps
$ -- The m-tiles [mt0, mt1) the steps of the loop body emit for: all of a
$ -- warp's, or one group of them at a time (P.m_groups).
$ local mt0, mt1 = 0, m_tiles
$ -- Deferred normalization sums each row of P on the tensor cores: O gets
$ -- one more n8 tile, sum_tile, that P V fills with P times a block of ones,
$ -- so that every column of it holds the row's sum of P as rounded for the
$ -- product. The alpha rescale of O rescales it with the rest.
$ local sum_tile = dim_tiles
$ local o_tiles = sum_mma and dim_tiles + 1 or dim_tiles
$ -- The score fragment for the shared softmax (softmax.lua): row hh of
$ -- m-tile mt (loops of the caller), n8 tile n, a quad per row.
$ local sm = require("softmax")
$ local F = { acc = "float", fn = "f32", lanes = { 1, 2 }, col = "n", cols = n_tiles,
$             m = "m_i[mt][hh]", l = "l_i[mt][hh]", sum = "l",
$             score = function(e) return "s[mt][n][2 * hh" .. (e == "0" and "" or " + " .. e) .. "]" end }
/* ${args.entry}
** fp32 accumulation, ${c.norm} normalization, ${c.layout} shared memory, Q in ${c.q},
** ${stages} K/V stage(s); tile ${block_m}x${block_n}, ${c.warps} warps of ${warp_rows} rows (${m_tiles} m16 tile(s) each); head dim ${dim}.
$ if c.q_share == 1 then
** Q shares its shared memory with K/V.
$ end
$ if P.dim_v ~= dim then
** V's and O's head dim ${P.dim_v}.
$ end
$ if math.max(dim, P.dim_v) < padded_dim then
** The head dim is padded to ${padded_dim}.
$ elseif math.min(dim, P.dim_v) < padded_dim then
** The smaller head dim is padded to ${padded_dim}.
$ end
** S = Q K^T and O += P V with mma.sync m16n8k16; P stays in registers.
$ if parts > 1 then
** Each block's keys go through in ${parts} parts of ${part_keys}.
$ end
$ if P.m_groups > 1 then
** A warp's m-tiles go through each block in ${P.m_groups} groups of ${P.group_tiles}.
$ end
*/
$ -- Shared memory is addressed as sm + a 32-bit byte offset, and ldmatrix
$ -- and cp.async take ss + such an offset (ss = fa_saddr_of(sm)): the
$ -- offsets stay 32-bit integers in registers, never 64-bit pointers.
$
$ -- Copy `rows` rows of a (seq, cols) matrix, from global row `row0`, into
$ -- the tile at byte offset `tile`. Chunks past its head dim `cols` (dim,
$ -- or V's dim_v) are zeros, and
$ -- so are the rows at or past `limit` when check_rows (otherwise every row
$ -- exists). Column copies: each thread copies chunk column copy_chunk of
$ -- rows copy_row + pass_rows i, in each 128-byte span of a row (chunk
$ -- copy_chunk + 8 sp; one span a row below d128), from the row's one global
$ -- address (thread_ptr, when given: kv_addr=carry). Otherwise every thread
$ -- takes chunks e = tid + threads i.
$ local function copy_tile(tile, src, stride, row0, limit, rows, check_rows, thread_ptr, cols)
$   local dim = cols or dim
$   if P.column_copy then
$     local pass_rows, span = P.pass_rows, P.copy_chunks
{
$     if thread_ptr then
  const unsigned short *gp = ${thread_ptr};
$     else
  const unsigned short *gp = ${src} + (long long)(${row0} + copy_row) * ${stride} + copy_chunk * 8;
$     end
  FA_UNROLL
  for (int i = 0; i < ${(rows + pass_rows - 1) // pass_rows}; ++i) {
$     if rows % pass_rows ~= 0 then
    if (copy_row + i * ${pass_rows} < ${rows}) {
$     else
    {
$     end
    FA_UNROLL
    for (int sp = 0; sp < ${P.copy_spans}; ++sp) {
$     if check_rows and dim < padded_dim then
      const int bytes = ${row0} + copy_row + i * ${pass_rows} < ${limit} && copy_chunk + sp * ${span} < ${dim // 8} ? 16 : 0;
$     elseif check_rows then
      const int bytes = ${row0} + copy_row + i * ${pass_rows} < ${limit} ? 16 : 0;
$     elseif dim < padded_dim then
      const int bytes = copy_chunk + sp * ${span} < ${dim // 8} ? 16 : 0;
$     else
      const int bytes = 16;
$     end
$     if swizzle ~= 0 and pass_rows % 8 ~= 0 then
      /* passes of fewer than 8 rows: each row its own swizzle */
      fa_cp_async_16(ss + (${tile} + fa_tile_offset(copy_row + i * ${pass_rows}, copy_chunk + sp * ${span}, ${row_bytes}, ${swizzle})), gp + sp * ${8 * span}, bytes);
$     else
$       if P.span_xor then
      fa_cp_async_16(ss + (${tile} + (copy_offset ^ sp * ${16 * span}) + i * ${pass_rows * row_bytes}), gp + sp * ${8 * span}, bytes);
$       else
      fa_cp_async_16(ss + (${tile} + copy_offset + i * ${pass_rows * row_bytes} + sp * ${16 * span}), gp + sp * ${8 * span}, bytes);
$       end
$     end
    }
    }
    gp += (long long)${pass_rows} * ${stride};
  }
}
$   else
$     local total = rows * P.row_chunks
FA_UNROLL
for (int i = 0; i < ${(total + threads - 1) // threads}; ++i) {
  const int e = tid + i * ${threads};
$     if total % threads ~= 0 then
  if (e < ${total}) {
$     else
  {
$     end
    const int r = (int)((unsigned)e / ${P.row_chunks}u), cc = e - r * ${P.row_chunks};
    const int gr = ${row0} + r;
    const int to = ${tile} + fa_tile_offset(r, cc, ${row_bytes}, ${swizzle});
$     if P.async_copy then
$       if check_rows and dim < padded_dim then
    const int bytes = gr < ${limit} && cc < ${dim // 8} ? 16 : 0;
$       elseif check_rows then
    const int bytes = gr < ${limit} ? 16 : 0;
$       elseif dim < padded_dim then
    const int bytes = cc < ${dim // 8} ? 16 : 0;
$       else
    const int bytes = 16;
$       end
    fa_cp_async_16(ss + to, bytes ? (const void *)(${src} + gr * ${stride} + cc * 8) : (const void *)${src}, bytes);
$     else
    unsigned w[4] = {0u, 0u, 0u, 0u};
$       if check_rows then
    if (gr < ${limit}) {
$       else
    {
$       end
      FA_UNROLL
      for (int t = 0; t < 8; ++t)
        if (cc * 8 + t < ${dim}) w[t >> 1] |= (unsigned)fa_ldg_u16(${src} + gr * ${stride} + cc * 8 + t) << (16 * (t & 1));
    }
    fa_u32x4 v;
    v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];
    fa_sts_u32x4((fa_u32x4 *)(sm + to), v);
$     end
  }
}
$   end
$ end
$
$ -- K/V in a KV cache (paged.lua): the block's K and V rows into the
$ -- tiles at kst and vst, zeros for a position not read (past seq_k when
$ -- check_rows, or on a page outside the pool). The 8 (or copy_chunks)
$ -- threads of a row would each look its page up; instead lane j of a
$ -- warp looks up row j of the warp's rows (row j % rw of pass j / rw,
$ -- paged_rows) and leaves its offsets (8 bytes) in the warp's slots of
$ -- shared memory (P.paged_offset), where each copy reads its row's: one lookup
$ -- per row, not one per chunk. (Not by shuffles: after the causal mask's
$ -- warp-uniform branches ptxas cannot prove the warp converged and
$ -- moves them out of line.) In the main loop (ahead) the copy before has
$ -- written this block's slots; this one, once it has read them, writes
$ -- the next block's from the pages in kv_page and looks up the pages of
$ -- the block after: neither the table's latency nor the slots' round
$ -- trip stands in front of a copy. Column copies only (paged.fits).
$ local paged_rw = P.column_copy and 32 // P.copy_chunks
$ local paged_passes = (block_n + P.pass_rows - 1) // P.pass_rows
$ local paged_sets = P.column_copy and (paged_rw * paged_passes + 31) // 32
$ local function paged_rows()
const int plane = (copy_row * ${P.copy_chunks} + copy_chunk) & 31, wrow = copy_row - plane / ${P.copy_chunks};  /* lane; the warp's first row */
$ end
$ local function paged_row(t)
const int j = plane + ${32 * t}, row = wrow + j % ${paged_rw} + j / ${paged_rw} * ${P.pass_rows};
$ end
$ local function paged_in(extra)
$   return string.format("j < %d && row < %d", paged_rw * paged_passes, block_n) .. (extra or "")
$ end
$ -- The offsets of block's rows (block: a C expression) into this warp's
$ -- slots, from their pages: looked up now, or (page) given per set.
$ local function paged_write(block, in_extra, head, page)
$   for t = 0, paged_sets - 1 do
  {
    $ paged_row(t)
    ${pg.locate(block .. " * " .. block_n .. " + row", paged_in(in_extra))}
    ${pg.offsets(page and page(t) or pg.lookup(), head, 2)}
    fa_sts_i64(pofs + j, (long long)((unsigned long long)vo << 32 | ko));
  }
$   end
$ end
$ -- The pages of block's rows into kv_page.
$ local function paged_lookup(block, in_extra)
$   for t = 0, paged_sets - 1 do
  {
    $ paged_row(t)
    ${pg.locate(block .. " * " .. block_n .. " + row", paged_in(in_extra))}
    kv_page[${t}] = ${pg.lookup()};
  }
$   end
$ end
$ -- This warp's slots.
$ local function paged_slots()
  $ paged_rows()
  long long *const pofs = (long long *)(sm + ${P.paged_offset}) + ((copy_row * ${P.copy_chunks} + copy_chunk) >> 5) * ${32 * paged_sets};
$ end
$ local function copy_kv_paged(check_rows, head, ahead)
$   local pass_rows, span, cc = P.pass_rows, P.copy_chunks, P.copy_chunks
{
  $ paged_slots()
$   if not ahead then
  $ paged_write("block", check_rows and " && pkey < p.seq_k", head)
  fa_syncwarp();  /* the slots are written */
$   end
  /* every row's offsets first, then the copies: ptxas keeps the copies,
  ** which write shared memory, behind each read before them */
  long long kv[${paged_passes}];
  FA_UNROLL
  for (int i = 0; i < ${paged_passes}; ++i) kv[i] = fa_lds_i64(pofs + i * ${paged_rw} + plane / ${cc});
  fa_syncwarp();  /* every lane has read the slots: they may take the next block's */
  /* this thread's chunk column of K and V */
  const unsigned char *const kc = (const unsigned char *)p.k + copy_chunk * 16;
  const unsigned char *const vc = (const unsigned char *)p.v + copy_chunk * 16;
  FA_UNROLL
  for (int i = 0; i < ${paged_passes}; ++i) {
    const unsigned ko = (unsigned)kv[i], vo = (unsigned)((unsigned long long)kv[i] >> 32);
$   if block_n % pass_rows ~= 0 then
    if (copy_row + i * ${pass_rows} < ${block_n}) {
$   else
    {
$   end
      /* the row's chunks; a row not read copies zeros from the tensor's base
      ** (K's mark says for V: paged.offsets) */
      const int kin = ko != 0xffffffffu, vin = kin;
      const unsigned char *const kr = (const unsigned char *)((const fa_u32x4 *)kc + (kin ? ko : 0u));
      const unsigned char *const vr = (const unsigned char *)((const fa_u32x4 *)vc + (kin ? vo : 0u));
      FA_UNROLL
      for (int sp = 0; sp < ${P.copy_spans}; ++sp) {
$   if swizzle ~= 0 and pass_rows % 8 ~= 0 then
        const int to = fa_tile_offset(copy_row + i * ${pass_rows}, copy_chunk + sp * ${span}, ${row_bytes}, ${swizzle});
$   else
$     if P.span_xor then
        const int to = (copy_offset ^ sp * ${16 * span}) + i * ${pass_rows * row_bytes};
$     else
        const int to = copy_offset + i * ${pass_rows * row_bytes} + sp * ${16 * span};
$     end
$   end
$   for _, t in ipairs({ { "k", "kst", dim }, { "v", "vst", P.dim_v } }) do
$     if t[3] < padded_dim then
        fa_cp_async_16(ss + (${t[2]} + to), ${t[1]}r + sp * ${16 * span}, ${t[1]}in && copy_chunk + sp * ${span} < ${t[3] // 8} ? 16 : 0);
$     else
        fa_cp_async_16(ss + (${t[2]} + to), ${t[1]}r + sp * ${16 * span}, ${t[1]}in ? 16 : 0);
$     end
$   end
      }
    }
  }
$   if ahead then
  /* then the next block's offsets, from the pages the copy before looked up;
  ** the pages of the block after it */
  $ paged_write("(block - 1)", " && block > 0", head, function(t) return "kv_page[" .. t .. "]" end)
  $ paged_lookup("(block - 2)", " && block > 1")
$   end
}
$ end
$
$ -- Column copies: this thread's chunk column and first row, from the
$ -- thread index `t`.
$ local function copy_lanes(t)
$   if P.column_copy then
/* Tile copies: this thread's chunk column and first row. */
const int copy_row = (int)((unsigned)(${t}) / ${P.copy_chunks}u), copy_chunk = (int)((unsigned)(${t}) % ${P.copy_chunks}u);
const int copy_offset = fa_tile_offset(copy_row, copy_chunk, ${row_bytes}, ${swizzle});
$   end
$ end
$
$ -- Q rows [q0, q0 + block_m) into the Q tile.
$ local function load_q()
/* Q rows [q0, q0 + ${block_m}) */
$ copy_tile(P.q_offset, "qg", "p.q_sn", "q0", "p.seq_q", block_m, true)
$ end
$
$ -- K/V block `block` (a C variable in the caller's block, which this one
$ -- declares into) into the stage at byte offset `stage`; only the last
$ -- block, the first one copied, can have rows past seq_k.
$ local function load_kv(stage, check_rows, head, ahead)
const int kst = ${P.kv_offset} + ${stage}, vst = kst + ${block_n * row_bytes};
const int k0 = block * ${block_n};
$ if c.paged == 1 then
$   copy_kv_paged(check_rows, head or "hk", ahead)
$ else
$   copy_tile("kst", "kg", "p.k_sn", "k0", "p.seq_k", block_n, check_rows)
$   copy_tile("vst", "vg", "p.v_sn", "k0", "p.seq_k", block_n, check_rows, nil, P.dim_v)
$ end
$ end
$
$ -- load_kv inside the main loop. kv_addr=rebuild: the K/V heads'
$ -- addresses and this thread's copy lanes rebuilt here, from the K/V head
$ -- and a fresh read of the thread index, so that none of them is live
$ -- through the loop (at FlashAttention-2's tiles the loop runs at the
$ -- 255-register limit). kv_addr=carry: two 64-bit pointers per thread
$ -- live through the loop, stepped down a block at a time; a row pass
$ -- then costs one 64-bit add, and the rebuild none.
$ local function load_kv_in_loop(stage)
$ if carry then
/* block's K and V from this thread's pointers, which then step to the block below */
(void)block;
const int kst = ${P.kv_offset} + ${stage}, vst = kst + ${block_n * row_bytes};
$ copy_tile("kst", nil, "p.k_sn", nil, nil, block_n, false, "kcp")
$ copy_tile("vst", nil, "p.v_sn", nil, nil, block_n, false, "vcp", P.dim_v)
kcp -= (long long)${block_n} * p.k_sn;
vcp -= (long long)${block_n} * p.v_sn;
$   return
$ end
const int hk_again = fa_again_i32(hk);
$ local kept = c.varlen == 1 and vl.kept_key(P.varlen_offset)
$ if c.paged ~= 1 then
const unsigned short *const kg = (const unsigned short *)p.k + fa_bid_z() * p.k_sb + hk_again * p.k_sh${vl.row(c, "k", kept)};
const unsigned short *const vg = (const unsigned short *)p.v + fa_bid_z() * p.v_sb + hk_again * p.v_sh${vl.row(c, "v", kept)};
$ end
$ -- With P V by k16 steps fewer registers are live at the peak, and ptxas
$ -- (CUDA 13) keeps the copy lanes of the thread index as computed once
$ -- (or rebuilds them as it sees fit) with fewer instructions per block.
$ copy_lanes(pv_steps_order and "tid" or "fa_tid_again()")
$ load_kv(stage, false, "hk_again", true)
$ end
$
$ local function q_to_registers()
FA_UNROLL
for (int mt = 0; mt < ${m_tiles}; ++mt) {
  FA_UNROLL
  for (int kk = 0; kk < ${k_steps}; ++kk) fa_ldmatrix_x4(qf[mt][kk], ss + (q_warp + mt * ${16 * row_bytes} + fa_slab_offset(q_lane, kk, ${swizzle})));
}
$ end
$
$ -- Wait for this iteration's block; with two stages or more, start the
$ -- copy of the block stages - 1 iterations ahead into the stage freed by
$ -- the previous iteration.
$ local function wait_and_prefetch()
$   if stages == 1 then
fa_cp_async_wait(0); /* block kv has landed, for this thread */
fa_syncthreads();    /* for every thread */
$   else
fa_cp_async_wait(${stages - 2}); /* block kv has landed, for this thread */
fa_syncthreads();           /* for every thread; and the previous iteration's stage is free */
{
  const int next_stage = stage + ${(stages - 1) * P.stage_bytes} < ${stages * P.stage_bytes} ? stage + ${(stages - 1) * P.stage_bytes} : stage - ${P.stage_bytes};
$ if kv_lo == "0" then
  if (kv >= ${stages - 1}) {
$ else
  if (kv >= ${kv_lo} + ${stages - 1}) {
$ end
    const int block = kv - ${stages - 1};
    $ load_kv_in_loop("next_stage")
  }
  fa_cp_async_commit();
}
$   end
$ end
$
$ -- S = Q K^T for this warp's rows and the part's keys.
$ local function gemm_qk()
$   local acc, zero, mma = "s", "0.f", "fa_mma_m16n8k16_" .. T
/* S = Q K^T: this warp's ${warp_rows} rows x ${part_keys} keys. */
float s[${m_tiles}][${n_tiles}][4];
$   if s16 then
$     acc, zero, mma = "sh", "0u", "fa_mma_m16n8k16_f16acc"
/* accumulated in f16: rows g and g + 8, two columns to a register */
unsigned sh[${m_tiles}][${n_tiles}][2];
$   end
FA_UNROLL
for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
  FA_UNROLL
  for (int n = 0; n < ${n_tiles}; ++n) {
    FA_UNROLL
    for (int i = 0; i < ${s16 and 2 or 4}; ++i) ${acc}[mt][n][i] = ${zero};
  }
}
FA_UNROLL
for (int kk = 0; kk < ${k_steps}; ++kk) {
$   if not q_in_registers then
  unsigned qa[${m_tiles}][4];
  FA_UNROLL
  for (int mt = ${mt0}; mt < ${mt1}; ++mt) fa_ldmatrix_x4(qa[mt], ss + (q_warp + mt * ${16 * row_bytes} + fa_slab_offset(q_lane, kk, ${swizzle})));
$   end
  FA_UNROLL
  for (int n2 = 0; n2 < ${n_tiles // 2}; ++n2) {
    unsigned kb[4];
    fa_ldmatrix_x4(kb, ss + (k_part + n2 * ${16 * row_bytes} + fa_slab_offset(q_lane, kk, ${swizzle}) + k_delta));
    FA_UNROLL
    for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
$   local qa = q_in_registers and "qf[mt][kk]" or "qa[mt]"
      ${mma}(${acc}[mt][2 * n2], ${qa}, kb, ${acc}[mt][2 * n2]);
      ${mma}(${acc}[mt][2 * n2 + 1], ${qa}, kb + 2, ${acc}[mt][2 * n2 + 1]);
    }
  }
}
$   if s16 then
FA_UNROLL
for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
  FA_UNROLL
  for (int n = 0; n < ${n_tiles}; ++n) {
    FA_UNROLL
    for (int i = 0; i < 4; ++i)
      s[mt][n][i] = fa_f16_to_f32((fa_f16)(i & 1 ? sh[mt][n][i >> 1] >> 16 : sh[mt][n][i >> 1] & 0xFFFFu));
  }
}
$   end
$ end
$
$ -- -inf for the keys past seq_k and, causal, the keys a row must not see;
$ -- only in the parts that reach past either.
$ local function apply_mask()
$   local M = { causal = causal, key0 = "key0", keys = part_keys, last_row = "q0 + warp * " .. warp_rows,
$               rows = { { "mt", mt0, mt1 }, { "hh", 0, 2 } }, vis = "vis0 + mt * 16 + 8 * hh",
$               col0 = "key0 + 2 * tig" }
$   if mod and mod.mask then
$     M.mod, M.row = true, "q0 + warp * " .. warp_rows .. " + mt * 16 + 8 * hh + g"
$     M.mod_class = string.format("fa_mod_block(b, h, q0 + warp * %d, q0 + warp * %d + %d, key0, key0 + %d, "
$                                 .. "p.seq_q, p.seq_k, p.heads)", warp_rows, warp_rows, warp_rows - 1, part_keys - 1)
$   end
${sm.mask(F, M)}
$ end
$
$ -- The modification's score part, on every score of the part.
$ local function apply_score_mod()
$   if mod and mod.score then
$     local M = { rows = { { "mt", mt0, mt1 }, { "hh", 0, 2 } }, col0 = "key0 + 2 * tig",
$                 row = "q0 + warp * " .. warp_rows .. " + mt * 16 + 8 * hh + g" }
${sm.modify(F, M)}
$   end
$ end
$
$ -- Row hh of m-tile mt (a C loop's variables in the caller): its max over
$ -- the part's scores and the quad (mx), the running max m_i before (mo)
$ -- and after (mn), mu = mn in log2 units (0 for a row with no key yet),
$ -- and alpha, O's rescale.
$ local function row_max()
${sm.row_max(F, lazy)}
$ end
$
$ -- O's tiles of row hh of m-tile mt times factor (alpha).
$ local function rescale_o(factor)
    FA_UNROLL
    for (int n = 0; n < ${o_tiles}; ++n) {
      o[mt][n][2 * hh] = fa_rescale_f32(o[mt][n][2 * hh], ${factor});
      o[mt][n][2 * hh + 1] = fa_rescale_f32(o[mt][n][2 * hh + 1], ${factor});
    }
$ end
$
$ -- Lazy rescaling: the rows' alphas kept (alpha_r, and moved: whether
$ -- any is not 1), then one vote of the warp, after the rows' loop, for
$ -- all of O (lazy_rescale_o): one branch a part, which the warp jumps
$ -- over while no row of it moved its max.
$ local function lazy_alphas()
/* lazily: every row's alpha, then one vote of the warp for all of O */
float alpha_r[${m_tiles}][2];
int moved = 0;
$ end
$ local function lazy_keep()
    alpha_r[mt][hh] = alpha;
    moved |= alpha != 1.f;
$ end
$ local function lazy_rescale_o()
if (fa_any_sync(moved)) {
  FA_UNROLL
  for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      $ rescale_o("alpha_r[mt][hh]")
    }
  }
}
$ end
$
$ -- The online softmax of the part's scores into P, packed in 16 bits, and
$ -- O rescaled: eager (FlashAttention-1) normalizes O and P at every step,
$ -- deferred (FlashAttention-2) once in the epilogue.
$ local function softmax_rescale_o()
/* Online softmax, in log2 units; each row is spread over the 4 lanes of a
** quad. P leaves it packed in 16 bits, two columns to a register, as the
** P V product takes it: pp[mt][n][hh] holds row g + 8 hh, columns
** 8 n + 2 tig and + 1. */
unsigned pp[${m_tiles}][${n_tiles}][2];
$   if lazy then
$     lazy_alphas()
$   end
FA_UNROLL
for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    $ row_max()
$   if eager then
    float rs = 0.f;
$   elseif not sum_mma then
    float rs = l_i[mt][hh] * alpha; /* this thread's part of l, rescaled, then this part's columns */
$   end
    FA_UNROLL
    for (int n = 0; n < ${n_tiles}; ++n) {
      const float x0 = fa_exp2_f32(s[mt][n][2 * hh] * sl2 - mu);
      const float x1 = fa_exp2_f32(s[mt][n][2 * hh + 1] * sl2 - mu);
$   if eager then
      rs += x0 + x1;
      s[mt][n][2 * hh] = x0;
      s[mt][n][2 * hh + 1] = x1;
$   else
$     if not sum_mma then
      rs += x0 + x1;
$     end
      pp[mt][n][hh] = fa_pack_${T}x2(x0, x1);
$   end
    }
$   if eager then
    /* eager (FlashAttention-1): O = O * l_old*alpha/l_new + P V / l_new */
    ${sm.lane_reduce(F, "rs", "sum")}
    ${sm.eager_factors(F)}
    FA_UNROLL
    for (int n = 0; n < ${dim_tiles}; ++n) {
      o[mt][n][2 * hh] = fa_rescale_f32(o[mt][n][2 * hh], fo);
      o[mt][n][2 * hh + 1] = fa_rescale_f32(o[mt][n][2 * hh + 1], fo);
    }
    FA_UNROLL
    for (int n = 0; n < ${n_tiles}; ++n)
      pp[mt][n][hh] = fa_pack_${T}x2(fa_rescale_f32(s[mt][n][2 * hh], inv), fa_rescale_f32(s[mt][n][2 * hh + 1], inv));
    l_i[mt][hh] = ln;
$   else
$     if sum_mma then
    /* deferred (FlashAttention-2): O = O * alpha + P V, and l with it (sum_tile) */
$     else
    /* deferred (FlashAttention-2): O = O * alpha + P V */
    l_i[mt][hh] = rs;
$     end
$     if lazy then
    $ lazy_keep()
$     else
    $ rescale_o("alpha")
$     end
$   end
    m_i[mt][hh] = mn;
  }
}
$   if lazy then
$     lazy_rescale_o()
$   end
$ end
$
$ -- k16 step kn of O += P V (a C loop variable in the caller), from the
$ -- step's A fragments pa[mt]: V by ldmatrix .trans, and with sum_mma the
$ -- row sums (P times the block of ones) into sum_tile.
$ local function pv_product()
FA_UNROLL
for (int d2 = 0; d2 < ${dim_tiles // 2}; ++d2) {
  unsigned vb[4];
  fa_ldmatrix_x4_trans(vb, ss + (v_part + kn * ${16 * row_bytes} + fa_slab_offset(q_lane, d2, ${swizzle})));
  FA_UNROLL
  for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
    fa_mma_m16n8k16_${T}(o[mt][2 * d2], pa[mt], vb, o[mt][2 * d2]);
    fa_mma_m16n8k16_${T}(o[mt][2 * d2 + 1], pa[mt], vb + 2, o[mt][2 * d2 + 1]);
  }
}
$ if sum_mma then
FA_UNROLL
for (int mt = ${mt0}; mt < ${mt1}; ++mt) fa_mma_m16n8k16_${T}(o[mt][${sum_tile}], pa[mt], ones, o[mt][${sum_tile}]);
$ end
$ end
$
$ -- P V by k16 steps (pv = "step", deferred normalization): first the
$ -- rows' maxima and O's rescale (softmax_stats), then per k16 step of P V
$ -- the exponentials of its 16 keys, packed into the A fragment, and that
$ -- step's product (gemm_pv_steps). Each exponential dies in its step: in
$ -- FlashAttention-2's order all of a block's are computed before the
$ -- first product and, with FADD row sums, held until ptxas schedules the
$ -- sums, which at its tile made it move and spill registers.
$ local function softmax_stats()
/* Online softmax, in log2 units; each row is spread over the 4 lanes of a
** quad. The rows' maxima, then O (and l) rescaled by alpha: deferred
** normalization, O = O * alpha + P V, divided by l once in the epilogue. */
float mu_r[${m_tiles}][2];
$   if lazy then
$     lazy_alphas()
$   end
FA_UNROLL
for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    $ row_max()
    mu_r[mt][hh] = mu;
$   if not sum_mma then
    l_i[mt][hh] *= alpha;
$   end
$   if lazy then
    $ lazy_keep()
$   else
    $ rescale_o("alpha")
$   end
    m_i[mt][hh] = mn;
  }
}
$   if lazy then
$     lazy_rescale_o()
$   end
$ end
$
$ local function gemm_pv_steps()
/* P V a k16 step at a time: the step's P, packed from its exponentials (A
** fragment registers 0 1 rows g and g + 8 of its first n8 tile, 2 3 of its
** second), then its product with V (ldmatrix .trans). */
FA_UNROLL
for (int kn = 0; kn < ${pv_steps}; ++kn) {
  unsigned pa[${m_tiles}][4];
  FA_UNROLL
  for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      float x[4];
      FA_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int n = 2 * kn + j;
        x[2 * j] = fa_exp2_f32(s[mt][n][2 * hh] * sl2 - mu_r[mt][hh]);
        x[2 * j + 1] = fa_exp2_f32(s[mt][n][2 * hh + 1] * sl2 - mu_r[mt][hh]);
        pa[mt][2 * j + hh] = fa_pack_${T}x2(x[2 * j], x[2 * j + 1]);
      }
$   if not sum_mma then
      l_i[mt][hh] += (x[0] + x[1]) + (x[2] + x[3]);
      /* the step's product waits for the row's sum: ptxas adds it up before
      ** the product instead of holding the exponentials through it */
      pa[mt][hh] = fa_tie_u32(pa[mt][hh], l_i[mt][hh]);
$   end
    }
  }
  $ pv_product()
}
$ end
$
$ -- O += P V, P straight from the registers of the softmax.
$ local function gemm_pv()
/* O += P V: P from the S fragments (n8 tiles 2k and 2k + 1 make the A
** fragment of k step k: a0 a1 rows g and g + 8 of the first, a2 a3 of the
** second), V by ldmatrix .trans. */
FA_UNROLL
for (int kn = 0; kn < ${pv_steps}; ++kn) {
  unsigned pa[${m_tiles}][4];
  FA_UNROLL
  for (int mt = ${mt0}; mt < ${mt1}; ++mt) {
    pa[mt][0] = pp[mt][2 * kn][0];
    pa[mt][1] = pp[mt][2 * kn][1];
    pa[mt][2] = pp[mt][2 * kn + 1][0];
    pa[mt][3] = pp[mt][2 * kn + 1][1];
  }
  $ pv_product()
}
$ end
$
$ -- O normalized, through this warp's rows of the Q tile, then to global
$ -- memory in 16-byte rows; the logsumexp per row.
$ local function epilogue()
/* Epilogue: O, normalized, through this warp's rows of the Q tile, then
** to global memory in 16-byte rows; the logsumexp per row. */
fa_cp_async_wait(0);
fa_syncthreads(); /* nobody reads Q or K/V any more; every copy has landed */
/* O's and the logsumexp's heads, only now: nothing of them is live in the loop */
$ if c.varlen == 1 then
${vl.again()}
$ end
unsigned short *const og = (unsigned short *)p.o + b * p.o_sb + h * p.o_sh${vl.row(c, "o")};
float *const lg = ${vl.lse(c, "float", "b", "h")};
FA_UNROLL
for (int mt = 0; mt < ${m_tiles}; ++mt) {
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
$   if sum_mma then
    const float l = o[mt][${sum_tile}][2 * hh];  /* the row's sum of P, in every column */
    const float inv = ${sm.inverse(F, "l")};
$   else
    ${sm.row_sum(F, eager)}
$   end
    const int r = warp * ${warp_rows} + mt * 16 + g + 8 * hh;
    FA_UNROLL
    for (int n = 0; n < ${dim_tiles}; ++n)
      fa_sts_u32((unsigned *)(sm + (${P.q_offset} + r * ${row_bytes} + fa_swizzled_chunk(n, frag_swizzle) + 4 * tig)),
$   if eager then
                 fa_pack_${T}x2(o[mt][n][2 * hh], o[mt][n][2 * hh + 1])); /* normalized at every step; 0 without a key */
$   else
                 fa_pack_${T}x2(fa_rescale_f32(o[mt][n][2 * hh], inv), fa_rescale_f32(o[mt][n][2 * hh + 1], inv)));
$   end
    if (tig == 0 && q0 + r < p.seq_q)
      fa_st_f32(lg + q0 + r, ${sm.lse(F, "m_i[mt][hh]", "l")});
  }
}
fa_syncwarp(); /* each warp reads back only its own rows */
$   local chunks = warp_rows * P.row_chunks  -- of this warp's rows
$   local dim = P.dim_v   -- O's head dim, V's
FA_UNROLL
for (int i = 0; i < ${(chunks + 31) // 32}; ++i) {
  const int e = lane + 32 * i;
  const int rr = e / ${P.row_chunks}, cc = e - rr * ${P.row_chunks};
  const int r = warp * ${warp_rows} + rr, gr = q0 + r;
$   if chunks % 32 ~= 0 and dim < padded_dim then
  if (e < ${chunks} && gr < p.seq_q && cc < ${(dim + 7) // 8}) {
$   elseif chunks % 32 ~= 0 then
  if (e < ${chunks} && gr < p.seq_q) {
$   elseif dim < padded_dim then
  if (gr < p.seq_q && cc < ${(dim + 7) // 8}) {
$   else
  if (gr < p.seq_q) {
$   end
    const fa_u32x4 v = fa_lds_u32x4((const fa_u32x4 *)(sm + (${P.q_offset} + fa_tile_offset(r, cc, ${row_bytes}, ${swizzle}))));
$   if P.async_copy then
    fa_st_u32x4((fa_u32x4 *)(og + gr * p.o_sn + cc * 8), v);
$   else
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    FA_UNROLL
    for (int t = 0; t < 8; ++t)
      if (cc * 8 + t < ${dim}) fa_st_u16(og + gr * p.o_sn + cc * 8 + t, (unsigned short)(w[t >> 1] >> (16 * (t & 1))));
$   end
  }
}
$ end
$ if mod then
${require("mod").c_functions(mod, "float")}
$ end
${pg.kernel(c, "FA_TC_KERNEL", args.entry, threads) or vl.kernel(c, "FA_TC_KERNEL", args.entry, threads)}
$ if c.varlen == 1 then
  ${vl.kept_key(P.varlen_offset, true)}
$ end
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;       /* fragment row and column pair */
  const int mrow = lane & 7, mat = lane >> 3;    /* ldmatrix: row mrow of matrix mat */
  const int h = fa_bid_y(), b = fa_bid_z();
  const int hk = FA_KV_HEAD(p, h);      /* the K/V head (GQA, MQA) */
$ if mod then
  const fa_mod_u mod_u = fa_mod_setup(b, h, p.seq_q, p.seq_k, p.heads);
  (void)mod_u;
$ end
  unsigned char *const sm = (unsigned char *)fa_smem_base();
  const fa_saddr ss = fa_saddr_of(sm);
  const unsigned short *const qg = (const unsigned short *)p.q + b * p.q_sb + h * p.q_sh${vl.row(c, "q")};
$ if c.paged ~= 1 then
  const unsigned short *const kg = (const unsigned short *)p.k + b * p.k_sb + hk * p.k_sh${vl.row(c, "k")};
  const unsigned short *const vg = (const unsigned short *)p.v + b * p.v_sb + hk * p.v_sh${vl.row(c, "v")};
$ end
  const int off = p.seq_k - p.seq_q; /* key c is visible to row r when c <= r + off */
  const float sl2 = p.scale_log2_f32;
$ if causal then
  /* The query blocks from the last down: the CTAs with the most K/V
  ** blocks under the mask launch first, the short ones fill the tail. */
  const int q0 = ((p.seq_q + ${block_m - 1}) / ${block_m} - 1 - fa_bid_x()) * ${block_m};
$ else
  const int q0 = fa_bid_x() * ${block_m};
$ end
$ if c.varlen == 1 then
  ${vl.past("q0")}
$ end
  (void)off;
  ${sm.kv_end(causal, block_m)}
$ if mod and mod.mask then
  ${sm.mod_range(block_m, block_n)}
  const int n_blocks = mod_last + 1, kv_first = mod_first < 0 ? 0 : mod_first;
$ else
  const int n_blocks = (kv_end + ${block_n - 1}) / ${block_n};
$ end
$ if causal then
  /* Keys before vis0 + 16 mt + 8 hh are visible to fragment row g + 8 hh of m-tile mt: one
  ** register for the causal mask, not the terms it is made of */
  const int vis0 = q0 + warp * ${warp_rows} + g + off + 1;
$ end

  /* ldmatrix x4 lanes: lane 8 j + mrow gives one row of matrix j. For Q
  ** and V (.trans) that is row mrow + 8 (j & 1) of a 16-row slab, chunk
  ** 2 k + (j >> 1): for Q the A fragment a0..a3, for V registers 0-1 the B
  ** fragment of head-dim columns 0-7 and 2-3 that of columns 8-15. For K,
  ** row mrow + 8 (j >> 1), chunk 2 k + (j & 1): registers 0-1 the B
  ** fragment of keys 0-7, 2-3 that of keys 8-15. q_lane[] holds the lane's
  ** offset in a slab for each k step of a swizzle period (fa_slab_offset
  ** adds the periods). Slabs start at multiples of 8 rows, so the swizzle
  ** term of every row a lane reads is that of mrow, and that of its
  ** fragment rows that of g. K's offsets are Q's plus k_delta, the same at
  ** every step: the chunks are 2 k + (j & 1) and 2 k + (j >> 1), and the
  ** swizzle XOR of 2 k + b is 2 k XOR (b XOR the row's term), where b and
  ** 2 k share no bit, so the two differ by the row and by bit 0 of the
  ** XOR alone. One register, not a second array of them. */
  const int qv_row = mrow + 8 * (mat & 1), k_row = mrow + 8 * (mat >> 1);
  const int lane_swizzle = fa_swizzle(mrow, ${swizzle}), frag_swizzle = fa_swizzle(g, ${swizzle});
  const int q_warp = ${P.q_offset} + warp * ${warp_rows * row_bytes}; /* this warp's Q rows */
  int q_lane[${P.lane_offsets}];
  FA_UNROLL
  for (int x = 0; x < ${P.lane_offsets}; ++x) q_lane[x] = fa_lane_offset(qv_row, mat >> 1, lane_swizzle, x, ${row_bytes});
  const int k_delta = fa_lane_offset(k_row, mat & 1, lane_swizzle, 0, ${row_bytes}) - q_lane[0];
  (void)q_warp;
  $ copy_lanes("tid")

  float o[${m_tiles}][${o_tiles}][4];   /* O: rows g, g + 8 of each m-tile; columns 8 n + 2 tig, + 1 */
  float m_i[${m_tiles}][2];
$ if not sum_mma then
  float l_i[${m_tiles}][2];
$ else
  const unsigned ones[2] = {${T == "bf16" and "0x3f803f80u" or "0x3c003c00u"}, ${T == "bf16" and "0x3f803f80u" or "0x3c003c00u"}};  /* B fragment of a block of ones */
$ end
  FA_UNROLL
  for (int mt = 0; mt < ${m_tiles}; ++mt) {
    FA_UNROLL
    for (int n = 0; n < ${o_tiles}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) o[mt][n][i] = 0.f;
    }
    m_i[mt][0] = m_i[mt][1] = NEG_INF;
$ if not sum_mma then
    l_i[mt][0] = l_i[mt][1] = 0.f;
$ end
  }
$ if q_in_registers then
  unsigned qf[${m_tiles}][${k_steps}][4];  /* Q as A fragments, for the whole loop */
$ end

  /* The K/V blocks go from the last, n_blocks - 1, down to 0, as in
  ** FlashAttention-2: the one block that can reach past seq_k comes first,
  ** so only the first copy checks rows, and the blocks a causal mask cuts
  ** (the diagonal ones) come before those it leaves whole.
$ if stages == 1 then
  ** One stage: the next block is copied once P V is done.
$ else
  ** ${stages} stages: the iteration of block kv copies block kv - ${stages - 1}, into the
  ** stage after the one it reads, circularly.
  ** The loop counts the block itself down: one register through the loop,
  ** not an iteration count and a block count.
$ end
$ if q_in_registers then
  ** Commit groups: Q alone, then one per prologue block, one per iteration. */
$ else
  ** Commit groups: Q with the first K/V block, one per prologue block, one per iteration. */
$ end
  $ load_q()
$ if q_in_registers then
  fa_cp_async_commit();
$   if c.q_share == 1 then
  fa_cp_async_wait(0);
  fa_syncthreads();
  $ q_to_registers()
  fa_syncthreads(); /* K/V overwrite Q */
$   end
$ end
$ local prologue = math.max(stages - 1, 1)
$ for s = 0, prologue - 1 do
$ if kv_lo == "0" then
  if (${s} < n_blocks) {
$ else
  if (${s} < n_blocks - ${kv_lo}) {
$ end
    const int block = n_blocks - ${s + 1};
    $ load_kv(s * P.stage_bytes, s == 0)
  }
  fa_cp_async_commit();
$ end
$ if q_in_registers and c.q_share == 0 then
  fa_cp_async_wait(${prologue}); /* Q has landed */
  fa_syncthreads();
  $ q_to_registers()
$ end
$ if c.paged == 1 then
  /* K/V in a KV cache: the offsets of the first block the loop copies,
  ** the pages of the block after it */
  int kv_page[${paged_sets}];
  {
    const int block = n_blocks - ${prologue + 1};
    $ paged_slots()
    $ paged_write("block", " && block >= 0", "hk")
    $ paged_lookup("(block - 1)", " && block >= 1")
  }
$ end
$ if carry then
  /* kv_addr=carry: this thread's pointers into the first block the loop copies */
  const int first_copy = n_blocks > ${math.max(stages, 2)} ? n_blocks - ${math.max(stages, 2)} : 0;
  const unsigned short *kcp = kg + (long long)(first_copy * ${block_n} + copy_row) * p.k_sn + copy_chunk * 8;
  const unsigned short *vcp = vg + (long long)(first_copy * ${block_n} + copy_row) * p.v_sn + copy_chunk * 8;
$ end
  int stage = 0;  /* byte offset of this iteration's stage */
  for (int kv = n_blocks - 1; kv >= ${kv_lo}; --kv) {
    const int k0 = kv * ${block_n};
    $ wait_and_prefetch()
    const int k_tile = ${P.kv_offset} + stage, v_tile = k_tile + ${block_n * row_bytes};  /* this block's K and V */
$ if stages > 1 then
    stage = stage + ${P.stage_bytes} < ${stages * P.stage_bytes} ? stage + ${P.stage_bytes} : 0;
$ end

$ if parts > 1 then
    /* The block's keys go through in ${parts} parts of ${part_keys}, each an online-softmax
    ** step of its own, so that fewer S registers are live at once. */
    FA_UNROLL_BY(1)
    for (int part = 0; part < ${parts}; ++part) {
      const int key0 = k0 + part * ${part_keys};  /* this part's first key */
      const int k_part = k_tile + part * ${part_keys * row_bytes}, v_part = v_tile + part * ${part_keys * row_bytes};
$ else
    {
      const int key0 = k0, k_part = k_tile, v_part = v_tile;
$ end
$ if causal then
      if (key0 < p.seq_k && key0 <= q0 + warp * ${warp_rows} + ${warp_rows - 1} + off) { /* else no key here for this warp's rows */
$ else
      if (key0 < p.seq_k) { /* else no key here for this warp's rows */
$ end
$ if P.m_groups > 1 then
        /* The warp's m-tiles in ${P.m_groups} groups of ${P.group_tiles}, one after the other, so that
        ** only one group's S is live: K and V fragments are read once per group. */
$ end
$ for grp = 0, P.m_groups - 1 do
$   mt0, mt1 = grp * P.group_tiles, (grp + 1) * P.group_tiles
$   if grp > 0 then
        fa_syncwarp();
$   end
        {
          $ gemm_qk()

          $ apply_score_mod()

          $ apply_mask()

$ if pv_steps_order then
          $ softmax_stats()

          $ gemm_pv_steps()
$ else
          $ softmax_rescale_o()

          $ gemm_pv()
$ end
        }
$ end
      }
    }
$ if stages == 1 then
    if (kv > ${kv_lo}) {
      const int block = kv - 1;
      fa_syncthreads(); /* every warp is done with the stage */
      $ load_kv_in_loop(0)
      fa_cp_async_commit();
    }
$ end
  }

  $ epilogue()
}
