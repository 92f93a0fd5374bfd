// A prediction layout for shallow tree ensembles: every tree padded to a complete binary tree of
// its depth, in the arrays the complete-tree kernels of slipway/kernels.h read (which also
// describes the layout). This file builds it from a TreeEnsembleArrays and calls the kernel chosen
// at run time. Private to model.
#pragma once

#include <cstdint>
#include <span>
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

}  // namespace slipway::model
