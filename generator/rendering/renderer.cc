#include "rendering/renderer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "model/outputs.h"
#include "rendering/child_process.h"
#include "rendering/template_data.h"
#include "system/install_prefix.h"

extern char** environ;

namespace opgen::gen {
namespace {

namespace fs = std::filesystem;

// `name` searched along PATH, as a shell would; "" when it is on none of it.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::error_code ec;
  for (std::string rest = path ? path : ""; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// The Python that renders should be the one the user works in, so that
// Jinja2 comes from their environment: OPGEN_PYTHON; else the Python whose
// installation holds this opgen, whether or not it is active, as when a build
// runs <venv>/bin/pip: the wheel installs opgen as <prefix>/lib/pythonX.Y/
// site-packages/opgen/bin/opgen (a virtualenv's or not), with Jinja2 beside
// it, and `cmake --install` into a virtualenv puts it in <venv>/bin; else the
// active virtualenv's; else the Python opgen was built with, where it still
// exists (an opgen run from its build folder); else python3 on PATH.
std::string choose_python_executable() {
  if (const char* p = std::getenv("OPGEN_PYTHON"); p && *p) {
    if (!fs::exists(p)) throw std::runtime_error(std::string("OPGEN_PYTHON=") + p + " does not exist");
    return p;
  }
  std::error_code ec;
  fs::path dir = install_prefix();
  for (int up = 0; up < 5 && dir.has_relative_path(); ++up, dir = dir.parent_path()) {
    const fs::path version = dir.parent_path().filename();  // pythonX.Y
    if (dir.filename() == "site-packages" && version.string().rfind("python", 0) == 0) {
      const fs::path python = dir.parent_path().parent_path().parent_path() / "bin" / version;
      if (fs::exists(python, ec)) return python.string();
    }
    if (fs::exists(dir / "pyvenv.cfg", ec) && fs::exists(dir / "bin" / "python3", ec)) {
      return (dir / "bin" / "python3").string();
    }
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv) {
    const fs::path candidate = fs::path(venv) / "bin" / "python3";
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  if (fs::exists(OPGEN_DEFAULT_PYTHON, ec)) return OPGEN_DEFAULT_PYTHON;
  if (std::string python = on_path("python3"); !python.empty()) return python;
  throw std::runtime_error("no Python to render the templates with: no python3 on PATH; set OPGEN_PYTHON to a "
                           "Python 3.10 or later that has Jinja2 (pip install jinja2)");
}

// opgen_render, the Python half of the renderer: beside an installed opgen
// (<prefix>/share/opgen/python), else in the source tree it was built from.
std::string render_python_dir() {
  const fs::path prefix = install_prefix();
  std::error_code ec;
  if (!prefix.empty() && fs::is_directory(prefix / "share" / "opgen" / "python" / "opgen_render", ec)) {
    return (prefix / "share" / "opgen" / "python").string();
  }
  return OPGEN_DEFAULT_RENDER_DIR;
}

// Where compiled templates are kept between runs: $OPGEN_CACHE_DIR (empty:
// no cache), else $XDG_CACHE_HOME/opgen, else ~/.cache/opgen. "" when the
// folder cannot be made: the cache only saves time, so opgen runs without it.
std::string template_cache_dir() {
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

// This process's environment with opgen_render's folder first on PYTHONPATH.
std::vector<std::string> render_environment() {
  std::vector<std::string> env;
  std::string python_path = "PYTHONPATH=" + render_python_dir();
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("PYTHONPATH=", 0) != 0) {
      env.push_back(entry);
    } else if (entry.size() > 11) {
      python_path += ":" + entry.substr(11);
    }
  }
  env.push_back(python_path);
  return env;
}

json file_triples(const std::vector<OutputFile>& files) {
  json out = json::array();
  for (const OutputFile& f : files) out.push_back(json::array({f.template_name, f.path, f.kind}));
  return out;
}

}  // namespace

struct Renderer::Impl {
  std::string python;
  std::unique_ptr<ChildProcess> process;
  std::string received;  // read from the renderer, not yet taken from `at` on
  size_t at = 0;
  std::vector<std::string> paths;
  size_t workers = 1;
  size_t files_read = 0;

  std::string command() const { return python + " -m opgen_render"; }

  // Sends the request (a JSON document) and ends the renderer's input.
  void send(const json& request) {
    std::string text;
    try {
      text = request.dump();
    } catch (const json::exception& e) {
      throw std::runtime_error(std::string("cannot hand the model to the renderer: ") + e.what());
    }
    // A renderer that stopped reading has sent why: the next record says it.
    process->send_and_close(text);
  }

  // The next record's payload, which must be tagged `tag`, and its index;
  // the renderer's own error ('E') is thrown as it is.
  std::string receive(char tag, size_t* index = nullptr) {
    size_t end;
    while ((end = received.find('\n', at)) == std::string::npos) {
      if (!fill()) throw stopped();
    }
    // "TAG INDEX LENGTH"
    const std::string header = received.substr(at, end - at);
    char* after_index = nullptr;
    char* after_length = nullptr;
    const unsigned long long number = std::strtoull(header.c_str() + std::min<size_t>(header.size(), 2), &after_index, 10);
    const unsigned long long length = std::strtoull(after_index, &after_length, 10);
    if (header.size() < 5 || header[1] != ' ' || *after_index != ' ' || *after_length != '\0') throw malformed();
    at = end + 1;
    while (received.size() - at < length) {
      if (!fill()) throw stopped();
    }
    std::string payload = received.substr(at, length);
    at += length;
    if (at > (1 << 20)) {
      received.erase(0, at);
      at = 0;
    }
    // The run is over: the destructor kills the renderer, with any workers
    // still rendering.
    if (header[0] == 'E') throw std::runtime_error(payload);
    if (header[0] != tag) throw malformed();
    if (index != nullptr) *index = number;
    return payload;
  }

  // Waits for the renderer, which has sent all it had to.
  void finish() {
    if (const std::string status = process->wait(); !status.empty()) {
      throw std::runtime_error("the renderer, " + command() + ", ended with " + status + " after its answer");
    }
  }

  bool fill() {
    char buffer[1 << 16];
    const ssize_t n = process->read_some(buffer, sizeof buffer);
    if (n <= 0) return false;
    received.append(buffer, static_cast<size_t>(n));
    return true;
  }

  std::runtime_error stopped() {
    const std::string status = process->wait();
    return std::runtime_error("the renderer, " + command() + ", ended (" + (status.empty() ? "exit status 0" : status) +
                              ") before its answer was complete; its messages, if any, are above. OPGEN_PYTHON "
                              "chooses the Python (3.10 or later, with Jinja2: pip install jinja2)");
  }

  std::runtime_error malformed() const {
    return std::runtime_error("the renderer, " + command() + ", sent what opgen cannot read: is its opgen_render (" +
                              render_python_dir() + ") of this opgen?");
  }
};

Renderer::Renderer(const std::string& templates_dir) : impl_(std::make_unique<Impl>()) {
  impl_->python = choose_python_executable();
  std::vector<std::string> argv = {impl_->python, "-m", "opgen_render", templates_dir};
  if (const std::string cache = template_cache_dir(); !cache.empty()) argv.push_back(cache);
  impl_->process = std::make_unique<ChildProcess>(argv, render_environment());
}

Renderer::~Renderer() = default;

std::vector<std::string> Renderer::render_each(const std::vector<std::string>& template_names,
                                               const std::vector<std::pair<std::string, std::string>>& values) {
  json vars = json::object();
  for (const auto& [key, value] : values) vars[key] = value;
  impl_->send({{"render", {{"templates", template_names}, {"values", vars}}}});
  std::vector<std::string> texts(template_names.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t index = 0;
    std::string text = impl_->receive('F', &index);
    if (index >= texts.size()) throw impl_->malformed();
    texts[index] = std::move(text);
  }
  impl_->finish();
  return texts;
}

void Renderer::plan(const Package& package, const std::vector<Op>& ops, size_t jobs) {
  json op_facts_list = json::array(), op_files = json::array();
  for (const Op& op : ops) {
    op_facts_list.push_back(op_facts(op, package.name));
    op_files.push_back(file_triples(op_outputs(package.name, op.name)));
  }
  // Assigned, not listed in braces: an initializer list would copy the ops' facts.
  json plan = json::object();
  plan["package"] = package_facts(package);
  plan["ops"] = std::move(op_facts_list);
  plan["dtypes"] = dtype_facts();
  plan["attr_types"] = attr_type_facts();
  plan["package_files"] = file_triples(package_outputs(package.name));
  plan["op_files"] = std::move(op_files);
  plan["manifest"] = file_triples({manifest_output()}).at(0);
  json kinds = json::array();
  for (const FileKind& k : file_kinds()) kinds.push_back(json::array({k.name, k.what}));
  plan["file_kinds"] = std::move(kinds);
  json request = json::object();
  request["plan"] = std::move(plan);
  request["jobs"] = jobs;
  impl_->send(request);
  try {
    const json answer = json::parse(impl_->receive('P'));
    impl_->paths = answer.at("paths").get<std::vector<std::string>>();
    impl_->workers = answer.at("workers").get<size_t>();
  } catch (const json::exception&) {
    throw impl_->malformed();
  }
}

size_t Renderer::file_count() const { return impl_->paths.size(); }

const std::string& Renderer::path(size_t index) const { return impl_->paths.at(index); }

size_t Renderer::workers() const { return impl_->workers; }

std::string Renderer::next_file(size_t& index) {
  std::string text = impl_->receive('F', &index);
  if (index >= impl_->paths.size()) throw impl_->malformed();
  if (++impl_->files_read == impl_->paths.size()) impl_->finish();
  return text;
}

}  // namespace opgen::gen
