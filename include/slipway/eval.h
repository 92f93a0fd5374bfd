// slipway/eval.h — quality metrics, overall and per slice.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/model.h"

namespace slipway::eval {

// Named metric values in a fixed display order. NaN means undefined (AUC on one class).
struct Metrics {
  std::vector<std::pair<std::string, double>> values;
  // NaN when absent.
  double get(std::string_view name) const;
};

// Binary classification: auc, log_loss, accuracy, precision, recall, f1 (threshold 0.5 on
// P(positive)). `labels` are 0 or 1.
Metrics binary_metrics(std::span<const float> probabilities, std::span<const double> labels);
// Multiclass: log_loss, accuracy, macro_f1 (the mean of each class's one-vs-rest F1).
// `probabilities` is rows x class_count row-major; `labels` are class indices.
Metrics multiclass_metrics(std::span<const float> probabilities, std::size_t class_count,
                           std::span<const double> labels);
// Regression: rmse, mae, r2.
Metrics regression_metrics(std::span<const float> predictions, std::span<const double> targets);

// Area under the ROC curve with ties counted half (the Mann-Whitney statistic). NaN when only one
// class is present or any score is NaN; infinite scores rank like any other.
double roc_auc(std::span<const float> scores, std::span<const double> labels);

struct SliceMetrics {
  std::string value;  // the slice column's value, "(missing)" for missing
  std::size_t rows = 0;
  Metrics metrics;
};

struct Evaluation {
  std::size_t rows = 0;                 // rows scored (rows whose target is present)
  std::size_t rows_missing_target = 0;  // rows skipped
  Metrics overall;
  std::string slice_column;          // empty when not sliced
  std::vector<SliceMetrics> slices;  // sorted by value
};

// Scores `table` with `bundle` and compares with the bundle's target column. InvalidArgument if
// the target or slice column is missing or a label was never seen in training.
Result<Evaluation> evaluate(const model::Bundle& bundle, const data::Table& table, const std::string& slice_column);

}  // namespace slipway::eval
