// GBDT binning alone: cut points of known distributions, the missing bin, categorical codes, and
// the branch-free bin lookup against a plain count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "train/gbdt_binning.h"

namespace slipway::train {
namespace {

constexpr float kMissing = std::numeric_limits<float>::quiet_NaN();

GbdtMatrix matrix_of(const std::vector<float>& features, std::size_t width) {
  return GbdtMatrix{features, features.size() / width, {}, {}};
}

TEST(GbdtBinning, QuantileCutsOfAUniformColumnAreEvenlySpacedRanks) {
  // 0, 1, ..., 999 (shuffled order does not matter): max_bin=5 asks for 4 cuts, at the values of
  // ranks 200, 400, 600 and 800.
  std::vector<float> features;
  for (int value = 999; value >= 0; --value) features.push_back(static_cast<float>(value));
  GbdtOptions options;
  options.max_bin = 5;
  auto binned = bin_features(matrix_of(features, 1), 1, options, 1);
  ASSERT_TRUE(binned.ok()) << binned.status().message();
  EXPECT_EQ(binned->cuts[0], (std::vector<float>{200, 400, 600, 800}));
  EXPECT_EQ(binned->bin_count[0], 5u);
  // bin(x) = number of cuts <= x: 199 -> 0, 200 -> 1, 999 -> 4.
  EXPECT_EQ(binned->bins[999 - 199], 0);
  EXPECT_EQ(binned->bins[999 - 200], 1);
  EXPECT_EQ(binned->bins[999 - 799], 3);
  EXPECT_EQ(binned->bins[999 - 800], 4);
  EXPECT_EQ(binned->bins[0], 4);
}

TEST(GbdtBinning, FewDistinctValuesGetABinEachAndMissingValuesTheirOwn) {
  std::vector<float> features = {3, kMissing, 1, 2, 2, kMissing, 1, 3};
  GbdtOptions options;
  auto binned = bin_features(matrix_of(features, 1), 1, options, 1);
  ASSERT_TRUE(binned.ok());
  EXPECT_EQ(binned->cuts[0], (std::vector<float>{2, 3}));
  EXPECT_EQ(binned->bin_count[0], 3u);
  EXPECT_EQ(binned->bins, (std::vector<std::uint8_t>{2, kMissingBin, 0, 1, 1, kMissingBin, 0, 2}));
}

TEST(GbdtBinning, AllMissingColumnHasOneBinAndNoCuts) {
  std::vector<float> features = {kMissing, 1, kMissing, 2, kMissing, 3};  // feature 0 all missing
  auto binned = bin_features(matrix_of(features, 2), 2, GbdtOptions{}, 1);
  ASSERT_TRUE(binned.ok());
  EXPECT_TRUE(binned->cuts[0].empty());
  EXPECT_EQ(binned->bin_count[0], 1u);
  EXPECT_EQ(binned->bins[0], kMissingBin);
  EXPECT_EQ(binned->bin_count[1], 3u);
}

TEST(GbdtBinning, CategoricalCodesAreTheirBinsAndBinCountIsTheLargestPlusOne) {
  std::vector<float> features = {4, 0.5f, 0, 1.5f, kMissing, 2.5f, 7, 3.5f};  // feature 0 categorical
  GbdtOptions options;
  options.categorical = {true, false};
  auto binned = bin_features(matrix_of(features, 2), 2, options, 1);
  ASSERT_TRUE(binned.ok());
  EXPECT_EQ(binned->bin_count[0], 8u);
  EXPECT_TRUE(binned->cuts[0].empty());
  std::vector<std::uint8_t> column(binned->column(0), binned->column(0) + 4);
  EXPECT_EQ(column, (std::vector<std::uint8_t>{4, 0, kMissingBin, 7}));
  EXPECT_EQ(binned->bin_count[1], 4u);
}

TEST(GbdtBinning, ACategoricalCodeThatIsNotAWholeNumberInRangeIsRefused) {
  for (float bad : {1.5f, -1.0f, 255.0f}) {
    std::vector<float> features = {1, bad, 2};
    GbdtOptions options;
    options.categorical = {true};
    auto binned = bin_features(matrix_of(features, 1), 1, options, 1);
    ASSERT_FALSE(binned.ok()) << bad;
    EXPECT_EQ(binned.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(binned.status().message().find("categorical feature 0"), std::string::npos);
  }
}

TEST(GbdtBinning, ColumnsAreTheRowMajorBinsTransposedAndThreadsChangeNothing) {
  // More rows than a binning block (16,384), so the blocks run on both threads.
  std::mt19937_64 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t width = 3;
  const std::size_t rows = 40'000;
  std::vector<float> features(rows * width);
  for (auto& value : features) value = random() % 17 == 0 ? kMissing : normal(random);
  GbdtOptions options;
  options.max_bin = 31;
  auto single = bin_features(matrix_of(features, width), width, options, 1);
  auto multi = bin_features(matrix_of(features, width), width, options, 2);
  ASSERT_TRUE(single.ok() && multi.ok());
  EXPECT_EQ(single->bins, multi->bins);
  EXPECT_EQ(single->cuts, multi->cuts);
  for (std::size_t feature = 0; feature < width; ++feature) {
    EXPECT_EQ(single->bin_count[feature], 31u);
    for (std::size_t row = 0; row < rows; ++row) {
      ASSERT_EQ(single->column(feature)[row], single->bins[row * width + feature]);
    }
  }
}

TEST(GbdtBinning, BranchFreeLookupCountsTheCutsAtOrBelowTheValue) {
  std::mt19937_64 random(5);
  std::uniform_real_distribution<float> uniform(-10.0f, 10.0f);
  for (std::size_t cut_count : {0u, 1u, 7u, 128u, 254u}) {
    std::vector<float> cuts;
    for (std::size_t index = 0; index < cut_count; ++index) cuts.push_back(uniform(random));
    std::sort(cuts.begin(), cuts.end());
    std::vector<float> padded(255, std::numeric_limits<float>::infinity());
    std::copy(cuts.begin(), cuts.end(), padded.begin());
    std::vector<float> values = {-11.0f, 11.0f};
    for (float cut : cuts) values.push_back(cut);  // exactly at a cut: counted
    for (int draw = 0; draw < 200; ++draw) values.push_back(uniform(random));
    for (float value : values) {
      auto plain = static_cast<std::size_t>(std::upper_bound(cuts.begin(), cuts.end(), value) - cuts.begin());
      ASSERT_EQ(bin_of(padded.data(), value), plain) << "value " << value << " cuts " << cut_count;
    }
  }
}

}  // namespace
}  // namespace slipway::train
