// opgen/dispatch.h: the dtype positions and the instantiation visit that
// every generated binding relies on.
#include "opgen/dispatch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <typeinfo>

namespace {

template <typename T, typename U>
struct Pair {
  T t;
  U u;
};

using Three = opgen::TypeList<Pair<float, int8_t>, Pair<double, int8_t>, Pair<int32_t, int64_t>>;

TEST(IndexOf, FindsThePositionOrMinusOne) {
  EXPECT_EQ(opgen::index_of(7, {3, 7, 9}), 1);
  EXPECT_EQ(opgen::index_of(3, {3, 7, 9}), 0);
  EXPECT_EQ(opgen::index_of(4, {3, 7, 9}), -1);
  EXPECT_EQ(opgen::index_of(4, {}), -1);
  // The list takes the value's type: descriptor codes are uint8_t.
  const uint8_t code = 9;
  EXPECT_EQ(opgen::index_of(code, {0, 3, 9}), 2);
  static_assert(opgen::index_of(2, {1, 2}) == 1, "usable in constant expressions");
}

TEST(VisitArgs, CallsTheBodyWithAValueInitialisedArgsOfTheIndexedType) {
  for (int i = 0; i < 3; ++i) {
    const std::string seen = opgen::visit_args(
        Three{}, i,
        [](auto& args) -> std::string {
          // Value-initialised: no field carries garbage into a binding.
          EXPECT_EQ(args.t, 0);
          EXPECT_EQ(args.u, 0);
          return typeid(args).name();
        },
        [] { return std::string("none"); });
    const char* expected[] = {typeid(Pair<float, int8_t>).name(), typeid(Pair<double, int8_t>).name(),
                              typeid(Pair<int32_t, int64_t>).name()};
    EXPECT_EQ(seen, expected[i]) << "index " << i;
  }
}

TEST(VisitArgs, AnIndexOutsideTheListRunsOtherwiseAndNotTheBody) {
  for (int i : {-1, 3, 1000}) {
    bool ran = false;
    const int r = opgen::visit_args(
        Three{}, i, [&](auto&) { ran = true; return 1; }, [] { return -5; });
    EXPECT_EQ(r, -5) << "index " << i;
    EXPECT_FALSE(ran) << "index " << i;
  }
}

TEST(VisitArgs, WorksForVoidBodiesAndASingleInstantiation) {
  int calls = 0, otherwise = 0;
  using One = opgen::TypeList<Pair<int, int>>;
  opgen::visit_args(One{}, 0, [&](auto& args) { calls += 1 + args.t; }, [&] { ++otherwise; });
  opgen::visit_args(One{}, 1, [&](auto&) { ++calls; }, [&] { ++otherwise; });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(otherwise, 1);
  static_assert(One::size == 1 && Three::size == 3, "size counts the instantiations");
}

}  // namespace
