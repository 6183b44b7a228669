$ -- wgbwd.cu: the backward pass on wgmma, TMA and mbarriers (see wgbwd.lua).
$ -- The dkdv kernel's main loop over the Q blocks, per consumer: wait for
$ -- the stage (landed), S^T and dP^T (issue_s_dp), P^T and dS^T
$ -- (softmax_grad), dS^T to shared memory (store_ds), dV and dK
$ -- (issue_dv_dk), dQ's share (dq_tiles, or dq_own with dq_split = own);
$ -- each a Lua function below, a Q block's steps q_block, which the loop
$ -- over the blocks a mask reaches into and the loop over the rest share.
$ local c, P, T = args.cfg, args.P, args.T
$ local causal = c.causal == 1
$ local BM, BN, C, S, DP, NCB = P.BM, P.BN, P.C, P.S, P.DP, P.NCB
$ local SW, CB = 128, 64
$ local NS = BM // 2      -- S^T's (and dP^T's) accumulators per thread
$ local ND = DP // 2      -- dK's (and dV's)
$ local KS = BM // 16     -- k16 steps of dV's and dK's products: the Q block's rows
$ local NDB = DP // 64    -- dQ's 64-column tiles across the head dim
$ -- dQ's share over each consumer's own keys (wgbwd.lua's dq_split): the
$ -- consumers add to one room in turn, a Q block's adds of consumer 0 before
$ -- consumer 1's (named barriers 6 and 7), so that the order of the adds to
$ -- an element is the CTA's, not the schedule's
$ local own = c.dq_split == "own"
$ local handoff = own and C > 1
$ -- ping-pong: the two consumers take turns issuing S^T and dP^T through
$ -- named barriers 2 + wg (FA3's forward warp scheduler barrier),
$ -- so that one's softmax runs under the others' products.
$ local pp = c.pingpong == 1
$ local function turn_begin()
$   if pp then
    fa_named_bar_sync(2 + wg, 256);
$   end
$ end
$ local function turn_end()
$   if pp then
    if (wg == 0 || it + 1 < n_iter) fa_named_bar_arrive(3 - wg, 256);
$   end
$ end
/* ${args.entry}: the backward pass on wgmma, Q blocks of ${BM} rows, K/V blocks of ${BN} keys
** (${C} consumer warpgroup(s) of 64 keys and a producer), ${S} stages of Q and dO; head dim
** ${c.dim}${DP > c.dim and " padded to " .. DP or ""}; dQ by atomics into a float accumulator. */

$ -- The tensors of query head hv of batch b: O, dO, lse, D, and the room of
$ -- dQ's accumulator for the Q block at q0.
$ local function qhead(hv)
  const float *const lg = (const float *)p.lse + ((long long)b * p.heads + ${hv}) * p.seq_q;
  float *const dg = (float *)p.ws + ((long long)b * p.heads + ${hv}) * p.seq_q;
  /* dQ's float accumulator per (batch, head): a room of ${BM} x ${DP} floats
  ** per Q block, in the order the consumers add to it (dq_tiles, dq_own),
  ** which dqconvert undoes. */
  float *const qacc = (float *)p.ws2 + ((long long)b * p.heads + ${hv}) *
                      ((p.seq_q + ${BM - 1}) / ${BM}) * ${BM * DP} + (long long)q0 * ${DP};
  (void)lg; (void)dg; (void)qacc;
$ end

/* D = rowsum(dO * O) - dlse in fp32, a warp per row, its lanes across the
** head dim; dQ's accumulator zeroed, the block's whole room. */
FA_SM90_KERNEL(${args.entry}_pre, ${P.threads})
{
  const int tid = fa_tid(), lane = tid & 31, warp = tid >> 5;
  const int h = fa_bid_y(), b = fa_bid_z(), q0 = fa_bid_x() * ${BM};
  const unsigned short *const og = (const unsigned short *)p.o + b * p.o_sb + h * p.o_sh;
  const unsigned short *const dog = (const unsigned short *)p.dout + b * p.do_sb + h * p.do_sh;
  $ qhead("h")
  for (int r = warp; r < ${BM}; r += ${P.threads // 32}) {
    const int gr = q0 + r;
    if (gr >= p.seq_q) break;
    float sum = 0.f;
    for (int d = lane; d < ${c.dim}; d += 32)
      sum += fa_${T}_to_f32(fa_ldg_u16(dog + gr * p.do_sn + d)) * fa_${T}_to_f32(fa_ldg_u16(og + gr * p.o_sn + d));
    FA_UNROLL
    for (int m = 16; m >= 1; m >>= 1) sum += fa_shfl_xor_f32(sum, m);
    /* A gradient through the logsumexp adds P dlse to dS: D takes it off. */
    if (p.dlse) sum -= fa_ldg_f32((const float *)p.dlse + ((long long)b * p.heads + h) * p.seq_q + gr);
    if (lane == 0) fa_st_f32(dg + gr, sum);
  }
  for (int e = tid; e < ${BM * DP}; e += ${P.threads}) fa_st_f32(qacc + e, 0.f);
}

$ -- The stage's Q and dO freed: dV's and dK's products are done with them.
$ local function release()
    fa_mbar_arrive(&emptyq[i]);
    fa_mbar_arrive(&emptydo[i]);
$ end

$ -- S^T = K Q^T and dP^T = V dO^T for this consumer's 64 keys, one group:
$ -- A (K, V) and B (Q, dO of stage i) K-major, k16 steps over the padded
$ -- dim, a step 32 bytes into a swizzled row or the next column block.
$ local function issue_s_dp()
    fa_wgmma_fence();
$   for _, gemm in ipairs({ { "s", "kd", "qd" }, { "dp", "vd", "dod" } }) do
$     for kk = 0, DP // 16 - 1 do
$       local blk, within = (kk * 16) // CB, (kk * 16) % CB * 2
    fa_wgmma_ss_${T}(${BM}, ${gemm[1]}, fa_wgmma_desc_advance(${gemm[2]}, ${blk * BN * SW + within}), fa_wgmma_desc_advance(${gemm[3]}, ${blk * BM * SW + within}), ${kk > 0 and 1 or 0}, 0, 0);
$     end
$   end
    fa_wgmma_commit();
$ end

$ -- P^T = exp2(S^T log2e - lse) and dS^T = P^T (dP^T - D) on the fragments,
$ -- in place (s, dp); 0 past seq_k and, causal, above the diagonal (only in
$ -- the blocks that reach there: edge). Rows past seq_q have lse +inf and D
$ -- 0, so P is 0 there. Element 4 j + 2 hh + e of a fragment: key 16 w + g
$ -- + 8 hh of the consumer's, query 8 j + 2 t + e of the block.
$ local function softmax_grad()
    const float *const lse_i = lse_s + i * ${BM}, *const d_i = d_s + i * ${BM};
    FA_UNROLL
    for (int j = 0; j < ${BM // 8}; ++j) {
      const float l0 = fa_lds_f32(lse_i + 8 * j + 2 * t), l1 = fa_lds_f32(lse_i + 8 * j + 2 * t + 1);
      const float d0 = fa_lds_f32(d_i + 8 * j + 2 * t), d1 = fa_lds_f32(d_i + 8 * j + 2 * t + 1);
      FA_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float *const sv = s + 4 * j + 2 * hh, *const dsv = dp + 4 * j + 2 * hh;
        sv[0] = fa_exp2_f32(sv[0] * sl2 - l0);
        sv[1] = fa_exp2_f32(sv[1] * sl2 - l1);
        if (edge) {
          const int key = kw + 16 * w + g + 8 * hh, q = q0 + 8 * j + 2 * t;
$ if causal then
          if (!(key < p.seq_k && key <= q + off)) sv[0] = 0.f;
          if (!(key < p.seq_k && key <= q + 1 + off)) sv[1] = 0.f;
$ else
          if (key >= p.seq_k) sv[0] = 0.f, sv[1] = 0.f;
          (void)q;
$ end
        }
        dsv[0] = sv[0] * (dsv[0] - d0);
        dsv[1] = sv[1] * (dsv[1] - d1);
      }
    }
    /* P^T and dS^T in 16 bits as the A fragments of dV's and dK's k16 steps. */
    FA_UNROLL
    for (int kk = 0; kk < ${KS}; ++kk) {
      FA_UNROLL
      for (int r = 0; r < 4; ++r) {
        pa[kk][r] = fa_pack_${T}x2(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
        da[kk][r] = fa_pack_${T}x2(dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
      }
    }
$ end

$ -- dS^T into buffer it & 1 (rows the block's keys, column blocks of 64
$ -- queries, under the swizzle), by stmatrix.x4 per 16 queries, for dQ's
$ -- product; made visible to wgmma (the async proxy).
$ local function store_ds()
    {
      const fa_saddr dst = ds_at + (unsigned)(it & 1) * ${P.ds_bytes}u;
$   for j = 0, KS - 1 do
$     local blk, within = (16 * j) // CB, (16 * j) % CB * 2
      fa_stmatrix_x4(dst + (${blk * BN * SW}u + ((${within}u + dsc) ^ dsx)), da[${j}]);
$   end
    }
    fa_fence_proxy_async();
$ end

$ -- dV += P^T dO and dK += dS^T Q, P^T and dS^T from registers, dO and Q
$ -- of stage i MN-major (the head dim contiguous), a k16 step 16 rows.
$ local function issue_dv_dk()
    fa_wgmma_fence();
$   for kk = 0, KS - 1 do
    fa_wgmma_rs_${T}(${DP}, dv, pa[${kk}], fa_wgmma_desc_advance(dot, ${kk * 16 * SW}), 1, 1);
$   end
$   for kk = 0, KS - 1 do
    fa_wgmma_rs_${T}(${DP}, dk, da[${kk}], fa_wgmma_desc_advance(qt, ${kk * 16 * SW}), 1, 1);
$   end
    fa_wgmma_commit();
$ end

$ -- dQ's share of block `which` (a C expression of its iteration), dS K:
$ -- the 64 x 64 tile dq_tile + round * C of the block's (mt rows, nb
$ -- columns), by wgmma with A = dS (buffer which & 1, MN-major: the
$ -- queries contiguous) and B = K (MN-major), over the block's keys.
$ local function issue_dq(which, round)
        {
          const int tile = dq_tile + ${round * C}, mt = tile / ${NDB}, nb = tile % ${NDB};
          const fa_wgmma_desc ad = fa_wgmma_desc_advance(dsd, (unsigned)((${which}) & 1) * ${P.ds_bytes}u + (unsigned)mt * ${BN * SW}u);
          const fa_wgmma_desc bd = fa_wgmma_desc_advance(ktd, (unsigned)nb * ${BN * SW}u);
          fa_wgmma_fence();
$   for kk = 0, BN // 16 - 1 do
          fa_wgmma_ss_${T}(64, dq[0], fa_wgmma_desc_advance(ad, ${kk * 16 * SW}), fa_wgmma_desc_advance(bd, ${kk * 16 * SW}), ${kk > 0 and 1 or 0}, 1, 1);
$   end
          fa_wgmma_commit();
        }
$ end

$ -- Slot `slot` of dq, a done 64 x 64 tile, added to the accumulator's tile
$ -- at `tile` (a C expression, floats) by atomics, element i of lane l of
$ -- warp w at (w 32 + i) 32 + l: a warp's add is one 128-byte line.
$ local function add_dq(tile, slot)
        fa_wgmma_fence_acc(32, dq[${slot}]);
        {
          float *const at = ${tile} + w * 1024 + l;
          FA_UNROLL
          for (int e = 0; e < 32; ++e) fa_atomic_add_f32(at + 32 * e, dq[${slot}][e]);
        }
$ end

$ -- Each round's tile computed and added in turn,
$ -- the first waiting with dV's and dK's products (a consumer without a
$ -- tile, for those alone). With ping-pong the consumers issue the first
$ -- round in turn too (named barrier 5), so that the first one's product
$ -- is done, and its adds under way, while the second one's runs.
$ local function dq_tiles()
$   for r = 0, P.dq_rounds - 1 do
$     local guard = r * C + C > P.dq_tiles and "if (dq_tile + " .. r * C .. " < " .. P.dq_tiles .. ") " or ""
$     if r == 0 and pp then
    if (wg == 1) fa_named_bar_sync(5, 256);
$     end
    ${guard}{
      $ issue_dq("it", r)
    }
$     if r == 0 and pp then
    if (wg == 0) fa_named_bar_arrive(5, 256);
$     end
    fa_wgmma_wait(0);
$     if r == 0 then
    $ release()
$     end
    ${guard}{
      $ add_dq("qacc + (dq_tile + " .. r * C .. ") * 4096", 0)
    }
$   end
$ end

$ -- dq_split = "own": dQ's share of this consumer's keys alone, dS K over
$ -- them, so that no consumer waits for another's dS^T: the block's 64 x 64
$ -- tiles (mt rows, nb columns) by wgmma with A = its rows of dS^T and B =
$ -- its rows of K (both MN-major), each a group of its own, up to
$ -- P.own_window in flight; each added by atomics as dq_tiles adds its
$ -- (twice the adds of "block"), once done, while the next computes; the
$ -- consumers' adds in turn (handoff).
$ local function issue_own(t)
$   local mt, nb = t // NDB, t % NDB
    fa_wgmma_fence();
    {
      const fa_wgmma_desc ad = fa_wgmma_desc_advance(dsd, (unsigned)(it & 1) * ${P.ds_bytes}u + ${mt * BN * SW}u + (unsigned)wg * ${64 * SW}u);
      const fa_wgmma_desc bd = fa_wgmma_desc_advance(ktd, ${nb * BN * SW}u + (unsigned)wg * ${64 * SW}u);
$   for kk = 0, 3 do
      fa_wgmma_ss_${T}(64, dq[${t % P.own_window}], fa_wgmma_desc_advance(ad, ${kk * 16 * SW}), fa_wgmma_desc_advance(bd, ${kk * 16 * SW}), ${kk > 0 and 1 or 0}, 1, 1);
$   end
    }
    fa_wgmma_commit();
$ end
$ local function dq_own()
$   local NT, W = P.dq_tiles, P.own_window
$   local groups = {}   -- the wgmma groups committed, in order: a tile's index, or "dvdk"
$   -- One tile in flight (d128): it goes before dV's and dK's products, so
$   -- that it is added while they run; all of them (to d64): after, issued
$   -- before the barrier on dS^T (the loop below).
$   if W == NT then
$     groups[#groups + 1] = "dvdk"
$   end
$   for t = 0, W - 1 do
    $ issue_own(t)
$     groups[#groups + 1] = t
$   end
$   if W < NT then
    $ issue_dv_dk()
$     groups[#groups + 1] = "dvdk"
$   end
$   local function pending_after(g)
$     for k, v in ipairs(groups) do if v == g then return #groups - k end end
$   end
$   local released = false   -- the stage released: dV's and dK's products done
$   for t = 0, NT - 1 do
    fa_wgmma_wait(${pending_after(t)});
$     if not released and pending_after("dvdk") >= pending_after(t) then
$       released = true
    $ release()
$     end
$     if handoff and t == 0 then
    fa_named_bar_sync(6 + wg, 256);  /* the other consumer's adds, before this one's */
$     end
    $ add_dq("qacc + " .. t * 4096, t % W)
$     if handoff and t == NT - 1 then
    if (wg == 0 || it + 1 < n_iter) fa_named_bar_arrive(7 - wg, 256);
$     end
$     if t + W < NT then
    $ issue_own(t + W)
$       groups[#groups + 1] = t + W
$     end
$   end
$   if not released then
    fa_wgmma_wait(0);
    $ release()
$   end
$ end

$ -- The loop over the Q blocks qb0 .. n_qb - 1 of each query head hq of
$ -- the group, by counters (no division by nq an iteration).
$ local function q_blocks()
  for (int it = 0, qb = qb0, hq = h0; it < n_iter; ++it, qb = qb + 1 < n_qb ? qb + 1 : qb0, hq += qb == qb0) {
$ end

$ -- Whether the Q block of first row q0 (an expression) has keys past
$ -- seq_k or, causal, above the diagonal: the mask's code runs on it.
$ local function reaches_mask(q0)
$   if causal then return "k0 + " .. BN .. " > p.seq_k || k0 + " .. BN - 1 .. " > " .. q0 .. " + off" end
$   return "k0 + " .. BN .. " > p.seq_k"
$ end

$ -- One Q block of the consumer's loop; masked: the block reaches the
$ -- mask (edge in softmax_grad); nil: the block says whether.
$ local function q_block(masked)
      const int i = it % ${S}, q0 = qb * ${BM};
      $ qhead("hq")
      const fa_wgmma_desc qd = fa_wgmma_desc_advance(qd0, (unsigned)i * ${P.q_bytes}u);
      const fa_wgmma_desc dod = fa_wgmma_desc_advance(dod0, (unsigned)i * ${P.q_bytes}u);
      const fa_wgmma_desc qt = fa_wgmma_desc_advance(qt0, (unsigned)i * ${P.q_bytes}u);
      const fa_wgmma_desc dot = fa_wgmma_desc_advance(dot0, (unsigned)i * ${P.q_bytes}u);
$ if masked ~= nil then
      const int edge = ${masked and 1 or 0};
$ else
      const int edge = ${reaches_mask("q0")};
$ end
      fa_mbar_wait(&fullq[i], (it / ${S}) & 1);
      fa_mbar_wait(&fulldo[i], (it / ${S}) & 1);
      $ turn_begin()
      $ issue_s_dp()
      $ turn_end()
      fa_wgmma_wait(0);
      fa_wgmma_fence_acc(${BM}, s);
      fa_wgmma_fence_acc(${BM}, dp);
      $ softmax_grad()
      $ store_ds()
$ if not (own and P.own_window < P.dq_tiles) then
      $ issue_dv_dk()
$ end
$ if own then
      fa_named_bar_sync(8 + wg, 128);  /* this consumer's dS^T, every warp's */
      $ dq_own()
$ else
      /* dS^T of every consumer is in its buffer; the other buffer's readers,
      ** the block before's dQ products, are done (each waited for its own). */
      fa_named_bar_sync(1, ${128 * C});
      $ dq_tiles()
$ end
$ end

$ -- The producer's fill of stage i with tensor t (q: Q and each row's lse;
$ -- do: dO and D): once the consumers are done with the stage, the tile by
$ -- TMA (tensor map tmap, to shared offset off), then the rows from
$ -- registers (reg) to shared memory (rows), then the lanes' arrive.
$ local function fill(t, rows, reg, tmap, off)
        if (it >= ${S}) fa_mbar_wait(&empty${t}[i], ((it / ${S}) & 1) ^ 1);  /* the stage is free */
        if (leader) {
          fa_mbar_arrive_expect_tx(&full${t}[i], ${P.q_bytes});
$   for j = 0, NCB - 1 do
          fa_tma_load_4d(smem + ${off + j * BM * SW} + i * ${P.q_bytes}, &p.tmap[${tmap}], ${j * CB}, q0, hq, b, &full${t}[i]);
$   end
        }
        FA_UNROLL
        for (int k = 0; k < ${(BM + 31) // 32}; ++k) fa_sts_f32(${rows} + i * ${BM} + lane + 32 * k, ${reg}[k]);
        fa_mbar_arrive(&full${t}[i]);
$ end

/* dK and dV of K/V block fa_bid_x() of K/V head fa_bid_y(), over the Q
** blocks of its query heads that see it. */
FA_SM90_KERNEL(${args.entry}_dkdv, ${P.threads})
{
  const int tid = fa_tid(), wg = fa_warpgroup();
  const int hk = fa_bid_y(), b = fa_bid_z(), k0 = fa_bid_x() * ${BN};
  const int group = p.kv_group > 1 ? p.kv_group : 1, h0 = hk * group;
  const int off = p.seq_k - p.seq_q;  /* key c is visible to row r when c <= r + off */
  const int n_qb = (p.seq_q + ${BM - 1}) / ${BM};
$ if causal then
  /* The first Q block with a row that sees key k0. */
  const int qb0 = k0 - off <= 0 ? 0 : (k0 - off) / ${BM};
$ else
  const int qb0 = 0;
$ end
  const int nq = n_qb > qb0 ? n_qb - qb0 : 0, n_iter = group * nq;
  unsigned char *const raw = (unsigned char *)fa_smem_base();
  /* The tiles at the swizzle's repeat, 1024 bytes. */
  unsigned char *const smem = raw + ((1024u - (unsigned)((unsigned long long)raw & 1023u)) & 1023u);
  float *const lse_s = (float *)(smem + ${P.off_lse}), *const d_s = (float *)(smem + ${P.off_d});
  unsigned long long *const kvbar = (unsigned long long *)(smem + ${P.off_bar});
  /* Each stage's Q and lse, and its dO and D, on barriers of their own
  ** (FA3's two pipelines): landed (fullq, fulldo), and the consumers done
  ** with them (emptyq, emptydo). */
  unsigned long long *const fullq = kvbar + 1, *const fulldo = fullq + ${S};
  unsigned long long *const emptyq = fulldo + ${S}, *const emptydo = emptyq + ${S};
  if (tid == 0) {
    fa_mbar_init(kvbar, 1);
    for (int i = 0; i < ${S}; ++i) {
      fa_mbar_init(&fullq[i], 33);         /* the leader's TMA bytes, then the producer warp's lanes (lse) */
      fa_mbar_init(&fulldo[i], 33);        /* and (D) */
      fa_mbar_init(&emptyq[i], ${128 * C});  /* every consumer thread, done with the stage */
      fa_mbar_init(&emptydo[i], ${128 * C});
    }
    fa_fence_mbar_init();
  }
  fa_syncthreads();

  if (wg == ${C}) {
    /* The producer: K and V once, then Q and dO of each Q block of each
    ** query head of the group into the ring, with the rows' lse (log2
    ** units) and D; one elected thread issues the loads. */
    fa_setmaxnreg_dec(${P.producer_regs});
    if (tid / 32 == ${4 * C} && n_iter > 0) {
      const int lane = tid % 32, leader = fa_elect_one();
      const float pos_inf = -fa_neg_inf_f32();
      if (leader) {
        fa_mbar_arrive_expect_tx(kvbar, ${2 * P.kv_bytes});
$ for j = 0, NCB - 1 do
        fa_tma_load_4d(smem + ${P.off_k + j * BN * SW}, &p.tmap[1], ${j * CB}, k0, hk, b, kvbar);
        fa_tma_load_4d(smem + ${P.off_v + j * BN * SW}, &p.tmap[2], ${j * CB}, k0, hk, b, kvbar);
$ end
      }
      $ q_blocks()
        const int i = it % ${S}, q0 = qb * ${BM};
        const float *const lg = (const float *)p.lse + ((long long)b * p.heads + hq) * p.seq_q;
        const float *const dg = (const float *)p.ws + ((long long)b * p.heads + hq) * p.seq_q;
        /* The rows' lse (log2 units) and D into registers first, so that
        ** their loads from global memory wait under the stage's wait. */
        float lse_r[${(BM + 31) // 32}], d_r[${(BM + 31) // 32}];
        FA_UNROLL
        for (int k = 0; k < ${(BM + 31) // 32}; ++k) {
          const int gr = q0 + lane + 32 * k;
          lse_r[k] = gr < p.seq_q ? fa_ldg_f32(lg + gr) * 1.44269504088896340736f : pos_inf;
          d_r[k] = gr < p.seq_q ? fa_ld_f32(dg + gr) : 0.f;
        }
        $ fill("q", "lse_s", "lse_r", 0, P.off_q)
        $ fill("do", "d_s", "d_r", 3, P.off_do)
      }
    }
    return;
  }

  /* A consumer warpgroup: keys kw .. kw + 63. */
  fa_setmaxnreg_inc(${P.consumer_regs});
  const int w = (tid % 128) / 32, l = tid % 32, g = l / 4, t = l % 4;
  const int kw = k0 + 64 * wg;
  const float sl2 = p.scale_log2_f32;
  /* The wgmma descriptors, built once: K and V (this consumer's 64 rows)
  ** and Q and dO (stage 0) K-major (SBO between 8-row groups); Q, dO, K
  ** and dS^T MN-major (LBO between column blocks, SBO between 8-row groups). */
  const fa_wgmma_desc kd = fa_wgmma_desc_make(smem + ${P.off_k} + wg * ${64 * SW}, 16, ${8 * SW}, ${SW});
  const fa_wgmma_desc vd = fa_wgmma_desc_make(smem + ${P.off_v} + wg * ${64 * SW}, 16, ${8 * SW}, ${SW});
  const fa_wgmma_desc qd0 = fa_wgmma_desc_make(smem + ${P.off_q}, 16, ${8 * SW}, ${SW});
  const fa_wgmma_desc dod0 = fa_wgmma_desc_make(smem + ${P.off_do}, 16, ${8 * SW}, ${SW});
  const fa_wgmma_desc qt0 = fa_wgmma_desc_make(smem + ${P.off_q}, ${BM * SW}, ${8 * SW}, ${SW});
  const fa_wgmma_desc dot0 = fa_wgmma_desc_make(smem + ${P.off_do}, ${BM * SW}, ${8 * SW}, ${SW});
  const fa_wgmma_desc ktd = fa_wgmma_desc_make(smem + ${P.off_k}, ${BN * SW}, ${8 * SW}, ${SW});
  const fa_wgmma_desc dsd = fa_wgmma_desc_make(smem + ${P.off_ds}, ${BN * SW}, ${8 * SW}, ${SW});
  /* stmatrix.x4 (dS^T): lane l = 8 m + i brings row i of matrix m, the
  ** matrices rows 0-7 and 8-15 of the warp's 16 by columns 0-7 and 8-15
  ** of 16 queries: its row's address, and its chunk's offset, which the
  ** swizzle XORs with dsx. */
  const unsigned ds_row = (unsigned)(64 * wg + 16 * w + (l & 7) + 8 * ((l >> 3) & 1)) * ${SW}u;
  const unsigned dsx = fa_swizzle_offset(ds_row, ${SW}) ^ ds_row, dsc = 16u * (unsigned)(l >> 4);
  const fa_saddr ds_at = fa_saddr_of(smem + ${P.off_ds}) + ds_row;
  float dk[${ND}], dv[${ND}];  /* the wgmma D fragment: element i is key 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2 */
  float s[${NS}], dp[${NS}], dq[${P.own_window}][32];  /* own_window is 1 with dq_split = block */
$ if not own then
  const int dq_tile = wg;  /* this consumer's first tile of dQ's share; the next ${C} on */
$ end
  unsigned pa[${KS}][4], da[${KS}][4];
  FA_UNROLL
  for (int e = 0; e < ${ND}; ++e) dk[e] = 0.f, dv[e] = 0.f;
  fa_wgmma_fence_acc(${DP}, dk);
  fa_wgmma_fence_acc(${DP}, dv);
  if (n_iter > 0) fa_mbar_wait(kvbar, 0);
$ if pp then
  if (wg == 1 && n_iter > 0) fa_named_bar_arrive(2, 256);  /* consumer 0 takes the first turn */
$ end
$ if handoff then
  if (wg == 1 && n_iter > 0) fa_named_bar_arrive(6, 256);  /* and adds to dQ first */
$ end
  /* The Q blocks of each query head of the group, in the producer's
  ** order: first those the mask or the keys' tail reaches into (the
  ** mask's code), then the rest, in a loop of their own without it
  ** (wgbwd.lua's mask_apart; else one loop, each block testing). */
  int it = 0;
  for (int hq = h0; hq < h0 + group; ++hq) {
    int qb = qb0;
$ if not P.mask_apart then
    for (; qb < n_qb; ++qb, ++it) {
      $ q_block(nil)
    }
$ else
    for (; qb < n_qb && (${reaches_mask("qb * " .. BM)}); ++qb, ++it) {
      $ q_block(true)
    }
    for (; qb < n_qb; ++qb, ++it) {
      $ q_block(false)
    }
$ end
  }
  fa_wgmma_fence_acc(${DP}, dk);
  fa_wgmma_fence_acc(${DP}, dv);

  /* Epilogue: dK (times the softmax scale) and dV of this consumer's keys,
  ** a pair of columns a store; rows past seq_k and the padding not stored. */
  const float scale = (float)(p.scale_log2 * 0.69314718055994530942);
  unsigned short *const dkg = (unsigned short *)p.dk + b * p.dk_sb + hk * p.dk_sh;
  unsigned short *const dvg = (unsigned short *)p.dv + b * p.dv_sb + hk * p.dv_sh;
  FA_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    const int key = kw + 16 * w + g + 8 * hh;
    if (key < p.seq_k) {
      FA_UNROLL
      for (int j = 0; j < ${DP // 8}; ++j) {
        const int col = 8 * j + 2 * t;
$ if DP > c.dim then
        if (col >= ${c.dim}) break;
$ end
        fa_st_u32((unsigned *)(dkg + key * p.dk_sn + col),
                  fa_pack_${T}x2(dk[4 * j + 2 * hh] * scale, dk[4 * j + 2 * hh + 1] * scale));
        fa_st_u32((unsigned *)(dvg + key * p.dv_sn + col), fa_pack_${T}x2(dv[4 * j + 2 * hh], dv[4 * j + 2 * hh + 1]));
      }
    }
  }
}

/* dQ = scale * the accumulator dkdv added to: element (r, d) of the block
** where ${own and "dq_own" or "dq_tiles"}' warp w added it, as the fragment's element i of lane
** 4 g + t of tile (r / 64, d / 64). */
FA_SM90_KERNEL(${args.entry}_dqconvert, ${P.threads})
{
  const int tid = fa_tid();
  const int h = fa_bid_y(), b = fa_bid_z(), q0 = fa_bid_x() * ${BM};
  $ qhead("h")
  const float scale = (float)(p.scale_log2 * 0.69314718055994530942);
  unsigned short *const dqg = (unsigned short *)p.dq + b * p.dq_sb + h * p.dq_sh;
  for (int e = tid; e < ${BM * c.dim}; e += ${P.threads}) {
    const int r = e / ${c.dim}, d = e - r * ${c.dim};
    if (q0 + r >= p.seq_q) break;
    const int rr = r % 64, cc = d % 64;
    const int i = 4 * (cc / 8) + 2 * (rr % 16 / 8) + cc % 2, lane = 4 * (rr % 8) + cc % 8 / 2;
    const int at = ((r / 64) * ${NDB} + d / 64) * 4096 + (rr / 16) * 1024 + i * 32 + lane;
    fa_st_u16(dqg + (q0 + r) * p.dq_sn + d, fa_f32_to_${T}(fa_ld_f32(qacc + at) * scale));
  }
}
