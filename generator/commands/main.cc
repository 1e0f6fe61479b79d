// opgen: YAML op specs in, framework glue out. The command line (CLI11):
//
//   opgen check SPEC...                 read and check specs; report every error
//   opgen generate SPEC... -o DIR       also render the templates into DIR
//   opgen new OP                        a spec and kernel skeletons
//   opgen init DIR                      a project of one's own, built by `pip install .`
//   opgen --cmake-dir                   where find_package(opgen) finds an installed opgen
//
// Exit status: 0 success, 1 spec (or generation) errors, 2 usage errors.
#include <CLI/CLI.hpp>
#include <sched.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <string>

#include "commands/commands.h"
#include "system/install_prefix.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kDescription =
    "opgen turns YAML specs of GPU ops into the glue that calls hand-written kernel bodies from\n"
    "JAX (XLA custom calls, typed FFI and legacy), PyTorch and torch_xla. SPEC is an op spec\n"
    "(<op>.yaml) or the package settings (package.yaml); a folder stands for every *.yaml in it.\n"
    "Environment: OPGEN_PYTHON names the Python (3.10 or later, with Jinja2) that renders the\n"
    "templates (default: that of the installation or virtualenv opgen is installed in, else the active\n"
    "virtualenv's, else the one opgen was built with, else python3 on PATH); OPGEN_CACHE_DIR where\n"
    "compiled templates are kept (default ~/.cache/opgen; empty: none).";

// What `opgen --version` says: opgen's version and the versions of the
// frameworks that the code it generates targets (cmake/OpgenVersions.cmake
// states them once).
constexpr const char* kVersionText =
    "opgen " OPGEN_VERSION "\n"
    "targets jaxlib >= " OPGEN_MIN_JAXLIB ": the XLA FFI (typed FFI, api_version 4; legacy custom calls, 1-3), "
    "compiled against the FFI headers of the jaxlib a package is built with\n"
    "targets torch >= " OPGEN_MIN_TORCH ": the LibTorch stable ABI (a package built against one torch is meant "
    "to load in later ones)";

// The threads (and render processes) to use by default: the CPUs this process
// may run on, at most 8.
size_t default_jobs() {
  cpu_set_t set;
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return static_cast<size_t>(std::clamp(cpus, 1, 8));
}

// The templates beside an installed opgen (<prefix>/share/opgen/templates),
// else those of the source tree it was built from.
std::string default_templates_dir() {
  const fs::path prefix = opgen::gen::install_prefix();
  std::error_code ec;
  if (!prefix.empty() && fs::is_directory(prefix / "share" / "opgen" / "templates", ec)) {
    return (prefix / "share" / "opgen" / "templates").string();
  }
  return OPGEN_DEFAULT_TEMPLATES_DIR;
}

// The CMake package beside an installed opgen (<prefix>/lib/cmake/opgen: the
// wheel's site-packages/opgen, or a `cmake --install` prefix); "" when this
// opgen runs from its build folder, which has none.
std::string installed_cmake_dir() {
  const fs::path prefix = opgen::gen::install_prefix();
  if (prefix.empty()) return "";
  const fs::path dir = prefix / "lib" / "cmake" / "opgen";
  std::error_code ec;
  return fs::exists(dir / "opgenConfig.cmake", ec) ? dir.lexically_normal().string() : "";
}

// "usage: ..." lines of every command, after a usage error.
std::string usage_lines() {
  return "usage: opgen check SPEC... [--root DIR] [--jobs N] [--quiet]\n"
         "       opgen generate SPEC... -o OUTPUT_DIR [--templates DIR] [--root DIR] [--jobs N] [--quiet]\n"
         "       opgen new OP [--specs DIR] [--kernels DIR] [--templates DIR]\n"
         "       opgen init DIR [--name PACKAGE] [--templates DIR]\n"
         "       opgen --cmake-dir | --version\n"
         "       opgen COMMAND --help\n";
}

}  // namespace

namespace opgen::gen {

int usage_error(const std::string& message) {
  std::cerr << "opgen: error: " << message << "\n" << usage_lines();
  return 2;
}

}  // namespace opgen::gen

int main(int argc, char** argv) {
  // A write to a renderer that has stopped reading fails with EPIPE, and the
  // renderer's own message says why, instead of the signal ending opgen.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app(kDescription, "opgen");
  app.require_subcommand(0, 1);
  bool print_cmake_dir = false;
  app.add_flag("--cmake-dir", print_cmake_dir,
               "print the folder of opgen's CMake package (find_package(opgen): -Dopgen_DIR=...)");
  app.set_version_flag("--version", kVersionText);
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()); });

  opgen::gen::GenerateOptions check_options, generate_options;
  opgen::gen::NewOptions new_options;
  opgen::gen::InitOptions init_options;
  const std::string templates = default_templates_dir();
  for (opgen::gen::GenerateOptions* o : {&check_options, &generate_options}) {
    o->templates_dir = templates;
    o->jobs = default_jobs();
  }
  new_options.templates_dir = templates;
  init_options.templates_dir = templates;

  auto common = [](CLI::App* cmd, opgen::gen::GenerateOptions& o) {
    cmd->add_option("SPEC", o.specs, "op specs and package.yaml, or folders of them")->required();
    cmd->add_option("--root", o.root, "show spec paths in stamps and messages relative to DIR")
        ->type_name("DIR")
        ->capture_default_str();
    cmd->add_option("-j,--jobs", o.jobs,
                    "read (and render) in N threads (processes); packages of fewer than 200 files render "
                    "in one")
        ->type_name("N")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd->add_flag("-q,--quiet", o.quiet, "print nothing on success");
  };
  CLI::App* check = app.add_subcommand("check", "read and check specs; report every error (exit 1 when any)");
  common(check, check_options);

  CLI::App* generate = app.add_subcommand("generate", "check, then render the package into OUTPUT_DIR");
  generate->footer(
      "Needs exactly one package.yaml among the specs. Files are written only when their bytes change;\n"
      "files that the last run listed in OUTPUT_DIR/opgen_manifest.txt and this run no longer writes\n"
      "are removed, and nothing else; one run at a time writes into OUTPUT_DIR, and it holds one package\n"
      "(the manifest names it; another package's folder is refused).");
  common(generate, generate_options);
  generate->add_option("-o,--output", generate_options.output_dir, "where generated files go")
      ->type_name("OUTPUT_DIR")
      ->required();
  generate->add_option("--templates", generate_options.templates_dir, "the Jinja2 templates")
      ->type_name("DIR")
      ->capture_default_str();

  CLI::App* create = app.add_subcommand("new", "write a commented spec and kernel skeletons for a new op");
  create->footer(
      "Writes SPECS/OP.yaml, KERNELS/OP.cc and KERNELS/OP.cu, which build and run as they are (out = x * scale);\n"
      "never overwrites a file.");
  create->add_option("OP", new_options.op, "the op's name (snake_case)")->required();
  create->add_option("--specs", new_options.specs_dir, "where the spec goes (it holds package.yaml)")
      ->type_name("DIR")
      ->capture_default_str();
  create->add_option("--kernels", new_options.kernels_dir, "where the kernel skeletons go")
      ->type_name("DIR")
      ->capture_default_str();
  create->add_option("--templates", new_options.templates_dir, "the Jinja2 templates")
      ->type_name("DIR")
      ->capture_default_str();

  CLI::App* init = app.add_subcommand("init", "write a project of your own that `pip install .` builds");
  init->footer(
      "Writes DIR/pyproject.toml (scikit-build-core), CMakeLists.txt (find_package(opgen) and\n"
      "opgen_add_package), specs/package.yaml, one example op (specs/scale.yaml, kernels/scale.cc and .cu:\n"
      "out = x * scale), tests/test_scale.py, README.md and .gitignore. DIR must be missing or empty.");
  init->add_option("DIR", init_options.dir, "the project's folder")->required();
  init->add_option("--name", init_options.name,
                   "the Python package and torch namespace (default: DIR's name, with '-' as '_')")
      ->type_name("PACKAGE");
  init->add_option("--templates", init_options.templates_dir, "the Jinja2 templates")
      ->type_name("DIR")
      ->capture_default_str();

  // CLI11 would answer both with "A subcommand is required".
  constexpr const char* kCommands = "check, generate, new and init";
  if (argc < 2) return opgen::gen::usage_error(std::string("no command given; the commands are ") + kCommands);
  const std::string command = argv[1];
  if (command != "check" && command != "generate" && command != "new" && command != "init" && command[0] != '-') {
    return opgen::gen::usage_error("unknown command '" + command + "'; the commands are " + kCommands);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help (of the command asked about) or --version
  } catch (const CLI::ParseError& e) {
    return opgen::gen::usage_error(e.what());
  }
  if (*check) return opgen::gen::check_or_generate(check_options);
  if (*generate) return opgen::gen::check_or_generate(generate_options);
  if (*create) return opgen::gen::new_op(new_options);
  if (*init) return opgen::gen::init_project(init_options);
  if (print_cmake_dir) {
    const std::string dir = installed_cmake_dir();
    if (dir.empty()) {
      std::cerr << "opgen: error: this opgen runs from its build folder, which holds no CMake package; install it\n"
                   "(pip install the opgen wheel, or cmake --install BUILD --component tool --prefix P)\n";
      return 1;
    }
    std::cout << dir << "\n";
    return 0;
  }
  return opgen::gen::usage_error(std::string("no command given; the commands are ") + kCommands);
}
