#include <gtest/gtest.h>

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
