// The AVX2 and AVX-512 LLM weight products: llm_kernels_tile.inc's tiles, compiled once per
// instruction set over a vector of 16 rows. AVX-512 adds four code-times-input products per row
// in one vpdpbusd; AVX2 has no such instruction and takes vpmaddubsw then vpmaddwd, and, since
// vpmaddubsw saturates past 32,767, multiplies Q8_0's codes as signed values (the sign moved to
// the input) rather than as q + 128. Both give the reference's integer sums, so every output is
// the scalar reference's bits.
#include "kernels/llm_kernels_x86.h"
#include "kernels/x86_intrinsics.h"

#include <cpuid.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace slipway::kernels {
namespace {

std::int32_t four_inputs(const std::int8_t* x) {
  std::int32_t value = 0;
  std::memcpy(&value, x, 4);
  return value;
}

}  // namespace

bool cpu_has_avx2_f16c() {
  __builtin_cpu_init();
  // F16C is read from CPUID (leaf 1, ECX): not every compiler's __builtin_cpu_supports names it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx512_vnni_f16c() {
  __builtin_cpu_init();
  return cpu_has_avx2_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

// ---------------------------------------------------------------------------------------------
// AVX-512: one register holds a panel's 16 rows.

namespace avx512 {
namespace {
#define SLIPWAY_TILE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

using Floats = __m512;
using Ints = __m512i;
using Codes = __m512i;
constexpr std::int32_t kQ8CodeOffset = 128;  // vpdpbusd multiplies the codes q + 128 as stored
// Measured on pp512 and tg128 of the 110M shape: larger tiles spill registers.
constexpr int kPanelsAlone = 3;
constexpr int kPanelsFloat = 2, kPanelsQuantized = 1;

SLIPWAY_TILE_TARGET inline Floats zero_floats() { return _mm512_setzero_ps(); }
SLIPWAY_TILE_TARGET inline Ints zero_ints() { return _mm512_setzero_si512(); }
SLIPWAY_TILE_TARGET inline Floats broadcast(float value) { return _mm512_set1_ps(value); }
SLIPWAY_TILE_TARGET inline Ints broadcast_int(std::int32_t value) { return _mm512_set1_epi32(value); }
SLIPWAY_TILE_TARGET inline Floats fused_multiply_add(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
SLIPWAY_TILE_TARGET inline Floats negated_multiply_add(Floats a, Floats b, Floats c) {
  return _mm512_fnmadd_ps(a, b, c);
}
SLIPWAY_TILE_TARGET inline Floats multiply(Floats a, Floats b) { return _mm512_mul_ps(a, b); }
SLIPWAY_TILE_TARGET inline Floats to_floats(Ints value) { return _mm512_cvtepi32_ps(value); }
SLIPWAY_TILE_TARGET inline Ints sub_ints(Ints a, Ints b) { return _mm512_sub_epi32(a, b); }
SLIPWAY_TILE_TARGET inline Ints add_ints(Ints a, Ints b) { return _mm512_add_epi32(a, b); }
SLIPWAY_TILE_TARGET inline Ints mul_ints(Ints a, Ints b) { return _mm512_mullo_epi32(a, b); }
SLIPWAY_TILE_TARGET inline Floats load_halves(const std::uint8_t* at) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
}
SLIPWAY_TILE_TARGET inline Ints load_bytes(const std::uint8_t* at) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
}
template <LlmWeightFormat kFormat>
SLIPWAY_TILE_TARGET inline Floats load_weights(const std::uint8_t* at) {
  if constexpr (kFormat == LlmWeightFormat::kF32) return _mm512_loadu_ps(at);
  if constexpr (kFormat == LlmWeightFormat::kF16) return load_halves(at);
  __m512i widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}
SLIPWAY_TILE_TARGET inline Codes load_codes(const std::uint8_t* at) { return _mm512_loadu_si512(at); }
SLIPWAY_TILE_TARGET inline Ints dot_q8(Ints sum, Codes codes, const std::int8_t* x) {
  return _mm512_dpbusd_epi32(sum, codes, _mm512_set1_epi32(four_inputs(x)));
}
template <int T>
SLIPWAY_TILE_TARGET inline void nibble_dots(const std::uint8_t* nibbles, const std::int8_t* x, std::size_t stride,
                                            Ints (&dot)[T]) {
  const __m512i low_mask = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (std::size_t h = 0; h < 4; ++h) {
    __m512i bytes = load_codes(nibbles + h * kPanelRows * 4);
    __m512i low = _mm512_and_si512(bytes, low_mask), high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_mask);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      dot[t] = _mm512_dpbusd_epi32(dot[t], low, _mm512_set1_epi32(four_inputs(x + t * stride + 8 * h)));
      dot[t] = _mm512_dpbusd_epi32(dot[t], high, _mm512_set1_epi32(four_inputs(x + t * stride + 8 * h + 4)));
    }
  }
}
SLIPWAY_TILE_TARGET inline void store_rows(Floats value, float* out, std::size_t rows) {
  if (rows == kPanelRows) {
    _mm512_storeu_ps(out, value);
  } else {
    _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1U << rows) - 1U), value);
  }
}

#include "kernels/llm_kernels_tile.inc"  // NOLINT(bugprone-suspicious-include)
#undef SLIPWAY_TILE_TARGET
}  // namespace
}  // namespace avx512

// ---------------------------------------------------------------------------------------------
// AVX2: a panel's 16 rows in two registers of 8.

namespace avx2 {
namespace {
#define SLIPWAY_TILE_TARGET __attribute__((target("avx2,fma,f16c")))

struct Floats {
  __m256 low, high;
};
struct Ints {
  __m256i low, high;
};
using Codes = Ints;
constexpr std::int32_t kQ8CodeOffset = 0;  // dot_q8 multiplies q itself, not q + 128
// AVX2's sixteen registers hold four rows' float and integer sums, in halves.
constexpr int kPanelsAlone = 4;
constexpr int kPanelsFloat = 1, kPanelsQuantized = 1;

SLIPWAY_TILE_TARGET inline Floats zero_floats() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
SLIPWAY_TILE_TARGET inline Ints zero_ints() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
SLIPWAY_TILE_TARGET inline Floats broadcast(float value) { return {_mm256_set1_ps(value), _mm256_set1_ps(value)}; }
SLIPWAY_TILE_TARGET inline Ints broadcast_int(std::int32_t value) {
  return {_mm256_set1_epi32(value), _mm256_set1_epi32(value)};
}
SLIPWAY_TILE_TARGET inline Floats fused_multiply_add(Floats a, Floats b, Floats c) {
  return {_mm256_fmadd_ps(a.low, b.low, c.low), _mm256_fmadd_ps(a.high, b.high, c.high)};
}
SLIPWAY_TILE_TARGET inline Floats negated_multiply_add(Floats a, Floats b, Floats c) {
  return {_mm256_fnmadd_ps(a.low, b.low, c.low), _mm256_fnmadd_ps(a.high, b.high, c.high)};
}
SLIPWAY_TILE_TARGET inline Floats multiply(Floats a, Floats b) {
  return {_mm256_mul_ps(a.low, b.low), _mm256_mul_ps(a.high, b.high)};
}
SLIPWAY_TILE_TARGET inline Floats to_floats(Ints value) {
  return {_mm256_cvtepi32_ps(value.low), _mm256_cvtepi32_ps(value.high)};
}
SLIPWAY_TILE_TARGET inline Ints sub_ints(Ints a, Ints b) {
  return {_mm256_sub_epi32(a.low, b.low), _mm256_sub_epi32(a.high, b.high)};
}
SLIPWAY_TILE_TARGET inline Ints add_ints(Ints a, Ints b) {
  return {_mm256_add_epi32(a.low, b.low), _mm256_add_epi32(a.high, b.high)};
}
SLIPWAY_TILE_TARGET inline Ints mul_ints(Ints a, Ints b) {
  return {_mm256_mullo_epi32(a.low, b.low), _mm256_mullo_epi32(a.high, b.high)};
}
SLIPWAY_TILE_TARGET inline Floats load_halves(const std::uint8_t* at) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16)))};
}
SLIPWAY_TILE_TARGET inline Ints load_bytes(const std::uint8_t* at) {
  return {_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at))),
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at + 8)))};
}
SLIPWAY_TILE_TARGET inline __m256 widen_bf16(const std::uint8_t* at) {
  __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
}
template <LlmWeightFormat kFormat>
SLIPWAY_TILE_TARGET inline Floats load_weights(const std::uint8_t* at) {
  if constexpr (kFormat == LlmWeightFormat::kF32) {
    return {_mm256_loadu_ps(reinterpret_cast<const float*>(at)),
            _mm256_loadu_ps(reinterpret_cast<const float*>(at) + 8)};
  }
  if constexpr (kFormat == LlmWeightFormat::kF16) return load_halves(at);
  return {widen_bf16(at), widen_bf16(at + 16)};
}
SLIPWAY_TILE_TARGET inline Codes load_codes(const std::uint8_t* at) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32))};
}
// Four products per 32-bit lane, unsigned codes (at most 255 when the inputs' signs are moved
// onto them, so a pair stays within vpmaddubsw's 16 bits) times signed inputs.
SLIPWAY_TILE_TARGET inline __m256i dot_lane(__m256i sum, __m256i codes, __m256i inputs) {
  return _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(codes, inputs), _mm256_set1_epi16(1)));
}
SLIPWAY_TILE_TARGET inline __m256i dot_signed(__m256i sum, __m256i codes, __m256i inputs) {
  __m256i values = _mm256_xor_si256(codes, _mm256_set1_epi8(static_cast<char>(0x80)));
  return dot_lane(sum, _mm256_abs_epi8(values), _mm256_sign_epi8(inputs, values));
}
SLIPWAY_TILE_TARGET inline Ints dot_q8(Ints sum, Codes codes, const std::int8_t* x) {
  __m256i inputs = _mm256_set1_epi32(four_inputs(x));
  return {dot_signed(sum.low, codes.low, inputs), dot_signed(sum.high, codes.high, inputs)};
}
template <int T>
SLIPWAY_TILE_TARGET inline void nibble_dots(const std::uint8_t* nibbles, const std::int8_t* x, std::size_t stride,
                                            Ints (&dot)[T]) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (std::size_t h = 0; h < 4; ++h) {
    Codes bytes = load_codes(nibbles + h * kPanelRows * 4);
    Codes low{_mm256_and_si256(bytes.low, low_mask), _mm256_and_si256(bytes.high, low_mask)};
    Codes high{_mm256_and_si256(_mm256_srli_epi16(bytes.low, 4), low_mask),
               _mm256_and_si256(_mm256_srli_epi16(bytes.high, 4), low_mask)};
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      __m256i first = _mm256_set1_epi32(four_inputs(x + t * stride + 8 * h));
      __m256i second = _mm256_set1_epi32(four_inputs(x + t * stride + 8 * h + 4));
      dot[t].low = dot_lane(dot_lane(dot[t].low, low.low, first), high.low, second);
      dot[t].high = dot_lane(dot_lane(dot[t].high, low.high, first), high.high, second);
    }
  }
}
SLIPWAY_TILE_TARGET inline void store_rows(Floats value, float* out, std::size_t rows) {
  if (rows == kPanelRows) {
    _mm256_storeu_ps(out, value.low);
    _mm256_storeu_ps(out + 8, value.high);
    return;
  }
  alignas(32) float all[kPanelRows];
  _mm256_store_ps(all, value.low);
  _mm256_store_ps(all + 8, value.high);
  std::copy_n(all, rows, out);
}

#include "kernels/llm_kernels_tile.inc"  // NOLINT(bugprone-suspicious-include)
#undef SLIPWAY_TILE_TARGET
}  // namespace
}  // namespace avx2

__attribute__((target("avx512f,avx512bw,avx512vl"))) void llm_quantize_input_avx512(const float* values,
                                                                                    std::size_t blocks,
                                                                                    std::int8_t* quantized,
                                                                                    float* scales, std::int32_t* sums) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi32(-127), high = _mm512_set1_epi32(127);
  for (std::size_t b = 0; b < blocks; ++b) {
    __m512 first = _mm512_loadu_ps(values + b * kQuantBlock), second = _mm512_loadu_ps(values + b * kQuantBlock + 16);
    // x - x is 0 for a finite x and NaN for an infinity or a NaN.
    __mmask16 not_finite = _mm512_cmp_ps_mask(_mm512_sub_ps(first, first), zero, _CMP_NEQ_UQ) |
                           _mm512_cmp_ps_mask(_mm512_sub_ps(second, second), zero, _CMP_NEQ_UQ);
    __m512 largest = _mm512_max_ps(_mm512_abs_ps(first), _mm512_abs_ps(second));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, largest);
    float top = 0.0f;
    for (float lane : lanes) top = std::max(top, lane);
    float scale = not_finite == 0 ? top / 127.0f : __builtin_nanf("");
    float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    __m512 factor = _mm512_set1_ps(inverse);
    // To nearest, ties to even (the default rounding); a NaN or infinity (not-finite input)
    // converts to INT_MIN and is set to 0, as the reference does.
    __m512 first_scaled = _mm512_mul_ps(first, factor), second_scaled = _mm512_mul_ps(second, factor);
    __m512i q0 = _mm512_cvtps_epi32(first_scaled), q1 = _mm512_cvtps_epi32(second_scaled);
    q0 = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(_mm512_sub_ps(first_scaled, first_scaled), zero, _CMP_EQ_OQ), q0);
    q1 = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(_mm512_sub_ps(second_scaled, second_scaled), zero, _CMP_EQ_OQ), q1);
    q0 = _mm512_min_epi32(_mm512_max_epi32(q0, low), high);
    q1 = _mm512_min_epi32(_mm512_max_epi32(q1, low), high);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(quantized + b * kQuantBlock), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(quantized + b * kQuantBlock + 16), _mm512_cvtepi32_epi8(q1));
    alignas(64) std::int32_t total[16];
    _mm512_store_si512(total, _mm512_add_epi32(q0, q1));
    std::int32_t sum = 0;
    for (std::int32_t lane : total) sum += lane;
    scales[b] = scale;
    sums[b] = sum;
  }
}

void llm_product_avx2(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                      std::size_t panel_count, float* out) {
  avx2::product(matrix, input, first_panel, panel_count, out);
}

void llm_product_avx512(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                        std::size_t panel_count, float* out) {
  avx512::product(matrix, input, first_panel, panel_count, out);
}

}  // namespace slipway::kernels
