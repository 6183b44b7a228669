/*
** report.c
** fatune report: the database's trials, read through its CSV export (the
** database's public face: no SQL here), grouped by device, dtype, dim and
** causal mask; per group the plots (report_plot.c) and tables; then one
** page, HTML or Markdown, that shows both. The page is written after
** gnuplot has run, so it shows only figures that exist, and says how to
** get them when gnuplot is not installed.
*/
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "db.h"
#include "estimate.h"
#include "fa_escape.h"
#include "report_int.h"

#define NO_GNUPLOT "the plots need gnuplot, which is not installed here: apt-get install " \
                   "gnuplot-nox (Debian's gnuplot without X), then run fatune report again"

/* ---- Reading the trials ---- */

/* The next record of CSV text at *p (RFC 4180, as db_export writes it):
** fields unquoted in place and NUL-terminated; the count, 0 at the end. */
static int csv_record(char **p, char **f, int max) {
  char *s = *p;
  int n = 0;
  if (!*s) return 0;
  for (;;) {
    char *start = s, *out = s;
    if (*s == '"') {
      for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
        if (*s == '"') s++;
        *out++ = *s;
      }
      if (*s) s++;
    } else {
      while (*s && *s != ',' && *s != '\n' && *s != '\r') out++, s++;
    }
    const char end = *s;
    *out = '\0';
    if (n < max) f[n++] = start;
    if (end) s++;
    if (end == ',') continue;
    if (end == '\r' && *s == '\n') s++;
    break;
  }
  *p = s;
  return n;
}

/* The value of "key" in a flat JSON object, strings unquoted; "" when absent. */
static void json_field(const char *obj, const char *key, char *out, size_t n) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(obj, pat);
  size_t i = 0;
  if (p) {
    p += strlen(pat);
    while (*p == ' ') p++;
    const int str = *p == '"';
    for (p += str; *p && i + 1 < n && (str ? *p != '"' : *p != ',' && *p != '}'); p++)
      out[i++] = *p;
  }
  out[i] = '\0';
}

static double json_num(const char *obj, const char *key) {
  char v[40];
  json_field(obj, key, v, sizeof v);
  char *end;
  const double x = strtod(v, &end);
  return v[0] && !*end ? x : NAN;
}

static double num(const char *s) {
  char *end;
  const double x = strtod(s, &end);
  return s[0] && !*end ? x : NAN;
}

enum { F_VARIANT, F_CONFIG, F_DEVICE, F_BACKEND, F_DTYPE, F_DIM, F_SEQ_Q, F_SEQ_K, F_BATCH,
       F_HEADS, F_CAUSAL, F_STATUS, F_REL, F_TFLOPS, F_GBPS, F_COUNTERS, NFIELDS };
static const char *const field_names[NFIELDS] = {
  "variant", "config", "device", "backend", "dtype", "dim", "seq_q", "seq_k", "batch",
  "heads", "causal", "status", "rel_err", "tflops", "gbps", "counters"};

static void trial_from(rp_trial *t, char *const *f) {
  memset(t, 0, sizeof *t);
  snprintf(t->variant, sizeof t->variant, "%s", f[F_VARIANT]);
  snprintf(t->device, sizeof t->device, "%s", f[F_DEVICE]);
  snprintf(t->backend, sizeof t->backend, "%s", f[F_BACKEND]);
  snprintf(t->dtype, sizeof t->dtype, "%s", f[F_DTYPE]);
  snprintf(t->status, sizeof t->status, "%s", f[F_STATUS]);
  t->dim = atoi(f[F_DIM]), t->seq_q = atoi(f[F_SEQ_Q]), t->seq_k = atoi(f[F_SEQ_K]);
  t->causal = atoi(f[F_CAUSAL]);
  t->esize = !strcmp(t->dtype, "fp64") ? 8 : !strcmp(t->dtype, "fp32") ? 4 : 2;
  char family[16], split[16], bm[8], bn[8];
  const char *cfg = f[F_CONFIG];
  json_field(cfg, "family", family, sizeof family);
  json_field(cfg, "norm", t->norm, sizeof t->norm);
  json_field(cfg, "par", t->par, sizeof t->par);
  json_field(cfg, "split", split, sizeof split);
  json_field(cfg, "block_m", bm, sizeof bm);
  json_field(cfg, "block_n", bn, sizeof bn);
  if (!t->par[0]) snprintf(t->par, sizeof t->par, "%s", family);
  if (split[0]) snprintf(t->design, sizeof t->design, "%s/%s/%s", t->norm, t->par, split);
  else snprintf(t->design, sizeof t->design, "%s/%s", family, t->norm);
  snprintf(t->tile, sizeof t->tile, "%sx%s", bm, bn);
  char warps[8], layout[16], q[8], stages[8];
  json_field(cfg, "warps", warps, sizeof warps);
  json_field(cfg, "layout", layout, sizeof layout);
  json_field(cfg, "q", q, sizeof q);
  json_field(cfg, "stages", stages, sizeof stages);
  snprintf(t->rest, sizeof t->rest, "tile %s, %s warps, %s layout, Q in %s%s%s", t->tile, warps,
           layout, q, stages[0] ? ", stages " : "", stages);
  const double bh = num(f[F_BATCH]) * num(f[F_HEADS]);
  const char *ctr = f[F_COUNTERS];
  t->gbytes = (json_num(ctr, "global_bytes_read") + json_num(ctr, "global_bytes_written")) / bh;
  t->rescale = json_num(ctr, "rescale_count") / bh;
  t->tflops = num(f[F_TFLOPS]);
  t->gbps = num(f[F_GBPS]);
  t->rel_err = num(f[F_REL]);
}

/* Maps the header's columns to the fields we read; -1 when one is missing. */
static int map_header(char *const *h, int nh, int *col) {
  for (int i = 0; i < NFIELDS; i++) {
    col[i] = -1;
    for (int j = 0; j < nh; j++)
      if (!strcmp(h[j], field_names[i])) col[i] = j;
    if (col[i] < 0) return -1;
  }
  return 0;
}

static int parse_trials(rp_ctx *c, char *csv, size_t rows, char *err, size_t errlen) {
  char *f[40], *p = csv, *mine[NFIELDS];
  int col[NFIELDS];
  const int nh = csv_record(&p, f, 40);
  if (map_header(f, nh, col) != 0) {
    snprintf(err, errlen, "the database's export lacks a column this report reads");
    return -1;
  }
  c->t = calloc(rows ? rows : 1, sizeof *c->t);
  if (!c->t) {
    snprintf(err, errlen, "out of memory for %zu trials", rows);
    return -1;
  }
  int n;
  while (c->n < rows && (n = csv_record(&p, f, 40)) > 0) {
    if (n < nh) continue;
    for (int i = 0; i < NFIELDS; i++) mine[i] = f[col[i]];
    trial_from(&c->t[c->n++], mine);
  }
  return 0;
}

/* A GPU trial whose variant has an estimate for that device's GPU. */
static int add_estimate(const db_sass_point *p, void *ud) {
  rp_ctx *c = ud;
  const estimate_gpu *g = estimate_gpu_for_device(p->device);
  if (!g || strcmp(g->name, p->gpu)) return 0;
  if (c->nest == c->capest) {
    size_t cap = c->capest ? 2 * c->capest : 64;
    rp_est *e = realloc(c->est, cap * sizeof *e);
    if (!e) return 1;
    c->est = e, c->capest = cap;
  }
  rp_est *e = &c->est[c->nest++];
  snprintf(e->device, sizeof e->device, "%s", p->device);
  snprintf(e->dtype, sizeof e->dtype, "%s", p->dtype);
  e->seq_q = p->seq_q, e->registers = p->registers, e->ctas_per_sm = p->ctas_per_sm;
  e->est = p->est_tflops, e->measured = p->measured_tflops;
  return 0;
}

/* A baseline of PyTorch's, as the database checked it. */
static int add_baseline(const db_baseline_row *b, void *ud) {
  rp_ctx *c = ud;
  if (c->nbase == c->capbase) {
    size_t cap = c->capbase ? 2 * c->capbase : 16;
    rp_base *n = realloc(c->base, cap * sizeof *n);
    if (!n) return 1;
    c->base = n, c->capbase = cap;
  }
  rp_base *r = &c->base[c->nbase++];
  snprintf(r->gpu, sizeof r->gpu, "%s", b->gpu);
  snprintf(r->backend, sizeof r->backend, "%s", b->backend);
  snprintf(r->dtype, sizeof r->dtype, "%s", b->dtype);
  snprintf(r->torch, sizeof r->torch, "%s", b->torch_version);
  r->dim = b->dim, r->seq_q = b->seq_q, r->seq_k = b->seq_k, r->batch = b->batch;
  r->heads = b->heads, r->causal = b->causal;
  r->median_us = b->median_us, r->tflops = b->tflops;
  return 0;
}

static int load(rp_ctx *c, char *err, size_t errlen) {
  db *d;
  char *csv = NULL;
  size_t len = 0, rows = 0;
  if (db_open(c->o->db, DB_READONLY, &d, err, errlen) != 0) return -1;
  snprintf(c->db_path, sizeof c->db_path, "%s", db_path(d));
  FILE *f = open_memstream(&csv, &len);
  int rc = -1;
  if (!f) snprintf(err, errlen, "cannot buffer the trials: %s", strerror(errno));
  else if (db_export(d, "csv", f, &rows, err, errlen) == 0) rc = 0;
  if (f && fclose(f) != 0 && rc == 0) {
    snprintf(err, errlen, "cannot buffer the trials");
    rc = -1;
  }
  if (rc == 0) rc = parse_trials(c, csv, rows, err, errlen);
  if (rc == 0) rc = db_sass_points(d, add_estimate, c, err, errlen);
  if (rc == 0) rc = db_baselines(d, add_baseline, c, err, errlen);
  free(csv);
  if (db_close(d) != 0 && rc == 0) {
    snprintf(err, errlen, "closing the database failed");
    rc = -1;
  }
  return rc;
}

/* ---- Groups ---- */

static int same_key(const rp_trial *a, const rp_trial *b, int heat) {
  return !strcmp(a->device, b->device) && !strcmp(a->backend, b->backend) &&
         !strcmp(a->dtype, b->dtype) && a->causal == b->causal &&
         (heat || (a->dim == b->dim && a->seq_k - a->seq_q == b->seq_k - b->seq_q));
}

static int add_to_group(rp_ctx *c, size_t i, int heat) {
  const rp_trial *t = &c->t[i];
  size_t g = 0;
  while (g < c->ng && !(c->g[g].heat == heat && same_key(c->g[g].key, t, heat))) g++;
  if (g == c->ng) {
    rp_group *ng = realloc(c->g, (c->ng + 1) * sizeof *ng);
    if (!ng) return -1;
    c->g = ng;
    c->g[c->ng++] = (rp_group){.key = t, .heat = heat};
  }
  size_t *idx = realloc(c->g[g].idx, (c->g[g].n + 1) * sizeof *idx);
  if (!idx) return -1;
  c->g[g].idx = idx;
  idx[c->g[g].n++] = i;
  return 0;
}

/* The line groups, then the heat maps'. */
static int group_all(rp_ctx *c) {
  for (size_t i = 0; i < c->n; i++)
    if (add_to_group(c, i, 0) != 0) return -1;
  for (size_t i = 0; i < c->n; i++)
    if (c->t[i].seq_q == c->t[i].seq_k && add_to_group(c, i, 1) != 0) return -1;
  return 0;
}

/* The (device, dtype) pairs of the timed GPU trials, in the order met. */
static int gpu_keys(rp_ctx *c) {
  for (size_t i = 0; i < c->n; i++) {
    size_t k = 0;
    while (k < c->ngpu && !rp_roof_point(&c->t[i], c->gpu[k])) k++;
    if (k < c->ngpu || !rp_roof_point(&c->t[i], &c->t[i])) continue;
    const rp_trial **g = realloc(c->gpu, (c->ngpu + 1) * sizeof *g);
    if (!g) return -1;
    c->gpu = g;
    c->gpu[c->ngpu++] = &c->t[i];
  }
  return 0;
}

/* The (GPU, dtype, dim, causal, seq_k - seq_q) keys of the baselines. */
static int base_keys(rp_ctx *c) {
  for (size_t i = 0; i < c->nbase; i++) {
    size_t k = 0;
    while (k < c->nbkey && !rp_base_of(&c->base[i], c->bkey[k])) k++;
    if (k < c->nbkey) continue;
    const rp_base **b = realloc(c->bkey, (c->nbkey + 1) * sizeof *b);
    if (!b) return -1;
    c->bkey = b;
    c->bkey[c->nbkey++] = &c->base[i];
  }
  return 0;
}

static void group_title(const rp_group *g, char *buf, size_t n) {
  const rp_trial *k = g->key;
  char extra[48] = "";
  if (!g->heat && k->seq_k != k->seq_q)
    snprintf(extra, sizeof extra, ", seq_k = seq_q %+d", k->seq_k - k->seq_q);
  if (g->heat)
    snprintf(buf, n, "%.100s (%s), %s%s: best tile per (dim, seq)", k->device, k->backend, k->dtype,
             k->causal ? " causal" : "");
  else
    snprintf(buf, n, "%.100s (%s), %s dim %d%s%s", k->device, k->backend, k->dtype, k->dim,
             k->causal ? " causal" : "", extra);
}

/* ---- Plots ---- */

/* The FlashAttention paper's standard attention (Algorithm 0) per head:
** 2 (N_q + N_k) d + 4 N_q N_k elements through global memory. */
static void add_standard(const rp_group *g, rp_matrix *m) {
  if (m->nser == RP_MAX_SERIES) return;
  const rp_trial *k = g->key;
  snprintf(m->ser[m->nser], sizeof m->ser[0], "standard_attention(paper)");
  for (int i = 0; i < m->nx; i++) {
    const double nq = m->x[i], nk = nq + (k->seq_k - k->seq_q);
    m->v[m->nser][i] = k->esize * (2 * (nq + nk) * k->dim + 4 * nq * nk);
  }
  m->nser++;
}

static int plot_group(rp_ctx *c, size_t gi) {
  const rp_group *g = &c->g[gi];
  char title[200], full[400], png[64];
  rp_matrix m;
  group_title(g, title, sizeof title);
  c->cur_group = (int)gi;
  if (g->heat) {
    rp_heat(c, g, &m);
    snprintf(png, sizeof png, "h%zu-tiles.png", gi);
    return m.nx * m.ny > 1 ? rp_plot_heat(c, png, title, &m) : 0;   /* one cell: the table */
  }
  const int gpu = rp_gpu(g->key);
  /* One sequence length is no line: the tables under the plots hold it. */
  rp_lines(c, g, gpu ? RP_TFLOPS : RP_GBYTES, 0, &m);
  snprintf(png, sizeof png, "g%zu-design.png", gi);
  snprintf(full, sizeof full, "%s: %s per FlashAttention design, matched variants", title,
           gpu ? "TFLOP/s" : "global-memory bytes per head");
  if (m.nx > 1 &&
      rp_plot_lines(c, png, full, gpu ? "TFLOP/s" : "bytes per (batch x head)", &m, !gpu))
    return -1;
  rp_lines(c, g, RP_GBYTES, 1, &m);
  if (m.nx > 1) {
    add_standard(g, &m);
    snprintf(png, sizeof png, "g%zu-gmem.png", gi);
    snprintf(full, sizeof full, "%s: global-memory bytes per head by loop order, and standard "
             "attention's", title);
    if (rp_plot_lines(c, png, full, "bytes per (batch x head)", &m, 1) != 0) return -1;
  }
  rp_lines(c, g, RP_RESCALE, 2, &m);
  snprintf(png, sizeof png, "g%zu-rescale.png", gi);
  snprintf(full, sizeof full, "%s: rescale multiplies per head, the fewest of each "
           "normalization", title);
  return m.nx > 1 ? rp_plot_lines(c, png, full, "rescales per (batch x head)", &m, 1) : 0;
}

/* The distinct register counts of c->gpu[k]'s SASS figures, up to 2. */
static int register_counts(const rp_ctx *c, size_t k) {
  int first = -1;
  for (size_t i = 0; i < c->nest; i++) {
    const rp_est *e = &c->est[i];
    if (!rp_est_of(e, c->gpu[k]) || e->registers < 0) continue;
    if (first < 0) first = e->registers;
    else if (e->registers != first) return 2;
  }
  return first >= 0;
}

static void gpu_title(const rp_trial *key, char *buf, size_t n) {
  snprintf(buf, n, "%.100s (%s), %s", key->device, key->backend, key->dtype);
}

/* The roofline of c->gpu[k]; its registers plot when its variants differ
** in registers (one count is a table row). */
static int plot_gpu(rp_ctx *c, size_t k) {
  char head[160], title[400], png[64];
  gpu_title(c->gpu[k], head, sizeof head);
  c->cur_group = RP_GPU_GROUP(k);
  snprintf(png, sizeof png, "gpu%zu-roofline.png", k);
  snprintf(title, sizeof title, "%s: roofline, attained TFLOP/s against FLOPs per byte of Q, K, "
           "V, O and LSE", head);
  if (rp_plot_roofline(c, k, png, title) != 0) return -1;
  if (register_counts(c, k) < 2) return 0;
  snprintf(png, sizeof png, "gpu%zu-registers.png", k);
  snprintf(title, sizeof title, "%s: TFLOP/s against registers per thread, coloured by CTAs "
           "per SM", head);
  return rp_plot_registers(c, k, png, title);
}

static void base_title(const rp_base *key, char *buf, size_t n) {
  char extra[48] = "";
  if (key->seq_k != key->seq_q)
    snprintf(extra, sizeof extra, ", seq_k = seq_q %+d", key->seq_k - key->seq_q);
  snprintf(buf, n, "%.100s (cuda), %s dim %d%s%s", key->gpu, key->dtype, key->dim,
           key->causal ? " causal" : "", extra);
}

/* fatune's best TFLOP/s against seq_len beside PyTorch's, where fatune has
** trials on that GPU and there are two lengths or more (one is the table). */
static int plot_base(rp_ctx *c, size_t k) {
  char head[200], title[400], png[64];
  rp_matrix m;
  rp_base_lines(c, k, &m);
  int fatune = 0;
  for (int i = 0; i < m.nx; i++) fatune += isfinite(m.v[0][i]);
  if (!fatune || m.nx < 2) return 0;
  base_title(c->bkey[k], head, sizeof head);
  c->cur_group = RP_BASE_GROUP(k);
  snprintf(png, sizeof png, "base%zu-sdpa.png", k);
  snprintf(title, sizeof title, "%s: TFLOP/s against seq_len, fatune's best variant and "
           "PyTorch's scaled_dot_product_attention", head);
  return rp_plot_lines(c, png, title, "TFLOP/s", &m, 0);
}

/* ---- The page ---- */

typedef struct page {
  FILE *f;
  int md;
} page;

/* Every text the page shows, the database's included, goes through here. */
static void text(const page *p, const char *s) {
  if (p->md) fa_esc_md(p->f, s);
  else fa_esc_html(p->f, s);
}

static void heading(const page *p, int level, const char *s) {
  if (p->md) fprintf(p->f, "\n%.*s ", level, "###");
  else fprintf(p->f, "<h%d>", level);
  text(p, s);
  if (p->md) fputs("\n\n", p->f);
  else fprintf(p->f, "</h%d>\n", level);
}

static void para(const page *p, const char *s) {
  fputs(p->md ? "" : "<p>", p->f);
  text(p, s);
  fputs(p->md ? "\n\n" : "</p>\n", p->f);
}

static void figure(const page *p, const rp_figure *f) {
  if (p->md) {
    fputs("![", p->f);
    text(p, f->title);
    fprintf(p->f, "](%s)\n\n", f->png);
  } else {
    fprintf(p->f, "<figure><img src=\"%s\" alt=\"", f->png);
    text(p, f->title);
    fputs("\"><figcaption>", p->f);
    text(p, f->title);
    fputs("</figcaption></figure>\n", p->f);
  }
}

/* A table row; header rows get a Markdown rule under them. */
static void table_row(const page *p, char cells[][64], int n, int head) {
  if (head && !p->md) fputs("<table>\n", p->f);
  fputs(p->md ? "|" : "<tr>", p->f);
  for (int i = 0; i < n; i++) {
    fputs(p->md ? " " : head ? "<th>" : "<td>", p->f);
    text(p, cells[i]);
    fputs(p->md ? " |" : head ? "</th>" : "</td>", p->f);
  }
  fputs(p->md ? "\n" : "</tr>\n", p->f);
  if (head && p->md) {
    fputc('|', p->f);
    for (int i = 0; i < n; i++) fputs(" --- |", p->f);
    fputc('\n', p->f);
  }
}

static void table_end(const page *p) { fputs(p->md ? "\n" : "</table>\n", p->f); }

static void fmt_value(char *buf, size_t n, double v, rp_metric m) {
  if (!isfinite(v)) snprintf(buf, n, "-");
  else if (m == RP_TFLOPS) snprintf(buf, n, "%.2f", v);
  else snprintf(buf, n, "%.0f", v);
}

/* The best variant at each seq_q of a line group. */
static void best_table(const page *p, const rp_ctx *c, const rp_group *g) {
  const rp_metric m = rp_gpu(g->key) ? RP_TFLOPS : RP_GBYTES;
  char cells[5][64] = {"seq_q", "seq_k", "best variant", "", "norm-relative error"};
  snprintf(cells[3], sizeof cells[3], "%s", m == RP_TFLOPS ? "TFLOP/s" : "global bytes per head");
  heading(p, 3, "Best variant per sequence length");
  table_row(p, cells, 5, 1);
  rp_matrix x;
  rp_lines(c, g, m, 0, &x);
  for (int i = 0; i < x.nx; i++) {
    const rp_trial *b = NULL;
    for (size_t j = 0; j < g->n; j++) {
      const rp_trial *t = &c->t[g->idx[j]];
      if (t->seq_q == x.x[i] && !strcmp(t->status, "ok") && isfinite(rp_value(t, m)) &&
          (!b || rp_better(m, rp_value(t, m), rp_value(b, m))))
        b = t;
    }
    snprintf(cells[0], 64, "%d", b->seq_q);
    snprintf(cells[1], 64, "%d", b->seq_k);
    snprintf(cells[2], 64, "%.63s", b->variant);
    fmt_value(cells[3], 64, rp_value(b, m), m);
    snprintf(cells[4], 64, "%.2e", b->rel_err);
    table_row(p, cells, 5, 0);
  }
  table_end(p);
}

/* A matrix as a table: a row per x, a column per series. */
static void matrix_table(const page *p, const char *title, const rp_matrix *x, rp_metric m) {
  char cells[RP_MAX_SERIES + 1][64];
  heading(p, 3, title);
  snprintf(cells[0], 64, "seq_q");
  for (int s = 0; s < x->nser; s++) snprintf(cells[s + 1], 64, "%s", x->ser[s]);
  table_row(p, cells, x->nser + 1, 1);
  for (int i = 0; i < x->nx; i++) {
    snprintf(cells[0], 64, "%d", x->x[i]);
    for (int s = 0; s < x->nser; s++) fmt_value(cells[s + 1], 64, x->v[s][i], m);
    table_row(p, cells, x->nser + 1, 0);
  }
  table_end(p);
}

static void heat_table(const page *p, const rp_matrix *x) {
  char cells[RP_MAX_SEQ + 1][64];
  heading(p, 3, "Best tile (block_m x block_n) per dim and sequence length");
  snprintf(cells[0], 64, "dim \\ seq");
  for (int i = 0; i < x->nx; i++) snprintf(cells[i + 1], 64, "%d", x->x[i]);
  table_row(p, cells, x->nx + 1, 1);
  for (int y = 0; y < x->ny; y++) {
    snprintf(cells[0], 64, "%d", x->y[y]);
    for (int i = 0; i < x->nx; i++)
      snprintf(cells[i + 1], 64, "%s", x->cell[i][y] ? x->cell[i][y]->tile : "-");
    table_row(p, cells, x->nx + 1, 0);
  }
  table_end(p);
}

static void group_section(const page *p, const rp_ctx *c, size_t gi) {
  const rp_group *g = &c->g[gi];
  char title[200];
  group_title(g, title, sizeof title);
  heading(p, 2, title);
  for (size_t i = 0; i < c->nfig; i++)
    if (c->fig[i].group == (int)gi) figure(p, &c->fig[i]);
  rp_matrix m;
  if (g->heat) {
    rp_heat(c, g, &m);
    heat_table(p, &m);
    return;
  }
  best_table(p, c, g);
  const rp_metric metric = rp_gpu(g->key) ? RP_TFLOPS : RP_GBYTES;
  rp_lines(c, g, metric, 0, &m);
  char what[200];
  snprintf(what, sizeof what, "%s of each design, matched variants (%s)",
           metric == RP_TFLOPS ? "TFLOP/s" : "Global bytes per head", m.matched);
  matrix_table(p, what, &m, metric);
  rp_lines(c, g, RP_RESCALE, 2, &m);
  if (m.nx) matrix_table(p, "Rescale multiplies per head, the fewest of each normalization", &m,
                         RP_RESCALE);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* GPU trials against the static SASS estimate: the plot, and the median
** of measured / estimated. */
static void estimate_section(const page *p, const rp_ctx *c) {
  heading(p, 2, "Static estimate against measurement");
  double *r = malloc(c->nest * sizeof *r);
  char line[400];
  if (r) {
    for (size_t i = 0; i < c->nest; i++) r[i] = c->est[i].measured / c->est[i].est;
    qsort(r, c->nest, sizeof *r, cmp_double);
  }
  snprintf(line, sizeof line, "%zu GPU trials beside the static estimate for their variant "
           "(an upper bound from the main loop's machine code: tensor pipe, MUFU, instruction "
           "issue, shared memory, one warp's mma.sync then softmax; no other latency). Median measured / estimated: %s%.2f.",
           c->nest, r ? "" : "?", r ? r[c->nest / 2] : 0.0);
  free(r);
  para(p, line);
  for (size_t i = 0; i < c->nfig; i++)
    if (c->fig[i].group == RP_EST_GROUP) figure(p, &c->fig[i]);
}

/* The best trial at each (seq_q, dim) of c->gpu[k] against its roof. */
static void roof_table(const page *p, const rp_ctx *c, size_t k, const estimate_gpu *g,
                       double peak) {
  char cells[6][64] = {"seq_q", "dim", "FLOP per byte", "best TFLOP/s", "roof TFLOP/s",
                       "of the roof"};
  heading(p, 3, g ? "Best trial per shape against the roof" : "Best trial per shape");
  table_row(p, cells, g ? 6 : 4, 1);
  for (size_t i = 0; i < c->n; i++) {
    const rp_trial *t = &c->t[i], *b = t;
    if (!rp_roof_point(t, c->gpu[k])) continue;
    size_t j = 0;   /* the shape's first trial writes its row */
    while (j < i && !(rp_roof_point(&c->t[j], t) && c->t[j].seq_q == t->seq_q &&
                      c->t[j].dim == t->dim && c->t[j].seq_k == t->seq_k &&
                      c->t[j].causal == t->causal))
      j++;
    if (j < i) continue;
    for (j = i + 1; j < c->n; j++)
      if (rp_roof_point(&c->t[j], t) && c->t[j].seq_q == t->seq_q && c->t[j].dim == t->dim &&
          c->t[j].seq_k == t->seq_k && c->t[j].causal == t->causal &&
          c->t[j].tflops > b->tflops)
        b = &c->t[j];
    const double ai = 1e3 * b->tflops / b->gbps, roof = g ? fmin(peak, g->dram_gbs * ai / 1e3) : 0;
    snprintf(cells[0], 64, "%d%s", b->seq_q, b->causal ? " causal" : "");
    snprintf(cells[1], 64, "%d", b->dim);
    snprintf(cells[2], 64, "%.0f", ai);
    snprintf(cells[3], 64, "%.1f", b->tflops);
    snprintf(cells[4], 64, "%.1f", roof);
    snprintf(cells[5], 64, "%.0f%%", 100 * b->tflops / roof);
    table_row(p, cells, g ? 6 : 4, 0);
  }
  table_end(p);
}

/* Trials by (registers, CTAs per SM): how many, the best TFLOP/s. */
static void registers_table(const page *p, const rp_ctx *c, size_t k) {
  char cells[4][64] = {"registers per thread", "CTAs per SM", "trials", "best TFLOP/s"};
  heading(p, 3, "Registers, occupancy and TFLOP/s");
  table_row(p, cells, 4, 1);
  int last = -1;
  for (;;) {   /* ascending registers, then CTAs: the next pair above the last */
    int next = -1;
    for (size_t i = 0; i < c->nest; i++) {
      const rp_est *e = &c->est[i];
      const int key = e->registers * 64 + e->ctas_per_sm;
      if (rp_est_of(e, c->gpu[k]) && e->registers >= 0 && e->ctas_per_sm >= 0 &&
          e->ctas_per_sm < 64 && key > last && (next < 0 || key < next))
        next = key;
    }
    if (next < 0) break;
    size_t n = 0;
    double best = 0;
    for (size_t i = 0; i < c->nest; i++) {
      const rp_est *e = &c->est[i];
      if (rp_est_of(e, c->gpu[k]) && e->registers * 64 + e->ctas_per_sm == next &&
          e->registers >= 0 && e->ctas_per_sm >= 0)
        n++, best = fmax(best, e->measured);
    }
    snprintf(cells[0], 64, "%d", next / 64);
    snprintf(cells[1], 64, "%d", next % 64);
    snprintf(cells[2], 64, "%zu", n);
    snprintf(cells[3], 64, "%.1f", best);
    table_row(p, cells, 4, 0);
    last = next;
  }
  table_end(p);
}

/* c->gpu[k]'s roofline and registers: the figures, the roofs, tables. */
static void gpu_section(const page *p, const rp_ctx *c, size_t k) {
  const rp_trial *key = c->gpu[k];
  char head[160], line[700];
  gpu_title(key, head, sizeof head);
  snprintf(line, sizeof line, "%s: roofline and registers", head);
  heading(p, 2, line);
  const estimate_gpu *g = estimate_gpu_for_device(key->device);
  const double peak = g ? estimate_peak_tflops(g, key->dtype) : 0;
  if (g && peak > 0)
    snprintf(line, sizeof line, "Roofs (%s's figures in the estimate's table): %.0f TFLOP/s, "
             "the dense %s peak; %.0f GB/s of DRAM bandwidth; the ridge at %.0f FLOP per byte. "
             "The intensity counts the bytes every variant must move (Q, K and V read once, O "
             "and LSE written once): it is the shape's, so a variant that moves more shows "
             "lower, not further left.", g->name, peak, key->dtype, g->dram_gbs,
             1e3 * peak / g->dram_gbs);
  else
    snprintf(line, sizeof line, "No roofs: the estimate's table has no figures for this "
             "device (it knows %s).", estimate_gpu_names());
  para(p, line);
  for (size_t i = 0; i < c->nfig; i++)
    if (c->fig[i].group == RP_GPU_GROUP(k)) figure(p, &c->fig[i]);
  roof_table(p, c, k, g && peak > 0 ? g : NULL, peak);
  if (register_counts(c, k)) registers_table(p, c, k);
  else if (g)
    para(p, "No registers recorded for these trials: the main job with --sass records "
            "each variant's registers and CTAs per SM (the database's sass table).");
  else
    para(p, "No registers plot: the report takes registers and CTAs per SM from the SASS "
            "estimate, which has no figures for this device.");
}

/* c->bkey[k]: the figure, and a table of fatune against each backend. */
static void base_table(const page *p, const rp_ctx *c, size_t k) {
  const rp_base *key = c->bkey[k];
  char head[200], line[600], cells[RP_MAX_SERIES + 2][64];
  rp_matrix m;
  base_title(key, head, sizeof head);
  heading(p, 3, head);
  for (size_t i = 0; i < c->nfig; i++)
    if (c->fig[i].group == RP_BASE_GROUP(k)) figure(p, &c->fig[i]);
  rp_base_lines(c, k, &m);
  int fatune = 0;
  for (int i = 0; i < m.nx; i++) fatune += isfinite(m.v[0][i]);
  if (!fatune) {
    snprintf(line, sizeof line, "No fatune trial timed on %s for this problem: tune it there "
             "(fatune --dim %d --seq N --dtype %s%s) to draw fatune beside PyTorch.", key->gpu,
             key->dim, key->dtype, key->causal ? " --causal" : "");
    para(p, line);
  } else if (m.nx < 2) {
    para(p, "One sequence length: the table holds it (a plot needs two).");
  }
  snprintf(cells[0], 64, "seq_q");
  for (int s = 0; s < m.nser; s++) snprintf(cells[s + 1], 64, "%s TFLOP/s", m.ser[s]);
  snprintf(cells[m.nser + 1], 64, "fatune / fastest PyTorch");
  table_row(p, cells, m.nser + 2, 1);
  for (int i = 0; i < m.nx; i++) {
    double torch = NAN;
    snprintf(cells[0], 64, "%d", m.x[i]);
    for (int s = 0; s < m.nser; s++) {
      fmt_value(cells[s + 1], 64, m.v[s][i], RP_TFLOPS);
      if (s && isfinite(m.v[s][i]) && !(torch >= m.v[s][i])) torch = m.v[s][i];
    }
    if (isfinite(m.v[0][i]) && isfinite(torch))
      snprintf(cells[m.nser + 1], 64, "%.2f", m.v[0][i] / torch);
    else
      snprintf(cells[m.nser + 1], 64, "-");
    table_row(p, cells, m.nser + 2, 0);
  }
  table_end(p);
  const rp_base *b = NULL;
  for (size_t i = 0; i < c->nbase && !b; i++)
    if (rp_base_of(&c->base[i], key)) b = &c->base[i];
  snprintf(line, sizeof line, "PyTorch %s, batch %d, heads %d; TFLOP/s counted as fatune's "
           "(4 x batch x heads x seq_q x seq_k x dim, the causal mask's half).", b->torch,
           b->batch, b->heads);
  para(p, line);
}

/* fatune against PyTorch's attention, or why there is no such figure. */
static void base_section(const page *p, const rp_ctx *c) {
  heading(p, 2, "fatune against PyTorch's scaled_dot_product_attention");
  if (!c->nbase) {
    para(p, c->ngpu
       ? "No figure of TFLOP/s against PyTorch: the database holds no baseline. "
         "scripts/gpu-check.sh times PyTorch's scaled_dot_product_attention on the GPU and "
         "records it; fatune baseline FILE.csv records any such measurement."
       : "No figure of TFLOP/s against PyTorch: the database holds no baseline, and no "
         "trial timed on a GPU (emulator figures are counts, not times). On a GPU, "
         "scripts/gpu-check.sh tunes, times PyTorch's scaled_dot_product_attention and "
         "records both.");
    return;
  }
  for (size_t k = 0; k < c->nbkey; k++) base_table(p, c, k);
}

static const char style[] =
  "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
  "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
  "text-align:right}img{max-width:100%}</style>\n";

static int write_page(const rp_ctx *c, const char *plots_note, char *path, size_t n) {
  const int md = c->o->format && !strcmp(c->o->format, "md");
  snprintf(path, n, "%s/report.%s", c->dir, md ? "md" : "html");
  page p = {.f = fopen(path, "w"), .md = md};
  if (!p.f) return -1;
  if (!md)
    fprintf(p.f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fatune report"
                 "</title>\n%s</head><body>\n", style);
  heading(&p, 1, "fatune report");
  char line[1400];
  size_t ok = 0;
  for (size_t i = 0; i < c->n; i++) ok += !strcmp(c->t[i].status, "ok");
  const time_t now = time(NULL);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  snprintf(line, sizeof line, "%zu trials (%zu ok) from %s, %s. Emulator figures are exact "
           "counts, never GPU performance; a GPU's are timed. Each plot shows the best variant "
           "of each series at each length.", c->n, ok, c->db_path, when);
  para(&p, line);
  if (plots_note) para(&p, plots_note);
  for (size_t g = 0; g < c->ng; g++) group_section(&p, c, g);
  for (size_t k = 0; k < c->ngpu; k++) gpu_section(&p, c, k);
  base_section(&p, c);
  if (c->nest) estimate_section(&p, c);
  if (!md) fputs("</body></html>\n", p.f);
  const int bad = ferror(p.f);
  return fclose(p.f) != 0 || bad ? -1 : 0;
}

/* ---- The command ---- */

static int make_dir(const char *dir, char *err, size_t errlen) {
  struct stat sb;
  if (mkdir(dir, 0755) == 0 || (errno == EEXIST && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)))
    return 0;
  snprintf(err, errlen, "cannot make the directory %s: %s", dir,
           errno == EEXIST ? "a file is in the way" : strerror(errno));
  return -1;
}

static int plot_all(rp_ctx *c, char *script, size_t n, char *err, size_t errlen) {
  snprintf(script, n, "%s/plots.gp", c->dir);
  if (!(c->gp = fopen(script, "w"))) {
    snprintf(err, errlen, "cannot write %.400s: %s", script, strerror(errno));
    return -1;
  }
  fprintf(c->gp, "# fatune report: every plot; paths are relative to this folder, so\n"
                 "# cd into it and run gnuplot plots.gp to draw them again.\n"
                 "set terminal pngcairo size 1100,680 noenhanced font ',13'\n");
  int rc = 0;
  for (size_t g = 0; rc == 0 && g < c->ng; g++) rc = plot_group(c, g);
  c->cur_group = RP_EST_GROUP;
  if (rc == 0 && c->nest)
    rc = rp_plot_estimate(c, "estimate.png", "GPU trials: measured TFLOP/s against the static "
                                             "SASS estimate for their variant");
  for (size_t k = 0; rc == 0 && k < c->ngpu; k++) rc = plot_gpu(c, k);
  for (size_t k = 0; rc == 0 && k < c->nbkey; k++) rc = plot_base(c, k);
  const int bad = ferror(c->gp);
  if (fclose(c->gp) != 0 || bad) rc = -1;
  c->gp = NULL;
  if (rc != 0) snprintf(err, errlen, "cannot write the plots' files in %s", c->dir);
  return rc;
}

static void ctx_free(rp_ctx *c) {
  for (size_t g = 0; g < c->ng; g++) free(c->g[g].idx);
  free(c->g), free(c->t), free(c->fig), free(c->est), free(c->gpu);
  free(c->base), free(c->bkey);
}

int report_main(const cli_opts *o) {
  rp_ctx c = {.o = o, .dir = o->out ? o->out : "fatune-report"};
  char err[600], script[1100], path[1100], note[700];
  const char *plots_note = NULL;
  int rc = 1;
  err[0] = '\0';
  if (load(&c, err, sizeof err) != 0) {
    cli_say(1, err);
    goto done;
  }
  if (c.n == 0) {
    cli_say(1, "the database holds no trials yet: run fatune or fatune explore first");
    goto done;
  }
  if (make_dir(c.dir, err, sizeof err) != 0 || group_all(&c) != 0 || gpu_keys(&c) != 0 || base_keys(&c) != 0 ||
      plot_all(&c, script, sizeof script, err, sizeof err) != 0) {
    cli_say(1, err[0] ? err : "out of memory");
    goto done;
  }
  const int g = rp_gnuplot(&c, err, sizeof err);
  if (g != 0) {
    snprintf(note, sizeof note, "%s", g > 0 ? NO_GNUPLOT : err);
    plots_note = note;
    c.nfig = 0;   /* show none of them */
    fprintf(stderr, "fatune: %s\n", note);
  }
  if (write_page(&c, plots_note, path, sizeof path) != 0) {
    fprintf(stderr, "fatune: cannot write %s\n", path);
    goto done;
  }
  printf("%s\n", path);
  fprintf(stderr, "fatune: report of %zu trials in %s, %zu plots\n", c.n, path, c.nfig);
  rc = g < 0 ? 1 : 0;
done:
  ctx_free(&c);
  return rc;
}
