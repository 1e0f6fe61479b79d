// `opgen check` and `opgen generate`: read every spec (on several threads),
// check what lies between files, then render and write the package.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "commands/commands.h"
#include "commands/load_spec.h"
#include "model/diagnostics.h"
#include "reading/read_spec.h"
#include "rendering/renderer.h"
#include "resolving/check_across_files.h"
#include "writing/output_writer.h"

namespace opgen::gen {
namespace {

namespace fs = std::filesystem;

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

// Each spec file read and resolved on its own: several threads at once (the
// stages share no state), the results in file order, so messages and ops keep one order.
struct ReadSpec {
  std::optional<Op> op;
  std::optional<Package> package;
  Diagnostics diags;
};

std::vector<ReadSpec> read_specs(const std::vector<std::string>& spec_files, const std::string& root, size_t jobs) {
  std::vector<ReadSpec> read(spec_files.size());
  std::atomic<size_t> next{0};
  auto read_some = [&] {
    for (size_t i; (i = next++) < spec_files.size();) {
      const std::string shown = display_path(spec_files[i], root);
      if (fs::path(spec_files[i]).filename() == kPackageSpecFileName) {
        read[i].package = read_package_spec(spec_files[i], shown, read[i].diags);
      } else {
        read[i].op = load_op_spec(spec_files[i], shown, read[i].diags);
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t readers = std::min(jobs, spec_files.size() / 64 + 1);
  for (size_t t = 1; t < readers; ++t) threads.emplace_back(read_some);
  read_some();
  for (std::thread& t : threads) t.join();
  return read;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Renders the package and writes what changed, reporting each file written
// and each stale one removed, then the counts and the time each phase took
// (`start`: when the run began; `read_s`: the reading's share).
int write_package(Renderer& renderer, const Package& package, const std::vector<Op>& ops, const GenerateOptions& o,
                  std::chrono::steady_clock::time_point start, double read_s) {
  double plan_s = 0, render_s = 0;
  std::vector<bool> written;  // by plan index
  // Opened (locked for this run), checked and listed once the plan is known.
  std::optional<OutputFolder> output;
  std::set<std::string> produced;
  std::string error;
  try {
    auto phase = std::chrono::steady_clock::now();
    renderer.plan(package, ops, o.jobs);
    std::vector<std::string> planned;
    for (size_t i = 0; i < renderer.file_count(); ++i) planned.push_back(renderer.path(i));
    produced.insert(planned.begin(), planned.end());
    plan_s = seconds_since(phase);
    output.emplace(o.output_dir, package.name, planned);
    error = output->error();
    // Each file is written as it arrives, while the renderer renders the next ones.
    phase = std::chrono::steady_clock::now();
    written.assign(planned.size(), false);
    for (size_t n = 0; error.empty() && n < planned.size(); ++n) {
      size_t i = 0;
      const std::string text = renderer.next_file(i);
      written[i] = output->write_if_changed(planned[i], text, error) == WriteResult::kWritten;
    }
    render_s = seconds_since(phase);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    std::cerr << "opgen: error: " << error << "\n";
    return 1;
  }
  size_t written_count = 0;
  for (size_t i = 0; i < written.size(); ++i) {
    if (!written[i]) continue;
    ++written_count;
    if (!o.quiet) std::cout << "opgen: wrote " << output->shown(renderer.path(i)) << "\n";
  }
  // Only files that the last run's manifest lists, and this run no longer writes.
  const std::vector<std::string> stale = output->remove_stale(produced);
  if (!o.quiet) {
    for (const std::string& path : output->removed_temporaries()) {
      std::cout << "opgen: removed " << path << ", left by an interrupted run\n";
    }
    for (const std::string& path : stale) std::cout << "opgen: removed stale " << path << "\n";
    const size_t workers = renderer.workers();
    std::printf("opgen: %zu op(s), %zu files: %zu written, %zu unchanged, %zu removed (%.2f s: read %.2f, plan "
                "%.2f, render and write %.2f; rendered in %zu process%s)\n",
                ops.size(), written.size(), written_count, written.size() - written_count, stale.size(),
                seconds_since(start), read_s, plan_s, render_s, workers, workers == 1 ? "" : "es");
  }
  return 0;
}

}  // namespace

int check_or_generate(const GenerateOptions& o) {
  const bool generating = !o.output_dir.empty();
  std::string error;
  const std::vector<std::string> spec_files = expand_specs(o.specs, error);
  if (!error.empty()) return usage_error(error);
  if (spec_files.empty()) return usage_error("no *.yaml files in the given folders");

  const auto start = std::chrono::steady_clock::now();
  // The renderer starts first: its Python loads Jinja2 and the templates
  // while the specs are read.
  std::optional<Renderer> renderer;
  std::string renderer_error;
  if (generating) {
    try {
      renderer.emplace(o.templates_dir);
    } catch (const std::exception& e) {
      renderer_error = e.what();
    }
  }
  Diagnostics diags;
  std::vector<Op> ops;
  std::vector<Package> packages;
  for (ReadSpec& r : read_specs(spec_files, o.root, o.jobs)) {
    diags.append(r.diags);
    if (r.package) packages.push_back(std::move(*r.package));
    if (r.op) ops.push_back(std::move(*r.op));
  }
  check_across_files(ops, packages, generating, o.specs.front(), diags);
  diags.print(std::cerr);
  if (diags.has_errors()) {
    std::cerr << "opgen: " << diags.error_count() << (diags.error_count() == 1 ? " error" : " errors")
              << " in " << spec_files.size() << " spec file(s)\n";
    return 1;
  }
  if (!generating) {
    if (!o.quiet) std::cout << "opgen: " << spec_files.size() << " spec file(s) OK\n";
    return 0;
  }
  if (!renderer_error.empty()) {
    std::cerr << "opgen: error: " << renderer_error << "\n";
    return 1;
  }
  return write_package(*renderer, packages.front(), ops, o, start, seconds_since(start));
}

}  // namespace opgen::gen
