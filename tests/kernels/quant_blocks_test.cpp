// GGUF's Q8_0 and Q4_0 blocks, half precision and FP8 E4M3: the conversions against the CPU's own
// (F16C) or the format's definition, the block layouts on hand-made blocks, and quantization's
// error within each format's bound.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
__attribute__((target("f16c"))) std::uint16_t hardware_half(float value) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hardware_float(std::uint16_t bits) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}

TEST(HalfPrecision, MatchesTheCpusConversionsBothWays) {
  if (!cpu_has_f16c()) GTEST_SKIP() << "no F16C to compare with";
  for (std::uint32_t half = 0; half < 65536; ++half) {
    float expected = hardware_float(static_cast<std::uint16_t>(half));
    float got = half_to_float(static_cast<std::uint16_t>(half));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(expected)) << half;
  }
  std::mt19937 random(7);
  std::vector<float> values = {0.0f,     -0.0f,   65504.0f, 65519.99f, 65520.0f, 1e-8f,
                               2.98e-8f, 6.1e-5f, 6.09e-5f, INFINITY,  -INFINITY};
  for (int index = 0; index < 2'000'000; ++index)
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(random())));
  for (float value : values) {
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(value))));
      continue;
    }
    ASSERT_EQ(float_to_half(value), hardware_half(value)) << value;
  }
}

// FP8 E4M3 against a table of its 127 finite magnitudes built from the definition (exponent bias
// 7, 3 mantissa bits, subnormals in steps of 2^-9), every code and two million floats: each to the
// nearest magnitude, ties to the even code, past 448 to 448, NaN to 0.
TEST(Fp8E4M3, MatchesTheDefinitionBothWays) {
  std::vector<double> magnitudes;
  for (int code = 0; code < 0x7F; ++code) {
    const int exponent = code >> 3, mantissa = code & 7;
    magnitudes.push_back(exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10));
  }
  EXPECT_EQ(magnitudes.back(), 448.0);
  for (int code = 0; code < 256; ++code) {
    const float value = fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    const double magnitude = magnitudes[code & 0x7F];
    ASSERT_EQ(value, code & 0x80 ? -magnitude : magnitude) << code;
    ASSERT_EQ(std::signbit(value), (code & 0x80) != 0) << code;
    ASSERT_EQ(float_to_fp8_e4m3(value), code) << code;
  }
  auto expected = [&](float value) -> std::uint8_t {
    if (std::isnan(value)) return 0;
    const std::uint8_t sign = std::signbit(value) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(value));
    if (a >= 448) return sign | 0x7E;
    const auto above =
        static_cast<std::size_t>(std::lower_bound(magnitudes.begin(), magnitudes.end(), a) - magnitudes.begin());
    if (magnitudes[above] == a) return static_cast<std::uint8_t>(sign | above);
    const std::size_t below = above - 1;
    const double to_below = a - magnitudes[below], to_above = magnitudes[above] - a;
    const std::size_t nearest = to_below < to_above   ? below
                                : to_above < to_below ? above
                                                      : (below % 2 == 0 ? below : above);
    return static_cast<std::uint8_t>(sign | nearest);
  };
  std::mt19937 random(11);
  std::uniform_real_distribution<float> in_range(-500.0f, 500.0f);
  std::vector<float> values = {
      0.0f,          -0.0f,    448.0f,    449.0f, 464.0f,
      1e30f,         INFINITY, -INFINITY, NAN,    0.0009765625f /* half the smallest subnormal: ties to 0 */,
      0.0029296875f, 17.0f};
  for (int index = 0; index < 1'000'000; ++index) {
    values.push_back(in_range(random));
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(random())));
  }
  for (double magnitude : magnitudes) values.push_back(static_cast<float>(magnitude * 1.0000001));
  for (std::size_t code = 0; code + 1 < magnitudes.size(); ++code) {  // every midpoint: a tie
    values.push_back(static_cast<float>((magnitudes[code] + magnitudes[code + 1]) / 2));
  }
  for (float value : values) ASSERT_EQ(float_to_fp8_e4m3(value), expected(value)) << value;
}

TEST(QuantBlocks, Q8_0LayoutAndRoundTrip) {
  std::vector<float> values(64);
  for (std::size_t j = 0; j < 32; ++j) values[j] = static_cast<float>(j) - 16.0f;  // max |x| 16
  // The second block all zeros: scale 0, values 0.
  std::vector<BlockQ8_0> blocks(2);
  quantize_q8_0(values, blocks);
  EXPECT_EQ(half_to_float(blocks[0].scale), half_to_float(float_to_half(16.0f / 127.0f)));
  EXPECT_EQ(blocks[0].values[0], -127);
  EXPECT_EQ(blocks[0].values[16], 0);
  EXPECT_EQ(blocks[0].values[24], std::round(8.0f * 127.0f / 16.0f));
  EXPECT_EQ(blocks[1].scale, 0);
  std::vector<float> back(64);
  dequantize_q8_0(blocks, back);
  float scale = half_to_float(blocks[0].scale);
  for (std::size_t j = 0; j < 32; ++j) EXPECT_NEAR(back[j], values[j], scale * 0.5f + 16.0f * 1e-3f) << j;
  for (std::size_t j = 32; j < 64; ++j) EXPECT_EQ(back[j], 0.0f);
  // In the file, a block is the half then 32 bytes.
  std::uint8_t raw[34];
  std::memcpy(raw, &blocks[0], sizeof(raw));
  EXPECT_EQ(raw[2], static_cast<std::uint8_t>(-127));
}

TEST(QuantBlocks, Q4_0LayoutAndRoundTrip) {
  std::vector<float> values(32);
  for (std::size_t j = 0; j < 32; ++j) values[j] = 0.25f * static_cast<float>(j) - 2.0f;  // -2 .. 5.75
  std::vector<BlockQ4_0> blocks(1);
  quantize_q4_0(values, blocks);
  // The largest magnitude is +5.75: d = 5.75 / -8, so it maps to q = 0 (value -8 * d).
  float scale = half_to_float(blocks[0].scale);
  EXPECT_EQ(scale, half_to_float(float_to_half(5.75f / -8.0f)));
  EXPECT_EQ(blocks[0].nibbles[15] >> 4, 0);  // value 31 = 5.75, in the high nibble of byte 15
  std::vector<float> back(32);
  dequantize_q4_0(blocks, back);
  for (std::size_t j = 0; j < 32; ++j) {
    int low = j < 16 ? blocks[0].nibbles[j] & 0x0F : blocks[0].nibbles[j - 16] >> 4;
    EXPECT_EQ(back[j], static_cast<float>(low - 8) * scale) << j;
    EXPECT_NEAR(back[j], values[j], std::abs(scale) * 0.5f + 5.75f * 1e-3f) << j;
  }
}

TEST(QuantBlocks, RandomRowsStayWithinEachFormatsBound) {
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> values(std::size_t{32} * 500);
  for (float& value : values) value = normal(random);
  std::vector<BlockQ8_0> q8(500);
  std::vector<BlockQ4_0> q4(500);
  quantize_q8_0(values, q8);
  quantize_q4_0(values, q4);
  std::vector<float> back8(values.size()), back4(values.size());
  dequantize_q8_0(q8, back8);
  dequantize_q4_0(q4, back4);
  for (std::size_t block = 0; block < 500; ++block) {
    float largest = 0;
    for (std::size_t j = 0; j < 32; ++j) largest = std::max(largest, std::abs(values[block * 32 + j]));
    for (std::size_t j = 0; j < 32; ++j) {
      std::size_t at = block * 32 + j;
      // Half a step, plus the scale's own rounding to half precision (2^-11 relative).
      ASSERT_LE(std::abs(back8[at] - values[at]), largest / 127.0f * 0.5f + largest * 1e-3f) << at;
      ASSERT_LE(std::abs(back4[at] - values[at]), largest / 8.0f * 1.0f + largest * 1e-3f) << at;
    }
  }
}

// Q4_K: the packed 6-bit scales read back as written for every value, a hand-made block
// dequantized as ggml's formula says, and random rows within the format's bound.
TEST(QuantBlocks, Q4_KLayoutAndRoundTrip) {
  BlockQ4_K block{};
  block.scale = float_to_half(0.5f);
  block.min_scale = float_to_half(0.25f);
  // Sub-block j: scale j + 1, min 2 j (the last four also use the top bits: 40 + j, 50 + j).
  const std::uint8_t scales[8] = {1, 2, 3, 4, 44, 45, 46, 47};
  const std::uint8_t mins[8] = {0, 2, 4, 6, 54, 55, 56, 57};
  // Packed by hand as ggml lays them out.
  for (int j = 0; j < 4; ++j) {
    block.scales[j] = static_cast<std::uint8_t>(scales[j] | ((scales[j + 4] >> 4) << 6));
    block.scales[j + 4] = static_cast<std::uint8_t>(mins[j] | ((mins[j + 4] >> 4) << 6));
    block.scales[j + 8] = static_cast<std::uint8_t>((scales[j + 4] & 0x0F) | ((mins[j + 4] & 0x0F) << 4));
  }
  for (std::size_t byte = 0; byte < 128; ++byte) block.nibbles[byte] = static_cast<std::uint8_t>(byte * 7);
  std::vector<float> values(256);
  dequantize_q4_k(std::span(&block, 1), values);
  for (std::size_t at = 0; at < 256; ++at) {
    std::size_t chunk = at / 64, within = at % 64, sub = 2 * chunk + within / 32;
    std::uint8_t byte = block.nibbles[chunk * 32 + within % 32];
    int level = within < 32 ? (byte & 0x0F) : (byte >> 4);
    ASSERT_EQ(values[at], 0.5f * static_cast<float>(scales[sub]) * static_cast<float>(level) -
                              0.25f * static_cast<float>(mins[sub]))
        << at;
  }
  std::mt19937 random(9);
  std::normal_distribution<float> normal(0.5f, 1.0f);
  std::vector<float> row(std::size_t{256} * 40);
  for (float& value : row) value = normal(random);
  std::vector<BlockQ4_K> blocks(40);
  quantize_q4_k(row, blocks);
  std::vector<float> back(row.size());
  dequantize_q4_k(blocks, back);
  for (std::size_t sub = 0; sub < row.size() / 32; ++sub) {
    float low = std::min(0.0f, *std::min_element(row.begin() + sub * 32, row.begin() + sub * 32 + 32));
    float high = *std::max_element(row.begin() + sub * 32, row.begin() + sub * 32 + 32);
    float block_range = 0;  // the block's widest sub-block, which sets the 6-bit grid
    std::size_t first = sub / 8 * 256;
    for (std::size_t other = first; other < first + 256; other += 32) {
      float other_low = std::min(0.0f, *std::min_element(row.begin() + other, row.begin() + other + 32));
      block_range = std::max(block_range, *std::max_element(row.begin() + other, row.begin() + other + 32) - other_low);
    }
    for (std::size_t at = sub * 32; at < sub * 32 + 32; ++at) {
      // Half a step, the steps' and offsets' 6-bit rounding (half of 1/63 of the widest), and halves.
      float bound = (high - low) / 15.0f * 0.5f + block_range / 63.0f * 8.0f + block_range * 2e-3f;
      ASSERT_LE(std::abs(back[at] - row[at]), bound) << at;
    }
  }
  // And on the whole no worse than Q4_0 at the same 4 bits (ggml's own comparison favours Q4_K).
  std::vector<BlockQ4_0> q4_0(row.size() / 32);
  quantize_q4_0(row, q4_0);
  std::vector<float> back4(row.size());
  dequantize_q4_0(q4_0, back4);
  double error_k = 0, error_0 = 0;
  for (std::size_t at = 0; at < row.size(); ++at) {
    error_k += std::pow(back[at] - row[at], 2);
    error_0 += std::pow(back4[at] - row[at], 2);
  }
  EXPECT_LT(error_k, error_0) << "Q4_K " << std::sqrt(error_k / row.size()) << " Q4_0 "
                              << std::sqrt(error_0 / row.size());
}

}  // namespace
}  // namespace slipway::kernels
