$ -- tc.cu: FlashAttention-2 forward on tensor cores (see tc.lua for the plan).
$ local c, P = args.cfg, args.P
$ local causal, eager, qreg = c.causal == 1, c.norm == "eager", c.q == "reg"
$ local BM, BN, NT, MW, MT, NB, KD, KN, ND, CH, S = P.BM, P.BN, P.NT, P.MW, P.MT, P.NB, P.KD, P.KN, P.ND, P.CH, P.S
$ local dim, D, rowb = P.dim, P.D, P.rowb
$ local T = c.dtype == "bf16" and "bf16" or "f16"
$ -- fast tile copies: 16-byte cp.async, whole chunk columns per pass.
$ local fast = NT % CH == 0 and P.async
$ local mma, pack = "fa_mma_m16n8k16_" .. T, "fa_pack_" .. T .. "x2"
$ -- The swizzle term of row r (an expression), XORed into the chunk index.
$ local function fsw(r)
$   if P.swz_wide then return "((" .. r .. ") & 7)" else return "(((" .. r .. ") >> 1) & 3)" end
$ end
$ -- Byte offset, within a row, of chunk `cc` of row `r`.
$ local function chunk(cc, r)
$   if P.swz then return "((" .. cc .. " ^ " .. fsw(r) .. ") << 4)" else return "(" .. cc .. " << 4)" end
$ end
$ -- Byte offset of k step `kk` (a pair of chunks) in a 16-row slab, for this
$ -- lane: lx (la or lk) holds the lane's row offset plus its chunk bit, XORed
$ -- with its swizzle term, for each step within the swizzle's period (8
$ -- chunks, or 4); the rest of the offset is a constant.
$ local NL = P.swz and (P.swz_wide and 4 or 2) or 1
$ local function kofs(kk, lx)
$   lx = lx or "la"
$   if not P.swz then return lx .. "[0] + " .. kk .. " * 32" end
$   return lx .. "[" .. kk .. " & " .. (NL - 1) .. "] + (" .. kk .. " >> " .. (NL == 4 and 2 or 1) .. ") * " .. (NL * 32)
$ end
$ -- Shared memory is addressed as sm + a 32-bit byte offset: the offsets stay
$ -- 32-bit integers in registers, never 64-bit pointers.
/* ${args.entry}
** fp32 accumulation, ${c.norm} normalization, ${c.layout} shared memory, Q in ${c.q}${c.q_share == 1 and " (sharing its shared memory with K/V)" or ""},
** ${S} K/V stage(s); tile ${BM}x${BN}, ${c.warps} warps of ${MW} rows (${MT} m16 tile(s) each); head dim ${dim}${D ~= dim and (" padded to " .. D) or ""}.
** S = Q K^T and O += P V with mma.sync m16n8k16; P stays in registers${P.SUB > 1 and ("; each block's keys in " .. P.SUB .. " parts of " .. (BN // P.SUB)) or ""}. */
FA_KERNEL(${args.entry}, ${NT})
{
  const float NEG_INF = fa_neg_inf_f32();
  const int tid = fa_tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;   /* fragment row and column pair */
  const int lr = lane & 7, lj = lane >> 3;   /* ldmatrix: row lr of matrix lj */
  const int h = fa_bid_y(), b = fa_bid_z();
  unsigned char *const sm = (unsigned char *)fa_smem_base();
  const unsigned short *const qg = (const unsigned short *)p.q + b * p.q_sb + h * p.q_sh;
  const unsigned short *const kg = (const unsigned short *)p.k + b * p.k_sb + h * p.k_sh;
  const unsigned short *const vg = (const unsigned short *)p.v + b * p.v_sb + h * p.v_sh;
  unsigned short *const og = (unsigned short *)p.o + b * p.o_sb + h * p.o_sh;
  float *const lg = (float *)p.lse + ((long long)b * p.heads + h) * p.seq_q;
  const int off = p.seq_k - p.seq_q; /* key c is visible to row r when c <= r + off */
  const float sl2 = (float)p.scale_log2;
  const int q0 = fa_bid_x() * ${BM};
  (void)off;
$ if causal then
  const int last_row = (q0 + ${BM} < p.seq_q ? q0 + ${BM} : p.seq_q) - 1;
  int kv_end = last_row + off + 1;
  kv_end = kv_end < 0 ? 0 : (kv_end > p.seq_k ? p.seq_k : kv_end);
$ else
  const int kv_end = p.seq_k;
$ end
  const int nblk = (kv_end + ${BN - 1}) / ${BN};

  /* ldmatrix x4 lanes: lane 8 j + lr gives one row of matrix j. For Q
  ** and V (.trans) that is row lr + 8 (j & 1) of a 16-row slab, chunk
  ** 2 k + (j >> 1): for Q the A fragment a0..a3, for V registers 0-1 the B
  ** fragment of head-dim columns 0-7 and 2-3 that of columns 8-15. For K,
  ** row lr + 8 (j >> 1), chunk 2 k + (j & 1): registers 0-1 the B fragment
  ** of keys 0-7, 2-3 that of keys 8-15. Slabs start at multiples of 8 rows,
  ** so the swizzle term of every row a lane touches is that of lr. la[]
  ** and lk[] hold the lane's row offset plus chunk bit, swizzled, for each
  ** k step within the swizzle's period. */
  const int ra = lr + 8 * (lj & 1), rk = lr + 8 * (lj >> 1);
$ if P.swz then
  const int xa = ((lj >> 1) ^ ${fsw("lr")}) << 4, xk = ((lj & 1) ^ ${fsw("lr")}) << 4;
  const int fg = ${fsw("g")};              /* swizzle term of this lane's fragment rows */
$ else
  const int xa = (lj >> 1) << 4, xk = (lj & 1) << 4;
$ end
  const int qw = ${P.off_q} + warp * ${MW * rowb}; /* this warp's Q rows */
  int la[${NL}], lk[${NL}];
  FA_UNROLL
  for (int x = 0; x < ${NL}; ++x) {
    la[x] = ra * ${rowb} + ${P.swz and "((x * 32) ^ xa)" or "xa"};
    lk[x] = rk * ${rowb} + ${P.swz and "((x * 32) ^ xk)" or "xk"};
  }
  (void)qw;
$ if fast then
  /* Tile copies: this thread's chunk column and first row. */
  const int lrow = (int)((unsigned)tid / ${CH}u), lcol = (int)((unsigned)tid % ${CH}u);
  const int ldst = lrow * ${rowb} + ${chunk("lcol", "lrow")};
$ end

$ -- Copy R rows of a (seq, dim) matrix, from global row row0, into the tile
$ -- at byte offset dst; columns past the head dim are zeros, and so are the
$ -- rows at or past `lim` when `pred` (otherwise every row exists).
$ -- fast (16-byte copies, a whole number of chunk columns per pass): each
$ -- thread copies chunk column lcol of rows lrow + RS i.
$ -- Otherwise every thread takes chunks e = tid + NT i.
$ local function load_tile(dst, src, stride, row0, lim, R, pred)
$   if fast then
$     local RS = NT // CH
$     local passes = (R + RS - 1) // RS
$     local colok = nil
$     if dim ~= D then colok = "lcol < " .. (dim // 8) end
  {
    const unsigned short *gp = ${src} + (long long)(${row0} + lrow) * ${stride} + lcol * 8;
    FA_UNROLL
    for (int i = 0; i < ${passes}; ++i) {
$     if R % RS ~= 0 then
      if (lrow + i * ${RS} < ${R}) {
$     else
      {
$     end
$     local cond = {}
$     if pred then cond[#cond + 1] = row0 .. " + lrow + i * " .. RS .. " < " .. lim end
$     if colok then cond[#cond + 1] = colok end
$     local nb = #cond > 0 and ("(" .. table.concat(cond, " && ") .. ") ? 16 : 0") or "16"
$     if P.swz and RS % 8 ~= 0 then
        fa_cp_async_16(sm + (${dst} + (lrow + i * ${RS}) * ${rowb} + ${chunk("lcol", "(lrow + i * " .. RS .. ")")}), gp, ${nb});
$     else
        fa_cp_async_16(sm + (${dst} + ldst + i * ${RS * rowb}), gp, ${nb});
$     end
      }
      gp += (long long)${RS} * ${stride};
    }
  }
$   else
$   local total = R * CH
$   local iters = (total + NT - 1) // NT
  FA_UNROLL
  for (int i = 0; i < ${iters}; ++i) {
    const int e = tid + i * ${NT};
$   if total % NT ~= 0 then
    if (e < ${total}) {
$   else
    {
$   end
      const int r = (int)((unsigned)e / ${CH}u), cc = e - r * ${CH};
      const int gr = ${row0} + r;
      unsigned char *const to = sm + (${dst} + r * ${rowb} + ${chunk("cc", "r")});
$   local rowok = pred and ("gr < " .. lim) or "1"
$   if P.async then
      const int nb = ${rowok}${dim ~= D and (" && cc < " .. (dim // 8)) or ""} ? 16 : 0;
      fa_cp_async_16(to, nb ? (const void *)(${src} + gr * ${stride} + cc * 8) : (const void *)${src}, nb);
$   else
      unsigned w[4] = {0u, 0u, 0u, 0u};
      if (${rowok}) {
        FA_UNROLL
        for (int t = 0; t < 8; ++t)
          if (cc * 8 + t < ${dim}) w[t >> 1] |= (unsigned)fa_ldg_u16(${src} + gr * ${stride} + cc * 8 + t) << (16 * (t & 1));
      }
      fa_u32x4 v;
      v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];
      fa_sts_u32x4((fa_u32x4 *)to, v);
$   end
    }
  }
$   end
$ end
$ local function load_q()
  /* Q rows [q0, q0 + ${BM}) */
$   load_tile(tostring(P.off_q), "qg", "p.q_sn", "q0", "p.seq_q", BM, true)
$ end
$ -- K/V block `blk` into the stage at byte offset `st`; only the last block
$ -- (the first one loaded) can have rows past seq_k.
$ local function load_kv(blk, st, pred)
  {
    const int kst = ${P.off_kv} + ${st};
    const int k0 = (${blk}) * ${BN};
$   load_tile("kst", "kg", "p.k_sn", "k0", "p.seq_k", BN, pred)
$   load_tile("kst + " .. (BN * rowb), "vg", "p.v_sn", "k0", "p.seq_k", BN, pred)
  }
$ end
$ local function q_to_registers()
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int kk = 0; kk < ${KD}; ++kk) fa_ldmatrix_x4(qf[mt][kk], sm + (qw + mt * ${16 * rowb} + ${kofs("kk")}));
  }
$ end

  float o[${MT}][${ND}][4];   /* O: rows g, g + 8 of each m-tile; columns 8 n + 2 tig, + 1 */
  float m_i[${MT}][2], l_i[${MT}][2];
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int n = 0; n < ${ND}; ++n) {
      FA_UNROLL
      for (int i = 0; i < 4; ++i) o[mt][n][i] = 0.f;
    }
    m_i[mt][0] = m_i[mt][1] = NEG_INF;
    l_i[mt][0] = l_i[mt][1] = 0.f;
  }
$ if qreg then
  unsigned qf[${MT}][${KD}][4];  /* Q as A fragments, for the whole loop */
$ end

  /* The K/V blocks go from the last, nblk - 1, down to 0, as in
  ** FlashAttention-2: the one block that can reach past seq_k comes first,
  ** so only the first copy checks rows, and the blocks a causal mask cuts
  ** (the diagonal ones) come before those it leaves whole. ${S} stage(s):
  ** the block of iteration j is in stage j % ${S}${S == 1 and ", and the next block is copied once P V is done" or ", and iteration j copies the block of iteration j + " .. (S - 1)}.
  ** Commit groups: ${qreg and "Q alone, then " or "Q with the first K/V block, "}one per prologue block, one per iteration. */
$ local pro = math.max(S - 1, 1)
$ load_q()
$ if qreg then
  fa_cp_async_commit();
$   if c.q_share == 1 then
  fa_cp_async_wait(0);
  fa_syncthreads();
$     q_to_registers()
  fa_syncthreads(); /* K/V overwrite Q */
$   end
$ end
$ for s = 0, pro - 1 do
  if (${s} < nblk) {
$   load_kv("nblk - " .. (s + 1), tostring(s * P.KVb), s == 0)
  }
  fa_cp_async_commit();
$ end
$ if qreg and c.q_share == 0 then
  fa_cp_async_wait(${pro}); /* Q has landed */
  fa_syncthreads();
$   q_to_registers()
$ end
  int st = 0;  /* byte offset of this iteration's stage */
  for (int j = 0; j < nblk; ++j) {
    const int k0 = (nblk - 1 - j) * ${BN};
$ if S == 1 then
    fa_cp_async_wait(0); /* block nblk - 1 - j has landed, for this thread */
    fa_syncthreads();    /* for every thread */
$ else
    fa_cp_async_wait(${S - 2}); /* block nblk - 1 - j has landed, for this thread */
    fa_syncthreads();           /* for every thread; and the previous iteration's stage is free */
    {
      const int ahead = st + ${(S - 1) * P.KVb} < ${S * P.KVb} ? st + ${(S - 1) * P.KVb} : st - ${P.KVb};
      if (j + ${S - 1} < nblk) {
$   load_kv("nblk - " .. S .. " - j", "ahead", false)
      }
      fa_cp_async_commit();
    }
$ end
    const int ks = ${P.off_kv} + st, vs = ks + ${BN * rowb};  /* this block's K and V */
$ if S > 1 then
    st = st + ${P.KVb} < ${S * P.KVb} ? st + ${P.KVb} : 0;
$ end

$ local SUB = P.SUB
$ local SBN = BN // SUB         -- keys per part
$ local NBs, KNs = SBN // 8, SBN // 16
$ local qa = qreg and "qf[mt][kk]" or "qa[mt]"
$ if SUB > 1 then
    /* The block's keys go through in ${SUB} parts of ${SBN}, each an online-softmax
    ** step of its own, so that fewer S registers are live at once. */
    FA_UNROLL_BY(1)
    for (int sb = 0; sb < ${SUB}; ++sb) {
    const int kp = k0 + sb * ${SBN};                 /* this part's first key */
    const int kso = ks + sb * ${SBN * rowb}, vso = vs + sb * ${SBN * rowb};
$ else
    {
    const int kp = k0, kso = ks, vso = vs;
$ end
$ local skip = "kp >= p.seq_k"
$ if causal then skip = skip .. " || kp > q0 + warp * " .. MW .. " + " .. (MW - 1) .. " + off" end
    if (!(${skip})) { /* else no key here for this warp's rows */

    /* S = Q K^T: this warp's ${MW} rows x ${SBN} keys. */
    float s[${MT}][${NBs}][4];
    FA_UNROLL
    for (int mt = 0; mt < ${MT}; ++mt) {
      FA_UNROLL
      for (int n = 0; n < ${NBs}; ++n) {
        FA_UNROLL
        for (int i = 0; i < 4; ++i) s[mt][n][i] = 0.f;
      }
    }
    FA_UNROLL
    for (int kk = 0; kk < ${KD}; ++kk) {
$ if not qreg then
      unsigned qa[${MT}][4];
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) fa_ldmatrix_x4(qa[mt], sm + (qw + mt * ${16 * rowb} + ${kofs("kk")}));
$ end
      FA_UNROLL
      for (int n2 = 0; n2 < ${NBs // 2}; ++n2) {
        unsigned kb[4];
        fa_ldmatrix_x4(kb, sm + (kso + n2 * ${16 * rowb} + ${kofs("kk", "lk")}));
        FA_UNROLL
        for (int mt = 0; mt < ${MT}; ++mt) {
          ${mma}(s[mt][2 * n2], ${qa}, kb, s[mt][2 * n2]);
          ${mma}(s[mt][2 * n2 + 1], ${qa}, kb + 2, s[mt][2 * n2 + 1]);
        }
      }
    }

    /* Mask the keys past seq_k${causal and " and, on the diagonal, the keys a row must not see" or ""}. */
$ local need = "kp + " .. SBN .. " > p.seq_k"
$ if causal then need = need .. " || kp + " .. (SBN - 1) .. " > q0 + warp * " .. MW .. " + off" end
    if (${need}) {
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) {
        FA_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
$ if causal then
          const int vis = q0 + warp * ${MW} + mt * 16 + g + 8 * hh + off + 1;
          const int lim = vis < p.seq_k ? vis : p.seq_k;
$ else
          const int lim = p.seq_k;
$ end
          FA_UNROLL
          for (int n = 0; n < ${NBs}; ++n) {
            FA_UNROLL
            for (int e = 0; e < 2; ++e)
              if (kp + n * 8 + 2 * tig + e >= lim) s[mt][n][2 * hh + e] = NEG_INF;
          }
        }
      }
    }

    /* Online softmax, in log2 units; each row is spread over the 4 lanes of a
    ** quad. P leaves it packed in 16 bits, two columns to a register, as the
    ** P V product takes it: pp[mt][n][hh] holds row g + 8 hh, columns
    ** 8 n + 2 tig and + 1. */
    unsigned pp[${MT}][${NBs}][2];
    FA_UNROLL
    for (int mt = 0; mt < ${MT}; ++mt) {
      FA_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float mx = NEG_INF;
        FA_UNROLL
        for (int n = 0; n < ${NBs}; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * hh], s[mt][n][2 * hh + 1]));
        mx = fmaxf(mx, fa_shfl_xor_f32(mx, 1));
        mx = fmaxf(mx, fa_shfl_xor_f32(mx, 2));
        const float mo = m_i[mt][hh];
        const float mn = fmaxf(mo, mx);
        const float mu = mn == NEG_INF ? 0.f : mn * sl2; /* a row with no key yet */
        const float alpha = fa_exp2_f32(mo * sl2 - mu);
        float rs = 0.f;
        FA_UNROLL
        for (int n = 0; n < ${NBs}; ++n) {
          const float x0 = fa_exp2_f32(s[mt][n][2 * hh] * sl2 - mu);
          const float x1 = fa_exp2_f32(s[mt][n][2 * hh + 1] * sl2 - mu);
          rs += x0 + x1;
$ if eager then
          s[mt][n][2 * hh] = x0;
          s[mt][n][2 * hh + 1] = x1;
$ else
          pp[mt][n][hh] = ${pack}(x0, x1);
$ end
        }
$ if eager then
        /* eager (FlashAttention-1): O = O * l_old*alpha/l_new + P V / l_new */
        rs += fa_shfl_xor_f32(rs, 1);
        rs += fa_shfl_xor_f32(rs, 2);
        const float ln = l_i[mt][hh] * alpha + rs;
        const float inv = ln > 0.f ? 1.f / ln : 0.f;
        const float fo = l_i[mt][hh] * alpha * inv;
        FA_UNROLL
        for (int n = 0; n < ${ND}; ++n) {
          o[mt][n][2 * hh] = fa_rescale_f32(o[mt][n][2 * hh], fo);
          o[mt][n][2 * hh + 1] = fa_rescale_f32(o[mt][n][2 * hh + 1], fo);
        }
        FA_UNROLL
        for (int n = 0; n < ${NBs}; ++n)
          pp[mt][n][hh] = ${pack}(fa_rescale_f32(s[mt][n][2 * hh], inv), fa_rescale_f32(s[mt][n][2 * hh + 1], inv));
        l_i[mt][hh] = ln;
$ else
        /* deferred (FlashAttention-2): O = O * alpha + P V; this lane's share
        ** of l, summed over the quad and divided out at the end */
        l_i[mt][hh] = l_i[mt][hh] * alpha + rs;
        FA_UNROLL
        for (int n = 0; n < ${ND}; ++n) {
          o[mt][n][2 * hh] = fa_rescale_f32(o[mt][n][2 * hh], alpha);
          o[mt][n][2 * hh + 1] = fa_rescale_f32(o[mt][n][2 * hh + 1], alpha);
        }
$ end
        m_i[mt][hh] = mn;
      }
    }

    /* O += P V: P from the S fragments (n8 tiles 2k and 2k + 1 make the A
    ** fragment of k step k: a0 a1 rows g and g + 8 of the first, a2 a3 of the
    ** second), V by ldmatrix .trans. */
    FA_UNROLL
    for (int kn = 0; kn < ${KNs}; ++kn) {
      unsigned pa[${MT}][4];
      FA_UNROLL
      for (int mt = 0; mt < ${MT}; ++mt) {
        pa[mt][0] = pp[mt][2 * kn][0];
        pa[mt][1] = pp[mt][2 * kn][1];
        pa[mt][2] = pp[mt][2 * kn + 1][0];
        pa[mt][3] = pp[mt][2 * kn + 1][1];
      }
      FA_UNROLL
      for (int d2 = 0; d2 < ${ND // 2}; ++d2) {
        unsigned vb[4];
        fa_ldmatrix_x4_trans(vb, sm + (vso + kn * ${16 * rowb} + ${kofs("d2")}));
        FA_UNROLL
        for (int mt = 0; mt < ${MT}; ++mt) {
          ${mma}(o[mt][2 * d2], pa[mt], vb, o[mt][2 * d2]);
          ${mma}(o[mt][2 * d2 + 1], pa[mt], vb + 2, o[mt][2 * d2 + 1]);
        }
      }
    }
    }
    }
$ if S == 1 then
    if (j + 1 < nblk) {
      fa_syncthreads(); /* every warp is done with the stage */
$   load_kv("nblk - 2 - j", "0", false)
      fa_cp_async_commit();
    }
$ end
  }

  /* Epilogue: O, normalized, through this warp's rows of the Q tile, then
  ** to global memory in 16-byte rows; the logsumexp per row. */
  fa_cp_async_wait(0);
  fa_syncthreads(); /* nobody reads Q or K/V any more; every copy has landed */
  FA_UNROLL
  for (int mt = 0; mt < ${MT}; ++mt) {
    FA_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      float l = l_i[mt][hh];
$ if not eager then
      l += fa_shfl_xor_f32(l, 1);
      l += fa_shfl_xor_f32(l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
$ end
      const int r = warp * ${MW} + mt * 16 + g + 8 * hh;
      FA_UNROLL
      for (int n = 0; n < ${ND}; ++n)
        fa_sts_u32((unsigned *)(sm + (${P.off_q} + r * ${rowb} + ${P.swz and "((n ^ fg) << 4)" or "(n << 4)"} + 4 * tig)),
$ if eager then
                   ${pack}(o[mt][n][2 * hh], o[mt][n][2 * hh + 1])); /* normalized at every step; 0 without a key */
$ else
                   ${pack}(fa_rescale_f32(o[mt][n][2 * hh], inv), fa_rescale_f32(o[mt][n][2 * hh + 1], inv)));
$ end
      if (tig == 0 && q0 + r < p.seq_q)
        fa_st_f32(lg + q0 + r, l > 0.f ? (m_i[mt][hh] * sl2 + fa_log2_f32(l)) * 0.69314718055994530942f : NEG_INF);
    }
  }
  fa_syncwarp(); /* each warp reads back only its own rows */
$ local tot = MW * CH
  FA_UNROLL
  for (int i = 0; i < ${(tot + 31) // 32}; ++i) {
    const int e = lane + 32 * i;
    const int rr = e / ${CH}, cc = e - rr * ${CH};
    const int r = warp * ${MW} + rr, gr = q0 + r;
$ local cond = "gr < p.seq_q"
$ if tot % 32 ~= 0 then cond = "e < " .. tot .. " && " .. cond end
$ if dim ~= D then cond = cond .. " && cc < " .. ((dim + 7) // 8) end
    if (${cond}) {
      const fa_u32x4 v = fa_lds_u32x4((const fa_u32x4 *)(sm + (${P.off_q} + r * ${rowb} + ${chunk("cc", "r")})));
$ if P.async then
      fa_st_u32x4((fa_u32x4 *)(og + gr * p.o_sn + cc * 8), v);
$ else
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
      FA_UNROLL
      for (int t = 0; t < 8; ++t)
        if (cc * 8 + t < ${dim}) fa_st_u16(og + gr * p.o_sn + cc * 8 + t, (unsigned short)(w[t >> 1] >> (16 * (t & 1))));
$ end
    }
  }
}
