// The LLM weight products: every variant against the scalar reference bit for bit, the reference
// against a double-precision sum over the dequantized weights and inputs, and an output's
// independence from the batch and the split of panels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

struct Matrix {
  std::vector<std::byte> file_rows;
  std::vector<float> dequantized;  // rows * columns
};

template <class Block>
void append_blocks(const std::vector<Block>& blocks, std::vector<std::byte>& out) {
  const auto* bytes = reinterpret_cast<const std::byte*>(blocks.data());
  out.insert(out.end(), bytes, bytes + blocks.size() * sizeof(Block));
}

// A random matrix as a GGUF tensor of `format` holds it, and the values the file means.
Matrix random_matrix(LlmWeightFormat format, std::size_t rows, std::size_t columns, std::uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> values(rows * columns);
  for (float& value : values) value = normal(random);
  Matrix matrix;
  matrix.dequantized.resize(values.size());
  switch (format) {
    case LlmWeightFormat::kF32:
      matrix.dequantized = values;
      matrix.file_rows.resize(values.size() * 4);
      std::memcpy(matrix.file_rows.data(), values.data(), values.size() * 4);
      break;
    case LlmWeightFormat::kF16:
    case LlmWeightFormat::kBF16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint16_t bits = 0;
        if (format == LlmWeightFormat::kF16) {
          bits = float_to_half(values[i]);
          matrix.dequantized[i] = half_to_float(bits);
        } else {
          bits = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(values[i]) >> 16);
          matrix.dequantized[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
        }
        matrix.file_rows.push_back(static_cast<std::byte>(bits & 0xFF));
        matrix.file_rows.push_back(static_cast<std::byte>(bits >> 8));
      }
      break;
    case LlmWeightFormat::kQ8_0: {
      std::vector<BlockQ8_0> blocks(values.size() / kQuantBlock);
      quantize_q8_0(values, blocks);
      dequantize_q8_0(blocks, matrix.dequantized);
      append_blocks(blocks, matrix.file_rows);
      break;
    }
    case LlmWeightFormat::kQ4_0: {
      std::vector<BlockQ4_0> blocks(values.size() / kQuantBlock);
      quantize_q4_0(values, blocks);
      dequantize_q4_0(blocks, matrix.dequantized);
      append_blocks(blocks, matrix.file_rows);
      break;
    }
    case LlmWeightFormat::kQ4_K: {
      std::vector<BlockQ4_K> blocks(values.size() / kSuperBlock);
      quantize_q4_k(values, blocks);
      dequantize_q4_k(blocks, matrix.dequantized);
      append_blocks(blocks, matrix.file_rows);
      break;
    }
  }
  return matrix;
}

std::vector<float> run(const LlmKernelVariant& variant, const LlmPackedMatrix& packed, const LlmInput& input) {
  std::vector<float> out(input.tokens * packed.rows, -1.0f);
  variant.product(packed, input, 0, packed.panels(), out.data());
  return out;
}

constexpr LlmWeightFormat kFormats[] = {LlmWeightFormat::kF32,  LlmWeightFormat::kF16,  LlmWeightFormat::kBF16,
                                        LlmWeightFormat::kQ8_0, LlmWeightFormat::kQ4_0, LlmWeightFormat::kQ4_K};

class LlmProduct : public ::testing::TestWithParam<LlmWeightFormat> {};

TEST_P(LlmProduct, AgreesWithDoublePrecisionOverTheDequantizedValues) {
  const LlmWeightFormat format = GetParam();
  const std::size_t rows = 37, columns = 512, tokens = 7;  // a partial last panel; tokens past a group of four
  Matrix matrix = random_matrix(format, rows, columns, 11);
  LlmPackedMatrix packed = pack_llm_matrix(format, matrix.file_rows, rows, columns);
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(tokens * columns);
  for (float& value : x) value = normal(random);
  LlmInput input;
  prepare_llm_input(x.data(), tokens, columns, llm_format_quantized(format), input);
  std::vector<float> out = run(llm_kernel_variants()[0], packed, input);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t r = 0; r < rows; ++r) {
      double expected = 0, magnitude = 0;
      for (std::size_t k = 0; k < columns; ++k) {
        double in = x[t * columns + k];
        if (llm_format_quantized(format)) {
          in = static_cast<double>(input.quantized[t * columns + k]) * input.scales[(t * columns + k) / kQuantBlock];
        }
        expected += matrix.dequantized[r * columns + k] * in;
        magnitude += std::abs(matrix.dequantized[r * columns + k] * in);
      }
      ASSERT_NEAR(out[t * rows + r], expected, 1e-5 * magnitude) << "token " << t << " row " << r;
    }
  }
}

TEST_P(LlmProduct, EveryVariantGivesTheReferencesBits) {
  const LlmWeightFormat format = GetParam();
  const std::size_t rows = 83, columns = 768;
  Matrix matrix = random_matrix(format, rows, columns, 5);
  LlmPackedMatrix packed = pack_llm_matrix(format, matrix.file_rows, rows, columns);
  for (std::size_t tokens : {1, 2, 3, 4, 5, 9}) {
    std::mt19937 random(static_cast<std::uint32_t>(tokens));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(tokens * columns);
    for (float& value : x) value = normal(random);
    LlmInput input;
    prepare_llm_input(x.data(), tokens, columns, llm_format_quantized(format), input);
    std::vector<float> reference = run(llm_kernel_variants()[0], packed, input);
    for (const auto& variant : llm_kernel_variants()) {
      if (!variant.supported()) continue;
      std::vector<float> got = run(variant, packed, input);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(reference[i]))
            << variant.name << " tokens " << tokens << " output " << i;
      }
    }
  }
}

TEST_P(LlmProduct, AnOutputDependsOnItsOwnRowAndInputAlone) {
  const LlmWeightFormat format = GetParam();
  const std::size_t rows = 70, columns = 256, tokens = 6;
  Matrix matrix = random_matrix(format, rows, columns, 9);
  LlmPackedMatrix packed = pack_llm_matrix(format, matrix.file_rows, rows, columns);
  std::vector<float> x(tokens * columns);
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (float& value : x) value = uniform(random);
  const LlmKernelVariant& variant = llm_kernel();
  LlmInput batch;
  prepare_llm_input(x.data(), tokens, columns, llm_format_quantized(format), batch);
  std::vector<float> together = run(variant, packed, batch);
  for (std::size_t t = 0; t < tokens; ++t) {
    LlmInput alone;
    prepare_llm_input(x.data() + t * columns, 1, columns, llm_format_quantized(format), alone);
    // Panels one call at a time, as threads would split them.
    std::vector<float> out(rows);
    for (std::size_t panel = 0; panel < packed.panels(); ++panel) variant.product(packed, alone, panel, 1, out.data());
    for (std::size_t r = 0; r < rows; ++r) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[r]), std::bit_cast<std::uint32_t>(together[t * rows + r]))
          << "token " << t << " row " << r;
    }
  }
}

std::string format_name(const ::testing::TestParamInfo<LlmWeightFormat>& info) {
  static const char* const kNames[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K"};
  return kNames[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Formats, LlmProduct, ::testing::ValuesIn(kFormats), format_name);

TEST(LlmInput, NotFiniteValuesMakeTheirBlocksScaleNaN) {
  std::vector<float> x(64, 1.0f);
  x[40] = INFINITY;
  LlmInput input;
  prepare_llm_input(x.data(), 1, 64, true, input);
  EXPECT_FLOAT_EQ(input.scales[0], 1.0f / 127.0f);
  EXPECT_EQ(input.sums[0], 32 * 127);
  EXPECT_TRUE(std::isnan(input.scales[1]));
  EXPECT_EQ(input.sums[1], 0);
}

TEST(LlmInput, EveryVariantQuantizesToTheReferencesBytes) {
  std::mt19937 random(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::size_t blocks = 64;
  std::vector<float> x(blocks * kQuantBlock);
  for (float& value : x) value = normal(random);
  // Blocks of ties, zeros, huge and tiny values, and not-finite ones.
  for (std::size_t k = 0; k < kQuantBlock; ++k) {
    x[k] = static_cast<float>(k) - 15.5f;
    x[kQuantBlock + k] = 0.0f;
    x[2 * kQuantBlock + k] = k % 2 == 0 ? 3e38f : -1e-40f;
    x[3 * kQuantBlock + k] = 1e-44f * static_cast<float>(k);
  }
  x[4 * kQuantBlock + 3] = NAN;
  x[5 * kQuantBlock + 30] = -INFINITY;
  auto quantize = [&](const LlmKernelVariant& variant, std::vector<std::int8_t>& q, std::vector<float>& scales,
                      std::vector<std::int32_t>& sums) {
    q.assign(x.size(), 99);
    scales.assign(blocks, -1.0f);
    sums.assign(blocks, -1);
    variant.quantize_input(x.data(), blocks, q.data(), scales.data(), sums.data());
  };
  std::vector<std::int8_t> expected_q, q;
  std::vector<float> expected_scales, scales;
  std::vector<std::int32_t> expected_sums, sums;
  quantize(llm_kernel_variants()[0], expected_q, expected_scales, expected_sums);
  for (const auto& variant : llm_kernel_variants()) {
    if (!variant.supported()) continue;
    quantize(variant, q, scales, sums);
    EXPECT_EQ(q, expected_q) << variant.name;
    EXPECT_EQ(sums, expected_sums) << variant.name;
    for (std::size_t b = 0; b < blocks; ++b) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(scales[b]), std::bit_cast<std::uint32_t>(expected_scales[b]))
          << variant.name << " block " << b;
    }
  }
  EXPECT_EQ(expected_q[0], -127);
  EXPECT_EQ(expected_q[kQuantBlock - 1], 127);
  EXPECT_EQ(expected_q[15], -4);  // -0.5 * 127 / 15.5 = -4.097
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(expected[i])) << what << " at " << i;
  }
}

// Floats held as a cache of `element` holds them, and `decoded`, the floats they stand for. Element
// k belongs to position k % 16 (`transposed`: keys) or k / stride (values); an int8 or FP8
// position has its own scale.
struct CachedFloats {
  std::vector<float> decoded;
  std::vector<std::uint16_t> halves;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  KvBlock block;

  CachedFloats(const std::vector<float>& values, KvElement element, std::size_t stride, bool transposed)
      : decoded(values) {
    block.element = element;
    block.stride = stride;
    auto position = [&](std::size_t k) { return transposed ? k % kAttentionBlock : k / stride; };
    if (element == KvElement::kF16) {
      for (float value : values) halves.push_back(float_to_half(value));
      for (std::size_t k = 0; k < values.size(); ++k) decoded[k] = half_to_float(halves[k]);
      block.data = halves.data();
    } else if (element == KvElement::kInt8 || element == KvElement::kFp8E4M3) {
      const bool fp8 = element == KvElement::kFp8E4M3;
      scales.assign(kAttentionBlock, 0.0f);
      for (std::size_t k = 0; k < values.size(); ++k) {
        scales[position(k)] = std::max(scales[position(k)], std::fabs(values[k]) / (fp8 ? 448.0f : 127.0f));
      }
      for (std::size_t k = 0; k < values.size(); ++k) {
        const float level = values[k] / scales[position(k)];
        codes.push_back(fp8 ? float_to_fp8_e4m3(level)
                            : static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lrint(level))));
        decoded[k] =
            (fp8 ? fp8_e4m3_to_float(codes.back()) : static_cast<float>(static_cast<std::int8_t>(codes.back()))) *
            scales[position(k)];
      }
      block.data = codes.data();
      block.scales = scales.data();
      block.scale_stride = 1;
    } else {
      block.data = decoded.data();
    }
  }
};

TEST(LlmAttention, EveryVariantGivesTheReferencesBitsForEveryTileAndElement) {
  std::mt19937 random(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const LlmKernelVariant& reference = llm_kernel_variants()[0];
  for (KvElement element : {KvElement::kF32, KvElement::kF16, KvElement::kInt8, KvElement::kFp8E4M3}) {
    for (std::size_t head_dim : {64, 128, 80, 7}) {
      for (std::size_t queries = 1; queries <= 7; ++queries) {  // past kAttentionQueries too
        const std::size_t query_stride = head_dim + 5, score_stride = 3 * kAttentionBlock;
        const std::size_t value_stride = head_dim * 3;  // values of other heads between one position's
        const std::size_t out_stride = head_dim + 3, count = 11;
        std::vector<float> query(queries * query_stride), key_floats(head_dim * kAttentionBlock);
        std::vector<float> value_floats(kAttentionBlock * value_stride), start(queries * out_stride);
        for (auto* vector : {&query, &key_floats, &value_floats, &start}) {
          for (float& value : *vector) value = normal(random);
        }
        CachedFloats keys(key_floats, element, kAttentionBlock, true),
            values(value_floats, element, value_stride, false);
        std::vector<float> expected_scores(queries * score_stride, 9.0f), expected_out = start;
        reference.block_scores(query.data(), query_stride, queries, keys.block, head_dim, expected_scores.data(),
                               score_stride);
        reference.add_weighted_values(expected_scores.data(), score_stride, queries, count, values.block, head_dim,
                                      expected_out.data(), out_stride);
        const std::size_t last = queries - 1;
        double direct = 0, weighted = start[last * out_stride + 2];
        for (std::size_t d = 0; d < head_dim; ++d) {
          direct += static_cast<double>(query[last * query_stride + d]) * keys.decoded[d * kAttentionBlock + 5];
        }
        for (std::size_t i = 0; i < count; ++i) {
          weighted +=
              static_cast<double>(expected_scores[last * score_stride + i]) * values.decoded[i * value_stride + 2];
        }
        EXPECT_NEAR(expected_scores[last * score_stride + 5], direct, 1e-4);
        EXPECT_NEAR(expected_out[last * out_stride + 2], weighted, 1e-3);
        EXPECT_EQ(expected_scores[last * score_stride + kAttentionBlock], 9.0f) << "wrote past its 16 scores";
        for (const auto& variant : llm_kernel_variants()) {
          if (!variant.supported()) continue;
          std::vector<float> scores(queries * score_stride, 9.0f), out = start;
          variant.block_scores(query.data(), query_stride, queries, keys.block, head_dim, scores.data(), score_stride);
          variant.add_weighted_values(expected_scores.data(), score_stride, queries, count, values.block, head_dim,
                                      out.data(), out_stride);
          std::string what = fmt::format("{} element {} head_dim {} queries {}", variant.name,
                                         static_cast<int>(element), head_dim, queries);
          expect_same_bits(scores, expected_scores, what + " scores");
          expect_same_bits(out, expected_out, what + " values");
        }
      }
    }
  }
}

// Every finite FP8 code (zeros, subnormals, the largest, both signs) read as keys and as values by
// every variant, with scales from 0 through subnormal to large: the reference's bits each time.
TEST(LlmAttention, EveryFp8CodeGivesTheReferencesBitsInEveryVariant) {
  constexpr std::size_t kHeadDim = 16;  // 16 dimensions by 16 positions: 256 codes a block
  std::vector<std::uint8_t> codes(kHeadDim * kAttentionBlock);
  for (std::size_t k = 0; k < codes.size(); ++k) {
    codes[k] = static_cast<std::uint8_t>((k & 0x7F) == 0x7F ? k - 1 : k);  // no NaN codes
  }
  std::vector<float> scales(kAttentionBlock);
  for (std::size_t i = 0; i < kAttentionBlock; ++i) scales[i] = std::ldexp(1.0f + 0.1f * i, 12 * int(i % 5) - 24);
  scales[3] = 0.0f;
  scales[7] = 1e-40f;  // subnormal
  scales[11] = 3e35f;  // 448 * 3e35 is still finite
  const KvBlock keys{codes.data(), KvElement::kFp8E4M3, kAttentionBlock, scales.data(), 1};
  const KvBlock values{codes.data(), KvElement::kFp8E4M3, kHeadDim, scales.data(), 1};
  std::mt19937 random(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t queries = 3;
  std::vector<float> query(queries * kHeadDim), weights(queries * kAttentionBlock), start(queries * kHeadDim);
  for (auto* vector : {&query, &weights, &start}) {
    for (float& value : *vector) value = normal(random) * 1e-3f;
  }
  const LlmKernelVariant& reference = llm_kernel_variants()[0];
  std::vector<float> expected_scores(queries * kAttentionBlock), expected_out = start;
  reference.block_scores(query.data(), kHeadDim, queries, keys, kHeadDim, expected_scores.data(), kAttentionBlock);
  reference.add_weighted_values(weights.data(), kAttentionBlock, queries, kAttentionBlock, values, kHeadDim,
                                expected_out.data(), kHeadDim);
  for (const auto& variant : llm_kernel_variants()) {
    if (!variant.supported()) continue;
    std::vector<float> scores(queries * kAttentionBlock), out = start;
    variant.block_scores(query.data(), kHeadDim, queries, keys, kHeadDim, scores.data(), kAttentionBlock);
    variant.add_weighted_values(weights.data(), kAttentionBlock, queries, kAttentionBlock, values, kHeadDim, out.data(),
                                kHeadDim);
    expect_same_bits(scores, expected_scores, std::string(variant.name) + " scores");
    expect_same_bits(out, expected_out, std::string(variant.name) + " values");
  }
}

TEST(LlmAttention, SoftmaxGivesTheReferencesBitsAndSumsToOne) {
  std::mt19937 random(9);
  std::normal_distribution<float> normal(0.0f, 30.0f);
  const LlmKernelVariant& reference = llm_kernel_variants()[0];
  for (std::size_t count : {1, 5, 8, 15, 16, 17, 31, 100, 513}) {
    std::vector<float> scores(count + 4, 7.0f);
    for (std::size_t p = 0; p < count; ++p) scores[p] = normal(random);
    if (count > 3) scores[2] = NAN;  // weighs nothing
    std::vector<float> expected = scores;
    // 1/sqrt(80): a scale whose product rounds (a power of two would hide a fused multiply-add).
    const float scale = 1.0f / std::sqrt(80.0f);
    reference.softmax(expected.data(), count, scale);
    double total = 0, largest = -INFINITY, exact_total = 0;
    for (std::size_t p = 0; p < count; ++p) {
      total += expected[p];
      if (!std::isnan(scores[p]))
        largest = std::max(largest, static_cast<double>(scores[p]) * static_cast<double>(scale));
    }
    for (std::size_t p = 0; p < count; ++p) {
      if (!std::isnan(scores[p]))
        exact_total += std::exp(static_cast<double>(scores[p]) * static_cast<double>(scale) - largest);
    }
    EXPECT_NEAR(total, 1.0, 1e-5) << count;
    for (std::size_t p = 0; p < count; ++p) {
      if (std::isnan(scores[p])) {
        EXPECT_EQ(expected[p], 0.0f);
        continue;
      }
      double e = std::exp(static_cast<double>(scores[p]) * static_cast<double>(scale) - largest);
      EXPECT_NEAR(expected[p], e / exact_total, 1e-7 + 1e-5 * e / exact_total) << count << " at " << p;
    }
    EXPECT_EQ(expected[count], 7.0f) << "wrote past count";
    for (const auto& variant : llm_kernel_variants()) {
      if (!variant.supported()) continue;
      std::vector<float> got = scores;
      variant.softmax(got.data(), count, scale);
      expect_same_bits(got, expected, fmt::format("{} count {}", variant.name, count));
    }
  }
}

TEST(LlmSwiGlu, EveryVariantGivesTheReferencesBits) {
  std::mt19937 random(10);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  std::vector<float> gate(1000), up(1000);
  for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = normal(random), up[i] = normal(random);
  gate[3] = 200.0f, gate[4] = -200.0f, gate[5] = NAN;
  const std::size_t count = 997;  // a tail past every vector width
  std::vector<float> expected = gate;
  llm_kernel_variants()[0].silu_multiply(expected.data(), up.data(), count);
  for (std::size_t i = 0; i < count; ++i) {
    double x = gate[i], exact = x / (1.0 + std::exp(-x)) * up[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(expected[i]));
    } else {
      EXPECT_NEAR(expected[i], exact, 1e-5 * std::abs(exact) + 1e-30) << i;
    }
  }
  EXPECT_EQ(expected[count], gate[count]) << "wrote past count";
  for (const auto& variant : llm_kernel_variants()) {
    if (!variant.supported()) continue;
    std::vector<float> got = gate;
    variant.silu_multiply(got.data(), up.data(), count);
    expect_same_bits(got, expected, std::string(variant.name));
  }
}

TEST(LlmAttention, ExpIsWithinTwoUlps) {
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    float got = llm_exp(x), expected = static_cast<float>(std::exp(static_cast<double>(x)));
    ASSERT_LE(std::abs(std::bit_cast<std::int32_t>(got) - std::bit_cast<std::int32_t>(expected)), 2) << x;
  }
  EXPECT_EQ(llm_exp(0.0f), 1.0f);
  EXPECT_EQ(llm_exp(-90.0f), 0.0f);
  EXPECT_EQ(llm_exp(-INFINITY), 0.0f);
  EXPECT_EQ(llm_exp(NAN), 0.0f);
  EXPECT_TRUE(std::isfinite(llm_exp(1000.0f)));
}

TEST(LlmInput, AZeroBlockQuantizesToZerosWithScaleZero) {
  std::vector<float> x(32, 0.0f);
  LlmInput input;
  prepare_llm_input(x.data(), 1, 32, true, input);
  EXPECT_EQ(input.scales[0], 0.0f);
  EXPECT_EQ(input.sums[0], 0);
}

}  // namespace
}  // namespace slipway::kernels
