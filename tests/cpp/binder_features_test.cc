// opgen/binder.h: a binding feature is taught once, to the Binder, and every
// Source gets it from there. MinimalSource below answers only the primitive
// questions a framework can answer (its tensors, its attributes' raw values,
// whether the caller asks for an output, a buffer for an output or for the
// workspaces, whose users read the messages); the generated rules of two ops
// (<op>_rules.h), run by the Binder over it, then give it outputs on request,
// outputs that update an input in place, dtype attributes and the messages
// spelled for its users, as for the five bindings, in both ways a framework
// has its memory: allocated after the rules (PyTorch's) or given with the
// call (XLA's).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "opgen/binder.h"
#include "opgen/dispatch.h"
#include "opgen_ops/layer_norm_rules.h"
#include "opgen_ops/rms_norm_dynamic_per_token_quant_rules.h"

namespace {

using opgen::DType;

class MinimalSource : public opgen::Source {
 public:
  struct Tensor {
    DType dtype;
    std::vector<int64_t> dims;
  };
  // `allocating`: outputs and workspaces are new memory (PyTorch's); else
  // the call's own buffers, which exist before it (XLA's).
  MinimalSource(bool allocating, opgen::Dialect dialect) : allocating_(allocating), dialect_(dialect) {}

  // Input i: a fresh buffer of `t`, or (nullptr) omitted; returns its data.
  void* add_input(const Tensor* t) {
    refs_.emplace_back();
    if (t == nullptr) return nullptr;
    dims_.push_back(std::make_unique<std::vector<int64_t>>(t->dims));
    opgen::TensorRef& r = refs_.back();
    r.dtype = t->dtype;
    r.rank = t->dims.size();
    r.dims = opgen::given_dims(dims_.back()->data());
    r.data = fresh(opgen::element_count(r.dims, r.rank) * static_cast<int64_t>(opgen::dtype_size(t->dtype)));
    return r.data;
  }
  // Input i is a view of input `of`'s memory.
  void share(size_t i, size_t of) { refs_[i].data = refs_[of].data; }
  void add_attr(opgen::AttrValue v) { attrs_.push_back(v); }
  void request(uint64_t mask) { mask_ = mask; }

  // --- the primitive answers ---
  const opgen::TensorRef* input(size_t i) override {
    return i < refs_.size() && refs_[i].dims != nullptr ? &refs_[i] : nullptr;
  }
  opgen::Status attr(size_t i, const char*, opgen::AttrKind, opgen::AttrValue* value) override {
    *value = attrs_.at(i);
    return {};
  }
  bool requested(size_t k) override { return (mask_ >> k) & 1; }
  opgen::Status output(size_t i, const char* name, const char*, DType dtype, const int64_t* dims, size_t rank,
                       void** data) override {
    *data = fresh(opgen::element_count(dims, rank) * static_cast<int64_t>(opgen::dtype_size(dtype)));
    asked.push_back({i, name, dtype, std::vector<int64_t>(dims, dims + rank), *data});
    return {};
  }
  opgen::Status workspace(size_t, const char* const*, size_t, size_t bytes, void** data) override {
    *data = fresh(static_cast<int64_t>(bytes));
    return {};
  }
  bool allocates() const override { return allocating_; }
  opgen::Dialect dialect() const override { return dialect_; }

  struct Asked {
    size_t result;
    std::string name;
    DType dtype;
    std::vector<int64_t> dims;
    void* data;
  };
  std::vector<Asked> asked;  // every output() in order

 private:
  void* fresh(int64_t bytes) {
    memory_.push_back(std::make_unique<char[]>(static_cast<size_t>(bytes) + 1));
    return memory_.back().get();
  }
  bool allocating_;
  opgen::Dialect dialect_;
  std::vector<opgen::TensorRef> refs_;
  std::vector<std::unique_ptr<std::vector<int64_t>>> dims_;
  std::vector<opgen::AttrValue> attrs_;
  uint64_t mask_ = 0;
  std::vector<std::unique_ptr<char[]>> memory_;
};

// Runs the rules of `Rules` over `source` as every binding does (run_call
// without a body); `inspect(args)` sees the bound Args of the selected
// instantiation. Returns the selected instantiation (-1: refused by select).
template <typename Rules, typename F>
int bind(opgen::Binder& b, F inspect) {
  const int instantiation = Rules::select(b);
  if (!b.ok()) return -1;
  opgen::visit_args(
      typename Rules::Instantiations{}, instantiation,
      [&](auto& args) {
        Rules::bind(b, args);
        b.allocate();
        if (b.ok()) inspect(args);
      },
      [&] { b.fail(opgen::Status::Internal("no instantiation")); });
  return instantiation;
}

opgen::AttrValue f32_attr(double f) {
  opgen::AttrValue v;
  v.f = f;
  return v;
}
opgen::AttrValue dtype_attr(DType d) {
  opgen::AttrValue v;
  v.i = static_cast<int64_t>(d);
  return v;
}

// rms_norm_dynamic_per_token_quant: x [..., D], weight [D], scale_ub [] (optional),
// residual [..., D] (optional, updated in place by output residual_out); attrs eps, out_dtype (Q).
namespace quant = opgen_ops::rms_norm_dynamic_per_token_quant;
struct QuantCall {
  void* x;
  void* residual;
};
QuantCall quant_call(MinimalSource& s, bool residual, DType x_dtype = DType::kF32, DType out = DType::kI8) {
  const MinimalSource::Tensor x{x_dtype, {2, 3, 8}}, weight{x_dtype, {8}}, res{x_dtype, {2, 3, 8}};
  QuantCall c{};
  c.x = s.add_input(&x);
  s.add_input(&weight);
  s.add_input(nullptr);  // scale_ub omitted
  c.residual = s.add_input(residual ? &res : nullptr);
  s.add_attr(f32_attr(1e-6));
  s.add_attr(dtype_attr(out));
  return c;
}

TEST(BinderFeatures, AnOutputThatUpdatesAnInputIsThatInputWhereTheFrameworkAllocates) {
  MinimalSource s(/*allocating=*/true, opgen::Dialect::kTorch);
  const QuantCall c = quant_call(s, true);
  opgen::Binder b(quant::Rules::kName, s);
  const void* residual_out = nullptr;
  const void* residual = nullptr;
  const int selected = bind<quant::Rules>(b, [&](auto& a) {
    residual_out = a.residual_out;
    residual = a.residual;
  });
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(selected, 2 * 2 + 1);  // T = f32 (index 2 of 3), Q = i8 (index 1 of 2)
  // The framework is asked for the new outputs only; residual_out is the caller's residual.
  ASSERT_EQ(s.asked.size(), 2u);
  EXPECT_EQ(s.asked[0].name, "out");
  EXPECT_EQ(s.asked[0].dtype, DType::kI8);
  EXPECT_EQ(s.asked[0].dims, (std::vector<int64_t>{2, 3, 8}));
  EXPECT_EQ(s.asked[1].name, "scale");
  EXPECT_EQ(s.asked[1].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(residual_out, c.residual);
  EXPECT_EQ(residual, c.residual);
  EXPECT_EQ(b.copy_count(), 0u);
}

TEST(BinderFeatures, AnInputUpdatedInPlaceMustNotShareMemoryWhereTheFrameworkAllocates) {
  MinimalSource s(/*allocating=*/true, opgen::Dialect::kTorch);
  quant_call(s, true);
  s.share(3, 0);  // residual is x
  opgen::Binder b(quant::Rules::kName, s);
  bind<quant::Rules>(b, [](auto&) {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            "rms_norm_dynamic_per_token_quant: input 'x' shares memory with input 'residual', which the op updates "
            "in place; pass a tensor of its own (e.g. x.clone())");
  EXPECT_TRUE(s.asked.empty());  // refused before anything was allocated
}

TEST(BinderFeatures, AnOutputThatUpdatesAnInputIsAResultCopiedIntoWhereTheCallHasItsBuffers) {
  MinimalSource s(/*allocating=*/false, opgen::Dialect::kSpec);
  const QuantCall c = quant_call(s, true);
  opgen::Binder b(quant::Rules::kName, s);
  const void* residual = nullptr;
  bind<quant::Rules>(b, [&](auto& a) { residual = a.residual; });
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(s.asked.size(), 3u);
  EXPECT_EQ(s.asked[2].name, "residual_out");
  EXPECT_EQ(s.asked[2].result, 2u);
  EXPECT_EQ(s.asked[2].dims, (std::vector<int64_t>{2, 3, 8}));
  // Its buffer is not the input's: the input's contents are copied into it, and the body reads it there.
  ASSERT_EQ(b.copy_count(), 1u);
  EXPECT_EQ(b.copy(0).src, c.residual);
  EXPECT_EQ(b.copy(0).dst, s.asked[2].data);
  EXPECT_EQ(b.copy(0).bytes, 2u * 3 * 8 * 4);
  EXPECT_EQ(residual, s.asked[2].data);
}

TEST(BinderFeatures, AnOutputThatUpdatesAnOmittedInputIsNoResult) {
  for (bool allocating : {true, false}) {
    MinimalSource s(allocating, opgen::Dialect::kSpec);
    quant_call(s, false);
    opgen::Binder b(quant::Rules::kName, s);
    const void* residual_out = &s;
    bind<quant::Rules>(b, [&](auto& a) { residual_out = a.residual_out; });
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(residual_out, nullptr);
    ASSERT_EQ(s.asked.size(), 2u) << allocating;
    EXPECT_EQ(s.asked[1].name, "scale");
  }
}

TEST(BinderFeatures, ADtypeAttributeBindsItsTypeVariableAndIsRefusedInTheUsersSpelling) {
  {
    MinimalSource s(true, opgen::Dialect::kTorch);
    quant_call(s, false, DType::kF16, DType::kF8E4M3FN);
    opgen::Binder b(quant::Rules::kName, s);
    EXPECT_EQ(bind<quant::Rules>(b, [](auto&) {}), 0);  // T = f16, Q = f8e4m3fn
    ASSERT_TRUE(b.ok()) << b.status().message();
    ASSERT_EQ(b.type_count(), 2u);
    EXPECT_EQ(std::string(b.type_name(1)), "Q");
    EXPECT_EQ(b.type(1), DType::kF8E4M3FN);
    EXPECT_EQ(s.asked[0].dtype, DType::kF8E4M3FN);
  }
  const struct {
    opgen::Dialect dialect;
    const char* message;
  } cases[] = {
      {opgen::Dialect::kSpec, "rms_norm_dynamic_per_token_quant: attribute 'out_dtype' is f16; it must be one of "
                              "f8e4m3fn, i8"},
      {opgen::Dialect::kTorch, "rms_norm_dynamic_per_token_quant: attribute 'out_dtype' is float16; it must be one "
                               "of float8_e4m3fn, int8"},
  };
  for (const auto& c : cases) {
    MinimalSource s(true, c.dialect);
    quant_call(s, false, DType::kF32, DType::kF16);
    opgen::Binder b(quant::Rules::kName, s);
    bind<quant::Rules>(b, [](auto&) {});
    EXPECT_EQ(b.status().message(), c.message);
    EXPECT_EQ(b.status().kind(), opgen::ErrorKind::kInvalidArgument);
    EXPECT_TRUE(s.asked.empty());
  }
}

TEST(BinderFeatures, AnInputsDtypeIsRefusedInTheUsersSpellingWithTheirHint) {
  const struct {
    opgen::Dialect dialect;
    const char* message;
  } cases[] = {
      {opgen::Dialect::kSpec, "layer_norm: input 'weight' has dtype f64, but its dtype T is f32 (bound by input 'x')"},
      {opgen::Dialect::kJax,
       "layer_norm: input 'weight' has dtype float64, but its dtype T is float32 (bound by input 'x')"},
  };
  for (const auto& c : cases) {
    MinimalSource s(false, c.dialect);
    const MinimalSource::Tensor x{DType::kF32, {4, 8}}, weight{DType::kF64, {8}};
    s.add_input(&x);
    s.add_input(&weight);
    s.add_input(nullptr);
    opgen::Binder b("layer_norm", s);
    bind<opgen_ops::layer_norm::Rules>(b, [](auto&) {});
    EXPECT_EQ(b.status().message(), c.message);
    EXPECT_EQ(b.status().kind(), opgen::ErrorKind::kWrongType);
  }
  // A dtype the spec declares outright: the message suggests the conversion in the users' terms.
  const struct {
    opgen::Dialect dialect;
    const char* message;
  } declared[] = {
      {opgen::Dialect::kSpec, "op: input 'weight' has dtype f32; the spec declares f64"},
      {opgen::Dialect::kJax, "op: input 'weight' has dtype float32; the spec declares float64 (convert it "
                             "explicitly, e.g. x.astype(jnp.float64))"},
      {opgen::Dialect::kTorch, "op: input 'weight' has dtype float32; the spec declares float64 (convert it "
                               "explicitly, e.g. x.to(torch.float64))"},
  };
  for (const auto& c : declared) {
    MinimalSource s(false, c.dialect);
    quant_call(s, false);
    opgen::Binder b("op", s);
    b.dtype(0, "x", DType::kF32);
    EXPECT_TRUE(b.ok());
    b.dtype(1, "weight", DType::kF64);
    EXPECT_EQ(b.status().message(), c.message);
  }
}

// layer_norm: outputs mean (bit 0) and rstd (bit 1) on request.
namespace ln = opgen_ops::layer_norm;
void layer_norm_call(MinimalSource& s, uint64_t requested) {
  const MinimalSource::Tensor x{DType::kF32, {2, 3, 8}};
  s.add_input(&x);
  s.add_input(nullptr);
  s.add_input(nullptr);
  s.add_attr(f32_attr(1e-5));
  s.request(requested);
}

TEST(BinderFeatures, AnOutputNotAskedForIsAPlaceholderWhereTheResultsAreFixed) {
  MinimalSource s(/*allocating=*/true, opgen::Dialect::kTorch);
  layer_norm_call(s, 0b10);  // rstd, not mean
  opgen::Binder b(ln::Rules::kName, s);
  const void* mean = &s;
  const void* rstd = nullptr;
  bind<ln::Rules>(b, [&](auto& a) {
    mean = a.mean;
    rstd = a.rstd;
  });
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(s.asked.size(), 3u);
  EXPECT_EQ(s.asked[1].name, "mean");
  EXPECT_EQ(s.asked[1].dims, (std::vector<int64_t>{0}));  // a tensor of no elements, as the torch schema returns
  EXPECT_EQ(s.asked[2].name, "rstd");
  EXPECT_EQ(s.asked[2].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mean, nullptr);  // the body sees none
  EXPECT_EQ(rstd, s.asked[2].data);
}

TEST(BinderFeatures, AnOutputNotAskedForIsNoResultWhereTheCallHasItsBuffers) {
  MinimalSource s(/*allocating=*/false, opgen::Dialect::kSpec);
  layer_norm_call(s, 0b10);
  opgen::Binder b(ln::Rules::kName, s);
  const void* mean = &s;
  bind<ln::Rules>(b, [&](auto& a) { mean = a.mean; });
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(s.asked.size(), 2u);
  EXPECT_EQ(s.asked[1].name, "rstd");
  EXPECT_EQ(s.asked[1].result, 1u);  // mean takes no place among the results
  EXPECT_EQ(mean, nullptr);
}

}  // namespace
