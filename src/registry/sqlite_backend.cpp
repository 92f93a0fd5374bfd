// The SQLite metadata backend: one connection behind a mutex, prepared statements cached per SQL
// text, write transactions as BEGIN IMMEDIATE (so writers are serialized by SQLite's lock).
//
// Read-only opens and WAL. A connection opened with SQLITE_OPEN_READONLY reads a WAL database
// through its `-shm` index (and `-wal` log). What SQLite 3.40 does, measured:
// - folder writable, no -wal/-shm (the last writer closed cleanly): the reader creates an empty
//   `-wal` and a 32 KiB `-shm`, and leaves them when it closes (a reader may not checkpoint);
//   slipway.db is not touched. The next writer reuses and removes them.
// - -wal and -shm present, not writable by the reader: it reads (heap-memory index).
// - folder not writable, no -wal/-shm: the first read fails (SQLITE_READONLY_CANTINIT). With no
//   -wal file every committed transaction is in slipway.db and no writer is active (a WAL writer
//   keeps -wal while it has the database open), so we reopen it as `immutable=1`, which reads the
//   file alone and takes no locks.
// - folder not writable, a non-empty -wal but no -shm (a writer was killed, then the workspace
//   became read-only): SQLITE_CANTOPEN. An immutable read would miss the transactions in -wal,
//   so this is an error telling the user to open the workspace once with write access.
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "registry/metadata_backend.h"
#include "registry/sqlite.h"

namespace slipway::registry {
namespace {

// `path` as an SQLite URI filename ("file:/abs/path"), percent-encoding what a URI reserves.
std::string file_uri(const std::string& path) {
  std::string absolute = std::filesystem::absolute(path).lexically_normal().string();
  std::string uri = "file:";
  constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : absolute) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += kHex[c >> 4];
      uri += kHex[c & 15];
    }
  }
  return uri;
}

void bind_value(Statement& statement, int index, const SqlValue& value) {
  const SqlValue::Variant& variant = value.get();
  if (const auto* integer = std::get_if<std::int64_t>(&variant)) {
    statement.bind(index, *integer);
  } else if (const auto* real = std::get_if<double>(&variant)) {
    statement.bind(index, *real);
  } else if (const auto* text = std::get_if<std::string_view>(&variant)) {
    statement.bind(index, *text);
  } else {
    statement.bind_null(index);
  }
}

class SqliteBackend;

class SqliteTransaction final : public SqlTransaction {
 public:
  explicit SqliteTransaction(SqliteBackend& backend) : backend_(backend) {}
  Result<std::vector<SqlRow>> query(std::string_view sql, SqlParams params) override;
  Result<std::int64_t> execute(std::string_view sql, SqlParams params) override;
  Status execute_script(std::string_view sql) override;
  Result<bool> table_exists(std::string_view table) override;

 private:
  // Runs the cached statement for `sql` with `params`, passing each row to `on_row`.
  template <typename OnRow>
  Status run(std::string_view sql, SqlParams params, OnRow&& on_row);

  SqliteBackend& backend_;
};

class SqliteBackend final : public MetadataBackend {
 public:
  SqliteBackend(Database database, bool read_only) : database_(std::move(database)), read_only_(read_only) {}

  Status read(const Body& body) override { return run(body, "BEGIN"); }
  Status write(const Body& body) override {
    if (read_only_) {
      return failed_precondition("the workspace was opened read-only, so its metadata cannot be changed");
    }
    return run(body, "BEGIN IMMEDIATE");
  }
  bool read_only() const override { return read_only_; }
  std::span<const Migration> migrations() const override { return sqlite_migrations(); }

  Result<std::vector<std::string>> check_integrity() override {
    std::vector<std::string> problems;
    SLIPWAY_RETURN_IF_ERROR(read([&](SqlTransaction& sql) -> Status {
      SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("PRAGMA quick_check"));
      for (const auto& row : rows) {
        if (row.text(0) != "ok") problems.push_back(row.text(0));
      }
      return {};
    }));
    return problems;
  }

  Database& database() { return database_; }
  // The prepared statement for `sql`, prepared on first use.
  Statement& prepared(std::string_view sql) {
    auto [entry, inserted] = statements_.try_emplace(std::string(sql));
    if (inserted || !entry->second->prepare_status().ok()) {
      entry->second = std::make_unique<Statement>(database_, sql);
    }
    return *entry->second;
  }

 private:
  Status run(const Body& body, std::string_view begin) {
    std::lock_guard lock(mutex_);
    SLIPWAY_RETURN_IF_ERROR(database_.execute(begin));
    SqliteTransaction transaction(*this);
    Status status = body(transaction);
    if (status.ok()) status = database_.execute("COMMIT");
    if (!status.ok() && sqlite3_get_autocommit(database_.handle()) == 0) (void)database_.execute("ROLLBACK");
    return status;
  }

  std::mutex mutex_;
  Database database_;
  // Declared after the database, so statements are finalized before it closes.
  std::unordered_map<std::string, std::unique_ptr<Statement>> statements_;
  bool read_only_;
};

template <typename OnRow>
Status SqliteTransaction::run(std::string_view sql, SqlParams params, OnRow&& on_row) {
  Statement& statement = backend_.prepared(sql);
  SLIPWAY_RETURN_IF_ERROR(statement.prepare_status());
  int index = 1;
  for (const SqlValue& value : params) bind_value(statement, index++, value);
  Status status;
  while (status.ok()) {
    auto has_row = statement.step();
    if (!has_row.ok()) {
      status = has_row.status();
    } else if (!*has_row) {
      break;
    } else {
      on_row(statement);
    }
  }
  statement.reset();
  return status;
}

Result<std::vector<SqlRow>> SqliteTransaction::query(std::string_view sql, SqlParams params) {
  std::vector<SqlRow> rows;
  SLIPWAY_RETURN_IF_ERROR(run(sql, params, [&](const Statement& statement) {
    std::vector<SqlRow::Cell> cells(static_cast<std::size_t>(statement.column_count()));
    for (int column = 0; column < statement.column_count(); ++column) {
      auto& cell = cells[static_cast<std::size_t>(column)];
      switch (statement.column_type(column)) {
        case SQLITE_INTEGER:
          cell = statement.integer(column);
          break;
        case SQLITE_FLOAT:
          cell = statement.real(column);
          break;
        case SQLITE_NULL:
          break;
        default:
          cell = statement.text(column);
      }
    }
    rows.emplace_back(std::move(cells));
  }));
  return rows;
}

Result<std::int64_t> SqliteTransaction::execute(std::string_view sql, SqlParams params) {
  SLIPWAY_RETURN_IF_ERROR(run(sql, params, [](const Statement&) {}));
  return static_cast<std::int64_t>(backend_.database().changes());
}

Status SqliteTransaction::execute_script(std::string_view sql) { return backend_.database().execute(sql); }

Result<bool> SqliteTransaction::table_exists(std::string_view table) {
  SLIPWAY_ASSIGN_OR_RETURN(auto row,
                           query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", {table}));
  return row.has_value();
}

// Opens read-only and reads the schema once, so a database SQLite cannot read shows here. On
// failure `code` is SQLite's primary result code.
Result<Database> open_and_probe(const std::string& name, int flags, int& code) {
  code = SQLITE_OK;
  SLIPWAY_ASSIGN_OR_RETURN(Database database, Database::open(name, flags | SQLITE_OPEN_READONLY));
  Status probed = database.execute("PRAGMA query_only = 1; PRAGMA foreign_keys = ON;");
  if (probed.ok()) probed = database.execute("SELECT count(*) FROM sqlite_master");
  if (probed.ok()) return database;
  code = sqlite3_errcode(database.handle()) & 0xff;
  return probed;
}

Result<Database> open_read_only(const std::string& path) {
  int code = SQLITE_OK;
  auto database = open_and_probe(path, SQLITE_OPEN_FULLMUTEX, code);
  // Only a WAL index SQLite could not set up has a way around; a corrupt file, say, stays an error.
  if (database.ok() || (code != SQLITE_READONLY && code != SQLITE_CANTOPEN)) return database;
  std::error_code error;
  std::string wal = path + "-wal";
  if (std::filesystem::exists(wal, error) && std::filesystem::file_size(wal, error) > 0) {
    return failed_precondition("cannot read '" + path + "' read-only: its write-ahead log (" +
                               std::filesystem::path(wal).filename().string() +
                               ") holds changes not yet in the database, and SQLite cannot index them because the "
                               "folder is not writable; run a slipway command that writes (e.g. `slipway verify "
                               "--repair`) once with write access");
  }
  log(LogLevel::kDebug, "reading " + path + " as immutable: its folder is not writable and no writer is active");
  return open_and_probe(file_uri(path) + "?immutable=1", SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_URI, code);
}

}  // namespace

Result<std::unique_ptr<MetadataBackend>> open_sqlite_backend(const std::string& path, const SqliteOptions& options) {
  if (options.read_only) {
    SLIPWAY_ASSIGN_OR_RETURN(Database database, open_read_only(path));
    return std::unique_ptr<MetadataBackend>(std::make_unique<SqliteBackend>(std::move(database), true));
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (options.create ? SQLITE_OPEN_CREATE : 0);
  SLIPWAY_ASSIGN_OR_RETURN(Database database, Database::open(path, flags));
  // SQLite opens a file it may not write read-only without a word; say so now, not at the first write.
  if (sqlite3_db_readonly(database.handle(), "main") == 1) {
    return failed_precondition("cannot write the metadata store '" + path +
                               "': no write permission; commands that only read (models, versions, runs, show, "
                               "eval, predict, serve) still work");
  }
  // journal_mode=WAL writes only when the database is not in WAL mode yet (a new one).
  SLIPWAY_RETURN_IF_ERROR(
      database.execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"));
  return std::unique_ptr<MetadataBackend>(std::make_unique<SqliteBackend>(std::move(database), false));
}

}  // namespace slipway::registry
