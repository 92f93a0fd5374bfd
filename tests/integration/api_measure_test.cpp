// /api optimizations and profiles against the real binary: measurements under load for seconds,
// labelled slow with the other load tests (a sanitizer makes them meaningless and does not shorten
// them; the routes' refusals and roles run under ASan through api_test).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

class ApiMeasurements : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_command({slipway_binary(), "--home", home_.path(), "train", "--data", data_path("lending_club.csv"),
                           "--target", "Class", "--model", "gbdt", "--param", "rounds=30", "--register", "trees"})
                  .exit_code,
              0);
    std::filesystem::create_directories(home_.path() + "/data");
    std::filesystem::copy_file(data_path("lending_club.csv"), home_.path() + "/data/golden.csv");
    server_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{slipway_binary(), "--home", home_.path(), "--json", "serve", "--port", "0"});
    const StartedServer started = read_started_server(*server_);
    ASSERT_GT(started.port, 0) << started.first_line;
    port_ = started.port;
  }
  void TearDown() override {
    if (!server_) return;
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait(), 0);
  }
  // The GET's answer once the job it reports has ended.
  std::string poll(const std::string& target) {
    std::string answer;
    for (int attempt = 0; attempt < 1200; ++attempt) {
      answer = http_request(port_, "GET", target).body;
      if (answer.find("\"running\":false") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return answer;
  }

  TempDir home_;
  std::unique_ptr<ChildProcess> server_;
  int port_ = 0;
};

// An optimization started over /api measures the candidates, registers them, and answers the
// table `slipway optimize --json` prints; a cancelled one stops with the rest said not measured.
TEST_F(ApiMeasurements, OptimizationsRunOnTheServerAndCanBeCancelled) {
  const std::string optimizations = "/api/models/trees/optimizations";
  // Refused before anything starts: what the CLI would refuse too.
  for (const char* body : {R"({})", R"({"data":"../golden.csv"})", R"({"data":"golden.csv","candidates":["x"]})",
                           R"({"data":"golden.csv","resume":true})", R"({"data":"golden.csv","duration_ms":10})",
                           R"({"data":"golden.csv","slo":"cost<=1/1k"})", R"({"data":"golden.csv","colour":1})"}) {
    EXPECT_EQ(http_request(port_, "POST", optimizations, body).status, 400) << body;
  }
  EXPECT_EQ(http_request(port_, "POST", optimizations, R"({"data":"none.csv"})").status, 404);
  EXPECT_EQ(http_request(port_, "POST", optimizations, R"({"data":"golden.csv","baseline":"9"})").status, 404);

  auto started = http_request(port_, "POST", optimizations,
                              R"({"data":"golden.csv","candidates":["quantize"],"duration_ms":200,)"
                              R"("slo":"p95<=100ms@50rps","register":true})");
  ASSERT_EQ(started.status, 202) << started.body;
  EXPECT_EQ(http_request(port_, "POST", optimizations, R"({"data":"golden.csv"})").status, 409);
  std::string table = poll(optimizations);
  EXPECT_NE(table.find("\"last_job\":{\"baseline\":\"trees@1\",\"data\":\"golden.csv\""), std::string::npos) << table;
  EXPECT_NE(table.find("\"name\":\"quantize\""), std::string::npos) << table;
  EXPECT_NE(table.find("\"version\":\"trees@2\""), std::string::npos) << table;
  EXPECT_NE(table.find("\"optimizations\":[{\"version\":2,"), std::string::npos) << table;
  auto versions = run_command({slipway_binary(), "--home", home_.path(), "--json", "versions", "trees"});
  EXPECT_NE(versions.out.find("\"version\":2,"), std::string::npos) << versions.out;

  auto slow = http_request(port_, "POST", optimizations, R"({"data":"golden.csv","baseline":"1","duration_ms":2000})");
  ASSERT_EQ(slow.status, 202) << slow.body;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto cancelling = http_request(port_, "POST", optimizations + "/cancel");
  EXPECT_EQ(cancelling.status, 200) << cancelling.body;
  std::string cancelled = poll(optimizations);
  EXPECT_NE(cancelled.find("the run was cancelled"), std::string::npos) << cancelled;
  EXPECT_EQ(http_request(port_, "POST", optimizations + "/cancel").status, 409);
}

// A profile started over /api answers the figures `slipway profile --json` prints.
TEST_F(ApiMeasurements, ProfilesRunOnTheServer) {
  const std::string profile = "/api/models/trees/versions/1/profile";
  EXPECT_EQ(http_request(port_, "GET", profile).status, 404);
  for (const char* body :
       {R"({})", R"({"data":"golden.csv","rows_per_request":[0]})", R"({"data":"golden.csv","rows_per_request":[1.5]})",
        R"({"data":"golden.csv","duration_ms":100000})"}) {
    EXPECT_EQ(http_request(port_, "POST", profile, body).status, 400) << body;
  }
  auto started =
      http_request(port_, "POST", profile, R"({"data":"golden.csv","rows_per_request":[1,16],"duration_ms":200})");
  ASSERT_EQ(started.status, 202) << started.body;
  std::string figures = poll(profile);
  EXPECT_NE(figures.find("\"state\":\"finished\""), std::string::npos) << figures;
  EXPECT_NE(figures.find("\"profile\":{\"model\":\"trees@1\",\"family\":\"tree_ensemble\""), std::string::npos)
      << figures;
  EXPECT_NE(figures.find("\"rows_per_request\":16"), std::string::npos) << figures;
  EXPECT_NE(figures.find("\"stage\":\"compute\""), std::string::npos) << figures;
}

}  // namespace
}  // namespace slipway::testing
