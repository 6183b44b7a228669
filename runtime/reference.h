/*
** reference.h
** Naive attention on the CPU in float64: the oracle for every validation.
** The full score row is materialized, the softmax taken with its maximum
** subtracted, then multiplied with V. Causal masks align to the bottom-right
** corner: key c is visible to query r when c <= r + (seq_k - seq_q). A row
** with no visible key gets an output of zeros and a logsumexp of -inf.
*/
#ifndef REFERENCE_H
#define REFERENCE_H

#include <stddef.h>

#include "fa_problem.h"

/* q, k, v, o are float64 tensors in (batch, heads, seq, dim) with the given
** strides, v and o of p's V head dim (fa_problem_dim_v); lse (may be NULL) is [batch][heads][seq_q], contiguous.
** Under GQA (p->kv_group) query head h reads K/V head h / kv_group.
** Returns 0, or -1 when the problem is invalid or memory runs out. */
int ref_attention(const fa_problem *p,
                  const double *q, fa_layout ql,
                  const double *k, fa_layout kl,
                  const double *v, fa_layout vl,
                  double *o, fa_layout ol, double *lse);

/* The tensors of the forward pass's reference, as ref_attention takes them;
** lse_mag, when not NULL, gets per row (as lse) the largest size of the
** terms of a visible key's logit, scale * sum |q_d k_d|, which a float32
** logit's rounding error scales with (0 for a row that sees no key);
** o_sens, when not NULL, gets per row sum_c P_c a_c |v_c - o| over its
** visible keys c, a_c the size of key c's logit's terms: how far the row
** of O moves, to first order, when each logit moves by a relative error of
** 1 of its terms' size, which is what rounding the logits does. */
typedef struct ref_fwd_io {
  const double *q, *k, *v;
  fa_layout ql, kl, vl;
  double *o;
  fa_layout ol;
  double *lse;
  double *lse_mag;
  double *o_sens;
} ref_fwd_io;

/* The backward pass's tensors: the forward's inputs and the gradient of
** the loss with respect to its output, dout; out, the gradients of q, k
** and v, in layouts of their own (all (batch, heads, seq, dim) strides). */
typedef struct ref_bwd_io {
  const double *q, *k, *v, *dout;
  fa_layout ql, kl, vl, dol;
  double *dq, *dk, *dv;
  fa_layout dql, dkl, dvl;
  /* Optional (NULL: not computed), laid out as dq and dk: the sums of the
  ** magnitudes of the terms that make each element, scale P (A + sum P A)
  ** |k| and |q|, with A = sum_d |dout_d v_d| the size of dP's terms. Where the softmax's gradient cancels (a row
  ** with a single visible key has dq = 0 exactly), rounding in a kernel is
  ** relative to these, not to the gradient. */
  double *dq_mag, *dk_mag;
  /* Optional: per row j of dv (batch, heads, seq_k, contiguous; under GQA
  ** the K/V heads' rows, over their groups' queries), sqrt(sum_i (P_ij (a_ij
  ** + L_i) |dout_i|)^2): a_ij the size of the terms of the logit of query i
  ** and key j (ref_fwd_io's), L_i = max_j a_ij + log(keys) a bound on
  ** |lse_i|. A kernel gets lse rounded and rounds each logit, so P_ij moves
  ** by P_ij (e_ij - l_i) for relative errors of 1 of those sizes, and row
  ** j of dv by the sum over i of those moves times dout_i, each query's
  ** rounding its own: the root of the sum of their squares measures it,
  ** as o_sens does O's. */
  double *dv_sens;
} ref_bwd_io;

/* The gradients of attention, the textbook way and from q, k, v alone (no
** saved output or logsumexp, so that nothing a kernel computed enters its
** oracle): per query row, P = softmax(scale q K^T) over its visible keys,
** dP = dout V^T, dS = P * (dP - sum(P * dP)); then dq = scale dS K,
** dk += scale dS^T q, dv += P^T dout. A row with no visible key adds
** nothing and has dq = 0. Under GQA (p->kv_group) query head h reads K/V
** head h / kv_group, whose dk and dv sum over its group's query heads.
** Returns 0, or -1 when the problem is invalid or memory runs out. */
int ref_attention_backward(const fa_problem *p, const ref_bwd_io *io);

/* Op decode's tensors: q, o, lse, lse_mag and o_sens as the forward pass's; k and
** v the KV cache's pools of pages in float64, kl and vl their strides (sb a
** page, sn a token, sh a K/V head); table the block table, batch rows of
** fa_problem_pages_per_seq(p) page indices each, num_pages the pool's
** size. Sequence b attends over its fa_problem_kv_len keys, gathered page
** by page, query head h reading K/V head h / kv_group; with causal, its
** query r sees keys up to r + len - seq_q. A page index outside the pool
** is an error. */
typedef struct ref_decode_io {
  const double *q;
  fa_layout ql;
  const double *k, *v;
  fa_layout kl, vl;
  const int *table;
  int num_pages;
  double *o;
  fa_layout ol;
  double *lse, *lse_mag, *o_sens;
} ref_decode_io;

/* The float64 reference of p's op on io, that op's own tensors (fwd: a
** ref_fwd_io; bwd: a ref_bwd_io; decode: a ref_decode_io). 0; FA_EINVAL
** with a message in err when the problem is invalid or memory runs out. */
int ref_op(const fa_problem *p, const void *io, char *err, size_t errlen);

#endif
