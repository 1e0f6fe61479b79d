// The resolve stage, "check and resolve": the rules between a spec's entries,
// once reading (reading/read_spec.h) has read and checked each entry where
// it stands. It binds every shape symbol to its first required input
// dimension, gives each aliasing output its input's dtype and shape, orders
// the optional inputs, refuses name clashes and vmap or partitioning
// declarations the shapes cannot carry, and checks the `backward:` section
// against the op (resolve_backward.h).
#pragma once

#include "model/diagnostics.h"
#include "model/model.h"

namespace opgen::gen {

// Resolves `op` in place; false (with the errors reported, at the op's spec
// file) when a rule fails.
bool resolve(Op& op, Diagnostics& diags);

}  // namespace opgen::gen
