// Deadlines run in order, at or after their time; a cancelled one never runs and is freed at once.
#include "serve/deadline_timer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace slipway::serve {
namespace {

using Clock = DeadlineTimer::Clock;
using std::chrono::milliseconds;

TEST(DeadlineTimer, RunsEachActionAtItsDeadlineInOrderAndNeverACancelledOne) {
  DeadlineTimer timer;
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<int> late{0};
  auto start = Clock::now();
  auto action = [&](int label, milliseconds after) {
    return [&, label, after] {
      if (Clock::now() < start + after) ++late;  // "late" counts one that ran early
      std::lock_guard lock(mutex);
      order.push_back(label);
    };
  };
  timer.schedule(start + milliseconds(60), action(3, milliseconds(60)));
  timer.schedule(start + milliseconds(20), action(1, milliseconds(20)));
  auto cancelled = timer.schedule(start + milliseconds(40), action(99, milliseconds(40)));
  timer.schedule(start + milliseconds(40), action(2, milliseconds(40)));
  timer.schedule(start - milliseconds(5), action(0, milliseconds(0)));  // already passed: at once
  auto held = std::make_shared<int>(7);
  auto freed = timer.schedule(start + std::chrono::hours(1), [held] {});
  timer.cancel(cancelled);
  timer.cancel(freed);
  EXPECT_EQ(held.use_count(), 1);  // a cancelled action's captures go with it
  timer.cancel(12345);             // unknown: nothing
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (timer.waiting() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(20));
  std::lock_guard lock(mutex);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(late.load(), 0);
}

TEST(DeadlineTimer, AnActionThatThrowsIsLoggedAndTheOthersStillRun) {
  DeadlineTimer timer(1);
  std::atomic<bool> ran{false};
  timer.schedule(Clock::now(), [] { throw std::runtime_error("a fallback failed"); });
  timer.schedule(Clock::now() + milliseconds(5), [&ran] { ran = true; });
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!ran && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  EXPECT_TRUE(ran.load());
}

TEST(DeadlineTimer, AfterStopNothingRuns) {
  DeadlineTimer timer;
  std::atomic<int> runs{0};
  timer.schedule(Clock::now() + std::chrono::hours(1), [&runs] { ++runs; });
  timer.stop();
  EXPECT_EQ(timer.waiting(), 0u);
  timer.schedule(Clock::now(), [&runs] { ++runs; });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(runs.load(), 0);
  timer.stop();  // again: nothing
}

TEST(DeadlineTimer, DestroyingItDropsWhatWaits) {
  auto held = std::make_shared<int>(1);
  std::atomic<bool> ran{false};
  {
    DeadlineTimer timer;
    timer.schedule(Clock::now() + std::chrono::hours(1), [held, &ran] { ran = true; });
  }
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(held.use_count(), 1);
}

}  // namespace
}  // namespace slipway::serve
