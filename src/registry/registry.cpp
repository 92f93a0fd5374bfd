#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "registry/sqlite.h"
#include "slipway/registry.h"

namespace slipway::registry {
namespace {

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS experiments(
  id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  run_id TEXT PRIMARY KEY, experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  status TEXT NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER,
  code_version TEXT NOT NULL, data_fingerprint TEXT NOT NULL, spec TEXT NOT NULL, bundle_sha256 TEXT);
CREATE TABLE IF NOT EXISTS params(
  run_id TEXT NOT NULL REFERENCES runs(run_id), key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY(run_id, key));
CREATE TABLE IF NOT EXISTS metrics(
  run_id TEXT NOT NULL REFERENCES runs(run_id), key TEXT NOT NULL, value REAL,
  step INTEGER NOT NULL, timestamp_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics(run_id, key);
CREATE TABLE IF NOT EXISTS models(name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS model_versions(
  model TEXT NOT NULL REFERENCES models(name), version INTEGER NOT NULL,
  bundle_sha256 TEXT NOT NULL, run_id TEXT REFERENCES runs(run_id), creator TEXT NOT NULL,
  created_ms INTEGER NOT NULL, PRIMARY KEY(model, version));
CREATE TABLE IF NOT EXISTS aliases(
  model TEXT NOT NULL, alias TEXT NOT NULL, version INTEGER NOT NULL,
  PRIMARY KEY(model, alias), FOREIGN KEY(model, version) REFERENCES model_versions(model, version));
CREATE TABLE IF NOT EXISTS checkpoints(
  run_id TEXT NOT NULL REFERENCES runs(run_id), step INTEGER NOT NULL, bundle_sha256 TEXT NOT NULL,
  created_ms INTEGER NOT NULL, PRIMARY KEY(run_id, step));
CREATE TABLE IF NOT EXISTS audit_log(
  id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, actor TEXT NOT NULL,
  action TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS serving_configs(
  model TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(model, key));
CREATE TABLE IF NOT EXISTS api_tokens(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL, token_sha256 TEXT UNIQUE NOT NULL,
  created_ms INTEGER NOT NULL, revoked_ms INTEGER);
PRAGMA user_version = 1;
)sql";

std::string current_actor() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user != '\0') return user;
  passwd entry{};
  passwd* found = nullptr;
  std::array<char, 4096> buffer{};
  if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    return found->pw_name;
  return "uid:" + std::to_string(getuid());
}

bool valid_name_characters(const std::string& name) {
  if (name.empty() || name.size() > 128 || !std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

struct Registry::State {
  std::mutex mutex;
  Database database;
  std::string actor;

  Status audit(std::string_view action, std::string_view detail) {
    Statement insert(database, "INSERT INTO audit_log(time_ms, actor, action, detail) VALUES (?, ?, ?, ?)");
    insert.bind(1, unix_time_ms()).bind(2, actor).bind(3, action).bind(4, detail);
    return insert.run();
  }
};

Status validate_model_name(const std::string& name) {
  if (!valid_name_characters(name)) {
    return invalid_argument("invalid model name '" + name +
                            "': use 1 to 128 letters, digits, '_', '-' or '.', starting with a letter or digit");
  }
  return {};
}

Status validate_alias_name(const std::string& alias) {
  if (!valid_name_characters(alias) || all_digits(alias) || alias == "latest") {
    return invalid_argument("invalid alias '" + alias +
                            "': use letters, digits, '_', '-' or '.', not only digits, and not 'latest'");
  }
  return {};
}

Result<std::pair<std::string, VersionSelector>> parse_model_reference(const std::string& reference) {
  auto at = reference.find('@');
  std::string name = reference.substr(0, at);
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(name));
  VersionSelector selector;
  if (at != std::string::npos) {
    std::string which = reference.substr(at + 1);
    if (all_digits(which) && which.size() < 18) {
      selector.version = std::stoll(which);
    } else if (which != "latest") {
      SLIPWAY_RETURN_IF_ERROR(validate_alias_name(which));
      selector.alias = which;
    }
  }
  return std::make_pair(name, selector);
}

Registry::Registry(std::string home, std::unique_ptr<State> state)
    : home_(std::move(home)), artifacts_(home_ + "/artifacts"), state_(std::move(state)) {}

Registry::~Registry() = default;

Result<std::unique_ptr<Registry>> Registry::open(const std::string& home, bool create) {
  std::string database_path = home + "/slipway.db";
  std::error_code error;
  if (!create && !std::filesystem::exists(database_path, error)) {
    return not_found("no Slipway workspace at '" + home + "'; run `slipway init` there, or pass --home");
  }
  if (create) {
    SLIPWAY_RETURN_IF_ERROR(make_directories(home + "/artifacts/sha256"));
  }
  auto state = std::make_unique<State>();
  SLIPWAY_ASSIGN_OR_RETURN(state->database, Database::open(database_path, create));
  SLIPWAY_RETURN_IF_ERROR(state->database.execute(kSchema));
  state->actor = current_actor();
  return std::unique_ptr<Registry>(new Registry(home, std::move(state)));
}

Result<std::string> Registry::start_run(const NewRun& run) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  std::int64_t now = unix_time_ms();
  Statement experiment(database, "INSERT OR IGNORE INTO experiments(name, created_ms) VALUES (?, ?)");
  SLIPWAY_RETURN_IF_ERROR(experiment.bind(1, run.experiment).bind(2, now).run());
  std::string run_id = random_hex(16);
  Statement insert(database,
                   "INSERT INTO runs(run_id, experiment_id, status, start_ms, code_version, data_fingerprint, spec) "
                   "SELECT ?, id, 'RUNNING', ?, ?, ?, ? FROM experiments WHERE name = ?");
  insert.bind(1, run_id).bind(2, now).bind(3, run.code_version).bind(4, run.data_fingerprint).bind(5, run.spec);
  SLIPWAY_RETURN_IF_ERROR(insert.bind(6, run.experiment).run());
  for (const auto& [key, value] : run.params) {
    Statement param(database, "INSERT INTO params(run_id, key, value) VALUES (?, ?, ?)");
    SLIPWAY_RETURN_IF_ERROR(param.bind(1, run_id).bind(2, key).bind(3, value).run());
  }
  SLIPWAY_RETURN_IF_ERROR(state_->audit("run.start", run_id + " experiment=" + run.experiment));
  SLIPWAY_RETURN_IF_ERROR(transaction.commit());
  return run_id;
}

namespace {

Status require_running(Database& database, const std::string& run_id, std::string_view what) {
  Statement status(database, "SELECT status FROM runs WHERE run_id = ?");
  status.bind(1, run_id);
  SLIPWAY_ASSIGN_OR_RETURN(bool found, status.step());
  if (!found) return not_found("no run '" + run_id + "'");
  if (status.text(0) != "RUNNING") {
    return failed_precondition("run '" + run_id + "' has ended; " + std::string(what) + " cannot be added");
  }
  return {};
}

}  // namespace

Status Registry::log_metrics(const std::string& run_id, const std::vector<std::pair<std::string, double>>& metrics,
                             std::int64_t step) {
  std::vector<MetricRecord> records;
  for (const auto& [key, value] : metrics) records.push_back({key, value, step, 0});
  return log_metric_steps(run_id, records);
}

Status Registry::log_metric_steps(const std::string& run_id, const std::vector<MetricRecord>& records) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  SLIPWAY_RETURN_IF_ERROR(require_running(database, run_id, "metrics"));
  std::int64_t now = unix_time_ms();
  Statement insert(database, "INSERT INTO metrics(run_id, key, value, step, timestamp_ms) VALUES (?, ?, ?, ?, ?)");
  for (const auto& record : records) {
    insert.reset();
    insert.bind(1, run_id).bind(2, record.key);
    if (std::isfinite(record.value))
      insert.bind(3, record.value);
    else
      insert.bind_null(3);
    SLIPWAY_RETURN_IF_ERROR(insert.bind(4, record.step).bind(5, record.timestamp_ms != 0 ? record.timestamp_ms : now).run());
  }
  SLIPWAY_RETURN_IF_ERROR(transaction.commit());
  return {};
}

Result<std::vector<MetricRecord>> Registry::metric_history(const std::string& run_id) {
  std::lock_guard lock(state_->mutex);
  Statement select(state_->database,
                   "SELECT key, value, step, timestamp_ms FROM metrics WHERE run_id = ? ORDER BY key, step, rowid");
  select.bind(1, run_id);
  std::vector<MetricRecord> records;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, select.step());
    if (!has_row) break;
    records.push_back(
        {select.text(0), select.is_null(1) ? std::nan("") : select.real(1), select.integer(2), select.integer(3)});
  }
  return records;
}

Status Registry::record_checkpoint(const std::string& run_id, std::int64_t step, const std::string& bundle_sha256) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  SLIPWAY_RETURN_IF_ERROR(require_running(database, run_id, "checkpoints"));
  Statement insert(database,
                   "INSERT OR REPLACE INTO checkpoints(run_id, step, bundle_sha256, created_ms) VALUES (?, ?, ?, ?)");
  SLIPWAY_RETURN_IF_ERROR(insert.bind(1, run_id).bind(2, step).bind(3, bundle_sha256).bind(4, unix_time_ms()).run());
  SLIPWAY_RETURN_IF_ERROR(
      state_->audit("run.checkpoint", run_id + " step=" + std::to_string(step) + " sha256=" + bundle_sha256));
  return transaction.commit();
}

Result<std::optional<CheckpointRecord>> Registry::latest_checkpoint(const std::string& run_id) {
  std::lock_guard lock(state_->mutex);
  Statement select(state_->database,
                   "SELECT step, bundle_sha256, created_ms FROM checkpoints WHERE run_id = ? ORDER BY step DESC LIMIT 1");
  select.bind(1, run_id);
  SLIPWAY_ASSIGN_OR_RETURN(bool has_row, select.step());
  if (!has_row) return std::optional<CheckpointRecord>();
  return std::optional<CheckpointRecord>(CheckpointRecord{select.integer(0), select.text(1), select.integer(2)});
}

Status Registry::reopen_run(const std::string& run_id) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  Statement status(database, "SELECT status FROM runs WHERE run_id = ?");
  status.bind(1, run_id);
  SLIPWAY_ASSIGN_OR_RETURN(bool found, status.step());
  if (!found) return not_found("no run '" + run_id + "'");
  if (status.text(0) == "FINISHED") return failed_precondition("run '" + run_id + "' has finished; nothing to resume");
  Statement update(database, "UPDATE runs SET status = 'RUNNING', end_ms = NULL WHERE run_id = ?");
  SLIPWAY_RETURN_IF_ERROR(update.bind(1, run_id).run());
  SLIPWAY_RETURN_IF_ERROR(state_->audit("run.resume", run_id));
  return transaction.commit();
}

Status Registry::finish_run(const std::string& run_id, bool succeeded, const std::string& bundle_sha256) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  Statement update(database,
                   "UPDATE runs SET status = ?, end_ms = ?, bundle_sha256 = ? WHERE run_id = ? AND status = 'RUNNING'");
  update.bind(1, std::string_view(succeeded ? "FINISHED" : "FAILED")).bind(2, unix_time_ms());
  if (bundle_sha256.empty())
    update.bind_null(3);
  else
    update.bind(3, bundle_sha256);
  SLIPWAY_RETURN_IF_ERROR(update.bind(4, run_id).run());
  if (sqlite3_changes(database.handle()) != 1) return failed_precondition("run '" + run_id + "' is not running");
  SLIPWAY_RETURN_IF_ERROR(state_->audit(succeeded ? "run.finish" : "run.fail", run_id));
  return transaction.commit();
}

namespace {

Status fill_run_details(Database& database, RunRecord& run) {
  Statement params(database, "SELECT key, value FROM params WHERE run_id = ? ORDER BY key");
  params.bind(1, run.run_id);
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, params.step());
    if (!has_row) break;
    run.params[params.text(0)] = params.text(1);
  }
  // The latest value of each metric (ties: the highest, as MLflow does).
  Statement metrics(database,
                    "SELECT key, value, step, timestamp_ms FROM metrics m WHERE run_id = ? AND rowid = ("
                    "SELECT rowid FROM metrics WHERE run_id = m.run_id AND key = m.key "
                    "ORDER BY timestamp_ms DESC, step DESC, value DESC LIMIT 1) ORDER BY rowid");
  metrics.bind(1, run.run_id);
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, metrics.step());
    if (!has_row) break;
    run.metrics.push_back(
        {metrics.text(0), metrics.is_null(1) ? std::nan("") : metrics.real(1), metrics.integer(2), metrics.integer(3)});
  }
  return {};
}

constexpr std::string_view kRunColumns =
    "SELECT r.run_id, e.name, r.status, r.start_ms, r.end_ms, r.code_version, r.data_fingerprint, r.spec, "
    "r.bundle_sha256 FROM runs r JOIN experiments e ON e.id = r.experiment_id ";

RunRecord read_run_row(const Statement& row) {
  RunRecord run;
  run.run_id = row.text(0);
  run.experiment = row.text(1);
  run.status = row.text(2);
  run.start_ms = row.integer(3);
  run.end_ms = row.is_null(4) ? 0 : row.integer(4);
  run.code_version = row.text(5);
  run.data_fingerprint = row.text(6);
  run.spec = row.text(7);
  run.bundle_sha256 = row.text(8);
  return run;
}

}  // namespace

Result<RunRecord> Registry::get_run(const std::string& run_id) {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database, std::string(kRunColumns) + "WHERE r.run_id = ?");
  query.bind(1, run_id);
  SLIPWAY_ASSIGN_OR_RETURN(bool found, query.step());
  if (!found) return not_found("no run '" + run_id + "'; `slipway runs` lists them");
  RunRecord run = read_run_row(query);
  SLIPWAY_RETURN_IF_ERROR(fill_run_details(state_->database, run));
  return run;
}

Result<std::vector<RunRecord>> Registry::list_runs(std::size_t limit) {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database, std::string(kRunColumns) + "ORDER BY r.start_ms DESC, r.rowid DESC LIMIT ?");
  query.bind(1, static_cast<std::int64_t>(limit));
  std::vector<RunRecord> runs;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    runs.push_back(read_run_row(query));
  }
  for (auto& run : runs) SLIPWAY_RETURN_IF_ERROR(fill_run_details(state_->database, run));
  return runs;
}

Result<ModelVersion> Registry::register_version(const std::string& model, const std::string& bundle_sha256,
                                                const std::string& run_id) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  if (!artifacts_.contains(bundle_sha256)) {
    return failed_precondition("bundle " + bundle_sha256 +
                               " is not in the artifact store; store it before registering");
  }
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  std::int64_t now = unix_time_ms();
  Statement create(database, "INSERT OR IGNORE INTO models(name, created_ms) VALUES (?, ?)");
  SLIPWAY_RETURN_IF_ERROR(create.bind(1, model).bind(2, now).run());
  Statement next(database, "SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE model = ?");
  next.bind(1, model);
  SLIPWAY_ASSIGN_OR_RETURN(bool has_row, next.step());
  if (!has_row) return internal_error("could not compute the next version number");
  ModelVersion version;
  version.model = model;
  version.version = next.integer(0);
  version.bundle_sha256 = bundle_sha256;
  version.run_id = run_id;
  version.creator = state_->actor;
  version.created_ms = now;
  Statement insert(database,
                   "INSERT INTO model_versions(model, version, bundle_sha256, run_id, creator, created_ms) "
                   "VALUES (?, ?, ?, ?, ?, ?)");
  insert.bind(1, model).bind(2, version.version).bind(3, bundle_sha256);
  if (run_id.empty())
    insert.bind_null(4);
  else
    insert.bind(4, run_id);
  SLIPWAY_RETURN_IF_ERROR(insert.bind(5, version.creator).bind(6, now).run());
  SLIPWAY_RETURN_IF_ERROR(
      state_->audit("model.register", model + "@" + std::to_string(version.version) + " sha256=" + bundle_sha256));
  crash_point("registry.before_commit");
  SLIPWAY_RETURN_IF_ERROR(transaction.commit());
  return version;
}

Result<std::vector<ModelSummary>> Registry::list_models() {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database,
                  "SELECT m.name, m.created_ms, COALESCE(MAX(v.version), 0), COUNT(v.version) FROM models m "
                  "LEFT JOIN model_versions v ON v.model = m.name GROUP BY m.name ORDER BY m.name");
  std::vector<ModelSummary> models;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    models.push_back({query.text(0), query.integer(1), query.integer(2), query.integer(3), {}});
  }
  Statement aliases(state_->database, "SELECT model, alias, version FROM aliases ORDER BY model, alias");
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, aliases.step());
    if (!has_row) break;
    for (auto& summary : models) {
      if (summary.name == aliases.text(0)) summary.aliases[aliases.text(1)] = aliases.integer(2);
    }
  }
  return models;
}

Result<std::vector<ModelVersion>> Registry::list_versions(const std::string& model) {
  std::lock_guard lock(state_->mutex);
  Statement exists(state_->database, "SELECT 1 FROM models WHERE name = ?");
  exists.bind(1, model);
  SLIPWAY_ASSIGN_OR_RETURN(bool found, exists.step());
  if (!found) return not_found("no model named '" + model + "'; `slipway models` lists them");
  Statement query(state_->database,
                  "SELECT version, bundle_sha256, COALESCE(run_id, ''), creator, created_ms FROM model_versions "
                  "WHERE model = ? ORDER BY version");
  query.bind(1, model);
  std::vector<ModelVersion> versions;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    versions.push_back({model, query.integer(0), query.text(1), query.text(2), query.text(3), query.integer(4), {}});
  }
  Statement aliases(state_->database, "SELECT alias, version FROM aliases WHERE model = ? ORDER BY alias");
  aliases.bind(1, model);
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, aliases.step());
    if (!has_row) break;
    for (auto& version : versions) {
      if (version.version == aliases.integer(1)) version.aliases.push_back(aliases.text(0));
    }
  }
  return versions;
}

Result<ModelVersion> Registry::resolve(const std::string& model, const VersionSelector& selector) {
  SLIPWAY_ASSIGN_OR_RETURN(auto versions, list_versions(model));
  if (versions.empty()) return not_found("model '" + model + "' has no versions");
  if (selector.version) {
    for (const auto& version : versions) {
      if (version.version == *selector.version) return version;
    }
    return not_found("model '" + model + "' has no version " + std::to_string(*selector.version) + " (latest is " +
                     std::to_string(versions.back().version) + ")");
  }
  if (!selector.alias.empty()) {
    for (const auto& version : versions) {
      if (std::find(version.aliases.begin(), version.aliases.end(), selector.alias) != version.aliases.end())
        return version;
    }
    return not_found("model '" + model + "' has no alias '" + selector.alias + "'");
  }
  return versions.back();
}

Status Registry::set_alias(const std::string& model, const std::string& alias, std::int64_t version) {
  SLIPWAY_RETURN_IF_ERROR(validate_alias_name(alias));
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  Statement exists(database, "SELECT 1 FROM model_versions WHERE model = ? AND version = ?");
  exists.bind(1, model).bind(2, version);
  SLIPWAY_ASSIGN_OR_RETURN(bool found, exists.step());
  if (!found) return not_found("model '" + model + "' has no version " + std::to_string(version));
  Statement upsert(database,
                   "INSERT INTO aliases(model, alias, version) VALUES (?, ?, ?) "
                   "ON CONFLICT(model, alias) DO UPDATE SET version = excluded.version");
  SLIPWAY_RETURN_IF_ERROR(upsert.bind(1, model).bind(2, alias).bind(3, version).run());
  SLIPWAY_RETURN_IF_ERROR(state_->audit("alias.set", model + "@" + alias + " -> " + std::to_string(version)));
  return transaction.commit();
}

Status Registry::set_serving_config(const std::string& model, const std::map<std::string, std::string>& values,
                                    bool replace) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  if (replace) {
    Statement clear(database, "DELETE FROM serving_configs WHERE model = ?");
    SLIPWAY_RETURN_IF_ERROR(clear.bind(1, model).run());
  }
  std::string detail = model;
  for (const auto& [key, value] : values) {
    Statement upsert(database,
                     "INSERT INTO serving_configs(model, key, value) VALUES (?, ?, ?) "
                     "ON CONFLICT(model, key) DO UPDATE SET value = excluded.value");
    SLIPWAY_RETURN_IF_ERROR(upsert.bind(1, model).bind(2, key).bind(3, value).run());
    detail += " " + key + "=" + value;
  }
  SLIPWAY_RETURN_IF_ERROR(state_->audit(replace ? "serving_config.replace" : "serving_config.set", detail));
  return transaction.commit();
}

Result<std::map<std::string, std::string>> Registry::serving_config(const std::string& model) {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database, "SELECT key, value FROM serving_configs WHERE model = ? ORDER BY key");
  query.bind(1, model);
  std::map<std::string, std::string> values;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    values[query.text(0)] = query.text(1);
  }
  return values;
}

Status validate_token_role(const std::string& role) {
  if (role != "predict" && role != "deploy" && role != "admin") {
    return invalid_argument("unknown role '" + role + "'; roles are predict, deploy and admin");
  }
  return {};
}

Result<NewToken> Registry::create_token(const std::string& name, const std::string& role) {
  SLIPWAY_RETURN_IF_ERROR(validate_token_role(role));
  if (name.empty() || name.size() > 128) return invalid_argument("a token needs a name of 1 to 128 characters");
  NewToken token;
  token.id = random_hex(6);
  // 32 random bytes: guessing is hopeless, so an unsalted hash is a sound way to store it.
  token.secret = "slw_" + token.id + "_" + random_hex(32);
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  Statement insert(database,
                   "INSERT INTO api_tokens(id, name, role, token_sha256, created_ms) VALUES (?, ?, ?, ?, ?)");
  insert.bind(1, token.id).bind(2, name).bind(3, role).bind(4, sha256_hex(token.secret)).bind(5, unix_time_ms());
  SLIPWAY_RETURN_IF_ERROR(insert.run());
  SLIPWAY_RETURN_IF_ERROR(state_->audit("token.create", token.id + " name=" + name + " role=" + role));
  SLIPWAY_RETURN_IF_ERROR(transaction.commit());
  return token;
}

Status Registry::revoke_token(const std::string& id) {
  std::lock_guard lock(state_->mutex);
  Database& database = state_->database;
  Transaction transaction(database);
  SLIPWAY_RETURN_IF_ERROR(transaction.begin_status());
  Statement revoke(database, "UPDATE api_tokens SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL");
  SLIPWAY_RETURN_IF_ERROR(revoke.bind(1, unix_time_ms()).bind(2, id).run());
  if (database.changes() == 0) return not_found("no active token with id '" + id + "'");
  SLIPWAY_RETURN_IF_ERROR(state_->audit("token.revoke", id));
  return transaction.commit();
}

Result<std::vector<TokenRecord>> Registry::list_tokens() {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database,
                  "SELECT id, name, role, token_sha256, created_ms, COALESCE(revoked_ms, 0) FROM api_tokens "
                  "ORDER BY created_ms, id");
  std::vector<TokenRecord> tokens;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    tokens.push_back({query.text(0), query.text(1), query.text(2), query.text(3), query.integer(4), query.integer(5)});
  }
  return tokens;
}

Result<std::vector<std::string>> Registry::audit_log() {
  std::lock_guard lock(state_->mutex);
  Statement query(state_->database, "SELECT time_ms, actor, action, detail FROM audit_log ORDER BY id");
  std::vector<std::string> entries;
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, query.step());
    if (!has_row) break;
    entries.push_back(std::to_string(query.integer(0)) + " " + query.text(1) + " " + query.text(2) + " " +
                      query.text(3));
  }
  return entries;
}

}  // namespace slipway::registry
