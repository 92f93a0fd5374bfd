// RAII wrappers over the SQLite C API. Private to the registry module; the stores use them only
// through the metadata backend (sqlite_backend.cpp).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "slipway/core.h"

namespace slipway::registry {

class Database {
 public:
  // Opens `path` (a URI when flags include SQLITE_OPEN_URI) with the SQLITE_OPEN_* `flags`, with
  // extended result codes and a 10 s busy timeout. Sets no pragma: that is the caller's choice.
  static Result<Database> open(const std::string& path, int flags);
  Database() = default;
  Database(Database&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  sqlite3* handle() const { return handle_; }
  // Runs one or more statements without results.
  Status execute(std::string_view sql);
  // The last error as a Status: Unavailable for BUSY/LOCKED, AlreadyExists for a constraint,
  // FailedPrecondition for a read-only database, Io otherwise.
  Status error(std::string_view context) const;
  // Rows changed by the last INSERT, UPDATE or DELETE.
  int changes() const;

 private:
  sqlite3* handle_ = nullptr;
};

class Statement {
 public:
  Statement(const Database& database, std::string_view sql);
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Prepare errors surface here, so callers can chain binds and check once.
  const Status& prepare_status() const { return prepare_status_; }

  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, std::int64_t number);
  Statement& bind(int index, double number);
  Statement& bind_null(int index);

  // true: a row is available; false: done. Errors come back as Status.
  Result<bool> step();
  // Steps to completion, for statements without results.
  Status run();
  // Makes the statement ready to run again and clears its bindings.
  void reset();

  int column_count() const;
  int column_type(int column) const;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB or SQLITE_NULL
  std::string text(int column) const;
  std::int64_t integer(int column) const;
  double real(int column) const;
  bool is_null(int column) const;

 private:
  const Database& database_;
  sqlite3_stmt* statement_ = nullptr;
  Status prepare_status_;
};

}  // namespace slipway::registry
