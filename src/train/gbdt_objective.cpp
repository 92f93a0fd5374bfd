// The objectives and their table. Each objective's per-row gradient is a lambda handed to one
// templated loop (fill_gradients), so the loop over rows is compiled once per objective with no
// call or branch on the objective inside it; the virtual call is per pass, not per row.
#include "train/gbdt_objective.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "slipway/core.h"

namespace slipway::train {
namespace {

// stats[row] = weight x row_gradient(row, margin, label) for every row, in fixed blocks of rows.
template <typename RowGradient>
void fill_gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                    std::size_t group, std::size_t group_count, std::span<GradientStats> stats, int threads,
                    const RowGradient& row_gradient) {
  const std::size_t rows = labels.size();
  constexpr std::size_t kRowsPerTask = 16384;
  parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, threads, [&](std::size_t task) {
    std::size_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::size_t row = task * kRowsPerTask; row < end; ++row) {
      double y = labels[row];
      double m = margins[row * group_count + group];
      GradientStats s = row_gradient(row, m, y);
      double w = weights.empty() ? 1.0 : weights[row];
      stats[row] = {s.gradient * w, s.hessian * w};
    }
  });
}

double weighted_median_label(std::span<const double> labels, std::span<const double> weights) {
  std::vector<std::pair<double, double>> values;
  for (std::size_t row = 0; row < labels.size(); ++row) {
    values.push_back({labels[row], weights.empty() ? 1.0 : weights[row]});
  }
  return weighted_median(values);
}

// binary:logistic — log loss of sigmoid(margin) against 0/1 labels.
class LogisticObjective final : public BoostingObjective {
 public:
  explicit LogisticObjective(const GbdtOptions&) {}

  float base_margin(std::span<const double> labels, std::span<const double> weights) const override {
    double mean = weighted_mean(labels, weights);
    double clamped = std::clamp(mean, 1e-6, 1.0 - 1e-6);
    return static_cast<float>(std::log(clamped / (1.0 - clamped)));
  }
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::span<GradientStats> stats, int threads) override {
    fill_gradients(margins, labels, weights, group, 1, stats, threads, [](std::size_t, double m, double y) {
      double p = 1.0 / (1.0 + std::exp(-m));
      return GradientStats{p - y, std::max(p * (1.0 - p), 1e-16)};
    });
  }
};

// multi:softmax — cross-entropy of the softmax over one margin per class against class indexes.
class SoftmaxObjective final : public BoostingObjective {
 public:
  explicit SoftmaxObjective(const GbdtOptions& options) : class_count_(options.class_count) {}

  std::size_t groups() const override { return class_count_; }
  float base_margin(std::span<const double>, std::span<const double>) const override { return 0.0f; }

  // The probabilities of every class are computed with group 0 and reused for the other groups
  // of the round (their margins do not change in between: trees are added after gradients).
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::span<GradientStats> stats, int threads) override {
    const std::size_t group_count = class_count_;
    if (group == 0) probabilities_.resize(labels.size() * group_count);
    fill_gradients(margins, labels, weights, group, group_count, stats, threads,
                   [&](std::size_t row, double, double y) {
                     double* p = probabilities_.data() + row * group_count;
                     if (group == 0) {
                       double largest = margins[row * group_count];
                       for (std::size_t k = 1; k < group_count; ++k) {
                         largest = std::max<double>(largest, margins[row * group_count + k]);
                       }
                       double total = 0;
                       for (std::size_t k = 0; k < group_count; ++k) {
                         p[k] = std::exp(margins[row * group_count + k] - largest);
                         total += p[k];
                       }
                       for (std::size_t k = 0; k < group_count; ++k) p[k] /= total;
                     }
                     double target = static_cast<std::size_t>(y) == group ? 1.0 : 0.0;
                     return GradientStats{p[group] - target, std::max(2.0 * p[group] * (1.0 - p[group]), 1e-16)};
                   });
  }

 private:
  std::size_t class_count_;
  std::vector<double> probabilities_;  // rows x classes, filled by group 0's pass
};

// reg:squarederror — half the squared error; the base score is the mean.
class SquaredErrorObjective final : public BoostingObjective {
 public:
  explicit SquaredErrorObjective(const GbdtOptions&) {}

  float base_margin(std::span<const double> labels, std::span<const double> weights) const override {
    return static_cast<float>(weighted_mean(labels, weights));
  }
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::span<GradientStats> stats, int threads) override {
    fill_gradients(margins, labels, weights, group, 1, stats, threads, [](std::size_t, double m, double y) {
      return GradientStats{m - y, 1.0};
    });
  }
};

// reg:absoluteerror — the absolute error; the base score and every leaf are weighted medians.
class AbsoluteErrorObjective final : public BoostingObjective {
 public:
  explicit AbsoluteErrorObjective(const GbdtOptions&) {}

  float base_margin(std::span<const double> labels, std::span<const double> weights) const override {
    return static_cast<float>(weighted_median_label(labels, weights));
  }
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::span<GradientStats> stats, int threads) override {
    fill_gradients(margins, labels, weights, group, 1, stats, threads, [](std::size_t, double m, double y) {
      return GradientStats{m > y ? 1.0 : (m < y ? -1.0 : 0.0), 1.0};
    });
  }
  // The Newton step of a sign gradient is meaningless; the leaf takes the weighted median
  // residual of its rows instead (XGBoost's adaptive leaves for reg:absoluteerror).
  double leaf_weight(double, const LeafRows& leaf) const override {
    std::vector<std::pair<double, double>> residuals;
    for (std::uint32_t row : leaf.rows) {
      residuals.push_back({leaf.labels[row] - leaf.margins[row * leaf.group_count + leaf.group],
                           leaf.weights.empty() ? 1.0 : leaf.weights[row]});
    }
    return weighted_median(residuals);
  }
};

// reg:pseudohubererror — delta² (sqrt(1 + (error / delta)²) - 1), delta = huber_slope; the base
// score is the weighted median.
class PseudoHuberObjective final : public BoostingObjective {
 public:
  explicit PseudoHuberObjective(const GbdtOptions& options) : slope_(options.huber_slope) {}

  float base_margin(std::span<const double> labels, std::span<const double> weights) const override {
    return static_cast<float>(weighted_median_label(labels, weights));
  }
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::span<GradientStats> stats, int threads) override {
    const double slope = slope_;
    fill_gradients(margins, labels, weights, group, 1, stats, threads, [slope](std::size_t, double m, double y) {
      double z = (m - y) / slope;
      double scale = 1.0 + z * z;
      double root = std::sqrt(scale);
      return GradientStats{(m - y) / root, 1.0 / (scale * root)};
    });
  }

 private:
  double slope_;
};

// Every objective is made from the options (and reads what it needs of them).
template <typename Made>
std::unique_ptr<BoostingObjective> make(const GbdtOptions& options) {
  return std::make_unique<Made>(options);
}

constexpr std::array<ObjectiveDefinition, 5> kObjectives = {{
    {GbdtObjective::kLogistic, "binary:logistic", GbdtMetric::kLogLoss, &make<LogisticObjective>},
    {GbdtObjective::kSoftmax, "multi:softmax", GbdtMetric::kMultiLogLoss, &make<SoftmaxObjective>},
    {GbdtObjective::kSquaredError, "reg:squarederror", GbdtMetric::kRmse, &make<SquaredErrorObjective>},
    {GbdtObjective::kAbsoluteError, "reg:absoluteerror", GbdtMetric::kMae, &make<AbsoluteErrorObjective>},
    {GbdtObjective::kPseudoHuber, "reg:pseudohubererror", GbdtMetric::kPseudoHuber, &make<PseudoHuberObjective>},
}};

constexpr bool in_enum_order() {
  for (std::size_t index = 0; index < kObjectives.size(); ++index) {
    if (static_cast<std::size_t>(kObjectives[index].objective) != index) return false;
  }
  return true;
}
static_assert(in_enum_order(), "objective_definition() indexes the table by GbdtObjective");

}  // namespace

std::span<const ObjectiveDefinition> objective_definitions() { return kObjectives; }

const ObjectiveDefinition& objective_definition(GbdtObjective objective) {
  return kObjectives[static_cast<std::size_t>(objective)];
}

std::optional<GbdtObjective> objective_by_name(std::string_view name) {
  for (const auto& definition : kObjectives) {
    if (definition.name == name) return definition.objective;
  }
  return std::nullopt;
}

std::unique_ptr<BoostingObjective> make_objective(const GbdtOptions& options) {
  return objective_definition(options.objective).make(options);
}

double weighted_mean(std::span<const double> values, std::span<const double> weights) {
  double total = 0.0;
  double weight_sum = 0.0;
  for (std::size_t row = 0; row < values.size(); ++row) {
    double w = weights.empty() ? 1.0 : weights[row];
    total += w * values[row];
    weight_sum += w;
  }
  return weight_sum > 0 ? total / weight_sum : 0.0;
}

double weighted_median(std::vector<std::pair<double, double>>& values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  double total = 0.0;
  for (const auto& entry : values) total += entry.second;
  double running = 0.0;
  for (const auto& [value, weight] : values) {
    running += weight;
    if (running >= 0.5 * total) return value;
  }
  return values.back().first;
}

}  // namespace slipway::train
