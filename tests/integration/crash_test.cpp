// Kill `slipway train --register` at the worst moments and check the workspace is still consistent:
// every version row points at a stored bundle whose hash verifies, no artifact is partial, and the
// next registration works.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "slipway/model.h"
#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::testing {
namespace {

void expect_consistent(const std::string& home, std::int64_t expected_versions) {
  auto store = registry::Registry::open(home, false);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto versions = (*store)->models().list_versions("crashy");
  std::int64_t count = versions.ok() ? static_cast<std::int64_t>(versions->size()) : 0;
  EXPECT_EQ(count, expected_versions);
  if (versions.ok()) {
    for (const auto& version : *versions) {
      auto bundle = model::Bundle::load((*store)->artifacts().path_for(version.bundle_sha256), version.bundle_sha256);
      EXPECT_TRUE(bundle.ok()) << bundle.status().message();
    }
  }
  // Every stored artifact is whole: its name is its hash.
  for (const auto& sha : (*store)->artifacts().list()) {
    EXPECT_EQ(*sha256_file((*store)->artifacts().path_for(sha)), sha);
  }
  auto runs = (*store)->runs().list(100);
  ASSERT_TRUE(runs.ok());
  for (const auto& run : *runs) {
    EXPECT_TRUE(run.status == "RUNNING" || run.status == "FINISHED") << run.status;
    if (run.status == "FINISHED") {
      EXPECT_TRUE((*store)->artifacts().contains(run.bundle_sha256)) << run.run_id;
    }
  }
}

CommandResult train(const std::string& home, const std::string& crash_at) {
  std::vector<std::string> environment;
  if (!crash_at.empty()) environment.push_back("SLIPWAY_CRASH_AT=" + crash_at);
  return run_command({slipway_binary(), "--home", home, "-q", "train", "--data", data_path("lending_club.csv"),
                      "--target", "Class", "--register", "crashy"},
                     environment);
}

TEST(Crash, KilledWhileRegisteringLeavesTheWorkspaceConsistent) {
  for (const std::string point : {"files.before_rename", "train.before_register", "registry.before_commit"}) {
    SCOPED_TRACE(point);
    TempDir home;
    auto crashed = train(home.path(), point);
    EXPECT_EQ(crashed.exit_code, 128 + SIGKILL) << crashed.err;
    expect_consistent(home.path(), 0);
    // Recovery needs no repair step: the next run registers version 1.
    auto retried = train(home.path(), "");
    ASSERT_EQ(retried.exit_code, 0) << retried.err;
    expect_consistent(home.path(), 1);
  }
}

TEST(Crash, KilledAtRandomMomentsLeavesTheWorkspaceConsistent) {
  TempDir home;
  ASSERT_EQ(train(home.path(), "").exit_code, 0);
  for (int attempt = 0; attempt < 8; ++attempt) {
    ChildProcess child({slipway_binary(), "--home", home.path(), "-q", "train", "--data", data_path("lending_club.csv"),
                        "--target", "Class", "--register", "crashy"});
    std::this_thread::sleep_for(std::chrono::milliseconds(40 * attempt));
    child.signal(SIGKILL);
    child.wait();
    auto store = registry::Registry::open(home.path(), false);
    auto versions = (*store)->models().list_versions("crashy");
    // However far the killed run got, the versions that exist are whole.
    expect_consistent(home.path(), static_cast<std::int64_t>(versions->size()));
  }
}

}  // namespace
}  // namespace slipway::testing
