// The reader of `attrs:` entries (read_attrs.cc), for read_spec.cc, and the bound keys
// (`min`, `exclusive_max`, ...) that an attribute's and an index input's range share.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

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
