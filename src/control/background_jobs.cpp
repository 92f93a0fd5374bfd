// What the management API keeps between calls (api.h): the jobs it runs on threads of its own,
// and the answers of writes a client may send again.
#include <algorithm>

#include "control/api.h"

namespace slipway::control {

BackgroundJobs::~BackgroundJobs() {
  std::map<std::string, std::unique_ptr<Job>> jobs;
  {
    std::lock_guard guard(mutex_);
    jobs.swap(jobs_);
  }
  // Joined without the lock: a job that fails takes it to remember why.
  for (auto& [name, job] : jobs) job->cancel = true;
  for (auto& [name, job] : jobs) job->thread.join();
}

void BackgroundJobs::reap_locked() {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->second->ended) {
      ++it;
      continue;
    }
    it->second->thread.join();
    it = jobs_.erase(it);
  }
}

Status BackgroundJobs::start(const std::string& name, Work work) {
  std::lock_guard guard(mutex_);
  reap_locked();
  if (jobs_.count(name) > 0) return already_exists(kind_ + " '" + name + "' is running; cancel it or wait");
  if (jobs_.size() >= max_running_) {
    return resource_exhausted("this server runs " + std::to_string(max_running_) + " " + kind_ +
                              (max_running_ == 1 ? "" : "s") +
                              " at once, and that many run; start it again once one ends");
  }
  if (endings_.erase(name) > 0) std::erase(ending_order_, name);
  auto job = std::make_unique<Job>();
  Job* running = job.get();
  job->thread = std::thread([this, name, running, work = std::move(work)] {
    Status outcome;
    try {
      outcome = work(*running);
    } catch (const std::exception& error) {
      // A thread's exception would end the server (std::terminate): the job fails instead.
      outcome = internal_error(std::string("the job stopped on an exception: ") + error.what());
    }
    if (!outcome.ok()) log_warn(kind_ + " '" + name + "': " + outcome.message());
    if (!outcome.ok() || !running->result.empty()) {
      Ending ending;
      if (!outcome.ok()) {
        ending.error = outcome.message();
      } else if (running->result.size() <= kMaxResultBytes) {
        ending.result = std::move(running->result);
      } else {
        ending.error = "the job ended, but its result (" + std::to_string(running->result.size()) +
                       " bytes) is over what is kept (" + std::to_string(kMaxResultBytes) + " bytes)";
      }
      std::lock_guard guard(mutex_);
      remember_locked(name, std::move(ending));
    }
    running->ended = true;
  });
  jobs_.emplace(name, std::move(job));
  return {};
}

void BackgroundJobs::remember_locked(const std::string& name, Ending ending) {
  if (endings_.count(name) == 0) {
    if (ending_order_.size() >= kRememberedEndings) {
      endings_.erase(ending_order_.front());
      ending_order_.pop_front();
    }
    ending_order_.push_back(name);
  }
  endings_[name] = std::move(ending);
}

bool BackgroundJobs::cancel(const std::string& name) {
  std::lock_guard guard(mutex_);
  auto found = jobs_.find(name);
  if (found == jobs_.end() || found->second->ended) return false;
  found->second->cancel = true;
  return true;
}

BackgroundJobs::Progress BackgroundJobs::progress(const std::string& name) {
  std::lock_guard guard(mutex_);
  Progress progress;
  if (auto ending = endings_.find(name); ending != endings_.end()) {
    progress.error = ending->second.error;
    progress.result = ending->second.result;
  }
  auto found = jobs_.find(name);
  if (found == jobs_.end() || found->second->ended) return progress;
  progress.running = true;
  progress.cancelling = found->second->cancel;
  progress.done = found->second->done;
  progress.total = found->second->total;
  return progress;
}

std::vector<std::string> BackgroundJobs::running() {
  std::lock_guard guard(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) {
    if (!job->ended) names.push_back(name);
  }
  return names;
}

pipeline::TrainCallbacks training_job_callbacks(BackgroundJobs::Job& job) {
  pipeline::TrainCallbacks callbacks;
  callbacks.cancel = &job.cancel;
  callbacks.on_round = [&job](const train::RoundMetrics& latest, int total) {
    job.done = static_cast<std::size_t>(latest.round) + 1;
    job.total = static_cast<std::size_t>(std::max(total, 0));
  };
  return callbacks;
}

void IdempotencyCache::evict_locked(std::int64_t now_ms) {
  if (order_.size() > 2 * kMaxEntries) {
    // Keys dropped by `finish` leave their place in the queue behind; rebuilt from the entries
    // before those could pile up behind an answer still fresh.
    order_.clear();
    for (const auto& [key, entry] : entries_) order_.emplace_back(entry.stored_ms, key);
    std::sort(order_.begin(), order_.end());
  }
  // Each place is looked at once at most: one in flight goes to the back (its request would
  // write twice on a retry if it were forgotten), and the answered ones behind it still go.
  for (std::size_t looked = 0, places = order_.size(); looked < places && !order_.empty(); ++looked) {
    auto [stored_ms, key] = order_.front();
    auto found = entries_.find(key);
    bool stale = found == entries_.end() || found->second.stored_ms != stored_ms;
    bool over = entries_.size() > kMaxEntries || bytes_ > kMaxBytes || now_ms - stored_ms > kLifetimeMs;
    if (!stale && !over) break;
    order_.pop_front();
    if (stale) continue;
    if (!found->second.answer) {
      order_.emplace_back(stored_ms, std::move(key));
      continue;
    }
    bytes_ -= found->second.bytes;
    entries_.erase(found);
  }
}

std::optional<serve::HttpResponse> IdempotencyCache::begin(const std::string& key, const std::string& fingerprint) {
  std::lock_guard guard(mutex_);
  std::int64_t now_ms = unix_time_ms();
  evict_locked(now_ms);
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    if (found->second.fingerprint != fingerprint) {
      return serve::error_response(422,
                                   "this Idempotency-Key was used for another request (another method, path, "
                                   "query or body); use a new key for a new request");
    }
    if (!found->second.answer) {
      return serve::error_response(409,
                                   "a request with this Idempotency-Key is in progress; retry once it is answered");
    }
    serve::HttpResponse replay = *found->second.answer;
    replay.headers.emplace_back("Idempotency-Replayed", "true");
    return replay;
  }
  if (entries_.size() >= kMaxEntries + kMaxEntries / 10) {
    // Only answers in flight are left to evict: as many requests as that at once is a flood.
    return serve::error_response(429, "too many requests with an Idempotency-Key are in progress; retry later");
  }
  entries_[key] = Entry{fingerprint, std::nullopt, now_ms, key.size() + fingerprint.size()};
  bytes_ += key.size() + fingerprint.size();
  order_.emplace_back(now_ms, key);
  return std::nullopt;
}

void IdempotencyCache::finish(const std::string& key, const serve::HttpResponse& answer) {
  std::lock_guard guard(mutex_);
  auto found = entries_.find(key);
  if (found == entries_.end()) return;
  // Only a write that was done is kept: a refused one changed nothing (an operation writes all or
  // nothing), so its retry runs again and may succeed (the running job ended, the approval came).
  // So is an answer too large to keep.
  if (answer.status >= 400 || answer.body.size() > kMaxAnswerBytes) {
    bytes_ -= found->second.bytes;
    entries_.erase(found);
    return;
  }
  std::size_t added = answer.body.size() + answer.content_type.size();
  for (const auto& [name, value] : answer.headers) added += name.size() + value.size();
  found->second.answer = answer;
  found->second.bytes += added;
  bytes_ += added;
  evict_locked(unix_time_ms());
}

}  // namespace slipway::control
