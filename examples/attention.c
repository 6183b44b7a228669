/*
** attention.c
** libfatune in a program: open a context, run attention on a problem, and
** check the result against attention computed here, naively, in double.
** On the emulator the tensors are host memory; on a GPU (backend cuda)
** they are copied to the device first, with the driver this example loads
** itself, in the primary context libfatune uses too.
**
** usage: attention [DB_PATH [emu|cuda]]   (exit 0 when the result is right)
*/
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fatune.h>

enum { B = 2, H = 3, NQ = 77, NK = 90, D = 32 };

/* Row r of (b, h) against all visible keys, in double. */
static double check(const float *q, const float *k, const float *v, const float *o) {
  double worst = 0, s[NK];
  const double scale = 1.0 / sqrt((double)D);
  for (int bh = 0; bh < B * H; bh++)
    for (int r = 0; r < NQ; r++) {
      const int nvis = r + (NK - NQ) + 1 < NK ? r + (NK - NQ) + 1 : NK;  /* causal */
      double m = -INFINITY, l = 0;
      for (int c = 0; c < nvis; c++) {
        double dot = 0;
        for (int d = 0; d < D; d++) dot += q[(bh * NQ + r) * D + d] * k[(bh * NK + c) * D + d];
        s[c] = dot * scale;
        if (s[c] > m) m = s[c];
      }
      for (int c = 0; c < nvis; c++) l += s[c] = exp(s[c] - m);
      for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int c = 0; c < nvis; c++) acc += s[c] * v[(bh * NK + c) * D + d];
        double e = fabs(acc / l - o[(bh * NQ + r) * D + d]);
        if (e > worst) worst = e;
      }
    }
  return worst;
}

/* The few driver calls a program makes to hand libfatune device memory;
** typed here, as the example does not build against <cuda.h>. */
typedef unsigned long long devptr;
static struct {
  int (*init)(unsigned);
  int (*retain)(void **, int);
  int (*set)(void *);
  int (*release)(int);
  int (*alloc)(devptr *, size_t);
  int (*free)(devptr);
  int (*htod)(devptr, const void *, size_t);
  int (*dtoh)(void *, devptr, size_t);
} cu;

static int load_driver(void) {
  static const char *const names[] = {"cuInit", "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent", "cuDevicePrimaryCtxRelease_v2", "cuMemAlloc_v2", "cuMemFree_v2",
    "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"};
  void *lib = dlopen("libcuda.so.1", RTLD_NOW), *slot[8];
  for (int i = 0; i < 8; i++)
    if (!lib || !(slot[i] = dlsym(lib, names[i]))) return -1;
  memcpy(&cu, slot, sizeof cu);   /* POSIX: function and object pointers alike */
  void *ctx;
  return cu.init(0) || cu.retain(&ctx, 0) || cu.set(ctx) ? -1 : 0;
}

/* n floats on the device, a copy of host (when not NULL). */
static devptr on_device(const float *host, size_t n) {
  devptr d = 0;
  if (cu.alloc(&d, n * sizeof *host) != 0) return 0;
  if (host && cu.htod(d, host, n * sizeof *host) != 0) return cu.free(d), 0;
  return d;
}

/* Attention on the GPU: the tensors to the device, O back. */
static int forward_cuda(fatune_ctx *ctx, const fatune_problem *p, const float *q, const float *k,
                        const float *v, float *o) {
  const size_t nq = (size_t)B * H * NQ * D, nk = (size_t)B * H * NK * D;
  devptr dq = on_device(q, nq), dk = on_device(k, nk), dv = on_device(v, nk);
  devptr dout = on_device(NULL, nq), dl = on_device(NULL, (size_t)B * H * NQ);
  int rc = -1;
  if (dq && dk && dv && dout && dl &&
      fatune_attention_forward(ctx, p, (void *)dq, (void *)dk, (void *)dv, (void *)dout,
                               (void *)dl, NULL) == FATUNE_OK)
    rc = cu.dtoh(o, dout, nq * sizeof *o) ? -1 : 0;
  devptr all[] = {dq, dk, dv, dout, dl};
  for (int i = 0; i < 5; i++)
    if (all[i]) cu.free(all[i]);
  return rc;
}

int main(int argc, char **argv) {
  const char *backend = argc > 2 ? argv[2] : "emu";
  const int gpu = !strcmp(backend, "cuda");
  if (gpu && load_driver() != 0) {
    fprintf(stderr, "attention: no usable CUDA driver\n");
    return 1;
  }
  fatune_options opts = {.db_path = argc > 1 ? argv[1] : NULL, .backend = backend};
  fatune_ctx *ctx;
  if (fatune_open(&opts, &ctx) != FATUNE_OK) {
    fprintf(stderr, "attention: %s\n", fatune_errmsg());
    return 1;
  }
  float *q = malloc(sizeof(float) * B * H * NQ * D), *o = malloc(sizeof(float) * B * H * NQ * D);
  float *k = malloc(sizeof(float) * B * H * NK * D), *v = malloc(sizeof(float) * B * H * NK * D);
  float *lse = malloc(sizeof(float) * B * H * NQ);
  if (!q || !o || !k || !v || !lse) return 1;
  srand(1);
  for (int i = 0; i < B * H * NQ * D; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < B * H * NK * D; i++) {
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
  }
  fatune_problem p = {.batch = B, .heads = H, .seq_q = NQ, .seq_k = NK, .dim = D,
                      .dtype = FATUNE_FP32, .causal = 1};
  char name[160];
  fatune_choice choice;
  if (fatune_choose(ctx, &p, name, sizeof name, &choice) != FATUNE_OK ||
      (gpu ? forward_cuda(ctx, &p, q, k, v, o) != 0
           : fatune_attention_forward(ctx, &p, q, k, v, o, lse, NULL) != FATUNE_OK)) {
    fprintf(stderr, "attention: %s\n", fatune_errmsg());
    fatune_close(ctx);
    return 1;
  }
  static const char *const why[] = {"tuned for this problem", "tuned for the nearest seq",
                                    "the default, nothing tuned yet"};
  double err = check(q, k, v, o);
  printf("%s on %s (%s): max error %.2e\n", name, fatune_backend(ctx), why[choice], err);
  fatune_close(ctx);
  if (gpu) cu.release(0);
  free(q), free(k), free(v), free(o), free(lse);
  return err < 1e-5 ? 0 : 1;
}
