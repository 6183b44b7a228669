$ -- gemm.cu: C = A B on wgmma, fed by TMA through a 3-stage mbarrier pipeline (see gemm.lua).
$ local N, BM, BK, WG, S, T = args.N, args.BM, args.BK, args.WG, args.STAGES, args.T
$ local NC = 128 * WG   -- consumer threads
$ local plant = args.plant
$ -- wgmma's B descriptor for k16 slice kk of the stage's B tile at `sb`.
$ local function desc_b(kk)
$   if args.b_mn then
$     -- MN-major, 128B swizzle: 64-column blocks of 64 K-rows x 128 bytes;
$     -- LBO steps between the blocks along N, SBO between 8-row groups along K.
$     return string.format("fa_wgmma_desc_make(sb + %d, 8192, 1024, 128)", kk * 16 * 128)
$   end
$   -- K-major, 128B swizzle: rows of 64 elements (128 bytes), SBO between
$   -- 8-row groups; a k16 slice is 32 bytes into the swizzle atom.
$   return string.format("fa_wgmma_desc_make(sb + %d, 16, 1024, 128)", kk * 32)
$ end
/* ${args.entry}: C = A B, ${T} in, f32 out; ${WG} consumer warpgroup(s) of 64 rows, N = ${N}.
** A ${args.a_regs and "from registers" or "by descriptor"}, B ${args.b_mn and "MN-major" or "K-major"}. */
FA_SM90_KERNEL(${args.entry}, ${args.threads})
{
  const int tid = fa_tid(), wg = fa_warpgroup();
  const int n0 = fa_bid_x() * ${N}, m0 = fa_bid_y() * ${BM}, bz = fa_bid_z();
  const int ktiles = (p.heads + ${BK - 1}) / ${BK};
  unsigned char *const raw = (unsigned char *)fa_smem_base();
  /* The stages at the 128B swizzle's repeat, 1024 bytes. */
  unsigned char *const smem = raw + ((1024u - (unsigned)((unsigned long long)raw & 1023u)) & 1023u);
  unsigned long long *const full = (unsigned long long *)(smem + ${args.pipe_bytes});
  unsigned long long *const empty = full + ${S};
  if (tid == 0) {
    for (int s = 0; s < ${S}; ++s) {
      fa_mbar_init(&full[s], 1);          /* the producer's arrival, plus the TMA bytes */
      fa_mbar_init(&empty[s], ${NC});     /* every consumer thread, done with the stage */
    }
    fa_fence_mbar_init();
  }
  fa_syncthreads();

  if (wg == ${WG}) {
    /* The producer warpgroup: its registers go to the consumers; one
    ** elected thread of its first warp issues every load. */
    fa_setmaxnreg_dec(40);
    if (tid / 32 == ${4 * WG} && fa_elect_one()) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % ${S};
        unsigned char *const st = smem + s * ${args.stage_bytes};
        if (kt >= ${S}) fa_mbar_wait(&empty[s], ((kt / ${S}) & 1) ^ 1);
$ if plant == "expect_tx" then
        fa_mbar_arrive(&full[s]);   /* PLANTED: the bytes to come are never announced */
$ else
        fa_mbar_arrive_expect_tx(&full[s], ${args.stage_bytes});
$ end
        fa_tma_load_3d(st, &p.tmap[0], kt * ${BK}, m0, bz, &full[s]);
$ if args.b_mn then
$   for j = 0, N // 64 - 1 do
        fa_tma_load_3d(st + ${args.a_bytes + j * 8192}, &p.tmap[1], n0 + ${64 * j}, kt * ${BK}, bz, &full[s]);
$   end
$ else
        fa_tma_load_3d(st + ${args.a_bytes}, &p.tmap[1], kt * ${BK}, n0, bz, &full[s]);
$ end
      }
    }
    return;
  }

  /* A consumer warpgroup: rows 64 wg .. 64 wg + 63 of the tile. */
  fa_setmaxnreg_inc(232);
  const int w = (tid % 128) / 32, l = tid % 32;
  float d[${N // 2}];
  FA_UNROLL
  for (int i = 0; i < ${N // 2}; ++i) d[i] = 0.0f;
  fa_wgmma_fence_acc(${N}, d);
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt % ${S};
    unsigned char *const sa = smem + s * ${args.stage_bytes} + wg * ${64 * BK * 2};
    unsigned char *const sb = smem + s * ${args.stage_bytes} + ${args.a_bytes};
$ if plant == "phase" then
    fa_mbar_wait(&full[s], ((kt / ${S}) & 1) ^ 1);   /* PLANTED: the phase before this one */
$ else
    fa_mbar_wait(&full[s], (kt / ${S}) & 1);
$ end
$ if args.a_regs then
    /* A's m64k16 fragments from the swizzled tile: rows 16w + l/4 (+8),
    ** columns 2(l%4) (+8) of each k16 slice, as mma.m16n8k16 holds A. */
    unsigned a[4][4];
    {
      const unsigned r0 = (unsigned)(16 * w + l / 4) * 128u, c0 = (unsigned)(l % 4) * 4u;
      FA_UNROLL
      for (int kk = 0; kk < 4; ++kk) {
        const unsigned k0 = (unsigned)kk * 32u + c0;
        a[kk][0] = fa_lds_u32((const unsigned *)(sa + fa_swizzle_offset(r0 + k0, 128)));
        a[kk][1] = fa_lds_u32((const unsigned *)(sa + fa_swizzle_offset(r0 + 1024u + k0, 128)));
        a[kk][2] = fa_lds_u32((const unsigned *)(sa + fa_swizzle_offset(r0 + k0 + 16u, 128)));
        a[kk][3] = fa_lds_u32((const unsigned *)(sa + fa_swizzle_offset(r0 + 1024u + k0 + 16u, 128)));
      }
    }
$ end
    fa_wgmma_fence();
$ for kk = 0, 3 do
$   local sd = kk == 0 and "kt > 0" or "1"
$   if args.a_regs then
    fa_wgmma_rs_${T}(${N}, d, a[${kk}], ${desc_b(kk)}, ${sd}, ${args.b_mn and 1 or 0});
$   else
    fa_wgmma_ss_${T}(${N}, d, fa_wgmma_desc_make(sa + ${kk * 32}, 16, 1024, 128), ${desc_b(kk)}, ${sd}, 0, ${args.b_mn and 1 or 0});
$   end
$ end
    fa_wgmma_commit();
$ if plant == "reuse" then
    fa_mbar_arrive(&empty[s]);   /* PLANTED: the stage goes back before its wgmma is waited for */
    fa_wgmma_wait(${args.inflight});
$ else
    /* ${args.inflight} group(s) left in flight: the stage of the k-tile before is read. */
    fa_wgmma_wait(${args.inflight});
$   if args.inflight > 0 then
    if (kt >= ${args.inflight}) fa_mbar_arrive(&empty[(kt - ${args.inflight}) % ${S}]);
$   else
    fa_mbar_arrive(&empty[s]);
$   end
$ end
  }
$ if plant ~= "early_read" then
  fa_wgmma_wait(0);
$ end
  fa_wgmma_fence_acc(${N}, d);

  /* C through shared memory, where the stages were: once every consumer's
  ** wgmma is done with them. Row 16w + l/4 + 8((i/2)%2), column
  ** 8(i/4) + 2(l%4) + i%2 holds d[i] (the wgmma D fragment). */
  fa_named_bar_sync(1, ${NC});
  float *const c = (float *)smem + wg * ${64 * N};
  FA_UNROLL
  for (int i = 0; i < ${N // 2}; ++i)
    fa_sts_f32(c + (16 * w + l / 4 + 8 * ((i / 2) % 2)) * ${N} + 8 * (i / 4) + 2 * (l % 4) + i % 2, d[i]);
$ if plant == "early_read" then
  fa_wgmma_wait(0);   /* PLANTED: after the accumulators were read */
$ end
  fa_fence_proxy_async();
  fa_named_bar_sync(2 + wg, 128);
  if (tid % 128 == 0) {
    fa_tma_store_3d(&p.tmap[2], c, n0, m0 + 64 * wg, bz);
    fa_tma_store_commit();
    fa_tma_store_wait(0);
  }
}
