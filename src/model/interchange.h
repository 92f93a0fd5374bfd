// Helpers shared by the exporters and importers (XGBoost JSON, ONNX). Private to model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "slipway/model.h"

namespace slipway::model {

// The bundle's input names when its preprocessing hands every input to the model unchanged (as
// tree models are trained: numbers as they are, missing as NaN, categories as their codes), so a
// format without preprocessing reproduces its predictions; else InvalidArgument naming the
// input `format` cannot take.
Result<std::vector<std::string>> pass_through_features(const Bundle& bundle, std::string_view format);

// One tree's nodes numbered breadth first from its root (local node 0), as XGBoost JSON and ONNX
// number them.
struct LocalTree {
  std::vector<std::uint32_t> nodes;       // local node i's index in the ensemble
  std::vector<std::int64_t> left, right;  // local children; -1 at a leaf
  std::vector<std::int64_t> parent;       // local parent; -1 at the root
};
LocalTree breadth_first(std::span<const TreeNode> nodes, std::uint32_t root);

}  // namespace slipway::model
