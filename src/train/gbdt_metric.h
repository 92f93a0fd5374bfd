// The metrics of GBDT training rounds: recorded per round, and read by early stopping. Every
// one is lower-is-better, so early stopping needs no direction. Private to train.
//
// Adding a metric: a value in GbdtMetric (gbdt_trainer.h) and its row in gbdt_metric.cpp's
// table; the eval_metric parameter's choices come from the table.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "train/gbdt_trainer.h"

namespace slipway::train {

// The table of metrics: one row each, in GbdtMetric order.
struct MetricDefinition {
  GbdtMetric metric;
  std::string_view name;  // the eval_metric parameter's value, e.g. "logloss"
  // Weighted loss sum and weight sum over rows [begin, end) of margins (rows x group_count).
  std::pair<double, double> (*sum)(std::span<const float> margins, std::span<const double> labels,
                                   std::span<const double> weights, std::size_t begin, std::size_t end,
                                   std::size_t group_count, double huber_slope);
  bool root_of_mean;  // the metric is the square root of the mean loss (rmse)
};

std::span<const MetricDefinition> metric_definitions();
std::string_view metric_name(GbdtMetric metric);
std::optional<GbdtMetric> metric_by_name(std::string_view name);

// `metric` over margins (rows x group_count): the weighted mean loss (its root for rmse); 0 when
// the weights sum to 0. Partial sums per fixed block of rows are added in block order, so the
// value does not depend on `threads`.
double evaluate_metric(GbdtMetric metric, std::span<const float> margins, std::span<const double> labels,
                       std::span<const double> weights, std::size_t group_count, double huber_slope, int threads);

}  // namespace slipway::train
