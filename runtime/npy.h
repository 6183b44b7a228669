/*
** npy.h
** Reads and writes NumPy .npy files (format versions 1.0, 2.0 and 3.0) of
** little-endian float16, float32 or float64 arrays with 1 to 4 dimensions
** (and bfloat16 and float8_e4m3fn ones read as ml_dtypes saves them: descr
** '<V2', and '<V1' or '|V1'),
** so tensors can travel between Python and the tuner. Everything read is
** converted exactly to double, in C order.
*/
#ifndef NPY_H
#define NPY_H

#include <stddef.h>

/* NPY_E4M3: OCP FP8 e4m3 (ml_dtypes.float8_e4m3fn), read only. */
typedef enum npy_dtype { NPY_F16, NPY_F32, NPY_F64, NPY_BF16, NPY_E4M3 } npy_dtype;

typedef struct npy_array {
  npy_dtype dtype;          /* as stored in the file */
  int ndim;                 /* 1..4 */
  long long shape[4];
  size_t count;             /* product of shape */
  double *data;             /* all elements converted exactly to double, C order */
} npy_array;

/* Returns 0, or -1 with one line starting with the path in err; on failure
** out->data is NULL, and npy_free(out) is safe either way. */
int npy_read(const char *path, npy_array *out, char *err, size_t errlen);
void npy_free(npy_array *a);

/* Write a version 1.0 file, atomically: a temporary file next to path,
** made by mkstemp, is renamed onto it, so path never holds a half-written
** array. path must be absent or a regular file: a directory, a device, a
** FIFO or a symbolic link (not followed) is refused. 0 or -1. */
int npy_write_f32(const char *path, const float *data, int ndim,
                  const long long *shape, char *err, size_t errlen);
int npy_write_f64(const char *path, const double *data, int ndim,
                  const long long *shape, char *err, size_t errlen);
/* 16-bit elements as they are: t NPY_F16 ('<f2') or NPY_BF16 (written as
** '<V2', as np.save writes an ml_dtypes.bfloat16 array; in NumPy,
** np.load(path).view(ml_dtypes.bfloat16) gives it back). */
int npy_write_16(const char *path, npy_dtype t, const unsigned short *bits, int ndim,
                 const long long *shape, char *err, size_t errlen);

/* 0 when npy_write may write path (absent, or a regular file); -1 with a
** message naming it otherwise, before any work is done. */
int npy_check_destination(const char *path, char *err, size_t errlen);

double npy_half_to_double(unsigned short h);   /* IEEE binary16 -> exact double */
const char *npy_dtype_name(npy_dtype t);       /* "float16", "float32", "float64", "bfloat16",
                                                  "float8_e4m3fn" */

#endif
