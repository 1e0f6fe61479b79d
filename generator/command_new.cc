// `opgen new OP`: a commented spec and CPU and CUDA kernel skeletons that
// build as they are; it never overwrites a file. Also the writer of every
// file made from a template outside a package (`new`, `init`).
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "commands.h"
#include "names.h"
#include "output_writer.h"
#include "renderer.h"
#include "spec_reader.h"

namespace opgen::gen {

namespace fs = std::filesystem;

std::vector<TemplateFile> new_op_files(const std::string& op, const std::string& specs_dir,
                                       const std::string& kernels_dir) {
  return {
      {"new_op/spec.yaml.j2", fs::path(specs_dir) / (op + ".yaml")},
      {"new_op/kernel.cc.j2", fs::path(kernels_dir) / (op + ".cc")},
      {"new_op/kernel.cu.j2", fs::path(kernels_dir) / (op + ".cu")},
  };
}

int write_from_templates(const std::string& templates_dir, const std::vector<TemplateFile>& files,
                         const RenderVars& vars) {
  for (const auto& file : files) {
    // Any entry counts, a dangling symbolic link too (exists() follows links:
    // the write would replace the link with a file).
    std::error_code ec;
    if (fs::exists(fs::symlink_status(file.path, ec))) {
      std::cerr << "opgen: error: " << file.path.string() << " exists; opgen never overwrites a file\n";
      return 1;
    }
  }
  try {
    Renderer renderer(templates_dir);
    for (const auto& file : files) {
      std::string error;
      const std::string text = renderer.render_one(file.template_name, vars);
      if (write_if_changed(file.path.string(), text, error) == WriteResult::kFailed) {
        std::cerr << "opgen: error: " << error << "\n";
        return 1;
      }
      std::cout << "opgen: wrote " << file.path.string() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "opgen: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

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
  // As `check` refuses it: the op's C++ namespace <package>::<op> would hide the package's.
  if (o.op == package->name) {
    std::cerr << "opgen: error: op '" << o.op << "' would have the package's name (" << package_path
              << "); an op may not be named like its package: choose another name\n";
    return 1;
  }
  const RenderVars vars = {{"name", o.op}, {"package", package->name}};
  if (write_from_templates(o.templates_dir, new_op_files(o.op, o.specs_dir, o.kernels_dir), vars) != 0) return 1;
  const std::string spec = (fs::path(o.specs_dir) / (o.op + ".yaml")).string();
  const std::string cc = (fs::path(o.kernels_dir) / (o.op + ".cc")).string();
  const std::string cu = (fs::path(o.kernels_dir) / (o.op + ".cu")).string();
  std::cout << "opgen: they build and run as they are (out = x * scale). To make them your op, fill in:\n"
            << "  " << spec << "  its inputs, outputs, attributes and constraints (docs/spec.md)\n"
            << "  " << cc << "  run_cpu, the reference every other body is tested against\n"
            << "  " << cu << "  launch_cuda, enqueued on the stream it is given\n"
            << "then rebuild (`pip install --no-build-isolation .` in a project of `opgen init`, else cmake --build):\n"
            << "no other file needs a change. The op is " << package->name << ".jax." << o.op << " and torch.ops."
            << package->torch_namespace << "." << o.op << ". Test its bodies against a float64 reference\n"
            << "on fresh random inputs (the tests/ of `opgen init` show how).\n";
  return 0;
}

}  // namespace opgen::gen
