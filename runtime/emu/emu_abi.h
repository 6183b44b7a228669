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

/* Bumped whenever a struct below or fa_params changes: a module built against another
** version is refused. */
#define FA_EMU_ABI_VERSION 11

/* Where a kernel finds the thread it runs as: each fiber's stack lies in a
** span of FA_EMU_STACK_SPAN bytes aligned to that size, whose last word
** holds the fiber's fa_emu_thread. A module thus needs no thread-local
** storage, of which a process has little for loaded objects: about 200
** modules with a TLS variable each use it all up. */
#define FA_EMU_STACK_SPAN (512u * 1024u)

/* Exact counts for one launch: core's fa_counters (fa_counters.h), the
** one list of them. In an emulated kernel's text fa_counters.h comes
** first, so the include below is skipped there. */
#ifndef FA_COUNTERS
#include "fa_counters.h"
#endif
typedef fa_counters fa_emu_counters;

/* What a thread waits for when it calls back into the host. */
enum {
  FA_EMU_WAIT_CTA = 0,   /* __syncthreads */
  FA_EMU_WAIT_WARP = 1,  /* __syncwarp */
  FA_EMU_WAIT_XCHG = 2,  /* a warp collective: shuffle, ldmatrix, mma */
  FA_EMU_WAIT_GROUP = 3, /* a warpgroup collective: wgmma, setmaxnreg */
  FA_EMU_WAIT_MBAR = 4,  /* an mbarrier phase: wait_obj the barrier, wait_arg the parity */
  FA_EMU_WAIT_NAMED = 5, /* bar.sync: wait_arg the id, wait_count the threads */
  FA_EMU_WAIT_ARRIVE = 6 /* bar.arrive: as bar.sync, but the thread goes on */
};

/* When an asynchronous copy or wgmma completes, between its issue and the
** wait that retires it (the schedule picks). */
enum {
  FA_EMU_ASYNC_LATE = 0,   /* at the retiring wait (forward) */
  FA_EMU_ASYNC_EARLY = 1,  /* at issue (reverse) */
  FA_EMU_ASYNC_RANDOM = 2  /* at issue, at any later yield of the thread, or at the wait */
};

/* Why a thread stops the launch. */
enum {
  FA_EMU_FAULT_GLOBAL = 0,    /* global access outside every buffer */
  FA_EMU_FAULT_SHARED = 1,    /* shared access outside the CTA's shared memory */
  FA_EMU_FAULT_ALIGN = 2,     /* address not aligned to the access size */
  FA_EMU_FAULT_ASYNC = 3      /* too many cp.async copies in flight */
};

/* An mbarrier, the 64 bits in shared memory (the emulator's own encoding):
** pending arrivals in bits 0-11, expected arrivals 12-23, the signed
** transaction count 24-55, a tag 56-62 that marks it initialized, the
** phase parity in bit 63. A phase completes when no arrival and no
** transaction byte is pending. */
#define FA_EMU_MBAR_TAG 0x5Aull
#define FA_EMU_MBAR_PHASE(x) ((unsigned)((x) >> 63))
#define FA_EMU_MBAR_OK(x) ((((x) >> 56) & 0x7Full) == FA_EMU_MBAR_TAG)

/* The emulator's tensor map (fa_tmap, 16 words), built by the emu backend
** from the arguments of cuTensorMapEncodeTiled: w[0] the tag, w[1] the
** base address, w[2] element bytes | rank << 8 | swizzle bytes << 16,
** w[3..6] the dimensions, w[7..9] the byte strides of dimensions 1..3,
** w[10] the box, 16 bits per dimension, innermost lowest. */
#define FA_EMU_TMAP_TAG 0x46414D5054554D45ull  /* "EMUTPMAF" */

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
#define FA_EMU_MAX_WGMMA 32    /* wgmma in flight per thread */
#define FA_EMU_MAX_BULK 32     /* TMA stores in flight per thread */
#define FA_EMU_MAX_TMA 1024    /* TMA loads in flight per CTA (wg's KV cache form: boxes
                               ** of 16 rows, and a row at a time where a sequence ends) */

/* One wgmma not yet retired, as one thread of its warpgroup sees it: its
** own rows of A (RS: taken at issue) and its fragment of D. */
typedef struct fa_emu_wgmma {
  float *d;                 /* the thread's accumulators, NaN until retired */
  unsigned long long da, db;  /* descriptors (da unused for RS) */
  unsigned short a[2][32];  /* RS: this thread's rows of A (k16, or fp8's k32), as bits */
  int n, scale_d, trans_a, trans_b, type, rs, done, chained;  /* type: FA_EMU_F16, ... */
  unsigned group;           /* wgmma commit group */
  float acc[128];           /* D before (scale_d), then the result */
} fa_emu_wgmma;

/* One TMA load or store in flight: the map copied at issue. */
typedef struct fa_emu_tma {
  unsigned long long map[16];
  unsigned char *smem;
  unsigned long long *bar;  /* loads: the mbarrier to complete_tx */
  int c[4];
  unsigned group;           /* stores: bulk group */
  int line;
} fa_emu_tma;

/* What a CTA's threads share beyond shared memory. */
typedef struct fa_emu_cta {
  fa_emu_tma *loads;                 /* TMA loads in flight, oldest first: FA_EMU_MAX_TMA */
  int nloads;
  int threads;                       /* the CTA's */
  int maxnreg[8];                    /* per warpgroup: its last setmaxnreg, 0 before */
} fa_emu_cta;

/* A warpgroup's exchange, double-buffered as a warp's. */
typedef struct fa_emu_wgroup {
  unsigned char xchg[2][128][32];
} fa_emu_wgroup;
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
  int gx;                           /* the grid's CTAs along x */
  unsigned char *smem, *smem_end;   /* the CTA's dynamic shared memory */
  unsigned char *smem_window;       /* where shared addresses start, 1024-aligned: descriptors,
                                       TMA boxes and swizzles count from it, as a GPU's do */
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
  /* sm_90 (prelude_emu_sm90.h). fail stops the launch with a message and
  ** never returns. progress, set by the module once a thread has something
  ** in flight, is called by the host at each yield (may land some of it)
  ** and, with drain, when the thread exits (lands its stores). */
  void (*fail)(fa_emu_thread *t, const char *msg, int line);
  void (*progress)(fa_emu_thread *t, int drain);
  int async_mode;                   /* FA_EMU_ASYNC_* */
  unsigned long long rng;           /* for FA_EMU_ASYNC_RANDOM, seeded per thread */
  const void *wait_obj;             /* what a FA_EMU_WAIT_MBAR/NAMED waits for */
  unsigned wait_arg, wait_count;
  fa_emu_wgroup *wgroup;
  unsigned wgen;                    /* warpgroup collectives this thread has been through */
  int wg_size;                      /* threads in this thread's warpgroup */
  fa_emu_wgmma *wgmma;              /* wgmma in flight, oldest first */
  int nwgmma;
  unsigned wgmma_group;
  fa_emu_tma *bulk;                 /* TMA stores in flight, oldest first */
  int nbulk;
  unsigned bulk_group;
  fa_emu_cta *cta;
};

#endif
