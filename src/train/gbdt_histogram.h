// Gradient histograms for GBDT training: per node, per feature, the gradient and hessian sums of
// the node's rows in each bin. Private to train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "train/gbdt_binning.h"
#include "train/gbdt_trainer.h"

namespace slipway::train {

// One node's histogram: width x kBinsPerFeature bins, feature-major (the last bin of a feature
// holds its missing values). Only a feature's first bin_count bins and its missing bin are
// meaningful; the bins between them are never cleared and hold stale sums.
using Histogram = std::vector<GradientStats>;

// Rows per histogram block. A node with more rows is built block by block on the threads, each
// block into its own table, and the tables are summed in block order: the same sums whatever the
// thread count. Smaller nodes are built on one thread (waking a worker costs microseconds). Row
// partitioning uses the same blocks.
constexpr std::size_t kRowsPerHistogramBlock = 16384;

// Builds node histograms. With threads > 1 it keeps per-block tables between calls (so one
// builder serves one thread at a time); with one thread it keeps no state, so single-thread
// builds may run concurrently on one builder.
class HistogramBuilder {
 public:
  // Fills `histogram` (resized to width x kBinsPerFeature) with the sums of `row_stats` over
  // `node_rows` for each of `features` (ascending, or every feature); other features' bins are
  // left as they were.
  void build(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
             std::span<const std::uint32_t> node_rows, const std::vector<GradientStats>& row_stats,
             Histogram& histogram, int threads);

 private:
  std::vector<GradientStats> partial_;
};

// The reference build: every row of the node added in row order on one thread, with every bin
// of the table cleared first. Tests check the builder against it.
void build_histogram_plainly(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                             std::span<const std::uint32_t> node_rows, const std::vector<GradientStats>& row_stats,
                             Histogram& histogram);

// The sibling's histogram from the parent's: `parent_to_large` holds the parent's bins and becomes
// the larger child's, parent minus `small`, for the used bins of `features`.
void subtract_histogram(const BinnedFeatures& binned, std::span<const std::uint32_t> features, const Histogram& small,
                        Histogram& parent_to_large);

// The node's gradient and hessian sums, read from the used bins of `feature` (every row lands in
// one bin of each feature, so any feature gives them).
GradientStats histogram_total(const BinnedFeatures& binned, const Histogram& histogram, std::uint32_t feature);

}  // namespace slipway::train
