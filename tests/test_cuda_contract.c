/*
** test_cuda_contract.c
** The Driver API's contract, as fatune loads it (dlopen of libcuda.so.1):
** the errors a broken call gets. Run against the fake driver in CI (ctest
** -L fakegpu) and against the real one on a GPU machine, so the two must
** agree:
**  - an unknown function name, and a C++ (mangled) one asked for by its
**    plain name: CUDA_ERROR_NOT_FOUND;
**  - a launch whose parameter buffer is smaller than the kernel's
**    parameters: CUDA_ERROR_INVALID_VALUE;
**  - more dynamic shared memory than the function's limit (48 KB until
**    cuFuncSetAttribute raises it), and a limit above the device's opt-in
**    maximum: CUDA_ERROR_INVALID_VALUE; within them the launch runs;
**  - a block of more than 1024 threads: CUDA_ERROR_INVALID_VALUE;
**  - a cubin for another major architecture: CUDA_ERROR_NO_BINARY_FOR_GPU;
**  - cuTensorMapEncodeTiled (compute capability 9.0 on): each requirement
**    the API documents broken once (alignment of the map and the address,
**    rank, dims, strides, box, element strides, swizzle span, interleave):
**    CUDA_ERROR_INVALID_VALUE, and strides that do not grow with the
**    dimension accepted; and the cuda backend's backend_tmap over it,
**    whose own checks name the argument;
**  - the Hopper GEMM (templates/gemm.lua) through the cuda backend: compiled
**    for sm_90a on an sm_90 device, its CUBIN loads (occupancy: one CTA);
**    on another GPU refused with the reason.
** With --violations (the fake only) a child misuses the driver (a double
** free, a leak at context release, an event used after destruction) and
** the fake must report each on its stderr.
*/
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cuda_api.h"
#include "nvrtc_compile.h"

static const char source[] =
  "extern \"C\" __global__ void add(float *out, const float *in, int n) {\n"
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
  "  if (i < n) out[i] = in[i] + 1.0f;\n"
  "}\n"
  "extern \"C\" __global__ void big(float *out) {\n"
  "  extern __shared__ float s[];\n"
  "  s[threadIdx.x] = (float)threadIdx.x;\n"
  "  __syncthreads();\n"
  "  out[threadIdx.x] = s[threadIdx.x ^ 1];\n"
  "}\n"
  "__global__ void mangled(int *out) { *out = 1; }\n";

static const cudrv_api *api;
static fa_device dev;

#define CU_IS(call, want) do { \
    CUresult rc_ = (call); \
    CHECK(rc_ == (want), "%s gave %d, want %s (%d)", #call, (int)rc_, #want, (int)(want)); \
  } while (0)

static int compile(const char *arch, nvrtc_result *r) {
  nvrtc_compile(source, "add", arch, r);
  CHECK(r->ok, "nvrtc for %s: %s", arch, r->error);
  return r->ok ? 0 : -1;
}

static void test_names(CUmodule m) {
  CUfunction f;
  CU_IS(api->module_fn(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_IS(api->module_fn(&f, m, "mangled"), CUDA_ERROR_NOT_FOUND);
  CU_IS(api->module_fn(&f, m, "add"), CUDA_SUCCESS);
}

static void test_params(CUmodule m, CUdeviceptr out, CUdeviceptr in) {
  CUfunction f;
  if (api->module_fn(&f, m, "add") != CUDA_SUCCESS) return;
  struct { CUdeviceptr out, in; int n; } args = {out, in, 256};
  size_t size = 20;   /* 8 + 8 + 4: the parameter block without tail padding */
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, 0, NULL, NULL, extra), CUDA_SUCCESS);
  CU_IS(api->ctx_sync(), CUDA_SUCCESS);
  /* Both ways at once is refused too (documented). */
  void *kp[] = {&args.out, &args.in, &args.n};
  size = 20;
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, 0, NULL, kp, extra), CUDA_ERROR_INVALID_VALUE);
  CU_IS(api->launch(f, 1, 1, 1, 1025, 1, 1, 0, NULL, kp, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, 0, NULL, kp, NULL), CUDA_SUCCESS);
  CU_IS(api->ctx_sync(), CUDA_SUCCESS);
}

static void test_smem(CUmodule m, CUdeviceptr out) {
  CUfunction f;
  if (api->module_fn(&f, m, "big") != CUDA_SUCCESS) return;
  void *kp[] = {&out};
  const unsigned over = 48 * 1024 + 1024;
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, over, NULL, kp, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_IS(api->fn_set_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         dev.smem_per_block_optin + 1),
        CUDA_ERROR_INVALID_VALUE);
  if (dev.smem_per_block_optin < (int)over) return;   /* no opt-in on this GPU */
  CU_IS(api->fn_set_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)over),
        CUDA_SUCCESS);
  int v = 0;
  CU_IS(api->fn_get_attr(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f), CUDA_SUCCESS);
  CHECK(v == (int)over, "the limit reads back as %d", v);
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, over, NULL, kp, NULL), CUDA_SUCCESS);
  CU_IS(api->launch(f, 1, 1, 1, 256, 1, 1, over + 4, NULL, kp, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_IS(api->ctx_sync(), CUDA_SUCCESS);
}

/* A cubin for a major version other than the device's does not load. */
static void test_arch(void) {
  const char *other = dev.cc_major == 8 ? "sm_90" : "sm_80";
  nvrtc_result r;
  if (compile(other, &r) == 0) {
    CUmodule m = NULL;
    CU_IS(api->module_load(&m, r.cubin), CUDA_ERROR_NO_BINARY_FOR_GPU);
    if (m) api->module_unload(m);
  }
  nvrtc_result_free(&r);
}

/* One tiled tensor map's arguments, as the test varies them. */
typedef struct tmap_args {
  CUtensorMapDataType type;
  cuuint32_t rank;
  CUdeviceptr addr;
  cuuint64_t dim[5], stride[4];
  cuuint32_t box[5], estride[5];
  CUtensorMapInterleave il;
  CUtensorMapSwizzle sw;
  int misalign_map;   /* the CUtensorMap 32 bytes off its 64-byte alignment */
} tmap_args;

static CUresult encode(const tmap_args *a) {
  static _Alignas(64) unsigned char buf[192];
  CUtensorMap *map = (CUtensorMap *)(buf + (a->misalign_map ? 32 : 0));
  return api->tmap_encode_tiled(map, a->type, a->rank, (void *)(uintptr_t)a->addr, a->dim,
                                a->stride, a->box, a->estride, a->il, a->sw,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* A bf16 matrix of 128 rows of 256 elements, boxes of 64 x 64, 128B swizzle. */
static tmap_args good_map(CUdeviceptr base) {
  tmap_args a = {.type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, .rank = 2, .addr = base,
                 .dim = {256, 128}, .stride = {512}, .box = {64, 64}, .estride = {1, 1},
                 .il = CU_TENSOR_MAP_INTERLEAVE_NONE, .sw = CU_TENSOR_MAP_SWIZZLE_128B};
  return a;
}

static void test_tmap_driver(CUdeviceptr base) {
  tmap_args a = good_map(base);
  CU_IS(encode(&a), CUDA_SUCCESS);
  a.sw = CU_TENSOR_MAP_SWIZZLE_NONE, a.box[0] = 256;       /* 512 bytes: fine unswizzled */
  CU_IS(encode(&a), CUDA_SUCCESS);
  a.rank = 4, a.dim[2] = a.dim[3] = 2, a.stride[1] = 512 * 128, a.stride[2] = 2 * 512 * 128;
  a.box[2] = a.box[3] = 1, a.estride[2] = a.estride[3] = 1;
  CU_IS(encode(&a), CUDA_SUCCESS);
  /* Strides that do not grow with the dimension (a packed (tokens, heads,
  ** dim) tensor: the heads' 512 bytes apart inside a token's 1024). */
  a.rank = 3, a.dim[1] = 64, a.dim[2] = 2, a.stride[0] = 1024, a.stride[1] = 512;
  CU_IS(encode(&a), CUDA_SUCCESS);
  struct { const char *what; tmap_args a; } bad[16];
  int n = 0;
#define BAD(text, edit) \
  do { \
    bad[n].what = text, bad[n].a = good_map(base); \
    tmap_args *b = &bad[n].a; \
    edit; \
    n++; \
  } while (0)
  BAD("an address 8 bytes off 16", b->addr += 8);
  BAD("rank 0", b->rank = 0);
  BAD("rank 6", b->rank = 6);
  BAD("a dimension of 0", b->dim[1] = 0);
  BAD("a dimension of 2^32 + 1", b->dim[0] = (1ull << 32) + 1);
  BAD("a stride of 520 bytes", b->stride[0] = 520);
  BAD("a stride of 2^40", b->stride[0] = 1ull << 40);
  BAD("a box dimension of 0", b->box[1] = 0);
  BAD("a box dimension of 257", (b->sw = CU_TENSOR_MAP_SWIZZLE_NONE, b->box[1] = 257));
  BAD("a box row of 8 bytes", b->box[0] = 4);
  BAD("a box row of 256 bytes under 128B swizzle", b->box[0] = 128);
  BAD("a box row of 128 bytes under 64B swizzle", b->sw = CU_TENSOR_MAP_SWIZZLE_64B);
  BAD("an element stride of 9", b->estride[1] = 9);
  BAD("interleave with rank 2", b->il = CU_TENSOR_MAP_INTERLEAVE_16B);
  BAD("interleave 32B at an address 16 bytes off 32",
      (b->rank = 3, b->dim[2] = 1, b->stride[1] = 512 * 128, b->box[2] = 1, b->estride[2] = 1,
       b->il = CU_TENSOR_MAP_INTERLEAVE_32B, b->sw = CU_TENSOR_MAP_SWIZZLE_32B, b->box[0] = 16,
       b->addr += 16));
#undef BAD
  for (int i = 0; i < n; i++) {
    CUresult rc = encode(&bad[i].a);
    CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled with %s gave %d, want "
          "CUDA_ERROR_INVALID_VALUE", bad[i].what, (int)rc);
  }
}

/* backend_tmap on the cuda backend: a map it encodes, and its own messages. */
static void test_tmap_backend(void) {
  fa_backend *b;
  char note[256], err[256];
  /* Probed here: this process uses CUDA already, and the real driver
  ** answers a probe forked from it nothing (CUDA_ERROR_NOT_INITIALIZED). */
  if (backend_open_device("cuda", 0, 1, &b, note, sizeof note, err, sizeof err) != 0) {
    CHECK(0, "backend_open(cuda): %s", err);
    return;
  }
  void *base = NULL;
  if (backend_alloc(b, 1 << 16, &base, err, sizeof err) != 0) {
    CHECK(0, "backend_alloc: %s", err);
    backend_close(b);
    return;
  }
  fa_tmap_desc d = {.base = base, .elem_bytes = 2, .rank = 2, .dims = {256, 128},
                    .strides = {512}, .box = {64, 64}, .swizzle = 128};
  fa_tmap map;
  memset(&map, 0, sizeof map);
  int rc = backend_tmap(b, &d, &map, err, sizeof err);
  CHECK(rc == 0, "backend_tmap: %s", err);
  int nonzero = 0;
  for (int i = 0; i < 16; i++) nonzero |= map.w[i] != 0;
  CHECK(rc != 0 || nonzero, "backend_tmap left the map all zeros");
  static const struct { const char *want; int field, value; } bad[] = {
    {"16-byte aligned", 0, 8}, {"rank 5", 1, 5}, {"swizzle 48", 2, 48},
    {"box dimension 1 is 0", 3, 0}, {"more than the 128-byte swizzle span", 4, 128},
    {"stride of dimension 1 is 8 bytes", 5, 8}, {"elements of 3 bytes", 6, 3}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fa_tmap_desc e = d;
    switch (bad[i].field) {
    case 0: e.base = (const char *)base + bad[i].value; break;
    case 1: e.rank = bad[i].value; break;
    case 2: e.swizzle = bad[i].value; break;
    case 3: e.box[1] = (unsigned)bad[i].value; break;
    case 4: e.box[0] = (unsigned)bad[i].value; break;
    case 5: e.strides[0] = (unsigned long long)bad[i].value; break;
    default: e.elem_bytes = bad[i].value; break;
    }
    err[0] = '\0';
    rc = backend_tmap(b, &e, &map, err, sizeof err);
    CHECK(rc == FA_EINVAL && strstr(err, bad[i].want), "backend_tmap, %s: status %d, '%s'",
          bad[i].want, rc, err);
  }
  backend_free(b, base);
  backend_close(b);
}

/* The GEMM, written for sm_90a, through the backend: on an sm_90 device
** compiled for sm_90a and loaded; on any other, refused with the reason. */
static void test_gemm_backend(void) {
  gen_state *g;
  fa_backend *b;
  gen_kernel k;
  char note[256], err[256];
  if (gen_open(&g, err, sizeof err) != 0) {
    CHECK(0, "gen_open: %s", err);
    return;
  }
  if (gen_render_gemm(g, "dtype=bf16,n=128", &k) != 0) {
    CHECK(0, "gen_render_gemm: %s", gen_errmsg(g));
    gen_close(g);
    return;
  }
  /* Probed here, as in test_tmap_backend. */
  if (backend_open_device("cuda", 0, 1, &b, note, sizeof note, err, sizeof err) == 0) {
    const gen_kernel *kp = &k;
    fa_build bd;
    const int built = backend_compile(b, &kp, 1, 1, &bd, err, sizeof err);
    if (dev.cc_major != 9) {
      /* Another GPU: refused with the reason, not compiled for it. */
      CHECK(built == 0 && !bd.prog && bd.log && strstr(bd.log, "written for sm_90a"),
            "%s on sm_%d%d: %s", k.name, dev.cc_major, dev.cc_minor,
            built ? err : bd.log ? bd.log : "compiled");
    } else {
      CHECK(built == 0 && bd.prog, "%s: %s", k.name, built ? err : bd.log);
    }
    if (built == 0 && bd.prog) {
      gen_launch shape = {.grid = {1, 1, 1}, .block = {(unsigned)k.threads, 1, 1},
                          .smem_bytes = (unsigned)k.smem_bytes};
      int ctas = 0;
      const int rc = backend_occupancy(b, bd.prog, &shape, &ctas, err, sizeof err);
      CHECK(rc == 0 && ctas == 1, "%s: status %d, %d CTAs per SM: %s", k.name, rc, ctas,
            rc ? err : "");
    }
    if (built == 0) backend_build_free(b, &bd);
    backend_close(b);
  } else {
    CHECK(0, "backend_open(cuda): %s", err);
  }
  gen_kernel_free(&k);
  gen_close(g);
}

/* libcuda.so.1's fn into *fp, or _exit(3). */
static void driver_fn(void *fp, size_t size, const char *fn) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void *sym = lib ? dlsym(lib, fn) : NULL;
  if (!sym) _exit(3);
  memcpy(fp, &sym, size);
}

/* In a child, with its stderr into `log`: the misuses the real driver
** takes silently and the fake reports. The child of a process that used
** CUDA calls cuInit first (the fake, like the real driver, answers it
** nothing before that), which the fake reports as well. */
static void misuse(const char *log, const char *cubin) {
  if (!freopen(log, "w", stderr)) _exit(2);
  setvbuf(stderr, NULL, _IONBF, 0);
  CUdevice d;
  CUcontext ctx;
  CUdeviceptr p;
  CUevent e;
  CUmodule m;
  CUfunction f;
  CUresult (*init)(unsigned) = NULL, (*release)(CUdevice) = NULL;
  driver_fn(&init, sizeof init, "cuInit");
  driver_fn(&release, sizeof release, "cuDevicePrimaryCtxRelease_v2");
  if (init(0) || api->device_get(&d, 0) || api->ctx_retain(&ctx, d) || api->ctx_set(ctx) ||
      api->mem_alloc(&p, 64) || api->mem_free(p))
    _exit(3);
  api->mem_free(p);                    /* freed twice */
  if (api->module_load(&m, cubin) || api->module_fn(&f, m, "add") || api->mem_alloc(&p, 4096))
    _exit(4);
  struct { CUdeviceptr out, in; int n; } args = {p, p, 0};
  size_t size = 12;                    /* the n parameter left out */
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  if (api->launch(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra) || api->ctx_sync()) _exit(5);
  tmap_args a = good_map(p);
  a.misalign_map = 1;
  if (api->tmap_encode_tiled && encode(&a)) _exit(6);
  if (api->module_unload(m) || api->event_create(&e, CU_EVENT_DEFAULT)) _exit(7);
  api->event_destroy(e);
  api->event_record(e, NULL);          /* used after destruction */
  release(d);                          /* with 4096 bytes still allocated */
  _exit(0);
}

static void test_violations(const char *cubin) {
  char log[] = "/tmp/fatune-contract-XXXXXX";
  int fd = mkstemp(log);
  if (fd < 0) {
    CHECK(0, "mkstemp failed");
    return;
  }
  close(fd);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) misuse(log, cubin);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the misusing child: status %d", st);
  char text[4096] = "";
  FILE *f = fopen(log, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  text[n] = '\0';
  if (f) fclose(f);
  unlink(log);
  static const char *const want[] = {"a child forked after cuInit", "freed twice",
                                     "parameter buffer of 12 bytes",
                                     "tensor map encoded at an address off 64-byte alignment",
                                     "used after cuEventDestroy",
                                     "allocation(s), 4096 bytes, not freed"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECK(strstr(text, want[i]) != NULL, "the fake did not report '%s'; it said:\n%s", want[i],
          text);
}

int main(int argc, char **argv) {
  char msg[256];
  if (cudrv_device_query(0, &dev, msg, sizeof msg) != 0) check_skip(msg);
  api = cudrv_api_get();
  int fake = strstr(dev.name, "(fakecuda)") != NULL;
  printf("device: %s, sm_%d%d%s\n", dev.name, dev.cc_major, dev.cc_minor,
         fake ? "" : " (a real driver)");
  char arch[16];
  if (argc > 1 && !strcmp(argv[1], "--violations")) {
    if (!fake) check_skip("the misuse reports are the fake driver's own");
    nvrtc_result r;
    snprintf(arch, sizeof arch, "sm_%d%d", dev.cc_major, dev.cc_minor);
    if (compile(arch, &r) == 0) test_violations(r.cubin);
    nvrtc_result_free(&r);
    return check_done("test_cuda_contract --violations");
  }
  snprintf(arch, sizeof arch, "sm_%d%d", dev.cc_major, dev.cc_minor);
  CUdevice d;
  CUcontext ctx;
  CUmodule m = NULL;
  CUdeviceptr out = 0, in = 0;
  nvrtc_result r;
  if (compile(arch, &r) != 0) return check_done("test_cuda_contract");
  CU_IS(api->device_get(&d, 0), CUDA_SUCCESS);
  CU_IS(api->ctx_retain(&ctx, d), CUDA_SUCCESS);
  CU_IS(api->ctx_set(ctx), CUDA_SUCCESS);
  CU_IS(api->module_load(&m, r.cubin), CUDA_SUCCESS);
  CU_IS(api->mem_alloc(&out, 1024 * sizeof(float)), CUDA_SUCCESS);
  CU_IS(api->mem_alloc(&in, 1024 * sizeof(float)), CUDA_SUCCESS);
  if (m && out && in) {
    test_names(m);
    test_params(m, out, in);
    test_smem(m, out);
    test_arch();
    if (dev.cc_major < 9)
      printf("  sm_%d%d: no tensor maps to test\n", dev.cc_major, dev.cc_minor);
    else if (!api->tmap_encode_tiled)
      CHECK(0, "a driver for sm_%d%d without cuTensorMapEncodeTiled", dev.cc_major, dev.cc_minor);
    else
      test_tmap_driver(out);
    CU_IS(api->module_unload(m), CUDA_SUCCESS);
  }
  if (out) CU_IS(api->mem_free(out), CUDA_SUCCESS);
  if (in) CU_IS(api->mem_free(in), CUDA_SUCCESS);
  nvrtc_result_free(&r);
  test_gemm_backend();
  if (dev.cc_major >= 9) test_tmap_backend();
  return check_done("test_cuda_contract");
}
