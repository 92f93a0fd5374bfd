// `slipway serve` as a user runs it: a real process on a free loopback port, real HTTP.
#include <gtest/gtest.h>

#include <csignal>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

TEST(Server, ServesV2OverHttpAndStopsCleanly) {
  TempDir home;
  auto trained = run_command({slipway_binary(), "--home", home.path(), "train", "--data", data_path("lending_club.csv"),
                              "--target", "Class", "--register", "lending"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;

  ChildProcess server({slipway_binary(), "--home", home.path(), "--json", "serve", "--port", "0"});
  std::string first_line = server.read_line(20000);
  auto at = first_line.find("\"port\":");
  ASSERT_NE(at, std::string::npos) << "serve printed: " << first_line;
  int port = std::stoi(first_line.substr(at + 7));

  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(http_request(port, "GET", "/v2/health/ready").status, 200);
  auto metadata = http_request(port, "GET", "/v2/models/lending");
  EXPECT_EQ(metadata.status, 200);
  EXPECT_NE(metadata.body.find("\"platform\":\"slipway_linear\""), std::string::npos);

  std::string request = R"({"id":"r1","inputs":[
    {"name":"funded_amnt","datatype":"FP32","shape":[2],"data":[16100,32000]},
    {"name":"term","datatype":"BYTES","shape":[2],"data":["term_36","term_60"]},
    {"name":"int_rate","datatype":"FP32","shape":[2],"data":[13.99,11.99]},
    {"name":"sub_grade","datatype":"BYTES","shape":[2],"data":["C4","C1"]},
    {"name":"addr_state","datatype":"BYTES","shape":[2],"data":["CT","MN"]},
    {"name":"verification_status","datatype":"BYTES","shape":[2],"data":["Not_Verified","Verified"]},
    {"name":"annual_inc","datatype":"FP32","shape":[2],"data":[35000,72000]},
    {"name":"emp_length","datatype":"BYTES","shape":[2],"data":["emp_5","emp_ge_10"]},
    {"name":"delinq_2yrs","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"inq_last_6mths","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"revol_util","datatype":"FP32","shape":[2],"data":[67.4,null]},
    {"name":"acc_now_delinq","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"open_il_6m","datatype":"FP32","shape":[2],"data":[1,5]},
    {"name":"open_il_12m","datatype":"FP32","shape":[2],"data":[0,1]},
    {"name":"open_il_24m","datatype":"FP32","shape":[2],"data":[0,3]},
    {"name":"total_bal_il","datatype":"FP32","shape":[2],"data":[1099,49187]},
    {"name":"all_util","datatype":"FP32","shape":[2],"data":[48,77]},
    {"name":"inq_fi","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"inq_last_12m","datatype":"FP32","shape":[2],"data":[3,0]},
    {"name":"delinq_amnt","datatype":"FP32","shape":[2],"data":[0,0]},
    {"name":"num_il_tl","datatype":"FP32","shape":[2],"data":[3,9]},
    {"name":"total_il_high_credit_limit","datatype":"FP32","shape":[2],"data":[13193,65945]}]})";
  auto inferred = http_request(port, "POST", "/v2/models/lending/infer", request);
  EXPECT_EQ(inferred.status, 200) << inferred.body;
  EXPECT_NE(inferred.body.find("\"id\":\"r1\""), std::string::npos);
  EXPECT_NE(inferred.body.find("\"shape\":[2]"), std::string::npos);

  auto bad = http_request(port, "POST", "/v2/models/lending/infer", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body.rfind("{\"error\":", 0), 0u);
  EXPECT_EQ(http_request(port, "GET", "/v2/models/ghost").status, 404);
  // The server survived the bad requests.
  EXPECT_EQ(http_request(port, "GET", "/v2/health/live").status, 200);

  auto metrics = http_request(port, "GET", "/metrics");
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"1\",code=\"200\"} 2"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("slipway_request_duration_seconds_count"), std::string::npos);

  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0);
}

}  // namespace
}  // namespace slipway::testing
