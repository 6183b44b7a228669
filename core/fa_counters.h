/*
** fa_counters.h
** What the CPU emulator counts in one launch, exactly: bytes are what the
** kernel asked for, per thread and access, summed; collectives count once
** per warp. FA_COUNTERS is the one list of them, in the order the
** database's JSON and the reports give them: X(field, JSON key, table
** label). The struct below (the backends' fa_counters and the emulator
** ABI's fa_emu_counters), the host's JSON, explore's tables and the
** templates' cost models (templates/counters.lua reads this text) all come
** from it. Plain C: it is also prepended, as text, to every emulated kernel.
*/
#ifndef FA_COUNTERS_H
#define FA_COUNTERS_H

#define FA_COUNTERS(X) \
  X(gmem_read, "global_bytes_read", "global bytes read")          /* global loads, cp.async sources included */ \
  X(gmem_written, "global_bytes_written", "global bytes written") /* global stores */ \
  X(atomics, "global_atomics", "global atomic adds")              /* global atomic adds, per thread (their bytes are read and written too) */ \
  X(smem_read, "smem_bytes_read", "shared bytes read")            /* shared loads, ldmatrix included */ \
  X(smem_written, "smem_bytes_written", "shared bytes written")   /* shared stores, cp.async destinations included */ \
  X(exp2, "exp_count", "exponentials")                            /* exponentials, per thread */ \
  X(log2, "log_count", "logarithms")                              /* logarithms, per thread */ \
  X(mma, "mma_count", "mma.sync")                                 /* mma.sync m16n8k16, per warp */ \
  X(ldmatrix, "ldmatrix_count", "ldmatrix")                       /* ldmatrix, per warp */ \
  X(cp_async, "cp_async_count", "cp.async")                       /* 16-byte cp.async copies, per thread */ \
  X(shuffles, "shuffles", "warp shuffles")                        /* warp shuffles, per warp */ \
  X(barriers, "barriers", "__syncthreads")                        /* __syncthreads, once per CTA and barrier */ \
  X(warp_syncs, "warp_syncs", "__syncwarp")                       /* __syncwarp, once per warp and barrier */ \
  X(rescale, "rescale_count", "rescale multiplies")               /* fa_rescale: O or P scaled by a softmax factor, per thread */ \
  X(wgmma, "wgmma_count", "wgmma")                                /* wgmma.mma_async, per warpgroup */ \
  X(wgmma_flops, "wgmma_flops", "wgmma FLOPs")                    /* 2 M N K of each wgmma, per warpgroup */ \
  X(tma_bytes, "tma_bytes", "TMA box bytes")                      /* box bytes of TMA loads and stores (out of bounds included) */ \
  X(mbar_waits, "mbar_waits", "mbarrier waits")                   /* mbarrier waits, per thread */ \
  X(named_waits, "named_bar_waits", "named-barrier waits")        /* named-barrier waits (bar.sync id, n), per thread */

#define FA_COUNTER_FIELD(f, json, label) unsigned long long f;
typedef struct fa_counters {
  FA_COUNTERS(FA_COUNTER_FIELD)
} fa_counters;
#undef FA_COUNTER_FIELD

#endif
