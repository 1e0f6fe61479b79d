#include "model/outputs.h"

namespace opgen::gen {

const std::vector<FileKind>& file_kinds() {
  static const std::vector<FileKind> kinds = {
      {"xla", "compiled into the module _C"},
      {"torch", "compiled into the PyTorch kernels"},
      {"body_cpu", "the CPU bodies (kernels/<op>.cc) as compiled, into the kernels both link"},
      {"body_cuda", "the CUDA bodies (kernels/<op>.cu) as compiled, into the kernels both link"},
      {"python", "staged into the Python package (the path under python/<package>/ kept)"},
      {"header", "included by the bodies and bindings"},
      {"doc", "documentation"},
      {"build", "read by the build"},
      {"style", "the formatters' settings that the generated files keep"},
  };
  return kinds;
}

OutputFile manifest_output() { return {"manifest.txt.j2", kManifestFileName, "build"}; }

std::vector<OutputFile> package_outputs(const std::string& package) {
  const std::string python = "python/" + package + "/";
  // The Python modules are the largest renders: first, so that render workers
  // (which take the next file as they finish one) start them at once.
  return {
      {"jax.py.j2", python + "jax.py", "python"},
      {"torch.py.j2", python + "torch.py", "python"},
      {"package.cmake.j2", "opgen_package.cmake", "build"},
      {"package_init.py.j2", python + "__init__.py", "python"},
      {"ops_init.py.j2", python + "_ops/__init__.py", "python"},
      {"dtypes.py.j2", python + "_ops/_dtypes.py", "python"},
      {"jax.pyi.j2", python + "jax.pyi", "python"},
      {"torch.pyi.j2", python + "torch.pyi", "python"},
      {"docs_index.md.j2", "docs/README.md", "doc"},
      {"clang-format.j2", ".clang-format", "style"},
      {"ruff.toml.j2", "ruff.toml", "style"},
  };
}

std::vector<OutputFile> op_outputs(const std::string& package, const std::string& op) {
  return {
      {"kernel_interface.h.j2", "include/" + package + "/" + op + ".h", "header"},
      {"rules.h.j2", "include/" + package + "/" + op + "_rules.h", "header"},
      {"body_cpu.cc.j2", "src/" + op + "_body_cpu.cc", "body_cpu"},
      {"body_cuda.cu.j2", "src/" + op + "_body_cuda.cu", "body_cuda"},
      {"xla.cc.j2", "src/" + op + "_xla.cc", "xla"},
      {"torch_ops.cc.j2", "src/" + op + "_torch.cc", "torch"},
      {"op_spec.py.j2", "python/" + package + "/_ops/" + op + ".py", "python"},
      {"op_doc.md.j2", "docs/" + op + ".md", "doc"},
  };
}

}  // namespace opgen::gen
