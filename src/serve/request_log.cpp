#include "serve/request_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace slipway::serve {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kHourMs = 3'600'000;
// A segment not written to for this long is closed, and the retention looked at this often, so
// a quiet model neither holds a file open nor keeps old segments.
constexpr auto kHousekeeping = std::chrono::seconds(60);

std::size_t record_bytes(const RequestLog::Record& record) {
  return record.request.size() + record.response.size() + record.model.size() + record.endpoint.size() + 128;
}

}  // namespace

RequestLog::RequestLog(RequestLogOptions options) : options_(std::move(options)) {}

void RequestLog::start() {
  started_ = true;
  if (options_.directory.empty()) return;
  std::error_code error;
  fs::create_directories(options_.directory, error);
  usable_ = !error && fs::is_directory(options_.directory, error);
  if (usable_) fs::permissions(options_.directory, fs::perms::owner_all, fs::perm_options::replace, error);
  if (!usable_) {
    log_warn("the request log is off: cannot create " + options_.directory +
             (error ? ": " + error.message() : std::string()));
    return;
  }
  thread_ = std::thread([this] { run(); });
}

RequestLog::~RequestLog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool RequestLog::post(Record record) {
  std::size_t bytes = record_bytes(record);
  {
    std::lock_guard lock(mutex_);
    if (!started_) start();  // on the first record: a server that logs nothing writes nothing
    if (!usable_ || stopping_ || queued_bytes_ + bytes > options_.queue_bytes) {
      ++dropped_;
      return false;
    }
    queued_bytes_ += bytes;
    queue_.push_back(std::move(record));
  }
  wake_.notify_one();
  return true;
}

void RequestLog::run() {
  enforce_retention();
  std::deque<Record> batch;
  std::unique_lock lock(mutex_);
  while (true) {
    bool woken = wake_.wait_for(lock, kHousekeeping, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) break;
    batch.swap(queue_);
    std::size_t batch_bytes = queued_bytes_;
    lock.unlock();
    for (const auto& record : batch) write(record);
    batch.clear();
    for (auto& [model, segment] : segments_) std::fflush(segment.file);
    if (!woken) {
      // Quiet for a while: close idle segments and apply the retention.
      std::int64_t now = unix_time_ms();
      for (auto it = segments_.begin(); it != segments_.end();) {
        if (now - it->second.last_write_ms >= std::int64_t{5} * 60'000) {
          std::fclose(it->second.file);
          it = segments_.erase(it);
        } else {
          ++it;
        }
      }
      enforce_retention();
    }
    lock.lock();
    // Released only once written: the queue's budget bounds what is waiting and being written.
    queued_bytes_ -= batch_bytes;
  }
  for (auto& [model, segment] : segments_) std::fclose(segment.file);
  segments_.clear();
}

void RequestLog::write(const Record& record) {
  Segment& segment = segments_[record.model];
  std::int64_t hour = record.time_ms / kHourMs;
  // Small enough that the total stays near its budget with a segment open per model.
  std::size_t segment_limit = std::min(options_.segment_bytes, std::max<std::size_t>(options_.max_total_bytes / 16, 1));
  if (segment.file != nullptr && (segment.bytes >= segment_limit || segment.hour != hour)) {
    std::fclose(segment.file);
    segment = Segment{};
    enforce_retention();
  }
  if (segment.file == nullptr) {
    std::string folder = options_.directory + "/" + record.model;
    std::error_code error;
    fs::create_directories(folder, error);
    std::time_t seconds = static_cast<std::time_t>(record.time_ms / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    // Named so that names sort in time order: the reader and the retention rely on it.
    segment.path =
        fmt::format("{}/{:04}{:02}{:02}T{:02}{:02}{:02}-{:06}.jsonl", folder, utc.tm_year + 1900, utc.tm_mon + 1,
                    utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, ++sequence_ % 1'000'000);
    // Raw inputs are in it: readable by the server's user alone.
    int fd = ::open(segment.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    segment.file = fd < 0 ? nullptr : ::fdopen(fd, "a");
    if (segment.file == nullptr && fd >= 0) ::close(fd);
    segment.hour = hour;
    if (segment.file == nullptr) {
      ++dropped_;
      segments_.erase(record.model);
      return;
    }
  }
  JsonWriter json;
  json.begin_object().key("time_ms").value(record.time_ms).key("model").value(record.model);
  json.key("version").value(record.version).key("endpoint").value(record.endpoint);
  json.key("status").value(record.status).key("latency_ms").value(record.latency_ms);
  // The bodies are JSON already (the server parsed the request; it wrote the answer).
  json.key("request").raw(record.request.empty() ? std::string_view("null") : std::string_view(record.request));
  json.key("response").raw(record.response.empty() ? std::string_view("null") : std::string_view(record.response));
  json.end_object();
  std::string line = json.take();
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), segment.file) != line.size()) {
    ++dropped_;
    return;
  }
  segment.bytes += line.size();
  segment.last_write_ms = record.time_ms;
  bytes_on_disk_ += line.size();
  ++written_;
}

namespace {

// A segment's name, as write() makes them: yyyymmddThhmmss-nnnnnn.jsonl. Nothing else in the
// folder is ever deleted, whatever the folder was pointed at.
bool is_segment_name(const std::string& name) {
  if (name.size() != 28 || !name.ends_with(".jsonl") || name[8] != 'T' || name[15] != '-') return false;
  for (std::size_t index : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21}) {
    if (name[index] < '0' || name[index] > '9') return false;
  }
  return true;
}

}  // namespace

void RequestLog::enforce_retention() {
  struct Found {
    fs::path path;
    fs::file_time_type modified;
    std::uintmax_t bytes;
  };
  std::vector<Found> segments;
  std::error_code error;
  // Only <directory>/<model>/<segment>: never a walk through whatever else the folder holds, and
  // never an exception on this thread (an unreadable folder is skipped).
  fs::directory_iterator models(options_.directory, fs::directory_options::skip_permission_denied, error);
  for (; !error && models != fs::directory_iterator(); models.increment(error)) {
    if (!models->is_directory(error)) continue;
    std::error_code inner;
    fs::directory_iterator files(models->path(), fs::directory_options::skip_permission_denied, inner);
    for (; !inner && files != fs::directory_iterator(); files.increment(inner)) {
      if (!is_segment_name(files->path().filename().string())) continue;
      std::error_code stat;
      auto modified = files->last_write_time(stat);
      auto bytes = files->file_size(stat);
      if (!stat) segments.push_back({files->path(), modified, bytes});
    }
  }
  std::sort(segments.begin(), segments.end(), [](const Found& a, const Found& b) { return a.modified < b.modified; });
  std::uintmax_t total = 0;
  for (const auto& segment : segments) total += segment.bytes;
  auto cutoff = fs::file_time_type::clock::now() - options_.retention;
  for (const auto& segment : segments) {
    bool open = std::any_of(segments_.begin(), segments_.end(), [&](const auto& item) {
      return fs::path(item.second.path).lexically_normal() == segment.path.lexically_normal();
    });
    if (open || (segment.modified >= cutoff && total <= options_.max_total_bytes)) continue;
    if (fs::remove(segment.path, error)) total -= segment.bytes;
  }
  bytes_on_disk_ = total;
}

std::string RequestLog::metrics_text() const {
  if (written_ == 0 && dropped_ == 0) return "";
  std::string out;
  out +=
      "# HELP slipway_request_log_records_total Sampled requests written to the request log, or dropped (its queue "
      "was full, or a write failed).\n";
  out += "# TYPE slipway_request_log_records_total counter\n";
  out += "slipway_request_log_records_total{outcome=\"written\"} " + std::to_string(written_.load()) + "\n";
  out += "slipway_request_log_records_total{outcome=\"dropped\"} " + std::to_string(dropped_.load()) + "\n";
  out += "# HELP slipway_request_log_bytes Bytes of request log segments on disk.\n";
  out += "# TYPE slipway_request_log_bytes gauge\n";
  out += "slipway_request_log_bytes " + std::to_string(bytes_on_disk_.load()) + "\n";
  return out;
}

}  // namespace slipway::serve
