// slipway/core.h — the vocabulary every module shares: errors as values, hashing, JSON output,
// files written atomically, parallel loops, logging, clocks and configuration declarations.
//
// Nothing here depends on another Slipway module.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
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
  kPermissionDenied,    // the caller is known but may not do this (HTTP 403)
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
Status permission_denied(std::string message);
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

// `lhs` may be a declaration (`auto table`), so it cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SLIPWAY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// SLIPWAY_ASSIGN_OR_RETURN(auto table, read_csv(path));
#define SLIPWAY_ASSIGN_OR_RETURN(lhs, expr) \
  SLIPWAY_ASSIGN_OR_RETURN_IMPL(SLIPWAY_CONCAT(slipway_result_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)

// ---------------------------------------------------------------------------------------------
// Build identity.

std::string_view slipway_version();  // "0.1.0"
std::string_view
slipway_code_version();  // git commit of the build ("-dirty-HASH" with uncommitted changes), or "unknown"

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
// Equal strings, compared in time that depends only on their lengths (secrets: tokens, keys).
bool constant_time_equal(std::string_view left, std::string_view right);
std::string to_hex(std::span<const std::uint8_t> bytes);
// Hex digest of a file's bytes, streamed.
Result<std::string> sha256_file(const std::string& path);
// A random lowercase hex string of 2*byte_count characters (from the OS's entropy source).
std::string random_hex(std::size_t byte_count);

// ---------------------------------------------------------------------------------------------
// Files.

// An exclusive advisory lock (flock) on a file, created (mode 0600) if missing, held while the
// object lives: two processes never both hold it, and a killed holder releases it.
class FileLock {
 public:
  // The lock, or null while another process holds it.
  static Result<std::unique_ptr<FileLock>> try_acquire(const std::string& path);
  explicit FileLock(int descriptor) : descriptor_(descriptor) {}
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int descriptor_;
};

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

// Zeroed memory for large arrays read over and over, such as an LLM's weights and key/value
// cache: anonymous pages from a 2 MiB boundary, advised for transparent huge pages. A gigabyte of
// weights in 4 KiB pages takes a TLB miss on almost every panel a decode step streams; measured on
// a 1B Q4_0 model's one-thread decode, huge pages took it from 5-32 tokens/s (run to run, as the
// pages fell) to 40-44. Where the system has no transparent huge pages, the memory is as a
// vector's would be. Always from a 64-byte boundary (under AddressSanitizer, from the heap).
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Throws std::bad_alloc when the system refuses the memory. A moved-from buffer is empty.
  explicit HugePageBuffer(std::size_t bytes);
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  std::byte* data() { return static_cast<std::byte*>(address_); }
  const std::byte* data() const { return static_cast<const std::byte*>(address_); }
  std::size_t size() const { return size_; }
  // Backs every page now instead of at its first write (a pool that will be written whole: its
  // page faults paid at start, not by the requests that first reach each page). False when the
  // system cannot back them.
  bool commit();

 private:
  void release();
  void* address_ = nullptr;
  std::size_t size_ = 0, mapped_ = 0;
};

// What the kernel can give this process now without swapping or an OOM kill: MemAvailable from
// /proc/meminfo, within the room left under its cgroup's memory limit (v2's memory.max, v1's
// memory.limit_in_bytes); none where neither is known.
std::optional<std::uint64_t> available_memory_bytes();

// The whole file, read with read(2): a file that shrinks or grows while it is read is an Io error
// (never a SIGBUS, as a mapping would give). Pipes and devices are read to their end.
Result<std::string> read_file(const std::string& path);

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one, and a
// crash at any point leaves no partial file under `path`: temp file in the same folder, fsync,
// rename, fsync of the folder. On failure the temp file is removed. A symlink is written through
// to its target; a path that is empty, a directory, or an existing FIFO, device or socket is
// refused (InvalidArgument) rather than replaced.
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

// UTF-8 as Unicode defines it (table 3-7: no overlong forms, no surrogates, nothing past
// U+10FFFF). The length of the character at `at` (< text.size()), or 0 when the bytes there are
// not one.
std::size_t utf8_character_length(std::string_view text, std::size_t at);
bool is_valid_utf8(std::string_view text);

// Appends `text` as one CSV field: as it is, or quoted (quotes doubled) when it holds a comma,
// quote or line break.
void append_csv_field(std::string& out, std::string_view text);

// ---------------------------------------------------------------------------------------------
// Parallelism.

// Number of worker threads used by default: the hardware concurrency, at least 1.
int default_thread_count();

// Runs task(index) for index in [0, task_count) on up to `thread_count` threads and returns when
// all have finished. Tasks must not throw. Which thread runs which index is unspecified, so
// callers that need determinism make each task's result depend on its index only.
void parallel_for(std::size_t task_count, int thread_count, const std::function<void(std::size_t)>& task);

// A team of threads of its own for many short parallel loops in a row: an LLM forward pass runs
// about sixty per token, each a few tens of microseconds of work, where parallel_for's wake-up
// through a condition variable would cost as much as the work. Between loops the team's threads
// spin for a while (about a millisecond) before they sleep, so a loop that follows soon starts in
// well under a microsecond. A loop ends when its tasks are done, whether or not every thread got
// to it, so a thread the system has preempted (more threads than cores) delays no one.
class ThreadTeam {
 public:
  // `threads` counts the caller, which takes part in every loop (0: the cores this process may
  // use). Threads the system refuses to start leave a smaller team.
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const;
  // Runs task(index) for index in [0, task_count) and returns when all have finished. One thread
  // calls run() at a time, and not from inside a task. Tasks must not throw; which thread runs
  // which index is unspecified.
  void run(std::size_t task_count, const std::function<void(std::size_t)>& task);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The pause in a spinning wait's loop (x86's PAUSE, which frees the core's shared resources for
// its sibling thread; nothing elsewhere).
void cpu_relax();

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
// Points: files.before_rename, train.before_register, registry.before_commit, batch.after_part,
// retrain.after_train.

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

// ---------------------------------------------------------------------------------------------
// Configuration declarations. Every configuration (training parameters, serving config, ...) is
// declared once as a list of ConfigKeys (name, type, default, range, help) bound to the members
// of a typed struct; parsing, validation, `--help`, listings and the docs tables all come from
// that list. See src/serve/serving_config.cpp for an example.

enum class ConfigType {
  kInt,      // an integer in [minimum, maximum]; durations are integers in their unit
  kNumber,   // a finite number in [minimum, maximum]
  kBool,     // true/false (also on/off, yes/no, 1/0)
  kChoice,   // one of `choices` (with no choices: any text the caller checks itself)
  kText,     // any text
  kIntList,  // comma-separated integers, each in [minimum, maximum]
};

struct ConfigKey {
  std::string name;
  ConfigType type = ConfigType::kInt;
  // The default as text in the form apply() reads. ConfigSchema fills it from the struct's
  // default value when left empty.
  std::string default_value;
  double minimum = 0.0;              // inclusive; kInt, kNumber and every kIntList item
  double maximum = 0.0;              // inclusive
  std::vector<std::string> choices;  // kChoice
  std::string help;                  // one line
};

// "integer", "number", "boolean", "choice", "text", "integer list".
std::string_view config_type_name(ConfigType type);
// What the key accepts, in words: "0 to 1048576", "true or false", "onehot, ordinal", "any".
std::string config_allowed_text(const ConfigKey& key);
// OK when `text` is a value of `key`; otherwise InvalidArgument, one sentence naming the subject,
// key, value and what is allowed: "serving config 'instances' must be an integer from 1 to 64, not '0'".
Status check_config_value(std::string_view subject, const ConfigKey& key, std::string_view text);
// The InvalidArgument for a key that is not declared: lists the known keys and suggests the
// closest one ("unknown serving config key 'max_batch'; did you mean 'max_batch_size'? the keys are: ...").
Status unknown_config_key(std::string_view subject, std::string_view name, const std::vector<std::string>& known);
// The items with `separator` between them.
std::string join(const std::vector<std::string>& items, std::string_view separator);
// The name at the smallest edit distance from `typed` when it is at most a third of its length
// (and at least 2) away; nullopt when none is that close.
std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names);
// A Markdown table of the keys: key, type, default, allowed, description; one row per key.
std::string config_markdown_table(const std::vector<ConfigKey>& keys);
// The shortest decimal text that reads back as `number` (to_chars).
std::string format_config_number(double number);
// `text` as a finite number when it is exactly one (from_chars: no spaces, signs other than '-',
// hex, "nan" or "inf"); nullopt otherwise.
std::optional<double> parse_finite_number(std::string_view text);
// "30s", "500ms", "2m", "1h", "1.5d" or a bare number of seconds, as a person types a duration
// (a flag, a query parameter); `name` names it in the error. `longest_days`: the longest taken (a
// day for deadlines and test lengths, which keeps them far from the clock's range; monitoring
// windows may be longer).
Result<std::chrono::milliseconds> parse_duration(std::string_view name, std::string_view text, double longest_days = 1);

namespace config_detail {
// Parsers of text that check_config_value accepted.
std::int64_t parse_integer(std::string_view text);
double parse_number(std::string_view text);
bool parse_bool(std::string_view text);
std::vector<std::string> split_list(std::string_view text);  // on commas, items trimmed

template <typename T>
struct IsDuration : std::false_type {};
template <typename Rep, typename Period>
struct IsDuration<std::chrono::duration<Rep, Period>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// Text (already checked against `key`) into a member of type T, and back.
template <typename T>
void read_member(T& member, const ConfigKey& key, std::string_view text) {
  if constexpr (std::is_same_v<T, bool>) {
    member = parse_bool(text);
  } else if constexpr (std::is_enum_v<T>) {  // the enumerators follow key.choices
    for (std::size_t index = 0; index < key.choices.size(); ++index) {
      if (key.choices[index] == text) member = static_cast<T>(index);
    }
  } else if constexpr (std::is_integral_v<T>) {
    member = static_cast<T>(parse_integer(text));
  } else if constexpr (std::is_floating_point_v<T>) {
    member = static_cast<T>(parse_number(text));
  } else if constexpr (std::is_same_v<T, std::string>) {
    member = std::string(text);
  } else if constexpr (IsDuration<T>::value) {
    member = T(parse_integer(text));
  } else {
    static_assert(IsVector<T>::value && std::is_integral_v<typename T::value_type>, "unsupported member type");
    member.clear();
    for (const auto& item : split_list(text))
      member.push_back(static_cast<typename T::value_type>(parse_integer(item)));
  }
}

template <typename T>
std::string write_member(const T& member, const ConfigKey& key) {
  if constexpr (std::is_same_v<T, bool>) {
    return member ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return key.choices.at(static_cast<std::size_t>(member));
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(member);
  } else if constexpr (std::is_floating_point_v<T>) {
    return format_config_number(static_cast<double>(member));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return member;
  } else if constexpr (IsDuration<T>::value) {
    return std::to_string(member.count());
  } else {
    std::string out;
    for (const auto& item : member) out += (out.empty() ? "" : ",") + std::to_string(item);
    return out;
  }
}
}  // namespace config_detail

// A key bound to where its value lives in a Struct.
template <typename Struct>
struct ConfigField {
  ConfigKey key;
  std::function<void(Struct&, std::string_view text)> set;  // `text` already checked
  std::function<std::string(const Struct&)> get;
};

// Binds `key` to `member` (bool, enum following key.choices, integer, floating point,
// std::string, std::chrono::duration in its own unit, or std::vector of integers).
template <typename Struct, typename Member>
ConfigField<Struct> config_field(ConfigKey key, Member Struct::*member) {
  return {
      key,
      [member, key](Struct& target, std::string_view text) { config_detail::read_member(target.*member, key, text); },
      [member, key](const Struct& source) { return config_detail::write_member(source.*member, key); }};
}
// The same for a member of a nested struct: config_field(key, &Config::batching, &Batching::size).
template <typename Struct, typename Inner, typename Member>
ConfigField<Struct> config_field(ConfigKey key, Inner Struct::*inner, Member Inner::*member) {
  return {
      key,
      [inner, member, key](Struct& target, std::string_view text) {
        config_detail::read_member(target.*inner.*member, key, text);
      },
      [inner, member, key](const Struct& source) { return config_detail::write_member(source.*inner.*member, key); }};
}

// The declared keys of one configuration struct. Immutable after construction; safe to share
// between threads.
template <typename Struct>
class ConfigSchema {
 public:
  // `subject` names the configuration in messages ("serving config", "parameter"). Keys
  // without a default_value take it from `defaults`.
  ConfigSchema(std::string subject, std::vector<ConfigField<Struct>> fields, const Struct& defaults = Struct{})
      : subject_(std::move(subject)), fields_(std::move(fields)) {
    for (auto& field : fields_) {
      if (field.key.default_value.empty()) field.key.default_value = field.get(defaults);
    }
  }

  const std::string& subject() const { return subject_; }
  const std::vector<ConfigField<Struct>>& fields() const { return fields_; }
  std::vector<ConfigKey> keys() const {
    std::vector<ConfigKey> keys;
    for (const auto& field : fields_) keys.push_back(field.key);
    return keys;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> names;
    for (const auto& field : fields_) names.push_back(field.key.name);
    return names;
  }
  const ConfigField<Struct>* find(std::string_view name) const {
    for (const auto& field : fields_) {
      if (field.key.name == name) return &field;
    }
    return nullptr;
  }

  // Sets the members named in `values`. All or nothing: on an unknown key or a malformed or
  // out-of-range value returns InvalidArgument (see check_config_value, unknown_config_key) and
  // leaves `target` unchanged.
  Status apply(Struct& target, const std::map<std::string, std::string>& values) const {
    Struct updated = target;
    for (const auto& [name, text] : values) {
      const ConfigField<Struct>* field = find(name);
      if (field == nullptr) return unknown_config_key(subject_, name, names());
      Status valid = check_config_value(subject_, field->key, text);
      if (!valid.ok()) return valid;
      field->set(updated, text);
    }
    target = std::move(updated);
    return {};
  }
  // Every key with its value in `source`, as text apply() reads back to the same struct.
  std::map<std::string, std::string> values(const Struct& source) const {
    std::map<std::string, std::string> values;
    for (const auto& field : fields_) values[field.key.name] = field.get(source);
    return values;
  }
  // The struct with every declared default applied to Struct{}.
  Struct defaults() const {
    Struct result{};
    for (const auto& field : fields_) field.set(result, field.key.default_value);
    return result;
  }
  std::string markdown_table() const { return config_markdown_table(keys()); }

 private:
  std::string subject_;
  std::vector<ConfigField<Struct>> fields_;
};

}  // namespace slipway
