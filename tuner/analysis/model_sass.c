/*
** model_sass.c
** SASS into the timing model's instructions (model_sass.h), per GPU.
*/
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_sass.h"

/* The machine beyond estimate.c's table ([A], [H], [G], [L], [M], [B]
** there), and where each figure comes from:
**  [G] CUDA C++ Programming Guide, arithmetic instruction throughput
**      table, compute capability 8.0 and 9.0: 64 results per clock per SM
**      for 32-bit integer add, logical, shift, compare and min/max, and for
**      32-bit integer multiply-add (IMAD). Conversions to and from 32-bit
**      types: 16 per clock per SM, as MUFU; they are taken on MUFU's unit.
**      F2FP (two floats packed into a 16-bit pair) is taken as an ALU
**      instruction (a simplification: the table has no row for it).
**  [D] Abdelkhalik et al., "Demystifying the Nvidia Ampere Architecture
**      through Microbenchmarking and Instruction-level Analysis" (2022),
**      and Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU
**      Architecture" (2024): shared-memory load latency about 30 clocks
**      on A100 and H100; L2 hit latency about 200 (A100) to 260 (H100)
**      clocks; the special-function unit's latency about 20 clocks.
**  [T] A100 whitepaper: L2 read bandwidth 5120 bytes per clock (2.3x
**      V100's). H100's whitepaper gives no such figure; A100's per-SM
**      share (47 bytes per clock per SM) is taken for it, an assumption.
**  [W] wgmma's completion after its last tensor clock: taken as the
**      accumulator's write-back, about the shared-memory latency [D]
**      (no published figure).
**  [X] The other GPUs of estimate.c (Turing, GA102, Ada, consumer
**      Blackwell): no microbenchmark paper is cited for them here, so
**      A100's latencies [D] and per-SM L2 share [T] are taken for them, an
**      assumption; their SMs issue integer work as [G] says for 7.5, 8.6,
**      8.9 and 12.0 (64 lanes per SM).
** Every variable-latency result is taken as landing after these
** latencies; ptxas's stall counts carry the fixed ones. */
/* [S] A dense bf16 product of 8192 x 8192 x 8192 on random data sustains
** 788 TFLOP/s on an H200 (H100's processor), 0.797 of the data sheet's
** 989: under that load the clock falls. wgmma at full rate meets it; the
** forward kernels' errors against an H200's times fell from +19% (median,
** 23 wg variants) to +8% with it (scripts/gpu-check.sh, tests/data/gpu).
** mma.sync kernels, which keep the tensor pipe under half busy, keep the
** nominal rate: theirs were right (median -1%) and go to -11% with it. */
#define HOPPER_TENSOR (788.0 / 989.0)
static const struct { const char *name; model_gpu m; } machines[] = {
  {"a100", {NULL, 64, 64, 30, 20, 200, 5120, 30, 1}},
  {"h100", {NULL, 64, 64, 30, 20, 260, 5120.0 * 132 / 108, 30, HOPPER_TENSOR}},
  {"h200", {NULL, 64, 64, 30, 20, 260, 5120.0 * 132 / 108, 30, HOPPER_TENSOR}},
  {"a10", {NULL, 64, 64, 30, 20, 200, 5120.0 * 72 / 108, 30, 1}},
  {"rtx3090", {NULL, 64, 64, 30, 20, 200, 5120.0 * 82 / 108, 30, 1}},
  {"l40s", {NULL, 64, 64, 30, 20, 200, 5120.0 * 142 / 108, 30, 1}},
  {"l4", {NULL, 64, 64, 30, 20, 200, 5120.0 * 58 / 108, 30, 1}},
  {"rtx4090", {NULL, 64, 64, 30, 20, 200, 5120.0 * 128 / 108, 30, 1}},
  {"rtx5090", {NULL, 64, 64, 30, 20, 200, 5120.0 * 170 / 108, 30, 1}},
  {"t4", {NULL, 64, 64, 30, 20, 200, 5120.0 * 40 / 108, 30, 1}},
};

int model_gpu_of(const estimate_gpu *g, model_gpu *out) {
  for (size_t i = 0; g && i < sizeof machines / sizeof machines[0]; i++)
    if (!strcmp(g->name, machines[i].name)) {
      *out = machines[i].m;
      out->g = g;
      return 0;
    }
  return -1;
}

/* ---- instructions ---- */

static int has(const char *text, const char *s) { return strstr(text, s) != NULL; }

static int op_is(const char *op, const char *const *set) {
  for (; *set; set++)
    if (!strcmp(op, *set)) return 1;
  return 0;
}

/* The n-th comma-separated operand of an instruction's text (0: the
** first after the mnemonic), into buf. */
static void operand(const char *text, int n, char *buf, size_t size) {
  const char *p = strchr(text, ' ');
  buf[0] = '\0';
  if (!p) return;
  for (int i = 0; i < n && p; i++) p = strchr(p + 1, ',');
  if (!p) return;
  p++;
  while (*p == ' ') p++;
  size_t k = 0;
  while (p[k] && p[k] != ',' && k + 1 < size) buf[k] = p[k], k++;
  buf[k] = '\0';
}

static long imm(const char *s) {
  if (!strncmp(s, "0x", 2)) return strtol(s + 2, NULL, 16);
  return isdigit((unsigned char)*s) ? strtol(s, NULL, 10) : -1;
}

/* The bytes a warp moves through shared memory (or L1) by the width in
** the mnemonic: .128 16 bytes a lane, .64 8, else 4; LDSM/STSM .4 four
** 8x8 matrices of 16 bits (512 bytes), .2 two, else one. */
static double mio_bytes(const char *op, const char *text) {
  if (!strcmp(op, "LDSM") || !strcmp(op, "STSM"))
    return has(text, ".4 ") ? 512 : has(text, ".2 ") ? 256 : 128;
  return has(text, ".128") ? 512 : has(text, ".64") ? 256 : 128;
}

/* [R] A warp's global reduction (RED) reaches L2 as one request per
** 128-byte line its lanes touch, as every global access leaves the SM;
** L2's atomic units take a request as long as this many bytes take the
** SM's share of L2 bandwidth (model.c queues the adds apart from the
** copies). No figure is published: fitted, with model.c's RED_QUEUE, to an
** H200's backward pass (tests/data/gpu), where tcbwd's ten variants with
** dQ by atomics (each add a warp's 8 rows, 8 requests of 16 bytes) came
** out at 0.94 to 1.16 of their measured times (from 0.45 to 0.95 with the
** adds taken as ALU work); at d128 with 32 keys a CTA, 4.3e9 adds, the
** kernel ran 17.8 ms. Those times fit a cost per 32-byte sector as well;
** per line, FlashAttention-2's coalesced adds (a warp's 32 floats in one
** line) leave its kernel's time where it was without them, +20% and +46%
** of the flash backward measured in that run at d64 and d128, where per
** sector they put it at +49% and +78%. Other GPUs take the same cost
** against their own L2 share. */
#define RED_LINE_BYTES 160.0

/* The lines a warp's RED touches: the kernel's count (its addresses'
** pattern, which the SASS does not show) when it gives one, else a
** coalesced warp's, 32 lanes of the mnemonic's width (F32x2 and 64-bit
** types 8 bytes, F32x4 16, else 4) over 128-byte lines. The mnemonic
** alone: the operands hold ".64" register pairs and offsets like 0x20. */
static double red_lines(const char *text, int declared) {
  if (declared > 0) return declared;
  char m[64];
  snprintf(m, sizeof m, "%.*s", (int)strcspn(text, " "), text);
  return has(m, "x4") ? 4 : has(m, "x2") || has(m, "64") ? 2 : 1;
}

/* The N of an HGMMA.64xNx16 (bf16/fp16) or QGMMA.64xNx32 (fp8) shape, 0 if
** unreadable. */
static int hgmma_n(const char *text) {
  const char *p = strstr(text, ".64x");
  return p ? atoi(p + 4) : 0;
}

/* An HGMMA whose A operand is in shared memory (a descriptor): S = Q K^T;
** one with A in registers: O += P V (and fatune's row sums). */
static int hgmma_ss(const char *text) {
  char a[48];
  operand(text, 1, a, sizeof a);
  return !strncmp(a, "gdesc", 5);
}

static void plain(model_insn *m, int pipe, double lanes, int phase) {
  m->pipe = (unsigned char)pipe;
  m->occupy = 32.0 / (lanes / 4);  /* clocks on one scheduler's quarter of the SM */
  m->phase = (unsigned char)phase;
}

static void classify(const model_gpu *g, const sass_op *o, const model_launch *l, model_insn *m) {
  const int ldsm_ways = l->ldsm_ways;
  static const char *const fma[] = {"FFMA", "FADD", "FMUL", "HFMA2", "HADD2", "HMUL2", "FSWZADD",
                                    NULL};
  static const char *const conv[] = {"F2F", "I2F", "F2I", "I2FP", "F2IP", "FRND", NULL};
  static const char *const mio[] = {"LDS", "STS", "LDSM", "STSM", "ATOMS", "LDL", "STL", "SHFL",
                                    NULL};
  static const char *const none[] = {"BRA", "EXIT", "NOP", "WARPGROUP", "ELECT", "NANOSLEEP",
                                     "YIELD", "BSSY", "BSYNC", "WARPSYNC", "VOTEU", "R2UR",
                                     "FENCE", "MEMBAR", "CCTL", "ERRBAR", "UTMACMDFLUSH",
                                     "USETMAXREG", "S2R", "S2UR", "CS2R", NULL};
  const estimate_gpu *e = g->g;
  const char *op = o->op, *t = o->text;
  memset(m, 0, sizeof *m);
  m->stall = (unsigned char)(o->stall ? o->stall : 1);
  m->wbar = (unsigned char)o->wbar, m->rbar = (unsigned char)o->rbar;
  m->wait = (unsigned char)o->wait;
  m->latency = g->smem_latency;
  m->arg = -1;
  if (sass_is_gmma(op)) {
    m->kind = MK_HGMMA, m->pipe = MP_TENSOR;
    int n = hgmma_n(t), k = sass_gmma_k(t);
    /* fp8 (k32) at twice the 16-bit rate: 1979 against 989 dense TFLOP/s
    ** on the H100 SXM5 (NVIDIA H100 Tensor Core GPU Architecture, table 2),
    ** so one QGMMA takes the tensor pipe as long as an HGMMA of its N. */
    m->occupy = 2.0 * 64 * (n > 0 ? n : 64) * k / (e->hgmma_flop_clk * (k / 16)) / g->tensor_sustained;
    m->arg = has(t, "gsb0");
    m->phase = hgmma_ss(t) ? MPH_S : MPH_PV;
  } else if (!strcmp(op, "HMMA")) {
    m->pipe = MP_TENSOR;
    double flops = has(t, ".16816") ? 4096 : has(t, ".1688") ? 2048 : 4096;
    m->occupy = flops / ((sass_hmma_f16acc(t) ? e->mma16_flop_clk : e->mma_flop_clk) / 4);
    m->phase = MPH_S;  /* S or P V: model_build tells them apart */
  } else if (!strcmp(op, "WARPGROUP") && has(t, "DEPBAR")) {
    char a[24];
    operand(t, 1, a, sizeof a);
    m->kind = MK_HGMMA_WAIT, m->arg = (int)(imm(a) < 0 ? 0 : imm(a)), m->phase = MPH_SYNC;
  } else if (!strcmp(op, "MUFU")) {
    plain(m, MP_MUFU, e->mufu_clk, MPH_SOFTMAX);
    m->latency = g->mufu_latency;
  } else if (op_is(op, conv)) {
    plain(m, MP_MUFU, e->mufu_clk, MPH_SOFTMAX);
    m->latency = g->mufu_latency;
  } else if (op_is(op, fma)) {
    plain(m, MP_FMA, e->ffma_clk, MPH_SOFTMAX);
  } else if (!strcmp(op, "DFMA") || !strcmp(op, "DADD") || !strcmp(op, "DMUL")) {
    /* the FP64 lanes [A], [H], taken as the FMA pipe (a kernel is fp64 or not) */
    plain(m, MP_FMA, e->dfma_clk, MPH_SOFTMAX);
  } else if (!strcmp(op, "IMAD") || !strcmp(op, "IMUL")) {
    plain(m, MP_FMA, g->imad_lanes, MPH_OTHER);
  } else if (!strcmp(op, "LDGSTS")) {
    m->kind = MK_CP_ASYNC, m->pipe = MP_MIO, m->phase = MPH_COPY;
    m->bytes = mio_bytes(op, t);
    m->occupy = m->bytes / e->smem_bytes_clk;
  } else if (!strcmp(op, "LDGDEPBAR")) {
    m->kind = MK_CP_COMMIT, m->phase = MPH_COPY;
  } else if (!strcmp(op, "DEPBAR")) {
    char a[24];
    operand(t, 1, a, sizeof a);
    m->kind = MK_CP_WAIT, m->arg = (int)(imm(a) < 0 ? 0 : imm(a)), m->phase = MPH_SYNC;
  } else if (!strcmp(op, "LDG")) {
    m->kind = MK_LOAD_GLOBAL, m->bytes = mio_bytes(op, t), m->phase = MPH_COPY;
  } else if (!strcmp(op, "REDG") || (!strcmp(op, "RED") && has(t, ".E."))) {
    m->kind = MK_RED, m->phase = MPH_COPY;
    m->bytes = red_lines(t, l->red_lines) * RED_LINE_BYTES;
  } else if (op_is(op, mio)) {
    m->pipe = MP_MIO;
    m->occupy = !strcmp(op, "SHFL") ? 1 : mio_bytes(op, t) / e->smem_bytes_clk;
    /* Rows on the same banks: the reads go one after the other, and the
    ** result waits for the last. */
    if (!strcmp(op, "LDSM") && ldsm_ways > 1)
      m->latency += m->occupy * (ldsm_ways - 1), m->occupy *= ldsm_ways;
    m->phase = strcmp(op, "SHFL") ? MPH_COPY : MPH_SOFTMAX;
  } else if (!strcmp(op, "BAR")) {
    char a[24], b[24];
    const char *sp = strchr(t, ' ');
    snprintf(a, sizeof a, "%.*s", sp ? (int)strcspn(sp + 1, ",") : 0, sp ? sp + 1 : "");
    operand(t, 1, b, sizeof b);
    m->kind = has(t, "BAR.ARV") ? MK_BAR_ARV : MK_BAR_SYNC;
    m->arg = a[0] == 'R' ? -1 : (int)(imm(a) < 0 ? 0 : imm(a));
    m->arg2 = b[0] ? (int)(imm(b) > 0 ? imm(b) / 32 : 0) : 0;
    m->phase = MPH_SYNC;
  } else if (op[0] == 'U' || op_is(op, none) || !strcmp(op, "SYNCS") ||
             !strcmp(op, "UTMALDG")) {
    m->pipe = MP_NONE;  /* SYNCS and UTMALDG: model_build gives their meaning */
    m->phase = !strcmp(op, "SYNCS") ? MPH_SYNC : !strcmp(op, "UTMALDG") ? MPH_COPY : MPH_OTHER;
    m->latency = g->smem_latency;  /* S2R, S2UR: about a shared-memory load's [D] */
  } else {
    plain(m, MP_ALU, g->alu_lanes, MPH_SOFTMAX);
  }
}

/* ---- mbarrier rings ----
** Which ring each SYNCS and UTMALDG belongs to, by the order the code
** uses them (the addresses are in registers): the producer's i-th wait in
** its loop guards ring i (FlashAttention-3 waits for K's stage, then V's;
** a kernel with one ring for both waits once); its loads fill the ring of
** the wait before them. The consumer's waits take the rings in the same
** order (K's, then V's: both sides of every such kernel use the stages in
** the order of the loop's products); its i-th release frees the ring of
** its i-th wait. A run of phase checks on the same address is one wait,
** blocking at its last (a test, then the try-wait). */

static int is_phasechk(const sass_op *o) {
  return !strcmp(o->op, "SYNCS") && has(o->text, "PHASECHK");
}
/* A plain arrive (a consumer freeing a stage): no transaction bytes, its
** last operand RZ; the producer's arrive that expects the TMA's bytes
** carries their count in a register. */
static int is_release(const sass_op *o) {
  const char *t = o->text;
  size_t n = strlen(t);
  return !strcmp(o->op, "SYNCS") && has(t, "SYNCS.ARRIVE") && n > 4 && !strcmp(t + n - 4, ", RZ");
}

static void address(const sass_op *o, char *buf, size_t n) {
  const char *p = strchr(o->text, '['), *q = p ? strchr(p, ']') : NULL;
  snprintf(buf, n, "%.*s", p && q ? (int)(q - p) : 0, p ? p : "");
}

/* Marks the blocking waits of a loop: 1 at the last phase check of each run. */
static void blocking_waits(const sass_seq *q, char *wait) {
  char a[64], b[64];
  for (int i = 0; i < q->n; i++) {
    wait[i] = 0;
    if (!is_phasechk(&q->op[i])) continue;
    address(&q->op[i], a, sizeof a);
    int later = 0;
    for (int j = i + 1; j < q->n && !later; j++) {
      if (!strcmp(q->op[j].op, "SYNCS") && !is_phasechk(&q->op[j])) break;
      if (sass_is_gmma(q->op[j].op) || !strcmp(q->op[j].op, "UTMALDG")) break;
      if (is_phasechk(&q->op[j])) address(&q->op[j], b, sizeof b), later = !strcmp(a, b);
    }
    wait[i] = !later;
  }
}

/* An address with its registers left out ("[R+URZ+0x60]"): the same
** barrier array at every stage, whichever register holds the stage. */
static void address_key(const sass_op *o, char *buf, size_t n) {
  char a[64];
  address(o, a, sizeof a);
  size_t k = 0;
  for (const char *p = a; *p && k + 1 < n; p++) {
    buf[k++] = *p;
    if ((*p == 'R' || (*p == 'U' && p[1] == 'R')) && (p == a || p[-1] == '[' || p[-1] == '+')) {
      if (*p == 'U') buf[k++] = *++p;
      while (isdigit((unsigned char)p[1])) p++;
    }
  }
  buf[k] = '\0';
}

/* The ring of a wait by its barrier array's address: one of the keys seen
** so far (key[0 .. *nk)), a new one while there are fewer than cap, else
** the last. */
static int ring_by_address(const sass_op *o, char key[][64], int *nk, int cap) {
  char k[64];
  int ring;
  address_key(o, k, sizeof k);
  for (ring = 0; ring < *nk && strcmp(key[ring], k); ring++) continue;
  if (ring == *nk && *nk < cap) snprintf(key[(*nk)++], sizeof key[0], "%s", k);
  return ring < *nk ? ring : *nk - 1;
}

/* The immediate offset of an mbarrier operand ("[R5+URZ+0x2e830]":
** 0x2e830), -1 without one. */
static long bar_offset(const sass_op *o) {
  const char *a = strchr(o->text, '['), *e = a ? strchr(a, ']') : NULL, *x = NULL;
  for (const char *p = a; p && p < e; p++)
    if (p[0] == '0' && p[1] == 'x') x = p;
  return x ? strtol(x, NULL, 16) : -1;
}

static int is_arrive(const sass_op *o) {
  return !strcmp(o->op, "SYNCS") && has(o->text, "SYNCS.ARRIVE");
}

/* A producer that writes a stage itself: FlashAttention-3's fp8 kernel
** (Transpose_V). Its producer warpgroup loads V by TMA into a buffer of its
** own (smem_vt, on a barrier pair the consumers never see), then, a block
** behind, waits for that V to land and for the consumers to free smem_v,
** writes V transposed there with LDSM.T and STSM, the four warps a quarter
** each, and arrives on the barrier the consumers wait on for V. A wait with
** no UTMALDG after it marks such a loop. By the barriers' offsets (one
** shared-memory array on both sides): a wait whose TMA's expect-tx arrive
** names a barrier the consumers wait on fills that ring (K); one whose TMA's
** names none is the producer's own (V into smem_vt): met at once, its TMA
** only L2 traffic; a wait with no TMA before the next wait waits for the
** producer's own TMA (met) or, where the plain arrive after it names a
** consumer's barrier, for that ring's stage (V's): the fill, which the
** consumers take once the iteration ends, after the transposition.
** Simplified: the warpgroup's named barrier the one modelled warp meets at
** once; its LDSM and STSM hold shared memory four times as long (the other
** three warps' quarters). Returns the blocks per iteration when it mapped
** such a loop, else 0 with m as it was. */
static int map_own_producer(const sass_seq *q, model_insn *m, const char *w,
                            const sass_seq *cons, int want, const model_problem *p,
                            const model_launch *l) {
  int own = 0;
  for (int i = 0, last = -1; i <= q->n; i++) {
    if (i < q->n && !w[i]) continue;
    if (last >= 0) {
      int tma = 0;
      for (int j = last + 1; j < i; j++) tma |= !strcmp(q->op[j].op, "UTMALDG");
      own |= !tma;
    }
    last = i;
  }
  if (!own || p->backward) return 0;
  char *cw = calloc((size_t)cons->n + 1, 1);
  if (!cw) return 0;
  long coff[MODEL_MAX_RINGS], ownoff[8];
  int nc = 0, nown = 0, filled[MODEL_MAX_RINGS] = {0};
  blocking_waits(cons, cw);
  for (int i = 0; i < cons->n && nc < want && nc < MODEL_MAX_RINGS; i++)
    if (cw[i]) coff[nc++] = bar_offset(&cons->op[i]);
  free(cw);
  if (nc != want) return 0;
  model_insn *orig = malloc((size_t)q->n * sizeof *orig);
  if (!orig) return 0;
  memcpy(orig, m, (size_t)q->n * sizeof *orig);
  const double tile = (double)l->block_n * p->dim * p->elem_bytes;
  int ring = -1, ntma = 1;  /* the ring the current wait fills (-1 none), its TMAs */
  for (int i = 0; i < q->n; i++) {
    if (w[i]) {
      ring = -1;
      int next = i + 1, tma = -1;
      while (next < q->n && !w[next]) next++;
      ntma = 0;
      for (int j = i + 1; j < next; j++)
        if (!strcmp(q->op[j].op, "UTMALDG")) ntma++, tma = tma < 0 ? j : tma;
      ntma = ntma ? ntma : 1;
      long off = -1;
      if (tma >= 0) {  /* the expect-tx arrive before the TMA */
        for (int j = i + 1; j < tma; j++)
          if (is_arrive(&q->op[j]) && !is_release(&q->op[j])) off = bar_offset(&q->op[j]);
        for (int r = 0; r < nc; r++)
          if (off >= 0 && coff[r] == off) ring = r;
        if (ring < 0 && nown < 8) ownoff[nown++] = off;
      } else {
        off = bar_offset(&q->op[i]);
        int mine = 0;
        for (int k = 0; k < nown; k++) mine |= ownoff[k] == off;
        for (int j = i + 1; j < q->n && !mine && ring < 0; j++)
          if (is_arrive(&q->op[j]) && is_release(&q->op[j]))
            for (int r = 0; r < nc; r++)
              if (coff[r] == bar_offset(&q->op[j])) ring = r;
      }
      if (ring >= 0) m[i].kind = MK_EMPTY_WAIT, m[i].arg = ring, filled[ring]++;
    } else if (!strcmp(q->op[i].op, "UTMALDG")) {
      if (ring >= 0) m[i].kind = MK_TMA, m[i].arg = ring, m[i].bytes = tile / ntma;
      else m[i].kind = MK_LOAD_GLOBAL, m[i].bytes = tile / ntma, m[i].wbar = 7;
    } else if ((m[i].kind == MK_BAR_SYNC || m[i].kind == MK_BAR_ARV) && m[i].arg2 > 1) {
      m[i].kind = MK_PLAIN, m[i].pipe = MP_NONE;
    } else if (!strcmp(q->op[i].op, "LDSM") || !strcmp(q->op[i].op, "STSM")) {
      m[i].occupy *= 4;
    }
  }
  /* each ring filled once per block, or the loop is not what this reads */
  int ok = 1;
  for (int r = 0; r < want; r++) ok &= filled[r] == filled[0] && filled[r] > 0;
  if (!ok) memcpy(m, orig, (size_t)q->n * sizeof *orig);
  free(orig);
  return ok ? filled[0] : 0;
}

/* The producer's rings: one per barrier array its waits use, in order of
** first use; an unrolled loop waits on each more than once. Where the
** addresses do not tell the arrays apart (each in a register of its own)
** but the consumers use `want` rings, the waits take them in turn: K's,
** then V's. Returns the blocks per iteration. */
static int map_producer(const sass_seq *q, const sass_seq *cons, model_insn *m, int want,
                        int *nrings, const model_problem *p, const model_launch *l) {
  char *w = calloc((size_t)q->n + 1, 1);
  char key[MODEL_MAX_RINGS][64];
  int nk = 0, waits = 0, loads[MODEL_MAX_RINGS] = {0};
  if (!w) return 1;
  blocking_waits(q, w);
  const int own = map_own_producer(q, m, w, cons, want, p, l);
  if (own > 0) {
    free(w);
    *nrings = want;
    return own;
  }
  for (int i = 0; i < q->n; i++)
    if (w[i]) ring_by_address(&q->op[i], key, &nk, 2), waits++;
  /* The backward pass's producer unrolls its loop over the stages, each
  ** at an address of its own: its waits take the rings in turn. */
  int by_order = (nk < want || p->backward) && waits % want == 0;
  if (by_order) nk = want;
  for (int pass = 0; pass < 2; pass++) {
    int ring = 0, nth = 0;
    for (int i = 0; i < q->n; i++) {
      if (w[i]) {
        ring = by_order ? nth++ % nk : ring_by_address(&q->op[i], key, &nk, nk);
        if (pass) m[i].kind = MK_EMPTY_WAIT, m[i].arg = ring;
      } else if (!strcmp(q->op[i].op, "UTMALDG")) {
        if (!pass) loads[ring]++;
        else {
          /* a fill holds K (and V, with one ring) of a block */
          double tile = (double)l->block_n * p->dim * p->elem_bytes * (nk == 1 ? 2 : 1);
          int per_fill = loads[ring] * nk / (waits ? waits : 1);
          m[i].kind = MK_TMA, m[i].arg = ring, m[i].bytes = tile / (per_fill > 0 ? per_fill : 1);
        }
      }
    }
  }
  *nrings = nk > 0 ? nk : 1;
  free(w);
  return waits / *nrings > 0 ? waits / *nrings : 1;
}

/* ---- which fill a consumer's release frees ----
** The consumer loop's wgmma groups (HGMMA up to one that closes with
** gsb0), each S = Q K^T (reading ring 0) or P V (reading the last ring):
** by its N (block_n for S, the head dim for P V) where the two differ,
** else by where A lives (shared memory for S, registers for P V). A P V
** group issued before the iteration's first MUFU.EX2 is software
** pipelined: it multiplies the previous block's P. A release frees the
** stage that the newest group retired by the wait before it
** (WARPGROUP.DEPBAR.LE gsb0, N: all but the N newest) read: the fill the
** iteration's wait on that ring acquired, or, when that group is a
** pipelined P V and the ring's wait came before another group (one ring,
** its stage holding K and V, acquired for this block's S), the fill
** before it. With a ring of its own, V's wait acquires the V its P V
** reads, wherever it is placed. */
typedef struct wg_group { int end, pv, prev; } wg_group;

static int group_kind_pv(const sass_op *o, const model_launch *l, const model_problem *p) {
  int n = hgmma_n(o->text);
  if (n == l->block_n && n != p->dim) return 0;
  if (n == p->dim && n != l->block_n) return 1;
  return !hgmma_ss(o->text);
}

static int groups_of(const sass_seq *q, const model_launch *l, const model_problem *p,
                     wg_group *g, int max) {
  int n = 0, first_ex2 = q->n;
  for (int i = 0; i < q->n && first_ex2 == q->n; i++)
    if (!strcmp(q->op[i].op, "MUFU") && has(q->op[i].text, "EX2")) first_ex2 = i;
  for (int i = 0; i < q->n && n < max; i++)
    if (sass_is_gmma(q->op[i].op) && has(q->op[i].text, "gsb0")) {
      int pv = group_kind_pv(&q->op[i], l, p);
      g[n++] = (wg_group){i, pv, pv && i < first_ex2};
    }
  return n;
}

/* The index of the newest group the wait at d retires, -1 none. */
static int retired_by(const sass_seq *q, int d, const wg_group *g, int ng) {
  char a[24];
  operand(q->op[d].text, 1, a, sizeof a);
  long keep = imm(a) < 0 ? 0 : imm(a);
  int before = 0;
  while (before < ng && g[before].end < d) before++;
  long k = before - 1 - keep;  /* groups of the previous iteration when negative */
  if (ng == 0) return -1;
  while (k < 0) k += ng;
  return (int)(k % ng);
}

static void map_releases(const sass_seq *q, model_insn *m, int rings, const model_launch *l,
                         const model_problem *p) {
  enum { MAXG = 16 };
  wg_group g[MAXG];
  int ng = groups_of(q, l, p, g, MAXG);
  if (ng == 0) return;
  int wait_group[MODEL_MAX_RINGS];
  for (int r = 0; r < MODEL_MAX_RINGS; r++) wait_group[r] = -1;
  for (int i = 0; i < q->n; i++)
    if (m[i].kind == MK_FULL_WAIT && m[i].arg >= 0 && m[i].arg < MODEL_MAX_RINGS)
      for (int k = 0; k < ng; k++)
        if (g[k].end > i) {
          wait_group[m[i].arg] = k;
          break;
        }
  for (int i = 0; i < q->n; i++) {
    if (m[i].kind != MK_RELEASE) continue;
    int d = -1;
    for (int k = 1; k <= q->n && d < 0; k++) {
      int j = (i - k + q->n) % q->n;
      if (!strcmp(q->op[j].op, "WARPGROUP") && has(q->op[j].text, "DEPBAR")) d = j;
    }
    int x = d < 0 ? -1 : retired_by(q, d, g, ng);
    if (x < 0) continue;
    int ring = g[x].pv ? rings - 1 : 0;
    m[i].arg = ring;
    m[i].arg2 = rings == 1 && g[x].prev && wait_group[ring] != x;
  }
}

/* The rings the consumers wait on: two when each iteration waits twice
** per S group (K's and V's), else one (K and V in one stage). The
** backward pass's: one per barrier array its waits use (FlashAttention-3:
** Q's and dO's), or, where their addresses are all in registers, one per
** wait. */
static int consumer_rings(const sass_seq *q, const model_launch *l, const model_problem *p) {
  char *w = calloc((size_t)q->n + 1, 1);
  if (!w) return 1;
  blocking_waits(q, w);
  int waits = 0, s_groups = 0, nk = 0;
  char key[MODEL_MAX_RINGS][64];
  for (int i = 0; i < q->n; i++) {
    waits += w[i];
    if (w[i]) ring_by_address(&q->op[i], key, &nk, MODEL_MAX_RINGS);
    s_groups += sass_is_gmma(q->op[i].op) && has(q->op[i].text, "gsb0") &&
                !group_kind_pv(&q->op[i], l, p);
  }
  free(w);
  if (p->backward)  /* arrays told apart by address, else by order (fatune's wgbwd) */
    return nk > 1 ? nk : waits > 1 && waits <= MODEL_MAX_RINGS ? waits : 1;
  return s_groups > 0 && waits == 2 * s_groups ? 2 : 1;
}

/* A named barrier of the consumers' that counts warps of no warpgroup the
** model runs (FlashAttention-3's backward: a consumer warpgroup and the
** warp that adds dQ's tile to global memory, 160 threads): taken as met.
** That warp only issues a TMA reduction per block, well within a block's
** time; the model has no role for it. */
static void drop_foreign_barriers(model_insn *m, int n) {
  for (int i = 0; i < n; i++)
    if ((m[i].kind == MK_BAR_SYNC || m[i].kind == MK_BAR_ARV) && m[i].arg2 % 4 != 0)
      m[i].kind = MK_PLAIN, m[i].pipe = MP_NONE;
}

/* Turns between warpgroups: named barriers in registers, each group
** waiting on its own and arriving on the next's (FlashAttention-3's warp
** scheduler barrier). A loop may pass more than one token (wgbwd: the
** turn to issue S^T and dP^T, then the turn to add to dQ): where it has as
** many such waits as arrives, the i-th wait and the i-th arrive form pair
** i (arg -1 - i; up to MODEL_MAX_TURNS pairs of two groups each); the
** first group takes every pair's first turn. */
static void turn_pairs(model_insn *m, int n, int groups, model_kernel *k) {
  int waits = 0, arrives = 0;
  for (int i = 0; i < n; i++)
    if (m[i].arg < 0 && m[i].arg2 != 4) {
      waits += m[i].kind == MK_BAR_SYNC;
      arrives += m[i].kind == MK_BAR_ARV;
    }
  k->pingpong_pairs = waits;
  if (waits < 2 || waits != arrives || waits * groups > 2 * MODEL_MAX_TURNS) {
    k->pingpong_pairs = waits > 0;
    return;
  }
  for (int i = 0, w = 0, a = 0; i < n; i++)
    if (m[i].arg < 0 && m[i].arg2 != 4 && (m[i].kind == MK_BAR_SYNC || m[i].kind == MK_BAR_ARV))
      m[i].arg = -1 - (m[i].kind == MK_BAR_SYNC ? w++ : a++);
}

/* Returns the blocks per iteration: the waits for ring 0. Each blocking
** wait takes the ring of its barrier array, by address, or, where the
** addresses do not tell them apart, the rings in turn (K's, then V's). */
static int map_consumer(const sass_seq *q, model_insn *m, int rings, const model_launch *l,
                        const model_problem *p) {
  char *w = calloc((size_t)q->n + 1, 1);
  int *ring_of_wait = calloc((size_t)q->n + 1, sizeof *ring_of_wait);
  if (!w || !ring_of_wait) {
    free(w), free(ring_of_wait);
    return 1;
  }
  blocking_waits(q, w);
  int nw = 0, nk = 0;
  char key[MODEL_MAX_RINGS][64];
  for (int i = 0; i < q->n; i++) {
    if (!w[i]) continue;
    int ring = ring_by_address(&q->op[i], key, &nk, rings);
    m[i].kind = MK_FULL_WAIT, m[i].arg = ring;
    ring_of_wait[nw++] = ring;
  }
  if (nk < rings && nw % rings == 0)
    for (int i = 0, n = 0; i < q->n; i++)
      if (w[i]) m[i].arg = ring_of_wait[n] = n % rings, n++;
  int nr = 0;
  for (int i = 0; i < q->n; i++)
    if (is_release(&q->op[i])) {
      m[i].kind = MK_RELEASE;
      m[i].arg = nw ? ring_of_wait[nr < nw ? nr : nw - 1] : 0;
      nr++;
    }
  /* The backward pass frees each ring once per block, in the order of its
  ** waits; which first moves the producer's next load by a part of a block. */
  if (!p->backward) map_releases(q, m, rings, l, p);
  int per = 0;
  for (int i = 0; i < nw; i++) per += ring_of_wait[i] == 0;
  free(w);
  free(ring_of_wait);
  return per > 0 ? per : 1;
}

/* HMMA of S or of P V: S's start from zero (RZ accumulator) and
** accumulate into what S's wrote; the rest are P V's. */
static void hmma_phases(const sass_seq *q, model_insn *m) {
  char dst[16][8];
  int nd = 0;
  for (int i = 0; i < q->n; i++) {
    if (strcmp(q->op[i].op, "HMMA")) continue;
    char d[24], c[24];
    operand(q->op[i].text, 0, d, sizeof d);
    operand(q->op[i].text, 3, c, sizeof c);
    const char *sp = strchr(q->op[i].text, ' ');
    snprintf(d, sizeof d, "%.*s", sp ? (int)strcspn(sp + 1, ",") : 0, sp ? sp + 1 : "");
    int s = !strncmp(c, "RZ", 2);
    for (int k = 0; k < nd && !s; k++) s = !strcmp(dst[k], d);
    m[i].phase = s ? MPH_S : MPH_PV;
    if (s && !strncmp(c, "RZ", 2) && nd < 16) snprintf(dst[nd++], sizeof dst[0], "%.7s", d);
  }
}

/* The consumers' wait for P V's group against their exponentials: how
** many MUFU.EX2 issue between the last P V HGMMA and the wait that
** retires its group (all of them, gsb0 0x0). */
static int ex2_before_pv_wait(const sass_seq *q) {
  int last_pv = -1;
  for (int i = 0; i < q->n; i++)
    if (sass_is_gmma(q->op[i].op) && !hgmma_ss(q->op[i].text)) last_pv = i;
  if (last_pv < 0) return -1;
  int ex2 = 0;
  for (int k = 1; k < q->n; k++) {
    const sass_op *o = &q->op[(last_pv + k) % q->n];
    if (!strcmp(o->op, "MUFU") && has(o->text, "EX2")) ex2++;
    if (!strcmp(o->op, "WARPGROUP") && has(o->text, "DEPBAR") && has(o->text, "0x0")) return ex2;
  }
  return -1;
}

/* An mbarrier try-wait does not stop the warp: it sets a scoreboard when
** the phase completes (or a time limit passes), and the warp goes on
** issuing until an instruction waits on that scoreboard, the branch to the
** retry loop. ptxas issues the try early where it can: the consumers' try
** for V, a couple of hundred instructions (the exponentials) before the
** branch that needs it. The wait is modelled where it blocks, at the first
** instruction after the try that waits on its scoreboard; the try itself
** is then plain. */
static void defer_waits(const sass_seq *q, model_insn *m) {
  for (int i = 0; i < q->n; i++) {
    if ((m[i].kind != MK_FULL_WAIT && m[i].kind != MK_EMPTY_WAIT) || q->op[i].wbar > 5) continue;
    for (int j = i + 1; j < q->n; j++) {
      if (!(q->op[j].wait >> q->op[i].wbar & 1)) continue;
      if (m[j].kind != MK_PLAIN) break;  /* a waiter of its own kind: the wait stays */
      m[j].kind = m[i].kind, m[j].arg = m[i].arg, m[j].arg2 = m[i].arg2;
      m[j].phase = MPH_SYNC;
      m[i].kind = MK_PLAIN, m[i].arg = -1, m[i].arg2 = 0;
      break;
    }
  }
}

static int translate(const model_gpu *g, const sass_seq *q, const model_launch *l,
                     model_insn **out) {
  *out = calloc((size_t)q->n + 1, sizeof **out);
  if (!*out) return -1;
  for (int i = 0; i < q->n; i++) classify(g, &q->op[i], l, &(*out)[i]);
  return 0;
}

static int fail(char *err, size_t n, const char *msg) {
  snprintf(err, n, "%s", msg);
  return -1;
}

int model_build(const model_gpu *g, const sass_trace *t, const model_launch *l,
                const model_problem *p, model_built *b, char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  b->ex2_before_pv_wait = -1;
  if (t->loop.n == 0) return fail(err, errlen, "no main loop in the SASS");
  if (translate(g, &t->loop, l, &b->insn[0])) return fail(err, errlen, "out of memory");
  model_kernel *k = &b->k;
  k->warps_per_cta = l->threads / 32;
  if (l->consumers > 0) {
    if (t->producer.n == 0)
      return model_built_free(b), fail(err, errlen, "a warp-specialized kernel without a producer loop");
    if (translate(g, &t->producer, l, &b->insn[1]))
      return model_built_free(b), fail(err, errlen, "out of memory");
    int pp = map_producer(&t->producer, &t->loop, b->insn[1], consumer_rings(&t->loop, l, p),
                          &k->nrings, p, l);
    int pc = map_consumer(&t->loop, b->insn[0], k->nrings, l, p);
    if (p->backward) drop_foreign_barriers(b->insn[0], t->loop.n);
    defer_waits(&t->loop, b->insn[0]);
    defer_waits(&t->producer, b->insn[1]);
    k->stages = l->stages > 0 ? l->stages : 2;
    /* the producer: one warp of warpgroup 0; the consumers: warpgroups 1..n */
    k->role[0] = (model_role){"producer", 1, 1, b->insn[1], t->producer.n, pp, 0, 0};
    k->role[1] = (model_role){"consumer", l->consumers, 4, b->insn[0], t->loop.n, pc, 4, 4};
    k->nroles = 2;
    turn_pairs(b->insn[0], t->loop.n, l->consumers, k);
    b->ex2_before_pv_wait = ex2_before_pv_wait(&t->loop);
    b->pv_before_exp = b->ex2_before_pv_wait == 0;
  } else {
    hmma_phases(&t->loop, b->insn[0]);
    k->role[0] = (model_role){"warp", 1, l->threads / 32, b->insn[0], t->loop.n, 1, 0, 0};
    k->nroles = 1;
  }
  return 0;
}

void model_built_free(model_built *b) {
  for (int i = 0; i < MODEL_MAX_ROLES; i++) free(b->insn[i]);
  memset(b, 0, sizeof *b);
}
