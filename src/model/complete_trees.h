// A prediction layout for shallow tree ensembles: every tree padded to a complete binary tree of
// its depth, in the arrays the complete-tree kernels of slipway/kernels.h read (which also
// describes the layout). This file builds it from a TreeEnsembleArrays and calls the kernel chosen
// at run time. Private to model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "slipway/kernels.h"
#include "slipway/model.h"

namespace slipway::model {

class CompleteTrees {
 public:
  // Deeper trees would pad to too many nodes; such ensembles keep the pointer walk.
  static constexpr std::uint32_t kMaxDepth = kernels::kCompleteTreeMaxDepth;

  // Empty (usable() false) when a tree is deeper than kMaxDepth or has a categorical split.
  CompleteTrees(const TreeEnsembleArrays& data, std::span<const std::uint32_t> depths);
  bool usable() const { return usable_; }

  // Adds each tree's leaf to margins[row * group_count + group], trees in order, for `rows` rows of
  // `width` features, with the vector kernel the CPU has (kernels::tree_kernel(), chosen at run
  // time). Returns the rows done: all of them, or 0 when the chosen kernel is the scalar reference
  // (a CPU without AVX2, or SLIPWAY_TREE_KERNEL=scalar): the caller then walks the pointer layout.
  std::size_t add_leaves(const float* features, std::size_t rows, std::size_t width, float* margins,
                         std::size_t group_count) const;

  kernels::CompleteTreesView view() const { return {trees_, thresholds_, features_, leaves_}; }

  std::size_t memory_bytes() const {
    return trees_.capacity() * sizeof(kernels::CompleteTree) + thresholds_.capacity() * sizeof(float) +
           features_.capacity() * sizeof(std::uint32_t) + leaves_.capacity() * sizeof(float);
  }

 private:
  bool usable_ = false;
  std::vector<kernels::CompleteTree> trees_;
  std::vector<float> thresholds_;
  // Feature index, with kernels::kDefaultLeftBit set when NaN goes left. Padding nodes below an
  // early leaf have a NaN threshold and the bit set: every row goes left, to the leaf's copy.
  std::vector<std::uint32_t> features_;
  std::vector<float> leaves_;
};

// The quantized complete layout (slipway/kernels.h): the same trees with each node packed into one
// word and split on a bin index, and each feature's sorted split thresholds to map rows to bins.
// Gives CompleteTrees' floats, bit for bit.
class QuantizedTrees {
 public:
  // Empty (usable() false) when `complete` is not usable, the width exceeds
  // kernels::kQuantizedMaxFeatures, or a feature has more than kernels::kQuantizedMaxThresholds
  // distinct thresholds; `reason` then says which.
  // `bf16_leaves`: the leaves kept as bfloat16 (half the bytes; each within 2^-8 relatively), so
  // predictions change slightly; otherwise exact.
  QuantizedTrees(const CompleteTrees& complete, std::size_t width, bool bf16_leaves = false);
  bool bf16_leaves() const { return !bf16_leaves_.empty(); }
  bool usable() const { return usable_; }
  const std::string& reason() const { return reason_; }

  // The bin of every value: the number of the feature's thresholds <= it, kMissingBin for NaN.
  void quantize(const float* features, std::size_t rows, std::uint16_t* bins) const;
  // As CompleteTrees::add_leaves, quantizing the rows in blocks first; always does every row.
  void add_leaves(const float* features, std::size_t rows, float* margins, std::size_t group_count) const;

  // The most distinct thresholds of one feature: up to 254 fits in 8 bits.
  std::size_t max_thresholds() const { return max_thresholds_; }
  std::size_t memory_bytes() const;

 private:
  bool usable_ = false;
  std::string reason_;
  std::size_t width_ = 0;
  std::size_t max_thresholds_ = 0;
  std::vector<kernels::CompleteTree> trees_;
  std::vector<std::uint32_t> nodes_;
  std::vector<float> leaves_;                   // empty with bf16 leaves
  std::vector<std::uint16_t> bf16_leaves_;      // one more than the leaves (gathers read 4 bytes)
  std::vector<std::vector<float>> thresholds_;  // per feature, sorted, distinct
};

}  // namespace slipway::model
