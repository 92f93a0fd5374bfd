// Binning: quantile cuts per numeric feature from a hashed row sample (sorted distinct values,
// cut at evenly spaced ranks), then every row's codes in fixed row blocks, then the same codes
// transposed feature-major. Categorical codes are checked as they are binned.
#include "train/gbdt_binning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "train/gbdt_sampling.h"

namespace slipway::train {

Result<BinnedFeatures> bin_features(const GbdtMatrix& train, std::size_t width, const GbdtOptions& options,
                                    int threads) {
  const std::size_t rows = train.rows;
  BinnedFeatures binned;
  binned.rows = rows;
  binned.width = width;
  binned.bins.resize(rows * width);
  binned.cuts.resize(width);
  binned.bin_count.assign(width, 1);
  binned.categorical = options.categorical;
  binned.categorical.resize(width, false);

  std::vector<std::uint32_t> sample;
  double keep = std::min(1.0, static_cast<double>(kRowsForCuts) / static_cast<double>(std::max<std::size_t>(rows, 1)));
  for (std::uint32_t row = 0; row < rows; ++row) {
    if (sampled(keep, 0x62696e73ULL, 0, row)) sample.push_back(row);
  }
  std::vector<std::string> errors(width);
  parallel_for(width, threads, [&](std::size_t feature) {
    if (binned.categorical[feature]) return;
    std::vector<float> values;
    values.reserve(sample.size());
    for (std::uint32_t row : sample) {
      float value = train.features[row * width + feature];
      if (!std::isnan(value)) values.push_back(value);
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    std::vector<float>& cuts = binned.cuts[feature];
    auto wanted_cuts = static_cast<std::size_t>(options.max_bin - 1);
    if (values.size() <= wanted_cuts + 1) {
      // Few distinct values: a cut between each neighbouring pair (at the upper value).
      for (std::size_t index = 1; index < values.size(); ++index) cuts.push_back(values[index]);
    } else {
      for (std::size_t cut = 1; cut <= wanted_cuts; ++cut) {
        float value = values[cut * values.size() / (wanted_cuts + 1)];
        if (cuts.empty() || value > cuts.back()) cuts.push_back(value);
      }
    }
    binned.bin_count[feature] = static_cast<std::uint32_t>(cuts.size() + 1);
  });
  std::vector<float> padded(width * 255, std::numeric_limits<float>::infinity());
  for (std::size_t feature = 0; feature < width; ++feature) {
    std::copy(binned.cuts[feature].begin(), binned.cuts[feature].end(), padded.begin() + feature * 255);
  }
  // Rows in blocks, every feature of a row at once: reads and writes stay sequential.
  constexpr std::size_t kRowsPerTask = 16384;
  std::vector<std::uint32_t> largest_code((rows + kRowsPerTask - 1) / kRowsPerTask * width, 0);
  parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, threads, [&](std::size_t task) {
    std::size_t end = std::min(rows, (task + 1) * kRowsPerTask);
    std::uint32_t* largest = largest_code.data() + task * width;
    for (std::size_t row = task * kRowsPerTask; row < end; ++row) {
      const float* x = train.features.data() + row * width;
      std::uint8_t* out = binned.bins.data() + row * width;
      for (std::size_t feature = 0; feature < width; ++feature) {
        float value = x[feature];
        if (std::isnan(value)) {
          out[feature] = kMissingBin;
        } else if (!binned.categorical[feature]) {
          out[feature] = bin_of(padded.data() + feature * 255, value);
        } else if (value >= 0.0f && value <= static_cast<float>(kMaxCategoryCode) && value == std::floor(value)) {
          out[feature] = static_cast<std::uint8_t>(value);
          largest[feature] = std::max<std::uint32_t>(largest[feature], out[feature]);
        } else {
          errors[feature] = "categorical feature " + std::to_string(feature) + " has the code " +
                            std::to_string(value) + "; codes must be whole numbers in [0, 254]";
          out[feature] = kMissingBin;
        }
      }
    }
  });
  for (const auto& error : errors) {
    if (!error.empty()) return invalid_argument(error);
  }
  binned.columns.resize(rows * width);
  parallel_for(width, threads, [&](std::size_t feature) {
    std::uint8_t* column = binned.columns.data() + feature * rows;
    for (std::size_t row = 0; row < rows; ++row) column[row] = binned.bins[row * width + feature];
  });
  for (std::size_t feature = 0; feature < width; ++feature) {
    if (!binned.categorical[feature]) continue;
    std::uint32_t largest = 0;
    for (std::size_t task = 0; task * width < largest_code.size(); ++task) {
      largest = std::max(largest, largest_code[task * width + feature]);
    }
    binned.bin_count[feature] = largest + 1;
  }
  return binned;
}

}  // namespace slipway::train
