// Pruners: the median rule and asynchronous successive halving, as Optuna's MedianPruner and
// SuccessiveHalvingPruner decide (optuna/pruners: _percentile.py, _successive_halving.py).
#include <algorithm>
#include <cmath>
#include <limits>

#include "slipway/tune.h"

namespace slipway::tune {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool better(double a, double b, Direction direction) { return direction == Direction::kMinimize ? a < b : a > b; }

// The trial's best value over its steps, NaN values skipped; NaN when it has none.
double best_so_far(const Trial& trial, Direction direction) {
  double best = kNaN;
  for (const auto& [step, value] : trial.intermediate) {
    if (std::isnan(value)) continue;
    if (std::isnan(best) || better(value, best, direction)) best = value;
  }
  return best;
}

// numpy.nanpercentile's linear interpolation over the non-NaN values.
double percentile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  double position = q / 100.0 * static_cast<double>(values.size() - 1);
  auto below = static_cast<std::size_t>(std::floor(position));
  std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (position - static_cast<double>(below));
}

class MedianPruner : public Pruner {
 public:
  explicit MedianPruner(const MedianPrunerOptions& options) : options_(options) {}

  bool should_prune(Trial& trial, const std::vector<Trial>& trials, Direction direction) override {
    if (trial.intermediate.empty()) return false;
    std::vector<const Trial*> completed;
    for (const auto& other : trials) {
      if (other.state == TrialState::kComplete && other.number != trial.number) completed.push_back(&other);
    }
    if (completed.empty() || static_cast<int>(completed.size()) < options_.startup_trials) return false;
    const int step = trial.intermediate.rbegin()->first;
    if (step < options_.warmup_steps) return false;
    if (!first_in_interval(trial, step)) return false;
    double best = best_so_far(trial, direction);
    if (std::isnan(best)) return true;
    std::vector<double> at_step;
    for (const auto* other : completed) {
      auto value = other->intermediate.find(step);
      if (value != other->intermediate.end()) at_step.push_back(value->second);
    }
    if (static_cast<int>(at_step.size()) < options_.min_trials) return false;
    double median = percentile(at_step, 50.0);
    if (std::isnan(median)) return false;
    return better(median, best, direction);
  }

 private:
  // Optuna's _is_first_in_interval_step: judged at the first reported step of each interval
  // after the warm-up, so that a trial reporting every step is not judged at every one.
  bool first_in_interval(const Trial& trial, int step) const {
    if (options_.interval_steps <= 1) return true;
    int nearest_lower =
        (step - options_.warmup_steps) / options_.interval_steps * options_.interval_steps + options_.warmup_steps;
    int second_last = std::numeric_limits<int>::min();
    for (const auto& [reported, value] : trial.intermediate) {
      if (reported < step) second_last = std::max(second_last, reported);
    }
    return second_last < nearest_lower;
  }

  MedianPrunerOptions options_;
};

class AshaPruner : public Pruner {
 public:
  explicit AshaPruner(const AshaOptions& options) : options_(options) {}

  bool should_prune(Trial& trial, const std::vector<Trial>& trials, Direction direction) override {
    if (trial.intermediate.empty()) return false;
    const int step = trial.intermediate.rbegin()->first;
    const double value = trial.intermediate.rbegin()->second;
    int min_resource = options_.min_resource;
    if (min_resource <= 0) {
      int longest = -1;
      for (const auto& other : trials) {
        if (other.state == TrialState::kComplete && !other.intermediate.empty()) {
          longest = std::max(longest, other.intermediate.rbegin()->first);
        }
      }
      if (longest < 0) return false;
      min_resource = std::max(longest / 100, 1);
    }
    int rung = trial.rung_values.empty() ? 0 : trial.rung_values.rbegin()->first + 1;
    for (;; ++rung) {
      double promotion_step =
          static_cast<double>(min_resource) * std::pow(static_cast<double>(options_.reduction_factor),
                                                       static_cast<double>(options_.min_early_stopping_rate + rung));
      if (static_cast<double>(step) < promotion_step) return false;
      if (std::isnan(value)) return true;
      trial.rung_values[rung] = value;
      std::vector<double> competing{value};
      for (const auto& other : trials) {
        if (other.number == trial.number) continue;
        auto reached = other.rung_values.find(rung);
        if (reached != other.rung_values.end()) competing.push_back(reached->second);
      }
      if (!promotable(value, competing, direction)) return true;
    }
  }

 private:
  // In the best 1/reduction_factor of the values at the rung; the only one there goes on (a
  // trial cannot wait for company).
  bool promotable(double value, std::vector<double> competing, Direction direction) const {
    auto index = static_cast<std::ptrdiff_t>(competing.size()) / options_.reduction_factor - 1;
    if (index < 0) index = 0;
    std::sort(competing.begin(), competing.end());
    if (direction == Direction::kMaximize)
      return value >= competing[competing.size() - 1 - static_cast<std::size_t>(index)];
    return value <= competing[static_cast<std::size_t>(index)];
  }

  AshaOptions options_;
};

}  // namespace

std::unique_ptr<Pruner> make_median_pruner(const MedianPrunerOptions& options) {
  return std::make_unique<MedianPruner>(options);
}

std::unique_ptr<Pruner> make_asha_pruner(const AshaOptions& options) { return std::make_unique<AshaPruner>(options); }

}  // namespace slipway::tune
