#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "slipway/core.h"

namespace slipway {
namespace {

// A process-wide pool of worker threads, started on first use and never torn down (it lives as
// long as the process), so a parallel loop costs a queue push instead of a thread start.
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool* pool = new WorkerPool(std::max(1, default_thread_count() - 1));
    return *pool;
  }

  int size() const { return static_cast<int>(workers_.size()); }

  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

 private:
  explicit WorkerPool(int workers) {
    for (int index = 0; index < workers; ++index) {
      workers_.emplace_back([this] {
        while (true) {
          std::function<void()> job;
          {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] { return !jobs_.empty(); });
            job = std::move(jobs_.front());
            jobs_.pop_front();
          }
          job();
        }
      });
      workers_.back().detach();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
};

// One parallel loop. Helpers that start after the caller has finished draining do nothing, and the
// caller waits only for helpers that started, so a loop never waits on a queued job (no deadlock
// when the pool is busy, or when a loop runs inside another).
struct LoopState {
  std::size_t task_count = 0;
  const std::function<void(std::size_t)>* task = nullptr;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::condition_variable done;
  int active_helpers = 0;
  bool closed = false;

  void drain() {
    for (std::size_t index = next.fetch_add(1); index < task_count; index = next.fetch_add(1)) (*task)(index);
  }
};

}  // namespace

int default_thread_count() {
  unsigned count = std::thread::hardware_concurrency();
  return count == 0 ? 1 : static_cast<int>(count);
}

void parallel_for(std::size_t task_count, int thread_count, const std::function<void(std::size_t)>& task) {
  std::size_t workers =
      std::min<std::size_t>(task_count, thread_count < 1 ? 1 : static_cast<std::size_t>(thread_count));
  if (workers <= 1) {
    for (std::size_t index = 0; index < task_count; ++index) task(index);
    return;
  }
  auto state = std::make_shared<LoopState>();
  state->task_count = task_count;
  state->task = &task;
  WorkerPool& pool = WorkerPool::instance();
  std::size_t helpers = std::min<std::size_t>(workers - 1, static_cast<std::size_t>(pool.size()));
  for (std::size_t helper = 0; helper < helpers; ++helper) {
    pool.post([state] {
      {
        std::lock_guard lock(state->mutex);
        if (state->closed) return;
        ++state->active_helpers;
      }
      state->drain();
      std::lock_guard lock(state->mutex);
      if (--state->active_helpers == 0) state->done.notify_all();
    });
  }
  state->drain();
  std::unique_lock lock(state->mutex);
  state->closed = true;
  state->done.wait(lock, [&] { return state->active_helpers == 0; });
}

// ---------------------------------------------------------------------------------------------
// ThreadTeam.

namespace {

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// How long a team's idle thread spins before it sleeps: long enough to span the gaps between a
// forward pass's loops and between its tokens, short enough that an idle server sleeps.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(1000);

}  // namespace

ThreadTeam::ThreadTeam(int threads) {
  if (threads <= 0) threads = default_thread_count();
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int index = 1; index < threads; ++index) workers_.emplace_back([this] { work(); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1);  // ends the spinning threads' wait too
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadTeam::drain() {
  for (std::size_t index = next_.fetch_add(1); index < task_count_; index = next_.fetch_add(1)) (*task_)(index);
}

void ThreadTeam::run(std::size_t task_count, const std::function<void(std::size_t)>& task) {
  if (workers_.empty() || task_count <= 1) {
    for (std::size_t index = 0; index < task_count; ++index) task(index);
    return;
  }
  task_ = &task;
  task_count_ = task_count;
  next_.store(0);
  working_.store(static_cast<int>(workers_.size()));
  // Sequentially consistent, paired with the sleeper's increment of sleeping_ before it reads the
  // generation: either the sleeper sees the new loop or this sees the sleeper and wakes it.
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) {
    std::lock_guard lock(mutex_);
    wake_.notify_all();
  }
  drain();
  // Yielding now and then lets a team thread that shares this core (more threads than cores, or
  // a busy machine) finish its task instead of waiting out this thread's time slice.
  for (unsigned spins = 1; working_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

void ThreadTeam::work() {
  std::uint64_t seen = 0;
  while (true) {
    auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    for (unsigned spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
      if (spins % 64 != 0) {
        cpu_relax();
        continue;
      }
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock lock(mutex_);
        sleeping_.fetch_add(1);
        wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
        sleeping_.fetch_sub(1);
        break;
      }
    }
    if (stopping_) return;
    seen = generation_.load(std::memory_order_acquire);
    drain();
    working_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace slipway
