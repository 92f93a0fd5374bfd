// Canary analysis and the thread that drives rollouts in steps.
#include "serve/rollouts.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace slipway::serve {
namespace {

double p99(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::size_t index = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(values.size()))) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index), values.end());
  return values[index];
}

// Adds `value` to a reservoir of at most RouteSample::kReservoir values, `seen` values so far, so
// that every value seen is equally likely to be in it.
void keep_sample(std::vector<double>& reservoir, std::int64_t seen, double value, std::mt19937_64& random) {
  if (reservoir.size() < RouteSample::kReservoir) {
    reservoir.push_back(value);
    return;
  }
  auto slot = std::uniform_int_distribution<std::int64_t>(0, seen - 1)(random);
  if (slot < static_cast<std::int64_t>(RouteSample::kReservoir)) reservoir[static_cast<std::size_t>(slot)] = value;
}

}  // namespace

double jensen_shannon_distance(std::span<const double> first, std::span<const double> second) {
  if (first.empty() || second.empty()) return 0.0;
  auto [low_first, high_first] = std::minmax_element(first.begin(), first.end());
  auto [low_second, high_second] = std::minmax_element(second.begin(), second.end());
  double low = std::min(*low_first, *low_second);
  double high = std::max(*high_first, *high_second);
  constexpr std::size_t kBins = 20;
  auto histogram = [&](std::span<const double> values) {
    std::vector<double> bins(kBins, 0.0);
    for (double value : values) {
      auto bin = high > low ? static_cast<std::size_t>((value - low) / (high - low) * kBins) : 0;
      bins[std::min(bin, kBins - 1)] += 1.0 / static_cast<double>(values.size());
    }
    return bins;
  };
  std::vector<double> p = histogram(first);
  std::vector<double> q = histogram(second);
  double divergence = 0.0;
  for (std::size_t bin = 0; bin < kBins; ++bin) {
    double mean = (p[bin] + q[bin]) / 2;
    if (p[bin] > 0) divergence += p[bin] * std::log2(p[bin] / mean) / 2;
    if (q[bin] > 0) divergence += q[bin] * std::log2(q[bin] / mean) / 2;
  }
  return std::sqrt(std::max(0.0, divergence));
}

Verdict analyse(const RouteSample& canary, const RouteSample& stable, const registry::RolloutCriteria& criteria,
                bool interval_over) {
  Verdict verdict;
  if (canary.requests < criteria.min_requests || stable.requests < criteria.min_requests) {
    verdict.text = fmt::format("waiting for {} requests on each version (canary {}, stable {})", criteria.min_requests,
                               canary.requests, stable.requests);
    return verdict;
  }
  std::vector<std::string> failures;
  double increase = canary.failure_rate() - stable.failure_rate();
  if (increase > criteria.max_error_rate_increase) {
    failures.push_back(fmt::format("error rate {:.4f} against the stable version's {:.4f} (limit +{})",
                                   canary.failure_rate(), stable.failure_rate(),
                                   format_config_number(criteria.max_error_rate_increase)));
  }
  double canary_p99 = p99(canary.latencies_ms);
  double stable_p99 = p99(stable.latencies_ms);
  // A difference under a millisecond is noise at these latencies, whatever the ratio; and a p99
  // of fewer than 200 latencies is their maximum, so before the interval ends it needs as many.
  bool enough_for_p99 = interval_over || (canary.latencies_ms.size() >= 200 && stable.latencies_ms.size() >= 200);
  if (enough_for_p99 && canary_p99 > criteria.max_p99_ratio * stable_p99 && canary_p99 - stable_p99 > 1.0) {
    failures.push_back(fmt::format("p99 {:.2f} ms against the stable version's {:.2f} ms (limit {}x)", canary_p99,
                                   stable_p99, format_config_number(criteria.max_p99_ratio)));
  }
  double divergence = jensen_shannon_distance(canary.scores, stable.scores);
  if (divergence > criteria.max_divergence) {
    failures.push_back(fmt::format("score distributions {:.3f} apart (Jensen-Shannon; limit {})", divergence,
                                   format_config_number(criteria.max_divergence)));
  }
  std::string values = fmt::format(
      "canary {} requests, error rate {:.4f}, p99 {:.2f} ms; stable {} requests, error rate {:.4f}, p99 {:.2f} ms; "
      "score distance {:.3f}",
      canary.requests, canary.failure_rate(), canary_p99, stable.requests, stable.failure_rate(), stable_p99,
      divergence);
  if (!failures.empty()) {
    verdict.outcome = Verdict::Outcome::kFailed;
    verdict.text = failures.front();
    for (std::size_t index = 1; index < failures.size(); ++index) verdict.text += "; " + failures[index];
    verdict.text += " (" + values + ")";
    return verdict;
  }
  verdict.outcome = interval_over ? Verdict::Outcome::kPassed : Verdict::Outcome::kWaiting;
  verdict.text = values;
  return verdict;
}

RolloutController::RolloutController(registry::Registry& registry, std::chrono::milliseconds tick,
                                     std::function<void()> on_change)
    : registry_(registry), tick_(tick), on_change_(std::move(on_change)), thread_([this] { run(); }) {}

RolloutController::~RolloutController() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void RolloutController::record(std::string_view endpoint, std::string_view route, bool failed, double latency_ms,
                               std::span<const float> scores) {
  std::lock_guard lock(mutex_);
  auto window = windows_.find(endpoint);
  if (window == windows_.end()) return;
  auto sample = window->second.routes.find(route);
  // Only the rollout's own two routes are kept.
  if (sample == window->second.routes.end()) return;
  RouteSample& kept = sample->second;
  ++kept.requests;
  if (failed) ++kept.failures;
  keep_sample(kept.latencies_ms, kept.requests, latency_ms, random_);
  for (float score : scores.first(std::min<std::size_t>(scores.size(), 16))) {
    if (!std::isfinite(score)) continue;
    keep_sample(kept.scores, ++kept.scores_seen, score, random_);
  }
}

void RolloutController::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, tick_, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    check_all();
    lock.lock();
  }
}

void RolloutController::check_all() {
  auto running = registry_.endpoints().running_rollouts();
  if (!running.ok()) {
    log_warn("cannot read the rollouts: " + running.status().message());
    return;
  }
  {
    // Windows only for the rollouts running now.
    std::lock_guard lock(mutex_);
    for (auto window = windows_.begin(); window != windows_.end();) {
      bool still = std::any_of(running->begin(), running->end(),
                               [&](const registry::Rollout& rollout) { return rollout.endpoint == window->first; });
      window = still ? std::next(window) : windows_.erase(window);
    }
  }
  for (const auto& rollout : *running) check(rollout);
}

void RolloutController::check(const registry::Rollout& rollout) {
  std::string step_key = rollout.canary.reference() + "#" + std::to_string(rollout.step);
  RouteSample canary, stable;
  std::chrono::steady_clock::duration observed{};
  {
    std::lock_guard lock(mutex_);
    Window& window = windows_[rollout.endpoint];
    if (window.step_key != step_key) {
      // A new step (or a server that just started): its window starts now.
      window = Window{step_key, std::chrono::steady_clock::now(), {}};
      window.routes[rollout.canary.reference()] = {};
      window.routes[rollout.stable.reference()] = {};
      return;
    }
    canary = window.routes[rollout.canary.reference()];
    stable = window.routes[rollout.stable.reference()];
    observed = std::chrono::steady_clock::now() - window.started;
  }
  // The interval counts from the step's start in the registry, and this server must have watched
  // at least half of it (after a restart, the step's first half went unobserved).
  auto interval = std::chrono::milliseconds(rollout.interval_ms);
  bool interval_over = unix_time_ms() - rollout.step_started_ms >= rollout.interval_ms && observed >= interval / 2;
  Verdict verdict = analyse(canary, stable, rollout.criteria, interval_over);
  if (verdict.outcome == Verdict::Outcome::kWaiting) return;
  auto writable = registry::Registry::open(registry_.home(), false);
  if (!writable.ok()) {
    log_warn("rollout of endpoint '" + rollout.endpoint + "' decided but not recorded: " + writable.status().message());
    return;
  }
  std::string step_text = format_config_number(rollout.steps[rollout.step]) + "%";
  Result<registry::Rollout> moved =
      verdict.outcome == Verdict::Outcome::kPassed
          ? (*writable)->endpoints().advance_rollout(rollout.endpoint, rollout.step,
                                                     "step " + step_text + " passed: " + verdict.text)
          : (*writable)->endpoints().fail_rollout(rollout.endpoint, rollout.step,
                                                  "step " + step_text + " failed: " + verdict.text);
  if (!moved.ok()) {
    // Another server, or a person, changed it first.
    log_info("rollout of endpoint '" + rollout.endpoint + "': " + moved.status().message());
    return;
  }
  log_info(
      "rollout of endpoint '" + rollout.endpoint + "' " +
      (moved->state == "running" ? "moved to " + format_config_number(moved->steps[moved->step]) + "%" : moved->state) +
      ": " + moved->last_check);
  if (on_change_) on_change_();
}

}  // namespace slipway::serve
