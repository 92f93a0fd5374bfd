// GBDT histograms alone: the block-parallel builder against the plain build, and a sibling by
// subtraction against building it directly. Gradients are multiples of 1/8 with small sums, so
// every sum is exact whatever the order and the tests can ask for equality.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "train/gbdt_histogram.h"

namespace slipway::train {
namespace {

struct Fixture {
  std::vector<float> features;
  BinnedFeatures binned;
  std::vector<GradientStats> row_stats;
};

// Four numeric features with 3..40 distinct values and some missing, 40,000 rows (three
// histogram blocks), and dyadic gradients.
Fixture make_fixture(std::size_t rows = 40'000) {
  Fixture fixture;
  const std::size_t width = 4;
  std::mt19937_64 random(11);
  fixture.features.resize(rows * width);
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t feature = 0; feature < width; ++feature) {
      std::uint64_t draw = random();
      fixture.features[row * width + feature] =
          draw % 13 == 0 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(draw % (3 + 12 * feature));
    }
    fixture.row_stats.push_back(
        {static_cast<double>(static_cast<int>(random() % 33) - 16) / 8.0, static_cast<double>(1 + random() % 8) / 8.0});
  }
  GbdtMatrix matrix{fixture.features, rows, {}, {}};
  fixture.binned = *bin_features(matrix, width, GbdtOptions{}, 1);
  return fixture;
}

// The bins the trainer reads: each feature's first bin_count bins and its missing bin.
void expect_used_bins_equal(const BinnedFeatures& binned, const std::vector<std::uint32_t>& features,
                            const Histogram& actual, const Histogram& expected) {
  for (std::uint32_t feature : features) {
    for (std::size_t bin = 0; bin < kBinsPerFeature; ++bin) {
      if (bin >= binned.bin_count[feature] && bin != kMissingBin) continue;
      const GradientStats& a = actual[feature * kBinsPerFeature + bin];
      const GradientStats& e = expected[feature * kBinsPerFeature + bin];
      ASSERT_EQ(a.gradient, e.gradient) << "feature " << feature << " bin " << bin;
      ASSERT_EQ(a.hessian, e.hessian) << "feature " << feature << " bin " << bin;
    }
  }
}

std::vector<std::uint32_t> every_row(std::size_t rows) {
  std::vector<std::uint32_t> order(rows);
  for (std::size_t row = 0; row < rows; ++row) order[row] = static_cast<std::uint32_t>(row);
  return order;
}

TEST(GbdtHistogram, BuilderMatchesThePlainBuildOnOneThreadAndInParallelBlocks) {
  Fixture fixture = make_fixture();
  std::vector<std::uint32_t> rows = every_row(fixture.binned.rows);
  for (const std::vector<std::uint32_t>& features :
       {std::vector<std::uint32_t>{0, 1, 2, 3}, std::vector<std::uint32_t>{1, 3}}) {
    Histogram expected;
    build_histogram_plainly(fixture.binned, features, rows, fixture.row_stats, expected);
    for (int threads : {1, 2, 3}) {
      HistogramBuilder builder;
      // A reused table holding stale sums: the builder clears the bins it fills.
      Histogram histogram(fixture.binned.width * kBinsPerFeature, GradientStats{99.0, 99.0});
      builder.build(fixture.binned, features, rows, fixture.row_stats, histogram, threads);
      expect_used_bins_equal(fixture.binned, features, histogram, expected);
    }
  }
}

TEST(GbdtHistogram, TheSiblingBySubtractionEqualsItsDirectBuild) {
  Fixture fixture = make_fixture();
  std::vector<std::uint32_t> features = {0, 1, 2, 3};
  std::vector<std::uint32_t> parent = every_row(fixture.binned.rows);
  std::vector<std::uint32_t> small;
  std::vector<std::uint32_t> large;
  for (std::uint32_t row : parent) (fixture.binned.bins[row * 4 + 2] <= 5 ? small : large).push_back(row);
  HistogramBuilder builder;
  Histogram parent_histogram;
  Histogram small_histogram;
  Histogram large_direct;
  builder.build(fixture.binned, features, parent, fixture.row_stats, parent_histogram, 2);
  builder.build(fixture.binned, features, small, fixture.row_stats, small_histogram, 2);
  build_histogram_plainly(fixture.binned, features, large, fixture.row_stats, large_direct);
  subtract_histogram(fixture.binned, features, small_histogram, parent_histogram);
  expect_used_bins_equal(fixture.binned, features, parent_histogram, large_direct);
}

TEST(GbdtHistogram, AnyFeatureGivesTheNodeTotals) {
  Fixture fixture = make_fixture(1000);
  std::vector<std::uint32_t> features = {0, 1, 2, 3};
  std::vector<std::uint32_t> rows;
  GradientStats expected;
  for (std::uint32_t row = 0; row < 1000; row += 3) {
    rows.push_back(row);
    expected.gradient += fixture.row_stats[row].gradient;
    expected.hessian += fixture.row_stats[row].hessian;
  }
  HistogramBuilder builder;
  Histogram histogram;
  builder.build(fixture.binned, features, rows, fixture.row_stats, histogram, 1);
  for (std::uint32_t feature : features) {
    GradientStats total = histogram_total(fixture.binned, histogram, feature);
    EXPECT_EQ(total.gradient, expected.gradient) << feature;
    EXPECT_EQ(total.hessian, expected.hessian) << feature;
  }
}

}  // namespace
}  // namespace slipway::train
