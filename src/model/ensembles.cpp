// Averaging models of one family into one model of that family (slipway/model/ensembles.h).
#include "slipway/model/ensembles.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace slipway::model {
namespace {

bool same_number(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Why two preprocessings differ, or empty when they transform every row alike.
std::string preprocessing_difference(const Preprocessor& a, const Preprocessor& b) {
  if (a.features().size() != b.features().size()) return "a different number of inputs";
  for (std::size_t i = 0; i < a.features().size(); ++i) {
    const FeatureTransform& x = a.features()[i];
    const FeatureTransform& y = b.features()[i];
    if (x.name != y.name || x.type != y.type) return "input " + std::to_string(i + 1) + " is '" + y.name + "'";
    if (!same_number(x.impute_value, y.impute_value) || !same_number(x.center, y.center) ||
        !same_number(x.scale, y.scale) || x.encoding != y.encoding || x.levels != y.levels) {
      return "input '" + x.name + "' is encoded differently";
    }
  }
  return {};
}

Status check_members(std::span<const std::shared_ptr<const Bundle>> members) {
  if (members.size() < 2) return invalid_argument("an ensemble averages at least two models");
  const Bundle& first = *members.front();
  for (std::size_t i = 1; i < members.size(); ++i) {
    const Bundle& member = *members[i];
    std::string which = "member " + std::to_string(i + 1);
    if (member.task() != first.task() || member.manifest().target != first.manifest().target ||
        member.manifest().class_labels != first.manifest().class_labels) {
      return invalid_argument(which + " answers another question (task, target or class labels) than member 1");
    }
    if (member.model().family() != first.model().family()) {
      return invalid_argument(which + " is a " + std::string(member.model().family()) + " model, member 1 a " +
                              std::string(first.model().family()) + " model: an ensemble averages one family");
    }
    if (member.model().input_width() != first.model().input_width() ||
        member.model().output_count() != first.model().output_count()) {
      return invalid_argument(which + " has another input width or output count than member 1");
    }
    std::string difference = preprocessing_difference(first.preprocessor(), member.preprocessor());
    if (!difference.empty()) return invalid_argument(which + "'s preprocessing differs from member 1's: " + difference);
  }
  return {};
}

Result<std::shared_ptr<const Model>> averaged_trees(std::span<const std::shared_ptr<const Bundle>> members) {
  const auto count = static_cast<float>(members.size());
  TreeEnsembleData merged;
  bool statistics = true;
  double base_margin = 0.0;
  for (const auto& member : members) {
    const auto& trees = static_cast<const TreeEnsembleModel&>(member->model());
    statistics = statistics && trees.has_statistics();
  }
  for (const auto& member : members) {
    TreeEnsembleData data = static_cast<const TreeEnsembleModel&>(member->model()).to_data();
    const auto node_offset = static_cast<std::uint32_t>(merged.nodes.size());
    const auto category_offset = static_cast<std::uint32_t>(merged.category_sets.size());
    merged.input_width = data.input_width;
    merged.group_count = data.group_count;
    base_margin += data.base_margin;
    for (TreeNode node : data.nodes) {
      if (node.is_leaf()) {
        node.value /= count;
      } else {
        node.left += node_offset;
        node.right += node_offset;
        if (node.is_categorical()) node.value = TreeNode::category_set_value(node.category_set() + category_offset);
      }
      merged.nodes.push_back(node);
    }
    for (auto root : data.roots) merged.roots.push_back(root + node_offset);
    merged.category_sets.insert(merged.category_sets.end(), data.category_sets.begin(), data.category_sets.end());
    merged.tree_groups.insert(merged.tree_groups.end(), data.tree_groups.begin(), data.tree_groups.end());
    if (statistics) {
      merged.cover.insert(merged.cover.end(), data.cover.begin(), data.cover.end());
      merged.gain.insert(merged.gain.end(), data.gain.begin(), data.gain.end());
    }
  }
  merged.base_margin = static_cast<float>(base_margin / static_cast<double>(members.size()));
  SLIPWAY_RETURN_IF_ERROR(TreeEnsembleModel::validate(merged));
  return std::shared_ptr<const Model>(std::make_shared<const TreeEnsembleModel>(std::move(merged)));
}

Result<std::shared_ptr<const Model>> averaged_linear(std::span<const std::shared_ptr<const Bundle>> members) {
  std::vector<double> weights(members.front()->model().input_width(), 0.0);
  double bias = 0.0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto& linear = static_cast<const LinearModel&>(members[i]->model());
    if (linear.has_int8_weights()) {
      return invalid_argument("member " + std::to_string(i + 1) + " has int8 weights: average float models");
    }
    for (std::size_t k = 0; k < weights.size(); ++k) weights[k] += linear.weights()[k];
    bias += linear.bias();
  }
  const auto count = static_cast<double>(members.size());
  for (auto& weight : weights) weight /= count;
  return std::shared_ptr<const Model>(std::make_shared<const LinearModel>(std::move(weights), bias / count));
}

}  // namespace

Result<std::shared_ptr<const Bundle>> averaged_bundle(std::span<const std::shared_ptr<const Bundle>> members) {
  SLIPWAY_RETURN_IF_ERROR(check_members(members));
  const Bundle& first = *members.front();
  std::shared_ptr<const Model> model;
  if (first.model().family() == "tree_ensemble") {
    SLIPWAY_ASSIGN_OR_RETURN(model, averaged_trees(members));
  } else if (first.model().family() == "linear") {
    SLIPWAY_ASSIGN_OR_RETURN(model, averaged_linear(members));
  } else {
    return invalid_argument("an ensemble averages tree ensembles or linear models, not " +
                            std::string(first.model().family()) + " models");
  }
  Manifest manifest = first.manifest();
  // A threshold chosen by a rule was chosen for one member's probabilities, not the average's.
  bool same_threshold = std::all_of(members.begin(), members.end(), [&](const std::shared_ptr<const Bundle>& member) {
    return member->manifest().decision_threshold == manifest.decision_threshold &&
           member->manifest().threshold_rule.empty();
  });
  if (!same_threshold) {
    manifest.decision_threshold = 0.5;
    manifest.threshold_rule.clear();
  }
  manifest.metrics.clear();
  manifest.optimization.clear();
  manifest.params = {{"ensemble.size", std::to_string(members.size())}};
  for (std::size_t i = 0; i < members.size(); ++i) {
    for (const auto& [key, value] : members[i]->manifest().params) {
      manifest.params["member." + std::to_string(i + 1) + "." + key] = value;
    }
  }
  return std::make_shared<const Bundle>(std::move(manifest), first.preprocessor(), std::move(model));
}

}  // namespace slipway::model
