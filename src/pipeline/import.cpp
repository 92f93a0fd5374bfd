// Importing models made elsewhere (pipeline.h): XGBoost JSON and ONNX become bundles, a GGUF LLM is
// checked as a server would check it and kept as it is; each is stored under a run of experiment
// "imports" for lineage, then registered.
#include <filesystem>
#include <fstream>
#include <span>

#include "pipeline/operation_support.h"
#include "slipway/llm.h"
#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

// The feature names from the header line of a CSV, without the target column. Only the header
// matters: the first line is read, so a large data file costs nothing.
Result<std::vector<std::string>> read_schema(const ImportRequest& request) {
  std::ifstream schema(request.schema_path);
  std::string first_line;
  if (!schema || !std::getline(schema, first_line)) {
    return io_error("cannot read a header line from '" + request.schema_path + "'");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto header, data::parse_csv(first_line + "\n", request.schema_path));
  std::vector<std::string> names;
  for (const auto& column : header.columns()) {
    if (column.name != request.target) names.push_back(column.name);
  }
  return names;
}

std::string source_of(const ImportRequest& request) {
  return request.source.empty() ? std::filesystem::absolute(request.model_path).string() : request.source;
}

std::string weights_type(const llm::GgufFile& file) {
  const llm::GgufTensor* query = file.tensor("blk.0.attn_q.weight");
  return query != nullptr ? std::string(llm::tensor_type_info(query->type)->name) : "unknown";
}

Result<ImportOutcome> import_gguf(registry::Registry* registry, const ImportRequest& request, const Caller& caller) {
  if (!request.bundle_out.empty()) return invalid_argument("--out does not apply to gguf: the file is stored as it is");
  SLIPWAY_ASSIGN_OR_RETURN(auto file, llm::GgufFile::open(request.model_path));
  SLIPWAY_ASSIGN_OR_RETURN(llm::LlamaConfig config, llm::read_llama_config(file));
  SLIPWAY_RETURN_IF_ERROR(llm::Tokenizer::from_gguf(file).status());
  for (const auto& tensor : file.tensors()) {
    if (tensor.dims.size() == 2 && !llm::supported_weight_type(tensor.type)) {
      return invalid_argument(request.model_path + ": tensor '" + tensor.name + "' is " +
                              std::string(llm::tensor_type_info(tensor.type)->name) +
                              ", which this engine does not run; `slipway llm quantize` can re-encode it");
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(request.model_path));
  ImportOutcome outcome;
  outcome.llm_layers = config.layers;
  outcome.llm_context = config.context;
  for (const auto& tensor : file.tensors()) outcome.llm_parameters += tensor.elements();
  if (request.register_as.empty()) {
    outcome.bundle_sha256 = sha256_hex(mapped.bytes());
    return outcome;
  }
  std::map<std::string, std::string> params = {{"architecture", "llama"},
                                               {"layers", std::to_string(config.layers)},
                                               {"embedding", std::to_string(config.embedding)},
                                               {"heads", std::to_string(config.heads)},
                                               {"kv_heads", std::to_string(config.kv_heads)},
                                               {"context", std::to_string(config.context)},
                                               {"vocabulary", std::to_string(config.vocabulary)},
                                               {"weights", weights_type(file)}};
  std::string spec = "import: gguf\nsource: " + source_of(request) + "\n";
  SLIPWAY_ASSIGN_OR_RETURN(outcome.registered, register_imported_bytes(*registry, request.register_as, mapped.bytes(),
                                                                       spec, params, false, caller));
  outcome.bundle_sha256 = outcome.registered->bundle_sha256;
  return outcome;
}

}  // namespace

Result<registry::ModelVersion> register_imported_bytes(registry::Registry& registry, const std::string& model,
                                                       std::span<const std::byte> bytes, const std::string& spec,
                                                       const std::map<std::string, std::string>& params, bool remote,
                                                       const Caller& caller) {
  act_as(registry, caller);
  registry::NewRun run;
  run.experiment = "imports";
  run.code_version = std::string(slipway_code_version());
  run.spec = spec;
  run.params = params;
  run.remote = remote;
  SLIPWAY_ASSIGN_OR_RETURN(auto run_id, registry.runs().start(run));
  auto stored = registry.artifacts().put(bytes);  // hashes the bytes: the model's identity
  if (!stored.ok()) {
    (void)registry.runs().finish(run_id, false, "");
    return stored.status();
  }
  SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(run_id, true, *stored));
  return registry.models().register_version(model, *stored, run_id);
}

Result<ImportOutcome> import_model(registry::Registry* registry, const ImportRequest& request, const Caller& caller) {
  if (request.format != "xgboost" && request.format != "onnx" && request.format != "gguf") {
    return invalid_argument("unknown model format '" + request.format + "'; supported: xgboost, onnx, gguf");
  }
  if (!request.register_as.empty()) {
    SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.register_as));
    if (registry == nullptr) return failed_precondition("registering an import needs a workspace");
  }
  if (request.format == "gguf") return import_gguf(registry, request, caller);
  std::string source = source_of(request);
  std::vector<std::string> feature_names;
  if (!request.schema_path.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(feature_names, read_schema(request));
  }
  if (!request.schema_path.empty() && !request.input_names.empty()) {
    return invalid_argument("name the inputs with a schema file or a list, not both");
  }
  if (!request.input_names.empty()) feature_names = request.input_names;
  SLIPWAY_ASSIGN_OR_RETURN(auto file, read_file(request.model_path));
  auto bundle = [&]() -> Result<std::shared_ptr<const model::Bundle>> {
    if (request.format == "xgboost") {
      model::XgboostImportOptions options;
      options.source = source;
      options.target = request.target;
      options.feature_names = feature_names;
      return model::import_xgboost_json(file, options);
    }
    model::OnnxImportOptions options;
    options.source = source;
    options.target = request.target;
    options.feature_names = feature_names;
    options.class_labels = request.class_labels;
    return model::import_onnx(std::as_bytes(std::span(file)), options);
  }();
  if (!bundle.ok()) return Status(bundle.status().code(), request.model_path + ": " + bundle.status().message());
  std::vector<std::byte> bytes = (*bundle)->serialize();
  if (!request.bundle_out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(request.bundle_out, bytes));
  ImportOutcome outcome;
  outcome.bundle = *bundle;
  if (request.register_as.empty()) {
    outcome.bundle_sha256 = sha256_hex(bytes);
    return outcome;
  }
  std::string spec = "import: " + request.format + "\nsource: " + source + "\n";
  SLIPWAY_ASSIGN_OR_RETURN(outcome.registered, register_imported_bytes(*registry, request.register_as, bytes, spec,
                                                                       (*bundle)->manifest().params, false, caller));
  outcome.bundle_sha256 = outcome.registered->bundle_sha256;
  return outcome;
}

Result<ImportOutcome> import_uploaded_model(registry::Registry& registry, const UploadedImport& upload,
                                            const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(check_upload_sha256(upload.bytes, upload.expected_sha256));
  ImportRequest request;
  request.format = upload.format;
  request.target = upload.target;
  request.class_labels = upload.class_labels;
  request.input_names = upload.input_names;
  request.register_as = upload.register_as;
  request.source = "upload sha256:" + upload.expected_sha256;
  if (request.register_as.empty())
    return invalid_argument("an uploaded model is imported to register it: name the model");
  if (request.format != "xgboost" && request.format != "onnx" && request.format != "gguf") {
    return invalid_argument("unknown model format '" + request.format.substr(0, 64) +
                            "'; supported: xgboost, onnx, gguf");
  }
  // The converters read files (a GGUF file is mapped): the bytes go to a scratch file, removed
  // whatever happens; the registry keeps its own copy of what it registers.
  std::string folder = registry.home() + "/tmp";
  SLIPWAY_RETURN_IF_ERROR(make_directories(folder));
  request.model_path =
      folder + "/upload-" + random_hex(8) + (request.format == "xgboost" ? ".json" : "." + request.format);
  struct Scratch {
    std::string path;
    ~Scratch() {
      std::error_code error;
      std::filesystem::remove(path, error);
    }
  } scratch{request.model_path};
  SLIPWAY_RETURN_IF_ERROR(write_file_atomic(request.model_path, upload.bytes));
  auto imported = import_model(&registry, request, caller);
  if (!imported.ok()) {
    // The scratch file's name means nothing to the client: the error names the upload instead.
    std::string message = imported.status().message();
    if (message.starts_with(request.model_path))
      message = "the uploaded model" + message.substr(request.model_path.size());
    return Status(imported.status().code(), message);
  }
  return imported;
}

}  // namespace slipway::pipeline
