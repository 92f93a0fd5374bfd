// Golden comparison against evaluate() and hand-counted differences on the lending data.
#include <gtest/gtest.h>

#include <cmath>

#include "slipway/eval.h"
#include "slipway/train.h"
#include "support/fixtures.h"

namespace slipway::eval {
namespace {

class CompareTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data::Table train = testing::lending_rows(0, 2000);
    golden = new data::Table(testing::lending_rows(2000, 1000));
    logistic = train::fit(train, train::TrainRequest{.target = "Class"})->bundle;
    gbdt = train::fit(train,
                      train::TrainRequest{
                          .target = "Class", .model_family = "gbdt", .params = {{"rounds", "20"}, {"max_depth", "3"}}})
               ->bundle;
  }
  static void TearDownTestSuite() { delete golden; }

  static inline data::Table* golden = nullptr;
  static inline std::shared_ptr<const model::Bundle> logistic, gbdt;
};

TEST_F(CompareTest, AModelAgreesWithItself) {
  auto same = compare(*logistic, *logistic, *golden, {.tolerance = 0.0, .slice_column = "term"});
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_TRUE(same->within_tolerance());
  EXPECT_EQ(same->overall.rows, 1000u);
  EXPECT_EQ(same->overall.label_flips, 0u);
  EXPECT_EQ(same->overall.max_abs_difference, 0.0);
  EXPECT_TRUE(same->labelled);
  EXPECT_EQ(same->quality_metric, "auc");
  EXPECT_EQ(same->quality_drop, 0.0);
  EXPECT_TRUE(same->worst_rows.empty());
  ASSERT_EQ(same->slices.size(), 2u);  // term_36, term_60
  for (const auto& slice : same->slices) EXPECT_EQ(slice.quality_drop, 0.0);
}

TEST_F(CompareTest, DifferencesFlipsAndQualityMatchAHandCount) {
  ComparisonOptions options{.tolerance = 0.05, .slice_column = "addr_state", .worst_rows = 5};
  auto result = compare(*logistic, *gbdt, *golden, options);
  ASSERT_TRUE(result.ok()) << result.status().message();

  auto a = *logistic->predict(*golden);
  auto b = *gbdt->predict(*golden);
  std::size_t beyond = 0, flips = 0;
  double largest = 0.0;
  for (std::size_t row = 0; row < a.rows; ++row) {
    double difference = std::abs(static_cast<double>(a.scores[row]) - b.scores[row]);
    beyond += difference > options.tolerance;
    flips += logistic->predicted_label(a, row) != gbdt->predicted_label(b, row);
    largest = std::max(largest, difference);
  }
  ASSERT_GT(beyond, 0u);
  EXPECT_EQ(result->overall.rows_beyond_tolerance, beyond);
  EXPECT_EQ(result->overall.label_flips, flips);
  EXPECT_DOUBLE_EQ(result->overall.max_abs_difference, largest);
  EXPECT_FALSE(result->within_tolerance());

  // The listed rows: the five largest, in order, each with both models' outputs and labels.
  ASSERT_EQ(result->worst_rows.size(), 5u);
  EXPECT_DOUBLE_EQ(result->worst_rows.front().abs_difference, largest);
  for (std::size_t index = 1; index < result->worst_rows.size(); ++index) {
    EXPECT_GE(result->worst_rows[index - 1].abs_difference, result->worst_rows[index].abs_difference);
  }
  const auto& first = result->worst_rows.front();
  EXPECT_EQ(first.outputs_a.at(0), a.scores[first.row]);
  EXPECT_EQ(first.outputs_b.at(0), b.scores[first.row]);
  EXPECT_EQ(first.slice, golden->column(*golden->column_index("addr_state")).text_at(first.row));

  // Quality agrees with evaluate(), overall and per slice; the worst slice has the largest drop.
  auto evaluation_a = *evaluate(*logistic, *golden, "addr_state");
  auto evaluation_b = *evaluate(*gbdt, *golden, "addr_state");
  EXPECT_DOUBLE_EQ(result->metrics_a.get("auc"), evaluation_a.overall.get("auc"));
  EXPECT_DOUBLE_EQ(result->quality_drop, evaluation_a.overall.get("auc") - evaluation_b.overall.get("auc"));
  ASSERT_EQ(result->slices.size(), evaluation_a.slices.size());
  double worst = -1e9;
  std::string worst_value;
  for (std::size_t index = 0; index < result->slices.size(); ++index) {
    const auto& slice = result->slices[index];
    ASSERT_EQ(slice.value, evaluation_a.slices[index].value);
    double auc_a = evaluation_a.slices[index].metrics.get("auc");
    double auc_b = evaluation_b.slices[index].metrics.get("auc");
    if (std::isnan(auc_a) || std::isnan(auc_b)) {
      EXPECT_TRUE(std::isnan(slice.quality_drop)) << slice.value;
      continue;
    }
    EXPECT_DOUBLE_EQ(slice.quality_drop, auc_a - auc_b) << slice.value;
    if (auc_a - auc_b > worst) {
      worst = auc_a - auc_b;
      worst_value = slice.value;
    }
  }
  EXPECT_EQ(result->worst_slice, worst_value);
  EXPECT_DOUBLE_EQ(result->worst_slice_drop, worst);
}

TEST_F(CompareTest, UnlabelledRowsCompareOutputsOnly) {
  data::Table unlabelled;
  for (const auto& column : golden->columns()) {
    if (column.name == "Class") continue;
    ASSERT_TRUE(unlabelled.add_column(column).ok());
  }
  auto result = compare(*logistic, *gbdt, unlabelled, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_FALSE(result->labelled);
  EXPECT_GT(result->overall.rows_beyond_tolerance, 0u);
  EXPECT_EQ(result->worst_rows.size(), 10u);
}

// A golden set whose labels are still to come: the target column is there, every value empty.
TEST_F(CompareTest, AnEmptyTargetColumnComparesOutputsOnly) {
  auto text = *slipway::read_file(testing::data_path("lending_club.csv"));
  std::string csv;
  std::size_t start = 0;
  for (int line = 0; line < 30; ++line) {
    std::size_t end = text.find('\n', start);
    std::string row = text.substr(start, end - start);
    csv += line == 0 ? row : row.substr(0, row.rfind(',') + 1);  // Class is the last column
    csv += '\n';
    start = end + 1;
  }
  auto table = data::parse_csv(csv, "blank.csv");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_NE(table->find("Class"), nullptr);
  auto result = compare(*logistic, *gbdt, *table, {});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_FALSE(result->labelled);
  EXPECT_EQ(result->overall.rows, 29u);
}

TEST_F(CompareTest, IncomparableModelsAndBadOptionsAreRefused) {
  auto chicago = *data::read_csv(testing::data_path("chicago_ridership.csv"));
  auto regression = train::fit(chicago, train::TrainRequest{.target = "ridership", .model_family = "linear"})->bundle;
  auto mixed = compare(*logistic, *regression, *golden, {});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("different questions"), std::string::npos) << mixed.status().message();

  auto negative = compare(*logistic, *gbdt, *golden, {.tolerance = -1});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("tolerance"), std::string::npos);
  EXPECT_FALSE(compare(*logistic, *gbdt, *golden, {.tolerance = std::nan("")}).ok());
  EXPECT_FALSE(compare(*logistic, *gbdt, *golden, {.tolerance = INFINITY}).ok());

  auto no_slice = compare(*logistic, *gbdt, *golden, {.slice_column = "state"});
  ASSERT_FALSE(no_slice.ok());
  EXPECT_NE(no_slice.status().message().find("'state'"), std::string::npos);
}

TEST_F(CompareTest, AGateHoldsTheCandidateToItsThresholds) {
  GateCriteria criteria{.metric = "auc"};
  ASSERT_TRUE(parse_gate_thresholds("max_drop=0, min=0.5", criteria).ok());
  EXPECT_EQ(format_gate_thresholds(criteria), "min=0.5,max_drop=0");
  auto same = gate(*logistic, *logistic, *golden, criteria, "term");
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_TRUE(same->passed());
  EXPECT_EQ(same->checks.size(), 3u);  // overall, then the two terms
  EXPECT_EQ(same->checks[0].drop, 0.0);
  ASSERT_TRUE(parse_gate_thresholds("min=0.99", criteria).ok());
  auto strict = gate(*logistic, *gbdt, *golden, criteria, "");
  ASSERT_TRUE(strict.ok()) << strict.status().message();
  EXPECT_FALSE(strict->passed());
  EXPECT_NE(strict->checks[0].failure.find("below the minimum 0.99"), std::string::npos);
  JsonWriter json;
  json.begin_object();
  write_gate_report_fields(json, *strict);
  json.end_object();
  EXPECT_EQ(json.str().rfind("{\"metric\":\"auc\",\"criteria\":\"min=0.99,max_drop=0\",\"passed\":false,", 0), 0u)
      << json.str();
}

TEST(GateThresholds, AreRefusedWhenMalformed) {
  for (const char* text : {"max_drop", "max_drop=", "drop=0.1", "min=nan", "max=inf", "min=0.5x", "=1"}) {
    GateCriteria criteria;
    Status status = parse_gate_thresholds(text, criteria);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_FALSE(criteria.min || criteria.max || criteria.max_drop) << text;  // unchanged
  }
}

}  // namespace
}  // namespace slipway::eval
