// Runs: params, metrics (a time series per key), checkpoints, and the process that owns each.
#include <algorithm>
#include <charconv>
#include <climits>

#include "registry/run_owner.h"
#include "registry/store_context.h"

namespace slipway::registry {
namespace {

constexpr std::string_view kRunColumns =
    "SELECT r.run_id, e.name, r.status, r.start_ms, r.end_ms, r.code_version, r.data_fingerprint, r.spec, "
    "r.bundle_sha256, r.owner_pid, r.owner_start_ticks, r.owner_host, r.owner_boot_id, r.owner_pid_namespace "
    "FROM runs r JOIN experiments e ON e.id = r.experiment_id ";

RunRecord read_run_row(const SqlRow& row) {
  RunRecord run;
  run.run_id = row.text(0);
  run.experiment = row.text(1);
  run.status = row.text(2);
  run.start_ms = row.integer(3);
  run.end_ms = row.integer(4);
  run.code_version = row.text(5);
  run.data_fingerprint = row.text(6);
  run.spec = row.text(7);
  run.bundle_sha256 = row.text(8);
  run.owner = {row.integer(9), row.integer(10), row.text(11), row.text(12), row.text(13)};
  return run;
}

MetricRecord read_metric_row(const SqlRow& row) { return {row.text(0), row.real(1), row.integer(2), row.integer(3)}; }

Status fill_run_details(SqlTransaction& sql, RunRecord& run) {
  SLIPWAY_ASSIGN_OR_RETURN(auto params,
                           sql.query("SELECT key, value FROM params WHERE run_id = ? ORDER BY key", {run.run_id}));
  for (const auto& row : params) run.params[row.text(0)] = row.text(1);
  // The latest value of each metric (ties: the highest, as MLflow does).
  SLIPWAY_ASSIGN_OR_RETURN(
      auto metrics, sql.query("SELECT key, value, step, timestamp_ms FROM metrics m WHERE run_id = ? AND rowid = ("
                              "SELECT rowid FROM metrics WHERE run_id = m.run_id AND key = m.key "
                              "ORDER BY timestamp_ms DESC, step DESC, value DESC LIMIT 1) ORDER BY rowid",
                              {run.run_id}));
  for (const auto& row : metrics) run.metrics.push_back(read_metric_row(row));
  SLIPWAY_ASSIGN_OR_RETURN(auto tags,
                           sql.query("SELECT key, value FROM run_tags WHERE run_id = ? ORDER BY key", {run.run_id}));
  for (const auto& row : tags) run.tags[row.text(0)] = row.text(1);
  SLIPWAY_ASSIGN_OR_RETURN(auto artifacts, sql.query("SELECT path, sha256, size_bytes, created_ms FROM run_artifacts "
                                                     "WHERE run_id = ? ORDER BY path",
                                                     {run.run_id}));
  for (const auto& row : artifacts) {
    run.artifacts.push_back({row.text(0), row.text(1), row.integer(2), row.integer(3)});
  }
  return {};
}

bool is_run_id(std::string_view text) {
  return text.size() == 32 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<std::vector<RunRecord>> read_runs(SqlTransaction& sql, std::string_view where, SqlParams params) {
  SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query(std::string(kRunColumns) + std::string(where), params));
  std::vector<RunRecord> runs;
  for (const auto& row : rows) {
    runs.push_back(read_run_row(row));
    SLIPWAY_RETURN_IF_ERROR(fill_run_details(sql, runs.back()));
  }
  return runs;
}

// The run's status; NotFound when there is no such run.
Result<std::string> run_status(SqlTransaction& sql, const std::string& run_id) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT status FROM runs WHERE run_id = ?", {run_id}));
  if (!row) return not_found("no run '" + run_id + "'; `slipway runs` lists them");
  return row->text(0);
}

Status require_running(SqlTransaction& sql, const std::string& run_id, std::string_view what) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string status, run_status(sql, run_id));
  if (status != "RUNNING") {
    return failed_precondition("run '" + run_id + "' has ended; " + std::string(what) + " cannot be added");
  }
  return {};
}

constexpr std::string_view kSetOwner =
    "owner_pid = ?, owner_start_ticks = ?, owner_host = ?, owner_boot_id = ?, owner_pid_namespace = ?";

}  // namespace

Result<std::string> RunStore::start(const NewRun& run) {
  SLIPWAY_RETURN_IF_ERROR(validate_experiment_name(run.experiment));
  if (!run.run_id.empty() && !is_run_id(run.run_id)) {
    return invalid_argument("a run id is 32 lowercase hex digits, not '" + run.run_id.substr(0, 64) + "'");
  }
  std::string run_id = run.run_id.empty() ? random_hex(16) : run.run_id;
  RunOwner owner = run.remote ? RunOwner{} : current_process_owner();
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    std::int64_t now = unix_time_ms();
    SLIPWAY_ASSIGN_OR_RETURN(auto existing, sql.query_row("SELECT 1 FROM runs WHERE run_id = ?", {run_id}));
    if (existing) return already_exists("run '" + run_id + "' exists");
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO experiments(name, created_ms) VALUES (?, ?) ON CONFLICT(name) DO NOTHING",
                    {run.experiment, now})
            .status());
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO runs(run_id, experiment_id, status, start_ms, code_version, data_fingerprint, spec, "
                    "owner_pid, owner_start_ticks, owner_host, owner_boot_id, owner_pid_namespace) "
                    "SELECT ?, id, 'RUNNING', ?, ?, ?, ?, ?, ?, ?, ?, ? FROM experiments WHERE name = ?",
                    {run_id, now, run.code_version, run.data_fingerprint, run.spec, owner.pid, owner.start_ticks,
                     owner.host, owner.boot_id, owner.pid_namespace, run.experiment})
            .status());
    for (const auto& [key, value] : run.params) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO params(run_id, key, value) VALUES (?, ?, ?)", {run_id, key, value}).status());
    }
    for (const auto& [key, value] : run.tags) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO run_tags(run_id, key, value) VALUES (?, ?, ?)", {run_id, key, value}).status());
    }
    return append_audit(sql, *context_, "run.start",
                        run_id + " experiment=" + run.experiment + (run.remote ? " (tracked remotely)" : ""));
  }));
  return run_id;
}

Status RunStore::log_params(const std::string& run_id, const std::map<std::string, std::string>& params) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(require_running(sql, run_id, "params"));
    for (const auto& [key, value] : params) {
      SLIPWAY_ASSIGN_OR_RETURN(auto row,
                               sql.query_row("SELECT value FROM params WHERE run_id = ? AND key = ?", {run_id, key}));
      if (row && row->text(0) == value) continue;
      if (row) {
        return failed_precondition("param '" + key + "' of run '" + run_id + "' is '" + row->text(0).substr(0, 64) +
                                   "' already; a param keeps its first value (log a metric or a tag to change it)");
      }
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO params(run_id, key, value) VALUES (?, ?, ?)", {run_id, key, value}).status());
    }
    return {};
  });
}

Status RunStore::set_tags(const std::string& run_id, const std::map<std::string, std::string>& tags) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(run_status(sql, run_id).status());
    for (const auto& [key, value] : tags) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO run_tags(run_id, key, value) VALUES (?, ?, ?) "
                                          "ON CONFLICT(run_id, key) DO UPDATE SET value = excluded.value",
                                          {run_id, key, value})
                                  .status());
    }
    return {};
  });
}

Status RunStore::add_artifact(const std::string& run_id, const RunArtifact& artifact) {
  if (!context_->artifacts.contains(artifact.sha256)) {
    return failed_precondition("artifact " + artifact.sha256 + " is not in the artifact store");
  }
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(require_running(sql, run_id, "artifacts"));
    SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT sha256 FROM run_artifacts WHERE run_id = ? AND path = ?",
                                                     {run_id, artifact.path}));
    if (row && row->text(0) == artifact.sha256) return {};
    if (row) {
      return already_exists("run '" + run_id + "' has a file '" + artifact.path + "' with other bytes already");
    }
    SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO run_artifacts(run_id, path, sha256, size_bytes, created_ms) "
                                        "VALUES (?, ?, ?, ?, ?)",
                                        {run_id, artifact.path, artifact.sha256, artifact.size_bytes, unix_time_ms()})
                                .status());
    return append_audit(sql, *context_, "run.artifact", run_id + " " + artifact.path + " sha256:" + artifact.sha256);
  });
}

Result<RunPage> RunStore::query(const RunQuery& query) {
  // The token is where the last page ended: "START_MS.ROWID" of its last run.
  std::int64_t after_start = INT64_MAX;
  std::int64_t after_row = INT64_MAX;
  if (!query.page_token.empty()) {
    auto dot = query.page_token.find('.');
    const char* begin = query.page_token.data();
    const char* end = begin + query.page_token.size();
    bool valid = dot != std::string::npos && query.page_token.size() <= 40;
    auto whole = [](const char* from, const char* to, std::int64_t& out) {
      auto parsed = std::from_chars(from, to, out);
      return parsed.ec == std::errc() && parsed.ptr == to && out >= 0;
    };
    valid = valid && whole(begin, begin + dot, after_start) && whole(begin + dot + 1, end, after_row);
    if (!valid) return invalid_argument("the page token is not one this server gave; start again without it");
  }
  std::size_t page_size = std::clamp<std::size_t>(query.page_size, 1, 1000);
  RunPage page;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(
        auto rows, sql.query("SELECT r.rowid, r.start_ms FROM runs r JOIN experiments e ON e.id = r.experiment_id "
                             "WHERE (r.start_ms < ? OR (r.start_ms = ? AND r.rowid < ?)) AND (? = '' OR e.name = ?) "
                             "AND (? = '' OR r.status = ?) ORDER BY r.start_ms DESC, r.rowid DESC LIMIT ?",
                             {after_start, after_start, after_row, query.experiment, query.experiment, query.status,
                              query.status, static_cast<std::int64_t>(page_size + 1)}));
    for (std::size_t index = 0; index < rows.size() && index < page_size; ++index) {
      SLIPWAY_ASSIGN_OR_RETURN(auto runs, read_runs(sql, "WHERE r.rowid = ?", {rows[index].integer(0)}));
      for (auto& run : runs) page.runs.push_back(std::move(run));
    }
    if (rows.size() > page_size) {
      const SqlRow& last = rows[page_size - 1];
      page.next_page_token = std::to_string(last.integer(1)) + "." + std::to_string(last.integer(0));
    }
    return {};
  }));
  return page;
}

Status RunStore::log_metrics(const std::string& run_id, const std::vector<std::pair<std::string, double>>& metrics,
                             std::int64_t step) {
  std::vector<MetricRecord> records;
  records.reserve(metrics.size());
  for (const auto& [key, value] : metrics) records.push_back({key, value, step, 0});
  return log_metric_steps(run_id, records);
}

Status RunStore::log_metric_steps(const std::string& run_id, const std::vector<MetricRecord>& records) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(require_running(sql, run_id, "metrics"));
    std::int64_t now = unix_time_ms();
    for (const auto& record : records) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO metrics(run_id, key, value, step, timestamp_ms) VALUES (?, ?, ?, ?, ?)",
                      {run_id, record.key, SqlValue::real_or_null(record.value), record.step,
                       record.timestamp_ms != 0 ? record.timestamp_ms : now})
              .status());
    }
    return {};
  });
}

Result<std::vector<MetricRecord>> RunStore::metric_history(const std::string& run_id) {
  std::vector<MetricRecord> records;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT key, value, step, timestamp_ms FROM metrics WHERE run_id = ? "
                                                  "ORDER BY key, step, rowid",
                                                  {run_id}));
    for (const auto& row : rows) records.push_back(read_metric_row(row));
    return {};
  }));
  return records;
}

Status RunStore::record_checkpoint(const std::string& run_id, std::int64_t step, const std::string& bundle_sha256) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(require_running(sql, run_id, "checkpoints"));
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO checkpoints(run_id, step, bundle_sha256, created_ms) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(run_id, step) DO UPDATE SET bundle_sha256 = excluded.bundle_sha256, "
                    "created_ms = excluded.created_ms",
                    {run_id, step, bundle_sha256, unix_time_ms()})
            .status());
    return append_audit(sql, *context_, "run.checkpoint",
                        run_id + " step=" + std::to_string(step) + " sha256=" + bundle_sha256);
  });
}

Result<std::optional<CheckpointRecord>> RunStore::latest_checkpoint(const std::string& run_id) {
  std::optional<CheckpointRecord> checkpoint;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT step, bundle_sha256, created_ms FROM checkpoints "
                                                     "WHERE run_id = ? ORDER BY step DESC LIMIT 1",
                                                     {run_id}));
    if (row) checkpoint = CheckpointRecord{row->integer(0), row->text(1), row->integer(2)};
    return {};
  }));
  return checkpoint;
}

Status RunStore::reopen(const std::string& run_id) {
  RunOwner owner = current_process_owner();
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(std::string status, run_status(sql, run_id));
    if (status == "FINISHED") return failed_precondition("run '" + run_id + "' has finished; nothing to resume");
    if (status == "RUNNING") {
      // Two processes training one run would race to finish it: the owner must be gone.
      SLIPWAY_ASSIGN_OR_RETURN(auto runs, read_runs(sql, "WHERE r.run_id = ?", {run_id}));
      const RunOwner& running = runs.empty() ? owner : runs.front().owner;
      if (running != owner && check_owner(running).state == OwnerState::kAlive) {
        return failed_precondition("run '" + run_id + "' is still running (process " + std::to_string(running.pid) +
                                   "); wait for it, or stop it before resuming");
      }
    }
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute(
               "UPDATE runs SET status = 'RUNNING', end_ms = NULL, " + std::string(kSetOwner) + " WHERE run_id = ?",
               {owner.pid, owner.start_ticks, owner.host, owner.boot_id, owner.pid_namespace, run_id})
            .status());
    return append_audit(sql, *context_, "run.resume", run_id + " was=" + status);
  });
}

Status RunStore::finish(const std::string& run_id, bool succeeded, const std::string& bundle_sha256) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(
        std::int64_t changed,
        sql.execute(
            "UPDATE runs SET status = ?, end_ms = ?, bundle_sha256 = ? WHERE run_id = ? AND status = 'RUNNING'",
            {succeeded ? "FINISHED" : "FAILED", unix_time_ms(), SqlValue::text_or_null(bundle_sha256), run_id}));
    if (changed != 1) return failed_precondition("run '" + run_id + "' is not running");
    return append_audit(sql, *context_, succeeded ? "run.finish" : "run.fail", run_id);
  });
}

Status RunStore::mark_interrupted(const std::string& run_id, const RunOwner& owner, const std::string& reason) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto runs, read_runs(sql, "WHERE r.run_id = ?", {run_id}));
    if (runs.empty()) return not_found("no run '" + run_id + "'");
    const RunRecord& run = runs.front();
    if (run.status != "RUNNING") return failed_precondition("run '" + run_id + "' is " + run.status + ", not RUNNING");
    const RunOwner& now = run.owner;
    if (now != owner) {
      return failed_precondition("run '" + run_id + "' was resumed by another process meanwhile");
    }
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("UPDATE runs SET status = 'INTERRUPTED', end_ms = ? WHERE run_id = ?", {unix_time_ms(), run_id})
            .status());
    return append_audit(sql, *context_, "run.interrupt", run_id + " " + reason);
  });
}

Result<RunRecord> RunStore::get(const std::string& run_id) {
  std::vector<RunRecord> runs;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(runs, read_runs(sql, "WHERE r.run_id = ?", {run_id}));
    return {};
  }));
  if (runs.empty()) return not_found("no run '" + run_id + "'; `slipway runs` lists them");
  return std::move(runs.front());
}

Result<std::vector<RunRecord>> RunStore::list(std::size_t limit) {
  std::vector<RunRecord> runs;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(runs, read_runs(sql, "ORDER BY r.start_ms DESC, r.rowid DESC LIMIT ?", {limit}));
    return {};
  }));
  return runs;
}

Result<std::vector<RunRecord>> RunStore::list_running() {
  std::vector<RunRecord> runs;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(runs, read_runs(sql, "WHERE r.status = 'RUNNING' ORDER BY r.start_ms, r.rowid", {}));
    return {};
  }));
  return runs;
}

Result<std::vector<ArtifactReference>> RunStore::artifact_references() {
  std::vector<ArtifactReference> references;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto bundles, sql.query("SELECT run_id, bundle_sha256 FROM runs "
                                                     "WHERE bundle_sha256 IS NOT NULL AND bundle_sha256 <> '' "
                                                     "ORDER BY rowid"));
    for (const auto& row : bundles) references.push_back({row.text(1), "run " + row.text(0) + " bundle"});
    SLIPWAY_ASSIGN_OR_RETURN(auto files, sql.query("SELECT run_id, path, sha256 FROM run_artifacts ORDER BY rowid"));
    for (const auto& row : files) references.push_back({row.text(2), "run " + row.text(0) + " file " + row.text(1)});
    SLIPWAY_ASSIGN_OR_RETURN(auto checkpoints,
                             sql.query("SELECT run_id, step, bundle_sha256 FROM checkpoints ORDER BY run_id, step"));
    for (const auto& row : checkpoints) {
      references.push_back({row.text(2), "run " + row.text(0) + " checkpoint " + std::to_string(row.integer(1))});
    }
    return {};
  }));
  return references;
}

Status RunStore::record_cached_step(const CachedStep& step) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    return sql
        .execute(
            "INSERT INTO step_cache(kind, key, run_id, result, created_ms) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(kind, key) DO UPDATE SET run_id = excluded.run_id, result = excluded.result, "
            "created_ms = excluded.created_ms",
            {step.kind, step.key, step.run_id, step.result, unix_time_ms()})
        .status();
  });
}

Result<std::optional<CachedStep>> RunStore::cached_step(const std::string& kind, const std::string& key) {
  std::optional<CachedStep> found;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(
        auto row,
        sql.query_row("SELECT run_id, result, created_ms FROM step_cache WHERE kind = ? AND key = ?", {kind, key}));
    if (row) found = CachedStep{kind, key, row->text(0), row->text(1), row->integer(2)};
    return {};
  }));
  return found;
}

Status RunStore::record_batch_job(const BatchJobRecord& job) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    std::int64_t now = unix_time_ms();
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO batch_jobs(key, model, bundle_sha256, input, input_sha256, out, state, rows, scored, "
                    "bad, started_ms, updated_ms, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET out = excluded.out, state = excluded.state, rows = excluded.rows, "
                    "scored = excluded.scored, bad = excluded.bad, updated_ms = excluded.updated_ms",
                    {job.key, job.model, job.bundle_sha256, job.input, job.input_sha256, job.out, job.state, job.rows,
                     job.scored, job.bad, job.started_ms, now, context_->actor})
            .status());
    return append_audit(sql, *context_, "batch." + job.state, job.model + " on " + job.input + " into " + job.out);
  });
}

Result<std::vector<BatchJobRecord>> RunStore::batch_jobs() {
  std::vector<BatchJobRecord> jobs;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(bool exists, sql.table_exists("batch_jobs"));
    if (!exists) return {};  // a workspace opened read-only before this slipway migrated it
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT key, model, bundle_sha256, input, input_sha256, out, state, "
                                                  "rows, scored, bad, started_ms, updated_ms, actor FROM batch_jobs "
                                                  "ORDER BY rowid"));  // first recorded first: pages stay put
    for (const auto& row : rows) {
      jobs.push_back({row.text(0), row.text(1), row.text(2), row.text(3), row.text(4), row.text(5), row.text(6),
                      row.integer(7), row.integer(8), row.integer(9), row.integer(10), row.integer(11), row.text(12)});
    }
    return {};
  }));
  return jobs;
}

void write_run_fields(JsonWriter& json, const RunRecord& run) {
  json.key("run_id").value(run.run_id).key("experiment").value(run.experiment);
  json.key("status").value(run.status).key("start_ms").value(run.start_ms).key("end_ms").value(run.end_ms);
  json.key("code_version").value(run.code_version).key("data_fingerprint").value(run.data_fingerprint);
  json.key("bundle_sha256").value(run.bundle_sha256).key("spec").value(run.spec);
  json.key("owner").begin_object().key("pid").value(run.owner.pid).key("host").value(run.owner.host).end_object();
  json.key("params").begin_object();
  for (const auto& [key, value] : run.params) json.key(key).value(value);
  json.end_object().key("metrics").begin_object();
  for (const auto& metric : run.metrics) json.key(metric.key).value(metric.value);
  json.end_object().key("tags").begin_object();
  for (const auto& [key, value] : run.tags) json.key(key).value(value);
  json.end_object().key("artifacts").begin_array();
  for (const auto& artifact : run.artifacts) {
    json.begin_object().key("path").value(artifact.path).key("sha256").value(artifact.sha256);
    json.key("size_bytes").value(artifact.size_bytes).key("created_ms").value(artifact.created_ms).end_object();
  }
  json.end_array();
}

}  // namespace slipway::registry
