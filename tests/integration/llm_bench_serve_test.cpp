// `slipway llm bench-serve` against a real `slipway llm serve`: the counts, the token totals and
// the latency percentiles of its JSON report, and the failures it reports when nothing answers.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace slipway::testing {
namespace {

// The number after "key": inside the object "section": of a one-line JSON report ("" section:
// the top level's first "key":). NaN when absent or null.
double number_in(const std::string& json, const std::string& section, const std::string& key) {
  std::size_t from = 0;
  if (!section.empty()) {
    from = json.find("\"" + section + "\":");
    if (from == std::string::npos) return std::nan("");
  }
  std::size_t at = json.find("\"" + key + "\":", from);
  if (at == std::string::npos) return std::nan("");
  std::size_t start = at + key.size() + 3;
  std::size_t end = json.find_first_of(",}", start);
  std::string text = json.substr(start, end - start);
  return text == "null" ? std::nan("") : std::stod(text);
}

class LlmBenchServe : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("bench.gguf");
    // Wide and deep enough that a decode step (some milliseconds) is longer than the trip of an
    // event through the server's loop: every token then arrives in its own read, and ITL's
    // percentiles are those of decode steps rather than of events read together.
    auto made = run_command({slipway_binary(), "llm", "make-test-model", model_, "--type", "q8_0", "--dim", "512",
                             "--ff", "2048", "--layers", "8", "--context", "512"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    server_ = std::make_unique<ChildProcess>(std::vector<std::string>{slipway_binary(), "--json", "llm", "serve",
                                                                      model_, "--name", "bench", "--port", "0",
                                                                      "--api-key", "secret", "--max-num-seqs", "4"});
    const StartedServer started = read_started_server(*server_);
    ASSERT_GT(started.port, 0) << started.first_line;
    port_ = started.port;
  }
  void TearDown() override {
    if (!server_) return;
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait(), 0);
  }
  CommandResult bench(std::vector<std::string> args) {
    args.insert(args.begin(), {slipway_binary(), "--json", "llm", "bench-serve", "--url",
                               "http://127.0.0.1:" + std::to_string(port_), "--api-key", "secret"});
    return run_command(args);
  }

  TempDir dir_;
  std::string model_;
  std::unique_ptr<ChildProcess> server_;
  int port_ = 0;
};

TEST_F(LlmBenchServe, StreamsEveryRequestAndReportsOrderedPercentiles) {
  auto run = bench({"--model", "bench", "--clients", "4", "--requests", "12", "--prompt-tokens", "20",
                    "--output-tokens", "8", "--system-prompt-tokens", "32", "--vocab", "512"});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const std::string& report = run.out;
  EXPECT_EQ(number_in(report, "", "completed"), 12) << report;
  EXPECT_EQ(number_in(report, "", "failed"), 0) << report;
  EXPECT_NE(report.find("\"failures\":[]"), std::string::npos) << report;
  // ignore_eos makes every output exactly max_tokens long; the server counts the shared prefix too.
  EXPECT_EQ(number_in(report, "", "total_output_tokens"), 12 * 8) << report;
  EXPECT_EQ(number_in(report, "", "total_prompt_tokens"), 12 * (32 + 20)) << report;
  EXPECT_GT(number_in(report, "", "output_tokens_per_second"), 0) << report;
  EXPECT_GT(number_in(report, "", "requests_per_second"), 0) << report;
  for (const std::string section : {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"}) {
    double p50 = number_in(report, section, "p50");
    double p95 = number_in(report, section, "p95");
    double p99 = number_in(report, section, "p99");
    EXPECT_GT(number_in(report, section, "mean"), 0) << section << ": " << report;
    EXPECT_GT(p50, 0) << section << ": " << report;
    EXPECT_LE(p50, p95) << section << ": " << report;
    EXPECT_LE(p95, p99) << section << ": " << report;
  }
  // A request's first token comes before its last.
  EXPECT_LE(number_in(report, "ttft_ms", "p50"), number_in(report, "e2e_ms", "p50")) << report;
}

TEST_F(LlmBenchServe, RefusedRequestsAreCountedWithTheServersReason) {
  auto run = bench({"--model", "nobody", "--clients", "2", "--requests", "3", "--vocab", "512"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(number_in(run.out, "", "completed"), 0) << run.out;
  EXPECT_EQ(number_in(run.out, "", "failed"), 3) << run.out;
  EXPECT_NE(run.out.find(R"({"reason":"HTTP 404: the model 'nobody' does not exist)"), std::string::npos) << run.out;
}

// Without --vocab the prompts are drawn from the served model's vocabulary (GET /v1/models/MODEL);
// a --vocab past it is one cause, reported once for every request it failed.
TEST_F(LlmBenchServe, DrawsPromptsFromTheServedVocabularyUnlessTold) {
  auto models = http_request(port_, "GET", "/v1/models/bench", "", {{"Authorization", "Bearer secret"}});
  double vocabulary = number_in(models.body, "", "vocab_size");
  ASSERT_GT(vocabulary, 10) << models.body;
  auto fits =
      bench({"--model", "bench", "--clients", "2", "--requests", "4", "--prompt-tokens", "16", "--output-tokens", "2"});
  ASSERT_EQ(fits.exit_code, 0) << fits.err << fits.out;
  EXPECT_EQ(number_in(fits.out, "", "failed"), 0) << fits.out;
  EXPECT_EQ(number_in(fits.out, "settings", "vocab"), vocabulary) << fits.out;

  auto past = bench({"--model", "bench", "--clients", "2", "--requests", "4", "--prompt-tokens", "64",
                     "--output-tokens", "2", "--vocab", std::to_string(static_cast<int>(vocabulary) * 64)});
  EXPECT_EQ(past.exit_code, 1) << past.err;
  EXPECT_NE(past.out.find("token ids must be below the model's vocabulary size, " +
                          std::to_string(static_cast<int>(vocabulary)) + "\",\"count\":4}]"),
            std::string::npos)
      << past.out;

  auto unknown = bench({"--model", "nobody", "--requests", "1"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("give --vocab N"), std::string::npos) << unknown.err;
}

TEST(LlmBenchServeWithoutServer, EveryRequestFailsWithAConnectionError) {
  // Nobody listens on port 1: each request fails at once, and the command says so and exits 1.
  auto run = run_command({slipway_binary(), "--json", "llm", "bench-serve", "--url", "http://127.0.0.1:1", "--model",
                          "tiny", "--clients", "4", "--requests", "12", "--vocab", "512"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(number_in(run.out, "", "completed"), 0) << run.out;
  EXPECT_EQ(number_in(run.out, "", "failed"), 12) << run.out;
  EXPECT_EQ(number_in(run.out, "", "total_output_tokens"), 0) << run.out;
  EXPECT_NE(run.out.find(R"("failures":[{"reason":"cannot connect to 127.0.0.1:1: Connection refused","count":12}])"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find(R"("ttft_ms":{"mean":null)"), std::string::npos) << run.out;
}

}  // namespace
}  // namespace slipway::testing
