// Histogram building: each row's gradient pair is added to one bin per feature, reading the row's
// bin codes from the row-major table (a row's bins share a cache line). Large nodes are cut into
// fixed row blocks, built into per-block tables in parallel and summed in block order, so the
// sums do not depend on the thread count.
#include "train/gbdt_histogram.h"

#include <algorithm>

#include "slipway/core.h"

namespace slipway::train {
namespace {

void accumulate_rows(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                     std::span<const std::uint32_t> rows, const std::vector<GradientStats>& row_stats,
                     GradientStats* histogram) {
  const std::size_t width = binned.width;
  const bool all_features = features.size() == width;
  // Below the root a node's rows are scattered, and each row's bins and gradients are a cache
  // miss: ask for them a few rows ahead (XGBoost's histogram builder does the same).
  constexpr std::size_t kPrefetchDistance = 16;
  const std::size_t count = rows.size();
  for (std::size_t index = 0; index < count; ++index) {
    if (index + kPrefetchDistance < count) {
      std::uint32_t ahead = rows[index + kPrefetchDistance];
      __builtin_prefetch(binned.bins.data() + static_cast<std::size_t>(ahead) * width);
      __builtin_prefetch(row_stats.data() + ahead);
    }
    const std::uint32_t row = rows[index];
    const std::uint8_t* bins = binned.bins.data() + static_cast<std::size_t>(row) * width;
    const GradientStats stats = row_stats[row];
    if (all_features) {
      for (std::size_t feature = 0; feature < width; ++feature) {
        GradientStats& bin = histogram[feature * kBinsPerFeature + bins[feature]];
        bin.gradient += stats.gradient;
        bin.hessian += stats.hessian;
      }
    } else {
      for (std::uint32_t feature : features) {
        GradientStats& bin = histogram[feature * kBinsPerFeature + bins[feature]];
        bin.gradient += stats.gradient;
        bin.hessian += stats.hessian;
      }
    }
  }
}

// Only the bins a feature can use are read later, so only those are cleared.
void clear_used_bins(const BinnedFeatures& binned, std::span<const std::uint32_t> features, GradientStats* histogram) {
  for (std::uint32_t feature : features) {
    GradientStats* bins = histogram + feature * kBinsPerFeature;
    std::fill(bins, bins + binned.bin_count[feature], GradientStats{});
    bins[kMissingBin] = GradientStats{};
  }
}

}  // namespace

void HistogramBuilder::build(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                             std::span<const std::uint32_t> node_rows, const std::vector<GradientStats>& row_stats,
                             Histogram& histogram, int threads) {
  const std::size_t table = binned.width * kBinsPerFeature;
  histogram.resize(table);
  clear_used_bins(binned, features, histogram.data());
  std::size_t blocks = (node_rows.size() + kRowsPerHistogramBlock - 1) / kRowsPerHistogramBlock;
  if (blocks <= 1 || threads <= 1) {
    accumulate_rows(binned, features, node_rows, row_stats, histogram.data());
    return;
  }
  partial_.resize(blocks * table);
  parallel_for(blocks, threads, [&](std::size_t block) {
    clear_used_bins(binned, features, partial_.data() + block * table);
    std::size_t begin = block * kRowsPerHistogramBlock;
    std::size_t count = std::min(kRowsPerHistogramBlock, node_rows.size() - begin);
    accumulate_rows(binned, features, node_rows.subspan(begin, count), row_stats, partial_.data() + block * table);
  });
  parallel_for(features.size(), threads, [&](std::size_t index) {
    std::size_t offset = features[index] * kBinsPerFeature;
    for (std::size_t block = 0; block < blocks; ++block) {
      const GradientStats* source = partial_.data() + block * table + offset;
      GradientStats* target = histogram.data() + offset;
      for (std::size_t bin = 0; bin < kBinsPerFeature; ++bin) {
        if (bin == binned.bin_count[features[index]]) bin = kMissingBin;
        target[bin].gradient += source[bin].gradient;
        target[bin].hessian += source[bin].hessian;
      }
    }
  });
}

void build_histogram_plainly(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                             std::span<const std::uint32_t> node_rows, const std::vector<GradientStats>& row_stats,
                             Histogram& histogram) {
  histogram.assign(binned.width * kBinsPerFeature, GradientStats{});
  for (std::uint32_t row : node_rows) {
    for (std::uint32_t feature : features) {
      GradientStats& bin = histogram[feature * kBinsPerFeature + binned.bins[row * binned.width + feature]];
      bin.gradient += row_stats[row].gradient;
      bin.hessian += row_stats[row].hessian;
    }
  }
}

void subtract_histogram(const BinnedFeatures& binned, std::span<const std::uint32_t> features, const Histogram& small,
                        Histogram& parent_to_large) {
  for (std::uint32_t feature : features) {
    GradientStats* large_bins = parent_to_large.data() + feature * kBinsPerFeature;
    const GradientStats* small_bins = small.data() + feature * kBinsPerFeature;
    for (std::size_t bin = 0; bin < binned.bin_count[feature]; ++bin) {
      large_bins[bin].gradient -= small_bins[bin].gradient;
      large_bins[bin].hessian -= small_bins[bin].hessian;
    }
    large_bins[kMissingBin].gradient -= small_bins[kMissingBin].gradient;
    large_bins[kMissingBin].hessian -= small_bins[kMissingBin].hessian;
  }
}

GradientStats histogram_total(const BinnedFeatures& binned, const Histogram& histogram, std::uint32_t feature) {
  const GradientStats* bins = histogram.data() + feature * kBinsPerFeature;
  GradientStats total = bins[kMissingBin];
  for (std::size_t bin = 0; bin < binned.bin_count[feature]; ++bin) {
    total.gradient += bins[bin].gradient;
    total.hessian += bins[bin].hessian;
  }
  return total;
}

}  // namespace slipway::train
