#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "slipway/data.h"

namespace slipway::data {
namespace {

// SplitMix64: a small, portable generator, so a seed gives the same split on every platform
// (std::shuffle's algorithm is left to the standard library).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t bound) { return next() % bound; }

 private:
  std::uint64_t state_;
};

template <typename T>
void shuffle(std::vector<T>& items, SplitMix64& rng) {
  for (std::size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

std::size_t test_count_for(std::size_t rows, double fraction) {
  auto count = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(rows)));
  return std::min(count, rows);
}

// Keys that compare rows by one column's value: numbers, or category text (ISO dates sort right).
struct ColumnOrder {
  const Column& column;
  bool less(std::uint32_t a, std::uint32_t b) const {
    if (column.type == ColumnType::kNumeric) return column.numbers[a] < column.numbers[b];
    return column.dictionary[static_cast<std::size_t>(column.codes[a])] <
           column.dictionary[static_cast<std::size_t>(column.codes[b])];
  }
};

// A group key for a row: the code or the bit pattern of the number.
std::int64_t group_key(const Column& column, std::size_t row) {
  if (column.type == ColumnType::kCategorical) return column.codes[row];
  float value = column.numbers[row];
  std::int32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<std::int64_t>(bits) + (std::int64_t{1} << 40);
}

Split finish(std::vector<std::uint32_t> train, std::vector<std::uint32_t> test) {
  std::sort(train.begin(), train.end());
  std::sort(test.begin(), test.end());
  return Split{std::move(train), std::move(test)};
}

}  // namespace

Result<SplitSpec> parse_split_kind(std::string_view text) {
  SplitSpec spec;
  auto colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  std::string_view column = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (kind == "random")
    spec.kind = SplitKind::kRandom;
  else if (kind == "stratified")
    spec.kind = SplitKind::kStratified;
  else if (kind == "time")
    spec.kind = SplitKind::kTime;
  else if (kind == "group")
    spec.kind = SplitKind::kGroup;
  else
    return invalid_argument("unknown split '" + std::string(text) +
                            "'; expected random, stratified, time:COLUMN or group:COLUMN");
  bool needs_column = spec.kind == SplitKind::kTime || spec.kind == SplitKind::kGroup;
  if (needs_column && column.empty()) {
    return invalid_argument("split '" + std::string(kind) + "' needs a column: write " + std::string(kind) + ":COLUMN");
  }
  if (!needs_column && !column.empty()) {
    return invalid_argument("split '" + std::string(kind) + "' takes no column");
  }
  spec.column = std::string(column);
  return spec;
}

std::string describe_split(const SplitSpec& spec) {
  switch (spec.kind) {
    case SplitKind::kRandom:
      return "random";
    case SplitKind::kStratified:
      return "stratified";
    case SplitKind::kTime:
      return "time:" + spec.column;
    case SplitKind::kGroup:
      return "group:" + spec.column;
  }
  return "unknown";
}

Result<Split> split_rows(const Table& table, const SplitSpec& spec, std::string_view target_column) {
  if (!(spec.test_fraction > 0.0 && spec.test_fraction < 1.0)) {
    return invalid_argument("the test fraction must be between 0 and 1 (exclusive), got " +
                            std::to_string(spec.test_fraction));
  }
  std::size_t rows = table.row_count();
  if (rows < 2) return invalid_argument("cannot split a table of " + std::to_string(rows) + " rows");
  SplitMix64 rng(spec.seed);
  std::vector<std::uint32_t> train;
  std::vector<std::uint32_t> test;

  switch (spec.kind) {
    case SplitKind::kRandom: {
      std::vector<std::uint32_t> order(rows);
      std::iota(order.begin(), order.end(), 0U);
      shuffle(order, rng);
      std::size_t test_count = test_count_for(rows, spec.test_fraction);
      test.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(test_count));
      train.assign(order.begin() + static_cast<std::ptrdiff_t>(test_count), order.end());
      break;
    }
    case SplitKind::kStratified: {
      SLIPWAY_ASSIGN_OR_RETURN(std::size_t target_index, table.column_index(target_column));
      const Column& target = table.column(target_index);
      std::map<std::int64_t, std::vector<std::uint32_t>> strata;
      for (std::uint32_t row = 0; row < rows; ++row) strata[group_key(target, row)].push_back(row);
      if (strata.size() > 1000) {
        return invalid_argument("stratified split on '" + target.name + "' found " + std::to_string(strata.size()) +
                                " distinct values; stratify a classification target, or use a random split");
      }
      for (auto& [key, members] : strata) {
        shuffle(members, rng);
        std::size_t test_count = test_count_for(members.size(), spec.test_fraction);
        test.insert(test.end(), members.begin(), members.begin() + static_cast<std::ptrdiff_t>(test_count));
        train.insert(train.end(), members.begin() + static_cast<std::ptrdiff_t>(test_count), members.end());
      }
      break;
    }
    case SplitKind::kTime: {
      SLIPWAY_ASSIGN_OR_RETURN(std::size_t time_index, table.column_index(spec.column));
      const Column& time = table.column(time_index);
      std::size_t missing = 0;
      for (std::size_t row = 0; row < rows; ++row) missing += time.is_missing(row) ? 1 : 0;
      if (missing > 0) {
        return invalid_argument("time column '" + time.name + "' has " + std::to_string(missing) +
                                " missing values; a time-ordered split needs a time on every row");
      }
      std::vector<std::uint32_t> order(rows);
      std::iota(order.begin(), order.end(), 0U);
      ColumnOrder by_time{time};
      std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return by_time.less(a, b); });
      std::size_t cut = rows - test_count_for(rows, spec.test_fraction);
      // Rows tied with the first test row go to test, so test is strictly later than train.
      while (cut > 0 && !by_time.less(order[cut - 1], order[cut])) --cut;
      if (cut == 0) {
        return invalid_argument("time column '" + time.name + "' has too few distinct values to split");
      }
      train.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(cut));
      test.assign(order.begin() + static_cast<std::ptrdiff_t>(cut), order.end());
      break;
    }
    case SplitKind::kGroup: {
      SLIPWAY_ASSIGN_OR_RETURN(std::size_t group_index, table.column_index(spec.column));
      const Column& group = table.column(group_index);
      std::map<std::int64_t, std::vector<std::uint32_t>> members_of;
      for (std::uint32_t row = 0; row < rows; ++row) members_of[group_key(group, row)].push_back(row);
      if (members_of.size() < 2) {
        return invalid_argument("group column '" + group.name +
                                "' has a single group; a group split needs two or more");
      }
      std::vector<std::int64_t> groups;
      groups.reserve(members_of.size());
      for (const auto& entry : members_of) groups.push_back(entry.first);
      shuffle(groups, rng);
      std::size_t wanted = test_count_for(rows, spec.test_fraction);
      for (std::size_t index = 0; index < groups.size(); ++index) {
        const auto& members = members_of[groups[index]];
        bool to_test = test.size() < wanted && index + 1 < groups.size();
        auto& side = to_test ? test : train;
        side.insert(side.end(), members.begin(), members.end());
      }
      break;
    }
  }
  if (train.empty() || test.empty()) {
    return invalid_argument("the split left " + std::string(train.empty() ? "train" : "test") +
                            " empty; use more rows or another test fraction");
  }
  return finish(std::move(train), std::move(test));
}

LeakageReport check_leakage(const Table& table, const Split& split, const SplitSpec& spec) {
  LeakageReport report;

  // Exact duplicates: hash each row over every column, then compare candidates exactly.
  auto row_hash = [&](std::uint32_t row) {
    std::uint64_t hash = 1469598103934665603ULL;
    for (const auto& column : table.columns()) {
      std::int64_t key = column.is_missing(row) ? -2 : group_key(column, row);
      hash = (hash ^ static_cast<std::uint64_t>(key)) * 1099511628211ULL;
    }
    return hash;
  };
  auto rows_equal = [&](std::uint32_t a, std::uint32_t b) {
    for (const auto& column : table.columns()) {
      if (column.is_missing(a) != column.is_missing(b)) return false;
      if (!column.is_missing(a) && group_key(column, a) != group_key(column, b)) return false;
    }
    return true;
  };
  std::unordered_multimap<std::uint64_t, std::uint32_t> train_by_hash;
  train_by_hash.reserve(split.train_rows.size());
  for (auto row : split.train_rows) train_by_hash.emplace(row_hash(row), row);
  for (auto row : split.test_rows) {
    auto [begin, end] = train_by_hash.equal_range(row_hash(row));
    for (auto it = begin; it != end; ++it) {
      if (rows_equal(row, it->second)) {
        ++report.duplicate_test_rows;
        break;
      }
    }
  }

  if (spec.kind == SplitKind::kGroup) {
    if (const Column* group = table.find(spec.column)) {
      std::unordered_set<std::int64_t> train_groups;
      for (auto row : split.train_rows) train_groups.insert(group_key(*group, row));
      std::unordered_set<std::int64_t> shared;
      for (auto row : split.test_rows) {
        auto key = group_key(*group, row);
        if (train_groups.count(key) != 0) shared.insert(key);
      }
      report.groups_on_both_sides = shared.size();
    }
  }
  if (spec.kind == SplitKind::kTime) {
    if (const Column* time = table.find(spec.column)) {
      ColumnOrder by_time{*time};
      std::uint32_t latest_train = split.train_rows.front();
      for (auto row : split.train_rows) {
        if (by_time.less(latest_train, row)) latest_train = row;
      }
      for (auto row : split.test_rows) report.test_rows_not_later += by_time.less(latest_train, row) ? 0 : 1;
    }
  }
  return report;
}

}  // namespace slipway::data
