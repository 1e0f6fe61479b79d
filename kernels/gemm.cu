// CUDA body of gemm: out = a @ b through cuBLASLt, accumulated in f32.
//
// cuBLASLt is column-major; a row-major [R, C] matrix is the column-major
// [C, R] matrix with the same bytes. So out = a @ b (row-major) is
// out^T = b^T @ a^T (column-major): cuBLASLt multiplies "A" = b ([N, K],
// leading dimension N) by "B" = a ([K, M], leading dimension K) into
// [N, M] (leading dimension N), with no transposes.
//
// The state (spec `state:`) holds libcublasLt, loaded here rather than
// linked, so that the package imports and runs its CPU bodies on a machine
// without it; the handle; and a plan for each (dtype, M, N, K, alignment)
// seen: the descriptors and the algorithm cuBLASLt's heuristic picked,
// chosen once, as torch and XLA do, and not timed.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "opgen/cuda_status.h"
#include "opgen/shared_library.h"
#include "opgen_ops/gemm.h"

namespace opgen_ops::gemm {

namespace {

// The cuBLASLt functions the body calls, looked up once in the loaded library.
struct Lt {
  decltype(&cublasLtGetStatusName) status_name = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// One shape's descriptors and algorithm; made once, never destroyed (as the state).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t b = nullptr, a = nullptr, out = nullptr;  // cuBLASLt's A, B and C = D
  cublasLtMatmulAlgo_t algo{};
};

// cuBLASLt's type for each dtype of the spec.
template <typename T>
constexpr cudaDataType_t kType = CUDA_R_32F;
template <>
constexpr cudaDataType_t kType<opgen::bf16> = CUDA_R_16BF;
template <>
constexpr cudaDataType_t kType<opgen::f16> = CUDA_R_16F;

// The largest power of two, up to 256, that divides every address: the
// heuristic may pick only algorithms that work at that alignment.
int alignment(const void* a, const void* b, const void* out) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(out) | uintptr_t{256};
  return static_cast<int>(bits & (~bits + 1));
}

}  // namespace

struct CudaState {
  Lt lt;
  cublasLtHandle_t handle = nullptr;
  // Calls on one device may come from several threads: the plans are
  // guarded; a plan, once made, does not move (std::map) and is only read.
  std::mutex mutex;
  std::map<std::tuple<cudaDataType_t, int64_t, int64_t, int64_t, int>, Plan> plans;

  opgen::Status check(cublasStatus_t s, const char* what) const {
    if (s == CUBLAS_STATUS_SUCCESS) return opgen::Status::Ok();
    return opgen::Status::Internal(std::string("gemm: ") + what + ": " +
                                   (lt.status_name ? lt.status_name(s) : "cuBLAS status " + std::to_string(s)));
  }
};

opgen::Status make_cuda_state(int, CudaState*& state) {
  // The library of the cuBLAS these headers declare; already loaded where
  // torch or jaxlib brought it, else found by the loader, else in an
  // nvidia-* wheel beside the installed package (cu12's and cu13's layouts).
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  const std::string wheel12 = "$ORIGIN/../nvidia/cublas/lib/" + soname;
  const std::string wheel13 = "$ORIGIN/../nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + soname;
  opgen::SharedLibrary library;
  if (opgen::Status s = opgen::SharedLibrary::open("gemm: cuBLASLt", {soname.c_str(), wheel12.c_str(), wheel13.c_str()},
                                                   &library);
      !s.ok()) {
    return s;
  }
  auto made = new CudaState();
  Lt& lt = made->lt;
  for (const opgen::Status& s : {library.symbol("cublasLtGetStatusName", lt.status_name),
                                 library.symbol("cublasLtCreate", lt.create),
                                 library.symbol("cublasLtMatmulDescCreate", lt.desc_create),
                                 library.symbol("cublasLtMatrixLayoutCreate", lt.layout_create),
                                 library.symbol("cublasLtMatmulPreferenceCreate", lt.preference_create),
                                 library.symbol("cublasLtMatmulPreferenceSetAttribute", lt.preference_set),
                                 library.symbol("cublasLtMatmulPreferenceDestroy", lt.preference_destroy),
                                 library.symbol("cublasLtMatmulAlgoGetHeuristic", lt.heuristic),
                                 library.symbol("cublasLtMatmul", lt.matmul),
                                 made->check(lt.create ? lt.create(&made->handle) : CUBLAS_STATUS_NOT_INITIALIZED,
                                             "cublasLtCreate")}) {
    if (!s.ok()) {
      delete made;
      return s;
    }
  }
  state = made;
  return opgen::Status::Ok();
}

namespace {

// Sets p.algo to the heuristic's first choice for the workspace's size and
// the pointers' alignment.
opgen::Status choose(const CudaState& state, Plan& p, cublasLtMatmulPreference_t preference, uint64_t workspace_bytes,
                     int align, int64_t M, int64_t N, int64_t K) {
  const Lt& lt = state.lt;
  if (opgen::Status s = state.check(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof(workspace_bytes)),
                                    "the workspace preference");
      !s.ok()) {
    return s;
  }
  const uint32_t align32 = static_cast<uint32_t>(align);
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (opgen::Status s = state.check(lt.preference_set(preference, attribute, &align32, sizeof(align32)),
                                      "an alignment preference");
        !s.ok()) {
      return s;
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (opgen::Status s = state.check(lt.heuristic(state.handle, p.desc, p.b, p.a, p.out, p.out, preference, 1, &result,
                                                 &found),
                                    "cublasLtMatmulAlgoGetHeuristic");
      !s.ok()) {
    return s;
  }
  if (found == 0) {
    return opgen::Status::Internal("gemm: cuBLASLt has no algorithm for M=" + std::to_string(M) + ", N=" +
                                   std::to_string(N) + ", K=" + std::to_string(K) + " at " + std::to_string(align) +
                                   "-byte alignment");
  }
  p.algo = result.algo;
  return opgen::Status::Ok();
}

// The plan of one call's shape, made the first time it is seen: the
// descriptors and the heuristic's first choice for this workspace size.
template <typename T>
opgen::Status plan_for(CudaState& state, const Args<T>& args, uint64_t workspace_bytes, const Plan** out) {
  const int align = alignment(args.a, args.b, args.out);
  const auto key = std::make_tuple(kType<T>, args.M, args.N, args.K, align);
  std::lock_guard<std::mutex> lock(state.mutex);
  if (auto it = state.plans.find(key); it != state.plans.end()) {
    *out = &it->second;
    return opgen::Status::Ok();
  }
  const Lt& lt = state.lt;
  const cudaDataType_t type = kType<T>;
  const uint64_t M = static_cast<uint64_t>(args.M), N = static_cast<uint64_t>(args.N),
                 K = static_cast<uint64_t>(args.K);
  // A refused shape leaves the descriptors it made behind: a refusal is rare
  // and they are small, not worth a cleanup path.
  Plan p;
  if (opgen::Status s = state.check(lt.desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
      !s.ok()) {
    return s;
  }
  if (opgen::Status s = state.check(lt.layout_create(&p.b, type, N, K, args.N), "cublasLtMatrixLayoutCreate (b)");
      !s.ok()) {
    return s;
  }
  if (opgen::Status s = state.check(lt.layout_create(&p.a, type, K, M, args.K), "cublasLtMatrixLayoutCreate (a)");
      !s.ok()) {
    return s;
  }
  if (opgen::Status s = state.check(lt.layout_create(&p.out, type, N, M, args.N), "cublasLtMatrixLayoutCreate (out)");
      !s.ok()) {
    return s;
  }
  cublasLtMatmulPreference_t preference = nullptr;
  if (opgen::Status s = state.check(lt.preference_create(&preference), "cublasLtMatmulPreferenceCreate"); !s.ok()) {
    return s;
  }
  const opgen::Status chosen = choose(state, p, preference, workspace_bytes, align, args.M, args.N, args.K);
  (void)lt.preference_destroy(preference);
  if (!chosen.ok()) return chosen;
  *out = &state.plans.emplace(key, p).first->second;
  return opgen::Status::Ok();
}

}  // namespace

template <typename T>
opgen::Status launch_cuda(cudaStream_t stream, const Args<T>& args) {
  if (args.K == 0) {  // an empty sum: cuBLASLt takes no empty inner dimension
    return opgen::cuda_status(cudaMemsetAsync(args.out, 0, sizeof(T) * args.M * args.N, stream),
                              "gemm: cudaMemsetAsync (K = 0)");
  }
  CudaState& state = *args.cuda_state;
  const uint64_t workspace_bytes = static_cast<uint64_t>(args.lt_workspace_dim(0));
  const Plan* plan = nullptr;
  if (opgen::Status s = plan_for(state, args, workspace_bytes, &plan); !s.ok()) return s;
  const float alpha = 1.0f, beta = 0.0f;
  return state.check(state.lt.matmul(state.handle, plan->desc, &alpha, args.b, plan->b, args.a, plan->a, &beta,
                                     args.out, plan->out, args.out, plan->out, &plan->algo, args.lt_workspace,
                                     workspace_bytes, stream),
                     "cublasLtMatmul");
}

}  // namespace opgen_ops::gemm
