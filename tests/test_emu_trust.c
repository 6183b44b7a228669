/*
** test_emu_trust.c
** The emulator loads exactly the code it checked, whatever another user
** does to names in $TMPDIR meanwhile. The attacker is played at the worst
** moment, deterministically:
**  - at every dlopen (this program interposes it), every fatune-emu-*
**    file in $TMPDIR, and every object in a fatune-emu-* folder, is
**    renamed over by the attacker's shared object (whose constructor
**    leaves a marker file): a cached object loaded by emu_load and a
**    freshly compiled one both run the victim's code, and no marker;
**  - when the host compiler starts ($FATUNE_CC is the attacker's script),
**    the compile folder is moved away and the attacker's own folder, with
**    his k0.c, put at its path: his code never runs, and the kernel is
**    refused with a message that says the folder was replaced;
**  - a $TMPDIR that others may write and that lacks the sticky bit is
**    refused, by emu_compile and by the library, with a message naming
**    it; a sticky 1777 one is used.
*/
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu_preludes.h"
#include "check.h"
#include "emu.h"
#include "emu_abi.h"
#include "fatune.h"

#define PATH_LEN 256

static char dir[] = "/tmp/fatune-test-emu-trust-XXXXXX";
static char marker[PATH_LEN], evil_so[PATH_LEN], evil_c[PATH_LEN];

static void at(char *path, const char *name) { snprintf(path, PATH_LEN, "%s/%s", dir, name); }

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* ---- The attacker's object, and dlopen with the attacker in it ---- */

static int armed, swaps, loads;

/* Renames a copy of the attacker's object over path. */
static void swap_in(const char *path) {
  char tmp[PATH_LEN + 300], cmd[3 * PATH_LEN + 600];
  snprintf(tmp, sizeof tmp, "%s.evil", path);
  snprintf(cmd, sizeof cmd, "cp %s %s", evil_so, tmp);
  if (system(cmd) == 0 && rename(tmp, path) == 0) swaps++;
}

/* What an inotify watcher in $TMPDIR gets done just before the victim's
** dlopen. */
static void attack_tmpdir(void) {
  const char *root = emu_tmp_root();
  DIR *d = opendir(root);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, "fatune-emu-", 11) != 0) continue;
    char path[PATH_LEN + 256], so[PATH_LEN + 272];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", root, e->d_name);
    if (lstat(path, &sb) != 0) continue;
    if (S_ISREG(sb.st_mode)) swap_in(path);
    for (int id = 0; S_ISDIR(sb.st_mode) && id < 8; id++) {
      snprintf(so, sizeof so, "%s/k%d.so", path, id);
      if (exists(so)) swap_in(so);
    }
  }
  if (d) closedir(d);
}

void *dlopen(const char *file, int mode) {
  void *(*real)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  if (armed) attack_tmpdir(), loads++;
  return real ? real(file, mode) : NULL;
}

/* A C file that passes for kernel `entry`: the ABI symbols the emulator
** checks, the entry point (which writes nothing), and a constructor that
** creates the marker file. */
static int write_evil_c(const char *path, const char *entry) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "#include <fcntl.h>\n#include <unistd.h>\n"
             "__attribute__((constructor)) static void planted(void) {\n"
             "  int fd = open(\"%s\", O_WRONLY | O_CREAT, 0600);\n"
             "  if (fd >= 0) close(fd);\n}\n"
             "int fa_emu_abi(void) { return %d; }\n"
             "void %s(void) {}\n", marker, FA_EMU_ABI_VERSION, entry);
  return fclose(f) == 0 ? 0 : -1;
}

/* ---- The victim's kernel ---- */

/* Writes 42 at the pointer in the parameter block's q. */
static const emu_source victim = {
  "t_victim", "FA_KERNEL(t_victim, 1)\n{\n  fa_emu_st_f32((float *)p.o, 42.0f, __LINE__);\n}\n",
  &emu_preludes};

/* Runs b's kernel on one thread; 1 when it wrote the victim's 42. */
static int runs_victim(const emu_build *b) {
  float out = 0;
  fa_params p;
  memset(&p, 0, sizeof p);
  p.o = &out;
  fa_emu_range r = {(unsigned long long)(size_t)&out, (unsigned long long)(size_t)(&out + 1)};
  emu_launch_args a = {.fn = b->fn, .entry = "t_victim", .grid = {1, 1, 1},
                       .threads = 1, .params = &p, .ranges = &r, .nranges = 1};
  emu_launch_opts lo = {0};
  fa_emu_counters ctr;
  char err[256];
  memset(&ctr, 0, sizeof ctr);
  if (emu_launch(&a, &lo, &ctr, err, sizeof err) != 0) {
    fprintf(stderr, "launch: %s\n", err);
    return 0;
  }
  return out == 42.0f;
}

static int compile_victim(emu_build *b, int keep, char *err, size_t n) {
  emu_compile_opts co = {.jobs = 1, .keep_objects = keep};
  return emu_compile(&victim, 1, &co, b, err, n);
}

/* ---- The tests ---- */

static void test_load_swapped(void) {
  emu_build b, loaded;
  char err[512];
  CHECK(compile_victim(&b, 1, err, sizeof err) == 0 && b.object, "%s", b.log ? b.log : err);
  if (!b.object) return;
  /* Unloaded first, so that emu_load loads the bytes again. */
  unsigned char *object = b.object;
  size_t size = b.object_size;
  b.object = NULL;
  emu_build_free(&b);
  armed = 1, swaps = 0, loads = 0;
  int rc = emu_load(object, size, &victim, &loaded, err, sizeof err);
  armed = 0;
  free(object);
  CHECK(rc == 0 && loads == 1, "emu_load: %s (%d dlopen)", rc ? err : "", loads);
  CHECK(!exists(marker), "the attacker's object ran in emu_load (%d file(s) swapped)", swaps);
  CHECK(rc != 0 || runs_victim(&loaded), "emu_load bound something else than the victim's kernel");
  if (rc == 0) emu_build_free(&loaded);
  unlink(marker);
  printf("emu_load: an object renamed over in $TMPDIR at dlopen is not what runs\n");
}

static void test_compiled_swapped(void) {
  emu_build b;
  char err[512];
  armed = 1, swaps = 0, loads = 0;
  int rc = compile_victim(&b, 0, err, sizeof err);
  armed = 0;
  CHECK(rc == 0 && b.fn && loads == 1, "emu_compile: %s (%d dlopen)", b.log ? b.log : err, loads);
  CHECK(!exists(marker), "the attacker's object ran in emu_compile (%d file(s) swapped)", swaps);
  CHECK(!b.fn || runs_victim(&b), "emu_compile bound something else than the victim's kernel");
  emu_build_free(&b);
  unlink(marker);
  printf("emu_compile: an object renamed over in the folder at dlopen is not what runs\n");
}

/* $FATUNE_CC: moves the folder the compiler works in away, puts his own
** in its place with his k0.c, then compiles as asked. */
static int write_swapper(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "for a; do case $a in *.c) src=$a;; esac; done\n"
             "case $src in */*) d=${src%%/*};; *) d=$(pwd -P);; esac\n"
             "mv \"$d\" \"$d.moved\" && mkdir \"$d\" && cp %s \"$d/${src##*/}\" || exit 99\n"
             "exec %s \"$@\"\n", evil_c, emu_compiler());
  return fclose(f) == 0 ? 0 : -1;
}

static void test_folder_swapped(void) {
  char script[PATH_LEN], cc[PATH_LEN + 8], err[512];
  at(script, "swapper.sh");
  CHECK(write_swapper(script) == 0, "writing %s", script);
  snprintf(cc, sizeof cc, "sh %s", script);
  char *saved = strdup(emu_compiler());
  setenv("FATUNE_CC", cc, 1);
  emu_build b;
  int rc = compile_victim(&b, 0, err, sizeof err);
  setenv("FATUNE_CC", saved, 1);
  free(saved);
  CHECK(rc == 0, "emu_compile: %s", err);
  CHECK(!exists(marker), "the attacker's k0.c ran");
  CHECK(!b.fn && b.log && strstr(b.log, "replaced"), "a replaced folder is not refused: %s",
        b.fn ? "the kernel loaded" : b.log ? b.log : "no message");
  emu_build_free(&b);
  unlink(marker);
  printf("a compile folder replaced while the compiler runs: refused, no foreign code\n");
}

static void test_tmpdir_mode(void) {
  char open_dir[PATH_LEN], err[512];
  at(open_dir, "open");
  CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0, "making %s", open_dir);
  char *saved = strdup(emu_tmp_root());
  setenv("TMPDIR", open_dir, 1);
  emu_build b;
  int rc = compile_victim(&b, 0, err, sizeof err);
  CHECK(rc != 0 && strstr(err, open_dir) && strstr(err, "sticky"),
        "a 0777 $TMPDIR is used: %s", rc ? err : "emu_compile succeeded");
  if (rc == 0) emu_build_free(&b);

  char db[PATH_LEN];
  at(db, "open.db");
  fatune_options opts = {.db_path = db, .backend = "emu"};
  fatune_ctx *c = NULL;
  fatune_problem p = {.batch = 1, .heads = 1, .seq_q = 8, .seq_k = 8, .dim = 8,
                      .dtype = FATUNE_FP64};
  double q[64] = {0}, k[64] = {0}, v[64] = {0}, o[64];
  fatune_status st = fatune_open(&opts, &c);
  if (st == FATUNE_OK) st = fatune_attention_forward(c, &p, q, k, v, o, NULL, NULL);
  CHECK(st != FATUNE_OK && strstr(fatune_errmsg(), "sticky"),
        "the library with a 0777 $TMPDIR: status %d: %s", (int)st, fatune_errmsg());
  fatune_close(c);

  CHECK(chmod(open_dir, 01777) == 0, "chmod 1777");
  rc = compile_victim(&b, 0, err, sizeof err);
  CHECK(rc == 0 && b.fn, "a sticky 1777 $TMPDIR is refused: %s", rc ? err : b.log);
  if (rc == 0) emu_build_free(&b);
  setenv("TMPDIR", saved, 1);
  free(saved);
  printf("$TMPDIR open to others without the sticky bit: refused; 1777: used\n");
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  char key[PATH_LEN], tmp[PATH_LEN], cmd[3 * PATH_LEN];
  at(key, "a.key");
  setenv("FATUNE_KEY", key, 1);
  at(tmp, "tmp");
  if (mkdir(tmp, 0700) != 0) return 1;
  setenv("TMPDIR", tmp, 1);   /* the attacker's playground: this test's own */
  at(marker, "marker");
  at(evil_c, "evil.c");
  at(evil_so, "evil.so");
  snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o %s %s", emu_compiler(), evil_so, evil_c);
  if (write_evil_c(evil_c, victim.entry) != 0 || system(cmd) != 0) {
    fprintf(stderr, "cannot build the attacker's object\n");
    return 1;
  }
  test_load_swapped();
  test_compiled_swapped();
  test_folder_swapped();
  test_tmpdir_mode();
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s; rm -rf %s", dir, dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_emu_trust");
}
