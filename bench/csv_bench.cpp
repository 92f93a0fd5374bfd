// CSV parse throughput, next to the limit any parser faces: one pass over the same bytes that only
// counts newlines (memchr). bench/run.sh prints the ratio.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>

#include "slipway/data.h"

namespace {

const std::string& lending_text() {
  static const std::string kText = *slipway::read_file(std::string(SLIPWAY_DATA_DIR) + "/lending_club.csv");
  return kText;
}

// 200,000 rows x 28 columns: 26 numbers, a category, a 0/1 label. Deterministic.
const std::string& synthetic_text() {
  static const std::string kText = [] {
    std::mt19937_64 rng(1);
    std::normal_distribution<double> normal;
    std::string out;
    for (int column = 0; column < 26; ++column) out += "f" + std::to_string(column) + ",";
    out += "segment,label\n";
    char buffer[32];
    for (int row = 0; row < 200000; ++row) {
      for (int column = 0; column < 26; ++column) {
        std::snprintf(buffer, sizeof buffer, "%.6g,", normal(rng));
        out += buffer;
      }
      out += "\"seg_" + std::to_string(rng() % 40) + "\"," + std::to_string(rng() % 2) + "\n";
    }
    return out;
  }();
  return kText;
}

void parse(benchmark::State& state, const std::string& text, int threads) {
  slipway::data::CsvOptions options;
  options.thread_count = threads;
  for (auto _ : state) {
    auto table = slipway::data::parse_csv(text, "bench.csv", options);
    if (!table.ok()) state.SkipWithError(table.status().message().c_str());
    benchmark::DoNotOptimize(table);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

void scan_newlines(benchmark::State& state, const std::string& text) {
  for (auto _ : state) {
    std::size_t lines = 0;
    const char* cursor = text.data();
    const char* end = text.data() + text.size();
    while (const void* found = std::memchr(cursor, '\n', static_cast<std::size_t>(end - cursor))) {
      ++lines;
      cursor = static_cast<const char*>(found) + 1;
    }
    benchmark::DoNotOptimize(lines);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}

// The benchmarks keep their registered names (BM_...): bench/run.sh and docs/benchmarks.md use them.
// NOLINTBEGIN(readability-identifier-naming)
void BM_CsvParse_Lending_1Thread(benchmark::State& state) { parse(state, lending_text(), 1); }
void BM_CsvParse_Synthetic_1Thread(benchmark::State& state) { parse(state, synthetic_text(), 1); }
void BM_CsvParse_Synthetic_2Threads(benchmark::State& state) { parse(state, synthetic_text(), 2); }
void BM_NewlineScan_Lending(benchmark::State& state) { scan_newlines(state, lending_text()); }
void BM_NewlineScan_Synthetic(benchmark::State& state) { scan_newlines(state, synthetic_text()); }
// NOLINTEND(readability-identifier-naming)

}  // namespace

BENCHMARK(BM_CsvParse_Lending_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CsvParse_Synthetic_1Thread)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CsvParse_Synthetic_2Threads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NewlineScan_Lending)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NewlineScan_Synthetic)->Unit(benchmark::kMillisecond);
