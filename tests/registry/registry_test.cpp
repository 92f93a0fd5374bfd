#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "slipway/registry.h"
#include "support/test_support.h"

namespace slipway::registry {
namespace {

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = std::move(Registry::open(dir_.path(), true)).value(); }
  testing::TempDir dir_;
  std::unique_ptr<Registry> store_;
};

TEST(ModelReference, ParsesVersionsAliasesAndLatest) {
  auto latest = parse_model_reference("churn");
  EXPECT_EQ(latest->first, "churn");
  EXPECT_FALSE(latest->second.version.has_value());
  EXPECT_TRUE(latest->second.alias.empty());
  EXPECT_EQ(*parse_model_reference("churn@3")->second.version, 3);
  EXPECT_EQ(parse_model_reference("churn@production")->second.alias, "production");
  EXPECT_FALSE(parse_model_reference("../etc@1").ok());
  EXPECT_FALSE(parse_model_reference("").ok());
  EXPECT_FALSE(validate_alias_name("42").ok());
  EXPECT_FALSE(validate_model_name("a/b").ok());
}

TEST(Registry, OpenWithoutCreateExplainsWhatToDo) {
  testing::TempDir empty;
  auto missing = Registry::open(empty.path(), false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("slipway init"), std::string::npos);
}

TEST_F(RegistryTest, RecordsRunsWithParamsAndLatestMetrics) {
  NewRun run;
  run.code_version = "abc";
  run.data_fingerprint = "f00";
  run.spec = "target: y\n";
  run.params = {{"l2", "1.0"}};
  auto run_id = store_->runs().start(run);
  ASSERT_TRUE(run_id.ok());
  ASSERT_TRUE(store_->runs().log_metrics(*run_id, {{"loss", 0.9}}, 0).ok());
  ASSERT_TRUE(store_->runs().log_metrics(*run_id, {{"loss", 0.5}, {"auc", std::nan("")}}, 1).ok());
  ASSERT_TRUE(store_->runs().finish(*run_id, true, "").ok());
  EXPECT_EQ(store_->runs().log_metrics(*run_id, {{"loss", 0.1}}).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store_->runs().finish(*run_id, true, "").ok());

  auto record = store_->runs().get(*run_id);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->status, "FINISHED");
  EXPECT_EQ(record->params.at("l2"), "1.0");
  ASSERT_EQ(record->metrics.size(), 2u);
  EXPECT_EQ(record->metrics[0].key, "loss");
  EXPECT_EQ(record->metrics[0].value, 0.5);
  EXPECT_TRUE(std::isnan(record->metrics[1].value));
  EXPECT_EQ(store_->runs().list(10)->size(), 1u);
  EXPECT_EQ(store_->runs().get("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(RegistryTest, VersionsAliasesAndResolution) {
  auto first = store_->artifacts().put(as_bytes("bundle one"));
  auto second = store_->artifacts().put(as_bytes("bundle two"));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*store_->artifacts().put(as_bytes("bundle one")), *first);

  EXPECT_EQ(store_->models().register_version("churn", std::string(64, 'a'), "").status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->models().register_version("churn", *first, "")->version, 1);
  EXPECT_EQ(store_->models().register_version("churn", *second, "")->version, 2);
  ASSERT_TRUE(store_->models().set_alias("churn", "production", 1).ok());
  EXPECT_EQ(store_->models().set_alias("churn", "production", 9).code(), StatusCode::kNotFound);

  // A bare name is the production alias (here 1, though 2 is newer); NAME@latest the newest.
  EXPECT_EQ(store_->models().resolve("churn", {})->version, 1);
  EXPECT_EQ(store_->models().resolve("churn", parse_model_reference("churn@latest")->second)->version, 2);
  EXPECT_EQ(store_->models().resolve("churn", {.version = {}, .alias = "production"})->bundle_sha256, *first);
  EXPECT_EQ(store_->models().resolve("churn", {.version = 2, .alias = ""})->bundle_sha256, *second);
  EXPECT_EQ(store_->models().resolve("churn", {.version = 3, .alias = ""}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->models().resolve("other", {}).status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(store_->models().set_alias("churn", "production", 2).ok());
  auto models = store_->models().list();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].latest_version, 2);
  EXPECT_EQ((*models)[0].aliases.at("production"), 2);

  auto audit = store_->audit().entries();
  ASSERT_EQ(audit->size(), 4u);
  EXPECT_NE((*audit)[0].find("model.register churn@1"), std::string::npos);
}

TEST_F(RegistryTest, ConcurrentRegistrationsGetDistinctVersions) {
  auto sha = store_->artifacts().put(as_bytes("shared bundle"));
  std::vector<std::jthread> threads;
  threads.reserve(8);
  std::vector<std::int64_t> versions(8);
  for (int index = 0; index < 8; ++index) {
    threads.emplace_back([&, index] { versions[index] = store_->models().register_version("m", *sha, "")->version; });
  }
  threads.clear();
  std::sort(versions.begin(), versions.end());
  for (int index = 0; index < 8; ++index) EXPECT_EQ(versions[index], index + 1);
}

TEST_F(RegistryTest, ArtifactsAreContentAddressed) {
  auto sha = store_->artifacts().put(as_bytes("abc"));
  EXPECT_EQ(*sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(store_->artifacts().path_for(*sha), dir_.path() + "/artifacts/sha256/ba/" + sha->substr(2));
  EXPECT_EQ(*read_file(store_->artifacts().path_for(*sha)), "abc");
  EXPECT_EQ(store_->artifacts().list(), std::vector<std::string>{*sha});
}

}  // namespace
}  // namespace slipway::registry
