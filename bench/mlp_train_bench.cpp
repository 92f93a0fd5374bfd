// MLP training: one epoch of `slipway train --model mlp` (train::fit) over 25,600 synthetic rows
// of 28 standardized numbers, 28 -> 256 -> 256 -> 1 with ReLU, binary cross-entropy, AdamW, batch
// 256 (100 steps), in float32 and bfloat16 products, on 1 and 2 threads. The counter step_seconds is
// the time per optimizer step; bench/mlp_train_peer.sh sets it against PyTorch's.
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "slipway/train.h"

namespace {

constexpr std::size_t kRows = 25600;
constexpr std::size_t kInputs = 28;
constexpr std::size_t kStepsPerEpoch = kRows / 256;  // batches of 256: 100, exactly

const slipway::data::Table& table() {
  static const slipway::data::Table kInstance = [] {
    std::mt19937 random(3);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::string csv;
    for (std::size_t column = 0; column < kInputs; ++column) csv += "x" + std::to_string(column) + ",";
    csv += "y\n";
    for (std::size_t row = 0; row < kRows; ++row) {
      double margin = 0.0;
      for (std::size_t column = 0; column < kInputs; ++column) {
        double value = normal(random);
        margin += (column % 3 == 0 ? value * value - 1.0 : 0.3 * value);
        csv += std::to_string(value) + ",";
      }
      csv += margin + normal(random) > 0.0 ? "1\n" : "0\n";
    }
    return *slipway::data::parse_csv(csv, "synthetic.csv");
  }();
  return kInstance;
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_MlpTrainEpoch(benchmark::State& state) {
  bool bf16 = state.range(0) == 1;
  slipway::train::TrainRequest request{.target = "y",
                                       .model_family = "mlp",
                                       .params = {{"hidden_units", "256,256"},
                                                  {"epochs", "1"},
                                                  {"batch_size", "256"},
                                                  {"precision", bf16 ? "bfloat16" : "float32"}},
                                       .thread_count = static_cast<int>(state.range(1))};
  const slipway::data::Table& rows = table();
  for (auto _ : state) {
    auto fitted = slipway::train::fit(rows, request);
    if (!fitted.ok()) state.SkipWithError(fitted.status().message().c_str());
    benchmark::DoNotOptimize(fitted);
  }
  // Seconds per optimizer step (100 per epoch).
  state.counters["step_seconds"] = benchmark::Counter(static_cast<double>(state.iterations() * kStepsPerEpoch),
                                                      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRows));
}
BENCHMARK(BM_MlpTrainEpoch)->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
