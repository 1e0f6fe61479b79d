// The readers of `types:`, `inputs:`, `outputs:` and `workspace:` (read_tensors.cc), for
// read_spec.cc: each turns its part of a spec into the model's entries, checking every key
// and value where it stands; the rules between entries are resolve.h's.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

// The spec spelling of a dtype written as numpy, C or torch names it, or "".
std::string dtype_alias(const std::string& s);

// `types:`: each type variable with the dtypes it ranges over.
bool read_type_vars(SpecFile& f, const YAML::Node& node, std::vector<TypeVar>& out);

// A dtype as the spec spells it (f32), at `node`; an error naming `what` if not.
std::optional<DType> read_dtype_name(SpecFile& f, const YAML::Node& node, const std::string& what);

// `inputs:` or `outputs:` (`section`), whose entries are each a `role`.
bool read_tensors(SpecFile& f, const YAML::Node& node, const std::string& section, const std::string& role,
                  const std::vector<TypeVar>& type_vars, std::vector<Tensor>& out);

}  // namespace opgen::gen
