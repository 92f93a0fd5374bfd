// Tree growth: the root's histogram is built from the tree's rows; a node with a valid split
// partitions its rows, builds the smaller child's histogram and gets the larger one's by
// subtraction, then finds both children's splits. Depth-wise growth expands a whole level at a
// time (its parents in parallel when there are as many as threads); leaf-wise growth expands the
// open node with the largest gain. Leaves take the Newton step (or the objective's own value)
// times the learning rate.
#include "train/gbdt_tree_grower.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "train/gbdt_sampling.h"

namespace slipway::train {
namespace {

void append_node(model::TreeEnsembleData& ensemble) {
  ensemble.nodes.emplace_back();
  ensemble.cover.push_back(0);
  ensemble.gain.push_back(0);
}

}  // namespace

TreeGrower::TreeGrower(const GbdtOptions& options, const BoostingObjective& objective, const BinnedFeatures& binned,
                       const GbdtMatrix& train, std::size_t width)
    : options_(options), scorer_(options), objective_(objective), binned_(binned), train_(train), width_(width) {
  threads_ = std::max(1, options.thread_count);
}

void TreeGrower::grow_tree(int round, std::size_t group, const std::vector<GradientStats>& row_stats,
                           std::span<float> margins, model::TreeEnsembleData& ensemble) {
  const std::uint64_t tree_key = static_cast<std::uint64_t>(round) * objective_.groups() + group;
  // Rows and features this tree sees.
  partition_.reset(train_.rows,
                   [&](std::uint32_t row) { return sampled(options_.subsample, options_.seed, tree_key, row); });
  choose_features(tree_key);

  auto root_index = static_cast<std::uint32_t>(ensemble.nodes.size());
  ensemble.roots.push_back(root_index);
  if (objective_.groups() > 1) ensemble.tree_groups.push_back(static_cast<std::uint32_t>(group));
  append_node(ensemble);

  GrowingNode root;
  root.node_index = root_index;
  root.end = partition_.size();
  root.histogram = take_histogram();
  histograms_.build(binned_, features_, partition_.rows(), row_stats, root.histogram, threads_);
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

void TreeGrower::choose_features(std::uint64_t tree_key) {
  features_.clear();
  if (options_.colsample_bytree >= 1.0) {
    for (std::uint32_t feature = 0; feature < width_; ++feature) features_.push_back(feature);
    return;
  }
  auto wanted =
      static_cast<std::size_t>(std::max(1.0, std::round(options_.colsample_bytree * static_cast<double>(width_))));
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed;
  for (std::uint32_t feature = 0; feature < width_; ++feature) {
    keyed.push_back({sample_hash(options_.seed ^ 0x636f6c73616d706cULL, tree_key, feature), feature});
  }
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t index = 0; index < std::min(wanted, keyed.size()); ++index) features_.push_back(keyed[index].second);
  std::sort(features_.begin(), features_.end());
}

Histogram TreeGrower::take_histogram() {
  if (spare_histograms_.empty()) return {};
  Histogram histogram = std::move(spare_histograms_.back());
  spare_histograms_.pop_back();
  return histogram;
}

GradientStats TreeGrower::node_total(const Histogram& histogram) const {
  return histogram_total(binned_, histogram, features_.front());
}

Split TreeGrower::find_split(const GrowingNode& node, int threads) const {
  if (options_.max_depth > 0 && node.depth >= options_.max_depth) return {};
  return find_best_split(binned_, features_, node.histogram.data(), node.total, scorer_, options_, threads);
}

// Writes `parent`'s split into the tree and appends its two children (serial: it grows arrays).
std::pair<TreeGrower::GrowingNode, TreeGrower::GrowingNode> TreeGrower::attach_children(
    GrowingNode& parent, model::TreeEnsembleData& ensemble) {
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

// Partitions the parent's rows (stable, left first), builds the smaller child's histogram, gets
// the larger one's by subtraction, and finds both children's splits. Touches only the parent's
// rows and the two children, so parents of one level run in parallel.
void TreeGrower::fill_children(GrowingNode& parent, GrowingNode& left, GrowingNode& right,
                               const std::vector<GradientStats>& row_stats, model::TreeEnsembleData& ensemble,
                               int threads) {
  std::size_t kept =
      partition_.split(parent.begin, parent.end, parent.split, binned_.column(parent.split.feature), threads);
  left.begin = parent.begin;
  left.end = kept;
  right.begin = kept;
  right.end = parent.end;
  bool left_smaller = left.end - left.begin <= right.end - right.begin;
  GrowingNode& small = left_smaller ? left : right;
  GrowingNode& large = left_smaller ? right : left;
  std::span<const std::uint32_t> small_rows = partition_.rows(small.begin, small.end);
  if (options_.max_depth > 0 && left.depth >= options_.max_depth) {
    // Children at the depth limit become leaves: they need their sums, not histograms.
    for (std::uint32_t row : small_rows) {
      small.total.gradient += row_stats[row].gradient;
      small.total.hessian += row_stats[row].hessian;
    }
  } else {
    // Build the smaller child's histogram; the larger one is the parent's minus it.
    histograms_.build(binned_, features_, small_rows, row_stats, small.histogram, threads);
    std::swap(large.histogram, parent.histogram);  // the parent keeps the spare table for the pool
    subtract_histogram(binned_, features_, small.histogram, large.histogram);
    small.total = node_total(small.histogram);
  }
  large.total = {parent.total.gradient - small.total.gradient, parent.total.hessian - small.total.hessian};
  ensemble.cover[left.node_index] = static_cast<float>(left.total.hessian);
  ensemble.cover[right.node_index] = static_cast<float>(right.total.hessian);
  left.split = find_split(left, threads);
  right.split = find_split(right, threads);
}

// Splits every parent, returning the children in order (left, right of each parent). With as
// many parents as threads the parents run in parallel, one thread each; otherwise each parent
// uses every thread inside. Either way every number is computed the same way.
std::vector<TreeGrower::GrowingNode> TreeGrower::expand_all(const std::vector<GrowingNode*>& parents,
                                                            const std::vector<GradientStats>& row_stats,
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
      fill_children(*parents[index], children[2 * index], children[2 * index + 1], row_stats, ensemble, 1);
    });
  } else {
    for (std::size_t index = 0; index < parents.size(); ++index) {
      fill_children(*parents[index], children[2 * index], children[2 * index + 1], row_stats, ensemble, threads_);
    }
  }
  // The larger child inherited each parent's table and left the parent its spare one.
  for (GrowingNode* parent : parents) spare_histograms_.push_back(std::move(parent->histogram));
  return children;
}

void TreeGrower::finish_leaves(std::vector<GrowingNode>& leaves, std::size_t group, std::span<float> margins,
                               model::TreeEnsembleData& ensemble) {
  const std::size_t group_count = objective_.groups();
  for (auto& leaf : leaves) {
    LeafRows rows{partition_.rows(leaf.begin, leaf.end), train_.labels, train_.weights, margins, group_count, group};
    double weight = objective_.leaf_weight(scorer_.weight(leaf.total), rows);
    model::TreeNode& node = ensemble.nodes[leaf.node_index];
    node.feature_and_flags = model::TreeNode::kLeafFlag;
    node.value = static_cast<float>(weight * options_.learning_rate);
    ensemble.cover[leaf.node_index] = static_cast<float>(leaf.total.hessian);
    spare_histograms_.push_back(std::move(leaf.histogram));
  }
  // Rows of this tree: their leaf is known from the partition. Rows left out by subsampling
  // walk the finished tree.
  parallel_for(leaves.size(), partition_.size() >= kRowsPerHistogramBlock ? threads_ : 1, [&](std::size_t index) {
    const GrowingNode& leaf = leaves[index];
    float value = ensemble.nodes[leaf.node_index].value;
    for (std::uint32_t row : partition_.rows(leaf.begin, leaf.end)) margins[row * group_count + group] += value;
  });
  if (partition_.size() < train_.rows) {
    std::vector<char> in_tree(train_.rows, 0);
    for (std::uint32_t row : partition_.rows()) in_tree[row] = 1;
    std::vector<std::uint32_t> unsampled;
    for (std::uint32_t row = 0; row < train_.rows; ++row) {
      if (!in_tree[row]) unsampled.push_back(row);
    }
    add_tree_to_margins(ensemble, ensemble.roots.size() - 1, train_.features, train_.rows, width_, margins, group_count,
                        threads_, unsampled);
  }
}

void add_tree_to_margins(const model::TreeEnsembleData& ensemble, std::size_t tree, std::span<const float> features,
                         std::size_t rows, std::size_t width, std::span<float> margins, std::size_t group_count,
                         int threads, std::span<const std::uint32_t> only_rows) {
  std::uint32_t group = ensemble.tree_groups.empty() ? 0 : ensemble.tree_groups[tree];
  std::size_t count = only_rows.empty() ? rows : only_rows.size();
  constexpr std::size_t kRowsPerTask = 8192;
  parallel_for((count + kRowsPerTask - 1) / kRowsPerTask, count >= kRowsPerTask ? threads : 1, [&](std::size_t task) {
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

}  // namespace slipway::train
