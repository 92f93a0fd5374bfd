// /api retrainings and reproductions: what `slipway retrain NAME` and `slipway reproduce RUN` do,
// run by the server. Both train, so they share the server's training slot with /api/training-jobs
// (one at a time: 429 beyond), as jobs named "retrain:MODEL" and "reproduce:RUN_ID".
#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kRetrainSchema =
    R"({"type":"object","additionalProperties":false,"properties":{)"
    R"("force":{"type":"boolean","description":"now, whatever the triggers say, even on the rows of an earlier )"
    R"(retraining"},"dry_run":{"type":"boolean","description":"say whether it is due and why; start nothing"}}})";
constexpr std::string_view kRetrainStartedSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"due":{"type":"boolean"},)"
    R"("decision":{"type":"string"},"started":{"type":"boolean"},"job":{"type":"string"}}})";
constexpr std::string_view kRetrainingsSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"running":{"type":"boolean"},)"
    R"("cancelling":{"type":"boolean"},"rounds_done":{"type":"integer"},"rounds_total":{"type":"integer"},)"
    R"("last_job":{"type":"object","description":"how this server's last retraining of the model ended: )"
    R"({\"error\"} or the retraining as slipway retrain --json writes it"},)"
    R"("retrainings":{"type":"array","items":{"type":"object"}}}})";
constexpr std::string_view kReproductionSchema =
    R"({"type":"object","properties":{"run_id":{"type":"string"},"state":{"type":"string","enum":)"
    R"(["running","identical","different","refused","failed"]},"running":{"type":"boolean"},)"
    R"("cancelling":{"type":"boolean"},"rounds_done":{"type":"integer"},"rounds_total":{"type":"integer"},"reason":{"type":"string"},)"
    R"("reproduction":{"type":"object","properties":{"run_id":{"type":"string"},)"
    R"("recorded_sha256":{"type":"string"},"reproduced_sha256":{"type":"string"},"identical":{"type":"boolean"},)"
    R"("seconds":{"type":"number"}}}}})";
const std::vector<ApiParameter> history_query = {
    {"limit", R"({"type":"integer","minimum":1,"maximum":1000})", "At most this many retrainings, newest first (20)"},
};

std::string retrain_job(const std::string& model) { return "retrain:" + model; }
std::string reproduce_job(const std::string& run_id) { return "reproduce:" + run_id; }

void write_progress(JsonWriter& json, const BackgroundJobs::Progress& progress) {
  json.key("running").value(progress.running);
  if (!progress.running) return;
  json.key("cancelling").value(progress.cancelling);
  json.key("rounds_done").value(static_cast<std::uint64_t>(progress.done));
  json.key("rounds_total").value(static_cast<std::uint64_t>(progress.total));
}

Result<pipeline::RetrainPolicy> stored_policy(registry::Registry& registry, const std::string& model) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_ASSIGN_OR_RETURN(auto policy, pipeline::load_retrain_policy(registry, model));
  if (!policy) {
    return not_found("model '" + model + "' has no retrain policy; set one with PUT /api/models/" + model +
                     "/retrain-policy");
  }
  return std::move(*policy);
}

HttpResponse start_retraining(ApiCall& call) {
  JsonBody body;
  if (auto parsed =
          body.parse(call.http.body.empty() ? "{}" : call.http.body, R"({"force": true})", {"force", "dry_run"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  bool force = false, dry_run = false;
  for (auto [key, flag] : {std::pair{"force", &force}, std::pair{"dry_run", &dry_run}}) {
    if (!body.has(key)) continue;
    auto given = body.boolean(key);
    if (!given.ok()) return error_response(given.status());
    *flag = *given;
  }
  const std::string& model = call.path_parameter("model");
  auto policy = stored_policy(*call.registry, model);
  if (!policy.ok()) return error_response(policy.status());
  // Decided here, read only, so a client learns at once whether anything starts; the job decides
  // again under the model's retraining lock.
  auto decision = force ? Result<pipeline::RetrainDecision>(pipeline::RetrainDecision{true, "forced"})
                        : pipeline::retrain_due(*call.registry, *policy, unix_time_ms());
  if (!decision.ok()) return error_response(decision.status());
  bool start = decision->due && !dry_run;
  if (start) {
    auto work = [home = call.server->options.home, policy = std::move(*policy), force,
                 actor = call.caller.actor](BackgroundJobs::Job& job) -> Status {
      SLIPWAY_ASSIGN_OR_RETURN(auto registry, registry::Registry::open(home, false));
      if (!actor.empty()) registry->set_actor(actor);
      pipeline::RetrainOptions options;
      options.force = force;
      options.callbacks = training_job_callbacks(job);
      SLIPWAY_ASSIGN_OR_RETURN(auto outcome, pipeline::retrain(*registry, policy, options));
      JsonWriter json;
      pipeline::write_retraining_json(json, policy.model, {}, outcome);
      job.result = json.take();
      return {};
    };
    if (auto started = call.server->training_jobs.start(retrain_job(model), std::move(work)); !started.ok()) {
      return error_response(started);
    }
  }
  JsonWriter json;
  json.begin_object().key("model").value(model).key("due").value(decision->due);
  json.key("decision").value(decision->reason).key("started").value(start);
  if (start) json.key("job").value(retrain_job(model));
  json.end_object();
  return serve::json_response(start ? 202 : 200, json.take());
}

HttpResponse list_retrainings(ApiCall& call) {
  auto query = parse_query(call.http.query, history_query);
  if (!query.ok()) return error_response(query.status());
  std::int64_t limit = 20;
  if (auto given = query->find("limit"); given != query->end()) {
    auto parsed = parse_integer(given->second, "limit", 1, 1000);
    if (!parsed.ok()) return error_response(parsed.status());
    limit = *parsed;
  }
  const std::string& model = call.path_parameter("model");
  if (auto valid = registry::validate_model_name(model); !valid.ok()) return error_response(valid);
  auto records = call.registry->retraining().list(model, static_cast<std::size_t>(limit));
  if (!records.ok()) return error_response(records.status());
  auto progress = call.server->training_jobs.progress(retrain_job(model));
  JsonWriter json;
  json.begin_object().key("model").value(model);
  write_progress(json, progress);
  if (!progress.error.empty()) {
    json.key("last_job").begin_object().key("error").value(progress.error).end_object();
  } else if (!progress.result.empty()) {
    json.key("last_job").raw(progress.result);
  }
  json.key("retrainings").begin_array();
  for (const auto& record : *records) pipeline::write_retraining_record_json(json, record);
  json.end_array().end_object();
  return json_answer(json);
}

HttpResponse cancel_retraining(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  const std::string& model = call.path_parameter("model");
  if (!call.server->training_jobs.cancel(retrain_job(model))) {
    return error_response(409, "no retraining of '" + model.substr(0, 64) + "' runs in this server: nothing to cancel");
  }
  return list_retrainings(call);
}

HttpResponse reproduction_answer(ApiCall& call, const std::string& run_id, int status) {
  auto progress = call.server->training_jobs.progress(reproduce_job(run_id));
  if (!progress.running && !progress.result.empty()) return serve::json_response(status, progress.result);
  if (!progress.running && progress.error.empty()) {
    return error_response(404, "this server has not reproduced run " + run_id +
                                   " since it started: POST to this address to reproduce it");
  }
  JsonWriter json;
  json.begin_object().key("run_id").value(run_id).key("state").value(progress.running ? "running" : "failed");
  write_progress(json, progress);
  if (!progress.error.empty()) json.key("reason").value(progress.error);
  json.end_object();
  return serve::json_response(status, json.take());
}

HttpResponse start_reproduction(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto run_id = run_id_parameter(call);
  if (!run_id.ok()) return error_response(run_id.status());
  // What can be told now rather than by a job that fails at once (reproduce_run checks it all).
  auto run = call.registry->runs().get(*run_id);
  if (!run.ok()) return error_response(run.status());
  if (run->status != "FINISHED" || run->bundle_sha256.empty()) {
    return error_response(409, "run " + *run_id + " is " + run->status +
                                   " without a bundle; only a finished training run can be reproduced");
  }
  auto work = [home = call.server->options.home, run_id = *run_id](BackgroundJobs::Job& job) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto registry, registry::Registry::open(home, false));
    auto reproduced = pipeline::reproduce_run(*registry, run_id, training_job_callbacks(job));
    // A refusal (the code, the data or the spec changed) is an answer, not a failure of the job.
    if (!reproduced.ok() && reproduced.status().code() != StatusCode::kFailedPrecondition) {
      return reproduced.status();
    }
    JsonWriter json;
    json.begin_object().key("run_id").value(run_id).key("running").value(false);
    if (reproduced.ok()) {
      json.key("state").value(reproduced->identical() ? "identical" : "different").key("reproduction");
      pipeline::write_reproduction_json(json, *reproduced);
    } else {
      json.key("state").value(job.cancel ? "failed" : "refused").key("reason").value(reproduced.status().message());
    }
    json.end_object();
    job.result = json.take();
    return {};
  };
  if (auto started = call.server->training_jobs.start(reproduce_job(*run_id), std::move(work)); !started.ok()) {
    return error_response(started);
  }
  return reproduction_answer(call, *run_id, 202);
}

HttpResponse cancel_reproduction(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto run_id = run_id_parameter(call);
  if (!run_id.ok()) return error_response(run_id.status());
  if (!call.server->training_jobs.cancel(reproduce_job(*run_id))) {
    return error_response(409, "no reproduction of run " + *run_id + " runs in this server: nothing to cancel");
  }
  return reproduction_answer(call, *run_id, 200);
}

HttpResponse get_reproduction(ApiCall& call) {
  auto run_id = run_id_parameter(call);
  if (!run_id.ok()) return error_response(run_id.status());
  return reproduction_answer(call, *run_id, 200);
}

}  // namespace

void add_retraining_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"POST",
                    "/api/models/{model}/retrainings",
                    Role::kDeploy,
                    false,
                    "Retrain the model now if its policy says it is due (or with force), on a thread of the server: "
                    "train, gate, register, deploy as the policy says (slipway retrain NAME); dry_run only decides",
                    {},
                    kRetrainSchema,
                    kRetrainStartedSchema,
                    start_retraining});
  routes.back().accepts = true;
  routes.push_back({"GET", "/api/models/{model}/retrainings", Role::kRead, false,
                    "The model's retrainings, newest first, and the one this server runs (slipway retrain history)",
                    history_query, "", kRetrainingsSchema, list_retrainings});
  routes.push_back({"POST",
                    "/api/models/{model}/retrainings/cancel",
                    Role::kDeploy,
                    false,
                    "Stop the retraining this server runs after the round in progress",
                    {},
                    "",
                    kRetrainingsSchema,
                    cancel_retraining});
  routes.push_back({"POST",
                    "/api/runs/{run_id}/reproduction",
                    Role::kDeploy,
                    false,
                    "Train a finished run again from its recorded spec, data and seed, in a scratch workspace, and "
                    "say whether the bundle is identical (slipway reproduce); answers 202 at once: poll it",
                    {},
                    "",
                    kReproductionSchema,
                    start_reproduction});
  routes.back().accepts = true;
  routes.push_back({"POST",
                    "/api/runs/{run_id}/reproduction/cancel",
                    Role::kDeploy,
                    false,
                    "Stop this server's reproduction of the run after the round in progress",
                    {},
                    "",
                    kReproductionSchema,
                    cancel_reproduction});
  routes.push_back({"GET",
                    "/api/runs/{run_id}/reproduction",
                    Role::kRead,
                    false,
                    "How this server's reproduction of the run goes or went",
                    {},
                    "",
                    kReproductionSchema,
                    get_reproduction});
}

}  // namespace slipway::control
