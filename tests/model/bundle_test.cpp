#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "slipway/model.h"
#include "support/test_support.h"

namespace slipway::model {
namespace {

data::Table small_table() { return *data::parse_csv("x,color,y\n1,red,0\n2,blue,1\n3,red,1\nNA,green,0\n", "t.csv"); }

std::shared_ptr<const Bundle> small_bundle() {
  data::Table table = small_table();
  auto preprocessor = Preprocessor::fit(table, {"x", "color"}, PreprocessOptions{});
  std::vector<double> weights(preprocessor->output_width());
  for (std::size_t index = 0; index < weights.size(); ++index) weights[index] = 0.25 * static_cast<double>(index + 1);
  Manifest manifest;
  manifest.task = Task::kBinaryClassification;
  manifest.target = "y";
  manifest.class_labels = {"0", "1"};
  manifest.created_by = "test";
  manifest.params = {{"l2", "1.0"}};
  manifest.metrics = {{"test_auc", 0.75}, {"undefined", std::nan("")}};
  return std::make_shared<Bundle>(manifest, *preprocessor, std::make_shared<LinearModel>(weights, -0.5));
}

TEST(Preprocessor, ImputesStandardizesAndOneHots) {
  data::Table table = small_table();
  auto preprocessor = Preprocessor::fit(table, {"x", "color"}, PreprocessOptions{});
  ASSERT_TRUE(preprocessor.ok());
  // x: 1 numeric slot; color: red, blue, green (frequency order, ties by name) + other.
  EXPECT_EQ(preprocessor->output_width(), 5u);
  EXPECT_EQ(preprocessor->output_names(),
            (std::vector<std::string>{"x", "color=red", "color=blue", "color=green", "color=<other>"}));
  EXPECT_DOUBLE_EQ(preprocessor->features()[0].impute_value, 2.0);

  auto batch = data::parse_csv("color,x\npurple,2\nred,NA\n", "b.csv");
  std::vector<float> out;
  ASSERT_TRUE(preprocessor->transform(*batch, out).ok());
  // Row 0: x = mean -> 0 after centering; unseen color -> other slot.
  EXPECT_NEAR(out[0], 0.0f, 1e-6);
  EXPECT_EQ(out[4], 1.0f);
  EXPECT_EQ(out[1] + out[2] + out[3], 0.0f);
  EXPECT_EQ(out[5 + 1], 1.0f);

  auto missing = data::parse_csv("x\n1\n", "m.csv");
  EXPECT_EQ(preprocessor->transform(*missing, out).message(), "the input has no column 'color'");
  auto wrong_type = data::parse_csv("x,color\nabc,red\n", "w.csv");
  EXPECT_EQ(preprocessor->transform(*wrong_type, out).code(), StatusCode::kInvalidArgument);
}

// The online path (columns viewed from a request) gives the same matrix as the table path, for
// every encoding, missing values and unseen levels included.
TEST(Preprocessor, TransformColumnsEqualsTransform) {
  auto table = *data::read_csv(testing::data_path("lending_club.csv"));
  std::vector<std::string> names;
  for (const auto& column : table.columns()) {
    if (column.name != "Class") names.push_back(column.name);
  }
  for (auto encoding : {CategoricalEncoding::kOneHot, CategoricalEncoding::kOrdinal}) {
    PreprocessOptions options;
    options.encoding = encoding;
    std::vector<std::uint32_t> first_rows(500);
    for (std::uint32_t row = 0; row < first_rows.size(); ++row) first_rows[row] = row;
    auto preprocessor = *Preprocessor::fit(table.take_rows(first_rows), names, options);
    std::vector<float> expected;
    ASSERT_TRUE(preprocessor.transform(table, expected).ok());
    std::vector<std::vector<std::optional<std::string_view>>> texts(names.size());
    std::vector<ColumnInput> columns(names.size());
    for (std::size_t index = 0; index < names.size(); ++index) {
      const data::Column& column = *table.find(names[index]);
      if (column.type == data::ColumnType::kNumeric) {
        columns[index].numbers = column.numbers;
        continue;
      }
      for (std::size_t row = 0; row < column.size(); ++row) {
        if (column.is_missing(row)) {
          texts[index].emplace_back(std::nullopt);
        } else {
          texts[index].emplace_back(column.dictionary[static_cast<std::size_t>(column.codes[row])]);
        }
      }
      columns[index].texts = texts[index];
    }
    std::vector<float> actual;
    ASSERT_TRUE(preprocessor.transform_columns(columns, table.row_count(), actual).ok());
    ASSERT_EQ(actual.size(), expected.size());
    EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)), 0);
    EXPECT_EQ(preprocessor.feature_index(names[3]), std::optional<std::size_t>(3));
    EXPECT_EQ(preprocessor.feature_index("nope"), std::nullopt);
    columns.pop_back();
    EXPECT_FALSE(preprocessor.transform_columns(columns, table.row_count(), actual).ok());
  }
}

TEST(Bundle, RoundTripsThroughBytes) {
  auto bundle = small_bundle();
  auto bytes = bundle->serialize();
  EXPECT_EQ(bytes, bundle->serialize()) << "serialization must be deterministic";
  auto parsed = Bundle::parse(bytes, sha256_hex(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->serialize(), bytes);
  EXPECT_EQ((*parsed)->manifest().metrics.at("test_auc"), 0.75);
  EXPECT_TRUE(std::isnan((*parsed)->manifest().metrics.at("undefined")));

  data::Table table = small_table();
  auto expected = bundle->predict(table);
  auto actual = (*parsed)->predict(table);
  ASSERT_TRUE(expected.ok() && actual.ok());
  EXPECT_EQ(expected->scores, actual->scores);
  for (float score : actual->scores) EXPECT_TRUE(score > 0.0f && score < 1.0f);
}

// The decision threshold and the unused inputs travel with the bundle; the predicted label
// follows the threshold. A bundle without them keeps its bytes (BundleFixtures checks old files).
TEST(Bundle, DecisionThresholdAndUnusedInputsRoundTrip) {
  auto bundle = small_bundle();
  Manifest manifest = bundle->manifest();
  manifest.decision_threshold = 0.875;
  manifest.threshold_rule = "precision>=0.9";
  manifest.unused_inputs = {"loan_id"};
  auto changed = bundle->with_manifest(manifest);
  auto parsed = Bundle::parse(changed->serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->manifest().decision_threshold, 0.875);
  EXPECT_EQ((*parsed)->manifest().threshold_rule, "precision>=0.9");
  EXPECT_EQ((*parsed)->manifest().unused_inputs, std::vector<std::string>{"loan_id"});
  EXPECT_EQ((*parsed)->serialize(), changed->serialize());

  Predictions scores{.rows = 2, .columns = 1, .scores = {0.8f, 0.9f}};
  EXPECT_EQ(bundle->predicted_label(scores, 0), "1");  // at 0.5
  EXPECT_EQ((*parsed)->predicted_label(scores, 0), "0");
  EXPECT_EQ((*parsed)->predicted_label(scores, 1), "1");

  // An input may not also be an unused input.
  manifest.unused_inputs = {"x"};
  EXPECT_EQ(Bundle::parse(bundle->with_manifest(manifest)->serialize()).status().code(), StatusCode::kDataLoss);
}

// int8 weights: one byte a weight (optimize's test sees the smaller bundle on a real model), the
// score within the rounding of each weight.
TEST(Bundle, Int8LinearWeightsRoundTripAndStayClose) {
  auto bundle = small_bundle();
  const auto& linear = dynamic_cast<const LinearModel&>(bundle->model());
  auto quantized = linear.with_int8_weights();
  ASSERT_TRUE(quantized->has_int8_weights());
  EXPECT_EQ(quantized->input_width(), linear.input_width());
  double largest = 0.25 * static_cast<double>(linear.input_width());
  EXPECT_DOUBLE_EQ(quantized->weight_scale(), largest / 127.0);
  auto int8_bundle = std::make_shared<Bundle>(bundle->manifest(), bundle->preprocessor(), quantized);
  auto bytes = int8_bundle->serialize();
  auto parsed = Bundle::parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(dynamic_cast<const LinearModel&>((*parsed)->model()).has_int8_weights());
  EXPECT_EQ((*parsed)->serialize(), bytes);
  data::Table table = small_table();
  auto exact = bundle->predict(table);
  auto approximate = (*parsed)->predict(table);
  ASSERT_TRUE(exact.ok() && approximate.ok());
  for (std::size_t row = 0; row < exact->scores.size(); ++row) {
    EXPECT_NEAR(approximate->scores[row], exact->scores[row], 0.01) << row;
  }
}

TEST(Bundle, RefusesDamagedOrForeignBytes) {
  auto bytes = small_bundle()->serialize();
  std::string sha256 = sha256_hex(bytes);

  auto flipped = bytes;
  flipped[bytes.size() / 2] ^= std::byte{1};
  EXPECT_EQ(Bundle::parse(flipped).status().code(), StatusCode::kDataLoss);

  auto truncated = bytes;
  truncated.resize(bytes.size() - 10);
  EXPECT_EQ(Bundle::parse(truncated).status().code(), StatusCode::kDataLoss);

  EXPECT_EQ(Bundle::parse(bytes, std::string(64, '0')).status().code(), StatusCode::kDataLoss);

  std::string text = "definitely not a bundle, but long enough to have a header and a trailer";
  auto foreign = std::as_bytes(std::span(text.data(), text.size()));
  EXPECT_EQ(Bundle::parse(foreign).status().code(), StatusCode::kInvalidArgument);
}

TEST(Bundle, LoadsFromFileAndNamesThePathOnError) {
  testing::TempDir dir;
  auto bytes = small_bundle()->serialize();
  ASSERT_TRUE(write_file_atomic(dir.file("m.slip"), bytes).ok());
  EXPECT_TRUE(Bundle::load(dir.file("m.slip")).ok());
  bytes[100] ^= std::byte{0x40};
  ASSERT_TRUE(write_file_atomic(dir.file("bad.slip"), bytes).ok());
  auto bad = Bundle::load(dir.file("bad.slip"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind(dir.file("bad.slip"), 0), 0u);
}

TEST(Bundle, SectionsAreAligned) {
  auto bytes = small_bundle()->serialize();
  // Layout: 24-byte header, manifest, then the data area at a 64-byte boundary.
  std::uint64_t manifest_size = 0;
  std::memcpy(&manifest_size, bytes.data() + 16, sizeof manifest_size);
  std::size_t data_start = (24 + manifest_size + 63) / 64 * 64;
  EXPECT_EQ(data_start % 64, 0u);
  EXPECT_EQ(bytes.size(), data_start + 5 * sizeof(double) + 40);
}

}  // namespace
}  // namespace slipway::model
