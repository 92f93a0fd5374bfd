// Model lifecycle in one server: serving configs from the registry, hot swap, failed loads, idle
// unload, the memory budget, the repository API and bearer-token auth.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "serve/service_state.h"
#include "slipway/serve.h"
#include "slipway/train.h"
#include "support/fixtures.h"

namespace slipway::serve {
namespace {

using namespace std::chrono_literals;

std::string one_row_request() {
  return R"({"inputs":[{"name":"funded_amnt","datatype":"FP32","shape":[1],"data":[10000]},)"
         R"({"name":"term","datatype":"BYTES","shape":[1],"data":["term_36"]}]})";
}

// Trains a small two-input model on lending rows [first, first + count), so bundles differ.
std::string small_bundle(registry::Registry& store, std::uint32_t first, std::uint32_t count) {
  auto table = *data::read_csv(testing::data_path("lending_club.csv"));
  std::vector<std::uint32_t> rows(count);
  for (std::uint32_t row = 0; row < count; ++row) rows[row] = first + row;
  train::TrainRequest request{.target = "Class"};
  request.features = {"funded_amnt", "term"};
  auto summary = train::fit(table.take_rows(rows), request);
  return *store.artifacts().put(summary->bundle->serialize());
}

// The value of the first sample of `metric` whose labels contain `labels`; -1 when absent.
double metric_value(const std::string& text, const std::string& metric, const std::string& labels = "") {
  std::size_t at = 0;
  while ((at = text.find(metric, at)) != std::string::npos) {
    std::size_t line_end = text.find('\n', at);
    std::string line = text.substr(at, line_end - at);
    bool line_start = at == 0 || text[at - 1] == '\n';
    at = line_end;
    if (!line_start) continue;
    if (line.rfind(metric + "{", 0) != 0 && line.rfind(metric + " ", 0) != 0) continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

std::string version_of(const HttpResponse& response) {
  auto at = response.body.find("\"model_version\":\"");
  if (at == std::string::npos) return "";
  at += 17;
  return response.body.substr(at, response.body.find('"', at) - at);
}

// Polls `check` for up to two seconds.
template <typename Check>
bool eventually(Check check) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (check()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return check();
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(registry::Registry::open(dir_.path(), true)).value();
    first_sha_ = small_bundle(*store_, 0, 1000);
    second_sha_ = small_bundle(*store_, 1000, 1000);
    ASSERT_NE(first_sha_, second_sha_);
    ASSERT_TRUE(store_->models().register_version("credit", first_sha_, "").ok());
  }
  ServiceOptions fast_refresh() const {
    ServiceOptions options;
    options.registry_refresh = 20ms;
    return options;
  }
  HttpResponse infer(Service& service, const std::string& model = "credit") {
    return service.handle("POST", "/v2/models/" + model + "/infer", one_row_request());
  }

  testing::TempDir dir_;
  std::unique_ptr<registry::Registry> store_;
  std::string first_sha_;
  std::string second_sha_;
};

TEST(ServingConfig, ParsesValidatesAndRoundTrips) {
  auto config = apply_serving_config({}, {{"max_batch_size", "64"},
                                          {"max_queue_delay_us", "500"},
                                          {"preferred_batch_sizes", "16, 32"},
                                          {"cache", "true"},
                                          {"idle_unload_s", "30"}});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->batching.max_batch_size, 64u);
  EXPECT_EQ(config->batching.max_queue_delay, 500us);
  EXPECT_EQ(config->batching.preferred_batch_sizes, (std::vector<std::size_t>{16, 32}));
  EXPECT_TRUE(config->cache);
  EXPECT_EQ(config->idle_unload, 30s);
  auto again = apply_serving_config({}, serving_config_values(*config));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *config);

  auto unknown = apply_serving_config({}, {{"max_batch", "4"}});
  EXPECT_NE(unknown.status().message().find("unknown serving config key 'max_batch'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("did you mean 'max_batch_size'?"), std::string::npos)
      << unknown.status().message();
  auto negative = apply_serving_config({}, {{"max_queue_size", "-1"}});
  EXPECT_NE(negative.status().message().find("'max_queue_size' must be an integer from 0"), std::string::npos);
  auto preferred = apply_serving_config({}, {{"max_batch_size", "8"}, {"preferred_batch_sizes", "16"}});
  EXPECT_NE(preferred.status().message().find("larger than max_batch_size"), std::string::npos);
  auto flag = apply_serving_config({}, {{"cache", "maybe"}});
  EXPECT_NE(flag.status().message().find("true or false"), std::string::npos);
}

TEST(ServingConfig, ReadsTheConfigFile) {
  testing::TempDir dir;
  std::string path = dir.path() + "/serving.yaml";
  std::ofstream(path) << "defaults:\n  warmup_requests: 2\nmodels:\n  credit:\n    max_batch_size: 32\n"
                         "    preferred_batch_sizes: [8, 16]\n";
  auto file = read_serving_config_file(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->defaults.at("warmup_requests"), "2");
  EXPECT_EQ(file->models.at("credit").at("preferred_batch_sizes"), "8,16");
  std::ofstream(path) << "models:\n  credit:\n    max_batch_sise: 32\n";
  auto bad = read_serving_config_file(path);
  EXPECT_NE(bad.status().message().find("models.credit: unknown serving config key 'max_batch_sise'"),
            std::string::npos)
      << bad.status().message();
  EXPECT_EQ(read_serving_config_file(dir.path() + "/missing.yaml").status().code(), StatusCode::kNotFound);
}

TEST_F(LifecycleTest, RegistryServingConfigAppliesToARunningServer) {
  Service service(*store_, fast_refresh());
  ASSERT_EQ(infer(service).status, 200);
  EXPECT_NE(service.handle("GET", "/v2/models/credit/config", "").body.find("\"max_batch_size\":0"), std::string::npos);
  ASSERT_TRUE(
      store_->serving_configs().set("credit", {{"max_batch_size", "16"}, {"max_queue_delay_us", "300"}}, false).ok());
  // The new configuration loads beside the old one and takes over once ready.
  ASSERT_TRUE(eventually([&] {
    (void)infer(service);
    return service.handle("GET", "/v2/models/credit/config", "")
               .body.find("\"max_batch_size\":16,\"dynamic_batching\"") != std::string::npos;
  }));
  EXPECT_EQ(infer(service).status, 200);
  // The --config file's entry wins over the registry's.
  ServiceOptions options = fast_refresh();
  options.model_overrides["credit"]["max_batch_size"] = "4";
  Service overridden(*store_, options);
  ASSERT_EQ(infer(overridden).status, 200);
  EXPECT_NE(overridden.handle("GET", "/v2/models/credit/config", "").body.find("\"max_batch_size\":4"),
            std::string::npos);
}

TEST_F(LifecycleTest, HotSwapServesTheOldVersionUntilTheNewOneIsReady) {
  Service service(*store_, fast_refresh());
  ASSERT_EQ(version_of(infer(service)), "1");
  ASSERT_TRUE(store_->models().register_version("credit", second_sha_, "").ok());
  // Every request is answered while the swap happens; the new version takes over.
  ASSERT_TRUE(eventually([&] {
    auto response = infer(service);
    EXPECT_EQ(response.status, 200) << response.body;
    return version_of(response) == "2";
  }));
  std::string metrics = service.metrics_text();
  EXPECT_EQ(metric_value(metrics, "slipway_models_loaded"), 1);
  EXPECT_EQ(metric_value(metrics, "slipway_model_unloads_total", "reason=\"swap\""), 1);

  // Rollback by alias: production -> 1 routes back, with no failed request.
  ASSERT_TRUE(store_->models().set_alias("credit", "production", 1).ok());
  ASSERT_TRUE(eventually([&] { return version_of(infer(service)) == "1"; }));
}

TEST_F(LifecycleTest, AFailedLoadLeavesTheOldVersionServing) {
  Service service(*store_, fast_refresh());
  ASSERT_EQ(version_of(infer(service)), "1");
  // Version 2's bundle is damaged on disk after registration.
  std::string broken_sha = small_bundle(*store_, 2000, 500);
  ASSERT_TRUE(store_->models().register_version("credit", broken_sha, "").ok());
  std::ofstream(store_->artifacts().path_for(broken_sha), std::ios::binary | std::ios::trunc) << "not a bundle";
  for (int request = 0; request < 20; ++request) {
    auto response = infer(service);
    ASSERT_EQ(response.status, 200) << response.body;
    EXPECT_EQ(version_of(response), "1");
    std::this_thread::sleep_for(10ms);
  }
  std::string index = service.handle("POST", "/v2/repository/index", "").body;
  EXPECT_NE(index.find("{\"name\":\"credit\",\"version\":\"1\",\"state\":\"READY\""), std::string::npos) << index;
  EXPECT_GE(metric_value(service.metrics_text(), "slipway_model_loads_total", "result=\"failure\""), 1);
  // An explicit request for the damaged version gets the reason.
  auto pinned = service.handle("POST", "/v2/models/credit/versions/2/infer", one_row_request());
  EXPECT_EQ(pinned.status, 500) << pinned.body;
  EXPECT_NE(pinned.body.find("cannot load model 'credit' version 2"), std::string::npos) << pinned.body;
  // Error bodies and the index never show the server's file paths.
  EXPECT_EQ(pinned.body.find(dir_.path()), std::string::npos) << pinned.body;
  EXPECT_EQ(service.handle("POST", "/v2/repository/index", "").body.find(dir_.path()), std::string::npos);
  EXPECT_EQ(without_server_paths("cannot open '/srv/ws/artifacts/sha256/ab/cd': No such file"),
            "cannot open '<server path>': No such file");
  EXPECT_EQ(without_server_paths("load it with POST /v2/repository/models/x/load"),
            "load it with POST /v2/repository/models/x/load");
  EXPECT_EQ(without_server_paths("use GET for this route"), "use GET for this route");
  EXPECT_EQ(without_server_paths("no request log for 'm' in /srv/ws/request_log; log requests"),
            "no request log for 'm' in <server path>; log requests");
  EXPECT_EQ(without_server_paths("see /openapi.json or GET /api/runs?page_size=1"),
            "see /openapi.json or GET /api/runs?page_size=1");
  EXPECT_EQ(without_server_paths("served under /v1, not v2; /v1x/y is a file"),
            "served under /v1, not v2; <server path> is a file");
  EXPECT_EQ(without_server_paths("cannot load model 'm' version 2: /srv/ws/ab: not a Slipway bundle"),
            "cannot load model 'm' version 2: <server path>: not a Slipway bundle");
}

// Repeated swaps free what they replace: the loaded-model count and accounted memory return to
// one model's, and the process's resident memory stays within a bound.
TEST_F(LifecycleTest, MemoryReturnsToBaselineAfterRepeatedSwaps) {
  ASSERT_TRUE(store_->models().register_version("credit", second_sha_, "").ok());
  Service service(*store_, fast_refresh());
  ASSERT_EQ(infer(service).status, 200);
  double baseline_bytes = metric_value(service.metrics_text(), "slipway_models_memory_bytes");
  ASSERT_GT(baseline_bytes, 0);
  for (int swap = 0; swap < 5; ++swap) {  // warm the allocator's pools
    ASSERT_TRUE(store_->models().set_alias("credit", "production", swap % 2 + 1).ok());
    ASSERT_TRUE(service.handle("POST", "/v2/repository/models/credit/load", "").status == 200);
  }
  long resident_before = testing::resident_kib();
  for (int swap = 0; swap < 100; ++swap) {
    ASSERT_TRUE(store_->models().set_alias("credit", "production", swap % 2 + 1).ok());
    auto loaded = service.handle("POST", "/v2/repository/models/credit/load", "");
    ASSERT_EQ(loaded.status, 200) << loaded.body;
    ASSERT_EQ(infer(service).status, 200);
  }
  std::string metrics = service.metrics_text();
  EXPECT_EQ(metric_value(metrics, "slipway_models_loaded"), 1);
  EXPECT_NEAR(metric_value(metrics, "slipway_models_memory_bytes"), baseline_bytes, baseline_bytes * 0.01);
  EXPECT_GE(metric_value(metrics, "slipway_model_unloads_total", "reason=\"swap\""), 100);
  long growth_kib = testing::resident_kib() - resident_before;
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps freed memory in quarantine, so RSS says nothing there
  EXPECT_LT(growth_kib, 4 * 1024) << "resident memory grew by " << growth_kib << " KiB over 100 swaps";
#else
  (void)growth_kib;
#endif
}

TEST_F(LifecycleTest, IdleModelsUnloadAndComeBackOnTheNextRequest) {
  ASSERT_TRUE(store_->serving_configs().set("credit", {{"idle_unload_s", "1"}}, false).ok());
  Service service(*store_, fast_refresh());
  ASSERT_EQ(infer(service).status, 200);
  EXPECT_EQ(metric_value(service.metrics_text(), "slipway_models_loaded"), 1);
  ASSERT_TRUE(eventually([&] { return metric_value(service.metrics_text(), "slipway_models_loaded") == 0; }) || [&] {
    std::this_thread::sleep_for(1500ms);
    return metric_value(service.metrics_text(), "slipway_models_loaded") == 0;
  }());
  EXPECT_EQ(metric_value(service.metrics_text(), "slipway_model_unloads_total", "reason=\"idle\""), 1);
  std::string index = service.handle("POST", "/v2/repository/index", "").body;
  EXPECT_NE(index.find("\"state\":\"UNAVAILABLE\",\"reason\":\"not loaded; it loads on its first request\""),
            std::string::npos)
      << index;
  EXPECT_EQ(infer(service).status, 200);
  EXPECT_EQ(metric_value(service.metrics_text(), "slipway_models_loaded"), 1);
}

TEST_F(LifecycleTest, MemoryBudgetUnloadsTheLeastRecentlyUsed) {
  ASSERT_TRUE(store_->models().register_version("other", second_sha_, "").ok());
  ASSERT_TRUE(store_->models().register_version("third", first_sha_, "").ok());
  Service probe(*store_, fast_refresh());
  ASSERT_EQ(infer(probe).status, 200);
  auto one_model = static_cast<std::size_t>(metric_value(probe.metrics_text(), "slipway_models_memory_bytes"));
  ServiceOptions options = fast_refresh();
  options.memory_budget_bytes = one_model * 2 + one_model / 2;  // room for two models
  Service service(*store_, options);
  ASSERT_EQ(infer(service, "credit").status, 200);
  ASSERT_EQ(infer(service, "other").status, 200);
  ASSERT_EQ(infer(service, "credit").status, 200);  // "other" is now the least recently used
  ASSERT_EQ(infer(service, "third").status, 200);
  std::string metrics = service.metrics_text();
  EXPECT_EQ(metric_value(metrics, "slipway_models_loaded"), 2);
  EXPECT_LE(metric_value(metrics, "slipway_models_memory_bytes"), static_cast<double>(options.memory_budget_bytes));
  EXPECT_EQ(metric_value(metrics, "slipway_model_unloads_total", "model=\"other\",reason=\"memory_budget\""), 1);
  ServiceOptions tiny = fast_refresh();
  tiny.memory_budget_bytes = one_model / 2;
  Service starved(*store_, tiny);
  auto refused = infer(starved);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("more than the memory budget"), std::string::npos) << refused.body;
}

TEST_F(LifecycleTest, RepositoryApiLoadsAndUnloads) {
  Service service(*store_, fast_refresh());
  std::string index = service.handle("POST", "/v2/repository/index", "{}").body;
  EXPECT_EQ(index,
            "[{\"name\":\"credit\",\"state\":\"UNAVAILABLE\",\"reason\":\"not loaded; it loads on its first "
            "request\"}]");
  EXPECT_EQ(service.handle("POST", "/v2/repository/index", "{\"ready\":true}").body, "[]");
  EXPECT_EQ(service.handle("POST", "/v2/repository/models/credit/load", "").status, 200);
  EXPECT_EQ(service.handle("POST", "/v2/repository/index", "{\"ready\":true}").body,
            "[{\"name\":\"credit\",\"version\":\"1\",\"state\":\"READY\",\"reason\":\"\"}]");
  EXPECT_EQ(service.handle("POST", "/v2/repository/models/credit/unload", "").status, 200);
  auto refused = infer(service);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("is unloaded; load it with POST /v2/repository/models/credit/load"), std::string::npos);
  EXPECT_NE(service.handle("POST", "/v2/repository/index", "").body.find("\"reason\":\"unloaded\""), std::string::npos);
  EXPECT_EQ(service.handle("POST", "/v2/repository/models/credit/load", "").status, 200);
  EXPECT_EQ(infer(service).status, 200);
  EXPECT_EQ(service.handle("POST", "/v2/repository/models/ghost/load", "").status, 404);
  EXPECT_EQ(service.handle("GET", "/v2/repository/index", "").status, 405);
  auto with_config = service.handle("POST", "/v2/repository/models/credit/load", R"({"parameters":{"config":"{}"}})");
  EXPECT_EQ(with_config.status, 400);
  EXPECT_NE(with_config.body.find("slipway serving-config"), std::string::npos);
}

TEST_F(LifecycleTest, BearerTokensWithRoles) {
  auto predict = store_->tokens().create("app", "predict");
  auto deploy = store_->tokens().create("ci", "deploy");
  auto admin = store_->tokens().create("ops", "admin");
  ASSERT_TRUE(predict.ok() && deploy.ok() && admin.ok());
  EXPECT_EQ(store_->tokens().create("x", "root").status().code(), StatusCode::kInvalidArgument);
  ServiceOptions options = fast_refresh();
  options.require_auth = true;
  Service service(*store_, options);
  auto call = [&](std::string_view method, const std::string& target, const std::string& token,
                  const std::string& body = "") {
    std::string header = token.empty() ? "" : "Bearer " + token;
    return service.handle(method, target, body, RequestHeaders{.authorization = header, .inference_header_length = {}});
  };
  EXPECT_EQ(call("GET", "/v2/health/ready", "").status, 200);  // probes need no token
  auto anonymous = call("POST", "/v2/models/credit/infer", "", one_row_request());
  EXPECT_EQ(anonymous.status, 401);
  ASSERT_EQ(anonymous.headers.size(), 1u);
  EXPECT_EQ(anonymous.headers[0].first, "WWW-Authenticate");
  EXPECT_EQ(call("POST", "/v2/models/credit/infer", predict->secret + "x", one_row_request()).status, 401);
  EXPECT_EQ(call("POST", "/v2/models/credit/infer", predict->secret, one_row_request()).status, 200);
  auto forbidden = call("POST", "/v2/repository/models/credit/load", predict->secret);
  EXPECT_EQ(forbidden.status, 403);
  EXPECT_NE(forbidden.body.find("needs the role 'deploy'"), std::string::npos) << forbidden.body;
  EXPECT_EQ(call("POST", "/v2/repository/models/credit/load", deploy->secret).status, 200);
  EXPECT_EQ(call("GET", "/metrics", deploy->secret).status, 403);
  EXPECT_EQ(call("GET", "/metrics", admin->secret).status, 200);
  EXPECT_EQ(call("POST", "/v2/models/credit/infer", admin->secret, one_row_request()).status, 200);
  // Revocation reaches the running server within the refresh period.
  ASSERT_TRUE(store_->tokens().revoke(predict->id).ok());
  EXPECT_TRUE(eventually(
      [&] { return call("POST", "/v2/models/credit/infer", predict->secret, one_row_request()).status == 401; }));
  EXPECT_EQ(store_->tokens().revoke(predict->id).code(), StatusCode::kNotFound);
  auto tokens = *store_->tokens().list();
  ASSERT_EQ(tokens.size(), 3u);
  for (const auto& token : tokens) {
    EXPECT_EQ(token.token_sha256.size(), 64u);
    EXPECT_NE(token.token_sha256, predict->secret);  // only the hash is stored
  }
}

TEST(ServingConfig, DeclarationsMatchTheStructDefaults) {
  // The declared defaults are the struct's, so the docs table tells what an empty config does.
  std::map<std::string, std::string> defaults;
  for (const auto& key : serving_config_declarations()) defaults[key.name] = key.default_value;
  EXPECT_EQ(defaults, serving_config_values(ModelServingConfig{}));
  EXPECT_EQ(serving_config_keys().size(), serving_config_declarations().size());
  EXPECT_NE(serving_config_markdown().find("| `max_batch_size` | integer | `0` | 0 to 1048576 |"), std::string::npos);
  auto applied = apply_serving_config({}, defaults);
  ASSERT_TRUE(applied.ok()) << applied.status().message();
  EXPECT_EQ(*applied, ModelServingConfig{});
}

}  // namespace
}  // namespace slipway::serve
