// The optimized versions `slipway optimize` builds from a baseline bundle. Private to optimize.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "slipway/data.h"
#include "slipway/model.h"

namespace slipway::optimize {

struct BuiltCandidate {
  std::string name;       // "quantize", "prune:120" ...
  std::string technique;  // quantize, prune
  std::map<std::string, std::string> settings;
  std::shared_ptr<const model::Bundle> bundle;  // null when it could not be built
  std::string error;                            // why not
  int changes = 1;                              // how far from the baseline (ties go to fewer changes)
  // Serving configuration keys (serve::serving_config_keys()) to serve it with; empty: defaults.
  std::map<std::string, std::string> serving_config;
  // Not built: an earlier run measured it (AlreadyMeasured said so), and its record stands.
  bool resumed = false;
};

// Whether an earlier run measured this candidate (its name and settings), so that a builder need
// not train it again. Null: build everything.
using AlreadyMeasured = std::function<bool(const BuiltCandidate&)>;

// A tree ensemble retrained on `train` without its least important inputs (total gain, or split
// count where the model has no statistics): the lowest quarter, and the lowest half, after a
// control retrained on the same rows with every input ("features:all"). Only for
// models Slipway trained (their training parameters are in the manifest) whose inputs are one
// feature each; otherwise one row saying why.
std::vector<BuiltCandidate> feature_candidates(const model::Bundle& baseline, const data::Table* train,
                                               const AlreadyMeasured& already_measured = nullptr);

// Students distilled from the baseline (binary classification or regression): trained to
// regress the teacher's margin mixed with the labels, alpha * teacher + (1 - alpha) * label in
// probability space (the teacher's probability softened by `temperature` first, and the student's
// margin scaled back by it), on `train` and the `unlabeled` rows (teacher only). Three students: a
// GBDT of 50 rounds of depth 4, an MLP of one hidden layer of 32 units, and a linear model.
struct DistillSettings {
  double alpha = 0.7;
  double temperature = 1.0;
};
std::vector<BuiltCandidate> distill_candidates(const model::Bundle& baseline, const data::Table* train,
                                               const data::Table* unlabeled, const DistillSettings& settings,
                                               const AlreadyMeasured& already_measured = nullptr);

// The baseline served with dynamic batching configurations (what Triton's Model Analyzer
// sweeps): small batches with a short wait, larger ones with a longer wait, and two instances;
// and, when some requests repeat (`repeat_rate` > 0), with the response cache.
std::vector<BuiltCandidate> serving_candidates(const std::shared_ptr<const model::Bundle>& baseline,
                                               double repeat_rate);

// The quantized tree layout: exact, so the same outputs; with `bf16_leaves` its leaves in
// bfloat16 too (half their memory), whose error is measured.
BuiltCandidate quantize_candidate(const model::Bundle& baseline, bool bf16_leaves);

// A linear model's weights as int8 with one scale: an eighth of the bytes; its error is measured.
BuiltCandidate int8_candidate(const model::Bundle& baseline);

// A linear model with its near-zero coefficients dropped (set to 0): those below 1% and below 5%
// of the largest |weight| (on standardized inputs, so the sizes compare). Each says how many
// weights it kept and which inputs no weight reads any more (inputs a client could stop sending
// once the model is retrained without them).
std::vector<BuiltCandidate> sparse_candidates(const model::Bundle& baseline);

// A GBDT Slipway trained, refitted on `train` with its parameters and a depth cap: two less than
// its max_depth, and half of it (distinct, at least 1). One row saying why when not applicable.
std::vector<BuiltCandidate> depth_candidates(const model::Bundle& baseline, const data::Table* train,
                                             const AlreadyMeasured& already_measured = nullptr);

// One point of the pruning curve: the model cut to its first `rounds` boosting rounds.
struct PrunePoint {
  std::size_t rounds = 0;
  double quality = 0.0;  // in eval::watched_metric, on the golden rows
};

// A tree ensemble cut to its first rounds: at the best round on the golden rows (when earlier
// than the last) and, with `quality_budget`, at the fewest rounds whose drop from the whole model
// stays within it. `curve` receives the quality at each round tried.
std::vector<BuiltCandidate> prune_candidates(const model::Bundle& baseline, const data::Table& golden,
                                             std::optional<double> quality_budget, std::vector<PrunePoint>& curve);

// An MLP in lower precision: bfloat16 weights and products ("quantize:bf16"); int8 weights with
// activations quantized per row ("int8:dynamic") and, given `calibration` rows, with per-layer
// static scales calibrated on them ("int8:calibrated-max", "int8:calibrated-p99.99"). One row
// saying why for a model that is not an MLP.
std::vector<BuiltCandidate> mlp_precision_candidates(const model::Bundle& baseline, const std::string& technique,
                                                     const data::Table* calibration);

// Structured pruning of an MLP: the hidden units with the smallest weights (the norm of a unit's
// incoming weights times that of its outgoing ones) removed, a quarter and a half of each hidden
// layer, each as it is and, given `train` rows, fine-tuned on them for a quarter of the baseline's
// epochs (at least 2) from the pruned weights: the quality curve is the four rows.
std::vector<BuiltCandidate> unit_prune_candidates(const model::Bundle& baseline, const data::Table* train,
                                                  const AlreadyMeasured& already_measured = nullptr);

}  // namespace slipway::optimize
