// Quality of logged predictions once their labels arrive.
#include <charconv>
#include <cmath>

#include "slipway/monitor.h"

namespace slipway::monitor {

Result<Performance> performance(const model::Bundle& bundle, const std::vector<std::string>& ids,
                                std::span<const float> scores,
                                const std::unordered_map<std::string, std::string>& labels) {
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
  }
  result.rows = targets.size();
  if (result.rows > 0) {
    result.metrics = task == model::Task::kBinaryClassification ? eval::binary_metrics(labelled_scores, targets)
                                                                : eval::regression_metrics(labelled_scores, targets);
  }
  return result;
}

}  // namespace slipway::monitor
