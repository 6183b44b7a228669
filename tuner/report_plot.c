/*
** report_plot.c
** The report's plots: the numbers of each (best per sequence length and
** series, or best tile per dim and seq), written as gnuplot data files
** and commands in one script, then one gnuplot run for all of them.
** gnuplot is found on PATH; when it is not there the report keeps its
** tables. Every figure gnuplot should have drawn is checked for.
*/
#define _GNU_SOURCE   /* posix_spawn_file_actions_addchdir_np (glibc 2.29) */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "estimate.h"
#include "fa_escape.h"
#include "fa_proc.h"
#include "report_int.h"

extern char **environ;

double rp_value(const rp_trial *t, rp_metric m) {
  return m == RP_TFLOPS ? t->tflops : m == RP_GBYTES ? t->gbytes : t->rescale;
}

int rp_better(rp_metric m, double a, double b) { return m == RP_TFLOPS ? a > b : a < b; }

int rp_gpu(const rp_trial *t) { return !strcmp(t->backend, "cuda"); }

int rp_roof_point(const rp_trial *t, const rp_trial *key) {
  return rp_gpu(t) && !strcmp(t->status, "ok") && t->tflops > 0 && t->gbps > 0 &&
         !strcmp(t->device, key->device) && !strcmp(t->dtype, key->dtype);
}

int rp_est_of(const rp_est *e, const rp_trial *key) {
  return !strcmp(e->device, key->device) && !strcmp(e->dtype, key->dtype);
}

/* Sorted insert of v into a[0..*n); -1 when full. */
static int add_sorted(int *a, int *n, int v) {
  int i = 0;
  while (i < *n && a[i] < v) i++;
  if (i < *n && a[i] == v) return 0;
  if (*n == RP_MAX_SEQ) return -1;
  memmove(a + i + 1, a + i, (size_t)(*n - i) * sizeof *a);
  a[i] = v, ++*n;
  return 0;
}

static int index_of(const int *a, int n, int v) {
  for (int i = 0; i < n; i++)
    if (a[i] == v) return i;
  return -1;
}

static int series_of(rp_matrix *m, const char *name) {
  for (int i = 0; i < m->nser; i++)
    if (!strcmp(m->ser[i], name)) return i;
  if (m->nser == RP_MAX_SERIES) return -1;
  snprintf(m->ser[m->nser], sizeof m->ser[0], "%s", name);
  return m->nser++;
}

static void matrix_init(rp_matrix *m) {
  memset(m, 0, sizeof *m);
  for (int s = 0; s < RP_MAX_SERIES; s++)
    for (int i = 0; i < RP_MAX_SEQ; i++) m->v[s][i] = NAN;
}

static int usable(const rp_trial *t, rp_metric m) {
  return !strcmp(t->status, "ok") && isfinite(rp_value(t, m));
}

/* The other axes most designs of g share (then the most trials): the
** set the design comparison is made at. NULL when g has none usable. */
static const char *matched_rest(const rp_ctx *c, const rp_group *g, rp_metric m) {
  const char *best = NULL;
  size_t best_designs = 0, best_n = 0;
  for (size_t i = 0; i < g->n; i++) {
    const rp_trial *a = &c->t[g->idx[i]];
    if (!usable(a, m)) continue;
    size_t designs = 0, n = 0;
    for (size_t j = 0; j < g->n; j++) {
      const rp_trial *b = &c->t[g->idx[j]];
      if (!usable(b, m) || strcmp(a->rest, b->rest)) continue;
      n++;
      /* a design counts once: at its first trial with this rest */
      size_t k = 0;
      while (k < j && !(usable(&c->t[g->idx[k]], m) && !strcmp(c->t[g->idx[k]].rest, b->rest) &&
                        !strcmp(c->t[g->idx[k]].design, b->design)))
        k++;
      designs += k == j;
    }
    if (designs > best_designs || (designs == best_designs && n > best_n))
      best = a->rest, best_designs = designs, best_n = n;
  }
  return best;
}

void rp_lines(const rp_ctx *c, const rp_group *g, rp_metric m, int by, rp_matrix *out) {
  matrix_init(out);
  const char *rest = by == 0 ? matched_rest(c, g, m) : NULL;
  if (rest) snprintf(out->matched, sizeof out->matched, "%s", rest);
  for (size_t i = 0; i < g->n; i++)
    if (usable(&c->t[g->idx[i]], m) && (!rest || !strcmp(c->t[g->idx[i]].rest, rest)) &&
        add_sorted(out->x, &out->nx, c->t[g->idx[i]].seq_q) != 0)
      out->dropped++;
  for (size_t i = 0; i < g->n; i++) {
    const rp_trial *t = &c->t[g->idx[i]];
    if (!usable(t, m) || (rest && strcmp(t->rest, rest))) continue;
    const int x = index_of(out->x, out->nx, t->seq_q);
    const int s = series_of(out, by == 0 ? t->design : by == 1 ? t->par : t->norm);
    if (x < 0 || s < 0) {
      out->dropped++;
      continue;
    }
    const double v = rp_value(t, m);
    if (isnan(out->v[s][x]) || rp_better(m, v, out->v[s][x])) out->v[s][x] = v;
  }
}

void rp_heat(const rp_ctx *c, const rp_group *g, rp_matrix *out) {
  matrix_init(out);
  for (size_t i = 0; i < g->n; i++) {
    const rp_trial *t = &c->t[g->idx[i]];
    const rp_metric m = rp_gpu(t) ? RP_TFLOPS : RP_GBYTES;
    if (usable(t, m) && (add_sorted(out->x, &out->nx, t->seq_q) != 0 ||
                         add_sorted(out->y, &out->ny, t->dim) != 0))
      out->dropped++;
  }
  for (size_t i = 0; i < g->n; i++) {
    const rp_trial *t = &c->t[g->idx[i]];
    const rp_metric m = rp_gpu(t) ? RP_TFLOPS : RP_GBYTES;
    const int x = index_of(out->x, out->nx, t->seq_q), y = index_of(out->y, out->ny, t->dim);
    if (!usable(t, m) || x < 0 || y < 0) continue;
    const rp_trial *b = out->cell[x][y];
    if (!b || rp_better(m, rp_value(t, m), rp_value(b, m))) out->cell[x][y] = t;
  }
}

int rp_base_of(const rp_base *b, const rp_base *key) {
  return !strcmp(b->gpu, key->gpu) && !strcmp(b->dtype, key->dtype) && b->dim == key->dim &&
         b->causal == key->causal && b->seq_k - b->seq_q == key->seq_k - key->seq_q;
}

int rp_base_trial(const rp_trial *t, const rp_base *key) {
  return rp_gpu(t) && usable(t, RP_TFLOPS) && !strcmp(t->device, key->gpu) &&
         !strcmp(t->dtype, key->dtype) && t->dim == key->dim && t->causal == key->causal &&
         t->seq_k - t->seq_q == key->seq_k - key->seq_q;
}

void rp_base_lines(const rp_ctx *c, size_t k, rp_matrix *out) {
  const rp_base *key = c->bkey[k];
  matrix_init(out);
  series_of(out, "fatune (best variant)");
  for (size_t i = 0; i < c->n; i++)
    if (rp_base_trial(&c->t[i], key) && add_sorted(out->x, &out->nx, c->t[i].seq_q) != 0)
      out->dropped++;
  for (size_t i = 0; i < c->nbase; i++)
    if (rp_base_of(&c->base[i], key) && add_sorted(out->x, &out->nx, c->base[i].seq_q) != 0)
      out->dropped++;
  for (size_t i = 0; i < c->n; i++) {
    const rp_trial *t = &c->t[i];
    const int x = rp_base_trial(t, key) ? index_of(out->x, out->nx, t->seq_q) : -1;
    if (x >= 0 && (isnan(out->v[0][x]) || t->tflops > out->v[0][x])) out->v[0][x] = t->tflops;
  }
  for (size_t i = 0; i < c->nbase; i++) {
    const rp_base *b = &c->base[i];
    if (!rp_base_of(b, key)) continue;
    char name[48];
    snprintf(name, sizeof name, "PyTorch %.30s", b->backend);
    const int x = index_of(out->x, out->nx, b->seq_q), s = series_of(out, name);
    if (x < 0 || s < 0) out->dropped++;
    else if (isnan(out->v[s][x]) || b->tflops > out->v[s][x]) out->v[s][x] = b->tflops;
  }
}

/* ---- The script ---- */

/* Every string the script holds, the database's included (titles), goes
** through here: no newline may end a command and start another. */
static void gp_quote(FILE *f, const char *s) { fa_esc_gnuplot(f, s); }

/* Relative to the report's directory, where gnuplot runs, so the folder
** can be moved and drawn again there (gnuplot plots.gp). */
static void gp_path(FILE *f, const rp_ctx *c, const char *name) {
  (void)c;
  gp_quote(f, name);
}

static int add_figure(rp_ctx *c, const char *png, const char *title) {
  if (c->nfig == c->capfig) {
    size_t cap = c->capfig ? 2 * c->capfig : 8;
    rp_figure *f = realloc(c->fig, cap * sizeof *f);
    if (!f) return -1;
    c->fig = f, c->capfig = cap;
  }
  rp_figure *f = &c->fig[c->nfig++];
  snprintf(f->png, sizeof f->png, "%s", png);
  snprintf(f->title, sizeof f->title, "%s", title);
  f->group = c->cur_group;
  return 0;
}

/* The common head of a figure's commands. */
static void gp_start(rp_ctx *c, const char *png, const char *title) {
  fprintf(c->gp, "reset\nset datafile missing '?'\nset grid\nset output ");
  gp_path(c->gp, c, png);
  /* Two lines, split at the first ": " (the group, then the figure), so a
  ** long title fits the width. */
  const char *colon = strstr(title, ": ");
  char head[240];
  snprintf(head, sizeof head, "%.*s", colon ? (int)(colon - title) : (int)strlen(title), title);
  fprintf(c->gp, "\nset title sprintf(\"%%s\\n%%s\", ");
  gp_quote(c->gp, head);
  fprintf(c->gp, ", ");
  gp_quote(c->gp, colon ? colon + 2 : "");
  fprintf(c->gp, ")\n");
}

/* png's data file: png with .dat for .png. */
static FILE *open_data(const rp_ctx *c, const char *png, char *name, size_t n) {
  snprintf(name, n, "%.*s.dat", (int)(strlen(png) - 4), png);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  return fopen(path, "w");
}

static int close_data(FILE *f) {
  const int bad = ferror(f);
  return fclose(f) != 0 || bad ? -1 : 0;
}

int rp_plot_lines(rp_ctx *c, const char *png, const char *title, const char *ylabel,
                  const rp_matrix *m, int logy) {
  char dat[80];
  FILE *f = open_data(c, png, dat, sizeof dat);
  if (!f) return -1;
  fprintf(f, "seq");
  for (int s = 0; s < m->nser; s++) {
    fputc(' ', f);
    fa_esc_gnuplot_data(f, m->ser[s]);
  }
  fputc('\n', f);
  for (int i = 0; i < m->nx; i++) {
    fprintf(f, "%d", m->x[i]);
    for (int s = 0; s < m->nser; s++)
      if (isfinite(m->v[s][i])) fprintf(f, " %.10g", m->v[s][i]);
      else fprintf(f, " ?");
    fputc('\n', f);
  }
  if (close_data(f) != 0) return -1;
  gp_start(c, png, title);
  fprintf(c->gp, "set xlabel 'seq_len'\nset ylabel ");
  gp_quote(c->gp, ylabel);
  fprintf(c->gp, "\nset logscale x 2\n%sset key left top\n", logy ? "set logscale y\n" : "");
  if (m->matched[0]) {   /* what every series shares, as the key's title */
    char what[160];
    snprintf(what, sizeof what, "matched: %s", m->matched);
    fprintf(c->gp, "set key title ");
    gp_quote(c->gp, what);
    fputc('\n', c->gp);
  }
  /* Bytes in B, kB, MB, GB rather than 1e+09. */
  if (strstr(ylabel, "bytes")) fprintf(c->gp, "set format y '%%.0s %%cB'\n");
  else if (logy) fprintf(c->gp, "set format y '%%.0s%%c'\n");   /* 10k, 1M: no 1e+06 */
  /* Series with equal values must all show: each its own marker, the
  ** earlier ones larger (concentric where they coincide), and dash. */
  fprintf(c->gp, "plot ");
  for (int i = 0; i < m->nser; i++) {
    if (i == 0) gp_path(c->gp, c, dat);
    else fprintf(c->gp, ", ''");
    fprintf(c->gp, " using 1:%d with linespoints lw 2 dt %d pt %d ps %.2f title columnheader(%d)",
            i + 2, i + 1, (int[]){7, 5, 9, 11, 13, 4, 6, 8, 10, 12, 1, 2}[i % 12],
            i < 4 ? 2.6 - 0.5 * i : 1.0, i + 2);
  }
  fputc('\n', c->gp);
  return add_figure(c, png, title);
}

/* "1.5 MB" or "12.3 TFLOP/s": a cell's value as its label shows it. */
static void value_text(char *buf, size_t n, double v, int gpu) {
  static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  if (gpu) {
    snprintf(buf, n, "%.1f TFLOP/s", v);
    return;
  }
  while (v >= 1000 && u < 4) v /= 1000, u++;
  snprintf(buf, n, "%.3g %s", v, unit[u]);
}

/* Cells as filled boxes coloured by the metric (TFLOP/s on a GPU, global
** bytes per head on the emulator), labelled with the best tile and its
** value. */
int rp_plot_heat(rp_ctx *c, const char *png, const char *title, const rp_matrix *m) {
  char dat[80];
  FILE *f = open_data(c, png, dat, sizeof dat);
  if (!f) return -1;
  int gpu = 0;
  for (int x = 0; x < m->nx; x++)
    for (int y = 0; y < m->ny; y++) {
      const rp_trial *t = m->cell[x][y];
      if (!t) continue;
      gpu = rp_gpu(t);
      const double v = rp_value(t, gpu ? RP_TFLOPS : RP_GBYTES);
      char label[96], val[32];
      value_text(val, sizeof val, v, gpu);
      snprintf(label, sizeof label, "%s: %s", t->tile, val);
      fprintf(f, "%d %d %.10g ", x, y, v);
      fa_esc_gnuplot_data(f, label);
      fputc('\n', f);
    }
  if (close_data(f) != 0) return -1;
  gp_start(c, png, title);
  fprintf(c->gp, "set xlabel 'seq_len'\nset ylabel 'dim'\nset cblabel '%s'\n%s"
                 "set palette rgbformulae 33,13,10\nset style fill solid 1.0\n",
          gpu ? "TFLOP/s (higher is better)" : "global bytes per head (lower is better)",
          gpu ? "" : "set format cb '%.1s %cB'\n");
  fprintf(c->gp, "set xrange [-0.5:%f]\nset yrange [-0.5:%f]\nset xtics (",
          m->nx - 0.5, m->ny - 0.5);
  for (int x = 0; x < m->nx; x++) fprintf(c->gp, "%s\"%d\" %d", x ? ", " : "", m->x[x], x);
  fprintf(c->gp, ")\nset ytics (");
  for (int y = 0; y < m->ny; y++) fprintf(c->gp, "%s\"%d\" %d", y ? ", " : "", m->y[y], y);
  fprintf(c->gp, ")\nplot ");
  gp_path(c->gp, c, dat);
  fprintf(c->gp, " using 1:2:(0.5):(0.5):3 with boxxyerror fc palette notitle, '' using 1:2:4 "
                 "with labels notitle\n");
  return add_figure(c, png, title);
}

int rp_plot_estimate(rp_ctx *c, const char *png, const char *title) {
  char dat[80];
  FILE *f = open_data(c, png, dat, sizeof dat);
  if (!f) return -1;
  double hi = 0;
  for (size_t i = 0; i < c->nest; i++) {
    fprintf(f, "%.10g %.10g\n", c->est[i].est, c->est[i].measured);
    if (c->est[i].est > hi) hi = c->est[i].est;
    if (c->est[i].measured > hi) hi = c->est[i].measured;
  }
  if (close_data(f) != 0) return -1;
  gp_start(c, png, title);
  fprintf(c->gp, "set xlabel 'estimated TFLOP/s (static, from the SASS)'\n"
                 "set ylabel 'measured TFLOP/s'\nset xrange [0:%.6g]\nset yrange [0:%.6g]\n"
                 "set key left top\nplot ", hi * 1.05, hi * 1.05);
  gp_path(c->gp, c, dat);
  fprintf(c->gp, " using 1:2 with points pt 7 title 'trials', x with lines dt 2 "
                 "title 'measured = estimated'\n");
  return add_figure(c, png, title);
}

/* The point types of series i: filled, then open shapes. */
static int point_type(int i) { return (int[]){7, 5, 9, 11, 13, 4, 6, 8, 10, 12, 1, 2}[i % 12]; }

/* The distinct seq_q of the points, sorted: the series of a scatter plot. */
static void point_seqs(const rp_ctx *c, size_t k, int registers, int *seq, int *n) {
  *n = 0;
  if (registers) {
    for (size_t i = 0; i < c->nest; i++)
      if (rp_est_of(&c->est[i], c->gpu[k]) && c->est[i].registers >= 0)
        add_sorted(seq, n, c->est[i].seq_q);
  } else {
    for (size_t i = 0; i < c->n; i++)
      if (rp_roof_point(&c->t[i], c->gpu[k])) add_sorted(seq, n, c->t[i].seq_q);
  }
}

/* One plot clause per seq_q: the data file's blocks, in order. Coloured
** points (palette) get their key entry from a point of no colour. */
static void plot_seq_blocks(rp_ctx *c, const char *dat, const int *seq, int n, const char *use,
                            int palette) {
  for (int i = 0; i < n; i++) {
    if (i == 0) gp_path(c->gp, c, dat);
    else fprintf(c->gp, ", ''");
    fprintf(c->gp, " index %d using %s with points pt %d ps 2 ", i, use, point_type(i));
    if (palette)
      fprintf(c->gp, "lc palette notitle, NaN with points pt %d ps 2 lc rgb 'black' ",
              point_type(i));
    fprintf(c->gp, "title 'seq_len %d'", seq[i]);
  }
}

int rp_plot_roofline(rp_ctx *c, size_t k, const char *png, const char *title) {
  const rp_trial *key = c->gpu[k];
  int seq[RP_MAX_SEQ], ns;
  point_seqs(c, k, 0, seq, &ns);
  char dat[80];
  FILE *f = open_data(c, png, dat, sizeof dat);
  if (!f) return -1;
  double lo_x = INFINITY, hi_x = 0, lo_y = INFINITY, hi_y = 0;
  for (int b = 0; b < ns; b++) {   /* a block per seq_q, two blank lines apart */
    fprintf(f, "%s# seq_q %d: FLOP per byte, TFLOP/s\n", b ? "\n\n" : "", seq[b]);
    for (size_t i = 0; i < c->n; i++) {
      const rp_trial *t = &c->t[i];
      if (!rp_roof_point(t, key) || t->seq_q != seq[b]) continue;
      const double ai = 1e3 * t->tflops / t->gbps;
      fprintf(f, "%.10g %.10g\n", ai, t->tflops);
      lo_x = fmin(lo_x, ai), hi_x = fmax(hi_x, ai), lo_y = fmin(lo_y, t->tflops);
      hi_y = fmax(hi_y, t->tflops);
    }
  }
  if (close_data(f) != 0) return -1;
  const estimate_gpu *g = estimate_gpu_for_device(key->device);
  const double peak = g ? estimate_peak_tflops(g, key->dtype) : 0;
  gp_start(c, png, title);
  fprintf(c->gp, "set xlabel 'arithmetic intensity: FLOP per byte of Q, K, V, O and LSE'\n"
                 "set ylabel 'attained TFLOP/s'\nset logscale xy 10\nset key right bottom\n"
                 "set format x '%%.0s%%c'\nset format y '%%.0s%%c'\n");
  if (peak > 0) {   /* the ridge and the peak in sight */
    const double ridge = 1e3 * peak / g->dram_gbs;
    lo_x = fmin(lo_x, ridge), hi_x = fmax(hi_x, ridge), hi_y = fmax(hi_y, peak);
    fprintf(c->gp, "bw = %.6g\npeak = %.6g\nroof(x) = x * bw / 1e3 < peak ? x * bw / 1e3 : peak\n"
                   "set label 'ridge %.0f FLOP/B' at %.6g, %.6g left offset 1, -1\n"
                   "set samples 400\n", g->dram_gbs, peak, ridge, ridge, peak);
  }
  fprintf(c->gp, "set xrange [%.6g:%.6g]\nset yrange [%.6g:%.6g]\nplot ", lo_x / 4, hi_x * 4,
          lo_y / 2, hi_y * 1.5);
  plot_seq_blocks(c, dat, seq, ns, "1:2", 0);
  if (peak > 0)
    fprintf(c->gp, ", roof(x) with lines lw 3 lc rgb 'black' title sprintf('roofs: %%.0f GB/s, "
                   "%%.0f TFLOP/s (%s, %s)', bw, peak)",
            key->dtype, g->name);
  fputc('\n', c->gp);
  return add_figure(c, png, title);
}

int rp_plot_registers(rp_ctx *c, size_t k, const char *png, const char *title) {
  int seq[RP_MAX_SEQ], ns;
  point_seqs(c, k, 1, seq, &ns);
  char dat[80];
  FILE *f = open_data(c, png, dat, sizeof dat);
  if (!f) return -1;
  int lo_c = 1 << 30, hi_c = 0;
  for (int b = 0; b < ns; b++) {
    fprintf(f, "%s# seq_q %d: registers, TFLOP/s, CTAs per SM\n", b ? "\n\n" : "", seq[b]);
    for (size_t i = 0; i < c->nest; i++) {
      const rp_est *e = &c->est[i];
      if (!rp_est_of(e, c->gpu[k]) || e->registers < 0 || e->seq_q != seq[b]) continue;
      fprintf(f, "%d %.10g %d\n", e->registers, e->measured, e->ctas_per_sm);
      if (e->ctas_per_sm < lo_c) lo_c = e->ctas_per_sm;
      if (e->ctas_per_sm > hi_c) hi_c = e->ctas_per_sm;
    }
  }
  if (close_data(f) != 0) return -1;
  gp_start(c, png, title);
  /* CTAs per SM are few integers: one flat colour each. */
  if (hi_c <= lo_c) hi_c = lo_c + 1;
  fprintf(c->gp, "set xlabel 'registers per thread'\nset ylabel 'attained TFLOP/s'\n"
                 "set cblabel 'CTAs per SM (occupancy, from registers and shared memory)'\n"
                 "set cbrange [%f:%f]\nset cbtics 1\n"
                 "set palette maxcolors %d defined (0 'blue', 1 'green', 2 'orange', 3 'red')\n"
                 "set key left bottom\nset offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1\n"
                 "plot ", lo_c - 0.5, hi_c + 0.5, hi_c - lo_c + 1);
  plot_seq_blocks(c, dat, seq, ns, "1:2:3", 1);
  fputc('\n', c->gp);
  return add_figure(c, png, title);
}

/* ---- Running gnuplot ---- */

static int spawn(const char *dir, const char *script, const char *log, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc != 0) return rc;
  rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0)
    rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  /* In the report's folder: the script's paths are relative to it. */
  if (rc == 0) rc = posix_spawn_file_actions_addchdir_np(&fa, dir);
  char *argv[] = {"gnuplot", (char *)script, NULL};
  posix_spawnattr_t attr;
  if (rc == 0 && (rc = fa_proc_spawnattr(&attr, 0)) == 0) {
    rc = posix_spawnp(pid, "gnuplot", &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
  }
  posix_spawn_file_actions_destroy(&fa);
  return rc;
}

/* The first line of the log, for a one-line message; it may quote the
** script, so it is made fit for a terminal. */
static void log_line(const char *log, char *buf, size_t n) {
  char raw[200] = "";
  FILE *f = fopen(log, "r");
  if (f && fgets(raw, (int)sizeof raw, f)) raw[strcspn(raw, "\n")] = '\0';
  if (f) fclose(f);
  fa_esc_term_buf(buf, n, raw);
}

int rp_gnuplot(rp_ctx *c, char *err, size_t errlen) {
  char log[1024], line[200];
  snprintf(log, sizeof log, "%s/gnuplot.log", c->dir);
  pid_t pid;
  /* The log is opened before the chdir: its path is the caller's. */
  int rc = spawn(c->dir, "plots.gp", log, &pid), st;
  if (rc == ENOENT) {
    remove(log);   /* the child may have opened it before its exec failed */
    return 1;
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot run gnuplot: %s", strerror(rc));
    return -1;
  }
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      snprintf(err, errlen, "waiting for gnuplot: %s", strerror(errno));
      return -1;
    }
  log_line(log, line, sizeof line);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && !line[0]) {  /* no such program */
    remove(log);
    return 1;
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, errlen, "gnuplot failed (%s): %s", log, line[0] ? line : "no message");
    return -1;
  }
  for (size_t i = 0; i < c->nfig; i++) {
    char png[1100];
    struct stat sb;
    snprintf(png, sizeof png, "%s/%s", c->dir, c->fig[i].png);
    if (stat(png, &sb) != 0 || sb.st_size == 0) {
      snprintf(err, errlen, "gnuplot drew no %s (see %s)", png, log);
      return -1;
    }
  }
  return 0;
}
