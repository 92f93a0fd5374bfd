// Training-data profiles: quantile bins for numeric inputs, the most frequent levels for
// categorical ones, and the predictions' bins; the reference `slipway monitor` compares with.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "slipway/model.h"

namespace slipway::model {
namespace {

// Edges at the quantiles of the finite values, duplicates merged (a column of few distinct
// values gets fewer bins), widened to cover every value.
std::vector<double> quantile_edges(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  std::vector<double> edges;
  if (values.empty()) return edges;
  for (std::size_t cut = 0; cut <= kProfileBins; ++cut) {
    std::size_t index = std::min(values.size() - 1, cut * (values.size() - 1) / kProfileBins);
    double edge = values[index];
    if (edges.empty() || edge > edges.back()) edges.push_back(edge);
  }
  if (edges.size() == 1) edges.push_back(edges.front());  // one value: one bin [v, v]
  return edges;
}

// Slot 0 holds values below the first edge, slot i the bin [edges[i-1], edges[i]) (the last bin
// also its upper edge), and slot edges.size() values above the last edge: values outside the
// training range count apart, the plainest sign of drift.
std::size_t bin_of(const std::vector<double>& edges, double value) {
  if (value < edges.front()) return 0;
  if (value > edges.back()) return edges.size();
  auto upper = static_cast<std::size_t>(std::upper_bound(edges.begin(), edges.end(), value) - edges.begin());
  return std::min(upper, edges.size() - 1);
}

bool number_of(std::string_view text, double& number) {
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
  return parsed.ec == std::errc() && parsed.ptr == text.data() + text.size() && std::isfinite(number);
}

}  // namespace

FeatureProfile profile_of_numbers(std::string name, std::span<const float> values) {
  FeatureProfile profile;
  profile.name = std::move(name);
  std::vector<float> finite;
  finite.reserve(values.size());
  for (float value : values) {
    if (std::isfinite(value)) {
      finite.push_back(value);
    } else {
      profile.missing += 1;
    }
  }
  profile.edges = quantile_edges(finite);
  if (!profile.edges.empty()) profile.counts = profile.histogram(values);
  return profile;
}

std::vector<double> FeatureProfile::histogram(std::span<const float> values) const {
  std::vector<double> counts(edges.size() < 2 ? 0 : edges.size() + 1, 0.0);
  if (counts.empty()) return counts;
  for (float value : values) {
    if (std::isfinite(value)) counts[bin_of(edges, value)] += 1;
  }
  return counts;
}

std::vector<double> FeatureProfile::histogram(const data::Column& column, double* missing_count) const {
  double missing_rows = 0;
  std::vector<double> result;
  if (type == data::ColumnType::kNumeric) {
    result.assign(edges.size() < 2 ? 0 : edges.size() + 1, 0.0);
    for (std::size_t row = 0; row < column.size(); ++row) {
      double value = 0;
      bool present = column.type == data::ColumnType::kNumeric
                         ? std::isfinite(column.numbers[row]) && ((value = column.numbers[row]), true)
                         : !column.is_missing(row) && number_of(column.text_at(row), value);
      if (!present || result.empty()) {
        missing_rows += 1;
        continue;
      }
      result[bin_of(edges, value)] += 1;
    }
  } else {
    result.assign(levels.size() + 1, 0.0);
    std::unordered_map<std::string, std::size_t> slot;
    for (std::size_t index = 0; index < levels.size(); ++index) slot.emplace(levels[index], index);
    for (std::size_t row = 0; row < column.size(); ++row) {
      if (column.is_missing(row)) {
        missing_rows += 1;
        continue;
      }
      auto found = slot.find(column.text_at(row));
      result[found == slot.end() ? levels.size() : found->second] += 1;
    }
  }
  if (missing_count != nullptr) *missing_count = missing_rows;
  return result;
}

DataProfile profile_of(const data::Table& table, const std::vector<std::string>& columns,
                       std::span<const float> scores) {
  DataProfile profile;
  for (const auto& name : columns) {
    const data::Column* column = table.find(name);
    if (column == nullptr) continue;
    if (column->type == data::ColumnType::kNumeric) {
      profile.inputs.push_back(profile_of_numbers(name, column->numbers));
      continue;
    }
    FeatureProfile feature;
    feature.name = name;
    feature.type = data::ColumnType::kCategorical;
    std::vector<double> per_code(column->dictionary.size(), 0.0);
    for (std::int32_t code : column->codes) {
      if (code == data::Column::kMissingCode) {
        feature.missing += 1;
      } else {
        per_code[static_cast<std::size_t>(code)] += 1;
      }
    }
    std::vector<std::size_t> order(per_code.size());
    for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
    // Most frequent first; ties by first appearance, so the profile never depends on hashing.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return per_code[a] > per_code[b]; });
    // Long levels (free text) are counted as "other": they would bloat every bundle's manifest.
    constexpr std::size_t kMaxLevelBytes = 256;
    double other = 0;
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      if (feature.levels.size() < kMaxProfileLevels && column->dictionary[order[rank]].size() <= kMaxLevelBytes) {
        feature.levels.push_back(column->dictionary[order[rank]]);
        feature.counts.push_back(per_code[order[rank]]);
      } else {
        other += per_code[order[rank]];
      }
    }
    feature.counts.push_back(other);
    profile.inputs.push_back(std::move(feature));
  }
  profile.prediction = profile_of_numbers("prediction", scores);
  return profile;
}

std::vector<double> attribution_shares(const Bundle& bundle, const data::Table& table, std::size_t max_rows) {
  const auto* trees = dynamic_cast<const TreeEnsembleModel*>(&bundle.model());
  std::size_t inputs = bundle.preprocessor().features().size();
  if (trees == nullptr || !trees->has_statistics() || trees->input_width() != inputs || table.row_count() == 0) {
    return {};
  }
  std::vector<std::uint32_t> rows;
  std::size_t count = std::min(max_rows, table.row_count());
  for (std::size_t index = 0; index < count; ++index) {
    rows.push_back(static_cast<std::uint32_t>(index * table.row_count() / count));
  }
  std::vector<float> features;
  if (!bundle.preprocessor().transform(table.take_rows(rows), features).ok()) return {};
  std::size_t block = inputs + 1;
  std::vector<float> contributions(trees->output_count() * block);
  std::vector<double> totals(inputs, 0.0);
  for (std::size_t row = 0; row < rows.size(); ++row) {
    if (!trees->explain(std::span<const float>(features).subspan(row * inputs, inputs), contributions).ok()) return {};
    for (std::size_t input = 0; input < inputs; ++input) totals[input] += std::abs(contributions[input]);
  }
  double sum = 0;
  for (double total : totals) sum += total;
  if (sum <= 0) return {};
  for (double& total : totals) total /= sum;
  return totals;
}

}  // namespace slipway::model
