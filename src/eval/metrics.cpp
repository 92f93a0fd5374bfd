#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <numeric>
#include <optional>

#include "slipway/eval.h"

namespace slipway::eval {

double Metrics::get(std::string_view name) const {
  for (const auto& [key, value] : values) {
    if (key == name) return value;
  }
  return std::nan("");
}

double roc_auc(std::span<const float> scores, std::span<const double> labels) {
  std::size_t count = scores.size();
  // A NaN score has no rank: the AUC is undefined. (NaN also breaks the strict weak ordering the
  // sort needs and never equals itself, which once made the tie loop below spin forever.)
  if (std::any_of(scores.begin(), scores.end(), [](float score) { return std::isnan(score); })) {
    return std::nan("");
  }
  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0U);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0.0;
  std::size_t positives = 0;
  for (std::size_t begin = 0; begin < count;) {
    std::size_t end = begin;
    while (end < count && scores[order[end]] == scores[order[begin]]) ++end;
    double average_rank = 0.5 * static_cast<double>(begin + 1 + end);  // ranks begin+1 .. end
    for (std::size_t index = begin; index < end; ++index) {
      if (labels[order[index]] > 0.5) {
        positive_rank_sum += average_rank;
        ++positives;
      }
    }
    begin = end;
  }
  std::size_t negatives = count - positives;
  if (positives == 0 || negatives == 0) return std::nan("");
  double positives_d = static_cast<double>(positives);
  return (positive_rank_sum - positives_d * (positives_d + 1.0) / 2.0) / (positives_d * static_cast<double>(negatives));
}

namespace {

// At each distinct score, highest first: the positives and negatives scored at or above it.
struct ThresholdPoint {
  float score = 0.0f;
  std::size_t true_positives = 0;
  std::size_t false_positives = 0;
};
std::vector<ThresholdPoint> threshold_points(std::span<const float> scores, std::span<const double> labels) {
  std::vector<std::uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0U);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return scores[a] > scores[b]; });
  std::vector<ThresholdPoint> points;
  ThresholdPoint point;
  for (std::size_t index = 0; index < order.size();) {
    point.score = scores[order[index]];
    // Tied scores enter together: one threshold cannot separate them.
    for (; index < order.size() && scores[order[index]] == point.score; ++index) {
      if (labels[order[index]] > 0.5) {
        ++point.true_positives;
      } else {
        ++point.false_positives;
      }
    }
    points.push_back(point);
  }
  return points;
}

bool any_nan(std::span<const float> scores) {
  return std::any_of(scores.begin(), scores.end(), [](float score) { return std::isnan(score); });
}

double ratio(std::size_t numerator, std::size_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

}  // namespace

double average_precision(std::span<const float> scores, std::span<const double> labels) {
  if (any_nan(scores)) return std::nan("");
  auto points = threshold_points(scores, labels);
  std::size_t positives = points.empty() ? 0 : points.back().true_positives;
  if (positives == 0) return std::nan("");
  double area = 0.0;
  double previous_recall = 0.0;
  for (const auto& point : points) {
    double recall = ratio(point.true_positives, positives);
    area += (recall - previous_recall) * ratio(point.true_positives, point.true_positives + point.false_positives);
    previous_recall = recall;
  }
  return area;
}

namespace {

// `text` read whole as a number ("0.9", ".5", "nan", "inf"); nullopt when any of it is not.
std::optional<double> whole_number(std::string_view text) {
  double value = std::nan("");
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

bool threshold_is_number(std::string_view rule) {
  return !rule.empty() && (std::isdigit(static_cast<unsigned char>(rule[0])) != 0 || rule[0] == '.');
}

Status check_threshold_rule(std::string_view rule) {
  auto bound = [&](std::string_view prefix, bool open_at_zero) -> Status {
    double value = whole_number(rule.substr(prefix.size())).value_or(std::nan(""));
    bool in_range = open_at_zero ? value > 0.0 && value <= 1.0 : value >= 0.0 && value <= 1.0;
    if (in_range) return {};
    if (prefix.empty())
      return invalid_argument("a decision threshold must be in [0, 1], not '" + std::string(rule) + "'");
    return invalid_argument("the decision threshold rule '" + std::string(rule) + "' needs a number " +
                            (open_at_zero ? "in (0, 1]" : "in [0, 1]") + " after '" + std::string(prefix) + "'");
  };
  if (rule == "f1") return {};
  if (rule.starts_with("precision>=")) return bound("precision>=", true);
  if (rule.starts_with("recall>=")) return bound("recall>=", true);
  if (rule.starts_with("cost=")) {
    double cost = whole_number(rule.substr(5)).value_or(std::nan(""));
    if (cost > 0.0 && std::isfinite(cost)) return {};
    return invalid_argument("'" + std::string(rule) +
                            "': cost=C needs a positive, finite C (a missed positive costs C false alarms)");
  }
  if (threshold_is_number(rule)) return bound("", false);
  return invalid_argument("unknown decision threshold rule '" + std::string(rule) +
                          "'; use f1, precision>=P, recall>=R, cost=C or a number in [0, 1]");
}

Result<ThresholdChoice> choose_threshold(std::span<const float> probabilities, std::span<const double> labels,
                                         std::string_view rule) {
  SLIPWAY_RETURN_IF_ERROR(check_threshold_rule(rule));
  ThresholdChoice choice;
  choice.rule = std::string(rule);
  choice.rows = probabilities.size();
  if (any_nan(probabilities)) return invalid_argument("a held-out score is NaN: no threshold can be chosen");
  auto points = threshold_points(probabilities, labels);
  std::size_t positives = points.empty() ? 0 : points.back().true_positives;
  std::size_t negatives = points.empty() ? 0 : points.back().false_positives;
  auto rates_at = [&](const ThresholdPoint& point) {
    choice.precision = ratio(point.true_positives, point.true_positives + point.false_positives);
    choice.recall = ratio(point.true_positives, positives);
  };
  if (threshold_is_number(rule)) {
    choice.threshold = *whole_number(rule);
    choice.rule.clear();  // a number given, not a rule applied
    // The lowest score at or above it: where the rows stand at this threshold.
    auto at = std::find_if(points.rbegin(), points.rend(),
                           [&](const ThresholdPoint& point) { return point.score >= choice.threshold; });
    if (at != points.rend()) rates_at(*at);
    return choice;
  }
  if (positives == 0 || negatives == 0) {
    return invalid_argument("the " + std::to_string(choice.rows) +
                            " held-out rows hold one class only: no threshold can be chosen by '" + std::string(rule) +
                            "'");
  }
  const ThresholdPoint* best = nullptr;
  double best_value = 0.0;
  // Points run from the highest threshold down; a strict improvement keeps the highest on a tie.
  auto consider = [&](const ThresholdPoint& point, double value) {
    if (best == nullptr || value > best_value) {
      best = &point;
      best_value = value;
    }
  };
  // The P, R or C after '=' (check_threshold_rule vouched for it).
  auto equals = rule.rfind('=');
  double bound = equals == std::string_view::npos ? 0.0 : whole_number(rule.substr(equals + 1)).value_or(0.0);
  for (const auto& point : points) {
    std::size_t false_negatives = positives - point.true_positives;
    double precision = ratio(point.true_positives, point.true_positives + point.false_positives);
    double recall = ratio(point.true_positives, positives);
    if (rule == "f1") {
      consider(point,
               ratio(2 * point.true_positives, 2 * point.true_positives + point.false_positives + false_negatives));
    } else if (rule.starts_with("precision>=")) {
      if (precision >= bound) consider(point, recall);
    } else if (rule.starts_with("recall>=")) {
      if (recall >= bound) consider(point, precision);
    } else {  // cost=C
      consider(point, -(static_cast<double>(point.false_positives) + bound * static_cast<double>(false_negatives)));
    }
  }
  if (best == nullptr) {
    return invalid_argument("no threshold meets '" + std::string(rule) + "' on the " + std::to_string(choice.rows) +
                            " held-out rows (" + std::to_string(positives) + " positive)");
  }
  choice.threshold = best->score;
  rates_at(*best);
  return choice;
}

namespace {

constexpr int kCalibrationBins = 10;

// Expected calibration error: rows binned by their confidence (ten equal-width bins of [0, 1]),
// each bin's share of the rows times the gap between its mean confidence and how often it was
// right. NaN without rows or with a NaN confidence.
class CalibrationBins {
 public:
  void add(double confidence, bool right) {
    if (std::isnan(confidence)) {
      undefined_ = true;
      return;
    }
    auto bin =
        static_cast<std::size_t>(std::clamp(static_cast<int>(confidence * kCalibrationBins), 0, kCalibrationBins - 1));
    confidence_[bin] += std::clamp(confidence, 0.0, 1.0);
    right_[bin] += right ? 1.0 : 0.0;
    ++rows_[bin];
  }

  double expected_error() const {
    double total_rows = 0.0;
    double error = 0.0;
    for (std::size_t bin = 0; bin < rows_.size(); ++bin) {
      total_rows += static_cast<double>(rows_[bin]);
      error += std::abs(confidence_[bin] - right_[bin]);  // rows x |mean confidence - accuracy|
    }
    if (undefined_ || total_rows == 0.0) return std::nan("");
    return error / total_rows;
  }

 private:
  std::array<double, kCalibrationBins> confidence_{};
  std::array<double, kCalibrationBins> right_{};
  std::array<std::size_t, kCalibrationBins> rows_{};
  bool undefined_ = false;
};

// The mean recall of the classes that have rows.
double mean_recall(const std::vector<std::size_t>& true_positives, const std::vector<std::size_t>& actual_count) {
  double total = 0.0;
  std::size_t present = 0;
  for (std::size_t label = 0; label < actual_count.size(); ++label) {
    if (actual_count[label] == 0) continue;
    total += static_cast<double>(true_positives[label]) / static_cast<double>(actual_count[label]);
    ++present;
  }
  return present == 0 ? std::nan("") : total / static_cast<double>(present);
}

}  // namespace

Metrics binary_metrics(std::span<const float> probabilities, std::span<const double> labels, double threshold) {
  std::size_t count = probabilities.size();
  double log_loss = 0.0;
  std::size_t true_positives = 0;
  std::size_t false_positives = 0;
  std::size_t false_negatives = 0;
  std::size_t correct = 0;
  std::size_t true_negatives = 0;
  double squared_error = 0.0;
  CalibrationBins calibration;
  for (std::size_t row = 0; row < count; ++row) {
    double probability = std::clamp(static_cast<double>(probabilities[row]), 1e-15, 1.0 - 1e-15);
    bool positive = labels[row] > 0.5;
    log_loss -= positive ? std::log(probability) : std::log(1.0 - probability);
    double miss = static_cast<double>(probabilities[row]) - (positive ? 1.0 : 0.0);
    squared_error += miss * miss;
    calibration.add(probabilities[row], positive);
    bool predicted = probabilities[row] >= threshold;
    true_negatives += !predicted && !positive ? 1 : 0;
    correct += predicted == positive ? 1 : 0;
    true_positives += predicted && positive ? 1 : 0;
    false_positives += predicted && !positive ? 1 : 0;
    false_negatives += !predicted && positive ? 1 : 0;
  }
  double precision = ratio(true_positives, true_positives + false_positives);
  double recall = ratio(true_positives, true_positives + false_negatives);
  double f1 = precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
  double rows = static_cast<double>(std::max<std::size_t>(count, 1));
  const std::size_t positives = true_positives + false_negatives;
  Metrics metrics;
  metrics.values = {
      {"auc", roc_auc(probabilities, labels)},
      {"pr_auc", average_precision(probabilities, labels)},
      {"log_loss", log_loss / rows},
      {"brier", squared_error / rows},
      {"ece", calibration.expected_error()},
      {"accuracy", ratio(correct, count)},
      {"balanced_accuracy", mean_recall({true_negatives, true_positives}, {count - positives, positives})},
      {"precision", precision},
      {"recall", recall},
      {"f1", f1}};
  return metrics;
}

Metrics multiclass_metrics(std::span<const float> probabilities, std::size_t class_count,
                           std::span<const double> labels) {
  std::size_t count = labels.size();
  double log_loss = 0.0;
  std::size_t correct = 0;
  std::vector<std::size_t> true_positives(class_count, 0);
  std::vector<std::size_t> predicted_count(class_count, 0);
  std::vector<std::size_t> actual_count(class_count, 0);
  CalibrationBins calibration;
  for (std::size_t row = 0; row < count; ++row) {
    auto scores = probabilities.subspan(row * class_count, class_count);
    auto actual = static_cast<std::size_t>(labels[row]);
    auto predicted = static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    calibration.add(scores[predicted], predicted == actual);
    log_loss -= std::log(std::clamp(static_cast<double>(scores[actual]), 1e-15, 1.0));
    correct += predicted == actual ? 1 : 0;
    true_positives[actual] += predicted == actual ? 1 : 0;
    ++predicted_count[predicted];
    ++actual_count[actual];
  }
  double f1_total = 0.0;
  for (std::size_t label = 0; label < class_count; ++label) {
    std::size_t denominator = predicted_count[label] + actual_count[label];
    f1_total +=
        denominator == 0 ? 0.0 : 2.0 * static_cast<double>(true_positives[label]) / static_cast<double>(denominator);
  }
  double rows = static_cast<double>(std::max<std::size_t>(count, 1));
  Metrics metrics;
  metrics.values = {{"log_loss", log_loss / rows},
                    {"ece", calibration.expected_error()},
                    {"accuracy", static_cast<double>(correct) / rows},
                    {"balanced_accuracy", mean_recall(true_positives, actual_count)},
                    {"macro_f1", f1_total / static_cast<double>(std::max<std::size_t>(class_count, 1))}};
  return metrics;
}

Metrics regression_metrics(std::span<const float> predictions, std::span<const double> targets) {
  std::size_t count = predictions.size();
  double squared = 0.0;
  double absolute = 0.0;
  double mean = 0.0;
  for (double target : targets) mean += target;
  mean /= static_cast<double>(std::max<std::size_t>(count, 1));
  double total = 0.0;
  for (std::size_t row = 0; row < count; ++row) {
    double error = predictions[row] - targets[row];
    squared += error * error;
    absolute += std::abs(error);
    total += (targets[row] - mean) * (targets[row] - mean);
  }
  double rows = static_cast<double>(std::max<std::size_t>(count, 1));
  Metrics metrics;
  metrics.values = {{"rmse", std::sqrt(squared / rows)},
                    {"mae", absolute / rows},
                    {"r2", total > 0 ? 1.0 - squared / total : std::nan("")}};
  return metrics;
}

}  // namespace slipway::eval
