// Benchmark baseline: the XLA typed-FFI handler a kernel author would write by
// hand for simple_add, around the same CUDA body (kernels/simple_add.cu) that
// the generated handler calls. Only the glue differs: no rank or shape checks,
// N taken from element_count(), the body's status turned into an ffi::Error.
//
// Python: _bench_handwritten.targets() -> {"bench_handwritten_add": capsule},
// registered with jax.ffi.register_ffi_target(name, capsule, platform="CUDA").
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>

#include <cstdint>

#include "opgen/status.h"
#include "opgen_ops/simple_add.h"
#include "xla/ffi/api/ffi.h"

namespace {

namespace ffi = ::xla::ffi;

ffi::Error handwritten_add(cudaStream_t stream, ffi::Buffer<ffi::F32> a,
                           ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::F32> out,
                           float alpha) {
  opgen_ops::simple_add::Args args;
  args.a = a.typed_data();
  args.b = b.typed_data();
  args.out = out->typed_data();
  args.N = static_cast<int64_t>(a.element_count());
  args.alpha = alpha;
  // N == 0 needs no special case: launch_cuda launches nothing then.
  const opgen::Status s = opgen_ops::simple_add::launch_cuda(stream, args);
  if (!s.ok()) return ffi::Error::Internal(s.message());
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    bench_handwritten_add_cuda, handwritten_add,
    ::xla::ffi::Ffi::Bind()
        .Ctx<::xla::ffi::PlatformStream<cudaStream_t>>()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Attr<float>("alpha"),
    {::xla::ffi::Traits::kCmdBufferCompatible});

PYBIND11_MODULE(_bench_handwritten, m) {
  namespace py = pybind11;
  m.doc() = "Hand-written typed-FFI handler of simple_add (benchmark baseline).";
  m.def(
      "targets",
      [] {
        py::dict d;
        // A typed-FFI capsule: no name (the legacy name is only for api_version 0).
        d["bench_handwritten_add"] =
            py::capsule(reinterpret_cast<void*>(&bench_handwritten_add_cuda));
        return d;
      },
      "{target_name: PyCapsule} of the hand-written CUDA typed-FFI handler.");
}
