// What `opgen generate` writes: one line per file, naming the template that
// renders it and where it goes. Adding a target (a framework, an artifact)
// is one template and one line here.
#pragma once

#include <string>
#include <vector>

namespace opgen::gen {

struct OutputFile {
  std::string template_name;  // under the templates folder
  std::string path;           // relative to the output folder
  // What the package build does with it (opgen_package.cmake lists each kind
  // for cmake/OpgenAddPackage.cmake): "xla" compiles into <package>._C,
  // "torch" into the PyTorch kernels, "body_cpu" and "body_cuda" (which
  // include the hand-written bodies) into the kernels both link, "python" is
  // staged into the package (its path under python/<package>/ kept);
  // "header", "doc" and "build" are read where they are, and "style" (the
  // formatters' settings the generated files keep) by the formatters.
  std::string kind;
};

// The files of the whole package (their context: the package and every op).
std::vector<OutputFile> package_outputs(const std::string& package);

// The files of one op (their context: the package and the op), in the order
// they are rendered.
std::vector<OutputFile> op_outputs(const std::string& package, const std::string& op);

}  // namespace opgen::gen
