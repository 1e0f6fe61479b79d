// The legacy custom calls (api_version 1, 2, 3) for every op: one shim
// template over the op's generated Rules. XLA hands a legacy call raw
// pointers and the opaque descriptor only, so sizes, dtypes and attributes
// come from the descriptor (decoded with the op's field list, checked first)
// and the buffers are trusted to match it: only the generated wrappers, which
// build the descriptor from checked shapes, may write one. The op's bind()
// checks the rest (attributes, output sizes) as every binding does. A call
// that fails once the output sizes are known fills its outputs with poison
// (platform.h), since jaxlib and torch_xla cannot see its status; one refused
// before leaves them as they are, and its report says which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "opgen/binder.h"
#include "opgen/run_call.h"
#include "opgen/opaque.h"
#include "opgen/platform.h"
#include "opgen/shape_check.h"
#include "opgen/xla_legacy_status.h"

namespace opgen::xla_legacy {

// A legacy call as a Source. `inputs` are the required inputs, then the
// optional ones the descriptor's presence mask names; `outputs` the outputs,
// then one buffer per workspace (the wrappers ask XLA for them as extra
// results, which keeps them in XLA's memory planning).
class LegacySource : public Source {
 public:
  LegacySource(const opaque::Values& values, Device device, size_t inputs, size_t required, size_t outputs,
               const void* const* input_buffers, void* const* output_buffers)
      : values_(values), device_(device), outputs_(outputs), output_buffers_(output_buffers) {
    size_t next = 0;
    for (size_t i = 0; i < inputs && i < kMaxInputs; ++i) {
      const bool given = input_given(i, required, values.present);
      present_[i] = given;
      if (given) refs_[i].data = const_cast<void*>(input_buffers[next++]);
    }
  }
  static constexpr size_t kMaxInputs = 64;

  const TensorRef* input(size_t i) override { return i < kMaxInputs && present_[i] ? &refs_[i] : nullptr; }
  bool symbol(size_t i, int64_t* value) override {
    *value = i < values_.symbol_count ? values_.symbols[i] : -1;
    return true;
  }
  bool batch(int64_t* value) override {
    *value = values_.batch;
    return true;
  }
  bool type_var(size_t i, DType* dtype) override {
    *dtype = i < values_.dtype_count ? static_cast<DType>(values_.dtypes[i]) : DType::kUnknown;
    return true;
  }
  Status attr(size_t i, const char*, AttrKind, AttrValue* value) override {
    *value = values_.attrs[i];
    return Status::Ok();
  }
  Status output(size_t i, const char*, const char*, DType, const int64_t*, size_t, void** data) override {
    *data = output_buffers_[i];
    return Status::Ok();
  }
  Status workspace(size_t i, const char* const*, size_t, size_t, void** data) override {
    *data = output_buffers_[outputs_ + i];
    return Status::Ok();
  }
  bool requested(size_t k) override { return (values_.requested >> k) & 1; }
  Device device() const override { return device_; }

 private:
  const opaque::Values& values_;
  Device device_;
  size_t outputs_;
  void* const* output_buffers_;
  TensorRef refs_[kMaxInputs];
  bool present_[kMaxInputs] = {};
};

// Decodes the descriptor, binds the call with the op's rules and runs its
// body on `platform`; poisons the outputs of a call refused once their sizes
// are known, and says in `*outputs` how many. `cpu_out` is XLA:CPU's result
// pointer (the result itself, or an array of them when there are several);
// nullptr: the results follow the operands in `inputs` (XLA:GPU).
template <typename Rules, typename Platform>
Status run(const Platform& platform, Device device, const void* const* inputs, void* cpu_out, const char* opaque,
           size_t opaque_len, Outputs* outputs) {
  opaque::Values values;
  if (Status s = opaque::decode(opaque, opaque_len, Rules::kDescriptor, Rules::kDescriptorFields,
                                Rules::kFingerprint, Rules::kName, &values);
      !s.ok()) {
    return s;
  }
  if (std::string e = presence_error(Rules::kName, values.present, Rules::kInputs - Rules::kRequiredInputs,
                                     present_count(values.present));
      !e.empty()) {
    return Status::InvalidArgument(e);
  }
  if (std::string e = request_error(Rules::kName, values.requested, Rules::kRequestedOutputs); !e.empty()) {
    return Status::InvalidArgument(e);
  }
  // A call that omits an optional input updated in place, or does not ask
  // for an output on request, has one result fewer.
  const size_t results = result_count(Rules::kOutputAliases, Rules::kOutputRequests, Rules::kOutputs,
                                      Rules::kRequiredInputs, values.present, values.requested);
  outputs->results = results;
  const size_t workspaces = Rules::kWorkspaces[static_cast<size_t>(device)];
  void* const single[] = {cpu_out};
  void* const* buffers = cpu_out == nullptr ? const_cast<void* const*>(inputs + Rules::kRequiredInputs +
                                                                        present_count(values.present))
                         : results + workspaces == 1 ? single
                                                     : static_cast<void* const*>(cpu_out);
  LegacySource source(values, device, Rules::kInputs, Rules::kRequiredInputs, results, inputs, buffers);
  Binder b(Rules::kName, source);
  return run_call<Rules>(b, platform, OnFailure::kPoison, &outputs->poisoned);
}

// The shims, as the extern "C" symbols of each op call them.
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
// XLA:GPU passes the inputs, then the outputs, in one pointer array.
template <typename Rules>
void cuda(cudaStream_t stream, void** buffers, const char* opaque, size_t opaque_len, XlaCustomCallStatus* status,
          const char* target) {
  Outputs outputs;
  const Status s = run<Rules>(Cuda{stream}, Device::kCuda, buffers, nullptr, opaque, opaque_len, &outputs);
  report(status, target, s, outputs);
}
#endif

// XLA:CPU passes one result directly and several as an array of pointers.
template <typename Rules>
void cpu(void* out, const void** in, const char* opaque, size_t opaque_len, XlaCustomCallStatus* status,
         const char* target) {
  Outputs outputs;
  const Status s = run<Rules>(Cpu{}, Device::kCpu, in, out, opaque, opaque_len, &outputs);
  report(status, target, s, outputs);
}

}  // namespace opgen::xla_legacy
