// An LLM's weight products: GGUF rows repacked into interleaved panels, inputs quantized per
// block, and the scalar reference product whose arithmetic the vector variants (in
// llm_kernels_x86.cpp) follow bit for bit.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "kernels/llm_kernels_x86.h"
#include "kernels/variant_choice.h"
#include "slipway/core.h"
#include "slipway/kernels.h"

namespace slipway::kernels {

bool llm_format_quantized(LlmWeightFormat format) {
  return format == LlmWeightFormat::kQ8_0 || format == LlmWeightFormat::kQ4_0 || format == LlmWeightFormat::kQ4_K;
}

std::size_t llm_format_block(LlmWeightFormat format) {
  switch (format) {
    case LlmWeightFormat::kQ8_0:
    case LlmWeightFormat::kQ4_0:
      return kQuantBlock;
    case LlmWeightFormat::kQ4_K:
      return kSuperBlock;
    default:
      return 1;
  }
}

namespace {

std::size_t file_block_bytes(LlmWeightFormat format) {
  switch (format) {
    case LlmWeightFormat::kF32:
      return 4;
    case LlmWeightFormat::kF16:
    case LlmWeightFormat::kBF16:
      return 2;
    case LlmWeightFormat::kQ8_0:
      return sizeof(BlockQ8_0);
    case LlmWeightFormat::kQ4_0:
      return sizeof(BlockQ4_0);
    case LlmWeightFormat::kQ4_K:
      return sizeof(BlockQ4_K);
  }
  return 0;
}

// The bytes of one block of a panel's 16 rows (llm_kernels_x86.h has the layout).
std::size_t panel_block_bytes(LlmWeightFormat format) {
  switch (format) {
    case LlmWeightFormat::kF32:
      return kPanelRows * 4;
    case LlmWeightFormat::kF16:
    case LlmWeightFormat::kBF16:
      return kPanelRows * 2;
    case LlmWeightFormat::kQ8_0:
      return kQ8CodesBytes + kScalesBytes;
    case LlmWeightFormat::kQ4_0:
      return kQ4CodesBytes + kScalesBytes;
    case LlmWeightFormat::kQ4_K:
      return kQ4KRecordBytes;
  }
  return 0;
}

// Writes 32 four-bit codes of one row into a [4][kPanelRows][4] nibble record: byte j of group h
// holds input 8h + j in its low nibble and 8h + 4 + j in its high one.
void place_nibbles(const std::uint8_t* codes, std::size_t row, std::uint8_t* record) {
  for (std::size_t h = 0; h < 4; ++h) {
    for (std::size_t j = 0; j < 4; ++j) {
      record[(h * kPanelRows + row) * 4 + j] =
          static_cast<std::uint8_t>(codes[8 * h + j] | (codes[8 * h + 4 + j] << 4));
    }
  }
}

// Places block `b` (of `blocks` per row) of one row, as the file holds it, into its panel.
void pack_block(LlmWeightFormat format, const std::byte* source, std::size_t row, std::byte* panel_start, std::size_t b,
                std::size_t blocks) {
  auto* panel = reinterpret_cast<std::uint8_t*>(panel_start);
  const auto* in = reinterpret_cast<const std::uint8_t*>(source);
  const std::size_t block_bytes = panel_block_bytes(format);
  switch (format) {
    case LlmWeightFormat::kF32:
      std::memcpy(panel + b * block_bytes + row * 4, in, 4);
      return;
    case LlmWeightFormat::kF16:
    case LlmWeightFormat::kBF16:
      std::memcpy(panel + b * block_bytes + row * 2, in, 2);
      return;
    case LlmWeightFormat::kQ8_0: {
      BlockQ8_0 block;
      std::memcpy(&block, in, sizeof(block));
      std::memcpy(panel + blocks * kQ8CodesBytes + b * kScalesBytes + row * 2, &block.scale, 2);
      for (std::size_t k = 0; k < kQuantBlock; ++k) {
        panel[b * kQ8CodesBytes + ((k / 4) * kPanelRows + row) * 4 + k % 4] =
            static_cast<std::uint8_t>(block.values[k]) ^ 0x80U;
      }
      return;
    }
    case LlmWeightFormat::kQ4_0: {
      BlockQ4_0 block;
      std::memcpy(&block, in, sizeof(block));
      std::memcpy(panel + blocks * kQ4CodesBytes + b * kScalesBytes + row * 2, &block.scale, 2);
      std::uint8_t codes[kQuantBlock];
      for (std::size_t j = 0; j < kQuantBlock / 2; ++j) {
        codes[j] = block.nibbles[j] & 0x0F;
        codes[j + kQuantBlock / 2] = block.nibbles[j] >> 4;
      }
      place_nibbles(codes, row, panel + b * kQ4CodesBytes);
      return;
    }
    case LlmWeightFormat::kQ4_K: {
      BlockQ4_K block;
      std::memcpy(&block, in, sizeof(block));
      std::uint8_t* record = panel + b * kQ4KRecordBytes;
      std::memcpy(record + kQ4KScaleOffset + row * 2, &block.scale, 2);
      std::memcpy(record + kQ4KMinScaleOffset + row * 2, &block.min_scale, 2);
      for (std::size_t j = 0; j < kSuperBlock / kQuantBlock; ++j) {
        unpack_q4_k_scale_min(j, block.scales, record[kQ4KMultipliersOffset + j * kPanelRows + row],
                              record[kQ4KOffsetsOffset + j * kPanelRows + row]);
        std::uint8_t codes[kQuantBlock];
        const std::uint8_t* nibbles = block.nibbles + (j / 2) * kQuantBlock;
        for (std::size_t l = 0; l < kQuantBlock; ++l) codes[l] = j % 2 == 0 ? nibbles[l] & 0x0F : nibbles[l] >> 4;
        place_nibbles(codes, row, record + kQ4KCodesOffset + j * kQ4CodesBytes);
      }
      return;
    }
  }
}

float load_half(const std::uint8_t* at) {
  std::uint16_t bits = 0;
  std::memcpy(&bits, at, 2);
  return half_to_float(bits);
}

float load_float(LlmWeightFormat format, const std::uint8_t* at) {
  if (format == LlmWeightFormat::kF16) return load_half(at);
  if (format == LlmWeightFormat::kBF16) {
    std::uint16_t bits = 0;
    std::memcpy(&bits, at, 2);
    std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
    float value = 0;
    std::memcpy(&value, &widened, 4);
    return value;
  }
  float value = 0;
  std::memcpy(&value, at, 4);
  return value;
}

// Sum of 32 codes of one row in a nibble record times 32 quantized inputs.
std::int32_t nibble_dot(const std::uint8_t* record, std::size_t row, const std::int8_t* x) {
  std::int32_t dot = 0;
  for (std::size_t h = 0; h < 4; ++h) {
    for (std::size_t j = 0; j < 4; ++j) {
      std::uint8_t byte = record[(h * kPanelRows + row) * 4 + j];
      dot += (byte & 0x0F) * x[8 * h + j] + (byte >> 4) * x[8 * h + 4 + j];
    }
  }
  return dot;
}

// One row's output against one input row, the contract's arithmetic step by step.
float scalar_output(const LlmPackedMatrix& matrix, const std::uint8_t* panel, std::size_t row, const LlmInput& input,
                    std::size_t token) {
  const std::size_t blocks = matrix.columns / llm_format_block(matrix.format);
  const std::size_t record = panel_block_bytes(matrix.format);
  float sum = 0.0f;
  if (!llm_format_quantized(matrix.format)) {
    const float* x = input.values + token * matrix.columns;
    for (std::size_t k = 0; k < matrix.columns; ++k) {
      sum = std::fma(load_float(matrix.format, panel + k * record + row * (record / kPanelRows)), x[k], sum);
    }
    return sum;
  }
  const std::size_t input_blocks = matrix.columns / kQuantBlock;
  const std::int8_t* x = input.quantized.data() + token * matrix.columns;
  const float* input_scales = input.scales.data() + token * input_blocks;
  const std::int32_t* input_sums = input.sums.data() + token * input_blocks;
  for (std::size_t b = 0; b < blocks; ++b) {
    if (matrix.format == LlmWeightFormat::kQ4_K) {
      const std::uint8_t* at = panel + b * record;
      float a = 0.0f, offsets = 0.0f;
      for (std::size_t j = 0; j < kSuperBlock / kQuantBlock; ++j) {
        std::size_t input_block = b * (kSuperBlock / kQuantBlock) + j;
        std::int32_t dot = nibble_dot(at + kQ4KCodesOffset + j * kQ4CodesBytes, row, x + input_block * kQuantBlock);
        std::int32_t multiplier = at[kQ4KMultipliersOffset + j * kPanelRows + row];
        std::int32_t offset = at[kQ4KOffsetsOffset + j * kPanelRows + row];
        a = std::fma(static_cast<float>(dot * multiplier), input_scales[input_block], a);
        offsets = std::fma(static_cast<float>(offset * input_sums[input_block]), input_scales[input_block], offsets);
      }
      sum = std::fma(load_half(at + kQ4KScaleOffset + row * 2), a, sum);
      sum = std::fma(-load_half(at + kQ4KMinScaleOffset + row * 2), offsets, sum);
      continue;
    }
    std::int32_t dot = 0, offset = 0;
    const std::int8_t* xb = x + b * kQuantBlock;
    const std::size_t codes_bytes = matrix.format == LlmWeightFormat::kQ8_0 ? kQ8CodesBytes : kQ4CodesBytes;
    const std::uint8_t* codes = panel + b * codes_bytes;
    if (matrix.format == LlmWeightFormat::kQ8_0) {
      for (std::size_t k = 0; k < kQuantBlock; ++k) dot += codes[((k / 4) * kPanelRows + row) * 4 + k % 4] * xb[k];
      offset = 128;
    } else {
      dot = nibble_dot(codes, row, xb);
      offset = 8;
    }
    const std::uint8_t* scales = panel + blocks * codes_bytes + b * kScalesBytes;
    float scale = load_half(scales + row * 2) * input_scales[b];
    sum = std::fma(static_cast<float>(dot - offset * input_sums[b]), scale, sum);
  }
  return sum;
}

void product_scalar(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                    std::size_t panel_count, float* out) {
  for (std::size_t p = first_panel; p < first_panel + panel_count; ++p) {
    const auto* panel = reinterpret_cast<const std::uint8_t*>(matrix.panel(p));
    std::size_t rows = std::min(kPanelRows, matrix.rows - p * kPanelRows);
    for (std::size_t t = 0; t < input.tokens; ++t) {
      for (std::size_t r = 0; r < rows; ++r) {
        out[t * matrix.rows + p * kPanelRows + r] = scalar_output(matrix, panel, r, input, t);
      }
    }
  }
}

void quantize_input_scalar(const float* values, std::size_t blocks, std::int8_t* quantized, float* scales,
                           std::int32_t* sums) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* x = values + b * kQuantBlock;
    float largest = 0.0f;
    bool finite = true;
    for (std::size_t k = 0; k < kQuantBlock; ++k) {
      largest = std::max(largest, std::abs(x[k]));
      finite = finite && std::isfinite(x[k]);
    }
    float scale = finite ? largest / 127.0f : NAN;
    float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < kQuantBlock; ++k) {
      float level = std::nearbyint(x[k] * inverse);
      auto q = static_cast<std::int8_t>(std::isfinite(level) ? std::clamp(level, -127.0f, 127.0f) : 0.0f);
      quantized[b * kQuantBlock + k] = q;
      sum += q;
    }
    scales[b] = scale;
    sums[b] = sum;
  }
}

}  // namespace

float kv_element(const KvBlock& block, std::size_t index, std::size_t row) {
  switch (block.element) {
    case KvElement::kF32:
      return static_cast<const float*>(block.data)[index];
    case KvElement::kF16:
      return half_to_float(static_cast<const std::uint16_t*>(block.data)[index]);
    case KvElement::kInt8:
      return static_cast<float>(static_cast<const std::int8_t*>(block.data)[index]) *
             block.scales[row * block.scale_stride];
    case KvElement::kFp8E4M3:
      return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(block.data)[index]) *
             block.scales[row * block.scale_stride];
  }
  return 0.0f;
}

namespace {

void block_scores_scalar(const float* queries, std::size_t query_stride, std::size_t query_count, const KvBlock& keys,
                         std::size_t head_dim, float* scores, std::size_t score_stride) {
  for (std::size_t q = 0; q < query_count; ++q) {
    const float* query = queries + q * query_stride;
    float chains[4][kAttentionBlock] = {};
    for (std::size_t d = 0; d < head_dim; ++d) {
      for (std::size_t i = 0; i < kAttentionBlock; ++i) {
        chains[d % 4][i] = std::fma(query[d], kv_element(keys, d * kAttentionBlock + i, i), chains[d % 4][i]);
      }
    }
    for (std::size_t i = 0; i < kAttentionBlock; ++i) {
      scores[q * score_stride + i] = (chains[0][i] + chains[1][i]) + (chains[2][i] + chains[3][i]);
    }
  }
}

void softmax_scalar(float* scores, std::size_t count, float scale) {
  float largest = -INFINITY;
  for (std::size_t p = 0; p < count; ++p) {
    float x = scores[p] * scale;
    largest = x > largest ? x : largest;  // NaN kept out, as the vector max does
  }
  float lanes[kAttentionBlock] = {};
  for (std::size_t p = 0; p < count; ++p) {
    scores[p] = llm_exp(scores[p] * scale - largest);
    lanes[p % kAttentionBlock] += scores[p];
  }
  for (std::size_t width = kAttentionBlock / 2; width > 0; width /= 2) {
    for (std::size_t j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  }
  for (std::size_t p = 0; p < count; ++p) scores[p] /= lanes[0];
}

void add_weighted_values_scalar(const float* weights, std::size_t weight_stride, std::size_t query_count,
                                std::size_t count, const KvBlock& values, std::size_t head_dim, float* out,
                                std::size_t out_stride) {
  for (std::size_t q = 0; q < query_count; ++q) {
    for (std::size_t i = 0; i < count; ++i) {
      for (std::size_t d = 0; d < head_dim; ++d) {
        out[q * out_stride + d] = std::fma(weights[q * weight_stride + i], kv_element(values, i * values.stride + d, i),
                                           out[q * out_stride + d]);
      }
    }
  }
}

void silu_multiply_scalar(float* gate, const float* up, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) gate[i] = gate[i] / (1.0f + llm_exp(-gate[i])) * up[i];
}

bool always() { return true; }

constexpr LlmKernelVariant kLlmVariants[] = {
    {"scalar", always, product_scalar, quantize_input_scalar, block_scores_scalar, softmax_scalar,
     add_weighted_values_scalar, silu_multiply_scalar},
    {"avx2", cpu_has_avx2_f16c, llm_product_avx2, quantize_input_scalar, llm_block_scores_avx2, llm_softmax_avx2,
     llm_add_weighted_values_avx2, llm_silu_multiply_avx2},
    {"avx512", cpu_has_avx512_vnni_f16c, llm_product_avx512, llm_quantize_input_avx512, llm_block_scores_avx512,
     llm_softmax_avx512, llm_add_weighted_values_avx512, llm_silu_multiply_avx512},
};

}  // namespace

std::size_t kv_element_bytes(KvElement element) {
  return element == KvElement::kF32   ? sizeof(float)
         : element == KvElement::kF16 ? sizeof(std::uint16_t)
                                      : 1;  // int8, FP8
}

KvBlock kv_block_from_row(const KvBlock& block, std::size_t row) {
  KvBlock from = block;
  from.data = static_cast<const std::byte*>(block.data) + row * block.stride * kv_element_bytes(block.element);
  if (from.scales != nullptr) from.scales += row * block.scale_stride;
  return from;
}

float llm_exp(float x) {
  if (!(x >= kExpLowest)) return 0.0f;
  x = std::min(x, kExpHighest);
  float n = std::nearbyint(x * kLog2E);
  float r = std::fma(n, -kLn2High, x);
  r = std::fma(n, -kLn2Low, r);
  float p = kExpPolynomial[0];
  for (std::size_t k = 1; k < std::size(kExpPolynomial); ++k) p = std::fma(p, r, kExpPolynomial[k]);
  float y = std::fma(p, r * r, r) + 1.0f;
  return y * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

LlmPackedMatrix pack_llm_matrix(LlmWeightFormat format, std::span<const std::byte> file_rows, std::size_t rows,
                                std::size_t columns) {
  LlmPackedMatrix matrix;
  matrix.format = format;
  matrix.rows = rows;
  matrix.columns = columns;
  const std::size_t blocks = columns / llm_format_block(format);
  const std::size_t row_bytes = blocks * file_block_bytes(format);
  // Whole cache lines per panel, so that every panel starts on one as the first does.
  constexpr std::size_t kLine = 64;
  matrix.panel_bytes = (blocks * panel_block_bytes(format) + kLine - 1) / kLine * kLine;
  matrix.storage = HugePageBuffer(matrix.bytes());
  // A model's matrices are gigabytes: packed a panel per task, on every core.
  parallel_for(matrix.panels(), default_thread_count(), [&](std::size_t panel) {
    for (std::size_t r = panel * kPanelRows; r < std::min(rows, (panel + 1) * kPanelRows); ++r) {
      const std::byte* source = file_rows.data() + r * row_bytes;
      for (std::size_t b = 0; b < blocks; ++b) {
        pack_block(format, source + b * file_block_bytes(format), r % kPanelRows,
                   matrix.storage.data() + panel * matrix.panel_bytes, b, blocks);
      }
    }
  });
  return matrix;
}

void prepare_llm_input(const float* values, std::size_t tokens, std::size_t columns, bool quantize, LlmInput& input) {
  input.tokens = tokens;
  input.columns = columns;
  input.values = values;
  if (!quantize) return;
  const std::size_t blocks = columns / kQuantBlock;
  input.quantized.resize(tokens * columns);
  input.scales.resize(tokens * blocks);
  input.sums.resize(tokens * blocks);
  llm_kernel().quantize_input(values, tokens * blocks, input.quantized.data(), input.scales.data(), input.sums.data());
}

std::span<const LlmKernelVariant> llm_kernel_variants() { return kLlmVariants; }

const LlmKernelVariant& llm_kernel() {
  static const LlmKernelVariant& chosen =
      choose_variant(std::span<const LlmKernelVariant>(kLlmVariants), "SLIPWAY_LLM_KERNEL");
  return chosen;
}

}  // namespace slipway::kernels
