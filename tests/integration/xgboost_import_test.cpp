// Models trained by XGBoost itself (Debian's python3-xgboost), imported with `slipway import
// xgboost`, must predict what XGBoost predicts on every held-out row, missing values included.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "slipway/data.h"
#include "slipway/model.h"
#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::testing {
namespace {

bool have_xgboost() { return std::system("/usr/bin/python3 -c 'import xgboost' 2>/dev/null") == 0; }

struct Reference {
  std::string model_path;
  std::string holdout_path;
  std::vector<double> expected;
};

Reference make_reference(const TempDir& dir, const std::string& data, const std::string& target,
                         const std::string& positive, const std::string& objective) {
  auto result =
      run_command({"/usr/bin/python3", std::string(SLIPWAY_SOURCE_DIR) + "/tests/integration/xgboost_reference.py",
                   data_path(data), target, positive, objective, dir.path()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  Reference reference{dir.file("model.json"), dir.file("holdout.csv"), {}};
  std::ifstream expected(dir.file("expected.txt"));
  for (double value = 0; expected >> value;) reference.expected.push_back(value);
  return reference;
}

void expect_same_predictions(const model::Bundle& bundle, const Reference& reference) {
  auto holdout = data::read_csv(reference.holdout_path);
  ASSERT_TRUE(holdout.ok()) << holdout.status().message();
  auto predictions = bundle.predict(*holdout);
  ASSERT_TRUE(predictions.ok()) << predictions.status().message();
  ASSERT_EQ(predictions->scores.size(), reference.expected.size());
  double worst = 0;
  for (std::size_t row = 0; row < reference.expected.size(); ++row) {
    double tolerance = 1e-5 * std::max(1.0, std::abs(reference.expected[row]));
    EXPECT_NEAR(predictions->scores[row], reference.expected[row], tolerance) << "row " << row;
    worst = std::max(worst, std::abs(predictions->scores[row] - reference.expected[row]));
  }
  std::printf("largest difference from XGBoost over %zu rows: %.3g\n", reference.expected.size(), worst);
}

TEST(XgboostImport, BinaryLogisticMatchesXgboostOnEveryRow) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  TempDir dir;
  Reference reference = make_reference(dir, "lending_club.csv", "Class", "bad", "binary:logistic");
  auto bundle = model::import_xgboost_json(*read_file(reference.model_path), {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ((*bundle)->task(), model::Task::kBinaryClassification);
  expect_same_predictions(**bundle, reference);
  // Through the bundle file as well: serialization keeps every bit.
  auto bytes = (*bundle)->serialize();
  auto reloaded = model::Bundle::parse(bytes, sha256_hex(bytes));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  expect_same_predictions(**reloaded, reference);
}

TEST(XgboostImport, RegressionMatchesXgboostOnEveryRow) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  TempDir dir;
  Reference reference = make_reference(dir, "chicago_ridership.csv", "ridership", "-", "reg:squarederror");
  auto bundle = model::import_xgboost_json(*read_file(reference.model_path), {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ((*bundle)->task(), model::Task::kRegression);
  expect_same_predictions(**bundle, reference);
}

TEST(XgboostImport, CommandRegistersAndEvaluates) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  TempDir dir;
  Reference reference = make_reference(dir, "lending_club.csv", "Class", "bad", "binary:logistic");
  TempDir home;
  auto imported = run_command({slipway_binary(), "--home", home.path(), "--json", "import", "xgboost",
                               reference.model_path, "--register", "lending-xgb", "--target", "Class"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("\"trees\":60"), std::string::npos) << imported.out;
  EXPECT_NE(imported.out.find("\"registered\":{\"model\":\"lending-xgb\",\"version\":1}"), std::string::npos);
  auto evaluated =
      run_command({slipway_binary(), "--home", home.path(), "eval", "lending-xgb", "--data", reference.holdout_path});
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("auc"), std::string::npos);

  write_text(dir.file("not_a_model.json"), "{\"hello\": 1}");
  auto bad = run_command({slipway_binary(), "--home", home.path(), "import", "xgboost", dir.file("not_a_model.json")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("not an XGBoost JSON model"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace slipway::testing
