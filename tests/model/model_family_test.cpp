// The registry of model families: each family round-trips its own manifest fields and sections,
// and a bundle of a family this build does not know is refused with a sentence saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "model/model_builders.h"
#include "model/model_family.h"
#include "slipway/model.h"
#include "support/test_support.h"

namespace slipway::model {
namespace {

constexpr std::size_t kTrailerSize = 40;  // "SLIPSHA2" + sha256 (docs/formats.md)

// `bytes` with its trailer checksum recomputed, as after an edit a writer would have made.
std::vector<std::byte> resealed(std::vector<std::byte> bytes) {
  std::size_t body = bytes.size() - kTrailerSize;
  Sha256 hasher;
  hasher.update(std::span<const std::byte>(bytes).first(body));
  auto digest = hasher.finish();
  std::memcpy(bytes.data() + body + 8, digest.data(), digest.size());
  return bytes;
}

// Replaces the first `from` in the file's bytes by `to`, of the same length, and reseals it.
std::vector<std::byte> edited(std::vector<std::byte> bytes, std::string_view from, std::string_view to) {
  EXPECT_EQ(from.size(), to.size());
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto at = text.find(from);
  EXPECT_NE(at, std::string_view::npos) << from;
  if (at != std::string_view::npos) std::memcpy(bytes.data() + at, to.data(), to.size());
  return resealed(std::move(bytes));
}

Manifest manifest_for(Task task, std::vector<std::string> class_labels) {
  Manifest manifest;
  manifest.task = task;
  manifest.target = "y";
  manifest.class_labels = std::move(class_labels);
  manifest.created_by = "test";
  return manifest;
}

std::shared_ptr<const Bundle> linear_bundle() {
  return std::make_shared<const Bundle>(manifest_for(Task::kRegression, {}), numeric_inputs(3),
                                        std::make_shared<LinearModel>(std::vector<double>{0.5, -1.25, 2.0}, 0.75));
}

// Two classes, a categorical split, statistics: every optional tree section.
TreeEnsembleData multiclass_trees() {
  TreeEnsembleData data = two_class_trees();
  data.base_margin = 0.25f;
  data.cover = {4, 1, 3, 4, 2, 2};
  data.gain = {0.5f, 0, 0, 1.5f, 0, 0};
  return data;
}

std::shared_ptr<const Bundle> tree_bundle() {
  return std::make_shared<const Bundle>(manifest_for(Task::kMulticlassClassification, {"a", "b"}), numeric_inputs(2),
                                        std::make_shared<TreeEnsembleModel>(multiclass_trees()));
}

TEST(ModelFamilies, TheRegistryListsEachFamilyOnceByName) {
  std::set<std::string_view> names;
  for (const ModelFamily* family : model_families()) {
    EXPECT_TRUE(names.insert(family->name).second) << family->name;
    EXPECT_EQ(find_model_family(family->name), family);
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"linear", "mlp", "tree_ensemble"}));
  EXPECT_EQ(find_model_family("transformer"), nullptr);
  EXPECT_EQ(find_model_family(linear_bundle()->model().family())->name, "linear");
  EXPECT_EQ(find_model_family(tree_bundle()->model().family())->name, "tree_ensemble");
}

TEST(ModelFamilies, LinearRoundTrips) {
  auto bundle = linear_bundle();
  auto bytes = bundle->serialize();
  auto parsed = Bundle::parse(bytes, sha256_hex(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->serialize(), bytes);
  EXPECT_EQ((*parsed)->model().family(), "linear");
  std::vector<float> rows = {1, 2, 3, -1, 0, 0.5f};
  EXPECT_EQ(margins((*parsed)->model(), rows), margins(bundle->model(), rows));
}

TEST(ModelFamilies, TreeEnsembleRoundTripsEveryOptionalSection) {
  auto bundle = tree_bundle();
  auto bytes = bundle->serialize();
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  for (std::string_view section :
       {"trees.nodes", "trees.roots", "trees.cover", "trees.gain", "trees.categories", "trees.groups"}) {
    EXPECT_NE(text.find("\"" + std::string(section) + "\""), std::string_view::npos) << section;
  }
  auto parsed = Bundle::parse(bytes, sha256_hex(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ((*parsed)->serialize(), bytes);
  const auto& trees = static_cast<const TreeEnsembleModel&>((*parsed)->model());
  ASSERT_EQ((*parsed)->model().family(), "tree_ensemble");
  EXPECT_TRUE(trees.has_statistics());
  EXPECT_EQ(trees.output_count(), 2u);
  EXPECT_EQ(trees.base_margin(), 0.25f);
  std::vector<float> rows = {2, 0, 5, 1, 3, 0, 99, 1, std::nanf(""), 0};
  EXPECT_EQ(margins(trees, rows), margins(bundle->model(), rows));
  std::vector<float> contributions(std::size_t{2} * 3);
  EXPECT_TRUE(trees.explain(std::span<const float>(rows).first(2), contributions).ok());
}

TEST(ModelFamilies, AnUnknownFamilyIsRefusedWithASentenceSayingSo) {
  auto bytes = edited(linear_bundle()->serialize(), "\"family\":\"linear\"", "\"family\":\"quanta\"");
  auto parsed = Bundle::parse(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "bundle model family 'quanta' is not known to this slipway (" +
                                           std::string(slipway_version()) + "); upgrade slipway to load it");
}

TEST(ModelFamilies, AFamilyNamesItsMissingOrDamagedSection) {
  auto linear = edited(linear_bundle()->serialize(), "\"name\":\"linear.weights\"", "\"name\":\"linear.weighty\"");
  EXPECT_EQ(Bundle::parse(linear).status().message(), "the bundle has no 'linear.weights' section");

  auto trees = edited(tree_bundle()->serialize(),
                      "\"name\":\"trees.roots\",\"offset\":", "\"name\":\"trees.roote\",\"offset\":");
  EXPECT_EQ(Bundle::parse(trees).status().message(), "the bundle has no 'trees.roots' section");

  // A size that is not a whole number of 16-byte nodes.
  auto bytes = tree_bundle()->serialize();
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto at = text.find("\"name\":\"trees.nodes\",\"offset\":0,\"size\":96");
  ASSERT_NE(at, std::string_view::npos);
  auto partial = edited(bytes, "\"name\":\"trees.nodes\",\"offset\":0,\"size\":96",
                        "\"name\":\"trees.nodes\",\"offset\":0,\"size\":95");
  auto parsed = Bundle::parse(partial);
  EXPECT_EQ(parsed.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(parsed.status().message(), "bundle section 'trees.nodes' has a partial element");
}

TEST(ModelFamilies, AModelThatDoesNotFitItsManifestIsRefused) {
  // A tree ensemble with two outputs in a bundle whose manifest says regression.
  auto bytes = edited(tree_bundle()->serialize(), "\"task\":\"multiclass_classification\"",
                      "\"task\":\"regression\"               ");
  EXPECT_EQ(Bundle::parse(bytes).status().message(), "the bundle's tree groups do not match its task and class labels");
}

// Whether `values` lie inside `file`, starting at a 64-byte boundary of the address space.
template <typename T>
bool viewed_in(std::span<const T> values, std::span<const std::byte> file) {
  auto address = reinterpret_cast<std::uintptr_t>(values.data());
  auto begin = reinterpret_cast<std::uintptr_t>(file.data());
  return !values.empty() && address >= begin && address + values.size_bytes() <= begin + file.size() &&
         address % 64 == 0;
}

TEST(ModelFamilies, ALoadedBundleViewsItsSectionsInTheMappedFile) {
  testing::TempDir dir;
  auto linear_bytes = linear_bundle()->serialize();
  auto tree_bytes = tree_bundle()->serialize();
  ASSERT_TRUE(write_file_atomic(dir.file("linear.slip"), linear_bytes).ok());
  ASSERT_TRUE(write_file_atomic(dir.file("trees.slip"), tree_bytes).ok());

  auto linear = Bundle::load(dir.file("linear.slip"), sha256_hex(linear_bytes));
  ASSERT_TRUE(linear.ok()) << linear.status().message();
  auto file = (*linear)->mapped_file();
  ASSERT_EQ(file.size(), linear_bytes.size());
  const auto& weights = static_cast<const LinearModel&>((*linear)->model()).weights();
  EXPECT_TRUE(viewed_in(weights, file));
  EXPECT_GE((*linear)->memory_bytes(), weights.size_bytes());
  EXPECT_EQ((*linear)->serialize(), linear_bytes);

  auto loaded = Bundle::load(dir.file("trees.slip"), sha256_hex(tree_bytes));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  file = (*loaded)->mapped_file();
  ASSERT_EQ(file.size(), tree_bytes.size());
  const auto& trees = static_cast<const TreeEnsembleModel&>((*loaded)->model());
  const TreeEnsembleArrays& arrays = trees.arrays();
  EXPECT_TRUE(viewed_in(arrays.nodes.span(), file));
  EXPECT_TRUE(viewed_in(arrays.roots.span(), file));
  EXPECT_TRUE(viewed_in(arrays.cover.span(), file));
  EXPECT_TRUE(viewed_in(arrays.gain.span(), file));
  EXPECT_TRUE(viewed_in(arrays.category_sets.span(), file));
  EXPECT_TRUE(viewed_in(arrays.tree_groups.span(), file));
  // The mapped sections count as memory the bundle holds.
  EXPECT_GE(trees.memory_bytes(),
            arrays.nodes.span().size_bytes() + arrays.cover.span().size_bytes() + arrays.gain.span().size_bytes());
  EXPECT_EQ((*loaded)->serialize(), tree_bytes);

  // The mapping lives as long as any bundle sharing the model: here a copy with other metrics.
  std::vector<float> rows = {2, 0, 5, 1, 3, 0, 99, 1, std::nanf(""), 0};
  auto expected = margins(tree_bundle()->model(), rows);
  auto copy = (*loaded)->with_metrics({{"auc", 0.5}});
  loaded = Status(StatusCode::kInternal, "dropped");
  EXPECT_EQ(copy->mapped_file().data(), file.data());
  EXPECT_EQ(margins(copy->model(), rows), expected);
}

TEST(ModelFamilies, ParsedBytesAreCopiedNotViewed) {
  auto bytes = tree_bundle()->serialize();
  auto parsed = Bundle::parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE((*parsed)->mapped_file().empty());
  const auto& nodes = static_cast<const TreeEnsembleModel&>((*parsed)->model()).nodes();
  auto address = reinterpret_cast<std::uintptr_t>(nodes.data());
  auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  EXPECT_TRUE(address < begin || address >= begin + bytes.size());
  // So the caller may drop its bytes.
  std::vector<float> rows = {2, 0, 5, 1};
  auto before = margins((*parsed)->model(), rows);
  std::fill(bytes.begin(), bytes.end(), std::byte{0xff});
  bytes.clear();
  bytes.shrink_to_fit();
  EXPECT_EQ(margins((*parsed)->model(), rows), before);
}

TEST(ModelFamilies, ALoadedModelIsAWarmStartsCopy) {
  testing::TempDir dir;
  auto bytes = tree_bundle()->serialize();
  ASSERT_TRUE(write_file_atomic(dir.file("trees.slip"), bytes).ok());
  auto loaded = Bundle::load(dir.file("trees.slip"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  TreeEnsembleData data = static_cast<const TreeEnsembleModel&>((*loaded)->model()).to_data();
  TreeEnsembleData original = multiclass_trees();
  ASSERT_EQ(data.nodes.size(), original.nodes.size());
  EXPECT_EQ(std::memcmp(data.nodes.data(), original.nodes.data(), data.nodes.size() * sizeof(TreeNode)), 0);
  EXPECT_EQ(data.roots, original.roots);
  EXPECT_EQ(data.cover, original.cover);
  EXPECT_EQ(data.gain, original.gain);
  EXPECT_EQ(data.category_sets, original.category_sets);
  EXPECT_EQ(data.tree_groups, original.tree_groups);
  EXPECT_EQ(data.group_count, original.group_count);
  EXPECT_EQ(data.base_margin, original.base_margin);
  // A copy to grow: appending touches nothing of the loaded model.
  data.nodes.emplace_back();
  EXPECT_EQ(static_cast<const TreeEnsembleModel&>((*loaded)->model()).nodes().size(), original.nodes.size());
}

}  // namespace
}  // namespace slipway::model
