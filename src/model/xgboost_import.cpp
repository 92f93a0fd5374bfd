// XGBoost JSON model import. The format and its prediction semantics are summarized in
// ../shared/reference/trees.md §2 (from XGBoost's doc/model.schema and a 1.7.4 model).
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "slipway/model.h"

namespace slipway::model {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

Status not_xgboost(std::string_view what) {
  return invalid_argument("not an XGBoost JSON model: " + std::string(what));
}

// XGBoost stores most parameters as strings ("5E-1"); 3.1 stores base_score as "[5E-1]".
// Every input is a named column of the bundle; past this, a model is not one Slipway serves.
constexpr std::size_t kMaxImportedFeatures = 100'000;

Result<double> number_in_string(object parent, std::string_view key) {
  std::string_view text;
  if (parent[key].get(text) != simdjson::SUCCESS) return not_xgboost("'" + std::string(key) + "' is missing");
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  double value = 0;
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) {
    return not_xgboost("'" + std::string(key) + "' is not a number");
  }
  return value;
}

template <typename T>
Result<std::vector<T>> numbers(object tree, std::string_view key, std::size_t expected, std::size_t tree_index) {
  std::vector<T> values;
  array items;
  if (tree[key].get(items) != simdjson::SUCCESS) {
    return not_xgboost("tree " + std::to_string(tree_index) + " has no '" + std::string(key) + "' array");
  }
  for (element item : items) {
    if constexpr (std::is_floating_point_v<T>) {
      double value = 0;
      if (item.is_null()) {
        value = std::numeric_limits<double>::quiet_NaN();  // was a bare NaN; see without_bare_nans
      } else if (item.get(value) != simdjson::SUCCESS) {
        return not_xgboost("tree " + std::to_string(tree_index) + " '" + std::string(key) + "' holds a non-number");
      }
      values.push_back(static_cast<T>(value));
    } else {
      std::int64_t value = 0;
      bool flag = false;
      if (item.get(value) == simdjson::SUCCESS) {
        values.push_back(static_cast<T>(value));
      } else if (item.get(flag) == simdjson::SUCCESS) {
        values.push_back(static_cast<T>(flag ? 1 : 0));
      } else {
        return not_xgboost("tree " + std::to_string(tree_index) + " '" + std::string(key) + "' holds a non-integer");
      }
    }
  }
  if (values.size() != expected) {
    return not_xgboost("tree " + std::to_string(tree_index) + " has " + std::to_string(values.size()) + " '" +
                       std::string(key) + "' entries for " + std::to_string(expected) + " nodes");
  }
  return values;
}

// Appends one XGBoost tree (struct-of-arrays, node 0 = root) to the flat node array.
Status append_tree(object tree, std::size_t tree_index, std::size_t feature_count, TreeEnsembleData& ensemble) {
  auto& nodes = ensemble.nodes;
  auto& cover = ensemble.cover;
  auto& gain = ensemble.gain;
  array left_array;
  if (tree["left_children"].get(left_array) != simdjson::SUCCESS) {
    return not_xgboost("tree " + std::to_string(tree_index) + " has no 'left_children'");
  }
  std::size_t count = left_array.size();
  if (count == 0) return not_xgboost("tree " + std::to_string(tree_index) + " has no nodes");
  SLIPWAY_ASSIGN_OR_RETURN(auto left, numbers<std::int64_t>(tree, "left_children", count, tree_index));
  SLIPWAY_ASSIGN_OR_RETURN(auto right, numbers<std::int64_t>(tree, "right_children", count, tree_index));
  SLIPWAY_ASSIGN_OR_RETURN(auto features, numbers<std::int64_t>(tree, "split_indices", count, tree_index));
  // Thresholds are float32 in XGBoost; parsing them as float keeps rows that sit exactly on a
  // cut going the same way.
  SLIPWAY_ASSIGN_OR_RETURN(auto conditions, numbers<float>(tree, "split_conditions", count, tree_index));
  SLIPWAY_ASSIGN_OR_RETURN(auto default_left, numbers<std::int64_t>(tree, "default_left", count, tree_index));
  // Categorical splits: node categories_nodes[k] sends categories[segments[k], +sizes[k]) right.
  std::vector<std::int64_t> split_types(count, 0);
  if (tree["split_type"].error() == simdjson::SUCCESS) {
    SLIPWAY_ASSIGN_OR_RETURN(split_types, numbers<std::int64_t>(tree, "split_type", count, tree_index));
  }
  std::vector<std::int64_t> categorical_nodes;
  std::vector<std::int64_t> segments;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> categories;
  array categorical_node_array;
  if (tree["categories_nodes"].get(categorical_node_array) == simdjson::SUCCESS && categorical_node_array.size() > 0) {
    std::size_t entries = categorical_node_array.size();
    SLIPWAY_ASSIGN_OR_RETURN(categorical_nodes, numbers<std::int64_t>(tree, "categories_nodes", entries, tree_index));
    SLIPWAY_ASSIGN_OR_RETURN(segments, numbers<std::int64_t>(tree, "categories_segments", entries, tree_index));
    SLIPWAY_ASSIGN_OR_RETURN(sizes, numbers<std::int64_t>(tree, "categories_sizes", entries, tree_index));
    array category_array;
    if (tree["categories"].get(category_array) != simdjson::SUCCESS) {
      return not_xgboost("tree " + std::to_string(tree_index) + " has categorical nodes but no 'categories'");
    }
    SLIPWAY_ASSIGN_OR_RETURN(categories, numbers<std::int64_t>(tree, "categories", category_array.size(), tree_index));
  }
  // Training statistics, for explanations and importance: optional, all or nothing.
  auto hessians = numbers<float>(tree, "sum_hessian", count, tree_index);
  auto losses = numbers<float>(tree, "loss_changes", count, tree_index);
  if (hessians.ok() && losses.ok() && cover.size() == nodes.size()) {
    cover.insert(cover.end(), hessians->begin(), hessians->end());
    gain.insert(gain.end(), losses->begin(), losses->end());
  } else {
    cover.clear();
    gain.clear();
  }
  auto offset = static_cast<std::uint32_t>(nodes.size());
  ensemble.roots.push_back(offset);
  for (std::size_t node = 0; node < count; ++node) {
    TreeNode flat;
    flat.value = conditions[node];
    if (left[node] == -1) {
      flat.feature_and_flags = TreeNode::kLeafFlag;
    } else {
      if (left[node] < 0 || right[node] < 0 || static_cast<std::size_t>(left[node]) >= count ||
          static_cast<std::size_t>(right[node]) >= count) {
        return not_xgboost("tree " + std::to_string(tree_index) + " node " + std::to_string(node) +
                           " has a child out of range");
      }
      if (features[node] < 0 || static_cast<std::size_t>(features[node]) >= feature_count) {
        return invalid_argument("tree " + std::to_string(tree_index) + " splits on feature " +
                                std::to_string(features[node]) + " but the model declares " +
                                std::to_string(feature_count) + " features");
      }
      flat.feature_and_flags =
          static_cast<std::uint32_t>(features[node]) | (default_left[node] != 0 ? TreeNode::kDefaultLeftFlag : 0U);
      flat.left = offset + static_cast<std::uint32_t>(left[node]);
      flat.right = offset + static_cast<std::uint32_t>(right[node]);
      if (split_types[node] != 0) {
        auto entry = std::find(categorical_nodes.begin(), categorical_nodes.end(), static_cast<std::int64_t>(node));
        if (entry == categorical_nodes.end()) {
          return not_xgboost("tree " + std::to_string(tree_index) + " node " + std::to_string(node) +
                             " is categorical but lists no categories");
        }
        auto k = static_cast<std::size_t>(entry - categorical_nodes.begin());
        if (segments[k] < 0 || sizes[k] < 0 || static_cast<std::size_t>(segments[k] + sizes[k]) > categories.size()) {
          return not_xgboost("tree " + std::to_string(tree_index) + " has a category segment out of range");
        }
        std::int64_t largest = 0;
        for (std::int64_t i = segments[k]; i < segments[k] + sizes[k]; ++i) {
          auto code = categories[static_cast<std::size_t>(i)];
          if (code < 0 || code > (1 << 24)) return not_xgboost("a category code is out of range");
          largest = std::max(largest, code);
        }
        auto words = static_cast<std::uint32_t>(largest / 32 + 1);
        auto set_offset = static_cast<std::uint32_t>(ensemble.category_sets.size());
        ensemble.category_sets.push_back(words);
        ensemble.category_sets.resize(ensemble.category_sets.size() + words, 0);
        for (std::int64_t i = segments[k]; i < segments[k] + sizes[k]; ++i) {
          auto code = static_cast<std::uint32_t>(categories[static_cast<std::size_t>(i)]);
          ensemble.category_sets[set_offset + 1 + code / 32] |= 1U << (code % 32);
        }
        flat.feature_and_flags |= TreeNode::kCategoricalFlag;
        flat.value = TreeNode::category_set_value(set_offset);
      }
    }
    nodes.push_back(flat);
  }
  return {};
}

// XGBoost writes the split condition of a categorical node as a bare NaN, which is not JSON. The
// tokens NaN, Infinity and -Infinity outside strings become null, keeping every other byte.
std::string without_bare_nans(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false;
  for (std::size_t at = 0; at < json.size(); ++at) {
    char c = json[at];
    if (in_string) {
      out += c;
      if (c == '\\' && at + 1 < json.size()) {
        out += json[++at];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view token : {"NaN", "-Infinity", "Infinity"}) {
      if (!in_string && json.substr(at, token.size()) == token) {
        out += "null";
        at += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<const Bundle>> import_xgboost_json(std::string_view json, const XgboostImportOptions& options) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json.find("NaN") != std::string_view::npos ||
                                         json.find("Infinity") != std::string_view::npos
                                     ? without_bare_nans(json)
                                     : std::string(json));
  object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return not_xgboost("the file is not a JSON object");
  object learner;
  if (root["learner"].get(learner) != simdjson::SUCCESS) return not_xgboost("there is no 'learner' object");

  object booster;
  std::string_view booster_name;
  if (learner["gradient_booster"].get(booster) != simdjson::SUCCESS ||
      booster["name"].get(booster_name) != simdjson::SUCCESS) {
    return not_xgboost("there is no 'learner.gradient_booster'");
  }
  if (booster_name != "gbtree") {
    return invalid_argument("XGBoost booster '" + std::string(booster_name) +
                            "' is not supported; only gbtree models can be imported");
  }
  std::string_view objective;
  if (learner["objective"]["name"].get(objective) != simdjson::SUCCESS)
    return not_xgboost("there is no objective name");
  bool classification = objective == "binary:logistic";
  bool multiclass = objective == "multi:softprob" || objective == "multi:softmax";
  bool regression = objective == "reg:squarederror" || objective == "reg:linear" || objective == "reg:absoluteerror" ||
                    objective == "reg:pseudohubererror";
  if (!classification && !regression && !multiclass) {
    return invalid_argument("XGBoost objective '" + std::string(objective) +
                            "' is not supported; supported: binary:logistic, multi:softprob, multi:softmax, "
                            "reg:squarederror, reg:linear, reg:absoluteerror, reg:pseudohubererror");
  }
  object model_param;
  if (learner["learner_model_param"].get(model_param) != simdjson::SUCCESS) {
    return not_xgboost("there is no 'learner_model_param'");
  }
  SLIPWAY_ASSIGN_OR_RETURN(double feature_count_value, number_in_string(model_param, "num_feature"));
  SLIPWAY_ASSIGN_OR_RETURN(double base_score, number_in_string(model_param, "base_score"));
  // Checked before any allocation sized by it: a hostile num_feature of 20,000,000 once made the
  // import allocate gigabytes of generated names.
  if (!(feature_count_value >= 1 && feature_count_value <= static_cast<double>(TreeNode::kFeatureMask)) ||
      feature_count_value != std::floor(feature_count_value)) {
    return not_xgboost("'num_feature' must be a positive integer");
  }
  auto feature_count = static_cast<std::size_t>(feature_count_value);
  std::size_t class_count = 0;
  if (auto classes = number_in_string(model_param, "num_class"); classes.ok() && *classes > 1) {
    class_count = static_cast<std::size_t>(*classes);
  }
  if (multiclass != (class_count > 1)) {
    return invalid_argument("the model's objective '" + std::string(objective) + "' and its num_class (" +
                            std::to_string(class_count) + ") disagree");
  }

  object gbtree;
  array trees;
  if (booster["model"].get(gbtree) != simdjson::SUCCESS || gbtree["trees"].get(trees) != simdjson::SUCCESS) {
    return not_xgboost("there is no 'gradient_booster.model.trees' array");
  }
  TreeEnsembleData ensemble;
  ensemble.group_count = std::max<std::size_t>(class_count, 1);
  std::size_t tree_index = 0;
  for (element item : trees) {
    object tree;
    if (item.get(tree) != simdjson::SUCCESS) return not_xgboost("'trees' holds a non-object");
    SLIPWAY_RETURN_IF_ERROR(append_tree(tree, tree_index++, feature_count, ensemble));
  }
  std::size_t features_used = 0;
  for (const auto& node : ensemble.nodes) {
    if (!node.is_leaf()) features_used = std::max<std::size_t>(features_used, node.feature() + 1);
  }

  std::vector<std::string> names;
  array feature_names;
  if (learner["feature_names"].get(feature_names) == simdjson::SUCCESS) {
    for (element item : feature_names) {
      std::string_view name;
      if (item.get(name) != simdjson::SUCCESS) return not_xgboost("'feature_names' holds a non-string");
      names.emplace_back(name);
    }
  }
  if (!options.feature_names.empty()) {
    if (!names.empty() && names != options.feature_names) {
      return invalid_argument("the given feature names differ from the names saved in the model");
    }
    names = options.feature_names;
  }
  if (names.empty()) {
    // Unnamed features past the last one a tree splits on change no prediction: past the limit
    // they are dropped, so the bundle's size follows what the trees use.
    if (feature_count > kMaxImportedFeatures && features_used <= kMaxImportedFeatures) {
      log_warn("the model declares " + std::to_string(feature_count) + " features but its trees use only the first " +
               std::to_string(features_used) + "; the bundle takes those");
      feature_count = std::max<std::size_t>(features_used, 1);
    }
    if (feature_count > kMaxImportedFeatures) {
      return invalid_argument("the model's trees use " + std::to_string(features_used) + " features, more than the " +
                              std::to_string(kMaxImportedFeatures) + " an imported model may have");
    }
    for (std::size_t index = 0; index < feature_count; ++index) names.push_back("f" + std::to_string(index));
  }
  if (names.size() != feature_count) {
    return invalid_argument("the model has " + std::to_string(feature_count) + " features but " +
                            std::to_string(names.size()) + " feature names were given");
  }
  if (feature_count > kMaxImportedFeatures) {
    return invalid_argument("the model has " + std::to_string(feature_count) + " features, more than the " +
                            std::to_string(kMaxImportedFeatures) + " an imported model may have");
  }
  ensemble.input_width = feature_count;
  array tree_info;
  if (gbtree["tree_info"].get(tree_info) == simdjson::SUCCESS && multiclass) {
    for (element item : tree_info) {
      std::int64_t group = 0;
      if (item.get(group) != simdjson::SUCCESS || group < 0 || static_cast<std::size_t>(group) >= class_count) {
        return not_xgboost("'tree_info' holds an output group outside [0, num_class)");
      }
      ensemble.tree_groups.push_back(static_cast<std::uint32_t>(group));
    }
  } else if (tree_info.size() > 0 && !multiclass) {
    for (element item : tree_info) {
      std::int64_t group = 0;
      if (item.get(group) == simdjson::SUCCESS && group != 0) {
        return invalid_argument("the model has several output groups (num_target > 1), which is not supported");
      }
    }
  }
  if (multiclass && ensemble.tree_groups.size() != ensemble.roots.size()) {
    return not_xgboost("a multiclass model needs one 'tree_info' entry per tree");
  }
  if (auto status = TreeEnsembleModel::validate(ensemble); !status.ok()) return not_xgboost(status.message());

  // base_score is stored in response space; the margin starts at its inverse link, computed in
  // float as XGBoost does.
  // Softmax takes the margins as they are: base_score is added to every class's margin.
  float base_margin = static_cast<float>(base_score);
  if (classification) {
    if (!(base_score > 0.0 && base_score < 1.0)) {
      return invalid_argument("base_score " + std::to_string(base_score) + " is not a probability");
    }
    base_margin = -std::log(1.0f / static_cast<float>(base_score) - 1.0f);
  }

  std::vector<FeatureTransform> inputs;
  for (const auto& name : names) {
    FeatureTransform input;
    input.name = name;
    input.impute_value = std::nan("");  // trees route missing values themselves
    inputs.push_back(std::move(input));
  }
  Manifest manifest;
  manifest.task = classification ? Task::kBinaryClassification
                  : multiclass   ? Task::kMulticlassClassification
                                 : Task::kRegression;
  manifest.target = options.target;
  if (classification) manifest.class_labels = {"0", "1"};
  for (std::size_t label = 0; label < class_count; ++label) manifest.class_labels.push_back(std::to_string(label));
  manifest.created_by = "slipway " + std::string(slipway_version()) + " import xgboost";
  manifest.code_version = std::string(slipway_code_version());
  manifest.split = "imported";
  manifest.params = {{"model", "xgboost"},
                     {"objective", std::string(objective)},
                     {"source", options.source},
                     {"trees", std::to_string(ensemble.roots.size())}};
  array version;
  if (root["version"].get(version) == simdjson::SUCCESS) {
    std::string text;
    for (element part : version) {
      std::int64_t number = 0;
      if (part.get(number) == simdjson::SUCCESS) text += (text.empty() ? "" : ".") + std::to_string(number);
    }
    manifest.params["xgboost_version"] = text;
  }
  if (ensemble.cover.size() != ensemble.nodes.size()) {  // a tree without statistics: keep none
    ensemble.cover.clear();
    ensemble.gain.clear();
  }
  ensemble.base_margin = base_margin;
  auto model = std::make_shared<TreeEnsembleModel>(std::move(ensemble));
  return std::make_shared<const Bundle>(std::move(manifest), Preprocessor(std::move(inputs)), std::move(model));
}

}  // namespace slipway::model
