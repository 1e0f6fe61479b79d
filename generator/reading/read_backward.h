// An op's `backward:` section as written: which op of the package computes
// its gradients, what it is given and which input each of its outputs is the
// gradient of. The names are checked against the op and against the backward
// op later, by the resolve stage (resolving/resolve_backward.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>

#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

// The section as written (names unchecked), or nullopt after reporting.
std::optional<Backward> read_backward(SpecFile& f, const YAML::Node& node);

}  // namespace opgen::gen
