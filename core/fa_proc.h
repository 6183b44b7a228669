/*
** fa_proc.h
** Child processes and the stop signals (SIGINT, SIGTERM, SIGHUP). The
** fatune command blocks these in every thread and takes them in one thread
** of its own, so that no handler ever runs inside NVRTC or malloc. A child
** must inherit neither that mask (it could not be stopped) nor a handler it
** was not meant to run (NVRTC's, in a forked child): every process fatune
** or libfatune starts begins through these.
*/
#ifndef FA_PROC_H
#define FA_PROC_H

#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/types.h>

/* set = those of SIGINT, SIGTERM and SIGHUP that this process does not
** ignore. */
void fa_proc_stop_signals(sigset_t *set);

/* Initialises attr with flags, and with the calling thread's signal mask
** less the stop signals for the child. 0, or an error number (attr is then
** not initialised). */
int fa_proc_spawnattr(posix_spawnattr_t *attr, short flags);

/* In a forked child, before its work: each stop signal that a handler
** catches goes back to SIG_DFL (one ignored stays ignored), then all are
** unblocked. Async-signal-safe. */
void fa_proc_child_signals(void);

/* popen(cmd, "r") whose child starts as fa_proc_spawnattr says: sh -c cmd,
** its stdout read from the stream. NULL with errno set. */
FILE *fa_proc_popen(const char *cmd, pid_t *pid);

/* Closes the stream and waits for the child: its wait status as pclose
** gives it, or -1. */
int fa_proc_pclose(FILE *f, pid_t pid);

#endif
