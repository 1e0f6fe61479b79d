// The spec reader: every spec in tests/bad_specs/ is rejected with the
// message its first line names; the real specs read into the expected model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "commands/load_spec.h"
#include "model/diagnostics.h"
#include "model/model.h"
#include "reading/read_spec.h"
#include "resolving/resolve_backward.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using opgen_test::source_dir;

// ---------------------------------------------------------------------------
// The bad-spec corpus
// ---------------------------------------------------------------------------

// One file of tests/bad_specs/. Its leading comment lines carry the
// expectation:
//   # expect: <text that some diagnostic's formatted line contains>
//   # expect-line: <1-based line that diagnostic points at>   (optional)
//   # expect-errors: <how many errors in all>                 (optional: no follow-on error)
//   # known-bug: <why the reader still returns a model>       (optional)
//   # with: <a spec read beside it, relative to tests/bad_specs> (optional, repeatable)
// A file `with` other specs (the backward op of its `backward:`, which lives in
// a subfolder, backward_ops/, as it is no bad spec) is read as `opgen check`
// reads a folder: with them, then checked against them.
// A known-bug file is reported with its message but the reader still returns
// an Op (or Package) for it; its "rejected" test is skipped, and fails once
// the reader is fixed, to say that the marker should go.
struct BadSpec {
  std::string file_name;  // simple_add.yaml
  fs::path path;
  std::string expect;     // empty when the header is missing
  int line = -1;          // -1: any line
  int errors = -1;        // -1: any number
  std::string known_bug;
  std::vector<std::string> with;
  std::string header_problem;
};

// Names the parameter in gtest's messages (instead of its bytes).
void PrintTo(const BadSpec& spec, std::ostream* os) { *os << spec.file_name; }

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

BadSpec parse_bad_spec(const fs::path& path) {
  BadSpec spec;
  spec.path = path;
  spec.file_name = path.filename().string();
  std::istringstream in(opgen_test::read_file(path));
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '#') break;  // the header is the leading comment block
    const std::string expect_key = "# expect:";
    const std::string line_key = "# expect-line:";
    const std::string errors_key = "# expect-errors:";
    const std::string bug_key = "# known-bug:";
    const std::string with_key = "# with:";
    if (line.rfind(with_key, 0) == 0) {
      spec.with.push_back(trim(line.substr(with_key.size())));
    } else if (line.rfind(bug_key, 0) == 0) {
      spec.known_bug = trim(line.substr(bug_key.size()));
    } else if (line.rfind(line_key, 0) == 0 || line.rfind(errors_key, 0) == 0) {
      const bool is_line = line.rfind(line_key, 0) == 0;
      const std::string value = trim(line.substr((is_line ? line_key : errors_key).size()));
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1) {
        spec.header_problem = "'" + (is_line ? line_key : errors_key) + "' must give a number >= 1, not '" + value + "'";
      } else {
        (is_line ? spec.line : spec.errors) = static_cast<int>(n);
      }
    } else if (line.rfind(expect_key, 0) == 0) {
      if (!first) spec.header_problem = "'# expect:' must be the first line";
      spec.expect = trim(line.substr(expect_key.size()));
    }
    first = false;
  }
  if (spec.expect.empty() && spec.header_problem.empty()) {
    spec.header_problem = "the first line must be '# expect: <part of the expected message>'";
  }
  return spec;
}

// Enumerated when the tests are registered, so a new file needs no code.
std::vector<BadSpec> bad_specs() {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(source_dir() / "tests" / "bad_specs")) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<BadSpec> specs;
  for (const fs::path& p : paths) specs.push_back(parse_bad_spec(p));
  return specs;
}

std::string test_name(const ::testing::TestParamInfo<BadSpec>& info) {
  std::string name = fs::path(info.param.file_name).stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

std::string all_messages(const opgen::gen::Diagnostics& diags) {
  std::string out;
  for (const opgen::gen::Diagnostic& d : diags.all()) out += "  " + opgen::gen::format(d) + "\n";
  return out.empty() ? "  (none)\n" : out;
}

// The name shown in diagnostics; an op spec's name must match its stem.
std::string shown_name(const BadSpec& spec) { return "tests/bad_specs/" + spec.file_name; }

// Reads the spec as opgen does: package.yaml holds the package settings.
// Returns whether the reader returned a model (and, with `# with:` specs,
// the checks between files passed).
bool read_spec(const BadSpec& spec, opgen::gen::Diagnostics& diags) {
  if (spec.file_name == opgen::gen::kPackageSpecFileName) {
    return opgen::gen::read_package_spec(spec.path.string(), shown_name(spec), diags).has_value();
  }
  std::optional<opgen::gen::Op> op = opgen::gen::load_op_spec(spec.path.string(), shown_name(spec), diags);
  if (!op || spec.with.empty()) return op.has_value();
  std::vector<opgen::gen::Op> ops = {*op};
  for (const std::string& name : spec.with) {
    std::optional<opgen::gen::Op> other = opgen::gen::load_op_spec(
        (source_dir() / "tests" / "bad_specs" / name).string(), "tests/bad_specs/" + name, diags);
    if (other) ops.push_back(*other);
  }
  opgen::gen::check_backwards(ops, diags);
  return !diags.has_errors();
}

class BadSpecTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, IsRejected) {
  const BadSpec& spec = GetParam();
  ASSERT_TRUE(spec.header_problem.empty()) << spec.path << ": " << spec.header_problem;
  opgen::gen::Diagnostics diags;
  const bool accepted = read_spec(spec, diags);
  EXPECT_TRUE(diags.has_errors()) << shown_name(spec) << " produced no error";
  if (!spec.known_bug.empty()) {
    if (accepted) GTEST_SKIP() << "known generator bug: " << spec.known_bug;
    FAIL() << shown_name(spec) << " is now rejected: delete its '# known-bug:' line";
  }
  EXPECT_FALSE(accepted) << shown_name(spec) << " was returned as a model; diagnostics:\n"
                         << all_messages(diags);
}

TEST_P(BadSpecTest, ReportsTheExpectedMessage) {
  const BadSpec& spec = GetParam();
  ASSERT_TRUE(spec.header_problem.empty()) << spec.path << ": " << spec.header_problem;
  const std::string shown = shown_name(spec);
  opgen::gen::Diagnostics diags;
  read_spec(spec, diags);
  ASSERT_TRUE(diags.has_errors()) << shown << " produced no error";
  EXPECT_GE(diags.error_count(), 1);

  bool found_text = false, found_at_line = false;
  for (const opgen::gen::Diagnostic& d : diags.all()) {
    EXPECT_EQ(d.where.file, shown) << "a diagnostic names another file: " << opgen::gen::format(d);
    const std::string text = opgen::gen::format(d);
    if (text.find(spec.expect) == std::string::npos) continue;
    found_text = true;
    if (spec.line < 0 || d.where.line == spec.line) {
      found_at_line = true;
      EXPECT_EQ(d.severity, opgen::gen::Diagnostic::Severity::kError) << text;
      if (d.where.line > 0) {
        // The formatted line leads with FILE:LINE:COL.
        EXPECT_EQ(text.rfind(shown + ":" + std::to_string(d.where.line) + ":", 0), 0u) << text;
        EXPECT_GE(d.where.column, 1) << text;
      }
    }
  }
  if (spec.errors > 0) {
    EXPECT_EQ(diags.error_count(), spec.errors) << shown << ": a follow-on error; got:\n" << all_messages(diags);
  }
  EXPECT_TRUE(found_text) << shown << ": no diagnostic contains \"" << spec.expect
                          << "\"; got:\n" << all_messages(diags);
  if (found_text) {
    EXPECT_TRUE(found_at_line) << shown << ": \"" << spec.expect << "\" is reported, but not at line "
                               << spec.line << "; got:\n" << all_messages(diags);
  }
}

INSTANTIATE_TEST_SUITE_P(BadSpecs, BadSpecTest, ::testing::ValuesIn(bad_specs()), test_name);

// Guards the enumeration itself: an empty or unreadable folder would
// otherwise instantiate nothing and pass.
TEST(BadSpecCorpus, IsPresentAndEveryFileHasAnExpectation) {
  const std::vector<BadSpec> specs = bad_specs();
  EXPECT_GE(specs.size(), 30u);
  for (const BadSpec& s : specs) EXPECT_TRUE(s.header_problem.empty()) << s.file_name;
}

// ---------------------------------------------------------------------------
// The good specs
// ---------------------------------------------------------------------------

// The 1-based line of `specs/<file>` that starts with `prefix`, or 0.
int line_of(const std::string& file, const std::string& prefix) {
  std::istringstream in(opgen_test::read_file(source_dir() / "specs" / file));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind(prefix, 0) == 0) return n;
  }
  return 0;
}

class SimpleAddSpec : public ::testing::Test {
 protected:
  void SetUp() override {
    op_ = opgen::gen::load_op_spec((source_dir() / "specs" / "simple_add.yaml").string(),
                              "specs/simple_add.yaml", diags_);
    ASSERT_TRUE(op_.has_value()) << all_messages(diags_);
  }
  opgen::gen::Diagnostics diags_;
  std::optional<opgen::gen::Op> op_;
};

TEST_F(SimpleAddSpec, ReadsWithoutDiagnostics) {
  EXPECT_FALSE(diags_.has_errors());
  EXPECT_TRUE(diags_.all().empty()) << all_messages(diags_);
  EXPECT_EQ(op_->name, "simple_add");
  EXPECT_EQ(op_->spec_path, "specs/simple_add.yaml");
  EXPECT_EQ(op_->doc, "Elementwise `a + alpha * b` of two vectors of equal length.");
}

TEST_F(SimpleAddSpec, Inputs) {
  ASSERT_EQ(op_->inputs.size(), 2u);
  const char* names[] = {"a", "b"};
  const char* docs[] = {"first addend", "second addend, scaled by alpha"};
  for (size_t i = 0; i < 2; ++i) {
    const opgen::gen::Tensor& t = op_->inputs[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(t.dtype, opgen::gen::DType::kF32);
    EXPECT_STREQ(opgen::gen::info(t.dtype).name, "f32");
    EXPECT_STREQ(opgen::gen::info(t.dtype).cpp, "float");
    EXPECT_EQ(t.doc, docs[i]);
    ASSERT_EQ(t.shape.size(), 1u);
    EXPECT_FALSE(t.shape[0].fixed.has_value());
    EXPECT_EQ(t.shape[0].symbol, "N");
    EXPECT_EQ(t.where.file, "specs/simple_add.yaml");
    EXPECT_EQ(t.where.line, line_of("simple_add.yaml", std::string("  ") + names[i] + ":"));
    EXPECT_EQ(t.where.column, 3);
  }
}

TEST_F(SimpleAddSpec, Outputs) {
  ASSERT_EQ(op_->outputs.size(), 1u);
  const opgen::gen::Tensor& out = op_->outputs[0];
  EXPECT_EQ(out.name, "out");
  EXPECT_EQ(out.dtype, opgen::gen::DType::kF32);
  EXPECT_EQ(out.doc, "the sum");
  ASSERT_EQ(out.shape.size(), 1u);
  EXPECT_EQ(out.shape[0].symbol, "N");
  EXPECT_EQ(out.where.line, line_of("simple_add.yaml", "  out:"));
}

TEST_F(SimpleAddSpec, Attributes) {
  ASSERT_EQ(op_->attrs.size(), 1u);
  const opgen::gen::Attr& alpha = op_->attrs[0];
  EXPECT_EQ(alpha.name, "alpha");
  EXPECT_EQ(alpha.type, opgen::gen::AttrType::kF32);
  EXPECT_STREQ(opgen::gen::info(alpha.type).cpp, "float");
  EXPECT_EQ(opgen::gen::info(alpha.type).size, 4);
  EXPECT_EQ(alpha.doc, "scale applied to b");
  ASSERT_TRUE(alpha.default_value.has_value());
  ASSERT_TRUE(std::holds_alternative<double>(*alpha.default_value));
  EXPECT_EQ(std::get<double>(*alpha.default_value), 1.0);
  EXPECT_EQ(alpha.where.line, line_of("simple_add.yaml", "  alpha:"));
}

TEST_F(SimpleAddSpec, PlatformsAndApiVersions) {
  EXPECT_EQ(op_->platforms, (std::vector<opgen::gen::Platform>{opgen::gen::Platform::kCuda, opgen::gen::Platform::kCpu}));
  EXPECT_EQ(op_->api_versions, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_TRUE(op_->has_platform(opgen::gen::Platform::kCpu));
  EXPECT_TRUE(op_->has_platform(opgen::gen::Platform::kCuda));
  for (int v = 1; v <= 4; ++v) EXPECT_TRUE(op_->has_api_version(v)) << v;
  EXPECT_FALSE(op_->has_api_version(5));
  EXPECT_TRUE(op_->has_legacy_api());
  EXPECT_TRUE(op_->cmd_buffer_compatible());
}

TEST_F(SimpleAddSpec, SymbolNIsBoundToInput0Axis0) {
  ASSERT_EQ(op_->symbols.size(), 1u);
  EXPECT_EQ(op_->symbols[0].symbol, "N");
  EXPECT_EQ(op_->symbols[0].input, 0);
  EXPECT_EQ(op_->symbols[0].axis, 0);
}

TEST(PackageSpec, ReadsTheRepositorysPackageSettings) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Package> pkg = opgen::gen::read_package_spec(
      (source_dir() / "specs" / "package.yaml").string(), "specs/package.yaml", diags);
  ASSERT_TRUE(pkg.has_value()) << all_messages(diags);
  EXPECT_FALSE(diags.has_errors());
  EXPECT_EQ(pkg->name, "opgen_ops");
  EXPECT_EQ(pkg->torch_namespace, "opgen_ops");
  EXPECT_EQ(pkg->spec_path, "specs/package.yaml");
}

// A package named like a module of the standard library or of opgen's
// dependencies would hide that module from every import on the path; a torch
// namespace of PyTorch's own would mix the ops with PyTorch's.
TEST(PackageSpec, NamesThatHideModulesOrTorchNamespacesAreRefused) {
  opgen_test::TempDir dir;
  const struct {
    const char* name;
    const char* ns;
    const char* message;
  } cases[] = {
      {"json", "ok", "package name 'json' would hide Python's standard module json from every import"},
      {"os", "ok", "would hide Python's standard module os"},
      {"sys", "ok", "would hide Python's standard module sys"},
      {"typing", "ok", "would hide Python's standard module typing"},
      {"numpy", "ok", "package name 'numpy' would hide the module numpy that opgen packages depend on"},
      {"torch", "ok", "would hide the module torch"},
      {"jax", "ok", "package name 'jax' is reserved"},
      {"mine", "aten", "torch namespace 'aten' is PyTorch's own"},
  };
  for (const auto& c : cases) {
    const fs::path path = dir / "package.yaml";
    opgen_test::write_file(path, std::string("opgen: 1\npackage:\n  name: ") + c.name + "\n  torch_namespace: " +
                                     c.ns + "\n");
    opgen::gen::Diagnostics diags;
    EXPECT_FALSE(opgen::gen::read_package_spec(path.string(), "package.yaml", diags).has_value()) << c.name;
    EXPECT_NE(all_messages(diags).find(c.message), std::string::npos) << all_messages(diags);
  }
}

// ---------------------------------------------------------------------------
// Specs written by the tests
// ---------------------------------------------------------------------------

// Reads `text` as the op spec `<name>.yaml` in a temporary folder.
std::optional<opgen::gen::Op> read_text(const std::string& name, const std::string& text,
                                   opgen::gen::Diagnostics& diags) {
  opgen_test::TempDir dir;
  const fs::path path = dir / (name + ".yaml");
  opgen_test::write_file(path, text);
  return opgen::gen::load_op_spec(path.string(), name + ".yaml", diags);
}

TEST(SpecReader, OmittedOptionalKeysTakeTheirDefaults) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("minimal", R"(opgen: 1
name: minimal
inputs:
  x: {dtype: i64, shape: [4, K]}
outputs:
  y: {dtype: bool, shape: [K]}
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  EXPECT_EQ(op->platforms, (std::vector<opgen::gen::Platform>{opgen::gen::Platform::kCuda, opgen::gen::Platform::kCpu}));
  EXPECT_EQ(op->api_versions, std::vector<int>{4});
  EXPECT_FALSE(op->has_legacy_api());
  EXPECT_TRUE(op->cmd_buffer_compatible());
  EXPECT_TRUE(op->attrs.empty());
  EXPECT_TRUE(op->doc.empty());
  ASSERT_EQ(op->inputs.size(), 1u);
  EXPECT_EQ(op->inputs[0].dtype, opgen::gen::DType::kI64);
  ASSERT_EQ(op->inputs[0].shape.size(), 2u);
  EXPECT_EQ(op->inputs[0].shape[0].fixed, std::optional<int64_t>(4));
  EXPECT_EQ(op->inputs[0].shape[1].symbol, "K");
  EXPECT_EQ(op->outputs[0].dtype, opgen::gen::DType::kBool);
  ASSERT_EQ(op->symbols.size(), 1u);
  EXPECT_EQ(op->symbols[0].symbol, "K");
  EXPECT_EQ(op->symbols[0].input, 0);
  EXPECT_EQ(op->symbols[0].axis, 1);
}

// A value range may be negative (`min: -1`, a padding index): a negated
// literal reads as a negative integer, any other unary minus as 0 - operand;
// a run of them is bounded like parentheses.
TEST(SpecReader, AValueRangeMayBeNegative) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("padded", R"(opgen: 1
name: padded
inputs:
  idx: {dtype: i32, shape: [N], min: -1, exclusive_max: N - -1}
outputs:
  y: {dtype: i32, shape: [N]}
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  const opgen::gen::Expr& min = *op->inputs[0].values_min;
  EXPECT_EQ(min.kind, opgen::gen::Expr::Kind::kInt);
  EXPECT_EQ(min.value, -1);
  const opgen::gen::Expr& max = *op->inputs[0].values_max;
  ASSERT_EQ(max.kind, opgen::gen::Expr::Kind::kSub);
  EXPECT_EQ(max.rhs->kind, opgen::gen::Expr::Kind::kInt);
  EXPECT_EQ(max.rhs->value, -1);
  opgen::gen::Diagnostics deep;
  EXPECT_FALSE(read_text("deep", "opgen: 1\nname: deep\ninputs:\n  i: {dtype: i32, shape: [N], min: " +
                                     std::string(40, '-') + "1}\noutputs:\n  y: {dtype: i32, shape: [N]}\n",
                         deep));
  EXPECT_NE(all_messages(deep).find("nests more than 32 levels deep"), std::string::npos) << all_messages(deep);
}

// `unique: true` on an index input with a range (of an integer dtype or a
// type variable over only those) reads into the model; `false` is the default.
TEST(SpecReader, AUniqueIndexReads) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("slots", R"(opgen: 1
name: slots
types:
  I: [i32, i64]
inputs:
  rows: {dtype: f32, shape: [N, D]}
  cache: {dtype: f32, shape: [S, D]}
  slot: {dtype: I, shape: [N], min: 0, exclusive_max: S, unique: true}
  other: {dtype: u8, shape: [N], max: 7, unique: false}
  plain: {dtype: i32, shape: [N], min: 0}
outputs:
  cache_out: {alias: cache}
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  EXPECT_TRUE(op->inputs[2].values_unique);
  EXPECT_FALSE(op->inputs[3].values_unique);
  EXPECT_FALSE(op->inputs[4].values_unique);
}

// Every integer that fits int64 reads, in each place a spec writes one (19
// digits: 2^62 and 2^63 - 1); 2^63 is refused.
TEST(SpecReader, IntegersUpToInt64MaxRead) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("huge", R"(opgen: 1
name: huge
inputs:
  x: {dtype: f32, shape: [N, 4611686018427387904]}
  pos: {dtype: i64, shape: [N], min: 0, max: 9223372036854775807}
outputs:
  out: {dtype: f32, shape: [N + 4611686018427387904]}
attrs:
  seed: {type: i64, default: 9223372036854775807, max: 9223372036854775807}
constraints:
  - "N <= 9223372036854775807"
  - "N in [1, 9223372036854775807]"
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  constexpr int64_t kMax = 9223372036854775807;
  EXPECT_EQ(op->inputs[0].shape[1].fixed, std::optional<int64_t>(int64_t{1} << 62));
  EXPECT_EQ(op->inputs[1].values_max->value, kMax);
  EXPECT_EQ(op->outputs[0].shape[0].expr->rhs->value, int64_t{1} << 62);
  EXPECT_EQ(std::get<int64_t>(*op->attrs[0].default_value), kMax);
  EXPECT_EQ(op->constraints[0].rhs->value, kMax);
  EXPECT_EQ(op->constraints[1].set, (std::vector<int64_t>{1, kMax}));
  opgen::gen::Diagnostics over;
  EXPECT_FALSE(read_text("over", "opgen: 1\nname: over\ninputs:\n  x: {dtype: f32, shape: [N]}\noutputs:\n"
                                 "  out: {dtype: f32, shape: [N + 9223372036854775808]}\n",
                         over));
  EXPECT_NE(all_messages(over).find("over.yaml:6:29: error: bad shape expression 'N + 9223372036854775808' in output "
                                    "'out': the number 9223372036854775808 in the expression is too large"),
            std::string::npos)
      << all_messages(over);
}

// -2^63 reads where a spec writes a negative integer (its digits alone do
// not fit int64, so a negated literal reads as one number); what lies
// beyond int64 either way is refused, with where it is written.
TEST(SpecReader, Int64MinReadsAndNothingBeyondIt) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("low", R"(opgen: 1
name: low
inputs:
  pos: {dtype: i64, shape: [N], min: -9223372036854775808, max: "- 9223372036854775807"}
outputs:
  out: {dtype: f32, shape: [N]}
constraints:
  - "N > -9223372036854775808"
  - "N in [-9223372036854775808, -(5), 1]"
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(op->inputs[0].values_min->kind, opgen::gen::Expr::Kind::kInt);
  EXPECT_EQ(op->inputs[0].values_min->value, kMin);
  EXPECT_EQ(op->inputs[0].values_max->value, kMin + 1);
  EXPECT_EQ(op->constraints[0].rhs->value, kMin);
  EXPECT_EQ(op->constraints[1].set, (std::vector<int64_t>{kMin, -5, 1}));
  const struct {
    const char* where;
    const char* text;
    const char* error;
  } bad[] = {
      {"min: -9223372036854775809", "low.yaml:4:38: error: the min of input 'pos'",
       "the number -9223372036854775809 in the expression is too small (at least -9223372036854775808)"},
      {"min: --9223372036854775808", "low.yaml:4:38: error: the min of input 'pos'",
       "-(-9223372036854775808) in the expression is too large (at most 9223372036854775807)"},
      {"min: -(-9223372036854775808)", "low.yaml:4:38: error: the min of input 'pos'",
       "-(-9223372036854775808) in the expression is too large"},
      {"min: 0 - 9223372036854775808", "low.yaml:4:38: error: the min of input 'pos'",
       "the number 9223372036854775808 in the expression is too large"},
      {"constraint: N in [-(-9223372036854775808)]", "low.yaml:8:5: error: bad constraint",
       "-(-9223372036854775808) in the expression is too large"},
      {"constraint: N in [-99999999999999999999]", "low.yaml:8:5: error: bad constraint",
       "the number -99999999999999999999 in the expression is too small"},
  };
  for (const auto& b : bad) {
    const std::string where = b.where;
    const bool constraint = where.rfind("constraint: ", 0) == 0;
    const std::string text =
        "opgen: 1\nname: low\ninputs:\n  pos: {dtype: i64, shape: [N], " +
        (constraint ? std::string("min: 0") : where) + "}\noutputs:\n  out: {dtype: f32, shape: [N]}\nconstraints:\n" +
        "  - \"" + (constraint ? where.substr(12) : std::string("N > 0")) + "\"\n";
    opgen::gen::Diagnostics d;
    EXPECT_FALSE(read_text("low", text, d)) << where;
    const std::string messages = all_messages(d);
    EXPECT_NE(messages.find(b.text), std::string::npos) << where << "\n" << messages;
    EXPECT_NE(messages.find(b.error), std::string::npos) << where << "\n" << messages;
  }
}

TEST(SpecReader, SymbolsBindToTheirFirstInputDimensionInOrder) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("matvec", R"(opgen: 1
name: matvec
inputs:
  m: {dtype: f32, shape: [B, R, C]}
  v: {dtype: f32, shape: [B, C]}
  w: {dtype: f64, shape: [K]}
outputs:
  y: {dtype: f32, shape: [B, R]}
attrs:
  flag: {type: bool, default: false}
  block: {type: i32, default: -7}
  seed: {type: i64}
  eps: {type: f64, default: 1.0e-6}
platforms: [cpu]
xla:
  api_versions: [2]
  command_buffer_compatible: false
)", diags);
  ASSERT_TRUE(op.has_value()) << all_messages(diags);
  ASSERT_EQ(op->symbols.size(), 4u);
  const struct { const char* symbol; int input, axis; } expected[] = {
      {"B", 0, 0}, {"R", 0, 1}, {"C", 0, 2}, {"K", 2, 0}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(op->symbols[i].symbol, expected[i].symbol);
    EXPECT_EQ(op->symbols[i].input, expected[i].input) << expected[i].symbol;
    EXPECT_EQ(op->symbols[i].axis, expected[i].axis) << expected[i].symbol;
  }
  ASSERT_EQ(op->attrs.size(), 4u);
  EXPECT_EQ(std::get<bool>(*op->attrs[0].default_value), false);
  EXPECT_EQ(std::get<int64_t>(*op->attrs[1].default_value), -7);
  EXPECT_FALSE(op->attrs[2].default_value.has_value());
  EXPECT_EQ(std::get<double>(*op->attrs[3].default_value), 1.0e-6);
  EXPECT_EQ(op->platforms, std::vector<opgen::gen::Platform>{opgen::gen::Platform::kCpu});
  EXPECT_EQ(op->api_versions, std::vector<int>{2});
  EXPECT_TRUE(op->has_legacy_api());
  EXPECT_FALSE(op->cmd_buffer_compatible());
}

TEST(SpecReader, ReportsEveryMistakeInOneFile) {
  // Three independent mistakes on three lines: a dtype typo, an unsupported
  // api_version and an unknown platform.
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("three_mistakes", R"(opgen: 1
name: three_mistakes
inputs:
  a: {dtype: f33, shape: [N]}
outputs:
  out: {dtype: f32, shape: [N]}
platforms: [cpu, rocm]
xla:
  api_versions: [4, 7]
)", diags);
  EXPECT_FALSE(op.has_value());
  EXPECT_GE(diags.error_count(), 3) << all_messages(diags);
  const struct { const char* text; int line; } expected[] = {
      {"unsupported dtype 'f33'", 4},
      {"unknown platform 'rocm'", 7},
      {"unsupported api_version 7", 9},
  };
  for (const auto& e : expected) {
    bool found = false;
    for (const opgen::gen::Diagnostic& d : diags.all()) {
      if (d.message.find(e.text) != std::string::npos && d.where.line == e.line) found = true;
    }
    EXPECT_TRUE(found) << "missing \"" << e.text << "\" at line " << e.line << "; got:\n"
                       << all_messages(diags);
  }
}

// Inside {...} a comma ends a plain value: the pieces after it read as keys
// without values. The error says so once per value, and a misspelt key (in a
// flow mapping or not) keeps its did-you-mean.
TEST(SpecReader, ACommaInAFlowValueIsExplainedOnceAndMisspellingsStaySuggestions) {
  opgen::gen::Diagnostics diags;
  std::optional<opgen::gen::Op> op = read_text("commas", R"(opgen: 1
name: commas
inputs:
  x: {dtype: f32, shape: [N], doc: one, two, three, four}
  y: {dtype: f32, shpe: [N], doc: plain}
  z:
    dtype: f32
    shape: [N]
    doc: a block value, with a comma
    extra word: 1
outputs:
  out: {dtype: f32, shape: [N], doc: the sum, 'quoted': 1}
attrs:
  k: {type: i64, default: 1, doc: "quoted, so whole", in steps: 2}
)", diags);
  EXPECT_FALSE(op.has_value());
  const struct { const char* text; int line; } expected[] = {
      {"unknown key 'two' in input 'x'; inside {...} a comma ends a value: quote the doc (\"...\")", 4},
      {"unknown key 'shpe' in input 'y'; did you mean 'shape'?", 5},
      {"unknown key 'extra word' in input 'z' (expected one of:", 10},
      {"unknown key 'quoted' in output 'out' (expected one of:", 12},
      {"unknown key 'in steps' in attribute 'k'; inside {...} a comma ends a value: quote a value that holds one", 14},
  };
  for (const auto& e : expected) {
    bool found = false;
    for (const opgen::gen::Diagnostic& d : diags.all()) {
      if (d.message.find(e.text) != std::string::npos && d.where.line == e.line) found = true;
    }
    EXPECT_TRUE(found) << "missing \"" << e.text << "\" at line " << e.line << "; got:\n"
                       << all_messages(diags);
  }
  // 'three' and 'four' are the same broken doc as 'two': no error of their own.
  int unknown_keys = 0;
  for (const opgen::gen::Diagnostic& d : diags.all()) {
    EXPECT_EQ(d.message.find("'three'"), std::string::npos) << all_messages(diags);
    EXPECT_EQ(d.message.find("'four'"), std::string::npos) << all_messages(diags);
    if (d.message.rfind("unknown key", 0) == 0) ++unknown_keys;
  }
  EXPECT_EQ(unknown_keys, 5) << all_messages(diags);
}

TEST(SpecReader, ReportsAMissingFile) {
  opgen::gen::Diagnostics diags;
  EXPECT_FALSE(opgen::gen::load_op_spec("/nonexistent/opgen/no_such_op.yaml", "no_such_op.yaml", diags));
  ASSERT_EQ(diags.error_count(), 1);
  EXPECT_EQ(opgen::gen::format(diags.all()[0]), "no_such_op.yaml: error: cannot open the spec file: No such file or directory");
}

TEST(SpecReader, DiagnosticsAccumulateAcrossFiles) {
  opgen::gen::Diagnostics diags;
  EXPECT_FALSE(read_text("first", "opgen: 1\nname: first\n", diags));
  const int after_first = diags.error_count();
  EXPECT_GE(after_first, 2);  // no inputs, no outputs
  EXPECT_FALSE(read_text("second", "opgen: 9\n", diags));
  EXPECT_GT(diags.error_count(), after_first);
  EXPECT_EQ(diags.all().front().where.file, "first.yaml");
  EXPECT_EQ(diags.all().back().where.file, "second.yaml");
}

TEST(Diagnostics, FormatsLocatedAndWholeFileMessages) {
  opgen::gen::Diagnostics diags;
  diags.error({"specs/x.yaml", 3, 7}, "bad thing");
  diags.warning({"specs/x.yaml", 0, 0}, "odd thing");
  EXPECT_EQ(diags.error_count(), 1);
  ASSERT_EQ(diags.all().size(), 2u);
  EXPECT_EQ(opgen::gen::format(diags.all()[0]), "specs/x.yaml:3:7: error: bad thing");
  EXPECT_EQ(opgen::gen::format(diags.all()[1]), "specs/x.yaml: warning: odd thing");
  std::ostringstream printed;
  diags.print(printed);
  EXPECT_EQ(printed.str(), "specs/x.yaml:3:7: error: bad thing\nspecs/x.yaml: warning: odd thing\n");
}

}  // namespace
