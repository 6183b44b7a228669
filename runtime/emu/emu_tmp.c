/*
** emu_tmp.c
** The emulator's temporary folders (fatune-emu-XXXXXX under $TMPDIR) and
** object files, kept in a registry so that a process stopped by a signal
** can remove them: emu_tmp_cleanup uses only async-signal-safe calls (kill,
** waitpid, nanosleep, unlink, rmdir, close) on fixed-size state, with
** lock-free atomics for the slots. Each live folder holds an flock on its
** file `lock`; a new folder first sweeps stale ones of this user: folders
** older than an hour whose lock it can take (their owner is gone).
**
** Another user may rename things in $TMPDIR: a folder is made 0700, opened
** at once and used through that descriptor from then on; its path is only
** compared (device, inode, owner, mode) with the descriptor. A $TMPDIR that
** others may write without the sticky bit lets them rename our folder
** itself, so it is refused.
*/
#define _XOPEN_SOURCE 700   /* S_ISVTX */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"

#define PREFIX "fatune-emu-"
#define STALE_S 3600         /* a folder untouched this long, and unlocked, is stale */
#define NSLOTS 64            /* folders and files alive at once */
#define NCHILD 64            /* compilers at once per folder */
#define PATH_MAX_ 512

enum { FREE, BUSY, LIVE };

typedef struct slot {
  atomic_int state;
  pid_t owner;
  int dir_fd, lock_fd;
  atomic_int files;              /* k0 .. k<files-1>.{c,so,log} may exist */
  atomic_int child[NCHILD];      /* compiler process-group leaders, 0: none */
  char path[PATH_MAX_];
} slot;

static slot slots[NSLOTS];
static atomic_int dying;         /* set by emu_tmp_cleanup: start no compiler, make no folder */
static atomic_int making;        /* emu_tmp_dir_make calls past their check of dying */

/* ---- The registry ---- */

static int claim(const char *path, int dir_fd, int lock_fd) {
  if (strlen(path) >= PATH_MAX_) return -1;
  for (int i = 0; i < NSLOTS; i++) {
    int want = FREE;
    if (!atomic_compare_exchange_strong(&slots[i].state, &want, BUSY)) continue;
    slot *s = &slots[i];
    s->owner = getpid(), s->dir_fd = dir_fd, s->lock_fd = lock_fd;
    atomic_store(&s->files, 0);
    for (int c = 0; c < NCHILD; c++) atomic_store(&s->child[c], 0);
    memcpy(s->path, path, strlen(path) + 1);
    atomic_store(&s->state, LIVE);
    return i;
  }
  return -1;   /* full: the path is still removed normally, only not on a signal */
}

static void release(int i) {
  if (i < 0) return;
  int want = LIVE;
  if (atomic_compare_exchange_strong(&slots[i].state, &want, BUSY)) atomic_store(&slots[i].state, FREE);
}

const char *emu_tmp_root(void) {
  const char *tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

int emu_tmp_root_check(char *err, size_t errlen) {
  struct stat st;
  if (stat(emu_tmp_root(), &st) != 0) {
    snprintf(err, errlen, "$TMPDIR %s: %s", emu_tmp_root(), strerror(errno));
    return -1;
  }
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
    snprintf(err, errlen, "$TMPDIR %s is writable by others and has no sticky bit: they could "
             "replace the emulator's files; use a private folder or one of mode 1777",
             emu_tmp_root());
    return -1;
  }
  return 0;
}

/* ---- Async-signal-safe removal ---- */

/* dst = a + b + c, truncated to n; no stdio. */
static void join3(char *dst, size_t n, const char *a, const char *b, const char *c) {
  size_t k = 0;
  const char *part[3] = {a, b, c};
  for (int p = 0; p < 3; p++)
    for (const char *s = part[p]; *s && k + 1 < n; s++) dst[k++] = *s;
  dst[k] = '\0';
}

static void utoa(unsigned v, char *buf) {
  char rev[12];
  int n = 0;
  do rev[n++] = (char)('0' + v % 10), v /= 10; while (v);
  for (int i = 0; i < n; i++) buf[i] = rev[n - 1 - i];
  buf[n] = '\0';
}

static void nap_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Stop the folder's compilers (their whole process groups, so that the
** compiler driver removes its own temporaries), waiting up to 2 s for them
** before SIGKILL. */
static void stop_children(slot *s) {
  for (int c = 0; c < NCHILD; c++) {
    pid_t pid = (pid_t)atomic_load(&s->child[c]);
    if (pid > 0) kill(-pid, SIGTERM);
  }
  for (int round = 0; round < 200; round++) {
    int alive = 0;
    for (int c = 0; c < NCHILD; c++) {
      pid_t pid = (pid_t)atomic_load(&s->child[c]);
      if (pid <= 0) continue;
      int st;
      pid_t r = waitpid(pid, &st, WNOHANG);   /* ECHILD: its thread reaped it */
      if (r == 0 || kill(-pid, 0) == 0) alive = 1;
    }
    if (!alive) return;
    nap_ms(10);
  }
  for (int c = 0; c < NCHILD; c++) {
    pid_t pid = (pid_t)atomic_load(&s->child[c]);
    if (pid > 0) kill(-pid, SIGKILL);
  }
}

/* 1 when path is still the folder open as fd (lstat and fstat are
** async-signal-safe). */
static int same_dir(const char *path, int fd) {
  struct stat a, b;
  return lstat(path, &a) == 0 && fstat(fd, &b) == 0 && S_ISDIR(a.st_mode) &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_uid == geteuid() &&
         (a.st_mode & 07777) == 0700;
}

/* Unlink what the folder may hold and remove it when its path is still
** it; 0 when done. */
static int remove_dir_contents(slot *s) {
  static const char *const ext[] = {".c", ".so", ".log"};
  char num[16];
  const int files = atomic_load(&s->files);
  for (int id = 0; id < files; id++) {
    utoa((unsigned)id, num);
    for (int e = 0; e < 3; e++) {
      char name[32];
      join3(name, sizeof name, "k", num, ext[e]);
      unlinkat(s->dir_fd, name, 0);
    }
  }
  unlinkat(s->dir_fd, "lock", 0);
  if (!same_dir(s->path, s->dir_fd)) return 0;   /* moved away: not ours to remove by name */
  return rmdir(s->path) == 0 || errno == ENOENT ? 0 : -1;
}

void emu_tmp_cleanup(void) {
  const pid_t me = getpid();
  atomic_store(&dying, 1);
  /* A folder being made is claimed within a few system calls: wait for it
  ** (up to 2 s), or it would outlive the process. Both sides use seq_cst:
  ** a maker that missed dying is counted here. */
  for (int round = 0; round < 2000 && atomic_load(&making) > 0; round++) nap_ms(1);
  for (int i = 0; i < NSLOTS; i++) {
    slot *s = &slots[i];
    if (atomic_load(&s->state) != LIVE || s->owner != me) continue;
    /* A compile thread may still be writing: try again a few times. */
    for (int tries = 0; tries < 20; tries++) {
      stop_children(s);
      if (remove_dir_contents(s) == 0) break;
      nap_ms(10);
    }
  }
}

/* ---- The stale sweep ---- */

/* Removes folder name (in root) when it is this user's, a real folder, older
** than STALE_S, and nobody holds its lock. */
static void sweep_dir(int rootfd, const char *name, time_t now) {
  struct stat st;
  if (fstatat(rootfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != getuid() ||
      now - st.st_mtime < STALE_S)
    return;
  if (S_ISREG(st.st_mode)) {   /* an object an older emu_load did not get to remove */
    unlinkat(rootfd, name, 0);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  int dfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  int lock = openat(dfd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) != 0) {   /* alive */
    close(lock);
    close(dfd);
    return;
  }
  int dfd2 = dup(dfd);
  DIR *d = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
  if (!d && dfd2 >= 0) close(dfd2);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dfd, e->d_name, 0);
  if (d) closedir(d);
  unlinkat(rootfd, name, AT_REMOVEDIR);
  if (lock >= 0) close(lock);
  close(dfd);
}

void emu_tmp_sweep(void) {
  DIR *d = opendir(emu_tmp_root());
  if (!d) return;
  const time_t now = time(NULL);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (!strncmp(e->d_name, PREFIX, strlen(PREFIX))) sweep_dir(dirfd(d), e->d_name, now);
  closedir(d);
}

/* ---- Folders and files ---- */

int emu_tmp_dir_check(const emu_tmp_dir *d, char *err, size_t errlen) {
  if (same_dir(d->path, d->fd)) return 0;
  snprintf(err, errlen, "the compile folder %s was replaced or changed by someone else; "
           "nothing from it is used", d->path);
  return -1;
}

/* The folder mkdtemp made, opened and checked: d->fd, or -1. */
static int open_made(emu_tmp_dir *d, char *err, size_t errlen) {
  d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (d->fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s", d->path, strerror(errno));
    return -1;
  }
  if (emu_tmp_dir_check(d, err, errlen) != 0) {
    close(d->fd);
    return d->fd = -1;
  }
  return d->fd;
}

/* Makes, locks and claims the folder; 0 or -1. */
static int make_claimed(emu_tmp_dir *d, char *err, size_t errlen) {
  if ((size_t)snprintf(d->path, sizeof d->path, "%s/" PREFIX "XXXXXX", emu_tmp_root()) >=
      sizeof d->path) {
    snprintf(err, errlen, "$TMPDIR is too long: %s", emu_tmp_root());
    return -1;
  }
  if (!mkdtemp(d->path)) {
    snprintf(err, errlen, "cannot make a directory for the emulator's objects: %s: %s",
             d->path, strerror(errno));
    return -1;
  }
  if (open_made(d, err, errlen) < 0) return -1;   /* not ours any more: left alone */
  d->lock = openat(d->fd, "lock", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (d->lock < 0 || flock(d->lock, LOCK_EX | LOCK_NB) != 0) {
    snprintf(err, errlen, "cannot lock %s/lock: %s", d->path, strerror(errno));
    if (d->lock >= 0) close(d->lock), unlinkat(d->fd, "lock", 0);
    if (same_dir(d->path, d->fd)) rmdir(d->path);
    close(d->fd);
    return -1;
  }
  claim(d->path, d->fd, d->lock);   /* full: removed normally, only not on a signal */
  return 0;
}

int emu_tmp_dir_make(emu_tmp_dir *d, char *err, size_t errlen) {
  if (emu_tmp_root_check(err, errlen) != 0) return -1;
  emu_tmp_sweep();
  atomic_fetch_add(&making, 1);
  int rc = -1;
  if (atomic_load(&dying))   /* a signal is ending the process: its cleanup is past */
    snprintf(err, errlen, "stopping: no new folder for the host compiler");
  else
    rc = make_claimed(d, err, errlen);
  atomic_fetch_sub(&making, 1);
  return rc;
}

static slot *find(const char *path) {
  for (int i = 0; i < NSLOTS; i++)
    if (atomic_load(&slots[i].state) == LIVE && slots[i].owner == getpid() &&
        !strcmp(slots[i].path, path))
      return &slots[i];
  return NULL;
}

void emu_tmp_dir_remove(emu_tmp_dir *d) {
  slot *s = find(d->path);
  if (s) release((int)(s - slots));
  unlinkat(d->fd, "lock", 0);
  if (same_dir(d->path, d->fd)) rmdir(d->path);
  close(d->lock);
  close(d->fd);
}

void emu_tmp_dir_files(const char *dir, int id) {
  slot *s = find(dir);
  if (!s) return;
  for (int cur = atomic_load(&s->files); cur < id + 1;)
    if (atomic_compare_exchange_weak(&s->files, &cur, id + 1)) break;
}

int emu_tmp_child_add(const char *dir, pid_t pid) {
  slot *s = find(dir);
  for (int c = 0; s && c < NCHILD; c++) {
    int want = 0;
    if (atomic_compare_exchange_strong(&s->child[c], &want, (int)pid)) return c;
  }
  return -1;
}

void emu_tmp_child_done(const char *dir, int c) {
  slot *s = find(dir);
  if (s && c >= 0 && c < NCHILD) atomic_store(&s->child[c], 0);
}

int emu_tmp_dying(void) { return atomic_load(&dying); }
