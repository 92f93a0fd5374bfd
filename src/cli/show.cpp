// slipway show RUN_ID: one run's params, metrics, per-round history, lineage and spec.
#include <map>
#include <ostream>
#include <set>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct ShowResult : CommandResult {
  registry::RunRecord run;
  // Metrics recorded at more than one step (per boosting round): key -> (step -> value).
  std::map<std::string, std::map<std::int64_t, double>> series;

  void write_json(JsonWriter& json) const override {
    json.begin_object();
    registry::write_run_fields(json, run);
    json.key("history").begin_object();
    for (const auto& [key, values] : series) {
      json.key(key).begin_array();
      for (const auto& [step, value] : values) json.begin_array().value(step).value(value).end_array();
      json.end_array();
    }
    json.end_object().end_object();
  }

  void write_text(std::ostream& out) const override {
    out << "run          " << run.run_id << "\n"
        << "experiment   " << run.experiment << "\n"
        << "status       " << run.status << "\n"
        << "process      "
        << (run.owner.pid == 0 ? std::string("-") : std::to_string(run.owner.pid) + " on " + run.owner.host) << "\n"
        << "started      " << format_time_ms(run.start_ms) << " UTC\n"
        << "code         " << run.code_version << "\n"
        << "data         " << run.data_fingerprint << "\n"
        << "bundle       " << (run.bundle_sha256.empty() ? "-" : run.bundle_sha256) << "\n\nparams\n";
    for (const auto& [key, value] : run.params) out << "  " << key << " = " << value << "\n";
    out << "\nmetrics\n";
    for (const auto& metric : run.metrics) out << "  " << metric.key << " = " << format_metric(metric.value) << "\n";
    if (!run.tags.empty()) out << "\ntags\n";
    for (const auto& [key, value] : run.tags) out << "  " << key << " = " << value << "\n";
    if (!run.artifacts.empty()) out << "\nfiles\n";
    for (const auto& artifact : run.artifacts) {
      out << "  " << artifact.path << "  " << artifact.size_bytes << " bytes  sha256:" << artifact.sha256.substr(0, 12)
          << "\n";
    }
    if (!series.empty()) write_rounds(out);
    if (!run.spec.empty()) out << "\nspec\n" << run.spec;
  }

  // Per-round metrics: about 20 evenly spaced rounds plus the last (--json has every one).
  void write_rounds(std::ostream& out) const {
    std::set<std::int64_t> steps;
    for (const auto& [key, values] : series) {
      for (const auto& entry : values) steps.insert(entry.first);
    }
    std::vector<std::int64_t> all_steps(steps.begin(), steps.end());
    std::size_t stride = std::max<std::size_t>(1, all_steps.size() / 20);
    // gbdt records a metric per boosting round, mlp per epoch.
    auto model = run.params.find("model");
    std::string unit = model != run.params.end() && model->second == "mlp" ? "epoch" : "round";
    if (run.code_version == "external") unit = "step";  // recorded by code elsewhere (the tracking API)
    std::vector<std::string> headers = {unit};
    for (const auto& entry : series) headers.push_back(entry.first);
    std::vector<std::vector<std::string>> rows;
    for (std::size_t index = 0; index < all_steps.size(); ++index) {
      if (index % stride != 0 && index + 1 != all_steps.size()) continue;
      std::vector<std::string> row = {std::to_string(all_steps[index])};
      for (const auto& entry : series) {
        auto found = entry.second.find(all_steps[index]);
        row.push_back(found == entry.second.end() ? "-" : format_metric(found->second));
      }
      rows.push_back(std::move(row));
    }
    out << "\nper " << unit << " (" << all_steps.size() << " " << unit << "s)\n";
    print_table(out, headers, rows);
  }
};

Result<ShowResult> show(const GlobalOptions& global, const std::string& run_id) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  ShowResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.run, store->runs().get(run_id));
  SLIPWAY_ASSIGN_OR_RETURN(auto history, store->runs().metric_history(run_id));
  for (const auto& record : history) result.series[record.key][record.step] = record.value;
  for (auto it = result.series.begin(); it != result.series.end();) {
    it = it->second.size() > 1 ? std::next(it) : result.series.erase(it);
  }
  return result;
}

}  // namespace

int run_show(const GlobalOptions& global, const std::string& run_id) { return render(global, show(global, run_id)); }

}  // namespace slipway::cli
