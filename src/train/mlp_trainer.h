// Multilayer perceptrons by mini-batch AdamW: the entry point (fit_mlp) and its options. The
// matrix products run on the dense kernels (fp32, or bf16 with fp32 master weights), so training
// and inference multiply alike; every other step is a plain loop in a fixed order, which makes a
// fit depend on the seed only, not on the thread count. Private to train.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "slipway/core.h"
#include "slipway/kernels.h"
#include "slipway/model.h"
#include "slipway/train.h"

namespace slipway::train {

enum class MlpLoss {
  kLogistic,  // one output, labels 0/1: binary cross-entropy on the sigmoid
  kSoftmax,   // one output per class, labels the class index: cross-entropy on the softmax
  kSquared,   // one output: half the squared error, on the standardized target
};

struct MlpOptions {
  std::vector<std::size_t> hidden;  // widths of the hidden layers
  kernels::Activation activation = kernels::Activation::kRelu;
  bool layer_norm = false;
  double dropout = 0.0;
  int epochs = 20;
  std::size_t batch_size = 256;
  double learning_rate = 1e-3;
  double weight_decay = 0.01;
  double warmup_fraction = 0.05;
  int early_stopping = 0;  // epochs without a better validation loss before stopping; 0: never
  bool bf16 = false;       // bf16 products (the caller checked the CPU runs them natively)
  std::uint64_t seed = 42;
  int thread_count = 1;
  int checkpoint_every = 0;  // epochs
};

// Rows of preprocessed features with their labels (0/1, class index or target) and optional
// non-negative weights (empty: all 1).
struct MlpRows {
  std::span<const float> features;
  std::size_t rows = 0;
  std::span<const double> labels;
  std::span<const double> weights;
};

// Where a fit starts: a checkpoint's weights and optimizer state (resume), or a model's weights
// with a fresh optimizer (warm start). The model's layers must have the options' shape.
struct MlpStart {
  std::shared_ptr<const model::MlpModel> model;
  bool resume = false;
  int epochs_done = 0;                // resume: epochs already trained
  std::vector<RoundMetrics> history;  // resume: their metrics
};

struct MlpCallbacks {
  std::function<void(const RoundMetrics& latest, int epochs_total)> on_epoch;
  // Every checkpoint_every epochs: the model with its training state (not a model to serve).
  std::function<Status(const std::shared_ptr<const model::MlpModel>& checkpoint, int epochs_done,
                       const std::vector<RoundMetrics>& history)>
      on_checkpoint;
  const std::atomic<bool>* stop = nullptr;  // set: fitting fails after the epoch in progress
};

struct MlpFit {
  std::shared_ptr<const model::MlpModel> model;  // float32, target scale folded into the last layer
  std::vector<RoundMetrics> history;             // per epoch: train and validation metric
  int epochs = 0;                                // epochs trained
  int best_epoch = -1;                           // with early stopping: the epoch kept (0-based)
  bool stopped_early = false;
};

// The metric reported per epoch for a loss: logloss, mlogloss or rmse (in the target's units).
const char* mlp_metric_name(MlpLoss loss);

// Fits an MLP of `width` inputs and `outputs` outputs (1, or the class count for kSoftmax).
// InvalidArgument when the shapes or the start do not fit; FailedPrecondition when the loss
// stops being finite (a learning rate too high for the data).
Result<MlpFit> fit_mlp(const MlpRows& train, std::size_t width, std::size_t outputs, const MlpRows* validation,
                       MlpLoss loss, const MlpOptions& options, const MlpStart* start, const MlpCallbacks& callbacks);

// The mean loss of `model` on `rows` (weighted, no dropout) and its gradient by every parameter,
// layer by layer: weights, bias, then layer-norm scale and shift. What each training step
// follows; for the gradient check in tests. The hidden layers must share one activation.
Result<std::pair<double, std::vector<float>>> mlp_loss_gradient(const model::MlpModel& model, const MlpRows& rows,
                                                                MlpLoss loss);

}  // namespace slipway::train
