// An op's state (spec `state:`), made once per device and kept for the life
// of the process: opgen/platform.h finds it for each call of an op whose Args
// has a cpu_state or cuda_state, making it with the body's make_cpu_state or
// make_cuda_state the first time a call runs on that device.
//
// One cache per state type and module: each framework's module of a package
// (XLA's _C, torch's _torch_ops) is loaded on its own and keeps its own.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "opgen/status.h"

namespace opgen {

template <typename State>
class PerDevice {
 public:
  static constexpr int kDevices = 64;

  // This device's state, made by `make(State*&)` if it is the first call
  // here. Calls on a device that has one take no lock; a failed make leaves
  // nothing behind, so the next call tries again.
  template <typename Make>
  Status get(int device, Make&& make, State** out) {
    if (device < 0 || device >= kDevices) {
      return Status::Internal("device " + std::to_string(device) + " is beyond the " + std::to_string(kDevices) +
                              " whose op state opgen keeps");
    }
    State* state = slots_[device].load(std::memory_order_acquire);
    if (state == nullptr) {
      // Made once: concurrent first calls on a device wait for one make.
      std::lock_guard<std::mutex> lock(mutex_);
      state = slots_[device].load(std::memory_order_relaxed);
      if (state == nullptr) {
        if (Status s = make(state); !s.ok()) return s;
        if (state == nullptr) {
          return Status::Internal("make_cpu_state or make_cuda_state returned success without a state");
        }
        slots_[device].store(state, std::memory_order_release);
      }
    }
    *out = state;
    return Status::Ok();
  }

 private:
  std::mutex mutex_;
  std::atomic<State*> slots_[kDevices] = {};
};

// The states of one type in this module. Never destroyed (trivially
// destructible members, states leaked on purpose): a library handle torn
// down by a static destructor at exit may outlive the library's own teardown.
template <typename State>
PerDevice<State>& states() {
  static PerDevice<State> per_device;
  return per_device;
}

// Whether an op's Args carries a state on the host or on CUDA.
template <typename A, typename = void>
struct HasCpuState : std::false_type {};
template <typename A>
struct HasCpuState<A, std::void_t<decltype(std::declval<A&>().cpu_state)>> : std::true_type {};
template <typename A, typename = void>
struct HasCudaState : std::false_type {};
template <typename A>
struct HasCudaState<A, std::void_t<decltype(std::declval<A&>().cuda_state)>> : std::true_type {};

}  // namespace opgen
