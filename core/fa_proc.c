/*
** fa_proc.c
** Child processes that do not inherit the stop signals' mask (fa_proc.h).
*/
#define _GNU_SOURCE   /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fa_proc.h"

extern char **environ;

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof stop_signals / sizeof stop_signals[0])

void fa_proc_stop_signals(sigset_t *set) {
  sigemptyset(set);
  for (size_t i = 0; i < NSTOP; i++) {
    struct sigaction old;
    if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaddset(set, stop_signals[i]);
  }
}

int fa_proc_spawnattr(posix_spawnattr_t *attr, short flags) {
  sigset_t mask;
  int rc = pthread_sigmask(SIG_BLOCK, NULL, &mask);
  for (size_t i = 0; rc == 0 && i < NSTOP; i++) rc = sigdelset(&mask, stop_signals[i]) ? EINVAL : 0;
  if (rc != 0 || (rc = posix_spawnattr_init(attr)) != 0) return rc;
  rc = posix_spawnattr_setflags(attr, (short)(flags | POSIX_SPAWN_SETSIGMASK));
  if (rc == 0) rc = posix_spawnattr_setsigmask(attr, &mask);
  if (rc != 0) posix_spawnattr_destroy(attr);
  return rc;
}

void fa_proc_child_signals(void) {
  sigset_t set;
  fa_proc_stop_signals(&set);
  for (size_t i = 0; i < NSTOP; i++) {
    struct sigaction old, dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN &&
        old.sa_handler != SIG_DFL)
      sigaction(stop_signals[i], &dfl, NULL);
  }
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

FILE *fa_proc_popen(const char *cmd, pid_t *pid) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return NULL;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc == 0) {
    rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (rc == 0 && (rc = fa_proc_spawnattr(&attr, 0)) == 0) {
      rc = posix_spawn(pid, "/bin/sh", &fa, &attr, argv, environ);
      posix_spawnattr_destroy(&attr);
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  close(fds[1]);
  FILE *f = rc == 0 ? fdopen(fds[0], "r") : NULL;
  if (f) return f;
  const int saved = rc ? rc : errno;
  close(fds[0]);
  if (rc == 0)   /* started, but no stream: let it finish */
    while (waitpid(*pid, &(int){0}, 0) < 0 && errno == EINTR) {}
  errno = saved;
  return NULL;
}

int fa_proc_pclose(FILE *f, pid_t pid) {
  const int closed = fclose(f);
  int status;
  pid_t r;
  while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
  return r == pid && closed == 0 ? status : -1;
}
