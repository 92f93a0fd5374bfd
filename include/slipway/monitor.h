// slipway/monitor.h — skew and drift: serving or new data compared, input by input and in its
// predictions, with the training distribution a bundle carries (model::DataProfile) or with
// another window; and the request log (serve's sampled requests) read back as a table.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/eval.h"
#include "slipway/model.h"

namespace slipway::monitor {

// When an input counts as drifted. With at most `small_sample` current rows, a test decides
// (Kolmogorov-Smirnov for numeric inputs, with a chi-squared test of their missing share;
// chi-squared for categorical ones; p < p_value), as Evidently does; with more, the distance
// does (Jensen-Shannon divergence for numeric, L-infinity for categorical, above `distance`), as
// Vertex AI does with its default 0.3.
struct DriftThresholds {
  double distance = 0.3;
  double p_value = 0.05;
  std::size_t small_sample = 1000;
  // An input's share of the model's mean |TreeSHAP| attribution moving by more than this.
  double attribution = 0.1;
};
// InvalidArgument, naming the threshold, unless distance, p_value and attribution are numbers in
// [0, 1] (NaN compares false with everything, so it would hide every drift).
Status check_drift_thresholds(const DriftThresholds& thresholds);

struct InputDrift {
  std::string name;
  data::ColumnType type = data::ColumnType::kNumeric;
  double reference_rows = 0;
  double current_rows = 0;
  // Shares per bin (numeric) or level then "other" (categorical), the last entry missing values.
  std::vector<double> reference_share;
  std::vector<double> current_share;
  double distance = 0;  // Jensen-Shannon divergence (numeric) or L-infinity (categorical), in [0, 1]
  double psi = 0;       // population stability index; bands: < 0.1 stable, < 0.25 moderate, else significant
  double p_value = 1;   // Kolmogorov-Smirnov (numeric) or chi-squared (categorical)
  bool decided_by_test = false;
  bool drifted = false;
  // Tree models: the input's share of the mean |TreeSHAP| attribution in training and now (NaN
  // without), and whether it moved past the threshold (attribution drift).
  double attribution_training = std::nan("");
  double attribution_current = std::nan("");
  bool attribution_drifted = false;

  std::string_view distance_name() const;
  std::string_view psi_band() const;
};

struct DriftReport {
  std::vector<InputDrift> inputs;
  InputDrift prediction;
  std::size_t drifted_inputs = 0;
  double drifted_share = 0;  // of the inputs
  std::size_t attribution_drifted_inputs = 0;
};

// Fills each input's attribution shares (the bundle's training ones, `current`'s now) and
// attribution drift; nothing for models whose profile has no attributions.
void add_attribution_drift(const model::Bundle& bundle, const data::Table& current, DriftReport& report,
                           const DriftThresholds& thresholds = {});

// The bins of a profile filled by other data: a baseline other than training.
struct BinnedData {
  std::vector<std::vector<double>> inputs;  // per profile input: counts per bin or level, then missing
  std::vector<double> prediction;           // per prediction bin, then missing
  double rows = 0;
};
// `table`'s inputs and `scores` in `profile`'s bins.
BinnedData bin(const model::DataProfile& profile, const data::Table& table, std::span<const float> scores);
// The training rows themselves, as the profile holds them.
BinnedData training_bins(const model::DataProfile& profile);

// Compares `current` with `reference`, both in `profile`'s bins, input by input and in the
// predictions.
DriftReport compare(const model::DataProfile& profile, const BinnedData& reference, const BinnedData& current,
                    const DriftThresholds& thresholds = {});

// ---------------------------------------------------------------------------------------------
// The request log read back.

struct LoggedRequests {
  data::Table inputs;                 // one row per request row, columns as the requests named them
  std::vector<float> scores;          // the first score of each row's answer (NaN when it had none)
  std::vector<std::int64_t> time_ms;  // per row, its request's time
  std::size_t requests = 0;
  std::size_t unreadable = 0;  // records skipped (failed requests, lines that are not records)
};

// The records of `version` of `model` (its folder under `directory`) from [from_ms, to_ms), only
// those that came through `endpoint` when it is not empty; failed requests are left out. Only
// `inputs` (the model's, in its order) become columns, so what clients name cannot grow the
// table; a request of one [N, inputs] tensor is read in that order, as the server reads it.
// `id_input`, when not empty, is kept as a column too: the id labels are joined by. The id may be
// kRequestIdColumn: the v2 request's "id" ("ID" for a one-row request, "ID/ROW" for row ROW,
// from 0, of a longer one), so labels can be joined to traffic whose inputs carry no id.
inline constexpr std::string_view kRequestIdColumn = "@id";
Result<LoggedRequests> read_request_log(const std::string& directory, const std::string& model,
                                        const std::string& version, const std::string& endpoint,
                                        const std::vector<std::string>& inputs, std::int64_t from_ms,
                                        std::int64_t to_ms, const std::string& id_input = "");

// ---------------------------------------------------------------------------------------------
// The report page.

// Drift distances at one time: the distance per input (profile order) and the prediction's.
struct DriftPoint {
  std::int64_t time_ms = 0;
  std::vector<double> inputs;
  double prediction = 0;
  double rows = 0;
};
// A self-contained HTML page (no script, no external file): per input the reference and current
// distributions as server-rendered SVG bars, the scores table, and with `history` the drift
// distances over time as SVG lines. Readable offline.
std::string html_report(const model::DataProfile& profile, const DriftReport& report, const std::string& title,
                        const std::string& current, const std::string& reference,
                        const std::vector<DriftPoint>& history, const DriftThresholds& thresholds);

// ---------------------------------------------------------------------------------------------
// Performance once labels arrive (`slipway labels ingest`).

struct SlicePerformance {
  std::string value;  // the slice column's value; "(missing)", or "(other)" past kMaxSlices
  std::size_t rows = 0;
  eval::Metrics metrics;
};

struct Performance {
  std::size_t rows = 0;                  // rows with a label the model's task can read
  std::size_t unlabelled = 0;            // rows without one (or with a label of no known class)
  eval::Metrics metrics;                 // the task's metrics over the labelled rows
  std::vector<SlicePerformance> slices;  // with slice values: the largest first
};
// Slices reported at most; the rows of the others are one "(other)" slice, so a column of ids
// cannot make a report of a million lines.
inline constexpr std::size_t kMaxSlices = 50;
// The rows whose id has a label, scored against it: binary classification (the label one of the
// model's two classes; scores are P(positive)) or regression (the label a number); with
// `slice_values` (one per row) also per value. FailedPrecondition for multiclass models: the log
// keeps each row's first score only.
Result<Performance> performance(const model::Bundle& bundle, const std::vector<std::string>& ids,
                                std::span<const float> scores,
                                const std::unordered_map<std::string, std::string>& labels,
                                std::span<const std::string> slice_values = {});

// Two-sample Kolmogorov-Smirnov p-value for statistic `d` between samples of n and m values
// (the asymptotic distribution). Chi-squared's upper tail for `statistic` with `dof` degrees.
double kolmogorov_smirnov_p(double d, double n, double m);
double chi_squared_p(double statistic, double dof);

}  // namespace slipway::monitor
