$ -- decode.cu: the parts decode.lua emits, args.part naming which.
$ local A = args
$ local each = require("decode").each
$ local BN, NT, st = A.BN, A.NT, A.st
$ if A.part == "offsets" then
    FA_UNROLL
    ${each("cc", "tid", BN, NT)} {
      const int key = ${A.k0} + cc;
      long long ko = -1, vo = -1;
      if (key < k_hi) {
        const int pg = key / p.page_size, tok = key - pg * p.page_size;
        const int page = table ? fa_ldg_i32(table + pg) : row_b;
        if ((unsigned)page < (unsigned)p.num_pages) {
          ko = page * p.k_sb + tok * p.k_sn + hk * p.k_sh;
          vo = page * p.v_sb + tok * p.v_sn + hk * p.v_sh;
        } else {
          bad = 1;
        }
      }
      fa_sts_i64(ofs + ${st} * ${2 * BN} + cc, ko);
      fa_sts_i64(ofs + ${st} * ${2 * BN} + ${BN} + cc, vo);
    }
$ elseif A.part == "issue" then
$   local D, DV, IB, KRS, VRS = A.D, A.DV, A.IB, A.KRS, A.VRS
    {
      unsigned char *const kst = stage0 + ${st} * ${A.stage_bytes}, *const vst = kst + ${BN * KRS};
      FA_UNROLL
      ${each("e", "tid", BN * (D * IB // 16), NT)} {
        const int cc = e / ${D * IB // 16}, ch = e - cc * ${D * IB // 16};
        const long long ko = fa_lds_i64(ofs + ${st} * ${2 * BN} + cc);
        const unsigned char *const src = (const unsigned char *)p.k + (ko >= 0 ? ko * ${IB} + ch * 16 : 0);
        fa_cp_async_16(fa_saddr_of(kst + cc * ${KRS} + ch * 16), src, ko >= 0 ? 16 : 0);
      }
      FA_UNROLL
      ${each("e", "tid", BN * (DV * IB // 16), NT)} {
        const int cc = e / ${DV * IB // 16}, ch = e - cc * ${DV * IB // 16};
        const long long vo = fa_lds_i64(ofs + ${st} * ${2 * BN} + ${BN} + cc);
        const unsigned char *const src = (const unsigned char *)p.v + (vo >= 0 ? vo * ${IB} + ch * 16 : 0);
        fa_cp_async_16(fa_saddr_of(vst + cc * ${VRS} + ch * 16), src, vo >= 0 ? 16 : 0);
      }
      fa_cp_async_commit();
    }
$ end
