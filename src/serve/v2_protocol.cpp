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
#include "serve/model_repository.h"
#include "serve/response_cache.h"
#include "serve/server_metrics.h"
#include "slipway/serve.h"

namespace slipway::serve {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

constexpr int kMaxNesting = 8;

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

HttpResponse error_response(const Status& status) { return error_response(http_status_for(status), status.message()); }

bool is_numeric_datatype(std::string_view datatype) {
  static constexpr std::string_view kNumeric[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                                  "INT16", "INT32", "INT64",  "FP16",   "FP32",   "FP64"};
  for (auto name : kNumeric) {
    if (datatype == name) return true;
  }
  return false;
}

// Flattens nested JSON arrays (row-major) into `out`. Error when nesting is too deep.
Status flatten(element value, std::vector<element>& out, int depth) {
  if (value.is_array()) {
    if (depth >= kMaxNesting) return invalid_argument("tensor data is nested too deeply");
    array items;
    if (value.get(items) != simdjson::SUCCESS) return invalid_argument("tensor data is malformed");
    for (element item : items) SLIPWAY_RETURN_IF_ERROR(flatten(item, out, depth + 1));
    return {};
  }
  out.push_back(value);
  return {};
}

struct TensorInput {
  std::string name;
  std::string datatype;
  std::vector<std::uint64_t> shape;
  std::vector<element> values;
};

Result<TensorInput> read_input(element item, std::size_t position) {
  object input;
  std::string where = "inputs[" + std::to_string(position) + "]";
  if (item.get(input) != simdjson::SUCCESS) return invalid_argument(where + " must be an object");
  TensorInput tensor;
  std::string_view text;
  if (input["name"].get(text) != simdjson::SUCCESS) return invalid_argument(where + " needs a string 'name'");
  tensor.name = std::string(text);
  where = "input '" + tensor.name + "'";
  if (input["datatype"].get(text) != simdjson::SUCCESS) return invalid_argument(where + " needs a string 'datatype'");
  tensor.datatype = std::string(text);
  array shape;
  if (input["shape"].get(shape) != simdjson::SUCCESS) return invalid_argument(where + " needs a 'shape' array");
  for (element dimension : shape) {
    std::uint64_t size = 0;
    if (dimension.get(size) != simdjson::SUCCESS) {
      return invalid_argument(where + " has a shape entry that is not a non-negative integer");
    }
    tensor.shape.push_back(size);
  }
  element data;
  if (input["data"].get(data) != simdjson::SUCCESS) return invalid_argument(where + " needs 'data'");
  SLIPWAY_RETURN_IF_ERROR(flatten(data, tensor.values, 0));
  std::uint64_t expected = 1;
  for (auto size : tensor.shape) {
    if (size != 0 && expected > std::numeric_limits<std::uint32_t>::max() / size) {
      return invalid_argument(where + " has an impossibly large shape");
    }
    expected *= size;
  }
  if (tensor.shape.empty() || expected != tensor.values.size()) {
    std::string shape_text;
    for (auto size : tensor.shape) shape_text += (shape_text.empty() ? "" : ",") + std::to_string(size);
    return invalid_argument(where + " has " + std::to_string(tensor.values.size()) + " values but its shape [" +
                            shape_text + "] needs " + std::to_string(tensor.shape.empty() ? 0 : expected));
  }
  return tensor;
}

// One numeric element; JSON null is a missing value (a documented Slipway extension).
Result<float> numeric_value(element value, const std::string& input_name) {
  if (value.is_null()) return std::numeric_limits<float>::quiet_NaN();
  double number = 0;
  if (value.get(number) == simdjson::SUCCESS) return static_cast<float>(number);
  bool flag = false;
  if (value.get(flag) == simdjson::SUCCESS) return flag ? 1.0f : 0.0f;
  return invalid_argument("input '" + input_name + "' holds a non-numeric value; send numbers (or null for missing)");
}

// Builds a table with one column per model input from inputs sent by feature name.
Result<data::Table> table_from_named_inputs(const std::vector<TensorInput>& inputs, const model::Preprocessor& schema) {
  std::unordered_map<std::string_view, const TensorInput*> by_name;
  for (const auto& input : inputs) {
    if (!by_name.emplace(input.name, &input).second)
      return invalid_argument("input '" + input.name + "' is given twice");
  }
  std::string expected_names;
  for (const auto& feature : schema.features()) expected_names += (expected_names.empty() ? "" : ", ") + feature.name;
  for (const auto& input : inputs) {
    bool known = false;
    for (const auto& feature : schema.features()) known = known || feature.name == input.name;
    if (!known)
      return invalid_argument("unknown input '" + input.name + "'; the model's inputs are: " + expected_names);
  }
  std::optional<std::size_t> rows;
  data::Table table;
  for (const auto& feature : schema.features()) {
    auto found = by_name.find(feature.name);
    if (found == by_name.end()) {
      return invalid_argument("missing input '" + feature.name + "'; the model's inputs are: " + expected_names);
    }
    const TensorInput& input = *found->second;
    bool column_shape = input.shape.size() == 1 || (input.shape.size() == 2 && input.shape[1] == 1);
    if (!column_shape) return invalid_argument("input '" + input.name + "' must have shape [N] or [N,1]");
    if (rows && *rows != input.shape[0]) {
      return invalid_argument("input '" + input.name + "' has " + std::to_string(input.shape[0]) +
                              " rows but other inputs have " + std::to_string(*rows));
    }
    rows = input.shape[0];
    data::Column column;
    column.name = feature.name;
    if (feature.type == data::ColumnType::kNumeric) {
      if (!is_numeric_datatype(input.datatype)) {
        return invalid_argument("input '" + input.name +
                                "' is numeric; its datatype must be FP32, FP64, an integer type or BOOL, not " +
                                input.datatype);
      }
      column.type = data::ColumnType::kNumeric;
      column.numbers.reserve(input.values.size());
      for (element value : input.values) {
        SLIPWAY_ASSIGN_OR_RETURN(float number, numeric_value(value, input.name));
        column.numbers.push_back(number);
      }
    } else {
      if (input.datatype != "BYTES") {
        return invalid_argument("input '" + input.name + "' is categorical; its datatype must be BYTES, not " +
                                input.datatype);
      }
      column.type = data::ColumnType::kCategorical;
      std::unordered_map<std::string_view, std::int32_t> code_of;
      for (element value : input.values) {
        if (value.is_null()) {
          column.codes.push_back(data::Column::kMissingCode);
          continue;
        }
        std::string_view text;
        if (value.get(text) != simdjson::SUCCESS) {
          return invalid_argument("input '" + input.name +
                                  "' is BYTES; its values must be strings (or null for missing)");
        }
        auto [it, inserted] = code_of.try_emplace(text, static_cast<std::int32_t>(column.dictionary.size()));
        if (inserted) column.dictionary.emplace_back(text);
        column.codes.push_back(it->second);
      }
    }
    SLIPWAY_RETURN_IF_ERROR(table.add_column(std::move(column)));
  }
  return table;
}

// Builds the table from one [N, F] numeric tensor whose columns are the inputs in schema order.
Result<data::Table> table_from_matrix(const TensorInput& input, const model::Preprocessor& schema) {
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
  if (!is_numeric_datatype(input.datatype)) {
    return invalid_argument("input '" + input.name + "' must be FP32 (or another numeric type), not " + input.datatype);
  }
  std::size_t rows = input.shape[0];
  data::Table table;
  for (std::size_t column_index = 0; column_index < features.size(); ++column_index) {
    data::Column column;
    column.name = features[column_index].name;
    column.numbers.reserve(rows);
    for (std::size_t row = 0; row < rows; ++row) {
      SLIPWAY_ASSIGN_OR_RETURN(float number,
                               numeric_value(input.values[row * features.size() + column_index], input.name));
      column.numbers.push_back(number);
    }
    SLIPWAY_RETURN_IF_ERROR(table.add_column(std::move(column)));
  }
  return table;
}

bool names_a_feature(const TensorInput& input, const model::Preprocessor& schema) {
  for (const auto& feature : schema.features()) {
    if (feature.name == input.name) return true;
  }
  return false;
}

struct OutputSpec {
  std::string name;
  std::string datatype;
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

std::string model_metadata(const ServableModel& servable, bool single_version) {
  JsonWriter json;
  json.begin_object();
  json.key("name").value(servable.name);
  json.key("versions").begin_array();
  if (single_version) {
    json.value(std::to_string(servable.version));
  } else {
    for (auto version : servable.versions) json.value(std::to_string(version));
  }
  json.end_array();
  json.key("platform").value("slipway_" + std::string(servable.bundle->model().family()));
  json.key("inputs").begin_array();
  for (const auto& feature : servable.bundle->preprocessor().features()) {
    json.raw(tensor_metadata(feature.name, feature.type == data::ColumnType::kNumeric ? "FP32" : "BYTES"));
  }
  json.end_array();
  json.key("outputs").begin_array();
  for (const auto& output : outputs_of(*servable.bundle)) {
    bool per_class = output.datatype == "FP32" && servable.bundle->task() == model::Task::kMulticlassClassification;
    json.raw(tensor_metadata(output.name, output.datatype, per_class ? servable.bundle->model().output_count() : 1));
  }
  json.end_array();
  json.key("parameters").begin_object();
  json.key("task").value(model::task_name(servable.bundle->task()));
  json.key("target").value(servable.bundle->manifest().target);
  json.key("version").value(std::to_string(servable.version));
  json.end_object();
  json.end_object();
  return json.take();
}

// The path split into segments: "/v2/models/x/ready" -> {"v2", "models", "x", "ready"}.
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
      : repository(registry, options.registry_refresh),
        batching(std::move(options.batching)),
        cached_models(std::move(options.cached_models)) {
    if (!cached_models.empty()) {
      cache = std::make_unique<ResponseCache>(options.response_cache_bytes);
      metrics.set_cache_bytes(0);
    }
  }

  ModelRepository repository;
  ServerMetrics metrics;
  BatchingConfig batching;
  // Declared before the batchers: a batch finishing while they shut down still writes here.
  std::vector<std::string> cached_models;
  std::unique_ptr<ResponseCache> cache;  // null when no model opted in
  std::mutex batchers_mutex;
  std::map<std::pair<std::string, std::int64_t>, std::shared_ptr<Batcher>> batchers;
  bool batching_stopped = false;  // guarded by batchers_mutex

  bool cached(const std::string& model) const {
    return cache != nullptr && std::find(cached_models.begin(), cached_models.end(), model) != cached_models.end();
  }

  bool batching_enabled() const { return batching.max_batch_size > 1; }
  std::shared_ptr<Batcher> batcher_for(const ServableModel& servable);

  // The completion of a model route: the response and what the metrics need.
  using Finish = std::function<void(HttpResponse response, std::size_t rows)>;
  Result<PreparedInfer> prepare_infer(const ServableModel& servable, std::string_view body) const;
  static HttpResponse infer_response(const ServableModel& servable, const PreparedInfer& prepared,
                                     const model::Predictions& predictions);
  void infer(const ServableModel& servable, std::string_view body, const Finish& finish);
  std::string config_json(const ServableModel& servable) const;
  void handle_model_route(std::string_view method, const std::vector<std::string_view>& segments,
                          std::string_view body, std::string& metric_model, std::string& metric_version,
                          const Finish& finish);
};

std::shared_ptr<Batcher> Service::State::batcher_for(const ServableModel& servable) {
  std::lock_guard lock(batchers_mutex);
  if (batching_stopped) return nullptr;
  auto& batcher = batchers[{servable.name, servable.version}];
  if (batcher == nullptr) {
    batcher = std::make_shared<Batcher>(servable.bundle, batching,
                                        [this, name = servable.name, version = std::to_string(servable.version)](
                                            std::size_t rows) { metrics.record_execution(name, version, rows, true); });
  }
  return batcher;
}

Result<PreparedInfer> Service::State::prepare_infer(const ServableModel& servable, std::string_view body) const {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  object request;
  auto parse_error = parser.parse(padded).get(request);
  if (parse_error != simdjson::SUCCESS) {
    return invalid_argument(std::string("the request body is not a JSON object: ") +
                            simdjson::error_message(parse_error));
  }
  const model::Bundle& bundle = *servable.bundle;
  const model::Preprocessor& schema = bundle.preprocessor();
  PreparedInfer prepared;

  element id_value;
  if (request["id"].get(id_value) == simdjson::SUCCESS) {
    std::string_view id_text;
    if (id_value.get(id_text) != simdjson::SUCCESS) return invalid_argument("'id' must be a string");
    prepared.request_id = std::string(id_text);
  }
  // KServe/Triton request parameters: priority (1 = highest) and timeout (microseconds).
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
  }
  array inputs_array;
  if (request["inputs"].get(inputs_array) != simdjson::SUCCESS || inputs_array.size() == 0) {
    return invalid_argument("the request needs a non-empty 'inputs' array");
  }
  std::vector<TensorInput> inputs;
  std::size_t position = 0;
  for (element item : inputs_array) {
    SLIPWAY_ASSIGN_OR_RETURN(auto input, read_input(item, position++));
    inputs.push_back(std::move(input));
  }

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
      prepared.wanted.push_back(*found);
    }
  } else {
    prepared.wanted = available;
  }

  bool matrix_form = inputs.size() == 1 && !names_a_feature(inputs[0], schema);
  SLIPWAY_ASSIGN_OR_RETURN(auto table,
                           matrix_form ? table_from_matrix(inputs[0], schema) : table_from_named_inputs(inputs, schema));
  SLIPWAY_RETURN_IF_ERROR(schema.transform(table, prepared.features));
  prepared.rows = table.row_count();
  return prepared;
}

HttpResponse Service::State::infer_response(const ServableModel& servable, const PreparedInfer& prepared,
                                            const model::Predictions& predictions) {
  const model::Bundle& bundle = *servable.bundle;
  JsonWriter json;
  json.begin_object();
  json.key("model_name").value(servable.name);
  json.key("model_version").value(std::to_string(servable.version));
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
    json.key("data").begin_array();
    if (labels) {
      for (std::size_t row = 0; row < predictions.rows; ++row) json.value(bundle.predicted_label(predictions, row));
    } else {
      for (float score : predictions.scores) json.value(score);
    }
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json_response(200, json.take());
}

void Service::State::infer(const ServableModel& servable, std::string_view body, const Finish& finish) {
  using Stage = ServerMetrics::Stage;
  std::string version = std::to_string(servable.version);
  auto seconds_since = [](std::int64_t start) { return static_cast<double>(monotonic_ns() - start) * 1e-9; };
  // A cached model answers a byte-identical request from the cache, without parsing it.
  bool cacheable = cached(servable.name);
  if (cacheable) {
    std::string hit;
    bool found = cache->lookup(servable.name, servable.version, body, hit);
    metrics.record_cache(servable.name, version, found);
    if (found) {
      finish(json_response(200, std::move(hit)), 0);
      return;
    }
  }
  std::int64_t started = monotonic_ns();
  auto prepared = prepare_infer(servable, body);
  if (!prepared.ok()) {
    finish(error_response(prepared.status()), 0);
    return;
  }
  metrics.record_stage(servable.name, version, Stage::kInput, seconds_since(started));
  // The response is written where the scores arrive: here, or on the batch executor. The body is
  // copied for the cache key only when the model is cached.
  auto cache_key = std::make_shared<std::string>(cacheable ? std::string(body) : std::string());
  auto respond = [this, servable, version, seconds_since, finish, cacheable, cache_key](
                     const PreparedInfer& request, const model::Predictions& predictions) {
    std::int64_t writing = monotonic_ns();
    HttpResponse response = infer_response(servable, request, predictions);
    metrics.record_stage(servable.name, version, Stage::kOutput, seconds_since(writing));
    if (cacheable) {
      cache->insert(servable.name, servable.version, *cache_key, response.body);
      metrics.set_cache_bytes(cache->bytes());
    }
    finish(std::move(response), request.rows);
  };
  std::shared_ptr<Batcher> batcher = batching_enabled() ? batcher_for(servable) : nullptr;
  if (batcher == nullptr) {
    std::int64_t computing = monotonic_ns();
    auto predictions = servable.bundle->predict_preprocessed(prepared->features, prepared->rows);
    metrics.record_stage(servable.name, version, Stage::kInfer, seconds_since(computing));
    metrics.record_execution(servable.name, version, prepared->rows, false);
    respond(*prepared, predictions);
    return;
  }
  auto shared = std::make_shared<PreparedInfer>(std::move(prepared).value());
  BatchJob job;
  job.features = std::move(shared->features);
  job.rows = shared->rows;
  job.priority = shared->priority;
  job.timeout = shared->timeout;
  job.done = [this, servable, version, shared, respond, finish](Result<model::Predictions> predictions,
                                                                BatchTiming timing) {
    metrics.record_stage(servable.name, version, Stage::kQueue, std::chrono::duration<double>(timing.queue).count());
    if (!predictions.ok()) {
      finish(error_response(predictions.status()), 0);
      return;
    }
    metrics.record_stage(servable.name, version, Stage::kInfer, std::chrono::duration<double>(timing.compute).count());
    respond(*shared, *predictions);
  };
  Status submitted = batcher->submit(std::move(job));
  if (!submitted.ok()) {
    HttpResponse response = error_response(submitted);
    if (submitted.code() == StatusCode::kResourceExhausted) response.headers.emplace_back("Retry-After", "1");
    finish(std::move(response), 0);
  }
}

// Triton's model configuration shape, for what Slipway configures.
std::string Service::State::config_json(const ServableModel& servable) const {
  const BatchingConfig& config = batching;
  JsonWriter json;
  json.begin_object().key("name").value(servable.name).key("platform").value(
      "slipway_" + std::string(servable.bundle->model().family()));
  json.key("max_batch_size").value(static_cast<std::uint64_t>(batching_enabled() ? config.max_batch_size : 0));
  if (batching_enabled()) {
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
  json.key("count").value(batching_enabled() ? config.instances : 1).key("kind").value("KIND_CPU");
  json.end_object().end_array().end_object();
  return json.take();
}

void Service::State::handle_model_route(std::string_view method, const std::vector<std::string_view>& segments,
                                        std::string_view body, std::string& metric_model, std::string& metric_version,
                                        const Finish& finish) {
  auto answer = [&](HttpResponse response) { finish(std::move(response), 0); };
  // segments: v2 models NAME [versions V] [ready|infer]
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
  auto servable = repository.resolve(name, version);
  if (!servable.ok()) {
    if (servable.status().code() != StatusCode::kNotFound) {
      metric_model = name;
      metric_version = version ? std::to_string(*version) : "";
    }
    return answer(error_response(servable.status()));
  }
  metric_model = name;
  metric_version = std::to_string(servable->version);
  if (action == "ready") {
    JsonWriter json;
    json.begin_object().key("name").value(name).key("ready").value(true).end_object();
    return answer(json_response(200, json.take()));
  }
  if (action == "infer") return infer(*servable, body, finish);
  if (action == "stats") {
    return answer(json_response(200, metrics.stats_json(name, version ? std::to_string(*version) : "")));
  }
  if (action == "config") return answer(json_response(200, config_json(*servable)));
  answer(json_response(200, model_metadata(*servable, version.has_value())));
}

Service::Service(registry::Registry& registry, ServiceOptions options)
    : state_(std::make_unique<State>(registry, options)) {}

Service::~Service() = default;

bool Service::is_inference(std::string_view target) {
  auto query = target.find('?');
  std::string_view path = target.substr(0, query);
  return path.size() >= 6 && path.substr(path.size() - 6) == "/infer";
}

std::vector<std::string> Service::warm_up() {
  std::vector<std::string> loaded;
  for (const auto& name : state_->repository.model_names()) {
    auto servable = state_->repository.resolve(name, std::nullopt);
    if (servable.ok()) {
      loaded.push_back(name + "@" + std::to_string(servable->version));
    } else if (servable.status().code() != StatusCode::kNotFound) {
      log_error("model '" + name + "' cannot be served: " + servable.status().message());
    }
  }
  return loaded;
}

std::string Service::metrics_text() const { return state_->metrics.prometheus_text(); }

void Service::stop_batching() {
  std::map<std::pair<std::string, std::int64_t>, std::shared_ptr<Batcher>> stopping;
  {
    std::lock_guard lock(state_->batchers_mutex);
    state_->batching_stopped = true;
    stopping.swap(state_->batchers);
  }
  stopping.clear();  // each batcher answers its queue and joins its executors here
}

HttpResponse Service::handle(std::string_view method, std::string_view target, std::string_view body) {
  std::promise<HttpResponse> answered;
  auto response = answered.get_future();
  handle_async(method, target, body, [&answered](HttpResponse done) { answered.set_value(std::move(done)); });
  return response.get();
}

void Service::handle_async(std::string_view method, std::string_view target, std::string_view body,
                           std::function<void(HttpResponse)> done) {
  std::int64_t started = monotonic_ns();
  auto segments = path_segments(target);
  auto get_only = [&](auto make) { return method == "GET" ? make() : error_response(405, "use GET for this route"); };

  if (segments.size() == 1 && segments[0] == "metrics") {
    return done(
        get_only([&] { return HttpResponse{200, "text/plain; version=0.0.4", state_->metrics.prometheus_text(), {}}; }));
  }
  if (segments.empty() || segments[0] != "v2") {
    return done(error_response(404, "no route for " + std::string(method) + " " + std::string(target)));
  }
  if (segments.size() == 1) {
    return done(get_only([] {
      JsonWriter json;
      json.begin_object().key("name").value("slipway").key("version").value(slipway_version());
      json.key("extensions").begin_array().end_array().end_object();
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
  if (segments.size() == 3 && segments[1] == "models" && segments[2] == "stats") {
    return done(get_only([&] { return json_response(200, state_->metrics.stats_json("", "")); }));
  }
  if (segments.size() >= 3 && segments[1] == "models") {
    // The metric labels are known once the route resolves; the response may come later, from a
    // batch executor.
    auto labels = std::make_shared<std::pair<std::string, std::string>>();
    State* state = state_.get();
    bool inference = is_inference(target);
    auto finish = [state, labels, started, inference, done = std::move(done)](HttpResponse response,
                                                                             std::size_t rows) {
      const std::string& model = labels->first.empty() ? std::string("(unknown)") : labels->first;
      double seconds = static_cast<double>(monotonic_ns() - started) * 1e-9;
      state->metrics.record(model, labels->second, response.status, seconds, rows, inference);
      done(std::move(response));
    };
    state_->handle_model_route(method, segments, body, labels->first, labels->second, finish);
    return;
  }
  done(error_response(404, "no route for " + std::string(method) + " " + std::string(target)));
}

}  // namespace slipway::serve
