#include <algorithm>
#include <cmath>

#include "slipway/train.h"
#include "train/gbdt_trainer.h"
#include "train/linear_trainer.h"

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
                                labels[1] + "', '" + text + "', ...); logistic regression needs exactly two");
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
    return invalid_argument("target '" + target.name + "' holds text; linear regression needs a numeric target");
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

  bool gbdt = request.model_family == "gbdt";
  bool classification = request.model_family == "logistic";
  if (gbdt) {
    const std::string& objective = params.at("objective");
    classification = objective == "binary:logistic" || (objective == "auto" && two_valued(target));
  }
  Labels labels;
  if (classification) {
    SLIPWAY_ASSIGN_OR_RETURN(labels, binary_labels(target, params.at("positive_class")));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(labels, regression_labels(target));
  }
  data::Table rows = table.take_rows(labels.kept_rows);

  model::PreprocessOptions preprocess_options;
  preprocess_options.max_categories = std::stoul(params.at("max_categories"));
  if (gbdt) {
    // Trees take numbers as they are, route missing values themselves, and split categories by
    // their frequency rank (native categorical splits are not built yet).
    preprocess_options.encoding = model::CategoricalEncoding::kOrdinal;
    preprocess_options.standardize = false;
    preprocess_options.impute_missing = false;
  } else {
    preprocess_options.encoding = params.at("categorical_encoding") == "ordinal" ? model::CategoricalEncoding::kOrdinal
                                                                                 : model::CategoricalEncoding::kOneHot;
    preprocess_options.standardize = params.at("standardize") == "true";
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto preprocessor, model::Preprocessor::fit(rows, features, preprocess_options));
  std::vector<float> matrix;
  SLIPWAY_RETURN_IF_ERROR(preprocessor.transform(rows, matrix));

  int threads = request.thread_count > 0 ? request.thread_count : default_thread_count();
  std::shared_ptr<const model::Model> fitted;
  int iterations = 0;
  bool converged = true;
  if (gbdt) {
    GbdtOptions options;
    options.objective = classification ? GbdtObjective::kLogistic : GbdtObjective::kSquaredError;
    options.rounds = std::stoi(params.at("rounds"));
    options.learning_rate = std::stod(params.at("learning_rate"));
    options.max_depth = std::stoi(params.at("max_depth"));
    options.lambda = std::stod(params.at("lambda"));
    options.gamma = std::stod(params.at("gamma"));
    options.min_child_weight = std::stod(params.at("min_child_weight"));
    options.max_bin = std::stoi(params.at("max_bin"));
    options.thread_count = threads;
    GbdtFit trees = fit_gbdt(matrix, rows.row_count(), preprocessor.output_width(), labels.values, options);
    fitted = trees.model;
    iterations = trees.rounds;
  } else {
    LbfgsOptions lbfgs;
    lbfgs.max_iterations = std::stoi(params.at("max_iterations"));
    lbfgs.history = std::stoi(params.at("lbfgs_history"));
    lbfgs.gradient_tolerance = std::stod(params.at("tolerance"));
    LinearFit linear = fit_linear(matrix, rows.row_count(), preprocessor.output_width(), labels.values,
                                  classification ? LinearLoss::kLogistic : LinearLoss::kSquared,
                                  std::stod(params.at("l2")), lbfgs, threads);
    iterations = linear.iterations;
    converged = linear.converged;
    fitted = std::make_shared<model::LinearModel>(std::move(linear.weights), linear.bias);
  }

  model::Manifest manifest;
  manifest.task = classification ? model::Task::kBinaryClassification : model::Task::kRegression;
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

  TrainSummary summary;
  summary.features = features;
  summary.rows_used = rows.row_count();
  summary.rows_dropped_missing_target = table.row_count() - rows.row_count();
  summary.iterations = iterations;
  summary.converged = converged;
  summary.bundle =
      std::make_shared<const model::Bundle>(std::move(manifest), std::move(preprocessor), std::move(fitted));
  return summary;
}

}  // namespace slipway::train
