// Histogram GBDT: features are binned once by quantiles; each depth level builds gradient
// histograms for the smaller child of every split and gets its sibling by subtraction; a split
// tries sending missing values left and right and keeps the better direction.
#include "train/gbdt_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace slipway::train {
namespace {

constexpr std::uint8_t kMissingBin = 255;

struct BinStats {
  double gradient = 0;
  double hessian = 0;
};

// Feature-major bin codes plus, per feature, the cut values: bin(x) = number of cuts <= x, so
// bin(x) <= b exactly when x < cuts[b].
struct BinnedFeatures {
  std::size_t rows = 0;
  std::vector<std::uint8_t> bins;
  std::vector<std::vector<float>> cuts;
};

BinnedFeatures bin_features(std::span<const float> features, std::size_t rows, std::size_t width, int max_bin,
                            int threads) {
  BinnedFeatures binned;
  binned.rows = rows;
  binned.bins.resize(rows * width);
  binned.cuts.resize(width);
  parallel_for(width, threads, [&](std::size_t feature) {
    std::vector<float> values;
    values.reserve(rows);
    for (std::size_t row = 0; row < rows; ++row) {
      float value = features[row * width + feature];
      if (!std::isnan(value)) values.push_back(value);
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    std::vector<float>& cuts = binned.cuts[feature];
    auto wanted_cuts = static_cast<std::size_t>(max_bin - 1);
    if (values.size() <= wanted_cuts + 1) {
      // Few distinct values: a cut between each neighbouring pair (at the upper value).
      for (std::size_t index = 1; index < values.size(); ++index) cuts.push_back(values[index]);
    } else {
      for (std::size_t cut = 1; cut <= wanted_cuts; ++cut) {
        float value = values[cut * values.size() / (wanted_cuts + 1)];
        if (cuts.empty() || value > cuts.back()) cuts.push_back(value);
      }
    }
    std::uint8_t* column = binned.bins.data() + feature * rows;
    for (std::size_t row = 0; row < rows; ++row) {
      float value = features[row * width + feature];
      column[row] = std::isnan(value)
                        ? kMissingBin
                        : static_cast<std::uint8_t>(std::upper_bound(cuts.begin(), cuts.end(), value) - cuts.begin());
    }
  });
  return binned;
}

// Histograms for one node: width x 256 bins (the last is the missing bin).
using Histogram = std::vector<BinStats>;

void build_histogram(const BinnedFeatures& binned, std::size_t width, std::span<const std::uint32_t> node_rows,
                     const std::vector<BinStats>& row_stats, Histogram& histogram, int threads) {
  histogram.resize(width * 256);
  std::fill(histogram.begin(), histogram.end(), BinStats{});
  // Waking a pool worker costs microseconds; small nodes are faster on one thread.
  constexpr std::size_t kRowsWorthThreads = 2048;
  parallel_for(width, node_rows.size() >= kRowsWorthThreads ? threads : 1, [&](std::size_t feature) {
    const std::uint8_t* column = binned.bins.data() + feature * binned.rows;
    BinStats* bins = histogram.data() + feature * 256;
    for (std::uint32_t row : node_rows) {
      BinStats& bin = bins[column[row]];
      bin.gradient += row_stats[row].gradient;
      bin.hessian += row_stats[row].hessian;
    }
  });
}

struct Split {
  double gain = 0;
  std::uint32_t feature = 0;
  std::uint32_t bin = 0;  // left: bins <= bin
  bool default_left = false;
  bool valid = false;
};

double score(double gradient, double hessian, double lambda) { return gradient * gradient / (hessian + lambda); }

Split best_split(const Histogram& histogram, std::size_t width, const BinnedFeatures& binned, BinStats total,
                 const GbdtOptions& options) {
  Split best;
  double parent = score(total.gradient, total.hessian, options.lambda);
  for (std::size_t feature = 0; feature < width; ++feature) {
    const BinStats* bins = histogram.data() + feature * 256;
    std::size_t bin_count = binned.cuts[feature].size() + 1;
    BinStats missing = bins[kMissingBin];
    BinStats left{};
    for (std::size_t bin = 0; bin + 1 < bin_count; ++bin) {
      left.gradient += bins[bin].gradient;
      left.hessian += bins[bin].hessian;
      for (bool missing_left : {false, true}) {
        BinStats l = left;
        if (missing_left) {
          l.gradient += missing.gradient;
          l.hessian += missing.hessian;
        }
        BinStats r{total.gradient - l.gradient, total.hessian - l.hessian};
        if (l.hessian < options.min_child_weight || r.hessian < options.min_child_weight) continue;
        double gain = 0.5 * (score(l.gradient, l.hessian, options.lambda) +
                             score(r.gradient, r.hessian, options.lambda) - parent) -
                      options.gamma;
        if (gain > best.gain + 1e-12) {
          best = {gain, static_cast<std::uint32_t>(feature), static_cast<std::uint32_t>(bin), missing_left, true};
        }
      }
    }
  }
  return best;
}

struct PendingNode {
  std::uint32_t node_index;  // in the tree being built
  std::size_t begin;         // its rows: row_order[begin, end)
  std::size_t end;
  Histogram histogram;
  BinStats total;
};

}  // namespace

GbdtFit fit_gbdt(std::span<const float> features, std::size_t rows, std::size_t width, std::span<const double> labels,
                 const GbdtOptions& options) {
  int threads = std::max(1, options.thread_count);
  BinnedFeatures binned = bin_features(features, rows, width, options.max_bin, threads);

  double label_mean =
      std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(std::max<std::size_t>(rows, 1));
  float base_margin = static_cast<float>(label_mean);
  if (options.objective == GbdtObjective::kLogistic) {
    double clamped = std::clamp(label_mean, 1e-6, 1.0 - 1e-6);
    base_margin = static_cast<float>(std::log(clamped / (1.0 - clamped)));
  }
  std::vector<float> margins(rows, base_margin);
  std::vector<BinStats> row_stats(rows);
  std::vector<std::uint32_t> row_order(rows);
  std::vector<model::TreeNode> nodes;
  std::vector<std::uint32_t> roots;
  std::vector<float> cover;
  std::vector<float> gain;
  // Histograms of finished nodes, reused: allocating a fresh 256-bin-per-feature table for every
  // node costs more in page faults than building it.
  std::vector<Histogram> spare_histograms;
  auto take_histogram = [&] {
    if (spare_histograms.empty()) return Histogram{};
    Histogram histogram = std::move(spare_histograms.back());
    spare_histograms.pop_back();
    return histogram;
  };

  for (int round = 0; round < options.rounds; ++round) {
    for (std::size_t row = 0; row < rows; ++row) {
      if (options.objective == GbdtObjective::kLogistic) {
        double probability = 1.0 / (1.0 + std::exp(-static_cast<double>(margins[row])));
        row_stats[row] = {probability - labels[row], std::max(probability * (1.0 - probability), 1e-16)};
      } else {
        row_stats[row] = {margins[row] - labels[row], 1.0};
      }
    }
    std::iota(row_order.begin(), row_order.end(), 0U);
    auto offset = static_cast<std::uint32_t>(nodes.size());
    roots.push_back(offset);
    nodes.emplace_back();
    cover.push_back(0);
    gain.push_back(0);

    std::vector<PendingNode> level;
    PendingNode root{offset, 0, rows, take_histogram(), {}};
    build_histogram(binned, width, row_order, row_stats, root.histogram, threads);
    for (std::size_t row = 0; row < rows; ++row) {
      root.total.gradient += row_stats[row].gradient;
      root.total.hessian += row_stats[row].hessian;
    }
    level.push_back(std::move(root));

    for (int depth = 0; !level.empty(); ++depth) {
      std::vector<PendingNode> next_level;
      for (auto& pending : level) {
        model::TreeNode& node = nodes[pending.node_index];
        cover[pending.node_index] = static_cast<float>(pending.total.hessian);
        Split split;
        if (depth < options.max_depth) split = best_split(pending.histogram, width, binned, pending.total, options);
        if (!split.valid) {
          double weight = -pending.total.gradient / (pending.total.hessian + options.lambda) * options.learning_rate;
          node.feature_and_flags = model::TreeNode::kLeafFlag;
          node.value = static_cast<float>(weight);
          for (std::size_t index = pending.begin; index < pending.end; ++index) margins[row_order[index]] += node.value;
          spare_histograms.push_back(std::move(pending.histogram));
          continue;
        }
        // Partition the node's rows: left (bin <= split bin, or missing going left) first.
        const std::uint8_t* column = binned.bins.data() + split.feature * binned.rows;
        auto goes_left = [&](std::uint32_t row) {
          std::uint8_t bin = column[row];
          return bin == kMissingBin ? split.default_left : bin <= split.bin;
        };
        auto middle = std::stable_partition(row_order.begin() + static_cast<std::ptrdiff_t>(pending.begin),
                                            row_order.begin() + static_cast<std::ptrdiff_t>(pending.end), goes_left);
        auto middle_index = static_cast<std::size_t>(middle - row_order.begin());

        auto left_index = static_cast<std::uint32_t>(nodes.size());
        node.feature_and_flags = split.feature | (split.default_left ? model::TreeNode::kDefaultLeftFlag : 0U);
        node.value = binned.cuts[split.feature][split.bin];
        node.left = left_index;
        node.right = left_index + 1;
        gain[pending.node_index] = static_cast<float>(split.gain);
        nodes.emplace_back();
        nodes.emplace_back();
        cover.resize(nodes.size(), 0);
        gain.resize(nodes.size(), 0);

        PendingNode left{left_index, pending.begin, middle_index, {}, {}};
        PendingNode right{left_index + 1, middle_index, pending.end, {}, {}};
        // Build the smaller child's histogram; the larger one is the parent's minus it.
        bool left_smaller = middle_index - pending.begin <= pending.end - middle_index;
        PendingNode& small = left_smaller ? left : right;
        PendingNode& large = left_smaller ? right : left;
        std::span<const std::uint32_t> small_rows(row_order.data() + small.begin, small.end - small.begin);
        small.histogram = take_histogram();
        build_histogram(binned, width, small_rows, row_stats, small.histogram, threads);
        large.histogram = std::move(pending.histogram);
        for (std::size_t bin = 0; bin < large.histogram.size(); ++bin) {
          large.histogram[bin].gradient -= small.histogram[bin].gradient;
          large.histogram[bin].hessian -= small.histogram[bin].hessian;
        }
        for (std::uint32_t row : small_rows) {
          small.total.gradient += row_stats[row].gradient;
          small.total.hessian += row_stats[row].hessian;
        }
        large.total = {pending.total.gradient - small.total.gradient, pending.total.hessian - small.total.hessian};
        next_level.push_back(std::move(left));
        next_level.push_back(std::move(right));
      }
      level = std::move(next_level);
    }
  }
  GbdtFit fit;
  fit.rounds = options.rounds;
  fit.model = std::make_shared<model::TreeEnsembleModel>(std::move(nodes), std::move(roots), width, base_margin,
                                                         std::move(cover), std::move(gain));
  return fit;
}

}  // namespace slipway::train
