#include "train/linear_trainer.h"

#include <cmath>
#include <numeric>

namespace slipway::train {
namespace {

constexpr std::size_t kRowsPerBlock = 2048;

// log(1 + exp(margin)) without overflow.
double softplus(double margin) {
  return margin > 0 ? margin + std::log1p(std::exp(-margin)) : std::log1p(std::exp(margin));
}

}  // namespace

LinearFit fit_linear(std::span<const float> features, std::size_t rows, std::size_t width,
                     std::span<const double> raw_labels, LinearLoss loss, double l2, const LbfgsOptions& options,
                     int thread_count) {
  // Squared loss is fit on standardized labels: scaling the labels by s scales both terms of the
  // objective by s^2, so the minimizer is the same (weights scaled by s), and the tolerance
  // becomes independent of the target's units.
  double label_offset = 0.0;
  double label_scale = 1.0;
  std::vector<double> labels(raw_labels.begin(), raw_labels.end());
  if (loss == LinearLoss::kSquared && rows > 0) {
    label_offset = std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(rows);
    double squares = 0.0;
    for (double label : labels) squares += (label - label_offset) * (label - label_offset);
    double deviation = std::sqrt(squares / static_cast<double>(rows));
    label_scale = deviation > 1e-12 ? deviation : 1.0;
    for (double& label : labels) label = (label - label_offset) / label_scale;
  }
  const std::size_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // Parameters: width weights, then the bias. Per-block partial gradients, summed in order.
  std::vector<std::vector<double>> block_gradients(blocks, std::vector<double>(width + 1));
  std::vector<double> block_losses(blocks);

  Objective objective = [&](std::span<const double> parameters, std::span<double> gradient) {
    const double bias = parameters[width];
    parallel_for(blocks, thread_count, [&](std::size_t block) {
      auto& partial = block_gradients[block];
      std::fill(partial.begin(), partial.end(), 0.0);
      double block_loss = 0.0;
      std::size_t end = std::min(rows, (block + 1) * kRowsPerBlock);
      for (std::size_t row = block * kRowsPerBlock; row < end; ++row) {
        const float* x = features.data() + row * width;
        double margin = bias;
        for (std::size_t column = 0; column < width; ++column) margin += parameters[column] * x[column];
        double residual = 0.0;
        if (loss == LinearLoss::kLogistic) {
          block_loss += softplus(margin) - labels[row] * margin;
          residual = 1.0 / (1.0 + std::exp(-margin)) - labels[row];
        } else {
          residual = margin - labels[row];
          block_loss += 0.5 * residual * residual;
        }
        for (std::size_t column = 0; column < width; ++column) partial[column] += residual * x[column];
        partial[width] += residual;
      }
      block_losses[block] = block_loss;
    });
    std::fill(gradient.begin(), gradient.end(), 0.0);
    double total = 0.0;
    for (std::size_t block = 0; block < blocks; ++block) {
      total += block_losses[block];
      for (std::size_t index = 0; index <= width; ++index) gradient[index] += block_gradients[block][index];
    }
    for (std::size_t column = 0; column < width; ++column) {
      total += 0.5 * l2 * parameters[column] * parameters[column];
      gradient[column] += l2 * parameters[column];
    }
    return total;
  };

  std::vector<double> parameters(width + 1, 0.0);
  // Start the bias at its no-feature optimum, which shortens the path for skewed targets.
  double label_mean =
      std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(std::max<std::size_t>(rows, 1));
  if (loss == LinearLoss::kLogistic) {
    double clamped = std::min(std::max(label_mean, 1e-6), 1.0 - 1e-6);
    parameters[width] = std::log(clamped / (1.0 - clamped));
  } else {
    parameters[width] = label_mean;
  }
  LbfgsOptions scaled = options;
  scaled.gradient_scale = static_cast<double>(std::max<std::size_t>(rows, 1));
  LbfgsResult result = minimize_lbfgs(objective, parameters, scaled);

  LinearFit fit;
  fit.bias = parameters[width] * label_scale + label_offset;
  for (std::size_t column = 0; column < width; ++column) parameters[column] *= label_scale;
  parameters.resize(width);
  fit.weights = std::move(parameters);
  fit.iterations = result.iterations;
  fit.converged = result.converged;
  return fit;
}

}  // namespace slipway::train
