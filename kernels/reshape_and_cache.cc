// CPU body of reshape_and_cache: the caches' outputs already hold the caches
// (the binding sees to it), so only the new tokens' rows are written, each
// element as cache_dtype.h converts it.
#include "cache_dtype.h"
#include "opgen_ops/reshape_and_cache.h"

namespace opgen_ops::reshape_and_cache {

template <typename T, typename C, typename I>
opgen::Status run_cpu(const Args<T, C, I>& args) {
  for (int64_t t = 0; t < args.N; ++t) {
    const int64_t slot = args.slot_mapping[t];
    if (!args.slot_mapping_in_range(slot)) continue;  // padding (-1), or outside the caches
    for (int64_t h = 0; h < args.KVH; ++h) {
      const int64_t at = (slot * args.KVH + h) * args.Dh;  // [block, row, h] of a [NB, BS, KVH, Dh] cache
      const T* key = args.key + t * args.key_strides[0] + h * args.key_strides[1];
      const T* value = args.value + t * args.value_strides[0] + h * args.value_strides[1];
      for (int64_t d = 0; d < args.Dh; ++d) {
        args.key_cache_out[at + d] = cache_dtype::cached<C>(key[d], args.k_scale);
        args.value_cache_out[at + d] = cache_dtype::cached<C>(value[d], args.v_scale);
      }
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::reshape_and_cache
