// The metrics and their table. Each metric's per-row loss is a function handed to one templated
// loop (sum_losses), so the loop over rows is compiled once per metric with no branch on the
// metric inside it.
#include "train/gbdt_metric.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "slipway/core.h"

namespace slipway::train {
namespace {

// What a row's loss is computed from: its margins (group_count of them), its label, and the
// pseudo-Huber slope.
struct RowOutcome {
  const float* margins;
  double label;
  std::size_t group_count;
  double huber_slope;
};

double log_loss(const RowOutcome& row) {
  double p = std::clamp(1.0 / (1.0 + std::exp(-static_cast<double>(row.margins[0]))), 1e-15, 1.0 - 1e-15);
  return row.label > 0.5 ? -std::log(p) : -std::log(1.0 - p);
}

double error_rate(const RowOutcome& row) { return (row.margins[0] > 0.0f) != (row.label > 0.5) ? 1.0 : 0.0; }

// The class with the largest margin (the first on a tie), and that margin.
std::pair<std::size_t, double> predicted_class(const RowOutcome& row) {
  std::size_t predicted = 0;
  double largest = row.margins[0];
  for (std::size_t k = 1; k < row.group_count; ++k) {
    if (row.margins[k] > largest) {
      largest = row.margins[k];
      predicted = k;
    }
  }
  return {predicted, largest};
}

double multi_log_loss(const RowOutcome& row) {
  auto actual = static_cast<std::size_t>(row.label);
  double largest = predicted_class(row).second;
  double sum = 0.0;
  for (std::size_t k = 0; k < row.group_count; ++k) sum += std::exp(row.margins[k] - largest);
  return -std::max(row.margins[actual] - largest - std::log(sum), std::log(1e-15));
}

double multi_error(const RowOutcome& row) {
  return predicted_class(row).first == static_cast<std::size_t>(row.label) ? 0.0 : 1.0;
}

double squared_error(const RowOutcome& row) { return (row.margins[0] - row.label) * (row.margins[0] - row.label); }

double absolute_error(const RowOutcome& row) { return std::abs(row.margins[0] - row.label); }

double pseudo_huber(const RowOutcome& row) {
  double z = (row.margins[0] - row.label) / row.huber_slope;
  return row.huber_slope * row.huber_slope * (std::sqrt(1.0 + z * z) - 1.0);
}

template <double (*kRowLoss)(const RowOutcome&)>
std::pair<double, double> sum_losses(std::span<const float> margins, std::span<const double> labels,
                                     std::span<const double> weights, std::size_t begin, std::size_t end,
                                     std::size_t group_count, double huber_slope) {
  double total = 0.0;
  double weight_sum = 0.0;
  for (std::size_t row = begin; row < end; ++row) {
    double w = weights.empty() ? 1.0 : weights[row];
    double loss = kRowLoss({margins.data() + row * group_count, labels[row], group_count, huber_slope});
    total += w * loss;
    weight_sum += w;
  }
  return {total, weight_sum};
}

constexpr std::array<MetricDefinition, 7> kMetrics = {{
    {GbdtMetric::kLogLoss, "logloss", &sum_losses<log_loss>, false},
    {GbdtMetric::kError, "error", &sum_losses<error_rate>, false},
    {GbdtMetric::kMultiLogLoss, "mlogloss", &sum_losses<multi_log_loss>, false},
    {GbdtMetric::kMultiError, "merror", &sum_losses<multi_error>, false},
    {GbdtMetric::kRmse, "rmse", &sum_losses<squared_error>, true},
    {GbdtMetric::kMae, "mae", &sum_losses<absolute_error>, false},
    {GbdtMetric::kPseudoHuber, "mphe", &sum_losses<pseudo_huber>, false},
}};

constexpr bool in_enum_order() {
  for (std::size_t index = 0; index < kMetrics.size(); ++index) {
    if (static_cast<std::size_t>(kMetrics[index].metric) != index) return false;
  }
  return true;
}
static_assert(in_enum_order(), "metric lookups index the table by GbdtMetric");

}  // namespace

std::span<const MetricDefinition> metric_definitions() { return kMetrics; }

std::string_view metric_name(GbdtMetric metric) { return kMetrics[static_cast<std::size_t>(metric)].name; }

std::optional<GbdtMetric> metric_by_name(std::string_view name) {
  for (const auto& definition : kMetrics) {
    if (definition.name == name) return definition.metric;
  }
  return std::nullopt;
}

double evaluate_metric(GbdtMetric metric, std::span<const float> margins, std::span<const double> labels,
                       std::span<const double> weights, std::size_t group_count, double huber_slope, int threads) {
  const MetricDefinition& definition = kMetrics[static_cast<std::size_t>(metric)];
  constexpr std::size_t kRowsPerTask = 32768;
  std::size_t tasks = (labels.size() + kRowsPerTask - 1) / kRowsPerTask;
  std::vector<std::pair<double, double>> partial(tasks);
  parallel_for(tasks, threads, [&](std::size_t task) {
    std::size_t end = std::min(labels.size(), (task + 1) * kRowsPerTask);
    partial[task] = definition.sum(margins, labels, weights, task * kRowsPerTask, end, group_count, huber_slope);
  });
  double total = 0.0;
  double weight_sum = 0.0;
  for (const auto& [sum, weight] : partial) {
    total += sum;
    weight_sum += weight;
  }
  double mean = weight_sum > 0 ? total / weight_sum : 0.0;
  return definition.root_of_mean ? std::sqrt(mean) : mean;
}

}  // namespace slipway::train
