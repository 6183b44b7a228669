/*
** emu_compile.c
** Kernel bodies to loaded shared objects. Compiler start-up and the prelude
** cost more than a kernel, so kernels are compiled in batches: one C file
** holds the parameter block, the emulation ABI and prelude once, then many
** bodies, each under a #line directive that names its entry point, so a
** diagnostic points at the body's own line. A batch that fails is
** compiled again kernel by kernel, so one bad kernel costs only itself.
**
** What runs is exactly the bytes that were checked: the compiler works in
** the private folder through its descriptor (its working directory), the
** object is read back through that descriptor into memory, and every object,
** compiled or from the cache, is loaded from an anonymous memory file
** (memfd), never from a path another user could rename something over.
**
** A loaded object is shared: a registry maps each kernel's source to the
** module that holds it, so loading the same kernel again (for another
** problem key) reuses the module instead of loading a copy.
*/
#define _GNU_SOURCE   /* memfd_create, posix_spawn_file_actions_addfchdir_np */
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"
#include "fa_proc.h"
#include "par.h"
#include "template_files.h"

extern char **environ;

#define CFLAGS "-std=c11 -O1 -fPIC -shared -fno-strict-aliasing"

/* Kernels may be mapped executable even where memfds are made
** non-executable by default (vm.memfd_noexec); older headers lack it. */
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

struct emu_module {
  void *handle;
  int memfd;     /* open while loaded: dlopen matches names, and the name is its number */
  int refs;      /* under reg_mu */
};

/* A kernel bound in a loaded module, by its source and the extra flags it
** was compiled with. Holds no reference: it goes when its module does. */
typedef struct reg_entry {
  struct reg_entry *next;
  char *flags, *entry, *body;
  emu_kernel_fn fn;
  emu_module *module;
} reg_entry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static reg_entry *registry;

typedef struct batch { size_t first, count; } batch;

typedef struct job {
  const emu_source *src;
  emu_build *out;
  const emu_compile_opts *opts;
  const emu_tmp_dir *dir;
  batch *batches;
  atomic_int next_file;
} job;

static char compiler_version[160];

/* The first line of "$CC --version". */
static void ask_version(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", emu_compiler());
  pid_t pid;
  FILE *p = fa_proc_popen(cmd, &pid);
  if (!p) return;
  if (!fgets(compiler_version, sizeof compiler_version, p)) compiler_version[0] = '\0';
  compiler_version[strcspn(compiler_version, "\n")] = '\0';
  fa_proc_pclose(p, pid);
}

const char *emu_compiler(void) {
  const char *cc = getenv("FATUNE_CC");
  if (!cc || !*cc) cc = getenv("CC");
  return cc && *cc ? cc : "cc";
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const template_file *embedded(const char *name) {
  for (const template_file *f = template_files; f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

/* A new file `name` in the folder dirfd, for writing. */
static FILE *create_at(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f && fd >= 0) close(fd);
  return f;
}

/* Whether prelude `name` is among the first `upto` kernels' of the batch
** (the first one's up to `at`): written already. */
static int written(const emu_source *src, size_t first, size_t upto, int at, const char *name) {
  for (size_t i = first; i <= upto; i++)
    for (int j = 0; src[i].preludes && j < (i == upto ? at : src[i].preludes->n); j++)
      if (!strcmp(src[i].preludes->file[j], name)) return 1;
  return 0;
}

static int write_file(FILE *f, const char *name) {
  const template_file *t = embedded(name);
  return t && fprintf(f, "#line 1 \"%s\"\n", t->name) > 0 &&
         fwrite(t->text, 1, t->size, f) == t->size;
}

/* The C text of kernels [first, first + count), as `name` in dirfd: the
** parameter block, the counters and the ABI, then each kernel's preludes once, in the
** order the kernels name them, then the kernels. */
static int write_batch(int dirfd, const char *name, const emu_source *src, size_t first,
                       size_t count) {
  FILE *f = create_at(dirfd, name);
  if (!f) return -1;
  int ok = fprintf(f, "/* fatune CPU emulation: %zu kernel(s) */\n", count) > 0 &&
           write_file(f, "fa_params.h") && write_file(f, "fa_counters.h") &&
           write_file(f, "emu_abi.h");
  for (size_t i = first; ok && i < first + count; i++)
    for (int j = 0; ok && src[i].preludes && j < src[i].preludes->n; j++)
      if (!written(src, first, i, j, src[i].preludes->file[j]))
        ok = write_file(f, src[i].preludes->file[j]);
  for (size_t i = first; ok && i < first + count; i++)
    ok = fprintf(f, "\n#line 1 \"%s\"\n%s\n", src[i].entry, src[i].body) > 0;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

static char *read_text(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  while (s) {
    n += fread(s + n, 1, cap - 1 - n, f);
    if (n < cap - 1) break;
    char *t = realloc(s, cap * 2);
    if (!t) free(s);
    s = t, cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!s) return NULL;
  if (bad) {
    free(s);
    return NULL;
  }
  s[n] = '\0';
  return s;
}

/* Run the compiler through the shell so that CC may carry words of its own
** ("ccache gcc"), in the folder d (entered by its descriptor, so a folder
** renamed into its path changes nothing); the file names travel as
** positional parameters, unquoted by nothing. Returns the exit status, or
** -1 when it could not be started. The compiler runs in a process group of
** its own, registered with the folder, so that a signal handler can stop it
** and all it started. */
static int run_compiler(const emu_tmp_dir *d, const char *cfile, const char *sofile,
                        const char *logfile, const char *extra) {
  char script[512];
  snprintf(script, sizeof script, "exec %s %s %s \"$1\" -o \"$2\" -lm >\"$3\" 2>&1",
           emu_compiler(), CFLAGS, extra ? extra : "");
  char *argv[] = {"sh", "-c", script, "sh", (char *)cfile, (char *)sofile, (char *)logfile, NULL};
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t fa;
  if (emu_tmp_dying() || posix_spawn_file_actions_init(&fa) != 0) return -1;
  if (posix_spawn_file_actions_addfchdir_np(&fa, d->fd) != 0 ||
      fa_proc_spawnattr(&attr, POSIX_SPAWN_SETPGROUP) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return -1;
  }
  pid_t pid;
  int rc = posix_spawnattr_setpgroup(&attr, 0) != 0 ||
           posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ) != 0;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) return -1;
  const int token = emu_tmp_child_add(d->path, pid);
  int status;
  while ((rc = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
  emu_tmp_child_done(d->path, token);
  if (rc < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- Loaded modules and their registry ---- */

static void module_release(emu_module *m) {
  if (!m) return;
  pthread_mutex_lock(&reg_mu);
  const int last = --m->refs == 0;
  for (reg_entry **e = &registry; last && *e;) {
    reg_entry *x = *e;
    if (x->module != m) {
      e = &x->next;
      continue;
    }
    *e = x->next;
    free(x->flags), free(x->entry), free(x->body), free(x);
  }
  pthread_mutex_unlock(&reg_mu);
  if (!last) return;
  dlclose(m->handle);
  close(m->memfd);
  free(m);
}

/* Binds out to the module already loaded with src's kernel (compiled with
** flags), taking a reference; 1 when there is one. */
static int reuse(const emu_source *src, const char *flags, emu_build *out) {
  pthread_mutex_lock(&reg_mu);
  reg_entry *e = registry;
  while (e && (strcmp(e->entry, src->entry) || strcmp(e->body, src->body) ||
               strcmp(e->flags, flags)))
    e = e->next;
  if (e) out->fn = e->fn, out->module = e->module, e->module->refs++;
  pthread_mutex_unlock(&reg_mu);
  return e != NULL;
}

/* Records that m holds src's kernel as fn; a kernel already recorded keeps
** its module (both hold the same code). Out of memory: merely not shared. */
static void remember(const emu_source *src, const char *flags, emu_kernel_fn fn,
                     emu_module *m) {
  emu_build seen = {0};
  if (reuse(src, flags, &seen)) {
    module_release(seen.module);
    return;
  }
  reg_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->flags = strdup(flags)) || !(e->entry = strdup(src->entry)) ||
      !(e->body = strdup(src->body))) {
    if (e) free(e->flags), free(e->entry), free(e);
    return;
  }
  e->fn = fn, e->module = m;
  pthread_mutex_lock(&reg_mu);
  e->next = registry, registry = e;
  pthread_mutex_unlock(&reg_mu);
}

/* An anonymous memory file holding the bytes; -1 with msg said. */
static int memfd_of(const unsigned char *bytes, size_t size, char *msg, size_t n) {
  int fd = memfd_create("fatune-kernels", MFD_CLOEXEC | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = memfd_create("fatune-kernels", MFD_CLOEXEC);  /* before MFD_EXEC */
  if (fd < 0) {
    snprintf(msg, n, "cannot load the compiled kernels: memfd_create: %s", strerror(errno));
    return -1;
  }
  for (size_t done = 0; done < size;) {
    ssize_t w = write(fd, bytes + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(msg, n, "cannot load the compiled kernels: writing a memfd: %s",
               w < 0 ? strerror(errno) : "no progress");
      close(fd);
      return -1;
    }
    done += (size_t)w;
  }
  return fd;
}

/* Load object bytes from memory and bind kernels [first, first + count)
** (compiled with flags) to them; a message (malloc'd) when nothing loaded. */
static char *load(const unsigned char *bytes, size_t size, const char *flags,
                  const emu_source *src, size_t first, size_t count, emu_build *out) {
  char msg[512], path[64];
  int fd = memfd_of(bytes, size, msg, sizeof msg);
  if (fd < 0) return strdup(msg);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(msg, sizeof msg, "cannot load the compiled kernels: %s", dlerror());
    close(fd);
    return strdup(msg);
  }
  int (*abi)(void) = (int (*)(void))dlsym(h, "fa_emu_abi");
  emu_module *m = malloc(sizeof *m);
  if (!abi || abi() != FA_EMU_ABI_VERSION || !m) {
    free(m);
    dlclose(h);
    close(fd);
    return strdup("the compiled kernels do not match this emulator (ABI)");
  }
  m->handle = h, m->memfd = fd, m->refs = 1;  /* ours, dropped below */
  for (size_t i = first; i < first + count; i++) {
    emu_kernel_fn fn = (emu_kernel_fn)dlsym(h, src[i].entry);
    if (!fn) {
      snprintf(msg, sizeof msg, "entry point %s missing from the compiled object", src[i].entry);
      out[i].log = strdup(msg);
      continue;
    }
    pthread_mutex_lock(&reg_mu);
    m->refs++;
    pthread_mutex_unlock(&reg_mu);
    out[i].fn = fn, out[i].module = m;
    remember(&src[i], flags, fn, m);
  }
  module_release(m);
  return NULL;
}

emu_kernel_fn emu_build_entry(const emu_build *b, const char *entry) {
  return b->module ? (emu_kernel_fn)dlsym(b->module->handle, entry) : NULL;
}

/* ---- Compiling ---- */

/* The compiled object `name` in d, read through d's descriptor into
** memory: a regular file of this user's. NULL with msg said. */
static unsigned char *read_object(const emu_tmp_dir *d, const char *name, size_t *size,
                                  char *msg, size_t n) {
  int fd = openat(d->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  unsigned char *bytes = NULL;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size <= 0 || !(bytes = malloc((size_t)st.st_size))) {
    snprintf(msg, n, "cannot read the compiled object %s/%s: %s", d->path, name,
             fd < 0 ? strerror(errno) : "not a regular file of this user's");
    if (fd >= 0) close(fd);
    return NULL;
  }
  size_t done = 0;
  while (done < (size_t)st.st_size) {
    ssize_t r = read(fd, bytes + done, (size_t)st.st_size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  close(fd);
  if (done != (size_t)st.st_size) {
    snprintf(msg, n, "cannot read the compiled object %s/%s", d->path, name);
    free(bytes);
    return NULL;
  }
  *size = done;
  return bytes;
}

/* A copy of the object's bytes in every build of the batch that loaded. */
static void keep_object(const unsigned char *bytes, size_t size, emu_build *out, size_t first,
                        size_t count) {
  for (size_t i = first; i < first + count; i++) {
    if (!out[i].fn) continue;
    out[i].object = malloc(size);
    if (out[i].object) memcpy(out[i].object, bytes, size), out[i].object_size = size;
  }
}

/* The built object loaded, after checking the folder is still ours; a
** message (malloc'd) when not. */
static char *load_built(job *j, const char *sofile, size_t first, size_t count) {
  char msg[1024];
  size_t size;
  unsigned char *bytes = NULL;
  if (emu_tmp_dir_check(j->dir, msg, sizeof msg) == 0)
    bytes = read_object(j->dir, sofile, &size, msg, sizeof msg);
  if (!bytes) return strdup(msg);
  const char *flags = j->opts->extra_flags ? j->opts->extra_flags : "";
  char *why = load(bytes, size, flags, j->src, first, count, j->out);
  if (!why && j->opts->keep_objects) keep_object(bytes, size, j->out, first, count);
  free(bytes);
  return why;
}

/* Compile and load kernels [first, first + count) as one object. */
static int build(job *j, size_t first, size_t count) {
  char cfile[32], sofile[32], logfile[32], msg[1024];
  int id = atomic_fetch_add(&j->next_file, 1);
  snprintf(cfile, sizeof cfile, "k%d.c", id);
  snprintf(sofile, sizeof sofile, "k%d.so", id);
  snprintf(logfile, sizeof logfile, "k%d.log", id);
  emu_tmp_dir_files(j->dir->path, id);
  double t0 = now_ms();
  int rc = write_batch(j->dir->fd, cfile, j->src, first, count);
  char *log = NULL;
  if (rc != 0) {
    log = strdup("cannot write the kernel source for the host compiler");
  } else if ((rc = emu_tmp_dir_check(j->dir, msg, sizeof msg)) != 0) {
    log = strdup(msg);
  } else {
    rc = run_compiler(j->dir, cfile, sofile, logfile, j->opts->extra_flags);
    log = read_text(j->dir->fd, logfile);
    if (rc < 0) {
      free(log);
      log = strdup("cannot start the host compiler (/bin/sh)");
    }
  }
  if (rc == 0) {
    char *why = load_built(j, sofile, first, count);
    if (why) free(log), log = why, rc = -1;
  }
  double ms = (now_ms() - t0) / (double)count;
  for (size_t i = first; i < first + count; i++) j->out[i].ms = ms;
  if (rc != 0 && count == 1) {
    j->out[first].log = log ? log : strdup("the host compiler failed and said nothing");
    log = NULL;
  }
  free(log);
  unlinkat(j->dir->fd, cfile, 0), unlinkat(j->dir->fd, sofile, 0);
  unlinkat(j->dir->fd, logfile, 0);
  return rc;
}

static void build_batch(size_t b, void *ud) {
  job *j = ud;
  const batch *bt = &j->batches[b];
  if (build(j, bt->first, bt->count) == 0 || bt->count == 1) return;
  for (size_t i = bt->first; i < bt->first + bt->count; i++) build(j, i, 1);
}

int emu_compile(const emu_source *src, size_t n, const emu_compile_opts *opts,
                emu_build *out, char *err, size_t errlen) {
  memset(out, 0, n * sizeof *out);
  if (n == 0) return 0;
  emu_tmp_dir dir;
  if (emu_tmp_dir_make(&dir, err, errlen) != 0) return -1;
  int jobs = opts->jobs > 0 ? opts->jobs : par_cores();
  size_t per = opts->batch > 0 ? (size_t)opts->batch : (n + (size_t)jobs - 1) / (size_t)jobs;
  size_t nb = (n + per - 1) / per;
  job j = {.src = src, .out = out, .opts = opts, .dir = &dir,
           .batches = calloc(nb, sizeof(batch))};
  atomic_init(&j.next_file, 0);
  int rc = -1;
  if (!j.batches) {
    snprintf(err, errlen, "out of memory");
  } else {
    for (size_t b = 0; b < nb; b++) {
      j.batches[b].first = b * per;
      j.batches[b].count = b + 1 < nb ? per : n - b * per;
    }
    rc = par_for(nb, jobs, build_batch, &j, NULL, NULL);
    if (rc != 0) snprintf(err, errlen, "cannot start the compile threads");
  }
  free(j.batches);
  emu_tmp_dir_remove(&dir);
  return rc;
}

void emu_build_free(emu_build *b) {
  if (!b) return;
  module_release(b->module);
  free(b->log);
  free(b->object);
  memset(b, 0, sizeof *b);
}

int emu_load(const void *object, size_t size, const emu_source *src, emu_build *out, char *err,
             size_t errlen) {
  memset(out, 0, sizeof *out);
  if (reuse(src, "", out)) return 0;
  char *why = load(object, size, "", src, 0, 1, out);
  if (!why && !out->fn) why = out->log, out->log = NULL;
  if (why) {
    snprintf(err, errlen, "%s", why);
    free(why);
    emu_build_free(out);
    return -1;
  }
  return 0;
}

const char *emu_compile_flags(void) { return CFLAGS; }

const char *emu_compiler_version(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, ask_version);
  return compiler_version[0] ? compiler_version : "unknown";
}
