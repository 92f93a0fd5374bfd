#include <cmath>

#include "slipway/model.h"

namespace slipway::model {
namespace {

// Rows walked through one tree together, so the tree's nodes stay in L1 across the block
// (XGBoost's CPU predictor uses blocks of 64 for the same reason).
constexpr std::size_t kRowsPerBlock = 64;

}  // namespace

TreeEnsembleModel::TreeEnsembleModel(std::vector<TreeNode> nodes, std::vector<std::uint32_t> roots,
                                     std::size_t input_width, float base_margin)
    : nodes_(std::move(nodes)), roots_(std::move(roots)), input_width_(input_width), base_margin_(base_margin) {}

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
  const TreeNode* nodes = nodes_.data();
  for (std::size_t block_begin = 0; block_begin < rows; block_begin += kRowsPerBlock) {
    std::size_t block_end = std::min(rows, block_begin + kRowsPerBlock);
    for (std::size_t row = block_begin; row < block_end; ++row) out[row] = base_margin_;
    for (std::uint32_t root : roots_) {
      for (std::size_t row = block_begin; row < block_end; ++row) {
        const float* x = features.data() + row * input_width_;
        const TreeNode* node = nodes + root;
        while (!node->is_leaf()) {
          float value = x[node->feature()];
          bool go_left = std::isnan(value) ? node->default_left() : value < node->value;
          node = nodes + (go_left ? node->left : node->right);
        }
        out[row] += node->value;
      }
    }
  }
}

}  // namespace slipway::model
