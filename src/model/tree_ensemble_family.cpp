// The tree-ensemble family's part of a bundle: base margin and counts in the manifest; nodes,
// roots and the optional statistics, category sets and output groups as sections
// (docs/formats.md).
#include "model/model_family.h"

namespace slipway::model {
namespace {

constexpr std::string_view kNodesSection = "trees.nodes";
constexpr std::string_view kRootsSection = "trees.roots";
constexpr std::string_view kCoverSection = "trees.cover";
constexpr std::string_view kGainSection = "trees.gain";
constexpr std::string_view kCategoriesSection = "trees.categories";
constexpr std::string_view kGroupsSection = "trees.groups";

void write_trees(const Model& model, FamilyWriter& out) {
  const auto& trees = static_cast<const TreeEnsembleModel&>(model);
  const TreeEnsembleArrays& arrays = trees.arrays();
  JsonWriter& fields = out.fields();
  fields.key("base_margin").value(arrays.base_margin);
  fields.key("tree_count").value(static_cast<std::uint64_t>(arrays.roots.size()));
  fields.key("node_count").value(static_cast<std::uint64_t>(arrays.nodes.size()));
  fields.key("nodes_section").value(kNodesSection);
  fields.key("roots_section").value(kRootsSection);
  fields.key("group_count").value(static_cast<std::uint64_t>(arrays.group_count));
  // Only quantized models carry a layout, so every other bundle keeps its bytes.
  if (trees.quantized_layout()) fields.key("layout").value("quantized");
  if (trees.bf16_leaves()) fields.key("leaves").value("bf16");
  fields.key("decision")
      .value(
          "left if x < threshold (float32); at a categorical node right if x's code is in the node's set; NaN follows "
          "the node's default direction");
  out.add_section(kNodesSection, arrays.nodes.span());
  out.add_section(kRootsSection, arrays.roots.span());
  if (trees.has_statistics()) {
    out.add_section(kCoverSection, arrays.cover.span());
    out.add_section(kGainSection, arrays.gain.span());
  }
  if (!arrays.category_sets.empty()) out.add_section(kCategoriesSection, arrays.category_sets.span());
  if (!arrays.tree_groups.empty()) out.add_section(kGroupsSection, arrays.tree_groups.span());
}

Result<std::shared_ptr<const Model>> read_trees(const FamilyReader& in) {
  const ManifestReader& reader = in.fields_reader();
  TreeEnsembleArrays trees;
  trees.input_width = in.width();
  double base_margin = 0.0;
  SLIPWAY_RETURN_IF_ERROR(reader.double_field(in.fields(), "base_margin", base_margin));
  trees.base_margin = static_cast<float>(base_margin);
  // Bundles written before multiclass support have no group count: one output.
  std::uint64_t group_count = 1;
  if (in.fields()["group_count"].error() == simdjson::SUCCESS) {
    SLIPWAY_RETURN_IF_ERROR(reader.uint_field(in.fields(), "group_count", group_count));
  }
  trees.group_count = group_count;
  // Each array views the mapped file when the bundle is loaded from one.
  SLIPWAY_ASSIGN_OR_RETURN(trees.nodes, in.section<TreeNode>(kNodesSection));
  SLIPWAY_ASSIGN_OR_RETURN(trees.roots, in.section<std::uint32_t>(kRootsSection));
  SLIPWAY_ASSIGN_OR_RETURN(trees.category_sets, in.optional_section<std::uint32_t>(kCategoriesSection));
  SLIPWAY_ASSIGN_OR_RETURN(trees.tree_groups, in.optional_section<std::uint32_t>(kGroupsSection));
  if (in.has_section(kCoverSection)) {
    SLIPWAY_ASSIGN_OR_RETURN(trees.cover, in.section<float>(kCoverSection));
    SLIPWAY_ASSIGN_OR_RETURN(trees.gain, in.section<float>(kGainSection));
    if (trees.cover.size() != trees.nodes.size() || trees.gain.size() != trees.nodes.size()) {
      return data_loss("the bundle's tree statistics do not match its node count");
    }
  }
  if (auto status = TreeEnsembleModel::validate(trees); !status.ok()) {
    return data_loss("the bundle's trees are malformed: " + status.message());
  }
  const Manifest& manifest = in.manifest();
  if ((manifest.task == Task::kMulticlassClassification) != (trees.group_count > 1) ||
      (trees.group_count > 1 && trees.group_count != manifest.class_labels.size())) {
    return data_loss("the bundle's tree groups do not match its task and class labels");
  }
  bool quantized = false;
  if (in.fields()["layout"].error() == simdjson::SUCCESS) {
    std::string layout;
    SLIPWAY_RETURN_IF_ERROR(reader.string_field(in.fields(), "layout", layout));
    if (layout != "quantized") return data_loss("unknown tree layout '" + layout + "' in the bundle");
    quantized = true;
  }
  bool bf16_leaves = false;
  if (in.fields()["leaves"].error() == simdjson::SUCCESS) {
    std::string leaves;
    SLIPWAY_RETURN_IF_ERROR(reader.string_field(in.fields(), "leaves", leaves));
    if (leaves != "bf16" || !quantized) return data_loss("unknown leaf format '" + leaves + "' in the bundle");
    bf16_leaves = true;
  }
  auto model = std::make_shared<const TreeEnsembleModel>(std::move(trees), quantized, bf16_leaves);
  if (quantized && !model->quantized_layout()) {
    return data_loss("the bundle asks for the quantized tree layout, but its trees do not fit it");
  }
  return std::shared_ptr<const Model>(std::move(model));
}

}  // namespace

const ModelFamily& tree_ensemble_family() {
  static constexpr ModelFamily kFamily{"tree_ensemble", &write_trees, &read_trees};
  return kFamily;
}

}  // namespace slipway::model
