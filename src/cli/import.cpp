// slipway import FORMAT MODEL: a model trained elsewhere (XGBoost JSON, ONNX MLPs) as a bundle, optionally
// registered.
#include <filesystem>
#include <fstream>
#include <ostream>

#include "cli/cli.h"
#include "slipway/data.h"
#include "slipway/llm.h"
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

// The feature names from the header line of a CSV, without the target column.
Status read_schema(const ImportOptions& options, std::vector<std::string>& feature_names) {
  // Only the header matters: read the first line, so a large data file costs nothing.
  std::ifstream schema(options.schema_path);
  std::string first_line;
  if (!schema || !std::getline(schema, first_line)) {
    return io_error("cannot read a header line from '" + options.schema_path + "'");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto header, data::parse_csv(first_line + "\n", options.schema_path));
  for (const auto& column : header.columns()) {
    if (column.name != options.target) feature_names.push_back(column.name);
  }
  return {};
}

// Stores the bundle under a finished run of experiment "imports" and registers it.
Result<registry::ModelVersion> register_import(const GlobalOptions& global, const ImportOptions& options,
                                               const model::Bundle& bundle, const std::vector<std::byte>& bytes,
                                               const std::string& source) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  registry::NewRun run;
  run.experiment = "imports";
  run.code_version = std::string(slipway_code_version());
  run.data_fingerprint = "";
  run.spec = "import: " + options.format + "\nsource: " + source + "\n";
  run.params = bundle.manifest().params;
  SLIPWAY_ASSIGN_OR_RETURN(auto run_id, store->runs().start(run));
  auto stored = store->artifacts().put(bytes);  // hashes the bytes: the bundle's identity
  if (!stored.ok()) {
    (void)store->runs().finish(run_id, false, "");
    return stored.status();
  }
  SLIPWAY_RETURN_IF_ERROR(store->runs().finish(run_id, true, *stored));
  return store->models().register_version(options.register_as, *stored, run_id);
}

// The type of a GGUF Llama's matrices, as its first query matrix has it.
std::string weights_type(const llm::GgufFile& file) {
  const llm::GgufTensor* query = file.tensor("blk.0.attn_q.weight");
  return query != nullptr ? std::string(llm::tensor_type_info(query->type)->name) : "unknown";
}

// A GGUF LLM is stored as it is (by its sha256, read in place when served), after the checks a
// server would make at start: the file parses, its architecture runs here, its tokenizer reads.
Result<ImportResult> import_gguf(const GlobalOptions& global, const ImportOptions& options) {
  SLIPWAY_ASSIGN_OR_RETURN(auto file, llm::GgufFile::open(options.model_path));
  SLIPWAY_ASSIGN_OR_RETURN(llm::LlamaConfig config, llm::read_llama_config(file));
  SLIPWAY_RETURN_IF_ERROR(llm::Tokenizer::from_gguf(file).status());
  for (const auto& tensor : file.tensors()) {
    if (tensor.dims.size() == 2 && !llm::supported_weight_type(tensor.type)) {
      return invalid_argument(options.model_path + ": tensor '" + tensor.name + "' is " +
                              std::string(llm::tensor_type_info(tensor.type)->name) +
                              ", which this engine does not run; `slipway llm quantize` can re-encode it");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(options.model_path));
  ImportResult result;
  result.model_path = options.model_path;
  result.llm_layers = config.layers;
  result.llm_context = config.context;
  for (const auto& tensor : file.tensors()) result.llm_parameters += tensor.elements();
  result.task = "text generation";
  if (options.register_as.empty()) {
    result.bundle_sha256 = sha256_hex(mapped.bytes());
    return result;
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  registry::NewRun run;
  run.experiment = "imports";
  run.code_version = std::string(slipway_code_version());
  run.spec = "import: gguf\nsource: " + std::filesystem::absolute(options.model_path).string() + "\n";
  run.params = {{"architecture", "llama"},
                {"layers", std::to_string(config.layers)},
                {"embedding", std::to_string(config.embedding)},
                {"heads", std::to_string(config.heads)},
                {"kv_heads", std::to_string(config.kv_heads)},
                {"context", std::to_string(config.context)},
                {"vocabulary", std::to_string(config.vocabulary)},
                {"weights", weights_type(file)}};
  SLIPWAY_ASSIGN_OR_RETURN(auto run_id, store->runs().start(run));
  auto stored = store->artifacts().put(mapped.bytes());
  if (!stored.ok()) {
    (void)store->runs().finish(run_id, false, "");
    return stored.status();
  }
  SLIPWAY_RETURN_IF_ERROR(store->runs().finish(run_id, true, *stored));
  SLIPWAY_ASSIGN_OR_RETURN(auto version, store->models().register_version(options.register_as, *stored, run_id));
  result.bundle_sha256 = version.bundle_sha256;
  result.registered = std::move(version);
  return result;
}

Result<ImportResult> import_model(const GlobalOptions& global, const ImportOptions& options) {
  if (options.format != "xgboost" && options.format != "onnx" && options.format != "gguf") {
    return invalid_argument("unknown model format '" + options.format + "'; supported: xgboost, onnx, gguf");
  }
  if (options.format == "gguf") {
    if (!options.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(options.register_as));
    if (!options.bundle_out.empty())
      return invalid_argument("--out does not apply to gguf: the file is stored as it is");
    return import_gguf(global, options);
  }
  if (!options.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(options.register_as));
  std::string source = std::filesystem::absolute(options.model_path).string();
  std::vector<std::string> feature_names;
  if (!options.schema_path.empty()) SLIPWAY_RETURN_IF_ERROR(read_schema(options, feature_names));
  SLIPWAY_ASSIGN_OR_RETURN(auto file, read_file(options.model_path));
  auto bundle = [&]() -> Result<std::shared_ptr<const model::Bundle>> {
    if (options.format == "xgboost") {
      model::XgboostImportOptions import_options;
      import_options.source = source;
      import_options.target = options.target;
      import_options.feature_names = feature_names;
      return model::import_xgboost_json(file, import_options);
    }
    model::OnnxImportOptions import_options;
    import_options.source = source;
    import_options.target = options.target;
    import_options.feature_names = feature_names;
    import_options.class_labels = options.class_labels;
    return model::import_onnx(std::as_bytes(std::span(file)), import_options);
  }();
  if (!bundle.ok()) return Status(bundle.status().code(), options.model_path + ": " + bundle.status().message());
  std::vector<std::byte> bytes = (*bundle)->serialize();
  if (!options.bundle_out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(options.bundle_out, bytes));
  ImportResult result;
  if (!options.register_as.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto version, register_import(global, options, **bundle, bytes, source));
    result.bundle_sha256 = version.bundle_sha256;
    result.registered = std::move(version);
  } else {
    result.bundle_sha256 = sha256_hex(bytes);
  }
  result.model_path = options.model_path;
  result.features = (*bundle)->model().input_width();
  result.task = std::string(model::task_name((*bundle)->task()));
  if (const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&(*bundle)->model())) {
    result.trees = trees->roots().size();
    result.objective = (*bundle)->manifest().params.at("objective");
  } else if (const auto* mlp = dynamic_cast<const model::MlpModel*>(&(*bundle)->model())) {
    result.layers = mlp->layers().size();
  }
  return result;
}

}  // namespace

int run_import(const GlobalOptions& global, const ImportOptions& options) {
  return render(global, import_model(global, options));
}

}  // namespace slipway::cli
