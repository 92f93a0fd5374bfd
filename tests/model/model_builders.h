// Small models built by hand for the model tests: numeric inputs, tree nodes, margins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "slipway/model.h"

namespace slipway::model {

// `count` numeric inputs x0, x1, ..., passed through as they are.
inline Preprocessor numeric_inputs(std::size_t count) {
  std::vector<FeatureTransform> features(count);
  for (std::size_t index = 0; index < count; ++index) features[index].name = "x" + std::to_string(index);
  return Preprocessor(std::move(features));
}

// A split on `feature` whose children are `left` and `left + 1`; at a categorical split `value`
// is TreeNode::category_set_value(offset).
inline TreeNode split_node(std::uint32_t feature, std::uint32_t left, float value, bool categorical = false) {
  TreeNode node;
  node.feature_and_flags = feature | (categorical ? TreeNode::kCategoricalFlag : 0U);
  node.left = left;
  node.right = left + 1;
  node.value = value;
  return node;
}

inline TreeNode leaf_node(float value) {
  TreeNode node;
  node.feature_and_flags = TreeNode::kLeafFlag;
  node.value = value;
  return node;
}

// Two classes on two inputs, one tree each: tree 0 (class 0) splits on the category set of input 0
// (codes 2 and 5 go right: leaves -1, 1), tree 1 (class 1) on x1 < 0.5 (leaves 10, 20). No base
// margin, no statistics.
inline TreeEnsembleData two_class_trees() {
  TreeEnsembleData data;
  data.input_width = 2;
  data.group_count = 2;
  data.category_sets = {1, (1U << 2) | (1U << 5)};  // one word: categories 2 and 5
  data.nodes = {split_node(0, 1, TreeNode::category_set_value(0), true),
                leaf_node(-1),
                leaf_node(1),
                split_node(1, 4, 0.5f, false),
                leaf_node(10),
                leaf_node(20)};
  data.roots = {0, 3};
  data.tree_groups = {0, 1};
  return data;
}

// The model's margins for rows x input_width() features.
inline std::vector<float> margins(const Model& model, const std::vector<float>& rows) {
  std::size_t count = rows.size() / model.input_width();
  std::vector<float> out(count * model.output_count());
  model.predict_margin(rows, count, out);
  return out;
}

}  // namespace slipway::model
