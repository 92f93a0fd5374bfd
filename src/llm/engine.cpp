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
#include "speculative.h"

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

// A request's life in the engine: waiting, running in a slot (a KV cache sequence), perhaps
// preempted back to waiting (its blocks freed, its tokens kept to be computed again), finished.
struct Sequence {
  GenerationRequest request;
  std::vector<std::int32_t> tokens;  // prompt, then generated
  std::size_t processed = 0;         // tokens whose keys and values are in the cache
  std::size_t scheduled = 0;         // tokens in this step's batch
  std::size_t generated = 0;
  std::size_t limit = 0;   // max tokens, cut to the context
  std::size_t slot = 0;    // while running
  bool preempted = false;  // in this step: it waits for the next
  Sampler sampler;
  // Speculative decoding: this step's proposed tokens, the draft's distributions for them (sampled
  // decoding with a draft model), and the draft's own sampler.
  std::vector<std::int32_t> proposal;
  std::vector<TokenDistribution> proposal_distributions;
  std::optional<Sampler> draft_sampler;
  // The next proposal's most tokens: num_speculative_tokens at first, adapted to what is accepted.
  std::size_t proposal_length = 0;
  std::string held;  // text not yet released
  Clock::time_point submitted, last_token;
  bool done = false;
  // Choices of the same prompt submitted with this one: they wait with it, and once its prompt is
  // computed each forks its blocks and samples from the same logits.
  std::vector<std::unique_ptr<Sequence>> followers;
  Sequence(GenerationRequest request_in, Clock::time_point submitted)
      : request(std::move(request_in)), sampler(request.sampling), submitted(submitted) {
    tokens = request.prompt;
  }
  bool decoding() const { return processed + 1 == tokens.size(); }
  std::size_t choices() const { return 1 + followers.size(); }
};

using SequencePtr = std::unique_ptr<Sequence>;

}  // namespace

struct Engine::State {
  std::shared_ptr<const LlamaModel> model;
  Tokenizer tokenizer;
  EngineOptions options;
  KvCache cache;
  std::shared_ptr<const TensorParallelModel> ranks;  // the model as its ranks hold it (one: whole)
  RankTeams teams;                                   // the forward pass's threads, used by the engine thread only
  std::unique_ptr<DraftModel> draft;                 // speculative decoding with a draft model

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<SequencePtr> waiting;  // submitted: the thread takes them from here
  std::size_t waiting_choices = 0;  // in `waiting`, followers included
  std::size_t queued_choices = 0;   // in `queued`, as of the last step
  bool stopping = false;
  std::optional<std::string> cancel_reason;  // cancel_all's, until the thread has acted on it
  std::size_t running_count = 0;
  EngineStats totals;
  Histogram time_to_first_token, inter_token_latency;
  std::array<std::uint64_t, 4> finished{};  // by FinishReason
  std::thread thread;

  // The engine thread's own: running in admission order (the youngest preempted first), queued
  // (taken from `waiting`, preempted ones at the front), free slots.
  std::vector<SequencePtr> running;
  std::deque<SequencePtr> queued;
  std::vector<std::size_t> free_slots;
  std::vector<BatchToken> batch;
  std::vector<bool> wants;
  struct Rows {  // a sequence's rows of the step's logits
    Sequence* sequence;
    std::size_t first, count;
  };
  std::vector<Rows> sampled;
  std::vector<float> logits;
  std::vector<DraftJob> draft_jobs;

  State(std::shared_ptr<const TensorParallelModel> ranks_in, Tokenizer tokenizer_in, const EngineOptions& options_in,
        std::size_t blocks)
      : model(ranks_in->shared_model()),
        tokenizer(std::move(tokenizer_in)),
        options(options_in),
        cache(model->config(), blocks, options.max_sequences, options.kv_cache_type),
        ranks(std::move(ranks_in)),
        teams(options.tensor_parallel, options.threads) {
    if (options.speculative.method == SpeculativeMethod::kDraft) {
      draft = std::make_unique<DraftModel>(options.speculative.draft, options.max_sequences, blocks,
                                           options.max_batched_tokens);
    }
    for (std::size_t slot = options.max_sequences; slot-- > 0;) free_slots.push_back(slot);
  }

  void run() {
    while (true) {
      std::optional<std::string> cancel;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock,
                  [&] { return stopping || cancel_reason || !running.empty() || !queued.empty() || !waiting.empty(); });
        if (stopping) break;
        cancel = std::exchange(cancel_reason, std::nullopt);
        take_waiting();
      }
      if (cancel) {
        cancel_everything(*cancel);
        continue;
      }
      // A failure here (memory, a callback's) ends the step's requests, not the server.
      try {
        schedule_and_step();
      } catch (const std::exception& error) {
        for (auto& sequence : running) finish(*sequence, FinishReason::kError, error.what());
      }
      release_finished();
    }
    {
      std::lock_guard lock(mutex);
      take_waiting();
    }
    cancel_everything("the server is shutting down");
  }

  void take_waiting() {  // with the mutex held
    for (auto& sequence : waiting) queued.push_back(std::move(sequence));
    waiting.clear();
    queued_choices += std::exchange(waiting_choices, 0);
  }

  void cancel_everything(const std::string& reason) {
    for (auto& sequence : running) finish(*sequence, FinishReason::kCancelled, reason);
    while (!queued.empty()) finish_queued(FinishReason::kCancelled, reason);
    release_finished();
  }

  void finish_queued(FinishReason reason, std::string_view error) {
    SequencePtr sequence = std::move(queued.front());
    queued.pop_front();
    finish(*sequence, reason, error);
  }

  void release_slot(std::size_t slot) {
    cache.release(slot);
    if (draft) draft->release(slot);
  }

  void release_finished() {
    for (auto it = running.begin(); it != running.end();) {
      if ((*it)->done) {
        release_slot((*it)->slot);
        free_slots.push_back((*it)->slot);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    std::size_t choices = 0;
    for (const auto& sequence : queued) choices += sequence->choices();
    std::lock_guard lock(mutex);
    running_count = running.size();
    queued_choices = choices;
    totals.kv_blocks_used = cache.total_blocks() - cache.free_blocks();
    totals.kv_blocks_cached = cache.cached_blocks();
  }

  // The youngest running sequence back to the front of the queue with its blocks freed:
  // computed again when there is room (the prefix cache keeps much of it), its tokens and sampler
  // kept, so its output is unchanged. `counted` unless it was only just admitted.
  void preempt_youngest(bool counted = true) {
    Sequence& sequence = *running.back();
    release_slot(sequence.slot);
    free_slots.push_back(sequence.slot);
    sequence.processed = sequence.scheduled = 0;
    sequence.preempted = counted;
    sequence.proposal.clear();
    sequence.proposal_distributions.clear();
    queued.push_front(std::move(running.back()));
    running.pop_back();
    if (!counted) return;
    std::lock_guard lock(mutex);
    ++totals.preemptions;
  }

  // Room in the cache for this step's tokens of `sequence`, preempting younger sequences (and at
  // last the sequence itself) while there is none; false when the sequence itself was preempted.
  bool make_room(Sequence& sequence, std::size_t count) {
    while (true) {
      Status status = cache.prepare(sequence.slot, sequence.processed, sequence.processed + count);
      if (status.ok()) return true;
      if (status.code() != StatusCode::kResourceExhausted) throw std::runtime_error(status.message());
      const bool itself = running.back().get() == &sequence;
      preempt_youngest();
      if (itself) return false;
    }
  }

  // A queued sequence starts in a free slot, taking what the prefix cache holds of its tokens
  // (all but the last, whose logits it needs).
  void admit(SequencePtr sequence) {
    sequence->slot = free_slots.back();
    free_slots.pop_back();
    if (options.prefix_caching) {
      sequence->processed = cache.attach_cached_prefix(sequence->slot, sequence->tokens, sequence->request.cache_salt,
                                                       sequence->tokens.size() - 1);
      std::lock_guard lock(mutex);
      ++(sequence->processed > 0 ? totals.prefix_hits : totals.prefix_misses);
      totals.cached_prompt_tokens += sequence->processed;
    }
    running.push_back(std::move(sequence));
  }

  // One step, vLLM's way: every decoding sequence's token first, then prompt chunks of running
  // sequences, then queued sequences admitted, all under the step's token budget; then one
  // forward pass, and each sequence whose tokens are all computed samples.
  void schedule_and_step() {
    for (auto& sequence : running) {
      if (sequence->request.cancelled && sequence->request.cancelled()) finish(*sequence, FinishReason::kCancelled, {});
    }
    release_finished();
    for (auto& sequence : queued) sequence->preempted = false;
    std::size_t budget = options.max_batched_tokens;
    std::vector<Sequence*> decoding;
    for (auto& sequence : running) {
      sequence->scheduled = 0;
      if (sequence->decoding()) decoding.push_back(sequence.get());
    }
    propose(decoding, budget - std::min(budget, decoding.size()));
    auto schedule = [&](Sequence& sequence, std::size_t wanted) {
      const std::size_t count = std::min(wanted, budget);
      if (count == 0 || !make_room(sequence, count)) return;
      sequence.scheduled = count;
      if (!sequence.proposal.empty()) sequence.proposal.resize(count - 1);
      budget -= count;
    };
    for (std::size_t i = 0; i < running.size(); ++i) {
      if (running[i]->decoding()) schedule(*running[i], 1 + running[i]->proposal.size());
    }
    for (std::size_t i = 0; i < running.size() && budget > 0; ++i) {
      Sequence& sequence = *running[i];
      if (!sequence.decoding() && sequence.scheduled == 0)
        schedule(sequence, sequence.tokens.size() - sequence.processed);
    }
    // Queued sequences join while the budget, the slots and the cache allow; none after a
    // preemption, which put its sequence first in the queue: the cache is short.
    while (budget > 0 && !queued.empty() && !free_slots.empty() && !queued.front()->preempted) {
      if (queued.front()->request.cancelled && queued.front()->request.cancelled()) {
        finish_queued(FinishReason::kCancelled, {});
        continue;
      }
      admit(std::move(queued.front()));
      queued.pop_front();
      Sequence& sequence = *running.back();
      const std::size_t count = std::min(sequence.tokens.size() - sequence.processed, budget);
      if (!cache.prepare(sequence.slot, sequence.processed, sequence.processed + count).ok()) {
        preempt_youngest(false);
        break;
      }
      sequence.scheduled = count;
      budget -= count;
    }
    {
      std::lock_guard lock(mutex);
      running_count = running.size();
    }
    run_batch();
  }

  // Proposals for the decoding sequences' next tokens (prompt lookup or the draft model), within
  // `spare` tokens of the step's budget.
  void propose(const std::vector<Sequence*>& decoding, std::size_t spare) {
    const SpeculativeOptions& speculative = options.speculative;
    if (speculative.method == SpeculativeMethod::kNone) return;
    draft_jobs.clear();
    for (Sequence* sequence : decoding) {
      sequence->proposal.clear();
      sequence->proposal_distributions.clear();
      // A leader's followers fork at its prompt's end: it proposes nothing until they have.
      if (!sequence->followers.empty()) continue;
      // Every proposed token may be emitted, with one more: within the limit and the context.
      const std::size_t room = std::min({sequence->proposal_length, spare,
                                         sequence->limit - std::min(sequence->limit, sequence->generated + 1),
                                         options.context - sequence->tokens.size()});
      if (room == 0) continue;
      if (speculative.method == SpeculativeMethod::kNgram) {
        sequence->proposal = propose_ngram(sequence->tokens, speculative.lookup_min, speculative.lookup_max, room);
        spare -= sequence->proposal.size();
        continue;
      }
      if (!sequence->draft_sampler) {
        SamplingParams params = sequence->request.sampling;
        if (params.seed) params.seed = *params.seed ^ 0x6472616674ULL;  // its own reproducible draws
        sequence->draft_sampler.emplace(params);
      }
      draft_jobs.push_back({sequence->slot, sequence->tokens, room, &*sequence->draft_sampler, &sequence->proposal,
                            sequence->sampler.greedy() ? nullptr : &sequence->proposal_distributions});
      spare -= room;
    }
    if (!draft_jobs.empty()) draft->propose(draft_jobs, teams.team(0));
  }

  // The step's batch: each scheduled sequence's tokens (and proposals after a decoding one's last
  // token), the logits wanted where a sequence samples (every proposed position).
  void run_batch() {
    batch.clear();
    wants.clear();
    sampled.clear();
    std::size_t rows = 0;
    for (auto& sequence : running) {
      if (sequence->done || sequence->scheduled == 0) continue;
      const std::size_t end = sequence->processed + sequence->scheduled, known = sequence->tokens.size();
      const bool speculating = !sequence->proposal.empty();
      for (std::size_t position = sequence->processed; position < end; ++position) {
        const std::int32_t token = position < known ? sequence->tokens[position] : sequence->proposal[position - known];
        batch.push_back({sequence->slot, position, token});
        wants.push_back(speculating);
      }
      if (end >= known) {
        wants.back() = true;
        const std::size_t count = speculating ? sequence->scheduled : 1;
        sampled.push_back({sequence.get(), rows, count});
        rows += count;
      }
    }
    if (batch.empty()) return;
    Status status = forward(*ranks, cache, batch, wants, logits, teams);
    if (!status.ok()) {
      for (auto& sequence : running) finish(*sequence, FinishReason::kError, status.message());
      return;
    }
    for (auto& sequence : running) {
      if (sequence->proposal.empty()) sequence->processed += std::exchange(sequence->scheduled, 0);
    }
    const std::size_t vocabulary = model->config().vocabulary;
    for (const Rows& entry : sampled) {
      Sequence& sequence = *entry.sequence;
      std::span<float> row(logits.data() + entry.first * vocabulary, vocabulary);
      if (!sequence.proposal.empty()) {
        check_proposal(sequence, entry.first);
        continue;
      }
      if (!sequence.followers.empty()) fork_followers(sequence, row);
      step(sequence, row);
    }
    if (options.prefix_caching) {
      for (auto& sequence : running) cache.publish(sequence->slot, sequence->tokens, sequence->request.cache_salt);
    }
  }

  // A speculating sequence's rows: the token at each proposed position judged against the
  // proposal, emitted, until one is not the proposed token (or all were, and the last row gives
  // one more). The cache keeps the positions whose tokens stand.
  void check_proposal(Sequence& sequence, std::size_t first_row) {
    const std::size_t vocabulary = model->config().vocabulary;
    const std::size_t proposed = sequence.proposal.size(), fed = sequence.processed;
    std::size_t accepted = 0;
    for (std::size_t j = 0; j <= proposed && !sequence.done; ++j) {
      std::span<float> row(logits.data() + (first_row + j) * vocabulary, vocabulary);
      bool matched = false;
      if (j < proposed) {
        const TokenDistribution* draft_distribution =
            sequence.proposal_distributions.empty() ? nullptr : &sequence.proposal_distributions[j];
        emit(sequence, sequence.sampler.judge(row, sequence.tokens, sequence.proposal[j], draft_distribution, matched));
      } else {
        emit(sequence, sequence.sampler.sample(row, sequence.tokens));
      }
      if (!matched) break;
      ++accepted;
    }
    sequence.processed = fed + 1 + accepted;
    sequence.scheduled = 0;
    cache.set_filled(sequence.slot, sequence.processed);
    // The draft saw the proposals but the last: those accepted stand in its cache too.
    if (draft) draft->keep(sequence.slot, fed + 1 + std::min(accepted, proposed - 1));
    // Hugging Face's assisted-generation schedule (there for assistant models, here for both
    // drafters): two more after the length asked for was proposed and taken whole, one fewer (at
    // least one) otherwise. A drafter that keeps missing then costs little more than plain decoding
    // (a pass of two tokens), where verifying its full proposals cost more than it won.
    const std::size_t asked = sequence.proposal_length;
    sequence.proposal_length =
        accepted == asked ? std::min(asked + 2, options.speculative.tokens) : std::max<std::size_t>(asked, 2) - 1;
    sequence.proposal.clear();
    sequence.proposal_distributions.clear();
    std::lock_guard lock(mutex);
    ++totals.speculative_checks;
    totals.draft_tokens += proposed;
    totals.accepted_tokens += accepted;
  }

  // The choices waiting on `leader`'s prompt share its blocks and sample from its logits; those
  // with no free slot queue at the front as sequences of their own.
  // Each follower leaves the leader as it is handed on, so a callback that throws leaves the rest
  // with the leader (finish() queues them) and none twice.
  void fork_followers(Sequence& leader, std::span<const float> row) {
    std::vector<float> copy;
    while (!leader.followers.empty()) {
      SequencePtr follower = std::move(leader.followers.back());
      leader.followers.pop_back();
      if (free_slots.empty()) {
        queued.push_front(std::move(follower));
        continue;
      }
      follower->slot = free_slots.back();
      free_slots.pop_back();
      if (Status forked = cache.fork(leader.slot, follower->slot); !forked.ok()) {
        free_slots.push_back(follower->slot);
        queued.push_front(std::move(follower));
        throw std::runtime_error(forked.message());
      }
      follower->processed = leader.processed;
      copy.assign(row.begin(), row.end());
      Sequence& forked = *follower;
      running.push_back(std::move(follower));
      {
        std::lock_guard lock(mutex);
        ++totals.forks;
      }
      step(forked, copy);
    }
  }

  void step(Sequence& sequence, std::span<float> logits) {
    emit(sequence, sequence.sampler.sample(logits, sequence.tokens));
  }

  // A token the sequence chose: counted, checked against its end tokens, stop strings and limit,
  // and its released text reported.
  void emit(Sequence& sequence, SampledToken next) {
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

  // Answers the sequence. Choices still waiting on it queue on their own.
  void finish(Sequence& sequence, FinishReason reason, std::string_view error, std::string held = {}) {
    for (auto& follower : sequence.followers) {
      if (follower) queued.push_front(std::move(follower));
    }
    sequence.followers.clear();
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

namespace {

Status check_speculative(const SpeculativeOptions& speculative, const LlamaConfig& config, std::size_t context) {
  if (speculative.method == SpeculativeMethod::kNone) return {};
  if (speculative.tokens == 0 || speculative.tokens > kMaxSpeculativeTokens) {
    return invalid_argument(fmt::format("num_speculative_tokens must be between 1 and {}", kMaxSpeculativeTokens));
  }
  if (speculative.method == SpeculativeMethod::kNgram) {
    if (speculative.lookup_min == 0 || speculative.lookup_min > speculative.lookup_max || speculative.lookup_max > 64) {
      return invalid_argument("prompt lookup needs 1 <= prompt_lookup_min <= prompt_lookup_max <= 64");
    }
    return {};
  }
  if (!speculative.draft) return invalid_argument("speculative decoding with a draft model needs the draft model");
  const LlamaConfig& draft = speculative.draft->config();
  if (draft.vocabulary != config.vocabulary) {
    return invalid_argument(
        fmt::format("the draft model's vocabulary has {} tokens, the model's {}: they must be the same",
                    draft.vocabulary, config.vocabulary));
  }
  if (draft.context < context) {
    return invalid_argument(
        fmt::format("the draft model's context of {} tokens is shorter than the {} served", draft.context, context));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::start(std::shared_ptr<const LlamaModel> model, Tokenizer tokenizer,
                                              const EngineOptions& options) {
  EngineOptions chosen = options;
  const LlamaConfig& config = model->config();
  if (chosen.context == 0) chosen.context = std::min(config.context, kDefaultContextCap);
  if (chosen.context > config.context) {
    return invalid_argument(
        fmt::format("the context of {} tokens is longer than the model's {}", chosen.context, config.context));
  }
  if (chosen.max_sequences == 0 || chosen.max_sequences > kMaxEngineSequences) {
    return invalid_argument(fmt::format("max_num_seqs must be between 1 and {}", kMaxEngineSequences));
  }
  if (chosen.max_batched_tokens < chosen.max_sequences || chosen.max_batched_tokens > (std::size_t{1} << 20)) {
    return invalid_argument(fmt::format(
        "max_num_batched_tokens ({}) must be at least max_num_seqs ({}), so every running sequence decodes each step, "
        "and at most 1048576",
        chosen.max_batched_tokens, chosen.max_sequences));
  }
  if (Status speculative = check_speculative(chosen.speculative, config, chosen.context); !speculative.ok()) {
    return speculative;
  }
  // Team threads spin between loops: more than the cores only take turns burning them.
  if (const int cores = default_thread_count(); chosen.threads > cores) {
    log_warn(fmt::format("{} threads asked for, {} cores to run them: using {}", chosen.threads, cores, cores));
    chosen.threads = cores;
  }
  // A rank is at least one thread: ranks that outnumber the threads would take turns at each
  // all-reduce.
  if (const int threads = chosen.threads > 0 ? chosen.threads : default_thread_count();
      chosen.tensor_parallel > static_cast<std::size_t>(threads)) {
    return invalid_argument(fmt::format("tensor parallelism over {} ranks needs at least as many threads; {} here",
                                        chosen.tensor_parallel, threads));
  }
  // The pool is reserved and its pages committed whole at start (KvCache), from the budget;
  // by default enough for every sequence's whole context, within kDefaultKvCacheBytes and, with a
  // draft model's pool of as many blocks, half the memory available now.
  const std::uint64_t block_bytes = KvCache::block_bytes(config, chosen.kv_cache_type);
  const std::uint64_t draft_block_bytes = chosen.speculative.method == SpeculativeMethod::kDraft
                                              ? KvCache::block_bytes(chosen.speculative.draft->config())
                                              : 0;
  const std::uint64_t sequence_blocks = (chosen.context + kKvBlockTokens - 1) / kKvBlockTokens;
  const std::optional<std::uint64_t> available = available_memory_bytes();
  const bool budget_chosen = chosen.kv_cache_bytes > 0;
  if (!budget_chosen) {
    const std::uint64_t half_available =
        available ? *available / 2 / (block_bytes + draft_block_bytes) * block_bytes : UINT64_MAX;
    chosen.kv_cache_bytes = std::min<std::uint64_t>(chosen.max_sequences * sequence_blocks * block_bytes,
                                                    std::min(kDefaultKvCacheBytes, half_available));
    chosen.kv_cache_bytes = std::max(sequence_blocks * block_bytes, chosen.kv_cache_bytes);
  }
  const std::uint64_t blocks = chosen.kv_cache_bytes / block_bytes;
  const std::uint64_t committed = blocks * (block_bytes + draft_block_bytes);
  constexpr double kMiB = 1 << 20;
  // An 8-bit cache is as small as they come: suggested only when the cache is wider.
  const bool eight_bit = kv_cache_type_is_8_bit(chosen.kv_cache_type);
  const std::string smaller = eight_bit ? "" : " or keep keys and values smaller (--kv-cache-dtype int8)";
  if (available && committed > *available) {
    // Committing more than the kernel has would wake the OOM killer, not fail.
    return resource_exhausted(fmt::format(
        "a key/value cache of {:.1f} MiB{} is more than the {:.1f} MiB of memory available now (MemAvailable, "
        "within the cgroup's limit); the cache is committed whole at start: {}",
        static_cast<double>(committed) / kMiB,
        draft_block_bytes > 0 ? " (with the draft model's pool of as many blocks)" : "",
        static_cast<double>(*available) / kMiB,
        budget_chosen ? "lower --kv-cache-mb" : fmt::format("lower --ctx or --max-num-seqs{}", smaller)));
  }
  if (blocks < sequence_blocks) {
    std::uint64_t weights = 0;
    for (const GgufTensor& tensor : model->file().tensors()) weights += tensor.bytes;
    return resource_exhausted(fmt::format(
        "a key/value cache of {:.1f} MiB holds {} blocks of {} tokens ({:.3f} MiB each as {} for this model, whose "
        "weights take {:.1f} MiB); one sequence of {} tokens needs {} blocks ({:.1f} MiB): raise the cache to at least "
        "that (--kv-cache-mb){}lower the context (--ctx){}",
        static_cast<double>(chosen.kv_cache_bytes) / kMiB, blocks, kKvBlockTokens,
        static_cast<double>(block_bytes) / kMiB, kv_cache_type_name(chosen.kv_cache_type),
        static_cast<double>(weights) / kMiB, chosen.context, sequence_blocks,
        static_cast<double>(sequence_blocks * block_bytes) / kMiB, eight_bit ? " or " : ", ", smaller));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto ranks, TensorParallelModel::split(std::move(model), chosen.tensor_parallel));
  if (ranks->ranks().size() > 1) {
    log_info(fmt::format("the forward pass is split over {} ranks; their shards take {:.1f} MiB besides the model",
                         ranks->ranks().size(), static_cast<double>(ranks->shard_bytes()) / (1 << 20)));
  }
  // Said before, since committing gigabytes takes seconds; why it is committed whole: KvCache.
  const std::uint64_t running_blocks = chosen.max_sequences * sequence_blocks;
  log_info(fmt::format(
      "committing the key/value cache: {:.1f} MiB, {} blocks of {} tokens as {}{}; {} sequences of {} tokens hold at "
      "most {} blocks at once{}",
      static_cast<double>(committed) / kMiB, blocks, kKvBlockTokens, kv_cache_type_name(chosen.kv_cache_type),
      draft_block_bytes > 0 ? " (with the draft model's pool)" : "", chosen.max_sequences, chosen.context,
      std::min(running_blocks, blocks),
      blocks > running_blocks
          ? fmt::format(", so {:.0f}% of the pool only keeps cached prefixes (--kv-cache-mb {} would hold them all)",
                        100.0 * static_cast<double>(blocks - running_blocks) / static_cast<double>(blocks),
                        (running_blocks * block_bytes + (1 << 20) - 1) >> 20)
          : ""));
  const std::int64_t committing = monotonic_ns();
  try {
    auto state = std::make_unique<State>(std::move(ranks), std::move(tokenizer), chosen, blocks);
    log_info(
        fmt::format("key/value cache committed in {:.1f} s", static_cast<double>(monotonic_ns() - committing) * 1e-9));
    State* raw = state.get();
    state->thread = std::thread([raw] { raw->run(); });
    return std::unique_ptr<Engine>(new Engine(std::move(state)));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(
        fmt::format("no memory for the key/value cache ({:.1f} MB)", static_cast<double>(blocks * block_bytes) / 1e6));
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
  const std::size_t context = state_->options.context;
  for (const GenerationRequest& request : requests) {
    if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
    for (std::int32_t token : request.prompt) {
      if (token < 0 || static_cast<std::size_t>(token) >= vocabulary) {
        return invalid_argument(fmt::format("token {} is outside the vocabulary of {}", token, vocabulary));
      }
    }
    if (request.prompt.size() >= context) {
      return invalid_argument(
          fmt::format("the prompt has {} tokens; the context holds {} with the reply", request.prompt.size(), context));
    }
    SLIPWAY_RETURN_IF_ERROR(validate(request.sampling));
  }
  // A request with the prompt (and salt) of one before it is that one's follower: its prompt is
  // computed once.
  const auto submitted = Clock::now();
  std::vector<SequencePtr> leaders;
  std::uint64_t prompt_tokens = 0;
  for (auto& request : requests) {
    prompt_tokens += request.prompt.size();
    auto sequence = std::make_unique<Sequence>(std::move(request), submitted);
    sequence->limit = std::min(sequence->request.max_tokens, context - sequence->tokens.size());
    sequence->proposal_length = state_->options.speculative.tokens;
    auto leader = std::find_if(leaders.begin(), leaders.end(), [&](const SequencePtr& candidate) {
      return candidate->tokens == sequence->tokens && candidate->request.cache_salt == sequence->request.cache_salt;
    });
    if (leader == leaders.end()) {
      leaders.push_back(std::move(sequence));
    } else {
      (*leader)->followers.push_back(std::move(sequence));
    }
  }
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopping) return unavailable("the server is shutting down");
    const std::size_t waiting = state_->waiting_choices + state_->queued_choices;
    if (waiting + requests.size() > state_->options.max_waiting) {
      return resource_exhausted(
          fmt::format("{} generations are already waiting for this model (at most {}); retry later", waiting,
                      state_->options.max_waiting));
    }
    state_->waiting_choices += requests.size();
    state_->totals.prompt_tokens += prompt_tokens;
    for (auto& leader : leaders) state_->waiting.push_back(std::move(leader));
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
  stats.kv_blocks = state_->cache.total_blocks();
  stats.running = state_->running_count;
  stats.waiting = state_->waiting_choices + state_->queued_choices;
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
  out +=
      fmt::format("slipway_llm_requests_waiting{{{}}} {}\n", labels, state_->waiting_choices + state_->queued_choices);
  for (FinishReason reason :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled, FinishReason::kError}) {
    out += fmt::format("slipway_llm_requests_finished_total{{{},reason=\"{}\"}} {}\n", labels,
                       finish_reason_name(reason), state_->finished[static_cast<std::size_t>(reason)]);
  }
  const EngineStats& totals = state_->totals;
  out += fmt::format("slipway_llm_prompt_tokens_cached_total{{{}}} {}\n", labels, totals.cached_prompt_tokens);
  out += fmt::format("slipway_llm_prefix_cache_hits_total{{{}}} {}\n", labels, totals.prefix_hits);
  out += fmt::format("slipway_llm_prefix_cache_misses_total{{{}}} {}\n", labels, totals.prefix_misses);
  out += fmt::format("slipway_llm_preemptions_total{{{}}} {}\n", labels, totals.preemptions);
  out += fmt::format("slipway_llm_forked_sequences_total{{{}}} {}\n", labels, totals.forks);
  const std::size_t blocks = state_->cache.total_blocks();
  out += fmt::format("slipway_llm_kv_cache_blocks{{{}}} {}\n", labels, blocks);
  out += fmt::format("slipway_llm_kv_cache_blocks_used{{{}}} {}\n", labels, totals.kv_blocks_used);
  out += fmt::format("slipway_llm_kv_cache_blocks_cached{{{}}} {}\n", labels, totals.kv_blocks_cached);
  out += fmt::format("slipway_llm_kv_cache_usage_ratio{{{}}} {}\n", labels,
                     static_cast<double>(totals.kv_blocks_used) / static_cast<double>(blocks));
  out += fmt::format("slipway_llm_spec_decode_checks_total{{{}}} {}\n", labels, totals.speculative_checks);
  out += fmt::format("slipway_llm_spec_decode_draft_tokens_total{{{}}} {}\n", labels, totals.draft_tokens);
  out += fmt::format("slipway_llm_spec_decode_accepted_tokens_total{{{}}} {}\n", labels, totals.accepted_tokens);
  out += fmt::format("slipway_llm_spec_decode_acceptance_ratio{{{}}} {}\n", labels,
                     totals.draft_tokens == 0
                         ? 0.0
                         : static_cast<double>(totals.accepted_tokens) / static_cast<double>(totals.draft_tokens));
  state_->time_to_first_token.write(out, "slipway_llm_time_to_first_token_seconds", labels);
  state_->inter_token_latency.write(out, "slipway_llm_inter_token_latency_seconds", labels);
  return out;
}

}  // namespace slipway::llm
