// libFuzzer target for the spec reader and resolver (generator/reading/,
// generator/resolving/, run as opgen runs them: commands/load_spec.h).
//
// load_op_spec / read_package_spec take a path, so every input is written to
// one per-process anonymous file (memfd; a mkstemp file where memfd is
// unavailable) and read back through /proc/self/fd/N. Beyond "no crash, hang,
// leak or out-of-bounds read" (the sanitizers), it checks:
//   * load_op_spec / read_package_spec return a value iff they reported no
//     error during the call (warnings do not count); they are called with an
//     error already in the Diagnostics, which must not change the result;
//   * every diagnostic names the display path, has a message, and formats;
//   * an accepted op is well formed (name, inputs, outputs, symbol bindings
//     that index real dimensions) and its opaque fingerprint can be computed.
//
// OPGEN_FUZZ_VERBOSE=1 prints each input's diagnostics (to triage a reproducer:
// OPGEN_FUZZ_VERBOSE=1 ./spec_reader_fuzzer crash-...).
//
// OPGEN_FUZZ_IGNORE_LOADALL_HANG=1 skips inputs on which yaml-cpp's
// YAML::LoadAll never returns (yaml-cpp <= 0.8.0 yields null documents forever
// on some malformed streams, such as a lone ','; fixed upstream by
// jbeder/yaml-cpp#1319), so that fuzzing can go past that known hang of the
// reader. It parses each input once more, so the fuzzer runs slower.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include "commands/load_spec.h"
#include "model/diagnostics.h"
#include "model/model.h"
#include "reading/read_spec.h"

namespace {

// The display paths: an op spec must be named <op name>.yaml, so the seeds
// (whose ops are renamed simple_add) can be accepted.
constexpr const char* kOpDisplayPath = "specs/simple_add.yaml";
constexpr const char* kPackageDisplayPath = "specs/package.yaml";

bool g_verbose = false;
bool g_ignore_loadall_hang = false;
int g_fd = -1;
std::string g_path;       // what read_*_spec opens
std::string g_unlink_path;  // a mkstemp file to remove at exit, if any

void remove_temp_file() {
  if (!g_unlink_path.empty()) ::unlink(g_unlink_path.c_str());
}

void open_temp_file() {
#ifdef MFD_CLOEXEC
  g_fd = ::memfd_create("opgen_spec_fuzz", MFD_CLOEXEC);
  if (g_fd >= 0) {
    g_path = "/proc/self/fd/" + std::to_string(g_fd);
    return;
  }
#endif
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/opgen_spec_fuzz.XXXXXX";
  g_fd = ::mkstemp(&pattern[0]);
  if (g_fd < 0) {
    std::perror("spec_reader_fuzzer: mkstemp");
    std::abort();
  }
  g_path = g_unlink_path = pattern;
  std::atexit(remove_temp_file);
}

void write_input(const uint8_t* data, size_t size) {
  if (::ftruncate(g_fd, 0) != 0) {
    std::perror("spec_reader_fuzzer: ftruncate");
    std::abort();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(g_fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) {
      std::perror("spec_reader_fuzzer: pwrite");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
}

// Ignores every event: only counts the documents of a stream.
class NullHandler : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// True when YAML::LoadAll would never return on these bytes: the parser
// reports more documents than the input could hold (each takes a byte at least).
bool loadall_would_hang(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  YAML::Parser parser(in);
  NullHandler handler;
  try {
    for (size_t docs = 0; docs <= size + 2; ++docs) {
      if (!parser.HandleNextDocument(handler)) return false;
    }
  } catch (const YAML::Exception&) {
    return false;
  }
  return true;
}

[[noreturn]] void fail(const char* what, const opgen::gen::Diagnostics& diags) {
  std::fprintf(stderr, "spec_reader_fuzzer: invariant violated: %s\n", what);
  std::ostringstream out;
  diags.print(out);
  std::fprintf(stderr, "diagnostics (%d errors):\n%s", diags.error_count(), out.str().c_str());
  std::abort();
}

void check_diagnostics(const opgen::gen::Diagnostics& diags, const std::string& display_path) {
  for (const opgen::gen::Diagnostic& d : diags.all()) {
    if (d.where.file != display_path) fail("a diagnostic names another file", diags);
    if (d.message.empty()) fail("a diagnostic has no message", diags);
    if (d.where.line < 0 || d.where.column < 0) fail("a diagnostic has a negative position", diags);
    if (opgen::gen::format(d).empty()) fail("a diagnostic formats as nothing", diags);
  }
}

// Type variables (Op::type_vars, Op::instantiations) exist only in newer
// models; the fuzzer builds against either.
template <typename T, typename = void>
struct HasTypeVars : std::false_type {};
template <typename T>
struct HasTypeVars<T, std::void_t<decltype(std::declval<const T&>().type_vars),
                                  decltype(std::declval<const T&>().instantiations())>>
    : std::true_type {};

template <typename OpT>
void check_instantiations(const OpT& op, const opgen::gen::Diagnostics& diags) {
  if constexpr (HasTypeVars<OpT>::value) {
    size_t expected = 1;
    for (const auto& v : op.type_vars) {
      if (v.dtypes.empty()) fail("an accepted type variable has no dtype", diags);
      expected *= v.dtypes.size();
      if (expected > 4096) return;  // too many to list here (the generator would list them all)
    }
    const auto all = op.instantiations();
    if (all.size() != expected) fail("instantiations() is not the product of the type variables", diags);
    for (const auto& m : all) {
      if (m.size() != op.type_vars.size()) fail("an instantiation leaves a type variable unset", diags);
    }
  } else {
    (void)op;
    (void)diags;
  }
}

void check_op(const opgen::gen::Op& op, const opgen::gen::Diagnostics& diags) {
  if (op.name.empty()) fail("an accepted op has no name", diags);
  if (op.inputs.empty() || op.outputs.empty()) fail("an accepted op lacks inputs or outputs", diags);
  if (op.platforms.empty()) fail("an accepted op has no platform", diags);
  if (op.api_versions.empty()) fail("an accepted op has no api_version", diags);
  for (const opgen::gen::SymbolBinding& s : op.symbols) {
    if (s.input < 0 || static_cast<size_t>(s.input) >= op.inputs.size()) {
      fail("a symbol binding names no input", diags);
    }
    const opgen::gen::Tensor& t = op.inputs[static_cast<size_t>(s.input)];
    if (s.axis < 0 || static_cast<size_t>(s.axis) >= t.shape.size()) {
      fail("a symbol binding names no axis", diags);
    }
    if (t.shape[static_cast<size_t>(s.axis)].symbol != s.symbol) {
      fail("a symbol binding points at another dimension", diags);
    }
  }
  for (const opgen::gen::Tensor& t : op.inputs) {
    for (const opgen::gen::Dim& d : t.shape) {
      if (d.fixed ? (*d.fixed < 1 || !d.symbol.empty()) : d.symbol.empty()) {
        fail("an accepted dimension is neither a positive size nor a symbol", diags);
      }
    }
  }
  check_instantiations(op, diags);
  (void)op.opaque_fingerprint("opgen_ops");
  (void)op.has_legacy_api();
}

// Runs `read` once, on Diagnostics that already hold an error (as when opgen
// reads several specs into one Diagnostics): it must return a value iff it
// reported no error itself, whatever was there before.
template <typename Read, typename Check>
void run_reader(Read read, const std::string& display_path, Check check_value) {
  opgen::gen::Diagnostics diags;
  diags.error({display_path, 0, 0}, "an earlier error (the fuzzer's)");
  const int before = diags.error_count();
  const auto value = read(g_path, display_path, diags);
  const int errors = diags.error_count() - before;
  if (value.has_value() != (errors == 0)) {
    fail(value ? "a value was returned although an error was reported during the call"
               : "no value was returned and no error was reported during the call",
         diags);
  }
  check_diagnostics(diags, display_path);
  if (value) check_value(*value, diags);
  if (g_verbose) {
    std::ostringstream out;
    diags.print(out);
    std::fprintf(stderr, "%s: %s, %d errors\n%s", display_path.c_str(),
                 value ? "accepted" : "rejected", errors, out.str().c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* verbose = std::getenv("OPGEN_FUZZ_VERBOSE");
  g_verbose = verbose && *verbose && std::string(verbose) != "0";
  const char* ignore = std::getenv("OPGEN_FUZZ_IGNORE_LOADALL_HANG");
  g_ignore_loadall_hang = ignore && *ignore && std::string(ignore) != "0";
  open_temp_file();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g_ignore_loadall_hang && loadall_would_hang(data, size)) return -1;  // not added to the corpus
  write_input(data, size);
  run_reader(opgen::gen::load_op_spec, kOpDisplayPath, check_op);
  run_reader(opgen::gen::read_package_spec, kPackageDisplayPath,
             [](const opgen::gen::Package& pkg, const opgen::gen::Diagnostics& diags) {
               if (pkg.name.empty() || pkg.torch_namespace.empty()) {
                 fail("an accepted package lacks a name or a torch namespace", diags);
               }
             });
  return 0;
}
