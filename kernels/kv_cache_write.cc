// CPU body of kv_cache_write: cache_out already holds the cache (the binding
// sees to it), so only the new rows are written.
#include <cstring>

#include "opgen_ops/kv_cache_write.h"

namespace opgen_ops::kv_cache_write {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  for (int64_t b = 0; b < args.B; ++b) {
    const int64_t p = args.pos[b];
    if (!args.pos_in_range(p)) continue;  // dropped, as documented in the spec
    std::memcpy(args.cache_out + (b * args.S + p) * args.H, args.values + b * args.H, sizeof(T) * args.H);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::kv_cache_write
