// slipway batch: a model over a file into a job folder (batch::run_job); batch status DIR.
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/batch.h"

namespace slipway::cli {
namespace {

struct BatchResult : CommandResult {
  batch::JobManifest manifest;
  std::string out;
  bool already_finished = false;
  std::size_t shards_skipped = 0;
  double seconds = 0;
  bool status_only = false;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("out").value(out).key("already_finished").value(already_finished);
    json.key("shards_resumed").value(static_cast<std::uint64_t>(shards_skipped)).key("seconds").value(seconds);
    std::string manifest_json = manifest.to_json();
    manifest_json.pop_back();  // its newline
    json.key("manifest").raw(manifest_json);
    json.end_object();
  }
  void write_text(std::ostream& out_stream) const override {
    std::size_t done = 0;
    for (const auto& shard : manifest.shards) done += shard.state == "done" ? 1 : 0;
    if (already_finished) out_stream << "already finished: nothing to do (the same model, input and output spec)\n";
    out_stream << "job        " << manifest.key.substr(0, 16) << " in " << out << "\n";
    out_stream << "model      " << manifest.model << " (bundle sha256:" << manifest.bundle_sha256.substr(0, 12)
               << ")\n";
    out_stream << "input      " << manifest.input << " (sha256:" << manifest.input_sha256.substr(0, 12) << ")\n";
    out_stream << "state      " << manifest.state << (manifest.reason.empty() ? "" : ": " + manifest.reason) << "\n";
    out_stream << fmt::format("rows       {} in the input: {} scored, {} bad (errors-*.csv)\n", manifest.rows,
                              manifest.scored, manifest.bad);
    out_stream << fmt::format("shards     {} of {} done", done, manifest.shards.size());
    if (shards_skipped > 0) out_stream << fmt::format(" ({} by an earlier, interrupted run)", shards_skipped);
    out_stream << "\n";
    if (!status_only && !already_finished && seconds > 0) {
      out_stream << fmt::format("time       {:.2f} s, {:.0f} rows/s\n", seconds,
                                static_cast<double>(manifest.rows) / seconds);
    }
  }
};

Result<BatchResult> run(const GlobalOptions& global, const BatchFlags& flags) {
  if (flags.reference.empty()) return invalid_argument("give the model: slipway batch REF --data FILE --out DIR");
  if (flags.data.empty()) return invalid_argument("--data is required");
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, flags.reference));
  batch::JobSpec spec;
  spec.data = flags.data;
  spec.out = flags.out;
  spec.format = flags.format;
  spec.shards = flags.shards;
  spec.workers = flags.workers;
  spec.max_error_rate = flags.max_error_rate;
  spec.id_column = flags.id_column;
  ProgressBar progress("batch", 1, flags.progress && !global.json);
  // The job is recorded for lineage when a workspace is there to record it in.
  auto store = open_workspace(global, WorkspaceAccess::kWrite);
  auto outcome = pipeline::run_batch_job(
      store.ok() ? store->get() : nullptr, loaded, spec,
      [&](std::size_t done, std::size_t total) {
        progress.set_total(static_cast<std::int64_t>(total));
        progress.update(static_cast<std::int64_t>(done), "rows");
      },
      pipeline::Caller{});
  progress.finish();
  if (!outcome.ok()) return outcome.status();
  if (outcome->manifest.state == "failed") return failed_precondition(outcome->manifest.reason);
  BatchResult result;
  result.manifest = outcome->manifest;
  result.out = flags.out;
  result.already_finished = outcome->already_finished;
  result.shards_skipped = outcome->shards_skipped;
  result.seconds = outcome->seconds;
  return result;
}

Result<BatchResult> status(const std::string& out) {
  BatchResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.manifest, pipeline::batch_job_status(out));
  result.out = out;
  result.status_only = true;
  return result;
}

}  // namespace

int run_batch(const GlobalOptions& global, const BatchFlags& flags) { return render(global, run(global, flags)); }

int run_batch_status(const GlobalOptions& global, const std::string& out) { return render(global, status(out)); }

}  // namespace slipway::cli
