/*
** npy.c
** The .npy format: the magic "\x93NUMPY", a major and minor version byte,
** the header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0),
** then a Python dict literal with 'descr', 'fortran_order' and 'shape',
** space-padded and ending in '\n', then the raw C-order data. The header
** is parsed by hand, strictly: anything NumPy would not write is rejected
** with a message that names the file. Bytes are decoded and encoded one by
** one as little-endian, so the code does not depend on the host's order.
*/
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "halfprec.h"
#include "npy.h"

_Static_assert(sizeof(float) == 4 && FLT_MANT_DIG == 24, "float must be IEEE binary32");
_Static_assert(sizeof(double) == 8 && DBL_MANT_DIG == 53, "double must be IEEE binary64");

#define PREFIX_LEN 8          /* magic and version */
#define ALIGN 64              /* NumPy aligns the data to 64 bytes */
#define CHUNK 8192            /* bytes converted at a time; a multiple of 8 */
#define KEY_MAX 64            /* longest string accepted in a header */
#define SHAPE_TEXT 100        /* "(d, d, d, d)" with 20-digit dimensions */

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Writes "path: message" into err and returns -1. */
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...) {
  va_list ap;
  int n;
  if (!err || errlen == 0) return -1;
  n = snprintf(err, errlen, "%s: ", path);
  if (n < 0 || (size_t)n >= errlen) return -1;
  va_start(ap, fmt);
  vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

const char *npy_dtype_name(npy_dtype t) {
  return t == NPY_F16 ? "float16" : t == NPY_F32 ? "float32" : t == NPY_BF16 ? "bfloat16"
         : t == NPY_E4M3 ? "float8_e4m3fn" : "float64";
}

static size_t dtype_size(npy_dtype t) {
  return t == NPY_E4M3 ? 1 : t == NPY_F16 || t == NPY_BF16 ? 2 : t == NPY_F32 ? 4 : 8;
}

/* Built from the bits rather than with ldexp, so the test's ldexp formula
** is an independent check. */
double npy_half_to_double(unsigned short h) { return hp_f16_to_double(h); }

static uint64_t load_le(const unsigned char *b, size_t n) {
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | b[n];
  return v;
}

static void store_le(unsigned char *b, uint64_t v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static double decode(npy_dtype t, const unsigned char *b) {
  uint32_t u32;
  uint64_t u64;
  float f;
  double d;
  switch (t) {
  case NPY_F16:
    return npy_half_to_double((unsigned short)load_le(b, 2));
  case NPY_E4M3:   /* exact; the two NaN patterns give NaN */
    return hp_e4m3_to_double(b[0]);
  case NPY_BF16:   /* the high half of a float32 */
    u32 = (uint32_t)load_le(b, 2) << 16;
    memcpy(&f, &u32, sizeof f);
    return f;
  case NPY_F32:
    u32 = (uint32_t)load_le(b, 4);
    memcpy(&f, &u32, sizeof f);
    return f;
  default:
    u64 = load_le(b, 8);
    memcpy(&d, &u64, sizeof d);
    return d;
  }
}

static int host_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* Python's repr of a shape tuple: "(5,)" or "(2, 3)". */
static void format_shape(char *s, int ndim, const long long *shape) {
  int i, n = 0;
  n += snprintf(s + n, SHAPE_TEXT - n, "(");
  for (i = 0; i < ndim; i++)
    n += snprintf(s + n, SHAPE_TEXT - n, i ? ", %lld" : "%lld", shape[i]);
  snprintf(s + n, SHAPE_TEXT - n, ndim == 1 ? ",)" : ")");
}

/* The element count, refusing empty shapes and any count whose size in
** doubles would not fit in size_t. */
static int count_elements(const char *path, int ndim, const long long *shape,
                          size_t *count, char *err, size_t errlen) {
  char s[SHAPE_TEXT];
  size_t c = 1;
  int i;
  for (i = 0; i < ndim; i++) {
    if (shape[i] <= 0) {
      format_shape(s, ndim, shape);
      return fail(err, errlen, path, shape[i] == 0
                  ? "empty array: shape %s has a zero dimension"
                  : "shape %s has a negative dimension", s);
    }
    if ((unsigned long long)shape[i] > (SIZE_MAX / sizeof(double)) / c) {
      format_shape(s, ndim, shape);
      return fail(err, errlen, path, "shape %s is too large (the element count overflows)", s);
    }
    c *= (size_t)shape[i];
  }
  *count = c;
  return 0;
}

/* ---- The header dict. ---- */

typedef struct header {
  char descr[KEY_MAX];
  int fortran;
  int ndim;
  long long shape[4];
  int seen_descr, seen_fortran, seen_shape;
} header;

typedef struct parser {
  const char *s;
  size_t n, i;
  const char *path;
  char *err;
  size_t errlen;
} parser;

static int bad(parser *p, const char *what) {
  return fail(p->err, p->errlen, p->path, "malformed header at byte %zu: %s", p->i, what);
}

static void skip_ws(parser *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                         p->s[p->i] == '\r' || p->s[p->i] == '\n'))
    p->i++;
}

static int peek(const parser *p) {
  return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

/* A quoted string of printable characters without escapes, so it can be
** echoed in a message as it is. */
static int parse_string(parser *p, char *out) {
  int q = peek(p);
  size_t len = 0;
  if (q != '\'' && q != '"') return bad(p, "expected a quoted string");
  p->i++;
  for (;;) {
    int c = peek(p);
    if (c == q) break;
    if (c < 0x20 || c > 0x7e || c == '\\') return bad(p, "unsupported character in a string");
    if (len + 1 >= KEY_MAX) return bad(p, "string too long");
    out[len++] = (char)c;
    p->i++;
  }
  out[len] = '\0';
  p->i++;
  return 0;
}

static int parse_bool(parser *p, int *out) {
  if (p->n - p->i >= 4 && memcmp(p->s + p->i, "True", 4) == 0) {
    *out = 1;
    p->i += 4;
  } else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "False", 5) == 0) {
    *out = 0;
    p->i += 5;
  } else {
    return bad(p, "fortran_order must be True or False");
  }
  return 0;
}

static int parse_dim(parser *p, long long *out) {
  int neg = 0;
  long long v = 0;
  if (peek(p) == '-') { neg = 1; p->i++; }
  if (peek(p) < '0' || peek(p) > '9') return bad(p, "expected an integer in shape");
  while (peek(p) >= '0' && peek(p) <= '9') {
    int d = peek(p) - '0';
    if (v > (LLONG_MAX - d) / 10) return bad(p, "dimension too large in shape");
    v = v * 10 + d;
    p->i++;
  }
  if (neg && v > 0)
    return fail(p->err, p->errlen, p->path, "negative dimension -%lld in shape", v);
  *out = v;
  return 0;
}

/* A tuple of integers; "(5)" is an int in Python, not a tuple. */
static int parse_shape(parser *p, header *h) {
  h->ndim = 0;
  if (peek(p) != '(') return bad(p, "shape must be a tuple");
  p->i++;
  skip_ws(p);
  if (peek(p) == ')') { p->i++; return 0; }
  for (;;) {
    long long d = 0;
    if (parse_dim(p, &d) != 0) return -1;
    if (h->ndim == 4)
      return fail(p->err, p->errlen, p->path, "shape has more than 4 dimensions (at most 4 are supported)");
    h->shape[h->ndim++] = d;
    skip_ws(p);
    if (peek(p) == ',') {
      p->i++;
      skip_ws(p);
      if (peek(p) == ')') break;
    } else if (peek(p) == ')') {
      if (h->ndim == 1) return bad(p, "a one-element shape needs a trailing comma, as in (5,)");
      break;
    } else {
      return bad(p, "expected ',' or ')' in shape");
    }
  }
  p->i++;
  return 0;
}

/* Marks key as seen; a second occurrence is an error. */
static int first_time(parser *p, int *seen, const char *key) {
  char msg[KEY_MAX + 32];
  if (*seen) {
    snprintf(msg, sizeof msg, "duplicate key '%s'", key);
    return bad(p, msg);
  }
  *seen = 1;
  return 0;
}

static int parse_value(parser *p, const char *key, header *h) {
  if (strcmp(key, "descr") == 0)
    return first_time(p, &h->seen_descr, key) ? -1 : parse_string(p, h->descr);
  if (strcmp(key, "fortran_order") == 0)
    return first_time(p, &h->seen_fortran, key) ? -1 : parse_bool(p, &h->fortran);
  if (strcmp(key, "shape") == 0)
    return first_time(p, &h->seen_shape, key) ? -1 : parse_shape(p, h);
  return fail(p->err, p->errlen, p->path, "unknown header key '%s'", key);
}

static int parse_header(parser *p, header *h) {
  char key[KEY_MAX];
  memset(h, 0, sizeof *h);
  skip_ws(p);
  if (peek(p) != '{') return bad(p, "the header is not a dict (expected '{')");
  p->i++;
  for (;;) {
    skip_ws(p);
    if (peek(p) == '}') break;   /* empty dict, or after a trailing comma */
    if (parse_string(p, key) != 0) return -1;
    skip_ws(p);
    if (peek(p) != ':') return bad(p, "expected ':' after a key");
    p->i++;
    skip_ws(p);
    if (parse_value(p, key, h) != 0) return -1;
    skip_ws(p);
    if (peek(p) == '}') break;
    if (peek(p) != ',') return bad(p, "expected ',' or '}' after a value");
    p->i++;
  }
  p->i++;
  skip_ws(p);
  if (p->i != p->n) return bad(p, "unexpected text after the dict");
  if (!h->seen_descr) return fail(p->err, p->errlen, p->path, "header has no 'descr' key");
  if (!h->seen_fortran) return fail(p->err, p->errlen, p->path, "header has no 'fortran_order' key");
  if (!h->seen_shape) return fail(p->err, p->errlen, p->path, "header has no 'shape' key");
  return 0;
}

/* Only '<' floats, or '=' on a little-endian host; and '<V2', what np.save
** writes for an ml_dtypes.bfloat16 array (its descr names no bfloat16:
** fatune takes '<V2' as bfloat16, the only 2-byte type ml_dtypes saves
** that way that attention inputs use; a plain NumPy void is '|V2', refused).
** A 1-byte void, '<V1' as np.save writes an ml_dtypes.float8_e4m3fn array
** (or '|V1', NumPy's spelling of a 1-byte void, '=V1'), is e4m3: the only
** 1-byte float fatune computes (an ml_dtypes.float8_e5m2 array reads the
** same and would be taken for it: convert such an array first). */
static int parse_descr(const char *path, const char *d, npy_dtype *t, char *err, size_t errlen) {
  const char *sizes = "248";
  const char *s;
  if (!strcmp(d, "<V2") || (!strcmp(d, "=V2") && host_little_endian())) {
    *t = NPY_BF16;
    return 0;
  }
  if (!strcmp(d, "<V1") || !strcmp(d, "|V1") || !strcmp(d, "=V1")) {
    *t = NPY_E4M3;
    return 0;
  }
  if (d[0] && d[1] == 'V')
    return fail(err, errlen, path, "dtype '%s' is not supported (bfloat16 is read as '<V2', "
                "float8_e4m3fn as '<V1' or '|V1', what np.save writes for ml_dtypes' types)", d);
  if (strlen(d) != 3 || d[1] != 'f' || !(s = strchr(sizes, d[2])) || !strchr("<>=", d[0]))
    return fail(err, errlen, path, "dtype '%s' is not supported (float16, float32, float64 or bfloat16)", d);
  if (d[0] == '>' || (d[0] == '=' && !host_little_endian()))
    return fail(err, errlen, path, "dtype '%s' is big-endian, which is not supported; save with arr.astype('<f%c')", d, d[2]);
  *t = (npy_dtype)(s - sizes);
  return 0;
}

/* ---- Reading. ---- */

/* Exactly n bytes; a short read means an I/O error or a file that changed
** since its size was taken. */
static int read_exact(FILE *f, void *buf, size_t n, const char *path, char *err, size_t errlen) {
  if (fread(buf, 1, n, f) == n) return 0;
  if (ferror(f)) return fail(err, errlen, path, "read error: %s", strerror(errno));
  return fail(err, errlen, path, "the file shrank while being read");
}

/* The magic, version and header length; *hdr_at is where the dict starts. */
static int read_prefix(FILE *f, unsigned long long fsize, const char *path, size_t *hlen,
                       unsigned long long *hdr_at, char *err, size_t errlen) {
  unsigned char b[PREFIX_LEN + 4];
  size_t lensize;
  if (fsize < PREFIX_LEN + 2)
    return fail(err, errlen, path, "not a .npy file (too short: %llu bytes)", fsize);
  if (read_exact(f, b, PREFIX_LEN, path, err, errlen) != 0) return -1;
  if (memcmp(b, MAGIC, sizeof MAGIC) != 0)
    return fail(err, errlen, path, "not a .npy file (bad magic)");
  if (b[7] != 0 || b[6] < 1 || b[6] > 3)
    return fail(err, errlen, path, "unsupported .npy format version %d.%d (1.0, 2.0 or 3.0)", b[6], b[7]);
  lensize = b[6] == 1 ? 2 : 4;
  if (fsize < PREFIX_LEN + lensize)
    return fail(err, errlen, path, "not a .npy file (too short: %llu bytes)", fsize);
  if (read_exact(f, b + PREFIX_LEN, lensize, path, err, errlen) != 0) return -1;
  *hlen = (size_t)load_le(b + PREFIX_LEN, lensize);
  *hdr_at = PREFIX_LEN + lensize;
  if (*hlen == 0) return fail(err, errlen, path, "the header is empty");
  if (*hlen > fsize - *hdr_at)
    return fail(err, errlen, path, "header length %zu runs past the end of the file (%llu bytes)", *hlen, fsize);
  return 0;
}

static int read_header(FILE *f, size_t hlen, header *h, const char *path, char *err, size_t errlen) {
  parser p;
  char *s = malloc(hlen);
  int rc;
  if (!s) return fail(err, errlen, path, "out of memory for a %zu-byte header", hlen);
  rc = read_exact(f, s, hlen, path, err, errlen);
  if (rc == 0 && s[hlen - 1] != '\n') rc = fail(err, errlen, path, "header does not end with a newline");
  if (rc == 0) {
    p.s = s; p.n = hlen; p.i = 0;
    p.path = path; p.err = err; p.errlen = errlen;
    rc = parse_header(&p, h);
  }
  free(s);
  return rc;
}

static int read_data(FILE *f, npy_dtype t, size_t count, double *dst,
                     const char *path, char *err, size_t errlen) {
  unsigned char buf[CHUNK];
  size_t isz = dtype_size(t), done = 0;
  while (done < count) {
    size_t n = count - done < CHUNK / isz ? count - done : CHUNK / isz, i;
    if (read_exact(f, buf, n * isz, path, err, errlen) != 0) return -1;
    for (i = 0; i < n; i++) dst[done + i] = decode(t, buf + i * isz);
    done += n;
  }
  return 0;
}

/* Everything after fopen; out is filled only on success. */
static int read_file(FILE *f, const char *path, npy_array *out, char *err, size_t errlen) {
  struct stat st;
  unsigned long long fsize, hdr_at = 0, avail, nbytes;
  size_t hlen = 0, count;
  header h;
  npy_dtype t = NPY_F64;
  double *data;

  if (fstat(fileno(f), &st) != 0) return fail(err, errlen, path, "cannot stat: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return fail(err, errlen, path, "not a regular file");
  fsize = (unsigned long long)st.st_size;
  if (read_prefix(f, fsize, path, &hlen, &hdr_at, err, errlen) != 0) return -1;
  if (read_header(f, hlen, &h, path, err, errlen) != 0) return -1;
  if (parse_descr(path, h.descr, &t, err, errlen) != 0) return -1;
  if (h.fortran)
    return fail(err, errlen, path, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  if (h.ndim == 0) return fail(err, errlen, path, "0-d arrays (shape ()) are not supported");
  if (count_elements(path, h.ndim, h.shape, &count, err, errlen) != 0) return -1;

  nbytes = (unsigned long long)count * dtype_size(t);
  avail = fsize - hdr_at - hlen;
  if (avail < nbytes)
    return fail(err, errlen, path, "truncated: header says %zu elements (%llu bytes) but the file has %llu data bytes",
                count, nbytes, avail);
  if (avail > nbytes)
    return fail(err, errlen, path, "%llu trailing bytes after the %llu data bytes", avail - nbytes, nbytes);

  data = malloc(count * sizeof *data);
  if (!data) return fail(err, errlen, path, "out of memory for %zu elements", count);
  if (read_data(f, t, count, data, path, err, errlen) != 0) {
    free(data);
    return -1;
  }
  out->dtype = t;
  out->ndim = h.ndim;
  memcpy(out->shape, h.shape, sizeof h.shape);
  out->count = count;
  out->data = data;
  return 0;
}

int npy_read(const char *path, npy_array *out, char *err, size_t errlen) {
  FILE *f;
  int rc;
  if (!out) return fail(err, errlen, path ? path : "npy_read", "no output array given");
  memset(out, 0, sizeof *out);
  if (!path) return fail(err, errlen, "npy_read", "no path given");
  f = fopen(path, "rb");
  if (!f) return fail(err, errlen, path, "cannot open: %s", strerror(errno));
  rc = read_file(f, path, out, err, errlen);
  if (fclose(f) != 0 && rc == 0) {
    npy_free(out);
    rc = fail(err, errlen, path, "cannot close: %s", strerror(errno));
  }
  return rc;
}

void npy_free(npy_array *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
}

/* ---- Writing. ---- */

/* Header bytes, padded with spaces so the data starts on a 64-byte
** boundary, as NumPy writes it. Returns the total length. */
static size_t build_header(unsigned char *b, const char *descr, int ndim, const long long *shape) {
  char shp[SHAPE_TEXT], dict[2 * SHAPE_TEXT];
  size_t n, pad, hlen;
  format_shape(shp, ndim, shape);
  n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shp);
  pad = (ALIGN - (PREFIX_LEN + 2 + n + 1) % ALIGN) % ALIGN;
  hlen = n + pad + 1;
  memcpy(b, MAGIC, sizeof MAGIC);
  b[6] = 1;
  b[7] = 0;
  store_le(b + PREFIX_LEN, hlen, 2);
  memcpy(b + PREFIX_LEN + 2, dict, n);
  memset(b + PREFIX_LEN + 2 + n, ' ', pad);
  b[PREFIX_LEN + 2 + hlen - 1] = '\n';
  return PREFIX_LEN + 2 + hlen;
}

static int write_data(FILE *f, npy_dtype t, const void *data, size_t count) {
  unsigned char buf[CHUNK];
  size_t isz = dtype_size(t), done = 0;
  while (done < count) {
    size_t n = count - done < CHUNK / isz ? count - done : CHUNK / isz, i;
    for (i = 0; i < n; i++) {
      uint64_t u = 0;
      if (isz == 2) {
        uint16_t h;
        memcpy(&h, (const uint16_t *)data + done + i, sizeof h);
        u = h;
      } else if (t == NPY_F32) {
        uint32_t w;
        memcpy(&w, (const float *)data + done + i, sizeof w);
        u = w;
      } else {
        memcpy(&u, (const double *)data + done + i, sizeof u);
      }
      store_le(buf + i * isz, u, isz);
    }
    if (fwrite(buf, isz, n, f) != n) return -1;
    done += n;
  }
  return 0;
}

int npy_check_destination(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (!path) return fail(err, errlen, "npy_write", "no path given");
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    return fail(err, errlen, path, "cannot examine it: %s", strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return 0;
  return fail(err, errlen, path, "%s, not a regular file: refusing to replace it",
              S_ISLNK(st.st_mode) ? "is a symbolic link (give the file it names)"
              : S_ISDIR(st.st_mode) ? "is a directory"
              : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "is a device"
              : S_ISFIFO(st.st_mode) ? "is a FIFO" : "exists");
}

/* The mode a plain fopen would give a new file: 0666 less the umask. The
** command is single-threaded when it writes its outputs. */
static mode_t file_mode(void) {
  const mode_t mask = umask(077);
  umask(mask);
  return 0666 & ~mask;
}

/* Writes the array into the new temporary file fd (tmp) completely and
** closes it; the caller removes it on failure. */
static int write_temp(int fd, const char *tmp, const unsigned char *hdr, size_t hsize,
                      npy_dtype t, const void *data, size_t count, const char *path, char *err,
                      size_t errlen) {
  if (fchmod(fd, file_mode()) != 0) {
    int e = errno;
    close(fd);
    return fail(err, errlen, path, "cannot set the mode of %s: %s", tmp, strerror(e));
  }
  FILE *f = fdopen(fd, "wb");
  int ok;
  if (!f) {
    int e = errno;
    close(fd);
    return fail(err, errlen, path, "cannot write %s: %s", tmp, strerror(e));
  }
  ok = fwrite(hdr, 1, hsize, f) == hsize && write_data(f, t, data, count) == 0;
  if (!ok) {
    int e = errno;
    fclose(f);   /* already failing; the write error is the one to report */
    return fail(err, errlen, path, "cannot write %s: %s", tmp, strerror(e));
  }
  if (fclose(f) != 0) return fail(err, errlen, path, "cannot write %s: %s", tmp, strerror(errno));
  return 0;
}

/* The temporary is made by mkstemp next to path (O_CREAT | O_EXCL: never
** through a planted symbolic link, never onto an existing file), and
** renamed onto path only when path is absent or a regular file. */
static int write_array(const char *path, npy_dtype t, const void *data, int ndim,
                       const long long *shape, char *err, size_t errlen) {
  unsigned char hdr[PREFIX_LEN + 2 + 2 * SHAPE_TEXT + ALIGN];
  size_t count, hsize, tlen;
  char *tmp;
  int rc, fd;

  if (!path) return fail(err, errlen, "npy_write", "no path given");
  if (!data || !shape) return fail(err, errlen, path, "no data or shape given");
  if (ndim < 1 || ndim > 4)
    return fail(err, errlen, path, "cannot write %d dimensions (1 to 4 are supported)", ndim);
  if (count_elements(path, ndim, shape, &count, err, errlen) != 0) return -1;
  if (npy_check_destination(path, err, errlen) != 0) return -1;
  hsize = build_header(hdr, t == NPY_F32 ? "<f4" : t == NPY_F64 ? "<f8" : t == NPY_F16 ? "<f2"
                                                                              : "<V2", ndim, shape);

  tlen = strlen(path) + sizeof ".tmp.XXXXXX";
  tmp = malloc(tlen);
  if (!tmp) return fail(err, errlen, path, "out of memory");
  snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
  fd = mkstemp(tmp);
  if (fd < 0) {
    rc = fail(err, errlen, path, "cannot create a temporary file next to it: %s", strerror(errno));
    free(tmp);
    return rc;
  }
  rc = write_temp(fd, tmp, hdr, hsize, t, data, count, path, err, errlen);
  /* Checked again just before the rename: what replaced path meanwhile is
  ** refused too. */
  if (rc == 0) rc = npy_check_destination(path, err, errlen);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = fail(err, errlen, path, "cannot rename %s onto it: %s", tmp, strerror(errno));
  /* Best effort: the first error is the one worth reporting. */
  if (rc != 0) (void)unlink(tmp);
  free(tmp);
  return rc;
}

int npy_write_f32(const char *path, const float *data, int ndim,
                  const long long *shape, char *err, size_t errlen) {
  return write_array(path, NPY_F32, data, ndim, shape, err, errlen);
}

int npy_write_f64(const char *path, const double *data, int ndim,
                  const long long *shape, char *err, size_t errlen) {
  return write_array(path, NPY_F64, data, ndim, shape, err, errlen);
}

int npy_write_16(const char *path, npy_dtype t, const unsigned short *bits, int ndim,
                 const long long *shape, char *err, size_t errlen) {
  if (t != NPY_F16 && t != NPY_BF16)
    return fail(err, errlen, path ? path : "npy_write", "not a 16-bit dtype");
  return write_array(path, t, bits, ndim, shape, err, errlen);
}
