/*
** test_worker.c
** Jobs that take their process down cost only themselves:
**  - plain jobs: one returns, one segfaults, one aborts, one never ends,
**    one exits, one retires its child; each is recorded for what it did,
**    and the next job runs in a fresh child;
**  - emulator kernels in worker processes, as the tuner runs them: a good
**    kernel, one that writes through a wild pointer (a real SIGSEGV, not an
**    emulator fault), one that loops forever; the run completes with ok,
**    crashed, timeout, ok;
**  - the stop signals (SIGTERM, SIGINT, SIGHUP), blocked in the parent as
**    the fatune command blocks them and caught by a handler of its own as
**    NVRTC's: a worker that gets one still dies by it, one ignored stays
**    ignored; a spawned child gets the caller's mask less these, and
**    fa_proc_popen reads a child's output and status as popen does.
*/
#include <pthread.h>
#include <signal.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_preludes.h"
#include "check.h"
#include "emu.h"
#include "fa_proc.h"
#include "worker.h"

typedef struct answer { int job; int value; } answer;

static volatile uintptr_t wild = 8;  /* an address the compiler cannot see through */

static int plain_job(size_t i, void *ud, void *out) {
  (void)ud;
  answer *a = out;
  a->job = (int)i;
  switch (i % 5) {
  case 1: *(volatile int *)wild = 1; break;  /* segfault */
  case 2: abort();
  case 3: for (;;) pause();                       /* never answers */
  case 4: _exit(3);
  default: break;
  }
  a->value = (int)i * 10;
  return i == 5;  /* retire after job 5: job 10 must still be answered */
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_plain(void) {
  wk_worker *w;
  char err[256];
  CHECK(wk_open(&w, plain_job, NULL, sizeof(answer), err, sizeof err) == 0, "%s", err);
  const wk_outcome want[] = {WK_DONE, WK_CRASHED, WK_CRASHED, WK_TIMEOUT, WK_CRASHED,
                             WK_DONE, WK_DONE};
  const size_t jobs[] = {0, 1, 2, 3, 4, 5, 10};
  for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
    answer a = {-1, -1};
    char why[256] = "";
    double t0 = now_s();
    wk_outcome o = wk_run(w, jobs[k], 1, &a, why, sizeof why);
    double dt = now_s() - t0;
    CHECK(o == want[k], "job %zu: outcome %d, want %d (%s)", jobs[k], (int)o, (int)want[k], why);
    if (o == WK_DONE) CHECK(a.job == (int)jobs[k] && a.value == (int)jobs[k] * 10, "job %zu: "
                            "answer %d/%d", jobs[k], a.job, a.value);
    else CHECK(why[0], "job %zu: no reason given", jobs[k]);
    if (o == WK_TIMEOUT) CHECK(dt >= 0.9 && dt < 5, "timeout after %.2f s, want about 1", dt);
    printf("job %zu: outcome %d %s\n", jobs[k], (int)o, why);
  }
  wk_close(w);
}

/* ---- Emulator kernels ---- */

static const emu_source kernels[] = {
  {"w_good", "FA_KERNEL(w_good, 32)\n{\n"
             "  fa_st_f32((float *)p.o + fa_tid(), 2.0f * fa_ldg_f32((const float *)p.q + fa_tid()));\n"
             "}\n", &emu_preludes},
  {"w_wild", "FA_KERNEL(w_wild, 32)\n{\n"
             "  (void)p;\n"
             "  if (fa_tid() == 5) *(volatile float *)(size_t)64 = 1.0f; /* no fa_st: a real fault */\n"
             "}\n", &emu_preludes},
  {"w_loop", "FA_KERNEL(w_loop, 32)\n{\n"
             "  (void)p;\n"
             "  for (;;) fa_syncthreads();\n"
             "}\n", &emu_preludes},
};
#define NK (sizeof kernels / sizeof kernels[0])

typedef struct emu_jobs {
  emu_build b[NK];
  float *q, *o;
} emu_jobs;

typedef struct emu_answer { int rc; float o[32]; char err[200]; } emu_answer;

static int emu_job(size_t i, void *ud, void *out) {
  emu_jobs *j = ud;
  emu_answer *a = out;
  const size_t k = i % NK;
  fa_params prm;
  memset(&prm, 0, sizeof prm);
  prm.q = j->q, prm.o = j->o;
  fa_emu_range r[2] = {{(unsigned long long)(size_t)j->q, (unsigned long long)(size_t)(j->q + 32)},
                       {(unsigned long long)(size_t)j->o, (unsigned long long)(size_t)(j->o + 32)}};
  emu_launch_args args = {.fn = j->b[k].fn, .entry = kernels[k].entry,
                          .grid = {1, 1, 1}, .threads = 32, .params = &prm, .ranges = r,
                          .nranges = 2};
  emu_launch_opts lo = {EMU_FORWARD, 1, 1, 0xFF};
  fa_emu_counters c = {0};
  a->rc = emu_launch(&args, &lo, &c, a->err, sizeof a->err);
  memcpy(a->o, j->o, sizeof a->o);
  return 0;
}

static void test_emulator(void) {
  emu_jobs j;
  char err[256];
  emu_compile_opts co = {0};
  CHECK(emu_compile(kernels, NK, &co, j.b, err, sizeof err) == 0, "%s", err);
  for (size_t k = 0; k < NK; k++) CHECK(j.b[k].fn, "%s: %s", kernels[k].entry, j.b[k].log);
  j.q = aligned_alloc(64, 32 * sizeof(float)), j.o = aligned_alloc(64, 32 * sizeof(float));
  if (!j.q || !j.o) return;
  for (int t = 0; t < 32; t++) j.q[t] = (float)t, j.o[t] = -1;
  wk_worker *w;
  CHECK(wk_open(&w, emu_job, &j, sizeof(emu_answer), err, sizeof err) == 0, "%s", err);
  const wk_outcome want[] = {WK_DONE, WK_CRASHED, WK_TIMEOUT, WK_DONE};
  const size_t jobs[] = {0, 1, 2, 3};
  for (size_t k = 0; k < 4; k++) {
    emu_answer a;
    char why[256] = "";
    wk_outcome o = wk_run(w, jobs[k], 2, &a, why, sizeof why);
    CHECK(o == want[k], "%s: outcome %d, want %d (%s)", kernels[jobs[k] % NK].entry, (int)o,
          (int)want[k], why);
    if (o == WK_DONE) {
      int right = a.rc == 0;
      for (int t = 0; t < 32; t++) right &= a.o[t] == 2.0f * (float)t;
      CHECK(right, "w_good in a worker: rc %d, %s", a.rc, a.err);
    }
    printf("%s: outcome %d %s\n", kernels[jobs[k] % NK].entry, (int)o, why);
  }
  wk_close(w);
  CHECK(j.o[0] == -1, "the parent's buffers were written by a child");
  for (size_t k = 0; k < NK; k++) emu_build_free(&j.b[k]);
  free(j.q), free(j.o);
}

/* ---- The stop signals ---- */

static const int stop_sigs[] = {SIGTERM, SIGINT, SIGHUP};
#define NSTOP (sizeof stop_sigs / sizeof stop_sigs[0])

/* What the child must not run: it stands for NVRTC's handler. */
static void foreign_handler(int sig) {
  (void)sig;
  _exit(7);
}

/* Job i raises stop_sigs[i % NSTOP] in the child; alive after it, it answers. */
static int signal_job(size_t i, void *ud, void *out) {
  (void)ud;
  answer *a = out;
  raise(stop_sigs[i % NSTOP]);
  a->job = (int)i, a->value = 1;
  return 0;
}

static void test_worker_signals(void) {
  struct sigaction h = {.sa_handler = foreign_handler}, saved[NSTOP];
  sigemptyset(&h.sa_mask);
  for (size_t k = 0; k < NSTOP; k++) CHECK(sigaction(stop_sigs[k], &h, &saved[k]) == 0, "sigaction");
  sigset_t stop, old;
  fa_proc_stop_signals(&stop);
  CHECK(pthread_sigmask(SIG_BLOCK, &stop, &old) == 0, "pthread_sigmask");
  wk_worker *w;
  char err[256];
  CHECK(wk_open(&w, signal_job, NULL, sizeof(answer), err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < NSTOP; i++) {
    answer a = {-1, -1};
    char why[256] = "", want[64];
    wk_outcome o = wk_run(w, i, 5, &a, why, sizeof why);
    snprintf(want, sizeof want, "killed by signal %d ", stop_sigs[i]);
    CHECK(o == WK_CRASHED && strstr(why, want), "signal %d in a worker: outcome %d (%s)",
          stop_sigs[i], (int)o, why);
    printf("signal %d in a worker: %s\n", stop_sigs[i], why);
  }
  /* Ignored in the parent: ignored in the worker, which answers. */
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigemptyset(&ign.sa_mask);
  CHECK(sigaction(SIGHUP, &ign, NULL) == 0, "sigaction");
  answer a = {-1, -1};
  char why[256] = "";
  wk_outcome o = wk_run(w, 2, 5, &a, why, sizeof why);
  CHECK(o == WK_DONE && a.job == 2 && a.value == 1, "ignored SIGHUP in a worker: outcome %d (%s)",
        (int)o, why);
  wk_close(w);
  CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0, "pthread_sigmask");
  for (size_t k = 0; k < NSTOP; k++) sigaction(stop_sigs[k], &saved[k], NULL);
}

/* A spawned child's mask: the caller's less the stop signals. */
static void test_spawn_mask(void) {
  sigset_t block, old, child;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM), sigaddset(&block, SIGINT), sigaddset(&block, SIGUSR1);
  CHECK(pthread_sigmask(SIG_BLOCK, &block, &old) == 0, "pthread_sigmask");
  posix_spawnattr_t attr;
  int rc = fa_proc_spawnattr(&attr, POSIX_SPAWN_SETPGROUP);
  CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0, "pthread_sigmask");
  CHECK(rc == 0, "fa_proc_spawnattr: %s", strerror(rc));
  if (rc != 0) return;
  short flags = 0;
  CHECK(posix_spawnattr_getflags(&attr, &flags) == 0 && posix_spawnattr_getsigmask(&attr, &child) == 0,
        "posix_spawnattr_get*");
  CHECK((flags & POSIX_SPAWN_SETSIGMASK) && (flags & POSIX_SPAWN_SETPGROUP),
        "flags %#x: SETSIGMASK and the caller's SETPGROUP wanted", (unsigned)flags);
  CHECK(!sigismember(&child, SIGTERM) && !sigismember(&child, SIGINT) &&
        sigismember(&child, SIGUSR1) == 1, "the child's mask: SIGTERM, SIGINT unblocked, "
        "SIGUSR1 blocked wanted");
  posix_spawnattr_destroy(&attr);
  /* fa_proc_popen: the output, and the status as pclose gives it. */
  pid_t pid;
  FILE *p = fa_proc_popen("echo out; exit 3", &pid);
  CHECK(p != NULL, "fa_proc_popen: %s", strerror(errno));
  if (!p) return;
  char line[16] = "";
  char *got = fgets(line, sizeof line, p);
  int st = fa_proc_pclose(p, pid);
  CHECK(got && !strcmp(line, "out\n") && WIFEXITED(st) && WEXITSTATUS(st) == 3,
        "fa_proc_popen: '%s', status %#x", line, (unsigned)st);
}

int main(void) {
  test_plain();
  test_emulator();
  test_worker_signals();
  test_spawn_mask();
  return check_done("test_worker");
}
