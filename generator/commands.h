// opgen's commands, as main.cc's command line hands them over. Each returns
// the exit status: 0 success, 1 spec (or generation) errors, 2 usage errors.
#pragma once

#include <cstddef>
#include <string>
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

// How main reports a usage error (the command line's own and the ones found
// later, such as a spec folder that does not exist): exit status 2.
int usage_error(const std::string& message);

}  // namespace opgen::gen
