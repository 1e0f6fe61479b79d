// Storage types for the element types that C++ has no builtin for. Kernel
// bodies reinterpret them as __half / __nv_bfloat16 (same size and layout).
#pragma once

#include <cstdint>

namespace opgen {

struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "16-bit storage types");

}  // namespace opgen
