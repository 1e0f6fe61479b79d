// Where a kernel body runs. Each binding is written once over a Platform;
// its CPU and CUDA entry points differ only in the Platform they pass:
//
//   platform.run(args)               the op's run_cpu(args) or launch_cuda(stream, args),
//                                    with this device's state where the op has one
//   platform.copy(dst, src, bytes)   the copy behind an output that aliases an input
//   platform.poison(dst, bytes)      fills a refused legacy call's output with kPoisonByte
//
// run() finds the op's body by argument-dependent lookup on its Args type
// (namespace opgen is searched too, for Args<opgen::f16>: it must never
// declare a run_cpu or launch_cuda of its own).
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "opgen/op_state.h"
#include "opgen/status.h"
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
#include "opgen/cuda_status.h"
#endif

namespace opgen {

// What a refused legacy call (api_version 1-3) leaves in its outputs, whose
// failure jaxlib and torch_xla cannot see: every byte 0xFF, which is NaN in
// f16, bf16, f32 and f64, -1 in the signed integers, 255 in u8 and 0xFF (not
// a valid bool, so a refusal shows) in bool.
inline constexpr int kPoisonByte = 0xFF;

// XLA gives an output that aliases an input the input's own buffer, and the
// body updates it in place. Where a runtime does not (torch_xla's custom call
// has no aliasing), the binding first copies the input into the output, so
// the body always finds the input's contents there.
struct Cpu {
  template <typename A>
  Status run(const A& args) const {
    if constexpr (HasCpuState<A>::value) {
      using State = std::remove_pointer_t<decltype(args.cpu_state)>;
      A with_state = args;
      if (Status s = states<State>().get(0, [](State*& made) { return make_cpu_state(made); }, &with_state.cpu_state);
          !s.ok()) {
        return s;
      }
      return run_cpu(with_state);
    } else {
      return run_cpu(args);
    }
  }
  Status copy(void* dst, const void* src, size_t bytes) const {
    if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  void poison(void* dst, size_t bytes) const {
    if (dst != nullptr && bytes > 0) std::memset(dst, kPoisonByte, bytes);
  }
};

#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// Work is enqueued on `stream`: the copy before the body's kernels.
struct Cuda {
  cudaStream_t stream;

  template <typename A>
  Status run(const A& args) const {
    if constexpr (HasCudaState<A>::value) {
      using State = std::remove_pointer_t<decltype(args.cuda_state)>;
      int device = 0;
      if (Status s = cuda_status(cudaGetDevice(&device), "cudaGetDevice (the op's state)"); !s.ok()) return s;
      A with_state = args;
      if (Status s = states<State>().get(device, [device](State*& made) { return make_relaxed(device, made); },
                                         &with_state.cuda_state);
          !s.ok()) {
        return s;
      }
      return launch_cuda(stream, with_state);
    } else {
      return launch_cuda(stream, args);
    }
  }
  Status copy(void* dst, const void* src, size_t bytes) const {
    if (dst == src || bytes == 0) return Status::Ok();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpyAsync (aliased output)");
  }
  void poison(void* dst, size_t bytes) const {
    // Nothing more can be reported if this fails too: the call has failed already.
    if (dst != nullptr && bytes > 0) (void)cudaMemsetAsync(dst, kPoisonByte, bytes, stream);
  }

 private:
  // The first call on a device may come while the caller's stream is being
  // captured (torch.cuda.graph, XLA's command buffers), where this thread's
  // global capture mode refuses cudaMalloc and the library calls a handle's
  // creation makes. make_cuda_state is given no stream and enqueues nothing,
  // so it runs in relaxed mode, which allows them; the caller's mode is
  // restored after.
  template <typename State>
  static Status make_relaxed(int device, State*& made) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (Status s = cuda_status(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
        !s.ok()) {
      return s;
    }
    Status s = make_cuda_state(device, made);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);  // back to the caller's; it cannot fail with a valid mode
    return s;
  }
};
#endif

}  // namespace opgen
