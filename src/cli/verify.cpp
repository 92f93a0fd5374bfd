// slipway verify [--repair]: renders pipeline::verify_workspace's report.
#include <filesystem>
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

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
        << (run.marked ? " [marked INTERRUPTED; a training run with a checkpoint continues with `slipway train "
                         "--resume " +
                             run.run_id + "`, an import is run again]"
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
  void write_json(JsonWriter& json) const override {
    pipeline::write_verify_report_json(json, std::filesystem::absolute(home).string(), report, repair);
  }
  void write_text(std::ostream& out) const override { print_report(out, home, report); }
};

}  // namespace

int run_verify(const GlobalOptions& global, bool repair) {
  // Without --repair it only reads; --repair also applies pending schema migrations.
  auto store = open_workspace(global, repair ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto report = pipeline::verify_workspace(**store, repair, pipeline::Caller{});
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
