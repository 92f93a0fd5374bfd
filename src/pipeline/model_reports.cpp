// What a model and an endpoint say about themselves (pipeline.h): feature importance and per-row
// contributions, exports to other systems' formats, the training parameters, and an endpoint's
// description. The CLI renders them as text or writes the files; /api answers them.
#include <algorithm>

#include <fmt/format.h>

#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

Result<const model::TreeEnsembleModel*> tree_model(const LoadedReference& reference) {
  const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&reference.bundle->model());
  if (trees == nullptr) {
    return invalid_argument("explanations need a tree model; " + reference.description + " is a " +
                            std::string(reference.bundle->model().family()) + " model");
  }
  return trees;
}

}  // namespace

Result<FeatureImportance> feature_importance(const LoadedReference& reference) {
  SLIPWAY_ASSIGN_OR_RETURN(const model::TreeEnsembleModel* trees, tree_model(reference));
  const auto& inputs = reference.bundle->preprocessor().features();
  auto measured = trees->importance();
  std::vector<std::size_t> order(inputs.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  bool with_gain = !measured.total_gain.empty();
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
    return with_gain ? measured.total_gain[a] > measured.total_gain[b] : measured.splits[a] > measured.splits[b];
  });
  FeatureImportance importance;
  importance.model = reference.description;
  for (auto index : order) {
    importance.names.push_back(inputs[index].name);
    importance.splits.push_back(measured.splits[index]);
    if (with_gain) {
      importance.total_gain.push_back(measured.total_gain[index]);
      importance.total_cover.push_back(measured.total_cover[index]);
    }
  }
  return importance;
}

void write_feature_importance_json(JsonWriter& json, const FeatureImportance& importance) {
  json.begin_object().key("model").value(importance.model).key("features").begin_array();
  for (std::size_t index = 0; index < importance.names.size(); ++index) {
    json.begin_object().key("name").value(importance.names[index]).key("splits").value(importance.splits[index]);
    if (!importance.total_gain.empty()) {
      json.key("total_gain").value(importance.total_gain[index]);
      json.key("total_cover").value(importance.total_cover[index]);
    }
    json.end_object();
  }
  json.end_array().end_object();
}

Result<RowContributions> explain_rows(const LoadedReference& reference, const std::string& data_path,
                                      std::size_t max_rows) {
  SLIPWAY_ASSIGN_OR_RETURN(const model::TreeEnsembleModel* trees, tree_model(reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(data_path));
  RowContributions explained;
  explained.model = reference.description;
  explained.rows_in_file = table.row_count();
  if (max_rows > 0 && max_rows < table.row_count()) {
    // Only the rows asked for are preprocessed.
    std::vector<std::uint32_t> first(max_rows);
    for (std::size_t row = 0; row < max_rows; ++row) first[row] = static_cast<std::uint32_t>(row);
    table = table.take_rows(first);
  }
  std::vector<float> features;
  SLIPWAY_RETURN_IF_ERROR(reference.bundle->preprocessor().transform(table, features));
  std::size_t width = trees->input_width();
  // One block of feature contributions plus bias per output; multiclass blocks are named by class.
  const auto& class_labels = reference.bundle->manifest().class_labels;
  for (std::size_t group = 0; group < trees->output_count(); ++group) {
    std::string prefix = trees->output_count() > 1 ? class_labels[group] + ":" : "";
    for (const auto& input : reference.bundle->preprocessor().features()) {
      explained.columns.push_back(prefix + input.name);
    }
    explained.columns.push_back(prefix + "bias");
  }
  explained.rows = table.row_count();
  explained.contributions.resize(explained.rows * explained.columns.size());
  for (std::size_t row = 0; row < explained.rows; ++row) {
    std::span<float> row_contributions(explained.contributions.data() + row * explained.columns.size(),
                                       explained.columns.size());
    SLIPWAY_RETURN_IF_ERROR(
        trees->explain(std::span<const float>(features).subspan(row * width, width), row_contributions));
  }
  return explained;
}

std::string contributions_csv(const RowContributions& explained) {
  std::string csv;
  const std::size_t width = explained.columns.size();
  for (std::size_t column = 0; column < width; ++column) {
    csv += explained.columns[column];
    csv += column + 1 == width ? '\n' : ',';
  }
  for (std::size_t row = 0; row < explained.rows; ++row) {
    for (std::size_t column = 0; column < width; ++column) {
      csv += fmt::format("{}", explained.contributions[row * width + column]);
      csv += column + 1 == width ? '\n' : ',';
    }
  }
  return csv;
}

void write_contributions_json(JsonWriter& json, const RowContributions& explained) {
  json.begin_object().key("model").value(explained.model);
  json.key("rows").value(static_cast<std::uint64_t>(explained.rows));
  json.key("rows_in_file").value(static_cast<std::uint64_t>(explained.rows_in_file));
  json.key("columns").begin_array();
  for (const auto& column : explained.columns) json.value(column);
  json.end_array().key("contributions").begin_array();
  const std::size_t width = explained.columns.size();
  for (std::size_t row = 0; row < explained.rows; ++row) {
    json.begin_array();
    for (std::size_t column = 0; column < width; ++column) json.value(explained.contributions[row * width + column]);
    json.end_array();
  }
  json.end_array().end_object();
}

Result<ModelExport> export_model(const model::Bundle& bundle, const std::string& format) {
  if (format != "onnx" && format != "xgboost-json") {
    return invalid_argument("unknown export format '" + format.substr(0, 64) + "'; supported: onnx, xgboost-json");
  }
  ModelExport exported;
  exported.format = format;
  for (const auto& feature : bundle.preprocessor().features()) {
    if (feature.type == data::ColumnType::kCategorical) exported.categories.emplace_back(feature.name, feature.levels);
  }
  if (format == "xgboost-json") {
    SLIPWAY_ASSIGN_OR_RETURN(exported.bytes, model::export_xgboost_json(bundle));
    if (!exported.categories.empty()) {
      exported.warning =
          "categorical inputs are XGBoost categories holding the bundle's codes (level i is code "
          "i; `--json` lists them as category_codes; any other value is code " +
          std::to_string(exported.categories.back().second.size()) + " or more): encode them so before predicting";
    }
    return exported;
  }
  SLIPWAY_ASSIGN_OR_RETURN(model::OnnxExport onnx, model::export_onnx(bundle));
  exported.bytes.assign(reinterpret_cast<const char*>(onnx.bytes.data()), onnx.bytes.size());
  exported.warning = std::move(onnx.warning);
  return exported;
}

void write_parameters_json(JsonWriter& json) {
  json.begin_object().key("parameters").begin_array();
  for (const auto& declaration : train::parameter_declarations()) {
    json.begin_object().key("name").value(declaration.name).key("models").begin_array();
    for (const auto& family : declaration.families) json.value(family);
    json.end_array().key("type").value(train::parameter_type_name(declaration.type));
    json.key("default").value(declaration.default_value);
    json.key("allowed").value(train::parameter_allowed_values(declaration));
    json.key("description").value(declaration.description).end_object();
  }
  json.end_array().end_object();
}

Result<EndpointDescription> describe_endpoint(registry::Registry& registry, const std::string& endpoint) {
  SLIPWAY_ASSIGN_OR_RETURN(auto stored, registry.endpoints().get(endpoint));
  if (!stored) return not_found("no endpoint named '" + endpoint + "'; `slipway endpoints` lists them");
  EndpointDescription description;
  description.endpoint = std::move(*stored);
  SLIPWAY_ASSIGN_OR_RETURN(description.rollout, registry.endpoints().rollout(endpoint));
  for (const auto& route : description.endpoint.routes) {
    EndpointDescription::Version version;
    version.route = route;
    SLIPWAY_ASSIGN_OR_RETURN(version.record, registry.models().resolve(route.model, {route.version, ""}));
    SLIPWAY_ASSIGN_OR_RETURN(version.gates, registry.models().gate_results(route.model, route.version));
    auto loaded = resolve_reference(&registry, route.reference());
    if (loaded.ok()) {
      version.bundle = loaded->bundle;
    } else {
      version.load_error = loaded.status().message();
    }
    description.versions.push_back(std::move(version));
  }
  return description;
}

void write_endpoint_description_json(JsonWriter& json, const EndpointDescription& description) {
  const registry::Endpoint& endpoint = description.endpoint;
  json.begin_object().key("endpoint");
  registry::write_endpoint_json(json, endpoint);
  json.key("versions").begin_array();
  for (const auto& version : description.versions) {
    json.begin_object().key("reference").value(version.route.reference()).key("percent").value(version.route.percent);
    json.key("bundle_sha256").value(version.record.bundle_sha256).key("run_id").value(version.record.run_id);
    if (version.bundle) {
      json.key("task").value(model::task_name(version.bundle->task()));
      json.key("inputs").begin_array();
      for (const auto& feature : version.bundle->preprocessor().features()) json.value(feature.name);
      json.end_array();
    } else {
      json.key("load_error").value(version.load_error);
    }
    json.key("version").begin_object();
    registry::write_model_version_fields(json, version.record);
    json.end_object().key("gates").begin_array();
    for (const auto& gate : version.gates) {
      json.begin_object().key("baseline").value(gate.baseline_model + "@" + std::to_string(gate.baseline_version));
      json.key("metric").value(gate.metric).key("criteria").value(gate.criteria).key("passed").value(gate.passed);
      json.key("created_ms").value(gate.created_ms).end_object();
    }
    json.end_array().end_object();
  }
  json.end_array();
  if (description.rollout) {
    json.key("rollout_state").value(description.rollout->state);
    json.key("rollout_last_check").value(description.rollout->last_check);
  }
  json.key("rollback_command").value(endpoint.previous.empty() ? "" : "slipway rollback " + endpoint.name);
  json.end_object();
}

}  // namespace slipway::pipeline
