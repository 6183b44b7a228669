/*
** sass.c
** The main loop of a kernel's SASS, counted per iteration (see sass.h):
** parse nvdisasm text into instructions and labels, cut basic blocks,
** find dominators and natural loops, pick the main loop, count it.
*/
#include <ctype.h>
#include <math.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa_proc.h"
#include "sass.h"

#define OP_LEN 16
#define LABEL_LEN 64

typedef struct insn {
  char op[OP_LEN];        /* the opcode without its modifiers: "HMMA" */
  char text[SASS_TEXT_LEN];  /* opcode, modifiers and operands, without the predicate */
  unsigned ctrl;          /* the control bits (sass.h), when has_ctrl */
  int has_ctrl;           /* 0: no encoding in the text, or its first word only */
  int predicated;         /* guarded by a predicate that can be false */
  int never;              /* guarded by @!PT: never executes */
  int uniform_any;        /* BRA.U.ANY: back to the top while some lane's value is left */
  int target;             /* a branch's target instruction, -1 none */
  char label[LABEL_LEN];  /* a branch's target label, until resolved */
} insn;

typedef struct label { char name[LABEL_LEN]; int at; } label;

typedef struct block {
  int first, last;  /* instruction range, inclusive */
  int succ[2], nsucc;
} block;

typedef struct func {
  insn *in; int nin, capin;
  label *lab; int nlab, caplab;
  block *bb; int nbb;
  int *pred, *pred_at;  /* the predecessors of b: pred[pred_at[b] .. pred_at[b + 1]) */
  int *block_of;     /* instruction -> block */
  uint64_t *dom;     /* nbb x words: dom[b] holds the blocks dominating b */
  int words;
  int registers;
} func;

typedef struct loop {
  int header;
  uint64_t *body;    /* words */
  long size, mma;    /* instructions, product instructions (static) */
} loop;

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

static int bit(const uint64_t *s, int i) { return (int)((s[i / 64] >> (i % 64)) & 1); }
static void set_bit(uint64_t *s, int i) { s[i / 64] |= 1ull << (i % 64); }

static void func_free(func *f) {
  free(f->in);
  free(f->lab);
  free(f->bb);
  free(f->pred);
  free(f->pred_at);
  free(f->block_of);
  free(f->dom);
}

/* ---- parsing ---- */

/* The end of the line starting at p. */
static const char *line_end(const char *p) {
  const char *e = strchr(p, '\n');
  return e ? e : p + strlen(p);
}

static const char *skip_space(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t')) p++;
  return p;
}

/* The function name of a ".section .text.NAME,..." line, or 0. */
static int section_name(const char *p, const char *e, const char **name, size_t *len) {
  p = skip_space(p, e);
  static const char tag[] = ".section";
  if ((size_t)(e - p) < sizeof tag || strncmp(p, tag, sizeof tag - 1)) return 0;
  p = skip_space(p + sizeof tag - 1, e);
  if ((size_t)(e - p) < 6 || strncmp(p, ".text.", 6)) return 0;
  p += 6;
  const char *q = p;
  while (q < e && *q != ',' && *q != ' ' && *q != '\t') q++;
  *name = p, *len = (size_t)(q - p);
  return q > p;
}

static int grow(void **v, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int c = *cap ? *cap * 2 : 256;
  while (c < need) c *= 2;
  void *n = realloc(*v, (size_t)c * size);
  if (!n) return -1;
  *v = n, *cap = c;
  return 0;
}

/* A label alone on its line: "   .L_x_12:". */
static int parse_label(func *f, const char *p, const char *e) {
  p = skip_space(p, e);
  const char *q = p;
  while (q < e && !isspace((unsigned char)*q) && *q != ':') q++;
  if (q == p || q >= e || *q != ':' || skip_space(q + 1, e) != e) return 0;
  if ((size_t)(q - p) >= LABEL_LEN) return 0;
  if (grow((void **)&f->lab, &f->caplab, f->nlab + 1, sizeof *f->lab)) return -1;
  label *l = &f->lab[f->nlab++];
  memcpy(l->name, p, (size_t)(q - p));
  l->name[q - p] = '\0';
  l->at = f->nin;
  return 1;
}

/* A branch whose predicate is its first operand, as Blackwell's SASS
** writes uniform ones ("BRA.U !UP0, `(.L_x_3)"), not a guard ("@!UP0
** BRA.U"): conditional unless the predicate is PT; never taken on !PT.
** p points past the opcode, at its modifiers. */
static void branch_operand_predicate(insn *in, const char *p, const char *e) {
  while (p < e && !isspace((unsigned char)*p)) p++;  /* the modifiers */
  p = skip_space(p, e);
  int neg = p < e && *p == '!';
  p += neg;
  if (p < e && *p == 'U') p++;
  if (p >= e || *p != 'P' || p + 1 >= e) return;
  const int pt = p[1] == 'T';
  if (!pt && !isdigit((unsigned char)p[1])) return;
  const char *after = skip_space(p + 2, e);
  if (after >= e || *after != ',') return;
  if (!pt) in->predicated = 1;
  else if (neg) in->never = 1;
}

/* An instruction line: offset in a comment, predicate, opcode, operands:
**   "/ *0a40* /  @!P0 BRA `(.L_x_3) ;" (the offset comment written here with spaces). */
static int parse_insn(func *f, const char *p, const char *e) {
  p = skip_space(p, e);
  if (e - p < 4 || p[0] != '/' || p[1] != '*') return 0;
  const char *q = p + 2;
  while (q < e && isxdigit((unsigned char)*q)) q++;
  if (q == p + 2 || e - q < 2 || q[0] != '*' || q[1] != '/') return 0;
  p = skip_space(q + 2, e);
  if (p < e && *p == '{') p = skip_space(p + 1, e);  /* a dual-issue pair */
  insn in = {.target = -1};
  if (p < e && *p == '@') {
    const char *s = p;
    while (p < e && !isspace((unsigned char)*p)) p++;
    size_t n = (size_t)(p - s);
    int neg = n > 1 && s[1] == '!';
    const char *r = s + 1 + neg;
    int pt = (size_t)(p - r) == 2 ? !strncmp(r, "PT", 2) : (size_t)(p - r) == 3 && !strncmp(r, "UPT", 3);
    in.predicated = !pt;
    in.never = pt && neg;
    p = skip_space(p, e);
  }
  const char *semi = memchr(p, ';', (size_t)(e - p));
  size_t tn = (size_t)((semi ? semi : e) - p);
  while (tn && isspace((unsigned char)p[tn - 1])) tn--;
  if (tn >= SASS_TEXT_LEN) tn = SASS_TEXT_LEN - 1;
  memcpy(in.text, p, tn);
  size_t k = 0;
  while (p < e && (isalnum((unsigned char)*p) || *p == '_') && k < OP_LEN - 1) in.op[k++] = *p++;
  if (!k) return 0;
  in.uniform_any = (size_t)(e - p) >= 6 && !strncmp(p, ".U.ANY", 6);
  /* BRA.DIV and BRA.CONV branch on the warp's convergence: conditional */
  if (((size_t)(e - p) >= 4 && !strncmp(p, ".DIV", 4)) ||
      ((size_t)(e - p) >= 5 && !strncmp(p, ".CONV", 5)))
    in.predicated = 1;
  if (!strcmp(in.op, "BRA")) branch_operand_predicate(&in, p, e);
  const char *tick = memchr(p, '`', (size_t)(e - p));
  if (tick && tick + 2 < e && tick[1] == '(') {
    const char *s = tick + 2, *t = s;
    while (t < e && *t != ')') t++;
    if (t < e && (size_t)(t - s) < LABEL_LEN) {
      memcpy(in.label, s, (size_t)(t - s));
      in.label[t - s] = '\0';
    }
  }
  if (grow((void **)&f->in, &f->capin, f->nin + 1, sizeof *f->in)) return -1;
  f->in[f->nin++] = in;
  return 1;
}

/* nvdisasm -hex writes a 128-bit instruction's two words as comments,
** the first after the instruction, the second alone on the next line;
** the control bits are the second's bits 41 to 63. 1 when the line is
** such a second word (its instruction then has_ctrl). */
static int parse_hex_word(func *f, const char *p, const char *e) {
  p = skip_space(p, e);
  if (e - p < 22 || strncmp(p, "/* 0x", 5) || !f->nin) return 0;
  char *end;
  unsigned long long w = strtoull(p + 3, &end, 16);
  if (end - (p + 5) != 16 || strncmp(skip_space(end, e), "*/", 2)) return 0;
  f->in[f->nin - 1].ctrl = (unsigned)(w >> 41);
  f->in[f->nin - 1].has_ctrl = 1;
  return 1;
}

static int parse_registers(func *f, const char *p, const char *e) {
  static const char tag[] = "SHI_REGISTERS=";
  const char *s = p;
  size_t n = (size_t)(e - p);
  for (; n >= sizeof tag - 1; s++, n--)
    if (!strncmp(s, tag, sizeof tag - 1)) {
      long r = strtol(s + sizeof tag - 1, NULL, 10);
      f->registers = r > 0 && r <= 65536 ? (int)r : -1;
      return 1;
    }
  return 0;
}

/* The text of `name` (NULL: the first function), into f. 1 found, 0 not. */
static int parse_function(const char *text, const char *name, func *f, char *err, size_t n) {
  int inside = 0, seen = 0;
  f->registers = -1;
  for (const char *p = text; *p;) {
    const char *e = line_end(p);
    const char *nm;
    size_t len;
    if (section_name(p, e, &nm, &len)) {
      if (inside) break;
      inside = !name || (strlen(name) == len && !strncmp(nm, name, len));
      seen |= inside;
    } else if (inside && parse_hex_word(f, p, e)) {
    } else if (inside && (parse_insn(f, p, e) < 0 || parse_label(f, p, e) < 0)) {
      return fail(err, n, "out of memory reading SASS");
    } else if (inside && !f->nin) {
      parse_registers(f, p, e);
    }
    p = *e ? e + 1 : e;
  }
  return seen;
}

static int resolve_labels(func *f, char *err, size_t n) {
  for (int i = 0; i < f->nin; i++) {
    insn *in = &f->in[i];
    if (!in->label[0]) continue;
    for (int l = 0; l < f->nlab; l++)
      if (!strcmp(f->lab[l].name, in->label)) in->target = f->lab[l].at;
    int branch = !strcmp(in->op, "BRA") || !strcmp(in->op, "JMP") || !strcmp(in->op, "CALL");
    if (branch && (in->target < 0 || in->target >= f->nin))
      return fail(err, n, "SASS: branch to unknown label '%s'", in->label);
  }
  return 0;
}

/* ---- the control-flow graph ---- */

/* A branch: BRA, JMP, and a CALL to a label of the code (".L_x_5"),
** which ptxas uses to break out of a loop; a CALL to a subroutine
** ("$__internal_...") returns, and is no branch. */
static int is_branch(const insn *in) {
  if (in->target < 0) return 0;
  if (!strcmp(in->op, "CALL")) return !strncmp(in->label, ".L", 2);
  return !strcmp(in->op, "BRA") || !strcmp(in->op, "JMP");
}

/* Ends the flow: EXIT, RET, a trap, an indirect branch (not followed). */
static int is_end(const insn *in) {
  static const char *const ends[] = {"EXIT", "RET", "KILL", "BPT", "BRX", "JMX", NULL};
  for (const char *const *e = ends; *e; e++)
    if (!strcmp(in->op, *e)) return 1;
  return 0;
}

/* The predecessor lists, from the successors. */
static int predecessors(func *f) {
  f->pred_at = calloc((size_t)f->nbb + 1, sizeof *f->pred_at);
  f->pred = malloc(((size_t)f->nbb * 2 + 1) * sizeof *f->pred);
  if (!f->pred_at || !f->pred) return -1;
  for (int b = 0; b < f->nbb; b++)
    for (int s = 0; s < f->bb[b].nsucc; s++) f->pred_at[f->bb[b].succ[s] + 1]++;
  for (int b = 0; b < f->nbb; b++) f->pred_at[b + 1] += f->pred_at[b];
  int *fill = malloc(((size_t)f->nbb + 1) * sizeof *fill);
  if (!fill) return -1;
  memcpy(fill, f->pred_at, ((size_t)f->nbb + 1) * sizeof *fill);
  for (int b = 0; b < f->nbb; b++)
    for (int s = 0; s < f->bb[b].nsucc; s++) f->pred[fill[f->bb[b].succ[s]]++] = b;
  free(fill);
  return 0;
}

static int build_blocks(func *f) {
  char *leader = calloc((size_t)f->nin + 1, 1);
  f->block_of = malloc(((size_t)f->nin + 1) * sizeof *f->block_of);
  f->bb = malloc(((size_t)f->nin + 1) * sizeof *f->bb);
  if (!leader || !f->block_of || !f->bb) {
    free(leader);
    return -1;
  }
  leader[0] = 1;
  for (int i = 0; i < f->nin; i++) {
    const insn *in = &f->in[i];
    if (is_branch(in) && !in->never) leader[in->target] = 1, leader[i + 1] = 1;
    if (is_end(in)) leader[i + 1] = 1;
  }
  f->nbb = 0;
  for (int i = 0; i < f->nin; i++) {
    if (leader[i]) f->bb[f->nbb++] = (block){.first = i};
    f->bb[f->nbb - 1].last = i;
    f->block_of[i] = f->nbb - 1;
  }
  free(leader);
  for (int b = 0; b < f->nbb; b++) {
    block *k = &f->bb[b];
    const insn *in = &f->in[k->last];
    int falls = k->last + 1 < f->nin;
    if (is_branch(in) && !in->never) {
      k->succ[k->nsucc++] = f->block_of[in->target];
      falls = falls && in->predicated;
    } else if (is_end(in)) {
      falls = falls && in->predicated;
    }
    if (falls) k->succ[k->nsucc++] = b + 1;
  }
  return predecessors(f);
}

/* Iterative dominators over bit sets, in block order (the code's layout
** is near enough a reverse post-order for this to converge quickly). */
static int dominators(func *f) {
  f->words = (f->nbb + 63) / 64;
  size_t w = (size_t)f->words;
  f->dom = malloc((size_t)f->nbb * w * sizeof *f->dom);
  uint64_t *tmp = malloc(w * sizeof *tmp);
  if (!f->dom || !tmp) {
    free(tmp);
    return -1;
  }
  for (int b = 0; b < f->nbb; b++) {
    memset(f->dom + b * w, b ? 0xff : 0, w * sizeof *f->dom);
    if (!b) set_bit(f->dom, 0);
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (int b = 1; b < f->nbb; b++) {
      memset(tmp, 0xff, w * sizeof *tmp);
      for (int k = f->pred_at[b]; k < f->pred_at[b + 1]; k++)
        for (size_t i = 0; i < w; i++) tmp[i] &= f->dom[(size_t)f->pred[k] * w + i];
      /* unreachable: dominated by itself only */
      if (f->pred_at[b] == f->pred_at[b + 1]) memset(tmp, 0, w * sizeof *tmp);
      set_bit(tmp, b);
      if (memcmp(tmp, f->dom + b * w, w * sizeof *tmp)) {
        memcpy(f->dom + b * w, tmp, w * sizeof *tmp);
        changed = 1;
      }
    }
  }
  free(tmp);
  return 0;
}

static int dominates(const func *f, int a, int b) {
  return bit(f->dom + (size_t)b * (size_t)f->words, a);
}

/* ---- loops ---- */

static const char *const mma_ops[] = {"HGMMA", "QGMMA", "HMMA", "DFMA", "FFMA"};

/* The FLOPs of one of the function's HMMA: 2048 where they are all
** m16n8k8 (HMMA.1688: Turing's, which does m16n8k16 as two), else 4096
** (HMMA.16816). */
static double hmma_flops(const func *f) {
  int k8 = 0, k16 = 0;
  for (int i = 0; i < f->nin; i++)
    if (!strcmp(f->in[i].op, "HMMA")) {
      if (strstr(f->in[i].text, ".1688")) k8++;
      else k16++;
    }
  return k8 && !k16 ? 2048 : 4096;
}

static long count_op(const func *f, const uint64_t *set, const char *op) {
  long c = 0;
  for (int b = 0; b < f->nbb; b++)
    if (bit(set, b))
      for (int i = f->bb[b].first; i <= f->bb[b].last; i++) c += !strcmp(f->in[i].op, op);
  return c;
}

/* The body of the natural loop of back edge tail -> h, added to body. */
static int loop_body(const func *f, int h, int tail, uint64_t *body) {
  int *stack = malloc((size_t)f->nbb * sizeof *stack), top = 0;
  if (!stack) return -1;
  set_bit(body, h);
  if (!bit(body, tail)) set_bit(body, tail), stack[top++] = tail;
  while (top) {
    int b = stack[--top];
    for (int k = f->pred_at[b]; k < f->pred_at[b + 1]; k++)
      if (!bit(body, f->pred[k])) set_bit(body, f->pred[k]), stack[top++] = f->pred[k];
  }
  free(stack);
  return 0;
}

static void loops_free(loop *l, int n) {
  for (int i = 0; i < n; i++) free(l[i].body);
  free(l);
}

/* Every natural loop, back edges to one header merged. */
static int find_loops(const func *f, loop **out, int *nout) {
  loop *l = NULL;
  int n = 0;
  for (int b = 0; b < f->nbb; b++)
    for (int s = 0; s < f->bb[b].nsucc; s++) {
      int h = f->bb[b].succ[s];
      if (!dominates(f, h, b)) continue;
      int k = 0;
      while (k < n && l[k].header != h) k++;
      if (k == n) {
        loop *g = realloc(l, (size_t)(n + 1) * sizeof *l);
        uint64_t *body = calloc((size_t)f->words, sizeof *body);
        if (!g || !body) {
          free(body);
          loops_free(g ? g : l, n);
          return -1;
        }
        l = g;
        l[n++] = (loop){.header = h, .body = body};
      }
      if (loop_body(f, h, b, l[k].body) != 0) {
        loops_free(l, n);
        return -1;
      }
    }
  *out = l, *nout = n;
  return 0;
}

static int contains(const func *f, const loop *outer, const loop *inner) {
  if (outer == inner) return 0;
  for (int i = 0; i < f->words; i++)
    if ((inner->body[i] & ~outer->body[i]) != 0) return 0;
  return 1;
}

/* ---- counting ---- */

static int op_in(const char *op, const char *const *set) {
  for (; *set; set++)
    if (!strcmp(op, *set)) return 1;
  return 0;
}

/* Integer and address arithmetic, the uniform datapath's (U...) too. */
static int is_int(const char *op) {
  static const char *const ints[] = {
    "IMAD", "IADD3", "IADD", "IABS", "IMNMX", "VIADD", "VIMNMX", "VIMNMX3", "VIADDMNMX", "LOP3",
    "LOP", "SHF", "SHL",
    "SHR", "LEA", "ISETP", "SEL", "PRMT", "BMSK", "SGXT", "POPC", "FLO", "BREV", "IMUL", NULL};
  return op_in(op, ints) || (op[0] == 'U' && op_in(op + 1, ints));
}

/* What a masking block may hold: integer arithmetic, compares, selects,
** moves, and reloads of values ptxas spilled (LDL: the block needs a
** bound it keeps in local memory, reloaded only when the block runs, as
** wg's persistent d64 tile does). */
static int is_mask_op(const char *op) {
  static const char *const ok[] = {"FSEL", "FSETP", "MOV", "UMOV", "CS2R", "S2R", "S2UR",
                                   "PLOP3", "P2R", "R2P", "BRA", "NOP", "LDL", NULL};
  return is_int(op) || op_in(op, ok);
}

/* Whether [from, to) is a lazy rescale (tc's rescale=lazy, as
** FlashAttention-4's): multiplies alone, jumped over on a warp's vote
** (VOTE.ANY right before the branch) that no row's max moved, which in the
** steady state it nearly always is. */
static int lazy_rescale(const func *f, const uint64_t *body, int br, int from, int to) {
  if (br < 1 || strcmp(f->in[br - 1].op, "VOTE")) return 0;
  int fmul = 0;
  for (int i = from; i < to; i++) {
    if (!bit(body, f->block_of[i])) return 0;
    if (!strcmp(f->in[i].op, "FMUL")) fmul++;
    else if (strcmp(f->in[i].op, "NOP")) return 0;
  }
  return fmul > 0;
}

/* Marks in skip the instructions of the masking blocks of the loop, the
** blocks a forward conditional branch in the loop jumps over, and of its
** lazy rescales. */
static int mark_masking(const func *f, const uint64_t *body, char *skip) {
  int left_out = 0;
  for (int b = 0; b < f->nbb; b++) {
    if (!bit(body, b)) continue;
    const insn *br = &f->in[f->bb[b].last];
    if (!is_branch(br) || !br->predicated || br->target <= f->bb[b].last) continue;
    int from = f->bb[b].last + 1, to = br->target, sel = 0, ok = 1;
    for (int i = from; i < to && ok; i++) {
      ok = bit(body, f->block_of[i]) && is_mask_op(f->in[i].op);
      sel |= !strcmp(f->in[i].op, "FSEL") || !strcmp(f->in[i].op, "SEL");
    }
    if ((!ok || !sel) && !lazy_rescale(f, body, f->bb[b].last, from, to)) continue;
    for (int i = from; i < to; i++)
      if (!skip[i]) skip[i] = 1, left_out += strcmp(f->in[i].op, "NOP") != 0;
  }
  return left_out;
}

/* Hopper's asynchronous machinery: TMA, mbarriers, wgmma's fences. */
/* A block of an mbarrier wait's spin: only try-waits, the sleep between
** them (FlashAttention-3's), branches and moves of the barrier's address. */
static int spin_block(const func *f, int b) {
  static const char *const ok[] = {"SYNCS", "NANOSLEEP", "YIELD", "BRA", "NOP", "MOV", "UMOV", "IMAD",
                                   "R2UR", NULL};
  for (int i = f->bb[b].first; i <= f->bb[b].last; i++)
    if (!op_in(f->in[i].op, ok)) return 0;
  return 1;
}

/* A loop that only spins on an mbarrier: every block a spin block, one
** try-wait at least. */
static int is_spin_loop(const func *f, const loop *l) {
  long syncs = 0;
  for (int b = 0; b < f->nbb; b++)
    if (bit(l->body, b)) {
      if (!spin_block(f, b)) return 0;
      for (int i = f->bb[b].first; i <= f->bb[b].last; i++) syncs += !strcmp(f->in[i].op, "SYNCS");
    }
  return syncs > 0;
}

/* Marks in skip the second tries of the waits in body: the spin
** instructions that a conditional branch right after a try-wait jumps
** over when the first try succeeds. */
static void mark_retry(const func *f, const uint64_t *body, char *skip) {
  for (int b = 0; b < f->nbb; b++) {
    const block *k = &f->bb[b];
    const insn *br = &f->in[k->last];
    if (!bit(body, b) || k->last == k->first || strcmp(f->in[k->last - 1].op, "SYNCS") ||
        !is_branch(br) || !br->predicated || br->target <= k->last)
      continue;
    int ok = 1;
    for (int i = k->last + 1; i < br->target && ok; i++)
      ok = bit(body, f->block_of[i]) && spin_block(f, f->block_of[i]);
    for (int i = k->last + 1; ok && i < br->target; i++) skip[i] = 1;
  }
}

/* A waterfall loop: every edge back to its header a BRA.U.ANY, which
** ptxas wraps around an instruction that needs a uniform operand (a TMA
** load's address) and which runs once when the operand is uniform, as an
** elected thread's is. Counted as straight code, not as a loop. */
static int is_waterfall(const func *f, const loop *l) {
  int edges = 0;
  for (int b = 0; b < f->nbb; b++) {
    if (!bit(l->body, b)) continue;
    for (int s = 0; s < f->bb[b].nsucc; s++) {
      const insn *last = &f->in[f->bb[b].last];
      if (f->bb[b].succ[s] != l->header) continue;
      if (!is_branch(last) || !last->uniform_any || last->target != f->bb[l->header].first)
        return 0;
      edges++;
    }
  }
  return edges > 0;
}

/* Marks in skip the spin loops nested in body, and the blocks of a lone
** BRA whose only predecessors are spin blocks (the way back into the
** loop): executed only while a wait is not yet satisfied. Then the
** second tries (mark_retry): the loop is counted as when every wait
** succeeds at its first try. */
static void mark_spin(const func *f, const uint64_t *body, const loop *l, int n, char *skip) {
  mark_retry(f, body, skip);
  for (int k = 0; k < n; k++) {
    int inside = bit(body, l[k].header) && is_spin_loop(f, &l[k]);
    for (int b = 0; inside && b < f->nbb; b++)
      if (bit(l[k].body, b))
        for (int i = f->bb[b].first; i <= f->bb[b].last; i++) skip[i] = 1;
  }
  for (int b = 0; b < f->nbb; b++) {
    const block *k = &f->bb[b];
    int lone = bit(body, b) && k->first == k->last && !strcmp(f->in[k->first].op, "BRA") &&
               !f->in[k->first].predicated && f->pred_at[b] < f->pred_at[b + 1];
    for (int p = f->pred_at[b]; lone && p < f->pred_at[b + 1]; p++)
      lone = skip[f->bb[f->pred[p]].first] && spin_block(f, f->pred[p]);
    if (lone) skip[k->first] = 1;
  }
}

static void tally_hopper(sass_counts *c, const char *op, long times) {
  if (!strcmp(op, "UTMALDG")) c->loop_utmaldg += times;
  else if (!strcmp(op, "SYNCS")) c->loop_syncs += times;
  else if (!strcmp(op, "WARPGROUP")) c->loop_warpgroup += times;
}

int sass_is_gmma(const char *op) { return !strcmp(op, "HGMMA") || !strcmp(op, "QGMMA"); }

int sass_gmma_k(const char *text) {
  const char *p = strstr(text, ".64x");
  p = p ? strchr(p + 4, 'x') : NULL;
  return p && atoi(p + 1) == 32 ? 32 : 16;
}

int sass_hmma_f16acc(const char *text) {
  return !strncmp(text, "HMMA.", 5) && (strstr(text, ".16816.F16 ") || strstr(text, ".1688.F16 "));
}

static void tally(sass_counts *c, const insn *in, long times) {
  const char *op = in->op;
  if (!strcmp(op, "NOP")) return;
  c->loop_instructions += times;
  if (!strcmp(op, c->mma)) {
    c->loop_hmma += times;
    if (sass_hmma_f16acc(in->text)) c->loop_hmma_f16acc += times;
  } else if (!strcmp(op, "MUFU")) c->loop_mufu += times;
  else if (!strcmp(op, "LDSM")) c->loop_ldsm += times;
  else if (!strcmp(op, "LDS")) c->loop_lds += times;
  else if (!strcmp(op, "LDGSTS")) c->loop_ldgsts += times;
  else if (!strcmp(op, "BAR")) c->loop_bar += times;
  else if (!strcmp(op, "SHFL")) c->loop_shfl += times;
  else if (!strcmp(op, "LDL") || !strcmp(op, "STL")) c->loop_local += times;
  else if (is_int(op)) c->loop_int += times;
  else tally_hopper(c, op, times);
}

/* The trip count of the inner loops: the fewest whole trips whose product
** instructions reach mma_per_block, 0 when there is none or when they pass
** it by more than an eighth. The product may exceed the useful FLOPs: the
** deferred kernel sums the rows of P on the tensor cores (one HMMA more
** per k16 step of P V and m-tile, an eighth of the FLOPs at head dim 32,
** less above), so an exact quotient would miss its key parts. */
static int inner_trips(long outer_mma, long inner_mma, long mma_per_block) {
  if (mma_per_block <= 0 || inner_mma <= 0 || mma_per_block <= outer_mma) return 0;
  long left = mma_per_block - outer_mma;
  long trips = (left + inner_mma - 1) / inner_mma;
  if (trips >= 1 << 20 || 8 * (trips * inner_mma - left) > left) return 0;
  return (int)trips;
}

/* ---- the trace ---- */

static int seq_add(sass_seq *q, const insn *in) {
  if (q->n == q->cap) {
    int c = q->cap ? q->cap * 2 : 512;
    sass_op *v = realloc(q->op, (size_t)c * sizeof *v);
    if (!v) return -1;
    q->op = v, q->cap = c;
  }
  sass_op *o = &q->op[q->n++];
  memset(o, 0, sizeof *o);
  memcpy(o->op, in->op, sizeof o->op);
  memcpy(o->text, in->text, sizeof o->text);
  o->predicated = in->predicated;
  o->has_ctrl = in->has_ctrl;
  unsigned c = in->has_ctrl ? in->ctrl : 0x7e1; /* none: one cycle, no scoreboards */
  o->stall = c & 15, o->yield = (c >> 4) & 1, o->wbar = (c >> 5) & 7, o->rbar = (c >> 8) & 7;
  o->wait = (c >> 11) & 63;
  return 0;
}

/* The loop's instructions in layout order, as one iteration runs them:
** a run of blocks of an inner loop repeated `times`, skipped ones left out. */
static int trace_loop(const func *f, const uint64_t *body, const uint64_t *inner, long times,
                      const char *skip, sass_seq *q) {
  for (int b = 0; b < f->nbb; b++) {
    if (!bit(body, b)) continue;
    int e = b;
    if (inner && bit(inner, b))
      while (e + 1 < f->nbb && bit(body, e + 1) && bit(inner, e + 1)) e++;
    for (long t = 0; t < (inner && bit(inner, b) ? times : 1); t++)
      for (int i = f->bb[b].first; i <= f->bb[e].last; i++)
        if (!skip[i] && strcmp(f->in[i].op, "NOP") && seq_add(q, &f->in[i])) return -1;
    b = e;
  }
  return 0;
}

void sass_trace_free(sass_trace *t) {
  if (!t) return;
  free(t->loop.op);
  free(t->producer.op);
  memset(t, 0, sizeof *t);
}

/* Counts the main loop m of the loops l[0..n); inner: which of its blocks
** lie in nested loops. */
static int count_loop(const func *f, const loop *m, const loop *l, int n, const uint64_t *inner,
                      long mma_per_block, sass_counts *c, sass_seq *q) {
  char *skip = calloc((size_t)f->nin + 1, 1);
  if (!skip) return -1;
  c->masked_left_out = mark_masking(f, m->body, skip);
  mark_spin(f, m->body, l, n, skip);
  long outer_mma = 0, inner_mma = 0;
  for (int b = 0; b < f->nbb; b++)
    if (bit(m->body, b))
      for (int i = f->bb[b].first; i <= f->bb[b].last; i++)
        if (!skip[i] && !strcmp(f->in[i].op, c->mma)) *(bit(inner, b) ? &inner_mma : &outer_mma) += 1;
  c->inner_trips = c->inner_loops ? inner_trips(outer_mma, inner_mma, mma_per_block) : 1;
  long times = c->inner_trips ? c->inner_trips : 1;
  for (int b = 0; b < f->nbb; b++)
    if (bit(m->body, b))
      for (int i = f->bb[b].first; i <= f->bb[b].last; i++)
        if (!skip[i]) tally(c, &f->in[i], bit(inner, b) ? times : 1);
  int rc = q ? trace_loop(f, m->body, inner, times, skip, q) : 0;
  free(skip);
  if (rc) return -1;
  if (c->loop_hmma)
    c->non_mma_per_mma = (double)(c->loop_instructions - c->loop_hmma) / (double)c->loop_hmma;
  return 0;
}

/* The product's instruction: the first of mma_ops the function has. */
static const char *product_op(const func *f) {
  uint64_t *all = calloc((size_t)f->words, sizeof *all);
  if (!all) return NULL;
  for (int b = 0; b < f->nbb; b++) set_bit(all, b);
  const char *op = NULL;
  for (size_t k = 0; k < sizeof mma_ops / sizeof *mma_ops && !op; k++)
    if (count_op(f, all, mma_ops[k])) op = mma_ops[k];
  free(all);
  return op;
}

/* HGMMA: a loop that holds another loop of the product is no candidate
** for the main loop (its mma is cleared; sass.h says why). */
static void innermost_only(const func *f, loop *l, int n) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < n && l[i].mma; k++)
      if (l[k].mma && contains(f, &l[i], &l[k])) l[i].mma = 0;
}

/* The producer loop of a warp-specialized kernel: of the innermost loops
** holding UTMALDG but no product, outside the main loop m, the one with
** most UTMALDG, then fewest instructions; counted once, spins left out. */
static int count_producer(const func *f, const loop *l, int n, int m, sass_counts *c,
                          sass_seq *q) {
  int best = -1;
  long best_tma = 0;
  for (int i = 0; i < n; i++) {
    long tma = count_op(f, l[i].body, "UTMALDG");
    if (!tma || count_op(f, l[i].body, c->mma) || contains(f, &l[m], &l[i]) ||
        is_waterfall(f, &l[i]))
      continue;
    int inner = 0;
    for (int k = 0; k < n && !inner; k++)
      inner = count_op(f, l[k].body, "UTMALDG") && contains(f, &l[i], &l[k]) &&
              !is_waterfall(f, &l[k]);
    if (inner) continue;
    if (best < 0 || tma > best_tma || (tma == best_tma && l[i].size < l[best].size))
      best = i, best_tma = tma;
  }
  if (best < 0) return 0;
  char *skip = calloc((size_t)f->nin + 1, 1);
  if (!skip) return -1;
  mark_spin(f, l[best].body, l, n, skip);
  for (int b = 0; b < f->nbb; b++)
    if (bit(l[best].body, b))
      for (int i = f->bb[b].first; i <= f->bb[b].last; i++)
        if (!skip[i] && strcmp(f->in[i].op, "NOP")) {
          c->producer_instructions++;
          c->producer_utmaldg += !strcmp(f->in[i].op, "UTMALDG");
        }
  int rc = q ? trace_loop(f, l[best].body, NULL, 1, skip, q) : 0;
  free(skip);
  if (rc) return -1;
  c->producer_found = 1;
  return 0;
}

/* The main loop among l[0..n): most product instructions, outermost, then
** fewest instructions. -1 when no loop holds the product. */
static int pick_main(const func *f, const loop *l, int n) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (!l[i].mma) continue;
    if (best < 0 || l[i].mma > l[best].mma) { best = i; continue; }
    if (l[i].mma < l[best].mma) continue;
    if (contains(f, &l[i], &l[best])) best = i;
    else if (!contains(f, &l[best], &l[i]) && l[i].size < l[best].size) best = i;
  }
  return best;
}

static int analyse(func *f, double flops_per_warp, sass_counts *c, sass_trace *tr) {
  if (build_blocks(f) != 0 || dominators(f) != 0) return -1;
  const char *op = product_op(f);
  if (!op) return 0;
  snprintf(c->mma, sizeof c->mma, "%s", op);
  loop *l;
  int n;
  if (find_loops(f, &l, &n) != 0) return -1;
  uint64_t *all = calloc((size_t)f->words, sizeof *all);
  if (!all) {
    loops_free(l, n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    l[i].mma = count_op(f, l[i].body, op);
    for (int b = 0; b < f->nbb; b++)
      if (bit(l[i].body, b)) l[i].size += f->bb[b].last - f->bb[b].first + 1;
  }
  if (sass_is_gmma(op)) innermost_only(f, l, n);
  int m = pick_main(f, l, n), rc = 0;
  if (m >= 0) {
    c->found = 1;
    for (int i = 0; i < n; i++)
      if (contains(f, &l[m], &l[i]) && !is_spin_loop(f, &l[i]) && !is_waterfall(f, &l[i])) {
        c->inner_loops++;
        for (int w = 0; w < f->words; w++) all[w] |= l[i].body[w];
      }
    /* HGMMA's FLOPs depend on its shape: no trip count from them. */
    double per = !strcmp(op, "HMMA") ? hmma_flops(f) : sass_is_gmma(op) ? 0 : 64;
    double want = per > 0 ? flops_per_warp / per : 0;
    long mma = want >= 1 && want < 1e9 && want == floor(want) ? (long)want : 0;
    rc = count_loop(f, &l[m], l, n, all, mma, c, tr ? &tr->loop : NULL);
  }
  if (rc == 0 && m >= 0 && sass_is_gmma(op))
    rc = count_producer(f, l, n, m, c, tr ? &tr->producer : NULL);
  free(all);
  loops_free(l, n);
  return rc;
}

int sass_analyse(const char *text, const char *function, double flops_per_warp, sass_counts *out,
                 char *err, size_t errlen) {
  return sass_analyse_trace(text, function, flops_per_warp, out, NULL, err, errlen);
}

int sass_analyse_trace(const char *text, const char *function, double flops_per_warp,
                       sass_counts *out, sass_trace *trace, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (trace) memset(trace, 0, sizeof *trace);
  out->registers = -1;
  func f = {0};
  int found = parse_function(text, function, &f, err, errlen);
  if (found < 0) return func_free(&f), -1;
  if (!found) {
    func_free(&f);
    return function ? fail(err, errlen, "SASS: no function '%s'", function)
                    : fail(err, errlen, "SASS: no function (not nvdisasm output?)");
  }
  out->registers = f.registers;
  if (f.nin == 0) {
    func_free(&f);
    return 0;
  }
  int rc = resolve_labels(&f, err, errlen);
  if (rc == 0 && analyse(&f, flops_per_warp, out, trace) != 0)
    rc = fail(err, errlen, "out of memory analysing SASS");
  if (rc != 0) sass_trace_free(trace);
  func_free(&f);
  return rc;
}

int sass_functions(const char *text, char ***names, size_t *n, char *err, size_t errlen) {
  size_t count = 0, bytes = 0;
  for (const char *p = text; *p;) {
    const char *e = line_end(p), *nm;
    size_t len;
    if (section_name(p, e, &nm, &len)) count++, bytes += len + 1;
    p = *e ? e + 1 : e;
  }
  char **v = malloc(count * sizeof *v + bytes + 1);
  if (!v) return fail(err, errlen, "out of memory");
  char *s = (char *)(v + count);
  size_t k = 0;
  for (const char *p = text; *p;) {
    const char *e = line_end(p), *nm;
    size_t len;
    if (section_name(p, e, &nm, &len)) {
      memcpy(s, nm, len);
      s[len] = '\0';
      v[k++] = s;
      s += len + 1;
    }
    p = *e ? e + 1 : e;
  }
  *names = v, *n = count;
  return 0;
}

/* ---- nvdisasm ---- */

static int executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int in_dir(const char *dir, char *buf, size_t n) {
  if (!dir || !*dir) return 0;
  int w = snprintf(buf, n, "%s/nvdisasm", dir);
  return w > 0 && (size_t)w < n && executable(buf);
}

static int on_path(char *buf, size_t n) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char dir[4096];
  for (const char *p = path; *p;) {
    size_t len = strcspn(p, ":");
    if (len < sizeof dir) {
      memcpy(dir, p, len);
      dir[len] = '\0';
      if (in_dir(dir, buf, n)) return 1;
    }
    p += len + (p[len] == ':');
  }
  return 0;
}

/* The PyPI package's bin directory (nvidia/cu13/bin or nvidia/cuda_nvdisasm/bin). */
static int from_python(char *buf, size_t n) {
  static const char cmd[] =
    "python3 -c 'import nvidia, os\n"
    "for d in nvidia.__path__:\n"
    "  for s in (\"cu13/bin\", \"cu12/bin\", \"cuda_nvdisasm/bin\"):\n"
    "    p = os.path.join(d, s, \"nvdisasm\")\n"
    "    if os.access(p, os.X_OK): print(p); raise SystemExit\n' 2>/dev/null";
  pid_t pid;
  FILE *p = fa_proc_popen(cmd, &pid);
  if (!p) return 0;
  int ok = fgets(buf, (int)n, p) != NULL;
  if (fa_proc_pclose(p, pid) != 0) ok = 0;
  if (ok) buf[strcspn(buf, "\n")] = '\0';
  return ok && executable(buf);
}

int sass_find_nvdisasm(char *buf, size_t n) {
  const char *env = getenv("FATUNE_NVDISASM");
  if (env && *env) {
    int w = snprintf(buf, n, "%s", env);
    return w > 0 && (size_t)w < n && executable(buf) ? 0 : -1;
  }
  char dir[4096];
  const char *home = getenv("CUDA_HOME");
  if (on_path(buf, n)) return 0;
  if (home && snprintf(dir, sizeof dir, "%s/bin", home) < (int)sizeof dir && in_dir(dir, buf, n))
    return 0;
  if (in_dir("/usr/local/cuda/bin", buf, n)) return 0;
  return from_python(buf, n) ? 0 : -1;
}

/* Reads all of in into a malloc'ed string. */
static char *read_all(FILE *in) {
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      char *g = realloc(s, cap *= 2);
      if (!g) return free(s), NULL;
      s = g;
    }
    size_t r = fread(s + len, 1, 4096, in);
    len += r;
    if (r < 4096) break;
  }
  s[len] = '\0';
  return s;
}

/* nvdisasm's path and a file's, quoted for sh: neither may hold a quote. */
static int safe_path(const char *p) { return p && *p && !strchr(p, '\''); }

int sass_disassemble_file(const char *nvdisasm, const char *path, char **text, char *err,
                          size_t errlen) {
  if (!safe_path(nvdisasm) || !safe_path(path))
    return fail(err, errlen, "nvdisasm: a path with a quote in it");
  char cmd[8400];
  int w = snprintf(cmd, sizeof cmd, "'%s' -c -hex '%s' 2>&1", nvdisasm, path);
  if (w < 0 || (size_t)w >= sizeof cmd) return fail(err, errlen, "nvdisasm: path too long");
  pid_t pid;
  FILE *p = fa_proc_popen(cmd, &pid);
  if (!p) return fail(err, errlen, "nvdisasm: %s", strerror(errno));
  char *s = read_all(p);
  int st = fa_proc_pclose(p, pid);
  if (!s) return fail(err, errlen, "out of memory reading nvdisasm's output");
  if (st != 0) {
    s[strcspn(s, "\n")] = '\0';
    fail(err, errlen, "nvdisasm failed on %s: %s", path, s[0] ? s : "no message");
    free(s);
    return -1;
  }
  *text = s;
  return 0;
}

int sass_disassemble(const char *nvdisasm, const void *cubin, size_t size, char **text,
                     char *err, size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  char path[4096];
  int w = snprintf(path, sizeof path, "%s/fatune-sass-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (w < 0 || (size_t)w >= sizeof path) return fail(err, errlen, "TMPDIR too long");
  int fd = mkstemp(path);
  if (fd < 0) return fail(err, errlen, "a temporary cubin: %s", strerror(errno));
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(cubin, 1, size, f) == size;
  if (f ? fclose(f) != 0 : close(fd) != 0) ok = 0;
  int rc = ok ? sass_disassemble_file(nvdisasm, path, text, err, errlen)
              : fail(err, errlen, "writing a temporary cubin: %s", strerror(errno));
  if (unlink(path) != 0 && rc == 0) {
    free(*text);
    return fail(err, errlen, "removing %s: %s", path, strerror(errno));
  }
  return rc;
}
