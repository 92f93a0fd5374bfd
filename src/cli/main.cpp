// slipway — one binary: train, evaluate, register and serve models.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string_view>
#include <vector>

#include "cli/cli.h"
#include "slipway/serve.h"

namespace {

// The help of every REF argument.
constexpr const char* kReferenceHelp =
    "NAME@VERSION, NAME@ALIAS, NAME@latest, NAME (the production alias, else the newest version) or a bundle file";

std::string default_home() {
  if (const char* home = std::getenv("SLIPWAY_HOME"); home != nullptr && *home != '\0') return home;
  return "./.slipway";
}

// The flag of a serving config key: --max-batch-size for max_batch_size; a list key's flag names
// one item (--preferred-batch-size for preferred_batch_sizes).
std::string serving_config_flag(const slipway::ConfigKey& key) {
  std::string name = "--" + key.name;
  if (key.type == slipway::ConfigType::kIntList && name.back() == 's') name.pop_back();
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

}  // namespace

// CLI11 and the commands report errors as values; an exception reaching main is a bug, and
// terminating with its message is the right end.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  using namespace slipway::cli;
  // A write past the file size limit (`ulimit -f`) fails with EFBIG, which every writer reports as
  // an error naming the file, instead of killing the process mid-write with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"Slipway: train, track, register and serve machine-learning models from one binary.", "slipway"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "slipway " + std::string(slipway::slipway_version()) + " (" +
                                        std::string(slipway::slipway_code_version()) + ")");
  // Global flags may come after the subcommand too: `slipway models --json`.
  app.fallthrough();
  GlobalOptions global;
  global.home = default_home();
  app.add_option("--home", global.home, "Workspace folder (default: $SLIPWAY_HOME, else ./.slipway)");
  app.add_flag("--json", global.json, "Print results as one JSON document on stdout");
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "Only log warnings and errors");

  auto* init = app.add_subcommand("init", "Create a workspace (metadata store and artifact folder)");

  TrainOptions train;
  auto* train_command =
      app.add_subcommand("train", "Train a model, evaluate it on held-out data, and optionally register it");
  train_command->add_option("--spec", train.spec_path, "YAML spec with any of the options below (flags override it)")
      ->check(CLI::ExistingFile);
  train_command->add_option("--data", train.data, "Training data (CSV with a header row)");
  train_command->add_option("--target", train.target, "Column to predict");
  train_command
      ->add_option("--model", train.model,
                   "Model family: logistic (binary classification), linear (regression), gbdt (boosted trees) or mlp "
                   "(multilayer perceptron); gbdt and mlp take either task")
      ->capture_default_str();
  train_command->add_option("--split", train.split, "Hold-out split: random, stratified, time:COLUMN or group:COLUMN")
      ->capture_default_str();
  train_command->add_option("--test-fraction", train.test_fraction, "Fraction of rows held out for testing")
      ->capture_default_str();
  train_command->add_option("--test", train.test_data, "Separate test file (instead of splitting --data)");
  train_command->add_option("--slice", train.slice, "Also report test metrics per value of this column");
  train_command->add_option("--seed", train.seed, "Random seed for the split (and any randomness in training)")
      ->capture_default_str();
  train_command->add_option("--param", train.params,
                            "Model parameter KEY=VALUE (repeatable; `slipway params` lists them)");
  train_command->add_option("--ignore", train.ignore, "Column not to use as a feature (repeatable)");
  train_command->add_option("--register", train.register_as, "Register the bundle as a new version of this model");
  train_command->add_option("--experiment", train.experiment, "Experiment the run belongs to")->capture_default_str();
  train_command->add_option("--out", train.bundle_out, "Also write the bundle file here");
  train_command->add_option("--threads", train.threads, "Training threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  train_command->add_option("--weight", train.weight_column,
                            "Column of row weights (gbdt, mlp; not used as a feature)");
  train_command->add_option("--init-model", train.init_model,
                            "Warm start (gbdt: continue boosting from its trees; mlp: start from its weights)");
  train_command
      ->add_option("--checkpoint-every", train.checkpoint_every,
                   "Save a checkpoint to the artifact store every N boosting rounds (gbdt) or epochs (mlp)")
      ->check(CLI::NonNegativeNumber);
  train_command->add_option(
      "--threshold", train.threshold,
      "Binary classification: the decision threshold, or the rule that chooses it on held-out training rows: f1, "
      "precision>=P, recall>=R, cost=C (a missed positive costs C false alarms); default 0.5");
  train_command
      ->add_option("--threshold-fraction", train.threshold_fraction,
                   "With a --threshold rule: the share of the training rows held out to choose it on")
      ->capture_default_str();
  train_command->add_option("--resume", train.resume_run,
                            "Continue an interrupted run from its latest checkpoint (replays the run's spec)");
  bool no_progress = false;
  train_command->add_flag("--no-progress", no_progress, "No progress bar (it is shown only on a terminal anyway)");
  bool train_no_cache = false;
  train_command->add_flag("--no-cache", train_no_cache,
                          "Train even when an earlier run had the same data, code, spec and seed (by default its "
                          "bundle is reused)");

  TuneOptions tune;
  auto* tune_command = app.add_subcommand(
      "tune", "Tune hyperparameters: a study of training runs whose parameters a sampler picks (TPE by default)");
  tune_command->add_option("--study", tune.study, "The study's name: trials are kept under it in the workspace");
  tune_command->add_option("--resume", tune.resume,
                           "Continue this stored study as it was defined (trials whose process died run again once)");
  tune_command->add_option("--spec", tune.spec_path, "YAML training spec (flags override it)")
      ->check(CLI::ExistingFile);
  tune_command->add_option("--data", tune.data, "Training data (CSV with a header row)");
  tune_command->add_option("--target", tune.target, "Column to predict");
  tune_command->add_option("--model", tune.model, "Model family: gbdt, mlp, logistic or linear")->capture_default_str();
  tune_command->add_option("--valid", tune.valid, "Judge each trial on this file (instead of a split of --data)");
  tune_command
      ->add_option("--split", tune.split, "Hold-out split when no --valid: random, stratified, time:COL, group:COL")
      ->capture_default_str();
  tune_command->add_option("--test-fraction", tune.test_fraction, "Fraction of --data held out to judge trials on")
      ->capture_default_str();
  tune_command->add_option("--slice", tune.slice, "Slice column, for METRIC@VALUE and METRIC@worst objectives");
  tune_command->add_option("--seed", tune.seed, "Seed of the split, the training and the sampler")
      ->capture_default_str();
  tune_command->add_option("--param", tune.params, "A fixed (not tuned) parameter KEY=VALUE (repeatable)");
  tune_command->add_option("--ignore", tune.ignore, "Column not to use as a feature (repeatable)");
  tune_command->add_option("--weight", tune.weight, "Column of row weights (gbdt, mlp)");
  tune_command->add_option("--experiment", tune.experiment,
                           "Experiment of the trials' runs (default: the study's name)");
  tune_command->add_option("--threads", tune.threads, "Training threads in all (default: all cores)")
      ->check(CLI::Range(0, 1024));
  tune_command
      ->add_option("--space", tune.space,
                   "Search space YAML (default: the family's, from `slipway params`; docs/tuning.md)")
      ->check(CLI::ExistingFile);
  tune_command->add_option("--sampler", tune.sampler, "tpe, tpe:multivariate, random, grid or qmc (Sobol)")
      ->capture_default_str();
  tune_command
      ->add_option("--pruner", tune.pruner,
                   "Stop weak gbdt trials early: asha[:MIN_RESOURCE[:REDUCTION_FACTOR]], median[:WARMUP_STEPS] or none")
      ->capture_default_str();
  tune_command->add_option(
      "--objective", tune.objectives,
      "What to optimize: a metric (auc, log_loss, rmse, ...), METRIC@VALUE or METRIC@worst over "
      "--slice, cost (with --costs), p95_us, p50_us, rows_per_s, bundle_kb, train_s or train_mb; :maximize or "
      ":minimize to say which way. "
      "Two or three give a Pareto front. Default: the task's metric");
  tune_command->add_option("--costs", tune.costs,
                           "What decisions cost, for the metric `cost`: 'fn=5,fp=1' (binary) or a CSV file "
                           "actual,predicted,cost");
  tune_command->add_option("--constraint", tune.constraints,
                           "A bound every counted trial must meet, such as 'p95_us<=50' or 'bundle_kb<=512' "
                           "(repeatable); trials past it are marked infeasible");
  tune_command->add_option("--trials", tune.trials, "The study ends at this many trials")->capture_default_str();
  tune_command->add_option("--budget", tune.budget, "Wall-clock limit for this call, such as 90s, 20m or 2h");
  tune_command->add_option("--parallel", tune.parallel, "Trials trained at once (each on threads / N)")
      ->capture_default_str();
  tune_command->add_option("--from-study", tune.from_study,
                           "Warm-start the sampler with an earlier study's complete trials");
  tune_command->add_option("--register", tune.register_as,
                           "Register the best trial's bundle as a version of this model");
  tune_command->add_flag("--force", tune.force,
                         "Start a study of this name over with a new definition (its trials are dropped from it)");
  tune_command->add_flag("--auto", tune.auto_ml,
                         "AutoML: infer the task, spend --budget across model families (logistic or linear, gbdt, "
                         "mlp) by successive halving, print a leaderboard, --register the winner");
  tune_command
      ->add_option("--ensemble", tune.ensemble_size,
                   "--auto: average the best gbdt/logistic/linear family's top N trials and register that ensemble "
                   "when it beats the best single model (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  bool tune_no_cache = false;
  tune_command->add_flag("--no-cache", tune_no_cache,
                         "Train every trial, even one whose inputs match an earlier run (by default its bundle is "
                         "reused)");
  bool tune_no_progress = false;
  tune_command->add_flag("--no-progress", tune_no_progress, "No line per finished trial on stderr");

  app.add_subcommand("studies", "List hyperparameter studies and their trials by state");
  auto* study_command = app.add_subcommand("study", "Show a study, or narrow its search space for the next one");
  study_command->require_subcommand(1);
  std::string study_name;
  auto* study_show = study_command->add_subcommand("show", "Every trial, the best (or the Pareto front), importance");
  study_show->add_option("STUDY", study_name, "The study")->required();
  std::string study_html;
  study_show->add_option("--html", study_html,
                         "Also write an HTML page: the optimization history, the Pareto front, importance, trials");
  StudyNarrowOptions narrow;
  auto* study_narrow = study_command->add_subcommand(
      "narrow", "Write the search space narrowed to what the study's best trials used (for --space of the next)");
  study_narrow->add_option("STUDY", narrow.study, "The finished study")->required();
  study_narrow->add_option("--top", narrow.top_fraction, "Share of complete trials, the best first, to keep")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  study_narrow->add_option("--out", narrow.out, "Write the YAML here (default: print it)");

  std::string reference;
  std::string data_path;
  std::string slice;
  auto* eval_command = app.add_subcommand("eval", "Evaluate a model on a labelled file, overall and per slice");
  eval_command->add_option("REF", reference, kReferenceHelp)->required();
  eval_command->add_option("--data", data_path, "Labelled data (CSV)")->required();
  eval_command->add_option("--slice", slice, "Report metrics per value of this column");
  bool eval_no_cache = false;
  eval_command->add_flag("--no-cache", eval_no_cache,
                         "Evaluate even when the same bundle was evaluated on the same file bytes before (by default "
                         "that result is reused, in a workspace that can be written)");

  CompareOptions compare;
  auto* compare_command = app.add_subcommand(
      "compare", "Compare two models on a golden set: outputs row by row, quality overall and per slice");
  compare_command
      ->add_option("REF_A", compare.reference_a, "The baseline (NAME@VERSION, NAME@ALIAS, NAME or a bundle file)")
      ->required();
  compare_command->add_option("REF_B", compare.reference_b, "The candidate")->required();
  compare_command
      ->add_option("--data", compare.data_path, "Golden rows (CSV); with the target column, quality is compared too")
      ->required();
  compare_command
      ->add_option("--tolerance", compare.tolerance,
                   "Largest |A - B| allowed on any output (probability or value); exit 1 beyond it, 0 within")
      ->capture_default_str();
  compare_command->add_option("--slice", compare.slice, "Also compare per value of this column");
  compare_command->add_option("--worst", compare.worst_rows, "Rows listed, the largest difference first")
      ->capture_default_str();

  std::string out;
  std::string id_column;
  MonitorFlags monitor;
  auto* monitor_command = app.add_subcommand(
      "monitor",
      "Skew and drift of a model's traffic (its request log) or of a file, input by input and in its "
      "predictions");
  monitor_command->add_option("REF", monitor.reference, "NAME[@VERSION], an endpoint, or a bundle file with --data")
      ->required();
  monitor_command->add_option("--data", monitor.data,
                              "Compare this file (CSV or JSON Lines) instead of the request log");
  monitor_command->add_option("--window", monitor.window, "The request log's last WINDOW (e.g. 15m, 1h)")
      ->capture_default_str();
  monitor_command
      ->add_option("--baseline", monitor.baseline,
                   "training (the distribution the bundle carries), previous-window, or a file")
      ->capture_default_str();
  monitor_command->add_option("--request-log-dir", monitor.request_log_dir,
                              "The request log's folder (default: <workspace>/request_log)");
  monitor_command
      ->add_option("--distance", monitor.distance,
                   "Drift past this Jensen-Shannon (numeric) or L-infinity (categorical) distance, with more than "
                   "1000 rows")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  monitor_command->add_option(
      "--id-col", monitor.id_column,
      "Also measure performance: join the labels ingested for the model by this input, or by @id (each "
      "request's v2 id; row R of a longer request is ID/R)");
  monitor_command->add_flag("--alert", monitor.alert,
                            "Record each alert's state (a drifted input or prediction, a metric past its limit): "
                            "/metrics shows them, and --webhook hears of each change once");
  monitor_command->add_option("--webhook", monitor.webhook,
                              "POST the alerts that fired or resolved since the last --alert run here (implies "
                              "--alert); the states are recorded only once it answers 2xx");
  monitor_command->add_option("--min-metric", monitor.min_metrics, "With --id-col: alert below it, e.g. auc=0.7");
  monitor_command->add_option("--slice", monitor.slice,
                              "With --id-col: the performance per value of this column too (from the request log, "
                              "an input of the model)");
  monitor_command->add_option("--html", monitor.html,
                              "Also write a self-contained page: per input the two distributions and, for a "
                              "request log window, the drift over time");
  monitor_command->add_option("--max-metric", monitor.max_metrics, "With --id-col: alert above it, e.g. log_loss=0.3");
  monitor_command->add_option(
      "--max-metric-drop", monitor.max_metric_drops,
      "With --id-col: alert when the metric is worse than the bundle's test value by more than this, e.g. auc=0.05");
  RetrainFlags retrain;
  auto* retrain_command = app.add_subcommand(
      "retrain",
      "Train a model again when its policy says (alerts, schedule): warm start on the new rows, an evaluation gate "
      "against the version it would replace, registered only when it passes, deployed only when the policy says");
  retrain_command->add_option("NAME", retrain.model, "The model to retrain if its policy is due");
  retrain_command->add_flag("--due", retrain.due, "Every model whose policy is due (for cron)");
  retrain_command->add_flag("--force", retrain.force, "Now, whatever the triggers say, even on the same rows");
  retrain_command->add_flag("--dry-run", retrain.dry_run, "Say whether it is due and why; change nothing");
  bool retrain_no_progress = false;
  retrain_command->add_flag("--no-progress", retrain_no_progress, "No progress bar");
  RetrainPolicyFlags policy;
  auto* policy_command = retrain_command->add_subcommand(
      "policy", "Show or set a model's retrain policy (keys not given keep their stored value)");
  policy_command->add_option("NAME", policy.model, "The registered model")->required();
  policy_command->add_option("--on", policy.on,
                             "Triggers, comma-separated: alert (any monitoring alert), drift (an input or the "
                             "prediction), performance (a metric limit or drop), schedule (with --every)");
  policy_command->add_option("--every", policy.every, "The schedule: retrain when the model is older (e.g. 7d)");
  policy_command->add_option("--cooldown", policy.cooldown, "No retraining sooner after the last (default 6h)");
  policy_command->add_option("--data", policy.data,
                             "The new rows: a CSV file read when it runs, or traffic (the labelled request log)");
  policy_command->add_option("--window", policy.window, "With --data traffic: the log's last WINDOW (default 7d)");
  policy_command->add_option("--id-col", policy.id_column,
                             "With --data traffic: the input labels are joined by, or @id (the v2 request id)");
  policy_command->add_option("--spec", policy.spec_path,
                             "A train spec (YAML), stored with the policy; default: the baseline's run spec");
  bool warm_start = false, no_warm_start = false;
  policy_command->add_flag("--warm-start", warm_start, "gbdt: continue boosting from the baseline's trees (default)");
  policy_command->add_flag("--no-warm-start", no_warm_start, "gbdt: train from scratch")->excludes("--warm-start");
  policy_command->add_option("--rounds", policy.rounds, "Boosting rounds to add (0: the spec's)");
  policy_command->add_option("--min-rows", policy.min_rows, "Fewer new rows fail the retraining (default 200)");
  policy_command->add_option("--gate-metric", policy.gate_metric,
                             "The gate's metric (default: auc, log_loss or rmse by task)");
  policy_command->add_option("--gate", policy.gate,
                             "Every threshold at once, replacing those stored: e.g. min=0.7,max_drop=0.01");
  policy_command->add_option("--gate-min", policy.gate_min, "The candidate's metric must be at least this");
  policy_command->add_option("--gate-max", policy.gate_max, "... at most this");
  policy_command->add_option("--gate-max-drop", policy.gate_max_drop,
                             "... worse than the baseline's by at most this (default 0: no worse)");
  policy_command->add_option("--gate-max-relative-drop", policy.gate_max_relative_drop,
                             "... by at most this share of the baseline's value");
  policy_command->add_option("--gate-data", policy.gate_data,
                             "Labelled rows both are scored on (default: the new rows' held-out split)");
  policy_command->add_option("--gate-slice", policy.gate_slice, "The gate also holds in every value of this column");
  policy_command->add_option("--endpoint", policy.endpoint,
                             "The baseline is this endpoint's main version, and deploys go here");
  policy_command->add_option("--deploy", policy.deploy,
                             "none (registered only, the default), full, canary:PERCENT, or rollout:STEPS "
                             "(e.g. rollout:10,50,100)");
  policy_command->add_option("--rollout-interval", policy.rollout_interval,
                             "With --deploy rollout: each step's length (default 2m)");
  policy_command->add_flag("--reset", policy.reset, "The keys given replace the whole stored policy");
  policy_command->add_flag("--remove", policy.remove, "Delete the policy");
  std::string history_model;
  std::int64_t history_limit = 20;
  auto* history_command = retrain_command->add_subcommand("history", "Retrainings, newest first");
  history_command->add_option("NAME", history_model, "Only this model's");
  history_command->add_option("--limit", history_limit, "At most this many")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  LabelFlags label_flags;
  auto* labels_command = app.add_subcommand("labels", "Ground truth that arrives after the predictions");
  auto* labels_ingest = labels_command->add_subcommand("ingest", "Store labels for a model's predictions, by id");
  labels_ingest->add_option("FILE", label_flags.path, "CSV or JSON Lines with an id and a label per row")->required();
  labels_ingest->add_option("--model", label_flags.model, "The registered model the labels are for")->required();
  labels_ingest
      ->add_option("--id-col", label_flags.id_column,
                   "The id column: the value of the input monitor --id-col names, or the request id for @id")
      ->required();
  labels_ingest->add_option("--label-col", label_flags.label_column, "The label column")->required();
  labels_command->require_subcommand(1);
  monitor_command
      ->add_option("--p-value", monitor.p_value, "Drift below this KS / chi-squared p-value, with at most 1000 rows")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));

  BatchFlags batch;
  auto* batch_command = app.add_subcommand(
      "batch", "Score a file into a job folder: sharded, resumable after a kill, a no-op when run again");
  batch_command->add_option("REF", batch.reference, kReferenceHelp);
  batch_command->add_option("--data", batch.data, "Rows to score: CSV, or JSON Lines (.jsonl, .ndjson)");
  batch_command->add_option("--out", batch.out, "The job's folder: new, empty, or this job's (to resume)");
  batch_command->add_option("--format", batch.format, "Output rows as csv or jsonl")
      ->capture_default_str()
      ->check(CLI::IsMember({"csv", "jsonl"}));
  batch_command->add_option("--shards", batch.shards, "Shards (0: one per 16 MiB of input)")->capture_default_str();
  batch_command->add_option("--workers", batch.workers, "Shards scored at once (0: every core)")->capture_default_str();
  batch_command
      ->add_option("--max-error-rate", batch.max_error_rate,
                   "The job fails once more than this share of rows are bad (bad rows go to errors-*.csv)")
      ->capture_default_str();
  batch_command->add_option("--id", batch.id_column, "An input column copied into every output row");
  bool batch_no_progress = false;
  batch_command->add_flag("--no-progress", batch_no_progress, "No progress bar");
  std::string batch_folder;
  auto* batch_status_command = batch_command->add_subcommand("status", "The state of the job in a folder");
  batch_status_command->add_option("DIR", batch_folder, "The job's folder")->required();

  auto* predict_command = app.add_subcommand("predict", "Score the rows of a file");
  predict_command->add_option("REF", reference, kReferenceHelp)->required();
  predict_command->add_option("--data", data_path, "Rows to score (CSV)")->required();
  predict_command->add_option("--out", out, "Output CSV (default: stdout)");
  predict_command->add_option("--id", id_column,
                              "Column copied to the output to identify rows (default: a column named id)");

  auto* models_command = app.add_subcommand("models", "List registered models");
  std::string model_name;
  auto* versions_command = app.add_subcommand("versions", "List the versions of a model");
  versions_command->add_option("NAME", model_name, "Model name")->required();
  RunsFlags runs;
  auto* runs_command = app.add_subcommand("runs", "List recent training runs, newest first");
  runs_command->add_option("--limit", runs.limit, "How many runs")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  runs_command->add_option("--experiment", runs.experiment, "Only this experiment's runs");
  runs_command->add_option("--status", runs.status, "Only runs in this state")
      ->transform([](std::string status) {
        std::transform(status.begin(), status.end(), status.begin(),
                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        return status;
      })
      ->check(CLI::IsMember({"RUNNING", "FINISHED", "FAILED", "INTERRUPTED"}));
  runs_command->add_option("--model", runs.model, "Only runs of this model family (logistic, linear, gbdt, mlp)");
  runs_command->add_option("--target", runs.target, "Only runs whose spec predicts this column");
  runs_command->add_option("--param", runs.params, "Only runs with this parameter value, KEY=VALUE (repeatable)");
  runs_command->add_flag("--ids", runs.ids_only,
                         "Print only the run ids, one per line, e.g. slipway train --resume "
                         "$(slipway runs --status INTERRUPTED --limit 1 --ids)");
  std::string run_id;
  auto* show_command = app.add_subcommand("show", "Show one run: params, metrics, lineage, spec");
  show_command->add_option("RUN_ID", run_id, "Run id (from `slipway runs`)")->required();
  std::string alias;
  auto* alias_command = app.add_subcommand("alias", "Point an alias (e.g. production) at a model version");
  alias_command->add_option("REF", reference, "NAME@VERSION (or NAME@ALIAS, NAME)")->required();
  alias_command->add_option("ALIAS", alias, "Alias name")->required();

  AnnotateFlags annotate;
  auto* annotate_command = app.add_subcommand(
      "annotate", "Set the description, owner or tags of a model (NAME) or a version (NAME@VERSION)");
  annotate_command->add_option("REF", annotate.reference, "NAME or NAME@VERSION (NAME@ALIAS)")->required();
  annotate_command->add_option("--description", annotate.description, "What it is, for people (UTF-8, at most 8 KiB)");
  annotate_command->add_option("--owner", annotate.owner, "Who answers for the model (models only)");
  annotate_command->add_option("--tag", annotate.tags, "KEY=VALUE (repeatable)");
  annotate_command->add_option("--untag", annotate.untags, "Remove tag KEY (repeatable)");
  std::string approve_note;
  bool revoke_approval = false;
  auto* approve_command = app.add_subcommand(
      "approve", "Record your approval of a version for production (endpoints with --require-approval need one)");
  approve_command->add_option("REF", reference, "NAME@VERSION (or NAME@ALIAS, NAME)")->required();
  approve_command->add_option("--note", approve_note, "Why (kept with the approval and in the audit log)");
  approve_command->add_flag("--revoke", revoke_approval, "Withdraw the approval");
  auto* retire_command = app.add_subcommand(
      "retire", "Take a version out of service, keeping it for lineage (refused while an alias or endpoint uses it)");
  retire_command->add_option("REF", reference, "NAME@VERSION (or NAME@ALIAS)")->required();
  std::string reproduce_run_id;
  auto* reproduce_command = app.add_subcommand(
      "reproduce",
      "Train a finished run again from its recorded spec, data and seed (in a scratch workspace) and say whether "
      "the bundle is identical; exit 0 identical, 1 different, 2 refused");
  reproduce_command->add_option("RUN", reproduce_run_id, "Run id (slipway runs)")->required();
  bool gc_apply = false;
  std::string gc_min_age = "1h";
  auto* gc_command = app.add_subcommand(
      "gc", "List artifacts that no version, run, checkpoint or gate result names, with sizes; --apply deletes them");
  gc_command->add_flag("--apply", gc_apply, "Delete them (default: a dry run)");
  gc_command->add_option("--min-age", gc_min_age, "Keep younger ones (a run may be about to register them)")
      ->capture_default_str();
  AuditFlags audit;
  auto* audit_command = app.add_subcommand("audit", "The audit log: who changed what, when");
  audit_command->add_option("--model", audit.model, "Only entries about this model (its versions, aliases, endpoints)");
  audit_command->add_option("--since", audit.since, "From a date (2026-12-01, UTC) or a duration back (24h, 7d)");
  audit_command->add_option("--limit", audit.limit, "Only the newest N entries");

  bool lineage_downstream = false;
  bool lineage_dot = false;
  auto* lineage_command = app.add_subcommand(
      "lineage",
      "What a version, run or data set came from (data -> run -> bundle -> version -> aliases, endpoints), or with "
      "--downstream everything built from it");
  lineage_command->add_option("REF", reference, "NAME@VERSION (or NAME@ALIAS, NAME), a run id, or a data file")
      ->required();
  lineage_command->add_flag("--downstream", lineage_downstream, "What was built from REF instead");
  lineage_command->add_flag("--dot", lineage_dot, "Graphviz DOT instead of the tree");

  GateFlags gate;
  auto* gate_command = app.add_subcommand(
      "gate",
      "Hold a candidate version to thresholds on a metric against a baseline, overall and per slice; exit 0 "
      "passed, 1 failed, 2 could not run; recorded with both versions");
  gate_command->add_option("REF", gate.reference, "The candidate: NAME@VERSION (or a bundle file)")->required();
  gate_command->add_option("--baseline", gate.baseline, "What it must not fall behind: NAME@VERSION")->required();
  gate_command->add_option("--data", gate.data_path, "Labelled rows (CSV)")->required();
  gate_command->add_option("--metric", gate.criteria.metric, "auc, log_loss, accuracy, f1, rmse, r2, ...")->required();
  gate_command->add_option("--min", gate.criteria.min, "The candidate's value must be at least this");
  gate_command->add_option("--max", gate.criteria.max, "... at most this");
  gate_command->add_option("--max-drop", gate.criteria.max_drop,
                           "Worse than the baseline by at most this (in the metric's direction)");
  gate_command->add_option("--max-relative-drop", gate.criteria.max_relative_drop,
                           "Worse by at most this share of the baseline's value (0.01 = 1%)");
  gate_command->add_option("--slice", gate.slice, "Check every value of this column too");

  DeployFlags deploy;
  auto* deploy_command = app.add_subcommand(
      "deploy",
      "Route an endpoint (the name clients call: /v2/models/ENDPOINT/infer) to a model version, all of its "
      "traffic or a canary share; running servers follow within a second");
  deploy_command->add_option("ENDPOINT", deploy.endpoint, "Endpoint name (created on its first deploy)")->required();
  deploy_command->add_option("REF", deploy.reference, "NAME@VERSION (or NAME@ALIAS, NAME), pinned to its version now");
  deploy_command->add_option("--canary", deploy.canary,
                             "Send this percentage of requests to REF, the rest to the endpoint's current version");
  deploy_command->add_flag("--promote", deploy.promote, "Send all traffic to the canary");
  deploy_command->add_option("--steps", deploy.steps,
                             "A rollout: the canary's share step by step, e.g. 10,50,100; a running server moves it "
                             "on when a step's analysis passes and rolls back when one fails");
  deploy_command->add_option("--interval", deploy.interval, "With --steps: each step's length")->capture_default_str();
  deploy_command
      ->add_option("--max-error-rate-increase", deploy.criteria.max_error_rate_increase,
                   "With --steps: the canary's error rate may exceed the stable version's by this much")
      ->capture_default_str();
  deploy_command
      ->add_option("--max-p99-ratio", deploy.criteria.max_p99_ratio,
                   "With --steps: the canary's p99 may be this many times the stable version's (or within 1 ms)")
      ->capture_default_str();
  deploy_command
      ->add_option("--max-divergence", deploy.criteria.max_divergence,
                   "With --steps: the largest Jensen-Shannon distance between their score distributions")
      ->capture_default_str();
  deploy_command
      ->add_option("--min-requests", deploy.criteria.min_requests,
                   "With --steps: requests each version needs in a step before it is judged")
      ->capture_default_str();
  deploy_command->add_option(
      "--fallback", deploy.fallback,
      "What answers a request a version fails or does not answer within --deadline (marked degraded): "
      "main (the main version, for another version's failure), previous (the rollback target), cached "
      "(the last answer to the same request), constant:VALUE (a number, or a class label), or none");
  deploy_command->add_option("--deadline", deploy.deadline,
                             "A version that has not answered within this (e.g. 200ms) is answered by the fallback, "
                             "or with 504 without one; 0 removes the deadline");
  deploy_command->add_option("--slo", deploy.slo,
                             "The endpoint's service-level objective, as optimize --slo reads it (e.g. "
                             "\"p99<=20ms@500rps\"); shown by describe; \"\" removes it");
  deploy_command->add_option("--shadow", deploy.shadow,
                             "Mirror requests to this version (NAME@VERSION): its answers are compared with the live "
                             "ones in /metrics and never returned");
  deploy_command->add_option("--shadow-percent", deploy.shadow_percent, "With --shadow: the share of requests mirrored")
      ->capture_default_str();
  deploy_command->add_flag("--no-shadow", deploy.no_shadow, "Stop mirroring requests");
  deploy_command->add_option("--owner", deploy.owner, "Who answers for the endpoint");
  deploy_command->add_option("--gate-data", deploy.gate.data_path,
                             "Run a gate first: REF against the endpoint's main version on these labelled rows; a "
                             "failed gate refuses the deploy");
  deploy_command->add_option("--gate-metric", deploy.gate.criteria.metric, "With --gate-data: the metric");
  deploy_command->add_option("--gate-min", deploy.gate.criteria.min, "With --gate-data: as gate --min");
  deploy_command->add_option("--gate-max", deploy.gate.criteria.max, "With --gate-data: as gate --max");
  deploy_command->add_option("--gate-max-drop", deploy.gate.criteria.max_drop, "With --gate-data: as gate --max-drop");
  deploy_command->add_option("--gate-max-relative-drop", deploy.gate.criteria.max_relative_drop,
                             "With --gate-data: as gate --max-relative-drop");
  deploy_command->add_option("--gate-slice", deploy.gate.slice, "With --gate-data: as gate --slice");
  deploy_command
      ->add_option("--require-approval", deploy.require_approval,
                   "yes: only approved versions may be deployed to it (slipway approve); no: any")
      ->check(CLI::IsMember({"yes", "no"}));
  std::string endpoint_name;
  auto* rollback_command =
      app.add_subcommand("rollback", "Return an endpoint to the configuration its last change replaced");
  rollback_command->add_option("ENDPOINT", endpoint_name, "Endpoint name")->required();
  auto* endpoints_command = app.add_subcommand("endpoints", "List endpoints: routes, rollback target, revision");
  std::string describe_markdown;
  auto* describe_command = app.add_subcommand(
      "describe",
      "What an on-call engineer needs about an endpoint: versions and shares, inputs, evaluation, rollout, "
      "how to roll back");
  describe_command->add_option("ENDPOINT", endpoint_name, "Endpoint name")->required();
  describe_command->add_option("--markdown", describe_markdown, "Also write it to this file as a Markdown page");
  auto* rollout_command = app.add_subcommand("rollout", "Rollouts in steps");
  rollout_command->require_subcommand(1);
  auto* rollout_status_command =
      rollout_command->add_subcommand("status", "The endpoint's rollout: step, shares, last analysis, verdict");
  rollout_status_command->add_option("ENDPOINT", endpoint_name, "Endpoint name")->required();

  ServeOptions serve_options;
  auto* serve_command = app.add_subcommand("serve", "Serve every registered model over KServe v2 HTTP");
  serve_command->add_option("--host", serve_options.host, "Address to listen on")->capture_default_str();
  serve_command->add_option("--port", serve_options.port, "Port (0 picks a free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve_command->add_option("--threads", serve_options.threads, "Inference worker threads (default: all cores)");
  add_engine_flags(serve_command, serve_options.llm, "llm-");
  serve_command->add_option("--io-threads", serve_options.io_threads, "Threads running the HTTP event loop")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  serve_command
      ->add_option("--config", serve_options.config_path,
                   "YAML file of serving configs: {defaults: {KEY: VALUE}, models: {NAME: {KEY: VALUE}}}")
      ->check(CLI::ExistingFile);
  serve_command->add_option("--cache", serve_options.cached_models,
                            "Keep this model's infer responses in the response cache (repeatable)");
  serve_command->add_option("--cache-bytes", serve_options.cache_bytes, "Response cache size (LRU)")
      ->capture_default_str();
  serve_command->add_option("--request-log-dir", serve_options.request_log_dir,
                            "Where sampled requests are logged (serving-config --request-log-rate; default: "
                            "<workspace>/request_log)");
  serve_command
      ->add_option("--request-log-retention-hours", serve_options.request_log_retention_hours,
                   "Request log segments older than this are deleted")
      ->capture_default_str()
      ->check(CLI::Range(1, 24 * 3650));
  serve_command
      ->add_option("--request-log-max-mb", serve_options.request_log_max_mb,
                   "The request log's size on disk, at most (the oldest segments go first)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 24));
  serve_command
      ->add_option("--fallback-cache-bytes", serve_options.fallback_cache_bytes,
                   "Memory for the answers kept for endpoints whose fallback is cached (LRU)")
      ->capture_default_str();
  serve_command->add_option("--memory-budget-mb", serve_options.memory_budget_mb,
                            "Most memory loaded models may take; the least recently used unload first (0: none)");
  serve_command->add_option("--max-pending", serve_options.max_pending,
                            "Requests waiting for a worker before new ones get 429 (default: 64 per worker)");
  serve_command
      ->add_option("--max-connections", serve_options.max_connections,
                   "Open connections at most; at the limit the longest-idle one is closed for a new one "
                   "(default: the open-file limit less 256)")
      ->check(CLI::Range(0, 10'000'000));
  serve_command
      ->add_option("--max-request-memory-mb", serve_options.max_request_memory_mb,
                   "Memory for request bodies being read or handled, each counted at 8 times its size (what a "
                   "parsed JSON body takes); past it a request gets 503 with Retry-After (default: 1024, two "
                   "requests at the 64 MiB body limit)")
      ->check(CLI::Range(512, 1'048'576));  // at least one body at the 64 MiB limit, counted 8 times
  serve_command->add_flag("--lazy", serve_options.lazy, "Load each model on its first request, not at start");
  serve_command->add_flag("--auth", serve_options.auth,
                          "Require bearer tokens (`slipway token create`): predict, read, deploy or admin");
  ServingConfigFlags serve_defaults;
  // One flag per declared serving config key (serve::serving_config_declarations()): --max-batch-size
  // for max_batch_size; a list key takes one item per flag, named in the singular
  // (--preferred-batch-size). `serve` leaves out `cache`, its --cache names models.
  auto add_serving_config_flags = [](CLI::App* command, ServingConfigFlags& flags, std::string_view scope) {
    for (const auto& key : slipway::serve::serving_config_declarations()) {
      if (command->get_option_no_throw(serving_config_flag(key)) != nullptr) continue;
      std::string help = key.help + " [" + std::string(slipway::config_allowed_text(key)) + "; default " +
                         (key.default_value.empty() ? "none" : key.default_value) + "]" + std::string(scope);
      if (key.type == slipway::ConfigType::kIntList) {
        command->add_option(serving_config_flag(key), flags.lists[key.name], help + " (repeatable)");
      } else {
        command->add_option(serving_config_flag(key), flags.values[key.name], help);
      }
    }
  };
  add_serving_config_flags(serve_command, serve_defaults, " [default of every model]");

  std::string config_model;
  bool config_reset = false;
  ServingConfigFlags model_config;
  auto* serving_config_command =
      app.add_subcommand("serving-config",
                         "Show or set how a model is served (batching, cache, idle unload, warm-up); stored in the "
                         "registry, picked up by running servers");
  serving_config_command->add_option("NAME", config_model, "Model name (required unless --keys)");
  add_serving_config_flags(serving_config_command, model_config, "");
  serving_config_command->add_flag("--reset", config_reset, "Replace the stored config with the keys given");
  bool config_keys = false;
  bool config_markdown = false;
  serving_config_command->add_flag("--keys", config_keys, "List the serving config keys (no NAME)");
  serving_config_command->add_flag("--markdown", config_markdown, "With --keys: print docs/serving-config.md");

  std::string token_name;
  std::string token_role = "predict";
  std::string token_id;
  auto* token_command = app.add_subcommand("token", "Manage API tokens for `serve --auth`");
  token_command->require_subcommand(1);
  auto* token_create = token_command->add_subcommand("create", "Create a token; its secret is printed once");
  token_create->add_option("NAME", token_name, "What the token is for (e.g. the client's name)")->required();
  token_create
      ->add_option("--role", token_role,
                   "predict (inference), read (+ /api reads and run tracking), deploy (+ /api changes, load/unload), "
                   "admin (+ approvals, metrics)")
      ->check(CLI::IsMember({"predict", "read", "deploy", "admin"}))
      ->capture_default_str();
  auto* token_list = token_command->add_subcommand("list", "List tokens (never their secrets)");
  auto* token_revoke = token_command->add_subcommand("revoke", "Revoke a token");
  token_revoke->add_option("ID", token_id, "Token id (from `slipway token list`)")->required();

  ImportOptions import_options;
  auto* import_command =
      app.add_subcommand("import", "Import a model trained elsewhere (XGBoost JSON, ONNX MLPs, GGUF LLMs)");
  import_command->add_option("FORMAT", import_options.format, "Model format: xgboost, onnx or gguf")->required();
  import_command
      ->add_option("MODEL", import_options.model_path,
                   "The model file (XGBoost: save_model(\"m.json\"); ONNX: torch.onnx.export's file)")
      ->required();
  import_command
      ->add_option("--labels", import_options.class_labels,
                   "ONNX classifiers: the class labels in output order, comma-separated (default 0, 1, ...)")
      ->delimiter(',');
  import_command->add_option("--register", import_options.register_as,
                             "Register the bundle as a new version of this model");
  import_command->add_option("--schema", import_options.schema_path,
                             "CSV whose header names the features in order (when the model file has no names)");
  import_command
      ->add_option("--target", import_options.target, "Label column name, skipped in --schema and used by eval")
      ->capture_default_str();
  import_command->add_option("--out", import_options.bundle_out, "Also write the bundle file here");

  LlmCommands llm_commands;
  add_llm_commands(app, llm_commands);

  ExportOptions export_options;
  auto* export_command = app.add_subcommand(
      "export", "Write a model in another system's format: ONNX (MLPs, tree ensembles) or XGBoost JSON (trees)");
  export_command->add_option("REF", export_options.reference, kReferenceHelp)->required();
  export_command->add_option("--format", export_options.format, "onnx or xgboost-json")->required();
  export_command->add_option("--out", export_options.out, "The file to write")->required();

  bool importance = false;
  auto* explain_command =
      app.add_subcommand("explain", "Explain a tree model: TreeSHAP contributions per row, or feature importance");
  explain_command->add_option("REF", reference, kReferenceHelp)->required();
  explain_command->add_option("--data", data_path, "Rows to explain (CSV)");
  explain_command->add_option("--out", out, "Output CSV (default: stdout)");
  explain_command->add_flag("--importance", importance, "Print feature importance (splits, gain, cover) instead");

  ProfileFlags profile;
  auto* profile_command = app.add_subcommand(
      "profile", "Where a model's serving time goes: request parsing, preprocessing, model, response, transport");
  profile_command->add_option("REF", profile.reference, kReferenceHelp)->required();
  profile_command->add_option("--data", profile.data_path, "Rows to send (CSV; the target column is skipped)")
      ->required();
  profile_command->add_option("--rows-per-request", profile.rows_per_request, "Request sizes, e.g. 1,8,64")
      ->capture_default_str();
  profile_command->add_option("--threads", profile.threads, "The server's worker threads")->capture_default_str();
  profile_command
      ->add_option("--duration", profile.duration,
                   "Per request size: the time measured through the server, for latency and again for throughput")
      ->capture_default_str();
  bool profile_no_progress = false;
  profile_command->add_flag("--no-progress", profile_no_progress, "No progress bar");

  OptimizeFlags optimize_flags;
  auto* optimize_command = app.add_subcommand(
      "optimize", "Build optimized candidates of a model, measure each against an SLO, and recommend one");
  optimize_command->add_option("REF", optimize_flags.reference, kReferenceHelp)->required();
  optimize_command->add_option("--data", optimize_flags.data_path,
                               "Labelled golden rows (CSV): quality and requests (tabular models; required)");
  optimize_command->add_option("--slice", optimize_flags.slice,
                               "Also hold each slice of this column to the quality SLO");
  optimize_command->add_option("--train", optimize_flags.train_path,
                               "Labelled rows to retrain on, for the features and distill candidates (CSV)");
  optimize_command->add_option("--calibration", optimize_flags.calibration_path,
                               "MLPs: rows to calibrate int8 activation scales on (CSV; max and 99.99th percentile)");
  optimize_command->add_option("--unlabeled", optimize_flags.unlabeled_path,
                               "More rows for distillation, labelled by the model itself (CSV)");
  optimize_command->add_option("--alpha", optimize_flags.alpha, "Distillation: the teacher's weight against the label")
      ->capture_default_str();
  optimize_command
      ->add_option("--temperature", optimize_flags.temperature, "Distillation: softens the teacher's probabilities")
      ->capture_default_str();
  optimize_command->add_option(
      "--slo", optimize_flags.slo,
      "Objectives, e.g. 'p95<=5ms@2000rps,cost<=0.02/1k,auc_drop<=0.005'; for a GGUF LLM "
      "'ttft_p95<=500ms,itl_p95<=50ms,cost<=0.05/1k,top1>=0.9' (cost per 1,000 output tokens)");
  optimize_command->add_option("--price-per-hour", optimize_flags.price_per_hour,
                               "What the machine costs per hour, for cost per 1,000 predictions");
  optimize_command->add_option(
      "--candidates", optimize_flags.candidates,
      "Techniques to try (default: all but tensor-parallel): quantize, prune, features, distill, int8, "
      "sparse, serving; for a GGUF LLM quantize, kv, speculative, batching, tensor-parallel");
  optimize_command->add_option("--tolerance", optimize_flags.tolerance,
                               "Refuse to recommend a candidate whose outputs differ from the baseline's by more");
  optimize_command
      ->add_option("--repeat-rate", optimize_flags.repeat_rate,
                   "Share of requests that repeat an earlier one byte for byte (the others are unique); above 0 "
                   "the serving sweep adds the response cache")
      ->capture_default_str();
  optimize_command->add_option("--duration", optimize_flags.duration, "Each load test's length")->capture_default_str();
  optimize_command->add_option("--budget", optimize_flags.budget,
                               "The whole run's time (10m, 90s): candidates not built or measured by then are rows "
                               "saying so");
  optimize_command->add_option(
      "--threads", optimize_flags.threads,
      "The measuring server's worker threads (default 1); an LLM engine's (default: all cores)");
  optimize_command->add_option("--clients", optimize_flags.clients, "GGUF LLMs: closed-loop clients")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  optimize_command->add_option("--requests", optimize_flags.requests, "GGUF LLMs: requests per candidate")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  optimize_command->add_option("--prompt-tokens", optimize_flags.prompt_tokens, "GGUF LLMs: prompt tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  optimize_command->add_option("--output-tokens", optimize_flags.output_tokens, "GGUF LLMs: output tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  optimize_command->add_option("--out-dir", optimize_flags.out_dir,
                               "GGUF LLMs: keep the quantized candidates here (default: not kept)");
  optimize_command->add_flag("--register", optimize_flags.register_candidates,
                             "Register each candidate that meets every SLO clause as a new version of the model "
                             "(without a production alias, NAME then resolves to the newest)");
  optimize_command->add_flag("--resume", optimize_flags.resume,
                             "With --register: reuse the candidates an earlier run registered against the same "
                             "baseline and SLO instead of measuring them again");
  optimize_command->add_option("--markdown", optimize_flags.markdown_path, "Also write the table here as Markdown");
  bool optimize_no_progress = false;
  optimize_command->add_flag("--no-progress", optimize_no_progress, "No progress bar");

  LoadTestFlags load;
  auto* loadtest_command = app.add_subcommand(
      "loadtest",
      "Send HTTP load to a URL at a fixed rate (open loop) or concurrency (closed loop) and report latency");
  loadtest_command->add_option("URL", load.url, "e.g. http://127.0.0.1:8080/v2/models/NAME/infer")->required();
  loadtest_command
      ->add_option("--rate", load.rate,
                   "Open loop: requests per second (latency counts from each request's intended send time)")
      ->check(CLI::NonNegativeNumber);
  loadtest_command->add_option("--concurrency", load.concurrency, "Closed loop: requests kept outstanding")
      ->check(CLI::NonNegativeNumber);
  loadtest_command->add_option("--arrival", load.arrival, "Open-loop arrivals: constant or poisson")
      ->check(CLI::IsMember({"constant", "poisson"}))
      ->capture_default_str();
  loadtest_command->add_option("--duration", load.duration, "Measured time: 30s, 500ms, 2m")->capture_default_str();
  loadtest_command->add_option("--warmup", load.warmup, "Load sent before measuring")->capture_default_str();
  loadtest_command->add_option("--timeout", load.timeout, "Per request, from its intended send time")
      ->capture_default_str();
  loadtest_command->add_option("--body", load.body_path, "POST this file's bytes (default: GET)");
  loadtest_command->add_option("--csv", load.csv_path, "POST KServe v2 requests built from this CSV's rows, in turn");
  loadtest_command->add_option("--rows-per-request", load.rows_per_request, "Rows per request with --csv")
      ->capture_default_str();
  loadtest_command->add_option("--skip", load.skip_columns, "CSV column not to send (the label, say; repeatable)");
  loadtest_command->add_option("--header", load.headers, "Extra header 'Name: value' (repeatable)");
  loadtest_command->add_option("--connections", load.connections, "Open loop: most connections opened")
      ->capture_default_str();
  loadtest_command->add_option("--threads", load.threads, "Generator threads")->capture_default_str();
  loadtest_command->add_option("--slo", load.slos,
                               "Latency objective such as 'p95<=50ms'; exit 1 when missed (repeatable)");
  loadtest_command->add_option("--seed", load.seed, "Seed of Poisson arrivals and of repeats")->capture_default_str();
  loadtest_command->add_option("--repeat-rate", load.repeat_rate,
                               "Share of requests that repeat one of the last 256 sent, byte for byte (a response "
                               "cache can answer them); each other gets a unique KServe v2 \"id\" (JSON bodies only; "
                               "default: the bodies as given, in turn)");
  bool load_no_progress = false;
  loadtest_command->add_flag("--no-progress", load_no_progress, "No progress line");

  bool repair = false;
  auto* verify_command = app.add_subcommand(
      "verify",
      "Check the workspace: artifact hashes, every row's artifact present, orphans, runs left RUNNING by a "
      "dead process; exit 1 when it finds a problem");
  verify_command->add_flag("--repair", repair,
                           "Mark runs whose process is gone INTERRUPTED, move corrupt artifacts aside, and upgrade an "
                           "old workspace's schema");

  bool markdown = false;
  auto* params_command = app.add_subcommand("params", "List the training parameters");
  params_command->add_flag("--markdown", markdown, "Print docs/parameters.md");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version exit 0; every usage error exits 2, as docs/cli.md promises.
    // Without a command, the first word CLI11 could not place is a mistyped one: named with a
    // suggestion instead of CLI11's "A subcommand is required".
    bool no_command = app.get_subcommands().empty();
    for (const auto& word : app.remaining()) {
      if (!no_command || word.empty() || word[0] == '-') continue;
      std::vector<std::string> commands;
      for (const auto* command : app.get_subcommands({})) commands.push_back(command->get_name());
      std::cerr << "unknown command '" << word << "'";
      if (auto suggestion = slipway::closest_name(word, commands); suggestion && *suggestion != word) {
        std::cerr << "; did you mean '" << *suggestion << "'?";
      }
      std::cerr << "\nRun with --help for the commands.\n";
      return 2;
    }
    return app.exit(error) == 0 ? 0 : 2;
  }
  if (quiet) slipway::set_log_level(slipway::LogLevel::kWarn);
  if (loadtest_command->parsed()) {
    load.progress = !load_no_progress;
    return run_loadtest(global, load);
  }

  if (init->parsed()) return run_init(global);
  if (train_command->parsed()) {
    std::vector<std::string> given;
    for (const auto* option : train_command->get_options()) {
      if (option->count() > 0) given.push_back(option->get_lnames().empty() ? "" : option->get_lnames().front());
    }
    train.progress = !no_progress;
    train.use_cache = !train_no_cache;
    return run_train(global, train, given);
  }
  if (tune_command->parsed()) {
    std::vector<std::string> given;
    for (const auto* option : tune_command->get_options()) {
      if (option->count() > 0) given.push_back(option->get_lnames().empty() ? "" : option->get_lnames().front());
    }
    tune.progress = !tune_no_progress;
    tune.use_cache = !tune_no_cache;
    return run_tune(global, tune, given);
  }
  if (app.got_subcommand("studies")) return run_studies(global);
  if (study_show->parsed()) return run_study_show(global, study_name, study_html);
  if (study_narrow->parsed()) return run_study_narrow(global, narrow);
  if (eval_command->parsed()) return run_eval(global, reference, data_path, slice, !eval_no_cache);
  if (compare_command->parsed()) return run_compare(global, compare);
  if (optimize_command->parsed()) {
    optimize_flags.progress = !optimize_no_progress;
    return run_optimize(global, optimize_flags);
  }
  if (profile_command->parsed()) {
    profile.progress = !profile_no_progress;
    return run_profile(global, profile);
  }
  if (monitor_command->parsed()) return run_monitor(global, monitor);
  if (labels_ingest->parsed()) return run_labels_ingest(global, label_flags);
  if (policy_command->parsed()) {
    if (warm_start || no_warm_start) policy.warm_start = warm_start;
    return run_retrain_policy(global, policy);
  }
  if (history_command->parsed()) return run_retrain_history(global, history_model, history_limit);
  if (retrain_command->parsed()) {
    retrain.progress = !retrain_no_progress;
    return run_retrain(global, retrain);
  }
  if (batch_status_command->parsed()) return run_batch_status(global, batch_folder);
  if (batch_command->parsed()) {
    if (batch.out.empty()) return fail(slipway::invalid_argument("--out is required: the job's folder"));
    batch.progress = !batch_no_progress;
    return run_batch(global, batch);
  }
  if (predict_command->parsed()) return run_predict(global, reference, data_path, out, id_column);
  if (models_command->parsed()) return run_models(global);
  if (versions_command->parsed()) return run_versions(global, model_name);
  if (runs_command->parsed()) return run_runs(global, runs);
  if (show_command->parsed()) return run_show(global, run_id);
  if (alias_command->parsed()) return run_alias(global, reference, alias);
  if (deploy_command->parsed()) return run_deploy(global, deploy);
  if (annotate_command->parsed()) return run_annotate(global, annotate);
  if (gate_command->parsed()) return run_gate(global, gate);
  if (lineage_command->parsed()) return run_lineage(global, reference, lineage_downstream, lineage_dot);
  if (approve_command->parsed()) return run_approve(global, reference, approve_note, revoke_approval);
  if (audit_command->parsed()) return run_audit(global, audit);
  if (retire_command->parsed()) return run_retire(global, reference);
  if (gc_command->parsed()) return run_gc(global, gc_apply, gc_min_age);
  if (reproduce_command->parsed()) return run_reproduce(global, reproduce_run_id);
  if (rollback_command->parsed()) return run_rollback(global, endpoint_name);
  if (endpoints_command->parsed()) return run_endpoints(global);
  if (rollout_status_command->parsed()) return run_rollout_status(global, endpoint_name);
  if (describe_command->parsed()) return run_describe(global, endpoint_name, describe_markdown);
  // The serving config keys given on a command line.
  auto given_keys = [](CLI::App* command, ServingConfigFlags& flags) {
    for (const auto& key : slipway::serve::serving_config_declarations()) {
      if (flags.values.count(key.name) == 0 && flags.lists.count(key.name) == 0) continue;  // serve's --cache
      auto* option = command->get_option_no_throw(serving_config_flag(key));
      if (option != nullptr && option->count() > 0) flags.given_keys.push_back(key.name);
    }
  };
  if (serve_command->parsed()) {
    given_keys(serve_command, serve_defaults);
    return run_serve(global, serve_options, serve_defaults);
  }
  if (serving_config_command->parsed()) {
    if (config_keys) return run_serving_config_keys(global, config_markdown);
    if (config_model.empty()) {
      std::cerr << "serving-config needs a model NAME (or --keys to list the keys)\n";
      return 2;
    }
    given_keys(serving_config_command, model_config);
    return run_serving_config(global, config_model, model_config, config_reset);
  }
  if (token_create->parsed()) return run_token_create(global, token_name, token_role);
  if (token_list->parsed()) return run_token_list(global);
  if (token_revoke->parsed()) return run_token_revoke(global, token_id);
  if (params_command->parsed()) return run_params(global, markdown);
  if (verify_command->parsed()) return run_verify(global, repair);
  if (auto code = run_llm_command(global, llm_commands)) return *code;
  if (import_command->parsed()) {
    if (import_command->get_option("--register")->count() > 0 && import_options.register_as.empty()) {
      return fail(slipway::invalid_argument("--register needs a model name"));
    }
    return run_import(global, import_options);
  }
  if (export_command->parsed()) return run_export(global, export_options);
  if (explain_command->parsed()) return run_explain(global, reference, data_path, out, importance);
  return 1;
}
