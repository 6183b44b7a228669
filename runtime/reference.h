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

#include "fa_problem.h"

/* q, k, v, o are float64 tensors in (batch, heads, seq, dim) with the given
** strides; lse (may be NULL) is [batch][heads][seq_q], contiguous.
** Returns 0, or -1 when the problem is invalid or memory runs out. */
int ref_attention(const fa_problem *p,
                  const double *q, fa_layout ql,
                  const double *k, fa_layout kl,
                  const double *v, fa_layout vl,
                  double *o, fa_layout ol, double *lse);

#endif
