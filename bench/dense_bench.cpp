// Dense layers: the MLP of issue 13 (28 -> 256 -> 256 -> 1, ReLU between) run forward in fp32,
// bf16 and int8 with the chosen kernel variant, and its first layer with the plain reference, at batch 1
// (latency: an online request) and batch 256 (throughput), on 1 and 2 threads. Items are rows.
// The peers (ONNX Runtime, PyTorch) are not measured yet: this is the kernels against themselves.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "slipway/kernels.h"

namespace {

using slipway::kernels::QuantizedRows;

struct Mlp {
  std::vector<slipway::kernels::PackedDenseF32> f32;
  std::vector<slipway::kernels::PackedDenseInt8> int8;
  std::vector<slipway::kernels::PackedDenseBf16> bf16;
  std::vector<std::size_t> widths = {28, 256, 256, 1};
};

const Mlp& mlp() {
  static const Mlp kInstance = [] {
    Mlp built;
    std::mt19937 random(1);
    for (std::size_t layer = 0; layer + 1 < built.widths.size(); ++layer) {
      std::size_t depth = built.widths[layer], outputs = built.widths[layer + 1];
      std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(depth)));
      std::vector<float> weights(outputs * depth), bias(outputs);
      for (float& weight : weights) weight = normal(random);
      for (float& value : bias) value = normal(random);
      bool relu = layer + 2 < built.widths.size();  // between layers, fused into the store
      built.f32.push_back(slipway::kernels::pack_dense_f32(weights, bias, outputs, depth, relu));
      built.int8.push_back(slipway::kernels::pack_dense_int8(weights, bias, outputs, depth, relu));
      built.bf16.push_back(slipway::kernels::pack_dense_bf16(weights, bias, outputs, depth, relu));
    }
    return built;
  }();
  return kInstance;
}

std::vector<float> rows_of(std::size_t rows) {
  std::mt19937 random(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(rows * 28);
  for (float& value : values) value = normal(random);
  return values;
}

// Times the forward pass: `layer(index, in, rows, out, threads)` for each of the three layers, each
// reading the previous one's outputs, on the rows and threads the benchmark's arguments give.
template <typename Layer>
void time_mlp(benchmark::State& state, Layer layer) {
  std::size_t rows = static_cast<std::size_t>(state.range(0));
  int threads = static_cast<int>(state.range(1));
  std::vector<float> input = rows_of(rows), hidden1(rows * 256), hidden2(rows * 256), output(rows);
  std::span<float> outputs[] = {hidden1, hidden2, output};
  for (auto _ : state) {
    std::span<const float> in = input;
    for (std::size_t index = 0; index < 3; ++index) {
      layer(index, in, rows, outputs[index], threads);
      in = outputs[index];
    }
    benchmark::DoNotOptimize(output.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * rows));
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_MlpF32(benchmark::State& state) {
  time_mlp(state, [&](std::size_t index, std::span<const float> in, std::size_t rows, std::span<float> out,
                      int threads) { slipway::kernels::dense_f32(mlp().f32[index], in, rows, out, threads); });
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_MlpInt8(benchmark::State& state) {
  QuantizedRows quantized;
  time_mlp(state,
           [&](std::size_t index, std::span<const float> in, std::size_t rows, std::span<float> out, int threads) {
             slipway::kernels::quantize_rows(in, rows, mlp().widths[index], quantized);
             slipway::kernels::dense_int8(mlp().int8[index], quantized, out, threads);
           });
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_MlpBf16(benchmark::State& state) {
  slipway::kernels::Bf16Rows rounded;
  time_mlp(state,
           [&](std::size_t index, std::span<const float> in, std::size_t rows, std::span<float> out, int threads) {
             slipway::kernels::round_rows_to_bf16(in, rows, mlp().widths[index], rounded);
             slipway::kernels::dense_bf16(mlp().bf16[index], rounded, out, threads);
           });
}

// The 256 x 256 layer alone, per variant and precision (0 fp32, 1 bf16, 2 int8; rounding and
// quantizing the rows included): what each instruction set buys over the reference.
// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_Dense256Variant(benchmark::State& state) {
  const auto variants = slipway::kernels::dense_kernel_variants();
  const auto& variant = variants[static_cast<std::size_t>(state.range(0))];
  std::size_t rows = static_cast<std::size_t>(state.range(1));
  int precision = static_cast<int>(state.range(2));
  if (!variant.supported()) {
    state.SkipWithError("this CPU lacks the variant");
    return;
  }
  state.SetLabel(std::string(variant.name) + (precision == 0 ? " fp32" : precision == 1 ? " bf16" : " int8"));
  const Mlp& net = mlp();
  std::vector<float> input = rows_of(rows * 256 / 28 + 1), output(rows * 256);
  input.resize(rows * 256);
  QuantizedRows quantized;
  slipway::kernels::Bf16Rows rounded;
  for (auto _ : state) {
    if (precision == 0) {
      variant.f32(net.f32[1], input.data(), rows, output.data(), 0, net.f32[1].blocks());
    } else if (precision == 1) {
      slipway::kernels::round_rows_to_bf16(input, rows, 256, rounded);
      variant.bf16(net.bf16[1], rounded, output.data(), 0, net.bf16[1].blocks());
    } else {
      slipway::kernels::quantize_rows(input, rows, 256, quantized);
      variant.int8(net.int8[1], quantized, output.data(), 0, net.int8[1].blocks());
    }
    benchmark::DoNotOptimize(output.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * rows));
}

}  // namespace

BENCHMARK(BM_MlpF32)->ArgsProduct({{1, 256}, {1, 2}})->UseRealTime();
BENCHMARK(BM_MlpInt8)->ArgsProduct({{1, 256}, {1, 2}})->UseRealTime();
BENCHMARK(BM_MlpBf16)->ArgsProduct({{1, 256}, {1, 2}})->UseRealTime();
BENCHMARK(BM_Dense256Variant)->ArgsProduct({{0, 1, 2, 3, 4}, {1, 256}, {0, 1, 2}});
