#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include "slipway/model.h"
#include "slipway/serve.h"
#include "slipway/train.h"
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
  std::string metrics_text_without_cache() { return service_->metrics_text(); }
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
  // A model that exists but is unloaded is not ready: an answer, not an error.
  ASSERT_EQ(post("/v2/repository/models/lending/unload", "").status, 200);
  auto unloaded = get("/v2/models/lending/ready");
  EXPECT_EQ(unloaded.status, 200);
  EXPECT_EQ(unloaded.body, "{\"name\":\"lending\",\"ready\":false}");
  EXPECT_EQ(post("/v2/models/lending/infer", named_request(1)).status, 503);
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
  ASSERT_TRUE(store_->models().set_alias("lending", "production", 1).ok());
  Service fresh(*store_, ServiceOptions{});
  auto response = fresh.handle("POST", "/v2/models/lending/infer", named_request(1));
  ASSERT_EQ(response.status, 200);
  EXPECT_NE(response.body.find("\"model_version\":\"1\""), std::string::npos);
  auto pinned = fresh.handle("POST", "/v2/models/lending/versions/2/infer", named_request(1));
  EXPECT_NE(pinned.body.find("\"model_version\":\"2\""), std::string::npos);
}

// A version trained without an input (an --ignore'd id, a feature an optimized version dropped)
// accepts requests that carry it, unused; its labels follow its decision threshold.
TEST_F(ServiceTest, UnusedInputsAreAcceptedAndLabelsFollowTheThreshold) {
  auto summary = train::fit(testing::lending_rows(0, 2000),
                            train::TrainRequest{.target = "Class", .excluded_columns = {"addr_state"}});
  ASSERT_TRUE(summary.ok());
  model::Manifest manifest = summary->bundle->manifest();
  auto register_as = [&](const std::string& name, const model::Manifest& with) {
    auto sha = store_->artifacts().put(summary->bundle->with_manifest(with)->serialize());
    ASSERT_TRUE(sha.ok());
    ASSERT_TRUE(store_->models().register_version(name, *sha, "").ok());
  };
  register_as("strict", manifest);
  manifest.unused_inputs = {"addr_state"};
  manifest.decision_threshold = 0.0;  // every row's label is the positive class
  register_as("lenient", manifest);
  Service fresh(*store_, ServiceOptions{});
  auto refused = fresh.handle("POST", "/v2/models/strict/infer", named_request(2));
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("unknown input 'addr_state'"), std::string::npos) << refused.body;
  auto lenient = fresh.handle("POST", "/v2/models/lenient/infer", named_request(2));
  ASSERT_EQ(lenient.status, 200) << lenient.body;
  std::string positive = manifest.class_labels[1];
  EXPECT_NE(lenient.body.find("\"data\":[\"" + positive + "\",\"" + positive + "\"]"), std::string::npos)
      << lenient.body;
  // An unused input is still a column: a matrix under its name is refused.
  std::string matrix = named_request(2);
  auto at = matrix.find("\"shape\":[2]", matrix.find("\"name\":\"addr_state\""));
  ASSERT_NE(at, std::string::npos);
  matrix.replace(at, 11, "\"shape\":[1,2]");
  auto wrong_shape = fresh.handle("POST", "/v2/models/lenient/infer", matrix);
  EXPECT_EQ(wrong_shape.status, 400);
  EXPECT_NE(wrong_shape.body.find("input 'addr_state' must have shape [N] or [N,1]"), std::string::npos)
      << wrong_shape.body;
  // Still refused: a name that is neither an input nor an unused one.
  std::string misspelt = named_request(1);
  misspelt.replace(misspelt.find("\"name\":\"term\""), 13, "\"name\":\"terms\"");
  auto junk = fresh.handle("POST", "/v2/models/lenient/infer", misspelt);
  EXPECT_EQ(junk.status, 400);
  EXPECT_NE(junk.body.find("unknown input 'terms'"), std::string::npos) << junk.body;
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
      {replace("\"name\":\"term\",\"datatype\":\"BYTES\"", "\"name\":\"term\",\"datatype\":\"FP32\""),
       "input 'term' is FP32 but holds a non-numeric value"},
      {replace("\"name\":\"funded_amnt\",\"datatype\":\"FP32\"", "\"name\":\"funded_amnt\",\"datatype\":\"FP8\""),
       "unknown datatype 'FP8'"},
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
      // Strict parsing: each of these used to be accepted silently.
      {replace("\"shape\":[2],\"data\":[", "\"shape\":[2,1],\"data\":[[1],"), "ragged data"},
      {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3]]}]}",
       "ragged data: an array of 1 items at depth 2"},
      {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],3,4]}]}", "ragged data"},
      {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,[2],3,4]}]}",
       "mixes values and arrays"},
      {replace("\"inputs\":", "\"parameters\":[1],\"inputs\":"), "'parameters' must be a JSON object"},
      {replace("\"inputs\":", "\"parameters\":{\"priority\":5},\"inputs\":"),
       "parameters.priority is 5 but model 'lending' has 1 priority level"},
      {replace("\"inputs\":", "\"outputs\":{\"name\":\"label\"},\"inputs\":"), "'outputs' must be an array"},
      {replace("\"inputs\":", "\"outputs\":[\"label\"],\"inputs\":"), "must be an object with a 'name'"},
      {replace("\"inputs\":", "\"parameters\":{\"binary_data_output\":\"yes\"},\"inputs\":"),
       "parameters.binary_data_output must be true or false"},
      {replace("\"inputs\":", "\"outputs\":[{\"name\":\"label\",\"parameters\":{\"binary_data\":1}}],\"inputs\":"),
       "binary_data must be true or false"},
  };
  for (const auto& bad : cases) {
    auto response = post("/v2/models/lending/infer", bad.body);
    EXPECT_EQ(response.status, 400) << bad.body.substr(0, 200);
    EXPECT_EQ(response.body.rfind("{\"error\":\"", 0), 0u) << response.body;
    EXPECT_NE(response.body.find(bad.message_part), std::string::npos) << response.body;
  }
  EXPECT_EQ(post("/v2/models/ghost/infer", good).status, 404);
  EXPECT_EQ(post("/v2/models/lending/versions/9/infer", good).status, 404);
  auto wrong_method = get("/v2/models/lending/infer");
  EXPECT_EQ(wrong_method.status, 405);
  ASSERT_EQ(wrong_method.headers.size(), 1u);
  EXPECT_EQ(wrong_method.headers[0], (std::pair<std::string, std::string>{"Allow", "POST"}));
  std::string length = std::to_string(good.size());
  RequestHeaders repeated{
      .authorization = {}, .inference_header_length = length, .inference_header_length_repeated = true};
  auto duplicate = service_->handle("POST", "/v2/models/lending/infer", good, repeated);
  EXPECT_EQ(duplicate.status, 400);
  EXPECT_NE(duplicate.body.find("given more than once"), std::string::npos) << duplicate.body;
}

TEST_F(ServiceTest, MetricsCountRequestsByModelVersionAndCode) {
  post("/v2/models/lending/infer", named_request(4));
  post("/v2/models/lending/infer", "garbage");
  post("/v2/models/ghost/infer", named_request(1));
  get("/v2/models/ghost");
  get("/v2/models/lending/ready");
  get("/v2/health/live");
  auto metrics = get("/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.content_type.rfind("text/plain", 0), 0u);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"2\",code=\"200\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"lending\",version=\"2\",code=\"400\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_requests_total{model=\"(unknown)\",version=\"\",code=\"404\"} 1"),
            std::string::npos);
  // Probes are counted by route, apart from inference.
  EXPECT_NE(metrics.body.find("slipway_http_requests_total{route=\"infer\",code=\"200\"} 1"), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_http_requests_total{route=\"model_metadata\",code=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_http_requests_total{route=\"model_ready\",code=\"200\"} 1"), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_http_requests_total{route=\"health\",code=\"200\"} 1"), std::string::npos);
  EXPECT_EQ(metrics.body.find("model=\"ghost\""), std::string::npos);
  EXPECT_NE(metrics.body.find("process_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(metrics.body.find("process_open_fds "), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_build_info{version=\""), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_inference_rows_total{model=\"lending\",version=\"2\"} 4"), std::string::npos);
  EXPECT_NE(metrics.body.find("slipway_request_duration_seconds_bucket{model=\"lending\",version=\"2\",le=\"+Inf\"} 2"),
            std::string::npos);
}

// Regression: every unknown or invalid model name in a path became a label set (150k requests
// made /metrics 534 MB). Now only names of models that exist are labels.
TEST_F(ServiceTest, UnknownModelNamesDoNotGrowTheMetrics) {
  post("/v2/models/lending/infer", named_request(1));
  std::size_t before = get("/metrics").body.size();
  const std::string one_row = named_request(1);
  for (int index = 0; index < 2000; ++index) {
    std::string name = "ghost" + std::to_string(index);
    post("/v2/models/" + name + "/infer", one_row);
    post("/v2/models/" + name + "/versions/" + std::to_string(index + 1) + "/infer", "{}");
    post("/v2/models/bad%20name" + std::to_string(index) + "/infer", "{}");
    get("/v2/models/" + name + "/ready");
    get("/v2/models/" + name + "/stats");
    post("/v2/models/lending/versions/" + std::to_string(100 + index) + "/infer", one_row);
    service_->record_refusal("/v2/models/" + name + "/infer", http::Refusal::kClientClosed);
    service_->record_refusal("/v2/models/" + name + "/infer", http::Refusal::kOverloaded);
  }
  std::string after = get("/metrics").body;
  // A few new series (404, 499, 429 and their reasons under "(unknown)"), not thousands.
  EXPECT_LT(after.size(), before + 8000) << after;
  EXPECT_EQ(after.find("ghost"), std::string::npos);
  EXPECT_EQ(after.find("version=\"105\""), std::string::npos);
}

// Under --auth nothing is labelled before authorization: refused and unauthenticated requests
// count under "(unknown)", even when they name a model that exists.
TEST_F(ServiceTest, UnderAuthRefusalsAreNotLabelledByTheNameTheyGive) {
  ServiceOptions options;
  options.require_auth = true;
  Service service(*store_, options);
  auto admin = store_->tokens().create("ops", "admin");
  ASSERT_TRUE(admin.ok());
  for (int index = 0; index < 50; ++index) {
    std::string name = "ghost" + std::to_string(index);
    EXPECT_EQ(service.handle("POST", "/v2/models/" + name + "/infer", named_request(1)).status, 401);
    service.record_refusal("/v2/models/" + name + "/infer", http::Refusal::kClientClosed);
    service.record_refusal("/v2/models/lending/infer", http::Refusal::kClientClosed);
  }
  EXPECT_EQ(service.handle("POST", "/v2/models/lending/infer", named_request(1)).status, 401);
  std::string metrics =
      service.handle("GET", "/metrics", "", RequestHeaders{.authorization = "Bearer " + admin->secret}).body;
  EXPECT_EQ(metrics.find("ghost"), std::string::npos);
  EXPECT_EQ(metrics.find("model=\"lending\""), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("model=\"(unknown)\""), std::string::npos) << metrics;
}

TEST_F(ServiceTest, MatrixInputForAllNumericModels) {
  auto table = *data::parse_csv("a,b,y\n1,2,3\n2,1,4\n3,3,8\n4,0,6\n", "t.csv");
  auto summary =
      train::fit(table, train::TrainRequest{.target = "y", .model_family = "linear", .params = {{"l2", "0"}}});
  auto sha = store_->artifacts().put(summary->bundle->serialize());
  ASSERT_TRUE(store_->models().register_version("numeric", *sha, "").ok());
  auto response = post("/v2/models/numeric/infer",
                       R"({"inputs":[{"name":"features","datatype":"FP32","shape":[2,2],"data":[[1,2],[2,1]]}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_NE(response.body.find("\"name\":\"prediction\""), std::string::npos);
  EXPECT_EQ(post("/v2/models/numeric/infer",
                 R"({"inputs":[{"name":"features","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})")
                .status,
            400);
}

TEST_F(ServiceTest, ServesImportedTreeEnsembles) {
  std::string xgboost_json = R"({"version":[1,7,4],"learner":{"feature_names":["a","b"],"feature_types":[],
    "learner_model_param":{"base_score":"5E-1","num_class":"0","num_feature":"2","num_target":"1"},
    "objective":{"name":"reg:squarederror"},
    "gradient_booster":{"name":"gbtree","model":{"gbtree_model_param":{"num_trees":"1"},"tree_info":[0],
      "trees":[{"left_children":[1,-1,-1],"right_children":[2,-1,-1],"split_indices":[1,0,0],
                "split_conditions":[2.0,10.0,20.0],"default_left":[0,0,0],"split_type":[0,0,0]}]}}}})";
  auto bundle = model::import_xgboost_json(xgboost_json, {});
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  auto sha = store_->artifacts().put((*bundle)->serialize());
  ASSERT_TRUE(store_->models().register_version("trees", *sha, "").ok());
  auto metadata = get("/v2/models/trees");
  EXPECT_NE(metadata.body.find("\"platform\":\"slipway_tree_ensemble\""), std::string::npos) << metadata.body;
  auto by_matrix = post("/v2/models/trees/infer",
                        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3,2],"data":[[0,1],[0,3],[0,null]]}]})");
  ASSERT_EQ(by_matrix.status, 200) << by_matrix.body;
  EXPECT_NE(by_matrix.body.find("\"data\":[10.5,20.5,20.5]"), std::string::npos) << by_matrix.body;
  auto by_name = post("/v2/models/trees/infer",
                      R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[7]},
                                    {"name":"b","datatype":"FP64","shape":[1],"data":[1.5]}]})");
  EXPECT_NE(by_name.body.find("\"data\":[10.5]"), std::string::npos) << by_name.body;
}

// A multiclass model answers with a [rows, classes] probability tensor and the label per row.
TEST_F(ServiceTest, ServesMulticlassProbabilitiesAndLabels) {
  std::string csv = "x,animal\n";
  for (int row = 0; row < 300; ++row) {
    csv += std::to_string(row % 3) + "," + (row % 3 == 0 ? "cat" : row % 3 == 1 ? "dog" : "emu") + "\n";
  }
  auto summary =
      train::fit(*data::parse_csv(csv, "animals.csv"),
                 train::TrainRequest{.target = "animal", .model_family = "gbdt", .params = {{"rounds", "20"}}});
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  auto sha = store_->artifacts().put(summary->bundle->serialize());
  ASSERT_TRUE(store_->models().register_version("animals", *sha, "").ok());
  auto metadata = get("/v2/models/animals");
  EXPECT_NE(metadata.body.find("{\"name\":\"probability\",\"datatype\":\"FP32\",\"shape\":[-1,3],"
                               "\"parameters\":{\"class_labels\":[\"cat\",\"dog\",\"emu\"]}}"),
            std::string::npos)
      << metadata.body;
  auto response =
      post("/v2/models/animals/infer", R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[0,2]}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_NE(response.body.find("\"name\":\"probability\",\"datatype\":\"FP32\",\"shape\":[2,3]"), std::string::npos)
      << response.body;
  EXPECT_NE(response.body.find("\"data\":[\"cat\",\"emu\"]"), std::string::npos) << response.body;
}

// With dynamic batching, concurrent requests share model calls, and every response is the one
// the request gets alone; a full queue answers 429 with Retry-After, a queue timeout 503.
TEST_F(ServiceTest, DynamicBatchingAnswersEachRequestAsAlone) {
  ServiceOptions options;
  options.defaults.batching.max_batch_size = 64;
  options.defaults.batching.max_queue_delay = std::chrono::milliseconds(20);
  Service batched(*store_, options);
  std::vector<std::string> bodies;
  std::vector<std::string> expected;
  for (std::size_t rows = 1; rows <= 8; ++rows) {
    bodies.push_back(named_request(rows, "", "r" + std::to_string(rows)));
    expected.push_back(post("/v2/models/lending/infer", bodies.back()).body);  // unbatched service
  }
  std::vector<std::thread> clients;
  clients.reserve(8);
  std::atomic<int> mismatches{0};
  for (int client = 0; client < 8; ++client) {
    clients.emplace_back([&, client] {
      for (int round = 0; round < 10; ++round) {
        std::size_t index = static_cast<std::size_t>((client + round) % 8);
        HttpResponse response = batched.handle("POST", "/v2/models/lending/infer", bodies[index]);
        if (response.status != 200 || response.body != expected[index]) ++mismatches;
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(mismatches.load(), 0);
  std::string metrics = batched.metrics_text();
  auto executions_at = metrics.find("slipway_batch_executions_total{model=\"lending\"");
  ASSERT_NE(executions_at, std::string::npos) << metrics;
  int executions = std::stoi(metrics.substr(metrics.find("} ", executions_at) + 2));
  EXPECT_LT(executions, 80);  // 80 requests, fewer model calls
  auto queue_count_at = metrics.find("slipway_queue_duration_seconds_count{model=\"lending\"");
  ASSERT_NE(queue_count_at, std::string::npos);
  EXPECT_EQ(metrics.substr(metrics.find("} ", queue_count_at) + 2, 3), "80\n");
  // Triton's statistics and configuration shapes.
  std::string stats = batched.handle("GET", "/v2/models/lending/stats", "").body;
  EXPECT_NE(stats.find("\"inference_count\":360,"), std::string::npos) << stats;  // 10 x (1 + ... + 8) rows
  EXPECT_NE(stats.find("\"success\":{\"count\":80,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"queue\":{\"count\":80,"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"compute_input\":{\"count\":80,"), std::string::npos) << stats;
  EXPECT_EQ(batched.handle("GET", "/v2/models/stats", "").body, stats);
  // batch_stats: the model calls by batch size add up to the executions, and cache counts appear.
  EXPECT_NE(stats.find("\"cache_hit\":{\"count\":0,"), std::string::npos) << stats;
  int batched_calls = 0;
  for (auto at = stats.find("\"batch_size\":"); at != std::string::npos; at = stats.find("\"batch_size\":", at + 1)) {
    auto count_at = stats.find("\"count\":", at) + 8;
    batched_calls += std::stoi(stats.substr(count_at));
  }
  EXPECT_EQ(batched_calls, executions) << stats;
  std::string config = batched.handle("GET", "/v2/models/lending/config", "").body;
  EXPECT_NE(config.find("\"max_batch_size\":64,\"dynamic_batching\":{\"preferred_batch_size\":[],"
                        "\"max_queue_delay_microseconds\":20000"),
            std::string::npos)
      << config;
  EXPECT_NE(get("/v2/models/lending/config").body.find("\"max_batch_size\":0,\"instance_group\""), std::string::npos);
  // Without batching, batch_stats counts each request's call at its own size, as Triton does.
  std::string unbatched = get("/v2/models/lending/stats").body;
  auto number_after = [&](const std::string& key, std::size_t from) {
    return std::stoi(unbatched.substr(unbatched.find(key, from) + key.size()));
  };
  int unbatched_calls = 0;
  for (auto at = unbatched.find("\"batch_size\":"); at != std::string::npos;
       at = unbatched.find("\"batch_size\":", at + 1)) {
    unbatched_calls += number_after("\"count\":", at);
  }
  EXPECT_GT(unbatched_calls, 0);
  EXPECT_EQ(unbatched_calls, number_after("\"execution_count\":", 0)) << unbatched;
  EXPECT_NE(config.find("\"input\":[{\"name\":\"funded_amnt\",\"data_type\":\"TYPE_FP32\",\"dims\":[1]}"),
            std::string::npos);
  EXPECT_NE(config.find("\"output\":[{\"name\":\"probability\",\"data_type\":\"TYPE_FP32\",\"dims\":[1]}"),
            std::string::npos);

  ServiceOptions tight;
  tight.defaults.batching.max_batch_size = 1000;
  tight.defaults.batching.max_queue_delay = std::chrono::milliseconds(300);
  tight.defaults.batching.max_queue_size = 1;
  Service queueing(*store_, tight);
  std::promise<HttpResponse> first;
  queueing.handle_async("POST", "/v2/models/lending/infer", bodies[0], {},
                        [&](HttpResponse response) { first.set_value(std::move(response)); });
  HttpResponse refused = queueing.handle("POST", "/v2/models/lending/infer", bodies[0]);
  EXPECT_EQ(refused.status, 429) << refused.body;
  ASSERT_EQ(refused.headers.size(), 1u);
  EXPECT_EQ(refused.headers[0].first, "Retry-After");
  EXPECT_EQ(first.get_future().get().status, 200);
  std::string with_timeout = bodies[0];
  with_timeout.insert(1, R"("parameters":{"timeout":1000},)");
  HttpResponse expired = queueing.handle("POST", "/v2/models/lending/infer", with_timeout);
  EXPECT_EQ(expired.status, 503) << expired.body;
}

// Opted-in models answer a byte-identical request from the cache; others never cache.
TEST_F(ServiceTest, ResponseCacheServesRepeatedRequests) {
  ServiceOptions options;
  options.model_overrides["lending"]["cache"] = "true";
  options.response_cache_bytes = 1 << 20;
  Service cached(*store_, options);
  std::string body = named_request(3);
  HttpResponse first = cached.handle("POST", "/v2/models/lending/infer", body);
  HttpResponse second = cached.handle("POST", "/v2/models/lending/infer", body);
  HttpResponse other = cached.handle("POST", "/v2/models/lending/infer", named_request(2));
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(other.status, 200);
  std::string metrics = cached.metrics_text();
  auto count = [&](const std::string& name) {
    auto at = metrics.find(name + "{model=\"lending\"");
    return at == std::string::npos ? -1 : std::stoi(metrics.substr(metrics.find("} ", at) + 2));
  };
  EXPECT_EQ(count("slipway_cache_hits_total"), 1);
  EXPECT_EQ(count("slipway_cache_misses_total"), 2);
  EXPECT_NE(metrics.find("slipway_cache_bytes "), std::string::npos);
  EXPECT_EQ(metrics_text_without_cache().find("slipway_cache_"), std::string::npos);
}

// Every numeric datatype is coerced to float32 when its values fit it, and refused with the
// reason when they do not.
TEST_F(ServiceTest, NumericDatatypesAreCoercedOrRefused) {
  std::string good = named_request(2);
  std::string reference = post("/v2/models/lending/infer", good).body;
  auto with_type = [&](const std::string& type, const std::string& data) {
    std::string body = good;
    // funded_amnt is numeric: rewrite its datatype and data.
    auto at = body.find("{\"name\":\"funded_amnt\"");
    auto end = body.find('}', at);
    body.replace(at, end - at + 1,
                 "{\"name\":\"funded_amnt\",\"datatype\":\"" + type + "\",\"shape\":[2],\"data\":" + data + "}");
    return post("/v2/models/lending/infer", body);
  };
  auto table = *data::read_csv(testing::data_path("lending_club.csv"));
  const auto& funded = *table.find("funded_amnt");
  std::string integers = "[" + std::to_string(static_cast<long long>(funded.numbers[0])) + "," +
                         std::to_string(static_cast<long long>(funded.numbers[1])) + "]";
  ASSERT_EQ(funded.numbers[0], std::trunc(funded.numbers[0]));
  for (const char* type : {"INT32", "INT64", "UINT32", "UINT64", "FP64"}) {
    auto response = with_type(type, integers);
    EXPECT_EQ(response.status, 200) << type << ": " << response.body;
    EXPECT_EQ(response.body, reference) << type;
  }
  auto fraction = with_type("INT32", "[1.5, 2]");
  EXPECT_EQ(fraction.status, 400);
  EXPECT_NE(fraction.body.find("is INT32 but holds 1.5, which is not an integer"), std::string::npos) << fraction.body;
  auto negative = with_type("UINT8", "[-1, 2]");
  EXPECT_NE(negative.body.find("is UINT8 but holds -1, outside the type's range"), std::string::npos) << negative.body;
  auto too_big = with_type("INT8", "[300, 2]");
  EXPECT_NE(too_big.body.find("outside the type's range"), std::string::npos) << too_big.body;
  auto boolean = with_type("FP32", "[true, 2]");
  EXPECT_NE(boolean.body.find("holds a boolean"), std::string::npos) << boolean.body;
  EXPECT_EQ(with_type("BOOL", "[true, false]").status, 200);
  auto half = with_type("FP16", "[1, 2]");
  EXPECT_NE(half.body.find("FP16 and BF16 travel only as binary"), std::string::npos) << half.body;
  // Regression: 1e300 became +inf in float32 and reached the model.
  for (const char* type : {"FP32", "FP64"}) {
    auto huge = with_type(type, "[1e300, 2]");
    EXPECT_EQ(huge.status, 400) << type;
    EXPECT_NE(huge.body.find("holds 1e+300, which is infinite as a 32-bit float"), std::string::npos) << huge.body;
  }
  EXPECT_EQ(with_type("FP64", "[-1e39, 2]").status, 400);
}

// Triton's binary tensor extension: a JSON header of Inference-Header-Content-Length bytes,
// then each binary input's raw little-endian bytes in input order.
std::string binary_request(std::size_t rows, std::string& binary_out, bool binary_output = false) {
  auto table = *data::read_csv(testing::data_path("lending_club.csv"));
  JsonWriter json;
  json.begin_object().key("inputs").begin_array();
  for (const auto& column : table.columns()) {
    if (column.name == "Class") continue;
    bool numeric = column.type == data::ColumnType::kNumeric;
    std::string bytes;
    for (std::size_t row = 0; row < rows; ++row) {
      if (numeric) {
        double value = column.is_missing(row) ? std::nan("") : column.numbers[row];
        bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
      } else {
        std::string text = column.text_at(row);
        auto length = static_cast<std::uint32_t>(text.size());
        bytes.append(reinterpret_cast<const char*>(&length), 4);
        bytes += text;
      }
    }
    json.begin_object().key("name").value(column.name).key("datatype").value(numeric ? "FP64" : "BYTES");
    json.key("shape").begin_array().value(static_cast<std::uint64_t>(rows)).end_array();
    json.key("parameters").begin_object().key("binary_data_size").value(static_cast<std::uint64_t>(bytes.size()));
    json.end_object().end_object();
    binary_out += bytes;
  }
  json.end_array();
  if (binary_output) json.key("parameters").raw("{\"binary_data_output\":true}");
  json.end_object();
  return json.take();
}

TEST_F(ServiceTest, BinaryTensorsInAndOut) {
  std::string binary;
  std::string header = binary_request(3, binary);
  // The categorical column with a missing value cannot travel as BYTES; the fixture has none in 3 rows.
  std::string length = std::to_string(header.size());
  RequestHeaders headers{.authorization = {}, .inference_header_length = length};
  auto response = service_->handle("POST", "/v2/models/lending/infer", header + binary, headers);
  ASSERT_EQ(response.status, 200) << response.body;
  std::string json_reference = post("/v2/models/lending/infer", named_request(3, "", "")).body;
  EXPECT_EQ(response.body, json_reference);

  // Binary outputs: the JSON says each output's size; raw bytes follow.
  std::string binary2;
  std::string header2 = binary_request(3, binary2, true);
  std::string length2 = std::to_string(header2.size());
  auto raw = service_->handle("POST", "/v2/models/lending/infer", header2 + binary2,
                              RequestHeaders{.authorization = {}, .inference_header_length = length2});
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(raw.content_type, "application/octet-stream");
  ASSERT_EQ(raw.headers.size(), 1u);
  EXPECT_EQ(raw.headers[0].first, "Inference-Header-Content-Length");
  std::size_t json_size = std::stoul(raw.headers[0].second);
  std::string json_part = raw.body.substr(0, json_size);
  EXPECT_NE(json_part.find("\"name\":\"probability\",\"datatype\":\"FP32\",\"shape\":[3],\"parameters\":{"
                           "\"binary_data_size\":12}"),
            std::string::npos)
      << json_part;
  float first = 0;
  std::memcpy(&first, raw.body.data() + json_size, 4);
  auto probability_at = json_reference.find("\"data\":[") + 8;
  EXPECT_FLOAT_EQ(first, std::stof(json_reference.substr(probability_at)));

  // Truncated, padded and header-less bodies get one sentence each.
  auto truncated =
      service_->handle("POST", "/v2/models/lending/infer", header + binary.substr(0, binary.size() - 3), headers);
  EXPECT_EQ(truncated.status, 400);
  EXPECT_NE(truncated.body.find("is the body truncated?"), std::string::npos) << truncated.body;
  auto padded = service_->handle("POST", "/v2/models/lending/infer", header + binary + "xyz", headers);
  EXPECT_NE(padded.body.find("3 bytes follow the binary inputs' data"), std::string::npos) << padded.body;
  auto no_header = post("/v2/models/lending/infer", header);
  EXPECT_NE(no_header.body.find("no Inference-Header-Content-Length header"), std::string::npos) << no_header.body;
  // An infinite FP64 in binary data (the first input is numeric) is refused; NaN is missing.
  std::string with_infinity = binary;
  double infinity = std::numeric_limits<double>::infinity();
  std::memcpy(with_infinity.data(), &infinity, sizeof infinity);
  auto infinite = service_->handle("POST", "/v2/models/lending/infer", header + with_infinity, headers);
  EXPECT_EQ(infinite.status, 400);
  EXPECT_NE(infinite.body.find("holds an infinite value at element 0"), std::string::npos) << infinite.body;
  std::string too_long = std::to_string(header.size() + binary.size() + 1);
  auto beyond = service_->handle("POST", "/v2/models/lending/infer", header + binary,
                                 RequestHeaders{.authorization = {}, .inference_header_length = too_long});
  EXPECT_NE(beyond.body.find("but the body has only"), std::string::npos) << beyond.body;
  auto not_number = service_->handle("POST", "/v2/models/lending/infer", header + binary,
                                     RequestHeaders{.authorization = {}, .inference_header_length = "12x"});
  EXPECT_EQ(not_number.status, 400);
}

}  // namespace
}  // namespace slipway::serve
