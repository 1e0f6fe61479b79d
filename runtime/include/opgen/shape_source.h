// A call described by its shapes, dtypes and attribute values alone, as a
// Python entry point knows it at trace time (a JAX wrapper, a PyTorch fake
// kernel, a torchax lowering): the op's own rules (`<op>_rules.h`, run by
// opgen::Binder) check it, as they check every call that runs, and record
// what the entry point builds from it: the type variables' dtypes, the
// outputs' and the workspaces' shapes and dtypes, the shape symbols and the
// batch. No buffer exists and none is made; the workspaces of the
// platform it is checked for are sized, and those of another platform are
// not even that (a size only that platform refuses is its kernel's to refuse). The package's module _C exposes it as `_C.check` (xla_module.cc),
// so that a rule and its message are written once, in C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opgen/binder.h"
#include "opgen/dispatch.h"

namespace opgen {

class ShapeSource : public Source {
 public:
  // The framework whose users read the messages (Dialect::kJax or kTorch).
  using Framework = Dialect;

  // One input: absent (an omitted optional input), or a dtype by its
  // numpy/torch name, the sizes and the strides (in elements; none: dense,
  // as every traced JAX array is; a torch fake tensor's are its own, so
  // that its layout meets the rule the real kernel's call meets).
  struct Input {
    bool present = false;
    std::string dtype;
    std::vector<int64_t> dims;
    std::vector<int64_t> strides;
  };
  // One attribute's value as Python holds it: which one of these it is is
  // the tag (the Python side has converted it to the spec's type already).
  struct Attr {
    enum Tag : uint8_t { kBool, kInt, kFloat, kStr, kInts } tag = kInt;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;
    std::vector<int64_t> ints;
  };
  // What the rules made of the call: each output they name, in spec order
  // (those left out with the optional input they update are absent), with
  // its dtype and shape (`made` false: on request and not asked for, no
  // shape); each workspace of the spec, whichever platform allocates it.
  struct Output {
    const char* name;
    DType dtype;
    bool made;
    std::vector<int64_t> dims;
  };

  ShapeSource(const char* op, Framework framework, Device device, std::vector<Input> inputs, std::vector<Attr> attrs,
              uint64_t requested);

  const TensorRef* input(size_t i) override { return i < refs_.size() && inputs_[i].present ? &refs_[i] : nullptr; }
  Status attr(size_t i, const char* name, AttrKind kind, AttrValue* value) override;
  Status output(size_t i, const char* name, const char* declared, DType dtype, const int64_t* dims, size_t rank,
                void** data) override;
  bool requested(size_t k) override { return (requested_ >> k) & 1; }
  void unrequested(size_t i, const char* name, DType dtype) override;
  Device device() const override { return device_; }
  // Sized and checked by the rules, never allocated.
  Status workspace(size_t, const char* const*, size_t, size_t, void** data) override {
    *data = nullptr;
    return Status::Ok();
  }
  void workspace_shape(size_t i, const char* name, DType dtype, const int64_t* dims, size_t rank) override;
  Dialect dialect() const override { return framework_; }

  const std::vector<Output>& outputs() const { return outputs_; }
  const std::vector<Output>& workspaces() const { return workspaces_; }

  // Attribute `name` of `kind` from its value as Python holds it: what every
  // source given Python's values (this one, opgen/torch_eager.h's) hands the
  // rules. An i32[] is narrowed into `narrow`, which the value then points into.
  static Status read_attr(const char* op, const char* name, AttrKind kind, const Attr& a, std::vector<int32_t>& narrow,
                          AttrValue* value);

 private:
  const char* op_;
  Framework framework_;
  Device device_;
  std::vector<Input> inputs_;
  std::vector<TensorRef> refs_;
  std::vector<Attr> attrs_;
  std::vector<std::vector<int32_t>> i32s_;  // i32[] attributes, narrowed
  uint64_t requested_;
  std::vector<Output> outputs_;
  std::vector<Output> workspaces_;
};

// What checking a call gives its caller besides the source's records.
struct ShapeCheck {
  Status status;
  std::vector<std::pair<const char*, DType>> types;     // each type variable's dtype
  std::vector<std::pair<const char*, int64_t>> symbols;  // as bound from the inputs
  std::vector<int64_t> batch;                           // the leading dimensions ('...')
};

// Checks the call `source` describes with the rules of an op: every rule,
// or with `sizes` false (sizes the caller does not know: torch.compile's
// unbacked ones) the dtype rules alone, which then answer the types alone.
template <typename Rules>
ShapeCheck check_shapes(ShapeSource& source, bool sizes = true) {
  ShapeCheck out;
  Binder b(Rules::kName, source);
  const int instantiation = Rules::select(b);
  if (b.ok() && sizes) {
    visit_args(
        typename Rules::Instantiations{}, instantiation, [&](auto& args) {
          Rules::bind(b, args);
          b.allocate();  // as every binding does; a ShapeSource is asked for no memory
        },
        [&] { b.fail(Status::Internal(std::string(Rules::kName) + ": no instantiation selected")); });
  }
  out.status = b.status();
  if (!out.status.ok()) return out;
  for (size_t k = 0; k < b.type_count(); ++k) out.types.emplace_back(b.type_name(k), b.type(k));
  for (size_t i = 0; i < Binder::kMaxSymbols; ++i) {
    const char* name = nullptr;
    int64_t value = 0;
    if (b.symbol(i, &name, &value)) out.symbols.emplace_back(name, value);
  }
  out.batch.assign(b.batch_dims(), b.batch_dims() + b.batch_rank());
  return out;
}

// The check of one op, as the generated `<op>_xla.cc` registers it.
using ShapeChecker = ShapeCheck (*)(ShapeSource&, bool sizes);

}  // namespace opgen
