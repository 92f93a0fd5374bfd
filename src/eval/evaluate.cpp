#include <algorithm>
#include <map>

#include "eval/labelled_rows.h"

namespace slipway::eval {

Result<LabelledRows> labelled_rows(const model::Manifest& manifest, const data::Column& target) {
  bool classification = manifest.task != model::Task::kRegression;
  if (!classification && target.type != data::ColumnType::kNumeric) {
    return invalid_argument("target '" + target.name + "' holds text, but the model is a regression");
  }
  LabelledRows labelled;
  for (std::size_t row = 0; row < target.size(); ++row) {
    if (target.is_missing(row)) continue;
    if (classification) {
      std::string text = target.text_at(row);
      auto found = std::find(manifest.class_labels.begin(), manifest.class_labels.end(), text);
      if (found == manifest.class_labels.end()) {
        std::string known;
        for (std::size_t index = 0; index < manifest.class_labels.size() && index < 10; ++index) {
          known.append(known.empty() ? "'" : ", '").append(manifest.class_labels[index]).append("'");
        }
        if (manifest.class_labels.size() > 10) {
          known += " and " + std::to_string(manifest.class_labels.size() - 10) + " more";
        }
        return invalid_argument("target '" + target.name + "' has the label '" + text +
                                "', which the model never saw (it knows " + known + ")");
      }
      labelled.labels.push_back(static_cast<double>(found - manifest.class_labels.begin()));
    } else {
      labelled.labels.push_back(target.numbers[row]);
    }
    labelled.rows.push_back(static_cast<std::uint32_t>(row));
  }
  if (labelled.rows.empty()) return invalid_argument("no row has a value for the target '" + target.name + "'");
  return labelled;
}

Metrics task_metrics(const model::Manifest& manifest, std::span<const float> scores, std::size_t columns,
                     std::span<const double> labels) {
  switch (manifest.task) {
    case model::Task::kMulticlassClassification:
      return multiclass_metrics(scores, columns, labels);
    case model::Task::kBinaryClassification:
      return binary_metrics(scores, labels, manifest.decision_threshold);
    case model::Task::kRegression:
      break;
  }
  return regression_metrics(scores, labels);
}

Result<Evaluation> evaluate(const model::Bundle& bundle, const data::Table& table, const std::string& slice_column) {
  return evaluate(bundle, table, EvaluationOptions{.slice_column = slice_column, .costs = std::nullopt});
}

Result<Evaluation> evaluate(const model::Bundle& bundle, const data::Table& table, const EvaluationOptions& options) {
  const model::Manifest& manifest = bundle.manifest();
  const std::string& slice_column = options.slice_column;
  std::vector<std::vector<double>> costs;
  if (options.costs) {
    if (manifest.task == model::Task::kRegression) {
      return invalid_argument("a cost matrix is for a classifier; this model is a regression");
    }
    SLIPWAY_ASSIGN_OR_RETURN(costs, cost_table(*options.costs, manifest.class_labels));
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::size_t target_index, table.column_index(manifest.target));
  const data::Column* slice = nullptr;
  if (!slice_column.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(std::size_t slice_index, table.column_index(slice_column));
    slice = &table.column(slice_index);
  }
  SLIPWAY_ASSIGN_OR_RETURN(LabelledRows labelled, labelled_rows(manifest, table.column(target_index)));
  const auto& kept_rows = labelled.rows;
  const auto& labels = labelled.labels;
  data::Table rows = table.take_rows(kept_rows);
  SLIPWAY_ASSIGN_OR_RETURN(model::Predictions predictions, bundle.predict(rows));

  const std::size_t columns = predictions.columns;
  auto compute = [&](std::span<const float> scores, std::span<const double> truth) {
    Metrics metrics = task_metrics(manifest, scores, columns, truth);
    if (!costs.empty()) metrics.values.emplace_back("cost", decision_cost(scores, columns, truth, costs));
    return metrics;
  };
  Evaluation evaluation;
  evaluation.rows = kept_rows.size();
  evaluation.rows_missing_target = table.row_count() - kept_rows.size();
  evaluation.overall = compute(predictions.scores, labels);
  if (slice != nullptr) {
    evaluation.slice_column = slice_column;
    std::map<std::string, std::vector<std::uint32_t>> members;
    for (std::size_t index = 0; index < kept_rows.size(); ++index) {
      std::size_t row = kept_rows[index];
      members[slice->is_missing(row) ? "(missing)" : slice->text_at(row)].push_back(static_cast<std::uint32_t>(index));
    }
    for (const auto& [value, indices] : members) {
      std::vector<float> scores;
      std::vector<double> truth;
      for (auto index : indices) {
        auto row_scores = std::span(predictions.scores).subspan(index * columns, columns);
        scores.insert(scores.end(), row_scores.begin(), row_scores.end());
        truth.push_back(labels[index]);
      }
      evaluation.slices.push_back({value, indices.size(), compute(scores, truth)});
    }
  }
  return evaluation;
}

}  // namespace slipway::eval
