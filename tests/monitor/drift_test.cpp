// The drift statistics against known values, and the training profile a bundle carries.
#include "slipway/monitor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "support/fixtures.h"

namespace slipway::monitor {
namespace {

TEST(DriftStatistics, PValuesMatchTheirTables) {
  // Two samples of 1,000: the 5% critical value of D is 1.358 * sqrt(2 / 1000).
  EXPECT_NEAR(kolmogorov_smirnov_p(1.358 * std::sqrt(2.0 / 1000), 1000, 1000), 0.05, 0.005);
  EXPECT_DOUBLE_EQ(kolmogorov_smirnov_p(0, 1000, 1000), 1.0);
  EXPECT_DOUBLE_EQ(kolmogorov_smirnov_p(1e-5, 1000, 1000), 1.0);  // a difference that is none
  EXPECT_DOUBLE_EQ(kolmogorov_smirnov_p(1.0, 1e6, 1e6), 0.0);     // far in the tail
  EXPECT_LT(kolmogorov_smirnov_p(0.5, 1000, 1000), 1e-10);
  EXPECT_NEAR(chi_squared_p(3.841, 1), 0.05, 0.001);
  EXPECT_NEAR(chi_squared_p(18.307, 10), 0.05, 0.001);
  EXPECT_NEAR(chi_squared_p(124.342, 100), 0.05, 0.001);
  EXPECT_DOUBLE_EQ(chi_squared_p(0, 3), 1.0);
}

TEST(DriftStatistics, TheSameDataIsNoDriftAndMovedDataIs) {
  data::Table table = testing::lending_rows(0, 4000);
  std::vector<float> scores(table.row_count(), 0.5f);
  auto profile = model::profile_of(table, {"funded_amnt", "addr_state", "not_there"}, scores);
  ASSERT_EQ(profile.inputs.size(), 2u);
  EXPECT_LE(profile.inputs[0].edges.size(), model::kProfileBins + 1);
  EXPECT_LE(profile.inputs[1].levels.size(), model::kMaxProfileLevels);
  auto same = compare(profile, training_bins(profile), bin(profile, table, scores));
  for (const auto& input : same.inputs) {
    EXPECT_NEAR(input.distance, 0, 1e-9) << input.name;
    EXPECT_FALSE(input.drifted) << input.name;
  }
  // Every amount far above the training range: all mass in the last bin.
  data::Table moved;
  data::Column amounts;
  amounts.name = "funded_amnt";
  amounts.numbers.assign(500, 1e9f);
  ASSERT_TRUE(moved.add_column(amounts).ok());
  std::vector<float> moved_scores(500, 0.9f);
  auto report = compare(profile, training_bins(profile), bin(profile, moved, moved_scores));
  EXPECT_TRUE(report.inputs[0].drifted);
  EXPECT_TRUE(report.inputs[0].decided_by_test);  // 500 rows: the test decides
  EXPECT_GT(report.inputs[0].distance, 0.9);
  EXPECT_EQ(report.inputs[0].psi_band(), "significant");
  // addr_state is absent: every row missing, which is drift too.
  EXPECT_TRUE(report.inputs[1].drifted);
  EXPECT_TRUE(report.prediction.drifted);
  EXPECT_EQ(report.drifted_inputs, 2u);
}

TEST(DriftStatistics, ATrainedBundleCarriesItsProfileThroughItsFile) {
  auto summary = train::fit(testing::lending_rows(0, 2000), train::TrainRequest{.target = "Class"});
  ASSERT_TRUE(summary.ok());
  data::Table rows = testing::lending_rows(0, 2000);
  auto profile = model::profile_of(rows, {"funded_amnt", "term", "addr_state"}, std::vector<float>(2000, 0.2f));
  auto bundle = summary->bundle->with_profile(profile);
  auto parsed = model::Bundle::parse(bundle->serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const auto& read = (*parsed)->manifest().profile;
  ASSERT_EQ(read.inputs.size(), 3u);
  EXPECT_EQ(read.inputs[1].levels, profile.inputs[1].levels);
  EXPECT_EQ(read.inputs[0].counts, profile.inputs[0].counts);
  EXPECT_EQ(read.prediction.edges, profile.prediction.edges);
  // A bundle without one keeps its bytes.
  EXPECT_EQ(summary->bundle->serialize(), (*model::Bundle::parse(summary->bundle->serialize()))->serialize());
}

// Performance per slice: the largest slices first, and past kMaxSlices one "(other)" slice, so
// slicing by a column of ids stays a short report.
TEST(Performance, IsReportedPerSliceAndBounded) {
  auto summary = train::fit(testing::lending_rows(0, 2000), train::TrainRequest{.target = "Class"});
  ASSERT_TRUE(summary.ok());
  data::Table rows = testing::lending_rows(2000, 1000);
  auto predictions = summary->bundle->predict(rows);
  ASSERT_TRUE(predictions.ok());
  std::vector<float> scores(predictions->scores.begin(), predictions->scores.end());
  const data::Column* label = rows.find("Class");
  std::vector<std::string> ids, terms, many;
  std::unordered_map<std::string, std::string> labels;
  for (std::size_t row = 0; row < rows.row_count(); ++row) {
    ids.push_back("r" + std::to_string(row));
    if (row % 10 != 0) labels[ids.back()] = label->text_at(row);  // every tenth is not labelled yet
    terms.push_back(rows.find("term")->text_at(row));
    many.push_back(std::to_string(row % 120));
  }
  auto by_term = performance(*summary->bundle, ids, scores, labels, terms);
  ASSERT_TRUE(by_term.ok()) << by_term.status().message();
  EXPECT_EQ(by_term->rows, 900u);
  EXPECT_EQ(by_term->unlabelled, 100u);
  ASSERT_EQ(by_term->slices.size(), 2u);
  EXPECT_GE(by_term->slices[0].rows, by_term->slices[1].rows);
  EXPECT_EQ(by_term->slices[0].rows + by_term->slices[1].rows, 900u);
  EXPECT_FALSE(std::isnan(by_term->slices[0].metrics.get("auc")));
  auto by_many = performance(*summary->bundle, ids, scores, labels, many);
  ASSERT_TRUE(by_many.ok());
  ASSERT_EQ(by_many->slices.size(), kMaxSlices);
  EXPECT_EQ(by_many->slices.back().value, "(other)");
  std::size_t total = 0;
  for (const auto& slice : by_many->slices) total += slice.rows;
  EXPECT_EQ(total, 900u);
}

}  // namespace
}  // namespace slipway::monitor
