#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "slipway/model.h"

namespace slipway::model {
namespace {

struct LevelCount {
  std::string level;
  std::size_t count;
};

std::vector<std::string> frequent_levels(const data::Column& column, std::size_t max_levels) {
  std::vector<std::size_t> counts(column.dictionary.size(), 0);
  for (auto code : column.codes) {
    if (code != data::Column::kMissingCode) ++counts[static_cast<std::size_t>(code)];
  }
  std::vector<LevelCount> levels;
  for (std::size_t code = 0; code < counts.size(); ++code) {
    if (counts[code] > 0) levels.push_back({column.dictionary[code], counts[code]});
  }
  std::sort(levels.begin(), levels.end(), [](const LevelCount& a, const LevelCount& b) {
    return a.count != b.count ? a.count > b.count : a.level < b.level;
  });
  if (levels.size() > max_levels) levels.resize(max_levels);
  std::vector<std::string> names;
  names.reserve(levels.size());
  for (auto& entry : levels) names.push_back(std::move(entry.level));
  return names;
}

// Mean and population standard deviation, in double, in row order (deterministic).
void center_and_scale(const std::vector<double>& values, bool standardize, FeatureTransform& feature) {
  if (!standardize || values.empty()) {
    feature.center = 0.0;
    feature.scale = 1.0;
    return;
  }
  double sum = 0.0;
  for (double value : values) sum += value;
  double mean = sum / static_cast<double>(values.size());
  double squares = 0.0;
  for (double value : values) squares += (value - mean) * (value - mean);
  double deviation = std::sqrt(squares / static_cast<double>(values.size()));
  feature.center = mean;
  feature.scale = deviation > 1e-12 ? deviation : 1.0;
}

// For each code of `column`'s dictionary, the level index in `levels`, or levels.size() for
// "other". Computed once per batch so the per-row work is a table lookup.
std::vector<std::uint32_t> slot_of_codes(const data::Column& column, const StringMap<std::uint32_t>& index_of,
                                         std::uint32_t other_slot) {
  std::vector<std::uint32_t> slots(column.dictionary.size(), other_slot);
  for (std::size_t code = 0; code < column.dictionary.size(); ++code) {
    auto found = index_of.find(column.dictionary[code]);
    if (found != index_of.end()) slots[code] = found->second;
  }
  return slots;
}

StringMap<std::uint32_t> index_levels(const std::vector<std::string>& levels) {
  StringMap<std::uint32_t> index_of;
  for (std::size_t index = 0; index < levels.size(); ++index)
    index_of.emplace(levels[index], static_cast<std::uint32_t>(index));
  return index_of;
}

// A categorical view of `column`: itself, or numbers turned into text (a scoring file whose
// category column happens to hold only digits).
data::Column as_categorical(const data::Column& column) {
  data::Column out;
  out.name = column.name;
  out.type = data::ColumnType::kCategorical;
  std::unordered_map<std::string, std::int32_t> code_of;
  out.codes.reserve(column.size());
  for (std::size_t row = 0; row < column.size(); ++row) {
    if (column.is_missing(row)) {
      out.codes.push_back(data::Column::kMissingCode);
      continue;
    }
    auto [it, inserted] = code_of.try_emplace(column.text_at(row), static_cast<std::int32_t>(out.dictionary.size()));
    if (inserted) out.dictionary.push_back(it->first);
    out.codes.push_back(it->second);
  }
  return out;
}

// Writes a numeric feature's transformed values into its slot of each output row.
void write_numbers(const FeatureTransform& feature, std::span<const float> values, std::size_t row_width,
                   std::size_t offset, std::vector<float>& out) {
  auto inverse_scale = 1.0 / feature.scale;
  for (std::size_t row = 0; row < values.size(); ++row) {
    double filled = std::isnan(values[row]) ? feature.impute_value : values[row];
    out[row * row_width + offset] = static_cast<float>((filled - feature.center) * inverse_scale);
  }
}

// Writes a categorical feature's level `slot` into one output row: a one-hot 1, or the ordinal
// code centered and scaled.
void write_level(const FeatureTransform& feature, std::uint32_t slot, float* row_out) {
  if (feature.encoding == CategoricalEncoding::kOneHot) {
    row_out[slot] = 1.0f;
  } else {
    row_out[0] = static_cast<float>((slot - feature.center) / feature.scale);
  }
}

}  // namespace

std::size_t FeatureTransform::width() const {
  if (type == data::ColumnType::kNumeric || encoding == CategoricalEncoding::kOrdinal) return 1;
  return levels.size() + 1;
}

Preprocessor::Preprocessor(std::vector<FeatureTransform> features) : features_(std::move(features)) {
  for (std::size_t index = 0; index < features_.size(); ++index) {
    output_width_ += features_[index].width();
    level_index_.push_back(index_levels(features_[index].levels));
    feature_index_.emplace(features_[index].name, index);
  }
}

std::optional<std::size_t> Preprocessor::feature_index(std::string_view name) const {
  auto found = feature_index_.find(name);
  if (found == feature_index_.end()) return std::nullopt;
  return found->second;
}

Status Preprocessor::transform_columns(std::span<const ColumnInput> columns, std::size_t rows,
                                       std::vector<float>& out) const {
  if (columns.size() != features_.size()) {
    return invalid_argument("expected " + std::to_string(features_.size()) + " input columns, got " +
                            std::to_string(columns.size()));
  }
  out.assign(rows * output_width_, 0.0f);
  std::size_t offset = 0;
  for (std::size_t feature_index = 0; feature_index < features_.size(); ++feature_index) {
    const FeatureTransform& feature = features_[feature_index];
    const ColumnInput& column = columns[feature_index];
    if (feature.type == data::ColumnType::kNumeric) {
      if (column.numbers.size() != rows) {
        return invalid_argument("input '" + feature.name + "' must hold " + std::to_string(rows) + " numbers");
      }
      write_numbers(feature, column.numbers, output_width_, offset, out);
    } else {
      if (column.texts.size() != rows) {
        return invalid_argument("input '" + feature.name + "' must hold " + std::to_string(rows) + " categories");
      }
      const auto& index_of = level_index_[feature_index];
      auto other = static_cast<std::uint32_t>(feature.levels.size());
      for (std::size_t row = 0; row < rows; ++row) {
        std::uint32_t slot = other;  // missing, unseen and infrequent levels
        if (column.texts[row]) {
          auto found = index_of.find(*column.texts[row]);
          if (found != index_of.end()) slot = found->second;
        }
        write_level(feature, slot, &out[row * output_width_ + offset]);
      }
    }
    offset += feature.width();
  }
  return {};
}

Result<Preprocessor> Preprocessor::fit(const data::Table& table, const std::vector<std::string>& feature_names,
                                       const PreprocessOptions& options) {
  if (feature_names.empty()) return invalid_argument("there are no feature columns to train on");
  std::vector<FeatureTransform> features;
  for (const auto& name : feature_names) {
    SLIPWAY_ASSIGN_OR_RETURN(std::size_t index, table.column_index(name));
    const data::Column& column = table.column(index);
    FeatureTransform feature;
    feature.name = name;
    feature.type = column.type;
    std::vector<double> encoded;
    encoded.reserve(column.size());
    if (column.type == data::ColumnType::kNumeric) {
      double sum = 0.0;
      std::size_t present = 0;
      for (float value : column.numbers) {
        if (!std::isnan(value)) {
          sum += value;
          ++present;
        }
      }
      feature.impute_value = present > 0 ? sum / static_cast<double>(present) : 0.0;
      if (!options.impute_missing) feature.impute_value = std::nan("");
      for (float value : column.numbers) {
        if (!std::isnan(value) || options.impute_missing)
          encoded.push_back(std::isnan(value) ? feature.impute_value : value);
      }
      center_and_scale(encoded, options.standardize, feature);
    } else {
      feature.encoding = options.encoding;
      feature.levels = frequent_levels(column, options.max_categories);
      if (feature.encoding == CategoricalEncoding::kOrdinal) {
        auto slots =
            slot_of_codes(column, index_levels(feature.levels), static_cast<std::uint32_t>(feature.levels.size()));
        for (auto code : column.codes) {
          encoded.push_back(code == data::Column::kMissingCode ? static_cast<double>(feature.levels.size())
                                                               : slots[static_cast<std::size_t>(code)]);
        }
        center_and_scale(encoded, options.standardize, feature);
      }
    }
    features.push_back(std::move(feature));
  }
  return Preprocessor(std::move(features));
}

std::size_t Preprocessor::memory_bytes() const {
  std::size_t bytes = features_.capacity() * sizeof(FeatureTransform);
  for (const auto& feature : features_) {
    bytes += feature.name.capacity() + feature.levels.capacity() * sizeof(std::string);
    for (const auto& level : feature.levels) bytes += level.capacity();
  }
  // A hash node per level: the key, the value and about two pointers of bookkeeping.
  for (const auto& index : level_index_) {
    bytes += index.bucket_count() * sizeof(void*);
    for (const auto& [level, code] : index)
      bytes += sizeof(std::string) + level.capacity() + sizeof(code) + 2 * sizeof(void*);
  }
  return bytes;
}

std::vector<std::string> Preprocessor::output_names() const {
  std::vector<std::string> names;
  for (const auto& feature : features_) {
    if (feature.width() == 1) {
      names.push_back(feature.name);
      continue;
    }
    for (const auto& level : feature.levels) names.push_back(feature.name + "=" + level);
    names.push_back(feature.name + "=<other>");
  }
  return names;
}

Status Preprocessor::transform(const data::Table& batch, std::vector<float>& out) const {
  std::size_t rows = batch.row_count();
  out.assign(rows * output_width_, 0.0f);
  std::size_t offset = 0;
  for (std::size_t feature_index = 0; feature_index < features_.size(); ++feature_index) {
    const FeatureTransform& feature = features_[feature_index];
    const data::Column* column = batch.find(feature.name);
    if (column == nullptr) return invalid_argument("the input has no column '" + feature.name + "'");
    if (feature.type == data::ColumnType::kNumeric) {
      if (column->type != data::ColumnType::kNumeric) {
        // Name a value that is not a number (the column read as text because of it): the first
        // that std::from_chars (locale-free, no '+' or hex, like the CSV reader) does not read
        // whole once spaces are trimmed, else the first present value.
        std::string example;
        std::size_t example_row = 0;
        for (std::size_t row = 0; row < column->size(); ++row) {
          if (column->is_missing(row)) continue;
          std::string text = column->text_at(row);
          if (example.empty()) {
            example = text;
            example_row = row;
          }
          std::size_t first = text.find_first_not_of(' '), last = text.find_last_not_of(' ');
          double value = 0;
          bool number =
              first != std::string::npos &&
              std::from_chars(text.data() + first, text.data() + last + 1, value).ptr == text.data() + last + 1;
          if (!number) {
            example = text;
            example_row = row;
            break;
          }
        }
        return invalid_argument("column '" + feature.name + "' must be numeric, but holds text such as '" + example +
                                "' (row " + std::to_string(example_row + 1) + " of the input)");
      }
      write_numbers(feature, std::span<const float>(column->numbers).first(rows), output_width_, offset, out);
    } else {
      data::Column converted;
      const data::Column* categorical = column;
      if (column->type != data::ColumnType::kCategorical) {
        converted = as_categorical(*column);
        categorical = &converted;
      }
      auto other = static_cast<std::uint32_t>(feature.levels.size());
      auto slots = slot_of_codes(*categorical, level_index_[feature_index], other);
      for (std::size_t row = 0; row < rows; ++row) {
        auto code = categorical->codes[row];
        std::uint32_t slot = code == data::Column::kMissingCode ? other : slots[static_cast<std::size_t>(code)];
        write_level(feature, slot, &out[row * output_width_ + offset]);
      }
    }
    offset += feature.width();
  }
  return {};
}

}  // namespace slipway::model
