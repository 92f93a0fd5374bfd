// slipway gate: a candidate held to thresholds on a metric against a baseline, overall and per
// slice; the result is kept with both versions.
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct GateResult : CommandResult {
  std::string candidate, baseline, data_path;
  eval::GateReport report;
  std::string recorded;  // the report's sha256 when stored with the versions

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("candidate").value(candidate).key("baseline").value(baseline).key("data").value(data_path);
    eval::write_gate_report_fields(json, report);
    if (!recorded.empty()) json.key("report_sha256").value(recorded);
    json.end_object();
  }

  void write_text(std::ostream& out) const override {
    out << "gate " << candidate << " against " << baseline << " on " << data_path << ": " << report.criteria.metric
        << " (" << (report.higher_is_better ? "higher" : "lower") << " is better), "
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
  if (flags.baseline.empty()) return invalid_argument("a gate needs --baseline REF");
  if (flags.data_path.empty()) return invalid_argument("a gate needs --data FILE (labelled rows)");
  if (flags.criteria.metric.empty()) return invalid_argument("a gate needs --metric (auc, log_loss, rmse, ...)");
  bool registered = !pipeline::names_bundle_file(flags.reference) && !pipeline::names_bundle_file(flags.baseline);
  std::unique_ptr<registry::Registry> store;
  // Results of registered versions are recorded with them; bundle files are only checked.
  if (registered) {
    SLIPWAY_ASSIGN_OR_RETURN(store, open_workspace(global, WorkspaceAccess::kWrite));
  }
  auto load = [&](const std::string& reference) {
    return store != nullptr ? pipeline::resolve_reference(store.get(), reference) : load_reference(global, reference);
  };
  SLIPWAY_ASSIGN_OR_RETURN(auto candidate, load(flags.reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto baseline, load(flags.baseline));
  SLIPWAY_ASSIGN_OR_RETURN(auto table, pipeline::read_table(flags.data_path));
  auto result = std::make_unique<GateResult>();
  result->candidate = candidate.description;
  result->baseline = baseline.description;
  result->data_path = flags.data_path;
  SLIPWAY_ASSIGN_OR_RETURN(result->report,
                           eval::gate(*baseline.bundle, *candidate.bundle, table, flags.criteria, flags.slice));
  if (store != nullptr) {
    JsonWriter json;
    result->write_json(json);
    std::string report = json.take();
    SLIPWAY_ASSIGN_OR_RETURN(result->recorded, store->artifacts().put(std::as_bytes(std::span(report))));
    SLIPWAY_ASSIGN_OR_RETURN(auto candidate_ref, registry::parse_model_reference(candidate.description));
    SLIPWAY_ASSIGN_OR_RETURN(auto baseline_ref, registry::parse_model_reference(baseline.description));
    registry::GateRecord record;
    record.model = candidate_ref.first;
    record.version = candidate_ref.second.version.value_or(0);
    record.baseline_model = baseline_ref.first;
    record.baseline_version = baseline_ref.second.version.value_or(0);
    record.data_fingerprint = data::fingerprint(table);
    record.metric = flags.criteria.metric;
    record.criteria = eval::format_gate_thresholds(flags.criteria);
    record.passed = result->report.passed();
    record.report_sha256 = result->recorded;
    SLIPWAY_RETURN_IF_ERROR(store->models().record_gate(record));
  }
  GateOutcome outcome;
  outcome.passed = result->report.passed();
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
