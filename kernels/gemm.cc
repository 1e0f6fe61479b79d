// CPU body of gemm: out = a @ b, accumulated in f32 (f64 is not a dtype of
// the op). The reference the CUDA body is tested against, and what XLA:CPU
// and torch's CPU kernel run: plain and slow, the loops ordered so that the
// innermost runs along rows of b and out.
#include <algorithm>
#include <vector>

#include "opgen/elementwise.h"
#include "opgen_ops/gemm.h"

namespace opgen_ops::gemm {

template <typename T>
opgen::Status run_cpu(const Args<T>& args) {
  const int64_t M = args.M, N = args.N, K = args.K;
  std::vector<float> row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a_ik = opgen::kernels::load(args.a, i * K + k);
      const T* b_k = args.b + k * N;
      for (int64_t j = 0; j < N; ++j) row[j] += a_ik * opgen::kernels::load(b_k, j);
    }
    for (int64_t j = 0; j < N; ++j) opgen::kernels::store(args.out, i * N + j, row[j]);
  }
  return opgen::Status::Ok();
}

}  // namespace opgen_ops::gemm
