// The section readers of the first stage, "read": each turns one part of a
// spec's YAML into the model's entries, checking every key and value where
// it stands. The rules between entries are the next stage's (resolve.h).
// Internal to the reader (read_spec.cc is its entry point).
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "model.h"
#include "spec_file.h"

namespace opgen::gen {

// The spec spelling of a dtype written as numpy, C or torch names it, or "".
std::string dtype_alias(const std::string& s);

// Reads a list of platforms (`platforms:` of the op, or of a workspace, `what`).
bool read_platform_list(SpecFile& f, const YAML::Node& node, const std::string& what, std::vector<Platform>& out);

// `types:`: each type variable with the dtypes it ranges over.
bool read_type_vars(SpecFile& f, const YAML::Node& node, std::vector<TypeVar>& out);

// A dtype as the spec spells it (f32), at `node`; an error naming `what` if not.
std::optional<DType> read_dtype_name(SpecFile& f, const YAML::Node& node, const std::string& what);

// `inputs:` or `outputs:` (`section`), whose entries are each a `role`.
bool read_tensors(SpecFile& f, const YAML::Node& node, const std::string& section, const std::string& role,
                  const std::vector<TypeVar>& type_vars, std::vector<Tensor>& out);

// Which bound `key` is (`min`, `max`, `exclusive_min` or `exclusive_max`, the
// keys of an attribute's and an index input's range), or nullopt after
// reporting that `node` (the entry of `what`) gives the same bound both ways.
struct BoundKey {
  bool lower;      // min or exclusive_min
  bool exclusive;  // exclusive_min or exclusive_max
};
std::optional<BoundKey> read_bound_key(SpecFile& f, const YAML::Node& node, const std::string& key,
                                       const YAML::Node& value, const std::string& what);

// One entry of `attrs:`.
std::optional<Attr> read_attr(SpecFile& f, const std::string& name, const YAML::Node& node,
                              const Location& name_at);

}  // namespace opgen::gen
