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

}  // namespace
}  // namespace slipway::tune
