// The generation engine: its tokens against a plain greedy loop over forward(), alone and beside
// other sequences; stop strings, lengths, end tokens, cancellation, seeds, and its refusals.
#include <gtest/gtest.h>

#include <atomic>
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
  // A draft model of the test shape with a 512-token context, written once per type and seed
  // (seed 5 gives the target's weights); null, with a failure, when it cannot be.
  std::shared_ptr<const LlamaModel> draft_model(TensorType type, std::uint64_t seed) {
    const std::string path =
        dir_.file("draft_" + std::to_string(static_cast<int>(type)) + "_" + std::to_string(seed) + ".gguf");
    TestModelShape shape;
    shape.context = 512;
    EXPECT_TRUE(write_test_model(shape, type, seed, path).ok());
    auto draft = LlamaModel::open(path);
    EXPECT_TRUE(draft.ok()) << draft.status().message();
    return draft.ok() ? *draft : nullptr;
  }
  std::unique_ptr<Engine> start(const EngineOptions& options = {}) {
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
  options.max_sequences = 1;
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
  options.max_sequences = 1;
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
  options.max_sequences = 1;
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
  options.max_sequences = 1;
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
  options.max_sequences = 1;
  options.max_waiting = 3;
  auto engine = start(options);
  std::vector<GenerationRequest> four(4, greedy("hello", 2));
  EXPECT_EQ(engine->submit(std::move(four)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->stats().waiting, 0u);
  std::vector<GenerationRequest> three(3, greedy("hello", 2));
  EXPECT_TRUE(engine->submit(std::move(three)).ok());
}

TEST_F(EngineTest, ACacheBudgetTooSmallForOneSequenceIsRefusedWithTheNumbers) {
  EngineOptions options;
  options.context = 512;
  options.kv_cache_bytes = KvCache::block_bytes(loaded_.model->config()) * 31;  // 32 blocks needed
  auto engine = Engine::start(loaded_.model, loaded_.tokenizer, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kResourceExhausted);
  const std::string& message = engine.status().message();
  EXPECT_NE(message.find("holds 31 blocks"), std::string::npos) << message;
  EXPECT_NE(message.find("needs 32 blocks"), std::string::npos) << message;
  EXPECT_NE(message.find("weights take"), std::string::npos) << message;
  EXPECT_NE(message.find("--kv-cache-mb"), std::string::npos) << message;
  options.kv_cache_bytes += KvCache::block_bytes(loaded_.model->config());
  EXPECT_TRUE(Engine::start(loaded_.model, loaded_.tokenizer, options).ok());
  options.max_batched_tokens = options.max_sequences - 1;
  EXPECT_EQ(Engine::start(loaded_.model, loaded_.tokenizer, options).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, ACacheBudgetBeyondTheMemoryAvailableIsRefusedBeforeItIsCommitted) {
  EngineOptions options;
  options.kv_cache_bytes = std::uint64_t{1} << 50;  // a pebibyte: no machine here has it
  auto engine = Engine::start(loaded_.model, loaded_.tokenizer, options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(engine.status().message().find("memory available now"), std::string::npos) << engine.status().message();
  EXPECT_NE(engine.status().message().find("--kv-cache-mb"), std::string::npos) << engine.status().message();
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

// Every scheduling technique changes when a token is computed, never its bits: the greedy tokens
// equal a plain loop's.

std::vector<std::future<Outcome>> generate_all(Engine& engine, std::vector<GenerationRequest> requests) {
  std::vector<std::future<Outcome>> futures;
  for (auto& request : requests) {
    auto outcome = std::make_shared<Outcome>();
    auto promise = std::make_shared<std::promise<Outcome>>();
    request.on_token = [outcome](const GenerationEvent& event) {
      outcome->tokens.push_back(event.sampled.chosen.token);
      return true;
    };
    request.on_finish = [outcome, promise](const GenerationResult& result) {
      outcome->result = result;
      promise->set_value(*outcome);
    };
    futures.push_back(promise->get_future());
  }
  Status status = engine.submit(std::move(requests));
  EXPECT_TRUE(status.ok()) << status.message();
  return futures;
}

// `count` different prompts, of 10 words and more.
std::vector<std::vector<std::int32_t>> varied_prompts(const Tokenizer& tokenizer, std::size_t count) {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far", "away", "home"};
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::size_t i = 0; i < count; ++i) {
    std::string text;
    for (std::size_t w = 0; w < 10 + 2 * i; ++w) text += std::string(words[(w * (i + 3)) % 12]) + " ";
    prompts.push_back(tokenizer.encode(text));
  }
  return prompts;
}

TEST_F(EngineTest, AFloodLargerThanThePoolCompletesUnchangedThroughChunksAndPreemption) {
  const auto prompts = varied_prompts(loaded_.tokenizer, 10);
  std::vector<std::vector<std::int32_t>> expected;
  expected.reserve(prompts.size());
  for (const auto& prompt : prompts) expected.push_back(plain_greedy(*loaded_.model, prompt, 40));
  struct Setting {
    bool prefix_caching;
    std::size_t max_batched_tokens;
  };
  for (Setting setting : {Setting{false, 512}, Setting{true, 8}}) {
    EngineOptions options;
    options.context = 160;  // 10 blocks a sequence, 12 in the pool: 8 sequences of 3-8 blocks cannot all fit
    options.max_sequences = 8;
    options.max_batched_tokens = setting.max_batched_tokens;
    options.prefix_caching = setting.prefix_caching;
    options.kv_cache_bytes = KvCache::block_bytes(loaded_.model->config()) * 12;
    auto engine = start(options);
    std::vector<GenerationRequest> requests;
    for (const auto& prompt : prompts) {
      GenerationRequest request = greedy("", 40);
      request.prompt = prompt;
      requests.push_back(std::move(request));
    }
    std::vector<std::future<Outcome>> futures;
    futures.reserve(requests.size());
    for (auto& request : requests) futures.push_back(generate(*engine, std::move(request)));
    for (std::size_t i = 0; i < futures.size(); ++i) {
      Outcome outcome = futures[i].get();
      EXPECT_EQ(outcome.result.reason, FinishReason::kLength) << outcome.result.error;
      EXPECT_EQ(outcome.tokens, expected[i]) << i << " with prefix caching " << setting.prefix_caching;
    }
    EngineStats stats = engine->stats();
    EXPECT_GT(stats.preemptions, 0u);
    EXPECT_EQ(stats.requests, prompts.size());
    std::string metrics = engine->metrics_text("m");
    EXPECT_NE(metrics.find("slipway_llm_preemptions_total{model=\"m\"} " + std::to_string(stats.preemptions)),
              std::string::npos);
  }
}

TEST_F(EngineTest, PrefixCachingReusesASharedPromptWithinATenantAndChangesNoToken) {
  auto engine = start();
  std::vector<std::int32_t> system = loaded_.tokenizer.encode(
      "You are a helpful assistant who answers briefly and kindly, and who never makes things up. Answer the "
      "question about the story of the cat who sat on the mat and then ran far away from home.");
  ASSERT_GT(system.size(), 40u);
  auto with = [&](std::string_view question, std::uint64_t salt) {
    GenerationRequest request = greedy("", 12);
    request.prompt = system;
    auto tail = loaded_.tokenizer.encode(question, false);
    request.prompt.insert(request.prompt.end(), tail.begin(), tail.end());
    request.cache_salt = salt;
    return request;
  };
  const std::size_t shared = system.size() / kKvBlockTokens * kKvBlockTokens;
  GenerationRequest first = with(" where did the cat go?", 1), second = with(" who sat on the mat?", 1);
  EXPECT_EQ(generate(*engine, first).get().tokens, plain_greedy(*loaded_.model, first.prompt, 12));
  EXPECT_EQ(engine->stats().cached_prompt_tokens, 0u);
  EXPECT_EQ(generate(*engine, second).get().tokens, plain_greedy(*loaded_.model, second.prompt, 12));
  EngineStats stats = engine->stats();
  EXPECT_EQ(stats.cached_prompt_tokens, shared);
  EXPECT_EQ(stats.prefix_hits, 1u);
  EXPECT_EQ(stats.prefix_misses, 1u);
  // Another tenant's request computes everything itself.
  GenerationRequest other = with(" who sat on the mat?", 2);
  EXPECT_EQ(generate(*engine, other).get().tokens, plain_greedy(*loaded_.model, other.prompt, 12));
  EXPECT_EQ(engine->stats().cached_prompt_tokens, shared);
  // The same request again reuses all its whole blocks but the one holding its last token.
  EXPECT_EQ(generate(*engine, second).get().tokens, plain_greedy(*loaded_.model, second.prompt, 12));
  EXPECT_EQ(engine->stats().cached_prompt_tokens,
            shared + (second.prompt.size() - 1) / kKvBlockTokens * kKvBlockTokens);
  std::string metrics = engine->metrics_text("m");
  EXPECT_NE(metrics.find("slipway_llm_prefix_cache_hits_total{model=\"m\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("slipway_llm_prefix_cache_misses_total{model=\"m\"} 2"), std::string::npos) << metrics;
}

TEST_F(EngineTest, ChoicesOfOnePromptForkItsBlocksAndSampleAsAlone) {
  auto engine = start();
  GenerationRequest request = greedy("the quick brown fox jumps over the lazy dog and the cat", 20);
  const std::vector<std::int32_t> expected = plain_greedy(*loaded_.model, request.prompt, 20);
  for (auto& future : generate_all(*engine, std::vector<GenerationRequest>(3, request))) {
    EXPECT_EQ(future.get().tokens, expected);
  }
  EXPECT_EQ(engine->stats().forks, 2u);
  // Sampled choices with their own seeds: each as it would be alone.
  std::vector<GenerationRequest> sampled(3, request);
  for (std::size_t i = 0; i < sampled.size(); ++i) {
    sampled[i].sampling.temperature = 1.0f;
    sampled[i].sampling.seed = 10 + i;
  }
  std::vector<std::vector<std::int32_t>> alone;
  alone.reserve(sampled.size());
  for (const auto& choice : sampled) alone.push_back(generate(*engine, choice).get().tokens);
  auto futures = generate_all(*engine, sampled);
  for (std::size_t i = 0; i < futures.size(); ++i) EXPECT_EQ(futures[i].get().tokens, alone[i]) << i;
  EXPECT_EQ(engine->stats().forks, 4u);
  EXPECT_NE(alone[0], alone[1]);
}

TEST_F(EngineTest, ACancelledRequestFreesItsBlocksAtOnce) {
  EngineOptions options;
  options.prefix_caching = false;
  auto engine = start(options);
  auto gone = std::make_shared<std::atomic<bool>>(false);
  GenerationRequest request = greedy("hello there", 400);
  request.cancelled = [gone] { return gone->load(); };
  auto tokens = std::make_shared<std::promise<void>>();
  request.on_token = [tokens, count = 0](const GenerationEvent&) mutable {
    if (++count == 40) tokens->set_value();
    return true;
  };
  auto finished = std::make_shared<std::promise<FinishReason>>();
  request.on_finish = [finished](const GenerationResult& result) { finished->set_value(result.reason); };
  ASSERT_TRUE(engine->submit(std::move(request)).ok());
  tokens->get_future().wait();
  EXPECT_GE(engine->stats().kv_blocks_used, 3u);
  gone->store(true);
  EXPECT_EQ(finished->get_future().get(), FinishReason::kCancelled);
  for (int i = 0; i < 200 && engine->stats().kv_blocks_used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine->stats().kv_blocks_used, 0u);
}

TEST_F(EngineTest, SpeculativeGreedyOutputIsPlainGreedyWithNgramsAndADraftModel) {
  // The same weights quantized harder as the draft: it mostly agrees.
  const auto draft = draft_model(TensorType::kQ4_0, 5);
  ASSERT_NE(draft, nullptr);
  const auto prompts = varied_prompts(loaded_.tokenizer, 4);
  std::vector<std::vector<std::int32_t>> expected;
  expected.reserve(prompts.size());
  for (const auto& prompt : prompts) expected.push_back(plain_greedy(*loaded_.model, prompt, 60));
  for (SpeculativeMethod method : {SpeculativeMethod::kNgram, SpeculativeMethod::kDraft}) {
    EngineOptions options;
    options.speculative.method = method;
    options.speculative.draft = draft;
    options.speculative.lookup_min = 1;
    // Passes of at most 8 tokens: the draft catches up on the four prompts in several.
    options.max_sequences = 4;
    options.max_batched_tokens = 8;
    auto engine = start(options);
    std::vector<std::future<Outcome>> futures;
    for (const auto& prompt : prompts) {
      GenerationRequest request = greedy("", 60);
      request.prompt = prompt;
      futures.push_back(generate(*engine, std::move(request)));
    }
    for (std::size_t i = 0; i < futures.size(); ++i) {
      EXPECT_EQ(futures[i].get().tokens, expected[i]) << i << " method " << static_cast<int>(method);
    }
    EngineStats stats = engine->stats();
    EXPECT_GT(stats.draft_tokens, 0u);
    EXPECT_GT(stats.accepted_tokens, 0u);
    EXPECT_LE(stats.accepted_tokens, stats.draft_tokens);
    EXPECT_EQ(stats.generated_tokens, 240u);
    EXPECT_NE(engine->metrics_text("m").find("slipway_llm_spec_decode_acceptance_ratio{model=\"m\"} "),
              std::string::npos);
    // Sampled speculation runs to the end too (its distribution is the rule's, tested alone).
    GenerationRequest sampled = greedy("once upon a time", 40);
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.seed = 3;
    Outcome outcome = generate(*engine, sampled).get();
    EXPECT_EQ(outcome.result.reason, FinishReason::kLength);
    EXPECT_EQ(outcome.tokens.size(), 40u);
  }
}

TEST_F(EngineTest, ADraftThatKeepsMissingProposesOneTokenAtATimeAndTheOutputStaysPlainGreedy) {
  // Other weights: the draft's tokens are almost never the target's.
  const auto draft = draft_model(TensorType::kQ8_0, 77);
  ASSERT_NE(draft, nullptr);
  EngineOptions options;
  options.speculative.method = SpeculativeMethod::kDraft;
  options.speculative.draft = draft;
  options.speculative.tokens = 6;
  auto engine = start(options);
  const auto prompt = varied_prompts(loaded_.tokenizer, 1).front();
  GenerationRequest request = greedy("", 80);
  request.prompt = prompt;
  EXPECT_EQ(generate(*engine, std::move(request)).get().tokens, plain_greedy(*loaded_.model, prompt, 80));
  const EngineStats stats = engine->stats();
  ASSERT_GT(stats.speculative_checks, 20u);
  EXPECT_LT(stats.accepted_tokens * 4, stats.draft_tokens);
  // Six at first, one fewer per miss down to one, two more after a proposal taken whole.
  EXPECT_LT(static_cast<double>(stats.draft_tokens) / static_cast<double>(stats.speculative_checks), 2.0)
      << stats.draft_tokens << " tokens over " << stats.speculative_checks << " checks";
}

// A leader whose prompt ends in a chunk of its own looks like a decoding sequence the step after:
// it must fork its followers before it proposes anything.
TEST_F(EngineTest, ChoicesForkAtThePromptsEndWhenTheLeaderSpeculates) {
  const auto draft = draft_model(TensorType::kQ4_0, 5);
  ASSERT_NE(draft, nullptr);
  EngineOptions options;
  options.max_sequences = 4;
  options.max_batched_tokens = 8;  // the prompt runs in chunks of 8
  options.speculative.method = SpeculativeMethod::kDraft;
  options.speculative.draft = draft;
  auto engine = start(options);
  GenerationRequest request = greedy("", 30);
  request.prompt = varied_prompts(loaded_.tokenizer, 3).back();
  ASSERT_EQ(request.prompt.size() % 8, 1u) << "the prompt should end one token into a chunk";
  const std::vector<std::int32_t> expected = plain_greedy(*loaded_.model, request.prompt, 30);
  for (auto& future : generate_all(*engine, std::vector<GenerationRequest>(3, request))) {
    EXPECT_EQ(future.get().tokens, expected);
  }
  EXPECT_EQ(engine->stats().forks, 2u);
}

TEST_F(EngineTest, SpeculativeOptionsAreChecked) {
  EngineOptions options;
  options.speculative.method = SpeculativeMethod::kDraft;
  EXPECT_EQ(Engine::start(loaded_.model, loaded_.tokenizer, options).status().code(), StatusCode::kInvalidArgument);
  const std::string other = dir_.file("other.gguf");
  TestModelShape shape;
  shape.vocabulary = 1024;
  ASSERT_TRUE(write_test_model(shape, TensorType::kQ8_0, 5, other).ok());
  options.speculative.draft = *LlamaModel::open(other);
  auto refused = Engine::start(loaded_.model, loaded_.tokenizer, options);
  EXPECT_NE(refused.status().message().find("vocabulary"), std::string::npos) << refused.status().message();
  options.speculative.method = SpeculativeMethod::kNgram;
  options.speculative.tokens = 0;
  EXPECT_EQ(Engine::start(loaded_.model, loaded_.tokenizer, options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slipway::llm
