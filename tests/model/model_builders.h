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

// The model's margins for rows x input_width() features.
inline std::vector<float> margins(const Model& model, const std::vector<float>& rows) {
  std::size_t count = rows.size() / model.input_width();
  std::vector<float> out(count * model.output_count());
  model.predict_margin(rows, count, out);
  return out;
}

}  // namespace slipway::model
