/*
** model_launch.c
** How kernels launch, for the timing model (model_launch.h): fatune's
** variants from their config, FlashAttention-2's and -3's forward kernels
** from their launch code.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_launch.h"

static int config_int(const gen_kernel *k, const char *key, int fallback) {
  const char *v = gen_config_get(&k->cfg, key);
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  return v && *end == '\0' && x > 0 && x <= 1 << 20 ? (int)x : fallback;
}

int model_launch_dq_apart(const gen_kernel *k) {
  if (k->op != FA_OP_BWD) return 0;
  /* A family with a dq axis says so (simtbwd's FlashAttention-1 order,
  ** dq=separate without such a launch, has no figure); one without (wgbwd)
  ** by its launches. */
  const char *dq = gen_config_get(&k->cfg, "dq");
  if (dq) return strcmp(dq, "atomic") != 0;
  for (int i = 0; i < k->nlaunch; i++)
    if (k->launch[i].role == GEN_ROLE_DQ) return 1;
  return 0;
}

int model_launch_of_variant(const gen_kernel *k, const fa_compiled *r, model_launch *l) {
  memset(l, 0, sizeof *l);
  l->block_m = config_int(k, "block_m", -1);
  l->block_n = config_int(k, "block_n", -1);
  if (k->op == FA_OP_BWD) {
    /* The main kernel (dkdv) runs a CTA per block_n keys and walks the
    ** query blocks: the model's CTA extent is block_n, its step block_m.
    ** Key blocks launch from the first, which a causal mask leaves whole. */
    const int keys = l->block_n;
    l->block_n = l->block_m, l->block_m = keys;
    l->dq_accum = !model_launch_dq_apart(k);
    for (int i = 0; i < k->nws && l->dq_accum; i++)
      if (!strcmp(k->ws[i].name, "dq_acc")) l->dq_acc_row_bytes = k->ws[i].bytes_per_row;
  }
  if (k->op == FA_OP_DECODE) {  /* a CTA's query rows of one K/V head's group (tcdec: 16) */
    l->block_m = config_int(k, "rows", 16);
    l->splits = config_int(k, "splits", 1);
  }
  l->threads = k->threads;
  l->ldsm_ways = k->ldsm_ways;
  l->red_lines = k->red_lines;
  for (int d = 0; d < 3; d++)
    l->kv_head_ctas |= k->launch[k->main].grid[d].by == GEN_GRID_KV_HEADS;
  l->smem_bytes = k->smem_bytes + r->smem_static_bytes;
  l->registers = r->registers;
  l->consumers = config_int(k, "consumers", 0);
  l->stages = config_int(k, "stages", 2);
  l->heavy_first = k->launch[k->main].heavy_first;
  /* wg's persistent scheduler (templates/wg/wg.cu): static, in rounds,
  ** the longest tiles first under a causal mask */
  l->persistent = l->snake = k->launch[k->main].persistent;
  for (int i = 0; i < k->nlaunch; i++) {
    l->v_transposed |= k->launch[i].role == GEN_ROLE_V_TRANSPOSE;
    /* dK's and dV's shares are float (space.lua's kv_sum) */
    if (k->launch[i].role == GEN_ROLE_KV_SUM) l->gqa_part_bytes = 4;
  }
  l->longest_first = l->persistent && gen_config_get(&k->cfg, "causal") &&
                     !strcmp(gen_config_get(&k->cfg, "causal"), "1");
  if (l->block_m < 0 || l->block_n < 0 || l->threads < 32) return -1;
  return 0;
}

int model_launch_dq_pass(const gen_kernel *k, const fa_compiled *r, model_launch *l,
                         const char **entry) {
  memset(l, 0, sizeof *l);
  for (int i = 0; i < k->nlaunch; i++) {
    const char *e = k->launch[i].entry;
    if (k->launch[i].role != GEN_ROLE_DQ) continue;
    l->block_m = config_int(k, "block_m", -1);
    l->block_n = config_int(k, "block_n", -1);
    l->threads = k->launch[i].threads;
    l->smem_bytes = k->launch[i].smem_bytes;
    l->registers = r->cubin ? model_cubin_registers(r->cubin, r->cubin_size, e) : -1;
    l->stages = 1;   /* K and V of a step land before it runs */
    *entry = e;
    return l->block_m > 0 && l->block_n > 0 && l->threads >= 32 && l->registers > 0 ? 0 : -1;
  }
  return -1;
}

/* FlashAttention-2 (csrc/flash_attn/src/flash_fwd_launch_template.h,
** run_mha_fwd_hdim*, and flash_fwd_kernel's template arguments): the grid
** is (query blocks, batch, heads), one CTA a tile; the tile by head dim on
** sm_80 and sm_90 (not sm_86/89): d64 128x128, d128 128x64, 4 warps; d256
** 128x64 with 8 warps where a CTA's 128 KB fit but two 64x64 CTAs' 192 KB
** do not (A100), else 64x64 with 4 warps (H100). Shared memory: Q, K and V
** tiles of 16-bit elements. The kernel instantiated for a problem whose
** lengths divide the tile is Is_even_MN (up to d128) and Is_even_K. */
static int fa2(const model_problem *p, const estimate_gpu *g, model_launch *l, char *pat,
               size_t n) {
  int warps = 4;
  if (p->dim == 64) l->block_m = 128, l->block_n = 128;
  else if (p->dim == 128) l->block_m = 128, l->block_n = 64;
  else if (p->dim == 256) {
    int big = g->smem_sm < 4 * 256 * (64 + 2 * 64);
    l->block_m = big ? 128 : 64, l->block_n = 64, warps = big ? 8 : 4;
  } else return -1;
  l->threads = 32 * warps;
  l->smem_bytes = (l->block_m + 2 * l->block_n) * p->dim * 2;
  int even = p->dim <= 128 && p->seq_q % l->block_m == 0 && p->seq_k % l->block_n == 0;
  snprintf(pat, n, "Flash_fwd_kernel_traitsILi%dELi%dELi%dELi%dE*Lb0ELb%dELb0ELb0ELb%dELb1ELb0ELb0EEEv",
           p->dim, l->block_m, l->block_n, warps, p->causal, even);
  return 0;
}

/* FlashAttention-2's decoding (flash_api.cpp's mha_fwd_kvcache,
** set_params_splitkv; flash_fwd_launch_template.h's run_flash_splitkv_fwd):
** flash_fwd_splitkv_kernel over 64 query rows a CTA, 4 warps, the keys in
** blocks of kBlockN cut into num_splits chunks (model_fa2_splits), and a
** combine launch when there are more than one. With one new token under
** GQA the group's heads are the CTA's rows (seqlenq_ngroups_swapped), as
** the model's decoding packs them; with more, a CTA per query head's rows,
** each of a group's CTAs reading the K/V head. More than one split runs
** run_mha_fwd_splitkv_dispatch's tile (d64 64x256, d128 64x128, d256
** 64x64), one split run_mha_fwd_splitkv_align's (64x128, 64x64, 64x64),
** which another file
** instantiates (flash_fwd_split_align_hdimD_bf16_sm80.cu). The kernels see
** cache_seqlens (cu_seqlens_k set): never Is_even_MN. One new token is
** never causal (mha_fwd_kvcache drops the flag). Template flags after the
** traits: Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K,
** Is_softcap, Split, Append_KV. */
static int fa2_decode(const model_problem *p, const estimate_gpu *g, model_launch *l, char *pat,
                      size_t n) {
  if (p->dim != 64 && p->dim != 128 && p->dim != 256) return -1;
  l->decode_per_head = p->seq_q > 1 && p->kv_group > 1;
  l->splits = model_fa2_splits(p, g);
  const int split = l->splits > 1;
  l->block_m = 64;
  l->block_n = p->dim == 64 ? (split ? 256 : 128) : p->dim == 128 ? (split ? 128 : 64) : 64;
  l->threads = 128;
  l->smem_bytes = (l->block_m + 2 * l->block_n) * p->dim * 2;
  snprintf(pat, n, "flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi%dELi64ELi%dELi4E*"
           "EELb%dELb0ELb0ELb0ELb1ELb0ELb%dELb0EEEv", p->dim, l->block_n, p->causal && p->seq_q > 1,
           split);
  return 0;
}

/* FlashAttention-2's backward pass (flash_bwd_launch_template.h,
** run_mha_bwd_hdim*, sm_80 and sm_90 with 144 KB of shared memory or
** more; flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel): a CTA per kBlockN
** keys walking blocks of kBlockM query rows, 8 warps; d64 kBlockM 128,
** kBlockN 128; d128 64, 128; d256 64, 64, Q double-buffered where 176 KB
** fit (H100), not on an A100. Shared memory (kernel_traits.h,
** kSmemSize1colblock): Q (two buffers or one) and dO, K and V, P and dS.
** dQ is added into a float accumulator (the dot_do_o kernel zeroes it,
** convert_dq converts it). Template flags after the traits: Is_dropout,
** Is_causal, Is_local, Has_alibi, Is_even_MN, Is_even_K, Is_softcap. */
static int fa2_bwd(const model_problem *p, const estimate_gpu *g, model_launch *l, char *pat,
                   size_t n) {
  int bm, bn, qbufs = 2;
  const char *atoms;  /* AtomLayoutMSdP, NdKV, MdQ, Is_V_in_regs */
  if (p->dim == 64) bm = 128, bn = 128, atoms = "4ELi4ELi4ELb0";
  else if (p->dim == 128) bm = 64, bn = 128, atoms = "2ELi4ELi2ELb0";
  else if (p->dim == 256) bm = 64, bn = 64, atoms = "4ELi2ELi2ELb0", qbufs = g->smem_sm >= 176 * 1024 + 1024 ? 2 : 1;
  else return -1;
  l->block_m = bn, l->block_n = bm;
  l->threads = 256;
  l->smem_bytes = ((qbufs + 1) * bm * p->dim + 2 * bn * p->dim + 2 * bm * bn) * 2;
  l->dq_accum = 1;
  l->dq_acc_row_bytes = 4 * p->dim;
  l->gqa_part_bytes = 2;  /* flash_api.cpp's mha_bwd: dk_expanded, dv_expanded (q's dtype), then a sum */
  int even = p->seq_q % bm == 0 && p->seq_k % bn == 0;
  snprintf(pat, n, "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel*Flash_bwd_kernel_traitsILi%dELi%dELi%dELi8ELi%sELb%d"
           "*Lb0ELb%dELb0ELb0ELb%dELb1ELb0EEEv", p->dim, bm, bn, atoms, qbufs == 1, p->causal, even);
  return 0;
}

/* FlashAttention-3 (hopper/tile_size.h tile_size_fwd_sm90;
** hopper/flash_fwd_launch_template.h): 16-bit d64 192x192 (causal
** 192x128), d128 128x176 (causal 128x128), d256 128x80; fp8 (element size
** 1, causal or not) d64 192x160, d96 192x128, d128 128x224, d192 128x160,
** d256 128x128, all with P V from registers and intra-warpgroup overlap.
** block_m / 64 consumer warpgroups and one producer warpgroup; 2 stages of
** K and of V; a persistent scheduler on sm_90, one CTA per SM slot looping
** over tiles: static for a non-causal kernel, the longest tiles first for
** a causal one. Shared memory (mainloop_fwd_sm90_tma_gmma_ws.hpp,
** TensorStorage; flash_fwd_kernel_sm90.h, SharedStorage): Q, K's and V's
** stages; O's epilogue tile (16 bits: fp8's O is bf16) shares V's
** buffer, padded where it is the larger. fp8 (Transpose_V) lands V with
** TMA in a buffer of its own (smem_vt) and its producer warpgroup, all
** four warps, writes it transposed into smem_v for the P V wgmma, which
** takes both fp8 operands K-major: one more set of V's stages, no launch
** before. The cluster of 2 the fp8 d192 kernel launches with (ClusterM,
** where the query blocks are even in number) is not modelled, nor the
** pipelines' barriers (a few hundred bytes). */
static int fa3(const model_problem *p, model_launch *l, char *pat, size_t n) {
  const int d = p->dim, fp8 = p->elem_bytes == 1;
  if (fp8) {
    if (d == 64) l->block_m = 192, l->block_n = 160;
    else if (d == 96) l->block_m = 192, l->block_n = 128;
    else if (d == 128) l->block_m = 128, l->block_n = 224;
    else if (d == 192) l->block_m = 128, l->block_n = 160;
    else if (d == 256) l->block_m = 128, l->block_n = 128;
    else return -1;
  } else if (d == 64) l->block_m = 192, l->block_n = p->causal ? 128 : 192;
  else if (d == 128) l->block_m = 128, l->block_n = p->causal ? 128 : 176;
  else if (d == 256) l->block_m = 128, l->block_n = 80;
  else return -1;
  l->consumers = l->block_m / 64;
  l->threads = 128 * (l->consumers + 1);
  l->stages = 2;
  const int e = fp8 ? 1 : 2, v = l->stages * l->block_n * d * e, o = l->block_m * d * 2;
  l->smem_bytes = (o > v ? o : v) + (fp8 ? v : 0) + (l->block_m + l->stages * l->block_n) * d * e;
  l->persistent = 1;
  l->longest_first = p->causal;
  /* CollectiveMainloopFwdSm90<..., Element, float, Sm90, Is_causal, ...>:
  ** fp8's element spelled out (its O, bf16, comes later, in the epilogue) */
  snprintf(pat, n, "%s4arch4Sm90ELb%dE", fp8 ? "float_e4m3_tEfNS_" : "", p->causal);
  return 0;
}

/* FlashAttention-3's backward pass (hopper/flash_bwd_launch_template.h,
** run_mha_bwd_hdim64/128 for sm_90; CollectiveMainloopBwdSm90): a CTA per
** kBlockN = 128 keys walking blocks of kBlockM query rows, d64 128 and
** d128 80 (causal 64); two MMA warpgroups and a producer warpgroup (its
** TMA warp loads Q, dO, the logsumexp and dPsum, two stages each; another
** warp adds dQ's share into the float accumulator with TMA reductions);
** S and dP swapped (P^T in registers feeds dV's wgmma, so P never lands in
** shared memory). Shared memory (TensorStorage): K, V, dQ's accumulator
** tile in fp32, Q and dO (2 stages), lse and dPsum (2 stages, rows rounded
** up to 64), dS (2 stages). A causal problem runs the LPT scheduler, whose
** first CTAs take the key blocks every query block sees, as a plain grid's
** do. Mainloop template flags after the arch: Is_causal, Is_local,
** Has_softcap, Varlen, Deterministic; the epilogue is the non-GQA one. */
static int fa3_bwd(const model_problem *p, model_launch *l, char *pat, size_t n) {
  const int bn = 128, d = p->dim;
  int bm;
  if (d == 64) bm = 128;
  else if (d == 128) bm = p->causal ? 64 : 80;
  else return -1;
  const int lse_rows = (bm + 63) / 64 * 64 + bm;   /* two stages, the first rounded up */
  l->block_m = bn, l->block_n = bm;
  l->consumers = 2;
  l->threads = 128 * 3;
  l->stages = 2;
  l->dq_accum = 1;
  l->dq_acc_row_bytes = 4 * d;
  l->smem_bytes = 2 * bn * d * 2 + bm * d * 4 + 2 * 2 * bm * d * 2 + 2 * lse_rows * 4 +
                  2 * bm * bn * 2;
  snprintf(pat, n, "FlashAttnBwdSm90*4arch4Sm90ELb%dELb0ELb0ELb0ELb0E*CollectiveEpilogueBwdI",
           p->causal);
  return 0;
}

int model_launch_fa(const char *which, const model_problem *p, const estimate_gpu *g,
                    model_launch *l, char *pattern, size_t n) {
  memset(l, 0, sizeof *l);
  if (!strcmp(which, "fa2"))
    return p->backward ? fa2_bwd(p, g, l, pattern, n)
           : p->decode ? fa2_decode(p, g, l, pattern, n) : fa2(p, g, l, pattern, n);
  if (!strcmp(which, "fa3") && !p->decode)
    return p->backward ? fa3_bwd(p, l, pattern, n) : fa3(p, l, pattern, n);
  return -1;
}

/* pattern: parts separated by '*', each found in order. */
int model_name_matches(const char *name, const char *pattern) {
  const char *p = pattern, *at = name;
  while (*p) {
    const char *star = strchr(p, '*');
    size_t len = star ? (size_t)(star - p) : strlen(p);
    char part[256];
    if (len >= sizeof part) return 0;
    memcpy(part, p, len);
    part[len] = '\0';
    const char *f = strstr(at, part);
    if (!f) return 0;
    at = f + len;
    p += len + (star ? 1 : 0);
  }
  return 1;
}
