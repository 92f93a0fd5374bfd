// Models trained by XGBoost itself (Debian's python3-xgboost), imported with `slipway import
// xgboost`, must predict what XGBoost predicts on every held-out row, missing values included.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

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
                         const std::string& positive, const std::string& objective, bool categorical = false) {
  std::vector<std::string> command = {
      "/usr/bin/python3", slipway::testing::source_dir() + "/tests/integration/xgboost_reference.py",
      data_path(data),    target,
      positive,           objective,
      dir.path()};
  if (categorical) command.push_back("categorical");
  auto result = run_command(command);
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

TEST(XgboostImport, MulticlassSoftprobMatchesXgboostOnEveryRow) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  TempDir dir;
  Reference reference = make_reference(dir, "lending_club.csv", "verification_status", "@classes", "multi:softprob");
  auto bundle = model::import_xgboost_json(*read_file(reference.model_path), {.target = "verification_status"});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  EXPECT_EQ((*bundle)->task(), model::Task::kMulticlassClassification);
  EXPECT_EQ((*bundle)->model().output_count(), 3u);
  EXPECT_EQ(dynamic_cast<const model::TreeEnsembleModel&>((*bundle)->model()).roots().size(), 180u);
  expect_same_predictions(**model::Bundle::parse((*bundle)->serialize()), reference);
}

TEST(XgboostImport, CategoricalSplitsMatchXgboostOnEveryRow) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  TempDir dir;
  Reference reference = make_reference(dir, "lending_club.csv", "Class", "bad", "binary:logistic", true);
  ASSERT_NE(read_file(reference.model_path)->find("\"split_type\":[0,0,1"), std::string::npos)
      << "XGBoost made no categorical split; the test would prove nothing";
  auto bundle = model::import_xgboost_json(*read_file(reference.model_path), {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  expect_same_predictions(**model::Bundle::parse((*bundle)->serialize()), reference);
}

// TreeSHAP contributions equal XGBoost's pred_contribs, and each row's sum is its margin.
void expect_same_contributions(const model::Bundle& bundle, const std::string& dir) {
  const auto& trees = dynamic_cast<const model::TreeEnsembleModel&>(bundle.model());
  auto holdout = data::read_csv(dir + "/holdout.csv");
  std::vector<float> features;
  ASSERT_TRUE(bundle.preprocessor().transform(*holdout, features).ok());
  std::size_t width = trees.input_width();
  std::size_t groups = trees.output_count();
  std::ifstream expected_file(dir + "/contribs.txt");
  std::vector<float> contributions((width + 1) * groups);
  std::vector<float> margin(groups);
  double worst = 0;
  std::size_t rows = 0;
  for (std::string line; std::getline(expected_file, line); ++rows) {
    std::istringstream values(line);
    std::span<const float> row(features.data() + rows * width, width);
    auto explained = trees.explain(row, contributions);
    ASSERT_TRUE(explained.ok()) << explained.message();
    trees.predict_margin(row, 1, margin);
    for (std::size_t group = 0; group < groups; ++group) {
      double sum = 0;
      for (std::size_t column = 0; column <= width; ++column) {
        double expected = 0;
        values >> expected;
        float actual = contributions[group * (width + 1) + column];
        EXPECT_NEAR(actual, expected, 1e-4 * std::max(1.0, std::abs(expected)))
            << "row " << rows << " group " << group << " column " << column;
        worst = std::max(worst, std::abs(actual - expected));
        sum += actual;
      }
      EXPECT_NEAR(sum, margin[group], 1e-4 * std::max(1.0, std::abs(sum))) << "row " << rows;
    }
  }
  EXPECT_EQ(rows, 300u);
  std::printf("largest TreeSHAP difference from XGBoost pred_contribs over %zu rows: %.3g\n", rows, worst);
}

TEST(XgboostImport, TreeShapMatchesXgboostPredContribs) {
  if (!have_xgboost()) GTEST_SKIP() << "python3-xgboost is not installed";
  for (const auto& [data, target, positive, objective, categorical] : std::vector<std::array<std::string, 5>>{
           {"lending_club.csv", "Class", "bad", "binary:logistic", ""},
           {"chicago_ridership.csv", "ridership", "-", "reg:squarederror", ""},
           {"lending_club.csv", "verification_status", "@classes", "multi:softprob", ""},
           {"lending_club.csv", "Class", "bad", "binary:logistic", "categorical"}}) {
    SCOPED_TRACE(target + " " + objective + " " + categorical);
    TempDir dir;
    make_reference(dir, data, target, positive, objective, categorical == "categorical");
    auto bundle = model::import_xgboost_json(*read_file(dir.file("model.json")), {});
    ASSERT_TRUE(bundle.ok()) << bundle.status().message();
    auto bytes = (*bundle)->serialize();  // statistics survive the bundle file
    expect_same_contributions(**model::Bundle::parse(bytes), dir.path());
  }
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

  auto explained = run_command({slipway_binary(), "--home", home.path(), "explain", "lending-xgb", "--data",
                                reference.holdout_path, "--out", dir.file("shap.csv")});
  ASSERT_EQ(explained.exit_code, 0) << explained.err;
  auto shap = *slipway::read_file(dir.file("shap.csv"));
  EXPECT_EQ(shap.substr(0, shap.find(',')), "funded_amnt");
  EXPECT_EQ(std::count(shap.begin(), shap.end(), '\n'), 2001);
  auto importance = run_command({slipway_binary(), "--home", home.path(), "explain", "lending-xgb", "--importance"});
  EXPECT_NE(importance.out.find("total_gain"), std::string::npos) << importance.err;

  write_text(dir.file("not_a_model.json"), "{\"hello\": 1}");
  auto bad = run_command({slipway_binary(), "--home", home.path(), "import", "xgboost", dir.file("not_a_model.json")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("not an XGBoost JSON model"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace slipway::testing
