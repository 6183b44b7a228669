/*
** attention.c
** libfatune in a program: open a context, run attention on a problem, and
** check the result against attention computed here, naively, in double.
** On the emulator the tensors are host memory; on a GPU the program would
** copy them to the device first (cuMemAlloc, cuMemcpyHtoD), which this
** example leaves out by asking for the emulator.
**
** usage: attention [DB_PATH]      (exit 0 when the result is right)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
  fatune_options opts = {.db_path = argc > 1 ? argv[1] : NULL, .backend = "emu"};
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
      fatune_attention_forward(ctx, &p, q, k, v, o, lse, NULL) != FATUNE_OK) {
    fprintf(stderr, "attention: %s\n", fatune_errmsg());
    fatune_close(ctx);
    return 1;
  }
  static const char *const why[] = {"tuned for this problem", "tuned for the nearest seq",
                                    "the default, nothing tuned yet"};
  double err = check(q, k, v, o);
  printf("%s on %s (%s): max error %.2e\n", name, fatune_backend(ctx), why[choice], err);
  fatune_close(ctx);
  free(q), free(k), free(v), free(o), free(lse);
  return err < 1e-5 ? 0 : 1;
}
