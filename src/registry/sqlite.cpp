#include "registry/sqlite.h"

namespace slipway::registry {

Result<Database> Database::open(const std::string& path, int flags) {
  Database database;
  if (sqlite3_open_v2(path.c_str(), &database.handle_, flags, nullptr) != SQLITE_OK) {
    std::string message = database.handle_ ? sqlite3_errmsg(database.handle_) : "out of memory";
    return io_error("cannot open the metadata store '" + path + "': " + message);
  }
  sqlite3_extended_result_codes(database.handle_, 1);
  sqlite3_busy_timeout(database.handle_, 10000);
  return database;
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) sqlite3_close_v2(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Database::~Database() {
  if (handle_ != nullptr) sqlite3_close_v2(handle_);
}

int Database::changes() const { return sqlite3_changes(handle_); }

Status Database::execute(std::string_view sql) {
  char* message = nullptr;
  std::string owned(sql);
  if (sqlite3_exec(handle_, owned.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    sqlite3_free(message);
    // Name the statement by its first line, e.g. "running 'ALTER TABLE runs ADD COLUMN owner_pid INTEGER'".
    std::size_t begin = owned.find_first_not_of(" \n");
    std::string first =
        begin == std::string::npos ? "" : owned.substr(begin, owned.find_first_of(";\n", begin) - begin);
    return error("running '" + first.substr(0, 80) + "'");
  }
  return {};
}

Status Database::error(std::string_view context) const {
  int code = sqlite3_errcode(handle_) & 0xff;  // the primary code of an extended one
  std::string message = "metadata store error while " + std::string(context) + ": " + sqlite3_errmsg(handle_);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) return unavailable(message);
  if (code == SQLITE_CONSTRAINT) return already_exists(message);
  if (code == SQLITE_READONLY) return failed_precondition(message);
  return io_error(message);
}

Statement::Statement(const Database& database, std::string_view sql) : database_(database) {
  if (sqlite3_prepare_v2(database.handle(), sql.data(), static_cast<int>(sql.size()), &statement_, nullptr) !=
      SQLITE_OK) {
    prepare_status_ = database.error("preparing a statement");
  }
}

Statement::~Statement() { sqlite3_finalize(statement_); }

Statement& Statement::bind(int index, std::string_view text) {
  sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::bind(int index, std::int64_t number) {
  sqlite3_bind_int64(statement_, index, number);
  return *this;
}

Statement& Statement::bind(int index, double number) {
  sqlite3_bind_double(statement_, index, number);
  return *this;
}

Statement& Statement::bind_null(int index) {
  sqlite3_bind_null(statement_, index);
  return *this;
}

Result<bool> Statement::step() {
  if (!prepare_status_.ok()) return prepare_status_;
  int code = sqlite3_step(statement_);
  if (code == SQLITE_ROW) return true;
  if (code == SQLITE_DONE) return false;
  return database_.error("running a statement");
}

void Statement::reset() {
  if (statement_ == nullptr) return;
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
}

Status Statement::run() {
  while (true) {
    SLIPWAY_ASSIGN_OR_RETURN(bool has_row, step());
    if (!has_row) return {};
  }
}

int Statement::column_count() const { return sqlite3_column_count(statement_); }
int Statement::column_type(int column) const { return sqlite3_column_type(statement_, column); }

std::string Statement::text(int column) const {
  const auto* value = sqlite3_column_text(statement_, column);
  int size = sqlite3_column_bytes(statement_, column);
  return value == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(value), size);
}

std::int64_t Statement::integer(int column) const { return sqlite3_column_int64(statement_, column); }
double Statement::real(int column) const { return sqlite3_column_double(statement_, column); }
bool Statement::is_null(int column) const { return sqlite3_column_type(statement_, column) == SQLITE_NULL; }

}  // namespace slipway::registry
