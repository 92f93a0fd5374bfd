// Endpoints in the registry: deploy, canary, promote and rollback, each one change with its audit
// entry; the rollback target survives a repeated deploy; bad requests change nothing.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <cmath>

#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::registry {
namespace {

class EndpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::move(Registry::open(dir_.path(), true)).value();
    std::string text = "bundle";
    auto sha256 = registry_->artifacts().put(std::as_bytes(std::span(text.data(), text.size())));
    for (int version = 0; version < 3; ++version)
      ASSERT_TRUE(registry_->models().register_version("churn", *sha256, "").ok());
  }
  EndpointStore& endpoints() { return registry_->endpoints(); }

  testing::TempDir dir_;
  std::unique_ptr<Registry> registry_;
};

TEST_F(EndpointStoreTest, DeployCanaryPromoteAndRollBack) {
  auto first = endpoints().deploy("web", "churn", 1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(format_routes(first->routes), "churn@1=100");
  EXPECT_TRUE(first->previous.empty());
  EXPECT_EQ(first->revision, 1);

  auto canary = endpoints().deploy("web", "churn", 2, 10.0);
  ASSERT_TRUE(canary.ok()) << canary.status().message();
  EXPECT_EQ(format_routes(canary->routes), "churn@2=10,churn@1=90");  // the canary first
  EXPECT_EQ(format_routes(canary->previous), "churn@1=100");
  // The same again changes nothing, so the rollback target is kept.
  auto again = endpoints().deploy("web", "churn", 2, 10.0);
  EXPECT_EQ(again->revision, 2);
  EXPECT_EQ(format_routes(again->previous), "churn@1=100");

  auto promoted = endpoints().promote("web");
  ASSERT_TRUE(promoted.ok());
  EXPECT_EQ(format_routes(promoted->routes), "churn@2=100");
  EXPECT_EQ(endpoints().promote("web").status().code(), StatusCode::kFailedPrecondition);  // no canary left

  auto rolled_back = endpoints().rollback("web");
  ASSERT_TRUE(rolled_back.ok());
  EXPECT_EQ(format_routes(rolled_back->routes), "churn@2=10,churn@1=90");
  EXPECT_EQ(rolled_back->revision, 4);
  // A rollback is a change too: rolling back again undoes it.
  EXPECT_EQ(format_routes(endpoints().rollback("web")->routes), "churn@2=100");

  auto stored = endpoints().get("web");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(format_routes((*stored)->routes), "churn@2=100");
  EXPECT_EQ(endpoints().list()->size(), 1u);
  auto audit = registry_->audit().entries();
  std::size_t endpoint_entries = 0;
  for (const auto& entry : *audit) endpoint_entries += entry.find(" endpoint.") != std::string::npos ? 1 : 0;
  EXPECT_EQ(endpoint_entries, 5u);  // deploy, canary, promote, rollback, rollback
}

TEST_F(EndpointStoreTest, BadRequestsChangeNothing) {
  EXPECT_EQ(endpoints().deploy("web", "churn", 9).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(endpoints().deploy("web", "ghost", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(endpoints().deploy("web", "churn", 1, 5.0).status().code(),
            StatusCode::kFailedPrecondition);  // no endpoint
  EXPECT_EQ(endpoints().deploy("../web", "churn", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().rollback("web").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  EXPECT_EQ(endpoints().rollback("web").status().code(), StatusCode::kFailedPrecondition);  // nothing before
  for (double share : {0.0, 100.0, -5.0, std::nan(""), 1e300, 99.999, 99.995, 0.004, 1e-300}) {
    EXPECT_EQ(endpoints().deploy("web", "churn", 2, share).status().code(), StatusCode::kInvalidArgument) << share;
  }
  // A canary of the version already serving is refused.
  EXPECT_EQ(endpoints().deploy("web", "churn", 1, 10.0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@1=100");
  EXPECT_EQ((*endpoints().get("web"))->revision, 1);
}

TEST_F(EndpointStoreTest, RolloutsAdvanceStepByStepOrRollBackAndAManualChangeStopsThem) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  RolloutCriteria criteria;
  criteria.min_requests = 10;
  auto started = endpoints().start_rollout("web", "churn", 2, {10, 50, 100}, 1000, criteria);
  ASSERT_TRUE(started.ok()) << started.status().message();
  EXPECT_EQ(started->state, "running");
  EXPECT_EQ(started->canary.percent, 10.0);
  EXPECT_EQ(started->criteria.min_requests, 10);
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@2=10,churn@1=90");
  EXPECT_EQ(endpoints().start_rollout("web", "churn", 3, {50, 100}, 1000, criteria).status().code(),
            StatusCode::kFailedPrecondition);  // one at a time
  EXPECT_EQ(endpoints().running_rollouts()->size(), 1u);

  // The same canary again by hand changes nothing and leaves the rollout running.
  ASSERT_TRUE(endpoints().deploy("web", "churn", 2, 10.0).ok());
  EXPECT_EQ((*endpoints().rollout("web"))->state, "running");
  auto second = endpoints().advance_rollout("web", 0, "fine");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->step, 1u);
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@2=50,churn@1=50");
  // At 50/50 the main route is still the stable version.
  EXPECT_EQ(main_route((*endpoints().get("web"))->routes).reference(), "churn@1");
  // A server that saw step 0 too late changes nothing.
  EXPECT_EQ(endpoints().advance_rollout("web", 0, "late").status().code(), StatusCode::kFailedPrecondition);
  auto promoted = endpoints().advance_rollout("web", 1, "fine again");
  ASSERT_TRUE(promoted.ok());
  EXPECT_EQ(promoted->state, "promoted");
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@2=100");
  EXPECT_TRUE(endpoints().running_rollouts()->empty());

  // A failed step sends everything back to the stable version, with the reason kept.
  ASSERT_TRUE(endpoints().start_rollout("web", "churn", 3, {25, 100}, 1000, criteria).ok());
  auto failed = endpoints().fail_rollout("web", 0, "error rate 0.5");
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->state, "rolled_back");
  EXPECT_EQ(failed->reason, "error rate 0.5");
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@2=100");

  // A change by hand stops a running rollout.
  ASSERT_TRUE(endpoints().start_rollout("web", "churn", 3, {25, 100}, 1000, criteria).ok());
  ASSERT_TRUE(endpoints().rollback("web").ok());
  auto stopped = endpoints().rollout("web");
  EXPECT_EQ((*stopped)->state, "stopped");
  EXPECT_NE((*stopped)->reason.find("endpoint.rollback"), std::string::npos) << (*stopped)->reason;
  EXPECT_EQ(endpoints().advance_rollout("web", 0, "too late").status().code(), StatusCode::kFailedPrecondition);

  for (const std::vector<double>& steps : std::vector<std::vector<double>>{{},
                                                                           {10, 50},
                                                                           {50, 10, 100},
                                                                           {0, 100},
                                                                           {10, 10, 100},
                                                                           {1e-300, 100},
                                                                           {100},
                                                                           {10.001, 10.004, 100},
                                                                           {std::nan(""), 100}}) {
    EXPECT_EQ(endpoints().start_rollout("web", "churn", 3, steps, 1000, criteria).status().code(),
              StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(endpoints().start_rollout("web", "churn", 3, {50, 100}, 10, criteria).status().code(),
            StatusCode::kInvalidArgument);  // under a second
  RolloutCriteria negative = criteria;
  negative.max_error_rate_increase = -0.01;
  EXPECT_EQ(endpoints().start_rollout("web", "churn", 3, {50, 100}, 1000, negative).status().code(),
            StatusCode::kInvalidArgument);
  negative = criteria;
  negative.min_requests = 0;
  EXPECT_EQ(endpoints().start_rollout("web", "churn", 3, {50, 100}, 1000, negative).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().start_rollout("nowhere", "churn", 3, {50, 100}, 1000, criteria).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(endpoints().set_fallback("web", "main").ok());
  EXPECT_EQ((*endpoints().get("web"))->fallback, "main");
  EXPECT_EQ(endpoints().set_fallback("web", "constant").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().set_fallback("web", "constant:").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().set_fallback("web", "constant:" + std::string(300, '7')).code(), StatusCode::kInvalidArgument);
  for (const char* fallback : {"previous", "cached", "constant:0.5", "constant:yes", "none"}) {
    EXPECT_TRUE(endpoints().set_fallback("web", fallback).ok()) << fallback;
    EXPECT_EQ((*endpoints().get("web"))->fallback, fallback);
  }
  // Deadlines and SLOs: set, shown, removed; nonsense refused.
  ASSERT_TRUE(endpoints().configure("web", {.deadline_ms = 250, .slo = "p99<=20ms@500rps"}).ok());
  EXPECT_EQ((*endpoints().get("web"))->deadline_ms, 250);
  EXPECT_EQ((*endpoints().get("web"))->slo, "p99<=20ms@500rps");
  EXPECT_EQ(endpoints().configure("web", {.deadline_ms = -1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().configure("web", {.deadline_ms = 3'600'001}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoints().configure("web", {.slo = std::string(300, 'x')}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(endpoints().configure("web", {.deadline_ms = 0, .slo = ""}).ok());
  EXPECT_EQ((*endpoints().get("web"))->deadline_ms, 0);
  EXPECT_TRUE((*endpoints().get("web"))->slo.empty());
  EXPECT_EQ(endpoints().set_fallback("nowhere", "main").code(), StatusCode::kNotFound);
  EXPECT_FALSE(parse_criteria("max_p99_ratio=-1").ok());
  EXPECT_FALSE(parse_criteria("speed=3").ok());
  EXPECT_EQ(parse_criteria(format_criteria(criteria))->min_requests, 10);
}

TEST_F(EndpointStoreTest, AnEndpointThatRequiresApprovalTakesApprovedVersionsOnly) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  ASSERT_TRUE(endpoints().configure("web", {.owner = "risk-oncall", .require_approval = true}).ok());
  auto endpoint = *endpoints().get("web");
  EXPECT_EQ(endpoint->owner, "risk-oncall");
  EXPECT_TRUE(endpoint->require_approval);
  auto refused = endpoints().deploy("web", "churn", 2, 10.0);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("churn@2 is not approved"), std::string::npos);
  EXPECT_EQ(endpoints().start_rollout("web", "churn", 2, {50, 100}, 1000, {}).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(registry_->models().approve("churn", 2, "AUC +0.01 on the November holdout").ok());
  auto versions = registry_->models().list_versions("churn");
  ASSERT_TRUE(versions->at(1).approval.has_value());
  EXPECT_EQ(versions->at(1).approval->note, "AUC +0.01 on the November holdout");
  EXPECT_FALSE(versions->at(0).approval.has_value());
  EXPECT_TRUE(endpoints().deploy("web", "churn", 2, 10.0).ok());
  ASSERT_TRUE(registry_->models().revoke_approval("churn", 2).ok());
  // Promoting a canary whose approval was revoked is refused too; rolling back is not.
  EXPECT_EQ(endpoints().promote("web").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(endpoints().rollback("web").ok());
  EXPECT_EQ(registry_->models().revoke_approval("churn", 2).code(), StatusCode::kNotFound);
  EXPECT_EQ(endpoints().deploy("web", "churn", 2).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_->models().approve("churn", 9, "no such version").code(), StatusCode::kNotFound);
  EXPECT_EQ(endpoints().configure("nowhere", {.require_approval = true}).code(), StatusCode::kNotFound);

  // Each of those is in the audit log, and the model's filter finds them.
  registry::AuditFilter about;
  about.model = "churn";
  auto entries = registry_->audit().query(about);
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> actions;
  for (const auto& entry : *entries) actions.push_back(entry.action);
  EXPECT_EQ(actions, (std::vector<std::string>{"model.register", "model.register", "model.register", "endpoint.deploy",
                                               "model.approve", "endpoint.canary", "model.revoke_approval",
                                               "endpoint.rollback"}));
  about.limit = 2;
  EXPECT_EQ(registry_->audit().query(about)->front().action, "model.revoke_approval");
  about.model = "chur";  // a prefix of a name is another name
  about.limit = 0;
  EXPECT_TRUE(registry_->audit().query(about)->empty());
  about.model.clear();
  about.since_ms = unix_time_ms() + 60'000;
  EXPECT_TRUE(registry_->audit().query(about)->empty());
}

TEST_F(EndpointStoreTest, AnnotationsOnModelsAndVersions) {
  Annotations model_notes;
  model_notes.description = "Churn model\nsecond line";
  model_notes.owner = "growth";
  model_notes.set_tags = {{"domain", "retention"}, {"team/area", "growth"}};
  ASSERT_TRUE(registry_->models().annotate("churn", std::nullopt, model_notes).ok());
  Annotations version_notes;
  version_notes.description = "retrained on November";
  version_notes.set_tags = {{"stage", "candidate"}};
  ASSERT_TRUE(registry_->models().annotate("churn", 2, version_notes).ok());
  auto models = registry_->models().list();
  EXPECT_EQ(models->front().owner, "growth");
  EXPECT_EQ(models->front().tags.at("team/area"), "growth");
  auto versions = registry_->models().list_versions("churn");
  EXPECT_EQ(versions->at(1).tags.at("stage"), "candidate");
  EXPECT_EQ(versions->at(1).description, "retrained on November");
  EXPECT_TRUE(versions->at(0).tags.empty());  // the model's tags are not a version's
  Annotations untag;
  untag.remove_tags = {"stage"};
  ASSERT_TRUE(registry_->models().annotate("churn", 2, untag).ok());
  EXPECT_TRUE(registry_->models().list_versions("churn")->at(1).tags.empty());

  Annotations bad;
  bad.set_tags = {{"bad key", "x"}};
  EXPECT_EQ(registry_->models().annotate("churn", std::nullopt, bad).code(), StatusCode::kInvalidArgument);
  bad.set_tags.clear();
  bad.description = std::string("\xff\xfe");
  EXPECT_EQ(registry_->models().annotate("churn", std::nullopt, bad).code(), StatusCode::kInvalidArgument);
  bad.description = std::string(9000, 'x');
  EXPECT_EQ(registry_->models().annotate("churn", std::nullopt, bad).code(), StatusCode::kInvalidArgument);
  Annotations owner_of_version;
  owner_of_version.owner = "someone";
  EXPECT_EQ(registry_->models().annotate("churn", 1, owner_of_version).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_->models().annotate("ghost", std::nullopt, model_notes).code(), StatusCode::kNotFound);
}

// A version in use cannot be retired; a retired one is kept but no longer resolved by NAME nor
// deployable; gc collects only what nothing names, and only when old enough.
TEST_F(EndpointStoreTest, RetireAndCollectGarbage) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 3).ok());
  ASSERT_TRUE(registry_->models().set_alias("churn", "production", 2).ok());
  EXPECT_EQ(registry_->models().retire("churn", 3).status().code(), StatusCode::kFailedPrecondition);  // routed
  EXPECT_EQ(registry_->models().retire("churn", 2).status().code(), StatusCode::kFailedPrecondition);  // aliased
  ASSERT_TRUE(endpoints().deploy("web", "churn", 2).ok());
  ASSERT_TRUE(registry_->models().retire("churn", 3).ok());
  EXPECT_EQ(registry_->models().retire("churn", 3).status().code(), StatusCode::kFailedPrecondition);  // already
  EXPECT_EQ(registry_->models().resolve("churn", {})->version, 2);  // NAME: its production alias
  // NAME@latest: the newest in service, past the retired 3.
  EXPECT_EQ(registry_->models().resolve("churn", {.version = {}, .alias = "", .latest = true})->version, 2);
  ASSERT_TRUE(registry_->models().set_alias("churn", "production", 1).ok());
  EXPECT_EQ(registry_->models().resolve("churn", {})->version, 1);
  EXPECT_EQ(registry_->models().resolve("churn", {.version = {}, .alias = "", .latest = true})->version, 2);
  ASSERT_TRUE(registry_->models().set_alias("churn", "production", 2).ok());
  EXPECT_GT(registry_->models().resolve("churn", {3, ""})->retired_ms, 0);  // still there, by number
  EXPECT_EQ(endpoints().deploy("web", "churn", 3).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_->models().set_alias("churn", "old", 3).code(), StatusCode::kFailedPrecondition);

  std::string text = "an orphan";
  auto orphan = registry_->artifacts().put(std::as_bytes(std::span(text.data(), text.size())));
  ASSERT_TRUE(orphan.ok());
  GcOptions options;
  auto young = collect_garbage(*registry_, options);  // just stored: younger than an hour
  ASSERT_TRUE(young.ok());
  EXPECT_TRUE(young->unreferenced.empty());
  EXPECT_EQ(young->too_young, 1u);
  options.min_age_ms = 0;
  auto listed = collect_garbage(*registry_, options);
  ASSERT_EQ(listed->unreferenced.size(), 1u);
  EXPECT_EQ(listed->unreferenced[0].sha256, *orphan);
  EXPECT_TRUE(registry_->artifacts().contains(*orphan));  // a dry run
  options.apply = true;
  auto applied = collect_garbage(*registry_, options);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->bytes_freed, text.size());
  EXPECT_FALSE(registry_->artifacts().contains(*orphan));
  EXPECT_EQ(registry_->artifacts().list().size(), 1u);  // the versions' bundle stays
}

// A canary share that rounds to 100% or to 0% is refused before anything is stored (it used to
// store the stable route at 0%, which no reader accepts); shares are stored without float noise.
TEST_F(EndpointStoreTest, SharesAreHeldToTheRoutingResolutionOnTheStoredValue) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  auto refused = endpoints().deploy("web", "churn", 2, 99.999);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("rounds to 100"), std::string::npos) << refused.status().message();
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@1=100");

  auto near_all = endpoints().deploy("web", "churn", 2, 99.99);
  ASSERT_TRUE(near_all.ok()) << near_all.status().message();
  EXPECT_EQ(format_routes(near_all->routes), "churn@2=99.99,churn@1=0.01");
  EXPECT_EQ(near_all->routes[0].percent, 99.99);  // not 99.99000000000001
  auto listed = endpoints().list();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(format_routes(listed->front().routes), "churn@2=99.99,churn@1=0.01");

  auto rounded = endpoints().deploy("web", "churn", 3, 33.333);
  ASSERT_TRUE(rounded.ok());
  EXPECT_EQ(format_routes(rounded->routes), "churn@3=33.33,churn@2=66.67");

  RolloutCriteria criteria;
  ASSERT_TRUE(endpoints().deploy("api", "churn", 1).ok());
  auto rollout = endpoints().start_rollout("api", "churn", 2, {33.333, 100}, 1000, criteria);
  ASSERT_TRUE(rollout.ok()) << rollout.status().message();
  EXPECT_EQ(rollout->steps.front(), 33.33);
  EXPECT_EQ(format_routes((*endpoints().get("api"))->routes), "churn@2=33.33,churn@1=66.67");

  EndpointSettings tiny_shadow;
  tiny_shadow.shadow = EndpointRoute{"churn", 3, 1e-300};
  EXPECT_EQ(endpoints().configure("web", tiny_shadow).code(), StatusCode::kInvalidArgument);
}

// A row damaged by an older build (the stable route stored at 0%) fails that endpoint alone:
// the others list and change, verify reports it, and a full deploy repairs it.
TEST_F(EndpointStoreTest, ADamagedEndpointFailsAloneAndAFullDeployRepairsIt) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  ASSERT_TRUE(endpoints().deploy("healthy", "churn", 1).ok());
  registry_.reset();
  sqlite3* database = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/slipway.db").c_str(), &database), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(database, "UPDATE endpoints SET routes = 'churn@2=100,churn@1=0' WHERE name = 'web'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(database);
  registry_ = std::move(Registry::open(dir_.path(), false)).value();

  auto listed = endpoints().list();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_TRUE((*listed)[0].damage.empty());  // healthy
  EXPECT_NE((*listed)[1].damage.find("churn@1=0"), std::string::npos) << (*listed)[1].damage;
  EXPECT_TRUE((*listed)[1].routes.empty());
  EXPECT_TRUE(endpoints().deploy("healthy", "churn", 2, 10.0).ok());

  auto report = verify_workspace(*registry_, {});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->metadata_problems.size(), 1u);
  EXPECT_NE(report->metadata_problems[0].find("endpoint 'web' is damaged"), std::string::npos);

  EXPECT_EQ(endpoints().promote("web").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(endpoints().rollback("web").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(endpoints().deploy("web", "churn", 3, 10.0).status().code(), StatusCode::kDataLoss);
  auto repaired = endpoints().deploy("web", "churn", 3);
  ASSERT_TRUE(repaired.ok()) << repaired.status().message();
  EXPECT_EQ(format_routes(repaired->routes), "churn@3=100");
  EXPECT_TRUE((*endpoints().get("web"))->damage.empty());
  EXPECT_EQ(verify_workspace(*registry_, {})->metadata_problems.size(), 0u);
}

// Retiring the version an endpoint would roll back to drops that target, saying so, instead of
// leaving a rollback that routes traffic to a retired version.
TEST_F(EndpointStoreTest, RetiringARollbackTargetDropsItFromTheHistory) {
  ASSERT_TRUE(endpoints().deploy("web", "churn", 1).ok());
  ASSERT_TRUE(endpoints().deploy("web", "churn", 2).ok());
  auto dropped = registry_->models().retire("churn", 1);
  ASSERT_TRUE(dropped.ok()) << dropped.status().message();
  EXPECT_EQ(*dropped, std::vector<std::string>{"web"});
  EXPECT_TRUE((*endpoints().get("web"))->previous.empty());
  EXPECT_EQ(endpoints().rollback("web").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@2=100");
}

TEST(EndpointRoutes, ParseWhatFormatWritesAndRefuseTheRest) {
  std::vector<EndpointRoute> routes = {{"churn", 4, 12.5}, {"churn-v2.b", 3, 87.5}};
  auto parsed = parse_routes(format_routes(routes));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(format_routes(*parsed), "churn@4=12.5,churn-v2.b@3=87.5");
  for (const char* bad :
       {"churn", "churn@x=10", "churn@1", "churn@1=abc", "churn@0=100", "churn@1=-3", "churn@1=101"}) {
    EXPECT_FALSE(parse_routes(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace slipway::registry
