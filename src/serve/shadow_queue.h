// The work of shadow versions, on a thread of its own behind a bounded queue: a shadow copy is
// posted after the live answer is sent, and a full queue drops it (and says so) rather than let
// shadows queue up behind each other. The thread runs at SCHED_IDLE, so it takes only CPU time the
// live requests leave (its tasks must not hold a lock live requests need for long: the shadow
// version is loaded before a copy is posted); while copies keep coming it looks every 5 ms rather
// than being woken for each, and with nothing to do it sleeps until a post. Private to serve.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace slipway::serve {

class ShadowQueue {
 public:
  // At most `capacity` copies waiting, holding at most `byte_budget` bytes of requests.
  ShadowQueue(std::size_t capacity, std::size_t byte_budget);
  ~ShadowQueue();  // drops what is still queued and joins the thread
  ShadowQueue(const ShadowQueue&) = delete;
  ShadowQueue& operator=(const ShadowQueue&) = delete;

  // False, running nothing, when `capacity` tasks are already waiting or `bytes` more would pass
  // the byte budget. Thread-safe.
  bool try_post(std::function<void()> task, std::size_t bytes);

 private:
  void run();

  std::size_t capacity_;
  std::size_t byte_budget_;
  std::size_t bytes_ = 0;  // held by the waiting tasks
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, std::size_t>> tasks_;
  bool stopping_ = false;
  bool sleeping_ = false;  // waiting for a post, not just for the next look
  std::thread thread_;
};

}  // namespace slipway::serve
