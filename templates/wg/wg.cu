$ -- wg.cu: FlashAttention-3-class forward on wgmma, TMA and mbarriers (see wg.lua).
$ local c, P = args.cfg, args.P
$ local causal, eager, overlap, pingpong = c.causal == 1, c.norm == "eager", c.overlap == 1, c.pingpong == 1
$ local persistent, pss = c.persistent == 1, c.pv == "ss"
$ local T = c.dtype == "bf16" and "bf16" or "f16"
$ local BM, BN, S, C = c.block_m, c.block_n, c.stages, c.consumers
$ local SW, CB, DP, NCB = P.swizzle, P.col_block, P.padded_dim, P.col_blocks
$ -- fp8 (e4m3): Q K^T and P V by k32 wgmma, both operands K-major, so V
$ -- comes transposed (the kernel before this one writes it: VSW keys per
$ -- column block); P packed to e4m3 as the A fragment; O in bf16 (OT),
$ -- OCB elements per column block.
$ local f8, VSW, OCB = P.fp8, P.vt_swizzle, P.o_col_block
$ -- fp8's descales per block of rows (blockscale): Q's per 64 rows of a
$ -- consumer, K's and V's per 32 keys (a chunk of the block; the blocks of
$ -- descale rows are powers of two from 64, so a chunk never straddles
$ -- two). The scores come scaled (F.scaled): s K's descale and sl2 first.
$ local bs, NC = c.blockscale == 1, BN // 32
$ local OT = f8 and "bf16" or T
$ if f8 then T = "e4m3" end
$ local NS = BN // 2     -- S accumulators per thread
$ local NO = DP // 2     -- O accumulators per thread
$ -- A variable-length batch (varlen.lua): the tensor maps span the packed
$ -- tensors (batch 1), each box at its sequence's first token plus the
$ -- block's row; the maps are read where they are, in parameter space.
$ local varlen = c.varlen == 1
$ local vl = require("varlen")
$ -- A KV cache (paged.lua): the maps over K and V span the pool of pages,
$ -- each box of page_rows rows placed on its page (wg.lua); p is the kernel's
$ -- copy with the sequence's length, the maps read where they are.
$ local paged = c.paged == 1
$ local PR = P.page_rows   -- rows of a box
$ local TM = (varlen or paged) and "pv" or "p"
$ local VB = varlen and "0" or "b"
$ local function qrow(r) return varlen and "vq_lo + " .. r or r end
$ -- A score or mask modification (mod.lua): its functions precede the kernel;
$ -- under a mask a CTA visits the blocks from kv_top down, n_blocks of them.
$ local mod = c.mod
$ local masks = mod ~= nil and mod.mask ~= nil
$ local top = masks and "kv_top" or "n_blocks - 1"
$ -- The score fragment for the shared softmax (softmax.lua): row hh, the
$ -- n8 column tile j, a quad per row.
$ local sm = require("softmax")
$ local F = { acc = "float", fn = "f32", lanes = { 1, 2 }, col = "j", cols = BN // 8,
$             m = "m_i[hh]", l = "l_i[hh]", sum = "lsum", scaled = bs,
$             score = function(e) return "s[4 * j + 2 * hh" .. (e == "0" and "" or " + " .. e) .. "]" end }
$ -- Named barriers: 1 + w the turn of consumer w (ping-pong), 4 + w
$ -- consumer w's own (its epilogue, P in shared memory), 7 every consumer
$ -- (persistent: done with V's ring before O goes there).
$
$ -- A KV cache's K (or V) block blk into stage st, by boxes of PR rows
$ -- (page_rows), each within a page: the page size a multiple of PR
$ -- (attn_tmaps checks). A page outside the pool sets error[0], and a box
$ -- there loads zeros, as TMA reads nothing outside a map; every row counts
$ -- in the stage's bytes. Up to four of the producer's warps run the
$ -- loads, each elected lane (leader) issuing. A tile's first block, its
$ -- last (tail, the first warp's leader's alone), may end the sequence
$ -- among a box's rows: those load a row at a time, zeros past the length
$ -- (a cache's rows past a length may hold anything, NaN too, which P's
$ -- zeros would not cancel in P V), and boxes wholly past it load zeros
$ -- (the pool's end). Every other block is whole (paged_block), its boxes
$ -- dealt among the warps: lane k of a warp read the page of the warp's
$ -- box k an iteration before (page_of), and a shuffle brings each page to
$ -- the leader warp-uniform, so that ptxas issues the boxes without a loop
$ -- over lanes.
$ -- The page of cache position pos (a C expression) of sequence b: its
$ -- slot's entry in the table row ptab (a contiguous cache's slot is 0), or b.
$ local function table_page(pos)
$   return "(ptab ? fa_ldg_i32(ptab + FA_PAGE_OF(p, " .. pos .. ")) : b)"
$ end
$ local function paged_tail(which)
$   local mb, m1 = which == "k" and 1 or 2, which == "k" and 4 or 5
$   for r0 = 0, BN - PR, PR do
{
  const int pos0 = blk * ${BN} + ${r0}, tok = pos0 - FA_PAGE_OF(p, pos0) * p.page_size;
  const int page = pos0 >= p.seq_k ? p.num_pages : ${table_page("pos0")};
  if (pos0 < p.seq_k && (unsigned)page >= (unsigned)p.num_pages) fa_st_i32(p.error, 1);
  if (pos0 + ${PR} <= p.seq_k || pos0 >= p.seq_k) {
$     for j = 0, NCB - 1 do
    fa_tma_load_4d(st + ${j * BN * SW + r0 * SW}, &pv.tmap[${mb}], ${j * CB}, tok, hk, page, &full_${which}[i]);
$     end
  } else {
    /* the sequence ends among these rows */
    FA_UNROLL_BY(1)
    for (int r = 0; r < ${PR}; ++r) {
$     for j = 0, NCB - 1 do
      fa_tma_load_4d(st + ${j * BN * SW + r0 * SW} + r * ${SW}, &pv.tmap[${m1}], ${j * CB}, tok + r, hk, pos0 + r < p.seq_k ? page : p.num_pages, &full_${which}[i]);
$     end
    }
  }
}
$   end
$ end
$ -- The producer warps that issue a block's boxes (PW of the warpgroup's
$ -- four): warp pw the boxes pw, pw + PW, ..., so that each issues a few
$ -- after the stage frees instead of one issuing them all.
$ local G = paged and BN // PR or 1
$ local PW = math.min(4, G)
$ local GW = (G + PW - 1) // PW
$ local function paged_block(which, it, pages)
$   local mb = which == "k" and 1 or 2
      {
        const int f = kv + (${it}), i = f % ${S}, blk = ${top} - (${it});
$   if which == "k" then
        if (fa_any_sync(box < ${G} && (unsigned)${pages} >= (unsigned)p.num_pages) && leader) fa_st_i32(p.error, 1);
$   end
        /* This warp's k-th box's page, from lane k that read it, and its
        ** first row in the page, which lane k works out beside the others':
        ** the leader then issues each box with nothing to compute. */
        const int pos = blk * ${BN} + ${PR} * box, row = pos - FA_PAGE_OF(p, pos) * p.page_size;
        int pg[${GW}], tok[${GW}];
        FA_UNROLL
        for (int k = 0; k < ${GW}; ++k) pg[k] = fa_shfl_idx_i32(${pages}, k), tok[k] = fa_shfl_idx_i32(row, k);
        if (f >= ${S}) fa_mbar_wait(&empty_${which}[i], (f / ${S} & 1) ^ 1);  /* the stage is free */
        if (leader) {
          unsigned char *const st = smem + ${which == "v" and P.v_offset or P.q_region} + i * ${P.kv_bytes};
          /* the stage's bytes, once: the other warps' boxes may land
          ** before (the count goes below zero until then) */
          if (pw == 0) fa_mbar_arrive_expect_tx(&full_${which}[i], ${P.kv_bytes});
          FA_UNROLL
          for (int k = 0; k < ${GW}; ++k) {
            const int g = pw + ${PW} * k;
$   if G % PW ~= 0 then
            if (g >= ${G}) break;
$   end
$   for j = 0, NCB - 1 do
            fa_tma_load_4d(st + ${j * BN * SW} + g * ${PR * SW}, &pv.tmap[${mb}], ${j * CB}, tok[k], hk, pg[k], &full_${which}[i]);
$   end
          }
        }
      }
$ end
$ -- Lane k's page of this warp's box k (box) of the tile's block of
$ -- iteration it (a C expression), 0 past the blocks or the boxes.
$ local function page_of(it)
$   return string.format("(%s < n_blocks && box < %d ? %s : 0)", it, G,
$                        table_page(string.format("(%s - (%s)) * %d + %d * box", top, it, BN, PR)))
$ end
$
$ -- The producer's load of the K (or V) block of iteration `it` of the
$ -- tile into its stage: the ring's fill kv + it (kv: the blocks of the
$ -- CTA's earlier tiles), once the consumers have emptied the stage (from
$ -- the second round of the ring on), by TMA, one box per column block.
$ local function load(which, it)
      {
        const int f = kv + (${it}), i = f % ${S}, blk = ${top} - (${it});
        if (f >= ${S}) fa_mbar_wait(&empty_${which}[i], ((f / ${S}) & 1) ^ 1);
        unsigned char *const st = smem + ${which == "v" and P.v_offset or P.q_region} + i * ${P.kv_bytes};
        fa_mbar_arrive_expect_tx(&full_${which}[i], ${P.kv_bytes});
$   if f8 and which == "v" then
$     for j = 0, BN // VSW - 1 do
        fa_tma_load_4d(st + ${j * DP * VSW}, &p.tmap[2], blk * ${BN} + ${j * VSW}, 0, hk, b, &full_v[i]);
$     end
$   elseif paged then
        $ paged_tail(which)
$   else
$     for j = 0, NCB - 1 do
        fa_tma_load_4d(st + ${j * BN * SW}, &${TM}.tmap[${which == "k" and 1 or 2}], ${j * CB}, ${varlen and "vk_lo + " or ""}blk * ${BN}, hk, ${VB}, &full_${which}[i]);
$     end
$   end
      }
$ end
$
$ -- S = Q K^T of the stage of descriptor kd into s: k16 steps over the padded dim,
$ -- both operands K-major; a k16 step is 32 bytes into a swizzle row.
$ local function issue_s()
fa_wgmma_fence();
$   if f8 then
$     for kk = 0, DP // 32 - 1 do
fa_wgmma_ss_e4m3(${BN}, s, fa_wgmma_desc_advance(qd, ${(kk * 32) // SW * BM * SW + (kk * 32) % SW}), fa_wgmma_desc_advance(kd, ${(kk * 32) // SW * BN * SW + (kk * 32) % SW}), ${kk > 0 and 1 or 0});
$     end
fa_wgmma_commit();
$     return
$   end
$   for kk = 0, DP // 16 - 1 do
$     local blk, within = (kk * 16) // CB, (kk * 16) % CB * 2
fa_wgmma_ss_${T}(${BN}, s, fa_wgmma_desc_advance(qd, ${blk * BM * SW + within}), fa_wgmma_desc_advance(kd, ${blk * BN * SW + within}), ${kk > 0 and 1 or 0}, 0, 0);
$   end
fa_wgmma_commit();
$ end
$
$ -- O += P V of the stage of descriptor vd (V MN-major: trans_b), P from
$ -- registers, or from shared memory (pd, K-major as Q).
$ local function issue_pv()
fa_wgmma_fence();
$   if f8 then
$     -- V transposed, K-major: a k32 step is 32 bytes into a column block
$     -- of VSW keys, each block the padded dim's rows.
$     for kk = 0, BN // 32 - 1 do
fa_wgmma_rs_e4m3(${DP}, o, pa[${kk}], fa_wgmma_desc_advance(vd, ${(kk * 32) // VSW * DP * VSW + (kk * 32) % VSW}), 1);
$     end
fa_wgmma_commit();
$     return
$   end
$   for kk = 0, BN // 16 - 1 do
$     if pss then
$       local blk, within = (kk * 16) // CB, (kk * 16) % CB * 2
fa_wgmma_ss_${T}(${DP}, o, fa_wgmma_desc_advance(pd, ${blk * 64 * SW + within}), fa_wgmma_desc_advance(vd, ${kk * 16 * SW}), 1, 0, 1);
$     else
fa_wgmma_rs_${T}(${DP}, o, pa[${kk}], fa_wgmma_desc_advance(vd, ${kk * 16 * SW}), 1, 1);
$     end
$   end
fa_wgmma_commit();
$ end
$
$ -- Ping-pong: wait for this consumer's turn to issue GEMMs; hand the turn
$ -- to the next, round robin (FlashAttention-3's warp scheduler barrier),
$ -- once issued (the last consumer not after its last turn: the first has
$ -- none left to take).
$ local function turn_begin()
$   if pingpong then
fa_named_bar_sync(1 + wg, 256);
$   end
$ end
$ local function turn_end(it)
$   if pingpong then
$     if C == 2 then
if (wg == 0 || ${it} + 1 < n_blocks) fa_named_bar_arrive(2 - wg, 256);
$     else
if (wg < ${C - 1} || ${it} + 1 < n_blocks) fa_named_bar_arrive(wg < ${C - 1} ? 2 + wg : 1, 256);
$     end
$   end
$ end
$
$ -- blockscale: block blk's factors (the first launch's, below), loaded
$ -- before the wait for K (ptxas moves them after it, but before the wait
$ -- for S, which L2's latency passes under).
$ local function load_scales(blk)
$   if bs then
  fa_f32x2 ksc[${NC}];
  FA_UNROLL
  for (int c = 0; c < ${NC}; ++c) ksc[c] = fa_ldg_f32x2(bs_chunk + ${blk} * ${NC} + c);
$   end
$ end
$
$ -- blockscale's online softmax (deferred): chunk c's scores scaled by
$ -- sl2 and K's descale (ksc[c].x); V's descales go into P, P' = P
$ -- vd / vm (vm the block's largest, so P' stays at most 1 for e4m3),
$ -- through the exponent (ksc[c].y = log2 vd), and out of the row sum
$ -- again, which stays P's. O's accumulator is in units of the block's
$ -- vm (lvcur = log2 vm), moved from the last block's with the rescale.
$ -- Chunks outside, rows inside: a chunk's factors live while its 32 keys
$ -- are done.
$ local function blockscale_softmax()
  float lvm = ksc[0].y;
  FA_UNROLL
  for (int c = 1; c < ${NC}; ++c) lvm = fmaxf(lvm, ksc[c].y);
  const float vratio = fa_exp2_f32(lvcur - lvm);
  lvcur = lvm;
  float mu[2], rs[2];
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float mx = NEG_INF;
    FA_UNROLL
    for (int c = 0; c < ${NC}; ++c) {
      float mc = fmaxf(s[16 * c + 2 * hh], s[16 * c + 2 * hh + 1]);
      FA_UNROLL
      for (int j = 4 * c + 1; j < 4 * c + 4; ++j) mc = fmaxf(mc, fmaxf(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]));
      mx = fmaxf(mx, mc * (sl2 * ksc[c].x));
    }
    ${sm.lane_reduce(F, "mx", "max")}
    const float mn = fmaxf(m_i[hh], mx);
    mu[hh] = ${sm.mu(F, "mn")};  /* a row with no key yet */
    oscale[hh] = fa_exp2_f32(m_i[hh] - mu[hh]);  /* alpha, until V's move below */
    m_i[hh] = mn, rs[hh] = 0.f;
  }
  FA_UNROLL
  for (int c = 0; c < ${NC}; ++c) {
    const float kf = sl2 * ksc[c].x, vl = ksc[c].y - lvm, vi = fa_exp2_f32(-vl);
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      const float nb = vl - mu[hh];
      float rc[4];  /* the chunk's sum, from its first pair (not 0 + ...: ptxas keeps an add of 0) */
      FA_UNROLL
      for (int j = 0; j < 4; ++j) {
        float *const e = s + 16 * c + 4 * j + 2 * hh;
        e[0] = fa_exp2_f32(e[0] * kf + nb), e[1] = fa_exp2_f32(e[1] * kf + nb);
        rc[j] = e[0] + e[1];
      }
      rs[hh] += ((rc[0] + rc[1]) + (rc[2] + rc[3])) * vi;
    }
  }
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    l_i[hh] = l_i[hh] * oscale[hh] + rs[hh];
    oscale[hh] *= vratio;
  }
$ end
$
$ -- Mask (where `masked`: blocks past seq_k or on the causal diagonal),
$ -- online softmax of s (block `blk`, P left in s), and the factor O
$ -- takes, into oscale[]. Row hh of this
$ -- thread is 16 w + g + 8 hh of the consumer's; s[4 j + 2 hh + e] its
$ -- column 8 j + 2 t + e.
$ local function softmax(blk, masked)
{
$ if masked or mod then
  const int key0 = ${blk} * ${BN};
$ end
$ if mod and mod.score then
$   local M = { rows = { { "hh", 0, 2 } }, col0 = "key0 + 2 * t", row = "row0 + 16 * w + g + 8 * hh" }
  ${sm.modify(F, M)}
$ end
$ if masked then
$   -- Its own mask and row max, not softmax.lua's: with tc's form (the
$   -- pair's two compares as a loop, room from col0, the max through mo)
$   -- ptxas emits one more instruction per block at FA3's d64 tile.
$   local cond = "key0 + " .. BN .. " > p.seq_k"
$   if causal then cond = cond .. " || key0 + " .. (BN - 1) .. " > row0 + off" end
$   if masks then
$     cond = cond .. string.format(" || fa_mod_block(b, h, row0, row0 + 63, key0, key0 + %d, p.seq_q, p.seq_k, p.heads) != 2", BN - 1)
$   end
  if (${cond}) {
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
$   if causal then
      const int vis = row0 + 16 * w + g + 8 * hh + off + 1;
      const int lim = vis < p.seq_k ? vis : p.seq_k;
$   else
      const int lim = p.seq_k;
$   end
      const int room = lim - key0 - 2 * t;
      FA_UNROLL
      for (int j = 0; j < ${BN // 8}; ++j) {
$   if masks then
        const int row = row0 + 16 * w + g + 8 * hh, col = key0 + 2 * t + 8 * j;
        if (8 * j >= room || !fa_mod_mask(mod_u, b, h, row, col, p.seq_q, p.seq_k, p.heads)) s[4 * j + 2 * hh] = NEG_INF;
        if (8 * j + 1 >= room || !fa_mod_mask(mod_u, b, h, row, col + 1, p.seq_q, p.seq_k, p.heads)) s[4 * j + 2 * hh + 1] = NEG_INF;
$   else
        if (8 * j >= room) s[4 * j + 2 * hh] = NEG_INF;
        if (8 * j + 1 >= room) s[4 * j + 2 * hh + 1] = NEG_INF;
$   end
      }
    }
  }
$ end
$ if bs then
  $ blockscale_softmax()
$ else
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float mx = NEG_INF;
    FA_UNROLL
    for (int j = 0; j < ${BN // 8}; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]));
    ${sm.lane_reduce(F, "mx", "max")}
    const float mn = fmaxf(m_i[hh], mx);
    const float mu = ${sm.mu(F, "mn")};  /* a row with no key yet */
    const float alpha = fa_exp2_f32(m_i[hh] * sl2 - mu);
    float rs = 0.f;
    FA_UNROLL
    for (int j = 0; j < ${BN // 8}; ++j) {
      s[4 * j + 2 * hh] = fa_exp2_f32(s[4 * j + 2 * hh] * sl2 - mu);
      s[4 * j + 2 * hh + 1] = fa_exp2_f32(s[4 * j + 2 * hh + 1] * sl2 - mu);
      rs += s[4 * j + 2 * hh] + s[4 * j + 2 * hh + 1];
    }
$   if eager then
    /* eager (FlashAttention-1): O = O l_old alpha / l_new + P V / l_new */
    ${sm.lane_reduce(F, "rs", "sum")}
    ${sm.eager_factors(F)}
    oscale[hh] = fo;
    FA_UNROLL
    for (int j = 0; j < ${BN // 8}; ++j) {
      s[4 * j + 2 * hh] = fa_rescale_f32(s[4 * j + 2 * hh], inv);
      s[4 * j + 2 * hh + 1] = fa_rescale_f32(s[4 * j + 2 * hh + 1], inv);
    }
    l_i[hh] = ln;
$   else
    /* deferred (FlashAttention-2): O = O alpha + P V; this thread's part of
    ** the row sum, the quad's summed in the epilogue */
    oscale[hh] = alpha;
    l_i[hh] = l_i[hh] * alpha + rs;
$   end
    m_i[hh] = mn;
  }
$ end
}
$ end
$
$ -- P, from s, as the A fragments of the k16 steps of P V (per warp,
$ -- mma.m16n8k16's A); only once no P V in flight reads pa. With P in
$ -- shared memory (FlashAttention-3's d64 tile, whose registers hold no
$ -- P beside the next S): into this consumer's rows there, under the
$ -- swizzle, once the warpgroup's P V before is done in every warp, made
$ -- visible to wgmma (the async proxy) and to the other warps.
$ local function pack_p()
$   if pss then
fa_named_bar_sync(4 + wg, 128);  /* every warp's wait retired the P V that read P */
$     for j = 0, BN // 16 - 1 do
$       local blk, within = (16 * j) // CB, (16 * j) % CB * 2
{
  const unsigned r4[4] = {fa_pack_${T}x2(s[${8 * j}], s[${8 * j + 1}]), fa_pack_${T}x2(s[${8 * j + 2}], s[${8 * j + 3}]),
                          fa_pack_${T}x2(s[${8 * j + 4}], s[${8 * j + 5}]), fa_pack_${T}x2(s[${8 * j + 6}], s[${8 * j + 7}])};
  fa_stmatrix_x4(pt + (${blk * 64 * SW}u + ((${within}u + pc) ^ px)), r4);
}
$     end
fa_fence_proxy_async();
fa_named_bar_sync(4 + wg, 128);
$   elseif f8 then
$     -- The k32 step kk of P V takes keys 32 kk.. of S: the thread's
$     -- columns 2t, 2t+1 (n8 tile 4kk) and 8+2t, 9+2t (tile 4kk+1) as A's
$     -- 4t..4t+3, tiles 4kk+2 and 4kk+3 as A's 16+4t..; V's keys come
$     -- permuted to match (the kernel before says how).
FA_UNROLL
for (int kk = 0; kk < ${BN // 32}; ++kk) {
  pa[kk][0] = fa_pack_e4m3x4(s[16 * kk], s[16 * kk + 1], s[16 * kk + 4], s[16 * kk + 5]);
  pa[kk][1] = fa_pack_e4m3x4(s[16 * kk + 2], s[16 * kk + 3], s[16 * kk + 6], s[16 * kk + 7]);
  pa[kk][2] = fa_pack_e4m3x4(s[16 * kk + 8], s[16 * kk + 9], s[16 * kk + 12], s[16 * kk + 13]);
  pa[kk][3] = fa_pack_e4m3x4(s[16 * kk + 10], s[16 * kk + 11], s[16 * kk + 14], s[16 * kk + 15]);
}
$   else
FA_UNROLL
for (int kk = 0; kk < ${BN // 16}; ++kk) {
  pa[kk][0] = fa_pack_${T}x2(s[8 * kk], s[8 * kk + 1]);
  pa[kk][1] = fa_pack_${T}x2(s[8 * kk + 2], s[8 * kk + 3]);
  pa[kk][2] = fa_pack_${T}x2(s[8 * kk + 4], s[8 * kk + 5]);
  pa[kk][3] = fa_pack_${T}x2(s[8 * kk + 6], s[8 * kk + 7]);
}
$   end
$ end
$
$ local function rescale_o()
fa_wgmma_fence_acc(${DP}, o);
FA_UNROLL
for (int i = 0; i < ${NO}; ++i) o[i] = fa_rescale_f32(o[i], oscale[(i >> 1) & 1]);
$ end
$ -- The tile's coordinates: q0, h, b, hk. Persistent: tile `tile` of the
$ -- grid's, longest first under a causal mask (the last query blocks of
$ -- every (batch, head), then the ones before), else a (batch, head)'s
$ -- query blocks together (its K and V stay in L2); one per CTA: from the
$ -- grid, under a causal mask the query blocks from the last down, so the
$ -- CTAs with the most K/V blocks launch first and the short ones fill the
$ -- tail.
$ local function tile_coords()
$   if persistent then
$     if causal then
    const int mb = n_mb - 1 - tile / n_bh, bh = tile % n_bh;
$     else
    const int mb = tile % n_mb, bh = tile / n_mb;
$     end
    const int q0 = mb * ${BM}, h = bh % p.heads, b = bh / p.heads, hk = FA_KV_HEAD(p, h);
$     if varlen then
    /* Sequence b's offsets (the tile's own lengths); offsets outside the
    ** packed tensors or past the longest: the tile has no block. */
    ${vl.offsets("b")}
    const int vbad = ${vl.bad_offsets()};
    if (vbad && tid % 128 == 0) fa_st_i32(pv.error + 1, 1);
    p.seq_q = vbad ? 0 : vq_hi - vq_lo, p.seq_k = vbad ? 0 : vk_hi - vk_lo;
    const int off = p.seq_k - p.seq_q;  /* key c is visible to row r when c <= r + off */
    (void)vq_lo, (void)vk_lo, (void)off;
$     end
$   else
    const int h = fa_bid_y(), b = fa_bid_z(), hk = FA_KV_HEAD(p, h);
$     if causal then
    const int q0 = ((p.seq_q + ${BM - 1}) / ${BM} - 1 - fa_bid_x()) * ${BM};
$     else
    const int q0 = fa_bid_x() * ${BM};
$     end
$   end
    (void)hk;
$   if mod then
    const fa_mod_u mod_u = fa_mod_setup(b, h, p.seq_q, p.seq_k, p.heads);
    (void)mod_u;
$   end
    ${sm.kv_end(causal, BM)}
$   if masks then
    ${sm.mod_range(BM, BN)}
    const int kv_top = mod_last, n_blocks = mod_first < 0 ? 0 : mod_last - mod_first + 1;
$   elseif varlen and persistent then
    const int n_blocks = q0 < p.seq_q ? (kv_end + ${BN - 1}) / ${BN} : 0;  /* none past the sequence */
$   else
    const int n_blocks = (kv_end + ${BN - 1}) / ${BN};
$   end
$ end
$
$ -- Persistent: the loop over the CTA's tiles, in rounds of a tile per CTA,
$ -- every other round in reverse (a snake: under a causal mask the tiles
$ -- come longest first, and a CTA that takes a round's longest takes the
$ -- next round's shortest). tiles_end closes it.
$ local function tiles_begin()
  for (int round = 0; round * fa_grid_x() < n_tiles; ++round) {
    const int tile = round * fa_grid_x() + (round & 1 ? fa_grid_x() - 1 - fa_bid_x() : fa_bid_x());
    if (tile >= n_tiles) continue;
$ end
$
/* ${args.entry}
** fp32 accumulation, ${c.norm} normalization; tile ${BM}x${BN}, ${C} consumer warpgroup(s) of 64 rows
** and a producer; ${S} K/V stages; ${SW}B swizzle; head dim ${c.dim}${DP > c.dim and " padded to " .. DP or ""}.
$ if pingpong then
** Ping-pong: the consumers take turns issuing their GEMMs.
$ end
$ if overlap then
** Overlap: the S of block j + 1 is issued before the P V of block j.
$ end
$ if pss then
** P V takes P from shared memory.
$ end
$ if persistent then
** Persistent: each CTA loops over tiles; O leaves through V's ring, so the
** next tile's Q and K load under this one's last P V and epilogue.
$ end
*/
$ if mod then
${require("mod").c_functions(mod, "float")}
$ end
$ if f8 then
/* V transposed for fp8's P V, whose B operand wgmma takes K-major only:
** per (batch, K/V head) the dim rows of the keys, padded to whole 32-key
** chunks (zeros past seq_k), into the workspace that tmap[2] maps. A
** chunk's keys are permuted so that the accumulator fragment of S is, as
** it is, the A fragment of P V: of each 16, slot 4 t + i holds key
** 2 t + i (i < 2) or 8 + 2 t + i - 2, the columns thread t of a quad
** holds in S's n8 tiles. One CTA per chunk. */
$   if bs then
/* blockscale: the factors the main kernel's softmax takes, after the V
** transposes of every (batch, K/V head) in the workspace: per chunk of 32
** keys, {K's descale, log2 of V's}, ${NC} chunks per block of ${BN} keys,
** for (batch, K/V head) ds. */
FA_INLINE const fa_f32x2 *bs_factors(const void *ws, int batch, int kv_heads, int seq_k, long long ds) {
  const long long pitch = (seq_k + 31) / 32 * 32, chunks = (long long)(seq_k + ${BN - 1}) / ${BN} * ${NC};
  const fa_f32x2 *const c0 = (const fa_f32x2 *)((const unsigned char *)ws + (long long)batch * kv_heads * ${c.dim} * pitch);
  return c0 + ds * chunks;
}

/* A descale of chunk x's keys (K's or V's, d per block of 2^shift keys of
** the (batch, K/V head) at ds): the last block's past seq_k. */
FA_INLINE float bs_descale(const float *d, int seq_k, int shift, long long ds, int x) {
  if (!d) return 1.f;
  const int nkb = ((seq_k - 1) >> shift) + 1, kb = (32 * x) >> shift;
  return fa_ldg_f32(d + ds * nkb + (kb < nkb ? kb : nkb - 1));
}

$   end
FA_KERNEL(${args.entry}_vt, 128)
{
  const int hk = fa_bid_y(), b = fa_bid_z(), key0 = fa_bid_x() * 32;
  const int kv_heads = p.kv_group > 1 ? p.heads / p.kv_group : p.heads;
  const long long pitch = (p.seq_k + 31) / 32 * 32;
  const unsigned char *const v = (const unsigned char *)p.v + b * p.v_sb + hk * p.v_sh;
  unsigned char *const vt = (unsigned char *)p.ws + ((long long)b * kv_heads + hk) * ${c.dim} * pitch;
  for (int e = fa_tid(); e < ${32 * c.dim}; e += 128) {
    const int d = e / 32, a = e % 32, t = a % 16 / 4, i = a % 4;
    const int key = key0 + (a & 16) + (i < 2 ? 2 * t + i : 6 + 2 * t + i);
    fa_st_u8(vt + d * pitch + key0 + a, key < p.seq_k ? fa_ldg_u8(v + key * p.v_sn + d) : (unsigned char)0);
  }
$   if bs then
  /* The factors of a block (bs_factors), by the CTA of its first chunk:
  ** thread x those of its chunk x (past seq_k too: the last descale). */
  if (fa_bid_x() % ${NC} == 0 && fa_tid() < ${NC}) {
    const long long ds = (long long)b * kv_heads + hk;
    const int x = fa_bid_x() + fa_tid();
    const fa_f32x2 f = {bs_descale(p.k_descale, p.seq_k, p.descale_shift, ds, x),
                        fa_log2_fast_f32(bs_descale(p.v_descale, p.seq_k, p.descale_shift, ds, x))};
    fa_st_f32x2((fa_f32x2 *)bs_factors(p.ws, p.batch, kv_heads, p.seq_k, ds) + x, f);
  }
$   end
}

$ end
$ if varlen and persistent then
FA_SM90_KERNEL_OF(${args.entry}, ${P.threads}, pv)
{
  /* A variable-length batch: each tile reads its sequence's offsets. */
  fa_params p = pv;
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid(), wg = fa_warpgroup();
$ elseif varlen then
${vl.kernel(c, "FA_SM90_KERNEL", args.entry, P.threads)}
  if (fa_bid_x() * ${BM} >= p.seq_q) return;  /* past this sequence */
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid(), wg = fa_warpgroup();
  const int off = p.seq_k - p.seq_q;  /* key c is visible to row r when c <= r + off */
$ elseif paged then
${require("paged").kernel(c, "FA_SM90_KERNEL", args.entry, P.threads)}
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid(), wg = fa_warpgroup();
  const int off = p.seq_k - p.seq_q;  /* key c is visible to row r when c <= r + off */
$ else
FA_SM90_KERNEL(${args.entry}, ${P.threads})
{
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid(), wg = fa_warpgroup();
  const int off = p.seq_k - p.seq_q;  /* key c is visible to row r when c <= r + off */
$ end
  unsigned char *const raw = (unsigned char *)fa_smem_base();
  /* The tiles at the swizzle's repeat, 1024 bytes. */
  unsigned char *const smem = raw + ((1024u - (unsigned)((unsigned long long)raw & 1023u)) & 1023u);
  unsigned long long *const qbar = (unsigned long long *)(smem + ${P.bar_offset});
  /* K and V in rings of their own: K's stage is free once S is computed,
  ** V's once P V is, so the next K loads under the softmax and P V. */
  unsigned long long *const full_k = qbar + 1, *const empty_k = full_k + ${S};
  unsigned long long *const full_v = empty_k + ${S}, *const empty_v = full_v + ${S};
$ if persistent then
  /* O of a tile out of V's ring: every consumer's TMA store has read it. */
  unsigned long long *const obar = empty_v + ${S};
  const int n_mb = (p.seq_q + ${BM - 1}) / ${BM}, n_bh = p.heads * p.batch, n_tiles = n_mb * n_bh;
$ end
$ if not (varlen and persistent) then
  (void)off;
$ end
  if (tid == 0) {
    fa_mbar_init(qbar, 1);
    for (int i = 0; i < ${S}; ++i) {
      fa_mbar_init(&full_k[i], 1);          /* the producer's arrival, plus the TMA bytes */
      fa_mbar_init(&full_v[i], 1);
      fa_mbar_init(&empty_k[i], ${128 * C});  /* every consumer thread, done with the stage */
      fa_mbar_init(&empty_v[i], ${128 * C});
    }
$ if persistent then
    fa_mbar_init(obar, ${C});                  /* a thread of each consumer */
$ end
    fa_fence_mbar_init();
  }
  fa_syncthreads();

  if (wg == ${C}) {
    /* The producer: Q once, then the K/V blocks from the last down, as
    ** the consumers take them; one elected thread issues every load. */
    fa_setmaxnreg_dec(${P.producer_regs});
$ if persistent then
    if (tid / 32 == ${4 * C} && fa_elect_one()) {
      /* kv: the K/V blocks of the tiles before; nt: the tiles before;
      ** prev_empty: the last had no K/V block. */
      int kv = 0, nt = 0, prev_empty = 0;
      $ tiles_begin()
        $ tile_coords()
        /* Q's buffer is free once the consumers are done with the last S
        ** of the tile before: they released its K. O leaves through V's
        ** ring: its V waits for the stores of the tile before, and so does
        ** this tile's Q where a tile without blocks is next to it (so
        ** that neither barrier can complete two phases unseen). */
        if (n_blocks > 0 && kv > 0) fa_mbar_wait(&empty_k[(kv - 1) % ${S}], ((kv - 1) / ${S}) & 1);
        if (nt > 0 && (n_blocks == 0 || prev_empty)) fa_mbar_wait(obar, (nt - 1) & 1);
        if (n_blocks > 0) {
          fa_mbar_arrive_expect_tx(qbar, ${P.q_bytes});
$   for j = 0, NCB - 1 do
          fa_tma_load_4d(smem + ${j * BM * SW}, &${TM}.tmap[0], ${j * CB}, ${qrow("q0")}, h, ${VB}, qbar);
$   end
          $ load("k", "0")
          if (nt > 0 && !prev_empty) fa_mbar_wait(obar, (nt - 1) & 1);
          for (int it = 0; it < n_blocks; ++it) {
            if (it + 1 < n_blocks) {
              $ load("k", "it + 1")
            }
            $ load("v", "it")
          }
        } else {
          fa_mbar_arrive(qbar);  /* the tile's turn, without Q */
        }
        kv += n_blocks, ++nt, prev_empty = n_blocks == 0;
      }
    }
$ else
$   if paged then
    $ tile_coords()
    if (tid / 32 >= ${4 * C} && tid / 32 < ${4 * C + PW} && n_blocks > 0) {
      const int pw = tid / 32 - ${4 * C}, leader = fa_elect_one(), kv = 0;
      const int box = pw + ${PW} * (tid % 32);  /* this lane's box of a block (page_of) */
      /* The sequence's row of the block table, or its one page in
      ** cache_batch_idx (a contiguous cache is one page a sequence: every
      ** position's slot is 0), or none: its page is b. */
      const int *const ptab = pv.block_table ? pv.block_table + (long long)b * pv.table_stride
                          : pv.cache_batch_idx ? pv.cache_batch_idx + b : 0;
      if (leader && pw == 0) {
        fa_mbar_arrive_expect_tx(qbar, ${P.q_bytes});
$     for j = 0, NCB - 1 do
        fa_tma_load_4d(smem + ${j * BM * SW}, &${TM}.tmap[0], ${j * CB}, ${qrow("q0")}, h, ${VB}, qbar);
$     end
        $ load("k", "0")
      }
      /* K runs a block ahead of V, the tile's last block (where the
      ** sequence ends) first, the first warp's leader's alone. Lane k holds
      ** the page of this warp's box k of three blocks: pa V's, pb K's, and
      ** pc the next K's, read an iteration before it is needed, so that the
      ** table's latency passes in the waits. */
      int pa, pb = ${page_of("1")}, pc = ${page_of("2")};
      if (n_blocks > 1) {
        $ paged_block("k", "1", "pb")
      }
      if (leader && pw == 0) {
        $ load("v", "0")
      }
      /* The last V outside the loop: a loop of one path, which ptxas
      ** does not split into copies of the V load for the last block and
      ** the others. */
      int it = 1;
      for (; it + 1 < n_blocks; ++it) {
        pa = pb, pb = pc, pc = ${page_of("it + 2")};
        $ paged_block("k", "it + 1", "pb")
        $ paged_block("v", "it", "pa")
      }
      if (it < n_blocks) {
        pa = pb;
        $ paged_block("v", "it", "pa")
      }
    }
$   else
    $ tile_coords()
    if (tid / 32 == ${4 * C} && fa_elect_one() && n_blocks > 0) {
      const int kv = 0;
      fa_mbar_arrive_expect_tx(qbar, ${P.q_bytes});
$   for j = 0, NCB - 1 do
      fa_tma_load_4d(smem + ${j * BM * SW}, &${TM}.tmap[0], ${j * CB}, ${qrow("q0")}, h, ${VB}, qbar);
$   end
      /* K runs a block ahead of V, as the consumers use them: the K of
      ** block it + 1 is asked for before the V of block it. */
      $ load("k", "0")
      for (int it = 0; it < n_blocks; ++it) {
        if (it + 1 < n_blocks) {
          $ load("k", "it + 1")
        }
        $ load("v", "it")
      }
    }
$   end
$ end
    return;
  }

  /* A consumer warpgroup: query rows row0 .. row0 + 63. */
  fa_setmaxnreg_inc(${P.consumer_regs});
  const int w = (tid % 128) / 32, l = tid % 32, g = l / 4, t = l % 4;
  /* stmatrix.x4 (P, O): lane l = 8 m + i brings row i of matrix m, the
  ** matrices rows 0-7 and 8-15 of the warp's 16 by columns 0-7 and 8-15
  ** of a 16-column block: its row and first column. */
  const int st_row = 16 * w + (l & 7) + 8 * ((l >> 3) & 1), st_col = 8 * (l >> 4);
$ if not f8 then
  const float sl2 = p.scale_log2_f32;
$ end
  unsigned char *const qs = smem + wg * ${64 * SW};  /* this consumer's Q rows, in every column block */
  /* The wgmma descriptors of Q, and of K and V in stage 0, built once: a
  ** k16 step or another stage only moves the start address. Q and K are
  ** K-major (SBO between 8-row groups); V MN-major (LBO between column
  ** blocks, SBO between 8-key groups). */
  const fa_wgmma_desc qd = fa_wgmma_desc_make(qs, 16, ${8 * SW}, ${SW});
  const fa_wgmma_desc kd0 = fa_wgmma_desc_make(smem + ${P.q_region}, 16, ${8 * SW}, ${SW});
$ if f8 then
  const fa_wgmma_desc vd0 = fa_wgmma_desc_make(smem + ${P.v_offset}, 16, ${8 * VSW}, ${VSW});  /* V transposed: K-major */
$ else
  const fa_wgmma_desc vd0 = fa_wgmma_desc_make(smem + ${P.v_offset}, ${BN * SW}, ${8 * SW}, ${SW});
$ end
  float o[${NO}];   /* O, the wgmma D fragment: o[i] is row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2 */
  float s[${NS}];   /* S, the same layout over the block's keys */
$ if pss then
  unsigned char *const ps = smem + ${P.p_offset} + wg * ${P.p_bytes};  /* this consumer's P */
  const fa_wgmma_desc pd = fa_wgmma_desc_make(ps, 16, ${8 * SW}, ${SW});
  /* P by stmatrix.x4, 16 keys at a time: this lane's row at pt, plus the
  ** column block's offset and the 16-byte chunk's, which the swizzle XORs
  ** with px (the row's: a column block's offset keeps it). */
  const unsigned prow = (unsigned)st_row * ${SW}u;
  const unsigned px = fa_swizzle_offset(prow, ${SW}) ^ prow, pc = 2u * (unsigned)st_col;
  const fa_saddr pt = fa_saddr_of(ps) + prow;
$ else
  unsigned pa[${BN // (f8 and 32 or 16)}][4];
$ end
  float m_i[2], l_i[2], oscale[2];
$ if persistent then
  int kv = 0, nt = 0;  /* the K/V blocks and the tiles before */
  $ tiles_begin()
$ else
  const int kv = 0;
  {
$ end
  $ tile_coords()
  const int row0 = q0 + 64 * wg;
$ if f8 then
  /* The descales of the tile's (batch, K/V head): Q's and K's into the
  ** scale, V's into O's factor (1 where none is given). */
  const int ds = b * (p.kv_group > 1 ? p.heads / p.kv_group : p.heads) + hk;
$   if bs then
  /* Per block of rows: this consumer's Q block (rows past seq_q take the
  ** last), the K/V head's factors from the first launch (load_scales);
  ** lvcur the log2 of the V descale O's accumulator is in, 0 before the
  ** first block. */
  const int nqb = ((p.seq_q - 1) >> p.descale_shift) + 1, qb = row0 >> p.descale_shift;
  const float sl2 = p.scale_log2_f32 *
                    (p.q_descale ? fa_ldg_f32(p.q_descale + ((long long)b * p.heads + h) * nqb + (qb < nqb ? qb : nqb - 1)) : 1.f);
  const fa_f32x2 *const bs_chunk = bs_factors(p.ws, p.batch, p.kv_group > 1 ? p.heads / p.kv_group : p.heads, p.seq_k, ds);
  float lvcur = 0.f;
$   else
  const float sl2 = p.scale_log2_f32 * (p.q_descale ? fa_ldg_f32(p.q_descale + ds) : 1.f) *
                    (p.k_descale ? fa_ldg_f32(p.k_descale + ds) : 1.f);
  const float v_descale = p.v_descale ? fa_ldg_f32(p.v_descale + ds) : 1.f;
$   end
$ end
  m_i[0] = m_i[1] = NEG_INF, l_i[0] = l_i[1] = 0.f;
  FA_UNROLL
  for (int i = 0; i < ${NO}; ++i) o[i] = 0.f;
  fa_wgmma_fence_acc(${DP}, o);
$ if pingpong then
  if (wg == ${C - 1} && n_blocks > 0) fa_named_bar_arrive(1, 256);  /* consumer 0 takes the first turn */
$ end
$ if persistent then
  fa_mbar_wait(qbar, nt & 1);  /* the tile's Q (a tile without blocks has none) */
$ else
  if (n_blocks > 0) fa_mbar_wait(qbar, 0);
$ end
$ if P.split_loop then
  /* The blocks come from the last down: the first n_masked need the mask
  ** (past seq_k, or on the causal diagonal of some row of this CTA); the
  ** rest, in a loop of their own, do not. */
$   if causal then
  int n_full = q0 + off + 1 < 0 ? 0 : (q0 + off + 1) / ${BN};
  n_full = n_full < p.seq_k / ${BN} ? n_full : p.seq_k / ${BN};
$   else
  const int n_full = p.seq_k / ${BN};
$   end
$   if masks then
  const int n_masked = n_blocks;  /* the modification's mask may cut any block */
  (void)n_full;
$   else
  const int n_masked = n_blocks - (n_full < n_blocks ? n_full : n_blocks);
$   end
$ else
  const int n_masked = n_blocks;  /* one loop: the mask under a branch (wg.lua says why) */
$ end
  int it = ${overlap and 1 or 0};
$ local body  -- one K/V block of the loops below; masked: with the mask
$ if overlap then
  /* Block 0 (the last, n_blocks - 1): S and its softmax, ahead of the loop. */
  if (n_blocks > 0) {
    const unsigned i = (unsigned)kv % ${S};
    const fa_wgmma_desc kd = fa_wgmma_desc_advance(kd0, i * ${P.kv_bytes}u);
    $ load_scales("(" .. top .. ")")
    fa_mbar_wait(&full_k[i], ((unsigned)kv / ${S}) & 1);
    $ turn_begin()
    $ issue_s()
    $ turn_end("0")
    fa_wgmma_wait(0);
    fa_mbar_arrive(&empty_k[i]);
    fa_wgmma_fence_acc(${BN}, s);
    $ softmax("(" .. top .. ")", true)
    $ pack_p()
  }
$   -- Iteration it: S of block it issued, then P V of block it - 1; the
$   -- softmax of block it runs while P V does; O is rescaled once it is done.
$   body = function(masked)
    const unsigned f = (unsigned)(kv + it), i = f % ${S}, pi = (f - 1) % ${S};
    const fa_wgmma_desc kd = fa_wgmma_desc_advance(kd0, i * ${P.kv_bytes}u);
    const fa_wgmma_desc vd = fa_wgmma_desc_advance(vd0, pi * ${P.kv_bytes}u);
    $ load_scales("(" .. top .. " - it)")
    fa_mbar_wait(&full_k[i], (f / ${S}) & 1);
    $ turn_begin()
    $ issue_s()
    fa_mbar_wait(&full_v[pi], ((f - 1) / ${S}) & 1);
    $ issue_pv()
    $ turn_end("it")
    fa_wgmma_wait(1);
    fa_mbar_arrive(&empty_k[i]);
    fa_wgmma_fence_acc(${BN}, s);
    $ softmax("(" .. top .. " - it)", masked)
    fa_wgmma_wait_after(0, l_i[0], l_i[1]);
    fa_mbar_arrive(&empty_v[pi]);
    $ rescale_o()
    $ pack_p()
$   end
$ else
$   body = function(masked)
    const unsigned f = (unsigned)(kv + it), i = f % ${S};
    const fa_wgmma_desc kd = fa_wgmma_desc_advance(kd0, i * ${P.kv_bytes}u);
    const fa_wgmma_desc vd = fa_wgmma_desc_advance(vd0, i * ${P.kv_bytes}u);
    $ load_scales("(" .. top .. " - it)")
    fa_mbar_wait(&full_k[i], (f / ${S}) & 1);
    $ turn_begin()
    $ issue_s()
    $ turn_end("it")
    fa_wgmma_wait(0);
    fa_mbar_arrive(&empty_k[i]);
    fa_wgmma_fence_acc(${BN}, s);
    $ softmax("(" .. top .. " - it)", masked)
    $ rescale_o()
    $ pack_p()
    fa_mbar_wait(&full_v[i], (f / ${S}) & 1);
    $ issue_pv()
    fa_wgmma_wait(0);
    fa_mbar_arrive(&empty_v[i]);
$   end
$ end
  for (; it < n_masked; ++it) {
    $ body(true)
  }
$ if P.split_loop then
  for (; it < n_blocks; ++it) {
    $ body(false)
  }
$ end
$ if overlap then
  if (n_blocks > 0) {
    const unsigned f = (unsigned)(kv + n_blocks - 1);
    const fa_wgmma_desc vd = fa_wgmma_desc_advance(vd0, f % ${S} * ${P.kv_bytes}u);
    fa_mbar_wait(&full_v[f % ${S}], (f / ${S}) & 1);
    $ issue_pv()
    fa_wgmma_wait(0);
$   if persistent then
    fa_mbar_arrive(&empty_v[f % ${S}]);  /* the ring goes on into the next tile */
$   end
  }
$ end
  fa_wgmma_fence_acc(${DP}, o);

$ if persistent then
  /* Epilogue: O normalized into V's ring, where the rows of Q of this
  ** consumer would be (every consumer's P V is done once all are here),
  ** then a TMA store per column block; the logsumexp per row. */
  unsigned char *const os = smem + ${P.v_offset} + wg * ${64 * SW};
  fa_named_bar_sync(7, ${128 * C});
$ else
  /* Epilogue: O normalized into this consumer's Q rows (every wgmma that
  ** read them is done once all its threads are here), then a TMA store
  ** per column block; the logsumexp per row. */
  unsigned char *const os = qs;
  fa_named_bar_sync(4 + wg, 128);
$ end
$ if varlen then
  /* The sequence's first query read again, where O and the logsumexp need
  ** it (not live through the main loop). */
  const int vq_lo_again = fa_ldg_i32(pv.cu_seqlens_q + fa_again_i32(b));
  float *const lg = (float *)p.lse + (long long)h * pv.total_q + vq_lo_again;
$ else
  float *const lg = (float *)p.lse + ((long long)b * p.heads + h) * p.seq_q;
$ end
  float inv_row[2];  /* 1 / the row's sum, rows g and g + 8 */
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    ${sm.row_sum(F, eager)}
$ if eager then
    const float inv = 1.f;  /* normalized at every step; 0 without a key */
$ end
    inv_row[hh] = inv${bs and " * fa_exp2_f32(lvcur)" or f8 and " * v_descale" or ""};
    const int r = 16 * w + g + 8 * hh;
    if (t == 0 && row0 + r < p.seq_q)
      fa_st_f32(lg + row0 + r, ${sm.lse(F, "m_i[hh]", "lsum")});
  }
  /* O by stmatrix.x4 per 16 columns, each lane's row 16 bytes that the
  ** swizzle keeps whole. */
  const fa_saddr os_at = fa_saddr_of(os);
  FA_UNROLL
  for (int j = 0; j < ${DP // 16}; ++j) {
    unsigned r4[4];
    FA_UNROLL
    for (int m = 0; m < 4; ++m)
      r4[m] = fa_pack_${OT}x2(fa_rescale_f32(o[8 * j + 2 * m], inv_row[m & 1]),
                             fa_rescale_f32(o[8 * j + 2 * m + 1], inv_row[m & 1]));
    const int col = 16 * j + st_col;
    const unsigned at = (unsigned)(col / ${OCB}) * ${BM * SW}u + (unsigned)(st_row * ${SW} + (col % ${OCB}) * 2);
    fa_stmatrix_x4(os_at + fa_swizzle_offset(at, ${SW}), r4);
  }
  fa_fence_proxy_async();
  fa_named_bar_sync(4 + wg, 128);
$ if varlen then
  /* O's rows of this sequence only, 16 bytes at a time out of the tile (a
  ** TMA store of the box would write the next sequence's rows). */
  {
    unsigned short *const og = (unsigned short *)p.o + h * p.o_sh + (long long)(vq_lo_again + row0) * p.o_sn;
    for (int e = tid % 128; e < ${64 * (c.dim // 8)}; e += 128) {
      const int r = e / ${c.dim // 8}, col = 8 * (e % ${c.dim // 8});
      if (row0 + r < p.seq_q) {
        const unsigned at = (unsigned)(col / ${CB}) * ${BM * SW}u + (unsigned)(r * ${SW} + (col % ${CB}) * 2);
        fa_st_u32x4((fa_u32x4 *)(og + (long long)r * p.o_sn + col), fa_lds_u32x4((const fa_u32x4 *)(os + fa_swizzle_offset(at, ${SW}))));
      }
    }
  }
$   if persistent then
  fa_named_bar_sync(4 + wg, 128);  /* every row is out of V's ring */
  if (tid % 128 == 0) fa_mbar_arrive(obar);
  kv += n_blocks, ++nt;
$   end
$ elseif persistent then
  if (tid % 128 == 0) {
    if (row0 < p.seq_q) {
$   for j = 0, DP // OCB - 1 do
      fa_tma_store_4d(&${TM}.tmap[3], os + ${j * BM * SW}, ${j * OCB}, row0, h, b);
$   end
      fa_tma_store_commit();
      fa_tma_store_wait(0);
    }
    fa_mbar_arrive(obar);
  }
  kv += n_blocks, ++nt;
$ else
  if (tid % 128 == 0 && row0 < p.seq_q) {
$   for j = 0, DP // OCB - 1 do
    fa_tma_store_4d(&${TM}.tmap[3], os + ${j * BM * SW}, ${j * OCB}, row0, h, b);
$   end
    fa_tma_store_commit();
    fa_tma_store_wait(0);
  }
$ end
  }
}
