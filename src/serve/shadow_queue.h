// The work of shadow versions, on a thread of its own behind a bounded queue: a shadow copy is
// posted after the live answer is sent, and a full queue drops it (and says so) rather than let
// shadows queue up behind each other. The thread runs at SCHED_IDLE, so it takes only CPU time
// the live requests leave; while copies keep coming it looks every 5 ms rather than being woken
// for each, and with nothing to do it sleeps until a post. Private to serve.
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
  explicit ShadowQueue(std::size_t capacity);
  ~ShadowQueue();  // drops what is still queued and joins the thread
  ShadowQueue(const ShadowQueue&) = delete;
  ShadowQueue& operator=(const ShadowQueue&) = delete;

  // False, running nothing, when `capacity` tasks are already waiting. Thread-safe.
  bool try_post(std::function<void()> task);

 private:
  void run();

  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  bool sleeping_ = false;  // waiting for a post, not just for the next look
  std::thread thread_;
};

}  // namespace slipway::serve
