// The eager PyTorch route around torch's dispatcher. A plain eager call (no
// autograd, mode, tensor subclass or compiler in the way: _torch_direct.py
// decides) hands its torch.Tensor objects straight to the op's rules and
// body through the DLPack C exchange API of torch >= 2.10
// (torch.Tensor.__dlpack_c_exchange_api__): each tensor's metadata is read
// by one C call, the outputs come from torch's own allocator, and the body
// runs on torch's current stream of the tensors' device. It reads, checks and
// allocates what the PyTorch kernel (opgen/torch_stable.h) does, without the
// dispatcher's Python argument parsing and boxing, which cost more than a
// native op's whole call. A call the rules refuse is handed back unrun, and
// the caller takes the kernel's route, which raises the usual error.
//
// The package's module _C holds it (xla_module.cc): each op's <op>_xla.cc
// registers its run<Rules, ...> with its targets. The exchange itself is in
// torch_eager.cc, which only _C compiles, where torch's headers have it
// (OPGEN_TORCH_EAGER; else every call takes the kernel's route).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "opgen/binder.h"
#include "opgen/platform.h"
#include "opgen/run_call.h"

namespace opgen::torch_eager {

// Takes torch's exchange API (the pointer in torch.Tensor's
// __dlpack_c_exchange_api__ capsule), the tensor types the route reads
// (PyObject*s: torch.Tensor and torch.nn.Parameter, exactly; a subclass may
// mean anything) and the predicates of a tensor it must not read although its
// type is one of those (PyObject* callables: a negative-bit view, a named
// one, whose memory is not all the tensor means; a tensor with no memory of
// its own, a zero or functional one, it refuses itself). Returns "" when the
// route is in use, else why not (a build
// without it, an API of another major version).
std::string use_api(const void* api, void* const* types, size_t type_count, void* const* unread, size_t unread_count);

// A plain eager call as a Source (torch_eager.cc reads it from the
// torch.Tensor objects and the attributes' dict).
class EagerCall : public Source {
 public:
  // Whether every tensor could be read and all are on one CPU or CUDA device
  // (else the caller takes the kernel's route, whose message says what is wrong).
  virtual bool readable() const = 0;
  virtual int device_index() const = 0;
  // torch's current stream on the tensors' CUDA device; null on the CPU.
  virtual void* stream() const = 0;
};

// Runs an eager call of an op with the rules of `Rules`, on the CPU (where
// kCpu: the op has a CPU body) or CUDA (where kCuda and the build has it).
// `*refused`: nothing ran, because the rules refused the call or it is none
// this route takes (an unreadable tensor, a device the op has no body for),
// and the caller takes the kernel's route; otherwise a failure is the body's
// or the platform's.
template <typename Rules, bool kCpu, bool kCuda>
Status run(EagerCall& source, bool* refused) {
  *refused = true;
  if (!source.readable()) return Status::Ok();
  Binder b(Rules::kName, source);
  Status s;
  if (source.device() == Device::kCpu) {
    if constexpr (!kCpu) return Status::Ok();
    else s = run_call<Rules>(b, Cpu{});
  } else {
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
    if constexpr (!kCuda) return Status::Ok();
    else {
      const CudaDeviceScope scope(source.device_index());
      if (!scope.status().ok()) return scope.status();
      s = run_call<Rules>(b, Cuda{static_cast<cudaStream_t>(source.stream())});
    }
#else
    return Status::Ok();
#endif
  }
  *refused = !b.ok();
  return s;
}

using Runner = Status (*)(EagerCall& source, bool* refused);

// What an op registers for the route: its name, its number of inputs, and its runner.
struct EagerOp {
  const char* name;
  size_t inputs;
  Runner run;
};

// Runs a plain eager call of `op` (PyObject* arguments, as void* here): the
// inputs (a tuple of torch.Tensor or None, in spec order), the attributes (a
// dict by name), the request mask; `grad_enabled`, torch's grad mode, in
// which no input may need a gradient. Returns a new reference to what the
// op's kernel would return (the outputs that alias no input: one tensor, a
// tuple of them, or None), NotImplemented (a new reference) where nothing ran
// and the caller takes another route, or null with a Python error set.
void* call(const EagerOp& op, void* inputs, void* attrs, uint64_t requested, bool grad_enabled);

}  // namespace opgen::torch_eager
