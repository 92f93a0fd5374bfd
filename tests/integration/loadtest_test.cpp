// `slipway loadtest` against a real `slipway serve`: counts, statuses, SLO exit codes, CSV bodies.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto trained = run_command({slipway_binary(), "--home", home_.path(), "train", "--data",
                                data_path("lending_club.csv"), "--target", "Class", "--register", "lending"});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    server_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{slipway_binary(), "--home", home_.path(), "--json", "serve", "--port", "0"});
    const StartedServer started = read_started_server(*server_);
    ASSERT_GT(started.port, 0) << "serve printed: " << started.first_line;
    port_ = started.port;
  }
  CommandResult loadtest(std::vector<std::string> args) {
    args.insert(args.begin(), {slipway_binary(), "--json", "loadtest"});
    return run_command(args);
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

  TempDir home_;
  std::unique_ptr<ChildProcess> server_;
  int port_ = 0;
};

TEST_F(LoadTest, OpenLoopSendsTheScheduleAndChecksSlos) {
  auto result =
      loadtest({url("/v2/health/live"), "--rate", "200", "--duration", "1s", "--warmup", "200ms", "--slo", "p99<=5s"});
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  // 200 req/s for one measured second: the schedule is exact, the warm-up is not counted.
  EXPECT_NE(result.out.find("\"requests\":200,"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("\"status\":{\"200\":200}"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("\"slos_met\":true"), std::string::npos);

  auto missed = loadtest({url("/v2/health/live"), "--rate", "50", "--duration", "500ms", "--slo", "max<=1us"});
  EXPECT_EQ(missed.exit_code, 1);
  EXPECT_NE(missed.out.find("\"met\":false"), std::string::npos) << missed.out;
}

TEST_F(LoadTest, ClosedLoopPostsV2RequestsBuiltFromCsvRows) {
  auto result = loadtest({url("/v2/models/lending/infer"), "--concurrency", "4", "--duration", "1s", "--csv",
                          data_path("lending_club.csv"), "--skip", "Class", "--rows-per-request", "8"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("\"mode\":\"closed\""), std::string::npos);
  EXPECT_EQ(result.out.find("\"400\""), std::string::npos) << result.out;  // every body was a valid request
  EXPECT_NE(result.out.find("\"status\":{\"200\":"), std::string::npos) << result.out;
}

TEST_F(LoadTest, UnreachableServerAndBadFlagsAreReported) {
  // A port nobody listens on: every request ends without a response, counted, no crash.
  auto refused = loadtest({"http://127.0.0.1:1/v2/health/live", "--rate", "20", "--duration", "300ms"});
  EXPECT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.out.find("\"no_response\":6"), std::string::npos) << refused.out;

  auto neither = loadtest({url("/v2/health/live")});
  EXPECT_EQ(neither.exit_code, 1);
  EXPECT_NE(neither.err.find("give --rate R (open loop) or --concurrency C (closed loop)"), std::string::npos);
  auto bad_slo = loadtest({url("/"), "--rate", "1", "--slo", "p95<50ms"});
  EXPECT_NE(bad_slo.err.find("must look like p95<=50ms"), std::string::npos) << bad_slo.err;
  auto bad_url = loadtest({"https://example.org/", "--rate", "1"});
  EXPECT_NE(bad_url.err.find("must start with http://"), std::string::npos) << bad_url.err;
  auto bad_duration = loadtest({url("/"), "--rate", "1", "--duration", "soon"});
  EXPECT_NE(bad_duration.err.find("is not a duration"), std::string::npos) << bad_duration.err;
  // Regression: a rate no generator can send was allocated instead of refused.
  auto huge_rate = loadtest({url("/"), "--rate", "1e15", "--duration", "60m"});
  EXPECT_EQ(huge_rate.exit_code, 1);
  EXPECT_NE(huge_rate.err.find("more than a load generator can schedule"), std::string::npos) << huge_rate.err;
}

}  // namespace
}  // namespace slipway::testing
