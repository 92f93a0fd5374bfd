// Gradient-boosted decision trees by the histogram method. Private to train.
#pragma once

#include <span>
#include <vector>

#include "slipway/model.h"
#include "slipway/train.h"

namespace slipway::train {

enum class GbdtObjective { kLogistic, kSquaredError };

struct GbdtOptions {
  GbdtObjective objective = GbdtObjective::kLogistic;
  int rounds = 100;
  double learning_rate = 0.1;
  int max_depth = 6;
  double lambda = 1.0;            // L2 on leaf weights
  double gamma = 0.0;             // minimum loss reduction to split
  double min_child_weight = 1.0;  // minimum hessian sum in a child
  int max_bin = 255;              // bins per feature, missing values apart
  int thread_count = 1;
};

struct GbdtFit {
  std::shared_ptr<model::TreeEnsembleModel> model;
  int rounds = 0;
};

// Fits on `features` (rows x width, row-major, NaN = missing) and `labels` (0/1 for logistic).
// Deterministic: histograms are built per feature in row order, whatever the thread count.
GbdtFit fit_gbdt(std::span<const float> features, std::size_t rows, std::size_t width, std::span<const double> labels,
                 const GbdtOptions& options);

}  // namespace slipway::train
