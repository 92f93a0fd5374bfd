// Histogram GBDT: features are binned once (quantile cuts for numbers, one bin per category
// code); each tree grows depth-wise or leaf-wise from per-node gradient histograms, building the
// smaller child's and getting its sibling by subtraction; a split tries sending missing values
// left and right and keeps the better direction; categories are split by sorting them on their
// gradient statistics and cutting the sorted order (the optimal binary partition for these
// losses, as in LightGBM and XGBoost).
#include "train/gbdt_trainer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

namespace slipway::train {
namespace {

constexpr std::uint8_t kMissingBin = 255;
constexpr std::size_t kBinsPerFeature = 256;
constexpr std::uint32_t kMaxCategoryCode = 254;

struct BinStats {
  double gradient = 0;
  double hessian = 0;
};

// A stateless hash of (seed, round, index): sampling is the same at any thread count and after
// a resume.
std::uint64_t sample_hash(std::uint64_t seed, std::uint64_t round, std::uint64_t index) {
  std::uint64_t z = seed ^ (round * 0x9e3779b97f4a7c15ULL) ^ (index * 0xbf58476d1ce4e5b9ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool sampled(double share, std::uint64_t seed, std::uint64_t round, std::uint64_t index) {
  if (share >= 1.0) return true;
  return static_cast<double>(sample_hash(seed, round, index) >> 11) * 0x1.0p-53 < share;
}

// Row-major bin codes (one byte per row and feature, so a row's bins share a cache line) plus,
// per numeric feature, the cut values: bin(x) = number of cuts <= x, so bin(x) <= b exactly when
// x < cuts[b]. A categorical feature's bin is its code.
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

// Cut points come from at most this many rows, drawn by a fixed hash: sorting every value of a
// million-row column costs more than the whole of some trainings, and quantiles of 200k rows
// are as good as bins can use (LightGBM's bin_construct_sample_cnt is the same 200k).
constexpr std::size_t kRowsForCuts = 200'000;

// Number of cuts <= value, over cuts padded with +inf to 255 entries: eight steps, no branches.
std::uint8_t bin_of(const float* padded_cuts, float value) {
  std::uint32_t position = 0;
  for (std::uint32_t step = 128; step > 0; step >>= 1) {
    position += padded_cuts[position + step - 1] <= value ? step : 0;
  }
  return static_cast<std::uint8_t>(position);
}

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

// Gradient histograms of one node: width x 256 bins (the last is the missing bin).
using Histogram = std::vector<BinStats>;

// Rows per histogram block. A node with more rows is built block by block on the threads, each
// block into its own table, and the tables are summed in block order: the same sums whatever the
// thread count. Smaller nodes are built on one thread (waking a worker costs microseconds).
constexpr std::size_t kRowsPerHistogramBlock = 16384;

void accumulate_rows(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
                     std::span<const std::uint32_t> rows, const std::vector<BinStats>& row_stats, BinStats* histogram) {
  const std::size_t width = binned.width;
  const bool all_features = features.size() == width;
  // Below the root a node's rows are scattered, and each row's bins and gradients are a cache
  // miss: ask for them a few rows ahead (XGBoost's histogram builder does the same).
  constexpr std::size_t kPrefetchDistance = 16;
  const std::size_t count = rows.size();
  for (std::size_t index = 0; index < count; ++index) {
    if (index + kPrefetchDistance < count) {
      std::uint32_t ahead = rows[index + kPrefetchDistance];
      __builtin_prefetch(binned.bins.data() + static_cast<std::size_t>(ahead) * width);
      __builtin_prefetch(row_stats.data() + ahead);
    }
    const std::uint32_t row = rows[index];
    const std::uint8_t* bins = binned.bins.data() + static_cast<std::size_t>(row) * width;
    const BinStats stats = row_stats[row];
    if (all_features) {
      for (std::size_t feature = 0; feature < width; ++feature) {
        BinStats& bin = histogram[feature * kBinsPerFeature + bins[feature]];
        bin.gradient += stats.gradient;
        bin.hessian += stats.hessian;
      }
    } else {
      for (std::uint32_t feature : features) {
        BinStats& bin = histogram[feature * kBinsPerFeature + bins[feature]];
        bin.gradient += stats.gradient;
        bin.hessian += stats.hessian;
      }
    }
  }
}

// Only the bins a feature can use are read later, so only those are cleared.
void clear_used_bins(const BinnedFeatures& binned, std::span<const std::uint32_t> features, BinStats* histogram) {
  for (std::uint32_t feature : features) {
    BinStats* bins = histogram + feature * kBinsPerFeature;
    std::fill(bins, bins + binned.bin_count[feature], BinStats{});
    bins[kMissingBin] = BinStats{};
  }
}

// Builds node histograms; with threads > 1 it keeps per-block tables between calls, and with one
// thread it keeps no state, so single-thread builds may run concurrently on one builder.
class HistogramBuilder {
 public:
  void build(const BinnedFeatures& binned, std::span<const std::uint32_t> features,
             std::span<const std::uint32_t> node_rows, const std::vector<BinStats>& row_stats, Histogram& histogram,
             int threads) {
    const std::size_t table = binned.width * kBinsPerFeature;
    histogram.resize(table);
    clear_used_bins(binned, features, histogram.data());
    std::size_t blocks = (node_rows.size() + kRowsPerHistogramBlock - 1) / kRowsPerHistogramBlock;
    if (blocks <= 1 || threads <= 1) {
      accumulate_rows(binned, features, node_rows, row_stats, histogram.data());
      return;
    }
    partial_.resize(blocks * table);
    parallel_for(blocks, threads, [&](std::size_t block) {
      clear_used_bins(binned, features, partial_.data() + block * table);
      std::size_t begin = block * kRowsPerHistogramBlock;
      std::size_t count = std::min(kRowsPerHistogramBlock, node_rows.size() - begin);
      accumulate_rows(binned, features, node_rows.subspan(begin, count), row_stats, partial_.data() + block * table);
    });
    parallel_for(features.size(), threads, [&](std::size_t index) {
      std::size_t offset = features[index] * kBinsPerFeature;
      for (std::size_t block = 0; block < blocks; ++block) {
        const BinStats* source = partial_.data() + block * table + offset;
        BinStats* target = histogram.data() + offset;
        for (std::size_t bin = 0; bin < kBinsPerFeature; ++bin) {
          if (bin == binned.bin_count[features[index]]) bin = kMissingBin;
          target[bin].gradient += source[bin].gradient;
          target[bin].hessian += source[bin].hessian;
        }
      }
    });
  }

 private:
  std::vector<BinStats> partial_;
};

using CategorySet = std::array<std::uint64_t, kBinsPerFeature / 64>;

struct Split {
  double gain = 0;
  std::uint32_t feature = 0;
  std::uint32_t bin = 0;  // numeric: left takes bins <= bin
  bool default_left = false;
  bool categorical = false;
  CategorySet right_categories{};  // categorical: the codes that go right
  bool valid = false;

  bool goes_left(std::uint8_t bin_of_row) const {
    if (bin_of_row == kMissingBin) return default_left;
    if (categorical) return ((right_categories[bin_of_row / 64] >> (bin_of_row % 64)) & 1U) == 0;
    return bin_of_row <= bin;
  }
};

class SplitScorer {
 public:
  explicit SplitScorer(const GbdtOptions& options) : options_(options) {}

  // L1 soft-thresholding of the gradient sum, as in XGBoost's ThresholdL1.
  double thresholded(double gradient) const {
    if (gradient > options_.alpha) return gradient - options_.alpha;
    if (gradient < -options_.alpha) return gradient + options_.alpha;
    return 0.0;
  }
  double score(BinStats stats, double extra_l2 = 0.0) const {
    double t = thresholded(stats.gradient);
    return t * t / (stats.hessian + options_.lambda + extra_l2);
  }
  double weight(BinStats stats) const { return -thresholded(stats.gradient) / (stats.hessian + options_.lambda); }
  // Loss reduction of splitting `total` into `left` and the rest; -inf when a child is too light.
  double gain(BinStats left, BinStats total, double parent_score, double extra_l2 = 0.0) const {
    BinStats right{total.gradient - left.gradient, total.hessian - left.hessian};
    if (left.hessian < options_.min_child_weight || right.hessian < options_.min_child_weight) {
      return -std::numeric_limits<double>::infinity();
    }
    return 0.5 * (score(left, extra_l2) + score(right, extra_l2) - parent_score) - options_.gamma;
  }

 private:
  const GbdtOptions& options_;
};

void consider(Split& best, double gain, std::uint32_t feature, std::uint32_t bin, bool missing_left) {
  if (gain > best.gain + 1e-12) {
    best.gain = gain;
    best.feature = feature;
    best.bin = bin;
    best.default_left = missing_left;
    best.categorical = false;
    best.valid = true;
  }
}

Split best_numeric_split(const BinStats* bins, std::uint32_t feature, std::uint32_t bin_count, BinStats total,
                         double parent_score, const SplitScorer& scorer) {
  Split best;
  BinStats missing = bins[kMissingBin];
  bool has_missing = missing.hessian != 0.0 || missing.gradient != 0.0;
  BinStats left{};
  for (std::uint32_t bin = 0; bin + 1 < bin_count; ++bin) {
    // An empty bin moves no row: the cut after it scores as the one before (deep nodes leave
    // most bins empty, and skipping them is most of the search's time).
    if (bins[bin].hessian == 0.0 && bins[bin].gradient == 0.0) continue;
    left.gradient += bins[bin].gradient;
    left.hessian += bins[bin].hessian;
    consider(best, scorer.gain(left, total, parent_score), feature, bin, false);
    if (!has_missing) continue;
    BinStats with_missing{left.gradient + missing.gradient, left.hessian + missing.hessian};
    consider(best, scorer.gain(with_missing, total, parent_score), feature, bin, true);
  }
  return best;
}

Split best_categorical_split(const BinStats* bins, std::uint32_t feature, std::uint32_t bin_count, BinStats total,
                             const SplitScorer& scorer, const GbdtOptions& options) {
  // Categories present in the node, ordered by their smoothed leaf weight; the best binary
  // partition is a cut of this order. Searching 2^k subsets fits noise on many-level columns, so
  // as in LightGBM the order is smoothed (cat_smooth), the split is scored with extra L2
  // (cat_l2), and categories lighter than min_child_weight stay with the unseen ones (left).
  std::vector<std::uint32_t> order;
  for (std::uint32_t code = 0; code < bin_count; ++code) {
    if (bins[code].hessian > 0 && bins[code].hessian >= options.min_child_weight) order.push_back(code);
  }
  double smoothing = options.cat_smooth;
  auto ratio = [&](std::uint32_t code) { return bins[code].gradient / (bins[code].hessian + smoothing); };
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    double ra = ratio(a);
    double rb = ratio(b);
    return ra != rb ? ra < rb : a < b;
  });
  Split best;
  std::size_t best_cut = 0;
  // The categories outside `order` always go left with the first ones.
  BinStats rest = total;
  for (std::uint32_t code : order) {
    rest.gradient -= bins[code].gradient;
    rest.hessian -= bins[code].hessian;
  }
  BinStats missing = bins[kMissingBin];
  rest.gradient -= missing.gradient;
  rest.hessian -= missing.hessian;
  double parent_score = scorer.score(total, options.cat_l2);
  BinStats left = rest;
  for (std::size_t cut = 1; cut < order.size(); ++cut) {
    left.gradient += bins[order[cut - 1]].gradient;
    left.hessian += bins[order[cut - 1]].hessian;
    for (bool missing_left : {false, true}) {
      BinStats l = left;
      if (missing_left) {
        l.gradient += missing.gradient;
        l.hessian += missing.hessian;
      }
      double gain = scorer.gain(l, total, parent_score, options.cat_l2);
      if (gain > best.gain + 1e-12) {
        best.gain = gain;
        best.feature = feature;
        best.default_left = missing_left;
        best.categorical = true;
        best.valid = true;
        best_cut = cut;
      }
    }
  }
  if (best.valid) {
    for (std::size_t index = best_cut; index < order.size(); ++index) {
      best.right_categories[order[index] / 64] |= std::uint64_t{1} << (order[index] % 64);
    }
  }
  return best;
}

struct GrowingNode {
  std::uint32_t node_index = 0;  // in the ensemble's node array
  std::size_t begin = 0;         // its rows: row_order[begin, end)
  std::size_t end = 0;
  int depth = 0;
  Histogram histogram;
  BinStats total;
  Split split;
};

// Losses: gradient and hessian per row from the margin, the metric, and the data's base score.
class Loss {
 public:
  Loss(const GbdtOptions& options) : options_(options) {}

  std::size_t groups() const { return options_.objective == GbdtObjective::kSoftmax ? options_.class_count : 1; }

  float base_margin(std::span<const double> labels, std::span<const double> weights) const {
    auto weight = [&](std::size_t row) { return weights.empty() ? 1.0 : weights[row]; };
    switch (options_.objective) {
      case GbdtObjective::kLogistic: {
        double mean = weighted_mean(labels, weights);
        double clamped = std::clamp(mean, 1e-6, 1.0 - 1e-6);
        return static_cast<float>(std::log(clamped / (1.0 - clamped)));
      }
      case GbdtObjective::kSoftmax:
        return 0.0f;
      case GbdtObjective::kSquaredError:
        return static_cast<float>(weighted_mean(labels, weights));
      case GbdtObjective::kAbsoluteError:
      case GbdtObjective::kPseudoHuber: {
        std::vector<std::pair<double, double>> values;
        for (std::size_t row = 0; row < labels.size(); ++row) values.push_back({labels[row], weight(row)});
        return static_cast<float>(weighted_median(values));
      }
    }
    return 0.0f;
  }

  // Fills stats[row] for output `group` from the margins (rows x groups); `probabilities` is
  // scratch for softmax, filled when group == 0 and reused for the round's other groups.
  void gradients(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                 std::size_t group, std::vector<double>& probabilities, std::vector<BinStats>& stats,
                 int threads) const {
    const std::size_t rows = labels.size();
    const std::size_t group_count = groups();
    if (options_.objective == GbdtObjective::kSoftmax && group == 0) probabilities.resize(rows * group_count);
    constexpr std::size_t kRowsPerTask = 16384;
    parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, threads, [&](std::size_t task) {
      std::size_t end = std::min(rows, (task + 1) * kRowsPerTask);
      for (std::size_t row = task * kRowsPerTask; row < end; ++row) {
        double y = labels[row];
        double m = margins[row * group_count + group];
        BinStats s;
        switch (options_.objective) {
          case GbdtObjective::kLogistic: {
            double p = 1.0 / (1.0 + std::exp(-m));
            s = {p - y, std::max(p * (1.0 - p), 1e-16)};
            break;
          }
          case GbdtObjective::kSoftmax: {
            double* p = probabilities.data() + row * group_count;
            if (group == 0) {
              double largest = margins[row * group_count];
              for (std::size_t k = 1; k < group_count; ++k) largest = std::max<double>(largest, margins[row * group_count + k]);
              double total = 0;
              for (std::size_t k = 0; k < group_count; ++k) {
                p[k] = std::exp(margins[row * group_count + k] - largest);
                total += p[k];
              }
              for (std::size_t k = 0; k < group_count; ++k) p[k] /= total;
            }
            double target = static_cast<std::size_t>(y) == group ? 1.0 : 0.0;
            s = {p[group] - target, std::max(2.0 * p[group] * (1.0 - p[group]), 1e-16)};
            break;
          }
          case GbdtObjective::kSquaredError:
            s = {m - y, 1.0};
            break;
          case GbdtObjective::kAbsoluteError:
            s = {m > y ? 1.0 : (m < y ? -1.0 : 0.0), 1.0};
            break;
          case GbdtObjective::kPseudoHuber: {
            double z = (m - y) / options_.huber_slope;
            double scale = 1.0 + z * z;
            double root = std::sqrt(scale);
            s = {(m - y) / root, 1.0 / (scale * root)};
            break;
          }
        }
        double w = weights.empty() ? 1.0 : weights[row];
        stats[row] = {s.gradient * w, s.hessian * w};
      }
    });
  }

  // The metric over margins (rows x groups). Lower is better.
  double metric(std::span<const float> margins, std::span<const double> labels, std::span<const double> weights,
                int threads) const {
    // Partial sums per fixed block of rows, added in block order: the same at any thread count.
    constexpr std::size_t kRowsPerTask = 32768;
    std::size_t tasks = (labels.size() + kRowsPerTask - 1) / kRowsPerTask;
    std::vector<std::pair<double, double>> partial(tasks);
    parallel_for(tasks, threads, [&](std::size_t task) {
      std::size_t end = std::min(labels.size(), (task + 1) * kRowsPerTask);
      partial[task] = metric_sum(margins, labels, weights, task * kRowsPerTask, end);
    });
    double total = 0.0;
    double weight_sum = 0.0;
    for (const auto& [sum, weight] : partial) {
      total += sum;
      weight_sum += weight;
    }
    double mean = weight_sum > 0 ? total / weight_sum : 0.0;
    return options_.metric == GbdtMetric::kRmse ? std::sqrt(mean) : mean;
  }

  // Weighted loss sum and weight sum over rows [begin, end).
  std::pair<double, double> metric_sum(std::span<const float> margins, std::span<const double> labels,
                                       std::span<const double> weights, std::size_t begin, std::size_t end) const {
    const std::size_t group_count = groups();
    double total = 0.0;
    double weight_sum = 0.0;
    for (std::size_t row = begin; row < end; ++row) {
      double w = weights.empty() ? 1.0 : weights[row];
      double y = labels[row];
      const float* m = margins.data() + row * group_count;
      double loss = 0.0;
      switch (options_.metric) {
        case GbdtMetric::kLogLoss: {
          double p = std::clamp(1.0 / (1.0 + std::exp(-static_cast<double>(m[0]))), 1e-15, 1.0 - 1e-15);
          loss = y > 0.5 ? -std::log(p) : -std::log(1.0 - p);
          break;
        }
        case GbdtMetric::kError:
          loss = (m[0] > 0.0f) != (y > 0.5) ? 1.0 : 0.0;
          break;
        case GbdtMetric::kMultiLogLoss:
        case GbdtMetric::kMultiError: {
          auto actual = static_cast<std::size_t>(y);
          std::size_t predicted = 0;
          double largest = m[0];
          for (std::size_t k = 1; k < group_count; ++k) {
            if (m[k] > largest) {
              largest = m[k];
              predicted = k;
            }
          }
          if (options_.metric == GbdtMetric::kMultiError) {
            loss = predicted == actual ? 0.0 : 1.0;
          } else {
            double sum = 0.0;
            for (std::size_t k = 0; k < group_count; ++k) sum += std::exp(m[k] - largest);
            loss = -std::max(m[actual] - largest - std::log(sum), std::log(1e-15));
          }
          break;
        }
        case GbdtMetric::kRmse:
          loss = (m[0] - y) * (m[0] - y);
          break;
        case GbdtMetric::kMae:
          loss = std::abs(m[0] - y);
          break;
        case GbdtMetric::kPseudoHuber: {
          double z = (m[0] - y) / options_.huber_slope;
          loss = options_.huber_slope * options_.huber_slope * (std::sqrt(1.0 + z * z) - 1.0);
          break;
        }
      }
      total += w * loss;
      weight_sum += w;
    }
    return {total, weight_sum};
  }

  static double weighted_mean(std::span<const double> values, std::span<const double> weights) {
    double total = 0.0;
    double weight_sum = 0.0;
    for (std::size_t row = 0; row < values.size(); ++row) {
      double w = weights.empty() ? 1.0 : weights[row];
      total += w * values[row];
      weight_sum += w;
    }
    return weight_sum > 0 ? total / weight_sum : 0.0;
  }

  // The smallest value whose cumulative weight reaches half the total. `values` is reordered.
  static double weighted_median(std::vector<std::pair<double, double>>& values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    double total = 0.0;
    for (const auto& entry : values) total += entry.second;
    double running = 0.0;
    for (const auto& [value, weight] : values) {
      running += weight;
      if (running >= 0.5 * total) return value;
    }
    return values.back().first;
  }

 private:
  const GbdtOptions& options_;
};

// Everything one call to fit_gbdt works with.
class Booster {
 public:
  Booster(const GbdtOptions& options, const BinnedFeatures& binned, const GbdtMatrix& train, std::size_t width)
      : options_(options), scorer_(options), loss_(options), binned_(binned), train_(train), width_(width) {
    threads_ = std::max(1, options.thread_count);
  }

  // Grows one tree for output `group` of round `round` into `ensemble` from `row_stats`, and adds
  // its leaf values to `margins` (rows x groups) for every training row.
  void grow_tree(int round, std::size_t group, const std::vector<BinStats>& row_stats, std::span<float> margins,
                 model::TreeEnsembleData& ensemble) {
    const std::uint64_t tree_key = static_cast<std::uint64_t>(round) * loss_.groups() + group;
    // Rows and features this tree sees.
    row_order_.clear();
    for (std::uint32_t row = 0; row < train_.rows; ++row) {
      if (sampled(options_.subsample, options_.seed, tree_key, row)) row_order_.push_back(row);
    }
    partition_scratch_.resize(row_order_.size());
    choose_features(tree_key);

    auto root_index = static_cast<std::uint32_t>(ensemble.nodes.size());
    ensemble.roots.push_back(root_index);
    if (loss_.groups() > 1) ensemble.tree_groups.push_back(static_cast<std::uint32_t>(group));
    append_node(ensemble);

    GrowingNode root;
    root.node_index = root_index;
    root.end = row_order_.size();
    root.histogram = take_histogram();
    histograms_.build(binned_, features_, row_order_, row_stats, root.histogram, threads_);
    root.total = node_total(root.histogram);
    ensemble.cover[root_index] = static_cast<float>(root.total.hessian);
    root.split = find_split(root, threads_);

    std::vector<GrowingNode> leaves;
    std::size_t leaf_count = 1;
    auto may_add_leaf = [&] {
      return options_.max_leaves <= 0 || leaf_count < static_cast<std::size_t>(options_.max_leaves);
    };
    if (options_.grow_policy == GrowPolicy::kDepthwise) {
      std::vector<GrowingNode> level;
      level.push_back(std::move(root));
      while (!level.empty()) {
        std::vector<GrowingNode*> parents;
        for (auto& node : level) {
          if (node.split.valid && may_add_leaf()) {
            parents.push_back(&node);
            ++leaf_count;
          } else {
            leaves.push_back(std::move(node));
          }
        }
        level = expand_all(parents, row_stats, ensemble);
      }
    } else {
      std::vector<GrowingNode> open;
      open.push_back(std::move(root));
      while (true) {
        // The open node with the largest gain; the lowest node index on a tie.
        std::size_t best = open.size();
        for (std::size_t index = 0; index < open.size(); ++index) {
          if (!open[index].split.valid) continue;
          if (best == open.size() || open[index].split.gain > open[best].split.gain ||
              (open[index].split.gain == open[best].split.gain && open[index].node_index < open[best].node_index)) {
            best = index;
          }
        }
        if (best == open.size() || !may_add_leaf()) break;
        GrowingNode node = std::move(open[best]);
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(best));
        ++leaf_count;
        std::vector<GrowingNode*> parents = {&node};
        for (auto& child : expand_all(parents, row_stats, ensemble)) open.push_back(std::move(child));
      }
      for (auto& node : open) leaves.push_back(std::move(node));
    }
    finish_leaves(leaves, group, margins, ensemble);
  }

  // The leaf each row of `features` (rows x width) reaches in tree `tree`, added to `margins`.
  static void add_tree_to_margins(const model::TreeEnsembleData& ensemble, std::size_t tree,
                                  std::span<const float> features, std::size_t rows, std::size_t width,
                                  std::span<float> margins, std::size_t group_count, int threads,
                                  std::span<const std::uint32_t> only_rows = {}) {
    std::uint32_t group = ensemble.tree_groups.empty() ? 0 : ensemble.tree_groups[tree];
    std::size_t count = only_rows.empty() ? rows : only_rows.size();
    constexpr std::size_t kRowsPerTask = 8192;
    parallel_for((count + kRowsPerTask - 1) / kRowsPerTask, count >= kRowsPerTask ? threads : 1,
                 [&](std::size_t task) {
                   std::size_t end = std::min(count, (task + 1) * kRowsPerTask);
                   for (std::size_t index = task * kRowsPerTask; index < end; ++index) {
                     std::size_t row = only_rows.empty() ? index : only_rows[index];
                     const float* x = features.data() + row * width;
                     const model::TreeNode* node = &ensemble.nodes[ensemble.roots[tree]];
                     while (!node->is_leaf()) {
                       bool left = model::goes_left(*node, x[node->feature()], ensemble.category_sets);
                       node = &ensemble.nodes[left ? node->left : node->right];
                     }
                     margins[row * group_count + group] += node->value;
                   }
                 });
  }

 private:
  void choose_features(std::uint64_t tree_key) {
    features_.clear();
    if (options_.colsample_bytree >= 1.0) {
      for (std::uint32_t feature = 0; feature < width_; ++feature) features_.push_back(feature);
      return;
    }
    auto wanted = static_cast<std::size_t>(
        std::max(1.0, std::round(options_.colsample_bytree * static_cast<double>(width_))));
    std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed;
    for (std::uint32_t feature = 0; feature < width_; ++feature) {
      keyed.push_back({sample_hash(options_.seed ^ 0x636f6c73616d706cULL, tree_key, feature), feature});
    }
    std::sort(keyed.begin(), keyed.end());
    for (std::size_t index = 0; index < std::min(wanted, keyed.size()); ++index) features_.push_back(keyed[index].second);
    std::sort(features_.begin(), features_.end());
  }

  // Every row lands in one bin of each feature, so any feature's used bins sum to the node's
  // totals (bins past a feature's count are not cleared and hold stale sums).
  BinStats node_total(const Histogram& histogram) const {
    std::uint32_t feature = features_.front();
    const BinStats* bins = histogram.data() + feature * kBinsPerFeature;
    BinStats total = bins[kMissingBin];
    for (std::size_t bin = 0; bin < binned_.bin_count[feature]; ++bin) {
      total.gradient += bins[bin].gradient;
      total.hessian += bins[bin].hessian;
    }
    return total;
  }

  Histogram take_histogram() {
    if (spare_histograms_.empty()) return {};
    Histogram histogram = std::move(spare_histograms_.back());
    spare_histograms_.pop_back();
    return histogram;
  }

  static void append_node(model::TreeEnsembleData& ensemble) {
    ensemble.nodes.emplace_back();
    ensemble.cover.push_back(0);
    ensemble.gain.push_back(0);
  }

  Split find_split(const GrowingNode& node, int threads) const {
    if (options_.max_depth > 0 && node.depth >= options_.max_depth) return {};
    double parent_score = scorer_.score(node.total);
    std::vector<Split> per_feature(features_.size());
    // Scanning a feature's bins costs the same for a small node as for a large one, so the scan
    // is spread over threads whenever there are enough features to share.
    parallel_for(features_.size(), features_.size() >= 8 ? threads : 1, [&](std::size_t index) {
      std::uint32_t feature = features_[index];
      const BinStats* bins = node.histogram.data() + feature * kBinsPerFeature;
      per_feature[index] =
          binned_.categorical[feature]
              ? best_categorical_split(bins, feature, binned_.bin_count[feature], node.total, scorer_, options_)
              : best_numeric_split(bins, feature, binned_.bin_count[feature], node.total, parent_score, scorer_);
    });
    Split best;
    for (const auto& split : per_feature) {
      if (split.valid && (!best.valid || split.gain > best.gain + 1e-12)) best = split;
    }
    return best;
  }

  // Writes `parent`'s split into the tree and appends its two children (serial: it grows arrays).
  std::pair<GrowingNode, GrowingNode> attach_children(GrowingNode& parent, model::TreeEnsembleData& ensemble) {
    const Split& split = parent.split;
    auto left_index = static_cast<std::uint32_t>(ensemble.nodes.size());
    model::TreeNode& node = ensemble.nodes[parent.node_index];
    node.feature_and_flags = split.feature | (split.default_left ? model::TreeNode::kDefaultLeftFlag : 0U);
    node.left = left_index;
    node.right = left_index + 1;
    if (split.categorical) {
      node.feature_and_flags |= model::TreeNode::kCategoricalFlag;
      auto offset = static_cast<std::uint32_t>(ensemble.category_sets.size());
      node.value = model::TreeNode::category_set_value(offset);
      std::uint32_t words = 0;
      for (std::uint32_t code = 0; code < kBinsPerFeature; ++code) {
        if ((split.right_categories[code / 64] >> (code % 64)) & 1U) words = code / 32 + 1;
      }
      ensemble.category_sets.push_back(words);
      for (std::uint32_t word = 0; word < words; ++word) {
        ensemble.category_sets.push_back(
            static_cast<std::uint32_t>(split.right_categories[word / 2] >> (32 * (word % 2))));
      }
    } else {
      node.value = binned_.cuts[split.feature][split.bin];
    }
    ensemble.gain[parent.node_index] = static_cast<float>(split.gain);
    append_node(ensemble);
    append_node(ensemble);
    GrowingNode left;
    GrowingNode right;
    left.node_index = left_index;
    right.node_index = left_index + 1;
    left.depth = right.depth = parent.depth + 1;
    return {std::move(left), std::move(right)};
  }

  // Partitions the parent's rows (stable, left first), builds the smaller child's histogram,
  // gets the larger one's by subtraction, and finds both children's splits. Touches only the
  // parent's rows and the two children, so parents of one level run in parallel.
  void fill_children(GrowingNode& parent, GrowingNode& left, GrowingNode& right,
                     const std::vector<BinStats>& row_stats, model::TreeEnsembleData& ensemble, int threads,
                     HistogramBuilder& builder) {
    std::size_t kept = partition(parent, threads);
    left.begin = parent.begin;
    left.end = kept;
    right.begin = kept;
    right.end = parent.end;
    bool left_smaller = left.end - left.begin <= right.end - right.begin;
    GrowingNode& small = left_smaller ? left : right;
    GrowingNode& large = left_smaller ? right : left;
    std::span<const std::uint32_t> small_rows(row_order_.data() + small.begin, small.end - small.begin);
    if (options_.max_depth > 0 && left.depth >= options_.max_depth) {
      // Children at the depth limit become leaves: they need their sums, not histograms.
      for (std::uint32_t row : small_rows) {
        small.total.gradient += row_stats[row].gradient;
        small.total.hessian += row_stats[row].hessian;
      }
    } else {
      // Build the smaller child's histogram; the larger one is the parent's minus it.
      builder.build(binned_, features_, small_rows, row_stats, small.histogram, threads);
      std::swap(large.histogram, parent.histogram);  // the parent keeps the spare table for the pool
      for (std::uint32_t feature : features_) {
        BinStats* large_bins = large.histogram.data() + feature * kBinsPerFeature;
        const BinStats* small_bins = small.histogram.data() + feature * kBinsPerFeature;
        for (std::size_t bin = 0; bin < binned_.bin_count[feature]; ++bin) {
          large_bins[bin].gradient -= small_bins[bin].gradient;
          large_bins[bin].hessian -= small_bins[bin].hessian;
        }
        large_bins[kMissingBin].gradient -= small_bins[kMissingBin].gradient;
        large_bins[kMissingBin].hessian -= small_bins[kMissingBin].hessian;
      }
      small.total = node_total(small.histogram);
    }
    large.total = {parent.total.gradient - small.total.gradient, parent.total.hessian - small.total.hessian};
    ensemble.cover[left.node_index] = static_cast<float>(left.total.hessian);
    ensemble.cover[right.node_index] = static_cast<float>(right.total.hessian);
    left.split = find_split(left, threads);
    right.split = find_split(right, threads);
  }

  // Reorders the parent's rows stably, left child's first, and returns where the right child's
  // begin. Large nodes are cut into fixed blocks: each block counts its left rows, a prefix sum
  // gives every block its two output positions, and the blocks scatter in parallel.
  std::size_t partition(const GrowingNode& parent, int threads) {
    const Split& split = parent.split;
    const std::uint8_t* column = binned_.column(split.feature);
    const std::size_t rows = parent.end - parent.begin;
    std::size_t blocks = (rows + kRowsPerHistogramBlock - 1) / kRowsPerHistogramBlock;
    if (threads <= 1 || blocks <= 1) {
      // Branch-free: each row is written to both outputs and only one cursor advances.
      std::size_t kept = parent.begin;
      std::size_t moved = parent.begin;
      for (std::size_t index = parent.begin; index < parent.end; ++index) {
        std::uint32_t row = row_order_[index];
        bool go_left = split.goes_left(column[row]);
        row_order_[kept] = row;
        partition_scratch_[moved] = row;
        kept += go_left ? 1 : 0;
        moved += go_left ? 0 : 1;
      }
      std::copy(partition_scratch_.begin() + static_cast<std::ptrdiff_t>(parent.begin),
                partition_scratch_.begin() + static_cast<std::ptrdiff_t>(moved),
                row_order_.begin() + static_cast<std::ptrdiff_t>(kept));
      return kept;
    }
    auto block_range = [&](std::size_t block) {
      std::size_t begin = parent.begin + block * kRowsPerHistogramBlock;
      return std::pair(begin, std::min(parent.end, begin + kRowsPerHistogramBlock));
    };
    std::vector<std::size_t> left_counts(blocks, 0);
    parallel_for(blocks, threads, [&](std::size_t block) {
      auto [begin, end] = block_range(block);
      std::size_t count = 0;
      for (std::size_t index = begin; index < end; ++index) count += split.goes_left(column[row_order_[index]]) ? 1 : 0;
      left_counts[block] = count;
    });
    std::size_t total_left = 0;
    for (std::size_t count : left_counts) total_left += count;
    std::vector<std::size_t> left_at(blocks);
    std::vector<std::size_t> right_at(blocks);
    std::size_t next_left = parent.begin;
    std::size_t next_right = parent.begin + total_left;
    for (std::size_t block = 0; block < blocks; ++block) {
      auto [begin, end] = block_range(block);
      left_at[block] = next_left;
      right_at[block] = next_right;
      next_left += left_counts[block];
      next_right += (end - begin) - left_counts[block];
    }
    parallel_for(blocks, threads, [&](std::size_t block) {
      auto [begin, end] = block_range(block);
      std::size_t left_position = left_at[block];
      std::size_t right_position = right_at[block];
      for (std::size_t index = begin; index < end; ++index) {
        std::uint32_t row = row_order_[index];
        if (split.goes_left(column[row])) {
          partition_scratch_[left_position++] = row;
        } else {
          partition_scratch_[right_position++] = row;
        }
      }
    });
    parallel_for(blocks, threads, [&](std::size_t block) {
      auto [begin, end] = block_range(block);
      std::copy(partition_scratch_.begin() + static_cast<std::ptrdiff_t>(begin),
                partition_scratch_.begin() + static_cast<std::ptrdiff_t>(end),
                row_order_.begin() + static_cast<std::ptrdiff_t>(begin));
    });
    return parent.begin + total_left;
  }

  // Splits every parent, returning the children in order (left, right of each parent). With as
  // many parents as threads the parents run in parallel, one thread each; otherwise each parent
  // uses every thread inside. Either way every number is computed the same way.
  std::vector<GrowingNode> expand_all(const std::vector<GrowingNode*>& parents, const std::vector<BinStats>& row_stats,
                                      model::TreeEnsembleData& ensemble) {
    std::vector<GrowingNode> children;
    children.reserve(parents.size() * 2);
    for (GrowingNode* parent : parents) {
      auto [left, right] = attach_children(*parent, ensemble);
      left.histogram = take_histogram();
      right.histogram = take_histogram();
      children.push_back(std::move(left));
      children.push_back(std::move(right));
    }
    bool across_parents = threads_ > 1 && parents.size() >= static_cast<std::size_t>(threads_);
    if (across_parents) {
      // One thread per parent: the builder's single-thread path keeps no state, so one is shared.
      parallel_for(parents.size(), threads_, [&](std::size_t index) {
        fill_children(*parents[index], children[2 * index], children[2 * index + 1], row_stats, ensemble, 1,
                      histograms_);
      });
    } else {
      for (std::size_t index = 0; index < parents.size(); ++index) {
        fill_children(*parents[index], children[2 * index], children[2 * index + 1], row_stats, ensemble, threads_,
                      histograms_);
      }
    }
    // The larger child inherited each parent's table and left the parent its spare one.
    for (GrowingNode* parent : parents) spare_histograms_.push_back(std::move(parent->histogram));
    return children;
  }

  void finish_leaves(std::vector<GrowingNode>& leaves, std::size_t group, std::span<float> margins,
                     model::TreeEnsembleData& ensemble) {
    const std::size_t group_count = loss_.groups();
    for (auto& leaf : leaves) {
      double weight = scorer_.weight(leaf.total);
      if (options_.objective == GbdtObjective::kAbsoluteError) {
        // The Newton step of a sign gradient is meaningless; the leaf takes the weighted median
        // residual of its rows instead (XGBoost's adaptive leaves for reg:absoluteerror).
        std::vector<std::pair<double, double>> residuals;
        for (std::size_t index = leaf.begin; index < leaf.end; ++index) {
          std::uint32_t row = row_order_[index];
          residuals.push_back({train_.labels[row] - margins[row * group_count + group],
                               train_.weights.empty() ? 1.0 : train_.weights[row]});
        }
        weight = Loss::weighted_median(residuals);
      }
      model::TreeNode& node = ensemble.nodes[leaf.node_index];
      node.feature_and_flags = model::TreeNode::kLeafFlag;
      node.value = static_cast<float>(weight * options_.learning_rate);
      ensemble.cover[leaf.node_index] = static_cast<float>(leaf.total.hessian);
      spare_histograms_.push_back(std::move(leaf.histogram));
    }
    // Rows of this tree: their leaf is known from the partition. Rows left out by subsampling
    // walk the finished tree.
    parallel_for(leaves.size(), row_order_.size() >= kRowsPerHistogramBlock ? threads_ : 1, [&](std::size_t index) {
      const GrowingNode& leaf = leaves[index];
      float value = ensemble.nodes[leaf.node_index].value;
      for (std::size_t position = leaf.begin; position < leaf.end; ++position) {
        margins[row_order_[position] * group_count + group] += value;
      }
    });
    if (row_order_.size() < train_.rows) {
      std::vector<char> in_tree(train_.rows, 0);
      for (std::uint32_t row : row_order_) in_tree[row] = 1;
      std::vector<std::uint32_t> unsampled;
      for (std::uint32_t row = 0; row < train_.rows; ++row) {
        if (!in_tree[row]) unsampled.push_back(row);
      }
      add_tree_to_margins(ensemble, ensemble.roots.size() - 1, train_.features, train_.rows, width_, margins,
                          group_count, threads_, unsampled);
    }
  }

  const GbdtOptions& options_;
  SplitScorer scorer_;
  Loss loss_;
  const BinnedFeatures& binned_;
  const GbdtMatrix& train_;
  std::size_t width_;
  int threads_ = 1;
  std::vector<std::uint32_t> row_order_;
  std::vector<std::uint32_t> partition_scratch_;
  std::vector<std::uint32_t> features_;
  HistogramBuilder histograms_;
  // Histograms of finished nodes, reused: allocating a fresh 256-bin-per-feature table for every
  // node costs more in page faults than building it.
  std::vector<Histogram> spare_histograms_;
};

}  // namespace

std::string_view metric_name(GbdtMetric metric) {
  switch (metric) {
    case GbdtMetric::kLogLoss:
      return "logloss";
    case GbdtMetric::kError:
      return "error";
    case GbdtMetric::kMultiLogLoss:
      return "mlogloss";
    case GbdtMetric::kMultiError:
      return "merror";
    case GbdtMetric::kRmse:
      return "rmse";
    case GbdtMetric::kMae:
      return "mae";
    case GbdtMetric::kPseudoHuber:
      return "mphe";
  }
  return "";
}

Result<GbdtFit> fit_gbdt(const GbdtMatrix& train, std::size_t width, const GbdtMatrix* validation,
                         const GbdtOptions& options, const GbdtState* start, const GbdtCallbacks& callbacks) {
  int threads = std::max(1, options.thread_count);
  if (width == 0) return invalid_argument("there are no features to train on");
  if (train.rows == 0) return invalid_argument("there are no training rows");
  SLIPWAY_ASSIGN_OR_RETURN(BinnedFeatures binned, bin_features(train, width, options, threads));
  Loss loss(options);
  const std::size_t groups = loss.groups();

  GbdtState state;
  if (start != nullptr) {
    state = *start;
    if (state.ensemble.input_width != width || state.ensemble.group_count != groups) {
      return invalid_argument("the model to continue from has " + std::to_string(state.ensemble.input_width) +
                              " features and " + std::to_string(state.ensemble.group_count) +
                              " outputs, but this data gives " + std::to_string(width) + " and " +
                              std::to_string(groups));
    }
  } else {
    state.ensemble.input_width = width;
    state.ensemble.group_count = groups;
    state.ensemble.base_margin = loss.base_margin(train.labels, train.weights);
  }
  model::TreeEnsembleData& ensemble = state.ensemble;
  if (ensemble.cover.size() != ensemble.nodes.size()) {
    return invalid_argument("the model to continue from has no training statistics (cover), which boosting keeps");
  }
  const std::size_t prior_trees = ensemble.roots.size() - static_cast<std::size_t>(state.rounds_done) * groups;

  // Margins start at the starting ensemble's predictions: the same float sums, in the same tree
  // order, that boosting accumulates.
  auto initial_margins = [&](const GbdtMatrix& matrix) {
    std::vector<float> margins(matrix.rows * groups, ensemble.base_margin);
    for (std::size_t tree = 0; tree < ensemble.roots.size(); ++tree) {
      Booster::add_tree_to_margins(ensemble, tree, matrix.features, matrix.rows, width, margins, groups, threads);
    }
    return margins;
  };
  std::vector<float> margins = initial_margins(train);
  std::vector<float> validation_margins;
  if (validation != nullptr) validation_margins = initial_margins(*validation);

  Booster booster(options, binned, train, width);
  std::vector<BinStats> row_stats(train.rows);
  std::vector<double> probabilities;
  GbdtFit fit;
  // The round with the lowest validation metric so far (the first on a tie), kept as rounds
  // finish rather than searched for each round.
  int best_round = -1;
  double best_validation = 0.0;
  auto note_round = [&](const RoundMetrics& record) {
    if (best_round < 0 || record.validation < best_validation) {
      best_round = record.round;
      best_validation = record.validation;
    }
  };
  for (const auto& record : state.history) note_round(record);
  for (int round = state.rounds_done; round < options.rounds; ++round) {
    for (std::size_t group = 0; group < groups; ++group) {
      loss.gradients(margins, train.labels, train.weights, group, probabilities, row_stats, threads);
      booster.grow_tree(round, group, row_stats, margins, ensemble);
      if (validation != nullptr) {
        Booster::add_tree_to_margins(ensemble, ensemble.roots.size() - 1, validation->features, validation->rows,
                                     width, validation_margins, groups, threads);
      }
    }
    RoundMetrics record;
    record.round = round;
    record.train = loss.metric(margins, train.labels, train.weights, threads);
    if (validation != nullptr) {
      record.validation = loss.metric(validation_margins, validation->labels, validation->weights, threads);
    }
    state.history.push_back(record);
    note_round(record);
    state.rounds_done = round + 1;
    if (callbacks.on_round) callbacks.on_round(record, options.rounds);
    if (validation != nullptr && options.early_stopping_rounds > 0 &&
        round - best_round >= options.early_stopping_rounds) {
      fit.stopped_early = true;
      break;
    }
    if (callbacks.on_checkpoint && options.checkpoint_every > 0 && state.rounds_done % options.checkpoint_every == 0 &&
        state.rounds_done < options.rounds) {
      SLIPWAY_RETURN_IF_ERROR(callbacks.on_checkpoint(state));
    }
  }

  int rounds_kept = state.rounds_done;
  if (validation != nullptr && !state.history.empty()) {
    fit.best_round = best_round;
    if (fit.stopped_early) rounds_kept = fit.best_round + 1;
  }
  if (rounds_kept < state.rounds_done) {
    // Early stopping keeps the trees up to the best round: drop the later ones and their nodes
    // (trees are appended in order, so theirs are the tail of every array).
    std::size_t trees_kept = prior_trees + static_cast<std::size_t>(rounds_kept) * groups;
    std::size_t nodes_kept = ensemble.roots[trees_kept];
    std::uint32_t category_words_kept = static_cast<std::uint32_t>(ensemble.category_sets.size());
    for (std::size_t index = nodes_kept; index < ensemble.nodes.size(); ++index) {
      const auto& node = ensemble.nodes[index];
      if (!node.is_leaf() && node.is_categorical()) {
        category_words_kept = std::min(category_words_kept, node.category_set());
      }
    }
    ensemble.roots.resize(trees_kept);
    if (!ensemble.tree_groups.empty()) ensemble.tree_groups.resize(trees_kept);
    ensemble.nodes.resize(nodes_kept);
    ensemble.cover.resize(nodes_kept);
    ensemble.gain.resize(nodes_kept);
    ensemble.category_sets.resize(category_words_kept);
  }
  fit.rounds = rounds_kept;
  fit.history = std::move(state.history);
  fit.model = std::make_shared<model::TreeEnsembleModel>(std::move(ensemble));
  return fit;
}

}  // namespace slipway::train
