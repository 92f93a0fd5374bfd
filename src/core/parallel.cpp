#include <atomic>
#include <thread>

#include "slipway/core.h"

namespace slipway {

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
  std::atomic<std::size_t> next{0};
  auto drain = [&] {
    for (std::size_t index = next.fetch_add(1); index < task_count; index = next.fetch_add(1)) task(index);
  };
  std::vector<std::jthread> threads;
  threads.reserve(workers - 1);
  for (std::size_t worker = 1; worker < workers; ++worker) threads.emplace_back(drain);
  drain();
}

}  // namespace slipway
