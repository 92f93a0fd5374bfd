// Single-row prediction latency of the lending-club logistic regression, through the whole bundle
// (preprocessing from a one-row table, linear model, sigmoid). bench/run.sh compares it with
// scikit-learn's predict_proba on one row of the same model family.
#include <benchmark/benchmark.h>

#include "slipway/data.h"
#include "slipway/train.h"

namespace {

struct Fixture {
  std::shared_ptr<const slipway::model::Bundle> bundle;
  slipway::data::Table one_row;
  std::vector<float> preprocessed_row;
};

const Fixture& fixture() {
  static const Fixture kInstance = [] {
    auto table = *slipway::data::read_csv(std::string(SLIPWAY_DATA_DIR) + "/lending_club.csv");
    auto summary = slipway::train::fit(table, slipway::train::TrainRequest{.target = "Class"});
    Fixture built{summary->bundle, table.take_rows(std::vector<std::uint32_t>{0}), {}};
    (void)built.bundle->preprocessor().transform(built.one_row, built.preprocessed_row);
    return built;
  }();
  return kInstance;
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_PredictOneRow_FromTable(benchmark::State& state) {
  const Fixture& f = fixture();
  for (auto _ : state) {
    auto predictions = f.bundle->predict(f.one_row);
    benchmark::DoNotOptimize(predictions);
  }
}

// NOLINTNEXTLINE(readability-identifier-naming): the benchmark's name, which bench/*.sh and docs use
void BM_PredictOneRow_Preprocessed(benchmark::State& state) {
  const Fixture& f = fixture();
  for (auto _ : state) {
    auto predictions = f.bundle->predict_preprocessed(f.preprocessed_row, 1);
    benchmark::DoNotOptimize(predictions);
  }
}

}  // namespace

BENCHMARK(BM_PredictOneRow_FromTable);
BENCHMARK(BM_PredictOneRow_Preprocessed);
