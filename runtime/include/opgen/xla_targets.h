// The custom-call targets of a package, for its extension module _C
// (runtime/src/xla_module.cc). Each op's generated <op>_xla.cc defines its
// handlers and registers them, with its descriptor layout and its rules,
// through a static Registration, so that no generated file lists every op:
// adding an op adds files and changes none.
#pragma once

#include <cstddef>
#include <vector>

#include "opgen/opaque.h"
#include "opgen/shape_source.h"
#include "opgen/torch_eager.h"

namespace opgen::xla {

// One custom-call target: a typed-FFI handler (api_version 4) or a legacy shim.
struct Target {
  const char* platform;  // "cuda" or "cpu"
  int api_version;
  const char* name;      // the target name, <package>_<op>_ffi or <package>_<op>_legacy_v<N>
  void* function;
};

// The targets of one op, the layout of its legacy descriptor, its rules
// over a call's shapes alone (for the Python entry points: _C.check), and its
// eager PyTorch route (_C.torch_eager).
struct OpTargets {
  const char* op;
  const opaque::Layout* layout;
  const Target* targets;
  size_t count;
  ShapeChecker check;
  torch_eager::EagerOp eager;
};

// Registers an op's targets while the module loads.
struct Registration {
  explicit Registration(const OpTargets& op);
};

// Every op registered in this module, in the order they registered.
const std::vector<const OpTargets*>& registered();

}  // namespace opgen::xla
