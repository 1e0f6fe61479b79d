// The CUDA implementation of rms_norm_backward and layer_norm_backward: one
// piece for both, since layer_norm's gradient is rms_norm's of the centred
// row, with one more row sum (kCentred: n = (x - mean) * rstd, and grad_x
// subtracts mean(g)). Each op's .cu calls launch<kCentred>(stream, args) with
// its own Args, whose fields share these names (grad_out, x, weight,
// grad_residual, grad_x, grad_weight, grad_bias, eps, D, batch, the
// workspaces row_rstd, column_sums and, centred, row_mean, and the inputs
// mean and rstd: layer_norm's statistics, nullptr where not given).
//
// A statistic given is read instead of computed: the mean saves the row's
// first round of barriers (and, in the row pass, a read of the row), rstd
// the square root.
//
// Where rows are dense, start on 16 bytes and fit one block (D <= 256 threads
// x 4 vectors of 16 bytes), one pass reads each row once (fused_pass): per
// row, the row sums (centred: the mean first, in a round of barriers of its
// own, so that the variance is a sum of squared deviations, not a difference
// of large sums), then grad_x (+ grad_residual), adding grad_out * n and
// grad_out to its columns' sums in shared memory; each of 256 slices of those
// sums comes from one block or, on sm_90 and newer, from a cluster of two.
// Otherwise (a broadcast or strided grad_out or grad_residual, an odd D, a
// wide row) it reads the rows twice:
//  rows (a block per row): the sums, grad_x, and the row's statistics;
//  column slices (a block per 32 columns x slice): the sums of each column
//  over its slice, the rows spread over the block's 8 row lanes.
// Either way a last pass (a block per 32 columns) adds the slices' sums in a
// fixed order (runs of 32 slices, then the runs), so the result does not
// depend on scheduling (no atomics). Accumulation in
// f32 (f64 for f64); column_sums holds sums of that type.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include <cooperative_groups.h>

#include "opgen/block_reduce.h"
#include "opgen/cuda_status.h"
#include "opgen/dynamic_shared.h"
#include "opgen/elementwise.h"

namespace opgen_kernels::norm_backward {

constexpr int kThreads = 256;
constexpr int kSlices = 256;  // column_sums' middle dimension (each spec's)
constexpr int kMaxVectorsPerThread = 4;
constexpr int kTileColumns = 32, kRowLanes = 8;

// The storage type of the op's tensors.
template <typename A>
using Element = std::remove_const_t<std::remove_pointer_t<decltype(A::x)>>;

template <typename A>
using Compute = opgen::kernels::ComputeOf<decltype(A::x)>;

// The row sums that grad_x needs: sum (x - m)^2, sum g * w * (x - m) and,
// centred, sum g * w.
template <bool kCentred>
inline constexpr int kRowSums = kCentred ? 3 : 2;

// The rows of slice s: [s * batch / kSlices, (s + 1) * batch / kSlices).
__device__ inline int64_t slice_start(int64_t batch, int64_t s) {
  return batch / kSlices * s + batch % kSlices * s / kSlices;
}

// column_sums as sums of the compute type C: [2][kSlices][D].
template <typename A>
__device__ Compute<A>* column_sums(const A& args) {
  return reinterpret_cast<Compute<A>*>(args.column_sums);
}

// The forward's statistics that the op's Args has (layer_norm_backward's
// optional inputs mean and rstd; nullptr where not given); rms_norm_backward
// has none.
template <bool kCentred, typename A>
__device__ auto given_mean(const A& args) {
  if constexpr (kCentred) {
    return args.mean;
  } else {
    return static_cast<const Compute<A>*>(nullptr);
  }
}

template <bool kCentred, typename A>
__device__ auto given_rstd(const A& args) {
  if constexpr (kCentred) {
    return args.rstd;
  } else {
    return static_cast<const Compute<A>*>(nullptr);
  }
}

// The row's mean: given, or the block's sum of its x (every thread's share
// in `x_sum`) over d. Uniform across the block, so the barriers are too.
template <bool kCentred, typename A, typename C>
__device__ C row_mean(const A& args, int64_t row, C x_sum, C* partial) {
  if (const auto* mean = given_mean<kCentred>(args)) return C(mean[row]);
  return opgen::kernels::block_sum<kThreads>(x_sum, partial) / C(args.D);
}

// A row's statistics and the two means grad_x takes, from its sums (rstd
// given, or from the sum of squares).
template <bool kCentred, typename C>
struct RowTerms {
  C rstd, mean_g, mean_gn;
  template <typename S>
  __device__ RowTerms(const C (&sums)[kRowSums<kCentred>], int64_t d, float eps, const S* given_rstd, int64_t row) {
    rstd = given_rstd ? C(given_rstd[row]) : C(1) / sqrt(sums[0] / C(d) + C(eps));
    mean_gn = sums[1] * rstd / C(d);
    mean_g = kCentred ? sums[kRowSums<kCentred> - 1] / C(d) : C(0);
  }
};

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
template <bool kCentred, typename A, int V, int K, int kPerSlice>
__global__ void __launch_bounds__(kThreads, K > 2 ? 2 : 4) fused_pass(A args) {
  using opgen::kernels::load_vec;
  using C = Compute<A>;
  constexpr int kColumns = K * kThreads;  // vectors a block covers
  constexpr int kSums = kRowSums<kCentred>;
  extern __shared__ unsigned char shared_bytes[];
  C* weight = reinterpret_cast<C*>(shared_bytes);  // [V][kColumns], then the two sums likewise
  C* weight_sum = weight + V * kColumns;
  C* bias_sum = weight_sum + V * kColumns;
  __shared__ C partial[kSums * (kThreads / 32)];
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
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t col = int64_t{threadIdx.x + k * kThreads} * V;
      if (col < d) {
        load_vec<V>(args.x + row * d + col, true, x[k]);
        load_vec<V>(args.grad_out + row * args.grad_out_strides[0] + col, true, g[k]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[k][j] = g[k][j] = C(0);
      }
    }
    C mean = 0;
    if constexpr (kCentred) {
      C x_sum = 0;
      if (!args.mean) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
#pragma unroll
          for (int j = 0; j < V; ++j) x_sum += x[k][j];
        }
      }
      mean = row_mean<kCentred>(args, row, x_sum, partial);
    }
    C sums[kSums] = {};
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = threadIdx.x + k * kThreads;
      if (int64_t{v} * V >= d) continue;  // its x are 0, which the mean would shift
#pragma unroll
      for (int j = 0; j < V; ++j) {
        x[k][j] -= mean;
        const C gw = g[k][j] * weight[j * kColumns + v];
        sums[0] += x[k][j] * x[k][j];
        sums[1] += gw * x[k][j];
        if constexpr (kCentred) sums[2] += gw;
      }
    }
    opgen::kernels::block_sums<kThreads>(sums, partial);
    const RowTerms<kCentred, C> terms(sums, d, args.eps, given_rstd<kCentred>(args), row);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int v = threadIdx.x + k * kThreads;
      const int64_t col = int64_t{v} * V;
      if (col >= d) continue;
      C out[V], residual[V] = {};
      if (args.grad_residual) load_vec<V>(args.grad_residual + row * args.grad_residual_strides[0] + col, true, residual);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C n = x[k][j] * terms.rstd;
        out[j] = terms.rstd * (g[k][j] * weight[j * kColumns + v] - terms.mean_g - n * terms.mean_gn) + residual[j];
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
  C* column = column_sums(args);
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

template <bool kCentred, typename A>
__global__ void __launch_bounds__(kThreads) row_pass(A args) {
  using opgen::kernels::load;
  using C = Compute<A>;
  constexpr int kSums = kRowSums<kCentred>;
  __shared__ C partial[kSums * (kThreads / 32)];
  const int64_t d = args.D;
  const int64_t gs = args.grad_out_strides[1];
  for (int64_t row = blockIdx.x; row < args.batch; row += gridDim.x) {
    const auto* x = args.x + row * d;
    const auto* g = args.grad_out + row * args.grad_out_strides[0];
    auto gw = [&](int64_t i) { return C(load(g, i * gs)) * (args.weight ? C(load(args.weight, i)) : C(1)); };
    C mean = 0;
    if constexpr (kCentred) {
      C x_sum = 0;
      if (!args.mean) {
        for (int64_t i = threadIdx.x; i < d; i += kThreads) x_sum += load(x, i);
      }
      mean = row_mean<kCentred>(args, row, x_sum, partial);
    }
    C sums[kSums] = {};
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C xi = C(load(x, i)) - mean, gwi = gw(i);
      sums[0] += xi * xi;
      sums[1] += gwi * xi;
      if constexpr (kCentred) sums[2] += gwi;
    }
    opgen::kernels::block_sums<kThreads>(sums, partial);
    const RowTerms<kCentred, C> terms(sums, d, args.eps, given_rstd<kCentred>(args), row);
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
      const C n = (C(load(x, i)) - mean) * terms.rstd;
      const C residual = args.grad_residual ? C(load(args.grad_residual, row * args.grad_residual_strides[0] +
                                                                             i * args.grad_residual_strides[1]))
                                            : C(0);
      opgen::kernels::store(args.grad_x + row * d, i, terms.rstd * (gw(i) - terms.mean_g - n * terms.mean_gn) + residual);
    }
    if (threadIdx.x == 0) {
      args.row_rstd[row] = terms.rstd;
      if constexpr (kCentred) args.row_mean[row] = mean;
    }
  }
}

template <bool kCentred, typename A>
__global__ void __launch_bounds__(kTileColumns* kRowLanes) column_slice_pass(A args) {
  using opgen::kernels::load;
  using C = Compute<A>;
  __shared__ C weight_part[kRowLanes][kTileColumns], bias_part[kRowLanes][kTileColumns];
  const int64_t i = blockIdx.x * int64_t{kTileColumns} + threadIdx.x;
  const int64_t s = blockIdx.y;
  C weight = 0, bias = 0;
  if (i < args.D) {
    const int64_t end = slice_start(args.batch, s + 1);
    for (int64_t row = slice_start(args.batch, s) + threadIdx.y; row < end; row += kRowLanes) {
      const C gi = load(args.grad_out + row * args.grad_out_strides[0], i * args.grad_out_strides[1]);
      C xi = load(args.x + row * args.D, i);
      if constexpr (kCentred) xi -= C(args.row_mean[row]);
      weight += gi * xi * C(args.row_rstd[row]);
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
    C* sums = column_sums(args);
    sums[s * args.D + i] = weight;
    sums[(kSlices + s) * args.D + i] = bias;
  }
}

// A block per 32 columns: each of its 8 row lanes adds 32 consecutive slices
// in order, then its first lane adds the 8 runs in order. The order is fixed
// (deterministic), and each thread's chain of dependent loads is 32 long, not
// 256 (a thread per column over all slices took 23 µs of layer_norm_backward's
// 207 at [16384, 4096] under ncu: 16 blocks for the whole GPU).
template <typename A>
__global__ void __launch_bounds__(kTileColumns* kRowLanes) column_pass(A args) {
  using C = Compute<A>;
  static_assert(kSlices % kRowLanes == 0, "each row lane adds a run of whole slices");
  constexpr int kRun = kSlices / kRowLanes;
  __shared__ C runs[2][kRowLanes][kTileColumns];
  const int64_t i = blockIdx.x * int64_t{kTileColumns} + threadIdx.x;
  const C* sums = column_sums(args);
  C weight = 0, bias = 0;
  if (i < args.D) {
    for (int s = threadIdx.y * kRun; s < (threadIdx.y + 1) * kRun; ++s) {
      weight += sums[s * args.D + i];
      bias += sums[(kSlices + s) * args.D + i];
    }
  }
  runs[0][threadIdx.y][threadIdx.x] = weight;
  runs[1][threadIdx.y][threadIdx.x] = bias;
  __syncthreads();
  if (threadIdx.y != 0 || i >= args.D) return;
  for (int lane = 1; lane < kRowLanes; ++lane) {
    weight += runs[0][lane][threadIdx.x];
    bias += runs[1][lane][threadIdx.x];
  }
  opgen::kernels::store(args.grad_weight, i, weight);
  opgen::kernels::store(args.grad_bias, i, bias);
}

// Two blocks a slice where the GPU has clusters (sm_90 and newer), else one.
template <bool kCentred, typename A, int V, int K>
opgen::Status launch_fused(cudaStream_t stream, const A& args, const char* op) {
  constexpr int kBytes = 3 * V * K * kThreads * int(sizeof(Compute<A>));
  const std::string kernel = std::string(op) + " fused_pass";
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return opgen::cuda_status(e, op);
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess) {
    return opgen::cuda_status(e, op);
  }
  if (major < 9) {
    if (opgen::Status s = opgen::allow_dynamic_shared<fused_pass<kCentred, A, V, K, 1>, kBytes>(kernel.c_str());
        !s.ok()) {
      return s;
    }
    fused_pass<kCentred, A, V, K, 1><<<kSlices, kThreads, kBytes, stream>>>(args);
    return opgen::cuda_launch_status(kernel.c_str());
  }
  if (opgen::Status s = opgen::allow_dynamic_shared<fused_pass<kCentred, A, V, K, 2>, kBytes>(kernel.c_str());
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
  return opgen::cuda_status(cudaLaunchKernelEx(&config, fused_pass<kCentred, A, V, K, 2>, args), kernel.c_str());
}

// The one-pass kernel for args, or nullptr where it cannot run.
template <bool kCentred, typename A>
opgen::Status (*fused_for(const A& args))(cudaStream_t, const A&, const char*) {
  constexpr int kVector = 16 / int(sizeof(Element<A>));
  using opgen::kernels::aligned16;
  const bool dense = args.D % kVector == 0 && args.grad_out_strides[1] == 1 &&
                     args.grad_out_strides[0] % kVector == 0 && aligned16(args.x) && aligned16(args.grad_out) &&
                     aligned16(args.grad_x) && (!args.weight || aligned16(args.weight)) &&
                     (!args.grad_residual || (args.grad_residual_strides[1] == 1 &&
                                              args.grad_residual_strides[0] % kVector == 0 &&
                                              aligned16(args.grad_residual)));
  const int64_t vectors = args.D / kVector;
  if (!dense || vectors > int64_t{kThreads} * kMaxVectorsPerThread) return nullptr;
  if (vectors <= kThreads) return launch_fused<kCentred, A, kVector, 1>;
  if (vectors <= 2 * kThreads) return launch_fused<kCentred, A, kVector, 2>;
  return launch_fused<kCentred, A, kVector, kMaxVectorsPerThread>;
}

// Enqueues the backward of op (its name, for messages) on stream.
template <bool kCentred, typename A>
opgen::Status launch(cudaStream_t stream, const A& args, const char* op) {
  if (args.column_sums_dim(1) != kSlices) {
    return opgen::Status::InvalidArgument(std::string(op) + ": the spec's column_sums workspace has " +
                                          std::to_string(args.column_sums_dim(1)) + " slices; the CUDA body sums " +
                                          std::to_string(kSlices));
  }
  if (auto fused = fused_for<kCentred>(args)) {
    if (opgen::Status s = fused(stream, args, op); !s.ok()) return s;
  } else {
    // CUDA grids hold at most 2^31 - 1 blocks in x; the row pass loops over the rest.
    const unsigned rows = static_cast<unsigned>(args.batch < 0x7fffffff ? args.batch : 0x7fffffff);
    if (rows > 0) {
      row_pass<kCentred><<<rows, kThreads, 0, stream>>>(args);
      if (opgen::Status s = opgen::cuda_launch_status((std::string(op) + " row_pass").c_str()); !s.ok()) return s;
    }
    const dim3 tiles(static_cast<unsigned>((args.D + kTileColumns - 1) / kTileColumns), kSlices);
    column_slice_pass<kCentred><<<tiles, dim3(kTileColumns, kRowLanes), 0, stream>>>(args);
    if (opgen::Status s = opgen::cuda_launch_status((std::string(op) + " column_slice_pass").c_str()); !s.ok()) {
      return s;
    }
  }
  const int64_t tiles = (args.D + kTileColumns - 1) / kTileColumns;
  column_pass<<<static_cast<unsigned>(tiles), dim3(kTileColumns, kRowLanes), 0, stream>>>(args);
  return opgen::cuda_launch_status((std::string(op) + " column_pass").c_str());
}

}  // namespace opgen_kernels::norm_backward
