// An op's `backward:` section (as reading/read_backward.h read it) checked:
// against the op as it resolves, and against the backward op itself once
// every spec is read (check_across_files.h).
#pragma once

#include <vector>

#include "model/diagnostics.h"
#include "model/model.h"

namespace opgen::gen {

// Checks the names against `op` (and tells inputs from outputs in `b`):
// every floating-point input gets a gradient or is listed in no_gradient.
bool resolve_backward(const Op& op, Backward& b, Diagnostics& diags);

// Across the package: the backward op exists and its inputs, outputs,
// attributes and platforms fit what the forward declares.
void check_backwards(const std::vector<Op>& ops, Diagnostics& diags);

}  // namespace opgen::gen
