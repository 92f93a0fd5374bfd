// GGUF's Q8_0 and Q4_0 blocks, IEEE half precision and OCP FP8 E4M3, the blocks written from
// ggml-common.h's layouts and ggml-quants.c's reference quantizers (the arithmetic, not the code).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "slipway/kernels.h"

namespace slipway::kernels {

namespace {

// A finite float's magnitude (its bits, sign cleared) in a narrower binary format with
// kMantissaBits fraction bits and exponent bias kBias, rounded to nearest, ties to even; the
// caller handles what lies past the format's largest value. Below its smallest normal (2^(1 -
// kBias)) it is a subnormal in steps of 2^(1 - kBias - kMantissaBits), the step count being its
// bits (rounding up into the smallest normal gives that normal's bits).
template <int kMantissaBits, int kBias>
std::uint32_t round_to_narrow_float(std::uint32_t magnitude) {
  constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(127 - kBias) << 23;
  constexpr int kDroppedBits = 23 - kMantissaBits;
  if (magnitude < kRebias + (1U << 23)) {
    constexpr auto kStepsPerUnit = static_cast<float>(1ULL << (kBias - 1 + kMantissaBits));  // a power of two
    return static_cast<std::uint32_t>(std::nearbyint(std::bit_cast<float>(magnitude) * kStepsPerUnit));  // exact
  }
  // Normal: rebias the exponent and round the fraction, ties to even.
  std::uint32_t rounded = magnitude - kRebias;
  rounded += (1U << (kDroppedBits - 1)) - 1 + ((rounded >> kDroppedBits) & 1U);
  return rounded >> kDroppedBits;
}

}  // namespace

std::uint16_t float_to_half(float value) {
  auto bits = std::bit_cast<std::uint32_t>(value);
  std::uint32_t sign = (bits >> 16) & 0x8000U;
  std::uint32_t magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);   // NaN, quiet
  if (magnitude >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);  // rounds past 65504
  return static_cast<std::uint16_t>(sign | round_to_narrow_float<10, 15>(magnitude));
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

std::uint8_t float_to_fp8_e4m3(float value) {
  auto bits = std::bit_cast<std::uint32_t>(value);
  auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80U);
  std::uint32_t magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) return 0;                                        // NaN
  if (magnitude > 0x43E00000U) return static_cast<std::uint8_t>(sign | 0x7EU);  // past 448: saturates
  return static_cast<std::uint8_t>(sign | round_to_narrow_float<3, 7>(magnitude));
}

float fp8_e4m3_to_float(std::uint8_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x80U) << 24;
  const std::uint32_t exponent = (bits >> 3) & 0xFU, fraction = bits & 0x7U;
  if (exponent == 0) {  // zero or subnormal: fraction x 2^-9
    const float magnitude = static_cast<float>(fraction) * 0.001953125f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 15 && fraction == 7) return std::bit_cast<float>(sign | 0x7FC00000U);  // NaN
  return std::bit_cast<float>(sign | ((exponent + 120) << 23) | (fraction << 20));
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
      float scaled = std::round(x[j] * inverse);  // NaN or an infinity (not finite input) stores 0
      blocks[block].values[j] =
          static_cast<std::int8_t>(std::isfinite(scaled) ? std::clamp(scaled, -127.0f, 127.0f) : 0.0f);
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
      float shifted = value * inverse + 8.5f;
      if (!std::isfinite(shifted)) return std::uint8_t{8};  // not-finite input: stored as 0
      return static_cast<std::uint8_t>(
          std::min(15, static_cast<int>(static_cast<std::int8_t>(std::clamp(shifted, 0.0f, 16.0f)))));
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

// Sub-block j's 6-bit step and offset multipliers, as ggml's get_scale_min_k4 unpacks them: the
// first four pairs in the low six bits of bytes 0-3 and 4-7, the last four split between the
// nibbles of bytes 8-11 and the top two bits of bytes 0-7.
void unpack_q4_k_scale_min(std::size_t j, const std::uint8_t* packed, std::uint8_t& scale, std::uint8_t& min) {
  if (j < 4) {
    scale = packed[j] & 63;
    min = packed[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

namespace {

void pack_scale_min(std::size_t j, std::uint8_t scale, std::uint8_t min, std::uint8_t* packed) {
  if (j < 4) {
    packed[j] = static_cast<std::uint8_t>((packed[j] & 0xC0) | scale);
    packed[j + 4] = static_cast<std::uint8_t>((packed[j + 4] & 0xC0) | min);
  } else {
    packed[j + 4] = static_cast<std::uint8_t>((scale & 0x0F) | ((min & 0x0F) << 4));
    packed[j - 4] = static_cast<std::uint8_t>((packed[j - 4] & 0x3F) | ((scale >> 4) << 6));
    packed[j] = static_cast<std::uint8_t>((packed[j] & 0x3F) | ((min >> 4) << 6));
  }
}

}  // namespace

void quantize_q4_k(std::span<const float> values, std::span<BlockQ4_K> blocks) {
  constexpr std::size_t kSubBlocks = kSuperBlock / kQuantBlock;
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    const float* x = values.data() + block * kSuperBlock;
    BlockQ4_K& out = blocks[block];
    // Per sub-block: x ~ step * q - offset with q in 0..15; the offset (minus the smallest value)
    // is never below 0, as in ggml.
    float steps[kSubBlocks], offsets[kSubBlocks];
    float largest_step = 0.0f, largest_offset = 0.0f;
    for (std::size_t j = 0; j < kSubBlocks; ++j) {
      float low = std::min(0.0f, *std::min_element(x + j * kQuantBlock, x + (j + 1) * kQuantBlock));
      float high = *std::max_element(x + j * kQuantBlock, x + (j + 1) * kQuantBlock);
      steps[j] = (high - low) / 15.0f;
      offsets[j] = -low;
      largest_step = std::max(largest_step, steps[j]);
      largest_offset = std::max(largest_offset, offsets[j]);
    }
    // The steps and offsets as 6-bit multiples of d and dmin.
    float inverse_step = largest_step > 0.0f ? 63.0f / largest_step : 0.0f;
    float inverse_offset = largest_offset > 0.0f ? 63.0f / largest_offset : 0.0f;
    std::memset(out.scales, 0, sizeof(out.scales));
    for (std::size_t j = 0; j < kSubBlocks; ++j) {
      auto scale = static_cast<std::uint8_t>(std::min(63.0f, std::nearbyint(inverse_step * steps[j])));
      auto min = static_cast<std::uint8_t>(std::min(63.0f, std::nearbyint(inverse_offset * offsets[j])));
      pack_scale_min(j, scale, min, out.scales);
    }
    out.scale = float_to_half(largest_step / 63.0f);
    out.min_scale = float_to_half(largest_offset / 63.0f);
    // Each value against the step and offset dequantization will use.
    float d = half_to_float(out.scale), dmin = half_to_float(out.min_scale);
    std::uint8_t levels[kSuperBlock];
    for (std::size_t j = 0; j < kSubBlocks; ++j) {
      std::uint8_t scale = 0, min = 0;
      unpack_q4_k_scale_min(j, out.scales, scale, min);
      float step = d * scale, offset = dmin * min;
      for (std::size_t l = 0; l < kQuantBlock; ++l) {
        float level = step > 0.0f ? std::nearbyint((x[j * kQuantBlock + l] + offset) / step) : 0.0f;
        if (!std::isfinite(level)) level = 0.0f;  // not-finite input
        levels[j * kQuantBlock + l] = static_cast<std::uint8_t>(std::clamp(level, 0.0f, 15.0f));
      }
    }
    for (std::size_t chunk = 0; chunk < kSuperBlock / 64; ++chunk) {
      for (std::size_t l = 0; l < kQuantBlock; ++l) {
        out.nibbles[chunk * 32 + l] =
            static_cast<std::uint8_t>(levels[chunk * 64 + l] | (levels[chunk * 64 + 32 + l] << 4));
      }
    }
  }
}

void dequantize_q4_k(std::span<const BlockQ4_K> blocks, std::span<float> values) {
  for (std::size_t block = 0; block < blocks.size(); ++block) {
    const BlockQ4_K& in = blocks[block];
    float d = half_to_float(in.scale), dmin = half_to_float(in.min_scale);
    float* out = values.data() + block * kSuperBlock;
    for (std::size_t chunk = 0; chunk < kSuperBlock / 64; ++chunk) {
      std::uint8_t scale = 0, min = 0;
      unpack_q4_k_scale_min(2 * chunk, in.scales, scale, min);
      float low_step = d * scale, low_offset = dmin * min;
      unpack_q4_k_scale_min(2 * chunk + 1, in.scales, scale, min);
      float high_step = d * scale, high_offset = dmin * min;
      const std::uint8_t* nibbles = in.nibbles + chunk * 32;
      for (std::size_t l = 0; l < kQuantBlock; ++l) {
        out[chunk * 64 + l] = low_step * static_cast<float>(nibbles[l] & 0x0F) - low_offset;
        out[chunk * 64 + 32 + l] = high_step * static_cast<float>(nibbles[l] >> 4) - high_offset;
      }
    }
  }
}

}  // namespace slipway::kernels
