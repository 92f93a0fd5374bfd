// The boosting loop: bin the features once, then each round compute every row's gradients from
// the margins so far, grow one tree per output, add its leaves to the training (and validation)
// margins, and record the round's metric; early stopping keeps the trees up to the best
// validation round. Checkpoints hand the trees and the metric history out between rounds.
#include "train/gbdt_trainer.h"

#include <algorithm>
#include <string>

#include "train/gbdt_binning.h"
#include "train/gbdt_metric.h"
#include "train/gbdt_objective.h"
#include "train/gbdt_tree_grower.h"

namespace slipway::train {

Result<GbdtFit> fit_gbdt(const GbdtMatrix& train, std::size_t width, const GbdtMatrix* validation,
                         const GbdtOptions& options, const GbdtState* start, const GbdtCallbacks& callbacks) {
  int threads = std::max(1, options.thread_count);
  if (width == 0) return invalid_argument("there are no features to train on");
  if (train.rows == 0) return invalid_argument("there are no training rows");
  SLIPWAY_ASSIGN_OR_RETURN(BinnedFeatures binned, bin_features(train, width, options, threads));
  std::unique_ptr<BoostingObjective> objective = make_objective(options);
  const std::size_t groups = objective->groups();

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
    state.ensemble.base_margin = objective->base_margin(train.labels, train.weights);
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
      add_tree_to_margins(ensemble, tree, matrix.features, matrix.rows, width, margins, groups, threads);
    }
    return margins;
  };
  std::vector<float> margins = initial_margins(train);
  std::vector<float> validation_margins;
  if (validation != nullptr) validation_margins = initial_margins(*validation);
  auto metric_of = [&](std::span<const float> outputs, const GbdtMatrix& matrix) {
    return evaluate_metric(options.metric, outputs, matrix.labels, matrix.weights, groups, options.huber_slope,
                           threads);
  };

  TreeGrower grower(options, *objective, binned, train, width);
  std::vector<GradientStats> row_stats(train.rows);
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
      objective->gradients(margins, train.labels, train.weights, group, row_stats, threads);
      grower.grow_tree(round, group, row_stats, margins, ensemble);
      if (validation != nullptr) {
        add_tree_to_margins(ensemble, ensemble.roots.size() - 1, validation->features, validation->rows, width,
                            validation_margins, groups, threads);
      }
    }
    RoundMetrics record;
    record.round = round;
    record.train = metric_of(margins, train);
    if (validation != nullptr) record.validation = metric_of(validation_margins, *validation);
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
    if (callbacks.stop != nullptr && callbacks.stop->load(std::memory_order_relaxed) &&
        state.rounds_done < options.rounds) {
      return failed_precondition("training was stopped after round " + std::to_string(state.rounds_done) + " of " +
                                 std::to_string(options.rounds));
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
