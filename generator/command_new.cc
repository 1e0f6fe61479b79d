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
  const std::string spec = (fs::path(o.specs_dir) / (o.op + ".yaml")).string();
  const std::string cc = (fs::path(o.kernels_dir) / (o.op + ".cc")).string();
  const std::string cu = (fs::path(o.kernels_dir) / (o.op + ".cu")).string();
  std::cout << "opgen: they build and run as they are (out = x * scale). To make them your op, fill in:\n"
            << "  " << spec << "  its inputs, outputs, attributes and constraints (docs/spec.md)\n"
            << "  " << cc << "  run_cpu, the reference every other body is tested against\n"
            << "  " << cu << "  launch_cuda, enqueued on the stream it is given\n"
            << "then rebuild (cmake --build build): no other file needs a change. The op is "
            << package->name << ".jax." << o.op << "\nand torch.ops." << package->torch_namespace << "." << o.op
            << "; tests/python/test_every_op.py tests it from its spec (fake shapes,\n"
            << "opcheck, jit and vmap, refusals, the CUDA body against run_cpu). Add a float64 reference test of your\n"
            << "own, and an example in scripts/run_examples.py to show it at a real size.\n";
  return 0;
}

}  // namespace opgen::gen
