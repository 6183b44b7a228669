/*
** sass.h
** Static analysis of a kernel's machine code (SASS): the main loop's
** instructions per iteration, by kind. The text is nvdisasm's default
** output for a cubin (`nvdisasm -c FILE.cubin`): one function per
** `.section .text.NAME` line, instructions after their `/ *0a40* /` offset,
** branch targets as labels (BRA `(.L_x_12)).
**
** The control-flow graph comes from the branches and labels; the natural
** loops from back edges to a header that dominates their source. The main
** loop is the loop holding the most instructions of the product (HGMMA,
** else HMMA, else DFMA, else FFMA: the SIMT family's product shares FFMA
** with its softmax), the outermost of those that hold as many, and of
** disjoint ones (a causal kernel's masked and unmasked loops) the one
** with fewer instructions: the steady state.
**
** HGMMA (wgmma, sm_90a): each instruction is a whole warpgroup's 64xNx16
** product, so no loop over key parts nests in the main loop; the main
** loop is the innermost loop holding HGMMA, so that a persistent kernel's
** loop over tiles (FlashAttention-3's) is not taken for it. loop_hmma
** then counts HGMMA (mma says which). A warp-specialized kernel's producer
** loop, the innermost loop holding UTMALDG and no product, is counted
** apart (producer_*); a waterfall loop in it (a BRA.U.ANY back around a
** TMA load, run once for an elected thread's uniform address) counts as
** straight code. The spin of an mbarrier wait (a loop of nothing but
** SYNCS.PHASECHK and branches, taken only while the barrier's phase has
** not completed, and the branch back from it) counts in neither: the
** first try, laid out in the loop, does.
**
** Per iteration, an inner loop (the tensor-core template's loop over key
** parts) counts its trip count times. The analyser cannot see a trip count
** in the code; the caller may pass the product's FLOPs per warp per
** iteration (known from the tile: 4 block_m block_n dim / warps), and the
** trip count is the fewest whole trips that make the product instructions
** reach it (HMMA m16n8k16: 4096 FLOPs; FFMA, DFMA: 64) without passing it
** by more than an eighth (the row sums the deferred kernel takes on the
** tensor cores). Otherwise an inner loop counts once and inner_trips is
** 0: the count is unknown.
**
** A masking block is left out: a region that a forward conditional branch
** in the loop skips (the instructions laid out between the branch and its
** target) and that holds only integer, compare, select and move
** instructions, at least one select (FSEL/SEL): the -inf written past
** seq_k or above the causal diagonal, which only tail blocks take. What
** the analyser cannot see: a mask compiled into predicated instructions
** (counted, as every iteration issues them), a masking block laid out
** elsewhere than between the branch and its target, and the frequency of
** any other branch (every block of the loop is counted once per iteration).
*/
#ifndef SASS_H
#define SASS_H

#include <stddef.h>


typedef struct sass_counts {
  int found;            /* 1: a main loop was found; else the counts are 0 */
  char mma[8];          /* the product's instruction: HGMMA, HMMA, DFMA or FFMA */
  int registers;        /* the function's registers (SHI_REGISTERS), -1 unknown */
  int inner_loops;      /* loops nested in the main loop */
  int inner_trips;      /* the trip count they were counted with; 0 unknown (counted once) */
  int masked_left_out;  /* instructions of masking blocks and lazy rescales left out */
  /* per iteration of the main loop, per warp; NOPs are not counted */
  long loop_instructions, loop_hmma, loop_mufu, loop_ldsm, loop_lds, loop_ldgsts, loop_bar,
      loop_shfl, loop_local, loop_int;
  /* of loop_hmma, those accumulating in f16 (HMMA.16816.F16: S in f16),
  ** which GeForce parts run at twice the rate; not kept in the database */
  long loop_hmma_f16acc;
  /* Hopper's: TMA loads, mbarrier operations (SYNCS), wgmma fences and
  ** waits (WARPGROUP.ARRIVE, WARPGROUP.DEPBAR) */
  long loop_utmaldg, loop_syncs, loop_warpgroup;
  double non_mma_per_mma;  /* (instructions - product) / product */
  /* A warp-specialized kernel's producer: the loop of TMA loads outside
  ** the main loop (producer_found 0: none), counted once per iteration. */
  int producer_found;
  long producer_instructions, producer_utmaldg;
} sass_counts;

/* ---- The trace: the instructions themselves, for the timing model ----
** With -hex (as sass_disassemble runs nvdisasm), each instruction comes
** with its control bits, which ptxas sets and the hardware obeys
** (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
** Microbenchmarking", 2018, section 2.1; unchanged through Hopper): the
** cycles to wait before the warp's next instruction (stall), a yield
** hint, the scoreboard set when a variable-latency result is written
** (wbar) and when its operands have been read (rbar), 7 for none, and the
** scoreboards to wait for before issuing (wait, a mask of six). */
#define SASS_TEXT_LEN 96
typedef struct sass_op {
  char op[16];                  /* "HMMA" */
  char text[SASS_TEXT_LEN];     /* "HMMA.16816.F32.BF16 R152, R4, R44, RZ" (truncated) */
  int predicated, has_ctrl;     /* has_ctrl 0: no encoding in the text (stall 1, no scoreboards) */
  unsigned stall, yield, wbar, rbar, wait;
} sass_op;
typedef struct sass_seq { sass_op *op; int n, cap; } sass_seq;
/* One iteration of the main loop (inner loops repeated their trip count)
** and of a warp-specialized kernel's producer loop, in layout order,
** without the blocks the counts leave out (masking, spins, retries, NOPs). */
typedef struct sass_trace { sass_seq loop, producer; } sass_trace;

/* sass_analyse, and the trace into *trace (free with sass_trace_free). */
int sass_analyse_trace(const char *text, const char *function, double flops_per_warp,
                       sass_counts *out, sass_trace *trace, char *err, size_t errlen);
void sass_trace_free(sass_trace *t);

/* The names of the functions in nvdisasm text, in order: *names is one
** malloc'ed array of *n pointers into its own storage (free(*names)).
** 0, or -1 with a message. */
int sass_functions(const char *text, char ***names, size_t *n, char *err, size_t errlen);

/* Analyse `function` of nvdisasm text (NULL: the first function).
** flops_per_warp: the product's FLOPs per iteration per warp, for an
** inner loop's trip count; 0 when unknown. 0 (out->found says whether a
** main loop was found), or -1 with a message on text it cannot read. */
int sass_analyse(const char *text, const char *function, double flops_per_warp, sass_counts *out,
                 char *err, size_t errlen);

/* An nvdisasm to run: $FATUNE_NVDISASM, else on PATH, in $CUDA_HOME/bin or
** /usr/local/cuda/bin, else the PyPI package nvidia-cuda-nvdisasm's (asked
** of python3). 0 with its path in buf, or -1 when there is none. */
int sass_find_nvdisasm(char *buf, size_t n);

/* The disassembly of a cubin in memory by nvdisasm: *text malloc'ed.
** 0, or -1 with a message. */
int sass_disassemble(const char *nvdisasm, const void *cubin, size_t size, char **text,
                     char *err, size_t errlen);

/* The same for a cubin file. */
int sass_disassemble_file(const char *nvdisasm, const char *path, char **text, char *err,
                          size_t errlen);

/* Whether op is warpgroup MMA (wgmma): HGMMA (16-bit inputs, k16) or QGMMA
** (fp8, k32, twice the rate). */
int sass_is_gmma(const char *op);
/* The k of a GMMA's 64xNxK shape ("QGMMA.64x224x32..."): 16 or 32; 16 when
** unreadable. */
int sass_gmma_k(const char *text);

/* Whether an instruction's text is an HMMA that accumulates in f16
** ("HMMA.16816.F16 R4, ..."; the f32 form says .F32). */
int sass_hmma_f16acc(const char *text);

#endif
