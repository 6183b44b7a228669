// Stand-in for PyTorch's c10/cuda/CUDAException.h, for compiling
// FlashAttention-2's kernels without PyTorch (scripts/compare-fa2.sh).
// Only the host-side launch code uses these; the kernels do not.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define C10_CUDA_CHECK(expr)                                                          \
  do {                                                                                \
    cudaError_t fa2_stub_err_ = (expr);                                               \
    if (fa2_stub_err_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(fa2_stub_err_));    \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
