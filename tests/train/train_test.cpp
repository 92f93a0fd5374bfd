#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "slipway/eval.h"
#include "slipway/train.h"
#include "support/test_support.h"
#include "train/training_params.h"

namespace slipway::train {
namespace {

data::Table lending() { return *data::read_csv(testing::data_path("lending_club.csv")); }

TEST(Lbfgs, MinimizesAnIllConditionedQuadratic) {
  // f(x) = sum_i c_i (x_i - i)^2 with condition number 1e4.
  Objective objective = [](std::span<const double> x, std::span<double> gradient) {
    double value = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      double curvature = std::pow(10.0, static_cast<double>(i % 5));
      double offset = x[i] - static_cast<double>(i);
      value += curvature * offset * offset;
      gradient[i] = 2 * curvature * offset;
    }
    return value;
  };
  std::vector<double> x(20, 0.0);
  LbfgsOptions options;
  options.gradient_tolerance = 1e-9;
  auto result = minimize_lbfgs(objective, x, options);
  EXPECT_TRUE(result.converged);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], static_cast<double>(i), 1e-6);
}

TEST(Parameters, ValidateNamesTypesAndRanges) {
  EXPECT_EQ(resolve_parameters("logistic", {})->at("l2"), "1.0");
  EXPECT_FALSE(resolve_parameters("logistic", {{"l2", "abc"}}).ok());
  EXPECT_FALSE(resolve_parameters("logistic", {{"l2", "-1"}}).ok());
  EXPECT_FALSE(resolve_parameters("logistic", {{"depth", "3"}}).ok());
  EXPECT_FALSE(resolve_parameters("linear", {{"positive_class", "x"}}).ok());
  EXPECT_FALSE(resolve_parameters("forest", {}).ok());
  EXPECT_EQ(resolve_parameters("linear", {{"max_iterations", "30"}})->at("max_iterations"), "30");
  EXPECT_NE(parameters_markdown().find("| `l2` |"), std::string::npos);
  EXPECT_EQ(resolve_parameters("gbdt", {{"max_depth", "40"}}).status().message(),
            "parameter 'max_depth' must be an integer from 0 to 32, not '40'");
  // A misspelt name gets the one meant, before the list of every name.
  std::string misspelt = resolve_parameters("gbdt", {{"round", "5"}}).status().message();
  EXPECT_NE(misspelt.find("did you mean 'rounds'?"), std::string::npos) << misspelt;
}

// What `params` (text and JSON) and docs/parameters.md say of a parameter's type and values.
TEST(Parameters, DescribeTheirTypeAndAllowedValues) {
  auto named = [](std::string_view name) {
    for (const auto& declaration : parameter_declarations()) {
      if (declaration.name == name) return declaration;
    }
    return ParamDeclaration{};
  };
  EXPECT_EQ(parameter_type_name(named("max_depth").type), "integer");
  EXPECT_EQ(parameter_allowed_values(named("max_depth")), "[0, 32]");
  EXPECT_EQ(parameter_type_name(named("l2").type), "number");
  EXPECT_EQ(parameter_type_name(named("activation").type), "choice");
  EXPECT_NE(parameter_allowed_values(named("activation")).find("relu"), std::string::npos);
  EXPECT_NE(parameters_markdown().find("| `max_depth` | gbdt | integer |"), std::string::npos);
}

// Every declared parameter of a family is bound to a member of that family's struct, and the
// typed values are the resolved text's.
TEST(Parameters, BindEveryDeclarationToTheFamilyStruct) {
  auto bound_names = [](const std::vector<std::string>& names) {
    return std::set<std::string>(names.begin(), names.end());
  };
  for (const std::string family : {"logistic", "linear", "gbdt", "mlp"}) {
    auto resolved = resolve_parameters(family, {});
    ASSERT_TRUE(resolved.ok());
    std::set<std::string> declared;
    for (const auto& entry : *resolved) declared.insert(entry.first);
    auto bound = bound_names(family == "gbdt"  ? gbdt_params_schema().names()
                             : family == "mlp" ? mlp_params_schema().names()
                                               : linear_params_schema().names());
    for (const auto& name : declared) EXPECT_TRUE(bound.count(name)) << family << " does not bind " << name;
  }
  auto gbdt = gbdt_params(*resolve_parameters(
      "gbdt",
      {{"max_depth", "4"}, {"subsample", "0.8"}, {"grow_policy", "lossguide"}, {"categorical_splits", "partition"}}));
  ASSERT_TRUE(gbdt.ok());
  EXPECT_EQ(gbdt->tree.max_depth, 4);
  EXPECT_EQ(gbdt->tree.subsample, 0.8);
  EXPECT_EQ(gbdt->tree.rounds, 100);
  EXPECT_EQ(gbdt->tree.grow_policy, GrowPolicy::kLossguide);
  EXPECT_EQ(gbdt->categorical_splits, CategoricalSplits::kPartition);
  auto linear = linear_params(*resolve_parameters("logistic", {{"standardize", "false"}, {"tolerance", "1e-9"}}));
  ASSERT_TRUE(linear.ok());
  EXPECT_FALSE(linear->standardize);
  EXPECT_EQ(linear->tolerance, 1e-9);
  EXPECT_EQ(linear->l2, 1.0);
  EXPECT_EQ(linear->categorical_encoding, model::CategoricalEncoding::kOneHot);
  EXPECT_EQ(linear->max_categories, 100u);
}

TEST(PositiveLabel, PrefersConventionsThenTheRarerClass) {
  EXPECT_EQ(*choose_positive_label({"no", "yes"}, {10, 90}, "auto"), "yes");
  EXPECT_EQ(*choose_positive_label({"good", "bad"}, {95, 5}, "auto"), "bad");
  EXPECT_EQ(*choose_positive_label({"good", "bad"}, {95, 5}, "good"), "good");
  EXPECT_FALSE(choose_positive_label({"good", "bad"}, {95, 5}, "ugly").ok());
}

TEST(Fit, RejectsUnusableTargets) {
  auto one_class = data::parse_csv("x,y\n1,a\n2,a\n", "t.csv");
  auto result = fit(*one_class, TrainRequest{.target = "y"});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "target 'y' has a single class ('a'); classification needs two");
  auto three = data::parse_csv("x,y\n1,a\n2,b\n3,c\n", "t.csv");
  EXPECT_FALSE(fit(*three, TrainRequest{.target = "y"}).ok());
  EXPECT_FALSE(fit(*three, TrainRequest{.target = "nope"}).ok());
  EXPECT_FALSE(fit(*three, TrainRequest{.target = "y", .model_family = "linear"}).ok());
}

TEST(Fit, IsDeterministicAcrossThreadCounts) {
  data::Table table = lending();
  TrainRequest request{.target = "Class", .thread_count = 1};
  auto single = fit(table, request);
  request.thread_count = 4;
  auto multi = fit(table, request);
  ASSERT_TRUE(single.ok() && multi.ok());
  EXPECT_EQ(single->bundle->serialize(), multi->bundle->serialize());
  EXPECT_EQ(single->bundle->manifest().class_labels, (std::vector<std::string>{"good", "bad"}));
}

TEST(Fit, RecoversLinearCoefficients) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::string csv = "a,b,y\n";
  for (int row = 0; row < 2000; ++row) {
    double a = row % 17;
    double b = (row * 7) % 13;
    csv += std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(3 * a - 2 * b + 5 + noise(rng)) + "\n";
  }
  auto table = data::parse_csv(csv, "synthetic.csv");
  auto summary = fit(*table, TrainRequest{.target = "y", .model_family = "linear", .params = {{"l2", "0"}}});
  ASSERT_TRUE(summary.ok());
  auto predictions = summary->bundle->predict(*data::parse_csv("a,b\n10,4\n", "p.csv"));
  EXPECT_NEAR(predictions->scores[0], 3 * 10 - 2 * 4 + 5, 1e-2);
}

TEST(Fit, LinearRegressionOnChicagoWithTimeSplit) {
  auto table = data::read_csv(testing::data_path("chicago_ridership.csv"));
  data::SplitSpec spec = *data::parse_split_kind("time:date");
  auto split = data::split_rows(*table, spec, "ridership");
  ASSERT_TRUE(split.ok());
  auto summary = fit(table->take_rows(split->train_rows),
                     TrainRequest{.target = "ridership", .model_family = "linear", .excluded_columns = {"date"}});
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  auto evaluation = eval::evaluate(*summary->bundle, table->take_rows(split->test_rows), "");
  ASSERT_TRUE(evaluation.ok());
  // A lagged-ridership linear model explains most of the variance on later, unseen days.
  EXPECT_GT(evaluation->overall.get("r2"), 0.5);
  EXPECT_LT(evaluation->overall.get("rmse"), 5.0);
}

// The demo's split and model against scikit-learn's LogisticRegression on the same rows.
TEST(Fit, LogisticAucMatchesScikitLearn) {
  if (std::system("/usr/bin/python3 -c 'import sklearn' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-sklearn is not installed";
  data::Table table = lending();
  data::SplitSpec spec = *data::parse_split_kind("stratified");
  auto split = data::split_rows(table, spec, "Class");
  auto summary = fit(table.take_rows(split->train_rows), TrainRequest{.target = "Class"});
  ASSERT_TRUE(summary.ok());
  auto evaluation = eval::evaluate(*summary->bundle, table.take_rows(split->test_rows), "");
  double ours = evaluation->overall.get("auc");

  testing::TempDir dir;
  std::ofstream rows_file(dir.file("test_rows.txt"));
  for (auto row : split->test_rows) rows_file << row << "\n";
  rows_file.close();
  auto peer =
      testing::run_command({"/usr/bin/python3", slipway::testing::source_dir() + "/tests/train/sklearn_logistic.py",
                            testing::data_path("lending_club.csv"), "Class",
                            summary->bundle->manifest().class_labels[1], dir.file("test_rows.txt")});
  ASSERT_EQ(peer.exit_code, 0) << peer.err;
  double theirs = std::stod(peer.out);
  std::printf("test AUC: slipway %.4f, scikit-learn %.4f\n", ours, theirs);
  EXPECT_NEAR(ours, theirs, 0.005);
}

}  // namespace
}  // namespace slipway::train

namespace slipway::train {
namespace {

TEST(Gbdt, LearnsStepsAndWhereMissingValuesGo) {
  // y is 10 above x = 0.5, 0 below, and 5 where x is missing.
  std::string csv = "x,y\n";
  for (int row = 0; row < 600; ++row) {
    if (row % 6 == 0) {
      csv += ",5\n";
    } else {
      double x = (row % 100) / 100.0;
      csv += std::to_string(x) + "," + (x > 0.5 ? "10" : "0") + "\n";
    }
  }
  auto table = data::parse_csv(csv, "steps.csv");
  auto summary =
      fit(*table,
          TrainRequest{.target = "y", .model_family = "gbdt", .params = {{"rounds", "200"}, {"learning_rate", "0.3"}}});
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->bundle->task(), model::Task::kRegression);
  auto predictions = summary->bundle->predict(*data::parse_csv("x\n0.2\n0.9\nNA\n", "p.csv"));
  ASSERT_TRUE(predictions.ok());
  ASSERT_EQ(predictions->scores.size(), 3u);
  EXPECT_NEAR(predictions->scores[0], 0.0, 0.05);
  EXPECT_NEAR(predictions->scores[1], 10.0, 0.05);
  EXPECT_NEAR(predictions->scores[2], 5.0, 0.05);
}

TEST(Gbdt, ClassifiesLendingClubDeterministicallyAndExplainsItself) {
  data::Table table = lending();
  data::SplitSpec spec = *data::parse_split_kind("stratified");
  auto split = data::split_rows(table, spec, "Class");
  data::Table train_rows = table.take_rows(split->train_rows);
  TrainRequest request{.target = "Class", .model_family = "gbdt", .thread_count = 1};
  auto single = fit(train_rows, request);
  request.thread_count = 2;
  auto multi = fit(train_rows, request);
  ASSERT_TRUE(single.ok() && multi.ok()) << single.status().message();
  EXPECT_EQ(single->bundle->serialize(), multi->bundle->serialize());
  EXPECT_EQ(single->bundle->task(), model::Task::kBinaryClassification);

  auto evaluation = eval::evaluate(*single->bundle, table.take_rows(split->test_rows), "");
  ASSERT_TRUE(evaluation.ok());
  // XGBoost (hist, depth 6, eta 0.1) lands near 0.70-0.74 on 2,000-row hold-outs of this set.
  EXPECT_GT(evaluation->overall.get("auc"), 0.69);

  const auto& trees = dynamic_cast<const model::TreeEnsembleModel&>(single->bundle->model());
  EXPECT_EQ(trees.roots().size(), 100u);
  std::vector<float> features;
  ASSERT_TRUE(single->bundle->preprocessor().transform(table.take_rows(split->test_rows), features).ok());
  std::vector<float> contributions(trees.input_width() + 1);
  std::vector<float> margin(1);
  std::span<const float> row(features.data(), trees.input_width());
  ASSERT_TRUE(trees.explain(row, contributions).ok());
  trees.predict_margin(row, 1, margin);
  float sum = 0;
  for (float value : contributions) sum += value;
  EXPECT_NEAR(sum, margin[0], 1e-4);
  auto importance = trees.importance();
  EXPECT_GT(std::accumulate(importance.splits.begin(), importance.splits.end(), std::uint64_t{0}), 100u);
}

}  // namespace
}  // namespace slipway::train
