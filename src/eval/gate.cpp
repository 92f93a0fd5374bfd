// Evaluation gates: thresholds on a metric, against a baseline, overall and per slice.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "slipway/eval.h"

namespace slipway::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

GateCheck check(const GateCriteria& criteria, std::string scope, std::size_t rows, double baseline, double candidate) {
  GateCheck result{std::move(scope), rows, baseline, candidate, kNaN, kNaN, true, ""};
  if (std::isnan(candidate)) {
    // Undefined for both (one class in a slice) says nothing; undefined for the candidate alone
    // (NaN outputs) is a failure.
    result.passed = std::isnan(baseline);
    result.failure = result.passed ? "undefined here for both (too few rows or one class)"
                                   : "undefined for the candidate, " + fmt::format("{:.4f}", baseline) +
                                         " for the baseline (does it output NaN?)";
    return result;
  }
  std::vector<std::string> failures;
  if (std::isnan(baseline) && (criteria.max_drop || criteria.max_relative_drop)) {
    result.failure = "no baseline value here, so only the absolute thresholds apply";
  }
  if (criteria.min && candidate < *criteria.min) {
    failures.push_back(fmt::format("{:.4f} below the minimum {}", candidate, format_config_number(*criteria.min)));
  }
  if (criteria.max && candidate > *criteria.max) {
    failures.push_back(fmt::format("{:.4f} above the maximum {}", candidate, format_config_number(*criteria.max)));
  }
  if (!std::isnan(baseline)) {
    result.drop = quality_drop(criteria.metric, baseline, candidate);
    result.relative_drop = baseline != 0.0 ? result.drop / std::abs(baseline) : kNaN;
    if (criteria.max_drop && result.drop > *criteria.max_drop) {
      failures.push_back(fmt::format("drops {:.4f} from the baseline's {:.4f} (at most {})", result.drop, baseline,
                                     format_config_number(*criteria.max_drop)));
    }
    if (criteria.max_relative_drop && !std::isnan(result.relative_drop) &&
        result.relative_drop > *criteria.max_relative_drop) {
      failures.push_back(fmt::format("drops {:.2f}% from the baseline's {:.4f} (at most {}%)",
                                     100 * result.relative_drop, baseline,
                                     format_config_number(100 * *criteria.max_relative_drop)));
    }
  }
  result.passed = failures.empty();
  if (!result.passed) result.failure.clear();
  for (const auto& failure : failures) result.failure += (result.failure.empty() ? "" : "; ") + failure;
  return result;
}

}  // namespace

bool GateReport::passed() const {
  for (const auto& check : checks) {
    if (!check.passed) return false;
  }
  return true;
}

Result<GateReport> gate(const model::Bundle& baseline, const model::Bundle& candidate, const data::Table& table,
                        const GateCriteria& criteria, const std::string& slice_column) {
  if (!criteria.min && !criteria.max && !criteria.max_drop && !criteria.max_relative_drop) {
    return invalid_argument("a gate needs a threshold: --min, --max, --max-drop or --max-relative-drop");
  }
  for (const std::optional<double>* value :
       {&criteria.min, &criteria.max, &criteria.max_drop, &criteria.max_relative_drop}) {
    if (value->has_value() && !std::isfinite(**value))
      return invalid_argument("gate thresholds must be finite numbers");
  }
  if (baseline.task() != candidate.task() || baseline.manifest().target != candidate.manifest().target) {
    return invalid_argument("the candidate and the baseline do not answer the same question (task or target differ)");
  }
  SLIPWAY_ASSIGN_OR_RETURN(Evaluation before, evaluate(baseline, table, slice_column));
  SLIPWAY_ASSIGN_OR_RETURN(Evaluation after, evaluate(candidate, table, slice_column));
  bool known = false;
  std::string names;
  for (const auto& [name, value] : after.overall.values) {
    known = known || name == criteria.metric;
    names += (names.empty() ? "" : ", ") + name;
  }
  if (!known) {
    return invalid_argument("metric '" + criteria.metric + "' is not one of this model's: " + names);
  }
  GateReport report;
  report.criteria = criteria;
  report.higher_is_better = higher_is_better(criteria.metric);
  report.slice_column = slice_column;
  report.checks.push_back(
      check(criteria, "overall", after.rows, before.overall.get(criteria.metric), after.overall.get(criteria.metric)));
  for (const auto& slice : after.slices) {
    double baseline_value = kNaN;
    for (const auto& baseline_slice : before.slices) {
      if (baseline_slice.value == slice.value) baseline_value = baseline_slice.metrics.get(criteria.metric);
    }
    report.checks.push_back(
        check(criteria, slice.value, slice.rows, baseline_value, slice.metrics.get(criteria.metric)));
  }
  return report;
}

namespace {
constexpr std::array<std::pair<std::string_view, std::optional<double> GateCriteria::*>, 4> kThresholds = {{
    {"min", &GateCriteria::min},
    {"max", &GateCriteria::max},
    {"max_drop", &GateCriteria::max_drop},
    {"max_relative_drop", &GateCriteria::max_relative_drop},
}};
}  // namespace

std::string format_gate_thresholds(const GateCriteria& criteria) {
  std::string text;
  for (const auto& [name, member] : kThresholds) {
    if (const auto& value = criteria.*member) {
      text += (text.empty() ? "" : ",") + std::string(name) + "=" + format_config_number(*value);
    }
  }
  return text;
}

Status parse_gate_thresholds(std::string_view text, GateCriteria& criteria) {
  GateCriteria parsed = criteria;
  for (const auto& item : config_detail::split_list(text)) {
    auto equals = item.find('=');
    std::string key = item.substr(0, std::min(equals, item.size()));
    auto known = std::find_if(kThresholds.begin(), kThresholds.end(),
                              [&key](const auto& threshold) { return threshold.first == key; });
    auto value =
        equals == std::string::npos ? std::nullopt : parse_finite_number(std::string_view(item).substr(equals + 1));
    if (known == kThresholds.end() || !value) {
      return invalid_argument("a gate threshold is min, max, max_drop or max_relative_drop = a finite number, not '" +
                              item + "'");
    }
    parsed.*(known->second) = *value;
  }
  criteria = std::move(parsed);
  return {};
}

void write_gate_report_fields(JsonWriter& json, const GateReport& report) {
  json.key("metric").value(report.criteria.metric).key("criteria").value(format_gate_thresholds(report.criteria));
  json.key("passed").value(report.passed()).key("checks").begin_array();
  for (const auto& check : report.checks) {
    json.begin_object().key("scope").value(check.scope).key("rows").value(static_cast<std::uint64_t>(check.rows));
    json.key("baseline").value(check.baseline).key("candidate").value(check.candidate);
    json.key("drop").value(check.drop).key("relative_drop").value(check.relative_drop);
    json.key("passed").value(check.passed).key("note").value(check.failure).end_object();
  }
  json.end_array();
}

}  // namespace slipway::eval
