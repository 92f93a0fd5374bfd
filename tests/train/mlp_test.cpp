// The MLP trainer: its gradients against finite differences, what it learns, and the promises of
// its options (determinism, resume, warm start, early stopping, bf16 and its fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "slipway/eval.h"
#include "slipway/kernels.h"
#include "slipway/train.h"
#include "support/test_support.h"
#include "train/mlp_trainer.h"
#include "train/training_params.h"

namespace slipway::train {
namespace {

// Two numeric features and a class by region (a ring inside a square: no line separates it), or
// a smooth number.
std::string synthetic_csv(int rows, bool classes, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::string csv = "x1,x2,weight,y\n";
  for (int row = 0; row < rows; ++row) {
    double x1 = uniform(random), x2 = uniform(random);
    double radius = std::sqrt(x1 * x1 + x2 * x2);
    std::string label = classes ? (radius < 0.45  ? "inner"
                                   : radius < 0.8 ? "ring"
                                                  : "outer")
                                : std::to_string(100.0 + 40.0 * std::sin(3 * x1) + 25.0 * x2 * x2);
    csv += std::to_string(x1) + "," + std::to_string(x2) + "," + std::to_string(1 + row % 3) + "," + label + "\n";
  }
  return csv;
}

data::Table table_of(const std::string& csv) { return *data::parse_csv(csv, "synthetic.csv"); }

std::shared_ptr<const model::MlpModel> random_model(const std::vector<std::size_t>& widths,
                                                    kernels::Activation activation, bool layer_norm,
                                                    std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<model::MlpLayer> layers;
  for (std::size_t index = 0; index + 1 < widths.size(); ++index) {
    model::MlpLayer layer;
    layer.inputs = widths[index];
    layer.outputs = widths[index + 1];
    std::vector<float> weights(layer.inputs * layer.outputs), bias(layer.outputs);
    for (float& value : weights) value = normal(random);
    for (float& value : bias) value = normal(random);
    layer.weights = model::SharedArray<float>(std::move(weights));
    layer.bias = model::SharedArray<float>(std::move(bias));
    bool hidden = index + 2 < widths.size();
    layer.activation = hidden ? activation : kernels::Activation::kNone;
    if (hidden && layer_norm) {
      std::vector<float> scale(layer.outputs), shift(layer.outputs);
      for (float& value : scale) value = 1.0f + normal(random);
      for (float& value : shift) value = normal(random);
      layer.norm_scale = model::SharedArray<float>(std::move(scale));
      layer.norm_shift = model::SharedArray<float>(std::move(shift));
    }
    layers.push_back(std::move(layer));
  }
  return *model::MlpModel::make(std::move(layers), model::MlpPrecision::kFloat32);
}

// The loss of `model` with parameter `index` (in mlp_loss_gradient's order) moved by `delta`.
double loss_with(const model::MlpModel& model, std::size_t index, double delta, const MlpRows& rows, MlpLoss loss) {
  std::vector<model::MlpLayer> layers = model.layers();
  for (auto& layer : layers) {
    for (auto* array : {&layer.weights, &layer.bias, &layer.norm_scale, &layer.norm_shift}) {
      if (index < array->size()) {
        std::vector<float> values = array->to_vector();
        values[index] = static_cast<float>(values[index] + delta);
        *array = model::SharedArray<float>(std::move(values));
        auto moved = model::MlpModel::make(std::move(layers), model::MlpPrecision::kFloat32);
        return mlp_loss_gradient(**moved, rows, loss)->first;
      }
      index -= array->size();
    }
  }
  ADD_FAILURE() << "no parameter " << index;
  return 0.0;
}

TEST(MlpTrainer, GradientsMatchFiniteDifferencesForEveryLossAndLayerKind) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr std::size_t kRows = 13;
  std::vector<float> features(kRows * 4);
  for (float& value : features) value = normal(random);
  std::vector<double> weights(kRows);
  for (std::size_t row = 0; row < kRows; ++row) weights[row] = 0.5 + static_cast<double>(row % 3);
  struct Case {
    MlpLoss loss;
    std::size_t outputs;
    kernels::Activation activation;
    bool layer_norm;
  };
  for (Case test : {Case{MlpLoss::kLogistic, 1, kernels::Activation::kRelu, false},
                    Case{MlpLoss::kSoftmax, 3, kernels::Activation::kGelu, true},
                    Case{MlpLoss::kSquared, 1, kernels::Activation::kTanh, true},
                    Case{MlpLoss::kLogistic, 1, kernels::Activation::kGeluTanh, false}}) {
    auto model = random_model({4, 6, 5, test.outputs}, test.activation, test.layer_norm, random);
    std::vector<double> labels(kRows);
    for (std::size_t row = 0; row < kRows; ++row) {
      labels[row] = test.loss == MlpLoss::kSquared ? normal(random) : static_cast<double>(row % (test.outputs + 1) % 2);
      if (test.loss == MlpLoss::kSoftmax) labels[row] = static_cast<double>(row % test.outputs);
    }
    MlpRows rows{features, kRows, labels, weights};
    auto computed = mlp_loss_gradient(*model, rows, test.loss);
    ASSERT_TRUE(computed.ok()) << computed.status().message();
    const std::vector<float>& gradient = computed->second;
    for (std::size_t index = 0; index < gradient.size(); ++index) {
      double step = 1e-3;
      double numeric =
          (loss_with(*model, index, step, rows, test.loss) - loss_with(*model, index, -step, rows, test.loss)) /
          (2 * step);
      EXPECT_NEAR(gradient[index], numeric, 2e-3 + 0.02 * std::abs(numeric))
          << mlp_metric_name(test.loss) << " " << kernels::activation_name(test.activation) << " parameter " << index;
    }
  }
}

TEST(MlpTrainer, LearnsARegionNoLineSeparatesAndASmoothFunction) {
  data::Table train_rows = table_of(synthetic_csv(3000, true, 1));
  data::Table test_rows = table_of(synthetic_csv(1000, true, 2));
  TrainRequest request{.target = "y",
                       .model_family = "mlp",
                       .excluded_columns = {"weight"},
                       .params = {{"hidden_units", "32,32"}, {"epochs", "60"}, {"learning_rate", "0.01"}},
                       .thread_count = 1};
  auto fitted = fit(train_rows, request);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  EXPECT_EQ(fitted->bundle->task(), model::Task::kMulticlassClassification);
  EXPECT_EQ(fitted->history.size(), 60u);
  EXPECT_EQ(fitted->round_metric, "mlogloss");
  EXPECT_LT(fitted->history.back().train, 0.5 * fitted->history.front().train);
  auto evaluation = eval::evaluate(*fitted->bundle, test_rows, "");
  ASSERT_TRUE(evaluation.ok());
  EXPECT_GT(evaluation->overall.get("accuracy"), 0.93);

  // Regression learns on the standardized target and answers in the target's units.
  data::Table numbers = table_of(synthetic_csv(3000, false, 3));
  data::Table numbers_test = table_of(synthetic_csv(500, false, 4));
  request.params = {{"hidden_units", "32"}, {"epochs", "80"}, {"learning_rate", "0.01"}};
  auto regression = fit(numbers, request);
  ASSERT_TRUE(regression.ok()) << regression.status().message();
  EXPECT_EQ(regression->round_metric, "rmse");
  auto scored = eval::evaluate(*regression->bundle, numbers_test, "");
  ASSERT_TRUE(scored.ok());
  EXPECT_LT(scored->overall.get("rmse"), 4.5);  // the target spans about 100 +- 45
  EXPECT_GT(scored->overall.get("r2"), 0.98);
}

TEST(MlpTrainer, TheSameSeedGivesTheSameBytesWhateverTheThreadCount) {
  data::Table table = table_of(synthetic_csv(700, true, 6));
  TrainRequest request{.target = "y",
                       .model_family = "mlp",
                       .params = {{"epochs", "4"}, {"dropout", "0.2"}, {"layer_norm", "true"}, {"batch_size", "64"}},
                       .seed = 3,
                       .thread_count = 1,
                       .weight_column = "weight"};
  auto one = fit(table, request);
  request.thread_count = 2;
  auto two = fit(table, request);
  request.seed = 4;
  auto other_seed = fit(table, request);
  ASSERT_TRUE(one.ok() && two.ok() && other_seed.ok()) << one.status().message();
  EXPECT_EQ(one->bundle->serialize(), two->bundle->serialize());
  EXPECT_NE(one->bundle->serialize(), other_seed->bundle->serialize());
}

TEST(MlpTrainer, ResumingFromACheckpointGivesTheSameBytes) {
  data::Table table = table_of(synthetic_csv(900, true, 7));
  TrainRequest request{.target = "y",
                       .model_family = "mlp",
                       .params = {{"epochs", "9"},
                                  {"dropout", "0.1"},
                                  {"layer_norm", "true"},
                                  {"activation", "gelu"},
                                  {"batch_size", "50"},
                                  {"early_stopping_rounds", "20"}},
                       .seed = 8,
                       .thread_count = 2,
                       .weight_column = "weight"};
  std::vector<std::pair<int, std::vector<std::byte>>> checkpoints;
  request.checkpoint_every = 3;
  request.on_checkpoint = [&](const model::Bundle& checkpoint, int epochs_done) {
    checkpoints.push_back({epochs_done, checkpoint.serialize()});
    return Status();
  };
  auto uninterrupted = fit(table, request);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status().message();
  ASSERT_EQ(checkpoints.size(), 2u);  // after epochs 3 and 6
  EXPECT_EQ(checkpoints[1].first, 6);

  request.on_checkpoint = nullptr;
  request.thread_count = 1;
  request.resume_from = *model::Bundle::parse(checkpoints[1].second);
  auto resumed = fit(table, request);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->bundle->serialize(), uninterrupted->bundle->serialize());
  EXPECT_EQ(resumed->history.size(), 9u);

  request.resume_from = uninterrupted->bundle;  // a model, not a checkpoint
  auto not_checkpoint = fit(table, request);
  ASSERT_FALSE(not_checkpoint.ok());
  EXPECT_NE(not_checkpoint.status().message().find("not a training checkpoint"), std::string::npos);
}

TEST(MlpTrainer, WarmStartContinuesFromTheModelsWeights) {
  data::Table first = table_of(synthetic_csv(800, true, 9));
  data::Table second = table_of(synthetic_csv(800, true, 10));
  TrainRequest request{.target = "y", .model_family = "mlp", .params = {{"epochs", "15"}, {"learning_rate", "0.01"}}};
  auto initial = fit(first, request);
  ASSERT_TRUE(initial.ok());
  request.params["epochs"] = "1";
  request.init_model = initial->bundle;
  request.init_model_reference = "rings@1";
  auto continued = fit(second, request);
  ASSERT_TRUE(continued.ok()) << continued.status().message();
  auto cold = fit(second, TrainRequest{.target = "y", .model_family = "mlp", .params = {{"epochs", "1"}}});
  ASSERT_TRUE(cold.ok());
  // One epoch from the trained weights is far ahead of one epoch from scratch.
  EXPECT_LT(continued->history.front().train, 0.7 * cold->history.front().train);
  EXPECT_EQ(continued->bundle->manifest().params.at("init_model"), "rings@1");

  // Leaving out an input the starting model reads cannot be honoured.
  TrainRequest without_x2 = request;
  without_x2.excluded_columns = {"x2"};
  auto left_out = fit(second, without_x2);
  ASSERT_FALSE(left_out.ok());
  EXPECT_NE(left_out.status().message().find("reads the input 'x2'"), std::string::npos) << left_out.status().message();

  request.params["hidden_units"] = "16";
  auto other_shape = fit(second, request);
  ASSERT_FALSE(other_shape.ok());
  EXPECT_NE(other_shape.status().message().find("differ from this training's"), std::string::npos)
      << other_shape.status().message();
}

TEST(MlpTrainer, EarlyStoppingKeepsTheBestEpochsWeights) {
  data::Table table = table_of(synthetic_csv(600, true, 11));
  TrainRequest request{.target = "y",
                       .model_family = "mlp",
                       .params = {{"epochs", "200"},
                                  {"hidden_units", "64,64"},
                                  {"learning_rate", "0.05"},
                                  {"early_stopping_rounds", "5"},
                                  {"validation_fraction", "0.3"}}};
  auto fitted = fit(table, request);
  ASSERT_TRUE(fitted.ok()) << fitted.status().message();
  EXPECT_TRUE(fitted->stopped_early);
  EXPECT_EQ(fitted->history.size(), static_cast<std::size_t>(fitted->best_round + 6));
  for (const auto& epoch : fitted->history) {
    EXPECT_GE(epoch.validation, fitted->history[static_cast<std::size_t>(fitted->best_round)].validation);
  }
  EXPECT_GT(fitted->validation_rows, 100u);
}

// bf16 products where the CPU has AVX-512 BF16: another model of about the same quality.
// Elsewhere (and under SLIPWAY_DENSE_KERNEL=avx2, which CTest runs too) it falls back to float32.
TEST(MlpTrainer, Bfloat16TrainsAsWellOrFallsBackToFloat32) {
  data::Table table = table_of(synthetic_csv(2000, true, 12));
  data::Table test_rows = table_of(synthetic_csv(800, true, 13));
  TrainRequest request{.target = "y",
                       .model_family = "mlp",
                       .excluded_columns = {"weight"},
                       .params = {{"epochs", "30"}, {"learning_rate", "0.01"}}};
  auto float32 = fit(table, request);
  request.params["precision"] = "bfloat16";
  auto bfloat16 = fit(table, request);
  ASSERT_TRUE(float32.ok() && bfloat16.ok());
  bool native = kernels::dense_kernel().bf16_native;
  EXPECT_EQ(bfloat16->bundle->manifest().params.at("compute_precision"), native ? "bfloat16" : "float32");
  auto accuracy = [&](const TrainSummary& summary) {
    return eval::evaluate(*summary.bundle, test_rows, "")->overall.get("accuracy");
  };
  if (native) {
    EXPECT_NEAR(accuracy(*bfloat16), accuracy(*float32), 0.02);
    EXPECT_NE(bfloat16->history.back().train, float32->history.back().train);
  } else {
    EXPECT_EQ(bfloat16->history.back().train, float32->history.back().train);
  }
}

TEST(MlpTrainer, HiddenUnitsAreCheckedAndLearningRateDefaultsPerFamily) {
  for (const char* junk : {"", "0", "12,x", "64,,64", "-3", "99999999", "1e3"}) {
    auto params = resolve_parameters("mlp", {{"hidden_units", junk}});
    ASSERT_TRUE(params.ok());
    auto parsed = mlp_params(*params);
    ASSERT_FALSE(parsed.ok()) << junk;
    EXPECT_NE(parsed.status().message().find("hidden_units"), std::string::npos);
  }
  EXPECT_EQ(parse_hidden_units("none")->size(), 0u);
  EXPECT_EQ(*parse_hidden_units("128,64"), (std::vector<std::size_t>{128, 64}));
  EXPECT_EQ(resolve_parameters("mlp", {})->at("learning_rate"), "0.001");
  EXPECT_EQ(resolve_parameters("gbdt", {})->at("learning_rate"), "0.1");
}

}  // namespace
}  // namespace slipway::train
