#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "slipway/train.h"
#include "train/gbdt_metric.h"
#include "train/gbdt_objective.h"
#include "train/gbdt_trainer.h"
#include "train/linear_trainer.h"
#include "train/mlp_trainer.h"
#include "train/training_params.h"

namespace slipway::train {
namespace {

bool contains(const std::vector<std::string>& items, const std::string& wanted) {
  return std::find(items.begin(), items.end(), wanted) != items.end();
}

struct Labels {
  std::vector<double> values;             // per kept row: 0/1 or the regression target
  std::vector<std::uint32_t> kept_rows;   // rows whose target is present
  std::vector<std::string> class_labels;  // {negative, positive} for classification
};

Result<Labels> binary_labels(const data::Column& target, const std::string& requested_positive) {
  // Distinct present values, as text, with counts.
  std::vector<std::string> labels;
  std::vector<std::size_t> counts;
  std::vector<std::int32_t> label_of_row(target.size(), -1);
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (target.is_missing(row)) continue;
    std::string text = target.text_at(row);
    auto found = std::find(labels.begin(), labels.end(), text);
    if (found == labels.end()) {
      if (labels.size() == 2) {
        return invalid_argument("target '" + target.name + "' has more than two classes ('" + labels[0] + "', '" +
                                labels[1] + "', '" + text +
                                "', ...); binary classification needs exactly two (multiclass: --model gbdt or mlp)");
      }
      labels.push_back(text);
      counts.push_back(0);
      found = labels.end() - 1;
    }
    auto index = static_cast<std::size_t>(found - labels.begin());
    ++counts[index];
    label_of_row[row] = static_cast<std::int32_t>(index);
  }
  if (labels.size() < 2) {
    return invalid_argument("target '" + target.name + "' has " +
                            (labels.empty() ? std::string("no values") : "a single class ('" + labels[0] + "')") +
                            "; classification needs two");
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::string positive, choose_positive_label(labels, counts, requested_positive));
  Labels out;
  out.class_labels = {labels[0] == positive ? labels[1] : labels[0], positive};
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (label_of_row[row] < 0) continue;
    out.kept_rows.push_back(static_cast<std::uint32_t>(row));
    out.values.push_back(labels[static_cast<std::size_t>(label_of_row[row])] == positive ? 1.0 : 0.0);
  }
  return out;
}

// True when the target has exactly two distinct present values (a binary task for objective=auto).
bool two_valued(const data::Column& target) {
  std::vector<std::string> seen;
  for (std::size_t row = 0; row < target.size() && seen.size() <= 2; ++row) {
    if (target.is_missing(row)) continue;
    std::string text = target.text_at(row);
    if (!contains(seen, text)) seen.push_back(text);
  }
  return seen.size() == 2 || target.type == data::ColumnType::kCategorical;
}

Result<Labels> regression_labels(const data::Column& target) {
  if (target.type != data::ColumnType::kNumeric) {
    return invalid_argument("target '" + target.name + "' holds text; regression needs a numeric target");
  }
  Labels out;
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (target.is_missing(row)) continue;
    out.kept_rows.push_back(static_cast<std::uint32_t>(row));
    out.values.push_back(target.numbers[row]);
  }
  if (out.values.empty()) return invalid_argument("target '" + target.name + "' has no values");
  return out;
}

Result<Labels> multiclass_labels(const data::Column& target) {
  std::vector<std::string> labels;
  std::vector<std::string> row_labels(target.size());
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (target.is_missing(row)) continue;
    row_labels[row] = target.text_at(row);
    if (!contains(labels, row_labels[row])) labels.push_back(row_labels[row]);
  }
  if (labels.size() < 2) return invalid_argument("target '" + target.name + "' needs at least two classes");
  if (labels.size() > 1000) {
    return invalid_argument("target '" + target.name + "' has " + std::to_string(labels.size()) +
                            " classes; multiclass training takes at most 1000");
  }
  // Numeric labels in numeric order (2 before 10), text in text order.
  bool numeric = target.type == data::ColumnType::kNumeric;
  std::sort(labels.begin(), labels.end(),
            [&](const std::string& a, const std::string& b) { return numeric ? std::stod(a) < std::stod(b) : a < b; });
  Labels out;
  out.class_labels = labels;
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (target.is_missing(row)) continue;
    out.kept_rows.push_back(static_cast<std::uint32_t>(row));
    auto index = std::find(labels.begin(), labels.end(), row_labels[row]) - labels.begin();
    out.values.push_back(static_cast<double>(index));
  }
  return out;
}

bool many_valued_text(const data::Column& target) {
  if (target.type != data::ColumnType::kCategorical) return false;
  std::vector<std::string> seen;
  for (std::size_t row = 0; row < target.size() && seen.size() <= 2; ++row) {
    if (target.is_missing(row)) continue;
    std::string text = target.text_at(row);
    if (!contains(seen, text)) seen.push_back(text);
  }
  return seen.size() > 2;
}

Result<std::vector<double>> row_weights(const data::Table& rows, const std::string& column_name) {
  if (column_name.empty()) return std::vector<double>{};
  SLIPWAY_ASSIGN_OR_RETURN(std::size_t index, rows.column_index(column_name));
  const data::Column& column = rows.column(index);
  if (column.type != data::ColumnType::kNumeric) {
    return invalid_argument("weight column '" + column_name + "' holds text; weights must be numbers");
  }
  std::vector<double> weights(rows.row_count());
  for (std::size_t row = 0; row < rows.row_count(); ++row) {
    double weight = column.numbers[row];
    if (!(weight >= 0.0) || !std::isfinite(weight)) {
      return invalid_argument(
          "weight column '" + column_name + "' has " +
          (std::isnan(weight) ? std::string("a missing value") : "the value " + std::to_string(weight)) +
          " in data row " + std::to_string(row + 1) + "; weights must be finite and >= 0");
    }
    weights[row] = weight;
  }
  return weights;
}

// The task decides classification; a regression target takes the objective parameter's
// choice (auto: squared error).
GbdtObjective objective_of(const std::string& name, bool binary, bool multiclass) {
  if (multiclass) return GbdtObjective::kSoftmax;
  if (binary) return GbdtObjective::kLogistic;
  return objective_by_name(name).value_or(GbdtObjective::kSquaredError);
}

// eval_metric=auto is the objective's own.
GbdtMetric metric_of(const std::string& name, GbdtObjective objective) {
  return metric_by_name(name).value_or(objective_definition(objective).default_metric);
}

// The checkpoint's progress travels in its manifest params, as exact decimal text.
constexpr const char* kCheckpointRoundsParam = "checkpoint_rounds";
constexpr const char* kCheckpointHistoryParam = "checkpoint_history";

std::string encode_history(const std::vector<RoundMetrics>& history) {
  std::string text;
  for (const auto& record : history) {
    text += fmt::format("{}{}:{:.17g}:{:.17g}", text.empty() ? "" : ";", record.round, record.train, record.validation);
  }
  return text;
}

Result<std::vector<RoundMetrics>> decode_history(const std::string& text) {
  std::vector<RoundMetrics> history;
  std::size_t position = 0;
  while (position < text.size()) {
    std::size_t end = text.find(';', position);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(position, end - position);
    RoundMetrics record;
    char train[64] = {};
    char validation[64] = {};
    if (std::sscanf(entry.c_str(), "%d:%63[^:]:%63s", &record.round, train, validation) != 3) {
      return invalid_argument("the checkpoint's metric history is malformed");
    }
    record.train = std::strtod(train, nullptr);
    record.validation = std::strtod(validation, nullptr);
    history.push_back(record);
    position = end + 1;
  }
  return history;
}

// Rows of a matrix with their labels and weights (empty: all 1), owned.
struct OwnedRows {
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<double> weights;
};
struct HeldOutSplit {
  OwnedRows train, validation;
};

// Early stopping judges each round or epoch on a share of the training rows, drawn by seed.
Result<HeldOutSplit> split_validation(std::span<const float> matrix, std::size_t width, std::span<const double> labels,
                                      std::span<const double> weights, std::uint64_t seed, double fraction) {
  HeldOutSplit split;
  std::uint64_t state = seed ^ 0x76616c6964617465ULL;
  for (std::size_t row = 0; row < labels.size(); ++row) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    OwnedRows& side = static_cast<double>(z >> 11) * 0x1.0p-53 < fraction ? split.validation : split.train;
    side.features.insert(side.features.end(), matrix.begin() + static_cast<std::ptrdiff_t>(row * width),
                         matrix.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
    side.labels.push_back(labels[row]);
    if (!weights.empty()) side.weights.push_back(weights[row]);
  }
  if (split.validation.labels.empty() || split.train.labels.empty()) {
    return invalid_argument("early stopping needs rows on both sides of validation_fraction; this table has " +
                            std::to_string(labels.size()));
  }
  return split;
}

// The checkpoint's metric history and rounds (or epochs) done, from its manifest params.
Result<std::pair<int, std::vector<RoundMetrics>>> checkpoint_progress(const model::Bundle& checkpoint) {
  const auto& params = checkpoint.manifest().params;
  auto rounds = params.find(kCheckpointRoundsParam);
  auto history = params.find(kCheckpointHistoryParam);
  if (rounds == params.end() || history == params.end()) {
    return invalid_argument("the bundle to resume from is not a training checkpoint");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto decoded, decode_history(history->second));
  int done = -1;
  const std::string& text = rounds->second;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), done);
  if (error != std::errc() || end != text.data() + text.size() || done < 0) {
    return invalid_argument("the checkpoint's progress is malformed");
  }
  return std::pair{done, std::move(decoded)};
}

// A checkpoint bundle: the manifest with the progress in its params.
model::Bundle checkpoint_bundle(const model::Manifest& manifest, const model::Preprocessor& preprocessor,
                                std::shared_ptr<const model::Model> model, int done,
                                const std::vector<RoundMetrics>& history) {
  model::Manifest checkpoint_manifest = manifest;
  checkpoint_manifest.params[kCheckpointRoundsParam] = std::to_string(done);
  checkpoint_manifest.params[kCheckpointHistoryParam] = encode_history(history);
  return model::Bundle(std::move(checkpoint_manifest), preprocessor, std::move(model));
}

struct TreeFit {
  GbdtFit details;
  std::size_t validation_rows = 0;
};

Result<TreeFit> fit_trees(const data::Table& rows, const std::vector<float>& matrix,
                          const model::Preprocessor& preprocessor, const Labels& labels, GbdtObjective objective,
                          const GbdtParams& params, const TrainRequest& request, const model::Manifest& manifest,
                          int threads) {
  GbdtOptions options = params.tree;
  options.objective = objective;
  options.class_count = labels.class_labels.size();
  options.metric = metric_of(params.eval_metric, objective);
  options.checkpoint_every = request.checkpoint_every;
  options.seed = request.seed;
  options.thread_count = threads;
  if (options.grow_policy == GrowPolicy::kDepthwise && options.max_depth == 0) {
    return invalid_argument("max_depth=0 (unlimited) needs grow_policy=lossguide or max_leaves > 0");
  }
  if (options.max_depth == 0 && options.max_leaves == 0) {
    return invalid_argument("max_depth=0 and max_leaves=0 would grow trees without limit; set one of them");
  }
  if (params.categorical_splits == CategoricalSplits::kPartition) {
    for (const auto& feature : preprocessor.features()) {
      options.categorical.push_back(feature.type == data::ColumnType::kCategorical);
    }
  }
  const std::size_t width = preprocessor.output_width();
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<double> weights, row_weights(rows, request.weight_column));

  // Early stopping judges each round on a validation share of the training rows, drawn by seed.
  std::vector<float> train_features;
  std::vector<double> train_labels;
  std::vector<double> train_weights;
  std::vector<float> validation_features;
  std::vector<double> validation_labels;
  std::vector<double> validation_weights;
  GbdtMatrix train{matrix, rows.row_count(), labels.values, weights};
  GbdtMatrix validation;
  bool with_validation = options.early_stopping_rounds > 0;
  if (with_validation) {
    SLIPWAY_ASSIGN_OR_RETURN(HeldOutSplit split, split_validation(matrix, width, labels.values, weights, request.seed,
                                                                  params.validation_fraction));
    train_features = std::move(split.train.features);
    train_labels = std::move(split.train.labels);
    train_weights = std::move(split.train.weights);
    validation_features = std::move(split.validation.features);
    validation_labels = std::move(split.validation.labels);
    validation_weights = std::move(split.validation.weights);
    train = {train_features, train_labels.size(), train_labels, train_weights};
    validation = {validation_features, validation_labels.size(), validation_labels, validation_weights};
  }

  std::optional<GbdtState> start;
  if (request.resume_from != nullptr) {
    const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&request.resume_from->model());
    if (trees == nullptr) return invalid_argument("the bundle to resume from is not a tree-model checkpoint");
    SLIPWAY_ASSIGN_OR_RETURN(auto progress, checkpoint_progress(*request.resume_from));
    start.emplace();
    start->ensemble = trees->to_data();
    start->rounds_done = progress.first;
    start->history = std::move(progress.second);
  } else if (request.init_model != nullptr) {
    const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&request.init_model->model());
    if (trees == nullptr) {
      return invalid_argument("--init-model must be a tree model; this one is " +
                              std::string(request.init_model->model().family()));
    }
    start.emplace();
    start->ensemble = trees->to_data();
  }

  GbdtCallbacks callbacks;
  callbacks.on_round = request.on_round;
  callbacks.stop = request.stop;
  if (request.on_checkpoint) {
    callbacks.on_checkpoint = [&](const GbdtState& state) -> Status {
      return request.on_checkpoint(
          checkpoint_bundle(manifest, preprocessor, std::make_shared<model::TreeEnsembleModel>(state.ensemble),
                            state.rounds_done, state.history),
          state.rounds_done);
    };
  }
  SLIPWAY_ASSIGN_OR_RETURN(GbdtFit fit, fit_gbdt(train, width, with_validation ? &validation : nullptr, options,
                                                 start ? &*start : nullptr, callbacks));
  return TreeFit{std::move(fit), validation.rows};
}

struct NetworkFit {
  MlpFit details;
  std::size_t validation_rows = 0;
};

Result<NetworkFit> fit_network(const data::Table& rows, const std::vector<float>& matrix,
                               const model::Preprocessor& preprocessor, const Labels& labels, MlpLoss loss,
                               const MlpParams& params, bool bf16, const TrainRequest& request,
                               const model::Manifest& manifest, int threads) {
  MlpOptions options;
  options.hidden = params.hidden;
  if (!kernels::activation_by_name(params.activation, options.activation)) {
    return invalid_argument("unknown activation '" + params.activation + "'");
  }
  options.layer_norm = params.layer_norm;
  options.dropout = params.dropout;
  options.epochs = params.epochs;
  options.batch_size = static_cast<std::size_t>(params.batch_size);
  options.learning_rate = params.learning_rate;
  options.weight_decay = params.weight_decay;
  options.warmup_fraction = params.warmup_fraction;
  options.early_stopping = params.early_stopping;
  options.bf16 = bf16;
  options.seed = request.seed;
  options.thread_count = threads;
  options.checkpoint_every = request.checkpoint_every;

  const std::size_t width = preprocessor.output_width();
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<double> weights, row_weights(rows, request.weight_column));
  MlpRows train{matrix, rows.row_count(), labels.values, weights};
  MlpRows validation;
  HeldOutSplit split;
  bool with_validation = options.early_stopping > 0;
  if (with_validation) {
    SLIPWAY_ASSIGN_OR_RETURN(
        split, split_validation(matrix, width, labels.values, weights, request.seed, params.validation_fraction));
    train = {split.train.features, split.train.labels.size(), split.train.labels, split.train.weights};
    validation = {split.validation.features, split.validation.labels.size(), split.validation.labels,
                  split.validation.weights};
  }

  MlpStart start;
  const model::Bundle* from = request.resume_from != nullptr ? request.resume_from.get() : request.init_model.get();
  if (from != nullptr) {
    start.model = std::dynamic_pointer_cast<const model::MlpModel>(from->shared_model());
    if (start.model == nullptr) {
      return invalid_argument(
          std::string(request.resume_from != nullptr ? "the checkpoint to resume from" : "--init-model") +
          " must be an MLP; this one is " + std::string(from->model().family()));
    }
  }
  if (request.resume_from != nullptr) {
    SLIPWAY_ASSIGN_OR_RETURN(auto progress, checkpoint_progress(*request.resume_from));
    start.resume = true;
    start.epochs_done = progress.first;
    start.history = std::move(progress.second);
  }

  MlpCallbacks callbacks;
  callbacks.on_epoch = request.on_round;
  callbacks.stop = request.stop;
  if (request.on_checkpoint) {
    callbacks.on_checkpoint = [&](const std::shared_ptr<const model::MlpModel>& checkpoint, int epochs_done,
                                  const std::vector<RoundMetrics>& history) -> Status {
      return request.on_checkpoint(checkpoint_bundle(manifest, preprocessor, checkpoint, epochs_done, history),
                                   epochs_done);
    };
  }
  std::size_t outputs = loss == MlpLoss::kSoftmax ? labels.class_labels.size() : 1;
  SLIPWAY_ASSIGN_OR_RETURN(MlpFit fit, fit_mlp(train, width, outputs, with_validation ? &validation : nullptr, loss,
                                               options, start.model != nullptr ? &start : nullptr, callbacks));
  return NetworkFit{std::move(fit), validation.rows};
}

}  // namespace

Result<std::string> choose_positive_label(const std::vector<std::string>& labels,
                                          const std::vector<std::size_t>& counts, const std::string& requested) {
  if (!requested.empty() && requested != "auto") {
    if (contains(labels, requested)) return requested;
    return invalid_argument("positive_class '" + requested + "' is not a label of the target; the labels are '" +
                            labels[0] + "' and '" + labels[1] + "'");
  }
  for (const char* conventional : {"1", "yes", "true", "TRUE", "Yes", "True"}) {
    if (contains(labels, conventional)) return std::string(conventional);
  }
  if (counts[0] != counts[1]) return counts[0] < counts[1] ? labels[0] : labels[1];
  return std::max(labels[0], labels[1]);
}

Result<TrainSummary> fit(const data::Table& table, const TrainRequest& request) {
  SLIPWAY_ASSIGN_OR_RETURN(auto params, resolve_parameters(request.model_family, request.params));
  // The same values as typed structs: the family's (the others keep their defaults).
  bool gbdt = request.model_family == "gbdt";
  bool mlp = request.model_family == "mlp";
  GbdtParams tree_parameters;
  LinearParams linear_parameters;
  MlpParams network_parameters;
  if (gbdt) {
    SLIPWAY_ASSIGN_OR_RETURN(tree_parameters, gbdt_params(params));
  } else if (mlp) {
    SLIPWAY_ASSIGN_OR_RETURN(network_parameters, mlp_params(params));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(linear_parameters, linear_params(params));
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::size_t target_index, table.column_index(request.target));
  const data::Column& target = table.column(target_index);

  std::vector<std::string> features = request.features;
  if (features.empty()) {
    for (const auto& column : table.columns()) {
      if (column.name != request.target && !contains(request.excluded_columns, column.name))
        features.push_back(column.name);
    }
  } else if (contains(features, request.target)) {
    return invalid_argument("the target '" + request.target + "' cannot also be a feature");
  }

  bool classification = request.model_family == "logistic";
  bool multiclass = false;
  if (gbdt || mlp) {
    const std::string& objective = gbdt ? tree_parameters.objective : network_parameters.objective;
    multiclass = objective == "multi:softmax" || (objective == "auto" && many_valued_text(target));
    classification = multiclass || objective == "binary:logistic" || (objective == "auto" && two_valued(target));
  } else if (request.init_model != nullptr || request.resume_from != nullptr) {
    return invalid_argument("warm start and resume apply to gbdt and mlp models only");
  }
  if (contains(features, request.weight_column)) {
    features.erase(std::find(features.begin(), features.end(), request.weight_column));
  }
  Labels labels;
  if (multiclass) {
    SLIPWAY_ASSIGN_OR_RETURN(labels, multiclass_labels(target));
  } else if (classification) {
    SLIPWAY_ASSIGN_OR_RETURN(labels, binary_labels(target, gbdt  ? tree_parameters.positive_class
                                                           : mlp ? network_parameters.positive_class
                                                                 : linear_parameters.positive_class));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(labels, regression_labels(target));
  }
  data::Table rows = table.take_rows(labels.kept_rows);

  model::PreprocessOptions preprocess_options;
  preprocess_options.max_categories = gbdt ? tree_parameters.max_categories : linear_parameters.max_categories;
  if (gbdt) {
    // Trees take numbers as they are, route missing values themselves, and split categories on
    // their codes (natively, or as ordered numbers with categorical_splits=ordinal). A code
    // must fit a histogram bin, so at most 254 levels are kept per column.
    preprocess_options.encoding = model::CategoricalEncoding::kOrdinal;
    preprocess_options.standardize = false;
    preprocess_options.impute_missing = false;
    preprocess_options.max_categories = std::min<std::size_t>(preprocess_options.max_categories, 253);
  } else if (mlp) {
    // A network wants inputs on one scale: standardized numbers, one-hot categories, imputed gaps.
    preprocess_options.max_categories = network_parameters.max_categories;
    preprocess_options.encoding = model::CategoricalEncoding::kOneHot;
    preprocess_options.standardize = true;
  } else {
    preprocess_options.encoding = linear_parameters.categorical_encoding;
    preprocess_options.standardize = linear_parameters.standardize;
  }
  model::Preprocessor preprocessor;
  // A warm start or a resume continues the same function of the same inputs: the checkpoint's
  // preprocessing, not one fitted again on rows that may have changed.
  const model::Bundle* continued =
      request.resume_from != nullptr ? request.resume_from.get() : request.init_model.get();
  if (continued != nullptr) {
    preprocessor = continued->preprocessor();
    features.clear();
    for (const auto& input : preprocessor.features()) {
      // The model reads every input it was made with; leaving one out cannot be honoured.
      if (contains(request.excluded_columns, input.name) || input.name == request.weight_column ||
          (!request.features.empty() && !contains(request.features, input.name))) {
        return invalid_argument("the starting model reads the input '" + input.name +
                                "', which this training leaves out; a warm start or resume keeps its inputs");
      }
      features.push_back(input.name);
    }
    if (continued->task() != (multiclass       ? model::Task::kMulticlassClassification
                              : classification ? model::Task::kBinaryClassification
                                               : model::Task::kRegression) ||
        (classification && continued->manifest().class_labels != labels.class_labels)) {
      return invalid_argument(std::string(request.resume_from != nullptr ? "the checkpoint" : "--init-model") +
                              " was trained for a different task or different class labels");
    }
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(preprocessor, model::Preprocessor::fit(rows, features, preprocess_options));
  }
  std::vector<float> matrix;
  SLIPWAY_RETURN_IF_ERROR(preprocessor.transform(rows, matrix));

  model::Manifest manifest;
  manifest.task = multiclass       ? model::Task::kMulticlassClassification
                  : classification ? model::Task::kBinaryClassification
                                   : model::Task::kRegression;
  manifest.target = request.target;
  manifest.class_labels = labels.class_labels;
  manifest.created_by = "slipway " + std::string(slipway_version());
  manifest.code_version = std::string(slipway_code_version());
  manifest.data_fingerprint = request.data_fingerprint;
  manifest.seed = request.seed;
  manifest.split = request.split_description;
  manifest.train_rows = rows.row_count();
  manifest.params = params;
  manifest.params["model"] = request.model_family;
  if (!request.weight_column.empty()) manifest.params["weight_column"] = request.weight_column;
  if (request.init_model != nullptr) manifest.params["init_model"] = request.init_model_reference;
  // bf16 products only where the CPU has them (or SLIPWAY_DENSE_KERNEL did not rule them out):
  // emulated they are exact but slower than float32.
  bool bf16 =
      mlp && network_parameters.precision == MlpComputePrecision::kBfloat16 && kernels::dense_kernel().bf16_native;
  if (mlp && network_parameters.precision == MlpComputePrecision::kBfloat16 && !bf16) {
    log_warn(std::string("precision=bfloat16 needs AVX-512 BF16, which the dense kernel in use (") +
             std::string(kernels::dense_kernel().name) + ") lacks: training in float32");
  }
  if (mlp) manifest.params["compute_precision"] = bf16 ? "bfloat16" : "float32";
  // Which bf16 kernel ran: AMX's and AVX-512 BF16's products differ in their last bits.
  if (bf16) manifest.params["compute_kernel"] = std::string(kernels::dense_kernel().name);

  int threads = request.thread_count > 0 ? request.thread_count : default_thread_count();
  std::shared_ptr<const model::Model> fitted;
  int iterations = 0;
  bool converged = true;
  TreeFit trees;
  NetworkFit network;
  const MlpLoss network_loss = multiclass ? MlpLoss::kSoftmax : classification ? MlpLoss::kLogistic : MlpLoss::kSquared;
  if (mlp) {
    SLIPWAY_ASSIGN_OR_RETURN(network, fit_network(rows, matrix, preprocessor, labels, network_loss, network_parameters,
                                                  bf16, request, manifest, threads));
    fitted = network.details.model;
    iterations = network.details.epochs;
  } else if (gbdt) {
    SLIPWAY_ASSIGN_OR_RETURN(trees, fit_trees(rows, matrix, preprocessor, labels,
                                              objective_of(tree_parameters.objective, classification, multiclass),
                                              tree_parameters, request, manifest, threads));
    fitted = trees.details.model;
    iterations = trees.details.rounds;
  } else {
    if (!request.weight_column.empty())
      return invalid_argument("row weights apply to gbdt and mlp models only (for now)");
    LbfgsOptions lbfgs;
    lbfgs.max_iterations = linear_parameters.max_iterations;
    lbfgs.history = linear_parameters.lbfgs_history;
    lbfgs.gradient_tolerance = linear_parameters.tolerance;
    lbfgs.stop = request.stop;
    LinearFit linear =
        fit_linear(matrix, rows.row_count(), preprocessor.output_width(), labels.values,
                   classification ? LinearLoss::kLogistic : LinearLoss::kSquared, linear_parameters.l2, lbfgs, threads);
    iterations = linear.iterations;
    converged = linear.converged;
    fitted = std::make_shared<model::LinearModel>(std::move(linear.weights), linear.bias);
  }

  TrainSummary summary;
  summary.features = features;
  summary.rows_used = rows.row_count();
  summary.rows_dropped_missing_target = table.row_count() - rows.row_count();
  summary.iterations = iterations;
  summary.converged = converged;
  if (gbdt) {
    summary.history = std::move(trees.details.history);
    summary.round_metric = std::string(metric_name(
        metric_of(tree_parameters.eval_metric, objective_of(tree_parameters.objective, classification, multiclass))));
    summary.best_round = trees.details.best_round;
    summary.stopped_early = trees.details.stopped_early;
    summary.validation_rows = trees.validation_rows;
  } else if (mlp) {
    summary.history = std::move(network.details.history);
    summary.round_metric = mlp_metric_name(network_loss);
    summary.best_round = network.details.best_epoch;
    summary.stopped_early = network.details.stopped_early;
    // A loss that ended well above where it started is almost always a step size too large for
    // the data (a tenth of slack: dropout's noise, a warm start that begins near the minimum).
    const auto& history = summary.history;
    if (history.size() >= 2 && history.back().train > 1.1 * history.front().train) {
      log_warn(
          fmt::format("the training {} rose from {:.4g} (epoch 1) to {:.4g} (epoch {}): learning_rate {} may be "
                      "too high for this data",
                      summary.round_metric, history.front().train, history.back().train, history.size(),
                      network_parameters.learning_rate));
    }
    summary.validation_rows = network.validation_rows;
  }
  summary.bundle =
      std::make_shared<const model::Bundle>(std::move(manifest), std::move(preprocessor), std::move(fitted));
  return summary;
}

}  // namespace slipway::train
