// slipway/train.h — trainers that turn a table into a Bundle, and the declarations of every
// training parameter (the one source for validation, --help and docs/parameters.md).
#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/model.h"

namespace slipway::train {

// ---------------------------------------------------------------------------------------------
// Parameters.

enum class ParamType { kDouble, kInt, kChoice };

struct ParamDeclaration {
  std::string name;
  ParamType type = ParamType::kDouble;
  std::string default_value;
  double minimum = 0.0;               // inclusive, numbers only
  double maximum = 0.0;               // inclusive, numbers only
  std::vector<std::string> choices;   // kChoice only
  std::vector<std::string> families;  // model families the parameter applies to
  std::string description;
};

const std::vector<std::string>& model_families();
const std::vector<ParamDeclaration>& parameter_declarations();
// The declaration of `name` that applies to `family` (a name is declared at most once per
// family: learning_rate's differs for gbdt and mlp), or null.
const ParamDeclaration* parameter_declaration(const std::string& family, const std::string& name);
// "number", "integer" or "choice".
std::string_view parameter_type_name(ParamType type);
// What a parameter accepts: "[0, 1]" for a number or an integer, its choices joined by ", ".
std::string parameter_allowed_values(const ParamDeclaration& declaration);

// Checks `given` (KEY=VALUE pairs from the command line or a spec) against the declarations for
// `family` and returns every parameter of that family with defaults filled in. InvalidArgument
// naming the key and the expected type or range on any problem.
Result<std::map<std::string, std::string>> resolve_parameters(const std::string& family,
                                                              const std::map<std::string, std::string>& given);

// The parameter reference as a Markdown table (docs/parameters.md is generated from it).
std::string parameters_markdown();

// ---------------------------------------------------------------------------------------------
// L-BFGS, exposed for tests and for later trainers.

struct LbfgsOptions {
  int max_iterations = 500;
  int history = 10;
  // Stops when the largest gradient component is below gradient_tolerance * scale, where
  // scale is supplied by the caller (for sums over rows, the row count).
  double gradient_tolerance = 1e-6;
  double gradient_scale = 1.0;
  // Set from another thread: the minimizer returns after the iteration in progress (not converged).
  const std::atomic<bool>* stop = nullptr;
};

struct LbfgsResult {
  int iterations = 0;
  bool converged = false;
  double objective = 0.0;
};

// Minimizes objective(x, gradient) -> value, starting from and writing back to `x`.
using Objective = std::function<double(std::span<const double> x, std::span<double> gradient)>;
LbfgsResult minimize_lbfgs(const Objective& objective, std::vector<double>& x, const LbfgsOptions& options);

// ---------------------------------------------------------------------------------------------
// Training.

// One boosting round's metric (the objective's default: logloss, mlogloss, rmse, mae or mphe)
// on the training rows and, with early stopping, on the validation rows (else NaN).
struct RoundMetrics {
  int round = 0;
  double train = std::numeric_limits<double>::quiet_NaN();
  double validation = std::numeric_limits<double>::quiet_NaN();
};

struct TrainRequest {
  std::string target;
  std::string model_family = "logistic";
  // Feature columns; empty means every column except the target and `excluded_columns`.
  std::vector<std::string> features;
  std::vector<std::string> excluded_columns;
  std::map<std::string, std::string> params;  // KEY=VALUE, validated by resolve_parameters
  std::uint64_t seed = 42;
  int thread_count = 0;  // 0 = default_thread_count()
  // Lineage copied into the bundle manifest.
  std::string data_fingerprint;
  std::string split_description;
  // A numeric column of non-negative row weights (not a feature); empty for equal weights.
  std::string weight_column;

  // gbdt only. Warm start: boosting continues from this bundle's trees on the new data, with
  // its preprocessing; the result holds its trees and the new ones.
  std::shared_ptr<const model::Bundle> init_model;
  std::string init_model_reference;  // recorded in the manifest's params as init_model
  // gbdt only. Resume: a checkpoint from on_checkpoint of an earlier run of the same request;
  // the result has the bytes the uninterrupted run would have had.
  std::shared_ptr<const model::Bundle> resume_from;
  // gbdt only. Called every `checkpoint_every` rounds with a checkpoint bundle (not a model to
  // serve: it carries the rounds done and the metric history in its params).
  int checkpoint_every = 0;
  std::function<Status(const model::Bundle& checkpoint, int rounds_done)> on_checkpoint;
  // gbdt only. Called after every round.
  std::function<void(const RoundMetrics& latest, int rounds_total)> on_round;
  // Set from another thread, fitting ends after the round (gbdt, mlp) or iteration (linear,
  // logistic) in progress: gbdt and mlp fail with FailedPrecondition (their latest checkpoint
  // keeps what was done), linear and logistic return the weights so far, not converged.
  const std::atomic<bool>* stop = nullptr;
};

struct TrainSummary {
  std::shared_ptr<const model::Bundle> bundle;
  std::vector<std::string> features;
  std::size_t rows_used = 0;
  std::size_t rows_dropped_missing_target = 0;
  int iterations = 0;
  bool converged = false;
  // gbdt: the metric per round, its name, and with early stopping the best round (else -1).
  std::vector<RoundMetrics> history;
  std::string round_metric;
  int best_round = -1;
  bool stopped_early = false;
  std::size_t validation_rows = 0;
};

// Fits `request.model_family` on `table`. Deterministic: the same table, request and thread
// count give a bundle with the same bytes. InvalidArgument for an unusable target (missing
// column, one class, more than two classes for logistic, text for linear).
Result<TrainSummary> fit(const data::Table& table, const TrainRequest& request);

// Binary targets: the positive label, given the two labels present. Prefers 1/yes/true, else the
// rarer class (the event being predicted); `requested` overrides when it names one of them.
Result<std::string> choose_positive_label(const std::vector<std::string>& labels,
                                          const std::vector<std::size_t>& counts, const std::string& requested);

}  // namespace slipway::train
