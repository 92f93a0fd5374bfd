#include <algorithm>
#include <cmath>
#include <numeric>

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

Metrics binary_metrics(std::span<const float> probabilities, std::span<const double> labels) {
  std::size_t count = probabilities.size();
  double log_loss = 0.0;
  std::size_t true_positives = 0;
  std::size_t false_positives = 0;
  std::size_t false_negatives = 0;
  std::size_t correct = 0;
  for (std::size_t row = 0; row < count; ++row) {
    double probability = std::clamp(static_cast<double>(probabilities[row]), 1e-15, 1.0 - 1e-15);
    bool positive = labels[row] > 0.5;
    log_loss -= positive ? std::log(probability) : std::log(1.0 - probability);
    bool predicted = probabilities[row] >= 0.5f;
    correct += predicted == positive ? 1 : 0;
    true_positives += predicted && positive ? 1 : 0;
    false_positives += predicted && !positive ? 1 : 0;
    false_negatives += !predicted && positive ? 1 : 0;
  }
  auto ratio = [](std::size_t numerator, std::size_t denominator) {
    return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
  };
  double precision = ratio(true_positives, true_positives + false_positives);
  double recall = ratio(true_positives, true_positives + false_negatives);
  double f1 = precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
  double rows = static_cast<double>(std::max<std::size_t>(count, 1));
  Metrics metrics;
  metrics.values = {{"auc", roc_auc(probabilities, labels)},
                    {"log_loss", log_loss / rows},
                    {"accuracy", ratio(correct, count)},
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
  for (std::size_t row = 0; row < count; ++row) {
    auto scores = probabilities.subspan(row * class_count, class_count);
    auto actual = static_cast<std::size_t>(labels[row]);
    auto predicted = static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
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
                    {"accuracy", static_cast<double>(correct) / rows},
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
