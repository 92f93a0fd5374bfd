// Canary analysis: each criterion fails a canary on its own, none passes it before the interval
// is over, and too few requests decide nothing.
#include "serve/rollouts.h"

#include <gtest/gtest.h>

#include <random>

namespace slipway::serve {
namespace {

RouteSample route_sample(std::int64_t requests, std::int64_t failures, double latency_ms, double score_mean,
                         std::mt19937& random) {
  RouteSample result;
  result.requests = requests;
  result.failures = failures;
  std::normal_distribution<double> score(score_mean, 0.05);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  for (std::int64_t index = 0; index < std::min<std::int64_t>(requests, 2048); ++index) {
    result.latencies_ms.push_back(latency_ms * jitter(random));
    result.scores.push_back(score(random));
  }
  return result;
}

TEST(RolloutAnalysis, EachCriterionFailsACanaryAndNonePassesBeforeTheInterval) {
  std::mt19937 random(3);
  registry::RolloutCriteria criteria;
  RouteSample stable = route_sample(500, 0, 0.3, 0.3, random);
  RouteSample good = route_sample(60, 0, 0.3, 0.3, random);
  EXPECT_EQ(analyse(good, stable, criteria, false).outcome, Verdict::Outcome::kWaiting);
  Verdict passed = analyse(good, stable, criteria, true);
  EXPECT_EQ(passed.outcome, Verdict::Outcome::kPassed) << passed.text;

  Verdict errors = analyse(route_sample(60, 6, 0.3, 0.3, random), stable, criteria, false);
  EXPECT_EQ(errors.outcome, Verdict::Outcome::kFailed);  // failures decide at once
  EXPECT_NE(errors.text.find("error rate 0.1000"), std::string::npos) << errors.text;

  Verdict slow = analyse(route_sample(60, 0, 5.0, 0.3, random), stable, criteria, true);
  EXPECT_EQ(slow.outcome, Verdict::Outcome::kFailed);
  EXPECT_NE(slow.text.find("p99"), std::string::npos) << slow.text;
  // Three times as slow but within a millisecond is noise, not a failure.
  EXPECT_EQ(analyse(route_sample(60, 0, 0.9, 0.3, random), stable, criteria, true).outcome, Verdict::Outcome::kPassed);

  Verdict shifted = analyse(route_sample(60, 0, 0.3, 0.8, random), stable, criteria, true);
  EXPECT_EQ(shifted.outcome, Verdict::Outcome::kFailed);
  EXPECT_NE(shifted.text.find("score distributions"), std::string::npos) << shifted.text;

  Verdict few = analyse(route_sample(10, 10, 9.0, 0.9, random), stable, criteria, true);
  EXPECT_EQ(few.outcome, Verdict::Outcome::kWaiting) << few.text;
}

TEST(RolloutAnalysis, JensenShannonDistanceRunsFromZeroToOne) {
  std::vector<double> low(100, 0.1), high(100, 0.9), mixed;
  for (int index = 0; index < 100; ++index) mixed.push_back(index % 2 == 0 ? 0.1 : 0.9);
  EXPECT_NEAR(jensen_shannon_distance(low, low), 0.0, 1e-12);
  EXPECT_NEAR(jensen_shannon_distance(low, high), 1.0, 1e-12);
  double half = jensen_shannon_distance(low, mixed);
  EXPECT_GT(half, 0.3);
  EXPECT_LT(half, 0.8);
  EXPECT_EQ(jensen_shannon_distance({}, low), 0.0);
}

}  // namespace
}  // namespace slipway::serve
