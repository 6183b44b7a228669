/*
** emu_compile.c
** Kernel bodies to loaded shared objects. Compiler start-up and the prelude
** cost more than a kernel, so kernels are compiled in batches: one C file
** holds the parameter block, the emulation ABI and prelude once, then many
** bodies, each under a #line directive that names its entry point, so a
** diagnostic points at the body's own line. A batch that fails is
** compiled again kernel by kernel, so one bad kernel costs only itself.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "emu.h"
#include "fa_proc.h"
#include "par.h"
#include "template_files.h"

extern char **environ;

#define CFLAGS "-std=c11 -O2 -fPIC -shared -fno-strict-aliasing"

struct emu_module {
  void *handle;
  atomic_int refs;
};

typedef struct batch { size_t first, count; } batch;

typedef struct job {
  const emu_source *src;
  emu_build *out;
  const emu_compile_opts *opts;
  const char *dir;
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

/* The C text of kernels [first, first + count). */
static int write_batch(const char *path, const emu_source *src, size_t first, size_t count) {
  static const char *const preludes[] = {"fa_params.h", "emu_abi.h", "prelude_emu.h",
                                          "prelude_emu_tc.h", "prelude_emu_sm90.h",
                                          "prelude_tile.h"};
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fprintf(f, "/* fatune CPU emulation: %zu kernel(s) */\n", count) > 0;
  for (size_t i = 0; ok && i < sizeof preludes / sizeof preludes[0]; i++) {
    const template_file *t = embedded(preludes[i]);
    ok = t && fprintf(f, "#line 1 \"%s\"\n", t->name) > 0 &&
         fwrite(t->text, 1, t->size, f) == t->size;
  }
  for (size_t i = first; ok && i < first + count; i++)
    ok = fprintf(f, "\n#line 1 \"%s\"\n%s\n", src[i].entry, src[i].body) > 0;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
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
** ("ccache gcc"); the paths travel as positional parameters, unquoted by
** nothing. Returns the exit status, or -1 when it could not be started.
** The compiler runs in a process group of its own, registered with the
** folder, so that a signal handler can stop it and all it started. */
static int run_compiler(const char *dir, const char *cfile, const char *sofile,
                        const char *logfile, const char *extra) {
  char script[512];
  snprintf(script, sizeof script, "exec %s %s %s \"$1\" -o \"$2\" -lm >\"$3\" 2>&1",
           emu_compiler(), CFLAGS, extra ? extra : "");
  char *argv[] = {"sh", "-c", script, "sh", (char *)cfile, (char *)sofile, (char *)logfile, NULL};
  posix_spawnattr_t attr;
  if (emu_tmp_dying() || fa_proc_spawnattr(&attr, POSIX_SPAWN_SETPGROUP) != 0) return -1;
  pid_t pid;
  int rc = posix_spawnattr_setpgroup(&attr, 0) != 0 ||
           posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ) != 0;
  posix_spawnattr_destroy(&attr);
  if (rc) return -1;
  const int token = emu_tmp_child_add(dir, pid);
  int status;
  while ((rc = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
  emu_tmp_child_done(dir, token);
  if (rc < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void module_release(emu_module *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
    dlclose(m->handle);
    free(m);
  }
}

/* Load a built object and bind kernels [first, first + count) to it. */
static char *load(const char *sofile, const emu_source *src, size_t first, size_t count,
                  emu_build *out) {
  char msg[512];
  void *h = dlopen(sofile, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(msg, sizeof msg, "cannot load the compiled kernels: %s", dlerror());
    return strdup(msg);
  }
  int (*abi)(void) = (int (*)(void))dlsym(h, "fa_emu_abi");
  emu_slot_fn slot = (emu_slot_fn)dlsym(h, "fa_emu_slot");
  emu_module *m = malloc(sizeof *m);
  if (!abi || !slot || abi() != FA_EMU_ABI_VERSION || !m) {
    free(m);
    dlclose(h);
    return strdup("the compiled kernels do not match this emulator (ABI)");
  }
  m->handle = h;
  atomic_init(&m->refs, 1);  /* ours, dropped below */
  for (size_t i = first; i < first + count; i++) {
    emu_kernel_fn fn = (emu_kernel_fn)dlsym(h, src[i].entry);
    if (!fn) {
      snprintf(msg, sizeof msg, "entry point %s missing from the compiled object", src[i].entry);
      out[i].log = strdup(msg);
      continue;
    }
    out[i].fn = fn, out[i].slot = slot, out[i].module = m;
    atomic_fetch_add(&m->refs, 1);
  }
  module_release(m);
  return NULL;
}

/* A copy of the object's bytes in every build of the batch that loaded. */
static void keep_object(const char *sofile, emu_build *out, size_t first, size_t count) {
  FILE *f = fopen(sofile, "rb");
  if (!f) return;
  unsigned char *bytes = NULL;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (bytes = malloc((size_t)size)) && fread(bytes, 1, (size_t)size, f) != (size_t)size) {
    free(bytes);
    bytes = NULL;
  }
  fclose(f);
  for (size_t i = first; bytes && i < first + count; i++) {
    if (!out[i].fn) continue;
    out[i].object = malloc((size_t)size);
    if (out[i].object) memcpy(out[i].object, bytes, (size_t)size), out[i].object_size = (size_t)size;
  }
  free(bytes);
}

/* Compile and load kernels [first, first + count) as one object. */
static int build(job *j, size_t first, size_t count) {
  char cfile[600], sofile[600], logfile[600];
  int id = atomic_fetch_add(&j->next_file, 1);
  snprintf(cfile, sizeof cfile, "%s/k%d.c", j->dir, id);
  snprintf(sofile, sizeof sofile, "%s/k%d.so", j->dir, id);
  snprintf(logfile, sizeof logfile, "%s/k%d.log", j->dir, id);
  emu_tmp_dir_files(j->dir, id);
  double t0 = now_ms();
  int rc = write_batch(cfile, j->src, first, count);
  char *log = NULL;
  if (rc != 0) {
    log = strdup("cannot write the kernel source for the host compiler");
  } else {
    rc = run_compiler(j->dir, cfile, sofile, logfile, j->opts->extra_flags);
    log = read_text(logfile);
    if (rc < 0) {
      free(log);
      log = strdup("cannot start the host compiler (/bin/sh)");
    }
  }
  if (rc == 0) {
    char *why = load(sofile, j->src, first, count, j->out);
    if (why) free(log), log = why, rc = -1;
  }
  if (rc == 0 && j->opts->keep_objects) keep_object(sofile, j->out, first, count);
  double ms = (now_ms() - t0) / (double)count;
  for (size_t i = first; i < first + count; i++) j->out[i].ms = ms;
  if (rc != 0 && count == 1) {
    j->out[first].log = log ? log : strdup("the host compiler failed and said nothing");
    log = NULL;
  }
  free(log);
  unlink(cfile), unlink(sofile), unlink(logfile);
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
  char dir[512];
  if (emu_tmp_dir_make(dir, sizeof dir, err, errlen) != 0) return -1;
  int jobs = opts->jobs > 0 ? opts->jobs : par_cores();
  size_t per = opts->batch > 0 ? (size_t)opts->batch : (n + (size_t)jobs - 1) / (size_t)jobs;
  size_t nb = (n + per - 1) / per;
  job j = {.src = src, .out = out, .opts = opts, .dir = dir, .batches = calloc(nb, sizeof(batch))};
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
  emu_tmp_dir_remove(dir);
  return rc;
}

void emu_build_free(emu_build *b) {
  if (!b) return;
  module_release(b->module);
  free(b->log);
  free(b->object);
  memset(b, 0, sizeof *b);
}

int emu_load(const void *object, size_t size, const char *entry, emu_build *out, char *err,
             size_t errlen) {
  memset(out, 0, sizeof *out);
  char path[512];
  snprintf(path, sizeof path, "%s/fatune-emu-XXXXXX", emu_tmp_root());
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(err, errlen, "cannot write a kernel object: %s: %s", path, strerror(errno));
    return -1;
  }
  const int token = emu_tmp_file_add(path);
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(object, 1, size, f) == size;
  if (f ? fclose(f) != 0 : close(fd) != 0) ok = 0;
  emu_source src = {entry, ""};
  char *why = ok ? load(path, &src, 0, 1, out) : strdup("cannot write a kernel object");
  unlink(path);
  emu_tmp_file_done(token);
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
