// A prediction layout for shallow tree ensembles: every tree padded to a complete binary tree of
// its depth, so a node's children are at 2i+1 and 2i+2 and a walk needs no child pointers, and
// the fields split into arrays (thresholds, features, leaves) that vector gathers can read.
// Private to model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "slipway/model.h"

namespace slipway::model {

class CompleteTrees {
 public:
  // Deeper trees would pad to too many nodes; such ensembles keep the pointer walk.
  static constexpr std::uint32_t kMaxDepth = 10;

  // Empty (usable() false) when a tree is deeper than kMaxDepth or has a categorical split.
  CompleteTrees(const TreeEnsembleData& data, std::span<const std::uint32_t> depths);
  bool usable() const { return usable_; }

  // Adds each tree's leaf to margins[row * group_count + group], trees in order, for `rows` rows of
  // `width` features, with the vector kernel the CPU has (chosen at run time). Returns the rows
  // done: all of them, or 0 on a CPU without AVX2 (the caller then walks the pointer layout).
  std::size_t add_leaves(const float* features, std::size_t rows, std::size_t width, float* margins,
                         std::size_t group_count) const;

  std::size_t memory_bytes() const {
    return trees_.capacity() * sizeof(Tree) + thresholds_.capacity() * sizeof(float) +
           features_.capacity() * sizeof(std::uint32_t) + leaves_.capacity() * sizeof(float);
  }

  struct Tree {
    std::uint32_t internal_offset;  // into thresholds_ and features_
    std::uint32_t leaf_offset;      // into leaves_
    std::uint32_t depth;
    std::uint32_t group;
  };

 private:
  bool usable_ = false;
  std::vector<Tree> trees_;
  std::vector<float> thresholds_;
  // Feature index, with bit 31 set when NaN goes left. Padding nodes below an early leaf have a
  // NaN threshold and bit 31 set: every row goes left, to the leaf's copy.
  std::vector<std::uint32_t> features_;
  std::vector<float> leaves_;
};

}  // namespace slipway::model
