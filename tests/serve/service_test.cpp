#include <gtest/gtest.h>

#include <cmath>

#include "slipway/serve.h"
#include "support/fixtures.h"

namespace slipway::serve {
namespace {

// A v2 request with one input per column for the first `rows` lending-club rows.
std::string named_request(std::size_t rows, const std::string& skip_column = "", const std::string& id = "req-1") {
  auto table = *data::read_csv(testing::data_path("lending_club.csv"));
  JsonWriter json;
  json.begin_object().key("id").value(id).key("inputs").begin_array();
  for (const auto& column : table.columns()) {
    if (column.name == "Class" || column.name == skip_column) continue;
    bool numeric = column.type == data::ColumnType::kNumeric;
    json.begin_object().key("name").value(column.name).key("datatype").value(numeric ? "FP32" : "BYTES");
    json.key("shape").begin_array().value(static_cast<std::uint64_t>(rows)).end_array();
    json.key("data").begin_array();
    for (std::size_t row = 0; row < rows; ++row) {
      if (column.is_missing(row))
        json.null();
      else if (numeric)
        json.value(column.numbers[row]);
      else
        json.value(column.text_at(row));
    }
    json.end_array().end_object();
  }
  json.end_array().end_object();
  return json.take();
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = testing::registry_with_lending_model(dir_, "lending");
    service_ = std::make_unique<Service>(*store_, ServiceOptions{});
  }
  HttpResponse get(const std::string& target) { return service_->handle("GET", target, ""); }
  HttpResponse post(const std::string& target, const std::string& body) {
    return service_->handle("POST", target, body);
  }

  testing::TempDir dir_;
  std::unique_ptr<registry::Registry> store_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, HealthAndServerMetadata) {
  EXPECT_EQ(get("/v2/health/live").status, 200);
  EXPECT_EQ(get("/v2/health/ready").status, 200);
  auto metadata = get("/v2");
  EXPECT_EQ(metadata.status, 200);
  EXPECT_NE(metadata.body.find("\"name\":\"slipway\""), std::string::npos);
  EXPECT_EQ(get("/nowhere").status, 404);
  EXPECT_EQ(post("/v2/health/live", "").status, 405);
}

TEST_F(ServiceTest, WarmUpLoadsTheServedVersionOfEachModel) {
  EXPECT_EQ(service_->warm_up(), std::vector<std::string>{"lending@2"});
}

TEST_F(ServiceTest, ModelMetadataAndReadiness) {
  auto metadata = get("/v2/models/lending");
  ASSERT_EQ(metadata.status, 200) << metadata.body;
  EXPECT_NE(metadata.body.find("\"versions\":[\"1\",\"2\"]"), std::string::npos);
  EXPECT_NE(metadata.body.find("{\"name\":\"addr_state\",\"datatype\":\"BYTES\",\"shape\":[-1]}"), std::string::npos);
  EXPECT_NE(metadata.body.find("{\"name\":\"probability\",\"datatype\":\"FP32\""), std::string::npos);
  EXPECT_EQ(get("/v2/models/lending/versions/1").status, 200);
  EXPECT_EQ(get("/v2/models/lending/ready").status, 200);
  EXPECT_EQ(get("/v2/models/lending/versions/7/ready").status, 404);
  EXPECT_EQ(get("/v2/models/unknown").status, 404);
  EXPECT_EQ(get("/v2/models/lending/versions/x").status, 400);
}

TEST_F(ServiceTest, InferByFeatureName) {
  auto response = post("/v2/models/lending/infer", named_request(3));
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_NE(response.body.find("\"model_name\":\"lending\",\"model_version\":\"2\",\"id\":\"req-1\""),
            std::string::npos);
  EXPECT_NE(response.body.find("{\"name\":\"probability\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":["),
            std::string::npos);
  EXPECT_NE(response.body.find("{\"name\":\"label\",\"datatype\":\"BYTES\",\"shape\":[3],\"data\":[\"good\""),
            std::string::npos);
}

TEST_F(ServiceTest, ProductionAliasRoutesUnversionedRequests) {
  ASSERT_TRUE(store_->set_alias("lending", "production", 1).ok());
  Service fresh(*store_, ServiceOptions{});
  auto response = fresh.handle("POST", "/v2/models/lending/infer", named_request(1));
  ASSERT_EQ(response.status, 200);
  EXPECT_NE(response.body.find("\"model_version\":\"1\""), std::string::npos);
  auto pinned = fresh.handle("POST", "/v2/models/lending/versions/2/infer", named_request(1));
  EXPECT_NE(pinned.body.find("\"model_version\":\"2\""), std::string::npos);
}

TEST_F(ServiceTest, SelectsRequestedOutputs) {
  std::string body = named_request(2);
  body.insert(body.size() - 1, ",\"outputs\":[{\"name\":\"label\"}]");
  auto response = post("/v2/models/lending/infer", body);
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.body.find("probability"), std::string::npos);
  body = named_request(2);
  body.insert(body.size() - 1, ",\"outputs\":[{\"name\":\"nope\"}]");
  EXPECT_EQ(post("/v2/models/lending/infer", body).status, 400);
}

struct BadRequest {
  std::string body;
  std::string message_part;
};

TEST_F(ServiceTest, BadRequestsGetOneSentence) {
  std::string good = named_request(2);
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string body = good;
    body.replace(body.find(from), from.size(), to);
    return body;
  };
  std::vector<BadRequest> cases = {
      {"not json", "not a JSON object"},
      {"{}", "non-empty 'inputs'"},
      {named_request(2, "term"), "missing input 'term'"},
      {replace("\"name\":\"term\"", "\"name\":\"terms\""), "unknown input 'terms'"},
      {replace("\"name\":\"term\",\"datatype\":\"BYTES\"", "\"name\":\"term\",\"datatype\":\"FP32\""), "must be BYTES"},
      {replace("\"name\":\"funded_amnt\",\"datatype\":\"FP32\"", "\"name\":\"funded_amnt\",\"datatype\":\"BYTES\""),
       "funded_amnt"},
      {replace("\"name\":\"funded_amnt\",\"datatype\":\"FP32\",\"shape\":[2]",
               "\"name\":\"funded_amnt\",\"datatype\":\"FP32\",\"shape\":[3]"),
       "has 2 values but its shape [3] needs 3"},
      {replace("\"name\":\"funded_amnt\",\"datatype\":\"FP32\",\"shape\":[2]",
               "\"name\":\"funded_amnt\",\"datatype\":\"FP32\",\"shape\":[1,2]"),
       "shape [N] or [N,1]"},
      {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]}]}", "categorical"},
      {"{\"inputs\":[{\"name\":3}]}", "needs a string 'name'"},
  };
  for (const auto& bad : cases) {
    auto response = post("/v2/models/lending/infer", bad.body);
    EXPECT_EQ(response.status, 400) << bad.body.substr(0, 200);
    EXPECT_EQ(response.body.rfind("{\"error\":\"", 0), 0u) << response.body;
    EXPECT_NE(response.body.find(bad.message_part), std::string::npos) << response.body;
  }
  EXPECT_EQ(post("/v2/models/ghost/infer", good).status, 404);
  EXPECT_EQ(post("/v2/models/lending/versions/9/infer", good).status, 404);
  EXPECT_EQ(get("/v2/models/lending/infer").status, 405);
}

TEST_F(ServiceTest, MetricsCountRequestsByModelVersionAndCode) {
  post("/v2/models/lending/infer", named_request(4));
  post("/v2/models/lending/infer", "garbage");
  get("/v2/models/ghost");
  auto metrics = get("/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.content_type.rfind("text/plain", 0), 0u);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"2\",code=\"200\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"2\",code=\"400\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"(unknown)\",version=\"\",code=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_inference_rows_total{model=\"lending\",version=\"2\"} 4"), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_request_duration_seconds_bucket{model=\"lending\",version=\"2\",le=\"+Inf\"} 2"),
            std::string::npos);
}

TEST_F(ServiceTest, MatrixInputForAllNumericModels) {
  auto table = *data::parse_csv("a,b,y\n1,2,3\n2,1,4\n3,3,8\n4,0,6\n", "t.csv");
  auto summary =
      train::fit(table, train::TrainRequest{.target = "y", .model_family = "linear", .params = {{"l2", "0"}}});
  auto sha = store_->artifacts().put(summary->bundle->serialize());
  ASSERT_TRUE(store_->register_version("numeric", *sha, "").ok());
  auto response = post("/v2/models/numeric/infer",
                       R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,2],"data":[[1,2],[2,1]]}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_NE(response.body.find("\"name\":\"prediction\""), std::string::npos);
  EXPECT_EQ(post("/v2/models/numeric/infer",
                 R"({"inputs":[{"name":"features","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})")
                .status,
            400);
}

}  // namespace
}  // namespace slipway::serve
