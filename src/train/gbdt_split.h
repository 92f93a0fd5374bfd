// Split finding for GBDT training: the loss reduction of a split and the best split of a node
// from its histogram. Private to train.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>

#include "train/gbdt_binning.h"
#include "train/gbdt_trainer.h"

namespace slipway::train {

// A set of category codes (bin numbers), one bit each.
using CategorySet = std::array<std::uint64_t, kBinsPerFeature / 64>;

struct Split {
  double gain = 0;
  std::uint32_t feature = 0;
  std::uint32_t bin = 0;  // numeric: left takes bins <= bin
  bool default_left = false;
  bool categorical = false;
  CategorySet right_categories{};  // categorical: the codes that go right
  bool valid = false;              // false: no split improves the loss (the node stays a leaf)

  // Where a row with this bin code goes. Inline: partitioning calls it once per row.
  bool goes_left(std::uint8_t bin_of_row) const {
    if (bin_of_row == kMissingBin) return default_left;
    if (categorical) return ((right_categories[bin_of_row / 64] >> (bin_of_row % 64)) & 1U) == 0;
    return bin_of_row <= bin;
  }
};

// The second-order loss of a leaf and of a split (XGBoost's formulas, with L1 and L2 on leaf
// weights, gamma per split and min_child_weight per child). Holds a reference to the options.
class SplitScorer {
 public:
  explicit SplitScorer(const GbdtOptions& options) : options_(options) {}

  // L1 soft-thresholding of the gradient sum, as in XGBoost's ThresholdL1.
  double thresholded(double gradient) const {
    if (gradient > options_.alpha) return gradient - options_.alpha;
    if (gradient < -options_.alpha) return gradient + options_.alpha;
    return 0.0;
  }
  double score(GradientStats stats, double extra_l2 = 0.0) const {
    double t = thresholded(stats.gradient);
    return t * t / (stats.hessian + options_.lambda + extra_l2);
  }
  // The Newton step: the leaf weight that minimizes the leaf's loss.
  double weight(GradientStats stats) const { return -thresholded(stats.gradient) / (stats.hessian + options_.lambda); }
  // Loss reduction of splitting `total` into `left` and the rest; -inf when a child is too light.
  double gain(GradientStats left, GradientStats total, double parent_score, double extra_l2 = 0.0) const {
    GradientStats right{total.gradient - left.gradient, total.hessian - left.hessian};
    if (left.hessian < options_.min_child_weight || right.hessian < options_.min_child_weight) {
      return -std::numeric_limits<double>::infinity();
    }
    return 0.5 * (score(left, extra_l2) + score(right, extra_l2) - parent_score) - options_.gamma;
  }

 private:
  const GbdtOptions& options_;
};

// The best threshold of one numeric feature. `bins` is the feature's kBinsPerFeature bins,
// `parent_score` scorer.score(total). Each cut is tried with the missing values on either side
// (when the node has any); a gain must beat the best so far by more than 1e-12, so ties keep the
// lowest bin, and missing-right before missing-left. Invalid when no cut has a positive gain.
Split best_numeric_split(const GradientStats* bins, std::uint32_t feature, std::uint32_t bin_count, GradientStats total,
                         double parent_score, const SplitScorer& scorer);

// The best partition of one categorical feature's codes [0, bin_count): the categories present
// (at least min_child_weight of hessian) sorted by gradient / (hessian + cat_smooth), cut at the
// best point of that order, scored with cat_l2 more L2. Lighter and unseen categories go left.
Split best_categorical_split(const GradientStats* bins, std::uint32_t feature, std::uint32_t bin_count,
                             GradientStats total, const SplitScorer& scorer, const GbdtOptions& options);

// The best split of a node over `features`, from its histogram and totals: the feature whose
// best split has the largest gain (the lowest feature on a tie). Features are searched on up to
// `threads` threads when there are at least 8; the result does not depend on it.
Split find_best_split(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                      const GradientStats* histogram, GradientStats total, const SplitScorer& scorer,
                      const GbdtOptions& options, int threads);

}  // namespace slipway::train
