/*
** model.c
** The SM simulation of model.h: warps, four schedulers, pipes,
** scoreboards, named barriers, cp.async and wgmma groups, mbarrier rings
** and the SM's path to L2.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

const char *const model_phase_names[MPH_N] = {"other", "copy", "S", "softmax", "P V", "wait"};

#define NSCHED 4
#define NSB 6
#define NBAR 16      /* named barriers 0-15 */
#define PINGPONG_BAR 8 /* named barriers in registers are mapped to 8 + the pair x the
                          groups + the group (model_sass.c's turn_pairs), */
#define GROUP_BAR 12   /* or, of a warpgroup's own warps alone, to 12 + the group */
#define QDEPTH 16    /* pending cp.async and wgmma groups a warp can hold */
#define HGQ 64       /* HGMMA in flight per warp */
/* How far L2's atomic units may fall behind a warp's adds before the next
** add stalls, in L2 latencies: fitted with RED_LINE_BYTES (model_sass.c)
** to an H200's backward pass; shallower queues overcharge FlashAttention-2's
** bursts of adds, deeper ones undercharge tcbwd's. */
#define RED_QUEUE 8
#define STUCK 200000.0 /* clocks without an issue that mean no warp can go on (a
                       ** copy lands within thousands) */

typedef struct warp {
  const model_role *r;
  int cta, role, group, sched, track;
  int produces;                 /* its loop fills rings (has an EMPTY_WAIT) */
  int pc, iter, done;
  double next;                  /* earliest issue: the last instruction's stall */
  double sb[NSB];               /* when each scoreboard clears */
  /* wgmma: the k-th HGMMA's tensor end in hg_end[k % HGQ] (-1 until the
  ** warpgroup's four warps have all issued it); the last HGMMA of each
  ** closed group not yet known done, in hg */
  int hg_seq, hg[QDEPTH], nhg;
  double hg_end[HGQ];
  /* the first warp of a warpgroup: how many of its warps issued the k-th
  ** HGMMA, and when the last of them did */
  int col_n[HGQ];
  double col_at[HGQ];
  int group_first;              /* index of the first warp of its group */
  double cp_open, cp[QDEPTH];   /* cp.async: the same */
  int ncp;
  int bar;                      /* the named barrier it waits in, -1 none */
  int waited[MODEL_MAX_RINGS];  /* fills of each ring it waited for */
  double blocked_since;         /* -1: not blocked on a wait */
} warp;

typedef struct ring {
  int fills, cap;               /* fills the producer has begun; room for */
  double *done;                 /* per fill: when its last byte lands */
  char *closed;                 /* the producer has moved past it */
  int *released;                /* consumer warps that freed it */
} ring;

typedef struct cta {
  int bar_count[NBAR], bar_need[NBAR];
  ring ring[MODEL_MAX_RINGS];
} cta;

typedef struct sim {
  const model_kernel *k;
  const model_sm *sm;
  warp *w;
  int nw, blocks, ctas, consumers, running_warps, trace;
  cta *c;
  double now, pipe_free[NSCHED][MP_NPIPES], mio_free, l2_free;
  double red_free;              /* when L2's atomic units have done the SM's adds so far */
  int last[NSCHED];
  int oom;                      /* a span or a fill could not be recorded */
  model_run *out;
} sim;

static int add_span(model_run *r, const warp *w, int tensor, int phase, double from, double to);

/* A traced warp's asynchronous work, for the timeline: its wgmma on the
** tensor pipe, its TMA copies in flight. */
static int async_span(sim *s, const warp *v, int phase, double from, double to) {
  if (!s->trace || !v->track || v->iter != s->blocks / 2 / (v->r->per_iter > 0 ? v->r->per_iter : 1))
    return 0;
  return add_span(s->out, v, 1, phase, from, to);
}

static int add_span(model_run *r, const warp *w, int tensor, int phase, double from, double to) {
  if (to <= from) return 0;
  if (r->nspans) {  /* merge with the warp's last span of the same phase */
    model_trace_span *p = &r->spans[r->nspans - 1];
    if (p->role == w->role && p->group == w->group && p->tensor == tensor && p->phase == phase &&
        from - p->to < 1) {
      p->to = to;
      return 0;
    }
  }
  if (r->nspans == r->capspans) {
    int c = r->capspans ? r->capspans * 2 : 1024;
    model_trace_span *v = realloc(r->spans, (size_t)c * sizeof *v);
    if (!v) return -1;
    r->spans = v, r->capspans = c;
  }
  r->spans[r->nspans++] = (model_trace_span){w->role, w->group, tensor, phase, from, to};
  return 0;
}

/* A copy of `bytes` from L2 issued now: when it lands. The SM's path
** carries one copy's bytes after another at its share of L2 bandwidth. */
static double copy_lands(sim *s, double bytes) {
  double start = s->now > s->l2_free ? s->now : s->l2_free;
  double t = s->sm->l2_bytes_clk > 0 ? bytes / s->sm->l2_bytes_clk : 0;
  s->l2_free = start + t;
  s->out->l2_busy += t;
  return s->l2_free + s->sm->l2_latency;
}

/* wgmma groups not yet done: a group is done a latency after its last
** HGMMA's tensor work ends, unknown until its warpgroup issued it. */
static int hg_pending(warp *w, double now, double latency) {
  int k = 0;
  for (int i = 0; i < w->nhg; i++) {
    double end = w->hg_end[w->hg[i] % HGQ];
    if (end < 0 || end + latency > now) w->hg[k++] = w->hg[i];
  }
  w->nhg = k;
  return k;
}

static int pending(const double *q, int n, double now) {
  int p = 0;
  for (int i = 0; i < n; i++) p += q[i] > now;
  return p;
}

/* Drops the groups that are done, to keep room. */
static void compact(double *q, int *n, double now) {
  int k = 0;
  for (int i = 0; i < *n; i++)
    if (q[i] > now) q[k++] = q[i];
  *n = k;
}

static int bar_id(const warp *w, const model_insn *in, int arrive) {
  if (in->arg >= 0) return in->arg % NBAR;
  if (in->arg2 > 0 && in->arg2 == w->r->warps) return (GROUP_BAR + w->group) % NBAR;
  int g = w->r->groups > 0 ? w->r->groups : 1, pair = -1 - in->arg;
  return PINGPONG_BAR + pair * g + (arrive ? (w->group + 1) % g : w->group);
}

static int bar_need(const sim *s, const model_insn *in) {
  return in->arg2 > 0 ? in->arg2 : s->running_warps;
}

/* Whether what the instruction waits for has happened (not its pipe). */
static int sync_ready(const sim *s, const warp *w, const model_insn *in) {
  const cta *c = &s->c[w->cta];
  const ring *g = in->arg >= 0 && in->arg < MODEL_MAX_RINGS ? &c->ring[in->arg] : NULL;
  switch (in->kind) {
  case MK_HGMMA_WAIT: return hg_pending((warp *)w, s->now, s->sm->hgmma_latency) <= in->arg;
  case MK_CP_WAIT: return pending(w->cp, w->ncp, s->now) <= in->arg;
  /* adds queued between the SM and L2's atomic units: at most RED_QUEUE
  ** latencies' worth of their work */
  case MK_RED: return s->red_free <= s->now + RED_QUEUE * s->sm->l2_latency;
  case MK_FULL_WAIT: {
    int j = w->waited[in->arg];
    return g && j < g->fills && g->closed[j] && g->done[j] <= s->now;
  }
  case MK_EMPTY_WAIT: {
    int j = g ? g->fills : 0;
    return g && (j < s->k->stages || g->released[j - s->k->stages] >= s->consumers);
  }
  default: return 1;
  }
}

static int can_issue(const sim *s, const warp *w, int *on_sync) {
  *on_sync = 0;
  if (w->done || w->bar >= 0 || s->now < w->next) return 0;
  const model_insn *in = &w->r->loop[w->pc];
  for (int b = 0; b < NSB; b++)
    if ((in->wait >> b & 1) && w->sb[b] > s->now) return 0;
  if (!sync_ready(s, w, in)) return *on_sync = 1, 0;
  if (in->pipe == MP_MIO) return s->mio_free <= s->now;
  if (in->pipe != MP_NONE && in->kind != MK_HGMMA) return s->pipe_free[w->sched][in->pipe] <= s->now;
  return 1;
}

/* The producer moved past its fills of ring r: they may be waited for. */
static void close_fills(ring *g) {
  for (int j = 0; j < g->fills; j++) g->closed[j] = 1;
}

/* Whether the TMA at the warp's pc is the last of its fill of ring r: no
** other of that ring comes before the producer's next wait. Its fill then
** lacks only bytes in flight, which the consumers' wait sees: it need not
** wait for the producer to pass its next wait too, which can hang on those
** consumers (a stage they free only after using this fill). */
static int last_copy_of_fill(const warp *w, int r) {
  for (int k = 1; k < w->r->n; k++) {
    const model_insn *x = &w->r->loop[(w->pc + k) % w->r->n];
    if (x->kind == MK_EMPTY_WAIT) return 1;
    if (x->kind == MK_TMA && x->arg == r) return 0;
  }
  return 1;
}

static void release_bar(sim *s, int cta_i, int id) {
  cta *c = &s->c[cta_i];
  c->bar_count[id] = 0;
  for (int i = 0; i < s->nw; i++)
    if (s->w[i].cta == cta_i && s->w[i].bar == id) {
      warp *v = &s->w[i];
      v->bar = -1;
      if (v->next < s->now + 1) v->next = s->now + 1;
    }
}

static void arrive_bar(sim *s, const warp *w, int id, int need) {
  cta *c = &s->c[w->cta];
  c->bar_need[id] = need;
  if (++c->bar_count[id] >= need) release_bar(s, w->cta, id);
}

/* Twice the room: a producer whose waits favour one ring fills it more
** than once per block (a loop the address keys mapped unevenly). */
static int ring_grow(ring *g) {
  int n = g->cap * 2;
  double *done = realloc(g->done, (size_t)n * sizeof *done);
  if (done) g->done = done;
  char *closed = realloc(g->closed, (size_t)n);
  if (closed) g->closed = closed;
  int *released = realloc(g->released, (size_t)n * sizeof *released);
  if (released) g->released = released;
  if (!done || !closed || !released) return -1;
  memset(closed + g->cap, 0, (size_t)(n - g->cap));
  memset(released + g->cap, 0, (size_t)(n - g->cap) * sizeof *released);
  g->cap = n;
  return 0;
}

static void effects(sim *s, warp *w, const model_insn *in) {
  cta *c = &s->c[w->cta];
  ring *g = in->arg >= 0 && in->arg < MODEL_MAX_RINGS ? &c->ring[in->arg] : NULL;
  double end;
  switch (in->kind) {
  case MK_HGMMA: {
    /* wgmma is a warpgroup's instruction: the tensor cores of the four
    ** schedulers start their quarters once all four warps issued it */
    int k = w->hg_seq++ % HGQ;
    warp *lead = &s->w[w->group_first];
    w->hg_end[k] = -1;
    if (s->now > lead->col_at[k] || lead->col_n[k] == 0) lead->col_at[k] = s->now;
    if (++lead->col_n[k] == w->r->warps) {
      for (int i = 0; i < w->r->warps; i++) {
        warp *v = &s->w[w->group_first + i];
        double *tf = &s->pipe_free[v->sched][MP_TENSOR];
        double start = lead->col_at[k] > *tf ? lead->col_at[k] : *tf;
        *tf = start + in->occupy;
        v->hg_end[k] = *tf;
        if (async_span(s, v, in->phase, start, *tf)) s->oom = 1;
      }
      lead->col_n[k] = 0;
    }
    if (in->arg && w->nhg < QDEPTH) w->hg[w->nhg++] = w->hg_seq - 1;
    break;
  }
  case MK_CP_ASYNC:
    end = copy_lands(s, in->bytes);
    if (end > w->cp_open) w->cp_open = end;
    break;
  case MK_CP_COMMIT:
    compact(w->cp, &w->ncp, s->now);
    if (w->ncp < QDEPTH) w->cp[w->ncp++] = w->cp_open > s->now ? w->cp_open : s->now;
    w->cp_open = 0;
    break;
  case MK_RED: {
    double start = s->now > s->red_free ? s->now : s->red_free;
    double t = s->sm->l2_bytes_clk > 0 ? in->bytes / s->sm->l2_bytes_clk : 0;
    s->red_free = start + t;
    s->out->red_busy += t;
    break;
  }
  case MK_LOAD_GLOBAL:
    end = copy_lands(s, in->bytes);
    if (in->wbar < NSB && end > w->sb[in->wbar]) w->sb[in->wbar] = end;
    break;
  case MK_BAR_SYNC: {
    int id = bar_id(w, in, 0);
    w->bar = id;
    arrive_bar(s, w, id, bar_need(s, in));
    if (w->bar >= 0) w->blocked_since = s->now;  /* it waits from here */
    break;
  }
  case MK_BAR_ARV: arrive_bar(s, w, bar_id(w, in, 1), bar_need(s, in)); break;
  case MK_FULL_WAIT: w->waited[in->arg]++; break;
  case MK_EMPTY_WAIT:  /* the producer has moved past its earlier fills, of every ring */
    if (g->fills == g->cap && ring_grow(g)) {
      s->oom = 1;
      break;
    }
    for (int r = 0; r < s->k->nrings && r < MODEL_MAX_RINGS; r++) close_fills(&c->ring[r]);
    g->done[g->fills] = s->now;
    g->fills++;
    break;
  case MK_TMA:
    if (g && g->fills > 0) {
      end = copy_lands(s, in->bytes);
      if (async_span(s, w, MPH_COPY, s->now, end)) s->oom = 1;
      if (end > g->done[g->fills - 1]) g->done[g->fills - 1] = end;
      if (last_copy_of_fill(w, in->arg)) close_fills(g);
    }
    break;
  case MK_RELEASE: {  /* the fill it last waited for, or (arg2) the one before */
    int j = g ? w->waited[in->arg] - 1 - in->arg2 : -1;
    if (j >= 0) g->released[j]++;
    break;
  }
  default: break;
  }
}

static int issue(sim *s, warp *w) {
  const model_insn *in = &w->r->loop[w->pc];
  model_run *o = s->out;
  if (w->track && s->trace && w->iter == s->blocks / 2 / (w->r->per_iter > 0 ? w->r->per_iter : 1)) {
    if (w->blocked_since >= 0 && add_span(o, w, 0, MPH_SYNC, w->blocked_since, s->now)) return -1;
    if (add_span(o, w, 0, in->phase, s->now, s->now + (in->stall ? in->stall : 1))) return -1;
  }
  w->blocked_since = -1;
  if (in->pipe == MP_MIO) s->mio_free = s->now + in->occupy, o->busy[MP_MIO] += in->occupy;
  else if (in->pipe != MP_NONE && in->kind != MK_HGMMA)
    s->pipe_free[w->sched][in->pipe] = s->now + in->occupy, o->busy[in->pipe] += in->occupy;
  else if (in->kind == MK_HGMMA) o->busy[MP_TENSOR] += in->occupy;
  if (in->wbar < NSB && in->kind != MK_LOAD_GLOBAL && s->now + in->latency > w->sb[in->wbar])
    w->sb[in->wbar] = s->now + in->latency;
  if (in->rbar < NSB && s->now + 2 > w->sb[in->rbar]) w->sb[in->rbar] = s->now + 2;
  effects(s, w, in);
  o->issued++;
  w->next = s->now + (in->stall ? in->stall : 1);
  if (++w->pc == w->r->n) {
    w->pc = 0;
    if (w->produces)  /* its fills of this iteration are all issued */
      for (int r = 0; r < s->k->nrings && r < MODEL_MAX_RINGS; r++) close_fills(&s->c[w->cta].ring[r]);
    int per = w->r->per_iter > 0 ? w->r->per_iter : 1;
    if (++w->iter * per >= s->blocks) w->done = 1;
  }
  return 0;
}

static int ring_alloc(ring *g, int n) {
  g->cap = n;
  g->done = calloc((size_t)n, sizeof *g->done);
  g->closed = calloc((size_t)n, 1);
  g->released = calloc((size_t)n, sizeof *g->released);
  return g->done && g->closed && g->released ? 0 : -1;
}

static void sim_free(sim *s) {
  for (int c = 0; s->c && c < s->ctas; c++)
    for (int r = 0; r < MODEL_MAX_RINGS; r++) {
      free(s->c[c].ring[r].done);
      free(s->c[c].ring[r].closed);
      free(s->c[c].ring[r].released);
    }
  free(s->c);
  free(s->w);
}

static int sim_init(sim *s, const model_kernel *k, int ctas, int blocks) {
  int per = 0;
  for (int r = 0; r < k->nroles; r++) {
    per += k->role[r].groups * k->role[r].warps;
    for (int i = 0; i < k->role[r].n; i++)
      if (k->role[r].loop[i].kind == MK_RELEASE) {
        s->consumers = k->role[r].groups * k->role[r].warps;
        break;
      }
  }
  s->running_warps = per;
  s->nw = per * ctas;
  s->w = calloc((size_t)s->nw, sizeof *s->w);
  s->c = calloc((size_t)ctas, sizeof *s->c);
  if (!s->w || !s->c) return -1;
  int slots = k->warps_per_cta > per ? k->warps_per_cta : per;
  const int turn_groups = k->role[k->nroles - 1].groups > 0 ? k->role[k->nroles - 1].groups : 1;
  int i = 0;
  /* a role's warps take the slots from its slot0 (FlashAttention-3's
  ** producer is warp 0 of warpgroup 0, its consumers warpgroups 1..n) */
  for (int c = 0; c < ctas; c++) {
    for (int r = 0; r < k->nrings && r < MODEL_MAX_RINGS; r++)
      if (ring_alloc(&s->c[c].ring[r], blocks + k->stages + 4)) return -1;
    for (int t = 0; t < k->pingpong_pairs; t++)  /* a warpgroup's arrive before the loop */
      s->c[c].bar_count[PINGPONG_BAR + t * turn_groups] = 4;
    for (int r = 0; r < k->nroles; r++)
      for (int g = 0; g < k->role[r].groups; g++)
        for (int x = 0; x < k->role[r].warps; x++, i++) {
          int slot = k->role[r].slot0 + g * (k->role[r].stride ? k->role[r].stride : k->role[r].warps) + x;
          warp *w = &s->w[i];
          w->r = &k->role[r], w->cta = c, w->role = r, w->group = g;
          w->group_first = i - x;
          /* warp slot i of the SM sits on scheduler i mod 4 */
          w->sched = (c * slots + slot) % NSCHED;
          w->track = c == 0 && x == 0;
          w->bar = -1, w->blocked_since = -1;
          w->done = k->role[r].n == 0;
          for (int j = 0; j < k->role[r].n; j++) w->produces |= k->role[r].loop[j].kind == MK_EMPTY_WAIT;
        }
  }
  return 0;
}

static void earliest(double *t, double x, double now) {
  if (x > now && x < *t) *t = x;
}

/* When something a blocked warp may wait for happens next, after now: a
** stall ending, a scoreboard, wgmma or cp.async group or fill landing, a
** pipe freed. INFINITY when nothing is under way: no warp can go on. */
static double next_event(const sim *s) {
  double t = INFINITY, now = s->now;
  for (int i = 0; i < s->nw; i++) {
    const warp *w = &s->w[i];
    if (w->done) continue;
    earliest(&t, w->next, now);
    for (int b = 0; b < NSB; b++) earliest(&t, w->sb[b], now);
    for (int g = 0; g < w->nhg; g++)
      if (w->hg_end[w->hg[g] % HGQ] >= 0)
        earliest(&t, w->hg_end[w->hg[g] % HGQ] + s->sm->hgmma_latency, now);
    for (int g = 0; g < w->ncp; g++) earliest(&t, w->cp[g], now);
  }
  for (int c = 0; c < s->ctas; c++)
    for (int r = 0; r < s->k->nrings && r < MODEL_MAX_RINGS; r++)
      for (int j = 0; j < s->c[c].ring[r].fills; j++) earliest(&t, s->c[c].ring[r].done[j], now);
  for (int q = 0; q < NSCHED; q++)
    for (int p = 0; p < MP_NPIPES; p++) earliest(&t, s->pipe_free[q][p], now);
  earliest(&t, s->mio_free, now);
  earliest(&t, s->red_free - RED_QUEUE * s->sm->l2_latency, now);  /* room for the next add */
  return t;
}

int model_simulate(const model_kernel *k, const model_sm *sm, int ctas, int blocks, int trace,
                   model_run *out) {
  memset(out, 0, sizeof *out);
  if (ctas < 1 || blocks < 1 || k->nroles < 1) return 0;
  sim s = {.k = k, .sm = sm, .ctas = ctas, .blocks = blocks, .trace = trace, .out = out};
  if (sim_init(&s, k, ctas, blocks)) return sim_free(&s), -1;
  double last_issue = 0;
  int left = 0;
  for (int i = 0; i < s.nw; i++) left += !s.w[i].done;
  while (left > 0) {
    for (int q = 0; q < NSCHED; q++) {
      int pick = -1;
      for (int n = 0; n <= s.nw && pick < 0; n++) {
        /* greedy: the warp issued last first, then the oldest */
        int i = n == 0 ? s.last[q] : n - 1;
        if (i < 0 || i >= s.nw || s.w[i].sched != q || (n > 0 && i == s.last[q])) continue;
        int on_sync;
        if (can_issue(&s, &s.w[i], &on_sync)) pick = i;
        else if (on_sync && s.w[i].blocked_since < 0) s.w[i].blocked_since = s.now;
      }
      if (pick < 0) continue;
      warp *w = &s.w[pick];
      if (w->track && w->group == 0 && w->blocked_since >= 0)
        out->wait[w->role] += s.now - w->blocked_since;
      if (issue(&s, w) || s.oom) return sim_free(&s), -1;
      left -= w->done;
      s.last[q] = pick;
      last_issue = s.now;
    }
    if (last_issue == s.now || left == 0) {
      s.now += 1;
      continue;
    }
    /* no warp could issue: on to the next thing that happens */
    double t = next_event(&s);
    if (isinf(t) || t - last_issue > STUCK) {
      out->deadlock = 1;
      break;
    }
    s.now = ceil(t) > s.now + 1 ? ceil(t) : s.now + 1;
  }
  out->cycles = last_issue + 1;
  if (s.red_free > out->cycles) out->cycles = s.red_free;  /* the last adds are done */
  for (int i = 0; i < s.nw; i++) {  /* the last results land */
    for (int b = 0; b < NSB; b++)
      if (s.w[i].sb[b] > out->cycles) out->cycles = s.w[i].sb[b];
    for (int g = 0; g < s.w[i].nhg; g++) {
      double end = s.w[i].hg_end[s.w[i].hg[g] % HGQ] + sm->hgmma_latency;
      if (end > out->cycles) out->cycles = end;
    }
  }
  sim_free(&s);
  return 0;
}

int model_steady(const model_kernel *k, const model_sm *sm, int ctas, int trace,
                 model_run *lo, model_run *hi) {
  enum { LO = 4, HI = 12 };
  if (model_simulate(k, sm, ctas, LO, 0, lo) || model_simulate(k, sm, ctas, HI, trace, hi))
    return -1;
  double d = (hi->cycles - lo->cycles) / (HI - LO);
  lo->per_block = hi->per_block = d > 0 ? d : hi->cycles / HI;
  return 0;
}

void model_run_free(model_run *r) {
  free(r->spans);
  r->spans = NULL;
  r->nspans = r->capspans = 0;
}
