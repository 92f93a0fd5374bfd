// GBDT objectives and metrics alone: every objective's gradient against central differences of
// its loss and its hessian against differences of its gradient, base scores, leaf values, row
// weights, and the tables the parameters are declared from.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "slipway/train.h"
#include "train/gbdt_metric.h"
#include "train/gbdt_objective.h"

namespace slipway::train {
namespace {

// A step exact in float for the margins below (multiples of 1/64), so m +- h is what it says.
constexpr double kStep = 1.0 / 1024;

GbdtOptions options_for(GbdtObjective objective) {
  GbdtOptions options;
  options.objective = objective;
  options.class_count = 3;
  options.huber_slope = 2.0;
  return options;
}

// Runs the objective over rows of (margins, labels) and returns each row's stats for `group`.
std::vector<GradientStats> gradients_of(BoostingObjective& objective, const std::vector<float>& margins,
                                        const std::vector<double>& labels, std::size_t group,
                                        const std::vector<double>& weights = {}) {
  std::vector<GradientStats> stats(labels.size());
  for (std::size_t pass = 0; pass <= group; ++pass) {  // softmax computes probabilities with group 0
    objective.gradients(margins, labels, weights, pass, stats, 1);
  }
  return stats;
}

struct Case {
  GbdtObjective objective;
  // The loss of one row from its margins (group_count of them) and label.
  std::function<double(const std::vector<double>& margins, double label)> loss;
  std::vector<double> labels;
  double hessian_factor = 1.0;  // the hessian the objective uses, over the loss's second derivative
  bool hessian_is_derivative = true;
};

std::vector<Case> cases() {
  return {
      {GbdtObjective::kLogistic,
       [](const std::vector<double>& m, double y) { return std::log1p(std::exp(m[0])) - y * m[0]; },
       {0, 1, 1, 0}},
      {GbdtObjective::kSoftmax,
       [](const std::vector<double>& m, double y) {
         double sum = 0;
         for (double margin : m) sum += std::exp(margin);
         return std::log(sum) - m[static_cast<std::size_t>(y)];
       },
       {0, 2, 1, 2},
       2.0},  // XGBoost's softmax hessian, 2 p (1 - p)
      {GbdtObjective::kSquaredError,
       [](const std::vector<double>& m, double y) { return 0.5 * (m[0] - y) * (m[0] - y); },
       {-1.5, 0.25, 3, 0}},
      {GbdtObjective::kAbsoluteError,
       [](const std::vector<double>& m, double y) { return std::abs(m[0] - y); },
       {-1.5, 0.25, 3, 0},
       1.0,
       false},  // the hessian is 1, not the loss's (zero) second derivative
      {GbdtObjective::kPseudoHuber,
       [](const std::vector<double>& m, double y) {
         double z = (m[0] - y) / 2.0;
         return 4.0 * (std::sqrt(1.0 + z * z) - 1.0);
       },
       {-1.5, 0.25, 3, 0}},
  };
}

TEST(GbdtBoostingObjective, GradientsAreTheDerivativesOfTheLoss) {
  // Margins away from the absolute error's kinks (the labels).
  const std::vector<float> row_margins = {0.5f, -1.25f, 2.75f, 0.0625f, 1.5f, -0.75f};
  for (const Case& test : cases()) {
    GbdtOptions options = options_for(test.objective);
    auto objective = make_objective(options);
    const std::size_t groups = objective->groups();
    const std::size_t rows = test.labels.size();
    std::vector<float> margins(rows * groups);
    for (std::size_t index = 0; index < margins.size(); ++index)
      margins[index] = row_margins[index % row_margins.size()];
    for (std::size_t group = 0; group < groups; ++group) {
      std::vector<GradientStats> stats = gradients_of(*objective, margins, test.labels, group);
      for (std::size_t row = 0; row < rows; ++row) {
        SCOPED_TRACE(std::string(objective_definition(test.objective).name) + " row " + std::to_string(row) +
                     " group " + std::to_string(group));
        auto loss_at = [&](double shift) {
          std::vector<double> m(margins.begin() + static_cast<std::ptrdiff_t>(row * groups),
                                margins.begin() + static_cast<std::ptrdiff_t>((row + 1) * groups));
          m[group] += shift;
          return test.loss(m, test.labels[row]);
        };
        double numeric_gradient = (loss_at(kStep) - loss_at(-kStep)) / (2 * kStep);
        EXPECT_NEAR(stats[row].gradient, numeric_gradient, 1e-5);

        // The hessian against the objective's own gradient one step either side.
        std::vector<float> up = margins;
        std::vector<float> down = margins;
        up[row * groups + group] += static_cast<float>(kStep);
        down[row * groups + group] -= static_cast<float>(kStep);
        auto fresh = make_objective(options);
        double gradient_up = gradients_of(*fresh, up, test.labels, group)[row].gradient;
        double gradient_down = gradients_of(*fresh, down, test.labels, group)[row].gradient;
        double numeric_hessian = (gradient_up - gradient_down) / (2 * kStep);
        if (test.hessian_is_derivative) {
          EXPECT_NEAR(stats[row].hessian, test.hessian_factor * numeric_hessian, 1e-5);
        } else {
          EXPECT_EQ(stats[row].hessian, 1.0);
        }
      }
    }
  }
}

TEST(GbdtBoostingObjective, RowWeightsScaleGradientAndHessian) {
  for (const Case& test : cases()) {
    auto objective = make_objective(options_for(test.objective));
    std::vector<float> margins(test.labels.size() * objective->groups(), 0.375f);
    std::vector<double> weights = {2.0, 0.5, 0.0, 3.0};
    std::vector<GradientStats> plain = gradients_of(*objective, margins, test.labels, 0);
    std::vector<GradientStats> weighted = gradients_of(*objective, margins, test.labels, 0, weights);
    for (std::size_t row = 0; row < test.labels.size(); ++row) {
      EXPECT_EQ(weighted[row].gradient, plain[row].gradient * weights[row]);
      EXPECT_EQ(weighted[row].hessian, plain[row].hessian * weights[row]);
    }
  }
}

TEST(GbdtBoostingObjective, ThreadsDoNotChangeGradients) {
  // More rows than a gradient block (16,384).
  std::vector<double> labels(40'000);
  std::vector<float> margins(labels.size() * 3);
  for (std::size_t row = 0; row < labels.size(); ++row) labels[row] = static_cast<double>(row % 3);
  for (std::size_t index = 0; index < margins.size(); ++index) margins[index] = static_cast<float>(index % 7) / 4;
  for (GbdtObjective id : {GbdtObjective::kLogistic, GbdtObjective::kSoftmax, GbdtObjective::kPseudoHuber}) {
    auto single = make_objective(options_for(id));
    auto multi = make_objective(options_for(id));
    std::vector<double> binary_labels = labels;
    if (id == GbdtObjective::kLogistic) {
      for (double& label : binary_labels) label = label > 0 ? 1 : 0;
    }
    std::vector<GradientStats> a(labels.size());
    std::vector<GradientStats> b(labels.size());
    for (std::size_t group = 0; group < single->groups(); ++group) {
      single->gradients(margins, binary_labels, {}, group, a, 1);
      multi->gradients(margins, binary_labels, {}, group, b, 2);
      for (std::size_t row = 0; row < labels.size(); ++row) {
        ASSERT_EQ(a[row].gradient, b[row].gradient);
        ASSERT_EQ(a[row].hessian, b[row].hessian);
      }
    }
  }
}

TEST(GbdtBoostingObjective, BaseScoresComeFromTheLabels) {
  std::vector<double> binary = {1, 0, 0, 1};
  std::vector<double> weights = {3, 1, 1, 1};
  // Weighted positive rate 4/6: log-odds log(2).
  EXPECT_FLOAT_EQ(make_objective(options_for(GbdtObjective::kLogistic))->base_margin(binary, weights),
                  static_cast<float>(std::log(2.0)));
  std::vector<double> targets = {1, 2, 3, 10};
  EXPECT_FLOAT_EQ(make_objective(options_for(GbdtObjective::kSquaredError))->base_margin(targets, {}), 4.0f);
  // Medians: the smallest value whose cumulative weight reaches half.
  EXPECT_EQ(make_objective(options_for(GbdtObjective::kAbsoluteError))->base_margin(targets, {}), 2.0f);
  std::vector<double> heavy_third = {1, 1, 5, 1};
  EXPECT_EQ(make_objective(options_for(GbdtObjective::kAbsoluteError))->base_margin(targets, heavy_third), 3.0f);
  EXPECT_EQ(make_objective(options_for(GbdtObjective::kPseudoHuber))->base_margin(targets, heavy_third), 3.0f);
  EXPECT_EQ(make_objective(options_for(GbdtObjective::kSoftmax))->base_margin(binary, {}), 0.0f);
}

TEST(GbdtBoostingObjective, AbsoluteErrorLeavesTakeTheWeightedMedianResidual) {
  std::vector<double> labels = {10, 0, 4, 7, 100};
  std::vector<double> weights = {1, 1, 1, 1, 0.5};
  std::vector<float> margins = {1, 0, 1, 1, 1};
  std::vector<std::uint32_t> rows = {0, 2, 3, 4};  // residuals 9, 3, 6, 99 with weights 1, 1, 1, 0.5
  LeafRows leaf{rows, labels, weights, margins, 1, 0};
  EXPECT_EQ(make_objective(options_for(GbdtObjective::kAbsoluteError))->leaf_weight(-0.25, leaf), 6.0);
  // The other objectives keep the Newton step.
  for (GbdtObjective id : {GbdtObjective::kLogistic, GbdtObjective::kSquaredError, GbdtObjective::kPseudoHuber}) {
    EXPECT_EQ(make_objective(options_for(id))->leaf_weight(-0.25, leaf), -0.25);
  }
}

TEST(GbdtBoostingObjective, TheTableListsEveryObjectiveOnceAndDrivesTheParameterChoices) {
  std::vector<std::string> expected_choices = {"auto"};
  std::set<std::string_view> names;
  for (std::size_t index = 0; index < objective_definitions().size(); ++index) {
    const ObjectiveDefinition& definition = objective_definitions()[index];
    EXPECT_EQ(static_cast<std::size_t>(definition.objective), index);
    EXPECT_TRUE(names.insert(definition.name).second) << definition.name;
    EXPECT_EQ(objective_by_name(definition.name), definition.objective);
    expected_choices.emplace_back(definition.name);
    GbdtOptions options = options_for(definition.objective);
    EXPECT_EQ(make_objective(options)->groups(), definition.objective == GbdtObjective::kSoftmax ? 3u : 1u);
  }
  EXPECT_EQ(objective_by_name("auto"), std::nullopt);
  EXPECT_EQ(objective_definition(GbdtObjective::kAbsoluteError).default_metric, GbdtMetric::kMae);
  for (const auto& declaration : parameter_declarations()) {
    if (declaration.name == "objective" && declaration.families == std::vector<std::string>{"gbdt"}) {
      EXPECT_EQ(declaration.choices, expected_choices);
    }
  }
}

// Metrics.

double metric_over(GbdtMetric metric, const std::vector<float>& margins, const std::vector<double>& labels,
                   const std::vector<double>& weights = {}, std::size_t groups = 1) {
  return evaluate_metric(metric, margins, labels, weights, groups, 2.0, 1);
}

TEST(GbdtMetric, EachMetricOnAHandWorkedCase) {
  std::vector<float> margins = {2, -1, 3};
  std::vector<double> targets = {1, 0, 0};  // errors 1, -1, 3
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kRmse, margins, targets), std::sqrt(11.0 / 3));
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kMae, margins, targets), 5.0 / 3);
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kMae, margins, targets, {1, 1, 2}), 8.0 / 4);
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kPseudoHuber, {2}, {0}), 4.0 * (std::sqrt(2.0) - 1.0));
  // Binary: margin 0 is p = 0.5; positive margins predict class 1.
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kLogLoss, {0, 0}, {1, 0}), std::log(2.0));
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kError, {0.5f, -0.5f, 0.5f, 0}, {1, 0, 0, 1}), 0.5);
  // Multiclass, three classes: row 0 predicts class 2 (label 2), row 1 class 0 (label 1).
  std::vector<float> class_margins = {0, 0, 1, 2, 1, 0};
  EXPECT_DOUBLE_EQ(metric_over(GbdtMetric::kMultiError, class_margins, {2, 1}, {}, 3), 0.5);
  // -log softmax of the label: log(sum of exp(margins)) - the label's margin.
  double e = std::exp(1.0);
  double expected = 0.5 * ((std::log(2 + e) - 1.0) + (std::log(e * e + e + 1) - 1.0));
  EXPECT_NEAR(metric_over(GbdtMetric::kMultiLogLoss, class_margins, {2, 1}, {}, 3), expected, 1e-12);
}

TEST(GbdtMetric, ThreadsDoNotChangeTheValue) {
  // More rows than a metric block (32,768).
  std::vector<double> labels(100'000);
  std::vector<float> margins(labels.size());
  for (std::size_t row = 0; row < labels.size(); ++row) {
    labels[row] = std::sin(static_cast<double>(row));
    margins[row] = static_cast<float>(std::cos(static_cast<double>(row)));
  }
  for (const auto& definition : metric_definitions()) {
    if (definition.metric == GbdtMetric::kMultiLogLoss || definition.metric == GbdtMetric::kMultiError) continue;
    EXPECT_EQ(evaluate_metric(definition.metric, margins, labels, {}, 1, 1.0, 1),
              evaluate_metric(definition.metric, margins, labels, {}, 1, 1.0, 2))
        << definition.name;
  }
}

TEST(GbdtMetric, TheTableListsEveryMetricOnceAndDrivesTheParameterChoices) {
  std::vector<std::string> expected_choices = {"auto"};
  for (std::size_t index = 0; index < metric_definitions().size(); ++index) {
    const MetricDefinition& definition = metric_definitions()[index];
    EXPECT_EQ(static_cast<std::size_t>(definition.metric), index);
    EXPECT_EQ(metric_name(definition.metric), definition.name);
    EXPECT_EQ(metric_by_name(definition.name), definition.metric);
    expected_choices.emplace_back(definition.name);
  }
  EXPECT_EQ(metric_by_name("auto"), std::nullopt);
  for (const auto& declaration : parameter_declarations()) {
    if (declaration.name == "eval_metric") {
      EXPECT_EQ(declaration.choices, expected_choices);
    }
  }
  // Every objective's default metric is in the table.
  for (const auto& objective : objective_definitions()) {
    EXPECT_LT(static_cast<std::size_t>(objective.default_metric), metric_definitions().size());
  }
}

}  // namespace
}  // namespace slipway::train
