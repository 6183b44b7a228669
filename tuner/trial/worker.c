/*
** worker.c
** The child process behind worker.h: two pipes, a job index down, a fixed
** size result up; poll with a deadline on the way back.
*/
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fa_proc.h"
#include "fa_util.h"
#include "worker.h"

struct wk_worker {
  wk_job_fn fn;
  void *ud;
  size_t size;
  pid_t pid;        /* 0: no child */
  int to_child;     /* write end of the job pipe */
  int from_child;   /* read end of the result pipe */
  unsigned char *buf;
  atomic_int *phase;  /* a page shared with the child: its job's wk_phase */
};

/* Held around a fork and, by wk_quiet_begin, around other threads' work
** that holds locks a child would need (the allocator's, the database's):
** a child forked while another thread holds one would wait on it forever. */
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;

void wk_quiet_begin(void) { pthread_mutex_lock(&fork_mu); }
void wk_quiet_end(void) { pthread_mutex_unlock(&fork_mu); }

/* In a child: its worker's phase, for wk_phase. */
static atomic_int *child_phase;

void wk_phase(int phase) {
  if (child_phase) atomic_store(child_phase, phase);
}

int wk_last_phase(const wk_worker *w) { return atomic_load(w->phase); }

int wk_open(wk_worker **out, wk_job_fn fn, void *ud, size_t result_size, char *err,
            size_t errlen) {
  wk_worker *w = calloc(1, sizeof *w);
  unsigned char *buf = malloc(result_size + 1);  /* the answer, then the retire flag */
  void *page = mmap(NULL, sizeof(atomic_int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
  if (!w || !buf || page == MAP_FAILED) {
    if (page != MAP_FAILED) munmap(page, sizeof(atomic_int));
    free(w), free(buf);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  w->fn = fn, w->ud = ud, w->size = result_size, w->buf = buf, w->phase = page;
  atomic_init(w->phase, 0);
  w->to_child = w->from_child = -1;
  *out = w;
  return 0;
}

/* The child: jobs until the parent closes the pipe. Never returns. */
static void child_loop(wk_worker *w, int jobs, int results) {
  size_t i;
  for (;;) {
    ssize_t k = read(jobs, &i, sizeof i);
    if (k < 0 && errno == EINTR) continue;
    if (k != (ssize_t)sizeof i) _exit(0);
    memset(w->buf, 0, w->size + 1);
    w->buf[w->size] = w->fn(i, w->ud, w->buf) != 0;
    if (fa_write_all(results, w->buf, w->size + 1) != 0) _exit(1);
    if (w->buf[w->size]) _exit(0);
  }
}

/* In a new child: close every descriptor but stdio and its own two. Other
** workers' pipe ends, inherited through fork, would otherwise keep their
** children from ever seeing the end of their job pipe. */
static void close_others(int keep1, int keep2) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) {
    for (int fd = 3; fd < 1024; fd++)
      if (fd != keep1 && fd != keep2) close(fd);
    return;
  }
  const int self_fd = dirfd(d);
  int fds[256], n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < 256) {
    int fd = atoi(de->d_name);
    if (fd > 2 && fd != keep1 && fd != keep2 && fd != self_fd) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; i++) close(fds[i]);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

int wk_start(wk_worker *w, char *why, size_t whylen) {
  if (w->pid) return 0;
  int jobs[2], results[2];
  /* Close-on-exec: a compiler the parent spawns must not hold them either. */
  if (pipe2(jobs, O_CLOEXEC) != 0) {
    snprintf(why, whylen, "cannot make a pipe for a worker: %s", strerror(errno));
    return -1;
  }
  if (pipe2(results, O_CLOEXEC) != 0) {
    snprintf(why, whylen, "cannot make a pipe for a worker: %s", strerror(errno));
    close(jobs[0]), close(jobs[1]);
    return -1;
  }
  pthread_mutex_lock(&fork_mu);
  /* Buffered output would be written twice, once by each process. */
  fflush(NULL);
  pid_t pid = fork();
  pthread_mutex_unlock(&fork_mu);   /* in both: the child's copy is its own */
  if (pid < 0) {
    snprintf(why, whylen, "cannot start a worker process: %s", strerror(errno));
    close(jobs[0]), close(jobs[1]), close(results[0]), close(results[1]);
    return -1;
  }
  if (pid == 0) {
    /* Stopped with its parent from the terminal, or on its own by SIGTERM. */
    fa_proc_child_signals();
    child_phase = w->phase;
    close_others(jobs[0], results[1]);
    child_loop(w, jobs[0], results[1]);
  }
  close(jobs[0]), close(results[1]);
  w->pid = pid, w->to_child = jobs[1], w->from_child = results[0];
  return 0;
}

/* Reap the child; describe how it ended. */
static void bury(wk_worker *w, int kill_it, char *why, size_t whylen) {
  close_fd(&w->to_child);
  close_fd(&w->from_child);
  if (!w->pid) return;
  if (kill_it) kill(w->pid, SIGKILL);
  int status = 0;
  while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {}
  w->pid = 0;
  if (!why) return;
  if (WIFSIGNALED(status))
    snprintf(why, whylen, "the worker was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else if (WIFEXITED(status))
    snprintf(why, whylen, "the worker exited with status %d", WEXITSTATUS(status));
}

wk_outcome wk_run(wk_worker *w, size_t i, int timeout_s, void *out, char *why, size_t whylen) {
  atomic_store(w->phase, 0);
  if (wk_start(w, why, whylen) != 0) return WK_ERROR;
  /* A child that died between jobs shows up as a failed write (EPIPE):
  ** SIGPIPE must not take the parent with it. */
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &old);
  int sent = fa_write_all(w->to_child, &i, sizeof i);
  sigaction(SIGPIPE, &old, NULL);
  if (sent != 0) {
    bury(w, 0, why, whylen);
    return WK_CRASHED;
  }
  const double deadline = fa_now_s() + timeout_s;
  size_t got = 0;
  while (got < w->size + 1) {
    int left_ms = (int)((deadline - fa_now_s()) * 1000);
    if (left_ms <= 0) {
      bury(w, 1, NULL, 0);
      snprintf(why, whylen, "no answer after %d s: the worker was killed", timeout_s);
      return WK_TIMEOUT;
    }
    struct pollfd pf = {.fd = w->from_child, .events = POLLIN};
    int r = poll(&pf, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;  /* the deadline check above decides */
    ssize_t k = r < 0 ? -1 : read(w->from_child, w->buf + got, w->size + 1 - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {  /* the child is gone: its status says how */
      bury(w, 0, why, whylen);
      return WK_CRASHED;
    }
    got += (size_t)k;
  }
  memcpy(out, w->buf, w->size);
  if (w->buf[w->size]) bury(w, 0, NULL, 0);  /* retired: it exits on its own */
  return WK_DONE;
}

void wk_close(wk_worker *w) {
  if (!w) return;
  /* Closing the job pipe ends the child's loop; wait for it. */
  bury(w, 0, NULL, 0);
  munmap(w->phase, sizeof(atomic_int));
  free(w->buf);
  free(w);
}
