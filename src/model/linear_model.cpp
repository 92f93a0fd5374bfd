#include <algorithm>
#include <cmath>

#include "slipway/model.h"

namespace slipway::model {

LinearModel::LinearModel(std::vector<double> weights, double bias)
    : LinearModel(SharedArray<double>(std::move(weights)), bias) {}

LinearModel::LinearModel(SharedArray<double> weights, double bias) : weights_(std::move(weights)), bias_(bias) {}

LinearModel::LinearModel(SharedArray<std::int8_t> int8_weights, double scale, double bias)
    : int8_weights_(std::move(int8_weights)), int8_(true), scale_(scale), bias_(bias) {}

std::shared_ptr<const LinearModel> LinearModel::with_int8_weights() const {
  if (int8_) return std::make_shared<const LinearModel>(int8_weights_, scale_, bias_);
  double largest = 0.0;
  // A non-finite weight (no trainer makes one) does not set the scale, or every other weight would
  // round to 0: an infinity clamps to the largest step, NaN becomes 0, and the error is measured.
  for (double weight : weights_) {
    if (std::isfinite(weight)) largest = std::max(largest, std::abs(weight));
  }
  double scale = largest > 0 ? largest / 127.0 : 1.0;
  std::vector<std::int8_t> quantized(weights_.size());
  for (std::size_t index = 0; index < quantized.size(); ++index) {
    double weight = std::isnan(weights_[index]) ? 0.0 : std::clamp(weights_[index] / scale, -127.0, 127.0);
    quantized[index] = static_cast<std::int8_t>(std::lround(weight));
  }
  return std::make_shared<const LinearModel>(SharedArray<std::int8_t>(std::move(quantized)), scale, bias_);
}

void LinearModel::predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const {
  if (int8_) {
    std::size_t width = int8_weights_.size();
    const std::int8_t* weights = int8_weights_.data();
    for (std::size_t row = 0; row < rows; ++row) {
      const float* x = features.data() + row * width;
      double sum = 0.0;
      for (std::size_t column = 0; column < width; ++column) sum += static_cast<double>(weights[column]) * x[column];
      out[row] = static_cast<float>(bias_ + scale_ * sum);
    }
    return;
  }
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
