#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "model/bundle_file.h"
#include "model/manifest_reader.h"
#include "model/model_family.h"
#include "slipway/model.h"

namespace slipway::model {
namespace {

// A manifest's "profile": malformed is data loss, like any other manifest field.
Result<FeatureProfile> read_feature_profile(simdjson::dom::element element) {
  FeatureProfile feature;
  simdjson::dom::object object;
  std::string_view name, type;
  simdjson::dom::array counts;
  auto broken = [] { return data_loss("the bundle's profile is malformed"); };
  if (element.get(object) != simdjson::SUCCESS || object["name"].get(name) != simdjson::SUCCESS ||
      object["type"].get(type) != simdjson::SUCCESS || object["counts"].get(counts) != simdjson::SUCCESS ||
      object["missing"].get(feature.missing) != simdjson::SUCCESS) {
    return broken();
  }
  if ((type != "numeric" && type != "categorical") || !(feature.missing >= 0)) return broken();
  feature.name = std::string(name);
  feature.type = type == "numeric" ? data::ColumnType::kNumeric : data::ColumnType::kCategorical;
  for (auto count : counts) {
    double value = 0;
    if (count.get(value) != simdjson::SUCCESS || !(value >= 0)) return broken();
    feature.counts.push_back(value);
  }
  simdjson::dom::array values;
  if (feature.type == data::ColumnType::kNumeric) {
    if (object["edges"].get(values) != simdjson::SUCCESS) return broken();
    for (auto edge : values) {
      double value = 0;
      if (edge.get(value) != simdjson::SUCCESS) return broken();
      feature.edges.push_back(value);
    }
    bool fits = feature.edges.empty() ? feature.counts.empty()
                                      : feature.edges.size() >= 2 && feature.counts.size() == feature.edges.size() + 1;
    if (!fits || !std::is_sorted(feature.edges.begin(), feature.edges.end())) return broken();
  } else {
    if (object["levels"].get(values) != simdjson::SUCCESS) return broken();
    for (auto level : values) {
      std::string_view text;
      if (level.get(text) != simdjson::SUCCESS) return broken();
      feature.levels.emplace_back(text);
    }
    if (feature.counts.size() != feature.levels.size() + 1) return broken();
  }
  return feature;
}

Result<DataProfile> read_profile(simdjson::dom::object object) {
  DataProfile profile;
  simdjson::dom::array inputs;
  simdjson::dom::element prediction;
  if (object["inputs"].get(inputs) != simdjson::SUCCESS || object["prediction"].get(prediction) != simdjson::SUCCESS) {
    return data_loss("the bundle's profile is malformed");
  }
  for (auto input : inputs) {
    SLIPWAY_ASSIGN_OR_RETURN(auto feature, read_feature_profile(input));
    profile.inputs.push_back(std::move(feature));
  }
  SLIPWAY_ASSIGN_OR_RETURN(profile.prediction, read_feature_profile(prediction));
  simdjson::dom::array shares;
  if (object["attribution_shares"].get(shares) == simdjson::SUCCESS) {
    for (auto share : shares) {
      double value = 0;
      if (share.get(value) != simdjson::SUCCESS || !(value >= 0 && value <= 1)) {
        return data_loss("the bundle's profile is malformed");
      }
      profile.attribution_shares.push_back(value);
    }
    if (profile.attribution_shares.size() != profile.inputs.size())
      return data_loss("the bundle's profile is malformed");
  }
  return profile;
}

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

Task parse_task(std::string_view name, bool& known) {
  known = true;
  if (name == "binary_classification") return Task::kBinaryClassification;
  if (name == "regression") return Task::kRegression;
  if (name == "multiclass_classification") return Task::kMulticlassClassification;
  known = false;
  return Task::kRegression;
}

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

std::size_t Bundle::memory_bytes() const {
  return sizeof(*this) + preprocessor_.memory_bytes() + model_->memory_bytes();
}

Predictions Bundle::predict_preprocessed(std::span<const float> features, std::size_t rows) const {
  Predictions predictions = predict_margins(features, rows);
  apply_link(predictions);
  return predictions;
}

Predictions Bundle::predict_margins(std::span<const float> features, std::size_t rows) const {
  Predictions predictions;
  predictions.rows = rows;
  predictions.columns = model_->output_count();
  predictions.scores.resize(rows * predictions.columns);
  model_->predict_margin(features, rows, predictions.scores);
  return predictions;
}

void Bundle::apply_link(Predictions& margins) const {
  if (manifest_.task == Task::kBinaryClassification) {
    for (float& score : margins.scores) score = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(score))));
  } else if (manifest_.task == Task::kMulticlassClassification) {
    for (std::size_t row = 0; row < margins.rows; ++row)
      softmax(std::span(margins.scores).subspan(row * margins.columns, margins.columns));
  }
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

std::shared_ptr<const Bundle> Bundle::with_manifest(Manifest manifest) const {
  auto copy = std::make_shared<Bundle>(std::move(manifest), preprocessor_, model_);
  copy->mapping_ = mapping_;
  return copy;
}

std::shared_ptr<const Bundle> Bundle::with_optimization(std::map<std::string, std::string> optimization) const {
  Manifest manifest = manifest_;
  manifest.optimization = std::move(optimization);
  return with_manifest(std::move(manifest));
}

std::shared_ptr<const Bundle> Bundle::with_profile(DataProfile profile) const {
  Manifest manifest = manifest_;
  manifest.profile = std::move(profile);
  return with_manifest(std::move(manifest));
}

std::shared_ptr<const Bundle> Bundle::with_metrics(std::map<std::string, double> metrics) const {
  Manifest manifest = manifest_;
  manifest.metrics = std::move(metrics);
  return with_manifest(std::move(manifest));
}

const std::string& Bundle::predicted_label(const Predictions& predictions, std::size_t row) const {
  if (manifest_.task == Task::kBinaryClassification) {
    return manifest_.class_labels[predictions.scores[row] >= manifest_.decision_threshold ? 1 : 0];
  }
  auto scores = std::span(predictions.scores).subspan(row * predictions.columns, predictions.columns);
  return manifest_
      .class_labels[static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin())];
}

std::vector<std::byte> Bundle::serialize() const {
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
  // The family writes the rest of "model" and its sections. A model of no known family (a
  // programmer's mistake: every Model class in this module has one) gets neither, and parse()
  // refuses the file naming the family.
  std::vector<SectionBytes> sections;
  if (const ModelFamily* family = find_model_family(model_->family()); family != nullptr) {
    FamilyWriter writer(json, sections);
    family->write(*model_, writer);
  }
  json.end_object();
  json.key("postprocess").begin_object();
  json.key("score").value(manifest_.task == Task::kBinaryClassification       ? "sigmoid"
                          : manifest_.task == Task::kMulticlassClassification ? "softmax"
                                                                              : "identity");
  json.key("threshold").value(manifest_.decision_threshold);
  // Only bundles whose threshold was chosen carry the rule, so every other bundle keeps its bytes.
  if (!manifest_.threshold_rule.empty()) json.key("threshold_rule").value(manifest_.threshold_rule);
  json.end_object();
  if (!manifest_.unused_inputs.empty()) {
    json.key("unused_inputs").begin_array();
    for (const auto& name : manifest_.unused_inputs) json.value(name);
    json.end_array();
  }
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
  // Only optimized bundles carry it, so every other bundle keeps its bytes.
  if (!manifest_.optimization.empty()) {
    json.key("optimization").begin_object();
    for (const auto& [name, value] : manifest_.optimization) json.key(name).value(value);
    json.end_object();
  }
  // Only bundles trained with profiles carry one, so every other bundle keeps its bytes.
  if (!manifest_.profile.empty()) {
    auto write_feature = [&json](const FeatureProfile& feature) {
      json.begin_object().key("name").value(feature.name);
      json.key("type").value(data::column_type_name(feature.type));
      if (feature.type == data::ColumnType::kNumeric) {
        json.key("edges").begin_array();
        for (double edge : feature.edges) json.value(edge);
        json.end_array();
      } else {
        json.key("levels").begin_array();
        for (const auto& level : feature.levels) json.value(level);
        json.end_array();
      }
      json.key("counts").begin_array();
      for (double count : feature.counts) json.value(count);
      json.end_array();
      json.key("missing").value(feature.missing).end_object();
    };
    json.key("profile").begin_object().key("inputs").begin_array();
    for (const auto& feature : manifest_.profile.inputs) write_feature(feature);
    json.end_array().key("prediction");
    write_feature(manifest_.profile.prediction);
    if (!manifest_.profile.attribution_shares.empty()) {
      json.key("attribution_shares").begin_array();
      for (double share : manifest_.profile.attribution_shares) json.value(share);
      json.end_array();
    }
    json.end_object();
  }
  auto offsets = section_offsets(sections);
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
  return parse_mapped(bytes, nullptr, expected_sha256);
}

Result<std::shared_ptr<const Bundle>> Bundle::parse_mapped(std::span<const std::byte> bytes,
                                                           std::shared_ptr<const MappedFile> mapping,
                                                           std::optional<std::string_view> expected_sha256) {
  // The checksum (and the expected identity) first: nothing of a damaged file is used.
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
  // Older bundles may lack what came later: postprocess's threshold_rule, unused_inputs.
  object postprocess;
  if (root["postprocess"].get(postprocess) == simdjson::SUCCESS) {
    SLIPWAY_RETURN_IF_ERROR(reader.double_field(postprocess, "threshold", manifest.decision_threshold));
    if (!(manifest.decision_threshold >= 0.0 && manifest.decision_threshold <= 1.0)) {
      return data_loss("the bundle's decision threshold is not in [0, 1]");
    }
    std::string_view rule;
    if (postprocess["threshold_rule"].get(rule) == simdjson::SUCCESS) manifest.threshold_rule = std::string(rule);
  }
  if (root["unused_inputs"].error() != simdjson::NO_SUCH_FIELD) {
    SLIPWAY_RETURN_IF_ERROR(reader.strings_field(root, "unused_inputs", manifest.unused_inputs));
    for (const auto& name : manifest.unused_inputs) {
      if (preprocessor.feature_index(name)) return data_loss("'" + name + "' is both an input and an unused input");
    }
  }

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

  object optimization;
  if (root["optimization"].get(optimization) == simdjson::SUCCESS) {
    for (auto field : optimization) {
      std::string_view value;
      if (field.value.get(value) != simdjson::SUCCESS) return data_loss("bundle optimization fields must be strings");
      manifest.optimization.emplace(std::string(field.key), std::string(value));
    }
  }

  object profile;
  if (root["profile"].get(profile) == simdjson::SUCCESS) {
    SLIPWAY_ASSIGN_OR_RETURN(manifest.profile, read_profile(profile));
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
  const ModelFamily* model_family = find_model_family(family);
  if (model_family == nullptr) {
    return invalid_argument("bundle model family '" + family + "' is not known to this slipway (" +
                            std::string(slipway_version()) + "); upgrade slipway to load it");
  }

  array section_table;
  SLIPWAY_RETURN_IF_ERROR(reader.array_field(root, "sections", section_table));
  FamilyReader::Sections sections;
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

  FamilyReader family_reader(model_object, width, manifest, sections, mapping);
  SLIPWAY_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, model_family->read(family_reader));
  // What Bundle::predict relies on, whatever the family: the model reads the preprocessing's
  // width and writes one margin per class (multiclass) or one.
  std::size_t outputs = manifest.task == Task::kMulticlassClassification ? manifest.class_labels.size() : 1;
  if (model->input_width() != width || model->output_count() != outputs) {
    return data_loss("the bundle's " + family + " model does not match its manifest's width, task or class labels");
  }
  auto bundle = std::make_shared<Bundle>(std::move(manifest), std::move(preprocessor), std::move(model));
  bundle->mapping_ = std::move(mapping);
  return std::shared_ptr<const Bundle>(std::move(bundle));
}

// The mapping stays for the bundle's life: store artifacts are written once and never rewritten,
// so the pages under it never change or vanish (a truncated file would raise SIGBUS).
Result<std::shared_ptr<const Bundle>> Bundle::load(const std::string& path,
                                                   std::optional<std::string_view> expected_sha256) {
  SLIPWAY_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  auto mapping = std::make_shared<const MappedFile>(std::move(mapped));
  auto bundle = parse_mapped(mapping->bytes(), mapping, expected_sha256);
  if (!bundle.ok()) return Status(bundle.status().code(), path + ": " + bundle.status().message());
  // The checksum pass read the file front to back; from now on the model reads it at random, and
  // its pages must count as used so the kernel does not reclaim them first.
  mapping->advise_normal_access();
  return bundle;
}

Result<std::vector<float>> constant_fallback_scores(const Bundle& bundle, std::string_view value) {
  const std::vector<std::string>& labels = bundle.manifest().class_labels;
  double number = 0.0;
  auto parsed = std::from_chars(value.data(), value.data() + value.size(), number);
  bool is_number = parsed.ec == std::errc() && parsed.ptr == value.data() + value.size() && std::isfinite(number);
  switch (bundle.task()) {
    case Task::kRegression:
      if (is_number) return std::vector<float>{static_cast<float>(number)};
      return invalid_argument("the constant fallback of a regression model is a finite number, not '" +
                              std::string(value) + "'");
    case Task::kBinaryClassification:
      if (labels.size() == 2 && value == labels[1]) return std::vector<float>{1.0f};
      if (labels.size() == 2 && value == labels[0]) return std::vector<float>{0.0f};
      if (is_number && number >= 0.0 && number <= 1.0) return std::vector<float>{static_cast<float>(number)};
      return invalid_argument(
          "the constant fallback of a binary classifier is P(positive), between 0 and 1, or a "
          "class label, not '" +
          std::string(value) + "'");
    case Task::kMulticlassClassification: {
      auto found = std::find(labels.begin(), labels.end(), value);
      if (found == labels.end()) {
        return invalid_argument("the constant fallback of a multiclass model is one of its class labels, not '" +
                                std::string(value) + "'");
      }
      std::vector<float> scores(labels.size(), 0.0f);
      scores[static_cast<std::size_t>(found - labels.begin())] = 1.0f;
      return scores;
    }
  }
  return invalid_argument("no constant fallback for this task");
}

}  // namespace slipway::model
