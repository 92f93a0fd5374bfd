// /api/runs: runs listed a page at a time, one run with its metric histories, two compared, and
// tracking for training code that runs elsewhere (start, log, files, end), as MLflow's tracking
// server takes them; through the pipeline's tracking operations.
#include <cmath>
#include <set>

#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kRunSchema =
    R"({"type":"object","required":["run_id","experiment","status"],"properties":{"run_id":{"type":"string"},)"
    R"("experiment":{"type":"string"},"status":{"type":"string","enum":["RUNNING","FINISHED","FAILED","INTERRUPTED"]},)"
    R"("start_ms":{"type":"integer"},"end_ms":{"type":"integer"},"params":{"type":"object"},)"
    R"("metrics":{"type":"object"},"tags":{"type":"object"},"artifacts":{"type":"array","items":{"type":"object"}},)"
    R"("created":{"type":"boolean"}}})";
constexpr std::string_view kRunPageSchema =
    R"({"type":"object","properties":{"runs":{"type":"array","items":{"type":"object"}},)"
    R"("next_page_token":{"type":"string"}}})";
constexpr std::string_view kHistorySchema =
    R"({"type":"object","properties":{"run_id":{"type":"string"},"metrics":{"type":"object",)"
    R"("additionalProperties":{"type":"array","items":{"type":"object","properties":{"step":{"type":"integer"},)"
    R"("value":{"type":"number"},"timestamp_ms":{"type":"integer"}}}}}}})";
constexpr std::string_view kCompareSchema =
    R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},)"
    R"("params":{"type":"array","items":{"type":"object"}},"metrics":{"type":"array","items":{"type":"object"}}}})";
constexpr std::string_view kStartSchema =
    R"({"type":"object","additionalProperties":false,"properties":{"experiment":{"type":"string"},)"
    R"("run_id":{"type":"string","pattern":"^[0-9a-f]{32}$","description":"chosen by the client so that a )"
    R"(retried start finds the run it made"},"params":{"type":"object","additionalProperties":{"type":"string"}},)"
    R"("tags":{"type":"object","additionalProperties":{"type":"string"}}}})";
constexpr std::string_view kLogSchema =
    R"({"type":"object","additionalProperties":false,"properties":{)"
    R"("params":{"type":"object","additionalProperties":{"type":"string"}},)"
    R"("tags":{"type":"object","additionalProperties":{"type":"string"}},)"
    R"("metrics":{"type":"array","maxItems":1000,"items":{"type":"object","required":["key","value"],)"
    R"("additionalProperties":false,"properties":{"key":{"type":"string"},"value":{"type":"number"},)"
    R"("step":{"type":"integer","minimum":0},"timestamp_ms":{"type":"integer","minimum":0}}}}}})";
constexpr std::string_view kLoggedSchema =
    R"({"type":"object","properties":{"run_id":{"type":"string"},"params":{"type":"integer"},)"
    R"("metrics":{"type":"integer"},"tags":{"type":"integer"}}})";
constexpr std::string_view kEndSchema =
    R"({"type":"object","additionalProperties":false,"properties":{"status":{"type":"string",)"
    R"("enum":["FINISHED","FAILED"]}}})";
constexpr std::string_view kFileSchema =
    R"({"type":"object","properties":{"path":{"type":"string"},"sha256":{"type":"string"},)"
    R"("size_bytes":{"type":"integer"},"created_ms":{"type":"integer"}}})";

const std::vector<ApiParameter> run_query = {
    {"experiment", R"({"type":"string"})", "Only this experiment's runs"},
    {"status", R"({"type":"string","enum":["RUNNING","FINISHED","FAILED","INTERRUPTED"]})", "Only runs in this state"},
    {"page_size", R"({"type":"integer","minimum":1,"maximum":1000})", "Runs in a page (default 100)"},
    {"page_token", R"({"type":"string"})", "next_page_token of the page before"},
};
const std::vector<ApiParameter> history_query = {{"key", R"({"type":"string"})", "Only this metric"}};
const std::vector<ApiParameter> compare_query = {
    {"a", R"({"type":"string"})", "A run id"},
    {"b", R"({"type":"string"})", "Another run id"},
};
const std::vector<ApiParameter> file_query = {
    {"path", R"({"type":"string","maxLength":256})", "The file's name in the run, such as plots/loss.png"},
    {"sha256", R"({"type":"string","pattern":"^[0-9a-f]{64}$"})",
     "The sha256 of the body: bytes that hash otherwise (truncated, changed) are refused"},
};

HttpResponse run_answer(const registry::RunRecord& run, std::optional<bool> created = std::nullopt) {
  JsonWriter json;
  json.begin_object();
  registry::write_run_fields(json, run);
  if (created) json.key("created").value(*created);
  json.end_object();
  return json_answer(json);
}

HttpResponse list_runs(ApiCall& call) {
  auto query = parse_query(call.http.query, run_query);
  if (!query.ok()) return error_response(query.status());
  registry::RunQuery runs;
  for (const auto& [key, value] : *query) {
    if (key == "experiment") runs.experiment = value;
    if (key == "status") runs.status = value;
    if (key == "page_token") runs.page_token = value;
    if (key == "page_size") {
      auto size = parse_integer(value, "page_size", 1, 1000);
      if (!size.ok()) return error_response(size.status());
      runs.page_size = static_cast<std::size_t>(*size);
    }
  }
  auto page = call.registry->runs().query(runs);
  if (!page.ok()) return error_response(page.status());
  JsonWriter json;
  json.begin_object().key("runs").begin_array();
  for (const auto& run : page->runs) {
    json.begin_object();
    registry::write_run_fields(json, run);
    json.end_object();
  }
  json.end_array();
  if (!page->next_page_token.empty()) json.key("next_page_token").value(page->next_page_token);
  json.end_object();
  return json_answer(json);
}

HttpResponse get_run(ApiCall& call) {
  auto run = call.registry->runs().get(call.path_parameter("run_id"));
  return run.ok() ? run_answer(*run) : error_response(run.status());
}

// Every value of each metric, by step: what a training curve is drawn from.
HttpResponse metric_history(ApiCall& call) {
  auto query = parse_query(call.http.query, history_query);
  if (!query.ok()) return error_response(query.status());
  const std::string& run_id = call.path_parameter("run_id");
  auto history = call.registry->runs().metric_history(run_id);
  if (!history.ok()) return error_response(history.status());
  if (history->empty()) {
    if (auto run = call.registry->runs().get(run_id); !run.ok()) return error_response(run.status());
  }
  auto only = query->find("key");
  JsonWriter json;
  json.begin_object().key("run_id").value(run_id).key("metrics").begin_object();
  std::string open_key;
  for (const auto& record : *history) {
    if (only != query->end() && record.key != only->second) continue;
    if (record.key != open_key) {
      if (!open_key.empty()) json.end_array();
      json.key(record.key).begin_array();
      open_key = record.key;
    }
    json.begin_object().key("step").value(record.step).key("value").value(record.value);
    json.key("timestamp_ms").value(record.timestamp_ms).end_object();
  }
  if (!open_key.empty()) json.end_array();
  json.end_object().end_object();
  return json_answer(json);
}

// Params that differ, and every metric either has with both values.
HttpResponse compare_runs(ApiCall& call) {
  auto query = parse_query(call.http.query, compare_query);
  if (!query.ok()) return error_response(query.status());
  auto a_id = query->find("a");
  auto b_id = query->find("b");
  if (a_id == query->end() || b_id == query->end()) return error_response(400, "give two runs: ?a=RUN_ID&b=RUN_ID");
  auto a = call.registry->runs().get(a_id->second);
  if (!a.ok()) return error_response(a.status());
  auto b = call.registry->runs().get(b_id->second);
  if (!b.ok()) return error_response(b.status());
  JsonWriter json;
  json.begin_object().key("a").value(a->run_id).key("b").value(b->run_id).key("params").begin_array();
  std::set<std::string> keys;
  for (const auto& entry : a->params) keys.insert(entry.first);
  for (const auto& entry : b->params) keys.insert(entry.first);
  for (const auto& key : keys) {
    auto in_a = a->params.find(key);
    auto in_b = b->params.find(key);
    std::string value_a = in_a == a->params.end() ? "" : in_a->second;
    std::string value_b = in_b == b->params.end() ? "" : in_b->second;
    if (value_a == value_b) continue;
    json.begin_object().key("key").value(key).key("a").value(value_a).key("b").value(value_b).end_object();
  }
  json.end_array().key("metrics").begin_array();
  std::map<std::string, std::pair<double, double>> metrics;
  for (const auto& metric : a->metrics) metrics[metric.key] = {metric.value, std::nan("")};
  for (const auto& metric : b->metrics) {
    auto [entry, fresh] = metrics.try_emplace(metric.key, std::nan(""), metric.value);
    if (!fresh) entry->second.second = metric.value;
  }
  for (const auto& [key, values] : metrics) {
    json.begin_object().key("key").value(key).key("a").value(values.first).key("b").value(values.second);
    json.key("difference").value(values.second - values.first).end_object();
  }
  json.end_array().end_object();
  return json_answer(json);
}

// "params" and "tags": objects of text values, each bounded as the tracking limits say.
Status read_params_and_tags(JsonBody& body, std::map<std::string, std::string>& params,
                            std::map<std::string, std::string>& tags) {
  for (auto [key, target, limit] : {std::tuple{"params", &params, pipeline::kTrackingLimits.params_per_call},
                                    std::tuple{"tags", &tags, pipeline::kTrackingLimits.tags_per_call}}) {
    if (!body.has(key)) continue;
    SLIPWAY_ASSIGN_OR_RETURN(*target, body.text_map(key, limit));
  }
  return {};
}

HttpResponse start_run(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"experiment": "resnet", "params": {"lr": "0.01"}})",
                               {"experiment", "run_id", "params", "tags"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  pipeline::TrackedRunStart start;
  if (body.has("experiment")) {
    auto experiment = body.text("experiment", "an experiment name");
    if (!experiment.ok()) return error_response(experiment.status());
    start.experiment = std::move(*experiment);
  }
  if (body.has("run_id")) {
    auto run_id = body.text("run_id", "32 lowercase hex digits");
    if (!run_id.ok()) return error_response(run_id.status());
    start.run_id = std::move(*run_id);
  }
  if (auto read = read_params_and_tags(body, start.params, start.tags); !read.ok()) return error_response(read);
  auto started = pipeline::start_tracked_run(*call.registry, start, call.caller);
  if (!started.ok()) return error_response(started.status());
  HttpResponse answer = run_answer(started->run, started->created);
  if (started->created) answer.status = 201;
  return answer;
}

Result<registry::MetricRecord> metric_of(simdjson::dom::element item) {
  simdjson::dom::object object;
  if (item.get(object) != simdjson::SUCCESS) {
    return invalid_argument("each metric is an object such as {\"key\": \"loss\", \"value\": 0.3, \"step\": 7}");
  }
  SLIPWAY_RETURN_IF_ERROR(check_fields(object, "a metric", {"key", "value", "step", "timestamp_ms"}));
  registry::MetricRecord metric;
  SLIPWAY_ASSIGN_OR_RETURN(metric.key, JsonBody::text_of(object, "key", "the metric's name"));
  if (object["value"].get(metric.value) != simdjson::SUCCESS) {
    return invalid_argument("metric '" + metric.key.substr(0, 64) + "' needs a number 'value'");
  }
  for (auto [name, target] : {std::pair{"step", &metric.step}, std::pair{"timestamp_ms", &metric.timestamp_ms}}) {
    simdjson::dom::element field;
    if (object[name].get(field) != simdjson::SUCCESS) continue;
    double number = 0;
    if (field.get(number) != simdjson::SUCCESS || number != std::floor(number) || number < 0 || number > 9.0e15) {
      return invalid_argument("metric '" + metric.key.substr(0, 64) + "''s '" + name +
                              "' must be a whole number from 0 to 2^53");
    }
    *target = static_cast<std::int64_t>(number);
  }
  return metric;
}

// POST /api/runs/{run_id}/log: params, metrics (with steps) and tags in one call.
HttpResponse log_batch(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"metrics": [{"key": "loss", "value": 0.3, "step": 7}]})",
                               {"params", "metrics", "tags"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  pipeline::TrackingBatch batch;
  if (auto read = read_params_and_tags(body, batch.params, batch.tags); !read.ok()) return error_response(read);
  if (body.has("metrics")) {
    auto metrics = body.array("metrics", "an array of {\"key\", \"value\", \"step\"} objects");
    if (!metrics.ok()) return error_response(metrics.status());
    if (metrics->size() > pipeline::kTrackingLimits.metrics_per_call) {
      return error_response(400, "at most " + std::to_string(pipeline::kTrackingLimits.metrics_per_call) +
                                     " metric values a call; send the rest in another");
    }
    for (auto item : *metrics) {
      auto metric = metric_of(item);
      if (!metric.ok()) return error_response(metric.status());
      batch.metrics.push_back(std::move(*metric));
    }
  }
  const std::string& run_id = call.path_parameter("run_id");
  if (auto logged = pipeline::log_to_run(*call.registry, run_id, batch, call.caller); !logged.ok()) {
    return error_response(logged);
  }
  JsonWriter json;
  json.begin_object().key("run_id").value(run_id).key("params").value(static_cast<std::uint64_t>(batch.params.size()));
  json.key("metrics").value(static_cast<std::uint64_t>(batch.metrics.size()));
  json.key("tags").value(static_cast<std::uint64_t>(batch.tags.size())).end_object();
  return json_answer(json);
}

// POST /api/runs/{run_id}/artifacts?path=P&sha256=HEX, the file as the body.
HttpResponse upload_file(ApiCall& call) {
  auto query = parse_query(call.http.query, file_query);
  if (!query.ok()) return error_response(query.status());
  auto path = query->find("path");
  auto sha256 = query->find("sha256");
  if (path == query->end() || sha256 == query->end()) {
    return error_response(400,
                          "give ?path=NAME&sha256=HEX: the file's name in the run, and the body's sha256 so "
                          "that a truncated or changed upload is refused");
  }
  auto stored = pipeline::store_run_file(*call.registry, call.path_parameter("run_id"), path->second, call.http.body,
                                         sha256->second, call.caller);
  if (!stored.ok()) return error_response(stored.status());
  JsonWriter json;
  json.begin_object().key("path").value(stored->path).key("sha256").value(stored->sha256);
  json.key("size_bytes").value(stored->size_bytes).key("created_ms").value(stored->created_ms).end_object();
  return json_answer(json);
}

HttpResponse end_run(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"status": "FINISHED"})", {"status"}); !parsed.ok()) {
    return error_response(parsed);
  }
  bool succeeded = true;
  if (body.has("status")) {
    auto status = body.text("status", "FINISHED or FAILED");
    if (!status.ok()) return error_response(status.status());
    if (*status != "FINISHED" && *status != "FAILED") {
      return error_response(400, "'status' must be FINISHED or FAILED, not '" + status->substr(0, 32) + "'");
    }
    succeeded = *status == "FINISHED";
  }
  auto ended = pipeline::end_tracked_run(*call.registry, call.path_parameter("run_id"), succeeded, call.caller);
  return ended.ok() ? run_answer(*ended) : error_response(ended.status());
}

}  // namespace

void add_run_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET", "/api/runs", Role::kRead, false, "Runs, newest first, a page at a time (slipway runs)",
                    run_query, "", kRunPageSchema, list_runs});
  routes.push_back({"POST",
                    "/api/runs",
                    Role::kRead,
                    true,
                    "Start a run of training code that runs elsewhere; a retried start with the same run_id answers "
                    "the run it made",
                    {},
                    kStartSchema,
                    kRunSchema,
                    start_run});
  routes.back().creates = true;
  routes.push_back({"GET", "/api/runs/compare", Role::kRead, false,
                    "Two runs side by side: the params that differ, every metric of either", compare_query, "",
                    kCompareSchema, compare_runs});
  routes.push_back(
      {"GET", "/api/runs/{run_id}", Role::kRead, false, "One run (slipway show)", {}, "", kRunSchema, get_run});
  routes.push_back({"GET", "/api/runs/{run_id}/metrics", Role::kRead, false,
                    "Every value of the run's metrics, by step", history_query, "", kHistorySchema, metric_history});
  routes.push_back({"POST",
                    "/api/runs/{run_id}/log",
                    Role::kRead,
                    true,
                    "Log params (each keeps its first value), metrics with steps, and tags",
                    {},
                    kLogSchema,
                    kLoggedSchema,
                    log_batch});
  routes.push_back({"POST", "/api/runs/{run_id}/artifacts", Role::kRead, true,
                    "Store a file of the run (the body), checked against its sha256", file_query, "binary", kFileSchema,
                    upload_file});
  routes.push_back({"POST",
                    "/api/runs/{run_id}/end",
                    Role::kRead,
                    true,
                    "End the run as FINISHED or FAILED",
                    {},
                    kEndSchema,
                    kRunSchema,
                    end_run});
}

}  // namespace slipway::control
