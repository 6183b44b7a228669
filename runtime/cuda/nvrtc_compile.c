/*
** nvrtc_compile.c
** Compile CUDA source to CUBIN with NVRTC and read the ptxas resource report.
**
** ptxas prints its report into the NVRTC program log when given -v through
** --ptxas-options. For each kernel it looks like this (NVRTC 13.0):
**
**   ptxas info    : Compiling entry function 'k' for 'sm_80'
**   ptxas info    : Function properties for k
**   ptxas         .     512 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
**   ptxas info    : Used 20 registers, used 1 barriers, 1024 bytes smem, 364 bytes cmem[0]
**
** Non-inlined device functions get "Function properties for <mangled>" lines
** of their own, and one log holds every kernel of the program, so the parser
** follows which function each line belongs to and keeps only the entry's.
**
** Every NVRTC program is private to one call, and the only shared state (the
** version and the list of architectures) is computed once under
** pthread_once, so several threads may compile at the same time.
*/
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nvrtc.h>

#include "nvrtc_compile.h"

#define MAX_ARCHS 64
#define NAME_MAX_LEN 256

/*
** Shared, computed once: the NVRTC version and its supported architectures.
*/
static pthread_once_t info_once = PTHREAD_ONCE_INIT;
static char version_str[32] = "unknown";
static int archs[MAX_ARCHS];
static int n_archs;          /* 0 when NVRTC could not list them */

static void info_init(void) {
  int major, minor, n;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
    snprintf(version_str, sizeof version_str, "%d.%d", major, minor);
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > MAX_ARCHS)
    return;
  if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) return;
  n_archs = n;
}

const char *nvrtc_version_string(void) {
  pthread_once(&info_once, info_init);
  return version_str;
}

int nvrtc_newest_arch(void) {
  pthread_once(&info_once, info_init);
  int newest = 0;
  for (int i = 0; i < n_archs; i++)
    if (archs[i] > newest) newest = archs[i];
  return newest;
}

/*
** Accept "sm_NN", "sm_NNa" and "sm_NNf" when NN is in NVRTC's list. The
** arch-specific 'a' targets exist from sm_90 on and the family-specific 'f'
** targets from sm_100 on; NVRTC rejects the others (sm_80a, sm_90f).
*/
int nvrtc_arch_supported(const char *arch) {
  const char *p;
  char *end;
  long num;
  int i;
  pthread_once(&info_once, info_init);
  if (arch == NULL || strncmp(arch, "sm_", 3) != 0) return 0;
  p = arch + 3;
  /* Two to four digits, no leading zero: NVRTC would refuse "sm_090". */
  if (*p < '1' || *p > '9') return 0;
  num = strtol(p, &end, 10);
  if (end - p < 2 || end - p > 4) return 0;
  if (end[0] == 'a' && end[1] == '\0') {
    if (num < 90) return 0;
  } else if (end[0] == 'f' && end[1] == '\0') {
    if (num < 100) return 0;
  } else if (end[0] != '\0') {
    return 0;
  }
  for (i = 0; i < n_archs; i++)
    if (archs[i] == num) return 1;
  return 0;
}

/*
** Small helpers.
*/
static double now_ms(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0.0;
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void set_error(nvrtc_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
}

/* "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION" */
static void set_nvrtc_error(nvrtc_result *r, const char *call, nvrtcResult rc) {
  set_error(r, "%s: %s", call, nvrtcGetErrorString(rc));
}

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* The log must never be NULL after a call; keep an empty one if all else fails. */
static int ensure_log(nvrtc_result *r) {
  if (r->log == NULL) r->log = dup_string("");
  return r->log ? 0 : -1;
}

/*
** Reading the log, one line at a time. Lines are [b, e) spans of the log.
*/
static void trim_span(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b)) (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* Find `needle` in [b, e); NULL when absent. */
static const char *span_find(const char *b, const char *e, const char *needle) {
  size_t n = strlen(needle);
  for (; b + n <= e; b++)
    if (memcmp(b, needle, n) == 0) return b;
  return NULL;
}

/* The integer written just before `phrase` in [b, e), as in "512 bytes stack
** frame"; -1 when the phrase or the number is absent. */
static int number_before(const char *b, const char *e, const char *phrase) {
  const char *p = span_find(b, e, phrase), *d;
  if (p == NULL) return -1;
  while (p > b && p[-1] == ' ') p--;
  d = p;
  while (d > b && isdigit((unsigned char)d[-1])) d--;
  if (d == p || p - d > 9) return -1;   /* no number, or one too big for int */
  return (int)strtol(d, NULL, 10);
}

/* Copy [b, e) into name[NAME_MAX_LEN] as a C string, truncating. */
static void span_copy(char *name, const char *b, const char *e) {
  size_t n = (size_t)(e - b);
  if (n >= NAME_MAX_LEN) n = NAME_MAX_LEN - 1;
  memcpy(name, b, n);
  name[n] = '\0';
}

/* Fill the resource fields of r from the ptxas report in the log. */
static void parse_report(nvrtc_result *r, const char *entry) {
  char compiling[NAME_MAX_LEN] = "", props[NAME_MAX_LEN] = "";
  const char *line = r->log;
  while (*line) {
    const char *e = strchr(line, '\n'), *next, *p;
    if (e == NULL) e = line + strlen(line);
    next = *e ? e + 1 : e;
    if ((p = span_find(line, e, "Compiling entry function '")) != NULL) {
      const char *nb = p + strlen("Compiling entry function '"), *ne = nb;
      while (ne < e && *ne != '\'') ne++;
      span_copy(compiling, nb, ne);
    } else if ((p = span_find(line, e, "Function properties for ")) != NULL) {
      const char *nb = p + strlen("Function properties for "), *ne = e;
      trim_span(&nb, &ne);
      span_copy(props, nb, ne);
    } else if (strcmp(props, entry) == 0 && span_find(line, e, "bytes stack frame")) {
      int v;
      if ((v = number_before(line, e, "bytes stack frame")) >= 0) r->stack_bytes = v;
      if ((v = number_before(line, e, "bytes spill stores")) >= 0) r->spill_store_bytes = v;
      if ((v = number_before(line, e, "bytes spill loads")) >= 0) r->spill_load_bytes = v;
    } else if (strcmp(compiling, entry) == 0 && span_find(line, e, "Used ")) {
      int v = number_before(line, e, "registers");
      if (v >= 0) r->registers = v;
      if ((v = number_before(line, e, "bytes smem")) >= 0) r->smem_static_bytes = v;
    }
    line = next;
  }
}

/* The first log line holding `word`, trimmed, into r->error; 0 if none. */
static int find_error_line(nvrtc_result *r, const char *word) {
  const char *line = r->log;
  while (*line) {
    const char *e = strchr(line, '\n'), *b = line, *next;
    if (e == NULL) e = line + strlen(line);
    next = *e ? e + 1 : e;
    if (span_find(line, e, word)) {
      size_t n;
      trim_span(&b, &e);
      n = (size_t)(e - b);
      if (n >= sizeof r->error) n = sizeof r->error - 1;
      memcpy(r->error, b, n);
      r->error[n] = '\0';
      return 1;
    }
    line = next;
  }
  return 0;
}

/* NVRTC writes "k.cu(3): error: ..." and "nvrtc: error: ..."; "error:" finds
** those before a warning that merely mentions a variable named error_count. */
static int first_error_line(nvrtc_result *r) {
  return find_error_line(r, "error:") || find_error_line(r, "error");
}

/*
** The compile itself. Returns 0 when NVRTC ran to a verdict, -1 when an
** NVRTC call other than the compile failed (out of memory, internal error).
*/
static int run_program(nvrtcProgram prog, const char *arch, nvrtc_result *out) {
  char arch_opt[64];
  const char *opts[3];
  nvrtcResult rc, crc;
  size_t log_size = 0, cubin_size = 0;
  double t0, t1;

  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
  opts[0] = arch_opt;
  opts[1] = NVRTC_OPT_STD;
  opts[2] = NVRTC_OPT_REPORT;   /* the resource report, into the log */

  t0 = now_ms();
  crc = nvrtcCompileProgram(prog, 3, opts);
  if (crc == NVRTC_SUCCESS) {
    rc = nvrtcGetCUBINSize(prog, &cubin_size);
    if (rc != NVRTC_SUCCESS) { set_nvrtc_error(out, "nvrtcGetCUBINSize", rc); return -1; }
    if (cubin_size == 0) {
      set_error(out, "nvrtcGetCUBINSize: no CUBIN for %s", arch);
    } else if ((out->cubin = malloc(cubin_size)) == NULL) {
      set_error(out, "out of memory for a %zu byte CUBIN", cubin_size);
      return -1;
    } else {
      rc = nvrtcGetCUBIN(prog, out->cubin);
      if (rc != NVRTC_SUCCESS) { set_nvrtc_error(out, "nvrtcGetCUBIN", rc); return -1; }
      out->cubin_size = cubin_size;
    }
  }
  t1 = now_ms();
  out->compile_ms = t1 - t0;

  /* The log, kept whether or not the compile succeeded. */
  rc = nvrtcGetProgramLogSize(prog, &log_size);
  if (rc != NVRTC_SUCCESS) { set_nvrtc_error(out, "nvrtcGetProgramLogSize", rc); return -1; }
  if ((out->log = malloc(log_size + 1)) == NULL) {
    set_error(out, "out of memory for a %zu byte NVRTC log", log_size);
    return -1;
  }
  out->log[0] = '\0';
  if (log_size > 0) {
    rc = nvrtcGetProgramLog(prog, out->log);
    if (rc != NVRTC_SUCCESS) { set_nvrtc_error(out, "nvrtcGetProgramLog", rc); return -1; }
    out->log[log_size] = '\0';
  }

  if (crc != NVRTC_SUCCESS) {
    if (!first_error_line(out)) set_nvrtc_error(out, "nvrtcCompileProgram", crc);
    return 0;
  }
  if (out->cubin == NULL) return 0;   /* error already set */
  out->ok = 1;
  return 0;
}

int nvrtc_compile(const char *source, const char *entry, const char *arch,
                  nvrtc_result *out) {
  nvrtcProgram prog;
  nvrtcResult rc;
  char prog_name[NAME_MAX_LEN];
  int status;

  if (out == NULL) return -1;
  memset(out, 0, sizeof *out);
  out->registers = -1;
  if (source == NULL || entry == NULL || arch == NULL) {
    set_error(out, "nvrtc_compile: NULL %s", source == NULL ? "source"
              : entry == NULL ? "entry" : "arch");
    ensure_log(out);
    return -1;
  }
  /* NVRTC's own message for a bad arch does not name it; ours does. */
  if (!nvrtc_arch_supported(arch)) {
    set_error(out, "unsupported architecture '%.64s' for NVRTC %s", arch,
              nvrtc_version_string());
    out->log = dup_string(out->error);
    return ensure_log(out);
  }

  /* The program name shows in error lines: "flash_fwd.cu(12): error: ..." */
  snprintf(prog_name, sizeof prog_name, "%.200s.cu", entry);
  rc = nvrtcCreateProgram(&prog, source, prog_name, 0, NULL, NULL);
  if (rc != NVRTC_SUCCESS) {
    set_nvrtc_error(out, "nvrtcCreateProgram", rc);
    ensure_log(out);
    return -1;
  }
  status = run_program(prog, arch, out);
  /* A failed destroy only leaks NVRTC's memory; the result stands, and
  ** error stays "" for a good CUBIN, so there is nowhere to report it. */
  rc = nvrtcDestroyProgram(&prog);
  (void)rc;
  if (status != 0) {
    out->ok = 0;
    free(out->cubin);
    out->cubin = NULL;
    out->cubin_size = 0;
  }
  if (ensure_log(out) != 0) status = -1;
  if (out->ok) parse_report(out, entry);
  return status;
}

void nvrtc_result_free(nvrtc_result *r) {
  if (r == NULL) return;
  free(r->cubin);
  free(r->log);
  memset(r, 0, sizeof *r);
}
