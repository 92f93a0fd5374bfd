// Endpoints in the registry: deploy, canary, promote and rollback, each one change with its audit
// entry; the rollback target survives a repeated deploy; bad requests change nothing.
#include <gtest/gtest.h>

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
  for (double share : {0.0, 100.0, -5.0, std::nan(""), 1e300}) {
    EXPECT_EQ(endpoints().deploy("web", "churn", 2, share).status().code(), StatusCode::kInvalidArgument) << share;
  }
  // A canary of the version already serving is refused.
  EXPECT_EQ(endpoints().deploy("web", "churn", 1, 10.0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(format_routes((*endpoints().get("web"))->routes), "churn@1=100");
  EXPECT_EQ((*endpoints().get("web"))->revision, 1);
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
