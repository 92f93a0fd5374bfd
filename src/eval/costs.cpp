// Cost-sensitive evaluation: a cost matrix, its text forms, and the cost of a model's decisions
// when each row gets the label of least expected cost.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "slipway/eval.h"

namespace slipway::eval {
namespace {

constexpr std::array<std::string_view, 4> kBinaryKeys = {"tn", "fp", "fn", "tp"};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

Result<double> parse_cost(std::string_view text, std::string_view item) {
  auto cost = parse_finite_number(text);
  if (!cost || *cost < 0) {
    return invalid_argument(fmt::format("cost '{}': '{}' is not a finite number >= 0", item, text));
  }
  return *cost;
}

Result<CostMatrix> parse_binary_shorthand(std::string_view text) {
  CostMatrix costs;
  costs.binary = std::array<double, 4>{};
  std::array<bool, 4> given{};
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    std::size_t equals = item.find('=');
    std::string_view key = trim(item.substr(0, equals));
    auto known = std::find(kBinaryKeys.begin(), kBinaryKeys.end(), key);
    if (equals == std::string_view::npos || known == kBinaryKeys.end()) {
      return invalid_argument(
          fmt::format("cost '{}': expected KEY=COST with KEY one of tn, fp, fn, tp (\"fn=5,fp=1\"), or CSV text "
                      "with the header actual,predicted,cost",
                      item));
    }
    auto index = static_cast<std::size_t>(known - kBinaryKeys.begin());
    if (given[index]) return invalid_argument(fmt::format("cost '{}' is given twice", key));
    given[index] = true;
    SLIPWAY_ASSIGN_OR_RETURN((*costs.binary)[index], parse_cost(trim(item.substr(equals + 1)), item));
  }
  return costs;
}

Result<CostMatrix> parse_cost_csv(std::string_view text) {
  data::CsvOptions options;
  options.text_columns = {"actual", "predicted"};
  options.missing_values = {};
  options.thread_count = 1;
  SLIPWAY_ASSIGN_OR_RETURN(data::Table table, data::parse_csv(text, "the cost matrix", options));
  if (table.column_count() != 3 || !table.column_index("actual").ok() || !table.column_index("predicted").ok() ||
      !table.column_index("cost").ok()) {
    return invalid_argument("the cost matrix's CSV has the header actual,predicted,cost");
  }
  const data::Column& actual = table.column(*table.column_index("actual"));
  const data::Column& predicted = table.column(*table.column_index("predicted"));
  const data::Column& cost = table.column(*table.column_index("cost"));
  CostMatrix costs;
  costs.entries.reserve(table.row_count());
  std::set<std::pair<std::string, std::string>> seen;
  for (std::size_t row = 0; row < table.row_count(); ++row) {
    CostMatrix::Entry entry{actual.text_at(row), predicted.text_at(row), 0.0};
    std::string item = entry.actual + " -> " + entry.predicted;
    SLIPWAY_ASSIGN_OR_RETURN(entry.cost, parse_cost(cost.text_at(row), item));
    if (!seen.emplace(entry.actual, entry.predicted).second) {
      return invalid_argument("cost '" + item + "' is given twice");
    }
    costs.entries.push_back(std::move(entry));
  }
  return costs;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos && !text.empty()) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

Result<CostMatrix> parse_cost_matrix(std::string_view text) {
  std::string_view trimmed = trim(text);
  if (trimmed.starts_with("\xEF\xBB\xBF")) trimmed.remove_prefix(3);  // a UTF-8 byte order mark
  CostMatrix costs;
  // CSV when the first line has more than one field and no "=" (the shorthand's KEY=COST).
  std::string_view first_line = trimmed.substr(0, trimmed.find('\n'));
  if (first_line.find(',') != std::string_view::npos && first_line.find('=') == std::string_view::npos) {
    SLIPWAY_ASSIGN_OR_RETURN(costs, parse_cost_csv(trimmed));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(costs, parse_binary_shorthand(trimmed));
  }
  bool any_cost = costs.binary ? std::any_of(costs.binary->begin(), costs.binary->end(), [](double c) { return c > 0; })
                               : std::any_of(costs.entries.begin(), costs.entries.end(),
                                             [](const CostMatrix::Entry& entry) { return entry.cost > 0; });
  if (!any_cost) return invalid_argument("the cost matrix has no cost above zero: every decision would cost nothing");
  return costs;
}

Result<CostMatrix> load_cost_matrix(const std::string& file_or_text) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(file_or_text, error)) {
    if (file_or_text.find('=') == std::string::npos &&
        (file_or_text.find('/') != std::string::npos || file_or_text.ends_with(".csv"))) {
      return not_found("no cost matrix file '" + file_or_text + "'");
    }
    return parse_cost_matrix(file_or_text);
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::string text, read_file(file_or_text));
  auto costs = parse_cost_matrix(text);
  if (!costs.ok()) return invalid_argument(file_or_text + ": " + costs.status().message());
  return costs;
}

std::string cost_matrix_text(const CostMatrix& costs) {
  if (costs.binary) {
    std::string text;
    for (std::size_t i = 0; i < kBinaryKeys.size(); ++i) {
      text += fmt::format("{}{}={}", i == 0 ? "" : ",", kBinaryKeys[i], format_config_number((*costs.binary)[i]));
    }
    return text;
  }
  std::string text = "actual,predicted,cost\n";
  for (const auto& entry : costs.entries) {
    text += csv_field(entry.actual) + "," + csv_field(entry.predicted) + "," + format_config_number(entry.cost) + "\n";
  }
  return text;
}

Result<std::vector<std::vector<double>>> cost_table(const CostMatrix& costs,
                                                    const std::vector<std::string>& class_labels) {
  const std::size_t classes = class_labels.size();
  std::vector<std::vector<double>> table(classes, std::vector<double>(classes, 0.0));
  if (costs.binary) {
    if (classes != 2) {
      return invalid_argument("the costs tn, fp, fn, tp are for a binary classifier; this model has " +
                              std::to_string(classes) + " labels: give a CSV cost matrix");
    }
    const auto& [tn, fp, fn, tp] = *costs.binary;
    table = {{tn, fp}, {fn, tp}};
    return table;
  }
  if (classes == 0) return invalid_argument("a cost matrix is for a classifier; this model is a regression");
  auto index_of = [&](const std::string& label) -> Result<std::size_t> {
    auto found = std::find(class_labels.begin(), class_labels.end(), label);
    if (found == class_labels.end()) {
      std::string message = "the cost matrix names the label '" + label + "', which the model does not have";
      if (auto suggestion = closest_name(label, class_labels)) message += "; did you mean '" + *suggestion + "'?";
      return invalid_argument(message);
    }
    return static_cast<std::size_t>(found - class_labels.begin());
  };
  for (const auto& entry : costs.entries) {
    SLIPWAY_ASSIGN_OR_RETURN(std::size_t actual, index_of(entry.actual));
    SLIPWAY_ASSIGN_OR_RETURN(std::size_t predicted, index_of(entry.predicted));
    table[actual][predicted] = entry.cost;
  }
  return table;
}

double decision_cost(std::span<const float> probabilities, std::size_t columns, std::span<const double> labels,
                     const std::vector<std::vector<double>>& cost) {
  const std::size_t classes = cost.size();
  if (labels.empty() || classes == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> probability(classes);
  double total = 0.0;
  for (std::size_t row = 0; row < labels.size(); ++row) {
    if (columns == 1 && classes == 2) {
      probability[1] = probabilities[row];
      probability[0] = 1.0 - probability[1];
    } else {
      for (std::size_t k = 0; k < classes; ++k) probability[k] = probabilities[row * columns + k];
    }
    if (std::any_of(probability.begin(), probability.end(), [](double p) { return std::isnan(p); })) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    // The label of least expected cost; ties to the earlier label.
    std::size_t decision = 0;
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t predicted = 0; predicted < classes; ++predicted) {
      double expected = 0.0;
      for (std::size_t actual = 0; actual < classes; ++actual)
        expected += probability[actual] * cost[actual][predicted];
      if (expected < least) {
        least = expected;
        decision = predicted;
      }
    }
    total += cost[static_cast<std::size_t>(labels[row])][decision];
  }
  return total / static_cast<double>(labels.size());
}

}  // namespace slipway::eval
