// Scoring a file with a model: predictions per row, an identifying column, and the output CSV.
#include <fmt/format.h>

#include "slipway/pipeline.h"

namespace slipway::pipeline {

std::string ScoredRows::to_csv() const {
  bool classification = task != model::Task::kRegression;
  bool multiclass = task == model::Task::kMulticlassClassification;
  const std::size_t columns = predictions.columns;
  std::string csv;
  csv.reserve(predictions.rows * 24);
  if (!id_name.empty()) {
    append_csv_field(csv, id_name);
    csv += ',';
  }
  if (multiclass) {
    for (const auto& label : class_labels) {
      append_csv_field(csv, "probability_" + label);
      csv += ',';
    }
    csv += "label\n";
  } else {
    csv += classification ? "probability,label\n" : "prediction\n";
  }
  for (std::size_t row = 0; row < predictions.rows; ++row) {
    if (!id_name.empty()) {
      append_csv_field(csv, ids[row]);
      csv += ',';
    }
    for (std::size_t column = 0; column < columns; ++column) {
      if (column > 0) csv += ',';
      csv += fmt::format("{}", predictions.scores[row * columns + column]);
    }
    if (classification) {
      csv += ',';
      append_csv_field(csv, labels[row]);
    }
    csv += '\n';
  }
  return csv;
}

Result<ScoredRows> score_file(const LoadedReference& reference, const std::string& data_path,
                              const ScoringOptions& options) {
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(data_path));
  const data::Column* ids = nullptr;
  if (!options.id_column.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto index, table.column_index(options.id_column));
    ids = &table.column(index);
  } else {
    for (const char* conventional : {"id", "ID", "Id"}) {
      if (ids == nullptr) ids = table.find(conventional);
    }
  }
  const model::Bundle& bundle = *reference.bundle;
  SLIPWAY_ASSIGN_OR_RETURN(auto predictions, bundle.predict(table));
  ScoredRows scored;
  scored.model = reference.description;
  scored.task = bundle.task();
  scored.class_labels = bundle.manifest().class_labels;
  if (ids != nullptr) {
    scored.id_name = ids->name;
    scored.ids.reserve(predictions.rows);
    for (std::size_t row = 0; row < predictions.rows; ++row) scored.ids.push_back(ids->text_at(row));
  }
  if (scored.task != model::Task::kRegression) {
    scored.labels.reserve(predictions.rows);
    for (std::size_t row = 0; row < predictions.rows; ++row)
      scored.labels.push_back(bundle.predicted_label(predictions, row));
  }
  scored.predictions = std::move(predictions);
  if (!options.out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(options.out, scored.to_csv()));
  return scored;
}

}  // namespace slipway::pipeline
