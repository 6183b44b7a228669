/*
** model.h
** The timing model: an event-driven simulation of one SM running a
** kernel's warps instruction by instruction, and of the waves of CTAs
** across the GPU's SMs.
**
** A kernel is given as roles (the warps that run the same code: the
** consumers and the producer of a warp-specialized kernel, or every warp
** of a plain one), each with one iteration of its main loop as a list of
** model_insn (model_sass.c builds them from SASS). Every resident CTA's
** warps run their loop `blocks` times, one K/V block an iteration. Per
** clock, each of the SM's four schedulers issues at most one instruction
** of one of its warps (greedy: the warp it issued last, while it can,
** else the oldest that can). An instruction can issue when:
**  - the warp's previous instruction's stall count has passed (the
**    latency of fixed-latency results, as ptxas encoded it);
**  - the scoreboards it waits on are clear (variable-latency results);
**  - its pipe on that scheduler is free (FMA, ALU, MUFU, tensor), or the
**    SM's shared-memory data path is (MIO: LDS, LDSM, STS, SHFL, LDGSTS);
**  - what it waits for has happened: a named barrier's warps all arrived,
**    cp.async groups done (DEPBAR), wgmma groups done (WARPGROUP.DEPBAR),
**    an mbarrier stage filled or emptied (SYNCS try-wait).
** Copies (LDGSTS, UTMALDG, LDG) share the SM's path to L2: each takes its
** bytes at the SM's share of L2 bandwidth, and lands a latency later.
** Global atomic adds (RED) queue for L2's atomic units apart from the
** copies: a warp's next add waits while the SM's adds are more than a few
** L2 latencies behind (model.c's RED_QUEUE); nothing waits for an add to
** be done.
**
** What is simplified, and said where it is done: branches inside the
** loop (every instruction of the traced iteration runs, predicated ones
** too), register bank conflicts and operand reuse, the yield hint, the
** L1 and L2 hit rates (every copy is served by L2; DRAM is a roofline over
** the whole kernel, model_kernel_time), the instruction cache.
*/
#ifndef MODEL_H
#define MODEL_H

/* What an instruction waits for, or does, beyond issue and its pipe. */
typedef enum model_kind {
  MK_PLAIN,
  MK_HGMMA,        /* asynchronous wgmma on the tensor pipe; arg 1: closes a group (gsb0) */
  MK_HGMMA_WAIT,   /* WARPGROUP.DEPBAR.LE gsb0, arg: at most arg groups pending */
  MK_BAR_SYNC,     /* named barrier arg (-1: the role's own, see model.c), arg2 warps */
  MK_BAR_ARV,      /* arrive at named barrier arg (-1: the next group's), arg2 warps */
  MK_CP_ASYNC,     /* LDGSTS: bytes from L2 into shared memory, in the open group */
  MK_CP_COMMIT,    /* LDGDEPBAR: closes the open cp.async group */
  MK_CP_WAIT,      /* DEPBAR.LE SB0, arg: at most arg groups pending */
  MK_LOAD_GLOBAL,  /* LDG: its scoreboard clears after L2's latency */
  MK_FULL_WAIT,    /* mbarrier try-wait: the next fill of ring arg has landed */
  MK_EMPTY_WAIT,   /* the producer's try-wait: the stage of its next fill of ring arg is free */
  MK_RELEASE,      /* a consumer's arrive: frees the stage of its last fill of ring arg
                   ** (arg2 1: of the fill before it, a software-pipelined P V's) */
  MK_TMA,          /* UTMALDG: bytes from L2 into the producer's current fill of ring arg */
  MK_RED,          /* RED: an atomic add done by L2's atomic units, `bytes` of their time
                   ** at the SM's L2 share; it issues while they are at most RED_QUEUE
                   ** L2 latencies behind, and nothing waits for it */
  MK_NKINDS
} model_kind;

typedef enum model_pipe {
  MP_NONE, MP_FMA, MP_ALU, MP_MUFU, MP_TENSOR, MP_MIO, MP_NPIPES
} model_pipe;

typedef struct model_insn {
  unsigned char kind, pipe;
  unsigned char stall;     /* clocks before the warp's next instruction (at least 1) */
  unsigned char wbar, rbar;/* scoreboard set until the result is written / operands read; 7 none */
  unsigned char wait;      /* scoreboards to wait for, a mask */
  unsigned char phase;     /* what it belongs to, for the timeline: MPH_* */
  int arg, arg2;
  double occupy;           /* clocks it holds its pipe (tensor: on this scheduler's tensor core) */
  double latency;          /* clocks until wbar clears (variable-latency results) */
  double bytes;            /* copies: bytes from L2 */
} model_insn;

/* Phases of an iteration, for the timeline. */
enum { MPH_OTHER, MPH_COPY, MPH_S, MPH_SOFTMAX, MPH_PV, MPH_SYNC, MPH_N };
extern const char *const model_phase_names[MPH_N];

typedef struct model_role {
  const char *name;        /* "consumer", "producer", "warp" */
  int groups;              /* warpgroups (consumers of a warp-specialized kernel) or 1 */
  int warps;               /* per group */
  const model_insn *loop;
  int n;
  int per_iter;            /* K/V blocks one iteration of its loop handles (an unrolled loop: 2) */
  int slot0, stride;       /* warp slot of its first warp in the CTA; slots between groups (0: warps) */
} model_role;

#define MODEL_MAX_ROLES 4
#define MODEL_MAX_RINGS 4
#define MODEL_MAX_TURNS 2

typedef struct model_kernel {
  model_role role[MODEL_MAX_ROLES];
  int nroles;
  int warps_per_cta;       /* launched, idle ones included (they hold a scheduler slot) */
  int nrings, stages;      /* mbarrier rings (K, V) and their stages */
  int pingpong_pairs;      /* turns between warpgroups by named barriers in registers
                              (model_insn arg -1 - pair); the first group starts each */
} model_kernel;

/* The SM's machine, from model_gpu (model_sass.h). */
typedef struct model_sm {
  double l2_bytes_clk;     /* the SM's share of L2 bandwidth */
  double l2_latency;       /* clocks from a copy's issue to its landing, unloaded */
  double hgmma_latency;    /* clocks from a wgmma group's last tensor clock to its wait's release */
} model_sm;

/* A span of the timeline: what a role's group issued (tensor 0) or its
** wgmma work on the tensor pipe (tensor 1). */
typedef struct model_trace_span { int role, group, tensor, phase; double from, to; } model_trace_span;

typedef struct model_run {
  double cycles;           /* until every warp finished */
  double per_block;        /* steady clocks per K/V block (model_steady) */
  double busy[MP_NPIPES];  /* clocks each pipe was busy, summed over schedulers (MIO: SM-wide) */
  double issued;           /* instructions issued */
  double l2_busy;          /* clocks the SM's L2 path carried bytes */
  double red_busy;         /* clocks L2's atomic units worked on the SM's adds */
  double wait[MODEL_MAX_ROLES];  /* clocks the role's first warp spent blocked on a wait */
  int deadlock;            /* 1: some warp could never issue again */
  model_trace_span *spans; /* the timeline when asked for (model_steady's `trace`) */
  int nspans, capspans;
} model_run;

/* Runs `ctas` resident CTAs of k for `blocks` iterations. 0, or -1 when
** out of memory. */
int model_simulate(const model_kernel *k, const model_sm *sm, int ctas, int blocks,
                   int trace, model_run *out);

/* The steady state: the clocks per K/V block from two runs (lo and hi
** blocks), the first run's cycles as the cost of `lo` blocks including
** the pipeline's fill, utilizations from the longer run. With trace, the
** spans of one steady iteration (the longer run's middle). */
int model_steady(const model_kernel *k, const model_sm *sm, int ctas, int trace,
                 model_run *lo, model_run *hi);

void model_run_free(model_run *r);

#endif
