// /api/studies: what `slipway tune`, `studies` and `study show` do, for the SDK and the console.
// A client sends the study's definition (the training spec as a YAML spec's keys, its files in
// the workspace's data/ folder; the space as the YAML space's keys; objectives and constraints as
// the CLI writes them), gets 202 at once, and polls the study; the server runs it on a thread of
// its own, one study at a time, and a cancel stops its running trials (interrupted: a resume runs
// them again).
#include <algorithm>

#include "control/api.h"
#include "slipway/pipeline/tuning.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::size_t kMaxObjectives = 3;
constexpr std::size_t kMaxConstraints = 16;
constexpr std::size_t kMaxCostsBytes = std::size_t{64} * 1024;

constexpr std::string_view kStartSchema =
    R"({"type":"object","additionalProperties":false,"required":["study"],"properties":{)"
    R"("study":{"type":"string","description":"the study's name, by the rules of model names"},)"
    R"("spec":{"type":"object","description":"the training spec: the keys of a YAML spec (data, test, target, )"
    R"(model, split, test_fraction, slice, seed, params, ignore, experiment, threads, weight); data and test are )"
    R"(files of the workspace's data/ folder; params are fixed, not tuned"},)"
    R"("space":{"type":"object","description":"the search space: the keys of a YAML space ({params: {NAME: )"
    R"({type, low, high, log, choices, when}}}); omitted: the family's default space"},)"
    R"("sampler":{"type":"string","enum":["tpe","tpe:multivariate","random","grid","qmc"]},)"
    R"("pruner":{"type":"string","description":"asha[:MIN_RESOURCE[:REDUCTION_FACTOR]], median[:WARMUP_STEPS] )"
    R"(or none"},)"
    R"("objectives":{"type":"array","maxItems":3,"items":{"type":"string"},"description":"auc, )"
    R"(log_loss:minimize, auc@worst, p95_us, bundle_kb ... (slipway tune --objective); omitted: the task's metric"},)"
    R"("constraints":{"type":"array","maxItems":16,"items":{"type":"string"},"description":"such as p95_us<=50"},)"
    R"("costs":{"type":"string","maxLength":65536,"description":"for the metric cost: fn=5,fp=1 or CSV text )"
    R"(actual,predicted,cost"},)"
    R"("trials":{"type":"integer","minimum":1,"maximum":100000},)"
    R"("budget_seconds":{"type":"number","exclusiveMinimum":0},)"
    R"("parallel":{"type":"integer","minimum":1,"maximum":64},)"
    R"("from_study":{"type":"string"},"register":{"type":"string"},"force":{"type":"boolean"},)"
    R"("resume":{"type":"boolean","description":"continue the stored study as defined; only trials, )"
    R"(budget_seconds and parallel apply"}}})";
constexpr std::string_view kStudySchema =
    R"({"type":"object","properties":{"study":{"type":"string"},"running":{"type":"boolean"},)"
    R"("reason":{"type":"string"},"objectives":{"type":"array"},"trials":{"type":"array"},)"
    R"("best":{"type":"array","items":{"type":"integer"}},"importance":{"type":"object"}}})";
constexpr std::string_view kListSchema =
    R"({"type":"object","properties":{"studies":{"type":"array","items":{"type":"object","properties":)"
    R"({"study":{"type":"string"},"running":{"type":"boolean"},"trials":{"type":"object"},)"
    R"("created_ms":{"type":"integer"},"updated_ms":{"type":"integer"}}}}}})";

// The study as stored, and whether this server runs it now; a job that failed before the study
// existed answers with its reason.
HttpResponse study_answer(ApiCall& call, const std::string& study, int status) {
  auto progress = call.server->study_jobs.progress(study);
  auto stored = pipeline::read_study(*call.registry, study);
  if (!stored.ok() && !progress.running) {
    if (!progress.error.empty() && stored.status().code() == StatusCode::kNotFound) {
      return error_response(400, progress.error);
    }
    return error_response(stored.status());
  }
  JsonWriter json;
  if (!stored.ok()) {  // a job preparing: reading the data for its default objective
    json.begin_object().key("study").value(study).key("running").value(true).end_object();
    return serve::json_response(status, json.take());
  }
  JsonWriter inner;
  pipeline::write_study_json(inner, *stored);
  std::string body = inner.take();
  // {"running":…,"reason":…, then the study's own fields}
  JsonWriter head;
  head.begin_object().key("running").value(progress.running);
  if (!progress.error.empty()) head.key("reason").value(progress.error);
  head.end_object();
  std::string prefix = head.take();
  prefix.pop_back();  // the closing brace
  return serve::json_response(status, prefix + "," + body.substr(1));
}

Result<std::vector<std::string>> text_list(JsonBody& body, std::string_view key, std::size_t most) {
  std::vector<std::string> items;
  if (!body.has(key)) return items;
  SLIPWAY_ASSIGN_OR_RETURN(auto array, body.array(key, "an array of strings"));
  for (auto element : array) {
    std::string_view text;
    if (element.get(text) != simdjson::SUCCESS) return invalid_argument("'" + std::string(key) + "' holds strings");
    if (items.size() == most) {
      return invalid_argument("'" + std::string(key) + "' holds at most " + std::to_string(most) + " items");
    }
    items.emplace_back(text);
  }
  return items;
}

Result<pipeline::StudyRequest> study_request(ApiCall& call, JsonBody& body) {
  pipeline::StudyRequest request;
  request.caller = call.caller;
  SLIPWAY_ASSIGN_OR_RETURN(request.study, body.text("study", "the study's name"));
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(request.study));
  if (body.has("resume")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.resume, body.boolean("resume"));
  }
  if (body.has("force")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.force, body.boolean("force"));
  }
  if (body.has("parallel")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto parallel, body.integer("parallel", 1, 64, "workers"));
    // The server's threads serve requests too: no more workers than cores.
    request.parallel = static_cast<int>(std::min<std::int64_t>(parallel, default_thread_count()));
  }
  if (body.has("budget_seconds")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto budget, body.number("budget_seconds", "seconds"));
    request.budget_seconds = budget;
  }
  if (body.has("trials")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto trials, body.integer("trials", 1, 100'000, "the study's trial count"));
    request.definition.trials = static_cast<int>(trials);
    request.trials_given = true;
  }
  if (body.has("register")) {
    SLIPWAY_ASSIGN_OR_RETURN(request.register_as, body.text("register", "a model name"));
  }
  if (request.resume) {
    for (std::string_view key :
         {"spec", "space", "sampler", "pruner", "objectives", "constraints", "costs", "from_study"}) {
      if (body.has(key)) {
        return invalid_argument("'resume' continues the stored study as defined; '" + std::string(key) +
                                "' does not apply");
      }
    }
    return request;
  }
  pipeline::StudyDefinition& definition = request.definition;
  if (!body.has("spec")) return invalid_argument("send the training 'spec' (or 'resume': true)");
  SLIPWAY_ASSIGN_OR_RETURN(auto spec, body.object("spec", "an object of the spec's keys, such as {\"data\": ...}"));
  SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec_text(simdjson::minify(spec), "the body's spec", definition.spec));
  SLIPWAY_RETURN_IF_ERROR(confine_spec_files(call.registry->home() + "/data", definition.spec, true));
  if (!definition.spec.register_as.empty()) {
    return invalid_argument("a study's trials are not registered: send 'register' beside the spec");
  }
  if (definition.spec.threads == 0 || definition.spec.threads > default_thread_count()) {
    definition.spec.threads = default_thread_count();
  }
  if (body.has("space")) {
    SLIPWAY_ASSIGN_OR_RETURN(auto space, body.object("space", "the search space's keys, such as {\"params\": ...}"));
    SLIPWAY_ASSIGN_OR_RETURN(
        definition.space, tune::parse_search_space(simdjson::minify(space), "the body's space", definition.spec.model));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(definition.space, tune::default_search_space(definition.spec.model));
  }
  if (body.has("sampler")) {
    SLIPWAY_ASSIGN_OR_RETURN(definition.sampler, body.text("sampler", "tpe, tpe:multivariate, random, grid or qmc"));
  }
  if (body.has("pruner")) {
    SLIPWAY_ASSIGN_OR_RETURN(definition.pruner, body.text("pruner", "asha, median or none"));
  }
  if (body.has("from_study")) {
    SLIPWAY_ASSIGN_OR_RETURN(definition.from_study, body.text("from_study", "a study"));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto objectives, text_list(body, "objectives", kMaxObjectives));
  for (const auto& text : objectives) {
    SLIPWAY_ASSIGN_OR_RETURN(auto objective, pipeline::parse_study_objective(text));
    definition.objectives.push_back(std::move(objective));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto constraints, text_list(body, "constraints", kMaxConstraints));
  for (const auto& text : constraints) {
    SLIPWAY_ASSIGN_OR_RETURN(auto constraint, pipeline::parse_study_constraint(text));
    definition.constraints.push_back(std::move(constraint));
  }
  if (body.has("costs")) {
    // The text itself, never a path: a server reads only the workspace's data files.
    SLIPWAY_ASSIGN_OR_RETURN(auto costs, body.text("costs", "\"fn=5,fp=1\" or CSV text actual,predicted,cost"));
    if (costs.size() > kMaxCostsBytes) return invalid_argument("'costs' is longer than 64 KiB");
    SLIPWAY_ASSIGN_OR_RETURN(definition.costs, eval::parse_cost_matrix(costs));
  }
  return request;
}

HttpResponse start_study(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body,
                               R"({"study": "lending-gbdt", "spec": {"data": "train.csv", "target": "Class", )"
                               R"("model": "gbdt"}, "trials": 40, "pruner": "asha"})",
                               {"study", "spec", "space", "sampler", "pruner", "objectives", "constraints", "costs",
                                "trials", "budget_seconds", "parallel", "from_study", "register", "force", "resume"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto request = study_request(call, body);
  if (!request.ok()) return error_response(request.status());
  if (auto checked = pipeline::check_study_request(*request); !checked.ok()) return error_response(checked);
  const std::string study = request->study;
  auto work = [home = call.server->options.home, request = std::move(*request)](BackgroundJobs::Job& job) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto registry, registry::Registry::open(home, false));
    pipeline::StudyCallbacks callbacks;
    callbacks.cancel = &job.cancel;
    job.total = static_cast<std::size_t>(request.definition.trials);
    callbacks.on_trial_finished = [&job](const pipeline::StudyTrialView&, const pipeline::StudyResult& study) {
      job.done = study.trials.size();
      job.total = static_cast<std::size_t>(study.definition.trials);
    };
    return pipeline::run_study(*registry, request, callbacks).status();
  };
  if (auto started = call.server->study_jobs.start(study, std::move(work)); !started.ok()) {
    return error_response(started);
  }
  return study_answer(call, study, 202);
}

HttpResponse get_study(ApiCall& call) {
  if (auto query = parse_query(call.http.query, {}); !query.ok()) return error_response(query.status());
  return study_answer(call, call.path_parameter("study"), 200);
}

HttpResponse cancel_study(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  const std::string& study = call.path_parameter("study");
  if (!call.server->study_jobs.cancel(study)) {
    return error_response(409, "study '" + study + "' is not running in this server: nothing to cancel");
  }
  return study_answer(call, study, 200);
}

HttpResponse list_studies(ApiCall& call) {
  if (auto query = parse_query(call.http.query, {}); !query.ok()) return error_response(query.status());
  auto studies = pipeline::list_studies(*call.registry);
  if (!studies.ok()) return error_response(studies.status());
  std::vector<std::string> running = call.server->study_jobs.running();
  JsonWriter json;
  json.begin_object().key("studies").begin_array();
  for (const auto& summary : *studies) {
    bool runs_here = std::find(running.begin(), running.end(), summary.study.name) != running.end();
    json.begin_object().key("study").value(summary.study.name).key("running").value(runs_here);
    json.key("created_ms").value(summary.study.created_ms).key("updated_ms").value(summary.updated_ms);
    json.key("trials").begin_object();
    for (const auto& [state, count] : summary.trials_by_state) json.key(state).value(count);
    json.end_object().end_object();
  }
  json.end_array().end_object();
  return json_answer(json);
}

}  // namespace

void add_study_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET",
                    "/api/studies",
                    Role::kRead,
                    false,
                    "Hyperparameter studies: trials by state, and whether this server runs each now (slipway studies)",
                    {},
                    "",
                    kListSchema,
                    list_studies});
  routes.push_back({"POST",
                    "/api/studies",
                    Role::kDeploy,
                    false,
                    "Start or continue a hyperparameter study on data in the workspace's data/ folder (slipway tune); "
                    "answers 202 at once: poll the study",
                    {},
                    kStartSchema,
                    kStudySchema,
                    start_study});
  routes.back().accepts = true;
  routes.push_back({"GET",
                    "/api/studies/{study}",
                    Role::kRead,
                    false,
                    "A study's definition, trials, best trial or Pareto front and parameter importance (slipway study "
                    "show --json), and whether this server runs it now",
                    {},
                    "",
                    kStudySchema,
                    get_study});
  routes.push_back({"POST",
                    "/api/studies/{study}/cancel",
                    Role::kDeploy,
                    false,
                    "Stop a study this server runs: its running trials end interrupted, and a resume runs them again",
                    {},
                    "",
                    kStudySchema,
                    cancel_study});
}

}  // namespace slipway::control
