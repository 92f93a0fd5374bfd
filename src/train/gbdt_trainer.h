// Gradient-boosted decision trees by the histogram method: the entry point (fit_gbdt) and the
// vocabulary its parts share. Private to train. The parts, each in its own file:
//   gbdt_binning      quantile cuts and bin codes (missing values in a bin of their own)
//   gbdt_histogram    per-node gradient histograms, built in fixed row blocks, and subtraction
//   gbdt_split        split scoring and search (default direction, categorical partitions)
//   gbdt_objective    objectives: gradients, base score, leaf values; one table lists them
//   gbdt_metric       the per-round metrics early stopping reads; one table lists them
//   gbdt_partition    a node's rows reordered left child first
//   gbdt_tree_grower  one tree, depth-wise or leaf-wise
//   gbdt_sampling     the stateless hash behind row and feature sampling
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "slipway/model.h"
#include "slipway/train.h"

namespace slipway::train {

enum class GbdtObjective { kLogistic, kSoftmax, kSquaredError, kAbsoluteError, kPseudoHuber };
enum class GrowPolicy { kDepthwise, kLossguide };
// Every metric is lower-is-better, so early stopping needs no direction.
enum class GbdtMetric { kLogLoss, kError, kMultiLogLoss, kMultiError, kRmse, kMae, kPseudoHuber };

struct GbdtOptions {
  GbdtObjective objective = GbdtObjective::kLogistic;
  std::size_t class_count = 2;  // softmax only
  GbdtMetric metric = GbdtMetric::kLogLoss;
  int rounds = 100;
  double learning_rate = 0.1;
  GrowPolicy grow_policy = GrowPolicy::kDepthwise;
  int max_depth = 6;              // 0: unlimited (lossguide)
  int max_leaves = 0;             // 0: unlimited
  double lambda = 1.0;            // L2 on leaf weights
  double alpha = 0.0;             // L1 on leaf weights
  double gamma = 0.0;             // minimum loss reduction to split
  double min_child_weight = 1.0;  // minimum hessian sum in a child
  double subsample = 1.0;         // share of rows each round sees
  double colsample_bytree = 1.0;  // share of features each tree may split on
  double huber_slope = 1.0;       // pseudo-Huber's delta
  double cat_smooth = 10.0;       // hessian added when ordering categories
  double cat_l2 = 10.0;           // extra L2 when scoring a categorical split
  int max_bin = 255;              // bins per numeric feature, missing values apart
  int early_stopping_rounds = 0;  // 0: off; needs a validation set
  int checkpoint_every = 0;       // rounds between on_checkpoint calls; 0: never
  std::uint64_t seed = 42;
  int thread_count = 1;
  // Per feature: true when the column holds category codes (0, 1, ... up to 254), split by
  // partitioning the categories instead of by a threshold.
  std::vector<bool> categorical;
};

// Rows x width, row-major, NaN = missing. Labels: 0/1 (logistic), a class index (softmax) or
// the target; weights empty for all 1.
struct GbdtMatrix {
  std::span<const float> features;
  std::size_t rows = 0;
  std::span<const double> labels;
  std::span<const double> weights;
};

// A gradient and a hessian: of one row (what an objective gives), or summed over a histogram bin
// or a node.
struct GradientStats {
  double gradient = 0;
  double hessian = 0;
};

// What a checkpoint holds, and what training restarts from: the trees so far (for a warm start,
// the initial model's), the rounds of this run they include, and the metrics of those rounds.
struct GbdtState {
  model::TreeEnsembleData ensemble;
  int rounds_done = 0;
  std::vector<RoundMetrics> history;
};

struct GbdtCallbacks {
  std::function<void(const RoundMetrics& latest, int rounds_total)> on_round;
  std::function<Status(const GbdtState& state)> on_checkpoint;
  const std::atomic<bool>* stop = nullptr;  // set: fitting fails after the round in progress
};

struct GbdtFit {
  std::shared_ptr<model::TreeEnsembleModel> model;
  int rounds = 0;       // rounds in the model (after early stopping's truncation)
  int best_round = -1;  // with a validation set: the round with the lowest validation metric
  bool stopped_early = false;
  std::vector<RoundMetrics> history;
};

// Fits trees on `train` (optionally judging each round on `validation`). With `start`, the
// trees continue from its ensemble: margins begin at that ensemble's predictions, which are
// the float sums training itself accumulated, so a resumed run ends with the same bytes as an
// uninterrupted one. Deterministic for a seed whatever the thread count: histograms are summed
// per feature in row order, and sampling is a hash of (seed, round, row).
Result<GbdtFit> fit_gbdt(const GbdtMatrix& train, std::size_t width, const GbdtMatrix* validation,
                         const GbdtOptions& options, const GbdtState* start, const GbdtCallbacks& callbacks);

}  // namespace slipway::train
