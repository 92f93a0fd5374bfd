#include "model/interchange.h"

#include <cmath>

namespace slipway::model {

Result<std::vector<std::string>> pass_through_features(const Bundle& bundle, std::string_view format) {
  std::vector<std::string> names;
  for (const auto& feature : bundle.preprocessor().features()) {
    bool categorical = feature.type == data::ColumnType::kCategorical;
    if (categorical && feature.encoding != CategoricalEncoding::kOrdinal) {
      return invalid_argument(std::string(format) + " cannot carry the one-hot encoding of input '" + feature.name +
                              "'");
    }
    if (feature.center != 0.0 || feature.scale != 1.0 || (!categorical && !std::isnan(feature.impute_value))) {
      return invalid_argument(std::string(format) + " cannot carry the scaling or imputation of input '" +
                              feature.name + "'");
    }
    names.push_back(feature.name);
  }
  return names;
}

LocalTree breadth_first(std::span<const TreeNode> nodes, std::uint32_t root) {
  LocalTree tree;
  tree.nodes = {root};
  tree.parent = {-1};
  for (std::size_t local = 0; local < tree.nodes.size(); ++local) {
    const TreeNode& node = nodes[tree.nodes[local]];
    if (node.is_leaf()) {
      tree.left.push_back(-1);
      tree.right.push_back(-1);
      continue;
    }
    for (std::uint32_t child : {node.left, node.right}) {
      (child == node.left ? tree.left : tree.right).push_back(static_cast<std::int64_t>(tree.nodes.size()));
      tree.nodes.push_back(child);
      tree.parent.push_back(static_cast<std::int64_t>(local));
    }
  }
  return tree;
}

}  // namespace slipway::model
