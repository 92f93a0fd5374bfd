// The generation engine: one thread admits requests into a fixed set of sequences (each with
// its key/value blocks reserved for its whole length), runs every sequence's next tokens through
// one forward pass per step, samples, releases text past stop strings, and reports.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

namespace {

using Clock = std::chrono::steady_clock;

// Cumulative histogram in Prometheus's shape.
struct Histogram {
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  std::array<std::uint64_t, kBuckets.size() + 1> counts{};
  double sum = 0;
  void add(double seconds) {
    std::size_t bucket = 0;
    while (bucket < kBuckets.size() && seconds > kBuckets[bucket]) ++bucket;
    ++counts[bucket];
    sum += seconds;
  }
  void write(std::string& out, std::string_view metric, std::string_view labels) const {
    std::uint64_t cumulative = 0;
    for (std::size_t bucket = 0; bucket < kBuckets.size(); ++bucket) {
      cumulative += counts[bucket];
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", metric, labels, kBuckets[bucket], cumulative);
    }
    cumulative += counts.back();
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", metric, labels,
                       cumulative, metric, labels, sum, metric, labels, cumulative);
  }
};

// Bytes at the end of `text` that begin a UTF-8 character not yet complete.
std::size_t incomplete_utf8_tail(std::string_view text) {
  for (std::size_t back = 1; back <= std::min<std::size_t>(3, text.size()); ++back) {
    auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    std::size_t length = (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : (byte & 0xF8) == 0xF0 ? 4 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

// The longest suffix of `text` that is a proper prefix of a stop string: text that may yet
// become one, held back.
std::size_t stop_prefix_tail(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t longest = 0;
  for (const std::string& stop : stops) {
    for (std::size_t length = std::min(stop.size() - 1, text.size()); length > longest; --length) {
      if (text.substr(text.size() - length) == std::string_view(stop).substr(0, length)) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

struct Sequence {
  std::size_t slot = 0;
  GenerationRequest request;
  std::vector<std::int32_t> tokens;  // prompt, then generated
  std::size_t processed = 0;         // tokens whose keys and values are in the cache
  std::size_t generated = 0;
  std::size_t limit = 0;  // max tokens, cut to the context
  Sampler sampler;
  std::string held;  // text not yet released
  Clock::time_point submitted, last_token;
  bool done = false;
  Sequence(std::size_t slot, GenerationRequest request, Clock::time_point submitted)
      : slot(slot), request(std::move(request)), sampler(this->request.sampling), submitted(submitted) {}
};

struct Waiting {
  GenerationRequest request;
  Clock::time_point submitted;
};

}  // namespace

struct Engine::State {
  std::shared_ptr<const LlamaModel> model;
  Tokenizer tokenizer;
  EngineOptions options;
  KvCache cache;
  ThreadTeam team;  // the forward pass's, used by the engine thread only

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<Waiting> waiting;
  bool stopping = false;
  std::optional<std::string> cancel_reason;  // cancel_all's, until the thread has acted on it
  std::size_t running_count = 0;
  EngineStats totals;
  Histogram time_to_first_token, inter_token_latency;
  std::array<std::uint64_t, 4> finished{};  // by FinishReason
  std::thread thread;

  State(std::shared_ptr<const LlamaModel> model_in, Tokenizer tokenizer_in, const EngineOptions& options_in)
      : model(std::move(model_in)),
        tokenizer(std::move(tokenizer_in)),
        options(options_in),
        cache(model->config(), options.parallel * ((options.context + kKvBlockTokens - 1) / kKvBlockTokens),
              options.parallel),
        team(options.threads) {}

  void run() {
    std::vector<std::unique_ptr<Sequence>> running;
    std::vector<std::size_t> free_slots;
    for (std::size_t slot = options.parallel; slot-- > 0;) free_slots.push_back(slot);
    std::vector<BatchToken> batch;
    std::vector<bool> wants;
    std::vector<Sequence*> sampled;
    std::vector<float> logits;
    while (true) {
      std::optional<std::string> cancel;
      std::deque<Waiting> cancelled_waiting;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || cancel_reason || !running.empty() || !waiting.empty(); });
        if (stopping) break;
        if (cancel_reason) {
          cancel = std::exchange(cancel_reason, std::nullopt);
          cancelled_waiting.swap(waiting);
        }
      }
      if (cancel) {
        for (auto& sequence : running) finish(*sequence, FinishReason::kCancelled, *cancel);
        finish_waiting(cancelled_waiting, *cancel);
        release_finished(running, free_slots);
        continue;
      }
      {
        std::unique_lock lock(mutex);
        while (!waiting.empty() && !free_slots.empty()) {
          auto sequence = std::make_unique<Sequence>(free_slots.back(), std::move(waiting.front().request),
                                                     waiting.front().submitted);
          free_slots.pop_back();
          waiting.pop_front();
          running.push_back(std::move(sequence));
        }
        running_count = running.size();
      }
      for (auto& sequence : running) {
        if (sequence->tokens.empty()) admit(*sequence);
        if (sequence->request.cancelled && sequence->request.cancelled())
          finish(*sequence, FinishReason::kCancelled, {});
      }
      // A failure here (memory, a callback's) ends the step's requests, not the server.
      try {
        step_all(running, batch, wants, sampled, logits);
      } catch (const std::exception& error) {
        for (auto& sequence : running) finish(*sequence, FinishReason::kError, error.what());
      }
      release_finished(running, free_slots);
    }
    const std::string reason = "the server is shutting down";
    for (auto& sequence : running) finish(*sequence, FinishReason::kCancelled, reason);
    std::deque<Waiting> left;
    {
      std::lock_guard lock(mutex);
      left.swap(waiting);
    }
    finish_waiting(left, reason);
  }

  void finish_waiting(std::deque<Waiting>& entries, const std::string& reason) {
    for (auto& entry : entries) {
      Sequence sequence(0, std::move(entry.request), entry.submitted);
      finish(sequence, FinishReason::kCancelled, reason);
    }
  }

  void release_finished(std::vector<std::unique_ptr<Sequence>>& running, std::vector<std::size_t>& free_slots) {
    for (auto it = running.begin(); it != running.end();) {
      if ((*it)->done) {
        cache.release((*it)->slot);
        free_slots.push_back((*it)->slot);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    std::lock_guard lock(mutex);
    running_count = running.size();
  }

  // One step: each decoding sequence's last token, and prompt tokens up to the chunk, through one
  // forward pass; then each sequence that reached its end samples.
  void step_all(std::vector<std::unique_ptr<Sequence>>& running, std::vector<BatchToken>& batch,
                std::vector<bool>& wants, std::vector<Sequence*>& sampled, std::vector<float>& logits) {
    batch.clear();
    wants.clear();
    sampled.clear();
    std::size_t prompt_budget = options.prompt_chunk;
    for (auto& sequence : running) {
      if (sequence->done) continue;
      std::size_t end = sequence->tokens.size();
      if (end - sequence->processed > 1) {
        end = std::min(end, sequence->processed + std::max<std::size_t>(prompt_budget, 1));
        prompt_budget -= std::min(prompt_budget, end - sequence->processed);
      }
      for (std::size_t position = sequence->processed; position < end; ++position) {
        batch.push_back({sequence->slot, position, sequence->tokens[position]});
        wants.push_back(false);
      }
      if (end == sequence->tokens.size()) {
        wants.back() = true;
        sampled.push_back(sequence.get());
      }
      sequence->processed = end;
    }
    if (batch.empty()) return;
    Status status = forward(*model, cache, batch, wants, logits, team);
    if (!status.ok()) {
      for (auto& sequence : running) finish(*sequence, FinishReason::kError, status.message());
      return;
    }
    const std::size_t vocabulary = model->config().vocabulary;
    for (std::size_t i = 0; i < sampled.size(); ++i) {
      step(*sampled[i], std::span<float>(logits.data() + i * vocabulary, vocabulary));
    }
  }

  void admit(Sequence& sequence) {
    sequence.tokens = sequence.request.prompt;
    sequence.limit = std::min(sequence.request.max_tokens, options.context - sequence.tokens.size());
    std::lock_guard lock(mutex);
    totals.prompt_tokens += sequence.tokens.size();
  }

  void step(Sequence& sequence, std::span<float> logits) {
    SampledToken next = sequence.sampler.sample(logits, sequence.tokens);
    const std::int32_t token = next.chosen.token;
    if (std::isinf(next.chosen.logprob) && next.chosen.logprob < 0) {
      return finish(sequence, FinishReason::kError,
                    "the model's logits are not finite (NaN or infinite): its weights may be damaged");
    }
    auto now = Clock::now();
    {
      std::lock_guard lock(mutex);
      ++totals.generated_tokens;
      if (sequence.generated == 0) {
        time_to_first_token.add(std::chrono::duration<double>(now - sequence.submitted).count());
      } else {
        inter_token_latency.add(std::chrono::duration<double>(now - sequence.last_token).count());
      }
    }
    sequence.last_token = now;
    if (!sequence.request.ignore_eos && tokenizer.ends_generation(token)) {
      return finish(sequence, FinishReason::kStop, {}, std::exchange(sequence.held, {}));
    }
    sequence.tokens.push_back(token);
    ++sequence.generated;
    sequence.held += tokenizer.piece(token);
    std::optional<FinishReason> reason;
    std::size_t release = sequence.held.size();
    std::size_t found = std::string::npos;
    for (const std::string& stop : sequence.request.stop) {
      found = std::min(found, sequence.held.find(stop));
    }
    if (found != std::string::npos) {
      release = found;
      sequence.held.resize(found);
      reason = FinishReason::kStop;
    } else if (sequence.generated >= sequence.limit) {
      reason = FinishReason::kLength;
    } else {
      release -= std::max(stop_prefix_tail(sequence.held, sequence.request.stop), incomplete_utf8_tail(sequence.held));
    }
    GenerationEvent event{std::move(next), sequence.held.substr(0, release)};
    sequence.held.erase(0, release);
    if (sequence.request.on_token && !sequence.request.on_token(event)) {
      return finish(sequence, FinishReason::kCancelled, {});
    }
    if (reason) finish(sequence, *reason, {});
  }

  void finish(Sequence& sequence, FinishReason reason, std::string_view error, std::string held = {}) {
    if (sequence.done) return;
    sequence.done = true;
    {
      std::lock_guard lock(mutex);
      ++finished[static_cast<std::size_t>(reason)];
      ++totals.requests;
    }
    if (!sequence.request.on_finish) return;
    GenerationResult result;
    result.reason = reason;
    result.error = std::string(error);
    result.text = std::move(held);
    result.prompt_tokens = sequence.request.prompt.size();
    result.completion_tokens = sequence.generated;
    sequence.request.on_finish(result);
  }
};

Engine::Engine(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<Engine>> Engine::start(std::shared_ptr<const LlamaModel> model, Tokenizer tokenizer,
                                              const EngineOptions& options) {
  EngineOptions chosen = options;
  const LlamaConfig& config = model->config();
  if (chosen.context == 0) chosen.context = std::min(config.context, kDefaultContextCap);
  if (chosen.context > config.context) {
    return invalid_argument(
        fmt::format("the context of {} tokens is longer than the model's {}", chosen.context, config.context));
  }
  if (chosen.parallel == 0 || chosen.parallel > 1024) return invalid_argument("parallel must be between 1 and 1024");
  if (chosen.prompt_chunk == 0) chosen.prompt_chunk = 512;
  // Team threads spin between loops: more than the cores only take turns burning them.
  if (const int cores = default_thread_count(); chosen.threads > cores) {
    log_warn(fmt::format("{} threads asked for, {} cores to run them: using {}", chosen.threads, cores, cores));
    chosen.threads = cores;
  }
  // The cache is reserved whole (its pages committed as sequences fill them): its size is checked
  // (in long double, so no product overflows).
  const std::size_t blocks_per_sequence = (chosen.context + kKvBlockTokens - 1) / kKvBlockTokens;
  const long double positions =
      static_cast<long double>(chosen.parallel) * static_cast<long double>(blocks_per_sequence * kKvBlockTokens);
  const long double bytes = positions * static_cast<long double>(config.layers) * 2 *
                            static_cast<long double>(config.kv_heads * config.head_dim) * sizeof(float);
  if (bytes > static_cast<long double>(chosen.max_cache_bytes)) {
    return resource_exhausted(fmt::format(
        "the key/value cache for {} sequence(s) of {} tokens takes {:.1f} GB, more than the {:.1f} GB allowed; "
        "lower the context (--ctx) or the sequences (--parallel)",
        chosen.parallel, chosen.context, static_cast<double>(bytes) / 1e9,
        static_cast<double>(chosen.max_cache_bytes) / 1e9));
  }
  try {
    auto state = std::make_unique<State>(std::move(model), std::move(tokenizer), chosen);
    State* raw = state.get();
    state->thread = std::thread([raw] { raw->run(); });
    return std::unique_ptr<Engine>(new Engine(std::move(state)));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(
        fmt::format("no memory for the key/value cache ({:.1f} GB)", static_cast<double>(bytes) / 1e9));
  } catch (const std::system_error& error) {
    return resource_exhausted(fmt::format("cannot start the engine's thread: {}", error.what()));
  }
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

void Engine::cancel_all(const std::string& reason) {
  {
    std::lock_guard lock(state_->mutex);
    state_->cancel_reason = reason;
  }
  state_->wake.notify_all();
}

Status Engine::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit(std::move(one));
}

Status Engine::submit(std::vector<GenerationRequest> requests) {
  const std::size_t vocabulary = state_->model->config().vocabulary;
  for (const GenerationRequest& request : requests) {
    if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
    for (std::int32_t token : request.prompt) {
      if (token < 0 || static_cast<std::size_t>(token) >= vocabulary) {
        return invalid_argument(fmt::format("token {} is outside the vocabulary of {}", token, vocabulary));
      }
    }
    if (request.prompt.size() >= state_->options.context) {
      return invalid_argument(fmt::format("the prompt has {} tokens; the context holds {} with the reply",
                                          request.prompt.size(), state_->options.context));
    }
    SLIPWAY_RETURN_IF_ERROR(validate(request.sampling));
  }
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopping) return unavailable("the server is shutting down");
    if (state_->waiting.size() + requests.size() > state_->options.max_waiting) {
      return resource_exhausted(
          fmt::format("{} generations are already waiting for this model (at most {}); retry later",
                      state_->waiting.size(), state_->options.max_waiting));
    }
    for (auto& request : requests) state_->waiting.push_back({std::move(request), Clock::now()});
  }
  state_->wake.notify_one();
  return {};
}

const LlamaModel& Engine::model() const { return *state_->model; }
const Tokenizer& Engine::tokenizer() const { return state_->tokenizer; }
std::size_t Engine::context() const { return state_->options.context; }

EngineStats Engine::stats() const {
  std::lock_guard lock(state_->mutex);
  EngineStats stats = state_->totals;
  stats.running = state_->running_count;
  stats.waiting = state_->waiting.size();
  return stats;
}

std::string Engine::metrics_text(std::string_view name) const {
  std::string labels = "model=\"";
  for (char c : name) {
    if (c == '\\' || c == '"') labels += '\\';
    labels += c == '\n' ? ' ' : c;
  }
  labels += "\"";
  std::lock_guard lock(state_->mutex);
  std::string out;
  out += fmt::format("slipway_llm_prompt_tokens_total{{{}}} {}\n", labels, state_->totals.prompt_tokens);
  out += fmt::format("slipway_llm_generation_tokens_total{{{}}} {}\n", labels, state_->totals.generated_tokens);
  out += fmt::format("slipway_llm_requests_running{{{}}} {}\n", labels, state_->running_count);
  out += fmt::format("slipway_llm_requests_waiting{{{}}} {}\n", labels, state_->waiting.size());
  for (FinishReason reason :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled, FinishReason::kError}) {
    out += fmt::format("slipway_llm_requests_finished_total{{{},reason=\"{}\"}} {}\n", labels,
                       finish_reason_name(reason), state_->finished[static_cast<std::size_t>(reason)]);
  }
  state_->time_to_first_token.write(out, "slipway_llm_time_to_first_token_seconds", labels);
  state_->inter_token_latency.write(out, "slipway_llm_inter_token_latency_seconds", labels);
  return out;
}

}  // namespace slipway::llm
