// slipway train: spec file and flags into a pipeline::TrainSpec, pipeline::run_training, the outcome.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <ostream>
#include <thread>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

// Overlays the flags given on the command line on a spec read from a file.
void overlay(pipeline::TrainSpec& base, const TrainOptions& flags, const std::vector<std::string>& given) {
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
  if (was_given("threshold")) base.threshold = flags.threshold;
  if (was_given("threshold-fraction")) base.threshold_fraction = flags.threshold_fraction;
  base.params.insert(base.params.end(), flags.params.begin(), flags.params.end());
  base.ignore.insert(base.ignore.end(), flags.ignore.begin(), flags.ignore.end());
}

struct TrainResult : CommandResult {
  pipeline::TrainOutcome outcome;

  void write_json(JsonWriter& json) const override {
    const auto& summary = outcome.summary;
    const auto& leakage = outcome.leakage;
    json.begin_object();
    json.key("run_id").value(outcome.run_id);
    json.key("cached_from").value(outcome.cached_from);
    json.key("model").value(outcome.spec.model);
    if (outcome.spec.model == "gbdt" || outcome.spec.model == "mlp") {
      json.key(outcome.spec.model == "mlp" ? "epochs" : "rounds").value(summary.iterations);
      json.key("best_round").value(summary.best_round >= 0 ? summary.best_round + 1 : 0);
      json.key("stopped_early").value(summary.stopped_early);
      json.key("validation_rows").value(static_cast<std::uint64_t>(summary.validation_rows));
    }
    json.key("split").value(outcome.split_description);
    json.key("train_rows").value(static_cast<std::uint64_t>(summary.rows_used));
    json.key("test_rows").value(static_cast<std::uint64_t>(outcome.evaluation.rows));
    json.key("train_seconds").value(outcome.train_seconds);
    json.key("leakage").begin_object();
    json.key("duplicate_test_rows").value(static_cast<std::uint64_t>(leakage.duplicate_test_rows));
    json.key("groups_on_both_sides").value(static_cast<std::uint64_t>(leakage.groups_on_both_sides));
    json.key("test_rows_not_later").value(static_cast<std::uint64_t>(leakage.test_rows_not_later));
    json.end_object();
    json.key("metrics");
    pipeline::write_evaluation_json(json, outcome.evaluation);
    if (summary.bundle != nullptr && summary.bundle->task() == model::Task::kBinaryClassification) {
      json.key("decision_threshold").value(summary.bundle->manifest().decision_threshold);
      json.key("threshold_rule").value(summary.bundle->manifest().threshold_rule);
    }
    json.key("bundle_sha256").value(outcome.bundle_sha256);
    write_registered_json(json, outcome.registered);
    json.end_object();
  }

  void write_text(std::ostream& out) const override {
    const auto& summary = outcome.summary;
    const auto& leakage = outcome.leakage;
    out << "run        " << outcome.run_id << "\n";
    if (!outcome.cached_from.empty()) {
      out << "cached     the bundle of run " << outcome.cached_from
          << " (the same data, code, spec and seed); --no-cache trains again\n";
    }
    if (outcome.spec.model == "gbdt" || outcome.spec.model == "mlp") {
      bool epochs = outcome.spec.model == "mlp";
      out << (epochs ? "epochs     " : "rounds     ") << summary.iterations;
      if (summary.best_round >= 0) {
        out << " (best validation " << summary.round_metric << (epochs ? " at epoch " : " at round ")
            << summary.best_round + 1 << (summary.stopped_early ? ", stopped early" : "") << "; "
            << summary.validation_rows << " validation rows)";
      }
      out << "\n";
    }
    out << "split      " << outcome.split_description << ": " << summary.rows_used << " train rows, "
        << outcome.evaluation.rows << " test rows\n";
    out << "leakage    " << leakage.duplicate_test_rows << " test rows duplicated in train";
    if (outcome.spec.split.starts_with("group:"))
      out << ", " << leakage.groups_on_both_sides << " groups on both sides";
    if (outcome.spec.split.starts_with("time:"))
      out << ", " << leakage.test_rows_not_later << " test rows not later than train";
    out << "\n\n";
    print_evaluation(out, outcome.evaluation);
    if (summary.bundle != nullptr && summary.bundle->task() == model::Task::kBinaryClassification) {
      const auto& manifest = summary.bundle->manifest();
      out << "\nthreshold  " << fmt::format("{:.6g}", manifest.decision_threshold)
          << (manifest.threshold_rule.empty() ? std::string(" (precision, recall, f1 and accuracy at it)")
                                              : " (" + manifest.threshold_rule + " on held-out training rows)")
          << "\n";
    }
    out << "\nbundle     sha256:" << outcome.bundle_sha256 << "\n";
    if (outcome.registered) {
      out << "registered " << outcome.registered->model << " version " << outcome.registered->version << "\n";
    }
  }
};

// Ctrl-C (SIGINT) or SIGTERM while training: the run is marked INTERRUPTED, with how to resume
// it, instead of staying RUNNING until `slipway verify --repair` finds its process gone; then the
// signal is raised again with its default action, so a calling shell or make sees death by it.
// The handler only writes a byte to a pipe; a thread of its own opens the workspace and marks the
// run. A second Ctrl-C while the run is being marked ends at once, but not one that comes within
// kRepeatGraceMs of the first: that is the same signal delivered twice (`timeout` sends it to the
// process and then to its process group), which must not kill the run before it is marked.
class InterruptedRunMarker {
 public:
  explicit InterruptedRunMarker(const GlobalOptions& global) : global_(global) {
    if (::pipe2(pipe_, O_CLOEXEC) != 0) return;  // no marking then; the default handling stays
    wake_fd.store(pipe_[1]);
    first_signal_ms.store(0);
    struct sigaction action {};
    action.sa_handler = on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_interrupt_);
    sigaction(SIGTERM, &action, &previous_terminate_);
    watcher_ = std::thread([this] { watch(); });
  }
  InterruptedRunMarker(const InterruptedRunMarker&) = delete;
  InterruptedRunMarker& operator=(const InterruptedRunMarker&) = delete;
  ~InterruptedRunMarker() {
    if (!watcher_.joinable()) return;
    sigaction(SIGINT, &previous_interrupt_, nullptr);
    sigaction(SIGTERM, &previous_terminate_, nullptr);
    char stop = kStop;
    (void)!::write(pipe_[1], &stop, 1);
    watcher_.join();
    wake_fd.store(-1);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }

  void set_run(const std::string& run_id) {
    std::lock_guard lock(mutex_);
    run_id_ = run_id;
  }

 private:
  static constexpr char kStop = 'q';  // not a signal's number
  static constexpr std::int64_t kRepeatGraceMs = 200;
  static inline std::atomic<int> wake_fd{-1};
  static inline std::atomic<std::int64_t> first_signal_ms{0};
  static_assert(std::atomic<std::int64_t>::is_always_lock_free, "used in a signal handler");

  // Milliseconds on the monotonic clock, never 0 (0 means no signal yet). clock_gettime is
  // async-signal-safe.
  static std::int64_t monotonic_ms() {
    struct timespec now {};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000 + 1;
  }

  static void on_signal(int signal) {
    int saved = errno;
    std::int64_t now = monotonic_ms();
    std::int64_t first = 0;
    if (first_signal_ms.compare_exchange_strong(first, now)) {
      char byte = static_cast<char>(signal);
      (void)!::write(wake_fd.load(), &byte, 1);
    } else if (now - first >= kRepeatGraceMs) {
      std::signal(signal, SIG_DFL);
      std::raise(signal);
    }
    errno = saved;
  }

  void watch() {
    char byte = kStop;
    while (::read(pipe_[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (byte == kStop) return;
    int signal = static_cast<unsigned char>(byte);
    std::string run_id;
    {
      std::lock_guard lock(mutex_);
      run_id = run_id_;
    }
    std::string message = fmt::format("interrupted ({})", signal == SIGINT ? "SIGINT" : "SIGTERM");
    if (!run_id.empty()) message += "; " + mark(run_id, signal == SIGINT ? "SIGINT" : "SIGTERM");
    std::cerr << "\n" << message << "\n" << std::flush;
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    std::_Exit(128 + signal);  // if the signal was blocked on this thread
  }

  // Marks the run and says what became of it.
  std::string mark(const std::string& run_id, const std::string& signal_name) {
    auto store = open_workspace(global_, WorkspaceAccess::kWrite);
    if (!store.ok()) return "run " + run_id + " left RUNNING: " + store.status().message();
    return pipeline::mark_run_interrupted(**store, run_id, signal_name);
  }

  const GlobalOptions& global_;
  int pipe_[2] = {-1, -1};
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
  std::mutex mutex_;
  std::string run_id_;
  std::thread watcher_;
};

Result<TrainResult> train(const GlobalOptions& global, const TrainOptions& flags,
                          const std::vector<std::string>& flags_given) {
  auto given = [&](const char* name) {
    return std::find(flags_given.begin(), flags_given.end(), name) != flags_given.end();
  };
  if (given("register") && flags.register_as.empty()) return invalid_argument("--register needs a model name");
  if (given("resume") && flags.resume_run.empty()) {
    return invalid_argument("--resume needs a run id (slipway runs --status INTERRUPTED lists the runs it can resume)");
  }
  if (given("out") && flags.bundle_out.empty()) return invalid_argument("--out needs a file path");
  if (given("experiment")) SLIPWAY_RETURN_IF_ERROR(registry::validate_experiment_name(flags.experiment));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kCreate));
  pipeline::TrainSpec spec = flags;
  if (flags.resume_run.empty() && !flags.spec_path.empty()) {
    spec = pipeline::TrainSpec{};
    SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec(flags.spec_path, spec));
    overlay(spec, flags, flags_given);
    spec.use_cache = flags.use_cache;
  }
  ProgressBar progress("train", 0, flags.progress && !global.json);
  pipeline::TrainCallbacks callbacks;
  callbacks.on_round = [&](const train::RoundMetrics& latest, int total) {
    progress.set_total(total);
    std::string detail = fmt::format("train {}", format_metric(latest.train));
    if (!std::isnan(latest.validation)) detail += fmt::format(" valid {}", format_metric(latest.validation));
    progress.update(latest.round + 1, detail);
  };
  callbacks.on_fit_done = [&] { progress.finish(); };
  InterruptedRunMarker interrupted(global);
  callbacks.on_run_started = [&](const std::string& run_id) { interrupted.set_run(run_id); };
  SLIPWAY_ASSIGN_OR_RETURN(auto outcome, pipeline::run_training(*store, std::move(spec), callbacks));
  TrainResult result;
  result.outcome = std::move(outcome);
  return result;
}

}  // namespace

int run_train(const GlobalOptions& global, const TrainOptions& flags, const std::vector<std::string>& flags_given) {
  return render(global, train(global, flags, flags_given));
}

}  // namespace slipway::cli
