// The packed records of LLM weight panels, and the AVX2 and AVX-512 products over them (the
// contract is in slipway/kernels.h). Private to kernels: llm_kernels.cpp packs the records and
// calls a product only where the CPU has its instruction set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "slipway/kernels.h"

namespace slipway::kernels {

// A panel's layout. Codes interleave by four inputs, [input / 4][row][input % 4], so one 64-byte
// load holds the 16 rows' next four.
// Q8_0 and Q4_0 (blocks of 32 inputs): every block's codes, then every block's 16 scales as
// halves, so the codes of each block start on a cache line. Q8_0's codes are q + 128; Q4_0's are
// nibbles [4][row][4], byte j of group h holding input 8h + j low and 8h + 4 + j high.
inline constexpr std::size_t kQ8CodesBytes = kPanelRows * kQuantBlock;
inline constexpr std::size_t kQ4CodesBytes = kPanelRows * kQuantBlock / 2;
inline constexpr std::size_t kScalesBytes = kPanelRows * 2;
// Q4_K (records of 256 inputs): d and dmin as halves, the eight sub-blocks' 6-bit multipliers sc_j
// and m_j ([j][row] bytes each), then each sub-block's nibbles as Q4_0's; 37 cache lines.
inline constexpr std::size_t kQ4KScaleOffset = 0;
inline constexpr std::size_t kQ4KMinScaleOffset = kPanelRows * 2;
inline constexpr std::size_t kQ4KMultipliersOffset = kPanelRows * 4;
inline constexpr std::size_t kQ4KOffsetsOffset = kQ4KMultipliersOffset + kPanelRows * 8;
inline constexpr std::size_t kQ4KCodesOffset = kQ4KOffsetsOffset + kPanelRows * 8;
inline constexpr std::size_t kQ4KRecordBytes = kQ4KCodesOffset + 8 * kQ4CodesBytes;
// The float formats: one record per input, [row] values of 4 or 2 bytes.

bool cpu_has_avx2_f16c();
bool cpu_has_avx512_vnni_f16c();

// Need AVX2, FMA and F16C; AVX-512F, BW, VL, VNNI and F16C.
void llm_product_avx2(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                      std::size_t panel_count, float* out);
void llm_product_avx512(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                        std::size_t panel_count, float* out);

// Needs AVX-512F, BW and VL.
void llm_quantize_input_avx512(const float* values, std::size_t blocks, std::int8_t* quantized, float* scales,
                               std::int32_t* sums);

// llm_exp's constants (Cephes' expf), shared by every variant's softmax.
inline constexpr float kExpLowest = -87.0f, kExpHighest = 88.0f;
inline constexpr float kLog2E = 1.44269504088896341f;
inline constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
inline constexpr float kExpPolynomial[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                           4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// Element `index` of a cached block, position `row`'s, as a float (the scalar reference's).
float kv_element(const KvBlock& block, std::size_t index, std::size_t row);

// Attention and SwiGLU (llm_attention_x86.cpp). Need AVX2, FMA and F16C; AVX-512F, BW and VL.
void llm_block_scores_avx2(const float* queries, std::size_t query_stride, std::size_t query_count, const KvBlock& keys,
                           std::size_t head_dim, float* scores, std::size_t score_stride);
void llm_softmax_avx2(float* scores, std::size_t count, float scale);
void llm_add_weighted_values_avx2(const float* weights, std::size_t weight_stride, std::size_t query_count,
                                  std::size_t count, const KvBlock& values, std::size_t head_dim, float* out,
                                  std::size_t out_stride);
void llm_silu_multiply_avx2(float* gate, const float* up, std::size_t count);
void llm_silu_multiply_avx512(float* gate, const float* up, std::size_t count);
void llm_block_scores_avx512(const float* queries, std::size_t query_stride, std::size_t query_count,
                             const KvBlock& keys, std::size_t head_dim, float* scores, std::size_t score_stride);
void llm_softmax_avx512(float* scores, std::size_t count, float scale);
void llm_add_weighted_values_avx512(const float* weights, std::size_t weight_stride, std::size_t query_count,
                                    std::size_t count, const KvBlock& values, std::size_t head_dim, float* out,
                                    std::size_t out_stride);

}  // namespace slipway::kernels
