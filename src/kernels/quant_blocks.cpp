// GGUF's Q8_0 and Q4_0 blocks and IEEE half precision, written from ggml-common.h's layouts and
// ggml-quants.c's reference quantizers (the arithmetic, not the code).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "slipway/kernels.h"

namespace slipway::kernels {

std::uint16_t float_to_half(float value) {
  auto bits = std::bit_cast<std::uint32_t>(value);
  std::uint32_t sign = (bits >> 16) & 0x8000U;
  std::uint32_t magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);   // NaN, quiet
  if (magnitude >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);  // rounds past 65504
  if (magnitude < 0x38800000U) {
    // Below half's smallest normal (2^-14): a subnormal half, in steps of 2^-24, to nearest even.
    float scaled = std::bit_cast<float>(magnitude) * 16777216.0f;  // exact: a power of two
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit fraction to 10, ties to even.
  std::uint32_t rounded = magnitude - 0x38000000U;
  rounded += 0x0FFFU + ((rounded >> 13) & 1U);
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

float half_to_float(std::uint16_t bits) {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1FU;
  std::uint32_t fraction = bits & 0x3FFU;
  if (exponent == 0) {  // zero or subnormal: fraction x 2^-24
    float magnitude = static_cast<float>(fraction) * 5.9604644775390625e-8f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) {  // infinity, or NaN made quiet (as the CPU's conversion does)
    return std::bit_cast<float>(sign | 0x7F800000U | (fraction != 0 ? 0x00400000U : 0U) | (fraction << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (fraction << 13));
}

void quantize_q8_0(std::span<const float> values, std::span<BlockQ8_0> blocks) {
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    const float* x = values.data() + block * kQuantBlock;
    float largest = 0.0f;
    for (std::size_t j = 0; j < kQuantBlock; ++j) largest = std::max(largest, std::abs(x[j]));
    float scale = largest / 127.0f;
    float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    blocks[block].scale = float_to_half(scale);
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      blocks[block].values[j] = static_cast<std::int8_t>(std::round(x[j] * inverse));
    }
  }
}

void dequantize_q8_0(std::span<const BlockQ8_0> blocks, std::span<float> values) {
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    float scale = half_to_float(blocks[block].scale);
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      values[block * kQuantBlock + j] = static_cast<float>(blocks[block].values[j]) * scale;
    }
  }
}

void quantize_q4_0(std::span<const float> values, std::span<BlockQ4_0> blocks) {
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    const float* x = values.data() + block * kQuantBlock;
    // The value of largest magnitude, with its sign: it maps to -8, the one end that is exact.
    float largest = 0.0f, signed_largest = 0.0f;
    for (std::size_t j = 0; j < kQuantBlock; ++j) {
      if (std::abs(x[j]) > largest) {
        largest = std::abs(x[j]);
        signed_largest = x[j];
      }
    }
    float scale = signed_largest / -8.0f;
    float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    blocks[block].scale = float_to_half(scale);
    auto quantize = [&](float value) {
      return static_cast<std::uint8_t>(
          std::min(15, static_cast<int>(static_cast<std::int8_t>(value * inverse + 8.5f))));
    };
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
      blocks[block].nibbles[j] = static_cast<std::uint8_t>(quantize(x[j]) | (quantize(x[j + kQuantBlock / 2]) << 4));
    }
  }
}

void dequantize_q4_0(std::span<const BlockQ4_0> blocks, std::span<float> values) {
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    float scale = half_to_float(blocks[block].scale);
    float* out = values.data() + block * kQuantBlock;
    for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
      out[j] = static_cast<float>((blocks[block].nibbles[j] & 0x0F) - 8) * scale;
      out[j + kQuantBlock / 2] = static_cast<float>((blocks[block].nibbles[j] >> 4) - 8) * scale;
    }
  }
}

}  // namespace slipway::kernels
