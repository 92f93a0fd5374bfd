// `slipway tune`, `studies` and `study` as a user runs them: a study end to end, two processes
// working one study, a worker killed with SIGKILL and the study resumed, and refused input.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <thread>

#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::testing {
namespace {

std::vector<std::string> tune_command(const std::string& home, const std::string& study, int trials,
                                      const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv = {slipway_binary(),
                                   "--home",
                                   home,
                                   "tune",
                                   "--study",
                                   study,
                                   "--data",
                                   data_path("lending_club.csv"),
                                   "--target",
                                   "Class",
                                   "--param",
                                   "rounds=10",
                                   "--trials",
                                   std::to_string(trials),
                                   "--threads",
                                   "1"};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

std::vector<registry::StudyTrial> stored_trials(const std::string& home, const std::string& study) {
  auto store = registry::Registry::open(home, {.read_only = true});
  EXPECT_TRUE(store.ok()) << store.status().message();
  if (!store.ok()) return {};
  auto trials = (*store)->studies().trials(study);
  EXPECT_TRUE(trials.ok()) << trials.status().message();
  return trials.ok() ? *trials : std::vector<registry::StudyTrial>{};
}

TEST(TuneCli, RunsShowsListsAndNarrowsAStudy) {
  TempDir home;
  auto tuned = run_command(tune_command(home.path(), "lending", 4, {"--json", "--register", "lending"}));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  EXPECT_NE(tuned.out.find("\"study\":\"lending\""), std::string::npos) << tuned.out;
  EXPECT_NE(tuned.out.find("\"registered\":{\"model\":\"lending\",\"version\":1}"), std::string::npos) << tuned.out;
  // One line per finished trial on stderr.
  for (int trial = 0; trial < 4; ++trial) {
    EXPECT_NE(tuned.err.find("trial   " + std::to_string(trial) + " complete"), std::string::npos) << tuned.err;
  }

  auto listed = run_command({slipway_binary(), "--home", home.path(), "studies"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("lending"), std::string::npos);
  EXPECT_NE(listed.out.find("4 complete"), std::string::npos) << listed.out;

  std::string page = home.file("study.html");
  auto shown = run_command({slipway_binary(), "--home", home.path(), "study", "show", "lending", "--html", page});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto html = read_file(page);
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("<h2>Optimization history</h2>"), std::string::npos);
  EXPECT_NE(html->find("<circle"), std::string::npos);
  EXPECT_NE(shown.out.find("best       trial"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("importance"), std::string::npos) << shown.out;

  std::string space = home.file("narrow.yaml");
  auto narrowed = run_command(
      {slipway_binary(), "--home", home.path(), "study", "narrow", "lending", "--top", "0.5", "--out", space});
  ASSERT_EQ(narrowed.exit_code, 0) << narrowed.err;
  // The narrowed space is a space the next study takes.
  auto next = run_command(tune_command(home.path(), "lending-2", 2, {"--space", space, "--from-study", "lending"}));
  ASSERT_EQ(next.exit_code, 0) << next.err;

  auto missing = run_command({slipway_binary(), "--home", home.path(), "study", "show", "nope"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no study named 'nope'"), std::string::npos) << missing.err;
}

TEST(TuneCli, TwoProcessesWorkOneStudyWithoutLosingOrRepeatingTrials) {
  TempDir home;
  ASSERT_EQ(run_command({slipway_binary(), "--home", home.path(), "init"}).exit_code, 0);
  CommandResult first, second;
  std::thread other([&] { second = run_command(tune_command(home.path(), "shared", 10)); });
  first = run_command(tune_command(home.path(), "shared", 10));
  other.join();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(first.err.find("locked"), std::string::npos) << first.err;
  EXPECT_EQ(second.err.find("locked"), std::string::npos) << second.err;
  auto trials = stored_trials(home.path(), "shared");
  ASSERT_EQ(trials.size(), 10u);
  std::set<std::string> runs;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].number, static_cast<std::int64_t>(i));
    EXPECT_EQ(trials[i].state, "complete") << trials[i].message;
    runs.insert(trials[i].run_id);
  }
  EXPECT_EQ(runs.size(), 10u);
}

TEST(TuneCli, AKilledStudyResumesKeepingItsCompletedTrials) {
  TempDir home;
  ASSERT_EQ(run_command({slipway_binary(), "--home", home.path(), "init"}).exit_code, 0);
  std::vector<std::string> argv = tune_command(home.path(), "killed", 40, {"--no-progress", "-q"});
  argv[std::find(argv.begin(), argv.end(), "rounds=10") - argv.begin()] = "rounds=150";
  ChildProcess worker(argv);
  // Kill it once two trials are complete: the third is then running (or about to be claimed).
  std::size_t complete = 0;
  for (int wait = 0; wait < 600 && complete < 2; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto store = registry::Registry::open(home.path(), {.read_only = true});
    if (!store.ok()) continue;
    auto trials = (*store)->studies().trials("killed");
    if (!trials.ok()) continue;
    complete = static_cast<std::size_t>(
        std::count_if(trials->begin(), trials->end(), [](const auto& trial) { return trial.state == "complete"; }));
  }
  ASSERT_GE(complete, 2u);
  worker.signal(SIGKILL);
  EXPECT_EQ(worker.wait(), 128 + SIGKILL);
  auto before = stored_trials(home.path(), "killed");
  std::size_t complete_before = 0, running_before = 0;
  for (const auto& trial : before) {
    complete_before += trial.state == "complete" ? 1 : 0;
    running_before += trial.state == "running" ? 1 : 0;
  }

  auto resumed = run_command({slipway_binary(), "--home", home.path(), "tune", "--resume", "killed", "--trials",
                              std::to_string(before.size() + 1), "--threads", "1"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto after = stored_trials(home.path(), "killed");
  // Completed trials are kept as they were; a trial the kill left running failed and ran again.
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (before[i].state == "complete") {
      EXPECT_EQ(after[i].state, "complete");
      EXPECT_EQ(after[i].run_id, before[i].run_id);
    }
    if (before[i].state == "running") {
      EXPECT_EQ(after[i].state, "failed");
      EXPECT_TRUE(after[i].message.starts_with("interrupted")) << after[i].message;
      bool retried = std::any_of(after.begin(), after.end(), [&](const auto& trial) {
        return trial.retry_of == before[i].number && trial.state == "complete" && trial.params == before[i].params;
      });
      EXPECT_TRUE(retried) << "trial " << i << " was not run again";
    }
  }
  std::size_t complete_after = 0;
  for (const auto& trial : after) complete_after += trial.state == "complete" ? 1 : 0;
  EXPECT_EQ(complete_after, complete_before + running_before + 1);
}

TEST(TuneCli, OneOfTwoWorkersKilledLeavesTheOtherToFinishAndRetry) {
  TempDir home;
  ASSERT_EQ(run_command({slipway_binary(), "--home", home.path(), "init"}).exit_code, 0);
  std::vector<std::string> argv = tune_command(home.path(), "two", 12, {"--no-progress", "-q"});
  argv[std::find(argv.begin(), argv.end(), "rounds=10") - argv.begin()] = "rounds=120";
  ChildProcess doomed(argv);
  CommandResult survivor;
  std::thread other([&] { survivor = run_command(argv); });
  // Kill the first worker while it trains a trial of its own.
  bool killed = false;
  for (int wait = 0; wait < 600 && !killed; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto store = registry::Registry::open(home.path(), {.read_only = true});
    if (!store.ok()) continue;
    auto trials = (*store)->studies().trials("two");
    if (!trials.ok()) continue;
    for (const auto& trial : *trials) {
      if (trial.state == "running" && trial.owner.pid == doomed.pid()) {
        doomed.signal(SIGKILL);
        killed = true;
        break;
      }
    }
  }
  other.join();
  ASSERT_TRUE(killed);
  EXPECT_EQ(doomed.wait(), 128 + SIGKILL);
  ASSERT_EQ(survivor.exit_code, 0) << survivor.err;
  auto trials = stored_trials(home.path(), "two");
  std::size_t complete = 0, interrupted = 0;
  for (const auto& trial : trials) {
    EXPECT_NE(trial.state, "running") << "trial " << trial.number;
    complete += trial.state == "complete" ? 1 : 0;
    if (trial.state != "failed") continue;
    ++interrupted;
    EXPECT_TRUE(trial.message.starts_with("interrupted")) << trial.message;
    bool retried = std::any_of(trials.begin(), trials.end(), [&](const auto& other) {
      return other.retry_of == trial.number && other.state == "complete" && other.params == trial.params;
    });
    EXPECT_TRUE(retried) << "trial " << trial.number << " was not run again";
  }
  EXPECT_EQ(interrupted, 1u);
  EXPECT_EQ(complete, 12u);
}

// A disk that fills mid-study (a file size limit, `ulimit -f`): the command ends with an error
// naming it instead of dying by SIGXFSZ, no completed trial is lost, and once there is room
// `--resume` finishes the study.
TEST(TuneCli, AFullDiskStopsTheStudyWithAnErrorAndLosesNoTrial) {
  TempDir home;
  auto first = run_command(tune_command(home.path(), "full", 2, {"--no-progress"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Room for what the workspace holds and a little more: the store's log fills within a trial.
  std::uintmax_t largest = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(home.path())) {
    if (entry.is_regular_file()) largest = std::max<std::uintmax_t>(largest, entry.file_size());
  }
  std::string blocks = std::to_string((largest + std::uintmax_t{16} * 1024) / 512);  // dash counts 512-byte blocks
  std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -f " + blocks + "; exec \"$@\"", "sh"};
  for (const auto& arg : tune_command(home.path(), "full", 12, {"--no-progress"})) argv.push_back(arg);
  auto limited = run_command(argv);
  EXPECT_EQ(limited.exit_code, 1) << limited.err;
  EXPECT_NE(limited.err.find("error: "), std::string::npos) << limited.err;
  auto trials = stored_trials(home.path(), "full");
  int complete = 0;
  for (const auto& trial : trials) complete += trial.state == "complete" ? 1 : 0;
  EXPECT_GE(complete, 2);
  auto resumed = run_command(
      {slipway_binary(), "--home", home.path(), "tune", "--resume", "full", "--trials", "12", "--no-progress"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  complete = 0;
  for (const auto& trial : stored_trials(home.path(), "full")) complete += trial.state == "complete" ? 1 : 0;
  EXPECT_EQ(complete, 12);
}

// On a terminal the trials are a live table redrawn in place (cursor up, clear below) with the
// study's standing under it; `script` gives the command a terminal.
TEST(TuneCli, ATerminalGetsALiveTable) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1) to give the command a terminal";
  TempDir home;
  std::string command;
  for (const auto& arg : tune_command(home.path(), "live", 3)) command += "'" + arg + "' ";
  auto shown = run_command({"/usr/bin/script", "-qec", command, "/dev/null"});
  ASSERT_EQ(shown.exit_code, 0) << shown.out << shown.err;
  EXPECT_NE(shown.out.find("\x1b[2A\x1b[J"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("trial   2 complete"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("best "), std::string::npos) << shown.out;
}

TEST(TuneCli, RefusesInputThatCannotBeAStudy) {
  TempDir home;
  auto refused = [&](const std::vector<std::string>& more, const std::string& expected) {
    auto result = run_command(tune_command(home.path(), "bad", 3, more));
    EXPECT_NE(result.exit_code, 0) << expected;
    EXPECT_NE(result.err.find(expected), std::string::npos) << result.err;
  };
  refused({"--budget", "0"}, "--budget");
  refused({"--budget=-5m"}, "--budget");
  refused({"--sampler", "bayes"}, "unknown sampler");
  refused({"--pruner", "hyperband"}, "unknown pruner");
  refused({"--objective", "acu"}, "did you mean 'auc'");
  refused({"--constraint", "p95_us<50"}, "MEASURE<=LIMIT");
  refused({"--objective", "auc", "--objective", "auc"}, "given twice");
  refused({"--param", "max_depth=4"}, "both fixed");
  refused({"--parallel", "0"}, "--parallel");
  std::string empty_space = home.file("empty.yaml");
  ASSERT_TRUE(write_file_atomic(empty_space, "params:\n  learning_rate: {type: float, low: 0.3, high: 0.01}\n").ok());
  refused({"--space", empty_space}, "learning_rate");
  ASSERT_TRUE(write_file_atomic(empty_space, "params:\n  lambda: {type: float, low: 0, high: 1, log: true}\n").ok());
  refused({"--space", empty_space}, "lambda");
  ASSERT_TRUE(write_file_atomic(empty_space, "params:\n  grow_policy: {type: categorical, choices: []}\n").ok());
  refused({"--space", empty_space}, "grow_policy");

  auto resume_with_space =
      run_command({slipway_binary(), "--home", home.path(), "tune", "--resume", "bad", "--sampler", "random"});
  EXPECT_NE(resume_with_space.exit_code, 0);
  EXPECT_NE(resume_with_space.err.find("does not apply"), std::string::npos) << resume_with_space.err;
  auto logistic_pruned =
      run_command({slipway_binary(), "--home", home.path(), "tune", "--study", "l", "--data",
                   data_path("lending_club.csv"), "--target", "Class", "--model", "logistic", "--pruner", "asha"});
  EXPECT_NE(logistic_pruned.err.find("applies to gbdt and mlp"), std::string::npos) << logistic_pruned.err;
  auto unnamed = run_command(
      {slipway_binary(), "--home", home.path(), "tune", "--data", data_path("lending_club.csv"), "--target", "Class"});
  EXPECT_NE(unnamed.err.find("--study"), std::string::npos) << unnamed.err;
}

}  // namespace
}  // namespace slipway::testing
