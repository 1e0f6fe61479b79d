// opgen/op_state.h and opgen/platform.h: an op's state made once per device
// and handed to the body; opgen/shared_library.h: a library a body loads
// instead of linking.
#include "opgen/op_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "opgen/platform.h"
#include "opgen/shared_library.h"

namespace state_test {

struct CpuState {
  int number;
};

std::atomic<int> made{0};
bool refuse = false;

opgen::Status make_cpu_state(CpuState*& state) {
  if (refuse) return opgen::Status::Internal("refused");
  state = new CpuState{++made};
  return opgen::Status::Ok();
}

// What a generated header declares for an op with `state: {platforms: [cpu]}`.
struct Args {
  int* seen;
  CpuState* cpu_state = nullptr;
};

opgen::Status run_cpu(const Args& args) {
  *args.seen = args.cpu_state->number;
  return opgen::Status::Ok();
}

// An op without state: its Args has no cpu_state, and run_cpu gets it as it is.
struct Plain {
  int* seen;
};

opgen::Status run_cpu(const Plain& args) {
  *args.seen = -1;
  return opgen::Status::Ok();
}

}  // namespace state_test

namespace {

struct Counted {
  int device;
};

TEST(PerDevice, MakesOneStatePerDeviceAndKeepsIt) {
  opgen::PerDevice<Counted> states;
  int makes = 0;
  auto make = [&](int device) {
    return [&makes, device](Counted*& s) {
      ++makes;
      s = new Counted{device};
      return opgen::Status::Ok();
    };
  };
  Counted *a = nullptr, *b = nullptr, *again = nullptr;
  ASSERT_TRUE(states.get(0, make(0), &a).ok());
  ASSERT_TRUE(states.get(3, make(3), &b).ok());
  ASSERT_TRUE(states.get(0, make(0), &again).ok());
  EXPECT_EQ(makes, 2);
  EXPECT_EQ(a, again);
  EXPECT_EQ(a->device, 0);
  EXPECT_EQ(b->device, 3);
}

TEST(PerDevice, AFailedMakeKeepsNothingAndTheNextCallTriesAgain) {
  opgen::PerDevice<Counted> states;
  Counted* s = nullptr;
  opgen::Status failed = states.get(1, [](Counted*&) { return opgen::Status::Internal("no library"); }, &s);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.message(), "no library");
  EXPECT_EQ(s, nullptr);
  ASSERT_TRUE(states.get(1, [](Counted*& made) { made = new Counted{1}; return opgen::Status::Ok(); }, &s).ok());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->device, 1);
}

TEST(PerDevice, RefusesADeviceBeyondItsSlotsAndASuccessWithoutAState) {
  opgen::PerDevice<Counted> states;
  Counted* s = nullptr;
  auto never = [](Counted*&) -> opgen::Status {
    ADD_FAILURE() << "made a state for a device it cannot keep";
    return opgen::Status::Ok();
  };
  EXPECT_NE(states.get(-1, never, &s).message().find("device -1"), std::string::npos);
  EXPECT_NE(states.get(opgen::PerDevice<Counted>::kDevices, never, &s).message().find("device 64"), std::string::npos);
  EXPECT_FALSE(states.get(0, [](Counted*&) { return opgen::Status::Ok(); }, &s).ok());
}

TEST(PerDevice, ConcurrentFirstCallsMakeOne) {
  opgen::PerDevice<Counted> states;
  std::atomic<int> makes{0};
  std::vector<Counted*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      EXPECT_TRUE(states
                      .get(2,
                           [&](Counted*& s) {
                             ++makes;
                             std::this_thread::sleep_for(std::chrono::milliseconds(20));  // others arrive meanwhile
                             s = new Counted{2};
                             return opgen::Status::Ok();
                           },
                           &got[i])
                      .ok());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(makes.load(), 1);
  for (Counted* s : got) EXPECT_EQ(s, got[0]);
}

TEST(CpuPlatform, HandsTheBodyTheHostsStateMadeOnce) {
  int seen = 0;
  state_test::refuse = true;
  opgen::Status refused = opgen::Cpu{}.run(state_test::Args{&seen});
  EXPECT_EQ(refused.message(), "refused");  // the body did not run
  EXPECT_EQ(seen, 0);
  state_test::refuse = false;
  for (int call = 0; call < 3; ++call) {
    ASSERT_TRUE(opgen::Cpu{}.run(state_test::Args{&seen}).ok());
    EXPECT_EQ(seen, 1);
  }
  EXPECT_EQ(state_test::made.load(), 1);
  ASSERT_TRUE(opgen::Cpu{}.run(state_test::Plain{&seen}).ok());
  EXPECT_EQ(seen, -1);
}

TEST(SharedLibrary, LoadsTheFirstCandidateThatLoadsAndLooksUpItsFunctions) {
  opgen::SharedLibrary libm;
  ASSERT_TRUE(opgen::SharedLibrary::open("libm", {"libopgen_does_not_exist.so", "libm.so.6"}, &libm).ok());
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(libm.symbol("cos", cosine).ok());
  EXPECT_EQ(cosine(0.0), 1.0);
  opgen::Status missing = libm.symbol("opgen_no_such_function", cosine);
  EXPECT_EQ(missing.message(), "libm has no symbol opgen_no_such_function (an older version?)");
}

TEST(SharedLibrary, NamesEveryCandidateItTriedWithOriginExpanded) {
  opgen::SharedLibrary lib;
  opgen::Status s = opgen::SharedLibrary::open("cuBLASLt", {"libopgen_none.so.1", "$ORIGIN/libopgen_none.so.1"}, &lib);
  ASSERT_FALSE(s.ok());
  const std::string m = s.message();
  EXPECT_EQ(m.rfind("cuBLASLt could not be loaded; tried:\n  libopgen_none.so.1: ", 0), 0u) << m;
  // $ORIGIN: the folder of the module holding the caller (this test's executable).
  EXPECT_EQ(m.find("$ORIGIN"), std::string::npos) << m;
  EXPECT_NE(m.find("/libopgen_none.so.1: "), std::string::npos) << m;
}

}  // namespace
