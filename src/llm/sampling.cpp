// The next token from a step's logits: penalties, then greedy or a draw from what temperature,
// top-k, top-p and min-p leave, with the log-probabilities OpenAI's logprobs report.
#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

bool within(float value, float low, float high) { return std::isfinite(value) && value >= low && value <= high; }

}  // namespace

Status validate(const SamplingParams& params) {
  if (!within(params.temperature, 0.0f, 2.0f)) return invalid_argument("temperature must be between 0 and 2");
  if (!within(params.top_p, 0.0f, 1.0f) || params.top_p == 0.0f) {
    return invalid_argument("top_p must be greater than 0 and at most 1");
  }
  if (!within(params.min_p, 0.0f, 1.0f)) return invalid_argument("min_p must be between 0 and 1");
  if (!within(params.presence_penalty, -2.0f, 2.0f))
    return invalid_argument("presence_penalty must be between -2 and 2");
  if (!within(params.frequency_penalty, -2.0f, 2.0f)) {
    return invalid_argument("frequency_penalty must be between -2 and 2");
  }
  if (!within(params.repetition_penalty, 0.0f, 10.0f) || params.repetition_penalty == 0.0f) {
    return invalid_argument("repetition_penalty must be greater than 0 and at most 10");
  }
  for (const auto& [token, bias] : params.logit_bias) {
    if (!within(bias, -100.0f, 100.0f))
      return invalid_argument(fmt::format("logit_bias for token {} must be between -100 and 100", token));
  }
  if (params.top_logprobs > kMaxTopLogprobs) {
    return invalid_argument(fmt::format("top_logprobs must be at most {}", kMaxTopLogprobs));
  }
  return {};
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), state_(params.seed ? *params.seed : std::random_device{}() * 0x100000001ULL) {}

double Sampler::uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }

void Sampler::apply_penalties(std::span<float> logits, std::span<const std::int32_t> history) const {
  const auto vocabulary = static_cast<std::int32_t>(logits.size());
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && token < vocabulary) logits[static_cast<std::size_t>(token)] += bias;
  }
  // Penalties, over the window's distinct tokens.
  std::unordered_map<std::int32_t, int> counts;
  for (std::size_t i = history.size() > kPenaltyWindow ? history.size() - kPenaltyWindow : 0; i < history.size(); ++i) {
    if (history[i] >= 0 && history[i] < vocabulary) ++counts[history[i]];
  }
  for (const auto& [token, count] : counts) {
    float& logit = logits[static_cast<std::size_t>(token)];
    if (params_.repetition_penalty != 1.0f) {
      logit = logit > 0 ? logit / params_.repetition_penalty : logit * params_.repetition_penalty;
    }
    logit -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
}

namespace {

float largest_finite(std::span<const float> logits) {
  float largest = -INFINITY;
  for (float logit : logits) {
    if (std::isfinite(logit)) largest = std::max(largest, logit);
  }
  return largest;
}

// The largest finite logit's token (the lowest id on a tie).
std::int32_t argmax(std::span<const float> logits) {
  std::int32_t best = 0;
  for (std::size_t token = 0; token < logits.size(); ++token) {
    const float logit = logits[token], current = logits[static_cast<std::size_t>(best)];
    if (std::isfinite(logit) && (!std::isfinite(current) || logit > current)) best = static_cast<std::int32_t>(token);
  }
  return best;
}

}  // namespace

SampledToken Sampler::report(std::span<const float> logits, std::int32_t token) const {
  const float largest = largest_finite(logits);
  if (!std::isfinite(largest)) return {{token, -INFINITY}, {}};
  if (!params_.logprobs && params_.top_logprobs == 0) return {{token, NAN}, {}};
  // The model's log-probabilities (after penalties), for logprobs: log-softmax in double.
  double total = 0;
  for (float logit : logits) {
    if (std::isfinite(logit)) total += std::exp(static_cast<double>(logit - largest));
  }
  const double log_total = std::log(total) + largest;
  auto logprob = [&](std::int32_t id) {
    float logit = logits[static_cast<std::size_t>(id)];
    return std::isfinite(logit) ? static_cast<float>(logit - log_total) : -INFINITY;
  };
  SampledToken result;
  if (params_.top_logprobs > 0) {
    std::vector<std::int32_t> order(logits.size());
    for (std::size_t id = 0; id < order.size(); ++id) order[id] = static_cast<std::int32_t>(id);
    std::size_t keep = std::min<std::size_t>(params_.top_logprobs, order.size());
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
        [&](std::int32_t a, std::int32_t b) { return logprob(a) > logprob(b) || (logprob(a) == logprob(b) && a < b); });
    for (std::size_t i = 0; i < keep; ++i) result.top.push_back({order[i], logprob(order[i])});
  }
  result.chosen = {token, logprob(token)};
  return result;
}

std::size_t Sampler::weigh_candidates(std::span<const float> logits) {
  // Candidates by probability at the temperature, likeliest first (top-k cut before the sort).
  const float largest = largest_finite(logits);
  candidates_.clear();
  for (std::size_t token = 0; token < logits.size(); ++token) {
    float logit = logits[token];
    if (std::isfinite(logit)) {
      candidates_.emplace_back((logit - largest) / params_.temperature, static_cast<std::int32_t>(token));
    }
  }
  auto likelier = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::size_t keep = params_.top_k > 0 ? std::min(params_.top_k, candidates_.size()) : candidates_.size();
  if (keep < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep), candidates_.end(),
                     likelier);
    candidates_.resize(keep);
  }
  std::sort(candidates_.begin(), candidates_.end(), likelier);
  weights_.resize(candidates_.size());
  double sum = 0;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    sum += weights_[i] = std::exp(static_cast<double>(candidates_[i].first));
  }
  // top-p: the shortest head whose probability reaches p; min-p: relative to the likeliest.
  std::size_t cut = candidates_.size();
  if (params_.top_p < 1.0f) {
    double reached = 0;
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      reached += weights_[i] / sum;
      if (reached >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    std::size_t kept = 1;
    while (kept < cut && weights_[kept] >= params_.min_p * weights_[0]) ++kept;
    cut = kept;
  }
  return cut;
}

std::int32_t Sampler::draw_candidate(std::size_t cut) {
  double kept_sum = 0;
  for (std::size_t i = 0; i < cut; ++i) kept_sum += weights_[i];
  double draw = uniform() * kept_sum;
  std::size_t chosen = 0;
  for (double running = weights_[0]; chosen + 1 < cut && running <= draw; running += weights_[++chosen]) {
  }
  return candidates_[chosen].second;
}

SampledToken Sampler::sample(std::span<float> logits, std::span<const std::int32_t> history) {
  apply_penalties(logits, history);
  if (!std::isfinite(largest_finite(logits))) return report(logits, 0);  // nothing to weigh: logprob -inf
  if (params_.temperature == 0.0f) return report(logits, argmax(logits));
  return report(logits, draw_candidate(weigh_candidates(logits)));
}

TokenDistribution Sampler::distribution(std::span<float> logits, std::span<const std::int32_t> history) {
  apply_penalties(logits, history);
  if (!std::isfinite(largest_finite(logits))) return {};
  if (params_.temperature == 0.0f) return {{argmax(logits)}, {1.0}};
  return kept_distribution(weigh_candidates(logits));
}

TokenDistribution Sampler::kept_distribution(std::size_t cut) const {
  std::vector<std::pair<std::int32_t, double>> kept;
  double sum = 0;
  for (std::size_t i = 0; i < cut; ++i) {
    kept.emplace_back(static_cast<std::int32_t>(candidates_[i].second), weights_[i]);
    sum += weights_[i];
  }
  std::sort(kept.begin(), kept.end());
  TokenDistribution result;
  for (const auto& [token, weight] : kept) {
    result.tokens.push_back(token);
    result.probabilities.push_back(weight / sum);
  }
  return result;
}

std::int32_t Sampler::draw(const TokenDistribution& distribution) { return distribution.draw(uniform()); }

SampledToken Sampler::judge(std::span<float> logits, std::span<const std::int32_t> history, std::int32_t drafted,
                            const TokenDistribution* draft, bool& accepted) {
  apply_penalties(logits, history);
  if (!std::isfinite(largest_finite(logits))) {
    accepted = false;
    return report(logits, 0);
  }
  if (params_.temperature == 0.0f) {
    const std::int32_t best = argmax(logits);
    accepted = best == drafted;
    return report(logits, best);
  }
  // The target's processed distribution, as distribution() gives it (penalties already applied).
  const TokenDistribution target = kept_distribution(weigh_candidates(logits));
  const TokenDistribution one_hot{{drafted}, {1.0}};
  const DraftVerdict verdict = judge_draft(target, draft ? *draft : one_hot, drafted, [this] { return uniform(); });
  accepted = verdict.accepted;
  return report(logits, verdict.token);
}

double TokenDistribution::probability(std::int32_t token) const {
  auto found = std::lower_bound(tokens.begin(), tokens.end(), token);
  return found != tokens.end() && *found == token ? probabilities[static_cast<std::size_t>(found - tokens.begin())]
                                                  : 0.0;
}

std::int32_t TokenDistribution::draw(double uniform) const {
  double running = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    running += probabilities[i];
    if (uniform < running) return tokens[i];
  }
  return tokens.empty() ? 0 : tokens.back();
}

DraftVerdict judge_draft(const TokenDistribution& target, const TokenDistribution& draft, std::int32_t drafted,
                         const std::function<double()>& uniform) {
  const double p = target.probability(drafted), q = draft.probability(drafted);
  if (q > 0 && uniform() * q < p) return {true, drafted};  // probability min(1, p / q)
  // Rejected: a token from norm(max(0, p - q)), which is zero outside the target's support.
  TokenDistribution residual;
  double sum = 0;
  for (std::size_t i = 0; i < target.tokens.size(); ++i) {
    const double excess = target.probabilities[i] - draft.probability(target.tokens[i]);
    if (excess > 0) {
      residual.tokens.push_back(target.tokens[i]);
      residual.probabilities.push_back(excess);
      sum += excess;
    }
  }
  if (sum <= 0) return {false, target.draw(uniform())};  // p == q up to rounding
  for (double& probability : residual.probabilities) probability /= sum;
  return {false, residual.draw(uniform())};
}

}  // namespace slipway::llm
