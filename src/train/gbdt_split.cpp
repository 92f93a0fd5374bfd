// Split search over a node's histogram: numeric features scan their bins left to right with the
// missing values tried on both sides (the learned default direction); categorical features sort
// their categories on their gradient statistics and cut the sorted order (the optimal binary
// partition for these losses, as in LightGBM and XGBoost).
#include "train/gbdt_split.h"

#include <algorithm>
#include <vector>

#include "slipway/core.h"

namespace slipway::train {
namespace {

void consider(Split& best, double gain, std::uint32_t feature, std::uint32_t bin, bool missing_left) {
  if (gain > best.gain + 1e-12) {
    best.gain = gain;
    best.feature = feature;
    best.bin = bin;
    best.default_left = missing_left;
    best.categorical = false;
    best.valid = true;
  }
}

}  // namespace

Split best_numeric_split(const GradientStats* bins, std::uint32_t feature, std::uint32_t bin_count, GradientStats total,
                         double parent_score, const SplitScorer& scorer) {
  Split best;
  GradientStats missing = bins[kMissingBin];
  bool has_missing = missing.hessian != 0.0 || missing.gradient != 0.0;
  GradientStats left{};
  for (std::uint32_t bin = 0; bin + 1 < bin_count; ++bin) {
    // An empty bin moves no row: the cut after it scores as the one before (deep nodes leave
    // most bins empty, and skipping them is most of the search's time).
    if (bins[bin].hessian == 0.0 && bins[bin].gradient == 0.0) continue;
    left.gradient += bins[bin].gradient;
    left.hessian += bins[bin].hessian;
    consider(best, scorer.gain(left, total, parent_score), feature, bin, false);
    if (!has_missing) continue;
    GradientStats with_missing{left.gradient + missing.gradient, left.hessian + missing.hessian};
    consider(best, scorer.gain(with_missing, total, parent_score), feature, bin, true);
  }
  return best;
}

Split best_categorical_split(const GradientStats* bins, std::uint32_t feature, std::uint32_t bin_count,
                             GradientStats total, const SplitScorer& scorer, const GbdtOptions& options) {
  // Categories present in the node, ordered by their smoothed leaf weight; the best binary
  // partition is a cut of this order. Searching 2^k subsets fits noise on many-level columns, so
  // as in LightGBM the order is smoothed (cat_smooth), the split is scored with extra L2
  // (cat_l2), and categories lighter than min_child_weight stay with the unseen ones (left).
  std::vector<std::uint32_t> order;
  for (std::uint32_t code = 0; code < bin_count; ++code) {
    if (bins[code].hessian > 0 && bins[code].hessian >= options.min_child_weight) order.push_back(code);
  }
  double smoothing = options.cat_smooth;
  auto ratio = [&](std::uint32_t code) { return bins[code].gradient / (bins[code].hessian + smoothing); };
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    double ra = ratio(a);
    double rb = ratio(b);
    return ra != rb ? ra < rb : a < b;
  });
  Split best;
  std::size_t best_cut = 0;
  // The categories outside `order` always go left with the first ones.
  GradientStats rest = total;
  for (std::uint32_t code : order) {
    rest.gradient -= bins[code].gradient;
    rest.hessian -= bins[code].hessian;
  }
  GradientStats missing = bins[kMissingBin];
  rest.gradient -= missing.gradient;
  rest.hessian -= missing.hessian;
  double parent_score = scorer.score(total, options.cat_l2);
  GradientStats left = rest;
  for (std::size_t cut = 1; cut < order.size(); ++cut) {
    left.gradient += bins[order[cut - 1]].gradient;
    left.hessian += bins[order[cut - 1]].hessian;
    for (bool missing_left : {false, true}) {
      GradientStats l = left;
      if (missing_left) {
        l.gradient += missing.gradient;
        l.hessian += missing.hessian;
      }
      double gain = scorer.gain(l, total, parent_score, options.cat_l2);
      if (gain > best.gain + 1e-12) {
        best.gain = gain;
        best.feature = feature;
        best.default_left = missing_left;
        best.categorical = true;
        best.valid = true;
        best_cut = cut;
      }
    }
  }
  if (best.valid) {
    for (std::size_t index = best_cut; index < order.size(); ++index) {
      best.right_categories[order[index] / 64] |= std::uint64_t{1} << (order[index] % 64);
    }
  }
  return best;
}

Split find_best_split(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                      const GradientStats* histogram, GradientStats total, const SplitScorer& scorer,
                      const GbdtOptions& options, int threads) {
  double parent_score = scorer.score(total);
  std::vector<Split> per_feature(features.size());
  // Scanning a feature's bins costs the same for a small node as for a large one, so the scan
  // is spread over threads whenever there are enough features to share.
  parallel_for(features.size(), features.size() >= 8 ? threads : 1, [&](std::size_t index) {
    std::uint32_t feature = features[index];
    const GradientStats* bins = histogram + feature * kBinsPerFeature;
    per_feature[index] =
        binned.categorical[feature]
            ? best_categorical_split(bins, feature, binned.bin_count[feature], total, scorer, options)
            : best_numeric_split(bins, feature, binned.bin_count[feature], total, parent_score, scorer);
  });
  Split best;
  for (const auto& split : per_feature) {
    if (split.valid && (!best.valid || split.gain > best.gain + 1e-12)) best = split;
  }
  return best;
}

}  // namespace slipway::train
