// /api/training-jobs: what `slipway train` does, run by the server. A client sends the spec (the
// YAML spec's keys, as JSON: YAML reads JSON, so the CLI's reader checks it), names the data as
// files of the workspace's data/ folder, and gets the run's id at once; the server trains on a
// thread of its own, the run's metrics grow as it fits (GET /api/runs/{id}/metrics), and the
// client polls the job or cancels it.
#include <filesystem>

#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kStartSchema =
    R"({"type":"object","additionalProperties":false,"properties":{)"
    R"("spec":{"type":"object","description":"the training spec: the keys of a YAML spec (data, test, target, )"
    R"(model, split, test_fraction, slice, seed, params, ignore, register, experiment, threads, weight, init_model, )"
    R"(checkpoint_every, threshold, threshold_fraction); data and test are files of the workspace's data/ folder, init_model a registered )"
    R"(model"},)"
    R"("run_id":{"type":"string","pattern":"^[0-9a-f]{32}$","description":"the new run's id, chosen by the client )"
    R"(so that a retried start answers the run it made; omitted: the server picks one"},)"
    R"("resume":{"type":"string","pattern":"^[0-9a-f]{32}$","description":"instead of a spec: continue this )"
    R"(cancelled or interrupted run from its latest checkpoint"}}})";
constexpr std::string_view kJobSchema =
    R"({"type":"object","properties":{"run_id":{"type":"string"},"state":{"type":"string","enum":)"
    R"(["preparing","running","finished","failed","cancelled","interrupted"]},"running":{"type":"boolean"},)"
    R"("cancelling":{"type":"boolean"},"rounds_done":{"type":"integer"},"rounds_total":{"type":"integer"},)"
    R"("reason":{"type":"string"},"created":{"type":"boolean"},"run":{"type":"object"}}})";
constexpr std::string_view kParametersSchema =
    R"({"type":"object","properties":{"parameters":{"type":"array","items":{"type":"object","properties":)"
    R"({"name":{"type":"string"},"models":{"type":"array","items":{"type":"string"}},)"
    R"("type":{"type":"string","enum":["number","integer","choice"]},"default":{"type":"string"},)"
    R"("allowed":{"type":"string"},"description":{"type":"string"}}}}}})";
constexpr std::string_view kRunningSchema =
    R"({"type":"object","properties":{"running":{"type":"array","items":{"type":"string"}}}})";

// {"run_id","state","running","cancelling"?,"rounds_done"?,"rounds_total"?,"reason"?,"run"?}: what
// this server knows of the job and the run it records. NotFound when neither exists.
HttpResponse job_answer(ApiCall& call, const std::string& run_id, int status, std::optional<bool> created = {}) {
  auto progress = call.server->training_jobs.progress(run_id);
  auto run = call.registry->runs().get(run_id);
  // While the job prepares, the run may not be readable yet: it is reported as preparing.
  if (!run.ok() && run.status().code() != StatusCode::kNotFound && !progress.running) {
    return error_response(run.status());
  }
  if (!run.ok() && !progress.running && progress.error.empty()) {
    return error_response(404, "no training job or run '" + run_id + "'");
  }
  std::string state, reason = progress.error;
  if (progress.running) {
    state = run.ok() ? "running" : "preparing";  // reading and splitting the data until the run exists
  } else if (!run.ok() || run->status == "FAILED") {
    state = "failed";
  } else if (run->status == "INTERRUPTED") {
    // What this server remembers (a restart forgets it): a cancel, or a process that died.
    state = progress.error.find("cancelled") != std::string::npos ? "cancelled" : "interrupted";
  } else if (run->status == "FINISHED") {
    state = progress.error.empty() ? "finished" : "failed";  // trained, but not registered
  } else {
    state = "running";  // by another process (`slipway train`), or one that died (`slipway verify` says)
  }
  JsonWriter json;
  json.begin_object().key("run_id").value(run_id).key("state").value(state).key("running").value(progress.running);
  if (progress.running) {
    // Rounds (gbdt) or epochs (mlp) while it fits; the run's metrics say how many it kept.
    json.key("cancelling").value(progress.cancelling);
    json.key("rounds_done").value(static_cast<std::uint64_t>(progress.done));
    json.key("rounds_total").value(static_cast<std::uint64_t>(progress.total));
  }
  if (!reason.empty()) json.key("reason").value(reason);
  if (created) json.key("created").value(*created);
  if (run.ok()) {
    json.key("run").begin_object();
    registry::write_run_fields(json, *run);
    json.end_object();
  }
  json.end_object();
  return serve::json_response(status, json.take());
}

// The spec a client sent, read by the YAML spec's reader, its files in the workspace's data/
// folder and its warm start a registered model: a token that may train cannot make the server
// read any other file.
Result<pipeline::TrainSpec> client_spec(ApiCall& call, simdjson::dom::object object) {
  pipeline::TrainSpec spec;
  SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec_text(simdjson::minify(object), "the body's spec", spec));
  std::string folder = call.registry->home() + "/data";
  SLIPWAY_RETURN_IF_ERROR(confine_spec_files(folder, spec, true));
  SLIPWAY_RETURN_IF_ERROR(pipeline::check_train_spec(spec));
  for (const auto* path : {&spec.data, &spec.test_data}) {
    std::error_code error;
    if (!path->empty() && !std::filesystem::is_regular_file(*path, error)) {
      return not_found("no file '" + path->substr(folder.size() + 1) + "' in the workspace's data/ folder");
    }
  }
  return spec;
}

HttpResponse start_job(ApiCall& call) {
  JsonBody body;
  if (auto parsed =
          body.parse(call.http.body, R"({"spec": {"data": "train.csv", "target": "churned", "register": "churn"}})",
                     {"spec", "run_id", "resume"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  if (body.has("spec") == body.has("resume")) {
    return error_response(400, "send a 'spec' to train, or the run to 'resume'");
  }
  pipeline::TrainSpec spec;
  if (body.has("resume")) {
    auto resume = body.text("resume", "the id of the run to continue (32 lowercase hex digits)");
    if (!resume.ok()) return error_response(resume.status());
    if (!is_run_id(*resume)) return error_response(400, "'resume' must be a run id: 32 lowercase hex digits");
    spec.resume_run = std::move(*resume);
    // What can be told now rather than by a job that fails at once (run_training checks it too).
    auto run = call.registry->runs().get(spec.resume_run);
    if (!run.ok()) return error_response(run.status());
    // A RUNNING run resumes when its process is gone (run_training checks the owner).
    if (run->status == "FINISHED") {
      return error_response(409, "run " + spec.resume_run +
                                     " is FINISHED: only a cancelled, interrupted or failed run "
                                     "resumes");
    }
  } else {
    auto object = body.object("spec", "an object of the spec's keys, such as {\"data\": \"train.csv\"}");
    if (!object.ok()) return error_response(object.status());
    auto given = client_spec(call, *object);
    if (!given.ok()) return error_response(given.status());
    spec = std::move(*given);
  }
  std::string run_id = spec.resume_run;
  if (body.has("run_id")) {
    if (body.has("resume")) return error_response(400, "a resumed run keeps its id: send 'resume' without 'run_id'");
    auto chosen = body.text("run_id", "32 lowercase hex digits");
    if (!chosen.ok() || !is_run_id(*chosen)) return error_response(400, "'run_id' must be 32 lowercase hex digits");
    run_id = spec.run_id = std::move(*chosen);
    // A retried start: the run it made (or the job still preparing it) answers.
    if (call.registry->runs().get(run_id).ok() || call.server->training_jobs.progress(run_id).running) {
      return job_answer(call, run_id, 200, false);
    }
  } else if (run_id.empty()) {
    run_id = spec.run_id = random_hex(16);
  }
  auto work = [home = call.server->options.home, spec = std::move(spec),
               actor = call.caller.actor](BackgroundJobs::Job& job) mutable -> Status {
    // The server's threads serve requests too: a training takes at most every core.
    if (spec.threads == 0 || spec.threads > default_thread_count()) spec.threads = default_thread_count();
    SLIPWAY_ASSIGN_OR_RETURN(auto registry, registry::Registry::open(home, false));
    if (!actor.empty()) registry->set_actor(actor);
    return pipeline::run_training(*registry, spec, training_job_callbacks(job)).status();
  };
  if (auto started = call.server->training_jobs.start(run_id, std::move(work)); !started.ok()) {
    return error_response(started);
  }
  return job_answer(call, run_id, 202, true);
}

HttpResponse get_job(ApiCall& call) {
  auto run_id = run_id_parameter(call);
  if (!run_id.ok()) return error_response(run_id.status());
  return job_answer(call, *run_id, 200);
}

HttpResponse cancel_job(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto run_id = run_id_parameter(call);
  if (!run_id.ok()) return error_response(run_id.status());
  if (!call.server->training_jobs.cancel(*run_id)) {
    return error_response(409, "training job '" + *run_id + "' is not running in this server: nothing to cancel");
  }
  return job_answer(call, *run_id, 200);
}

HttpResponse list_parameters(ApiCall& call) {
  if (auto query = parse_query(call.http.query, {}); !query.ok()) return error_response(query.status());
  JsonWriter json;
  pipeline::write_parameters_json(json);
  return json_answer(json);
}

HttpResponse list_jobs(ApiCall& call) {
  JsonWriter json;
  json.begin_object().key("running").begin_array();
  for (const auto& run_id : call.server->training_jobs.running()) json.value(run_id);
  json.end_array().end_object();
  return json_answer(json);
}

}  // namespace

void add_training_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET",
                    "/api/params",
                    Role::kRead,
                    false,
                    "The training parameters a spec's params may set: models, type, default, allowed values, meaning "
                    "(slipway params)",
                    {},
                    "",
                    kParametersSchema,
                    list_parameters});
  routes.push_back({"GET",
                    "/api/training-jobs",
                    Role::kRead,
                    false,
                    "The training jobs this server runs now: run ids, and retrain:MODEL or reproduce:RUN_ID for "
                    "retrainings and reproductions (the runs they record: /api/runs)",
                    {},
                    "",
                    kRunningSchema,
                    list_jobs});
  routes.push_back({"POST",
                    "/api/training-jobs",
                    Role::kDeploy,
                    false,
                    "Train a model from a spec on data in the workspace's data/ folder (slipway train), or resume a "
                    "run; answers 202 with the run's id at once: poll the job",
                    {},
                    kStartSchema,
                    kJobSchema,
                    start_job});
  routes.back().accepts = true;
  routes.push_back({"GET",
                    "/api/training-jobs/{run_id}",
                    Role::kRead,
                    false,
                    "A training job's state and progress, and its run",
                    {},
                    "",
                    kJobSchema,
                    get_job});
  routes.push_back({"POST",
                    "/api/training-jobs/{run_id}/cancel",
                    Role::kDeploy,
                    false,
                    "Stop a training after the round in progress: its run is marked INTERRUPTED, and a resume "
                    "continues it from its latest checkpoint",
                    {},
                    "",
                    kJobSchema,
                    cancel_job});
}

}  // namespace slipway::control
