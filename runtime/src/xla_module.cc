// The extension module <package>._C, the same for every package: a PyCapsule
// for every custom-call target its ops registered (opgen/xla_targets.h),
// grouped by platform and API version, for JAX and torch_xla to register; and
// each op's rules over a call's shapes alone (`check`, opgen/shape_source.h),
// which every Python entry point runs at trace time; and the eager PyTorch
// route around torch's dispatcher (`torch_eager`, opgen/torch_eager.h).
// The build compiles it into each package's module with OPGEN_PACKAGE_NAME
// defined (cmake/OpgenAddPackage.cmake).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include "opgen/footprint.h"
#include "opgen/opaque.h"
#include "opgen/shape_check.h"
#include "opgen/xla_legacy_status.h"
#include "opgen/xla_targets.h"

#ifndef OPGEN_PACKAGE_NAME
#error "OPGEN_PACKAGE_NAME (the package's name, a string) must be defined"
#endif

namespace py = pybind11;

namespace {

// The name XLA's legacy registries (JAX api_version=0, torch_xla) look for; a
// typed-FFI capsule has none.
constexpr const char* kLegacyCapsuleName = "xla._CUSTOM_CALL_TARGET";

py::dict entry(py::dict parent, py::handle key) {
  if (!parent.contains(key)) parent[key] = py::dict();
  return parent[key];
}

// {platform: {api_version: {target_name: capsule}}}
py::dict targets() {
  py::dict by_platform;
  for (const opgen::xla::OpTargets* op : opgen::xla::registered()) {
    for (size_t i = 0; i < op->count; ++i) {
      const opgen::xla::Target& t = op->targets[i];
      py::dict names = entry(entry(by_platform, py::str(t.platform)), py::int_(t.api_version));
      names[py::str(t.name)] = py::capsule(t.function, t.api_version == 4 ? nullptr : kLegacyCapsuleName);
    }
  }
  return by_platform;
}

// A failure as the Python error of its kind: an input's dtype a TypeError,
// the caller's values a ValueError, the runtime's own a RuntimeError.
[[noreturn]] void raise_status(const opgen::Status& s) {
  switch (s.kind()) {
    case opgen::ErrorKind::kWrongType: throw py::type_error(s.message());
    case opgen::ErrorKind::kInvalidArgument: throw py::value_error(s.message());
    case opgen::ErrorKind::kOk:
    case opgen::ErrorKind::kInternal: break;
  }
  throw std::runtime_error(s.message());
}

py::object attr_value(const opgen::opaque::Field& f, const opgen::AttrValue& a) {
  switch (f.attr) {
    case opgen::AttrKind::kBool: return py::bool_(a.b);
    case opgen::AttrKind::kF32:
    case opgen::AttrKind::kF64: return py::float_(a.f);
    case opgen::AttrKind::kI32Array: return py::cast(std::vector<int32_t>(a.i32s.begin(), a.i32s.end()));
    case opgen::AttrKind::kI64Array: return py::cast(std::vector<int64_t>(a.i64s.begin(), a.i64s.end()));
    case opgen::AttrKind::kI32:
    case opgen::AttrKind::kI64:
    case opgen::AttrKind::kEnum:
    case opgen::AttrKind::kDtype: break;  // an index, a dtype's code
  }
  return py::int_(a.i);
}

// Decodes a legacy descriptor with the C++ decoder that the shims use, so
// that tests can hold the Python encoder to it without running XLA.
py::dict decode_opaque(const std::string& name, const py::bytes& blob) {
  for (const opgen::xla::OpTargets* op : opgen::xla::registered()) {
    if (name != op->op) continue;
    const opgen::opaque::Layout& layout = *op->layout;
    const std::string bytes = blob;
    opgen::opaque::Values v;
    opgen::Status s =
        opgen::opaque::decode(bytes.data(), bytes.size(), layout.fields, layout.count, layout.fingerprint, op->op, &v);
    if (!s.ok()) raise_status(s);
    py::dict out;
    size_t dtype = 0, symbol = 0, attr = 0;
    for (size_t i = 0; i < layout.count; ++i) {
      const opgen::opaque::Field& f = layout.fields[i];
      switch (f.kind) {
        case opgen::opaque::Field::kDtype: out[f.name] = py::int_(v.dtypes[dtype++]); break;
        case opgen::opaque::Field::kPresent: out[f.name] = py::int_(v.present); break;
        case opgen::opaque::Field::kRequested: out[f.name] = py::int_(v.requested); break;
        case opgen::opaque::Field::kBatch: out[f.name] = py::int_(v.batch); break;
        case opgen::opaque::Field::kSymbol: out[f.name] = py::int_(v.symbols[symbol++]); break;
        case opgen::opaque::Field::kAttr: out[f.name] = attr_value(f, v.attrs[attr++]); break;
      }
    }
    return out;
  }
  throw py::value_error("no op named '" + name + "' in " OPGEN_PACKAGE_NAME);
}

// The rule for an input that `op` updates in place (opgen/footprint.h), for
// the Python paths that run such an op on copies and write the result back
// into the caller's tensors: each input as (address, sizes, strides,
// element size) or None; the refusal's message, or None.
py::object in_place_conflict(const std::string& op, const std::vector<std::string>& names,
                             const std::vector<std::optional<std::tuple<uintptr_t, std::vector<int64_t>,
                                                                        std::vector<int64_t>, size_t>>>& inputs,
                             size_t updated) {
  if (names.size() != inputs.size() || updated >= inputs.size()) {
    throw py::value_error("in_place_conflict: one name per input, and `updated` one of them");
  }
  std::vector<const char*> name_ptrs;
  std::vector<opgen::TensorExtent> extents(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    name_ptrs.push_back(names[k].c_str());
    if (!inputs[k]) continue;
    const auto& [address, sizes, strides, element_size] = *inputs[k];
    if (sizes.size() != strides.size()) throw py::value_error("in_place_conflict: one stride per size");
    extents[k] = {reinterpret_cast<const void*>(address), sizes.data(), strides.data(), sizes.size(), element_size};
  }
  const opgen::Status s = opgen::in_place_conflict(op.c_str(), name_ptrs.data(), extents.data(), extents.size(), updated);
  return s.ok() ? py::object(py::none()) : py::object(py::str(s.message()));
}

const opgen::xla::OpTargets& op_named(const std::string& name) {
  static const auto* by_name = [] {
    auto* m = new std::unordered_map<std::string, const opgen::xla::OpTargets*>();
    for (const opgen::xla::OpTargets* op : opgen::xla::registered()) (*m)[op->op] = op;
    return m;
  }();
  auto it = by_name->find(name);
  if (it == by_name->end()) throw py::value_error("no op named '" + name + "' in " OPGEN_PACKAGE_NAME);
  return *it->second;
}

opgen::ShapeSource::Attr attr_of(py::handle v) {
  opgen::ShapeSource::Attr a;
  if (PyBool_Check(v.ptr())) {
    a.tag = a.kBool;
    a.b = v.ptr() == Py_True;
  } else if (PyLong_Check(v.ptr())) {
    a.tag = a.kInt;
    a.i = v.cast<int64_t>();
  } else if (PyFloat_Check(v.ptr())) {
    a.tag = a.kFloat;
    a.f = PyFloat_AS_DOUBLE(v.ptr());
  } else if (PyUnicode_Check(v.ptr())) {
    a.tag = a.kStr;
    a.s = v.cast<std::string>();
  } else {
    a.tag = a.kInts;
    a.ints = v.cast<std::vector<int64_t>>();
  }
  return a;
}

// Checks a call of `op` given by shapes alone with the op's rules: `inputs`,
// per input of the spec, None or (dtype name, sizes[, strides]); `attrs`, per attribute
// of the spec, its value converted to the spec's type (bool, int, float, an
// enum's or a dtype's name, a sequence of ints); `requested`, the request
// mask; `framework` ("jax" or "torch"), whose spelling the messages use;
// `platform` ("cpu" or "cuda"), whose workspaces are checked; `sizes` false:
// the sizes are not known (torch.compile's unbacked ones), and the dtype rules
// alone run. Returns what the rules made of the call (ShapeSource): (symbols
// {name: size}, batch dims, type variables {name: dtype}, outputs {name:
// (shape, dtype)} of those the rules name -- the shape None for one on request
// that the call does not ask for --, each workspace of the spec as (shape,
// dtype)); with `sizes` false, the type variables alone. A refusal raises
// TypeError (an input's dtype) or ValueError with the rules' message.
py::tuple check(const std::string& name, const py::sequence& inputs, const py::sequence& attrs, uint64_t requested,
                const std::string& framework, const std::string& platform, bool sizes) {
  const opgen::xla::OpTargets& op = op_named(name);
  std::vector<opgen::ShapeSource::Input> ins(inputs.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    py::handle x = inputs[i];
    if (x.is_none()) continue;
    auto t = x.cast<py::tuple>();
    ins[i].present = true;
    ins[i].dtype = t[0].cast<std::string>();
    if (!sizes) continue;
    ins[i].dims = t[1].cast<std::vector<int64_t>>();
    if (t.size() > 2) {
      ins[i].strides = t[2].cast<std::vector<int64_t>>();
      if (ins[i].strides.size() != ins[i].dims.size()) throw py::value_error("check: one stride per size");
    }
  }
  std::vector<opgen::ShapeSource::Attr> values;
  values.reserve(attrs.size());
  for (py::handle v : attrs) values.push_back(attr_of(v));
  opgen::ShapeSource source(op.op,
                            framework == "jax" ? opgen::ShapeSource::Framework::kJax
                                               : opgen::ShapeSource::Framework::kTorch,
                            platform == "cuda" ? opgen::Device::kCuda : opgen::Device::kCpu, std::move(ins),
                            std::move(values), requested);
  const opgen::ShapeCheck c = op.check(source, sizes);
  if (!c.status.ok()) raise_status(c.status);
  py::dict symbols, types, outputs;
  for (const auto& [symbol, value] : c.symbols) symbols[py::str(symbol)] = value;
  for (const auto& [var, dtype] : c.types) types[py::str(var)] = py::str(opgen::numpy_name(dtype));
  const auto shaped = [](const opgen::ShapeSource::Output& o) {
    return py::make_tuple(o.made ? py::object(py::tuple(py::cast(o.dims))) : py::object(py::none()),
                          py::str(opgen::numpy_name(o.dtype)));
  };
  for (const auto& o : source.outputs()) outputs[py::str(o.name)] = shaped(o);
  py::tuple workspaces(source.workspaces().size());
  for (size_t i = 0; i < source.workspaces().size(); ++i) workspaces[i] = shaped(source.workspaces()[i]);
  return py::make_tuple(symbols, py::tuple(py::cast(c.batch)), types, outputs, workspaces);
}

// --- the eager PyTorch route (opgen/torch_eager.h) -------------------------------

constexpr const char* kEagerOpCapsule = "opgen.torch_eager.op";

// An op's eager route, for _C.torch_eager.
py::capsule torch_eager_op(const std::string& name) {
  return py::capsule(const_cast<opgen::torch_eager::EagerOp*>(&op_named(name).eager), kEagerOpCapsule);
}

// _C.torch_eager(op, inputs, attrs, requested, grad_enabled): runs a plain eager call of
// the op on torch.Tensor objects (opgen::torch_eager::call). METH_FASTCALL
// rather than pybind11: this is a call's whole host path, and pybind11's
// argument conversion costs a native op's call by itself.
PyObject* torch_eager(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (n != 5 || !PyTuple_Check(args[1]) || !PyDict_Check(args[2]) || !PyBool_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError,
                    "torch_eager(op, inputs: tuple, attrs: dict, requested: int, grad_enabled: bool)");
    return nullptr;
  }
  const auto* op = static_cast<const opgen::torch_eager::EagerOp*>(PyCapsule_GetPointer(args[0], kEagerOpCapsule));
  if (op == nullptr) return nullptr;
  const uint64_t requested = PyLong_AsUnsignedLongLong(args[3]);
  if (requested == static_cast<uint64_t>(-1) && PyErr_Occurred()) return nullptr;
  return static_cast<PyObject*>(opgen::torch_eager::call(*op, args[1], args[2], requested, args[4] == Py_True));
}

PyMethodDef kTorchEager = {"torch_eager", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&torch_eager)),
                           METH_FASTCALL,
                           "torch_eager(op, inputs, attrs, requested, grad_enabled): a plain eager call of the op "
                           "around torch's dispatcher (opgen/torch_eager.h); NotImplemented where it takes another "
                           "route."};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Custom-call targets of " OPGEN_PACKAGE_NAME " (generated by opgen).";
#if defined(OPGEN_WITH_CUDA) && OPGEN_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.attr("opaque_layout_version") = opgen::opaque::kLayoutVersion;
  m.def("targets", &targets, "{platform: {api_version: {target_name: PyCapsule}}} for every custom-call target.");
  m.def("decode_opaque", &decode_opaque, py::arg("op"), py::arg("blob"),
        "Decodes a legacy opaque descriptor with the shims' own decoder (for tests).");
  m.def("in_place_conflict", &in_place_conflict, py::arg("op"), py::arg("names"), py::arg("inputs"),
        py::arg("updated"), "Why `inputs[updated]` cannot be updated in place by `op`, or None.");
  m.def("check", &check, py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("requested"),
        py::arg("framework"), py::arg("platform"), py::arg("sizes") = true, "Checks a call given by shapes alone with the op's C++ rules (opgen/shape_source.h).");
  // The rules' refusals of an attribute value that a PyTorch wrapper meets as
  // it lowers the value for the kernel (an enum to its index, a dtype to a
  // ScalarType), before any kernel could refuse it.
  m.def("enum_unknown", [](const std::string& op, const std::string& attr, const std::string& value,
                           const std::string& values) {
    return opgen::enum_unknown(op.c_str(), attr.c_str(), value.data(), value.size(), values.c_str());
  }, py::arg("op"), py::arg("attr"), py::arg("value"), py::arg("values"),
     "The rules' message for an enum attribute's unknown value.");
  m.def("dtype_attr_refused", [](const std::string& op, const std::string& attr, const std::string& got,
                                 const std::string& allowed) {
    return opgen::dtype_attr_refused(op.c_str(), attr.c_str(), got, allowed);
  }, py::arg("op"), py::arg("attr"), py::arg("got"), py::arg("allowed"),
     "The rules' message for a dtype attribute's value outside its values.");
  m.def("torch_eager_api", [](const py::capsule& api, const py::tuple& types, const py::tuple& unread) {
    std::vector<void*> type_objects, predicates;
    for (py::handle t : types) type_objects.push_back(t.ptr());
    for (py::handle p : unread) predicates.push_back(p.ptr());
    return opgen::torch_eager::use_api(PyCapsule_GetPointer(api.ptr(), "dlpack_exchange_api"), type_objects.data(),
                                       type_objects.size(), predicates.data(), predicates.size());
  }, py::arg("api"), py::arg("types"), py::arg("unread"),
     "Takes torch.Tensor.__dlpack_c_exchange_api__, the tensor types (exactly) the eager route reads and the "
     "predicates of a tensor of those types it must not read: '' when in use, else why not.");
  m.def("torch_eager_op", &torch_eager_op, py::arg("op"), "The op's eager runner, for torch_eager.");
  m.add_object("torch_eager", py::reinterpret_steal<py::object>(PyCFunction_New(&kTorchEager, nullptr)));
  m.def("legacy_status_available", [] { return opgen::xla_legacy::failure_setter() != nullptr; },
        "Whether legacy (api_version 2, 3) failures can reach XLA as a status in this process.");
}
