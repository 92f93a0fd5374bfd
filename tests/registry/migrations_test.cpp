// Numbered schema migrations: a new workspace gets them all; a workspace from before migrations
// were recorded is upgraded with its rows intact; one from a newer slipway is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "registry/registry_test_support.h"
#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::registry {
namespace {

using testing::create_old_workspace;
using testing::exec_sql;
using testing::kPreMigrationSchema;
using testing::query_text;

// Rows as the pre-migration code wrote them: a finished run with params, metrics and a bundle,
// a run left RUNNING with a checkpoint, a version with an alias, a serving config, a token, and
// the audit entries.
std::string old_rows(const std::string& sha) {
  return "INSERT INTO experiments(name, created_ms) VALUES ('default', 1000);"
         "INSERT INTO runs(run_id, experiment_id, status, start_ms, end_ms, code_version, data_fingerprint, spec, "
         "bundle_sha256) SELECT 'aaaa', id, 'FINISHED', 1000, 2000, 'abc', 'f00', 'target: y\n', '" +
         sha +
         "' FROM experiments WHERE name = 'default';"
         "INSERT INTO runs(run_id, experiment_id, status, start_ms, code_version, data_fingerprint, spec) "
         "SELECT 'bbbb', id, 'RUNNING', 3000, 'abc', 'f00', 'target: y\n' FROM experiments WHERE name = 'default';"
         "INSERT INTO params(run_id, key, value) VALUES ('aaaa', 'l2', '1.0');"
         "INSERT INTO metrics(run_id, key, value, step, timestamp_ms) VALUES ('aaaa', 'loss', 0.9, 0, 1500);"
         "INSERT INTO metrics(run_id, key, value, step, timestamp_ms) VALUES ('aaaa', 'loss', 0.5, 1, 1600);"
         "INSERT INTO checkpoints(run_id, step, bundle_sha256, created_ms) VALUES ('bbbb', 10, '" +
         sha +
         "', 3500);"
         "INSERT INTO models(name, created_ms) VALUES ('churn', 1000);"
         "INSERT INTO model_versions(model, version, bundle_sha256, run_id, creator, created_ms) "
         "VALUES ('churn', 1, '" +
         sha +
         "', 'aaaa', 'alice', 1000);"
         "INSERT INTO aliases(model, alias, version) VALUES ('churn', 'production', 1);"
         "INSERT INTO serving_configs(model, key, value) VALUES ('churn', 'max_batch_size', '8');"
         "INSERT INTO api_tokens(id, name, role, token_sha256, created_ms) VALUES ('t1', 'app', 'predict', 'h', 1000);"
         "INSERT INTO audit_log(time_ms, actor, action, detail) VALUES (1000, 'alice', 'model.register', 'churn@1');";
}

class MigrationsTest : public ::testing::Test {
 protected:
  std::string database() const { return home_.path() + "/slipway.db"; }
  // A workspace made by a release from before migrations, with rows; returns the bundle's hash.
  std::string make_old_workspace(const std::string& schema = kPreMigrationSchema) {
    EXPECT_EQ(create_old_workspace(home_.path(), schema), "");
    auto sha = ArtifactStore(home_.path() + "/artifacts").put(testing::as_bytes("old bundle"));
    EXPECT_EQ(exec_sql(database(), old_rows(*sha)), "");
    return *sha;
  }
  slipway::testing::TempDir home_;
};

TEST_F(MigrationsTest, NewWorkspaceRecordsEveryMigration) {
  auto store = Registry::open(home_.path(), {.create = true});
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ((*store)->schema_version(), Registry::latest_schema_version());
  EXPECT_EQ(Registry::latest_schema_version(), 15);
  EXPECT_EQ(query_text(database(), "SELECT group_concat(version || ':' || name, ' ') FROM schema_migrations"),
            "1:initial_schema 2:run_owner 3:endpoints 4:rollouts 5:endpoint_shadow 6:annotations_and_approvals "
            "7:gate_results 8:retired_versions 9:deadlines_and_step_cache 10:batch_jobs 11:labels 12:monitor_alerts "
            "13:retraining 14:run_tags_and_artifacts 15:studies");
  EXPECT_NE(query_text(database(), "SELECT applied_ms FROM schema_migrations WHERE version = 2"), "");
  // Opening again applies nothing more.
  store = Registry::open(home_.path(), false);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(query_text(database(), "SELECT count(*) FROM schema_migrations"), "15");
}

TEST_F(MigrationsTest, UpgradesAWorkspaceFromBeforeMigrationsWithItsRowsIntact) {
  std::string sha = make_old_workspace();
  EXPECT_EQ(query_text(database(), "PRAGMA user_version"), "1");

  // A read-only open does not upgrade, says how to, and writes nothing.
  auto before = testing::snapshot(database());
  auto read_only = Registry::open(home_.path(), {.read_only = true});
  ASSERT_EQ(read_only.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(read_only.status().message().find("schema version 0"), std::string::npos) << read_only.status().message();
  EXPECT_NE(read_only.status().message().find("slipway verify --repair"), std::string::npos);
  EXPECT_TRUE(testing::snapshot(database()) == before);

  auto opened = Registry::open(home_.path(), false);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Registry& store = **opened;
  EXPECT_EQ(store.schema_version(), 15);

  auto finished = store.runs().get("aaaa");
  ASSERT_TRUE(finished.ok()) << finished.status().message();
  EXPECT_EQ(finished->status, "FINISHED");
  EXPECT_EQ(finished->end_ms, 2000);
  EXPECT_EQ(finished->spec, "target: y\n");
  EXPECT_EQ(finished->bundle_sha256, sha);
  EXPECT_EQ(finished->params.at("l2"), "1.0");
  ASSERT_EQ(finished->metrics.size(), 1u);
  EXPECT_EQ(finished->metrics[0].value, 0.5);
  EXPECT_EQ(store.runs().metric_history("aaaa")->size(), 2u);
  EXPECT_EQ(finished->owner.pid, 0);  // not recorded before migration 2

  auto running = store.runs().get("bbbb");
  EXPECT_EQ(running->status, "RUNNING");
  EXPECT_EQ((*store.runs().latest_checkpoint("bbbb"))->step, 10);

  auto production = store.models().resolve("churn", {.version = {}, .alias = "production"});
  ASSERT_TRUE(production.ok());
  EXPECT_EQ(production->bundle_sha256, sha);
  EXPECT_EQ(production->creator, "alice");
  EXPECT_EQ(production->run_id, "aaaa");
  EXPECT_EQ(store.serving_configs().get("churn")->at("max_batch_size"), "8");
  EXPECT_EQ(store.tokens().list()->size(), 1u);
  EXPECT_EQ(store.audit().entries()->front(), "1000 alice model.register churn@1");

  // New rows use the new columns; old ones keep working.
  auto started = store.runs().start({});
  ASSERT_TRUE(started.ok());
  EXPECT_EQ(store.runs().get(*started)->owner.pid, ::getpid());
  EXPECT_EQ(store.models().register_version("churn", sha, "aaaa")->version, 2);

  // Now a read-only open works, and the legacy RUNNING run cannot be judged (no owner).
  opened->reset();
  auto reader = Registry::open(home_.path(), {.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  auto report = verify_workspace(**reader, {});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->unchecked_runs.size(), 1u);
  EXPECT_EQ(report->unchecked_runs[0].run_id, "bbbb");
  EXPECT_EQ(report->problem_count(), 0u);
}

TEST_F(MigrationsTest, UpgradesTheOldestWorkspacesThatLackLaterTables) {
  // The first release had no checkpoints, serving_configs or api_tokens table.
  std::string schema = kPreMigrationSchema;
  for (const char* table : {"checkpoints", "serving_configs", "api_tokens"}) {
    auto start = schema.find(std::string("CREATE TABLE IF NOT EXISTS ") + table);
    schema.erase(start, schema.find(';', start) + 1 - start);
  }
  EXPECT_EQ(create_old_workspace(home_.path(), schema), "");
  auto store = Registry::open(home_.path(), false);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto sha = (*store)->artifacts().put(testing::as_bytes("bundle"));
  ASSERT_TRUE((*store)->models().register_version("m", *sha, "").ok());
  EXPECT_TRUE((*store)->serving_configs().set("m", {{"instances", "2"}}, false).ok());
  EXPECT_TRUE((*store)->tokens().create("app", "predict").ok());
}

TEST_F(MigrationsTest, RefusesAWorkspaceFromANewerSlipway) {
  ASSERT_TRUE(Registry::open(home_.path(), true).ok());
  const std::int64_t known = Registry::latest_schema_version();
  const std::string future = std::to_string(known + 1);
  ASSERT_EQ(exec_sql(database(), "INSERT INTO schema_migrations VALUES (" + future + ", 'from_the_future', 0)"), "");
  for (bool read_only : {false, true}) {
    auto store = Registry::open(home_.path(), {.read_only = read_only});
    ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(store.status().message().find("made by a newer slipway (schema version " + future +
                                            "; this slipway knows versions up to " + std::to_string(known) + ")"),
              std::string::npos)
        << store.status().message();
  }
}

TEST_F(MigrationsTest, RefusesAMigrationItDoesNotKnowByName) {
  ASSERT_TRUE(Registry::open(home_.path(), true).ok());
  ASSERT_EQ(exec_sql(database(), "UPDATE schema_migrations SET name = 'branch_experiment' WHERE version = 2"), "");
  auto store = Registry::open(home_.path(), false);
  ASSERT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("'branch_experiment'"), std::string::npos);
}

TEST_F(MigrationsTest, ConcurrentOpenersApplyEachMigrationOnce) {
  make_old_workspace();
  std::vector<std::jthread> openers;
  std::vector<Status> results(4);
  for (std::size_t index = 0; index < results.size(); ++index) {
    openers.emplace_back([&, index] { results[index] = Registry::open(home_.path(), false).status(); });
  }
  openers.clear();
  for (const auto& status : results) EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(query_text(database(), "SELECT count(*) FROM schema_migrations"), "15");
}

}  // namespace
}  // namespace slipway::registry
