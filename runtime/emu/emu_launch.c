/*
** emu_launch.c
** Running a launch on the CPU. The grid's CTAs are shared among OS threads;
** each OS thread (a worker) runs one CTA at a time, its threads as fibers.
** A fiber runs until it reaches a barrier or a warp collective, then
** yields to the worker's scheduler, which resumes the ready fibers in the
** chosen order. A barrier opens when all its threads have arrived at the
** same place; a thread that can never be joined is reported, not waited for.
**
** Schedules: forward and reverse run every ready fiber once per round in
** thread order or its reverse, so warps interleave at each collective;
** random shuffles that order every round; skew runs one warp at a time,
** in a seeded random order, up to its next __syncthreads (through its own
** warp collectives, its lanes in reverse), so a warp can be a whole phase
** ahead of the others between barriers, as on a GPU.
**
** Asynchronous work (cp.async, TMA, wgmma) completes, by the schedule,
** late (forward), early (reverse) or at random points (random, skew); the
** module does the work (prelude_emu_tc.h, prelude_emu_sm90.h) and the
** scheduler calls its progress hook at each yield. A thread that waits on
** an mbarrier is resumed when the phase it waits for completes, or when a
** TMA load that completes on that barrier is in flight (it lands it).
*/
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "emu.h"
#include "fiber.h"

/* Each fiber's stack is a span of FA_EMU_STACK_SPAN bytes aligned to its
** size (emu_abi.h): a guard page at the bottom, where an overflow faults
** instead of corrupting, the stack, where kernels keep their tiles, and at
** the top the pointer to the fiber's thread, by which the kernel finds it. */
#define GUARD_BYTES 4096u
#define TOP_BYTES 16u               /* the thread's pointer; the stack below stays 16-aligned */
#define MAX_THREADS 1024
#define MAX_SMEM (1u << 20)
#define SMEM_ALIGN 1024u            /* the swizzle patterns repeat every 1024 bytes */
/* Under the skew schedule a CTA's dynamic shared memory starts this far
** into the 1024-aligned window, at the 16 bytes CUDA promises and no more:
** a kernel that needs more alignment must make it, inside the size it
** declares. */
#define SMEM_SKEW 16u
#define NAMED_BARRIERS 16

enum { F_READY, F_WAIT, F_DONE };

typedef struct worker worker;

typedef struct emu_fiber {
  fa_emu_thread t;  /* first: the host finds the fiber from the thread */
  fiber ctx;
  worker *w;
  int state, kind, line;
} emu_fiber;

typedef struct launch {
  const emu_launch_args *a;
  const emu_launch_opts *o;
  unsigned long long ncta;
  atomic_ullong next;        /* next CTA to take */
  atomic_int failed;
  pthread_mutex_t mu;        /* guards msg and total */
  char msg[512];
  fa_emu_counters total;
} launch;

/* Where the CTA's dynamic shared memory starts in its window. */
static unsigned smem_skew(const launch *L) { return L->o->schedule == EMU_SKEW ? SMEM_SKEW : 0; }

struct worker {
  launch *L;
  emu_fiber *f;
  int n;                     /* threads per CTA */
  unsigned char *map;        /* fiber stacks with guard pages */
  size_t map_bytes;
  unsigned char *spans;      /* the first span, aligned to FA_EMU_STACK_SPAN, in map */
  unsigned char *smem;
  fa_emu_warp *warps;
  fa_emu_copy *copies;
  fa_emu_wgroup *wgroups;
  fa_emu_wgmma *wgmma;
  fa_emu_tma *bulk;
  fa_emu_cta cta;
  int *order;
  fiber home;                /* the scheduler's own context */
  fa_emu_counters ctr;
  unsigned bid[3];
  unsigned long long rng;
  int alive;                 /* fibers not yet done */
  int failed;
  int cta_arrived, cta_line;
  unsigned cta_opened;       /* __syncthreads opened so far in this CTA */
  int warp_arrived[MAX_THREADS / 32], warp_kind[MAX_THREADS / 32], warp_line[MAX_THREADS / 32];
  int group_arrived[MAX_THREADS / 128], group_line[MAX_THREADS / 128];
  int named_arrived[NAMED_BARRIERS], named_count[NAMED_BARRIERS];
  char msg[512];
};

static const char *const wait_names[] = {"__syncthreads", "__syncwarp", "a warp collective",
                                         "a warpgroup collective", "an mbarrier", "bar.sync",
                                         "bar.arrive"};

const char *emu_schedule_name(emu_schedule s) {
  return s == EMU_FORWARD ? "forward" : s == EMU_REVERSE ? "reverse"
       : s == EMU_RANDOM ? "random" : "skew";
}

int emu_schedule_parse(const char *s, emu_schedule *out) {
  static const emu_schedule all[] = {EMU_FORWARD, EMU_REVERSE, EMU_RANDOM, EMU_SKEW};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(s, emu_schedule_name(all[i]))) return *out = all[i], 0;
  return -1;
}

/* ---- Failing a CTA from inside a fiber ---- */

static void worker_fail(worker *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = 1;
  int n = snprintf(w->msg, sizeof w->msg, "%s: block (%u,%u,%u): ", w->L->a->entry,
                   w->bid[0], w->bid[1], w->bid[2]);
  if (n < 0 || (size_t)n >= sizeof w->msg) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->msg + n, sizeof w->msg - (size_t)n, fmt, ap);
  va_end(ap);
}

/* Leave this fiber for good: the scheduler sees w->failed and stops. Not
** declared _Noreturn: ASan would then unpoison "the" stack before the
** call, and this is a fiber's. */
static void fiber_abandon(emu_fiber *f) {
  fiber_exit(&f->ctx, &f->w->home);
  abort();  /* never resumed */
}

static void on_fault(fa_emu_thread *t, int kind, const void *addr, int bytes, int line) {
  emu_fiber *f = (emu_fiber *)t;
  static const char *const what[] = {
    "global access outside every buffer", "shared access outside the CTA's shared memory",
    "misaligned access", "too many cp.async copies in flight"};
  const char *w = kind >= 0 && kind <= FA_EMU_FAULT_ASYNC ? what[kind] : "fault";
  worker_fail(f->w, "thread %d: %s: %d bytes at %p, line %d", t->tid, w, bytes, addr, line);
  fiber_abandon(f);
}

static void on_fail(fa_emu_thread *t, const char *msg, int line) {
  emu_fiber *f = (emu_fiber *)t;
  worker_fail(f->w, "thread %d: %s, line %d", t->tid, msg, line);
  fiber_abandon(f);
}

/* ---- Barriers ---- */

static void release(worker *w, int lo, int hi) {
  for (int i = lo; i < hi; i++) w->f[i].state = F_READY;
}

static int group_size(const worker *w, int tid) {
  const int lo = tid & ~127;
  return w->n - lo < 128 ? w->n - lo : 128;
}

/* A warpgroup collective: every thread of the warpgroup at the same line. */
static void group_arrive(worker *w, emu_fiber *f, int line) {
  const int k = f->t.tid >> 7;
  if (w->group_arrived[k] && w->group_line[k] != line) {
    worker_fail(w, "divergent warpgroup: thread %d is at a warpgroup collective on line %d, "
                "others of its warpgroup on line %d", f->t.tid, line, w->group_line[k]);
    fiber_abandon(f);
  }
  w->group_line[k] = line;
  if (++w->group_arrived[k] == group_size(w, f->t.tid)) {
    w->group_arrived[k] = 0;
    release(w, k * 128, k * 128 + group_size(w, f->t.tid));
  }
}

/* bar.sync / bar.arrive id, count: count threads open barrier id. */
static void named_arrive(worker *w, emu_fiber *f, int kind) {
  const int id = (int)f->t.wait_arg, count = (int)f->t.wait_count;
  if (w->named_arrived[id] && w->named_count[id] != count) {
    worker_fail(w, "thread %d: %s %d, %d on line %d, while %d thread(s) wait there for %d",
                f->t.tid, wait_names[kind], id, count, f->line, w->named_arrived[id],
                w->named_count[id]);
    fiber_abandon(f);
  }
  w->named_count[id] = count;
  if (kind == FA_EMU_WAIT_ARRIVE) f->state = F_READY;
  if (++w->named_arrived[id] < count) return;
  w->named_arrived[id] = 0;
  for (int i = 0; i < w->n; i++)
    if (w->f[i].state == F_WAIT && w->f[i].kind == FA_EMU_WAIT_NAMED &&
        (int)w->f[i].t.wait_arg == id)
      w->f[i].state = F_READY;
}

static void on_wait(fa_emu_thread *t, int kind, int line) {
  emu_fiber *f = (emu_fiber *)t;
  worker *w = f->w;
  if (t->progress) t->progress(t, 0);
  f->state = F_WAIT, f->kind = kind, f->line = line;
  if (kind == FA_EMU_WAIT_MBAR) {
    /* Resumed by the scheduler (mbar_wake). */
  } else if (kind == FA_EMU_WAIT_GROUP) {
    group_arrive(w, f, line);
  } else if (kind == FA_EMU_WAIT_NAMED || kind == FA_EMU_WAIT_ARRIVE) {
    named_arrive(w, f, kind);
  } else if (kind == FA_EMU_WAIT_CTA) {
    if (w->cta_arrived && w->cta_line != line) {
      worker_fail(w, "divergent barrier: thread %d waits at __syncthreads on line %d, "
                  "others on line %d", t->tid, line, w->cta_line);
      fiber_abandon(f);
    }
    w->cta_line = line;
    if (++w->cta_arrived == w->n) {
      w->cta_arrived = 0;
      w->cta_opened++;
      w->ctr.barriers++;
      release(w, 0, w->n);
    }
  } else {
    const int k = t->warp;
    if (w->warp_arrived[k] && (w->warp_kind[k] != kind || w->warp_line[k] != line)) {
      worker_fail(w, "divergent warp: thread %d waits at %s on line %d, lanes of its warp "
                  "at %s on line %d", t->tid, wait_names[kind], line,
                  wait_names[w->warp_kind[k]], w->warp_line[k]);
      fiber_abandon(f);
    }
    w->warp_kind[k] = kind, w->warp_line[k] = line;
    if (++w->warp_arrived[k] == t->warp_size) {
      w->warp_arrived[k] = 0;
      if (kind == FA_EMU_WAIT_WARP) w->ctr.warp_syncs++;
      release(w, k * 32, k * 32 + t->warp_size);
    }
  }
  /* Even the last to arrive yields, so the schedule alone decides who runs
  ** first after a barrier. */
  fiber_switch(&f->ctx, &w->home);
}

static void fiber_main(void *arg) {
  fiber_started();
  emu_fiber *f = arg;
  worker *w = f->w;
  w->L->a->fn(*w->L->a->params);
  if (f->t.progress) f->t.progress(&f->t, 1);
  f->state = F_DONE;
  w->alive--;
  if (w->cta_arrived)
    worker_fail(w, "divergent barrier: thread %d exited while %d thread(s) wait at "
                "__syncthreads on line %d", f->t.tid, w->cta_arrived, w->cta_line);
  else if (w->warp_arrived[f->t.warp])
    worker_fail(w, "divergent warp: thread %d exited while %d lane(s) of its warp wait at "
                "%s on line %d", f->t.tid, w->warp_arrived[f->t.warp],
                wait_names[w->warp_kind[f->t.warp]], w->warp_line[f->t.warp]);
  else if (w->group_arrived[f->t.tid >> 7])
    worker_fail(w, "divergent warpgroup: thread %d exited while %d thread(s) of its warpgroup "
                "wait at a warpgroup collective on line %d", f->t.tid,
                w->group_arrived[f->t.tid >> 7], w->group_line[f->t.tid >> 7]);
  fiber_abandon(f);
}

/* Resume a thread waiting on an mbarrier when its phase has completed, or
** when a TMA load bound for that barrier is in flight: it lands it. */
static int mbar_wake(worker *w, emu_fiber *f) {
  const unsigned long long *bar = f->t.wait_obj;
  int go = FA_EMU_MBAR_PHASE(*bar) != f->t.wait_arg;
  for (int i = 0; !go && i < w->cta.nloads; i++) go = w->cta.loads[i].bar == bar;
  if (go) f->state = F_READY;
  return go;
}

static int runnable(worker *w, emu_fiber *f) {
  return f->state == F_READY ||
         (f->state == F_WAIT && f->kind == FA_EMU_WAIT_MBAR && mbar_wake(w, f));
}

/* ---- The scheduler ---- */

static unsigned long long rng_next(unsigned long long *s) {
  unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void shuffle(worker *w, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(&w->rng) % (unsigned long long)(i + 1));
    int x = w->order[i];
    w->order[i] = w->order[j], w->order[j] = x;
  }
}

static void make_order(worker *w) {
  const emu_schedule s = w->L->o->schedule;
  for (int i = 0; i < w->n; i++) w->order[i] = s == EMU_REVERSE ? w->n - 1 - i : i;
  if (s == EMU_RANDOM) shuffle(w, w->n);
}

/* What a waiting fiber waits at; an mbarrier with its state, so that a
** wrong parity or a missing expect_tx shows. */
static void describe_wait(const worker *w, const emu_fiber *a, char *out, size_t n) {
  if (a->state == F_WAIT && a->kind == FA_EMU_WAIT_MBAR) {
    const unsigned long long x = *(const unsigned long long *)a->t.wait_obj;
    const long long tx = (long long)(int)(unsigned)(x >> 24);
    snprintf(out, n, "the mbarrier at shared offset %td for the phase of parity %u (its "
             "phase has parity %u, %u arrival(s) and %lld transaction byte(s) pending%s)",
             (const unsigned char *)a->t.wait_obj - w->smem, a->t.wait_arg,
             FA_EMU_MBAR_PHASE(x), (unsigned)(x & 0xFFFu), tx,
             tx < 0 ? ": more bytes landed than expected, a missing expect_tx?" : "");
  } else if (a->state == F_WAIT && a->kind == FA_EMU_WAIT_NAMED) {
    snprintf(out, n, "bar.sync %u, %u (%d arrived)", a->t.wait_arg, a->t.wait_count,
             w->named_arrived[a->t.wait_arg]);
  } else {
    snprintf(out, n, "%s", wait_names[a->kind]);
  }
}

/* Do two fibers waiting at the same kind of place wait for the same thing? */
static int same_target(const emu_fiber *x, const emu_fiber *y) {
  if (x->state != F_WAIT || (x->kind != FA_EMU_WAIT_MBAR && x->kind != FA_EMU_WAIT_NAMED))
    return 1;
  return x->t.wait_obj == y->t.wait_obj && x->t.wait_arg == y->t.wait_arg;
}

/* Describe who is stuck where: runs of consecutive threads in one state. */
static void report_deadlock(worker *w) {
  char text[440];
  size_t used = 0;
  int groups = 0;
  for (int i = 0; i < w->n && groups < 4;) {
    const emu_fiber *a = &w->f[i];
    int j = i + 1;
    while (j < w->n && w->f[j].state == a->state && w->f[j].kind == a->kind &&
           w->f[j].line == a->line && same_target(&w->f[j], a))
      j++;
    char who[32];
    if (j - i > 1) snprintf(who, sizeof who, "threads %d-%d", i, j - 1);
    else snprintf(who, sizeof who, "thread %d", i);
    char what[256];
    describe_wait(w, a, what, sizeof what);
    int k = a->state == F_DONE
              ? snprintf(text + used, sizeof text - used, "%s%s exited", groups ? "; " : "", who)
              : snprintf(text + used, sizeof text - used, "%s%s wait%s at %s on line %d",
                         groups ? "; " : "", who, j - i > 1 ? "" : "s", what, a->line);
    if (k < 0 || (size_t)k >= sizeof text - used) break;
    used += (size_t)k, groups++, i = j;
  }
  worker_fail(w, "divergent barrier, no thread can go on: %s", used ? text : "?");
}

static void start_cta(worker *w, unsigned long long cta) {
  const launch *L = w->L;
  const emu_launch_args *a = L->a;
  w->bid[0] = (unsigned)(cta % a->grid[0]);
  w->bid[1] = (unsigned)(cta / a->grid[0] % a->grid[1]);
  w->bid[2] = (unsigned)(cta / a->grid[0] / a->grid[1]);
  memset(w->smem, L->o->smem_fill, smem_skew(L) + a->smem_bytes);
  memset(w->warps, 0, sizeof(fa_emu_warp) * (size_t)((w->n + 31) / 32));
  memset(w->wgroups, 0, sizeof(fa_emu_wgroup) * (size_t)((w->n + 127) / 128));
  memset(w->group_arrived, 0, sizeof w->group_arrived);
  memset(w->named_arrived, 0, sizeof w->named_arrived);
  w->cta.nloads = 0;
  w->cta.threads = w->n;
  memset(w->cta.maxnreg, 0, sizeof w->cta.maxnreg);
  const emu_schedule s = L->o->schedule;
  const int mode = s == EMU_FORWARD ? FA_EMU_ASYNC_LATE
                 : s == EMU_REVERSE ? FA_EMU_ASYNC_EARLY : FA_EMU_ASYNC_RANDOM;
  w->alive = w->n;
  w->cta_arrived = 0;
  w->cta_opened = 0;
  memset(w->warp_arrived, 0, sizeof w->warp_arrived);
  w->rng = L->o->seed ^ (cta * 0xD1B54A32D192ED03ull);
  for (int i = 0; i < w->n; i++) {
    emu_fiber *f = &w->f[i];
    fa_emu_thread *t = &f->t;
    memset(t, 0, sizeof *t);
    t->tid = i, t->lane = i & 31, t->warp = i >> 5;
    t->warp_size = w->n - (i & ~31) < 32 ? w->n - (i & ~31) : 32;
    t->bx = (int)w->bid[0], t->by = (int)w->bid[1], t->bz = (int)w->bid[2];
    t->gx = (int)a->grid[0];
    t->smem_window = w->smem;
    t->smem = w->smem + smem_skew(L), t->smem_end = t->smem + a->smem_bytes;
    t->ranges = a->ranges, t->nranges = a->nranges;
    t->ctr = &w->ctr;
    t->w = &w->warps[i >> 5];
    t->wait = on_wait, t->fault = on_fault;
    t->copies = w->copies + (size_t)i * FA_EMU_MAX_COPIES;
    t->fail = on_fail;
    t->async_mode = mode;
    t->rng = w->rng ^ ((unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull);
    t->wgroup = &w->wgroups[i >> 7];
    t->wg_size = group_size(w, i);
    t->wgmma = w->wgmma + (size_t)i * FA_EMU_MAX_WGMMA;
    t->bulk = w->bulk + (size_t)i * FA_EMU_MAX_BULK;
    t->cta = &w->cta;
    f->w = w;
    f->state = F_READY, f->kind = 0, f->line = 0;
    unsigned char *span = w->spans + (size_t)i * FA_EMU_STACK_SPAN;
    memcpy(span + FA_EMU_STACK_SPAN - sizeof t, &t, sizeof t);
    fiber_make(&f->ctx, span + GUARD_BYTES, FA_EMU_STACK_SPAN - GUARD_BYTES - TOP_BYTES,
               fiber_main, f);
  }
}

/* Run fiber f until it waits, exits or fails: -1 when the CTA failed. */
static int step(worker *w, emu_fiber *f) {
  fiber_switch(&w->home, &f->ctx);
  return w->failed ? -1 : 0;
}

/* One round of skew: each warp in turn, in a fresh random order, runs
** alone until none of its lanes is ready; the round ends early when a
** __syncthreads opens, so every phase between barriers gets its own order.
** Sets *ran when a fiber ran. */
static int skew_round(worker *w, int *ran) {
  const int nwarps = (w->n + 31) / 32;
  const unsigned opened = w->cta_opened;
  for (int k = 0; k < nwarps; k++) w->order[k] = k;
  shuffle(w, nwarps);
  for (int k = 0; k < nwarps && w->cta_opened == opened; k++) {
    const int lo = w->order[k] * 32, hi = lo + 32 < w->n ? lo + 32 : w->n;
    for (int again = 1; again && w->cta_opened == opened;) {
      again = 0;
      for (int i = hi - 1; i >= lo && w->cta_opened == opened; i--) {
        if (!runnable(w, &w->f[i])) continue;
        *ran = again = 1;
        if (step(w, &w->f[i]) != 0) return -1;
      }
    }
  }
  return 0;
}

static int run_cta(worker *w, unsigned long long cta) {
  start_cta(w, cta);
  if (w->L->o->schedule == EMU_SKEW)
    for (;;) {
      int ran = 0;
      if (skew_round(w, &ran) != 0) return -1;
      if (!w->alive) return 0;
      if (!ran) {
        report_deadlock(w);
        return -1;
      }
    }
  const int reshuffle = w->L->o->schedule == EMU_RANDOM;
  make_order(w);
  for (;;) {
    int ran = 0;
    for (int k = 0; k < w->n; k++) {
      emu_fiber *f = &w->f[w->order[k]];
      if (!runnable(w, f)) continue;
      ran = 1;
      if (step(w, f) != 0) return -1;
    }
    if (!w->alive) return 0;
    if (!ran) {
      report_deadlock(w);
      return -1;
    }
    if (reshuffle) make_order(w);
  }
}

/* ---- Workers ---- */

static void worker_free(worker *w) {
  if (w->map) munmap(w->map, w->map_bytes);
  free(w->f);
  free(w->smem);
  free(w->warps);
  free(w->copies);
  free(w->wgroups);
  free(w->wgmma);
  free(w->bulk);
  free(w->order);
  free(w->cta.loads);
}

static int worker_init(worker *w, launch *L) {
  memset(w, 0, sizeof *w);
  w->L = L;
  w->n = (int)L->a->threads;
  const size_t n = (size_t)w->n;
  w->map_bytes = (n + 1) * FA_EMU_STACK_SPAN;   /* one more, to align the first */
  void *map = mmap(NULL, w->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return -1;
  w->map = map;
  w->spans = w->map + (FA_EMU_STACK_SPAN - (uintptr_t)map % FA_EMU_STACK_SPAN) % FA_EMU_STACK_SPAN;
  for (size_t i = 0; i < n; i++)
    if (mprotect(w->spans + i * FA_EMU_STACK_SPAN, GUARD_BYTES, PROT_NONE) != 0)
      return -1;
  w->f = calloc(n, sizeof *w->f);
  w->smem = aligned_alloc(SMEM_ALIGN, (L->a->smem_bytes + SMEM_ALIGN - 1) / SMEM_ALIGN * SMEM_ALIGN
                                          + SMEM_ALIGN);   /* room for the skew */
  w->warps = calloc((n + 31) / 32, sizeof *w->warps);
  w->copies = calloc(n * FA_EMU_MAX_COPIES, sizeof *w->copies);
  w->wgroups = calloc((n + 127) / 128, sizeof *w->wgroups);
  w->wgmma = calloc(n * FA_EMU_MAX_WGMMA, sizeof *w->wgmma);
  w->bulk = calloc(n * FA_EMU_MAX_BULK, sizeof *w->bulk);
  w->order = calloc(n, sizeof *w->order);
  w->cta.loads = calloc(FA_EMU_MAX_TMA, sizeof *w->cta.loads);
  return w->f && w->smem && w->warps && w->copies && w->wgroups && w->wgmma && w->bulk &&
         w->order && w->cta.loads ? 0 : -1;
}

static void launch_fail(launch *L, const char *msg) {
  pthread_mutex_lock(&L->mu);
  if (!atomic_load(&L->failed)) snprintf(L->msg, sizeof L->msg, "%s", msg);
  atomic_store(&L->failed, 1);
  pthread_mutex_unlock(&L->mu);
}

static void add_counters(fa_emu_counters *to, const fa_emu_counters *from) {
  unsigned long long *t = (unsigned long long *)to;
  const unsigned long long *f = (const unsigned long long *)from;
  for (size_t i = 0; i < sizeof *to / sizeof *t; i++) t[i] += f[i];
}

/* The body of every OS thread of the launch, the caller's included. */
static void *work(void *arg) {
  launch *L = arg;
  worker w;
  if (worker_init(&w, L) != 0) {
    worker_free(&w);
    launch_fail(L, "out of memory for the emulated threads");
    return NULL;
  }
  unsigned long long cta;
  while (!atomic_load(&L->failed) && (cta = atomic_fetch_add(&L->next, 1)) < L->ncta) {
    if (run_cta(&w, cta) != 0) {
      launch_fail(L, w.msg);
      break;
    }
  }
  pthread_mutex_lock(&L->mu);
  add_counters(&L->total, &w.ctr);
  pthread_mutex_unlock(&L->mu);
  worker_free(&w);
  return NULL;
}

static int bad_args(const emu_launch_args *a, char *err, size_t errlen) {
  const char *why = NULL;
  if (!a->fn || !a->params) why = "no kernel";
  else if (a->threads < 1 || a->threads > MAX_THREADS) why = "threads per CTA must be 1 to 1024";
  else if (!a->grid[0] || !a->grid[1] || !a->grid[2]) why = "empty grid";
  else if (a->smem_bytes > MAX_SMEM) why = "more than 1 MiB of shared memory";
  if (why) snprintf(err, errlen, "%s: cannot launch: %s", a->entry ? a->entry : "?", why);
  return why != NULL;
}

int emu_launch(const emu_launch_args *a, const emu_launch_opts *o,
               fa_emu_counters *ctr, char *err, size_t errlen) {
  if (bad_args(a, err, errlen)) return -1;
  launch L;
  memset(&L, 0, sizeof L);
  L.a = a, L.o = o;
  L.ncta = (unsigned long long)a->grid[0] * a->grid[1] * a->grid[2];
  atomic_init(&L.next, 0);
  atomic_init(&L.failed, 0);
  if (pthread_mutex_init(&L.mu, NULL) != 0) {
    snprintf(err, errlen, "%s: cannot create a mutex", a->entry);
    return -1;
  }
  unsigned long long nthreads = o->threads > 1 ? (unsigned long long)o->threads : 1;
  if (nthreads > L.ncta) nthreads = L.ncta;
  pthread_t *tids = calloc(nthreads, sizeof *tids);
  size_t started = 0;
  for (unsigned long long i = 1; tids && i < nthreads; i++)
    if (pthread_create(&tids[started], NULL, work, &L) == 0) started++;
  work(&L);
  for (size_t i = 0; i < started; i++) pthread_join(tids[i], NULL);
  free(tids);
  pthread_mutex_destroy(&L.mu);
  if (atomic_load(&L.failed)) {
    snprintf(err, errlen, "%s", L.msg);
    return -1;
  }
  add_counters(ctr, &L.total);
  return 0;
}
