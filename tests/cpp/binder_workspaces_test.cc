// opgen/binder.h: a call's workspaces are requested one by one, then handed
// to the framework at once (Source::workspaces), whose pointers reach each
// workspace's slot; by default Source::workspaces asks workspace(i) for each.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "opgen/binder.h"

namespace {

// A Source with no inputs that records how its workspaces are asked for.
class RecordingSource : public opgen::Source {
 public:
  explicit RecordingSource(bool at_once) : at_once_(at_once) {}
  const opgen::TensorRef* input(size_t) override { return nullptr; }
  opgen::Status attr(size_t, const char*, opgen::AttrKind, opgen::AttrValue*) override { return {}; }
  opgen::Status output(size_t, const char*, const char*, opgen::DType, const int64_t*, size_t, int, void**) override {
    return {};
  }
  opgen::Status workspace(size_t i, const char* name, size_t bytes, void** data) override {
    one_by_one.push_back({i, name, bytes});
    *data = &memory[8 * i];
    return {};
  }
  opgen::Status workspaces(size_t n, const char* const* names, const size_t* bytes, void** data) override {
    if (!at_once_) return Source::workspaces(n, names, bytes, data);
    ++calls;
    for (size_t i = 0; i < n; ++i) {
      at_once.push_back({i, names[i], bytes[i]});
      data[i] = &memory[16 * i];
    }
    return {};
  }

  struct Request {
    size_t index;
    std::string name;
    size_t bytes;
  };
  std::vector<Request> one_by_one, at_once;
  int calls = 0;
  double memory[64] = {};

 private:
  bool at_once_;
};

TEST(BinderWorkspaces, AreHandedToTheFrameworkAtOnceAndReachTheirSlots) {
  RecordingSource source(true);
  opgen::Binder b("op", source);
  float* partial = nullptr;
  double* sums = nullptr;
  b.workspace(0, "partial", 10, &partial);
  b.workspace(1, "sums", 3, &sums);
  EXPECT_EQ(partial, nullptr);  // not before the allocation
  b.allocate_workspaces();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(source.calls, 1);
  ASSERT_EQ(source.at_once.size(), 2u);
  EXPECT_EQ(source.at_once[0].name, "partial");
  EXPECT_EQ(source.at_once[0].bytes, 40u);
  EXPECT_EQ(source.at_once[1].name, "sums");
  EXPECT_EQ(source.at_once[1].bytes, 24u);
  EXPECT_EQ(static_cast<void*>(partial), static_cast<void*>(&source.memory[0]));
  EXPECT_EQ(static_cast<void*>(sums), static_cast<void*>(&source.memory[16]));
  EXPECT_TRUE(source.one_by_one.empty());
}

TEST(BinderWorkspaces, ByDefaultEachIsAskedForInTurn) {
  RecordingSource source(false);
  opgen::Binder b("op", source);
  int32_t* a = nullptr;
  int64_t* c = nullptr;
  b.workspace(0, "a", 5, &a);
  b.workspace(1, "c", 2, &c);
  b.allocate_workspaces();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(source.one_by_one.size(), 2u);
  EXPECT_EQ(source.one_by_one[0].bytes, 20u);
  EXPECT_EQ(source.one_by_one[1].bytes, 16u);
  EXPECT_EQ(static_cast<void*>(a), static_cast<void*>(&source.memory[0]));
  EXPECT_EQ(static_cast<void*>(c), static_cast<void*>(&source.memory[8]));
}

TEST(BinderWorkspaces, ANegativeCountIsRefusedAndNothingIsAllocated) {
  RecordingSource source(true);
  opgen::Binder b("op", source);
  float* fine = nullptr;
  float* bad = nullptr;
  b.workspace(0, "fine", 4, &fine);
  b.workspace(1, "bad", -1, &bad);
  b.allocate_workspaces();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("op: workspace 'bad' would have -1 elements"), std::string::npos)
      << b.status().message();
  EXPECT_EQ(source.calls, 0);
  EXPECT_EQ(fine, nullptr);
}

}  // namespace
