// Golden comparison: a baseline and a candidate scored on the same rows, difference by difference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "eval/labelled_rows.h"

namespace slipway::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string labels_text(const model::Manifest& manifest) {
  std::string text;
  for (const auto& label : manifest.class_labels) text.append(text.empty() ? "'" : ", '").append(label).append("'");
  return text;
}

Status check_comparable(const model::Manifest& a, const model::Manifest& b) {
  if (a.task != b.task) {
    return invalid_argument("the models answer different questions: A is " + std::string(model::task_name(a.task)) +
                            ", B is " + std::string(model::task_name(b.task)));
  }
  if (a.task != model::Task::kRegression && a.class_labels != b.class_labels) {
    return invalid_argument("the models' classes differ: A has " + labels_text(a) + ", B has " + labels_text(b));
  }
  return {};
}

// The largest absolute difference between two rows of outputs. A NaN equals a NaN and differs
// from any number infinitely: a model that stops answering a row is the largest difference.
double row_difference(std::span<const float> a, std::span<const float> b) {
  double largest = 0.0;
  for (std::size_t column = 0; column < a.size(); ++column) {
    bool nan_a = std::isnan(a[column]), nan_b = std::isnan(b[column]);
    double difference = 0.0;
    if (nan_a != nan_b) {
      difference = std::numeric_limits<double>::infinity();
    } else if (!nan_a && a[column] != b[column]) {
      // Equal infinities are equal; the subtraction would give NaN.
      difference = std::abs(static_cast<double>(a[column]) - static_cast<double>(b[column]));
    }
    largest = std::max(largest, difference);
  }
  return largest;
}

struct RowScores {
  const model::Predictions& a;
  const model::Predictions& b;
  std::span<const float> row_a(std::size_t row) const {
    return std::span(a.scores).subspan(row * a.columns, a.columns);
  }
  std::span<const float> row_b(std::size_t row) const {
    return std::span(b.scores).subspan(row * b.columns, b.columns);
  }
};

}  // namespace

std::string_view watched_metric(model::Task task) {
  switch (task) {
    case model::Task::kBinaryClassification:
      return "auc";
    case model::Task::kMulticlassClassification:
      return "log_loss";
    case model::Task::kRegression:
      break;
  }
  return "rmse";
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> kMetrics = {
      "auc", "pr_auc",   "log_loss", "brier", "ece", "accuracy", "balanced_accuracy", "precision", "recall",
      "f1",  "macro_f1", "rmse",     "mae",   "r2",  "cost"};
  return kMetrics;
}

bool higher_is_better(std::string_view metric) {
  for (std::string_view better :
       {"auc", "pr_auc", "accuracy", "balanced_accuracy", "precision", "recall", "f1", "macro_f1", "r2"}) {
    if (metric == better) return true;
  }
  return false;
}

double quality_drop(std::string_view metric, double baseline, double candidate) {
  return higher_is_better(metric) ? baseline - candidate : candidate - baseline;
}

Result<Comparison> compare(const model::Bundle& a, const model::Bundle& b, const data::Table& table,
                           const ComparisonOptions& options) {
  if (!(options.tolerance >= 0.0) || !std::isfinite(options.tolerance)) {
    return invalid_argument("the tolerance must be a finite number >= 0");
  }
  SLIPWAY_RETURN_IF_ERROR(check_comparable(a.manifest(), b.manifest()));
  if (table.row_count() == 0) return invalid_argument("the golden set has no rows");
  const data::Column* slice = nullptr;
  if (!options.slice_column.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(std::size_t slice_index, table.column_index(options.slice_column));
    slice = &table.column(slice_index);
  }
  auto predicted_a = a.predict(table);
  if (!predicted_a.ok()) return Status(predicted_a.status().code(), "model A: " + predicted_a.status().message());
  auto predicted_b = b.predict(table);
  if (!predicted_b.ok()) return Status(predicted_b.status().code(), "model B: " + predicted_b.status().message());
  RowScores scores{*predicted_a, *predicted_b};
  const std::size_t rows = table.row_count();
  const bool classification = a.task() != model::Task::kRegression;

  std::vector<double> differences(rows);
  std::vector<char> flipped(rows, 0);
  for (std::size_t row = 0; row < rows; ++row) {
    differences[row] = row_difference(scores.row_a(row), scores.row_b(row));
    if (classification) flipped[row] = a.predicted_label(*predicted_a, row) != b.predicted_label(*predicted_b, row);
  }
  auto summarize = [&](std::span<const std::uint32_t> members) {
    OutputDifferences summary;
    summary.rows = members.size();
    double sum = 0.0;
    for (std::uint32_t row : members) {
      double difference = differences[row];
      summary.rows_beyond_tolerance += difference > options.tolerance;
      summary.label_flips += flipped[row];
      summary.max_abs_difference = std::max(summary.max_abs_difference, difference);
      sum += difference;
    }
    summary.mean_abs_difference = members.empty() ? 0.0 : sum / static_cast<double>(members.size());
    return summary;
  };
  std::vector<std::uint32_t> all_rows(rows);
  std::iota(all_rows.begin(), all_rows.end(), 0u);

  Comparison comparison;
  comparison.tolerance = options.tolerance;
  comparison.overall = summarize(all_rows);

  // Quality, on the rows whose target is present, when the table has A's target.
  // A target column without a single value (a golden set whose labels are still to come) is no
  // target: the outputs are compared alone.
  const data::Column* target = table.find(a.manifest().target);
  if (target != nullptr) {
    bool any_value = false;
    for (std::size_t row = 0; row < rows && !any_value; ++row) any_value = !target->is_missing(row);
    if (!any_value) target = nullptr;
  }
  std::vector<char> has_label(rows, 0);
  std::vector<double> label_of(rows, 0.0);
  const std::string metric(watched_metric(a.task()));
  auto quality = [&, columns = predicted_a->columns](std::span<const std::uint32_t> members, bool use_b) {
    std::vector<float> member_scores;
    std::vector<double> truth;
    for (std::uint32_t row : members) {
      if (!has_label[row]) continue;
      auto row_scores = use_b ? scores.row_b(row) : scores.row_a(row);
      member_scores.insert(member_scores.end(), row_scores.begin(), row_scores.end());
      truth.push_back(label_of[row]);
    }
    return task_metrics(use_b ? b.manifest() : a.manifest(), member_scores, columns, truth);
  };
  if (target != nullptr) {
    SLIPWAY_ASSIGN_OR_RETURN(LabelledRows labelled, labelled_rows(a.manifest(), *target));
    for (std::size_t index = 0; index < labelled.rows.size(); ++index) {
      has_label[labelled.rows[index]] = 1;
      label_of[labelled.rows[index]] = labelled.labels[index];
    }
    comparison.labelled = true;
    comparison.rows_missing_target = rows - labelled.rows.size();
    comparison.quality_metric = metric;
    comparison.metrics_a = quality(all_rows, false);
    comparison.metrics_b = quality(all_rows, true);
    comparison.quality_drop =
        eval::quality_drop(metric, comparison.metrics_a.get(metric), comparison.metrics_b.get(metric));
  }

  std::vector<std::string> slice_of;
  if (slice != nullptr) {
    comparison.slice_column = options.slice_column;
    std::map<std::string, std::vector<std::uint32_t>> members;
    slice_of.resize(rows);
    for (std::uint32_t row = 0; row < rows; ++row) {
      slice_of[row] = slice->is_missing(row) ? "(missing)" : slice->text_at(row);
      members[slice_of[row]].push_back(row);
    }
    comparison.worst_slice_drop = kNaN;
    for (const auto& [value, member_rows] : members) {
      SliceComparison entry;
      entry.value = value;
      entry.differences = summarize(member_rows);
      entry.quality_a = entry.quality_b = entry.quality_drop = kNaN;
      if (comparison.labelled) {
        entry.labelled_rows = static_cast<std::size_t>(
            std::count_if(member_rows.begin(), member_rows.end(), [&](std::uint32_t row) { return has_label[row]; }));
        if (entry.labelled_rows > 0) {
          entry.quality_a = quality(member_rows, false).get(metric);
          entry.quality_b = quality(member_rows, true).get(metric);
          entry.quality_drop = eval::quality_drop(metric, entry.quality_a, entry.quality_b);
        }
        // A slice without a defined drop (AUC of a one-class slice) cannot be the worst.
        if (!std::isnan(entry.quality_drop) &&
            (comparison.worst_slice.empty() || entry.quality_drop > comparison.worst_slice_drop)) {
          comparison.worst_slice = value;
          comparison.worst_slice_drop = entry.quality_drop;
        }
      }
      comparison.slices.push_back(std::move(entry));
    }
  }

  std::vector<std::uint32_t> beyond;
  for (std::uint32_t row = 0; row < rows; ++row) {
    if (differences[row] > options.tolerance) beyond.push_back(row);
  }
  std::size_t listed = std::min(options.worst_rows, beyond.size());
  // Largest difference first; among equals, the earlier row.
  std::partial_sort(beyond.begin(), beyond.begin() + static_cast<std::ptrdiff_t>(listed), beyond.end(),
                    [&](std::uint32_t left, std::uint32_t right) {
                      if (differences[left] != differences[right]) return differences[left] > differences[right];
                      return left < right;
                    });
  for (std::size_t index = 0; index < listed; ++index) {
    std::uint32_t row = beyond[index];
    DifferingRow entry;
    entry.row = row;
    entry.abs_difference = differences[row];
    auto row_a = scores.row_a(row), row_b = scores.row_b(row);
    entry.outputs_a.assign(row_a.begin(), row_a.end());
    entry.outputs_b.assign(row_b.begin(), row_b.end());
    if (classification) {
      entry.label_a = a.predicted_label(*predicted_a, row);
      entry.label_b = b.predicted_label(*predicted_b, row);
    }
    if (!slice_of.empty()) entry.slice = slice_of[row];
    comparison.worst_rows.push_back(std::move(entry));
  }
  return comparison;
}

}  // namespace slipway::eval
