// Exact path-dependent TreeSHAP and feature importance for tree ensembles.
//
// The algorithm is Algorithm 2 of Lundberg, Erion & Lee, "Consistent Individualized Feature
// Attribution for Tree Ensembles" (arXiv:1802.03888), computed in float32 the way XGBoost's
// pred_contribs computes it, so imported models explain the same way XGBoost explains them.
#include <algorithm>

#include "slipway/model.h"

namespace slipway::model {

struct TreeEnsembleModel::PathElement {
  std::int64_t feature = -1;
  float zero_fraction = 0;  // share of training cover that reached here without this feature
  float one_fraction = 0;   // 1 when the row itself follows this path, else 0
  float weight = 0;         // permutation weight of subsets of this size
};

namespace {

using PathElement = TreeEnsembleModel::PathElement;

void extend_path(PathElement* path, std::uint32_t depth, float zero_fraction, float one_fraction,
                 std::int64_t feature) {
  path[depth] = {feature, zero_fraction, one_fraction, depth == 0 ? 1.0f : 0.0f};
  for (std::int64_t i = static_cast<std::int64_t>(depth) - 1; i >= 0; --i) {
    path[i + 1].weight += one_fraction * path[i].weight * static_cast<float>(i + 1) / static_cast<float>(depth + 1);
    path[i].weight = zero_fraction * path[i].weight * static_cast<float>(depth - i) / static_cast<float>(depth + 1);
  }
}

void unwind_path(PathElement* path, std::uint32_t depth, std::uint32_t path_index) {
  const float one_fraction = path[path_index].one_fraction;
  const float zero_fraction = path[path_index].zero_fraction;
  float next_one_portion = path[depth].weight;
  for (std::int64_t i = static_cast<std::int64_t>(depth) - 1; i >= 0; --i) {
    if (one_fraction != 0) {
      const float previous = path[i].weight;
      path[i].weight = next_one_portion * static_cast<float>(depth + 1) / (static_cast<float>(i + 1) * one_fraction);
      next_one_portion =
          previous - path[i].weight * zero_fraction * static_cast<float>(depth - i) / static_cast<float>(depth + 1);
    } else {
      path[i].weight = path[i].weight * static_cast<float>(depth + 1) / (zero_fraction * static_cast<float>(depth - i));
    }
  }
  for (std::uint32_t i = path_index; i < depth; ++i) {
    path[i].feature = path[i + 1].feature;
    path[i].zero_fraction = path[i + 1].zero_fraction;
    path[i].one_fraction = path[i + 1].one_fraction;
  }
}

float unwound_path_sum(const PathElement* path, std::uint32_t depth, std::uint32_t path_index) {
  const float one_fraction = path[path_index].one_fraction;
  const float zero_fraction = path[path_index].zero_fraction;
  float next_one_portion = path[depth].weight;
  float total = 0;
  for (std::int64_t i = static_cast<std::int64_t>(depth) - 1; i >= 0; --i) {
    if (one_fraction != 0) {
      const float share = next_one_portion * static_cast<float>(depth + 1) / (static_cast<float>(i + 1) * one_fraction);
      total += share;
      next_one_portion =
          path[i].weight - share * zero_fraction * (static_cast<float>(depth - i) / static_cast<float>(depth + 1));
    } else if (zero_fraction != 0) {
      total += (path[i].weight / zero_fraction) / (static_cast<float>(depth - i) / static_cast<float>(depth + 1));
    }
  }
  return total;
}

}  // namespace

void TreeEnsembleModel::tree_shap(std::span<const float> row, std::span<float> phi, std::uint32_t node_index,
                                  std::uint32_t unique_depth, PathElement* parent_path, float parent_zero_fraction,
                                  float parent_one_fraction, std::int64_t parent_feature) const {
  // Each level works on its own copy of the path, placed after the parent's in one buffer.
  PathElement* path = parent_path + unique_depth + 1;
  std::copy(parent_path, parent_path + unique_depth + 1, path);
  extend_path(path, unique_depth, parent_zero_fraction, parent_one_fraction, parent_feature);

  const TreeNode& node = data_.nodes[node_index];
  if (node.is_leaf()) {
    for (std::uint32_t i = 1; i <= unique_depth; ++i) {
      const float weight = unwound_path_sum(path, unique_depth, i);
      const PathElement& element = path[i];
      phi[static_cast<std::size_t>(element.feature)] +=
          weight * (element.one_fraction - element.zero_fraction) * node.value;
    }
    return;
  }
  const std::uint32_t feature = node.feature();
  const float value = row[feature];
  const bool go_left = goes_left(node, value, data_.category_sets);
  const std::uint32_t hot = go_left ? node.left : node.right;
  const std::uint32_t cold = go_left ? node.right : node.left;
  const float node_cover = data_.cover[node_index];
  const float hot_zero_fraction = data_.cover[hot] / node_cover;
  const float cold_zero_fraction = data_.cover[cold] / node_cover;
  float incoming_zero_fraction = 1;
  float incoming_one_fraction = 1;

  // A feature already on the path is undone here and redone for this split.
  std::uint32_t path_index = 0;
  while (path_index <= unique_depth && path[path_index].feature != static_cast<std::int64_t>(feature)) ++path_index;
  if (path_index != unique_depth + 1) {
    incoming_zero_fraction = path[path_index].zero_fraction;
    incoming_one_fraction = path[path_index].one_fraction;
    unwind_path(path, unique_depth, path_index);
    unique_depth -= 1;
  }
  tree_shap(row, phi, hot, unique_depth + 1, path, hot_zero_fraction * incoming_zero_fraction, incoming_one_fraction,
            feature);
  tree_shap(row, phi, cold, unique_depth + 1, path, cold_zero_fraction * incoming_zero_fraction, 0, feature);
}

Status TreeEnsembleModel::explain(std::span<const float> row, std::span<float> contributions) const {
  if (!has_statistics()) {
    return failed_precondition("this tree model has no node covers (training statistics), so it cannot be explained");
  }
  const std::size_t block = data_.input_width + 1;
  std::fill(contributions.begin(), contributions.end(), 0.0f);
  std::vector<float> bias(data_.group_count, data_.base_margin);
  std::vector<PathElement> path;
  for (std::size_t tree = 0; tree < data_.roots.size(); ++tree) {
    std::uint32_t group = tree_group(tree);
    bias[group] += mean_value_[data_.roots[tree]];
    std::size_t longest = depth_[tree] + 2;
    path.assign(longest * (longest + 1) / 2, PathElement{});
    tree_shap(row, contributions.subspan(group * block, block), data_.roots[tree], 0, path.data(), 1, 1, -1);
  }
  for (std::size_t group = 0; group < data_.group_count; ++group)
    contributions[group * block + block - 1] += bias[group];
  return {};
}

TreeEnsembleModel::Importance TreeEnsembleModel::importance() const {
  Importance importance;
  const std::size_t width = data_.input_width;
  importance.splits.assign(width, 0);
  if (has_statistics()) {
    importance.total_gain.assign(width, 0.0);
    importance.total_cover.assign(width, 0.0);
  }
  for (std::size_t index = 0; index < data_.nodes.size(); ++index) {
    const TreeNode& node = data_.nodes[index];
    if (node.is_leaf()) continue;
    ++importance.splits[node.feature()];
    if (has_statistics()) {
      importance.total_gain[node.feature()] += data_.gain[index];
      importance.total_cover[node.feature()] += data_.cover[index];
    }
  }
  return importance;
}

}  // namespace slipway::model
