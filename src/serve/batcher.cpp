#include "serve/batcher.h"

#include <algorithm>

namespace slipway::serve {

Batcher::Batcher(std::shared_ptr<const model::Bundle> bundle, BatchingConfig config, ExecutionObserver on_execution,
                 const Clock& clock)
    : bundle_(std::move(bundle)), config_(std::move(config)), on_execution_(std::move(on_execution)), clock_(clock) {
  config_.priority_levels = std::max(1, config_.priority_levels);
  config_.default_priority = std::clamp(config_.default_priority, 1, config_.priority_levels);
  config_.instances = std::max(1, config_.instances);
  std::sort(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end());
  queues_.resize(static_cast<std::size_t>(config_.priority_levels));
  for (int index = 0; index < config_.instances; ++index) executors_.emplace_back([this] { run_executor(); });
}

Batcher::~Batcher() { shutdown(); }

void Batcher::shutdown() {
  std::call_once(shutdown_once_, [this] { stop_executors(); });
}

void Batcher::stop_executors() {
  std::vector<Queued> abandoned;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& queue : queues_) {
      for (auto& entry : queue) abandoned.push_back(std::move(entry));
      queue.clear();
    }
    queued_ = 0;
  }
  changed_.notify_all();
  for (auto& executor : executors_) executor.join();
  for (auto& entry : abandoned) entry.job.done(unavailable("the model is being unloaded"), BatchTiming{});
}

std::size_t Batcher::queued() const {
  std::lock_guard lock(mutex_);
  return queued_;
}

Status Batcher::submit(BatchJob job) {
  int priority = job.priority == 0 ? config_.default_priority : job.priority;
  if (priority < 1 || priority > config_.priority_levels) {
    return invalid_argument("priority " + std::to_string(job.priority) + " is outside the model's levels 1.." +
                            std::to_string(config_.priority_levels));
  }
  TimePoint now = clock_.now();
  auto timeout = job.timeout.count() > 0 ? job.timeout : config_.default_timeout;
  Queued entry{std::move(job), now, timeout.count() > 0 ? now + timeout : TimePoint::max()};
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return unavailable("the model is being unloaded");
    if (config_.max_queue_size > 0 && queued_ >= config_.max_queue_size) {
      return resource_exhausted("the model's queue is full (" + std::to_string(config_.max_queue_size) +
                                " requests); retry later");
    }
    queues_[static_cast<std::size_t>(priority - 1)].push_back(std::move(entry));
    ++queued_;
  }
  changed_.notify_one();
  return {};
}

std::vector<Batcher::Queued> Batcher::take_batch(TimePoint now, TimePoint& wake) {
  std::vector<Queued> batch;
  if (queued_ == 0) return batch;
  std::size_t limit = std::max<std::size_t>(config_.max_batch_size, 1);
  // Rows available, in the order they would be taken (priority, then age), and the oldest wait.
  std::size_t rows = 0;
  TimePoint oldest = TimePoint::max();
  for (const auto& queue : queues_) {
    for (const auto& entry : queue) {
      rows += entry.job.rows;
      oldest = std::min(oldest, entry.enqueued);
    }
  }
  std::size_t largest_preferred = config_.preferred_batch_sizes.empty() ? limit : config_.preferred_batch_sizes.back();
  bool full = rows >= limit || rows >= largest_preferred;
  bool waited_enough = now - oldest >= config_.max_queue_delay;
  if (config_.max_batch_size > 1 && !full && !waited_enough) {
    wake = oldest + config_.max_queue_delay;
    return batch;
  }
  // Take requests in order while they fit (the first always goes, even when larger than the
  // limit: it runs alone). Remember where each preferred size is reached exactly.
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // (queue, count) in order
  std::size_t batch_rows = 0;
  std::size_t count_at_preferred = 0;
  std::size_t total_count = 0;
  for (std::size_t level = 0; level < queues_.size(); ++level) {
    std::size_t count = 0;
    for (const auto& entry : queues_[level]) {
      if (total_count > 0 && batch_rows + entry.job.rows > limit) break;
      batch_rows += entry.job.rows;
      ++count;
      ++total_count;
      if (std::binary_search(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end(), batch_rows)) {
        count_at_preferred = total_count;
      }
    }
    taken.push_back({level, count});
    if (count < queues_[level].size()) break;
  }
  // With preferred sizes, stop at the largest one reached, when one is.
  std::size_t keep = count_at_preferred > 0 ? count_at_preferred : total_count;
  for (auto [level, count] : taken) {
    auto& queue = queues_[level];
    std::size_t move = std::min(count, keep);
    for (std::size_t index = 0; index < move; ++index) {
      batch.push_back(std::move(queue.front()));
      queue.pop_front();
    }
    keep -= move;
    queued_ -= move;
    if (keep == 0) break;
  }
  return batch;
}

void Batcher::run_executor() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    TimePoint now = clock_.now();
    // Requests whose deadline passed are answered now, never computed.
    std::vector<Queued> expired;
    for (auto& queue : queues_) {
      for (auto it = queue.begin(); it != queue.end();) {
        if (it->deadline <= now) {
          expired.push_back(std::move(*it));
          it = queue.erase(it);
          --queued_;
        } else {
          ++it;
        }
      }
    }
    TimePoint wake = TimePoint::max();
    std::vector<Queued> batch = take_batch(now, wake);
    if (!expired.empty() || !batch.empty()) {
      lock.unlock();
      for (auto& entry : expired) {
        BatchTiming timing;
        timing.queue = now - entry.enqueued;
        entry.job.done(deadline_exceeded("the request waited longer than its timeout in the model's queue"), timing);
      }
      if (!batch.empty()) execute(batch);
      lock.lock();
      continue;
    }
    // Sleep until a request arrives, the oldest may leave, or the earliest deadline.
    for (const auto& queue : queues_) {
      for (const auto& entry : queue) wake = std::min(wake, entry.deadline);
    }
    clock_.wait_until(lock, changed_, wake);
  }
}

void Batcher::execute(std::vector<Queued>& batch) {
  TimePoint start = clock_.now();
  std::size_t width = bundle_->preprocessor().output_width();
  std::size_t rows = 0;
  for (const auto& entry : batch) rows += entry.job.rows;
  model::Predictions predictions;
  if (batch.size() == 1) {
    predictions = bundle_->predict_preprocessed(batch.front().job.features, rows);
  } else {
    std::vector<float> features;
    features.reserve(rows * width);
    for (const auto& entry : batch)
      features.insert(features.end(), entry.job.features.begin(), entry.job.features.end());
    predictions = bundle_->predict_preprocessed(features, rows);
  }
  auto compute = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.now() - start);
  if (on_execution_) on_execution_(rows, compute);
  std::size_t offset = 0;
  for (auto& entry : batch) {
    model::Predictions mine;
    mine.rows = entry.job.rows;
    mine.columns = predictions.columns;
    auto begin = predictions.scores.begin() + static_cast<std::ptrdiff_t>(offset * predictions.columns);
    mine.scores.assign(begin, begin + static_cast<std::ptrdiff_t>(entry.job.rows * predictions.columns));
    offset += entry.job.rows;
    BatchTiming timing{start - entry.enqueued, compute, rows};
    entry.job.done(std::move(mine), timing);
  }
}

}  // namespace slipway::serve
