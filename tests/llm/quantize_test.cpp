// slipway llm quantize: the matrices re-encoded (rows of whole blocks only), everything else
// copied, the logits close to the original's, and llama.cpp loading what it writes with the
// same greedy tokens as the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "llm/llama_cpp_peer.h"
#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

std::vector<float> last_logits(const LlamaModel& model, const std::vector<std::int32_t>& prompt) {
  KvCache cache(model.config(), 8, 1);
  std::vector<BatchToken> batch;
  for (std::size_t i = 0; i < prompt.size(); ++i) batch.push_back({0, i, prompt[i]});
  std::vector<bool> wants(batch.size(), false);
  wants.back() = true;
  std::vector<float> logits;
  EXPECT_TRUE(forward(model, cache, batch, wants, logits, 1).ok());
  return logits;
}

std::vector<std::int32_t> greedy(const LlamaModel& model, std::vector<std::int32_t> tokens, std::size_t count) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<float> logits = last_logits(model, tokens);
    auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

TEST(LlmQuantize, MatricesAreReencodedAndTheLogitsStayClose) {
  testing::TempDir dir;
  TestModelShape shape;
  shape.embedding = 256;  // Q4_K's rows are blocks of 256
  shape.feed_forward = 512;
  shape.heads = 4;
  shape.kv_heads = 2;
  std::string original = dir.file("f32.gguf");
  ASSERT_TRUE(write_test_model(shape, TensorType::kF32, 3, original).ok());
  auto reference = LlamaModel::open(original);
  ASSERT_TRUE(reference.ok());
  const std::vector<std::int32_t> prompt = {1, 300, 301, 302, 303};
  std::vector<float> expected = last_logits(**reference, prompt);
  float largest = 0;
  for (float value : expected) largest = std::max(largest, std::abs(value));
  // Q8_0 keeps about 2 decimal digits per weight, Q4 formats about 1: bounds on the largest
  // logit error, relative to the largest logit.
  for (auto [type, bound] : {std::pair{TensorType::kQ8_0, 0.03f},
                             {TensorType::kQ4_0, 0.3f},
                             {TensorType::kQ4_K, 0.3f},
                             {TensorType::kF16, 0.003f}}) {
    SCOPED_TRACE(std::string(tensor_type_info(type)->name));
    std::string path = dir.file("quantized.gguf");
    std::uint64_t last_done = 0, last_total = 0;
    ASSERT_TRUE(quantize_model(original, path, type, [&](std::uint64_t done, std::uint64_t total) {
                  EXPECT_GE(done, last_done);
                  last_done = done;
                  last_total = total;
                }).ok());
    EXPECT_EQ(last_done, last_total);
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok());
    for (const auto& tensor : file->tensors()) {
      bool matrix = tensor.dims.size() == 2;
      EXPECT_EQ(tensor.type, matrix ? type : TensorType::kF32) << tensor.name;
    }
    EXPECT_EQ(file->require_unsigned("general.file_type").value(), gguf_file_type(type));
    EXPECT_EQ(*file->find("tokenizer.ggml.model")->as_string(), "llama");  // metadata copied
    auto model = LlamaModel::from_file(std::move(*file));
    ASSERT_TRUE(model.ok());
    std::vector<float> logits = last_logits(**model, prompt);
    float worst = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::abs(logits[i] - expected[i]));
    EXPECT_LT(worst, bound * largest);
  }
}

TEST(LlmQuantize, RowsThatAreNotWholeBlocksStayAsTheyAre) {
  testing::TempDir dir;
  TestModelShape shape;  // width 64: not whole Q4_K blocks, whole Q8_0 ones
  std::string original = dir.file("f16.gguf"), path = dir.file("q4k.gguf");
  ASSERT_TRUE(write_test_model(shape, TensorType::kF16, 3, original).ok());
  ASSERT_TRUE(quantize_model(original, path, TensorType::kQ4_K).ok());
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->tensor("blk.0.attn_q.weight")->type, TensorType::kQ8_0);
  EXPECT_EQ(file->tensor("blk.0.ffn_down.weight")->type, TensorType::kQ8_0);  // 192 columns
}

TEST(LlmQuantize, RefusesWhatItCannotDo) {
  testing::TempDir dir;
  std::string original = dir.file("f32.gguf");
  ASSERT_TRUE(write_test_model(TestModelShape{}, TensorType::kF32, 3, original).ok());
  EXPECT_EQ(quantize_model(original, dir.file("x.gguf"), TensorType::kQ5_1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(quantize_model(dir.file("missing.gguf"), dir.file("x.gguf"), TensorType::kQ8_0).ok());
  EXPECT_FALSE(quantize_model(original, dir.path() + "/no/such/dir/x.gguf", TensorType::kQ8_0).ok());
  testing::write_text(dir.file("junk.gguf"), "GGUF but not really");
  EXPECT_FALSE(quantize_model(dir.file("junk.gguf"), dir.file("x.gguf"), TensorType::kQ8_0).ok());
}

// llama.cpp loads what quantize writes, and its greedy tokens are the engine's (Q4_K included).
TEST(LlmQuantize, LlamaCppLoadsTheOutputAndAgrees) {
  std::string modules = testing::llama_cpp_modules();
  if (modules.empty()) GTEST_SKIP() << "Node.js or node-llama-cpp is not available";
  testing::TempDir dir;
  TestModelShape shape;
  shape.embedding = 256;
  shape.feed_forward = 512;
  std::string original = dir.file("f32.gguf");
  ASSERT_TRUE(write_test_model(shape, TensorType::kF32, 8, original).ok());
  const std::vector<std::int32_t> prompt = {1, 300, 301, 302};
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K}) {
    SCOPED_TRACE(std::string(tensor_type_info(type)->name));
    std::string path = dir.file("quantized.gguf");
    ASSERT_TRUE(quantize_model(original, path, type).ok());
    auto model = LlamaModel::open(path);
    ASSERT_TRUE(model.ok());
    auto peer = testing::run_command({"/usr/bin/env", "node",
                                      slipway::testing::source_dir() + "/tests/llm/llama_cpp_greedy.mjs", modules, path,
                                      "1,300,301,302", "4"});
    ASSERT_EQ(peer.exit_code, 0) << peer.err;
    std::string ours = "[";
    for (auto token : greedy(**model, prompt, 4)) ours += (ours.size() > 1 ? "," : "") + std::to_string(token);
    ours += "]";
    // Activations are quantized as llama.cpp's are, but not bit for bit: the first token agrees.
    EXPECT_EQ(peer.out.substr(0, peer.out.find(',')), ours.substr(0, ours.find(','))) << peer.out << " vs " << ours;
  }
}

}  // namespace
}  // namespace slipway::llm
