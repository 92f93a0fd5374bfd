// Helpers shared by the registry tests: raw SQL on a workspace's database, the schema as releases
// before numbered migrations created it, and child processes (a run's owner that dies; a reader
// without write permission).
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "slipway/core.h"

namespace slipway::registry::testing {

inline std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// Runs `sql` on the SQLite database at `path`; "" on success, else SQLite's message.
// `keep_wal`: close without checkpointing, leaving the transactions in the -wal file (as a writer
// that was killed would).
inline std::string exec_sql(const std::string& path, const std::string& sql, bool keep_wal = false) {
  sqlite3* database = nullptr;
  if (sqlite3_open_v2(path.c_str(), &database, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    std::string message = sqlite3_errmsg(database);
    sqlite3_close(database);
    return message;
  }
  if (keep_wal) sqlite3_db_config(database, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  char* error = nullptr;
  std::string message;
  if (sqlite3_exec(database, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) message = error ? error : "error";
  sqlite3_free(error);
  sqlite3_close(database);
  return message;
}

// The first column of the first row of `sql`, as text ("" when there is none).
inline std::string query_text(const std::string& path, const std::string& sql) {
  sqlite3* database = nullptr;
  std::string value;
  if (sqlite3_open_v2(path.c_str(), &database, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(database, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
        sqlite3_step(statement) == SQLITE_ROW && sqlite3_column_text(statement, 0) != nullptr) {
      value = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
    }
    sqlite3_finalize(statement);
  }
  sqlite3_close(database);
  return value;
}

// The schema exactly as releases before numbered migrations created it (src/registry/registry.cpp
// before schema_migrations), run on every open after `PRAGMA journal_mode=WAL; PRAGMA
// synchronous=FULL; PRAGMA foreign_keys=ON;`.
inline const std::string kPreMigrationSchema = R"sql(
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

// Creates `home` as a pre-migration release did: folders, then the database with `schema`.
inline std::string create_old_workspace(const std::string& home, const std::string& schema) {
  std::filesystem::create_directories(home + "/artifacts/sha256");
  return exec_sql(home + "/slipway.db",
                  "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;" + schema);
}

// slipway.db's bytes and modification time, to show a read-only open wrote nothing.
struct FileSnapshot {
  std::string bytes;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileSnapshot&) const = default;
};
inline FileSnapshot snapshot(const std::string& path) {
  struct stat info {};
  ::stat(path.c_str(), &info);
  return {read_file(path).value(),
          static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

// Runs `body` in a child process and returns its exit code (-1 if it did not exit normally). The
// parent must hold no open SQLite connection to the workspace: SQLite's lock bookkeeping must
// not cross a fork.
inline int run_in_child(const std::function<int()>& body) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(body());
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `body` as a user who may read `folder` (and its files) but not write them: as root
// (tests usually run as root, for whom permissions do not apply) in a child process switched to
// the user nobody; otherwise in this process, with the folder and its files made read-only for
// the time of the call. Returns body's result; 98 or 99 when the switch failed.
inline int run_without_write_access(const std::string& folder, const std::function<int()>& body) {
  if (::geteuid() == 0) {
    std::filesystem::permissions(folder, std::filesystem::perms(0755));
    return run_in_child([&] {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 99;
      return ::access(folder.c_str(), W_OK) == 0 ? 98 : body();
    });
  }
  auto set_writable = [&](bool writable) {
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.is_regular_file())
        std::filesystem::permissions(entry.path(), std::filesystem::perms(writable ? 0644 : 0444));
    }
    std::filesystem::permissions(folder, std::filesystem::perms(writable ? 0755 : 0555));
  };
  set_writable(false);
  int result = ::access(folder.c_str(), W_OK) == 0 ? 98 : body();
  set_writable(true);
  return result;
}

}  // namespace slipway::registry::testing
