// The dynamic batcher's promises, one test each: batches fill, wait no longer than the delay,
// prefer the preferred sizes, honour priorities, refuse when full, expire, and answer each
// request with the scores it would get alone.
#include "serve/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "support/fake_clock.h"

namespace slipway::serve {
namespace {

using namespace std::chrono_literals;

// prediction = x0 + 2 x1, over two numeric inputs.
std::shared_ptr<const model::Bundle> linear_bundle() {
  std::vector<model::FeatureTransform> inputs(2);
  inputs[0].name = "x0";
  inputs[1].name = "x1";
  model::Manifest manifest;
  manifest.task = model::Task::kRegression;
  manifest.target = "y";
  return std::make_shared<const model::Bundle>(manifest, model::Preprocessor(inputs),
                                               std::make_shared<model::LinearModel>(std::vector<double>{1, 2}, 0.0));
}

struct Answer {
  Result<model::Predictions> predictions = internal_error("not answered");
  BatchTiming timing;
};

// Submits a job of `rows` rows (x0 = first, first + 1, ...; x1 = 1) and returns its answer's future.
std::future<Answer> submit(Batcher& batcher, std::size_t rows, float first, int priority = 0,
                           std::chrono::microseconds timeout = 0us, Status* status = nullptr) {
  auto promise = std::make_shared<std::promise<Answer>>();
  BatchJob job;
  for (std::size_t row = 0; row < rows; ++row) {
    job.features.push_back(first + static_cast<float>(row));
    job.features.push_back(1.0f);
  }
  job.rows = rows;
  job.priority = priority;
  job.timeout = timeout;
  job.done = [promise](Result<model::Predictions> predictions, BatchTiming timing) {
    promise->set_value(Answer{std::move(predictions), timing});
  };
  Status submitted = batcher.submit(std::move(job));
  if (status != nullptr) *status = submitted;
  return promise->get_future();
}

TEST(Batcher, WithoutBatchingEachRequestRunsAloneWithItsOwnScores) {
  Batcher batcher(linear_bundle(), BatchingConfig{});
  auto a = submit(batcher, 2, 10).get();
  ASSERT_TRUE(a.predictions.ok());
  EXPECT_EQ(a.predictions->scores, (std::vector<float>{12, 13}));
  EXPECT_EQ(a.timing.batch_rows, 2u);
}

// Whether the answer has come (the fake clock does not move by itself, so "not yet" is certain
// as long as the test does not advance it).
bool answered(std::future<Answer>& answer) { return answer.wait_for(20ms) == std::future_status::ready; }

TEST(Batcher, AFullBatchLeavesAtOnceAndEachRequestGetsItsRows) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 8;
  config.max_queue_delay = 2s;  // never reached: the fake clock stands still, so only a full batch leaves
  Batcher batcher(linear_bundle(), config, {}, clock);
  std::vector<std::future<Answer>> answers;
  answers.reserve(4);
  for (int request = 0; request < 4; ++request) answers.push_back(submit(batcher, 2, 100.0f * request));
  for (int request = 0; request < 4; ++request) {
    Answer answer = answers[static_cast<std::size_t>(request)].get();
    ASSERT_TRUE(answer.predictions.ok());
    EXPECT_EQ(answer.predictions->scores, (std::vector<float>{100.0f * request + 2, 100.0f * request + 3}));
    EXPECT_EQ(answer.timing.batch_rows, 8u);
    EXPECT_EQ(answer.timing.queue, 0ns);
  }
}

TEST(Batcher, APartialBatchWaitsForTheDelayThenLeaves) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 64;
  config.max_queue_delay = 200ms;
  Batcher batcher(linear_bundle(), config, {}, clock);
  auto first = submit(batcher, 1, 0);
  auto second = submit(batcher, 3, 0);
  EXPECT_FALSE(answered(first));
  clock.advance(199ms);
  EXPECT_FALSE(answered(first));
  clock.advance(1ms);
  Answer answer = first.get();
  ASSERT_TRUE(answer.predictions.ok());
  EXPECT_EQ(answer.timing.batch_rows, 4u);
  EXPECT_EQ(answer.timing.queue, 200ms);
  EXPECT_EQ(second.get().timing.batch_rows, 4u);
}

TEST(Batcher, PreferredSizesCutTheBatch) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 16;
  config.max_queue_delay = 300ms;
  config.preferred_batch_sizes = {4};
  Batcher batcher(linear_bundle(), config, {}, clock);
  std::vector<std::future<Answer>> answers;
  answers.reserve(6);
  for (int request = 0; request < 6; ++request) answers.push_back(submit(batcher, 1, 0));
  // The first four reach the preferred size and leave at once; the last two wait for the delay.
  for (std::size_t index = 0; index < 4; ++index) EXPECT_EQ(answers[index].get().timing.batch_rows, 4u);
  EXPECT_FALSE(answered(answers[4]));
  clock.advance(300ms);
  for (std::size_t index = 4; index < 6; ++index) EXPECT_EQ(answers[index].get().timing.batch_rows, 2u);
}

TEST(Batcher, HigherPriorityRequestsLeaveFirst) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 2;
  config.max_queue_delay = 300ms;
  config.priority_levels = 2;
  config.default_priority = 2;
  Batcher batcher(linear_bundle(), config, {}, clock);
  // The low-priority row waits for company; the two high-priority rows fill a batch on arrival
  // and take it, although the low one came first (first come first served would send it at once
  // with no room for the pair).
  auto low = submit(batcher, 1, 0);      // priority 2 (the default)
  auto high = submit(batcher, 2, 0, 1);  // priority 1
  Answer first = high.get();
  EXPECT_EQ(first.timing.batch_rows, 2u);
  EXPECT_EQ(first.timing.queue, 0ns);
  EXPECT_FALSE(answered(low));
  clock.advance(300ms);
  Answer later = low.get();
  EXPECT_EQ(later.timing.batch_rows, 1u);
  EXPECT_EQ(later.timing.queue, 300ms);  // it left when its delay ran out
  Status status;
  submit(batcher, 1, 0, 3, 0us, &status);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

TEST(Batcher, AFullQueueRefusesAndExpiredRequestsAreNotComputed) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 100;
  config.max_queue_delay = 1s;
  config.max_queue_size = 2;
  std::atomic<int> executions{0};
  Batcher batcher(
      linear_bundle(), config, [&](std::size_t, std::chrono::nanoseconds) { ++executions; }, clock);
  auto expiring = submit(batcher, 1, 0, 0, 20ms);
  auto waiting = submit(batcher, 1, 0);
  Status refused;
  submit(batcher, 1, 0, 0, 0us, &refused);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  clock.advance(20ms);
  Answer expired = expiring.get();
  EXPECT_EQ(expired.predictions.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(expired.timing.queue, 20ms);  // answered at its deadline, not at the batch delay
  EXPECT_EQ(executions.load(), 0);
  EXPECT_FALSE(answered(waiting));
  clock.advance(980ms);
  Answer computed = waiting.get();
  ASSERT_TRUE(computed.predictions.ok());
  EXPECT_EQ(computed.timing.batch_rows, 1u);
  EXPECT_EQ(executions.load(), 1);
}

TEST(Batcher, ShutdownAnswersQueuedRequests) {
  testing::FakeClock clock;
  BatchingConfig config;
  config.max_batch_size = 100;
  config.max_queue_delay = 10s;
  std::future<Answer> queued;
  {
    Batcher batcher(linear_bundle(), config, {}, clock);
    queued = submit(batcher, 1, 0);
  }
  EXPECT_EQ(queued.get().predictions.status().code(), StatusCode::kUnavailable);
}

TEST(Batcher, ManyThreadsManyRequestsEveryAnswerIsRight) {
  BatchingConfig config;
  config.max_batch_size = 32;
  config.max_queue_delay = 200us;
  config.instances = 2;
  Batcher batcher(linear_bundle(), config);
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int client = 0; client < 4; ++client) {
    clients.emplace_back([&, client] {
      for (int request = 0; request < 200; ++request) {
        float first = static_cast<float>(client * 1000 + request);
        Answer answer = submit(batcher, 1 + request % 3, first).get();
        if (!answer.predictions.ok() || answer.predictions->scores.front() != first + 2) ++wrong;
      }
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace slipway::serve
