// XGBoost JSON export: a tree-ensemble bundle as the file XGBoost's save_model("m.json") writes
// (../shared/reference/trees.md §2), so XGBoost 1.7+ loads it and predicts what the bundle does.
#include <charconv>
#include <cmath>

#include "model/interchange.h"
#include "slipway/model.h"

namespace slipway::model {
namespace {

// XGBoost's "no parent" marker for a root.
constexpr std::int64_t kNoParent = 2147483647;

// One tree as XGBoost's struct-of-arrays (breadth first: node 0 is the root).
struct XgboostTree {
  std::vector<std::int64_t> left, right, parents, split_indices, split_type;
  std::vector<float> split_conditions, base_weights, loss_changes, sum_hessian;
  std::vector<std::int64_t> default_left;
  std::vector<std::int64_t> categories, categories_nodes, categories_segments, categories_sizes;
};

XgboostTree convert_tree(const TreeEnsembleModel& model, std::uint32_t root) {
  const auto nodes = model.nodes();
  const auto& sets = model.arrays().category_sets;
  const LocalTree local_tree = breadth_first(nodes, root);
  XgboostTree tree;
  tree.left = local_tree.left;
  tree.right = local_tree.right;
  for (std::size_t local = 0; local < local_tree.nodes.size(); ++local) {
    std::uint32_t index = local_tree.nodes[local];
    const TreeNode& node = nodes[index];
    tree.parents.push_back(local_tree.parent[local] < 0 ? kNoParent : local_tree.parent[local]);
    tree.sum_hessian.push_back(model.has_statistics() ? model.cover()[index] : 0.0f);
    if (node.is_leaf()) {
      tree.split_indices.push_back(0);
      tree.split_type.push_back(0);
      tree.split_conditions.push_back(node.value);
      tree.base_weights.push_back(node.value);
      tree.loss_changes.push_back(0.0f);
      tree.default_left.push_back(0);
      continue;
    }
    tree.split_indices.push_back(node.feature());
    tree.default_left.push_back(node.default_left() ? 1 : 0);
    tree.base_weights.push_back(0.0f);
    tree.loss_changes.push_back(model.has_statistics() ? model.gain()[index] : 0.0f);
    if (node.is_categorical()) {
      // The set's members go right, in XGBoost as here.
      tree.split_type.push_back(1);
      tree.split_conditions.push_back(0.0f);
      std::uint32_t offset = node.category_set();
      tree.categories_nodes.push_back(static_cast<std::int64_t>(local));
      tree.categories_segments.push_back(static_cast<std::int64_t>(tree.categories.size()));
      for (std::uint32_t word = 0; word < sets[offset]; ++word) {
        for (std::uint32_t bit = 0; bit < 32; ++bit) {
          if ((sets[offset + 1 + word] >> bit) & 1U) tree.categories.push_back(word * 32 + bit);
        }
      }
      tree.categories_sizes.push_back(static_cast<std::int64_t>(tree.categories.size()) -
                                      tree.categories_segments.back());
    } else {
      tree.split_type.push_back(0);
      tree.split_conditions.push_back(node.value);
    }
  }
  return tree;
}

// The shortest text that reads back as `value`, always with a '.' or an exponent: XGBoost's
// parser takes "2" for an integer and refuses it where a number belongs.
std::string float_text(float value) {
  char buffer[32];
  auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

template <typename T>
void write_array(JsonWriter& json, std::string_view key, const std::vector<T>& values) {
  json.key(key).begin_array();
  for (T value : values) {
    if constexpr (std::is_integral_v<T>) {
      json.value(static_cast<std::int64_t>(value));
    } else {
      json.raw(float_text(value));
    }
  }
  json.end_array();
}

// A tree of one leaf: how the bundle's base margin travels exactly (XGBoost's base_score is in
// response space and would be converted back through the link function).
XgboostTree constant_tree(float value) {
  XgboostTree tree;
  tree.left = tree.right = {-1};
  tree.parents = {kNoParent};
  tree.split_indices = tree.split_type = tree.default_left = {0};
  tree.split_conditions = tree.base_weights = {value};
  tree.loss_changes = tree.sum_hessian = {0.0f};
  return tree;
}

void write_tree(JsonWriter& json, const XgboostTree& tree, std::size_t id, std::size_t feature_count) {
  json.begin_object();
  json.key("id").value(static_cast<std::uint64_t>(id));
  json.key("tree_param").begin_object();
  json.key("num_deleted").value("0").key("num_feature").value(std::to_string(feature_count));
  json.key("num_nodes").value(std::to_string(tree.left.size())).key("size_leaf_vector").value("0");
  json.end_object();
  write_array(json, "left_children", tree.left);
  write_array(json, "right_children", tree.right);
  write_array(json, "parents", tree.parents);
  write_array(json, "split_indices", tree.split_indices);
  write_array(json, "split_conditions", tree.split_conditions);
  write_array(json, "split_type", tree.split_type);
  write_array(json, "default_left", tree.default_left);
  write_array(json, "base_weights", tree.base_weights);
  write_array(json, "loss_changes", tree.loss_changes);
  write_array(json, "sum_hessian", tree.sum_hessian);
  write_array(json, "categories", tree.categories);
  write_array(json, "categories_nodes", tree.categories_nodes);
  write_array(json, "categories_segments", tree.categories_segments);
  write_array(json, "categories_sizes", tree.categories_sizes);
  json.end_object();
}

}  // namespace

Result<std::string> export_xgboost_json(const Bundle& bundle) {
  const auto* trees = dynamic_cast<const TreeEnsembleModel*>(&bundle.model());
  if (trees == nullptr) {
    return invalid_argument("XGBoost JSON holds tree ensembles; this bundle's model is " +
                            std::string(bundle.model().family()) + " (export it with --format onnx)");
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::vector<std::string> names, pass_through_features(bundle, "XGBoost JSON"));
  const std::size_t groups = trees->output_count();
  Task task = bundle.task();

  std::vector<XgboostTree> converted;
  std::vector<std::uint32_t> groups_of;
  for (std::size_t group = 0; group < groups; ++group) {
    converted.push_back(constant_tree(trees->base_margin()));
    groups_of.push_back(static_cast<std::uint32_t>(group));
  }
  for (std::size_t tree = 0; tree < trees->roots().size(); ++tree) {
    converted.push_back(convert_tree(*trees, trees->roots()[tree]));
    groups_of.push_back(trees->tree_group(tree));
  }

  JsonWriter json;
  json.begin_object();
  json.key("version").begin_array().value(1).value(7).value(4).end_array();
  json.key("learner").begin_object();
  json.key("attributes").begin_object().end_object();
  json.key("feature_names").begin_array();
  for (const auto& name : names) json.value(name);
  json.end_array();
  json.key("feature_types").begin_array();
  for (const auto& feature : bundle.preprocessor().features()) {
    json.value(feature.type == data::ColumnType::kCategorical ? "c" : "float");
  }
  json.end_array();
  json.key("gradient_booster").begin_object();
  json.key("model").begin_object();
  json.key("gbtree_model_param").begin_object();
  json.key("num_parallel_tree").value("1").key("num_trees").value(std::to_string(converted.size()));
  json.key("size_leaf_vector").value("0").end_object();
  write_array(json, "tree_info", groups_of);
  json.key("trees").begin_array();
  for (std::size_t index = 0; index < converted.size(); ++index) {
    write_tree(json, converted[index], index, names.size());
  }
  json.end_array();
  json.end_object();  // model
  json.key("name").value("gbtree");
  json.end_object();  // gradient_booster
  json.key("learner_model_param").begin_object();
  // Margin 0 before the trees: logit(0.5) for logistic, 0 otherwise.
  json.key("base_score").value(task == Task::kBinaryClassification ? "5E-1" : "0");
  json.key("boost_from_average").value("1");
  json.key("num_class").value(task == Task::kMulticlassClassification ? std::to_string(groups) : "0");
  json.key("num_feature").value(std::to_string(names.size()));
  json.key("num_target").value("1");
  json.end_object();
  json.key("objective").begin_object();
  if (task == Task::kBinaryClassification) {
    json.key("name").value("binary:logistic");
    json.key("reg_loss_param").begin_object().key("scale_pos_weight").value("1").end_object();
  } else if (task == Task::kMulticlassClassification) {
    json.key("name").value("multi:softprob");
    json.key("softmax_multiclass_param").begin_object().key("num_class").value(std::to_string(groups)).end_object();
  } else {
    // Every regression objective here predicts the margin itself; squared error says so.
    json.key("name").value("reg:squarederror");
    json.key("reg_loss_param").begin_object().key("scale_pos_weight").value("1").end_object();
  }
  json.end_object();  // objective
  json.end_object();  // learner
  json.end_object();
  return json.str();
}

}  // namespace slipway::model
