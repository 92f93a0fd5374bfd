// Quality of logged predictions once their labels arrive.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "slipway/monitor.h"

namespace slipway::monitor {

Result<Performance> performance(const model::Bundle& bundle, const std::vector<std::string>& ids,
                                std::span<const float> scores,
                                const std::unordered_map<std::string, std::string>& labels,
                                std::span<const std::string> slice_values) {
  model::Task task = bundle.task();
  if (task == model::Task::kMulticlassClassification) {
    return failed_precondition(
        "performance of a multiclass model needs every class's probability per row; the "
        "request log is read for the first only");
  }
  const std::vector<std::string>& classes = bundle.manifest().class_labels;
  Performance result;
  std::vector<float> labelled_scores;
  std::vector<double> targets;
  std::vector<std::size_t> labelled_rows;
  for (std::size_t row = 0; row < ids.size() && row < scores.size(); ++row) {
    auto found = labels.find(ids[row]);
    double target = 0;
    bool usable = found != labels.end() && std::isfinite(scores[row]);
    if (usable && task == model::Task::kBinaryClassification) {
      usable = classes.size() == 2 && (found->second == classes[0] || found->second == classes[1]);
      target = usable && found->second == classes[1] ? 1.0 : 0.0;
    } else if (usable) {
      const std::string& text = found->second;
      auto parsed = std::from_chars(text.data(), text.data() + text.size(), target);
      usable = parsed.ec == std::errc() && parsed.ptr == text.data() + text.size() && std::isfinite(target);
    }
    if (!usable) {
      ++result.unlabelled;
      continue;
    }
    labelled_scores.push_back(scores[row]);
    targets.push_back(target);
    labelled_rows.push_back(row);
  }
  auto metrics_of = [task, threshold = bundle.manifest().decision_threshold](std::span<const float> of_scores,
                                                                             std::span<const double> of_targets) {
    return task == model::Task::kBinaryClassification ? eval::binary_metrics(of_scores, of_targets, threshold)
                                                      : eval::regression_metrics(of_scores, of_targets);
  };
  result.rows = targets.size();
  if (result.rows > 0) result.metrics = metrics_of(labelled_scores, targets);
  if (slice_values.empty() || result.rows == 0) return result;

  // The labelled rows by slice value, the largest slices first; past kMaxSlices, one "(other)".
  std::map<std::string, std::vector<std::size_t>> by_value;
  for (std::size_t index = 0; index < labelled_rows.size(); ++index) {
    std::size_t row = labelled_rows[index];
    by_value[row < slice_values.size() ? slice_values[row] : "(missing)"].push_back(index);
  }
  std::vector<std::pair<std::string, std::vector<std::size_t>>> slices(by_value.begin(), by_value.end());
  std::stable_sort(slices.begin(), slices.end(),
                   [](const auto& left, const auto& right) { return left.second.size() > right.second.size(); });
  if (slices.size() > kMaxSlices) {
    std::vector<std::size_t> other;
    for (std::size_t index = kMaxSlices - 1; index < slices.size(); ++index) {
      other.insert(other.end(), slices[index].second.begin(), slices[index].second.end());
    }
    slices.resize(kMaxSlices - 1);
    slices.emplace_back("(other)", std::move(other));
  }
  for (const auto& [value, members] : slices) {
    std::vector<float> slice_scores;
    std::vector<double> slice_targets;
    for (std::size_t index : members) {
      slice_scores.push_back(labelled_scores[index]);
      slice_targets.push_back(targets[index]);
    }
    result.slices.push_back({value, members.size(), metrics_of(slice_scores, slice_targets)});
  }
  return result;
}

}  // namespace slipway::monitor
