// A body written before opgen/block_sum.h and opgen/block_max.h were folded
// into opgen/block_reduce.h: it still compiles, and the build says where the
// helpers live now (tests/cpp/CMakeLists.txt's renamed_body_headers).
#include "opgen/block_max.h"
#include "opgen/block_sum.h"

__global__ void row_stats(const float* x, float* out) {
  __shared__ float partial[4];
  const float v = x[blockIdx.x * 128 + threadIdx.x];
  const float total = opgen::kernels::block_sum<128>(v, partial);
  const float top = opgen::kernels::block_max<128>(v, partial);
  if (threadIdx.x == 0) out[blockIdx.x] = total + top;
}
