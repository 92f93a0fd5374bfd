// Slipway's samplers on a synthetic objective, for bench/tune_samplers.sh to put beside Optuna's
// on the same objective (bench/tune_peer.py computes the same function).
//
// Usage: slipway_tune_sampler_bench tpe|random|qmc SEEDS TRIALS
// Prints, per seed, "seed best_value sampler_us_per_trial" (the sampler's own time per trial).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "slipway/tune.h"

namespace {

using slipway::tune::ParamValues;

constexpr const char* kSpace = R"(
family: gbdt
params:
  learning_rate: {type: float, low: 0.01, high: 0.3, log: true}
  max_depth: {type: int, low: 3, high: 10}
  subsample: {type: float, low: 0.5, high: 1}
  lambda: {type: float, low: 0.01, high: 10, log: true}
  grow_policy: {type: categorical, choices: [depthwise, lossguide]}
  max_leaves: {type: int, low: 16, high: 256, log: true, when: {grow_policy: [lossguide]}}
)";

double number(const ParamValues& values, const char* name) { return std::strtod(values.at(name).c_str(), nullptr); }

// Its minimum, 0, at learning_rate 0.05, max_depth 6, subsample 0.8, lambda 1, lossguide with
// 64 leaves. bench/tune_peer.py computes the same function.
double objective(const ParamValues& values) {
  double lr = std::log10(number(values, "learning_rate") / 0.05);
  double depth = number(values, "max_depth") - 6;
  double subsample = number(values, "subsample") - 0.8;
  double lambda = std::log10(number(values, "lambda"));
  double loss = lr * lr + 0.05 * depth * depth + subsample * subsample + 0.1 * lambda * lambda;
  if (values.at("grow_policy") == "lossguide") {
    double leaves = std::log2(number(values, "max_leaves") / 64);
    loss += 0.05 * leaves * leaves;
  } else {
    loss += 0.3;
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s tpe|random|qmc SEEDS TRIALS\n", argv[0]);
    return 2;
  }
  std::string sampler_name = argv[1];
  int seeds = std::atoi(argv[2]);
  int trials = std::atoi(argv[3]);
  auto space = slipway::tune::parse_search_space(kSpace, "bench space", "gbdt");
  if (!space.ok()) {
    std::fprintf(stderr, "%s\n", space.status().message().c_str());
    return 1;
  }
  for (int seed = 1; seed <= seeds; ++seed) {
    std::unique_ptr<slipway::tune::Sampler> sampler;
    if (sampler_name == "tpe") {
      slipway::tune::TpeOptions options;
      options.seed = static_cast<std::uint64_t>(seed);
      sampler = slipway::tune::make_tpe_sampler(options);
    } else if (sampler_name == "qmc") {
      slipway::tune::QmcOptions options;
      options.seed = static_cast<std::uint64_t>(seed);
      sampler = slipway::tune::make_qmc_sampler(options);
    } else {
      sampler = slipway::tune::make_random_sampler(static_cast<std::uint64_t>(seed));
    }
    std::vector<slipway::tune::Trial> history;
    double best = 1e300;
    double sampling_seconds = 0;
    for (int number = 0; number < trials; ++number) {
      auto start = std::chrono::steady_clock::now();
      slipway::tune::Trial trial;
      trial.number = number;
      trial.params = sampler->sample(*space, history, slipway::tune::Direction::kMinimize);
      sampling_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      trial.value = objective(trial.params);
      trial.state = slipway::tune::TrialState::kComplete;
      best = std::min(best, trial.value);
      history.push_back(std::move(trial));
    }
    std::printf("%d %.6g %.3f\n", seed, best, sampling_seconds / trials * 1e6);
  }
  return 0;
}
