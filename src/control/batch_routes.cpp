// /api/batch-jobs: what `slipway batch` and `batch status` do, run by the server. A client names
// the input (a file in the workspace's data/ folder) and the job (its folder, batch/NAME); the
// server scores it on a thread of its own and the client polls the job or cancels it.
#include <algorithm>
#include <filesystem>

#include "control/api.h"

namespace slipway::control {

namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kStartSchema =
    R"({"type":"object","required":["name","model","data"],"additionalProperties":false,"properties":{)"
    R"("name":{"type":"string","pattern":"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$","description":"the job: its )"
    R"(folder is batch/NAME in the workspace; the same name and input again resume it"},)"
    R"("model":{"type":"string","description":"NAME, NAME@VERSION or NAME@ALIAS"},)"
    R"("data":{"type":"string","description":"a CSV or JSON Lines file in the workspace's data/ folder"},)"
    R"("format":{"type":"string","enum":["csv","jsonl"]},"shards":{"type":"integer","minimum":0,"maximum":1024},)"
    R"("max_error_rate":{"type":"number","minimum":0,"maximum":1},"id_column":{"type":"string"}}})";
constexpr std::string_view kJobSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"state":{"type":"string","enum":)"
    R"(["starting","running","finished","failed","cancelled","interrupted"]},"running":{"type":"boolean"},)"
    R"("cancelling":{"type":"boolean"},)"
    R"("rows_done":{"type":"integer"},"rows_total":{"type":"integer"},"reason":{"type":"string"},)"
    R"("manifest":{"type":"object"}}})";
constexpr std::string_view kJobListSchema =
    R"({"type":"object","properties":{"running":{"type":"array","items":{"type":"string"}},"jobs":{"type":)"
    R"("array","items":{"type":"object","properties":{"key":{"type":"string"},"model":{"type":"string"},)"
    R"("input":{"type":"string"},"out":{"type":"string"},"state":{"type":"string"},"rows":{"type":"integer"},)"
    R"("scored":{"type":"integer"},"bad":{"type":"integer"},"started_ms":{"type":"integer"},)"
    R"("updated_ms":{"type":"integer"},"actor":{"type":"string"}}}},"next_page_token":{"type":"string"}}})";

// A job's name is a folder's: the registry's rule for names (no '/', no "..", no control
// characters), said in a batch job's words.
Status check_job_name(const std::string& name) {
  if (registry::validate_model_name(name).ok()) return {};
  return invalid_argument(
      "a batch job's name is 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or "
      "digit (it names the job's folder), not '" +
      name.substr(0, 64) + "'");
}

// {"name", "state", "running", "rows_done", "rows_total", "reason", "manifest"}: the job's folder
// and what this server knows of it.
std::string job_folder(const std::string& home, const std::string& name) { return home + "/batch/" + name; }

HttpResponse job_answer(ApiCall& call, const std::string& name, int status) {
  auto progress = call.server->batch_jobs.progress(name);
  std::string folder = job_folder(call.server->options.home, name);
  // While this server runs the job its lock is held: the manifest is read as it is (asking
  // whether a process holds the lock would take it for a moment, and could refuse the job).
  auto manifest = progress.running ? batch::read_job(folder) : pipeline::batch_job_status(folder);
  if (!manifest.ok() && !progress.running && progress.error.empty()) return error_response(manifest.status());
  std::string state, reason;
  if (progress.running) {
    // Until the job writes its manifest, the folder holds the last run's (cancelled, failed ...).
    state = manifest.ok() && manifest->state == "running" ? "running" : "starting";
  } else if (!progress.error.empty()) {
    // This run ended before its manifest said anything (the error is cleared when a run starts).
    state = "failed";
    reason = progress.error;
  } else {
    state = manifest->state;
    reason = manifest->reason;
  }
  JsonWriter json;
  json.begin_object().key("name").value(name).key("state").value(state).key("running").value(progress.running);
  if (progress.running) json.key("cancelling").value(progress.cancelling);
  json.key("rows_done").value(static_cast<std::uint64_t>(progress.done));
  json.key("rows_total").value(static_cast<std::uint64_t>(progress.total));
  if (!reason.empty()) json.key("reason").value(reason);
  if (manifest.ok()) {
    std::string manifest_json = manifest->to_json();
    while (!manifest_json.empty() && manifest_json.back() == '\n') manifest_json.pop_back();
    json.key("manifest").raw(manifest_json);
  }
  json.end_object();
  return serve::json_response(status, json.take());
}

HttpResponse start_job(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"name": "scores-day1", "model": "churn@prod", "data": "day1.csv"})",
                               {"name", "model", "data", "format", "shards", "max_error_rate", "id_column"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto name = body.text("name", "the job's name");
  if (!name.ok()) return error_response(name.status());
  if (auto valid = check_job_name(*name); !valid.ok()) return error_response(valid);
  auto reference = body.text("model", "NAME, NAME@VERSION or NAME@ALIAS");
  if (!reference.ok()) return error_response(reference.status());
  if (auto parsed = registry::parse_model_reference(*reference); !parsed.ok()) return error_response(parsed.status());
  if (pipeline::names_bundle_file(*reference)) {
    return error_response(400, "'model' names a registered model (NAME, NAME@VERSION or NAME@ALIAS), not a file");
  }
  auto data = body.text("data", "a file in the workspace's data/ folder");
  if (!data.ok()) return error_response(data.status());
  batch::JobSpec spec;
  auto input = client_named_file(call.registry->home() + "/data", *data, "'data'", "day1.csv");
  if (!input.ok()) return error_response(input.status());
  spec.data = std::move(*input);
  spec.out = job_folder(call.server->options.home, *name);
  if (body.has("format")) {
    auto format = body.text("format", "csv or jsonl");
    if (!format.ok()) return error_response(format.status());
    spec.format = std::move(*format);
  }
  if (body.has("shards")) {
    auto shards = body.integer("shards", 0, 1024, "a whole number from 0 (one per 16 MiB) to 1024");
    if (!shards.ok()) return error_response(shards.status());
    spec.shards = static_cast<std::size_t>(*shards);
  }
  if (body.has("max_error_rate")) {
    auto rate = body.number("max_error_rate", "a share from 0 to 1");
    if (!rate.ok()) return error_response(rate.status());
    spec.max_error_rate = *rate;
  }
  if (body.has("id_column")) {
    auto id = body.text("id_column", "an input column copied into every output row");
    if (!id.ok()) return error_response(id.status());
    spec.id_column = std::move(*id);
  }
  // The server's threads serve requests too: one job takes half the cores (two, all of them).
  spec.workers = std::max(1, default_thread_count() / 2);
  // Checked here, so a bad request is a 4xx now rather than a job that fails later.
  if (spec.format != "csv" && spec.format != "jsonl") return error_response(400, "'format' must be csv or jsonl");
  if (!(spec.max_error_rate >= 0 && spec.max_error_rate <= 1)) {
    return error_response(400, "'max_error_rate' must be a share from 0 to 1");
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(spec.data, error)) {
    return error_response(404, "no file '" + *data + "' in the workspace's data/ folder");
  }
  auto model = pipeline::resolve_reference(call.registry, *reference);
  if (!model.ok()) return error_response(model.status());
  auto work = [home = call.server->options.home, model = std::move(*model), spec = std::move(spec),
               caller = call.caller](BackgroundJobs::Job& job) mutable -> Status {
    spec.cancel = &job.cancel;
    auto registry = registry::Registry::open(home, false);
    auto outcome = pipeline::run_batch_job(
        registry.ok() ? registry->get() : nullptr, model, spec,
        [&job](std::size_t done, std::size_t total) {
          job.done = done;
          job.total = total;
        },
        caller);
    return outcome.status();
  };
  if (auto started = call.server->batch_jobs.start(*name, std::move(work)); !started.ok()) {
    return error_response(started);
  }
  return job_answer(call, *name, 202);
}

HttpResponse get_job(ApiCall& call) {
  const std::string& name = call.path_parameter("name");
  if (auto valid = check_job_name(name); !valid.ok()) return error_response(valid);
  return job_answer(call, name, 200);
}

HttpResponse cancel_job(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  const std::string& name = call.path_parameter("name");
  if (auto valid = check_job_name(name); !valid.ok()) return error_response(valid);
  if (!call.server->batch_jobs.cancel(name)) {
    return error_response(409, "batch job '" + name + "' is not running in this server: nothing to cancel");
  }
  return job_answer(call, name, 200);
}

const std::vector<ApiParameter> list_parameters = {
    {"limit", R"({"type":"integer","minimum":1,"maximum":1000})", "at most this many jobs (default 100)"},
    {"page_token", R"({"type":"string"})", "next_page_token of the page before"},
};

// In the order jobs were first recorded, so that a page token (the count already seen) still
// points at the same job after others are recorded: a job keeps its place, new ones come after.
HttpResponse list_jobs(ApiCall& call) {
  auto query = parse_query(call.http.query, list_parameters);
  if (!query.ok()) return error_response(query.status());
  std::int64_t limit = 100, offset = 0;
  if (auto given = query->find("limit"); given != query->end()) {
    auto parsed = parse_integer(given->second, "limit", 1, 1000);
    if (!parsed.ok()) return error_response(parsed.status());
    limit = *parsed;
  }
  if (auto given = query->find("page_token"); given != query->end()) {
    std::string_view token = given->second;
    auto parsed = token.starts_with("b") ? parse_integer(token.substr(1), "page_token", 0, INT64_MAX)
                                         : Result<std::int64_t>(invalid_argument(""));
    if (!parsed.ok()) return error_response(400, "'page_token' is not one this server gave");
    offset = *parsed;
  }
  auto jobs = call.registry->runs().batch_jobs();
  if (!jobs.ok()) return error_response(jobs.status());
  JsonWriter json;
  json.begin_object().key("running").begin_array();
  for (const auto& name : call.server->batch_jobs.running()) json.value(name);
  json.end_array().key("jobs").begin_array();
  auto count = static_cast<std::int64_t>(jobs->size());
  offset = std::min(offset, count);
  std::int64_t end = limit < count - offset ? offset + limit : count;
  for (std::int64_t index = offset; index < end; ++index) {
    const auto& job = (*jobs)[static_cast<std::size_t>(index)];
    json.begin_object().key("key").value(job.key).key("model").value(job.model).key("input").value(job.input);
    json.key("out").value(job.out).key("state").value(job.state).key("rows").value(job.rows);
    json.key("scored").value(job.scored).key("bad").value(job.bad).key("started_ms").value(job.started_ms);
    json.key("updated_ms").value(job.updated_ms).key("actor").value(job.actor).end_object();
  }
  json.end_array();
  if (end < count) json.key("next_page_token").value("b" + std::to_string(end));
  json.end_object();
  return json_answer(json);
}

}  // namespace

void add_batch_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET", "/api/batch-jobs", Role::kRead, false,
                    "Batch jobs recorded in the workspace, oldest first, and those this server runs now",
                    list_parameters, "", kJobListSchema, list_jobs});
  routes.push_back({"POST",
                    "/api/batch-jobs",
                    Role::kDeploy,
                    false,
                    "Start scoring a file in the workspace's data/ folder into batch/NAME (slipway batch); "
                    "answers 202 at once: poll the job",
                    {},
                    kStartSchema,
                    kJobSchema,
                    start_job});
  routes.back().accepts = true;
  routes.push_back({"GET",
                    "/api/batch-jobs/{name}",
                    Role::kRead,
                    false,
                    "A batch job's state, progress and manifest (slipway batch status)",
                    {},
                    "",
                    kJobSchema,
                    get_job});
  routes.push_back({"POST",
                    "/api/batch-jobs/{name}/cancel",
                    Role::kDeploy,
                    false,
                    "Stop a running job after the shards in flight; starting it again scores the rest",
                    {},
                    "",
                    kJobSchema,
                    cancel_job});
}

}  // namespace slipway::control
