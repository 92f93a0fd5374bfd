// Tensor parallelism: a pass split over ranks (thread groups) against the unsplit pass, for every
// weight type, both KV cache types and uneven splits; the shards' shapes; the splits the shapes
// forbid; and the engine's greedy tokens on two ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <future>
#include <stdexcept>

#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

std::shared_ptr<const LlamaModel> make_model(const testing::TempDir& dir, const TestModelShape& shape, TensorType type,
                                             const std::string& name = "model.gguf") {
  EXPECT_TRUE(write_test_model(shape, type, 11, dir.file(name)).ok());
  auto model = LlamaModel::open(dir.file(name));
  EXPECT_TRUE(model.ok()) << model.status().message();
  return *model;
}

// Two sequences: a 20-token prompt, then a decode step of the first beside a 3-token chunk of the
// second's continuation (mixed positions, as the engine batches them). Every token's logits.
template <typename Pass>
std::vector<float> run_steps(const LlamaConfig& config, KvCacheType type, const Pass& pass) {
  KvCache cache(config, 16, 4, type);
  std::vector<BatchToken> prompt;
  for (std::size_t position = 0; position < 20; ++position) {
    prompt.push_back({0, position, static_cast<std::int32_t>((position * 37 + 5) % config.vocabulary)});
    prompt.push_back({1, position, static_cast<std::int32_t>((position * 11 + 3) % config.vocabulary)});
  }
  std::vector<float> all, logits;
  EXPECT_TRUE(pass(cache, prompt, std::vector<bool>(prompt.size(), true), logits).ok());
  all = logits;
  const std::vector<BatchToken> step = {{0, 20, 7}, {1, 20, 8}, {1, 21, 9}, {1, 22, 10}};
  EXPECT_TRUE(pass(cache, step, std::vector<bool>(step.size(), true), logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

struct Comparison {
  double largest = 0, max_difference = 0, rms_difference = 0, rms = 0;
  std::size_t rows = 0, same_top = 0;
};

Comparison compare(const std::vector<float>& exact, const std::vector<float>& split, std::size_t vocabulary) {
  Comparison result;
  EXPECT_EQ(exact.size(), split.size());
  double squares = 0, exact_squares = 0;
  for (std::size_t i = 0; i < std::min(exact.size(), split.size()); ++i) {
    const double gap = static_cast<double>(exact[i]) - split[i];
    result.largest = std::max(result.largest, std::fabs(static_cast<double>(exact[i])));
    result.max_difference = std::max(result.max_difference, std::fabs(gap));
    squares += gap * gap;
    exact_squares += static_cast<double>(exact[i]) * exact[i];
  }
  result.rms_difference = std::sqrt(squares / static_cast<double>(exact.size()));
  result.rms = std::sqrt(exact_squares / static_cast<double>(exact.size()));
  result.rows = exact.size() / vocabulary;
  for (std::size_t row = 0; row < result.rows; ++row) {
    auto a = exact.begin() + static_cast<std::ptrdiff_t>(row * vocabulary);
    auto b = split.begin() + static_cast<std::ptrdiff_t>(row * vocabulary);
    const auto span = static_cast<std::ptrdiff_t>(vocabulary);
    result.same_top += std::max_element(a, a + span) - a == std::max_element(b, b + span) - b ? 1 : 0;
  }
  return result;
}

Comparison split_against_whole(const std::shared_ptr<const LlamaModel>& model, std::size_t ranks, KvCacheType type,
                               int threads = 0) {
  auto split = TensorParallelModel::split(model, ranks);
  EXPECT_TRUE(split.ok()) << split.status().message();
  ThreadTeam team(1);
  RankTeams teams(ranks, threads == 0 ? static_cast<int>(ranks) : threads);
  const std::vector<float> exact =
      run_steps(model->config(), type,
                [&](KvCache& cache, std::span<const BatchToken> batch, const std::vector<bool>& wants,
                    std::vector<float>& logits) { return forward(*model, cache, batch, wants, logits, team); });
  const std::vector<float> parallel =
      run_steps(model->config(), type,
                [&](KvCache& cache, std::span<const BatchToken> batch, const std::vector<bool>& wants,
                    std::vector<float>& logits) { return forward(**split, cache, batch, wants, logits, teams); });
  return compare(exact, parallel, model->config().vocabulary);
}

TEST(TensorParallel, FloatWeightsGiveTheUnsplitLogitsToRounding) {
  testing::TempDir dir;
  TestModelShape shape;  // 4 heads over 2 key/value heads, 192 hidden units
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    SCOPED_TRACE(tensor_type_info(type)->name);
    auto model = make_model(dir, shape, type);
    for (KvCacheType cache : {KvCacheType::kF32, KvCacheType::kInt8, KvCacheType::kFp8E4M3}) {
      Comparison result = split_against_whole(model, 2, cache);
      ASSERT_GT(result.largest, 0.1);
      EXPECT_LE(result.max_difference, 1e-4 * result.largest) << kv_cache_type_name(cache);
      EXPECT_EQ(result.same_top, result.rows);
    }
  }
}

TEST(TensorParallel, UnevenSplitsAndMoreThreadsPerRankChangeNothingButRounding) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.heads = 6;  // six key/value heads over 4 ranks: 1, 2, 1, 2; 200 hidden units: 50 each
  shape.kv_heads = 6;
  shape.embedding = 96;
  shape.feed_forward = 200;
  shape.tied_output = true;
  auto model = make_model(dir, shape, TensorType::kF32);
  for (std::size_t ranks : {3u, 4u, 6u}) {
    Comparison result = split_against_whole(model, ranks, KvCacheType::kF32, 2 * static_cast<int>(ranks));
    EXPECT_LE(result.max_difference, 1e-4 * result.largest) << ranks;
    EXPECT_EQ(result.same_top, result.rows) << ranks;
  }
}

// Int8 activations: a rounding difference in the residual can flip one activation's int8 rounding,
// so the split differs from the unsplit pass by about the quantization's own noise, not more. A
// wrong head, unit or vocabulary slice would differ by the logits' whole size.
TEST(TensorParallel, QuantizedWeightsStayWithinTheActivationQuantizationNoise) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.embedding = 512;  // 8 heads of 64 over 4 key/value heads: Q4_K's 256 columns are 2 of them
  shape.heads = 8;
  shape.kv_heads = 4;
  shape.feed_forward = 512;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K}) {
    SCOPED_TRACE(tensor_type_info(type)->name);
    auto model = make_model(dir, shape, type);
    Comparison result = split_against_whole(model, 2, KvCacheType::kF32);
    EXPECT_LE(result.rms_difference, 0.05 * result.rms);
    EXPECT_GE(result.same_top, result.rows * 9 / 10);
  }
}

TEST(TensorParallel, ShardsCoverTheModelAndOneRankSharesItsMatrices) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.feed_forward = 192;
  auto model = make_model(dir, shape, TensorType::kQ8_0);
  auto whole = *TensorParallelModel::split(model, 1);
  ASSERT_EQ(whole->ranks().size(), 1u);
  EXPECT_EQ(whole->shard_bytes(), 0u);
  EXPECT_EQ(whole->ranks()[0].layers[0].down.packed, model->layers()[0].down.packed);
  auto split = *TensorParallelModel::split(model, 2);
  ASSERT_EQ(split->ranks().size(), 2u);
  const LlamaConfig& config = model->config();
  std::size_t heads = 0, hidden = 0, vocabulary = 0;
  for (const auto& rank : split->ranks()) {
    EXPECT_EQ(rank.heads.first, heads);
    EXPECT_EQ(rank.hidden.first, hidden);
    EXPECT_EQ(rank.vocabulary.first, vocabulary);
    heads += rank.heads.count;
    hidden += rank.hidden.count;
    vocabulary += rank.vocabulary.count;
    const TensorParallelModel::Layer& layer = rank.layers[1];
    EXPECT_EQ(layer.query.rows, rank.heads.count * config.head_dim);
    EXPECT_EQ(layer.key.rows, rank.kv_heads.count * config.head_dim);
    EXPECT_EQ(layer.attention_output.rows, config.embedding);
    EXPECT_EQ(layer.attention_output.columns, rank.heads.count * config.head_dim);
    EXPECT_EQ(layer.gate.rows, rank.hidden.count);
    EXPECT_EQ(layer.down.columns, rank.hidden.count);
    EXPECT_EQ(rank.output.rows, rank.vocabulary.count);
  }
  EXPECT_EQ(heads, config.heads);
  EXPECT_EQ(hidden, config.feed_forward);
  EXPECT_EQ(vocabulary, config.vocabulary);
  EXPECT_GT(split->shard_bytes(), 0u);
}

TEST(TensorParallel, RefusesSplitsTheShapesForbid) {
  testing::TempDir dir;
  TestModelShape shape;  // 2 key/value heads
  auto model = make_model(dir, shape, TensorType::kF32);
  EXPECT_EQ(TensorParallelModel::split(model, 0).status().code(), StatusCode::kInvalidArgument);
  auto three = TensorParallelModel::split(model, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("at most 2 rank(s)"), std::string::npos) << three.status().message();
  // Q4_K's super-block is 256 columns: 4 heads of 64 over 2 key/value heads are one unit.
  TestModelShape wide;
  wide.embedding = 256;
  wide.feed_forward = 512;
  auto q4_k = make_model(dir, wide, TensorType::kQ4_K, "q4_k.gguf");
  auto refused = TensorParallelModel::split(q4_k, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("256 columns"), std::string::npos) << refused.status().message();
  // A pass on teams of another rank count.
  auto split = *TensorParallelModel::split(model, 2);
  RankTeams three_teams(3, 3);
  KvCache cache(model->config(), 4, 1);
  std::vector<float> logits;
  const std::vector<BatchToken> batch = {{0, 0, 1}};
  EXPECT_EQ(forward(*split, cache, batch, {true}, logits, three_teams).code(), StatusCode::kInvalidArgument);
}

TEST(RankTeams, ARankThatThrowsReleasesTheOthersAndTheNextRunWorks) {
  RankTeams teams(3, 3);
  std::atomic<int> after_barrier{0};
  auto failing = [&](std::size_t rank) {
    if (rank == 1) throw std::runtime_error("rank 1 fails");
    // The others wait for rank 1 at a barrier it never reaches: they must be let go.
    if (teams.synchronize()) after_barrier.fetch_add(1);
  };
  EXPECT_THROW(teams.run(failing), std::runtime_error);
  EXPECT_EQ(after_barrier.load(), 0);
  std::atomic<int> passed{0};
  teams.run([&](std::size_t) {
    for (int round = 0; round < 100; ++round) {
      if (teams.synchronize()) passed.fetch_add(1);
    }
  });
  EXPECT_EQ(passed.load(), 300);
}

TEST(TensorParallel, TheEngineOnTwoRanksGivesTheSameGreedyTokens) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.context = 512;
  ASSERT_TRUE(write_test_model(shape, TensorType::kF32, 5, dir.file("m.gguf")).ok());
  auto file = *GgufFile::open(dir.file("m.gguf"));
  auto tokenizer = *Tokenizer::from_gguf(file);
  auto model = *LlamaModel::from_file(std::move(file));
  auto tokens_with = [&](std::size_t ranks) {
    EngineOptions options;
    options.tensor_parallel = ranks;
    options.threads = 2;
    options.max_sequences = 4;
    auto engine = Engine::start(model, tokenizer, options);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    std::vector<std::vector<std::int32_t>> outputs(6);
    std::vector<std::promise<void>> done(outputs.size());
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      GenerationRequest request;
      request.prompt = tokenizer.encode(i % 2 == 0 ? "the quick brown fox" : "a b c d e f g h");
      request.max_tokens = 20 + i;
      request.sampling.temperature = 0;
      request.ignore_eos = true;
      request.on_token = [&outputs, i](const GenerationEvent& event) {
        outputs[i].push_back(event.sampled.chosen.token);
        return true;
      };
      request.on_finish = [&done, i](const GenerationResult&) { done[i].set_value(); };
      EXPECT_TRUE((*engine)->submit(std::move(request)).ok());
    }
    for (auto& finished : done) finished.get_future().wait();
    return outputs;
  };
  EXPECT_EQ(tokens_with(2), tokens_with(1));
  EngineOptions too_many;
  too_many.tensor_parallel = 3;
  too_many.threads = 2;
  EXPECT_EQ(Engine::start(model, tokenizer, too_many).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace slipway::llm
