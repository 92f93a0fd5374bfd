// v2 inference: decoding a request into the model's preprocessed rows, running it alone or
// through the model's dynamic batcher, and encoding the response (JSON or binary tensors).
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "serve/batcher.h"
#include "serve/service_state.h"
#include "serve/v2_tensors.h"

namespace slipway::serve {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

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

// Inputs sent by feature name, one per model input, each of shape [N] or [N, 1]. The bundle's
// unused inputs (an --ignore'd id, a baseline's input an optimized version dropped) are accepted
// and left out.
Status columns_from_named_inputs(const std::vector<TensorInput>& inputs, const model::Bundle& bundle,
                                 InputColumns& out) {
  const model::Preprocessor& schema = bundle.preprocessor();
  const auto& unused = bundle.manifest().unused_inputs;
  const auto& features = schema.features();
  auto check_column_shape = [](const TensorInput& input) -> Status {
    if (input.shape.size() == 1 || (input.shape.size() == 2 && input.shape[1] == 1)) return {};
    return invalid_argument("input '" + input.name + "' must have shape [N] or [N,1]");
  };
  std::vector<const TensorInput*> by_feature(features.size(), nullptr);
  for (const auto& input : inputs) {
    auto index = schema.feature_index(input.name);
    if (!index && std::find(unused.begin(), unused.end(), input.name) != unused.end()) {
      // Left unused, but still a column of the request's rows (an id the request log joins on).
      SLIPWAY_RETURN_IF_ERROR(check_column_shape(input));
      continue;
    }
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
    SLIPWAY_RETURN_IF_ERROR(check_column_shape(*input));
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

// A boolean parameter: nullopt when absent, InvalidArgument when present but not a boolean.
Result<std::optional<bool>> parameter_flag(object parameters, std::string_view key, std::string_view where) {
  element value;
  if (parameters[key].get(value) != simdjson::SUCCESS) return std::optional<bool>();
  bool flag = false;
  if (value.get(flag) != simdjson::SUCCESS) {
    return invalid_argument(std::string(where) + "." + std::string(key) + " must be true or false");
  }
  return std::optional<bool>(flag);
}

// An optional member that must be an object when present: nullopt when absent.
Result<std::optional<object>> optional_object(object parent, std::string_view key, std::string_view where) {
  element value;
  if (parent[key].get(value) != simdjson::SUCCESS) return std::optional<object>();
  object found;
  if (value.get(found) != simdjson::SUCCESS) return invalid_argument(std::string(where) + " must be a JSON object");
  return std::optional<object>(found);
}

}  // namespace

std::vector<OutputSpec> outputs_of(const model::Bundle& bundle) {
  if (bundle.task() != model::Task::kRegression) return {{"probability", "FP32"}, {"label", "BYTES"}};
  return {{"prediction", "FP32"}};
}

Result<PreparedInfer> Service::State::prepare_infer(const LoadedModel& loaded, std::string_view body,
                                                    const RequestHeaders& headers, std::int64_t* decoded_ns) {
  // Triton's binary tensor extension: the JSON is the first Inference-Header-Content-Length bytes.
  std::string_view json_text = body;
  std::string_view binary;
  if (headers.inference_header_length_repeated) {
    return invalid_argument("the Inference-Header-Content-Length header is given more than once");
  }
  bool binary_request = !headers.inference_header_length.empty();
  if (binary_request) {
    std::size_t json_length = 0;
    std::string_view text = headers.inference_header_length;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), json_length);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) {
      return invalid_argument("the Inference-Header-Content-Length header must be a byte count");
    }
    if (json_length == 0) {
      return invalid_argument(
          "Inference-Header-Content-Length: 0 (a raw tensor without JSON) is not supported; "
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
  // The JSON is parsed in place when the bytes after it may be read (binary data, or padding the
  // HTTP layer reserved); otherwise from a padded copy.
  std::size_t readable_after = body.size() - json_text.size() + headers.body_padding;
  std::optional<simdjson::padded_string> padded;
  if (readable_after < simdjson::SIMDJSON_PADDING) padded.emplace(json_text);
  object request;
  auto parse_error =
      (padded ? parser.parse(*padded) : parser.parse(json_text.data(), json_text.size(), false)).get(request);
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
  SLIPWAY_ASSIGN_OR_RETURN(auto request_parameters, optional_object(request, "parameters", "'parameters'"));
  if (request_parameters) {
    object parameters = *request_parameters;
    element value;
    if (parameters["priority"].get(value) == simdjson::SUCCESS) {
      std::int64_t priority = 0;
      if (value.get(priority) != simdjson::SUCCESS || priority < 0) {
        return invalid_argument("parameters.priority must be a non-negative integer");
      }
      int levels = std::max(1, loaded.config.batching.priority_levels);
      if (priority > levels) {
        return invalid_argument("parameters.priority is " + std::to_string(priority) + " but model '" + loaded.name +
                                "' has " + std::to_string(levels) + " priority level" + (levels == 1 ? "" : "s") +
                                " (1 is the highest; 0 takes the default)");
      }
      prepared.priority = static_cast<int>(priority);
    }
    if (parameters["timeout"].get(value) == simdjson::SUCCESS) {
      std::int64_t timeout = 0;
      // Bounded, so a deadline computed from it cannot overflow the clock.
      if (value.get(timeout) != simdjson::SUCCESS || timeout < 0 || timeout > 3'600'000'000) {
        return invalid_argument("parameters.timeout must be an integer from 0 to 3600000000 (microseconds)");
      }
      prepared.timeout = std::chrono::microseconds(timeout);
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto binary_output, parameter_flag(parameters, "binary_data_output", "parameters"));
    all_binary = binary_output.value_or(false);
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
    return invalid_argument(
        "an input has parameters.binary_data_size but the request has no "
        "Inference-Header-Content-Length header");
  }
  if (binary_request) SLIPWAY_RETURN_IF_ERROR(read_binary_inputs(inputs, binary));

  std::vector<OutputSpec> available = outputs_of(bundle);
  element outputs_value;
  if (request["outputs"].get(outputs_value) == simdjson::SUCCESS) {
    array outputs_array;
    if (outputs_value.get(outputs_array) != simdjson::SUCCESS) {
      return invalid_argument("'outputs' must be an array of {\"name\": ...} objects");
    }
    for (element output_value : outputs_array) {
      object item;
      std::string_view name;
      if (output_value.get(item) != simdjson::SUCCESS || item["name"].get(name) != simdjson::SUCCESS) {
        return invalid_argument("each requested output must be an object with a 'name'");
      }
      auto found =
          std::find_if(available.begin(), available.end(), [&](const auto& output) { return output.name == name; });
      if (found == available.end()) {
        std::string names;
        for (const auto& output : available) names += (names.empty() ? "" : ", ") + output.name;
        return invalid_argument("unknown output '" + std::string(name) + "'; the model's outputs are: " + names);
      }
      OutputSpec wanted = *found;
      wanted.binary = all_binary;
      std::string where = "the parameters of output '" + std::string(name) + "'";
      SLIPWAY_ASSIGN_OR_RETURN(auto output_parameters, optional_object(item, "parameters", where));
      if (output_parameters) {
        SLIPWAY_ASSIGN_OR_RETURN(auto flag, parameter_flag(*output_parameters, "binary_data", where));
        wanted.binary = flag.value_or(all_binary);
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
                                      : columns_from_named_inputs(inputs, bundle, columns));
  if (decoded_ns != nullptr) *decoded_ns = monotonic_ns();
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
                           const Finish& finish, std::function<void(const model::Predictions&)> observe,
                           std::chrono::microseconds queue_limit) {
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
  auto respond = [this, loaded, seconds_since, finish, cacheable, cache_key, observe = std::move(observe)](
                     const PreparedInfer& request, const model::Predictions& predictions) {
    if (observe) observe(predictions);
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
    double compute_seconds = seconds_since(computing);
    metrics.record_stage(name, version, Stage::kInfer, compute_seconds);
    metrics.record_execution(name, version, prepared->rows, false, compute_seconds);
    metrics.change_pending(name, version, -1);
    respond(*prepared, predictions);
    return;
  }
  auto shared = std::make_shared<PreparedInfer>(std::move(prepared).value());
  BatchJob job;
  job.features = std::move(shared->features);
  job.rows = shared->rows;
  job.priority = shared->priority;
  job.timeout = shared->timeout.count() > 0 ? shared->timeout : loaded->config.batching.default_timeout;
  if (queue_limit.count() > 0 && (job.timeout.count() == 0 || queue_limit < job.timeout)) job.timeout = queue_limit;
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

Result<InferStageTimes> time_v2_infer(std::shared_ptr<const model::Bundle> bundle, std::string_view body) {
  LoadedModel loaded;
  loaded.name = "profile";
  loaded.version = 1;
  loaded.version_text = "1";
  loaded.bundle = std::move(bundle);
  // As the HTTP layer hands it over: padded, so the JSON is parsed in place.
  std::string padded_body;
  padded_body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  padded_body.assign(body);
  RequestHeaders headers;
  headers.body_padding = padded_body.capacity() - padded_body.size();
  auto seconds_between = [](std::int64_t from, std::int64_t to) { return static_cast<double>(to - from) * 1e-9; };

  InferStageTimes times;
  std::int64_t started = monotonic_ns();
  std::int64_t decoded = 0;
  SLIPWAY_ASSIGN_OR_RETURN(PreparedInfer prepared,
                           Service::State::prepare_infer(loaded, padded_body, headers, &decoded));
  std::int64_t preprocessed = monotonic_ns();
  model::Predictions predictions = loaded.bundle->predict_margins(prepared.features, prepared.rows);
  std::int64_t computed = monotonic_ns();
  loaded.bundle->apply_link(predictions);
  std::int64_t linked = monotonic_ns();
  HttpResponse response = Service::State::infer_response(loaded, prepared, predictions);
  std::int64_t encoded = monotonic_ns();
  times.parse = seconds_between(started, decoded);
  times.preprocess = seconds_between(decoded, preprocessed);
  times.compute = seconds_between(preprocessed, computed);
  times.postprocess = seconds_between(computed, linked);
  times.encode = seconds_between(linked, encoded);
  times.rows = prepared.rows;
  times.response_bytes = response.body.size();
  return times;
}

}  // namespace slipway::serve
