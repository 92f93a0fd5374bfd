// Objectives for GBDT training: what the trees fit. Each objective gives per-row gradients and
// hessians, the base score, and (when the Newton step is not the right leaf value) its own leaf
// values. Private to train.
//
// Adding an objective: a value in GbdtObjective (gbdt_trainer.h), a class in gbdt_objective.cpp
// and its row in that file's table; the objective parameter's choices come from the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "train/gbdt_trainer.h"

namespace slipway::train {

// The rows of one finished leaf, for objectives that choose leaf values from them.
struct LeafRows {
  std::span<const std::uint32_t> rows;  // training row indexes
  std::span<const double> labels;       // every training row's
  std::span<const double> weights;      // every training row's; empty for all 1
  std::span<const float> margins;       // rows x groups, before this tree's leaves are added
  std::size_t group_count = 1;
  std::size_t group = 0;  // the output this tree fits
};

// One objective, made per training run (it may keep scratch between calls; not thread-safe).
// Calls within one fit: base_margin at most once (not when continuing a model), then per round
// gradients for group 0, 1, ... in order, and leaf_weight for each leaf of each tree.
class BoostingObjective {
 public:
  virtual ~BoostingObjective() = default;

  // Outputs (margins) per row: the class count for softmax, else 1.
  virtual std::size_t groups() const { return 1; }

  // The starting margin of every output, from the training labels (weights empty for all 1).
  virtual float base_margin(std::span<const double> labels, std::span<const double> weights) const = 0;

  // stats[row] = the row's weight x (d loss / d margin, d² loss / d margin²) of output `group`,
  // for every row, from `margins` (rows x groups()). Rows in fixed blocks on up to `threads`
  // threads; each row's value is computed alone, so the result does not depend on the count.
  virtual void gradients(std::span<const float> margins, std::span<const double> labels,
                         std::span<const double> weights, std::size_t group, std::span<GradientStats> stats,
                         int threads) = 0;

  // A leaf's weight before the learning rate, given its Newton step (the default keeps it).
  virtual double leaf_weight(double newton_weight, const LeafRows& leaf) const {
    (void)leaf;
    return newton_weight;
  }
};

// The table of objectives: one row each, in GbdtObjective order.
struct ObjectiveDefinition {
  GbdtObjective objective;
  std::string_view name;      // the objective parameter's value, e.g. "reg:absoluteerror"
  GbdtMetric default_metric;  // eval_metric=auto
  std::unique_ptr<BoostingObjective> (*make)(const GbdtOptions& options);
};

std::span<const ObjectiveDefinition> objective_definitions();
const ObjectiveDefinition& objective_definition(GbdtObjective objective);
std::optional<GbdtObjective> objective_by_name(std::string_view name);

// options.objective, configured from `options` (class_count, huber_slope).
std::unique_ptr<BoostingObjective> make_objective(const GbdtOptions& options);

// The weighted mean of `values` (weights empty for all 1); 0 when the weights sum to 0.
double weighted_mean(std::span<const double> values, std::span<const double> weights);
// The smallest value whose cumulative weight reaches half the total; 0 when empty. Sorts
// `values` (value, weight).
double weighted_median(std::vector<std::pair<double, double>>& values);

}  // namespace slipway::train
