/*
** emu_abi.h
** What the CPU emulator's host side and a compiled kernel module share: the
** per-thread state a kernel body reaches through the emulation prelude, and
** the counters it bumps. Like fa_params.h, this file is compiled into the
** host and pasted, as text, in front of every emulated kernel, so the two
** agree on the layout by construction.
*/
#ifndef EMU_ABI_H
#define EMU_ABI_H

/* Bumped whenever a struct below changes: a module built against another
** version is refused. */
#define FA_EMU_ABI_VERSION 2

/* Exact counts for one launch. Bytes are what the kernel asked for, per
** thread and access, summed; collectives count once per warp. */
typedef struct fa_emu_counters {
  unsigned long long gmem_read;     /* global loads, cp.async sources included */
  unsigned long long gmem_written;  /* global stores */
  unsigned long long smem_read;     /* shared loads, ldmatrix included */
  unsigned long long smem_written;  /* shared stores, cp.async destinations included */
  unsigned long long exp2;          /* exponentials, per thread */
  unsigned long long log2;          /* logarithms, per thread */
  unsigned long long shuffles;      /* warp shuffles, per warp */
  unsigned long long mma;           /* mma.sync m16n8k16, per warp */
  unsigned long long ldmatrix;      /* ldmatrix, per warp */
  unsigned long long cp_async;      /* 16-byte cp.async copies, per thread */
  unsigned long long barriers;      /* __syncthreads, once per CTA and barrier */
  unsigned long long warp_syncs;    /* __syncwarp, once per warp and barrier */
  unsigned long long rescale;       /* fa_rescale: O or P scaled by a softmax factor, per thread */
} fa_emu_counters;

/* What a thread waits for when it calls back into the host. */
enum {
  FA_EMU_WAIT_CTA = 0,   /* __syncthreads */
  FA_EMU_WAIT_WARP = 1,  /* __syncwarp */
  FA_EMU_WAIT_XCHG = 2   /* a warp collective: shuffle, ldmatrix, mma */
};

/* Why a thread stops the launch. */
enum {
  FA_EMU_FAULT_GLOBAL = 0,    /* global access outside every buffer */
  FA_EMU_FAULT_SHARED = 1,    /* shared access outside the CTA's shared memory */
  FA_EMU_FAULT_ALIGN = 2,     /* address not aligned to the access size */
  FA_EMU_FAULT_ASYNC = 3      /* too many cp.async copies in flight */
};

/* A global buffer the kernel may touch: [lo, hi). */
typedef struct fa_emu_range { unsigned long long lo, hi; } fa_emu_range;

/* One cp.async copy not yet landed in shared memory. */
typedef struct fa_emu_copy {
  unsigned char *dst;
  const unsigned char *src;
  int src_bytes;    /* copied from src; the rest of the 16 bytes are zeros */
  unsigned group;   /* commit group it belongs to */
} fa_emu_copy;

#define FA_EMU_MAX_COPIES 512  /* cp.async in flight per thread */
#define FA_EMU_XCHG_BYTES 64   /* what one lane brings to a warp collective */

typedef struct fa_emu_warp {
  /* Double-buffered: a lane that runs ahead writes the other buffer, and it
  ** cannot come back to this one before every lane has passed the next
  ** collective, that is, has read this one. */
  unsigned char xchg[2][32][FA_EMU_XCHG_BYTES];
} fa_emu_warp;

typedef struct fa_emu_thread fa_emu_thread;
struct fa_emu_thread {
  int tid, lane, warp, warp_size;   /* warp_size: lanes in this thread's warp */
  int bx, by, bz;                   /* block index */
  unsigned char *smem, *smem_end;   /* the CTA's dynamic shared memory */
  const fa_emu_range *ranges;       /* global buffers */
  int nranges;
  unsigned xgen;                    /* collectives this thread has been through */
  fa_emu_counters *ctr;             /* the running CTA's counters */
  fa_emu_warp *w;
  /* Host callbacks. wait returns when the barrier opens; fault never returns. */
  void (*wait)(fa_emu_thread *t, int kind, int line);
  void (*fault)(fa_emu_thread *t, int kind, const void *addr, int bytes, int line);
  /* cp.async: copies in flight, oldest first, and the open commit group. */
  fa_emu_copy *copies;
  int ncopies;
  unsigned group;
};

#endif
