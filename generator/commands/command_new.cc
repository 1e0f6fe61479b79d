// `opgen new OP`: a commented spec and CPU and CUDA kernel skeletons that
// build as they are; it never overwrites a file. Also the writer of every
// file made from a template outside a package (`new`, `init`).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "commands/commands.h"
#include "model/names.h"
#include "reading/read_spec.h"
#include "rendering/renderer.h"
#include "writing/output_writer.h"

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

namespace {

// Why a file cannot be written at `path`, or "": it must be absent (any
// entry counts, a dangling symbolic link too: exists() follows links, and
// the write would replace the link with a file), and each folder on the way
// must be a folder (or a link to one) or absent in a folder that can take it.
std::string destination_problem(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return path.string() + " exists; opgen never overwrites a file";
  fs::path at;  // the last folder on the way that exists ("" for the working folder)
  for (const fs::path& part : path.parent_path()) {
    const fs::path next = at / part;
    if (::lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT) return "cannot reach " + next.string() + ": " + std::strerror(errno);
      break;  // made by the write, with the folders under it
    }
    if (S_ISLNK(st.st_mode) && ::stat(next.c_str(), &st) != 0) {
      return next.string() + " is a symbolic link to nowhere, in the way of a folder that opgen writes into " +
             "(remove it, or make the folder it names)";
    }
    if (!S_ISDIR(st.st_mode)) {
      return next.string() + " is in the way of a folder that opgen writes into (it is not a folder)";
    }
    at = next;
  }
  const fs::path folder = at.empty() ? fs::path(".") : at;
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return "cannot write into " + folder.string() + ": " + std::strerror(errno);
  }
  return "";
}

}  // namespace

int write_from_templates(const std::string& templates_dir, const std::vector<TemplateFile>& files,
                         const RenderVars& vars) {
  // Every destination is checked, and every file rendered, before the first
  // is written: a refusal leaves nothing behind, and the same command
  // succeeds once its cause is fixed.
  for (const auto& file : files) {
    if (const std::string problem = destination_problem(file.path); !problem.empty()) {
      std::cerr << "opgen: error: " << problem << "\n";
      return 1;
    }
  }
  std::vector<std::string> texts;
  try {
    std::vector<std::string> names;
    for (const auto& file : files) names.push_back(file.template_name);
    texts = Renderer(templates_dir).render_each(names, vars);
  } catch (const std::exception& e) {
    std::cerr << "opgen: error: " << e.what() << "\n";
    return 1;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::string error;
    if (write_if_changed(files[i].path.string(), texts[i], error) == WriteResult::kFailed) {
      std::cerr << "opgen: error: " << error << "\n";
      return 1;
    }
    std::cout << "opgen: wrote " << files[i].path.string() << "\n";
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
