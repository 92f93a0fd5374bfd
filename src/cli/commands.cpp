#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/data.h"
#include "slipway/eval.h"
#include "slipway/model.h"
#include "slipway/registry.h"
#include "slipway/serve.h"
#include "slipway/train.h"

namespace slipway::cli {

Result<std::unique_ptr<registry::Registry>> open_workspace(const GlobalOptions& global, WorkspaceAccess access) {
  return registry::Registry::open(
      global.home, {.create = access == WorkspaceAccess::kCreate, .read_only = access == WorkspaceAccess::kReadOnly});
}

namespace {

struct LoadedModel {
  std::shared_ptr<const model::Bundle> bundle;
  std::string description;  // "name@version" or the file path
  std::string sha256;
};

// A REF is NAME@VERSION, NAME@ALIAS, NAME (latest) or a path to a bundle file.
Result<LoadedModel> load_reference(const GlobalOptions& global, const std::string& reference) {
  std::error_code error;
  bool looks_like_path = reference.find('/') != std::string::npos || reference.ends_with(".slip");
  if (looks_like_path || std::filesystem::is_regular_file(reference, error)) {
    if (!std::filesystem::is_regular_file(reference, error)) return not_found("no bundle file at '" + reference + "'");
    // One read: the identity is hashed from the same mapping the bundle is parsed from.
    SLIPWAY_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(reference));
    std::string sha256 = sha256_hex(mapped.bytes());
    auto bundle = model::Bundle::parse(mapped.bytes(), sha256);
    if (!bundle.ok()) return Status(bundle.status().code(), reference + ": " + bundle.status().message());
    return LoadedModel{*bundle, reference, sha256};
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  SLIPWAY_ASSIGN_OR_RETURN(auto version, store->models().resolve(parsed.first, parsed.second));
  SLIPWAY_ASSIGN_OR_RETURN(
      auto bundle, model::Bundle::load(store->artifacts().path_for(version.bundle_sha256), version.bundle_sha256));
  return LoadedModel{bundle, version.model + "@" + std::to_string(version.version), version.bundle_sha256};
}

Result<data::Table> read_table(const std::string& path) {
  std::int64_t started = monotonic_ns();
  SLIPWAY_ASSIGN_OR_RETURN(auto table, data::read_csv(path));
  log_info(fmt::format("read {}: {} rows x {} columns in {:.2f} s", path, table.row_count(), table.column_count(),
                       static_cast<double>(monotonic_ns() - started) * 1e-9));
  return table;
}

// "registered": {"model": NAME, "version": N}, when a version was registered.
void write_registered_json(JsonWriter& json, const std::optional<registry::ModelVersion>& registered) {
  if (!registered) return;
  json.key("registered").begin_object().key("model").value(registered->model);
  json.key("version").value(registered->version).end_object();
}

void write_metrics_json(JsonWriter& json, const eval::Metrics& metrics) {
  json.begin_object();
  for (const auto& [name, value] : metrics.values) json.key(name).value(value);
  json.end_object();
}

void write_evaluation_json(JsonWriter& json, const eval::Evaluation& evaluation) {
  json.begin_object();
  json.key("rows").value(static_cast<std::uint64_t>(evaluation.rows));
  json.key("rows_missing_target").value(static_cast<std::uint64_t>(evaluation.rows_missing_target));
  json.key("overall");
  write_metrics_json(json, evaluation.overall);
  if (!evaluation.slice_column.empty()) {
    json.key("slice_column").value(evaluation.slice_column);
    json.key("slices").begin_array();
    for (const auto& slice : evaluation.slices) {
      json.begin_object().key("value").value(slice.value).key("rows").value(static_cast<std::uint64_t>(slice.rows));
      json.key("metrics");
      write_metrics_json(json, slice.metrics);
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
}

void print_evaluation(const eval::Evaluation& evaluation) {
  std::vector<std::string> headers = {"slice", "rows"};
  for (const auto& entry : evaluation.overall.values) headers.push_back(entry.first);
  auto row_of = [](const std::string& name, std::size_t rows, const eval::Metrics& metrics) {
    std::vector<std::string> row = {name, std::to_string(rows)};
    for (const auto& entry : metrics.values) row.push_back(format_metric(entry.second));
    return row;
  };
  std::vector<std::vector<std::string>> rows = {row_of("(all)", evaluation.rows, evaluation.overall)};
  for (const auto& slice : evaluation.slices) {
    rows.push_back(row_of(evaluation.slice_column + "=" + slice.value, slice.rows, slice.metrics));
  }
  print_table(headers, rows);
}

// Overlays the flags given on the command line on options read from a spec.
void overlay(TrainOptions& base, const TrainOptions& flags, const std::vector<std::string>& given) {
  auto was_given = [&](const char* name) { return std::find(given.begin(), given.end(), name) != given.end(); };
  if (was_given("data")) base.data = flags.data;
  if (was_given("test")) base.test_data = flags.test_data;
  if (was_given("target")) base.target = flags.target;
  if (was_given("model")) base.model = flags.model;
  if (was_given("split")) base.split = flags.split;
  if (was_given("test-fraction")) base.test_fraction = flags.test_fraction;
  if (was_given("slice")) base.slice = flags.slice;
  if (was_given("seed")) base.seed = flags.seed;
  if (was_given("register")) base.register_as = flags.register_as;
  if (was_given("experiment")) base.experiment = flags.experiment;
  if (was_given("threads")) base.threads = flags.threads;
  if (was_given("out")) base.bundle_out = flags.bundle_out;
  if (was_given("weight")) base.weight_column = flags.weight_column;
  if (was_given("init-model")) base.init_model = flags.init_model;
  if (was_given("checkpoint-every")) base.checkpoint_every = flags.checkpoint_every;
  base.params.insert(base.params.end(), flags.params.begin(), flags.params.end());
  base.ignore.insert(base.ignore.end(), flags.ignore.begin(), flags.ignore.end());
}

struct PreparedData {
  data::Table train;
  data::Table test;
  data::LeakageReport leakage;
  std::string split_description;
  std::string fingerprint;
  std::vector<std::string> excluded_columns;
};

Result<PreparedData> prepare_data(const TrainOptions& options) {
  PreparedData prepared;
  SLIPWAY_ASSIGN_OR_RETURN(auto table, read_table(options.data));
  SLIPWAY_RETURN_IF_ERROR(table.column_index(options.target).status());
  if (!options.slice.empty()) SLIPWAY_RETURN_IF_ERROR(table.column_index(options.slice).status());
  for (const auto& column : options.ignore) SLIPWAY_RETURN_IF_ERROR(table.column_index(column).status());
  prepared.excluded_columns = options.ignore;
  if (!options.test_data.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(prepared.test, read_table(options.test_data));
    prepared.fingerprint = sha256_hex(data::fingerprint(table) + data::fingerprint(prepared.test));
    prepared.split_description = "test file " + options.test_data;
    prepared.train = std::move(table);
    return prepared;
  }
  SLIPWAY_ASSIGN_OR_RETURN(data::SplitSpec split, data::parse_split_kind(options.split));
  split.test_fraction = options.test_fraction;
  split.seed = options.seed;
  // The time or group key identifies rows rather than describing them: not a feature.
  if (!split.column.empty()) prepared.excluded_columns.push_back(split.column);
  SLIPWAY_ASSIGN_OR_RETURN(data::Split rows, data::split_rows(table, split, options.target));
  prepared.leakage = data::check_leakage(table, rows, split);
  prepared.split_description =
      fmt::format("{} test_fraction={} seed={}", data::describe_split(split), split.test_fraction, split.seed);
  prepared.fingerprint = data::fingerprint(table);
  prepared.train = table.take_rows(rows.train_rows);
  prepared.test = table.take_rows(rows.test_rows);
  return prepared;
}

}  // namespace

int run_init(const GlobalOptions& global) {
  auto store = open_workspace(global, WorkspaceAccess::kCreate);
  if (!store.ok()) return fail(store.status());
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("home").value(std::filesystem::absolute(global.home).string()).end_object();
    print_json(json);
  } else {
    std::cout << "Initialized a Slipway workspace in " << std::filesystem::absolute(global.home).string() << "\n";
  }
  return 0;
}

int run_train(const GlobalOptions& global, TrainOptions flags, const std::vector<std::string>& flags_given) {
  auto given = [&](const char* name) { return std::find(flags_given.begin(), flags_given.end(), name) != flags_given.end(); };
  if (given("register") && flags.register_as.empty()) return fail(invalid_argument("--register needs a model name"));
  if (given("out") && flags.bundle_out.empty()) return fail(invalid_argument("--out needs a file path"));
  if (given("experiment")) {
    if (auto valid = registry::validate_experiment_name(flags.experiment); !valid.ok()) return fail(valid);
  }
  auto store = open_workspace(global, WorkspaceAccess::kCreate);
  if (!store.ok()) return fail(store.status());
  TrainOptions options;
  std::optional<registry::RunRecord> resumed_run;
  std::shared_ptr<const model::Bundle> checkpoint;
  if (!flags.resume_run.empty()) {
    // A resume replays the run's stored spec exactly; only where it runs may change.
    auto run = (*store)->runs().get(flags.resume_run);
    if (!run.ok()) return fail(run.status());
    if (run->status == "FINISHED") {
      return fail(failed_precondition("run " + run->run_id + " has finished; there is nothing to resume"));
    }
    if (auto status = load_spec_text(run->spec, "the spec of run " + run->run_id, options); !status.ok()) {
      return fail(status);
    }
    options.threads = flags.threads;
    options.bundle_out = flags.bundle_out;
    options.progress = flags.progress;
    auto latest = (*store)->runs().latest_checkpoint(run->run_id);
    if (!latest.ok()) return fail(latest.status());
    if (!latest->has_value()) {
      return fail(failed_precondition("run " + run->run_id +
                                      " saved no checkpoint (train with --checkpoint-every N); train it again instead"));
    }
    auto bundle = model::Bundle::load((*store)->artifacts().path_for((*latest)->bundle_sha256), (*latest)->bundle_sha256);
    if (!bundle.ok()) return fail(bundle.status());
    checkpoint = *bundle;
    log_info(fmt::format("resuming run {} from its checkpoint after {} rounds", run->run_id, (*latest)->step));
    resumed_run = std::move(*run);
  } else if (!flags.spec_path.empty()) {
    if (auto status = load_spec(flags.spec_path, options); !status.ok()) return fail(status);
    overlay(options, flags, flags_given);
  } else {
    options = std::move(flags);
  }
  if (options.data.empty()) return fail(invalid_argument("--data is required (or 'data:' in the spec)"));
  if (options.target.empty()) return fail(invalid_argument("--target is required (or 'target:' in the spec)"));
  auto params = parse_key_values(options.params);
  if (!params.ok()) return fail(params.status());
  if (auto resolved = train::resolve_parameters(options.model, *params); !resolved.ok()) return fail(resolved.status());
  if (!options.register_as.empty()) {
    if (auto status = registry::validate_model_name(options.register_as); !status.ok()) return fail(status);
  }
  if (options.model != "gbdt" && (options.checkpoint_every > 0 || !options.init_model.empty())) {
    return fail(invalid_argument("--checkpoint-every and --init-model apply to --model gbdt"));
  }
  std::optional<LoadedModel> init_model;
  if (!options.init_model.empty()) {
    auto loaded = load_reference(global, options.init_model);
    if (resumed_run && resumed_run->params.count("init_model") != 0) {
      // A resume continues from the very bundle the run started from, even if the reference
      // (an alias, say) has moved since. A bundle file outside the store is read again by path.
      const std::string& recorded = resumed_run->params.at("init_model");
      auto at = recorded.rfind(" sha256:");
      std::string sha256 = at == std::string::npos ? "" : recorded.substr(at + 8);
      if (!sha256.empty() && (*store)->artifacts().contains(sha256)) {
        auto bundle = model::Bundle::load((*store)->artifacts().path_for(sha256), sha256);
        if (!bundle.ok()) return fail(bundle.status());
        loaded = LoadedModel{*bundle, recorded.substr(0, at), sha256};
      }
    }
    if (!loaded.ok()) return fail(loaded.status());
    init_model = std::move(*loaded);
  }

  auto prepared = prepare_data(options);
  if (!prepared.ok()) return fail(prepared.status());
  if (!options.weight_column.empty()) prepared->excluded_columns.push_back(options.weight_column);

  std::string run_id;
  if (resumed_run) {
    if (resumed_run->data_fingerprint != prepared->fingerprint) {
      return fail(failed_precondition("the data of run " + resumed_run->run_id +
                                      " changed since it started (its fingerprint differs); train it again instead"));
    }
    if (auto status = (*store)->runs().reopen(resumed_run->run_id); !status.ok()) return fail(status);
    run_id = resumed_run->run_id;
  } else {
    registry::NewRun new_run;
    new_run.experiment = options.experiment;
    new_run.code_version = std::string(slipway_code_version());
    new_run.data_fingerprint = prepared->fingerprint;
    new_run.spec = spec_yaml(options);
    new_run.params = *params;
    new_run.params["model"] = options.model;
    new_run.params["split"] = prepared->split_description;
    if (init_model) new_run.params["init_model"] = init_model->description + " sha256:" + init_model->sha256;
    auto started_run = (*store)->runs().start(new_run);
    if (!started_run.ok()) return fail(started_run.status());
    run_id = *started_run;
    log_info("run " + run_id + " started");
  }

  auto failed = [&](const Status& status) {
    (void)(*store)->runs().finish(run_id, false, "");
    return fail(status);
  };

  train::TrainRequest request;
  request.target = options.target;
  request.model_family = options.model;
  request.excluded_columns = prepared->excluded_columns;
  request.params = *params;
  request.seed = options.seed;
  request.thread_count = options.threads;
  request.data_fingerprint = prepared->fingerprint;
  request.split_description = prepared->split_description;
  request.weight_column = options.weight_column;
  if (init_model) {
    request.init_model = init_model->bundle;
    request.init_model_reference = init_model->description + " sha256:" + init_model->sha256;
  }
  request.resume_from = checkpoint;
  request.checkpoint_every = options.checkpoint_every;
  if (options.checkpoint_every > 0) {
    request.on_checkpoint = [&](const model::Bundle& bundle, int rounds_done) -> Status {
      SLIPWAY_ASSIGN_OR_RETURN(std::string sha256, (*store)->artifacts().put(bundle.serialize()));
      SLIPWAY_RETURN_IF_ERROR((*store)->runs().record_checkpoint(run_id, rounds_done, sha256));
      crash_point("train.after_checkpoint");
      return {};
    };
  }
  ProgressBar progress("train", 0, options.progress && !global.json);
  request.on_round = [&](const train::RoundMetrics& latest, int total) {
    progress.set_total(total);
    std::string detail = fmt::format("train {}", format_metric(latest.train));
    if (!std::isnan(latest.validation)) detail += fmt::format(" valid {}", format_metric(latest.validation));
    progress.update(latest.round + 1, detail);
  };
  std::int64_t started = monotonic_ns();
  auto summary = train::fit(prepared->train, request);
  progress.finish();
  if (!summary.ok()) return failed(summary.status());
  double train_seconds = static_cast<double>(monotonic_ns() - started) * 1e-9;
  log_info(fmt::format("trained {} on {} rows, {} features in {:.2f} s ({} {}{})", options.model, summary->rows_used,
                       summary->bundle->preprocessor().output_width(), train_seconds, summary->iterations,
                       options.model == "gbdt" ? "rounds" : "iterations",
                       summary->converged ? "" : ", not converged"));
  if (summary->stopped_early) {
    log_info(fmt::format("early stopping: validation {} was best at round {}; kept {} rounds", summary->round_metric,
                         summary->best_round + 1, summary->iterations));
  }
  if (!summary->history.empty()) {
    std::vector<registry::MetricRecord> records;
    for (const auto& record : summary->history) {
      records.push_back({"train_" + summary->round_metric, record.train, record.round + 1, 0});
      if (!std::isnan(record.validation)) {
        records.push_back({"validation_" + summary->round_metric, record.validation, record.round + 1, 0});
      }
    }
    if (auto status = (*store)->runs().log_metric_steps(run_id, records); !status.ok()) return failed(status);
  }

  auto evaluation = eval::evaluate(*summary->bundle, prepared->test, options.slice);
  if (!evaluation.ok()) return failed(evaluation.status());
  if (summary->rows_dropped_missing_target + evaluation->rows_missing_target > 0) {
    log_warn(fmt::format("dropped {} train rows and {} test rows whose target '{}' is empty",
                         summary->rows_dropped_missing_target, evaluation->rows_missing_target, options.target));
  }
  std::map<std::string, double> test_metrics;
  for (const auto& [name, value] : evaluation->overall.values) test_metrics["test_" + name] = value;
  auto bundle = summary->bundle->with_metrics(test_metrics);
  std::vector<std::byte> bytes = bundle->serialize();
  auto sha256 = (*store)->artifacts().put(bytes);
  if (!sha256.ok()) return failed(sha256.status());
  if (!options.bundle_out.empty()) {
    if (auto status = write_file_atomic(options.bundle_out, bytes); !status.ok()) return failed(status);
  }
  std::vector<std::pair<std::string, double>> logged(test_metrics.begin(), test_metrics.end());
  logged.emplace_back("train_rows", static_cast<double>(summary->rows_used));
  logged.emplace_back("test_rows", static_cast<double>(evaluation->rows));
  logged.emplace_back("iterations", summary->iterations);
  if (summary->best_round >= 0) logged.emplace_back("best_round", summary->best_round + 1);
  if (auto status = (*store)->runs().log_metrics(run_id, logged); !status.ok()) return failed(status);
  if (auto status = (*store)->runs().finish(run_id, true, *sha256); !status.ok()) return fail(status);

  std::optional<registry::ModelVersion> registered;
  if (!options.register_as.empty()) {
    crash_point("train.before_register");
    auto version = (*store)->models().register_version(options.register_as, *sha256, run_id);
    if (!version.ok()) return fail(version.status());
    registered = *version;
  }

  const auto& leakage = prepared->leakage;
  if (global.json) {
    JsonWriter json;
    json.begin_object();
    json.key("run_id").value(run_id);
    json.key("model").value(options.model);
    if (options.model == "gbdt") {
      json.key("rounds").value(summary->iterations);
      json.key("best_round").value(summary->best_round >= 0 ? summary->best_round + 1 : 0);
      json.key("stopped_early").value(summary->stopped_early);
      json.key("validation_rows").value(static_cast<std::uint64_t>(summary->validation_rows));
    }
    json.key("split").value(prepared->split_description);
    json.key("train_rows").value(static_cast<std::uint64_t>(summary->rows_used));
    json.key("test_rows").value(static_cast<std::uint64_t>(evaluation->rows));
    json.key("train_seconds").value(train_seconds);
    json.key("leakage").begin_object();
    json.key("duplicate_test_rows").value(static_cast<std::uint64_t>(leakage.duplicate_test_rows));
    json.key("groups_on_both_sides").value(static_cast<std::uint64_t>(leakage.groups_on_both_sides));
    json.key("test_rows_not_later").value(static_cast<std::uint64_t>(leakage.test_rows_not_later));
    json.end_object();
    json.key("metrics");
    write_evaluation_json(json, *evaluation);
    json.key("bundle_sha256").value(*sha256);
    write_registered_json(json, registered);
    json.end_object();
    print_json(json);
    return 0;
  }
  std::cout << "run        " << run_id << "\n";
  if (options.model == "gbdt") {
    std::cout << "rounds     " << summary->iterations;
    if (summary->best_round >= 0) {
      std::cout << " (best validation " << summary->round_metric << " at round " << summary->best_round + 1
                << (summary->stopped_early ? ", stopped early" : "") << "; " << summary->validation_rows
                << " validation rows)";
    }
    std::cout << "\n";
  }
  std::cout << "split      " << prepared->split_description << ": " << summary->rows_used << " train rows, "
            << evaluation->rows << " test rows\n";
  std::cout << "leakage    " << leakage.duplicate_test_rows << " test rows duplicated in train";
  if (options.split.starts_with("group:")) std::cout << ", " << leakage.groups_on_both_sides << " groups on both sides";
  if (options.split.starts_with("time:"))
    std::cout << ", " << leakage.test_rows_not_later << " test rows not later than train";
  std::cout << "\n\n";
  print_evaluation(*evaluation);
  std::cout << "\nbundle     sha256:" << *sha256 << "\n";
  if (registered) std::cout << "registered " << registered->model << " version " << registered->version << "\n";
  return 0;
}

int run_eval(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
             const std::string& slice) {
  auto loaded = load_reference(global, reference);
  if (!loaded.ok()) return fail(loaded.status());
  auto table = read_table(data_path);
  if (!table.ok()) return fail(table.status());
  auto evaluation = eval::evaluate(*loaded->bundle, *table, slice);
  if (!evaluation.ok()) return fail(evaluation.status());
  if (evaluation->rows_missing_target > 0) {
    log_warn(fmt::format("skipped {} rows whose target '{}' is empty", evaluation->rows_missing_target,
                         loaded->bundle->manifest().target));
  }
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("model").value(loaded->description).key("bundle_sha256").value(loaded->sha256);
    json.key("metrics");
    write_evaluation_json(json, *evaluation);
    json.end_object();
    print_json(json);
    return 0;
  }
  std::cout << "model " << loaded->description << " on " << data_path << "\n\n";
  print_evaluation(*evaluation);
  return 0;
}

int run_predict(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                const std::string& out, const std::string& id_column) {
  auto loaded = load_reference(global, reference);
  if (!loaded.ok()) return fail(loaded.status());
  auto table = read_table(data_path);
  if (!table.ok()) return fail(table.status());
  const data::Column* ids = nullptr;
  if (!id_column.empty()) {
    auto index = table->column_index(id_column);
    if (!index.ok()) return fail(index.status());
    ids = &table->column(*index);
  } else {
    for (const char* conventional : {"id", "ID", "Id"}) {
      if (ids == nullptr) ids = table->find(conventional);
    }
  }
  auto predictions = loaded->bundle->predict(*table);
  if (!predictions.ok()) return fail(predictions.status());

  const model::Bundle& bundle = *loaded->bundle;
  bool classification = bundle.task() != model::Task::kRegression;
  bool multiclass = bundle.task() == model::Task::kMulticlassClassification;
  const auto& class_labels = bundle.manifest().class_labels;
  const std::size_t columns = predictions->columns;
  JsonWriter json;  // with --json: {"model", "rows", then the predictions or the output path}
  json.begin_object().key("model").value(loaded->description);
  json.key("rows").value(static_cast<std::uint64_t>(predictions->rows));
  if (out.empty() && global.json) {  // one JSON document on stdout instead of CSV
    json.key("predictions").begin_array();
    for (std::size_t row = 0; row < predictions->rows; ++row) {
      json.begin_object();
      if (ids != nullptr) json.key(ids->name).value(ids->text_at(row));
      if (multiclass) {
        json.key("probabilities").begin_object();
        for (std::size_t label = 0; label < columns; ++label) {
          json.key(class_labels[label]).value(predictions->scores[row * columns + label]);
        }
        json.end_object();
      } else {
        json.key(classification ? "probability" : "prediction").value(predictions->scores[row]);
      }
      if (classification) json.key("label").value(bundle.predicted_label(*predictions, row));
      json.end_object();
    }
    json.end_array().end_object();
    print_json(json);
    return 0;
  }
  std::string csv;
  csv.reserve(predictions->rows * 24);
  auto append_field = [&](const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) {
      csv += text;
      return;
    }
    csv += '"';
    for (char c : text) {
      if (c == '"') csv += '"';
      csv += c;
    }
    csv += '"';
  };
  if (ids != nullptr) {
    append_field(ids->name);
    csv += ',';
  }
  if (multiclass) {
    for (const auto& label : class_labels) {
      append_field("probability_" + label);
      csv += ',';
    }
    csv += "label\n";
  } else {
    csv += classification ? "probability,label\n" : "prediction\n";
  }
  for (std::size_t row = 0; row < predictions->rows; ++row) {
    if (ids != nullptr) {
      append_field(ids->text_at(row));
      csv += ',';
    }
    for (std::size_t column = 0; column < columns; ++column) {
      if (column > 0) csv += ',';
      csv += fmt::format("{}", predictions->scores[row * columns + column]);
    }
    if (classification) {
      csv += ',';
      append_field(bundle.predicted_label(*predictions, row));
    }
    csv += '\n';
  }
  if (out.empty()) {
    std::cout << csv;
    return 0;
  }
  if (auto status = write_file_atomic(out, csv); !status.ok()) return fail(status);
  if (global.json) {
    json.key("out").value(out).end_object();
    print_json(json);
  } else {
    std::cout << "scored " << predictions->rows << " rows with " << loaded->description << " into " << out << "\n";
  }
  return 0;
}

int run_models(const GlobalOptions& global) {
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto models = (*store)->models().list();
  if (!models.ok()) return fail(models.status());
  auto alias_text = [](const std::map<std::string, std::int64_t>& aliases) {
    std::string text;
    for (const auto& [alias, version] : aliases)
      text += (text.empty() ? "" : " ") + alias + "=" + std::to_string(version);
    return text;
  };
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("models").begin_array();
    for (const auto& model : *models) {
      json.begin_object().key("name").value(model.name).key("latest_version").value(model.latest_version);
      json.key("versions").value(model.version_count).key("created_ms").value(model.created_ms);
      json.key("aliases").begin_object();
      for (const auto& [alias, version] : model.aliases) json.key(alias).value(version);
      json.end_object().end_object();
    }
    json.end_array().end_object();
    print_json(json);
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& model : *models) {
    rows.push_back({model.name, std::to_string(model.latest_version), std::to_string(model.version_count),
                    alias_text(model.aliases), format_time_ms(model.created_ms)});
  }
  print_table({"model", "latest", "versions", "aliases", "created (UTC)"}, rows);
  return 0;
}

int run_versions(const GlobalOptions& global, const std::string& model) {
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto versions = (*store)->models().list_versions(model);
  if (!versions.ok()) return fail(versions.status());
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("model").value(model).key("versions").begin_array();
    for (const auto& version : *versions) {
      json.begin_object().key("version").value(version.version).key("bundle_sha256").value(version.bundle_sha256);
      json.key("run_id")
          .value(version.run_id)
          .key("creator")
          .value(version.creator)
          .key("created_ms")
          .value(version.created_ms);
      json.key("aliases").begin_array();
      for (const auto& alias : version.aliases) json.value(alias);
      json.end_array().end_object();
    }
    json.end_array().end_object();
    print_json(json);
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& version : *versions) {
    std::string aliases;
    for (const auto& alias : version.aliases) aliases += (aliases.empty() ? "" : ",") + alias;
    rows.push_back({std::to_string(version.version), aliases, version.bundle_sha256.substr(0, 12), version.run_id,
                    version.creator, format_time_ms(version.created_ms)});
  }
  print_table({"version", "aliases", "sha256", "run", "creator", "created (UTC)"}, rows);
  return 0;
}

int run_runs(const GlobalOptions& global, std::size_t limit) {
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto runs = (*store)->runs().list(limit);
  if (!runs.ok()) return fail(runs.status());
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("runs").begin_array();
    for (const auto& run : *runs) {
      json.begin_object().key("run_id").value(run.run_id).key("experiment").value(run.experiment);
      json.key("status").value(run.status).key("start_ms").value(run.start_ms).key("end_ms").value(run.end_ms);
      json.key("model").value(run.params.count("model") ? run.params.at("model") : "");
      json.key("metrics").begin_object();
      for (const auto& metric : run.metrics) json.key(metric.key).value(metric.value);
      json.end_object().end_object();
    }
    json.end_array().end_object();
    print_json(json);
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& run : *runs) {
    std::string headline;
    for (const auto& metric : run.metrics) {
      if (metric.key == "test_auc" || metric.key == "test_rmse")
        headline = metric.key + "=" + format_metric(metric.value);
    }
    rows.push_back({run.run_id, run.experiment, run.status, run.params.count("model") ? run.params.at("model") : "",
                    headline, format_time_ms(run.start_ms)});
  }
  print_table({"run", "experiment", "status", "model", "metric", "started (UTC)"}, rows);
  return 0;
}

int run_show(const GlobalOptions& global, const std::string& run_id) {
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto run = (*store)->runs().get(run_id);
  if (!run.ok()) return fail(run.status());
  auto history = (*store)->runs().metric_history(run_id);
  if (!history.ok()) return fail(history.status());
  // Metrics recorded at more than one step (per boosting round): key -> (step -> value).
  std::map<std::string, std::map<std::int64_t, double>> series;
  for (const auto& record : *history) series[record.key][record.step] = record.value;
  for (auto it = series.begin(); it != series.end();) it = it->second.size() > 1 ? std::next(it) : series.erase(it);
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("run_id").value(run->run_id).key("experiment").value(run->experiment);
    json.key("status").value(run->status).key("start_ms").value(run->start_ms).key("end_ms").value(run->end_ms);
    json.key("code_version").value(run->code_version).key("data_fingerprint").value(run->data_fingerprint);
    json.key("bundle_sha256").value(run->bundle_sha256).key("spec").value(run->spec);
    json.key("owner").begin_object().key("pid").value(run->owner.pid).key("host").value(run->owner.host).end_object();
    json.key("params").begin_object();
    for (const auto& [key, value] : run->params) json.key(key).value(value);
    json.end_object().key("metrics").begin_object();
    for (const auto& metric : run->metrics) json.key(metric.key).value(metric.value);
    json.end_object().key("history").begin_object();
    for (const auto& [key, values] : series) {
      json.key(key).begin_array();
      for (const auto& [step, value] : values) json.begin_array().value(step).value(value).end_array();
      json.end_array();
    }
    json.end_object().end_object();
    print_json(json);
    return 0;
  }
  std::cout << "run          " << run->run_id << "\n"
            << "experiment   " << run->experiment << "\n"
            << "status       " << run->status << "\n"
            << "process      "
            << (run->owner.pid == 0 ? std::string("-") : std::to_string(run->owner.pid) + " on " + run->owner.host)
            << "\n"
            << "started      " << format_time_ms(run->start_ms) << " UTC\n"
            << "code         " << run->code_version << "\n"
            << "data         " << run->data_fingerprint << "\n"
            << "bundle       " << (run->bundle_sha256.empty() ? "-" : run->bundle_sha256) << "\n\nparams\n";
  for (const auto& [key, value] : run->params) std::cout << "  " << key << " = " << value << "\n";
  std::cout << "\nmetrics\n";
  for (const auto& metric : run->metrics)
    std::cout << "  " << metric.key << " = " << format_metric(metric.value) << "\n";
  if (!series.empty()) {
    // Per-round metrics: about 20 evenly spaced rounds plus the last (--json has every one).
    std::set<std::int64_t> steps;
    for (const auto& [key, values] : series) {
      for (const auto& entry : values) steps.insert(entry.first);
    }
    std::vector<std::int64_t> all_steps(steps.begin(), steps.end());
    std::size_t stride = std::max<std::size_t>(1, all_steps.size() / 20);
    std::vector<std::string> headers = {"round"};
    for (const auto& entry : series) headers.push_back(entry.first);
    std::vector<std::vector<std::string>> rows;
    for (std::size_t index = 0; index < all_steps.size(); ++index) {
      if (index % stride != 0 && index + 1 != all_steps.size()) continue;
      std::vector<std::string> row = {std::to_string(all_steps[index])};
      for (const auto& entry : series) {
        auto found = entry.second.find(all_steps[index]);
        row.push_back(found == entry.second.end() ? "-" : format_metric(found->second));
      }
      rows.push_back(std::move(row));
    }
    std::cout << "\nper round (" << all_steps.size() << " rounds)\n";
    print_table(headers, rows);
  }
  std::cout << "\nspec\n" << run->spec;
  return 0;
}

int run_alias(const GlobalOptions& global, const std::string& reference, const std::string& alias) {
  auto parsed = registry::parse_model_reference(reference);
  if (!parsed.ok()) return fail(parsed.status());
  auto store = open_workspace(global, WorkspaceAccess::kWrite);
  if (!store.ok()) return fail(store.status());
  auto version = (*store)->models().resolve(parsed->first, parsed->second);
  if (!version.ok()) return fail(version.status());
  if (auto status = (*store)->models().set_alias(version->model, alias, version->version); !status.ok())
    return fail(status);
  if (global.json) {
    JsonWriter json;
    json.begin_object()
        .key("model")
        .value(version->model)
        .key("alias")
        .value(alias)
        .key("version")
        .value(version->version);
    json.end_object();
    print_json(json);
  } else {
    std::cout << version->model << "@" << alias << " -> version " << version->version << "\n";
  }
  return 0;
}

int run_params(const GlobalOptions& global, bool markdown) {
  if (markdown) {
    std::cout << train::parameters_markdown();
    return 0;
  }
  if (global.json) {
    JsonWriter json;
    json.begin_object().key("parameters").begin_array();
    for (const auto& declaration : train::parameter_declarations()) {
      json.begin_object().key("name").value(declaration.name).key("default").value(declaration.default_value);
      json.key("description").value(declaration.description).end_object();
    }
    json.end_array().end_object();
    print_json(json);
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& declaration : train::parameter_declarations()) {
    std::string families;
    for (const auto& family : declaration.families) families += (families.empty() ? "" : ",") + family;
    rows.push_back({declaration.name, families, declaration.default_value, declaration.description});
  }
  print_table({"parameter", "models", "default", "description"}, rows);
  return 0;
}

}  // namespace slipway::cli

namespace slipway::cli {

int run_import(const GlobalOptions& global, const ImportOptions& options) {
  if (options.format != "xgboost") {
    return fail(invalid_argument("unknown model format '" + options.format + "'; supported: xgboost"));
  }
  if (!options.register_as.empty()) {
    if (auto status = registry::validate_model_name(options.register_as); !status.ok()) return fail(status);
  }
  auto json = read_file(options.model_path);
  if (!json.ok()) return fail(json.status());
  model::XgboostImportOptions import_options;
  import_options.source = std::filesystem::absolute(options.model_path).string();
  import_options.target = options.target;
  if (!options.schema_path.empty()) {
    // Only the header matters: read the first line, so a large data file costs nothing.
    std::ifstream schema(options.schema_path);
    std::string first_line;
    if (!schema || !std::getline(schema, first_line)) {
      return fail(io_error("cannot read a header line from '" + options.schema_path + "'"));
    }
    auto header = data::parse_csv(first_line + "\n", options.schema_path);
    if (!header.ok()) return fail(header.status());
    for (const auto& column : header->columns()) {
      if (column.name != options.target) import_options.feature_names.push_back(column.name);
    }
  }
  auto bundle = model::import_xgboost_json(*json, import_options);
  if (!bundle.ok()) return fail(Status(bundle.status().code(), options.model_path + ": " + bundle.status().message()));
  std::vector<std::byte> bytes = (*bundle)->serialize();
  if (!options.bundle_out.empty()) {
    if (auto status = write_file_atomic(options.bundle_out, bytes); !status.ok()) return fail(status);
  }
  std::string sha256;
  std::optional<registry::ModelVersion> registered;
  if (!options.register_as.empty()) {
    auto store = open_workspace(global, WorkspaceAccess::kCreate);
    if (!store.ok()) return fail(store.status());
    registry::NewRun run;
    run.experiment = "imports";
    run.code_version = std::string(slipway_code_version());
    run.data_fingerprint = "";
    run.spec = "import: xgboost\nsource: " + import_options.source + "\n";
    run.params = (*bundle)->manifest().params;
    auto run_id = (*store)->runs().start(run);
    if (!run_id.ok()) return fail(run_id.status());
    auto stored = (*store)->artifacts().put(bytes);  // hashes the bytes: the bundle's identity
    if (!stored.ok()) {
      (void)(*store)->runs().finish(*run_id, false, "");
      return fail(stored.status());
    }
    sha256 = *stored;
    if (auto status = (*store)->runs().finish(*run_id, true, sha256); !status.ok()) return fail(status);
    auto version = (*store)->models().register_version(options.register_as, sha256, *run_id);
    if (!version.ok()) return fail(version.status());
    registered = *version;
  } else {
    sha256 = sha256_hex(bytes);
  }
  const auto& trees = dynamic_cast<const model::TreeEnsembleModel&>((*bundle)->model());
  if (global.json) {
    JsonWriter json_out;
    json_out.begin_object().key("bundle_sha256").value(sha256);
    json_out.key("trees").value(static_cast<std::uint64_t>(trees.roots().size()));
    json_out.key("features").value(static_cast<std::uint64_t>(trees.input_width()));
    json_out.key("task").value(model::task_name((*bundle)->task()));
    write_registered_json(json_out, registered);
    json_out.end_object();
    print_json(json_out);
    return 0;
  }
  std::cout << "imported   " << options.model_path << ": " << trees.roots().size() << " trees, " << trees.input_width()
            << " features, " << model::task_name((*bundle)->task()) << " ("
            << (*bundle)->manifest().params.at("objective") << ")\n";
  std::cout << "bundle     sha256:" << sha256 << "\n";
  if (registered) std::cout << "registered " << registered->model << " version " << registered->version << "\n";
  return 0;
}

int run_explain(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                const std::string& out, bool importance) {
  auto loaded = load_reference(global, reference);
  if (!loaded.ok()) return fail(loaded.status());
  const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&loaded->bundle->model());
  if (trees == nullptr) {
    return fail(invalid_argument("explain works on tree models; " + loaded->description + " is a " +
                                 std::string(loaded->bundle->model().family()) + " model"));
  }
  const auto& inputs = loaded->bundle->preprocessor().features();
  if (importance) {
    auto result = trees->importance();
    std::vector<std::size_t> order(inputs.size());
    for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
    bool with_gain = !result.total_gain.empty();
    std::sort(order.begin(), order.end(), [&](auto a, auto b) {
      return with_gain ? result.total_gain[a] > result.total_gain[b] : result.splits[a] > result.splits[b];
    });
    JsonWriter json;
    json.begin_object().key("model").value(loaded->description).key("features").begin_array();
    std::vector<std::vector<std::string>> rows;
    for (auto index : order) {
      json.begin_object().key("name").value(inputs[index].name).key("splits").value(result.splits[index]);
      std::vector<std::string> row = {inputs[index].name, std::to_string(result.splits[index])};
      if (with_gain) {
        json.key("total_gain").value(result.total_gain[index]).key("total_cover").value(result.total_cover[index]);
        row.push_back(format_metric(result.total_gain[index]));
        row.push_back(format_metric(result.total_cover[index]));
      }
      json.end_object();
      rows.push_back(std::move(row));
    }
    json.end_array().end_object();
    if (global.json) {
      print_json(json);
    } else if (with_gain) {
      print_table({"feature", "splits", "total_gain", "total_cover"}, rows);
    } else {
      print_table({"feature", "splits"}, rows);
    }
    return 0;
  }
  if (data_path.empty()) return fail(invalid_argument("explain needs --data FILE (or --importance)"));
  auto table = read_table(data_path);
  if (!table.ok()) return fail(table.status());
  std::vector<float> features;
  if (auto status = loaded->bundle->preprocessor().transform(*table, features); !status.ok()) return fail(status);
  std::size_t width = trees->input_width();
  // One block of feature contributions plus bias per output; multiclass blocks are named by class.
  std::vector<std::string> columns;
  const auto& class_labels = loaded->bundle->manifest().class_labels;
  for (std::size_t group = 0; group < trees->output_count(); ++group) {
    std::string prefix = trees->output_count() > 1 ? class_labels[group] + ":" : "";
    for (const auto& input : inputs) columns.push_back(prefix + input.name);
    columns.push_back(prefix + "bias");
  }
  std::string csv;
  JsonWriter json;
  json.begin_object().key("model").value(loaded->description).key("columns").begin_array();
  for (std::size_t column = 0; column < columns.size(); ++column) {
    json.value(columns[column]);
    csv += columns[column];
    csv += column + 1 == columns.size() ? '\n' : ',';
  }
  json.end_array().key("contributions").begin_array();
  std::vector<float> contributions(columns.size());
  for (std::size_t row = 0; row < table->row_count(); ++row) {
    auto status = trees->explain(std::span<const float>(features).subspan(row * width, width), contributions);
    if (!status.ok()) return fail(status);
    json.begin_array();
    for (std::size_t column = 0; column < contributions.size(); ++column) {
      csv += fmt::format("{}", contributions[column]);
      csv += column + 1 == contributions.size() ? '\n' : ',';
      json.value(contributions[column]);
    }
    json.end_array();
  }
  json.end_array().end_object();
  if (out.empty() && global.json) {
    print_json(json);
    return 0;
  }
  if (out.empty()) {
    std::cout << csv;
    return 0;
  }
  if (auto status = write_file_atomic(out, csv); !status.ok()) return fail(status);
  if (global.json) {
    JsonWriter summary;
    summary.begin_object().key("model").value(loaded->description).key("rows");
    summary.value(static_cast<std::uint64_t>(table->row_count())).key("out").value(out).end_object();
    print_json(summary);
    return 0;
  }
  std::cout << "explained " << table->row_count() << " rows with " << loaded->description << " into " << out << "\n";
  return 0;
}

}  // namespace slipway::cli
