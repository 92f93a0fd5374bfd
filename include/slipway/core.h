// slipway/core.h — the vocabulary every module shares: errors as values, hashing, JSON output,
// files written atomically, parallel loops, logging and clocks.
//
// Nothing here depends on another Slipway module.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace slipway {

// ---------------------------------------------------------------------------------------------
// Errors. Every fallible call across a module boundary returns Status or Result<T>; no exception
// crosses a module boundary. The message is one sentence a user can act on.

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (HTTP 400)
  kNotFound,            // a named thing does not exist (HTTP 404)
  kAlreadyExists,       // HTTP 409
  kFailedPrecondition,  // the state does not allow the call (HTTP 409)
  kDataLoss,            // stored bytes are corrupt (hash mismatch, truncated file)
  kUnavailable,         // try again later (HTTP 503)
  kResourceExhausted,   // a queue or budget is full; try again later (HTTP 429)
  kDeadlineExceeded,    // the request's time ran out before it was served (HTTP 503)
  kIo,                  // the operating system refused (file, socket)
  kInternal,            // a bug in Slipway (HTTP 500)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status invalid_argument(std::string message);
Status not_found(std::string message);
Status already_exists(std::string message);
Status failed_precondition(std::string message);
Status data_loss(std::string message);
Status unavailable(std::string message);
Status resource_exhausted(std::string message);
Status deadline_exceeded(std::string message);
Status io_error(std::string message);
Status internal_error(std::string message);

// A value or the Status that explains its absence. Accessing value() on an error is a bug.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : storage_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : storage_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(storage_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(storage_);
  }
  T& value() & { return std::get<T>(storage_); }
  const T& value() const& { return std::get<T>(storage_); }
  T&& value() && { return std::get<T>(std::move(storage_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> storage_;
};

#define SLIPWAY_CONCAT_INNER(a, b) a##b
#define SLIPWAY_CONCAT(a, b) SLIPWAY_CONCAT_INNER(a, b)

#define SLIPWAY_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::slipway::Status slipway_status_ = (expr);        \
    if (!slipway_status_.ok()) return slipway_status_; \
  } while (false)

#define SLIPWAY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// SLIPWAY_ASSIGN_OR_RETURN(auto table, read_csv(path));
#define SLIPWAY_ASSIGN_OR_RETURN(lhs, expr) \
  SLIPWAY_ASSIGN_OR_RETURN_IMPL(SLIPWAY_CONCAT(slipway_result_, __LINE__), lhs, expr)

// ---------------------------------------------------------------------------------------------
// Build identity.

std::string_view slipway_version();       // "0.1.0"
std::string_view slipway_code_version();  // git commit of the build, or "unknown"

// ---------------------------------------------------------------------------------------------
// Hashing.

// Incremental SHA-256. Used for bundle identity and data fingerprints.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  // Returns the 32-byte digest; the object must not be updated afterwards.
  std::array<std::uint8_t, 32> finish();

 private:
  void* context_;
};

std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);
std::string to_hex(std::span<const std::uint8_t> bytes);
// Hex digest of a file's bytes, streamed.
Result<std::string> sha256_file(const std::string& path);
// A random lowercase hex string of 2*byte_count characters (from the OS's entropy source).
std::string random_hex(std::size_t byte_count);

// ---------------------------------------------------------------------------------------------
// Files.

// A read-only memory mapping of a whole file. Empty files map to an empty span. Only for files
// nobody rewrites (content-addressed artifacts): touching a page of a file that another program
// truncated meanwhile raises SIGBUS. Read user-supplied files with read_file.
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::string_view text() const { return {static_cast<const char*>(address_), size_}; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(address_), size_}; }
  std::size_t size() const { return size_; }
  // open() advises sequential reads (one pass, then the pages may go). For a mapping kept and read
  // at random afterwards, as a loaded bundle's is: back to the kernel's normal readahead, and
  // touched pages count as used again, so they are not reclaimed before other memory.
  void advise_normal_access() const;

 private:
  void* address_ = nullptr;
  std::size_t size_ = 0;
};

// The whole file, read with read(2): a file that shrinks or grows while it is read is an Io error
// (never a SIGBUS, as a mapping would give). Pipes and devices are read to their end.
Result<std::string> read_file(const std::string& path);

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one, and a
// crash at any point leaves no partial file under `path`: temp file in the same folder, fsync,
// rename, fsync of the folder. On failure the temp file is removed.
Status write_file_atomic(const std::string& path, std::span<const std::byte> bytes);
Status write_file_atomic(const std::string& path, std::string_view text);

// Creates the folder and its parents; no error if it exists.
Status make_directories(const std::string& path);

// ---------------------------------------------------------------------------------------------
// JSON output. A small streaming writer: keys and values are escaped, numbers are written so
// they round-trip (NaN and infinities become null, which JSON lacks).

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(double number);
  JsonWriter& value(float number);
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(bool flag);
  JsonWriter& null();
  // Inserts already-serialized JSON as a value.
  JsonWriter& raw(std::string_view json);

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_in_scope_;
  bool after_key_ = false;
};

void append_json_string(std::string& out, std::string_view text);

// ---------------------------------------------------------------------------------------------
// Parallelism.

// Number of worker threads used by default: the hardware concurrency, at least 1.
int default_thread_count();

// Runs task(index) for index in [0, task_count) on up to `thread_count` threads and returns when
// all have finished. Tasks must not throw. Which thread runs which index is unspecified, so
// callers that need determinism make each task's result depend on its index only.
void parallel_for(std::size_t task_count, int thread_count, const std::function<void(std::size_t)>& task);

// ---------------------------------------------------------------------------------------------
// Logging (spdlog behind a thin front, so modules do not depend on it). Logs go to stderr so
// that --json output on stdout stays one document.

enum class LogLevel { kDebug, kInfo, kWarn, kError };
void set_log_level(LogLevel level);
void log(LogLevel level, std::string_view message);
inline void log_info(std::string_view message) { log(LogLevel::kInfo, message); }
inline void log_warn(std::string_view message) { log(LogLevel::kWarn, message); }
inline void log_error(std::string_view message) { log(LogLevel::kError, message); }

// ---------------------------------------------------------------------------------------------
// Crash testing. crash_point("name") kills the process with SIGKILL when the environment variable
// SLIPWAY_CRASH_AT equals "name" (read once, at the first call), so tests can stop Slipway at the
// worst moments of a write and check that nothing acknowledged was lost or half-written.
// Points: files.before_rename, train.before_register, registry.before_commit.

void crash_point(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Clocks.

std::int64_t unix_time_ms();
// Monotonic nanoseconds, for durations only.
std::int64_t monotonic_ns();

// A monotonic clock objects take by reference so tests can drive time (a fake clock in
// tests/support) instead of asserting wall-clock bounds. The batcher takes one; so will the LLM
// scheduler. Implementations are thread-safe.
class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  // Blocks on `condition` (with `lock` held on entry and exit) until it is notified or `deadline`
  // passes on this clock; may return early, so callers re-check their condition and now().
  virtual void wait_until(std::unique_lock<std::mutex>& lock, std::condition_variable& condition,
                          time_point deadline) const = 0;
};
// The real clock (std::chrono::steady_clock).
const Clock& steady_clock();

}  // namespace slipway
