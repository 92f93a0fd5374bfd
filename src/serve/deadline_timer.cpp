#include "serve/deadline_timer.h"

namespace slipway::serve {

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DeadlineTimer::Id DeadlineTimer::schedule(Clock::time_point when, std::function<void()> action) {
  Id id = 0;
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    auto placed = actions_.emplace(std::make_pair(when, id), std::move(action)).first;
    deadlines_.emplace(id, when);
    earliest = placed == actions_.begin();
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  // Only a new earliest deadline changes how long the thread sleeps.
  if (earliest) wake_.notify_one();
  return id;
}

void DeadlineTimer::cancel(Id id) {
  std::function<void()> dropped;  // destroyed outside the lock: it may own large captures
  std::lock_guard lock(mutex_);
  auto found = deadlines_.find(id);
  if (found == deadlines_.end()) return;
  auto action = actions_.find(std::make_pair(found->second, id));
  dropped = std::move(action->second);
  actions_.erase(action);
  deadlines_.erase(found);
}

std::size_t DeadlineTimer::waiting() const {
  std::lock_guard lock(mutex_);
  return actions_.size();
}

void DeadlineTimer::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (actions_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto first = actions_.begin();
    if (first->first.first > Clock::now()) {
      wake_.wait_until(lock, first->first.first);
      continue;
    }
    std::function<void()> action = std::move(first->second);
    deadlines_.erase(first->first.second);
    actions_.erase(first);
    lock.unlock();
    action();
    action = nullptr;
    lock.lock();
  }
}

}  // namespace slipway::serve
