// Drift statistics over binned distributions: Jensen-Shannon, L-infinity, PSI, KS, chi-squared.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "slipway/monitor.h"

namespace slipway::monitor {
namespace {

std::vector<double> shares(const std::vector<double>& counts) {
  double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  std::vector<double> result(counts.size(), 0.0);
  if (total <= 0) return result;
  for (std::size_t index = 0; index < counts.size(); ++index) result[index] = counts[index] / total;
  return result;
}

// The divergence itself (base 2, in [0, 1]), not its square root: Vertex AI's default threshold
// of 0.3 is on the divergence.
double jensen_shannon_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double divergence = 0;
  for (std::size_t index = 0; index < p.size(); ++index) {
    double mean = (p[index] + q[index]) / 2;
    if (p[index] > 0) divergence += 0.5 * p[index] * std::log2(p[index] / mean);
    if (q[index] > 0) divergence += 0.5 * q[index] * std::log2(q[index] / mean);
  }
  return std::clamp(divergence, 0.0, 1.0);
}

// Chi-squared test of a 2 x k table: do two samples spread over k slots alike?
double two_sample_chi_squared_p(const std::vector<double>& first, const std::vector<double>& second) {
  double first_rows = std::accumulate(first.begin(), first.end(), 0.0);
  double second_rows = std::accumulate(second.begin(), second.end(), 0.0);
  double total = first_rows + second_rows, statistic = 0, slots = 0;
  if (first_rows <= 0 || second_rows <= 0) return 1.0;
  for (std::size_t index = 0; index < first.size(); ++index) {
    double column = first[index] + second[index];
    if (column <= 0) continue;
    ++slots;
    for (auto [observed, rows] : {std::pair{first[index], first_rows}, std::pair{second[index], second_rows}}) {
      double expected = rows * column / total;
      statistic += (observed - expected) * (observed - expected) / expected;
    }
  }
  return slots > 1 ? chi_squared_p(statistic, slots - 1) : 1.0;
}

double l_infinity(const std::vector<double>& p, const std::vector<double>& q) {
  double largest = 0;
  for (std::size_t index = 0; index < p.size(); ++index) largest = std::max(largest, std::abs(p[index] - q[index]));
  return largest;
}

// Empty bins get a small share so a bin seen on one side only counts, but does not make PSI infinite.
double population_stability(const std::vector<double>& p, const std::vector<double>& q) {
  constexpr double kFloor = 1e-4;
  double psi = 0;
  for (std::size_t index = 0; index < p.size(); ++index) {
    double expected = std::max(p[index], kFloor), actual = std::max(q[index], kFloor);
    psi += (actual - expected) * std::log(actual / expected);
  }
  return psi;
}

// Regularized upper incomplete gamma Q(a, x), by series or continued fraction (Numerical Recipes).
double upper_gamma(double a, double x) {
  if (x <= 0) return 1.0;
  double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 500; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-15) break;
    }
    return std::clamp(1.0 - sum * std::exp(log_front), 0.0, 1.0);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int n = 1; n < 500; ++n) {
    double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::clamp(std::exp(log_front) * h, 0.0, 1.0);
}

InputDrift drift_of(const model::FeatureProfile& feature, const std::vector<double>& reference_counts,
                    const std::vector<double>& current_counts, const DriftThresholds& thresholds) {
  InputDrift drift;
  drift.name = feature.name;
  drift.type = feature.type;
  drift.reference_rows = std::accumulate(reference_counts.begin(), reference_counts.end(), 0.0);
  drift.current_rows = std::accumulate(current_counts.begin(), current_counts.end(), 0.0);
  drift.reference_share = shares(reference_counts);
  drift.current_share = shares(current_counts);
  if (drift.reference_rows <= 0 || drift.current_rows <= 0) return drift;
  const auto& p = drift.reference_share;
  const auto& q = drift.current_share;
  bool numeric = feature.type == data::ColumnType::kNumeric;
  drift.distance = numeric ? jensen_shannon_divergence(p, q) : l_infinity(p, q);
  drift.psi = population_stability(p, q);
  if (numeric) {
    // Over the bin boundaries of the binned CDFs (missing values left out): a floor of the exact
    // statistic, exact when the values are the bin edges.
    double reference_present = drift.reference_rows * (1 - p.back());
    double current_present = drift.current_rows * (1 - q.back());
    double cdf_p = 0, cdf_q = 0, statistic = 0;
    for (std::size_t index = 0; index + 1 < p.size(); ++index) {
      cdf_p += reference_counts[index] / std::max(reference_present, 1.0);
      cdf_q += current_counts[index] / std::max(current_present, 1.0);
      statistic = std::max(statistic, std::abs(cdf_p - cdf_q));
    }
    // KS sees only the values present; a change in how many are missing is tested apart, and
    // either test can flag the input.
    double reference_missing = reference_counts.back(), current_missing = current_counts.back();
    double missing_p =
        two_sample_chi_squared_p({reference_missing, reference_present}, {current_missing, current_present});
    drift.p_value = std::min(kolmogorov_smirnov_p(statistic, reference_present, current_present), missing_p);
  } else {
    drift.p_value = two_sample_chi_squared_p(reference_counts, current_counts);
  }
  drift.decided_by_test = drift.current_rows <= static_cast<double>(thresholds.small_sample);
  drift.drifted = drift.decided_by_test ? drift.p_value < thresholds.p_value : drift.distance > thresholds.distance;
  return drift;
}

std::vector<double> with_missing(std::vector<double> counts, double missing) {
  counts.push_back(missing);
  return counts;
}

}  // namespace

std::string_view InputDrift::distance_name() const {
  return type == data::ColumnType::kNumeric ? "jensen_shannon" : "l_infinity";
}

std::string_view InputDrift::psi_band() const { return psi < 0.1 ? "stable" : psi < 0.25 ? "moderate" : "significant"; }

double kolmogorov_smirnov_p(double d, double n, double m) {
  if (n <= 0 || m <= 0 || d <= 0) return 1.0;
  double effective = n * m / (n + m);
  double lambda = (std::sqrt(effective) + 0.12 + 0.11 / std::sqrt(effective)) * d;
  // Below 0.2 the series has not converged in any number of terms worth summing, and its value
  // is 1 to ten digits (Numerical Recipes' probks).
  if (lambda < 0.2) return 1.0;
  double sum = 0;
  for (int k = 1; k <= 100; ++k) {
    double term = 2 * ((k % 2 == 1) ? 1 : -1) * std::exp(-2.0 * k * k * lambda * lambda);
    sum += term;
    // (A term that underflows to 0 ends it too: far in the tail, p is 0 to double precision.)
    if (std::abs(term) <= 1e-12 * std::abs(sum)) return std::clamp(sum, 0.0, 1.0);
  }
  return 1.0;
}

double chi_squared_p(double statistic, double dof) {
  if (dof <= 0) return 1.0;
  return upper_gamma(dof / 2, statistic / 2);
}

BinnedData bin(const model::DataProfile& profile, const data::Table& table, std::span<const float> scores) {
  BinnedData binned;
  binned.rows = static_cast<double>(table.row_count());
  for (const auto& feature : profile.inputs) {
    const data::Column* column = table.find(feature.name);
    if (column == nullptr) {
      // An input the data never gives: every row missing.
      std::size_t slots =
          feature.type == data::ColumnType::kNumeric ? feature.counts.size() : feature.levels.size() + 1;
      binned.inputs.push_back(with_missing(std::vector<double>(slots, 0.0), binned.rows));
      continue;
    }
    double missing = 0;
    auto counts = feature.histogram(*column, &missing);
    binned.inputs.push_back(with_missing(std::move(counts), missing));
  }
  double missing_scores = 0;
  for (float score : scores) missing_scores += std::isfinite(score) ? 0 : 1;
  binned.prediction = with_missing(profile.prediction.histogram(scores), missing_scores);
  return binned;
}

BinnedData training_bins(const model::DataProfile& profile) {
  BinnedData binned;
  for (const auto& feature : profile.inputs) binned.inputs.push_back(with_missing(feature.counts, feature.missing));
  binned.prediction = with_missing(profile.prediction.counts, profile.prediction.missing);
  if (!binned.inputs.empty()) {
    binned.rows = std::accumulate(binned.inputs.front().begin(), binned.inputs.front().end(), 0.0);
  }
  return binned;
}

Status check_drift_thresholds(const DriftThresholds& thresholds) {
  for (auto [name, value] : {std::pair<const char*, double>{"the drift distance", thresholds.distance},
                             {"the drift p-value", thresholds.p_value},
                             {"the attribution drift threshold", thresholds.attribution}}) {
    if (!(value >= 0.0 && value <= 1.0)) {
      return invalid_argument(std::string(name) + " must be a number from 0 to 1, not " + format_config_number(value));
    }
  }
  return {};
}

DriftReport compare(const model::DataProfile& profile, const BinnedData& reference, const BinnedData& current,
                    const DriftThresholds& thresholds) {
  DriftReport report;
  for (std::size_t index = 0; index < profile.inputs.size(); ++index) {
    report.inputs.push_back(
        drift_of(profile.inputs[index], reference.inputs[index], current.inputs[index], thresholds));
    report.drifted_inputs += report.inputs.back().drifted ? 1 : 0;
  }
  report.drifted_share = report.inputs.empty()
                             ? 0
                             : static_cast<double>(report.drifted_inputs) / static_cast<double>(report.inputs.size());
  report.prediction = drift_of(profile.prediction, reference.prediction, current.prediction, thresholds);
  return report;
}

void add_attribution_drift(const model::Bundle& bundle, const data::Table& current, DriftReport& report,
                           const DriftThresholds& thresholds) {
  const std::vector<double>& training = bundle.manifest().profile.attribution_shares;
  if (training.size() != report.inputs.size()) return;
  std::vector<double> now = model::attribution_shares(bundle, current);
  if (now.size() != training.size()) return;
  for (std::size_t index = 0; index < training.size(); ++index) {
    InputDrift& input = report.inputs[index];
    input.attribution_training = training[index];
    input.attribution_current = now[index];
    input.attribution_drifted = std::abs(now[index] - training[index]) > thresholds.attribution;
    report.attribution_drifted_inputs += input.attribution_drifted ? 1 : 0;
  }
}

}  // namespace slipway::monitor
