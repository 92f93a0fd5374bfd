// The paged KV cache: blocks on demand, reference counts, copy on write, and the prefix cache
// (chained hashes, salts, least-recently-used eviction); and forward() over shared blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <utility>

#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

LlamaConfig small_config() {
  LlamaConfig config;
  config.embedding = 8;
  config.layers = 2;
  config.heads = 2;
  config.kv_heads = 1;
  config.head_dim = 4;
  config.context = 256;
  return config;
}

std::vector<float> filled_with(float value) { return std::vector<float>(4, value); }

// Element `index` of a cached block, position `row`'s, as the float it stands for.
float element_at(const kernels::KvBlock& block, std::size_t index, std::size_t row) {
  switch (block.element) {
    case kernels::KvElement::kF32:
      return static_cast<const float*>(block.data)[index];
    case kernels::KvElement::kF16:
      return kernels::half_to_float(static_cast<const std::uint16_t*>(block.data)[index]);
    case kernels::KvElement::kInt8:
      return static_cast<const std::int8_t*>(block.data)[index] * block.scales[row * block.scale_stride];
    case kernels::KvElement::kFp8E4M3:
      return kernels::fp8_e4m3_to_float(static_cast<const std::uint8_t*>(block.data)[index]) *
             block.scales[row * block.scale_stride];
  }
  return NAN;
}

std::vector<std::int32_t> tokens(std::size_t count, std::int32_t first = 1) {
  std::vector<std::int32_t> out(count);
  std::iota(out.begin(), out.end(), first);
  return out;
}

TEST(KvCache, SequencesTakeBlocksAsTheyGrowAndGiveThemBack) {
  KvCache cache(small_config(), 4, 8);
  EXPECT_EQ(cache.free_blocks(), 4u);
  ASSERT_TRUE(cache.reserve(0, 17).ok());  // two blocks
  EXPECT_EQ(cache.blocks_of(0), 2u);
  EXPECT_EQ(cache.free_blocks(), 2u);
  ASSERT_TRUE(cache.reserve(1, 32).ok());
  EXPECT_EQ(cache.free_blocks(), 0u);
  EXPECT_EQ(cache.blocks_short(0, 48), 1u);
  Status full = cache.reserve(0, 33);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("free blocks"), std::string::npos) << full.message();
  cache.release(1);
  EXPECT_EQ(cache.free_blocks(), 2u);
  EXPECT_TRUE(cache.reserve(0, 48).ok());
  EXPECT_EQ(cache.reserve(8, 1).code(), StatusCode::kInvalidArgument);
}

TEST(KvCache, AForkSharesBlocksUntilItWritesThenCopies) {
  const LlamaConfig config = small_config();
  KvCache cache(config, 4, 8);
  ASSERT_TRUE(cache.reserve(0, 20).ok());
  for (std::size_t position = 0; position < 20; ++position) {
    auto value = filled_with(static_cast<float>(position));
    for (std::size_t layer = 0; layer < config.layers; ++layer)
      cache.store(0, layer, position, value.data(), value.data());
  }
  cache.set_filled(0, 20);
  ASSERT_TRUE(cache.fork(0, 1).ok());
  EXPECT_EQ(cache.filled(1), 20u);
  EXPECT_EQ(cache.free_blocks(), 2u);  // shared, not copied
  auto values = [&](std::size_t sequence, std::size_t layer, std::size_t block) {
    return cache.head_values(sequence, layer, block, 0).data;
  };
  auto value_at = [&](std::size_t sequence, std::size_t layer, std::size_t block, std::size_t index) {
    return element_at(cache.head_values(sequence, layer, block, 0), index, index / 4);
  };
  EXPECT_EQ(values(1, 1, 1), values(0, 1, 1));
  // The child writes position 20, in the shared second block: it gets a copy, the first block
  // stays shared.
  ASSERT_TRUE(cache.prepare(1, 20, 21).ok());
  EXPECT_EQ(cache.free_blocks(), 1u);
  EXPECT_EQ(values(1, 0, 0), values(0, 0, 0));
  EXPECT_NE(values(1, 1, 1), values(0, 1, 1));
  auto written = filled_with(-1.0f);
  cache.store(1, 1, 20, written.data(), written.data());
  // Rows of 4 values: position 20 is the block's row 4, position 19 its row 3.
  EXPECT_EQ(value_at(1, 1, 1, 16), -1.0f);
  EXPECT_EQ(value_at(0, 1, 1, 16), 0.0f);   // the parent's position 20 untouched
  EXPECT_EQ(value_at(1, 1, 1, 12), 19.0f);  // the copy kept position 19
  EXPECT_EQ(element_at(cache.head_keys(1, 0, 1, 0), 3, 3), 19.0f);
  cache.release(0);
  EXPECT_EQ(cache.free_blocks(), 2u);  // the first block is still the child's
  cache.release(1);
  EXPECT_EQ(cache.free_blocks(), 4u);
  EXPECT_EQ(cache.fork(1, 1).code(), StatusCode::kInvalidArgument);
}

TEST(KvCache, PublishedBlocksAreFoundByTheirTokensAndSaltOnly) {
  KvCache cache(small_config(), 8, 8);
  const std::vector<std::int32_t> prompt = tokens(40);
  ASSERT_TRUE(cache.reserve(0, 40).ok());
  cache.set_filled(0, 40);
  cache.publish(0, prompt, 7);
  EXPECT_EQ(cache.cached_blocks(), 2u);  // the third block is not whole
  EXPECT_EQ(cache.attach_cached_prefix(1, prompt, 7, 39), 32u);
  EXPECT_EQ(cache.head_keys(1, 0, 1, 0).data, cache.head_keys(0, 0, 1, 0).data);
  EXPECT_EQ(cache.filled(1), 32u);
  EXPECT_EQ(cache.attach_cached_prefix(2, prompt, 7, 20), 16u);  // the limit, in whole blocks
  EXPECT_EQ(cache.attach_cached_prefix(3, prompt, 8, 39), 0u);   // another tenant's salt
  std::vector<std::int32_t> other = prompt;
  other[20] = 999;  // the second block differs
  EXPECT_EQ(cache.attach_cached_prefix(4, other, 7, 39), 16u);
  other[0] = 999;  // so does the first: nothing of its chain matches
  EXPECT_EQ(cache.attach_cached_prefix(5, other, 7, 39), 0u);
  for (std::size_t sequence = 0; sequence < 6; ++sequence) cache.release(sequence);
  EXPECT_EQ(cache.free_blocks(), 8u);
  EXPECT_EQ(cache.cached_blocks(), 2u);  // free, and still findable
  EXPECT_EQ(cache.attach_cached_prefix(0, prompt, 7, 40), 32u);
}

// Sequence 0 holding `prompt`, its whole blocks published under salt 0.
void hold_published(KvCache& cache, const std::vector<std::int32_t>& prompt) {
  ASSERT_TRUE(cache.reserve(0, prompt.size()).ok());
  cache.set_filled(0, prompt.size());
  cache.publish(0, prompt, 0);
}

TEST(KvCache, UncachedBlocksGoFirstThenTheLeastRecentlyReleasedLastBlockFirst) {
  KvCache cache(small_config(), 4, 8);
  const std::vector<std::int32_t> prompt = tokens(32);
  hold_published(cache, prompt);
  cache.release(0);
  // Two uncached blocks are free: a sequence of two blocks takes them and evicts nothing.
  ASSERT_TRUE(cache.reserve(1, 32).ok());
  EXPECT_EQ(cache.cached_blocks(), 2u);
  // A third block evicts the chain's last block first: its first block still hits.
  ASSERT_TRUE(cache.reserve(1, 48).ok());
  EXPECT_EQ(cache.cached_blocks(), 1u);
  EXPECT_EQ(cache.attach_cached_prefix(2, prompt, 0, 32), 16u);
}

TEST(KvCache, WritingIntoACachedBlockForgetsIt) {
  KvCache cache(small_config(), 4, 8);
  hold_published(cache, tokens(16));
  ASSERT_EQ(cache.cached_blocks(), 1u);
  ASSERT_TRUE(cache.prepare(0, 15, 17).ok());
  EXPECT_EQ(cache.cached_blocks(), 0u);
}

// The default test model's file in `dir` (Q8_0 unless asked), opened.
Result<std::shared_ptr<const LlamaModel>> test_model(testing::TempDir& dir, TensorType type = TensorType::kQ8_0) {
  const std::string path = dir.file("model.gguf");
  SLIPWAY_RETURN_IF_ERROR(write_test_model(TestModelShape{}, type, 3, path));
  return LlamaModel::open(path);
}

// A prompt whose first blocks come from another sequence's cache gives the bits of the prompt
// computed whole, and so does a fork's continuation.
TEST(KvCache, ForwardOverCachedAndForkedBlocksGivesTheSameBits) {
  testing::TempDir dir;
  auto model = test_model(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<std::int32_t> prompt = tokens(45, 3);
  auto run = [&](KvCache& cache, std::size_t sequence, std::size_t from, std::size_t to) {
    std::vector<BatchToken> batch;
    for (std::size_t i = from; i < to; ++i) batch.push_back({sequence, i, prompt[i]});
    std::vector<bool> wants(batch.size(), false);
    wants.back() = true;
    std::vector<float> logits;
    EXPECT_TRUE(forward(**model, cache, batch, wants, logits, 1).ok());
    return logits;
  };
  KvCache whole((*model)->config(), 8, 4);
  const std::vector<float> expected = run(whole, 0, 0, prompt.size());
  KvCache shared((*model)->config(), 16, 4);
  run(shared, 0, 0, 40);
  shared.publish(0, prompt, 0);
  ASSERT_EQ(shared.attach_cached_prefix(1, prompt, 0, prompt.size() - 1), 32u);
  EXPECT_EQ(run(shared, 1, 32, prompt.size()), expected);
  ASSERT_TRUE(shared.fork(0, 2).ok());
  EXPECT_EQ(run(shared, 2, 40, prompt.size()), expected);
  EXPECT_EQ(run(shared, 0, 40, prompt.size()), expected);  // the parent's own blocks are unchanged
}

TEST(KvCache, Int8KeepsEachHeadWithinHalfAStepOfItsScaleInAQuarterOfTheBytes) {
  LlamaConfig config = small_config();
  config.kv_heads = 2;
  config.head_dim = 64;
  EXPECT_EQ(KvCache::block_bytes(config, KvCacheType::kF32), 2u * 2 * 16 * 128 * 4);
  EXPECT_EQ(KvCache::block_bytes(config, KvCacheType::kF16), 2u * 2 * 16 * 128 * 2);
  EXPECT_EQ(KvCache::block_bytes(config, KvCacheType::kInt8), 2u * (2 * 16 * 128 + 2 * 16 * 2 * 4));
  KvCache cache(config, 2, 2, KvCacheType::kInt8);
  ASSERT_TRUE(cache.reserve(0, 16).ok());
  // Head 1's keys are 100 times head 0's: each head has its own scale.
  auto key_at = [](std::size_t position, std::size_t c) {
    return std::sin(static_cast<float>(position * 131 + c)) * (c < 64 ? 1.0f : 100.0f);
  };
  auto value_at = [](std::size_t position, std::size_t c) {
    return std::cos(static_cast<float>(position * 71 + c)) * 3.0f;
  };
  std::vector<float> key(128), value(128);
  for (std::size_t position = 0; position < 16; ++position) {
    for (std::size_t c = 0; c < 128; ++c) {
      key[c] = key_at(position, c);
      value[c] = value_at(position, c);
    }
    cache.store(0, 1, position, key.data(), value.data());
  }
  for (std::size_t head = 0; head < 2; ++head) {
    const kernels::KvBlock keys = cache.head_keys(0, 1, 0, head);
    for (std::size_t position = 0; position < 16; ++position) {
      float largest = 0;
      for (std::size_t c = 0; c < 64; ++c) largest = std::max(largest, std::fabs(key_at(position, head * 64 + c)));
      for (std::size_t c = 0; c < 64; ++c) {
        EXPECT_NEAR(element_at(keys, c * kKvBlockTokens + position, position), key_at(position, head * 64 + c),
                    largest / 127 * 0.5001f);
      }
    }
    const kernels::KvBlock values = cache.head_values(0, 1, 0, head);
    EXPECT_EQ(values.stride, 128u);
    for (std::size_t position = 0; position < 16; ++position) {
      for (std::size_t c = 0; c < 64; ++c) {
        EXPECT_NEAR(element_at(values, position * values.stride + c, position), value_at(position, head * 64 + c),
                    3.0f / 127 * 0.5001f);
      }
    }
  }
}

TEST(KvCache, TypesAreNamedAsVllmsKvCacheDtype) {
  KvCacheType type = KvCacheType::kF32;
  for (auto [name, expected] :
       {std::pair{"auto", KvCacheType::kF16}, std::pair{"f16", KvCacheType::kF16}, std::pair{"f32", KvCacheType::kF32},
        std::pair{"int8", KvCacheType::kInt8}, std::pair{"fp8", KvCacheType::kFp8E4M3},
        std::pair{"fp8_e4m3", KvCacheType::kFp8E4M3}}) {
    ASSERT_TRUE(kv_cache_type_by_name(name, type)) << name;
    EXPECT_EQ(type, expected) << name;
  }
  EXPECT_EQ(kv_cache_type_name(KvCacheType::kFp8E4M3), "fp8_e4m3");
  EXPECT_FALSE(kv_cache_type_by_name("fp8_e5m2", type));  // not kept: E4M3's precision is what a cache needs
  EXPECT_FALSE(kv_cache_type_by_name("FP8", type));
}

// FP8 E4M3 codes keep 4 significant bits over 15 binades below each head's largest (which maps to
// 448): each value within 1/16 of itself (half a step of its binade), or, below those binades,
// within half the subnormals' step (largest / 448 * 2^-10). Int8's even step (largest / 127) rounds a
// value a thousandth of its head's largest to 0.
TEST(KvCache, Fp8KeepsEachValueWithinHalfAStepOfItsBinadeInTheBytesOfInt8) {
  LlamaConfig config = small_config();
  config.kv_heads = 2;
  config.head_dim = 64;
  EXPECT_EQ(KvCache::block_bytes(config, KvCacheType::kFp8E4M3), KvCache::block_bytes(config, KvCacheType::kInt8));
  KvCache cache(config, 2, 2, KvCacheType::kFp8E4M3);
  ASSERT_TRUE(cache.reserve(0, 16).ok());
  // Magnitudes spread over six orders within one head: int8's even step would zero the smallest.
  auto key_at = [](std::size_t position, std::size_t c) {
    return std::sin(static_cast<float>(position * 131 + c)) * std::pow(10.0f, static_cast<float>(c % 7) - 3.0f);
  };
  auto value_at = [](std::size_t position, std::size_t c) {
    return std::cos(static_cast<float>(position * 71 + c)) * (c < 64 ? 3.0f : -0.001f);
  };
  std::vector<float> key(128), value(128);
  for (std::size_t position = 0; position < 16; ++position) {
    for (std::size_t c = 0; c < 128; ++c) {
      key[c] = key_at(position, c);
      value[c] = value_at(position, c);
    }
    cache.store(0, 0, position, key.data(), value.data());
  }
  auto check = [](float cached, float exact, float largest) {
    const float bound = std::max(std::fabs(exact) / 16, largest / 448 * 0x1p-10f) * 1.0001f;
    EXPECT_NEAR(cached, exact, bound) << "of a head whose largest is " << largest;
  };
  for (std::size_t head = 0; head < 2; ++head) {
    const kernels::KvBlock keys = cache.head_keys(0, 0, 0, head), values = cache.head_values(0, 0, 0, head);
    for (std::size_t position = 0; position < 16; ++position) {
      float largest_key = 0, largest_value = 0;
      for (std::size_t c = 0; c < 64; ++c) {
        largest_key = std::max(largest_key, std::fabs(key_at(position, head * 64 + c)));
        largest_value = std::max(largest_value, std::fabs(value_at(position, head * 64 + c)));
      }
      for (std::size_t c = 0; c < 64; ++c) {
        check(element_at(keys, c * kKvBlockTokens + position, position), key_at(position, head * 64 + c), largest_key);
        check(element_at(values, position * values.stride + c, position), value_at(position, head * 64 + c),
              largest_value);
      }
    }
  }
}

// An 8-bit cache's logits stay close to an F32 cache's on the same prompt, a half cache's closer.
// F16 weights: a Q8_0 model's products quantize their inputs to int8, which turns the cache's
// small differences into whole steps of the inputs' scale and hides which cache is closer.
TEST(KvCache, HalfInt8AndFp8LogitsStayCloseToF32s) {
  testing::TempDir dir;
  auto model = test_model(dir, TensorType::kF16);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<std::int32_t> prompt = tokens(100, 3);
  auto run = [&](KvCacheType type) {
    KvCache cache((*model)->config(), 8, 1, type);
    std::vector<BatchToken> batch;
    for (std::size_t i = 0; i < prompt.size(); ++i) batch.push_back({0, i, prompt[i]});
    std::vector<bool> wants(batch.size(), true);
    std::vector<float> logits;
    EXPECT_TRUE(forward(**model, cache, batch, wants, logits, 1).ok());
    return logits;
  };
  const std::vector<float> exact = run(KvCacheType::kF32);
  struct Difference {
    double largest = 0, rms = 0;
  };
  auto difference = [&](KvCacheType type) {
    const std::vector<float> other = run(type);
    EXPECT_EQ(exact.size(), other.size());
    Difference out;
    for (std::size_t i = 0; i < exact.size() && i < other.size(); ++i) {
      const double gap = std::fabs(exact[i] - other[i]);
      out.largest = std::max(out.largest, gap);
      out.rms += gap * gap;
    }
    out.rms = std::sqrt(out.rms / static_cast<double>(exact.size()));
    return out;
  };
  double spread = 0;
  for (float logit : exact) spread = std::max(spread, static_cast<double>(std::fabs(logit)));
  const Difference half = difference(KvCacheType::kF16), int8 = difference(KvCacheType::kInt8),
                   fp8 = difference(KvCacheType::kFp8E4M3);
  EXPECT_LT(int8.largest, 0.05 * spread) << "int8: largest difference " << int8.largest << " of logits up to "
                                         << spread;
  EXPECT_LT(fp8.largest, 0.05 * spread) << "fp8: largest difference " << fp8.largest << " of logits up to " << spread;
  EXPECT_LT(half.rms, fp8.rms / 4) << "f16 keeps 11 significant bits to FP8 E4M3's 4";
  EXPECT_LT(half.largest, 0.05 * spread) << "f16: largest difference " << half.largest << " of logits up to " << spread;
  EXPECT_GT(half.rms, 0.0);  // they are other caches
  EXPECT_LT(half.rms, int8.rms / 4) << "f16 keeps 11 significant bits to int8's 8";
}

}  // namespace
}  // namespace slipway::llm
