// `slipway optimize` of a tabular model as one operation (optimize.h): what the CLI and /api both
// run, and the JSON of its report and of a profile.
#include <fmt/format.h>

#include <cmath>

#include "slipway/optimize.h"
#include "slipway/pipeline.h"

namespace slipway::optimize {

Status check_optimization_request(const OptimizationRequest& request) {
  if (request.data_path.empty()) return invalid_argument("the golden rows (labelled data) are required");
  if (!(request.price_per_hour >= 0) || !std::isfinite(request.price_per_hour)) {
    return invalid_argument("the price per hour must be a finite number >= 0");
  }
  if (request.tolerance && (!(*request.tolerance >= 0) || !std::isfinite(*request.tolerance))) {
    return invalid_argument("the tolerance must be a finite number >= 0");
  }
  if (request.duration < std::chrono::milliseconds(200)) return invalid_argument("the duration must be at least 200ms");
  if (request.budget && *request.budget <= std::chrono::milliseconds(0)) {
    return invalid_argument("the budget must be positive");
  }
  if (request.threads < 1 || request.threads > 256) return invalid_argument("the threads must be from 1 to 256");
  if (!(request.repeat_rate >= 0 && request.repeat_rate <= 1)) {
    return invalid_argument("the repeat rate must be from 0 to 1");
  }
  if (!(request.distill_alpha >= 0 && request.distill_alpha <= 1)) {
    return invalid_argument("the distillation alpha must be from 0 to 1");
  }
  if (!(request.distill_temperature > 0 && request.distill_temperature <= 100)) {
    return invalid_argument("the distillation temperature must be above 0 and at most 100");
  }
  if (request.resume && !request.register_candidates) {
    return invalid_argument("resuming continues a registering run of a registered model: register as well");
  }
  if (request.resume && request.reference.find('@') == std::string::npos) {
    // A bare NAME is the newest version: after a registering run, one of its candidates.
    return invalid_argument("resuming needs the baseline pinned as NAME@VERSION (the run being resumed printed it)");
  }
  for (const auto& technique : request.techniques) SLIPWAY_RETURN_IF_ERROR(check_technique(technique));
  if (!request.slo.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(Slo slo, parse_slo(request.slo));
    if (slo.cost_per_1k && !(request.price_per_hour > 0)) return invalid_argument("a cost SLO needs a price per hour");
  }
  return {};
}

Result<OptimizeReport> run_optimization(registry::Registry* registry, const OptimizationRequest& request) {
  SLIPWAY_RETURN_IF_ERROR(check_optimization_request(request));
  OptimizeOptions options;
  if (!request.slo.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(options.slo, parse_slo(request.slo));
  }
  if (!request.techniques.empty()) options.techniques = request.techniques;
  options.price_per_hour = request.price_per_hour;
  options.tolerance = request.tolerance;
  options.measure_time = request.duration;
  options.budget = request.budget;
  options.threads = request.threads;
  options.repeat_rate = request.repeat_rate;
  options.slice_column = request.slice_column;
  options.distill_alpha = request.distill_alpha;
  options.distill_temperature = request.distill_temperature;
  options.on_progress = request.on_progress;
  options.cancel = request.cancel;

  // Candidates become versions of a registered model; a bundle file's are measured only.
  bool registering = request.register_candidates && !pipeline::names_bundle_file(request.reference);
  if (registering && registry == nullptr) return failed_precondition("registering candidates needs the workspace");
  if (request.resume && !registering) {
    return invalid_argument("resuming continues a registering run of a registered model, not of a bundle file");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, pipeline::resolve_reference(registry, request.reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto golden, pipeline::read_table(request.data_path));
  std::optional<data::Table> train, unlabeled, calibration;
  if (!request.train_path.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(train, pipeline::read_table(request.train_path));
    options.train = &*train;
  }
  if (!request.unlabeled_path.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(unlabeled, pipeline::read_table(request.unlabeled_path));
    options.unlabeled = &*unlabeled;
  }
  if (!request.calibration_path.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(calibration, pipeline::read_table(request.calibration_path));
    options.calibration = &*calibration;
  }
  options.baseline = loaded.bundle;
  options.baseline_name = loaded.description;
  options.golden = &golden;
  options.context = fmt::format(
      "data={};slice={};tolerance={};price={};train={};unlabeled={};repeat={};calibration={}", request.data_path,
      request.slice_column, request.tolerance ? fmt::format("{}", *request.tolerance) : "", request.price_per_hour,
      request.train_path, request.unlabeled_path, request.repeat_rate, request.calibration_path);
  std::string model = loaded.description.substr(0, loaded.description.find('@'));
  if (registering) {
    options.on_candidate = [registry, model](const CandidateResult& candidate) -> Result<std::string> {
      SLIPWAY_ASSIGN_OR_RETURN(registry::ModelVersion version,
                               pipeline::register_bundle(*registry, model, *candidate.bundle, pipeline::Caller{}));
      return model + "@" + std::to_string(version.version);
    };
    log_info("each candidate is registered as a version of " + model +
             " as soon as it is measured; if this run stops, resuming it with " + loaded.description +
             " as the model continues it");
  }
  // Versions an earlier run registered: (version, record) by candidate name, for the same
  // baseline, SLO and context.
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>> finished;
  if (request.resume) {
    SLIPWAY_ASSIGN_OR_RETURN(auto versions, registry->models().list_versions(model));
    auto records = pipeline::optimization_records(*registry, model, versions);
    for (std::size_t index = 0; index < versions.size(); ++index) {
      const auto& record = records[index];
      auto field = [&](const char* key) {
        auto found = record.find(key);
        return found == record.end() ? std::string() : found->second;
      };
      if (field("baseline") == loaded.description && field("slo") == request.slo &&
          field("context") == options.context && !field("name").empty()) {
        finished[field("name")] = {model + "@" + std::to_string(versions[index].version), record};
      }
    }
    options.find_finished =
        [&finished](
            const std::string& name) -> std::optional<std::pair<std::string, std::map<std::string, std::string>>> {
      auto found = finished.find(name);
      if (found == finished.end()) return std::nullopt;
      return found->second;
    };
  }
  return optimize_model(options);
}

void write_optimize_report_json(JsonWriter& json, const OptimizeReport& report, std::string_view data_name) {
  json.begin_object().key("baseline").value(report.baseline_name).key("data").value(data_name);
  json.key("slo").value(report.slo_text).key("quality_metric").value(report.quality_metric);
  if (report.price_per_hour > 0) json.key("price_per_hour").value(report.price_per_hour);
  json.key("repeat_rate").value(report.repeat_rate);
  json.key("candidates").begin_array();
  for (std::size_t index = 0; index < report.candidates.size(); ++index) {
    const auto& c = report.candidates[index];
    json.begin_object().key("name").value(c.name).key("technique").value(c.technique);
    json.key("settings").begin_object();
    for (const auto& [key, value] : c.settings) json.key(key).value(value);
    json.end_object();
    if (!c.error.empty()) {
      json.key("error").value(c.error).end_object();
      continue;
    }
    json.key("quality").value(c.quality).key("quality_drop").value(c.quality_drop);
    if (!c.worst_slice.empty()) {
      json.key("worst_slice").value(c.worst_slice).key("worst_slice_drop").value(c.worst_slice_drop);
    }
    json.key("rows_beyond_tolerance").value(static_cast<std::uint64_t>(c.rows_beyond_tolerance));
    json.key("label_flips").value(static_cast<std::uint64_t>(c.label_flips));
    json.key("max_abs_difference").value(c.max_abs_difference);
    json.key("p50_ms").value(c.p50_ms).key("p95_ms").value(c.p95_ms).key("p99_ms").value(c.p99_ms);
    json.key("achieved_rate").value(c.achieved_rate).key("failed_requests").value(c.failed_requests);
    json.key("max_rate").value(c.max_rate).key("cost_per_1k").value(c.cost_per_1k);
    json.key("throughput").begin_object().key("median").value(c.throughput_median);
    json.key("low").value(c.throughput_low).key("high").value(c.throughput_high);
    json.key("rounds").value(c.throughput_rounds).end_object();
    json.key("bundle_bytes").value(static_cast<std::uint64_t>(c.bundle_bytes));
    json.key("loaded_bytes").value(static_cast<std::uint64_t>(c.loaded_bytes));
    json.key("request_bytes").value(static_cast<std::uint64_t>(c.request_bytes));
    json.key("meets_slo").value(c.meets_slo).key("failures").begin_array();
    for (const auto& failure : c.failures) json.value(failure);
    json.end_array();
    json.key("recommended").value(static_cast<int>(index) == report.recommended);
    if (!c.version.empty()) json.key("version").value(c.version);
    json.end_object();
  }
  json.end_array();
  json.key("recommended")
      .value(report.recommended < 0 ? std::string()
                                    : report.candidates[static_cast<std::size_t>(report.recommended)].name);
  json.key("reason").value(report.reason);
  json.key("prune_curve").begin_array();
  for (const auto& [rounds, quality] : report.prune_curve) {
    json.begin_object().key("rounds").value(static_cast<std::uint64_t>(rounds)).key("quality").value(quality);
    json.end_object();
  }
  json.end_array().end_object();
}

void write_profile_report_json(JsonWriter& json, const ProfileReport& report) {
  json.begin_object().key("model").value(report.model).key("family").value(report.family);
  json.key("bundle_bytes").value(static_cast<std::uint64_t>(report.bundle_bytes));
  json.key("loaded_bytes").value(static_cast<std::uint64_t>(report.loaded_bytes));
  json.key("threads").value(static_cast<std::int64_t>(report.threads));
  json.key("sizes").begin_array();
  for (const auto& size : report.sizes) {
    json.begin_object().key("rows_per_request").value(static_cast<std::uint64_t>(size.rows_per_request));
    json.key("request_bytes").value(static_cast<std::uint64_t>(size.request_bytes));
    json.key("response_bytes").value(static_cast<std::uint64_t>(size.response_bytes));
    json.key("requests_timed").value(size.requests_timed);
    json.key("stages").begin_array();
    for (const auto& stage : size.stages) {
      json.begin_object().key("stage").value(stage.name).key("median_us").value(stage.median_us);
      json.key("share").value(stage.share).end_object();
    }
    json.end_array();
    json.key("in_process_us").value(size.in_process_us);
    json.key("server_p50_us").value(size.server_p50_us).key("server_p99_us").value(size.server_p99_us);
    json.key("in_process_rows_per_second").value(size.in_process_rows_per_second);
    json.key("server_rows_per_second").value(size.server_rows_per_second);
    json.key("connections").value(static_cast<std::int64_t>(size.connections));
    json.key("bottleneck").value(size.bottleneck).end_object();
  }
  json.end_array().end_object();
}

}  // namespace slipway::optimize
