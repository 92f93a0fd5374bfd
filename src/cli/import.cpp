// slipway import FORMAT MODEL: a model trained elsewhere (XGBoost JSON, ONNX MLPs) as a bundle, optionally
// registered.
#include <ostream>

#include "cli/cli.h"
#include "slipway/model.h"

namespace slipway::cli {
namespace {

struct ImportResult : CommandResult {
  std::string model_path;
  std::string bundle_sha256;
  std::size_t trees = 0;
  std::size_t layers = 0;
  std::size_t features = 0;
  std::string task;
  std::string objective;
  std::optional<registry::ModelVersion> registered;
  std::size_t llm_layers = 0, llm_context = 0;  // a GGUF LLM
  std::uint64_t llm_parameters = 0;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("bundle_sha256").value(bundle_sha256);
    if (llm_layers > 0) {
      json.key("layers").value(static_cast<std::uint64_t>(llm_layers));
      json.key("parameters").value(llm_parameters).key("context").value(static_cast<std::uint64_t>(llm_context));
      json.key("task").value(task);
      write_registered_json(json, registered);
      json.end_object();
      return;
    }
    if (layers > 0) {
      json.key("layers").value(static_cast<std::uint64_t>(layers));
    } else {
      json.key("trees").value(static_cast<std::uint64_t>(trees));
    }
    json.key("features").value(static_cast<std::uint64_t>(features));
    json.key("task").value(task);
    write_registered_json(json, registered);
    json.end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "imported   " << model_path << ": ";
    if (llm_layers > 0) {
      out << "a Llama LLM, " << llm_layers << " layers, " << llm_parameters / 1000000 << "M parameters, context "
          << llm_context << "\n";
    } else if (layers > 0) {
      out << layers << " dense layers, " << features << " features, " << task << "\n";
    } else {
      out << trees << " trees, " << features << " features, " << task << " (" << objective << ")\n";
    }
    out << "bundle     sha256:" << bundle_sha256 << "\n";
    if (registered) out << "registered " << registered->model << " version " << registered->version << "\n";
  }
};

Result<ImportResult> import_model(const GlobalOptions& global, const ImportOptions& options) {
  pipeline::ImportRequest request;
  request.format = options.format;
  request.model_path = options.model_path;
  request.schema_path = options.schema_path;
  request.target = options.target;
  request.class_labels = options.class_labels;
  request.register_as = options.register_as;
  request.bundle_out = options.bundle_out;
  std::unique_ptr<registry::Registry> store;
  if (!options.register_as.empty()) {
    // Checked before the workspace is created for it.
    SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(options.register_as));
    SLIPWAY_ASSIGN_OR_RETURN(store, open_workspace(global, WorkspaceAccess::kCreate));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto outcome, pipeline::import_model(store.get(), request, pipeline::Caller{}));
  ImportResult result;
  result.model_path = options.model_path;
  result.bundle_sha256 = outcome.bundle_sha256;
  result.registered = std::move(outcome.registered);
  if (!outcome.bundle) {
    result.llm_layers = outcome.llm_layers;
    result.llm_context = outcome.llm_context;
    result.llm_parameters = outcome.llm_parameters;
    result.task = "text generation";
    return result;
  }
  const model::Bundle& bundle = *outcome.bundle;
  result.features = bundle.model().input_width();
  result.task = std::string(model::task_name(bundle.task()));
  if (const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&bundle.model())) {
    result.trees = trees->roots().size();
    result.objective = bundle.manifest().params.at("objective");
  } else if (const auto* mlp = dynamic_cast<const model::MlpModel*>(&bundle.model())) {
    result.layers = mlp->layers().size();
  }
  return result;
}

}  // namespace

int run_import(const GlobalOptions& global, const ImportOptions& options) {
  return render(global, import_model(global, options));
}

}  // namespace slipway::cli
