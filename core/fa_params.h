/*
** fa_params.h
** The argument block of the forward pass (op fwd), every launch of its
** kernels taking the same one; an op to come (bwd, decode) adds a block of
** its own beside it. This one file is compiled by
** the host C compiler and prepended, as text, to every generated kernel, so
** host and device agree on its layout by construction. Only types that mean
** the same thing in C11, CUDA C++ and NVRTC (no <stdint.h> there) appear.
*/
#ifndef FA_PARAMS_H
#define FA_PARAMS_H

/* A TMA tensor map: on cuda the 128 bytes cuTensorMapEncodeTiled writes
** (CUtensorMap, 64-byte aligned, read by cp.async.bulk.tensor from the
** kernel's parameter space); on emu the emulator's own encoding of the same
** arguments (emu_abi.h). Built by backend_tmap (backend.h). */
typedef struct __attribute__((aligned(64))) fa_tmap {
  unsigned long long w[16];
} fa_tmap;

typedef struct fa_params {
  const void *q, *k, *v;  /* inputs, (batch, heads, seq, dim), dim contiguous */
  void *o;                /* output, same layout as q */
  void *lse;              /* logsumexp, [batch][heads][seq_q]: fp64 for fp64, else fp32 */
  void *ws;               /* the kernel's one workspace, if it declares one (kv_outer:
                          ** running m and l), or 0 */
  long long q_sb, q_sh, q_sn;  /* strides in elements: batch, head, seq */
  long long k_sb, k_sh, k_sn;
  long long v_sb, v_sh, v_sn;
  long long o_sb, o_sh, o_sn;
  int batch, heads, seq_q, seq_k;
  int kv_group;           /* Q heads per K/V head (GQA, MQA): head h reads K/V head
                             h / kv_group; 0 or 1 when every head has its own */
  double scale_log2;      /* softmax scale times log2(e) */
  float scale_log2_f32;   /* the same rounded to float, for the kernels whose softmax is
                          ** in float: ptxas reloads kernel arguments inside loops, and a
                          ** double one then costs a conversion each time */
  fa_tmap tmap[4];        /* TMA descriptors of the kernels that load by TMA (sm_90a):
                          ** what each holds is the template's to say; zeros elsewhere */
} fa_params;

/* The K/V head that Q head h reads; the kernels compute it once per CTA. */
#define FA_KV_HEAD(p, h) ((p).kv_group > 1 ? (h) / (p).kv_group : (h))

#endif
