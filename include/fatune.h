/*
** fatune.h
** libfatune: FlashAttention, forward and backward, with the kernels fatune
** tuned.
**
** Open a context on a results database and a device (the GPU, or the CPU
** emulator), then call fatune_attention (strided tensors, GQA, a
** framework's device and stream) or fatune_attention_forward (contiguous
** tensors), fatune_attention_backward for the gradients, and
** fatune_attention_kvcache for new tokens over a (paged) KV cache. It picks the
** variant recorded as best for the problem's key (device, op, dtype, head
** dim, seq_q, seq_k, causal); else the one tuned for the nearest seq_q on the same
** device, dtype, dim and causal; else the family's default. The kernel is
** regenerated from the templates, its binary taken from the database's
** compile cache when the cached entry matches the regenerated source hash
** (compiled and stored otherwise), kept in memory, and launched. A
** database file that has no write permission bit, or is in a folder that
** has none, or that the user cannot write, is opened read-only and never
** written: kernels are then compiled in memory, without the cache.
**
** A stored variant runs only when its config fits the problem exactly
** (dim, dtype, causal, and the family the dtype takes); any other, or a
** config the templates refuse, is passed over for the default, silently
** unless the environment sets FATUNE_VERBOSE, which has the library say
** why on stderr, once per problem key and context, and name each default
** it runs for want of a record.
**
** Every function returns FATUNE_OK or a status; fatune_errmsg gives the
** message of the calling thread's last failure. A context may be used by
** several threads at once.
*/
#ifndef FATUNE_H
#define FATUNE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FATUNE_API __attribute__((visibility("default")))
#else
#define FATUNE_API
#endif

typedef enum fatune_status {
  FATUNE_OK = 0,
  FATUNE_EINVAL,     /* a bad argument or problem */
  FATUNE_ENODEV,     /* no such backend here (no driver, no GPU) */
  FATUNE_EDB,        /* the database cannot be opened or read */
  FATUNE_ECOMPILE,   /* a kernel does not compile */
  FATUNE_ELAUNCH,    /* a kernel failed to run, or the device failed */
  FATUNE_ENOMEM,     /* out of host or device memory */
  FATUNE_EINTERNAL,  /* fatune's own parts are broken (its templates), or a thread would not start */
  FATUNE_ENOTUNED    /* nothing recorded for the problem meets the error budget or the
                        determinism asked for (tune it: the main job records both) */
} fatune_status;

/* FATUNE_E4M3: OCP FP8 (CUDA's __nv_fp8_e4m3, torch.float8_e4m3fn), the
** inputs of FlashAttention-3's fp8 forward pass: Q, K and V in e4m3, O in
** bf16, the logsumexp in fp32, with optional descales
** (fatune_attention_args). Only fatune_attention and
** fatune_attention_forward take it, and only where the Hopper family
** computes it: sm_90a (an H100 or H200, or the emulator with emu_arch
** "sm_90a", fatune_options'), head dims that are multiples of 8 up to 256,
** V's head dim Q's; elsewhere the call is FATUNE_EINVAL saying so. */
typedef enum fatune_dtype {
  FATUNE_FP32 = 0, FATUNE_FP64 = 1, FATUNE_FP16 = 2, FATUNE_BF16 = 3, FATUNE_E4M3 = 4
} fatune_dtype;

/* Q, K, V, O are contiguous (batch, heads, seq, dim); K and V have seq_k
** rows, Q and O seq_q; V and O have dim_v columns, Q and K dim. The
** logsumexp is [batch][heads][seq_q], fp64 for fp64 and fp32 otherwise.
** Causal masks align to the bottom-right corner. Zero-initialise it: a
** field added later means, at zero, what the call did before. */
typedef struct fatune_problem {
  int batch, heads, seq_q, seq_k, dim;
  fatune_dtype dtype;
  int causal;
  double scale;      /* 0: 1/sqrt(dim); else positive, at most FLT_MAX / log2(e)
                        (about 2.36e38: the kernels carry scale * log2(e) as a float) */
  int dim_v;         /* V's and O's head dim, 1 to 576 (192 beside dim 192 or 128, 512
                        beside 576 as DeepSeek's); 0: dim */
  const struct fatune_mod *mod;  /* NULL, or a score or mask modification (fatune_choose:
                                    the variant a call under it runs) */
} fatune_problem;

/* The GPU of the calling thread's current CUDA context (a framework's). */
#define FATUNE_DEVICE_CURRENT (-1)

/* Zero-initialise it: a field added later means, at zero, what it did before. */
typedef struct fatune_options {
  const char *db_path;   /* NULL: $FATUNE_DB, else ~/.cache/fatune/fatune.db */
  const char *backend;   /* "auto" (NULL), "cuda" or "emu" */
  int device;            /* cuda: the GPU's index (0, the default, is the first), or
                            FATUNE_DEVICE_CURRENT; the emulator ignores it */
  const char *emu_arch;  /* the target the emulator runs the kernels of ("sm_90a": the
                            Hopper family's, e4m3 among them); NULL: $FATUNE_EMU_ARCH,
                            else the tuner's default (sm_90); a GPU ignores it */
} fatune_options;

/* A tensor of the attention: the four dims are (batch, heads, seq, dim),
** its strides in elements, not bytes, any order in memory. */
typedef struct fatune_tensor {
  void *data;            /* device memory on cuda, host memory on the emulator */
  fatune_dtype dtype;
  long long shape[4];
  long long stride[4];
} fatune_tensor;

/* A score or mask modification (the README's "Score and mask
** modifications"), made by fatune_mod_create. */
typedef struct fatune_mod fatune_mod;

/* One call of fatune_attention. K and V have seq_k rows and heads that
** divide Q's (grouped-query and multi-query attention: Q head h reads K/V
** head h / (heads_q / heads_kv)); O is shaped as Q. Every tensor has q's
** dtype but O with e4m3 inputs, which is FATUNE_BF16 (any other is
** FATUNE_EINVAL). lse is NULL or [batch][heads_q][seq_q], contiguous, fp64
** for fp64 and fp32 otherwise.
** Zero-initialise it: a later version may add fields at the end, zero
** meaning what the call did before (the soname changes with the layout). */
typedef struct fatune_attention_args {
  fatune_tensor q, k, v, o;
  void *lse;
  int causal;            /* bottom-right aligned when seq_q != seq_k */
  double scale;          /* 0: 1/sqrt(dim); as fatune_problem's */
  void *stream;          /* cuda: the CUstream to queue on; NULL, the default stream */
  /* The error budget (fatune best --max-error): 0, any variant; else only a
  ** recorded one whose norm-relative error on its main case and on every
  ** case of the adversarial suite was at most this (1e-16 to 1); nothing
  ** recorded that meets it gives FATUNE_ENOTUNED, never the default. */
  double max_rel_err;
  int deterministic;     /* nonzero: only a recorded variant that gave the same bits every run */
  const fatune_mod *mod; /* NULL, or the modification every score and key goes through: the
                            variant recorded best under it (fatune --mod), else the default
                            under it; kept alive by the caller through the call */
  /* fp8 (e4m3) only, as FlashAttention-3's: each NULL (1) or (batch,
  ** heads_kv) float32, contiguous and 4-byte aligned, device memory on
  ** cuda and host memory on the emulator; the query heads of a K/V head
  ** take its. O = softmax(scale q_descale k_descale Q K^T) V v_descale,
  ** Q, K and V as stored in e4m3. Given with another dtype: FATUNE_EINVAL. */
  const float *q_descale, *k_descale, *v_descale;
  /* fp8 only: 0, the descales above; R (a power of two from 64), a descale
  ** per block of R rows of each head instead (FlashAttention-3's block
  ** quantization): q_descale (batch, heads_q, ceil(seq_q / R)), k_descale
  ** and v_descale (batch, heads_kv, ceil(seq_k / R)), float32, contiguous;
  ** query row r takes block r / R of its head's, key c block c / R of its
  ** K/V head's. Positive and finite, as every descale. */
  int descale_rows;
} fatune_attention_args;

/* One call of fatune_attention_backward: the forward call's q, k, v, o
** and logsumexp (lse, as fatune_attention wrote it), dout (the gradient
** of the loss with respect to o, shaped as o); dq, dk and dv receive the
** gradients, shaped as q, k and v. K and V may have fewer heads than Q,
** as in fatune_attention: dK and dV are summed over the query heads of
** each group. Zero-initialise it, as fatune_attention_args. */
typedef struct fatune_backward_args {
  fatune_tensor q, k, v, o, dout;
  fatune_tensor dq, dk, dv;
  const void *lse;
  int causal;            /* as the forward call's */
  double scale;          /* as the forward call's: 0 for 1/sqrt(dim) */
  void *stream;          /* cuda: the CUstream to queue on; NULL, the default stream */
  const void *dlse;      /* NULL, or the loss's gradient with respect to lse, laid out
                            as lse */
  double max_rel_err;    /* as fatune_attention_args' */
  int deterministic;
  const fatune_mod *mod; /* NULL, or the forward call's modification: the gradients of the
                            modified scores (its score part's derivative), the keys its mask
                            hides passing none; kept alive by the caller through the call */
} fatune_backward_args;

typedef struct fatune_ctx fatune_ctx;

/* Where the variant for a problem came from. */
typedef enum fatune_choice { FATUNE_EXACT, FATUNE_NEAREST, FATUNE_DEFAULT } fatune_choice;

FATUNE_API fatune_status fatune_open(const fatune_options *opts, fatune_ctx **out);
FATUNE_API void fatune_close(fatune_ctx *ctx);

/* "cuda" or "emu". */
FATUNE_API const char *fatune_backend(const fatune_ctx *ctx);

/* O (and lse, which may be NULL) for q, k, v: fatune_attention on
** contiguous (batch, heads, seq, dim) tensors with as many K/V heads as Q
** heads (for e4m3, o in bf16 and no descales). Device pointers on cuda, host pointers on the emulator. stream: a
** CUstream, or NULL; on cuda the call returns once the kernel is queued on
** it. Q, K, V and O must be 16-byte aligned (as cudaMalloc's are) for fp16
** and bf16 with a head dim that is a multiple of 8, whose kernels move 16
** bytes at a time, and aligned to their element otherwise; lse to its
** element. A misaligned pointer gives FATUNE_EINVAL, naming it, and
** nothing is launched. */
FATUNE_API fatune_status fatune_attention_forward(fatune_ctx *ctx, const fatune_problem *p, const void *q,
                                       const void *k, const void *v, void *o, void *lse,
                                       void *stream);

/* O = attention(Q, K, V) as args says. The checks (each failure a
** FATUNE_EINVAL whose message names the tensor and, for a stride, which
** one): one dtype; shapes that agree; dim stride 1; strides not negative;
** O's elements distinct (taken from the smallest stride up, each of O's
** strides at least the span of the dims of smaller stride); O sharing no
** byte with Q, K or V, nor lse with Q, K, V or O, judged by the spans from
** each one's first byte to its last (Q, K and V may share memory: they are
** only read); the scale in range; pointers and strides
** aligned to the element, and to 16 bytes where the chosen kernel moves 16
** bytes at a time (fp16 and bf16 with a head dim that is a multiple of 8,
** and e4m3, as cudaMalloc'd, contiguous tensors are). On cuda the call pushes the
** context's GPU's primary context, queues the kernel on args->stream and
** pops it again: it does not wait, and the caller's current context is
** left as it was. With lse NULL the logsumexp goes to a scratch buffer of
** the context, grown when a larger problem comes (the only call that
** waits for the device); the kernels with a workspace (the FA1-style loop
** order, never the default; e4m3's, which writes V transposed there first)
** allocate it per call and wait. */
FATUNE_API fatune_status fatune_attention(fatune_ctx *ctx, const fatune_attention_args *args);

/* dQ, dK, dV of attention as args says: the variant of op bwd recorded as
** best for the problem's key (else the nearest seq_q's, else the
** family's default), as fatune_attention chooses the forward pass's. The
** same checks as fatune_attention, over all eight tensors: what the call
** writes (dq, dk, dv) shares no byte with anything else, and lse must be
** given. The kernels keep nothing of seq_q x seq_k: their workspaces (one
** value per query row, D = rowsum(dO * O); with dq=atomic also a float
** accumulator shaped as Q) are allocated per call, so the call waits for
** the device. A dq=separate variant gives the same bits on every run; a
** dq=atomic one adds dQ across CTAs in the order they run. */
FATUNE_API fatune_status fatune_attention_backward(fatune_ctx *ctx,
                                                   const fatune_backward_args *args);

/* One call of fatune_attention_kvcache: the new tokens' attention over a
** KV cache, as flash_attn_with_kvcache computes it (the README's
** "Decoding over a KV cache"). q is (batch, heads, seq_q, dim), the new
** tokens of each sequence, and o as q with dim_v; k_cache and v_cache are
** pools of pages, shape (num_pages, page_size, kv_heads, dim): a paged
** cache with a block table, or with block_table NULL a contiguous one,
** (batch, capacity, kv_heads, dim), sequence b's keys on its own "page" b.
** Query head h reads K/V head h / (heads / kv_heads). Sequence b has
** cache_seqlens[b] keys; with causal, its new token r sees the keys up to
** r + cache_seqlens[b] - seq_q. block_table holds batch rows of
** pages_per_seq page indices; it and cache_seqlens are int32 where the
** kernels read them (device memory on cuda, host memory on the emulator).
** The kernels check each page index and length before they use it: a page
** outside the pool is never read, a length past the capacity (pages_per_seq
** x page_size) is cut to it, and the call returns FATUNE_EINVAL saying so,
** after the kernels ran. The call waits for the device (it reads that
** flag back and frees the splits' workspace). Zero-initialise it. */
typedef struct fatune_kvcache_args {
  fatune_tensor q, k_cache, v_cache, o;
  void *lse;             /* NULL, or [batch][heads][seq_q] as fatune_attention's */
  const int *block_table;
  int pages_per_seq;     /* the block table's row length; ignored without a table */
  const int *cache_seqlens;
  int max_seqlen_k;      /* the longest sequence's keys, for the choice of kernel; 0: the
                            capacity */
  int causal;
  double scale;          /* as fatune_attention_args' */
  void *stream;          /* cuda: the CUstream to queue on; NULL, the default stream */
  /* New keys and values (flash_attn's k= and v=), or data NULL: shaped as
  ** q with the cache's K/V heads, (batch, kv_heads, seq_q, dim) and v_new
  ** with V's head dim; token j of sequence b goes into the cache at
  ** position cache_seqlens[b] + j (through the block table) before the
  ** attention, which then covers cache_seqlens[b] + seq_q keys (and
  ** max_seqlen_k counts them). cache_seqlens itself is not changed. A
  ** sequence without room for them gets nothing written, and a page
  ** outside the pool is never written: the call says so. */
  fatune_tensor k_new, v_new;
  /* NULL, or with a contiguous cache (no block table) the cache's row of
  ** each sequence: batch int32 indices, sequence b's keys (and its new
  ** ones) in row cache_batch_idx[b] of k_cache and v_cache, which may then
  ** hold any number of rows (flash_attn's cache_batch_idx). An index
  ** outside the cache is never followed: the call says so. */
  const int *cache_batch_idx;
  /* Rotary embeddings (flash_attn's rotary_cos, rotary_sin), with new keys
  ** only: NULL, or both (rotary_len, rotary_dim / 2) in q's dtype,
  ** contiguous, rotary_dim even and at most the head dim. New key j of
  ** sequence b is rotated at its position cache_seqlens[b] + j before it
  ** goes into the cache; the queries at the same positions under causal,
  ** else all at cache_seqlens[b]; rotary_interleaved: the pairs (2i,
  ** 2i + 1), else (i, i + rotary_dim / 2) (GPT-NeoX's). q itself is not
  ** changed. A position past rotary_len is not rotated, and the call says
  ** so. */
  const void *rotary_cos, *rotary_sin;
  int rotary_len, rotary_dim, rotary_interleaved;
  /* NULL, or a score or mask modification (fatune_mod_create: a sliding
  ** window, softcap, ALiBi, a file's) over each sequence's keys, seq_k its
  ** own length; the decoding kernels and the forward pass's form over the
  ** cache both apply it, and under a mask read only the blocks it leaves.
  ** A call reads it while it runs; a plan keeps what it needs of it, and
  ** its runs must give the same modification. */
  const fatune_mod *mod;
} fatune_kvcache_args;

/* O for the new tokens over the cache as args says: the variant recorded
** best for the key (op decode, dtype, head dims, the GQA ratio, the page
** size; the nearest tuned batch by ratio, then key length), else the decoding
** family's default. The checks are fatune_attention's for q, o and lse;
** the pools' head dims and dtype agree with q's, their heads divide q's,
** and, without a block table, they hold a page per sequence. */
FATUNE_API fatune_status fatune_attention_kvcache(fatune_ctx *ctx, const fatune_kvcache_args *args);

/* A variable-length batch, as flash_attn_varlen_func takes it: every
** sequence's tokens packed, q and o shaped (1, heads, total_q, dim), k and
** v (1, kv_heads, total_k, dim) (flash_attn's contiguous (total, heads,
** dim) is strides {0, dim, heads * dim, 1}); sequence b's queries are
** tokens cu_seqlens_q[b] up to cu_seqlens_q[b + 1] of q and o, its keys
** cu_seqlens_k's of k and v. cu_seqlens_q and cu_seqlens_k hold batch + 1
** int32 offsets where the kernels read them (device memory on cuda, host
** memory on the emulator); max_seqlen_q and max_seqlen_k bound every
** sequence's lengths. causal masks each sequence on its own, bottom-right
** aligned. lse is NULL or [heads][total_q] (fp32; fp64 for fp64). The
** kernels check each sequence's offsets before they use them: a sequence
** whose offsets are negative, decreasing, past the tokens packed or wider
** than the maxima is never read, and the call returns FATUNE_EINVAL saying
** so after the kernels ran. The call waits for the device (it reads that
** flag back). Zero-initialise it. */
typedef struct fatune_varlen_args {
  fatune_tensor q, k, v, o;
  void *lse;
  const int *cu_seqlens_q, *cu_seqlens_k;
  int batch;
  int max_seqlen_q, max_seqlen_k;
  int causal;
  double scale;          /* as fatune_attention_args' */
  void *stream;          /* cuda: the CUstream to queue on; NULL, the default stream */
  const fatune_mod *mod; /* NULL, or a modification over each sequence on its own: seq_q,
                            seq_k and the indices its own, b its index in the batch */
} fatune_varlen_args;

/* O of a variable-length batch as args says: the variant recorded best for
** the dense key of its longest sequences (op fwd, dtype, head dims,
** max_seqlen_q, max_seqlen_k, causal), run with variable-length
** addressing, else the default (every forward family has that form: simt,
** tc and, on sm_90a, wg). */
FATUNE_API fatune_status fatune_attention_varlen(fatune_ctx *ctx, const fatune_varlen_args *args);

/* The gradients of a variable-length batch (flash_attn_varlen_func's
** backward pass): the forward call's packed q, k, v and o, its lse
** ([heads][total_q], which must be given) and cu_seqlens, maxima, causal
** and scale; dout shaped as o; dq, dk and dv receive the gradients,
** packed as q, k and v (dK and dV summed over each K/V head's group of
** query heads). The checks are fatune_attention_varlen's and
** fatune_attention_backward's, the kernels' checks of the offsets too (a
** sequence no kernel may follow is skipped, and the call says so). The
** variant is the one recorded best for the dense key of the longest
** sequences with op bwd, run with variable-length addressing, else the
** default; its workspaces hold the longest sequence's rows per sequence.
** The call waits for the device. Zero-initialise it. */
typedef struct fatune_varlen_backward_args {
  fatune_tensor q, k, v, o, dout;
  fatune_tensor dq, dk, dv;
  const void *lse;
  const void *dlse;      /* NULL, or the loss's gradient with respect to lse, laid out as lse */
  const int *cu_seqlens_q, *cu_seqlens_k;
  int batch;
  int max_seqlen_q, max_seqlen_k;
  int causal;
  double scale;          /* as fatune_attention_args' */
  void *stream;          /* cuda: the CUstream to queue on; NULL, the default stream */
  int deterministic;     /* nonzero: only a recorded variant that gave the same bits every run */
  const fatune_mod *mod; /* NULL, or the forward call's modification */
} fatune_varlen_backward_args;

FATUNE_API fatune_status fatune_attention_varlen_backward(fatune_ctx *ctx,
                                                          const fatune_varlen_backward_args *args);

/* Decoding planned once and run many times, as a server's decode step is
** (and captured in a CUDA graph): the plan chooses and builds the kernel
** for the problem args describe (their data is not read) and allocates
** the splits' workspace, a scratch lse when args has none, and the
** kernels' error flags; fatune_decode_plan_run queues the launches on
** args->stream with no allocation, no copy and no wait, so that it may be
** captured; its args must describe the planned problem (the same shapes,
** the same presence of a block table and of lse; any data and strides).
** The kernels' checks of the block table and the lengths accumulate in
** the plan: fatune_decode_plan_check waits for the device, returns
** FATUNE_EINVAL saying what they met since the last check, and clears
** them. Free a plan (it waits for its runs) before its context. */
typedef struct fatune_decode_plan fatune_decode_plan;
FATUNE_API fatune_status fatune_decode_plan_create(fatune_ctx *ctx, const fatune_kvcache_args *args,
                                                   fatune_decode_plan **out);
FATUNE_API fatune_status fatune_decode_plan_run(fatune_decode_plan *plan,
                                                const fatune_kvcache_args *args);
FATUNE_API fatune_status fatune_decode_plan_check(fatune_decode_plan *plan);
/* The plan's variant's name ("" for no plan). */
FATUNE_API const char *fatune_decode_plan_variant(const fatune_decode_plan *plan);
FATUNE_API void fatune_decode_plan_free(fatune_decode_plan *plan);

/* Everything fatune_attention does but the launch: the checks, the kernel
** (chosen and built on first use, then from memory), the launch shape,
** the argument block, the scratch buffer. Its name into name (may be
** NULL). What a call costs on the host, measured apart from the GPU. */
FATUNE_API fatune_status fatune_attention_plan(fatune_ctx *ctx, const fatune_attention_args *args,
                                               char *name, size_t n);

/* The variant fatune_attention_forward would run, its name into name. */
FATUNE_API fatune_status fatune_choose(fatune_ctx *ctx, const fatune_problem *p, char *name, size_t n,
                            fatune_choice *choice);

/* Drops the variant chosen for every problem so far (and its kernel): the
** next call for each problem chooses again from the database, as a
** program does after a tune. Waits for the calls in flight. */
FATUNE_API fatune_status fatune_forget(fatune_ctx *ctx);

/* A modification: a built-in by spec ("window=256", "softcap=30", "alibi";
** text NULL), or the text of a modification file (spec its name, for
** messages). A mistake in it is FATUNE_EINVAL with a message naming the
** line. Free it with fatune_mod_free once no call uses it. */
FATUNE_API fatune_status fatune_mod_create(fatune_ctx *ctx, const char *spec, const char *text,
                                           fatune_mod **out);
FATUNE_API void fatune_mod_free(fatune_mod *m);
/* Its name with every parameter ("window=256:0"), as the database keeps it. */
FATUNE_API const char *fatune_mod_label(const fatune_mod *m);
/* Set the contents of the captured tensor `name` (a modification file's
** `tensors`: document ids, a bias table): n int32 or float32 elements, as
** the file declares it, read from host memory at data. The library keeps
** its own copies, on the device for the kernels and on the host for the
** block masks it builds from them (once per problem shape), so data may be
** freed on return. Every later call under m reads these contents; setting
** them again never recompiles. A call under m before each of its tensors
** is set is FATUNE_EINVAL; so is a call that may index a tensor outside
** its n elements and does (such a call checks the kernels' flag and waits
** for them). m may be used by one context only, its creator's; set no
** tensor while a call under m runs in another thread, and free m before
** closing that context. */
FATUNE_API fatune_status fatune_mod_set_tensor(fatune_mod *m, const char *name, const void *data,
                                               long long n);
/* m's captured tensor i (from 0, in the file's order): its name, and
** whether it holds int32 (1) or float32 (0) elements. FATUNE_EINVAL past
** the last. */
FATUNE_API fatune_status fatune_mod_tensor(const fatune_mod *m, int i, const char **name,
                                           int *is_int);

/* Kernels this context has made ready (compiled, or loaded from the
** compile cache) since it opened: a call of a problem already seen, or
** under a modification whose tensors alone changed, makes none. */
FATUNE_API long long fatune_programs(const fatune_ctx *ctx);

/* The message of this thread's last failure ("" after success). */
FATUNE_API const char *fatune_errmsg(void);

#ifdef __cplusplus
}
#endif

#endif
