// An op's `backward:` section: which op of the package computes its
// gradients, what it is given and which input each of its outputs is the
// gradient of. Read and checked against the op here (read and resolve
// stages); checked against the backward op itself once every spec is read.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <vector>

#include "model/diagnostics.h"
#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

// The section as written (names unchecked), or nullopt after reporting.
std::optional<Backward> read_backward(SpecFile& f, const YAML::Node& node);

// Checks the names against `op` (and tells inputs from outputs in `b`):
// every floating-point input gets a gradient or is listed in no_gradient.
bool resolve_backward(SpecFile& f, const Op& op, Backward& b);

// Across the package: the backward op exists and its inputs, outputs,
// attributes and platforms fit what the forward declares.
void check_backwards(const std::vector<Op>& ops, Diagnostics& diags);

}  // namespace opgen::gen
