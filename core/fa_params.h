/*
** fa_params.h
** The argument block of every op's kernels, all the launches of one run
** taking the same one: the forward pass's fields, then the backward pass's
** (zeros in a forward run). This one file is compiled by
** the host C compiler and prepended, as text, to every generated kernel, so
** host and device agree on its layout by construction. Only types that mean
** the same thing in C11, CUDA C++ and NVRTC (no <stdint.h> there) appear.
*/
#ifndef FA_PARAMS_H
#define FA_PARAMS_H

/* A TMA tensor map: on cuda the 128 bytes cuTensorMapEncodeTiled writes
** (CUtensorMap, 64-byte aligned, read by cp.async.bulk.tensor from the
** kernel's parameter space); on emu the emulator's own encoding of the same
** arguments (emu_abi.h). Built by backend_tmap (backend.h). */
typedef struct __attribute__((aligned(64))) fa_tmap {
  unsigned long long w[16];
} fa_tmap;

typedef struct fa_params {
  const void *q, *k, *v;  /* inputs, (batch, heads, seq, dim), dim contiguous */
  void *o;                /* output, same layout as q */
  void *lse;              /* logsumexp, [batch][heads][seq_q]: fp64 for fp64, else fp32 */
  void *ws;               /* the kernel's first workspace, if it declares one (kv_outer:
                          ** running m and l), or 0 */
  void *ws2;              /* its second (bwd: D = rowsum(dO * O)), or 0 */
  void *ws3;              /* its third (tcbwd under GQA: dK, dV per query head), or 0 */
  long long q_sb, q_sh, q_sn;  /* strides in elements: batch, head, seq */
  long long k_sb, k_sh, k_sn;
  long long v_sb, v_sh, v_sn;
  long long o_sb, o_sh, o_sn;
  int batch, heads, seq_q, seq_k;
  int kv_group;           /* Q heads per K/V head (GQA, MQA): head h reads K/V head
                             h / kv_group; 0 or 1 when every head has its own */
  double scale_log2;      /* softmax scale times log2(e) */
  float scale_log2_f32;   /* the same rounded to float, for the kernels whose softmax is
                          ** in float: ptxas reloads kernel arguments inside loops, and a
                          ** double one then costs a conversion each time */
  /* The backward pass (op bwd): o and lse above are the forward pass's, read;
  ** dout is dO, laid out as its strides say; dq as q, dk as k, dv as v. */
  const void *dout;
  const void *dlse;       /* the loss's gradient with respect to lse (as lse), or 0: it
                          ** enters as dS = P (dP - D + dlse) */
  void *dq, *dk, *dv;
  long long do_sb, do_sh, do_sn;
  long long dq_sb, dq_sh, dq_sn;
  long long dk_sb, dk_sh, dk_sn;
  long long dv_sb, dv_sh, dv_sn;
  /* Decoding over a KV cache (op decode): k and v are pools of pages,
  ** (num_pages, page_size, kv_heads, dim) by the strides k_sb (a page), k_sn
  ** (a token) and k_sh (a head), and so v. Key c of sequence b is token
  ** c % page_size of page block_table[b * table_stride + c / page_size];
  ** the sequence has seqlens_k[b] keys; no block table (NULL): a
  ** contiguous cache, sequence b on page b, or with cache_batch_idx on
  ** page cache_batch_idx[b]. A page index outside the pool is never read:
  ** the kernel skips its keys and sets error[0] to 1; a length outside
  ** 0..table_stride * page_size is cut to it, error[1] set. */
  const int *block_table;
  const int *cache_batch_idx;
  const int *seqlens_k;
  int *error;
  int page_size, table_stride, num_pages;
  /* c / page_size by a multiply (fa_page_divisor sets both; FA_PAGE_OF):
  ** an integer division costs some twenty instructions, and the paged
  ** kernels divide for every key row they read. */
  unsigned page_magic;
  int page_shift;
  /* New keys and values appended before decoding (templates/append.lua):
  ** seq_q tokens of each sequence, (batch, kv_heads, seq) by their strides;
  ** token j of sequence b goes to cache position seqlens_k[b] + j, and the
  ** new length to seqlens_out[b], which the decoding launches then read as
  ** their seqlens_k. */
  const void *k_new, *v_new;
  long long kn_sb, kn_sh, kn_sn;
  long long vn_sb, vn_sh, vn_sn;
  int *seqlens_out;
  /* Rotary embeddings, applied by the append kernel as flash_attn_with_
  ** kvcache applies rotary_cos and rotary_sin: both (rotary_len,
  ** rotary_dim / 2) in the tensors' dtype, contiguous (NULL: none). New
  ** key j of sequence b is rotated at its cache position seqlens_k[b] + j;
  ** its query row j at seqlens_k[b] + rotary_q_step * j (1 under causal,
  ** else 0: all at seqlens_k[b]), into q_rot, (batch, heads, seq_q, dim)
  ** contiguous, which the decoding launches then read as q. Pairs (i, i +
  ** rotary_dim / 2), or with rotary_interleaved (2 i, 2 i + 1). A position
  ** outside the table is never read (that row goes unrotated): error[1]
  ** set to 2. */
  const void *rotary_cos, *rotary_sin;
  int rotary_dim, rotary_len, rotary_interleaved, rotary_q_step;
  void *q_rot;
  /* A variable-length batch (op fwd or bwd, a variant with varlen=1): q,
  ** k, v and o packed, token t of head h at t * q_sn + h * q_sh (q_sb
  ** unused), and so k, v, o and the backward pass's dout, dq, dk, dv
  ** (as q, k, v); sequence b's queries are tokens cu_seqlens_q[b] up to
  ** cu_seqlens_q[b + 1] of total_q, its keys cu_seqlens_k's of total_k;
  ** seq_q and seq_k are the longest, which the grid covers; lse is
  ** [heads][total_q]. A sequence whose offsets leave 0..total or whose
  ** length passes the longest is never read: its CTAs set error[1]. */
  const int *cu_seqlens_q, *cu_seqlens_k;
  int total_q, total_k;
  /* A modification's captured tensors (templates/mod.lua): tensor i holds
  ** mod_len[i] int32 or float32 elements, as the modification declares; a
  ** read outside them gives 0 and sets error[2] to 1. The block mask, or
  ** NULL: the class (0 empty, 1 partial, 2 full) of each 64-row, 64-key
  ** block of its mask at [b * bm_sb + h * bm_sh + row * bm_cols + col]
  ** (bm_sb, bm_sh 0 where the mask reads no b, h), where the kernels'
  ** own classification of a block depends on the tensors' values. */
  const void *mod_tensor[4];
  int mod_len[4];
  const int *block_mask;
  long long bm_sb, bm_sh;
  int bm_rows, bm_cols;
  /* fp8 (e4m3): the inputs' descales, as FlashAttention-3's q_descale,
  ** k_descale and v_descale: each NULL (1) or float32 (batch, kv_heads)
  ** contiguous; the query heads of a K/V head take its, S = Q K^T q_descale
  ** k_descale and O = P V v_descale. With descale_shift > 0 (the wg
  ** family's blockscale form), a descale per block of R = 2^descale_shift
  ** rows instead: q_descale (batch, heads, ceil(seq_q / R)), k_descale
  ** and v_descale (batch, kv_heads, ceil(seq_k / R)); query row r takes
  ** its head's block r / R, key c its K/V head's block c / R. */
  const float *q_descale, *k_descale, *v_descale;
  int descale_shift;
  fa_tmap tmap[6];        /* TMA descriptors of the kernels that load by TMA (sm_90a):
                          ** what each holds is the template's to say; zeros elsewhere */
} fa_params;

/* The page of cache position c (0 <= c < 2^31), c / page_size, from the
** magic multiplier and shift fa_page_divisor gives (Granlund and
** Montgomery's division by invariant integers, as CUTLASS's FastDivmod):
** the high word of c * magic, plus c, shifted. */
#define FA_PAGE_OF(p, c)                                                              \
  ((int)(((unsigned)(((unsigned long long)(unsigned)(c) * (p).page_magic) >> 32) +   \
          (unsigned)(c)) >> (p).page_shift))

/* The K/V head that Q head h reads; the kernels compute it once per CTA. */
#define FA_KV_HEAD(p, h) ((p).kv_group > 1 ? (h) / (p).kv_group : (h))

#endif
