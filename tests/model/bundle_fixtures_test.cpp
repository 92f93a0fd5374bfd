// Bundles written by earlier builds (tests/model/fixtures/, one per model family and task) must
// keep loading, serialize back to the very same bytes, and predict the same floats. The fixtures
// and their *.expected.csv (`slipway predict` on the first 200 rows of the data set) were made
// by the build before model families owned their sections; see tests/model/fixtures/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "slipway/model.h"
#include "support/test_support.h"

namespace slipway::model {
namespace {

struct Fixture {
  std::string name;       // tests/model/fixtures/<name>.slip and <name>.expected.csv
  std::string data_file;  // under data/: the first 200 rows were scored
};

std::vector<Fixture> fixtures() {
  return {{"logistic", "lending_club.csv"},
          {"linear_regression", "chicago_ridership.csv"},
          {"gbdt_partition", "lending_club.csv"},
          {"gbdt_multiclass", "lending_club.csv"}};
}

std::string fixture_path(const std::string& file) {
  return slipway::testing::source_dir() + "/tests/model/fixtures/" + file;
}

std::vector<std::byte> fixture_bytes(const std::string& name) {
  auto text = read_file(fixture_path(name + ".slip"));
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return {};
  auto bytes = std::as_bytes(std::span(text->data(), text->size()));
  return {bytes.begin(), bytes.end()};
}

// The expected scores (row-major) and labels (empty for regression) from `slipway predict`.
struct Expected {
  std::vector<float> scores;
  std::vector<std::string> labels;
  std::size_t columns = 0;
};

Expected read_expected(const std::string& name) {
  Expected expected;
  auto text = read_file(fixture_path(name + ".expected.csv"));
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return expected;
  std::istringstream lines(*text);
  std::string line;
  std::getline(lines, line);
  bool with_label = line.ends_with(",label");
  expected.columns = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + (with_label ? 0 : 1);
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string field;
    for (std::size_t column = 0; column < expected.columns; ++column) {
      std::getline(fields, field, ',');
      expected.scores.push_back(std::strtof(field.c_str(), nullptr));
    }
    if (with_label) {
      std::getline(fields, field);
      expected.labels.push_back(field);
    }
  }
  return expected;
}

data::Table first_rows(const std::string& data_file, std::uint32_t count) {
  auto table = data::read_csv(testing::data_path(data_file));
  EXPECT_TRUE(table.ok());
  std::vector<std::uint32_t> rows(count);
  for (std::uint32_t row = 0; row < count; ++row) rows[row] = row;
  return table->take_rows(rows);
}

void expect_predictions(const Bundle& bundle, const data::Table& rows, const Expected& expected) {
  auto predictions = bundle.predict(rows);
  ASSERT_TRUE(predictions.ok()) << predictions.status().message();
  ASSERT_EQ(predictions->columns, expected.columns);
  ASSERT_EQ(predictions->scores.size(), expected.scores.size());
  for (std::size_t index = 0; index < expected.scores.size(); ++index) {
    ASSERT_EQ(predictions->scores[index], expected.scores[index]) << "score " << index;
  }
  for (std::size_t row = 0; row < expected.labels.size(); ++row) {
    EXPECT_EQ(bundle.predicted_label(*predictions, row), expected.labels[row]);
  }
}

TEST(BundleFixtures, OldBundlesParseAndSerializeToTheSameBytes) {
  for (const auto& fixture : fixtures()) {
    SCOPED_TRACE(fixture.name);
    auto bytes = fixture_bytes(fixture.name);
    auto parsed = Bundle::parse(bytes, sha256_hex(bytes));
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    auto again = (*parsed)->serialize();
    EXPECT_TRUE(again == bytes) << "serialize(parse(bytes)) differs from the file";
    auto reparsed = Bundle::parse(again);
    ASSERT_TRUE(reparsed.ok()) << reparsed.status().message();
    EXPECT_TRUE((*reparsed)->serialize() == bytes) << "parse(serialize(parse(bytes))) does not serialize to the file";
  }
}

TEST(BundleFixtures, OldBundlesPredictAsTheyDid) {
  for (const auto& fixture : fixtures()) {
    SCOPED_TRACE(fixture.name);
    Expected expected = read_expected(fixture.name);
    ASSERT_EQ(expected.scores.size(), 200 * expected.columns);
    data::Table rows = first_rows(fixture.data_file, 200);
    auto bytes = fixture_bytes(fixture.name);
    auto parsed = Bundle::parse(bytes);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    expect_predictions(**parsed, rows, expected);
    auto loaded = Bundle::load(fixture_path(fixture.name + ".slip"), sha256_hex(bytes));
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    expect_predictions(**loaded, rows, expected);
    EXPECT_TRUE((*loaded)->serialize() == bytes);
  }
}

}  // namespace
}  // namespace slipway::model
