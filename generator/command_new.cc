// `opgen new OP`: a commented spec and CPU and CUDA kernel skeletons that
// build as they are; it never overwrites a file.
#include <filesystem>
#include <iostream>
#include <optional>

#include "commands.h"
#include "names.h"
#include "output_writer.h"
#include "renderer.h"
#include "spec_reader.h"

namespace opgen::gen {

namespace fs = std::filesystem;

// `opgen new OP`: a spec and kernel skeletons that build as they are.
int new_op(const NewOptions& o) {
  if (!is_snake_identifier(o.op)) {
    std::cerr << "opgen: error: '" << o.op
              << "' is not a valid op name (lower case letters, digits and '_', starting with a "
                 "letter, with no '__' and no trailing '_')\n";
    return 1;
  }
  if (is_reserved_name(o.op)) {
    std::cerr << "opgen: error: '" << o.op
              << "' is not a valid op name: it is reserved in C++, Python or the generated code\n";
    return 1;
  }
  Diagnostics diags;
  const std::string package_path = (fs::path(o.specs_dir) / kPackageSpecFileName).string();
  std::optional<Package> package;
  if (fs::exists(package_path)) package = read_package_spec(package_path, package_path, diags);
  diags.print(std::cerr);
  if (!package) {
    if (!diags.has_errors()) {
      std::cerr << "opgen: error: " << package_path
                << " is missing: 'new' takes the package name from it (see docs/spec.md)\n";
    }
    return 1;
  }
  const std::vector<std::pair<std::string, std::string>> files = {
      {"new_op/spec.yaml.j2", (fs::path(o.specs_dir) / (o.op + ".yaml")).string()},
      {"new_op/kernel.cc.j2", (fs::path(o.kernels_dir) / (o.op + ".cc")).string()},
      {"new_op/kernel.cu.j2", (fs::path(o.kernels_dir) / (o.op + ".cu")).string()},
  };
  for (const auto& [tmpl, path] : files) {
    if (fs::exists(path)) {
      std::cerr << "opgen: error: " << path << " exists; 'new' never overwrites a file\n";
      return 1;
    }
  }
  try {
    Renderer renderer(o.templates_dir);
    for (const auto& [tmpl, path] : files) {
      std::string error;
      const std::string text = renderer.render_one(tmpl, {{"name", o.op}, {"package", package->name}});
      if (write_if_changed(path, text, error) == WriteResult::kFailed) {
        std::cerr << "opgen: error: " << error << "\n";
        return 1;
      }
      std::cout << "opgen: wrote " << path << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "opgen: error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "opgen: next: edit the three files, then rebuild (cmake --build build); the op is "
            << package->name << ".jax." << o.op << " and torch.ops." << package->torch_namespace
            << "." << o.op << "\n";
  return 0;
}

}  // namespace opgen::gen
