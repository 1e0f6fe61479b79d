// opgen's commands, as main.cc's command line hands them over. Each returns
// the exit status: 0 success, 1 spec (or generation) errors, 2 usage errors.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace opgen::gen {

// `check` and `generate` (the latter with an output folder).
struct GenerateOptions {
  std::vector<std::string> specs;  // files or folders (a folder stands for its *.yaml)
  std::string output_dir;          // empty for `check`
  std::string templates_dir;
  std::string root = ".";          // spec paths in stamps and messages are relative to it
  size_t jobs = 1;
  bool quiet = false;
};
int check_or_generate(const GenerateOptions& o);

// `new OP`: a spec and kernel skeletons that build as they are.
struct NewOptions {
  std::string op;
  std::string specs_dir = "specs";
  std::string kernels_dir = "kernels";
  std::string templates_dir;
};
int new_op(const NewOptions& o);

// `init DIR`: a project of one's own (pyproject.toml, CMakeLists.txt, specs/,
// kernels/ with one example op, tests/) that `pip install .` builds.
struct InitOptions {
  std::string dir;
  std::string name;  // the package; default: DIR's own name, '-' read as '_'
  std::string templates_dir;
};
int init_project(const InitOptions& o);

// A file that `new` and `init` make from one template.
struct TemplateFile {
  std::string template_name;
  std::filesystem::path path;
};
using RenderVars = std::vector<std::pair<std::string, std::string>>;
// The spec and kernel skeletons of op `op`.
std::vector<TemplateFile> new_op_files(const std::string& op, const std::string& specs_dir,
                                       const std::string& kernels_dir);
// Renders each file with `vars` and writes it, after checking that none
// exists (opgen never overwrites a file) and that each folder on the way is
// one or can be made; every check and render comes before the first write,
// so a failure leaves nothing behind. 0 on success, else 1 with the reason
// on stderr. One request to one renderer process (renderer.h).
int write_from_templates(const std::string& templates_dir, const std::vector<TemplateFile>& files,
                         const RenderVars& vars);

// How main reports a usage error (the command line's own and the ones found
// later, such as a spec folder that does not exist): exit status 2.
int usage_error(const std::string& message);

}  // namespace opgen::gen
