/*
** test_model.c
** The timing model's mechanisms (model.h), each on a small synthetic
** instruction sequence whose clocks per iteration are worked out by hand
** below: a dependent FFMA chain, MUFU's throughput, a named barrier
** between two warps, an mbarrier ring with one and two stages, a cp.async
** group's wait, a wgmma group's wait, atomic adds queued at L2; the order
** tiles reach the SMs in, and GQA's fewer CTAs where a CTA takes a group.
** Then model_cubin_registers on a hostile ELF.
*/
#include <math.h>
#include <string.h>

#include "check.h"
#include "model.h"
#include "model_sass.h"

static const model_sm sm = {47, 200, 30};  /* 47 bytes a clock, 200 clocks to land, wgmma +30 */

static model_insn op(int kind, int pipe, int stall, double occupy) {
  model_insn m;
  memset(&m, 0, sizeof m);
  m.kind = (unsigned char)kind, m.pipe = (unsigned char)pipe, m.stall = (unsigned char)stall;
  m.wbar = m.rbar = 7;
  m.occupy = occupy;
  m.arg = -1;
  return m;
}

static double per_block(const model_kernel *k, int ctas, model_run *hi) {
  model_run lo;
  CHECK(model_steady(k, &sm, ctas, 0, &lo, hi) == 0, "simulated");
  CHECK(!lo.deadlock && !hi->deadlock, "no deadlock");
  return hi->per_block;
}

static model_kernel one_role(const model_insn *loop, int n, int warps) {
  model_kernel k;
  memset(&k, 0, sizeof k);
  k.role[0] = (model_role){"warp", 1, warps, loop, n, 1, 0, 0};
  k.nroles = 1;
  k.warps_per_cta = warps;
  return k;
}

/* Eight FFMA, each needing the last's result: ptxas's stall of 4 between
** them is the whole cost, 8 x 4 = 32 clocks an iteration. */
static void ffma_chain(void) {
  model_insn loop[8];
  for (int i = 0; i < 8; i++) loop[i] = op(MK_PLAIN, MP_FMA, 4, 1);
  model_kernel k = one_role(loop, 8, 1);
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(c == 32, "an FFMA chain: %g clocks, want 32", c);
  model_run_free(&r);
}

/* Eight independent MUFU of one warp (stall 1): the scheduler's quarter of
** the MUFU unit (4 lanes) takes 8 clocks a warp instruction, so 64 clocks;
** two warps on two schedulers run side by side in the same 64. */
static void mufu_throughput(void) {
  model_insn loop[8];
  for (int i = 0; i < 8; i++) loop[i] = op(MK_PLAIN, MP_MUFU, 1, 8);
  model_kernel k = one_role(loop, 8, 1);
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(c == 64, "MUFU-bound: %g clocks, want 64", c);
  CHECK(fabs(r.busy[MP_MUFU] / (4 * r.cycles) - 0.25) < 0.02, "one quarter of the SM's MUFU busy");
  model_run_free(&r);
  k = one_role(loop, 8, 2);
  c = per_block(&k, 1, &r);
  CHECK(c == 64, "two schedulers: %g clocks, want 64", c);
  model_run_free(&r);
  /* two warps on one scheduler (slots 0 and 4 of an 8-warp CTA): 128 */
  model_insn idle[1] = {op(MK_PLAIN, MP_NONE, 1, 0)};
  k = one_role(loop, 8, 1);
  k.role[1] = (model_role){"other", 1, 1, loop, 8, 1, 4, 0};
  k.role[2] = (model_role){"idle", 1, 3, idle, 0, 1, 1, 0};
  k.nroles = 2, k.warps_per_cta = 8;
  c = per_block(&k, 1, &r);
  CHECK(c == 128, "one scheduler's MUFU shared by two warps: %g clocks, want 128", c);
  model_run_free(&r);
}

/* Warp A: ten FFMA of stall 4 (40 clocks), then BAR.SYNC 1 for two warps;
** warp B only syncs. B waits for A; A's next iteration starts one clock
** after the barrier: 41 clocks, most of them B's wait. */
static void named_barrier(void) {
  model_insn a[11], b[1];
  for (int i = 0; i < 10; i++) a[i] = op(MK_PLAIN, MP_FMA, 4, 1);
  a[10] = op(MK_BAR_SYNC, MP_NONE, 1, 0), a[10].arg = 1, a[10].arg2 = 2;
  b[0] = a[10];
  model_kernel k;
  memset(&k, 0, sizeof k);
  k.role[0] = (model_role){"a", 1, 1, a, 11, 1, 0, 0};
  k.role[1] = (model_role){"b", 1, 1, b, 1, 1, 1, 0};
  k.nroles = 2, k.warps_per_cta = 2;
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(c == 41, "a barrier: %g clocks, want 41", c);
  CHECK(r.wait[1] > 0.9 * r.cycles, "B waits at the barrier: %g of %g", r.wait[1], r.cycles);
  model_run_free(&r);
}

/* A producer fills ring 0 with 4700 bytes (100 clocks on the SM's path
** to L2, landing 200 later); a consumer waits for the fill, works 50 FFMA
** of stall 4 (200 clocks), frees the stage. One stage: the next fill
** starts only when the consumer frees it: 1 (the producer's wait) + 300
** (the copy) + 1 (the consumer's wait) + 200 + 1 (its release) + 1 = 504.
** Two stages: a stage's round trip is the same 504 clocks and two blocks
** are in flight, 252 a block: a stage freed only after the work on it
** hides half the copy. Three stages: the consumer's 202 clocks (its wait,
** 200, its release) bound. */
static void mbarrier_ring(void) {
  model_insn p[2], c[52];
  p[0] = op(MK_EMPTY_WAIT, MP_NONE, 1, 0), p[0].arg = 0;
  p[1] = op(MK_TMA, MP_NONE, 1, 0), p[1].arg = 0, p[1].bytes = 4700;
  c[0] = op(MK_FULL_WAIT, MP_NONE, 1, 0), c[0].arg = 0;
  for (int i = 1; i <= 50; i++) c[i] = op(MK_PLAIN, MP_FMA, 4, 1);
  c[51] = op(MK_RELEASE, MP_NONE, 1, 0), c[51].arg = 0;
  model_kernel k;
  memset(&k, 0, sizeof k);
  k.role[0] = (model_role){"producer", 1, 1, p, 2, 1, 0, 0};
  k.role[1] = (model_role){"consumer", 1, 1, c, 52, 1, 1, 0};
  k.nroles = 2, k.warps_per_cta = 2, k.nrings = 1, k.stages = 1;
  model_run r;
  double one = per_block(&k, 1, &r);
  model_run_free(&r);
  CHECK(fabs(one - 504) <= 2, "one stage: %g clocks, want 504", one);
  k.stages = 2;
  double two = per_block(&k, 1, &r);
  CHECK(fabs(two - one / 2) <= 1, "two stages: %g clocks, want %g", two, one / 2);
  model_run_free(&r);
  k.stages = 3;
  double three = per_block(&k, 1, &r);
  CHECK(three == 202, "three stages: %g clocks, want 202", three);
  CHECK(r.wait[1] < 0.15 * r.cycles, "the consumer waits for the first fill only: %g of %g", r.wait[1],
        r.cycles);
  model_run_free(&r);
}

/* LDGSTS of 512 bytes (11 clocks at 47 a clock), its group committed and
** waited for (DEPBAR.LE SB0, 0), then one FFMA: the copy lands at 210.9,
** the wait issues at 211, the FFMA at 212, the next LDGSTS at 213. */
static void cp_async_group(void) {
  model_insn loop[4];
  loop[0] = op(MK_CP_ASYNC, MP_MIO, 1, 4), loop[0].bytes = 512;
  loop[1] = op(MK_CP_COMMIT, MP_NONE, 1, 0);
  loop[2] = op(MK_CP_WAIT, MP_NONE, 1, 0), loop[2].arg = 0;
  loop[3] = op(MK_PLAIN, MP_FMA, 1, 1);
  model_kernel k = one_role(loop, 4, 1);
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(c == 213, "a cp.async group: %g clocks, want 213", c);
  model_run_free(&r);
}

/* Two HGMMA of 64 tensor clocks each closed as one group, then a wait for
** it: issue 0 and 1, tensor busy until 128, the group done at 128 + 30,
** the wait issues at 158, the next HGMMA at 159. */
static void wgmma_group(void) {
  model_insn loop[3];
  loop[0] = op(MK_HGMMA, MP_TENSOR, 1, 64), loop[0].arg = 0;
  loop[1] = op(MK_HGMMA, MP_TENSOR, 1, 64), loop[1].arg = 1;
  loop[2] = op(MK_HGMMA_WAIT, MP_NONE, 1, 0), loop[2].arg = 0;
  model_kernel k = one_role(loop, 3, 1);
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(c == 159, "a wgmma group: %g clocks, want 159", c);
  model_run_free(&r);
}

/* Global atomic adds (RED): L2's atomic units take the SM's adds one after
** another at its L2 share, apart from the copies. Ten FFMA of stall 4 and
** a RED of 4700 bytes' cost (100 clocks at 47 a clock): the adds bound, 100
** clocks a block (the last add done ends the run). With 940 bytes (20
** clocks) the FFMA bound: 41. A RED of 20 clocks before a cp.async group's
** wait: the copy does not queue behind the add, so the group's 213 clocks
** and the RED's one, 214. */
static void red_queue(void) {
  model_insn loop[11];
  for (int i = 0; i < 10; i++) loop[i] = op(MK_PLAIN, MP_FMA, 4, 1);
  loop[10] = op(MK_RED, MP_NONE, 1, 0), loop[10].bytes = 4700;
  model_kernel k = one_role(loop, 11, 1);
  model_run r;
  double c = per_block(&k, 1, &r);
  CHECK(fabs(c - 100) < 0.5, "adds bound: %g clocks, want 100", c);
  CHECK(r.red_busy > 0.9 * r.cycles, "the atomic units busy: %g of %g", r.red_busy, r.cycles);
  model_run_free(&r);
  loop[10].bytes = 940;
  c = per_block(&k, 1, &r);
  CHECK(c == 41, "the FFMA bound: %g clocks, want 41", c);
  model_run_free(&r);
  model_insn q[5];
  q[0] = op(MK_RED, MP_NONE, 1, 0), q[0].bytes = 940;
  q[1] = op(MK_CP_ASYNC, MP_MIO, 1, 4), q[1].bytes = 512;
  q[2] = op(MK_CP_COMMIT, MP_NONE, 1, 0);
  q[3] = op(MK_CP_WAIT, MP_NONE, 1, 0), q[3].arg = 0;
  q[4] = op(MK_PLAIN, MP_FMA, 1, 1);
  k = one_role(q, 5, 1);
  c = per_block(&k, 1, &r);
  CHECK(c == 214, "a copy beside an add: %g clocks, want 214", c);
  model_run_free(&r);
}

/* A wait that nothing satisfies is reported, not looped on forever. */
static void deadlock(void) {
  model_insn loop[1] = {op(MK_FULL_WAIT, MP_NONE, 1, 0)};
  loop[0].arg = 0;
  model_kernel k = one_role(loop, 1, 1);
  k.nrings = 1, k.stages = 2;
  model_run r;
  CHECK(model_simulate(&k, &sm, 1, 4, 0, &r) == 0, "simulated");
  CHECK(r.deadlock, "a deadlock is reported");
  model_run_free(&r);
}

/* The order the tiles reach the SMs: under a causal mask, a kernel that
** takes each head's query blocks from the last down (heavy_first) leaves
** the short ones for the tail and finishes sooner; without the mask every
** tile is as long and the order changes nothing. A100, 128 heads of 16
** query blocks (2048 tiles) over 108 SMs. */
static void tile_order(void) {
  model_gpu m;
  CHECK(model_gpu_of(estimate_gpu_find("a100"), &m) == 0, "a100's machine");
  model_insn loop[256];  /* 256 x 15 clocks a K/V block: far above DRAM's floor */
  for (int i = 0; i < 256; i++) loop[i] = op(MK_PLAIN, MP_FMA, 15, 1);
  model_built b;
  memset(&b, 0, sizeof b);
  b.k = one_role(loop, 256, 4);
  b.k.warps_per_cta = 4;
  model_launch l = {.block_m = 128, .block_n = 64, .threads = 128, .smem_bytes = 65536,
                    .registers = 128, .stages = 2};
  model_problem p = {.batch = 8, .heads = 16, .seq_q = 2048, .seq_k = 2048, .dim = 128,
                     .causal = 1, .elem_bytes = 2};
  double t[2][2];
  for (int causal = 0; causal < 2; causal++)
    for (int heavy = 0; heavy < 2; heavy++) {
      model_result r;
      char err[128];
      p.causal = causal, l.heavy_first = heavy;
      CHECK(model_predict(&m, &b, &l, &p, 0, &r, err, sizeof err) == 0, "predicted: %s", err);
      t[causal][heavy] = r.time_us;
      model_result_free(&r);
    }
  CHECK(t[1][1] < t[1][0], "causal, heavy first %g us, in order %g", t[1][1], t[1][0]);
  CHECK(t[0][1] == t[0][0], "not causal, heavy first %g us, in order %g", t[0][1], t[0][0]);
}

/* GQA with a CTA per K/V head walking its group's query heads (fatune's
** backward kernels): 16 heads in groups of 8 at 1024 rows in blocks of 128
** make 16 CTAs of 8 heads' blocks each, one round on an A100's 108 SMs
** lasting 8 tiles' time, where the 128 CTAs of one head each take two
** rounds (108, then 20): about 4 times as long. A kernel with a CTA per
** query head takes as long either way, but for DRAM's K and V. */
static void gqa_ctas(void) {
  model_gpu m;
  CHECK(model_gpu_of(estimate_gpu_find("a100"), &m) == 0, "a100's machine");
  model_insn loop[256];
  for (int i = 0; i < 256; i++) loop[i] = op(MK_PLAIN, MP_FMA, 15, 1);
  model_built b;
  memset(&b, 0, sizeof b);
  b.k = one_role(loop, 256, 4);
  model_launch l = {.block_m = 128, .block_n = 64, .threads = 128, .smem_bytes = 120000,
                    .registers = 128, .stages = 2};
  model_problem p = {.batch = 1, .heads = 16, .seq_q = 1024, .seq_k = 1024, .dim = 128,
                     .elem_bytes = 2};
  double t[2][2];
  for (int per_kv = 0; per_kv < 2; per_kv++)
    for (int g = 0; g < 2; g++) {
      model_result r;
      char err[128];
      l.kv_head_ctas = per_kv, p.kv_group = g ? 8 : 1;
      CHECK(model_predict(&m, &b, &l, &p, 0, &r, err, sizeof err) == 0, "predicted: %s", err);
      t[per_kv][g] = r.time_us;
      model_result_free(&r);
    }
  CHECK(t[0][1] == t[0][0], "a CTA per query head: GQA %g us, MHA %g", t[0][1], t[0][0]);
  CHECK(t[1][0] == t[0][0], "a CTA per K/V head without GQA: %g us, %g", t[1][0], t[0][0]);
  double r = t[1][1] / t[1][0];
  CHECK(r > 3.5 && r < 4.5, "a CTA per K/V head under GQA 8: %.2f times the MHA time, want about 4", r);
}

/* A cubin is input from outside: truncated or lying headers give -1. */
static void hostile_cubin(void) {
  unsigned char elf[128];
  memset(elf, 0, sizeof elf);
  memcpy(elf, "\177ELF\2\1", 6);
  CHECK(model_cubin_registers(elf, sizeof elf, "f") == -1, "no sections");
  elf[0x28] = 0x40, elf[0x3a] = 64, elf[0x3c] = 0xff, elf[0x3e] = 1;  /* 255 sections past the end */
  CHECK(model_cubin_registers(elf, sizeof elf, "f") == -1, "sections past the end");
  CHECK(model_cubin_registers(elf, 10, "f") == -1, "truncated");
  CHECK(model_cubin_registers("not an elf at all, but long enough to read a header from it....",
                              64, "f") == -1, "not an ELF");
}

int main(void) {
  ffma_chain();
  mufu_throughput();
  named_barrier();
  mbarrier_ring();
  cp_async_group();
  wgmma_group();
  red_queue();
  deadlock();
  tile_order();
  gqa_ctas();
  hostile_cubin();
  return check_done("test_model");
}
