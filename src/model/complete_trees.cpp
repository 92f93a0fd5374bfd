// Complete-tree prediction for TreeEnsembleModel: the layout built from the model's trees, and
// the call into the kernel chosen at run time (src/kernels/). Every kernel adds leaves per row in
// tree order, so it gives the same floats as the pointer walk (and as XGBoost).
#include "model/complete_trees.h"

#include <algorithm>
#include <limits>

namespace slipway::model {

using kernels::kDefaultLeftBit;

CompleteTrees::CompleteTrees(const TreeEnsembleArrays& data, std::span<const std::uint32_t> depths) {
  std::size_t internal_total = 0;
  std::size_t leaf_total = 0;
  for (std::uint32_t depth : depths) {
    if (depth > kMaxDepth) return;
    internal_total += (std::size_t{1} << depth) - 1;
    leaf_total += std::size_t{1} << depth;
  }
  for (const auto& node : data.nodes) {
    if (!node.is_leaf() && node.is_categorical()) return;
  }
  // Padding sparse deep trees can multiply the size (a depth-10 path of 21 nodes pads to 2,047):
  // past 64x the nodes, or 64M slots, the pointer walk is the better layout.
  std::size_t slots = internal_total + leaf_total;
  if (slots > 64 * std::max<std::size_t>(data.nodes.size(), 1024) || slots > (std::size_t{1} << 26)) return;
  thresholds_.assign(internal_total, std::numeric_limits<float>::quiet_NaN());
  features_.assign(internal_total, kDefaultLeftBit);
  leaves_.assign(leaf_total, 0.0f);
  std::uint32_t internal_offset = 0;
  std::uint32_t leaf_offset = 0;
  struct Placement {
    std::uint32_t node;
    std::uint32_t position;  // in the complete tree, root 0, children 2p+1 and 2p+2
    std::uint32_t level;
  };
  std::vector<Placement> pending;
  for (std::size_t tree = 0; tree < data.roots.size(); ++tree) {
    std::uint32_t depth = depths[tree];
    std::uint32_t first_leaf = (1U << depth) - 1;
    std::uint32_t group = data.tree_groups.empty() ? 0 : data.tree_groups[tree];
    trees_.push_back({internal_offset, leaf_offset, depth, group});
    pending.assign(1, {data.roots[tree], 0, 0});
    while (!pending.empty()) {
      Placement at = pending.back();
      pending.pop_back();
      const TreeNode& node = data.nodes[at.node];
      if (at.level == depth) {
        leaves_[leaf_offset + at.position - first_leaf] = node.value;
        continue;
      }
      if (node.is_leaf()) {
        // Padding: the node keeps its always-left defaults; the leaf is copied down both sides so
        // every position below holds it.
        pending.push_back({at.node, 2 * at.position + 1, at.level + 1});
        pending.push_back({at.node, 2 * at.position + 2, at.level + 1});
        continue;
      }
      thresholds_[internal_offset + at.position] = node.value;
      features_[internal_offset + at.position] = node.feature() | (node.default_left() ? kDefaultLeftBit : 0U);
      pending.push_back({node.left, 2 * at.position + 1, at.level + 1});
      pending.push_back({node.right, 2 * at.position + 2, at.level + 1});
    }
    internal_offset += first_leaf;
    leaf_offset += first_leaf + 1;
  }
  usable_ = true;
}

std::size_t CompleteTrees::add_leaves(const float* features, std::size_t rows, std::size_t width, float* margins,
                                      std::size_t group_count) const {
  // Where the choice is the scalar reference (a walk of this layout one row at a time), the model
  // runs its own pointer walk instead, what a CPU without AVX2 has always run.
  const kernels::TreeKernelVariant& kernel = kernels::tree_kernel();
  if (kernel.is_reference) return 0;
  kernels::CompleteTreesView layout{trees_, thresholds_, features_, leaves_};
  kernel.add_leaves(layout, {features, rows * width}, rows, width, {margins, rows * group_count}, group_count);
  return rows;
}

}  // namespace slipway::model
