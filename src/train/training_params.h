// The training parameters of each model family as typed structs, filled from the declarations in
// parameters.cpp (one ConfigField per declaration: the binding names the member, the declaration
// gives the type, default, range and help). Private to train.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/model.h"
#include "train/gbdt_trainer.h"

namespace slipway::train {

// logistic and linear.
struct LinearParams {
  double l2 = 0;
  int max_iterations = 0;
  double tolerance = 0;
  int lbfgs_history = 0;
  model::CategoricalEncoding categorical_encoding = model::CategoricalEncoding::kOneHot;  // onehot, ordinal
  std::size_t max_categories = 0;
  bool standardize = false;
  std::string positive_class;  // logistic only
};

// The choices of categorical_splits, in their declared order.
enum class CategoricalSplits { kPartition, kOrdinal };

// The boosting options are bound straight into `tree`; the rest choose the objective, labels,
// preprocessing and validation split.
struct GbdtParams {
  GbdtOptions tree;  // rounds, learning_rate, grow_policy, max_depth, ... early_stopping_rounds
  std::size_t max_categories = 0;
  std::string positive_class;
  std::string objective;    // "auto" or a name of objective_definitions()
  std::string eval_metric;  // "auto" or a name of metric_definitions()
  CategoricalSplits categorical_splits = CategoricalSplits::kOrdinal;
  double validation_fraction = 0;
};

enum class MlpComputePrecision { kFloat32, kBfloat16 };  // precision's choices, in order

struct MlpParams {
  std::size_t max_categories = 0;
  std::string positive_class;
  double validation_fraction = 0;
  std::string hidden_units;         // as given; `hidden` is its parse
  std::vector<std::size_t> hidden;  // widths of the hidden layers
  std::string activation;           // a name kernels::activation_by_name knows (the declaration's choices)
  bool layer_norm = false;
  double dropout = 0;
  int epochs = 0;
  int batch_size = 0;
  double learning_rate = 0;
  double weight_decay = 0;
  double warmup_fraction = 0;
  int early_stopping = 0;  // epochs without improvement; 0 for none
  std::string objective;
  MlpComputePrecision precision = MlpComputePrecision::kFloat32;
};

// The bindings; every declaration of the family is bound (tests/train checks it).
const ConfigSchema<LinearParams>& linear_params_schema();
const ConfigSchema<GbdtParams>& gbdt_params_schema();
const ConfigSchema<MlpParams>& mlp_params_schema();

// The declared defaults with `resolved` (the output of resolve_parameters) applied.
Result<LinearParams> linear_params(const std::map<std::string, std::string>& resolved);
Result<GbdtParams> gbdt_params(const std::map<std::string, std::string>& resolved);
Result<MlpParams> mlp_params(const std::map<std::string, std::string>& resolved);

// "128,64" as {128, 64}; "none" as no hidden layer. InvalidArgument for anything else.
Result<std::vector<std::size_t>> parse_hidden_units(const std::string& text);

}  // namespace slipway::train
