// slipway verify [--repair]: renders registry::verify_workspace's report.
#include <filesystem>
#include <ostream>

#include "cli/cli.h"
#include "slipway/registry.h"

namespace slipway::cli {
namespace {

void write_report_json(JsonWriter& json, const std::string& home, const registry::VerifyReport& report, bool repair) {
  json.begin_object().key("home").value(std::filesystem::absolute(home).string());
  json.key("schema_version").value(report.schema_version).key("repair").value(repair);
  json.key("artifacts_checked").value(static_cast<std::uint64_t>(report.artifacts_checked));
  json.key("references_checked").value(static_cast<std::uint64_t>(report.references_checked));
  json.key("metadata_problems").begin_array();
  for (const auto& problem : report.metadata_problems) json.value(problem);
  json.end_array().key("corrupt_artifacts").begin_array();
  for (const auto& corrupt : report.corrupt_artifacts) {
    json.begin_object().key("sha256").value(corrupt.sha256).key("actual_sha256").value(corrupt.actual_sha256);
    json.key("error").value(corrupt.error).key("referrers").begin_array();
    for (const auto& referrer : corrupt.referrers) json.value(referrer);
    json.end_array().key("quarantined_to").value(corrupt.quarantined_to).end_object();
  }
  json.end_array().key("missing_artifacts").begin_array();
  for (const auto& missing : report.missing_artifacts) {
    json.begin_object().key("sha256").value(missing.sha256).key("referrer").value(missing.referrer).end_object();
  }
  json.end_array().key("orphan_artifacts").begin_array();
  for (const auto& orphan : report.orphan_artifacts) json.value(orphan);
  json.end_array();
  auto runs = [&](std::string_view key, const std::vector<registry::VerifyReport::RunCheck>& checks) {
    json.key(key).begin_array();
    for (const auto& run : checks) {
      json.begin_object().key("run_id").value(run.run_id).key("reason").value(run.reason);
      json.key("marked").value(run.marked).end_object();
    }
    json.end_array();
  };
  runs("interrupted_runs", report.interrupted_runs);
  runs("unchecked_runs", report.unchecked_runs);
  json.key("problems").value(static_cast<std::uint64_t>(report.problem_count())).end_object();
}

void print_report(std::ostream& out, const std::string& home, const registry::VerifyReport& report) {
  out << "workspace  " << std::filesystem::absolute(home).string() << " (schema version " << report.schema_version
      << ")\n";
  out << "checked    " << report.artifacts_checked << " artifacts, " << report.references_checked
      << " rows naming an artifact\n";
  for (const auto& problem : report.metadata_problems) out << "problem    metadata store: " << problem << "\n";
  for (const auto& corrupt : report.corrupt_artifacts) {
    out << "problem    artifact " << corrupt.sha256
        << " is corrupt: " << (corrupt.error.empty() ? "its bytes hash to " + corrupt.actual_sha256 : corrupt.error);
    for (const auto& referrer : corrupt.referrers) out << "; named by " << referrer;
    if (!corrupt.quarantined_to.empty()) out << " [moved to " << corrupt.quarantined_to << "]";
    out << "\n";
  }
  for (const auto& missing : report.missing_artifacts) {
    out << "problem    artifact " << missing.sha256 << " is missing; named by " << missing.referrer << "\n";
  }
  for (const auto& run : report.interrupted_runs) {
    out << (run.marked ? "repaired   run " : "problem    run ") << run.run_id << " was left RUNNING: " << run.reason
        << (run.marked ? " [marked INTERRUPTED; `slipway train --resume` continues it]"
                       : " (`slipway verify --repair` marks it INTERRUPTED)")
        << "\n";
  }
  for (const auto& run : report.unchecked_runs) {
    out << "note       run " << run.run_id << " is RUNNING; " << run.reason << "\n";
  }
  for (const auto& orphan : report.orphan_artifacts) {
    out << "note       artifact " << orphan << " is named by no row (left by an interrupted write)\n";
  }
  std::size_t problems = report.problem_count();
  out << (problems == 0 ? "ok: no problems found" : std::to_string(problems) + " problem(s) found") << "\n";
}

struct VerifyResult : CommandResult {
  std::string home;
  registry::VerifyReport report;
  bool repair = false;
  void write_json(JsonWriter& json) const override { write_report_json(json, home, report, repair); }
  void write_text(std::ostream& out) const override { print_report(out, home, report); }
};

}  // namespace

int run_verify(const GlobalOptions& global, bool repair) {
  // Without --repair it only reads; --repair also applies pending schema migrations.
  auto store = open_workspace(global, repair ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto report = registry::verify_workspace(**store, {.repair = repair});
  if (!report.ok()) return fail(report.status());
  bool clean = report->problem_count() == 0;
  VerifyResult result;
  result.home = global.home;
  result.report = std::move(*report);
  result.repair = repair;
  render(global, result);
  return clean ? 0 : 1;
}

}  // namespace slipway::cli
