// `opgen init DIR`: a project of one's own that builds a package of ops with
// `pip install .` (scikit-build-core, find_package(opgen)), with one example
// op (the `new` skeletons) and a test of it; it never overwrites a file.
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "commands/commands.h"
#include "model/names.h"
#include "rendering/renderer.h"

namespace opgen::gen {

namespace fs = std::filesystem;

namespace {

// The example op the project starts with: `opgen new`'s skeleton, `scale`,
// unless the package is named so (an op named like its package would hide
// the package's C++ namespace): the package name is the user's lasting
// choice, the example op a placeholder.
std::string example_op(const std::string& package) { return package == "scale" ? "scale_op" : "scale"; }

// Why `name` cannot be the package (and torch namespace) of a new project, or "".
std::string package_name_problem(const std::string& name) {
  if (!is_snake_identifier(name)) {
    return "'" + name + "' is not a valid package name (lower case letters, digits and '_', starting with a "
           "letter, with no '__' and no trailing '_'); name it with --name";
  }
  if (is_reserved_name(name)) return "package name '" + name + "' is reserved in C++, Python or the generated code";
  if (const std::string hidden = shadowed_module(name); !hidden.empty()) {
    return "package name '" + name + "' would hide " + hidden + " from every import; choose another with --name";
  }
  if (is_reserved_torch_namespace(name)) return "package name '" + name + "' is a torch namespace of PyTorch's own";
  return "";
}

// `path` as one word of a POSIX shell command.
std::string shell_quoted(const std::string& path) {
  if (path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./+=:,@%") ==
      std::string::npos) {
    return path;
  }
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int init_project(const InitOptions& o) {
  std::error_code ec;
  const fs::path dir = fs::absolute(o.dir, ec).lexically_normal();
  // The folder's own name (a trailing '/' leaves an empty filename).
  std::string name = o.name;
  if (name.empty()) {
    name = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
    for (char& c : name) c = c == '-' ? '_' : c;
  }
  if (const std::string problem = package_name_problem(name); !problem.empty()) {
    std::cerr << "opgen: error: " << problem << "\n";
    return 1;
  }
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) {
    std::cerr << "opgen: error: " << o.dir
              << (fs::is_directory(dir, ec) ? " exists and is not an empty folder" : " exists and is not a folder")
              << "; 'init' writes a project into a new or empty folder and never overwrites a file\n";
    return 1;
  }
  const std::string op = example_op(name);
  const RenderVars vars = {{"name", op}, {"package", name}, {"version", OPGEN_VERSION}, {"min_jaxlib", OPGEN_MIN_JAXLIB}};
  const fs::path shown = o.dir;  // paths as the user gave them, in messages
  // One request: the renderer starts once.
  std::vector<TemplateFile> files = {
      {"init_project/pyproject.toml.j2", shown / "pyproject.toml"},
      {"init_project/CMakeLists.txt.j2", shown / "CMakeLists.txt"},
      {"init_project/README.md.j2", shown / "README.md"},
      {"init_project/gitignore.j2", shown / ".gitignore"},
      {"init_project/package.yaml.j2", shown / "specs" / "package.yaml"},
      {"init_project/test_op.py.j2", shown / "tests" / ("test_" + op + ".py")},
  };
  for (TemplateFile& f : new_op_files(op, (shown / "specs").string(), (shown / "kernels").string())) {
    files.push_back(std::move(f));
  }
  if (write_from_templates(o.templates_dir, files, vars) != 0) return 1;
  std::cout << "opgen: " << o.dir << " holds the package " << name << " with one op, " << op
            << " (out = x * scale). Build, install and test it:\n"
            << "  cd " << shell_quoted(o.dir) << " && pip install --no-build-isolation . && pytest tests\n"
            << "(--no-build-isolation: the build uses this environment's jaxlib, and its torch, if any, for the\n"
            << "PyTorch kernels; rebuilds recompile only what changed). Add an op there with `opgen new OP`.\n";
  return 0;
}

}  // namespace opgen::gen
