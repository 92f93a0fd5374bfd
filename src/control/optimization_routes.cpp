// /api optimizations and profiles: what `slipway optimize` and `slipway profile` do for a
// registered tabular model, run by the server. Both measure under load, so they take the server's
// one training slot (nothing else heavy runs meanwhile to skew the figures), as jobs named
// "optimize:MODEL" and "profile:MODEL@VERSION"; the load runs on loopback servers of their own.
#include "control/api.h"
#include "slipway/optimize.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kOptimizeSchema =
    R"({"type":"object","additionalProperties":false,"required":["data"],"properties":{)"
    R"("baseline":{"type":"string","description":"the version (or alias) to optimize; omitted: the newest"},)"
    R"("data":{"type":"string","description":"labelled golden rows: a CSV file of the workspace's data/ folder"},)"
    R"("train":{"type":"string"},"unlabeled":{"type":"string"},"calibration":{"type":"string"},)"
    R"("slo":{"type":"string","description":"e.g. p95<=5ms@2000rps,cost<=0.02/1k,auc_drop<=0.005"},)"
    R"("candidates":{"type":"array","maxItems":16,"items":{"type":"string"}},)"
    R"("price_per_hour":{"type":"number","minimum":0},"tolerance":{"type":"number","minimum":0},)"
    R"("duration_ms":{"type":"integer","minimum":200,"maximum":60000},)"
    R"("budget_ms":{"type":"integer","minimum":1,"maximum":86400000},)"
    R"("threads":{"type":"integer","minimum":1},"repeat_rate":{"type":"number","minimum":0,"maximum":1},)"
    R"("slice":{"type":"string"},"distill_alpha":{"type":"number"},"distill_temperature":{"type":"number"},)"
    R"("register":{"type":"boolean","description":"each candidate that meets the SLO becomes a version"},)"
    R"("resume":{"type":"boolean","description":"reuse the versions an earlier registering run made"}}})";
constexpr std::string_view kJobStartedSchema =
    R"({"type":"object","properties":{"job":{"type":"string"},"running":{"type":"boolean"}}})";
constexpr std::string_view kOptimizationsSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"running":{"type":"boolean"},)"
    R"("cancelling":{"type":"boolean"},"steps_done":{"type":"integer"},"steps_total":{"type":"integer"},)"
    R"("last_job":{"type":"object","description":"how this server's last )"
    R"(optimization of the model ended: {\"error\"}, or the table as slipway optimize --json prints it"},)"
    R"("optimizations":{"type":"array","items":{"type":"object","properties":{"version":{"type":"integer"},)"
    R"("record":{"type":"object","additionalProperties":{"type":"string"}}}}}}})";
constexpr std::string_view kProfileSchema =
    R"({"type":"object","additionalProperties":false,"required":["data"],"properties":{)"
    R"("data":{"type":"string","description":"request rows: a CSV file of the workspace's data/ folder"},)"
    R"("rows_per_request":{"type":"array","maxItems":8,"items":{"type":"integer","minimum":1,"maximum":100000}},)"
    R"("duration_ms":{"type":"integer","minimum":100,"maximum":10000},"threads":{"type":"integer","minimum":1}}})";
constexpr std::string_view kProfileJobSchema =
    R"({"type":"object","properties":{"job":{"type":"string"},"running":{"type":"boolean"},)"
    R"("state":{"type":"string","enum":["running","finished","failed"]},"reason":{"type":"string"},)"
    R"("profile":{"type":"object","description":"as slipway profile --json prints it"}}})";

std::string optimize_job(const std::string& model) { return "optimize:" + model; }

// A measurement's steps counted as its job's progress.
std::function<void(int, int, const std::string&)> steps_of(BackgroundJobs::Job& job) {
  return [&job](int step, int total, const std::string&) {
    job.done = static_cast<std::size_t>(std::max(step, 0));
    job.total = static_cast<std::size_t>(std::max(total, 0));
  };
}

// A file of the workspace's data/ folder the body names under `key`, which must exist.
Result<std::string> body_data_file(ApiCall& call, JsonBody& body, std::string_view key, std::string_view example) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string relative, body.text(key, "a file of the workspace's data/ folder"));
  return existing_data_file(call, relative, "'" + std::string(key) + "'", example);
}

Result<optimize::OptimizationRequest> optimization_request(ApiCall& call, JsonBody& body, std::string& data_name) {
  optimize::OptimizationRequest request;
  const std::string& model = call.path_parameter("model");
  request.reference = model;
  if (body.has("baseline")) {
    SLIPWAY_ASSIGN_OR_RETURN(std::string baseline, body.text("baseline", "a version number or an alias"));
    request.reference = model + "@" + baseline;
  }
  SLIPWAY_ASSIGN_OR_RETURN(data_name, body.text("data", "a file of the workspace's data/ folder"));
  SLIPWAY_ASSIGN_OR_RETURN(request.data_path, body_data_file(call, body, "data", "golden.csv"));
  for (auto [key, path] : {std::pair{"train", &request.train_path}, std::pair{"unlabeled", &request.unlabeled_path},
                           std::pair{"calibration", &request.calibration_path}}) {
    if (body.has(key)) {
      SLIPWAY_ASSIGN_OR_RETURN(*path, body_data_file(call, body, key, "train.csv"));
    }
  }
  if (body.has("slo")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.slo, body.text("slo", "an SLO such as \"p95<=5ms@2000rps\""));
  }
  if (body.has("slice")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.slice_column, body.text("slice", "a column's name"));
  }
  if (body.has("candidates")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto candidates, body.array("candidates", "a list of techniques such as [\"quantize\"]"));
    if (candidates.size() == 0 || candidates.size() > 16) {
      return invalid_argument("'candidates' lists 1 to 16 techniques");
    }
    for (auto item : candidates) {
      std::string_view technique;
      if (item.get(technique) != simdjson::SUCCESS || technique.empty()) {
        return invalid_argument("'candidates' lists techniques by name, such as \"quantize\"");
      }
      request.techniques.emplace_back(technique);
    }
  }
  auto number = [&](const char* key, double& value, const char* what) -> Status {
    if (!body.has(key)) return {};
    SLIPWAY_ASSIGN_OR_RETURN(value, body.number(key, what));
    return {};
  };
  SLIPWAY_RETURN_IF_ERROR(number("price_per_hour", request.price_per_hour, "a number, 0 or more"));
  SLIPWAY_RETURN_IF_ERROR(number("repeat_rate", request.repeat_rate, "a number from 0 to 1"));
  SLIPWAY_RETURN_IF_ERROR(number("distill_alpha", request.distill_alpha, "a number from 0 to 1"));
  SLIPWAY_RETURN_IF_ERROR(number("distill_temperature", request.distill_temperature, "a number above 0"));
  if (body.has("tolerance")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.tolerance, body.number("tolerance", "a number, 0 or more"));
  }
  if (body.has("duration_ms")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto ms, body.integer("duration_ms", 200, 60'000, "a whole number from 200 to 60000"));
    request.duration = std::chrono::milliseconds(ms);
  }
  if (body.has("budget_ms")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto ms,
                             body.integer("budget_ms", 1, 86'400'000, "a whole number from 1 to 86400000 (a day)"));
    request.budget = std::chrono::milliseconds(ms);
  }
  if (body.has("threads")) {
    // The server's own threads serve requests too: a measurement takes at most every core.
    SLIPWAY_ASSIGN_OR_RETURN(auto threads, body.integer("threads", 1, default_thread_count(),
                                                        "a whole number from 1 to the server's cores"));
    request.threads = static_cast<int>(threads);
  }
  for (auto [key, flag] : {std::pair{"register", &request.register_candidates}, std::pair{"resume", &request.resume}}) {
    if (body.has(key)) {
      SLIPWAY_ASSIGN_OR_RETURN(*flag, body.boolean(key));
    }
  }
  return request;
}

HttpResponse start_optimization(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"data": "golden.csv", "slo": "p95<=5ms@2000rps"})",
                               {"baseline", "data", "train", "unlabeled", "calibration", "slo", "candidates",
                                "price_per_hour", "tolerance", "duration_ms", "budget_ms", "threads", "repeat_rate",
                                "slice", "distill_alpha", "distill_temperature", "register", "resume"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  std::string data_name;
  auto request = optimization_request(call, body, data_name);
  if (!request.ok()) return error_response(request.status());
  if (auto checked = optimize::check_optimization_request(*request); !checked.ok()) return error_response(checked);
  // What can be told now rather than by a job that fails at once: the baseline resolves, and is a
  // tabular model (an LLM's candidate table is `slipway optimize FILE.gguf`).
  auto baseline = registered_model(call, request->reference);
  if (!baseline.ok()) return error_response(baseline.status());
  const std::string model = call.path_parameter("model");
  auto work = [home = call.server->options.home, request = std::move(*request), data_name,
               actor = call.caller.actor](BackgroundJobs::Job& job) mutable -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto registry, registry::Registry::open(home, false));
    if (!actor.empty()) registry->set_actor(actor);
    request.cancel = &job.cancel;
    request.on_progress = steps_of(job);
    SLIPWAY_ASSIGN_OR_RETURN(auto report, optimize::run_optimization(registry.get(), request));
    JsonWriter json;
    optimize::write_optimize_report_json(json, report, data_name);
    job.result = json.take();
    return {};
  };
  if (auto started = call.server->training_jobs.start(optimize_job(model), std::move(work)); !started.ok()) {
    return error_response(started);
  }
  JsonWriter json;
  json.begin_object().key("job").value(optimize_job(model)).key("running").value(true).end_object();
  return serve::json_response(202, json.take());
}

HttpResponse list_optimizations(ApiCall& call) {
  const std::string& model = call.path_parameter("model");
  auto versions = call.registry->models().list_versions(model);
  if (!versions.ok()) return error_response(versions.status());
  auto records = pipeline::optimization_records(*call.registry, model, *versions);
  auto progress = call.server->training_jobs.progress(optimize_job(model));
  JsonWriter json;
  json.begin_object().key("model").value(model).key("running").value(progress.running);
  if (progress.running) {
    json.key("cancelling").value(progress.cancelling);
    json.key("steps_done").value(static_cast<std::uint64_t>(progress.done));
    json.key("steps_total").value(static_cast<std::uint64_t>(progress.total));
  }
  if (!progress.error.empty()) {
    json.key("last_job").begin_object().key("error").value(progress.error).end_object();
  } else if (!progress.result.empty()) {
    json.key("last_job").raw(progress.result);
  }
  json.key("optimizations").begin_array();
  for (std::size_t index = 0; index < versions->size(); ++index) {
    if (records[index].empty()) continue;
    json.begin_object().key("version").value((*versions)[index].version).key("record").begin_object();
    for (const auto& [key, value] : records[index]) json.key(key).value(value);
    json.end_object().end_object();
  }
  json.end_array().end_object();
  return json_answer(json);
}

HttpResponse cancel_optimization(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  const std::string& model = call.path_parameter("model");
  if (!call.server->training_jobs.cancel(optimize_job(model))) {
    return error_response(409,
                          "no optimization of '" + model.substr(0, 64) + "' runs in this server: nothing to cancel");
  }
  return list_optimizations(call);
}

std::string profile_job(ApiCall& call) {
  return "profile:" + call.path_parameter("model") + "@" + call.path_parameter("version");
}

HttpResponse profile_answer(ApiCall& call, int status) {
  const std::string job = profile_job(call);
  auto progress = call.server->training_jobs.progress(job);
  if (!progress.running && progress.error.empty() && progress.result.empty()) {
    return error_response(404, "this server has not profiled " + job.substr(8, 128) +
                                   " since it started: POST to this address to profile it");
  }
  JsonWriter json;
  json.begin_object().key("job").value(job).key("running").value(progress.running);
  json.key("state").value(progress.running ? "running" : (progress.error.empty() ? "finished" : "failed"));
  if (!progress.error.empty()) json.key("reason").value(progress.error);
  if (!progress.running && !progress.result.empty()) json.key("profile").raw(progress.result);
  json.end_object();
  return serve::json_response(status, json.take());
}

HttpResponse start_profile(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"data": "requests.csv", "rows_per_request": [1, 8, 64]})",
                               {"data", "rows_per_request", "duration_ms", "threads"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto data = body_data_file(call, body, "data", "requests.csv");
  if (!data.ok()) return error_response(data.status());
  auto model = registered_model(call, call.path_parameter("model") + "@" + call.path_parameter("version"));
  if (!model.ok()) return error_response(model.status());
  optimize::ProfileOptions options;
  if (body.has("rows_per_request")) {
    auto sizes = body.numbers("rows_per_request", "a list of 1 to 8 request sizes from 1 to 100000 rows", 8);
    if (!sizes.ok()) return error_response(sizes.status());
    options.rows_per_request.clear();
    for (double size : *sizes) {
      if (size != std::floor(size) || size < 1 || size > 100'000) {
        return error_response(400, "'rows_per_request' sizes are whole numbers from 1 to 100000");
      }
      options.rows_per_request.push_back(static_cast<std::size_t>(size));
    }
    if (options.rows_per_request.empty()) return error_response(400, "'rows_per_request' needs at least one size");
  }
  if (body.has("duration_ms")) {
    auto ms = body.integer("duration_ms", 100, 10'000, "a whole number from 100 to 10000");
    if (!ms.ok()) return error_response(ms.status());
    options.server_time = std::chrono::milliseconds(*ms);
  }
  options.in_process_time = std::min(options.server_time, std::chrono::milliseconds(1000));
  if (body.has("threads")) {
    auto threads = body.integer("threads", 1, default_thread_count(), "a whole number from 1 to the server's cores");
    if (!threads.ok()) return error_response(threads.status());
    options.threads = static_cast<int>(*threads);
  }
  options.bundle = model->bundle;
  options.model = model->description;
  auto work = [options = std::move(options), path = std::move(*data)](BackgroundJobs::Job& job) mutable -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto table, pipeline::read_table(path));
    options.rows = &table;
    options.on_progress = steps_of(job);
    SLIPWAY_ASSIGN_OR_RETURN(auto report, optimize::profile_model(options));
    JsonWriter json;
    optimize::write_profile_report_json(json, report);
    job.result = json.take();
    return {};
  };
  if (auto started = call.server->training_jobs.start(profile_job(call), std::move(work)); !started.ok()) {
    return error_response(started);
  }
  return profile_answer(call, 202);
}

HttpResponse get_profile(ApiCall& call) { return profile_answer(call, 200); }

}  // namespace

void add_optimization_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"POST",
                    "/api/models/{model}/optimizations",
                    Role::kDeploy,
                    false,
                    "Build optimized candidates of a version, measure each against the SLO on this machine, and "
                    "recommend one (slipway optimize), on a thread of the server; answers 202 at once: poll the GET",
                    {},
                    kOptimizeSchema,
                    kJobStartedSchema,
                    start_optimization});
  routes.back().accepts = true;
  routes.push_back({"GET",
                    "/api/models/{model}/optimizations",
                    Role::kRead,
                    false,
                    "The versions slipway optimize made, each with its record, and this server's optimization of "
                    "the model: running, or how it ended (its table)",
                    {},
                    "",
                    kOptimizationsSchema,
                    list_optimizations});
  routes.push_back({"POST",
                    "/api/models/{model}/optimizations/cancel",
                    Role::kDeploy,
                    false,
                    "Stop this server's optimization of the model: the candidates not yet measured become rows "
                    "saying so",
                    {},
                    "",
                    kOptimizationsSchema,
                    cancel_optimization});
  routes.push_back({"POST",
                    "/api/models/{model}/versions/{version}/profile",
                    Role::kDeploy,
                    false,
                    "Where the version's serving time goes per request size: each stage in-process, and a loopback "
                    "server's latency and throughput (slipway profile); answers 202 at once: poll the GET",
                    {},
                    kProfileSchema,
                    kProfileJobSchema,
                    start_profile});
  routes.back().accepts = true;
  routes.push_back({"GET",
                    "/api/models/{model}/versions/{version}/profile",
                    Role::kRead,
                    false,
                    "This server's profile of the version: running, or its figures",
                    {},
                    "",
                    kProfileJobSchema,
                    get_profile});
}

}  // namespace slipway::control
