// The GBDT trainer's options, each checked for the behaviour it promises.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "slipway/eval.h"
#include "slipway/train.h"
#include "support/test_support.h"

namespace slipway::train {
namespace {

const model::TreeEnsembleModel& trees_of(const TrainSummary& summary) {
  return dynamic_cast<const model::TreeEnsembleModel&>(summary.bundle->model());
}

// Two numeric features and a noisy label: class by region for multiclass, a number otherwise.
std::string synthetic_csv(int rows, bool multiclass, std::uint64_t seed, double noise) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::string csv = "x1,x2,y\n";
  for (int row = 0; row < rows; ++row) {
    double x1 = uniform(random);
    double x2 = uniform(random);
    std::string label;
    if (multiclass) {
      const char* classes[] = {"cat", "dog", "emu"};
      int index = x1 < 0.4 ? 0 : (x2 < 0.5 ? 1 : 2);
      if (uniform(random) < noise) index = (index + 1) % 3;
      label = classes[index];
    } else {
      label = std::to_string(3 * x1 + (x2 > 0.5 ? 2 : 0) + noise * (uniform(random) - 0.5));
    }
    csv += std::to_string(x1) + "," + std::to_string(x2) + "," + label + "\n";
  }
  return csv;
}

data::Table table_of(const std::string& csv) { return *data::parse_csv(csv, "synthetic.csv"); }

TEST(GbdtMulticlass, LearnsRegionsWithOneTreePerClassPerRound) {
  data::Table table = table_of(synthetic_csv(1500, true, 7, 0.0));
  TrainRequest request{.target = "y", .model_family = "gbdt", .params = {{"rounds", "30"}}, .thread_count = 1};
  auto single = fit(table, request);
  ASSERT_TRUE(single.ok()) << single.status().message();
  request.thread_count = 2;
  auto multi = fit(table, request);
  ASSERT_TRUE(multi.ok());
  EXPECT_EQ(single->bundle->serialize(), multi->bundle->serialize());
  EXPECT_EQ(single->bundle->task(), model::Task::kMulticlassClassification);
  EXPECT_EQ(single->bundle->manifest().class_labels, (std::vector<std::string>{"cat", "dog", "emu"}));
  EXPECT_EQ(trees_of(*single).roots().size(), 90u);
  EXPECT_EQ(single->round_metric, "mlogloss");

  auto evaluation = eval::evaluate(*single->bundle, table_of(synthetic_csv(500, true, 8, 0.0)), "");
  ASSERT_TRUE(evaluation.ok());
  EXPECT_GT(evaluation->overall.get("accuracy"), 0.97);
  EXPECT_GT(evaluation->overall.get("macro_f1"), 0.97);

  auto predictions = single->bundle->predict(*data::parse_csv("x1,x2\n0.1,0.9\n0.8,0.1\n0.8,0.9\n", "p.csv"));
  ASSERT_TRUE(predictions.ok());
  ASSERT_EQ(predictions->columns, 3u);
  for (std::size_t row = 0; row < 3; ++row) {
    float total = predictions->scores[row * 3] + predictions->scores[row * 3 + 1] + predictions->scores[row * 3 + 2];
    EXPECT_NEAR(total, 1.0f, 1e-5);
  }
  EXPECT_EQ(single->bundle->predicted_label(*predictions, 0), "cat");
  EXPECT_EQ(single->bundle->predicted_label(*predictions, 1), "dog");
  EXPECT_EQ(single->bundle->predicted_label(*predictions, 2), "emu");

  // The bundle round-trips with its tree groups, and TreeSHAP explains each class's margin.
  auto parsed = model::Bundle::parse(single->bundle->serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->predict(*data::parse_csv("x1,x2\n0.1,0.9\n", "p.csv"))->scores,
            std::vector<float>(predictions->scores.begin(), predictions->scores.begin() + 3));
  const auto& trees = trees_of(*single);
  std::vector<float> row = {0.8f, 0.9f};
  std::vector<float> margins(3);
  std::vector<float> contributions(std::size_t{3} * 3);
  trees.predict_margin(row, 1, margins);
  ASSERT_TRUE(trees.explain(row, contributions).ok());
  for (std::size_t group = 0; group < 3; ++group) {
    float sum = contributions[group * 3] + contributions[group * 3 + 1] + contributions[group * 3 + 2];
    EXPECT_NEAR(sum, margins[group], 1e-4);
  }
}

TEST(GbdtWeights, AWeightOfTwoEqualsTheRowTwice) {
  std::string csv = synthetic_csv(400, false, 3, 1.0);
  std::string weighted = "x1,x2,y,w\n";
  std::string duplicated = "x1,x2,y\n";
  std::size_t line_start = csv.find('\n') + 1;
  int row = 0;
  while (line_start < csv.size()) {
    std::size_t line_end = csv.find('\n', line_start);
    std::string line = csv.substr(line_start, line_end - line_start);
    bool twice = row % 3 == 0;
    weighted += line + (twice ? ",2\n" : ",1\n");
    duplicated += line + "\n";
    if (twice) duplicated += line + "\n";
    line_start = line_end + 1;
    ++row;
  }
  TrainRequest request{.target = "y", .model_family = "gbdt", .params = {{"rounds", "20"}}};
  auto plain = fit(table_of(duplicated), request);
  request.weight_column = "w";
  auto with_weights = fit(table_of(weighted), request);
  ASSERT_TRUE(plain.ok() && with_weights.ok()) << with_weights.status().message();
  EXPECT_EQ(with_weights->features, (std::vector<std::string>{"x1", "x2"}));
  auto probe = *data::parse_csv("x1,x2\n0.1,0.2\n0.5,0.7\n0.9,0.4\n", "p.csv");
  auto expected = plain->bundle->predict(probe)->scores;
  auto actual = with_weights->bundle->predict(probe)->scores;
  for (std::size_t index = 0; index < expected.size(); ++index) EXPECT_NEAR(actual[index], expected[index], 1e-4);

  auto negative = fit(table_of("x,y,w\n1,2,1\n2,3,-1\n"),
                      TrainRequest{.target = "y", .model_family = "gbdt", .weight_column = "w"});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("weights must be finite and >= 0"), std::string::npos);
}

std::size_t leaves_of_tree(const model::TreeEnsembleModel& trees, std::size_t tree, std::size_t* depth) {
  std::size_t leaves = 0;
  *depth = 0;
  std::vector<std::pair<std::uint32_t, std::size_t>> pending = {{trees.roots()[tree], 0}};
  while (!pending.empty()) {
    auto [index, level] = pending.back();
    pending.pop_back();
    const auto& node = trees.nodes()[index];
    if (node.is_leaf()) {
      ++leaves;
      *depth = std::max(*depth, level);
    } else {
      pending.push_back({node.left, level + 1});
      pending.push_back({node.right, level + 1});
    }
  }
  return leaves;
}

TEST(GbdtGrowth, LossguideStopsAtMaxLeavesAndGrowsUnbalancedTrees) {
  // y is flat below x = 0.5 and a wave above: leaf-wise growth spends every split on the wave.
  std::string csv = "x,y\n";
  for (int row = 0; row < 2000; ++row) {
    double x = row / 2000.0;
    csv += std::to_string(x) + "," + std::to_string(x < 0.5 ? 0.0 : 10 * std::sin(40 * x)) + "\n";
  }
  data::Table table = table_of(csv);
  auto summary = fit(
      table, TrainRequest{
                 .target = "y",
                 .model_family = "gbdt",
                 .params = {{"rounds", "10"}, {"grow_policy", "lossguide"}, {"max_depth", "0"}, {"max_leaves", "8"}}});
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  const auto& trees = trees_of(*summary);
  std::size_t deepest = 0;
  for (std::size_t tree = 0; tree < trees.roots().size(); ++tree) {
    std::size_t depth = 0;
    EXPECT_EQ(leaves_of_tree(trees, tree, &depth), 8u);
    deepest = std::max(deepest, depth);
  }
  EXPECT_GT(deepest, 3u);  // 8 balanced leaves would be depth 3

  auto unlimited = fit(table, TrainRequest{.target = "y", .model_family = "gbdt", .params = {{"max_depth", "0"}}});
  ASSERT_FALSE(unlimited.ok());
  EXPECT_NE(unlimited.status().message().find("lossguide"), std::string::npos);
}

TEST(GbdtRegularization, AlphaAboveEveryGradientSumLeavesTheBaseScore) {
  data::Table table = table_of(synthetic_csv(300, false, 2, 0.5));
  auto summary =
      fit(table, TrainRequest{.target = "y", .model_family = "gbdt", .params = {{"rounds", "5"}, {"alpha", "1e6"}}});
  ASSERT_TRUE(summary.ok());
  const auto& trees = trees_of(*summary);
  for (const auto& node : trees.nodes()) {
    EXPECT_TRUE(node.is_leaf());
    EXPECT_EQ(node.value, 0.0f);
  }
}

TEST(GbdtSampling, SubsampleAndColsampleFollowTheSeed) {
  data::Table table = table_of(synthetic_csv(1000, false, 4, 0.5));
  TrainRequest request{.target = "y",
                       .model_family = "gbdt",
                       .params = {{"rounds", "20"}, {"subsample", "0.5"}, {"colsample_bytree", "0.5"}},
                       .seed = 1,
                       .thread_count = 1};
  auto first = fit(table, request);
  request.thread_count = 2;
  auto again = fit(table, request);
  request.seed = 2;
  auto other_seed = fit(table, request);
  ASSERT_TRUE(first.ok() && again.ok() && other_seed.ok()) << first.status().message();
  EXPECT_EQ(first->bundle->serialize(), again->bundle->serialize());
  EXPECT_NE(trees_of(*first).nodes().size() == trees_of(*other_seed).nodes().size() &&
                std::equal(trees_of(*first).nodes().begin(), trees_of(*first).nodes().end(),
                           trees_of(*other_seed).nodes().begin(),
                           [](const auto& a, const auto& b) { return a.value == b.value; }),
            true);
  // colsample_bytree=0.5 of two features: every tree splits on one feature only.
  const auto& trees = trees_of(*first);
  for (std::size_t tree = 0; tree < trees.roots().size(); ++tree) {
    std::uint32_t end = tree + 1 < trees.roots().size() ? trees.roots()[tree + 1] : trees.nodes().size();
    std::set<std::uint32_t> features;
    for (std::uint32_t index = trees.roots()[tree]; index < end; ++index) {
      if (!trees.nodes()[index].is_leaf()) features.insert(trees.nodes()[index].feature());
    }
    EXPECT_LE(features.size(), 1u);
  }
}

TEST(GbdtObjectives, AbsoluteAndHuberLossesResistOutliers) {
  // y = x, except 10% of rows at +1000.
  std::string csv = "x,y\n";
  for (int row = 0; row < 1000; ++row) {
    double x = (row % 100) / 100.0;
    csv += std::to_string(x) + "," + std::to_string((row / 100) % 10 == 3 ? 1000.0 : x) + "\n";
  }
  data::Table table = table_of(csv);
  auto probe = *data::parse_csv("x\n0.25\n0.75\n", "p.csv");
  for (const char* objective : {"reg:absoluteerror", "reg:pseudohubererror"}) {
    auto summary =
        fit(table, TrainRequest{.target = "y",
                                .model_family = "gbdt",
                                .params = {{"objective", objective}, {"rounds", "300"}, {"learning_rate", "0.3"}}});
    ASSERT_TRUE(summary.ok()) << summary.status().message();
    auto scores = summary->bundle->predict(probe)->scores;
    // Absolute error: the conditional median, x. Pseudo-Huber (slope 1): where 0.9 z/sqrt(1+z^2)
    // balances the outliers' saturated pull of 0.1, z = 1/sqrt(80) above x.
    double shift = std::string(objective) == "reg:absoluteerror" ? 0.0 : 1.0 / std::sqrt(80.0);
    EXPECT_NEAR(scores[0], 0.25 + shift, 0.02) << objective;
    EXPECT_NEAR(scores[1], 0.75 + shift, 0.02) << objective;
  }
  auto squared = fit(table, TrainRequest{.target = "y", .model_family = "gbdt", .params = {{"rounds", "300"}}});
  ASSERT_TRUE(squared.ok());
  EXPECT_GT(squared->bundle->predict(probe)->scores[0], 50.0);  // the mean, dragged by the outliers
}

TEST(GbdtEarlyStopping, KeepsTheTreesUpToTheBestValidationRound) {
  data::Table table = table_of(synthetic_csv(1000, false, 6, 4.0));
  auto summary = fit(table, TrainRequest{.target = "y",
                                         .model_family = "gbdt",
                                         .params = {{"rounds", "500"},
                                                    {"learning_rate", "0.5"},
                                                    {"early_stopping_rounds", "5"},
                                                    {"validation_fraction", "0.2"}}});
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_TRUE(summary->stopped_early);
  EXPECT_EQ(summary->round_metric, "rmse");
  ASSERT_GE(summary->best_round, 0);
  EXPECT_EQ(summary->iterations, summary->best_round + 1);
  EXPECT_EQ(summary->history.size(), static_cast<std::size_t>(summary->best_round + 1 + 5));
  EXPECT_EQ(trees_of(*summary).roots().size(), static_cast<std::size_t>(summary->iterations));
  EXPECT_GT(summary->validation_rows, 150u);
  for (const auto& record : summary->history) {
    EXPECT_GE(record.validation, summary->history[static_cast<std::size_t>(summary->best_round)].validation);
  }
}

// A stop set from another thread ends fitting after the round in progress: gbdt and mlp fail (a
// checkpoint keeps the rounds done), linear and logistic keep the weights so far, not converged.
TEST(TrainingStop, EndsEachFamilyAfterTheRoundInProgress) {
  data::Table table = table_of(synthetic_csv(400, false, 3, 0.5));
  std::atomic<bool> stop{false};
  int rounds_seen = 0;
  TrainRequest trees{.target = "y", .model_family = "gbdt", .params = {{"rounds", "1000"}}};
  trees.stop = &stop;
  trees.on_round = [&](const RoundMetrics&, int) {
    if (++rounds_seen == 3) stop = true;
  };
  auto stopped = fit(table, trees);
  EXPECT_EQ(stopped.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stopped.status().message().find("after round 3 of 1000"), std::string::npos) << stopped.status().message();
  EXPECT_EQ(rounds_seen, 3);

  TrainRequest network{.target = "y", .model_family = "mlp", .params = {{"epochs", "500"}}};
  network.stop = &stop;
  EXPECT_EQ(fit(table, network).status().code(), StatusCode::kFailedPrecondition);

  TrainRequest linear{.target = "y", .model_family = "linear"};
  linear.stop = &stop;
  auto partial = fit(table, linear);
  ASSERT_TRUE(partial.ok()) << partial.status().message();
  EXPECT_EQ(partial->iterations, 0);
  EXPECT_FALSE(partial->converged);

  stop = false;  // unset, the same requests train to the end
  trees.on_round = nullptr;
  trees.params["rounds"] = "5";
  EXPECT_TRUE(fit(table, trees).ok());
}

// A resumed run ends with the bytes of the uninterrupted one, with every option that draws
// randomness or depends on history switched on.
TEST(GbdtCheckpoints, ResumingFromACheckpointGivesTheSameBytes) {
  data::Table table = table_of(synthetic_csv(1200, true, 9, 0.2));
  TrainRequest request{
      .target = "y",
      .model_family = "gbdt",
      .params = {{"rounds", "40"}, {"subsample", "0.7"}, {"colsample_bytree", "0.6"}, {"early_stopping_rounds", "30"}},
      .seed = 11,
      .thread_count = 2};
  std::vector<std::pair<int, std::vector<std::byte>>> checkpoints;
  request.checkpoint_every = 10;
  request.on_checkpoint = [&](const model::Bundle& checkpoint, int rounds_done) {
    checkpoints.push_back({rounds_done, checkpoint.serialize()});
    return Status();
  };
  auto uninterrupted = fit(table, request);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().message();
  ASSERT_EQ(checkpoints.size(), 3u);  // after rounds 10, 20 and 30
  EXPECT_EQ(checkpoints[1].first, 20);

  request.on_checkpoint = nullptr;
  request.thread_count = 1;
  request.resume_from = *model::Bundle::parse(checkpoints[1].second);
  auto resumed = fit(table, request);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->bundle->serialize(), uninterrupted->bundle->serialize());
  EXPECT_EQ(resumed->history.size(), uninterrupted->history.size());

  request.resume_from = uninterrupted->bundle;  // a model, not a checkpoint
  auto not_checkpoint = fit(table, request);
  ASSERT_FALSE(not_checkpoint.ok());
  EXPECT_NE(not_checkpoint.status().message().find("not a training checkpoint"), std::string::npos);
}

TEST(GbdtWarmStart, ContinuesFromAnExistingModelsTrees) {
  data::Table first_data = table_of(synthetic_csv(800, false, 12, 0.5));
  data::Table new_data = table_of(synthetic_csv(800, false, 13, 0.5));
  auto initial = fit(first_data, TrainRequest{.target = "y", .model_family = "gbdt", .params = {{"rounds", "10"}}});
  ASSERT_TRUE(initial.ok());
  TrainRequest request{.target = "y", .model_family = "gbdt", .params = {{"rounds", "15"}}};
  request.init_model = initial->bundle;
  request.init_model_reference = "synthetic@1";
  auto continued = fit(new_data, request);
  ASSERT_TRUE(continued.ok()) << continued.status().message();
  const auto& before = trees_of(*initial);
  const auto& after = trees_of(*continued);
  ASSERT_EQ(after.roots().size(), 25u);
  EXPECT_EQ(after.base_margin(), before.base_margin());
  for (std::uint32_t index = 0; index < before.nodes().size(); ++index) {
    EXPECT_EQ(after.nodes()[index].value, before.nodes()[index].value);
  }
  EXPECT_EQ(continued->bundle->manifest().params.at("init_model"), "synthetic@1");
  // The new rounds start from the old model's error on the new data and lower it.
  EXPECT_LT(continued->history.back().train, continued->history.front().train);

  auto wrong_family =
      fit(new_data, TrainRequest{.target = "y", .model_family = "linear", .init_model = initial->bundle});
  EXPECT_FALSE(wrong_family.ok());
}

TEST(GbdtCategorical, PartitionSplitsSeparateUnorderedLevelsInOneSplit) {
  // y = 1 exactly for levels b, e and g: no threshold on frequency rank can isolate them.
  std::string csv = "level,y\n";
  const char* levels = "abcdefgh";
  for (int row = 0; row < 1600; ++row) {
    char level = levels[(row * 7 + row / 8) % 8];
    bool positive = level == 'b' || level == 'e' || level == 'g';
    csv += std::string(1, level) + "," + (positive ? "1" : "0") + "\n";
  }
  data::Table table = table_of(csv);
  auto accuracy = [&](const char* mode) {
    auto summary = fit(table, TrainRequest{.target = "y",
                                           .model_family = "gbdt",
                                           .params = {{"categorical_splits", mode},
                                                      {"max_depth", "1"},
                                                      {"rounds", "1"},
                                                      {"learning_rate", "1"},
                                                      {"cat_smooth", "0"},
                                                      {"cat_l2", "0"}}});
    EXPECT_TRUE(summary.ok()) << summary.status().message();
    return eval::evaluate(*summary->bundle, table, "")->overall.get("accuracy");
  };
  EXPECT_EQ(accuracy("partition"), 1.0);
  EXPECT_LT(accuracy("ordinal"), 0.9);

  // An unseen level goes left, with the levels outside the split's set: it gets one side's score.
  auto summary = fit(table, TrainRequest{.target = "y",
                                         .model_family = "gbdt",
                                         .params = {{"categorical_splits", "partition"}, {"rounds", "3"}}});
  ASSERT_TRUE(summary.ok());
  auto probe = *data::parse_csv("level\nzzz\nb\na\n", "p.csv");
  auto unseen = summary->bundle->predict(probe);
  ASSERT_TRUE(unseen.ok());
  EXPECT_GT(unseen->scores[1], unseen->scores[2]);
  EXPECT_TRUE(unseen->scores[0] == unseen->scores[1] || unseen->scores[0] == unseen->scores[2]);
  auto parsed = model::Bundle::parse(summary->bundle->serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->predict(probe)->scores, unseen->scores);
}

}  // namespace
}  // namespace slipway::train
