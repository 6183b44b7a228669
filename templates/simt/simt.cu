$ -- simt.cu: FlashAttention forward on CUDA cores (see simt.lua for the plan).
$ local c, P, T, acc = args.cfg, args.P, args.T, args.acc
$ -- Q, K, V and O in global memory: elements of args.io (acc_t, or 16-bit
$ -- values converted on load and rounded on store); lse and the workspace
$ -- stay acc_t.
$ local io = args.io
$ local vl = require("varlen")
$ local function ldg(a) return string.format(io.ldg, a) end
$ local function ldo(a) return string.format(io.ld, a) end
$ local function sto(a, v) return string.format(io.st, a, v) end
$ local splitq, qouter, eager = c.split == "split_q", c.par == "q_outer", c.norm == "eager"
$ local causal = c.causal == 1
$ -- A score or mask modification (mod.lua): its functions precede the kernel.
$ local mod = c.mod
$ local D, DV, BM, BN, NT, G = P.D, P.DV, P.BM, P.BN, P.NT, P.G
$ local RM, RN, RD, RSTEP = P.RM, P.RN, P.RD, P.RSTEP
$ -- Masking is needed inside a block when the tile has padding columns.
$ local pad_cols = P.BNp > BN
$ local function smem(ptr) return "fa_lds_" .. T .. "(" .. ptr .. ")" end
$ -- The shared softmax (softmax.lua): scores in log2 units, G lanes per row,
$ -- row i of this thread's.
$ local sm = require("softmax")
$ local F = { acc = "acc_t", fn = T, lanes = G, scaled = true, l = "l_i[i]" }
/* ${args.entry}
** ${c.norm} normalization, ${c.par}, ${c.split}, ${c.layout} layout, Q in ${c.q}
** tile ${BM}x${BN}, ${NT} threads; each thread holds ${RM} row(s) x ${RN} score column(s)
** and ${RM} x ${RD} output column(s), ${G} lane(s) per row. */
$ if mod then
${require("mod").c_functions(mod, acc)}
$ end
${vl.kernel(c, "FA_KERNEL", args.entry, NT)}
  typedef ${acc} acc_t;
  const acc_t NEG_INF = fa_neg_inf_${T}();
  const int tid = fa_tid();
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int h = fa_bid_y(), b = fa_bid_z();
  const int hk = FA_KV_HEAD(p, h);      /* the K/V head (GQA, MQA) */
$ if mod then
  const fa_mod_u mod_u = fa_mod_setup(b, h, p.seq_q, p.seq_k, p.heads);
  (void)mod_u;
$ end
  acc_t *const sm = (acc_t *)fa_smem_base();
  acc_t *const Qs = sm + ${P.off_q};
  acc_t *const Ks = sm + ${P.off_k};
  acc_t *const Vs = sm + ${P.off_v};
  acc_t *const Ps = sm + ${P.off_p};
$ if not splitq then
  acc_t *const red_m = sm + ${P.off_redm};
  acc_t *const red_l = sm + ${P.off_redl};
  acc_t *const red_o = sm + ${P.off_redo};
  acc_t *const row_m = sm + ${P.off_rowm};
  acc_t *const row_l = sm + ${P.off_rowl};
  acc_t *const sc_o = sm + ${P.off_sco};
$ end
$ if not splitq and eager then
  acc_t *const sc_p = sm + ${P.off_scp};
$ end
  const ${io.elem} *const qg = (const ${io.elem} *)p.q + b * p.q_sb + h * p.q_sh${vl.row(c, "q")};
  const ${io.elem} *const kg = (const ${io.elem} *)p.k + b * p.k_sb + hk * p.k_sh${vl.row(c, "k")};
  const ${io.elem} *const vg = (const ${io.elem} *)p.v + b * p.v_sb + hk * p.v_sh${vl.row(c, "v")};
$ if c.varlen == 1 then
  ${vl.again()}
$ end
  ${io.elem} *const og = (${io.elem} *)p.o + b * p.o_sb + h * p.o_sh${vl.row(c, "o")};
  acc_t *const lg = ${vl.lse(c, "acc_t", "b", "h")};
$ if not qouter then
  acc_t *const wg = (acc_t *)p.ws + ((long long)b * p.heads + h) * ${vl.rows(c)} * 2;
$ end
  const int off = p.seq_k - p.seq_q; /* key c is visible to row r when c <= r + off */
  const acc_t sl2 = (acc_t)p.scale_log2;
  (void)off; (void)NEG_INF;

  /* This thread's place in the score tile: rows rb + i*${RSTEP}, columns cb + j*${G}. */
$ if splitq then
  const int rb = warp * ${32 // G} + lane / ${G};
  const int cb = lane % ${G};
$ else
  const int rb = lane / ${G};
  const int cb = warp * ${P.NWp} + lane % ${G};
  const int lc = lane % ${G};
  const int orb = tid / ${P.OC}, ocb = tid % ${P.OC}; /* owner of O rows orb + a*${P.OTR}, columns ocb + b*${P.OC} */
$ end
$ local dcol = splitq and "cb" or "lc"
  acc_t s[${RM}][${RN}];
$ if c.q == "reg" then
  acc_t qr[${RM}][${D}];
$ end
$ if splitq then
  acc_t o[${RM}][${RD}], m_i[${RM}], l_i[${RM}];
$ else
  acc_t o[${P.ORM}][${P.ORD}];
$ end

$ -- Cooperative tile loads: rows past the problem or the tile are zero.
$ local function load_q(q0)
  for (int e = tid; e < ${P.BMp * D}; e += ${NT}) {
    const int r = e / ${D}, d = e - r * ${D};
    const int gr = ${q0} + r;
    acc_t x = 0;
    if (r < ${BM} && gr < p.seq_q) x = ${ldg("qg + gr * p.q_sn + d")};
    fa_sts_${T}(Qs + r * ${P.QS} + d, x);
  }
$ end
$ local function load_kv(k0)
$ if D == DV then
  for (int e = tid; e < ${P.KVR * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    const int gn = ${k0} + n;
    acc_t kx = 0, vx = 0;
    if (n < ${BN} && gn < p.seq_k) {
      kx = ${ldg("kg + gn * p.k_sn + d")};
      vx = ${ldg("vg + gn * p.v_sn + d")};
    }
    fa_sts_${T}(Ks + n * ${P.KSN} + d * ${P.KSD}, kx);
    fa_sts_${T}(Vs + n * ${P.VS} + d, vx);
  }
$ else
  for (int e = tid; e < ${P.KVR * D}; e += ${NT}) {
    const int n = e / ${D}, d = e - n * ${D};
    const int gn = ${k0} + n;
    acc_t kx = 0;
    if (n < ${BN} && gn < p.seq_k) kx = ${ldg("kg + gn * p.k_sn + d")};
    fa_sts_${T}(Ks + n * ${P.KSN} + d * ${P.KSD}, kx);
  }
  for (int e = tid; e < ${P.KVR * DV}; e += ${NT}) {
    const int n = e / ${DV}, d = e - n * ${DV};
    const int gn = ${k0} + n;
    acc_t vx = 0;
    if (n < ${BN} && gn < p.seq_k) vx = ${ldg("vg + gn * p.v_sn + d")};
    fa_sts_${T}(Vs + n * ${P.VS} + d, vx);
  }
$ end
$ end
$ local function q_to_registers()
  FA_UNROLL
  for (int i = 0; i < ${RM}; ++i) {
    FA_UNROLL
    for (int d = 0; d < ${D}; ++d) qr[i][d] = ${smem("Qs + (rb + i * " .. RSTEP .. ") * " .. P.QS .. " + d")};
  }
$ end
$ -- Allreduce over the ${G} lanes that share a row.
$ local function lane_reduce(var, op)
$ if G > 1 then
    ${sm.lane_reduce(F, var, op)}
$ end
$ end
$ -- mx: the maximum of score row i over the whole tile row.
$ local function row_max()
      acc_t mx = s[i][0];
      FA_UNROLL
      for (int j = 1; j < ${RN}; ++j) mx = mx > s[i][j] ? mx : s[i][j];
      $ lane_reduce("mx", "max")
$ end
$ -- S = scale * Q K^T for this thread's cells, in log2 units, masked.
$ local function scores(q0, k0)
    FA_UNROLL
    for (int i = 0; i < ${RM}; ++i) {
      FA_UNROLL
      for (int j = 0; j < ${RN}; ++j) s[i][j] = 0;
    }
$ if c.q == "reg" then
    FA_UNROLL
$ else
    FA_UNROLL_BY(${P.UD})
$ end
    for (int d = 0; d < ${D}; ++d) {
      acc_t qv[${RM}], kv[${RN}];
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i)
$ if c.q == "reg" then
        qv[i] = qr[i][d];
$ else
        qv[i] = ${smem("Qs + (rb + i * " .. RSTEP .. ") * " .. P.QS .. " + d")};
$ end
      FA_UNROLL
$ local krow = "(cb + j * " .. G .. ")"
$ if pad_cols then krow = "(cb + j * " .. G .. " < " .. BN .. " ? cb + j * " .. G .. " : " .. (BN - 1) .. ")" end
      for (int j = 0; j < ${RN}; ++j) kv[j] = ${smem("Ks + " .. krow .. " * " .. P.KSN .. " + d * " .. P.KSD)};
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        FA_UNROLL
        for (int j = 0; j < ${RN}; ++j) s[i][j] += qv[i] * kv[j];
      }
    }
    {
$ local full = "(" .. k0 .. " + " .. BN .. " <= p.seq_k)"
$ if causal then full = full .. " && (" .. k0 .. " + " .. (BN - 1) .. " <= " .. q0 .. " + off)" end
$ if pad_cols then full = "0" end
$ if mod and mod.mask then
$   -- the mask's class of this block pair: 2 when it hides no key
$   local q_hi = string.format("(%s + %d < p.seq_q ? %s + %d : p.seq_q) - 1", q0, BM, q0, BM)
$   local k_hi = string.format("(%s + %d < p.seq_k ? %s + %d : p.seq_k) - 1", k0, BN, k0, BN)
$   full = full .. string.format(" && fa_mod_block(b, h, %s, %s, %s, %s, p.seq_q, p.seq_k, p.heads) == 2", q0, q_hi, k0, k_hi)
$ end
      const int full = ${full};
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        FA_UNROLL
        for (int j = 0; j < ${RN}; ++j) {
          s[i][j] *= sl2;
$ if mod and mod.score then
          /* the score modification, in natural units */
          s[i][j] = fa_mod_score(mod_u, s[i][j] * (acc_t)0.69314718055994531, b, h, ${q0} + rb + i * ${RSTEP},
                                 ${k0} + cb + j * ${G}, p.seq_q, p.seq_k, p.heads) * (acc_t)1.4426950408889634;
$ end
          if (!full) {
            const int cl = cb + j * ${G};
            const int gc = ${k0} + cl;
$ local masked = "cl >= " .. BN .. " || gc >= p.seq_k"
$ if causal then masked = masked .. " || gc > " .. q0 .. " + rb + i * " .. RSTEP .. " + off" end
$ if mod and mod.mask then
$   masked = masked .. " || !fa_mod_mask(mod_u, b, h, " .. q0 .. " + rb + i * " .. RSTEP .. ", gc, p.seq_q, p.seq_k, p.heads)"
$ end
            if (${masked}) s[i][j] = NEG_INF;
          }
        }
      }
    }
$ end
$ -- P V over columns [n0, n0 + count) of the tile, added into `dst`.
$ local function pv(dst, n0, count)
    FA_UNROLL_BY(${P.UN})
    for (int n = ${n0}; n < ${n0} + ${count}; ++n) {
      acc_t pr[${RM}], vv[${RD}];
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) pr[i] = ${smem("Ps + (rb + i * " .. RSTEP .. ") * " .. P.PS .. " + n")};
      FA_UNROLL
      for (int k = 0; k < ${RD}; ++k) {
        const int d = ${dcol} + k * ${G};
$ -- split_k's last warp may span score columns past block_n (P 0 there).
$ local vrow = pad_cols and "(n < " .. BN .. " ? n : " .. (BN - 1) .. ")" or "n"
$ if RD * G > DV then
        vv[k] = ${smem("Vs + " .. vrow .. " * " .. P.VS .. " + (d < " .. DV .. " ? d : " .. (DV - 1) .. ")")};
$ else
        vv[k] = ${smem("Vs + " .. vrow .. " * " .. P.VS .. " + d")};
$ end
      }
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        FA_UNROLL
        for (int k = 0; k < ${RD}; ++k) ${dst}[i][k] += pr[i] * vv[k];
      }
    }
$ end
$ -- One (Q tile, K/V tile) step of the online softmax, split_q: each warp
$ -- owns whole rows; statistics and O stay in registers.
$ local function step_split_q(q0, k0)
    $ scores(q0, k0)
    FA_UNROLL
    for (int i = 0; i < ${RM}; ++i) {
      $ row_max()
      const acc_t mn = m_i[i] > mx ? m_i[i] : mx;
      const acc_t mu = ${sm.mu(F, "mn")}; /* a row with no key yet */
      const acc_t alpha = fa_exp2_${T}(m_i[i] - mu);
      acc_t rs = 0;
      FA_UNROLL
      for (int j = 0; j < ${RN}; ++j) {
        s[i][j] = fa_exp2_${T}(s[i][j] - mu);
        rs += s[i][j];
      }
      $ lane_reduce("rs", "sum")
$ if eager then
      /* eager (FlashAttention-1): O = O * l_old*alpha/l_new + P V / l_new */
      ${sm.eager_factors(F)}
      FA_UNROLL
      for (int k = 0; k < ${RD}; ++k) o[i][k] = fa_rescale_${T}(o[i][k], fo);
      FA_UNROLL
      for (int j = 0; j < ${RN}; ++j) s[i][j] = fa_rescale_${T}(s[i][j], inv);
      l_i[i] = ln;
$ else
      /* deferred (FlashAttention-2): O = O * alpha + P V, divided by l at the end */
      l_i[i] = l_i[i] * alpha + rs;
      FA_UNROLL
      for (int k = 0; k < ${RD}; ++k) o[i][k] = fa_rescale_${T}(o[i][k], alpha);
$ end
      m_i[i] = mn;
      FA_UNROLL
      for (int j = 0; j < ${RN}; ++j) fa_sts_${T}(Ps + (rb + i * ${RSTEP}) * ${P.PS} + cb + j * ${G}, s[i][j]);
    }
    fa_syncwarp(); /* P rows are written and read by the same warp */
    $ pv("o", 0, BN)
$ end
$ -- One step, split_k: each warp takes a slice of the K/V tile for all rows;
$ -- row statistics meet in shared memory and the partial products of the
$ -- warps are summed there, in a fixed order, by the owners of O.
$ local function step_split_k(q0, k0, store_stats)
    $ scores(q0, k0)
    FA_UNROLL
    for (int i = 0; i < ${RM}; ++i) {
      $ row_max()
      if (lc == 0) fa_sts_${T}(red_m + warp * ${P.BMp} + rb + i * ${RSTEP}, mx);
    }
    fa_syncthreads();
    {
      acc_t op[${RM}][${RD}];
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        const int r = rb + i * ${RSTEP};
        acc_t mn = ${smem("row_m + r")};
        FA_UNROLL
        for (int w = 0; w < ${c.warps}; ++w) {
          const acc_t y = ${smem("red_m + w * " .. P.BMp .. " + r")};
          mn = mn > y ? mn : y;
        }
        const acc_t mu = ${sm.mu(F, "mn")};
        acc_t rs = 0;
        FA_UNROLL
        for (int j = 0; j < ${RN}; ++j) {
          s[i][j] = fa_exp2_${T}(s[i][j] - mu);
          rs += s[i][j];
          fa_sts_${T}(Ps + r * ${P.PS} + cb + j * ${G}, s[i][j]);
        }
        $ lane_reduce("rs", "sum")
        if (lc == 0) fa_sts_${T}(red_l + warp * ${P.BMp} + r, rs);
        FA_UNROLL
        for (int k = 0; k < ${RD}; ++k) op[i][k] = 0;
      }
      fa_syncwarp(); /* each warp reads back only its own P columns */
      $ pv("op", "warp * " .. P.NWp, P.NWp)
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        FA_UNROLL
        for (int k = 0; k < ${RD}; ++k) {
          const int d = lc + k * ${G};
$ if RD * G > DV then
          if (d < ${DV})
$ end
            fa_sts_${T}(red_o + (warp * ${P.BMp} + rb + i * ${RSTEP}) * ${DV} + d, op[i][k]);
        }
      }
    }
    fa_syncthreads();
    for (int r = tid; r < ${BM}; r += ${NT}) {
      const acc_t mo = ${smem("row_m + r")}, lo = ${smem("row_l + r")};
      acc_t mn = mo, ls = 0;
      FA_UNROLL
      for (int w = 0; w < ${c.warps}; ++w) {
        const acc_t y = ${smem("red_m + w * " .. P.BMp .. " + r")};
        mn = mn > y ? mn : y;
        ls += ${smem("red_l + w * " .. P.BMp .. " + r")};
      }
      const acc_t mu = ${sm.mu(F, "mn")};
      const acc_t alpha = fa_exp2_${T}(mo - mu);
      const acc_t ln = lo * alpha + ls;
$ if eager then
      const acc_t inv = ${sm.inverse(F, "ln")};
      fa_sts_${T}(sc_o + r, lo * alpha * inv);
      fa_sts_${T}(sc_p + r, inv);
$ else
      fa_sts_${T}(sc_o + r, alpha);
$ end
      fa_sts_${T}(row_m + r, mn);
      fa_sts_${T}(row_l + r, ln);
$ if store_stats then
      if (${q0} + r < p.seq_q) {
        fa_st_${T}(wg + (${q0} + r) * 2, mn);
        fa_st_${T}(wg + (${q0} + r) * 2 + 1, ln);
      }
$ end
    }
    fa_syncthreads();
    FA_UNROLL
    for (int a = 0; a < ${P.ORM}; ++a) {
      const int r = orb + a * ${P.OTR};
      if (r < ${BM}) {
$ if eager then
        const acc_t so = ${smem("sc_o + r")}, sp = ${smem("sc_p + r")};
$ else
        const acc_t so = ${smem("sc_o + r")};
$ end
        FA_UNROLL
        for (int bb = 0; bb < ${P.ORD}; ++bb) {
          const int d = ocb + bb * ${P.OC};
          if (d < ${DV}) {
            acc_t sum = 0;
            FA_UNROLL
            for (int w = 0; w < ${c.warps}; ++w) sum += ${smem("red_o + (w * " .. P.BMp .. " + r) * " .. DV .. " + d")};
$ if eager then
            o[a][bb] = fa_rescale_${T}(o[a][bb], so) + fa_rescale_${T}(sum, sp);
$ else
            o[a][bb] = fa_rescale_${T}(o[a][bb], so) + sum; /* the new P is unnormalized */
$ end
          }
        }
      }
    }
$ end
$ -- The finished row r (global row gr) of a split_q thread: O scaled, lse.
$ local function finish_split_q(q0)
    FA_UNROLL
    for (int i = 0; i < ${RM}; ++i) {
      const int r = rb + i * ${RSTEP}, gr = ${q0} + r;
$ if not eager then
      const acc_t inv = ${sm.inverse(F, "l_i[i]")};
$ end
      if (r < ${BM} && gr < p.seq_q) {
        FA_UNROLL
        for (int k = 0; k < ${RD}; ++k) {
          const int d = cb + k * ${G};
$ if RD * G > DV then
          if (d < ${DV})
$ end
$ if eager then
            ${sto("og + gr * p.o_sn + d", "o[i][k]")}; /* normalized at every tile */
$ else
            ${sto("og + gr * p.o_sn + d", "fa_rescale_" .. T .. "(o[i][k], inv)")};
$ end
        }
        if (cb == 0)
          fa_st_${T}(lg + gr, ${sm.lse(F, "m_i[i]", "l_i[i]")});
      }
    }
$ end
$ -- split_k: owners write O, row threads write lse. With from_ws (kv_outer),
$ -- O and the statistics come back from global memory; a row whose l is 0
$ -- saw no key and gets zeros whatever O holds.
$ local function finish_split_k(q0, from_ws)
    FA_UNROLL
    for (int a = 0; a < ${P.ORM}; ++a) {
      const int r = orb + a * ${P.OTR}, gr = ${q0} + r;
      if (r < ${BM} && gr < p.seq_q) {
$ if from_ws then
        const acc_t l = fa_ld_${T}(wg + gr * 2 + 1);
$ elseif not eager then
        const acc_t l = ${smem("row_l + r")};
$ end
$ if not eager then
        const acc_t inv = ${sm.inverse(F, "l")};
$ end
        FA_UNROLL
        for (int bb = 0; bb < ${P.ORD}; ++bb) {
          const int d = ocb + bb * ${P.OC};
          if (d < ${DV}) {
$ if from_ws then
            o[a][bb] = l > 0 ? ${ldo("og + gr * p.o_sn + d")} : (acc_t)0;
$ end
$ if eager then
            ${sto("og + gr * p.o_sn + d", "o[a][bb]")}; /* normalized at every tile; 0 without a key */
$ else
            ${sto("og + gr * p.o_sn + d", "fa_rescale_" .. T .. "(o[a][bb], inv)")};
$ end
          }
        }
      }
    }
    for (int r = tid; r < ${BM}; r += ${NT}) {
      const int gr = ${q0} + r;
      if (gr < p.seq_q) {
$ if from_ws then
        const acc_t m = fa_ld_${T}(wg + gr * 2), l = fa_ld_${T}(wg + gr * 2 + 1);
$ else
        const acc_t m = ${smem("row_m + r")}, l = ${smem("row_l + r")};
$ end
        fa_st_${T}(lg + gr, ${sm.lse(F, "m", "l")});
      }
    }
$ end
$ if qouter then
  /* FlashAttention-2 order: this CTA owns Q rows [q0, q0 + ${BM}) and loops over K/V. */
  const int q0 = fa_bid_x() * ${BM};
$ if c.varlen == 1 then
  ${vl.past("q0")}
$ end
  ${sm.kv_end(causal, BM)}
$ if splitq then
  FA_UNROLL
  for (int i = 0; i < ${RM}; ++i) {
    m_i[i] = NEG_INF;
    l_i[i] = 0;
    FA_UNROLL
    for (int k = 0; k < ${RD}; ++k) o[i][k] = 0;
  }
$ else
  FA_UNROLL
  for (int a = 0; a < ${P.ORM}; ++a) {
    FA_UNROLL
    for (int bb = 0; bb < ${P.ORD}; ++bb) o[a][bb] = 0;
  }
  for (int r = tid; r < ${P.BMp}; r += ${NT}) {
    fa_sts_${T}(row_m + r, NEG_INF);
    fa_sts_${T}(row_l + r, (acc_t)0);
  }
$ end
  $ load_q("q0")
  fa_syncthreads();
$ if c.q == "reg" then
  $ q_to_registers()
$ end
$ if mod and mod.mask then
  ${sm.mod_range(BM, BN)}
  const int kv_lo = mod_first < 0 ? 0 : mod_first * ${BN};
  const int kv_hi = mod_first < 0 ? 0 : ((mod_last + 1) * ${BN} < kv_end ? (mod_last + 1) * ${BN} : kv_end);
$ end
$ local lo, hi = "0", "kv_end"
$ if mod and mod.mask then lo, hi = "kv_lo", "kv_hi" end
  for (int k0 = ${lo}; k0 < ${hi}; k0 += ${BN}) {
    if (k0 > ${lo}) fa_syncthreads(); /* everyone is done with the previous K/V tile */
    $ load_kv("k0")
    fa_syncthreads();
$ if splitq then
    $ step_split_q("q0", "k0")
$ else
    $ step_split_k("q0", "k0", false)
$ end
  }
$ if splitq then
  $ finish_split_q("q0")
$ else
  $ finish_split_k("q0", false)
$ end
$ else
  /* FlashAttention-1 order: one CTA per (batch, head); outer loop over K/V
  ** tiles, inner loop over Q tiles; O, m and l go through global memory. */
  for (int k0 = 0; k0 < p.seq_k; k0 += ${BN}) {
    fa_syncthreads();
    $ load_kv("k0")
$ if causal then
    const int first_row = k0 - off > 0 ? k0 - off : 0; /* rows above see no key of this tile */
    const int q_start = first_row / ${BM} * ${BM};
$ else
    const int q_start = 0;
$ end
    for (int q0 = q_start; q0 < p.seq_q; q0 += ${BM}) {
      fa_syncthreads();
      $ load_q("q0")
$ if splitq then
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        const int gr = q0 + rb + i * ${RSTEP};
        const int live = k0 > 0 && rb + i * ${RSTEP} < ${BM} && gr < p.seq_q;
        m_i[i] = live ? fa_ld_${T}(wg + gr * 2) : NEG_INF;
        l_i[i] = live ? fa_ld_${T}(wg + gr * 2 + 1) : (acc_t)0;
        FA_UNROLL
        for (int k = 0; k < ${RD}; ++k) {
          const int d = cb + k * ${G};
          o[i][k] = live && d < ${DV} ? ${ldo("og + gr * p.o_sn + d")} : (acc_t)0;
        }
      }
$ else
      for (int r = tid; r < ${P.BMp}; r += ${NT}) {
        const int live = k0 > 0 && r < ${BM} && q0 + r < p.seq_q;
        fa_sts_${T}(row_m + r, live ? fa_ld_${T}(wg + (q0 + r) * 2) : NEG_INF);
        fa_sts_${T}(row_l + r, live ? fa_ld_${T}(wg + (q0 + r) * 2 + 1) : (acc_t)0);
      }
      FA_UNROLL
      for (int a = 0; a < ${P.ORM}; ++a) {
        const int r = orb + a * ${P.OTR};
        const int live = k0 > 0 && r < ${BM} && q0 + r < p.seq_q;
        FA_UNROLL
        for (int bb = 0; bb < ${P.ORD}; ++bb) {
          const int d = ocb + bb * ${P.OC};
          o[a][bb] = live && d < ${DV} ? ${ldo("og + (q0 + r) * p.o_sn + d")} : (acc_t)0;
        }
      }
$ end
      fa_syncthreads();
$ if c.q == "reg" then
      $ q_to_registers()
$ end
$ if splitq then
      $ step_split_q("q0", "k0")
      FA_UNROLL
      for (int i = 0; i < ${RM}; ++i) {
        const int r = rb + i * ${RSTEP}, gr = q0 + r;
        if (r < ${BM} && gr < p.seq_q) {
          FA_UNROLL
          for (int k = 0; k < ${RD}; ++k) {
            const int d = cb + k * ${G};
            if (d < ${DV}) ${sto("og + gr * p.o_sn + d", "o[i][k]")};
          }
          if (cb == 0) {
            fa_st_${T}(wg + gr * 2, m_i[i]);
            fa_st_${T}(wg + gr * 2 + 1, l_i[i]);
          }
        }
      }
$ else
      $ step_split_k("q0", "k0", true)
      FA_UNROLL
      for (int a = 0; a < ${P.ORM}; ++a) {
        const int r = orb + a * ${P.OTR};
        if (r < ${BM} && q0 + r < p.seq_q) {
          FA_UNROLL
          for (int bb = 0; bb < ${P.ORD}; ++bb) {
            const int d = ocb + bb * ${P.OC};
            if (d < ${DV}) ${sto("og + (q0 + r) * p.o_sn + d", "o[a][bb]")};
          }
        }
      }
$ end
    }
  }
  /* Final pass: rows that saw no key get zeros and -inf; others their
  ** normalized O (deferred) and their logsumexp. */
  fa_syncthreads();
  for (int q0 = 0; q0 < p.seq_q; q0 += ${BM}) {
$ if splitq then
    FA_UNROLL
    for (int i = 0; i < ${RM}; ++i) {
      const int gr = q0 + rb + i * ${RSTEP};
$ local sees_key = causal and " && gr + off >= 0" or ""
      const int live = rb + i * ${RSTEP} < ${BM} && gr < p.seq_q${sees_key};
      m_i[i] = live ? fa_ld_${T}(wg + gr * 2) : NEG_INF;
      l_i[i] = live ? fa_ld_${T}(wg + gr * 2 + 1) : (acc_t)0;
      FA_UNROLL
      for (int k = 0; k < ${RD}; ++k) {
        const int d = cb + k * ${G};
        o[i][k] = live && d < ${DV} ? ${ldo("og + gr * p.o_sn + d")} : (acc_t)0;
      }
    }
    $ finish_split_q("q0")
$ else
$ if causal then
    /* Rows that saw no key were never written: give them empty statistics. */
    for (int r = tid; r < ${BM}; r += ${NT}) {
      const int gr = q0 + r;
      if (gr < p.seq_q && gr + off < 0) {
        fa_st_${T}(wg + gr * 2, NEG_INF);
        fa_st_${T}(wg + gr * 2 + 1, (acc_t)0);
      }
    }
    fa_syncthreads();
$ end
    $ finish_split_k("q0", true)
$ end
  }
$ end
}
