#include "slipway/model.h"

namespace slipway::model {

LinearModel::LinearModel(std::vector<double> weights, double bias)
    : LinearModel(SharedArray<double>(std::move(weights)), bias) {}

LinearModel::LinearModel(SharedArray<double> weights, double bias) : weights_(std::move(weights)), bias_(bias) {}

void LinearModel::predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const {
  std::size_t width = weights_.size();
  const double* weights = weights_.data();
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = features.data() + row * width;
    double sum = bias_;
    for (std::size_t column = 0; column < width; ++column) sum += weights[column] * x[column];
    out[row] = static_cast<float>(sum);
  }
}

}  // namespace slipway::model
