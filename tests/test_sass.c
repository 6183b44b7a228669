/*
** test_sass.c
** The SASS analyser (tuner/analysis/sass.c) and the throughput estimate
** (tuner/analysis/estimate.c):
**   1. small hand-written functions: nested loops with a trip count, a
**      masking block, a loop left by CALL.REL.NOINC, disjoint loops, a
**      SIMT product, a loop around BRA.CONV, bad text;
**   2. real nvdisasm output kept in tests/data, fatune's tensor-core
**      kernels on FlashAttention-2's tiles, counts exact (the expected
**      figures were counted by hand from the listings: the loop's offset
**      ranges, the inner loop twice, the masking block left out), one in
**      two key parts whose row sums on the tensor cores make its HMMA
**      pass the tile's FLOPs;
**   3. Hopper: a hand-written warp-specialized kernel in the shape of
**      FlashAttention-3's (a persistent loop over tiles, the consumer's
**      K/V loop of HGMMA, waits with a second try and a spin, a producer
**      loop of UTMALDG), and the wgmma GEMM (templates/gemm.cu) as
**      nvdisasm printed it, counts exact;
**   4. with --fresh: kernels compiled now with NVRTC and disassembled by
**      the nvdisasm found (SKIPPED, exit 77, without one).
** usage: test_sass [--fresh]
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db.h"
#include "estimate.h"
#include "gen.h"
#include "nvrtc_compile.h"
#include "sass.h"
#include "sass_kernel.h"

#ifndef FATUNE_SASS_DATA
#error "FATUNE_SASS_DATA: the directory of the SASS fixtures"
#endif

/* Outer loop .L_x_0 around inner loop .L_x_1 (2 HMMA) with a masking
** block (ISETP + FSEL) skipped by @!P0; the outer loop is left by a CALL
** to a label; a trap loop after EXIT holds no product. */
static const char nested[] =
  "\t.section\t.text.nested,\"ax\",@progbits\n"
  "\t.sectioninfo\t@\"SHI_REGISTERS=40\"\n"
  "nested:\n"
  ".text.nested:\n"
  "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
  ".L_x_0:\n"
  "        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], [R4.64] ;\n"
  "        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;\n"
  ".L_x_1:\n"
  "        /*0030*/                   LDSM.16.M88.4 R8, [R3] ;\n"
  "        /*0040*/                   HMMA.16816.F32.BF16 R12, R8, R10, R12 ;\n"
  "        /*0050*/              @!P0 BRA `(.L_x_2) ;\n"
  "        /*0060*/                   ISETP.GE.AND P1, PT, R5, R6, PT ;\n"
  "        /*0070*/                   FSEL R12, R12, -INF , P1 ;\n"
  ".L_x_2:\n"
  "        /*0080*/                   MUFU.EX2 R13, R12 ;\n"
  "        /*0090*/                   SHFL.BFLY PT, R14, R13, 0x1, 0x1f ;\n"
  "        /*00a0*/                   HMMA.16816.F32.BF16 R16, R8, R10, R16 ;\n"
  "        /*00b0*/                   IADD3 R7, R7, 0x1, RZ ;\n"
  "        /*00c0*/                   ISETP.GE.AND P2, PT, R7, 0x4, PT ;\n"
  "        /*00d0*/              @!P2 BRA `(.L_x_1) ;\n"
  "        /*00e0*/                   STL [R1], R7 ;\n"
  "        /*00f0*/                   UIADD3 UR9, UR9, 0x1, URZ ;\n"
  "        /*0100*/               @P3 CALL.REL.NOINC `(.L_x_3) ;\n"
  "        /*0110*/                   BRA `(.L_x_0) ;\n"
  ".L_x_3:\n"
  "        /*0120*/                   NOP ;\n"
  "        /*0130*/                   EXIT ;\n"
  ".L_x_4:\n"
  "        /*0140*/                   BRA `(.L_x_4);\n"
  /* Two disjoint loops of one HMMA each: the shorter is the steady state. */
  "\t.section\t.text.disjoint,\"ax\",@progbits\n"
  ".L_x_5:\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/                   FMUL R9, R9, R9 ;\n"
  "        /*0020*/                   FMUL R9, R9, R9 ;\n"
  "        /*0030*/               @P0 BRA `(.L_x_5) ;\n"
  ".L_x_6:\n"
  "        /*0040*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0050*/               @P1 BRA `(.L_x_6) ;\n"
  "        /*0060*/                   EXIT ;\n"
  /* SIMT: FFMA is the product; a branch never taken (@!PT) is no edge. */
  "\t.section\t.text.simt,\"ax\",@progbits\n"
  ".L_x_7:\n"
  "        /*0000*/                   FFMA R0, R1, R2, R0 ;\n"
  "        /*0010*/                   LDS.128 R4, [R3] ;\n"
  "        /*0020*/              @!PT BRA `(.L_x_8) ;\n"
  "        /*0030*/               @P0 BRA `(.L_x_7) ;\n"
  ".L_x_8:\n"
  "        /*0040*/                   EXIT ;\n"
  /* No loop. */
  "\t.section\t.text.straight,\"ax\",@progbits\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/                   EXIT ;\n";

/* The shape of FlashAttention-3's forward kernel: a persistent loop
** (.L_x_0) over tiles holds a first K/V block before the steady loop
** (.L_x_2, 2 HGMMA); each wait tries once, jumps over its second try on
** success, and spins out of line (.L_x_5, with NANOSLEEP) otherwise; the
** producer's loop (.L_x_3) issues the TMA loads after its wait, one in
** a waterfall loop (BRA.U.ANY, .L_x_8), which counts as straight code. */
static const char hopper[] =
  "\t.section\t.text.ws,\"ax\",@progbits\n"
  ".L_x_0:\n"
  "        /*0000*/                   WARPGROUP.ARRIVE ;\n"
  "        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT, gsb0 ;\n"
  "        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
  "        /*0030*/               @P2 BRA `(.L_x_3) ;\n"
  ".L_x_2:\n"
  "        /*0040*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR10+0x30], R12 ;\n"
  "        /*0050*/               @P0 BRA `(.L_x_4) ;\n"
  "        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR10+0x30], R12 ;\n"
  "        /*0070*/              @!P0 BRA `(.L_x_5) ;\n"
  ".L_x_4:\n"
  "        /*0080*/                   BAR.SYNC.DEFER_BLOCKING R9, 0x100 ;\n"
  "        /*0090*/                   WARPGROUP.ARRIVE ;\n"
  "        /*00a0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;\n"
  "        /*00b0*/                   HGMMA.64x128x16.F32.BF16 R112, R176, gdesc[UR12].tnspB, R112,"
  " gsb0 ;\n"
  "        /*00c0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
  "        /*00d0*/                   MUFU.EX2 R3, R3 ;\n"
  "        /*00e0*/                   FMNMX R4, R4, R5, !PT ;\n"
  "        /*00f0*/                   SHFL.BFLY PT, R5, R4, 0x1, 0x1f ;\n"
  "        /*0100*/              @!P2 SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [R27+URZ], RZ ;\n"
  "        /*0110*/                   UIADD3 UR6, UR6, 0x1, URZ ;\n"
  "        /*0120*/               @P1 BRA `(.L_x_2) ;\n"
  "        /*0130*/                   UIADD3 UR4, UR4, 0x1, URZ ;\n"
  "        /*0140*/               @P3 BRA `(.L_x_0) ;\n"
  "        /*0150*/                   EXIT ;\n"
  ".L_x_3:\n"
  "        /*0160*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR4+0x20], R9 ;\n"
  "        /*0170*/              @!P2 BRA `(.L_x_6) ;\n"
  ".L_x_7:\n"
  "        /*0180*/                   SYNCS.ARRIVE.TRANS64 RZ, [UR4+0x10], R6 ;\n"
  ".L_x_8:\n"
  "        /*0190*/                   UTMALDG.4D [UR8], [UR16], desc[UR18] ;\n"
  "        /*01a0*/               @P5 BRA.U.ANY `(.L_x_8) ;\n"
  "        /*01b0*/                   UTMALDG.4D [UR12], [UR16], desc[UR18] ;\n"
  "        /*01c0*/                   UIADD3 UR4, UR4, 0x8, URZ ;\n"
  "        /*01d0*/               @P4 BRA `(.L_x_3) ;\n"
  "        /*01e0*/                   EXIT ;\n"
  ".L_x_5:\n"
  "        /*01f0*/                   IMAD.U32 R15, RZ, RZ, UR10 ;\n"
  "        /*0200*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R15+URZ+0x30], R12 ;\n"
  "        /*0210*/              @!P0 NANOSLEEP.SYNCS 0x989680 ;\n"
  "        /*0220*/              @!P0 BRA `(.L_x_5) ;\n"
  "        /*0230*/                   BRA `(.L_x_4) ;\n"
  ".L_x_6:\n"
  "        /*0240*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [UR4+0x20], R9 ;\n"
  "        /*0250*/              @!P2 BRA `(.L_x_6) ;\n"
  "        /*0260*/                   BRA `(.L_x_7) ;\n"
  "        /*0270*/                   NOP ;\n";

static void test_hopper(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(hopper, NULL, 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && !strcmp(c.mma, "HGMMA"), "main loop found, product %s", c.mma);
  /* The steady loop, not the persistent one (3 HGMMA), without the
  ** second try (0060, 0070) and the spin (01f0 .. 0230): 0040, 0050,
  ** 0080 .. 0120. */
  CHECK(c.inner_loops == 0 && c.inner_trips == 1, "no inner loop counted: %d, trips %d",
        c.inner_loops, c.inner_trips);
  CHECK(c.loop_instructions == 13 && c.loop_hmma == 2, "instructions %ld, HGMMA %ld, want 13, 2",
        c.loop_instructions, c.loop_hmma);
  CHECK(c.loop_syncs == 2 && c.loop_warpgroup == 2 && c.loop_bar == 1 && c.loop_utmaldg == 0,
        "syncs %ld, warpgroup %ld, bar %ld, utmaldg %ld", c.loop_syncs, c.loop_warpgroup,
        c.loop_bar, c.loop_utmaldg);
  CHECK(c.loop_mufu == 1 && c.loop_shfl == 1 && c.loop_int == 1, "mufu %ld shfl %ld int %ld",
        c.loop_mufu, c.loop_shfl, c.loop_int);
  CHECK(fabs(c.non_mma_per_mma - 5.5) < 1e-12, "non-HGMMA per HGMMA %g", c.non_mma_per_mma);
  /* The producer: 0160 .. 01d0, its spin (0240 .. 0260) left out. */
  CHECK(c.producer_found && c.producer_instructions == 8 && c.producer_utmaldg == 2,
        "producer %d: %ld instructions, %ld UTMALDG", c.producer_found, c.producer_instructions,
        c.producer_utmaldg);
  /* A HMMA kernel has no producer. */
  CHECK(sass_analyse(nested, "nested", 0, &c, err, sizeof err) == 0 && !c.producer_found &&
          c.loop_syncs == 0 && c.loop_warpgroup == 0, "no producer in a HMMA kernel");
}

static void test_nested(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(nested, "nested", 4 * 4096, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && !strcmp(c.mma, "HMMA"), "main loop found, product %s", c.mma);
  CHECK(c.registers == 40, "registers %d", c.registers);
  CHECK(c.inner_loops == 1 && c.inner_trips == 2, "inner loops %d, trips %d", c.inner_loops,
        c.inner_trips);
  CHECK(c.masked_left_out == 2, "masking block: %d instructions left out", c.masked_left_out);
  /* outer only: LDGSTS BAR STL UIADD3 CALL BRA (6); inner without the
  ** mask, twice: LDSM HMMA BRA MUFU SHFL HMMA IADD3 ISETP BRA (9) */
  CHECK(c.loop_instructions == 24, "instructions %ld, want 24", c.loop_instructions);
  CHECK(c.loop_hmma == 4 && c.loop_mufu == 2 && c.loop_ldsm == 2 && c.loop_shfl == 2,
        "hmma %ld mufu %ld ldsm %ld shfl %ld", c.loop_hmma, c.loop_mufu, c.loop_ldsm, c.loop_shfl);
  CHECK(c.loop_ldgsts == 1 && c.loop_bar == 1 && c.loop_local == 1 && c.loop_lds == 0,
        "ldgsts %ld bar %ld local %ld lds %ld", c.loop_ldgsts, c.loop_bar, c.loop_local, c.loop_lds);
  CHECK(c.loop_int == 5, "int %ld, want 5 (IADD3, ISETP twice; UIADD3)", c.loop_int);
  CHECK(fabs(c.non_mma_per_mma - 5.0) < 1e-12, "non-mma per mma %g", c.non_mma_per_mma);

  /* No FLOPs given, or FLOPs the inner loop cannot reach in whole trips:
  ** the inner loop counts once and the trip count is unknown. */
  CHECK(sass_analyse(nested, "nested", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.inner_trips == 0 && c.loop_instructions == 15 && c.loop_hmma == 2,
        "unknown trips: %d, instructions %ld", c.inner_trips, c.loop_instructions);
  CHECK(sass_analyse(nested, "nested", 3 * 4096, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.inner_trips == 0, "3 HMMA from loops of 2: trips %d", c.inner_trips);
  /* 15 HMMA of FLOPs from loops of 2: 8 trips pass them by 1, within an
  ** eighth (row sums on the tensor cores); 7 from loops of 2: 4 trips pass
  ** them by more, no trip count. */
  CHECK(sass_analyse(nested, "nested", 15 * 4096, &c, err, sizeof err) == 0 && c.inner_trips == 8 &&
          c.loop_hmma == 16, "15 HMMA from loops of 2: trips %d", c.inner_trips);
  CHECK(sass_analyse(nested, "nested", 7 * 4096, &c, err, sizeof err) == 0 && c.inner_trips == 0,
        "7 HMMA from loops of 2: trips %d", c.inner_trips);
}

/* A loop whose __syncwarp ptxas could not prove converged: BRA.CONV
** around a call of the warpsync subroutine, which the text holds after
** EXIT. The BRA.CONV is conditional: the call is reachable, the loop one. */
static const char converge[] =
  "\t.section\t.text.converge,\"ax\",@progbits\n"
  "converge:\n"
  ".text.converge:\n"
  ".L_x_0:\n"
  "        /*0000*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;\n"
  "        /*0010*/                   BRA.CONV ~URZ, `(.L_x_1) ;\n"
  "        /*0020*/                   MOV R4, 0x40 ;\n"
  "        /*0030*/                   CALL.REL.NOINC `($__internal_1_$__cuda_sm70_warpsync) ;\n"
  ".L_x_1:\n"
  "        /*0040*/                   HMMA.16816.F32.BF16 R12, R8, R10, R12 ;\n"
  "        /*0050*/               @P0 BRA `(.L_x_0) ;\n"
  "        /*0060*/                   EXIT ;\n"
  "$__internal_1_$__cuda_sm70_warpsync:\n"
  "        /*0070*/                   WARPSYNC R12 ;\n"
  "        /*0080*/                   RET.REL.NODEC R4 `(converge) ;\n";

static void test_converge(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(converge, "converge", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 6 && c.loop_hmma == 1,
        "a loop with BRA.CONV: found %d, %ld instructions (want 6)", c.found, c.loop_instructions);
}

static void test_small(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(nested, "disjoint", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 2 && c.loop_hmma == 1 && c.inner_loops == 0,
        "disjoint: the shorter loop, %ld instructions", c.loop_instructions);
  CHECK(c.registers == -1, "no SHI_REGISTERS: %d", c.registers);
  CHECK(sass_analyse(nested, "simt", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && !strcmp(c.mma, "FFMA") && c.loop_instructions == 4 && c.loop_lds == 1,
        "simt: %s, %ld instructions", c.mma, c.loop_instructions);
  CHECK(sass_analyse(nested, "straight", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(!c.found && c.loop_instructions == 0, "straight code has no main loop");
  CHECK(sass_analyse(nested, NULL, 0, &c, err, sizeof err) == 0 && c.registers == 40,
        "NULL: the first function");

  char **names;
  size_t n;
  CHECK(sass_functions(nested, &names, &n, err, sizeof err) == 0, "%s", err);
  CHECK(n == 4 && !strcmp(names[0], "nested") && !strcmp(names[3], "straight"),
        "functions: %zu", n);
  free(names);

  /* Bad text: a message, never a crash. */
  CHECK(sass_analyse("not SASS at all\n", NULL, 0, &c, err, sizeof err) == -1 && err[0],
        "text without a function");
  CHECK(sass_analyse(nested, "absent", 0, &c, err, sizeof err) == -1 && strstr(err, "absent"),
        "an absent function: %s", err);
  static const char dangling[] = "\t.section\t.text.f,\"ax\",@progbits\n"
                                 "        /*0000*/  @P0 BRA `(.L_x_9) ;\n";
  CHECK(sass_analyse(dangling, NULL, 0, &c, err, sizeof err) == -1 && strstr(err, ".L_x_9"),
        "a branch to no label: %s", err);
  static const char cut[] = "\t.section\t.text.f,\"ax\",@progbits\n        /*00";
  CHECK(sass_analyse(cut, NULL, 0, &c, err, sizeof err) == 0 && !c.found, "cut text");
}

static char *slurp(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", FATUNE_SASS_DATA, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
      if (fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
      else s[n] = '\0';
    }
  }
  fclose(f);
  return s;
}

typedef struct fixture {
  const char *file;
  double flops_per_warp;  /* 4 block_m block_n dim / warps */
  long insns, hmma, mufu, ldsm, lds, ldgsts, bar, shfl, local, integer, masked;
  int inner_loops;        /* loops inside the main loop: 1 with 2 trips, or 0 */
} fixture;

/* FA2's d64 tile (128x128, 4 warps), bf16, sm_80; its d128 tile (128x64),
** fp16 causal, sm_90; the d64 tile in two key parts with the row sums of
** P on the tensor cores (parts=2, deferred): 136 HMMA a part, 272 a block
** for FLOPs of 256, so the trip count is no exact quotient. */
static const fixture fixtures[] = {
  {"sass_tc_bf16_d64_sm80.sass", 4.0 * 128 * 128 * 64 / 4, 1763, 256, 136, 80, 3, 16, 1, 16, 0,
   171, 98, 1},
  {"sass_tc_f16_d128_causal_sm90.sass", 4.0 * 128 * 64 * 128 / 4, 1529, 256, 72, 96, 3, 16, 1,
   16, 0, 279, 80, 1},
  {"sass_tc_bf16_d64_p2_sm80.sass", 4.0 * 128 * 128 * 64 / 4, 1240, 272, 136, 80, 3, 16, 1, 16,
   0, 173, 83, 1},
  /* A loop that spills (ptxas: 32 bytes stored, 32 loaded): 1484
  ** instructions from 12b0 to the branch back at 6f60, 272 of them the
  ** masking block, and in it three LDL.LU and three STL. */
  {"sass_tc_bf16_d64_fadd_carry_causal_spill_sm80.sass", 4.0 * 128 * 128 * 64 / 4, 1212, 256,
   132, 72, 3, 16, 1, 8, 6, 163, 272, 0},
};

static void test_fixture(const fixture *x) {
  char *text = slurp(x->file), err[256];
  CHECK(text != NULL, "reading %s/%s", FATUNE_SASS_DATA, x->file);
  if (!text) return;
  sass_counts c;
  CHECK(sass_analyse(text, NULL, x->flops_per_warp, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && !strcmp(c.mma, "HMMA") && c.inner_loops == x->inner_loops &&
          (!x->inner_loops || c.inner_trips == 2),
        "%s: main loop, %d inner loops (want %d), %d trips", x->file, c.inner_loops,
        x->inner_loops, c.inner_trips);
  CHECK(c.loop_instructions == x->insns, "%s: instructions %ld, want %ld", x->file,
        c.loop_instructions, x->insns);
  CHECK(c.loop_hmma == x->hmma && c.loop_mufu == x->mufu && c.loop_ldsm == x->ldsm &&
          c.loop_lds == x->lds && c.loop_ldgsts == x->ldgsts && c.loop_bar == x->bar &&
          c.loop_shfl == x->shfl && c.loop_local == x->local && c.loop_int == x->integer,
        "%s: hmma %ld mufu %ld ldsm %ld lds %ld ldgsts %ld bar %ld shfl %ld local %ld int %ld",
        x->file, c.loop_hmma, c.loop_mufu, c.loop_ldsm, c.loop_lds, c.loop_ldgsts, c.loop_bar,
        c.loop_shfl, c.loop_local, c.loop_int);
  CHECK(c.masked_left_out == x->masked, "%s: masking block %d, want %ld", x->file,
        c.masked_left_out, x->masked);
  free(text);
}

/* The wgmma GEMM (templates/gemm.cu, fp16, n=128, A from shared memory,
** 2 consumer warpgroups) for sm_90a, counted by hand from the listing:
** the consumer's loop is 06a0 .. 0c70 (94 instructions; its wait's spin
** at 1850 .. 1870 left out), 4 HGMMA, a try-wait and an arrive, a wgmma
** fence and wait, 67 integer (IADD3 5, IMAD 9, ISETP 2, LOP3 8, SHF 5,
** UIADD3 14, UIMAD 4, UISETP 1, ULEA 1, ULOP3 10, USHF 8); the
** producer's is 15f0 .. 1830: 37 instructions, 2 UTMALDG. */
static void test_gemm_fixture(void) {
  static const char file[] = "sass_gemm_f16_n128_wg2_sm90a.sass";
  char *text = slurp(file), err[256];
  CHECK(text != NULL, "reading %s/%s", FATUNE_SASS_DATA, file);
  if (!text) return;
  sass_counts c;
  CHECK(sass_analyse(text, NULL, 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && !strcmp(c.mma, "HGMMA") && c.inner_loops == 0, "%s: main loop, %s, %d inner",
        file, c.mma, c.inner_loops);
  CHECK(c.loop_instructions == 94 && c.loop_hmma == 4 && c.loop_int == 67,
        "%s: instructions %ld, HGMMA %ld, int %ld", file, c.loop_instructions, c.loop_hmma,
        c.loop_int);
  CHECK(c.loop_syncs == 2 && c.loop_warpgroup == 2 && c.loop_bar == 0 && c.loop_utmaldg == 0 &&
          c.loop_mufu == 0 && c.loop_local == 0,
        "%s: syncs %ld warpgroup %ld bar %ld utmaldg %ld", file, c.loop_syncs, c.loop_warpgroup,
        c.loop_bar, c.loop_utmaldg);
  CHECK(fabs(c.non_mma_per_mma - 22.5) < 1e-12, "%s: non-HGMMA per HGMMA %g", file,
        c.non_mma_per_mma);
  CHECK(c.producer_found && c.producer_instructions == 37 && c.producer_utmaldg == 2,
        "%s: producer %ld instructions, %ld UTMALDG", file, c.producer_instructions,
        c.producer_utmaldg);
  free(text);
}

/* The A100 estimate of the d64 fixture's counts: 2 CTAs of 4 warps at 183
** registers; per iteration of the SM's 8 warps 8 x 256 HMMA x 2 clocks
** (4096 FLOP at 2048 per clock) = 4096 tensor cycles against 8 x 1763 / 4
** = 3526 issue cycles: tensor-bound, the A100's dense peak. With one CTA,
** the chain of each warp bounds it. */
/* S accumulated in f16 (tc's s_acc=f16): its HMMA.16816.F16 counted apart,
** and run at twice the f32 rate on a GeForce part (the RTX 4090), at the
** same rate elsewhere (the L40S, the same processor), in the estimate. */
static const char f16acc[] =
  "\t.section\t.text.f16acc,\"ax\",@progbits\n"
  ".L_x_0:\n"
  "        /*0000*/                   HMMA.16816.F16 R0, R4, R6, R0 ;\n"
  "        /*0010*/                   HMMA.16816.F16 R2, R4, R8, R2 ;\n"
  "        /*0020*/                   HMMA.16816.F32 R12, R4, R6, R12 ;\n"
  "        /*0030*/                   HMMA.16816.F32.BF16 R16, R4, R6, R16 ;\n"
  "        /*0040*/               @P0 BRA `(.L_x_0) ;\n"
  "        /*0050*/                   EXIT ;\n";

/* Blackwell's uniform branches take their predicate as an operand
** ("BRA.U UP0, `(...)"), not as a guard: conditional, so the loop's
** products past the first one are reachable (sm_120's tc kernels had no
** main loop found before). */
static const char operand_predicate[] =
  "\t.section\t.text.blackwell,\"ax\",@progbits\n"
  ".L_x_0:\n"
  "        /*0000*/                   UISETP.GE.AND UP0, UPT, UR7, UR22, UPT ;\n"
  "        /*0010*/                   BRA.U UP0, `(.L_x_1) ;\n"
  "        /*0020*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0030*/                   HMMA.16816.F32 R8, R4, R6, R8 ;\n"
  ".L_x_1:\n"
  "        /*0040*/                   UISETP.GT.AND UP1, UPT, UR9, 0x1, UPT ;\n"
  "        /*0050*/                   BRA.U UP1, `(.L_x_0) ;\n"
  "        /*0060*/              @!PT BRA.U !PT, `(.L_x_0) ;\n"
  "        /*0070*/                   EXIT ;\n";

static void test_operand_predicate(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(operand_predicate, NULL, 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_hmma == 2, "main loop %s, %ld HMMA", c.found ? "found" : "not found",
        c.loop_hmma);
}

/* A lazy rescale (tc's rescale=lazy): FMULs jumped over on a warp's vote,
** left out of the steady state as a masking block is; the same FMULs
** behind a branch on an ordinary predicate stay. */
static const char lazy[] =
  "\t.section\t.text.lazy,\"ax\",@progbits\n"
  ".L_x_0:\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/                   FSETP.NEU.AND P0, PT, R4, 1, PT ;\n"
  "        /*0020*/                   VOTE.ANY P0, P0 ;\n"
  "        /*0030*/              @!P0 BRA `(.L_x_1) ;\n"
  "        /*0040*/                   FMUL R8, R8, R4 ;\n"
  "        /*0050*/                   FMUL R9, R9, R4 ;\n"
  "        /*0060*/                   FMUL R10, R10, R4 ;\n"
  ".L_x_1:\n"
  "        /*0070*/               @P1 BRA `(.L_x_0) ;\n"
  "        /*0080*/                   EXIT ;\n"
  "\t.section\t.text.plain,\"ax\",@progbits\n"
  ".L_x_2:\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/                   FSETP.NEU.AND P0, PT, R4, 1, PT ;\n"
  "        /*0020*/              @!P0 BRA `(.L_x_3) ;\n"
  "        /*0030*/                   FMUL R8, R8, R4 ;\n"
  "        /*0040*/                   FMUL R9, R9, R4 ;\n"
  "        /*0050*/                   FMUL R10, R10, R4 ;\n"
  ".L_x_3:\n"
  "        /*0060*/               @P1 BRA `(.L_x_2) ;\n"
  "        /*0070*/                   EXIT ;\n";

static void test_lazy_rescale(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(lazy, "lazy", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 5 && c.masked_left_out == 3,
        "lazy: %ld instructions, %d left out; want 5 and 3", c.loop_instructions,
        c.masked_left_out);
  CHECK(sass_analyse(lazy, "plain", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 7 && c.masked_left_out == 0,
        "plain: %ld instructions, %d left out; want 7 and 0", c.loop_instructions,
        c.masked_left_out);
}

/* A masking block that reloads a bound ptxas spilled (wg's persistent d64
** tile: LDL, then the compares and selects) is left out as any masking
** block; one that stores to local memory is no masking block. */
static const char *const spilled =
  "\t.section\t.text.reload,\"ax\",@progbits\n"
  ".L_x_0:\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/              @!P0 BRA `(.L_x_1) ;\n"
  "        /*0020*/                   LDL R9, [R1+0x4] ;\n"
  "        /*0030*/                   IMAD R12, R9, -0x2, R12 ;\n"
  "        /*0040*/                   ISETP.GT.AND P2, PT, R12, RZ, PT ;\n"
  "        /*0050*/                   FSEL R0, R0, -INF , P2 ;\n"
  ".L_x_1:\n"
  "        /*0060*/                   MUFU.EX2 R0, R0 ;\n"
  "        /*0070*/               @P1 BRA `(.L_x_0) ;\n"
  "        /*0080*/                   EXIT ;\n"
  "\t.section\t.text.store,\"ax\",@progbits\n"
  ".L_x_2:\n"
  "        /*0000*/                   HMMA.16816.F32 R0, R4, R6, R0 ;\n"
  "        /*0010*/              @!P0 BRA `(.L_x_3) ;\n"
  "        /*0020*/                   STL [R1+0x4], R9 ;\n"
  "        /*0030*/                   ISETP.GT.AND P2, PT, R12, RZ, PT ;\n"
  "        /*0040*/                   FSEL R0, R0, -INF , P2 ;\n"
  ".L_x_3:\n"
  "        /*0050*/                   MUFU.EX2 R0, R0 ;\n"
  "        /*0060*/               @P1 BRA `(.L_x_2) ;\n"
  "        /*0070*/                   EXIT ;\n";

static void test_mask_reload(void) {
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(spilled, "reload", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 4 && c.masked_left_out == 4 && c.loop_local == 0,
        "reload: %ld instructions, %d left out, %ld local; want 4, 4 and 0",
        c.loop_instructions, c.masked_left_out, c.loop_local);
  CHECK(sass_analyse(spilled, "store", 0, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.found && c.loop_instructions == 7 && c.masked_left_out == 0 && c.loop_local == 1,
        "store: %ld instructions, %d left out, %ld local; want 7, 0 and 1", c.loop_instructions,
        c.masked_left_out, c.loop_local);
}

static void test_f16acc(void) {
  CHECK(sass_hmma_f16acc("HMMA.16816.F16 R0, R4, R6, RZ") &&
          sass_hmma_f16acc("HMMA.1688.F16 R0, R4, R6, R0") &&
          !sass_hmma_f16acc("HMMA.16816.F32 R0, R4, R6, R0") &&
          !sass_hmma_f16acc("HMMA.16816.F32.BF16 R0, R4, R6, R0") &&
          !sass_hmma_f16acc("HGMMA.64x128x16.F16 R0, gdesc[UR4], RZ"),
        "which HMMA accumulate in f16");
  sass_counts c;
  char err[256];
  CHECK(sass_analyse(f16acc, NULL, 4 * 4096, &c, err, sizeof err) == 0, "%s", err);
  CHECK(c.loop_hmma == 4 && c.loop_hmma_f16acc == 2, "HMMA %ld, of them f16-accumulating %ld",
        c.loop_hmma, c.loop_hmma_f16acc);
  const estimate_gpu *geforce = estimate_gpu_find("rtx4090"), *dc = estimate_gpu_find("l40s");
  CHECK(geforce && dc, "the RTX 4090 and the L40S in the GPU table");
  if (!geforce || !dc) return;
  const estimate_tile t = {4, 64, 1024, 4 * 4096};
  estimate e;
  /* 8 CTAs of 4 warps (64 registers: by registers); per warp 2 HMMA at 8
  ** clocks of the SM's 512 FLOP a clock and 2 at 4 on the RTX 4090, all 4
  ** at 4 of its 1024 on the L40S. */
  CHECK(estimate_compute(geforce, &c, &t, &e) == 0 && e.ctas_per_sm == 8 &&
          fabs(e.cyc_product - 32 * 24) < 1e-9,
        "RTX 4090: %d CTAs, %g cycles of product, want %d", e.ctas_per_sm, e.cyc_product, 32 * 24);
  CHECK(estimate_compute(dc, &c, &t, &e) == 0 && e.ctas_per_sm == 8 &&
          fabs(e.cyc_product - 32 * 16) < 1e-9,
        "L40S: %d CTAs, %g cycles of product, want %d", e.ctas_per_sm, e.cyc_product, 32 * 16);
}

static void test_estimate(void) {
  char *text = slurp(fixtures[0].file), err[256];
  if (!text) return;
  sass_counts c;
  CHECK(sass_analyse(text, NULL, fixtures[0].flops_per_warp, &c, err, sizeof err) == 0, "%s", err);
  free(text);
  const estimate_gpu *a100 = estimate_gpu_find("a100");
  CHECK(a100 && estimate_gpu_for_arch("sm_80") == a100 && !estimate_gpu_find("v100"),
        "the GPU table");
  if (!a100) return;
  estimate e;
  estimate_tile t = {4, c.registers, 81920, fixtures[0].flops_per_warp};
  CHECK(c.registers == 183, "registers %d", c.registers);
  CHECK(estimate_compute(a100, &c, &t, &e) == 0, "estimate");
  CHECK(e.ctas_per_sm == 2 && !strcmp(e.bound, "tensor"), "%d CTAs, %s-bound", e.ctas_per_sm,
        e.bound);
  CHECK(fabs(e.cyc_product - 4096) < 1e-9 && fabs(e.cyc_issue - 8 * 1763 / 4.0) < 1e-9,
        "cycles %g %g", e.cyc_product, e.cyc_issue);
  CHECK(fabs(e.tflops - 108 * 1.41 * 2048 / 1e3) < 1e-6, "TFLOP/s %g", e.tflops);
  /* One warp's chain: 256 HMMA x 8 clocks on a quarter of the tensor pipe,
  ** then 1507 other instructions at one a clock (longer than 136 MUFU x 8
  ** clocks on a quarter of MUFU): 3555 cycles, under the 4096 of two warps
  ** on each scheduler. */
  CHECK(fabs(e.cyc_chain - (256 * 8 + 1507)) < 1e-9, "chain %g", e.cyc_chain);
  CHECK(fabs(e.issue_share - 8 * 1763 / 4.0 / 4096) < 1e-12, "issue share %g", e.issue_share);
  /* 97 KB of shared memory: one CTA, by shared memory; one warp per
  ** scheduler, nothing overlaps its chain, which bounds it. */
  t.smem_bytes = 97 * 1024;
  CHECK(estimate_compute(a100, &c, &t, &e) == 0 && e.ctas_per_sm == 1 && !strcmp(e.limit, "smem"),
        "97 KB: %d CTAs by %s", e.ctas_per_sm, e.limit);
  CHECK(!strcmp(e.bound, "chain") &&
          fabs(e.tflops - 4.0 * 256 * 4096 / 3555 * 1.41 * 108 / 1e3) < 1e-6,
        "one CTA: %s-bound, %g TFLOP/s", e.bound, e.tflops);
  /* 255 registers, 8 warps: one CTA by registers; an unknown trip count: none. */
  t.smem_bytes = 1024, t.registers = 255, t.warps = 8;
  CHECK(estimate_compute(a100, &c, &t, &e) == 0 && e.ctas_per_sm == 1 &&
          !strcmp(e.limit, "registers"), "255 registers: %d CTAs by %s", e.ctas_per_sm, e.limit);
  /* Its two warps on each scheduler meet at the block's barrier: in phase,
  ** two chains, not one. */
  CHECK(!strcmp(e.bound, "chain") && fabs(e.cyc_chain - 2 * (256 * 8 + 1507)) < 1e-9,
        "8 warps of one CTA: %s-bound, chain %g", e.bound, e.cyc_chain);
  c.inner_trips = 0;
  CHECK(estimate_compute(a100, &c, &t, &e) == -1, "no estimate without the trip count");
  /* The roofline's ceilings: the vendors' dense peaks. */
  const estimate_gpu *h100 = estimate_gpu_find("h100");
  CHECK(fabs(estimate_peak_tflops(a100, "bf16") - 311.9) < 0.1 &&
          fabs(estimate_peak_tflops(a100, "fp32") - 19.5) < 0.1 &&
          fabs(estimate_peak_tflops(h100, "fp16") - 989.4) < 0.1 &&
          estimate_peak_tflops(h100, "int8") == 0 && h100->dram_gbs > a100->dram_gbs,
        "peaks: a100 bf16 %g, fp32 %g; h100 fp16 %g", estimate_peak_tflops(a100, "bf16"),
        estimate_peak_tflops(a100, "fp32"), estimate_peak_tflops(h100, "fp16"));
}

/* The sass table: figures in, a GPU trial beside its variant's estimate out. */
static int count_point(const db_sass_point *p, void *ud) {
  int *n = ud;
  CHECK(!strcmp(p->device, "NVIDIA A100-SXM4-80GB") && !strcmp(p->gpu, "a100") &&
          p->measured_tflops == 200 && p->est_tflops == 312 && p->dim == 64 && !p->causal &&
          p->registers == 183 && p->ctas_per_sm == 2,
        "point %s %s %g %g, %d registers, %d CTAs", p->device, p->gpu, p->measured_tflops,
        p->est_tflops, p->registers, p->ctas_per_sm);
  ++*n;
  return 0;
}

static void test_db_sass(void) {
  char dir[] = "/tmp/fatune-test-sass-XXXXXX", path[64], err[512];
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp");
    return;
  }
  snprintf(path, sizeof path, "%s/t.db", dir);
  db *d;
  if (db_open(path, DB_CREATE, &d, err, sizeof err) != 0) {
    CHECK(0, "%s", err);
    return;
  }
  long long dev, var, emu;
  db_device gpu = {"NVIDIA A100-SXM4-80GB", "GPU-1", "cuda", 8, 0, 108, 166912, 40 << 20};
  db_device cpu = {"emulator", "emu", "emu", 0, 0, 1, 0, 0};
  db_variant v = {"tc", "tc/1+abc", "tc-x", "0123456789ab", "{\"family\": \"tc\"}", "ff", "fwd",
                  NULL, NULL};
  CHECK(db_device_id(d, &gpu, &dev, err, sizeof err) == 0 &&
          db_device_id(d, &cpu, &emu, err, sizeof err) == 0 &&
          db_variant_id(d, &v, &var, err, sizeof err) == 0, "%s", err);
  db_sass row = {var, "sm_80", "a100", "HMMA", 183, 1763, 256, 136, 80, 3, 16, 1, 16, 0, 171,
                 5.89, 2, "tensor", 312};
  CHECK(db_sass_put(d, &row, err, sizeof err) == 0, "%s", err);
  CHECK(db_sass_put(d, &row, err, sizeof err) == 0, "the same again replaces: %s", err);
  db_sass none = row;
  none.gpu = NULL, none.ctas_per_sm = -1, none.est_tflops = NAN;
  CHECK(db_sass_put(d, &none, err, sizeof err) == 0, "no estimate: %s", err);
  none.loop_mufu = -1;
  CHECK(db_sass_put(d, &none, err, sizeof err) == -1 && strstr(err, "negative"),
        "a negative count is refused: %s", err);
  db_trial t = {.variant_id = var, .device_id = dev,
                .problem = {"bf16", 64, 4096, 4096, 4, 16, 0}, .status = "ok",
                .max_abs_err = 1e-3, .rel_err = 1e-3, .lse_err = NAN, .median_us = 100,
                .min_us = 99, .p20_us = 99, .p80_us = 101, .tflops = 200, .gbps = 1};
  db_trial e = t;
  e.device_id = emu, e.median_us = e.min_us = e.p20_us = e.p80_us = e.tflops = e.gbps = NAN;
  CHECK(db_trial_put(d, &t, err, sizeof err) == 0 && db_trial_put(d, &e, err, sizeof err) == 0,
        "%s", err);
  int n = 0;
  CHECK(db_sass_points(d, count_point, &n, err, sizeof err) == 0, "%s", err);
  CHECK(n == 1, "one GPU trial beside one estimate, %d points", n);
  CHECK(db_close(d) == 0, "close");
  char wal[80], shm[80];
  snprintf(wal, sizeof wal, "%s-wal", path);
  snprintf(shm, sizeof shm, "%s-shm", path);
  remove(wal), remove(shm), remove(path), remove(dir);
}

/* A kernel compiled now: the FA2 d64 tile issues 4 128 128 64 / 4 / 4096
** = 256 HMMA per warp per K/V block for S and O, and 16 more for the row
** sums of P, which the deferred kernel takes on the tensor cores (P times
** an n8 tile of ones: 2 m-tiles x 8 k-steps); at least one exponential per score
** (32 rows x 128 keys / 32 lanes = 128 MUFU), no local memory. */
static void fresh(const char *nvdisasm, gen_state *g, const char *arch, const char *config,
                  const char *mma, long want_mma) {
  gen_target t;
  gen_kernel k;
  nvrtc_result r;
  CHECK(gen_target_for_arch(g, arch, 0, 0, &t) == 0, "%s", gen_errmsg(g));
  if (gen_render_config(g, config, NULL, &t, &k) != 0) {
    CHECK(0, "rendering %s: %s", config, gen_errmsg(g));
    return;
  }
  CHECK(nvrtc_compile(k.source, k.entry, arch, &r) == 0 && r.ok, "%s: %s", k.name, r.error);
  sass_figures f;
  sass_kernel_figures(nvdisasm, &k, &r, estimate_gpu_for_arch(arch), NULL, &f);
  CHECK(f.analysed && f.c.found, "%s on %s: %s", k.name, arch, f.error);
  CHECK(!strcmp(f.c.mma, mma), "%s: product %s, want %s", k.name, f.c.mma, mma);
  if (want_mma) {
    CHECK(f.c.loop_hmma == want_mma && f.c.loop_mufu >= 128 && f.c.loop_local == 0 &&
            f.c.loop_instructions > 2 * want_mma,
          "%s on %s: %ld HMMA (want %ld), %ld MUFU, %ld local, %ld instructions", k.name, arch,
          f.c.loop_hmma, want_mma, f.c.loop_mufu, f.c.loop_local, f.c.loop_instructions);
    CHECK(f.estimated && f.e.ctas_per_sm >= 1 && f.e.tflops > 0, "%s: estimate", k.name);
  }
  printf("  %s on %s: %ld instructions, %ld %s per K/V block\n", k.name, arch,
         f.c.loop_instructions, f.c.loop_hmma, f.c.mma);
  nvrtc_result_free(&r);
  gen_kernel_free(&k);
}

/* The wgmma GEMM compiled now: its consumer loop issues one HGMMA per
** k16 step of the 64-wide k-tile (4), waits on the stage and releases
** it; the producer loop loads A and B by TMA. */
static void fresh_gemm(const char *nvdisasm, gen_state *g) {
  gen_kernel k;
  nvrtc_result r;
  char err[256], *text = NULL;
  if (gen_render_gemm(g, "dtype=fp16,n=128,a=smem,b=k,wg=2", &k) != 0) {
    CHECK(0, "rendering the GEMM: %s", gen_errmsg(g));
    return;
  }
  CHECK(nvrtc_compile(k.source, k.entry, "sm_90a", &r) == 0 && r.ok, "%s: %s", k.name, r.error);
  sass_counts c = {0};
  if (r.ok && sass_disassemble(nvdisasm, r.cubin, r.cubin_size, &text, err, sizeof err) != 0)
    CHECK(0, "%s: %s", k.name, err);
  if (text) {
    CHECK(sass_analyse(text, k.entry, 0, &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.found && !strcmp(c.mma, "HGMMA") && c.loop_hmma == 4 && c.inner_loops == 0 &&
            c.loop_syncs >= 2 && c.loop_warpgroup >= 2 && c.loop_local == 0,
          "%s: %s x %ld, %d inner, %ld SYNCS, %ld WARPGROUP", k.name, c.mma, c.loop_hmma,
          c.inner_loops, c.loop_syncs, c.loop_warpgroup);
    CHECK(c.producer_found && c.producer_utmaldg == 2, "%s: producer %d, %ld UTMALDG", k.name,
          c.producer_found, c.producer_utmaldg);
    printf("  %s on sm_90a: %ld instructions, %ld HGMMA per k-tile; producer %ld\n", k.name,
           c.loop_instructions, c.loop_hmma, c.producer_instructions);
  }
  free(text);
  nvrtc_result_free(&r);
  gen_kernel_free(&k);
}

/* The wg family on FlashAttention-3's d128 tile (128x176, 2 consumer
** warpgroups): per K/V block each consumer warp issues 128 / 16 HGMMA
** for S (64x176x16) and 176 / 16 for O (64x128x16), an exponential per
** score of its 16 rows (16 x 176 / 32 lanes = 88), no local memory; the
** producer loads K and V by TMA. */
static void fresh_wg(const char *nvdisasm, gen_state *g) {
  static const char cfg[] = "family=wg,dtype=bf16,dim=128,causal=0,block_m=128,block_n=176,"
                            "stages=2,consumers=2,pingpong=1,overlap=1,norm=deferred,swizzle=128";
  gen_target t;
  gen_kernel k;
  nvrtc_result r;
  CHECK(gen_target_for_arch(g, "sm_90a", 0, 0, &t) == 0, "%s", gen_errmsg(g));
  if (gen_render_config(g, cfg, NULL, &t, &k) != 0) {
    CHECK(0, "rendering %s: %s", cfg, gen_errmsg(g));
    return;
  }
  CHECK(nvrtc_compile(k.source, k.entry, "sm_90a", &r) == 0 && r.ok, "%s: %s", k.name, r.error);
  sass_figures f;
  sass_kernel_figures(nvdisasm, &k, &r, NULL, NULL, &f);
  const sass_counts *c = &f.c;
  CHECK(f.analysed && c->found && !strcmp(c->mma, "HGMMA"), "%s: %s, %s", k.name, c->mma, f.error);
  CHECK(c->loop_hmma == 128 / 16 + 176 / 16 && c->loop_mufu >= 88 && c->loop_local == 0 &&
          c->inner_loops == 0,
        "%s: %ld HGMMA (want 19), %ld MUFU, %ld local, %d inner loops", k.name, c->loop_hmma,
        c->loop_mufu, c->loop_local, c->inner_loops);
  CHECK(c->loop_syncs >= 2 && c->loop_warpgroup >= 2 && c->producer_found &&
          c->producer_utmaldg >= 2,
        "%s: %ld SYNCS, %ld WARPGROUP, producer %d with %ld UTMALDG", k.name, c->loop_syncs,
        c->loop_warpgroup, c->producer_found, c->producer_utmaldg);
  printf("  %s on sm_90a: %ld instructions, %ld HGMMA per K/V block; producer %ld, %ld UTMALDG\n",
         k.name, c->loop_instructions, c->loop_hmma, c->producer_instructions,
         c->producer_utmaldg);
  nvrtc_result_free(&r);
  gen_kernel_free(&k);
}

/* FlashAttention-2's own tiles (bf16, non-causal), and the best d128
** variant on H100 by the estimate (row sums by FADD, P V by k16 steps):
** per K/V block at most the instructions FlashAttention-2's own kernel
** issues for the same tile, compiled by the same toolchain
** (scripts/compare-fa2.sh: d64 1185 on sm_80, 1176 on sm_90; d128 941,
** 939), and no local memory. The bounds hold for CUDA 13's NVRTC; with
** another the figures are printed, not judged. */
static void fresh_fa2_bound(const char *nvdisasm, gen_state *g) {
  static const struct {
    const char *arch, *config;
    long fa2;
  } cases[] = {
    {"sm_80", "dim=64,block_n=128", 1185}, {"sm_90", "dim=64,block_n=128", 1176},
    {"sm_80", "dim=128,block_n=64", 941},  {"sm_90", "dim=128,block_n=64", 939},
    {"sm_90", "dim=128,block_n=64,rowsum=fadd,pv=step", 939},
  };
  const int judged = !strncmp(nvrtc_version_string(), "13.", 3);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char config[256];
    gen_target t;
    gen_kernel k;
    nvrtc_result r;
    snprintf(config, sizeof config,
             "family=tc,dtype=bf16,causal=0,block_m=128,warps=4,norm=deferred,layout=swizzle,"
             "q=smem,stages=2,q_share=0,%s", cases[i].config);
    CHECK(gen_target_for_arch(g, cases[i].arch, 0, 0, &t) == 0, "%s", gen_errmsg(g));
    if (gen_render_config(g, config, NULL, &t, &k) != 0) {
      CHECK(0, "rendering %s: %s", config, gen_errmsg(g));
      continue;
    }
    CHECK(nvrtc_compile(k.source, k.entry, cases[i].arch, &r) == 0 && r.ok, "%s: %s", k.name,
          r.error);
    sass_figures f;
    sass_kernel_figures(nvdisasm, &k, &r, NULL, NULL, &f);
    CHECK(f.analysed && f.c.found, "%s on %s: %s", k.name, cases[i].arch, f.error);
    printf("  %s on %s: %ld instructions per K/V block (FlashAttention-2: %ld), %ld local\n",
           k.name, cases[i].arch, f.c.loop_instructions, cases[i].fa2, f.c.loop_local);
    if (judged)
      CHECK(f.c.loop_instructions <= cases[i].fa2 && f.c.loop_local == 0,
            "%s on %s: %ld instructions per K/V block (FlashAttention-2's: %ld), %ld local",
            k.name, cases[i].arch, f.c.loop_instructions, cases[i].fa2, f.c.loop_local);
    nvrtc_result_free(&r);
    gen_kernel_free(&k);
  }
  if (!judged) printf("  NVRTC %s: the bounds are CUDA 13's, not judged\n", nvrtc_version_string());
}

static void test_fresh(void) {
  char nvdisasm[4096], err[256];
  if (sass_find_nvdisasm(nvdisasm, sizeof nvdisasm) != 0)
    check_skip("no nvdisasm on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or from the PyPI "
               "package nvidia-cuda-nvdisasm (scripts/install-deps.sh installs it)");
  gen_state *g;
  CHECK(gen_open(&g, err, sizeof err) == 0, "%s", err);
  static const char fa2[] = "family=tc,dtype=bf16,dim=64,causal=0,block_m=128,block_n=128,"
                            "warps=4,norm=deferred,layout=swizzle,q=smem,stages=2,q_share=0";
  fresh(nvdisasm, g, "sm_80", fa2, "HMMA", 256 + 16);
  fresh(nvdisasm, g, "sm_90", fa2, "HMMA", 256 + 16);
  fresh(nvdisasm, g, "sm_80", "family=simt,dtype=fp32,dim=64", "FFMA", 0);
  fresh_fa2_bound(nvdisasm, g);
  if (nvrtc_arch_supported("sm_90a")) {
    fresh_gemm(nvdisasm, g);
    fresh_wg(nvdisasm, g);
  } else {
    printf("  this NVRTC does not compile for sm_90a: no wgmma kernels\n");
  }
  gen_close(g);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--fresh")) {
    test_fresh();
    return check_done("test_sass --fresh");
  }
  test_nested();
  test_small();
  test_converge();
  test_hopper();
  test_f16acc();
  test_operand_predicate();
  test_lazy_rescale();
  test_mask_reload();
  test_gemm_fixture();
  for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) test_fixture(&fixtures[i]);
  test_estimate();
  test_db_sass();
  return check_done("test_sass");
}
