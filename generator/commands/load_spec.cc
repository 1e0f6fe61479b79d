#include "commands/load_spec.h"

#include "reading/read_spec.h"
#include "resolving/resolve.h"

namespace opgen::gen {

std::optional<Op> load_op_spec(const std::string& path, const std::string& display_path, Diagnostics& diags) {
  const int errors_before = diags.error_count();
  std::optional<Op> op = read_op_spec(path, display_path, diags);
  if (!op || !resolve(*op, diags) || diags.error_count() > errors_before) return std::nullopt;
  return op;
}

}  // namespace opgen::gen
