/*
** test_npy.c
** Checks the .npy reader and writer: bit-exact round trips of random
** float32 and float64 arrays with NumPy's 64-byte header alignment,
** hand-made files (float16 special values, versions 2.0 and 3.0, keys in
** another order), one file for each malformed case the reader must refuse
** with a one-line message naming the path, writer failures that must leave
** no file behind, and float16 decoding of all 65536 bit patterns against
** an ldexp formula. Everything is written into a fresh directory in /tmp.
*/
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "npy.h"

#define PATH_LEN 512
#define FILE_MAX 65536   /* hand-made files are smaller */

static char dir[] = "/tmp/test_npy.XXXXXX";

static void at(char *path, const char *name) {
  snprintf(path, PATH_LEN, "%s/%s", dir, name);
}

/* ---- Deterministic random bits: splitmix64. ---- */

static uint64_t rng_state = 12345;

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* ---- Raw files. ---- */

static int write_bytes(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok;
  if (!f) return -1;
  ok = fwrite(b, 1, n, f) == n;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

/* Reads up to cap bytes of path; returns the size, or -1. */
static long read_bytes(const char *path, unsigned char *b, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n;
  if (!f) return -1;
  n = fread(b, 1, cap, f);
  if (ferror(f)) n = (size_t)-1;
  if (fclose(f) != 0) return -1;
  return n == (size_t)-1 ? -1 : (long)n;
}

/* A .npy file in b: magic, version major.0, the dict padded with spaces
** and '\n' to a multiple of align, then data. Returns the total size. */
static size_t make_npy(unsigned char *b, int major, const char *dict, size_t align,
                       const void *data, size_t dlen) {
  size_t lensize = major == 1 ? 2 : 4, n = strlen(dict), pre = 8 + lensize, hlen, i;
  size_t pad = (align - (pre + n + 1) % align) % align;
  hlen = n + pad + 1;
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  for (i = 0; i < lensize; i++) b[8 + i] = (unsigned char)(hlen >> (8 * i));
  memcpy(b + pre, dict, n);
  memset(b + pre + n, ' ', pad);
  b[pre + hlen - 1] = '\n';
  if (dlen) memcpy(b + pre + hlen, data, dlen);
  return pre + hlen + dlen;
}

/* err is one non-empty line that starts with "path: ". */
static int message_ok(const char *err, const char *path) {
  size_t n = strlen(path);
  return strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ' &&
         err[n + 2] != '\0' && !strchr(err, '\n');
}

/* Reading path must fail with a message containing want. */
static void expect_bad_read(const char *path, const char *want) {
  npy_array a;
  char err[256] = "";
  double sentinel = 1.0;
  int rc;
  a.data = &sentinel;
  rc = npy_read(path, &a, err, sizeof err);
  CHECK(rc == -1, "%s: npy_read returned %d", path, rc);
  CHECK(a.data == NULL, "%s: data not NULL after a failure", path);
  CHECK(message_ok(err, path), "%s: bad message '%s'", path, err);
  CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", path, err, want);
  npy_free(&a);
  npy_free(&a);
}

static void bad_bytes(const char *name, const void *b, size_t n, const char *want) {
  char path[PATH_LEN];
  at(path, name);
  CHECK(write_bytes(path, b, n) == 0, "cannot write %s", path);
  expect_bad_read(path, want);
}

/* A version 1.0 file with this dict and dlen zero data bytes. */
static void bad_dict(const char *name, const char *dict, size_t dlen, const char *want) {
  static unsigned char b[FILE_MAX], zeros[FILE_MAX];
  bad_bytes(name, b, make_npy(b, 1, dict, 64, zeros, dlen), want);
}

/* ---- Round trips through the writer. ---- */

/* The header the writer must produce, and its 64-byte alignment. */
static void check_written_header(const char *path, const char *dict, size_t dbytes) {
  static unsigned char b[1 << 20];
  long n = read_bytes(path, b, sizeof b);
  size_t hlen, dl = strlen(dict), i;
  CHECK(n > 10, "%s: cannot read back (%ld)", path, n);
  if (n <= 10) return;
  hlen = b[8] | (size_t)b[9] << 8;
  CHECK(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0, "%s: bad magic or version", path);
  CHECK((10 + hlen) % 64 == 0, "%s: header of %zu bytes is not 64-aligned", path, 10 + hlen);
  CHECK((size_t)n == 10 + hlen + dbytes, "%s: size %ld, want %zu", path, n, 10 + hlen + dbytes);
  CHECK(hlen >= dl + 1 && memcmp(b + 10, dict, dl) == 0,
        "%s: header is '%.*s', want '%s'", path, (int)dl, (const char *)b + 10, dict);
  for (i = dl; i + 1 < hlen; i++) CHECK(b[10 + i] == ' ', "%s: padding byte %zu is %d", path, i, b[10 + i]);
  CHECK(b[10 + hlen - 1] == '\n', "%s: header does not end with a newline", path);
}

static void check_shape(const npy_array *a, int ndim, const long long *shape, size_t count) {
  int i;
  CHECK(a->ndim == ndim, "ndim %d, want %d", a->ndim, ndim);
  for (i = 0; i < ndim && i < a->ndim; i++)
    CHECK(a->shape[i] == shape[i], "shape[%d] = %lld, want %lld", i, a->shape[i], shape[i]);
  CHECK(a->count == count, "count %zu, want %zu", a->count, count);
}

static void round_trip(int ndim, const long long *shape, const char *shape_text) {
  char path[PATH_LEN], err[256] = "", dict[200], name[64];
  size_t count = 1, i;
  float *f;
  double *d;
  npy_array a;
  int rc;

  for (i = 0; i < (size_t)ndim; i++) count *= (size_t)shape[i];
  f = malloc(count * sizeof *f);
  d = malloc(count * sizeof *d);
  CHECK(f && d, "out of memory");
  if (!f || !d) { free(f); free(d); return; }
  for (i = 0; i < count; i++) {
    /* Random finite floats (subnormals included); any double bits, NaNs too. */
    uint32_t u = (uint32_t)rng_next();
    uint64_t v = rng_next();
    if (((u >> 23) & 0xff) == 0xff) u ^= 0x40000000u;
    memcpy(&f[i], &u, sizeof u);
    memcpy(&d[i], &v, sizeof v);
  }

  snprintf(name, sizeof name, "rt%d_f32.npy", ndim);
  at(path, name);
  rc = npy_write_f32(path, f, ndim, shape, err, sizeof err);
  CHECK(rc == 0, "npy_write_f32: %s", err);
  snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
  check_written_header(path, dict, count * 4);
  rc = npy_read(path, &a, err, sizeof err);
  CHECK(rc == 0, "npy_read: %s", err);
  if (rc == 0) {
    size_t bad = 0;
    CHECK(a.dtype == NPY_F32, "dtype %s", npy_dtype_name(a.dtype));
    check_shape(&a, ndim, shape, count);
    for (i = 0; i < count && i < a.count; i++) {
      float back = (float)a.data[i];
      if (a.data[i] != (double)f[i] || memcmp(&back, &f[i], sizeof back) != 0) bad++;
    }
    CHECK(bad == 0, "%s: %zu of %zu float32 values differ", path, bad, count);
  }
  npy_free(&a);
  CHECK(a.data == NULL, "npy_free left data set");

  snprintf(name, sizeof name, "rt%d_f64.npy", ndim);
  at(path, name);
  rc = npy_write_f64(path, d, ndim, shape, err, sizeof err);
  CHECK(rc == 0, "npy_write_f64: %s", err);
  snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }", shape_text);
  check_written_header(path, dict, count * 8);
  rc = npy_read(path, &a, err, sizeof err);
  CHECK(rc == 0, "npy_read: %s", err);
  if (rc == 0) {
    CHECK(a.dtype == NPY_F64, "dtype %s", npy_dtype_name(a.dtype));
    check_shape(&a, ndim, shape, count);
    CHECK(a.count == count && memcmp(a.data, d, count * sizeof *d) == 0,
          "%s: float64 values are not bit-exact", path);
  }
  npy_free(&a);
  free(f);
  free(d);
}

static void test_round_trips(void) {
  const long long s1[] = {3000}, s2[] = {7, 129}, s3[] = {2, 3, 5}, s4[] = {2, 3, 40, 50};
  round_trip(1, s1, "(3000,)");
  round_trip(2, s2, "(7, 129)");
  round_trip(3, s3, "(2, 3, 5)");
  round_trip(4, s4, "(2, 3, 40, 50)");
}

/* Writing over an existing file replaces it. */
static void test_overwrite(void) {
  char path[PATH_LEN], err[256] = "";
  const double d[2] = {1.5, -2.5};
  const float f[3] = {0.25f, 8.0f, -1.0f};
  const long long s2[] = {2}, s3[] = {3};
  npy_array a;
  at(path, "over.npy");
  CHECK(npy_write_f64(path, d, 1, s2, err, sizeof err) == 0, "%s", err);
  CHECK(npy_write_f32(path, f, 1, s3, err, sizeof err) == 0, "%s", err);
  CHECK(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
  CHECK(a.data && a.dtype == NPY_F32 && a.count == 3 && a.data[0] == 0.25 &&
        a.data[1] == 8.0 && a.data[2] == -1.0, "overwritten file reads back wrong");
  npy_free(&a);
}

/* ---- Hand-made files that must read. ---- */

/* bfloat16 as np.save writes an ml_dtypes.bfloat16 array: descr '<V2', each
** element the high 16 bits of a float32. */
static void test_bfloat16(void) {
  static const unsigned short h[6] = {0x3F80, 0xC000, 0x7F7F, 0x0001, 0x7F80, 0x8000};
  unsigned char b[256], data[12];
  char path[PATH_LEN], err[256] = "";
  const long long shape[] = {2, 3};
  npy_array a;
  for (int i = 0; i < 6; i++) { data[2 * i] = h[i] & 0xff; data[2 * i + 1] = h[i] >> 8; }
  at(path, "bf16.npy");
  CHECK(write_bytes(path, b, make_npy(b, 1, "{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3), }",
                                     64, data, sizeof data)) == 0, "cannot write %s", path);
  CHECK(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
  if (!a.data) return;
  CHECK(a.dtype == NPY_BF16 && !strcmp(npy_dtype_name(a.dtype), "bfloat16"), "dtype %s",
        npy_dtype_name(a.dtype));
  check_shape(&a, 2, shape, 6);
  CHECK(a.data[0] == 1.0, "0x3F80 -> %g", a.data[0]);
  CHECK(a.data[1] == -2.0, "0xC000 -> %g", a.data[1]);
  CHECK(a.data[2] == 0x1.fep127, "0x7F7F -> %a", a.data[2]);
  CHECK(a.data[3] == 0x1p-133, "0x0001 -> %a", a.data[3]);   /* the smallest subnormal */
  CHECK(isinf(a.data[4]) && a.data[4] > 0, "0x7F80 -> %g", a.data[4]);
  CHECK(a.data[5] == 0.0 && signbit(a.data[5]), "0x8000 -> %g", a.data[5]);
  npy_free(&a);
  /* Written back (fatune run's O): '<V2' and '<f2', the same bits. */
  for (int t = 0; t < 2; t++) {
    at(path, t ? "w16.npy" : "wbf16.npy");
    CHECK(npy_write_16(path, t ? NPY_F16 : NPY_BF16, h, 2, shape, err, sizeof err) == 0, "%s",
          err);
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }",
             t ? "<f2" : "<V2");
    check_written_header(path, dict, 12);
    CHECK(npy_read(path, &a, err, sizeof err) == 0 && a.dtype == (t ? NPY_F16 : NPY_BF16) &&
          a.count == 6 && a.data[0] == (t ? 1.875 : 1.0) && a.data[1] == -2.0,
          "16-bit round trip %d: %s", t, err);
    npy_free(&a);
  }
  CHECK(npy_write_16(path, NPY_F32, h, 2, shape, err, sizeof err) != 0, "not 16 bits: refused");
}

static void test_float16(void) {
  static const unsigned short h[8] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x7C00, 0x7E00, 0x8000};
  unsigned char b[256], data[16];
  char path[PATH_LEN], err[256] = "";
  const long long shape[] = {8};
  npy_array a;
  int i;
  for (i = 0; i < 8; i++) { data[2 * i] = h[i] & 0xff; data[2 * i + 1] = h[i] >> 8; }
  at(path, "f16.npy");
  CHECK(write_bytes(path, b, make_npy(b, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (8,), }",
                                     64, data, sizeof data)) == 0, "cannot write %s", path);
  CHECK(npy_read(path, &a, err, sizeof err) == 0, "%s", err);
  if (!a.data) return;
  CHECK(a.dtype == NPY_F16, "dtype %s", npy_dtype_name(a.dtype));
  check_shape(&a, 1, shape, 8);
  CHECK(a.data[0] == 1.0, "0x3C00 -> %g", a.data[0]);
  CHECK(a.data[1] == -2.0, "0xC000 -> %g", a.data[1]);
  CHECK(a.data[2] == 65504.0, "0x7BFF -> %g", a.data[2]);
  CHECK(a.data[3] == 5.9604644775390625e-08, "0x0001 -> %a", a.data[3]);   /* 2^-24 */
  CHECK(a.data[4] == 1023.0 / 16777216.0, "0x03FF -> %a", a.data[4]);
  CHECK(isinf(a.data[5]) && a.data[5] > 0, "0x7C00 -> %g", a.data[5]);
  CHECK(isnan(a.data[6]), "0x7E00 -> %g", a.data[6]);
  CHECK(a.data[7] == 0.0 && signbit(a.data[7]), "0x8000 -> %g", a.data[7]);
  npy_free(&a);
}

/* A 2x3 float64 or float32 file built by make_npy must read as 0..5. */
static void good_file(const char *name, int major, const char *dict, size_t align, int f32) {
  unsigned char b[512], data[48];
  char path[PATH_LEN], err[256] = "";
  const long long shape[] = {2, 3};
  npy_array a;
  int i;
  for (i = 0; i < 6; i++) {
    if (f32) { float v = (float)i; memcpy(data + 4 * i, &v, 4); }
    else { double v = i; memcpy(data + 8 * i, &v, 8); }
  }
  at(path, name);
  CHECK(write_bytes(path, b, make_npy(b, major, dict, align, data, f32 ? 24 : 48)) == 0,
        "cannot write %s", path);
  CHECK(npy_read(path, &a, err, sizeof err) == 0, "%s: %s", name, err);
  if (!a.data) return;
  CHECK(a.dtype == (f32 ? NPY_F32 : NPY_F64), "%s: dtype %s", name, npy_dtype_name(a.dtype));
  check_shape(&a, 2, shape, 6);
  for (i = 0; i < 6 && (size_t)i < a.count; i++)
    CHECK(a.data[i] == i, "%s: element %d is %g", name, i, a.data[i]);
  npy_free(&a);
}

static void test_good_headers(void) {
  good_file("v2.npy", 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 64, 0);
  good_file("v3.npy", 3, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 64, 0);
  good_file("order.npy", 1, "{\"shape\":(2,3),'fortran_order' : False ,  'descr':'<f4'}", 64, 1);
  good_file("spaces.npy", 1, "  {  'fortran_order':False,\t'shape': ( 2 , 3 , ) , 'descr': '=f8' ,}", 16, 0);
  good_file("unaligned.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 1, 1);
}

/* ---- Files the reader must refuse. ---- */

static void test_bad_files(void) {
  static unsigned char b[FILE_MAX];
  char path[PATH_LEN], want[PATH_LEN + 128], err[256] = "";
  const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  size_t n;
  npy_array a;

  n = make_npy(b, 1, ok, 64, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
  b[1] = 'X';
  bad_bytes("magic.npy", b, n, "not a .npy file (bad magic)");
  b[1] = 'N';
  bad_bytes("short.npy", b, 5, "too short");
  b[6] = 4;
  bad_bytes("version.npy", b, n, "unsupported .npy format version 4.0");
  b[6] = 1;
  b[8] = 0xff;   /* header length 255, past the end */
  bad_bytes("hlen.npy", b, n, "runs past the end of the file");
  b[8] = 0;
  b[9] = 0;
  bad_bytes("hlen0.npy", b, n, "header is empty");
  n = make_npy(b, 1, ok, 64, NULL, 0);
  b[n - 1] = ' ';
  bad_bytes("newline.npy", b, n, "does not end with a newline");

  bad_dict("list.npy", "[1, 2]", 0, "not a dict");
  bad_dict("unknown.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'foo': 1}", 16,
           "unknown header key 'foo'");
  bad_dict("missing.npy", "{'descr': '<f4', 'fortran_order': False}", 16, "no 'shape' key");
  bad_dict("missing2.npy", "{'fortran_order': False, 'shape': (4,)}", 16, "no 'descr' key");
  bad_dict("dup.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 16,
           "duplicate key 'descr'");
  bad_dict("after.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", 16, "unexpected text");
  bad_dict("colon.npy", "{'descr' '<f4', 'fortran_order': False, 'shape': (4,)}", 16, "expected ':'");
  bad_dict("unclosed.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)", 16, "expected ','");
  bad_dict("bool.npy", "{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}", 16, "True or False");
  /* Read as C order, a Fortran-order matrix would come back transposed. */
  bad_dict("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", 24,
           "Fortran-order arrays are not supported");
  bad_dict("i4.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,)}", 16,
           "dtype '<i4' is not supported (float16, float32, float64 or bfloat16)");
  bad_dict("v2.npy", "{'descr': '|V2', 'fortran_order': False, 'shape': (4,)}", 8,
           "dtype '|V2' is not supported (bfloat16 is read as '<V2'");
  bad_dict("v4.npy", "{'descr': '<V4', 'fortran_order': False, 'shape': (4,)}", 16,
           "dtype '<V4' is not supported");
  bad_dict("pipe.npy", "{'descr': '|f4', 'fortran_order': False, 'shape': (4,)}", 16,
           "dtype '|f4' is not supported");
  bad_dict("f16x.npy", "{'descr': '<f16', 'fortran_order': False, 'shape': (4,)}", 64,
           "dtype '<f16' is not supported");
  bad_dict("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (4,)}", 16, "dtype '>f4' is big-endian");
  bad_dict("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2)}", 16,
           "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  bad_dict("0d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4, "0-d arrays");
  bad_dict("5d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1)}", 4,
           "more than 4 dimensions");
  bad_dict("notuple.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4)}", 16, "trailing comma");
  bad_dict("zero.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3)}", 0,
           "empty array: shape (2, 0, 3) has a zero dimension");
  bad_dict("neg.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", 0, "negative dimension -3");
  bad_dict("overflow.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
           0, "is too large (the element count overflows)");
  bad_dict("bigdim.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,)}", 0,
           "dimension too large");
  /* Fits in size_t but not in the file: refused before any allocation. */
  bad_dict("huge.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1073741824, 1048576)}", 8,
           "truncated: header says 1125899906842624 elements (9007199254740992 bytes) but the file has 8 data bytes");
  bad_dict("trailing.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 19,
           "3 trailing bytes after the 16 data bytes");

  /* The truncation message, whole. */
  at(path, "trunc.npy");
  bad_dict("trunc.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4096,), }", 100, "truncated");
  CHECK(npy_read(path, &a, err, sizeof err) == -1, "truncated file read");
  snprintf(want, sizeof want, "%s: truncated: header says 4096 elements (16384 bytes) but the file has 100 data bytes", path);
  CHECK(strcmp(err, want) == 0, "message '%s', want '%s'", err, want);

  at(path, "absent.npy");
  expect_bad_read(path, strerror(ENOENT));
  at(path, "adir");
  CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
  expect_bad_read(path, "not a regular file");
}

/* ---- Writer failures. ---- */

static void expect_bad_write(const char *path, int ndim, const long long *shape, const char *want) {
  const double d[4] = {0};
  char err[256] = "";
  struct stat st;
  int rc = npy_write_f64(path, d, ndim, shape, err, sizeof err);
  CHECK(rc == -1, "%s: npy_write_f64 returned %d", path, rc);
  CHECK(message_ok(err, path), "%s: bad message '%s'", path, err);
  CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", path, err, want);
  CHECK(stat(path, &st) != 0 || S_ISDIR(st.st_mode), "%s: a file was left behind", path);
}

static void test_bad_writes(void) {
  char path[PATH_LEN];
  const long long one[] = {1}, zero[] = {2, 0}, neg[] = {-1}, five[] = {1, 1, 1, 1, 1};
  const long long big[] = {4294967296LL, 4294967296LL, 4294967296LL};
  at(path, "w.npy");
  expect_bad_write(path, 0, one, "cannot write 0 dimensions");
  expect_bad_write(path, 5, five, "cannot write 5 dimensions");
  expect_bad_write(path, 2, zero, "empty array");
  expect_bad_write(path, 1, neg, "negative dimension");
  expect_bad_write(path, 3, big, "too large");
  at(path, "nodir/w.npy");
  expect_bad_write(path, 1, one, strerror(ENOENT));
  /* Only a regular file is replaced: a directory is refused before any write. */
  at(path, "adir");
  expect_bad_write(path, 1, one, "is a directory");
}

/* A FIFO or a symbolic link at the destination is refused and left as it
** was: the link is not followed, and the file it names keeps its bytes. */
static void test_special_destinations(void) {
  char fifo[PATH_LEN], link[PATH_LEN], target[PATH_LEN], err[256] = "";
  const long long one[] = {1};
  const double d[1] = {0};
  struct stat st;
  at(fifo, "a.fifo");
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
  CHECK(npy_write_f64(fifo, d, 1, one, err, sizeof err) == -1 && strstr(err, "is a FIFO"),
        "FIFO: '%s'", err);
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
  at(target, "target.txt");
  at(link, "link.npy");
  FILE *f = fopen(target, "w");
  CHECK(f && fputs("keep", f) >= 0 && fclose(f) == 0, "writing %s", target);
  CHECK(symlink(target, link) == 0, "symlink: %s", strerror(errno));
  err[0] = '\0';
  CHECK(npy_write_f64(link, d, 1, one, err, sizeof err) == -1 && strstr(err, "symbolic link"),
        "symlink: '%s'", err);
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced");
  CHECK(stat(target, &st) == 0 && st.st_size == 4, "the link's target was written");
  CHECK(unlink(fifo) == 0 && unlink(link) == 0 && unlink(target) == 0, "cleaning up");
}

/* No write may leave its temporary file behind. */
static void test_no_temporaries(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int tmps = 0, files = 0;
  CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    files++;
    if (strstr(e->d_name, ".tmp.")) tmps++;
  }
  CHECK(closedir(d) == 0, "closedir: %s", strerror(errno));
  CHECK(files > 10, "only %d directory entries", files);
  CHECK(tmps == 0, "%d temporary files left", tmps);
}

/* ---- float16 decoding of every bit pattern. ---- */

static void test_half_all(void) {
  unsigned bad = 0, nans = 0;
  unsigned h;
  for (h = 0; h < 65536; h++) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0, want, got = npy_half_to_double((unsigned short)h);
    if (e == 31 && m) {
      nans++;
      if (!isnan(got)) bad++;
      continue;
    }
    if (e == 31) want = s * INFINITY;
    else if (e == 0) want = s * ldexp(m / 1024.0, -14);
    else want = s * ldexp(1.0 + m / 1024.0, e - 15);
    if (got != want || !!signbit(got) != !!signbit(want)) bad++;
  }
  CHECK(nans == 2046, "%u NaN patterns", nans);
  CHECK(bad == 0, "%u of 65536 float16 patterns decode wrong", bad);
  CHECK(npy_half_to_double(0x3555) == 0x1.554p-2, "0x3555 -> %a", npy_half_to_double(0x3555));
}

static void remove_all(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[PATH_LEN];
  CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    at(path, e->d_name);
    CHECK(remove(path) == 0, "remove %s: %s", path, strerror(errno));
  }
  CHECK(closedir(d) == 0, "closedir: %s", strerror(errno));
  CHECK(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
}

int main(void) {
  if (!mkdtemp(dir)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  CHECK(strcmp(npy_dtype_name(NPY_F16), "float16") == 0 && strcmp(npy_dtype_name(NPY_F32), "float32") == 0 &&
        strcmp(npy_dtype_name(NPY_F64), "float64") == 0, "dtype names");
  test_round_trips();
  test_overwrite();
  test_float16();
  test_bfloat16();
  test_good_headers();
  test_bad_files();
  test_bad_writes();
  test_special_destinations();
  test_no_temporaries();
  test_half_all();
  remove_all();
  return check_done("test_npy");
}
