// Models out of Slipway (`slipway export`), checked by the runtimes users take them to: onnx.checker,
// an independent numpy evaluator, ONNX Runtime (when Node.js is present) and python3-xgboost. The
// checks live in check_exports.py; this runs it against the built binary.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

TEST(Interchange, ExportedModelsPredictWhatSlipwayPredictsInOtherRuntimes) {
  TempDir home;
  auto result =
      run_command({"/usr/bin/python3", slipway::testing::source_dir() + "/tests/integration/check_exports.py",
                   "--slipway", slipway_binary(), "--home", home.path(), "--data", slipway::testing::data_dir()});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok   gbdt-binary-categorical xgboost-json"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok   mlp-regression-layernorm-gelu onnx (numpy evaluator)"), std::string::npos)
      << result.out;
}

// MLPs exported by PyTorch import and predict what PyTorch predicts within 1e-5; an operator
// outside the subset is named in the refusal, and hostile files are refused in one line.
TEST(Interchange, PyTorchMlpsImportAndPredictWhatPyTorchPredicts) {
  TempDir home;
  auto result =
      run_command({"/usr/bin/python3", slipway::testing::source_dir() + "/tests/integration/check_onnx_import.py",
                   "--slipway", slipway_binary(), "--home", home.path(), "--data", slipway::testing::data_dir()});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("ok   torch-binary-layernorm-gelu-tanh"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ok   an unsupported operator is named"), std::string::npos) << result.out;
}

// What cannot be exported says why, in one sentence.
TEST(Interchange, ExportsThatCannotWorkAreRefusedClearly) {
  TempDir home;
  auto slipway = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {slipway_binary(), "--home", home.path()});
    return run_command(args);
  };
  ASSERT_EQ(slipway({"init"}).exit_code, 0);
  ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "mlp", "--param",
                     "epochs=1", "--register", "net", "--no-progress"})
                .exit_code,
            0);
  auto as_xgboost = slipway({"export", "net", "--format", "xgboost-json", "--out", home.file("net.json")});
  EXPECT_EQ(as_xgboost.exit_code, 1);
  EXPECT_NE(as_xgboost.err.find("XGBoost JSON holds tree ensembles; this bundle's model is mlp"), std::string::npos)
      << as_xgboost.err;
  auto unknown = slipway({"export", "net", "--format", "pmml", "--out", home.file("net.pmml")});
  EXPECT_NE(unknown.err.find("unknown export format 'pmml'; supported: onnx, xgboost-json"), std::string::npos);
  ASSERT_EQ(
      slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "gbdt", "--param",
               "rounds=3", "--param", "categorical_splits=partition", "--register", "sets", "--no-progress"})
          .exit_code,
      0);
  auto sets = slipway({"export", "sets", "--format", "onnx", "--out", home.file("sets.onnx")});
  EXPECT_EQ(sets.exit_code, 1);
  EXPECT_NE(sets.err.find("ONNX trees have no category-set splits"), std::string::npos) << sets.err;
  auto nowhere = slipway({"export", "net", "--format", "onnx", "--out", "/proc/forbidden/net.onnx"});
  EXPECT_EQ(nowhere.exit_code, 1);
}

}  // namespace
}  // namespace slipway::testing
