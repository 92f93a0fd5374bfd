// Speculative decoding's proposers: prompt lookup (n-grams) and a draft model.
#include "speculative.h"

#include <algorithm>

namespace slipway::llm {

std::vector<std::int32_t> propose_ngram(std::span<const std::int32_t> tokens, std::size_t min_match,
                                        std::size_t max_match, std::size_t count) {
  for (std::size_t length = std::min(max_match, tokens.size() - std::min(tokens.size(), std::size_t{1}));
       length >= std::max<std::size_t>(min_match, 1); --length) {
    auto suffix = tokens.subspan(tokens.size() - length);
    // The latest earlier occurrence, so the continuation is the most recent one.
    for (std::size_t start = tokens.size() - length; start-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + static_cast<std::ptrdiff_t>(start))) continue;
      const std::size_t from = start + length, to = std::min(tokens.size(), from + count);
      return {tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.begin() + static_cast<std::ptrdiff_t>(to)};
    }
  }
  return {};
}

DraftModel::DraftModel(std::shared_ptr<const LlamaModel> model, std::size_t slots, std::size_t blocks,
                       std::size_t max_pass_tokens)
    : model_(std::move(model)),
      cache_(model_->config(), blocks, slots),
      max_pass_tokens_(std::max<std::size_t>(max_pass_tokens, 1)) {}

Status DraftModel::run_batch(ThreadTeam& team) {
  if (batch_.size() <= max_pass_tokens_) return forward(*model_, cache_, batch_, wants_, logits_, team);
  logits_.clear();
  for (std::size_t first = 0; first < batch_.size(); first += max_pass_tokens_) {
    const std::size_t count = std::min(max_pass_tokens_, batch_.size() - first);
    const auto from = wants_.begin() + static_cast<std::ptrdiff_t>(first);
    pass_wants_.assign(from, from + static_cast<std::ptrdiff_t>(count));
    SLIPWAY_RETURN_IF_ERROR(
        forward(*model_, cache_, std::span(batch_).subspan(first, count), pass_wants_, pass_logits_, team));
    logits_.insert(logits_.end(), pass_logits_.begin(), pass_logits_.end());
  }
  return {};
}

void DraftModel::keep(std::size_t slot, std::size_t valid) {
  cache_.set_filled(slot, std::min(cache_.filled(slot), valid));
}

void DraftModel::release(std::size_t slot) { cache_.release(slot); }

void DraftModel::propose(std::span<DraftJob> jobs, ThreadTeam& team) {
  const std::size_t vocabulary = model_->config().vocabulary;
  std::vector<DraftJob*> active;
  batch_.clear();
  wants_.clear();
  // The tokens the draft has not seen, through its last one: its logits give the first proposal.
  for (DraftJob& job : jobs) {
    job.proposal->clear();
    if (job.distributions) job.distributions->clear();
    const std::size_t end = job.tokens.size() + job.count - 1;
    std::size_t first = std::min(cache_.filled(job.slot), job.tokens.size() - 1);
    if (job.count == 0 || !cache_.prepare(job.slot, first, end).ok()) {
      cache_.release(job.slot);
      continue;
    }
    for (std::size_t position = first; position < job.tokens.size(); ++position) {
      batch_.push_back({job.slot, position, job.tokens[position]});
      wants_.push_back(false);
    }
    wants_.back() = true;
    active.push_back(&job);
  }
  while (!active.empty()) {
    if (!run_batch(team).ok()) {
      for (DraftJob* job : active) cache_.release(job->slot);
      return;
    }
    std::vector<DraftJob*> going;
    batch_.clear();
    wants_.clear();
    for (std::size_t i = 0; i < active.size(); ++i) {
      DraftJob& job = *active[i];
      history_.assign(job.tokens.begin(), job.tokens.end());
      history_.insert(history_.end(), job.proposal->begin(), job.proposal->end());
      std::span<float> row(logits_.data() + i * vocabulary, vocabulary);
      TokenDistribution distribution = job.sampler->distribution(row, history_);
      if (distribution.tokens.empty()) continue;  // logits not finite: propose nothing more
      const std::int32_t token = job.sampler->greedy() ? distribution.tokens.front() : job.sampler->draw(distribution);
      job.proposal->push_back(token);
      if (job.distributions) job.distributions->push_back(std::move(distribution));
      if (job.proposal->size() < job.count) {
        batch_.push_back({job.slot, job.tokens.size() + job.proposal->size() - 1, token});
        wants_.push_back(true);
        going.push_back(&job);
      }
    }
    active = std::move(going);
  }
}

}  // namespace slipway::llm
