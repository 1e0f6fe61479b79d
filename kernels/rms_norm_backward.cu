// CUDA body of rms_norm_backward. Where rows are dense, start on 16 bytes and
// fit one block (D <= 256 threads x 4 vectors of 16 bytes), one pass reads
// each row once (fused_pass): per row, sum x^2 and sum (g * w) * x in one
// round of barriers, then grad_x (+ grad_residual), adding grad_out * n and
// grad_out to its columns' sums in shared memory; each of 256 slices of those
// sums comes from one block or, on sm_90 and newer, from a cluster of two.
// Otherwise (a broadcast or strided grad_out or grad_residual, an odd D, a
// wide row) it reads the rows twice:
//  rows (a block per row): the two sums, grad_x, and the row's rstd;
//  column slices (a block per 32 columns x slice): the sums of each column
//  over its slice, the rows spread over the block's 8 row lanes.
// Either way a last pass (a thread per column) adds the slices' sums in order,
// so the result does not depend on scheduling (no atomics). Accumulation in
// f32 (f64 for f64); column_sums holds sums of that type.
#include <cstdint>

#include <cooperative_groups.h>

#include "opgen/cuda_status.h"
#include "opgen/dynamic_shared.h"
#include "opgen/block_reduce.h"
#include "opgen/elementwise.h"
#include "opgen_ops/rms_norm_backward.h"

namespace opgen_ops::rms_norm_backward {
namespace {

constexpr int kThreads = 256;
constexpr int kSlices = 256;  // column_sums' middle dimension (the spec's)
constexpr int kMaxVectorsPerThread = 4;
constexpr int kTileColumns = 32, kRowLanes = 8;

// The rows of slice s: [s * batch / kSlices, (s + 1) * batch / kSlices).
__device__ int64_t slice_start(int64_t batch, int64_t s) {
  return batch / kSlices * s + batch % kSlices * s / kSlices;
}

// column_sums as sums of the compute type C: [2][kSlices][D].
template <typename C, typename T>
__device__ C* column_sums(const Args<T>& args) {
  return reinterpret_cast<C*>(args.column_sums);
}

// The one pass: V elements per vector, K vectors per thread, kPerSlice
// blocks a slice of the column sums. Block b takes rows b, b + kPerSlice *
// kSlices, ... (blocks at work at once read neighbouring rows). The weight and
// the column sums live in shared memory, [V][K * kThreads] so that a warp's
// accesses are consecutive, which leaves registers for four blocks an SM. With
// two blocks a slice (a cluster, sm_90 and newer), block 0 adds block 1's sums
// (distributed shared memory) to its own and writes the slice's: twice the
// blocks at work, the same bytes of sums. Up to 2 vectors a thread, four
// blocks an SM (64 registers a thread); at 4, the shared memory (96 KiB for
// bf16) leaves room for two.
template <typename T, int V, int K, int kPerSlice>
__global__ void __launch_bounds__(kThreads, K > 2 ? 2 : 4) fused_pass(Args<T> args) {
  using opgen::kernels::load_vec;
  using C = typename opgen::kernels::Compute<T>::type;
  constexpr int kColumns = K * kThreads;  // vectors a block covers
  extern __shared__ unsigned char shared_bytes[];
  C* weight = reinterpret_cast<C*>(shared_bytes);  // [V][kColumns], then the two sums likewise
  C* weight_sum = weight + V * kColumns;
  C* bias_sum = weight_sum + V * kColumns;
  __shared__ C partial[2 * (kThreads / 32)];
  const int64_t d = args.D;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int v = threadIdx.x + k * kThreads;
    const int64_t col = int64_t{v} * V;
    C w[V];
#pragma unroll
    for (int j = 0; j < V; ++j) w[j] = C(1);
    if (args.weight && col < d) load_vec<V>(args.weight + col, true, w);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      weight[j * kColumns + v] = w[j];
      weight_sum[j * kColumns + v] = bias_sum[j * kColumns + v] = C(0);
    }
  }
  for (int64_t row = blockIdx.x; row < args.batch; row += int64_t{kPerSlice} * kSlices) {
    C x[K][V], g[K][V];
    C sums[2] = {0, 0};  // x^2, g * w * x
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = threadIdx.x + k * kThreads;
      const int64_t col = int64_t{v} * V;
      if (col < d) {
        load_vec<V>(args.x + row * d + col, true, x[k]);
        load_vec<V>(args.grad_out + row * args.grad_out_strides[0] + col, true, g[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = g[k][j] = C(0);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sums[0] += x[k][j] * x[k][j];
        sums[1] += g[k][j] * weight[j * kColumns + v] * x[k][j];
      }
    }
    opgen::kernels::block_sums<kThreads>(sums, partial);
    const C rstd = C(1) / sqrt(sums[0] / C(d) + C(args.eps));
    const C mean_gn = sums[1] * rstd / C(d);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = threadIdx.x + k * kThreads;
      const int64_t col = int64_t{v} * V;
      if (col >= d) continue;
      C out[V], residual[V] = {};
      if (args.grad_residual) load_vec<V>(args.grad_residual + row * args.grad_residual_strides[0] + col, true, residual);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C n = x[k][j] * rstd;
        out[j] = rstd * (g[k][j] * weight[j * kColumns + v] - n * mean_gn) + residual[j];
        weight_sum[j * kColumns + v] += g[k][j] * n;
        bias_sum[j * kColumns + v] += g[k][j];
      }
      opgen::kernels::store_vec<V>(args.grad_x + row * d + col, true, out);
    }
  }
  const C* other_weight_sum = nullptr;
  const C* other_bias_sum = nullptr;
  if constexpr (kPerSlice == 2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // both blocks' sums are complete
    if (cluster.block_rank() == 1) {
      cluster.sync();  // this block's shared memory stays until block 0 has read it
      return;
    }
    other_weight_sum = cluster.map_shared_rank(weight_sum, 1);
    other_bias_sum = cluster.map_shared_rank(bias_sum, 1);
#else
    __trap();  // launch_fused runs it only on sm_90 and newer
#endif
  }
  C* column = column_sums<C>(args);
  const int64_t slice = blockIdx.x / kPerSlice;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int v = threadIdx.x + k * kThreads;
    const int64_t col = int64_t{v} * V;
    if (col >= d) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int at = j * kColumns + v;
      column[slice * d + col + j] = weight_sum[at] + (other_weight_sum ? other_weight_sum[at] : C(0));
      column[(kSlices + slice) * d + col + j] = bias_sum[at] + (other_bias_sum ? other_bias_sum[at] : C(0));
    }
  }
  if constexpr (kPerSlice == 2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_pass(Args<T> args) {
  using opgen::kernels::load;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C partial[kThreads / 32];
  const int64_t d = args.D;
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const T* x = args.x + row * d;
    const T* g = args.grad_out + row * args.grad_out_strides[0];
    const int64_t gs = args.grad_out_strides[1];
    C squares = 0, dot = 0;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C xi = load(x, i), gw = load(g, i * gs) * (args.weight ? C(load(args.weight, i)) : C(1));
      squares += xi * xi;
      dot += gw * xi;
    }
    squares = opgen::kernels::block_sum<kThreads>(squares, partial);
    dot = opgen::kernels::block_sum<kThreads>(dot, partial);
    const C rstd = C(1) / sqrt(squares / C(d) + C(args.eps));
    const C mean_gn = dot * rstd / C(d);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C n = C(load(x, i)) * rstd;
      const C gw = load(g, i * gs) * (args.weight ? C(load(args.weight, i)) : C(1));
      const C residual = args.grad_residual ? C(load(args.grad_residual, row * args.grad_residual_strides[0] +
                                                                             i * args.grad_residual_strides[1]))
                                            : C(0);
      opgen::kernels::store(args.grad_x + row * d, i, rstd * (gw - n * mean_gn) + residual);
    }
    if (threadIdx.x == 0) args.row_rstd[row] = rstd;
  }
}

template <typename T>
__global__ void __launch_bounds__(kTileColumns* kRowLanes) column_slice_pass(Args<T> args) {
  using opgen::kernels::load;
  using C = typename opgen::kernels::Compute<T>::type;
  __shared__ C weight_part[kRowLanes][kTileColumns], bias_part[kRowLanes][kTileColumns];
  const int64_t i = blockIdx.x * int64_t{kTileColumns} + threadIdx.x;
  const int64_t s = blockIdx.y;
  C weight = 0, bias = 0;
  if (i < args.D) {
    const int64_t end = slice_start(args.batch, s + 1);
    for (int64_t row = slice_start(args.batch, s) + threadIdx.y; row < end; row += kRowLanes) {
      const C gi = load(args.grad_out + row * args.grad_out_strides[0], i * args.grad_out_strides[1]);
      weight += gi * C(load(args.x + row * args.D, i)) * C(args.row_rstd[row]);
      bias += gi;
    }
  }
  weight_part[threadIdx.y][threadIdx.x] = weight;
  bias_part[threadIdx.y][threadIdx.x] = bias;
  __syncthreads();
  if (threadIdx.y == 0 && i < args.D) {
    for (int lane = 1; lane < kRowLanes; ++lane) {
      weight += weight_part[lane][threadIdx.x];
      bias += bias_part[lane][threadIdx.x];
    }
    C* sums = column_sums<C>(args);
    sums[s * args.D + i] = weight;
    sums[(kSlices + s) * args.D + i] = bias;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) column_pass(Args<T> args) {
  using C = typename opgen::kernels::Compute<T>::type;
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= args.D) return;
  const C* sums = column_sums<C>(args);
  C weight = 0, bias = 0;
  for (int s = 0; s < kSlices; ++s) {
    weight += sums[s * args.D + i];
    bias += sums[(kSlices + s) * args.D + i];
  }
  opgen::kernels::store(args.grad_weight, i, weight);
  opgen::kernels::store(args.grad_bias, i, bias);
}

// Two blocks a slice where the GPU has clusters (sm_90 and newer), else one.
template <typename T, int V, int K>
opgen::Status launch_fused(cudaStream_t stream, const Args<T>& args) {
  using C = typename opgen::kernels::Compute<T>::type;
  constexpr int kBytes = 3 * V * K * kThreads * int(sizeof(C));
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return opgen::cuda_status(e, "rms_norm_backward");
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess) {
    return opgen::cuda_status(e, "rms_norm_backward");
  }
  if (major < 9) {
    if (opgen::Status s = opgen::allow_dynamic_shared<fused_pass<T, V, K, 1>, kBytes>("rms_norm_backward fused_pass");
        !s.ok()) {
      return s;
    }
    fused_pass<T, V, K, 1><<<kSlices, kThreads, kBytes, stream>>>(args);
    return opgen::cuda_launch_status("rms_norm_backward fused_pass");
  }
  if (opgen::Status s = opgen::allow_dynamic_shared<fused_pass<T, V, K, 2>, kBytes>("rms_norm_backward fused_pass");
      !s.ok()) {
    return s;
  }
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2 * kSlices);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return opgen::cuda_status(cudaLaunchKernelEx(&config, fused_pass<T, V, K, 2>, args), "rms_norm_backward fused_pass");
}

// The one-pass kernel for args, or nullptr where it cannot run.
template <typename T>
opgen::Status (*fused_for(const Args<T>& args))(cudaStream_t, const Args<T>&) {
  constexpr int kVector = 16 / int(sizeof(T));
  using opgen::kernels::aligned16;
  const bool dense = args.D % kVector == 0 && args.grad_out_strides[1] == 1 &&
                     args.grad_out_strides[0] % kVector == 0 && aligned16(args.x) && aligned16(args.grad_out) &&
                     aligned16(args.grad_x) && (!args.weight || aligned16(args.weight)) &&
                     (!args.grad_residual || (args.grad_residual_strides[1] == 1 &&
                                              args.grad_residual_strides[0] % kVector == 0 &&
                                              aligned16(args.grad_residual)));
  const int64_t vectors = args.D / kVector;
  if (!dense || vectors > int64_t{kThreads} * kMaxVectorsPerThread) return nullptr;
  if (vectors <= kThreads) return launch_fused<T, kVector, 1>;
  if (vectors <= 2 * kThreads) return launch_fused<T, kVector, 2>;
  return launch_fused<T, kVector, kMaxVectorsPerThread>;
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  if (auto fused = fused_for(args)) {
    if (opgen::Status s = fused(stream, args); !s.ok()) return s;
  } else {
    // CUDA grids hold at most 2^31 - 1 blocks in x; the row pass loops over the rest.
    const unsigned rows = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
    if (rows > 0) {
      row_pass<T><<<rows, kThreads, 0, stream>>>(args);
      if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward row_pass"); !s.ok()) return s;
    }
    const dim3 tiles(static_cast<unsigned>((args.D + kTileColumns - 1) / kTileColumns), kSlices);
    column_slice_pass<T><<<tiles, dim3(kTileColumns, kRowLanes), 0, stream>>>(args);
    if (opgen::Status s = opgen::cuda_launch_status("rms_norm_backward column_slice_pass"); !s.ok()) return s;
  }
  const int64_t columns = (args.D + kThreads - 1) / kThreads;
  column_pass<T><<<static_cast<unsigned>(columns), kThreads, 0, stream>>>(args);
  return opgen::cuda_launch_status("rms_norm_backward column_pass");
}

}  // namespace opgen_ops::rms_norm_backward
