// Sampling: greedy, the filters (top-k, top-p, min-p), the penalties and logit bias, the draw's
// distribution and its seed, and the log-probabilities reported.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

std::vector<float> logits_of(std::initializer_list<float> values) { return std::vector<float>(values); }

std::int32_t draw(const SamplingParams& params, std::vector<float> logits, std::vector<std::int32_t> history = {}) {
  Sampler sampler(params);
  return sampler.sample(logits, history).chosen.token;
}

TEST(Sampling, GreedyTakesTheLargestLogitAndTheLowestIdOnATie) {
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(draw(greedy, logits_of({0.1f, 2.0f, -1.0f, 1.9f})), 1);
  EXPECT_EQ(draw(greedy, logits_of({0.5f, 3.0f, 3.0f})), 1);
  EXPECT_EQ(draw(greedy, logits_of({NAN, -INFINITY, 0.2f, NAN})), 2);
}

TEST(Sampling, AllLogitsNotFiniteGiveTokenZeroWithoutACrash) {
  SamplingParams params;
  Sampler sampler(params);
  std::vector<float> logits = {NAN, NAN, INFINITY};
  SampledToken token = sampler.sample(logits, {});
  EXPECT_EQ(token.chosen.token, 0);
  EXPECT_TRUE(std::isinf(token.chosen.logprob));
}

TEST(Sampling, TheSameSeedGivesTheSameTokensAndAnotherSeedOthers) {
  std::vector<float> flat(1000, 0.0f);
  SamplingParams params;
  params.seed = 42;
  Sampler first(params), second(params);
  params.seed = 43;
  Sampler other(params);
  std::vector<std::int32_t> a, b, c;
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l1 = flat, l2 = flat, l3 = flat;
    a.push_back(first.sample(l1, {}).chosen.token);
    b.push_back(second.sample(l2, {}).chosen.token);
    c.push_back(other.sample(l3, {}).chosen.token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampling, DrawsFollowTheSoftmaxAtTheTemperature) {
  SamplingParams params;
  params.seed = 7;
  params.temperature = 0.5f;
  Sampler sampler(params);
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -1.0f};
  std::vector<double> expected(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) total += expected[i] = std::exp(logits[i] / 0.5);
  std::map<std::int32_t, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> copy = logits;
    ++counts[sampler.sample(copy, {}).chosen.token];
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    double p = expected[i] / total;
    double sd = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(counts[static_cast<std::int32_t>(i)] / static_cast<double>(draws), p, 5 * sd + 1e-4) << i;
  }
}

TEST(Sampling, TopKTopPAndMinPKeepOnlyTheLikeliest) {
  const auto logits = logits_of({3.0f, 2.9f, 0.0f, -5.0f});
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams params;
    params.seed = seed;
    params.top_k = 1;
    EXPECT_EQ(draw(params, logits), 0);
    params.top_k = 2;
    EXPECT_LT(draw(params, logits), 2);
    params.top_k = 0;
    params.top_p = 0.05f;  // the likeliest alone reaches it
    EXPECT_EQ(draw(params, logits), 0);
    params.top_p = 1.0f;
    params.min_p = 0.5f;  // token 1 is 0.9 times as likely as token 0; token 2 is 0.05 times
    EXPECT_LT(draw(params, logits), 2);
  }
}

TEST(Sampling, PenaltiesLowerRepeatedTokensAsSpecified) {
  SamplingParams params;
  params.temperature = 0;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  std::vector<float> logits = {4.0f, -1.0f, 1.0f};
  std::vector<std::int32_t> history = {0, 0, 1};
  sampler.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 4.0f / 2 - 0.5f - 0.5f);    // positive: divided; then presence and 2 x frequency
  EXPECT_FLOAT_EQ(logits[1], -1.0f * 2 - 0.5f - 0.25f);  // negative: multiplied
  EXPECT_FLOAT_EQ(logits[2], 1.0f);                      // not in the history
}

TEST(Sampling, OnlyTheLastWindowOfTokensIsPenalized) {
  SamplingParams params;
  params.temperature = 0;
  params.presence_penalty = 1.0f;
  Sampler sampler(params);
  std::vector<std::int32_t> history(kPenaltyWindow + 1, 1);
  history[0] = 0;  // outside the window
  std::vector<float> logits = {1.0f, 1.0f};
  sampler.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 0.0f);
}

TEST(Sampling, LogitBiasCanForceOrForbidAToken) {
  SamplingParams params;
  params.seed = 1;
  params.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(draw(params, logits_of({5.0f, 5.0f, 0.0f})), 2);
  params.logit_bias = {{0, -100.0f}};
  params.temperature = 0;
  EXPECT_EQ(draw(params, logits_of({5.0f, 4.0f, 0.0f})), 1);
}

TEST(Sampling, LogprobsAreTheModelsLogSoftmaxWithTheTopAlternatives) {
  SamplingParams params;
  params.temperature = 0;
  params.top_logprobs = 2;
  Sampler sampler(params);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  SampledToken token = sampler.sample(logits, {});
  double total = std::exp(1.0) + std::exp(3.0) + std::exp(2.0);
  EXPECT_EQ(token.chosen.token, 1);
  EXPECT_NEAR(token.chosen.logprob, 3.0 - std::log(total), 1e-6);
  ASSERT_EQ(token.top.size(), 2u);
  EXPECT_EQ(token.top[0].token, 1);
  EXPECT_EQ(token.top[1].token, 2);
  EXPECT_NEAR(token.top[1].logprob, 2.0 - std::log(total), 1e-6);
}

TEST(Sampling, LogprobsAreComputedOnlyWhenAsked) {
  SamplingParams params;
  params.temperature = 0;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  SampledToken unasked = Sampler(params).sample(logits, {});
  EXPECT_EQ(unasked.chosen.token, 1);
  EXPECT_TRUE(std::isnan(unasked.chosen.logprob));
  EXPECT_TRUE(unasked.top.empty());
  params.logprobs = true;
  SampledToken asked = Sampler(params).sample(logits, {});
  EXPECT_NEAR(asked.chosen.logprob, 3.0 - std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_TRUE(asked.top.empty());
}

TEST(Sampling, ParametersOutOfRangeAreRefusedByName) {
  auto message = [](auto change) {
    SamplingParams params;
    change(params);
    return validate(params).message();
  };
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  EXPECT_NE(message([](SamplingParams& p) { p.temperature = -1; }).find("temperature"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.temperature = NAN; }).find("temperature"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.top_p = 0; }).find("top_p"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.min_p = 2; }).find("min_p"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.presence_penalty = 3; }).find("presence_penalty"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.repetition_penalty = 0; }).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.top_logprobs = 21; }).find("top_logprobs"), std::string::npos);
  EXPECT_NE(message([](SamplingParams& p) { p.logit_bias = {{0, INFINITY}}; }).find("logit_bias"), std::string::npos);
}

// Speculative sampling's rule: whatever the draft proposes, what comes out is distributed as the
// target's distribution. 200,000 trials on a four-token vocabulary, checked by a chi-squared
// test at 0.1% (its critical value for 3 degrees of freedom is 16.27); the draws are seeded, so
// the test gives the same result every run.
double chi_squared(const std::vector<std::size_t>& counts, const std::vector<double>& expected, std::size_t trials) {
  double statistic = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double wanted = expected[i] * static_cast<double>(trials);
    statistic += (static_cast<double>(counts[i]) - wanted) * (static_cast<double>(counts[i]) - wanted) / wanted;
  }
  return statistic;
}

TEST(SpeculativeSampling, TheRejectionRuleGivesTheTargetsDistribution) {
  const TokenDistribution target{{0, 1, 2, 3}, {0.1, 0.2, 0.3, 0.4}};
  std::uint64_t state = 12345;
  auto uniform = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  constexpr std::size_t kTrials = 200000;
  struct Case {
    const char* name;
    TokenDistribution draft;
  };
  const Case cases[] = {
      {"a draft that disagrees", {{0, 1, 2, 3}, {0.4, 0.3, 0.2, 0.1}}},
      {"a draft missing tokens", {{0, 3}, {0.7, 0.3}}},
      {"a draft equal to the target", target},
      {"a deterministic drafter (one-hot)", {{2}, {1.0}}},
  };
  for (const Case& c : cases) {
    std::vector<std::size_t> counts(4, 0);
    std::size_t accepted = 0;
    for (std::size_t trial = 0; trial < kTrials; ++trial) {
      const std::int32_t drafted = c.draft.draw(uniform());
      DraftVerdict verdict = judge_draft(target, c.draft, drafted, uniform);
      accepted += verdict.accepted ? 1 : 0;
      ++counts[static_cast<std::size_t>(verdict.token)];
    }
    EXPECT_LT(chi_squared(counts, target.probabilities, kTrials), 16.27) << c.name;
    // The acceptance rate is sum(min(p, q)).
    double overlap = 0;
    for (std::int32_t token = 0; token < 4; ++token) {
      overlap += std::min(target.probability(token), c.draft.probability(token));
    }
    EXPECT_NEAR(static_cast<double>(accepted) / kTrials, overlap, 0.01) << c.name;
  }
}

TEST(SpeculativeSampling, JudgingByTheSamplerAppliesItsFiltersFirst) {
  // top_k 2 leaves tokens 1 and 3: a drafted 0 is always replaced, by 1 or 3 in proportion.
  SamplingParams params;
  params.top_k = 2;
  params.seed = 7;
  Sampler sampler(params);
  std::map<std::int32_t, int> counts;
  for (int trial = 0; trial < 4000; ++trial) {
    std::vector<float> logits = logits_of({0.5f, 1.0f, 0.0f, 2.0f});
    bool accepted = true;
    ++counts[sampler.judge(logits, {}, 0, nullptr, accepted).chosen.token];
    EXPECT_FALSE(accepted);
  }
  EXPECT_EQ(counts.size(), 2u);
  const double share = counts[3] / 4000.0, expected = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(share, expected, 0.03);
  // Greedy: accepted exactly when the drafted token is the largest logit.
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler exact(greedy);
  bool accepted = false;
  std::vector<float> logits = logits_of({0.5f, 1.0f, 0.0f, 2.0f});
  EXPECT_EQ(exact.judge(logits, {}, 3, nullptr, accepted).chosen.token, 3);
  EXPECT_TRUE(accepted);
  logits = logits_of({0.5f, 1.0f, 0.0f, 2.0f});
  EXPECT_EQ(exact.judge(logits, {}, 1, nullptr, accepted).chosen.token, 3);
  EXPECT_FALSE(accepted);
}

TEST(SpeculativeSampling, PromptLookupProposesWhatFollowedTheLatestMatch) {
  const std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5, 1, 2, 3, 9, 8, 1, 2, 3};
  // "1 2 3" last came before "9 8": the latest occurrence wins.
  EXPECT_EQ(propose_ngram(tokens, 1, 3, 2), (std::vector<std::int32_t>{9, 8}));
  EXPECT_EQ(propose_ngram(tokens, 1, 3, 10), (std::vector<std::int32_t>{9, 8, 1, 2, 3}));
  const std::vector<std::int32_t> fresh = {7, 7, 1, 6};
  EXPECT_TRUE(propose_ngram(fresh, 2, 4, 3).empty());  // no earlier "1 6", and 1-grams are not allowed
  EXPECT_EQ(propose_ngram(fresh, 1, 4, 3), std::vector<std::int32_t>{});  // "6" never came before
  EXPECT_EQ(propose_ngram({{7, 7}}, 1, 4, 3), std::vector<std::int32_t>{7});
  EXPECT_TRUE(propose_ngram({}, 1, 4, 3).empty());
  EXPECT_TRUE(propose_ngram({{5}}, 1, 4, 3).empty());
}

}  // namespace
}  // namespace slipway::llm
