// Clocks: wall time for records, monotonic time for durations, and the replaceable Clock.
#include <chrono>

#include "slipway/core.h"

namespace slipway {
namespace {

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& condition,
                  time_point deadline) const override {
    if (deadline == time_point::max()) {
      condition.wait(lock);
    } else {
      condition.wait_until(lock, deadline);
    }
  }
};

}  // namespace

const Clock& steady_clock() {
  static const SteadyClock kClock;
  return kClock;
}

std::int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace slipway
