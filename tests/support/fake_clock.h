// A Clock that moves only when a test says so, so timing-dependent objects (the batcher) are
// tested by advancing time instead of sleeping and asserting wall-clock bounds.
#pragma once

#include <atomic>
#include <chrono>

#include "slipway/core.h"

namespace slipway::testing {

class FakeClock final : public Clock {
 public:
  time_point now() const override { return time_point(std::chrono::nanoseconds(now_ns_.load())); }
  // Returns at once when the deadline has passed; otherwise after a short real pause, so waiters
  // re-check the fake time (advance() needs no handle on their condition variables).
  void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& condition,
                  time_point deadline) const override {
    if (now() >= deadline) return;
    condition.wait_for(lock, std::chrono::milliseconds(1));
  }
  void advance(std::chrono::nanoseconds step) { now_ns_ += step.count(); }

 private:
  std::atomic<std::int64_t> now_ns_{1'000'000'000};
};

}  // namespace slipway::testing
