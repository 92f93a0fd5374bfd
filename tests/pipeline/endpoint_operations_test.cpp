// The endpoint operations every front door calls (pipeline.h): who may approve and lift an
// approval requirement, the gate before a deploy, a constant fallback against the main version,
// the order of settings and routes, and the refusals that leave the store as it was.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "slipway/pipeline.h"
#include "support/test_support.h"

namespace slipway::pipeline {
namespace {

using slipway::testing::data_path;
using slipway::testing::TempDir;

class EndpointOperations : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = registry::Registry::open(dir_.file("home"), {.create = true});
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    registry_ = std::move(*opened);
    // The first 2,000 rows: enough for a gate to measure, quick under ASan.
    std::ifstream whole(data_path("lending_club.csv"));
    std::string rows, line;
    for (int row = 0; row <= 2000 && std::getline(whole, line); ++row) rows += line + "\n";
    data_ = dir_.file("lending_2000.csv");
    slipway::testing::write_text(data_, rows);
    TrainSpec spec;
    spec.data = data_;
    spec.target = "Class";
    spec.model = "logistic";
    spec.register_as = "lending";
    ASSERT_TRUE(run_training(*registry_, spec).ok());
    spec.ignore = {"annual_inc"};
    ASSERT_TRUE(run_training(*registry_, spec).ok());
    DeployRequest first;
    first.endpoint = "web";
    first.reference = "lending@1";
    ASSERT_TRUE(deploy(*registry_, first, {}).ok());
  }
  std::string routes() { return registry::format_routes((*registry_->endpoints().get("web"))->routes); }

  TempDir dir_;
  std::string data_;
  std::unique_ptr<registry::Registry> registry_;
  const Caller deployer_{"token:deployer", false};
  const Caller admin_{"token:ops", true};
};

TEST_F(EndpointOperations, ADeployerCannotApproveNorLiftTheApprovalRequirement) {
  EndpointSettingsRequest require;
  require.settings.require_approval = true;
  ASSERT_TRUE(configure_endpoint(*registry_, "web", require, deployer_).ok());  // narrowing is allowed

  DeployRequest canary;
  canary.endpoint = "web";
  canary.reference = "lending@2";
  canary.canary = 10.0;
  EXPECT_EQ(deploy(*registry_, canary, deployer_).status().code(), StatusCode::kFailedPrecondition);

  EndpointSettingsRequest lift;
  lift.settings.require_approval = false;
  EXPECT_EQ(configure_endpoint(*registry_, "web", lift, deployer_).status().code(), StatusCode::kPermissionDenied);
  // Not through deploy's settings either.
  DeployRequest lifting = canary;
  lifting.settings = lift;
  EXPECT_EQ(deploy(*registry_, lifting, deployer_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE((*registry_->endpoints().get("web"))->require_approval);
  EXPECT_EQ(set_approval(*registry_, {"lending", 2, "holdout ok", false}, deployer_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(routes(), "lending@1=100");

  auto approved = set_approval(*registry_, {"lending", 2, "holdout ok", false}, admin_);
  ASSERT_TRUE(approved.ok()) << approved.status().message();
  EXPECT_EQ(approved->approval->approver, "token:ops");
  ASSERT_TRUE(deploy(*registry_, canary, deployer_).ok());
  EXPECT_EQ(routes(), "lending@2=10,lending@1=90");
  EXPECT_TRUE(configure_endpoint(*registry_, "web", lift, admin_).ok());
}

TEST_F(EndpointOperations, NotesAndOwnersAreTextWithoutControlCharacters) {
  for (const std::string& note : {std::string(), std::string("ok\x1b[31m"), std::string("a\0b", 3),
                                  std::string(1001, 'x'), std::string("\xff\xfe")}) {
    EXPECT_EQ(set_approval(*registry_, {"lending", 2, note, false}, admin_).status().code(),
              StatusCode::kInvalidArgument);
  }
  EndpointSettingsRequest owner;
  owner.settings.owner = std::string("risk\x07team");
  EXPECT_EQ(configure_endpoint(*registry_, "web", owner, admin_).status().code(), StatusCode::kInvalidArgument);
  owner.settings.owner = "risk team — Zürich";
  EXPECT_TRUE(configure_endpoint(*registry_, "web", owner, admin_).ok());
}

TEST_F(EndpointOperations, AFailedGateDeploysNothingAndIsRecorded) {
  DeployRequest gated;
  gated.endpoint = "web";
  gated.reference = "lending@2";
  GateRequest gate;
  gate.data_path = data_;
  gate.criteria.metric = "auc";
  gate.criteria.min = 0.9999;
  gated.gate = gate;
  auto refused = deploy(*registry_, gated, deployer_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("the gate failed"), std::string::npos) << refused.status().message();
  EXPECT_EQ(routes(), "lending@1=100");
  auto recorded = registry_->models().gate_results("lending", 2);
  ASSERT_TRUE(recorded.ok());
  ASSERT_EQ(recorded->size(), 1u);
  EXPECT_FALSE(recorded->front().passed);
  EXPECT_EQ(recorded->front().baseline_version, 1);

  gated.gate->criteria.min.reset();
  gated.gate->criteria.max_drop = 0.05;
  auto deployed = deploy(*registry_, gated, deployer_);
  ASSERT_TRUE(deployed.ok()) << deployed.status().message();
  ASSERT_TRUE(deployed->gate.has_value());
  EXPECT_TRUE(deployed->gate->passed());
  EXPECT_EQ(routes(), "lending@2=100");
}

TEST_F(EndpointOperations, AConstantFallbackMustFitTheMainVersion) {
  EndpointSettingsRequest fallback;
  fallback.settings.fallback = "constant:1.5";  // not a probability
  EXPECT_EQ(configure_endpoint(*registry_, "web", fallback, admin_).status().code(), StatusCode::kInvalidArgument);
  fallback.settings.fallback = "constant:0.2";
  auto set = configure_endpoint(*registry_, "web", fallback, admin_);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->fallback, "constant:0.2");
}

TEST_F(EndpointOperations, RequestsOfTheWrongShapeChangeNothing) {
  DeployRequest request;
  request.endpoint = "web";
  EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument);  // nothing asked
  request.reference = "lending@2";
  request.promote = true;
  EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument);
  request.promote = false;
  request.canary = 10.0;
  request.steps = {10, 100};
  EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument);
  request.steps.clear();
  for (double share : {99.999, 0.001, 100.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    request.canary = share;
    EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument) << share;
  }
  request.canary.reset();
  request.steps = {100};
  EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument);
  request.steps = {1e-300, 100};
  EXPECT_EQ(deploy(*registry_, request, admin_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(routes(), "lending@1=100");
  EXPECT_EQ((*registry_->endpoints().get("web"))->revision, 1);
}

TEST_F(EndpointOperations, RetiringTheRollbackTargetSaysWhichEndpointsLostIt) {
  DeployRequest second;
  second.endpoint = "web";
  second.reference = "lending@2";
  ASSERT_TRUE(deploy(*registry_, second, admin_).ok());
  auto retired = retire(*registry_, "lending", 1, admin_);
  ASSERT_TRUE(retired.ok()) << retired.status().message();
  EXPECT_EQ(retired->rollback_targets_dropped, std::vector<std::string>{"web"});
  EXPECT_EQ(rollback(*registry_, "web", admin_).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace slipway::pipeline
