// Stand-in for PyTorch's ATen/cuda/PhiloxCudaState.h (scripts/compare-fa2.sh):
// the dropout RNG state FlashAttention-2 unpacks, same members.
#pragma once
#include <cstdint>

namespace at {
struct PhiloxCudaState {
  union Payload { uint64_t val; int64_t *ptr; };
  Payload seed_{};
  Payload offset_{};
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}  // namespace at
