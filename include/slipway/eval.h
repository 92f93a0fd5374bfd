// slipway/eval.h — quality metrics, overall and per slice.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/model.h"

namespace slipway::eval {

// Named metric values in a fixed display order. NaN means undefined (AUC on one class).
struct Metrics {
  std::vector<std::pair<std::string, double>> values;
  // NaN when absent.
  double get(std::string_view name) const;
};

// Binary classification: auc, pr_auc, log_loss, brier (the mean squared error of P(positive)),
// ece (expected calibration error: over ten equal-width bins of P(positive), each bin's share of
// the rows times |its mean P(positive) - its positive rate|), accuracy, balanced_accuracy (the
// mean of the true positive and true negative rates: accuracy with both classes weighted alike),
// precision, recall, f1 (the accuracies predicting the positive label when P(positive) >=
// threshold). `labels` are 0 or 1.
Metrics binary_metrics(std::span<const float> probabilities, std::span<const double> labels, double threshold = 0.5);
// Multiclass: log_loss, ece (of the top class's probability against whether it is right, ten
// bins), accuracy, balanced_accuracy (the mean recall of the classes present), macro_f1 (the mean
// of each class's one-vs-rest F1). `probabilities` is rows x class_count row-major; `labels` are
// class indices.
Metrics multiclass_metrics(std::span<const float> probabilities, std::size_t class_count,
                           std::span<const double> labels);
// Regression: rmse, mae, r2.
Metrics regression_metrics(std::span<const float> predictions, std::span<const double> targets);

// Area under the ROC curve with ties counted half (the Mann-Whitney statistic). NaN when only one
// class is present or any score is NaN; infinite scores rank like any other.
double roc_auc(std::span<const float> scores, std::span<const double> labels);
// Area under the precision-recall curve as average precision (the precision at each positive's
// rank, averaged; tied scores enter together), scikit-learn's average_precision_score. NaN
// without positives or with a NaN score.
double average_precision(std::span<const float> scores, std::span<const double> labels);

// A binary classifier's decision threshold, chosen on held-out rows by a named rule:
//   f1              the threshold of the best F1
//   precision>=P    the best recall among thresholds whose precision is at least P
//   recall>=R       the best precision among thresholds whose recall is at least R
//   cost=C          the least false positives + C x false negatives (a miss costs C false alarms)
//   0.3             that number, as given (in [0, 1])
// The threshold is one of the rows' scores (predict positive at or above it). InvalidArgument for
// an unknown rule, a bound outside (0, 1], rows of one class, or a bound no threshold meets.
struct ThresholdChoice {
  double threshold = 0.5;
  std::string rule;        // as given ("precision>=0.9"); empty for a number given as is
  double precision = 0.0;  // on the rows, at the threshold
  double recall = 0.0;
  std::size_t rows = 0;  // rows it was chosen on
};
Status check_threshold_rule(std::string_view rule);
// "0.3": a threshold given as is (no rows needed to choose it), not a rule.
bool threshold_is_number(std::string_view rule);
Result<ThresholdChoice> choose_threshold(std::span<const float> probabilities, std::span<const double> labels,
                                         std::string_view rule);

// What a classifier's decisions cost, for a cost-sensitive metric: the cost of predicting one
// label when the truth is another (0 for pairs not given). Written either as the binary shorthand
// "fn=5,fp=1" (keys tn, fp, fn, tp: a missed positive costs 5, a false alarm 1; the positive
// label is the model's second, as for P(positive)) or as CSV text with the header
// actual,predicted,cost and one row per pair, labels as in the target column.
struct CostMatrix {
  struct Entry {
    std::string actual, predicted;
    double cost = 0.0;
  };
  std::vector<Entry> entries;  // CSV form
  // Binary shorthand: the costs of a true negative, false positive, false negative, true positive.
  std::optional<std::array<double, 4>> binary;
};
// InvalidArgument naming the item: an unknown key, a cost that is not a finite number >= 0, a
// pair given twice, a CSV without its header, or no cost above zero.
Result<CostMatrix> parse_cost_matrix(std::string_view text);
// `file_or_text` names a CSV file (read and parsed), or is the text itself.
Result<CostMatrix> load_cost_matrix(const std::string& file_or_text);
// The text parse_cost_matrix reads back: the shorthand with all four keys, or the CSV.
std::string cost_matrix_text(const CostMatrix& costs);
// cost[actual][predicted] over the model's class labels. InvalidArgument for a label the model
// does not have or the shorthand on a model that is not a binary classifier.
Result<std::vector<std::vector<double>>> cost_table(const CostMatrix& costs,
                                                    const std::vector<std::string>& class_labels);
// The mean cost per row when each row is given the label of least expected cost under the
// model's probabilities (the Bayes decision: for the shorthand, predicting positive when
// P(positive) > fp / (fp + fn) with tp = tn = 0; a tie goes to the first label). `probabilities`
// as binary_metrics (one column) or multiclass_metrics takes them; `labels` class indices.
double decision_cost(std::span<const float> probabilities, std::size_t columns, std::span<const double> labels,
                     const std::vector<std::vector<double>>& cost);

struct SliceMetrics {
  std::string value;  // the slice column's value, "(missing)" for missing
  std::size_t rows = 0;
  Metrics metrics;
};

struct Evaluation {
  std::size_t rows = 0;                 // rows scored (rows whose target is present)
  std::size_t rows_missing_target = 0;  // rows skipped
  Metrics overall;
  std::string slice_column;          // empty when not sliced
  std::vector<SliceMetrics> slices;  // sorted by value
};

struct EvaluationOptions {
  std::string slice_column;  // empty: no slices
  // Adds the metric "cost" (decision_cost, lower is better) overall and per slice.
  std::optional<CostMatrix> costs;
};

// Scores `table` with `bundle` and compares with the bundle's target column. InvalidArgument if
// the target or slice column is missing, a label was never seen in training, or the costs do
// not fit the model (cost_table).
Result<Evaluation> evaluate(const model::Bundle& bundle, const data::Table& table, const EvaluationOptions& options);
Result<Evaluation> evaluate(const model::Bundle& bundle, const data::Table& table, const std::string& slice_column);

// The metric a quality drop is watched in for a task: auc for binary classification, log_loss for
// multiclass, rmse for regression.
std::string_view watched_metric(model::Task task);
// Every metric evaluate can report, over all tasks ("cost" only with a cost matrix).
const std::vector<std::string>& metric_names();
// True for metrics where larger is better (auc, pr_auc, accuracy, balanced_accuracy, precision,
// recall, f1, macro_f1, r2).
bool higher_is_better(std::string_view metric);
// How much worse `candidate` is than `baseline` in `metric`: positive when worse.
double quality_drop(std::string_view metric, double baseline, double candidate);

// ---------------------------------------------------------------------------------------------
// Golden comparison: two models (a baseline A and a candidate B) scored on the same rows.

struct ComparisonOptions {
  // A row differs when any of its outputs (probabilities, or predicted values) differs by more
  // than this, in absolute terms. 0 asks for identical outputs.
  double tolerance = 1e-6;
  std::string slice_column;     // empty: no slices
  std::size_t worst_rows = 10;  // rows listed, the largest difference first
};

struct OutputDifferences {
  std::size_t rows = 0;
  std::size_t rows_beyond_tolerance = 0;
  std::size_t label_flips = 0;       // classification: the predicted label differs
  double max_abs_difference = 0.0;   // over every output of every row
  double mean_abs_difference = 0.0;  // of each row's largest output difference
};

struct DifferingRow {
  std::size_t row = 0;  // 0-based data row: the file's line is row + 2 (after the header)
  double abs_difference = 0.0;
  std::vector<float> outputs_a, outputs_b;
  std::string label_a, label_b;  // classification only
  std::string slice;             // the slice value, when sliced
};

struct SliceComparison {
  std::string value;  // "(missing)" for missing
  OutputDifferences differences;
  std::size_t labelled_rows = 0;
  double quality_a = 0.0, quality_b = 0.0;  // in Comparison::quality_metric; NaN when undefined
  double quality_drop = 0.0;                // positive: B is worse; NaN when undefined
};

struct Comparison {
  double tolerance = 0.0;
  OutputDifferences overall;
  // Quality, when the table has the target column: every metric of both models, and the drop in
  // the metric a team watches (auc for binary, log_loss for multiclass, rmse for regression).
  bool labelled = false;
  std::size_t rows_missing_target = 0;
  std::string quality_metric;
  Metrics metrics_a, metrics_b;
  double quality_drop = 0.0;  // positive: B is worse
  std::string slice_column;
  std::vector<SliceComparison> slices;  // sorted by value
  // The slice whose quality dropped most (empty when unlabelled or no slice has a defined drop).
  std::string worst_slice;
  double worst_slice_drop = 0.0;
  std::vector<DifferingRow> worst_rows;  // only rows beyond the tolerance

  bool within_tolerance() const { return overall.rows_beyond_tolerance == 0; }
};

// Scores `table` with both bundles and compares their outputs row by row, overall and per slice,
// and their quality when the table holds A's target. InvalidArgument when the two models do not
// answer the same question (task, class labels), a needed column is missing, or the tolerance is
// negative or not finite. A NaN output differs from any number (infinitely) and equals a NaN.
Result<Comparison> compare(const model::Bundle& a, const model::Bundle& b, const data::Table& table,
                           const ComparisonOptions& options);

// ---------------------------------------------------------------------------------------------
// Evaluation gates: a candidate held to thresholds on a metric, against a baseline, overall and
// per slice (MLflow's MetricThreshold semantics: an absolute threshold, an absolute change and a
// relative change, each in the metric's direction).

struct GateCriteria {
  std::string metric;                       // any metric of the task (auc, log_loss, rmse, ...)
  std::optional<double> min;                // the candidate's value must be at least this
  std::optional<double> max;                // ... at most this
  std::optional<double> max_drop;           // worse than the baseline by at most this
  std::optional<double> max_relative_drop;  // ... by at most this share of the baseline's value
};

struct GateCheck {
  std::string scope;  // "overall", or the slice's value
  std::size_t rows = 0;
  double baseline = 0.0, candidate = 0.0;  // NaN when undefined (AUC on one class)
  double drop = 0.0;                       // positive: the candidate is worse
  double relative_drop = 0.0;
  bool passed = true;
  std::string failure;  // which threshold, when not passed; "undefined" checks pass with a note
};

struct GateReport {
  GateCriteria criteria;
  bool higher_is_better = true;
  std::string slice_column;
  std::vector<GateCheck> checks;  // overall first, then the slices by value
  bool passed() const;
};

// Evaluates both bundles on `table` (labelled) and checks the candidate overall and, with a slice
// column, in every slice. InvalidArgument for a metric the task does not have, criteria that
// check nothing or are not finite, or models that do not answer the same question.
Result<GateReport> gate(const model::Bundle& baseline, const model::Bundle& candidate, const data::Table& table,
                        const GateCriteria& criteria, const std::string& slice_column);

// The thresholds as "min=0.8,max_drop=0.01" (those set, in that order), and back: keys min, max,
// max_drop, max_relative_drop with finite numbers; InvalidArgument naming the item otherwise.
std::string format_gate_thresholds(const GateCriteria& criteria);
Status parse_gate_thresholds(std::string_view text, GateCriteria& criteria);
// The report's fields (metric, criteria, passed, each check) into the JSON object `json` has open:
// what `slipway gate --json` prints and what a recorded gate report holds.
void write_gate_report_fields(JsonWriter& json, const GateReport& report);

}  // namespace slipway::eval
