#include "serve/deadline_timer.h"

#include <exception>

#include "slipway/core.h"

namespace slipway::serve {

DeadlineTimer::~DeadlineTimer() { stop(); }

void DeadlineTimer::stop() {
  std::vector<std::thread> runners;
  decltype(actions_) dropped;  // destroyed outside the lock: they may own large captures
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    runners.swap(runners_);
    dropped.swap(actions_);
    deadlines_.clear();
  }
  wake_.notify_all();
  for (auto& runner : runners) runner.join();
}

DeadlineTimer::Id DeadlineTimer::schedule(Clock::time_point when, std::function<void()> action) {
  Id id = 0;
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    if (stopping_) return id;  // dropped: the request is answered by its route
    auto placed = actions_.emplace(std::make_pair(when, id), std::move(action)).first;
    deadlines_.emplace(id, when);
    earliest = placed == actions_.begin();
    if (runners_.empty()) {
      for (int index = 0; index < runner_count_; ++index) runners_.emplace_back([this] { run(); });
    }
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
      // A copy: another runner may take (and free) that entry while this one waits.
      Clock::time_point when = first->first.first;
      wake_.wait_until(lock, when);
      continue;
    }
    std::function<void()> action = std::move(first->second);
    deadlines_.erase(first->first.second);
    actions_.erase(first);
    lock.unlock();
    try {
      action();
    } catch (const std::exception& error) {
      log_error(std::string("a deadline's action failed: ") + error.what());
    }
    action = nullptr;
    lock.lock();
  }
}

}  // namespace slipway::serve
