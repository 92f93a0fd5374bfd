// slipway/train.h — trainers that turn a table into a Bundle, and the declarations of every
// training parameter (the one source for validation, --help and docs/parameters.md).
#pragma once

#include <functional>
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
};

struct TrainSummary {
  std::shared_ptr<const model::Bundle> bundle;
  std::vector<std::string> features;
  std::size_t rows_used = 0;
  std::size_t rows_dropped_missing_target = 0;
  int iterations = 0;
  bool converged = false;
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
