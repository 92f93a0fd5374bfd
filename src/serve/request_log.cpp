#include "serve/request_log.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

namespace slipway::serve {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kHourMs = 3'600'000;

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
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) break;
    batch.swap(queue_);
    queued_bytes_ = 0;
    lock.unlock();
    for (const auto& record : batch) write(record);
    batch.clear();
    for (auto& [model, segment] : segments_) std::fflush(segment.file);
    lock.lock();
  }
  for (auto& [model, segment] : segments_) std::fclose(segment.file);
  segments_.clear();
}

void RequestLog::write(const Record& record) {
  Segment& segment = segments_[record.model];
  std::int64_t hour = record.time_ms / kHourMs;
  if (segment.file != nullptr && (segment.bytes >= options_.segment_bytes || segment.hour != hour)) {
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
    segment.file = std::fopen(segment.path.c_str(), "ae");
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
  bytes_on_disk_ += line.size();
  ++written_;
}

void RequestLog::enforce_retention() {
  struct Found {
    fs::path path;
    fs::file_time_type modified;
    std::uintmax_t bytes;
  };
  std::vector<Found> segments;
  std::error_code error;
  for (const auto& entry : fs::recursive_directory_iterator(options_.directory, error)) {
    if (!entry.is_regular_file(error) || entry.path().extension() != ".jsonl") continue;
    segments.push_back({entry.path(), entry.last_write_time(error), entry.file_size(error)});
  }
  std::sort(segments.begin(), segments.end(), [](const Found& a, const Found& b) { return a.modified < b.modified; });
  std::uintmax_t total = 0;
  for (const auto& segment : segments) total += segment.bytes;
  auto cutoff = fs::file_time_type::clock::now() - options_.retention;
  for (const auto& segment : segments) {
    bool open = std::any_of(segments_.begin(), segments_.end(),
                            [&](const auto& item) { return item.second.path == segment.path.string(); });
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
