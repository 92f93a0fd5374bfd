#include <algorithm>
#include <cmath>
#include <utility>

#include "slipway/model.h"

namespace slipway::model {
namespace {

// Rows walked through one tree together, so the tree's nodes stay in L1 across the block
// (XGBoost's CPU predictor uses blocks of 64 for the same reason).
constexpr std::size_t kRowsPerBlock = 64;
// Below this many rows the depth-synchronous walk has too few independent rows to pay for its
// full-depth steps.
constexpr std::size_t kMinRowsForStepping = 8;

}  // namespace

TreeEnsembleModel::TreeEnsembleModel(std::vector<TreeNode> nodes, std::vector<std::uint32_t> roots,
                                     std::size_t input_width, float base_margin, std::vector<float> cover,
                                     std::vector<float> gain)
    : nodes_(std::move(nodes)),
      roots_(std::move(roots)),
      input_width_(input_width),
      base_margin_(base_margin),
      stepping_nodes_(nodes_),
      cover_(std::move(cover)),
      gain_(std::move(gain)) {
  if (cover_.size() != nodes_.size() || gain_.size() != nodes_.size()) {
    cover_.clear();
    gain_.clear();
  }
  for (std::uint32_t index = 0; index < stepping_nodes_.size(); ++index) {
    TreeNode& node = stepping_nodes_[index];
    if (node.is_leaf()) {
      node.left = index;
      node.right = index;
      node.feature_and_flags = TreeNode::kLeafFlag;  // feature 0: a harmless read while parked
    }
  }
  // Depth of each tree (its longest root-to-leaf path), by a walk with an explicit stack.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pending;
  for (std::uint32_t root : roots_) {
    std::uint32_t deepest = 0;
    pending.assign(1, {root, 0});
    while (!pending.empty()) {
      auto [index, depth] = pending.back();
      pending.pop_back();
      const TreeNode& node = nodes_[index];
      if (node.is_leaf()) {
        deepest = std::max(deepest, depth);
        continue;
      }
      pending.push_back({node.left, depth + 1});
      pending.push_back({node.right, depth + 1});
    }
    depth_.push_back(deepest);
  }
  if (!cover_.empty()) {
    // Cover-weighted mean leaf value below each node, children before parents (post-order).
    mean_value_.assign(nodes_.size(), 0.0f);
    std::vector<std::pair<std::uint32_t, bool>> stack;
    for (std::uint32_t root : roots_) {
      stack.assign(1, {root, false});
      while (!stack.empty()) {
        auto [index, children_done] = stack.back();
        stack.pop_back();
        const TreeNode& node = nodes_[index];
        if (node.is_leaf()) {
          mean_value_[index] = node.value;
        } else if (!children_done) {
          stack.push_back({index, true});
          stack.push_back({node.left, false});
          stack.push_back({node.right, false});
        } else {
          float total = cover_[index];
          mean_value_[index] =
              total > 0
                  ? (mean_value_[node.left] * cover_[node.left] + mean_value_[node.right] * cover_[node.right]) / total
                  : 0.0f;
        }
      }
    }
  }
}

Status TreeEnsembleModel::validate(const std::vector<TreeNode>& nodes, const std::vector<std::uint32_t>& roots,
                                   std::size_t input_width) {
  std::vector<char> visited(nodes.size(), 0);
  std::vector<std::uint32_t> pending;
  for (std::size_t tree = 0; tree < roots.size(); ++tree) {
    pending.assign(1, roots[tree]);
    while (!pending.empty()) {
      std::uint32_t index = pending.back();
      pending.pop_back();
      std::string where = "tree " + std::to_string(tree) + ", node " + std::to_string(index);
      if (index >= nodes.size()) return invalid_argument(where + " is outside the node array");
      if (visited[index]) return invalid_argument(where + " is reached twice (the trees are not trees)");
      visited[index] = 1;
      const TreeNode& node = nodes[index];
      if (node.is_leaf()) {
        if (!std::isfinite(node.value)) return invalid_argument(where + " has a non-finite leaf value");
        continue;
      }
      if (node.feature() >= input_width) {
        return invalid_argument(where + " splits on feature " + std::to_string(node.feature()) + " but the model has " +
                                std::to_string(input_width) + " features");
      }
      if (std::isnan(node.value)) return invalid_argument(where + " has a NaN threshold");
      pending.push_back(node.left);
      pending.push_back(node.right);
    }
  }
  return {};
}

void TreeEnsembleModel::predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const {
  // Depth-synchronous traversal: every row of a block advances one level per step, so the rows'
  // walks are independent chains the CPU overlaps, and the direction is a select, not a branch.
  // The sum per row still runs over trees in order, as XGBoost's does.
  const TreeNode* nodes = stepping_nodes_.data();
  if (rows < kMinRowsForStepping) {
    // Few rows: nothing to overlap, so stop at each leaf instead of taking every level's step.
    for (std::size_t row = 0; row < rows; ++row) {
      const float* x = features.data() + row * input_width_;
      float margin = base_margin_;
      for (std::uint32_t root : roots_) {
        const TreeNode* node = nodes + root;
        while (!node->is_leaf()) {
          float value = x[node->feature()];
          bool go_left = std::isnan(value) ? node->default_left() : value < node->value;
          node = nodes + (go_left ? node->left : node->right);
        }
        margin += node->value;
      }
      out[row] = margin;
    }
    return;
  }
  std::uint32_t position[kRowsPerBlock];
  for (std::size_t block_begin = 0; block_begin < rows; block_begin += kRowsPerBlock) {
    std::size_t block_rows = std::min(kRowsPerBlock, rows - block_begin);
    const float* block = features.data() + block_begin * input_width_;
    float* margins = out.data() + block_begin;
    for (std::size_t row = 0; row < block_rows; ++row) margins[row] = base_margin_;
    for (std::size_t tree = 0; tree < roots_.size(); ++tree) {
      std::uint32_t root = roots_[tree];
      for (std::size_t row = 0; row < block_rows; ++row) position[row] = root;
      for (std::uint32_t level = 0; level < depth_[tree]; ++level) {
        for (std::size_t row = 0; row < block_rows; ++row) {
          const TreeNode& node = nodes[position[row]];
          float value = block[row * input_width_ + node.feature()];
          bool go_left = value < node.value;
          go_left = value != value ? node.default_left() : go_left;  // NaN: the learned direction
          position[row] = go_left ? node.left : node.right;
        }
      }
      for (std::size_t row = 0; row < block_rows; ++row) margins[row] += nodes[position[row]].value;
    }
  }
}

}  // namespace slipway::model
