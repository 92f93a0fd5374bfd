#include <simdjson.h>

#include <cmath>
#include <cstring>

#include "model/bundle_file.h"
#include "slipway/model.h"

namespace slipway::model {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

constexpr std::string_view kWeightsSection = "linear.weights";
constexpr std::string_view kNodesSection = "trees.nodes";
constexpr std::string_view kRootsSection = "trees.roots";
constexpr std::string_view kCoverSection = "trees.cover";
constexpr std::string_view kGainSection = "trees.gain";
constexpr std::string_view kCategoriesSection = "trees.categories";
constexpr std::string_view kGroupsSection = "trees.groups";

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  auto bytes = std::as_bytes(std::span(values));
  return {bytes.begin(), bytes.end()};
}

template <typename T>
Result<std::vector<T>> values_of(std::span<const std::byte> bytes, std::string_view section) {
  if (bytes.size() % sizeof(T) != 0)
    return data_loss("bundle section '" + std::string(section) + "' has a partial element");
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

Task parse_task(std::string_view name, bool& known) {
  known = true;
  if (name == "binary_classification") return Task::kBinaryClassification;
  if (name == "regression") return Task::kRegression;
  if (name == "multiclass_classification") return Task::kMulticlassClassification;
  known = false;
  return Task::kRegression;
}

// Typed access to manifest fields with one error sentence naming the field.
class ManifestReader {
 public:
  Status field(object parent, std::string_view key, element& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status string_field(object parent, std::string_view key, std::string& out) const {
    std::string_view view;
    if (parent[key].get(view) != simdjson::SUCCESS) return missing(key);
    out = std::string(view);
    return {};
  }
  Status double_field(object parent, std::string_view key, double& out) const {
    element value;
    if (parent[key].get(value) != simdjson::SUCCESS) return missing(key);
    if (value.is_null()) {
      out = std::nan("");
      return {};
    }
    if (value.get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status uint_field(object parent, std::string_view key, std::uint64_t& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status object_field(object parent, std::string_view key, object& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status array_field(object parent, std::string_view key, array& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status strings_field(object parent, std::string_view key, std::vector<std::string>& out) const {
    array items;
    SLIPWAY_RETURN_IF_ERROR(array_field(parent, key, items));
    for (element item : items) {
      std::string_view text;
      if (item.get(text) != simdjson::SUCCESS) return missing(key);
      out.emplace_back(text);
    }
    return {};
  }

 private:
  static Status missing(std::string_view key) {
    return data_loss("the bundle manifest's field '" + std::string(key) + "' is missing or has the wrong type");
  }
};

void write_inputs(JsonWriter& json, const Preprocessor& preprocessor) {
  json.key("inputs").begin_array();
  for (const auto& feature : preprocessor.features()) {
    json.begin_object();
    json.key("name").value(feature.name);
    json.key("type").value(data::column_type_name(feature.type));
    if (feature.type == data::ColumnType::kNumeric) {
      json.key("impute").value(feature.impute_value);
    } else {
      json.key("encoding").value(feature.encoding == CategoricalEncoding::kOneHot ? "onehot" : "ordinal");
      json.key("levels").begin_array();
      for (const auto& level : feature.levels) json.value(level);
      json.end_array();
    }
    json.key("center").value(feature.center);
    json.key("scale").value(feature.scale);
    json.end_object();
  }
  json.end_array();
}

Result<Preprocessor> read_inputs(const ManifestReader& reader, object root) {
  array inputs;
  SLIPWAY_RETURN_IF_ERROR(reader.array_field(root, "inputs", inputs));
  std::vector<FeatureTransform> features;
  for (element item : inputs) {
    object input;
    if (item.get(input) != simdjson::SUCCESS) return data_loss("the bundle manifest's 'inputs' must hold objects");
    FeatureTransform feature;
    std::string type;
    SLIPWAY_RETURN_IF_ERROR(reader.string_field(input, "name", feature.name));
    SLIPWAY_RETURN_IF_ERROR(reader.string_field(input, "type", type));
    SLIPWAY_RETURN_IF_ERROR(reader.double_field(input, "center", feature.center));
    SLIPWAY_RETURN_IF_ERROR(reader.double_field(input, "scale", feature.scale));
    if (type == "numeric") {
      feature.type = data::ColumnType::kNumeric;
      SLIPWAY_RETURN_IF_ERROR(reader.double_field(input, "impute", feature.impute_value));
    } else if (type == "categorical") {
      feature.type = data::ColumnType::kCategorical;
      std::string encoding;
      SLIPWAY_RETURN_IF_ERROR(reader.string_field(input, "encoding", encoding));
      if (encoding != "onehot" && encoding != "ordinal")
        return data_loss("unknown categorical encoding '" + encoding + "'");
      feature.encoding = encoding == "onehot" ? CategoricalEncoding::kOneHot : CategoricalEncoding::kOrdinal;
      SLIPWAY_RETURN_IF_ERROR(reader.strings_field(input, "levels", feature.levels));
    } else {
      return data_loss("unknown input type '" + type + "' in the bundle manifest");
    }
    if (!(feature.scale > 0.0)) return data_loss("input '" + feature.name + "' has a non-positive scale");
    features.push_back(std::move(feature));
  }
  return Preprocessor(std::move(features));
}

}  // namespace

std::string_view task_name(Task task) {
  switch (task) {
    case Task::kBinaryClassification:
      return "binary_classification";
    case Task::kMulticlassClassification:
      return "multiclass_classification";
    case Task::kRegression:
      return "regression";
  }
  return "regression";
}

Bundle::Bundle(Manifest manifest, Preprocessor preprocessor, std::shared_ptr<const Model> model)
    : manifest_(std::move(manifest)), preprocessor_(std::move(preprocessor)), model_(std::move(model)) {}

Result<Predictions> Bundle::predict(const data::Table& batch) const {
  std::vector<float> features;
  SLIPWAY_RETURN_IF_ERROR(preprocessor_.transform(batch, features));
  return predict_preprocessed(features, batch.row_count());
}

std::size_t Bundle::memory_bytes() const { return sizeof(*this) + preprocessor_.memory_bytes() + model_->memory_bytes(); }

Predictions Bundle::predict_preprocessed(std::span<const float> features, std::size_t rows) const {
  Predictions predictions;
  predictions.rows = rows;
  predictions.columns = model_->output_count();
  predictions.scores.resize(rows * predictions.columns);
  model_->predict_margin(features, rows, predictions.scores);
  if (manifest_.task == Task::kBinaryClassification) {
    for (float& score : predictions.scores)
      score = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(score))));
  } else if (manifest_.task == Task::kMulticlassClassification) {
    for (std::size_t row = 0; row < rows; ++row) softmax(std::span(predictions.scores).subspan(row * predictions.columns, predictions.columns));
  }
  return predictions;
}

void softmax(std::span<float> margins) {
  float largest = *std::max_element(margins.begin(), margins.end());
  double total = 0;
  for (float& margin : margins) {
    margin = static_cast<float>(std::exp(static_cast<double>(margin - largest)));
    total += margin;
  }
  for (float& margin : margins) margin = static_cast<float>(margin / total);
}

std::shared_ptr<const Bundle> Bundle::with_metrics(std::map<std::string, double> metrics) const {
  Manifest manifest = manifest_;
  manifest.metrics = std::move(metrics);
  return std::make_shared<const Bundle>(std::move(manifest), preprocessor_, model_);
}

const std::string& Bundle::predicted_label(const Predictions& predictions, std::size_t row) const {
  if (manifest_.task == Task::kBinaryClassification) {
    return manifest_.class_labels[predictions.scores[row] >= 0.5f ? 1 : 0];
  }
  auto scores = std::span(predictions.scores).subspan(row * predictions.columns, predictions.columns);
  return manifest_.class_labels[static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin())];
}

std::vector<std::byte> Bundle::serialize() const {
  std::vector<SectionBytes> sections;
  const auto* linear = dynamic_cast<const LinearModel*>(model_.get());
  const auto* trees = dynamic_cast<const TreeEnsembleModel*>(model_.get());
  if (linear != nullptr) sections.push_back({std::string(kWeightsSection), bytes_of(linear->weights())});
  if (trees != nullptr) {
    sections.push_back({std::string(kNodesSection), bytes_of(trees->nodes())});
    sections.push_back({std::string(kRootsSection), bytes_of(trees->roots())});
    if (trees->has_statistics()) {
      sections.push_back({std::string(kCoverSection), bytes_of(trees->cover())});
      sections.push_back({std::string(kGainSection), bytes_of(trees->gain())});
    }
    if (!trees->data().category_sets.empty()) {
      sections.push_back({std::string(kCategoriesSection), bytes_of(trees->data().category_sets)});
    }
    if (!trees->data().tree_groups.empty()) {
      sections.push_back({std::string(kGroupsSection), bytes_of(trees->data().tree_groups)});
    }
  }
  auto offsets = section_offsets(sections);

  JsonWriter json;
  json.begin_object();
  json.key("format").value("slipway.bundle");
  json.key("format_version").value(static_cast<std::int64_t>(kBundleFormatVersion));
  json.key("byte_order").value("little");
  json.key("task").value(task_name(manifest_.task));
  json.key("target").value(manifest_.target);
  json.key("class_labels").begin_array();
  for (const auto& label : manifest_.class_labels) json.value(label);
  json.end_array();
  write_inputs(json, preprocessor_);
  json.key("model").begin_object();
  json.key("family").value(model_->family());
  json.key("width").value(static_cast<std::uint64_t>(model_->input_width()));
  if (linear != nullptr) {
    json.key("bias").value(linear->bias());
    json.key("weights_section").value(kWeightsSection);
    json.key("weights_dtype").value("float64");
  }
  if (trees != nullptr) {
    json.key("base_margin").value(trees->base_margin());
    json.key("tree_count").value(static_cast<std::uint64_t>(trees->roots().size()));
    json.key("node_count").value(static_cast<std::uint64_t>(trees->nodes().size()));
    json.key("nodes_section").value(kNodesSection);
    json.key("roots_section").value(kRootsSection);
    json.key("group_count").value(static_cast<std::uint64_t>(trees->output_count()));
    json.key("decision").value(
        "left if x < threshold (float32); at a categorical node right if x's code is in the node's set; NaN follows "
        "the node's default direction");
  }
  json.end_object();
  json.key("postprocess").begin_object();
  json.key("score").value(manifest_.task == Task::kBinaryClassification       ? "sigmoid"
                          : manifest_.task == Task::kMulticlassClassification ? "softmax"
                                                                               : "identity");
  json.key("threshold").value(0.5);
  json.end_object();
  json.key("lineage").begin_object();
  json.key("created_by").value(manifest_.created_by);
  json.key("code_version").value(manifest_.code_version);
  json.key("data_fingerprint").value(manifest_.data_fingerprint);
  json.key("seed").value(static_cast<std::uint64_t>(manifest_.seed));
  json.key("split").value(manifest_.split);
  json.key("train_rows").value(static_cast<std::uint64_t>(manifest_.train_rows));
  json.key("params").begin_object();
  for (const auto& [name, value] : manifest_.params) json.key(name).value(value);
  json.end_object();
  json.end_object();
  json.key("metrics").begin_object();
  for (const auto& [name, value] : manifest_.metrics) json.key(name).value(value);
  json.end_object();
  json.key("sections").begin_array();
  for (std::size_t index = 0; index < sections.size(); ++index) {
    json.begin_object();
    json.key("name").value(sections[index].name);
    json.key("offset").value(static_cast<std::uint64_t>(offsets[index]));
    json.key("size").value(static_cast<std::uint64_t>(sections[index].bytes.size()));
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return assemble_bundle_file(json.str(), sections);
}

Result<std::shared_ptr<const Bundle>> Bundle::parse(std::span<const std::byte> bytes,
                                                    std::optional<std::string_view> expected_sha256) {
  SLIPWAY_ASSIGN_OR_RETURN(BundleFileView view, open_bundle_file(bytes, expected_sha256));
  simdjson::dom::parser parser;
  simdjson::padded_string padded(view.manifest_json);
  object root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return data_loss("the bundle manifest is not a JSON object");
  ManifestReader reader;

  Manifest manifest;
  std::string task;
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(root, "task", task));
  bool known = false;
  manifest.task = parse_task(task, known);
  if (!known) return data_loss("unknown task '" + task + "' in the bundle manifest");
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(root, "target", manifest.target));
  SLIPWAY_RETURN_IF_ERROR(reader.strings_field(root, "class_labels", manifest.class_labels));
  if (manifest.task == Task::kBinaryClassification && manifest.class_labels.size() != 2) {
    return data_loss("a binary classification bundle needs two class labels");
  }
  if (manifest.task == Task::kMulticlassClassification && manifest.class_labels.size() < 2) {
    return data_loss("a multiclass bundle needs its class labels");
  }
  SLIPWAY_ASSIGN_OR_RETURN(Preprocessor preprocessor, read_inputs(reader, root));

  object lineage;
  SLIPWAY_RETURN_IF_ERROR(reader.object_field(root, "lineage", lineage));
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(lineage, "created_by", manifest.created_by));
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(lineage, "code_version", manifest.code_version));
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(lineage, "data_fingerprint", manifest.data_fingerprint));
  SLIPWAY_RETURN_IF_ERROR(reader.uint_field(lineage, "seed", manifest.seed));
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(lineage, "split", manifest.split));
  std::uint64_t train_rows = 0;
  SLIPWAY_RETURN_IF_ERROR(reader.uint_field(lineage, "train_rows", train_rows));
  manifest.train_rows = train_rows;
  object params;
  SLIPWAY_RETURN_IF_ERROR(reader.object_field(lineage, "params", params));
  for (auto field : params) {
    std::string_view value;
    if (field.value.get(value) != simdjson::SUCCESS) return data_loss("bundle parameters must be strings");
    manifest.params.emplace(std::string(field.key), std::string(value));
  }
  object metrics;
  SLIPWAY_RETURN_IF_ERROR(reader.object_field(root, "metrics", metrics));
  for (auto field : metrics) {
    double value = std::nan("");
    if (!field.value.is_null() && field.value.get(value) != simdjson::SUCCESS) {
      return data_loss("bundle metric '" + std::string(field.key) + "' is not a number");
    }
    manifest.metrics.emplace(std::string(field.key), value);
  }

  object model_object;
  SLIPWAY_RETURN_IF_ERROR(reader.object_field(root, "model", model_object));
  std::string family;
  SLIPWAY_RETURN_IF_ERROR(reader.string_field(model_object, "family", family));
  std::uint64_t width = 0;
  SLIPWAY_RETURN_IF_ERROR(reader.uint_field(model_object, "width", width));
  if (width != preprocessor.output_width()) {
    return data_loss("the bundle's model expects " + std::to_string(width) + " features but its preprocessing makes " +
                     std::to_string(preprocessor.output_width()));
  }
  if (family != "linear" && family != "tree_ensemble") {
    return invalid_argument("model family '" + family + "' is not supported by this Slipway");
  }

  array section_table;
  SLIPWAY_RETURN_IF_ERROR(reader.array_field(root, "sections", section_table));
  std::map<std::string, std::span<const std::byte>, std::less<>> sections;
  for (element item : section_table) {
    object section;
    std::string name;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    if (item.get(section) != simdjson::SUCCESS) return data_loss("the bundle's section table is malformed");
    SLIPWAY_RETURN_IF_ERROR(reader.string_field(section, "name", name));
    SLIPWAY_RETURN_IF_ERROR(reader.uint_field(section, "offset", offset));
    SLIPWAY_RETURN_IF_ERROR(reader.uint_field(section, "size", size));
    if (offset > view.data_area.size() || size > view.data_area.size() - offset) {
      return data_loss("bundle section '" + name + "' lies outside the file");
    }
    sections[name] = view.data_area.subspan(offset, size);
  }
  auto section = [&](std::string_view name) -> Result<std::span<const std::byte>> {
    auto found = sections.find(name);
    if (found == sections.end()) return data_loss("the bundle has no '" + std::string(name) + "' section");
    return found->second;
  };

  std::shared_ptr<const Model> model;
  if (family == "linear") {
    double bias = 0.0;
    SLIPWAY_RETURN_IF_ERROR(reader.double_field(model_object, "bias", bias));
    SLIPWAY_ASSIGN_OR_RETURN(auto weight_bytes, section(kWeightsSection));
    SLIPWAY_ASSIGN_OR_RETURN(auto weights, values_of<double>(weight_bytes, kWeightsSection));
    if (weights.size() != width) return data_loss("the bundle's weight section has the wrong size");
    model = std::make_shared<LinearModel>(std::move(weights), bias);
  } else {
    TreeEnsembleData trees;
    trees.input_width = width;
    double base_margin = 0.0;
    SLIPWAY_RETURN_IF_ERROR(reader.double_field(model_object, "base_margin", base_margin));
    trees.base_margin = static_cast<float>(base_margin);
    // Bundles written before multiclass support have no group count: one output.
    std::uint64_t group_count = 1;
    if (model_object["group_count"].error() == simdjson::SUCCESS) {
      SLIPWAY_RETURN_IF_ERROR(reader.uint_field(model_object, "group_count", group_count));
    }
    trees.group_count = group_count;
    SLIPWAY_ASSIGN_OR_RETURN(auto node_bytes, section(kNodesSection));
    SLIPWAY_ASSIGN_OR_RETURN(auto root_bytes, section(kRootsSection));
    SLIPWAY_ASSIGN_OR_RETURN(trees.nodes, values_of<TreeNode>(node_bytes, kNodesSection));
    SLIPWAY_ASSIGN_OR_RETURN(trees.roots, values_of<std::uint32_t>(root_bytes, kRootsSection));
    auto optional_section = [&](std::string_view name) {
      auto found = sections.find(name);
      return found == sections.end() ? std::span<const std::byte>() : found->second;
    };
    SLIPWAY_ASSIGN_OR_RETURN(trees.category_sets,
                             values_of<std::uint32_t>(optional_section(kCategoriesSection), kCategoriesSection));
    SLIPWAY_ASSIGN_OR_RETURN(trees.tree_groups, values_of<std::uint32_t>(optional_section(kGroupsSection), kGroupsSection));
    if (sections.count(kCoverSection) != 0) {
      SLIPWAY_ASSIGN_OR_RETURN(trees.cover, values_of<float>(sections.find(kCoverSection)->second, kCoverSection));
      SLIPWAY_ASSIGN_OR_RETURN(auto gain_bytes, section(kGainSection));
      SLIPWAY_ASSIGN_OR_RETURN(trees.gain, values_of<float>(gain_bytes, kGainSection));
      if (trees.cover.size() != trees.nodes.size() || trees.gain.size() != trees.nodes.size()) {
        return data_loss("the bundle's tree statistics do not match its node count");
      }
    }
    if (auto status = TreeEnsembleModel::validate(trees); !status.ok()) {
      return data_loss("the bundle's trees are malformed: " + status.message());
    }
    if ((manifest.task == Task::kMulticlassClassification) != (trees.group_count > 1) ||
        (trees.group_count > 1 && trees.group_count != manifest.class_labels.size())) {
      return data_loss("the bundle's tree groups do not match its task and class labels");
    }
    model = std::make_shared<TreeEnsembleModel>(std::move(trees));
  }
  return std::make_shared<const Bundle>(std::move(manifest), std::move(preprocessor), std::move(model));
}

Result<std::shared_ptr<const Bundle>> Bundle::load(const std::string& path,
                                                   std::optional<std::string_view> expected_sha256) {
  SLIPWAY_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  auto bundle = parse(mapped.bytes(), expected_sha256);
  if (!bundle.ok()) return Status(bundle.status().code(), path + ": " + bundle.status().message());
  return bundle;
}

}  // namespace slipway::model
