// The request log: a sampled share of each model's infer requests (serving config
// request_log_rate), with their answers, written by one background thread into JSON Lines
// segment files under <directory>/<model>/. A request never waits for it: posting a record only
// queues it, and past the queue's byte budget the record is dropped and counted. Segments rotate
// by size and by hour; segments past the retention, or past the total byte budget (oldest
// first), are deleted. The format is in docs/formats.md ("Request log"). Private to serve.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "slipway/core.h"

namespace slipway::serve {

struct RequestLogOptions {
  std::string directory;                               // empty: no request log
  std::size_t queue_bytes = std::size_t{16} << 20;     // records waiting to be written, at most
  std::size_t segment_bytes = std::size_t{64} << 20;   // a segment is closed past this size (or hour)
  std::chrono::hours retention{24 * 7};                // segments older than this are deleted
  std::size_t max_total_bytes = std::size_t{1} << 30;  // the oldest segments go past this total
};

class RequestLog {
 public:
  struct Record {
    std::int64_t time_ms = 0;
    std::string model;
    std::string version;
    std::string endpoint;  // empty when the model was called by name
    int status = 0;
    double latency_ms = 0;
    std::string request;   // the JSON body as sent
    std::string response;  // the JSON answer (an error's too)
  };

  // The directory is created, and the writer thread started, at the first record; when it cannot
  // be, the log says so once and drops every record.
  explicit RequestLog(RequestLogOptions options);
  ~RequestLog();  // writes what is queued, then stops
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // Queues a record; false (dropped, counted) when the queue is at its byte budget. Thread-safe.
  bool post(Record record);

  std::uint64_t written() const { return written_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t bytes_on_disk() const { return bytes_on_disk_; }
  // Prometheus text for the request log's counters.
  std::string metrics_text() const;

 private:
  struct Segment {
    std::FILE* file = nullptr;
    std::string path;
    std::size_t bytes = 0;
    std::int64_t hour = 0;  // the UTC hour it was opened in
    std::int64_t last_write_ms = 0;
  };
  void start();  // under mutex_
  void run();
  void write(const Record& record);
  void enforce_retention();

  RequestLogOptions options_;
  bool started_ = false;
  bool usable_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Record> queue_;
  std::size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::map<std::string, Segment> segments_;  // by model; the writer thread's alone
  std::uint64_t sequence_ = 0;
  std::atomic<std::uint64_t> written_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> bytes_on_disk_{0};
  std::thread thread_;
};

}  // namespace slipway::serve
