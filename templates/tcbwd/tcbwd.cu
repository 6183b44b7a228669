$ -- tcbwd.cu: FlashAttention-2's backward pass on tensor cores (see tcbwd.lua).
$ -- The dkdv kernel is its main loop over the Q blocks: copy the block
$ -- (load_q), S and dP (gemm_s_dp), P and dS (softmax_grad), dV and dK
$ -- (gemm_dv_dk), dQ's share when atomic (gemm_dq); each a Lua function
$ -- below that emits its code.
$ local c, P, T = args.cfg, args.P, args.T
$ local vl = require("varlen")
$ local causal, atomic = c.causal == 1, c.dq == "atomic"
$ -- qhead: dkdv's CTAs per query head, their shares of dK and dV summed by dkvsum under GQA
$ local qh = c.qhead == 1
$ local D, BM, BN, NT, W = P.D, P.BM, P.BN, P.NT, P.W
$ local MT, KT, NTL, DT = P.m_tiles, P.k_tiles, P.n_tiles, P.d_tiles
$ local RB, SRB, dim = P.row_bytes, P.s_row_bytes, P.dim
$ -- V's head dim (V, O, dO, dV), its padding, rows and n8 tiles per warp of
$ -- dV; DV == D renders the kernels of one head dim.
$ local DV, dim_v, VRB, DVTW = P.DV, P.dim_v, P.v_row_bytes, P.dv_tiles
$ local same = DV == D and dim_v == dim
$ local KW, DTW = P.key_warps, P.dw_tiles
$ local SN, QDT = P.split_n, P.q_tiles
$ local WR, KN, KWR = P.warp_rows, BN // SN, BN // KW  -- a warp's rows and keys of S; its keys of dK, dV
$ -- dQ's product takes dS from the registers when a warp holds whole rows
$ -- of it (split_n = 1), else from its shared-memory tile.
$ local dq_from_smem = SN > 1
$ local function cdiv(a, b) return (a + b - 1) // b end
$ -- A score or mask modification (mod.lua): its functions, its derivative's
$ -- too, precede the kernels.
$ local mod = c.mod
/* ${args.entry}: the backward pass on tensor cores, tile ${BM}x${BN}, ${W} warps.
** A warp owns ${WR} rows by ${KN} keys of S and dP (${MT} m16 tile(s)), ${KWR} keys of dK and dV
$ if same then
** (${KT} m16 tile(s)) by ${DTW * 8} of the head dim; head dim ${dim}${dim < D and " padded to " .. D or ""}. dQ ${atomic and "by atomics into a float accumulator" or "in a pass of its own"}. */
$ else
** (${KT} m16 tile(s)) by ${DTW * 8} of the head dim (dK) and ${DVTW * 8} of V's (dV); head dim ${dim}${dim < D and " padded to " .. D or ""},
** V's ${dim_v}${dim_v < DV and " padded to " .. DV or ""}. dQ ${atomic and "by atomics into a float accumulator" or "in a pass of its own"}. */
$ end

$ -- The tensors of query head hv of this batch: Q, O, dO, lse, D (and
$ -- dQ's accumulator).
$ local function qhead(hv)
  const unsigned short *const qg = (const unsigned short *)p.q + b * p.q_sb + ${hv} * p.q_sh${vl.bwd_row(c, "q")};
  const unsigned short *const og = (const unsigned short *)p.o + b * p.o_sb + ${hv} * p.o_sh${vl.bwd_row(c, "o")};
  const unsigned short *const dog = (const unsigned short *)p.dout + b * p.do_sb + ${hv} * p.do_sh${vl.bwd_row(c, "do")};
  const float *const lg = (const float *)p.lse + ${vl.lse_row(c, "b", hv)};
  float *const dg = (float *)p.ws + ((long long)b * p.heads + ${hv}) * ${vl.rows(c)};
$ if atomic then
  /* dQ's float accumulator per (batch, head): a room of ${BM} x ${D} floats
  ** per Q block (the rows rounded up to whole blocks), laid out in the
  ** order dkdv's warps add to it (gemm_dq_atomic), which dqconvert undoes. */
  float *const qacc = (float *)p.ws2 + ((long long)b * p.heads + ${hv}) *
                      ((${vl.rows(c)} + ${BM - 1}) / ${BM}) * ${BM * D};
  (void)qacc;
$ end
  (void)qg; (void)og; (void)dog; (void)lg; (void)dg;
$ if mod then
  /* the modification's head and what no row or key of it changes */
  const int mh = ${hv};
  const fa_mod_u mod_u = fa_mod_setup(b, mh, p.seq_q, p.seq_k, p.heads);
  (void)mh; (void)mod_u;
$ end
$ end

$ -- What every kernel of the op derives from the argument block: with
$ -- per_head the tensors of this (batch, head) (the dkdv kernel takes its
$ -- query heads' in its loop over them). per_head == false: a kernel over
$ -- K/V heads ("kv_heads" in its grid), h the first query head of its group.
$ local function setup(per_head)
  const int tid = fa_tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int group = p.kv_group > 1 ? p.kv_group : 1;
$ if per_head == false then
  const int hk = fa_bid_y(), b = fa_bid_z(), h = hk * group;
$ else
  const int h = fa_bid_y(), b = fa_bid_z();
  const int hk = FA_KV_HEAD(p, h);
$ end
  const unsigned short *const kg = (const unsigned short *)p.k + b * p.k_sb + hk * p.k_sh${vl.bwd_row(c, "k")};
  const unsigned short *const vg = (const unsigned short *)p.v + b * p.v_sb + hk * p.v_sh${vl.bwd_row(c, "v")};
$ if per_head ~= false then
  $ qhead("h")
$ end
  const int off = p.seq_k - p.seq_q; /* key c is visible to row r when c <= r + off */
  const float sl2 = p.scale_log2_f32;
  /* The softmax scale itself: dQ and dK carry it once. */
  const float scale = (float)(p.scale_log2 * 0.69314718055994530942);
  (void)lane; (void)warp; (void)kg; (void)vg; (void)group;
  (void)off; (void)sl2; (void)scale;
$ end

$ -- The fragment lanes and shared memory of the kernels that multiply.
$ -- ldmatrix x4: lane 8 j + mrow gives a row of matrix j. a_row/a_chunk
$ -- address the A fragment of a row-major tile (Q, dO, dS) and, with
$ -- .trans, the B fragment of one stored k-major (V's pattern: dO, Q, K
$ -- as the right operand of a product over their rows); b_row/b_chunk the
$ -- B fragment of a tile stored n-major (K's pattern: K, V in S and dP)
$ -- and, with .trans, the A fragment of a transposed one (P^T, dS^T).
$ local function lanes()
  const int g = lane >> 2, tig = lane & 3;       /* fragment row and column pair */
  const int mrow = lane & 7, mat = lane >> 3;
  const int a_row = mrow + 8 * (mat & 1), a_chunk = mat >> 1;
  const int b_row = mrow + 8 * (mat >> 1), b_chunk = mat & 1;
  unsigned char *const sm = (unsigned char *)fa_smem_base();
  const fa_saddr ss = fa_saddr_of(sm);
  float *const lse_s = (float *)(sm + ${P.off_lse});  /* the rows' lse, in log2 units */
  float *const d_s = (float *)(sm + ${P.off_d});      /* the rows' D */
  /* This warp's rows and keys of S and dP, and its rows and head-dim columns of dQ. */
  const int sw = warp % ${P.row_warps}, nw = warp / ${P.row_warps};
  (void)sw; (void)nw;
  (void)a_row; (void)a_chunk; (void)b_row; (void)b_chunk;
$ end

$ -- rows rows of a (seq, dim) 16-bit matrix from global row row0 into the
$ -- tile at byte offset tile; rows at or past limit, and the padded
$ -- columns, are zeros. Asynchronous with cp.async when dim is a multiple
$ -- of 8; the caller commits and waits. v: a matrix of V's head dim (V,
$ -- dO), its rows DV wide.
$ local function copy_tile(tile, src, stride, row0, limit, rows, v)
$   local D, RB, dim = D, RB, dim
$   if v then D, RB, dim = DV, VRB, dim_v end
$   local chunks = D // 8
$   local total = rows * chunks
  FA_UNROLL
  for (int i = 0; i < ${cdiv(total, NT)}; ++i) {
    const int e = tid + i * ${NT};
$   if total % NT ~= 0 then
    if (e < ${total}) {
$   else
    {
$   end
      const int r = e / ${chunks}, cc = e - r * ${chunks};
      const int gr = ${row0} + r;
      const int to = ${tile} + r * ${RB} + cc * 16;
$   if P.async_copy then
      const int bytes = gr < ${limit} && cc < ${dim // 8} ? 16 : 0;
      fa_cp_async_16(ss + to, bytes ? (const void *)(${src} + gr * ${stride} + cc * 8) : (const void *)${src}, bytes);
$   else
      unsigned w[4] = {0u, 0u, 0u, 0u};
      if (gr < ${limit}) {
        FA_UNROLL
        for (int t = 0; t < 8; ++t)
          if (cc * 8 + t < ${dim}) w[t >> 1] |= (unsigned)fa_ldg_u16(${src} + gr * ${stride} + cc * 8 + t) << (16 * (t & 1));
      }
      fa_u32x4 v;
      v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];
      fa_sts_u32x4((fa_u32x4 *)(sm + to), v);
$   end
    }
  }
$ end

$ -- K and V rows k0.. into their tiles.
$ local function load_kv()
  $ copy_tile(P.off_k, "kg", "p.k_sn", "k0", "p.seq_k", BN)
  $ copy_tile(P.off_v, "vg", "p.v_sn", "k0", "p.seq_k", BN, true)
$ end

$ -- Q and dO rows q0.. into their tiles, with each row's lse (log2 units)
$ -- and D; 0 past seq_q.
$ local function load_q()
  $ copy_tile(P.off_q, "qg", "p.q_sn", "q0", "p.seq_q", BM)
  $ copy_tile(P.off_do, "dog", "p.do_sn", "q0", "p.seq_q", BM, true)
  for (int r = tid; r < ${BM}; r += ${NT}) {
    const int gr = q0 + r;
    fa_sts_f32(lse_s + r, gr < p.seq_q ? fa_ldg_f32(lg + gr) * 1.44269504088896340736f : 0.f);
    fa_sts_f32(d_s + r, gr < p.seq_q ? fa_ld_f32(dg + gr) : 0.f);
  }
$ end

$ -- Every copy in flight has landed, for every thread.
$ local function landed()
  fa_cp_async_commit();
  fa_cp_async_wait(0);
  fa_syncthreads();
$ end

$ -- acc = A B^T for the warp's rows and keys of the Q and K/V blocks, on
$ -- the tensor cores: A a row-major tile of the Q block (Q, dO), B one of
$ -- the K/V block (K, V); v: both of V's head dim (dO, V).
$ local function gemm_rows_keys(acc, a_tile, b_tile, v)
$   local D, RB = D, RB
$   if v then D, RB = DV, VRB end
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int n = 0; n < ${NTL}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) ${acc}[mt][n][i] = 0.f;
    }
  }
  FA_UNROLL
  for (int kk = 0; kk < ${D // 16}; ++kk) {
    unsigned a[${MT}][4];
    FA_UNROLL
    for (int mt = 0; mt < ${MT}; ++mt)
      fa_ldmatrix_x4(a[mt], ss + (${a_tile} + (sw * ${WR} + mt * 16 + a_row) * ${RB} + (2 * kk + a_chunk) * 16));
    FA_UNROLL
    for (int n2 = 0; n2 < ${NTL // 2}; ++n2) {
      unsigned b[4];
      fa_ldmatrix_x4(b, ss + (${b_tile} + (nw * ${KN} + n2 * 16 + b_row) * ${RB} + (2 * kk + b_chunk) * 16));
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) {
        fa_mma_m16n8k16_${T}(${acc}[mt][2 * n2], a[mt], b, ${acc}[mt][2 * n2]);
        fa_mma_m16n8k16_${T}(${acc}[mt][2 * n2 + 1], a[mt], b + 2, ${acc}[mt][2 * n2 + 1]);
      }
    }
  }
$ end

$ -- S = Q K^T, then dP = dO V^T, each its own product (as FlashAttention-2
$ -- has them), so that the fragments of only one are live at a time.
$ local function gemm_s_dp()
  /* S = Q K^T, dP = dO V^T: rows sw * ${WR}.., keys nw * ${KN}... */
  float s[${MT}][${NTL}][4], dp[${MT}][${NTL}][4];
  $ gemm_rows_keys("s", P.off_q, P.off_k)
  $ gemm_rows_keys("dp", P.off_do, P.off_v, true)
$ end

$ -- P = exp2(S log2e - lse) and dS = P (dP - D), cell by cell of the
$ -- warp's fragments, 0 outside the problem and the mask (checked only in
$ -- the blocks that reach past either); packed in 16 bits as the A
$ -- fragments of dQ's product over the keys (ds_pk) where it takes them
$ -- from the registers; with p_out, P stored to its tile, with ds_out dS,
$ -- for the products that read them back.
$ local function softmax_grad(p_out, ds_out)
$ if mod and mod.mask then
  /* A block reaching past seq_q or seq_k${causal and ", or across the diagonal," or ""}, or one the
  ** modification's mask does not leave whole, masks. */
  const int edge = q0 + ${BM} > p.seq_q || k0 + ${BN} > p.seq_k${causal and (" || k0 + " .. (BN - 1) .. " > q0 + off") or ""} ||
                   fa_mod_block(b, mh, q0, q0 + ${BM - 1}, k0, k0 + ${BN - 1}, p.seq_q, p.seq_k, p.heads) != 2;
$ else
  /* A block reaching past seq_q or seq_k${causal and ", or across the diagonal," or ""} masks. */
  const int edge = q0 + ${BM} > p.seq_q || k0 + ${BN} > p.seq_k${causal and (" || k0 + " .. (BN - 1) .. " > q0 + off") or ""};
$ end
$ if not dq_from_smem then
  unsigned ds_pk[${MT}][${NTL}][2];
$ end
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      const int r = sw * ${WR} + mt * 16 + g + 8 * hh;
      const float lse_r = fa_lds_f32(lse_s + r), d_r = fa_lds_f32(d_s + r);
      FA_UNROLL
      for (int n = 0; n < ${NTL}; ++n) {
        float pv[2], ds[2];
        FA_UNROLL
        for (int j = 0; j < 2; ++j) {
$ if mod then
          const int gr = q0 + r, gn = k0 + nw * ${KN} + n * 8 + 2 * tig + j;
$   local at = "b, mh, gr, gn, p.seq_q, p.seq_k, p.heads"
$   if mod.score then
          /* P of the modified score (natural units: S times the scale) */
          const float nat = s[mt][n][2 * hh + j] * scale;
          pv[j] = fa_exp2_f32(fa_mod_score(mod_u, nat, ${at}) * 1.4426950408889634f - lse_r);
$   else
          pv[j] = fa_exp2_f32(s[mt][n][2 * hh + j] * sl2 - lse_r);
$   end
          if (edge) {
            if (!(gr < p.seq_q && gn < p.seq_k${causal and " && gn <= gr + off" or ""}${mod.mask and " && fa_mod_mask(mod_u, " .. at .. ")" or ""})) pv[j] = 0.f;
          }
$   if mod.score then
          /* dS through the modification's derivative; a hidden key passes nothing back */
          ds[j] = pv[j] == 0.f ? 0.f : pv[j] * (dp[mt][n][2 * hh + j] - d_r) * fa_mod_dscore(mod_u, nat, ${at});
$   else
          ds[j] = pv[j] * (dp[mt][n][2 * hh + j] - d_r);
$   end
$ else
          pv[j] = fa_exp2_f32(s[mt][n][2 * hh + j] * sl2 - lse_r);
          if (edge) {
            const int gr = q0 + r, gn = k0 + nw * ${KN} + n * 8 + 2 * tig + j;
$   if causal then
            if (!(gr < p.seq_q && gn < p.seq_k && gn <= gr + off)) pv[j] = 0.f;
$   else
            if (!(gr < p.seq_q && gn < p.seq_k)) pv[j] = 0.f;
$   end
          }
          ds[j] = pv[j] * (dp[mt][n][2 * hh + j] - d_r);
$ end
        }
        const unsigned ds_h = fa_pack_${T}x2(ds[0], ds[1]);
$ if not dq_from_smem then
        ds_pk[mt][n][hh] = ds_h;
$ end
$ if p_out or ds_out then
        const int at = r * ${SRB} + (nw * ${KN} + n * 8 + 2 * tig) * 2;
$ end
$ if p_out then
        fa_sts_u32((unsigned *)(sm + (${P.off_p} + at)), fa_pack_${T}x2(pv[0], pv[1]));
$ end
$ if ds_out then
        fa_sts_u32((unsigned *)(sm + (${P.off_ds} + at)), ds_h);
$ end
        (void)ds_h;
      }
    }
  }
$ end

$ -- acc += A B over k16 step kk (a C loop variable of the caller) of the
$ -- Q block's rows, for the warp's keys and its `tiles` n8 tiles of
$ -- head-dim columns: A the fragments a (P^T, dS^T), B loaded into b by
$ -- ldmatrix .trans of tile (dO, Q; rows rb bytes). dV's and dK's products
$ -- when each has a head dim of its own.
$ local function gemm_keys_cols(acc, a, b, tile, rb, tiles)
    FA_UNROLL
    for (int d2 = 0; d2 < ${tiles // 2}; ++d2) {
      unsigned ${b}[4];
      fa_ldmatrix_x4_trans(${b}, ss + (${tile} + (kk * 16 + a_row) * ${rb} + (dw * ${tiles} + 2 * d2 + a_chunk) * 16));
      FA_UNROLL
      for (int kt = 0; kt < ${KT}; ++kt) {
        fa_mma_m16n8k16_${T}(${acc}[kt][2 * d2], ${a}[kt], ${b}, ${acc}[kt][2 * d2]);
        fa_mma_m16n8k16_${T}(${acc}[kt][2 * d2 + 1], ${a}[kt], ${b} + 2, ${acc}[kt][2 * d2 + 1]);
      }
    }
$ end
$ -- dV += P^T dO and dK += dS^T Q over the Q block's rows: the warp's keys,
$ -- P^T and dS^T by ldmatrix .trans of the P and dS tiles, dO and Q as V
$ -- is in the forward pass.
$ local function gemm_dv_dk()
  /* dV += P^T dO, dK += dS^T Q: keys kw * ${KWR}.., head-dim columns dw * ${DTW * 8}..,
  ** over the block's ${BM} rows. */
  FA_UNROLL
  for (int kk = 0; kk < ${BM // 16}; ++kk) {
    unsigned pa[${KT}][4], dsa[${KT}][4];
    FA_UNROLL
    for (int kt = 0; kt < ${KT}; ++kt) {
      const int at = (kk * 16 + b_row) * ${SRB} + ((kw * ${KWR} + kt * 16) / 8 + b_chunk) * 16;
      fa_ldmatrix_x4_trans(pa[kt], ss + (${P.off_p} + at));
      fa_ldmatrix_x4_trans(dsa[kt], ss + (${P.off_ds} + at));
    }
$ if same then
    FA_UNROLL
    for (int d2 = 0; d2 < ${DTW // 2}; ++d2) {
      const int at = (kk * 16 + a_row) * ${RB} + (dw * ${DTW} + 2 * d2 + a_chunk) * 16;
      unsigned ob[4], qb[4];
      fa_ldmatrix_x4_trans(ob, ss + (${P.off_do} + at));
      fa_ldmatrix_x4_trans(qb, ss + (${P.off_q} + at));
      FA_UNROLL
      for (int kt = 0; kt < ${KT}; ++kt) {
        fa_mma_m16n8k16_${T}(dv[kt][2 * d2], pa[kt], ob, dv[kt][2 * d2]);
        fa_mma_m16n8k16_${T}(dv[kt][2 * d2 + 1], pa[kt], ob + 2, dv[kt][2 * d2 + 1]);
        fa_mma_m16n8k16_${T}(dk[kt][2 * d2], dsa[kt], qb, dk[kt][2 * d2]);
        fa_mma_m16n8k16_${T}(dk[kt][2 * d2 + 1], dsa[kt], qb + 2, dk[kt][2 * d2 + 1]);
      }
    }
$ else
    /* dV's columns (V's head dim), then dK's. */
    $ gemm_keys_cols("dv", "pa", "ob", P.off_do, VRB, DVTW)
    $ gemm_keys_cols("dk", "dsa", "qb", P.off_q, RB, DTW)
$ end
  }
$ end

$ -- The product dS K for the warp's rows, n8 tile pair d2 (a C loop
$ -- variable of the caller) of its head-dim columns, into acc[mt][0..1]:
$ -- dS from ds_pk (the C fragments of two n8 tiles make the A fragment of
$ -- a k16 step, as P in the forward pass) or, when the warps split the
$ -- keys of S, from dS's tile; K as V is in the forward pass.
$ local function ds_k(acc)
      FA_UNROLL
      for (int kn = 0; kn < ${BN // 16}; ++kn) {
        unsigned kb[4];
        fa_ldmatrix_x4_trans(kb, ss + (${P.off_k} + (kn * 16 + a_row) * ${RB} + (nw * ${QDT} + 2 * d2 + a_chunk) * 16));
        FA_UNROLL
        for (int mt = 0; mt < ${MT}; ++mt) {
$ if dq_from_smem then
          unsigned a[4];
          fa_ldmatrix_x4(a, ss + (${P.off_ds} + (sw * ${WR} + mt * 16 + a_row) * ${SRB} + (2 * kn + a_chunk) * 16));
$ else
          const unsigned a[4] = {ds_pk[mt][2 * kn][0], ds_pk[mt][2 * kn][1], ds_pk[mt][2 * kn + 1][0],
                                 ds_pk[mt][2 * kn + 1][1]};
$ end
          fa_mma_m16n8k16_${T}(${acc}[mt][0], a, kb, ${acc}[mt][0]);
          fa_mma_m16n8k16_${T}(${acc}[mt][1], a, kb + 2, ${acc}[mt][1]);
        }
      }
$ end

$ -- dQ += dS K added into the accumulator, a pair of n8 tiles at a time.
$ local function gemm_dq_atomic()
  /* dQ += dS K into the accumulator, across the K/V blocks' CTAs, in the
  ** order this loop adds it: the block's warps, then d2, m-tile and
  ** fragment element, 32 consecutive floats a warp's add, one 128-byte
  ** line (red_lines), as FlashAttention-2 permutes its accumulator; the
  ** fragment's own rows would take 8. Rows past seq_q and padded columns
  ** land in the block's room, which dqconvert never reads. */
  float *const qacc_w = qacc + (long long)q0 * ${D} + warp * ${QDT // 2 * MT * 256} + lane;
  FA_UNROLL
  for (int d2 = 0; d2 < ${QDT // 2}; ++d2) {
    float acc[${MT}][2][4];
    FA_UNROLL
    for (int mt = 0; mt < ${MT}; ++mt) {
      FA_UNROLL
      for (int i = 0; i < 8; ++i) acc[mt][i >> 2][i & 3] = 0.f;
    }
    $ ds_k("acc")
    FA_UNROLL
    for (int mt = 0; mt < ${MT}; ++mt) {
      FA_UNROLL
      for (int i = 0; i < 8; ++i) fa_atomic_add_f32(qacc_w + ((d2 * ${MT} + mt) * 8 + i) * 32, acc[mt][i >> 2][i & 3]);
    }
  }
$ end

$ -- Inside tile kt's loop: each element of this warp's dK fragments (dV's
$ -- with v) at key gn and column d inside the problem, through
$ -- store(value), value its expression (dK's scaled).
$ local function each_grad(v, store)
$   local acc, TW, lim = "dk[kt][n][i] * scale", DTW, dim
$   if v then acc, TW, lim = "dv[kt][n][i]", DVTW, dim_v end
    FA_UNROLL
    for (int n = 0; n < ${TW}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int gn = k0 + kw * ${KWR} + kt * 16 + g + 8 * (i >> 1), d = (dw * ${TW} + n) * 8 + 2 * tig + (i & 1);
        if (gn < p.seq_k && d < ${lim}) ${store(acc)};
      }
    }
$ end

$ if mod then
${require("mod").c_functions(mod, "float", true)}

$ end
/* D = rowsum(dO * O) - dlse in fp32: a warp per row, its lanes across the head dim. */
${vl.bwd_kernel(c, "FA_TC_KERNEL", args.entry .. "_pre", NT)}
  $ setup()
  const int q0 = fa_bid_x() * ${BM};
  for (int r = warp; r < ${BM}; r += ${W}) {
    const int gr = q0 + r;
    if (gr >= p.seq_q) break;
    float sum = 0.f;
    for (int d = lane; d < ${dim_v}; d += 32)
      sum += fa_${T}_to_f32(fa_ldg_u16(dog + gr * p.do_sn + d)) * fa_${T}_to_f32(fa_ldg_u16(og + gr * p.o_sn + d));
    FA_UNROLL
    for (int m = 16; m >= 1; m >>= 1) sum += fa_shfl_xor_f32(sum, m);
    /* A gradient through the logsumexp adds P dlse to dS: D takes it off. */
    if (p.dlse) sum -= fa_ldg_f32((const float *)p.dlse + ${vl.lse_row(c, "b", "h")} + gr);
    if (lane == 0) fa_st_f32(dg + gr, sum);
  }
$ if atomic then
  /* dkdv's launch adds to dQ's accumulator: zeros first, the block's whole room. */
  for (int e = tid; e < ${BM * D}; e += ${NT}) fa_st_f32(qacc + (long long)q0 * ${D} + e, 0.f);
$ end
}

/* dK and dV of K/V block fa_bid_x(), over the Q blocks that see it. */
${vl.bwd_kernel(c, "FA_TC_KERNEL", args.entry .. "_dkdv", NT)}
$ if qh then
  /* A CTA per query head; under GQA its share of dK and dV goes to the
  ** workspace, for dkvsum to add over the group in one order. */
  $ setup()
$ else
  /* Under GQA a CTA per K/V head computes dK and dV over every query head
  ** of its group (no two CTAs write a row, and the sum has one order). */
  $ setup(false)
$ end
  $ lanes()
  const int k0 = fa_bid_x() * ${BN};
$ if c.varlen == 1 then
  ${vl.past("k0", "p.seq_k")}
$ end
  /* This warp's keys and head-dim columns of dK and dV. */
  const int kw = warp % ${KW}, dw = warp / ${KW};
  (void)dw;
  float dk[${KT}][${DTW}][4], dv[${KT}][${DVTW}][4];  /* keys g, g + 8 of each m-tile; columns 8 n + 2 tig, + 1 */
  FA_UNROLL
  for (int kt = 0; kt < ${KT}; ++kt) {
$ if same then
    FA_UNROLL
    for (int n = 0; n < ${DTW}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) dk[kt][n][i] = dv[kt][n][i] = 0.f;
    }
$ else
    FA_UNROLL
    for (int n = 0; n < ${DTW}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) dk[kt][n][i] = 0.f;
    }
    FA_UNROLL
    for (int n = 0; n < ${DVTW}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) dv[kt][n][i] = 0.f;
    }
$ end
  }
  $ load_kv()
$ if causal then
  /* The first row that sees key k0 is k0 - off. */
  const int first = k0 - off > 0 ? (k0 - off) / ${BM} : 0;
$ else
  const int first = 0;
$ end
  const int nq = (p.seq_q + ${BM - 1}) / ${BM};
$ if qh then
  {
$ else
  for (int hq = h; hq < h + group; ++hq) {
    $ qhead("hq")
$ end
    for (int qb = first; qb < nq; ++qb) {
      const int q0 = qb * ${BM};
$ if mod and mod.mask then
      ${require("softmax").mod_skip(BM, BN, "Q")}
$ end
      $ load_q()
      $ landed()
      $ gemm_s_dp()
      $ softmax_grad(true, true)
      fa_syncthreads(); /* P and dS are in shared memory, whole */
      $ gemm_dv_dk()
$ if atomic then
      $ gemm_dq_atomic()
$ end
      fa_syncthreads(); /* Q, dO, P and dS are read: the next Q block may load */
    }
  }
$ if qh then
  if (group > 1) {
    /* This query head's share of dK (scaled) and dV, in float: row gn of
    ** its room, dK's ${D} columns then dV's. */
    float *const part = (float *)${args.kv_part} + ((long long)b * p.heads + h) * ${vl.key_rows(c)} * ${D + DV};
    FA_UNROLL
    for (int kt = 0; kt < ${KT}; ++kt) {
      $ each_grad(false, function(x) return "fa_st_f32(part + (long long)gn * " .. (D + DV) .. " + d, " .. x .. ")" end)
      $ each_grad(true, function(x) return "fa_st_f32(part + (long long)gn * " .. (D + DV) .. " + " .. D .. " + d, " .. x .. ")" end)
    }
    return;
  }
$ end
  /* dK (scaled) and dV, element by element from the fragments. */
  unsigned short *const dkg = (unsigned short *)p.dk + b * p.dk_sb + hk * p.dk_sh${vl.bwd_row(c, "dk")};
  unsigned short *const dvg = (unsigned short *)p.dv + b * p.dv_sb + hk * p.dv_sh${vl.bwd_row(c, "dv")};
  FA_UNROLL
  for (int kt = 0; kt < ${KT}; ++kt) {
    $ each_grad(false, function(x) return "fa_st_u16(dkg + gn * p.dk_sn + d, fa_f32_to_" .. T .. "(" .. x .. "))" end)
    $ each_grad(true, function(x) return "fa_st_u16(dvg + gn * p.dv_sn + d, fa_f32_to_" .. T .. "(" .. x .. "))" end)
  }
}

$ if atomic then
/* dQ = scale * the accumulator dkdv added to: element (r, d) of the block
** where gemm_dq_atomic's warp sw + nw * ${P.row_warps} added it, as the
** fragment's element i of lane 4 g + tig. */
${vl.bwd_kernel(c, "FA_TC_KERNEL", args.entry .. "_dqconvert", NT)}
  $ setup()
  unsigned short *const dqg = (unsigned short *)p.dq + b * p.dq_sb + h * p.dq_sh${vl.bwd_row(c, "dq")};
  const int q0 = fa_bid_x() * ${BM};
  const float *const qacc_b = qacc + (long long)q0 * ${D};
  for (int e = tid; e < ${BM * dim}; e += ${NT}) {
    const int r = e / ${dim}, d = e - r * ${dim};
    if (q0 + r >= p.seq_q) break;
    const int sw = r / ${WR}, mt = r % ${WR} / 16, g = r % 8, hi = r % 16 / 8;
    const int nw = d / ${QDT * 8}, d2 = d % ${QDT * 8} / 16, j = d % 16 / 8, tig = d % 8 / 2, lo = d % 2;
    const int at = ((((sw + nw * ${P.row_warps}) * ${QDT // 2} + d2) * ${MT} + mt) * 8 + 4 * j + 2 * hi + lo) * 32 + 4 * g + tig;
    fa_st_u16(dqg + (q0 + r) * p.dq_sn + d, fa_f32_to_${T}(fa_ld_f32(qacc_b + at) * scale));
  }
}
$ else
/* dQ of Q block fa_bid_x(), over the K/V blocks it sees: dS K, dS from the
** registers. */
${vl.bwd_kernel(c, "FA_TC_KERNEL", args.entry .. "_dq", NT)}
  $ setup()
  $ lanes()
  const int q0 = fa_bid_x() * ${BM};
$ if c.varlen == 1 then
  ${vl.past("q0")}
$ end
  float dq[${MT}][${QDT}][4];  /* rows sw * ${WR}.., head-dim columns nw * ${QDT * 8}.. */
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int n = 0; n < ${QDT}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) dq[mt][n][i] = 0.f;
    }
  }
  $ load_q()
  $ landed()
$ if causal then
  /* The block's last row sees keys up to q0 + ${BM - 1} + off. */
  int kend = q0 + ${BM} + off;
  kend = kend < 0 ? 0 : kend > p.seq_k ? p.seq_k : kend;
$ else
  const int kend = p.seq_k;
$ end
  for (int k0 = 0; k0 < kend; k0 += ${BN}) {
$ if mod and mod.mask then
    ${require("softmax").mod_skip(BM, BN, "K/V")}
$ end
    $ load_kv()
    $ landed()
    $ gemm_s_dp()
    $ softmax_grad(false, dq_from_smem)
$ if dq_from_smem then
    fa_syncthreads(); /* dS is in shared memory, whole */
$ end
    FA_UNROLL
    for (int d2 = 0; d2 < ${QDT // 2}; ++d2) {
      float acc[${MT}][2][4];
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) {
        FA_UNROLL
        for (int i = 0; i < 8; ++i) acc[mt][i >> 2][i & 3] = dq[mt][2 * d2 + (i >> 2)][i & 3];
      }
      $ ds_k("acc")
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) {
        FA_UNROLL
        for (int i = 0; i < 8; ++i) dq[mt][2 * d2 + (i >> 2)][i & 3] = acc[mt][i >> 2][i & 3];
      }
    }
    fa_syncthreads(); /* K, V${dq_from_smem and " and dS" or ""} are read: the next K/V block may load */
  }
  unsigned short *const dqg = (unsigned short *)p.dq + b * p.dq_sb + h * p.dq_sh${vl.bwd_row(c, "dq")};
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int n = 0; n < ${QDT}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int gr = q0 + sw * ${WR} + mt * 16 + g + 8 * (i >> 1), d = (nw * ${QDT} + n) * 8 + 2 * tig + (i & 1);
        if (gr < p.seq_q && d < ${dim}) fa_st_u16(dqg + gr * p.dq_sn + d, fa_f32_to_${T}(dq[mt][n][i] * scale));
      }
    }
  }
}
$ end

$ if qh then
/* dK and dV of K/V head fa_bid_y() under GQA: its query heads' shares
** (dkdv's) added in the order of the heads, in float, and rounded once.
** Without GQA dkdv wrote them itself. */
${vl.bwd_kernel(c, "FA_TC_KERNEL", args.entry .. "_dkvsum", NT)}
  $ setup(false)
  if (group == 1) return;
  const int k0 = fa_bid_x() * ${BN};
$ if c.varlen == 1 then
  ${vl.past("k0", "p.seq_k")}
$ end
  const long long room = (long long)${vl.key_rows(c)} * ${D + DV};  /* a query head's shares */
  const float *const part = (const float *)${args.kv_part} + ((long long)b * p.heads + h) * room;
  unsigned short *const dk_out = (unsigned short *)p.dk + b * p.dk_sb + hk * p.dk_sh${vl.bwd_row(c, "dk")};
  unsigned short *const dv_out = (unsigned short *)p.dv + b * p.dv_sb + hk * p.dv_sh${vl.bwd_row(c, "dv")};
  for (int e = tid; e < ${BN * (dim + dim_v)}; e += ${NT}) {
    const int r = e / ${dim + dim_v}, d = e - r * ${dim + dim_v}, gn = k0 + r;
    if (gn >= p.seq_k) break;
    const float *at = part + (long long)gn * ${D + DV} + (d < ${dim} ? d : ${D - dim} + d);
    float sum = 0.f;
    for (int j = 0; j < group; ++j) sum += fa_ld_f32(at + j * room);
    if (d < ${dim}) fa_st_u16(dk_out + gn * p.dk_sn + d, fa_f32_to_${T}(sum));
    else fa_st_u16(dv_out + gn * p.dv_sn + (d - ${dim}), fa_f32_to_${T}(sum));
  }
}
$ end
