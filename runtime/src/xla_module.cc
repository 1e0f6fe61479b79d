// The extension module <package>._C, the same for every package: a PyCapsule
// for every custom-call target its ops registered (opgen/xla_targets.h),
// grouped by platform and API version, for JAX and torch_xla to register.
// The build compiles it into each package's module with OPGEN_PACKAGE_NAME
// defined (cmake/OpgenAddPackage.cmake).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "opgen/footprint.h"
#include "opgen/opaque.h"
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
    if (!s.ok()) throw py::value_error(s.message());
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
  m.def("legacy_status_available", [] { return opgen::xla_legacy::failure_setter() != nullptr; },
        "Whether legacy (api_version 2, 3) failures can reach XLA as a status in this process.");
}
