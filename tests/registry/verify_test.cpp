// verify_workspace: corrupt and missing artifacts, orphans, and runs left RUNNING by a process
// that died.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "registry/registry_test_support.h"
#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::registry {
namespace {

using testing::as_bytes;

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    open();
    sha_ = *store_->artifacts().put(as_bytes("bundle bytes"));
    run_id_ = *store_->runs().start({});
    ASSERT_TRUE(store_->runs().finish(run_id_, true, sha_).ok());
    ASSERT_TRUE(store_->models().register_version("churn", sha_, run_id_).ok());
  }
  void open() { store_ = std::move(Registry::open(home_.path(), true)).value(); }
  VerifyReport verify(bool repair = false) {
    auto report = verify_workspace(*store_, {.repair = repair});
    EXPECT_TRUE(report.ok()) << report.status().message();
    return report.ok() ? *report : VerifyReport{};
  }

  slipway::testing::TempDir home_;
  std::unique_ptr<Registry> store_;
  std::string sha_;
  std::string run_id_;
};

TEST_F(VerifyTest, ACleanWorkspaceHasNoProblems) {
  VerifyReport report = verify();
  EXPECT_EQ(report.schema_version, 15);
  EXPECT_EQ(report.artifacts_checked, 1u);
  EXPECT_EQ(report.references_checked, 2u);  // the version and the run's bundle
  EXPECT_EQ(report.problem_count(), 0u);
  EXPECT_TRUE(report.metadata_problems.empty());
  EXPECT_TRUE(report.orphan_artifacts.empty());
}

TEST_F(VerifyTest, ACorruptArtifactIsReportedAndMovedAsideOnRepair) {
  { std::ofstream(store_->artifacts().path_for(sha_), std::ios::binary | std::ios::trunc) << "bit rot"; }
  VerifyReport report = verify();
  ASSERT_EQ(report.corrupt_artifacts.size(), 1u);
  const auto& corrupt = report.corrupt_artifacts[0];
  EXPECT_EQ(corrupt.sha256, sha_);
  EXPECT_EQ(corrupt.actual_sha256, sha256_hex(std::string_view("bit rot")));
  EXPECT_EQ(corrupt.referrers, (std::vector<std::string>{"model churn@1", "run " + run_id_ + " bundle"}));
  EXPECT_TRUE(corrupt.quarantined_to.empty());
  EXPECT_EQ(report.problem_count(), 1u);

  report = verify(true);
  ASSERT_EQ(report.corrupt_artifacts.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(report.corrupt_artifacts[0].quarantined_to));
  EXPECT_EQ(report.problem_count(), 1u);  // the rows still name bytes that are gone
  EXPECT_FALSE(store_->artifacts().contains(sha_));
  // Now the right bytes can be stored again, and all is well.
  ASSERT_TRUE(store_->artifacts().put(as_bytes("bundle bytes")).ok());
  EXPECT_EQ(verify().problem_count(), 0u);
  EXPECT_NE(store_->audit().entries()->back().find("artifact.quarantine " + sha_), std::string::npos);
}

TEST_F(VerifyTest, AMissingArtifactIsReportedWithTheRowsNamingIt) {
  std::filesystem::remove(store_->artifacts().path_for(sha_));
  VerifyReport report = verify(true);
  ASSERT_EQ(report.missing_artifacts.size(), 2u);
  EXPECT_EQ(report.missing_artifacts[0].sha256, sha_);
  EXPECT_EQ(report.missing_artifacts[0].referrer, "model churn@1");
  EXPECT_EQ(report.missing_artifacts[1].referrer, "run " + run_id_ + " bundle");
  EXPECT_EQ(report.problem_count(), 2u);
}

TEST_F(VerifyTest, OrphansAreListedButAreNoProblem) {
  auto orphan = store_->artifacts().put(as_bytes("stored, then the process died before its row committed"));
  VerifyReport report = verify();
  EXPECT_EQ(report.orphan_artifacts, std::vector<std::string>{*orphan});
  EXPECT_EQ(report.problem_count(), 0u);
}

TEST_F(VerifyTest, ARunWhoseProcessDiedIsMarkedInterruptedAndCanResume) {
  // A child process starts a run and a checkpoint, then exits without finishing it.
  auto checkpoint = *store_->artifacts().put(as_bytes("checkpoint"));
  store_.reset();  // no SQLite connection across the fork
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  int exit_code = testing::run_in_child([&] {
    auto store = Registry::open(home_.path(), false);
    if (!store.ok()) return 1;
    auto run_id = (*store)->runs().start({});
    if (!run_id.ok() || !(*store)->runs().record_checkpoint(*run_id, 10, checkpoint).ok()) return 2;
    return ::write(pipe_fds[1], run_id->data(), run_id->size()) == static_cast<ssize_t>(run_id->size()) ? 0 : 3;
  });
  ASSERT_EQ(exit_code, 0);
  std::string dead_run(32, '\0');
  ASSERT_EQ(::read(pipe_fds[0], dead_run.data(), dead_run.size()), 32);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  open();
  // A run of this (living) process is left alone.
  auto living_run = *store_->runs().start({});

  VerifyReport report = verify();
  ASSERT_EQ(report.interrupted_runs.size(), 1u);
  EXPECT_EQ(report.interrupted_runs[0].run_id, dead_run);
  EXPECT_NE(report.interrupted_runs[0].reason.find("has exited"), std::string::npos)
      << report.interrupted_runs[0].reason;
  EXPECT_FALSE(report.interrupted_runs[0].marked);
  EXPECT_EQ(report.problem_count(), 1u);
  EXPECT_EQ(store_->runs().get(dead_run)->status, "RUNNING");

  report = verify(true);
  ASSERT_EQ(report.interrupted_runs.size(), 1u);
  EXPECT_TRUE(report.interrupted_runs[0].marked);
  EXPECT_EQ(report.problem_count(), 0u);
  auto marked = store_->runs().get(dead_run);
  EXPECT_EQ(marked->status, "INTERRUPTED");
  EXPECT_GT(marked->end_ms, 0);
  EXPECT_EQ(store_->runs().get(living_run)->status, "RUNNING");
  EXPECT_NE(store_->audit().entries()->back().find("run.interrupt " + dead_run), std::string::npos);
  EXPECT_TRUE(verify().interrupted_runs.empty());

  // `train --resume` reopens it: RUNNING again, owned by this process, checkpoint intact.
  ASSERT_TRUE(store_->runs().reopen(dead_run).ok());
  auto resumed = store_->runs().get(dead_run);
  EXPECT_EQ(resumed->status, "RUNNING");
  EXPECT_EQ(resumed->owner.pid, ::getpid());
  EXPECT_EQ((*store_->runs().latest_checkpoint(dead_run))->step, 10);
  EXPECT_EQ(verify().problem_count(), 0u);
}

// A run whose process still trains cannot be resumed by another process (both would finish it).
TEST_F(VerifyTest, ARunStillTrainingIsNotReopenedByAnotherProcess) {
  store_.reset();  // no SQLite connection across the fork
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = Registry::open(home_.path(), false);
    auto run_id = store.ok() ? (*store)->runs().start({}) : Result<std::string>(internal_error("no store"));
    std::string id = run_id.ok() ? *run_id : std::string(32, '-');
    (void)!::write(to_parent[1], id.data(), id.size());
    char done = 0;
    (void)!::read(to_child[0], &done, 1);  // alive until the parent says so
    ::_exit(0);
  }
  std::string run_id(32, '\0');
  ASSERT_EQ(::read(to_parent[0], run_id.data(), run_id.size()), 32);
  open();
  auto refused = store_->runs().reopen(run_id);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("is still running (process " + std::to_string(child) + ")"), std::string::npos)
      << refused.message();
  ASSERT_EQ(::write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(store_->runs().reopen(run_id).ok());  // its process is gone now
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

TEST_F(VerifyTest, MarkingChecksTheOwnerHasNotChanged) {
  auto run_id = *store_->runs().start({});
  RunOwner someone_else{.pid = 1, .start_ticks = 1, .host = "elsewhere", .boot_id = "", .pid_namespace = ""};
  EXPECT_EQ(store_->runs().mark_interrupted(run_id, someone_else, "test").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->runs().mark_interrupted(run_id_, store_->runs().get(run_id_)->owner, "test").code(),
            StatusCode::kFailedPrecondition);  // FINISHED
  EXPECT_EQ(store_->runs().get(run_id)->status, "RUNNING");
}

}  // namespace
}  // namespace slipway::registry
