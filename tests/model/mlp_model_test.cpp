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
    layers.push_back({inputs, outputs, SharedArray<float>(std::move(weights)), SharedArray<float>(std::move(bias))});
  }
  return layers;
}

// The forward pass in double: ReLU after every layer but the last.
std::vector<double> forward(const std::vector<MlpLayer>& layers, std::span<const float> row) {
  std::vector<double> values(row.begin(), row.end());
  for (std::size_t index = 0; index < layers.size(); ++index) {
    const MlpLayer& layer = layers[index];
    std::vector<double> next(layer.outputs);
    for (std::size_t output = 0; output < layer.outputs; ++output) {
      double sum = layer.bias[output];
      for (std::size_t k = 0; k < layer.inputs; ++k) sum += values[k] * layer.weights[output * layer.inputs + k];
      next[output] = index + 1 < layers.size() ? std::max(sum, 0.0) : sum;
    }
    values = std::move(next);
  }
  return values;
}

TEST(MlpModel, EachPrecisionComputesTheForwardPassWithinItsRounding) {
  std::mt19937 random(9);
  auto layers = random_layers({28, 64, 32, 3}, random);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(37 * 28);
  for (float& value : rows) value = normal(random);
  for (auto [precision, tolerance] : {std::pair{MlpPrecision::kFloat32, 1e-5}, std::pair{MlpPrecision::kBfloat16, 0.05},
                                      std::pair{MlpPrecision::kInt8, 0.08}}) {
    auto model = MlpModel::make(layers, precision);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->input_width(), 28u);
    EXPECT_EQ((*model)->output_count(), 3u);
    std::vector<float> out(37 * 3);
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
    auto model = MlpModel::make(random_layers({5, 16, 3}, random), precision);
    ASSERT_TRUE(model.ok());
    Bundle bundle(manifest, Preprocessor(features), *model);
    auto bytes = bundle.serialize();
    auto parsed = Bundle::parse(bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ((*parsed)->serialize(), bytes);
    std::vector<float> rows(20 * 5);
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
}

}  // namespace
}  // namespace slipway::model
