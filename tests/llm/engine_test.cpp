// The generation engine: its tokens against a plain greedy loop over forward(), alone and beside
// other sequences; stop strings, lengths, end tokens, cancellation, seeds, and its refusals.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

struct Loaded {
  std::shared_ptr<const LlamaModel> model;
  Tokenizer tokenizer;
};

Loaded load(const std::string& path) {
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto tokenizer = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  auto model = LlamaModel::from_file(std::move(*file));
  EXPECT_TRUE(model.ok()) << model.status().message();
  return {*model, *tokenizer};
}

struct Outcome {
  std::vector<std::int32_t> tokens;
  std::string text;
  GenerationResult result;
};

// Submits and waits for the finish.
std::future<Outcome> generate(Engine& engine, GenerationRequest request, std::size_t cancel_after = SIZE_MAX) {
  auto outcome = std::make_shared<Outcome>();
  auto promise = std::make_shared<std::promise<Outcome>>();
  request.on_token = [outcome, cancel_after](const GenerationEvent& event) {
    outcome->tokens.push_back(event.sampled.chosen.token);
    outcome->text += event.text;
    return outcome->tokens.size() < cancel_after;
  };
  request.on_finish = [outcome, promise](const GenerationResult& result) {
    outcome->result = result;
    outcome->text += result.text;
    promise->set_value(*outcome);
  };
  Status status = engine.submit(std::move(request));
  EXPECT_TRUE(status.ok()) << status.message();
  return promise->get_future();
}

// The greedy tokens of a plain loop over forward(), one token at a time.
std::vector<std::int32_t> plain_greedy(const LlamaModel& model, std::vector<std::int32_t> prompt, std::size_t count) {
  KvCache cache(model.config(), 64, 1);
  std::vector<float> logits;
  std::vector<BatchToken> batch;
  for (std::size_t i = 0; i < prompt.size(); ++i) batch.push_back({0, i, prompt[i]});
  std::vector<bool> wants(batch.size(), false);
  wants.back() = true;
  std::vector<std::int32_t> out;
  for (std::size_t step = 0; step < count; ++step) {
    EXPECT_TRUE(forward(model, cache, batch, wants, logits, 1).ok());
    auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    batch = {{0, prompt.size() + step, best}};
    wants = {true};
  }
  return out;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("model.gguf");
    TestModelShape shape;
    shape.context = 512;
    ASSERT_TRUE(write_test_model(shape, TensorType::kQ8_0, 5, path_).ok());
    loaded_ = load(path_);
  }
  std::unique_ptr<Engine> start(EngineOptions options = {}) {
    auto engine = Engine::start(loaded_.model, loaded_.tokenizer, options);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    return std::move(*engine);
  }
  GenerationRequest greedy(std::string_view text, std::size_t max_tokens) {
    GenerationRequest request;
    request.prompt = loaded_.tokenizer.encode(text);
    request.max_tokens = max_tokens;
    request.sampling.temperature = 0;
    request.ignore_eos = true;
    return request;
  }
  testing::TempDir dir_;
  std::string path_;
  Loaded loaded_;
};

TEST_F(EngineTest, GreedyTokensEqualAPlainLoopAloneAndBesideOtherSequences) {
  auto engine = start();
  GenerationRequest request = greedy("the quick brown fox", 24);
  std::vector<std::int32_t> expected = plain_greedy(*loaded_.model, request.prompt, 24);
  Outcome alone = generate(*engine, request).get();
  EXPECT_EQ(alone.tokens, expected);
  EXPECT_EQ(alone.result.reason, FinishReason::kLength);
  EXPECT_EQ(alone.result.completion_tokens, 24u);
  EXPECT_EQ(alone.result.prompt_tokens, request.prompt.size());
  // Six at once on four sequences: batched with other prompts and other positions, and queued.
  std::vector<std::future<Outcome>> running;
  running.reserve(6);
  for (int i = 0; i < 6; ++i) running.push_back(generate(*engine, i % 2 == 0 ? request : greedy("a b c d e f g", 30)));
  for (int i = 0; i < 6; ++i) {
    Outcome outcome = running[static_cast<std::size_t>(i)].get();
    if (i % 2 == 0) {
      EXPECT_EQ(outcome.tokens, expected) << i;
    }
  }
  EXPECT_EQ(engine->stats().requests, 7u);
}

TEST_F(EngineTest, StopStringsCutTheTextAndEndTheRequest) {
  auto engine = start();
  Outcome full = generate(*engine, greedy("once upon a time", 40)).get();
  ASSERT_GT(full.text.size(), 6u);
  std::string stop = full.text.substr(full.text.size() / 2, 3);
  GenerationRequest request = greedy("once upon a time", 40);
  request.stop = {stop};
  Outcome cut = generate(*engine, request).get();
  EXPECT_EQ(cut.result.reason, FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST_F(EngineTest, AnEndTokenStopsUnlessIgnored) {
  auto engine = start();
  GenerationRequest request = greedy("hello", 10);
  request.ignore_eos = false;
  request.sampling.logit_bias = {{loaded_.tokenizer.eos(), 100.0f}};
  Outcome ended = generate(*engine, request).get();
  EXPECT_EQ(ended.result.reason, FinishReason::kStop);
  EXPECT_EQ(ended.result.completion_tokens, 0u);
  request.ignore_eos = true;
  Outcome ignored = generate(*engine, request).get();
  EXPECT_EQ(ignored.result.reason, FinishReason::kLength);
  EXPECT_EQ(ignored.tokens, std::vector<std::int32_t>(10, loaded_.tokenizer.eos()));
}

TEST_F(EngineTest, ACallbackCancelsItsRequest) {
  auto engine = start();
  Outcome cancelled = generate(*engine, greedy("hello there", 100), 3).get();
  EXPECT_EQ(cancelled.result.reason, FinishReason::kCancelled);
  EXPECT_EQ(cancelled.tokens.size(), 3u);
}

TEST_F(EngineTest, TheSameSeedGivesTheSameTextAcrossEngines) {
  GenerationRequest request = greedy("the weather today", 30);
  request.sampling.temperature = 1.0f;
  request.sampling.seed = 1234;
  auto first = start(), second = start();
  EXPECT_EQ(generate(*first, request).get().tokens, generate(*second, request).get().tokens);
  request.sampling.seed = 99;
  EXPECT_NE(generate(*first, request).get().tokens, generate(*second, greedy("the weather today", 30)).get().tokens);
}

TEST_F(EngineTest, RefusesWhatCannotRunAndBoundsItsQueue) {
  EngineOptions options;
  options.parallel = 1;
  options.max_waiting = 1;
  options.context = 64;
  auto engine = start(options);
  GenerationRequest empty;
  EXPECT_EQ(engine->submit(empty).code(), StatusCode::kInvalidArgument);
  GenerationRequest outside = greedy("x", 1);
  outside.prompt = {1, 100000};
  EXPECT_EQ(engine->submit(outside).code(), StatusCode::kInvalidArgument);
  GenerationRequest too_long = greedy("x", 1);
  too_long.prompt.assign(64, 5);
  EXPECT_EQ(engine->submit(too_long).code(), StatusCode::kInvalidArgument);
  GenerationRequest bad_sampling = greedy("x", 1);
  bad_sampling.sampling.top_p = 0;
  EXPECT_EQ(engine->submit(bad_sampling).code(), StatusCode::kInvalidArgument);
  // One runs, one waits, the next is refused (the first holds its sequence for many steps).
  std::vector<std::future<Outcome>> accepted;
  Status refused;
  for (int i = 0; i < 4 && refused.ok(); ++i) {
    GenerationRequest request = greedy("hello", 60);
    auto promise = std::make_shared<std::promise<Outcome>>();
    request.on_finish = [promise](const GenerationResult& result) { promise->set_value({{}, {}, result}); };
    refused = engine->submit(std::move(request));
    if (refused.ok()) accepted.push_back(promise->get_future());
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  for (auto& outcome : accepted) EXPECT_NE(outcome.get().result.reason, FinishReason::kError);
}

TEST_F(EngineTest, StoppingCancelsWhatRunsAndWaits) {
  EngineOptions options;
  options.parallel = 1;
  std::future<Outcome> running, waiting;
  {
    auto engine = start(options);
    running = generate(*engine, greedy("hello", 400));
    waiting = generate(*engine, greedy("world", 400));
  }
  EXPECT_EQ(running.get().result.reason, FinishReason::kCancelled);
  EXPECT_EQ(waiting.get().result.reason, FinishReason::kCancelled);
}

TEST_F(EngineTest, CancelAllAnswersEveryRequestWithTheReasonAndTheEngineGoesOn) {
  EngineOptions options;
  options.parallel = 1;
  auto engine = start(options);
  std::future<Outcome> running = generate(*engine, greedy("hello", 400)),
                       waiting = generate(*engine, greedy("world", 400));
  engine->cancel_all("draining");
  for (auto* outcome : {&running, &waiting}) {
    GenerationResult result = outcome->get().result;
    EXPECT_EQ(result.reason, FinishReason::kCancelled);
    EXPECT_EQ(result.error, "draining");
  }
  EXPECT_EQ(generate(*engine, greedy("again", 3)).get().result.reason, FinishReason::kLength);
  engine->shutdown();
  EXPECT_EQ(engine->submit(greedy("late", 3)).code(), StatusCode::kUnavailable);
}

TEST_F(EngineTest, ARequestWhoseClientLeftIsNotRun) {
  EngineOptions options;
  options.parallel = 1;
  auto engine = start(options);
  GenerationRequest request = greedy("hello", 50);
  request.cancelled = [] { return true; };
  Outcome outcome = generate(*engine, request).get();
  EXPECT_EQ(outcome.result.reason, FinishReason::kCancelled);
  EXPECT_TRUE(outcome.tokens.empty());
  EXPECT_EQ(engine->stats().generated_tokens, 0u);
}

TEST_F(EngineTest, ChoicesAreQueuedAllOrNone) {
  EngineOptions options;
  options.parallel = 1;
  options.max_waiting = 3;
  auto engine = start(options);
  std::vector<GenerationRequest> four(4, greedy("hello", 2));
  EXPECT_EQ(engine->submit(std::move(four)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->stats().waiting, 0u);
  std::vector<GenerationRequest> three(3, greedy("hello", 2));
  EXPECT_TRUE(engine->submit(std::move(three)).ok());
}

TEST_F(EngineTest, ACacheLargerThanAllowedIsRefusedByName) {
  EngineOptions options;
  options.parallel = 64;
  options.max_cache_bytes = 1 << 20;
  auto engine = Engine::start(loaded_.model, loaded_.tokenizer, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(engine.status().message().find("--ctx"), std::string::npos) << engine.status().message();
}

TEST_F(EngineTest, MetricsCountTokensAndLatencies) {
  auto engine = start();
  generate(*engine, greedy("hello", 5)).get();
  std::string text = engine->metrics_text("tiny");
  EXPECT_NE(text.find("slipway_llm_generation_tokens_total{model=\"tiny\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("slipway_llm_time_to_first_token_seconds_count{model=\"tiny\"} 1"), std::string::npos);
  EXPECT_NE(text.find("slipway_llm_inter_token_latency_seconds_count{model=\"tiny\"} 4"), std::string::npos);
  EXPECT_NE(text.find("slipway_llm_requests_finished_total{model=\"tiny\",reason=\"length\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace slipway::llm
