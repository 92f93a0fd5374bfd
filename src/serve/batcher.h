// The dynamic batcher of one model version (Triton's semantics). Private to serve.
//
// Requests wait in a queue per priority level; executors (`instances` threads) take batches of
// up to max_batch_size rows, highest priority first, oldest first. A batch leaves at once when it
// is full (or reaches the largest preferred size); otherwise it leaves when its oldest request has
// waited max_queue_delay, taking the largest prefix whose size is preferred when one is. Requests
// whose deadline passes in the queue are answered without being computed; a full queue refuses
// new requests. Each request's rows are answered with exactly the scores it would get alone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "slipway/model.h"
#include "slipway/serve.h"

namespace slipway::serve {

// Where a request's time went, for the stats and histograms.
struct BatchTiming {
  std::chrono::nanoseconds queue{0};
  std::chrono::nanoseconds compute{0};
  std::size_t batch_rows = 0;  // rows in the batch the request ran in
};

struct BatchJob {
  std::vector<float> features;  // rows x the model's input width, preprocessed
  std::size_t rows = 0;
  int priority = 0;
  std::chrono::microseconds timeout{0};  // 0: the config's default
  // Called once, on an executor thread: the request's predictions, or DeadlineExceeded when it
  // expired in the queue, or Unavailable when the batcher shut down first.
  std::function<void(Result<model::Predictions>, BatchTiming)> done;
};

class Batcher {
 public:
  // Called on the executor after each model call with its rows and compute time (for metrics).
  using ExecutionObserver = std::function<void(std::size_t rows, std::chrono::nanoseconds compute)>;
  // `on_execution` may be empty. Queue delays, deadlines and timings follow `clock` (a fake one
  // in tests); it must outlive the batcher.
  Batcher(std::shared_ptr<const model::Bundle> bundle, BatchingConfig config, ExecutionObserver on_execution = {},
          const Clock& clock = steady_clock());
  ~Batcher();  // shutdown()
  // Finishes the batch running, answers queued requests Unavailable and stops the executors;
  // later submits are refused Unavailable. Idempotent.
  void shutdown();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues the job. ResourceExhausted (nothing is called) when the queue is full;
  // InvalidArgument for a priority outside the levels.
  Status submit(BatchJob job);

  const BatchingConfig& config() const { return config_; }
  std::size_t queued() const;

 private:
  using TimePoint = Clock::time_point;
  struct Queued {
    BatchJob job;
    TimePoint enqueued;
    TimePoint deadline;  // max() when none
  };

  void stop_executors();
  void run_executor();
  // Takes the next batch from the queues (lock held); empty when nothing may leave yet, with
  // `wake` set to when something may.
  std::vector<Queued> take_batch(TimePoint now, TimePoint& wake);
  void execute(std::vector<Queued>& batch);

  std::shared_ptr<const model::Bundle> bundle_;
  BatchingConfig config_;
  ExecutionObserver on_execution_;
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::deque<Queued>> queues_;  // index 0 = priority 1
  std::size_t queued_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> executors_;
  std::once_flag shutdown_once_;
};

}  // namespace slipway::serve
