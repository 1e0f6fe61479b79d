// The CPU rotation of rotary_embedding and of its backward (the rotation by
// the opposite angles), over either op's Args: both name their tensors
// positions, query_out, key_out and cos_sin_cache, with the same symbols and
// attributes. Token by token, head by head, in float (double for f64).
#pragma once

#include <cstdint>

#include "opgen/elementwise.h"

namespace opgen_ops::rotation {

// Rotates the first R dimensions of each of `heads` heads at `x` in place;
// `sign` -1 rotates by the opposite angles.
template <typename T, typename A>
void rotate(T* x, int64_t heads, const T* cos, const T* sin, float sign, const A& args) {
  using opgen::kernels::load;
  using opgen::kernels::store;
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t half = args.R / 2;
  for (int64_t h = 0; h < heads; ++h) {
    T* head = x + h * args.head_size;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t xi = args.is_neox ? i : 2 * i, yi = args.is_neox ? half + i : 2 * i + 1;
      const C c = load(cos, i), s = sign * load(sin, i), a = load(head, xi), b = load(head, yi);
      store(head, xi, a * c - b * s);
      store(head, yi, b * c + a * s);
    }
  }
}

template <typename A>
void rotate_tokens(const A& args, bool inverse) {
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t n = 0; n < args.N; ++n) {
    const int64_t p = args.positions[n];
    if (!args.positions_in_range(p)) continue;  // left as it is, as the specs say
    const auto* cos = args.cos_sin_cache + p * args.R;
    rotate(args.query_out + n * args.query_strides[0], args.QD / args.head_size, cos, cos + args.R / 2, sign, args);
    if (args.key_out) {
      rotate(args.key_out + n * args.key_strides[0], args.KD / args.head_size, cos, cos + args.R / 2, sign, args);
    }
  }
}

}  // namespace opgen_ops::rotation
