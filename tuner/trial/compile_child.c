/*
** compile_child.c
** The child compiles every kernel, then writes one record per kernel (a
** fixed header, the log, the program's bytes); the parent reads them in
** order and reaps the child.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compile_child.h"
#include "fa_proc.h"
#include "fa_util.h"

typedef struct record {
  double compile_ms;
  int registers, spill_bytes, stack_bytes, smem_static_bytes;
  size_t log_len, blob_len;   /* blob_len 0: no program */
} record;

typedef struct job { fa_backend *be; const gen_kernel *const *kernels; fa_build *out; } job;

static void compile_one(size_t i, void *ud) {
  job *j = ud;
  char err[512];
  if (backend_compile(j->be, &j->kernels[i], 1, 1, &j->out[i], err, sizeof err) != 0) {
    memset(&j->out[i], 0, sizeof j->out[i]);
    j->out[i].log = strdup(err);
  }
}

/* In the child: compile, send, exit. */
static void child(job *j, size_t n, int threads, par_progress_fn progress, void *ud, int fd) {
  fa_proc_child_signals();
  if (par_for(n, threads, compile_one, j, progress, ud) != 0) _exit(1);
  for (size_t i = 0; i < n; i++) {
    const fa_build *b = &j->out[i];
    const void *blob = NULL;
    size_t size = 0;
    if (b->prog && backend_program_blob(j->be, b->prog, &blob, &size) != 0) size = 0;
    record r = {b->compile_ms, b->registers, b->spill_bytes, b->stack_bytes,
                b->smem_static_bytes, b->log ? strlen(b->log) : 0, size};
    if (fa_write_all(fd, &r, sizeof r) || fa_write_all(fd, b->log ? b->log : "", r.log_len) ||
        fa_write_all(fd, blob ? blob : "", size))
      _exit(1);
  }
  _exit(0);
}

/* One record into b; -1 when the pipe ends early or memory runs out. */
static int read_one(fa_backend *be, const gen_kernel *k, int fd, fa_build *b, char *err,
                    size_t errlen) {
  record r;
  if (fa_read_all(fd, &r, sizeof r) != 0) return -1;
  b->compile_ms = r.compile_ms, b->registers = r.registers, b->spill_bytes = r.spill_bytes;
  b->stack_bytes = r.stack_bytes, b->smem_static_bytes = r.smem_static_bytes;
  char *log = r.log_len ? malloc(r.log_len + 1) : NULL;
  void *blob = r.blob_len ? malloc(r.blob_len) : NULL;
  int rc = (r.log_len && !log) || (r.blob_len && !blob) ? -1 : 0;
  if (rc == 0 && log) rc = fa_read_all(fd, log, r.log_len), log[r.log_len] = '\0';
  if (rc == 0 && blob) rc = fa_read_all(fd, blob, r.blob_len);
  if (rc == 0 && blob) rc = backend_load(be, k, blob, r.blob_len, &b->prog, err, errlen) ? -1 : 0;
  free(blob);
  if (rc != 0) free(log);
  else b->log = log;
  return rc;
}

int cc_compile(fa_backend *be, const gen_kernel *const *kernels, size_t n, int threads,
               fa_build *out, par_progress_fn progress, void *ud, char *err, size_t errlen) {
  memset(out, 0, n * sizeof *out);
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(err, errlen, "cannot make a pipe for the compile process: %s", strerror(errno));
    return FA_EINTERNAL;
  }
  fflush(NULL);   /* buffered output would be written twice */
  job j = {be, kernels, out};
  const pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "cannot start the compile process: %s", strerror(errno));
    close(fds[0]), close(fds[1]);
    return FA_EINTERNAL;
  }
  if (pid == 0) close(fds[0]), child(&j, n, threads, progress, ud, fds[1]);
  close(fds[1]);
  char why[256] = "";
  size_t got = 0;
  while (got < n && read_one(be, kernels[got], fds[0], &out[got], why, sizeof why) == 0) got++;
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (got == n) return 0;
  for (size_t i = 0; i < got; i++) backend_build_free(be, &out[i]);
  memset(out, 0, n * sizeof *out);
  if (why[0]) snprintf(err, errlen, "loading a compiled program: %s", why);
  else if (WIFSIGNALED(status))
    snprintf(err, errlen, "the compile process was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else snprintf(err, errlen, "the compile process ended early (status %d)", WEXITSTATUS(status));
  return FA_EINTERNAL;
}
