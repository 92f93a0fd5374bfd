// Helpers shared by the exporters and importers (XGBoost JSON, ONNX). Private to model.
#pragma once

#include <string>
#include <vector>

#include "slipway/model.h"

namespace slipway::model {

// The bundle's input names when its preprocessing hands every input to the model unchanged (as
// tree models are trained: numbers as they are, missing as NaN, categories as their codes), so a
// format without preprocessing reproduces its predictions; else InvalidArgument naming the
// input `format` cannot take.
Result<std::vector<std::string>> pass_through_features(const Bundle& bundle, std::string_view format);

}  // namespace slipway::model
