// opgen: YAML op specs in, framework glue out.
//
//   opgen check SPEC...                 read and check specs; report every error
//   opgen generate SPEC... -o DIR       also render the templates into DIR
//
// Exit status: 0 success, 1 spec (or generation) errors, 2 usage errors.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "diagnostics.h"
#include "file_workers.h"
#include "names.h"
#include "output_writer.h"
#include "renderer.h"
#include "spec_reader.h"

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: opgen check SPEC...\n"
    "       opgen generate SPEC... -o OUTPUT_DIR [--templates DIR] [--root DIR] [--jobs N] [--quiet]\n"
    "       opgen new OP [--specs DIR] [--kernels DIR] [--templates DIR]\n"
    "\n"
    "SPEC is an op spec (<op>.yaml) or the package settings (package.yaml); a folder\n"
    "stands for every *.yaml file in it. 'generate' needs exactly one package.yaml.\n"
    "  -o DIR           where generated files go (written only when their bytes change;\n"
    "                   files that the last run listed in DIR/opgen_manifest.txt and this\n"
    "                   run no longer writes are removed; one run at a time per DIR)\n"
    "  --templates DIR  the Jinja2 templates (default: <prefix>/share/opgen/templates beside an\n"
    "                   installed opgen, else " OPGEN_DEFAULT_TEMPLATES_DIR ")\n"
    "  --root DIR       spec paths in stamps and messages are shown relative to DIR\n"
    "                   (default: the current folder)\n"
    "  --jobs N, -j N   render in N processes (default: the CPUs available, at most 8;\n"
    "                   packages of fewer than 200 files render in one)\n"
    "  --quiet          print nothing on success\n"
    "'new' writes a commented spec (DIR/OP.yaml, default specs/) and CPU and CUDA kernel\n"
    "skeletons (default kernels/) that build as they are; it never overwrites a file.\n"
    "Environment: OPGEN_PYTHON names the Python (with Jinja2) that opgen embeds;\n"
    "OPGEN_CACHE_DIR where compiled templates are kept (default ~/.cache/opgen; empty: none).\n";

int usage_error(const std::string& message) {
  std::cerr << "opgen: error: " << message << "\n" << kUsage;
  return 2;
}

// The templates beside an installed opgen (<prefix>/share/opgen/templates),
// else those of the source tree it was built from.
std::string default_templates_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "opgen" / "templates";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return OPGEN_DEFAULT_TEMPLATES_DIR;
}

struct Options {
  std::string command;
  std::string new_op;
  std::string specs_dir = "specs";
  std::string kernels_dir = "kernels";
  std::vector<std::string> specs;
  std::string output_dir;
  std::string templates_dir = default_templates_dir();
  std::string root = ".";
  bool quiet = false;
  size_t jobs = opgen::default_workers();
};

// Returns an error message, or "" when the arguments are good.
std::string parse_arguments(int argc, char** argv, Options& o) {
  if (argc < 2) return "no command given";
  o.command = argv[1];
  if (o.command != "check" && o.command != "generate" && o.command != "new") {
    return "unknown command '" + o.command + "'";
  }
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& into) -> bool {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (a == "-o" || a == "--output") {
      if (!value(o.output_dir)) return a + " needs a folder";
    } else if (a == "--templates") {
      if (!value(o.templates_dir)) return a + " needs a folder";
    } else if (a == "--root") {
      if (!value(o.root)) return a + " needs a folder";
    } else if (a == "--specs" && o.command == "new") {
      if (!value(o.specs_dir)) return a + " needs a folder";
    } else if (a == "--kernels" && o.command == "new") {
      if (!value(o.kernels_dir)) return a + " needs a folder";
    } else if (a == "--quiet" || a == "-q") {
      o.quiet = true;
    } else if (a == "--jobs" || a == "-j") {
      std::string n;
      if (!value(n)) return a + " needs a number";
      char* end = nullptr;
      const unsigned long v = std::strtoul(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 1 || v > 64) return a + " takes a number of processes from 1 to 64, not '" + n + "'";
      o.jobs = v;
    } else if (!a.empty() && a[0] == '-') {
      return "unknown option '" + a + "'";
    } else {
      o.specs.push_back(a);
    }
  }
  if (o.command == "new") {
    if (o.specs.size() != 1) return "new takes one op name";
    o.new_op = o.specs.front();
    o.specs.clear();
    if (!o.output_dir.empty()) return "new writes into --specs and --kernels, not -o";
    return "";
  }
  if (o.specs.empty()) return "no spec files given";
  if (o.command == "generate" && o.output_dir.empty()) return "generate needs -o OUTPUT_DIR";
  if (o.command == "check" && !o.output_dir.empty()) return "check writes nothing; drop -o";
  return "";
}

// Folders expand to their *.yaml files, sorted, so output order never
// depends on the file system.
std::vector<std::string> expand_specs(const std::vector<std::string>& args, std::string& error) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    std::error_code ec;
    if (fs::is_directory(a, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(a, ec)) {
        if (entry.path().extension() == ".yaml") found.push_back(entry.path().string());
      }
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(a, ec)) {
      out.push_back(a);
    } else {
      error = "no such spec file or folder: " + a;
      return {};
    }
  }
  return out;
}

std::string display_path(const std::string& path, const std::string& root) {
  std::error_code ec;
  fs::path rel = fs::relative(fs::absolute(path, ec), fs::absolute(root, ec), ec);
  if (ec || rel.empty() || *rel.begin() == "..") return fs::path(path).lexically_normal().string();
  return rel.generic_string();
}

}  // namespace

// `opgen new OP`: a spec and kernel skeletons that build as they are.
int new_op(const Options& o) {
  if (!opgen::is_snake_identifier(o.new_op)) {
    std::cerr << "opgen: error: '" << o.new_op
              << "' is not a valid op name (lower case letters, digits and '_', starting with a "
                 "letter, with no '__' and no trailing '_')\n";
    return 1;
  }
  if (opgen::is_reserved_name(o.new_op)) {
    std::cerr << "opgen: error: '" << o.new_op
              << "' is not a valid op name: it is reserved in C++, Python or the generated code\n";
    return 1;
  }
  opgen::Diagnostics diags;
  const std::string package_path = (fs::path(o.specs_dir) / opgen::kPackageSpecFileName).string();
  std::optional<opgen::Package> package;
  if (fs::exists(package_path)) package = opgen::read_package_spec(package_path, package_path, diags);
  diags.print(std::cerr);
  if (!package) {
    if (!diags.has_errors()) {
      std::cerr << "opgen: error: " << package_path
                << " is missing: 'new' takes the package name from it (see docs/spec.md)\n";
    }
    return 1;
  }
  const std::vector<std::pair<std::string, std::string>> files = {
      {"new_op/spec.yaml.j2", (fs::path(o.specs_dir) / (o.new_op + ".yaml")).string()},
      {"new_op/kernel.cc.j2", (fs::path(o.kernels_dir) / (o.new_op + ".cc")).string()},
      {"new_op/kernel.cu.j2", (fs::path(o.kernels_dir) / (o.new_op + ".cu")).string()},
  };
  for (const auto& [tmpl, path] : files) {
    if (fs::exists(path)) {
      std::cerr << "opgen: error: " << path << " exists; 'new' never overwrites a file\n";
      return 1;
    }
  }
  try {
    opgen::Renderer renderer(o.templates_dir);
    for (const auto& [tmpl, path] : files) {
      std::string error;
      const std::string text = renderer.render_one(tmpl, {{"name", o.new_op}, {"package", package->name}});
      if (opgen::write_if_changed(path, text, error) == opgen::WriteResult::kFailed) {
        std::cerr << "opgen: error: " << error << "\n";
        return 1;
      }
      std::cout << "opgen: wrote " << path << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "opgen: error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "opgen: next: edit the three files, then rebuild (cmake --build build); the op is "
            << package->name << ".jax." << o.new_op << " and torch.ops." << package->torch_namespace
            << "." << o.new_op << "\n";
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  Options o;
  if (std::string error = parse_arguments(argc, argv, o); !error.empty()) return usage_error(error);
  if (o.command == "new") return new_op(o);
  std::string error;
  const std::vector<std::string> spec_files = expand_specs(o.specs, error);
  if (!error.empty()) return usage_error(error);
  if (spec_files.empty()) return usage_error("no *.yaml files in the given folders");

  const auto start = std::chrono::steady_clock::now();
  // Specs are read on several threads (each file alone: the reader shares
  // no state), then taken in file order, so messages and ops keep one order.
  struct Read {
    std::optional<opgen::Op> op;
    std::optional<opgen::Package> package;
    opgen::Diagnostics diags;
  };
  std::vector<Read> read(spec_files.size());
  // Starting Python and loading Jinja2 takes as long as reading a few hundred
  // specs, so `generate` does it on this thread while the others read.
  std::optional<opgen::Renderer> renderer;
  std::string renderer_error;
  std::atomic<size_t> next{0};
  auto read_some = [&] {
    for (size_t i; (i = next++) < spec_files.size();) {
      const std::string shown = display_path(spec_files[i], o.root);
      if (fs::path(spec_files[i]).filename() == opgen::kPackageSpecFileName) {
        read[i].package = opgen::read_package_spec(spec_files[i], shown, read[i].diags);
      } else {
        read[i].op = opgen::read_op_spec(spec_files[i], shown, read[i].diags);
      }
    }
  };
  {
    std::vector<std::thread> threads;
    const size_t readers = std::max<size_t>(o.command == "generate" ? 2 : 1, std::min(o.jobs, spec_files.size() / 64 + 1));
    for (size_t t = 1; t < readers; ++t) threads.emplace_back(read_some);
    if (o.command == "generate") {
      try {
        renderer.emplace(o.templates_dir);
      } catch (const std::exception& e) {
        renderer_error = e.what();
      }
    }
    read_some();
    for (std::thread& t : threads) t.join();
  }
  opgen::Diagnostics diags;
  std::vector<opgen::Op> ops;
  std::vector<opgen::Package> packages;
  std::map<std::string, std::string> op_owner;
  for (size_t i = 0; i < spec_files.size(); ++i) {
    diags.append(read[i].diags);
    if (read[i].package) packages.push_back(*read[i].package);
    if (!read[i].op) continue;
    const opgen::Op& op = *read[i].op;
    auto [it, inserted] = op_owner.emplace(op.name, op.spec_path);
    if (!inserted) {
      diags.error({op.spec_path, 0, 0}, "op '" + op.name + "' is also defined in " + it->second);
    } else {
      ops.push_back(op);
    }
  }
  // Two ops must not write the same file (op 'x_opaque' beside op 'x' would).
  std::map<std::string, const opgen::Op*> path_owner;
  for (const opgen::Op& op : ops) {
    for (const std::string& path : opgen::op_output_paths("PKG", op.name)) {
      auto [it, inserted] = path_owner.emplace(path, &op);
      if (!inserted) {
        diags.error({op.spec_path, 0, 0},
                    "op '" + op.name + "' would write the file " + path + ", which op '" +
                        it->second->name + "' (" + it->second->spec_path +
                        ") also writes; rename one of them");
      }
    }
  }
  if (o.command == "generate" && !diags.has_errors()) {
    if (packages.size() != 1) {
      diags.error({o.specs.front(), 0, 0},
                  packages.empty() ? "generate needs the package settings (package.yaml) among the specs"
                                   : "more than one package.yaml given");
    } else if (ops.empty()) {
      diags.error({packages.front().spec_path, 0, 0}, "no op specs given beside the package settings");
    }
  }
  diags.print(std::cerr);
  if (diags.has_errors()) {
    std::cerr << "opgen: " << diags.error_count() << (diags.error_count() == 1 ? " error" : " errors")
              << " in " << spec_files.size() << " spec file(s)\n";
    return 1;
  }
  if (o.command == "check") {
    if (!o.quiet) std::cout << "opgen: " << spec_files.size() << " spec file(s) OK\n";
    return 0;
  }

  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const double read_s = seconds_since(start);
  double plan_s = 0, render_s = 0;
  size_t workers = 1;
  std::vector<opgen::FileOutcome> outcomes;
  // Opened (locked for this run), checked and listed before the workers fork.
  std::optional<opgen::OutputFolder> output;
  std::set<std::string> produced;
  error = renderer_error;
  if (error.empty()) {
    try {
      auto phase = std::chrono::steady_clock::now();
      renderer->plan(packages.front(), ops);
      std::vector<std::string> planned;
      for (size_t i = 0; i < renderer->file_count(); ++i) planned.push_back(renderer->path(i));
      produced.insert(planned.begin(), planned.end());
      plan_s = seconds_since(phase);
      output.emplace(o.output_dir, planned);
      error = output->error();
      if (error.empty()) {
        phase = std::chrono::steady_clock::now();
        // A fork costs more than a few renders: small packages render in-process.
        workers = renderer->file_count() < 200 ? 1 : o.jobs;
        error = opgen::render_and_write(*renderer, *output, workers, outcomes);
        render_s = seconds_since(phase);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!error.empty()) {
    std::cerr << "opgen: error: " << error << "\n";
    return 1;
  }
  int written = 0, unchanged = 0;
  for (const opgen::FileOutcome& f : outcomes) {
    if (f.written) {
      ++written;
      if (!o.quiet) std::cout << "opgen: wrote " << f.path << "\n";
    } else {
      ++unchanged;
    }
  }
  // Only files that the last run's manifest lists, and this run no longer writes.
  const std::vector<std::string> stale = output->remove_stale(produced);
  if (!o.quiet) {
    for (const std::string& path : stale) std::cout << "opgen: removed stale " << path << "\n";
  }
  const size_t removed = stale.size();
  const double seconds = seconds_since(start);
  if (!o.quiet) {
    std::printf("opgen: %zu op(s), %zu files: %d written, %d unchanged, %zu removed (%.2f s: read (and start "
                "Python) %.2f, plan %.2f, render and write %.2f in %zu process%s)\n",
                ops.size(), outcomes.size(), written, unchanged, removed, seconds, read_s, plan_s, render_s,
                workers, workers == 1 ? "" : "es");
  }
  return 0;
}
