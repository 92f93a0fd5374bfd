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

}  // namespace slipway::model
