// Growing one tree of a GBDT round from the rows' gradients. Private to train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "slipway/model.h"
#include "train/gbdt_binning.h"
#include "train/gbdt_histogram.h"
#include "train/gbdt_objective.h"
#include "train/gbdt_partition.h"
#include "train/gbdt_split.h"
#include "train/gbdt_trainer.h"

namespace slipway::train {

// Grows trees on binned training rows, one call per tree. Keeps its buffers (row order,
// histograms) between trees. Uses up to options.thread_count threads inside a call; one grower
// is used by one thread at a time. Holds references to everything it is given.
class TreeGrower {
 public:
  TreeGrower(const GbdtOptions& options, const BoostingObjective& objective, const BinnedFeatures& binned,
             const GbdtMatrix& train, std::size_t width);

  // Grows one tree for output `group` of round `round` into `ensemble` from `row_stats` (one per
  // training row), and adds its leaf values to `margins` (rows x groups) for every training row.
  // The rows and features it sees are drawn from (seed, round, group); the tree is the same at
  // any thread count.
  void grow_tree(int round, std::size_t group, const std::vector<GradientStats>& row_stats, std::span<float> margins,
                 model::TreeEnsembleData& ensemble);

 private:
  struct GrowingNode {
    std::uint32_t node_index = 0;  // in the ensemble's node array
    std::size_t begin = 0;         // its rows: partition_.rows(begin, end)
    std::size_t end = 0;
    int depth = 0;
    Histogram histogram;
    GradientStats total;
    Split split;
  };

  void choose_features(std::uint64_t tree_key);
  Histogram take_histogram();
  GradientStats node_total(const Histogram& histogram) const;
  Split find_split(const GrowingNode& node, int threads) const;
  std::pair<GrowingNode, GrowingNode> attach_children(GrowingNode& parent, model::TreeEnsembleData& ensemble);
  void fill_children(GrowingNode& parent, GrowingNode& left, GrowingNode& right,
                     const std::vector<GradientStats>& row_stats, model::TreeEnsembleData& ensemble, int threads);
  std::vector<GrowingNode> expand_all(const std::vector<GrowingNode*>& parents,
                                      const std::vector<GradientStats>& row_stats, model::TreeEnsembleData& ensemble);
  void finish_leaves(std::vector<GrowingNode>& leaves, std::size_t group, std::span<float> margins,
                     model::TreeEnsembleData& ensemble);

  const GbdtOptions& options_;
  SplitScorer scorer_;
  const BoostingObjective& objective_;
  const BinnedFeatures& binned_;
  const GbdtMatrix& train_;
  std::size_t width_;
  int threads_ = 1;
  RowPartition partition_;
  std::vector<std::uint32_t> features_;
  HistogramBuilder histograms_;
  // Histograms of finished nodes, reused: allocating a fresh 256-bin-per-feature table for every
  // node costs more in page faults than building it.
  std::vector<Histogram> spare_histograms_;
};

// Adds the leaf each row of `features` (rows x width) reaches in tree `tree` to that tree's
// output in `margins` (rows x group_count); only the rows in `only_rows` when it is not empty.
// Rows in fixed blocks on up to `threads` threads (one for fewer than a block's rows).
void add_tree_to_margins(const model::TreeEnsembleData& ensemble, std::size_t tree, std::span<const float> features,
                         std::size_t rows, std::size_t width, std::span<float> margins, std::size_t group_count,
                         int threads, std::span<const std::uint32_t> only_rows = {});

}  // namespace slipway::train
