// The metadata backend: what the registry's stores need from a database, and nothing more.
// Private to the registry module.
//
// The stores (run_store.cpp, model_store.cpp, …) are written once against this interface, in the
// SQL that SQLite and PostgreSQL share: `?` placeholders, `INSERT … ON CONFLICT (…) DO NOTHING`
// or `DO UPDATE SET x = excluded.x` (never `INSERT OR …`), COALESCE, LIMIT. The one SQLite-ism
// they use is the implicit `rowid` of `runs` and `metrics` (insertion order); a PostgreSQL
// schema declares those tables with an explicit `rowid BIGSERIAL` column, so the same queries run.
//
// SQLite (sqlite_backend.cpp) is the only backend today. A PostgreSQL backend would be one more
// implementation: open a libpq connection (pool), rewrite `?` to `$1…`, run `write` bodies in a
// transaction that first takes `pg_advisory_xact_lock` (so writers are serialized as SQLite's
// BEGIN IMMEDIATE serializes them), map SQLSTATEs to Status codes, and provide its own DDL for
// the same numbered migrations (migrations.h). Registry::open would pick it from the workspace
// configuration; nothing above this interface changes.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "slipway/core.h"

namespace slipway::registry {

// A statement parameter. Text is a view: it must outlive the call it is passed to.
class SqlValue {
 public:
  using Variant = std::variant<std::monostate, std::int64_t, double, std::string_view>;

  SqlValue() = default;                                                  // NULL
  SqlValue(std::nullptr_t) {}                                            // NOLINT(google-explicit-constructor): NULL
  SqlValue(std::string_view text) : value_(text) {}                      // NOLINT(google-explicit-constructor)
  SqlValue(const std::string& text) : value_(std::string_view(text)) {}  // NOLINT(google-explicit-constructor)
  SqlValue(const char* text) : value_(std::string_view(text)) {}         // NOLINT(google-explicit-constructor)
  SqlValue(double number) : value_(number) {}                            // NOLINT(google-explicit-constructor)
  template <std::integral T>
  requires(!std::same_as<T, bool>) SqlValue(T number)
      : value_(static_cast<std::int64_t>(number)) {}  // NOLINT(google-explicit-constructor)

  // NULL for empty text (optional references such as a version's run id).
  static SqlValue text_or_null(std::string_view text) { return text.empty() ? SqlValue() : SqlValue(text); }
  // NULL for NaN and infinities, which SQL cannot store.
  static SqlValue real_or_null(double number);

  const Variant& get() const { return value_; }

 private:
  Variant value_;
};
using SqlParams = std::initializer_list<SqlValue>;

// One result row, copied out of the database.
class SqlRow {
 public:
  using Cell = std::variant<std::monostate, std::int64_t, double, std::string>;
  explicit SqlRow(std::vector<Cell> cells) : cells_(std::move(cells)) {}

  bool is_null(std::size_t column) const;
  std::string text(std::size_t column) const;      // "" for NULL
  std::int64_t integer(std::size_t column) const;  // 0 for NULL
  double real(std::size_t column) const;           // NaN for NULL

 private:
  std::vector<Cell> cells_;
};

// The statements of one transaction. Only valid inside the body it is passed to.
class SqlTransaction {
 public:
  virtual ~SqlTransaction() = default;
  // Runs one statement and returns every row it produces.
  virtual Result<std::vector<SqlRow>> query(std::string_view sql, SqlParams params = {}) = 0;
  // Runs one statement that returns no rows; returns how many rows it inserted, updated or deleted.
  virtual Result<std::int64_t> execute(std::string_view sql, SqlParams params = {}) = 0;
  // Runs several statements without parameters (migrations' DDL).
  virtual Status execute_script(std::string_view sql) = 0;
  virtual Result<bool> table_exists(std::string_view table) = 0;

  // The first row, or nullopt when there is none.
  Result<std::optional<SqlRow>> query_row(std::string_view sql, SqlParams params = {});
};

// A numbered schema change. Every backend lists the same versions with the same names, each with
// its own DDL.
struct Migration {
  std::int64_t version = 0;
  std::string_view name;
  std::string_view sql;
};

class MetadataBackend {
 public:
  using Body = std::function<Status(SqlTransaction&)>;

  virtual ~MetadataBackend() = default;
  // Runs `body` in a transaction that sees one consistent snapshot, then commits; an error from
  // `body` rolls it back and is returned. Bodies run one at a time per backend and must not call
  // read() or write() themselves. A backend may run `body` again after a serialization failure,
  // so a body has no effect outside the transaction.
  virtual Status read(const Body& body) = 0;
  // The same for a transaction that writes. Write transactions are serialized: no other writer
  // commits between a body's reads and its commit. FailedPrecondition on a read-only backend.
  virtual Status write(const Body& body) = 0;
  virtual bool read_only() const = 0;
  // The schema history in this backend's dialect, by ascending version (1, 2, …).
  virtual std::span<const Migration> migrations() const = 0;
  // The database's own consistency check; empty when it finds nothing.
  virtual Result<std::vector<std::string>> check_integrity() = 0;
};

struct SqliteOptions {
  bool create = false;
  bool read_only = false;
};
// Opens (or creates) the SQLite database at `path`: WAL, synchronous=FULL, foreign keys on, a
// 10 s busy timeout. read_only: SQLITE_OPEN_READONLY and query_only, falling back to an immutable
// read when the folder is not writable and no -wal file exists (see OpenOptions in registry.h).
Result<std::unique_ptr<MetadataBackend>> open_sqlite_backend(const std::string& path, const SqliteOptions& options);

// The SQLite schema history (sqlite_migrations.cpp).
std::span<const Migration> sqlite_migrations();

}  // namespace slipway::registry
