// A read-only open writes nothing, refuses every mutation with a clear Status, sees other
// writers' commits, and works where the folder is not writable (SQLite WAL; see
// src/registry/sqlite_backend.cpp for what SQLite does in each case).
#include <gtest/gtest.h>

#include "registry/registry_test_support.h"
#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::registry {
namespace {

using testing::as_bytes;
using testing::snapshot;

class ReadOnlyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = std::move(Registry::open(home_.path(), true)).value();
    run_id_ = *store->runs().start({});
    ASSERT_TRUE(store->runs().log_metrics(run_id_, {{"loss", 0.5}}).ok());
    sha_ = *store->artifacts().put(as_bytes("bundle"));
    ASSERT_TRUE(store->runs().record_checkpoint(run_id_, 5, sha_).ok());
    ASSERT_TRUE(store->runs().finish(run_id_, true, sha_).ok());
    ASSERT_TRUE(store->models().register_version("churn", sha_, run_id_).ok());
    ASSERT_TRUE(store->models().set_alias("churn", "production", 1).ok());
    ASSERT_TRUE(store->serving_configs().set("churn", {{"instances", "2"}}, false).ok());
    ASSERT_TRUE(store->tokens().create("app", "predict").ok());
  }
  std::string database() const { return home_.path() + "/slipway.db"; }

  slipway::testing::TempDir home_;
  std::string run_id_;
  std::string sha_;
};

TEST_F(ReadOnlyTest, ReadsEverythingAndWritesNothing) {
  auto before = snapshot(database());
  {
    auto opened = Registry::open(home_.path(), {.read_only = true});
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    Registry& store = **opened;
    EXPECT_TRUE(store.read_only());
    EXPECT_EQ(store.models().list()->size(), 1u);
    EXPECT_EQ(store.models().resolve("churn", {.version = {}, .alias = "production"})->bundle_sha256, sha_);
    EXPECT_EQ(store.runs().list(10)->size(), 1u);
    EXPECT_EQ(store.runs().get(run_id_)->status, "FINISHED");
    EXPECT_EQ(store.runs().metric_history(run_id_)->size(), 1u);
    EXPECT_EQ((*store.runs().latest_checkpoint(run_id_))->step, 5);
    EXPECT_EQ(store.serving_configs().get("churn")->at("instances"), "2");
    EXPECT_EQ(store.tokens().list()->size(), 1u);
    std::size_t audit_entries = store.audit().entries()->size();
    auto report = verify_workspace(store, {});
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_EQ(report->problem_count(), 0u);

    // Every mutation fails with one clear sentence and changes nothing.
    std::vector<Status> refused = {
        store.runs().start({}).status(),
        store.runs().log_metrics(run_id_, {{"loss", 0.1}}),
        store.runs().reopen(run_id_),
        store.models().register_version("churn", sha_, "").status(),
        store.models().set_alias("churn", "canary", 1),
        store.serving_configs().set("churn", {{"instances", "4"}}, true),
        store.tokens().create("ci", "deploy").status(),
        store.tokens().revoke("nope"),
        store.artifacts().put(as_bytes("new bundle")).status(),
        verify_workspace(store, {.repair = true}).status(),
    };
    for (const auto& status : refused) {
      EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.message();
      EXPECT_NE(status.message().find("read-only"), std::string::npos) << status.message();
    }
    EXPECT_EQ(store.audit().entries()->size(), audit_entries);
    EXPECT_FALSE(store.artifacts().contains(sha256_hex(std::string_view("new bundle"))));
  }
  // Not one byte of slipway.db changed, nor its modification time (the old code wrote
  // `PRAGMA user_version` on every open).
  EXPECT_TRUE(snapshot(database()) == before);
}

TEST_F(ReadOnlyTest, SeesWhatAWriterCommitsMeanwhile) {
  // What `serve` on a read-only open relies on: commits of other connections become visible.
  auto reader = std::move(Registry::open(home_.path(), {.read_only = true})).value();
  auto writer = std::move(Registry::open(home_.path(), false)).value();
  ASSERT_TRUE(writer->models().register_version("churn", sha_, "").ok());
  ASSERT_TRUE(writer->models().set_alias("churn", "production", 2).ok());
  EXPECT_EQ(reader->models().resolve("churn", {.version = {}, .alias = "production"})->version, 2);
}

// A database with no schema at all is a workspace whose creation was stopped (killed, a full
// disk, `ulimit -f`), and is said to be one, with the command that creates it.
TEST(ReadOnlyOpen, NamesAWorkspaceWhoseCreationWasStopped) {
  slipway::testing::TempDir home;
  slipway::testing::write_text(home.path() + "/slipway.db", "");
  auto opened = Registry::open(home.path(), {.read_only = true});
  ASSERT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("was never fully created"), std::string::npos) << opened.status().message();
  EXPECT_NE(opened.status().message().find("slipway init"), std::string::npos);
  ASSERT_TRUE(Registry::open(home.path(), true).ok());  // what `slipway init` does
  EXPECT_TRUE(Registry::open(home.path(), {.read_only = true}).ok());
}

TEST_F(ReadOnlyTest, CannotCreate) {
  slipway::testing::TempDir empty;
  EXPECT_EQ(Registry::open(empty.path(), {.create = true, .read_only = true}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Registry::open(empty.path(), {.read_only = true}).status().code(), StatusCode::kNotFound);
}

TEST_F(ReadOnlyTest, ReadsAWorkspaceInAFolderItCannotWrite) {
  // The last writer closed cleanly: no -wal or -shm file, and SQLite cannot create them here.
  ASSERT_FALSE(std::filesystem::exists(database() + "-wal"));
  auto before = snapshot(database());
  int result = testing::run_without_write_access(home_.path(), [&] {
    auto store = Registry::open(home_.path(), {.read_only = true});
    if (!store.ok()) return 1;
    auto versions = (*store)->models().list_versions("churn");
    if (!versions.ok() || versions->size() != 1) return 2;
    if (!(*store)->runs().start({}).status().message().starts_with("the workspace was opened read-only")) return 3;
    // A writing open fails there, saying why.
    auto writable = Registry::open(home_.path(), false);
    if (writable.ok() || writable.status().message().find("no write permission") == std::string::npos) return 4;
    return 0;
  });
  EXPECT_EQ(result, 0);
  EXPECT_TRUE(snapshot(database()) == before);
  EXPECT_FALSE(std::filesystem::exists(database() + "-shm"));
}

TEST_F(ReadOnlyTest, ExplainsAnUnreadableWriteAheadLog) {
  // A writer was killed after committing: its transactions are in -wal only. Without -shm and
  // without write access to the folder SQLite cannot index the log, and an immutable read would
  // miss those transactions.
  ASSERT_EQ(testing::exec_sql(database(), "INSERT INTO models(name, created_ms) VALUES ('late', 1)", true), "");
  ASSERT_GT(std::filesystem::file_size(database() + "-wal"), 0u);
  std::filesystem::remove(database() + "-shm");
  int result = testing::run_without_write_access(home_.path(), [&] {
    auto store = Registry::open(home_.path(), {.read_only = true});
    if (store.ok()) return 1;
    if (store.status().code() != StatusCode::kFailedPrecondition) return 2;
    if (store.status().message().find("write-ahead log (slipway.db-wal)") == std::string::npos) return 3;
    return 0;
  });
  EXPECT_EQ(result, 0);
  // Where it may create -shm, a read-only open reads the log.
  auto store = Registry::open(home_.path(), {.read_only = true});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ((*store)->models().list()->size(), 2u);
}

}  // namespace
}  // namespace slipway::registry
