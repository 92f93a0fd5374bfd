// `slipway llm serve` as a user runs it: a real process, real HTTP, the official `openai` npm
// client unchanged, and what a careless or hostile caller sends.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

// node_modules holding the official `openai` client (6.30.1: the 7.x line needs Node.js 22),
// installed on first use into ~/.cache; empty when Node.js, npm or the network is missing.
std::string openai_modules() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || run_command({"/usr/bin/env", "node", "--version"}).exit_code != 0) return "";
  std::string prefix = std::string(home) + "/.cache/slipway-peers-openai";
  std::string modules = prefix + "/node_modules";
  if (std::filesystem::exists(modules + "/openai/package.json")) return modules;
  std::filesystem::create_directories(prefix);
  auto installed = run_command({"/usr/bin/env", "timeout", "120", "npm", "install", "--prefix", prefix, "-E",
                                "--no-audit", "--no-fund", "--fetch-timeout=20000", "openai@6.30.1"});
  return installed.exit_code == 0 ? modules : "";
}

class LlmServer : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("tiny.gguf");
    // Wide and long enough that the stream the client aborts is still generating when the abort
    // arrives: a smaller model wrote all its tokens into the socket first on a fast machine.
    auto made = run_command({slipway_binary(), "llm", "make-test-model", model_, "--type", "q8_0", "--context", "2048",
                             "--dim", "256", "--ff", "1024", "--layers", "4"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    server_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        slipway_binary(), "--json", "llm", "serve", model_, "--port", "0", "--api-key", "secret", "--parallel", "2"});
    const StartedServer started = read_started_server(*server_);
    ASSERT_GT(started.port, 0) << started.first_line;
    port_ = started.port;
  }
  void TearDown() override {
    if (!server_) return;
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait(), 0);
  }
  HttpResult post(const std::string& path, const std::string& body, const std::string& key = "secret") {
    return http_request(port_, "POST", path, body, {{"Authorization", "Bearer " + key}});
  }

  TempDir dir_;
  std::string model_;
  std::unique_ptr<ChildProcess> server_;
  int port_ = 0;
};

TEST_F(LlmServer, TheOfficialOpenAiClientWorksUnchanged) {
  std::string modules = openai_modules();
  if (modules.empty()) GTEST_SKIP() << "Node.js or the openai package is not available";
  auto run =
      run_command({"/usr/bin/env", "node", slipway::testing::source_dir() + "/tests/integration/openai_client.mjs",
                   modules, "http://127.0.0.1:" + std::to_string(port_) + "/v1", "secret", "tiny"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string& seen = run.out;
  EXPECT_NE(seen.find(R"("models":["tiny"])"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("finish":"length","usage":{"prompt_tokens")"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("logprob_tokens":8,"top":2)"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("role":"assistant")"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("logprobs":10,"top":3)"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("seeded":{"choices":2,"same":true,"differ":true})"), std::string::npos) << seen;
  EXPECT_NE(seen.find(R"("errors":{"missing_model":404,"bad_temperature":400,"bad_key":401,"too_long":400})"),
            std::string::npos)
      << seen;
  EXPECT_NE(seen.find(R"("finish":"stop")"), std::string::npos) << seen;
  // The streamed chat is the whole chat's text, with usage in its last chunk.
  auto content = [&](std::string_view key) {
    auto at = seen.find(std::string("\"") + std::string(key) + "\":{\"content\":");
    EXPECT_NE(at, std::string::npos) << key;
    auto start = seen.find(":\"", at + key.size() + 3) + 2;
    return seen.substr(start, seen.find("\",\"role\"", start) - start);
  };
  EXPECT_EQ(content("chat"), content("stream"));
  // The client's aborted stream was cancelled on the server.
  auto metrics = http_request(port_, "GET", "/metrics", "", {{"Authorization", "Bearer secret"}});
  EXPECT_NE(metrics.body.find(R"(slipway_llm_requests_finished_total{model="tiny",reason="cancelled"} 1)"),
            std::string::npos)
      << metrics.body;
}

TEST_F(LlmServer, HostileAndCarelessRequestsGetOpenAiShapedErrors) {
  auto expect_error = [&](const HttpResult& result, int status, const std::string& fragment) {
    EXPECT_EQ(result.status, status) << result.body;
    EXPECT_NE(result.body.find(R"({"error":{"message":)"), std::string::npos) << result.body;
    EXPECT_NE(result.body.find(fragment), std::string::npos) << result.body;
  };
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x"})", "nope"), 401, "API key");
  expect_error(http_request(port_, "GET", "/v1/models"), 401, "API key");
  EXPECT_EQ(http_request(port_, "GET", "/v1/models", "", {{"Authorization", "Bearer secretX"}}).status, 401);
  EXPECT_EQ(http_request(port_, "GET", "/v1/models", "", {{"Authorization", "BEARER secret"}}).status, 200);
  EXPECT_EQ(http_request(port_, "GET", "/metrics").status, 401);
  EXPECT_EQ(http_request(port_, "GET", "/health").status, 200);
  // The server `slipway serve` runs, the API key one of its tokens: KServe v2 beside /v1 (with no
  // model of its own), health open, no management API (no workspace to manage).
  EXPECT_EQ(http_request(port_, "GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(http_request(port_, "GET", "/v2").status, 401);
  EXPECT_EQ(http_request(port_, "GET", "/v2", "", {{"Authorization", "Bearer secret"}}).status, 200);
  EXPECT_EQ(http_request(port_, "POST", "/v2/models/tiny/infer", "{}", {{"Authorization", "Bearer secret"}}).status,
            404);
  EXPECT_EQ(http_request(port_, "GET", "/api/models", "", {{"Authorization", "Bearer secret"}}).status, 404);
  // A body over the limit is refused before any handler, in OpenAI's shape too.
  expect_error(post("/v1/completions", std::string(std::size_t{9} << 20, ' ')), 413, "invalid_request_error");
  expect_error(post("/v1/completions", "{not json"), 400, "not valid JSON");
  expect_error(post("/v1/completions", "[1,2]"), 400, "JSON object");
  expect_error(post("/v1/completions", R"({"prompt":"x"})"), 400, "'model' is required");
  expect_error(post("/v1/completions", R"({"model":"tiny"})"), 400, "'prompt' is required");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[]})"), 400, "prompt");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[1,-5]})"), 400, "token ids");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[1,999999]})"), 400, "vocabulary");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","n":1000})"), 400, "'n'");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":0})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":"ten"})"), 400, "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","temperature":1e999})"), 400, "");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","top_p":0})"), 400, "top_p");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","stop":["a","b","c","d","e"]})"), 400, "stop");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","stop":[""]})"), 400, "stop");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","logit_bias":{"abc":1}})"), 400, "logit_bias");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","logprobs":50})"), 400, "logprobs");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","echo":true})"), 400, "echo");
  expect_error(post("/v1/chat/completions", R"({"model":"tiny","messages":[]})"), 400, "messages");
  expect_error(post("/v1/chat/completions", R"({"model":"tiny","messages":[{"content":"hi"}]})"), 400, "role");
  expect_error(
      post("/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]})"),
      400, "text");
  expect_error(
      post("/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[]})"), 400,
      "tools");
  expect_error(http_request(port_, "GET", "/v1/completions", "", {{"Authorization", "Bearer secret"}}), 405, "POST");
  expect_error(post("/v1/embeddings", "{}"), 404, "no route");
  expect_error(http_request(port_, "GET", "/v1/models/other", "", {{"Authorization", "Bearer secret"}}), 404,
               "model_not_found");
  // Junk in names and text comes back escaped, and the server keeps serving.
  expect_error(post("/v1/completions", "{\"model\":\"\\u0000\\\"<x>\",\"prompt\":\"x\"}"), 404, "does not exist");
  auto fine = post("/v1/completions", R"({"model":"tiny","prompt":"\u00e9\u4e2d\ud83d\ude00 \u0000","max_tokens":3})");
  EXPECT_EQ(fine.status, 200) << fine.body;
}

TEST_F(LlmServer, AStreamEndsWithDoneAndUsage) {
  auto streamed = post("/v1/chat/completions",
                       R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,)"
                       R"("stream_options":{"include_usage":true}})");
  EXPECT_EQ(streamed.status, 200);
  EXPECT_EQ(streamed.headers["content-type"], "text/event-stream");
  EXPECT_NE(streamed.body.find(R"("object":"chat.completion.chunk")"), std::string::npos) << streamed.body;
  EXPECT_NE(streamed.body.find(R"("delta":{"role":"assistant","content":"")"), std::string::npos) << streamed.body;
  EXPECT_NE(streamed.body.find(R"("choices":[],"usage":{"prompt_tokens")"), std::string::npos) << streamed.body;
  EXPECT_TRUE(streamed.body.ends_with("data: [DONE]\n\n")) << streamed.body;
}

// SIGTERM with a generation running: it is answered (503, "shutting down") at the drain
// deadline, and the server exits cleanly.
TEST(LlmServerShutdown, AGenerationRunningAtTheDrainDeadlineIsAnswered) {
  TempDir dir;
  std::string model = dir.file("long.gguf");
  // Wide enough that 16,000 tokens take far longer than the drain deadline (the tiny default
  // model decodes them in about five seconds).
  ASSERT_EQ(run_command({slipway_binary(), "llm", "make-test-model", model, "--context", "16384", "--layers", "8",
                         "--dim", "256", "--kv-heads", "1", "--ff", "1024"})
                .exit_code,
            0);
  ChildProcess server(
      {slipway_binary(), "--json", "llm", "serve", model, "--port", "0", "--ctx", "16384", "--parallel", "1"});
  const StartedServer started = read_started_server(server);
  ASSERT_GT(started.port, 0) << started.first_line;
  int port = started.port;
  HttpResult answer;
  std::thread client([&] {
    answer = http_request(port, "POST", "/v1/completions",
                          R"({"model":"long","prompt":"hello","max_tokens":16000,"ignore_eos":true})");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server.signal(SIGTERM);
  client.join();
  EXPECT_EQ(server.wait(), 0);
  EXPECT_EQ(answer.status, 503) << answer.body;
  EXPECT_NE(answer.body.find("shutting down"), std::string::npos) << answer.body;
}

// A GGUF imported into the registry is served by `slipway serve` under /v1 with the predict
// role, beside (not through) the v2 protocol.
TEST(RegisteredLlm, ImportedGgufIsServedUnderV1WithAuthRoles) {
  TempDir home;
  std::string model = home.file("tiny.gguf");
  ASSERT_EQ(run_command({slipway_binary(), "llm", "make-test-model", model, "--type", "q4_0"}).exit_code, 0);
  auto imported =
      run_command({slipway_binary(), "--home", home.path(), "--json", "import", "gguf", model, "--register", "chat"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find(R"("task":"text generation")"), std::string::npos) << imported.out;
  EXPECT_NE(imported.out.find(R"("version":1)"), std::string::npos) << imported.out;
  // Refused before anything is stored: not GGUF, a bundle-only flag, a junk name.
  write_text(home.file("junk.gguf"), "GGUF....");
  auto junk = run_command(
      {slipway_binary(), "--home", home.path(), "import", "gguf", home.file("junk.gguf"), "--register", "x"});
  EXPECT_EQ(junk.exit_code, 1);
  EXPECT_NE(junk.err.find("junk.gguf"), std::string::npos) << junk.err;
  EXPECT_EQ(run_command({slipway_binary(), "--home", home.path(), "import", "gguf", model, "--out", home.file("b")})
                .exit_code,
            1);
  EXPECT_EQ(
      run_command({slipway_binary(), "--home", home.path(), "import", "gguf", model, "--register", "../bad"}).exit_code,
      1);
  auto token = run_command({slipway_binary(), "--home", home.path(), "token", "create", "app", "--role", "predict"});
  ASSERT_EQ(token.exit_code, 0) << token.err;
  std::string secret = token.out.substr(0, token.out.find('\n'));
  ChildProcess server({slipway_binary(), "--home", home.path(), "--json", "serve", "--port", "0", "--auth"});
  const StartedServer started = read_started_server(server);
  ASSERT_GT(started.port, 0) << started.first_line;
  int port = started.port;
  std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer " + secret}};
  // Refused in OpenAI's error shape, which its clients read.
  auto refused = http_request(port, "GET", "/v1/models");
  EXPECT_EQ(refused.status, 401);
  EXPECT_NE(refused.body.find(R"({"error":{"message":"this server requires a token)"), std::string::npos)
      << refused.body;
  EXPECT_NE(refused.body.find(R"("type":"authentication_error")"), std::string::npos) << refused.body;
  EXPECT_EQ(refused.headers["www-authenticate"], "Bearer realm=\"slipway\"");
  auto models = http_request(port, "GET", "/v1/models", "", auth);
  EXPECT_EQ(models.status, 200);
  EXPECT_NE(models.body.find(R"("id":"chat")"), std::string::npos) << models.body;
  auto chat = http_request(port, "POST", "/v1/chat/completions",
                           R"({"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":4})", auth);
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_NE(chat.body.find(R"("object":"chat.completion")"), std::string::npos) << chat.body;
  // v2 tells the caller where the model is served.
  auto v2 = http_request(port, "POST", "/v2/models/chat/infer", R"({"inputs":[]})", auth);
  EXPECT_GE(v2.status, 400);
  EXPECT_NE(v2.body.find("/v1"), std::string::npos) << v2.body;
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0);
}

}  // namespace
}  // namespace slipway::testing
