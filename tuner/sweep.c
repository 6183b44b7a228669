/*
** sweep.c
** A sweep's keys and its shards. A shard is computed by every machine
** from the same key list, without talking to the others: the keys sorted
** by estimated cost, largest first (ties in list order), each given to the
** shard with the least cost so far (ties to the lowest), the greedy
** longest-processing-time rule. So the N parts are disjoint, cover the
** list, and come out within one key's cost of each other.
*/
#include <stdlib.h>

#include "sweep.h"

/* The attention's work of a key at which its validation and launches cost
** about as much as the part every key pays (compiling its variants, the
** timing budget): a rough scale, enough to spread the long keys. */
#define SWEEP_WORK_PER_KEY 1073741824.0

double sweep_cost(const fa_problem *p) {
  return 1.0 + (double)p->seq_q * p->seq_k * p->dim * (p->causal ? 0.5 : 1.0) /
                   SWEEP_WORK_PER_KEY;
}

typedef struct ranked { double cost; size_t at; } ranked;

static int by_cost(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* Keeps the keys of shard i (0-based) of n, in their order. */
static int shard(fa_problem *keys, size_t *count, int i, int n) {
  ranked *r = malloc(*count * sizeof *r);
  double *load = calloc((size_t)n, sizeof *load);
  unsigned char *mine = calloc(*count, 1);
  int rc = r && load && mine ? 0 : -1;
  for (size_t k = 0; rc == 0 && k < *count; k++) r[k] = (ranked){sweep_cost(&keys[k]), k};
  if (rc == 0) qsort(r, *count, sizeof *r, by_cost);
  for (size_t k = 0; rc == 0 && k < *count; k++) {
    int least = 0;
    for (int j = 1; j < n; j++)
      if (load[j] < load[least]) least = j;
    load[least] += r[k].cost;
    mine[r[k].at] = least == i;
  }
  size_t kept = 0;
  for (size_t k = 0; rc == 0 && k < *count; k++)
    if (mine[k]) keys[kept++] = keys[k];
  if (rc == 0) *count = kept;
  free(r), free(load), free(mine);
  return rc;
}

/* The values of one list of a sweep: n of them, or the one given (one). */
typedef struct list { const int *v; int n, one; } list;

static list list_of(const int *vals, int n, int one) {
  const list l = {vals, n > 1 ? n : 1, one};
  return l;
}

static int list_at(list l, int i) { return l.n > 1 ? l.v[i] : l.one; }

int sweep_keys(const cli_opts *o, fa_problem **keys, size_t *n) {
  const int nt = o->ndtypes ? o->ndtypes : 1, nd = o->ndims ? o->ndims : 1;
  const int ns = o->nseqs ? o->nseqs : 1, nc = o->causal_both ? 2 : 1;
  const fa_problem *q = &o->problem;
  /* Op decode's: the group, the page, the batch, the cache's length. */
  const list lg = list_of(o->gqas, o->ngqas, q->kv_group), lp = list_of(o->pages, o->npages, q->page);
  const list lb = list_of(o->batches, o->nbatches, q->batch);
  const list lk = list_of(o->seqks, o->nseqks, q->seq_k);
  /* A workload's (batch, length) keys stand for the batch x length product. */
  const size_t bk = o->nwl_keys ? (size_t)o->nwl_keys : (size_t)lb.n * lk.n;
  const size_t dec = (size_t)lg.n * lp.n * bk;
  fa_problem *k = malloc((size_t)nt * nd * nc * ns * dec * sizeof *k);
  if (!k) return -1;
  size_t m = 0;
  for (int a = 0; a < nt; a++)
    for (int b = 0; b < nd; b++)
      for (int c = 0; c < nc; c++)
        for (int d = 0; d < ns; d++)
          for (size_t e = 0; e < dec; e++) {
            fa_problem p = *q;
            if (o->ndtypes) p.dtype = o->dtypes[a];
            if (o->ndims) p.dim = o->dims[b];
            if (o->causal_both) p.causal = c;
            if (o->nseqs > 1) p.seq_q = p.seq_k = o->seqs[d];
            p.kv_group = list_at(lg, (int)(e / ((size_t)lp.n * bk)));
            p.page = list_at(lp, (int)(e / bk % lp.n));
            if (o->nwl_keys) {
              p.batch = o->wl_keys[e % bk].batch, p.seq_k = o->wl_keys[e % bk].seq_k;
            } else {
              p.batch = list_at(lb, (int)(e % bk / lk.n));
              p.seq_k = list_at(lk, (int)(e % lk.n));
            }
            if (o->nseqs > 1) p.seq_k = o->seqs[d];
            k[m++] = p;
          }
  *keys = k, *n = m;
  if (o->shard_n && shard(k, n, o->shard_i - 1, o->shard_n) != 0) {
    free(k);
    return -1;
  }
  return 0;
}
