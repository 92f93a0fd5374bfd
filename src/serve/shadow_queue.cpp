#include "serve/shadow_queue.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>

namespace slipway::serve {

ShadowQueue::ShadowQueue(std::size_t capacity, std::size_t byte_budget)
    : capacity_(capacity), byte_budget_(byte_budget), thread_([this] { run(); }) {}

ShadowQueue::~ShadowQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    tasks_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

bool ShadowQueue::try_post(std::function<void()> task, std::size_t bytes) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || tasks_.size() >= capacity_ || bytes > byte_budget_ - bytes_) return false;
    tasks_.emplace_back(std::move(task), bytes);
    bytes_ += bytes;
    // Under steady traffic the thread looks every few milliseconds by itself, so a live request
    // pays for a wake-up only when the shadow had gone to sleep.
    wake = sleeping_;
  }
  if (wake) wake_.notify_one();
  return true;
}

void ShadowQueue::run() {
  // SCHED_IDLE: CPU time the live requests leave over, without preempting them. The thread holds
  // no lock for long (the shadow version is loaded before its copies are posted; the metrics and
  // cache locks are held for microseconds), so the low priority cannot stall a live request.
  sched_param idle{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (tasks_.empty()) {
      // A few milliseconds for more copies to arrive; with none, sleep until one is posted.
      wake_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stopping_; });
      if (tasks_.empty() && !stopping_) {
        sleeping_ = true;
        wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        sleeping_ = false;
      }
      continue;
    }
    auto [task, bytes] = std::move(tasks_.front());
    tasks_.pop_front();
    bytes_ -= bytes;
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace slipway::serve
