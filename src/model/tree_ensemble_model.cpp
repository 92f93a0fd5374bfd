#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "model/complete_trees.h"
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

std::uint32_t TreeNode::category_set() const { return std::bit_cast<std::uint32_t>(value); }

float TreeNode::category_set_value(std::uint32_t offset) { return std::bit_cast<float>(offset); }

bool goes_left(const TreeNode& node, float x, std::span<const std::uint32_t> category_sets) {
  if (std::isnan(x)) return node.default_left();
  if (!node.is_categorical()) return x < node.value;
  const std::uint32_t* set = category_sets.data() + node.category_set();
  // Negative, fractional or out-of-range codes are categories the split never saw: left.
  if (!(x >= 0.0f) || x >= static_cast<float>(set[0]) * 32.0f) return true;
  auto code = static_cast<std::uint32_t>(x);
  if (static_cast<float>(code) != x) return true;
  return ((set[1 + code / 32] >> (code % 32)) & 1U) == 0;
}

TreeEnsembleArrays::TreeEnsembleArrays(TreeEnsembleData data)
    : nodes(std::move(data.nodes)),
      roots(std::move(data.roots)),
      input_width(data.input_width),
      base_margin(data.base_margin),
      cover(std::move(data.cover)),
      gain(std::move(data.gain)),
      category_sets(std::move(data.category_sets)),
      tree_groups(std::move(data.tree_groups)),
      group_count(data.group_count) {}

TreeEnsembleData TreeEnsembleArrays::to_data() const {
  TreeEnsembleData data;
  data.nodes = nodes.to_vector();
  data.roots = roots.to_vector();
  data.input_width = input_width;
  data.base_margin = base_margin;
  data.cover = cover.to_vector();
  data.gain = gain.to_vector();
  data.category_sets = category_sets.to_vector();
  data.tree_groups = tree_groups.to_vector();
  data.group_count = group_count;
  return data;
}

TreeEnsembleModel::TreeEnsembleModel(TreeEnsembleData data) : TreeEnsembleModel(TreeEnsembleArrays(std::move(data))) {}

TreeEnsembleModel::TreeEnsembleModel(TreeEnsembleArrays arrays, bool quantized_layout, bool bf16_leaves)
    : data_(std::move(arrays)) {
  if (data_.cover.size() != data_.nodes.size() || data_.gain.size() != data_.nodes.size()) {
    data_.cover = {};
    data_.gain = {};
  }
  for (const TreeNode& node : data_.nodes)
    has_categorical_ = has_categorical_ || (!node.is_leaf() && node.is_categorical());
  const auto& nodes = data_.nodes;
  // Depth of each tree (its longest root-to-leaf path), by a walk with an explicit stack.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pending;
  for (std::uint32_t root : data_.roots) {
    std::uint32_t deepest = 0;
    pending.assign(1, {root, 0});
    while (!pending.empty()) {
      auto [index, depth] = pending.back();
      pending.pop_back();
      const TreeNode& node = nodes[index];
      if (node.is_leaf()) {
        deepest = std::max(deepest, depth);
        continue;
      }
      pending.push_back({node.left, depth + 1});
      pending.push_back({node.right, depth + 1});
    }
    depth_.push_back(deepest);
  }
  auto complete = std::make_unique<CompleteTrees>(data_, depth_);
  if (complete->usable() && quantized_layout) {
    auto quantized = std::make_unique<QuantizedTrees>(*complete, data_.input_width, bf16_leaves);
    if (quantized->usable()) quantized_ = std::move(quantized);
  }
  if (complete->usable() && quantized_ == nullptr) complete_ = std::move(complete);
  // The stepping layout, unless the quantized layout or the complete-tree kernel (chosen once per
  // process) does every prediction: then the nodes are read only by explanations and
  // serialization, from data_.
  if (quantized_ == nullptr && (complete_ == nullptr || kernels::tree_kernel().is_reference)) {
    stepping_nodes_.assign(data_.nodes.begin(), data_.nodes.end());
    for (std::uint32_t index = 0; index < stepping_nodes_.size(); ++index) {
      TreeNode& node = stepping_nodes_[index];
      if (node.is_leaf()) {
        node.left = index;
        node.right = index;
        node.feature_and_flags = TreeNode::kLeafFlag;  // feature 0: a harmless read while parked
      }
    }
  }
  if (!data_.cover.empty()) {
    const auto& cover = data_.cover;
    // Cover-weighted mean leaf value below each node, children before parents (post-order).
    mean_value_.assign(nodes.size(), 0.0f);
    std::vector<std::pair<std::uint32_t, bool>> stack;
    for (std::uint32_t root : data_.roots) {
      stack.assign(1, {root, false});
      while (!stack.empty()) {
        auto [index, children_done] = stack.back();
        stack.pop_back();
        const TreeNode& node = nodes[index];
        if (node.is_leaf()) {
          mean_value_[index] = node.value;
        } else if (!children_done) {
          stack.push_back({index, true});
          stack.push_back({node.left, false});
          stack.push_back({node.right, false});
        } else {
          float total = cover[index];
          mean_value_[index] =
              total > 0
                  ? (mean_value_[node.left] * cover[node.left] + mean_value_[node.right] * cover[node.right]) / total
                  : 0.0f;
        }
      }
    }
  }
}

TreeEnsembleModel::~TreeEnsembleModel() = default;

std::size_t TreeEnsembleModel::memory_bytes() const {
  auto bytes_of = [](const auto& items) { return items.capacity() * sizeof(items[0]); };
  std::size_t bytes = sizeof(*this) + data_.nodes.memory_bytes() + data_.roots.memory_bytes() +
                      data_.cover.memory_bytes() + data_.gain.memory_bytes() + data_.category_sets.memory_bytes() +
                      data_.tree_groups.memory_bytes() + bytes_of(stepping_nodes_) + bytes_of(depth_) +
                      bytes_of(mean_value_);
  if (complete_ != nullptr) bytes += complete_->memory_bytes();
  if (quantized_ != nullptr) bytes += quantized_->memory_bytes();
  return bytes;
}

bool TreeEnsembleModel::bf16_leaves() const { return quantized_ != nullptr && quantized_->bf16_leaves(); }

Result<std::shared_ptr<const TreeEnsembleModel>> TreeEnsembleModel::with_quantized_layout(bool bf16_leaves) const {
  auto model = std::make_shared<const TreeEnsembleModel>(data_, true, bf16_leaves);
  if (model->quantized_layout()) return model;
  // Only to say why: the layouts are built again.
  CompleteTrees complete(data_, depth_);
  return failed_precondition("these trees cannot be quantized: " +
                             QuantizedTrees(complete, data_.input_width).reason());
}

std::size_t TreeEnsembleModel::quantized_max_thresholds() const {
  return quantized_ == nullptr ? 0 : quantized_->max_thresholds();
}

namespace {

// For TreeEnsembleData (vectors) and TreeEnsembleArrays alike: the same member names.
template <typename Ensemble>
Status validate_ensemble(const Ensemble& data) {
  const auto& nodes = data.nodes;
  const auto& roots = data.roots;
  if (data.group_count == 0) return invalid_argument("the ensemble has no output groups");
  if (!data.tree_groups.empty() && data.tree_groups.size() != roots.size()) {
    return invalid_argument("the ensemble has " + std::to_string(roots.size()) + " trees but " +
                            std::to_string(data.tree_groups.size()) + " tree groups");
  }
  for (std::uint32_t group : data.tree_groups) {
    if (group >= data.group_count) return invalid_argument("a tree's output group is out of range");
  }
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
      if (node.feature() >= data.input_width) {
        return invalid_argument(where + " splits on feature " + std::to_string(node.feature()) + " but the model has " +
                                std::to_string(data.input_width) + " features");
      }
      if (node.is_categorical()) {
        std::size_t offset = node.category_set();
        if (offset >= data.category_sets.size() ||
            data.category_sets[offset] > data.category_sets.size() - offset - 1) {
          return invalid_argument(where + " has a category set outside the ensemble's");
        }
      } else if (std::isnan(node.value)) {
        return invalid_argument(where + " has a NaN threshold");
      }
      pending.push_back(node.left);
      pending.push_back(node.right);
    }
  }
  return {};
}

}  // namespace

Status TreeEnsembleModel::validate(const TreeEnsembleData& data) { return validate_ensemble(data); }

Status TreeEnsembleModel::validate(const TreeEnsembleArrays& arrays) { return validate_ensemble(arrays); }

void TreeEnsembleModel::predict_by_walking(std::span<const float> features, std::size_t rows,
                                           std::span<float> out) const {
  const std::size_t width = data_.input_width;
  const std::size_t groups = data_.group_count;
  const TreeNode* nodes = data_.nodes.data();
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = features.data() + row * width;
    float* margins = out.data() + row * groups;
    std::fill(margins, margins + groups, data_.base_margin);
    for (std::size_t tree = 0; tree < data_.roots.size(); ++tree) {
      const TreeNode* node = nodes + data_.roots[tree];
      while (!node->is_leaf()) {
        node = nodes + (goes_left(*node, x[node->feature()], data_.category_sets) ? node->left : node->right);
      }
      margins[tree_group(tree)] += node->value;
    }
  }
}

void TreeEnsembleModel::predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const {
  const std::size_t width = data_.input_width;
  const std::size_t groups = data_.group_count;
  if (quantized_ != nullptr) {
    std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(rows * groups), data_.base_margin);
    quantized_->add_leaves(features.data(), rows, out.data(), groups);
    return;
  }
  if (complete_ != nullptr) {
    std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(rows * groups), data_.base_margin);
    if (complete_->add_leaves(features.data(), rows, width, out.data(), groups) == rows) return;
  }
  // Few rows have nothing to overlap, so they stop at each leaf instead of taking every level's
  // step; categorical nodes need a set lookup the branch-free step below does not do.
  if (rows < kMinRowsForStepping || has_categorical_ || stepping_nodes_.empty()) {
    predict_by_walking(features, rows, out);
    return;
  }
  // Depth-synchronous traversal: every row of a block advances one level per step, so the rows'
  // walks are independent chains the CPU overlaps, and the direction is a select, not a branch.
  // The sum per row still runs over trees in order, as XGBoost's does.
  const TreeNode* nodes = stepping_nodes_.data();
  std::uint32_t position[kRowsPerBlock];
  for (std::size_t block_begin = 0; block_begin < rows; block_begin += kRowsPerBlock) {
    std::size_t block_rows = std::min(kRowsPerBlock, rows - block_begin);
    const float* block = features.data() + block_begin * width;
    float* margins = out.data() + block_begin * groups;
    std::fill(margins, margins + block_rows * groups, data_.base_margin);
    for (std::size_t tree = 0; tree < data_.roots.size(); ++tree) {
      std::uint32_t root = data_.roots[tree];
      for (std::size_t row = 0; row < block_rows; ++row) position[row] = root;
      for (std::uint32_t level = 0; level < depth_[tree]; ++level) {
        for (std::size_t row = 0; row < block_rows; ++row) {
          const TreeNode& node = nodes[position[row]];
          float value = block[row * width + node.feature()];
          bool go_left = value < node.value;
          go_left = value != value ? node.default_left() : go_left;  // NaN: the learned direction
          position[row] = go_left ? node.left : node.right;
        }
      }
      float* group_margins = margins + tree_group(tree);
      for (std::size_t row = 0; row < block_rows; ++row) group_margins[row * groups] += nodes[position[row]].value;
    }
  }
}

}  // namespace slipway::model
