/*
** model_kernel.c
** The whole kernel's time (model_sass.h): CTAs resident per SM, the SM's
** steady clocks per K/V block from the simulation (model.h), each tile's
** time, and the tiles laid over the SMs' slots as the launch hands them
** out (one wave after another, or a persistent scheduler's order).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_mod.h"
#include "model_sass.h"

const char *const model_util_names[8] = {"tensor pipe", "issue", "MUFU", "FMA pipe",
                                         "ALU pipe", "shared memory", "L2", "DRAM"};

/* Resident CTAs per SM: registers (per warp in units of 256), shared
** memory with the CTA's reserved KB, threads, the CTA limit ([A], [H],
** [G] of estimate.c). */
static int ctas_per_sm(const estimate_gpu *g, const model_launch *l, const char **limit) {
  int warps = (l->threads + 31) / 32;
  int regs = l->registers < 1 ? 1 : l->registers;
  int per_warp = (regs * 32 + 255) / 256 * 256;
  int n = g->ctas_sm;
  *limit = "ctas";
  if (g->threads_sm / (32 * warps) < n) n = g->threads_sm / (32 * warps), *limit = "threads";
  if (g->smem_sm / (l->smem_bytes + g->smem_reserved_cta) < n)
    n = g->smem_sm / (l->smem_bytes + g->smem_reserved_cta), *limit = "smem";
  if (g->regs_sm / per_warp / warps < n) n = g->regs_sm / per_warp / warps, *limit = "registers";
  return n;
}

/* Of the first n K/V blocks, those a CTA of query block m visits under
** p's mask: from the first to the last the kernels' fa_mod_block does not
** find empty (batch and head 0 stand for all). */
static int mod_blocks(const model_problem *p, const model_launch *l, int m, int n) {
  const int q_lo = m * l->block_m;
  const int q_hi = (q_lo + l->block_m < p->seq_q ? q_lo + l->block_m : p->seq_q) - 1;
  int first = -1, last = -1;
  for (int blk = 0; blk < n; blk++) {
    const int k_lo = blk * l->block_n;
    const int k_hi = (k_lo + l->block_n < p->seq_k ? k_lo + l->block_n : p->seq_k) - 1;
    if (fa_mod_block(p->mod, p->mod_data, 0, 0, q_lo, q_hi, k_lo, k_hi, p->seq_q, p->seq_k, p->heads) != 0) {
      if (first < 0) first = blk;
      last = blk;
    }
  }
  return first < 0 ? 0 : last - first + 1;
}

/* How many of keys [k_lo, k_hi] row r sees under p's mask: the range
** halved until the classifier decides (at one key it does, but for a mask
** of floats, whose key is then counted). */
static double seen_keys(const model_problem *p, int r, int k_lo, int k_hi) {
  const int c = fa_mod_block(p->mod, p->mod_data, 0, 0, r, r, k_lo, k_hi, p->seq_q, p->seq_k, p->heads);
  if (c != 1 || k_lo == k_hi) return c == 0 ? 0 : k_hi - k_lo + 1;
  const int mid = k_lo + (k_hi - k_lo) / 2;
  return seen_keys(p, r, k_lo, mid) + seen_keys(p, r, mid + 1, k_hi);
}

/* The share of the (query, key) pairs p's mask (and causal mask) keeps,
** over at most 1024 rows spread evenly. */
static double kept_share(const model_problem *p) {
  const int rows = p->seq_q < 1024 ? p->seq_q : 1024;
  double kept = 0;
  for (int i = 0; i < rows; i++) {
    const int r = (int)((long long)i * p->seq_q / rows);
    long hi = p->seq_k - 1;
    if (p->causal && r + (long)p->seq_k - p->seq_q < hi) hi = r + (long)p->seq_k - p->seq_q;
    if (hi >= 0) kept += seen_keys(p, r, 0, (int)hi);
  }
  return kept / ((double)rows * p->seq_k);
}

/* Of the query blocks [first, all) of block_n rows, those p's mask does
** not hide from K/V block m (of block_m keys): the backward kernels skip
** each one it hides (templates/tcbwd). */
static int mod_q_blocks(const model_problem *p, const model_launch *l, int m, int first, int all) {
  const int k_lo = m * l->block_m;
  const int k_hi = (k_lo + l->block_m < p->seq_k ? k_lo + l->block_m : p->seq_k) - 1;
  int n = 0;
  for (int qb = first; qb < all; qb++) {
    const int q_lo = qb * l->block_n;
    const int q_hi = (q_lo + l->block_n < p->seq_q ? q_lo + l->block_n : p->seq_q) - 1;
    n += fa_mod_block(p->mod, p->mod_data, 0, 0, q_lo, q_hi, k_lo, k_hi, p->seq_q, p->seq_k, p->heads) != 0;
  }
  return n;
}

/* K/V blocks of query block m: all of them, or with a causal mask
** aligned bottom right (a query sees the keys up to its row plus
** seq_k - seq_q) those up to the diagonal. */
static int blocks_of(const model_problem *p, const model_launch *l, int m) {
  if (p->backward) {  /* K/V block m walks the query blocks that see it */
    int all = (p->seq_q + l->block_n - 1) / l->block_n;
    long first = (long)m * l->block_m - (p->seq_k - p->seq_q);  /* the first row seeing key m * block_m */
    int from = 0;
    if (p->causal && first > 0) {
      if (first >= p->seq_q) return 0;
      from = (int)(first / l->block_n);
    }
    return p->mod ? mod_q_blocks(p, l, m, from, all) : all - from;
  }
  int all = (p->seq_k + l->block_n - 1) / l->block_n;
  if (p->causal) {
    long last = (long)(m + 1) * l->block_m + p->seq_k - p->seq_q;  /* keys seen by the block's last row */
    if (last > p->seq_k) last = p->seq_k;
    all = last <= 0 ? 0 : (int)((last + l->block_n - 1) / l->block_n);
  }
  return p->mod ? mod_blocks(p, l, m, all) : all;
}

/* Decoding: the group's query rows, the CTAs over them per sequence
** (the kernel's {"kv_rows", rows} grid), a sequence's keys. */
/* The query heads that share a K/V head (GQA; decoding packs them into a CTA's rows). */
static int kv_group_of(const model_problem *p) { return p->kv_group > 1 ? p->kv_group : 1; }

/* The main launch's CTAs per (batch, sequence) along the heads, and the
** query heads each walks: one each, or under GQA, where a CTA takes a K/V
** head's whole group, heads / group CTAs of group heads each. */
static int cta_heads(const model_problem *p, const model_launch *l) {
  return l->kv_head_ctas && !p->decode ? p->heads / kv_group_of(p) : p->heads;
}
static int heads_per_cta(const model_problem *p, const model_launch *l) {
  return l->kv_head_ctas && !p->decode ? kv_group_of(p) : 1;
}

static long decode_ctas(const model_problem *p, const model_launch *l) {
  if (l->decode_per_head) return (long)p->heads * ((p->seq_q + l->block_m - 1) / l->block_m);
  const long rows = (long)kv_group_of(p) * p->seq_q;
  return (long)(p->heads / kv_group_of(p)) * ((rows + l->block_m - 1) / l->block_m);
}

static int decode_len(const model_problem *p, int b) { return p->kv_lens ? p->kv_lens[b] : p->seq_k; }

/* The keys [*lo, *hi) the decoding kernels read of sequence b: all of
** them, or under p's mask the blocks from the first to the last that
** fa_mod_block does not find empty for the sequence's rows
** (templates/decode.cu's mod_range; batch and head 0 stand for all). */
static void decode_keys(const model_problem *p, const model_launch *l, int b, long *lo, long *hi) {
  const int len = decode_len(p, b), bn = l->block_n > 0 ? l->block_n : 1;
  *lo = 0, *hi = len;
  if (!p->mod) return;
  int first = -1, last = -1;
  for (int blk = 0; (long)blk * bn < len; blk++) {
    const int k_lo = blk * bn, k_hi = (k_lo + bn < len ? k_lo + bn : len) - 1;
    if (fa_mod_block(p->mod, p->mod_data, 0, 0, 0, p->seq_q - 1, k_lo, k_hi, p->seq_q, len, p->heads) != 0) {
      if (first < 0) first = blk;
      last = blk;
    }
  }
  *lo = first < 0 ? 0 : (long)first * bn;
  *hi = first < 0 ? 0 : ((long)(last + 1) * bn < len ? (long)(last + 1) * bn : len);
}

/* Each decoding CTA's blocks: its split's share of its sequence's keys,
** whole blocks but the last (templates/simtdec/simtdec.cu). */
static void decode_tiles(const model_problem *p, const model_launch *l, double fill, double cpb,
                         double qo, double *t) {
  const long per_seq = decode_ctas(p, l);
  const int splits = l->splits > 0 ? l->splits : 1;
  long i = 0;
  for (int b = 0; b < p->batch; b++) {
    long lo, hi;
    decode_keys(p, l, b, &lo, &hi);
    const long len = hi - lo;
    const long chunk = ((len + splits - 1) / splits + l->block_n - 1) / l->block_n * l->block_n;
    for (long c = 0; c < per_seq; c++)
      for (int s = 0; s < splits; s++, i++) {
        long keys = len - s * chunk;
        keys = keys < 0 ? 0 : keys > chunk ? chunk : keys;
        const long n = (keys + l->block_n - 1) / l->block_n;
        t[i] = (n > 0 ? fill + n * cpb : 0) + qo;
      }
  }
}

/* Decoding's DRAM bytes: each K/V head's keys once (the CTAs of one
** head's other query rows read them again from L2), Q and O, and with
** splits the partials written and read back by the combine. */
static double decode_kv_bytes(const model_problem *p, const model_launch *l) {
  double keys = 0;
  for (int b = 0; b < p->batch; b++) {
    long lo, hi;
    decode_keys(p, l, b, &lo, &hi);
    keys += hi - lo;
  }
  return keys * (p->heads / kv_group_of(p)) * 2.0 * p->dim * p->elem_bytes;
}

static double decode_partial_bytes(const model_problem *p, const model_launch *l) {
  const double rows = (double)p->batch * p->heads * p->seq_q;
  return l->splits > 1 ? rows * l->splits * (p->dim + 1) * 4.0 : 0;
}

int model_fa2_splits(const model_problem *p, const estimate_gpu *g) {
  /* set_params_splitkv: 128-thread CTAs, two an SM; kBlockN by head dim;
  ** with one new token under GQA the group's heads are the query rows
  ** (seqlenq_ngroups_swapped) */
  const int block_n = p->dim <= 64 ? 256 : p->dim <= 128 ? 128 : 64;
  int max_len = 0;
  for (int b = 0; b < p->batch; b++) max_len = decode_len(p, b) > max_len ? decode_len(p, b) : max_len;
  const int swapped = p->seq_q == 1 && kv_group_of(p) > 1;
  const int heads = swapped ? p->heads / kv_group_of(p) : p->heads;
  const int seq_q = swapped ? kv_group_of(p) : p->seq_q;
  const int units = p->batch * heads * ((seq_q + 63) / 64), sms = 2 * g->sms;
  const int n_blocks = (max_len + block_n - 1) / block_n;
  /* num_splits_heuristic */
  if (units >= 0.8f * sms) return 1;
  int most = 128 < sms ? 128 : sms;
  most = n_blocks < most ? n_blocks : most;
  float eff[129] = {0}, best = 0;
  for (int s = 1; s <= most; s++) {
    const int eligible = s == 1 || (n_blocks + s - 1) / s != (n_blocks + s - 2) / (s - 1);
    if (!eligible) continue;
    const float waves = (float)(units * s) / sms;
    eff[s] = waves / ceilf(waves);
    best = eff[s] > best ? eff[s] : best;
  }
  for (int s = 1; s <= most; s++)
    if (eff[s] > 0 && eff[s] >= 0.85f * best) return s;
  return 1;
}

/* A min-heap of slot free times. */
static void heap_down(double *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && h[l] < h[m]) m = l;
    if (r < n && h[r] < h[m]) m = r;
    if (m == i) return;
    double t = h[i];
    h[i] = h[m], h[m] = t;
    i = m;
  }
}

static int by_length_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

/* The makespan of the tiles' times laid over `slots` slots, each tile to
** the slot free first in the order given (the hardware's block dispatch;
** a dynamic persistent scheduler's queue). A static persistent scheduler
** (tile i to slot i mod slots) is the same for tiles of equal time. */
static double makespan(double *tile, long n, int slots) {
  double *h = calloc((size_t)slots, sizeof *h);
  if (!h) return -1;
  for (long i = 0; i < n; i++) {
    h[0] += tile[i];
    heap_down(h, slots, 0);
  }
  double m = 0;
  for (int i = 0; i < slots; i++) m = h[i] > m ? h[i] : m;
  free(h);
  return m;
}

/* The same for a static scheduler: tile i to slot i mod slots, the rounds
** of odd number in reverse. */
static double makespan_snake(const double *tile, long n, int slots) {
  double *h = calloc((size_t)slots, sizeof *h);
  if (!h) return -1;
  for (long i = 0; i < n; i++) {
    long round = i / slots, at = i % slots;
    h[round & 1 ? slots - 1 - at : at] += tile[i];
  }
  double m = 0;
  for (int i = 0; i < slots; i++) m = h[i] > m ? h[i] : m;
  free(h);
  return m;
}

/* The share of (query, key) pairs p's causal mask keeps (1 without). */
static double causal_share(const model_problem *p) {
  if (!p->causal || p->seq_q < 1 || p->seq_k < 1) return 1;
  double keep = 0;
  for (long q = 0; q < p->seq_q; q++) {
    long k = q + 1 + p->seq_k - p->seq_q;
    keep += k < 0 ? 0 : k > p->seq_k ? p->seq_k : k;
  }
  return keep / ((double)p->seq_q * p->seq_k);
}

/* Sequence s of a variable-length batch as a dense problem of its own. */
static model_problem sequence(const model_problem *p, int s) {
  model_problem one = *p;
  one.batch = 1, one.seq_q = p->q_lens[s], one.seq_k = p->kv_lens[s], one.q_lens = NULL;
  return one;
}

/* A variable-length batch's tiles, the grid's (sequence, head, query
** block; the backward pass's K/V block) in launch order: a block within
** its sequence's rows as the dense kernel's, one past them the cost of
** reading the offsets (stop). */
static void varlen_tiles(const model_problem *p, const model_launch *l, long mblocks,
                         double fill, double cpb, double qo, double stop, double *t) {
  long i = 0;
  for (int s = 0; s < p->batch; s++) {
    const model_problem one = sequence(p, s);
    const int own = ((p->backward ? one.seq_k : one.seq_q) + l->block_m - 1) / l->block_m;
    const int other = p->backward ? one.seq_q : one.seq_k;  /* what each block walks */
    for (int h = 0; h < cta_heads(p, l); h++)
      for (int mb = 0; mb < mblocks; mb++, i++) {
        if (mb >= own) {
          t[i] = stop;
          continue;
        }
        const int n = other > 0 ? heads_per_cta(p, l) *
                                      blocks_of(&one, l, l->heavy_first ? own - 1 - mb : mb)
                                : 0;
        t[i] = n > 0 ? fill + n * cpb + qo : qo;
      }
  }
}

static const char *bound_of(const model_result *r) {
  int best = 0;
  for (int i = 1; i < 8; i++)
    if (r->util[i] > r->util[best]) best = i;
  if (r->util[best] >= 0.85) return model_util_names[best];
  return r->wait_share >= 0.25 ? "pipeline wait" : "latency";
}

int model_predict(const model_gpu *m, const model_built *b, const model_launch *l,
                  const model_problem *p, int trace, model_result *out, char *err, size_t errlen) {
  const estimate_gpu *g = m->g;
  memset(out, 0, sizeof *out);
  out->ctas_per_sm = ctas_per_sm(g, l, &out->limit);
  if (out->ctas_per_sm < 1) {
    snprintf(err, errlen, "the kernel does not fit an SM of %s (%s)", g->name, out->limit);
    return -1;
  }
  if (p->q_lens && p->decode) {
    snprintf(err, errlen, "variable-length batches are modelled for the forward and backward "
             "passes only");
    return -1;
  }
  long mblocks = ((p->backward ? p->seq_k : p->seq_q) + l->block_m - 1) / l->block_m;
  long tiles = p->decode ? p->batch * decode_ctas(p, l) * (l->splits > 0 ? l->splits : 1)
                         : mblocks * p->batch * cta_heads(p, l);
  int ctas = out->ctas_per_sm;
  if (tiles < (long)g->sms * ctas) ctas = (int)((tiles + g->sms - 1) / g->sms);
  model_sm sm = {m->l2_bytes_clk / g->sms, m->l2_latency, m->hgmma_latency};
  model_run lo;
  if (model_steady(&b->k, &sm, ctas, trace, &lo, &out->run)) {
    snprintf(err, errlen, "out of memory simulating");
    return -1;
  }
  if (lo.deadlock || out->run.deadlock) {
    snprintf(err, errlen, "the simulated kernel deadlocked (a wait nothing satisfies)");
    return -1;
  }
  double cpb = out->run.per_block;    /* clocks per block of `ctas` CTAs together */
  out->cycles_per_block = cpb;
  /* A tile's time on a slot: its share of the SM running `ctas` tiles at
  ** once; the first 4 blocks as simulated (the pipeline's fill), then the
  ** steady rate. A non-persistent CTA also loads Q and stores O once. */
  double fill = lo.cycles - 4 * cpb;
  if (fill < 0) fill = 0;
  double qo = (p->backward ? 4.0 : 2.0) * l->block_m * p->dim * p->elem_bytes / sm.l2_bytes_clk +
              2 * sm.l2_latency;  /* the backward pass: K, V in, dK, dV out */
  double *t = malloc((size_t)(tiles ? tiles : 1) * sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  long i = 0;
  if (p->decode) {  /* Q's rows in, the partials (or O) out */
    qo = 2.0 * l->block_m * p->dim * 4 / sm.l2_bytes_clk + 2 * sm.l2_latency;
    decode_tiles(p, l, fill, cpb, qo, t);
  }
  /* a persistent CTA loads Q and stores O under its next tile, and skips
  ** a tile past its sequence once it has read the offsets */
  if (p->q_lens)
    varlen_tiles(p, l, mblocks, fill, cpb, l->persistent ? 0 : qo,
                 (l->persistent ? 1 : 2) * sm.l2_latency, t);
  for (int h = 0; !p->decode && !p->q_lens && h < p->batch * cta_heads(p, l); h++)
    for (int mb = 0; mb < mblocks; mb++, i++) {
      int n = heads_per_cta(p, l) * blocks_of(p, l, l->heavy_first ? (int)mblocks - 1 - mb : mb);
      /* with the blocks of `ctas` resident tiles interleaved, one tile's
      ** block costs cpb clocks of its slot */
      t[i] = n > 0 ? fill + n * cpb + (l->persistent ? 0 : qo) : (l->persistent ? 0 : qo);
    }
  if (l->persistent && l->longest_first) qsort(t, (size_t)tiles, sizeof *t, by_length_desc);
  double busy = 0;
  for (long k = 0; k < tiles; k++) busy += t[k];
  int slots = g->sms * ctas;
  double span = l->persistent && l->snake ? makespan_snake(t, tiles, slots)
                                          : makespan(t, tiles, slots);
  free(t);
  if (span < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (l->persistent) span += qo;  /* the first Q and the last O */
  double clk = g->clock_ghz * 1e9;
  double secs = span / clk;
  /* DRAM: Q, K, V read and O written once, at the peak [B], K and V once
  ** per K/V head; the backward pass's main kernel reads Q, dO, K, V and
  ** writes dK, dV (dQ's adds stay in L2; under GQA, dK and dV per query
  ** head where the kernel expands them), and its other launches, which
  ** run alone, read dO and O, write the accumulator's zeros, read it back
  ** (every copy a kernel keeps) and write dQ */
  const double bh = (double)p->batch * p->heads, group = kv_group_of(p);
  const double oe = p->elem_bytes == 1 ? 2 : p->elem_bytes;  /* fp8's O is bf16 */
  const double kv_rows = !p->backward ? 2.0 / group
                                      : 2.0 / group + (l->gqa_part_bytes && group > 1
                                                           ? 2.0 * l->gqa_part_bytes / p->elem_bytes
                                                           : 2.0 / group);
  double rows = bh * p->seq_q, keys = (double)p->batch * p->seq_k;
  double dram_bytes = bh * p->dim *
                      (p->backward ? p->elem_bytes * (2.0 * p->seq_q + kv_rows * p->seq_k)
                                   : (p->elem_bytes + oe) * p->seq_q + kv_rows * p->elem_bytes * p->seq_k);
  if (p->q_lens) {
    dram_bytes = rows = keys = 0;
    for (int s = 0; s < p->batch; s++) {
      keys += p->kv_lens[s];
      dram_bytes += (double)p->heads * p->elem_bytes * p->dim *
                    (2.0 * p->q_lens[s] + kv_rows * p->kv_lens[s]);
      rows += (double)p->heads * p->q_lens[s];
    }
  }
  if (p->decode) {
    out->kv_bytes = decode_kv_bytes(p, l);
    dram_bytes = out->kv_bytes + 4.0 * bh * p->seq_q * p->dim * p->elem_bytes / 2 +
                 decode_partial_bytes(p, l);
  }
  double dram = dram_bytes / (g->dram_gbs * 1e9), apart = 0;
  if (p->decode && l->splits > 1) {
    /* The combine, after: its partials read back at DRAM's rate, and a
    ** query row's two dependent reads (the logsumexps, then O's rows)
    ** per wave of its CTAs, 16 an SM */
    const double waves = ceil(rows / (16.0 * g->sms));
    apart = decode_partial_bytes(p, l) / 2 / (g->dram_gbs * 1e9) +
            waves * 2 * sm.l2_latency / (g->clock_ghz * 1e9);
    out->combine_us = apart * 1e6;
  }
  if (p->backward) {
    double side = rows * (p->dim * 3.0 * p->elem_bytes + 2.0 * l->dq_acc_row_bytes) + 8.0 * rows;
    if (l->gqa_part_bytes && group > 1)  /* the sums: dK, dV per query head read, per K/V head written */
      side += 2.0 * (p->heads * l->gqa_part_bytes + p->heads / group * p->elem_bytes) * keys * p->dim;
    apart = side / (g->dram_gbs * 1e9);
  }
  if (l->v_transposed)  /* V read and written once more, by the launch before, alone */
    apart += 2.0 * p->batch * (p->heads / kv_group_of(p)) * p->seq_k * p->dim * p->elem_bytes /
             (g->dram_gbs * 1e9);
  out->flops = 4.0 * p->batch * p->heads * p->seq_q * (double)p->seq_k * p->dim;
  if (p->backward) out->flops *= 2.5;  /* five products of the tile's size to two */
  if (p->decode) {  /* every new token over its sequence's keys */
    out->flops = 4.0 * p->heads * p->seq_q * p->dim * (out->kv_bytes /
                 ((p->heads / kv_group_of(p)) * 2.0 * p->dim * p->elem_bytes));
  } else if (p->q_lens) {  /* each sequence's pairs, its causal half */
    out->flops = 0;
    for (int s = 0; s < p->batch; s++) {
      const model_problem one = sequence(p, s);
      out->flops += 4.0 * p->heads * one.seq_q * (double)one.seq_k * p->dim *
                    (one.mod ? kept_share(&one) : causal_share(&one));
    }
    if (p->backward) out->flops *= 2.5;
  } else if (p->mod) {  /* the pairs the mask keeps, as for the causal half */
    out->flops *= kept_share(p);
  } else if (p->causal) {  /* the computed half, as FlashAttention's papers count it */
    out->flops *= causal_share(p);
  }
  const model_run *r = &out->run;
  double c = r->cycles > 0 ? r->cycles : 1;
  out->util[0] = r->busy[MP_TENSOR] / (4 * c);
  out->util[1] = r->issued / (4 * c);
  out->util[2] = r->busy[MP_MUFU] / (4 * c);
  out->util[3] = r->busy[MP_FMA] / (4 * c);
  out->util[4] = r->busy[MP_ALU] / (4 * c);
  out->util[5] = r->busy[MP_MIO] / c;
  out->util[6] = (r->l2_busy > r->red_busy ? r->l2_busy : r->red_busy) / c;  /* the busier */
  out->util[7] = dram / (secs > dram ? secs : dram);
  int consumer = b->k.nroles > 1 ? 1 : 0;
  out->wait_share = r->wait[consumer] / c;
  out->waves = (double)tiles / slots;
  out->wave_efficiency = span > 0 ? busy / ((double)slots * span) : 0;
  if (dram > secs) secs = dram;
  secs += apart;
  out->time_us = secs * 1e6;
  out->tflops = out->flops / secs / 1e12;
  out->bound = dram >= span / clk ? "DRAM" : bound_of(out);
  model_run_free(&lo);
  return 0;
}

void model_result_free(model_result *r) { model_run_free(&r->run); }

/* ---- the cubin's register counts ----
** ELF64 little-endian: the section named .nv.info holds attributes
** {u8 format, u8 attribute, payload}; EIATTR_REGCOUNT (0x2f, format 4 with
** a u16 size) carries {u32 symbol index, u32 registers}. Every offset is
** checked against the file: a cubin is input from outside. */
static uint64_t rd(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static int in_file(uint64_t off, uint64_t len, size_t size) {
  return off <= size && len <= size - off;
}

int model_cubin_registers(const void *cubin, size_t size, const char *function) {
  const unsigned char *d = cubin;
  if (size < 64 || memcmp(d, "\177ELF", 4) || d[4] != 2 || d[5] != 1) return -1;
  uint64_t shoff = rd(d + 0x28, 8);
  unsigned shentsize = (unsigned)rd(d + 0x3a, 2), shnum = (unsigned)rd(d + 0x3c, 2),
           shstrndx = (unsigned)rd(d + 0x3e, 2);
  if (shentsize < 64 || shstrndx >= shnum || !in_file(shoff, (uint64_t)shnum * shentsize, size))
    return -1;
#define SEC(i) (d + shoff + (uint64_t)(i) * shentsize)
  uint64_t strs = rd(SEC(shstrndx) + 0x18, 8), strs_len = rd(SEC(shstrndx) + 0x20, 8);
  if (!in_file(strs, strs_len, size)) return -1;
  const unsigned char *sym = NULL, *symstr = NULL;
  uint64_t nsym = 0, symstr_len = 0;
  for (unsigned i = 0; i < shnum; i++)
    if (rd(SEC(i) + 4, 4) == 2) {  /* SHT_SYMTAB */
      uint64_t off = rd(SEC(i) + 0x18, 8), len = rd(SEC(i) + 0x20, 8);
      unsigned link = (unsigned)rd(SEC(i) + 0x28, 4);
      if (!in_file(off, len, size) || link >= shnum) return -1;
      uint64_t so = rd(SEC(link) + 0x18, 8), sl = rd(SEC(link) + 0x20, 8);
      if (!in_file(so, sl, size)) return -1;
      sym = d + off, nsym = len / 24, symstr = d + so, symstr_len = sl;
    }
  if (!sym) return -1;
  size_t fl = strlen(function);
  for (unsigned i = 0; i < shnum; i++) {
    uint64_t name = rd(SEC(i), 4);
    if (name >= strs_len || strs_len - name < 9 || memcmp(d + strs + name, ".nv.info", 9)) continue;
    uint64_t off = rd(SEC(i) + 0x18, 8), len = rd(SEC(i) + 0x20, 8);
    if (!in_file(off, len, size)) return -1;
    for (uint64_t p = off; p + 2 <= off + len;) {
      unsigned fmt = d[p], attr = d[p + 1];
      if (fmt == 4) {
        if (p + 4 > off + len) break;
        uint64_t sz = rd(d + p + 2, 2);
        if (p + 4 + sz > off + len) break;
        if (attr == 0x2f && sz >= 8) {
          uint64_t si = rd(d + p + 4, 4), regs = rd(d + p + 8, 4);
          if (si < nsym) {
            uint64_t sn = rd(sym + si * 24, 4);
            if (sn < symstr_len && symstr_len - sn > fl && !memcmp(symstr + sn, function, fl + 1))
              return regs > 0 && regs <= 255 ? (int)regs : -1;
          }
        }
        p += 4 + sz;
      } else if (fmt == 3) p += 4;
      else if (fmt == 2) p += 3;
      else p += 2;
    }
  }
#undef SEC
  return -1;
}
