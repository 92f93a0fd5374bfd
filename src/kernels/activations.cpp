// Activations and layer normalization after the dense products (kernels.h).
#include <algorithm>
#include <cmath>

#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;       // 1 / sqrt(2)
constexpr float kSqrtTwoOverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kInverseSqrtTwoPi = 0.39894228040143268f;
constexpr float kGeluCubic = 0.044715f;

constexpr std::string_view kNames[] = {"none", "relu", "gelu", "gelu_tanh", "tanh", "sigmoid"};

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

std::string_view activation_name(Activation activation) { return kNames[static_cast<int>(activation)]; }

bool activation_by_name(std::string_view name, Activation& activation) {
  for (std::size_t index = 0; index < std::size(kNames); ++index) {
    if (kNames[index] == name) {
      activation = static_cast<Activation>(index);
      return true;
    }
  }
  return false;
}

void activate(Activation activation, std::span<float> values) {
  switch (activation) {
    case Activation::kNone:
      return;
    case Activation::kRelu:
      for (float& x : values) x = std::max(x, 0.0f);  // no branch: signs are random
      return;
    case Activation::kGelu:
      for (float& x : values) x = 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
      return;
    case Activation::kGeluTanh:
      for (float& x : values) x = 0.5f * x * (1.0f + std::tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x)));
      return;
    case Activation::kTanh:
      for (float& x : values) x = std::tanh(x);
      return;
    case Activation::kSigmoid:
      for (float& x : values) x = sigmoid(x);
      return;
  }
}

void activation_backward(Activation activation, std::span<const float> inputs, std::span<float> gradients) {
  std::size_t count = inputs.size();
  switch (activation) {
    case Activation::kNone:
      return;
    case Activation::kRelu:
      for (std::size_t i = 0; i < count; ++i) gradients[i] *= static_cast<float>(inputs[i] > 0.0f);
      return;
    case Activation::kGelu:
      for (std::size_t i = 0; i < count; ++i) {
        float x = inputs[i];
        float cdf = 0.5f * (1.0f + std::erf(x * kSqrtHalf));
        float pdf = kInverseSqrtTwoPi * std::exp(-0.5f * x * x);
        gradients[i] *= cdf + x * pdf;
      }
      return;
    case Activation::kGeluTanh:
      for (std::size_t i = 0; i < count; ++i) {
        float x = inputs[i];
        float t = std::tanh(kSqrtTwoOverPi * (x + kGeluCubic * x * x * x));
        float inner = kSqrtTwoOverPi * (1.0f + 3.0f * kGeluCubic * x * x);
        gradients[i] *= 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * inner;
      }
      return;
    case Activation::kTanh:
      for (std::size_t i = 0; i < count; ++i) {
        float t = std::tanh(inputs[i]);
        gradients[i] *= 1.0f - t * t;
      }
      return;
    case Activation::kSigmoid:
      for (std::size_t i = 0; i < count; ++i) {
        float s = sigmoid(inputs[i]);
        gradients[i] *= s * (1.0f - s);
      }
      return;
  }
}

void layer_norm(std::span<float> values, std::size_t rows, std::size_t width, std::span<const float> scale,
                std::span<const float> shift, float epsilon, std::span<float> inverse_deviations) {
  for (std::size_t row = 0; row < rows; ++row) {
    float* x = values.data() + row * width;
    double sum = 0.0;
    for (std::size_t i = 0; i < width; ++i) sum += x[i];
    double mean = sum / static_cast<double>(width);
    double squares = 0.0;
    for (std::size_t i = 0; i < width; ++i) squares += (x[i] - mean) * (x[i] - mean);
    auto inverse = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + epsilon));
    auto centre = static_cast<float>(mean);
    if (scale.empty()) {
      for (std::size_t i = 0; i < width; ++i) x[i] = (x[i] - centre) * inverse;
    } else {
      for (std::size_t i = 0; i < width; ++i) x[i] = (x[i] - centre) * inverse * scale[i] + shift[i];
    }
    if (!inverse_deviations.empty()) inverse_deviations[row] = inverse;
  }
}

}  // namespace slipway::kernels
