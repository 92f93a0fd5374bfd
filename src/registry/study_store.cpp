// Hyperparameter studies and their trials.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "registry/run_owner.h"
#include "registry/store_context.h"

namespace slipway::registry {
namespace {

constexpr std::string_view kTrialColumns =
    "number, state, run_id, message, retry_of, intermediate, rung_values, owner_pid, owner_start_ticks, owner_host, "
    "owner_boot_id, owner_pid_namespace, started_ms, finished_ms";

// Step -> value as "STEP VALUE" lines, values in a form strtod reads back exactly (nan, inf too).
std::string encode_steps(const std::map<std::int64_t, double>& steps) {
  std::string text;
  char buffer[64];
  for (const auto& [step, value] : steps) {
    std::snprintf(buffer, sizeof buffer, "%lld %.17g\n", static_cast<long long>(step), value);
    text += buffer;
  }
  return text;
}

std::map<std::int64_t, double> decode_steps(const std::string& text) {
  std::map<std::int64_t, double> steps;
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string line = text.substr(line_start, line_end - line_start);
    char* after_step = nullptr;
    long long step = std::strtoll(line.c_str(), &after_step, 10);
    if (after_step != line.c_str() && *after_step == ' ') steps[step] = std::strtod(after_step + 1, nullptr);
    line_start = line_end + 1;
  }
  return steps;
}

StudyTrial trial_of(const SqlRow& row) {
  StudyTrial trial;
  trial.number = row.integer(0);
  trial.state = row.text(1);
  trial.run_id = row.text(2);
  trial.message = row.text(3);
  trial.retry_of = row.integer(4);
  trial.intermediate = decode_steps(row.text(5));
  trial.rung_values = decode_steps(row.text(6));
  trial.owner = {row.integer(7), row.integer(8), row.text(9), row.text(10), row.text(11)};
  trial.started_ms = row.integer(12);
  trial.finished_ms = row.integer(13);
  return trial;
}

Result<std::vector<StudyTrial>> read_trials(SqlTransaction& sql, const std::string& study) {
  SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT " + std::string(kTrialColumns) +
                                                    " FROM study_trials WHERE study = ? ORDER BY number",
                                                {study}));
  std::vector<StudyTrial> trials;
  trials.reserve(rows.size());
  for (const auto& row : rows) trials.push_back(trial_of(row));
  // Trials are numbered 0, 1, 2, … without gaps: a number indexes the vector.
  auto by_number = [&](std::int64_t number) -> StudyTrial* {
    if (number < 0 || static_cast<std::size_t>(number) >= trials.size()) return nullptr;
    StudyTrial* trial = &trials[static_cast<std::size_t>(number)];
    return trial->number == number ? trial : nullptr;
  };
  SLIPWAY_ASSIGN_OR_RETURN(auto params,
                           sql.query("SELECT number, key, value FROM study_trial_params WHERE study = ?", {study}));
  for (const auto& row : params) {
    if (StudyTrial* trial = by_number(row.integer(0))) trial->params[row.text(1)] = row.text(2);
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto measures,
                           sql.query("SELECT number, key, value FROM study_trial_measures WHERE study = ?", {study}));
  for (const auto& row : measures) {
    if (StudyTrial* trial = by_number(row.integer(0))) trial->measures[row.text(1)] = row.real(2);
  }
  return trials;
}

Status check_study_exists(SqlTransaction& sql, const std::string& study) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT 1 FROM studies WHERE name = ?", {study}));
  if (!row) return not_found("no study named '" + study + "' (slipway studies lists them)");
  return {};
}

Result<std::string> running_trial_state(SqlTransaction& sql, const std::string& study, std::int64_t number) {
  SLIPWAY_ASSIGN_OR_RETURN(
      auto row, sql.query_row("SELECT state FROM study_trials WHERE study = ? AND number = ?", {study, number}));
  if (!row) return not_found("study '" + study + "' has no trial " + std::to_string(number));
  std::string state = row->text(0);
  if (state != "running") {
    return failed_precondition("trial " + std::to_string(number) + " of study '" + study + "' is already " + state);
  }
  return state;
}

// False on a workspace opened read-only before this slipway migrated it.
bool has_studies(SqlTransaction& sql) {
  auto exists = sql.table_exists("studies");
  return !exists.ok() || *exists;
}

}  // namespace

Status StudyStore::create(const StudyRecord& study, bool replace) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(study.name));
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto existing, sql.query_row("SELECT 1 FROM studies WHERE name = ?", {study.name}));
    if (existing && !replace) return already_exists("a study named '" + study.name + "' exists");
    if (existing) {
      for (std::string_view table : {"study_trial_params", "study_trial_measures", "study_trials"}) {
        SLIPWAY_RETURN_IF_ERROR(
            sql.execute("DELETE FROM " + std::string(table) + " WHERE study = ?", {study.name}).status());
      }
      SLIPWAY_RETURN_IF_ERROR(sql.execute("DELETE FROM studies WHERE name = ?", {study.name}).status());
    }
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO studies(name, definition, definition_sha256, created_ms, actor) "
                    "VALUES (?, ?, ?, ?, ?)",
                    {study.name, study.definition, study.definition_sha256, unix_time_ms(), context_->actor})
            .status());
    return append_audit(sql, *context_, existing ? "study.redefine" : "study.create", study.name);
  });
}

Result<std::optional<StudyRecord>> StudyStore::get(const std::string& name) {
  std::optional<StudyRecord> study;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    if (!has_studies(sql)) return {};
    SLIPWAY_ASSIGN_OR_RETURN(
        auto row,
        sql.query_row("SELECT name, definition, definition_sha256, created_ms, actor FROM studies WHERE name = ?",
                      {name}));
    if (row) study = StudyRecord{row->text(0), row->text(1), row->text(2), row->integer(3), row->text(4)};
    return {};
  }));
  return study;
}

Result<std::vector<StudySummary>> StudyStore::list() {
  std::vector<StudySummary> studies;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    if (!has_studies(sql)) return {};
    SLIPWAY_ASSIGN_OR_RETURN(
        auto rows,
        sql.query("SELECT name, definition, definition_sha256, created_ms, actor FROM studies ORDER BY name"));
    for (const auto& row : rows) {
      StudySummary summary;
      summary.study = {row.text(0), row.text(1), row.text(2), row.integer(3), row.text(4)};
      summary.updated_ms = summary.study.created_ms;
      studies.push_back(std::move(summary));
    }
    SLIPWAY_ASSIGN_OR_RETURN(auto counts, sql.query("SELECT study, state, count(*), max(max(started_ms, finished_ms)) "
                                                    "FROM study_trials GROUP BY study, state"));
    for (const auto& row : counts) {
      for (auto& summary : studies) {
        if (summary.study.name != row.text(0)) continue;
        summary.trials_by_state[row.text(1)] = row.integer(2);
        summary.updated_ms = std::max(summary.updated_ms, row.integer(3));
      }
    }
    return {};
  }));
  return studies;
}

Result<std::optional<StudyTrial>> StudyStore::claim_trial(const std::string& study, const TrialChooser& choose) {
  std::optional<StudyTrial> claimed;
  const RunOwner owner = current_process_owner();
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    claimed.reset();
    SLIPWAY_RETURN_IF_ERROR(check_study_exists(sql, study));
    SLIPWAY_ASSIGN_OR_RETURN(std::vector<StudyTrial> trials, read_trials(sql, study));
    SLIPWAY_ASSIGN_OR_RETURN(std::optional<TrialClaim> claim, choose(trials));
    if (!claim) return {};
    StudyTrial trial;
    trial.number = static_cast<std::int64_t>(trials.size());
    trial.state = "running";
    trial.params = std::move(claim->params);
    trial.retry_of = claim->retry_of;
    trial.owner = owner;
    trial.started_ms = unix_time_ms();
    SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO study_trials(study, " + std::string(kTrialColumns) +
                                            ") VALUES (?, ?, 'running', '', '', ?, '', '', ?, ?, ?, ?, ?, ?, 0)",
                                        {study, trial.number, trial.retry_of, owner.pid, owner.start_ticks, owner.host,
                                         owner.boot_id, owner.pid_namespace, trial.started_ms})
                                .status());
    for (const auto& [key, value] : trial.params) {
      SLIPWAY_RETURN_IF_ERROR(
          sql.execute("INSERT INTO study_trial_params(study, number, key, value) VALUES (?, ?, ?, ?)",
                      {study, trial.number, key, value})
              .status());
    }
    claimed = std::move(trial);
    return {};
  }));
  return claimed;
}

Status StudyStore::set_trial_run(const std::string& study, std::int64_t number, const std::string& run_id) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(running_trial_state(sql, study, number).status());
    return sql.execute("UPDATE study_trials SET run_id = ? WHERE study = ? AND number = ?", {run_id, study, number})
        .status();
  });
}

Status StudyStore::record_progress(const std::string& study, const StudyTrial& trial) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(running_trial_state(sql, study, trial.number).status());
    return sql
        .execute("UPDATE study_trials SET intermediate = ?, rung_values = ? WHERE study = ? AND number = ?",
                 {encode_steps(trial.intermediate), encode_steps(trial.rung_values), study, trial.number})
        .status();
  });
}

Status StudyStore::finish_trial(const std::string& study, const StudyTrial& trial) {
  if (trial.state != "complete" && trial.state != "pruned" && trial.state != "failed") {
    return invalid_argument("a trial ends complete, pruned or failed, not '" + trial.state + "'");
  }
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(running_trial_state(sql, study, trial.number).status());
    SLIPWAY_RETURN_IF_ERROR(sql.execute("UPDATE study_trials SET state = ?, run_id = ?, message = ?, intermediate = ?, "
                                        "rung_values = ?, finished_ms = ? WHERE study = ? AND number = ?",
                                        {trial.state, trial.run_id, trial.message, encode_steps(trial.intermediate),
                                         encode_steps(trial.rung_values), unix_time_ms(), study, trial.number})
                                .status());
    for (const auto& [key, value] : trial.measures) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO study_trial_measures(study, number, key, value) "
                                          "VALUES (?, ?, ?, ?) ON CONFLICT(study, number, key) DO UPDATE "
                                          "SET value = excluded.value",
                                          {study, trial.number, key, SqlValue::real_or_null(value)})
                                  .status());
    }
    return {};
  });
}

Result<std::vector<StudyTrial>> StudyStore::trials(const std::string& study) {
  std::vector<StudyTrial> trials;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    if (!has_studies(sql)) return not_found("no study named '" + study + "'");
    SLIPWAY_RETURN_IF_ERROR(check_study_exists(sql, study));
    SLIPWAY_ASSIGN_OR_RETURN(trials, read_trials(sql, study));
    return {};
  }));
  return trials;
}

Result<std::vector<std::int64_t>> StudyStore::fail_abandoned_trials(const std::string& study) {
  std::vector<std::int64_t> failed;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    failed.clear();
    SLIPWAY_RETURN_IF_ERROR(check_study_exists(sql, study));
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT " + std::string(kTrialColumns) +
                                                      " FROM study_trials WHERE study = ? AND state = 'running'",
                                                  {study}));
    for (const auto& row : rows) {
      StudyTrial trial = trial_of(row);
      OwnerCheck check = check_owner(trial.owner);
      if (check.state != OwnerState::kGone) continue;
      SLIPWAY_RETURN_IF_ERROR(sql.execute("UPDATE study_trials SET state = 'failed', message = ?, finished_ms = ? "
                                          "WHERE study = ? AND number = ?",
                                          {"interrupted: " + check.reason, unix_time_ms(), study, trial.number})
                                  .status());
      failed.push_back(trial.number);
    }
    if (failed.empty()) return {};
    return append_audit(sql, *context_, "study.trials_interrupted",
                        study + " " + std::to_string(failed.size()) + " trial(s)");
  }));
  return failed;
}

}  // namespace slipway::registry
