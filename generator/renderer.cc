#include "renderer.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "install_prefix.h"
#include "output_writer.h"
#include "outputs.h"
#include "template_data.h"

namespace py = pybind11;

namespace opgen::gen {
namespace {

// The Python that opgen embeds should be the one the user works in, so that
// Jinja2 comes from their virtualenv: OPGEN_PYTHON; else the virtualenv that
// holds this opgen (the wheel installs it as <venv>/lib/pythonX.Y/site-packages/
// opgen/bin/opgen, and Jinja2 with it), whether or not it is active, as when
// a build runs <venv>/bin/pip; else the active virtualenv; else the
// interpreter opgen was built against.
std::string choose_python_executable() {
  namespace fs = std::filesystem;
  if (const char* p = std::getenv("OPGEN_PYTHON"); p && *p) {
    if (!fs::exists(p)) {
      throw std::runtime_error(std::string("OPGEN_PYTHON=") + p + " does not exist");
    }
    return p;
  }
  std::error_code ec;
  // From bin/ of a `cmake --install` prefix up to site-packages/opgen/bin of a wheel.
  fs::path dir = install_prefix();
  for (int up = 0; up < 5 && dir.has_relative_path(); ++up, dir = dir.parent_path()) {
    if (fs::exists(dir / "pyvenv.cfg", ec) && fs::exists(dir / "bin" / "python3", ec)) {
      return (dir / "bin" / "python3").string();
    }
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv) {
    fs::path candidate = fs::path(venv) / "bin" / "python3";
    if (fs::exists(candidate)) return candidate.string();
  }
  return OPGEN_DEFAULT_PYTHON;
}

// The folder of the Python installation that `python` (an interpreter or a
// virtualenv's) runs: a virtualenv's pyvenv.cfg `home`, else the folder of
// the executable it links to.
std::filesystem::path python_home(const std::string& python) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path cfg = fs::path(python).parent_path().parent_path() / "pyvenv.cfg";
  if (std::ifstream in(cfg); in) {
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("home", 0) != 0) continue;
      const size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      const size_t start = line.find_first_not_of(" \t", eq + 1);
      if (start == std::string::npos) continue;
      const fs::path home = fs::weakly_canonical(line.substr(start), ec);
      return ec ? fs::path(line.substr(start)) : home;
    }
  }
  const fs::path real = fs::canonical(python, ec);
  return ec ? fs::path(python).parent_path() : real.parent_path();
}

// opgen links the libpython of the installation it was built with; another
// installation's standard library (another patch release, or one that builds
// other modules into its interpreter) fails in it in obscure ways, so refuse
// it by name.
void check_same_installation(const std::string& python) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path built = fs::weakly_canonical(OPGEN_PYTHON_HOME, ec);
  const fs::path home = python_home(python);
  if (!ec && home != built) {
    throw std::runtime_error("the Python that opgen would embed, " + python + ", belongs to the installation in " +
                             home.string() + ", but this opgen was built with the one in " + built.string() +
                             " and links its libpython. Build opgen (the wheel) with this Python, or set "
                             "OPGEN_PYTHON to a Python of that installation (a virtualenv made from it).");
  }
}

// opgen_render, the Python half of the renderer: beside an installed opgen
// (<prefix>/share/opgen/python), else in the source tree it was built from.
std::string render_python_dir() {
  const std::filesystem::path prefix = install_prefix();
  std::error_code ec;
  if (!prefix.empty() && std::filesystem::is_directory(prefix / "share" / "opgen" / "python" / "opgen_render", ec)) {
    return (prefix / "share" / "opgen" / "python").string();
  }
  return OPGEN_DEFAULT_RENDER_DIR;
}

}  // namespace

// Where compiled templates are kept between runs: $OPGEN_CACHE_DIR (empty:
// no cache), else $XDG_CACHE_HOME/opgen, else ~/.cache/opgen. "" when the
// folder cannot be made: the cache only saves time, so opgen runs without it.
std::string template_cache_dir() {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* explicit_dir = std::getenv("OPGEN_CACHE_DIR")) {
    if (!*explicit_dir) return "";
    dir = explicit_dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    dir = fs::path(xdg) / "opgen";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = fs::path(home) / ".cache" / "opgen";
  } else {
    return "";
  }
  dir /= "jinja-bytecode";
  std::error_code ec;
  fs::create_directories(dir, ec);
  return ec || !fs::is_directory(dir, ec) ? "" : dir.string();
}

struct Renderer::Impl {
  std::unique_ptr<py::scoped_interpreter> interpreter;
  py::object environment;
  py::object plan;  // an opgen_render.plan.Plan
  std::vector<std::string> paths;
};

Renderer::Renderer(const std::string& templates_dir) : impl_(std::make_unique<Impl>()) {
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  config.install_signal_handlers = 0;
  const std::string python = choose_python_executable();
  check_same_installation(python);
  PyStatus status = PyConfig_SetBytesString(&config, &config.executable, python.c_str());
  if (PyStatus_Exception(status)) {
    PyConfig_Clear(&config);
    throw std::runtime_error("cannot configure the embedded Python for " + python);
  }
  impl_->interpreter = std::make_unique<py::scoped_interpreter>(&config, 0, nullptr, false);
  try {
    py::module_::import("sys").attr("path").attr("insert")(0, render_python_dir());
    const std::string cache = template_cache_dir();
    impl_->environment = py::module_::import("opgen_render.environment").attr("make_environment")(
        templates_dir, cache.empty() ? py::object(py::none()) : py::object(py::str(cache)));
  } catch (const py::error_already_set& e) {
    throw std::runtime_error(
        "cannot load Jinja2 and opgen_render in the Python that opgen embeds (" + python + "): " + e.what() +
        "\nInstall Jinja2 there (pip install jinja2), or point OPGEN_PYTHON at a Python "
        "of the same version that has it.");
  }
}

Renderer::~Renderer() {
  // Python objects must go before the interpreter does.
  impl_->plan = py::object();
  impl_->environment = py::object();
}

std::string Renderer::render_one(const std::string& template_name,
                                 const std::vector<std::pair<std::string, std::string>>& values) {
  py::dict context;
  for (const auto& [key, value] : values) context[py::str(key)] = value;
  try {
    return impl_->environment.attr("get_template")(template_name).attr("render")(**context).cast<std::string>();
  } catch (const py::error_already_set& e) {
    throw std::runtime_error("template " + template_name + " failed: " + e.what());
  }
}

void Renderer::plan(const Package& package, const std::vector<Op>& ops) {
  py::list op_facts_list, op_files;
  auto pairs = [](const std::vector<OutputFile>& files) {
    py::list out;
    for (const OutputFile& f : files) out.append(py::make_tuple(f.template_name, f.path, f.kind));
    return out;
  };
  for (const Op& op : ops) {
    op_facts_list.append(op_facts(op, package.name));
    op_files.append(pairs(op_outputs(package.name, op.name)));
  }
  try {
    impl_->plan = py::module_::import("opgen_render.plan").attr("Plan")(
        impl_->environment, package_facts(package), op_facts_list, dtype_facts(), attr_type_facts(),
        pairs(package_outputs(package.name)), op_files, py::make_tuple("manifest.txt.j2", kManifestFileName, "build"));
    impl_->paths = impl_->plan.attr("paths").cast<std::vector<std::string>>();
  } catch (const py::error_already_set& e) {
    throw std::runtime_error(std::string("cannot plan the files: ") + e.what());
  }
}

size_t Renderer::file_count() const { return impl_->paths.size(); }

const std::string& Renderer::path(size_t index) const { return impl_->paths.at(index); }

std::string Renderer::render(size_t index) {
  try {
    return impl_->plan.attr("render")(index).cast<std::string>();
  } catch (const py::error_already_set& e) {
    throw std::runtime_error("template " + impl_->plan.attr("template")(index).cast<std::string>() + " failed for " +
                             impl_->paths.at(index) + ": " + e.what());
  }
}

}  // namespace opgen::gen
