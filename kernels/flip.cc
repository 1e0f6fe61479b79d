// CPU body of flip: out[b, i, j] = x[b, i', j'], with i' = M-1-i when the
// rows flip and j' = N-1-j when the columns do.
#include "flip_axes.h"
#include "opgen_ops/flip.h"

namespace opgen_ops::flip {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  const Axes axes = flipped_axes(args.dims);
  for (int64_t b = 0; b < args.batch; ++b) {
    const T* x = args.x + b * args.M * args.N;
    T* out = args.out + b * args.M * args.N;
    for (int64_t i = 0; i < args.M; ++i) {
      const int64_t si = axes.rows ? args.M - 1 - i : i;
      for (int64_t j = 0; j < args.N; ++j) {
        out[i * args.N + j] = x[si * args.N + (axes.cols ? args.N - 1 - j : j)];
      }
    }
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::flip
