// One training run from a spec: the sequence (and what each failure leaves) is in pipeline.h.
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include <filesystem>
#include "pipeline/step_cache.h"
#include "pipeline/study_support.h"
#include "slipway/kernels.h"

#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

struct PreparedData {
  data::Table train;
  data::Table test;
  data::LeakageReport leakage;
  std::string split_description;
  std::string fingerprint;
  std::vector<std::string> excluded_columns;
  // The rows a decision threshold rule is applied to, held out of `train` (empty without a rule).
  data::Table threshold_rows;
};

// A threshold rule, not a number given as is: it needs held-out rows.
bool threshold_needs_rows(const TrainSpec& spec) {
  return !spec.threshold.empty() && !eval::threshold_is_number(spec.threshold);
}

// How many distinct values `column` holds, counting to `enough` at most.
std::size_t distinct_values(const data::Column& column, std::size_t enough) {
  std::set<std::string> seen;
  for (std::size_t row = 0; row < column.size() && seen.size() < enough; ++row) {
    if (!column.is_missing(row)) seen.insert(column.text_at(row));
  }
  return seen.size();
}

// Moves a stratified threshold_fraction of the training rows to threshold_rows. Refused before
// any fitting when a threshold cannot apply: a target that is not two-valued, or held-out rows
// of one class.
Status hold_out_threshold_rows(const TrainSpec& spec, PreparedData& prepared) {
  if (spec.threshold.empty()) return {};
  const data::Column& target = prepared.train.column(*prepared.train.column_index(spec.target));
  if (std::size_t values = distinct_values(target, 3); values != 2) {
    return invalid_argument(fmt::format("--threshold applies to binary classification; '{}' holds {} distinct values",
                                        spec.target, values > 2 ? "more than 2" : std::to_string(values)));
  }
  if (!threshold_needs_rows(spec)) return {};
  data::SplitSpec split{
      .kind = data::SplitKind::kStratified, .test_fraction = spec.threshold_fraction, .seed = spec.seed};
  auto rows = data::split_rows(prepared.train, split, spec.target);
  if (!rows.ok()) {
    return invalid_argument(
        fmt::format("cannot hold out training rows to choose the threshold on: {}; raise "
                    "--threshold-fraction (now {})",
                    rows.status().message(), spec.threshold_fraction));
  }
  prepared.threshold_rows = prepared.train.take_rows(rows->test_rows);
  prepared.train = prepared.train.take_rows(rows->train_rows);
  const data::Column& held_out = prepared.threshold_rows.column(*prepared.threshold_rows.column_index(spec.target));
  if (distinct_values(held_out, 2) < 2) {
    return invalid_argument(fmt::format(
        "the {} training rows held out to choose the threshold (threshold_fraction {}) hold one class at most; "
        "raise --threshold-fraction",
        prepared.threshold_rows.row_count(), spec.threshold_fraction));
  }
  return {};
}

Result<PreparedData> prepare_data(const TrainSpec& spec) {
  PreparedData prepared;
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(spec.data));
  SLIPWAY_RETURN_IF_ERROR(table.column_index(spec.target).status());
  if (!spec.slice.empty()) SLIPWAY_RETURN_IF_ERROR(table.column_index(spec.slice).status());
  for (const auto& column : spec.ignore) SLIPWAY_RETURN_IF_ERROR(table.column_index(column).status());
  prepared.excluded_columns = spec.ignore;
  if (!spec.test_data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(prepared.test, read_table(spec.test_data));
    prepared.fingerprint = sha256_hex(data::fingerprint(table) + data::fingerprint(prepared.test));
    // The file's name, not the path as it was spelt: the bundle must not change with the folder a
    // training ran from (a relative path) or a replay's absolute one. Its rows are in the
    // fingerprint, which a replay checks.
    prepared.split_description = "test file " + std::filesystem::path(spec.test_data).filename().string();
    prepared.train = std::move(table);
    SLIPWAY_RETURN_IF_ERROR(hold_out_threshold_rows(spec, prepared));
    return prepared;
  }
  SLIPWAY_ASSIGN_OR_RETURN(data::SplitSpec split, data::parse_split_kind(spec.split));
  split.test_fraction = spec.test_fraction;
  split.seed = spec.seed;
  // The time or group key identifies rows rather than describing them: not a feature.
  if (!split.column.empty()) prepared.excluded_columns.push_back(split.column);
  SLIPWAY_ASSIGN_OR_RETURN(data::Split rows, data::split_rows(table, split, spec.target));
  prepared.leakage = data::check_leakage(table, rows, split);
  prepared.split_description =
      fmt::format("{} test_fraction={} seed={}", data::describe_split(split), split.test_fraction, split.seed);
  prepared.fingerprint = data::fingerprint(table);
  prepared.train = table.take_rows(rows.train_rows);
  prepared.test = table.take_rows(rows.test_rows);
  SLIPWAY_RETURN_IF_ERROR(hold_out_threshold_rows(spec, prepared));
  return prepared;
}

// A resumed run: its stored spec (keeping where it runs from `spec`) and its latest checkpoint.
struct Resumption {
  registry::RunRecord run;
  std::shared_ptr<const model::Bundle> checkpoint;
};

Result<Resumption> prepare_resumption(registry::Registry& registry, TrainSpec& spec) {
  // A resume replays the run's stored spec exactly; only where it runs may change.
  SLIPWAY_ASSIGN_OR_RETURN(auto run, registry.runs().get(spec.resume_run));
  if (run.status == "FINISHED") {
    return failed_precondition("run " + run.run_id + " has finished; there is nothing to resume");
  }
  TrainSpec stored;
  SLIPWAY_RETURN_IF_ERROR(load_spec_text(run.spec, "the spec of run " + run.run_id, stored));
  stored.threads = spec.threads;
  stored.bundle_out = spec.bundle_out;
  stored.resume_run = spec.resume_run;
  spec = std::move(stored);
  SLIPWAY_ASSIGN_OR_RETURN(auto latest, registry.runs().latest_checkpoint(run.run_id));
  if (!latest.has_value()) {
    return failed_precondition("run " + run.run_id +
                               " saved no checkpoint (train with --checkpoint-every N); train it again instead");
  }
  SLIPWAY_ASSIGN_OR_RETURN(
      auto bundle, model::Bundle::load(registry.artifacts().path_for(latest->bundle_sha256), latest->bundle_sha256));
  log_info(fmt::format("resuming run {} from its checkpoint after {} {}", run.run_id, latest->step,
                       spec.model == "mlp" ? "epochs" : "rounds"));
  return Resumption{std::move(run), bundle};
}

// The warm-start model. A resume continues from the very bundle the run started from, even if
// the reference (an alias, say) has moved since; a bundle file outside the store is read again.
Result<LoadedReference> resolve_init_model(registry::Registry& registry, const std::string& reference,
                                           const std::optional<Resumption>& resumed) {
  auto loaded = resolve_reference(&registry, reference);
  if (resumed && resumed->run.params.count("init_model") != 0) {
    const std::string& recorded = resumed->run.params.at("init_model");
    auto at = recorded.rfind(" sha256:");
    std::string sha256 = at == std::string::npos ? "" : recorded.substr(at + 8);
    if (!sha256.empty() && registry.artifacts().contains(sha256)) {
      SLIPWAY_ASSIGN_OR_RETURN(auto bundle, model::Bundle::load(registry.artifacts().path_for(sha256), sha256));
      return LoadedReference{bundle, recorded.substr(0, at), sha256};
    }
  }
  return loaded;
}

// The step cache's key of a training run: everything the bundle's bytes depend on (train::fit
// is deterministic given the table, the request and the thread count), and nothing else: not the
// data's path, the experiment, where the bundle is written or what it is registered as.
std::string training_cache_key(const TrainSpec& spec, const std::map<std::string, std::string>& params,
                               const PreparedData& prepared, const std::optional<LoadedReference>& init_model) {
  std::string inputs;
  auto add = [&inputs](std::string_view name, std::string_view value) {
    inputs += name;
    inputs += '=';
    inputs += std::to_string(value.size());  // length-prefixed: no value can pass for two
    inputs += ':';
    inputs += value;
    inputs += '\n';
  };
  add("code", slipway_code_version());
  add("data", prepared.fingerprint);
  add("split", prepared.split_description);
  add("target", spec.target);
  add("model", spec.model);
  add("seed", std::to_string(spec.seed));
  for (const auto& [key, value] : params) add("param." + key, value);
  for (const auto& column : prepared.excluded_columns) add("excluded", column);
  add("weight", spec.weight_column);
  add("init", init_model ? init_model->sha256 : "");
  add("threads", std::to_string(spec.threads > 0 ? spec.threads : default_thread_count()));
  add("threshold", spec.threshold);
  if (threshold_needs_rows(spec)) add("threshold_fraction", fmt::format("{}", spec.threshold_fraction));
  // bf16 products on AMX and on AVX-512 BF16 differ in their last bits (slipway/kernels.h); fp32
  // and int8 give the same bits on every variant.
  if (auto precision = params.find("precision"); precision != params.end() && precision->second == "bfloat16") {
    add("dense_kernel", kernels::dense_kernel().name);
  }
  return sha256_hex(inputs);
}

// The earlier run the cache holds for `key`, with its bundle, if both are still there.
struct CachedRun {
  registry::RunRecord run;
  std::shared_ptr<const model::Bundle> bundle;
  train::TrainSummary summary;
};

Result<std::optional<CachedRun>> find_cached_run(registry::Registry& registry, const std::string& key) {
  SLIPWAY_ASSIGN_OR_RETURN(auto cached, registry.runs().cached_step("train", key));
  if (!cached) return std::optional<CachedRun>();
  auto run = registry.runs().get(cached->run_id);
  // A run deleted, or a bundle collected since, is a miss: training again is always correct.
  if (!run.ok() || run->status != "FINISHED" || run->bundle_sha256.empty() ||
      run->code_version != slipway_code_version() || !registry.artifacts().contains(run->bundle_sha256)) {
    return std::optional<CachedRun>();
  }
  auto bundle = model::Bundle::load(registry.artifacts().path_for(run->bundle_sha256), run->bundle_sha256);
  CachedRun found;
  if (!bundle.ok() || !read_summary_record(cached->result, found.summary).ok()) {
    log_warn("the step cache's entry for run " + run->run_id + " does not load; training again");
    return std::optional<CachedRun>();
  }
  found.run = std::move(run).value();
  found.bundle = std::move(bundle).value();
  found.summary.bundle = found.bundle;
  return std::optional<CachedRun>(std::move(found));
}

// Step 2 from the cache: a FINISHED run with the earlier run's bundle and metrics, the held-out
// rows evaluated again (for this spec's slice).
Status reuse_cached_run(registry::Registry& registry, const TrainSpec& spec, registry::NewRun new_run,
                        PreparedData& prepared, CachedRun cached, TrainOutcome& outcome) {
  SLIPWAY_ASSIGN_OR_RETURN(outcome.evaluation, eval::evaluate(*cached.bundle, prepared.test, spec.slice));
  new_run.params["cached_from"] = cached.run.run_id;
  SLIPWAY_ASSIGN_OR_RETURN(outcome.run_id, registry.runs().start(new_run));
  std::vector<std::pair<std::string, double>> metrics;
  for (const auto& metric : cached.run.metrics) metrics.emplace_back(metric.key, metric.value);
  Status logged = registry.runs().log_metrics(outcome.run_id, metrics);
  if (!logged.ok()) {
    (void)registry.runs().finish(outcome.run_id, false, "");
    return logged;
  }
  SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(outcome.run_id, true, cached.run.bundle_sha256));
  if (!spec.bundle_out.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto bytes, read_file(registry.artifacts().path_for(cached.run.bundle_sha256)));
    SLIPWAY_RETURN_IF_ERROR(write_file_atomic(spec.bundle_out, bytes));
  }
  log_info("reused run " + cached.run.run_id + ": the same data, code, spec and seed (--no-cache trains again)");
  outcome.summary = std::move(cached.summary);
  outcome.bundle_sha256 = cached.run.bundle_sha256;
  outcome.cached_from = cached.run.run_id;
  return {};
}

// What the fitted bundle promises at serving beyond its model: the decision threshold (the spec's
// number, or its rule applied to the held-out threshold rows) and the --ignore columns a request
// may carry unused. Replaces summary.bundle.
Status settle_serving_contract(const TrainSpec& spec, const PreparedData& prepared, train::TrainSummary& summary) {
  model::Manifest manifest = summary.bundle->manifest();
  manifest.unused_inputs = spec.ignore;
  if (!spec.threshold.empty()) {
    if (manifest.task != model::Task::kBinaryClassification) {
      return invalid_argument("--threshold applies to binary classification; '" + spec.target + "' is not binary");
    }
    std::vector<float> scores;
    std::vector<double> labels;
    if (threshold_needs_rows(spec)) {
      const data::Column& target = prepared.threshold_rows.column(*prepared.threshold_rows.column_index(spec.target));
      SLIPWAY_ASSIGN_OR_RETURN(auto predictions, summary.bundle->predict(prepared.threshold_rows));
      for (std::size_t row = 0; row < target.size(); ++row) {
        if (target.is_missing(row)) continue;
        scores.push_back(predictions.scores[row]);
        labels.push_back(target.text_at(row) == manifest.class_labels[1] ? 1.0 : 0.0);
      }
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto choice, eval::choose_threshold(scores, labels, spec.threshold));
    manifest.decision_threshold = choice.threshold;
    manifest.threshold_rule = choice.rule;
    if (!choice.rule.empty()) {
      log_info(
          fmt::format("decision threshold {:.6g}: {} on {} held-out training rows (precision {:.4f}, "
                      "recall {:.4f} there)",
                      choice.threshold, choice.rule, choice.rows, choice.precision, choice.recall));
    }
  }
  summary.bundle = summary.bundle->with_manifest(std::move(manifest));
  return {};
}

// Fits, evaluates and stores the bundle of a started run; the caller marks the run FAILED on error.
Status fit_and_store(registry::Registry& registry, const TrainSpec& spec,
                     const std::map<std::string, std::string>& params, PreparedData& prepared,
                     const std::optional<LoadedReference>& init_model,
                     const std::shared_ptr<const model::Bundle>& checkpoint, const TrainCallbacks& callbacks,
                     TrainOutcome& outcome) {
  const std::string& run_id = outcome.run_id;
  train::TrainRequest request;
  request.target = spec.target;
  request.model_family = spec.model;
  request.excluded_columns = prepared.excluded_columns;
  request.params = params;
  request.seed = spec.seed;
  request.thread_count = spec.threads;
  request.data_fingerprint = prepared.fingerprint;
  request.split_description = prepared.split_description;
  request.weight_column = spec.weight_column;
  if (init_model) {
    request.init_model = init_model->bundle;
    request.init_model_reference = init_model->description + " sha256:" + init_model->sha256;
  }
  request.resume_from = checkpoint;
  request.checkpoint_every = spec.checkpoint_every;
  if (spec.checkpoint_every > 0) {
    request.on_checkpoint = [&](const model::Bundle& bundle, int rounds_done) -> Status {
      SLIPWAY_ASSIGN_OR_RETURN(std::string sha256, registry.artifacts().put(bundle.serialize()));
      SLIPWAY_RETURN_IF_ERROR(registry.runs().record_checkpoint(run_id, rounds_done, sha256));
      crash_point("train.after_checkpoint");
      return {};
    };
  }
  request.on_round = callbacks.on_round;
  request.stop = callbacks.cancel;
  std::int64_t started = monotonic_ns();
  auto summary = train::fit(prepared.train, request);
  if (callbacks.on_fit_done) callbacks.on_fit_done();
  SLIPWAY_RETURN_IF_ERROR(summary.status());
  if (callbacks.cancel != nullptr && callbacks.cancel->load()) {
    // linear and logistic stop with the weights so far: a model nobody asked for is not stored.
    return failed_precondition("training was stopped after " + std::to_string(summary->iterations) + " iterations");
  }
  outcome.summary = std::move(*summary);
  const train::TrainSummary& fitted = outcome.summary;
  outcome.train_seconds = static_cast<double>(monotonic_ns() - started) * 1e-9;
  log_info(fmt::format("trained {} on {} rows, {} features in {:.2f} s ({} {}{})", spec.model, fitted.rows_used,
                       fitted.bundle->preprocessor().output_width(), outcome.train_seconds, fitted.iterations,
                       spec.model == "gbdt"  ? "rounds"
                       : spec.model == "mlp" ? "epochs"
                                             : "iterations",
                       fitted.converged ? "" : ", not converged"));
  if (fitted.stopped_early) {
    const char* unit = spec.model == "mlp" ? "epoch" : "round";
    log_info(fmt::format("early stopping: validation {} was best at {} {}; kept {}", fitted.round_metric, unit,
                         fitted.best_round + 1,
                         spec.model == "mlp" ? "its weights" : fmt::format("{} rounds", fitted.iterations)));
  }
  if (!fitted.history.empty()) {
    std::vector<registry::MetricRecord> records;
    for (const auto& record : fitted.history) {
      records.push_back({"train_" + fitted.round_metric, record.train, record.round + 1, 0});
      if (!std::isnan(record.validation)) {
        records.push_back({"validation_" + fitted.round_metric, record.validation, record.round + 1, 0});
      }
    }
    SLIPWAY_RETURN_IF_ERROR(registry.runs().log_metric_steps(run_id, records));
  }

  SLIPWAY_RETURN_IF_ERROR(settle_serving_contract(spec, prepared, outcome.summary));
  SLIPWAY_ASSIGN_OR_RETURN(outcome.evaluation, eval::evaluate(*fitted.bundle, prepared.test, spec.slice));
  const eval::Evaluation& evaluation = outcome.evaluation;
  if (fitted.rows_dropped_missing_target + evaluation.rows_missing_target > 0) {
    log_warn(fmt::format("dropped {} train rows and {} test rows whose target '{}' is empty",
                         fitted.rows_dropped_missing_target, evaluation.rows_missing_target, spec.target));
  }
  const std::map<std::string, double> test_metrics = test_metrics_of(evaluation);
  SLIPWAY_ASSIGN_OR_RETURN(auto bundle, with_training_record(*fitted.bundle, test_metrics, prepared.train));
  std::vector<std::byte> bytes = bundle->serialize();
  SLIPWAY_ASSIGN_OR_RETURN(outcome.bundle_sha256, registry.artifacts().put(bytes));
  if (!spec.bundle_out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(spec.bundle_out, bytes));
  std::vector<std::pair<std::string, double>> logged(test_metrics.begin(), test_metrics.end());
  logged.emplace_back("train_rows", static_cast<double>(fitted.rows_used));
  logged.emplace_back("test_rows", static_cast<double>(evaluation.rows));
  logged.emplace_back("iterations", fitted.iterations);
  if (fitted.best_round >= 0) logged.emplace_back("best_round", fitted.best_round + 1);
  if (!spec.threshold.empty()) logged.emplace_back("decision_threshold", bundle->manifest().decision_threshold);
  return registry.runs().log_metrics(run_id, logged);
}

}  // namespace

std::map<std::string, double> test_metrics_of(const eval::Evaluation& evaluation) {
  std::map<std::string, double> test_metrics;
  for (const auto& [name, value] : evaluation.overall.values) test_metrics["test_" + name] = value;
  return test_metrics;
}

Result<std::shared_ptr<const model::Bundle>> with_training_record(const model::Bundle& bundle,
                                                                  const std::map<std::string, double>& test_metrics,
                                                                  const data::Table& train) {
  // The training distribution travels with the bundle: what `slipway monitor` measures skew against.
  SLIPWAY_ASSIGN_OR_RETURN(model::DataProfile profile, training_profile(bundle, train));
  return bundle.with_metrics(test_metrics)->with_profile(std::move(profile));
}

Result<TrainingRows> training_rows(const TrainSpec& spec) {
  SLIPWAY_ASSIGN_OR_RETURN(PreparedData prepared, prepare_data(spec));
  return TrainingRows{std::move(prepared.train), std::move(prepared.test)};
}

Result<model::DataProfile> training_profile(const model::Bundle& bundle, const data::Table& rows) {
  std::vector<std::string> inputs;
  for (const auto& feature : bundle.preprocessor().features()) inputs.push_back(feature.name);
  SLIPWAY_ASSIGN_OR_RETURN(auto predictions, bundle.predict(rows));
  std::vector<float> first_scores(predictions.rows);
  for (std::size_t row = 0; row < predictions.rows; ++row) {
    first_scores[row] = predictions.scores[row * predictions.columns];
  }
  model::DataProfile profile = model::profile_of(rows, inputs, first_scores);
  profile.attribution_shares = model::attribution_shares(bundle, rows);
  return profile;
}

Status check_train_spec(const TrainSpec& spec) {
  if (spec.data.empty()) return invalid_argument("--data is required (or 'data:' in the spec)");
  if (spec.target.empty()) return invalid_argument("--target is required (or 'target:' in the spec)");
  if (spec.threads < 0 || spec.threads > 1024) {
    return invalid_argument("threads must be from 0 (every core) to 1024, not " + std::to_string(spec.threads));
  }
  if (spec.checkpoint_every < 0) return invalid_argument("checkpoint_every must be 0 (none) or a number of steps");
  SLIPWAY_ASSIGN_OR_RETURN(auto params, parse_key_values(spec.params));
  SLIPWAY_RETURN_IF_ERROR(train::resolve_parameters(spec.model, params).status());
  if (!spec.register_as.empty()) SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(spec.register_as));
  SLIPWAY_RETURN_IF_ERROR(registry::validate_experiment_name(spec.experiment));
  if (spec.model != "gbdt" && spec.model != "mlp" && (spec.checkpoint_every > 0 || !spec.init_model.empty())) {
    return invalid_argument("--checkpoint-every and --init-model apply to --model gbdt and mlp");
  }
  if (!spec.threshold.empty()) SLIPWAY_RETURN_IF_ERROR(eval::check_threshold_rule(spec.threshold));
  if (!(spec.threshold_fraction > 0.0 && spec.threshold_fraction < 1.0)) {
    return invalid_argument(fmt::format("threshold_fraction must be in (0, 1), not {}", spec.threshold_fraction));
  }
  if (!spec.run_id.empty() && !spec.resume_run.empty()) {
    return invalid_argument("a resumed run keeps its id: give the run to resume or a new run's id, not both");
  }
  return {};
}

Result<TrainOutcome> run_training(registry::Registry& registry, TrainSpec spec, const TrainCallbacks& callbacks) {
  // 1. Check everything that can be checked before a run exists.
  std::optional<Resumption> resumed;
  if (!spec.resume_run.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto resumption, prepare_resumption(registry, spec));
    resumed = std::move(resumption);
  }
  SLIPWAY_RETURN_IF_ERROR(check_train_spec(spec));
  SLIPWAY_ASSIGN_OR_RETURN(auto params, parse_key_values(spec.params));
  std::optional<LoadedReference> init_model;
  if (!spec.init_model.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto loaded, resolve_init_model(registry, spec.init_model, resumed));
    init_model = std::move(loaded);
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto prepared, prepare_data(spec));
  if (!spec.weight_column.empty()) prepared.excluded_columns.push_back(spec.weight_column);

  // 2. The run: started (or reopened), fitted, evaluated, stored, finished; or from the cache.
  TrainOutcome outcome;
  // A build that does not know its code cannot tell its bundles from another build's: no cache.
  bool cacheable = !resumed && slipway_code_version() != "unknown";
  std::string cache_key = cacheable ? training_cache_key(spec, params, prepared, init_model) : "";
  std::optional<CachedRun> cached;
  if (spec.use_cache && !cache_key.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(cached, find_cached_run(registry, cache_key));
  }
  if (resumed) {
    if (resumed->run.data_fingerprint != prepared.fingerprint) {
      return failed_precondition("the data of run " + resumed->run.run_id +
                                 " changed since it started (its fingerprint differs); train it again instead");
    }
    SLIPWAY_RETURN_IF_ERROR(registry.runs().reopen(resumed->run.run_id));
    outcome.run_id = resumed->run.run_id;
  } else {
    registry::NewRun new_run;
    new_run.run_id = spec.run_id;
    new_run.experiment = spec.experiment;
    new_run.code_version = std::string(slipway_code_version());
    new_run.data_fingerprint = prepared.fingerprint;
    new_run.spec = spec_yaml(spec);
    new_run.params = params;
    new_run.params["model"] = spec.model;
    new_run.params["split"] = prepared.split_description;
    if (!spec.threshold.empty()) new_run.params["threshold"] = spec.threshold;
    if (init_model) new_run.params["init_model"] = init_model->description + " sha256:" + init_model->sha256;
    if (cached) {
      SLIPWAY_RETURN_IF_ERROR(
          reuse_cached_run(registry, spec, std::move(new_run), prepared, std::move(*cached), outcome));
    } else {
      SLIPWAY_ASSIGN_OR_RETURN(outcome.run_id, registry.runs().start(new_run));
      log_info("run " + outcome.run_id + " started");
    }
  }
  if (callbacks.on_run_started) callbacks.on_run_started(outcome.run_id);
  if (outcome.cached_from.empty()) {
    if (auto status = fit_and_store(registry, spec, params, prepared, init_model,
                                    resumed ? resumed->checkpoint : nullptr, callbacks, outcome);
        !status.ok()) {
      if (callbacks.cancel != nullptr && callbacks.cancel->load()) {
        auto run = registry.runs().get(outcome.run_id);
        Status marked =
            run.ok() ? registry.runs().mark_interrupted(outcome.run_id, run->owner, "cancelled") : run.status();
        if (marked.ok()) {
          return failed_precondition("run " + outcome.run_id + " was cancelled and marked INTERRUPTED (" +
                                     status.message() + ")");
        }
        log_warn("run " + outcome.run_id + " was cancelled but cannot be marked INTERRUPTED: " + marked.message());
      }
      (void)registry.runs().finish(outcome.run_id, false, "");
      return status;
    }
    SLIPWAY_RETURN_IF_ERROR(registry.runs().finish(outcome.run_id, true, outcome.bundle_sha256));
    if (!cache_key.empty()) {
      // Best effort: a run that cannot be cached has still succeeded.
      Status recorded =
          registry.runs().record_cached_step({"train", cache_key, outcome.run_id, summary_record(outcome.summary), 0});
      if (!recorded.ok()) log_warn("run " + outcome.run_id + " is not in the step cache: " + recorded.message());
    }
  }

  // 3. Registration.
  if (!spec.register_as.empty()) {
    crash_point("train.before_register");
    SLIPWAY_ASSIGN_OR_RETURN(
        auto version, registry.models().register_version(spec.register_as, outcome.bundle_sha256, outcome.run_id));
    outcome.registered = std::move(version);
  }
  outcome.split_description = prepared.split_description;
  outcome.leakage = prepared.leakage;
  outcome.held_out = std::move(prepared.test);
  outcome.spec = std::move(spec);
  return outcome;
}

std::string mark_run_interrupted(registry::Registry& registry, const std::string& run_id,
                                 const std::string& signal_name) {
  auto run = registry.runs().get(run_id);
  if (!run.ok()) return "run " + run_id + " left RUNNING: " + run.status().message();
  if (run->status != "RUNNING") return "run " + run_id + " already ended";
  Status marked = registry.runs().mark_interrupted(run_id, run->owner, "interrupted by " + signal_name);
  if (!marked.ok()) return "run " + run_id + " left RUNNING: " + marked.message();
  auto checkpoint = registry.runs().latest_checkpoint(run_id);
  bool resumable = checkpoint.ok() && checkpoint->has_value();
  return "run " + run_id + " marked INTERRUPTED; " +
         (resumable ? "'slipway train --resume " + run_id + "' continues from its last checkpoint"
                    : std::string("it had no checkpoint yet (--checkpoint-every N keeps one)"));
}

}  // namespace slipway::pipeline
