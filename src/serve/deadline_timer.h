// Actions run at a deadline unless cancelled first: endpoint requests whose route has not
// answered in time are answered by the fallback from here. One thread, started on the first
// schedule; entries are as many as requests in flight with a deadline (the HTTP server bounds
// those), and a cancelled one is freed at once. Private to serve.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace slipway::serve {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;

  DeadlineTimer() = default;
  ~DeadlineTimer();  // drops the actions still waiting and joins the thread
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `action` on the timer's thread at `when` (at once if it has passed). Thread-safe.
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
  std::thread thread_;
};

}  // namespace slipway::serve
