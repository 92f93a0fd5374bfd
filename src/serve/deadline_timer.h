// Actions run at a deadline unless cancelled first: endpoint requests whose route has not
// answered in time are answered by the fallback from here. A few runner threads, started on the
// first schedule, take the actions due, so one slow fallback (a model run on a version without a
// batcher) does not hold up the others' deadlines. Entries are as many as requests in flight
// with a deadline (the HTTP server bounds those), and a cancelled one is freed at once. Private to
// serve.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace slipway::serve {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;

  explicit DeadlineTimer(int runners = 4) : runner_count_(runners) {}
  ~DeadlineTimer();  // stop()

  // Waits for the actions running, drops those waiting; later schedules run nothing. Idempotent.
  void stop();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `action` on a runner thread at `when` (at once if it has passed). An exception it
  // throws is logged, never let out. Thread-safe.
  Id schedule(Clock::time_point when, std::function<void()> action);
  // Drops the action if it has not started; an action already running is not waited for.
  void cancel(Id id);
  std::size_t waiting() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // By deadline, then by id (unique).
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> actions_;
  std::map<Id, Clock::time_point> deadlines_;  // the key of each waiting action, for cancel
  Id next_id_ = 1;
  bool stopping_ = false;
  int runner_count_;
  std::vector<std::thread> runners_;
};

}  // namespace slipway::serve
