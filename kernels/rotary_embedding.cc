// CPU body of rotary_embedding, the reference for the CUDA body: token by
// token, head by head, in float.
#include "opgen/elementwise.h"
#include "opgen_ops/rotary_embedding.h"

namespace opgen_ops::rotary_embedding {
namespace {

// Rotates the first R dimensions of each of `heads` heads at `x` in place.
template <typename T, typename I>
void rotate(T* x, int64_t heads, const T* cos, const T* sin, const Args<T, I>& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  const int64_t half = args.R / 2;
  for (int64_t h = 0; h < heads; ++h) {
    T* head = x + h * args.head_size;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t xi = args.is_neox ? i : 2 * i, yi = args.is_neox ? half + i : 2 * i + 1;
      const float c = load(cos, i), s = load(sin, i), a = load(head, xi), b = load(head, yi);
      store(head, xi, a * c - b * s);
      store(head, yi, b * c + a * s);
    }
  }
}

}  // namespace

template <typename T, typename I>
opgen::Status run_cpu(const Args<T, I>& args) {
  for (int64_t n = 0; n < args.N; ++n) {
    const int64_t p = args.positions[n];
    if (!args.positions_in_range(p)) continue;  // left as it is, as the spec says
    const T* cos = args.cos_sin_cache + p * args.R;
    rotate(args.query_out + n * args.query_strides[0], args.QD / args.head_size, cos, cos + args.R / 2, args);
    if (args.key_out) rotate(args.key_out + n * args.key_strides[0], args.KD / args.head_size, cos, cos + args.R / 2, args);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::rotary_embedding
