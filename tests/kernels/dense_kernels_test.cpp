// Every dense-layer variant this CPU supports against the reference, bit for bit (AMX's bf16
// within its bound), on random layers whose shapes reach each path of the vector variants: row
// tiles and the rows after them, block pairs, eight-block single-row tiles, a last block of fewer
// than 16 outputs, depths that are not multiples of 4, AMX's groups of 16 rows whole and partial;
// and the int8 layer's error against fp32 within its quantization bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

struct Layer {
  std::size_t outputs, depth;
  std::vector<float> weights, bias;
};

Layer random_layer(std::size_t outputs, std::size_t depth, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(depth)));
  Layer layer{outputs, depth, std::vector<float>(outputs * depth), std::vector<float>(outputs)};
  for (float& weight : layer.weights) weight = normal(random);
  for (float& bias : layer.bias) bias = normal(random);
  return layer;
}

std::vector<float> random_rows(std::size_t rows, std::size_t depth, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(rows * depth);
  for (float& value : values) value = normal(random);
  if (!values.empty()) values[0] = 0.0f;       // zeros, and a whole row of them below
  if (values.size() > 1) values[1] = -1e-40f;  // a subnormal: bf16 rounding makes it -0
  if (rows > 2)
    std::fill(values.begin() + static_cast<std::ptrdiff_t>(depth),
              values.begin() + static_cast<std::ptrdiff_t>(2 * depth), 0.0f);
  return values;
}

struct Shape {
  std::size_t rows, outputs, depth;
};

constexpr Shape kShapes[] = {{1, 1, 1},    {1, 16, 4},  {1, 130, 37},  {1, 256, 28}, {3, 17, 5},   {4, 32, 64},
                             {5, 48, 3},   {9, 7, 100}, {13, 33, 257}, {2, 129, 16}, {8, 16, 1},   {17, 200, 28},
                             {64, 1, 256}, {3, 145, 9}, {1, 8, 300},   {6, 250, 66}, {40, 50, 70}, {32, 32, 64}};

// For a variant whose bf16 is not exact (AMX): each output within (depth + 1) * 2^-23 of
// |bias| plus its products' magnitudes, which the reference computes on the absolute values.
void expect_bf16_within_bound(const std::vector<float>& got, const std::vector<float>& expected, const Layer& layer,
                              const std::vector<float>& in, std::size_t rows) {
  auto absolute = [](std::vector<float> values) {
    for (float& value : values) value = std::abs(value);
    return values;
  };
  PackedDenseBf16 magnitudes_layer =
      pack_dense_bf16(absolute(layer.weights), absolute(layer.bias), layer.outputs, layer.depth);
  Bf16Rows magnitudes_rows;
  round_rows_to_bf16(absolute(in), rows, layer.depth, magnitudes_rows);
  std::vector<float> magnitudes(rows * layer.outputs);
  dense_kernel_variants().front().bf16(magnitudes_layer, magnitudes_rows, magnitudes.data(), 0,
                                       magnitudes_layer.blocks());
  for (std::size_t at = 0; at < got.size(); ++at) {
    double bound = static_cast<double>(layer.depth + 1) * std::ldexp(1.0, -23) * magnitudes[at];
    ASSERT_LE(std::abs(static_cast<double>(got[at]) - expected[at]), bound) << "output " << at;
  }
}

TEST(DenseKernels, EveryVariantGivesTheReferenceBitsInFp32Bf16AndInt8) {
  std::mt19937 random(11);
  const DenseKernelVariant& reference = dense_kernel_variants().front();
  for (const Shape& shape : kShapes) {
    Layer layer = random_layer(shape.outputs, shape.depth, random);
    std::vector<float> in = random_rows(shape.rows, shape.depth, random);
    bool relu = shape.outputs % 2 == 1;  // half the shapes fuse the activation
    PackedDenseF32 f32 = pack_dense_f32(layer.weights, layer.bias, layer.outputs, layer.depth, relu);
    PackedDenseInt8 int8 = pack_dense_int8(layer.weights, layer.bias, layer.outputs, layer.depth, relu);
    QuantizedRows quantized;
    quantize_rows(in, shape.rows, shape.depth, quantized);
    std::vector<float> expected_f32(shape.rows * shape.outputs), expected_int8(shape.rows * shape.outputs);
    reference.f32(f32, in.data(), shape.rows, expected_f32.data(), 0, f32.blocks());
    reference.int8(int8, quantized, expected_int8.data(), 0, int8.blocks());
    PackedDenseBf16 bf16 = pack_dense_bf16(layer.weights, layer.bias, layer.outputs, layer.depth, relu);
    Bf16Rows rounded;
    round_rows_to_bf16(in, shape.rows, shape.depth, rounded);
    std::vector<float> expected_bf16(shape.rows * shape.outputs);
    reference.bf16(bf16, rounded, expected_bf16.data(), 0, bf16.blocks());
    std::vector<std::uint8_t> expected_bytes(quantized.stride);
    float expected_scale = 0;
    reference.quantize_row(in.data(), shape.depth, expected_bytes.data(), &expected_scale);
    for (const auto& variant : dense_kernel_variants()) {
      if (!variant.supported()) continue;
      SCOPED_TRACE(std::string(variant.name) + " rows " + std::to_string(shape.rows) + " outputs " +
                   std::to_string(shape.outputs) + " depth " + std::to_string(shape.depth));
      std::vector<float> got(shape.rows * shape.outputs, -1.0f);
      variant.f32(f32, in.data(), shape.rows, got.data(), 0, f32.blocks());
      EXPECT_EQ(got, expected_f32);
      std::fill(got.begin(), got.end(), -1.0f);
      variant.int8(int8, quantized, got.data(), 0, int8.blocks());
      EXPECT_EQ(got, expected_int8);
      std::fill(got.begin(), got.end(), -1.0f);
      variant.bf16(bf16, rounded, got.data(), 0, bf16.blocks());
      if (!variant.amx) {
        EXPECT_EQ(got, expected_bf16);
      } else {
        expect_bf16_within_bound(got, expected_bf16, layer, in, shape.rows);
      }
      std::vector<std::uint16_t> halves(rounded.stride);
      variant.round_row_bf16(in.data(), shape.depth, halves.data());
      EXPECT_TRUE(std::equal(halves.begin(), halves.begin() + static_cast<std::ptrdiff_t>(shape.depth),
                             rounded.values.begin()));
      std::vector<std::uint8_t> bytes(quantized.stride);
      float row_scale = 0;
      variant.quantize_row(in.data(), shape.depth, bytes.data(), &row_scale);
      EXPECT_EQ(bytes, expected_bytes);
      EXPECT_EQ(row_scale, expected_scale);
      // Any split of the blocks computes the same.
      if (f32.blocks() > 1) {
        std::fill(got.begin(), got.end(), -1.0f);
        variant.f32(f32, in.data(), shape.rows, got.data(), 0, 1);
        variant.f32(f32, in.data(), shape.rows, got.data(), 1, f32.blocks() - 1);
        EXPECT_EQ(got, expected_f32);
        std::vector<float> whole(got.size()), split(got.size());
        variant.bf16(bf16, rounded, whole.data(), 0, bf16.blocks());
        variant.bf16(bf16, rounded, split.data(), 0, 1);
        variant.bf16(bf16, rounded, split.data(), 1, bf16.blocks() - 1);
        EXPECT_EQ(split, whole);
        variant.int8(int8, quantized, split.data(), 0, 1);
        variant.int8(int8, quantized, split.data(), 1, int8.blocks() - 1);
        EXPECT_EQ(split, expected_int8);
      }
      // A row's outputs do not depend on the rows around it: the last row alone gives its bits.
      if (shape.rows > 1) {
        std::size_t last = shape.rows - 1;
        std::vector<float> alone(shape.outputs), whole(shape.rows * shape.outputs);
        Bf16Rows last_row;
        round_rows_to_bf16(std::span<const float>(in).subspan(last * shape.depth, shape.depth), 1, shape.depth,
                           last_row);
        variant.bf16(bf16, last_row, alone.data(), 0, bf16.blocks());
        variant.bf16(bf16, rounded, whole.data(), 0, bf16.blocks());
        EXPECT_TRUE(
            std::equal(alone.begin(), alone.end(), whole.begin() + static_cast<std::ptrdiff_t>(last * shape.outputs)));
      }
    }
  }
}

TEST(DenseKernels, TheReferenceIsTheLayerAndBf16AndInt8StayWithinTheirRounding) {
  std::mt19937 random(5);
  for (const Shape& shape : kShapes) {
    Layer layer = random_layer(shape.outputs, shape.depth, random);
    std::vector<float> in = random_rows(shape.rows, shape.depth, random);
    std::vector<float> f32(shape.rows * shape.outputs), int8(shape.rows * shape.outputs),
        bf16(shape.rows * shape.outputs);
    Bf16Rows rounded;
    round_rows_to_bf16(in, shape.rows, shape.depth, rounded);
    dense_bf16(pack_dense_bf16(layer.weights, layer.bias, layer.outputs, layer.depth), rounded, bf16);
    dense_f32(pack_dense_f32(layer.weights, layer.bias, layer.outputs, layer.depth), in, shape.rows, f32);
    QuantizedRows quantized;
    quantize_rows(in, shape.rows, shape.depth, quantized);
    dense_int8(pack_dense_int8(layer.weights, layer.bias, layer.outputs, layer.depth), quantized, int8);
    for (std::size_t row = 0; row < shape.rows; ++row) {
      float input_scale = quantized.scales[row];
      for (std::size_t output = 0; output < shape.outputs; ++output) {
        double exact = layer.bias[output], magnitude = 0;
        float weight_scale = 0;
        for (std::size_t k = 0; k < shape.depth; ++k) {
          double product = static_cast<double>(in[row * shape.depth + k]) * layer.weights[output * shape.depth + k];
          exact += product;
          magnitude += std::abs(product);
          weight_scale = std::max(weight_scale, std::abs(layer.weights[output * shape.depth + k]) / 127.0f);
        }
        std::size_t at = row * shape.outputs + output;
        EXPECT_NEAR(f32[at], exact, 1e-5 * (magnitude + std::abs(exact)) + 1e-6);
        // Each product is off by at most half a step in each factor.
        double bound = 0;
        for (std::size_t k = 0; k < shape.depth; ++k) {
          bound += 0.5 * input_scale * std::abs(layer.weights[output * shape.depth + k]) +
                   0.5 * weight_scale * std::abs(in[row * shape.depth + k]) + 0.25 * input_scale * weight_scale;
        }
        EXPECT_NEAR(int8[at], exact, bound + 1e-5 * magnitude + 1e-6);
        // bf16 keeps 8 bits of each factor: each product within about 2^-8 of its size.
        EXPECT_NEAR(bf16[at], exact, 0.008 * magnitude + 1e-6);
      }
    }
  }
}

// The edges every variant must treat alike: a row too small to scale (zeros), a row holding an
// infinity or NaN (zeros with a NaN scale), and bf16 sums that fall subnormal (a signed zero) or
// overflow in a product added to a large negative sum (fused: no infinity on the way).
TEST(DenseKernels, EveryVariantTreatsTinyNonFiniteAndSubnormalValuesAlike) {
  const DenseKernelVariant& reference = dense_kernel_variants().front();
  std::vector<std::vector<float>> rows = {
      {1e-37f, 0.0f, -1e-37f, 5e-38f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
      {1.0f, std::numeric_limits<float>::infinity(), 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},
      {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f},
      {0.5f, -0.25f, 1e-20f, 3.0f, -1e-40f, 0.0f, 2.0f, 1.0f, 0.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f,
       15.0f, 16.0f}};
  for (const auto& row : rows) {
    std::vector<std::uint8_t> expected(row.size());
    float expected_scale = 0;
    reference.quantize_row(row.data(), row.size(), expected.data(), &expected_scale);
    for (const auto& variant : dense_kernel_variants()) {
      if (!variant.supported()) continue;
      std::vector<std::uint8_t> bytes(row.size());
      float scale = 0;
      variant.quantize_row(row.data(), row.size(), bytes.data(), &scale);
      EXPECT_EQ(bytes, expected) << variant.name;
      EXPECT_TRUE(scale == expected_scale || (std::isnan(scale) && std::isnan(expected_scale))) << variant.name;
    }
  }
  EXPECT_EQ(std::vector<std::uint8_t>(3, 128), [&] {
    std::vector<std::uint8_t> bytes(3);
    float scale = 0;
    reference.quantize_row(rows[0].data(), 3, bytes.data(), &scale);
    return bytes;
  }());

  // bf16: one output whose sum goes subnormal, one whose product overflows unless fused.
  std::vector<float> weights = {1e-19f, 1e-20f, std::ldexp(1.0f, 64), 1.0f};
  std::vector<float> bias = {1e-40f, -std::numeric_limits<float>::max()};
  PackedDenseBf16 layer = pack_dense_bf16(weights, bias, 2, 2);
  std::vector<float> in = {1e-20f, 1e-20f};
  std::vector<float> in_big = {std::ldexp(1.0f, 64), 0.0f};
  for (bool overflows_unless_fused : {false, true}) {
    const std::vector<float>& input = overflows_unless_fused ? in_big : in;
    Bf16Rows rounded;
    round_rows_to_bf16(input, 1, 2, rounded);
    std::vector<float> expected(2);
    reference.bf16(layer, rounded, expected.data(), 0, layer.blocks());
    for (const auto& variant : dense_kernel_variants()) {
      // AMX rounds each product to float before it adds it: a product past float's range is an infinity.
      if (!variant.supported() || (overflows_unless_fused && variant.amx)) continue;
      std::vector<float> got(2);
      variant.bf16(layer, rounded, got.data(), 0, layer.blocks());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end(),
                             [](float a, float b) {
                               return std::bit_cast<std::uint32_t>(a) ==
                                      std::bit_cast<std::uint32_t>(b);  // bit for bit
                             }))
          << variant.name << ": " << got[0] << " " << got[1] << " vs " << expected[0] << " " << expected[1];
    }
  }
}

// Packing from the transpose (how a backward pass holds its matrices) gives the same packed layer.
TEST(DenseKernels, PackingFromTheTransposeGivesTheSameLayer) {
  std::mt19937 random(5);
  for (auto [outputs, depth] : {std::pair<std::size_t, std::size_t>{1, 1}, {17, 5}, {40, 33}, {16, 256}}) {
    Layer layer = random_layer(outputs, depth, random);
    std::vector<float> transposed(depth * outputs);
    for (std::size_t output = 0; output < outputs; ++output) {
      for (std::size_t k = 0; k < depth; ++k) transposed[k * outputs + output] = layer.weights[output * depth + k];
    }
    auto f32 = pack_dense_f32(layer.weights, layer.bias, outputs, depth);
    auto f32_transposed = pack_dense_f32_transposed(transposed, layer.bias, outputs, depth);
    EXPECT_EQ(f32_transposed.weights, f32.weights);
    EXPECT_EQ(f32_transposed.bias, f32.bias);
    auto bf16 = pack_dense_bf16(layer.weights, layer.bias, outputs, depth);
    auto bf16_transposed = pack_dense_bf16_transposed(transposed, layer.bias, outputs, depth);
    EXPECT_EQ(bf16_transposed.weights, bf16.weights);
    EXPECT_EQ(bf16_transposed.bias, bf16.bias);
  }
}

// Static (calibrated) quantization: the SSE2 loop gives the reference's bytes, with ties, values
// past the range, depths that leave a tail, and rows holding NaN or an infinity.
TEST(DenseKernels, StaticQuantizationGivesTheReferenceBytes) {
  std::mt19937 random(21);
  for (std::size_t depth : {1u, 3u, 15u, 16u, 17u, 40u, 257u}) {
    std::vector<float> rows = random_rows(6, depth, random);
    float scale = 2.5f / 127.0f;
    rows[depth / 2] = 0.5f * scale;         // a tie: rounds to even (0)
    rows[depth - 1] = 1.5f * scale;         // a tie: rounds to even (2)
    if (depth > 2) rows[depth + 2] = 1e6f;  // past the range: 127
    rows[3 * depth] = -1e30f;               // -127
    rows[4 * depth + depth - 1] = std::numeric_limits<float>::quiet_NaN();
    rows[5 * depth] = std::numeric_limits<float>::infinity();
    QuantizedRows expected, actual;
    quantize_rows_static_reference(rows, 6, depth, scale, expected);
    quantize_rows_static(rows, 6, depth, scale, actual);
    EXPECT_EQ(actual.values, expected.values) << "depth " << depth;
    ASSERT_EQ(actual.scales.size(), 6u);
    for (std::size_t row = 0; row < 6; ++row) {
      EXPECT_EQ(std::isnan(actual.scales[row]), row >= 4) << "row " << row;
      if (row < 4) {
        EXPECT_EQ(actual.scales[row], scale);
      }
    }
    EXPECT_EQ(expected.values[0 * expected.stride + depth / 2], depth / 2 == depth - 1 ? 130 : 128);
    EXPECT_EQ(expected.values[3 * expected.stride], 1);  // -127 + 128
  }
}

TEST(DenseKernels, ThreadsSplitTheOutputsWithoutChangingThem) {
  std::mt19937 random(3);
  Layer layer = random_layer(512, 512, random);
  std::vector<float> in = random_rows(64, 512, random);
  PackedDenseF32 f32 = pack_dense_f32(layer.weights, layer.bias, layer.outputs, layer.depth);
  std::vector<float> one(std::size_t{64} * 512), four(std::size_t{64} * 512);
  dense_f32(f32, in, 64, one, 1);
  dense_f32(f32, in, 64, four, 4);
  EXPECT_EQ(one, four);
  PackedDenseInt8 int8 = pack_dense_int8(layer.weights, layer.bias, layer.outputs, layer.depth);
  QuantizedRows quantized;
  quantize_rows(in, 64, 512, quantized);
  dense_int8(int8, quantized, one, 1);
  dense_int8(int8, quantized, four, 4);
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace slipway::kernels
