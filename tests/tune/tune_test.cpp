// Search spaces (the YAML form, the default spaces, the checks) and the samplers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "slipway/train.h"
#include "slipway/tune.h"

namespace slipway::tune {
namespace {

constexpr const char* kGbdtSpace = R"(
family: gbdt
params:
  learning_rate: {type: float, low: 0.01, high: 0.3, log: true}
  max_depth: {type: int, low: 3, high: 10}
  grow_policy: {type: categorical, choices: [depthwise, lossguide]}
  max_leaves: {type: int, low: 16, high: 256, log: true, when: {grow_policy: [lossguide]}}
)";

std::string refusal(std::string_view yaml, const std::string& family = "gbdt") {
  auto space = parse_search_space(yaml, "space.yaml", family);
  return space.ok() ? std::string("accepted") : space.status().message();
}

TEST(SearchSpace, ReadsEveryKindAndWritesItBack) {
  auto space = parse_search_space(kGbdtSpace, "space.yaml", "");
  ASSERT_TRUE(space.ok()) << space.status().message();
  EXPECT_EQ(space->family, "gbdt");
  ASSERT_EQ(space->params.size(), 4u);
  EXPECT_EQ(space->params[0].kind, ParamKind::kFloat);
  EXPECT_TRUE(space->params[0].log);
  EXPECT_EQ(space->params[1].kind, ParamKind::kInt);
  EXPECT_EQ(space->params[2].choices, (std::vector<std::string>{"depthwise", "lossguide"}));
  EXPECT_EQ(space->params[3].parent, "grow_policy");
  EXPECT_EQ(space->params[3].parent_values, (std::vector<std::string>{"lossguide"}));
  auto again = parse_search_space(search_space_yaml(*space), "again.yaml", "gbdt");
  ASSERT_TRUE(again.ok()) << again.status().message() << "\n" << search_space_yaml(*space);
  EXPECT_EQ(search_space_yaml(*again), search_space_yaml(*space));
}

TEST(SearchSpace, RefusesBadRangesWithTheParameterNamed) {
  auto one = [](const std::string& line) { return refusal("params:\n  " + line + "\n"); };
  EXPECT_NE(
      one("learning_rate: {type: float, low: 0.3, high: 0.3}").find("'learning_rate' has an empty or inverted range"),
      std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: 0.3, high: 0.01}").find("inverted"), std::string::npos);
  EXPECT_NE(one("lambda: {type: float, low: 0, high: 10, log: true}").find("log-scaled: its range must lie above zero"),
            std::string::npos);
  EXPECT_NE(one("grow_policy: {type: categorical, choices: []}").find("has no choices"), std::string::npos);
  EXPECT_NE(one("grow_policy: {type: categorical, choices: [depthwise, sideways]}").find("no choice 'sideways'"),
            std::string::npos);
  EXPECT_NE(one("learning_rat: {type: float, low: 0.01, high: 0.3}").find("did you mean 'learning_rate'?"),
            std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: 0.01, high: 3}").find("outside what it accepts, [1e-06, 1]"),
            std::string::npos);
  EXPECT_NE(one("max_depth: {type: float, low: 2, high: 8}").find("integer"), std::string::npos);
  EXPECT_NE(one("max_depth: {type: int, low: 2.5, high: 8}").find("whole numbers"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: .nan, high: 0.3}").find("finite"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: 0.01, high: .inf}").find("finite"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: 0.01}").find("needs low and high"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: x, high: 0.3}").find("wrong kind"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: flaot, low: 0.01, high: 0.3}").find("type 'flaot'"), std::string::npos);
  EXPECT_NE(one("learning_rate: {type: float, low: 0.01, high: 0.3, logg: true}").find("did you mean 'log'?"),
            std::string::npos);
  EXPECT_NE(one("objective: {type: categorical, choices: [binary:logistic]}").find("not tuned"), std::string::npos);
  EXPECT_NE(one("max_leaves: {type: int, low: 16, high: 64, when: {grow_policy: [lossguide]}}")
                .find("depends on 'grow_policy', which is not a parameter listed before it"),
            std::string::npos);
  EXPECT_NE(refusal("params:\n  grow_policy: {type: categorical, choices: [depthwise]}\n"
                    "  max_leaves: {type: int, low: 16, high: 64, when: {grow_policy: [leafwise]}}\n")
                .find("'leafwise', which is not one of its choices"),
            std::string::npos);
  EXPECT_NE(refusal("params:\n  max_depth: {type: int, low: 2, high: 8}\n  max_depth: {type: int, low: 2, high: 9}\n"),
            "accepted");
  EXPECT_NE(refusal("params: {}\n").find("no parameters to tune"), std::string::npos);
  EXPECT_NE(refusal("params: [1, 2]\n").find("params: must map"), std::string::npos);
  EXPECT_NE(refusal("family: mlp\nparams:\n  dropout: {type: float, low: 0, high: 0.5}\n").find("not 'gbdt'"),
            std::string::npos);
  EXPECT_NE(
      refusal("params:\n  l2: {type: float, low: 0.01, high: 1}\n").find("unknown parameter 'l2' for model 'gbdt'"),
      std::string::npos);
  EXPECT_NE(refusal("params:\n  x: [\n").find("space.yaml:"), std::string::npos);  // not YAML: file and line
  EXPECT_NE(refusal("params:\n  dropout: {type: float, low: 0, high: 0.5}\n", "forest").find("unknown model 'forest'"),
            std::string::npos);
}

TEST(SearchSpace, EveryFamilyHasADefaultSpaceInsideItsDeclaredLimits) {
  for (const auto& family : train::model_families()) {
    auto space = default_search_space(family);
    ASSERT_TRUE(space.ok()) << family << ": " << space.status().message();
    EXPECT_TRUE(check_search_space(*space).ok()) << family;
    EXPECT_FALSE(space->params.empty()) << family;
  }
  EXPECT_FALSE(default_search_space("forest").ok());
}

SearchSpace gbdt_space() {
  auto space = parse_search_space(kGbdtSpace, "space.yaml", "gbdt");
  EXPECT_TRUE(space.ok()) << space.status().message();
  return *space;
}

void expect_inside(const SearchSpace& space, const ParamValues& values) {
  for (const auto& param : space.params) {
    auto found = values.find(param.name);
    bool active = param.parent.empty() || std::find(param.parent_values.begin(), param.parent_values.end(),
                                                    values.at(param.parent)) != param.parent_values.end();
    ASSERT_EQ(found != values.end(), active) << param.name;
    if (!active) continue;
    if (param.kind == ParamKind::kCategorical) {
      EXPECT_NE(std::find(param.choices.begin(), param.choices.end(), found->second), param.choices.end());
      continue;
    }
    auto number = parse_finite_number(found->second);
    ASSERT_TRUE(number.has_value()) << param.name << "=" << found->second;
    EXPECT_GE(*number, param.low) << param.name;
    EXPECT_LE(*number, param.high) << param.name;
    if (param.kind == ParamKind::kInt) {
      EXPECT_EQ(found->second.find('.'), std::string::npos) << found->second;
    }
  }
}

TEST(Samplers, RandomStaysInsideTheSpaceFollowsConditionsAndRepeatsForASeed) {
  auto space = gbdt_space();
  auto sampler = make_random_sampler(7);
  auto again = make_random_sampler(7);
  std::set<std::string> depths;
  int lossguide = 0;
  int below_0_05 = 0;
  for (int i = 0; i < 400; ++i) {
    auto values = sampler->sample(space, {}, Direction::kMaximize);
    EXPECT_EQ(values, again->sample(space, {}, Direction::kMaximize));
    expect_inside(space, values);
    depths.insert(values.at("max_depth"));
    lossguide += values.at("grow_policy") == "lossguide";
    // Log-uniform on [0.01, 0.3]: P(x < 0.05) = log(5) / log(30) = 0.47; uniform would give 0.14.
    below_0_05 += *parse_finite_number(values.at("learning_rate")) < 0.05;
  }
  EXPECT_EQ(depths.size(), 8u);  // every whole number from 3 to 10, the ends included
  EXPECT_GT(lossguide, 150);
  EXPECT_LT(lossguide, 250);
  EXPECT_GT(below_0_05, 150);
  EXPECT_LT(below_0_05, 230);
}

TEST(Samplers, TpeGoodSetIsOptunasGamma) {
  EXPECT_EQ(tpe_good_count(10), 1);
  EXPECT_EQ(tpe_good_count(11), 2);
  EXPECT_EQ(tpe_good_count(100), 10);
  EXPECT_EQ(tpe_good_count(1000), 25);
}

// A function with its minimum at learning_rate 0.05, max_depth 6, lossguide with max_leaves 64.
double synthetic_loss(const ParamValues& values) {
  double lr = std::log10(*parse_finite_number(values.at("learning_rate")) / 0.05);
  double depth = *parse_finite_number(values.at("max_depth")) - 6;
  double loss = lr * lr + 0.05 * depth * depth;
  if (values.at("grow_policy") == "lossguide") {
    double leaves = std::log2(*parse_finite_number(values.at("max_leaves")) / 64);
    loss += 0.05 * leaves * leaves;
  } else {
    loss += 0.3;
  }
  return loss;
}

double best_after(Sampler& sampler, const SearchSpace& space, int trials) {
  std::vector<Trial> history;
  double best = 1e300;
  for (int number = 0; number < trials; ++number) {
    Trial trial;
    trial.number = number;
    trial.params = sampler.sample(space, history, Direction::kMinimize);
    expect_inside(space, trial.params);
    trial.value = synthetic_loss(trial.params);
    trial.state = TrialState::kComplete;
    best = std::min(best, trial.value);
    history.push_back(std::move(trial));
  }
  return best;
}

// TPE learns where the good trials are: over 20 seeds its best after 40 trials is lower than
// random search's, on average and in most seeds.
TEST(Samplers, TpeFindsBetterTrialsThanRandomSearch) {
  auto space = gbdt_space();
  double tpe_total = 0;
  double random_total = 0;
  int tpe_wins = 0;
  constexpr int kSeeds = 20;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    TpeOptions options;
    options.seed = seed;
    auto tpe = make_tpe_sampler(options);
    auto random = make_random_sampler(seed);
    double tpe_best = best_after(*tpe, space, 40);
    double random_best = best_after(*random, space, 40);
    tpe_total += tpe_best;
    random_total += random_best;
    tpe_wins += tpe_best < random_best;
  }
  RecordProperty("tpe_mean_best", std::to_string(tpe_total / kSeeds));
  RecordProperty("random_mean_best", std::to_string(random_total / kSeeds));
  RecordProperty("tpe_wins", tpe_wins);
  EXPECT_LT(tpe_total, 0.6 * random_total) << "TPE mean " << tpe_total / kSeeds << ", random " << random_total / kSeeds;
  EXPECT_GE(tpe_wins, 14);
}

// Multivariate TPE draws the unconditional parameters from one observation's kernels together:
// it stays inside the space, follows the conditions (drawn one by one after), repeats for a seed,
// and on a narrow diagonal valley, where only x and y together say what is good, it beats the
// univariate sampler, which sees each parameter's marginal only.
TEST(Samplers, MultivariateTpeDrawsWhatWorksTogetherTogether) {
  auto space = gbdt_space();
  TpeOptions options;
  options.multivariate = true;
  options.seed = 5;
  auto first = make_tpe_sampler(options);
  auto again = make_tpe_sampler(options);
  std::vector<Trial> history;
  for (int number = 0; number < 30; ++number) {
    auto params = first->sample(space, history, Direction::kMinimize);
    ASSERT_EQ(params, again->sample(space, history, Direction::kMinimize)) << "trial " << number;
    expect_inside(space, params);
    EXPECT_EQ(params.count("max_leaves"), params.at("grow_policy") == "lossguide" ? 1u : 0u);
    history.push_back({number, params, TrialState::kComplete, synthetic_loss(params)});
  }

  SearchSpace valley{"gbdt", {}};
  valley.params.push_back({.name = "subsample", .kind = ParamKind::kFloat, .low = 0.1, .high = 1.0});
  valley.params.push_back({.name = "colsample_bytree", .kind = ParamKind::kFloat, .low = 0.1, .high = 1.0});
  auto valley_loss = [](const ParamValues& values) {
    double x = *parse_finite_number(values.at("subsample"));
    double y = *parse_finite_number(values.at("colsample_bytree"));
    return 50 * (x - y) * (x - y) + 0.2 * (x + y - 1.6) * (x + y - 1.6);
  };
  auto mean_best = [&](bool multivariate) {
    double total = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      auto sampler = make_tpe_sampler({.seed = seed, .multivariate = multivariate});
      std::vector<Trial> trials;
      double best = 1e300;
      for (int number = 0; number < 60; ++number) {
        auto params = sampler->sample(valley, trials, Direction::kMinimize);
        double loss = valley_loss(params);
        best = std::min(best, loss);
        trials.push_back({number, params, TrialState::kComplete, loss});
      }
      total += best;
    }
    return total / 20;
  };
  double joint = mean_best(true);
  double independent = mean_best(false);
  RecordProperty("multivariate_mean_best", std::to_string(joint));
  RecordProperty("univariate_mean_best", std::to_string(independent));
  EXPECT_LT(joint, independent) << "multivariate " << joint << ", univariate " << independent;
}

// Maximizing the negated loss is the same search as minimizing the loss.
TEST(Samplers, TpeMaximizesAsItMinimizesTheNegation) {
  auto space = gbdt_space();
  TpeOptions options;
  options.seed = 3;
  auto minimizing = make_tpe_sampler(options);
  auto maximizing = make_tpe_sampler(options);
  std::vector<Trial> low, high;
  for (int number = 0; number < 30; ++number) {
    auto a = minimizing->sample(space, low, Direction::kMinimize);
    auto b = maximizing->sample(space, high, Direction::kMaximize);
    ASSERT_EQ(a, b) << "trial " << number;
    low.push_back({number, a, TrialState::kComplete, synthetic_loss(a)});
    high.push_back({number, b, TrialState::kComplete, -synthetic_loss(b)});
  }
}

// Failed, pruned and running trials and NaN values do not count as observations; a trial from
// another space (out of range, unknown choice) is skipped, not a crash.
TEST(Samplers, TpeIgnoresWhatIsNotAFinishedObservation) {
  auto space = gbdt_space();
  std::vector<Trial> history;
  for (int number = 0; number < 12; ++number) {
    Trial trial;
    trial.number = number;
    trial.params = {{"learning_rate", "5"}, {"max_depth", "99"}, {"grow_policy", "sideways"}, {"max_leaves", "x"}};
    trial.state =
        number % 3 == 0 ? TrialState::kFailed : (number % 3 == 1 ? TrialState::kPruned : TrialState::kComplete);
    trial.value = number % 2 == 0 ? std::nan("") : 0.5;
    history.push_back(trial);
  }
  TpeOptions options;
  options.seed = 5;
  auto sampler = make_tpe_sampler(options);
  for (int i = 0; i < 50; ++i) expect_inside(space, sampler->sample(space, history, Direction::kMinimize));
  options.startup_trials = 0;  // TPE at once, over the foreign trials
  auto eager = make_tpe_sampler(options);
  for (int i = 0; i < 50; ++i) expect_inside(space, eager->sample(space, history, Direction::kMinimize));
}

// Optuna counts pruned trials: the ones that got furthest with the best value there form the
// good set, so a study whose trials are mostly pruned still learns where to look.
TEST(Samplers, TpeLearnsFromPrunedTrials) {
  SearchSpace space;
  space.family = "gbdt";
  space.params = {{"learning_rate", ParamKind::kFloat, 0.001, 1.0, true}};
  std::vector<Trial> history;
  for (int number = 0; number < 30; ++number) {
    Trial trial;
    trial.number = number;
    trial.state = TrialState::kPruned;
    // Learning rates spread in log space; the loss at the last step is lowest near 0.5.
    double rate = std::pow(10.0, -3.0 + 3.0 * (number + 0.5) / 30.0);
    trial.params = {{"learning_rate", std::to_string(rate)}};
    trial.intermediate = {{1, 0.9}, {4, std::abs(std::log10(rate / 0.5))}};
    history.push_back(trial);
  }
  std::vector<double> drawn;
  for (std::uint64_t seed = 0; seed < 41; ++seed) {
    TpeOptions options;
    options.seed = seed;
    options.intermediate_direction = Direction::kMinimize;
    // The study maximizes its objective; the intermediate values are a loss all the same.
    auto params = make_tpe_sampler(options)->sample(space, history, Direction::kMaximize);
    drawn.push_back(std::stod(params.at("learning_rate")));
  }
  std::sort(drawn.begin(), drawn.end());
  // Uniform in log space the median would be near 0.03.
  EXPECT_GT(drawn[drawn.size() / 2], 0.15);
}

}  // namespace
}  // namespace slipway::tune

namespace slipway::tune {
namespace {

Trial reported(int number, std::map<int, double> intermediate, TrialState state = TrialState::kComplete) {
  Trial trial;
  trial.number = number;
  trial.state = state;
  trial.intermediate = std::move(intermediate);
  if (!trial.intermediate.empty()) trial.value = trial.intermediate.rbegin()->second;
  return trial;
}

TEST(Pruners, MedianPrunesBelowTheMedianAtTheSameStepAfterItsStartupTrials) {
  auto pruner = make_median_pruner({});
  std::vector<Trial> trials;
  trials.reserve(7);
  auto current = reported(100, {{0, 0.6}, {3, 0.65}}, TrialState::kRunning);
  for (int i = 0; i < 4; ++i) trials.push_back(reported(i, {{3, 0.5 + 0.1 * i}}));
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMaximize));  // 4 completed: still starting up
  trials.push_back(reported(4, {{3, 0.9}}));
  trials.push_back(reported(5, {{3, 0.99}}, TrialState::kRunning));  // running trials do not count
  trials.push_back(reported(6, {{3, 0.99}}, TrialState::kPruned));
  // Completed at step 3: 0.5 0.6 0.7 0.8 0.9, median 0.7; the trial's best so far is 0.65.
  EXPECT_TRUE(pruner->should_prune(current, trials, Direction::kMaximize));
  current.intermediate[3] = 0.75;
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMaximize));
  // Minimizing, 0.65 is better than the median.
  current.intermediate[3] = 0.65;
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMinimize));
  current.intermediate[0] = 0.8;
  current.intermediate[3] = 0.75;
  EXPECT_TRUE(pruner->should_prune(current, trials, Direction::kMinimize));
  // A step no completed trial reported: nothing to compare with.
  auto elsewhere = reported(101, {{7, 0.1}}, TrialState::kRunning);
  EXPECT_FALSE(pruner->should_prune(elsewhere, trials, Direction::kMaximize));
  // Only NaN so far: stopped.
  auto broken = reported(102, {{3, std::nan("")}}, TrialState::kRunning);
  EXPECT_TRUE(pruner->should_prune(broken, trials, Direction::kMaximize));
  // Within the warm-up: never.
  MedianPrunerOptions warm;
  warm.warmup_steps = 5;
  auto warming = make_median_pruner(warm);
  current.intermediate = {{3, 0.1}};
  EXPECT_FALSE(warming->should_prune(current, trials, Direction::kMaximize));
}

TEST(Pruners, MedianJudgesOncePerInterval) {
  MedianPrunerOptions options;
  options.startup_trials = 1;
  options.interval_steps = 2;
  auto pruner = make_median_pruner(options);
  std::vector<Trial> trials{reported(0, {{2, 0.9}, {3, 0.9}})};
  auto current = reported(1, {{0, 0.1}, {1, 0.1}, {2, 0.1}}, TrialState::kRunning);
  EXPECT_TRUE(pruner->should_prune(current, trials, Direction::kMaximize));  // step 2 opens an interval
  current.intermediate[3] = 0.1;
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMaximize));  // step 3 is inside it
}

TEST(Pruners, SuccessiveHalvingPromotesTheBestQuarterOfEachRung) {
  AshaOptions options;
  options.min_resource = 1;
  auto pruner = make_asha_pruner(options);
  std::vector<Trial> trials;
  // The first trial at rung 0 (step 1) is alone there: it goes on, and records its value.
  auto first = reported(0, {{1, 0.5}}, TrialState::kRunning);
  EXPECT_FALSE(pruner->should_prune(first, trials, Direction::kMaximize));
  EXPECT_EQ(first.rung_values.at(0), 0.5);
  trials.push_back(first);
  for (int i = 1; i < 8; ++i) {
    Trial other = reported(i, {{1, 0.1 * i}}, TrialState::kPruned);
    other.rung_values[0] = 0.1 * i;
    trials.push_back(other);
  }
  // Nine values at rung 0 with the new one: the best 9 / 4 = 2 go on (0.7 and 0.65 here).
  auto good = reported(20, {{1, 0.65}}, TrialState::kRunning);
  EXPECT_FALSE(pruner->should_prune(good, trials, Direction::kMaximize));
  auto middling = reported(21, {{1, 0.55}}, TrialState::kRunning);
  EXPECT_TRUE(pruner->should_prune(middling, trials, Direction::kMaximize));
  // Minimizing, the smallest go on.
  auto low = reported(22, {{1, 0.15}}, TrialState::kRunning);
  EXPECT_FALSE(pruner->should_prune(low, trials, Direction::kMinimize));
  // Between rungs (steps 2 and 3) nothing is judged; step 4 is rung 1, where it is alone again.
  good.intermediate[3] = 0.0;
  EXPECT_FALSE(pruner->should_prune(good, trials, Direction::kMaximize));
  good.intermediate[4] = 0.7;
  EXPECT_FALSE(pruner->should_prune(good, trials, Direction::kMaximize));
  EXPECT_EQ(good.rung_values.at(1), 0.7);
  // NaN at a rung: stopped.
  auto broken = reported(23, {{1, std::nan("")}}, TrialState::kRunning);
  EXPECT_TRUE(pruner->should_prune(broken, trials, Direction::kMaximize));
}

TEST(Pruners, SuccessiveHalvingAutoResourceWaitsForACompletedTrial) {
  auto pruner = make_asha_pruner({});
  std::vector<Trial> trials{reported(0, {{1, 0.9}}, TrialState::kRunning)};
  trials[0].rung_values[0] = 0.9;
  auto current = reported(1, {{1, 0.1}}, TrialState::kRunning);
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMaximize));  // no completed trial yet
  trials.push_back(reported(2, {{399, 0.8}}));                                // 400 steps: min_resource = 399 / 100 = 3
  EXPECT_FALSE(pruner->should_prune(current, trials, Direction::kMaximize));  // step 1 < 3
  current.intermediate[3] = 0.1;
  Trial third = reported(3, {{3, 0.9}}, TrialState::kPruned);
  third.rung_values[0] = 0.9;
  trials.push_back(third);
  EXPECT_TRUE(pruner->should_prune(current, trials, Direction::kMaximize));
}

// A study of 40 trials whose learning curves keep their order (each rises to its own final
// value): both pruners keep the best trial, and successive halving spends under half the steps.
TEST(Pruners, OnOrderedCurvesThePrunersKeepTheBestTrialForAFractionOfTheSteps) {
  constexpr int kSteps = 100;
  constexpr int kTrials = 40;
  auto curve = [](int trial, int step) {
    double quality = std::fmod(0.37 * trial * trial + 0.11 * trial, 1.0);
    return quality * (1.0 - std::exp(-(step + 1) / 20.0));
  };
  for (int kind = 0; kind < 2; ++kind) {
    AshaOptions asha;
    asha.min_resource = 1;
    auto pruner = kind == 0 ? make_asha_pruner(asha) : make_median_pruner({});
    std::vector<Trial> trials;
    long steps = 0;
    double best = -1;
    double best_unpruned = -1;
    for (int number = 0; number < kTrials; ++number) {
      best_unpruned = std::max(best_unpruned, curve(number, kSteps - 1));
      Trial trial;
      trial.number = number;
      trial.state = TrialState::kComplete;
      for (int step = 0; step < kSteps; ++step) {
        ++steps;
        trial.intermediate[step] = curve(number, step);
        if (pruner->should_prune(trial, trials, Direction::kMaximize)) {
          trial.state = TrialState::kPruned;
          break;
        }
      }
      if (trial.state == TrialState::kComplete) {
        trial.value = trial.intermediate.rbegin()->second;
        best = std::max(best, trial.value);
      }
      trials.push_back(std::move(trial));
    }
    double share = static_cast<double>(steps) / (kSteps * kTrials);
    RecordProperty(kind == 0 ? "asha_step_share" : "median_step_share", std::to_string(share));
    EXPECT_EQ(best, best_unpruned) << (kind == 0 ? "asha" : "median");
    if (kind == 0) {
      EXPECT_LT(share, 0.5);
    } else {
      EXPECT_LT(share, 0.8);
    }
  }
}

}  // namespace
}  // namespace slipway::tune

namespace slipway::tune {
namespace {

TEST(Samplers, GridVisitsEveryCombinationOnceUnderItsConditions) {
  auto space = parse_search_space(R"(
params:
  learning_rate: {type: float, low: 0.01, high: 1, log: true}
  max_depth: {type: int, low: 3, high: 4}
  grow_policy: {type: categorical, choices: [depthwise, lossguide]}
  max_leaves: {type: int, low: 16, high: 17, when: {grow_policy: [lossguide]}}
)",
                                  "grid.yaml", "gbdt");
  ASSERT_TRUE(space.ok()) << space.status().message();
  auto points = grid_points(*space, 3);
  ASSERT_TRUE(points.ok()) << points.status().message();
  // 3 learning rates x 2 depths x (depthwise, or lossguide with 2 leaf counts) = 18.
  ASSERT_EQ(points->size(), 18u);
  std::set<std::string> rates;
  for (const auto& point : *points) rates.insert(point.at("learning_rate"));
  EXPECT_EQ(rates, (std::set<std::string>{"0.01", "0.1", "1"}));  // log-spaced, both ends
  auto sampler = make_grid_sampler(*points, 11);
  std::vector<Trial> trials;
  std::set<ParamValues> seen;
  for (int number = 0; number < 18; ++number) {
    auto values = sampler->sample(*space, trials, Direction::kMinimize);
    expect_inside(*space, values);
    EXPECT_TRUE(seen.insert(values).second) << "trial " << number << " repeats a point";
    trials.push_back({number, values, number % 2 ? TrialState::kFailed : TrialState::kRunning, 0.0});
  }
  // Exhausted: a point again, never nothing.
  EXPECT_TRUE(seen.count(sampler->sample(*space, trials, Direction::kMinimize)));
  // Another seed, another order of the same points.
  auto order = [&](std::uint64_t seed) {
    auto grid = make_grid_sampler(*points, seed);
    std::vector<Trial> visited;
    visited.reserve(18);
    for (int number = 0; number < 18; ++number) {
      visited.push_back({number, grid->sample(*space, visited, Direction::kMinimize), TrialState::kComplete, 0.0});
    }
    std::vector<ParamValues> sequence;
    sequence.reserve(visited.size());
    for (const auto& trial : visited) sequence.push_back(trial.params);
    return sequence;
  };
  auto first = order(11);
  auto second = order(12);
  EXPECT_NE(first, second);
  EXPECT_EQ(std::set<ParamValues>(first.begin(), first.end()), std::set<ParamValues>(second.begin(), second.end()));
}

TEST(Samplers, GridRefusesMoreThanItsLimit) {
  auto space = parse_search_space("params:\n  max_leaves: {type: int, low: 0, high: 65536}\n", "grid.yaml", "gbdt");
  ASSERT_TRUE(space.ok()) << space.status().message();
  auto points = grid_points(*space, 5, 1000);
  ASSERT_FALSE(points.ok());
  EXPECT_NE(points.status().message().find("'max_leaves' alone takes 65537 values"), std::string::npos)
      << points.status().message();
  auto wide = default_search_space("gbdt");
  ASSERT_TRUE(wide.ok());
  auto many = grid_points(*wide, 10, 1000);  // 10 x 9 x 10 x ... points
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 1000 points"), std::string::npos);
  EXPECT_FALSE(grid_points(*wide, 0).ok());
}

}  // namespace
}  // namespace slipway::tune

namespace slipway::tune {
namespace {

// Points of scipy.stats.qmc.Sobol(d=21, scramble=False): the same direction numbers, the same order.
TEST(Samplers, SobolPointsAreScipys) {
  std::vector<double> row_100 = {0.4140625, 0.2578125, 0.7734375, 0.7265625, 0.8828125, 0.7421875, 0.0234375,
                                 0.4765625, 0.6328125, 0.6953125, 0.4609375, 0.6796875, 0.4765625, 0.8515625,
                                 0.3203125, 0.4921875, 0.6796875, 0.7421875, 0.8359375, 0.3359375, 0.7578125};
  std::vector<double> row_1023 = {0.0009765625, 0.7529296875, 0.6123046875, 0.1455078125, 0.1865234375, 0.4384765625,
                                  0.1396484375, 0.6181640625, 0.3447265625, 0.8505859375, 0.6787109375, 0.0361328125,
                                  0.1298828125, 0.6650390625, 0.3623046875, 0.4638671875, 0.3134765625, 0.8759765625,
                                  0.5849609375, 0.3193359375, 0.8662109375};
  EXPECT_EQ(sobol_point(100, 21), row_100);
  EXPECT_EQ(sobol_point(1023, 21), row_1023);
  EXPECT_EQ(sobol_point(0, 3), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(sobol_point(5, 40).size(), 21u);  // the table's dimensions
}

// 64 Sobol points put exactly 4 in each of the 16 quarter-by-quarter cells of two ranges (a
// (0, 6, 2)-net), scrambled or not; random points do not. The seed repeats the sequence.
TEST(Samplers, QmcFillsTheSpaceEvenly) {
  auto space = parse_search_space(
      "params:\n  subsample: {type: float, low: 0.5, high: 1}\n  colsample_bytree: {type: float, low: 0.5, high: 1}\n",
      "qmc.yaml", "gbdt");
  ASSERT_TRUE(space.ok()) << space.status().message();
  auto cells = [&](Sampler& sampler) {
    std::vector<Trial> trials;
    std::map<std::pair<int, int>, int> counts;
    for (int number = 0; number < 64; ++number) {
      auto values = sampler.sample(*space, trials, Direction::kMinimize);
      expect_inside(*space, values);
      int x = static_cast<int>((*parse_finite_number(values.at("subsample")) - 0.5) * 8);
      int y = static_cast<int>((*parse_finite_number(values.at("colsample_bytree")) - 0.5) * 8);
      ++counts[{x, y}];
      trials.push_back({number, values, TrialState::kComplete, 0.0});
    }
    return counts;
  };
  for (bool scramble : {false, true}) {
    QmcOptions options;
    options.scramble = scramble;
    options.seed = 9;
    auto qmc = make_qmc_sampler(options);
    auto counts = cells(*qmc);
    EXPECT_EQ(counts.size(), 16u) << "scramble " << scramble;
    for (const auto& [cell, count] : counts) EXPECT_EQ(count, 4) << "scramble " << scramble;
  }
  auto random = make_random_sampler(9);
  auto random_counts = cells(*random);
  bool uneven = random_counts.size() < 16 || std::any_of(random_counts.begin(), random_counts.end(),
                                                         [](const auto& cell) { return cell.second != 4; });
  EXPECT_TRUE(uneven);
  QmcOptions unscrambled;
  unscrambled.scramble = false;
  auto first = make_qmc_sampler(unscrambled)->sample(*space, {}, Direction::kMinimize);
  EXPECT_EQ(first.at("subsample"), "0.5");  // point 0 is the low corner
  QmcOptions seeded;
  seeded.seed = 4;
  EXPECT_EQ(make_qmc_sampler(seeded)->sample(*space, {}, Direction::kMinimize),
            make_qmc_sampler(seeded)->sample(*space, {}, Direction::kMinimize));
}

}  // namespace
}  // namespace slipway::tune

namespace slipway::tune {
namespace {

Trial finished(int number, ParamValues params, double value) {
  Trial trial;
  trial.number = number;
  trial.params = std::move(params);
  trial.state = TrialState::kComplete;
  trial.value = value;
  return trial;
}

TEST(SearchSpace, NarrowsToWhatTheBestTrialsUsed) {
  auto space = gbdt_space();
  std::vector<Trial> trials;
  // The best (lowest) three: learning rates 0.04 to 0.06, depths 5 and 6, lossguide with 32 to 64 leaves.
  trials.push_back(finished(
      0, {{"learning_rate", "0.04"}, {"max_depth", "5"}, {"grow_policy", "lossguide"}, {"max_leaves", "32"}}, 0.1));
  trials.push_back(finished(
      1, {{"learning_rate", "0.06"}, {"max_depth", "6"}, {"grow_policy", "lossguide"}, {"max_leaves", "64"}}, 0.2));
  trials.push_back(finished(
      2, {{"learning_rate", "0.05"}, {"max_depth", "6"}, {"grow_policy", "lossguide"}, {"max_leaves", "48"}}, 0.3));
  for (int i = 3; i < 10; ++i) {
    trials.push_back(
        finished(i, {{"learning_rate", "0.25"}, {"max_depth", "10"}, {"grow_policy", "depthwise"}}, 1.0 + i));
  }
  trials.push_back(finished(10, {{"learning_rate", "0.011"}, {"max_depth", "3"}, {"grow_policy", "depthwise"}}, 0.05));
  trials.back().state = TrialState::kFailed;  // not an observation
  auto narrowed = narrow_search_space(space, trials, Direction::kMinimize, 0.3);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status().message();
  ASSERT_EQ(narrowed->params.size(), 4u);
  const auto& rate = narrowed->params[0];
  EXPECT_LE(rate.low, 0.04);
  EXPECT_GE(rate.high, 0.06);
  EXPECT_GT(rate.low, 0.03);
  EXPECT_LT(rate.high, 0.08);
  EXPECT_TRUE(rate.log);
  const auto& depth = narrowed->params[1];
  EXPECT_EQ(depth.low, 4);  // 5 to 6, widened by 5% of 3..10 and rounded outward
  EXPECT_EQ(depth.high, 7);
  EXPECT_EQ(narrowed->params[2].choices, (std::vector<std::string>{"lossguide"}));
  EXPECT_EQ(narrowed->params[3].name, "max_leaves");
  EXPECT_LE(narrowed->params[3].low, 32);
  EXPECT_GE(narrowed->params[3].high, 64);
  EXPECT_TRUE(check_search_space(*narrowed).ok());
  // Maximizing, the best are the depthwise ones: max_leaves can never be set, so it goes.
  auto other_way = narrow_search_space(space, trials, Direction::kMaximize, 0.3);
  ASSERT_TRUE(other_way.ok()) << other_way.status().message();
  EXPECT_EQ(other_way->params.size(), 3u);
  EXPECT_EQ(other_way->params[2].choices, (std::vector<std::string>{"depthwise"}));
  EXPECT_EQ(other_way->params[1].high, 10);  // kept inside the old range
  EXPECT_EQ(other_way->params[1].low, 9);
  // Refusals.
  EXPECT_FALSE(narrow_search_space(space, {}, Direction::kMinimize, 0.2).ok());
  EXPECT_FALSE(narrow_search_space(space, trials, Direction::kMinimize, 0).ok());
  EXPECT_FALSE(narrow_search_space(space, trials, Direction::kMinimize, 1.5).ok());
  EXPECT_FALSE(narrow_search_space(space, trials, Direction::kMinimize, std::nan("")).ok());
}

}  // namespace
}  // namespace slipway::tune
