#include <sched.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>

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
  // The CPUs this process may run on (taskset, cpusets), which hardware_concurrency ignores.
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
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

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

namespace {

// How long a team's idle thread spins before it sleeps: long enough to span the gaps between a
// forward pass's loops and between its tokens, short enough that an idle server sleeps.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(1000);

}  // namespace

// A loop's tasks are claimed through `ticket`: the loop's generation in the high 32 bits, the next
// index in the low 32. A claim is a compare-and-swap on the whole ticket, so a thread that wakes
// late, after its loop has ended and another begun, cannot take the new loop's index: its swap
// fails. Each loop's task and count sit in the slot of its generation's parity, untouched until
// two loops later, when no claim on them can succeed any more.
struct ThreadTeam::State {
  struct Loop {
    std::atomic<const std::function<void(std::size_t)>*> task{nullptr};
    std::atomic<std::uint64_t> count{0};
  };
  std::array<Loop, 2> loops;
  std::atomic<std::uint64_t> ticket{0};
  alignas(64) std::atomic<std::uint64_t> done{0};  // tasks of the current loop finished
  alignas(64) std::atomic<int> sleeping{0};
  std::atomic<bool> stopping{false};
  std::uint32_t generation = 0;  // the caller's, of the last loop it started
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<std::thread> workers;

  static std::uint32_t generation_of(std::uint64_t ticket) { return static_cast<std::uint32_t>(ticket >> 32); }

  // Claims and runs tasks of the loop whose ticket was last seen as `seen` until none are left.
  void drain(std::uint64_t seen) {
    const std::uint32_t loop_generation = generation_of(seen);
    const Loop& loop = loops[loop_generation % 2];
    std::uint64_t finished = 0;  // counted once at the end: one write to `done` per thread, not per task
    while (generation_of(seen) == loop_generation && (seen & 0xFFFFFFFFu) < loop.count.load()) {
      if (!ticket.compare_exchange_weak(seen, seen + 1)) continue;  // `seen` now holds the ticket
      (*loop.task.load())(seen & 0xFFFFFFFFu);
      ++finished;
      seen = ticket.load();
    }
    if (finished > 0) done.fetch_add(finished, std::memory_order_release);
  }

  void work() {
    std::uint32_t seen = 0;
    while (true) {
      const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
      for (unsigned spins = 1; generation_of(ticket.load(std::memory_order_acquire)) == seen; ++spins) {
        if (spins % 64 != 0) {
          cpu_relax();
          continue;
        }
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() > spin_until) {
          std::unique_lock lock(mutex);
          // Sequentially consistent, paired with run()'s store of the ticket before it reads
          // `sleeping`: either this sees the new loop or run() sees this thread and wakes it.
          sleeping.fetch_add(1);
          wake.wait(lock, [&] { return stopping || generation_of(ticket.load()) != seen; });
          sleeping.fetch_sub(1);
          break;
        }
      }
      if (stopping) return;
      const std::uint64_t current = ticket.load();
      seen = generation_of(current);
      drain(current);
    }
  }
};

ThreadTeam::ThreadTeam(int threads) : state_(std::make_unique<State>()) {
  if (threads <= 0) threads = default_thread_count();
  state_->workers.reserve(static_cast<std::size_t>(threads - 1));
  for (int index = 1; index < threads; ++index) {
    try {
      state_->workers.emplace_back([state = state_.get()] { state->work(); });
    } catch (const std::system_error& error) {
      log_warn(fmt::format("a thread team of {} has {} threads: {}", threads, index, error.what()));
      break;
    }
  }
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    // A new generation with no tasks ends the spinning threads' wait too.
    state_->loops[(state_->generation + 1) % 2].count = 0;
    state_->ticket = static_cast<std::uint64_t>(state_->generation + 1) << 32;
  }
  state_->wake.notify_all();
  for (auto& worker : state_->workers) worker.join();
}

int ThreadTeam::size() const { return static_cast<int>(state_->workers.size()) + 1; }

void ThreadTeam::run(std::size_t task_count, const std::function<void(std::size_t)>& task) {
  // Past 2^32 tasks the index would run into the ticket's generation: the shared pool takes them.
  if (task_count > 0xFFFFFFFFu) return parallel_for(task_count, size(), task);
  if (state_->workers.empty() || task_count <= 1) {
    for (std::size_t index = 0; index < task_count; ++index) task(index);
    return;
  }
  State& state = *state_;
  const std::uint32_t generation = ++state.generation;
  State::Loop& loop = state.loops[generation % 2];
  loop.task.store(&task, std::memory_order_relaxed);
  loop.count.store(task_count, std::memory_order_relaxed);
  state.done.store(0, std::memory_order_relaxed);
  const std::uint64_t first = static_cast<std::uint64_t>(generation) << 32;
  state.ticket.store(first);  // sequentially consistent: publishes the loop, then `sleeping` is read
  if (state.sleeping.load() > 0) {
    std::lock_guard lock(state.mutex);
    state.wake.notify_all();
  }
  state.drain(first);
  // Every task is claimed; wait for those still running elsewhere. Yielding now and then lets a
  // team thread that shares this core finish its task.
  for (unsigned spins = 1; state.done.load(std::memory_order_acquire) != task_count; ++spins) {
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

}  // namespace slipway
