// The quantized complete layout for TreeEnsembleModel: split thresholds become bin indices, nodes
// one packed word each, and rows are mapped to bins before the kernel walks them.
#include <algorithm>
#include <cmath>

#include "model/complete_trees.h"

namespace slipway::model {

using kernels::kMissingBin;
using kernels::kQuantizedDefaultLeftBit;

QuantizedTrees::QuantizedTrees(const CompleteTrees& complete, std::size_t width, bool bf16_leaves) : width_(width) {
  if (!complete.usable()) {
    reason_ = "the trees are deeper than the complete layout takes, or split on categories";
    return;
  }
  if (width > kernels::kQuantizedMaxFeatures) {
    reason_ = "the model has " + std::to_string(width) + " inputs; the quantized layout takes at most " +
              std::to_string(kernels::kQuantizedMaxFeatures);
    return;
  }
  kernels::CompleteTreesView layout = complete.view();
  thresholds_.assign(width, {});
  for (std::size_t node = 0; node < layout.features.size(); ++node) {
    float threshold = layout.thresholds[node];
    if (std::isnan(threshold)) continue;  // padding
    thresholds_[layout.features[node] & ~kernels::kDefaultLeftBit].push_back(threshold);
  }
  for (std::size_t feature = 0; feature < width; ++feature) {
    auto& values = thresholds_[feature];
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    max_thresholds_ = std::max(max_thresholds_, values.size());
    if (values.size() > kernels::kQuantizedMaxThresholds) {
      reason_ = "input " + std::to_string(feature) + " has " + std::to_string(values.size()) +
                " distinct split thresholds; the quantized layout takes at most " +
                std::to_string(kernels::kQuantizedMaxThresholds);
      return;
    }
  }
  trees_.assign(layout.trees.begin(), layout.trees.end());
  if (bf16_leaves) {
    bf16_leaves_.resize(layout.leaves.size() + 1, 0);
    for (std::size_t leaf = 0; leaf < layout.leaves.size(); ++leaf) {
      bf16_leaves_[leaf] = kernels::QuantizedTreesView::float_to_bf16(layout.leaves[leaf]);
    }
  } else {
    leaves_.assign(layout.leaves.begin(), layout.leaves.end());
  }
  nodes_.resize(layout.features.size());
  for (std::size_t node = 0; node < nodes_.size(); ++node) {
    float threshold = layout.thresholds[node];
    if (std::isnan(threshold)) {
      // A NaN threshold (padding below an early leaf, with the default-left bit) sends every row
      // the way of its default: the largest split bin with the bit sends every bin left, missing
      // included; split bin 0 without it sends every bin right.
      bool default_left = (layout.features[node] & kernels::kDefaultLeftBit) != 0;
      nodes_[node] = default_left ? (kQuantizedDefaultLeftBit | (std::uint32_t{kMissingBin} << 16)) : 0U;
      continue;
    }
    std::uint32_t feature = layout.features[node] & ~kernels::kDefaultLeftBit;
    const auto& values = thresholds_[feature];
    // x < threshold exactly when fewer than (index + 1) thresholds are <= x.
    auto split =
        static_cast<std::uint32_t>(std::lower_bound(values.begin(), values.end(), threshold) - values.begin()) + 1;
    bool default_left = (layout.features[node] & kernels::kDefaultLeftBit) != 0;
    nodes_[node] = feature | (default_left ? kQuantizedDefaultLeftBit : 0U) | (split << 16);
  }
  usable_ = true;
}

void QuantizedTrees::quantize(const float* features, std::size_t rows, std::uint16_t* bins) const {
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = features + row * width_;
    std::uint16_t* out = bins + row * width_;
    for (std::size_t feature = 0; feature < width_; ++feature) {
      float value = x[feature];
      const auto& values = thresholds_[feature];
      if (std::isnan(value)) {
        out[feature] = kMissingBin;
        continue;
      }
      // The count of thresholds <= value: a binary search whose steps are selects, not branches
      // (the branches of std::upper_bound mispredict on every other step).
      const float* first = values.data();
      std::size_t length = values.size();
      while (length > 1) {
        std::size_t half = length / 2;
        first = first[half] <= value ? first + half : first;
        length -= half;
      }
      std::size_t count = static_cast<std::size_t>(first - values.data()) + (length == 1 && *first <= value ? 1 : 0);
      out[feature] = static_cast<std::uint16_t>(count);
    }
  }
}

void QuantizedTrees::add_leaves(const float* features, std::size_t rows, float* margins,
                                std::size_t group_count) const {
  // Blocks of rows keep the bins in cache between quantizing and walking; one buffer per thread
  // keeps a request from allocating.
  // At most 64K bins (128 KiB) a block, however wide the rows.
  const std::size_t block_rows_limit = std::clamp<std::size_t>(65'536 / std::max<std::size_t>(width_, 1), 1, 256);
  thread_local std::vector<std::uint16_t> bins;
  const kernels::QuantizedTreeKernelVariant& kernel = kernels::quantized_tree_kernel();
  kernels::QuantizedTreesView layout{trees_, nodes_, leaves_, bf16_leaves_};
  for (std::size_t first = 0; first < rows; first += block_rows_limit) {
    std::size_t block_rows = std::min(block_rows_limit, rows - first);
    bins.resize(block_rows * width_ + 1);
    quantize(features + first * width_, block_rows, bins.data());
    kernel.add_leaves(layout, bins, block_rows, width_, {margins + first * group_count, block_rows * group_count},
                      group_count);
  }
}

std::size_t QuantizedTrees::memory_bytes() const {
  std::size_t bytes = trees_.capacity() * sizeof(kernels::CompleteTree) + nodes_.capacity() * sizeof(std::uint32_t) +
                      leaves_.capacity() * sizeof(float) + bf16_leaves_.capacity() * sizeof(std::uint16_t);
  for (const auto& values : thresholds_) bytes += values.capacity() * sizeof(float);
  return bytes;
}

}  // namespace slipway::model
