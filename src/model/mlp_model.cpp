// Multilayer perceptrons: dense layers run with the dense kernels in one precision.
#include <algorithm>
#include <cmath>

#include "slipway/kernels.h"
#include "slipway/model.h"

namespace slipway::model {

struct MlpModel::Packed {
  std::vector<kernels::PackedDenseF32> f32;
  std::vector<kernels::PackedDenseBf16> bf16;
  std::vector<kernels::PackedDenseInt8> int8;
};

std::string_view mlp_precision_name(MlpPrecision precision) {
  switch (precision) {
    case MlpPrecision::kFloat32:
      return "float32";
    case MlpPrecision::kBfloat16:
      return "bfloat16";
    case MlpPrecision::kInt8:
      return "int8";
  }
  return "float32";
}

std::optional<MlpPrecision> mlp_precision_by_name(std::string_view name) {
  for (MlpPrecision precision : {MlpPrecision::kFloat32, MlpPrecision::kBfloat16, MlpPrecision::kInt8}) {
    if (mlp_precision_name(precision) == name) return precision;
  }
  return std::nullopt;
}

Result<std::shared_ptr<const MlpModel>> MlpModel::make(std::vector<MlpLayer> layers, MlpPrecision precision,
                                                       MlpTrainingState training_state) {
  if (layers.empty()) return invalid_argument("an MLP needs at least one layer");
  for (std::size_t index = 0; index < layers.size(); ++index) {
    const MlpLayer& layer = layers[index];
    std::string which = "MLP layer " + std::to_string(index + 1);
    if (layer.inputs == 0 || layer.outputs == 0) return invalid_argument(which + " has no inputs or no outputs");
    if (index > 0 && layer.inputs != layers[index - 1].outputs) {
      return invalid_argument(which + " takes " + std::to_string(layer.inputs) +
                              " inputs, but the layer before gives " + std::to_string(layers[index - 1].outputs));
    }
    // By division: inputs * outputs could wrap.
    if (layer.weights.size() / layer.outputs != layer.inputs || layer.weights.size() % layer.outputs != 0 ||
        layer.bias.size() != layer.outputs) {
      return invalid_argument(which + "'s weights or bias have the wrong size");
    }
    if (layer.norm_scale.size() != layer.norm_shift.size() ||
        (layer.normalized() && layer.norm_scale.size() != layer.outputs)) {
      return invalid_argument(which + "'s layer normalization does not have one scale and shift per output");
    }
    // A scale below this has no finite inverse to quantize with.
    if (!std::isfinite(layer.input_scale) ||
        (layer.input_scale != 0.0f && !(layer.input_scale >= kernels::kTinyMagnitude / 127.0f))) {
      return invalid_argument(which + "'s int8 input scale must be 0 (per row) or a finite number above 1e-32");
    }
    if (!(layer.norm_epsilon > 0.0f) || !std::isfinite(layer.norm_epsilon)) {
      return invalid_argument(which + "'s layer normalization epsilon must be a positive number");
    }
    auto finite = [](const SharedArray<float>& values) {
      return std::all_of(values.begin(), values.end(), [](float value) { return std::isfinite(value); });
    };
    if (!finite(layer.weights) || !finite(layer.bias) || !finite(layer.norm_scale) || !finite(layer.norm_shift)) {
      return invalid_argument(which + " has a weight, bias or normalization value that is not a finite number");
    }
    if (precision == MlpPrecision::kInt8 && layer.inputs > kernels::kDenseInt8MaxDepth) {
      return invalid_argument(which + " has more inputs than int8 sums hold exactly (" +
                              std::to_string(kernels::kDenseInt8MaxDepth) + ")");
    }
  }
  return std::make_shared<const MlpModel>(std::move(layers), precision, std::move(training_state));
}

MlpModel::MlpModel(std::vector<MlpLayer> layers, MlpPrecision precision, MlpTrainingState training_state)
    : layers_(std::move(layers)),
      precision_(precision),
      training_state_(std::move(training_state)),
      packed_(std::make_unique<Packed>()) {
  auto& packed = const_cast<Packed&>(*packed_);
  for (const MlpLayer& layer : layers_) {
    // A ReLU straight after the product is fused into the kernels' stores.
    bool relu = layer.activation == kernels::Activation::kRelu && !layer.normalized();
    switch (precision_) {
      case MlpPrecision::kFloat32:
        packed.f32.push_back(kernels::pack_dense_f32(layer.weights, layer.bias, layer.outputs, layer.inputs, relu));
        break;
      case MlpPrecision::kBfloat16:
        packed.bf16.push_back(kernels::pack_dense_bf16(layer.weights, layer.bias, layer.outputs, layer.inputs, relu));
        break;
      case MlpPrecision::kInt8:
        packed.int8.push_back(kernels::pack_dense_int8(layer.weights, layer.bias, layer.outputs, layer.inputs, relu));
        break;
    }
  }
}

MlpModel::~MlpModel() = default;

Result<std::shared_ptr<const MlpModel>> MlpModel::with_precision(MlpPrecision precision) const {
  return make(layers_, precision);
}

void MlpModel::predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const {
  // Two buffers taken in turn: a layer reads one and writes the other (the last writes `out`).
  std::vector<float> buffers[2];
  std::span<const float> in = features.first(rows * input_width());
  kernels::QuantizedRows quantized;
  kernels::Bf16Rows rounded;
  for (std::size_t index = 0; index < layers_.size(); ++index) {
    const MlpLayer& layer = layers_[index];
    bool last = index + 1 == layers_.size();
    std::vector<float>& next = buffers[index % 2];
    if (!last) next.resize(rows * layer.outputs);
    std::span<float> target = last ? out.first(rows * layer.outputs) : std::span<float>(next);
    switch (precision_) {
      case MlpPrecision::kFloat32:
        kernels::dense_f32(packed_->f32[index], in, rows, target);
        break;
      case MlpPrecision::kBfloat16:
        kernels::round_rows_to_bf16(in, rows, layer.inputs, rounded);
        kernels::dense_bf16(packed_->bf16[index], rounded, target);
        break;
      case MlpPrecision::kInt8:
        if (layer.input_scale > 0.0f) {
          kernels::quantize_rows_static(in, rows, layer.inputs, layer.input_scale, quantized);
        } else {
          kernels::quantize_rows(in, rows, layer.inputs, quantized);
        }
        kernels::dense_int8(packed_->int8[index], quantized, target);
        break;
    }
    if (layer.normalized()) {
      kernels::layer_norm(target, rows, layer.outputs, layer.norm_scale, layer.norm_shift, layer.norm_epsilon);
    }
    if (layer.activation != kernels::Activation::kRelu || layer.normalized()) {
      kernels::activate(layer.activation, target);
    }
    in = target;
  }
}

std::vector<float> MlpModel::calibrate(std::span<const float> features, std::size_t rows, double percentile) const {
  std::vector<float> scales;
  std::vector<float> inputs(features.begin(), features.begin() + static_cast<std::ptrdiff_t>(rows * input_width()));
  for (std::size_t index = 0; index < layers_.size(); ++index) {
    // Non-finite values (a row the preprocessing could not fill) say nothing about the range.
    std::vector<float> magnitudes;
    magnitudes.reserve(inputs.size());
    for (float value : inputs) {
      if (std::isfinite(value)) magnitudes.push_back(std::abs(value));
    }
    float range = 0.0f;
    if (!magnitudes.empty() && percentile >= 100.0) {
      range = *std::max_element(magnitudes.begin(), magnitudes.end());
    } else if (!magnitudes.empty()) {
      auto rank = static_cast<std::size_t>(percentile / 100.0 * static_cast<double>(magnitudes.size() - 1));
      std::nth_element(magnitudes.begin(), magnitudes.begin() + static_cast<std::ptrdiff_t>(rank), magnitudes.end());
      range = magnitudes[rank];
    }
    scales.push_back(range >= kernels::kTinyMagnitude ? range / 127.0f : 0.0f);
    if (index + 1 == layers_.size()) break;
    // The next layer's inputs: this layer alone, in float32, on this layer's inputs.
    auto single = make({layers_[index]}, MlpPrecision::kFloat32);
    if (!single.ok()) return std::vector<float>(layers_.size(), 0.0f);
    std::vector<float> next(rows * layers_[index].outputs);
    (*single)->predict_margin(inputs, rows, next);
    inputs = std::move(next);
  }
  return scales;
}

Result<std::shared_ptr<const MlpModel>> MlpModel::with_int8_calibration(std::span<const float> input_scales) const {
  if (input_scales.size() != layers_.size()) return invalid_argument("one int8 input scale per layer is needed");
  std::vector<MlpLayer> layers = layers_;
  for (std::size_t index = 0; index < layers.size(); ++index) layers[index].input_scale = input_scales[index];
  return make(std::move(layers), MlpPrecision::kInt8);
}

std::size_t MlpModel::memory_bytes() const {
  std::size_t bytes = sizeof(*this);
  for (const auto& layer : layers_) {
    bytes += layer.weights.memory_bytes() + layer.bias.memory_bytes() + layer.norm_scale.memory_bytes() +
             layer.norm_shift.memory_bytes();
  }
  for (const auto& [name, values] : training_state_) bytes += values.memory_bytes();
  for (const auto& layer : packed_->f32) bytes += (layer.weights.size() + layer.bias.size()) * sizeof(float);
  for (const auto& layer : packed_->bf16) bytes += layer.weights.size() * 2 + layer.bias.size() * sizeof(float);
  for (const auto& layer : packed_->int8) {
    bytes += layer.weights.size() + (layer.scales.size() + layer.bias.size()) * sizeof(float) +
             layer.sums.size() * sizeof(std::int32_t);
  }
  return bytes;
}

}  // namespace slipway::model
