// Triton's extensions beside v2 inference: the model repository (index, load, unload) and the
// model configuration. (Statistics come from ServerMetrics::stats_json.)
#include <simdjson.h>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

}  // namespace

// Triton's model configuration shape, for what Slipway configures.
std::string Service::State::config_json(const LoadedModel& loaded) {
  const ModelServingConfig& serving = loaded.config;
  const BatchingConfig& config = serving.batching;
  bool batching = loaded.batcher != nullptr;
  JsonWriter json;
  json.begin_object()
      .key("name")
      .value(loaded.name)
      .key("platform")
      .value("slipway_" + std::string(loaded.bundle->model().family()));
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
  // Triton's input and output lists: per-row dims (the batch dimension is implied).
  const model::Bundle& bundle = *loaded.bundle;
  auto tensor = [&](std::string_view name, std::string_view datatype, std::size_t columns) {
    json.begin_object().key("name").value(name);
    json.key("data_type").value(datatype == "BYTES" ? "TYPE_STRING" : "TYPE_" + std::string(datatype));
    json.key("dims").begin_array().value(static_cast<std::uint64_t>(columns)).end_array().end_object();
  };
  json.key("input").begin_array();
  for (const auto& feature : bundle.preprocessor().features()) {
    tensor(feature.name, feature.type == data::ColumnType::kNumeric ? "FP32" : "BYTES", 1);
  }
  json.end_array().key("output").begin_array();
  for (const auto& output : outputs_of(bundle)) {
    bool per_class = output.datatype == "FP32" && bundle.task() == model::Task::kMulticlassClassification;
    tensor(output.name, output.datatype, per_class ? bundle.model().output_count() : 1);
  }
  json.end_array();
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
  if (method != "POST") return method_not_allowed("POST");
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
      json.key("state").value(state.state).key("reason").value(without_server_paths(state.reason)).end_object();
    }
    json.end_array();
    return json_response(200, json.take());
  }
  if (segments.size() == 5 && segments[2] == "models" && (segments[4] == "load" || segments[4] == "unload")) {
    std::string name(segments[3]);
    if (has_body && segments[4] == "load") {
      object parameters;
      if (request["parameters"].get(parameters) == simdjson::SUCCESS && parameters.begin() != parameters.end()) {
        return error_response(400,
                              "load takes no parameters in Slipway: set a model's configuration with "
                              "`slipway serving-config` or `serve --config`, then load");
      }
    }
    Status done = segments[4] == "load" ? manager.load(name) : manager.unload(name);
    if (!done.ok()) return error_response(done);
    return json_response(200, "{}");
  }
  return error_response(404, "no such repository route");
}

}  // namespace slipway::serve
