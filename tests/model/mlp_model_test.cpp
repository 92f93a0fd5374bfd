// MLP models: the forward pass against plain double arithmetic in each precision, the bundle round
// trip (the same bytes, the same predictions), and the shapes and values make() refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "slipway/model.h"

namespace slipway::model {
namespace {

std::vector<MlpLayer> random_layers(const std::vector<std::size_t>& widths, std::mt19937& random) {
  std::vector<MlpLayer> layers;
  for (std::size_t index = 0; index + 1 < widths.size(); ++index) {
    std::size_t inputs = widths[index], outputs = widths[index + 1];
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(inputs)));
    std::vector<float> weights(inputs * outputs), bias(outputs);
    for (float& weight : weights) weight = normal(random);
    for (float& value : bias) value = normal(random);
    MlpLayer layer;
    layer.inputs = inputs;
    layer.outputs = outputs;
    layer.weights = SharedArray<float>(std::move(weights));
    layer.bias = SharedArray<float>(std::move(bias));
    layer.activation = index + 2 < widths.size() ? kernels::Activation::kRelu : kernels::Activation::kNone;
    layers.push_back(std::move(layer));
  }
  return layers;
}

double activate(kernels::Activation activation, double x) {
  switch (activation) {
    case kernels::Activation::kNone:
      return x;
    case kernels::Activation::kRelu:
      return std::max(x, 0.0);
    case kernels::Activation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case kernels::Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case kernels::Activation::kTanh:
      return std::tanh(x);
    case kernels::Activation::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
  }
  return x;
}

// The forward pass in double: each layer's product, normalization and activation.
std::vector<double> forward(const std::vector<MlpLayer>& layers, std::span<const float> row) {
  std::vector<double> values(row.begin(), row.end());
  for (const MlpLayer& layer : layers) {
    std::vector<double> next(layer.outputs);
    for (std::size_t output = 0; output < layer.outputs; ++output) {
      double sum = layer.bias[output];
      for (std::size_t k = 0; k < layer.inputs; ++k) sum += values[k] * layer.weights[output * layer.inputs + k];
      next[output] = sum;
    }
    if (layer.normalized()) {
      double mean = 0, variance = 0;
      for (double value : next) mean += value / static_cast<double>(next.size());
      for (double value : next) variance += (value - mean) * (value - mean) / static_cast<double>(next.size());
      for (std::size_t output = 0; output < layer.outputs; ++output) {
        next[output] = (next[output] - mean) / std::sqrt(variance + layer.norm_epsilon) * layer.norm_scale[output] +
                       layer.norm_shift[output];
      }
    }
    for (double& value : next) value = activate(layer.activation, value);
    values = std::move(next);
  }
  return values;
}

TEST(MlpModel, EachPrecisionComputesTheForwardPassWithinItsRounding) {
  std::mt19937 random(9);
  auto layers = random_layers({28, 64, 32, 3}, random);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(std::size_t{37} * 28);
  for (float& value : rows) value = normal(random);
  for (auto [precision, tolerance] : {std::pair{MlpPrecision::kFloat32, 1e-5}, std::pair{MlpPrecision::kBfloat16, 0.05},
                                      std::pair{MlpPrecision::kInt8, 0.08}}) {
    auto model = MlpModel::make(layers, precision);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->input_width(), 28u);
    EXPECT_EQ((*model)->output_count(), 3u);
    std::vector<float> out(std::size_t{37} * 3);
    (*model)->predict_margin(rows, 37, out);
    for (std::size_t row = 0; row < 37; ++row) {
      auto expected = forward(layers, std::span<const float>(rows).subspan(row * 28, 28));
      for (std::size_t output = 0; output < 3; ++output) {
        EXPECT_NEAR(out[row * 3 + output], expected[output], tolerance * (1 + std::abs(expected[output])))
            << mlp_precision_name(precision) << " row " << row;
      }
    }
  }
}

TEST(MlpModel, LayerNormalizationAndEveryActivationMatchDoubleArithmetic) {
  std::mt19937 random(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (kernels::Activation activation :
       {kernels::Activation::kGelu, kernels::Activation::kGeluTanh, kernels::Activation::kTanh,
        kernels::Activation::kSigmoid, kernels::Activation::kRelu}) {
    auto layers = random_layers({9, 24, 2}, random);
    layers[0].activation = activation;
    std::vector<float> scale(24), shift(24);
    for (float& value : scale) value = 1.0f + 0.3f * normal(random);
    for (float& value : shift) value = 0.3f * normal(random);
    layers[0].norm_scale = SharedArray<float>(std::move(scale));
    layers[0].norm_shift = SharedArray<float>(std::move(shift));
    layers[1].activation = kernels::Activation::kTanh;
    auto model = MlpModel::make(layers, MlpPrecision::kFloat32);
    ASSERT_TRUE(model.ok()) << model.status().message();
    std::vector<float> rows(std::size_t{11} * 9);
    for (float& value : rows) value = 2.0f * normal(random);
    std::vector<float> out(std::size_t{11} * 2);
    (*model)->predict_margin(rows, 11, out);
    for (std::size_t row = 0; row < 11; ++row) {
      auto expected = forward(layers, std::span<const float>(rows).subspan(row * 9, 9));
      for (std::size_t output = 0; output < 2; ++output) {
        EXPECT_NEAR(out[row * 2 + output], expected[output], 1e-5) << kernels::activation_name(activation);
      }
    }
  }
}

// The backward step of each activation is its derivative (checked by central differences).
TEST(MlpModel, ActivationBackwardIsTheDerivative) {
  std::vector<float> points = {-3.0f, -1.2f, -0.3f, 0.2f, 0.7f, 1.9f, 4.0f};
  for (kernels::Activation activation :
       {kernels::Activation::kGelu, kernels::Activation::kGeluTanh, kernels::Activation::kTanh,
        kernels::Activation::kSigmoid, kernels::Activation::kRelu, kernels::Activation::kNone}) {
    std::vector<float> gradients(points.size(), 2.0f);
    kernels::activation_backward(activation, points, gradients);
    for (std::size_t index = 0; index < points.size(); ++index) {
      double h = 1e-4;
      double slope = (activate(activation, points[index] + h) - activate(activation, points[index] - h)) / (2 * h);
      EXPECT_NEAR(gradients[index], 2.0 * slope, 1e-4)
          << kernels::activation_name(activation) << " at " << points[index];
    }
  }
}

TEST(MlpModel, ABundleRoundTripsToTheSameBytesAndPredictions) {
  std::mt19937 random(4);
  std::vector<FeatureTransform> features(5);
  for (std::size_t index = 0; index < features.size(); ++index) features[index].name = "x" + std::to_string(index);
  Manifest manifest;
  manifest.task = Task::kMulticlassClassification;
  manifest.target = "y";
  manifest.class_labels = {"a", "b", "c"};
  manifest.created_by = "test";
  for (MlpPrecision precision : {MlpPrecision::kFloat32, MlpPrecision::kBfloat16, MlpPrecision::kInt8}) {
    auto layers = random_layers({5, 16, 3}, random);
    layers[0].activation = kernels::Activation::kGelu;
    layers[0].norm_scale = SharedArray<float>(std::vector<float>(16, 1.5f));
    layers[0].norm_shift = SharedArray<float>(std::vector<float>(16, -0.25f));
    layers[0].norm_epsilon = 1e-6f;
    // A checkpoint's state travels with it.
    MlpTrainingState state;
    state["adam_m.0"] = SharedArray<float>(std::vector<float>{1.0f, -2.0f, 3.5f});
    auto model = MlpModel::make(std::move(layers), precision, std::move(state));
    ASSERT_TRUE(model.ok());
    Bundle bundle(manifest, Preprocessor(features), *model);
    auto bytes = bundle.serialize();
    auto parsed = Bundle::parse(bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ((*parsed)->serialize(), bytes);
    const auto& read = dynamic_cast<const MlpModel&>((*parsed)->model());
    EXPECT_EQ(read.layers()[0].activation, kernels::Activation::kGelu);
    EXPECT_EQ(read.layers()[0].norm_epsilon, 1e-6f);
    EXPECT_EQ(read.layers()[1].activation, kernels::Activation::kNone);
    ASSERT_EQ(read.training_state().count("adam_m.0"), 1u);
    EXPECT_EQ(read.training_state().at("adam_m.0").to_vector(), (std::vector<float>{1.0f, -2.0f, 3.5f}));
    std::vector<float> rows(std::size_t{20} * 5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& value : rows) value = normal(random);
    auto before = bundle.predict_preprocessed(rows, 20);
    auto after = (*parsed)->predict_preprocessed(rows, 20);
    EXPECT_EQ(before.scores, after.scores) << mlp_precision_name(precision);
    for (std::size_t row = 0; row < 20; ++row) {
      EXPECT_NEAR(after.scores[row * 3] + after.scores[row * 3 + 1] + after.scores[row * 3 + 2], 1.0f, 1e-5f);
    }
  }
}

// Calibrated int8: per-layer static scales from the float32 pass; as accurate as per-row scales on
// rows like the calibration ones, and kept by the bundle.
TEST(MlpModel, CalibratedInt8StaysCloseToFloat32AndTravelsInTheBundle) {
  std::mt19937 random(31);
  auto float32 = *MlpModel::make(random_layers({12, 64, 32, 1}, random), MlpPrecision::kFloat32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(std::size_t{500} * 12);
  for (float& value : rows) value = normal(random);
  std::vector<float> by_max = float32->calibrate(rows, 500, 100.0);
  std::vector<float> by_percentile = float32->calibrate(rows, 500, 99.9);
  ASSERT_EQ(by_max.size(), 3u);
  for (std::size_t layer = 0; layer < 3; ++layer) {
    EXPECT_GT(by_max[layer], 0.0f);
    EXPECT_LE(by_percentile[layer], by_max[layer]);
  }
  auto calibrated = float32->with_int8_calibration(by_max);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status().message();
  std::vector<float> exact(500), approximate(500);
  float32->predict_margin(rows, 500, exact);
  (*calibrated)->predict_margin(rows, 500, approximate);
  double largest_error = 0.0, largest = 0.0;
  for (std::size_t row = 0; row < 500; ++row) {
    largest_error = std::max(largest_error, static_cast<double>(std::abs(exact[row] - approximate[row])));
    largest = std::max(largest, static_cast<double>(std::abs(exact[row])));
  }
  EXPECT_LT(largest_error, 0.05 * largest);

  std::vector<FeatureTransform> features(12);
  for (std::size_t index = 0; index < 12; ++index) features[index].name = "x" + std::to_string(index);
  Manifest manifest;
  manifest.task = Task::kRegression;
  manifest.target = "y";
  Bundle bundle(manifest, Preprocessor(features), *calibrated);
  auto parsed = Bundle::parse(bundle.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  const auto& read = dynamic_cast<const MlpModel&>((*parsed)->model());
  EXPECT_EQ(read.layers()[1].input_scale, by_max[1]);
  EXPECT_EQ(bundle.predict_preprocessed(rows, 500).scores, (*parsed)->predict_preprocessed(rows, 500).scores);
}

TEST(MlpModel, ShapesThatDoNotChainAndValuesThatAreNotFiniteAreRefused) {
  std::mt19937 random(2);
  auto layers = random_layers({4, 8, 2}, random);
  auto broken = layers;
  broken[1].inputs = 7;
  EXPECT_NE(MlpModel::make(broken, MlpPrecision::kFloat32).status().message().find("takes 7 inputs"),
            std::string::npos);
  auto with_nan = layers;
  std::vector<float> weights = with_nan[0].weights.to_vector();
  weights[3] = std::numeric_limits<float>::quiet_NaN();
  with_nan[0].weights = SharedArray<float>(std::move(weights));
  EXPECT_NE(MlpModel::make(with_nan, MlpPrecision::kFloat32).status().message().find("not a finite number"),
            std::string::npos);
  EXPECT_EQ(MlpModel::make({}, MlpPrecision::kFloat32).status().code(), StatusCode::kInvalidArgument);
  auto half_normalized = layers;
  half_normalized[0].norm_scale = SharedArray<float>(std::vector<float>(8, 1.0f));
  EXPECT_NE(MlpModel::make(half_normalized, MlpPrecision::kFloat32).status().message().find("one scale and shift"),
            std::string::npos);
  half_normalized[0].norm_shift = SharedArray<float>(std::vector<float>(8, 0.0f));
  half_normalized[0].norm_epsilon = 0.0f;
  EXPECT_NE(MlpModel::make(half_normalized, MlpPrecision::kFloat32).status().message().find("epsilon"),
            std::string::npos);
}

}  // namespace
}  // namespace slipway::model
