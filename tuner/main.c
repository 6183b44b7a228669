/*
** main.c
** The fatune command: one table of commands, each with its handler (in
** its own file), as Lua's luaL_Reg tables name C functions; the main job
** is the entry without a name. cli.c parses and holds each command's help.
** Bad input prints one line on stderr and exits 2; a failure of the work
** itself (a variant that does not compile, say) exits 1.
*/
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_db.h"
#include "commands.h"
#include "backend.h"
#include "estimate.h"
#include "explore.h"
#include "fa_mod.h"
#include "fa_proc.h"
#include "gen.h"
#include "report.h"
#include "run.h"
#include "tune.h"

/* What a command needs before its handler runs. */
enum {
  NEEDS_TARGET = 1,   /* the generator and a target (the handler is `gen`) */
  QUIET_TARGET = 2,   /* say nothing about how the target was chosen */
  NEEDS_GPU = 4,      /* with --backend cuda, a GPU, or one line and exit 1 */
  PICKS_DTYPE = 8     /* without --dtype, the target's: bf16 on tensor cores */
};

typedef struct command {
  const char *name;   /* NULL: the main job */
  cli_cmd cmd;
  int (*db)(const cli_opts *o);                                      /* needs nothing more */
  int (*gen)(gen_state *g, const cli_opts *o, const gen_target *t);  /* NEEDS_TARGET */
  int needs;
} command;

static const command commands[] = {
  {NULL, CMD_TUNE, NULL, tune_main, NEEDS_TARGET | NEEDS_GPU | PICKS_DTYPE},
  {"run", CMD_RUN, NULL, run_main, NEEDS_TARGET | QUIET_TARGET | NEEDS_GPU},
  {"list", CMD_LIST, NULL, cmd_list_main, NEEDS_TARGET | QUIET_TARGET | PICKS_DTYPE},
  {"gen", CMD_GEN, NULL, cmd_gen_main, NEEDS_TARGET | QUIET_TARGET | PICKS_DTYPE},
  {"compile", CMD_COMPILE, NULL, cmd_compile_main, NEEDS_TARGET | PICKS_DTYPE},
  {"sass", CMD_SASS, cmd_sass_main, NULL, 0},
  {"best", CMD_BEST, cmd_db_main, NULL, 0},
  {"show", CMD_SHOW, cmd_db_main, NULL, 0},
  {"export", CMD_EXPORT, cmd_db_main, NULL, 0},
  {"merge", CMD_MERGE, cmd_db_main, NULL, 0},
  {"explore", CMD_EXPLORE, NULL, explore_main, NEEDS_TARGET | NEEDS_GPU},
  {"report", CMD_REPORT, report_main, NULL, 0},
  {"baseline", CMD_BASELINE, cmd_baseline_main, NULL, 0},
  {"model", CMD_MODEL, NULL, cmd_model_main, NEEDS_TARGET | QUIET_TARGET | PICKS_DTYPE},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* Why arch cannot be a target, in one line after `what` ("" or "the GPU
** ... is sm_100a: "): an arch newer than this NVRTC knows (sm_, a number
** past its newest, and 'a' from sm_90 or 'f' from sm_100 on), or none. */
static void refuse_arch(const char *what, const char *arch) {
  const int newest = backend_gpu_newest_arch();
  char *end = NULL;
  const long num = strncmp(arch, "sm_", 3) || arch[3] < '1' || arch[3] > '9'
                       ? 0 : strtol(arch + 3, &end, 10);
  const int newer = num > newest && newest > 0 && num < 10000 &&
                    (!*end || (*end == 'a' && num >= 90 && !end[1]) ||
                     (*end == 'f' && num >= 100 && !end[1]));
  if (newer)
    fprintf(stderr, "fatune: %sNVRTC %s cannot compile for %s (the newest it knows is sm_%d): a "
                    "newer NVRTC can (a newer CUDA toolkit, or pip's nvidia-cuda-nvrtc)\n",
            what, backend_gpu_compiler_version(), arch, newest);
  else
    fprintf(stderr, "fatune: %sunknown arch '%s' (sm_ and the GPU's compute capability, as "
                    "`fatune --help` lists)\n", what, arch);
}

/* The target: --arch, else the first GPU's (the arch the space targets it
** as: an arch-specific one where a family runs only there), else the
** space's default. */
static int resolve_target(gen_state *g, const cli_opts *o, gen_target *t, int quiet) {
  char arch[16];
  int smem = o->smem;
  snprintf(arch, sizeof arch, "%s", gen_default_arch(g));
  if (o->arch) {
    if (!backend_gpu_arch_supported(o->arch)) return refuse_arch("", o->arch), -1;
    if (gen_target_for_arch(g, o->arch, smem, 0, t) != 0) {
      fprintf(stderr, "fatune: unknown arch '%s' (sm_ and the GPU's compute capability, as "
                      "`fatune --help` lists)\n", o->arch);
      return -1;
    }
    return 0;
  }
  char msg[256];
  fa_device dev;
  /* In a child process: this one must never initialise CUDA (workers fork). */
  if (backend_probe_gpu(&dev, msg, sizeof msg)) {
    char base[16], why[256];
    backend_device_arch(&dev, base, sizeof base);
    if (gen_device_arch(g, base, arch, sizeof arch, why, sizeof why) != 0) {
      fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
      return -1;
    }
    if (!backend_gpu_arch_supported(arch)) {  /* a GPU newer than NVRTC */
      char what[320];
      snprintf(what, sizeof what, "the GPU, %.200s, is %s: ", dev.name, arch);
      return refuse_arch(what, arch), -1;
    }
    if (!smem) smem = dev.smem_per_block_optin;
    if (!quiet) fprintf(stderr, "fatune: target %s (%s%s%s)\n", arch, dev.name, why[0] ? "; " : "",
                        why);
  } else if (o->gpu) {
    /* No GPU here, but the one named for the estimate: tune for its arch,
    ** so the model and the compiled code describe the same machine. */
    char why[256];
    if (gen_device_arch(g, estimate_gpu_find(o->gpu)->arch, arch, sizeof arch, why,
                        sizeof why) != 0) {
      fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
      return -1;
    }
    if (!quiet)
      fprintf(stderr, "fatune: %s; targeting %s, --gpu %s's arch (use --arch to choose)\n", msg,
              arch, o->gpu);
  } else if (!quiet) {
    fprintf(stderr, "fatune: %s; targeting %s (use --arch to choose)\n", msg, arch);
  }
  if (gen_target_for_arch(g, arch, smem, 0, t) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  return 0;
}

/* Without --dtype, the dtype the space tunes on the target (its families'
** defaults). why says which and why, for the banner. */
static int pick_dtype(gen_state *g, cli_opts *o, const gen_target *t, char *why, size_t n) {
  if (gen_default_dtype(g, t, &o->problem.dtype, why, n) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  o->dtype_why = why;
  return 0;
}

/* Without --dtype, a --variant's own: its name's second token (f16, bf16,
** f32, f64, e4m3). 0 when the name has one. */
static int variant_dtype(cli_opts *o, char *why, size_t n) {
  static const struct { const char *token; fa_dtype t; } names[] = {
      {"f16", FA_FP16}, {"bf16", FA_BF16}, {"f32", FA_FP32}, {"f64", FA_FP64}, {"e4m3", FA_E4M3}};
  const char *dash = strchr(o->variant, '-');
  if (!dash) return -1;
  const size_t len = strcspn(dash + 1, "-");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i].token) == len && !strncmp(dash + 1, names[i].token, len)) {
      o->problem.dtype = names[i].t;
      snprintf(why, n, "the variant's name says so");
      o->dtype_why = why;
      return 0;
    }
  return -1;
}

/* The text of a modification's file, into buf (FA_MOD_MAX_TEXT + 1
** bytes): 0, or -1 with why in err. */
static int read_mod_file(const char *path, char *buf, char *err, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, n, "--mod %s: %s", path, strerror(errno));
    return -1;
  }
  const size_t got = fread(buf, 1, FA_MOD_MAX_TEXT + 1, f);
  const int bad = ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, n, "--mod %s: cannot read it", path);
    return -1;
  }
  if (got > FA_MOD_MAX_TEXT) {
    snprintf(err, n, "--mod %s: longer than %d bytes", path, FA_MOD_MAX_TEXT);
    return -1;
  }
  buf[got] = '\0';
  if (strlen(buf) != got) {
    snprintf(err, n, "--mod %s: holds a NUL byte: no modification's text", path);
    return -1;
  }
  return 0;
}

/* --mod's modification, read and set on g for every render and listing:
** a built-in by name, or a file when SPEC ends in .lua. NULL and 0 when
** none is given; -1 with why in err. */
static int open_mod(gen_state *g, const char *spec, fa_mod **out, char *err, size_t n) {
  *out = NULL;
  if (!spec) return 0;
  fa_mod *m = malloc(sizeof *m);
  char *text = NULL;
  const size_t len = strlen(spec);
  const int is_file = len > 4 && !strcmp(spec + len - 4, ".lua");
  if (!m || (is_file && !(text = malloc(FA_MOD_MAX_TEXT + 1)))) {
    snprintf(err, n, "out of memory reading --mod");
    free(m);
    return -1;
  }
  int rc = is_file ? read_mod_file(spec, text, err, n) : 0;
  if (rc == 0 && (gen_mod_load(g, spec, text, m) != 0 || gen_set_mod(g, m) != 0)) {
    snprintf(err, n, "--mod: %s", gen_errmsg(g));
    rc = -1;
  }
  free(text);
  if (rc != 0) free(m);
  else *out = m;
  return rc;
}

/* The generator and the target, then the handler. */
static int run_with_target(const command *c, const cli_opts *o) {
  char err[512];
  /* Asked for the GPU and there is none: that one line, nothing else. */
  if ((c->needs & NEEDS_GPU) && !strcmp(o->backend, "cuda") &&
      !backend_probe_gpu(&(fa_device){0}, err, sizeof err)) {
    fprintf(stderr, "fatune: --backend cuda: %s\n", err);
    return 1;
  }
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return 1;
  }
  gen_target t;
  cli_opts chosen = *o;
  char why[256];
  fa_mod *mod = NULL;
  if (open_mod(g, o->mod, &mod, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    gen_close(g);
    return EXIT_BAD_INPUT;
  }
  chosen.problem.mod = mod;
  int rc = resolve_target(g, o, &t, c->needs & QUIET_TARGET);
  if (rc == 0 && (c->needs & PICKS_DTYPE) && !cli_given(o, "--dtype") &&
      (!o->variant || variant_dtype(&chosen, why, sizeof why) != 0))
    rc = pick_dtype(g, &chosen, &t, why, sizeof why);
  /* The main job's banner says it; compile says it here. */
  if (chosen.dtype_why && c->cmd == CMD_COMPILE)
    fprintf(stderr, "fatune: dtype %s: %s\n", fa_dtype_name(chosen.problem.dtype), why);
  rc = rc != 0 ? EXIT_BAD_INPUT : c->gen(g, &chosen, &t);
  gen_close(g);
  free(mod);
  return rc;
}

/* A run stopped by SIGINT, SIGTERM or SIGHUP, or ending while the host
** compiler works, leaves no fatune-emu-* folder. No handler takes these
** signals: they are blocked in every thread (threads inherit the mask: the
** compile pool's, NVRTC's own) and one thread waits for them. NVRTC (LLVM)
** may install handlers of its own, which exit and allocate: run inside an
** interrupted malloc or compile, a handler once hung fatune for good. The
** waiting thread removes the folders (async-signal-safe still: other
** threads may hold any lock), then ends the process by the signal itself,
** so that its status says so, with no atexit handler or global destructor
** run. A signal ignored when fatune started stays ignored; children start
** without the mask (fa_proc.h). */
static sigset_t stop_set;
static atomic_int stopping;   /* the waiting thread has taken a signal */

static void *stop_wait(void *unused) {
  (void)unused;
  int sig;
  if (sigwait(&stop_set, &sig) != 0) return NULL;   /* EINVAL only: not with this set */
  atomic_store(&stopping, 1);
  backend_cleanup();
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigset_t one;
  sigemptyset(&dfl.sa_mask);
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigaction(sig, &dfl, NULL);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
  /* Only when a handler came between (NVRTC's, installed meanwhile by a
  ** compile): it ran in this ordinary thread, and did not end the process. */
  _exit(128 + sig);
}

/* The cleanup stops the compilers, so the job may fail and end meanwhile:
** exit() then waits here, before any other atexit handler or destructor,
** for the waiting thread to end the process by the signal. */
static void stop_before_exit(void) {
  if (!atomic_load(&stopping)) return;
  for (;;) pause();   /* every stop signal is blocked here: never returns */
}

/* Before any other thread exists. */
static void stop_start(void) {
  fa_proc_stop_signals(&stop_set);
  pthread_t t;
  int rc = pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
  if (rc == 0 && (rc = pthread_create(&t, NULL, stop_wait, NULL)) != 0)
    pthread_sigmask(SIG_UNBLOCK, &stop_set, NULL);   /* stopped the default way, then */
  else if (rc == 0)
    rc = pthread_detach(t);
  if (rc != 0) fprintf(stderr, "fatune: cannot wait for signals: %s\n", strerror(rc));
  if (atexit(backend_cleanup) != 0 || atexit(stop_before_exit) != 0)
    fputs("fatune: atexit failed\n", stderr);
}

int main(int argc, char **argv) {
  stop_start();
  cli_opts o;
  char err[512];
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) return cli_say(EXIT_BAD_INPUT, err);
  if (o.cmd == CMD_HELP) {
    cli_help(stdout, o.help_cmd);
    return fflush(stdout) == 0 ? 0 : 1;
  }
  if (o.cmd == CMD_VERSION) {
    printf("fatune 0.1.0 (NVRTC %s)\n", backend_gpu_compiler_version());
    return 0;
  }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].cmd == o.cmd)
      return commands[i].db ? commands[i].db(&o) : run_with_target(&commands[i], &o);
  return cli_say(1, "no handler for this command");
}
