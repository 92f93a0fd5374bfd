// slipway eval: a model evaluated on a labelled file, overall and per slice.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct EvalResult : CommandResult {
  pipeline::EvaluationOutcome outcome;

  void write_json(JsonWriter& json) const override { pipeline::write_evaluation_outcome_json(json, outcome); }
  void write_text(std::ostream& out) const override {
    out << "model " << outcome.model << " on " << outcome.data_path
        << (outcome.cached ? " (an earlier evaluation of the same bytes; --no-cache evaluates again)" : "") << "\n\n";
    print_evaluation(out, outcome.evaluation);
  }
};

Result<EvalResult> evaluate(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                            const std::string& slice, bool use_cache) {
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, reference));
  // The cache needs a workspace that can be written; without one the evaluation simply runs.
  std::unique_ptr<registry::Registry> cache;
  if (use_cache) {
    auto opened = open_workspace(global, WorkspaceAccess::kWrite);
    if (opened.ok()) cache = std::move(opened).value();
  }
  EvalResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.outcome, pipeline::evaluate_file(loaded, data_path, slice, cache.get()));
  return result;
}

}  // namespace

int run_eval(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
             const std::string& slice, bool use_cache) {
  return render(global, evaluate(global, reference, data_path, slice, use_cache));
}

}  // namespace slipway::cli
