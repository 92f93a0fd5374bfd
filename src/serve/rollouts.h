// Canary analysis for rollouts in steps (registry::Rollout): what each route of an endpoint under
// rollout answered during the current step, the verdict on it, and the thread that moves the
// rollout on (or back) when a verdict is reached. Private to serve.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "slipway/registry.h"

namespace slipway::serve {

// What one route answered in a step: counts, and bounded uniform samples (reservoirs) of its
// latencies and scores.
struct RouteSample {
  static constexpr std::size_t kReservoir = 2048;
  std::int64_t requests = 0;
  std::int64_t failures = 0;  // any status >= 400: a canary that refuses the traffic's requests fails
  std::vector<double> latencies_ms;
  std::vector<double> scores;
  std::int64_t scores_seen = 0;
  double failure_rate() const { return requests == 0 ? 0.0 : static_cast<double>(failures) / requests; }
};

struct Verdict {
  enum class Outcome { kWaiting, kPassed, kFailed };
  Outcome outcome = Outcome::kWaiting;
  std::string text;  // the criteria's values and limits, in words
};

// The canary against the stable version under `criteria`. Failed as soon as both have
// min_requests and a criterion fails; passed only when `interval_over` and none does; waiting
// otherwise.
Verdict analyse(const RouteSample& canary, const RouteSample& stable, const registry::RolloutCriteria& criteria,
                bool interval_over);

// The Jensen-Shannon distance (base 2, from 0 for the same distribution to 1 for disjoint ones)
// between two samples, over 20 equal bins spanning both.
double jensen_shannon_distance(std::span<const double> first, std::span<const double> second);

class RolloutController {
 public:
  // Looks at the registry's running rollouts every `tick` and, when one's step is decided, moves
  // it on or back through a registry opened for writing at `home`, then calls `on_change`.
  RolloutController(registry::Registry& registry, std::chrono::milliseconds tick, std::function<void()> on_change);
  ~RolloutController();  // stops the thread
  RolloutController(const RolloutController&) = delete;
  RolloutController& operator=(const RolloutController&) = delete;

  // One infer request to `endpoint` routed to `route` (MODEL@VERSION). Kept only while the
  // endpoint has a running rollout, so nothing a client sends grows the state. Thread-safe.
  void record(std::string_view endpoint, std::string_view route, bool failed, double latency_ms,
              std::span<const float> scores);

 private:
  struct Window {
    std::string step_key;  // canary@step: a new step starts a new window
    std::chrono::steady_clock::time_point started;
    std::map<std::string, RouteSample, std::less<>> routes;
  };

  void run();
  void check_all();
  void check(const registry::Rollout& rollout);

  registry::Registry& registry_;
  std::chrono::milliseconds tick_;
  std::function<void()> on_change_;
  std::mutex mutex_;
  std::map<std::string, Window, std::less<>> windows_;  // endpoints with a running rollout
  std::mt19937_64 random_{42};
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace slipway::serve
