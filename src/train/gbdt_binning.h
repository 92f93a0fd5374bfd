// Binning for GBDT training: every feature value becomes a one-byte bin code once, before the
// first tree. Private to train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "slipway/core.h"
#include "train/gbdt_trainer.h"

namespace slipway::train {

// Bins per feature in a histogram; the last one holds the missing values.
constexpr std::size_t kBinsPerFeature = 256;
constexpr std::uint8_t kMissingBin = 255;
// The largest category code a categorical feature may hold (its bin is its code).
constexpr std::uint32_t kMaxCategoryCode = 254;
// Cut points come from at most this many rows, drawn by a fixed hash: sorting every value of a
// million-row column costs more than the whole of some trainings, and quantiles of 200k rows
// are as good as bins can use (LightGBM's bin_construct_sample_cnt is the same 200k).
constexpr std::size_t kRowsForCuts = 200'000;

// Row-major bin codes (one byte per row and feature, so a row's bins share a cache line) plus,
// per numeric feature, the cut values: bin(x) = number of cuts <= x, so bin(x) <= b exactly when
// x < cuts[b]. A categorical feature's bin is its code. Missing values are in kMissingBin.
struct BinnedFeatures {
  std::size_t rows = 0;
  std::size_t width = 0;
  std::vector<std::uint8_t> bins;
  // The same codes feature-major: partitioning a node reads one feature of its rows, and a
  // column holds 64 rows per cache line where the rows hold one.
  std::vector<std::uint8_t> columns;
  std::vector<std::vector<float>> cuts;
  std::vector<std::uint32_t> bin_count;  // per feature, missing bin apart
  std::vector<bool> categorical;

  const std::uint8_t* column(std::size_t feature) const { return columns.data() + feature * rows; }
};

// Number of cuts <= value, over cuts padded with +inf to 255 entries: eight steps, no branches.
inline std::uint8_t bin_of(const float* padded_cuts, float value) {
  std::uint32_t position = 0;
  for (std::uint32_t step = 128; step > 0; step >>= 1) {
    position += padded_cuts[position + step - 1] <= value ? step : 0;
  }
  return static_cast<std::uint8_t>(position);
}

// Bins `train` (rows x width, row-major): numeric features get at most options.max_bin - 1
// quantile cuts from a hashed sample of at most kRowsForCuts rows (with few distinct values, a
// cut at each but the smallest); features marked in options.categorical keep their codes, and
// their bin_count is the largest code + 1. The same bins at any thread count. InvalidArgument
// when a categorical value is not a whole number in [0, kMaxCategoryCode].
Result<BinnedFeatures> bin_features(const GbdtMatrix& train, std::size_t width, const GbdtOptions& options,
                                    int threads);

}  // namespace slipway::train
