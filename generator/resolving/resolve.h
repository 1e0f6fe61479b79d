// The second stage of reading, "check and resolve": the rules between a
// spec's entries, once each entry has been read. It binds every shape symbol
// to its first required input dimension, gives each aliasing output its
// input's dtype and shape, orders the optional inputs, and refuses name
// clashes and vmap or partitioning declarations the shapes cannot carry.
#pragma once

#include "model/diagnostics.h"
#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

// Resolves `op` in place; false (with the errors reported) when a rule
// fails. `xla_at` is where the spec's `xla:` section stands (the spec itself
// when it has none).
bool resolve(SpecFile& f, Op& op, const Location& xla_at);

}  // namespace opgen::gen
