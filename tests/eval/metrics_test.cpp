#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "slipway/eval.h"
#include "slipway/train.h"

namespace slipway::eval {
namespace {

TEST(Auc, CountsTiesAsHalf) {
  std::vector<float> scores = {0.1f, 0.4f, 0.35f, 0.8f};
  std::vector<double> labels = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(roc_auc(scores, labels), 0.75);
  std::vector<float> tied = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_DOUBLE_EQ(roc_auc(tied, labels), 0.5);
  std::vector<double> one_class = {1, 1, 1, 1};
  EXPECT_TRUE(std::isnan(roc_auc(scores, one_class)));
}

// Regression: a NaN score never equals itself, and the tie loop once spun forever on it.
TEST(Auc, NanScoresGiveNanAndInfinitiesRank) {
  std::vector<double> labels = {0, 1, 0, 1, 1};
  std::vector<float> with_nan = {0.1f, std::nanf(""), 0.3f, 0.9f, std::nanf("")};
  EXPECT_TRUE(std::isnan(roc_auc(with_nan, labels)));
  float infinity = std::numeric_limits<float>::infinity();
  std::vector<float> with_infinities = {-infinity, infinity, 0.3f, infinity, 0.5f};
  EXPECT_DOUBLE_EQ(roc_auc(with_infinities, labels), 1.0);
  EXPECT_TRUE(std::isnan(binary_metrics(with_nan, labels).get("auc")));
}

TEST(BinaryMetrics, MatchHandComputedValues) {
  std::vector<float> scores = {0.9f, 0.2f, 0.6f, 0.4f};
  std::vector<double> labels = {1, 0, 0, 1};
  Metrics metrics = binary_metrics(scores, labels);
  EXPECT_DOUBLE_EQ(metrics.get("accuracy"), 0.5);
  EXPECT_DOUBLE_EQ(metrics.get("precision"), 0.5);
  EXPECT_DOUBLE_EQ(metrics.get("recall"), 0.5);
  EXPECT_DOUBLE_EQ(metrics.get("f1"), 0.5);
  double log_loss = -(std::log(0.9f) + std::log(0.8f) + std::log(0.4f) + std::log(0.4f)) / 4;
  EXPECT_NEAR(metrics.get("log_loss"), log_loss, 1e-6);
  EXPECT_DOUBLE_EQ(metrics.get("auc"), 0.75);
}

// Calibration and class-weighted accuracy by hand: brier is the mean of (p - y)^2; ece bins the
// probabilities in tenths; balanced accuracy is the mean of the two classes' recalls.
TEST(BinaryMetrics, CalibrationAndBalancedAccuracyByHand) {
  std::vector<float> scores = {0.9f, 0.2f, 0.6f, 0.4f, 0.15f};
  std::vector<double> labels = {1, 0, 0, 1, 0};
  Metrics metrics = binary_metrics(scores, labels);
  double brier = (0.01 + 0.04 + 0.36 + 0.36 + 0.0225) / 5;
  EXPECT_NEAR(metrics.get("brier"), brier, 1e-6);
  // Bins: [0.1, 0.2) holds 0.15 (no positive), [0.2, 0.3) 0.2 (none), [0.4, 0.5) 0.4 (one),
  // [0.6, 0.7) 0.6 (none), [0.8, 0.9) 0.9f = 0.8999999 (one): |0.15| + |0.2| + |0.4 - 1| + |0.6| + |0.9 - 1|.
  EXPECT_NEAR(metrics.get("ece"), (0.15 + 0.2 + 0.6 + 0.6 + 0.1) / 5, 1e-6);
  // At 0.5: positives 1 of 2 found, negatives 2 of 3 kept.
  EXPECT_NEAR(metrics.get("balanced_accuracy"), (0.5 + 2.0 / 3.0) / 2, 1e-12);
  EXPECT_TRUE(higher_is_better("balanced_accuracy"));
  EXPECT_TRUE(higher_is_better("pr_auc"));
  EXPECT_FALSE(higher_is_better("ece"));
  std::vector<float> with_nan = {0.9f, std::nanf(""), 0.6f, 0.4f, 0.15f};
  EXPECT_TRUE(std::isnan(binary_metrics(with_nan, labels).get("ece")));
  for (const auto& [name, value] : metrics.values) {
    EXPECT_NE(std::find(metric_names().begin(), metric_names().end(), name), metric_names().end()) << name;
  }
}

TEST(MulticlassMetrics, TopLabelCalibrationAndBalancedAccuracy) {
  // Three rows of class 0, one of class 1, none of class 2.
  std::vector<float> probabilities = {0.75f, 0.15f, 0.1f, 0.75f, 0.15f, 0.1f, 0.3f, 0.55f, 0.15f, 0.15f, 0.75f, 0.1f};
  std::vector<double> labels = {0, 0, 0, 1};
  Metrics metrics = multiclass_metrics(probabilities, 3, labels);
  // Predictions 0, 0, 1, 1: class 0 recall 2/3, class 1 recall 1; class 2 has no rows.
  EXPECT_NEAR(metrics.get("balanced_accuracy"), (2.0 / 3.0 + 1.0) / 2, 1e-12);
  // Confidences 0.75 (right), 0.75 (right), 0.55 (wrong), 0.75 (right): bins [0.5, 0.6), [0.7, 0.8).
  EXPECT_NEAR(metrics.get("ece"), (0.55 + 3 * (1.0 - 0.75)) / 4, 1e-6);
}

// A cost matrix: the shorthand and the CSV read and write back; each row gets the label of least
// expected cost, so with misses five times as dear the threshold drops to 1/6.
TEST(Costs, DecisionsOfLeastExpectedCost) {
  auto shorthand = parse_cost_matrix("fn=5, fp=1");
  ASSERT_TRUE(shorthand.ok()) << shorthand.status().message();
  EXPECT_EQ(cost_matrix_text(*shorthand), "tn=0,fp=1,fn=5,tp=0");
  ASSERT_TRUE(parse_cost_matrix(cost_matrix_text(*shorthand)).ok());
  auto table = cost_table(*shorthand, {"no", "yes"});
  ASSERT_TRUE(table.ok());
  std::vector<float> scores = {0.9f, 0.2f, 0.1f, 0.4f, 0.15f};
  std::vector<double> labels = {1, 0, 0, 1, 0};
  // Positive at P >= 1/6: rows 0, 1, 3 predicted positive; row 1 is a false alarm (1); no miss.
  EXPECT_DOUBLE_EQ(decision_cost(scores, 1, labels, *table), 1.0 / 5);
  EXPECT_FALSE(cost_table(*shorthand, {"a", "b", "c"}).ok());

  auto csv = parse_cost_matrix("actual,predicted,cost\nsetosa,virginica,10\n\"ver,si\",setosa,2\n");
  ASSERT_TRUE(csv.ok()) << csv.status().message();
  EXPECT_EQ(cost_matrix_text(*csv), "actual,predicted,cost\nsetosa,virginica,10\n\"ver,si\",setosa,2\n");
  auto three = cost_table(*csv, {"setosa", "ver,si", "virginica"});
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_EQ((*three)[0][2], 10.0);
  EXPECT_EQ((*three)[1][0], 2.0);
  auto unknown = cost_table(*csv, {"setosa", "versicolor", "virginica"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'ver,si'"), std::string::npos) << unknown.status().message();

  for (const char* bad : {"fn=-1", "fn=nan", "fn=1e999", "fx=1", "fn=1,fn=2", "fn", "tn=0,tp=0", "",
                          "actual,predicted\na,b", "actual,predicted,cost\na,b,1\na,b,2"}) {
    EXPECT_FALSE(parse_cost_matrix(bad).ok()) << bad;
  }
}

// scikit-learn 1.2: average_precision_score([1,0,0,1], [0.9,0.2,0.6,0.4]) == 0.8333...
// (recall 0.5 at precision 1, then recall 1 at precision 2/3), and with tied scores
// average_precision_score([1,0,1,0], [0.8,0.8,0.3,0.1]) == 0.5*0.5 + 0.5*(2/3).
TEST(AveragePrecision, MatchesScikitLearnIncludingTies) {
  std::vector<float> scores = {0.9f, 0.2f, 0.6f, 0.4f};
  std::vector<double> labels = {1, 0, 0, 1};
  EXPECT_NEAR(average_precision(scores, labels), 0.5 + 0.5 * (2.0 / 3.0), 1e-12);
  EXPECT_NEAR(binary_metrics(scores, labels).get("pr_auc"), 0.5 + 0.5 * (2.0 / 3.0), 1e-12);
  std::vector<float> tied = {0.8f, 0.8f, 0.3f, 0.1f};
  std::vector<double> tied_labels = {1, 0, 1, 0};
  EXPECT_NEAR(average_precision(tied, tied_labels), 0.5 * 0.5 + 0.5 * (2.0 / 3.0), 1e-12);
  std::vector<double> no_positive = {0, 0, 0, 0};
  EXPECT_TRUE(std::isnan(average_precision(scores, no_positive)));
  std::vector<float> with_nan = {0.9f, std::nanf(""), 0.6f, 0.4f};
  EXPECT_TRUE(std::isnan(average_precision(with_nan, labels)));
}

TEST(BinaryMetrics, CountAtTheGivenThreshold) {
  std::vector<float> scores = {0.9f, 0.2f, 0.6f, 0.4f};
  std::vector<double> labels = {1, 0, 0, 1};
  Metrics low = binary_metrics(scores, labels, 0.3);  // predicts 0.9, 0.6, 0.4 positive
  EXPECT_DOUBLE_EQ(low.get("recall"), 1.0);
  EXPECT_DOUBLE_EQ(low.get("precision"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(low.get("accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(low.get("auc"), binary_metrics(scores, labels).get("auc"));  // threshold-free
}

TEST(Threshold, EachRuleChoosesOneOfTheScores) {
  // Ten rows, scores 0.05..0.95 highest first: positives at 0.95, 0.85, 0.65, 0.45, 0.15.
  std::vector<float> scores = {0.95f, 0.85f, 0.75f, 0.65f, 0.55f, 0.45f, 0.35f, 0.25f, 0.15f, 0.05f};
  std::vector<double> labels = {1, 1, 0, 1, 0, 1, 0, 0, 1, 0};
  // F1 = 2TP / (2TP + FP + FN): 4/7 at 0.85, 6/9 at 0.65, 8/11 at 0.45 (the best), 10/14 at 0.15.
  auto f1 = choose_threshold(scores, labels, "f1");
  ASSERT_TRUE(f1.ok()) << f1.status().message();
  EXPECT_FLOAT_EQ(static_cast<float>(f1->threshold), 0.45f);
  EXPECT_DOUBLE_EQ(f1->precision, 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(f1->recall, 0.8);
  EXPECT_EQ(f1->rows, 10u);
  // Precision >= 0.7 holds at 0.95, 0.85 and 0.65 (3 of 4); the last has the best recall.
  auto precise = choose_threshold(scores, labels, "precision>=0.7");
  ASSERT_TRUE(precise.ok());
  EXPECT_FLOAT_EQ(static_cast<float>(precise->threshold), 0.65f);
  // Recall >= 1: only the lowest positive's score reaches every positive.
  auto recall = choose_threshold(scores, labels, "recall>=1");
  ASSERT_TRUE(recall.ok());
  EXPECT_FLOAT_EQ(static_cast<float>(recall->threshold), 0.15f);
  EXPECT_DOUBLE_EQ(recall->recall, 1.0);
  // A miss costs 10 false alarms: catching the last positive at 0.15 (4 false alarms) is cheapest.
  auto costly = choose_threshold(scores, labels, "cost=10");
  ASSERT_TRUE(costly.ok());
  EXPECT_FLOAT_EQ(static_cast<float>(costly->threshold), 0.15f);
  // A false alarm as costly as a miss: 0.85, 0.65 and 0.45 all cost 3; the highest is kept.
  auto even = choose_threshold(scores, labels, "cost=1");
  ASSERT_TRUE(even.ok());
  EXPECT_FLOAT_EQ(static_cast<float>(even->threshold), 0.85f);
  // A number is taken as given and is no rule.
  auto fixed = choose_threshold(scores, labels, "0.3");
  ASSERT_TRUE(fixed.ok());
  EXPECT_DOUBLE_EQ(fixed->threshold, 0.3);
  EXPECT_TRUE(fixed->rule.empty());
}

TEST(Threshold, RefusesWhatCannotBeMetOrRead) {
  std::vector<float> scores = {0.9f, 0.8f, 0.2f};
  std::vector<double> labels = {0, 1, 0};
  EXPECT_FALSE(choose_threshold(scores, labels, "precision>=1").ok());  // 0.8 reaches 1/2 at best
  for (const char* junk : {"", "f2", "precision>=0", "precision>=1.5", "recall>=nan", "cost=0", "cost=-1", "cost=inf",
                           "1.5", "-0.1", "0.5x", "precision>="}) {
    EXPECT_EQ(check_threshold_rule(junk).code(), StatusCode::kInvalidArgument) << junk;
  }
  for (const char* fine : {"f1", "precision>=0.9", "recall>=1", "cost=5", "0", "1", "0.35", ".5"}) {
    EXPECT_TRUE(check_threshold_rule(fine).ok()) << fine;
  }
  std::vector<double> one_class = {1, 1, 1};
  EXPECT_EQ(choose_threshold(scores, one_class, "f1").status().code(), StatusCode::kInvalidArgument);
  std::vector<float> with_nan = {0.9f, std::nanf(""), 0.2f};
  EXPECT_FALSE(choose_threshold(with_nan, labels, "f1").ok());
}

TEST(RegressionMetrics, MatchHandComputedValues) {
  std::vector<float> predictions = {1, 2, 3};
  std::vector<double> targets = {1, 2, 5};
  Metrics metrics = regression_metrics(predictions, targets);
  EXPECT_NEAR(metrics.get("rmse"), std::sqrt(4.0 / 3), 1e-9);
  EXPECT_NEAR(metrics.get("mae"), 2.0 / 3, 1e-9);
  EXPECT_NEAR(metrics.get("r2"), 1 - 4 / (8.0 + 2.0 / 3), 1e-9);
}

TEST(Evaluate, ReportsSlicesAndRejectsUnknownLabels) {
  auto table = data::parse_csv("x,region,y\n1,n,a\n2,n,b\n3,s,a\n4,s,b\n5,s,b\n6,n,a\n", "t.csv");
  auto summary = train::fit(*table, train::TrainRequest{.target = "y", .excluded_columns = {"region"}});
  ASSERT_TRUE(summary.ok());
  auto evaluation = evaluate(*summary->bundle, *table, "region");
  ASSERT_TRUE(evaluation.ok());
  EXPECT_EQ(evaluation->rows, 6u);
  ASSERT_EQ(evaluation->slices.size(), 2u);
  EXPECT_EQ(evaluation->slices[0].value, "n");
  EXPECT_EQ(evaluation->slices[0].rows, 3u);
  EXPECT_FALSE(evaluate(*summary->bundle, *table, "nope").ok());
  auto unknown = data::parse_csv("x,region,y\n1,n,c\n", "u.csv");
  EXPECT_EQ(evaluate(*summary->bundle, *unknown, "").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slipway::eval
