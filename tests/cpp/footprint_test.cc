// opgen/footprint.h: which strided tensors may share memory, against a
// brute-force walk over every byte both occupy.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "opgen/footprint.h"

namespace {

struct View {
  int64_t offset;  // in elements, from a common base
  std::vector<int64_t> sizes, strides;
};

constexpr size_t kElement = 2;

opgen::Footprint footprint_of(const View& v) {
  // A fake base address: only differences matter.
  const auto* base = reinterpret_cast<const char*>(uintptr_t{1} << 20);
  return opgen::footprint(base + v.offset * kElement, v.sizes.data(), v.strides.data(), v.sizes.size(), kElement);
}

std::set<int64_t> bytes_of(const View& v) {
  std::set<int64_t> out;
  std::vector<int64_t> index(v.sizes.size(), 0);
  for (int64_t s : v.sizes) {
    if (s == 0) return out;
  }
  while (true) {
    int64_t at = v.offset;
    for (size_t i = 0; i < index.size(); ++i) at += index[i] * v.strides[i];
    for (size_t b = 0; b < kElement; ++b) out.insert(at * static_cast<int64_t>(kElement) + static_cast<int64_t>(b));
    size_t k = index.size();
    while (k > 0 && ++index[k - 1] == v.sizes[k - 1]) index[--k] = 0;
    if (k == 0) return out;
  }
}

bool share(const View& a, const View& b) {
  const std::set<int64_t> x = bytes_of(a), y = bytes_of(b);
  for (int64_t v : x) {
    if (y.count(v)) return true;
  }
  return false;
}

// vLLM's query and key: column slices of one [N, q + k + v] matrix.
TEST(Footprint, TheQueryAndKeyViewsOfOneQkvTensorShareNothing) {
  const int64_t n = 7, q = 64, k = 32, v = 32, row = q + k + v;
  const View query{0, {n, q}, {row, 1}}, key{q, {n, k}, {row, 1}}, value{q + k, {n, v}, {row, 1}};
  EXPECT_FALSE(opgen::may_overlap(footprint_of(query), footprint_of(key)));
  EXPECT_FALSE(opgen::may_overlap(footprint_of(key), footprint_of(query)));
  EXPECT_FALSE(opgen::may_overlap(footprint_of(key), footprint_of(value)));
  // A view one element wider than the query reaches into the key.
  const View wide{0, {n, q + 1}, {row, 1}};
  EXPECT_TRUE(opgen::may_overlap(footprint_of(wide), footprint_of(key)));
  // The whole qkv tensor holds both.
  const View qkv{0, {n, row}, {row, 1}};
  EXPECT_TRUE(opgen::may_overlap(footprint_of(qkv), footprint_of(key)));
}

TEST(Footprint, RowsOfTheCacheItselfOverlapIt) {
  const View cache{0, {4, 6, 10}, {60, 10, 1}}, values{5, {4, 10}, {10, 1}};
  EXPECT_TRUE(opgen::may_overlap(footprint_of(cache), footprint_of(values)));
  const View beside{240, {4, 10}, {10, 1}};
  EXPECT_FALSE(opgen::may_overlap(footprint_of(cache), footprint_of(beside)));
}

TEST(Footprint, AnEmptyTensorSharesNothing) {
  const View empty{0, {3, 0, 5}, {0, 5, 1}}, full{0, {3, 5}, {5, 1}};
  EXPECT_FALSE(opgen::may_overlap(footprint_of(empty), footprint_of(full)));
}

// Never "apart" when they share a byte: random row views and general strides.
TEST(Footprint, NeverSaysApartWhenTheyShare) {
  std::random_device rd;
  const uint32_t seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int apart = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto view = [&] {
      View v;
      v.offset = pick(0, 40);
      const int rank = pick(1, 3);
      for (int i = 0; i < rank; ++i) v.sizes.push_back(pick(1, 5));
      // Mostly row views (last stride 1, a common row stride), sometimes anything.
      if (pick(0, 3) > 0) {
        v.strides.assign(rank, 1);
        for (int i = rank - 2; i >= 0; --i) {
          v.strides[i] = i == rank - 2 ? pick(static_cast<int>(v.sizes[rank - 1]), 12) : v.strides[i + 1] * v.sizes[i + 1];
        }
      } else {
        for (int i = 0; i < rank; ++i) v.strides.push_back(pick(0, 9));
      }
      return v;
    };
    const View a = view(), b = view();
    const bool said = opgen::may_overlap(footprint_of(a), footprint_of(b));
    const bool truth = share(a, b);
    ASSERT_TRUE(said || !truth) << "trial " << trial << ": said apart, but they share a byte";
    apart += !said;
  }
  // And it proves some apart (else the test would pass for `return true`).
  EXPECT_GT(apart, 100);
}

// Null strides read as dense row-major: the footprint of the same sizes with
// their strides spelled out, and no overlap of a tensor's own elements.
TEST(Footprint, NullStridesAreDenseRowMajor) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> size(0, 5);
  const auto* base = reinterpret_cast<const char*>(uintptr_t{1} << 20);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int64_t> sizes(1 + trial % 4), strides(sizes.size());
    for (int64_t& s : sizes) s = size(rng);
    int64_t n = 1;
    for (size_t k = sizes.size(); k-- > 0;) {
      strides[k] = n;
      n *= sizes[k] == 0 ? 1 : sizes[k];
    }
    const opgen::Footprint dense = opgen::footprint(base, sizes.data(), nullptr, sizes.size(), kElement);
    const opgen::Footprint spelled = opgen::footprint(base, sizes.data(), strides.data(), sizes.size(), kElement);
    EXPECT_EQ(dense.begin, spelled.begin);
    EXPECT_EQ(dense.count == 0, spelled.count == 0);
    EXPECT_EQ(dense.extent, spelled.extent);
    EXPECT_EQ(dense.run * dense.count, spelled.run * spelled.count);
    EXPECT_TRUE(dense.exact);
    EXPECT_FALSE(opgen::self_overlaps(sizes.data(), nullptr, sizes.size()));
  }
}

// A tensor without strides (DLPack's compact form) is dense and row-major:
// the same answers as with its strides spelled out.
TEST(InPlaceConflict, ATensorWithoutStridesIsDenseAndRowMajor) {
  std::vector<float> memory(64);
  const int64_t cache_sizes[] = {4, 8}, cache_strides[] = {8, 1};
  const int64_t row_sizes[] = {8};
  const char* names[] = {"cache", "row"};
  for (const int64_t* strides : {static_cast<const int64_t*>(cache_strides), static_cast<const int64_t*>(nullptr)}) {
    // row 2 of the cache itself, and a row of memory past it.
    for (int64_t at : {16, 32}) {
      const opgen::TensorExtent inputs[] = {{memory.data(), cache_sizes, strides, 2, sizeof(float)},
                                            {memory.data() + at, row_sizes, nullptr, 1, sizeof(float)}};
      const opgen::Status s = opgen::in_place_conflict("op", names, inputs, 2, 0);
      EXPECT_EQ(s.ok(), at == 32) << (strides ? "strided" : "compact") << ", row at " << at << ": " << s.message();
      if (!s.ok()) {
        EXPECT_NE(s.message().find("input 'row' shares memory with input 'cache'"), std::string::npos) << s.message();
      }
    }
  }
}

}  // namespace
