// The checks between spec files (check_across_files.h).
#include "resolving/check_across_files.h"

#include <map>
#include <string>

#include "model/outputs.h"
#include "resolving/resolve_backward.h"

namespace opgen::gen {

void check_across_files(std::vector<Op>& ops, const std::vector<Package>& packages, bool generating,
                        const std::string& first_spec, Diagnostics& diags) {
  std::map<std::string, std::string> op_owner;
  std::vector<Op> unique;
  for (Op& op : ops) {
    auto [it, inserted] = op_owner.emplace(op.name, op.spec_path);
    if (!inserted) {
      diags.error({op.spec_path, 0, 0}, "op '" + op.name + "' is also defined in " + it->second);
    } else {
      unique.push_back(std::move(op));
    }
  }
  ops = std::move(unique);
  check_backwards(ops, diags);
  // An op's C++ namespace is <package>::<op>: one named like the package would
  // hide the package's namespace inside its own.
  for (const Package& package : packages) {
    for (const Op& op : ops) {
      if (op.name == package.name) {
        diags.error({op.spec_path, 0, 0}, "op '" + op.name + "' has the package's name (" + package.spec_path +
                                              "); rename the op");
      }
    }
  }
  // Two ops must not write the same file (op 'x_opaque' beside op 'x'
  // would). Every op's paths share the package's folder, so where `opgen
  // check` is given no package.yaml any one name tells them apart.
  const std::string package = packages.size() == 1 ? packages.front().name : "package";
  std::map<std::string, const Op*> path_owner;
  for (const Op& op : ops) {
    for (const OutputFile& file : op_outputs(package, op.name)) {
      auto [it, inserted] = path_owner.emplace(file.path, &op);
      if (!inserted) {
        diags.error({op.spec_path, 0, 0}, "op '" + op.name + "' would write the file " + file.path + ", which op '" +
                                              it->second->name + "' (" + it->second->spec_path +
                                              ") also writes; rename one of them");
      }
    }
  }
  if (generating && !diags.has_errors()) {
    if (packages.size() != 1) {
      diags.error({first_spec, 0, 0}, packages.empty() ? "generate needs the package settings (package.yaml) among the specs"
                                                       : "more than one package.yaml given");
    } else if (ops.empty()) {
      diags.error({packages.front().spec_path, 0, 0}, "no op specs given beside the package settings");
    }
  }
}

}  // namespace opgen::gen
