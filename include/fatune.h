/*
** fatune.h
** libfatune: FlashAttention forward with the kernels fatune tuned.
**
** Open a context on a results database and a device (the GPU, or the CPU
** emulator), then call fatune_attention_forward. It picks the variant
** recorded as best for the problem's key (device, dtype, head dim, seq_q,
** seq_k, causal); else the one tuned for the nearest seq_q on the same
** device, dtype, dim and causal; else the family's default. The kernel is
** regenerated from the templates, its binary taken from the database's
** compile cache when the cached entry matches the regenerated source hash
** (compiled and stored otherwise), kept in memory, and launched.
**
** A stored variant runs only when its config fits the problem exactly
** (dim, dtype, causal, and the family the dtype takes); any other, or a
** config the templates refuse, is passed over for the default, silently
** unless the environment sets FATUNE_VERBOSE, which has the library say
** why on stderr, once per problem key and context.
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
  FATUNE_EINTERNAL   /* fatune's own parts are broken (its templates), or a thread would not start */
} fatune_status;

typedef enum fatune_dtype { FATUNE_FP32 = 0, FATUNE_FP64 = 1, FATUNE_FP16 = 2, FATUNE_BF16 = 3 } fatune_dtype;

/* Q, K, V, O are contiguous (batch, heads, seq, dim); K and V have seq_k
** rows, Q and O seq_q. The logsumexp is [batch][heads][seq_q], fp64 for
** fp64 and fp32 otherwise. Causal masks align to the bottom-right corner. */
typedef struct fatune_problem {
  int batch, heads, seq_q, seq_k, dim;
  fatune_dtype dtype;
  int causal;
  double scale;      /* 0: 1/sqrt(dim) */
} fatune_problem;

typedef struct fatune_options {
  const char *db_path;   /* NULL: $FATUNE_DB, else ~/.cache/fatune/fatune.db */
  const char *backend;   /* "auto" (NULL), "cuda" or "emu" */
} fatune_options;

typedef struct fatune_ctx fatune_ctx;

/* Where the variant for a problem came from. */
typedef enum fatune_choice { FATUNE_EXACT, FATUNE_NEAREST, FATUNE_DEFAULT } fatune_choice;

FATUNE_API fatune_status fatune_open(const fatune_options *opts, fatune_ctx **out);
FATUNE_API void fatune_close(fatune_ctx *ctx);

/* "cuda" or "emu". */
FATUNE_API const char *fatune_backend(const fatune_ctx *ctx);

/* O (and lse, which may be NULL) for q, k, v: device pointers on cuda,
** host pointers on the emulator. stream: a CUstream, or NULL; on cuda the
** call returns once the kernel is queued on it. Q, K, V and O must be
** 16-byte aligned (as cudaMalloc's are) for fp16 and bf16 with a head dim
** that is a multiple of 8, whose kernels move 16 bytes at a time, and
** aligned to their element otherwise; lse to its element. A misaligned
** pointer gives FATUNE_EINVAL, naming it, and nothing is launched. */
FATUNE_API fatune_status fatune_attention_forward(fatune_ctx *ctx, const fatune_problem *p, const void *q,
                                       const void *k, const void *v, void *o, void *lse,
                                       void *stream);

/* The variant fatune_attention_forward would run, its name into name. */
FATUNE_API fatune_status fatune_choose(fatune_ctx *ctx, const fatune_problem *p, char *name, size_t n,
                            fatune_choice *choice);

/* The message of this thread's last failure ("" after success). */
FATUNE_API const char *fatune_errmsg(void);

#ifdef __cplusplus
}
#endif

#endif
