// GBDT split finding alone, on hand-made histograms whose best split, gain and default direction
// are worked out by hand: with lambda = 1, a leaf scores G^2 / (H + 1) and a split gains half the
// children's scores minus the parent's.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/gbdt_split.h"

namespace slipway::train {
namespace {

// One feature's kBinsPerFeature bins from (gradient, hessian) pairs for bins 0, 1, ..., plus the
// missing bin.
std::vector<GradientStats> feature_bins(const std::vector<GradientStats>& used, GradientStats missing = {}) {
  std::vector<GradientStats> bins(kBinsPerFeature);
  std::copy(used.begin(), used.end(), bins.begin());
  bins[kMissingBin] = missing;
  return bins;
}

GradientStats total_of(const std::vector<GradientStats>& bins) {
  GradientStats total;
  for (const auto& bin : bins) {
    total.gradient += bin.gradient;
    total.hessian += bin.hessian;
  }
  return total;
}

double leaf_score(double gradient, double hessian) { return gradient * gradient / (hessian + 1.0); }

TEST(GbdtSplit, NumericSplitSeparatesNegativeFromPositiveGradients) {
  GbdtOptions options;  // lambda 1, alpha 0, gamma 0, min_child_weight 1
  SplitScorer scorer(options);
  auto bins = feature_bins({{-4, 2}, {-4, 2}, {4, 2}, {4, 2}});
  GradientStats total = total_of(bins);
  Split split = best_numeric_split(bins.data(), 7, 4, total, scorer.score(total), scorer);
  ASSERT_TRUE(split.valid);
  EXPECT_EQ(split.feature, 7u);
  EXPECT_EQ(split.bin, 1u);  // bins 0 and 1 go left
  EXPECT_FALSE(split.categorical);
  EXPECT_DOUBLE_EQ(split.gain, 0.5 * (leaf_score(-8, 4) + leaf_score(8, 4) - 0.0));
  EXPECT_TRUE(split.goes_left(1));
  EXPECT_FALSE(split.goes_left(2));
}

TEST(GbdtSplit, MissingValuesGoToTheSideTheyResemble) {
  GbdtOptions options;
  SplitScorer scorer(options);
  // Missing rows with negative gradients, like bins 0-1: sending them left gains
  // 0.5 (196/7 + 64/5 - 36/11) against 0.5 (64/5 + 4/7 - 36/11) when sent right.
  auto bins = feature_bins({{-4, 2}, {-4, 2}, {4, 2}, {4, 2}}, {-6, 2});
  GradientStats total{-6, 10};
  Split left = best_numeric_split(bins.data(), 0, 4, total, scorer.score(total), scorer);
  ASSERT_TRUE(left.valid);
  EXPECT_EQ(left.bin, 1u);
  EXPECT_TRUE(left.default_left);
  EXPECT_DOUBLE_EQ(left.gain, 0.5 * (leaf_score(-14, 6) + leaf_score(8, 4) - leaf_score(-6, 10)));
  EXPECT_TRUE(left.goes_left(kMissingBin));

  // Positive gradients: the missing rows join bins 2-3 on the right.
  bins[kMissingBin] = {6, 2};
  total = {6, 10};
  Split right = best_numeric_split(bins.data(), 0, 4, total, scorer.score(total), scorer);
  ASSERT_TRUE(right.valid);
  EXPECT_EQ(right.bin, 1u);
  EXPECT_FALSE(right.default_left);
  EXPECT_FALSE(right.goes_left(kMissingBin));
}

TEST(GbdtSplit, NoSplitWhenAChildWouldBeLighterThanMinChildWeightOrTheGainBelowGamma) {
  auto bins = feature_bins({{-4, 2}, {-4, 2}, {4, 2}, {4, 2}});
  GradientStats total = total_of(bins);
  GbdtOptions heavy;
  heavy.min_child_weight = 4.5;  // every cut leaves a side with at most 4
  SplitScorer heavy_scorer(heavy);
  EXPECT_FALSE(best_numeric_split(bins.data(), 0, 4, total, heavy_scorer.score(total), heavy_scorer).valid);
  GbdtOptions strict;
  strict.gamma = 12.8;  // exactly the best gain: it must be beaten
  SplitScorer strict_scorer(strict);
  EXPECT_FALSE(best_numeric_split(bins.data(), 0, 4, total, strict_scorer.score(total), strict_scorer).valid);
}

TEST(GbdtSplit, EmptyBinsAreSkippedAndTiesKeepTheLowestCut) {
  GbdtOptions options;
  SplitScorer scorer(options);
  // Bins 1 and 2 are empty: the cuts after bins 0, 1 and 2 are the same split; bin 0 is kept.
  auto bins = feature_bins({{-4, 4}, {0, 0}, {0, 0}, {4, 4}});
  GradientStats total = total_of(bins);
  Split split = best_numeric_split(bins.data(), 0, 4, total, scorer.score(total), scorer);
  ASSERT_TRUE(split.valid);
  EXPECT_EQ(split.bin, 0u);
}

TEST(GbdtSplit, AlphaSoftThresholdsTheGradientSums) {
  GbdtOptions options;
  options.alpha = 1.0;
  SplitScorer scorer(options);
  EXPECT_EQ(scorer.thresholded(3.0), 2.0);
  EXPECT_EQ(scorer.thresholded(-3.0), -2.0);
  EXPECT_EQ(scorer.thresholded(0.5), 0.0);
  EXPECT_DOUBLE_EQ(scorer.weight({-3.0, 3.0}), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(scorer.score({-3.0, 3.0}), 4.0 / 4.0);
}

TEST(GbdtSplit, CategoricalPartitionGroupsCategoriesByGradientWhateverTheirCodes) {
  GbdtOptions options;
  options.cat_smooth = 0;
  options.cat_l2 = 0;
  SplitScorer scorer(options);
  // Codes 1 and 3 have positive gradients, 0 and 2 negative: no threshold separates them, one
  // partition does. Code 4 is too light (hessian below min_child_weight) and stays left.
  auto bins = feature_bins({{-5, 5}, {5, 5}, {-5, 5}, {5, 5}, {3, 0.5}});
  GradientStats total = total_of(bins);
  Split split = best_categorical_split(bins.data(), 2, 5, total, scorer, options);
  ASSERT_TRUE(split.valid);
  EXPECT_TRUE(split.categorical);
  EXPECT_EQ(split.feature, 2u);
  EXPECT_EQ(split.right_categories[0], (1u << 1) | (1u << 3));
  for (std::uint8_t code : {0, 2, 4, 9}) EXPECT_TRUE(split.goes_left(code)) << int(code);
  for (std::uint8_t code : {1, 3}) EXPECT_FALSE(split.goes_left(code)) << int(code);
  // Left holds codes 0, 2 and 4: (-7, 10.5); right (10, 10); lambda 1.
  EXPECT_DOUBLE_EQ(split.gain, 0.5 * (leaf_score(-7, 10.5) + leaf_score(10, 10) - leaf_score(3, 20.5)));

  Split numeric = best_numeric_split(bins.data(), 2, 5, total, scorer.score(total), scorer);
  EXPECT_LT(numeric.gain, split.gain);
}

TEST(GbdtSplit, TheBestFeatureWinsAndTheLowestOnATie) {
  // Feature 0 splits weakly, 1 and 2 best and equally well, the rest in between. Feature 1 must
  // win, with one thread or several (8 features or more are searched in parallel).
  const std::size_t width = 9;
  BinnedFeatures binned;
  binned.width = width;
  binned.bin_count.assign(width, 4);
  binned.categorical.assign(width, false);
  std::vector<GradientStats> histogram(width * kBinsPerFeature);
  auto place = [&](std::size_t feature, const std::vector<GradientStats>& used) {
    auto bins = feature_bins(used);
    std::copy(bins.begin(), bins.end(), histogram.begin() + static_cast<std::ptrdiff_t>(feature * kBinsPerFeature));
  };
  // Every feature sums to (0, 8). Best cuts: weak 3.2, other 3.81, best 7.2 (all after bin 1
  // but other's, after bin 0).
  std::vector<GradientStats> weak = {{-1, 2}, {-3, 2}, {3, 2}, {1, 2}};
  std::vector<GradientStats> other = {{-4, 2}, {0, 2}, {0, 2}, {4, 2}};
  std::vector<GradientStats> best = {{-3, 2}, {-3, 2}, {3, 2}, {3, 2}};
  place(0, weak);
  place(1, best);
  place(2, best);
  for (std::size_t feature = 3; feature < width; ++feature) place(feature, other);
  GradientStats total = total_of(best);
  std::vector<std::uint32_t> features = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  GbdtOptions options;
  SplitScorer scorer(options);
  for (int threads : {1, 2}) {
    Split split = find_best_split(binned, features, histogram.data(), total, scorer, options, threads);
    ASSERT_TRUE(split.valid);
    EXPECT_EQ(split.feature, 1u) << threads;
    EXPECT_EQ(split.bin, 1u);
  }
  std::vector<std::uint32_t> without_one = {0, 2, 3};
  EXPECT_EQ(find_best_split(binned, without_one, histogram.data(), total, scorer, options, 1).feature, 2u);
}

}  // namespace
}  // namespace slipway::train
