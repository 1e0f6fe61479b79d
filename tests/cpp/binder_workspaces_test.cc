// opgen/binder.h: a call's workspaces are requested one by one, then asked
// of the framework once every rule has passed: each its own buffer where the
// call's buffers exist (XLA's), one buffer that the binder lays out where the
// framework allocates (PyTorch's); the pointers reach each workspace's slot.
// A workspace of some platforms only is not allocated on the others; an
// output on request that the call does not ask for gets no buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "opgen/binder.h"

namespace {

// A Source with no inputs that records how its outputs and workspaces are asked for.
class RecordingSource : public opgen::Source {
 public:
  explicit RecordingSource(opgen::Device device = opgen::Device::kCpu, uint64_t requested = 0)
      : device_(device), requested_(requested) {}
  const opgen::TensorRef* input(size_t) override { return nullptr; }
  opgen::Status attr(size_t, const char*, opgen::AttrKind, opgen::AttrValue*) override { return {}; }
  opgen::Status output(size_t i, const char* name, const char*, opgen::DType, const int64_t* dims, size_t rank,
                       void** data) override {
    outputs.push_back({i, name, 0, std::vector<int64_t>(dims, dims + rank)});
    *data = &buffers[32 + i];
    return {};
  }
  void unrequested(size_t i, const char* name, opgen::DType) override { left_out.push_back({i, name, 0}); }
  bool requested(size_t k) override { return (requested_ >> k) & 1; }
  opgen::Device device() const override { return device_; }
  opgen::Status workspace(size_t i, const char* const* names, size_t count, size_t bytes, void** data) override {
    if (!allocates()) {
      EXPECT_EQ(count, 1u);
      one_by_one.push_back({i, names[0], bytes});
      *data = &buffers[8 * i];
      return {};
    }
    ++calls;
    for (size_t k = 0; k < count; ++k) at_once.push_back({i + k, names[k], bytes});
    *data = arena;
    return {};
  }

  struct Request {
    size_t index;
    std::string name;
    size_t bytes;
    std::vector<int64_t> dims = {};
  };
  std::vector<Request> one_by_one, at_once, outputs, left_out;
  int calls = 0;
  double buffers[64] = {};
  alignas(256) unsigned char arena[1024] = {};

 private:
  opgen::Device device_;
  uint64_t requested_;
};

// A framework that allocates (PyTorch's): the binder asks it for the
// outputs and workspaces only in allocate(), once every rule has passed, and
// for nothing larger than its device's memory.
class AllocatingSource : public RecordingSource {
 public:
  explicit AllocatingSource(uint64_t memory, uint64_t requested = 0, opgen::Device device = opgen::Device::kCpu)
      : RecordingSource(device, requested), memory_(memory) {}
  bool allocates() const override { return true; }
  uint64_t memory() const override { return memory_; }
  std::string device_name() const override { return "cpu"; }

 private:
  uint64_t memory_;
};

TEST(BinderWorkspaces, AFrameworkThatAllocatesMakesOneBufferThatTheBinderLaysOut) {
  AllocatingSource source(uint64_t{1} << 40);
  opgen::Binder b("op", source);
  float* partial = nullptr;
  double* sums = nullptr;
  b.workspace(0, "partial", false, {10}, &partial);
  b.workspace(1, "sums", false, {3}, &sums);
  EXPECT_EQ(partial, nullptr);  // not before the allocation
  b.allocate();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(source.calls, 1);
  ASSERT_EQ(source.at_once.size(), 2u);
  EXPECT_EQ(source.at_once[0].name, "partial");
  EXPECT_EQ(source.at_once[1].name, "sums");
  EXPECT_EQ(source.at_once[0].bytes, 512u);  // 40 and 24 bytes, each on 256
  EXPECT_EQ(static_cast<void*>(partial), static_cast<void*>(&source.arena[0]));
  EXPECT_EQ(static_cast<void*>(sums), static_cast<void*>(&source.arena[256]));
  EXPECT_TRUE(source.one_by_one.empty());
}

TEST(BinderWorkspaces, WhereTheCallsBuffersExistEachIsAskedForInTurn) {
  RecordingSource source;
  opgen::Binder b("op", source);
  int32_t* a = nullptr;
  int64_t* c = nullptr;
  b.workspace(0, "a", false, {5}, &a);
  b.workspace(1, "c", false, {2}, &c);
  b.allocate();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(source.one_by_one.size(), 2u);
  EXPECT_EQ(source.one_by_one[0].bytes, 20u);
  EXPECT_EQ(source.one_by_one[1].bytes, 16u);
  EXPECT_EQ(static_cast<void*>(a), static_cast<void*>(&source.buffers[0]));
  EXPECT_EQ(static_cast<void*>(c), static_cast<void*>(&source.buffers[8]));
}

// A negative count, and more bytes than XLA and torch size a buffer by (an
// int64), are refused before the framework is asked, for every Source alike.
TEST(BinderWorkspaces, ACountNoFrameworkCanHoldIsRefusedAndNothingIsAllocated) {
  const struct {
    int64_t count;
    const char* message;
  } cases[] = {{-1, "op: workspace 'bad' would have -1 elements"},
               {int64_t{1} << 61,  // 2^64 bytes of doubles
                "op: workspace 'bad' of 2305843009213693952 elements would take 18446744073709551616 bytes, "
                "more than 2^63 - 1"}};
  for (const auto& c : cases) {
    AllocatingSource source(0);  // memory unknown: not asked
    opgen::Binder b("op", source);
    double* fine = nullptr;
    double* bad = nullptr;
    b.workspace(0, "fine", false, {4}, &fine);
    b.workspace(1, "bad", false, {c.count}, &bad);
    b.allocate();
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find(c.message), std::string::npos) << b.status().message();
    EXPECT_EQ(source.calls, 0);
    EXPECT_EQ(fine, nullptr);
    EXPECT_EQ(bad, nullptr);
  }
}

TEST(BinderOutputs, MoreThanAnInt64OfBytesIsRefusedBeforeTheFrameworkIsAsked) {
  RecordingSource source;
  opgen::Binder b("op", source);
  float* out = nullptr;
  b.output(0, "out", "[N, M]", false, {int64_t{1} << 31, int64_t{1} << 31}, &out);  // 2^62 floats
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("op: output 'out' [N, M] of shape [2147483648, 2147483648] and dtype "
                                      "f32 would take 18446744073709551616 bytes, more than 2^63 - 1"),
            std::string::npos)
      << b.status().message();
  EXPECT_TRUE(source.outputs.empty());
  // 2^61 floats are 2^63 bytes, one too many; a row fewer fits.
  for (int64_t rows : {int64_t{1} << 30, (int64_t{1} << 30) - 1}) {
    RecordingSource edge_source;
    opgen::Binder edge("op", edge_source);
    edge.output(0, "out", "[N, M]", false, {rows, int64_t{1} << 31}, &out);
    EXPECT_EQ(edge.ok(), rows < (int64_t{1} << 30)) << edge.status().message();
  }
}

TEST(BinderWorkspaces, AWorkspaceOfCudaAloneIsNotAllocatedOnTheCpu) {
  const unsigned cuda = opgen::device_bit(opgen::Device::kCuda);
  for (opgen::Device device : {opgen::Device::kCpu, opgen::Device::kCuda}) {
    AllocatingSource source(0, 0, device);
    opgen::Binder b("op", source);
    float* lt = reinterpret_cast<float*>(&source);  // not nullptr before: the binder must set it
    double* sums = nullptr;
    b.workspace(0, "lt", false, {int64_t{1} << 40}, &lt, cuda);
    b.workspace(1, "sums", false, {3}, &sums);
    b.allocate();
    ASSERT_TRUE(b.ok()) << b.status().message();
    if (device == opgen::Device::kCpu) {
      // Only sums, as the call's workspace 0, in a buffer of its exact size.
      ASSERT_EQ(source.at_once.size(), 1u);
      EXPECT_EQ(source.at_once[0].name, "sums");
      EXPECT_EQ(source.at_once[0].bytes, 24u);
      EXPECT_EQ(lt, nullptr);
      EXPECT_EQ(static_cast<void*>(sums), static_cast<void*>(&source.arena[0]));
    } else {
      ASSERT_EQ(source.at_once.size(), 2u);
      EXPECT_EQ(source.at_once[0].bytes, (size_t{4} << 40) + 256);
      EXPECT_EQ(static_cast<void*>(lt), static_cast<void*>(&source.arena[0]));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(sums), reinterpret_cast<uintptr_t>(source.arena) + (size_t{4} << 40));
    }
  }
}

TEST(BinderOutputsOnRequest, OneNotAskedForIsNullptrAndNoResult) {
  RecordingSource source(opgen::Device::kCpu, /*requested=*/0b10);
  opgen::Binder b("op", source);
  float* out = nullptr;
  float* mean = reinterpret_cast<float*>(&source);
  float* rstd = nullptr;
  b.output(0, "out", "[N]", false, {4}, &out);
  b.output_on_request(1, 0, "mean", "[]", false, {}, &mean);
  b.output_on_request(2, 1, "rstd", "[]", false, {}, &rstd);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(mean, nullptr);
  ASSERT_EQ(source.left_out.size(), 1u);
  EXPECT_EQ(source.left_out[0].name, "mean");
  // rstd is the call's result 1: mean takes no place among the results.
  ASSERT_EQ(source.outputs.size(), 2u);
  EXPECT_EQ(source.outputs[1].name, "rstd");
  EXPECT_EQ(source.outputs[1].index, 1u);
  EXPECT_NE(rstd, nullptr);
}

TEST(BinderOutputsOnRequest, ResultCountSkipsThoseNotAskedFor) {
  const int aliases[] = {-1, -1, -1, 1};  // output 3 updates optional input 1
  const int requests[] = {-1, 0, 1, -1};
  // One required input; the optional one given; rstd asked for, mean not.
  EXPECT_EQ(opgen::result_count(aliases, requests, 4, 1, 0b1, 0b10), 3u);
  EXPECT_EQ(opgen::result_count(aliases, requests, 4, 1, 0b0, 0b00), 1u);
  EXPECT_EQ(opgen::result_count(aliases, requests, 4, 1, 0b1, 0b11), 4u);
}

TEST(BinderAllocation, AFrameworkThatAllocatesIsAskedOnlyAfterEveryRule) {
  AllocatingSource source(uint64_t{1} << 40, /*requested=*/0b0);
  opgen::Binder b("op", source);
  float* out = reinterpret_cast<float*>(&source);  // not nullptr before: the binder must set it
  double* mean = reinterpret_cast<double*>(&source);
  int32_t* index = nullptr;
  double* sums = nullptr;
  b.output(0, "out", "[N, M]", false, {3, 5}, &out);
  b.output_on_request(1, 0, "mean", "[N]", false, {3}, &mean);
  b.output(2, "index", "[N]", false, {3}, &index);
  b.workspace(0, "sums", false, {7}, &sums);
  // Bound and sized, but nothing asked for: a rule after the outputs may still refuse the call.
  EXPECT_TRUE(source.outputs.empty());
  EXPECT_TRUE(source.left_out.empty());
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(mean, nullptr);
  EXPECT_EQ(b.output_bytes(0), 60u);
  EXPECT_FALSE(b.empty());
  b.allocate();
  ASSERT_TRUE(b.ok()) << b.status().message();
  // In the outputs' order, the one not asked for in its place, as a
  // placeholder of shape [0] (the framework's results are fixed); index is
  // result 1 of those the call asks for.
  ASSERT_EQ(source.outputs.size(), 3u);
  EXPECT_TRUE(source.left_out.empty());
  EXPECT_EQ(source.outputs[0].name, "out");
  EXPECT_EQ(source.outputs[0].dims, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(source.outputs[1].name, "mean");
  EXPECT_EQ(source.outputs[1].dims, (std::vector<int64_t>{0}));
  EXPECT_EQ(source.outputs[2].name, "index");
  EXPECT_EQ(source.outputs[2].index, 1u);
  EXPECT_EQ(static_cast<void*>(out), static_cast<void*>(&source.buffers[32]));
  EXPECT_EQ(mean, nullptr);
  EXPECT_EQ(static_cast<void*>(index), static_cast<void*>(&source.buffers[33]));
  EXPECT_EQ(b.output_data(2), static_cast<void*>(index));
  EXPECT_EQ(static_cast<void*>(sums), static_cast<void*>(&source.arena[0]));
}

TEST(BinderAllocation, ACallRefusedAfterItsOutputsAllocatesNothing) {
  AllocatingSource source(uint64_t{1} << 40);
  opgen::Binder b("op", source);
  float* out = nullptr;
  double* sums = nullptr;
  b.output(0, "out", "[N, topk]", false, {4, int64_t{1} << 40}, &out);  // 16 TiB, within the int64 bound
  b.workspace(0, "sums", false, {7}, &sums);
  b.check("op: the spec requires topk <= E, but topk = 1099511627776, E = 8");
  b.allocate();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "op: the spec requires topk <= E, but topk = 1099511627776, E = 8");
  EXPECT_TRUE(source.outputs.empty());
  EXPECT_EQ(source.calls, 0);
  EXPECT_EQ(out, nullptr);
}

TEST(BinderAllocation, NothingLargerThanTheDevicesMemoryIsAskedFor) {
  struct Case {
    int64_t out, index, sums;  // elements: an f32 output, an i32 output, an f64 workspace (with 8 bytes more)
    const char* message;       // nullptr: the call fits
  } cases[] = {
      {250, 0, 0, nullptr},  // 1000 bytes: all the memory, not more
      {251, 0, 0,
       "op: output 'out' [N] of shape [251] and dtype f32 would take 1004 bytes, more than the 1000 bytes of memory "
       "cpu has"},
      {100, 151, 0,
       "op: output 'index' [K] of shape [151] and dtype i32 would take 604 bytes, which with the call's other new "
       "outputs and workspaces makes 1004 bytes, more than the 1000 bytes of memory cpu has"},
      {100, 100, 24, nullptr},  // 800 + 192 + 8
      {100, 100, 26,
       "op: workspaces 'sums, more' would take 216 bytes, which with the call's other new outputs and workspaces "
       "makes 1016 bytes, more than the 1000 bytes of memory cpu has"},
  };
  for (const Case& c : cases) {
    AllocatingSource source(1000);
    opgen::Binder b("op", source);
    float* out = nullptr;
    int32_t* index = nullptr;
    double* sums = nullptr;
    uint8_t* more = nullptr;
    b.output(0, "out", "[N]", false, {c.out}, &out);
    b.output(1, "index", "[K]", false, {c.index}, &index);
    if (c.sums > 0) {
      b.workspace(0, "sums", false, {c.sums}, &sums);
      b.workspace(1, "more", false, {8}, &more);
    }
    b.allocate();
    if (c.message == nullptr) {
      EXPECT_TRUE(b.ok()) << b.status().message();
      EXPECT_EQ(source.outputs.size(), 2u);
      continue;
    }
    ASSERT_FALSE(b.ok()) << c.out;
    EXPECT_EQ(b.status().message(), c.message);
    EXPECT_TRUE(source.outputs.empty());
    EXPECT_EQ(source.calls, 0);
  }
}

// A framework whose buffers exist (XLA's) binds each output as the rules
// reach it, so that a refused legacy call can poison it; and is not asked its memory.
TEST(BinderAllocation, BuffersThatExistAreBoundAtOnce) {
  RecordingSource source;
  opgen::Binder b("op", source);
  float* out = nullptr;
  b.output(0, "out", "[N]", false, {int64_t{1} << 60}, &out);
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(source.outputs.size(), 1u);
  EXPECT_EQ(static_cast<void*>(out), static_cast<void*>(&source.buffers[32]));
}

}  // namespace
