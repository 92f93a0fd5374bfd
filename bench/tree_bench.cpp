// Tree-ensemble prediction on an XGBoost model imported into a bundle: batch throughput on
// 100,000 rows and single-row latency. The model and rows come from bench/tree_peer.py (run by
// bench/run.sh, which passes SLIPWAY_TREE_BENCH_DIR); without it these benchmarks are skipped.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "slipway/model.h"

namespace {

struct TreeFixture {
  std::shared_ptr<const slipway::model::Bundle> bundle;
  // The same model through the quantized layout (TreeEnsembleModel::with_quantized_layout).
  std::shared_ptr<const slipway::model::Bundle> quantized;
  std::vector<float> rows;  // row-major, 28 features
  std::size_t row_count = 0;
  std::string error;
};

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

const TreeFixture& fixture() {
  static const TreeFixture kInstance = [] {
    TreeFixture built;
    const char* dir = std::getenv("SLIPWAY_TREE_BENCH_DIR");
    if (dir == nullptr) {
      built.error = "set SLIPWAY_TREE_BENCH_DIR (bench/run.sh does)";
      return built;
    }
    auto json = slipway::read_file(std::string(dir) + "/model.json");
    auto bundle = json.ok() ? slipway::model::import_xgboost_json(*json, {}) : json.status();
    if (!bundle.ok()) {
      built.error = bundle.status().message();
      return built;
    }
    built.bundle = *bundle;
    built.rows = read_floats(std::string(dir) + "/rows.f32");
    std::size_t width = built.bundle->preprocessor().output_width();
    built.row_count = built.rows.size() / width;
    // The benchmark checks its result: every probability equals XGBoost's.
    auto expected = read_floats(std::string(dir) + "/expected.f32");
    auto ours = built.bundle->predict_preprocessed(built.rows, built.row_count);
    for (std::size_t row = 0; row < built.row_count; ++row) {
      if (std::abs(ours.scores[row] - expected[row]) > 1e-5f) {
        built.error = "prediction differs from XGBoost at row " + std::to_string(row);
        break;
      }
    }
    const auto& trees = dynamic_cast<const slipway::model::TreeEnsembleModel&>(built.bundle->model());
    auto quantized_model = trees.with_quantized_layout();
    if (!quantized_model.ok()) {
      built.error = quantized_model.status().message();
      return built;
    }
    built.quantized = std::make_shared<const slipway::model::Bundle>(built.bundle->manifest(),
                                                                     built.bundle->preprocessor(), *quantized_model);
    // And the quantized layout gives the same floats, bit for bit.
    auto quantized_scores = built.quantized->predict_preprocessed(built.rows, built.row_count);
    if (quantized_scores.scores != ours.scores) built.error = "the quantized layout changed a prediction";
    return built;
  }();
  return kInstance;
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_TreeBatch100k(benchmark::State& state) {
  const TreeFixture& f = fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  auto threads = static_cast<int>(state.range(0));
  const auto& bundle = state.range(1) != 0 ? f.quantized : f.bundle;
  std::size_t width = bundle->preprocessor().output_width();
  constexpr std::size_t kRowsPerTask = 4096;
  std::size_t tasks = (f.row_count + kRowsPerTask - 1) / kRowsPerTask;
  std::vector<float> scores(f.row_count);
  for (auto _ : state) {
    slipway::parallel_for(tasks, threads, [&](std::size_t task) {
      std::size_t begin = task * kRowsPerTask;
      std::size_t rows = std::min(kRowsPerTask, f.row_count - begin);
      auto predictions =
          bundle->predict_preprocessed(std::span<const float>(f.rows).subspan(begin * width, rows * width), rows);
      std::copy(predictions.scores.begin(), predictions.scores.end(),
                scores.begin() + static_cast<std::ptrdiff_t>(begin));
    });
    benchmark::DoNotOptimize(scores.data());
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * f.row_count), benchmark::Counter::kIsRate);
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_TreeSingleRow(benchmark::State& state) {
  const TreeFixture& f = fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const auto& bundle = state.range(0) != 0 ? f.quantized : f.bundle;
  std::size_t width = bundle->preprocessor().output_width();
  std::span<const float> row(f.rows.data(), width);
  for (auto _ : state) {
    auto predictions = bundle->predict_preprocessed(row, 1);
    benchmark::DoNotOptimize(predictions);
  }
}

// Per-call latency of single-row scoring: median and p99 over 20,000 calls, as counters.
// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_TreeSingleRowPercentiles(benchmark::State& state) {
  const TreeFixture& f = fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const auto& bundle = state.range(0) != 0 ? f.quantized : f.bundle;
  std::size_t width = bundle->preprocessor().output_width();
  constexpr std::size_t kCalls = 20000;
  std::vector<double> micros(kCalls);
  for (auto _ : state) {
    for (std::size_t call = 0; call < kCalls; ++call) {
      std::span<const float> row(f.rows.data() + (call % f.row_count) * width, width);
      auto start = std::chrono::steady_clock::now();
      auto predictions = bundle->predict_preprocessed(row, 1);
      benchmark::DoNotOptimize(predictions);
      micros[call] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    }
  }
  std::sort(micros.begin(), micros.end());
  state.counters["p50_us"] = micros[kCalls / 2];
  state.counters["p99_us"] = micros[kCalls * 99 / 100];
}

}  // namespace

// The second argument (the only one of the single-row benchmarks): 1 for the quantized layout.
BENCHMARK(BM_TreeSingleRowPercentiles)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TreeBatch100k)
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_TreeSingleRow)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
