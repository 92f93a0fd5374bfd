// The LLM candidate table on a random-weight model: every technique built and measured under the
// same load, the quality columns against the baseline, the objectives judged, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "slipway/optimize.h"
#include "support/test_support.h"

namespace slipway::optimize {
namespace {

TEST(LlmSlo, ParsesEachKindOfClause) {
  auto slo = parse_llm_slo("ttft_p95<=500ms, itl_p99<=80ms,cost<=0.05/1k,top1>=0.9");
  ASSERT_TRUE(slo.ok()) << slo.status().message();
  EXPECT_EQ(slo->time_to_first_token->statistic, "p95");
  EXPECT_DOUBLE_EQ(slo->time_to_first_token->limit_ms, 500.0);
  EXPECT_EQ(slo->inter_token_latency->statistic, "p99");
  EXPECT_DOUBLE_EQ(slo->inter_token_latency->limit_ms, 80.0);
  EXPECT_DOUBLE_EQ(*slo->cost_per_1k, 0.05);
  EXPECT_DOUBLE_EQ(*slo->top1_agreement, 0.9);
  EXPECT_TRUE(parse_llm_slo("itl_mean<=1s").ok());
  for (const char* bad : {"ttft<=5ms", "ttft_p90<=5ms", "ttft_max<=5ms", "itl_p95<=fast", "top1>=1.5", "top1>=nan",
                          "cost<=0.05", "p95<=5ms@10rps", "ttft_p95<=1s,ttft_p99<=2s", "tokens>=100"}) {
    EXPECT_FALSE(parse_llm_slo(bad).ok()) << bad;
  }
}

class LlmOptimizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    llm::TestModelShape shape;
    shape.embedding = 256;  // whole Q4_K super-blocks, so every quantization differs
    shape.feed_forward = 512;
    shape.context = 256;
    ASSERT_TRUE(llm::write_test_model(shape, llm::TensorType::kF16, 3, dir_.file("model.gguf")).ok());
    options_.model_path = dir_.file("model.gguf");
    options_.clients = 4;
    options_.requests = 8;
    options_.prompt_tokens = 32;
    options_.output_tokens = 16;
    options_.threads = 2;
  }
  testing::TempDir dir_;
  LlmOptimizeOptions options_;
};

TEST_F(LlmOptimizeTest, MeasuresEveryCandidateAndRecommendsTheCheapestThatMeetsTheObjectives) {
  options_.price_per_hour = 2.0;
  options_.slo = *parse_llm_slo("ttft_p95<=60s,itl_p95<=60s,top1>=0.5");
  options_.techniques = {"quantize", "kv", "speculative", "batching", "tensor-parallel"};
  options_.work_dir = dir_.file("candidates");
  std::filesystem::create_directories(options_.work_dir);
  auto report = optimize_llm(options_);
  ASSERT_TRUE(report.ok()) << report.status().message();
  std::map<std::string, LlmCandidateResult> by_name;
  for (const auto& candidate : report->candidates) {
    EXPECT_EQ(candidate.error, "") << candidate.name;
    by_name[candidate.name] = candidate;
  }
  for (const char* name :
       {"baseline", "quantize:q8_0", "quantize:q4_k", "quantize:q4_0", "kv:int8", "kv:fp8_e4m3", "speculative:ngram",
        "batching:seqs=1", "batching:seqs=2", "batching:tokens=128", "batching:tokens=2048", "tensor-parallel:2"}) {
    ASSERT_TRUE(by_name.contains(name)) << name;
    const LlmCandidateResult& candidate = by_name[name];
    EXPECT_EQ(candidate.completed, options_.requests) << name;
    EXPECT_GT(candidate.output_tokens_per_second, 0) << name;
    EXPECT_GT(candidate.time_to_first_token.p50, 0) << name;
    EXPECT_NEAR(candidate.cost_per_1k, 2.0 / 3600 / candidate.output_tokens_per_second * 1000, 1e-12) << name;
  }
  const LlmCandidateResult& baseline = report->candidates.front();
  EXPECT_EQ(baseline.name, "baseline");
  EXPECT_EQ(baseline.changes, 0);
  // Quantized weights and an int8 cache move the logits; the harder the quantization, the more.
  EXPECT_GT(by_name["quantize:q8_0"].max_logit_difference, 0);
  EXPECT_GT(by_name["quantize:q4_0"].rms_logit_difference, by_name["quantize:q8_0"].rms_logit_difference);
  EXPECT_LT(by_name["quantize:q4_0"].weight_bytes, by_name["quantize:q8_0"].weight_bytes);
  EXPECT_LT(by_name["quantize:q8_0"].weight_bytes, baseline.weight_bytes);
  EXPECT_GT(by_name["kv:int8"].max_logit_difference, 0);
  EXPECT_LT(by_name["kv:int8"].kv_cache_bytes, baseline.kv_cache_bytes);
  EXPECT_GT(by_name["kv:fp8_e4m3"].max_logit_difference, 0);
  EXPECT_EQ(by_name["kv:fp8_e4m3"].kv_cache_bytes, by_name["kv:int8"].kv_cache_bytes);
  EXPECT_EQ(by_name["speculative:ngram"].top1_agreement, 1.0);
  EXPECT_LT(by_name["tensor-parallel:2"].max_logit_difference, 1e-3);
  EXPECT_EQ(by_name["kv:int8"].serve_flags, "--kv-cache-dtype int8");
  EXPECT_EQ(by_name["kv:fp8_e4m3"].serve_flags, "--kv-cache-dtype fp8_e4m3");
  EXPECT_EQ(by_name["quantize:q4_k"].serve_flags, "");
  EXPECT_TRUE(std::filesystem::exists(by_name["quantize:q4_k"].model_path));
  EXPECT_TRUE(report->files_kept);
  // The recommendation: of those that meet every objective, within 2% of the cheapest, the fewest
  // changes, then the closest logits.
  ASSERT_GE(report->recommended, 0);
  const LlmCandidateResult& chosen = report->candidates[static_cast<std::size_t>(report->recommended)];
  EXPECT_TRUE(chosen.meets_slo);
  double cheapest = INFINITY;
  for (const auto& candidate : report->candidates) {
    if (candidate.meets_slo) cheapest = std::min(cheapest, candidate.cost_per_1k);
  }
  auto tied = [&](const LlmCandidateResult& candidate) { return 1 / candidate.cost_per_1k >= 0.98 / cheapest; };
  EXPECT_TRUE(tied(chosen));
  for (const auto& candidate : report->candidates) {
    if (candidate.meets_slo && tied(candidate)) {  // a tie within the noise: it must not be preferred
      EXPECT_TRUE(chosen.changes < candidate.changes || (chosen.changes == candidate.changes &&
                                                         chosen.rms_logit_difference <= candidate.rms_logit_difference))
          << chosen.name << " chosen over " << candidate.name;
    }
  }
}

TEST_F(LlmOptimizeTest, ObjectivesNoCandidateMeetsAreReportedClauseByClause) {
  options_.techniques = {"kv"};
  options_.slo = *parse_llm_slo("ttft_p50<=1us,top1>=1");
  auto report = optimize_llm(options_);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->candidates.size(), 3u);  // the baseline, kv:int8 and kv:fp8_e4m3
  EXPECT_EQ(report->candidates[2].name, "kv:fp8_e4m3");
  EXPECT_EQ(report->recommended, -1);
  EXPECT_NE(report->reason.find("none"), std::string::npos);
  const LlmCandidateResult& int8 = report->candidates[1];
  ASSERT_EQ(int8.failures.size(), 2u) << int8.name;
  EXPECT_NE(int8.failures[0].find("TTFT p50"), std::string::npos);
  EXPECT_NE(int8.failures[1].find("top-1 agreement"), std::string::npos);
  EXPECT_TRUE(std::isnan(int8.cost_per_1k));  // no price
  // No work folder given: the quantized files go with the run.
  EXPECT_FALSE(report->files_kept);
}

TEST_F(LlmOptimizeTest, RefusesWhatCannotBeMeasured) {
  LlmOptimizeOptions options = options_;
  options.techniques = {"prune"};
  EXPECT_EQ(optimize_llm(options).status().code(), StatusCode::kInvalidArgument);
  options = options_;
  options.slo = *parse_llm_slo("cost<=0.1/1k");
  EXPECT_EQ(optimize_llm(options).status().code(), StatusCode::kInvalidArgument);  // no price
  options = options_;
  options.prompt_tokens = 250;  // 250 + 16 past the context of 256
  EXPECT_EQ(optimize_llm(options).status().code(), StatusCode::kInvalidArgument);
  options = options_;
  options.requests = 0;
  EXPECT_EQ(optimize_llm(options).status().code(), StatusCode::kInvalidArgument);
  options = options_;
  options.model_path = dir_.file("missing.gguf");
  EXPECT_FALSE(optimize_llm(options).ok());
}

}  // namespace
}  // namespace slipway::optimize
