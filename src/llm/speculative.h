// Speculative decoding's proposers: n-gram lookup in a sequence's own tokens, and a draft model
// with its own KV cache kept in step with each sequence. Private to llm (the engine's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "slipway/llm.h"

namespace slipway::llm {

// A batch of proposals, one job per sequence.
struct DraftJob {
  std::size_t slot = 0;                  // the sequence's slot (its draft cache sequence)
  std::span<const std::int32_t> tokens;  // its tokens so far (prompt and generated)
  std::size_t count = 0;                 // tokens wanted
  Sampler* sampler = nullptr;            // the draft's sampler for this sequence
  std::vector<std::int32_t>* proposal = nullptr;
  // The draft's distribution at each proposed token (sampled decoding); null for greedy.
  std::vector<TokenDistribution>* distributions = nullptr;
};

// A smaller model (or the same one quantized harder) proposing tokens for the target to check.
// Its cache holds each slot's tokens as far as they still match the sequence's.
class DraftModel {
 public:
  // Passes of at most `max_pass_tokens` tokens (the engine's max_num_batched_tokens).
  DraftModel(std::shared_ptr<const LlamaModel> model, std::size_t slots, std::size_t blocks,
             std::size_t max_pass_tokens);
  // Fills each job's proposal with up to `count` tokens: forward passes over the tokens the draft
  // has not seen (all the jobs together, whole prompts after a prefill or a preemption), then one
  // per further token. A job whose slot the cache has no room for gets none.
  void propose(std::span<DraftJob> jobs, ThreadTeam& team);
  // Positions [0, valid) of the slot still hold the sequence's tokens.
  void keep(std::size_t slot, std::size_t valid);
  void release(std::size_t slot);
  const LlamaModel& model() const { return *model_; }

 private:
  std::shared_ptr<const LlamaModel> model_;
  // The batch in passes of at most max_pass_tokens_, the wanted rows' logits gathered in order:
  // what a pass holds is bounded as the target's is.
  Status run_batch(ThreadTeam& team);
  KvCache cache_;
  std::size_t max_pass_tokens_;
  std::vector<BatchToken> batch_;
  std::vector<bool> wants_, pass_wants_;
  std::vector<float> logits_, pass_logits_;
  std::vector<std::int32_t> history_;
};

}  // namespace slipway::llm
