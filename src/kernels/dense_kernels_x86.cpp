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
#include "kernels/x86_intrinsics.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

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

// With many rows, takes blocks two at a time off the front of [first, first + count) as tiles of
// twelve rows, `pair(row, count, block)` (count a std::integral_constant; the rows after the last
// twelve go four at a time, then one): 24 accumulators, the two weight vectors loaded for an input
// used twelve times, and the pair's weights (2 x depth x 64 bytes) kept in the first-level cache
// across the rows. (Six rows by four blocks ran the 256 x 256 layer about 10% slower: its weights
// came from the second-level cache.)
template <typename Pair>
void for_each_wide_tile(std::size_t rows, std::size_t& first, std::size_t& count, Pair pair) {
  constexpr std::size_t kRowsPerTile = 12;
  if (rows < kRowsPerTile) return;
  for (; count >= 2; first += 2, count -= 2) {
    std::size_t row = 0;
    for (; row + kRowsPerTile <= rows; row += kRowsPerTile) {
      pair(row, std::integral_constant<std::size_t, kRowsPerTile>{}, first);
    }
    for_each_row_group<4>(rows - row, [&](std::size_t offset, auto group) { pair(row + offset, group, first); });
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
    weights[b] = layer.weights.data() + (block + b) * layer.padded_depth * kDenseBlock;
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
  const std::int8_t* weights = layer.weights.data() + block * layer.padded_depth * kDenseBlock;
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
  for_each_wide_tile(rows, first_block, block_count, [&](std::size_t row, auto count, std::size_t block) {
    f32_tile_avx512<decltype(count)::value, 2>(layer, in, row, out, block);
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

namespace {

// Rows [first_row, in.rows) of the VNNI kernel: all of them, or those after the AMX kernel's last
// whole tile of 16.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void int8_rows_vnni(const PackedDenseInt8& layer,
                                                                           const QuantizedRows& in,
                                                                           std::size_t first_row, float* out,
                                                                           std::size_t first_block,
                                                                           std::size_t block_count) {
  const std::size_t rows = in.rows - first_row;
  for_each_tile(
      rows, first_block, block_count,
      [&](std::size_t block) {
        for_each_row_group<1>(
            rows, [&](std::size_t row, auto) { int8_tile_vnni<1, 8>(layer, in, first_row + row, out, block); });
      },
      [&](std::size_t block) {
        for_each_row_group<4>(rows, [&](std::size_t row, auto count) {
          int8_tile_vnni<decltype(count)::value, 2>(layer, in, first_row + row, out, block);
        });
      },
      [&](std::size_t block) {
        for_each_row_group<8>(rows, [&](std::size_t row, auto count) {
          int8_tile_vnni<decltype(count)::value, 1>(layer, in, first_row + row, out, block);
        });
      });
}

}  // namespace

void dense_int8_avx512_vnni(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                            std::size_t block_count) {
  int8_rows_vnni(layer, in, 0, out, first_block, block_count);
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
    weights[b] = layer.weights.data() + (block + b) * layer.padded_depth * kDenseBlock;
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
  for_each_wide_tile(in.rows, first_block, block_count, [&](std::size_t row, auto count, std::size_t block) {
    bf16_tile_avx512<decltype(count)::value, 2>(layer, in, row, out, block);
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
  const std::uint16_t* weights = layer.weights.data() + block * layer.padded_depth * kDenseBlock;
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

// ---------------------------------------------------------------------------------------------
// AMX: tile products of 16 input rows by 16 outputs over 64 bytes of inputs (32 bf16 or 64 int8),
// sixteen times the multiply-adds of one vector instruction. Each call holds four sums tiles (two
// groups of 16 rows by two blocks, tmm0-3), two input tiles (tmm4-5) and two weight tiles
// (tmm6-7); a block's packed weights for 32 or 64 inputs are one 1 KiB tile as they lie, and the
// padding of rows and weights to whole tiles (kAmxTileBytes) lets every tile load read in place.
// The rows after the last whole group of 16 run with tiles of that many rows.

namespace {

constexpr std::size_t kTileRows = 16;

struct TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t column_bytes[16] = {};
  std::uint8_t rows[16] = {};
};

// Sums and input tiles of `rows` rows (at most 16), weight tiles of 16 (16 groups of inputs).
__attribute__((target("amx-tile"))) void configure_tiles(std::size_t rows) {
  alignas(64) TileConfig config;
  for (std::size_t tile = 0; tile < 8; ++tile) {
    config.rows[tile] = static_cast<std::uint8_t>(tile < 6 ? rows : kTileRows);
    config.column_bytes[tile] = kAmxTileBytes;
  }
  // GCC 12 does not see ldtilecfg read the whole 64 bytes and drops the stores above without this.
  __asm__ volatile("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// Runs tiles(inputs, row, block, groups, blocks) over the rows, 32 at a time, and the blocks,
// two at a time (groups and blocks std::integral_constants of 1 or 2); inputs[g] points at the
// first of group g's rows of `stride` values.
template <typename Value, typename Tiles>
void for_each_amx_tile(const Value* values, std::size_t stride, std::size_t rows, std::size_t first_block,
                       std::size_t block_count, Tiles tiles) {
  using One = std::integral_constant<std::size_t, 1>;
  using Two = std::integral_constant<std::size_t, 2>;
  const std::size_t end = first_block + block_count;
  auto run_blocks = [&](std::size_t row, auto groups) {
    const Value* inputs[2] = {values + row * stride,
                              decltype(groups)::value == 2 ? values + (row + kTileRows) * stride : nullptr};
    for (std::size_t block = first_block; block < end; block += 2) {
      if (block + 1 < end) {
        tiles(inputs, row, block, groups, Two{});
      } else {
        tiles(inputs, row, block, groups, One{});
      }
    }
  };
  configure_tiles(kTileRows);
  std::size_t row = 0;
  for (; row + 2 * kTileRows <= rows; row += 2 * kTileRows) run_blocks(row, Two{});
  for (; row + kTileRows <= rows; row += kTileRows) run_blocks(row, One{});
  if (row < rows) {
    configure_tiles(rows - row);
    run_blocks(row, One{});
  }
  release_tiles();
}

// Sums tiles as the tile products left them: [group * 2 + block][row][output].
template <typename Sum>
using SumTiles = Sum[4][kTileRows][kDenseBlock];

// Stores sums tile t (t = group * 2 + block) to `sums`.
#define SLIPWAY_STORE_SUM_TILES(sums, groups, blocks)                                        \
  do {                                                                                       \
    _tile_stored(0, (sums)[0], kAmxTileBytes);                                               \
    if constexpr ((blocks) == 2) _tile_stored(1, (sums)[1], kAmxTileBytes);                  \
    if constexpr ((groups) == 2) _tile_stored(2, (sums)[2], kAmxTileBytes);                  \
    if constexpr ((groups) == 2 && (blocks) == 2) _tile_stored(3, (sums)[3], kAmxTileBytes); \
  } while (false)

// One step of the tile products over the inputs' chunk: tmm(group * 2 + block) += tmm(4 + group)
// x tmm(6 + block), with `product` the instruction.
#define SLIPWAY_TILE_PRODUCTS(product, groups, blocks)              \
  do {                                                              \
    product(0, 4, 6);                                               \
    if constexpr ((blocks) == 2) product(1, 4, 7);                  \
    if constexpr ((groups) == 2) product(2, 5, 6);                  \
    if constexpr ((groups) == 2 && (blocks) == 2) product(3, 5, 7); \
  } while (false)

#define SLIPWAY_LOAD_INPUT_TILES(inputs, offset, stride_bytes, groups, weights, weight_offset, blocks) \
  do {                                                                                                 \
    _tile_loadd(4, (inputs)[0] + (offset), stride_bytes);                                              \
    if constexpr ((groups) == 2) _tile_loadd(5, (inputs)[1] + (offset), stride_bytes);                 \
    _tile_loadd(6, (weights)[0] + (weight_offset), kAmxTileBytes);                                     \
    if constexpr ((blocks) == 2) _tile_loadd(7, (weights)[1] + (weight_offset), kAmxTileBytes);        \
  } while (false)

template <std::size_t kGroups, std::size_t kBlocks>
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void bf16_tiles_amx(const PackedDenseBf16& layer,
                                                                         const Bf16Rows& in,
                                                                         const std::uint16_t* const* inputs,
                                                                         std::size_t row, std::size_t block,
                                                                         float* out) {
  const std::uint16_t* weights[2];
  const float* bias[2];
  for (std::size_t b = 0; b < 2; ++b) {
    weights[b] = layer.weights.data() + (block + b) * layer.padded_depth * kDenseBlock;
    bias[b] = layer.bias.data() + (block + b) * kDenseBlock;
  }
  // Each sums tile starts as its block's bias in every row (a load with a stride of zero).
  _tile_loadd(0, bias[0], 0);
  if constexpr (kBlocks == 2) _tile_loadd(1, bias[1], 0);
  if constexpr (kGroups == 2) _tile_loadd(2, bias[0], 0);
  if constexpr (kGroups == 2 && kBlocks == 2) _tile_loadd(3, bias[1], 0);
  const std::size_t stride_bytes = in.stride * sizeof(std::uint16_t);
  for (std::size_t k = 0; k < layer.padded_depth; k += kBf16PaddedMultiple) {
    SLIPWAY_LOAD_INPUT_TILES(inputs, k, stride_bytes, kGroups, weights, k * kDenseBlock, kBlocks);
    SLIPWAY_TILE_PRODUCTS(_tile_dpbf16ps, kGroups, kBlocks);
  }
  alignas(64) SumTiles<float> sums;
  SLIPWAY_STORE_SUM_TILES(sums, kGroups, kBlocks);
  for (std::size_t g = 0; g < kGroups; ++g) {
    for (std::size_t b = 0; b < kBlocks; ++b) {
      for (std::size_t r = 0; r < kTileRows && row + g * kTileRows + r < in.rows; ++r) {
        store_block_avx512(layer, _mm512_load_ps(sums[g * 2 + b][r]), row + g * kTileRows + r, block + b, out);
      }
    }
  }
}

template <std::size_t kGroups, std::size_t kBlocks>
__attribute__((target("amx-tile,amx-int8,avx512f"))) void int8_tiles_amx(const PackedDenseInt8& layer,
                                                                         const QuantizedRows& in,
                                                                         const std::uint8_t* const* inputs,
                                                                         std::size_t row, std::size_t block,
                                                                         float* out) {
  const std::int8_t* weights[2];
  for (std::size_t b = 0; b < 2; ++b)
    weights[b] = layer.weights.data() + (block + b) * layer.padded_depth * kDenseBlock;
  _tile_zero(0);
  if constexpr (kBlocks == 2) _tile_zero(1);
  if constexpr (kGroups == 2) _tile_zero(2);
  if constexpr (kGroups == 2 && kBlocks == 2) _tile_zero(3);
  for (std::size_t k = 0; k < layer.padded_depth; k += kInt8PaddedMultiple) {
    SLIPWAY_LOAD_INPUT_TILES(inputs, k, in.stride, kGroups, weights, k * kDenseBlock, kBlocks);
    SLIPWAY_TILE_PRODUCTS(_tile_dpbusd, kGroups, kBlocks);
  }
  alignas(64) SumTiles<std::int32_t> sums;
  SLIPWAY_STORE_SUM_TILES(sums, kGroups, kBlocks);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    // As the VNNI kernel: take 128 times each output's weight sum back off (exact, wrapping).
    __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(layer.sums.data() + (block + b) * kDenseBlock), 7);
    for (std::size_t g = 0; g < kGroups; ++g) {
      for (std::size_t r = 0; r < kTileRows && row + g * kTileRows + r < in.rows; ++r) {
        __m512i sum = _mm512_sub_epi32(_mm512_load_si512(sums[g * 2 + b][r]), offset);
        int8_store_avx512(layer, in, row + g * kTileRows + r, block + b, sum, out);
      }
    }
  }
}

#undef SLIPWAY_STORE_SUM_TILES
#undef SLIPWAY_TILE_PRODUCTS
#undef SLIPWAY_LOAD_INPUT_TILES

}  // namespace

void dense_bf16_amx(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                    std::size_t block_count) {
  for_each_amx_tile(
      in.values.data(), in.stride, in.rows, first_block, block_count,
      [&](const std::uint16_t* const* inputs, std::size_t row, std::size_t block, auto groups, auto blocks) {
        bf16_tiles_amx<decltype(groups)::value, decltype(blocks)::value>(layer, in, inputs, row, block, out);
      });
}

void dense_int8_amx(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                    std::size_t block_count) {
  // Rows after the last whole 16 cost a whole tile product each on AMX (a single row took twice
  // the vector kernel's time); the vector kernel gives them the same bits.
  const std::size_t whole = in.rows / kTileRows * kTileRows;
  if (whole < in.rows) int8_rows_vnni(layer, in, whole, out, first_block, block_count);
  if (whole == 0) return;
  for_each_amx_tile(
      in.values.data(), in.stride, whole, first_block, block_count,
      [&](const std::uint8_t* const* inputs, std::size_t row, std::size_t block, auto groups, auto blocks) {
        int8_tiles_amx<decltype(groups)::value, decltype(blocks)::value>(layer, in, inputs, row, block, out);
      });
}

bool amx_usable() {
  static const bool kUsable = [] {
#if defined(__linux__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    constexpr unsigned kAmxBf16 = 1U << 22, kAmxTile = 1U << 24, kAmxInt8 = 1U << 25;
    if ((edx & (kAmxBf16 | kAmxTile | kAmxInt8)) != (kAmxBf16 | kAmxTile | kAmxInt8)) return false;
    // Linux hands out the 8 KiB of tile state only to a process that asks (5.16 and later).
    constexpr long kRequestPermission = 0x1023, kTileData = 18;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
    return false;
#endif
  }();
  return kUsable;
}

}  // namespace slipway::kernels
