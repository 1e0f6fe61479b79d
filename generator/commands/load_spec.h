// One op spec through the first two stages, as every command that reads
// specs runs them: read (reading/read_spec.h), then resolve
// (resolving/resolve.h). The checks across files come after every spec is
// loaded (resolving/check_across_files.h).
#pragma once

#include <optional>
#include <string>

#include "model/diagnostics.h"
#include "model/model.h"

namespace opgen::gen {

// The op of spec file `path` (shown as `display_path`), read and resolved;
// nullopt when any error was reported for it on the way (an unknown key, say,
// which reading reports and goes on after).
std::optional<Op> load_op_spec(const std::string& path, const std::string& display_path, Diagnostics& diags);

}  // namespace opgen::gen
