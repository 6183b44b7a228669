/*
** gen.h
** The generator: the search space and the templates, run by an embedded Lua
** interpreter. One gen_state holds one lua_State; use one per thread.
** Every function returns 0 on success, or FA_ENOMEM or FA_EINVAL (a config,
** name or problem the space refuses) with a message in gen_errmsg();
** gen_open's message is in err, and FA_EINTERNAL there means the
** templates themselves do not load.
*/
#ifndef GEN_H
#define GEN_H

#include <stddef.h>

#include "fa_problem.h"
#include "fa_status.h"

typedef struct gen_state gen_state;

typedef struct gen_target {
  char arch[16];     /* "sm_90" */
  int smem_bytes;    /* shared memory per block, opt-in maximum */
  int max_threads;   /* threads per block */
} gen_target;

/* A config as the templates describe it: the family and the family's axes,
** in their declared order, each with its value as text. Its canonical
** "k=v,..." text is family=<family> followed by the pairs. */
#define GEN_MAX_PAIRS 32
typedef struct gen_pair { char key[32], value[48]; } gen_pair;
typedef struct gen_config {
  char family[16];
  int n;
  gen_pair pair[GEN_MAX_PAIRS];
} gen_config;

/* The value of key, NULL when absent ("family" is no pair). */
const char *gen_config_get(const gen_config *c, const char *key);

/* The config as one flat JSON object {"family": "...", "dtype": "fp32",
** "dim": 64, ...}: integer values as numbers, the rest as JSON-escaped
** strings. 0, or -1 when n is too small. */
int gen_config_json(const gen_config *c, char *buf, size_t n);

/* One point of the search space. */
typedef struct gen_variant {
  char *name;    /* canonical, human-readable: <family>-f32-d64-m64n32w4-... */
  char *hash;    /* 12 hex digits */
  char *config;  /* canonical "family=<family>,dtype=fp32,dim=64,..." */
  gen_config cfg;  /* the same, parsed */
} gen_variant;

/* A TMA tensor map a kernel reads from fa_params.tmap[i] (the i-th of
** gen_kernel.tma): over Q, K, V, O or the backward pass's dO ('d') as rank 4
** {dim, seq, heads, batch}
** (K and V: heads / kv_group), or over V transposed in the first workspace
** (GEN_TMA_VT, 't': {workspace rows, dim_v, kv heads, batch}, the keys
** innermost, as a kernel's first launch wrote it), a box of {box[0]
** elements, box[1] rows, 1, 1} under a swizzle of 0, 32, 64 or 128 bytes.
** The host encodes it before every launch (attn_tmaps, runtime/attn_run.h). */
#define GEN_MAX_TMA 6
#define GEN_TMA_VT 't'
typedef struct gen_tma {
  char tensor;             /* 'q', 'k', 'v', 'o', 't' or 'd' (the backward pass's dO) */
  unsigned box[2];         /* inner elements, rows */
  int swizzle;
} gen_tma;

/* The embedded files (template_files.h) a backend pastes before a kernel's
** body, in order: the family's `preludes` for that backend. The names
** point into the embedded table and live as long as the program. */
#define GEN_MAX_PRELUDES 8
typedef struct gen_preludes {
  int n;
  const char *file[GEN_MAX_PRELUDES];
} gen_preludes;

/* One grid dimension as a function of the problem: n itself, the heads,
** the batch, or ceil(seq_q / n) or ceil(seq_k / n) (n rows per CTA), or
** kv_heads * ceil(kv_group * seq_q / n) (n query rows of one K/V head's
** group per CTA). */
typedef enum gen_grid_by {
  GEN_GRID_FIXED, GEN_GRID_HEADS, GEN_GRID_KV_HEADS, GEN_GRID_BATCH, GEN_GRID_SEQ_Q, GEN_GRID_SEQ_K,
  GEN_GRID_KV_ROWS
} gen_grid_by;
typedef struct gen_grid_dim { gen_grid_by by; int n; } gen_grid_dim;

/* One kernel launch of an op, as the template declares it
** (templates/space.lua: the family interface). */
#define GEN_MAX_LAUNCHES 4
/* What a launch other than the main one does, where the timing model must
** know it (space.lua's launch `role`). */
typedef enum gen_launch_role {
  GEN_ROLE_NONE = 0,
  GEN_ROLE_DQ,             /* the backward pass's dQ = dS K, a CTA per query block */
  GEN_ROLE_KV_SUM,         /* sums dK's and dV's float shares over a GQA group */
  GEN_ROLE_V_TRANSPOSE     /* writes V transposed for the main kernel (fp8) */
} gen_launch_role;

typedef struct gen_launch_spec {
  char entry[128];         /* extern "C" kernel name */
  int threads;             /* per CTA */
  int smem_bytes;          /* dynamic shared memory per CTA */
  gen_grid_dim grid[3];
  int heavy_first;         /* 1: query blocks taken from the last down (space.lua) */
  int persistent;          /* 1: the CTAs loop over the grid's tiles (space.lua) */
  gen_launch_role role;
} gen_launch_spec;

/* Global memory the launches of a kernel share: bytes_per_row bytes per
** (batch, head, query row), or key row with key_rows, the rows rounded up
** to a multiple of row_align (with grouped, none unless query heads share
** K/V heads), allocated before the first launch and freed
** after the last (gen_workspace_bytes). */
#define GEN_MAX_WORKSPACES 4
typedef struct gen_workspace {
  char name[32];
  int bytes_per_row;
  int key_rows;            /* 1: bytes_per_row per key row (seq_k), else per query row */
  int row_align;           /* 1 when the template gives none */
  int grouped;             /* 1: allocated only under GQA (no bytes when every head has its K/V) */
} gen_workspace;

/* One rendered kernel and what it takes to launch it: one variant of an op,
** which may take several launches (the backward pass three, split-KV
** decoding two), run in order on the same arguments. */
typedef struct gen_kernel {
  char *name, *hash, *config;
  gen_config cfg;          /* config, parsed; the oracle, no point of the space, has no pairs */
  fa_op op;                /* what it computes: the family's op */
  char *entry;             /* the main launch's entry: the one whose compiler report
                              (registers, spills) and occupancy a result records */
  char *body;              /* the kernel, without any prelude */
  char *source;            /* CUDA source: parameters + CUDA preludes + body */
  gen_preludes prelude_cuda, prelude_emu;   /* what each backend pastes before body */
  char source_hash[17];    /* FNV-1a 64 of source, hex */
  char template_version[48];
  int threads;             /* the main launch's threads per CTA */
  int smem_bytes;          /* the main launch's dynamic shared memory per CTA */
  int nlaunch;             /* launches in launch[], 1..GEN_MAX_LAUNCHES */
  int main;                /* the main launch's index: the one marked main, else 0 */
  int deterministic;       /* 1: every run gives the same bits; 0: it adds with atomics
                              across CTAs, whose order varies (render's `deterministic`) */
  gen_launch_spec launch[GEN_MAX_LAUNCHES];
  int nws;                 /* workspaces in ws[], named by any launch, 0..GEN_MAX_WORKSPACES */
  gen_workspace ws[GEN_MAX_WORKSPACES];
  int registers_estimate;  /* the template's own estimate, 32-bit words */
  int io_align;            /* bytes Q, K, V and O must be aligned to: the widest
                              global access the kernel makes to them */
  int ldsm_ways;           /* times over each ldmatrix reads shared memory: its rows'
                              bank conflicts (render's `ldsm_ways`; 1: none) */
  int red_lines;           /* 128-byte lines each warp-wide global atomic add touches
                              (render's `red_lines`; 0: a coalesced warp's) */
  char arch[16];           /* the one target the kernel is written for ("sm_90a": the
                              gemm's wgmma and TMA); "" when any will do */
  int ntma;                /* tensor maps in tma[], 0..GEN_MAX_TMA */
  gen_tma tma[GEN_MAX_TMA];
  char mod_hash[17];       /* the modification it applies (fa_mod.h's hash), "" none */
  char mod_label[512];     /* and its label ("window=256:0") */
  char note[256];          /* gen_render_config: which keys left out of the text
                              took other values than the defaults so that the
                              config fits, and why; "" when none did */
} gen_kernel;

/* One launch evaluated for a problem. */
typedef struct gen_launch {
  unsigned grid[3], block[3];
  unsigned smem_bytes;
  int persistent;          /* grid[0] is the tiles: a backend launches at most the CTAs
                              that fit the device at once, which loop over them */
  int fn;                  /* which of the kernel's entries it runs (gen_entries' index) */
} gen_launch;

int gen_open(gen_state **out, char *err, size_t errlen);

/* Read a modification: a built-in by spec ("softcap=30", text NULL), or a
** file's text, named spec in messages (templates/mod.lua says what it
** holds); the programs the reference runs are checked. */
int gen_mod_load(gen_state *g, const char *spec, const char *text, struct fa_mod *out);
/* The modification every later render and listing applies (NULL: none). */
int gen_set_mod(gen_state *g, const struct fa_mod *m);
void gen_close(gen_state *g);
const char *gen_errmsg(const gen_state *g);
const char *gen_template_digest(const gen_state *g);

/* The target for an arch name; smem_bytes and max_threads <= 0 take the
** arch's own limits. */
int gen_target_for_arch(gen_state *g, const char *arch, int smem_bytes,
                        int max_threads, gen_target *t);

/* Every arch the space has a target for, sorted by name. */
#define GEN_MAX_ARCHS 32
typedef struct gen_archs {
  int n;
  char arch[GEN_MAX_ARCHS][16];
} gen_archs;
int gen_list_archs(gen_state *g, gen_archs *out);

/* The variants of p's op for a problem and target; space is "default" or
** "full". FA_EINVAL, saying so, when no family offers the op. */
int gen_list(gen_state *g, const fa_problem *p, const gen_target *t,
             const char *space, gen_variant **out, size_t *count);
void gen_variants_free(gen_variant *v, size_t count);

/* Render from "k=v,..." text (unset keys: the family defaults, with dim,
** dtype and causal from p when p is not NULL, and the family must then
** compute p's op), or from a variant name; the kernel's op is its family's. */
int gen_render_config(gen_state *g, const char *config, const fa_problem *p,
                      const gen_target *t, gen_kernel *out);
int gen_render_name(gen_state *g, const char *name, const gen_target *t,
                    gen_kernel *out);
/* A variant by name in the form problem p addresses: a variable-length
** batch's (varlen) or a KV cache's (paged) when p is one, else as named. */
int gen_render_name_as(gen_state *g, const char *name, const fa_problem *p, const gen_target *t,
                       gen_kernel *out);
void gen_kernel_free(gen_kernel *k);

/* The naive-attention oracle for p's dtype, dim and causal: one launch, one
** CTA of `threads` per query row; its dynamic shared memory,
** (seq_k + threads) accumulators of fp64 for fp64 and fp32 otherwise, is
** the caller's to set at launch. */
int gen_render_oracle(gen_state *g, const fa_problem *p, gen_kernel *out);
/* The kernel that appends op decode's new keys and values into the cache
** (templates/append.lua) for p's dtype and head dims: one launch. */
int gen_render_append(gen_state *g, const fa_problem *p, gen_kernel *out);

/* The Hopper GEMM of templates/gemm.lua (wgmma, TMA, mbarriers: sm_90a on
** cuda) from its own "k=v,..." config (gemm.lua lists the keys, what
** fa_params carries and the launch shape); FA_EINVAL for a config it
** refuses. */
int gen_render_gemm(gen_state *g, const char *config, gen_kernel *out);

/* Template text given directly, rendered in the sandbox (tests, tools). */
int gen_render_text(gen_state *g, const char *chunkname, const char *text,
                    char **out);

/* The family's analytic model of what the kernel of `config` (completed as
** gen_render_config completes it) costs on problem p (seq_q, seq_k, batch,
** heads): named counts, in the family's order, that the emulator's
** counters should equal ("gmem_read", ...), then the model's reference
** figures. -1 when the family has no model. */
#define GEN_MAX_FIGURES 24
typedef struct gen_figure { char name[32]; long long value; } gen_figure;
typedef struct gen_prediction { int n; gen_figure f[GEN_MAX_FIGURES]; } gen_prediction;
int gen_predict(gen_state *g, const char *config, const fa_problem *p, gen_prediction *out);

/* The arch the space targets when neither an --arch nor a GPU says. */
const char *gen_default_arch(const gen_state *g);

/* The arch a device whose plain arch is `base` ("sm_XY" of its compute
** capability) is targeted as: the arch-specific one of the same GPU where a
** family runs only there, with a sentence why in why (whyn bytes; "" when
** it is base itself). */
int gen_device_arch(gen_state *g, const char *base, char *arch, size_t n, char *why,
                    size_t whyn);

/* The dtype tuned on t when none is asked for, and a sentence why. */
int gen_default_dtype(gen_state *g, const gen_target *t, fa_dtype *out, char *why, size_t n);

/* The families whose variants p's default space on t holds, in the
** space's order: name, title ("tensor cores") and the head dim it computes
** p's at (tc pads 72 to 96; 0 for a family that pads nothing), at most
** max; *count says how many. */
typedef struct gen_family { char name[16], title[64]; int padded_dim; } gen_family;
int gen_families_for(gen_state *g, const fa_problem *p, const gen_target *t, gen_family *out,
                     int max, int *count);

/* fatune explore's plan for p on t: the first family of p on t (as
** gen_families_for orders them) that declares an `explore` table, as
** templates/space.lua documents it. Its axes, each a few points (a label
** and the `k=v,...` text that follows `config`) differing in that axis
** only; the counters its tables compare with the model, by their
** FA_EMU_COUNTERS field names; the embedded files of its cost model and
** kernel template; whether the FlashAttention paper's bounds follow.
** FA_EINVAL when no family explores p on t, the message saying which do;
** or when the plan exceeds these limits. */
#define GEN_EXPLORE_AXES 6
#define GEN_EXPLORE_POINTS 4
#define GEN_EXPLORE_COUNTERS 16
typedef struct gen_explore_axis {
  char name[24], title[192];
  int n;                                      /* points */
  char label[GEN_EXPLORE_POINTS][24];
  char config[GEN_EXPLORE_POINTS][96];
  char why[512];
  int key[2];          /* indexes into counter[] of the counter the axis is about, the sum of
                          two (key[0] == key[1]: one); -1 when none */
  char key_label[48];  /* that counter's name in the effect line; "" when none */
} gen_explore_axis;
typedef struct gen_explore {
  char family[16];
  char config[32];           /* "family=<family>" */
  char model[64], kernel[64];
  int paper;
  int ncounters;
  char counter[GEN_EXPLORE_COUNTERS][32];
  int naxes;
  gen_explore_axis axis[GEN_EXPLORE_AXES];
} gen_explore;
int gen_explore_plan(gen_state *g, const fa_problem *p, const gen_target *t, gen_explore *out);

/* Every family's explore axis names, once each, in the space's order: at
** most max; FA_EINVAL when there are more. */
typedef struct gen_axis_name { char name[24]; } gen_axis_name;
int gen_explore_axes(gen_state *g, gen_axis_name *out, int max, int *count);

/* Whether kernel k computes problem p exactly: its config's dim, dtype and
** causal are p's (a family computes only the dtypes of its dtype axis).
** 1 when it fits; 0 when not, with a sentence saying why in why (n bytes),
** naming the kernel and both sides. A kernel without config pairs (the
** oracle) fits nothing. */
int gen_kernel_fits(const gen_kernel *k, const fa_problem *p, char *why, size_t n);

/* Grid, block and shared memory of launch i (0..k->nlaunch-1) of kernel k
** on problem p. */
void gen_launch_shape(const gen_kernel *k, int i, const fa_problem *p, gen_launch *out);

/* The distinct entries of k's launches, in order of first use, into
** names[0..n-1]; returns n (1..GEN_MAX_LAUNCHES). A compiled program holds
** each of them; gen_launch.fn indexes this list. */
int gen_entries(const gen_kernel *k, const char *names[GEN_MAX_LAUNCHES]);

/* Bytes of workspace i (0..k->nws-1) of kernel k on problem p. */
size_t gen_workspace_bytes(const gen_kernel *k, int i, const fa_problem *p);
/* Workspace i's rows per (batch, head): seq_q or seq_k, rounded up to its row_align. */
int gen_workspace_rows(const gen_kernel *k, int i, const fa_problem *p);

#endif
