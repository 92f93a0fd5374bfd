// The HTTP API as its clients meet it, against the real binary: the OpenAPI document is valid
// (a real validator from npm) and says the truth (each documented route answers, with the role it
// documents, for every role); training code elsewhere records a run that `slipway runs` and
// `slipway show` print; and hostile calls get a clear 4xx with nothing half-written.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <thread>

#include "slipway/data.h"
#include "slipway/serve.h"
#include "support/test_support.h"

namespace {

using slipway::testing::ChildProcess;
using slipway::testing::data_path;
using slipway::testing::http_request;
using slipway::testing::HttpResult;
using slipway::testing::read_started_server;
using slipway::testing::run_command;
using slipway::testing::slipway_binary;
using slipway::testing::StartedServer;
using slipway::testing::TempDir;

using Headers = std::vector<std::pair<std::string, std::string>>;

// node_modules holding @apidevtools/swagger-parser, installed on first use into ~/.cache; empty
// when Node.js, npm or the registry is missing (scripts/install-deps.sh installs Node.js and npm).
std::string validator_modules() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || run_command({"/usr/bin/env", "node", "--version"}).exit_code != 0) return "";
  std::string prefix = std::string(home) + "/.cache/slipway-test-node/openapi";
  std::string modules = prefix + "/node_modules";
  if (run_command({"test", "-d", modules + "/@apidevtools/swagger-parser"}).exit_code == 0) return modules;
  auto installed = run_command({"/usr/bin/env", "timeout", "120", "npm", "install", "--prefix", prefix, "-E",
                                "--no-audit", "--no-fund", "@apidevtools/swagger-parser@12.1.0"});
  return installed.exit_code == 0 ? modules : "";
}

class Api : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--register", "lending"})
                  .exit_code,
              0);
    ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--ignore", "annual_inc",
                       "--register", "lending"})
                  .exit_code,
              0);
    ASSERT_EQ(slipway({"deploy", "web", "lending@1"}).exit_code, 0);
  }
  slipway::testing::CommandResult slipway(std::vector<std::string> arguments) {
    arguments.insert(arguments.begin(), {slipway_binary(), "--home", home_.path()});
    return run_command(arguments);
  }
  Headers token(const std::string& name, const std::string& role) {
    auto created = slipway({"--json", "token", "create", name, "--role", role});
    EXPECT_EQ(created.exit_code, 0) << created.err;
    auto at = created.out.find("\"token\":\"") + 9;
    return {{"Authorization", "Bearer " + created.out.substr(at, created.out.find('"', at) - at)}};
  }
  int start_server(std::vector<std::string> extra) {
    std::vector<std::string> argv = {slipway_binary(), "--home", home_.path(), "--json", "serve", "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ChildProcess>(argv);
    const StartedServer started = read_started_server(*server_);
    EXPECT_GT(started.port, 0) << started.first_line;
    return started.port;
  }
  void TearDown() override {
    if (!server_) return;
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait(), 0);
  }
  static std::string field(const std::string& json, const std::string& key) {
    auto at = json.find("\"" + key + "\":\"");
    if (at == std::string::npos) return "";
    at += key.size() + 4;
    return json.substr(at, json.find('"', at) - at);
  }

  TempDir home_;
  std::unique_ptr<ChildProcess> server_;
};

int rank(const std::string& role) {
  static const std::map<std::string, int> kRanks = {
      {"open", 0}, {"predict", 1}, {"read", 2}, {"deploy", 3}, {"admin", 4}};
  return kRanks.at(role);
}

// Every operation of the document, called by every role (and by no token at all): a role below
// the documented one is refused (401 without a token, 403 with one) and never changes anything;
// a role at or above it reaches the route (never 401, 403, 405, or a 404 that says the route does
// not exist).
TEST_F(Api, TheOpenApiDocumentIsValidAndEveryRouteAnswersEveryRoleAsItSays) {
  std::map<std::string, Headers> roles = {{"predict", token("p", "predict")},
                                          {"read", token("r", "read")},
                                          {"deploy", token("d", "deploy")},
                                          {"admin", token("a", "admin")}};
  int port = start_server({"--auth"});
  ASSERT_GT(port, 0);
  auto document = http_request(port, "GET", "/openapi.json");  // open: the document is no secret
  ASSERT_EQ(document.status, 200) << document.body;

  std::string modules = validator_modules();
  if (modules.empty()) {
    ADD_FAILURE() << "Node.js with npm is needed to validate the document (scripts/install-deps.sh installs it)";
  } else {
    TempDir scratch;
    std::string path = scratch.file("openapi.json");
    slipway::testing::write_text(path, document.body);
    auto validated =
        run_command({"/usr/bin/env", "node", slipway::testing::source_dir() + "/tests/integration/validate_openapi.mjs",
                     modules, path});
    EXPECT_EQ(validated.exit_code, 0) << validated.err;
    EXPECT_NE(validated.out.find("\"openapi\":\"3.1.0\""), std::string::npos) << validated.out;
  }

  auto started = http_request(port, "POST", "/api/runs", R"({"experiment":"matrix"})", roles["read"]);
  ASSERT_EQ(started.status, 201) << started.body;
  std::string run_id = field(started.body, "run_id");
  std::map<std::string, std::string> values = {
      {"endpoint", "web"}, {"model", "lending"}, {"version", "2"}, {"alias", "staging"}, {"run_id", run_id}};

  simdjson::dom::parser parser;
  simdjson::padded_string padded(document.body);
  simdjson::dom::object paths;
  ASSERT_EQ(parser.parse(padded)["paths"].get(paths), simdjson::SUCCESS);
  std::size_t operations = 0;
  for (auto [path_view, methods] : paths) {
    std::string path(path_view);
    std::string target;
    for (std::size_t at = 0; at < path.size();) {
      if (path[at] != '{') {
        target += path[at++];
        continue;
      }
      auto close = path.find('}', at);
      std::string name = path.substr(at + 1, close - at - 1);
      target += values.count(name) ? values[name] : "x";
      at = close + 1;
    }
    for (auto [method_view, operation] : simdjson::dom::object(methods)) {
      std::string method(method_view);
      for (char& c : method) c = static_cast<char>(c - 'a' + 'A');
      std::string_view documented;
      ASSERT_EQ(operation["x-slipway-role"].get(documented), simdjson::SUCCESS) << method << " " << path;
      int needed = rank(std::string(documented));
      ++operations;
      std::string body = method == "GET" || method == "DELETE" ? "" : "{}";
      SCOPED_TRACE(method + " " + target);
      auto anonymous = http_request(port, method, target, body);
      if (needed == 0) {
        EXPECT_NE(anonymous.status, 401);
      } else {
        EXPECT_EQ(anonymous.status, 401) << anonymous.body;
      }
      for (const auto& [role, headers] : roles) {
        auto answer = http_request(port, method, target, body, headers);
        SCOPED_TRACE(role + " -> " + std::to_string(answer.status) + " " + answer.body.substr(0, 200));
        if (rank(role) < needed) {
          EXPECT_EQ(answer.status, 403);
          continue;
        }
        EXPECT_NE(answer.status, 401);
        EXPECT_NE(answer.status, 403);
        EXPECT_NE(answer.status, 405);
        EXPECT_EQ(answer.body.find("no such management route"), std::string::npos);
        EXPECT_EQ(answer.body.find("no route for"), std::string::npos);
        EXPECT_LT(answer.status, 500);
      }
    }
  }
  EXPECT_GE(operations, 40u);
  // What is not documented is not there.
  for (const char* missing : {"/api/nothing", "/api/endpoints/web/explode", "/api"}) {
    EXPECT_EQ(http_request(port, "GET", missing, "", roles["admin"]).status, 404) << missing;
  }
  // A deploy token cannot widen its own rights: approvals and lifting an approval requirement are
  // admin acts, whatever the route.
  ASSERT_EQ(
      http_request(port, "POST", "/api/endpoints/web/settings", R"({"require_approval":true})", roles["admin"]).status,
      200);
  EXPECT_EQ(http_request(port, "POST", "/api/endpoints/web/settings", R"({"require_approval":false})", roles["deploy"])
                .status,
            403);
  EXPECT_EQ(http_request(port, "POST", "/api/models/lending/versions/2/approval", R"({"note":"mine"})", roles["deploy"])
                .status,
            403);
  EXPECT_EQ(http_request(port, "POST", "/api/endpoints/web/deploy", R"({"model":"lending@2"})", roles["deploy"]).status,
            409);
  // Only an admin makes tokens; a token made through the API works at once, and a name with
  // control characters is refused.
  EXPECT_EQ(http_request(port, "POST", "/api/tokens", R"({"name":"ci","role":"admin"})", roles["deploy"]).status, 403);
  EXPECT_EQ(
      http_request(port, "POST", "/api/tokens", R"({"name":"esc\u001b[2J","role":"read"})", roles["admin"]).status,
      400);
  auto made = http_request(port, "POST", "/api/tokens", R"({"name":"ci","role":"read"})", roles["admin"]);
  ASSERT_EQ(made.status, 201) << made.body;
  Headers ci = {{"Authorization", "Bearer " + field(made.body, "token")}};
  EXPECT_EQ(http_request(port, "GET", "/api/runs?page_size=1", "", ci).status, 200);
  EXPECT_EQ(http_request(port, "POST", "/api/endpoints/web/rollback", "", ci).status, 403);
  auto listed = http_request(port, "GET", "/api/tokens", "", roles["admin"]);
  EXPECT_EQ(listed.body.find("slw_"), std::string::npos) << "secrets are never listed";
  EXPECT_EQ(http_request(port, "DELETE", "/api/tokens/" + field(made.body, "id"), "", roles["admin"]).status, 200);
}

// Training code elsewhere (examples/track_run.py: Python's standard library alone) records a run
// with 100 metric steps and a file; the CLI prints it beside the runs Slipway trained.
TEST_F(Api, AnExternalTrainingScriptRecordsARunTheCliPrints) {
  Headers reader = token("trainer", "read");
  int port = start_server({"--auth"});
  ASSERT_GT(port, 0);
  auto script = run_command({"/usr/bin/python3", slipway::testing::source_dir() + "/examples/track_run.py", "--url",
                             "http://127.0.0.1:" + std::to_string(port), "--token", reader.front().second.substr(7),
                             "--experiment", "resnet"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  std::string run_id = script.out.substr(0, 32);

  auto runs = slipway({"runs"});
  auto line_at = runs.out.find(run_id);
  ASSERT_NE(line_at, std::string::npos) << runs.out;
  std::string line = runs.out.substr(line_at, runs.out.find('\n', line_at) - line_at);
  EXPECT_NE(line.find("resnet"), std::string::npos) << line;
  EXPECT_NE(line.find("FINISHED"), std::string::npos) << line;
  EXPECT_NE(line.find("loss="), std::string::npos) << line;
  auto shown = slipway({"show", run_id});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  for (const char* expected :
       {"learning_rate = 0.05", "framework = stdlib", "model.json  ", "per step (100 steps)", "loss = "}) {
    EXPECT_NE(shown.out.find(expected), std::string::npos) << expected << "\n" << shown.out;
  }
  auto history = http_request(port, "GET", "/api/runs/" + run_id + "/metrics?key=loss", "", reader);
  ASSERT_EQ(history.status, 200) << history.body;
  std::size_t steps = 0;
  for (auto at = history.body.find("\"step\":"); at != std::string::npos; at = history.body.find("\"step\":", at + 1))
    ++steps;
  EXPECT_EQ(steps, 100u);
  // The file is stored and checked by `verify` like every artifact.
  auto verified = slipway({"verify"});
  EXPECT_EQ(verified.exit_code, 0) << verified.out << verified.err;
  // A retried start with the same id is the same run, not a second one.
  auto again = http_request(port, "POST", "/api/runs", R"({"experiment":"resnet","run_id":")" + run_id + "\"}", reader);
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_NE(again.body.find("\"created\":false"), std::string::npos) << again.body;
  auto compared = http_request(port, "GET", "/api/runs/compare?a=" + run_id + "&b=" + run_id, "", reader);
  EXPECT_EQ(compared.status, 200) << compared.body;
  // A run Slipway trained itself takes nothing from a client: no logs, files or end.
  auto trained = http_request(port, "GET", "/api/runs?experiment=default", "", reader);
  std::string own = field(trained.body, "run_id");
  ASSERT_EQ(own.size(), 32u) << trained.body;
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/log", R"({"metrics":[{"key":"test_auc","value":0.99}]})"}, {"/end", R"({"status":"FAILED"})"}}) {
    auto refused = http_request(port, "POST", "/api/runs/" + own + path, body, reader);
    EXPECT_EQ(refused.status, 409) << path << " " << refused.body;
  }
  EXPECT_EQ(slipway({"show", own}).out.find("test_auc = 0.99"), std::string::npos);
}

// What the CLI does with batch jobs, monitoring, alerts, serving configs, gates and optimize's
// records, the API does through the same operations: the same answers, and the same refusals.
TEST_F(Api, BatchMonitoringGatesAndServingConfigsAnswerAsTheCliDoes) {
  std::filesystem::create_directories(home_.path() + "/data");
  std::filesystem::copy_file(data_path("lending_club.csv"), home_.path() + "/data/loans.csv");
  ASSERT_EQ(slipway({"serving-config", "lending", "--request-log-rate", "1"}).exit_code, 0);
  int port = start_server({});
  ASSERT_GT(port, 0);

  // A batch job: started, polled to its end, the same rows as the CLI's job of the same file.
  auto started = http_request(port, "POST", "/api/batch-jobs",
                              R"({"name":"day1","model":"lending@1","data":"loans.csv","shards":4})");
  ASSERT_EQ(started.status, 202) << started.body;
  std::string job;
  for (int poll = 0; poll < 600; ++poll) {
    job = http_request(port, "GET", "/api/batch-jobs/day1").body;
    if (job.find("\"running\":false") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(job.find("\"state\":\"finished\""), std::string::npos) << job;
  EXPECT_NE(job.find("\"scored\":9857"), std::string::npos) << job;
  auto cli_job = slipway({"--json", "batch", "lending@1", "--data", home_.path() + "/data/loans.csv", "--out",
                          home_.path() + "/cli-job", "--shards", "4"});
  ASSERT_EQ(cli_job.exit_code, 0) << cli_job.err;
  EXPECT_EQ(field(cli_job.out, "key"), field(job, "key"));  // the same job: same model, input and spec
  // Another job (JSON Lines out: another key), then the list a page at a time, oldest first.
  ASSERT_EQ(http_request(port, "POST", "/api/batch-jobs",
                         R"({"name":"day1-jsonl","model":"lending@1","data":"loans.csv","format":"jsonl"})")
                .status,
            202);
  for (int poll = 0; poll < 600; ++poll) {
    if (http_request(port, "GET", "/api/batch-jobs/day1-jsonl").body.find("\"running\":false") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto first_page = http_request(port, "GET", "/api/batch-jobs?limit=1");
  ASSERT_EQ(first_page.status, 200) << first_page.body;
  EXPECT_NE(first_page.body.find(field(job, "key")), std::string::npos) << first_page.body;
  EXPECT_NE(first_page.body.find("\"next_page_token\":\"b1\""), std::string::npos) << first_page.body;
  auto second_page = http_request(port, "GET", "/api/batch-jobs?limit=1&page_token=b1");
  EXPECT_EQ(second_page.body.find(field(job, "key")), std::string::npos) << second_page.body;
  EXPECT_EQ(second_page.body.find("next_page_token"), std::string::npos) << second_page.body;
  for (const char* token : {"1", "b-1", "bx", "%ZZ"}) {
    EXPECT_EQ(http_request(port, "GET", std::string("/api/batch-jobs?page_token=") + token).status, 400) << token;
  }
  EXPECT_EQ(http_request(port, "POST", "/api/batch-jobs/day1/cancel").status, 409);  // not running
  for (const char* body : {R"({"name":"../up","model":"lending@1","data":"loans.csv"})",
                           R"({"name":"x","model":"lending@1","data":"../../etc/passwd"})",
                           R"({"name":"x","model":"lending@1","data":"/etc/passwd"})",
                           R"({"name":"x","model":"bad name!","data":"loans.csv"})",
                           R"({"name":"x","model":"lending@1","data":"loans.csv","max_error_rate":2})",
                           R"({"name":"x","model":"lending@1","data":"loans.csv","format":"xml"})",
                           R"({"name":"x","model":"lending@1","data":"loans.csv","out":"/tmp"})"}) {
    EXPECT_EQ(http_request(port, "POST", "/api/batch-jobs", body).status, 400) << body;
  }
  EXPECT_EQ(
      http_request(port, "POST", "/api/batch-jobs", R"({"name":"x","model":"lending@1","data":"none.csv"})").status,
      404);
  EXPECT_EQ(
      http_request(port, "POST", "/api/batch-jobs", R"({"name":"x","model":"lending@9","data":"loans.csv"})").status,
      404);
  EXPECT_EQ(http_request(port, "GET", "/api/batch-jobs/never").status, 404);

  // Monitoring: the endpoint's traffic, read from the request log as `slipway monitor` reads it.
  auto table = slipway::data::read_csv(data_path("lending_club.csv"));
  ASSERT_TRUE(table.ok());
  std::vector<std::uint32_t> rows;
  for (std::uint32_t row = 0; row < 400; ++row) rows.push_back(row * 20);
  for (const auto& body : slipway::serve::v2_requests_from_table(table->take_rows(rows), 20, {"Class"})) {
    ASSERT_EQ(http_request(port, "POST", "/v2/models/web/infer", body).status, 200);
  }
  std::string report;
  for (int poll = 0; poll < 100; ++poll) {
    report = http_request(port, "GET", "/api/monitoring/web?window=10m&p_value=0.001").body;
    if (report.find("\"current_rows\":400") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(report.find("\"model\":\"lending@1 (main version of endpoint web)\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"current_rows\":400"), std::string::npos) << report;
  auto cli_report = slipway({"--json", "monitor", "web", "--window", "10m", "--p-value", "0.001"});
  ASSERT_EQ(cli_report.exit_code, 0) << cli_report.err;
  std::string drifted = "\"drifted_inputs\":";
  auto count_of = [&](const std::string& json) { return json.substr(json.find(drifted), drifted.size() + 3); };
  EXPECT_EQ(count_of(report), count_of(cli_report.out));
  for (const char* query : {"window=0s", "window=400d", "distance=nan", "p_value=-1", "baseline=/etc/passwd",
                            "colour=blue", "slice=term"}) {
    EXPECT_EQ(http_request(port, "GET", std::string("/api/monitoring/web?") + query).status, 400) << query;
  }
  // An encoded '/' would make a name a path: no route takes it.
  EXPECT_EQ(http_request(port, "GET", "/api/monitoring/..%2Fmodel.slip").status, 404);
  EXPECT_EQ(http_request(port, "GET", "/api/models/%2Ftmp%2Fx/versions/1.slip/profile").status, 404);
  EXPECT_EQ(http_request(port, "GET", "/api/monitoring/nothing").status, 404);
  auto alerted = http_request(port, "POST", "/api/monitoring/web/alerts?window=10m", "");
  ASSERT_EQ(alerted.status, 200) << alerted.body;
  auto alerts = http_request(port, "GET", "/api/alerts?model=lending");
  ASSERT_EQ(alerts.status, 200);
  EXPECT_NE(alerts.body.find("\"subject\":\"prediction\""), std::string::npos) << alerts.body;
  EXPECT_EQ(http_request(port, "POST", "/api/monitoring/web/alerts", R"({"min_metrics":{"auc":0.7}})").status, 400)
      << "a metric limit needs labels";

  // Serving configs: set through the API, read by the CLI, checked whole by the same rules.
  auto set = http_request(port, "PATCH", "/api/models/lending/serving-config", R"({"values":{"max_batch_size":"16"}})");
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_NE(slipway({"serving-config", "lending"}).out.find("16"), std::string::npos);
  for (const char* body : {R"({"values":{"max_batch_size":"-1"}})", R"({"values":{"max_batch":"8"}})", "{}",
                           R"({"values":{"max_batch_size":16}})"}) {
    EXPECT_EQ(http_request(port, "PATCH", "/api/models/lending/serving-config", body).status, 400) << body;
  }
  EXPECT_EQ(http_request(port, "GET", "/api/models/nothing/serving-config").status, 404);
  auto optimizations = http_request(port, "GET", "/api/models/lending/optimizations");
  EXPECT_EQ(optimizations.status, 200);
  EXPECT_NE(optimizations.body.find("\"optimizations\":[]"), std::string::npos) << optimizations.body;

  // A gate: the same report as the CLI's, recorded with the candidate.
  auto gated =
      http_request(port, "POST", "/api/models/lending/versions/2/gate",
                   R"({"baseline":"lending@1","data":"loans.csv","metric":"auc","thresholds":"max_drop=0.5"})");
  ASSERT_EQ(gated.status, 200) << gated.body;
  EXPECT_NE(gated.body.find("\"data\":\"loans.csv\""), std::string::npos) << "no server path in the answer";
  auto cli_gate = slipway({"--json", "gate", "lending@2", "--baseline", "lending@1", "--data",
                           home_.path() + "/data/loans.csv", "--metric", "auc", "--max-drop", "0.5"});
  EXPECT_EQ(field(cli_gate.out, "candidate"), field(gated.body, "candidate"));
  EXPECT_EQ(cli_gate.out.find("\"passed\":true") != std::string::npos,
            gated.body.find("\"passed\":true") != std::string::npos);
  EXPECT_EQ(http_request(port, "POST", "/api/models/lending/versions/2/gate",
                         R"({"baseline":"lending@1","data":"../loans.csv","metric":"auc","thresholds":"max_drop=0.5"})")
                .status,
            400);

  // Evaluations and comparisons: the CLI's JSON, the file named as the client named it.
  auto evaluated = http_request(port, "GET", "/api/models/lending/versions/2/evaluation?data=loans.csv&slice=term");
  ASSERT_EQ(evaluated.status, 200) << evaluated.body;
  auto cli_eval = slipway(
      {"--json", "eval", "lending@2", "--data", home_.path() + "/data/loans.csv", "--slice", "term", "--no-cache"});
  ASSERT_EQ(cli_eval.exit_code, 0) << cli_eval.err;
  EXPECT_EQ(evaluated.body + "\n", cli_eval.out);
  auto compared = http_request(port, "GET", "/api/comparisons?a=lending@1&b=lending@2&data=loans.csv&worst_rows=3");
  ASSERT_EQ(compared.status, 200) << compared.body;
  auto cli_compare = slipway(
      {"--json", "compare", "lending@1", "lending@2", "--data", home_.path() + "/data/loans.csv", "--worst", "3"});
  std::string cli_json = cli_compare.out;
  auto data_at = cli_json.find(home_.path() + "/data/");
  ASSERT_NE(data_at, std::string::npos) << cli_json;
  cli_json.replace(data_at, home_.path().size() + 6, "");
  EXPECT_EQ(compared.body + "\n", cli_json);
  for (const char* query :
       {"a=lending@1&b=lending@2", "a=lending@1&b=/tmp/x.slip&data=loans.csv",
        "a=lending@1&b=lending@2&data=loans.csv&tolerance=nan", "a=lending@1&b=lending@2&data=../x.csv"}) {
    EXPECT_EQ(http_request(port, "GET", std::string("/api/comparisons?") + query).status, 400) << query;
  }
  EXPECT_EQ(http_request(port, "GET", "/api/models/lending/versions/9/evaluation?data=loans.csv").status, 404);
}

// A model file of another format uploaded as `slipway import` takes it: checked against its hash,
// converted or checked, and registered; a lie about the bytes or the format stores nothing.
TEST_F(Api, AnUploadedGgufImportsAsTheCliImportsIt) {
  std::string model = home_.path() + "/tiny.gguf";
  ASSERT_EQ(slipway({"llm", "make-test-model", model, "--type", "q8_0", "--dim", "64", "--ff", "128", "--layers", "1",
                     "--context", "128"})
                .exit_code,
            0);
  std::string bytes = slipway::read_file(model).value();
  std::string sha = slipway::sha256_hex(bytes);
  int port = start_server({});
  ASSERT_GT(port, 0);
  EXPECT_EQ(
      http_request(port, "POST", "/api/models/chat/imports?format=gguf&sha256=" + std::string(64, '0'), bytes).status,
      400);
  EXPECT_EQ(http_request(port, "POST", "/api/models/chat/imports?format=pickle&sha256=" + sha, bytes).status, 400);
  EXPECT_EQ(http_request(port, "POST", "/api/models/chat/imports?format=gguf&sha256=" + sha, "GGUF junk").status, 400);
  EXPECT_EQ(
      http_request(port, "POST", "/api/models/chat/imports?format=xgboost&sha256=" + slipway::sha256_hex("{}"), "{}")
          .status,
      400);
  EXPECT_NE(slipway({"versions", "chat"}).exit_code, 0) << "nothing was registered";
  auto imported = http_request(port, "POST", "/api/models/chat/imports?format=gguf&sha256=" + sha, bytes);
  ASSERT_EQ(imported.status, 201) << imported.body;
  EXPECT_NE(imported.body.find("\"version\":1"), std::string::npos) << imported.body;
  auto versions = slipway({"versions", "chat"});
  EXPECT_EQ(versions.exit_code, 0) << versions.err;
  EXPECT_NE(versions.out.find(sha.substr(0, 12)), std::string::npos) << versions.out;
  EXPECT_TRUE(std::filesystem::is_empty(home_.path() + "/tmp")) << "the uploads' scratch files are removed";
}

// A training through the server: the spec as JSON, its data in the workspace's data/ folder; the
// run's id comes back at once, and the run is the CLI's (`slipway show` prints it, its version is
// registered). A long one is cancelled (INTERRUPTED, resumed from its checkpoint to the end), and
// writes sent again with the same Idempotency-Key answer once.
TEST_F(Api, TrainingJobsRunOnTheServerAndRetriedWritesAnswerOnce) {
  std::filesystem::create_directories(home_.path() + "/data");
  std::filesystem::copy_file(data_path("lending_club.csv"), home_.path() + "/data/loans.csv");
  int port = start_server({});
  ASSERT_GT(port, 0);
  auto poll_to_end = [&](const std::string& run_id) {
    std::string job;
    for (int poll = 0; poll < 1200; ++poll) {
      job = http_request(port, "GET", "/api/training-jobs/" + run_id).body;
      if (job.find("\"running\":false") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return job;
  };

  // Refused before anything starts: a spec that escapes data/, a missing file, a wrong key.
  for (const char* body :
       {R"({"spec":{"data":"../slipway.db","target":"Class"}})", R"({"spec":{"data":"/etc/passwd","target":"x"}})",
        R"({"spec":{"data":"loans.csv","target":"Class","colour":"blue"}})",
        R"({"spec":{"data":"loans.csv","target":"Class","init_model":"/tmp/x.slip","model":"gbdt"}})",
        R"({"spec":{"data":"loans.csv","target":"Class","params":{"rounds":"-3"},"model":"gbdt"}})",
        R"({"spec":{"data":"loans.csv"},"resume":"0123456789abcdef0123456789abcdef"})", R"({"run_id":"x"})", "{}",
        R"({"spec":{"data":"loans.csv","target":"Class","experiment":"\u001b[2J"}})"}) {
    EXPECT_EQ(http_request(port, "POST", "/api/training-jobs", body).status, 400) << body;
  }
  auto bad_seed = http_request(port, "POST", "/api/training-jobs", R"({"spec":{"data":"loans.csv","seed":-1}})");
  EXPECT_EQ(bad_seed.status, 400);
  EXPECT_NE(bad_seed.body.find("'seed' must be a whole number"), std::string::npos) << bad_seed.body;
  EXPECT_EQ(http_request(port, "POST", "/api/training-jobs", R"({"spec":{"data":"none.csv","target":"Class"}})").status,
            404);

  const std::string run_id = "00000000000000000000000000000abc";
  const std::string start = R"({"run_id":")" + run_id +
                            R"(","spec":{"data":"loans.csv","target":"Class","register":"served","model":"gbdt",)"
                            R"("params":{"rounds":"20"}}})";
  auto started = http_request(port, "POST", "/api/training-jobs", start);
  ASSERT_EQ(started.status, 202) << started.body;
  EXPECT_EQ(field(started.body, "run_id"), run_id);
  auto again = http_request(port, "POST", "/api/training-jobs", start);  // a retry: the same run, not another
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_NE(again.body.find("\"created\":false"), std::string::npos) << again.body;
  std::string job = poll_to_end(run_id);
  EXPECT_NE(job.find("\"state\":\"finished\""), std::string::npos) << job;
  EXPECT_NE(job.find("\"iterations\":20"), std::string::npos) << job;
  auto shown = slipway({"show", run_id});
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("FINISHED"), std::string::npos) << shown.out;
  auto versions = slipway({"--json", "versions", "served"});
  EXPECT_NE(versions.out.find(run_id), std::string::npos) << versions.out;

  // A long training cancelled: INTERRUPTED with its checkpoint, then resumed to the end.
  auto slow = http_request(port, "POST", "/api/training-jobs",
                           R"({"spec":{"data":"loans.csv","target":"Class","model":"gbdt","checkpoint_every":5,)"
                           R"("params":{"rounds":"100000"}}})");
  ASSERT_EQ(slow.status, 202) << slow.body;
  std::string slow_id = field(slow.body, "run_id");
  for (int poll = 0; poll < 600; ++poll) {
    job = http_request(port, "GET", "/api/training-jobs/" + slow_id).body;
    auto at = job.find("\"rounds_done\":");
    if (at != std::string::npos && std::stoi(job.substr(at + 14)) >= 10) break;  // a checkpoint is stored
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(http_request(port, "POST", "/api/training-jobs", R"({"resume":")" + slow_id + R"("})").status, 409)
      << "a run still training does not resume twice";
  auto cancelled = http_request(port, "POST", "/api/training-jobs/" + slow_id + "/cancel");
  EXPECT_EQ(cancelled.status, 200) << cancelled.body;
  job = poll_to_end(slow_id);
  EXPECT_NE(job.find("\"state\":\"cancelled\""), std::string::npos) << job;
  EXPECT_NE(job.find("\"status\":\"INTERRUPTED\""), std::string::npos) << job;
  EXPECT_EQ(http_request(port, "POST", "/api/training-jobs/" + slow_id + "/cancel").status, 409);

  // Idempotency-Key: the same write twice answers once (the second a replay); the same key on
  // another request is 422; a key per caller, so another request elsewhere is unaffected.
  Headers key = {{"Idempotency-Key", "7c1e9a52-alias"}};
  auto first = http_request(port, "PUT", "/api/models/served/aliases/prod", R"({"version":1})", key);
  ASSERT_EQ(first.status, 200) << first.body;
  auto replay = http_request(port, "PUT", "/api/models/served/aliases/prod", R"({"version":1})", key);
  EXPECT_EQ(replay.status, 200);
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(http_request(port, "PUT", "/api/models/served/aliases/prod", R"({"version":2})", key).status, 422);
  auto token_key = Headers{{"Idempotency-Key", "make-ci-token"}};
  auto token = http_request(port, "POST", "/api/tokens", R"({"name":"ci","role":"read"})", token_key);
  ASSERT_EQ(token.status, 201) << token.body;
  EXPECT_EQ(http_request(port, "POST", "/api/tokens", R"({"name":"ci","role":"read"})", token_key).body, token.body)
      << "a retried create answers the token it made, not a second one";
  auto listed = slipway({"--json", "token", "list"});
  std::size_t named_ci = 0;
  for (auto at = listed.out.find("\"name\":\"ci\""); at != std::string::npos;
       at = listed.out.find("\"name\":\"ci\"", at + 1)) {
    ++named_ci;
  }
  EXPECT_EQ(named_ci, 1u) << listed.out;
  for (const char* bad : {"with space", "tab\there", "caf\xc3\xa9"}) {
    EXPECT_EQ(
        http_request(port, "POST", "/api/tokens", R"({"name":"x","role":"read"})", {{"Idempotency-Key", bad}}).status,
        400)
        << bad;
  }
  EXPECT_EQ(http_request(port, "POST", "/api/tokens", R"({"name":"y","role":"read"})",
                         {{"Idempotency-Key", std::string(256, 'k')}})
                .status,
            400);

  // The resumed run goes on from its checkpoint (and is cancelled again: it has 100,000 rounds).
  auto resumed = http_request(port, "POST", "/api/training-jobs", R"({"resume":")" + slow_id + R"("})");
  EXPECT_EQ(resumed.status, 202) << resumed.body;
  EXPECT_EQ(http_request(port, "POST", "/api/training-jobs/" + slow_id + "/cancel").status, 200);
  job = poll_to_end(slow_id);
  EXPECT_NE(job.find("\"status\":\"INTERRUPTED\""), std::string::npos) << job;

  // The workspace's upkeep: verify finds nothing wrong, gc lists what nothing names.
  auto verified = http_request(port, "GET", "/api/workspace/verify");
  EXPECT_EQ(verified.status, 200) << verified.body;
  EXPECT_NE(verified.body.find("\"problems\":0"), std::string::npos) << verified.body;
  EXPECT_EQ(verified.body.find(home_.path()), std::string::npos) << "no server path in the answer";
  EXPECT_EQ(http_request(port, "GET", "/api/workspace/garbage?min_age=0s").status, 200);
  EXPECT_EQ(http_request(port, "GET", "/api/workspace/garbage?min_age=-1h").status, 400);
}

// The CLI's remaining operations over /api, each answering what the CLI prints: describe, params,
// explain (importance and per-row contributions), export (the same bytes), reproduce and retrain
// (jobs of the server's training slot), with their refusals.
TEST_F(Api, StudiesRunOnTheServerAsTheCliRunsThem) {
  std::filesystem::create_directories(home_.path() + "/data");
  std::filesystem::copy_file(data_path("lending_club.csv"), home_.path() + "/data/loans.csv");
  int port = start_server({});
  ASSERT_GT(port, 0);
  // Refused before anything starts: files outside data/, a bad objective, resume with a definition.
  const char* inverted_range =
      R"({"study":"s","spec":{"data":"loans.csv","target":"Class","model":"gbdt"},"space":{"params":)"
      R"({"learning_rate":{"type":"float","low":0.5,"high":0.1}}}})";
  for (const char* body :
       {R"({"study":"s","spec":{"data":"../slipway.db","target":"Class"}})",
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["acu"]})",
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["auc","f1","r2","rmse"]})",
        R"({"study":"s","resume":true,"sampler":"random"})", R"({"study":"bad name!","spec":{}})", inverted_range,
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"budget_seconds":0})", "{}",
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["cost"]})",
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["cost"],"costs":"fn=abc"})",
        R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["cost"],"costs":12})"}) {
    EXPECT_EQ(http_request(port, "POST", "/api/studies", body).status, 400) << body;
  }
  // The costs are text, never a path, and bounded.
  std::string long_costs = R"({"study":"s","spec":{"data":"loans.csv","target":"Class"},"objectives":["cost"],)"
                           R"("costs":"fn=1)" +
                           std::string(70'000, ' ') + R"("})";
  auto too_long = http_request(port, "POST", "/api/studies", long_costs);
  EXPECT_EQ(too_long.status, 400);
  EXPECT_NE(too_long.body.find("64 KiB"), std::string::npos) << too_long.body;
  auto started = http_request(port, "POST", "/api/studies",
                              R"({"study":"api-study","spec":{"data":"loans.csv","target":"Class","model":"gbdt",)"
                              R"("params":{"rounds":"8"}},"trials":3,"register":"tuned",)"
                              R"("constraints":["cost<=5"],"costs":"fn=5,fp=1",)"
                              R"("space":{"params":{"max_depth":{"type":"int","low":2,"high":5}}}})");
  ASSERT_EQ(started.status, 202) << started.body;
  std::string study;
  for (int poll = 0; poll < 1200; ++poll) {
    study = http_request(port, "GET", "/api/studies/api-study").body;
    if (study.find("\"running\":false") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(study.find("\"trial_states\":{\"complete\":3}"), std::string::npos) << study;
  EXPECT_NE(study.find("\"best\":["), std::string::npos) << study;
  EXPECT_NE(study.find("\"cost\":"), std::string::npos) << study;
  auto listed = http_request(port, "GET", "/api/studies");
  EXPECT_NE(listed.body.find("\"study\":\"api-study\""), std::string::npos) << listed.body;
  // The CLI reads the same study, and the best trial is registered.
  auto shown = slipway({"study", "show", "api-study"});
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("3 complete"), std::string::npos) << shown.out;
  EXPECT_EQ(slipway({"versions", "tuned"}).exit_code, 0);
  EXPECT_EQ(http_request(port, "POST", "/api/studies/api-study/cancel").status, 409);
  EXPECT_EQ(http_request(port, "GET", "/api/studies/none").status, 404);
}

TEST_F(Api, ExplanationsExportsReproductionsAndRetrainingsAnswerAsTheCliDoes) {
  std::filesystem::create_directories(home_.path() + "/data");
  std::filesystem::copy_file(data_path("lending_club.csv"), home_.path() + "/data/loans.csv");
  ASSERT_EQ(slipway({"train", "--data", data_path("lending_club.csv"), "--target", "Class", "--model", "gbdt",
                     "--param", "rounds=20", "--register", "trees"})
                .exit_code,
            0);
  int port = start_server({});
  ASSERT_GT(port, 0);
  auto same_json = [&](const std::string& target, std::vector<std::string> cli) {
    cli.insert(cli.begin(), "--json");
    auto printed = slipway(cli);
    EXPECT_EQ(printed.exit_code, 0) << printed.err;
    auto answer = http_request(port, "GET", target);
    EXPECT_EQ(answer.status, 200) << answer.body;
    while (!printed.out.empty() && printed.out.back() == '\n') printed.out.pop_back();
    EXPECT_EQ(answer.body, printed.out) << target;
  };
  same_json("/api/endpoints/web/description", {"describe", "web"});
  same_json("/api/params", {"params"});
  same_json("/api/models/trees/versions/1/importance", {"explain", "trees@1", "--importance"});
  auto explained = http_request(port, "GET", "/api/models/trees/versions/1/explanation?data=loans.csv&rows=3");
  ASSERT_EQ(explained.status, 200) << explained.body;
  EXPECT_NE(explained.body.find("\"rows\":3,"), std::string::npos) << explained.body.substr(0, 200);
  EXPECT_NE(explained.body.find("\"bias\""), std::string::npos);
  for (const char* refused :
       {"/api/models/trees/versions/1/explanation?data=../slipway.db",
        "/api/models/trees/versions/1/explanation?data=loans.csv&rows=10001",
        "/api/models/trees/versions/1/explanation", "/api/models/lending/versions/1/explanation?data=loans.csv",
        "/api/models/trees/versions/1/export?format=pmml", "/api/models/trees/versions/1/export"}) {
    EXPECT_EQ(http_request(port, "GET", refused).status, 400) << refused;  // lending is logistic: no trees
  }

  // The exported file is the one the CLI writes, byte for byte.
  TempDir scratch;
  ASSERT_EQ(slipway({"export", "trees@1", "--format", "onnx", "--out", scratch.file("cli.onnx")}).exit_code, 0);
  auto exported = http_request(port, "GET", "/api/models/trees/versions/1/export?format=onnx");
  ASSERT_EQ(exported.status, 200);
  EXPECT_EQ(exported.body, slipway::read_file(scratch.file("cli.onnx")).value());
  auto xgboost = http_request(port, "GET", "/api/models/trees/versions/1/export?format=xgboost-json");
  ASSERT_EQ(xgboost.status, 200);
  EXPECT_NE(xgboost.body.find("\"learner\""), std::string::npos) << xgboost.body.substr(0, 200);

  // Reproduce: 202 at once, then the verdict; a run that is not a finished training is refused.
  auto runs = slipway({"--json", "versions", "trees"});
  std::string run_id = field(runs.out, "run_id");
  ASSERT_EQ(run_id.size(), 32u) << runs.out;
  auto poll = [&](const std::string& target) {
    std::string answer;
    for (int attempt = 0; attempt < 1200; ++attempt) {
      answer = http_request(port, "GET", target).body;
      if (answer.find("\"running\":false") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return answer;
  };
  EXPECT_EQ(http_request(port, "GET", "/api/runs/" + run_id + "/reproduction").status, 404);
  auto reproducing = http_request(port, "POST", "/api/runs/" + run_id + "/reproduction");
  ASSERT_EQ(reproducing.status, 202) << reproducing.body;
  std::string verdict = poll("/api/runs/" + run_id + "/reproduction");
  EXPECT_NE(verdict.find("\"state\":\"identical\""), std::string::npos) << verdict;
  auto tracked = http_request(port, "POST", "/api/runs", R"({"experiment":"elsewhere"})");
  EXPECT_EQ(http_request(port, "POST", "/api/runs/" + field(tracked.body, "run_id") + "/reproduction").status, 409);
  EXPECT_EQ(http_request(port, "POST", "/api/runs/not-a-run/reproduction").status, 400);
  EXPECT_EQ(http_request(port, "POST", "/api/runs/" + run_id + "/reproduction/cancel").status, 409);

  // Retrain: no policy is a 404; dry_run decides without starting; a due retraining runs on the
  // server and its record is what `slipway retrain history` prints.
  EXPECT_EQ(http_request(port, "POST", "/api/models/trees/retrainings").status, 404);
  // A policy sent over HTTP reads files of data/ only: a deploy token cannot make the server
  // train on (and so reveal) any other file, directly or through the policy's spec.
  for (const char* body :
       {R"({"on":"schedule","every_s":"1","data":"/etc/passwd"})", R"({"on":"schedule","gate_data":"../slipway.db"})",
        R"({"on":"schedule","spec":"data: /etc/passwd\ntarget: x\n"})"}) {
    EXPECT_EQ(http_request(port, "PUT", "/api/models/trees/retrain-policy", body).status, 400) << body;
  }
  auto policy = http_request(port, "PUT", "/api/models/trees/retrain-policy",
                             R"({"on":"schedule","every_s":"1","data":"loans.csv","gate":"max_drop=0.5"})");
  ASSERT_EQ(policy.status, 200) << policy.body;
  EXPECT_NE(policy.body.find(home_.path() + "/data/loans.csv"), std::string::npos) << policy.body;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto dry = http_request(port, "POST", "/api/models/trees/retrainings", R"({"dry_run":true})");
  EXPECT_EQ(dry.status, 200) << dry.body;
  EXPECT_NE(dry.body.find("\"due\":true"), std::string::npos) << dry.body;
  EXPECT_NE(dry.body.find("\"started\":false"), std::string::npos) << dry.body;
  EXPECT_EQ(http_request(port, "POST", "/api/models/trees/retrainings", R"({"force":"yes"})").status, 400);
  auto retraining = http_request(port, "POST", "/api/models/trees/retrainings");
  ASSERT_EQ(retraining.status, 202) << retraining.body;
  std::string history = poll("/api/models/trees/retrainings");
  EXPECT_NE(history.find("\"state\":\"registered\""), std::string::npos) << history;
  EXPECT_NE(history.find("\"candidate\":\"trees@2\""), std::string::npos) << history;
  auto printed = slipway({"--json", "retrain", "history", "trees"});
  EXPECT_NE(history.find(printed.out.substr(1, printed.out.find('}'))), std::string::npos) << printed.out;
  EXPECT_EQ(http_request(port, "POST", "/api/models/trees/retrainings/cancel").status, 409);
}

// Hostile calls: forged paging tokens, uploads that lie about their hash, paths that climb out,
// bodies over the limit, junk names; each a clear 4xx, and nothing half-written. Then 1,000
// writers at once: each answered (200, or 429 when the backlog is full), and every 200 stored.
TEST_F(Api, HostileCallsAreRefusedAndConcurrentWritersLoseNothing) {
  int port = start_server({});
  ASSERT_GT(port, 0);
  auto started = http_request(port, "POST", "/api/runs", R"({"experiment":"hostile"})");
  ASSERT_EQ(started.status, 201);
  std::string run_id = field(started.body, "run_id");
  std::string base = "/api/runs/" + run_id;

  for (const char* token : {"abc", "1.2.3", "99999999999999999999999.1", "-1.5", "%ZZ"}) {
    EXPECT_EQ(http_request(port, "GET", std::string("/api/runs?page_token=") + token).status, 400) << token;
  }
  EXPECT_EQ(http_request(port, "GET", "/api/models?page_token=..%2Fx").status, 400);
  EXPECT_EQ(http_request(port, "GET", "/api/audit?page_token=-3").status, 400);
  EXPECT_EQ(http_request(port, "GET", "/api/runs?colour=blue").status, 400);
  EXPECT_EQ(http_request(port, "GET", "/api/runs?page_size=0").status, 400);

  const std::string zeros_sha = std::string(64, '0');
  auto lying = http_request(port, "POST", base + "/artifacts?path=model.pt&sha256=" + zeros_sha, "weights");
  EXPECT_EQ(lying.status, 400);
  EXPECT_NE(lying.body.find("nothing was stored"), std::string::npos) << lying.body;
  auto bundle_lie = http_request(port, "POST", "/api/models/uploaded/versions?sha256=" + zeros_sha, "not a bundle");
  EXPECT_EQ(bundle_lie.status, 400);
  for (const char* path : {"../../etc/passwd", "/abs", "a//b", "a/./b", "dir/", "back%5Cslash", "nul%00"}) {
    auto climbed = http_request(port, "POST", base + "/artifacts?path=" + path + "&sha256=" + zeros_sha, "x");
    EXPECT_EQ(climbed.status, 400) << path << " " << climbed.body;
  }
  std::string huge(std::size_t{65} << 20, 'x');
  EXPECT_EQ(http_request(port, "POST", base + "/artifacts?path=huge&sha256=" + zeros_sha, huge).status, 413);
  huge.clear();
  huge.shrink_to_fit();
  for (const char* body : {R"({"params":{"naïve":"x"}})", R"({"metrics":[{"key":"loss","value":1e400}]})",
                           R"({"metrics":[{"key":"loss","value":1,"step":-1}]})", R"({"metrics":[{"key":"loss"}]})",
                           R"({"params":{"a":"1","a":"2"}})", R"({"tags":{"t":1}})", "[]", "{"}) {
    EXPECT_EQ(http_request(port, "POST", base + "/log", body).status, 400) << body;
  }
  EXPECT_EQ(http_request(port, "POST", "/api/runs", R"({"experiment":"bell\u0007"})").status, 400);
  EXPECT_EQ(http_request(port, "POST", "/api/runs", R"({"run_id":"ABC"})").status, 400);
  auto shown = http_request(port, "GET", base);
  EXPECT_NE(shown.body.find("\"params\":{},\"metrics\":{},\"tags\":{},\"artifacts\":[]"), std::string::npos)
      << shown.body;

  std::atomic<int> stored{0};
  std::atomic<int> refused{0};
  std::atomic<int> other{0};
  std::vector<std::thread> writers;
  writers.reserve(1000);
  for (int writer = 0; writer < 1000; ++writer) {
    writers.emplace_back([&, writer] {
      auto answer = http_request(port, "POST", base + "/log",
                                 R"({"metrics":[{"key":"m","value":)" + std::to_string(writer) + R"(,"step":)" +
                                     std::to_string(writer) + "}]}");
      (answer.status == 200 ? stored : answer.status == 429 || answer.status == 503 ? refused : other)++;
    });
  }
  for (auto& thread : writers) thread.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(stored.load(), 0);
  auto history = http_request(port, "GET", base + "/metrics?key=m");
  int steps = 0;
  for (auto at = history.body.find("\"step\":"); at != std::string::npos; at = history.body.find("\"step\":", at + 1))
    ++steps;
  EXPECT_EQ(steps, stored.load()) << "refused " << refused.load();
  EXPECT_LT(slipway::testing::resident_kib(server_->pid()), 512 * 1024);
}

}  // namespace
