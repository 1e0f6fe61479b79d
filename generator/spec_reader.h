// Reads spec files (YAML, through yaml-cpp) into the checked model. Every
// problem is reported to Diagnostics with its file, line and column, and the
// reader goes on after an error so that one run reports all of them.
#pragma once

#include <optional>
#include <string>

#include "diagnostics.h"
#include "model.h"

namespace opgen::gen {

// `path` is opened; `display_path` is how the file is named in diagnostics
// and in the stamps of generated files.
std::optional<Op> read_op_spec(const std::string& path, const std::string& display_path,
                               Diagnostics& diags);

std::optional<Package> read_package_spec(const std::string& path,
                                         const std::string& display_path, Diagnostics& diags);

// The largest spec file opgen reads (a spec is a few kilobytes).
inline constexpr long kMaxSpecBytes = 1 << 20;

// The file name that holds the package settings among the specs.
inline constexpr const char* kPackageSpecFileName = "package.yaml";

}  // namespace opgen::gen
