// The Open Inference Protocol v2 (REST) over the model repository: routing, request decoding,
// response encoding. See ../docs/api.md for the inputs Slipway accepts.
#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "serve/batcher.h"
#include "serve/model_manager.h"
#include "serve/response_cache.h"
#include "serve/server_metrics.h"
#include "serve/v2_tensors.h"
#include "slipway/serve.h"

namespace slipway::serve {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

HttpResponse json_response(int status, std::string body) { return {status, "application/json", std::move(body)}; }

HttpResponse error_response(int status, std::string_view message) {
  std::string body = "{\"error\":";
  append_json_string(body, message);
  body += "}";
  return json_response(status, std::move(body));
}

int http_status_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return 503;
    case StatusCode::kResourceExhausted:
      return 429;
    default:
      return 500;
  }
}

std::string_view failure_reason_of(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return "invalid_request";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kResourceExhausted: return "queue_full";
    case StatusCode::kDeadlineExceeded: return "timeout";
    default: return "internal";
  }
}

HttpResponse error_response(const Status& status) {
  HttpResponse response = error_response(http_status_for(status), status.message());
  response.failure_reason = std::string(failure_reason_of(status));
  return response;
}

// The model's input columns, in schema order, viewing the request's tensors: the preprocessor
// reads them directly, so no table is built per request.
struct InputColumns {
  std::vector<model::ColumnInput> columns;
  std::size_t rows = 0;
  std::vector<float> transposed;  // the matrix form's values, column by column
};

std::string input_names(const model::Preprocessor& schema) {
  std::string names;
  for (const auto& feature : schema.features()) names += (names.empty() ? "" : ", ") + feature.name;
  return names;
}

// Inputs sent by feature name, one per model input, each of shape [N] or [N, 1].
Status columns_from_named_inputs(const std::vector<TensorInput>& inputs, const model::Preprocessor& schema,
                                 InputColumns& out) {
  const auto& features = schema.features();
  std::vector<const TensorInput*> by_feature(features.size(), nullptr);
  for (const auto& input : inputs) {
    auto index = schema.feature_index(input.name);
    if (!index) {
      return invalid_argument("unknown input '" + input.name + "'; the model's inputs are: " + input_names(schema));
    }
    if (by_feature[*index] != nullptr) return invalid_argument("input '" + input.name + "' is given twice");
    by_feature[*index] = &input;
  }
  std::optional<std::size_t> rows;
  out.columns.resize(features.size());
  for (std::size_t index = 0; index < features.size(); ++index) {
    const auto& feature = features[index];
    const TensorInput* input = by_feature[index];
    if (input == nullptr) {
      return invalid_argument("missing input '" + feature.name + "'; the model's inputs are: " + input_names(schema));
    }
    bool column_shape = input->shape.size() == 1 || (input->shape.size() == 2 && input->shape[1] == 1);
    if (!column_shape) return invalid_argument("input '" + input->name + "' must have shape [N] or [N,1]");
    if (rows && *rows != input->shape[0]) {
      return invalid_argument("input '" + input->name + "' has " + std::to_string(input->shape[0]) +
                              " rows but other inputs have " + std::to_string(*rows));
    }
    rows = input->shape[0];
    if (feature.type == data::ColumnType::kNumeric) {
      if (input->datatype == Datatype::kBytes) {
        return invalid_argument("input '" + input->name +
                                "' is numeric; its datatype must be FP32, FP64, an integer type or BOOL, not BYTES");
      }
      out.columns[index].numbers = input->numbers;
    } else {
      if (input->datatype != Datatype::kBytes) {
        return invalid_argument("input '" + input->name + "' is categorical; its datatype must be BYTES, not " +
                                std::string(datatype_name(input->datatype)));
      }
      out.columns[index].texts = input->texts;
    }
  }
  out.rows = rows.value_or(0);
  return {};
}

// One [N, F] numeric tensor whose columns are the inputs in schema order.
Status columns_from_matrix(const TensorInput& input, const model::Preprocessor& schema, InputColumns& out) {
  const auto& features = schema.features();
  for (const auto& feature : features) {
    if (feature.type != data::ColumnType::kNumeric) {
      return invalid_argument("a single [N, F] tensor only works for models whose inputs are all numeric; input '" +
                              feature.name + "' is categorical, so send one input per column by name");
    }
  }
  if (input.shape.size() != 2 || input.shape[1] != features.size()) {
    return invalid_argument("input '" + input.name + "' must have shape [N, " + std::to_string(features.size()) +
                            "] (one column per model input, in schema order)");
  }
  if (input.datatype == Datatype::kBytes) {
    return invalid_argument("input '" + input.name + "' must be FP32 (or another numeric type), not BYTES");
  }
  std::size_t rows = input.shape[0];
  std::size_t width = features.size();
  out.transposed.resize(rows * width);
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t column = 0; column < width; ++column) {
      out.transposed[column * rows + row] = input.numbers[row * width + column];
    }
  }
  out.columns.resize(width);
  for (std::size_t column = 0; column < width; ++column) {
    out.columns[column].numbers = std::span<const float>(out.transposed).subspan(column * rows, rows);
  }
  out.rows = rows;
  return {};
}

struct OutputSpec {
  std::string name;
  std::string datatype;
  bool binary = false;  // sent as raw bytes after the JSON (Triton's binary tensor extension)
};

std::vector<OutputSpec> outputs_of(const model::Bundle& bundle) {
  if (bundle.task() != model::Task::kRegression) return {{"probability", "FP32"}, {"label", "BYTES"}};
  return {{"prediction", "FP32"}};
}

// Shape [-1], or [-1, columns] for a per-class output.
std::string tensor_metadata(std::string_view name, std::string_view datatype, std::size_t columns = 1) {
  JsonWriter json;
  json.begin_object().key("name").value(name).key("datatype").value(datatype);
  json.key("shape").begin_array().value(-1);
  if (columns > 1) json.value(static_cast<std::uint64_t>(columns));
  json.end_array().end_object();
  return json.take();
}

std::string model_metadata(const Servable& servable, bool single_version) {
  const LoadedModel& loaded = *servable.model;
  const model::Bundle& bundle = *loaded.bundle;
  JsonWriter json;
  json.begin_object();
  json.key("name").value(loaded.name);
  json.key("versions").begin_array();
  if (single_version) {
    json.value(loaded.version_text);
  } else {
    for (auto version : *servable.versions) json.value(std::to_string(version));
  }
  json.end_array();
  json.key("platform").value("slipway_" + std::string(bundle.model().family()));
  json.key("inputs").begin_array();
  for (const auto& feature : bundle.preprocessor().features()) {
    json.raw(tensor_metadata(feature.name, feature.type == data::ColumnType::kNumeric ? "FP32" : "BYTES"));
  }
  json.end_array();
  json.key("outputs").begin_array();
  for (const auto& output : outputs_of(bundle)) {
    bool per_class = output.datatype == "FP32" && bundle.task() == model::Task::kMulticlassClassification;
    json.raw(tensor_metadata(output.name, output.datatype, per_class ? bundle.model().output_count() : 1));
  }
  json.end_array();
  json.key("parameters").begin_object();
  json.key("task").value(model::task_name(bundle.task()));
  json.key("target").value(bundle.manifest().target);
  json.key("version").value(loaded.version_text);
  json.end_object();
  json.end_object();
  return json.take();
}

// The path split into segments: "/v2/models/x/ready" -> {"v2", "models", "x", "ready"}.
bool is_inference_path(const std::vector<std::string_view>& segments) {
  return segments.size() >= 4 && segments[1] == "models" && segments.back() == "infer";
}

std::vector<std::string_view> path_segments(std::string_view target) {
  auto query = target.find('?');
  if (query != std::string_view::npos) target = target.substr(0, query);
  std::vector<std::string_view> segments;
  while (!target.empty()) {
    auto slash = target.find('/');
    std::string_view segment = target.substr(0, slash);
    if (!segment.empty()) segments.push_back(segment);
    if (slash == std::string_view::npos) break;
    target.remove_prefix(slash + 1);
  }
  return segments;
}


// Who may call a route: roles rank predict < deploy < admin; kOpen needs no token.
enum class Role { kOpen = 0, kPredict = 1, kDeploy = 2, kAdmin = 3 };

Role role_named(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "deploy") return Role::kDeploy;
  return Role::kPredict;
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kAdmin: return "admin";
    case Role::kDeploy: return "deploy";
    default: return "predict";
  }
}

Role role_required(const std::vector<std::string_view>& segments) {
  if (segments.size() == 1 && segments[0] == "metrics") return Role::kAdmin;
  if (segments.size() >= 2 && segments[0] == "v2" && segments[1] == "health") return Role::kOpen;
  if (segments.size() >= 2 && segments[0] == "v2" && segments[1] == "repository") return Role::kDeploy;
  if (!segments.empty() && segments.back() == "stats") return Role::kAdmin;
  return Role::kPredict;
}

// Equal strings of equal length, in time that depends only on the length.
bool constant_time_equal(std::string_view left, std::string_view right) {
  if (left.size() != right.size()) return false;
  unsigned char difference = 0;
  for (std::size_t index = 0; index < left.size(); ++index) {
    difference |= static_cast<unsigned char>(left[index] ^ right[index]);
  }
  return difference == 0;
}

std::optional<bool> parameter_flag(object parameters, std::string_view key) {
  bool flag = false;
  if (parameters[key].get(flag) == simdjson::SUCCESS) return flag;
  return std::nullopt;
}

}  // namespace

// A parsed infer request: its rows preprocessed, ready for the model alone or in a batch.
struct PreparedInfer {
  std::string request_id;
  std::vector<OutputSpec> wanted;
  std::vector<float> features;  // rows x the schema's output width
  std::size_t rows = 0;
  int priority = 0;
  std::chrono::microseconds timeout{0};
};

struct Service::State {
  State(registry::Registry& registry, ServiceOptions options)
      : registry(registry),
        options(options),
        cache(options.response_cache_bytes),
        manager(registry,
                ModelManager::Options{options.registry_refresh, options.defaults, options.model_overrides,
                                      options.memory_budget_bytes},
                metrics) {}

  registry::Registry& registry;
  ServiceOptions options;
  ServerMetrics metrics;  // declared before the manager, whose batchers report to it
  ResponseCache cache;
  ModelManager manager;

  // API tokens, re-read from the registry every registry_refresh so revocations take effect.
  std::mutex tokens_mutex;
  std::vector<registry::TokenRecord> tokens;
  std::chrono::steady_clock::time_point tokens_fetched;
  bool tokens_loaded = false;

  // Null when the request may proceed; otherwise the 401 or 403 to send.
  std::optional<HttpResponse> authorize(Role required, std::string_view authorization);

  // The completion of a model route: the response and what the metrics need.
  using Finish = std::function<void(HttpResponse response, std::size_t rows)>;
  Result<PreparedInfer> prepare_infer(const LoadedModel& loaded, std::string_view body,
                                      const RequestHeaders& headers) const;
  static HttpResponse infer_response(const LoadedModel& loaded, const PreparedInfer& prepared,
                                     const model::Predictions& predictions);
  void infer(const Servable& servable, std::string_view body, const RequestHeaders& headers, const Finish& finish);
  static std::string config_json(const LoadedModel& loaded);
  void handle_model_route(std::string_view method, const std::vector<std::string_view>& segments,
                          std::string_view body, const RequestHeaders& headers, std::string& metric_model,
                          std::string& metric_version, const Finish& finish);
  HttpResponse handle_repository_route(std::string_view method, const std::vector<std::string_view>& segments,
                                       std::string_view body);
};

std::optional<HttpResponse> Service::State::authorize(Role required, std::string_view authorization) {
  if (!options.require_auth || required == Role::kOpen) return std::nullopt;
  auto unauthenticated = [](std::string message) {
    HttpResponse response = error_response(401, message);
    response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"slipway\"");
    return response;
  };
  constexpr std::string_view kScheme = "bearer ";
  bool bearer = authorization.size() > kScheme.size();
  for (std::size_t index = 0; bearer && index < kScheme.size(); ++index) {
    bearer = std::tolower(static_cast<unsigned char>(authorization[index])) == kScheme[index];
  }
  if (!bearer) {
    return unauthenticated("this server requires a token: send 'Authorization: Bearer TOKEN' (create one with "
                           "`slipway token create`)");
  }
  std::string digest = sha256_hex(authorization.substr(kScheme.size()));
  std::optional<Role> granted;
  {
    std::lock_guard lock(tokens_mutex);
    auto now = std::chrono::steady_clock::now();
    if (!tokens_loaded || now - tokens_fetched >= options.registry_refresh) {
      auto listed = registry.tokens().list();
      if (listed.ok()) {
        tokens = std::move(listed).value();
        tokens_fetched = now;
        tokens_loaded = true;
      } else if (!tokens_loaded) {
        return error_response(503, "cannot read the API tokens: " + listed.status().message());
      }
    }
    // Every active token is compared, matching or not, so the time taken says nothing about them.
    for (const auto& token : tokens) {
      bool match = constant_time_equal(digest, token.token_sha256);
      if (match && token.revoked_ms == 0) granted = role_named(token.role);
    }
  }
  if (!granted) return unauthenticated("the bearer token is not valid (unknown or revoked)");
  if (static_cast<int>(*granted) < static_cast<int>(required)) {
    return error_response(403, "the token's role '" + std::string(role_name(*granted)) +
                                   "' may not do this; it needs the role '" + std::string(role_name(required)) + "'");
  }
  return std::nullopt;
}

Result<PreparedInfer> Service::State::prepare_infer(const LoadedModel& loaded, std::string_view body,
                                                    const RequestHeaders& headers) const {
  // Triton's binary tensor extension: the JSON is the first Inference-Header-Content-Length bytes.
  std::string_view json_text = body;
  std::string_view binary;
  bool binary_request = !headers.inference_header_length.empty();
  if (binary_request) {
    std::size_t json_length = 0;
    std::string_view text = headers.inference_header_length;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), json_length);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) {
      return invalid_argument("the Inference-Header-Content-Length header must be a byte count");
    }
    if (json_length == 0) {
      return invalid_argument("Inference-Header-Content-Length: 0 (a raw tensor without JSON) is not supported; "
                              "send the JSON header first");
    }
    if (json_length > body.size()) {
      return invalid_argument("Inference-Header-Content-Length is " + std::to_string(json_length) +
                              " but the body has only " + std::to_string(body.size()) + " bytes");
    }
    json_text = body.substr(0, json_length);
    binary = body.substr(json_length);
  }
  // One parser per thread keeps its buffers, so a request allocates none for parsing; a large body
  // gets a parser of its own, so threads do not keep that much memory. The elements read below
  // live in the parser until this thread's next request.
  thread_local simdjson::dom::parser shared_parser;
  simdjson::dom::parser large_body_parser;
  simdjson::dom::parser& parser = json_text.size() > (std::size_t{1} << 20) ? large_body_parser : shared_parser;
  simdjson::padded_string padded(json_text);
  object request;
  auto parse_error = parser.parse(padded).get(request);
  if (parse_error != simdjson::SUCCESS) {
    return invalid_argument(std::string("the request body is not a JSON object: ") +
                            simdjson::error_message(parse_error));
  }
  const model::Bundle& bundle = *loaded.bundle;
  const model::Preprocessor& schema = bundle.preprocessor();
  PreparedInfer prepared;

  element id_value;
  if (request["id"].get(id_value) == simdjson::SUCCESS) {
    std::string_view id_text;
    if (id_value.get(id_text) != simdjson::SUCCESS) return invalid_argument("'id' must be a string");
    prepared.request_id = std::string(id_text);
  }
  // KServe/Triton request parameters: priority (1 = highest), timeout (microseconds) and
  // binary_data_output.
  bool all_binary = false;
  object parameters;
  if (request["parameters"].get(parameters) == simdjson::SUCCESS) {
    element value;
    if (parameters["priority"].get(value) == simdjson::SUCCESS) {
      std::int64_t priority = 0;
      if (value.get(priority) != simdjson::SUCCESS || priority < 0 || priority > 1'000'000) {
        return invalid_argument("parameters.priority must be a non-negative integer");
      }
      prepared.priority = static_cast<int>(priority);
    }
    if (parameters["timeout"].get(value) == simdjson::SUCCESS) {
      std::int64_t timeout = 0;
      if (value.get(timeout) != simdjson::SUCCESS || timeout < 0) {
        return invalid_argument("parameters.timeout must be a non-negative integer (microseconds)");
      }
      prepared.timeout = std::chrono::microseconds(timeout);
    }
    all_binary = parameter_flag(parameters, "binary_data_output").value_or(false);
  }
  array inputs_array;
  if (request["inputs"].get(inputs_array) != simdjson::SUCCESS || inputs_array.size() == 0) {
    return invalid_argument("the request needs a non-empty 'inputs' array");
  }
  std::vector<TensorInput> inputs;
  std::size_t position = 0;
  bool any_binary_input = false;
  for (element item : inputs_array) {
    SLIPWAY_ASSIGN_OR_RETURN(auto input, read_input(item, position++));
    any_binary_input = any_binary_input || input.binary_size.has_value();
    inputs.push_back(std::move(input));
  }
  if (any_binary_input && !binary_request) {
    return invalid_argument("an input has parameters.binary_data_size but the request has no "
                            "Inference-Header-Content-Length header");
  }
  if (binary_request) SLIPWAY_RETURN_IF_ERROR(read_binary_inputs(inputs, binary));

  std::vector<OutputSpec> available = outputs_of(bundle);
  array outputs_array;
  if (request["outputs"].get(outputs_array) == simdjson::SUCCESS) {
    for (element item : outputs_array) {
      std::string_view name;
      if (item["name"].get(name) != simdjson::SUCCESS) return invalid_argument("each requested output needs a 'name'");
      auto found =
          std::find_if(available.begin(), available.end(), [&](const auto& output) { return output.name == name; });
      if (found == available.end()) {
        std::string names;
        for (const auto& output : available) names += (names.empty() ? "" : ", ") + output.name;
        return invalid_argument("unknown output '" + std::string(name) + "'; the model's outputs are: " + names);
      }
      OutputSpec wanted = *found;
      wanted.binary = all_binary;
      object output_parameters;
      if (item["parameters"].get(output_parameters) == simdjson::SUCCESS) {
        wanted.binary = parameter_flag(output_parameters, "binary_data").value_or(all_binary);
      }
      prepared.wanted.push_back(std::move(wanted));
    }
  } else {
    prepared.wanted = available;
    for (auto& output : prepared.wanted) output.binary = all_binary;
  }

  bool matrix_form = inputs.size() == 1 && !schema.feature_index(inputs[0].name);
  InputColumns columns;
  SLIPWAY_RETURN_IF_ERROR(matrix_form ? columns_from_matrix(inputs[0], schema, columns)
                                      : columns_from_named_inputs(inputs, schema, columns));
  SLIPWAY_RETURN_IF_ERROR(schema.transform_columns(columns.columns, columns.rows, prepared.features));
  prepared.rows = columns.rows;
  return prepared;
}

HttpResponse Service::State::infer_response(const LoadedModel& loaded, const PreparedInfer& prepared,
                                            const model::Predictions& predictions) {
  const model::Bundle& bundle = *loaded.bundle;
  std::string binary;  // raw output tensors, in output order, after the JSON
  JsonWriter json;
  json.begin_object();
  json.key("model_name").value(loaded.name);
  json.key("model_version").value(loaded.version_text);
  if (!prepared.request_id.empty()) json.key("id").value(prepared.request_id);
  json.key("outputs").begin_array();
  for (const auto& output : prepared.wanted) {
    json.begin_object();
    json.key("name").value(output.name);
    json.key("datatype").value(output.datatype);
    bool labels = output.datatype == "BYTES";
    json.key("shape").begin_array().value(static_cast<std::uint64_t>(predictions.rows));
    // Multiclass probabilities are [rows, classes], in the order of the model's class_labels.
    if (!labels && predictions.columns > 1) json.value(static_cast<std::uint64_t>(predictions.columns));
    json.end_array();
    if (output.binary) {
      std::size_t before = binary.size();
      if (labels) {
        for (std::size_t row = 0; row < predictions.rows; ++row) {
          const std::string& label = bundle.predicted_label(predictions, row);
          auto length = static_cast<std::uint32_t>(label.size());
          binary.append(reinterpret_cast<const char*>(&length), sizeof length);
          binary += label;
        }
      } else {
        binary.append(reinterpret_cast<const char*>(predictions.scores.data()),
                      predictions.scores.size() * sizeof(float));
      }
      json.key("parameters").begin_object();
      json.key("binary_data_size").value(static_cast<std::uint64_t>(binary.size() - before));
      json.end_object();
    } else {
      json.key("data").begin_array();
      if (labels) {
        for (std::size_t row = 0; row < predictions.rows; ++row) json.value(bundle.predicted_label(predictions, row));
      } else {
        for (float score : predictions.scores) json.value(score);
      }
      json.end_array();
    }
    json.end_object();
  }
  json.end_array();
  json.end_object();
  HttpResponse response = json_response(200, json.take());
  if (!binary.empty() || std::any_of(prepared.wanted.begin(), prepared.wanted.end(),
                                     [](const OutputSpec& output) { return output.binary; })) {
    response.headers.emplace_back("Inference-Header-Content-Length", std::to_string(response.body.size()));
    response.content_type = "application/octet-stream";
    response.body += binary;
  }
  return response;
}

void Service::State::infer(const Servable& servable, std::string_view body, const RequestHeaders& headers,
                           const Finish& finish) {
  using Stage = ServerMetrics::Stage;
  std::shared_ptr<const LoadedModel> loaded = servable.model;
  const std::string& name = loaded->name;
  const std::string& version = loaded->version_text;
  auto seconds_since = [](std::int64_t start) { return static_cast<double>(monotonic_ns() - start) * 1e-9; };
  // A cached model answers a byte-identical JSON request from the cache, without parsing it.
  bool cacheable = loaded->config.cache && headers.inference_header_length.empty();
  if (cacheable) {
    std::string hit;
    bool found = cache.lookup(name, loaded->version, body, hit);
    metrics.record_cache(name, version, found);
    if (found) {
      finish(json_response(200, std::move(hit)), 0);
      return;
    }
  }
  std::int64_t started = monotonic_ns();
  auto prepared = prepare_infer(*loaded, body, headers);
  if (!prepared.ok()) {
    finish(error_response(prepared.status()), 0);
    return;
  }
  metrics.record_stage(name, version, Stage::kInput, seconds_since(started));
  // The response is written where the scores arrive: here, or on the batch executor. The body is
  // copied for the cache key only when the model is cached. Only the bundle and names travel with
  // a queued request, so a retired model's memory is freed once its queue drains.
  auto cache_key = cacheable ? std::make_shared<std::string>(body) : nullptr;
  auto respond = [this, loaded, seconds_since, finish, cacheable, cache_key](const PreparedInfer& request,
                                                                            const model::Predictions& predictions) {
    std::int64_t writing = monotonic_ns();
    HttpResponse response = infer_response(*loaded, request, predictions);
    metrics.record_stage(loaded->name, loaded->version_text, Stage::kOutput, seconds_since(writing));
    if (cacheable && response.headers.empty()) {
      cache.insert(loaded->name, loaded->version, *cache_key, response.body);
      metrics.set_cache_bytes(cache.bytes());
    }
    finish(std::move(response), request.rows);
  };
  if (loaded->batcher == nullptr) {
    metrics.change_pending(name, version, 1);
    std::int64_t computing = monotonic_ns();
    auto predictions = loaded->bundle->predict_preprocessed(prepared->features, prepared->rows);
    metrics.record_stage(name, version, Stage::kInfer, seconds_since(computing));
    metrics.record_execution(name, version, prepared->rows, false);
    metrics.change_pending(name, version, -1);
    respond(*prepared, predictions);
    return;
  }
  auto shared = std::make_shared<PreparedInfer>(std::move(prepared).value());
  BatchJob job;
  job.features = std::move(shared->features);
  job.rows = shared->rows;
  job.priority = shared->priority;
  job.timeout = shared->timeout;
  job.done = [this, name, version, shared, respond, finish](Result<model::Predictions> predictions,
                                                            BatchTiming timing) {
    metrics.change_pending(name, version, -1);
    metrics.record_stage(name, version, Stage::kQueue, std::chrono::duration<double>(timing.queue).count());
    if (!predictions.ok()) {
      finish(error_response(predictions.status()), 0);
      return;
    }
    metrics.record_stage(name, version, Stage::kInfer, std::chrono::duration<double>(timing.compute).count());
    respond(*shared, *predictions);
  };
  metrics.change_pending(name, version, 1);
  Status submitted = loaded->batcher->submit(std::move(job));
  if (!submitted.ok()) {
    metrics.change_pending(name, version, -1);
    HttpResponse response = error_response(submitted);
    if (submitted.code() == StatusCode::kResourceExhausted) response.headers.emplace_back("Retry-After", "1");
    finish(std::move(response), 0);
  }
}

// Triton's model configuration shape, for what Slipway configures.
std::string Service::State::config_json(const LoadedModel& loaded) {
  const ModelServingConfig& serving = loaded.config;
  const BatchingConfig& config = serving.batching;
  bool batching = loaded.batcher != nullptr;
  JsonWriter json;
  json.begin_object().key("name").value(loaded.name).key("platform").value(
      "slipway_" + std::string(loaded.bundle->model().family()));
  json.key("max_batch_size").value(static_cast<std::uint64_t>(batching ? config.max_batch_size : 0));
  if (batching) {
    json.key("dynamic_batching").begin_object();
    json.key("preferred_batch_size").begin_array();
    for (std::size_t size : config.preferred_batch_sizes) json.value(static_cast<std::uint64_t>(size));
    json.end_array();
    json.key("max_queue_delay_microseconds").value(static_cast<std::int64_t>(config.max_queue_delay.count()));
    json.key("priority_levels").value(config.priority_levels);
    json.key("default_priority_level").value(config.default_priority);
    json.key("default_queue_policy").begin_object();
    json.key("max_queue_size").value(static_cast<std::uint64_t>(config.max_queue_size));
    json.key("default_timeout_microseconds").value(static_cast<std::int64_t>(config.default_timeout.count()));
    json.end_object().end_object();
  }
  json.key("instance_group").begin_array().begin_object();
  json.key("count").value(batching ? config.instances : 1).key("kind").value("KIND_CPU");
  json.end_object().end_array();
  json.key("response_cache").begin_object().key("enable").value(serving.cache).end_object();
  // Slipway's own settings, in the shape serving-config takes them.
  json.key("parameters").begin_object();
  json.key("idle_unload_s").value(static_cast<std::int64_t>(serving.idle_unload.count()));
  json.key("warmup_requests").value(serving.warmup_requests);
  json.key("memory_bytes").value(static_cast<std::uint64_t>(loaded.memory_bytes));
  json.end_object();
  json.end_object();
  return json.take();
}

HttpResponse Service::State::handle_repository_route(std::string_view method,
                                                     const std::vector<std::string_view>& segments,
                                                     std::string_view body) {
  // segments: v2 repository index | v2 repository models NAME load|unload
  if (method != "POST") return error_response(405, "use POST for the repository API");
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  object request;
  bool has_body = body.find_first_not_of(" \t\r\n") != std::string_view::npos;
  if (has_body && parser.parse(padded).get(request) != simdjson::SUCCESS) {
    return error_response(400, "the request body must be a JSON object (or empty)");
  }
  if (segments.size() == 3 && segments[2] == "index") {
    bool ready_only = false;
    if (has_body) {
      element ready;
      if (request["ready"].get(ready) == simdjson::SUCCESS && ready.get(ready_only) != simdjson::SUCCESS) {
        return error_response(400, "'ready' must be true or false");
      }
    }
    JsonWriter json;
    json.begin_array();
    for (const auto& state : manager.index(ready_only)) {
      json.begin_object().key("name").value(state.name);
      if (!state.version.empty()) json.key("version").value(state.version);
      json.key("state").value(state.state).key("reason").value(state.reason).end_object();
    }
    json.end_array();
    return json_response(200, json.take());
  }
  if (segments.size() == 5 && segments[2] == "models" && (segments[4] == "load" || segments[4] == "unload")) {
    std::string name(segments[3]);
    if (has_body && segments[4] == "load") {
      object parameters;
      if (request["parameters"].get(parameters) == simdjson::SUCCESS && parameters.begin() != parameters.end()) {
        return error_response(400, "load takes no parameters in Slipway: set a model's configuration with "
                                   "`slipway serving-config` or `serve --config`, then load");
      }
    }
    Status done = segments[4] == "load" ? manager.load(name) : manager.unload(name);
    if (!done.ok()) return error_response(done);
    return json_response(200, "{}");
  }
  return error_response(404, "no such repository route");
}

void Service::State::handle_model_route(std::string_view method, const std::vector<std::string_view>& segments,
                                        std::string_view body, const RequestHeaders& headers,
                                        std::string& metric_model, std::string& metric_version, const Finish& finish) {
  auto answer = [&](HttpResponse response) { finish(std::move(response), 0); };
  // segments: v2 models NAME [versions V] [ready|infer|stats|config]
  std::string name(segments[2]);
  std::size_t next = 3;
  std::optional<std::int64_t> version;
  if (segments.size() > next && segments[next] == "versions") {
    if (segments.size() <= next + 1) return answer(error_response(404, "the path needs a version after 'versions/'"));
    std::string_view text = segments[next + 1];
    std::int64_t number = 0;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size() || number < 1) {
      return answer(error_response(400, "model version '" + std::string(text) + "' is not a positive integer"));
    }
    version = number;
    next += 2;
  }
  std::string_view action = segments.size() > next ? segments[next] : std::string_view{};
  if (segments.size() > next + 1 ||
      (!action.empty() && action != "ready" && action != "infer" && action != "stats" && action != "config")) {
    return answer(error_response(404, "no such model route"));
  }
  std::string_view wanted_method = action == "infer" ? "POST" : "GET";
  if (method != wanted_method) {
    return answer(error_response(405, "use " + std::string(wanted_method) + " for this route"));
  }
  if (action == "stats") {
    metric_model = name;
    return answer(json_response(200, metrics.stats_json(name, version ? std::to_string(*version) : "")));
  }
  auto servable = manager.acquire(name, version);
  if (!servable.ok()) {
    if (servable.status().code() != StatusCode::kNotFound) {
      metric_model = name;
      metric_version = version ? std::to_string(*version) : "";
    }
    return answer(error_response(servable.status()));
  }
  metric_model = name;
  metric_version = servable->model->version_text;
  if (action == "ready") {
    JsonWriter json;
    json.begin_object().key("name").value(name).key("ready").value(true).end_object();
    return answer(json_response(200, json.take()));
  }
  if (action == "infer") return infer(*servable, body, headers, finish);
  if (action == "config") return answer(json_response(200, config_json(*servable->model)));
  answer(json_response(200, model_metadata(*servable, version.has_value())));
}

Service::Service(registry::Registry& registry, ServiceOptions options)
    : state_(std::make_unique<State>(registry, std::move(options))) {}

Service::~Service() = default;

bool Service::needs_worker(std::string_view target) {
  auto query = target.find('?');
  std::string_view path = target.substr(0, query);
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  return ends_with("/infer") || ends_with("/load") || ends_with("/unload");
}

std::vector<std::string> Service::warm_up() { return state_->manager.load_all(); }

std::string Service::metrics_text() const { return state_->metrics.prometheus_text(); }

namespace {

// The model a path names, for requests never routed; the version is not resolved for them.
std::string model_in_path(std::string_view target) {
  auto segments = path_segments(target);
  return segments.size() >= 3 && segments[1] == "models" ? std::string(segments[2]) : "(unknown)";
}

}  // namespace

void Service::record_rejection(std::string_view target) {
  state_->metrics.record(model_in_path(target), "", 429, 0.0, 0, false, "server_overloaded");
}

void Service::record_abandoned(std::string_view target) {
  // nginx's 499: the client closed the connection before the response.
  state_->metrics.record(model_in_path(target), "", 499, 0.0, 0, false, "client_closed");
}

void Service::stop_batching() { state_->manager.stop_batching(); }

HttpResponse Service::handle(std::string_view method, std::string_view target, std::string_view body,
                             const RequestHeaders& headers) {
  std::promise<HttpResponse> answered;
  auto response = answered.get_future();
  handle_async(method, target, body, headers,
               [&answered](HttpResponse done) { answered.set_value(std::move(done)); });
  return response.get();
}

void Service::handle_async(std::string_view method, std::string_view target, std::string_view body,
                           const RequestHeaders& headers, std::function<void(HttpResponse)> done) {
  std::int64_t started = monotonic_ns();
  auto segments = path_segments(target);
  auto get_only = [&](auto make) { return method == "GET" ? make() : error_response(405, "use GET for this route"); };

  if (auto refused = state_->authorize(role_required(segments), headers.authorization)) {
    if (segments.size() >= 3 && segments[0] == "v2" && segments[1] == "models") {
      state_->metrics.record("(unknown)", "", refused->status, 0.0, 0, false);
    }
    return done(std::move(*refused));
  }
  if (segments.size() == 1 && segments[0] == "metrics") {
    return done(
        get_only([&] { return HttpResponse{200, "text/plain; version=0.0.4", state_->metrics.prometheus_text(), {}, {}}; }));
  }
  if (segments.empty() || segments[0] != "v2") {
    return done(error_response(404, "no route for " + std::string(method) + " " + std::string(target)));
  }
  if (segments.size() == 1) {
    return done(get_only([] {
      JsonWriter json;
      json.begin_object().key("name").value("slipway").key("version").value(slipway_version());
      json.key("extensions").begin_array();
      json.value("model_repository").value("statistics").value("model_configuration").value("binary_tensor_data");
      json.value("schedule_policy");
      json.end_array().end_object();
      return json_response(200, json.take());
    }));
  }
  if (segments.size() == 3 && segments[1] == "health" && (segments[2] == "live" || segments[2] == "ready")) {
    return done(get_only([&] {
      JsonWriter json;
      json.begin_object().key(segments[2]).value(true).end_object();
      return json_response(200, json.take());
    }));
  }
  if (segments.size() >= 2 && segments[1] == "repository") {
    return done(state_->handle_repository_route(method, segments, body));
  }
  if (segments.size() == 3 && segments[1] == "models" && segments[2] == "stats") {
    return done(get_only([&] { return json_response(200, state_->metrics.stats_json("", "")); }));
  }
  if (segments.size() >= 3 && segments[1] == "models") {
    // The metric labels are known once the route resolves; the response may come later, from a
    // batch executor.
    auto labels = std::make_shared<std::pair<std::string, std::string>>();
    State* state = state_.get();
    bool inference = is_inference_path(segments);
    auto finish = [state, labels, started, inference, done = std::move(done)](HttpResponse response,
                                                                             std::size_t rows) {
      const std::string& model = labels->first.empty() ? std::string("(unknown)") : labels->first;
      double seconds = static_cast<double>(monotonic_ns() - started) * 1e-9;
      state->metrics.record(model, labels->second, response.status, seconds, rows, inference,
                            response.failure_reason);
      done(std::move(response));
    };
    state_->handle_model_route(method, segments, body, headers, labels->first, labels->second, finish);
    return;
  }
  done(error_response(404, "no route for " + std::string(method) + " " + std::string(target)));
}

}  // namespace slipway::serve
