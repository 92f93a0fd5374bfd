// The AVX2 and AVX-512 dense-layer kernels. A tile is kRows input rows by kBlocks blocks of 16
// outputs: per input k it loads each block's weights once and broadcasts each row's input value,
// so the kRows * kBlocks accumulators (kept in registers) hide the multiply-add latency. Several
// rows share one block pair; a single row (an LLM decode step) runs eight blocks at once instead.
// Each accumulator lane follows the reference's sequence for its output (bias, then k in order,
// one fused multiply-add or one exact integer step each), so the results are the reference's bits.
// Each function carries its instruction set as a target attribute: the build needs no -march.
// The loops over a tile's rows and blocks are unrolled by pragma: -O2 would keep the accumulators
// in memory otherwise, at a third of the speed.
#include "kernels/dense_kernels_x86.h"

// GCC 12's AVX-512 headers pass an undefined source to the masked builtins of plain intrinsics
// (max, reduce, convert) and then warn that it is used uninitialized: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace slipway::kernels {
namespace {

std::uint32_t lane_mask(const std::size_t outputs, std::size_t block) {
  std::size_t valid = std::min<std::size_t>(kDenseBlock, outputs - block * kDenseBlock);
  return valid >= 32 ? 0xFFFFFFFFU : (1U << valid) - 1U;
}

// Stores one row's 16 outputs of `block`, with the layer's ReLU; a last partial block is masked.
__attribute__((target("avx512f"))) inline void store_block_avx512(const PackedDenseShape& layer, __m512 value,
                                                                  std::size_t row, std::size_t block, float* out) {
  if (layer.relu) value = _mm512_max_ps(value, _mm512_setzero_ps());
  _mm512_mask_storeu_ps(out + row * layer.outputs + block * kDenseBlock,
                        static_cast<__mmask16>(lane_mask(layer.outputs, block)), value);
}

// The same from two vectors of 8: the valid lanes are copied out of a buffer.
__attribute__((target("avx2"))) inline void store_block_avx2(const PackedDenseShape& layer, __m256 low, __m256 high,
                                                             std::size_t row, std::size_t block, float* out) {
  if (layer.relu) {
    low = _mm256_max_ps(low, _mm256_setzero_ps());
    high = _mm256_max_ps(high, _mm256_setzero_ps());
  }
  alignas(32) float lanes[kDenseBlock];
  _mm256_store_ps(lanes, low);
  _mm256_store_ps(lanes + 8, high);
  std::size_t valid = std::min<std::size_t>(kDenseBlock, layer.outputs - block * kDenseBlock);
  std::memcpy(out + row * layer.outputs + block * kDenseBlock, lanes, valid * sizeof(float));
}

// Runs tile(row, count) over the rows in groups of kRowsPerTile, then one at a time; `count` is a
// std::integral_constant, so each group size is a tile of its own.
template <std::size_t kRowsPerTile, typename Tile>
void for_each_row_group(std::size_t rows, Tile tile) {
  std::size_t row = 0;
  for (; row + kRowsPerTile <= rows; row += kRowsPerTile)
    tile(row, std::integral_constant<std::size_t, kRowsPerTile>{});
  for (; row < rows; ++row) tile(row, std::integral_constant<std::size_t, 1>{});
}

// With many rows, takes blocks four at a time off the front of [first, first + count) as tiles
// of six rows, `quad(row, count, block)` (count a std::integral_constant): 24 accumulators, so
// the weights loaded for an input are used six times and the FMA units have independent sums.
template <typename Quad>
void for_each_quad_tile(std::size_t rows, std::size_t& first, std::size_t& count, Quad quad) {
  if (rows < 6) return;
  for (; count >= 4; first += 4, count -= 4) {
    for_each_row_group<6>(rows, [&](std::size_t row, auto group) { quad(row, group, first); });
  }
}

// Walks the blocks [first, first + count) in tiles: `wide(block)` for eight blocks of one row at a
// time when rows are few, `pair(block)` for two blocks over rows, `single(block)` for the rest.
template <typename Wide, typename Pair, typename Single>
void for_each_tile(std::size_t rows, std::size_t first, std::size_t count, Wide wide, Pair pair, Single single) {
  std::size_t block = first, end = first + count;
  if (rows < 4) {
    for (; block + 8 <= end; block += 8) wide(block);
  }
  for (; block + 2 <= end; block += 2) pair(block);
  for (; block < end; ++block) single(block);
}

// ---------------------------------------------------------------------------------------------
// fp32, AVX-512: one vector per block.

template <std::size_t kRows, std::size_t kBlocks>
__attribute__((target("avx512f,fma"))) inline void f32_tile_avx512(const PackedDenseF32& layer, const float* in,
                                                                   std::size_t row, float* out, std::size_t block) {
  const std::size_t depth = layer.depth;
  __m512 sums[kBlocks][kRows];
  const float* weights[kBlocks];
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
    weights[b] = layer.weights.data() + (block + b) * depth * kDenseBlock;
    __m512 bias = _mm512_loadu_ps(layer.bias.data() + (block + b) * kDenseBlock);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) sums[b][r] = bias;
  }
  const float* input = in + row * depth;
  for (std::size_t k = 0; k < depth; ++k) {
    __m512 w[kBlocks];
#pragma GCC unroll 16
    for (std::size_t b = 0; b < kBlocks; ++b) w[b] = _mm512_loadu_ps(weights[b] + k * kDenseBlock);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      __m512 x = _mm512_set1_ps(input[r * depth + k]);
#pragma GCC unroll 16
      for (std::size_t b = 0; b < kBlocks; ++b) sums[b][r] = _mm512_fmadd_ps(x, w[b], sums[b][r]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) store_block_avx512(layer, sums[b][r], row + r, block + b, out);
  }
}

// ---------------------------------------------------------------------------------------------
// fp32, AVX2: two vectors of 8 per block.

template <std::size_t kRows, std::size_t kBlocks>
__attribute__((target("avx2,fma"))) inline void f32_tile_avx2(const PackedDenseF32& layer, const float* in,
                                                              std::size_t row, float* out, std::size_t block) {
  const std::size_t depth = layer.depth;
  __m256 sums[kBlocks][2][kRows];
  const float* weights[kBlocks];
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
    weights[b] = layer.weights.data() + (block + b) * depth * kDenseBlock;
#pragma GCC unroll 16
    for (std::size_t half = 0; half < 2; ++half) {
      __m256 bias = _mm256_loadu_ps(layer.bias.data() + (block + b) * kDenseBlock + half * 8);
#pragma GCC unroll 16
      for (std::size_t r = 0; r < kRows; ++r) sums[b][half][r] = bias;
    }
  }
  const float* input = in + row * depth;
  for (std::size_t k = 0; k < depth; ++k) {
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      __m256 x = _mm256_set1_ps(input[r * depth + k]);
#pragma GCC unroll 16
      for (std::size_t b = 0; b < kBlocks; ++b) {
#pragma GCC unroll 16
        for (std::size_t half = 0; half < 2; ++half) {
          __m256 w = _mm256_loadu_ps(weights[b] + k * kDenseBlock + half * 8);
          sums[b][half][r] = _mm256_fmadd_ps(x, w, sums[b][half][r]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      store_block_avx2(layer, sums[b][0][r], sums[b][1][r], row + r, block + b, out);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// int8: the epilogue of one block of one row, as the reference computes it.

__attribute__((target("avx512f"))) inline void int8_store_avx512(const PackedDenseInt8& layer, const QuantizedRows& in,
                                                                 std::size_t row, std::size_t block, __m512i sum,
                                                                 float* out) {
  std::size_t offset = block * kDenseBlock;
  __m512 scale = _mm512_mul_ps(_mm512_set1_ps(in.scales[row]), _mm512_loadu_ps(layer.scales.data() + offset));
  store_block_avx512(layer,
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, _mm512_loadu_ps(layer.bias.data() + offset)), row,
                     block, out);
}

template <std::size_t kRows, std::size_t kBlocks>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void int8_tile_vnni(const PackedDenseInt8& layer,
                                                                                  const QuantizedRows& in,
                                                                                  std::size_t row, float* out,
                                                                                  std::size_t block) {
  __m512i sums[kBlocks][kRows];
  const std::int8_t* weights[kBlocks];
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
    weights[b] = layer.weights.data() + (block + b) * layer.depth4 * kDenseBlock;
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) sums[b][r] = _mm512_setzero_si512();
  }
  const std::uint8_t* input = in.values.data() + row * in.stride;
  for (std::size_t k = 0; k < layer.depth4; k += 4) {
    __m512i w[kBlocks];
#pragma GCC unroll 16
    for (std::size_t b = 0; b < kBlocks; ++b) w[b] = _mm512_loadu_si512(weights[b] + k * kDenseBlock);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      std::int32_t four = 0;
      std::memcpy(&four, input + r * in.stride + k, sizeof(four));
      __m512i x = _mm512_set1_epi32(four);
#pragma GCC unroll 16
      for (std::size_t b = 0; b < kBlocks; ++b) sums[b][r] = _mm512_dpbusd_epi32(sums[b][r], x, w[b]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
    // The inputs were stored as q + 128: take 128 times each output's weight sum back off (the
    // arithmetic wraps, and the true sum fits 32 bits, so this is exact).
    __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(layer.sums.data() + (block + b) * kDenseBlock), 7);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      int8_store_avx512(layer, in, row + r, block + b, _mm512_sub_epi32(sums[b][r], offset), out);
    }
  }
}

// AVX2 has no unsigned-by-signed dot product without 16-bit saturation, so it multiplies signed
// by signed: |x| by w carrying x's sign, whose pair sums (at most 2 * 127 * 127) fit 16 bits.
template <std::size_t kRows>
__attribute__((target("avx2,fma"))) inline void int8_tile_avx2(const PackedDenseInt8& layer, const QuantizedRows& in,
                                                               std::size_t row, float* out, std::size_t block) {
  __m256i sums[2][kRows];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < kRows; ++r) sums[0][r] = sums[1][r] = _mm256_setzero_si256();
  const std::int8_t* weights = layer.weights.data() + block * layer.depth4 * kDenseBlock;
  const std::uint8_t* input = in.values.data() + row * in.stride;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t k = 0; k < layer.depth4; k += 4) {
    __m256i w[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + k * kDenseBlock)),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + k * kDenseBlock + 32))};
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      std::int32_t four = 0;
      std::memcpy(&four, input + r * in.stride + k, sizeof(four));
      __m256i x = _mm256_xor_si256(_mm256_set1_epi32(four), flip);  // q + 128 back to q
      __m256i magnitude = _mm256_sign_epi8(x, x);
#pragma GCC unroll 16
      for (std::size_t half = 0; half < 2; ++half) {
        __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w[half], x));
        sums[half][r] = _mm256_add_epi32(sums[half][r], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  std::size_t offset = block * kDenseBlock;
#pragma GCC unroll 16
  for (std::size_t r = 0; r < kRows; ++r) {
    __m256 values[2];
#pragma GCC unroll 16
    for (std::size_t half = 0; half < 2; ++half) {
      __m256 scale =
          _mm256_mul_ps(_mm256_set1_ps(in.scales[row + r]), _mm256_loadu_ps(layer.scales.data() + offset + half * 8));
      values[half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[half][r]), scale,
                                     _mm256_loadu_ps(layer.bias.data() + offset + half * 8));
    }
    store_block_avx2(layer, values[0], values[1], row + r, block, out);
  }
}

}  // namespace

__attribute__((target("avx512f,fma"))) void dense_f32_avx512(const PackedDenseF32& layer, const float* in,
                                                             std::size_t rows, float* out, std::size_t first_block,
                                                             std::size_t block_count) {
  for_each_quad_tile(rows, first_block, block_count, [&](std::size_t row, auto count, std::size_t block) {
    f32_tile_avx512<decltype(count)::value, 4>(layer, in, row, out, block);
  });
  for_each_tile(
      rows, first_block, block_count,
      [&](std::size_t block) {
        for_each_row_group<1>(rows, [&](std::size_t row, auto) { f32_tile_avx512<1, 8>(layer, in, row, out, block); });
      },
      [&](std::size_t block) {
        for_each_row_group<4>(rows, [&](std::size_t row, auto count) {
          f32_tile_avx512<decltype(count)::value, 2>(layer, in, row, out, block);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<8>(rows, [&](std::size_t row, auto count) {
          f32_tile_avx512<decltype(count)::value, 1>(layer, in, row, out, block);
        });
      });
}

__attribute__((target("avx2,fma"))) void dense_f32_avx2(const PackedDenseF32& layer, const float* in, std::size_t rows,
                                                        float* out, std::size_t first_block, std::size_t block_count) {
  for_each_tile(
      rows, first_block, block_count,
      [&](std::size_t block) {
        // Eight blocks as two tiles of four: AVX2 has half the registers.
        for_each_row_group<1>(rows, [&](std::size_t row, auto) {
          f32_tile_avx2<1, 4>(layer, in, row, out, block);
          f32_tile_avx2<1, 4>(layer, in, row, out, block + 4);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<2>(rows, [&](std::size_t row, auto count) {
          f32_tile_avx2<decltype(count)::value, 2>(layer, in, row, out, block);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<4>(rows, [&](std::size_t row, auto count) {
          f32_tile_avx2<decltype(count)::value, 1>(layer, in, row, out, block);
        });
      });
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void dense_int8_avx512_vnni(const PackedDenseInt8& layer,
                                                                                   const QuantizedRows& in, float* out,
                                                                                   std::size_t first_block,
                                                                                   std::size_t block_count) {
  for_each_tile(
      in.rows, first_block, block_count,
      [&](std::size_t block) {
        for_each_row_group<1>(in.rows,
                              [&](std::size_t row, auto) { int8_tile_vnni<1, 8>(layer, in, row, out, block); });
      },
      [&](std::size_t block) {
        for_each_row_group<4>(in.rows, [&](std::size_t row, auto count) {
          int8_tile_vnni<decltype(count)::value, 2>(layer, in, row, out, block);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<8>(in.rows, [&](std::size_t row, auto count) {
          int8_tile_vnni<decltype(count)::value, 1>(layer, in, row, out, block);
        });
      });
}

__attribute__((target("avx2,fma"))) void dense_int8_avx2(const PackedDenseInt8& layer, const QuantizedRows& in,
                                                         float* out, std::size_t first_block, std::size_t block_count) {
  for (std::size_t block = first_block; block < first_block + block_count; ++block) {
    for_each_row_group<4>(in.rows, [&](std::size_t row, auto count) {
      int8_tile_avx2<decltype(count)::value>(layer, in, row, out, block);
    });
  }
}

// The row quantizers: max|x| in vectors (max is exact, so the order does not matter), then each
// value times 127 / max|x|, rounded to nearest even, clamped and offset, as the reference does.

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_row_avx512(const float* in, std::size_t depth,
                                                                              std::uint8_t* out, float* scale) {
  // max|x| (NaN lanes leave it as it was: max returns its second operand then), and whether any
  // value is not finite (x - x is NaN exactly then).
  __m512 largest = _mm512_setzero_ps();
  __mmask16 not_finite = 0;
  for (std::size_t k = 0; k < depth; k += 16) {
    auto mask = static_cast<__mmask16>(depth - k >= 16 ? 0xFFFF : (1U << (depth - k)) - 1U);
    __m512 x = _mm512_maskz_loadu_ps(mask, in + k);
    not_finite |= _mm512_cmp_ps_mask(_mm512_sub_ps(x, x), _mm512_setzero_ps(), _CMP_UNORD_Q);
    largest = _mm512_max_ps(_mm512_abs_ps(x), largest);
  }
  float top = _mm512_reduce_max_ps(largest);
  if (not_finite != 0 || top < kTinyMagnitude) {
    // As the reference: zeros, with scale NaN for a row that is not finite and 1 for a tiny one.
    std::memset(out, 128, depth);
    *scale = not_finite != 0 ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
    return;
  }
  *scale = top / 127.0f;
  const __m512 inverse = _mm512_set1_ps(127.0f / top);
  const __m512 low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (std::size_t k = 0; k < depth; k += 16) {
    auto mask = static_cast<__mmask16>(depth - k >= 16 ? 0xFFFF : (1U << (depth - k)) - 1U);
    __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, in + k), inverse);
    __m512 rounded = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(rounded, low), high)), offset);
    _mm_mask_storeu_epi8(out + k, mask, _mm512_cvtepi32_epi8(q));
  }
}

__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* in, std::size_t depth, std::uint8_t* out,
                                                           float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 largest = _mm256_setzero_ps();
  __m256 unordered = _mm256_setzero_ps();
  std::size_t k = 0;
  for (; k + 8 <= depth; k += 8) {
    __m256 x = _mm256_loadu_ps(in + k);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(_mm256_sub_ps(x, x), _mm256_setzero_ps(), _CMP_UNORD_Q));
    largest = _mm256_max_ps(_mm256_andnot_ps(sign, x), largest);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, largest);
  float top = *std::max_element(lanes, lanes + 8);
  bool not_finite = _mm256_movemask_ps(unordered) != 0;
  for (std::size_t rest = k; rest < depth; ++rest) {
    not_finite = not_finite || !std::isfinite(in[rest]);
    top = std::max(top, std::abs(in[rest]));
  }
  if (not_finite || top < kTinyMagnitude) {
    std::memset(out, 128, depth);
    *scale = not_finite ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
    return;
  }
  *scale = top / 127.0f;
  float inverse_value = 127.0f / top;
  const __m256 inverse = _mm256_set1_ps(inverse_value);
  const __m256 low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f);
  for (k = 0; k + 8 <= depth; k += 8) {
    __m256 rounded =
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(in + k), inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    alignas(32) std::int32_t q[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q),
                       _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(rounded, low), high)));
    for (int lane = 0; lane < 8; ++lane) out[k + lane] = static_cast<std::uint8_t>(q[lane] + 128);
  }
  for (; k < depth; ++k) {
    float rounded = std::nearbyint(in[k] * inverse_value);
    out[k] = static_cast<std::uint8_t>(static_cast<int>(std::clamp(rounded, -127.0f, 127.0f)) + 128);
  }
}

// bf16. AVX-512 BF16 adds each pair's odd product, then its even one, to 16 fp32 sums in one
// instruction, each step a fused multiply-add whose subnormal result is flushed to a signed zero;
// AVX2 widens the bf16 values to fp32 (a shift) and does the same steps, flush included.

template <std::size_t kRows, std::size_t kBlocks>
__attribute__((target("avx512f,avx512bf16"))) inline void bf16_tile_avx512(const PackedDenseBf16& layer,
                                                                           const Bf16Rows& in, std::size_t row,
                                                                           float* out, std::size_t block) {
  __m512 sums[kBlocks][kRows];
  const std::uint16_t* weights[kBlocks];
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
    weights[b] = layer.weights.data() + (block + b) * layer.depth2 * kDenseBlock;
    __m512 bias = _mm512_loadu_ps(layer.bias.data() + (block + b) * kDenseBlock);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) sums[b][r] = bias;
  }
  const std::uint16_t* input = in.values.data() + row * in.stride;
  for (std::size_t k = 0; k < layer.depth2; k += 2) {
    __m512bh w[kBlocks];
#pragma GCC unroll 16
    for (std::size_t b = 0; b < kBlocks; ++b) {
      w[b] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(weights[b] + k * kDenseBlock));
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      std::int32_t pair = 0;
      std::memcpy(&pair, input + r * in.stride + k, sizeof(pair));
      __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 16
      for (std::size_t b = 0; b < kBlocks; ++b) sums[b][r] = _mm512_dpbf16_ps(sums[b][r], x, w[b]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t b = 0; b < kBlocks; ++b) {
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) store_block_avx512(layer, sums[b][r], row + r, block + b, out);
  }
}

__attribute__((target("avx512f,avx512bf16"))) void dense_bf16_avx512(const PackedDenseBf16& layer, const Bf16Rows& in,
                                                                     float* out, std::size_t first_block,
                                                                     std::size_t block_count) {
  for_each_quad_tile(in.rows, first_block, block_count, [&](std::size_t row, auto count, std::size_t block) {
    bf16_tile_avx512<decltype(count)::value, 4>(layer, in, row, out, block);
  });
  for_each_tile(
      in.rows, first_block, block_count,
      [&](std::size_t block) {
        for_each_row_group<1>(in.rows,
                              [&](std::size_t row, auto) { bf16_tile_avx512<1, 8>(layer, in, row, out, block); });
      },
      [&](std::size_t block) {
        for_each_row_group<4>(in.rows, [&](std::size_t row, auto count) {
          bf16_tile_avx512<decltype(count)::value, 2>(layer, in, row, out, block);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<8>(in.rows, [&](std::size_t row, auto count) {
          bf16_tile_avx512<decltype(count)::value, 1>(layer, in, row, out, block);
        });
      });
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_row_bf16_avx512(const float* in,
                                                                                           std::size_t depth,
                                                                                           std::uint16_t* out) {
  for (std::size_t k = 0; k < depth; k += 16) {
    auto mask = static_cast<__mmask16>(depth - k >= 16 ? 0xFFFF : (1U << (depth - k)) - 1U);
    __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, in + k));
    _mm256_mask_storeu_epi16(out + k, mask, reinterpret_cast<__m256i>(rounded));
  }
}

// A subnormal lane becomes a zero of its sign, as vdpbf16ps flushes its results.
__attribute__((target("avx2,fma"))) inline __m256 flush_subnormal_avx2(__m256 value) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 normal =
      _mm256_cmp_ps(_mm256_andnot_ps(sign, value), _mm256_set1_ps(std::numeric_limits<float>::min()), _CMP_GE_OQ);
  return _mm256_or_ps(_mm256_and_ps(value, sign), _mm256_and_ps(value, normal));
}

template <std::size_t kRows>
__attribute__((target("avx2,fma"))) inline void bf16_tile_avx2(const PackedDenseBf16& layer, const Bf16Rows& in,
                                                               std::size_t row, float* out, std::size_t block) {
  __m256 sums[2][kRows];
#pragma GCC unroll 16
  for (std::size_t half = 0; half < 2; ++half) {
    __m256 bias = _mm256_loadu_ps(layer.bias.data() + block * kDenseBlock + half * 8);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) sums[half][r] = bias;
  }
  const std::uint16_t* weights = layer.weights.data() + block * layer.depth2 * kDenseBlock;
  const std::uint16_t* input = in.values.data() + row * in.stride;
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000U));
  for (std::size_t k = 0; k < layer.depth2; k += 2) {
    __m256 even[2], odd[2];
#pragma GCC unroll 16
    for (std::size_t half = 0; half < 2; ++half) {
      // Eight outputs' (k, k+1) pairs: the even weight in the low half of each 32-bit lane.
      __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + k * kDenseBlock + half * 16));
      even[half] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
      odd[half] = _mm256_castsi256_ps(_mm256_and_si256(pairs, high));
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kRows; ++r) {
      __m256 x_odd = _mm256_set1_ps(QuantizedTreesView::bf16_to_float(input[r * in.stride + k + 1]));
      __m256 x_even = _mm256_set1_ps(QuantizedTreesView::bf16_to_float(input[r * in.stride + k]));
#pragma GCC unroll 16
      for (std::size_t half = 0; half < 2; ++half) {
        sums[half][r] = flush_subnormal_avx2(_mm256_fmadd_ps(x_odd, odd[half], sums[half][r]));
        sums[half][r] = flush_subnormal_avx2(_mm256_fmadd_ps(x_even, even[half], sums[half][r]));
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < kRows; ++r) store_block_avx2(layer, sums[0][r], sums[1][r], row + r, block, out);
}

__attribute__((target("avx2,fma"))) void dense_bf16_avx2(const PackedDenseBf16& layer, const Bf16Rows& in, float* out,
                                                         std::size_t first_block, std::size_t block_count) {
  for (std::size_t block = first_block; block < first_block + block_count; ++block) {
    for_each_row_group<4>(in.rows, [&](std::size_t row, auto count) {
      bf16_tile_avx2<decltype(count)::value>(layer, in, row, out, block);
    });
  }
}

}  // namespace slipway::kernels
