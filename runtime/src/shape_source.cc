#include "opgen/shape_source.h"

#include <limits>
#include <utility>

#include "opgen/shape_check.h"

namespace opgen {

ShapeSource::ShapeSource(const char* op, Framework framework, Device device, std::vector<Input> inputs,
                         std::vector<Attr> attrs, uint64_t requested)
    : op_(op), framework_(framework), device_(device), inputs_(std::move(inputs)), refs_(inputs_.size()), attrs_(std::move(attrs)),
      i32s_(attrs_.size()), requested_(requested) {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Input& in = inputs_[i];
    if (!in.present) continue;
    TensorRef& t = refs_[i];
    t.dtype = dtype_of_name(in.dtype.c_str());
    if (t.dtype == DType::kUnknown) t.foreign = in.dtype.c_str();
    t.rank = in.dims.size();
    t.dims = given_dims(in.dims.data());
    if (!in.strides.empty()) t.strides = in.strides.data();
  }
}

Status ShapeSource::attr(size_t i, const char* name, AttrKind kind, AttrValue* value) {
  if (i >= attrs_.size()) return Status::Internal(std::string(op_) + ": attribute '" + name + "' was not handed over");
  return read_attr(op_, name, kind, attrs_[i], i32s_[i], value);
}

Status ShapeSource::read_attr(const char* op, const char* name, AttrKind kind, const Attr& a,
                              std::vector<int32_t>& narrow, AttrValue* value) {
  const auto wrong = [&](const char* what) {
    return Status::Internal(std::string(op) + ": attribute '" + name + "' was handed over as " + what +
                            "; its spec type takes another");
  };
  switch (kind) {
    case AttrKind::kBool:
      if (a.tag != Attr::kBool) return wrong("a non-bool");
      value->b = a.b;
      break;
    case AttrKind::kI32:
    case AttrKind::kI64:
      if (a.tag != Attr::kInt) return wrong("a non-int");
      value->i = a.i;
      break;
    case AttrKind::kF32:
    case AttrKind::kF64:
      if (a.tag != Attr::kFloat) return wrong("a non-float");
      value->f = a.f;
      break;
    case AttrKind::kEnum:  // by name, or by index (a PyTorch kernel's lowered enum)
      if (a.tag == Attr::kInt) {
        value->i = a.i;
        break;
      }
      if (a.tag != Attr::kStr) return wrong("a non-str");
      value->name = a.s;
      value->by_name = true;
      break;
    case AttrKind::kDtype: {  // by its numpy/torch name: opgen's code, or -1 and the name
      if (a.tag != Attr::kStr) return wrong("a non-str");
      const DType d = dtype_of_name(a.s.c_str());
      value->i = d == DType::kUnknown ? -1 : static_cast<int64_t>(d);
      value->name = a.s;
      break;
    }
    case AttrKind::kI32Array: {
      if (a.tag != Attr::kInts) return wrong("a non-sequence");
      narrow.clear();
      for (size_t k = 0; k < a.ints.size(); ++k) {
        const int64_t v = a.ints[k];
        if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
          return Status::InvalidArgument(std::string(op) + ": attribute '" + name + "' element " +
                                         std::to_string(k) + " = " + std::to_string(v) + " does not fit i32");
        }
        narrow.push_back(static_cast<int32_t>(v));
      }
      value->i32s = Span<const int32_t>(narrow.data(), narrow.size());
      break;
    }
    case AttrKind::kI64Array:
      if (a.tag != Attr::kInts) return wrong("a non-sequence");
      value->i64s = Span<const int64_t>(a.ints.data(), a.ints.size());
      break;
  }
  return Status::Ok();
}

Status ShapeSource::output(size_t, const char* name, const char*, DType dtype, const int64_t* dims, size_t rank,
                           void** data) {
  *data = nullptr;
  outputs_.push_back({name, dtype, true, std::vector<int64_t>(dims, dims + rank)});
  return Status::Ok();
}

void ShapeSource::unrequested(size_t, const char* name, DType dtype) { outputs_.push_back({name, dtype, false, {}}); }

void ShapeSource::workspace_shape(size_t, const char* name, DType dtype, const int64_t* dims, size_t rank) {
  workspaces_.push_back({name, dtype, true, std::vector<int64_t>(dims, dims + rank)});
}

}  // namespace opgen
