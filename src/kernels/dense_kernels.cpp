// Dense layers: packing, quantization, the reference kernels, the dispatch table and the threaded
// drivers. The vector variants are in dense_kernels_x86.cpp.
#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "kernels/dense_kernels_x86.h"
#include "kernels/variant_choice.h"
#include "slipway/core.h"
#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

// As the vector max(x, 0) does: 0 for -0 and for NaN.
float relu(float value) { return value > 0.0f ? value : 0.0f; }

// A row's int8 quantization: scale = max|x| / 127 and q = round(x * (127 / max|x|)), to nearest
// with ties to even, within [-127, 127] (multiplied by the inverse, as the vector quantizers do,
// so all give these bytes). A row whose max|x| is below kTinyMagnitude is all zeros with scale 1
// (its inverse would overflow); a row holding NaN or an infinity is all zeros with scale NaN, so
// the outputs it reaches are NaN rather than a number made up.
struct RowQuantization {
  float scale = 1.0f, inverse = 0.0f;
};
RowQuantization row_quantization(std::span<const float> values) {
  float largest = 0.0f;
  for (float value : values) {
    if (!std::isfinite(value)) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
    largest = std::max(largest, std::abs(value));
  }
  if (largest < kTinyMagnitude) return {};
  return {largest / 127.0f, 127.0f / largest};
}

std::int8_t quantize(float value, float inverse) {
  return static_cast<std::int8_t>(std::clamp(std::nearbyint(value * inverse), -127.0f, 127.0f));
}

void quantize_row_reference(const float* in, std::size_t depth, std::uint8_t* out, float* scale) {
  RowQuantization row = row_quantization({in, depth});
  *scale = row.scale;
  for (std::size_t k = 0; k < depth; ++k) {
    out[k] = static_cast<std::uint8_t>((std::isfinite(in[k]) ? quantize(in[k], row.inverse) : 0) + 128);
  }
}

// As vdpbf16ps treats them: a subnormal becomes a zero of its sign.
float flush_subnormal(float value) {
  return std::abs(value) < std::numeric_limits<float>::min() ? std::copysign(0.0f, value) : value;
}

// Each output's sum from its bias, adding k in order with one fused multiply-add each: what a
// vector lane computes for its output, so the vector variants match it bit for bit.
void dense_f32_reference(const PackedDenseF32& layer, const float* in, std::size_t rows, float* out,
                         std::size_t first_block, std::size_t block_count) {
  for (std::size_t row = 0; row < rows; ++row) {
    const float* input = in + row * layer.depth;
    for (std::size_t block = first_block; block < first_block + block_count; ++block) {
      const float* weights = layer.weights.data() + block * layer.depth * kDenseBlock;
      for (std::size_t lane = 0; lane < kDenseBlock; ++lane) {
        std::size_t output = block * kDenseBlock + lane;
        if (output >= layer.outputs) break;
        float sum = layer.bias[output];
        for (std::size_t k = 0; k < layer.depth; ++k) sum = std::fma(input[k], weights[k * kDenseBlock + lane], sum);
        out[row * layer.outputs + output] = layer.relu ? relu(sum) : sum;
      }
    }
  }
}

void dense_int8_reference(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                          std::size_t block_count) {
  for (std::size_t row = 0; row < in.rows; ++row) {
    const std::uint8_t* input = in.values.data() + row * in.stride;
    for (std::size_t block = first_block; block < first_block + block_count; ++block) {
      const std::int8_t* weights = layer.weights.data() + block * layer.padded_depth * kDenseBlock;
      for (std::size_t lane = 0; lane < kDenseBlock; ++lane) {
        std::size_t output = block * kDenseBlock + lane;
        if (output >= layer.outputs) break;
        std::int32_t sum = 0;
        for (std::size_t k = 0; k < layer.depth4; ++k) {
          std::int32_t value = static_cast<std::int32_t>(input[k]) - 128;
          sum += value * weights[(k / 4) * kDenseBlock * 4 + lane * 4 + k % 4];
        }
        float value = std::fma(static_cast<float>(sum), in.scales[row] * layer.scales[output], layer.bias[output]);
        out[row * layer.outputs + output] = layer.relu ? relu(value) : value;
      }
    }
  }
}

void dense_bf16_reference(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                          std::size_t block_count) {
  auto widen = QuantizedTreesView::bf16_to_float;
  for (std::size_t row = 0; row < in.rows; ++row) {
    const std::uint16_t* input = in.values.data() + row * in.stride;
    for (std::size_t block = first_block; block < first_block + block_count; ++block) {
      const std::uint16_t* weights = layer.weights.data() + block * layer.padded_depth * kDenseBlock;
      for (std::size_t lane = 0; lane < kDenseBlock; ++lane) {
        std::size_t output = block * kDenseBlock + lane;
        if (output >= layer.outputs) break;
        float sum = layer.bias[output];
        for (std::size_t k = 0; k < layer.depth2; k += 2) {
          const std::uint16_t* pair = weights + (k / 2) * kDenseBlock * 2 + lane * 2;
          sum = flush_subnormal(std::fma(widen(input[k + 1]), widen(pair[1]), sum));
          sum = flush_subnormal(std::fma(widen(input[k]), widen(pair[0]), sum));
        }
        out[row * layer.outputs + output] = layer.relu ? relu(sum) : sum;
      }
    }
  }
}

void round_row_bf16_reference(const float* in, std::size_t depth, std::uint16_t* out) {
  for (std::size_t k = 0; k < depth; ++k) out[k] = QuantizedTreesView::float_to_bf16(flush_subnormal(in[k]));
}

bool always_supported() { return true; }

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx512_bf16();

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && cpu_has_avx2_fma();
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512bf16");
}

bool cpu_has_amx() { return cpu_has_avx512_bf16() && amx_usable(); }

constexpr DenseKernelVariant kVariants[] = {
    {"scalar", false, false, always_supported, dense_f32_reference, dense_int8_reference, quantize_row_reference,
     dense_bf16_reference, round_row_bf16_reference},
    {"avx2", false, false, cpu_has_avx2_fma, dense_f32_avx2, dense_int8_avx2, quantize_row_avx2, dense_bf16_avx2,
     round_row_bf16_reference},
    {"avx512", false, false, cpu_has_avx512_vnni, dense_f32_avx512, dense_int8_avx512_vnni, quantize_row_avx512,
     dense_bf16_avx2, round_row_bf16_reference},
    {"avx512bf16", true, false, cpu_has_avx512_bf16, dense_f32_avx512, dense_int8_avx512_vnni, quantize_row_avx512,
     dense_bf16_avx512, round_row_bf16_avx512},
    {"amx", true, true, cpu_has_amx, dense_f32_avx512, dense_int8_amx, quantize_row_avx512, dense_bf16_amx,
     round_row_bf16_avx512},
};

// Work below this many multiply-adds (tens of microseconds) runs on the calling thread: waking
// a pool thread costs about as much.
constexpr std::size_t kMinWorkPerThread = std::size_t{1} << 22;

void split_blocks(std::size_t blocks, std::size_t work, int threads,
                  const std::function<void(std::size_t first, std::size_t count)>& run) {
  std::size_t wanted =
      threads > 0 ? static_cast<std::size_t>(threads) : static_cast<std::size_t>(default_thread_count());
  std::size_t parts =
      std::clamp<std::size_t>(std::min(wanted, work / kMinWorkPerThread), 1, std::max<std::size_t>(blocks, 1));
  if (parts <= 1) {
    run(0, blocks);
    return;
  }
  parallel_for(parts, static_cast<int>(parts), [&](std::size_t part) {
    std::size_t first = part * blocks / parts, end = (part + 1) * blocks / parts;
    if (end > first) run(first, end - first);
  });
}

std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Where weight k of `output` goes in a packed layout: [blocks][padded_depth / group][kDenseBlock]
// [group], `group` consecutive inputs of one output together (1 for fp32, 2 for bf16, 4 for int8).
std::size_t packed_index(std::size_t output, std::size_t k, std::size_t padded_depth, std::size_t group) {
  std::size_t block = output / kDenseBlock, lane = output % kDenseBlock;
  return ((block * padded_depth / group + k / group) * kDenseBlock + lane) * group + k % group;
}

// The shape every packing shares, and the bias (as `convert` makes it) padded to whole blocks.
void set_shape(PackedDenseShape& layer, std::span<const float> bias, std::size_t outputs, std::size_t depth, bool relu,
               float (*convert)(float)) {
  layer.outputs = outputs;
  layer.depth = depth;
  layer.relu = relu;
  layer.bias.assign(layer.blocks() * kDenseBlock, 0.0f);
  for (std::size_t output = 0; output < outputs && !bias.empty(); ++output) layer.bias[output] = convert(bias[output]);
}

}  // namespace

PackedDenseF32 pack_dense_f32(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                              std::size_t depth, bool relu) {
  PackedDenseF32 layer;
  set_shape(layer, bias, outputs, depth, relu, [](float value) { return value; });
  layer.weights.assign(layer.blocks() * depth * kDenseBlock, 0.0f);
  for (std::size_t output = 0; output < outputs; ++output) {
    for (std::size_t k = 0; k < depth; ++k) {
      layer.weights[packed_index(output, k, depth, 1)] = weights[output * depth + k];
    }
  }
  return layer;
}

PackedDenseF32 pack_dense_f32_transposed(std::span<const float> weights_transposed, std::span<const float> bias,
                                         std::size_t outputs, std::size_t depth) {
  PackedDenseF32 layer;
  set_shape(layer, bias, outputs, depth, false, [](float value) { return value; });
  layer.weights.assign(layer.blocks() * depth * kDenseBlock, 0.0f);
  // Block b's 16 weights for input k are 16 neighbours in row k of the transpose.
  for (std::size_t block = 0; block < layer.blocks(); ++block) {
    std::size_t first = block * kDenseBlock;
    std::size_t count = std::min(kDenseBlock, outputs - first);
    float* packed = layer.weights.data() + block * depth * kDenseBlock;
    for (std::size_t k = 0; k < depth; ++k) {
      std::copy_n(weights_transposed.data() + k * outputs + first, count, packed + k * kDenseBlock);
    }
  }
  return layer;
}

PackedDenseInt8 pack_dense_int8(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                                std::size_t depth, bool relu) {
  PackedDenseInt8 layer;
  set_shape(layer, bias, outputs, depth, relu, [](float value) { return value; });
  layer.depth4 = round_up(depth, 4);
  layer.padded_depth = round_up(depth, kInt8PaddedMultiple);
  layer.weights.assign(layer.blocks() * layer.padded_depth * kDenseBlock, 0);
  layer.scales.assign(layer.bias.size(), 0.0f);
  layer.sums.assign(layer.bias.size(), 0);
  for (std::size_t output = 0; output < outputs; ++output) {
    std::span<const float> row = weights.subspan(output * depth, depth);
    RowQuantization quantization = row_quantization(row);
    layer.scales[output] = quantization.scale;
    for (std::size_t k = 0; k < depth; ++k) {
      std::int8_t value = std::isfinite(row[k]) ? quantize(row[k], quantization.inverse) : std::int8_t{0};
      layer.weights[packed_index(output, k, layer.padded_depth, 4)] = value;
      layer.sums[output] += value;
    }
  }
  return layer;
}

namespace {

PackedDenseBf16 bf16_shape(std::span<const float> bias, std::size_t outputs, std::size_t depth, bool relu) {
  PackedDenseBf16 layer;
  set_shape(layer, bias, outputs, depth, relu, flush_subnormal);
  layer.depth2 = round_up(depth, 2);
  layer.padded_depth = round_up(depth, kBf16PaddedMultiple);
  layer.weights.assign(layer.blocks() * layer.padded_depth * kDenseBlock, 0);
  return layer;
}

}  // namespace

// Both packings round a row at a time with the chosen variant's converter (the same values in
// all), then place whole pairs: the training step packs a layer's weights, and the activations it
// multiplies by, at every step.
PackedDenseBf16 pack_dense_bf16(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                                std::size_t depth, bool relu) {
  PackedDenseBf16 layer = bf16_shape(bias, outputs, depth, relu);
  RoundRowBf16 round_row = dense_kernel().round_row_bf16;
  std::vector<std::uint16_t> rounded(layer.depth2, 0);
  const std::size_t pairs = layer.depth2 / 2;
  for (std::size_t output = 0; output < outputs; ++output) {
    round_row(weights.data() + output * depth, depth, rounded.data());
    // Output o's pair p goes to [block][p][lane]: 32 bits each, kDenseBlock pairs apart.
    std::uint16_t* packed = layer.weights.data() + packed_index(output, 0, layer.padded_depth, 2);
    for (std::size_t pair = 0; pair < pairs; ++pair) {
      std::memcpy(packed + pair * kDenseBlock * 2, rounded.data() + pair * 2, 2 * sizeof(std::uint16_t));
    }
  }
  return layer;
}

PackedDenseBf16 pack_dense_bf16_transposed(std::span<const float> weights_transposed, std::span<const float> bias,
                                           std::size_t outputs, std::size_t depth) {
  PackedDenseBf16 layer = bf16_shape(bias, outputs, depth, false);
  RoundRowBf16 round_row = dense_kernel().round_row_bf16;
  // Rows k and k + 1 of the transpose rounded, each padded to whole blocks (zeros).
  std::vector<std::uint16_t> even(layer.blocks() * kDenseBlock, 0), odd(even.size(), 0);
  for (std::size_t k = 0; k < depth; k += 2) {
    round_row(weights_transposed.data() + k * outputs, outputs, even.data());
    if (k + 1 < depth) {
      round_row(weights_transposed.data() + (k + 1) * outputs, outputs, odd.data());
    } else {
      std::fill(odd.begin(), odd.end(), std::uint16_t{0});
    }
    for (std::size_t block = 0; block < layer.blocks(); ++block) {
      std::uint16_t* packed = layer.weights.data() + packed_index(block * kDenseBlock, k, layer.padded_depth, 2);
      for (std::size_t lane = 0; lane < kDenseBlock; ++lane) {
        packed[lane * 2] = even[block * kDenseBlock + lane];
        packed[lane * 2 + 1] = odd[block * kDenseBlock + lane];
      }
    }
  }
  return layer;
}

void round_rows_to_bf16(std::span<const float> in, std::size_t rows, std::size_t depth, Bf16Rows& out) {
  out.rows = rows;
  out.stride = round_up(depth, kBf16PaddedMultiple);
  out.values.assign(rows * out.stride, 0);
  RoundRowBf16 round_row = dense_kernel().round_row_bf16;
  for (std::size_t row = 0; row < rows; ++row)
    round_row(in.data() + row * depth, depth, out.values.data() + row * out.stride);
}

void quantize_rows_static_reference(std::span<const float> in, std::size_t rows, std::size_t depth, float scale,
                                    QuantizedRows& out) {
  out.rows = rows;
  out.stride = round_up(depth, kInt8PaddedMultiple);
  out.values.assign(rows * out.stride, 128);
  out.scales.assign(rows, scale);
  float inverse = 1.0f / scale;
  for (std::size_t row = 0; row < rows; ++row) {
    const float* values = in.data() + row * depth;
    std::uint8_t* bytes = out.values.data() + row * out.stride;
    if (!std::all_of(values, values + depth, [](float value) { return std::isfinite(value); })) {
      out.scales[row] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    for (std::size_t k = 0; k < depth; ++k) bytes[k] = static_cast<std::uint8_t>(quantize(values[k], inverse) + 128);
  }
}

void quantize_rows_static(std::span<const float> in, std::size_t rows, std::size_t depth, float scale,
                          QuantizedRows& out) {
#if defined(__SSE2__)
  // SSE2 is x86-64's baseline: no dispatch. cvtps2dq rounds to nearest even (the default MXCSR),
  // as nearbyint does, so the bytes are the reference's.
  out.rows = rows;
  out.stride = round_up(depth, kInt8PaddedMultiple);
  out.values.assign(rows * out.stride, 128);
  out.scales.assign(rows, scale);
  const __m128 inverse = _mm_set1_ps(1.0f / scale);
  const __m128 high = _mm_set1_ps(127.0f), low = _mm_set1_ps(-127.0f), zero = _mm_setzero_ps();
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  for (std::size_t row = 0; row < rows; ++row) {
    const float* values = in.data() + row * depth;
    std::uint8_t* bytes = out.values.data() + row * out.stride;
    __m128 finite = _mm_cmpeq_ps(zero, zero);  // all ones; x * 0 is NaN exactly when x is not finite
    std::size_t k = 0;
    auto quantize4 = [&](std::size_t at) {
      __m128 value = _mm_loadu_ps(values + at);
      finite = _mm_and_ps(finite, _mm_cmpord_ps(_mm_mul_ps(value, zero), zero));
      return _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_mul_ps(value, inverse), low), high));
    };
    for (; k + 16 <= depth; k += 16) {
      __m128i first = _mm_packs_epi32(quantize4(k), quantize4(k + 4));
      __m128i second = _mm_packs_epi32(quantize4(k + 8), quantize4(k + 12));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes + k), _mm_xor_si128(_mm_packs_epi16(first, second), bias));
    }
    bool row_finite = _mm_movemask_ps(finite) == 0xF;
    for (; k < depth; ++k) {
      row_finite = row_finite && std::isfinite(values[k]);
      if (row_finite) bytes[k] = static_cast<std::uint8_t>(quantize(values[k], 1.0f / scale) + 128);
    }
    if (!row_finite) {
      std::fill_n(bytes, depth, std::uint8_t{128});
      out.scales[row] = std::numeric_limits<float>::quiet_NaN();
    }
  }
#else
  quantize_rows_static_reference(in, rows, depth, scale, out);
#endif
}

void quantize_rows(std::span<const float> in, std::size_t rows, std::size_t depth, QuantizedRows& out) {
  out.rows = rows;
  out.stride = round_up(depth, kInt8PaddedMultiple);
  out.values.assign(rows * out.stride, 128);
  out.scales.resize(rows);
  QuantizeRow quantize_row = dense_kernel().quantize_row;
  for (std::size_t row = 0; row < rows; ++row) {
    quantize_row(in.data() + row * depth, depth, out.values.data() + row * out.stride, &out.scales[row]);
  }
}

std::span<const DenseKernelVariant> dense_kernel_variants() { return kVariants; }

const DenseKernelVariant& dense_kernel() {
  static const DenseKernelVariant& chosen =
      choose_variant(std::span<const DenseKernelVariant>(kVariants), "SLIPWAY_DENSE_KERNEL");
  return chosen;
}

void dense_f32(const PackedDenseF32& layer, std::span<const float> in, std::size_t rows, std::span<float> out,
               int threads) {
  DenseF32Kernel kernel = dense_kernel().f32;
  split_blocks(layer.blocks(), rows * layer.depth * layer.blocks() * kDenseBlock, threads,
               [&](std::size_t first, std::size_t count) { kernel(layer, in.data(), rows, out.data(), first, count); });
}

void dense_bf16(const PackedDenseBf16& layer, const Bf16Rows& in, std::span<float> out, int threads) {
  DenseBf16Kernel kernel = dense_kernel().bf16;
  // A bf16 pair costs about one fp32 multiply-add; on AMX, a sixteenth of that.
  std::size_t work = in.rows * layer.depth2 * layer.blocks() * kDenseBlock / 2;
  split_blocks(layer.blocks(), dense_kernel().amx ? work / 16 : work, threads,
               [&](std::size_t first, std::size_t count) { kernel(layer, in, out.data(), first, count); });
}

void dense_int8(const PackedDenseInt8& layer, const QuantizedRows& in, std::span<float> out, int threads) {
  DenseInt8Kernel kernel = dense_kernel().int8;
  // An int8 multiply-add costs about a quarter of an fp32 one (four per VNNI lane); on AMX, an
  // eighth of that.
  std::size_t work = in.rows * layer.depth4 * layer.blocks() * kDenseBlock / 4;
  split_blocks(layer.blocks(), dense_kernel().amx ? work / 8 : work, threads,
               [&](std::size_t first, std::size_t count) { kernel(layer, in, out.data(), first, count); });
}

}  // namespace slipway::kernels
