// The AVX2 and AVX-512 attention kernels (scores of up to four queries against a block of 16
// cached keys, their softmax, and the weighted sum of the block's values) and SwiGLU's gate. Each does the scalar
// reference's operations in its order (slipway/kernels.h), lanes holding positions or dimensions,
// so every variant gives the reference's bits; sharing a block's loads between queries, not
// reordering arithmetic, is where the speed comes from. Half, int8 and FP8 blocks are widened to
// floats in registers as they are loaded: a 16-bit cache is read at half the bytes of a float
// one, an 8-bit cache at a quarter.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/llm_kernels_x86.h"
#include "kernels/x86_intrinsics.h"

namespace slipway::kernels {
namespace {

#define SLIPWAY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define SLIPWAY_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SLIPWAY_INLINE inline __attribute__((always_inline))

// ---------------------------------------------------------------------------------------------
// Cached elements as floats: 16 (or 8) consecutive elements from `at`, each code's value times
// `scales` (its lane's scale). An FP8 E4M3 code placed in the high byte of a 16-bit lane and
// shifted right by one (arithmetically, the sign copied into bit 14, then cleared) has its sign,
// exponent and mantissa where a half's are, its exponent biased 8 less: a half worth the code's
// value / 256. So the conversion is a shuffle, a shift, a mask and F16C; the scales passed carry
// the 256 (exact: a power of two, the same product as the reference's).

SLIPWAY_AVX2 SLIPWAY_INLINE __m256i fp8_as_halves(__m256i high_bytes) {
  return _mm256_and_si256(_mm256_srai_epi16(high_bytes, 1), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
}

SLIPWAY_AVX2 SLIPWAY_INLINE __m128i fp8_as_halves(__m128i high_bytes) {
  return _mm_and_si128(_mm_srai_epi16(high_bytes, 1), _mm_set1_epi16(static_cast<short>(0xBFFF)));
}

// 16 codes (a scaled type) as floats times `scales`.
template <KvElement kElement>
SLIPWAY_AVX512 SLIPWAY_INLINE __m512 codes_16(__m128i codes, __m512 scales) {
  if constexpr (kElement == KvElement::kInt8) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)), scales);
  } else {
    // Byte i to the high byte of 16-bit lane i (zero below it); each 128-bit half shuffles its own
    // copy of the 16 codes, the first half taking codes 0-7, the second 8-15.
    const __m256i to_high_bytes = _mm256_setr_epi8(-1, 0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6, -1, 7, -1, 8, -1, 9,
                                                   -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15);
    const __m256i high_bytes = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(codes), to_high_bytes);
    return _mm512_mul_ps(_mm512_cvtph_ps(fp8_as_halves(high_bytes)), scales);
  }
}

template <KvElement kElement>
SLIPWAY_AVX512 SLIPWAY_INLINE __m512 load_16(const void* data, std::size_t at, __m512 scales) {
  if constexpr (kElement == KvElement::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(data) + at);
  } else if constexpr (kElement == KvElement::kF16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(data) + at)));
  } else {
    return codes_16<kElement>(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(data) + at)), scales);
  }
}

// The same for the first lanes of `mask`, zeros past them.
template <KvElement kElement>
SLIPWAY_AVX512 SLIPWAY_INLINE __m512 load_16_masked(const void* data, std::size_t at, __mmask16 mask, __m512 scales) {
  if constexpr (kElement == KvElement::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(data) + at);
  } else if constexpr (kElement == KvElement::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(data) + at));
  } else {
    return codes_16<kElement>(_mm_maskz_loadu_epi8(mask, static_cast<const std::uint8_t*>(data) + at), scales);
  }
}

template <KvElement kElement>
SLIPWAY_AVX2 SLIPWAY_INLINE __m256 load_8(const void* data, std::size_t at, __m256 scales) {
  if constexpr (kElement == KvElement::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(data) + at);
  } else if constexpr (kElement == KvElement::kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(data) + at)));
  } else {
    const __m128i codes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const std::uint8_t*>(data) + at));
    if constexpr (kElement == KvElement::kInt8) {
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)), scales);
    } else {
      return _mm256_mul_ps(_mm256_cvtph_ps(fp8_as_halves(_mm_unpacklo_epi8(_mm_setzero_si128(), codes))), scales);
    }
  }
}

// What a scaled type's scales are multiplied by before its codes are: 1 for int8, 256 for FP8
// (see fp8_as_halves); 0 for the unscaled types, whose scales are never read.
template <KvElement kElement>
inline constexpr float kScaleFactor = kElement == KvElement::kInt8      ? 1.0f
                                      : kElement == KvElement::kFp8E4M3 ? 256.0f
                                                                        : 0.0f;

// The block's 16 positions' scales (keys of a scaled type), one per lane.
template <KvElement kElement>
SLIPWAY_AVX512 __m512 position_scales_16(const KvBlock& block) {
  if constexpr (kScaleFactor<kElement> == 0) return _mm512_setzero_ps();
  alignas(64) float scales[kAttentionBlock];
  for (std::size_t i = 0; i < kAttentionBlock; ++i) {
    scales[i] = block.scales[i * block.scale_stride] * kScaleFactor<kElement>;
  }
  return _mm512_load_ps(scales);
}

template <KvElement kElement>
SLIPWAY_AVX2 __m256 position_scales_8(const KvBlock& block, std::size_t first) {
  if constexpr (kScaleFactor<kElement> == 0) return _mm256_setzero_ps();
  alignas(32) float scales[8];
  for (std::size_t i = 0; i < 8; ++i)
    scales[i] = block.scales[(first + i) * block.scale_stride] * kScaleFactor<kElement>;
  return _mm256_load_ps(scales);
}

// Row i's scale, in every lane (values of a scaled type).
template <KvElement kElement>
SLIPWAY_AVX512 SLIPWAY_INLINE __m512 row_scale_16(const KvBlock& block, std::size_t row) {
  if constexpr (kScaleFactor<kElement> == 0) return _mm512_setzero_ps();
  return _mm512_set1_ps(block.scales[row * block.scale_stride] * kScaleFactor<kElement>);
}

template <KvElement kElement>
SLIPWAY_AVX2 SLIPWAY_INLINE __m256 row_scale_8(const KvBlock& block, std::size_t row) {
  if constexpr (kScaleFactor<kElement> == 0) return _mm256_setzero_ps();
  return _mm256_set1_ps(block.scales[row * block.scale_stride] * kScaleFactor<kElement>);
}

// ---------------------------------------------------------------------------------------------
// Scores. Four chains per query (dimension mod 4), the block's 16 keys of a dimension in one load.

template <std::size_t kQueries, KvElement kElement>
SLIPWAY_AVX512 void block_scores_512(const float* queries, std::size_t query_stride, const KvBlock& keys,
                                     std::size_t head_dim, float* scores, std::size_t score_stride) {
  const __m512 scales = position_scales_16<kElement>(keys);
  __m512 chains[kQueries][4];
#pragma GCC unroll 4
  for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 4
    for (std::size_t chain = 0; chain < 4; ++chain) chains[q][chain] = _mm512_setzero_ps();
  }
  auto step = [&](std::size_t d, std::size_t chain) SLIPWAY_AVX512 {
    __m512 key = load_16<kElement>(keys.data, d * kAttentionBlock, scales);
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
      chains[q][chain] = _mm512_fmadd_ps(_mm512_set1_ps(queries[q * query_stride + d]), key, chains[q][chain]);
    }
  };
  std::size_t d = 0;
  for (; d + 4 <= head_dim; d += 4) {
    step(d, 0), step(d + 1, 1), step(d + 2, 2), step(d + 3, 3);
  }
  for (std::size_t chain = 0; d < head_dim; ++d, ++chain) step(d, chain);
#pragma GCC unroll 4
  for (std::size_t q = 0; q < kQueries; ++q) {
    _mm512_storeu_ps(scores + q * score_stride, _mm512_add_ps(_mm512_add_ps(chains[q][0], chains[q][1]),
                                                              _mm512_add_ps(chains[q][2], chains[q][3])));
  }
}

// Eight positions (half a block) for up to two queries: AVX2's sixteen registers hold no more.
template <std::size_t kQueries, KvElement kElement>
SLIPWAY_AVX2 void block_scores_256(const float* queries, std::size_t query_stride, const KvBlock& keys,
                                   std::size_t head_dim, float* scores, std::size_t score_stride) {
  for (std::size_t half = 0; half < 2; ++half) {
    const __m256 scales = position_scales_8<kElement>(keys, 8 * half);
    __m256 chains[kQueries][4];
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 4
      for (std::size_t chain = 0; chain < 4; ++chain) chains[q][chain] = _mm256_setzero_ps();
    }
    auto step = [&](std::size_t d, std::size_t chain) SLIPWAY_AVX2 {
      __m256 key = load_8<kElement>(keys.data, d * kAttentionBlock + 8 * half, scales);
#pragma GCC unroll 4
      for (std::size_t q = 0; q < kQueries; ++q) {
        chains[q][chain] = _mm256_fmadd_ps(_mm256_set1_ps(queries[q * query_stride + d]), key, chains[q][chain]);
      }
    };
    std::size_t d = 0;
    for (; d + 4 <= head_dim; d += 4) {
      step(d, 0), step(d + 1, 1), step(d + 2, 2), step(d + 3, 3);
    }
    for (std::size_t chain = 0; d < head_dim; ++d, ++chain) step(d, chain);
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
      _mm256_storeu_ps(scores + q * score_stride + 8 * half, _mm256_add_ps(_mm256_add_ps(chains[q][0], chains[q][1]),
                                                                           _mm256_add_ps(chains[q][2], chains[q][3])));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax. llm_exp's operations lane by lane; masked-off lanes read -inf, which weighs 0.

SLIPWAY_AVX512 SLIPWAY_INLINE __m512 exp_512(__m512 x) {
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLowest), _CMP_GE_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(kExpHighest));
  __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2High), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpPolynomial[0]);
  for (std::size_t k = 1; k < std::size(kExpPolynomial); ++k) {
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPolynomial[k]));
  }
  __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  __m512i exponent = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(in_range, y, _mm512_castsi512_ps(exponent));
}

SLIPWAY_AVX2 SLIPWAY_INLINE __m256 exp_256(__m256 x) {
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLowest), _CMP_GE_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(kExpHighest));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2High), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpPolynomial[0]);
  for (std::size_t k = 1; k < std::size(kExpPolynomial); ++k) {
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPolynomial[k]));
  }
  __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(in_range, _mm256_mul_ps(y, _mm256_castsi256_ps(exponent)));
}

// The total of lanes 0-7 (each already lane j + lane j + 8): j + 4, then j + 2, then j + 1.
SLIPWAY_AVX2 float add_halves_256(__m256 lanes) {
  __m128 four = _mm_add_ps(_mm256_castps256_ps128(lanes), _mm256_extractf128_ps(lanes, 1));
  __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

SLIPWAY_AVX512 __mmask16 tail_mask(std::size_t left) {
  return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
}

SLIPWAY_AVX2 __m256i tail_mask_256(std::size_t left) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<std::size_t>(left, 8))), lanes);
}

// Eight lanes of scores from p, -inf past count.
SLIPWAY_AVX2 __m256 load_scores_256(const float* scores, std::size_t p, std::size_t count) {
  if (p + 8 <= count) return _mm256_loadu_ps(scores + p);
  if (p >= count) return _mm256_set1_ps(-INFINITY);
  __m256i mask = tail_mask_256(count - p);
  return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(scores + p, mask), _mm256_castsi256_ps(mask));
}

// `call` with a tile's query count (1 to kAttentionQueries) as a compile-time constant.
template <typename Call>
void by_query_count(std::size_t queries, Call&& call) {
  static_assert(kAttentionQueries == 4);
  switch (queries) {
    case 4:
      return call(std::integral_constant<std::size_t, 4>{});
    case 3:
      return call(std::integral_constant<std::size_t, 3>{});
    case 2:
      return call(std::integral_constant<std::size_t, 2>{});
    default:
      return call(std::integral_constant<std::size_t, 1>{});
  }
}

template <KvElement kElement>
SLIPWAY_AVX512 void block_scores_avx512(const float* queries, std::size_t query_stride, std::size_t query_count,
                                        const KvBlock& keys, std::size_t head_dim, float* scores,
                                        std::size_t score_stride) {
  for (std::size_t first = 0; first < query_count; first += kAttentionQueries) {
    by_query_count(std::min(kAttentionQueries, query_count - first), [&](auto count) SLIPWAY_AVX512 {
      block_scores_512<decltype(count)::value, kElement>(queries + first * query_stride, query_stride, keys, head_dim,
                                                         scores + first * score_stride, score_stride);
    });
  }
}

template <KvElement kElement>
SLIPWAY_AVX2 void block_scores_avx2(const float* queries, std::size_t query_stride, std::size_t query_count,
                                    const KvBlock& keys, std::size_t head_dim, float* scores,
                                    std::size_t score_stride) {
  std::size_t q = 0;
  for (; q + 2 <= query_count; q += 2) {
    block_scores_256<2, kElement>(queries + q * query_stride, query_stride, keys, head_dim, scores + q * score_stride,
                                  score_stride);
  }
  if (q < query_count) {
    block_scores_256<1, kElement>(queries + q * query_stride, query_stride, keys, head_dim, scores + q * score_stride,
                                  score_stride);
  }
}

// Four vectors of dimensions by up to four queries: sixteen sums held in registers while the
// positions pass (a query count known at compile time, or the sums live on the stack and every
// multiply-add waits on a store).
template <std::size_t kQueries, KvElement kElement>
SLIPWAY_AVX512 void weighted_values_512(const float* weights, std::size_t weight_stride, std::size_t count,
                                        const KvBlock& values, std::size_t head_dim, float* out,
                                        std::size_t out_stride) {
  const std::size_t stride = values.stride;
  std::size_t d = 0;
  for (; d + 64 <= head_dim; d += 64) {
    __m512 sums[kQueries][4];
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 4
      for (std::size_t j = 0; j < 4; ++j) sums[q][j] = _mm512_loadu_ps(out + q * out_stride + d + 16 * j);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const __m512 scale = row_scale_16<kElement>(values, i);
      __m512 value[4];
#pragma GCC unroll 4
      for (std::size_t j = 0; j < 4; ++j) value[j] = load_16<kElement>(values.data, i * stride + d + 16 * j, scale);
#pragma GCC unroll 4
      for (std::size_t q = 0; q < kQueries; ++q) {
        const __m512 weight = _mm512_set1_ps(weights[q * weight_stride + i]);
#pragma GCC unroll 4
        for (std::size_t j = 0; j < 4; ++j) sums[q][j] = _mm512_fmadd_ps(weight, value[j], sums[q][j]);
      }
    }
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 4
      for (std::size_t j = 0; j < 4; ++j) _mm512_storeu_ps(out + q * out_stride + d + 16 * j, sums[q][j]);
    }
  }
  for (; d < head_dim; d += 16) {
    const __mmask16 mask = tail_mask(head_dim - d);
    for (std::size_t q = 0; q < kQueries; ++q) {
      __m512 sum = _mm512_maskz_loadu_ps(mask, out + q * out_stride + d);
      for (std::size_t i = 0; i < count; ++i) {
        sum = _mm512_fmadd_ps(
            _mm512_set1_ps(weights[q * weight_stride + i]),
            load_16_masked<kElement>(values.data, i * stride + d, mask, row_scale_16<kElement>(values, i)), sum);
      }
      _mm512_mask_storeu_ps(out + q * out_stride + d, mask, sum);
    }
  }
}

// Two vectors of dimensions by up to four queries: AVX2's sixteen registers hold the eight sums.
template <std::size_t kQueries, KvElement kElement>
SLIPWAY_AVX2 void weighted_values_256(const float* weights, std::size_t weight_stride, std::size_t count,
                                      const KvBlock& values, std::size_t head_dim, float* out, std::size_t out_stride) {
  const std::size_t stride = values.stride;
  std::size_t d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    __m256 sums[kQueries][2];
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 2
      for (std::size_t j = 0; j < 2; ++j) sums[q][j] = _mm256_loadu_ps(out + q * out_stride + d + 8 * j);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const __m256 scale = row_scale_8<kElement>(values, i);
      __m256 value[2];
#pragma GCC unroll 2
      for (std::size_t j = 0; j < 2; ++j) value[j] = load_8<kElement>(values.data, i * stride + d + 8 * j, scale);
#pragma GCC unroll 4
      for (std::size_t q = 0; q < kQueries; ++q) {
        const __m256 weight = _mm256_set1_ps(weights[q * weight_stride + i]);
#pragma GCC unroll 2
        for (std::size_t j = 0; j < 2; ++j) sums[q][j] = _mm256_fmadd_ps(weight, value[j], sums[q][j]);
      }
    }
#pragma GCC unroll 4
    for (std::size_t q = 0; q < kQueries; ++q) {
#pragma GCC unroll 2
      for (std::size_t j = 0; j < 2; ++j) _mm256_storeu_ps(out + q * out_stride + d + 8 * j, sums[q][j]);
    }
  }
  for (std::size_t q = 0; q < kQueries; ++q) {
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t dim = d; dim < head_dim; ++dim) {
        out[q * out_stride + dim] = std::fma(weights[q * weight_stride + i], kv_element(values, i * stride + dim, i),
                                             out[q * out_stride + dim]);
      }
    }
  }
}

// `call` with the element type as a compile-time constant: one kernel instance per type.
template <typename Call>
void by_element(KvElement element, Call&& call) {
  switch (element) {
    case KvElement::kF32:
      return call(std::integral_constant<KvElement, KvElement::kF32>{});
    case KvElement::kF16:
      return call(std::integral_constant<KvElement, KvElement::kF16>{});
    case KvElement::kInt8:
      return call(std::integral_constant<KvElement, KvElement::kInt8>{});
    case KvElement::kFp8E4M3:
      return call(std::integral_constant<KvElement, KvElement::kFp8E4M3>{});
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The variants' entry points.

SLIPWAY_AVX512 void llm_block_scores_avx512(const float* queries, std::size_t query_stride, std::size_t query_count,
                                            const KvBlock& keys, std::size_t head_dim, float* scores,
                                            std::size_t score_stride) {
  by_element(keys.element, [&](auto element) SLIPWAY_AVX512 {
    block_scores_avx512<decltype(element)::value>(queries, query_stride, query_count, keys, head_dim, scores,
                                                  score_stride);
  });
}

SLIPWAY_AVX2 void llm_block_scores_avx2(const float* queries, std::size_t query_stride, std::size_t query_count,
                                        const KvBlock& keys, std::size_t head_dim, float* scores,
                                        std::size_t score_stride) {
  by_element(keys.element, [&](auto element) SLIPWAY_AVX2 {
    block_scores_avx2<decltype(element)::value>(queries, query_stride, query_count, keys, head_dim, scores,
                                                score_stride);
  });
}

SLIPWAY_AVX512 void llm_softmax_avx512(float* scores, std::size_t count, float scale) {
  const __m512 scale_vector = _mm512_set1_ps(scale);
  const __m512 minus_infinity = _mm512_set1_ps(-INFINITY);
  __m512 largest = minus_infinity;
  for (std::size_t p = 0; p < count; p += 16) {
    __m512 x = _mm512_mul_ps(_mm512_mask_loadu_ps(minus_infinity, tail_mask(count - p), scores + p), scale_vector);
    largest = _mm512_max_ps(x, largest);  // the second operand where either is NaN
  }
  const __m512 shift = _mm512_set1_ps(_mm512_reduce_max_ps(largest));
  __m512 lanes = _mm512_setzero_ps();
  for (std::size_t p = 0; p < count; p += 16) {
    const __mmask16 mask = tail_mask(count - p);
    __m512 x = _mm512_mul_ps(_mm512_mask_loadu_ps(minus_infinity, mask, scores + p), scale_vector);
    __m512 e = exp_512(_mm512_sub_ps(x, shift));
    _mm512_mask_storeu_ps(scores + p, mask, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  float total = add_halves_256(_mm256_add_ps(_mm512_castps512_ps256(lanes),
                                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1))));
  const __m512 total_vector = _mm512_set1_ps(total);
  for (std::size_t p = 0; p < count; p += 16) {
    const __mmask16 mask = tail_mask(count - p);
    _mm512_mask_storeu_ps(scores + p, mask, _mm512_div_ps(_mm512_maskz_loadu_ps(mask, scores + p), total_vector));
  }
}

SLIPWAY_AVX2 void llm_softmax_avx2(float* scores, std::size_t count, float scale) {
  const __m256 scale_vector = _mm256_set1_ps(scale);
  __m256 largest = _mm256_set1_ps(-INFINITY);
  for (std::size_t p = 0; p < count; p += 8) {
    largest = _mm256_max_ps(_mm256_mul_ps(load_scores_256(scores, p, count), scale_vector), largest);
  }
  __m128 four = _mm_max_ps(_mm256_castps256_ps128(largest), _mm256_extractf128_ps(largest, 1));
  __m128 two = _mm_max_ps(four, _mm_movehl_ps(four, four));
  const __m256 shift = _mm256_set1_ps(_mm_cvtss_f32(_mm_max_ss(two, _mm_shuffle_ps(two, two, 1))));
  __m256 lanes[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // lanes 0-7 and 8-15
  for (std::size_t p = 0; p < count; p += 16) {
    for (std::size_t half = 0; half < 2; ++half) {
      const std::size_t at = p + 8 * half;
      __m256 e = exp_256(_mm256_sub_ps(_mm256_mul_ps(load_scores_256(scores, at, count), scale_vector), shift));
      if (at + 8 <= count) {
        _mm256_storeu_ps(scores + at, e);
      } else if (at < count) {
        _mm256_maskstore_ps(scores + at, tail_mask_256(count - at), e);
      }
      lanes[half] = _mm256_add_ps(lanes[half], e);
    }
  }
  const __m256 total = _mm256_set1_ps(add_halves_256(_mm256_add_ps(lanes[0], lanes[1])));
  std::size_t p = 0;
  for (; p + 8 <= count; p += 8) _mm256_storeu_ps(scores + p, _mm256_div_ps(_mm256_loadu_ps(scores + p), total));
  for (; p < count; ++p) scores[p] /= _mm256_cvtss_f32(total);
}

SLIPWAY_AVX512 void llm_add_weighted_values_avx512(const float* weights, std::size_t weight_stride,
                                                   std::size_t query_count, std::size_t count, const KvBlock& values,
                                                   std::size_t head_dim, float* out, std::size_t out_stride) {
  by_element(values.element, [&](auto element) SLIPWAY_AVX512 {
    for (std::size_t first = 0; first < query_count; first += kAttentionQueries) {
      by_query_count(std::min(kAttentionQueries, query_count - first), [&](auto queries) SLIPWAY_AVX512 {
        weighted_values_512<decltype(queries)::value, decltype(element)::value>(weights + first * weight_stride,
                                                                                weight_stride, count, values, head_dim,
                                                                                out + first * out_stride, out_stride);
      });
    }
  });
}

SLIPWAY_AVX2 void llm_add_weighted_values_avx2(const float* weights, std::size_t weight_stride, std::size_t query_count,
                                               std::size_t count, const KvBlock& values, std::size_t head_dim,
                                               float* out, std::size_t out_stride) {
  by_element(values.element, [&](auto element) SLIPWAY_AVX2 {
    for (std::size_t first = 0; first < query_count; first += kAttentionQueries) {
      by_query_count(std::min(kAttentionQueries, query_count - first), [&](auto queries) SLIPWAY_AVX2 {
        weighted_values_256<decltype(queries)::value, decltype(element)::value>(weights + first * weight_stride,
                                                                                weight_stride, count, values, head_dim,
                                                                                out + first * out_stride, out_stride);
      });
    }
  });
}

SLIPWAY_AVX512 void llm_silu_multiply_avx512(float* gate, const float* up, std::size_t count) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (std::size_t i = 0; i < count; i += 16) {
    const __mmask16 mask = tail_mask(count - i);
    __m512 x = _mm512_maskz_loadu_ps(mask, gate + i);
    __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, exp_512(_mm512_sub_ps(zero, x))));
    _mm512_mask_storeu_ps(gate + i, mask, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

SLIPWAY_AVX2 void llm_silu_multiply_avx2(float* gate, const float* up, std::size_t count) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_loadu_ps(gate + i);
    __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, exp_256(_mm256_sub_ps(zero, x))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < count; ++i) gate[i] = gate[i] / (1.0f + llm_exp(-gate[i])) * up[i];
}

}  // namespace slipway::kernels
