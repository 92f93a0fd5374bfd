#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/model_builders.h"
#include "slipway/model.h"

namespace slipway::model {
namespace {

// One tree: x0 < 0.5 -> (x1 < 2 -> 1.0 : 2.0, missing x1 goes right), else 3.0; missing x0 goes left.
std::string small_model(std::string_view objective = "reg:squarederror", std::string_view booster = "gbtree",
                        std::string_view base_score = "5E-1") {
  return std::string(R"({"version":[1,7,4],"learner":{"feature_names":[],"feature_types":[],
    "learner_model_param":{"base_score":")") +
         std::string(base_score) + R"(","num_class":"0","num_feature":"2","num_target":"1"},
    "objective":{"name":")" +
         std::string(objective) + R"("},
    "gradient_booster":{"name":")" +
         std::string(booster) + R"(","model":{"gbtree_model_param":{"num_trees":"1"},
      "tree_info":[0],
      "trees":[{"id":0,"left_children":[1,3,-1,-1,-1],"right_children":[2,4,-1,-1,-1],
                "split_indices":[0,1,0,0,0],"split_conditions":[0.5,2.0,3.0,1.0,2.0],
                "default_left":[1,0,0,0,0],"split_type":[0,0,0,0,0]}]}}}})";
}

std::vector<float> predict(const Bundle& bundle, const std::string& csv) {
  auto table = data::parse_csv(csv, "rows.csv");
  return bundle.predict(*table)->scores;
}

TEST(TreeEnsemble, FollowsXgboostDecisionRules) {
  auto bundle = import_xgboost_json(small_model(), {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  // base_score 0.5 is the starting margin for regression.
  auto scores = predict(**bundle, "f0,f1\n0.1,1\n0.1,5\n0.5,1\n,1\n0.1,\n9,\n");
  EXPECT_EQ(scores, (std::vector<float>{1.5f, 2.5f, 3.5f, 1.5f, 2.5f, 3.5f}));
}

TEST(TreeEnsemble, BinaryLogisticAppliesTheLinkToBaseScoreAndOutput) {
  auto bundle = import_xgboost_json(small_model("binary:logistic", "gbtree", "[2.5E-1]"), {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  auto scores = predict(**bundle, "f0,f1\n0.1,1\n");
  double margin = std::log(0.25 / 0.75) + 1.0;
  EXPECT_NEAR(scores[0], 1.0 / (1.0 + std::exp(-margin)), 1e-6);
  EXPECT_EQ((*bundle)->manifest().class_labels, (std::vector<std::string>{"0", "1"}));
}

TEST(TreeEnsemble, RoundTripsThroughTheBundleFile) {
  auto bundle = import_xgboost_json(small_model(), {.feature_names = {"a", "b"}, .source = "m.json", .target = "y"});
  ASSERT_TRUE(bundle.ok());
  auto bytes = (*bundle)->serialize();
  auto parsed = Bundle::parse(bytes, sha256_hex(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->serialize(), bytes);
  EXPECT_EQ(predict(**parsed, "a,b\n0.1,\n"), (std::vector<float>{2.5f}));
  EXPECT_EQ((*parsed)->manifest().target, "y");
}

// A quantized model and its optimization record survive the file; the float bundle's bytes do
// not change because the fields exist.
TEST(TreeEnsemble, QuantizedLayoutAndOptimizationRoundTrip) {
  auto bundle = import_xgboost_json(small_model(), {.feature_names = {"a", "b"}, .source = "m.json", .target = "y"});
  ASSERT_TRUE(bundle.ok());
  const auto& trees = dynamic_cast<const TreeEnsembleModel&>((*bundle)->model());
  auto quantized_model = trees.with_quantized_layout();
  ASSERT_TRUE(quantized_model.ok()) << quantized_model.status().message();
  auto quantized = std::make_shared<const Bundle>((*bundle)->manifest(), (*bundle)->preprocessor(), *quantized_model)
                       ->with_optimization({{"technique", "quantize"}, {"baseline", "m@1"}});
  auto bytes = quantized->serialize();
  EXPECT_NE(bytes, (*bundle)->serialize());
  auto parsed = Bundle::parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(dynamic_cast<const TreeEnsembleModel&>((*parsed)->model()).quantized_layout());
  EXPECT_EQ((*parsed)->manifest().optimization.at("technique"), "quantize");
  EXPECT_EQ((*parsed)->serialize(), bytes);
  std::string rows = "a,b\n0.1,1\n0.1,5\n0.5,1\n,1\n0.1,\n9,\n";
  EXPECT_EQ(predict(**parsed, rows), predict(**bundle, rows));

  // bfloat16 leaves: recorded in the bundle, close to the float outputs, not equal by promise.
  auto bf16_model = trees.with_quantized_layout(true);
  ASSERT_TRUE(bf16_model.ok());
  EXPECT_TRUE((*bf16_model)->bf16_leaves());
  auto bf16 = std::make_shared<const Bundle>((*bundle)->manifest(), (*bundle)->preprocessor(), *bf16_model);
  auto bf16_parsed = Bundle::parse(bf16->serialize());
  ASSERT_TRUE(bf16_parsed.ok()) << bf16_parsed.status().message();
  EXPECT_TRUE(dynamic_cast<const TreeEnsembleModel&>((*bf16_parsed)->model()).bf16_leaves());
  std::vector<float> exact = predict(**bundle, rows);
  std::vector<float> rounded = predict(**bf16_parsed, rows);
  ASSERT_EQ(rounded.size(), exact.size());
  for (std::size_t row = 0; row < exact.size(); ++row) EXPECT_NEAR(rounded[row], exact[row], 0.01) << row;
  EXPECT_FALSE(trees.bf16_leaves());
}

TEST(TreeEnsemble, ValidateRejectsBrokenStructure) {
  std::vector<TreeNode> nodes(3);
  nodes[0].feature_and_flags = 0;
  nodes[0].left = 1;
  nodes[0].right = 2;
  nodes[1].feature_and_flags = TreeNode::kLeafFlag;
  nodes[2].feature_and_flags = TreeNode::kLeafFlag;
  auto validate = [&](std::size_t width) {
    TreeEnsembleData data;
    data.nodes = nodes;
    data.roots = {0};
    data.input_width = width;
    return TreeEnsembleModel::validate(data);
  };
  EXPECT_TRUE(validate(1).ok());
  EXPECT_FALSE(validate(0).ok());  // feature out of range
  nodes[0].feature_and_flags |= TreeNode::kCategoricalFlag;
  EXPECT_FALSE(validate(1).ok());  // category set outside the (empty) set array
  nodes[0].feature_and_flags = 0;
  nodes[0].right = 7;
  EXPECT_FALSE(validate(1).ok());  // child outside
  nodes[0].right = 0;
  EXPECT_FALSE(validate(1).ok());  // cycle
}

// Codes in the set go right, every other code (and unseen ones) left, NaN by default direction.
TEST(TreeEnsemble, CategoricalSplitsAndMulticlassOutputs) {
  // Tree 0 (class 0): categorical on feature 0 (codes 2 and 5 go right). Tree 1 (class 1): x1 < 0.5.
  TreeEnsembleData data = two_class_trees();
  ASSERT_TRUE(TreeEnsembleModel::validate(data).ok());
  TreeEnsembleModel model(data);
  ASSERT_EQ(model.output_count(), 2u);
  float nan = std::nanf("");
  std::vector<float> rows = {2, 0, 5, 1, 3, 0, 99, 1, nan, 0, 0, 1, 2.5f, 0, 1, 1, 5, 0};
  std::size_t count = rows.size() / 2;
  std::vector<float> margins(count * 2);
  model.predict_margin(rows, count, margins);
  std::vector<float> expected = {1, 10, 1, 20, -1, 10, -1, 20, 1, 10, -1, 20, -1, 10, -1, 20, 1, 10};
  EXPECT_EQ(margins, expected);  // NaN goes right: default_left is unset
  auto quantized = model.with_quantized_layout();
  ASSERT_FALSE(quantized.ok());
  EXPECT_EQ(quantized.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(quantized.status().message().find("categories"), std::string::npos) << quantized.status().message();
}

// Every prediction path (vector kernels over blocks of rows, across trees for single rows, the
// pointer walk) gives the float sums of a plain walk in tree order. This runs the kernel the CPU
// picks; CTest runs it again with SLIPWAY_TREE_KERNEL=scalar for the pointer walk, and
// kernels_test compares every kernel variant with the reference walk.
TEST(TreeEnsemble, EveryKernelMatchesAPlainWalkBitForBit) {
  std::mt19937 random(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  constexpr std::size_t kWidth = 5;
  TreeEnsembleData data;
  data.input_width = kWidth;
  data.base_margin = 0.25f;
  // 40 random trees of depth 1 to 7, some leaves early, random default directions.
  for (int tree = 0; tree < 40; ++tree) {
    data.roots.push_back(static_cast<std::uint32_t>(data.nodes.size()));
    int depth_limit = 1 + tree % 7;
    std::vector<std::pair<std::uint32_t, int>> pending = {{data.roots.back(), 0}};
    data.nodes.emplace_back();
    while (!pending.empty()) {
      auto [index, depth] = pending.back();
      pending.pop_back();
      if (depth == depth_limit || (depth > 0 && uniform(random) < 0.2f)) {
        data.nodes[index].feature_and_flags = TreeNode::kLeafFlag;
        data.nodes[index].value = uniform(random) - 0.5f;
        continue;
      }
      auto left = static_cast<std::uint32_t>(data.nodes.size());
      data.nodes.emplace_back();
      data.nodes.emplace_back();
      TreeNode& node = data.nodes[index];
      node.feature_and_flags =
          static_cast<std::uint32_t>(random() % kWidth) | (uniform(random) < 0.5f ? TreeNode::kDefaultLeftFlag : 0U);
      node.value = uniform(random);
      node.left = left;
      node.right = left + 1;
      pending.push_back({left, depth + 1});
      pending.push_back({left + 1, depth + 1});
    }
  }
  ASSERT_TRUE(TreeEnsembleModel::validate(data).ok());
  TreeEnsembleModel model(data);
  constexpr std::size_t kRows = 64 * 3 + 9;
  std::vector<float> rows(kRows * kWidth);
  for (float& value : rows) value = uniform(random) < 0.1f ? std::nanf("") : uniform(random);
  rows[7] = data.nodes[0].value;  // a value exactly on a threshold
  std::vector<float> expected(kRows, data.base_margin);
  for (std::size_t row = 0; row < kRows; ++row) {
    for (std::uint32_t root : data.roots) {
      const TreeNode* node = &data.nodes[root];
      while (!node->is_leaf()) {
        node = &data.nodes[goes_left(*node, rows[row * kWidth + node->feature()], {}) ? node->left : node->right];
      }
      expected[row] += node->value;
    }
  }
  // The quantized layout too: rows as bins, the same floats.
  auto quantized = model.with_quantized_layout();
  ASSERT_TRUE(quantized.ok()) << quantized.status().message();
  ASSERT_TRUE((*quantized)->quantized_layout());
  EXPECT_FALSE(model.quantized_layout());
  EXPECT_GT((*quantized)->quantized_max_thresholds(), 0u);
  for (const TreeEnsembleModel* under_test : {static_cast<const TreeEnsembleModel*>(&model), quantized->get()}) {
    SCOPED_TRACE(under_test->quantized_layout() ? "quantized" : "float");
    std::vector<float> batch(kRows);
    under_test->predict_margin(rows, kRows, batch);
    EXPECT_EQ(batch, expected);
    for (std::size_t row = 0; row < kRows; ++row) {
      float single = 0;
      under_test->predict_margin(std::span<const float>(rows).subspan(row * kWidth, kWidth), 1, std::span(&single, 1));
      ASSERT_EQ(single, expected[row]) << "row " << row;
    }
  }
}

TEST(XgboostImport, RejectsWhatItCannotImportWithOneSentence) {
  auto message = [](const std::string& json, const XgboostImportOptions& options = {}) {
    auto result = import_xgboost_json(json, options);
    return result.ok() ? std::string("ok") : result.status().message();
  };
  EXPECT_NE(message("[1,2]").find("not an XGBoost JSON model"), std::string::npos);
  EXPECT_NE(message("{\"learner\":{}}").find("not an XGBoost JSON model"), std::string::npos);
  EXPECT_NE(message(small_model("reg:squarederror", "gblinear")).find("booster 'gblinear' is not supported"),
            std::string::npos);
  EXPECT_NE(message(small_model("reg:squarederror", "dart")).find("'dart'"), std::string::npos);
  EXPECT_NE(message(small_model("count:poisson")).find("objective 'count:poisson' is not supported"),
            std::string::npos);
  EXPECT_NE(message(small_model(), {.feature_names = {"only_one"}}).find("2 features but 1 feature names"),
            std::string::npos);
  std::string categorical = small_model();
  categorical.replace(categorical.find("\"split_type\":[0,0"), 17, "\"split_type\":[1,0");
  EXPECT_NE(message(categorical).find("is categorical but lists no categories"), std::string::npos);
  std::string multiclass_mismatch = small_model("multi:softprob");
  EXPECT_NE(message(multiclass_mismatch).find("num_class (0) disagree"), std::string::npos);
  std::string out_of_range = small_model();
  out_of_range.replace(out_of_range.find("\"split_indices\":[0,1"), 20, "\"split_indices\":[0,9");
  EXPECT_NE(message(out_of_range).find("splits on feature 9"), std::string::npos);
}

// Regression: num_feature of 20,000,000 allocated 8.7 GB and registered a 1.45 GB bundle.
TEST(XgboostImport, HugeNumFeatureIsBoundedByTheFeaturesTheTreesUse) {
  auto model_json = [](const std::string& num_feature, const std::string& names) {
    return R"({"version":[1,7,4],"learner":{)" + names + R"("feature_types":[],
      "learner_model_param":{"base_score":"5E-1","num_class":"0","num_feature":")" +
           num_feature + R"(","num_target":"1"},
      "objective":{"name":"reg:squarederror"},
      "gradient_booster":{"name":"gbtree","model":{"gbtree_model_param":{"num_trees":"1"},"tree_info":[0],
        "trees":[{"left_children":[1,-1,-1],"right_children":[2,-1,-1],"split_indices":[1,0,0],
                  "split_conditions":[2.0,10.0,20.0],"default_left":[0,0,0],"split_type":[0,0,0]}]}}}})";
  };
  XgboostImportOptions options;
  auto trimmed = import_xgboost_json(model_json("20000000", ""), options);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().message();
  EXPECT_EQ((*trimmed)->preprocessor().features().size(), 2u);
  EXPECT_LT((*trimmed)->serialize().size(), 10'000u);
  // Declared features within the limit are kept as declared.
  auto declared = import_xgboost_json(model_json("5", ""), options);
  ASSERT_TRUE(declared.ok());
  EXPECT_EQ((*declared)->preprocessor().features().size(), 5u);
  for (const char* bad : {"-3", "nan", "1.5", "0", "1e30"}) {
    auto refused = import_xgboost_json(model_json(bad, ""), options);
    EXPECT_FALSE(refused.ok()) << bad;
  }
  // Named features past the limit cannot be trimmed: refused with the count.
  options.feature_names.resize(200'000, "x");
  auto named = import_xgboost_json(model_json("200000", ""), options);
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("more than the 100000"), std::string::npos) << named.status().message();
}

}  // namespace
}  // namespace slipway::model
