// Reads spec files (YAML, through yaml-cpp) into the checked model. Every
// problem is reported to Diagnostics with its file, line and column, and the
// reader goes on after an error so that one run reports all of them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

#include "model/diagnostics.h"
#include "model/model.h"
#include "reading/spec_file.h"

namespace opgen::gen {

// `path` is opened; `display_path` is how the file is named in diagnostics
// and in the stamps of generated files. The op as written, each entry
// checked where it stands, for the resolve stage (resolving/resolve.h);
// nullopt when an entry could not be read. An error that leaves every entry
// readable (an unknown key) is reported but does not fail the op here, so
// that resolving reports its own errors too: the caller fails a spec with any
// error (commands/load_spec.h).
std::optional<Op> read_op_spec(const std::string& path, const std::string& display_path,
                               Diagnostics& diags);

std::optional<Package> read_package_spec(const std::string& path,
                                         const std::string& display_path, Diagnostics& diags);

// The largest spec file opgen reads (a spec is a few kilobytes).
inline constexpr long kMaxSpecBytes = 1 << 20;

// The file name that holds the package settings among the specs.
inline constexpr const char* kPackageSpecFileName = "package.yaml";

// Reads a list of platforms (`platforms:` of the op, or of a workspace, `what`);
// the tensor reader shares it.
bool read_platform_list(SpecFile& f, const YAML::Node& node, const std::string& what, std::vector<Platform>& out);

}  // namespace opgen::gen
