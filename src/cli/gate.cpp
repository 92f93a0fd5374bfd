// slipway gate: a candidate held to thresholds on a metric against a baseline, overall and per
// slice; the result is kept with both versions.
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct GateResult : CommandResult {
  pipeline::GateOutcome outcome;

  void write_json(JsonWriter& json) const override { pipeline::write_gate_outcome_json(json, outcome); }

  void write_text(std::ostream& out) const override {
    const eval::GateReport& report = outcome.report;
    const std::string& recorded = outcome.report_sha256;
    const std::string& candidate = outcome.candidate;
    out << "gate " << candidate << " against " << outcome.baseline << " on " << outcome.data_path << ": "
        << report.criteria.metric << " (" << (report.higher_is_better ? "higher" : "lower") << " is better), "
        << eval::format_gate_thresholds(report.criteria) << "\n\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& check : report.checks) {
      auto number = [](double value, const char* format) {
        return std::isnan(value) ? std::string("-") : fmt::format(fmt::runtime(format), value);
      };
      rows.push_back({check.scope, std::to_string(check.rows), number(check.baseline, "{:.4f}"),
                      number(check.candidate, "{:.4f}"), number(check.drop, "{:+.4f}"),
                      number(100 * check.relative_drop, "{:+.2f}%"),
                      check.passed ? (check.failure.empty() ? "pass" : "pass (" + check.failure + ")")
                                   : "FAIL: " + check.failure});
    }
    std::string column = report.slice_column.empty() ? "scope" : "scope (" + report.slice_column + ")";
    print_table(out, {column, "rows", "baseline", "candidate", "drop", "relative", "verdict"}, rows);
    out << "\n" << (report.passed() ? "passed" : "FAILED") << "\n";
    if (!recorded.empty())
      out << "recorded with " << candidate << " (report sha256:" << recorded.substr(0, 12) << ")\n";
  }
};

}  // namespace

Result<GateOutcome> run_gate_check(const GlobalOptions& global, const GateFlags& flags) {
  pipeline::GateRequest request;
  request.candidate = flags.reference;
  request.baseline = flags.baseline;
  request.data_path = flags.data_path;
  request.criteria = flags.criteria;
  request.slice = flags.slice;
  if (flags.baseline.empty()) return invalid_argument("a gate needs --baseline REF");
  if (flags.data_path.empty()) return invalid_argument("a gate needs --data FILE (labelled rows)");
  if (flags.criteria.metric.empty()) return invalid_argument("a gate needs --metric (auc, log_loss, rmse, ...)");
  // Results of registered versions are recorded with them: that needs the workspace for writing.
  std::unique_ptr<registry::Registry> store;
  if (!pipeline::names_bundle_file(flags.reference) || !pipeline::names_bundle_file(flags.baseline)) {
    bool registered = !pipeline::names_bundle_file(flags.reference) && !pipeline::names_bundle_file(flags.baseline);
    SLIPWAY_ASSIGN_OR_RETURN(store,
                             open_workspace(global, registered ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly));
  }
  auto result = std::make_unique<GateResult>();
  SLIPWAY_ASSIGN_OR_RETURN(result->outcome, pipeline::run_gate(store.get(), request, pipeline::Caller{}));
  GateOutcome outcome;
  outcome.passed = result->outcome.passed();
  outcome.result = std::move(result);
  return outcome;
}

int run_gate(const GlobalOptions& global, const GateFlags& flags) {
  // 0 passed, 1 failed, 2 when the gate could not run.
  auto outcome = run_gate_check(global, flags);
  if (!outcome.ok()) {
    fail(outcome.status());
    return 2;
  }
  render(global, *outcome->result);
  return outcome->passed ? 0 : 1;
}

}  // namespace slipway::cli
