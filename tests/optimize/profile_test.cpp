// The profile of a small model: every stage measured, the server's half through real HTTP.
#include <gtest/gtest.h>

#include "slipway/optimize.h"
#include "slipway/train.h"
#include "support/fixtures.h"

namespace slipway::optimize {
namespace {

using namespace std::chrono_literals;

class ProfileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rows = new data::Table(testing::lending_rows(0, 500));
    bundle = train::fit(*rows, train::TrainRequest{.target = "Class"})->bundle;
  }
  static void TearDownTestSuite() { delete rows; }

  static ProfileOptions quick() {
    ProfileOptions options;
    options.bundle = bundle;
    options.model = "lending";
    options.rows = rows;
    options.rows_per_request = {1, 16};
    options.in_process_time = 50ms;
    options.server_time = 200ms;
    return options;
  }

  static inline data::Table* rows = nullptr;
  static inline std::shared_ptr<const model::Bundle> bundle;
};

TEST_F(ProfileTest, EveryStageIsMeasuredForEveryRequestSize) {
  std::vector<std::string> steps;
  ProfileOptions options = quick();
  options.on_progress = [&](int step, int total, const std::string& what) {
    EXPECT_LT(step, total);
    steps.push_back(what);
  };
  auto report = profile_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->family, "linear");
  EXPECT_EQ(report->bundle_bytes, bundle->serialize().size());
  EXPECT_EQ(report->loaded_bytes, bundle->memory_bytes());
  EXPECT_EQ(steps.size(), 7u);  // the server, then three steps per size
  ASSERT_EQ(report->sizes.size(), 2u);
  for (const auto& size : report->sizes) {
    SCOPED_TRACE(size.rows_per_request);
    std::vector<std::string> names;
    double in_process = 0.0;
    for (const auto& stage : size.stages) {
      names.push_back(stage.name);
      EXPECT_GE(stage.median_us, 0.0);
      EXPECT_GE(stage.share, 0.0);
      EXPECT_LE(stage.share, 1.0 + 1e-9);
      if (stage.name != "transport") in_process += stage.median_us;
    }
    EXPECT_EQ(names,
              (std::vector<std::string>{"parse", "preprocess", "compute", "postprocess", "encode", "transport"}));
    EXPECT_DOUBLE_EQ(size.in_process_us, in_process);
    EXPECT_GT(size.stages[0].median_us, 0.0);  // parsing a JSON request is never free
    EXPECT_GE(size.requests_timed, 20u);
    EXPECT_GT(size.server_p50_us, 0.0);
    EXPECT_GE(size.server_p99_us, size.server_p50_us);
    EXPECT_GT(size.server_rows_per_second, 0.0);
    EXPECT_GT(size.in_process_rows_per_second, 0.0);
    EXPECT_GT(size.request_bytes, 0u);
    EXPECT_GT(size.response_bytes, 0u);
    EXPECT_NE(std::find(names.begin(), names.end(), size.bottleneck), names.end());
  }
  // Sixteen rows to a request make a larger request and a larger response.
  EXPECT_GT(report->sizes[1].request_bytes, report->sizes[0].request_bytes);
  EXPECT_GT(report->sizes[1].response_bytes, report->sizes[0].response_bytes);
}

TEST_F(ProfileTest, ImpossibleRequestsAreRefusedWithTheReason) {
  ProfileOptions options = quick();
  options.rows_per_request = {0};
  EXPECT_FALSE(profile_model(options).ok());
  options.rows_per_request = {501};
  auto too_many = profile_model(options);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("the file has 500"), std::string::npos) << too_many.status().message();
  options = quick();
  options.threads = 0;
  EXPECT_FALSE(profile_model(options).ok());

  // Rows without a column the model needs: the server's own error.
  data::Table missing;
  for (const auto& column : rows->columns()) {
    if (column.name == "int_rate") continue;
    ASSERT_TRUE(missing.add_column(column).ok());
  }
  options = quick();
  options.rows = &missing;
  auto refused = profile_model(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("int_rate"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace slipway::optimize
