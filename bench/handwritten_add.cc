// Benchmark baseline: the XLA typed-FFI handlers a kernel author would write by
// hand for simple_add, around the same bodies (kernels/simple_add.cc and .cu)
// that the generated handlers call. Only the glue differs: no rank or shape
// checks, N taken from element_count(), the body's status turned into an
// ffi::Error. The CPU handler is always built; the CUDA one with OPGEN_WITH_CUDA.
//
// Python: _bench_handwritten.targets() -> {platform: {"bench_handwritten_add": capsule}},
// registered with jax.ffi.register_ffi_target(name, capsule, platform=platform).
#include <pybind11/pybind11.h>

#include <cstdint>

#include "opgen/status.h"
#include "opgen_ops/simple_add.h"
#include "xla/ffi/api/ffi.h"

namespace {

namespace ffi = ::xla::ffi;

opgen_ops::simple_add::Args args_of(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                                    ffi::ResultBuffer<ffi::F32> out, float alpha) {
  opgen_ops::simple_add::Args args;
  args.a = a.typed_data();
  args.b = b.typed_data();
  args.out = out->typed_data();
  args.N = static_cast<int64_t>(a.element_count());
  args.alpha = alpha;
  return args;
}

ffi::Error error_of(const opgen::Status& s) {
  return s.ok() ? ffi::Error::Success() : ffi::Error::Internal(s.message());
}

ffi::Error handwritten_add_cpu(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::F32> out,
                               float alpha) {
  return error_of(opgen_ops::simple_add::run_cpu(args_of(a, b, out, alpha)));
}

#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
ffi::Error handwritten_add_cuda(cudaStream_t stream, ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                                ffi::ResultBuffer<ffi::F32> out, float alpha) {
  // N == 0 needs no special case: launch_cuda launches nothing then.
  return error_of(opgen_ops::simple_add::launch_cuda(stream, args_of(a, b, out, alpha)));
}
#endif

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    bench_handwritten_add_cpu, handwritten_add_cpu,
    ::xla::ffi::Ffi::Bind()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Attr<float>("alpha"));

#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    bench_handwritten_add_cuda, handwritten_add_cuda,
    ::xla::ffi::Ffi::Bind()
        .Ctx<::xla::ffi::PlatformStream<cudaStream_t>>()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Arg<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Ret<::xla::ffi::Buffer<::xla::ffi::F32>>()
        .Attr<float>("alpha"),
    {::xla::ffi::Traits::kCmdBufferCompatible});
#endif

PYBIND11_MODULE(_bench_handwritten, m) {
  namespace py = pybind11;
  m.doc() = "Hand-written typed-FFI handlers of simple_add (benchmark baseline).";
  m.def(
      "targets",
      [] {
        // Typed-FFI capsules: no name (the legacy name is only for api_version 0).
        py::dict out;
        py::dict cpu;
        cpu["bench_handwritten_add"] = py::capsule(reinterpret_cast<void*>(&bench_handwritten_add_cpu));
        out["cpu"] = cpu;
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
        py::dict cuda;
        cuda["bench_handwritten_add"] = py::capsule(reinterpret_cast<void*>(&bench_handwritten_add_cuda));
        out["CUDA"] = cuda;
#endif
        return out;
      },
      "{platform: {target_name: PyCapsule}} of the hand-written typed-FFI handlers.");
}
