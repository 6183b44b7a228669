/*
** main.c
** The fatune command: one table of commands, each with its handler (in
** its own file) and its usage line, as Lua's luaL_Reg tables name C
** functions; the main job is the entry without a name.
** Bad input prints one line on stderr and exits 2; a failure of the work
** itself (a variant that does not compile, say) exits 1.
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_db.h"
#include "commands.h"
#include "cuda_driver.h"
#include "emu.h"
#include "explore.h"
#include "gen.h"
#include "nvrtc_compile.h"
#include "report.h"
#include "run.h"
#include "tune.h"

/* What a command needs before its handler runs. */
enum {
  NEEDS_TARGET = 1,   /* the generator and a target (the handler is `gen`) */
  QUIET_TARGET = 2,   /* say nothing about how the target was chosen */
  NEEDS_GPU = 4       /* with --backend cuda, a GPU, or one line and exit 1 */
};

typedef struct command {
  const char *name;   /* NULL: the main job */
  cli_cmd cmd;
  int (*db)(const cli_opts *o);                                      /* needs nothing more */
  int (*gen)(gen_state *g, const cli_opts *o, const gen_target *t);  /* NEEDS_TARGET */
  int needs;
  const char *usage;  /* its synopsis in fatune --help, after "fatune name " */
} command;

static const command commands[] = {
  {NULL, CMD_TUNE, NULL, tune_main, NEEDS_TARGET | NEEDS_GPU,
   "[--dim D] [--seq N] [problem flags] [--backend B] [--arch A] [--jobs N] [--json]\n"
   "              [--sass [--gpu a100|h100|h200]]"},
  {"run", CMD_RUN, NULL, run_main, NEEDS_TARGET | QUIET_TARGET | NEEDS_GPU,
   "(--variant NAME | --config 'k=v,...') --q Q.npy --k K.npy --v V.npy\n"
   "                  --out O.npy [--lse LSE.npy] [--causal] [--scale S] [--dtype T] [--backend B]"},
  {"list", CMD_LIST, NULL, cmd_list_main, NEEDS_TARGET | QUIET_TARGET,
   "--dim D [--dtype T] [--causal] [--arch A] [--space default|full] [--json]"},
  {"gen", CMD_GEN, NULL, cmd_gen_main, NEEDS_TARGET | QUIET_TARGET,
   "(--variant NAME | --config 'k=v,...') [--dim D] [--dtype T] [--causal] [--arch A]"},
  {"compile", CMD_COMPILE, NULL, cmd_compile_main, NEEDS_TARGET,
   "--dim D [--dtype T] [--causal] [--arch A] [--space S | --variant NAME | --config TEXT]\n"
   "                  [--jobs N] [--json] [--sass [--gpu G]] [--save-cubin DIR]"},
  {"sass", CMD_SASS, cmd_sass_main, NULL, 0,
   "FILE.cubin [--config 'block_m=M,block_n=N,dim=D,warps=W'] [--smem BYTES] [--gpu G] [--json]"},
  {"best", CMD_BEST, cmd_db_main, NULL, 0,
   "--dim D --seq N [--seq-k M] [--dtype T] [--causal] [--device NAME] [--db PATH] [--json]"},
  {"show", CMD_SHOW, cmd_db_main, NULL, 0,
   "[--dim D] [--dtype T] [--causal] [--seq N] [--device NAME] [--db PATH] [--json]"},
  {"export", CMD_EXPORT, cmd_db_main, NULL, 0, "--format csv|json [--db PATH]"},
  {"merge", CMD_MERGE, cmd_db_main, NULL, 0, "OTHER.db [--db PATH]"},
  {"explore", CMD_EXPLORE, NULL, explore_main, NEEDS_TARGET | NEEDS_GPU,
   "--dim D (--seq N | --sweep seq=A:B) [--axis A] [problem flags] [--backend B]\n"
   "                      [--db PATH] [--json]"},
  {"report", CMD_REPORT, report_main, NULL, 0, "[--out DIR] [--format html|md] [--db PATH]"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(void) {
  for (size_t i = 0; i < NCOMMANDS; i++) {
    const command *c = &commands[i];
    printf("%s fatune %s%s%s\n", i ? "      " : "usage:", c->name ? c->name : "",
           c->name ? " " : "", c->usage);
  }
  fputs(cli_usage, stdout);
}

/* The target: --arch, else the first GPU's, else sm_90. */
static int resolve_target(gen_state *g, const cli_opts *o, gen_target *t, int quiet) {
  char arch[16] = "sm_90";
  int smem = o->smem;
  if (o->arch) {
    if (!nvrtc_arch_supported(o->arch) || gen_target_for_arch(g, o->arch, smem, 0, t) != 0) {
      fprintf(stderr, "fatune: unknown arch '%s' (for example sm_80, sm_86, sm_89, sm_90, sm_90a)\n",
              o->arch);
      return -1;
    }
    return 0;
  }
  char msg[256];
  cudrv_device_info dev;
  /* In a child process: this one must never initialise CUDA (workers fork). */
  if (cudrv_probe_isolated(&dev, msg, sizeof msg)) {
    snprintf(arch, sizeof arch, "sm_%d%d", dev.cc_major, dev.cc_minor);
    if (!smem) smem = dev.smem_per_block_optin;
    if (!quiet) fprintf(stderr, "fatune: target %s (%s)\n", arch, dev.name);
  } else if (!quiet) {
    fprintf(stderr, "fatune: %s; targeting %s (use --arch to choose)\n", msg, arch);
  }
  if (gen_target_for_arch(g, arch, smem, 0, t) != 0) {
    fprintf(stderr, "fatune: %s\n", gen_errmsg(g));
    return -1;
  }
  return 0;
}

/* The generator and the target, then the handler. */
static int run_with_target(const command *c, const cli_opts *o) {
  char err[512];
  /* Asked for the GPU and there is none: that one line, nothing else. */
  if ((c->needs & NEEDS_GPU) && !strcmp(o->backend, "cuda") &&
      !cudrv_probe_isolated(&(cudrv_device_info){0}, err, sizeof err)) {
    fprintf(stderr, "fatune: --backend cuda: %s\n", err);
    return 1;
  }
  gen_state *g;
  if (gen_open(&g, err, sizeof err) != 0) {
    fprintf(stderr, "fatune: %s\n", err);
    return 1;
  }
  gen_target t;
  int rc = resolve_target(g, o, &t, c->needs & QUIET_TARGET) != 0 ? EXIT_BAD_INPUT
                                                                  : c->gen(g, o, &t);
  gen_close(g);
  return rc;
}

/* A run stopped by SIGINT, SIGTERM or SIGHUP, or ending while the host
** compiler works, leaves no fatune-emu-* folder: the handler (async-signal-
** safe) removes them, then the signal takes its default course. A signal
** ignored when fatune started stays ignored. */
static void on_signal(int sig) {
  const int saved = errno;
  emu_tmp_cleanup();
  /* The default action, set here rather than trusted to SA_RESETHAND: NVRTC
  ** (LLVM) installs handlers of its own that reinstall the ones it found. */
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  errno = saved;
  raise(sig);   /* blocked until this returns, then fatal */
}

static void install_cleanup(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old, sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND};
    if (sigemptyset(&sa.sa_mask) != 0 || sigaction(sigs[i], NULL, &old) != 0 ||
        old.sa_handler == SIG_IGN)
      continue;
    if (sigaction(sigs[i], &sa, NULL) != 0) perror("fatune: sigaction");
  }
  if (atexit(emu_tmp_cleanup) != 0) fputs("fatune: atexit failed\n", stderr);
}

int main(int argc, char **argv) {
  install_cleanup();
  cli_opts o;
  char err[512];
  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) return cli_say(EXIT_BAD_INPUT, err);
  if (o.cmd == CMD_HELP) {
    usage();
    return 0;
  }
  if (o.cmd == CMD_VERSION) {
    printf("fatune 0.1.0 (NVRTC %s)\n", nvrtc_version_string());
    return 0;
  }
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].cmd == o.cmd)
      return commands[i].db ? commands[i].db(&o) : run_with_target(&commands[i], &o);
  return cli_say(1, "no handler for this command");
}
