/*
** model_plot.c
** The timeline of model_plot.h: a gnuplot script with the spans inline,
** written to a temporary file and run.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa_escape.h"
#include "fa_proc.h"
#include "model_plot.h"

extern char **environ;

/* The row of a span: one per role and group, the producer on top. */
static int row_of(const model_kernel *k, int role, int group) {
  int row = 0;
  for (int r = 0; r < role; r++) row += k->role[r].groups;
  return row + group;
}

static int write_script(FILE *f, const char *png, const model_kernel *k, const model_result *r,
                        const char *title) {
  static const char *const colour[MPH_N] = {"#bbbbbb", "#4c72b0", "#dd8452", "#55a868",
                                            "#c44e52", "#eeeeee"};
  const model_run *run = &r->run;
  double t0 = 1e300;  /* the timeline starts at its first span */
  for (int i = 0; i < run->nspans; i++)
    if (run->spans[i].from < t0) t0 = run->spans[i].from;
  int rows = row_of(k, k->nroles, 0);
  fprintf(f, "set terminal pngcairo size 1200,%d\nset output ", 160 + 60 * rows);
  fa_esc_gnuplot(f, png);
  fprintf(f, "\nset title ");
  char t[600];
  /* a mangled name is long: its start and end say which */
  size_t n = strlen(title);
  if (n > 70)
    snprintf(t, sizeof t, "%.40s...%s: one steady K/V block, %.0f clocks per block per SM", title,
             title + n - 27, r->cycles_per_block);
  else
    snprintf(t, sizeof t, "%s: one steady K/V block, %.0f clocks per block per SM", title,
             r->cycles_per_block);
  fa_esc_gnuplot(f, t);
  fprintf(f, " noenhanced\nset xlabel 'clock'\nset yrange [-0.7:%d.7]\nset ytics (", rows - 1);
  for (int ro = 0; ro < k->nroles; ro++)
    for (int g = 0; g < k->role[ro].groups; g++) {
      char name[64];
      snprintf(name, sizeof name, "%s %d", k->role[ro].name, g);
      fprintf(f, "%s", row_of(k, ro, g) ? ", " : "");
      fa_esc_gnuplot(f, name);
      fprintf(f, " %d", row_of(k, ro, g));
    }
  fprintf(f, ")\nset key outside right\nset style fill solid 1.0 noborder\n");
  /* per row: what it issues above (waits drawn first, under the rest), its
  ** wgmma work on the tensor pipe below */
  static const int order[MPH_N] = {MPH_SYNC, MPH_OTHER, MPH_COPY, MPH_SOFTMAX, MPH_S, MPH_PV};
  for (int o = 0; o < MPH_N; o++) {
    fprintf(f, "$p%d << EOD\n", order[o]);
    int any = 0;
    for (int i = 0; i < run->nspans; i++) {
      const model_trace_span *s = &run->spans[i];
      if (s->phase != order[o]) continue;
      fprintf(f, "%.1f %.1f %.2f %.2f\n", s->from - t0, s->to - t0,
              row_of(k, s->role, s->group) + (s->tensor ? -0.22 : 0.12), s->tensor ? 0.12 : 0.2);
      any = 1;
    }
    if (!any) fprintf(f, "0 0 -10 0\n");  /* an empty block would stop gnuplot */
    fprintf(f, "EOD\n");
  }
  fprintf(f, "set label 1 'above: issued; below: on the tensor pipe, copies in flight' at graph 0.01, graph 0.97\n");
  fprintf(f, "plot ");
  for (int o = 0; o < MPH_N; o++)
    fprintf(f, "%s$p%d using (($1+$2)/2):3:(($2-$1)/2):4 with boxxyerror lc rgb '%s' title '%s'",
            o ? ", " : "", order[o], colour[order[o]], model_phase_names[order[o]]);
  fprintf(f, "\n");
  return ferror(f) ? -1 : 0;
}

static int run_gnuplot(const char *script, const char *log, char *err, size_t errlen) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  pid_t pid;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_TRUNC, 0600);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char *argv[] = {"gnuplot", (char *)script, NULL};
  if (rc == 0 && (rc = fa_proc_spawnattr(&attr, 0)) == 0) {
    rc = posix_spawnp(&pid, "gnuplot", &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
  }
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT) return snprintf(err, errlen, "--plot needs gnuplot on PATH"), -1;
  if (rc != 0) return snprintf(err, errlen, "cannot run gnuplot: %s", strerror(rc)), -1;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return snprintf(err, errlen, "waiting for gnuplot: %s", strerror(errno)), -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    char raw[200] = "", line[200];
    FILE *f = fopen(log, "r");
    if (f && fgets(raw, (int)sizeof raw, f)) raw[strcspn(raw, "\n")] = '\0';
    if (f) fclose(f);
    fa_esc_term_buf(line, sizeof line, raw);
    return snprintf(err, errlen, "gnuplot failed%s%s", line[0] ? ": " : "",
                    WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "no gnuplot on PATH" : line), -1;
  }
  return 0;
}

int model_plot(const char *png, const model_kernel *k, const model_result *r, const char *title,
               char *err, size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  char script[4096], log[4200];
  snprintf(script, sizeof script, "%s/fatune-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(script);
  if (fd < 0) return snprintf(err, errlen, "a temporary script: %s", strerror(errno)), -1;
  snprintf(log, sizeof log, "%s.log", script);
  FILE *f = fdopen(fd, "w");
  int rc = f ? write_script(f, png, k, r, title) : -1;
  if (f ? fclose(f) != 0 : close(fd) != 0) rc = -1;
  if (rc != 0) snprintf(err, errlen, "writing %s: %s", script, strerror(errno));
  int lfd = rc == 0 ? open(log, O_WRONLY | O_CREAT | O_EXCL, 0600) : -1;
  if (rc == 0 && lfd < 0) rc = -1, snprintf(err, errlen, "%s: %s", log, strerror(errno));
  if (lfd >= 0) close(lfd);
  if (rc == 0) rc = run_gnuplot(script, log, err, errlen);
  struct stat st;
  if (rc == 0 && (stat(png, &st) != 0 || st.st_size == 0))
    rc = -1, snprintf(err, errlen, "gnuplot drew no %s", png);
  remove(script);
  if (lfd >= 0) remove(log);
  return rc;
}
