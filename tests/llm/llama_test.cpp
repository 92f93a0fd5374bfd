// The Llama forward pass against an independent numpy one (tests/llm/llama_reference.py) on
// random-weight models of every weight type, and the properties a server relies on: decoding
// step by step gives the prompt's logits, thread counts and batch neighbours change nothing, and
// bad models and inputs are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "llm/llama_cpp_peer.h"
#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

constexpr std::array<std::int32_t, 8> kPrompt = {1, 300, 301, 17, 450, 299, 3, 511};
std::vector<std::int32_t> prompt() { return {kPrompt.begin(), kPrompt.end()}; }

std::vector<std::vector<double>> reference_logits(const std::string& model, const std::vector<std::int32_t>& tokens) {
  std::string list;
  for (auto token : tokens) list += (list.empty() ? "" : ",") + std::to_string(token);
  auto run = testing::run_command(
      {"/usr/bin/python3", slipway::testing::source_dir() + "/tests/llm/llama_reference.py", model, list});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::vector<double>> rows;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream numbers(line);
    rows.emplace_back();
    for (double value = 0; numbers >> value;) rows.back().push_back(value);
  }
  return rows;
}

// Tokens as one batch of `sequence`, from position 0.
std::vector<BatchToken> prompt_batch(const std::vector<std::int32_t>& tokens, std::size_t sequence = 0) {
  std::vector<BatchToken> batch;
  for (std::size_t position = 0; position < tokens.size(); ++position) {
    batch.push_back({sequence, position, tokens[position]});
  }
  return batch;
}

// Every position's logits for a prompt run as one batch, over a float cache (the numpy
// reference keeps its keys and values as floats).
std::vector<float> prompt_logits(const LlamaModel& model, const std::vector<std::int32_t>& tokens, int threads) {
  KvCache cache(model.config(), 64, 4096, KvCacheType::kF32);
  std::vector<BatchToken> batch = prompt_batch(tokens);
  std::vector<float> logits;
  EXPECT_TRUE(forward(model, cache, batch, std::vector<bool>(tokens.size(), true), logits, threads).ok());
  return logits;
}

struct TypeCase {
  TensorType type;
  TestModelShape shape;
};

TEST(LlamaForward, AgreesWithTheNumpyReferenceForEveryWeightType) {
  TestModelShape small;
  small.embedding = 64;
  small.feed_forward = 192;
  TestModelShape tied = small;
  tied.tied_output = true;
  tied.kv_heads = 4;    // plain multi-head attention
  TestModelShape wide;  // Q4_K stores rows in blocks of 256
  wide.embedding = 256;
  wide.feed_forward = 512;
  wide.layers = 1;
  for (const auto& [type, shape] :
       {TypeCase{TensorType::kF32, small}, TypeCase{TensorType::kF32, tied}, TypeCase{TensorType::kF16, small},
        TypeCase{TensorType::kBF16, small}, TypeCase{TensorType::kQ8_0, small}, TypeCase{TensorType::kQ4_0, small},
        TypeCase{TensorType::kQ4_K, wide}}) {
    SCOPED_TRACE(std::string(tensor_type_info(type)->name) + (shape.tied_output ? " tied" : ""));
    testing::TempDir dir;
    std::string path = dir.file("model.gguf");
    ASSERT_TRUE(write_test_model(shape, type, 42, path).ok());
    auto model = LlamaModel::open(path);
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->config().vocabulary, shape.vocabulary);
    std::vector<float> logits = prompt_logits(**model, prompt(), 2);
    auto expected = reference_logits(path, prompt());
    ASSERT_EQ(expected.size(), kPrompt.size());
    double largest = 0;
    for (const auto& row : expected) {
      for (double value : row) largest = std::max(largest, std::abs(value));
    }
    ASSERT_GT(largest, 0.1);
    for (std::size_t position = 0; position < kPrompt.size(); ++position) {
      ASSERT_EQ(expected[position].size(), shape.vocabulary);
      for (std::size_t token = 0; token < shape.vocabulary; ++token) {
        ASSERT_NEAR(logits[position * shape.vocabulary + token], expected[position][token], 1e-4 * largest)
            << "position " << position << " token " << token;
      }
    }
  }
}

TEST(LlamaForward, DecodingStepByStepThreadsAndBatchNeighboursChangeNothing) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.feed_forward = 192;
  ASSERT_TRUE(write_test_model(shape, TensorType::kQ8_0, 7, dir.file("m.gguf")).ok());
  auto model = *LlamaModel::open(dir.file("m.gguf"));
  const std::size_t vocabulary = shape.vocabulary;
  std::vector<float> whole = prompt_logits(*model, prompt(), 1);
  EXPECT_EQ(prompt_logits(*model, prompt(), 2), whole);
  // The prompt less its last token, then the last token alone (a decode step).
  KvCache cache(model->config(), 64, 4096, KvCacheType::kF32);
  std::vector<std::int32_t> all_but_last = prompt();
  all_but_last.pop_back();
  std::vector<BatchToken> prefix = prompt_batch(all_but_last, 3);
  std::vector<float> logits;
  ASSERT_TRUE(forward(*model, cache, prefix, std::vector<bool>(prefix.size(), false), logits).ok());
  EXPECT_TRUE(logits.empty());
  BatchToken last{3, kPrompt.size() - 1, kPrompt.back()};
  // Beside it in the same batch: another sequence's first token.
  std::vector<BatchToken> step = {{9, 0, 5}, last};
  ASSERT_TRUE(forward(*model, cache, step, {true, true}, logits).ok());
  ASSERT_EQ(logits.size(), 2 * vocabulary);
  std::vector<float> alone = prompt_logits(*model, {5}, 1);
  for (std::size_t token = 0; token < vocabulary; ++token) {
    // The same bits: a query's attention is the same arithmetic alone or in a prompt's tile.
    EXPECT_EQ(logits[vocabulary + token], whole[(kPrompt.size() - 1) * vocabulary + token]) << token;
    EXPECT_EQ(logits[token], alone[token]) << token;
  }
  // Released blocks go back to the pool.
  std::size_t free_before = cache.free_blocks();
  cache.release(3);
  EXPECT_EQ(cache.free_blocks(), free_before + 1);
}

TEST(LlamaForward, APromptInChunksGivesTheWholePromptsBits) {
  testing::TempDir dir;
  TestModelShape shape;
  ASSERT_TRUE(write_test_model(shape, TensorType::kQ4_0, 8, dir.file("m.gguf")).ok());
  auto model = *LlamaModel::open(dir.file("m.gguf"));
  std::vector<std::int32_t> tokens(37);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((i * 131 + 7) % shape.vocabulary);
  }
  const std::vector<float> whole = prompt_logits(*model, tokens, 2);
  // Chunks that start off the tiles of four and whose tiles straddle blocks of 16 positions.
  KvCache cache(model->config(), 64, 4096, KvCacheType::kF32);
  std::vector<BatchToken> batch = prompt_batch(tokens, 5);
  std::vector<float> logits;
  for (auto [first, end] : {std::pair<std::size_t, std::size_t>{0, 6}, {6, 15}, {15, 33}, {33, 37}}) {
    std::vector<BatchToken> chunk(batch.begin() + static_cast<std::ptrdiff_t>(first),
                                  batch.begin() + static_cast<std::ptrdiff_t>(end));
    ASSERT_TRUE(forward(*model, cache, chunk, std::vector<bool>(chunk.size(), true), logits, 1).ok());
    ASSERT_EQ(logits.size(), chunk.size() * shape.vocabulary);
    EXPECT_TRUE(
        std::equal(logits.begin(), logits.end(), whole.begin() + static_cast<std::ptrdiff_t>(first * shape.vocabulary)))
        << "tokens " << first << " to " << end;
  }
}

// Greedy tokens from the engine: the prompt as one batch, then one decode step per token.
std::vector<std::int32_t> greedy(const LlamaModel& model, std::vector<std::int32_t> tokens, std::size_t count) {
  KvCache cache(model.config(), 64, 4096, KvCacheType::kF32);
  std::vector<BatchToken> batch = prompt_batch(tokens);
  std::vector<std::int32_t> generated;
  std::vector<float> logits;
  while (generated.size() < count) {
    std::vector<bool> wants(batch.size(), false);
    wants.back() = true;
    EXPECT_TRUE(forward(model, cache, batch, wants, logits, 1).ok());
    auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(next);
    batch = {{0, tokens.size(), next}};
    tokens.push_back(next);
  }
  return generated;
}

// On the same file, the engine's greedy tokens are llama.cpp's: its loader accepts what
// make-test-model writes, and RoPE's convention, grouped-query attention and the forward pass
// agree.
TEST(LlamaForward, GreedyTokensEqualLlamaCpps) {
  std::string modules = testing::llama_cpp_modules();
  if (modules.empty()) GTEST_SKIP() << "Node.js or node-llama-cpp is not available";
  testing::TempDir dir;
  for (TensorType type : {TensorType::kF32, TensorType::kQ8_0, TensorType::kQ4_0}) {
    SCOPED_TRACE(std::string(tensor_type_info(type)->name));
    std::string path = dir.file("model.gguf");
    ASSERT_TRUE(write_test_model(TestModelShape{}, type, 5, path).ok());
    auto model = LlamaModel::open(path);
    ASSERT_TRUE(model.ok());
    std::string list;
    for (auto token : kPrompt) list += (list.empty() ? "" : ",") + std::to_string(token);
    auto peer = testing::run_command({"/usr/bin/env", "node",
                                      slipway::testing::source_dir() + "/tests/llm/llama_cpp_greedy.mjs", modules, path,
                                      list, "8"});
    ASSERT_EQ(peer.exit_code, 0) << peer.err;
    std::string ours = "[";
    for (auto token : greedy(**model, prompt(), 8)) ours += (ours.size() > 1 ? "," : "") + std::to_string(token);
    ours += "]";
    EXPECT_EQ(ours + "\n", peer.out);
  }
}

// A file may give matrices that share an input different types (q in F16, k and v in Q8_0): the
// input is quantized for those that want it, and the logits are the numpy reference's.
TEST(LlamaForward, MatricesOfMixedTypesShareAnInput) {
  testing::TempDir dir;
  std::string f16 = dir.file("f16.gguf"), mixed = dir.file("mixed.gguf");
  ASSERT_TRUE(write_test_model(TestModelShape{}, TensorType::kF16, 42, f16).ok());
  auto file = GgufFile::open(f16);
  ASSERT_TRUE(file.ok());
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  for (const auto& tensor : file->tensors()) {
    auto bytes = file->data(tensor);
    bool requantize = tensor.name.find("attn_k") != std::string::npos ||
                      tensor.name.find("attn_v") != std::string::npos ||
                      tensor.name.find("ffn_up") != std::string::npos;
    if (!requantize) {
      ASSERT_TRUE(writer.add_tensor(tensor.name, tensor.dims, tensor.type, {bytes.begin(), bytes.end()}).ok());
      continue;
    }
    WeightMatrix matrix{tensor.type, tensor.dims[1], tensor.dims[0], bytes, nullptr};
    std::vector<float> values(matrix.rows * matrix.columns);
    for (std::size_t r = 0; r < matrix.rows; ++r) dequantize_row(matrix, r, values.data() + r * matrix.columns);
    auto encoded = encode_tensor(values, TensorType::kQ8_0);
    ASSERT_TRUE(encoded.ok());
    ASSERT_TRUE(writer.add_tensor(tensor.name, tensor.dims, TensorType::kQ8_0, std::move(*encoded)).ok());
  }
  ASSERT_TRUE(writer.write(mixed).ok());
  auto model = LlamaModel::open(mixed);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<float> logits = prompt_logits(**model, prompt(), 1);
  auto expected = reference_logits(mixed, prompt());
  double largest = 0;
  for (const auto& row : expected) {
    for (double value : row) largest = std::max(largest, std::abs(value));
  }
  const std::size_t vocabulary = (*model)->config().vocabulary;
  for (std::size_t position = 0; position < expected.size(); ++position) {
    for (std::size_t token = 0; token < vocabulary; ++token) {
      ASSERT_NEAR(logits[position * vocabulary + token], expected[position][token], 1e-4 * largest);
    }
  }
}

TEST(LlamaForward, RefusesBadModelsAndInputs) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.feed_forward = 192;
  ASSERT_TRUE(write_test_model(shape, TensorType::kF32, 1, dir.file("m.gguf")).ok());
  auto model = *LlamaModel::open(dir.file("m.gguf"));
  KvCache cache(model->config(), 1);  // 16 positions
  std::vector<float> logits;
  auto refused = [&](std::vector<BatchToken> batch, const std::string& expected) {
    auto status = forward(*model, cache, batch, std::vector<bool>(batch.size(), true), logits);
    ASSERT_FALSE(status.ok()) << expected;
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  };
  refused({{0, 0, -1}}, "outside the vocabulary");
  refused({{0, 0, 512}}, "outside the vocabulary");
  refused({{0, 256, 1}}, "past the context");
  refused({{0, 3, 1}}, "would leave a gap");  // positions 0-2 never written
  std::vector<BatchToken> sixteen;
  for (std::size_t position = 0; position < 16; ++position) sixteen.push_back({0, position, 1});
  ASSERT_TRUE(forward(*model, cache, sixteen, std::vector<bool>(16, false), logits).ok());
  refused({{0, 16, 1}}, "free blocks");
  refused({{5000, 0, 1}}, "past the cache's 4096 sequences");
  // Another architecture, a missing tensor, shapes that do not fit.
  GgufFile file = *GgufFile::open(dir.file("m.gguf"));
  auto rewritten = [&](const std::string& key, const GgufValue& value, const std::string& drop_tensor) {
    GgufWriter writer;
    for (const auto& [name, existing] : file.metadata()) writer.set(name, name == key ? value : existing);
    for (const auto& tensor : file.tensors()) {
      if (tensor.name == drop_tensor) continue;
      auto data = file.data(tensor);
      EXPECT_TRUE(
          writer.add_tensor(tensor.name, tensor.dims, tensor.type, std::vector<std::byte>(data.begin(), data.end()))
              .ok());
    }
    return *writer.serialize();
  };
  auto load = [](const std::string& bytes) {
    auto parsed = GgufFile::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), "x.gguf");
    EXPECT_TRUE(parsed.ok());
    return LlamaModel::from_file(std::move(*parsed));
  };
  std::string mistral = rewritten("general.architecture", GgufValue::string("gptneox"), "");
  EXPECT_NE(load(mistral).status().message().find("the architecture 'gptneox' is not supported"), std::string::npos);
  std::string missing = rewritten("", {}, "blk.1.ffn_up.weight");
  EXPECT_NE(load(missing).status().message().find("'blk.1.ffn_up.weight' is missing"), std::string::npos);
  std::string heads = rewritten("llama.attention.head_count_kv", GgufValue::u32(3), "");
  EXPECT_NE(load(heads).status().message().find("3 key/value heads do not divide the 4 heads"), std::string::npos);
  std::string width = rewritten("llama.embedding_length", GgufValue::u32(32), "");
  EXPECT_FALSE(load(width).ok());
  EXPECT_FALSE(write_test_model(shape, TensorType::kQ4_K, 1, dir.file("k.gguf")).ok());  // 64 is not 256's multiple
}

}  // namespace
}  // namespace slipway::llm
