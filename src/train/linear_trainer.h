// Linear and logistic regression by L-BFGS over a preprocessed matrix. Private to train.
#pragma once

#include <span>
#include <vector>

#include "slipway/train.h"

namespace slipway::train {

enum class LinearLoss { kSquared, kLogistic };

struct LinearFit {
  std::vector<double> weights;
  double bias = 0.0;
  int iterations = 0;
  bool converged = false;
};

// Minimizes sum_i loss(y_i, bias + w . x_i) + l2/2 * ||w||^2. `features` is rows x width,
// row-major; for kLogistic, `labels` are 0 or 1. The gradient is summed over fixed-size row
// blocks in block order, so the result does not depend on `thread_count`.
LinearFit fit_linear(std::span<const float> features, std::size_t rows, std::size_t width,
                     std::span<const double> labels, LinearLoss loss, double l2, const LbfgsOptions& options,
                     int thread_count);

}  // namespace slipway::train
