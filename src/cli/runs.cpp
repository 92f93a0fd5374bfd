// slipway runs: recent training runs.
#include <algorithm>
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct RunsResult : CommandResult {
  std::vector<registry::RunRecord> runs;
  bool ids_only = false;

  static std::string model_of(const registry::RunRecord& run) {
    return run.params.count("model") ? run.params.at("model") : "";
  }

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("runs").begin_array();
    for (const auto& run : runs) {
      json.begin_object().key("run_id").value(run.run_id).key("experiment").value(run.experiment);
      json.key("status").value(run.status).key("start_ms").value(run.start_ms).key("end_ms").value(run.end_ms);
      json.key("model").value(model_of(run));
      json.key("metrics").begin_object();
      for (const auto& metric : run.metrics) json.key(metric.key).value(metric.value);
      json.end_object().end_object();
    }
    json.end_array().end_object();
  }

  void write_text(std::ostream& out) const override {
    if (ids_only) {
      for (const auto& run : runs) out << run.run_id << "\n";
      return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& run : runs) {
      std::string headline;
      for (const auto& metric : run.metrics) {
        if (metric.key == "test_auc" || metric.key == "test_rmse")
          headline = metric.key + "=" + format_metric(metric.value);
      }
      // A run recorded elsewhere (the tracking API) names its own metrics: its first, then.
      if (headline.empty() && !run.metrics.empty()) {
        headline = run.metrics.front().key + "=" + format_metric(run.metrics.front().value);
      }
      rows.push_back({run.run_id, run.experiment, run.status, model_of(run), headline, format_time_ms(run.start_ms)});
    }
    print_table(out, {"run", "experiment", "status", "model", "metric", "started (UTC)"}, rows);
  }
};

// Runs past which a filter the store cannot apply (model, target, params) stops looking: a
// listing stays quick in a workspace of a million runs.
constexpr std::size_t kMaxRunsScanned = 100'000;

// The --model, --target and --param filters, which the store does not index.
struct RunFilter {
  std::string model, target;
  std::map<std::string, std::string> params;

  bool empty() const { return model.empty() && target.empty() && params.empty(); }
  bool matches(const registry::RunRecord& run) const {
    auto param = [&run](const std::string& key) {
      auto found = run.params.find(key);
      return found == run.params.end() ? std::string() : found->second;
    };
    if (!model.empty() && param("model") != model) return false;
    for (const auto& [key, value] : params) {
      if (param(key) != value) return false;
    }
    if (target.empty()) return true;
    pipeline::TrainSpec spec;
    return !run.spec.empty() && pipeline::load_spec_text(run.spec, "the run's spec", spec).ok() &&
           spec.target == target;
  }
};

Result<RunsResult> list_runs(const GlobalOptions& global, const RunsFlags& flags) {
  RunFilter filter{flags.model, flags.target, {}};
  SLIPWAY_ASSIGN_OR_RETURN(filter.params, pipeline::parse_key_values(flags.params));
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  RunsResult result;
  result.ids_only = flags.ids_only;
  // Newest first, a page at a time (the store filters by experiment and status, as /api/runs does;
  // the rest is filtered here).
  registry::RunQuery query;
  query.experiment = flags.experiment;
  query.status = flags.status;
  query.page_size = filter.empty() ? std::min<std::size_t>(flags.limit, 1000) : 1000;
  std::size_t scanned = 0;
  while (result.runs.size() < flags.limit && scanned < kMaxRunsScanned) {
    SLIPWAY_ASSIGN_OR_RETURN(auto page, store->runs().query(query));
    scanned += page.runs.size();
    for (auto& run : page.runs) {
      if (filter.matches(run)) result.runs.push_back(std::move(run));
    }
    if (page.next_page_token.empty()) break;
    query.page_token = std::move(page.next_page_token);
  }
  if (scanned >= kMaxRunsScanned && result.runs.size() < flags.limit) {
    log_warn(
        fmt::format("looked through the newest {} runs only; --experiment or --status narrows the search", scanned));
  }
  if (result.runs.size() > flags.limit) result.runs.resize(flags.limit);
  return result;
}

}  // namespace

int run_runs(const GlobalOptions& global, const RunsFlags& flags) { return render(global, list_runs(global, flags)); }

}  // namespace slipway::cli
