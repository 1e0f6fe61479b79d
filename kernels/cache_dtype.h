// What reshape_and_cache writes into a cache of dtype C (kv_cache_dtype's
// choice): a key or value element divided by the cache's scale, where one is
// given, and rounded to C, once for the CPU body and the CUDA body, so that
// they write the same bits.
#pragma once

#include <type_traits>

#include "opgen/elementwise.h"
#include "quant8.h"

namespace opgen_ops::cache_dtype {

template <typename C>
inline constexpr bool kIsFp8 = std::is_same_v<C, opgen::f8e4m3fn> || std::is_same_v<C, opgen::f8e5m2>;

// x (an element of T) as cache dtype C: x itself where C is T and no scale
// is given (its bits, NaNs' too); else x / *scale in f32 (x where scale is
// nullptr) rounded to the nearest C, ties to even, saturated to C's finite
// range in fp8 (vLLM's scaled conversion: __NV_SATFINITE).
template <typename C, typename T>
OPGEN_HD C cached(T x, const float* scale) {
  if constexpr (std::is_same_v<C, T>) {
    if (scale == nullptr) return x;
  }
  float v = opgen::kernels::load(&x, 0);
  if (scale != nullptr) v = v / *scale;
  if constexpr (kIsFp8<C>) {
    return quant8::quantize<C>(v);
  } else {
    C c[1];
    opgen::kernels::store(c, 0, v);
    return c[0];
  }
}

}  // namespace opgen_ops::cache_dtype
