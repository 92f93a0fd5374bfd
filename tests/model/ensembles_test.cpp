// Models of one family averaged into one: the merged trees and averaged weights give the mean of
// the members' margins, serialize like any model of the family, and members that answer another
// question are refused with the reason.
#include <gtest/gtest.h>

#include <cmath>

#include "model/model_builders.h"
#include "slipway/model/ensembles.h"

namespace slipway::model {
namespace {

Manifest manifest_for(Task task, std::vector<std::string> class_labels, std::string learning_rate) {
  Manifest manifest;
  manifest.task = task;
  manifest.target = "y";
  manifest.class_labels = std::move(class_labels);
  manifest.params = {{"learning_rate", std::move(learning_rate)}};
  manifest.metrics = {{"test_auc", 0.7}};
  return manifest;
}

// Two trees on two inputs, the first splitting on a category set (codes 1, 3 and one that
// depends on the scale go right).
std::shared_ptr<const Bundle> trees(float scale, float base_margin, const std::string& learning_rate) {
  TreeEnsembleData data;
  data.input_width = 2;
  data.base_margin = base_margin;
  // Each member its own set, so a merge that kept the offsets but not the sets would show.
  const auto extra = static_cast<std::uint32_t>(scale * 4) % 5;
  data.category_sets = {1, (1U << 1) | (1U << 3) | (1U << extra)};
  data.nodes = {split_node(0, 1, TreeNode::category_set_value(0), true),
                leaf_node(-1 * scale),
                leaf_node(2 * scale),
                split_node(1, 4, 0.5f),
                leaf_node(0.5f * scale),
                leaf_node(-3 * scale)};
  data.roots = {0, 3};
  data.cover = {4, 1, 3, 4, 2, 2};
  data.gain = {0.5f, 0, 0, 1.5f, 0, 0};
  return std::make_shared<const Bundle>(manifest_for(Task::kBinaryClassification, {"no", "yes"}, learning_rate),
                                        numeric_inputs(2), std::make_shared<TreeEnsembleModel>(std::move(data)));
}

TEST(Ensembles, TreesMergeIntoOneEnsembleOfTheMeanMargin) {
  std::vector<std::shared_ptr<const Bundle>> members = {trees(1, 0.2f, "0.1"), trees(3, -0.4f, "0.05"),
                                                        trees(0.5f, 1.0f, "0.3")};
  auto averaged = averaged_bundle(members);
  ASSERT_TRUE(averaged.ok()) << averaged.status().message();
  EXPECT_EQ((*averaged)->model().family(), "tree_ensemble");
  // Rows: (code, x1) for codes 0..4 with NaN, both sides of 0.5.
  std::vector<float> rows = {0, 0.1f, 1, 0.9f, 3, 0.5f, 2, std::nanf(""), 4, -1, std::nanf(""), 2};
  auto mean = margins((*averaged)->model(), rows);
  std::vector<float> expected(mean.size(), 0.0f);
  for (const auto& member : members) {
    auto each = margins(member->model(), rows);
    for (std::size_t i = 0; i < each.size(); ++i) expected[i] += each[i] / 3.0f;
  }
  for (std::size_t i = 0; i < mean.size(); ++i) EXPECT_NEAR(mean[i], expected[i], 1e-5) << "row " << i;
  // It is a tree ensemble like any: it round-trips, and explains with the members' covers.
  auto bytes = (*averaged)->serialize();
  auto parsed = Bundle::parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(margins((*parsed)->model(), rows), mean);
  EXPECT_TRUE(static_cast<const TreeEnsembleModel&>((*parsed)->model()).has_statistics());
  const auto& manifest = (*averaged)->manifest();
  EXPECT_EQ(manifest.params.at("ensemble.size"), "3");
  EXPECT_EQ(manifest.params.at("member.2.learning_rate"), "0.05");
  EXPECT_EQ(manifest.params.count("learning_rate"), 0u);
  EXPECT_TRUE(manifest.metrics.empty());
  EXPECT_EQ(manifest.class_labels, (std::vector<std::string>{"no", "yes"}));
}

TEST(Ensembles, LinearModelsAverageTheirWeights) {
  auto linear = [](std::vector<double> weights, double bias) {
    return std::make_shared<const Bundle>(manifest_for(Task::kRegression, {}, "1"), numeric_inputs(3),
                                          std::make_shared<LinearModel>(std::move(weights), bias));
  };
  std::vector<std::shared_ptr<const Bundle>> members = {linear({1, 2, 3}, 1), linear({3, 0, -1}, -3)};
  auto averaged = averaged_bundle(members);
  ASSERT_TRUE(averaged.ok()) << averaged.status().message();
  const auto& model = static_cast<const LinearModel&>((*averaged)->model());
  EXPECT_EQ(std::vector<double>(model.weights().begin(), model.weights().end()), (std::vector<double>{2, 1, 1}));
  EXPECT_EQ(model.bias(), -1.0);

  auto int8 = std::make_shared<const Bundle>(manifest_for(Task::kRegression, {}, "1"), numeric_inputs(3),
                                             static_cast<const LinearModel&>(members[0]->model()).with_int8_weights());
  std::vector<std::shared_ptr<const Bundle>> with_int8 = {members[0], int8};
  EXPECT_FALSE(averaged_bundle(with_int8).ok());
}

TEST(Ensembles, RefusesMembersThatAnswerAnotherQuestion) {
  auto message = [](std::vector<std::shared_ptr<const Bundle>> members) {
    auto averaged = averaged_bundle(members);
    EXPECT_FALSE(averaged.ok());
    return averaged.ok() ? std::string() : averaged.status().message();
  };
  auto first = trees(1, 0, "0.1");
  EXPECT_NE(message({first}).find("at least two"), std::string::npos);
  auto linear =
      std::make_shared<const Bundle>(manifest_for(Task::kBinaryClassification, {"no", "yes"}, "1"), numeric_inputs(2),
                                     std::make_shared<LinearModel>(std::vector<double>{1, 2}, 0));
  EXPECT_NE(message({first, linear}).find("one family"), std::string::npos);
  auto relabelled = std::make_shared<const Bundle>(manifest_for(Task::kBinaryClassification, {"yes", "no"}, "1"),
                                                   numeric_inputs(2), first->shared_model());
  EXPECT_NE(message({first, relabelled}).find("another question"), std::string::npos);
  std::vector<FeatureTransform> standardized(2);
  standardized[0].name = "x0";
  standardized[1].name = "x1";
  standardized[1].scale = 2.0;
  auto rescaled = std::make_shared<const Bundle>(first->manifest(), Preprocessor(standardized), first->shared_model());
  EXPECT_NE(message({first, rescaled}).find("'x1' is encoded differently"), std::string::npos);
}

}  // namespace
}  // namespace slipway::model
