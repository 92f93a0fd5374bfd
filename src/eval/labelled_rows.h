// What evaluate and compare share: a model's labels read from its target column, and the
// metrics of its task. Private to eval.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "slipway/eval.h"

namespace slipway::eval {

// The rows whose target is present and their labels (class indices for classification, the
// values for regression). InvalidArgument for a text target of a regression, a label the model
// never saw, or a target with no value at all.
struct LabelledRows {
  std::vector<std::uint32_t> rows;
  std::vector<double> labels;
};
Result<LabelledRows> labelled_rows(const model::Manifest& manifest, const data::Column& target);

// binary_metrics (at the manifest's decision threshold), multiclass_metrics or regression_metrics,
// by the manifest's task.
Metrics task_metrics(const model::Manifest& manifest, std::span<const float> scores, std::size_t columns,
                     std::span<const double> labels);

}  // namespace slipway::eval
